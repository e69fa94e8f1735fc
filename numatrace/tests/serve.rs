//! `numatrace serve` as Prometheus and a person use it: scraped over HTTP on loopback, checked by
//! promtool, scraped while ten thousand processes come and go, abused with malformed HTTP,
//! scraped concurrently, and (in the
//! 2-node guests) during a migrating workload, against the kernel's own counters it exports.

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    io::{Read as _, Write as _},
    net::TcpStream,
    process::{Command, Stdio},
    time::Duration,
};

use common::{Sysctl, numatrace_bin, serve::Serve, workload_bin};

impl Serve {
    fn get(&self, path: &str) -> (u16, String) {
        http_get(&self.addr, path)
    }

    fn scrape(&self) -> Scrape {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        Scrape::parse(&body)
    }
}

fn forks_since_boot() -> usize {
    std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("processes ")?.trim().parse().ok())
        .expect("/proc/stat has a processes line")
}

/// Every thread alive on the machine (kernel threads included): their tids.
fn live_tids() -> BTreeSet<u32> {
    let mut tids = BTreeSet::new();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        if p.file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
            .is_none()
        {
            continue;
        }
        // A process may exit while it is read: its threads are simply gone.
        if let Ok(tasks) = std::fs::read_dir(p.path().join("task")) {
            tids.extend(
                tasks
                    .flatten()
                    .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok()),
            );
        }
    }
    tids
}

/// A line of /proc/PID/status in KiB (`VmRSS`, `VmHWM`).
fn vm_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{key} of {pid}"))
}

/// Malformed and hostile HTTP, idle half-open connections and a bounded flood of concurrent
/// scrapes: serve keeps answering every well-formed request, and its memory stays bounded.
#[test]
fn serve_survives_malformed_requests_and_a_scrape_flood() {
    const TEST: &str = "serve_survives_malformed_requests_and_a_scrape_flood";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    let serve = Serve::start(&[]);
    assert_eq!(serve.get("/metrics").0, 200);
    let rss_start = vm_kib(serve.child.id(), "VmRSS");
    let long_header = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Long: {}\r\n\r\n",
        "a".repeat(1 << 20)
    );
    let long_path = format!(
        "GET /metrics?{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "q".repeat(1 << 16)
    );
    let bad: Vec<Vec<u8>> = vec![
        b"GARBAGE\r\n\r\n".to_vec(),
        vec![0, 1, 2, 3, 0xff, 0xfe, b'\r', b'\n', b'\r', b'\n'],
        b"GET /metrics HTTP/9.9\r\n\r\n".to_vec(),
        b"BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\nabc".to_vec(),
        b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec(),
        long_header.into_bytes(),
        long_path.into_bytes(),
    ];
    let mut answered = 0;
    for _ in 0..10 {
        for req in &bad {
            let mut s = TcpStream::connect(&serve.addr).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            // The server may close before reading everything: a write error is an answer too.
            let _ = s.write_all(req);
            let mut buf = [0u8; 512];
            if matches!(s.read(&mut buf), Ok(n) if n > 0) {
                answered += 1;
            }
        }
    }
    // Idle half-open requests must not hold up anyone else.
    let idle: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut s = TcpStream::connect(&serve.addr).expect("connect");
            let _ = s.write_all(b"GET /met");
            s
        })
        .collect();
    let addr = serve.addr.clone();
    let flood: Vec<_> = (0..8)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                (0..25)
                    .map(|_| http_get(&addr, "/metrics").0)
                    .filter(|&c| c == 200)
                    .count()
            })
        })
        .collect();
    let ok: usize = flood.into_iter().map(|t| t.join().unwrap()).sum();
    drop(idle);
    assert_eq!(ok, 200, "concurrent scrapes that succeeded");
    assert_eq!(serve.get("/metrics").0, 200, "serve stopped answering");
    let hwm = vm_kib(serve.child.id(), "VmHWM");
    println!(
        "{answered} of {} malformed requests answered (the rest closed), 200 scrapes; RSS \
         {rss_start} KiB at start, peak {hwm} KiB",
        bad.len() * 10
    );
    assert!(
        hwm < rss_start + 64 * 1024,
        "serve's peak RSS {hwm} KiB grew by more than 64 MiB from {rss_start} KiB"
    );
}

fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("response");
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("headers");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n").expect("chunk size");
        let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if n == 0 {
            return out;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
}

/// A parsed exposition: series (name with labels) to value, and family types.
#[derive(Debug, Default)]
struct Scrape {
    series: BTreeMap<String, f64>,
    types: BTreeMap<String, String>,
}

impl Scrape {
    fn parse(body: &str) -> Self {
        let mut s = Self::default();
        for l in body.lines() {
            if let Some(t) = l.strip_prefix("# TYPE ") {
                let (name, kind) = t.split_once(' ').unwrap();
                s.types.insert(name.to_owned(), kind.to_owned());
            } else if !l.starts_with('#') && !l.is_empty() {
                let (k, v) = l.rsplit_once(' ').expect("series value");
                let v: f64 = v.parse().unwrap_or_else(|_| panic!("value of {l}"));
                assert!(s.series.insert(k.to_owned(), v).is_none(), "duplicate {k}");
            }
        }
        s
    }

    fn get(&self, series: &str) -> f64 {
        *self
            .series
            .get(series)
            .unwrap_or_else(|| panic!("no series {series}"))
    }

    /// Σ of a family's series whose labels contain every `with` pair text (e.g. `locality="local"`).
    fn sum(&self, family: &str, with: &[&str]) -> f64 {
        self.series
            .iter()
            .filter(|(k, _)| {
                let (name, labels) = k.split_once('{').unwrap_or((k, ""));
                name == family && with.iter().all(|w| labels.contains(w))
            })
            .map(|(_, v)| v)
            .sum()
    }

    fn family_of(series: &str) -> &str {
        series.split('{').next().unwrap()
    }

    /// Whether a series is cumulative: a counter, or a histogram's buckets, sum and count.
    fn cumulative(&self, series: &str) -> bool {
        let name = Self::family_of(series);
        if self.types.get(name).is_some_and(|t| t == "counter") {
            return true;
        }
        ["_bucket", "_sum", "_count"].iter().any(|suf| {
            name.strip_suffix(suf)
                .is_some_and(|f| self.types.get(f).is_some_and(|t| t == "histogram"))
        })
    }

    /// Cumulative series lower than in `earlier`.
    fn decreased(&self, earlier: &Scrape) -> Vec<String> {
        earlier
            .series
            .iter()
            .filter(|(k, _)| self.cumulative(k))
            .filter_map(|(k, old)| {
                let new = self.series.get(k)?;
                (new < old).then(|| format!("{k}: {old} -> {new}"))
            })
            .collect()
    }

    /// Distinct label sets of the per-task families (comm and pid).
    fn task_series(&self) -> std::collections::BTreeSet<String> {
        self.series
            .keys()
            .filter(|k| k.starts_with("numatrace_task_scan_calls_total{"))
            .cloned()
            .collect()
    }

    fn cgroups(&self) -> std::collections::BTreeSet<String> {
        self.series
            .keys()
            .filter(|k| k.starts_with("numatrace_cgroup_scan_calls_total{"))
            .cloned()
            .collect()
    }

    fn count_of(&self, family: &str) -> usize {
        self.series
            .keys()
            .filter(|k| Self::family_of(k) == family)
            .count()
    }
}

/// Kernel settings under which every short-lived process is seen: NUMA balancing on and no
/// scan delay, so each is scanned at its first tick (or, where task_numa_work cannot be hooked,
/// sampled). Both restored on drop.
struct SeenChurn {
    _balancing: Sysctl,
    _tunables: numatrace::kernel::tunables::Tunables,
}

impl SeenChurn {
    fn new() -> Self {
        let balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
        let (tunables, notes) =
            numatrace::kernel::tunables::Tunables::set(&[("scan_delay_ms", "0")]);
        println!("tunables: {notes:?}");
        Self {
            _balancing: balancing,
            _tunables: tunables,
        }
    }
}

/// Metric names the Grafana dashboard queries (histogram series names as queried).
fn dashboard_metrics() -> std::collections::BTreeSet<String> {
    let dash: serde_json::Value = serde_json::from_str(include_str!(
        "../../deploy/grafana/numatrace-dashboard.json"
    ))
    .expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(&dash, &mut exprs);
    assert!(exprs.len() > 10, "queries found: {exprs:?}");
    let mut names = std::collections::BTreeSet::new();
    for e in &exprs {
        for (i, _) in e
            .match_indices("numatrace_")
            .chain(e.match_indices("process_"))
        {
            if i > 0 && e.as_bytes()[i - 1].is_ascii_alphanumeric()
                || i > 0 && e.as_bytes()[i - 1] == b'_'
            {
                continue;
            }
            let name: String = e[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.insert(name);
        }
    }
    names
}

/// Whether this kernel has what a family is read from, beyond the hooks: a /proc/vmstat
/// counter, the tiering knobs, memory tiers.
fn kernel_has(metric: &str) -> bool {
    let exists = |p: &str| std::path::Path::new(p).exists();
    if let Some(name) = metric
        .strip_prefix("numatrace_vmstat_")
        .and_then(|m| m.strip_suffix("_total"))
    {
        return fs::read_to_string("/proc/vmstat")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').next() == Some(name));
    }
    match metric {
        "numatrace_hot_threshold_seconds" => {
            fs::read_to_string("/sys/kernel/debug/sched/numa_balancing/hot_threshold_ms").is_ok()
        }
        // Exported once a slow-tier hint fault in tiering mode has read a node's threshold:
        // never in these tests' windows, which run in mode 1 (or 0).
        "numatrace_node_hot_threshold_seconds" => {
            fs::read_to_string("/proc/sys/kernel/numa_balancing")
                .ok()
                .and_then(|m| m.trim().parse::<u32>().ok())
                .is_some_and(|m| m & 2 != 0)
        }
        "numatrace_promote_rate_limit_bytes_per_second" => {
            exists("/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps")
        }
        "numatrace_node_tier" => {
            fs::read_dir("/sys/devices/virtual/memory_tiering").is_ok_and(|mut d| {
                d.any(|e| {
                    e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("memory_tier"))
                })
            })
        }
        _ => true,
    }
}

/// The hooks a family's counts need (all of them): without one, the family is not exported.
/// A counter's family of its own takes them from the counter table (its feed's hooks; every such
/// feed has one hook per group); the others by name.
fn hooks_of(metric: &str) -> Vec<&'static str> {
    if let Some(a) = numatrace::report::metrics::auto_families()
        .into_iter()
        .find(|a| a.name == metric)
    {
        return a
            .counter
            .feed
            .hooks()
            .iter()
            .filter_map(|g| g.first().copied())
            .collect();
    }
    // A family built from counts: the hooks of its feed (the catalogue's own answer).
    use numatrace::report::metrics::{COUNT_FAMILIES, SCOPES};
    for f in COUNT_FAMILIES {
        let named = if f.scoped {
            SCOPES
                .iter()
                .any(|(prefix, ..)| metric == format!("{prefix}{}", f.name))
        } else {
            metric == f.name
        };
        if named {
            return f
                .feed
                .hooks()
                .iter()
                .filter_map(|g| g.first().copied())
                .collect();
        }
    }
    hooks_by_name(metric).to_vec()
}

fn hooks_by_name(metric: &str) -> &'static [&'static str] {
    const MISPLACED: &str = "migrate_misplaced_folio|_page";
    let has = |p: &str| metric.contains(p);
    if !metric.starts_with("numatrace_") || has("vmstat_") || has("numatrace_bpf_") {
        &[]
    } else if has("cow_shared_migrations") {
        &["mpol_misplaced", MISPLACED]
    } else if has("promoted_pages") {
        &["task_numa_fault", MISPLACED]
    } else if has("promote_decision") || has("slow_tier_hint_latency") {
        &[
            "should_numa_migrate_memory",
            "task_numa_fault",
            "folio_xchg_last_cpupid|page_cpupid_xchg_last",
        ]
    } else if has("cow_shared") {
        &["mpol_misplaced"]
    } else if has("pid_inactive") {
        &["tp_btf:sched_skip_vma_numa"]
    } else if has("skipped_vmas") {
        &["sched:sched_skip_vma_numa"]
    } else if has("migrate_misplaced") || has("migration_latency") || has("node_migrations") {
        &[MISPLACED]
    } else if has("migration_stall") {
        &["migration_entry_wait"]
    } else if has("migrate_pages") || has("migrate_calls") || has("migrate_thps") || has("demoted_")
    {
        &["migrate:mm_migrate_pages"]
    } else if has("hint_fault") || has("migrated_pages") {
        &["task_numa_fault"]
    } else if has("pte_updates") {
        &["change_prot_numa"]
    } else if has("scan_") || has("_run_seconds") {
        &["task_numa_work"]
    } else {
        &[]
    }
}

/// Families a scrape has (from its TYPE lines), with histograms' series names.
fn exported_names(s: &Scrape) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for (name, kind) in &s.types {
        out.insert(name.clone());
        if kind == "histogram" {
            for suf in ["_bucket", "_sum", "_count"] {
                out.insert(format!("{name}{suf}"));
            }
        }
    }
    out
}

/// The bound docs/serve.md documents: 16·(N + C + 4) + 7n + 3n² + 2P + H + V + A + 86.
fn documented_bound(s: &Scrape, top: usize, cgroups: usize) -> usize {
    let n = common::numa_nodes();
    let p = s.count_of("numatrace_bpf_runs_total");
    let h = s.count_of("numatrace_hook_info");
    let v = s
        .series
        .keys()
        .filter(|k| k.starts_with("numatrace_vmstat_"))
        .count();
    let a = numatrace::report::metrics::auto_families().len();
    16 * (top + cgroups + 4) + 7 * n + 3 * n * n + 2 * p + h + v + a + 86
}

#[test]
fn metric_catalogue_needs_no_root() {
    let out = common::numatrace(&["serve", "--metrics"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for family in [
        "numatrace_scan_seconds_total",
        "numatrace_hint_faults_total{locality}",
        "numatrace_node_migrations_total{src,dst,result}",
        "numatrace_migration_latency_seconds (histogram)",
        "numatrace_hook_info{hook,mechanism,attached,kernel}",
        "numatrace_vmstat_<name>_total",
    ] {
        assert!(text.contains(family), "{family} missing from:\n{text}");
    }
}

#[test]
fn live_scrape_passes_promtool_and_pages_answer() {
    const TEST: &str = "live_scrape_passes_promtool_and_pages_answer";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    let serve = Serve::start(&[]);
    // Some tasks to count, so that per-cgroup and per-task series exist.
    {
        let _seen = SeenChurn::new();
        let churn = Command::new(workload_bin())
            .args([
                "churn",
                "--tasks",
                "50",
                "--parallel",
                "4",
                "--spin-ms",
                "50",
            ])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(churn.success());
    }
    let (status, body) = serve.get("/metrics");
    assert_eq!(status, 200);
    let s = Scrape::parse(&body);
    // Families with live values where their hooks attached, and absent (not 0) where not.
    let probes = common::probes();
    let measured = |m: &str| hooks_of(m).iter().all(|h| common::attached(&probes, h));
    for f in [
        "numatrace_scan_calls_total",
        "numatrace_hint_faults_total",
        "numatrace_skipped_vmas_total",
        "numatrace_migration_latency_seconds_bucket",
        "numatrace_dropped_events_total",
        "numatrace_hook_info",
        "numatrace_build_info",
        "numatrace_scrape_duration_seconds",
        "numatrace_vmstat_numa_hint_faults_total",
        "process_cpu_seconds_total",
    ] {
        if measured(f) {
            assert!(s.count_of(f) > 0, "{f} missing");
        } else {
            assert_eq!(
                s.count_of(f),
                0,
                "{f} exported, yet {:?} did not attach",
                hooks_of(f)
            );
        }
    }
    // A hook the host always attaches, and its mechanism.
    assert!(
        s.series.keys().any(|k| k.starts_with(
            "numatrace_hook_info{hook=\"sched:sched_move_numa\",mechanism=\"tracepoint\""
        )),
        "hook_info of sched_move_numa"
    );
    // Every metric the Grafana dashboard queries is exported (node pairs need 2+ nodes).
    let exported = exported_names(&s);
    for m in dashboard_metrics() {
        let pairs = [
            "numatrace_node_migrated_pages_total",
            "numatrace_node_migrations_total",
        ];
        if common::numa_nodes() < 2 && pairs.contains(&m.as_str()) {
            println!("{m}: no node pairs on one node (checked in the 2-node guests)");
            continue;
        }
        if !measured(&m) {
            println!("{m}: not measured here ({:?} did not attach)", hooks_of(&m));
            assert!(!exported.contains(&m), "{m} exported without its hook");
            continue;
        }
        if !kernel_has(&m) {
            // E.g. debugfs locked down (the hot threshold), or no tiering counters.
            println!("{m}: this kernel lacks what it is read from");
            assert!(!exported.contains(&m), "{m} exported without its source");
            continue;
        }
        assert!(
            exported.contains(&m),
            "the dashboard queries {m}, which is not exported"
        );
    }
    let (status, index) = serve.get("/");
    assert_eq!(status, 200);
    assert!(index.contains("href=\"/metrics\"") && index.contains("sched_move_numa"));
    assert_eq!(serve.get("/nope").0, 404);

    match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Err(e) => common::skip(
            TEST,
            format!(
                "(its promtool step only) promtool not runnable ({e}); `cargo xtask test` installs Debian's prometheus"
            ),
        ),
        Ok(mut p) => {
            p.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
            let out = p.wait_with_output().unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            println!("promtool check metrics: {:?} {said}", out.status);
            assert!(out.status.success(), "promtool: {said}");
            assert!(said.trim().is_empty(), "promtool has remarks: {said}");
        }
    }
    assert!(serve.stop().success(), "serve exits 0 on SIGTERM");
    assert!(
        common::programs_released(),
        "programs left attached after serve stopped: {:?}",
        common::numatrace_programs_loaded()
    );
}

#[test]
fn a_fork_storm_of_ten_thousand_processes_stays_within_bounds() {
    const TEST: &str = "a_fork_storm_of_ten_thousand_processes_stays_within_bounds";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    let (top, cgroups) = (5, 10);
    let _seen = SeenChurn::new();
    let serve = Serve::start(&[
        "--top-tasks",
        &top.to_string(),
        "--max-cgroups",
        &cgroups.to_string(),
    ]);
    let first = serve.scrape();
    let rss_start = vm_kib(serve.child.id(), "VmRSS");
    let mut churn = Command::new(workload_bin())
        .args([
            "churn",
            "--tasks",
            "10000",
            "--parallel",
            "16",
            "--spin-ms",
            "5",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut scrapes = vec![first];
    let mut requests = 0;
    loop {
        let done = churn.try_wait().unwrap().is_some();
        // A bounded loop of requests while the tracer is busy: every one answers.
        for _ in 0..5 {
            let (status, _) = serve.get("/");
            assert_eq!(status, 200);
            requests += 1;
        }
        scrapes.push(serve.scrape());
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(churn.wait().unwrap().success());
    // Two more: exited tasks are folded in, then forgotten. The threads alive before the
    // second-last and after the last, and the forks in between, bound what may still be held.
    let (mut live, mut forks) = (BTreeSet::new(), 0);
    for i in 0..2 {
        std::thread::sleep(Duration::from_millis(300));
        if i == 0 {
            (live, forks) = (live_tids(), forks_since_boot());
        }
        scrapes.push(serve.scrape());
    }
    live.extend(live_tids());
    let forks = forks_since_boot() - forks;
    println!("{} scrapes, {requests} other requests", scrapes.len());
    for w in scrapes.windows(2) {
        let down = w[1].decreased(&w[0]);
        assert!(down.is_empty(), "counters decreased: {down:#?}");
    }
    let last = scrapes.last().unwrap();
    let exits = last.get("numatrace_ringbuf_records_total{kind=\"task_exit\"}")
        - scrapes[0].get("numatrace_ringbuf_records_total{kind=\"task_exit\"}");
    let tracked: Vec<f64> = scrapes
        .iter()
        .map(|s| s.get("numatrace_tasks_tracked"))
        .collect();
    let hwm = vm_kib(serve.child.id(), "VmHWM");
    println!(
        "task exits seen {exits}, tasks tracked per scrape {tracked:?}, RSS {rss_start} KiB at \
         start, peak {hwm} KiB"
    );
    assert!(
        exits >= 1000.0,
        "the churn's exits reached numatrace: {exits}"
    );
    // The daemon's memory follows the live tasks, not the 10 000 that came and went.
    assert!(
        hwm < rss_start + 48 * 1024,
        "serve's peak RSS {hwm} KiB grew by more than 48 MiB from {rss_start} KiB"
    );
    // Exited tasks are forgotten once folded: memory follows the live tasks, not the churn.
    // A task numatrace may still hold at the last scrape is alive then, or exited after the
    // snapshot before (earlier exits were settled and forgotten): either way it was alive
    // before the second-last scrape or forked since. Every thread of the machine counts,
    // sampled or not (kernel threads too: a big machine has hundreds). One task may hold two
    // keys: its exit record's and an entry made later in do_exit (marked exited at once); the
    // exit records drained at the last scrape count those.
    let exit_count = |s: &Scrape| s.get("numatrace_ringbuf_records_total{kind=\"task_exit\"}");
    let n = scrapes.len();
    let recent_exits = exit_count(&scrapes[n - 1]) - exit_count(&scrapes[n - 2]);
    let bound = (live.len() + forks) as f64 + recent_exits;
    println!(
        "around the last two scrapes: {} threads alive, {forks} forks, {recent_exits} exit \
         records drained at the last: numatrace may hold {bound} tasks",
        live.len()
    );
    assert!(
        *tracked.last().unwrap() <= bound,
        "tasks tracked grew with the churn: {tracked:?}, over the {bound} alive or just exited"
    );
    if bound >= exits {
        common::skip(
            TEST,
            format!(
                "(its forgetting step only) this machine runs {} threads: holding the churn's \
                 {exits} exited tasks would not exceed the bound",
                live.len()
            ),
        );
    }
    for s in &scrapes {
        assert!(
            s.task_series().len() <= top + 1,
            "task series: {:?}",
            s.task_series()
        );
        assert!(
            s.cgroups().len() <= cgroups + 1,
            "cgroup series: {:?}",
            s.cgroups()
        );
        let bound = documented_bound(s, top, cgroups);
        assert!(
            s.series.len() <= bound,
            "{} series over the documented bound {bound}",
            s.series.len()
        );
        // Within one scrape the cgroups add up to the totals (both absent where the hook did
        // not attach).
        for loc in ["local", "remote"] {
            let with = format!("locality=\"{loc}\"");
            assert_eq!(
                s.sum("numatrace_cgroup_hint_faults_total", &[&with]),
                s.sum("numatrace_hint_faults_total", &[&with])
            );
        }
        assert_eq!(
            s.sum("numatrace_cgroup_scan_calls_total", &[]),
            s.sum("numatrace_scan_calls_total", &[])
        );
    }
    drop(serve);
}

#[test]
fn concurrent_scrapes_agree() {
    const TEST: &str = "concurrent_scrapes_agree";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    let serve = Serve::start(&[]);
    let addr = serve.addr.clone();
    let mut shared = 0;
    for _ in 0..10 {
        let (a, b) = std::thread::scope(|sc| {
            let a = sc.spawn(|| http_get(&addr, "/metrics"));
            let b = sc.spawn(|| http_get(&addr, "/metrics"));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!((a.0, b.0), (200, 200));
        if a.1 == b.1 {
            shared += 1;
            continue;
        }
        // Not one read: one came after the other, and nothing went backwards between them.
        let (sa, sb) = (Scrape::parse(&a.1), Scrape::parse(&b.1));
        let (early, late) = if sb.decreased(&sa).is_empty() {
            (sa, sb)
        } else {
            (sb, sa)
        };
        let down = late.decreased(&early);
        assert!(down.is_empty(), "concurrent scrapes disagree: {down:#?}");
    }
    println!("{shared} of 10 concurrent pairs shared one read");
    assert!(shared > 0, "no two concurrent scrapes shared a read");
}

#[test]
fn scrape_shows_migrations_between_nodes_in_a_two_node_guest() {
    const TEST: &str = "scrape_shows_migrations_between_nodes_in_a_two_node_guest";
    require_root!(TEST);
    let Some(probes) = common::migrating_guest(TEST) else {
        return;
    };
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let serve = Serve::start(&[]);
    let before = serve.scrape();
    let w = Command::new(workload_bin())
        .args(["migrate", "--mem-mib", "32", "--duration", "8s"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(w.success());
    // numatrace's counts and the kernel's, over the same scrapes: equal once nothing is
    // counted between reading the maps and reading /proc/vmstat (the system is idle now).
    let ours = |s: &Scrape| {
        s.get("numatrace_migrated_pages_total") + s.get("numatrace_self_migrated_pages_total")
    };
    let faults = |s: &Scrape| {
        s.sum("numatrace_hint_faults_total", &[]) + s.sum("numatrace_self_hint_faults_total", &[])
    };
    let mut tries = Vec::new();
    let after = loop {
        let s = serve.scrape();
        let d = (
            ours(&s) - ours(&before),
            s.get("numatrace_vmstat_numa_pages_migrated_total")
                - before.get("numatrace_vmstat_numa_pages_migrated_total"),
            faults(&s) - faults(&before),
            s.get("numatrace_vmstat_numa_hint_faults_total")
                - before.get("numatrace_vmstat_numa_hint_faults_total"),
        );
        tries.push(d);
        if (d.0 == d.1 && d.2 == d.3) || tries.len() == 5 {
            break s;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    println!("(pages ours, kernel, faults ours, kernel) per scrape: {tries:?}");
    let (pages, kpages, f, kf) = *tries.last().unwrap();
    assert!(pages > 0.0, "no migrated pages");
    assert_eq!(pages, kpages, "migrated pages against numa_pages_migrated");
    assert_eq!(f, kf, "hint faults against numa_hint_faults");
    // Between the two nodes, and the matrix adds up to the (traced) total.
    let between = after.sum(
        "numatrace_node_migrated_pages_total",
        &["src=\"0\"", "dst=\"1\""],
    ) + after.sum(
        "numatrace_node_migrated_pages_total",
        &["src=\"1\"", "dst=\"0\""],
    );
    assert!(between > 0.0, "no migrations between nodes 0 and 1");
    assert_eq!(
        after.sum("numatrace_node_migrated_pages_total", &[]),
        after.get("numatrace_migrated_pages_total"),
        "node matrix against the total"
    );
    let exported = exported_names(&after);
    for m in dashboard_metrics() {
        // A family whose hook did not attach is left out (this line's kernel lacks it).
        let measured = hooks_of(&m).iter().all(|h| common::attached(&probes, h));
        assert_eq!(
            exported.contains(&m),
            measured && kernel_has(&m),
            "the dashboard queries {m}: exported, or its hooks {:?} did not attach, or the \
             kernel lacks what it is read from",
            hooks_of(&m)
        );
    }
    if common::attached(&probes, "migrate_misplaced_folio|_page") {
        let lat = after.get("numatrace_migration_latency_seconds_count");
        assert!(lat > 0.0, "migration latencies");
    }
    assert!(serve.stop().success());
}

#[test]
fn serves_a_socket_systemd_hands_it() {
    const TEST: &str = "serves_a_socket_systemd_hands_it";
    require_root!(TEST);
    if Command::new("systemd-socket-activate")
        .arg("--help")
        .output()
        .is_err()
    {
        common::skip(
            TEST,
            "systemd-socket-activate (Debian's systemd) is not installed",
        );
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    // systemd-socket-activate listens, and on the first connection starts numatrace with the
    // listening socket as fd 3 (LISTEN_FDS=1, LISTEN_PID its pid), as a .socket unit does.
    let mut activator = Command::new("systemd-socket-activate")
        .args(["-l", &addr, &numatrace_bin(), "serve"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        common::wait_until(Duration::from_secs(10), || TcpStream::connect(&addr)
            .is_ok()),
        "systemd-socket-activate did not listen"
    );
    let (status, body) = http_get(&addr, "/metrics");
    let scrape = Scrape::parse(&body);
    // SAFETY: kill has no memory effects; numatrace is the activator's child or itself.
    unsafe { libc::kill(activator.id() as i32, libc::SIGTERM) };
    let _ = Command::new("pkill")
        .args(["-TERM", "-f", &format!("{} serve$", numatrace_bin())])
        .status();
    let _ = activator.wait();
    assert_eq!(status, 200, "{body}");
    assert!(scrape.count_of("numatrace_build_info") == 1);
    assert!(common::programs_released(), "programs left attached");
}

/// Sends GET `path` on an open keep-alive connection and reads one response (by its
/// Content-Length): the status.
fn get_on(s: &mut TcpStream, path: &str) -> std::io::Result<u16> {
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok())
        .expect("content-length");
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    Ok(head.split_whitespace().nth(1).unwrap().parse().unwrap())
}

/// How long until the peer closes `s` (EOF or reset), or None if it is still open after `max`.
fn closed_within(s: &mut TcpStream, max: Duration) -> Option<Duration> {
    let start = std::time::Instant::now();
    s.set_read_timeout(Some(max)).unwrap();
    let mut buf = [0u8; 1024];
    match s.read(&mut buf) {
        Ok(0) => Some(start.elapsed()),
        // serve never answers a half-sent header; anything else read would be a bug.
        Ok(n) => panic!("{n} bytes answered a half-sent header"),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            None
        }
        Err(_) => Some(start.elapsed()),
    }
}

/// Slowloris: 80 connections that each send half a request header against `--header-timeout
/// 2s --max-connections 64`: the ones over the cap are closed at once, all of them within the
/// header timeout, and scrapes during and after the flood are answered; then one that trickles
/// a byte every 250 ms is closed 2 s after its first. A keep-alive connection outlives the header timeout
/// between requests and is closed after --idle-timeout.
#[test]
fn half_sent_headers_are_timed_out_and_capped() {
    const TEST: &str = "half_sent_headers_are_timed_out_and_capped";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    let serve = Serve::start(&[
        "--header-timeout",
        "2s",
        "--idle-timeout",
        "4s",
        "--max-connections",
        "64",
    ]);
    let start = std::time::Instant::now();
    let mut flood: Vec<TcpStream> = (0..80)
        .map(|_| {
            let mut s = TcpStream::connect(&serve.addr).expect("connect");
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Half: ")
                .unwrap();
            s
        })
        .collect();
    let flooded = start.elapsed();
    assert_eq!(serve.get("/metrics").0, 200, "a scrape during the flood");
    let mut early = 0;
    for (i, s) in flood.iter_mut().enumerate() {
        let left = Duration::from_secs(6)
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(100));
        let after = closed_within(s, left)
            .map(|_| start.elapsed())
            .unwrap_or_else(|| panic!("half-open connection {i} still open after 6 s"));
        assert!(
            after < flooded + Duration::from_millis(3500),
            "connection {i} closed only {after:?} after the flood began (header timeout 2 s)"
        );
        if after < Duration::from_millis(1500) {
            early += 1;
        }
    }
    // 80 + the scrape against 64 places: at least 17 were closed at once.
    assert!(
        early >= 17,
        "only {early} connections closed before the timeout"
    );
    // A header trickled a byte at a time does not renew the timeout.
    let addr = serve.addr.clone();
    let trickle = std::thread::spawn(move || {
        let mut s = TcpStream::connect(&addr).expect("connect");
        let t = std::time::Instant::now();
        for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "
            .iter()
            .cycle()
            .take(200)
        {
            if s.write_all(&[*b]).is_err() {
                return Some(t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        None
    });
    let trickled = trickle
        .join()
        .unwrap()
        .expect("the trickling connection stayed open");
    assert!(
        trickled > Duration::from_millis(1500) && trickled < Duration::from_secs(4),
        "a header trickled a byte at a time held its connection for {trickled:?}"
    );
    assert_eq!(serve.get("/metrics").0, 200, "a scrape after the flood");

    // Keep-alive: idle 3 s (past the header timeout) and still served; closed after 4 s idle.
    let mut ka = TcpStream::connect(&serve.addr).expect("connect");
    ka.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(get_on(&mut ka, "/").unwrap(), 200);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        get_on(&mut ka, "/").unwrap(),
        200,
        "keep-alive cut while idle"
    );
    let idle = closed_within(&mut ka, Duration::from_secs(8)).expect("idle keep-alive left open");
    assert!(
        idle > Duration::from_secs(3) && idle < Duration::from_secs(6),
        "idle keep-alive closed after {idle:?} (--idle-timeout 4s)"
    );
    println!(
        "{early} of 80 closed over the cap, the rest by the 2 s header timeout; trickle cut \
         after {trickled:?}; keep-alive closed after {idle:?} idle"
    );
    // A half-sent header does not hold up SIGTERM (answers in progress get up to 5 s).
    let mut half = TcpStream::connect(&serve.addr).expect("connect");
    half.write_all(b"GET /met").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let stopping = std::time::Instant::now();
    assert!(serve.stop().success());
    assert!(
        stopping.elapsed() < Duration::from_secs(4),
        "stopping took {:?} with a half-sent header open",
        stopping.elapsed()
    );
}

/// A throwaway CA-less certificate for `localhost` and its key, written into `dir`.
fn write_cert(dir: &std::path::Path) -> Vec<u8> {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.join("tls.crt"), c.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), c.signing_key.serialize_pem()).unwrap();
    c.cert.der().to_vec()
}

/// GET `path` over TLS (trusting `ca`, for the name localhost) with optional basic auth
/// credentials: the status and the response head and body.
fn https_get(addr: &str, ca: &[u8], creds: Option<&str>) -> (u16, String) {
    use base64::Engine as _;
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(ca.to_vec()))
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let auth = creds
        .map(|c| {
            format!(
                "Authorization: Basic {}\r\n",
                base64::engine::general_purpose::STANDARD.encode(c)
            )
        })
        .unwrap_or_default();
    write!(
        tls,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
    )
    .expect("TLS handshake and request");
    let mut raw = Vec::new();
    // A peer that closes without close_notify ends in an error after the whole response.
    let _ = tls.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP response over TLS: {text:?}"));
    (status, text)
}

/// `--web.config.file` with TLS and one basic-auth user: the right password is served over
/// TLS, no or a wrong password (or user) gets 401 with `WWW-Authenticate: Basic`, and plain
/// HTTP on the port gets no HTTP answer.
#[test]
fn tls_and_basic_auth_from_a_web_config() {
    const TEST: &str = "tls_and_basic_auth_from_a_web_config";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("numatrace-web-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = write_cert(&dir);
    let hash = bcrypt::hash("correct horse", 6).unwrap();
    let config = dir.join("web-config.yml");
    std::fs::write(
        &config,
        format!(
            "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n\
             basic_auth_users:\n  prometheus: {hash}\n"
        ),
    )
    .unwrap();
    let serve = Serve::start(&["--web.config.file", config.to_str().unwrap()]);
    let (status, text) = https_get(&serve.addr, &ca, Some("prometheus:correct horse"));
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("numatrace_build_info"), "{text}");
    // Again: from the verification cache.
    assert_eq!(
        https_get(&serve.addr, &ca, Some("prometheus:correct horse")).0,
        200
    );
    for creds in [
        None,
        Some("prometheus:wrong"),
        Some("someone:correct horse"),
        Some("prometheus:"),
    ] {
        let (status, text) = https_get(&serve.addr, &ca, creds);
        assert_eq!(status, 401, "{creds:?}: {text}");
        assert!(
            text.to_ascii_lowercase()
                .contains("\r\nwww-authenticate: basic"),
            "{text}"
        );
        assert!(!text.contains("numatrace_build_info"));
    }
    // Plain HTTP to the TLS port: no HTTP response (a TLS alert, or the connection closed).
    let mut plain = TcpStream::connect(&serve.addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let _ = write!(
        plain,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut raw = Vec::new();
    let _ = plain.read_to_end(&mut raw);
    assert!(
        !raw.starts_with(b"HTTP/"),
        "plain HTTP answered on the TLS port: {}",
        String::from_utf8_lossy(&raw)
    );
    assert!(serve.stop().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A web config with a key exporter-toolkit's format does not have is refused before anything
/// is attached, with one line naming the file, the key's line and its section (not its text).
/// Needs no root.
#[test]
fn a_web_config_with_an_unknown_key_is_refused_at_start() {
    let dir = std::env::temp_dir().join(format!("numatrace-badweb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("web-config.yml");
    std::fs::write(
        &config,
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  cert_fiel: x.crt\n",
    )
    .unwrap();
    let out = common::numatrace(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--web.config.file",
        config.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("line 4: unknown key in tls_server_config") && err.contains("web-config.yml"),
        "{err}"
    );
}

/// `serve --help` documents the hardening flags and the web config format.
#[test]
fn serve_help_documents_limits_and_the_web_config() {
    let help = String::from_utf8(common::numatrace(&["serve", "--help"]).stdout).unwrap();
    for needle in [
        "--web.config.file <PATH>",
        "--header-timeout",
        "[default: 10s]",
        "--idle-timeout",
        "[default: 60s]",
        "--max-connections",
        "[default: 64]",
        "--max-header-bytes",
        "tls_server_config",
        "basic_auth_users",
        "cert_file",
        "bcrypt",
    ] {
        assert!(
            help.contains(needle),
            "serve --help lacks {needle}:\n{help}"
        );
    }
}
