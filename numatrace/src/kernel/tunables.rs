//! NUMA balancing scan tunables (debugfs `sched/numa_balancing/` since 5.13, sysctls before),
//! set for a reproducer and put back when the guard is dropped.
//!
//! A process killed outright (SIGKILL, OOM) runs no destructor: before changing anything the
//! original values are written to [`SAVED`], removed once they are restored, so that the next
//! numatrace reports them and `numatrace check --restore-tunables` puts them back.

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

/// Original values of tunables a running (or killed) `check` changed: `PATH<TAB>VALUE` lines.
/// Under /run: gone at reboot, as the tunables' changed values are.
pub const SAVED: &str = "/run/numatrace/tunables.saved";

/// The original values in [`SAVED`], if a numatrace left some there.
pub fn saved() -> Vec<(PathBuf, String)> {
    parse_saved(&fs::read_to_string(SAVED).unwrap_or_default())
}

fn parse_saved(text: &str) -> Vec<(PathBuf, String)> {
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(p, v)| (PathBuf::from(p), v.to_owned()))
        .collect()
}

fn write_saved(entries: &[(PathBuf, String)]) -> std::io::Result<()> {
    let path = Path::new(SAVED);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let text: String = entries
        .iter()
        .map(|(p, v)| format!("{}\t{v}\n", p.display()))
        .collect();
    // Whole or not at all: a torn file would restore half.
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text)?;
    fs::rename(&tmp, path)
}

/// A warning for the user when a killed numatrace left tunables changed.
pub fn pending_warning() -> Option<String> {
    let entries = saved();
    (!entries.is_empty()).then(|| {
        let list: Vec<String> = entries
            .iter()
            .map(|(p, v)| format!("{} (was {v})", p.display()))
            .collect();
        format!(
            "a numatrace check was killed before restoring NUMA balancing tunables it had \
             changed: {}; `sudo numatrace check --restore-tunables` puts them back",
            list.join(", ")
        )
    })
}

/// [`SAVED`] holding `entries`, or gone when there are none.
fn sync_saved(entries: &[(PathBuf, String)]) -> std::io::Result<()> {
    if entries.is_empty() {
        match fs::remove_file(SAVED) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    } else {
        write_saved(entries)
    }
}

/// Restores every value in [`SAVED`] and removes it; one line per tunable saying what happened.
/// Nothing saved: an empty list.
pub fn restore_saved() -> std::io::Result<Vec<String>> {
    mount_debugfs();
    let entries = saved();
    let mut notes = Vec::new();
    let mut failed = Vec::new();
    for (path, old) in entries {
        match fs::write(&path, &old) {
            Ok(()) => notes.push(format!("{} = {old} (restored)", path.display())),
            Err(e) => {
                notes.push(format!("{}: could not restore {old}: {e}", path.display()));
                failed.push((path, old));
            }
        }
    }
    sync_saved(&failed)?;
    Ok(notes)
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
        // Values a killed numatrace left changed: the originals are those it saved.
        let mut on_disk = saved();
        for (name, value) in values {
            let Some(path) = tunable_path(name) else {
                notes.push(format!("{name}: not on this kernel"));
                continue;
            };
            let prior = on_disk
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, v)| v.clone());
            let fresh = prior.is_none();
            let old = match prior {
                Some(v) => v,
                None => match fs::read_to_string(&path) {
                    Ok(s) => s.trim().to_owned(),
                    Err(e) => {
                        notes.push(format!("{name}: unreadable ({e})"));
                        continue;
                    }
                },
            };
            if fresh {
                on_disk.push((path.clone(), old.clone()));
                if let Err(e) = write_saved(&on_disk) {
                    // Without the record a SIGKILL could not be undone: do not change it.
                    notes.push(format!(
                        "{name}: left at {old} (cannot save it to {SAVED}: {e})"
                    ));
                    on_disk.pop();
                    continue;
                }
            }
            match fs::write(&path, value) {
                Ok(()) => {
                    guard.saved.push((path, old.clone()));
                    notes.push(format!("{name}={value} (was {old})"));
                }
                Err(e) => {
                    notes.push(format!("{name}: left at {old} ({e})"));
                    // Unchanged: nothing to restore (a killed run's record stays).
                    if fresh {
                        on_disk.pop();
                        let _ = sync_saved(&on_disk);
                    }
                }
            }
        }
        (guard, notes)
    }
}

impl Drop for Tunables {
    fn drop(&mut self) {
        if self.saved.is_empty() {
            return;
        }
        let mut restored = Vec::new();
        for (path, old) in self.saved.drain(..).rev() {
            match fs::write(&path, &old) {
                Ok(()) => restored.push(path),
                Err(e) => tracing::error!("could not restore {} to {old}: {e}", path.display()),
            }
        }
        // Only what this guard restored leaves the record: other entries (a killed run's, or
        // another instance's) and failed restores stay for `check --restore-tunables`.
        let left: Vec<(PathBuf, String)> = saved()
            .into_iter()
            .filter(|(p, _)| !restored.contains(p))
            .collect();
        if let Err(e) = sync_saved(&left) {
            tracing::error!("updating {SAVED}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_values_round_trip_through_their_text() {
        let entries = vec![
            (
                PathBuf::from("/sys/kernel/debug/sched/numa_balancing/scan_delay_ms"),
                "1000".to_owned(),
            ),
            (
                PathBuf::from("/proc/sys/kernel/numa_balancing_scan_size_mb"),
                "256".to_owned(),
            ),
        ];
        let text: String = entries
            .iter()
            .map(|(p, v)| format!("{}\t{v}\n", p.display()))
            .collect();
        assert_eq!(parse_saved(&text), entries);
        assert!(parse_saved("garbage without a tab\n").is_empty());
    }
}
