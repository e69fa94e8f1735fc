//! The sudo boundary (issue 33): `sudo numatrace` may be the one command a user is allowed as
//! root. Run as root with SUDO_UID/SUDO_GID/SUDO_USER naming `nobody` (what sudo sets for its
//! invoker), numatrace must create, replace and read only what nobody could: outputs (`stat`,
//! `record`, `report -o`, the man pages), captures it reads, the command it traces, its web
//! config and TLS files, its log file; a traced command runs as nobody and no one else; and
//! clients without the password cannot lock a scraper that has it out of `serve`.
//!
//! Each test sets up a root-owned directory nobody cannot write (standing in for /etc) beside
//! one nobody owns, tries what an invoker would try, and checks that nothing outside nobody's
//! rights was created, replaced or read, with one line on stderr.

mod common;

use common::{serve::Serve, text};
use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::TcpStream,
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

/// The uid/gid every Debian system has for an unprivileged user.
const NOBODY: u32 = 65534;

/// What sudo sets when nobody runs `sudo numatrace …`.
const SUDO: [(&str, &str); 3] = [
    ("SUDO_USER", "nobody"),
    ("SUDO_UID", "65534"),
    ("SUDO_GID", "65534"),
];

/// A root-owned directory standing for /etc (`protected`, holding a root file `precious`)
/// and one nobody owns (`theirs`, holding `d -> protected`: a symlinked parent nobody planted).
struct Lab {
    _root: tempfile::TempDir,
    protected: PathBuf,
    theirs: PathBuf,
}

impl Lab {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        };
        mode(root.path(), 0o755);
        let protected = root.path().join("protected");
        std::fs::create_dir(&protected).unwrap();
        mode(&protected, 0o755);
        std::fs::write(protected.join("precious"), "precious\n").unwrap();
        mode(&protected.join("precious"), 0o644);
        let theirs = root.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        mode(&theirs, 0o755);
        std::os::unix::fs::symlink(&protected, theirs.join("d")).unwrap();
        std::os::unix::fs::lchown(theirs.join("d"), Some(NOBODY), Some(NOBODY)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
        Self {
            _root: root,
            protected,
            theirs,
        }
    }

    fn p(&self, rel: &str) -> String {
        self.protected.join(rel).to_str().unwrap().to_owned()
    }

    fn t(&self, rel: &str) -> String {
        self.theirs.join(rel).to_str().unwrap().to_owned()
    }

    /// Every entry of the protected directory: name, owner, mode, content.
    fn protected_state(&self) -> BTreeMap<String, (u32, u32, Vec<u8>)> {
        std::fs::read_dir(&self.protected)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let m = e.path().symlink_metadata().unwrap();
                let content = if m.is_file() {
                    std::fs::read(e.path()).unwrap()
                } else {
                    Vec::new()
                };
                (
                    e.file_name().to_string_lossy().into_owned(),
                    (m.uid(), m.mode(), content),
                )
            })
            .collect()
    }
}

/// numatrace with `args` in nobody's directory, with `env`, killed after `limit` (a hang is a
/// failure, not a stuck suite).
fn run_within(lab: &Lab, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let mut c = Command::new(common::numatrace_bin());
    c.args(args)
        .current_dir(&lab.theirs)
        .env_remove("NUMATRACE_LOG_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let child = c.spawn().expect("running numatrace");
    let id = child.id();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let start = Instant::now();
            while !done.load(Ordering::Relaxed) {
                if start.elapsed() > limit {
                    // SAFETY: kill has no memory effects.
                    unsafe { libc::kill(id as i32, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let out = child.wait_with_output().unwrap();
        done.store(true, Ordering::Relaxed);
        out
    })
}

fn run(lab: &Lab, args: &[&str], env: &[(&str, &str)]) -> Output {
    run_within(lab, args, env, Duration::from_secs(60))
}

/// Refused: exit 1, one line on stderr containing `why`, nothing on stdout.
fn assert_refused(o: &Output, why: &str, what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{what}: {}", text(o));
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {}", text(o));
    assert!(err.contains(why), "{what}: expected {why:?}: {}", text(o));
    assert!(o.stdout.is_empty(), "{what}: {}", text(o));
}

fn owner_and_mode(p: &str) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.mode() & 0o7777)
}

/// A capture recorded under sudo into nobody's directory: theirs, 0600.
fn capture(lab: &Lab) -> String {
    let cap = lab.t("c.ntrace");
    let o = run(lab, &["record", "-d", "1", "-o", &cap], &SUDO);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(owner_and_mode(&cap), (NOBODY, 0o600));
    cap
}

/// Hole 1: `stat`, `record` and `report -o`, and the man pages, write only where nobody may:
/// not into a root directory, not over a root file with --force, not through a symlinked
/// parent nobody planted; where nobody may, the file is theirs and 0600.
#[test]
fn outputs_are_made_only_where_the_invoker_may_write() {
    const TEST: &str = "outputs_are_made_only_where_the_invoker_may_write";
    require_root!(TEST);
    let lab = Lab::new();
    let cap = capture(&lab);
    let before = lab.protected_state();
    let targets = [
        (lab.p("new"), false),
        (lab.p("precious"), true),
        (lab.t("d/new"), false),
        (lab.t("d/precious"), true),
    ];
    for (target, force) in &targets {
        let mut commands: Vec<Vec<&str>> = vec![
            vec!["stat", "-d", "1", "-o", target],
            vec!["record", "-d", "1", "-o", target],
            vec!["report", &cap, "-o", target],
            vec!["report", &cap, "--format", "chrome-trace", "-o", target],
        ];
        for c in &mut commands {
            if *force {
                c.push("--force");
            }
            let started = Instant::now();
            let o = run(&lab, c, &SUDO);
            assert_refused(&o, "Permission denied", &format!("{c:?}"));
            // Refused before any window, not after it.
            assert!(started.elapsed() < Duration::from_secs(10), "{c:?}");
        }
    }
    let o = run(&lab, &["manpages", "--out-dir", &lab.p("man")], &SUDO);
    assert!(!o.status.success(), "{}", text(&o));
    assert_eq!(
        lab.protected_state(),
        before,
        "the protected directory changed"
    );

    // Where nobody may write, the outputs are theirs.
    let report = lab.t("report.txt");
    let o = run(&lab, &["report", &cap, "-o", &report], &SUDO);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(owner_and_mode(&report), (NOBODY, 0o600));
    let o = run(&lab, &["report", &cap, "--force", "-o", &report], &SUDO);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(owner_and_mode(&report), (NOBODY, 0o600));
    let stat = lab.t("stat.txt");
    let o = run(&lab, &["stat", "-d", "1", "-o", &stat], &SUDO);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(owner_and_mode(&stat), (NOBODY, 0o600));
    let man = lab.t("man");
    let o = run(&lab, &["manpages", "--out-dir", &man], &SUDO);
    assert!(o.status.success(), "{}", text(&o));
    let page = format!("{man}/numatrace.1");
    assert_eq!(owner_and_mode(&page).0, NOBODY);
    // Nothing left behind in nobody's directory but what was asked for.
    let mut names: Vec<String> = std::fs::read_dir(&lab.theirs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["c.ntrace", "d", "man", "report.txt", "stat.txt"]);
}

/// `report` under sudo reads a capture as nobody: a root-only one is refused with nothing of
/// it printed (root, without sudo, reads the same file).
#[test]
fn report_reads_only_what_the_invoker_may_read() {
    const TEST: &str = "report_reads_only_what_the_invoker_may_read";
    require_root!(TEST);
    let lab = Lab::new();
    let cap = capture(&lab);
    let secret = lab.p("secret.ntrace");
    std::fs::copy(&cap, &secret).unwrap();
    std::os::unix::fs::chown(&secret, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = run(&lab, &["report", &secret], &SUDO);
    assert_refused(&o, "Permission denied", "report of a root-only capture");
    let o = run(&lab, &["report", "--diff", &cap, &secret], &SUDO);
    assert_refused(
        &o,
        "Permission denied",
        "report --diff with a root-only capture",
    );
    let o = run(&lab, &["report", &secret], &[]);
    assert!(o.status.success(), "root reads it: {}", text(&o));
}

/// The command to trace is looked for with the rights of the user it runs as (root's would
/// tell them what a directory they cannot search holds), and `--cgroup` stays under the cgroup2
/// mount.
#[test]
fn a_traced_command_is_looked_for_as_its_user() {
    const TEST: &str = "a_traced_command_is_looked_for_as_its_user";
    require_root!(TEST);
    let lab = Lab::new();
    let hidden = lab.protected.join("hidden");
    std::fs::create_dir(&hidden).unwrap();
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o700)).unwrap();
    let prog = hidden.join("prog");
    std::fs::write(&prog, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = prog.to_str().unwrap();
    let o = run(&lab, &["stat", "-o", &lab.t("s"), "--", prog], &SUDO);
    // After the line that says who it runs as.
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        err.trim_end()
            .lines()
            .last()
            .is_some_and(|l| l.contains("command not found")),
        "{}",
        text(&o)
    );
    // Root without sudo finds and runs it.
    let o = run(&lab, &["stat", "-o", &lab.t("s"), "--", prog], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(
        &lab,
        &["stat", "-d", "1", "--cgroup", "/../../../etc"],
        &SUDO,
    );
    assert_refused(&o, "'..'", "--cgroup with ..");
}

/// numatrace's trampoline for traced commands (`__exec-gated`) is reachable from the command
/// line: under sudo it must run nothing for a caller but the numatrace that started it, or
/// `echo g | sudo numatrace __exec-gated 0 - -- /bin/sh` would be a root shell.
#[test]
fn the_trampoline_serves_only_the_numatrace_that_started_it() {
    const TEST: &str = "the_trampoline_serves_only_the_numatrace_that_started_it";
    require_root!(TEST);
    let lab = Lab::new();
    let mark = lab.t("ran-as-root");
    let script = format!("id -u > {mark}");
    for identity in ["-", "0:0:0:2f:root"] {
        for fd in ["0", "1", "2"] {
            let mut c = Command::new(common::numatrace_bin());
            c.args(["__exec-gated", fd, identity, "--", "/bin/sh", "-c", &script])
                .current_dir(&lab.theirs)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in SUDO {
                c.env(k, v);
            }
            let mut child = c.spawn().unwrap();
            let _ = child.stdin.take().unwrap().write_all(b"g");
            let o = child.wait_with_output().unwrap();
            assert_eq!(
                o.status.code(),
                Some(125),
                "fd {fd}, {identity}: {}",
                text(&o)
            );
            assert!(
                String::from_utf8_lossy(&o.stderr).contains("numatrace's own trampoline"),
                "{}",
                text(&o)
            );
            assert!(!Path::new(&mark).exists(), "the command ran: {}", text(&o));
        }
    }
    // The real thing still works: a traced command runs (as nobody).
    let o = run(
        &lab,
        &["stat", "-o", &lab.t("s"), "--", "/bin/sh", "-c", &script],
        &SUDO,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&mark).unwrap().trim(), "65534");
}

/// `check`'s reproducers run as root, so under sudo numatrace-workload comes only from beside
/// numatrace, never from the invoker's PATH, and only from a file root owns that others cannot
/// write.
#[test]
fn the_reproducers_never_come_from_the_invokers_path() {
    const TEST: &str = "the_reproducers_never_come_from_the_invokers_path";
    require_root!(TEST);
    let lab = Lab::new();
    // numatrace alone in a root directory, and a fake workload on a PATH nobody controls.
    let alone = lab.protected.join("bin");
    std::fs::create_dir(&alone).unwrap();
    let bin = alone.join("numatrace");
    std::fs::copy(common::numatrace_bin(), &bin).unwrap();
    let fake = lab.theirs.join("numatrace-workload");
    let mark = lab.t("fake-ran");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh
id -u > {mark}
"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&fake, Some(NOBODY), Some(NOBODY)).unwrap();
    let path = format!("{}:/usr/bin:/bin", lab.theirs.display());
    let o = Command::new(&bin)
        .args(["check", "--patch", "002", "--duration", "1s"])
        .current_dir(&lab.theirs)
        .envs(SUDO)
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not next to numatrace"),
        "{}",
        text(&o)
    );
    assert!(!Path::new(&mark).exists(), "the fake ran: {}", text(&o));
    // Beside numatrace but writable by others: refused too.
    let beside = alone.join("numatrace-workload");
    std::fs::copy(&fake, &beside).unwrap();
    std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = Command::new(&bin)
        .args(["check", "--patch", "002", "--duration", "1s"])
        .current_dir(&lab.theirs)
        .envs(SUDO)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("writable by group or others"),
        "{}",
        text(&o)
    );
    assert!(!Path::new(&mark).exists(), "the fake ran: {}", text(&o));
}

/// Hole 3: `--web.config.file` (and the TLS files it names) is read with nobody's rights, only
/// from a regular file root or the invoker owns that group and others cannot write, and an
/// error says where and what kind of problem, never the file's text.
#[test]
fn the_web_config_is_read_as_the_invoker_from_trusted_files_only() {
    const TEST: &str = "the_web_config_is_read_as_the_invoker_from_trusted_files_only";
    require_root!(TEST);
    let lab = Lab::new();
    let serve = |config: &str, env: &[(&str, &str)]| {
        run_within(
            &lab,
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--web.config.file",
                config,
            ],
            env,
            Duration::from_secs(20),
        )
    };
    let secret_line = "root:$6$s3cretsalt$hashhashhash:20228:0:99999:7:::";
    let shadow = lab.p("shadow");
    std::fs::write(&shadow, format!("{secret_line}\n")).unwrap();
    std::fs::set_permissions(&shadow, std::fs::Permissions::from_mode(0o600)).unwrap();
    let quoted = |o: &Output| {
        let all = text(o);
        all.contains("s3cret") || all.contains("20228") || all.contains("hashhash")
    };
    // Under sudo: nobody cannot read it, and is told only that.
    let o = serve(&shadow, &SUDO);
    assert_refused(&o, "Permission denied", "a root-only file under sudo");
    assert!(!quoted(&o), "{}", text(&o));
    // Root reading it without sudo: the error names a line, not the text.
    let o = serve(&shadow, &[]);
    assert_refused(&o, "line 1:", "a shadow-like file as root");
    assert!(!quoted(&o), "{}", text(&o));

    // A file nobody owns and anyone can write: refused, whoever runs it.
    let open = lab.t("open.yml");
    std::fs::write(&open, "basic_auth_users:\n  prom: x\n").unwrap();
    std::os::unix::fs::chown(&open, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_refused(
        &serve(&open, &SUDO),
        "writable by group or others",
        "0666 under sudo",
    );
    // Closed to others: nobody's own file is theirs to use (its error is the content's)...
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_refused(
        &serve(&open, &SUDO),
        "line 2: basic_auth_users: the user's password is not a bcrypt hash",
        "the invoker's own file",
    );
    // ...but not root's without sudo: someone else's file does not steer root.
    assert_refused(
        &serve(&open, &[]),
        "owned by uid 65534",
        "nobody's file, as root",
    );

    // A FIFO is refused, not waited on.
    let fifo = lab.t("fifo.yml");
    let c = std::ffi::CString::new(fifo.as_str()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::chown(&fifo, Some(NOBODY), Some(NOBODY)).unwrap();
    assert_refused(&serve(&fifo, &SUDO), "not a regular file", "a FIFO");

    // The TLS key is read as nobody too: root's key file is out of their reach.
    let key = lab.p("tls.key");
    std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\ns3cret\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cert = lab.t("tls.crt");
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::os::unix::fs::chown(&cert, Some(NOBODY), Some(NOBODY)).unwrap();
    let tls = lab.t("tls.yml");
    std::fs::write(
        &tls,
        format!("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"),
    )
    .unwrap();
    std::os::unix::fs::chown(&tls, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&tls, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = serve(&tls, &SUDO);
    assert_refused(&o, "Permission denied", "a root-only key file under sudo");
    assert!(!quoted(&o), "{}", text(&o));
}

/// Hole 4: `NUMATRACE_LOG_FILE` is created exclusively (the invoker's, 0600), or appended to
/// only when it is a regular file root or the invoker owns that others cannot write; a planted
/// file, a symlink or a FIFO is refused at once with one line.
#[test]
fn the_log_file_cannot_be_planted_or_block() {
    const TEST: &str = "the_log_file_cannot_be_planted_or_block";
    require_root!(TEST);
    let lab = Lab::new();
    // A world-writable directory, as /tmp is.
    let ww = lab.theirs.join("ww");
    std::fs::create_dir(&ww).unwrap();
    std::fs::set_permissions(&ww, std::fs::Permissions::from_mode(0o777)).unwrap();
    let ww = |n: &str| ww.join(n).to_str().unwrap().to_owned();
    // What `stat` logs at debug level in one short window.
    let logged = |log: &str, env: &[(&str, &str)]| {
        let mut env = env.to_vec();
        env.push(("NUMATRACE_LOG_FILE", log));
        run_within(
            &lab,
            &["--log-level", "debug", "stat", "-d", "1"],
            &env,
            Duration::from_secs(30),
        )
    };
    let planted = ww("planted");
    std::fs::write(&planted, "").unwrap();
    std::os::unix::fs::chown(&planted, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
    // Refused for its mode under sudo (it is nobody's), for its owner as root.
    for (env, why) in [
        (&SUDO[..], "writable by group or others"),
        (&[], "owned by uid 65534"),
    ] {
        let o = logged(&planted, env);
        assert_refused(&o, why, "a planted 0666 log file");
        assert_eq!(std::fs::metadata(&planted).unwrap().len(), 0);
    }
    let fifo = ww("fifo");
    let c = std::ffi::CString::new(fifo.as_str()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&fifo, Some(NOBODY), Some(NOBODY)).unwrap();
    for env in [&SUDO[..], &[]] {
        let o = logged(&fifo, env);
        assert_refused(&o, "not a regular file", "a FIFO as log file");
    }
    let link = ww("link");
    std::os::unix::fs::symlink(lab.p("precious"), &link).unwrap();
    let o = logged(&link, &[]);
    assert_refused(&o, "symbolic link", "a symlink as log file");
    assert_eq!(
        std::fs::read_to_string(lab.p("precious")).unwrap(),
        "precious\n"
    );
    // Into root's directory under sudo: refused, nothing created.
    let o = logged(&lab.p("numatrace.log"), &SUDO);
    assert_refused(&o, "Permission denied", "a log file in root's directory");
    assert!(!Path::new(&lab.p("numatrace.log")).exists());

    // A fresh name: created, nobody's, 0600, with the log in it; then appended to.
    let fresh = ww("fresh.log");
    let o = logged(&fresh, &SUDO);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(owner_and_mode(&fresh), (NOBODY, 0o600));
    let first = std::fs::metadata(&fresh).unwrap().len();
    assert!(first > 0, "nothing logged");
    let o = logged(&fresh, &SUDO);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        std::fs::metadata(&fresh).unwrap().len() > first,
        "not appended"
    );
}

fn basic(creds: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(creds)
}

/// One scrape with `creds`, as curl makes it: the status, or the error (a reset, an empty
/// reply) that a locked-out scraper saw.
fn scrape(addr: &str, creds: &str) -> std::io::Result<u16> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic {}\r\n\
         Connection: close\r\n\r\n",
        basic(creds)
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no HTTP status in {text:?}")))
}

/// A connection to `addr` from the loopback address `src` (all of 127/8 is loopback on
/// Linux): the flood comes from another client address than the scraper.
fn connect_from(src: [u8; 4], addr: &str) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd as _;
    let dst: std::net::SocketAddrV4 = addr.parse().map_err(std::io::Error::other)?;
    let sockaddr = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls with valid sockaddr_in structs of `len` bytes; the descriptor
    // is owned by the TcpStream from here on (closed with it on every path).
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let from = sockaddr(src, 0);
        let to = sockaddr(dst.ip().octets(), dst.port());
        if libc::bind(fd, (&from as *const libc::sockaddr_in).cast(), len) != 0
            || libc::connect(fd, (&to as *const libc::sockaddr_in).cast(), len) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// Until `stop`: rounds of 64 connections from 127.0.0.2, each pipelining 15 `GET /metrics`
/// with a wrong password (`same`: one password throughout, as the probe; else a new
/// one per request, as a guesser) and never reading, held open for a while.
fn flood(addr: &str, stop: &AtomicBool, same: bool) -> usize {
    let mut round = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut held = Vec::new();
        for conn in 0..64 {
            let Ok(mut s) = connect_from([127, 0, 0, 2], addr) else {
                continue;
            };
            let mut burst = String::new();
            for req in 0..15 {
                let password = if same {
                    "wrong".to_owned()
                } else {
                    format!("guess-{round}-{conn}-{req}")
                };
                burst.push_str(&format!(
                    "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {}\r\n\r\n",
                    basic(&format!("prom:{password}"))
                ));
            }
            let _ = s.write_all(burst.as_bytes());
            held.push(s);
        }
        std::thread::sleep(Duration::from_millis(500));
        drop(held);
        round += 1;
    }
    round
}

/// Hole 2: while clients without the password pipeline wrong ones on every connection slot
/// and never read, a scraper with the right password gets 200 every time (the probe
/// made it fail 5 times of 5); a user who had not scraped before gets in at once while the
/// wrong password repeats, and at the latest on a retry while every request is a new guess.
#[test]
fn wrong_passwords_cannot_lock_the_right_one_out() {
    const TEST: &str = "wrong_passwords_cannot_lock_the_right_one_out";
    require_root!(TEST);
    let lab = Lab::new();
    let config = lab.p("web.yml");
    let hash = |p: &str| bcrypt::hash(p, 10).unwrap();
    std::fs::write(
        &config,
        format!(
            "basic_auth_users:\n  prom: {}\n  first: {}\n  second: {}\n",
            hash("right"),
            hash("first right"),
            hash("second right")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let serve = Serve::start(&["--web.config.file", &config]);
    assert_eq!(scrape(&serve.addr, "prom:right").unwrap(), 200);
    assert_eq!(scrape(&serve.addr, "prom:wrong").unwrap(), 401);
    for (same, fresh, tries) in [
        (true, "first:first right", 1),
        (false, "second:second right", 2),
    ] {
        let stop = AtomicBool::new(false);
        let (results, fresh_result, rounds) = std::thread::scope(|s| {
            let attack = s.spawn(|| flood(&serve.addr, &stop, same));
            std::thread::sleep(Duration::from_secs(1));
            let mut results = Vec::new();
            for _ in 0..8 {
                results.push(scrape(&serve.addr, "prom:right").map_err(|e| e.to_string()));
                std::thread::sleep(Duration::from_millis(250));
            }
            // A credential never verified before: bcrypt is free once the repeated wrong
            // password is remembered; against new guesses from one address, that address waits
            // a second after each wrong one, so a retry finds bcrypt free.
            let mut fresh_result = Vec::new();
            for _ in 0..tries {
                let r = scrape(&serve.addr, fresh).map_err(|e| e.to_string());
                fresh_result.push(r.clone());
                if r == Ok(200) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(150));
            }
            stop.store(true, Ordering::Relaxed);
            (results, fresh_result, attack.join().unwrap())
        });
        assert!(rounds >= 2, "the flood ran {rounds} rounds");
        assert!(
            results.iter().all(|r| *r == Ok(200)),
            "same wrong password: {same}: {results:?}"
        );
        assert_eq!(
            fresh_result.last(),
            Some(&Ok(200)),
            "same wrong password: {same}: {fresh_result:?}"
        );
    }
    // Still serving afterwards.
    assert_eq!(scrape(&serve.addr, "prom:right").unwrap(), 200);
}
