//! numatrace as root on someone else's machine: the files it writes never follow a planted
//! symlink or clobber a file, are private and, under sudo, the invoking user's; its scratch
//! space cannot be pre-created by another user; a traced command runs as the user, not root.

mod common;

use common::text;
use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::{Command, Output},
};

/// The uid/gid every Debian system has for an unprivileged user.
const NOBODY: u32 = 65534;

fn scratch() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    // `nobody`'s: the sudo tests stand for nobody, who writes there with their own rights.
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    if common::is_root() {
        std::os::unix::fs::chown(d.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    }
    d
}

fn run(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(common::numatrace_bin());
    c.args(args).current_dir(cwd);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("running numatrace")
}

/// A victim file and a symlink to it named `name`, in `dir`.
fn planted(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let link = dir.join(name);
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    (victim, link)
}

fn assert_private_file(p: &Path, uid: u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    assert!(
        m.file_type().is_file(),
        "{} is not a plain file",
        p.display()
    );
    assert_eq!(m.mode() & 0o7777, 0o600, "{}", p.display());
    assert_eq!(m.uid(), uid, "{}", p.display());
}

/// `record -o` onto a symlink or an existing file is refused with one line, and the target
/// is untouched; `--force` replaces the link itself, never the file it points to.
#[test]
fn record_never_writes_through_a_symlink_or_over_a_file() {
    require_root!("record_never_writes_through_a_symlink_or_over_a_file");
    let d = scratch();
    let (victim, link) = planted(d.path(), "out.ntrace");
    for target in [&link, &victim] {
        let o = run(
            &["record", "-d", "1", "-o", target.to_str().unwrap()],
            d.path(),
            &[],
        );
        assert!(!o.status.success(), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("already exists; pass --force"), "{}", text(&o));
        assert_eq!(err.trim().lines().count(), 1, "{}", text(&o));
    }
    let o = run(
        &["record", "-d", "1", "--force", "-o", link.to_str().unwrap()],
        d.path(),
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_private_file(&link, 0);
}

/// Captures and reports are 0600 and, under sudo, belong to the user who ran sudo; `stat -o`
/// and `report -o` refuse existing files (stat before its window) and never follow a link.
#[test]
fn outputs_are_private_and_the_sudo_users() {
    require_root!("outputs_are_private_and_the_sudo_users");
    let d = scratch();
    let sudo = [
        ("SUDO_USER", "nobody"),
        ("SUDO_UID", "65534"),
        ("SUDO_GID", "65534"),
    ];
    let cap = d.path().join("c.ntrace");
    let o = run(
        &["record", "-d", "1", "-o", cap.to_str().unwrap()],
        d.path(),
        &sudo,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_private_file(&cap, NOBODY);
    let rep = d.path().join("report.txt");
    let o = run(
        &["report", cap.to_str().unwrap(), "-o", rep.to_str().unwrap()],
        d.path(),
        &sudo,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_private_file(&rep, NOBODY);
    // Existing report: refused; --force: replaced whole.
    let o = run(
        &["report", cap.to_str().unwrap(), "-o", rep.to_str().unwrap()],
        d.path(),
        &[],
    );
    assert!(!o.status.success(), "{}", text(&o));
    let (victim, link) = planted(d.path(), "linked.txt");
    let o = run(
        &[
            "report",
            cap.to_str().unwrap(),
            "--force",
            "-o",
            link.to_str().unwrap(),
        ],
        d.path(),
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(std::fs::read_to_string(&link).unwrap().contains("Findings"));
    assert_private_file(&link, 0);
    // stat refuses before it attaches anything: at once, not after its window.
    let t = std::time::Instant::now();
    let o = run(
        &["stat", "-d", "60", "-o", victim.to_str().unwrap()],
        d.path(),
        &[],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let out = d.path().join("stat.txt");
    let o = run(
        &["stat", "-d", "1", "-o", out.to_str().unwrap()],
        d.path(),
        &sudo,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_private_file(&out, NOBODY);
}

/// Two records started at once in one directory get two names (the default name is taken
/// exclusively; a taken one moves on to -2, -3, …).
#[test]
fn two_records_at_once_get_different_default_names() {
    require_root!("two_records_at_once_get_different_default_names");
    let d = scratch();
    let start = || {
        Command::new(common::numatrace_bin())
            .args(["record", "-d", "1"])
            .current_dir(d.path())
            .output()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(start);
        let b = s.spawn(start);
        (a.join().unwrap().unwrap(), b.join().unwrap().unwrap())
    });
    assert!(a.status.success(), "{}", text(&a));
    assert!(b.status.success(), "{}", text(&b));
    let names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ntrace"))
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    for n in &names {
        assert_private_file(&d.path().join(n), 0);
    }
}

/// `check`'s reproducers keep their state in fresh private directories (mkdtemp): directories
/// planted under every name the old scheme (`numatrace-check-00N-PID`) could pick, with the
/// state files symlinked to a victim, are never used.
#[test]
fn check_scratch_space_cannot_be_planted() {
    const TEST: &str = "check_scratch_space_cannot_be_planted";
    require_root!(TEST);
    if common::other_line_covers(TEST) {
        return;
    }
    let tmp = scratch();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let next: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut planted_names = 1; // the victim
    for pid in next..next + 400 {
        // 002 kept its state file at that name, 004 a directory of two state files.
        std::os::unix::fs::symlink(
            &victim,
            tmp.path().join(format!("numatrace-check-002-{pid}")),
        )
        .unwrap();
        let dir = tmp.path().join(format!("numatrace-check-004-{pid}"));
        std::fs::create_dir(&dir).unwrap();
        for f in ["disabled", "control"] {
            std::os::unix::fs::symlink(&victim, dir.join(f)).unwrap();
        }
        planted_names += 2;
    }
    let balancing = common::Sysctl::set("kernel.numa_balancing", "1");
    for seed in ["002", "004"] {
        let o = run(
            &["check", "--patch", seed, "--duration", "2s"],
            tmp.path(),
            &[("TMPDIR", tmp.path().to_str().unwrap())],
        );
        assert!(o.status.success(), "{}", text(&o));
    }
    drop(balancing);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    // Nothing of ours left behind (the private directories are removed).
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        planted_names,
        "scratch space left behind"
    );
}

/// `user`'s home directory in /etc/passwd.
fn passwd_home(user: &str) -> String {
    std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&user))
        .and_then(|f| f.get(5).map(|h| (*h).to_owned()))
        .expect("user in /etc/passwd")
}

/// Under sudo a traced command runs as the user who ran sudo (uid, gid, groups, HOME, USER,
/// LOGNAME), said in one line, and as no one else: `--user root` is refused there; `--user`
/// works without sudo; the exit status passes through.
#[test]
fn a_traced_command_runs_as_the_invoking_user() {
    const TEST: &str = "a_traced_command_runs_as_the_invoking_user";
    require_root!(TEST);
    let d = scratch();
    let sudo = [
        ("SUDO_USER", "nobody"),
        ("SUDO_UID", "65534"),
        ("SUDO_GID", "65534"),
        ("HOME", "/root"),
        ("USER", "root"),
        ("LOGNAME", "root"),
    ];
    let who = "echo $(id -u) $(id -g) $(id -G) $HOME $USER $LOGNAME; exit 7";
    let report = |n: &str| d.path().join(n).to_str().unwrap().to_owned();
    let o = run(
        &["stat", "-o", &report("a"), "--", "sh", "-c", who],
        d.path(),
        &sudo,
    );
    let nobody = passwd_home("nobody");
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("65534 65534 65534 {nobody} nobody nobody"),
        "{}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .any(|l| l.contains("running sh as nobody (uid 65534)")),
        "{}",
        text(&o)
    );
    // The command was traced: its pid filter saw it.
    let r = std::fs::read_to_string(report("a")).unwrap();
    assert!(r.contains("(exit 7)"), "{r}");
    for user in ["root", "0", "daemon"] {
        let o = run(
            &[
                "stat",
                "-o",
                &report("b"),
                "--user",
                user,
                "--",
                "sh",
                "-c",
                who,
            ],
            d.path(),
            &sudo,
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(o.stdout.is_empty(), "the command ran: {}", text(&o));
        assert_eq!(err.trim_end().lines().count(), 1, "{}", text(&o));
        assert!(
            err.contains("under sudo the command runs as the user who ran sudo"),
            "{}",
            text(&o)
        );
        assert!(!d.path().join("b").exists());
    }
    // Naming the invoker is no change.
    let o = run(
        &[
            "stat",
            "-o",
            &report("b"),
            "--user",
            "nobody",
            "--",
            "sh",
            "-c",
            who,
        ],
        d.path(),
        &sudo,
    );
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    let o = run(
        &[
            "record",
            "-o",
            &report("c"),
            "--user",
            "nobody",
            "--",
            "sh",
            "-c",
            who,
        ],
        d.path(),
        &[],
    );
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("65534 65534"),
        "{}",
        text(&o)
    );
    let o = run(
        &["stat", "--user", "no-such-user-xyz", "--", "true"],
        d.path(),
        &[],
    );
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no user \"no-such-user-xyz\""),
        "{}",
        text(&o)
    );
}
