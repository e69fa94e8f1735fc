//! Batched map reads on the real kernel: a hash and an LRU hash map of task-entry-sized values,
//! filled here, read with `BPF_MAP_LOOKUP_BATCH` in small chunks (many calls) and element by
//! element, give the same entries.

mod common;

use std::collections::BTreeMap;

use aya::maps::{HashMap, Map, MapData};
use aya_obj::{
    EbpfSectionKind,
    generated::bpf_map_type,
    maps::{LegacyMap, PinningType, bpf_map_def},
};
use numatrace::sources::batch::{Batch, BatchError};

/// As large as a task entry (720 bytes).
type Value = [u64; 90];

fn map(kind: bpf_map_type, name: &str, max_entries: u32) -> MapData {
    let def = bpf_map_def {
        map_type: kind as u32,
        key_size: 4,
        value_size: size_of::<Value>() as u32,
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

#[test]
fn batched_and_iterated_reads_agree() {
    const TEST: &str = "batched_and_iterated_reads_agree";
    if !common::is_root() {
        common::skip(
            TEST,
            "needs root (CAP_BPF) to create BPF maps; CI runs it as root",
        );
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
