//! Memory tiering as the kernel has it now: the NUMA-balancing mode, each node's tier and
//! whether the kernel takes it as a top tier (`node_is_toptier`), the promotion rate limit and
//! the hot threshold. Read at attach and at every snapshot (a few small sysfs files); the tier
//! classes go to the kernel side ([`Tiering::config`]) so that it counts a promotion exactly
//! where the kernel counts `pgpromote_success`.

use std::{collections::BTreeMap, fs, path::Path};

use numatrace_common::{HOT_THRESHOLD_SEEN, MAX_NODES, TierConfig};
use serde::{Deserialize, Serialize};

use crate::kernel::{facts::KernelFacts, version::KernelVersion};

/// One memory tier: `/sys/devices/virtual/memory_tiering/memory_tierN` (N grows with the
/// abstract distance: smaller is faster).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tier {
    pub tier: u32,
    pub nodes: Vec<u32>,
    /// The kernel's top tier (promotions go into it, demotions leave it).
    pub top: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
// Fields added later read as absent from older captures.
#[serde(default)]
pub struct Tiering {
    /// `kernel.numa_balancing`: 0 off, 1 NUMA balancing, 2 memory tiering, 3 both (`None`:
    /// unreadable).
    pub mode: Option<u32>,
    /// Memory tiers, fastest first (empty before 6.1).
    pub tiers: Vec<Tier>,
    /// How the top tier is known: `memory_tiers` (6.1+), `cpu_nodes` (5.18-6.0: a node with
    /// CPUs is a top tier), or why it is not known.
    pub source: String,
    /// Whether tiers are known (else nothing is classed as a promotion).
    pub known: bool,
    /// Nodes of the top tier (with [`Tiering::known`]).
    pub top_nodes: Vec<u32>,
    /// `kernel.numa_balancing_promote_rate_limit_MBps` (6.0+).
    pub promote_rate_limit_mbps: Option<u64>,
    /// debugfs `sched/numa_balancing/hot_threshold_ms` (6.0+; the reference the kernel
    /// adjusts its per-node threshold around, between 1/8 and 2x of it).
    pub hot_threshold_ms: Option<u64>,
    /// `/sys/kernel/mm/numa/demotion_enabled` (5.15+).
    pub demotion_enabled: Option<bool>,
    /// Each node's own `pgpromote_*` / `pgdemote_*` (node vmstat; pgdemote_* per node from
    /// 6.8): promotions counted on the node they arrive at, demotions on the node they leave.
    #[serde(default)]
    pub node_counters: BTreeMap<u32, BTreeMap<String, u64>>,
    /// Per node, the hot threshold (ms) its latest slow-tier hint fault was judged against,
    /// as the kernel side read it from the node's `pglist_data.nbp_threshold` (a threshold
    /// not adjusted yet is the reference); empty while none was read.
    pub node_hot_threshold_ms: BTreeMap<u32, u64>,
    /// Whether the kernel side reads them: tiering mode, the kernel's `node_data` address
    /// (kallsyms) and the field's offset (BTF, 6.0+) known.
    pub node_thresholds_read: bool,
}

/// Steps of the kernel's threshold adjustment (NUMA_MIGRATION_ADJUST_STEPS, kernel/sched/fair.c):
/// each adjustment moves the threshold by 2/16 of the reference, between that and twice the
/// reference.
const ADJUST_STEPS: u64 = 16;

/// Where the kernel side finds each node's hot threshold: `node_data[]`'s address and
/// `nbp_threshold`'s offset in `struct pglist_data`, or zeros (not read) when either is unknown.
pub fn threshold_source(facts: &KernelFacts) -> (u64, u32) {
    let off = facts
        .btf_fields
        .get("pglist_data.nbp_threshold")
        .copied()
        .flatten();
    match (facts.node_data_sym, off) {
        (Some(sym), Some(off)) if off != 0 => (sym, off),
        _ => (0, 0),
    }
}

/// Every kernel variable the tiering programs read, in one place: each node's hot threshold
/// ([`threshold_source`]), the kernel's own mode and reference threshold (kallsyms), and
/// whether the kernel keeps no per-node threshold (BTF says `pglist_data` has no
/// `nbp_threshold`: 5.18 and 5.19, where every decision is judged by the sysctl).
pub fn kernel_sources(facts: &KernelFacts, config: &mut TierConfig) {
    (config.node_data, config.threshold_off) = threshold_source(facts);
    config.hot_threshold_sym = facts.hot_threshold_sym.unwrap_or(0);
    config.mode_sym = facts.numa_balancing_mode_sym.unwrap_or(0);
    let field = facts.btf_fields.get("pglist_data.nbp_threshold").copied();
    config.threshold_is_sysctl = u32::from(facts.btf_vmlinux && matches!(field, Some(None)));
}

/// Parses a kernel list (`0-2,5`), as sysfs prints node and CPU lists.
pub fn parse_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
            // A hostile or corrupt list cannot make this loop long: nodes stop at 1024.
            out.extend((a..=b.min(a.saturating_add(1024))).take(1025));
        }
    }
    out
}

fn read_trim(path: &Path) -> Option<String> {
    super::read_text(path).ok().map(|s| s.trim().to_owned())
}

fn read_u64(path: &Path) -> Option<u64> {
    read_trim(path)?.parse().ok()
}

/// `pgpromote_*` / `pgdemote_*` of every node's vmstat.
fn node_counters(dir: &Path) -> BTreeMap<u32, BTreeMap<String, u64>> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let node: u32 = e.file_name().to_str()?.strip_prefix("node")?.parse().ok()?;
            let text = super::read_text(e.path().join("vmstat")).ok()?;
            let counters = text
                .lines()
                .filter_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    (k.starts_with("pgpromote_") || k.starts_with("pgdemote_"))
                        .then(|| Some((k.to_owned(), v.trim().parse().ok()?)))?
                })
                .collect::<BTreeMap<_, _>>();
            (!counters.is_empty()).then_some((node, counters))
        })
        .collect()
}

impl Tiering {
    pub fn read(version: KernelVersion) -> Self {
        Self::read_at(Path::new("/"), version)
    }

    /// Reads the tree under `root` (tests use a fake one).
    pub fn read_at(root: &Path, version: KernelVersion) -> Self {
        let p = |rel: &str| root.join(rel);
        let cpu_nodes = read_trim(&p("sys/devices/system/node/has_cpu"))
            .map(|s| parse_list(&s))
            .unwrap_or_default();
        let mut tiers: Vec<Tier> = fs::read_dir(p("sys/devices/virtual/memory_tiering"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let tier: u32 = name.strip_prefix("memory_tier")?.parse().ok()?;
                let nodes = parse_list(&read_trim(&e.path().join("nodelist"))?);
                Some(Tier {
                    tier,
                    nodes,
                    top: false,
                })
            })
            .collect();
        tiers.sort_by_key(|t| t.tier);
        let (known, source, top_nodes) = if !tiers.is_empty() {
            // mm/memory-tiers.c: walking from the slowest tier, the first one holding a node
            // with CPUs bounds the top tier; it and every faster tier are top tiers.
            let bound = tiers
                .iter()
                .rev()
                .find(|t| t.nodes.iter().any(|n| cpu_nodes.contains(n)))
                .map(|t| t.tier);
            for t in &mut tiers {
                // No tier with CPUs: top_tier_adistance stays at its maximum, all are top.
                t.top = bound.is_none_or(|b| t.tier <= b);
            }
            let top = tiers
                .iter()
                .filter(|t| t.top)
                .flat_map(|t| t.nodes.clone())
                .collect();
            (true, "memory_tiers".to_owned(), top)
        } else if version >= KernelVersion::new(6, 1, 0) {
            // Every node is its own top tier when none is listed (node_is_toptier of a node
            // without a tier is true): nothing can be promoted.
            (
                true,
                "no memory tiers listed: every node is a top tier".to_owned(),
                (0..MAX_NODES).collect(),
            )
        } else if version >= KernelVersion::new(5, 18, 0) {
            (true, "cpu_nodes".to_owned(), cpu_nodes.clone())
        } else {
            (
                false,
                "no memory tiering before 5.18 (demotion only from 5.15)".to_owned(),
                Vec::new(),
            )
        };
        let node_counters = node_counters(&p("sys/devices/system/node"));
        let sysctl = |name: &str| read_u64(&p(&format!("proc/sys/kernel/{name}")));
        Self {
            mode: sysctl("numa_balancing").map(|m| m as u32),
            tiers,
            source,
            known,
            top_nodes,
            promote_rate_limit_mbps: sysctl("numa_balancing_promote_rate_limit_MBps"),
            hot_threshold_ms: read_u64(&p(
                "sys/kernel/debug/sched/numa_balancing/hot_threshold_ms",
            )),
            demotion_enabled: read_trim(&p("sys/kernel/mm/numa/demotion_enabled"))
                .map(|v| matches!(v.as_str(), "true" | "1" | "Y" | "y")),
            node_counters,
            node_hot_threshold_ms: BTreeMap::new(),
            node_thresholds_read: false,
        }
    }

    /// The floor and the ceiling of an adjusted threshold: 2/16 and twice the reference
    /// (`None` where debugfs cannot be read: the reference is not known).
    pub fn threshold_bounds(&self) -> Option<(u64, u64)> {
        let r = self.hot_threshold_ms?;
        Some((r.saturating_mul(2) / ADJUST_STEPS, r.saturating_mul(2)))
    }

    /// Takes the kernel side's per-node values ([`numatrace_common::HOT_THRESHOLD_SEEN`] | ms),
    /// a node never read left out. 0 is a threshold not adjusted yet, or reset while the node
    /// had room (pgdat_free_space_enough): the reference applies to the node's next decision,
    /// so it reads as the reference (left out where that is not known).
    pub fn set_node_thresholds(&mut self, raw: impl IntoIterator<Item = (u32, u64)>) {
        let reference = self.hot_threshold_ms;
        self.node_hot_threshold_ms = raw
            .into_iter()
            .filter(|(_, v)| v & HOT_THRESHOLD_SEEN != 0)
            .filter_map(|(n, v)| match v & u64::from(u32::MAX) {
                0 => Some((n, reference?)),
                th => Some((n, th)),
            })
            .collect();
    }

    /// Whether the memory-tiering bit is set in the mode.
    pub fn tiering_mode(&self) -> bool {
        self.mode.is_some_and(|m| m & 2 != 0)
    }

    /// The tier `node` is in (`None`: no tier lists it).
    pub fn tier_of(&self, node: u32) -> Option<u32> {
        self.tiers
            .iter()
            .find(|t| t.nodes.contains(&node))
            .map(|t| t.tier)
    }

    /// Nodes outside the top tier: where promotions come from.
    pub fn slow_nodes(&self) -> Vec<u32> {
        self.tiers
            .iter()
            .filter(|t| !t.top)
            .flat_map(|t| t.nodes.clone())
            .collect()
    }

    /// What the kernel side classes migrations by. The kernel counts a promotion only while
    /// the tiering bit is set from 6.12 (commit ac59a1f0146f, "memory tiering: count
    /// PGPROMOTE_SUCCESS when mem tiering is enabled."; read in the 6.12 tree), and every
    /// migration from a slower tier into the top one before (read in 6.1 and 6.8). A version
    /// test, where numatrace otherwise goes by what the kernel has: no symbol or field marks
    /// the change.
    pub fn config(&self, version: KernelVersion) -> TierConfig {
        let mut mask = 0u64;
        for n in &self.top_nodes {
            if *n < 64 {
                mask |= 1 << n;
            }
        }
        // Nodes past the mask are taken as top tiers on the kernel side too.
        TierConfig {
            toptier_mask: mask,
            known: u32::from(self.known),
            mode_gated: u32::from(version >= KernelVersion::new(6, 12, 0)),
            mode: self.mode.unwrap_or(0),
            threshold_off: 0,
            node_data: 0,
            // 5.18-6.0 list no tiers: a node without CPUs may be slow there.
            has_slow: u32::from(
                self.known && (!self.slow_nodes().is_empty() || self.source == "cpu_nodes"),
            ),
            threshold_is_sysctl: 0,
            hot_threshold_sym: 0,
            mode_sym: 0,
        }
    }
}

/// Test layout: `top` nodes in `memory_tier4` (the top tier), `slow` in `memory_tier72`, as
/// 6.12 and 7.x place the guests' nodes.
#[cfg(test)]
pub fn two_tiers(top: &[u32], slow: &[u32]) -> Vec<Tier> {
    vec![
        Tier {
            tier: 4,
            nodes: top.to_vec(),
            top: true,
        },
        Tier {
            tier: 72,
            nodes: slow.to_vec(),
            top: false,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    #[test]
    fn parses_lists() {
        assert_eq!(parse_list("0-2,5\n"), vec![0, 1, 2, 5]);
        assert_eq!(parse_list(""), Vec::<u32>::new());
        assert_eq!(parse_list("x,3"), vec![3]);
        assert!(parse_list("0-4294967295").len() <= 1025);
    }

    #[test]
    fn a_cpu_less_slow_node_is_the_only_one_outside_the_top_tier() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        put(r, "sys/devices/system/node/has_cpu", "0-1\n");
        put(
            r,
            "sys/devices/virtual/memory_tiering/memory_tier4/nodelist",
            "0-1\n",
        );
        put(
            r,
            "sys/devices/virtual/memory_tiering/memory_tier135/nodelist",
            "2\n",
        );
        put(r, "proc/sys/kernel/numa_balancing", "2\n");
        put(
            r,
            "proc/sys/kernel/numa_balancing_promote_rate_limit_MBps",
            "65536\n",
        );
        put(r, "sys/kernel/mm/numa/demotion_enabled", "true\n");
        put(
            r,
            "sys/devices/system/node/node2/vmstat",
            "nr_free_pages 5\npgdemote_kswapd 0\npgpromote_success 0\n",
        );
        put(
            r,
            "sys/devices/system/node/node0/vmstat",
            "pgpromote_success 16384\n",
        );
        let t = Tiering::read_at(r, KernelVersion::new(6, 12, 0));
        assert_eq!(t.node_counters[&0]["pgpromote_success"], 16384);
        assert_eq!(t.node_counters[&2].len(), 2, "only tiering counters kept");
        assert_eq!(t.tiers.len(), 2);
        assert!(t.tiers[0].top && !t.tiers[1].top);
        assert_eq!(t.top_nodes, vec![0, 1]);
        assert_eq!(t.slow_nodes(), vec![2]);
        assert_eq!(t.tier_of(2), Some(135));
        assert!(t.tiering_mode());
        assert_eq!(t.promote_rate_limit_mbps, Some(65536));
        assert_eq!(t.hot_threshold_ms, None, "no debugfs here");
        assert_eq!(t.demotion_enabled, Some(true));
        let c = t.config(KernelVersion::new(6, 12, 0));
        assert_eq!(
            (c.toptier_mask, c.known, c.mode_gated, c.mode),
            (0b11, 1, 1, 2)
        );
        assert!(c.promotes(2, 0) && !c.promotes(0, 1));
        assert_eq!(t.config(KernelVersion::new(6, 11, 0)).mode_gated, 0);
    }

    #[test]
    fn one_tier_is_all_top_and_old_kernels_know_no_tiers() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        put(r, "sys/devices/system/node/has_cpu", "0-1\n");
        put(
            r,
            "sys/devices/virtual/memory_tiering/memory_tier4/nodelist",
            "0-2\n",
        );
        let t = Tiering::read_at(r, KernelVersion::new(6, 1, 0));
        assert!(t.slow_nodes().is_empty());
        assert!(!t.config(KernelVersion::new(6, 1, 0)).promotes(2, 0));
        let old = Tiering::read_at(r.join("none").as_path(), KernelVersion::new(5, 10, 0));
        assert!(!old.known && old.mode.is_none());
        assert_eq!(old.config(KernelVersion::new(5, 10, 0)).known, 0);
    }

    #[test]
    fn node_thresholds_take_only_read_values_and_zero_as_the_reference() {
        let mut t = Tiering {
            hot_threshold_ms: Some(1000),
            ..Tiering::default()
        };
        t.set_node_thresholds([
            (0, HOT_THRESHOLD_SEEN | 125),
            (1, 0),
            (2, HOT_THRESHOLD_SEEN),
        ]);
        assert_eq!(
            t.node_hot_threshold_ms,
            BTreeMap::from([(0, 125), (2, 1000)])
        );
        assert_eq!(t.threshold_bounds(), Some((125, 2000)));
        t.hot_threshold_ms = Some(300);
        assert_eq!(
            t.threshold_bounds(),
            Some((37, 600)),
            "integer steps, as the kernel's"
        );
        // debugfs locked: no bounds, and a node not adjusted yet has no known threshold.
        t.hot_threshold_ms = None;
        assert_eq!(t.threshold_bounds(), None);
        t.set_node_thresholds([(0, HOT_THRESHOLD_SEEN | 125), (2, HOT_THRESHOLD_SEEN)]);
        assert_eq!(t.node_hot_threshold_ms, BTreeMap::from([(0, 125)]));
    }

    #[test]
    fn thresholds_are_read_only_with_an_address_and_an_offset() {
        let mut f = KernelFacts::default();
        assert_eq!(threshold_source(&f), (0, 0));
        f.node_data_sym = Some(0xffff_ffff_8300_0000);
        assert_eq!(
            threshold_source(&f),
            (0, 0),
            "no offset (before 6.1, or no BTF)"
        );
        f.btf_fields
            .insert("pglist_data.nbp_threshold".into(), Some(0x1a40));
        // node_data[] is an array of pointers on x86-64 and arm64 alike.
        assert_eq!(threshold_source(&f), (0xffff_ffff_8300_0000, 0x1a40));
    }

    #[test]
    fn decisions_are_judged_by_the_sysctl_alone_only_without_a_per_node_threshold() {
        let mut f = KernelFacts {
            hot_threshold_sym: Some(0x10),
            numa_balancing_mode_sym: Some(0x20),
            ..KernelFacts::default()
        };
        let mut c = TierConfig::default();
        kernel_sources(&f, &mut c);
        assert_eq!(
            (c.hot_threshold_sym, c.mode_sym, c.threshold_is_sysctl),
            (0x10, 0x20, 0),
            "no BTF: whether nodes keep one is unknown"
        );
        f.btf_vmlinux = true;
        f.btf_fields
            .insert("pglist_data.nbp_threshold".into(), None);
        kernel_sources(&f, &mut c);
        assert_eq!(c.threshold_is_sysctl, 1, "5.18/5.19: no per-node threshold");
        f.btf_fields
            .insert("pglist_data.nbp_threshold".into(), Some(0x1a40));
        kernel_sources(&f, &mut c);
        assert_eq!(c.threshold_is_sysctl, 0);
    }
}
