//! `report --format chrome-trace` on any bytes that read as a capture. The trace streams the
//! events from the file again, so the input is written to a file of this process first.
#![no_main]

use std::{path::PathBuf, sync::OnceLock};

use libfuzzer_sys::fuzz_target;
use numatrace::{capture::Capture, report::chrome::write_trace};

fn scratch() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        std::env::temp_dir().join(format!(
            "numatrace-fuzz-trace-{}.ntrace",
            std::process::id()
        ))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    if std::fs::write(path, data).is_err() {
        return;
    }
    if let Ok(c) = Capture::open(path) {
        let _ = write_trace(&c, &mut std::io::sink());
    }
});
