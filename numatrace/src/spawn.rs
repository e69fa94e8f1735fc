//! Starting a traced command so that it is followed from its first instruction: numatrace
//! re-executes itself as a tiny trampoline that waits on a pipe, registers the trampoline's pid
//! with the kernel filter, then lets it exec the command (same pid) — as the user it should run
//! as ([`crate::identity`]), the privileges dropped only in that last step.

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

fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh descriptors that we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
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
        let (read, write) = pipe_cloexec()?;
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

/// The trampoline: waits for the go byte on `fd`, then becomes `command` (as `identity`, an
/// [`Identity::encode`]d user or `-`). Never returns.
pub fn exec_gated(fd: RawFd, identity: &str, command: &[OsString]) -> ! {
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
