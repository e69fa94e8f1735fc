//! numatrace's developer entry point: `cargo xtask <step>`. Every step installs what it needs
//! first (idempotently), so a fresh machine needs nothing but this repository and rustup.

mod cmd;
mod setup;
mod test;

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
    Build,
    /// Build, then run numatrace with ARGS (as root; through sudo when not root).
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The whole test suite: fmt, clippy (host and eBPF crates), unit and real-kernel tests.
    Test {
        /// Skip fmt and clippy.
        #[arg(long)]
        no_lint: bool,
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
        Step::Build => cmd::build(&tools),
        Step::Run { args } => {
            cmd::build(&tools)?;
            cmd::run_numatrace(&args)
        }
        Step::Test { no_lint } => test::run(&tools, !no_lint),
    }
}
