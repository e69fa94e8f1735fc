//! `report --format json` on any bytes that read as a capture.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use numatrace::{capture::Capture, cmd::report::report_of};

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = Capture::from_bytes(Path::new("fuzz.ntrace"), data) {
        let r = report_of(&c);
        // Non-finite floats are the one thing serde_json refuses; anything else is a bug.
        if let Err(e) = serde_json::to_string(&r) {
            assert!(e.to_string().contains("float"), "{e}");
        }
    }
});
