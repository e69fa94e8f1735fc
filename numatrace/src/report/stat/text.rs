//! The text form of the `stat` report, for people.

use super::StatReport;
use crate::model::Scope;
use crate::model::{Counts, SkipCounts};
use crate::report::table;
use crate::text_escape::{Escaped, escape};

impl StatReport {
    pub fn to_text(&self, max_rows: usize) -> String {
        let w = &self.window;
        let scope = match w.scope {
            Scope::System => "system-wide".to_owned(),
            Scope::Pid => format!("pid {} and its children", w.pid.unwrap_or(0)),
            Scope::Command => format!(
                "command `{}`{}",
                w.command
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .map(|a| escape(a))
                    .collect::<Vec<_>>()
                    .join(" "),
                w.exit_code
                    .map_or(String::new(), |c| format!(" (exit {c})"))
            ),
        };
        let mut out = format!(
            "numatrace stat: {:.1} s, {scope}{}{}, kernel {} ({} NUMA node{}, numa_balancing={})\n",
            w.duration_s,
            w.comm_filter
                .as_ref()
                .map_or(String::new(), |c| format!(", comm {}", Escaped(c))),
            w.cgroup_filter
                .as_ref()
                .map_or(String::new(), |c| format!(", cgroup {}", Escaped(c))),
            Escaped(&self.kernel.release),
            self.kernel.numa_nodes,
            if self.kernel.numa_nodes == 1 { "" } else { "s" },
            self.kernel
                .numa_balancing
                .map_or("?".into(), |v| v.to_string()),
        );
        let attached: Vec<_> = self.hooks.iter().filter(|h| h.attached).collect();
        out.push_str(&format!(
            "hooks: {} of {} attached ({}); `numatrace probes` says why not\n",
            attached.len(),
            self.hooks.len(),
            attached
                .iter()
                .map(|h| escape(&h.name))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if self.kernel.numa_balancing == Some(0) {
            out.push_str(
                "note: kernel.numa_balancing is 0: NUMA balancing is off, nothing to see\n",
            );
        }
        out.push('\n');

        let mut rows = vec![
            [
                "PID",
                "TGID",
                "COMM",
                "SCAN%",
                "PTES",
                "HINTS",
                "LOCAL%",
                "SKIPPED",
                "MOVES",
                "SWAPS",
                "STICKS",
                "MIGRATED",
                "MIG_FAIL",
                "SKIPPED BY REASON",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for t in self.tasks.iter().take(max_rows) {
            let c = &t.counts;
            rows.push(vec![
                t.pid.to_string(),
                t.tgid.to_string(),
                format!("{}{}", Escaped(&t.comm), if t.exited { "*" } else { "" }),
                scan_share(c),
                c.scan.pte_updates.to_string(),
                c.hint_faults.faults.to_string(),
                pct(c.hint_faults.local, c.hint_faults.faults),
                c.skipped_vmas_total.to_string(),
                c.placement.moves.to_string(),
                format!("{}/{}", c.placement.swaps_out, c.placement.swaps_in),
                c.placement.sticks.to_string(),
                c.migrations.pages_ok.to_string(),
                c.migrations.pages_failed.to_string(),
                reasons(&c.skipped_vmas),
            ]);
        }
        if self.tasks.is_empty() {
            out.push_str("no NUMA balancing activity recorded for the traced tasks\n");
        } else {
            out.push_str(&table(&rows));
            if self.tasks.len() > max_rows {
                out.push_str(&format!(
                    "... {} more tasks (--json lists all)\n",
                    self.tasks.len() - max_rows
                ));
            }
            out.push_str("(* exited; SCAN% measured, or ~ sampled; SWAPS = initiated/received)\n");
        }

        let t = &self.totals;
        out.push_str(&format!(
            "\ntotals: {} skipped VMAs ({}); placement: {} moves, {}/{} swaps, {} sticks ({} without target); \
             NUMA migrations: {} pages ok, {} failed in {} calls (THP {} ok, {} failed)\n",
            t.skipped_vmas_total,
            if t.skipped_vmas.is_empty() { "-".into() } else { reasons(&t.skipped_vmas) },
            t.placement.moves,
            t.placement.swaps_out,
            t.placement.swaps_in,
            t.placement.sticks,
            t.placement.stick_no_target,
            t.migrations.pages_ok,
            t.migrations.pages_failed,
            t.migrations.calls,
            t.migrations.thp_ok,
            t.migrations.thp_failed,
        ));
        out.push_str(&format!(
            "scan: {} task_numa_work calls, {} in them (longest {}), share {}; {} PTEs updated in {} change_prot_numa calls; \
             node_stamp advanced {} for {} of scan runtime; {} node_stamp>runtime violations\n",
            t.scan.calls,
            ns(t.scan.time_ns),
            ns(t.scan.max_ns),
            scan_share(t),
            t.scan.pte_updates,
            t.scan.prot_numa_calls,
            ns(t.scan.node_stamp_advance_ns),
            ns(t.scan.runtime_in_scan_ns),
            t.scan.stamp_violations,
        ));
        let h = &t.hint_faults;
        out.push_str(&format!(
            "hint faults: {} ({} local, {} remote; {} 4K, {} THP, {} large folio; {} pages), {} pages migrated, {} failed; \
             {} on COW-shared pages ({} migrated); migrate_misplaced: {} calls, {} migrated, mean {}; {} migration stalls ({})\n",
            h.faults,
            h.local,
            h.remote,
            h.faults_4k,
            h.faults_thp,
            h.faults_large,
            h.pages,
            h.migrated_pages,
            h.migrate_failed,
            h.cow_shared,
            h.cow_shared_migrated,
            t.migrations.attempts,
            t.migrations.succeeded,
            t.migrations
                .latency_ns_mean
                .map_or("-".into(), |m| ns(m as u64)),
            t.migrations.stalls,
            ns(t.migrations.stall_ns),
        ));
        if !self.node_matrix.is_empty() {
            out.push_str(&format!(
                "migrations by node: {}\n",
                self.node_matrix
                    .iter()
                    .map(|f| format!(
                        "{}->{} {} ok/{} failed ({} pages)",
                        f.src.map_or("?".into(), |s| s.to_string()),
                        f.dst,
                        f.migrated,
                        f.not_migrated,
                        f.pages
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut vmas: Vec<_> = self
            .processes
            .iter()
            .flat_map(|p| p.vmas.iter().map(move |v| (p, v)))
            .collect();
        vmas.sort_by_key(|(_, v)| std::cmp::Reverse(v.pte_updates));
        if vmas.first().is_some_and(|(_, v)| v.pte_updates > 0) {
            out.push_str(&format!(
                "most scanned VMAs: {}\n",
                vmas.iter()
                    .take(3)
                    .map(|(p, v)| format!(
                        "{} {}-{} {} ({} PTEs)",
                        p.tgid,
                        Escaped(&v.start),
                        Escaped(&v.end),
                        Escaped(v.mapping.as_deref().unwrap_or("?")),
                        v.pte_updates
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        // Seed 002's view: VMAs skipped as inactive, longest unscanned first.
        let mut idle: Vec<_> = vmas
            .iter()
            .filter_map(|(p, v)| v.pid_inactive.map(|g| (p, v, g)))
            .collect();
        idle.sort_by_key(|(_, _, g)| std::cmp::Reverse(g.max_gap));
        if !idle.is_empty() {
            out.push_str(&format!(
                "longest unscanned VMAs (pid_inactive skips: scan sequences since last scan / threads): {}\n",
                idle.iter()
                    .take(3)
                    .map(|(p, v, g)| format!(
                        "{} {}-{} {}/{}{}",
                        p.tgid,
                        Escaped(&v.start),
                        Escaped(&v.end),
                        g.max_gap,
                        g.max_gap_threads,
                        if g.over_threads > 0 {
                            format!(" ({} skips beyond the thread count)", g.over_threads)
                        } else {
                            String::new()
                        }
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        self.push_cgroups(&mut out);
        self.push_nodes(&mut out);
        let s = &self.self_counts;
        out.push_str(&format!(
            "numatrace itself (not in the tables above; the kernel counts it): {} PTE updates, \
             {} hint faults, {} pages migrated, {} scan calls, {} skipped VMAs\n",
            s.scan.pte_updates,
            s.hint_faults.faults,
            s.hint_faults.migrated_pages,
            s.scan.calls,
            s.skipped_vmas_total,
        ));
        out.push_str(&format!(
            "kernel /proc/vmstat (system-wide): {}\n",
            self.vmstat_delta
                .iter()
                .map(|(k, v)| format!("{} +{v}", Escaped(k)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let d = &self.dropped;
        if d.total == 0 {
            out.push_str("dropped: 0 (complete)\n");
        } else {
            let parts: Vec<String> = d
                .parts()
                .iter()
                .map(|(what, n)| format!("{what} {n}"))
                .collect();
            out.push_str(&format!(
                "dropped: {} ({}){}\n",
                d.total,
                parts.join(", "),
                if d.total > d.program_misses {
                    ": raise --max-tasks / --max-vmas / --ringbuf-size"
                } else {
                    // Nothing to raise: the kernel skips a program already running on a CPU.
                    " (the kernel's recursion protection; see docs/kernels.md)"
                }
            ));
        }
        out
    }

    fn push_cgroups(&self, out: &mut String) {
        if self.cgroups.is_empty() {
            return;
        }
        out.push_str(&format!(
            "by cgroup: {}{}\n",
            self.cgroups
                .iter()
                .take(5)
                .map(|c| format!(
                    "{} ({} task{}: {} PTEs, {} hint faults, {} skipped VMAs)",
                    Escaped(c.path.as_deref().unwrap_or("?")),
                    c.tasks,
                    if c.tasks == 1 { "" } else { "s" },
                    c.counts.scan.pte_updates,
                    c.counts.hint_faults.faults,
                    c.counts.skipped_vmas_total
                ))
                .collect::<Vec<_>>()
                .join(", "),
            if self.cgroups.len() > 5 {
                format!(", ... {} more (--json lists all)", self.cgroups.len() - 5)
            } else {
                String::new()
            }
        ));
    }

    fn push_nodes(&self, out: &mut String) {
        if self.nodes.is_empty() {
            return;
        }
        let mut rows = vec![
            [
                "NODE",
                "CPUS",
                "MEM",
                "HINTS",
                "LOCAL%",
                "PAGES_IN",
                "PAGES_OUT",
                "PREFERRING",
                "LAST_RAN",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for n in &self.nodes {
            rows.push(vec![
                n.node.to_string(),
                escape(&n.cpus).into_owned(),
                n.mem_total_bytes
                    .map_or("-".into(), |b| format!("{} MiB", b >> 20)),
                n.hint_faults.to_string(),
                pct(n.hint_faults_local, n.hint_faults),
                n.pages_migrated_in.to_string(),
                n.pages_migrated_out.to_string(),
                n.tasks_preferring.to_string(),
                n.tasks_last_ran.to_string(),
            ]);
        }
        out.push_str("by node (hint faults by the node of the faulting CPU; pages migrated by hint faults):\n");
        out.push_str(&table(&rows));
    }
}

fn pct(n: u64, d: u64) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.0}", 100.0 * n as f64 / d as f64)
    }
}

/// Measured share, else the sampled estimate marked with `~`, else `-`.
fn scan_share(c: &Counts) -> String {
    match (c.scan.share, c.scan.sampled_share) {
        (Some(s), _) => format!("{:.2}", s * 100.0),
        (None, Some(s)) => format!("~{:.2}", s * 100.0),
        _ => "-".into(),
    }
}

fn ns(v: u64) -> String {
    match v {
        0..1_000 => format!("{v} ns"),
        1_000..1_000_000 => format!("{:.1} us", v as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} ms", v as f64 / 1e6),
        _ => format!("{:.2} s", v as f64 / 1e9),
    }
}

fn reasons(m: &SkipCounts) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_names_reasons_self_cgroups_and_completeness() {
        let t = super::super::tests::sample().to_text(20);
        assert!(t.contains("command `app -x` (exit 0)"), "{t}");
        assert!(t.contains("shared_ro=4 inaccessible=2"), "{t}");
        assert!(t.contains("dropped: 0 (complete)"), "{t}");
        assert!(t.contains("numa_hint_faults +3"), "{t}");
        assert!(t.contains("numatrace itself"), "{t}");
        assert!(t.contains("3 hint faults"), "{t}");
        assert!(t.contains("by cgroup: /app.slice (1 task"), "{t}");
    }

    #[test]
    fn text_escapes_strings_from_proc() {
        let mut r = super::super::tests::sample();
        r.tasks[0].comm = "\x1b]0;pwn\x07x".into();
        r.cgroups[0].path = Some("/a\u{9b}2J.slice".into());
        r.window.command = Some(vec!["sh".into(), "-c".into(), "printf '\x1b[2J'".into()]);
        let t = r.to_text(20);
        assert!(
            !t.chars()
                .any(|c| c != '\n' && c != '\\' && crate::text_escape::needs_escape(c)),
            "{t:?}"
        );
        assert!(t.contains(" \\x1b]0;pwn\\x07x "), "{t}");
        assert!(t.contains("by cgroup: /a\\u{9b}2J.slice ("), "{t}");
        assert!(t.contains("command `sh -c printf '\\x1b[2J'`"), "{t}");
    }
}
