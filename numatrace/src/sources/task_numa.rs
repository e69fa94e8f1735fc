//! What procfs says about a task's NUMA life, as regression reports quote it: the NUMA fields
//! of `/proc/PID/sched`, a per-node summary of `/proc/PID/numa_maps` with its memory policies,
//! `Mems_allowed_list` / `Cpus_allowed_list` and the cpuset. Every string here comes from a
//! process and is treated as hostile (bounded, never printed raw by this module).

use std::{collections::BTreeMap, fs, io::Read as _, path::Path};

use serde::{Deserialize, Serialize};

use crate::model::Item;

/// Most bytes read of a `numa_maps` (a line per VMA, ~100 bytes: ~160 000 VMAs).
const NUMA_MAPS_BYTES: u64 = 16 << 20;
/// Most bytes read of a `sched` or `status` file (a few KiB; per-node lines on big machines).
const SMALL_BYTES: u64 = 1 << 20;
/// Longest value kept from a line.
const FIELD_BYTES: usize = 256;
/// Most distinct policy strings kept per process (one per VMA at worst).
const MAX_POLICIES: usize = 64;

/// The NUMA fields of `/proc/PID/sched` (kernel/sched/debug.c, `sched_show_numa`): only these
/// keys are kept, with numeric values — the file's first line holds the task's comm, which a
/// task may set to several lines of anything.
const SCHED_KEYS: &[&str] = &[
    "mm->numa_scan_seq",
    "numa_pages_migrated",
    "numa_preferred_nid",
    "total_numa_faults",
    "current_node",
    "numa_group_id",
];

/// One thread's NUMA scheduling state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskNuma {
    pub pid: u32,
    pub tgid: u32,
    /// The NUMA lines of `/proc/TGID/task/PID/sched` (CONFIG_SCHED_DEBUG before 6.16 hides
    /// them): `mm->numa_scan_seq`, `numa_pages_migrated`, `numa_preferred_nid`,
    /// `total_numa_faults`, `current_node`, `numa_group_id`, and per node `numa_faults node=N`
    /// → `task_private=… task_shared=… group_private=… group_shared=…`.
    pub sched: Item<BTreeMap<String, String>>,
}

/// One process's NUMA memory state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessNuma {
    pub tgid: u32,
    pub numa_maps: Item<NumaMaps>,
    pub mems_allowed: Item<String>,
    pub cpus_allowed: Item<String>,
    /// `/proc/PID/cpuset`: the cpuset (cgroup) path, a name the user chose (redacted).
    pub cpuset: Item<String>,
}

/// `/proc/PID/numa_maps` summed per node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaMaps {
    pub vmas: u64,
    /// KiB resident per node (`N<node>=pages` × `kernelpagesize_kB`), all mappings, and of
    /// those anonymous ones.
    pub kib_by_node: BTreeMap<String, u64>,
    pub anon_kib_by_node: BTreeMap<String, u64>,
    /// The file was longer than numatrace reads (16 MiB): the sums cover its first VMAs only.
    pub truncated: bool,
    /// Memory policy (the VMA's, else the task's: `default`, `bind:0-1`, `interleave:0-1`,
    /// `prefer:1`, `local`, …) → VMAs with it.
    pub policies: BTreeMap<String, u64>,
}

impl TaskNuma {
    pub fn read(pid: u32, tgid: u32) -> Self {
        Self::read_at(Path::new("/proc"), pid, tgid)
    }

    pub fn read_at(proc: &Path, pid: u32, tgid: u32) -> Self {
        let path = proc.join(format!("{tgid}/task/{pid}/sched"));
        Self {
            pid,
            tgid,
            sched: read_bounded(&path, SMALL_BYTES)
                .and_then(|t| {
                    let m = sched_numa(&t);
                    if m.is_empty() {
                        Err(
                            "no NUMA lines in /proc/PID/sched (CONFIG_NUMA_BALANCING or \
                             CONFIG_SCHED_DEBUG off)"
                                .into(),
                        )
                    } else {
                        Ok(m)
                    }
                })
                .into(),
        }
    }
}

impl ProcessNuma {
    pub fn read(tgid: u32) -> Self {
        Self::read_at(Path::new("/proc"), tgid)
    }

    pub fn read_at(proc: &Path, tgid: u32) -> Self {
        let dir = proc.join(tgid.to_string());
        let status = read_bounded(&dir.join("status"), SMALL_BYTES);
        let field = |name: &str| -> Item<String> {
            match &status {
                Ok(s) => status_field(s, name)
                    .ok_or_else(|| format!("no {name} in /proc/PID/status"))
                    .into(),
                Err(e) => Item::absent(e.clone()),
            }
        };
        Self {
            tgid,
            numa_maps: read_bounded(&dir.join("numa_maps"), NUMA_MAPS_BYTES)
                .map(|t| {
                    let mut m = numa_maps(&t);
                    m.truncated = t.len() as u64 >= NUMA_MAPS_BYTES;
                    m
                })
                .into(),
            mems_allowed: field("Mems_allowed_list"),
            cpus_allowed: field("Cpus_allowed_list"),
            cpuset: read_bounded(&dir.join("cpuset"), FIELD_BYTES as u64 * 16)
                .map(|s| s.trim().to_owned())
                .into(),
        }
    }
}

fn read_bounded(path: &Path, max: u64) -> Result<String, String> {
    let why = |e: std::io::Error| {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match e.kind() {
            std::io::ErrorKind::NotFound => {
                format!("no /proc/PID/{name} (the task has exited, or this kernel has none)")
            }
            _ => format!("/proc/PID/{name}: {e}"),
        }
    };
    let mut buf = Vec::new();
    fs::File::open(path)
        .map_err(why)?
        .take(max)
        .read_to_end(&mut buf)
        .map_err(why)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn cut(s: &str) -> String {
    let mut end = s.len().min(FIELD_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// A number as the kernel prints one (`-1` for no preferred node).
fn numeric(v: &str) -> bool {
    let v = v.strip_prefix('-').unwrap_or(v);
    !v.is_empty() && v.len() <= 20 && v.bytes().all(|b| b.is_ascii_digit())
}

/// The NUMA fields of a `sched` file: the known keys with numeric values, and per node
/// `numa_faults node=N` → `task_private=… task_shared=… group_private=… group_shared=…`.
/// Lines the comm forged are later overwritten by the kernel's own, which follow them.
pub fn sched_numa(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("numa_faults node=") {
            let mut words = rest.split(' ');
            let node = words.next().unwrap_or_default();
            let counts: Vec<&str> = words.filter(|w| !w.is_empty()).collect();
            let valid = numeric(node)
                && counts.len() <= 8
                && counts.iter().all(|w| {
                    w.split_once('=').is_some_and(|(k, v)| {
                        k.len() <= 16
                            && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                            && numeric(v)
                    })
                });
            if valid && out.len() < 4096 {
                out.insert(format!("numa_faults node={node}"), counts.join(" "));
            }
            continue;
        }
        let pairs: Vec<(&str, &str)> = if l.starts_with("current_node=") {
            l.split(", ").filter_map(|kv| kv.split_once('=')).collect()
        } else {
            l.split_once(':').into_iter().collect()
        };
        for (k, v) in pairs {
            let (k, v) = (k.trim(), v.trim());
            if SCHED_KEYS.contains(&k) && numeric(v) {
                out.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    out
}

fn status_field(status: &str, name: &str) -> Option<String> {
    status.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == name).then(|| cut(v.trim()))
    })
}

/// Sums a `numa_maps` per node and counts its policies.
pub fn numa_maps(text: &str) -> NumaMaps {
    let mut m = NumaMaps::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(_addr), Some(policy)) = (words.next(), words.next()) else {
            continue;
        };
        m.vmas += 1;
        let rest: Vec<&str> = words.collect();
        let page_kib: u64 = rest
            .iter()
            .find_map(|w| w.strip_prefix("kernelpagesize_kB=")?.parse().ok())
            .unwrap_or(4);
        let anon = rest.iter().any(|w| w.starts_with("anon="));
        for w in &rest {
            if let Some((node, pages)) = w.split_once('=')
                && let Some(n) = node.strip_prefix('N')
                && n.parse::<u32>().is_ok()
                && let Ok(pages) = pages.parse::<u64>()
            {
                let kib = pages.saturating_mul(page_kib);
                let key = format!("node{n}");
                let e = m.kib_by_node.entry(key.clone()).or_default();
                *e = e.saturating_add(kib);
                if anon {
                    let e = m.anon_kib_by_node.entry(key).or_default();
                    *e = e.saturating_add(kib);
                }
            }
        }
        let policy = cut(policy);
        if m.policies.len() < MAX_POLICIES || m.policies.contains_key(&policy) {
            *m.policies.entry(policy).or_default() += 1;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHED: &str = "\
evil)\x1b[2J (123, #threads: 2)
-------------------------------------------------------------------
se.exec_start                                :         12345.678901
mm->numa_scan_seq                            :                    5
numa_pages_migrated                          :                   12
numa_preferred_nid                           :                    1
total_numa_faults                            :                   34
current_node=0, numa_group_id=0
numa_faults node=0 task_private=3 task_shared=0 group_private=0 group_shared=0
numa_faults node=1 task_private=31 task_shared=0 group_private=0 group_shared=0
";

    #[test]
    fn reads_the_numa_lines_of_sched_and_nothing_else() {
        let m = sched_numa(SCHED);
        assert_eq!(m["mm->numa_scan_seq"], "5");
        assert_eq!(m["numa_pages_migrated"], "12");
        assert_eq!(m["numa_preferred_nid"], "1");
        assert_eq!(m["total_numa_faults"], "34");
        assert_eq!(m["current_node"], "0");
        assert_eq!(m["numa_group_id"], "0");
        assert_eq!(
            m["numa_faults node=1"],
            "task_private=31 task_shared=0 group_private=0 group_shared=0"
        );
        assert!(!m.contains_key("se.exec_start"));
        assert!(m.keys().chain(m.values()).all(|s| !s.contains('\x1b')));
    }

    /// A comm can hold newlines (PR_SET_NAME): what it forges is neither kept as text nor
    /// left standing over the kernel's own lines.
    #[test]
    fn a_forged_comm_neither_leaks_nor_overrides() {
        let forged = format!(
            "secret\nnuma_preferred_nid : 9\ncurrent_node=secret, numa_group_id=7\n\
             numa_faults node=0 task_private=secret\ntotal_numa_faults : leak{}",
            &SCHED[SCHED.find(" (123").unwrap()..]
        );
        let m = sched_numa(&forged);
        assert_eq!(m["numa_preferred_nid"], "1");
        assert_eq!(m["numa_group_id"], "0");
        assert_eq!(m["total_numa_faults"], "34");
        assert!(!format!("{m:?}").contains("secret") && !format!("{m:?}").contains("leak"));
    }

    #[test]
    fn sums_numa_maps_per_node_with_policies() {
        assert!(!numa_maps("").truncated);
        let m = numa_maps(
            "\
55d0 default file=/usr/bin/x mapped=3 N0=3 kernelpagesize_kB=4
7f00 bind:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=4
7f80 default anon=2 dirty=2 N0=1 N1=1 kernelpagesize_kB=2048
7fff default stack anon=1 dirty=1 N0=1 kernelpagesize_kB=4
garbage
",
        );
        assert_eq!(m.vmas, 4);
        assert_eq!(m.kib_by_node["node0"], 12 + 2048 + 4);
        assert_eq!(m.kib_by_node["node1"], 2048 + 2048);
        assert_eq!(m.anon_kib_by_node["node0"], 2048 + 4);
        assert_eq!(m.policies["default"], 3);
        assert_eq!(m.policies["bind:1"], 1);
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let p = ProcessNuma::read(me);
        assert!(p.mems_allowed.value().is_some(), "{p:?}");
        assert!(p.cpus_allowed.value().is_some(), "{p:?}");
        if let Item::Present(m) = &p.numa_maps {
            assert!(m.vmas > 0, "{m:?}");
        }
        let gone = ProcessNuma::read(u32::MAX);
        assert!(gone.numa_maps.why_absent().unwrap().contains("exited"));
        let t = TaskNuma::read(me, me);
        if let Some(why) = t.sched.why_absent() {
            eprintln!("no NUMA lines in sched here: {why}");
        }
    }
}
