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
    /// Seed 000: a parent initialises an array, forks children that sum it from other NUMA
    /// nodes. With `--mode shared` the pages stay COW-shared (patched kernels neither fault nor
    /// migrate them); `--mode private` is the control where each child writes its copy first.
    Cow {
        /// Number of children; child i runs on the first CPU of the (i+1)th node with CPUs (mod
        /// their number).
        #[arg(long, default_value_t = 2)]
        children: usize,
        /// MiB in the array.
        #[arg(long, default_value_t = 32)]
        mem_mib: usize,
        #[arg(long, value_enum, default_value_t = CowMode::Shared)]
        mode: CowMode,
        /// Back the array with transparent hugepages (MADV_HUGEPAGE, 2 MiB aligned); without it
        /// the array is kept in 4K pages (MADV_NOHUGEPAGE).
        #[arg(long)]
        thp: bool,
        /// How long the children keep summing.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Seed 003: many threads touching one large shared heap, so that every task_numa_work
    /// call has a lot of PTEs to scan (run it with aggressive scan tunables).
    ScanHeavy {
        #[arg(long, default_value_t = 8)]
        threads: usize,
        /// MiB in the shared heap.
        #[arg(long, default_value_t = 512)]
        mem_mib: usize,
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Seed 004: a parent (with PR_SET_THP_DISABLE unless --control) forks a child that execs
    /// `thp-child`, which reads MADV_HUGEPAGE memory. The state file receives each process's
    /// THP state, one `role pid prctl=N thp_enabled=N` line each.
    ThpDisable {
        /// The control: no prctl.
        #[arg(long)]
        control: bool,
        #[arg(long, default_value_t = 64)]
        mem_mib: usize,
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
        #[arg(long, value_name = "FILE")]
        state_file: PathBuf,
    },
    /// Seed 002: one thread touches two VMAs A (lower) and B, split by a PROT_NONE guard
    /// page: both, then B only (A's PID access history ages out and the scanner skips A as
    /// pid_inactive), then A only (renewed access). A patched kernel scans A once it has gone
    /// unscanned for more scan sequences than the process has threads. The state file gets
    /// `a START END`, `b START END`, and `phase NAME CLOCK_MONOTONIC_NS` lines.
    IdleVma {
        /// Threads in the process: one touches, the others sleep. With more than one the
        /// kernel makes every PTE a hinting fault (a single-threaded process's local pages
        /// never are, so nothing would record its accesses), and the patch's threshold is
        /// this many scan sequences.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
        threads: u32,
        /// MiB in VMA A (the one left idle).
        #[arg(long, default_value_t = 64)]
        a_mib: usize,
        /// MiB in VMA B (make it at least the scan size, scan_size_mb, so that scanning B uses
        /// up a scan call's budget and the kernel does not force-scan A at the end of the call).
        #[arg(long, default_value_t = 256)]
        b_mib: usize,
        /// Back both with 4K pages (MADV_NOHUGEPAGE); default THPs (MADV_HUGEPAGE), which scan
        /// and fault much faster.
        #[arg(long)]
        no_thp: bool,
        /// Whole run; split 1/5 both, 2/5 B only, 2/5 A only.
        #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Write the VMAs' addresses and the phases' start times here.
        #[arg(long, value_name = "FILE")]
        state_file: Option<PathBuf>,
    },
    /// Print this program's man page (roff) on stdout, for packagers (`cargo xtask deb`).
    #[command(hide = true)]
    Manpage,
    /// The exec'd child of `thp-disable` (not meant to be run alone).
    ThpChild {
        #[arg(long, default_value_t = 64)]
        mem_mib: usize,
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
        #[arg(long, value_name = "FILE")]
        state_file: PathBuf,
    },
    /// Touch memory on a CPU of one NUMA node, then read it from a CPU of another: NUMA
    /// balancing should find the pages misplaced and migrate them (needs 2+ nodes). A node
    /// without CPUs (a slow memory tier) is first-touched under a bind memory policy from the
    /// reading node's CPU, then read under the default policy: in memory-tiering mode the
    /// kernel promotes the pages it finds hot.
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
        /// Back the memory with THPs (MADV_HUGEPAGE); default: 4K pages (MADV_NOHUGEPAGE).
        #[arg(long)]
        thp: bool,
        /// Then keep the memory, untouched, this long (e.g. for reclaim to demote it).
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        hold: Duration,
    },
    /// Fault-heavy: many small threads, each first-touching its own buffer on one node and then
    /// writing it from a CPU of another, for as long as asked: every scan makes each of its
    /// pages a hinting fault, remote until NUMA balancing migrates it (needs 2+ nodes; run with
    /// aggressive scan tunables for a high fault rate). Prints pages touched per second.
    Remote {
        #[arg(long, default_value_t = 16)]
        threads: usize,
        /// MiB per thread (4K pages).
        #[arg(long, default_value_t = 4)]
        mem_mib: usize,
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Many live, mostly sleeping tasks: `tasks` threads over processes of at most
    /// `per_process` threads, each writing its own page once per `period` (so that NUMA
    /// balancing sees each of them). Prints `sleepers: ready N` once all exist.
    Sleepers {
        #[arg(long, default_value_t = 1000)]
        tasks: usize,
        #[arg(long, default_value_t = 1000)]
        per_process: usize,
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        period: Duration,
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Many short-lived processes: `tasks` forks in all, at most `parallel` alive at once, each
    /// spinning `spin_ms` over a private buffer, then exiting (pid churn for the exporters).
    Churn {
        #[arg(long, default_value_t = 1000)]
        tasks: usize,
        #[arg(long, default_value_t = 8)]
        parallel: usize,
        #[arg(long, default_value_t = 20)]
        spin_ms: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum CowMode {
    /// Children only read the parent's pages: they stay COW-shared.
    Shared,
    /// Control: children write their copy first, which breaks COW (private pages).
    Private,
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

/// The NUMA nodes that have CPUs (a slow memory tier's node has none), at least node 0.
fn cpu_nodes() -> Vec<u32> {
    let nodes: Vec<u32> = (0..1024)
        .take_while(|n| std::path::Path::new(&format!("/sys/devices/system/node/node{n}")).exists())
        .filter(|n| node_cpu(*n).is_ok())
        .collect();
    if nodes.is_empty() { vec![0] } else { nodes }
}

/// Reads one word of every 4K page of `buf`, over and over until `duration` after `start`;
/// returns the number of full passes.
fn read_pages(buf: &[u32], start: Instant, duration: Duration) -> u64 {
    let (mut sum, mut passes) = (0u64, 0u64);
    while start.elapsed() < duration {
        for page in buf.chunks(1024) {
            sum = sum.wrapping_add(u64::from(page[0]));
        }
        passes += 1;
    }
    std::hint::black_box(sum);
    passes
}

/// A private anonymous mapping of `bytes`, 2 MiB aligned, THP-advised if asked.
fn anon_mapping(bytes: usize, thp: bool) -> Result<&'static mut [u32]> {
    const HUGE: usize = 2 << 20;
    let len = bytes.div_ceil(HUGE) * HUGE;
    // SAFETY: a fresh anonymous mapping, never unmapped (the process exits), aligned inside.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len + HUGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap");
        }
        let aligned = (p as usize).next_multiple_of(HUGE) as *mut libc::c_void;
        // Explicit either way: with THP "always" the kernel would otherwise pick for us.
        let advice = if thp {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        if libc::madvise(aligned, len, advice) != 0 {
            return Err(std::io::Error::last_os_error()).context("madvise");
        }
        Ok(std::slice::from_raw_parts_mut(
            aligned.cast::<u32>(),
            len / 4,
        ))
    }
}

fn cow(
    children: usize,
    mem_mib: usize,
    mode: CowMode,
    thp: bool,
    duration: Duration,
) -> Result<()> {
    let bytes = mem_mib << 20;
    let nodes = cpu_nodes();
    pin_to_cpu(node_cpu(nodes[0])?)?;
    // A private anonymous mapping initialised by the parent: after fork its pages are
    // COW-shared, as the seed's initialised data section is.
    let array = anon_mapping(bytes, thp)?;
    array.fill(13);
    let start = Instant::now();
    let mut pids = Vec::new();
    for i in 0..children {
        // SAFETY: the child only computes on its own memory and exits without unwinding.
        match unsafe { libc::fork() } {
            -1 => return Err(std::io::Error::last_os_error()).context("fork"),
            0 => {
                // Write the private copy while still on the parent's node, then move: the copy is
                // misplaced, so the control has something to fault and migrate. (The kernel
                // leaves alone pages already on a single-threaded task's node.)
                if mode == CowMode::Private {
                    for page in array.chunks_mut(1024) {
                        page[0] = page[0].wrapping_add(1);
                    }
                }
                let node = nodes[(i + 1) % nodes.len()];
                let _ = node_cpu(node).and_then(pin_to_cpu);
                let passes = read_pages(array, start, duration);
                println!("cow child {i} on node {node}: {passes} passes");
                // SAFETY: leave without running the parent's atexit handlers twice.
                unsafe { libc::_exit(0) };
            }
            pid => pids.push(pid),
        }
    }
    for pid in pids {
        let mut status = 0;
        // SAFETY: waiting for our own children.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
    println!(
        "cow: {children} children, {mem_mib} MiB {mode:?}{} in {:.1} s",
        if thp { " THP" } else { "" },
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn scan_heavy(threads: usize, mem_mib: usize, duration: Duration) -> Result<()> {
    let heap: &'static mut [u32] = anon_mapping(mem_mib << 20, false)?;
    heap.fill(1);
    let heap: &'static [u32] = heap;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            std::thread::spawn(move || {
                set_thread_name(&format!("ntw-scan-{i}"));
                let (mut sum, mut passes) = (0u64, 0u64);
                // Each thread starts at its own offset so they do not march in step.
                let pages = heap.len() / 1024;
                while start.elapsed() < duration {
                    for p in 0..pages {
                        sum = sum.wrapping_add(u64::from(heap[((p + i * 97) % pages) * 1024]));
                    }
                    passes += 1;
                }
                std::hint::black_box(sum);
                passes
            })
        })
        .collect();
    let passes: u64 = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    println!(
        "scan-heavy: {threads} threads over {mem_mib} MiB, {passes} passes in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

const PR_SET_THP_DISABLE: libc::c_int = 41;
const PR_GET_THP_DISABLE: libc::c_int = 42;

/// Appends `role pid prctl=N thp_enabled=N` (thp_enabled from /proc/self/status, -1 if absent).
fn record_thp_state(role: &str, file: &std::path::Path) -> Result<()> {
    use std::io::Write;
    // SAFETY: PR_GET_THP_DISABLE takes no pointers.
    let prctl = unsafe { libc::prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let enabled = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map_or("-1".to_owned(), |v| v.trim().to_owned());
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .context("opening --state-file")?;
    writeln!(
        f,
        "{role} {} prctl={prctl} thp_enabled={enabled}",
        std::process::id()
    )?;
    Ok(())
}

fn thp_disable(
    control: bool,
    mem_mib: usize,
    duration: Duration,
    state: &std::path::Path,
) -> Result<()> {
    if !control {
        // SAFETY: PR_SET_THP_DISABLE takes no pointers.
        if unsafe { libc::prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error()).context("prctl(PR_SET_THP_DISABLE)");
        }
    }
    record_thp_state("parent", state)?;
    let exe = std::env::current_exe().context("finding this program")?;
    let status = std::process::Command::new(exe)
        .arg("thp-child")
        .arg("--mem-mib")
        .arg(mem_mib.to_string())
        .arg("--duration")
        .arg(
            humantime::format_duration(duration)
                .to_string()
                .replace(' ', ""),
        )
        .arg("--state-file")
        .arg(state)
        .status()
        .context("running thp-child")?;
    println!("thp-disable: control={control}, child {status}");
    Ok(())
}

fn thp_child(mem_mib: usize, duration: Duration, state: &std::path::Path) -> Result<()> {
    record_thp_state("child", state)?;
    // A second thread that only sleeps: the kernel never makes a single-threaded process's
    // pages on its own node PROT_NONE — from 6.19 (folio_can_map_prot_numa) that covers THPs
    // too, and the control would draw no THP hint fault at all.
    let until = Instant::now() + duration;
    std::thread::spawn(move || {
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let heap = anon_mapping(mem_mib << 20, true)?;
    heap.fill(1);
    let passes = read_pages(heap, Instant::now(), duration);
    println!("thp-child: {mem_mib} MiB MADV_HUGEPAGE, {passes} passes");
    Ok(())
}

/// set_mempolicy(2) for the calling thread: `MPOL_BIND` to `node`, or `MPOL_DEFAULT`.
fn bind_memory(node: Option<u32>) -> Result<()> {
    const MPOL_DEFAULT: libc::c_long = 0;
    const MPOL_BIND: libc::c_long = 2;
    let mask: [libc::c_ulong; 16] = {
        let mut m = [0; 16];
        if let Some(n) = node {
            let bits = libc::c_ulong::BITS;
            m.get_mut((n / bits) as usize)
                .with_context(|| format!("node {n} is beyond this program's node mask"))?;
            m[(n / bits) as usize] |= 1 << (n % bits);
        }
        m
    };
    // MPOL_DEFAULT takes no mask at all (a mask, even of 0 bits, is EINVAL).
    let (mode, nmask, maxnode) = match node {
        Some(_) => (
            MPOL_BIND,
            mask.as_ptr(),
            (mask.len() as u32 * libc::c_ulong::BITS) as libc::c_ulong,
        ),
        None => (MPOL_DEFAULT, std::ptr::null(), 0),
    };
    // SAFETY: the mask outlives the call and holds `maxnode` bits.
    let r = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, nmask, maxnode) };
    if r != 0 {
        return Err(std::io::Error::last_os_error()).context("set_mempolicy");
    }
    Ok(())
}

fn migrate(mem_mib: usize, from: u32, to: u32, thp: bool, duration: Duration) -> Result<()> {
    // First touch from a CPU of `from` (of `to` for a node without CPUs) under a bind policy
    // to `from`: a node short of free pages (node 0 after a promotion test filled it) would
    // otherwise hand some of them to another node, and every page's source must be `from`.
    // The policy is in place before the task runs on `from`'s CPU and stays until it runs on
    // `to`'s again: under a plain bind the scanner skips every VMA of the task and a hint
    // fault finds no page misplaced (no MPOL_F_MOF), so nothing taken on `from`'s CPU can
    // pull one of its other pages (stack, data) from `to` to `from`. Then it goes (a bound
    // task's pages are never migrated by NUMA balancing), and every hint fault is taken on `to`.
    bind_memory(Some(from))?;
    pin_to_cpu(node_cpu(from).or_else(|_| node_cpu(to))?)?;
    let buf = anon_mapping(mem_mib << 20, thp)?;
    for page in buf.chunks_mut(1024) {
        page[0] = 1;
    }
    // The placement every migration's source node is judged by, as the kernel reports it: a
    // page that is not on `from` here would make a tracer's "from node X" unverifiable.
    let (on_from, pages) = pages_on_node(buf, from)?;
    if on_from != pages {
        anyhow::bail!(
            "{} of {pages} pages are not on node {from} after first touch (move_pages)",
            pages - on_from
        );
    }
    println!("migrate: {pages} of {pages} pages on node {from} after first touch (move_pages)");
    pin_to_cpu(node_cpu(to)?)?;
    bind_memory(None)?;
    let start = Instant::now();
    let passes = read_pages(buf, start, duration);
    println!(
        "migrate: {mem_mib} MiB touched on node {from}, read from node {to}: {passes} passes in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// How many of the 4K pages of `buf` the kernel says are on `node` (move_pages(2) without a
/// target: each page's current node), and how many pages were asked about.
fn pages_on_node(buf: &[u32], node: u32) -> Result<(usize, usize)> {
    let pages: Vec<*const libc::c_void> = buf.chunks(1024).map(|p| p.as_ptr().cast()).collect();
    let mut status = vec![-1i32; pages.len()];
    // SAFETY: `pages` and `status` have one entry per page; a null `nodes` only queries.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("move_pages (query)");
    }
    let on = status
        .iter()
        .filter(|s| **s >= 0 && **s as u32 == node)
        .count();
    Ok((on, pages.len()))
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`, so the tracer can line up phases.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Touches (writes) one word per 4K page of each buffer until `until`; returns full passes.
fn touch_pages(bufs: &mut [&mut [u32]], until: Instant) -> u64 {
    let mut passes = 0;
    while Instant::now() < until {
        for b in bufs.iter_mut() {
            for page in b.chunks_mut(1024) {
                page[0] = page[0].wrapping_add(1);
            }
        }
        passes += 1;
    }
    passes
}

fn idle_vma(
    threads: u32,
    a_mib: usize,
    b_mib: usize,
    thp: bool,
    duration: Duration,
    state: Option<&std::path::Path>,
) -> Result<()> {
    use std::io::Write;
    const HUGE: usize = 2 << 20;
    let (a_len, b_len) = (
        (a_mib << 20).next_multiple_of(HUGE),
        (b_mib << 20).next_multiple_of(HUGE),
    );
    // One mapping [A | guard | B]: mmap places later mappings below earlier ones, so this is
    // the only way to be sure A is scanned before B.
    let all = anon_mapping(a_len + HUGE + b_len, thp)?;
    let (a, rest) = all.split_at_mut(a_len / 4);
    let (guard, b) = rest.split_at_mut(HUGE / 4);
    // SAFETY: the guard lies inside our mapping and is never touched; PROT_NONE splits the
    // mapping into three VMAs, so A and B cannot merge.
    if unsafe { libc::mprotect(guard.as_mut_ptr().cast(), HUGE, libc::PROT_NONE) } != 0 {
        return Err(std::io::Error::last_os_error()).context("mprotect(guard)");
    }
    let mut out = match state {
        Some(f) => Some(fs::File::create(f).context("creating --state-file")?),
        None => None,
    };
    let mut note = |line: String| -> Result<()> {
        if let Some(f) = out.as_mut() {
            writeln!(f, "{line}").context("writing --state-file")?;
        }
        Ok(())
    };
    let range = |s: &[u32]| (s.as_ptr() as usize, s.as_ptr() as usize + s.len() * 4);
    let ((a0, a1), (b0, b1)) = (range(a), range(b));
    note(format!("a {a0:#x} {a1:#x}"))?;
    note(format!("b {b0:#x} {b1:#x}"))?;
    // First touch outside the phases: populating takes long, above all in emulated guests.
    for page in a.chunks_mut(1024).chain(b.chunks_mut(1024)) {
        page[0] = 1;
    }
    let fifth = duration / 5;
    // Sleepers only count as threads; the process exits (and ends them) when main returns.
    for i in 1..threads {
        std::thread::spawn(move || {
            set_thread_name(&format!("ntw-sleeper-{i}"));
            std::thread::sleep(duration + Duration::from_secs(60));
        });
    }
    let start = Instant::now();
    note(format!("phase both {}", monotonic_ns()))?;
    let both = touch_pages(&mut [&mut *a, &mut *b], start + fifth);
    note(format!("phase b-only {}", monotonic_ns()))?;
    let b_only = touch_pages(&mut [&mut *b], start + fifth * 3);
    note(format!("phase a-only {}", monotonic_ns()))?;
    let a_only = touch_pages(&mut [&mut *a], start + duration);
    note(format!("phase end {}", monotonic_ns()))?;
    println!(
        "idle-vma: {threads} thread(s), A {a_mib} MiB at {a0:#x}, B {b_mib} MiB at {b0:#x} ({}): \
         {both} passes over both, {b_only} over B only, {a_only} over A only in {:.1} s",
        if thp { "THP" } else { "4K pages" },
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
                (passes, buf)
            })
        })
        .collect();
    // The buffers live as long as the process: a read of its numa_maps late in its life (the
    // last one `record` keeps of a command) then shows what the threads touched, not a heap
    // they have already given back.
    let mut kept = Vec::with_capacity(threads);
    let mut passes = 0u64;
    for h in handles {
        if let Ok((p, buf)) = h.join() {
            passes += p;
            kept.push(buf);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let pages = passes as f64 * (bytes / 4096) as f64;
    println!(
        "threads: {threads} x {mem_mib} MiB, {passes} passes in {secs:.1} s, {:.1} M pages touched/s",
        pages / secs / 1e6
    );
    std::mem::forget(kept);
    Ok(())
}

/// The man page of numatrace-workload, from its own command line (numatrace's pages are
/// `numatrace manpages`).
fn manpage() -> Result<()> {
    use clap::CommandFactory as _;
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .source(concat!("numatrace ", env!("CARGO_PKG_VERSION")))
        .manual("numatrace manual")
        .render(&mut page)?;
    std::io::Write::write_all(&mut std::io::stdout().lock(), &page)?;
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    gate(&cli)?;
    match cli.workload {
        Workload::Manpage => manpage(),
        Workload::Threads {
            threads: n,
            mem_mib,
            duration,
        } => threads(n, mem_mib, duration),
        Workload::Cow {
            children,
            mem_mib,
            mode,
            thp,
            duration,
        } => cow(children, mem_mib, mode, thp, duration),
        Workload::ScanHeavy {
            threads,
            mem_mib,
            duration,
        } => scan_heavy(threads, mem_mib, duration),
        Workload::ThpDisable {
            control,
            mem_mib,
            duration,
            state_file,
        } => thp_disable(control, mem_mib, duration, &state_file),
        Workload::ThpChild {
            mem_mib,
            duration,
            state_file,
        } => thp_child(mem_mib, duration, &state_file),
        Workload::IdleVma {
            threads,
            a_mib,
            b_mib,
            no_thp,
            duration,
            state_file,
        } => idle_vma(
            threads,
            a_mib,
            b_mib,
            !no_thp,
            duration,
            state_file.as_deref(),
        ),
        Workload::Migrate {
            mem_mib,
            from_node,
            to_node,
            duration,
            thp,
            hold,
        } => {
            migrate(mem_mib, from_node, to_node, thp, duration)?;
            std::thread::sleep(hold);
            Ok(())
        }
        Workload::Churn {
            tasks,
            parallel,
            spin_ms,
        } => churn(tasks, parallel.max(1), Duration::from_millis(spin_ms)),
        Workload::Remote {
            threads,
            mem_mib,
            duration,
        } => remote(threads, mem_mib, duration),
        Workload::Sleepers {
            tasks,
            per_process,
            period,
            duration,
        } => sleepers(tasks, per_process.max(1), period, duration),
    }
}

/// A child's life in `churn`: touch a private buffer for `spin`, then leave without unwinding.
fn churn_child(spin: Duration) -> ! {
    let start = Instant::now();
    let mut buf = vec![0u8; 256 * 1024];
    let mut i = 0usize;
    while start.elapsed() < spin {
        for b in buf.iter_mut().step_by(4096) {
            *b = b.wrapping_add(i as u8);
        }
        i += 1;
    }
    std::hint::black_box(&buf);
    // SAFETY: _exit ends the forked child at once, without running the parent's destructors.
    unsafe { libc::_exit(0) }
}

fn churn(tasks: usize, parallel: usize, spin: Duration) -> Result<()> {
    let start = Instant::now();
    let (mut started, mut alive) = (0usize, 0usize);
    while started < tasks || alive > 0 {
        if started < tasks && alive < parallel {
            // SAFETY: the workload is single-threaded here; the child only computes and exits.
            match unsafe { libc::fork() } {
                0 => churn_child(spin),
                -1 => return Err(std::io::Error::last_os_error()).context("fork"),
                _ => (started, alive) = (started + 1, alive + 1),
            }
            continue;
        }
        // SAFETY: waits for any child; the status is not needed.
        if unsafe { libc::wait(std::ptr::null_mut()) } > 0 {
            alive -= 1;
        }
    }
    println!(
        "churn: {tasks} processes in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn remote(threads: usize, mem_mib: usize, duration: Duration) -> Result<()> {
    let nodes = cpu_nodes();
    if nodes.len() < 2 {
        anyhow::bail!(
            "remote needs 2 or more NUMA nodes with CPUs (this machine has {})",
            nodes.len()
        );
    }
    let cpus: Vec<usize> = nodes.into_iter().map(node_cpu).collect::<Result<_>>()?;
    let bytes = mem_mib << 20;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (home, away) = (cpus[i % cpus.len()], cpus[(i + 1) % cpus.len()]);
            std::thread::spawn(move || -> Result<u64> {
                set_thread_name(&format!("ntw-remote-{i}"));
                pin_to_cpu(home)?;
                let buf = anon_mapping(bytes, false)?;
                for page in buf.chunks_mut(1024) {
                    page[0] = 1;
                }
                pin_to_cpu(away)?;
                Ok(touch_pages(&mut [buf], start + duration))
            })
        })
        .collect();
    let mut passes = 0;
    for h in handles {
        passes += h
            .join()
            .map_err(|_| anyhow::anyhow!("a thread panicked"))??;
    }
    let secs = start.elapsed().as_secs_f64();
    let pages = passes as f64 * (bytes / 4096) as f64;
    println!(
        "remote: {threads} x {mem_mib} MiB, {passes} passes in {secs:.1} s, {:.3} M pages touched/s",
        pages / secs / 1e6
    );
    Ok(())
}

/// One process of `sleepers`: `count` threads on small stacks, each writing its own page every
/// `period` until `until`.
fn sleeper_threads(count: usize, period: Duration, until: Instant) -> Result<()> {
    let handles: Vec<_> = (0..count)
        .map(|_| {
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    let mut page = vec![0u8; 4096];
                    while Instant::now() < until {
                        page[0] = page[0].wrapping_add(1);
                        std::hint::black_box(&page);
                        std::thread::sleep(period);
                    }
                })
                .context("spawning a sleeper thread")
        })
        .collect::<Result<_>>()?;
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

fn sleepers(tasks: usize, per_process: usize, period: Duration, duration: Duration) -> Result<()> {
    let until = Instant::now() + duration;
    let processes = tasks.div_ceil(per_process).max(1);
    // Children first, while this process has one thread (fork copies only the caller).
    let mut children = Vec::new();
    for p in 1..processes {
        let count = per_process.min(tasks - p * per_process);
        // SAFETY: single-threaded here; the child runs its threads and exits without unwinding.
        match unsafe { libc::fork() } {
            0 => {
                let code = i32::from(sleeper_threads(count, period, until).is_err());
                // SAFETY: ends the forked child without running the parent's destructors.
                unsafe { libc::_exit(code) }
            }
            -1 => return Err(std::io::Error::last_os_error()).context("fork"),
            pid => children.push(pid),
        }
    }
    let own = per_process.min(tasks);
    let main = std::thread::spawn(move || sleeper_threads(own, period, until));
    // Ready once every process has all its threads (/proc/PID/status: Threads).
    let threads_of = |pid: i32| -> usize {
        fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Threads:"))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    };
    let me = std::process::id() as i32;
    while Instant::now() < until {
        // A process that could not start its threads has exited: not ready, ever.
        let child_gone = children.iter().any(|&c| {
            // SAFETY: polls our own child without reaping anyone else.
            unsafe { libc::waitpid(c, std::ptr::null_mut(), libc::WNOHANG) != 0 }
        });
        if main.is_finished() || child_gone {
            for &c in &children {
                // SAFETY: kills our own children, which would otherwise sleep on until `until`.
                unsafe { libc::kill(c, libc::SIGKILL) };
            }
            anyhow::bail!("sleepers: not every thread could be started (see threads-max, pid_max)");
        }
        let live = threads_of(me).saturating_sub(2)
            + children
                .iter()
                .map(|&c| threads_of(c).saturating_sub(1))
                .sum::<usize>();
        if live >= tasks {
            println!("sleepers: ready {tasks} in {processes} processes");
            use std::io::Write;
            let _ = std::io::stdout().flush();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    main.join()
        .map_err(|_| anyhow::anyhow!("a thread panicked"))??;
    let mut failed = 0;
    for c in children {
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(c, &mut status, 0) };
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            failed += 1;
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} sleeper process(es) failed");
    }
    Ok(())
}
