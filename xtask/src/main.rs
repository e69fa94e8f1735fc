//! numatrace's developer entry point: `cargo xtask <step>`. Every step installs what it needs
//! first (idempotently), so a fresh machine needs nothing but this repository and rustup.

mod bench;
mod cmd;
mod deb;
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
    Deb,
    /// The whole test suite: fmt, clippy (host and eBPF crates), unit and real-kernel tests on
    /// this kernel, the package test, then the same real-kernel tests in QEMU guests (two nodes
    /// and a slow CPU-less third; vm-test).
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

fn main() {
    // Report failures as one readable line, not a backtrace (RUST_BACKTRACE is set here).
    if let Err(e) = run(Cli::parse()) {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let tools = setup::ensure()?;
    match cli.step {
        Step::Setup => {
            println!("ready: {tools}");
            Ok(())
        }
        Step::Build(o) if o.static_ => vm::build_static(&tools).map(drop),
        Step::Build(_) => cmd::build(&tools),
        Step::Deb => deb::build(&tools).map(drop),
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
                r
            }
        }
        Step::VmTest(sel) => vm::run(&tools, &sel),
        Step::Bench(o) => bench::run(&tools, &o),
    }
}
