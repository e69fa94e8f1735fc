//! Reading a kernel filesystem that is not mounted (debugfs for the scan tunables, securityfs
//! for the lockdown state; bpffs for the benchmark's shared maps) without mounting it for anyone
//! else — what perf does for tracefs, but private and undone.
//!
//! A short-lived thread gets a mount namespace of its own: `unshare(CLONE_NEWNS)` is allowed in
//! one thread of a multi-threaded process (it implies `CLONE_FS`, which copies only that
//! thread's root and working directory; it needs CAP_SYS_ADMIN), so the process's other
//! threads, and every other process, keep the host's mounts. The thread first makes every mount
//! of its copy private (`MS_REC | MS_PRIVATE` on `/`): on a systemd host `/` is shared, and a
//! mount under it would otherwise propagate back to the host. It then mounts the filesystem on
//! its usual directory (`/sys/kernel/debug`, `/sys/kernel/security`) *in that namespace* —
//! after checking that the directory is sysfs's own (not a symlink, nothing mounted over it),
//! so nothing on disk is created, followed or covered — reads, unmounts, and ends; the
//! namespace ends with it. `mount -t debugfs` on the host is never needed.
//!
//! debugfs and securityfs have one superblock per kernel: mounting them again anywhere is what
//! `mount -t debugfs none /sys/kernel/debug` does, with no options (none that could change a
//! mount elsewhere: no `ro`, no `mode=`). bpffs is a new instance at each mount: one mounted
//! over `/sys/fs/bpf` in the private namespace (`PrivateNs::mount_private_bpffs`) holds what is
//! pinned in it for no one else, and goes with it.

use std::{ffi::CString, os::unix::ffi::OsStrExt as _, path::Path};

/// A filesystem numatrace may mount privately, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fs {
    Debugfs,
    Securityfs,
    /// For the benchmark's maps shared between copies of an object (pinned while they load).
    Bpffs,
}

impl Fs {
    pub fn name(self) -> &'static str {
        match self {
            Self::Debugfs => "debugfs",
            Self::Securityfs => "securityfs",
            Self::Bpffs => "bpf",
        }
    }

    pub fn dir(self) -> &'static str {
        match self {
            Self::Debugfs => "/sys/kernel/debug",
            Self::Securityfs => "/sys/kernel/security",
            Self::Bpffs => "/sys/fs/bpf",
        }
    }

    fn config(self) -> &'static str {
        match self {
            Self::Debugfs => "CONFIG_DEBUG_FS off, or debugfs=off on the kernel command line",
            Self::Securityfs => "CONFIG_SECURITYFS off",
            Self::Bpffs => "CONFIG_BPF_SYSCALL off",
        }
    }
}

/// Whether `fs` is mounted at its usual directory in this thread's mount namespace.
pub fn mounted(fs: Fs) -> bool {
    mounted_in(
        &std::fs::read_to_string("/proc/thread-self/mounts").unwrap_or_default(),
        fs,
    )
}

/// Whether a mount table (`/proc/…/mounts`) has `fs` at its usual directory.
pub fn mounted_in(table: &str, fs: Fs) -> bool {
    table.lines().any(|l| {
        let mut w = l.split_whitespace();
        let (_, at, kind) = (w.next(), w.next(), w.next());
        at == Some(fs.dir()) && kind == Some(fs.name())
    })
}

/// Whether the running kernel has `fs` (`/proc/filesystems`); None: unknown.
fn in_kernel(fs: Fs) -> Option<bool> {
    let t = std::fs::read_to_string("/proc/filesystems").ok()?;
    Some(
        t.lines()
            .any(|l| l.split_whitespace().last() == Some(fs.name())),
    )
}

/// sysfs's magic (`statfs.f_type`).
const SYSFS_MAGIC: i64 = 0x6265_6572;
/// bpffs's.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// The thread's own mount namespace, with what it has mounted (unmounted again on drop).
pub struct PrivateNs {
    mounted: std::cell::RefCell<Vec<CString>>,
}

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

impl PrivateNs {
    /// Mounts `fs` at its directory in this namespace (nothing to do if it is there already).
    pub fn mount(&self, fs: Fs) -> Result<(), String> {
        if mounted(fs) {
            return Ok(());
        }
        self.mount_over(fs, &[SYSFS_MAGIC])
    }

    /// Mounts a new bpffs instance on its directory in this namespace, over the one mounted
    /// there if any: each bpffs mount is an instance of its own, so what is pinned in this one
    /// is seen by no one outside the namespace, and goes with it (a killed process leaves
    /// nothing pinned).
    pub fn mount_private_bpffs(&self) -> Result<(), String> {
        self.mount_over(Fs::Bpffs, &[SYSFS_MAGIC, BPF_FS_MAGIC])
    }

    /// Mounts `fs` at its directory, which must be a directory of a filesystem in `over`
    /// (sysfs's own: nothing mounted there; or one that may be covered).
    fn mount_over(&self, fs: Fs, over: &[i64]) -> Result<(), String> {
        if in_kernel(fs) == Some(false) {
            return Err(format!(
                "this kernel has no {} ({})",
                fs.name(),
                fs.config()
            ));
        }
        let dir = Path::new(fs.dir());
        // sysfs's own directory, nothing over it (or only what may be covered), not a
        // symlink: the mount covers nothing of anyone's outside this namespace, and follows
        // nothing.
        let meta = std::fs::symlink_metadata(dir)
            .map_err(|e| format!("{}: {e} ({})", fs.dir(), fs.config()))?;
        if !meta.is_dir() {
            return Err(format!("{} is not a directory", fs.dir()));
        }
        let target = CString::new(dir.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: statfs is plain old data; a valid NUL-terminated path and buffer.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statfs(target.as_ptr(), &mut st) } != 0 {
            return Err(os_err(&format!("statfs {}", fs.dir())));
        }
        #[allow(clippy::unnecessary_cast)]
        if !over.contains(&(st.f_type as i64)) {
            return Err(format!(
                "{} is not sysfs's own directory (something else is mounted there)",
                fs.dir()
            ));
        }
        let kind = CString::new(fs.name()).map_err(|e| e.to_string())?;
        // SAFETY: valid NUL-terminated strings; no data. No MS_RDONLY: on a superblock already
        // mounted elsewhere older kernels would apply it to that mount too.
        let rc = unsafe {
            libc::mount(
                kind.as_ptr(),
                target.as_ptr(),
                kind.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENODEV) => format!(
                    "mount -t {} refused: {e} (this kernel has no {}: {})",
                    fs.name(),
                    fs.name(),
                    fs.config()
                ),
                Some(libc::EPERM) | Some(libc::EACCES) => format!(
                    "mount -t {} refused: {e} (needs CAP_SYS_ADMIN in the initial user \
                     namespace{})",
                    fs.name(),
                    if fs == Fs::Debugfs {
                        "; or debugfs=no-mount / CONFIG_DEBUG_FS_DISALLOW_MOUNT forbids mounting \
                         it"
                    } else {
                        ""
                    }
                ),
                _ => format!("mount -t {} {}: {e}", fs.name(), fs.dir()),
            });
        }
        self.mounted.borrow_mut().push(target);
        Ok(())
    }
}

impl Drop for PrivateNs {
    fn drop(&mut self) {
        for t in self.mounted.borrow().iter().rev() {
            // SAFETY: a valid NUL-terminated path this namespace mounted. The namespace goes
            // away with the thread anyway; this only makes it prompt.
            unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// Runs `f` in a new thread with a private mount namespace of its own (see the module's
/// documentation); the namespace, and whatever `f` mounted in it, ends with the thread. Err:
/// why no such namespace could be made (then `f` did not run).
pub fn in_private_namespace<T: Send>(f: impl FnOnce(&PrivateNs) -> T + Send) -> Result<T, String> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("numatrace-mntns".into())
            .spawn_scoped(s, move || {
                // SAFETY: unshare affects only this thread (CLONE_NEWNS implies CLONE_FS, which
                // is unshared from the other threads: they keep the host's namespace).
                if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
                    let e = std::io::Error::last_os_error();
                    return Err(format!(
                        "unshare(CLONE_NEWNS) refused: {e}{}",
                        if matches!(e.raw_os_error(), Some(libc::EPERM)) {
                            " (a private mount needs CAP_SYS_ADMIN)"
                        } else {
                            ""
                        }
                    ));
                }
                // SAFETY: valid NUL-terminated path; no source, type or data for a
                // propagation change. Without it nothing is mounted.
                let rc = unsafe {
                    libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    )
                };
                if rc != 0 {
                    return Err(os_err("making the private namespace's mounts private"));
                }
                let ns = PrivateNs {
                    mounted: std::cell::RefCell::new(Vec::new()),
                };
                Ok(f(&ns))
            })
            .map_err(|e| format!("starting a thread for a private mount: {e}"))?
            .join()
            .map_err(|_| "the private-mount thread panicked".to_owned())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_mount_in_a_table() {
        let t = "sysfs /sys sysfs rw 0 0\ndebugfs /sys/kernel/debug debugfs rw 0 0\n";
        assert!(mounted_in(t, Fs::Debugfs));
        assert!(!mounted_in(t, Fs::Securityfs));
        assert!(!mounted_in(
            "none /sys/kernel/debug tmpfs rw 0 0\n",
            Fs::Debugfs
        ));
    }

    /// As root: the mount is seen in the thread that made it, never in the process's (host's)
    /// namespace, and is gone once the thread has ended.
    #[test]
    fn a_private_mount_stays_in_its_thread() {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIP a_private_mount_stays_in_its_thread: needs root (CAP_SYS_ADMIN)");
            return;
        }
        let host = || std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let before = host();
        let r = in_private_namespace(|ns| {
            // securityfs is rarely needed by anything else on a test machine; either it was
            // mounted (then nothing is done) or it is now, here only.
            let m = ns.mount(Fs::Securityfs);
            (m, mounted(Fs::Securityfs), host())
        });
        let Ok((m, seen, during)) = r else {
            eprintln!("SKIP a_private_mount_stays_in_its_thread: {r:?}");
            return;
        };
        if let Err(e) = m {
            eprintln!("SKIP a_private_mount_stays_in_its_thread: {e}");
            return;
        }
        assert!(seen, "not mounted in the private namespace");
        // The other threads' (the process's) namespace did not change meanwhile or after.
        let lines = |s: &str| s.lines().filter(|l| l.contains(" securityfs ")).count();
        assert_eq!(lines(&during), lines(&before), "{during}");
        assert_eq!(lines(&host()), lines(&before));
    }
}
