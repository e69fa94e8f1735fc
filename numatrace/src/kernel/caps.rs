//! Whether this process may load and attach BPF programs.

use std::fs;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capability mask from /proc/self/status text.
pub fn effective_caps(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// `None` when tracing is allowed, else what is missing, as one sentence.
pub fn missing_for_tracing(cap_eff: u64) -> Option<String> {
    let has = |c: u32| cap_eff & (1u64 << c) != 0;
    // Tracing programs need CAP_BPF + CAP_PERFMON (5.8+), or CAP_SYS_ADMIN alone.
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return None;
    }
    Some(
        "numatrace needs root (or CAP_BPF and CAP_PERFMON) to load its kernel programs: run it with sudo"
            .into(),
    )
}

/// Checks this process; `Err` holds the one-line explanation.
pub fn check_tracing_allowed() -> Result<(), String> {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    match effective_caps(&status) {
        Some(caps) => missing_for_tracing(caps).map_or(Ok(()), Err),
        None => Err("cannot read this process's capabilities from /proc/self/status".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_bpf_perfmon_are_enough() {
        assert_eq!(missing_for_tracing(0x000001ffffffffff), None);
        assert_eq!(missing_for_tracing(1 << CAP_SYS_ADMIN), None);
        assert_eq!(
            missing_for_tracing((1 << CAP_BPF) | (1 << CAP_PERFMON)),
            None
        );
    }

    #[test]
    fn unprivileged_is_refused_with_a_reason() {
        let why = missing_for_tracing(0).unwrap();
        assert!(why.contains("root"));
        assert!(missing_for_tracing(1 << CAP_BPF).is_some());
    }

    #[test]
    fn parses_status() {
        let s = "Name:\tcat\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_caps(s), Some(0x1ffffffffff));
        assert_eq!(effective_caps("Name: x\n"), None);
    }
}
