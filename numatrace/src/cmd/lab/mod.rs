//! `numatrace lab`: each `--kernel` booted in a QEMU guest with real NUMA nodes, numatrace as
//! the guest's init running the subcommand after `--`, the results brought back and shown side
//! by side. The machinery (kernels, initramfs, QEMU, the guest's init) is `numatrace-lab`'s,
//! shared with the test harness; this module is the command: options, preflight, progress,
//! files and output.

mod pack;
mod show;

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};
use numatrace_lab::{
    cache_dir,
    config::{self, Config},
    guest, interrupt,
    machine::{self, Accel, Boot, Machine, Outcome},
    results,
    spec::{self, ConfigFrom, KernelSpec},
};

use self::show::ImageResult;
use crate::{cli::LabArgs, text_escape::Escaped};

/// Subcommands that make sense in a guest.
const SUBCOMMANDS: &[&str] = &["check", "stat", "record", "probes"];

/// A KVM that has not shown the guest's first line by then is taken for one that does not
/// boot guests here (nested KVM that aborts or hangs after the BIOS); TCG is used instead.
const KVM_SIGN_WITHIN: std::time::Duration = std::time::Duration::from_secs(45);

pub fn run(args: &LabArgs) -> Result<i32> {
    if args.config_fragment {
        print!("{}", config::fragment());
        return Ok(0);
    }
    let subcommand = args.command.first().map(String::as_str).unwrap_or_default();
    if !SUBCOMMANDS.contains(&subcommand) {
        bail!(
            "lab runs check, stat, record or probes in each guest (after `--`), not {:?}",
            Escaped(subcommand).to_string()
        );
    }
    // A lab guest runs this very binary as PID 1: only an x86-64 numatrace has x86-64 guests.
    if numatrace_lab::arch::Arch::host() != numatrace_lab::arch::Arch::Amd64 {
        bail!(
            "lab boots x86-64 guests running this numatrace as PID 1, and this is an {} build: \
             run lab from an x86-64 machine",
            numatrace_lab::arch::Arch::host()
        );
    }
    // `record --html FILE` is the lab's, not the guest's: the page of the captures (an A/B of
    // the first two) is written here after the guests ran; a FILE that exists is refused now.
    let (command, html) = take_html(&args.command)?;
    if let Some(h) = &html
        && fs::symlink_metadata(h).is_ok()
    {
        bail!(
            "--html {}: the file exists (lab never overwrites; choose another name)",
            Escaped(&h.display().to_string())
        );
    }
    home_of_the_user();
    let specs: Vec<(String, KernelSpec)> = args
        .kernels
        .iter()
        .map(|k| Ok((k.clone(), KernelSpec::parse(k)?)))
        .collect::<Result<_>>()?;
    let m = Machine {
        nodes: args.nodes,
        cpus: args.cpus.unwrap_or(args.nodes),
        node_mib: args.node_mem,
        slow_mib: args.slow_node,
        accel: Accel::Tcg,
        arch: numatrace_lab::arch::Arch::Amd64,
    };
    m.check()?;
    let n = specs.len();
    let say_for = |i: usize, label: &str, what: &str| {
        eprintln!("[{}/{n}] {}: {}", i + 1, Escaped(label), Escaped(what));
    };
    interrupt::install();
    // Every image fetched and checked before the first boot: a wrong file or a config that
    // cannot run is said at once, not after another image's minutes in a guest.
    let mut prepared = Vec::new();
    for (i, (label, spec)) in specs.iter().enumerate() {
        prepared.push(prepare(label, spec, &|s| say_for(i, label, s))?);
        if interrupt::requested() {
            eprintln!("numatrace lab: interrupted before booting");
            return Ok(130);
        }
    }
    let bootable = prepared.iter().any(|p| p.result.failure.is_none());
    if bootable {
        machine::qemu_present()?;
    }
    let out = out_dir(args, subcommand)?;
    if let Some(dir) = &out {
        for (i, (label, _)) in specs.iter().enumerate() {
            let prefix = format!("{}-{}.", i + 1, slug(label));
            if fs::read_dir(dir)?
                .filter_map(Result::ok)
                .any(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            {
                bail!(
                    "--out {} already holds results of kernel {} ({prefix}*), which are never \
                     overwritten: choose another directory or remove them",
                    dir.display(),
                    i + 1
                );
            }
        }
    }
    remove_stale_scratch();
    let scratch = tempfile::Builder::new()
        .prefix("numatrace-lab.")
        .tempdir()
        .context("a scratch directory")?;
    fs::write(scratch.path().join("pid"), std::process::id().to_string())?;
    let initrd = scratch.path().join("initramfs.cpio.gz");
    if bootable {
        // Each kernel's config where numatrace looks for it (/boot/config-RELEASE): captures
        // quote it even without IKCONFIG_PROC.
        let configs: Vec<(String, String)> = prepared
            .iter()
            .filter_map(|p| Some((p.release.clone()?, p.config.clone()?)))
            .collect();
        let packed = pack::pack(&guest_args(&command, args.json), &configs, &initrd)?;
        if !packed.workload {
            eprintln!(
                "numatrace lab: no numatrace-workload beside numatrace: check's reproducers and \
                 the workloads are missing in the guests"
            );
        }
    }
    let mut accel = match args.accel.as_str() {
        "kvm" => Accel::Kvm,
        "tcg" => Accel::Tcg,
        _ if machine::kvm_usable() && !kvm_known_broken() => Accel::Kvm,
        _ => Accel::Tcg,
    };
    let mut results = Vec::new();
    for (i, p) in prepared.into_iter().enumerate() {
        let label = p.result.kernel.clone();
        let say = |what: &str| say_for(i, &label, what);
        let r = if p.result.failure.is_some() {
            p.result
        } else {
            boot_image(
                p,
                &m,
                &mut accel,
                args,
                &initrd,
                scratch.path(),
                out.as_deref(),
                i + 1,
                &say,
            )?
        };
        say(&match &r.failure {
            None => format!(
                "done in {} s (exit status {})",
                r.elapsed_secs,
                Escaped(r.rc.as_deref().unwrap_or("-"))
            ),
            Some(why) => format!(
                "FAILED after {} s: {}",
                r.elapsed_secs,
                Escaped(why.lines().next().unwrap_or_default())
            ),
        });
        results.push(r);
        if interrupt::requested() {
            eprintln!("numatrace lab: interrupted: QEMU stopped, scratch files removed");
            return Ok(130);
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&show::document(&results))?
        );
    } else {
        for r in &results {
            print!("{}", show::image_text(r, subcommand, has_json(&command)));
            println!();
        }
        if results.len() > 1 {
            print!("{}", show::table(&results, subcommand));
        }
        if subcommand == "record" {
            diff_first_two(&results, html.as_deref())?;
        }
    }
    Ok(if results.iter().all(ImageResult::ok) {
        0
    } else {
        1
    })
}

/// Splits `--html FILE` (or `--html=FILE`) off a record command, before any `--`.
fn take_html(command: &[String]) -> Result<(Vec<String>, Option<PathBuf>)> {
    let mut out = Vec::with_capacity(command.len());
    let mut html = None;
    let mut it = command.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            out.push(a.clone());
            out.extend(it.by_ref().cloned());
            break;
        }
        if a == "--html" || a.starts_with("--html=") {
            if command.first().map(String::as_str) != Some("record") {
                bail!("--html is for `lab … -- record`: the page of its captures");
            }
            let v = match a.strip_prefix("--html=") {
                Some(v) => v.to_owned(),
                None => it
                    .next()
                    .cloned()
                    .context("--html needs a FILE (the page to write)")?,
            };
            html = Some(PathBuf::from(v));
            continue;
        }
        out.push(a.clone());
    }
    Ok((out, html))
}

fn has_json(command: &[String]) -> bool {
    command
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// The arguments numatrace gets in the guest: check always with --json (the lab renders its
/// verdicts and the table from it), stat and probes with --json when the lab's output is
/// JSON, record with `-o capture.ntrace` unless it names its own file (relative: in /out).
fn guest_args(command: &[String], json: bool) -> Vec<String> {
    let mut a = command.to_vec();
    let sub = a[0].clone();
    let wants_json = sub == "check" || (json && (sub == "stat" || sub == "probes"));
    if wants_json && !has_json(command) {
        a.insert(1, "--json".into());
    }
    let names_output = command
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-o" || a == "--output" || a.starts_with("--output=") || a.starts_with("-o"));
    if sub == "record" && !names_output {
        a.insert(1, "-o".into());
        a.insert(2, "capture.ntrace".into());
    }
    a
}

/// `--out`, or `./numatrace-lab` for record (its capture must land somewhere); a directory that
/// is not a symlink.
fn out_dir(args: &LabArgs, subcommand: &str) -> Result<Option<PathBuf>> {
    let dir = match (&args.out, subcommand) {
        (Some(d), _) => d.clone(),
        (None, "record") => PathBuf::from("numatrace-lab"),
        (None, _) => return Ok(None),
    };
    match fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!(
            "--out {}: not a directory (a symlink is refused)",
            dir.display()
        ),
        Err(_) => {
            fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?
        }
    }
    Ok(Some(dir))
}

/// Under sudo the lab runs as the invoker (see main), but sudo left root's HOME: the kernel
/// cache goes in the invoker's own home, where they can write it.
fn home_of_the_user() {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if uid == 0 || std::env::var_os("NUMATRACE_CACHE").is_some() {
        return;
    }
    if let Ok(Some(user)) = crate::invoker::lookup_uid(uid)
        && std::env::var_os("HOME").as_deref() != Some(user.home.as_os_str())
    {
        // SAFETY: `lab` runs no other thread yet (no runtime, before any boot or fetch).
        unsafe {
            std::env::set_var("HOME", &user.home);
            std::env::remove_var("XDG_CACHE_HOME");
        }
    }
}

/// A file name part out of what the user wrote after --kernel.
fn slug(label: &str) -> String {
    let s: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    s.trim_matches(['.', '_']).chars().take(40).collect()
}

/// Writes `bytes` to a new file in `dir` (never over one that exists).
fn keep(dir: &Path, name: &str, bytes: &[u8]) -> Result<String> {
    let path = dir.join(name);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| {
            format!(
                "{}: exists or cannot be created (never overwritten)",
                path.display()
            )
        })?;
    f.write_all(bytes)?;
    Ok(path.display().to_string())
}

/// Scratch directories of lab runs killed outright (SIGKILL leaves no chance to clean up):
/// ours (same owner), with a `pid` file naming a process that no longer exists.
fn remove_stale_scratch() {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(dir) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for e in dir.filter_map(Result::ok) {
        let path = e.path();
        let ours = e
            .file_name()
            .to_string_lossy()
            .starts_with("numatrace-lab.")
            && fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == me);
        let dead = fs::read_to_string(path.join("pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
            .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
        if ours && dead {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

fn kvm_marker() -> PathBuf {
    cache_dir().join("lab").join("kvm-does-not-boot")
}

fn host_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Whether KVM failed to boot a guest before on this host kernel.
fn kvm_known_broken() -> bool {
    fs::read_to_string(kvm_marker()).is_ok_and(|s| s.lines().next() == Some(&host_release()))
}

fn remember_kvm_broken(why: &str) {
    let p = kvm_marker();
    if let Some(d) = p.parent() {
        let _ = fs::create_dir_all(d);
    }
    let _ = fs::write(p, format!("{}\n{why}\n", host_release()));
}

/// An image resolved and its config checked, ready to boot (or refused: `result.failure`).
struct Prepared {
    image: PathBuf,
    /// `uname -r` from the image's header, and its config, if known.
    release: Option<String>,
    config: Option<String>,
    result: ImageResult,
}

fn prepare(label: &str, spec: &KernelSpec, say: &dyn Fn(&str)) -> Result<Prepared> {
    if matches!(spec, KernelSpec::Line(_)) {
        say("fetching (cached after the first time)");
    }
    let resolved = spec::resolve(spec, label, say)?;
    let mut r = ImageResult {
        kernel: label.to_owned(),
        release: resolved
            .version
            .as_deref()
            .map(numatrace_lab::image::release)
            .unwrap_or("?")
            .to_owned(),
        missing: Vec::new(),
        config_from: match &resolved.config_from {
            ConfigFrom::File(p) => p.display().to_string(),
            ConfigFrom::Embedded => "embedded (IKCONFIG)".into(),
            ConfigFrom::None => "none found".into(),
        },
        rc: None,
        failure: None,
        stdout: String::new(),
        stderr: String::new(),
        files: Vec::new(),
        elapsed_secs: 0,
    };
    match &resolved.config {
        Some(text) => {
            let c = Config::parse(text);
            let missing = c.missing();
            for need in &missing {
                say(&format!(
                    "CONFIG_{} is off: {}",
                    need.option,
                    config::without(need)
                ));
            }
            r.missing = missing.iter().map(|n| n.option).collect();
            if missing.iter().any(|n| n.fatal) {
                r.failure = Some(format!(
                    "not booted: nothing could run without {} (numatrace lab --config-fragment)",
                    missing
                        .iter()
                        .filter(|n| n.fatal)
                        .map(|n| format!("CONFIG_{}", n.option))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        None => say(
            "no config found (no .config, no config-* beside it, no IKCONFIG): preflight skipped",
        ),
    }
    Ok(Prepared {
        image: resolved.image,
        release: resolved
            .version
            .as_deref()
            .map(|v| numatrace_lab::image::release(v).to_owned()),
        config: resolved.config,
        result: r,
    })
}

#[allow(clippy::too_many_arguments)]
fn boot_image(
    p: Prepared,
    m: &Machine,
    accel: &mut Accel,
    args: &LabArgs,
    initrd: &Path,
    scratch: &Path,
    out: Option<&Path>,
    index: usize,
    say: &dyn Fn(&str),
) -> Result<ImageResult> {
    let Prepared {
        image,
        result: mut r,
        ..
    } = p;
    // From this boot on (the fetch is said apart, and another image's boot is not this one's).
    let started = Instant::now();
    let label = r.kernel.clone();
    let label = label.as_str();
    let slug = format!("{index}-{}", slug(label));
    let data = scratch.join(format!("{slug}.data"));
    let mut append = format!(
        "console=ttyS0 quiet numa_balancing=enable panic=-1 oops=panic {}",
        args.cmdline
    );
    append = append.trim_end().to_owned();
    let mut machine = m.clone();
    let booted = loop {
        machine.accel = *accel;
        say(&format!(
            "booting ({}, {} nodes{})",
            if *accel == Accel::Kvm {
                "KVM"
            } else {
                "TCG: emulated, slower"
            },
            machine.nodes,
            if machine.slow_mib.is_some() {
                " and a slow CPU-less one"
            } else {
                ""
            }
        ));
        let _ = fs::remove_file(&data);
        let mut console_echo = |line: &str| {
            if line.starts_with(guest::SAY) {
                say(line.trim_start_matches(guest::SAY).trim());
            } else if args.console {
                eprintln!("  | {}", Escaped(line));
            }
        };
        let b = Boot {
            kernel: &image,
            initrd,
            append: &append,
            timeout: args.timeout,
            data: Some(data.clone()),
            sign: (*accel == Accel::Kvm && args.accel == "auto")
                .then_some((guest::SAY, KVM_SIGN_WITHIN)),
        };
        let booted = machine.boot(&b, &mut console_echo)?;
        let kvm_failed = *accel == Accel::Kvm
            && args.accel == "auto"
            && !booted.console.contains(guest::SAY)
            && matches!(booted.outcome, Outcome::NoSign | Outcome::Failed(_));
        // QEMU's multi-threaded TCG races on kernel text patching now and then (an int3
        // Oops at a patched instruction; see tcg_text_patch_flake): once, single-threaded.
        if *accel == Accel::Tcg
            && machine.accel == Accel::Tcg
            && machine::tcg_text_patch_flake(&booted.console)
        {
            say(
                "the guest hit QEMU TCG's int3 text-patching race (not the kernel's fault): \
                 booting it once more with single-threaded TCG (slower)",
            );
            machine.accel = Accel::TcgSingle;
            let booted = machine.boot(&b, &mut console_echo)?;
            break booted;
        }
        if kvm_failed {
            let why = format!("{:?}", booted.outcome);
            remember_kvm_broken(&why);
            say("KVM did not boot a guest on this host: using TCG from now on (emulated, slower)");
            *accel = Accel::Tcg;
            continue;
        }
        break booted;
    };
    r.elapsed_secs = started.elapsed().as_secs();
    if let Some(dir) = out {
        r.files.push(keep(
            dir,
            &format!("{slug}.console.log"),
            booted.console.as_bytes(),
        )?);
    }
    let received = results::receive(&fs::read(&data).unwrap_or_default());
    let tail = || {
        let lines: Vec<&str> = booted.console.lines().collect();
        let from = lines.len().saturating_sub(15);
        lines[from..].join("\n")
    };
    let received = match received {
        Ok(rcv) => rcv,
        Err(e) => {
            r.failure = Some(format!("the guest's results were damaged: {e:#}"));
            return Ok(r);
        }
    };
    if let Some(facts) = received
        .get("guest.json")
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
    {
        if let Some(rel) = facts["release"].as_str() {
            r.release = rel.to_owned();
        }
        let nodes = facts["nodes"].as_u64().unwrap_or(0);
        if nodes < u64::from(machine.node_count()) {
            r.failure = Some(format!(
                "the guest saw {nodes} NUMA node(s) of {}: the kernel lacks NUMA or ACPI NUMA \
                 (CONFIG_NUMA, CONFIG_ACPI_NUMA)",
                machine.node_count()
            ));
        }
    }
    r.rc = received
        .get("rc")
        .map(|b| String::from_utf8_lossy(b).into_owned());
    r.stdout = received
        .get("stdout")
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    r.stderr = received
        .get("stderr")
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    for (name, bytes) in &received.files {
        if let (Some(file), Some(dir)) = (name.strip_prefix("out."), out) {
            let kept = match file {
                "console.log" => Err(anyhow::anyhow!("the console log's name")),
                _ => keep(dir, &format!("{slug}.{file}"), bytes),
            };
            match kept {
                Ok(path) => r.files.push(path),
                Err(e) => say(&format!("not kept: {file}: {e:#}")),
            }
        }
    }
    let ended = match &booted.outcome {
        Outcome::Exited if received.complete => None,
        Outcome::Exited | Outcome::Failed(_) => Some(format!(
            "the guest stopped before numatrace finished (a panic?); its console's last lines:\n{}",
            tail()
        )),
        Outcome::TimedOut(t) => Some(format!(
            "no result within --timeout {}; QEMU stopped; its console's last lines:\n{}",
            humantime::format_duration(*t),
            tail()
        )),
        Outcome::Interrupted => Some("interrupted".into()),
        Outcome::NoSign => Some(format!(
            "KVM showed nothing within {} s; try --accel tcg",
            KVM_SIGN_WITHIN.as_secs()
        )),
    };
    if ended.is_some() {
        r.failure = ended;
        if out.is_none() {
            r.failure = r
                .failure
                .map(|f| format!("{f}\n(--out DIR keeps the whole console log)"));
        }
    }
    Ok(r)
}

/// For record with two or more captures: `report --diff` of the first two, as `report` prints
/// it; with `--html FILE`, their A/B page (of one capture: its page).
fn diff_first_two(results: &[ImageResult], html: Option<&Path>) -> Result<()> {
    let captures: Vec<&String> = results
        .iter()
        .filter_map(|r| r.files.iter().find(|f| f.ends_with(".ntrace")))
        .collect();
    let exe = std::env::current_exe()?;
    if let Some(page) = html {
        let mut c = std::process::Command::new(&exe);
        c.arg("report");
        match captures.as_slice() {
            [] => bail!("--html: no guest wrote a capture, so there is no page to draw"),
            [one] => c.arg(one),
            [a, b, ..] => c.args(["--diff", a, b]),
        };
        let status = c.arg("--html").arg(page).status()?;
        if !status.success() {
            eprintln!("numatrace lab: report --html: {status}");
        }
    }
    if captures.len() < 2 {
        return Ok(());
    }
    println!(
        "\nreport --diff {} {}:",
        Escaped(captures[0]),
        Escaped(captures[1])
    );
    let status = std::process::Command::new(exe)
        .args(["report", "--diff", captures[0], captures[1]])
        .status()?;
    if !status.success() {
        eprintln!("numatrace lab: report --diff: {status}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_html_is_the_labs_not_the_guests() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (c, h) = take_html(&v(&[
            "record", "--html", "ab.html", "-d", "5s", "--", "x", "--html", "y",
        ]))
        .unwrap();
        assert_eq!(c, v(&["record", "-d", "5s", "--", "x", "--html", "y"]));
        assert_eq!(h, Some(PathBuf::from("ab.html")));
        let (c, h) = take_html(&v(&["record", "--html=p.html"])).unwrap();
        assert_eq!((c, h), (v(&["record"]), Some(PathBuf::from("p.html"))));
        assert!(take_html(&v(&["check", "--html", "x"])).is_err());
        assert!(take_html(&v(&["record", "--html"])).is_err());
        let (c, h) = take_html(&v(&["stat", "--", "w", "--html", "x"])).unwrap();
        assert_eq!((c.len(), h), (5, None));
    }

    #[test]
    fn guest_arguments() {
        let v = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        assert_eq!(
            guest_args(&v(&["check", "--patch", "000"]), false),
            v(&["check", "--json", "--patch", "000"])
        );
        assert_eq!(
            guest_args(&v(&["record", "-d", "5s", "--", "x", "-o"]), false),
            v(&[
                "record",
                "-o",
                "capture.ntrace",
                "-d",
                "5s",
                "--",
                "x",
                "-o"
            ])
        );
        assert_eq!(
            guest_args(&v(&["record", "-o", "a.ntrace"]), true),
            v(&["record", "-o", "a.ntrace"])
        );
        assert_eq!(
            guest_args(&v(&["stat", "--", "w"]), true),
            v(&["stat", "--json", "--", "w"])
        );
        assert_eq!(slug("debian:6.12"), "debian_6.12");
        assert_eq!(slug("../../linux/"), "linux");
    }
}
