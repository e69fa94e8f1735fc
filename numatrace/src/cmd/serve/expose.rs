//! Builds the metric families of one scrape from the fold, the snapshot it came from and the
//! engine's own figures. Pure: the golden test renders a fixed snapshot.

use std::collections::{BTreeMap, HashMap};

use numatrace_common::{MAX_NODES, NODE_FAULT_FIELDS};
use prometheus::{
    core::{Collector, Desc},
    proto::{self, LabelPair, Metric, MetricFamily, MetricType},
};

use super::fold::{Fold, OTHER};
use crate::{
    bpf::loader::HookReport,
    engine::Snapshot,
    model::Counts,
    model::NodeTasks,
    report::{
        measured::{Feed, Measured},
        metrics::{
            COUNT_FAMILIES, Kind, Spec, auto_families, counted, family, scope, vmstat_exported,
            vmstat_family,
        },
        stat::Dropped,
    },
};

/// What one scrape exports besides the fold.
pub struct Inputs<'a> {
    pub snap: &'a Snapshot,
    pub hooks: &'a [HookReport],
    /// What the hooks measure: a family whose hook did not attach is left out, not 0.
    pub measured: &'a Measured,
    pub kernel_release: &'a str,
    pub numa_balancing: Option<u32>,
    /// Σ pid_inactive gap records: (skips, over the thread count, at it).
    pub gaps: (u64, u64, u64),
    /// (program, run time ns, runs).
    pub programs: &'a [(String, u64, u64)],
    pub bpf_stats: bool,
    pub scrape_seconds: f64,
    pub tasks_tracked: usize,
    /// numatrace's own CPU time (utime + stime), at tick resolution.
    pub own_cpu_ns: Option<u64>,
}

/// Histogram upper bounds exported: 2^10 ns (≈1 µs) to 2^34 ns (≈17 s); the log2 bucket `b`
/// holds durations in [2^(b-1), 2^b) ns, so `le = 2^b ns` counts those below 2^b.
const LATENCY_BUCKETS: std::ops::RangeInclusive<usize> = 10..=34;

struct Builder<'s> {
    specs: HashMap<&'s str, &'s Spec>,
    out: BTreeMap<String, Vec<Metric>>,
}

fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_owned());
    l.set_value(value.to_owned());
    l
}

impl<'s> Builder<'s> {
    fn new(specs: &'s [Spec]) -> Self {
        Self {
            specs: specs.iter().map(|s| (s.name.as_str(), s)).collect(),
            out: BTreeMap::new(),
        }
    }

    fn spec(&self, name: &str) -> &'s Spec {
        self.specs
            .get(name)
            .copied()
            .unwrap_or_else(|| panic!("metric {name} is not in the catalogue"))
    }

    fn metric(&self, name: &str, values: &[&str]) -> Metric {
        let spec = self.spec(name);
        assert_eq!(spec.labels.len(), values.len(), "labels of {name}");
        let mut m = Metric::default();
        m.set_label(
            spec.labels
                .iter()
                .zip(values)
                .map(|(n, v)| label(n, v))
                .collect(),
        );
        m
    }

    fn sample(&mut self, name: &str, values: &[&str], v: f64) {
        let mut m = self.metric(name, values);
        match self.spec(name).kind {
            Kind::Counter => {
                let mut c = proto::Counter::default();
                c.set_value(v);
                m.set_counter(c);
            }
            Kind::Gauge => {
                let mut g = proto::Gauge::default();
                g.set_value(v);
                m.set_gauge(g);
            }
            Kind::Histogram => panic!("{name} is a histogram"),
        }
        self.out.entry(name.to_owned()).or_default().push(m);
    }

    fn histogram(&mut self, name: &str, buckets: &[(f64, u64)], count: u64, sum: f64) {
        let mut m = self.metric(name, &[]);
        let mut h = proto::Histogram::default();
        h.set_sample_count(count);
        h.set_sample_sum(sum);
        h.set_bucket(
            buckets
                .iter()
                .map(|(le, n)| {
                    let mut b = proto::Bucket::default();
                    b.set_upper_bound(*le);
                    b.set_cumulative_count(*n);
                    b
                })
                .collect(),
        );
        m.set_histogram(h);
        self.out.entry(name.to_owned()).or_default().push(m);
    }

    /// The families of one scope built from its counts ([`COUNT_FAMILIES`]): the per-scope
    /// ones under `prefix` with the scope's label values in front (a scope without labels —
    /// all tasks, numatrace itself — shows series that are 0 from the start), and, for all
    /// tasks, the total-only ones and the counters' families of their own.
    fn counts(&mut self, prefix: &str, scope: &[&str], c: &Counts, m: &Measured) {
        let all_tasks = prefix == scope::ALL;
        for f in COUNT_FAMILIES.iter().filter(|f| f.scoped || all_tasks) {
            let name = if f.scoped {
                format!("{prefix}{}", f.name)
            } else {
                f.name.to_owned()
            };
            for (labels, v) in counted(f, c, scope.is_empty(), m) {
                let all: Vec<&str> = scope.iter().copied().chain(labels).collect();
                self.sample(&name, &all, v);
            }
        }
        if !all_tasks {
            return;
        }
        for a in auto_families() {
            if !m.is(a.counter.feed) {
                continue;
            }
            if let Some(v) = c.value(a.counter.path).and_then(|v| v.as_f64()) {
                self.sample(&a.name, &[], v * a.scale);
            }
        }
    }

    fn finish(self) -> Vec<MetricFamily> {
        let Self { specs, out } = self;
        out.into_iter()
            .map(|(name, metrics)| {
                let spec = specs[name.as_str()];
                let mut f = MetricFamily::default();
                f.set_name(name);
                f.set_help(spec.help.clone());
                f.set_field_type(match spec.kind {
                    Kind::Counter => MetricType::COUNTER,
                    Kind::Gauge => MetricType::GAUGE,
                    Kind::Histogram => MetricType::HISTOGRAM,
                });
                f.set_metric(metrics);
                f
            })
            .collect()
    }
}

/// Demotions by reclaimer, each node's tier, the promotion knobs.
fn tiering(b: &mut Builder, snap: &Snapshot, m: &Measured) {
    use numatrace_common::Counter;
    if m.is(Feed::MigratePages) {
        let c = &snap.counters;
        let (pages, kswapd, khugepaged) = (
            c.get(Counter::DemotePages),
            c.get(Counter::DemoteKswapd),
            c.get(Counter::DemoteKhugepaged),
        );
        for (who, n) in [
            ("kswapd", kswapd),
            ("khugepaged", khugepaged),
            (
                "direct_or_proactive",
                pages.saturating_sub(kswapd).saturating_sub(khugepaged),
            ),
        ] {
            b.sample(family::DEMOTED_PAGES, &[who], n as f64);
        }
    }
    let t = &snap.tiering;
    for tier in &t.tiers {
        for node in &tier.nodes {
            b.sample(
                family::NODE_TIER,
                &[
                    &node.to_string(),
                    &tier.tier.to_string(),
                    if tier.top { "true" } else { "false" },
                ],
                1.0,
            );
        }
    }
    if let Some(v) = t.promote_rate_limit_mbps {
        b.sample(family::PROMOTE_RATE_LIMIT, &[], v as f64 * 1048576.0);
    }
    if let Some(v) = t.hot_threshold_ms {
        b.sample(family::HOT_THRESHOLD_SECONDS, &[], v as f64 / 1000.0);
    }
    // Bounded: one series per node (at most MAX_NODES).
    for (node, ms) in &t.node_hot_threshold_ms {
        b.sample(
            family::NODE_HOT_THRESHOLD_SECONDS,
            &[&node.to_string()],
            *ms as f64 / 1000.0,
        );
    }
}

fn node_label(n: Option<u32>) -> String {
    n.map_or_else(|| "unknown".to_owned(), |n| n.to_string())
}

/// Every family of one scrape.
pub fn build(specs: &[Spec], fold: &Fold, i: &Inputs) -> Vec<MetricFamily> {
    let mut b = Builder::new(specs);
    let snap = i.snap;
    let t = &fold.totals;

    let m = i.measured;
    b.counts(scope::ALL, &[], t, m);
    b.counts(scope::SELF, &[], &fold.own, m);
    for (cg, c) in &fold.cgroups {
        b.counts(scope::CGROUP, &[cg.as_str()], c, m);
    }
    for s in &fold.tasks {
        let pid = s.pid.to_string();
        b.counts(scope::TASK, &[s.comm.as_str(), &pid], &s.counts, m);
    }
    // Always there, so that the per-task families exist before any task qualifies.
    b.counts(scope::TASK, &[OTHER, OTHER], &fold.other_tasks, m);

    migration_latency(&mut b, t, &snap.migrate_latency, m);
    if m.is(Feed::SkipGap) {
        let (skips, over, at) = i.gaps;
        b.sample(family::PID_INACTIVE_SKIPS, &[], skips as f64);
        b.sample(family::PID_INACTIVE_SKIPS_OVER_THREADS, &[], over as f64);
        b.sample(family::PID_INACTIVE_SKIPS_AT_THRESHOLD, &[], at as f64);
    }

    nodes(&mut b, snap, &fold.node_tasks, m);
    tiering(&mut b, snap, m);

    for (name, v) in &snap.vmstat_hi {
        let family = vmstat_family(name);
        // Only the counters the kernel had when serve started are in the catalogue.
        if vmstat_exported(name) && b.specs.contains_key(family.as_str()) {
            b.sample(&family, &[], *v as f64);
        }
    }

    own(&mut b, i);
    b.finish()
}

/// migrate_misplaced's latency histogram (from the snapshot's log2 buckets).
fn migration_latency(b: &mut Builder, t: &Counts, lat: &[u64], m: &Measured) {
    if !m.is(Feed::MigrateMisplaced) {
        return;
    }
    let cum = |upto: usize| -> u64 { lat.iter().take(upto + 1).sum() };
    let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
        .map(|b| ((1u64 << b) as f64 / 1e9, cum(b)))
        .collect();
    b.histogram(
        family::MIGRATION_LATENCY_SECONDS,
        &buckets,
        lat.iter().sum(),
        t.migrations.latency_ns_total as f64 / 1e9,
    );
}

/// `tasks`: by node, the live traced tasks preferring it and last running on it (the fold
/// counts them as it walks the tasks: `serve`'s snapshots list no task records).
fn nodes(b: &mut Builder, snap: &Snapshot, tasks: &NodeTasks, m: &Measured) {
    let rows = snap.node_rows_with(tasks);
    for r in &rows {
        let node = r.node.to_string();
        if m.is(Feed::HintFaults) {
            b.sample(
                family::NODE_HINT_FAULTS,
                &[&node, "local"],
                r.hint_faults_local as f64,
            );
            b.sample(
                family::NODE_HINT_FAULTS,
                &[&node, "remote"],
                r.hint_faults_remote as f64,
            );
            b.sample(family::NODE_HINT_FAULT_PAGES, &[&node], r.hint_pages as f64);
        }
        for (state, v) in [("total", r.mem_total_bytes), ("free", r.mem_free_bytes)] {
            if let Some(v) = v {
                b.sample(family::NODE_MEMORY_BYTES, &[&node, state], v as f64);
            }
        }
        b.sample(
            family::NODE_TASKS,
            &[&node, "preferred"],
            r.tasks_preferring as f64,
        );
        b.sample(
            family::NODE_TASKS,
            &[&node, "last_ran"],
            r.tasks_last_ran as f64,
        );
    }
    // Every pair of distinct nodes (zero or not, so that series exist from the start), and
    // any other cell that counted something (an unresolved source, or a node beyond sysfs').
    let known: Vec<u32> = rows.iter().map(|r| r.node).collect();
    let mut cells: BTreeMap<(Option<u32>, u32), (u64, u64, u64)> = BTreeMap::new();
    for s in &known {
        for d in known.iter().filter(|d| *d != s) {
            cells.insert((Some(*s), *d), (0, 0, 0));
        }
    }
    for f in snap.node_flows() {
        cells.insert((f.src, f.dst), (f.migrated, f.not_migrated, f.pages));
    }
    for ((src, dst), (ok, failed, pages)) in cells {
        let (src, dst) = (node_label(src), dst.to_string());
        if m.is(Feed::MigrateMisplaced) {
            b.sample(
                family::NODE_MIGRATIONS,
                &[&src, &dst, "migrated"],
                ok as f64,
            );
            b.sample(
                family::NODE_MIGRATIONS,
                &[&src, &dst, "not_migrated"],
                failed as f64,
            );
        }
        if m.is(Feed::HintFaults) {
            b.sample(family::NODE_MIGRATED_PAGES, &[&src, &dst], pages as f64);
        }
    }
    const _: () = assert!(NODE_FAULT_FIELDS >= 3 && MAX_NODES >= 1);
}

fn own(b: &mut Builder, i: &Inputs) {
    let snap = i.snap;
    let dropped = serde_json::to_value(Dropped::from_snapshot(snap)).unwrap_or_default();
    if let Some(fields) = dropped.as_object() {
        for (cause, v) in fields.iter().filter(|(k, _)| *k != "total") {
            b.sample(
                family::DROPPED_EVENTS,
                &[cause],
                v.as_u64().unwrap_or(0) as f64,
            );
        }
    }
    let e = &snap.events;
    for (kind, n) in [
        ("skip_vma", e.skip_vma),
        ("numa_move", e.numa_move),
        ("numa_swap", e.numa_swap),
        ("numa_stick", e.numa_stick),
        ("migrate_pages", e.migrate_pages),
        ("task_exit", e.task_exit),
        ("vma_scan", e.vma_scan),
        ("span", e.spans),
    ] {
        b.sample(family::RINGBUF_RECORDS, &[kind], n as f64);
    }
    for (prog, ns, runs) in i.programs {
        b.sample(family::BPF_RUN_SECONDS, &[prog], *ns as f64 / 1e9);
        b.sample(family::BPF_RUNS, &[prog], *runs as f64);
    }
    b.sample(
        family::BPF_STATS_ENABLED,
        &[],
        f64::from(u8::from(i.bpf_stats)),
    );
    b.sample(family::SCRAPE_DURATION_SECONDS, &[], i.scrape_seconds);
    if let Some(ns) = i.own_cpu_ns {
        b.sample(family::CPU_SECONDS, &[], ns as f64 / 1e9);
    }
    b.sample(
        family::SNAPSHOT_CONSISTENT,
        &[],
        f64::from(u8::from(snap.consistent)),
    );
    b.sample(family::TASKS_TRACKED, &[], i.tasks_tracked as f64);
    // As read with this scrape's snapshot (an admin may switch memory tiering on meanwhile).
    if let Some(mode) = i.snap.tiering.mode.or(i.numa_balancing) {
        b.sample(family::NUMA_BALANCING, &[], f64::from(mode));
    }
    for h in i.hooks {
        let mechanism = if h.attached {
            h.mechanism.to_string()
        } else {
            "none".to_owned()
        };
        b.sample(
            family::HOOK_INFO,
            &[
                &h.name,
                &mechanism,
                if h.attached { "true" } else { "false" },
                i.kernel_release,
            ],
            1.0,
        );
    }
    b.sample(family::BUILD_INFO, &[env!("CARGO_PKG_VERSION")], 1.0);
}

/// Counters never go below what they were last exported as. The kernel side adds to a total
/// and to its part (e.g. hint faults, then the local ones) in two steps; a read between them
/// makes a difference of the two (remote) one too high, and the next read one lower. Holding
/// the highest value exported keeps every counter monotonic; the next read catches up.
#[derive(Debug, Default)]
pub struct HighWater(HashMap<String, f64>);

fn series_key(name: &str, m: &Metric, extra: &str) -> String {
    let mut k = name.to_owned();
    for l in m.get_label() {
        k.push('\0');
        k.push_str(l.name());
        k.push('=');
        k.push_str(l.value());
    }
    k.push('\0');
    k.push_str(extra);
    k
}

impl HighWater {
    pub fn apply(&mut self, families: &mut [MetricFamily]) {
        let mut next = HashMap::new();
        for f in families.iter_mut() {
            let name = f.name().to_owned();
            let kind = f.get_field_type();
            for m in f.mut_metric().iter_mut() {
                let mut hold = |extra: &str, v: f64| -> f64 {
                    let k = series_key(&name, m, extra);
                    let v = self.0.get(&k).map_or(v, |old| v.max(*old));
                    next.insert(k, v);
                    v
                };
                match kind {
                    MetricType::COUNTER => {
                        let v = hold("", m.get_counter().get_value());
                        let mut c = proto::Counter::default();
                        c.set_value(v);
                        m.set_counter(c);
                    }
                    MetricType::HISTOGRAM => {
                        let h = m.get_histogram().clone();
                        let mut out = proto::Histogram::default();
                        out.set_sample_count(hold("count", h.get_sample_count() as f64) as u64);
                        out.set_sample_sum(hold("sum", h.get_sample_sum()));
                        out.set_bucket(
                            h.get_bucket()
                                .iter()
                                .map(|bk| {
                                    let mut nb = proto::Bucket::default();
                                    nb.set_upper_bound(bk.upper_bound());
                                    nb.set_cumulative_count(hold(
                                        &bk.upper_bound().to_string(),
                                        bk.cumulative_count() as f64,
                                    )
                                        as u64);
                                    nb
                                })
                                .collect(),
                        );
                        m.set_histogram(out);
                    }
                    _ => {}
                }
            }
        }
        // Series no longer exported are forgotten: a task that leaves the top N frees its key.
        self.0 = next;
    }
}

/// The registry's view of the catalogue: its descriptors, and the families of the latest
/// scrape (set before each gather).
pub struct SnapshotCollector {
    descs: Vec<Desc>,
    current: std::sync::Mutex<Vec<MetricFamily>>,
}

impl SnapshotCollector {
    pub fn new(specs: &[Spec]) -> prometheus::Result<Self> {
        let descs = specs
            .iter()
            .map(|s| {
                Desc::new(
                    s.name.clone(),
                    s.help.clone(),
                    s.labels.iter().map(|l| (*l).to_owned()).collect(),
                    HashMap::new(),
                )
            })
            .collect::<prometheus::Result<Vec<_>>>()?;
        Ok(Self {
            descs,
            current: std::sync::Mutex::new(Vec::new()),
        })
    }

    pub fn set(&self, families: Vec<MetricFamily>) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = families;
    }
}

impl Collector for SnapshotCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use numatrace_common::TaskStats;
    use prometheus::{Encoder as _, Registry, TextEncoder};

    use super::*;
    const MISPLACED_HOOK: &str = "migrate_misplaced_folio|_page";
    use crate::{
        cmd::serve::fold::{Diffed, FoldLimits},
        kernel::nodes::NodeInfo,
        model::TaskRecord,
        plan::Mechanism,
        report::metrics as catalogue,
        sources::maps::Counters,
    };

    fn task(pid: u32, comm: &str, cgroup: &str, k: u64) -> TaskRecord {
        let mut s = TaskStats::new(pid, pid);
        s.comm[..comm.len()].copy_from_slice(comm.as_bytes());
        s.first_ns = 1;
        s.scan.calls = 2 * k;
        s.scan.time_ns = 3_000_000 * k;
        s.scan.runtime_in_scan_ns = 2_000_000 * k;
        s.runtime_first_ns = 1;
        s.runtime_last_ns = 1 + 100_000_000 * k;
        s.scan.pte_updates = 4096 * k;
        s.hint_faults.faults = 100 * k;
        s.hint_faults.local = 60 * k;
        s.hint_faults.pages = 100 * k;
        s.hint_faults.migrated_pages = 30 * k;
        s.tiering.promoted_pages = 10 * k;
        s.skip_vma[1] = k;
        s.migrations.attempts = 30 * k;
        s.migrations.succeeded = 30 * k;
        s.migrations.latency_ns_total = 30 * k * 50_000;
        let mut t = TaskRecord::from_stats(&s, false);
        t.cgroup = Some(cgroup.into());
        // One id per path, as the engine's records have.
        t.cgroup_id = cgroup.len() as u64;
        t
    }

    fn snapshot(k: u64) -> Snapshot {
        let n = MAX_NODES as usize;
        let mut lat = vec![0u64; 64];
        lat[16] = 40 * k; // [32.8 µs, 65.5 µs)
        lat[20] = 20 * k; // [0.52 ms, 1.05 ms)
        let mut node_faults = vec![0u64; n * NODE_FAULT_FIELDS as usize];
        node_faults[0] = 200 * k; // node 0: faults, local, pages
        node_faults[1] = 120 * k;
        node_faults[2] = 200 * k;
        let fields = NODE_FAULT_FIELDS as usize;
        node_faults[fields] = 100 * k;
        node_faults[fields + 1] = 60 * k;
        node_faults[fields + 2] = 100 * k;
        let mut matrix = vec![0u64; 2 * (n + 1) * n];
        matrix[1] = 60 * k; // 0 -> 1 migrated
        let mut pages = vec![0u64; (n + 1) * n];
        pages[1] = 60 * k;
        pages[n] = 30 * k; // 1 -> 0
        let node = |i: u32| NodeInfo {
            node: i,
            cpus: format!("{i}"),
            distances: vec![10, 20],
            mem_total_bytes: Some(1 << 30),
            mem_free_bytes: Some(1 << 29),
        };
        let mut counters = vec![0; numatrace_common::Counter::ALL.len()];
        counters[numatrace_common::Counter::DemotePages as usize] = 64 * k;
        counters[numatrace_common::Counter::DemoteKswapd as usize] = 48 * k;
        let tiering = crate::kernel::tiering::Tiering {
            mode: Some(3),
            tiers: crate::kernel::tiering::two_tiers(&[0], &[1]),
            promote_rate_limit_mbps: Some(256),
            hot_threshold_ms: Some(1000),
            node_hot_threshold_ms: [(0, 125)].into(),
            node_thresholds_read: true,
            ..Default::default()
        };
        Snapshot {
            tiering,
            mono_ns: k * 1_000_000_000,
            consistent: true,
            self_tgid: 999,
            tasks: vec![
                task(10, "db", "/system.slice/db.service/worker", k),
                task(11, "web", "/user.slice", k),
                task(12, "batch", "/user.slice", 2 * k),
            ],
            counters: Counters(counters),
            migrate_latency: lat,
            migrate_matrix: matrix,
            migrated_pages: pages,
            node_faults,
            vmstat_hi: [
                ("numa_hint_faults".to_owned(), 1000 * k),
                ("numa_pages_migrated".to_owned(), 90 * k),
                ("nr_free_pages".to_owned(), 5),
            ]
            .into_iter()
            .collect(),
            nodes: vec![node(0), node(1)],
            ..Snapshot::default()
        }
    }

    /// Every hook attached (`hooks` is only what `numatrace_hook_info` lists).
    fn render(specs: &[Spec], fold: &Fold, snap: &Snapshot) -> String {
        let all: Vec<HookReport> = crate::report::measured::tests::all_but(&[]);
        render_with(specs, fold, snap, &Measured::from_hooks(&all))
    }

    fn render_with(specs: &[Spec], fold: &Fold, snap: &Snapshot, measured: &Measured) -> String {
        let hooks = vec![HookReport {
            name: "task_numa_fault".into(),
            kind: "function".into(),
            mechanism: Mechanism::Fentry,
            symbol: Some("task_numa_fault".into()),
            attached: true,
            reasons: vec![],
            what: String::new(),
        }];
        let programs = vec![("fexit_task_numa_fault".to_owned(), 1_500_000, 400)];
        let inputs = Inputs {
            snap,
            hooks: &hooks,
            measured,
            kernel_release: "6.12.0-test",
            numa_balancing: Some(1),
            gaps: (5, 2, 1),
            programs: &programs,
            bpf_stats: true,
            scrape_seconds: 0.0125,
            tasks_tracked: 3,
            own_cpu_ns: Some(2_500_000_000),
        };
        let collector = SnapshotCollector::new(specs).unwrap();
        collector.set(build(specs, fold, &inputs));
        let registry = Registry::new();
        registry.register(Box::new(collector)).unwrap();
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn golden_exposition_of_a_fixed_snapshot() {
        let snap1 = snapshot(1);
        let specs = catalogue::families(snap1.vmstat_hi.keys());
        let mut fold = Diffed::new(FoldLimits {
            top_tasks: 2,
            cgroup_depth: 2,
            max_cgroups: 10,
        });
        fold.advance(&snap1);
        let snap2 = snapshot(3);
        fold.advance(&snap2);
        let text = render(&specs, &fold, &snap2);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/cmd/serve/golden/exposition.txt");
        if std::env::var("NUMATRACE_UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let want = std::fs::read_to_string(&path)
            .expect("golden missing: run with NUMATRACE_UPDATE_GOLDEN=1");
        assert_eq!(text, want, "differs from {}", path.display());
        // What the golden text must say, independently of it.
        assert!(text.contains("numatrace_hint_faults_total{locality=\"local\"} 720\n"));
        assert!(text.contains(
            "numatrace_cgroup_hint_faults_total{cgroup=\"/system.slice/db.service\",locality=\"remote\"} 120\n"
        ));
        // batch (pid 12) and db (10) are the top 2 by scan time; web goes to other, and so
        // does what batch and db counted at the first scrape, before their series began (4, 2).
        assert!(text.contains("numatrace_task_scan_calls_total{comm=\"batch\",pid=\"12\"} 12\n"));
        assert!(
            text.contains("numatrace_task_scan_calls_total{comm=\"other\",pid=\"other\"} 12\n")
        );
        assert!(text.contains(
            "numatrace_node_migrations_total{src=\"0\",dst=\"1\",result=\"migrated\"} 180\n"
        ));
        assert!(
            text.contains("numatrace_migration_latency_seconds_bucket{le=\"0.000065536\"} 120\n")
        );
        assert!(text.contains("numatrace_migration_latency_seconds_count 180\n"));
        assert!(text.contains("numatrace_vmstat_numa_pages_migrated_total 270\n"));
        assert!(
            text.contains("numatrace_task_promoted_pages_total{comm=\"batch\",pid=\"12\"} 60\n")
        );
        // Tiering: demotions by reclaimer, each node's tier, the knobs in base units.
        assert!(text.contains("numatrace_demoted_pages_total{reclaimer=\"kswapd\"} 144\n"));
        assert!(
            text.contains("numatrace_demoted_pages_total{reclaimer=\"direct_or_proactive\"} 48\n")
        );
        assert!(text.contains("numatrace_node_tier{node=\"1\",tier=\"72\",top=\"false\"} 1\n"));
        assert!(text.contains("numatrace_promote_rate_limit_bytes_per_second 268435456\n"));
        assert!(text.contains("numatrace_hot_threshold_seconds 1\n"));
        assert!(text.contains("numatrace_node_hot_threshold_seconds{node=\"0\"} 0.125\n"));
        assert!(
            !text.contains("nr_free_pages"),
            "only numa_* and pgmigrate_*"
        );
    }

    #[test]
    fn families_whose_hook_did_not_attach_are_left_out() {
        let snap = snapshot(1);
        let specs = catalogue::families(snap.vmstat_hi.keys());
        let mut fold = Diffed::new(FoldLimits {
            top_tasks: 2,
            cgroup_depth: 2,
            max_cgroups: 10,
        });
        fold.advance(&snap);
        let missing = ["task_numa_fault", "task_numa_work", MISPLACED_HOOK];
        let m = Measured::from_hooks(&crate::report::measured::tests::all_but(&missing));
        let text = render_with(&specs, &fold, &snap, &m);
        for gone in [
            "numatrace_hint_faults_total",
            "numatrace_cgroup_hint_faults_total",
            "numatrace_task_scan_calls_total",
            "numatrace_self_run_seconds_total",
            "numatrace_node_hint_faults_total",
            "numatrace_node_migrated_pages_total",
            "numatrace_node_migrations_total",
            "numatrace_migration_latency_seconds",
            "numatrace_cow_shared_migrations_total",
        ] {
            assert!(!text.contains(&format!("\n{gone}")), "{gone} in\n{text}");
        }
        for kept in [
            "\nnumatrace_pte_updates_total ",
            "\nnumatrace_task_pte_updates_total{",
            "\nnumatrace_cow_shared_hint_faults_total{",
            "\nnumatrace_node_tasks{",
            "\nnumatrace_skipped_vmas_total{reason=",
        ] {
            assert!(text.contains(kept), "{kept} missing from\n{text}");
        }
    }

    #[test]
    fn every_catalogue_name_is_valid_and_documented() {
        let specs = catalogue::families(&[]);
        // Desc::new validates names and label names.
        SnapshotCollector::new(&specs).unwrap();
        let readme = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md"),
        )
        .unwrap();
        for s in &specs {
            // The scoped copies are documented once, as a pattern.
            let documented = ["numatrace_cgroup_", "numatrace_task_", "numatrace_self_"]
                .iter()
                .any(|p| s.name.starts_with(p))
                || readme.contains(&format!("`{}", s.name));
            assert!(documented, "{} is not in docs/metrics.md", s.name);
            assert!(
                s.kind != catalogue::Kind::Counter || s.name.ends_with("_total"),
                "{}",
                s.name
            );
        }
    }
}
