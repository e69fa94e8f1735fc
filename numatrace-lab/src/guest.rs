//! PID 1 of a lab guest: numatrace itself, started by the kernel as `/init` (a link to
//! `/bin/numatrace`). It mounts what a distribution mounts, runs `numatrace ARGS` (from
//! `/lab/args.json`) in `/out`, sends the guest's facts, the run's output and every file it left in
//! `/out` back on ttyS1 ([`crate::results`]), and powers the guest off. Nothing else runs.

use std::{
    ffi::CString,
    fs,
    io::Write as _,
    os::unix::fs::OpenOptionsExt as _,
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use crate::results;

/// The run's arguments in the initramfs (a JSON array of strings: no shell, no quoting).
pub const ARGS: &str = "lab/args.json";
/// Where the run starts: the files it leaves here come back.
pub const OUT: &str = "/out";
/// Console lines the host reads as progress.
pub const SAY: &str = "numatrace-lab:";

/// Whether this process is a lab guest's init: PID 1, started as `/init`, with the lab's
/// arguments in place (numatrace is PID 1 in containers too, where none of that holds).
pub fn is_lab_init(argv0: &str) -> bool {
    std::process::id() == 1 && argv0 == "/init" && Path::new("/").join(ARGS).exists()
}

/// Runs the guest and powers it off; never returns.
pub fn run() -> ! {
    if let Err(e) = run_inner() {
        println!("{SAY} guest init failed: {e:#}");
    }
    // SAFETY: plain syscalls; the filesystems are synced first.
    unsafe {
        libc::sync();
        libc::reboot(libc::RB_POWER_OFF);
    }
    loop {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}

fn mount(source: &str, target: &str, fstype: &str) {
    let _ = fs::create_dir_all(target);
    let c = |s: &str| CString::new(s).expect("no NUL");
    let (source, target_c, fstype) = (c(source), c(target), c(fstype));
    // SAFETY: valid C strings; a filesystem the kernel lacks fails and is left out.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target_c.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            println!("{SAY} note: mount {target}: {e}");
        }
    }
}

/// ttyS1, raw (no newline translation), created if devtmpfs did not.
fn data_port() -> Result<fs::File> {
    let path = "/dev/ttyS1";
    if !Path::new(path).exists() {
        let c = CString::new(path).expect("no NUL");
        // SAFETY: a valid path; ttyS1 is char 4:65.
        unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(4, 65)) };
    }
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(path)
        .context("opening ttyS1 (the lab's data port)")?;
    use std::os::fd::AsRawFd as _;
    // SAFETY: a termios of the open tty, made raw and written back.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(f.as_raw_fd(), &mut t) == 0 {
            libc::cfmakeraw(&mut t);
            libc::cfsetspeed(&mut t, libc::B115200);
            libc::tcsetattr(f.as_raw_fd(), libc::TCSANOW, &t);
        }
    }
    Ok(f)
}

fn release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn nodes() -> usize {
    fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.strip_prefix("node")
                        .is_some_and(|r| !r.is_empty() && r.bytes().all(|c| c.is_ascii_digit()))
                })
                .count()
        })
        .unwrap_or(0)
}

fn run_inner() -> Result<()> {
    mount("proc", "/proc", "proc");
    mount("sys", "/sys", "sysfs");
    mount("dev", "/dev", "devtmpfs");
    mount("tmp", "/tmp", "tmpfs");
    mount("debugfs", "/sys/kernel/debug", "debugfs");
    mount("tracefs", "/sys/kernel/tracing", "tracefs");
    mount("cgroup2", "/sys/fs/cgroup", "cgroup2");
    mount("bpf", "/sys/fs/bpf", "bpf");
    mount("run", "/run", "tmpfs");
    let mut port = data_port()?;
    let args: Vec<String> = serde_json::from_slice(
        &fs::read(Path::new("/").join(ARGS)).context("reading the lab's arguments")?,
    )
    .context("the lab's arguments")?;
    println!(
        "{SAY} guest up: kernel {}, {} NUMA nodes",
        release(),
        nodes()
    );
    let facts = serde_json::json!({
        "release": release(),
        "nodes": nodes(),
        "numa_balancing": fs::read_to_string("/proc/sys/kernel/numa_balancing")
            .map(|s| s.trim().to_owned()).unwrap_or_default(),
        "btf": Path::new("/sys/kernel/btf/vmlinux").exists(),
    });
    results::send(&mut port, "guest.json", facts.to_string().as_bytes())?;
    fs::create_dir_all(OUT)?;
    println!("{SAY} running numatrace {}", args.join(" "));
    let stdout = fs::File::create("/tmp/lab.stdout")?;
    let stderr = fs::File::create("/tmp/lab.stderr")?;
    let status = Command::new("/bin/numatrace")
        .args(&args)
        .current_dir(OUT)
        .env_clear()
        .env("PATH", "/bin")
        .env("HOME", "/tmp")
        .env("TMPDIR", "/tmp")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .status()
        .context("starting /bin/numatrace")?;
    let rc = status
        .code()
        .map_or_else(|| format!("{status}"), |c| c.to_string());
    println!("{SAY} collecting (numatrace exited: {rc})");
    results::send(&mut port, "rc", rc.as_bytes())?;
    for (name, path) in [("stdout", "/tmp/lab.stdout"), ("stderr", "/tmp/lab.stderr")] {
        results::send(&mut port, name, &fs::read(path).unwrap_or_default())?;
    }
    let mut skipped = Vec::new();
    let mut entries: Vec<_> = fs::read_dir(OUT)?.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let reserved = ["guest.json", "rc", "stdout", "stderr"].contains(&name.as_str());
        let too_big = match e.metadata() {
            Ok(m) => m.len() > results::MAX_FILE as u64,
            Err(_) => true,
        };
        if !e.file_type()?.is_file()
            || !results::plain_name(&format!("out.{name}"))
            || reserved
            || too_big
        {
            skipped.push(name);
            continue;
        }
        results::send(&mut port, &format!("out.{name}"), &fs::read(e.path())?)?;
    }
    if !skipped.is_empty() {
        println!(
            "{SAY} not sent (not a file, not a plain name of at most 96 bytes, or over 1 GiB): {}",
            skipped.join(", ").escape_debug()
        );
    }
    results::end(&mut port)?;
    port.sync_all().ok();
    if !status.success() && status.code().is_none() {
        bail!("numatrace ended by {status}");
    }
    let _ = std::io::stdout().flush();
    Ok(())
}
