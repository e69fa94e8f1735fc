//! What a capture says about the machine it was recorded on: kernel, nodes, the NUMA balancing
//! sysctls and scan tunables, THP settings, the kernel's NUMA/THP configuration, cpusets.

use std::{collections::BTreeMap, fs, path::Path};

use serde::{Deserialize, Serialize};

use crate::{
    kernel::facts::KernelSummary,
    kernel::{facts::KernelFacts, nodes::NodeInfo, tunables::tunable_path},
};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Machine {
    pub hostname: String,
    pub kernel: Option<KernelSummary>,
    /// `uname -v`: the build, which tells two kernels of one release apart.
    pub kernel_build: String,
    /// Size and CRC-32 of /sys/kernel/btf/vmlinux: the same pair means the same BTF.
    pub btf_bytes: Option<u64>,
    pub btf_crc32: Option<u32>,
    pub cpus: usize,
    pub nodes: Vec<NodeInfo>,
    /// `kernel.numa_balancing*` sysctls.
    pub sysctls: BTreeMap<String, String>,
    /// Scan tunables (debugfs `sched/numa_balancing/` or the older sysctls).
    pub tunables: BTreeMap<String, String>,
    /// /sys/kernel/mm/transparent_hugepage settings.
    pub thp: BTreeMap<String, String>,
    /// The NUMA-related options of /proc/config.gz or /boot/config-RELEASE (when there; see
    /// `kernel::sysstate::config_options`).
    pub config: BTreeMap<String, String>,
    /// The root cgroup's effective cpuset (cgroup v2), and the recorded cgroup's when filtered.
    pub cpusets: BTreeMap<String, String>,
    pub started_unix_s: f64,
    pub numatrace_version: String,
    /// numatrace's own command line.
    pub command_line: Vec<String>,
    pub redacted: bool,
    /// The window as planned: scope, command and filters (the `end` section has the final one;
    /// a capture cut short before it is reported with this).
    pub window: Option<crate::model::Window>,
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_owned())
}

pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub fn hostname() -> String {
    read_trim("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into())
}

impl Machine {
    pub fn gather(facts: &KernelFacts, cgroup_root: Option<&Path>, cgroup: Option<&str>) -> Self {
        let mut sysctls = BTreeMap::new();
        if let Ok(dir) = fs::read_dir("/proc/sys/kernel") {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("numa_balancing")
                    && let Some(v) = read_trim(e.path())
                {
                    sysctls.insert(format!("kernel.{name}"), v);
                }
            }
        }
        let mut tunables = BTreeMap::new();
        for name in [
            "scan_delay_ms",
            "scan_period_min_ms",
            "scan_period_max_ms",
            "scan_size_mb",
            "hot_threshold_ms",
        ] {
            if let Some(v) = tunable_path(name).and_then(read_trim) {
                tunables.insert(name.to_owned(), v);
            }
        }
        let thp_dir = Path::new("/sys/kernel/mm/transparent_hugepage");
        let mut thp = BTreeMap::new();
        for name in [
            "enabled",
            "defrag",
            "shmem_enabled",
            "use_zero_page",
            "hpage_pmd_size",
            "khugepaged/defrag",
            "khugepaged/pages_to_scan",
            "khugepaged/scan_sleep_millisecs",
        ] {
            if let Some(v) = read_trim(thp_dir.join(name)) {
                thp.insert(name.to_owned(), v);
            }
        }
        let config = crate::kernel::sysstate::kernel_config(Path::new("/"), &facts.release)
            .map(|c| c.options)
            .unwrap_or_default();
        let mut cpusets = BTreeMap::new();
        if let Some(root) = cgroup_root {
            for (label, dir) in [("/", Some(root.to_owned())), ("recorded", None)] {
                let dir = dir.or_else(|| cgroup.map(|c| root.join(c.trim_start_matches('/'))));
                let Some(dir) = dir else { continue };
                for f in ["cpuset.cpus.effective", "cpuset.mems.effective"] {
                    if let Some(v) = read_trim(dir.join(f)) {
                        cpusets.insert(format!("{label} {f}"), v);
                    }
                }
            }
        }
        let btf = fs::read("/sys/kernel/btf/vmlinux").ok();
        Self {
            hostname: hostname(),
            kernel: Some(KernelSummary::from(facts)),
            kernel_build: read_trim("/proc/sys/kernel/version").unwrap_or_default(),
            btf_bytes: btf.as_ref().map(|b| b.len() as u64),
            btf_crc32: btf.as_ref().map(|b| crc32fast::hash(b)),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            nodes: crate::kernel::nodes::system_nodes(),
            sysctls,
            tunables,
            thp,
            config,
            cpusets,
            started_unix_s: unix_now(),
            numatrace_version: env!("CARGO_PKG_VERSION").to_owned(),
            command_line: std::env::args().collect(),
            redacted: false,
            window: None,
        }
    }
}
