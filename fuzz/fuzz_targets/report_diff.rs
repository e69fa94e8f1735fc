//! `report --diff` on any bytes that read as a capture: the input against itself cut in half
//! (a capture cut short reads up to its last whole section, so a shorter window), text and JSON.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use numatrace::{
    capture::Capture,
    cmd::report::{report_of, side},
    report::diff::diff,
};

fuzz_target!(|data: &[u8]| {
    let Ok(after) = Capture::from_bytes(Path::new("after.ntrace"), data) else {
        return;
    };
    let after = report_of(&after);
    let before = Capture::from_bytes(Path::new("before.ntrace"), &data[..data.len() / 2])
        .map(|c| report_of(&c))
        .unwrap_or_else(|_| after.clone());
    let (b, a) = (
        side(&before, Path::new("before.ntrace")),
        side(&after, Path::new("after.ntrace")),
    );
    for d in [diff(&b, &a), diff(&a, &b)] {
        let _ = d.to_text();
        let _ = serde_json::to_string(&d);
    }
});
