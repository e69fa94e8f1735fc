//! NUMA balancing scan tunables (debugfs `sched/numa_balancing/` since 5.13, sysctls before),
//! set for a reproducer and put back when the guard is dropped.
//!
//! One numatrace at a time changes them: [`Lock`] (`/run/numatrace/tunables.lock`, flock) is
//! held while any are changed. Before changing one, numatrace writes a record ([`SAVED`]) of
//! the original value, the value it sets, its pid and the boot id, so that a run killed
//! outright (SIGKILL, OOM: no destructor runs) can be undone by the next one — but only where
//! the tunable still holds what numatrace set: a value someone changed since is theirs, kept
//! and reported, never overwritten.

use std::{
    collections::BTreeMap,
    fs,
    io::Write as _,
    os::{fd::AsRawFd as _, unix::fs::OpenOptionsExt as _},
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, Ordering},
};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::private_mount::{self, Fs};

const DEBUGFS_DIR: &str = "/sys/kernel/debug/sched/numa_balancing";
const SYSCTL_PREFIX: &str = "/proc/sys/kernel/numa_balancing_";

/// The tunables numatrace may change (and so the only files a record may name).
pub const KNOWN: [&str; 4] = [
    "scan_delay_ms",
    "scan_period_min_ms",
    "scan_period_max_ms",
    "scan_size_mb",
];

/// Where the tunable `name` (e.g. `scan_period_min_ms`) lives on this kernel.
pub fn tunable_path(name: &str) -> Option<PathBuf> {
    let debugfs = Path::new(DEBUGFS_DIR).join(name);
    let sysctl = PathBuf::from(format!("{SYSCTL_PREFIX}{name}"));
    [debugfs, sysctl].into_iter().find(|p| p.exists())
}

/// Whether `path` is one of the [`KNOWN`] tunables' files (a record naming anything else is
/// not acted on).
pub fn is_known_path(path: &Path) -> bool {
    KNOWN.iter().any(|name| {
        path == Path::new(DEBUGFS_DIR).join(name)
            || path == Path::new(&format!("{SYSCTL_PREFIX}{name}"))
    })
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

/// Where a capture's scan tunables were read (`State::tunables_source`).
pub const FROM_DEBUGFS: &str = "debugfs at /sys/kernel/debug";
pub const FROM_PRIVATE_DEBUGFS: &str =
    "debugfs, mounted privately for the read: it was not mounted at /sys/kernel/debug";
pub const FROM_SYSCTLS: &str = "sysctls kernel.numa_balancing_scan_* (before 5.13)";
/// Nothing could be read (the values say why).
pub const FROM_NOWHERE: &str = "none";

/// Longest value kept from a tunable's file (they are a few digits).
const TUNABLE_BYTES: u64 = 256;

/// The scan tunables as a capture keeps them: every file of debugfs's `sched/numa_balancing/`
/// (the sysctls before 5.13), or exactly why they cannot be read; and where they were read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanTunables {
    pub values: Result<BTreeMap<String, String>, String>,
    pub source: String,
}

/// Reads the scan tunables for a capture. Where debugfs is not mounted, it is mounted for the
/// read in a private mount namespace ([`private_mount`]), which the host never sees; where a
/// read is refused, the kernel's lockdown state says why (securityfs, mounted the same way if
/// need be).
pub fn read_for_capture() -> ScanTunables {
    if Path::new(&format!("{SYSCTL_PREFIX}scan_delay_ms")).exists() {
        let values = KNOWN
            .iter()
            .filter_map(|n| {
                let v = read_small(Path::new(&format!("{SYSCTL_PREFIX}{n}"))).ok()?;
                Some(((*n).to_owned(), v))
            })
            .collect();
        return ScanTunables {
            values: Ok(values),
            source: FROM_SYSCTLS.into(),
        };
    }
    if private_mount::mounted(Fs::Debugfs) {
        return ScanTunables {
            values: read_debugfs_dir(Path::new(DEBUGFS_DIR), None),
            source: FROM_DEBUGFS.into(),
        };
    }
    let read = private_mount::in_private_namespace(|ns| {
        ns.mount(Fs::Debugfs)?;
        Ok(read_debugfs_dir(Path::new(DEBUGFS_DIR), Some(ns)))
    });
    match read.and_then(|r| r) {
        Ok(values) => ScanTunables {
            values,
            source: FROM_PRIVATE_DEBUGFS.into(),
        },
        Err(why) => ScanTunables {
            values: Err(format!(
                "debugfs is not mounted at /sys/kernel/debug, and mounting it privately for the \
                 read failed: {why}"
            )),
            source: FROM_NOWHERE.into(),
        },
    }
}

/// A small kernel file, trimmed (never through a symlink).
fn read_small(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut buf = Vec::new();
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?
        .take(TUNABLE_BYTES)
        .read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).trim().to_owned())
}

/// Every file of `dir` (`sched/numa_balancing/` of a mounted debugfs) → its value; refused
/// reads explained by the lockdown state (read in `ns` when one is given).
fn read_debugfs_dir(
    dir: &Path,
    ns: Option<&private_mount::PrivateNs>,
) -> Result<BTreeMap<String, String>, String> {
    let entries = fs::read_dir(dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "no sched/numa_balancing in debugfs (CONFIG_NUMA_BALANCING off)".to_owned()
        } else {
            format!("{}: {e}", dir.display())
        }
    })?;
    let mut out = BTreeMap::new();
    let mut refused = None;
    for e in entries.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        match read_small(&e.path()) {
            Ok(v) => {
                out.insert(e.file_name().to_string_lossy().into_owned(), v);
            }
            Err(err) => refused = Some((e.path(), err)),
        }
    }
    match refused {
        Some((path, err)) if out.is_empty() => Err(refused_why(&path, &err, ns)),
        _ => Ok(out),
    }
}

/// Why debugfs refused to read `path`: under lockdown (integrity or confidentiality) it
/// refuses every file that is writable, which the tunables are.
fn refused_why(path: &Path, err: &std::io::Error, ns: Option<&private_mount::PrivateNs>) -> String {
    let head = format!("{}: {err}", path.display());
    if err.raw_os_error() != Some(libc::EPERM) {
        return head;
    }
    match lockdown(ns) {
        Ok(mode) if mode != "none" => format!(
            "{head}: the kernel is locked down ({mode}, /sys/kernel/security/lockdown), and \
             under lockdown debugfs refuses to read its writable files, these tunables among \
             them (kernel_lockdown(7)); no mount can change that"
        ),
        Ok(_) => format!("{head} (the kernel is not locked down)"),
        Err(why) => format!(
            "{head} (debugfs refuses such reads under kernel lockdown, kernel_lockdown(7); the \
             lockdown state could not be read: {why})"
        ),
    }
}

const LOCKDOWN: &str = "/sys/kernel/security/lockdown";

/// The kernel's lockdown mode (`none`, `integrity`, `confidentiality`), from securityfs —
/// mounted privately for the read when it is not mounted.
fn lockdown(ns: Option<&private_mount::PrivateNs>) -> Result<String, String> {
    let read = || -> Result<String, String> {
        let text = read_small(Path::new(LOCKDOWN)).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("no {LOCKDOWN} (no lockdown LSM in this kernel)")
            } else {
                format!("{LOCKDOWN}: {e}")
            }
        })?;
        lockdown_mode(&text).ok_or_else(|| format!("{LOCKDOWN} says {text:?}"))
    };
    if private_mount::mounted(Fs::Securityfs) {
        return read();
    }
    match ns {
        Some(ns) => ns.mount(Fs::Securityfs).and_then(|()| read()),
        None => {
            private_mount::in_private_namespace(|ns| ns.mount(Fs::Securityfs).and_then(|()| read()))
                .and_then(|r| r)
        }
    }
}

/// The selected mode of a `lockdown` file (`none [integrity] confidentiality`).
pub fn lockdown_mode(text: &str) -> Option<String> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .map(str::to_owned)
}

/// The record of tunables numatrace has changed. Under /run: gone at reboot, as the changed
/// values are.
pub const SAVED: &str = "/run/numatrace/tunables.saved";
const LOCK: &str = "/run/numatrace/tunables.lock";

/// One changed tunable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub path: PathBuf,
    /// The value before numatrace changed it.
    pub original: String,
    /// The value numatrace set.
    pub set: String,
    /// The numatrace that set it, and the boot it was set in.
    pub pid: u32,
    pub boot_id: String,
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn read_value(path: &Path) -> std::io::Result<String> {
    fs::read_to_string(path).map(|s| s.trim().to_owned())
}

/// The record at `file` ([`SAVED`] outside tests): entries in the order they were made.
struct Store {
    file: PathBuf,
}

impl Store {
    fn real() -> Self {
        Self {
            file: PathBuf::from(SAVED),
        }
    }

    fn load(&self) -> Vec<Entry> {
        fs::read(&self.file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn save(&self, entries: &[Entry]) -> Result<()> {
        if entries.is_empty() {
            return match fs::remove_file(&self.file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            };
        }
        if let Some(dir) = self.file.parent() {
            crate::safe_fs::private_dir(dir)?;
        }
        // Whole or not at all: a torn record would restore half.
        let text = serde_json::to_vec_pretty(entries)?;
        // Root's, even under sudo: the user must not choose what root writes back.
        crate::safe_fs::write_state(&self.file, &text)?;
        Ok(())
    }
}

static HELD: AtomicBool = AtomicBool::new(false);

/// The right to change the tunables, held by one numatrace at a time (flock on
/// `/run/numatrace/tunables.lock`, released when the process ends however it ends).
pub struct Lock {
    _file: fs::File,
}

/// Why [`Lock::acquire`] did not take the lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another numatrace (pid {0}) is changing the NUMA balancing tunables; run one check at a \
         time"
    )]
    Busy(String),
    /// No lock can be had here (no writable /run, not root): nothing may change the tunables.
    #[error("cannot lock {LOCK}: {0:#}")]
    Unavailable(anyhow::Error),
}

impl Lock {
    /// Takes the lock, or says which numatrace holds it.
    pub fn acquire() -> Result<Self, LockError> {
        for _ in 0..3 {
            if let Some(lock) = Self::try_once()? {
                return Ok(lock);
            }
        }
        Err(LockError::Unavailable(anyhow::anyhow!(
            "{LOCK} keeps being replaced"
        )))
    }

    /// None: the file locked was replaced at its path meanwhile (try again).
    fn try_once() -> Result<Option<Self>, LockError> {
        use std::os::unix::fs::MetadataExt as _;
        let unavailable = LockError::Unavailable;
        crate::safe_fs::run_dir().map_err(|e| unavailable(e.into()))?;
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(crate::safe_fs::FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(LOCK)
            .with_context(|| format!("opening {LOCK}"))
            .map_err(unavailable)?;
        // SAFETY: a valid open descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let holder = fs::read_to_string(LOCK).unwrap_or_default();
            return Err(LockError::Busy(
                holder
                    .trim()
                    .parse::<u32>()
                    .map_or("?".into(), |p| p.to_string()),
            ));
        }
        // A lock on a file no longer at the path (removed and made anew meanwhile) excludes
        // nobody.
        let held = file.metadata().map_err(|e| unavailable(e.into()))?;
        match fs::symlink_metadata(LOCK) {
            Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {}
            _ => return Ok(None),
        }
        let wrote = file
            .set_len(0)
            .and_then(|()| write!(file, "{}", std::process::id()));
        wrote.map_err(|e| unavailable(e.into()))?;
        HELD.store(true, Ordering::SeqCst);
        Ok(Some(Self { _file: file }))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        HELD.store(false, Ordering::SeqCst);
    }
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Entries left by numatrace runs that are gone (killed before they restored them).
fn stale(entries: &[Entry]) -> Vec<&Entry> {
    let me = std::process::id();
    let boot = boot_id();
    entries
        .iter()
        .filter(|e| e.pid != me && !(pid_alive(e.pid) && e.boot_id == boot))
        .collect()
}

/// A warning for the user when a killed numatrace left tunables changed.
pub fn pending_warning() -> Option<String> {
    let entries = Store::real().load();
    let left = stale(&entries);
    (!left.is_empty()).then(|| {
        let list: Vec<String> = left
            .iter()
            .map(|e| {
                format!(
                    "{} (set to {} by pid {}, was {})",
                    crate::text_escape::Escaped(&e.path.display().to_string()),
                    crate::text_escape::Escaped(&e.set),
                    e.pid,
                    crate::text_escape::Escaped(&e.original)
                )
            })
            .collect();
        format!(
            "a numatrace check was killed before restoring NUMA balancing tunables it had \
             changed: {}; `sudo numatrace check --restore-tunables` puts back those still \
             at numatrace's value",
            list.join(", ")
        )
    })
}

/// What [`restore_saved`] did.
#[derive(Debug, Default)]
pub struct Restored {
    /// One line per entry.
    pub notes: Vec<String>,
    /// Entries left in the record (changed since, or failed).
    pub kept: usize,
}

/// Restores what killed runs left changed — each tunable only while it still holds the value
/// numatrace set; others are kept in the record and reported. Takes the [`Lock`].
pub fn restore_saved() -> Result<Restored> {
    let _lock = Lock::acquire().map_err(anyhow::Error::from)?;
    mount_debugfs();
    restore_in(&Store::real(), is_known_path)
}

fn restore_in(store: &Store, known: impl Fn(&Path) -> bool) -> Result<Restored> {
    let boot = boot_id();
    let mut out = Restored::default();
    let mut keep = Vec::new();
    for e in store.load() {
        let path = e.path.display();
        if !known(&e.path) {
            out.notes.push(format!(
                "{}: not a NUMA balancing tunable; ignored and dropped from the record",
                crate::text_escape::Escaped(&path.to_string())
            ));
            continue;
        }
        if e.boot_id != boot {
            out.notes.push(format!(
                "{path}: set in an earlier boot (the kernel has reset it since); dropped"
            ));
            continue;
        }
        match read_value(&e.path) {
            Ok(now) if now == e.set => match fs::write(&e.path, &e.original) {
                Ok(()) => out
                    .notes
                    .push(format!("{path} = {} (restored)", e.original)),
                Err(err) => {
                    out.notes
                        .push(format!("{path}: could not restore {}: {err}", e.original));
                    keep.push(e);
                }
            },
            // Never set (the run was killed between saving the record and writing this
            // one), or put back since: nothing to restore.
            Ok(now) if now == e.original => out.notes.push(format!(
                "{path} = {} already (its original value): nothing to restore; dropped",
                e.original
            )),
            Ok(now) => {
                out.notes.push(format!(
                    "{path} = {} changed since numatrace set it to {} (was {}): left as is \
                     and kept in {}",
                    crate::text_escape::Escaped(&now),
                    e.set,
                    e.original,
                    store.file.display()
                ));
                keep.push(e);
            }
            Err(err) => {
                out.notes.push(format!("{path}: unreadable ({err}); kept"));
                keep.push(e);
            }
        }
    }
    out.kept = keep.len();
    store.save(&keep)?;
    Ok(out)
}

/// Values set by [`Tunables::set`], restored on drop.
#[derive(Default)]
pub struct Tunables {
    mine: Vec<Entry>,
    store: Option<Store>,
    /// Taken by `set` when the caller does not hold it already (check holds it for its run).
    _lock: Option<Lock>,
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
        let lock = if HELD.load(Ordering::SeqCst) {
            None
        } else {
            match Lock::acquire() {
                Ok(l) => Some(l),
                Err(e) => {
                    return (
                        Self::default(),
                        vec![format!("tunables left as they are: {e:#}")],
                    );
                }
            }
        };
        mount_debugfs();
        let mut named = Vec::new();
        let mut notes = Vec::new();
        for (name, value) in values {
            match tunable_path(name) {
                Some(p) => named.push((p, *name, *value)),
                None => notes.push(format!("{name}: not on this kernel")),
            }
        }
        let (mut guard, set_notes) = Self::set_in(Store::real(), &named);
        guard._lock = lock;
        notes.extend(set_notes);
        (guard, notes)
    }

    fn set_in(store: Store, values: &[(PathBuf, &str, &str)]) -> (Self, Vec<String>) {
        let me = std::process::id();
        let boot = boot_id();
        let mut notes = Vec::new();
        let mut mine = Vec::new();
        let mut record = store.load();
        for (path, name, value) in values {
            let now = match read_value(path) {
                Ok(v) => v,
                Err(e) => {
                    notes.push(format!("{name}: unreadable ({e})"));
                    continue;
                }
            };
            // A killed run's change still in place: its original is the real one, and this
            // run's entry takes its place. Changed since: the current value is someone's
            // choice, and the killed run's entry stays for --restore-tunables to report.
            let inherited = record
                .iter()
                .position(|e| e.path == *path && e.pid != me && e.set == now && e.boot_id == boot);
            // Taken out only while this run's own entry is in place: on any failure below it
            // goes back, so a killed run's record is never lost.
            let taken = inherited.map(|i| (i, record.remove(i)));
            let original = taken
                .as_ref()
                .map_or_else(|| now.clone(), |(_, e)| e.original.clone());
            let put_back = |record: &mut Vec<Entry>| {
                if let Some((i, e)) = &taken {
                    record.insert((*i).min(record.len()), e.clone());
                }
            };
            let entry = Entry {
                path: path.clone(),
                original: original.clone(),
                set: (*value).to_owned(),
                pid: me,
                boot_id: boot.clone(),
            };
            record.push(entry.clone());
            if let Err(e) = store.save(&record) {
                // Without the record a SIGKILL could not be undone: do not change it.
                notes.push(format!(
                    "{name}: left at {now} (cannot save it to {}: {e:#})",
                    store.file.display()
                ));
                record.pop();
                put_back(&mut record);
                continue;
            }
            match fs::write(path, value) {
                Ok(()) => {
                    notes.push(format!("{name}={value} (was {original})"));
                    mine.push(entry);
                }
                Err(e) => {
                    notes.push(format!("{name}: left at {now} ({e})"));
                    record.pop();
                    put_back(&mut record);
                    let _ = store.save(&record);
                }
            }
        }
        (
            Self {
                mine,
                store: Some(store),
                _lock: None,
            },
            notes,
        )
    }
}

impl Drop for Tunables {
    fn drop(&mut self) {
        let Some(store) = &self.store else { return };
        if self.mine.is_empty() {
            return;
        }
        let mut failed = Vec::new();
        for e in self.mine.iter().rev() {
            match read_value(&e.path) {
                Ok(now) if now == e.set => {
                    if let Err(err) = fs::write(&e.path, &e.original) {
                        tracing::error!(
                            "could not restore {} to {}: {err}",
                            e.path.display(),
                            e.original
                        );
                        failed.push(e);
                    }
                }
                Ok(now) => tracing::warn!(
                    "{} was changed to {} while numatrace had it at {}: left as is",
                    e.path.display(),
                    crate::text_escape::Escaped(&now),
                    e.set
                ),
                Err(err) => {
                    tracing::error!("{}: unreadable ({err})", e.path.display());
                    failed.push(e);
                }
            }
        }
        // Only this run's entries leave the record (a killed run's, and failed restores, stay
        // for `check --restore-tunables`).
        let left: Vec<Entry> = store
            .load()
            .into_iter()
            .filter(|e| !self.mine.contains(e) || failed.contains(&e))
            .collect();
        if let Err(e) = store.save(&left) {
            tracing::error!("updating {}: {e:#}", store.file.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Self {
            Self {
                dir: tempfile::tempdir().unwrap(),
            }
        }
        fn store(&self) -> Store {
            Store {
                file: self.dir.path().join("run").join("tunables.saved"),
            }
        }
        fn tunable(&self, name: &str, value: &str) -> PathBuf {
            let p = self.dir.path().join(name);
            fs::write(&p, format!("{value}\n")).unwrap();
            p
        }
    }

    fn value(p: &Path) -> String {
        read_value(p).unwrap()
    }

    #[test]
    fn reads_the_selected_lockdown_mode() {
        assert_eq!(
            lockdown_mode("none [integrity] confidentiality\n").as_deref(),
            Some("integrity")
        );
        assert_eq!(
            lockdown_mode("[none] integrity confidentiality").as_deref(),
            Some("none")
        );
        assert_eq!(lockdown_mode("garbage"), None);
    }

    #[test]
    fn a_refused_read_says_why() {
        let f = Fixture::new();
        let a = f.tunable("scan_delay_ms", "1000");
        let b = f.tunable("scan_size_mb", "256");
        let m = read_debugfs_dir(f.dir.path(), None).unwrap();
        assert_eq!(m["scan_delay_ms"], "1000");
        assert_eq!(m["scan_size_mb"], "256");
        // Never through a symlink.
        std::os::unix::fs::symlink(&a, f.dir.path().join("link")).unwrap();
        assert!(
            !read_debugfs_dir(f.dir.path(), None)
                .unwrap()
                .contains_key("link")
        );
        let why = read_debugfs_dir(&f.dir.path().join("none"), None).unwrap_err();
        assert!(why.contains("CONFIG_NUMA_BALANCING"), "{why}");
        let eperm = std::io::Error::from_raw_os_error(libc::EPERM);
        let why = refused_why(&b, &eperm, None);
        assert!(why.contains("Operation not permitted"), "{why}");
        assert!(why.contains("lockdown"), "{why}");
        let other = std::io::Error::from_raw_os_error(libc::EIO);
        assert!(!refused_why(&b, &other, None).contains("lockdown"));
    }

    /// On this machine: the values, or why not, and where from — never a silent nothing.
    #[test]
    fn reads_this_machines_tunables_or_says_why() {
        let t = read_for_capture();
        eprintln!("tunables from {}: {:?}", t.source, t.values);
        match &t.values {
            Ok(v) => {
                assert_ne!(t.source, FROM_NOWHERE);
                assert!(v.contains_key("scan_delay_ms"), "{v:?}");
            }
            Err(why) => assert!(!why.is_empty()),
        }
    }

    #[test]
    fn a_guard_restores_what_it_set_and_leaves_no_record() {
        let f = Fixture::new();
        let a = f.tunable("scan_delay_ms", "1000");
        let (guard, notes) = Tunables::set_in(f.store(), &[(a.clone(), "scan_delay_ms", "100")]);
        assert_eq!(notes, ["scan_delay_ms=100 (was 1000)"]);
        assert_eq!(value(&a), "100");
        let rec = f.store().load();
        assert_eq!(rec.len(), 1);
        assert_eq!(
            (rec[0].original.as_str(), rec[0].set.as_str()),
            ("1000", "100")
        );
        assert_eq!(rec[0].pid, std::process::id());
        drop(guard);
        assert_eq!(value(&a), "1000");
        assert!(!f.store().file.exists());
    }

    #[test]
    fn a_value_changed_under_a_running_guard_is_left_alone() {
        let f = Fixture::new();
        let a = f.tunable("scan_delay_ms", "1000");
        let (guard, _) = Tunables::set_in(f.store(), &[(a.clone(), "scan_delay_ms", "100")]);
        fs::write(&a, "555").unwrap();
        drop(guard);
        assert_eq!(value(&a), "555");
    }

    fn dead_entry(path: &Path, original: &str, set: &str) -> Entry {
        Entry {
            path: path.to_owned(),
            original: original.into(),
            set: set.into(),
            // Above pid_max: never alive.
            pid: 4_194_305,
            boot_id: boot_id(),
        }
    }

    #[test]
    fn a_dead_runs_record_is_restored_only_where_its_value_is_still_there() {
        let f = Fixture::new();
        let untouched = f.tunable("scan_delay_ms", "100");
        let changed = f.tunable("scan_size_mb", "777");
        // Killed after the record was saved, before this one was written.
        let never_set = f.tunable("scan_period_min_ms", "1000");
        let store = f.store();
        store
            .save(&[
                dead_entry(&untouched, "1000", "100"),
                dead_entry(&changed, "256", "16"),
                dead_entry(&never_set, "1000", "100"),
            ])
            .unwrap();
        assert_eq!(stale(&store.load()).len(), 3);
        let r = restore_in(&store, |_| true).unwrap();
        assert_eq!(value(&untouched), "1000");
        assert_eq!(value(&changed), "777", "someone's value was overwritten");
        assert_eq!(value(&never_set), "1000");
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("already (its original value)")),
            "{:?}",
            r.notes
        );
        assert_eq!(r.kept, 1);
        assert!(
            r.notes.iter().any(|n| n.contains("changed since")),
            "{:?}",
            r.notes
        );
        let left = store.load();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].path, changed);
    }

    #[test]
    fn a_record_naming_other_files_is_not_acted_on() {
        let f = Fixture::new();
        let victim = f.tunable("shadow", "secret");
        let store = f.store();
        store
            .save(&[dead_entry(&victim, "pwned", "secret")])
            .unwrap();
        let r = restore_in(&store, is_known_path).unwrap();
        assert_eq!(value(&victim), "secret");
        assert!(r.notes[0].contains("not a NUMA balancing tunable"));
        assert!(!store.file.exists());
        assert!(is_known_path(Path::new(
            "/sys/kernel/debug/sched/numa_balancing/scan_size_mb"
        )));
        assert!(is_known_path(Path::new(
            "/proc/sys/kernel/numa_balancing_scan_delay_ms"
        )));
        assert!(!is_known_path(Path::new("/proc/sys/kernel/numa_balancing")));
    }

    #[test]
    fn a_dead_runs_entry_survives_a_write_that_fails() {
        // Readable, constant, and refused for writing even to root (a 0444 sysctl): a killed
        // run's entry whose value still holds is inherited, then this run's write fails.
        let path = PathBuf::from("/proc/sys/kernel/osrelease");
        let now = read_value(&path).unwrap();
        let f = Fixture::new();
        let store = f.store();
        let dead = dead_entry(&path, "original", &now);
        store.save(std::slice::from_ref(&dead)).unwrap();
        let (guard, notes) = Tunables::set_in(f.store(), &[(path.clone(), "osrelease", "x")]);
        assert!(notes[0].contains("left at"), "{notes:?}");
        drop(guard);
        assert_eq!(read_value(&path).unwrap(), now);
        assert_eq!(store.load(), [dead], "the killed run's entry was lost");
    }

    #[test]
    fn a_new_run_inherits_a_dead_runs_original_only_while_its_value_holds() {
        let f = Fixture::new();
        let kept = f.tunable("scan_delay_ms", "100");
        let moved = f.tunable("scan_size_mb", "777");
        let store = f.store();
        store
            .save(&[
                dead_entry(&kept, "1000", "100"),
                dead_entry(&moved, "256", "16"),
            ])
            .unwrap();
        let (guard, _) = Tunables::set_in(
            f.store(),
            &[
                (kept.clone(), "scan_delay_ms", "50"),
                (moved.clone(), "scan_size_mb", "32"),
            ],
        );
        drop(guard);
        // The dead run's still-valid change is undone with it; the admin's 777 is back.
        assert_eq!(value(&kept), "1000");
        assert_eq!(value(&moved), "777");
        // The dead run's entry for the changed tunable stays, to be reported.
        let left = store.load();
        assert_eq!(left.len(), 1);
        assert_eq!((left[0].path.clone(), left[0].set.as_str()), (moved, "16"));
    }
}
