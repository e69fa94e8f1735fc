//! `cargo xtask test`: the whole suite, in the order that fails fastest.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use clap::Args;

use crate::{
    process::{check, is_root, output},
    setup::{Tools, ensure_cargo_fuzz, ensure_packages, workspace_root},
};

/// Seconds each fuzz target runs (`NUMATRACE_FUZZ_SECONDS` overrides; 0 skips fuzzing).
const FUZZ_SECONDS: u64 = 12;

/// Prints how long a step of the test command took: the suite must stay within CI's time
/// budget, and this says where the time goes.
fn timed<T>(step: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let start = std::time::Instant::now();
    let r = f();
    eprintln!("xtask: {step} took {} s", start.elapsed().as_secs());
    r
}

/// `cargo xtask test`'s options.
#[derive(Args)]
pub struct Opts {
    /// Skip fmt and clippy.
    #[arg(long)]
    pub no_lint: bool,
    /// Skip the QEMU guests.
    #[arg(long)]
    pub no_vm: bool,
}

pub fn run(tools: &Tools, lint: bool) -> Result<()> {
    if lint {
        timed("lint", || self::lint(tools))?;
    }
    timed("unit and real-kernel tests", || host_tests(tools))?;
    timed("package step", || package(tools))?;
    timed("fuzzing", || fuzz(tools))
}

fn lint(tools: &Tools) -> Result<()> {
    let stable = &tools.pins.stable;
    let nightly = &tools.pins.nightly;
    eprintln!("xtask: cargo fmt --check");
    check(tools.cargo(stable).args(["fmt", "--all", "--", "--check"]))?;
    eprintln!("xtask: clippy (host crates)");
    check(
        tools
            .cargo(stable)
            .args(["clippy", "--release", "--all-targets"])
            .args(crate::cmd::HOST_PACKAGES)
            .args(["--", "-D", "warnings"]),
    )?;
    // Once per architecture whose registers the programs read (one source, two objects); each
    // in a target directory of its own, so that neither rebuilds aya for the other next time.
    for arch in ["x86_64", "aarch64"] {
        eprintln!("xtask: clippy (eBPF crate, bpfel-unknown-none, {arch} registers)");
        let mut cargo = tools.cargo(nightly);
        if arch != "x86_64" {
            cargo.env(
                "CARGO_TARGET_DIR",
                workspace_root().join(format!("target/ebpf-clippy-{arch}")),
            );
        }
        check(
            cargo
                .args([
                    "clippy",
                    "--release",
                    "--package",
                    "numatrace-ebpf",
                    "--target",
                    "bpfel-unknown-none",
                    "-Z",
                    "build-std=core",
                    "--",
                    "-D",
                    "warnings",
                ])
                .env("AYA_BPF_TARGET_ARCH", arch),
        )?;
    }
    Ok(())
}

fn host_tests(tools: &Tools) -> Result<()> {
    let stable = &tools.pins.stable;
    // `top` is tested in a real terminal: tmux (and pgrep) from Debian; `serve`'s exposition
    // and deploy/'s scrape config by promtool, from Debian's prometheus package; the kernel's
    // BPF object lists by bpftool and mount namespaces by unshare (util-linux); `numatrace lab`
    // boots guests with QEMU and fetches kernels with curl and xz; `report --html` pages are
    // rendered by headless Chromium. As root.
    if is_root() {
        ensure_packages(&[
            "chromium",
            "tmux",
            "procps",
            "prometheus",
            "bpftool",
            "util-linux",
            "qemu-system-x86",
            "curl",
            "xz-utils",
        ])?;
    } else {
        eprintln!(
            "xtask: not root: tmux, promtool, bpftool, Chromium and QEMU are not installed, the \
             terminal test of `top`, the promtool checks, the reliability suite, the HTML \
             render and the lab's boots will skip"
        );
    }
    // Real-kernel tests share kernel state (sysctls, tracefs, attached programs): one at a time.
    eprintln!("xtask: unit and real-kernel tests");
    check(
        tools
            .cargo(stable)
            .args(["test", "--release"])
            .args(crate::cmd::HOST_PACKAGES)
            .args(["--", "--test-threads=1"]),
    )
}

/// The "package" step (also `cargo xtask package-test`): builds the Debian package (lintian
/// included), then installs it on this machine, uses what it installed and purges it. On the
/// machine itself, not in a guest: what is tested is dpkg's handling of the package and the
/// files where Debian's man, bash-completion and systemd look for them, which a busybox
/// initramfs has none of; and it is never done where numatrace is installed already, so a
/// user's install is never touched. Root only (dpkg -i); skips loudly otherwise.
pub fn package(tools: &Tools) -> Result<()> {
    if !is_root() {
        // Building it needs dpkg-dev, binutils and lintian, which only root installs.
        eprintln!(
            "SKIPPED package step: needs root (the package's tools are installed with apt, and \
             the package with dpkg -i / dpkg --purge); `cargo xtask deb` builds it alone"
        );
        return Ok(());
    }
    eprintln!("xtask: package: cargo xtask deb");
    let deb = crate::deb::build_from(
        tools,
        numatrace_lab::arch::Arch::host(),
        None,
        crate::deb::HostBuild::Tested,
    )?;
    if let Some(version) = installed_version(crate::deb::PACKAGE) {
        eprintln!(
            "SKIPPED package install test: a {} package ({version}) is already installed on \
             this machine; it is not touched (dpkg --purge {} first to run this test)",
            crate::deb::PACKAGE,
            crate::deb::PACKAGE
        );
        return Ok(());
    }
    // A file of the package already on disk but no package's (e.g. a hand install in /usr/bin)
    // would be overwritten by dpkg -i and then removed by the purge.
    let files = package_files(&deb)?;
    if let Some(f) = files.iter().find(|f| f.symlink_metadata().is_ok()) {
        eprintln!(
            "SKIPPED package install test: {} exists and belongs to no package; installing \
             would replace it and the purge would remove it",
            f.display()
        );
        return Ok(());
    }
    // `man` reads the installed page (man-db); bash-completion's loader is not needed: the
    // script is sourced directly.
    ensure_packages(&["man-db", "bash"])?;
    eprintln!("xtask: package: dpkg -i {}", deb.display());
    let installed = check(Command::new("dpkg").arg("-i").arg(&deb));
    let checks = installed.and_then(|()| use_installed(&files));
    // Purged whatever happened above (dpkg -i may have failed halfway).
    eprintln!("xtask: package: dpkg --purge {}", crate::deb::PACKAGE);
    let purged = check(Command::new("dpkg").args(["--purge", crate::deb::PACKAGE])).and_then(
        |()| match files.iter().find(|f| f.symlink_metadata().is_ok()) {
            Some(f) => bail!("{} is still there after dpkg --purge", f.display()),
            None => Ok(()),
        },
    );
    checks?;
    purged?;
    eprintln!(
        "xtask: package: installed, --version, man page and bash completion right, purged \
         without a trace"
    );
    Ok(())
}

/// The version of `pkg` if dpkg has it installed (or half-installed: anything but purged).
fn installed_version(pkg: &str) -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Status} ${Version}", pkg])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (status, version) = text.split_once(' ')?;
    (out.status.success() && status != "not-installed").then(|| version.trim().to_owned())
}

/// The files (not directories) the package installs, as absolute paths.
fn package_files(deb: &Path) -> Result<Vec<PathBuf>> {
    let list = output(Command::new("dpkg-deb").arg("--contents").arg(deb))?;
    Ok(list
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| PathBuf::from(p.trim_start_matches('.')))
        .collect())
}

/// What a user does with the installed package: the version, a man page, a completion.
fn use_installed(files: &[PathBuf]) -> Result<()> {
    let bin = Path::new("/usr/bin/numatrace");
    let version = output(Command::new(bin).arg("--version"))?;
    let want = format!("numatrace {}", env!("CARGO_PKG_VERSION"));
    if version.trim() != want {
        bail!("{} --version says {version:?}, not {want:?}", bin.display());
    }
    eprintln!(
        "xtask: package: {} --version: {}",
        bin.display(),
        version.trim()
    );

    let man = output(
        Command::new("man")
            .args(["-P", "cat", "numatrace-stat"])
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "0"),
    )
    .context(
        "man numatrace-stat (if the page is missing, does /etc/dpkg/dpkg.cfg.d exclude \
         /usr/share/man?)",
    )?;
    if !man.contains("numatrace-stat") || !man.contains("--duration") {
        bail!("man numatrace-stat shows no numatrace-stat page:\n{man}");
    }
    eprintln!(
        "xtask: package: man numatrace-stat: {} lines",
        man.lines().count()
    );

    // Every subcommand with a man page (numatrace-SUB.1, where SUB is no binary of the
    // package: not numatrace-workload) must be offered after `numatrace <TAB>`, and a
    // subcommand's options after `numatrace stat --d<TAB>`.
    let subcommands: Vec<String> = files
        .iter()
        .filter_map(|f| f.file_name()?.to_str()?.strip_suffix(".1.gz"))
        .filter(|page| !files.contains(&Path::new("/usr/bin").join(page)))
        .filter_map(|page| page.strip_prefix("numatrace-"))
        .map(str::to_owned)
        .collect();
    if subcommands.len() < 7 {
        bail!("the package has man pages for only {subcommands:?}");
    }
    let offered = complete(&["numatrace", ""])?;
    let missing: Vec<&String> = subcommands
        .iter()
        .filter(|s| !offered.contains(s))
        .collect();
    if !missing.is_empty() {
        bail!("`numatrace <TAB>` offers {offered:?}, not {missing:?}");
    }
    let options = complete(&["numatrace", "stat", "--d"])?;
    if !options.iter().any(|o| o == "--duration") {
        bail!("`numatrace stat --d<TAB>` offers {options:?}, not --duration");
    }
    eprintln!(
        "xtask: package: bash completes `numatrace <TAB>` to {} and `numatrace stat --d<TAB>` \
         to {}",
        offered.join(" "),
        options.join(" ")
    );
    Ok(())
}

/// What the installed bash completion offers for the command line `words` (the last one is
/// being completed): the function `complete -p numatrace` names, driven as bash would.
fn complete(words: &[&str]) -> Result<Vec<String>> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        r#"set -e
source /usr/share/bash-completion/completions/numatrace
spec=$(complete -p numatrace)
fn=${{spec#*-F }}
fn=${{fn%% *}}
[ "$fn" != "$spec" ] && [ -n "$fn" ] || {{ echo "no completion function in: $spec" >&2; exit 1; }}
COMP_WORDS=({words})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
COMP_TYPE=9
"$fn" numatrace "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}"
"#,
        words = quoted.join(" ")
    );
    let out = output(Command::new("bash").arg("--norc").arg("-c").arg(script))?;
    Ok(out.lines().map(str::to_owned).collect())
}

/// `cargo fuzz` as xtask runs it: the pinned nightly, cargo-fuzz and bpf-linker on PATH, in
/// fuzz/.
fn cargo_fuzz(tools: &Tools, bin: &Path) -> Command {
    let mut c = tools.cargo(&tools.pins.nightly);
    let path = env::var_os("PATH").unwrap_or_default();
    let paths = [bin.to_path_buf(), tools.bpf_linker_bin.clone()]
        .into_iter()
        .chain(env::split_paths(&path));
    c.env(
        "PATH",
        env::join_paths(paths).expect("PATH entries are valid"),
    )
    .current_dir(workspace_root().join("fuzz"))
    .arg("fuzz");
    c
}

/// Every fuzz target for a bounded time (libFuzzer, AddressSanitizer, overflow checks on),
/// from the committed seeds and the corpus earlier runs grew (kept in the target directory); a
/// crash, a timeout or more than 512 MiB fails the step with the reproducer's path.
fn fuzz(tools: &Tools) -> Result<()> {
    let seconds = match env::var("NUMATRACE_FUZZ_SECONDS") {
        Ok(s) => s.parse()?,
        Err(_) => FUZZ_SECONDS,
    };
    if seconds == 0 {
        eprintln!("xtask: NUMATRACE_FUZZ_SECONDS=0: fuzzing skipped");
        return Ok(());
    }
    let bin = ensure_cargo_fuzz(&tools.pins)?;
    // The instrumented build (about 13 min cold on 2 cores) is kept in the cache, so that a
    // fresh clone rebuilds only numatrace itself; corpus and crashes stay with the checkout.
    let build_dir = crate::setup::cache_dir().join(format!("fuzz-target-{}", tools.pins.nightly));
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
        .join("fuzz");
    crate::build_cache::claim_dir(&build_dir)?;
    eprintln!("xtask: cargo fuzz build");
    check(
        cargo_fuzz(tools, &bin)
            .args(["build", "--target-dir"])
            .arg(&build_dir),
    )?;
    let list = output(cargo_fuzz(tools, &bin).arg("list"))?;
    let seeds = workspace_root().join("fuzz/seeds");
    for target in list.split_whitespace() {
        let corpus = target_dir.join("corpus").join(target);
        let artifacts = target_dir.join("artifacts").join(target);
        std::fs::create_dir_all(&corpus)?;
        std::fs::create_dir_all(&artifacts)?;
        eprintln!("xtask: fuzzing {target} for {seconds} s");
        let status = cargo_fuzz(tools, &bin)
            .args(["run", "--target-dir"])
            .arg(&build_dir)
            .arg(target)
            .arg(&corpus)
            .arg(&seeds)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .args(["-rss_limit_mb=512", "-timeout=10", "-print_final_stats=1"])
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .status()?;
        if !status.success() {
            let newest = std::fs::read_dir(&artifacts)?
                .filter_map(Result::ok)
                .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
                .map(|e| e.path());
            match newest {
                Some(p) => bail!(
                    "fuzz target {target} failed ({status}); reproducer {}: run `cargo fuzz \
                     run {target} {}` in fuzz/ with the nightly",
                    p.display(),
                    p.display()
                ),
                None => bail!("fuzz target {target} failed ({status})"),
            }
        }
    }
    Ok(())
}
