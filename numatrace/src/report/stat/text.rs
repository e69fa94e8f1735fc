//! The text form of the `stat` report, for people.

use super::StatReport;
use crate::model::Scope;
use crate::report::{
    measured::{Feed, Measured},
    table,
    words::{self, pct, reasons, scan_share},
};
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

        let m = self.measured();
        self.push_tasks(&m, max_rows, &mut out);
        out.push('\n');
        // The tiering block below says the tiering counters.
        let tiering: Vec<&str> = numatrace_common::COUNTERS
            .iter()
            .filter(|d| d.group == "tiering")
            .map(|d| d.path)
            .collect();
        for line in words::lines(&self.totals, &m, &tiering) {
            out.push_str(&line.joined());
            out.push('\n');
        }
        if !self.node_matrix.is_empty() {
            out.push_str(&format!(
                "migrations by node: {}\n",
                self.node_matrix
                    .iter()
                    .map(|f| format!(
                        "{}->{} {} ok/{} failed ({} pages)",
                        f.src.map_or("?".into(), |s| s.to_string()),
                        f.dst,
                        m.cell(Feed::MigrateMisplaced, f.migrated),
                        m.cell(Feed::MigrateMisplaced, f.not_migrated),
                        m.cell(Feed::HintFaults, f.pages)
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
        self.push_cgroups(&m, &mut out);
        self.push_nodes(&m, &mut out);
        if !self.tiering.is_quiet() {
            out.push_str(&self.tiering.to_text());
        }
        let s = &self.self_counts;
        out.push_str(&format!(
            "numatrace itself (not in the tables above; the kernel counts it): {} PTE updates, \
             {} hint faults, {} pages migrated, {} scan calls, {} skipped VMAs\n",
            m.cell(Feed::Pte, s.scan.pte_updates),
            m.cell(Feed::HintFaults, s.hint_faults.faults),
            m.cell(Feed::HintFaults, s.hint_faults.migrated_pages),
            m.cell(Feed::Scan, s.scan.calls),
            m.cell(Feed::SkipVma, s.skipped_vmas_total),
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

    /// The task table (unmeasured cells `-`).
    fn push_tasks(&self, m: &Measured, max_rows: usize, out: &mut String) {
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
            let c = &t.counts();
            let p = &c.placement;
            rows.push(vec![
                t.pid.to_string(),
                t.tgid.to_string(),
                format!("{}{}", Escaped(&t.comm), if t.exited { "*" } else { "" }),
                scan_share(c),
                m.cell(Feed::Pte, c.scan.pte_updates),
                m.cell(Feed::HintFaults, c.hint_faults.faults),
                m.cell(
                    Feed::HintFaults,
                    pct(c.hint_faults.local, c.hint_faults.faults),
                ),
                m.cell(Feed::SkipVma, c.skipped_vmas_total),
                m.cell(Feed::Moves, p.moves),
                m.cell(Feed::Swaps, format!("{}/{}", p.swaps_out, p.swaps_in)),
                m.cell(Feed::Sticks, p.sticks),
                m.cell(Feed::MigratePages, c.migrations.pages_ok),
                m.cell(Feed::MigratePages, c.migrations.pages_failed),
                m.cell(Feed::SkipVma, reasons(&c.skipped_vmas)),
            ]);
        }
        if self.tasks.is_empty() {
            out.push_str("no NUMA balancing activity recorded for the traced tasks\n");
            return;
        }
        out.push_str(&table(&rows));
        if self.tasks.len() > max_rows {
            out.push_str(&format!(
                "... {} more tasks (--json lists all)\n",
                self.tasks.len() - max_rows
            ));
        }
        out.push_str(&format!(
            "(* exited; SCAN% measured, or ~ sampled; SWAPS = initiated/received{})\n",
            if m.complete() {
                ""
            } else {
                "; - not measured: its hook did not attach"
            }
        ));
    }

    fn push_cgroups(&self, m: &Measured, out: &mut String) {
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
                    m.cell(Feed::Pte, c.counts.scan.pte_updates),
                    m.cell(Feed::HintFaults, c.counts.hint_faults.faults),
                    m.cell(Feed::SkipVma, c.counts.skipped_vmas_total)
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

    fn push_nodes(&self, m: &Measured, out: &mut String) {
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
                m.cell(Feed::HintFaults, n.hint_faults),
                m.cell(Feed::HintFaults, pct(n.hint_faults_local, n.hint_faults)),
                m.cell(Feed::HintFaults, n.pages_migrated_in),
                m.cell(Feed::MigratedFrom, n.pages_migrated_out),
                n.tasks_preferring.to_string(),
                n.tasks_last_ran.to_string(),
            ]);
        }
        out.push_str("by node (hint faults by the node of the faulting CPU; pages migrated by hint faults):\n");
        out.push_str(&table(&rows));
    }
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

    fn without(missing: &[&str]) -> super::StatReport {
        let mut r = super::super::tests::sample();
        r.hooks = crate::report::measured::tests::all_but(missing);
        r
    }

    #[test]
    fn hint_faults_without_their_hook_are_not_measured_not_zero() {
        let t = without(&["task_numa_fault"]).to_text(20);
        assert!(
            t.contains("\nhint faults: not measured: task_numa_fault not attached; COW-shared: 0 (migrated: 0);"),
            "{t}"
        );
        assert!(!t.contains("hint faults: 0"), "{t}");
        assert!(
            t.contains(
                "): 0 PTE updates, - hint faults, - pages migrated, 0 scan calls, 0 skipped VMAs"
            ),
            "{t}"
        );
        assert!(
            t.contains("1 task: 0 PTEs, - hint faults, 6 skipped VMAs"),
            "{t}"
        );
        assert!(t.contains("- not measured: its hook did not attach"), "{t}");
        let row = t.lines().find(|l| l.starts_with("100 ")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        // PID TGID COMM SCAN% PTES HINTS LOCAL% SKIPPED
        assert_eq!(cells[5..8], ["-", "-", "6"], "{row}");
    }

    #[test]
    fn a_sampling_only_kernel_says_what_it_lacks() {
        let t = without(&[
            "task_numa_work",
            "change_prot_numa",
            "task_numa_fault",
            "mpol_misplaced",
            "migrate_misplaced_folio|_page",
            "migration_entry_wait",
        ])
        .to_text(20);
        assert!(
            t.contains(
                "\nscan: task_numa_work: not measured: task_numa_work not attached; share: -; \
                 change_prot_numa: not measured: change_prot_numa not attached\n"
            ),
            "{t}"
        );
        assert!(
            t.contains(
                "\nhint faults: not measured: task_numa_fault not attached; COW-shared: not measured: \
                 mpol_misplaced not attached; migrate_misplaced: not measured: \
                 migrate_misplaced_folio|_page not attached; migration stalls: not measured: \
                 migration_entry_wait not attached\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("totals: skipped VMAs: 6 (shared_ro=4 inaccessible=2); moves: 0;"),
            "{t}"
        );
        assert!(
            t.contains(
                "): - PTE updates, - hint faults, - pages migrated, - scan calls, 0 skipped VMAs"
            ),
            "{t}"
        );
        for zero in ["hint faults: 0", "0 PTEs", "0 task_numa_work", "scan: 0"] {
            assert!(!t.contains(zero), "{zero} in {t}");
        }
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
