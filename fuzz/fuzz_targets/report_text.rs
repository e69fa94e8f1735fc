//! `report` (text) on any bytes that read as a capture.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use numatrace::{capture::Capture, cmd::report::report_of};

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = Capture::from_bytes(Path::new("fuzz.ntrace"), data) {
        let _ = report_of(&c).to_text(25);
    }
});
