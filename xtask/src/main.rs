//! numatrace's developer entry point: `cargo xtask <step>`. Every step installs what it needs
//! first (idempotently), so a fresh machine needs nothing but this repository and rustup.

mod bench;
mod build_cache;
mod cmd;
mod deb;
mod musl;
mod process;
mod setup;
mod test;
mod vm;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Build, run and test numatrace")]
struct Cli {
    #[command(subcommand)]
    step: Step,
}

#[derive(Subcommand)]
enum Step {
    /// Install the pinned toolchains and bpf-linker (what every other step does first).
    Setup,
    /// Build target/release/numatrace (eBPF object embedded) and numatrace-workload.
    Build(cmd::BuildOpts),
    /// Build, then run numatrace with ARGS (as root; through sudo when not root).
    Run(cmd::RunOpts),
    /// Build target/debian/numatrace_VERSION_ARCH.deb (binaries, man pages, completions,
    /// systemd units, docs) and check it with lintian (installed as root when missing).
    /// `--arch arm64`: the static aarch64 build, packaged for arm64.
    Deb(DebOpts),
    /// The whole test suite: fmt, clippy (host and eBPF crates), unit and real-kernel tests on
    /// this kernel, the package test, then the same real-kernel tests in QEMU guests (two nodes
    /// and a slow CPU-less third; vm-test), then in an arm64 guest of the 6.12 line (the static
    /// aarch64 build, its binaries unpacked from the arm64 package).
    Test(test::Opts),
    /// Only the test suite's package step: `deb`, then (as root, where no numatrace package is
    /// installed) dpkg -i, the installed binary, man page and bash completion, dpkg --purge.
    PackageTest,
    /// Benchmarks (BENCHMARKS.md): per-program kernel cost against empty programs, workload
    /// overhead untraced / under each command / under bpftrace, and the daemon's CPU, memory
    /// and start-up time with 100 to 10 000 live tasks, in a QEMU guest (that of vm-test), plus
    /// per-program costs on the host. Prints the tables; writes target/bench/results.{md,jsonl}. Root.
    Bench(bench::Opts),
    /// Run the real-kernel tests in QEMU guests (two nodes and a slow CPU-less third), one boot
    /// per kernel line: Debian's
    /// newest 5.10, 6.1, 6.12 and 7.x cloud kernels (from the mirror's package indexes) and
    /// Ubuntu's 6.8.0-31 (installs qemu-system-x86, busybox-static, cpio and curl with apt
    /// when missing; downloads the kernels once into the cache; needs root).
    VmTest(vm::Selection),
}

#[derive(clap::Args)]
struct DebOpts {
    /// amd64 (the host's build) or arm64 (static, cross-built).
    #[arg(long, default_value = "amd64", value_parser = cmd::parse_arch)]
    arch: numatrace_lab::arch::Arch,
}

fn main() {
    // Report failures as one readable line, not a backtrace (RUST_BACKTRACE is set here).
    if let Err(e) = run(Cli::parse()) {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let tools = setup::ensure()?;
    // A clean clone's test or bench run keeps its compiled dependencies in the cache (the
    // bench's static build is the arm64 test's twin for amd64); any step in a tree whose
    // target directories are the cache's builds them from its own sources.
    if matches!(cli.step, Step::Test(_) | Step::Bench(_)) {
        build_cache::link(&tools.pins.stable)?;
    }
    build_cache::claim(&tools.pins.stable)?;
    match cli.step {
        Step::Setup => {
            println!("ready: {tools}");
            Ok(())
        }
        Step::Build(o) if o.static_ || o.arch != numatrace_lab::arch::Arch::host() => {
            musl::build_static(&tools, o.arch).map(drop)
        }
        Step::Build(_) => cmd::build(&tools),
        Step::Deb(o) => deb::build(&tools, o.arch).map(drop),
        Step::PackageTest => test::package(&tools),
        Step::Run(o) => {
            cmd::build(&tools)?;
            cmd::run_numatrace(&o.args)
        }
        Step::Test(o) => {
            test::run(&tools, !o.no_lint)?;
            if o.no_vm {
                eprintln!("xtask: --no-vm: QEMU guests skipped");
                Ok(())
            } else {
                let start = std::time::Instant::now();
                let r = vm::run(&tools, &vm::Selection::default());
                eprintln!("xtask: QEMU guests took {} s", start.elapsed().as_secs());
                r?;
                // One arm64 line: the static aarch64 build and its package, in a virt guest.
                let start = std::time::Instant::now();
                let r = vm::run(
                    &tools,
                    &vm::Selection {
                        arch: numatrace_lab::arch::Arch::Arm64,
                        kernels: vec![vm::ARM64_DEFAULT_LINE.to_owned()],
                        ..vm::Selection::default()
                    },
                );
                eprintln!("xtask: arm64 guest took {} s", start.elapsed().as_secs());
                r
            }
        }
        Step::VmTest(sel) => vm::run(&tools, &sel),
        Step::Bench(o) => bench::run(&tools, &o),
    }
}
