//! The task iterator on the real kernel: over a task array filled here, a first read sends every
//! entry that holds a task whole, the next ones whole exactly those stamped since the previous
//! read began (less the margin) and every other one as its key, once each; free slots and one
//! being made are never sent; what comes whole is what a batched read of the array gives.

mod common;

use std::{collections::BTreeMap, os::fd::AsFd as _};

use aya::{
    Btf, EbpfLoader,
    maps::{Array, IterableMap as _, MapData},
    programs::ProgramError,
};
use numatrace::sources::{
    batch::Batch,
    task_iter::{IterError, TaskIter, TaskRec},
};
use numatrace_common::{MAP_TASK_STATS, TaskEntry};

const TEST: &str = "the_iterator_sends_whole_only_what_changed";

/// (pid → (whole, entry as sent or as the map held it)).
type Read = BTreeMap<u32, (bool, TaskEntry)>;

/// The slot the test gives `pid`'s entry.
fn slot_of(pid: u32) -> u32 {
    pid - 1
}

fn read(iter: &mut TaskIter, map: &Array<MapData, TaskEntry>, all: bool) -> Read {
    let mut got = Read::new();
    let each = |r: TaskRec<'_>| {
        let (pid, whole, e) = match r {
            TaskRec::Entry(e) => (e.stats.pid, true, *e),
            TaskRec::Unchanged(pid, first_ns) => {
                let mut e = map
                    .get(&slot_of(pid), 0)
                    .expect("an unchanged entry is in the map");
                assert_eq!(
                    e.stats.first_ns, first_ns,
                    "pid {pid}: the key of its entry"
                );
                e.stats.pid = pid;
                (pid, false, e)
            }
        };
        assert!(
            got.insert(pid, (whole, e)).is_none(),
            "pid {pid} sent twice"
        );
    };
    if all {
        iter.read_all(each)
    } else {
        iter.read_changed(each)
    }
    .expect("reading the iterator");
    got
}

#[test]
fn the_iterator_sends_whole_only_what_changed() {
    if !common::is_root() {
        common::skip(
            TEST,
            "needs root (CAP_BPF) to load BPF programs; CI runs it as root",
        );
        return;
    }
    let btf = match Btf::from_sys_fs() {
        Ok(b) => b,
        Err(e) => {
            common::skip(
                TEST,
                format!("no kernel BTF ({e}): numatrace reads the map in batches"),
            );
            return;
        }
    };
    let mut ebpf = EbpfLoader::new()
        .map_max_entries(MAP_TASK_STATS, 4096)
        .load(numatrace::bpf::OBJECT)
        .expect("loading numatrace's object");
    let mut map: Array<MapData, TaskEntry> =
        Array::try_from(ebpf.take_map(MAP_TASK_STATS).expect("the task map")).unwrap();
    let mut iter = match TaskIter::open(&mut ebpf, &btf, map.map().fd().as_fd()) {
        Ok(i) => i,
        // This machine's own kernel refuses every BPF_PROG_TYPE_TRACING program but tp_btf
        // (fentry too, environment.md); the guests' kernels load it.
        Err(IterError::Load(ProgramError::LoadError {
            io_error,
            verifier_log,
        })) if io_error.raw_os_error() == Some(libc::EPERM) => {
            common::skip(
                TEST,
                format!(
                    "the kernel refuses iterator programs (EPERM: {}); numatrace reads the map in batches there",
                    verifier_log.to_string().trim().replace('\n', " ")
                ),
            );
            return;
        }
        Err(e) => panic!("the task iterator does not load on a kernel with BTF: {e}"),
    };
    let entry = |pid: u32, touched: u32, faults: u64| {
        let mut e = TaskEntry::default();
        e.stats.pid = pid;
        e.stats.tgid = pid;
        e.stats.first_ns = 1000 + u64::from(pid);
        e.stats.touched = touched;
        e.stats.hint_faults.faults = faults;
        e.inflight.scan_ts_ns = u64::from(pid) * 3;
        e.slot = slot_of(pid);
        e.generation = 1;
        e
    };
    for pid in 1..=2000u32 {
        map.set(slot_of(pid), &entry(pid, 0, u64::from(pid)), 0)
            .unwrap();
    }
    // A slot being made an entry (a program between its pop and its first_ns), and a freed
    // one (pid 0, its old counts still there): no task's.
    let mut making = entry(5000, 0, 7);
    making.stats.first_ns = 0;
    map.set(2000, &making, 0).unwrap();
    let mut freed = entry(6000, 0, 9);
    freed.stats.pid = 0;
    freed.generation = 2;
    map.set(2001, &freed, 0).unwrap();

    // The first read: every entry whole.
    assert!(!iter.changed_only(), "nothing read whole yet");
    let first = read(&mut iter, &map, false);
    assert_eq!(first.len(), 2000);
    assert!(
        first.values().all(|(whole, _)| *whole),
        "a first read is whole"
    );
    let after_first = iter
        .since()
        .expect("a completed read sets the next one's start");
    // The kernel's jiffies, taken by the walk: they move (HZ >= 100: 20 in 200 ms). A walk
    // that only takes them sends nothing (a record would fail it).
    std::thread::sleep(std::time::Duration::from_millis(200));
    iter.start_whole().expect("a walk that sends nothing");
    let since = iter.since().unwrap();
    assert!(
        since.wrapping_sub(after_first) as i32 >= 5,
        "the walk's start is the kernel's jiffies ({after_first} then {since}, 200 ms apart)"
    );
    assert!(iter.changed_only());

    // Stamped before the margin: keys; at or after it: whole (the margin's edge on both sides).
    let changed: Vec<u32> = (1..=2000).filter(|p| p % 7 == 0).collect();
    for pid in 1..=2000u32 {
        let touched = if changed.contains(&pid) {
            since.wrapping_add(pid % 3) // at the margin's start or just after
        } else {
            since.wrapping_sub(1 + pid % 2) // just before it
        };
        map.set(slot_of(pid), &entry(pid, touched, u64::from(pid) + 1), 0)
            .unwrap();
    }
    let second = read(&mut iter, &map, false);
    assert_eq!(second.len(), 2000, "every entry, whole or as its key");
    let whole: Vec<u32> = second
        .iter()
        .filter(|(_, (w, _))| *w)
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(whole, changed, "whole: the stamped ones");

    // What came whole is what the map holds (a batched read of it).
    let mut batched = BTreeMap::new();
    Batch::<u32, TaskEntry>::new(256)
        .read(map.map().fd().as_fd(), |_, v| {
            batched.insert(v.stats.pid, *v);
        })
        .expect("a batched read of the map");
    for (pid, (w, e)) in &second {
        if *w {
            assert_eq!(Some(e), batched.get(pid), "pid {pid} as sent whole");
        }
    }
    assert_eq!(
        second[&14].1.stats.hint_faults.faults, 15,
        "a changed entry's new count"
    );

    // Every entry whole, whatever its stamp.
    let all = read(&mut iter, &map, true);
    assert!(all.values().all(|(w, _)| *w) && all.len() == 2000);
    // A read that did not complete (the engine dropped it): the next one is whole.
    iter.invalidate();
    assert!(!iter.changed_only());
    assert!(read(&mut iter, &map, false).values().all(|(w, _)| *w));
    // Then keys for what no one touched since: once the stamps are older than the margin,
    // nothing comes whole.
    let wait_ms = 10 * u64::from(iter.margin()) + 300; // HZ >= 100
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(wait_ms);
    loop {
        let quiet = read(&mut iter, &map, false);
        let whole_now: Vec<u32> = quiet
            .iter()
            .filter(|(_, (w, _))| *w)
            .map(|(p, _)| *p)
            .collect();
        if whole_now.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {} whole {wait_ms} ms after the last stamp",
            whole_now.len()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
