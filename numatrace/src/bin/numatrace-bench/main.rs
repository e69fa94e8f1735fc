//! `numatrace-bench`: the measurements behind `cargo xtask bench`, run where the kernel is (in
//! a 2-node guest, or on the host for what attaches there). Each result is printed as one
//! `NUMATRACE-BENCH {json}` line for xtask to tabulate; progress goes to stderr.

mod bpftrace;
mod cgroup_dirs;
mod daemon;
mod floor;
mod frontends;
mod lookup;
mod overhead;
mod peer;
mod procfs;
mod programs;
mod record;
mod scale;
mod synthetic;
mod workloads;

use std::{collections::HashSet, path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use numatrace::{bpf::loader::LoadOptions, engine::Engine, kernel::tunables::Tunables};
pub use record::Record;

#[derive(Parser)]
#[command(
    name = "numatrace-bench",
    about = "numatrace's benchmarks (run by `cargo xtask bench`)"
)]
struct Cli {
    #[arg(long, default_value = "numatrace")]
    numatrace: PathBuf,
    #[arg(long, default_value = "numatrace-workload")]
    workload: PathBuf,
    /// bpftrace for the peer comparison (skipped, saying so, when absent).
    #[arg(long)]
    bpftrace: Option<PathBuf>,
    #[command(subcommand)]
    phase: Phase,
}

#[derive(Subcommand)]
enum Phase {
    /// Per-program run time against an empty program on the same hook.
    Programs {
        #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// A one-node machine: only the workloads that run there (fork/exit, threads).
        #[arg(long)]
        host: bool,
    },
    /// Workload throughput untraced and under each tracer.
    Overhead {
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Per workload run.
        #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Each long-running command's CPU, memory and start-up time with many live tasks.
    Daemon {
        #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
        tasks: Vec<usize>,
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        window: Duration,
        /// Then task entries written into each command's task map (0: no scale run).
        #[arg(long, default_value_t = 0)]
        scale_tasks: usize,
        /// Cgroups created for them (round-robin).
        #[arg(long, default_value_t = 10_000)]
        scale_cgroups: usize,
        /// Only the engine's snapshot at scale (not serve's scrape nor top's frames).
        #[arg(long)]
        scale_engine_only: bool,
    },
}

pub fn note(text: String) -> Record {
    Record::Note { text }
}

fn emit(r: Record) {
    match serde_json::to_string(&r) {
        Ok(j) => println!("{}{j}", record::MARK),
        Err(e) => eprintln!("numatrace-bench: {e}"),
    }
}

/// A runtime for the engine's ring-buffer reader; the measuring thread itself blocks freely.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?)
}

/// The defaults, system-wide, reading everything but the timeline (`needs::EVERYTHING`: more
/// than `stat` declares).
pub fn load_options() -> LoadOptions {
    LoadOptions::default()
}

/// Short-lived tasks of the untracked-exit pass.
const UNTRACKED_TASKS: usize = 4000;

/// Scan tunables for a high rate of NUMA balancing events (restored when dropped).
const TUNABLES: [(&str, &str); 4] = [
    ("scan_delay_ms", "100"),
    ("scan_period_min_ms", "100"),
    ("scan_period_max_ms", "400"),
    ("scan_size_mb", "256"),
];

/// The executed plan and the hooks it attached, from one start of the engine.
fn executed_plan() -> Result<(numatrace::plan::Plan, HashSet<String>)> {
    let rt = crate::runtime()?;
    let _rt = rt.enter();
    let facts = numatrace::kernel::facts::KernelFacts::gather()?;
    let engine = Engine::start(facts, &load_options())?;
    let attached = engine
        .hooks
        .iter()
        .filter(|h| h.attached)
        .map(|h| h.name.clone())
        .collect();
    let plan = engine.plan.clone();
    rt.block_on(engine.stop())?;
    Ok((plan, attached))
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = Cli::parse();
    let (_tunables, notes) = Tunables::set(&TUNABLES);
    emit(Record::Machine {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_owned(),
        nodes: numatrace::kernel::facts::numa_nodes(std::path::Path::new(
            "/sys/devices/system/node",
        )),
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        tunables: notes,
    });
    let resolve = |p: &PathBuf| numatrace::spawn::resolve(p).unwrap_or_else(|| p.clone());
    let bins = frontends::Bins {
        numatrace: resolve(&cli.numatrace),
        workload: resolve(&cli.workload),
        bpftrace: cli.bpftrace.as_ref().map(resolve).filter(|p| p.exists()),
    };
    match cli.phase {
        Phase::Programs { duration, host } => {
            let mix = workloads::Mix {
                bin: bins.workload.clone(),
                host,
            };
            // The bpftrace side by side: native figures only (under TCG the peer's tiny
            // programs are dominated by emulated clock reads, as the floors are).
            let bt = bins.bpftrace.as_deref().filter(|_| host);
            // In the guest, bpftrace's per-task aggregation on the same hooks, per hook.
            let script = match (&bins.bpftrace, host) {
                (Some(b), false) => {
                    let (plan, attached) = executed_plan().context("attaching numatrace once")?;
                    Some((b.clone(), bpftrace::script(&plan, &attached)))
                }
                _ => None,
            };
            let m = programs::measure(
                &mix,
                duration,
                bt,
                script.as_ref().map(|(b, s)| (b.as_path(), s.as_str())),
            )?;
            m.costs.into_iter().for_each(|c| emit(Record::Program(c)));
            emit(Record::Ring(m.ring));
            m.peers.into_iter().for_each(|c| emit(Record::Peer(c)));
            m.hooks.into_iter().for_each(|c| emit(Record::HookPeer(c)));
            m.lookups.into_iter().for_each(|c| emit(Record::Lookup(c)));
            if let Some(bt) = bt {
                match programs::measure_untracked(&mix, UNTRACKED_TASKS, bt) {
                    Ok(rows) => rows.into_iter().for_each(|c| emit(Record::Peer(c))),
                    Err(e) => emit(note(format!("untracked pass: {e:#}"))),
                }
            }
            m.errors.into_iter().for_each(|e| emit(note(e)));
            m.notes.into_iter().for_each(|n| emit(note(n)));
        }
        Phase::Overhead { rounds, duration } => {
            let (plan, attached) = executed_plan().context("attaching numatrace once")?;
            let script = bpftrace::script(&plan, &attached);
            eprintln!("numatrace-bench: bpftrace script:\n{script}");
            let ctx = overhead::Ctx {
                bins,
                plan,
                attached,
                script,
            };
            let (rows, notes) = overhead::measure(&ctx, rounds.max(1), duration);
            rows.into_iter().for_each(|r| emit(Record::Overhead(r)));
            notes.into_iter().for_each(|n| emit(note(n)));
        }
        Phase::Daemon {
            tasks,
            window,
            scale_tasks,
            scale_cgroups,
            scale_engine_only,
        } => {
            let scale = (scale_tasks > 0).then_some(scale::Scale {
                tasks: scale_tasks,
                cgroups: scale_cgroups,
                engine_only: scale_engine_only,
            });
            daemon::measure(&bins, &tasks, window, scale, emit)?
        }
    }
    Ok(())
}
