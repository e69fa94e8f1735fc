//! What the running kernel offers: the input of [`crate::plan::plan`] (which reads it, never the
//! reverse: both take the hook list from [`crate::kernel::catalogue`]). Gathering does I/O;
//! everything is plain data so that tests can build facts for kernels this machine is not.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    io::BufRead,
    path::Path,
};

use serde::{Deserialize, Serialize};

use super::{
    btf::BtfParam,
    tracefs::{Format, Tracefs, TracefsError},
};
use crate::kernel::catalogue::{HOOKS, HookKind};

pub use super::version::KernelVersion;

/// Outcome of loading the do-nothing fentry program against one function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum FentryTest {
    Loaded,
    Refused { errno: i32, error: String },
    NotTried { why: String },
}

/// Everything the plan needs to know about the running kernel.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct KernelFacts {
    pub release: String,
    pub version: KernelVersion,
    /// /sys/kernel/btf/vmlinux exists.
    pub btf_vmlinux: bool,
    /// Functions of the hook catalogue that have a BTF `FUNC` entry.
    pub btf_functions: BTreeSet<String>,
    /// Functions of the hook catalogue that are text symbols in /proc/kallsyms.
    pub kallsyms: BTreeSet<String>,
    /// Address ranges [start, next symbol) of the scan functions (zero when kallsyms hides
    /// addresses), for attributing sampled stacks.
    pub scan_ranges: BTreeMap<String, [u64; 2]>,
    /// Kernel struct fields the function hooks read: byte offset from BTF, `None` if absent.
    pub btf_fields: BTreeMap<String, Option<u32>>,
    /// Parameters (name, C type) of the catalogue's functions that have BTF: which argument
    /// is which is read from here, by name.
    #[serde(default)]
    pub btf_signatures: BTreeMap<String, Vec<BtfParam>>,
    /// Address of the kernel variable `vmemmap_base` (randomized memory layouts).
    pub vmemmap_base_sym: Option<u64>,
    /// arm64: the address of `struct page` number 0 (`vmemmap`), from the kernel's VMCOREINFO
    /// (see [`super::vmcoreinfo`]); `None` elsewhere or where /proc/kcore cannot be read.
    #[serde(default)]
    pub vmemmap_arm64: Option<u64>,
    /// Address of the kernel array `node_data[]` (each node's `pglist_data`), where the
    /// programs read a node's promotion hot threshold.
    #[serde(default)]
    pub node_data_sym: Option<u64>,
    /// Address of `sysctl_numa_balancing_hot_threshold` (6.0+): the threshold a promotion
    /// decision is judged by while its node's own is unset.
    #[serde(default)]
    pub hot_threshold_sym: Option<u64>,
    /// Address of `sysctl_numa_balancing_mode`: the mode as the kernel has it at a decision.
    #[serde(default)]
    pub numa_balancing_mode_sym: Option<u64>,
    /// PFN ranges per node, for the source node of migrations.
    pub node_pfn_ranges: Vec<[u64; 3]>,
    /// PG_head's bit in page.flags, and sizeof(struct page).
    pub page_head_bit: Option<u32>,
    pub page_size: Option<u32>,
    /// Tracepoints (`name` without category) of tp_btf hooks that BTF types as
    /// `btf_trace_<name>`.
    pub btf_tracepoints: BTreeSet<String>,
    /// NUMAB_SKIP_PID_INACTIVE in BTF's `enum numa_vmaskip_reason`.
    pub pid_inactive_reason: Option<u32>,
    /// The kernel can create kprobes (kprobe PMU or tracefs kprobe_events).
    pub kprobes: bool,
    /// Where tracefs is mounted; `None` if it could not be found or mounted.
    pub tracefs: Option<String>,
    pub tracefs_mounted_by_us: bool,
    /// Formats of the catalogue's tracepoints that exist, by `category:name`.
    #[serde(default)]
    pub tracepoints: BTreeMap<String, Format>,
    /// Per function: whether a do-nothing fentry program loads there.
    pub fentry: BTreeMap<String, FentryTest>,
    pub numa_nodes: u32,
    /// kernel.numa_balancing (0 off, 1 normal, 2 memory tiering, 3 both).
    pub numa_balancing: Option<u32>,
    /// The preemption model (fentry programs skip runs on preemptible kernels).
    #[serde(default)]
    pub preemption: Option<super::preempt::Preemption>,
}

/// Names of the functions the hook catalogue may hook.
pub fn catalogue_functions() -> impl Iterator<Item = &'static str> {
    HOOKS
        .iter()
        .flat_map(|h| match h.kind {
            HookKind::Function { symbols, .. } => symbols,
            HookKind::Tracepoint { .. } | HookKind::BtfTracepoint { .. } | HookKind::Sampling => {
                &[]
            }
        })
        .copied()
}

/// What one read of a kallsyms-formatted stream gives.
#[derive(Debug, Default)]
pub struct Kallsyms {
    /// Text symbols (`t`/`T`) among the wanted functions, with their range [address, next text
    /// symbol).
    pub text: BTreeMap<String, [u64; 2]>,
    /// Addresses of the wanted kernel variables (any type; absent where kallsyms hides
    /// addresses, as it prints them as zero).
    pub data: BTreeMap<String, u64>,
}

/// Reads a kallsyms-formatted stream once for the functions `wanted` and the variables
/// `variables`.
pub fn kallsyms_from_reader(
    r: impl BufRead,
    wanted: &BTreeSet<&str>,
    variables: &[&str],
) -> std::io::Result<Kallsyms> {
    let mut starts = BTreeMap::new();
    let mut text_addrs = Vec::new();
    let mut data = BTreeMap::new();
    for line in r.lines() {
        let line = line?;
        let mut it = line.split_whitespace();
        let (addr, ty, name) = match (it.next(), it.next(), it.next()) {
            (Some(a), Some(t), Some(n)) => (a, t, n),
            _ => continue,
        };
        let addr = u64::from_str_radix(addr, 16).unwrap_or(0);
        if variables.contains(&name) && addr != 0 {
            data.entry(name.to_owned()).or_insert(addr);
        }
        if ty != "t" && ty != "T" {
            continue;
        }
        text_addrs.push(addr);
        if wanted.contains(name) {
            starts.insert(name.to_owned(), addr);
        }
    }
    text_addrs.sort_unstable();
    let text = starts
        .into_iter()
        .map(|(name, start)| {
            let end = if start == 0 {
                0
            } else {
                let i = text_addrs.partition_point(|&a| a <= start);
                text_addrs.get(i).copied().unwrap_or(start)
            };
            (name, [start, end])
        })
        .collect();
    Ok(Kallsyms { text, data })
}

/// Kernel struct fields the function hooks need: (struct, member path).
pub const BTF_FIELDS: &[(&str, &str)] = &[
    ("task_struct", "se.sum_exec_runtime"),
    ("task_struct", "node_stamp"),
    ("task_struct", "mm"),
    ("mm_struct", "numa_scan_seq"),
    ("page", "flags"),
    ("page", "_mapcount"),
    ("folio", "_large_mapcount"),
    ("folio", "_entire_mapcount"),
    ("page", "compound_mapcount"),
    ("vm_fault", "vma"),
    ("vm_area_struct", "vm_flags"),
    ("vm_area_struct", "vm_start"),
    ("vm_area_struct", "vm_end"),
    ("vm_area_struct", "numab_state"),
    ("vma_numab_state", "prev_scan_seq"),
    ("task_struct", "signal"),
    ("signal_struct", "nr_threads"),
    ("task_struct", "numa_preferred_nid"),
    ("task_struct", "flags"),
    ("task_struct", "start_time"),
    ("pglist_data", "nbp_threshold"),
    ("mm_struct", "numa_scan_offset"),
];

/// PFN ranges of each NUMA node, `[start, end, node]`, from the memory blocks sysfs lists
/// under each node (merged where contiguous).
pub fn node_pfn_ranges(sys: &Path) -> Vec<[u64; 3]> {
    let block = fs::read_to_string(sys.join("memory/block_size_bytes"))
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim(), 16).ok());
    let Some(block_pages) = block.map(|b| b / 4096).filter(|&b| b > 0) else {
        return Vec::new();
    };
    let mut blocks: Vec<(u64, u64)> = Vec::new();
    for node in fs::read_dir(sys.join("node"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = node.file_name();
        let Some(nid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node")?.parse().ok())
        else {
            continue;
        };
        for e in fs::read_dir(node.path()).into_iter().flatten().flatten() {
            if let Some(b) = e
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("memory")?.parse::<u64>().ok())
            {
                blocks.push((b, nid));
            }
        }
    }
    merge_blocks(blocks, block_pages)
}

/// (memory block number, node) pairs into merged PFN ranges.
pub fn merge_blocks(mut blocks: Vec<(u64, u64)>, block_pages: u64) -> Vec<[u64; 3]> {
    blocks.sort_unstable();
    let mut out: Vec<[u64; 3]> = Vec::new();
    for (b, nid) in blocks {
        let (start, end) = (b * block_pages, (b + 1) * block_pages);
        match out.last_mut() {
            Some(last) if last[1] == start && last[2] == nid => last[1] = end,
            _ => out.push([start, end, nid]),
        }
    }
    out
}

/// Number of NUMA nodes known to sysfs (1 when the kernel shows none).
pub fn numa_nodes(sys_node: &Path) -> u32 {
    let n = fs::read_dir(sys_node)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.strip_prefix("node")
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count() as u32
        })
        .unwrap_or(0);
    n.max(1)
}

impl KernelFacts {
    /// Reads the running kernel's facts, except [`Self::fentry`], which needs the BPF object
    /// (see `bpf::fentry_test`). Mounts tracefs when it is not mounted.
    pub fn gather() -> Result<Self, TracefsError> {
        let release = fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        let version = KernelVersion::parse(&release).unwrap_or_default();
        let wanted: BTreeSet<&str> = catalogue_functions().collect();

        let btf_vmlinux = Path::new("/sys/kernel/btf/vmlinux").exists();
        // Parsed once here for every BTF fact (the loader parses it once more, with aya, for
        // fentry's attach ids).
        let btf = if btf_vmlinux {
            super::btf::Btf::from_sys_fs()
                .inspect_err(|e| tracing::warn!("kernel BTF unreadable: {e}"))
                .ok()
        } else {
            None
        };
        let btf_functions = btf.as_ref().map_or_else(BTreeSet::new, |b| {
            wanted
                .iter()
                .filter(|f| b.has_func(f))
                .map(|f| (*f).to_owned())
                .collect()
        });

        // One pass over /proc/kallsyms (large): the catalogue's functions and the variables the
        // programs read (vmemmap_base for a page's node, node_data for the hot thresholds).
        let symbols = match fs::File::open("/proc/kallsyms") {
            Ok(f) => kallsyms_from_reader(
                std::io::BufReader::new(f),
                &wanted,
                &[
                    "vmemmap_base",
                    "node_data",
                    "sysctl_numa_balancing_hot_threshold",
                    "sysctl_numa_balancing_mode",
                ],
            )
            .unwrap_or_default(),
            Err(e) => {
                tracing::warn!("cannot read /proc/kallsyms: {e}");
                Kallsyms::default()
            }
        };
        let vmemmap_base_sym = symbols.data.get("vmemmap_base").copied();
        let node_data_sym = symbols.data.get("node_data").copied();
        let hot_threshold_sym = symbols
            .data
            .get("sysctl_numa_balancing_hot_threshold")
            .copied();
        let numa_balancing_mode_sym = symbols.data.get("sysctl_numa_balancing_mode").copied();
        let kallsyms = symbols.text.keys().cloned().collect();
        let scan_ranges = symbols
            .text
            .into_iter()
            .filter(|(n, _)| n == "task_numa_work" || n == "change_prot_numa")
            .collect();
        let btf_fields = BTF_FIELDS
            .iter()
            .map(|(st, path)| {
                let off = btf.as_ref().and_then(|b| b.offset_of(st, path));
                (format!("{st}.{path}"), off)
            })
            .collect();
        let btf_signatures = btf.as_ref().map_or_else(BTreeMap::new, |b| {
            wanted
                .iter()
                .filter_map(|f| Some(((*f).to_owned(), b.func_signature(f)?)))
                .collect()
        });
        let page_head_bit = btf
            .as_ref()
            .and_then(|b| b.enum_value("pageflags", "PG_head"))
            .and_then(|v| u32::try_from(v).ok());
        let page_size = btf.as_ref().and_then(|b| b.struct_size("page"));
        let btf_tracepoints = HOOKS
            .iter()
            .filter_map(|h| match h.kind {
                HookKind::BtfTracepoint { tracepoint, .. } => tracepoint.split(':').nth(1),
                _ => None,
            })
            .filter(|n| {
                btf.as_ref()
                    .is_some_and(|b| b.has_type(&format!("btf_trace_{n}")))
            })
            .map(str::to_owned)
            .collect();
        let pid_inactive_reason = btf
            .as_ref()
            .and_then(|b| b.enum_value("numa_vmaskip_reason", "NUMAB_SKIP_PID_INACTIVE"))
            .and_then(|v| u32::try_from(v).ok());
        let node_pfn_ranges = node_pfn_ranges(Path::new("/sys/devices/system"));
        let vmemmap_arm64 = if cfg!(target_arch = "aarch64") {
            let v = super::vmcoreinfo::read(Path::new("/proc/kcore"))
                .as_ref()
                .and_then(super::vmcoreinfo::arm64_vmemmap);
            if v.is_none() {
                tracing::warn!(
                    "arm64: /proc/kcore's VMCOREINFO (VMEMMAP_START, PHYS_OFFSET) is not readable: \
                     the source node of migrations is not resolved"
                );
            }
            v
        } else {
            None
        };

        let tracefs = Tracefs::find_or_mount()?;
        let kprobes = Path::new("/sys/bus/event_source/devices/kprobe").exists()
            || tracefs.root.join("kprobe_events").exists();

        let mut tracepoints = BTreeMap::new();
        for h in HOOKS {
            if let HookKind::Tracepoint { category, name, .. } = h.kind
                && let Some(f) = tracefs.format(category, name)?
            {
                tracepoints.insert(format!("{category}:{name}"), f);
            }
        }

        let numa_balancing = fs::read_to_string("/proc/sys/kernel/numa_balancing")
            .ok()
            .and_then(|s| s.trim().parse().ok());

        let preemption = super::preempt::gather(&release);
        Ok(Self {
            release,
            version,
            btf_vmlinux,
            btf_functions,
            kallsyms,
            scan_ranges,
            btf_fields,
            btf_signatures,
            page_head_bit,
            page_size,
            btf_tracepoints,
            pid_inactive_reason,
            vmemmap_base_sym,
            vmemmap_arm64,
            node_data_sym,
            hot_threshold_sym,
            numa_balancing_mode_sym,
            node_pfn_ranges,
            kprobes,
            tracefs: Some(tracefs.root.display().to_string()),
            tracefs_mounted_by_us: tracefs.mounted_by_us,
            tracepoints,
            fentry: BTreeMap::new(),
            numa_nodes: numa_nodes(Path::new("/sys/devices/system/node")),
            numa_balancing,
            preemption,
        })
    }
}

/// What a report says of the kernel it ran on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelSummary {
    pub release: String,
    pub numa_nodes: u32,
    pub numa_balancing: Option<u32>,
}

impl From<&KernelFacts> for KernelSummary {
    fn from(f: &KernelFacts) -> Self {
        Self {
            release: f.release.clone(),
            numa_nodes: f.numa_nodes,
            numa_balancing: f.numa_balancing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(
            KernelVersion::parse("6.1.0-27-cloud-amd64"),
            Some(KernelVersion::new(6, 1, 0))
        );
        assert_eq!(
            KernelVersion::parse("6.18.44-fc-v657"),
            Some(KernelVersion::new(6, 18, 44))
        );
        assert_eq!(
            KernelVersion::parse("6.12"),
            Some(KernelVersion::new(6, 12, 0))
        );
        assert_eq!(KernelVersion::parse("garbage"), None);
        assert!(KernelVersion::new(6, 7, 0) > KernelVersion::new(6, 6, 9));
    }

    #[test]
    fn kallsyms_keeps_wanted_text_symbols() {
        let text = "ffffffff813b0bb0 t task_numa_work\n\
                    ffffffff813b70d0 T task_numa_fault\n\
                    ffffffff82000000 d task_numa_fault_data\n\
                    ffffffff813b70d0 T unrelated\n\
                    ffffffffc0000000 t change_prot_numa\t[some_module]\n";
        let wanted: BTreeSet<&str> = ["task_numa_work", "task_numa_fault", "change_prot_numa"]
            .into_iter()
            .collect();
        let got =
            kallsyms_from_reader(text.as_bytes(), &wanted, &["task_numa_fault_data"]).unwrap();
        assert_eq!(got.data["task_numa_fault_data"], 0xffffffff82000000);
        let got = got.text;
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            ["change_prot_numa", "task_numa_fault", "task_numa_work"]
        );
        // A range ends at the next text symbol, wherever it is listed.
        assert_eq!(
            got["task_numa_work"],
            [0xffffffff813b0bb0, 0xffffffff813b70d0]
        );
        assert_eq!(
            got["change_prot_numa"],
            [0xffffffffc0000000, 0xffffffffc0000000]
        );
        let hidden = "0000000000000000 t task_numa_work\n0000000000000000 T task_numa_fault\n";
        let got = kallsyms_from_reader(hidden.as_bytes(), &wanted, &["task_numa_work"]).unwrap();
        assert!(got.data.is_empty(), "a hidden address is no address");
        let got = got.text;
        assert_eq!(
            got["task_numa_work"],
            [0, 0],
            "no addresses for non-root readers"
        );
    }

    #[test]
    fn memory_blocks_merge_per_node() {
        let r = merge_blocks(vec![(3, 1), (0, 0), (1, 0), (2, 1), (5, 0)], 32768);
        assert_eq!(
            r,
            vec![[0, 65536, 0], [65536, 131072, 1], [163840, 196608, 0],]
        );
    }

    #[test]
    fn catalogue_lists_both_migrate_names() {
        let f: Vec<_> = catalogue_functions().collect();
        assert!(f.contains(&"migrate_misplaced_folio"));
        assert!(f.contains(&"migrate_misplaced_page"));
        assert!(f.contains(&"task_numa_work"));
    }
}
