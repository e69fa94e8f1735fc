//! Running commands: the helpers every step uses (no step logic here, so that setup and the
//! steps both depend on this and not on each other).

/// `check` runs a command, inheriting stdio, and fails with its command line when it fails;
/// `output` returns its stdout. numatrace-lab's, which xtask builds on.
pub use numatrace_lab::{check, output};

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}
