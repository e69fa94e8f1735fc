//! `numatrace probes`: every hook, the mechanism this kernel allows, and why not.

use serde::Serialize;

use super::table;
use crate::{bpf::loader::HookReport, kernel::facts::KernelFacts};

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
            k.release,
            yes(k.btf_vmlinux),
            yes(k.kprobes),
            k.tracefs.as_deref().unwrap_or("unavailable"),
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
                Some(s) if h.name.contains('|') => format!("{} [{s}]", h.name),
                _ => h.name.to_owned(),
            };
            rows.push(vec![
                name,
                h.mechanism.to_string(),
                yes(h.attached).into(),
                h.reasons.join("; "),
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
