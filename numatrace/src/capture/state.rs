//! The `state` sections of a capture: what a regression report is asked for besides the
//! counts, read at the start and the end of the window — the machine-wide state of
//! [`SystemState`] (vmstat, sysctls, tunables, nodes, THP, kernel config, command line) and,
//! for the recorded command (or the `--pid` process) and the busiest traced tasks, their
//! `/proc/PID/sched` NUMA fields, `numa_maps` per node, memory policies, allowed nodes and
//! cpuset.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::kernel::sysstate::{KernelConfig, SystemState};
use crate::model::{Item, TaskRecord};
pub use crate::sources::task_numa::{NumaMaps, ProcessNuma, TaskNuma};
use crate::{kernel::tunables, sources::procfs::process_alive};

/// Tasks whose procfs state a capture keeps at each end (reading `numa_maps` walks the
/// process's page tables under its mmap lock: a few processes, not all).
pub const BUSIEST: usize = 8;

/// Why a task or process is in a state section (`chosen`).
pub const CHOSEN_COMMAND: &str = "the recorded command";
pub const CHOSEN_PID: &str = "the --pid process";
pub const CHOSEN_FOLLOWED: &str = "followed from the start";
pub const CHOSEN_BUSIEST: &str = "busiest by PTE updates + hint faults + pages migrated";

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
    /// Where `system.tunables` were read ([`tunables::FROM_DEBUGFS`],
    /// [`tunables::FROM_PRIVATE_DEBUGFS`], …; empty in captures of older numatraces).
    pub tunables_source: String,
}

/// A task's scheduler NUMA state, with when it was read (an exited task keeps its last read).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BusyTask {
    pub comm: String,
    /// Why it was read ([`CHOSEN_COMMAND`], [`CHOSEN_BUSIEST`], …; empty in older captures).
    pub chosen: String,
    pub read_unix_s: f64,
    /// Exited before the end of the window: the state is from its last read.
    pub exited: bool,
    pub task: TaskNuma,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BusyProcess {
    pub comm: String,
    /// Why it was read ([`CHOSEN_COMMAND`], [`CHOSEN_BUSIEST`], …; empty in older captures).
    pub chosen: String,
    /// When this state was read (for one that exited, its last read that found its memory).
    pub read_unix_s: f64,
    pub exited: bool,
    /// The recorded command or the `--pid` process: when numatrace saw it gone (it exited at
    /// or before this).
    pub exited_unix_s: Option<f64>,
    pub process: ProcessNuma,
}

/// How busy a task was with NUMA balancing: what it cost the kernel (PTE updates, hint
/// faults, pages migrated).
fn weight(t: &TaskRecord) -> u64 {
    let c = &t.counts();
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
                    comm: t.comm.to_string(),
                    chosen: String::new(),
                    read_unix_s: now_unix_s,
                    exited: false,
                    task: TaskNuma::read(t.pid, t.tgid),
                },
            );
            self.processes.insert(
                t.tgid,
                BusyProcess {
                    comm: t.comm.to_string(),
                    chosen: String::new(),
                    read_unix_s: now_unix_s,
                    exited: false,
                    exited_unix_s: None,
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

    /// A state section for `tasks` (busiest first, each marked `chosen`), from fresh reads
    /// where they are alive and from the last read of those that exited (or, never read,
    /// saying so).
    pub fn state(
        &mut self,
        phase: &str,
        tasks: &[&TaskRecord],
        chosen: &str,
        note: String,
        now_unix_s: f64,
    ) -> State {
        // The machine first: its vmstat is the mmtests rows' end of the window, read before
        // the slow per-task reads.
        let mut system = SystemState::read();
        let tunables_source = with_tunables(&mut system);
        self.refresh(tasks, now_unix_s);
        let gone = "the task exited before numatrace read it";
        let mut busiest = Vec::new();
        let mut processes: Vec<BusyProcess> = Vec::new();
        for t in tasks {
            busiest.push(match self.tasks.get(&t.key()) {
                Some(b) => BusyTask {
                    exited: b.read_unix_s < now_unix_s,
                    chosen: chosen.to_owned(),
                    ..b.clone()
                },
                None => BusyTask {
                    comm: t.comm.to_string(),
                    chosen: chosen.to_owned(),
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
                    chosen: chosen.to_owned(),
                    ..p.clone()
                },
                None => BusyProcess {
                    comm: t.comm.to_string(),
                    chosen: chosen.to_owned(),
                    read_unix_s: now_unix_s,
                    exited: true,
                    exited_unix_s: None,
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
            tunables_source,
        }
    }
}

/// The scan tunables where [`SystemState::read`] found none in a mounted debugfs (not mounted:
/// mounted privately for the read; refused: why), and where they were read.
fn with_tunables(system: &mut SystemState) -> String {
    if system.tunables.value().is_some() {
        return tunables::FROM_DEBUGFS.to_owned();
    }
    let t = tunables::read_for_capture();
    system.tunables = t.values.into();
    t.source
}

/// When the process `pid` started (`/proc/PID/stat` field 22, in clock ticks since boot): with
/// the pid, what tells it apart from a later process given the same pid.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

fn parse_start_time(stat: &str) -> Option<u64> {
    // After the comm (which may hold anything, parentheses too): field 3 (state) onwards.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn comm_of(pid: u32) -> Option<String> {
    use std::io::Read as _;
    let mut buf = Vec::new();
    std::fs::File::open(format!("/proc/{pid}/comm"))
        .ok()?
        .take(64)
        .read_to_end(&mut buf)
        .ok()?;
    Some(
        String::from_utf8_lossy(&buf)
            .trim_end_matches('\n')
            .to_owned(),
    )
}

/// One read of the window's subject — the recorded command, or the `--pid` process — that
/// is read whatever the hooks could count of it: its main thread and its process.
#[derive(Clone, Debug, PartialEq)]
pub struct SubjectRead {
    pub task: BusyTask,
    pub process: BusyProcess,
}

impl SubjectRead {
    /// Reads process `pid` and its main thread now (numa_maps walks its page tables).
    pub fn read(pid: u32, chosen: &str, now_unix_s: f64) -> Self {
        let comm = comm_of(pid).unwrap_or_default();
        Self {
            task: BusyTask {
                comm: comm.clone(),
                chosen: chosen.to_owned(),
                read_unix_s: now_unix_s,
                exited: false,
                task: TaskNuma::read(pid, pid),
            },
            process: BusyProcess {
                comm,
                chosen: chosen.to_owned(),
                read_unix_s: now_unix_s,
                exited: false,
                exited_unix_s: None,
                process: ProcessNuma::read(pid),
            },
        }
    }

    /// A subject that was never read, saying why.
    pub fn missing(pid: u32, chosen: &str, why: &str, now_unix_s: f64) -> Self {
        Self {
            task: BusyTask {
                comm: String::new(),
                chosen: chosen.to_owned(),
                read_unix_s: now_unix_s,
                exited: false,
                task: TaskNuma {
                    pid,
                    tgid: pid,
                    sched: Item::absent(why),
                },
            },
            process: BusyProcess {
                comm: String::new(),
                chosen: chosen.to_owned(),
                read_unix_s: now_unix_s,
                exited: false,
                exited_unix_s: None,
                process: ProcessNuma {
                    tgid: pid,
                    numa_maps: Item::absent(why),
                    mems_allowed: Item::absent(why),
                    cpus_allowed: Item::absent(why),
                    cpuset: Item::absent(why),
                },
            },
        }
    }

    /// Whether the read found the process's memory: a zombie's numa_maps (its memory already
    /// gone) and an unreadable one hold nothing worth keeping over an earlier read.
    pub fn has_maps(&self) -> bool {
        self.process
            .process
            .numa_maps
            .value()
            .is_some_and(|m| m.vmas > 0)
    }
}

/// The subject's reads over the window: the first and the last that found its memory. It
/// usually exits before the window ends, and then only an earlier read has its numa_maps.
#[derive(Clone, Debug, Default)]
pub struct SubjectReads {
    /// Its pid, once known (the command's is known once it is started).
    pub pid: Option<u32>,
    /// Its start time ([`start_time`]), which the reads are checked against (pid reuse).
    pub born: Option<u64>,
    pub first: Option<SubjectRead>,
    pub last: Option<SubjectRead>,
    /// When it was seen gone (exited, or a zombie).
    pub gone_unix_s: Option<f64>,
    /// Reads taken, kept or not.
    pub reads: u64,
}

impl SubjectReads {
    /// Takes in one read: the first that found its memory stays the first, the latest such
    /// the last; one that found nothing (it was exiting) replaces neither.
    pub fn take(&mut self, r: SubjectRead) {
        self.reads += 1;
        if !r.has_maps() {
            return;
        }
        if self.first.is_none() {
            self.first = Some(r.clone());
        }
        self.last = Some(r);
    }

    /// Whether the subject is still the process first read, and alive.
    pub fn alive(&self) -> bool {
        self.pid
            .is_some_and(|p| process_alive(p) && self.born.is_some() && start_time(p) == self.born)
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

    /// Puts the subject's read first among the tasks and the processes, in place of any entry
    /// for the same thread or process; `exited_unix_s`: when it was seen gone (the read is
    /// then its last).
    pub fn put_subject(&mut self, mut r: SubjectRead, exited_unix_s: Option<f64>) {
        r.task.exited = exited_unix_s.is_some();
        r.process.exited = exited_unix_s.is_some();
        r.process.exited_unix_s = exited_unix_s;
        self.busiest.retain(|t| t.task.pid != r.task.task.pid);
        self.busiest.insert(0, r.task);
        self.processes
            .retain(|p| p.process.tgid != r.process.process.tgid);
        self.processes.insert(0, r.process);
    }

    /// The subject (recorded command or `--pid` process) of this state, if it has one.
    pub fn subject(&self) -> Option<&BusyProcess> {
        self.processes
            .first()
            .filter(|p| p.chosen == CHOSEN_COMMAND || p.chosen == CHOSEN_PID)
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
            comm: format!("t{pid}").into(),
            exited: false,
            cgroup_id: 0,
            cgroup: None,
            preferred_node: None,
            last_node: None,
            first_ns: 0,
            counts: crate::model::PackedCounts::pack(&counts),
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
        let s = reads.state("end", &[&gone, &never], CHOSEN_BUSIEST, "n".into(), 2.0);
        assert_eq!(s.busiest[0].chosen, CHOSEN_BUSIEST);
        assert_eq!(s.processes[0].chosen, CHOSEN_BUSIEST);
        assert!(!s.tunables_source.is_empty());
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
        let s = reads.state("end", &[&alive], CHOSEN_BUSIEST, "n".into(), 3.0);
        assert!(!s.busiest[0].exited);
        assert_eq!(s.busiest[0].read_unix_s, 3.0);
    }

    #[test]
    fn the_subject_keeps_its_first_and_last_reads_that_found_memory() {
        let me = std::process::id();
        let mut reads = SubjectReads::default();
        let a = SubjectRead::read(me, CHOSEN_COMMAND, 1.0);
        assert_eq!(a.process.chosen, CHOSEN_COMMAND);
        assert_eq!(a.task.task.pid, me);
        if a.process.process.numa_maps.value().is_none() {
            eprintln!("SKIP: no numa_maps here: {:?}", a.process.process.numa_maps);
            return;
        }
        assert!(a.has_maps());
        reads.take(a.clone());
        let b = SubjectRead::read(me, CHOSEN_COMMAND, 2.0);
        reads.take(b);
        // A zombie's read: empty numa_maps. Neither first nor last.
        let mut z = SubjectRead::read(me, CHOSEN_COMMAND, 3.0);
        z.process.process.numa_maps = Item::Present(NumaMaps::default());
        reads.take(z);
        let gone = SubjectRead::missing(u32::MAX, CHOSEN_COMMAND, "gone", 4.0);
        assert!(!gone.has_maps());
        reads.take(gone);
        assert_eq!(reads.reads, 4);
        assert_eq!(reads.first.as_ref().unwrap().process.read_unix_s, 1.0);
        assert_eq!(reads.last.as_ref().unwrap().process.read_unix_s, 2.0);
        // Put first in a state, in place of the busiest entry for the same process.
        let mut st = State {
            busiest: vec![
                BusyTask {
                    task: TaskNuma {
                        pid: 9,
                        tgid: 9,
                        ..TaskNuma::default()
                    },
                    ..BusyTask::default()
                },
                BusyTask {
                    task: TaskNuma {
                        pid: me,
                        tgid: me,
                        ..TaskNuma::default()
                    },
                    ..BusyTask::default()
                },
            ],
            processes: vec![BusyProcess {
                process: ProcessNuma {
                    tgid: me,
                    ..ProcessNuma::default()
                },
                ..BusyProcess::default()
            }],
            ..State::default()
        };
        assert!(st.subject().is_none());
        st.put_subject(reads.last.clone().unwrap(), Some(2.5));
        assert_eq!(st.busiest.len(), 2);
        assert_eq!(st.busiest[0].chosen, CHOSEN_COMMAND);
        assert_eq!(st.busiest[1].task.pid, 9);
        assert_eq!(st.processes.len(), 1);
        let p = st.subject().unwrap();
        assert!(p.exited);
        assert_eq!(p.exited_unix_s, Some(2.5));
        assert_eq!(p.read_unix_s, 2.0);
        // Alive: this process, same start time.
        let alive = SubjectReads {
            pid: Some(me),
            born: start_time(me),
            ..SubjectReads::default()
        };
        assert!(alive.alive());
        let reused = SubjectReads {
            born: start_time(me).map(|t| t + 1),
            ..alive
        };
        assert!(!reused.alive());
    }

    #[test]
    fn start_time_is_read_past_any_comm() {
        let stat = "42 (a) b) 1 2 3) S 1 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 \
                    987654 1000 10";
        assert_eq!(parse_start_time(stat), Some(987_654));
        assert_eq!(parse_start_time("garbage"), None);
        assert!(start_time(std::process::id()).is_some());
    }

    #[test]
    fn captures_of_older_numatraces_still_read() {
        let old = r#"{"phase":"end","unix_s":1.0,"busiest":[{"comm":"x","read_unix_s":1.0,
            "exited":false,"task":{"pid":1,"tgid":1,"sched":{"absent":"n"}}}],
            "processes":[{"comm":"x","read_unix_s":1.0,"exited":true,"process":{"tgid":1}}],
            "busiest_note":"n"}"#;
        let st: State = serde_json::from_str(old).unwrap();
        assert_eq!(st.busiest[0].chosen, "");
        assert_eq!(st.processes[0].exited_unix_s, None);
        assert_eq!(st.tunables_source, "");
        assert!(st.subject().is_none());
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
