//! Workloads that make the kernel's NUMA balancing do something observable, for numatrace's
//! tests and for users checking their own machines.

use std::{
    ffi::CString,
    fs,
    io::Read,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "numatrace-workload",
    version,
    about = "Workloads that exercise the kernel's automatic NUMA balancing",
    long_about = "Workloads that exercise the kernel's automatic NUMA balancing.\n\n\
        Each prints its own throughput. With --gate, it waits for one byte on a FIFO before \
        doing anything, so a test can register its pid (e.g. in a tracefs instance) first."
)]
struct Cli {
    /// Write this process's pid to FILE before waiting on the gate.
    #[arg(long, global = true, value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Wait for one byte on this FIFO before starting.
    #[arg(long, global = true, value_name = "FIFO")]
    gate: Option<PathBuf>,
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand)]
enum Workload {
    /// N threads, each repeatedly reading its own private anonymous buffer: the NUMA scanner
    /// visits the process's VMAs (and skips the unsuitable, read-only shared and inaccessible
    /// ones, which `sched_skip_vma_numa` reports).
    Threads {
        /// Number of threads.
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// MiB of memory per thread.
        #[arg(long, default_value_t = 64)]
        mem_mib: usize,
        /// How long to run (e.g. 8s).
        #[arg(long, default_value = "8s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Touch memory on a CPU of one NUMA node, then read it from a CPU of another: NUMA
    /// balancing should find the pages misplaced and migrate them (needs 2+ nodes).
    Migrate {
        /// MiB to touch.
        #[arg(long, default_value_t = 64)]
        mem_mib: usize,
        /// Node to first-touch the memory on.
        #[arg(long, default_value_t = 1)]
        from_node: u32,
        /// Node to read it from afterwards.
        #[arg(long, default_value_t = 0)]
        to_node: u32,
        /// How long to keep reading.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
}

/// First CPU of a NUMA node, from sysfs (`0-3,8` -> 0).
fn node_cpu(node: u32) -> Result<usize> {
    let list = fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist"))
        .with_context(|| format!("NUMA node {node} does not exist here"))?;
    list.trim()
        .split([',', '-'])
        .next()
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("node {node} has no CPU"))
}

fn pin_to_cpu(cpu: usize) -> Result<()> {
    // SAFETY: cpu_set_t is plain data; the calls only read and write it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error()).context("sched_setaffinity");
        }
    }
    Ok(())
}

fn migrate(mem_mib: usize, from: u32, to: u32, duration: Duration) -> Result<()> {
    let bytes = mem_mib << 20;
    pin_to_cpu(node_cpu(from)?)?;
    let mut buf = vec![0u8; bytes];
    for page in buf.chunks_mut(4096) {
        page[0] = 1;
    }
    pin_to_cpu(node_cpu(to)?)?;
    let start = Instant::now();
    let (mut passes, mut sum) = (0u64, 0u64);
    while start.elapsed() < duration {
        for page in buf.chunks(4096) {
            sum = sum.wrapping_add(u64::from(page[0]));
        }
        passes += 1;
    }
    std::hint::black_box(sum);
    println!(
        "migrate: {mem_mib} MiB touched on node {from}, read from node {to}: {passes} passes in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn gate(cli: &Cli) -> Result<()> {
    if let Some(f) = &cli.pid_file {
        fs::write(f, std::process::id().to_string()).context("writing --pid-file")?;
    }
    if let Some(g) = &cli.gate {
        let mut b = [0u8; 1];
        fs::File::open(g)
            .and_then(|mut f| f.read_exact(&mut b))
            .context("waiting on --gate")?;
    }
    Ok(())
}

fn set_thread_name(name: &str) {
    if let Ok(n) = CString::new(name) {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
        unsafe { libc::prctl(libc::PR_SET_NAME, n.as_ptr()) };
    }
}

fn threads(threads: usize, mem_mib: usize, duration: Duration) -> Result<()> {
    let bytes = mem_mib << 20;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            std::thread::spawn(move || {
                set_thread_name(&format!("ntw-thread-{i}"));
                let mut buf = vec![1u8; bytes];
                let mut passes = 0u64;
                let mut sum = 0u64;
                while start.elapsed() < duration {
                    for page in buf.chunks_mut(4096) {
                        sum = sum.wrapping_add(u64::from(page[0]));
                        page[0] = page[0].wrapping_add(1);
                    }
                    passes += 1;
                }
                std::hint::black_box(sum);
                passes
            })
        })
        .collect();
    let passes: u64 = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    let secs = start.elapsed().as_secs_f64();
    let pages = passes as f64 * (bytes / 4096) as f64;
    println!(
        "threads: {threads} x {mem_mib} MiB, {passes} passes in {secs:.1} s, {:.1} M pages touched/s",
        pages / secs / 1e6
    );
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    gate(&cli)?;
    match cli.workload {
        Workload::Threads {
            threads: n,
            mem_mib,
            duration,
        } => threads(n, mem_mib, duration),
        Workload::Migrate {
            mem_mib,
            from_node,
            to_node,
            duration,
        } => migrate(mem_mib, from_node, to_node, duration),
    }
}
