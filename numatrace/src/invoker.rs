//! The user behind `sudo numatrace`, and acting on paths with their rights.
//!
//! numatrace may be the one command a user is allowed to run as root (`alice ALL=(root)
//! /usr/bin/numatrace`). Every path such a user names — an output file, a capture to read, a web
//! config and the TLS files it names, a log file, the command to trace — is then used with
//! *their* rights, never root's: otherwise root would create, replace and read for them where
//! they cannot.
//!
//! Linux keeps credentials per thread. [`with_rights`] runs a file operation on a short-lived
//! thread whose filesystem uid and gid and supplementary groups are the user's (the raw
//! setfsuid / setfsgid / setgroups syscalls: glibc's wrappers would change every thread of the
//! process), so the kernel checks the user's rights on every path component, and moving the
//! filesystem uid away from 0 clears the capabilities that bypass those checks
//! (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_CHOWN, CAP_FSETID, CAP_MKNOD). A file
//! created so is the user's, as if they had created it. The thread ends with the operation, and
//! its credentials with it. Commands that need no privilege at all drop to the user for good
//! before they touch any path ([`drop_privileges`]).

use std::{
    ffi::{CStr, CString, OsString},
    io,
    sync::OnceLock,
};

/// A user's filesystem credentials: whose rights a path is used with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary one included, as initgroups gives them).
    pub groups: Vec<u32>,
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The user who ran `sudo numatrace …`: SUDO_UID and SUDO_GID (which sudo sets and a user
/// cannot), with SUDO_USER's groups where that name is SUDO_UID's, else the primary group
/// alone. None unless numatrace runs as root, or when root itself ran sudo.
pub fn invoker() -> Option<&'static Creds> {
    static INVOKER: OnceLock<Option<Creds>> = OnceLock::new();
    // After drop_privileges the process is the invoker's: nothing left to switch.
    if euid() != 0 {
        return None;
    }
    INVOKER
        .get_or_init(|| {
            let num = |k: &str| std::env::var(k).ok()?.trim().parse::<u32>().ok();
            let uid = num("SUDO_UID").filter(|&u| u != 0)?;
            let name = std::env::var("SUDO_USER").ok().filter(|n| !n.is_empty());
            let user = name
                .as_deref()
                .and_then(|n| lookup_name(n).ok().flatten())
                .filter(|u| u.uid == uid);
            let gid = num("SUDO_GID")
                .or(user.as_ref().map(|u| u.gid))
                .unwrap_or(uid);
            let groups = match &user {
                Some(u) if u.gid == gid => group_list(&u.name, gid).unwrap_or_else(|_| vec![gid]),
                _ => vec![gid],
            };
            Some(Creds { uid, gid, groups })
        })
        .as_ref()
}

/// Whether a file owned by `uid` may steer root: root's own, this process's user's, or the
/// invoker's (who may write it anyway).
pub fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == euid() || invoker().is_some_and(|c| c.uid == uid)
}

/// Runs `f` with the invoker's rights on paths under sudo ([`with_rights`]), else as numatrace
/// is.
pub fn as_invoker<T: Send>(f: impl FnOnce() -> T + Send) -> io::Result<T> {
    match invoker() {
        Some(creds) => with_rights(creds, f),
        None => Ok(f()),
    }
}

/// Runs `f` on a thread of its own whose filesystem credentials are `creds`'s (module doc).
/// Only root can switch; an error says the switch failed, and `f` did not run — nor was what
/// it holds dropped: that could act with half-switched rights (a temporary file removed as
/// root, say), so it is leaked instead.
pub fn with_rights<T: Send>(creds: &Creds, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|s| {
        let thread = std::thread::Builder::new()
            .name("numatrace-as-user".into())
            .spawn_scoped(s, || match switch_thread(creds) {
                Ok(()) => Ok(f()),
                Err(e) => {
                    std::mem::forget(f);
                    Err(e)
                }
            })?;
        thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Capabilities that bypass file permission checks (the kernel's CAP_FS_MASK: CAP_CHOWN 0,
/// CAP_DAC_OVERRIDE 1, CAP_DAC_READ_SEARCH 2, CAP_FOWNER 3, CAP_FSETID 4, CAP_LINUX_IMMUTABLE
/// 9, CAP_MKNOD 27, CAP_MAC_OVERRIDE 32), as bits of a capability set's two 32-bit words.
const FS_CAPS: [u32; 2] = [0b1_1111 | 1 << 9 | 1 << 27, 1];

/// `struct __user_cap_header_struct` and `__user_cap_data_struct` (linux/capability.h).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// This thread's capability sets (capget: per thread, as capset).
fn thread_caps() -> io::Result<[CapData; 2]> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: a valid header and an array of two data structs, as version 3 takes.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(data)
}

/// Takes the capabilities that bypass file permissions out of this thread's effective set.
/// setfsuid already does when the filesystem uid leaves 0, unless the process asked the kernel
/// not to (SECBIT_NO_SETUID_FIXUP): this does not depend on that, and [`switch_thread`] checks.
fn drop_fs_caps() -> io::Result<()> {
    let mut data = thread_caps()?;
    for (d, fs) in data.iter_mut().zip(FS_CAPS) {
        d.effective &= !fs;
    }
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    // SAFETY: as in thread_caps; capset with pid 0 changes this thread only.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's groups, filesystem gid and filesystem uid become `creds`'s, and none
/// of the capabilities that bypass file permissions stays effective.
fn switch_thread(creds: &Creds) -> io::Result<()> {
    let groups: Vec<libc::gid_t> = creds.groups.clone();
    // SAFETY: a valid array of `groups.len()` gids; the raw syscall changes this thread only.
    if unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // setfsuid/setfsgid return the previous id and never fail visibly: ask again (an invalid id,
    // -1, changes nothing) to see that the switch took.
    // SAFETY: plain ids.
    let (gid_now, uid_now) = unsafe {
        libc::syscall(libc::SYS_setfsgid, creds.gid);
        let g = libc::syscall(libc::SYS_setfsgid, u32::MAX);
        libc::syscall(libc::SYS_setfsuid, creds.uid);
        let u = libc::syscall(libc::SYS_setfsuid, u32::MAX);
        (g, u)
    };
    if gid_now != i64::from(creds.gid) || uid_now != i64::from(creds.uid) {
        return Err(io::Error::other(format!(
            "could not take the rights of uid {} gid {}",
            creds.uid, creds.gid
        )));
    }
    drop_fs_caps()?;
    let left = thread_caps()?;
    if left
        .iter()
        .zip(FS_CAPS)
        .any(|(d, fs)| d.effective & fs != 0)
    {
        return Err(io::Error::other(
            "capabilities that bypass file permissions are still effective",
        ));
    }
    Ok(())
}

/// Under sudo, becomes the invoker for good (groups, gid, then uid: each call needs the privilege
/// the next one drops): for the commands that need no privilege (`report`, `completions`, the
/// man pages), before they touch any path. Nothing to do otherwise.
pub fn drop_privileges() -> io::Result<()> {
    let Some(creds) = invoker() else {
        return Ok(());
    };
    let groups: Vec<libc::gid_t> = creds.groups.clone();
    // SAFETY: a valid array of `groups.len()` gids; plain ids. glibc applies each to every
    // thread of the process.
    if unsafe { libc::setgroups(groups.len(), groups.as_ptr()) } != 0
        || unsafe { libc::setgid(creds.gid) } != 0
        || unsafe { libc::setuid(creds.uid) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain id. Succeeding would mean root was not really dropped.
    if unsafe { libc::setuid(0) } == 0 {
        return Err(io::Error::other("could not drop root"));
    }
    Ok(())
}

/// A passwd entry: name, uid, primary gid, home.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: OsString,
}

/// The passwd entry of the user called `name`.
pub fn lookup_name(name: &str) -> io::Result<Option<PasswdEntry>> {
    let name = CString::new(name).map_err(|_| io::Error::other("a user name with a NUL byte"))?;
    passwd(|buf, pwd, res| {
        // SAFETY: a NUL-terminated name, valid pointers to a passwd struct, a buffer of its
        // stated length and a result pointer, as getpwnam_r requires.
        unsafe { libc::getpwnam_r(name.as_ptr(), pwd, buf.as_mut_ptr(), buf.len(), res) }
    })
}

/// The passwd entry of uid `uid`.
pub fn lookup_uid(uid: u32) -> io::Result<Option<PasswdEntry>> {
    passwd(|buf, pwd, res| {
        // SAFETY: as in lookup_name.
        unsafe { libc::getpwuid_r(uid, pwd, buf.as_mut_ptr(), buf.len(), res) }
    })
}

/// Calls a `getpw*_r` function with a growing buffer.
fn passwd(
    call: impl Fn(&mut Vec<libc::c_char>, *mut libc::passwd, *mut *mut libc::passwd) -> libc::c_int,
) -> io::Result<Option<PasswdEntry>> {
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
            return Err(io::Error::from_raw_os_error(rc));
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
        return Ok(Some(PasswdEntry {
            name,
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
            home,
        }));
    }
}

/// `user`'s groups as initgroups(3) would set them.
pub fn group_list(user: &str, gid: u32) -> io::Result<Vec<u32>> {
    let name = CString::new(user).map_err(|_| io::Error::other("a user name with a NUL byte"))?;
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
            return Err(io::Error::other(format!(
                "the groups of {user} could not be listed"
            )));
        }
        n = count;
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    use super::*;

    const NOBODY: Creds = Creds {
        uid: 65534,
        gid: 65534,
        groups: Vec::new(),
    };

    /// With nobody's rights, root's 0755 directory and 0600 file are out of reach, a directory
    /// nobody owns is not, and what is created there is nobody's; the calling thread keeps
    /// root's rights.
    #[test]
    fn rights_are_the_users_on_that_thread_only() {
        if euid() != 0 {
            eprintln!("SKIPPED rights_are_the_users_on_that_thread_only: needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, "root only").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let theirs = d.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let creds = Creds {
            groups: vec![65534],
            ..NOBODY
        };
        let (create, read, mine, caps) = with_rights(&creds, || {
            (
                std::fs::write(d.path().join("new"), "x"),
                std::fs::read(&secret),
                std::fs::write(theirs.join("mine"), "x"),
                thread_caps().unwrap(),
            )
        })
        .unwrap();
        assert_eq!(caps[0].effective & FS_CAPS[0], 0);
        assert_eq!(caps[1].effective & FS_CAPS[1], 0);
        // Root's other capabilities stay (this thread's switch is about files only).
        assert_ne!(caps[0].effective, 0);
        assert_eq!(create.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        mine.unwrap();
        let m = std::fs::metadata(theirs.join("mine")).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534));
        // This thread is still root.
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root only");
        std::fs::write(d.path().join("new"), "x").unwrap();
    }

    #[test]
    fn nobody_is_found_by_name_and_uid() {
        let by_name = lookup_name("nobody").unwrap().unwrap();
        assert_eq!(by_name.uid, 65534);
        assert_eq!(lookup_uid(65534).unwrap().unwrap().name, "nobody");
        assert!(lookup_name("no-such-user-numatrace").unwrap().is_none());
        assert!(
            group_list("nobody", by_name.gid)
                .unwrap()
                .contains(&by_name.gid)
        );
    }
}
