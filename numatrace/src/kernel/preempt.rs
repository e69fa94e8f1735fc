//! Whether the running kernel preempts kernel code. It decides fentry against kprobe: the
//! kernel runs a trampoline (fentry/fexit) program with migration, not preemption, disabled and
//! skips the program on a CPU where it is already running, so a run preempted on a preemptible
//! kernel makes the program miss every other task's call on that CPU until it resumes (seen on
//! Debian's 7.x: hundreds of hint faults per window). A kprobe program runs with preemption off
//! (it is still skipped while the CPU's `bpf_prog_active` is held, e.g. by a preempted BPF map
//! syscall: rare, and counted in the same statistic).

use std::{fs, path::Path};

use serde::{Deserialize, Serialize};

/// The kernel's preemption model (`preempt=` names; `rt` for PREEMPT_RT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Model {
    None,
    Voluntary,
    Full,
    Lazy,
    Rt,
}

impl Model {
    /// Kernel code, and so a trampoline program, can be preempted anywhere.
    pub fn preemptible(self) -> bool {
        matches!(self, Self::Full | Self::Lazy | Self::Rt)
    }

    fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "none" => Self::None,
            "voluntary" => Self::Voluntary,
            "full" => Self::Full,
            "lazy" => Self::Lazy,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Voluntary => "voluntary",
            Self::Full => "full",
            Self::Lazy => "lazy",
            Self::Rt => "rt",
        })
    }
}

/// The model and where it was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preemption {
    pub model: Model,
    pub from: String,
}

/// The texts the model is read from (any may be missing).
#[derive(Default)]
pub struct Sources<'a> {
    /// debugfs `sched/preempt` (PREEMPT_DYNAMIC kernels): `none voluntary (full) lazy`.
    pub debugfs: Option<&'a str>,
    /// `uname -v`: names PREEMPT_RT, PREEMPT_DYNAMIC or PREEMPT when built in.
    pub uname_v: Option<&'a str>,
    /// /proc/cmdline: `preempt=` chooses the model of a PREEMPT_DYNAMIC kernel at boot.
    pub cmdline: Option<&'a str>,
    /// /boot/config-RELEASE: the default model of a PREEMPT_DYNAMIC kernel.
    pub config: Option<&'a str>,
}

/// The model, from the most direct source there is; `None` when none says.
pub fn model(s: &Sources) -> Option<Preemption> {
    let found = |model, from: &str| {
        Some(Preemption {
            model,
            from: from.to_owned(),
        })
    };
    let uname: Vec<&str> = s.uname_v.unwrap_or("").split_whitespace().collect();
    if uname.contains(&"PREEMPT_RT") {
        return found(Model::Rt, "uname -v: PREEMPT_RT");
    }
    if let Some(m) = s.debugfs.and_then(|t| {
        t.split_whitespace()
            .find_map(|w| w.strip_prefix('(')?.strip_suffix(')'))
            .and_then(Model::from_name)
    }) {
        return found(m, "/sys/kernel/debug/sched/preempt");
    }
    // 5.12 to 5.17 print PREEMPT for PREEMPT_DYNAMIC builds too: the config tells them apart.
    let dynamic = uname.contains(&"PREEMPT_DYNAMIC")
        || s.config
            .is_some_and(|c| c.lines().any(|l| l.trim() == "CONFIG_PREEMPT_DYNAMIC=y"));
    if uname.contains(&"PREEMPT") && !dynamic {
        // PREEMPT_BUILD without PREEMPT_DYNAMIC: full or lazy, preemptible either way.
        return found(Model::Full, "uname -v: PREEMPT");
    }
    if !dynamic {
        return if s.uname_v.is_some() {
            found(Model::Voluntary, "uname -v: no PREEMPT (none or voluntary)")
        } else {
            None
        };
    }
    // The kernel applies each preempt= in turn: the last one wins.
    if let Some(m) = s.cmdline.and_then(|c| {
        c.split_whitespace()
            .filter_map(|w| w.strip_prefix("preempt="))
            .next_back()
            .and_then(Model::from_name)
    }) {
        return found(m, "/proc/cmdline: preempt=");
    }
    let config = s.config?;
    [
        ("CONFIG_PREEMPT_NONE=y", Model::None),
        ("CONFIG_PREEMPT_VOLUNTARY=y", Model::Voluntary),
        ("CONFIG_PREEMPT=y", Model::Full),
        ("CONFIG_PREEMPT_LAZY=y", Model::Lazy),
    ]
    .into_iter()
    .find(|(line, _)| config.lines().any(|l| l.trim() == *line))
    .and_then(|(_, m)| found(m, "/boot/config: the PREEMPT_DYNAMIC default"))
}

/// Reads the running kernel's sources (nothing is mounted for it).
pub fn gather(release: &str) -> Option<Preemption> {
    let read = |p: &str| fs::read_to_string(Path::new(p)).ok();
    let debugfs = read("/sys/kernel/debug/sched/preempt");
    let uname_v = read("/proc/sys/kernel/version");
    let cmdline = read("/proc/cmdline");
    let config = read(&format!("/boot/config-{release}"));
    model(&Sources {
        debugfs: debugfs.as_deref(),
        uname_v: uname_v.as_deref(),
        cmdline: cmdline.as_deref(),
        config: config.as_deref(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DYNAMIC: &str = "#1 SMP PREEMPT_DYNAMIC Debian 6.12.57-1 (2025-11-05)";

    fn m(s: Sources) -> Option<Model> {
        model(&s).map(|p| p.model)
    }

    #[test]
    fn debugfs_says_the_mode_in_parentheses() {
        let s = Sources {
            debugfs: Some("none voluntary full (lazy)\n"),
            uname_v: Some(DYNAMIC),
            cmdline: Some("preempt=none"),
            ..Default::default()
        };
        assert_eq!(m(s), Some(Model::Lazy), "debugfs is the running mode");
    }

    #[test]
    fn dynamic_without_debugfs_reads_cmdline_then_config() {
        let with_cmdline = Sources {
            uname_v: Some(DYNAMIC),
            cmdline: Some("preempt=none console=ttyS0 preempt=full quiet"),
            config: Some("CONFIG_PREEMPT_VOLUNTARY=y\n"),
            ..Default::default()
        };
        assert_eq!(m(with_cmdline), Some(Model::Full));
        let config_only = Sources {
            uname_v: Some(DYNAMIC),
            cmdline: Some("console=ttyS0"),
            config: Some("# CONFIG_PREEMPT_NONE is not set\nCONFIG_PREEMPT_VOLUNTARY=y\n"),
            ..Default::default()
        };
        assert_eq!(m(config_only), Some(Model::Voluntary));
        let unknown = Sources {
            uname_v: Some(DYNAMIC),
            ..Default::default()
        };
        assert_eq!(m(unknown), None);
    }

    #[test]
    fn static_builds_are_named_by_uname() {
        let full = Sources {
            uname_v: Some("#1 SMP PREEMPT Tue Jan 1"),
            ..Default::default()
        };
        assert!(m(full).unwrap().preemptible());
        let rt = Sources {
            uname_v: Some("#1 SMP PREEMPT_RT Tue Jan 1"),
            debugfs: Some("(full)"),
            ..Default::default()
        };
        assert_eq!(m(rt), Some(Model::Rt));
        let voluntary = Sources {
            uname_v: Some("#1 SMP Debian 5.10.223-1 (2024-08-10)"),
            ..Default::default()
        };
        assert!(!m(voluntary).unwrap().preemptible());
        assert_eq!(m(Sources::default()), None);
        // 5.12-5.17 dynamic builds say PREEMPT; their config says PREEMPT_DYNAMIC.
        let early_dynamic = Sources {
            uname_v: Some("#1 SMP PREEMPT Tue Jan 1"),
            config: Some("CONFIG_PREEMPT_DYNAMIC=y\nCONFIG_PREEMPT_VOLUNTARY=y\n"),
            ..Default::default()
        };
        assert_eq!(m(early_dynamic), Some(Model::Voluntary));
    }
}
