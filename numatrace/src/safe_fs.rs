//! Files numatrace writes as root: captures, reports, its state under `/run/numatrace`.
//!
//! numatrace runs as root in directories other users can write to, so every file it creates is
//! created exclusively (`O_CREAT|O_EXCL`: a symlink or file planted at the name makes the create
//! fail, it is never followed or truncated), mode 0600 (captures name every process on the
//! machine), and under sudo handed to the user who ran sudo. Replacing an existing file needs
//! the caller's `--force` and happens by renaming a file created exclusively beside it, which
//! replaces the directory entry itself, never what a symlink there points to.

use std::{
    fs::{File, OpenOptions},
    io,
    os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

use thiserror::Error;

/// Mode of every file numatrace creates.
pub const FILE_MODE: u32 = 0o600;

/// Where numatrace keeps state between runs (a tmpfs: gone at reboot, as the kernel state it
/// describes is).
pub const RUN_DIR: &str = "/run/numatrace";

#[derive(Debug, Error)]
pub enum SafeFsError {
    #[error("{0} already exists; pass --force to replace it")]
    Exists(PathBuf),
    #[error("{0} is a directory")]
    IsDir(PathBuf),
    // The cause is part of the message (not a `source`): one line wherever it is printed.
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: io::Error },
    #[error(
        "{path} is not a directory that only root can write to ({why}); remove it and try again"
    )]
    UnsafeDir { path: PathBuf, why: String },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SafeFsError + '_ {
    move |err| SafeFsError::Io {
        path: path.to_owned(),
        err,
    }
}

/// The user who ran `sudo numatrace …` (SUDO_UID / SUDO_GID), when numatrace runs as root on
/// their behalf: files it writes for them become theirs.
pub fn invoker() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let num = |k: &str| std::env::var(k).ok()?.trim().parse::<u32>().ok();
    let (uid, gid) = (num("SUDO_UID")?, num("SUDO_GID")?);
    (uid != 0).then_some((uid, gid))
}

/// Gives `file` to the invoking user under sudo (no-op otherwise).
fn hand_over(file: &File, path: &Path) -> Result<(), SafeFsError> {
    use std::os::fd::AsRawFd as _;
    if let Some((uid, gid)) = invoker() {
        // SAFETY: a valid open descriptor; fchown changes only that inode.
        if unsafe { libc::fchown(file.as_raw_fd(), uid, gid) } != 0 {
            return Err(io_err(path)(io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn open_exclusive(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        // create_new already refuses a symlink at the name; this also refuses to open through
        // one should the flags ever change.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates `path` for writing: exclusively, 0600, the invoker's under sudo. An existing entry
/// (file or symlink) is refused unless `force`, which removes the entry itself first.
pub fn create_new(path: &Path, force: bool) -> Result<File, SafeFsError> {
    let file = match open_exclusive(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(path).map_err(io_err(path))?;
            if meta.is_dir() {
                return Err(SafeFsError::IsDir(path.to_owned()));
            }
            if !force {
                return Err(SafeFsError::Exists(path.to_owned()));
            }
            // unlink removes a symlink, never its target. A name re-planted in between makes
            // the exclusive create below fail: refused, not followed.
            std::fs::remove_file(path).map_err(io_err(path))?;
            open_exclusive(path).map_err(io_err(path))?
        }
        r => r.map_err(io_err(path))?,
    };
    hand_over(&file, path)?;
    Ok(file)
}

/// Creates the first free name of `base`, `base-2`, `base-3`, … (before the extension):
/// default names that two runs started in the same second cannot share.
pub fn create_unique(base: &Path) -> Result<(PathBuf, File), SafeFsError> {
    let stem = base.file_stem().unwrap_or_default().to_string_lossy();
    let ext = base
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    for n in 1..1000 {
        let path = if n == 1 {
            base.to_owned()
        } else {
            base.with_file_name(format!("{stem}-{n}{ext}"))
        };
        match open_exclusive(&path) {
            Ok(file) => {
                hand_over(&file, &path)?;
                return Ok((path, file));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
    Err(SafeFsError::Exists(base.to_owned()))
}

/// Refuses before any work is done when `dest` exists and `force` is not given (a report
/// written at the end of a ten-minute window should not fail only then).
pub fn check_dest(dest: &Path, force: bool) -> Result<(), SafeFsError> {
    match std::fs::symlink_metadata(dest) {
        Ok(m) if m.is_dir() => Err(SafeFsError::IsDir(dest.to_owned())),
        Ok(_) if !force => Err(SafeFsError::Exists(dest.to_owned())),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(dest)(e)),
    }
}

/// A file written whole or not at all: a temporary created exclusively (0600) in the
/// destination's directory, renamed over it by [`Self::commit`] — without replacing an existing
/// entry unless `force`. Dropped uncommitted, the temporary is removed.
pub struct AtomicFile {
    tmp: tempfile::NamedTempFile,
    dest: PathBuf,
    force: bool,
}

impl AtomicFile {
    /// For the user: under sudo the file becomes theirs.
    pub fn create(dest: &Path, force: bool) -> Result<Self, SafeFsError> {
        Self::create_as(dest, force, true)
    }

    /// `for_invoker` false: root's own state, never handed to the sudo user (who could
    /// otherwise rewrite what root later acts on).
    fn create_as(dest: &Path, force: bool, for_invoker: bool) -> Result<Self, SafeFsError> {
        check_dest(dest, force)?;
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = dest.file_name().unwrap_or_default().to_string_lossy();
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .permissions(std::fs::Permissions::from_mode(FILE_MODE))
            .tempfile_in(dir)
            .map_err(io_err(dest))?;
        if for_invoker {
            hand_over(tmp.as_file(), dest)?;
        }
        Ok(Self {
            tmp,
            dest: dest.to_owned(),
            force,
        })
    }

    pub fn file(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    pub fn commit(self) -> Result<(), SafeFsError> {
        let dest = self.dest;
        self.tmp.as_file().sync_all().map_err(io_err(&dest))?;
        let persisted = if self.force {
            self.tmp.persist(&dest)
        } else {
            // renameat2(RENAME_NOREPLACE), or link + unlink where the file system lacks it.
            self.tmp.persist_noclobber(&dest)
        };
        match persisted {
            Ok(_) => Ok(()),
            Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => {
                Err(SafeFsError::Exists(dest))
            }
            Err(e) => Err(io_err(&dest)(e.error)),
        }
    }
}

impl io::Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file().write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file().flush()
    }
}

/// Writes `bytes` to `dest` whole (see [`AtomicFile`]).
pub fn write_atomic(dest: &Path, bytes: &[u8], force: bool) -> Result<(), SafeFsError> {
    write_whole(AtomicFile::create(dest, force)?, dest, bytes)
}

fn write_whole(mut f: AtomicFile, dest: &Path, bytes: &[u8]) -> Result<(), SafeFsError> {
    use std::io::Write as _;
    f.write_all(bytes).map_err(io_err(dest))?;
    f.commit()
}

/// Writes root's own state file `dest` whole, replacing it, 0600 and root's even under sudo.
pub fn write_state(dest: &Path, bytes: &[u8]) -> Result<(), SafeFsError> {
    write_whole(AtomicFile::create_as(dest, true, false)?, dest, bytes)
}

/// `/run/numatrace`, created 0700 if missing; refused if it is a symlink, not root's, or
/// writable by others (someone could plant the files numatrace trusts there).
pub fn run_dir() -> Result<PathBuf, SafeFsError> {
    let dir = Path::new(RUN_DIR);
    // A minimal system (an initramfs) may have no /run at all.
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    private_dir(dir)
}

/// `dir` as a directory only root can write to, created 0700 if missing.
pub fn private_dir(dir: &Path) -> Result<PathBuf, SafeFsError> {
    use std::os::unix::fs::DirBuilderExt as _;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err(dir)(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(io_err(dir))?;
    let unsafe_dir = |why: &str| SafeFsError::UnsafeDir {
        path: dir.to_owned(),
        why: why.to_owned(),
    };
    if meta.file_type().is_symlink() {
        return Err(unsafe_dir("a symlink"));
    }
    if !meta.is_dir() {
        return Err(unsafe_dir("not a directory"));
    }
    // SAFETY: geteuid has no preconditions.
    if meta.uid() != unsafe { libc::geteuid() } {
        return Err(unsafe_dir(&format!("owned by uid {}", meta.uid())));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_dir(&format!("mode {:o}", meta.mode() & 0o7777)));
    }
    // Ours and not writable by others, but readable (an older numatrace made it 0755): close it.
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io_err(dir))?;
    }
    Ok(dir.to_owned())
}

/// A private scratch directory (mkdtemp: a fresh random name, mode 0700), removed on drop.
pub fn scratch_dir(prefix: &str) -> Result<tempfile::TempDir, SafeFsError> {
    // tempfile makes directories 0777 & ~umask unless told otherwise.
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(io_err(&std::env::temp_dir()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn create_new_refuses_a_symlink_and_an_existing_file_and_keeps_the_target() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("victim");
        std::fs::write(&target, "precious").unwrap();
        let link = d.path().join("out");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(
            create_new(&link, false),
            Err(SafeFsError::Exists(_))
        ));
        assert!(matches!(
            create_new(&target, false),
            Err(SafeFsError::Exists(_))
        ));
        // --force replaces the link itself, never the file it points to.
        create_new(&link, true).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert!(
            !std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(mode(&link), FILE_MODE);
    }

    #[test]
    fn atomic_file_replaces_only_with_force_and_never_writes_through_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("victim");
        std::fs::write(&target, "precious").unwrap();
        let link = d.path().join("report.txt");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(
            write_atomic(&link, b"x", false),
            Err(SafeFsError::Exists(_))
        ));
        write_atomic(&link, b"report", true).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "report");
        assert_eq!(mode(&link), FILE_MODE);
        // Nothing left behind but the two names.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn an_uncommitted_atomic_file_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("r");
        drop(AtomicFile::create(&dest, false).unwrap());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn unique_names_differ_for_the_same_base() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().join("numatrace-20261201-120000.ntrace");
        let (a, _) = create_unique(&base).unwrap();
        let (b, _) = create_unique(&base).unwrap();
        assert_eq!(a, base);
        assert_eq!(b, d.path().join("numatrace-20261201-120000-2.ntrace"));
        // A symlink planted at the next name is skipped, not followed.
        std::os::unix::fs::symlink(
            "/etc/passwd",
            d.path().join("numatrace-20261201-120000-3.ntrace"),
        )
        .unwrap();
        let (c, _) = create_unique(&base).unwrap();
        assert_eq!(c, d.path().join("numatrace-20261201-120000-4.ntrace"));
    }

    #[test]
    fn a_private_dir_must_not_be_a_symlink_or_writable_by_others() {
        let d = tempfile::tempdir().unwrap();
        let ok = d.path().join("ok");
        private_dir(&ok).unwrap();
        assert_eq!(mode(&ok), 0o700);
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            private_dir(&open),
            Err(SafeFsError::UnsafeDir { .. })
        ));
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&ok, &link).unwrap();
        assert!(matches!(
            private_dir(&link),
            Err(SafeFsError::UnsafeDir { .. })
        ));
    }

    #[test]
    fn scratch_dirs_are_private_and_fresh() {
        let a = scratch_dir("numatrace-test-").unwrap();
        let b = scratch_dir("numatrace-test-").unwrap();
        assert_ne!(a.path(), b.path());
        assert_eq!(mode(a.path()), 0o700);
    }
}
