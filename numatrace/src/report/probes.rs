//! `numatrace probes`: every hook, the mechanism this kernel allows, and why not.

use serde::Serialize;

use super::table;
use crate::{
    bpf::loader::HookReport,
    kernel::facts::KernelFacts,
    text_escape::{Escaped, escape},
};

pub const SCHEMA: &str = "numatrace.probes/1";

#[derive(Serialize)]
pub struct ProbesReport<'a> {
    pub schema: &'static str,
    pub numatrace_version: &'static str,
    pub kernel: &'a KernelFacts,
    pub hooks: &'a [HookReport],
}

impl<'a> ProbesReport<'a> {
    pub fn new(kernel: &'a KernelFacts, hooks: &'a [HookReport]) -> Self {
        Self {
            schema: SCHEMA,
            numatrace_version: env!("CARGO_PKG_VERSION"),
            kernel,
            hooks,
        }
    }

    pub fn to_text(&self) -> String {
        let k = self.kernel;
        let yes = |b: bool| if b { "yes" } else { "no" };
        let mut out = format!(
            "kernel {}: BTF {}, kprobes {}, tracefs {}{}, {} NUMA node{}, numa_balancing={}\n\n",
            Escaped(&k.release),
            yes(k.btf_vmlinux),
            yes(k.kprobes),
            Escaped(k.tracefs.as_deref().unwrap_or("unavailable")),
            if k.tracefs_mounted_by_us {
                " (mounted by numatrace)"
            } else {
                ""
            },
            k.numa_nodes,
            if k.numa_nodes == 1 { "" } else { "s" },
            k.numa_balancing
                .map_or("unknown".to_owned(), |v| v.to_string()),
        );
        let mut rows = vec![vec![
            "HOOK".to_owned(),
            "MECHANISM".into(),
            "ATTACHED".into(),
            "WHY NOT / NOTES".into(),
        ]];
        for h in self.hooks {
            // A hook with alternative symbols shows the one this kernel has.
            let name = match &h.symbol {
                Some(s) if h.name.contains('|') => format!("{} [{}]", Escaped(&h.name), Escaped(s)),
                _ => escape(&h.name).into_owned(),
            };
            rows.push(vec![
                name,
                h.mechanism.to_string(),
                yes(h.attached).into(),
                escape(&h.reasons.join("; ")).into_owned(),
            ]);
        }
        out.push_str(&table(&rows));
        let attached = self.hooks.iter().filter(|h| h.attached).count();
        out.push_str(&format!(
            "\n{attached} of {} hooks attached. MECHANISM is the best this kernel allows; \
             a hook with a mechanism that is not attached failed to load or attach (see why).\n",
            self.hooks.len()
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Mechanism;

    #[test]
    fn text_escapes_what_the_kernel_and_symbols_say() {
        let facts = KernelFacts {
            release: "6.18\x1b[2J".into(),
            tracefs: Some("/sys/kernel/tracing\u{202e}".into()),
            ..KernelFacts::default()
        };
        let hooks = [HookReport {
            name: "migrate_misplaced_folio|_page".into(),
            kind: "function".into(),
            mechanism: Mechanism::Fentry,
            symbol: Some("migrate_misplaced_folio\x07".into()),
            attached: false,
            reasons: vec!["refused\r\nfake line".into()],
            what: String::new(),
        }];
        let t = ProbesReport::new(&facts, &hooks).to_text();
        assert!(
            !t.chars()
                .any(|c| c != '\n' && c != '\\' && crate::text_escape::needs_escape(c)),
            "{t:?}"
        );
        assert!(t.starts_with("kernel 6.18\\x1b[2J: "), "{t}");
        assert!(t.contains("tracefs /sys/kernel/tracing\\u{202e},"), "{t}");
        assert!(t.contains("[migrate_misplaced_folio\\x07]"), "{t}");
        assert!(t.contains("refused\\r\\nfake line"), "{t}");
    }
}
