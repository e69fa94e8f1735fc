//! Memory tiering in the QEMU guests, whose third node has no CPU and is slower by the ACPI HMAT
//! (`xtask/src/vm/guest.rs`): on kernels that give it a tier of its own (6.12 and 7.x here: the
//! kernel places boot-time memory by HMAT from about 6.10), promotions numatrace counts equal the kernel's `pgpromote_success` in modes 2 and 3,
//! demotions the `pgdemote_*` counters, and a cgroup's counts its `memory.stat`. On the other
//! lines the tests say what the kernel lacks and check that nothing is counted either.

mod common;

use std::{
    collections::BTreeMap,
    fs,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{Sysctl, workload_bin};
use numatrace::{
    kernel::{tiering::Tiering, tunables::Tunables, version::KernelVersion},
    sources::cgroups::cgroup2_mount,
};
use serde_json::Value;

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn kernel_version() -> KernelVersion {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    KernelVersion::parse(release.trim()).unwrap()
}

/// A guest with the slow CPU-less node 2, or why not.
fn tiered_guest(test: &str) -> Option<Tiering> {
    require_root_opt(test)?;
    let has_cpu = fs::read_to_string("/sys/devices/system/node/node2/cpulist").ok()?;
    if !has_cpu.trim().is_empty() {
        common::skip(test, "node 2 has CPUs: not the tiered guest");
        return None;
    }
    Some(Tiering::read(kernel_version()))
}

fn require_root_opt(test: &str) -> Option<()> {
    if !common::is_root() {
        common::skip(test, "needs root; CI runs it as root");
        return None;
    }
    if !Path::new("/sys/devices/system/node/node2").exists() {
        common::skip(
            test,
            "needs a CPU-less third NUMA node (the QEMU guests of `cargo xtask vm-test`)",
        );
        return None;
    }
    Some(())
}

/// `/proc/vmstat`'s tiering counters.
fn vmstat() -> BTreeMap<String, u64> {
    fs::read_to_string("/proc/vmstat")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_owned(), v.trim().parse().ok()?))
        })
        .filter(|(k, _)| k.starts_with("pgpromote_") || k.starts_with("pgdemote_"))
        .collect()
}

/// A cgroup with the memory controller, for `memory.stat` and `memory.reclaim`; removed (and
/// the root's controllers put back) on drop.
struct MemCgroup {
    dir: PathBuf,
    rel: String,
    root_control: Option<(PathBuf, bool)>,
}

impl MemCgroup {
    fn new(tag: &str) -> Option<Self> {
        let mount = cgroup2_mount(&fs::read_to_string("/proc/self/mountinfo").ok()?)?;
        let control = mount.join("cgroup.subtree_control");
        let had = fs::read_to_string(&control)
            .ok()?
            .split_whitespace()
            .any(|c| c == "memory");
        if !had {
            fs::write(&control, "+memory").ok()?;
        }
        let name = format!("numatrace-{tag}-{}", std::process::id());
        let dir = mount.join(&name);
        fs::create_dir_all(&dir).ok()?;
        Some(Self {
            dir,
            rel: format!("/{name}"),
            root_control: Some((control, had)),
        })
    }

    fn stat(&self) -> BTreeMap<String, u64> {
        fs::read_to_string(self.dir.join("memory.stat"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_owned(), v.trim().parse().ok()?))
            })
            .collect()
    }

    /// `memory.stat` once `caught_up` holds of it, or after 6 s. The file is the rstat-flushed
    /// view: a read flushes only past a threshold of pending updates (64 per CPU), the
    /// kernel's periodic flusher every 2 s, so a window's last events can show up to a flush
    /// period late. The workload has exited by then: callers wait for no more than numatrace
    /// counted, and still assert equality.
    fn stat_caught_up(
        &self,
        caught_up: impl Fn(&BTreeMap<String, u64>) -> bool,
    ) -> BTreeMap<String, u64> {
        // wait_until reads it at least once.
        let mut stat = BTreeMap::new();
        common::wait_until(Duration::from_secs(6), || {
            stat = self.stat();
            caught_up(&stat)
        });
        stat
    }

    /// `sh -c` running `args` of the workload inside this cgroup.
    fn run(&self, args: &str) -> Command {
        let mut c = Command::new("sh");
        c.args([
            "-c",
            &format!(
                "echo $$ > {} && exec {} {args}",
                self.dir.join("cgroup.procs").display(),
                workload_bin()
            ),
        ]);
        c
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
        if let Some((control, false)) = &self.root_control {
            let _ = fs::write(control, "-memory");
        }
    }
}

fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>, k: &str) -> Option<u64> {
    Some(after.get(k)?.saturating_sub(*before.get(k)?))
}

/// Prints what the kernel made of the guest's slow node.
fn describe(t: &Tiering) -> bool {
    println!(
        "tiers: {:?} (source {}), slow nodes {:?}, mode {:?}",
        t.tiers,
        t.source,
        t.slow_nodes(),
        t.mode
    );
    t.slow_nodes().contains(&2)
}

#[test]
fn promotions_equal_the_kernels_pgpromote_success_in_modes_2_and_3() {
    const TEST: &str = "promotions_equal_the_kernels_pgpromote_success_in_modes_2_and_3";
    let Some(tiers) = tiered_guest(TEST) else {
        return;
    };
    let slow = describe(&tiers);
    if !vmstat().contains_key("pgpromote_success") {
        common::skip(
            TEST,
            "no pgpromote_success in /proc/vmstat: memory tiering mode needs 5.18+ (counted \
             from 6.1 here)",
        );
        return;
    }
    let Some(cg) = MemCgroup::new("tier") else {
        common::skip(TEST, "no cgroup v2 with the memory controller here");
        return;
    };
    // Scan soon and often so that the 6-second reader's pages are found hot.
    let (_tunables, notes) =
        Tunables::set(&[("scan_delay_ms", "100"), ("scan_period_min_ms", "100")]);
    println!("tunables: {notes:?}");
    // Where node 2 is no lower tier nothing can be promoted: one mode shows that (0 = 0).
    let modes: &[&str] = if slow { &["2", "3"] } else { &["2"] };
    // A fresh cgroup: nothing of it waits to be flushed; later, the previous mode's settled view.
    let mut memcg_before = cg.stat();
    for mode in modes {
        let _mode = Sysctl::set("kernel.numa_balancing", mode).unwrap();
        let v = common::stat_window(&[], &["--cgroup", &cg.rel], || {
            let out = cg
                .run("migrate --mem-mib 64 --from-node 2 --to-node 0 --duration 6s")
                .output()
                .unwrap();
            println!("{}", String::from_utf8_lossy(&out.stdout).trim());
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        });
        let t = &v["tiering"];
        let cgroups = v["cgroups"].as_array().unwrap();
        assert_eq!(cgroups.len(), 1, "{cgroups:?}");
        let wants = [
            (
                "pgpromote_success",
                &cgroups[0]["tiering"]["promoted_pages"],
            ),
            (
                "numa_pages_migrated",
                &cgroups[0]["hint_faults"]["migrated_pages"],
            ),
        ];
        let memcg = cg.stat_caught_up(|s| {
            wants
                .iter()
                .all(|(k, ours)| delta(s, &memcg_before, k).is_none_or(|d| d >= n(ours)))
        });
        println!("mode {mode}: tiering {t:#}");
        let kernel = n(&t["kernel"]["pgpromote_success"]);
        let kernel_lo = n(&v["vmstat_delta_min"]["pgpromote_success"]);
        let ours = n(&t["promoted_pages"]);
        // Only the workload reads slow-tier pages in the guest: the system-wide count is its.
        assert_eq!(
            ours, kernel,
            "mode {mode}: numatrace promoted {ours} pages, pgpromote_success +{kernel} \
             (at least +{kernel_lo})"
        );
        assert_eq!(ours, n(&v["totals"]["tiering"]["promoted_pages"]));
        // A hint fault's migration fails either before it starts (refused: 6.11+) or in it.
        let tot = &v["totals"];
        if let Some(refused) = tot["migrations"]["refused"].as_u64() {
            assert_eq!(
                n(&tot["hint_faults"]["migrate_failed"]),
                refused + n(&tot["migrations"]["not_migrated"]),
                "mode {mode}: faults whose migration failed against refusals + failures"
            );
            println!("mode {mode}: {refused} migrations refused before they started");
        }
        assert_eq!(n(&v["kernel_seen"]["tiering"]["promoted_pages"]), ours);
        assert_eq!(t["mode_end"], mode.parse::<u64>().unwrap());
        if slow {
            assert!(
                ours > 0,
                "mode {mode}: node 2 is a slow tier and nothing was promoted"
            );
            assert!(n(&t["slow_tier_faults"]) > 0, "{t}");
            decisions_equal_the_kernels_candidates(&v, mode);
        } else {
            println!(
                "note: this kernel keeps node 2 in the top tier (it places memory present at \
                 boot by HMAT from ~6.10; here dax/kmem would be needed): nothing to promote, \
                 and numatrace counts nothing"
            );
        }
        match delta(&memcg, &memcg_before, "pgpromote_success") {
            Some(d) => assert_eq!(
                n(&cgroups[0]["tiering"]["promoted_pages"]),
                d,
                "mode {mode}: the cgroup's promotions against its memory.stat"
            ),
            None => println!("note: memory.stat has no pgpromote_success before 6.12"),
        }
        if let Some(d) = delta(&memcg, &memcg_before, "numa_pages_migrated") {
            assert_eq!(
                n(&cgroups[0]["hint_faults"]["migrated_pages"]),
                d,
                "mode {mode}: the cgroup's NUMA migrations against its memory.stat"
            );
        }
        memcg_before = memcg;
    }
}

#[test]
fn demotions_equal_the_kernels_pgdemote_counters() {
    const TEST: &str = "demotions_equal_the_kernels_pgdemote_counters";
    let Some(tiers) = tiered_guest(TEST) else {
        return;
    };
    let slow = describe(&tiers);
    if !vmstat().keys().any(|k| k.starts_with("pgdemote_")) {
        common::skip(TEST, "no pgdemote_* in /proc/vmstat: demotion needs 5.15+");
        return;
    }
    let Some(cg) = MemCgroup::new("demote") else {
        common::skip(TEST, "no cgroup v2 with the memory controller here");
        return;
    };
    if !cg.dir.join("memory.reclaim").exists() {
        common::skip(TEST, "no memory.reclaim (5.19+) to drive reclaim with");
        return;
    }
    let enabled = Path::new("/sys/kernel/mm/numa/demotion_enabled");
    let old = fs::read_to_string(enabled).unwrap();
    fs::write(enabled, "true").unwrap();
    struct Restore<'a>(&'a Path, String);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let _ = fs::write(self.0, self.1.trim());
        }
    }
    let _restore = Restore(enabled, old);
    let memcg_before = cg.stat();
    let mut reclaimed = String::new();
    let v = common::stat_window(&[], &[], || {
        let mut w = cg
            .run("migrate --mem-mib 64 --from-node 0 --to-node 0 --duration 0s --hold 6s")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // Once the workload has checked that its 64 MiB are on node 0 (a reclaim before that
        // would demote pages under its check): proactive reclaim of half of it, which (no
        // swap here) can only demote.
        // Its lines are echoed and handed over by a thread of their own, so that a workload
        // that stalls fails the test in time instead of hanging the kernel line's run.
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = w.stdout.take().unwrap();
        let echo = std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("{l}");
                let _ = tx.send(l);
            }
        });
        let deadline = Instant::now() + WORKLOAD_STEP;
        let placed = std::iter::from_fn(|| {
            lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .ok()
        })
        .any(|l| l.contains("after first touch"));
        if !placed {
            common::wait_or_kill(&mut w, Duration::ZERO);
        }
        assert!(
            placed,
            "the workload did not place its 64 MiB on node 0 within {WORKLOAD_STEP:?}"
        );
        let current = cg.dir.join("memory.current");
        let filled = fs::read_to_string(&current)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .is_some_and(|b| b >= 60 << 20);
        assert!(filled, "the workload's cgroup holds less than its 64 MiB");
        reclaimed = match fs::write(cg.dir.join("memory.reclaim"), "32M") {
            Ok(()) => "all 32M".into(),
            Err(e) => format!("not all 32M ({e})"),
        };
        let status = common::wait_or_kill(&mut w, WORKLOAD_STEP);
        let _ = echo.join();
        assert!(
            status.is_some_and(|s| s.success()),
            "the workload failed or did not exit within {WORKLOAD_STEP:?}: {status:?}"
        );
    });
    let t = &v["tiering"];
    let d = &t["demotions"];
    let memcg =
        cg.stat_caught_up(|s| memcg_demoted(s, &memcg_before).is_none_or(|m| m >= n(&d["pages"])));
    println!("memory.reclaim: {reclaimed}; tiering {t:#}");
    let kernel: u64 = PGDEMOTE.iter().map(|k| n(&t["kernel"][k])).sum();
    assert_eq!(
        n(&d["pages"]),
        kernel,
        "numatrace's demotions against the sum of pgdemote_*"
    );
    assert_eq!(n(&d["kswapd"]), n(&t["kernel"]["pgdemote_kswapd"]));
    assert_eq!(n(&d["khugepaged"]), n(&t["kernel"]["pgdemote_khugepaged"]));
    assert_eq!(
        n(&d["direct_or_proactive"]),
        n(&t["kernel"]["pgdemote_direct"]) + n(&t["kernel"]["pgdemote_proactive"])
    );
    if slow {
        assert!(
            n(&d["pages"]) > 0,
            "node 2 is a lower tier and nothing was demoted"
        );
    } else {
        println!("note: node 2 is not a lower tier of node 0 here: no demotion target");
    }
    // numatrace counts demotions system-wide (reclaim runs for no followed task); in the
    // guest only this cgroup is reclaimed, so its memory.stat must say the same.
    match memcg_demoted(&memcg, &memcg_before) {
        Some(m) => assert_eq!(n(&d["pages"]), m, "against the cgroup's memory.stat"),
        None => println!("note: memory.stat has no pgdemote_* before 6.12"),
    }
}

/// How long the demotion test's workload may take to place its memory, and then to exit (it
/// holds it 6 s): far beyond what it needs under emulation.
const WORKLOAD_STEP: Duration = Duration::from_secs(120);

/// The kernel's demotion counters, one per reclaimer (in /proc/vmstat and, from 6.12, in
/// memory.stat).
const PGDEMOTE: [&str; 4] = [
    "pgdemote_kswapd",
    "pgdemote_direct",
    "pgdemote_khugepaged",
    "pgdemote_proactive",
];

/// The cgroup's demotions by every reclaimer since `before` (`None`: memory.stat has no
/// `pgdemote_*`, before 6.12).
fn memcg_demoted(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> Option<u64> {
    PGDEMOTE
        .iter()
        .map(|k| delta(after, before, k))
        .reduce(|a, b| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        })
        .flatten()
}

/// The kernel adjusts each top-tier node's hot threshold once per `scan_period_max_ms` to hold
/// promotion candidates to the rate limit (kernel/sched/fair.c,
/// numa_promotion_adjust_threshold): in steps of 2/16 of the reference, between that and twice
/// it. numatrace reads it where the kernel keeps it (`pglist_data.nbp_threshold`, exported
/// nowhere else), so no counter can be compared; what must hold is the kernel's arithmetic,
/// and that a rate limit far below the hot pages' rate lowers it. Named to run last in its
/// binary: nothing puts node 0's threshold back (it climbs a step per scan_period_max_ms).
#[test]
fn the_hot_threshold_numatrace_reads_falls_under_a_tight_rate_limit() {
    const TEST: &str = "the_hot_threshold_numatrace_reads_falls_under_a_tight_rate_limit";
    let Some(tiers) = tiered_guest(TEST) else {
        return;
    };
    if !describe(&tiers) {
        common::skip(
            TEST,
            "node 2 is no lower tier on this kernel: no promotion, no threshold to adjust",
        );
        return;
    }
    if !Path::new("/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps").exists() {
        common::skip(TEST, "no promotion rate limit (6.0+)");
        return;
    }
    // An adjustment every 200 ms; 1 MB/s lets 51 candidate pages through per period, far
    // fewer than 64 MiB read hot make.
    let (_tunables, notes) = Tunables::set(&[
        ("scan_delay_ms", "100"),
        ("scan_period_min_ms", "100"),
        ("scan_period_max_ms", "200"),
    ]);
    println!("tunables: {notes:?}");
    let _mode = Sysctl::set("kernel.numa_balancing", "2").unwrap();
    let _limit = Sysctl::set("kernel.numa_balancing_promote_rate_limit_MBps", "1").unwrap();
    let v = common::stat_window(&[], &[], || {
        common::workload_ok(&[
            "migrate",
            "--mem-mib",
            "64",
            "--from-node",
            "2",
            "--to-node",
            "0",
            "--duration",
            "6s",
        ]);
    });
    let t = &v["tiering"];
    println!("tiering {t:#}");
    assert_eq!(
        n(&t["promoted_pages"]),
        n(&t["kernel"]["pgpromote_success"]),
        "promotions against pgpromote_success under the rate limit"
    );
    assert_eq!(
        t["node_thresholds_read"], true,
        "tiering mode on 6.1+ with BTF and kallsyms: the thresholds are read"
    );
    // The kernel's arithmetic (numa_promotion_adjust_threshold): steps of 2/16 of the
    // reference from the reference, within [one step, twice the reference].
    let reference = n(&t["hot_threshold_ms_end"]);
    let step = reference * 2 / 16;
    let (floor, ceiling) = (
        n(&t["hot_threshold_floor_ms"]),
        n(&t["hot_threshold_ceiling_ms"]),
    );
    assert!(
        step > 0 && floor == step && ceiling == reference * 2,
        "reference {reference}: floor {floor}, ceiling {ceiling}"
    );
    // The reader runs on CPU 0: node 0's threshold judged its faults.
    let th = t["node_hot_threshold_ms_end"]["0"]
        .as_u64()
        .unwrap_or_else(|| panic!("no threshold read for node 0: {t}"));
    assert!(
        (floor..=ceiling).contains(&th)
            && (th == floor || th == ceiling || th.abs_diff(reference) % step == 0),
        "node 0's threshold {th} ms is no step of the kernel's ({floor}..={ceiling} by {step} \
         from {reference})"
    );
    assert!(
        th < reference,
        "candidates far above the rate limit and node 0's threshold {th} ms is not below the \
         {reference} ms reference"
    );
    let (cand, ok) = (
        n(&t["kernel"]["pgpromote_candidate"]),
        n(&t["kernel"]["pgpromote_success"]),
    );
    assert!(ok > 0, "nothing promoted under a 1 MB/s rate limit");
    assert!(
        cand > ok,
        "the rate limit held nothing back: {cand} candidates, {ok} promoted"
    );
    decisions_equal_the_kernels_candidates(&v, "2, 1 MB/s");
    // What the kernel decided to promote was at least what it promoted (a migration can
    // still fail), and the rest of the hot pages the rate limit held back.
    let held = n(&t["promote_rate_limited"]);
    let let_through = n(&t["promote_hot"]) + n(&t["promote_free_room"]);
    assert!(
        held > 0 && let_through >= ok,
        "held back {held} hot pages, let {let_through} through, {ok} promoted: {t}"
    );
    println!("findings: {:#}", t["findings"]);
}

/// The traced tasks' promotion decisions (numatrace classes each slow-tier hint fault by its
/// latency, from the access-time exchange, against the threshold the kernel judged it by)
/// against the kernel's counts: the pages found hot are `pgpromote_candidate` exactly (the
/// kernel counts a candidate exactly when the latency is under the threshold), those let
/// through for free room `pgpromote_candidate_nrl` (6.18+). Only the workload touches the slow
/// node in the guest.
fn decisions_equal_the_kernels_candidates(v: &serde_json::Value, mode: &str) {
    let t = &v["tiering"];
    let Some(kernel) = t["kernel"]["pgpromote_candidate"].as_u64() else {
        println!("note: no pgpromote_candidate (before 6.0): the decisions are not cross-checked");
        return;
    };
    assert_eq!(
        n(&t["promote_candidates"]),
        kernel,
        "mode {mode}: pages numatrace found hot against pgpromote_candidate: {t}"
    );
    let seen = &v["kernel_seen"]["tiering"];
    assert_eq!(
        n(&seen["promote_hot"]) + n(&seen["promote_rate_limited"]),
        n(&t["promote_candidates"])
    );
    assert_eq!(
        n(&v["dropped"]["promote_unjudged"]),
        0,
        "mode {mode}: every decision classed"
    );
    match t["kernel"]["pgpromote_candidate_nrl"].as_u64() {
        Some(nrl) => assert_eq!(
            n(&t["promote_free_room"]),
            nrl,
            "mode {mode}: pages promoted for free room against pgpromote_candidate_nrl"
        ),
        None => println!(
            "note: no pgpromote_candidate_nrl before 6.18: free-room promotions ({}) not \
             cross-checked",
            n(&t["promote_free_room"])
        ),
    }
    // Every decision that compared a latency took one: hot and not-hot pages had theirs.
    let timed = n(&t["hint_latency_faults"]);
    assert!(
        timed > 0 && t["hint_latency_ms_mean"].as_f64().is_some(),
        "mode {mode}: no slow-tier hint-fault latency measured: {t}"
    );
    println!(
        "mode {mode}: {} candidate pages = pgpromote_candidate, {} held back, {} not hot, \
         latency mean {} ms over {timed} faults",
        n(&t["promote_candidates"]),
        n(&t["promote_rate_limited"]),
        n(&t["promote_not_hot"]),
        t["hint_latency_ms_mean"]
    );
}
