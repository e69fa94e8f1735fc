//! A real capture from a guest, as every report format reads it: it stays readable by newer
//! numatrace, and no number in it makes a report panic.

use std::path::Path;

use proptest::prelude::*;

use super::report_of;
use crate::capture::{Capture, EventRecord, SECTION_EVENTS, format};

/// A capture `record` wrote in a 2-node guest (Debian 6.12, `migrate --mem-mib 32`): older
/// captures must stay readable by newer numatrace.
const REAL: &[u8] = include_bytes!("../../../tests/fixtures/capture-6.12-migrate.ntrace");

#[test]
fn a_real_capture_from_a_guest_still_reads() {
    let c = Capture::from_bytes(Path::new("fixture"), REAL).unwrap();
    assert!(c.complete());
    assert_eq!(c.events, 16439);
    assert_eq!(c.samples.len(), 16);
    let r = report_of(&c);
    let h = &r.stat.totals.hint_faults;
    assert_eq!((h.faults, h.migrated_pages), (8192, 8192));
    assert_eq!(r.stat.node_matrix.len(), 1);
    assert_eq!(r.stat.vmstat_delta["numa_pages_migrated"], 8192);
    // Written before numatrace counted promotions: not measured, rather than 0.
    let m = r.stat.measured();
    use crate::report::measured::Feed;
    assert!(!m.is(Feed::Promotions) && m.is(Feed::HintFaults), "{m:?}");
    let json = r.stat.to_json().unwrap();
    assert!(
        json["tiering"].get("promoted_pages").is_none(),
        "{:#}",
        json["tiering"]
    );
    assert!(
        json["not_measured"]["promotions"]
            .as_str()
            .is_some_and(|w| w.contains("predates")),
        "{:#}",
        json["not_measured"]
    );
    assert!(
        json["not_measured"]["promote_decisions"]
            .as_str()
            .is_some_and(|w| w.contains("predates numatrace's promotion decisions")),
        "{:#}",
        json["not_measured"]
    );
    assert!(json["tiering"].get("promote_candidates").is_none());
    assert!(r.stat.tiering.to_text().contains("not measured"));
    let mut spans = 0;
    let mut migrations = 0;
    let mut r = format::Reader::new(REAL).unwrap();
    while let Some(s) = r.next_section().unwrap() {
        if s.kind == SECTION_EVENTS {
            let ev: Vec<EventRecord> = serde_json::from_slice(&s.data).unwrap();
            spans += ev
                .iter()
                .filter(|e| matches!(e, EventRecord::ScanCall { .. }))
                .count();
            migrations += ev
                .iter()
                .filter(|e| matches!(e, EventRecord::Migration { migrated: true, .. }))
                .count();
        }
    }
    assert!(spans > 0);
    assert_eq!(migrations, 8192, "one span per migrate_misplaced call");
}

/// The real capture with numbers in its sections' JSON replaced (re-encoded with valid
/// checksums, so the JSON and the report code see them): every report format runs.
fn with_numbers_replaced(picks: &[(usize, u64)]) -> Vec<u8> {
    fn visit(v: &mut serde_json::Value, n: &mut usize, picks: &[(usize, u64)]) {
        match v {
            serde_json::Value::Number(_) => {
                for (at, x) in picks {
                    if *at == *n {
                        *v = serde_json::Value::from(*x);
                    }
                }
                *n += 1;
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| visit(x, n, picks)),
            serde_json::Value::Object(o) => o.values_mut().for_each(|x| visit(x, n, picks)),
            _ => {}
        }
    }
    let mut r = format::Reader::new(REAL).unwrap();
    let mut out = Vec::new();
    format::write_header(&mut out, &r.header.writer).unwrap();
    while let Some(s) = r.next_section().unwrap() {
        let mut v: serde_json::Value = serde_json::from_slice(&s.data).unwrap();
        // Numbers counted per section, so that picks land in every kind of section.
        let mut n = 0;
        visit(&mut v, &mut n, picks);
        format::write_section(&mut out, s.kind, &serde_json::to_vec(&v).unwrap()).unwrap();
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_numbers_in_a_real_capture_never_panic_any_report(
        picks in proptest::collection::vec(
            (0usize..400, prop_oneof![Just(0u64), Just(u64::MAX), Just(1u64 << 63), any::<u64>()]),
            1..12,
        ),
    ) {
        let bytes = with_numbers_replaced(&picks);
        let path = std::env::temp_dir().join(format!("numatrace-fuzz-{}.ntrace", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(c) = Capture::open(&path) {
            let r = report_of(&c);
            let _ = r.to_text(25);
            let _ = serde_json::to_string(&r).unwrap();
            let d = crate::report::diff::diff(&super::side(&r, Path::new("a")), &super::side(&r, Path::new("b")));
            let _ = d.to_text();
            let mut sink = Vec::new();
            let _ = crate::report::chrome::write_trace(&c, &mut sink);
        }
        let _ = std::fs::remove_file(&path);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The real capture with bytes changed and its tail cut: an error or a capture.
    #[test]
    fn mutated_real_captures_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut b = REAL.to_vec();
        for (at, x) in flips {
            let i = at.index(b.len());
            b[i] ^= x;
        }
        let end = cut.index(b.len() + 1);
        if let Ok(c) = Capture::from_bytes(Path::new("fuzz"), &b[..end]) {
            let _ = report_of(&c);
        }
    }
}
