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
    Build {
        /// Build static (musl) binaries at target/x86_64-unknown-linux-musl/release/ instead.
        #[arg(long = "static")]
        static_: bool,
    },
    /// Build, then run numatrace with ARGS (as root; through sudo when not root).
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build target/debian/numatrace_VERSION_ARCH.deb (binaries, man pages, completions,
    /// systemd units, docs) and check it with lintian (installed as root when missing).
    Deb,
    /// The whole test suite: fmt, clippy (host and eBPF crates), unit and real-kernel tests on
    /// this kernel, the package test, then the same real-kernel tests in QEMU guests (two nodes
    /// and a slow CPU-less third; vm-test).
    Test {
        /// Skip fmt and clippy.
        #[arg(long)]
        no_lint: bool,
        /// Skip the QEMU guests.
        #[arg(long)]
        no_vm: bool,
    },
    /// Only the test suite's package step: `deb`, then (as root, where no numatrace package is
    /// installed) dpkg -i, the installed binary, man page and bash completion, dpkg --purge.
    PackageTest,
    /// Benchmarks (BENCHMARKS.md): per-program kernel cost against empty programs, workload
    /// overhead untraced / under each command / under bpftrace, and the daemon's CPU, memory
    /// and start-up time with 100 to 10 000 live tasks, in a QEMU guest (that of vm-test), plus
    /// per-program costs on the host. Prints the tables; writes target/bench/results.{md,jsonl}. Root.
    Bench {
        /// Kernel line of the guest.
        #[arg(long, default_value = "6.12")]
        kernel: String,
        /// Rounds of the overhead comparison (configurations in rotating order).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Each workload run of the overhead comparison.
        #[arg(long, default_value = "4s")]
        duration: String,
        /// Live task counts for the daemon cost.
        #[arg(long, default_value = "100,1000,10000")]
        tasks: String,
        /// Measuring window of each daemon-cost run.
        #[arg(long, default_value = "10s")]
        window: String,
        /// Only these phases (programs, overhead, daemon).
        #[arg(long, value_delimiter = ',')]
        phases: Vec<String>,
        /// Skip the host's per-program and daemon costs.
        #[arg(long)]
        no_host: bool,
        /// Skip the guest (host measurements only).
        #[arg(long, conflicts_with = "no_host")]
        no_guest: bool,
        /// Only print the tables of an earlier run (its target/bench/results.jsonl).
        #[arg(long, value_name = "RESULTS_JSONL")]
        render: Option<std::path::PathBuf>,
        /// Guest time in executed instructions, 2^SHIFT ns each (QEMU `-icount`, one host
        /// thread for both vCPUs): a guest nanosecond is then a count of instructions, so
        /// per-program costs and throughput ratios repeat from run to run.
        #[arg(
            long,
            value_name = "SHIFT",
            default_value_t = 2,
            conflicts_with = "no_icount"
        )]
        icount: u8,
        /// Real-time guest (multi-threaded TCG) instead: faster, and as noisy as the host.
        #[arg(long)]
        no_icount: bool,
    },
    /// Run the real-kernel tests in QEMU guests (two nodes and a slow CPU-less third), one boot
    /// per kernel line: Debian's
    /// newest 5.10, 6.1, 6.12 and 7.x cloud kernels (from the mirror's package indexes) and
    /// Ubuntu's 6.8.0-31 (installs qemu-system-x86, busybox-static, cpio and curl with apt
    /// when missing; downloads the kernels once into the cache; needs root).
    VmTest {
        /// Only these kernel lines (e.g. `--kernels 5.10,7.x`).
        #[arg(long, value_delimiter = ',')]
        kernels: Vec<String>,
        /// Only these test binaries (e.g. `--only probes,numa_guest`).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Only the tests whose name contains this (passed to each test binary, e.g.
        /// `--filter check_002`).
        #[arg(long, value_parser = vm::parse_filter)]
        filter: Option<String>,
        /// Run each seed's check this many times (`numatrace check --repeat N`) in the check
        /// tests on every line, which then assert that the verdicts agree (default: 3 on 6.12
        /// and 7.x, once elsewhere).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=20))]
        check_repeat: Option<u32>,
    },
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
        Step::Build { static_: false } => cmd::build(&tools),
        Step::Build { static_: true } => vm::build_static(&tools).map(drop),
        Step::Deb => deb::build(&tools).map(drop),
        Step::PackageTest => test::package(&tools),
        Step::Run { args } => {
            cmd::build(&tools)?;
            cmd::run_numatrace(&args)
        }
        Step::Test { no_lint, no_vm } => {
            test::run(&tools, !no_lint)?;
            if no_vm {
                eprintln!("xtask: --no-vm: QEMU guests skipped");
                Ok(())
            } else {
                let start = std::time::Instant::now();
                let r = vm::run(&tools, &vm::Selection::default());
                eprintln!("xtask: QEMU guests took {} s", start.elapsed().as_secs());
                r
            }
        }
        Step::VmTest {
            kernels,
            only,
            filter,
            check_repeat,
        } => vm::run(
            &tools,
            &vm::Selection {
                kernels: &kernels,
                only: &only,
                filter: filter.as_deref(),
                check_repeat,
            },
        ),
        Step::Bench {
            kernel,
            rounds,
            duration,
            tasks,
            window,
            phases,
            no_host,
            no_guest,
            render,
            icount,
            no_icount,
        } => bench::run(
            &tools,
            &bench::Opts {
                kernel,
                rounds,
                duration,
                tasks,
                window,
                phases,
                no_host,
                no_guest,
                render,
                icount: (!no_icount).then_some(icount),
            },
        ),
    }
}
