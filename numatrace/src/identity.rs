//! Who a traced command (`stat|record|check -- CMD`) runs as. numatrace needs root to trace;
//! the command does not: under sudo it runs as the user who ran sudo, or as `--user USER`
//! (strace's `-u`), with that user's groups and HOME/USER/LOGNAME.

use std::ffi::{CStr, CString, OsString};

use anyhow::{Context as _, Result, bail};

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
            Ok(uid) => passwd(|buf, pwd, res| {
                // SAFETY: valid pointers to a passwd struct, a buffer of its stated length and
                // a result pointer, as getpwuid_r requires.
                unsafe { libc::getpwuid_r(uid, pwd, buf.as_mut_ptr(), buf.len(), res) }
            }),
            Err(_) => {
                let name = CString::new(user).context("--user: a name without NUL bytes")?;
                passwd(|buf, pwd, res| {
                    // SAFETY: as above, with a NUL-terminated name.
                    unsafe {
                        libc::getpwnam_r(name.as_ptr(), pwd, buf.as_mut_ptr(), buf.len(), res)
                    }
                })
            }
        }
        .with_context(|| format!("looking up user {user:?}"))?;
        let Some((name, uid, gid, home)) = pw else {
            bail!("--user: no user {user:?} on this machine (see /etc/passwd)");
        };
        let groups = group_list(&name, gid)?;
        Ok(Self {
            name,
            uid,
            gid,
            groups,
            home,
        })
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

type PasswdFields = (String, u32, u32, OsString);

/// Calls a `getpw*_r` function with a growing buffer.
fn passwd(
    call: impl Fn(&mut Vec<libc::c_char>, *mut libc::passwd, *mut *mut libc::passwd) -> libc::c_int,
) -> std::io::Result<Option<PasswdFields>> {
    let mut buf: Vec<libc::c_char> = vec![0; 1024];
    loop {
        // SAFETY: passwd is plain old data; zeroed is a valid (unused) value.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut res: *mut libc::passwd = std::ptr::null_mut();
        let rc = call(&mut buf, &mut pwd, &mut res);
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        if res.is_null() {
            return Ok(None);
        }
        // SAFETY: on success the strings point into `buf`, NUL-terminated.
        let (name, home) = unsafe {
            (
                CStr::from_ptr(pwd.pw_name).to_string_lossy().into_owned(),
                OsString::from(std::ffi::OsStr::from_encoded_bytes_unchecked(
                    CStr::from_ptr(pwd.pw_dir).to_bytes(),
                )),
            )
        };
        return Ok(Some((name, pwd.pw_uid, pwd.pw_gid, home)));
    }
}

/// `user`'s groups as initgroups(3) would set them.
fn group_list(user: &str, gid: u32) -> Result<Vec<u32>> {
    let name = CString::new(user)?;
    let mut n: libc::c_int = 64;
    loop {
        let mut groups: Vec<libc::gid_t> = vec![0; n as usize];
        let mut count = n;
        // SAFETY: a NUL-terminated name and an array of `count` gids.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(count as usize);
            return Ok(groups);
        }
        if count <= n || count > 65536 {
            bail!("the groups of {user} could not be listed");
        }
        n = count;
    }
}

/// The identity a traced command runs as: `--user USER`; else, under sudo, the user who ran
/// sudo (said in one line on stderr); else unchanged (None). `--user root` keeps root.
pub fn for_traced_command(user: Option<&str>, command: &[OsString]) -> Result<Option<Identity>> {
    if command.is_empty() {
        return Ok(None);
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if let Some(user) = user {
        let id = Identity::lookup(user)?;
        // SAFETY: geteuid has no preconditions.
        if id.uid == unsafe { libc::geteuid() } {
            return Ok(None);
        }
        if !root {
            bail!("--user {user}: only root can run a command as another user");
        }
        return Ok(Some(id));
    }
    if !root {
        return Ok(None);
    }
    let Some(name) = std::env::var("SUDO_USER").ok().filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let id = Identity::lookup(&name)?;
    if id.uid == 0 {
        return Ok(None);
    }
    if let Some(uid) = std::env::var("SUDO_UID")
        .ok()
        .and_then(|u| u.parse::<u32>().ok())
        && uid != id.uid
    {
        bail!(
            "SUDO_USER={name} has uid {} but SUDO_UID={uid}: pass --user to say who runs the \
             command",
            id.uid
        );
    }
    eprintln!(
        "numatrace: running {} as {} (uid {}), who ran sudo; --user root keeps root",
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
