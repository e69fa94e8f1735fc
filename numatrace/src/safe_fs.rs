//! Files numatrace writes and reads as root: captures, reports, its log, the web config, its
//! state under `/run/numatrace`.
//!
//! numatrace runs as root in directories other users can write to, so every file it creates is
//! created exclusively (`O_CREAT|O_EXCL`: a symlink or file planted at the name makes the create
//! fail, it is never followed or truncated) and mode 0600 (captures name every process on the
//! machine). Under sudo every path the user names is created, replaced, removed and read with
//! the user's own rights ([`crate::invoker`]): what numatrace makes for them is theirs, and
//! nothing is made, replaced or read where they could not. Replacing an existing file needs
//! the caller's `--force` and happens by renaming a file created exclusively beside it, which
//! replaces the directory entry itself, never what a symlink there points to. Files root acts
//! on (the web config, an existing log file) must be root's or the user's and writable by no one
//! else.

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
    #[error("{path}: refused: {why}")]
    Untrusted { path: PathBuf, why: String },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SafeFsError + '_ {
    move |err| SafeFsError::Io {
        path: path.to_owned(),
        err,
    }
}

/// Runs `f` with the invoking user's rights under sudo (see [`crate::invoker`]): every path a
/// user names is created, replaced, removed and read as they could, never as root.
fn as_invoker<T: Send>(
    path: &Path,
    f: impl FnOnce() -> Result<T, SafeFsError> + Send,
) -> Result<T, SafeFsError> {
    crate::invoker::as_invoker(f).map_err(io_err(path))?
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

/// Creates `path` for writing: exclusively, 0600, with the invoker's rights (so theirs) under
/// sudo. An existing entry (file or symlink) is refused unless `force`, which removes the entry
/// itself first.
pub fn create_new(path: &Path, force: bool) -> Result<File, SafeFsError> {
    as_invoker(path, || create_new_here(path, force))
}

fn create_new_here(path: &Path, force: bool) -> Result<File, SafeFsError> {
    Ok(match open_exclusive(path) {
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
    })
}

/// Creates the first free name of `base`, `base-2`, `base-3`, … (before the extension):
/// default names that two runs started in the same second cannot share. With the invoker's
/// rights under sudo.
pub fn create_unique(base: &Path) -> Result<(PathBuf, File), SafeFsError> {
    as_invoker(base, || create_unique_here(base))
}

fn create_unique_here(base: &Path) -> Result<(PathBuf, File), SafeFsError> {
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
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
    Err(SafeFsError::Exists(base.to_owned()))
}

/// Refuses before any work is done when `dest` exists and `force` is not given (a report
/// written at the end of a ten-minute window should not fail only then). With the invoker's
/// rights under sudo: root's would tell them what exists where they cannot look.
pub fn check_dest(dest: &Path, force: bool) -> Result<(), SafeFsError> {
    as_invoker(dest, || check_dest_here(dest, force))
}

fn check_dest_here(dest: &Path, force: bool) -> Result<(), SafeFsError> {
    match std::fs::symlink_metadata(dest) {
        Ok(m) if m.is_dir() => return Err(SafeFsError::IsDir(dest.to_owned())),
        Ok(_) if !force => return Err(SafeFsError::Exists(dest.to_owned())),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(dest)(e)),
    }
    // A directory this thread's user cannot write to fails now, not after the window.
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let c_dir = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| io_err(dest)(io::Error::from(io::ErrorKind::InvalidInput)))?;
    // SAFETY: a NUL-terminated path. AT_EACCESS: checked with this thread's (filesystem)
    // credentials, the invoker's under sudo.
    if unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c_dir.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    } != 0
    {
        return Err(io_err(dest)(io::Error::last_os_error()));
    }
    Ok(())
}

/// A file written whole or not at all: a temporary created exclusively (0600) in the
/// destination's directory, renamed over it by [`Self::commit`] — without replacing an existing
/// entry unless `force`. Dropped uncommitted, the temporary is removed. For the user, every
/// step on a path (create, rename, remove) is taken with the invoker's rights under sudo.
pub struct AtomicFile {
    /// Always Some until commit or drop take it.
    tmp: Option<tempfile::NamedTempFile>,
    dest: PathBuf,
    force: bool,
    for_invoker: bool,
}

impl AtomicFile {
    /// For the user: under sudo, made with their rights and so theirs.
    pub fn create(dest: &Path, force: bool) -> Result<Self, SafeFsError> {
        Self::create_as(dest, force, true)
    }

    /// `for_invoker` false: root's own state, never the sudo user's (who could otherwise
    /// rewrite what root later acts on).
    fn create_as(dest: &Path, force: bool, for_invoker: bool) -> Result<Self, SafeFsError> {
        let make = || {
            check_dest_here(dest, force)?;
            let dir = match dest.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            let name = dest.file_name().unwrap_or_default().to_string_lossy();
            tempfile::Builder::new()
                .prefix(&format!(".{name}."))
                .suffix(".tmp")
                .permissions(std::fs::Permissions::from_mode(FILE_MODE))
                .tempfile_in(dir)
                .map_err(io_err(dest))
        };
        let tmp = if for_invoker {
            as_invoker(dest, make)?
        } else {
            make()?
        };
        Ok(Self {
            tmp: Some(tmp),
            dest: dest.to_owned(),
            force,
            for_invoker,
        })
    }

    pub fn file(&mut self) -> &mut File {
        self.tmp
            .as_mut()
            .expect("an AtomicFile is used before commit")
            .as_file_mut()
    }

    pub fn commit(mut self) -> Result<(), SafeFsError> {
        let tmp = self.tmp.take().expect("committed once");
        let (dest, force) = (self.dest.clone(), self.force);
        tmp.as_file().sync_all().map_err(io_err(&dest))?;
        let rename = move || {
            let persisted = if force {
                tmp.persist(&dest)
            } else {
                // renameat2(RENAME_NOREPLACE), or link + unlink where the file system lacks it.
                tmp.persist_noclobber(&dest)
            };
            // A failed rename drops the temporary (removing it) here, with the same rights.
            match persisted {
                Ok(_) => Ok(()),
                Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => {
                    Err(SafeFsError::Exists(dest))
                }
                Err(e) => Err(io_err(&dest)(e.error)),
            }
        };
        if self.for_invoker {
            as_invoker(&self.dest, rename)
        } else {
            rename()
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            if self.for_invoker {
                // Removed with the rights it was made with; nothing to tell if that fails.
                let _ = crate::invoker::as_invoker(move || drop(tmp));
            } else {
                drop(tmp);
            }
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

/// Refuses an opened file root would act on unless it is a regular file owned by root, by
/// numatrace's user or by the invoker, and neither group nor others can write it (what sshd
/// asks of its files): anyone else could have planted or could rewrite it.
fn check_trusted(file: &File, path: &Path) -> Result<(), SafeFsError> {
    let meta = file.metadata().map_err(io_err(path))?;
    let untrusted = |why: String| SafeFsError::Untrusted {
        path: path.to_owned(),
        why,
    };
    if !meta.file_type().is_file() {
        return Err(untrusted("not a regular file".into()));
    }
    if !crate::invoker::trusted_owner(meta.uid()) {
        return Err(untrusted(format!(
            "owned by uid {}, neither root nor the user running numatrace",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(untrusted(format!(
            "mode {:o}: writable by group or others (chmod go-w)",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// [`check_trusted`] for a file root will run (what it names, through symlinks).
pub fn check_trusted_path(path: &Path) -> Result<(), SafeFsError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| open_error(path, e))?;
    check_trusted(&file, path)
}

/// Errors of opening an existing name that say more than the errno: a symlink refused by
/// O_NOFOLLOW, a FIFO without a reader refused by O_NONBLOCK.
fn open_error(path: &Path, e: io::Error) -> SafeFsError {
    let why = match e.raw_os_error() {
        Some(libc::ELOOP) => "a symbolic link (not followed)",
        Some(libc::ENXIO) => "not a regular file",
        _ => return io_err(path)(e),
    };
    SafeFsError::Untrusted {
        path: path.to_owned(),
        why: why.into(),
    }
}

/// Opens `path` to append numatrace's own log to (`NUMATRACE_LOG_FILE`), with the invoker's
/// rights under sudo: created exclusively, 0600; an existing one only if [`check_trusted`]
/// passes (never through a symlink, never blocking on a FIFO).
pub fn open_log(path: &Path) -> Result<File, SafeFsError> {
    as_invoker(path, || {
        let created = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path);
        match created {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(path)(e)),
        }
        let file = OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| open_error(path, e))?;
        check_trusted(&file, path)?;
        clear_nonblock(&file).map_err(io_err(path))?;
        Ok(file)
    })
}

fn clear_nonblock(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, with integer arguments.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads a settings file that root acts on (the web config), with the invoker's rights under
/// sudo: only if [`check_trusted`] passes (a symlink is followed: the file it names is checked),
/// and at most `max` bytes.
pub fn read_trusted(path: &Path, max: u64) -> Result<Vec<u8>, SafeFsError> {
    as_invoker(path, || {
        use std::io::Read as _;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| open_error(path, e))?;
        check_trusted(&file, path)?;
        let mut bytes = Vec::new();
        file.take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(io_err(path))?;
        if bytes.len() as u64 > max {
            return Err(SafeFsError::Untrusted {
                path: path.to_owned(),
                why: format!("larger than {max} bytes"),
            });
        }
        Ok(bytes)
    })
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
