//! The `state` sections of a capture: what a regression report is asked for besides the
//! counts, read at the start and the end of the window — the machine-wide state of
//! [`SystemState`] (vmstat, sysctls, tunables, nodes, THP, kernel config, command line) and,
//! for the busiest traced tasks, their `/proc/PID/sched` NUMA fields, `numa_maps` per node,
//! memory policies, allowed nodes and cpuset.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::kernel::sysstate::{KernelConfig, SystemState};
use crate::model::TaskRecord;
pub use crate::sources::task_numa::{NumaMaps, ProcessNuma, TaskNuma};

/// Tasks whose procfs state a capture keeps at each end (reading `numa_maps` walks the
/// process's page tables under its mmap lock: a few processes, not all).
pub const BUSIEST: usize = 8;

/// One `state` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    /// `start` or `end`.
    pub phase: String,
    pub unix_s: f64,
    pub system: SystemState,
    /// The tasks read, busiest first, and how they were chosen.
    pub busiest: Vec<BusyTask>,
    pub processes: Vec<BusyProcess>,
    pub busiest_note: String,
}

/// A task's scheduler NUMA state, with when it was read (an exited task keeps its last read).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BusyTask {
    pub comm: String,
    pub read_unix_s: f64,
    /// Exited before the end of the window: the state is from its last read.
    pub exited: bool,
    pub task: TaskNuma,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BusyProcess {
    pub comm: String,
    pub read_unix_s: f64,
    pub exited: bool,
    pub process: ProcessNuma,
}

/// How busy a task was with NUMA balancing: what it cost the kernel (PTE updates, hint
/// faults, pages migrated).
fn weight(t: &TaskRecord) -> u64 {
    let c = &t.counts;
    c.scan
        .pte_updates
        .saturating_add(c.hint_faults.faults)
        .saturating_add(c.migrations.pages_ok)
}

/// The busiest `n` tasks that did any NUMA balancing work, busiest first (pid breaks ties).
pub fn busiest(tasks: &[TaskRecord], n: usize) -> Vec<&TaskRecord> {
    let mut v: Vec<&TaskRecord> = tasks.iter().filter(|t| weight(t) > 0).collect();
    v.sort_by(|a, b| weight(b).cmp(&weight(a)).then(a.pid.cmp(&b.pid)));
    v.truncate(n);
    v
}

/// Reads of the tasks' and processes' procfs state, kept so that a task that exits before the
/// end still has its last state in the `end` section.
#[derive(Default)]
pub struct TaskReads {
    tasks: BTreeMap<u32, BusyTask>,
    processes: BTreeMap<u32, BusyProcess>,
}

impl TaskReads {
    /// Reads (again) the state of `tasks` that are still alive.
    pub fn refresh(&mut self, tasks: &[&TaskRecord], now_unix_s: f64) {
        for t in tasks {
            let task = TaskNuma::read(t.pid, t.tgid);
            // A task gone by now keeps what an earlier read saw.
            if task.sched.value().is_some() || !self.tasks.contains_key(&t.pid) {
                self.tasks.insert(
                    t.pid,
                    BusyTask {
                        comm: t.comm.clone(),
                        read_unix_s: now_unix_s,
                        exited: false,
                        task,
                    },
                );
            }
            let process = ProcessNuma::read(t.tgid);
            if process.numa_maps.value().is_some() || !self.processes.contains_key(&t.tgid) {
                self.processes.insert(
                    t.tgid,
                    BusyProcess {
                        comm: t.comm.clone(),
                        read_unix_s: now_unix_s,
                        exited: false,
                        process,
                    },
                );
            }
        }
    }

    /// A state section for `tasks` (busiest first), from fresh reads where they are alive and
    /// from the last read of those that exited.
    pub fn state(
        &mut self,
        phase: &str,
        tasks: &[&TaskRecord],
        note: String,
        now_unix_s: f64,
    ) -> State {
        self.refresh(tasks, now_unix_s);
        let mut busiest = Vec::new();
        let mut processes: Vec<BusyProcess> = Vec::new();
        for t in tasks {
            if let Some(b) = self.tasks.get(&t.pid) {
                let mut b = b.clone();
                b.exited = b.read_unix_s < now_unix_s || t.exited;
                busiest.push(b);
            }
            if !processes.iter().any(|p| p.process.tgid == t.tgid)
                && let Some(p) = self.processes.get(&t.tgid)
            {
                let mut p = p.clone();
                p.exited = p.read_unix_s < now_unix_s;
                processes.push(p);
            }
        }
        State {
            phase: phase.to_owned(),
            unix_s: now_unix_s,
            system: SystemState::read(),
            busiest,
            processes,
            busiest_note: note,
        }
    }
}

impl State {
    /// What `--redact` hides: the tasks' names, the cpuset paths, and kernel command-line
    /// parameters other than the ones that steer NUMA, THP and preemption.
    pub fn redact(&mut self, r: &super::redact::Redactor) {
        for t in &mut self.busiest {
            t.comm = r.name(&t.comm);
        }
        for p in &mut self.processes {
            p.comm = r.name(&p.comm);
            if let Some(c) = p.process.cpuset.value_mut() {
                *c = r.path(c);
            }
        }
        if let Some(line) = self.system.cmdline.value_mut() {
            *line = redact_cmdline(line);
        }
    }

    /// A counter of `/proc/vmstat` when this state was read.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.system.counter(name)
    }
}

/// Kernel parameters a NUMA-balancing report may need; the others (root devices, network
/// addresses, …) are dropped by `--redact`.
const KEPT_PARAMS: &[&str] = &[
    "numa",
    "numa_balancing",
    "transparent_hugepage",
    "thp_anon",
    "preempt",
    "hugepages",
    "hugepagesz",
    "default_hugepagesz",
    "isolcpus",
    "nohz_full",
    "movablecore",
    "kernelcore",
    "mitigations",
    "nr_cpus",
    "maxcpus",
];

fn redact_cmdline(line: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let mut dropped = 0;
    for p in line.split_whitespace() {
        let name = p.split('=').next().unwrap_or(p);
        if KEPT_PARAMS.contains(&name) {
            kept.push(p);
        } else {
            dropped += 1;
        }
    }
    if dropped > 0 {
        format!("{} (+{dropped} parameters redacted)", kept.join(" "))
            .trim_start()
            .to_owned()
    } else {
        kept.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Counts, Item};

    fn task(pid: u32, faults: u64, ptes: u64) -> TaskRecord {
        let mut counts = Counts::default();
        counts.hint_faults.faults = faults;
        counts.scan.pte_updates = ptes;
        TaskRecord {
            pid,
            tgid: pid,
            comm: format!("t{pid}"),
            exited: false,
            cgroup_id: 0,
            cgroup: None,
            preferred_node: None,
            last_node: None,
            first_ns: 0,
            counts,
        }
    }

    #[test]
    fn the_busiest_are_those_that_cost_the_kernel_most() {
        let tasks = [task(1, 0, 0), task(2, 5, 0), task(3, 1, 100), task(4, 5, 0)];
        let b: Vec<u32> = busiest(&tasks, 2).iter().map(|t| t.pid).collect();
        assert_eq!(b, [3, 2]);
        assert_eq!(busiest(&tasks, 8).len(), 3);
    }

    #[test]
    fn a_task_that_exits_keeps_its_last_read() {
        let me = std::process::id();
        let mut alive = task(me, 1, 0);
        alive.tgid = me;
        let mut reads = TaskReads::default();
        reads.refresh(&[&alive], 1.0);
        // The same pid, read again after it "exited" (a tgid that cannot exist).
        let gone = TaskRecord {
            tgid: u32::MAX,
            exited: true,
            ..alive.clone()
        };
        let s = reads.state("end", &[&gone], "n".into(), 2.0);
        assert_eq!(s.phase, "end");
        assert_eq!(s.busiest.len(), 1);
        assert!(s.busiest[0].exited);
        assert!(s.system.vmstat.value().is_some() || cfg!(not(target_os = "linux")));
    }

    #[test]
    fn redaction_hides_names_paths_and_foreign_parameters() {
        let r = super::super::redact::Redactor::new();
        let mut s = State {
            busiest: vec![BusyTask {
                comm: "secret-job".into(),
                ..BusyTask::default()
            }],
            processes: vec![BusyProcess {
                comm: "secret-job".into(),
                process: ProcessNuma {
                    cpuset: Item::Present("/customer/acme".into()),
                    ..ProcessNuma::default()
                },
                ..BusyProcess::default()
            }],
            ..State::default()
        };
        s.system.cmdline = Item::Present(
            "BOOT_IMAGE=/vmlinuz root=UUID=abc nfsroot=10.0.0.1:/x numa_balancing=enable \
             transparent_hugepage=madvise"
                .into(),
        );
        s.redact(&r);
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("secret"), "{json}");
        assert!(
            !json.contains("acme") && !json.contains("customer"),
            "{json}"
        );
        assert!(
            !json.contains("10.0.0.1") && !json.contains("UUID"),
            "{json}"
        );
        assert_eq!(
            s.system.cmdline.value().unwrap(),
            "numa_balancing=enable transparent_hugepage=madvise (+3 parameters redacted)"
        );
    }
}
