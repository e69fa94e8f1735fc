//! Batched map reads on the real kernel: a hash and an LRU hash map of task-entry-sized values,
//! filled here, read with `BPF_MAP_LOOKUP_BATCH` in small chunks (many calls) and element by
//! element, give the same entries; so does the task array, up to its used slots.

mod common;

use std::collections::BTreeMap;

use aya::maps::{Array, HashMap, Map, MapData};
use aya_obj::{
    EbpfSectionKind,
    generated::bpf_map_type,
    maps::{LegacyMap, PinningType, bpf_map_def},
};
use numatrace::sources::{
    batch::{Batch, BatchError},
    task_map::Prefix,
};
use numatrace_common::TaskEntry;

/// As large as a task entry (720 bytes).
type Value = [u64; 90];

fn map(kind: bpf_map_type, name: &str, max_entries: u32) -> MapData {
    map_of::<Value>(kind, name, max_entries)
}

/// A map of `V` values keyed by u32.
fn map_of<V>(kind: bpf_map_type, name: &str, max_entries: u32) -> MapData {
    let def = bpf_map_def {
        map_type: kind as u32,
        key_size: 4,
        value_size: size_of::<V>() as u32,
        max_entries,
        map_flags: 0,
        id: 0,
        pinning: PinningType::None,
    };
    let obj = aya_obj::Map::Legacy(LegacyMap {
        def,
        inner_def: None,
        section_index: 0,
        section_kind: EbpfSectionKind::Maps,
        symbol_index: None,
        data: Vec::new(),
    });
    MapData::create(obj, name, None).expect("creating the map")
}

fn both_ways(map: Map, entries: u32) {
    let mut m: HashMap<MapData, u32, Value> = HashMap::try_from(map).unwrap();
    for k in 0..entries {
        let mut v = [0u64; 90];
        v[0] = u64::from(k) * 7;
        v[89] = u64::from(k) ^ 0xdead_beef;
        m.insert(&k, &v, 0).unwrap();
    }
    let iterated: BTreeMap<u32, Value> = m.iter().map(Result::unwrap).collect();
    assert_eq!(iterated.len(), entries as usize);
    // 64 per call: ~80 calls, the last one partial.
    let mut batch = Batch::<u32, Value>::new(64);
    let mut batched = BTreeMap::new();
    let fd = aya::maps::IterableMap::map(&m).fd();
    match batch.read(std::os::fd::AsFd::as_fd(fd), |k, v| {
        assert!(batched.insert(*k, *v).is_none(), "key {k} read twice");
    }) {
        Ok(()) => {}
        Err(BatchError::Unsupported(e)) => {
            common::skip(
                "batched_and_iterated_reads_agree",
                format!("{e}: kernel < 5.6"),
            );
            return;
        }
        Err(e) => panic!("{e}"),
    }
    assert_eq!(batched, iterated);
}

/// Whether this process may create BPF maps; else `test` is skipped, saying why.
fn may_create_maps(test: &str) -> bool {
    let root = common::is_root();
    if !root {
        common::skip(
            test,
            "needs root (CAP_BPF) to create BPF maps; CI runs it as root",
        );
    }
    root
}

#[test]
fn batched_and_iterated_reads_agree() {
    const TEST: &str = "batched_and_iterated_reads_agree";
    if !may_create_maps(TEST) {
        return;
    }
    both_ways(
        Map::HashMap(map(bpf_map_type::BPF_MAP_TYPE_HASH, "nt_batch_hash", 8192)),
        5000,
    );
    both_ways(
        Map::LruHashMap(map(
            bpf_map_type::BPF_MAP_TYPE_LRU_HASH,
            "nt_batch_lru",
            16384,
        )),
        5000,
    );
    // Empty: one call, ENOENT at once.
    both_ways(
        Map::HashMap(map(bpf_map_type::BPF_MAP_TYPE_HASH, "nt_batch_empty", 64)),
        0,
    );
}

/// The task array's read ([`Prefix`]): in slot order, the entries that hold a task, up to a
/// run of never-used slots long enough that no slot past it can have been handed out; batched
/// and element by element alike.
#[test]
fn a_task_array_read_stops_past_the_slots_ever_used() {
    const TEST: &str = "a_task_array_read_stops_past_the_slots_ever_used";
    if !may_create_maps(TEST) {
        return;
    }
    let data = map_of::<TaskEntry>(bpf_map_type::BPF_MAP_TYPE_ARRAY, "nt_batch_array", 8192);
    let mut a: Array<MapData, TaskEntry> = Array::try_from(Map::Array(data)).unwrap();
    let mut put = |slot: u32, pid: u32, first_ns: u64, generation: u32| {
        let mut e = TaskEntry::default();
        (e.stats.pid, e.stats.first_ns, e.slot, e.generation) = (pid, first_ns, slot, generation);
        a.set(slot, &e, 0).unwrap();
    };
    let mut want = Vec::new();
    for slot in 0..3000 {
        match slot % 10 {
            // Freed (pid 0), and being made (no first_ns yet): no task's.
            3 => put(slot, 0, 5, 2),
            7 => put(slot, 100_000 + slot, 0, 1),
            _ => {
                put(slot, 100_000 + slot, 1 + u64::from(slot), 1);
                want.push(100_000 + slot);
            }
        }
    }
    // 63 never-used slots, then one handed out later and filled first: read.
    put(3063, 7, 8, 1);
    want.push(7);
    // Past 64 never-used slots in a row, nothing has been handed out: not read.
    put(3200, 9, 9, 1);
    let mut batched = Vec::new();
    let mut prefix = Prefix::default();
    match Batch::<u32, TaskEntry>::new(128).read_while(
        std::os::fd::AsFd::as_fd(aya::maps::IterableMap::map(&a).fd()),
        |_, e| prefix.take(e, &mut |e| batched.push(e.stats.pid)),
    ) {
        Ok(()) => assert_eq!(batched, want),
        Err(BatchError::Unsupported(e)) => common::skip(TEST, format!("{e}: kernel < 5.6")),
        Err(e) => panic!("{e}"),
    }
    let mut one_by_one = Vec::new();
    let mut prefix = Prefix::default();
    for i in 0..a.len() {
        if !prefix.take(&a.get(&i, 0).unwrap(), &mut |e| {
            one_by_one.push(e.stats.pid)
        }) {
            break;
        }
    }
    assert_eq!(one_by_one, want);
}
