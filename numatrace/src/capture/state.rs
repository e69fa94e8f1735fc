//! The `state` sections of a capture: what a regression report is asked for besides the
//! counts, read at the start and the end of the window — the machine-wide state of
//! [`SystemState`] (vmstat, sysctls, tunables, nodes, THP, kernel config, command line) and,
//! for the busiest traced tasks, their `/proc/PID/sched` NUMA fields, `numa_maps` per node,
//! memory policies, allowed nodes and cpuset.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::kernel::sysstate::{KernelConfig, SystemState};
use crate::model::{Item, TaskRecord};
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
    tasks: BTreeMap<(u32, u64), BusyTask>,
    processes: BTreeMap<u32, BusyProcess>,
}

/// Whether the task still runs under this pid (`/proc/TGID/task/PID`).
fn alive(t: &TaskRecord) -> bool {
    std::path::Path::new(&format!("/proc/{}/task/{}", t.tgid, t.pid)).exists()
}

impl TaskReads {
    /// Reads (again) the state of `tasks` still alive. One the kernel side saw exit is not
    /// read: its pid may already be someone else's.
    pub fn refresh(&mut self, tasks: &[&TaskRecord], now_unix_s: f64) {
        for t in tasks.iter().filter(|t| !t.exited && alive(t)) {
            self.tasks.insert(
                t.key(),
                BusyTask {
                    comm: t.comm.clone(),
                    read_unix_s: now_unix_s,
                    exited: false,
                    task: TaskNuma::read(t.pid, t.tgid),
                },
            );
            self.processes.insert(
                t.tgid,
                BusyProcess {
                    comm: t.comm.clone(),
                    read_unix_s: now_unix_s,
                    exited: false,
                    process: ProcessNuma::read(t.tgid),
                },
            );
        }
    }

    /// Takes in what another `TaskReads` read (a refresh done off the recorder's loop).
    pub fn merge(&mut self, other: TaskReads) {
        self.tasks.extend(other.tasks);
        self.processes.extend(other.processes);
    }

    /// A state section for `tasks` (busiest first), from fresh reads where they are alive and
    /// from the last read of those that exited (or, never read, saying so).
    pub fn state(
        &mut self,
        phase: &str,
        tasks: &[&TaskRecord],
        note: String,
        now_unix_s: f64,
    ) -> State {
        // The machine first: its vmstat is the mmtests rows' end of the window, read before
        // the slow per-task reads.
        let system = SystemState::read();
        self.refresh(tasks, now_unix_s);
        let gone = "the task exited before numatrace read it";
        let mut busiest = Vec::new();
        let mut processes: Vec<BusyProcess> = Vec::new();
        for t in tasks {
            busiest.push(match self.tasks.get(&t.key()) {
                Some(b) => BusyTask {
                    exited: b.read_unix_s < now_unix_s,
                    ..b.clone()
                },
                None => BusyTask {
                    comm: t.comm.clone(),
                    read_unix_s: now_unix_s,
                    exited: true,
                    task: TaskNuma {
                        pid: t.pid,
                        tgid: t.tgid,
                        sched: Item::absent(gone),
                    },
                },
            });
            if processes.iter().any(|p| p.process.tgid == t.tgid) {
                continue;
            }
            processes.push(match self.processes.get(&t.tgid) {
                Some(p) => BusyProcess {
                    exited: p.read_unix_s < now_unix_s,
                    ..p.clone()
                },
                None => BusyProcess {
                    comm: t.comm.clone(),
                    read_unix_s: now_unix_s,
                    exited: true,
                    process: ProcessNuma {
                        tgid: t.tgid,
                        numa_maps: Item::absent(gone),
                        mems_allowed: Item::absent(gone),
                        cpus_allowed: Item::absent(gone),
                        cpuset: Item::absent(gone),
                    },
                },
            });
        }
        State {
            phase: phase.to_owned(),
            unix_s: now_unix_s,
            system,
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
    use crate::model::Counts;

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
        // The kernel side saw it exit: not read again (its pid may be reused), its last read
        // kept and marked.
        let gone = TaskRecord {
            exited: true,
            ..alive.clone()
        };
        let never = TaskRecord {
            exited: true,
            ..task(u32::MAX, 1, 0)
        };
        let s = reads.state("end", &[&gone, &never], "n".into(), 2.0);
        assert_eq!(s.phase, "end");
        assert_eq!(s.busiest.len(), 2);
        assert!(s.busiest[0].exited);
        assert_eq!(s.busiest[0].read_unix_s, 1.0);
        assert!(s.processes[0].process.mems_allowed.value().is_some());
        assert!(s.busiest[1].exited);
        assert_eq!(
            s.busiest[1].task.sched.why_absent(),
            Some("the task exited before numatrace read it")
        );
        assert!(s.system.vmstat.value().is_some());
        // Alive: read now, not exited.
        let s = reads.state("end", &[&alive], "n".into(), 3.0);
        assert!(!s.busiest[0].exited);
        assert_eq!(s.busiest[0].read_unix_s, 3.0);
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
