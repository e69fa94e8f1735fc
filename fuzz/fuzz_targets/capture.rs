//! The capture reader on any bytes: a capture or an error, never a panic, within the limits.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use numatrace::capture::Capture;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = Capture::from_bytes(Path::new("fuzz.ntrace"), data) {
        let _ = c.points().count();
        let _ = c.closing();
    }
});
