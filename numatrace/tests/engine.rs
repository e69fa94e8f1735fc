//! The live engine on a real kernel: snapshots taken every 100 ms while a workload runs lose
//! nothing — their deltas never go negative and add up to the delta of the whole window — and
//! the per-task tallies agree with the kernel side's own per-CPU counters. Where the task
//! iterator loads (the guests; the host's kernel refuses it) every snapshot but the first reads
//! only the entries touched since the one before it whole; the guests then switch to the
//! batched reader (the host's), which takes the entries stamped before its previous read as they
//! were, the last snapshot too: the per-task sums then rest on both.

mod common;

use std::{process::Command, time::Duration};

use common::{Stoppable, Sysctl, workload_bin};
use numatrace::{
    bpf::loader::LoadOptions,
    engine::{Detail, Engine, Snapshot},
    kernel::facts::KernelFacts,
    model::Counts,
    model::Filter,
    report::stat::{Dropped, KernelSeen},
};

fn options() -> LoadOptions {
    LoadOptions::default()
}

/// How long the 6 s workload may run before the test gives up on it (an emulated guest runs
/// it slower, never this much).
const WORKLOAD_DEADLINE: Duration = Duration::from_secs(120);

/// The workload: migrating where there are two nodes, else threads the scanner visits.
fn workload() -> Command {
    let mut c = Command::new(workload_bin());
    if common::numa_nodes() >= 2 {
        c.args(["migrate", "--mem-mib", "32", "--duration", "6s"]);
    } else {
        c.args([
            "threads",
            "--threads",
            "4",
            "--mem-mib",
            "32",
            "--duration",
            "6s",
        ]);
    }
    c.stdout(std::process::Stdio::null());
    c
}

#[test]
fn snapshots_every_100ms_lose_nothing_and_add_up() {
    const TEST: &str = "snapshots_every_100ms_lose_nothing_and_add_up";
    require_root!(TEST);
    if common::other_line_covers(TEST) {
        return;
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let snaps: Vec<Snapshot> = rt.block_on(async {
        let facts = KernelFacts::gather().unwrap();
        let mut engine = Engine::start(facts, &options()).unwrap();
        println!("task map read: {}", engine.task_reader());
        if std::env::var_os("NUMATRACE_IN_GUEST").is_some() {
            assert_eq!(
                engine.task_reader(),
                "iterator",
                "the guests' kernels load it"
            );
        }
        let mut snaps = vec![engine.snapshot(Detail::Full).unwrap()];
        let mut child = workload().spawn().unwrap();
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > WORKLOAD_DEADLINE {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the 6 s workload still ran after {WORKLOAD_DEADLINE:?}: killed");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            snaps.push(engine.snapshot(Detail::Summary).unwrap());
        }
        // A live task whose entries no program touches any more: run until it has counts,
        // stopped, its stamps left to age past the margin, it is read as unchanged and must
        // read as a whole read reads it.
        let stopped = Stoppable::threads("16", "60s");
        let of = |s: &Snapshot| -> Vec<numatrace::model::TaskRecord> {
            s.tasks
                .iter()
                .filter(|t| t.tgid == stopped.pid())
                .cloned()
                .collect()
        };
        // In the guests (two nodes): the host's one node may give a task nothing to count.
        let guest = std::env::var_os("NUMATRACE_IN_GUEST").is_some();
        let busy = std::time::Instant::now();
        if guest {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let s = engine.snapshot(Detail::Summary).unwrap();
                if of(&s).iter().any(|t| t.counts.unpack() != Counts::default()) {
                    break;
                }
                assert!(
                    busy.elapsed() < Duration::from_secs(30),
                    "the stopped workload drew no NUMA balancing activity in 30 s: nothing to compare"
                );
            }
        }
        stopped.stop();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // The previous snapshot handed back, as the frontends do: the next keeps the records
        // of the tasks that did not change (the stopped workload's), and must still equal a
        // whole read built afresh.
        let previous = engine.snapshot(Detail::Summary).unwrap();
        engine.recycle(previous);
        let unchanged = engine.snapshot(Detail::Summary).unwrap();
        println!(
            "{:?} entries read as unchanged, {} records kept",
            engine.unchanged_entries(),
            engine.kept_records()
        );
        if guest {
            assert!(
                engine.unchanged_entries().is_some_and(|n| n > 0),
                "the read was not incremental ({:?} entries as keys)",
                engine.unchanged_entries()
            );
            assert!(
                engine.kept_records() >= of(&unchanged).len(),
                "the stopped workload's records were built again ({} kept)",
                engine.kept_records()
            );
        }
        // The stopped workload as `read` has it equals a whole read now.
        let as_whole = |engine: &mut Engine, read: &Snapshot, by: &str| {
            engine.read_whole_next();
            let whole = engine.snapshot(Detail::Summary).unwrap();
            assert_eq!(engine.unchanged_entries(), None, "a whole read");
            let (a, b) = (of(read), of(&whole));
            assert!(
                a == b,
                "a task {by} took as unchanged differs from the whole read:\n{a:?}\n{b:?}"
            );
        };
        let by = format!("the {} read", engine.task_reader());
        as_whole(&mut engine, &unchanged, &by);
        if guest {
            // The same with the batched reader (where the kernel refuses the iterator, as the
            // host's does): entries stamped before its previous read are taken as they were.
            assert!(
                numatrace::sources::stamps::Jiffies::probe().is_some(),
                "the coarse clock's resolution gives every kernel's HZ"
            );
            engine.read_batched();
            // With the 1.5 s above, the stopped workload's stamps are older than the first
            // margin at HZ >= 100 (250 jiffies: 2.5 s).
            tokio::time::sleep(Duration::from_millis(1200)).await;
            // The first batched read is whole: it starts the reader's clock.
            engine.snapshot(Detail::Summary).unwrap();
            assert_eq!(engine.unchanged_entries(), None, "the first batched read");
            let batched = engine.snapshot(Detail::Summary).unwrap();
            println!(
                "batched: {:?} entries taken as unchanged",
                engine.unchanged_entries()
            );
            assert!(
                engine
                    .unchanged_entries()
                    .is_some_and(|n| n > 0 && n >= of(&batched).len() as u64),
                "the batched read did not take the stopped workload's {} entries as unchanged ({:?})",
                of(&batched).len(),
                engine.unchanged_entries()
            );
            as_whole(&mut engine, &batched, "the batched read");
        }
        drop(stopped);
        // Its exit settles before the quiet last snapshot.
        tokio::time::sleep(Duration::from_millis(300)).await;
        snaps.push(engine.snapshot(Detail::Full).unwrap());
        engine.stop().await.unwrap();
        snaps
    });
    assert!(snaps.len() > 20, "only {} snapshots in 6 s", snaps.len());
    let all = Filter::default();
    let (mut traced, mut own) = (Counts::default(), Counts::default());
    for w in snaps.windows(2) {
        let decreased = w[1].decreased(&w[0]);
        assert!(
            decreased.is_empty(),
            "counters went backwards: {decreased:?}"
        );
        let d = w[1].delta(&w[0]);
        traced.add(&d.totals(&all));
        own.add(&d.self_counts());
    }
    let (first, last) = (&snaps[0], snaps.last().unwrap());
    // Both ends are quiet (the workload starts after the first and ends before the last), so
    // the kernel side's counters did not move while they were read.
    assert!(
        first.consistent && last.consistent,
        "a quiet snapshot was read mid-update"
    );
    let whole = last.delta(first);
    let dropped = Dropped::from_snapshot(&whole);
    assert_eq!(dropped.total, 0, "{dropped:?}");
    assert_eq!(
        traced.finished(),
        whole.totals(&all),
        "Σ deltas vs the whole window"
    );
    assert_eq!(
        own.finished(),
        whole.self_counts(),
        "Σ deltas vs the whole window (self)"
    );

    let t = whole.totals(&all);
    let s = whole.self_counts();
    let seen = KernelSeen::from(&whole.counters);
    println!(
        "{} snapshots; traced: {} skipped VMAs, {} PTE updates, {} hint faults; self: {} skipped, {} PTE updates; kernel_seen: {seen:?}",
        snaps.len(),
        t.skipped_vmas_total,
        t.scan.pte_updates,
        t.hint_faults.faults,
        s.skipped_vmas_total,
        s.scan.pte_updates
    );
    assert!(
        t.skipped_vmas_total + t.scan.pte_updates + t.hint_faults.faults > 0,
        "the workload drew no NUMA balancing activity: nothing was compared"
    );
    // Per task (map entries) and per CPU (the kernel side's counters, which leave numatrace
    // out) agree exactly.
    assert_eq!(t.skipped_vmas_total, seen.get("skip_vma"));
    assert_eq!(t.scan.pte_updates, seen.get("scan.pte_updates"));
    assert_eq!(t.hint_faults.faults, seen.get("hint_faults.faults"));
}

/// Entries whose exit record found the ring full stay in the task table, marked; once their
/// tasks are gone, the ring's reader takes them as exited and frees their slots, with no
/// snapshot in between. The ring is left undrained (one thread, busy elsewhere) while 600
/// short-lived processes come and go: exit records are lost and a 256-slot table fills. Once
/// the reader has run for a moment, 100 more processes find it full for no event, and a
/// snapshot then has lost no entry. Sampled at 997 Hz, so that each process is seen on the
/// host, where task_numa_work cannot be hooked (the guests' programs see such processes only
/// through hint faults).
#[test]
fn entries_whose_exit_record_was_lost_are_freed_once_read() {
    const TEST: &str = "entries_whose_exit_record_was_lost_are_freed_once_read";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    use numatrace_common::Counter;
    let churn = |tasks: &str| {
        let mut c = Command::new(workload_bin());
        c.args([
            "churn",
            "--tasks",
            tasks,
            "--parallel",
            "4",
            "--spin-ms",
            "30",
        ]);
        c.stdout(std::process::Stdio::null());
        c
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let facts = KernelFacts::gather().unwrap();
        let opts = LoadOptions {
            max_tasks: 256,
            ringbuf_bytes: 64 << 10,
            sample_hz: 997,
            ..options()
        };
        let mut engine = Engine::start(facts, &opts).unwrap();
        let first = engine.counters().unwrap();
        // Blocking this runtime's only thread: nothing reads the ring meanwhile.
        assert!(churn("600").status().unwrap().success());
        let undrained = engine.counters().unwrap();
        let delta = |a: &numatrace::sources::maps::Counters,
                     b: &numatrace::sources::maps::Counters,
                     c: Counter| b.get(c) - a.get(c);
        let lost_exits = delta(&first, &undrained, Counter::RingbufFull);
        let refused = delta(&first, &undrained, Counter::TaskMapFull);
        println!(
            "undrained: {lost_exits} ring records lost, {refused} events refused by the full \
             table; {} tasks created",
            delta(&first, &undrained, Counter::TasksCreated)
        );
        if lost_exits == 0 || refused == 0 {
            common::skip(
                TEST,
                "the churn neither lost an exit record nor filled the table (no process seen)",
            );
            return;
        }
        // The reader's turn: it drains the ring and frees the marked entries.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let settled = engine.counters().unwrap();
        let mut child = churn("100").spawn().unwrap();
        while child.try_wait().unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let last = engine.counters().unwrap();
        assert_eq!(
            delta(&settled, &last, Counter::TaskMapFull),
            0,
            "the marked entries' slots were not freed: the table was still full"
        );
        assert!(
            delta(&settled, &last, Counter::TasksCreated) > 0,
            "the 100 processes were seen"
        );
        let snap = engine.snapshot(Detail::Summary).unwrap();
        assert_eq!(snap.evicted, 0, "no entry lost");
        engine.stop().await.unwrap();
    });
}
