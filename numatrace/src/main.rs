use std::process::ExitCode;

use clap::Parser as _;
use numatrace::{
    cli::{Cli, Command},
    cmd, kernel,
    spawn::{GATE_ARG, exec_gated},
};
use tracing_subscriber::EnvFilter;

/// glibc gives each thread that allocates while another does an arena of its own (up to 8 per
/// core), and what a thread frees stays in its arena for that arena's next allocations. A
/// snapshot's large allocations are made on whichever runtime or record-building thread takes
/// it, so each arena came to hold a snapshot's worth: `serve` at 100 000 tasks read 93–103 MiB
/// RSS with them, 80.4–80.6 with one, its scrape as fast. (Set by a call, not the environment,
/// so that a command `stat` runs keeps glibc's default.)
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets an allocator parameter; no other thread exists yet.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// The daemon side's runtime: ring buffer and map readers run as tasks on it.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

fn main() -> ExitCode {
    // The trampoline of `stat -- COMMAND` must not start a runtime: it only waits and execs.
    let args: Vec<_> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == GATE_ARG) {
        // Forked from numatrace: drop its memory policy before becoming the user's command.
        kernel::mempolicy::reset_for_child();
        let fd = args
            .get(2)
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1);
        let identity = args.get(3).and_then(|s| s.to_str()).unwrap_or("");
        exec_gated(fd, identity, args.get(5..).unwrap_or_default());
    }

    // PID 1 of a `numatrace lab` guest: runs the lab's subcommand and powers the guest off.
    if args
        .first()
        .is_some_and(|a| numatrace_lab::guest::is_lab_init(&a.to_string_lossy()))
    {
        numatrace_lab::guest::run();
    }

    // Before any thread exists, so that every thread of numatrace inherits it.
    let policy = kernel::mempolicy::keep_out_of_numa_balancing();
    limit_malloc_arenas();
    let cli = Cli::parse();
    // Reading a capture, the man pages, completions and the metric catalogue need no
    // privilege: under sudo they run as the user who ran it, before any path is touched.
    let unprivileged = match &cli.command {
        Command::Report(_)
        | Command::Completions { .. }
        | Command::Manpages { .. }
        | Command::Lab(_) => true,
        Command::Serve(a) => a.metrics,
        _ => false,
    };
    if unprivileged && let Err(e) = numatrace::invoker::drop_privileges() {
        eprintln!("numatrace: could not become the user who ran sudo: {e}");
        return ExitCode::from(1);
    }
    // The kernel programs' aya-log records (--bpf-log) have targets under `numatrace::` too.
    let filter = EnvFilter::try_from_env("NUMATRACE_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("numatrace={0},aya={0}", cli.log_level)));
    // The live view owns the screen: its logs go to NUMATRACE_LOG_FILE, or nowhere.
    let tui = matches!(&cli.command, Command::Top(a) if !a.batch);
    // Appended to with the invoker's rights, never through a symlink or into a file someone
    // else could have planted; private (logs name processes).
    let log_file = match std::env::var_os("NUMATRACE_LOG_FILE").map(|p| {
        let path = std::path::PathBuf::from(p);
        numatrace::safe_fs::open_log(&path)
    }) {
        None => None,
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            eprintln!(
                "numatrace: NUMATRACE_LOG_FILE: {}",
                numatrace::text_escape::Escaped(&e.to_string())
            );
            return ExitCode::from(1);
        }
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match (tui, log_file) {
        (_, Some(f)) => builder
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(f))
            .init(),
        (true, None) => builder.with_writer(std::io::sink).init(),
        (false, None) => builder.with_writer(std::io::stderr).init(),
    }
    tracing::debug!(policy, "numatrace's own memory policy");

    // Completions and man pages need no privileges either.
    if let Some(code) = cmd::shell::dispatch(&cli.command) {
        return code;
    }

    // The metric catalogue needs nothing of the kernel.
    if let Command::Serve(a) = &cli.command
        && a.metrics
    {
        print!("{}", numatrace::report::metrics::describe());
        return ExitCode::SUCCESS;
    }

    // Reading a capture needs no privileges and no runtime.
    if let Command::Report(args) = &cli.command {
        return exit(cmd::report::run(args));
    }
    // Nor does booting other kernels in QEMU: the host kernel is never touched.
    if let Command::Lab(args) = &cli.command {
        return exit(cmd::lab::run(args));
    }

    if let Err(why) = kernel::caps::check_tracing_allowed() {
        eprintln!("numatrace: {why}");
        return ExitCode::from(1);
    }

    let result = match cli.command {
        Command::Probes { json, facts } => cmd::probes::run(json, facts, cli.no_fentry),
        Command::Stat(args) => {
            runtime().and_then(|rt| rt.block_on(cmd::stat::run(args, cli.no_fentry)))
        }
        Command::Top(args) => {
            runtime().and_then(|rt| rt.block_on(numatrace::cmd::top::run(args, cli.no_fentry)))
        }
        Command::Serve(args) => {
            runtime().and_then(|rt| rt.block_on(numatrace::cmd::serve::run(args, cli.no_fentry)))
        }
        Command::Record(args) => {
            runtime().and_then(|rt| rt.block_on(cmd::record::run(args, cli.no_fentry)))
        }
        Command::Report(_)
        | Command::Completions { .. }
        | Command::Manpages { .. }
        | Command::Lab(_) => {
            unreachable!("handled above")
        }
        Command::Check(args) => {
            runtime().and_then(|rt| rt.block_on(cmd::check::run(args, cli.no_fentry)))
        }
    };
    exit(result)
}

/// A subcommand's exit code, or its error on stderr (escaped: it may quote a capture or /proc).
fn exit(result: anyhow::Result<i32>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!(
                "numatrace: {}",
                numatrace::text_escape::Escaped(&format!("{e:#}"))
            );
            ExitCode::from(1)
        }
    }
}
