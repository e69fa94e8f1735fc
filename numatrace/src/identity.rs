//! Who a traced command (`stat|record|check -- CMD`) runs as. numatrace needs root to trace;
//! the command does not: under sudo it runs as the user who ran sudo, or as `--user USER`
//! (strace's `-u`), with that user's groups and HOME/USER/LOGNAME.

use std::ffi::OsString;

use anyhow::{Context as _, Result, bail};

use crate::invoker::{self, Creds};

/// A user to run a command as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary one included, as initgroups gives them).
    pub groups: Vec<u32>,
    pub home: OsString,
}

impl Identity {
    /// The passwd entry of `user` (a name, or a numeric uid) and its groups.
    pub fn lookup(user: &str) -> Result<Self> {
        let pw = match user.parse::<u32>() {
            Ok(uid) => invoker::lookup_uid(uid),
            Err(_) => invoker::lookup_name(user),
        }
        .with_context(|| format!("looking up user {user:?}"))?;
        let Some(pw) = pw else {
            bail!("--user: no user {user:?} on this machine (see /etc/passwd)");
        };
        let groups = invoker::group_list(&pw.name, pw.gid)?;
        Ok(Self {
            name: pw.name,
            uid: pw.uid,
            gid: pw.gid,
            groups,
            home: pw.home,
        })
    }

    /// Whose rights paths are used with for this user (e.g. finding their command).
    pub fn creds(&self) -> Creds {
        Creds {
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
        }
    }

    /// The groups as `--`-free text for the trampoline's argv: `uid:gid:g1,g2,…:home-hex`.
    pub fn encode(&self) -> String {
        let groups: Vec<String> = self.groups.iter().map(u32::to_string).collect();
        let home: String = self
            .home
            .as_encoded_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!(
            "{}:{}:{}:{}:{}",
            self.uid,
            self.gid,
            groups.join(","),
            home,
            self.name
        )
    }

    pub fn decode(s: &str) -> Option<Self> {
        let mut it = s.splitn(5, ':');
        let uid = it.next()?.parse().ok()?;
        let gid = it.next()?.parse().ok()?;
        let groups = it
            .next()?
            .split(',')
            .filter(|g| !g.is_empty())
            .map(|g| g.parse().ok())
            .collect::<Option<Vec<u32>>>()?;
        let hex = it.next()?;
        let home = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        let name = it.next()?.to_owned();
        Some(Self {
            name,
            uid,
            gid,
            groups,
            // SAFETY: bytes that came from OsString::as_encoded_bytes in `encode`.
            home: unsafe { OsString::from_encoded_bytes_unchecked(home) },
        })
    }

    /// Becomes this user in the current process (groups, gid, then uid: each call needs the
    /// privilege the next one drops) and sets HOME/USER/LOGNAME. For the trampoline, just
    /// before it execs the command.
    pub fn become_user(&self) -> std::io::Result<()> {
        // A session of its own, without root's controlling terminal: a command that kept it
        // could push keystrokes into a root shell (TIOCSTI). numatrace passes SIGINT, SIGTERM
        // and SIGHUP on to it, so Ctrl-C still reaches it.
        // SAFETY: setsid has no preconditions; it fails only for a group leader, which the
        // trampoline (a fresh child) is not.
        if unsafe { libc::setsid() } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let groups: Vec<libc::gid_t> = self.groups.clone();
        // SAFETY: a valid array of `groups.len()` gids.
        if unsafe { libc::setgroups(groups.len(), groups.as_ptr()) } != 0
            // SAFETY: plain ids.
            || unsafe { libc::setgid(self.gid) } != 0
            // SAFETY: plain ids.
            || unsafe { libc::setuid(self.uid) } != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        // Dropped for good: a setuid(0) that worked would mean we were not really root's.
        // SAFETY: plain id.
        if self.uid != 0 && unsafe { libc::setuid(0) } == 0 {
            return Err(std::io::Error::other("could not drop root"));
        }
        // SAFETY: the trampoline is single-threaded; nothing reads the environment concurrently.
        unsafe {
            std::env::set_var("HOME", &self.home);
            std::env::set_var("USER", &self.name);
            std::env::set_var("LOGNAME", &self.name);
        }
        Ok(())
    }
}

/// The identity a traced command runs as: `--user USER`; else, under sudo, the user who ran
/// sudo (said in one line on stderr); else unchanged (None).
///
/// Under sudo the command never runs as anyone but the invoker: `sudo numatrace` may be all a
/// user is allowed, and `--user root` (or anyone else) would make it a way to run anything as
/// them. Root without sudo may name any user.
pub fn for_traced_command(user: Option<&str>, command: &[OsString]) -> Result<Option<Identity>> {
    if command.is_empty() {
        return Ok(None);
    }
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let invoker = invoker::invoker();
    if let Some(user) = user {
        let id = Identity::lookup(user)?;
        if let Some(inv) = invoker
            && id.uid != inv.uid
        {
            bail!(
                "--user {}: under sudo the command runs as the user who ran sudo (uid {}) and \
                 no one else; to run it as another user, run numatrace as root without sudo's \
                 SUDO_UID (e.g. sudo env -u SUDO_UID -u SUDO_GID -u SUDO_USER numatrace ...)",
                crate::text_escape::Escaped(user),
                inv.uid
            );
        }
        if id.uid == euid {
            return Ok(None);
        }
        if euid != 0 {
            bail!("--user {user}: only root can run a command as another user");
        }
        return Ok(Some(id));
    }
    let Some(inv) = invoker else {
        return Ok(None);
    };
    let Some(pw) = invoker::lookup_uid(inv.uid).context("looking up the user who ran sudo")? else {
        bail!(
            "the user who ran sudo (SUDO_UID={}) has no passwd entry: pass --user to say who \
             runs the command",
            inv.uid
        );
    };
    let id = Identity {
        name: pw.name,
        uid: inv.uid,
        gid: inv.gid,
        groups: inv.groups.clone(),
        home: pw.home,
    };
    eprintln!(
        "numatrace: running {} as {} (uid {}), who ran sudo",
        crate::text_escape::Escaped(&command[0].to_string_lossy()),
        crate::text_escape::Escaped(&id.name),
        id.uid
    );
    Ok(Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_nobody_are_found_by_name_and_by_uid() {
        let root = Identity::lookup("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(Identity::lookup("0").unwrap().name, "root");
        assert!(Identity::lookup("no-such-user-numatrace").is_err());
    }

    #[test]
    fn an_identity_survives_the_trampolines_argv() {
        let id = Identity {
            name: "alice".into(),
            uid: 1000,
            gid: 1000,
            groups: vec![1000, 27, 100],
            home: OsString::from("/home/al:ice --x"),
        };
        assert_eq!(Identity::decode(&id.encode()), Some(id.clone()));
        let none = Identity {
            groups: vec![],
            ..id
        };
        assert_eq!(Identity::decode(&none.encode()), Some(none));
        assert_eq!(Identity::decode("1:2:x:"), None);
    }
}
