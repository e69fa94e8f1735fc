//! The peer: a bpftrace script that aggregates what numatrace aggregates, per task, on the same
//! hooks numatrace attached (fentry hooks as kfunc/kretfunc), for the overhead comparison.

use std::collections::HashSet;

use numatrace::{
    kernel::catalogue::HookKind,
    plan::{Mechanism, Plan},
};

/// numatrace's TNF_FAULT_LOCAL (task_numa_fault's flags).
const TNF_FAULT_LOCAL: u32 = numatrace_common::TNF_FAULT_LOCAL;

fn function_body(symbol: &str, hook: &str, fentry: bool) -> Vec<String> {
    let (entry, exit) = if fentry {
        (format!("kfunc:{symbol}"), format!("kretfunc:{symbol}"))
    } else {
        (format!("kprobe:{symbol}"), format!("kretprobe:{symbol}"))
    };
    let timed = |key: &str| {
        vec![
            format!("{entry} {{ @{key}_start[tid] = nsecs; }}"),
            format!(
                "{exit} /@{key}_start[tid]/ {{ @{key}_ns[tid] = sum(nsecs - @{key}_start[tid]); \
                 @{key}_calls[tid] = count(); delete(@{key}_start[tid]); }}"
            ),
        ]
    };
    match hook {
        "task_numa_work" => timed("scan"),
        "migration_entry_wait" => timed("wait"),
        "change_prot_numa" => vec![format!("{exit} {{ @ptes[tid] = sum(retval); }}")],
        "task_numa_fault" if fentry => vec![format!(
            "{entry} {{ @faults[tid] = count(); @fault_pages[tid] = sum(args->pages); \
             @fault_node[args->mem_node] = count(); \
             if (args->flags & {TNF_FAULT_LOCAL}) {{ @local[tid] = count(); }} }}"
        )],
        h if h.starts_with("migrate_misplaced") => {
            let mut v = timed("migrate");
            v.push(format!("{exit} {{ @migrate_result[retval] = count(); }}"));
            v
        }
        _ => vec![format!(
            "{entry} {{ @{}[tid] = count(); }}",
            hook.replace(['|', '-'], "_")
        )],
    }
}

/// The script for the hooks of `plan` that attached.
pub fn script(plan: &Plan, attached: &HashSet<String>) -> String {
    let mut lines = Vec::new();
    let mut exit_probe = None;
    for h in plan.hooks.iter().filter(|h| attached.contains(h.spec.name)) {
        match (h.spec.kind, h.symbol.as_deref()) {
            (HookKind::Tracepoint { category, name, .. }, _) => {
                let probe = format!("tracepoint:{category}:{name}");
                if name == "sched_process_exit" {
                    exit_probe = Some(probe);
                    continue;
                }
                lines.push(match name {
                    "sched_skip_vma_numa" => {
                        format!("{probe} {{ @skips[args->reason] = count(); }}")
                    }
                    "mm_migrate_pages" => format!(
                        "{probe} {{ @migrated[args->reason] = sum(args->succeeded); \
                         @migrate_failed[args->reason] = sum(args->failed); }}"
                    ),
                    _ => format!("{probe} {{ @{name}[tid] = count(); }}"),
                });
            }
            (HookKind::Function { .. }, Some(symbol)) => {
                let hook = if h.spec.name.starts_with("migrate_misplaced") {
                    "migrate_misplaced"
                } else {
                    h.spec.name
                };
                lines.extend(function_body(
                    symbol,
                    hook,
                    h.mechanism == Mechanism::Fentry,
                ));
            }
            // tp_btf's scan-sequence gap needs struct reads bpftrace has no equivalent of
            // without kernel headers; sampling is not event-driven.
            _ => {}
        }
    }
    // Exited tasks are forgotten, as numatrace hands over and frees their entry: every per-task
    // map the probes above define (bpftrace refuses a map no probe writes).
    if let Some(probe) = exit_probe {
        let script = lines.join("\n");
        let mut maps: Vec<&str> = script
            .match_indices('@')
            .filter_map(|(i, _)| {
                let rest = &script[i + 1..];
                let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
                rest[end..].starts_with("[tid]").then_some(&rest[..end])
            })
            .collect();
        maps.sort_unstable();
        maps.dedup();
        let deletes: String = maps
            .iter()
            .map(|m| format!(" delete(@{m}[tid]);"))
            .collect();
        lines.push(format!("{probe} {{{deletes} }}"));
    }
    // Printed from the event loop, which starts once every probe is attached.
    lines.push("interval:s:1 { if (@ready == 0) { printf(\"ready\\n\"); @ready = 1; } }".into());
    lines.push("END { clear(@ready); }".into());
    lines.join("\n")
}
