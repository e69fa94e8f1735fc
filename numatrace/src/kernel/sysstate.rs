//! The machine-wide state a NUMA-balancing regression report is asked for, read at the start
//! and the end of a capture: all of `/proc/vmstat` (mmtests' rows), every NUMA sysctl and
//! debugfs tunable, nodes (distances, memory, numastat), THP settings, the NUMA-related kernel
//! config and the kernel command line. Each item is its value or why this machine has none.

use std::{collections::BTreeMap, fs, io::Read as _, path::Path};

use serde::{Deserialize, Serialize};

use super::nodes::{NodeInfo, read_nodes};
use crate::model::Item;

/// Longest value kept from one sysfs/procfs settings file (they are a few bytes).
const VALUE_BYTES: usize = 256;
/// Most bytes read from a (decompressed) kernel config (~300 KB on distribution kernels).
const CONFIG_BYTES: u64 = 8 << 20;

/// Kernel config options a NUMA-balancing report needs: NUMA, THP, migration, tiering,
/// preemption and tick, cpusets and memcg, scheduler debugging (for /proc/PID/sched), pages.
const CONFIG_WORDS: &[&str] = &[
    "NUMA",
    "HUGEPAGE",
    "THP",
    "MIGRATION",
    "CONFIG_HZ",
    "PREEMPT",
    "SCHED_DEBUG",
    "SCHEDSTATS",
    "CPUSETS",
    "MEMCG",
    "COMPACTION",
    "HMAT",
    "DAX_KMEM",
    "MEMORY_TIER",
    "PAGE_SIZE",
    "NODES_SHIFT",
    "HUGETLB",
];

/// The vm sysctls that change what NUMA counters mean (`vm.numa_stat=0` stops `numa_hit` and
/// its siblings) or where memory goes.
const VM_SYSCTLS: &[&str] = &["numa_stat", "zone_reclaim_mode", "numa_zonelist_order"];

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SystemState {
    /// Every counter of /proc/vmstat.
    pub vmstat: Item<BTreeMap<String, u64>>,
    /// `kernel.numa_balancing*` (every one this kernel has) and the NUMA vm sysctls.
    pub sysctls: BTreeMap<String, Item<String>>,
    /// debugfs `sched/numa_balancing/*` (5.13+; the scan tunables are sysctls before).
    pub tunables: Item<BTreeMap<String, String>>,
    /// Memory tiering and demotion (`/sys/kernel/mm/numa/demotion_enabled`, memory tiers).
    pub tiering: BTreeMap<String, Item<String>>,
    pub nodes: Item<Vec<NodeInfo>>,
    /// Per node, `/sys/devices/system/node/nodeN/numastat` (numa_hit, numa_miss, …).
    pub numastat: Item<BTreeMap<String, BTreeMap<String, u64>>>,
    /// Every setting under /sys/kernel/mm/transparent_hugepage (khugepaged/, hugepages-*kB/).
    pub thp: Item<BTreeMap<String, String>>,
    pub config: Item<KernelConfig>,
    /// /proc/cmdline.
    pub cmdline: Item<String>,
}

/// The NUMA-related options of the running kernel's config, and where they were read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelConfig {
    pub source: String,
    /// `CONFIG_X` → `y`, `m`, a value, or `is not set`.
    pub options: BTreeMap<String, String>,
}

impl SystemState {
    pub fn read() -> Self {
        Self::read_at(Path::new("/"))
    }

    /// Reads everything under `root` (`/`; a tree of the same shape in tests).
    pub fn read_at(root: &Path) -> Self {
        let p = |rel: &str| root.join(rel);
        let release = read_value(&p("proc/sys/kernel/osrelease")).unwrap_or_default();
        let mut sysctls = BTreeMap::new();
        match fs::read_dir(p("proc/sys/kernel")) {
            Ok(dir) => {
                for e in dir.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.starts_with("numa_balancing") {
                        sysctls.insert(format!("kernel.{name}"), read_value(&e.path()).into());
                    }
                }
                if !sysctls.contains_key("kernel.numa_balancing") {
                    sysctls.insert(
                        "kernel.numa_balancing".into(),
                        Item::absent(
                            "no /proc/sys/kernel/numa_balancing: CONFIG_NUMA_BALANCING off",
                        ),
                    );
                }
            }
            Err(e) => {
                sysctls.insert(
                    "kernel.numa_balancing".into(),
                    Item::absent(format!("/proc/sys/kernel: {e}")),
                );
            }
        }
        for name in VM_SYSCTLS {
            sysctls.insert(
                format!("vm.{name}"),
                read_value(&p(&format!("proc/sys/vm/{name}"))).into(),
            );
        }
        let mut tiering = BTreeMap::new();
        tiering.insert(
            "demotion_enabled".into(),
            read_value(&p("sys/kernel/mm/numa/demotion_enabled")).into(),
        );
        tiering.insert(
            "memory_tiers".into(),
            memory_tiers(&p("sys/devices/virtual/memory_tiering")).into(),
        );
        let node_dir = p("sys/devices/system/node");
        let nodes = read_nodes(&node_dir);
        Self {
            vmstat: read_counters(&p("proc/vmstat")).into(),
            sysctls,
            tunables: tunables(root).into(),
            tiering,
            numastat: numastat(&node_dir, &nodes).into(),
            nodes: if nodes.is_empty() {
                Item::absent("no /sys/devices/system/node (CONFIG_NUMA off)")
            } else {
                Item::Present(nodes)
            },
            thp: thp(&p("sys/kernel/mm/transparent_hugepage")).into(),
            config: kernel_config(root, &release).into(),
            cmdline: read_value_max(&p("proc/cmdline"), 4096).into(),
        }
    }

    /// A counter of `/proc/vmstat`, if this kernel has it.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.vmstat.value()?.get(name).copied()
    }
}

fn read_value(path: &Path) -> Result<String, String> {
    read_value_max(path, VALUE_BYTES)
}

/// A settings file, trimmed and cut to `max` bytes; absent: the file's error, said plainly.
fn read_value_max(path: &Path, max: usize) -> Result<String, String> {
    let mut f = fs::File::open(path).map_err(|e| io_why(path, &e))?;
    let mut buf = Vec::new();
    f.by_ref()
        .take(max as u64)
        .read_to_end(&mut buf)
        .map_err(|e| io_why(path, &e))?;
    Ok(String::from_utf8_lossy(&buf).trim().to_owned())
}

fn io_why(path: &Path, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => format!("no {} on this kernel", shown(path)),
        _ => format!("{}: {e}", shown(path)),
    }
}

/// A path as the running system names it (tests read a tree under a temporary root).
fn shown(path: &Path) -> String {
    let s = path.display().to_string();
    for top in ["/proc/", "/sys/", "/boot/"] {
        if let Some(i) = s.find(top) {
            return s[i..].to_owned();
        }
    }
    s
}

/// `name value` lines (vmstat, numastat).
fn read_counters(path: &Path) -> Result<BTreeMap<String, u64>, String> {
    let text = fs::read_to_string(path).map_err(|e| io_why(path, &e))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_owned(), it.next()?.parse().ok()?))
        })
        .collect())
}

fn tunables(root: &Path) -> Result<BTreeMap<String, String>, String> {
    let dir = root.join("sys/kernel/debug/sched/numa_balancing");
    match fs::read_dir(&dir) {
        Ok(entries) => {
            let mut out = BTreeMap::new();
            let mut refused = None;
            for e in entries.flatten().filter(|e| e.path().is_file()) {
                match read_value(&e.path()) {
                    Ok(v) => {
                        out.insert(e.file_name().to_string_lossy().into_owned(), v);
                    }
                    Err(why) => refused = Some(why),
                }
            }
            // A locked-down debugfs lists the files and refuses every read.
            match refused {
                Some(why) if out.is_empty() => Err(format!(
                    "{why} (a locked-down kernel refuses debugfs reads)"
                )),
                _ => Ok(out),
            }
        }
        Err(e) => Err(
            if root
                .join("proc/sys/kernel/numa_balancing_scan_delay_ms")
                .exists()
            {
                "before 5.13 the scan tunables are sysctls (kernel.numa_balancing_scan_*)".into()
            } else if !debugfs_mounted(root) {
                "debugfs is not mounted at /sys/kernel/debug (mount -t debugfs none \
                 /sys/kernel/debug)"
                    .into()
            } else if e.kind() == std::io::ErrorKind::NotFound {
                "no sched/numa_balancing in debugfs (CONFIG_NUMA_BALANCING off)".into()
            } else {
                format!("/sys/kernel/debug/sched/numa_balancing: {e}")
            },
        ),
    }
}

fn debugfs_mounted(root: &Path) -> bool {
    fs::read_to_string(root.join("proc/mounts"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("/sys/kernel/debug"))
}

/// Memory tiers: `memory_tierN` → its nodes (6.1+).
fn memory_tiers(dir: &Path) -> Result<String, String> {
    let entries = fs::read_dir(dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "no /sys/devices/virtual/memory_tiering (before 6.1, or CONFIG_NUMA off)".to_owned()
        } else {
            format!("/sys/devices/virtual/memory_tiering: {e}")
        }
    })?;
    let mut tiers: Vec<(u32, String)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n: u32 = name.strip_prefix("memory_tier")?.parse().ok()?;
            Some((n, read_value(&e.path().join("nodelist")).ok()?))
        })
        .collect();
    tiers.sort();
    Ok(tiers
        .iter()
        .map(|(n, nodes)| format!("memory_tier{n}: nodes {nodes}"))
        .collect::<Vec<_>>()
        .join("; "))
}

fn numastat(
    node_dir: &Path,
    nodes: &[NodeInfo],
) -> Result<BTreeMap<String, BTreeMap<String, u64>>, String> {
    if nodes.is_empty() {
        return Err("no /sys/devices/system/node (CONFIG_NUMA off)".into());
    }
    nodes
        .iter()
        .map(|n| {
            let path = node_dir.join(format!("node{}/numastat", n.node));
            Ok((format!("node{}", n.node), read_counters(&path)?))
        })
        .collect()
}

/// Every setting file under `dir`, one level of subdirectories deep (khugepaged/,
/// hugepages-64kB/…), as `sub/name` → value.
fn thp(dir: &Path) -> Result<BTreeMap<String, String>, String> {
    let entries = fs::read_dir(dir).map_err(|e| io_why(dir, &e))?;
    let mut out = BTreeMap::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        // sysfs entries are never symlinks here; one that is is not followed.
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_file() {
            if let Ok(v) = read_value(&path) {
                out.insert(name, v);
            }
        } else if meta.is_dir() {
            for sub in fs::read_dir(&path).into_iter().flatten().flatten() {
                if sub.path().is_file()
                    && let Ok(v) = read_value(&sub.path())
                {
                    out.insert(format!("{name}/{}", sub.file_name().to_string_lossy()), v);
                }
            }
        }
    }
    Ok(out)
}

/// The running kernel's config from /proc/config.gz, else /boot/config-RELEASE, filtered to
/// the options of [`CONFIG_WORDS`].
pub fn kernel_config(root: &Path, release: &str) -> Result<KernelConfig, String> {
    let gz = root.join("proc/config.gz");
    let boot = root.join(format!("boot/config-{release}"));
    let (source, text) = if let Ok(f) = fs::File::open(&gz) {
        let mut text = String::new();
        flate2::read::GzDecoder::new(f)
            .take(CONFIG_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| format!("/proc/config.gz: {e}"))?;
        ("/proc/config.gz".to_owned(), text)
    } else {
        let mut text = String::new();
        fs::File::open(&boot)
            .map_err(|_| {
                format!(
                    "neither /proc/config.gz (CONFIG_IKCONFIG_PROC) nor /boot/config-{release} \
                     exists"
                )
            })?
            .take(CONFIG_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| format!("/boot/config-{release}: {e}"))?;
        (shown(&boot), text)
    };
    Ok(KernelConfig {
        source,
        options: config_options(&text),
    })
}

/// `CONFIG_X=v` and `# CONFIG_X is not set` lines whose name holds one of [`CONFIG_WORDS`].
pub fn config_options(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (name, value) = if let Some(rest) = l.strip_prefix("# ") {
                (rest.strip_suffix(" is not set")?, "is not set")
            } else {
                l.split_once('=')?
            };
            (name.starts_with("CONFIG_") && CONFIG_WORDS.iter().any(|w| name.contains(w)))
                .then(|| (name.to_owned(), value.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the state is read from in tests: a fresh private tree shaped like `/`.
    fn fake_root() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    #[test]
    fn reads_a_tree_and_says_why_each_missing_item_is_missing() {
        let dir = fake_root();
        let root = dir.path();
        for (rel, text) in [
            ("proc/vmstat", "numa_hit 10\nnuma_pte_updates 5\nbogus x\n"),
            ("proc/sys/kernel/osrelease", "6.12.0-test\n"),
            ("proc/sys/kernel/numa_balancing", "1\n"),
            (
                "proc/sys/kernel/numa_balancing_promote_rate_limit_MBps",
                "65536\n",
            ),
            ("proc/sys/vm/numa_stat", "1\n"),
            ("proc/cmdline", "console=ttyS0 numa_balancing=enable\n"),
            ("proc/mounts", "debugfs /sys/kernel/debug debugfs rw 0 0\n"),
            (
                "sys/kernel/debug/sched/numa_balancing/scan_delay_ms",
                "1000\n",
            ),
            (
                "sys/kernel/mm/transparent_hugepage/enabled",
                "[always] madvise never\n",
            ),
            (
                "sys/kernel/mm/transparent_hugepage/khugepaged/max_ptes_none",
                "511\n",
            ),
            ("sys/devices/system/node/node0/cpulist", "0-1\n"),
            ("sys/devices/system/node/node0/distance", "10\n"),
            (
                "sys/devices/system/node/node0/numastat",
                "numa_hit 7\nnuma_miss 0\n",
            ),
            (
                "boot/config-6.12.0-test",
                "CONFIG_NUMA_BALANCING=y\n# CONFIG_NUMA_EMU is not set\nCONFIG_HZ=250\nCONFIG_USB=y\n",
            ),
        ] {
            put(root, rel, text);
        }
        let s = SystemState::read_at(root);
        assert_eq!(s.counter("numa_hit"), Some(10));
        assert_eq!(s.counter("bogus"), None);
        assert_eq!(
            s.sysctls["kernel.numa_balancing_promote_rate_limit_MBps"],
            Item::Present("65536".into())
        );
        assert_eq!(
            s.sysctls["vm.zone_reclaim_mode"].why_absent(),
            Some("no /proc/sys/vm/zone_reclaim_mode on this kernel")
        );
        assert_eq!(s.tunables.value().unwrap()["scan_delay_ms"], "1000");
        assert_eq!(s.thp.value().unwrap()["khugepaged/max_ptes_none"], "511");
        assert_eq!(s.numastat.value().unwrap()["node0"]["numa_hit"], 7);
        let c = s.config.value().unwrap();
        assert_eq!(c.source, "/boot/config-6.12.0-test");
        assert_eq!(c.options["CONFIG_NUMA_EMU"], "is not set");
        assert_eq!(c.options["CONFIG_HZ"], "250");
        assert!(!c.options.contains_key("CONFIG_USB"));
        assert!(
            s.tiering["memory_tiers"]
                .why_absent()
                .unwrap()
                .contains("before 6.1")
        );
        assert_eq!(
            s.cmdline,
            Item::Present("console=ttyS0 numa_balancing=enable".into())
        );
    }

    #[test]
    fn says_why_the_tunables_are_missing() {
        let dir = fake_root();
        let root = dir.path();
        put(root, "proc/mounts", "proc /proc proc rw 0 0\n");
        assert!(
            tunables(root)
                .unwrap_err()
                .contains("debugfs is not mounted")
        );
        put(
            root,
            "proc/sys/kernel/numa_balancing_scan_delay_ms",
            "1000\n",
        );
        assert!(tunables(root).unwrap_err().contains("before 5.13"));
        let s = SystemState::read_at(&root.join("nothing"));
        assert!(
            s.config
                .why_absent()
                .unwrap()
                .contains("neither /proc/config.gz")
        );
        assert!(s.vmstat.why_absent().unwrap().contains("/proc/vmstat"));
    }

    #[test]
    fn reads_a_gzipped_config() {
        use std::io::Write as _;
        let dir = fake_root();
        let root = dir.path();
        fs::create_dir_all(root.join("proc")).unwrap();
        let mut gz = flate2::write::GzEncoder::new(
            fs::File::create(root.join("proc/config.gz")).unwrap(),
            flate2::Compression::default(),
        );
        gz.write_all(b"CONFIG_TRANSPARENT_HUGEPAGE=y\nCONFIG_NET=y\n")
            .unwrap();
        gz.finish().unwrap();
        let c = kernel_config(root, "x").unwrap();
        assert_eq!(c.source, "/proc/config.gz");
        assert_eq!(
            c.options,
            BTreeMap::from([("CONFIG_TRANSPARENT_HUGEPAGE".into(), "y".into())])
        );
    }
}
