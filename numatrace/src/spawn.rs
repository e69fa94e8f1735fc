//! Starting a traced command so that it is followed from its first instruction: numatrace
//! re-executes itself as a tiny trampoline that waits on a gate, registers the trampoline's pid
//! with the kernel filter, then lets it exec the command (same pid) — as the user it should run
//! as ([`crate::identity`]), the privileges dropped only in that last step.
//!
//! The trampoline is reachable from the command line (`numatrace __exec-gated …`), so under
//! `sudo numatrace` anyone could ask it to run anything as root. It therefore runs only for the
//! numatrace that started it: the gate is one end of a socket pair, and the kernel's record of
//! who made the pair (SO_PEERCRED) must be the trampoline's own parent, as the same user. A
//! caller can hand it any descriptor, but not one the parent numatrace made: numatrace's are
//! all close-on-exec, and the gate's other end never leaves it.

use std::{
    ffi::OsString,
    io::{Read, Write},
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
        unix::process::CommandExt,
    },
    path::{Path, PathBuf},
};

use crate::identity::Identity;

/// argv[1] of the trampoline; not a user-facing subcommand. Its argv:
/// `numatrace __exec-gated FD IDENTITY -- COMMAND…`, IDENTITY `-` for "as we are".
pub const GATE_ARG: &str = "__exec-gated";

/// A spawned, not yet released command.
pub struct GatedChild {
    pub child: tokio::process::Child,
    gate: std::fs::File,
}

/// A connected pair of Unix sockets, close-on-exec: the gate.
fn socket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: socketpair returned two fresh descriptors that we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Whether `fd` is a socket our parent made, as our user (SO_PEERCRED of a socket pair: who
/// called socketpair): the gate of the numatrace that started us, not one a caller supplied.
fn made_by_parent(fd: RawFd) -> bool {
    // SAFETY: ucred is plain old data; zeroed is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid buffer of `len` bytes for SO_PEERCRED's struct ucred.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    // SAFETY: getppid and geteuid have no preconditions.
    let (parent, euid) = unsafe { (libc::getppid(), libc::geteuid()) };
    rc == 0
        && len as usize == std::mem::size_of::<libc::ucred>()
        && cred.pid == parent
        && cred.uid == euid
}

/// Finds `prog` as execvp would, to fail before anything is attached.
pub fn resolve(prog: &Path) -> Option<PathBuf> {
    if prog.as_os_str().as_encoded_bytes().contains(&b'/') {
        return prog.is_file().then(|| prog.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(prog))
            .find(|p| p.is_file())
    })
}

impl GatedChild {
    /// `quiet`: the command's stdout goes to /dev/null. `run_as`: the user it runs as.
    pub fn spawn(
        command: &[OsString],
        quiet: bool,
        run_as: Option<&Identity>,
    ) -> std::io::Result<Self> {
        let (read, write) = socket_pair()?;
        let read_fd: RawFd = read.as_raw_fd();
        let mut cmd = tokio::process::Command::new("/proc/self/exe");
        cmd.arg(GATE_ARG)
            .arg(read_fd.to_string())
            .arg(run_as.map_or_else(|| "-".to_owned(), Identity::encode))
            .arg("--")
            .args(command);
        // SAFETY: fcntl is async-signal-safe; it only clears close-on-exec on the read end so
        // the trampoline inherits it (the write end stays close-on-exec).
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(read_fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        if quiet {
            cmd.stdout(std::process::Stdio::null());
        }
        let child = cmd.spawn()?;
        drop(read);
        Ok(Self {
            child,
            gate: std::fs::File::from(write),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Lets the trampoline exec the command.
    pub fn release(mut self) -> std::io::Result<tokio::process::Child> {
        self.gate.write_all(b"g")?;
        Ok(self.child)
    }
}

/// The trampoline: checks that `fd` is the gate of the numatrace that started it, waits for
/// the go byte on it, then becomes `command` (as `identity`, an [`Identity::encode`]d user or
/// `-`). Never returns.
pub fn exec_gated(fd: RawFd, identity: &str, command: &[OsString]) -> ! {
    if !made_by_parent(fd) {
        eprintln!(
            "numatrace: {GATE_ARG} is numatrace's own trampoline, for the command it starts; \
             use `numatrace stat -- COMMAND`"
        );
        std::process::exit(125);
    }
    // SAFETY: the parent passed us this descriptor number and nothing else owns it here.
    let mut gate = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut b = [0u8; 1];
    match gate.read(&mut b) {
        Ok(1) => {}
        // numatrace went away before releasing us: do not run untraced.
        _ => std::process::exit(125),
    }
    drop(gate);
    let Some((prog, args)) = command.split_first() else {
        std::process::exit(125)
    };
    if identity != "-" {
        let dropped = Identity::decode(identity)
            .ok_or_else(|| std::io::Error::other("malformed identity"))
            .and_then(|id| id.become_user());
        if let Err(e) = dropped {
            // Never run the command with more privilege than asked for.
            eprintln!(
                "numatrace: cannot switch user for {}: {e}",
                crate::text_escape::Escaped(&prog.to_string_lossy())
            );
            std::process::exit(126);
        }
    }
    let err = std::process::Command::new(prog).args(args).exec();
    eprintln!(
        "numatrace: cannot run {}: {err}",
        crate::text_escape::EscapedBytes(prog.as_encoded_bytes())
    );
    std::process::exit(if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    });
}
