//! NUMA nodes from sysfs: CPUs, distances, memory. The header of every snapshot.

use std::{fs, path::Path};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub node: u32,
    pub cpus: String,
    pub distances: Vec<u32>,
    pub mem_total_bytes: Option<u64>,
    pub mem_free_bytes: Option<u64>,
}

/// `Node N MemTotal:  123 kB` lines of a node's `meminfo`, in bytes.
fn meminfo_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace().skip(2);
        (it.next()? == field).then(|| it.next()?.parse::<u64>().ok().map(|kb| kb * 1024))?
    })
}

/// Every online node under `sys` (normally /sys/devices/system/node), by number.
pub fn read_nodes(sys: &Path) -> Vec<NodeInfo> {
    let mut out: Vec<NodeInfo> = fs::read_dir(sys)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let node: u32 = name.strip_prefix("node")?.parse().ok()?;
            let dir = e.path();
            let read = |f: &str| super::read_text(dir.join(f)).unwrap_or_default();
            let meminfo = read("meminfo");
            Some(NodeInfo {
                node,
                cpus: read("cpulist").trim().to_owned(),
                distances: read("distance")
                    .split_whitespace()
                    .filter_map(|d| d.parse().ok())
                    .collect(),
                mem_total_bytes: meminfo_field(&meminfo, "MemTotal:"),
                mem_free_bytes: meminfo_field(&meminfo, "MemFree:"),
            })
        })
        .collect();
    out.sort_by_key(|n| n.node);
    out
}

pub fn system_nodes() -> Vec<NodeInfo> {
    read_nodes(Path::new("/sys/devices/system/node"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_sysfs_like_tree() {
        let dir = std::env::temp_dir().join(format!("numatrace-nodes-{}", std::process::id()));
        for (n, cpus, dist) in [(0, "0-1", "10 20"), (1, "2-3", "20 10")] {
            let d = dir.join(format!("node{n}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("cpulist"), format!("{cpus}\n")).unwrap();
            fs::write(d.join("distance"), format!("{dist}\n")).unwrap();
            fs::write(
                d.join("meminfo"),
                format!("Node {n} MemTotal:       1024 kB\nNode {n} MemFree:         512 kB\n"),
            )
            .unwrap();
        }
        fs::create_dir_all(dir.join("power")).unwrap();
        let nodes = read_nodes(&dir);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1].node, 1);
        assert_eq!(nodes[1].cpus, "2-3");
        assert_eq!(nodes[1].distances, vec![20, 10]);
        assert_eq!(nodes[0].mem_total_bytes, Some(1 << 20));
        assert_eq!(nodes[0].mem_free_bytes, Some(512 << 10));
    }

    #[test]
    fn this_machine_has_a_node() {
        let nodes = system_nodes();
        if nodes.is_empty() {
            eprintln!("SKIP this_machine_has_a_node: no /sys/devices/system/node");
            return;
        }
        assert!(!nodes[0].cpus.is_empty());
        assert!(!nodes[0].distances.is_empty());
    }
}
