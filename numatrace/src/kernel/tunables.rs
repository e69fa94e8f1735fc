//! NUMA balancing scan tunables (debugfs `sched/numa_balancing/` since 5.13, sysctls before),
//! set for a reproducer and put back when the guard is dropped.

use std::{
    fs,
    path::{Path, PathBuf},
};

/// Where the tunable `name` (e.g. `scan_period_min_ms`) lives on this kernel.
pub fn tunable_path(name: &str) -> Option<PathBuf> {
    let debugfs = Path::new("/sys/kernel/debug/sched/numa_balancing").join(name);
    let sysctl = PathBuf::from(format!("/proc/sys/kernel/numa_balancing_{name}"));
    [debugfs, sysctl].into_iter().find(|p| p.exists())
}

fn mount_debugfs() {
    if Path::new("/sys/kernel/debug/sched").exists() {
        return;
    }
    // SAFETY: valid NUL-terminated strings; failure is harmless (the tunables stay unset).
    unsafe {
        libc::mount(
            c"debugfs".as_ptr(),
            c"/sys/kernel/debug".as_ptr(),
            c"debugfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
}

/// Values set by [`Tunables::set`], restored on drop.
#[derive(Default)]
pub struct Tunables {
    saved: Vec<(PathBuf, String)>,
}

impl Tunables {
    /// [`Self::set`] when `wanted`, else nothing (the reproducers set tunables, a user's
    /// command runs with them as they are).
    pub fn set_if(wanted: bool, values: &[(&str, &str)]) -> (Self, Vec<String>) {
        if wanted {
            Self::set(values)
        } else {
            (Self::default(), Vec::new())
        }
    }

    /// Sets each `(name, value)` it can (best effort: a locked-down debugfs refuses writes);
    /// returns one note per tunable saying what happened, to report with the results.
    pub fn set(values: &[(&str, &str)]) -> (Self, Vec<String>) {
        mount_debugfs();
        let mut guard = Self::default();
        let mut notes = Vec::new();
        for (name, value) in values {
            let Some(path) = tunable_path(name) else {
                notes.push(format!("{name}: not on this kernel"));
                continue;
            };
            let old = match fs::read_to_string(&path) {
                Ok(s) => s.trim().to_owned(),
                Err(e) => {
                    notes.push(format!("{name}: unreadable ({e})"));
                    continue;
                }
            };
            match fs::write(&path, value) {
                Ok(()) => {
                    guard.saved.push((path, old.clone()));
                    notes.push(format!("{name}={value} (was {old})"));
                }
                Err(e) => notes.push(format!("{name}: left at {old} ({e})")),
            }
        }
        (guard, notes)
    }
}

impl Drop for Tunables {
    fn drop(&mut self) {
        for (path, old) in self.saved.drain(..).rev() {
            if let Err(e) = fs::write(&path, &old) {
                tracing::error!("could not restore {} to {old}: {e}", path.display());
            }
        }
    }
}
