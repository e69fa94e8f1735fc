//! Command-line interface.

use std::{ffi::OsString, time::Duration};

use clap::{Args, Parser, Subcommand};
use numatrace_common::{DEFAULT_MAX_TASKS, DEFAULT_RINGBUF_BYTES, MAX_VMAS};

#[derive(Debug, Parser)]
#[command(
    name = "numatrace",
    version,
    about = "Live tracer of the Linux kernel's automatic NUMA balancing",
    long_about = "Live tracer of the Linux kernel's automatic NUMA balancing.\n\n\
        numatrace attaches eBPF programs to the kernel's NUMA balancing tracepoints (and, where the \
        kernel allows, functions) and aggregates what they see per task and per process: VMAs the \
        scanner skipped and why, task placement (moves, swaps, sticks), NUMA page migrations.\n\n\
        It needs root (CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN). Everything it attaches is released \
        when it exits, however it exits.",
    after_help = "Examples:\n  \
        sudo numatrace top                     the live view (q quits, ? for keys)\n  \
        sudo numatrace probes                  what this kernel lets numatrace see\n  \
        sudo numatrace stat --duration 30s     system-wide summary over 30 seconds\n  \
        sudo numatrace stat -- ./my-benchmark  summary for a command and its children\n  \
        sudo numatrace stat --pid 1234 --json  one process until Ctrl-C, as JSON\n  \
        sudo numatrace serve                   Prometheus endpoint on 127.0.0.1:19472\n  \
        sudo numatrace record -- ./workload    one capture file for a bug report\n  \
        numatrace report FILE.ntrace           read a capture anywhere, no root"
)]
pub struct Cli {
    /// Log level for numatrace's own diagnostics on stderr (error, warn, info, debug, trace);
    /// NUMATRACE_LOG takes tracing filter directives.
    #[arg(
        long,
        global = true,
        default_value = "warn",
        env = "NUMATRACE_LOG_LEVEL"
    )]
    pub log_level: String,

    /// Never use fentry/fexit: hook functions with kprobes where the kernel has them (e.g. when
    /// another tool's trampolines or a live patch conflict with fentry).
    #[arg(long, global = true)]
    pub no_fentry: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every hook numatrace has, whether this kernel lets it attach, how, and why not.
    ///
    /// Loads and attaches the programs for real (then detaches them), so "attached: yes" is a
    /// fact about this kernel, not a guess. Function hooks are tested with a do-nothing fentry
    /// program; kprobe support is read from sysfs/tracefs.
    Probes {
        /// Print JSON (schema numatrace.probes/1) instead of a table.
        #[arg(long)]
        json: bool,
        /// Print everything numatrace read about this kernel (BTF signatures and fields,
        /// tracepoint formats, fentry tests) as JSON: what its plan is decided from. Attach
        /// it to a bug report about a kernel numatrace misreads.
        #[arg(long, conflicts_with = "json")]
        facts: bool,
    },
    /// Count NUMA balancing activity for a while, then print a per-task summary.
    ///
    /// Without --duration, --pid or a COMMAND, runs system-wide until Ctrl-C. With a COMMAND,
    /// counts from just before it starts until it exits, for it and every process it forks, and
    /// exits with its exit status.
    Stat(StatArgs),
    /// Live view of NUMA balancing per task, process, cgroup and node, refreshed every second.
    ///
    /// Rates are per second over the last refresh. A column this kernel cannot supply shows
    /// `-` (press `i` for the hooks and why). Keys: `?` in the view.
    #[command(after_help = "Examples:\n  \
        sudo numatrace top                      live view, every second\n  \
        sudo numatrace top -d 2 --cgroup /system.slice/db.service\n  \
        sudo numatrace top -b -n 3              three plain-text frames (scripts, bug reports)\n  \
        sudo numatrace top -b -n 5 --json       five JSON frames, one per line")]
    Top(TopArgs),
    /// Prometheus endpoint: /metrics read fresh from the kernel side at every scrape.
    ///
    /// Listens on 127.0.0.1:19472 unless --listen says otherwise (use --listen 0.0.0.0:19472, or
    /// a specific address, to be scraped from other machines). Counters count from when serve
    /// started and never decrease: per cgroup and per task they are built from what each task
    /// counted between scrapes. With BPF run-time statistics on while it serves (kernel 5.8+),
    /// numatrace_bpf_* show its own kernel cost. Under systemd socket activation it serves the
    /// socket it is given. Ctrl-C or SIGTERM stops it and detaches everything.
    #[command(after_long_help = format!("{SERVE_AFTER_HELP}\n\n{}", crate::report::metrics::describe()))]
    Serve(ServeArgs),
    /// Record NUMA balancing into one capture file, to attach to a bug report.
    ///
    /// Like `stat` (system-wide until Ctrl-C, for --duration, for --pid, or for a COMMAND and
    /// what it forks), but everything goes into one file as it is counted: the machine (kernel,
    /// nodes and distances, NUMA sysctls, scan tunables, THP settings, kernel config, cpusets),
    /// the hook report, /proc/vmstat before and after, a snapshot every --interval, and every
    /// event with its timestamp (scan calls, migrations and stalls with their durations, VMA
    /// skips, placement), in compressed, checksummed sections: a capture cut short (SIGKILL, a
    /// full disk) is still readable up to its last whole section. `numatrace report FILE` reads
    /// it on any machine, without root.
    #[command(after_help = "Examples:\n  \
        sudo numatrace record -- ./workload           until the workload exits\n  \
        sudo numatrace record -d 60s -o before.ntrace  one minute, system-wide\n  \
        sudo numatrace record --pid 1234 --redact      names hashed for sharing\n  \
        numatrace report before.ntrace                 read it (no root needed)")]
    Record(RecordArgs),
    /// Read a capture offline: the stat summary, verdicts, findings; compare two; export a trace.
    ///
    /// Needs no root and no BPF: a capture from another machine reads the same. The summary is
    /// `stat`'s (same text; `--format json` embeds the same numatrace.stat/2 object), followed by the
    /// verdicts of the seed patches that one window's evidence can judge (002, 003) and findings:
    /// plain sentences with their numbers about what deserves attention. A truncated,
    /// corrupted, newer or foreign file gives one line naming the file and the problem.
    #[command(after_help = "Examples:\n  \
        numatrace report capture.ntrace\n  \
        numatrace report capture.ntrace --format json\n  \
        numatrace report --diff unpatched.ntrace patched.ntrace\n  \
        numatrace report capture.ntrace --format chrome-trace -o trace.json   (ui.perfetto.dev)\n  \
        numatrace report capture.ntrace --html report.html                    (charts, any browser)\n  \
        numatrace report --diff base.ntrace patched.ntrace --html ab.html")]
    Report(ReportArgs),
    /// Judge whether this kernel behaves as a seed patch intends, with the evidence.
    ///
    /// 000 ("Do not trap faults on shared data section pages"): hint faults and migrations of
    /// COW-shared pages, against a control whose pages are private. 001 (4K faults handled as
    /// hugepage ones, never merged): hint faults per 2 MiB region per scan pass with 4K pages,
    /// THP as the reference. 002 ("scan the vma if it has not been scanned for a while"): the
    /// scan-sequence gap at each pid_inactive skip against the thread count, with a reproducer
    /// that leaves one VMA idle and then touches it again (needs tp_btf on
    /// sched_skip_vma_numa: 6.8+). 003 ("cap pte scanning overhead to 3% of run time"):
    /// node_stamp invariants, call rate and scan share of a scan-heavy workload. 004
    /// (PR_SET_THP_DISABLE): THP state inherited across fork and exec, and no THP hint faults
    /// in THP-disabled processes, against a control.
    ///
    /// The reproducers of 002 and 003 set fast scan tunables (debugfs) and restore them; if
    /// check is killed outright (SIGKILL), the next check says so and `check
    /// --restore-tunables` restores them. All
    /// but 002 need the function hooks (fentry or kprobes); all need kernel.numa_balancing=1,
    /// and 000 and 001 also 2+ NUMA nodes.
    Check(CheckArgs),
    /// Put any kernel under test in QEMU guests with real NUMA nodes: a patched build, two side by side.
    ///
    /// Boots each --kernel in a guest of its own (2 nodes by default, no disk, no network),
    /// with this numatrace as the guest's init, runs the numatrace SUBCOMMAND after `--`
    /// (check, stat, record or probes) there and brings the results out; with two or more
    /// kernels, a table side by side (and for record, `report --diff` of the first two
    /// captures). Needs no root and never touches the host kernel: QEMU runs as you, with KVM
    /// when /dev/kvm really boots a guest, else TCG (slower; said so). Before booting, each
    /// kernel's config is checked for what numatrace needs (`--config-fragment` prints the
    /// fragment that turns it all on). Inside the guest only numatrace and numatrace-workload
    /// exist: `stat -- numatrace-workload threads` runs, your own programs do not.
    #[command(after_help = "Examples:\n  \
        numatrace lab --kernel debian:6.12 -- check --patch 000\n  \
        numatrace lab --kernel ~/linux --kernel debian:6.12 -- check --patch 000   a tree against stock\n  \
        numatrace lab --kernel debian:6.1 --kernel debian:6.12 --out ab -- record -d 20s -- numatrace-workload migrate\n  \
        numatrace lab --kernel /boot/vmlinuz-$(uname -r) --slow-node -- probes\n  \
        numatrace lab --config-fragment > numatrace.config   (merge_config.sh, then make bzImage)")]
    Lab(LabArgs),
    /// Print the completion script for SHELL (bash, zsh or fish) on stdout.
    #[command(
        after_help = "Where to put it (the Debian package of `cargo xtask deb` installs all \
        three system-wide):\n  \
        numatrace completions bash > ~/.local/share/bash-completion/completions/numatrace\n  \
        numatrace completions zsh > ~/.zfunc/_numatrace   (fpath+=(~/.zfunc) before compinit)\n  \
        numatrace completions fish > ~/.config/fish/completions/numatrace.fish\n\
        System-wide: /usr/share/bash-completion/completions/numatrace, \
        /usr/share/zsh/vendor-completions/_numatrace, \
        /usr/share/fish/vendor_completions.d/numatrace.fish. A new shell picks it up."
    )]
    Completions {
        /// The shell whose script to print.
        #[arg(value_parser = ["bash", "zsh", "fish"])]
        shell: String,
    },
    /// Write the man pages, numatrace.1 and numatrace-SUBCOMMAND.1, into DIR (for packagers).
    #[command(hide = true)]
    Manpages {
        /// Created if missing; an existing page there is refused, never overwritten.
        #[arg(long, value_name = "DIR")]
        out_dir: std::path::PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct LabArgs {
    /// A kernel to boot: an image file (bzImage, vmlinuz), a built kernel tree, or a line
    /// fetched once into the cache (debian:5.10, debian:6.1, debian:6.12, debian:7.x,
    /// ubuntu:6.8). Repeat it to compare kernels.
    #[arg(
        long = "kernel",
        value_name = "SPEC",
        required_unless_present = "config_fragment"
    )]
    pub kernels: Vec<String>,

    /// Nodes with CPUs and memory.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub nodes: u32,

    /// vCPUs, spread over the nodes (default: one per node).
    #[arg(long, value_name = "N")]
    pub cpus: Option<u32>,

    /// Memory of each node, in MiB (or with a G suffix: 2G).
    #[arg(long, default_value = "1024", value_name = "MIB", value_parser = parse_mib)]
    pub node_mem: u64,

    /// Add a CPU-less node of this much memory (default 512 MiB) that the ACPI HMAT describes
    /// as slower: a lower memory tier on kernels that place nodes in tiers by HMAT (6.10+).
    #[arg(long, value_name = "MIB", num_args = 0..=1, default_missing_value = "512", value_parser = parse_mib)]
    pub slow_node: Option<u64>,

    /// Extra kernel command-line arguments (e.g. "numa_balancing=2 transparent_hugepage=always").
    #[arg(long, value_name = "ARGS", default_value = "")]
    pub cmdline: String,

    /// A guest that has not finished by then is stopped (its console log kept in --out).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Keep results here: captures, outputs and each guest's console log (created if missing;
    /// an existing file is never overwritten). record writes its capture here (default
    /// ./numatrace-lab when record runs without --out).
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,

    /// Print one JSON document (schema numatrace.lab/1) with each kernel's result.
    #[arg(long)]
    pub json: bool,

    /// How QEMU runs the guest: kvm, tcg, or auto (KVM when it boots a guest here, else TCG).
    #[arg(long, default_value = "auto", value_parser = ["auto", "kvm", "tcg"])]
    pub accel: String,

    /// Show each guest's console as it runs (indented), not only progress.
    #[arg(long)]
    pub console: bool,

    /// Print the kernel config fragment that turns on everything numatrace uses, and exit.
    #[arg(long, conflicts_with_all = ["kernels", "command"])]
    pub config_fragment: bool,

    /// The numatrace subcommand to run in each guest, and its arguments.
    #[arg(
        last = true,
        value_name = "SUBCOMMAND",
        required_unless_present = "config_fragment"
    )]
    pub command: Vec<String>,
}

/// MiB, or GiB with a G suffix.
pub fn parse_mib(s: &str) -> Result<u64, String> {
    let (n, scale) = match s.strip_suffix(['G', 'g']) {
        Some(n) => (n, 1024),
        None => (s.strip_suffix(['M', 'm']).unwrap_or(s), 1),
    };
    n.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|n| (128..=1 << 20).contains(n))
        .ok_or_else(|| "MiB from 128 (or 1G, 2G...)".to_owned())
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The patch to check (a seed number), or all.
    #[arg(long, default_value = "all", value_parser = ["000", "001", "002", "003", "004", "all"])]
    pub patch: String,

    /// How long each reproducer run lasts.
    #[arg(long, short = 'd', default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Print JSON (schema numatrace.check/1) instead of text.
    #[arg(long)]
    pub json: bool,

    /// Run each check N times (each with its own windows) and say whether the verdicts agree:
    /// a verdict that changes from run to run depends on timing, not on the kernel. Exit
    /// status 3 when they disagree.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100),
          conflicts_with = "restore_tunables")]
    pub repeat: u32,

    /// Run the shipped reproducer (numatrace-workload) and its control; the default without a
    /// COMMAND.
    #[arg(long, conflicts_with = "command")]
    pub reproduce: bool,

    /// MiB in seed 000's reproducer array.
    #[arg(long, default_value_t = 32)]
    pub mem_mib: usize,

    /// Put back the NUMA balancing tunables a killed `check` left changed (their original
    /// values are kept in /run/numatrace/tunables.saved while a reproducer runs), and exit.
    #[arg(long, conflicts_with_all = ["command", "reproduce", "json"])]
    pub restore_tunables: bool,

    /// Run COMMAND as USER (a name or uid; strace's -u; root without sudo only). Under sudo
    /// COMMAND runs as the user who ran sudo and no one else. The reproducers always run as
    /// root.
    #[arg(long, short = 'u', value_name = "USER", requires = "command")]
    pub user: Option<String>,

    /// Judge your own workload instead, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,

    /// Who COMMAND runs as, resolved once from --user / sudo by `check`.
    #[arg(skip)]
    pub run_as: Option<crate::identity::Identity>,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Stop after this long (default: until Ctrl-C, the --pid process or the COMMAND ends).
    #[arg(long, short = 'd', value_parser = parse_duration, conflicts_with = "command")]
    pub duration: Option<Duration>,

    /// The capture file (default: numatrace-HOST-YYYYMMDD-HHMMSS.ntrace here, or the first free
    /// -2, -3, … after it). Created mode 0600 (yours under sudo); an existing FILE is refused
    /// unless --force.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,

    /// Replace the -o FILE if it exists (never written through a symlink: the entry is replaced).
    #[arg(long)]
    pub force: bool,

    /// Follow this process and what it forks from now on.
    #[arg(long, short = 'p', conflicts_with = "command")]
    pub pid: Option<u32>,

    #[command(flatten)]
    pub view: ViewArgs,

    /// Past this size (e.g. 200M, 2G) events and samples are counted, not written; the closing
    /// sections always are.
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub max_size: u64,

    /// Replace comm, cgroup and mapping paths, the command line and the host name with hashes
    /// keyed per capture (the same name is the same hash throughout one file).
    #[arg(long)]
    pub redact: bool,

    /// How often a snapshot (for rates over time) and the events are written.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,

    /// Ring buffer size (see `stat --ringbuf-size`).
    #[arg(long, default_value_t = DEFAULT_RINGBUF_BYTES, value_parser = parse_ringbuf_size)]
    pub ringbuf_size: u32,

    #[command(flatten)]
    pub kernel: KernelArgs,

    #[command(flatten)]
    pub traced: TracedArgs,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// The stat summary, verdicts and findings as text.
    #[default]
    Text,
    /// One JSON object (schema numatrace.report/1; `stat` holds numatrace.stat/2).
    Json,
    /// Chrome trace-event JSON for Perfetto / chrome://tracing.
    ChromeTrace,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The capture to read.
    #[arg(value_name = "FILE", required_unless_present = "diff")]
    pub file: Option<std::path::PathBuf>,

    /// Compare two captures: the same metrics side by side with the change.
    #[arg(long, num_args = 2, value_names = ["BEFORE", "AFTER"], conflicts_with = "file")]
    pub diff: Option<Vec<std::path::PathBuf>>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,

    /// Same as --format json: kept working for scripts written against older versions, and
    /// hidden from the help, which names one way.
    #[arg(long, conflicts_with = "format", hide = true)]
    pub json: bool,

    /// Write to FILE instead of stdout (whole or not at all, mode 0600, yours under sudo; an
    /// existing FILE is refused unless --force).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,

    /// Replace the -o FILE if it exists (never written through a symlink: the entry is replaced).
    #[arg(long)]
    pub force: bool,

    /// Task rows in the text summary.
    #[arg(long, default_value_t = 25)]
    pub rows: usize,

    /// Write one self-contained HTML page to FILE instead: verdicts and findings, charts over
    /// time (scan share, PTE updates, hint faults, migrations, promotions), the node matrix,
    /// histograms, a sortable task table and the context. With --diff: A and B overlaid, with
    /// every metric's change. The page loads nothing from the network. Same file rules as -o.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["output", "format", "json"])]
    pub html: Option<std::path::PathBuf>,
}

/// `512M`, `2G`, `100k` or plain bytes (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown unit in {s:?} (K, M or G)")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|n| *n >= 4096)
        .ok_or_else(|| format!("{s:?}: a size of at least 4K, e.g. 512M"))
}

/// The port `serve` listens on by default: above the Prometheus wiki's exporter range
/// (9100-9999, fully allocated) and not on its list.
pub const DEFAULT_SERVE_PORT: u16 = 19472;

const SERVE_AFTER_HELP: &str = "Examples:\n  \
    sudo numatrace serve                         http://127.0.0.1:19472/metrics\n  \
    sudo numatrace serve --listen 0.0.0.0:19472  scraped from other machines\n  \
    sudo numatrace serve --top-tasks 50 --cgroups-depth 3\n\n\
    Series are bounded: workload families x (total + self + cgroups + top tasks + other), cgroups \
    at most --max-cgroups (+ other), and node families x nodes^2 (docs/serve.md has the exact \
    bound). `numatrace serve --metrics` prints the list below alone.";

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address and port to listen on (`127.0.0.1:0` picks a free port; the address is printed).
    #[arg(long, default_value_t = std::net::SocketAddr::from(([127, 0, 0, 1], DEFAULT_SERVE_PORT)))]
    pub listen: std::net::SocketAddr,

    /// Tasks exported on their own (by PTE-scan time, then hint faults); the rest are summed
    /// into the series with comm="other", pid="other".
    #[arg(long, default_value_t = 20)]
    pub top_tasks: usize,

    /// Path components of a cgroup label: deeper cgroups count for their ancestor at this depth.
    #[arg(long, default_value_t = 2)]
    pub cgroups_depth: usize,

    /// Cgroup series at most; cgroups seen after that count under cgroup="other".
    #[arg(long, default_value_t = 200)]
    pub max_cgroups: usize,

    #[command(flatten)]
    pub kernel: KernelArgs,

    /// Print every metric family (name, type, labels, meaning) and exit; needs no root.
    #[arg(long)]
    pub metrics: bool,

    /// TLS and basic auth, from a web config file in the Prometheus exporters' format
    /// (exporter-toolkit's; `promtool check web-config` checks it):
    ///
    ///   tls_server_config: {cert_file: PEM, key_file: PEM, min_version: TLS12|TLS13,
    ///     client_auth_type: RequireAndVerifyClientCert, client_ca_file: PEM}
    ///   basic_auth_users: {USER: BCRYPT-HASH}    # bcrypt: htpasswd -nBC 10 USER
    ///   http_server_config: {headers: {Strict-Transport-Security: ...}}
    ///
    /// Relative paths are relative to the file; an unknown key is an error. Read at start.
    #[arg(long = "web.config.file", value_name = "PATH", verbatim_doc_comment)]
    pub web_config_file: Option<std::path::PathBuf>,

    /// A connection's first request header (and TLS handshake) must arrive within this of
    /// accept; later ones within this of their first byte.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,

    /// A keep-alive connection idle for this long is closed.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// Connections open at once at most: one more evicts the one idle longest, or is closed
    /// at once when every one is being answered.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_connections: u32,

    /// Largest request header in bytes (431 above it); request bodies are never read.
    #[arg(long, default_value_t = 16384, value_parser = clap::value_parser!(u32).range(8192..=1048576))]
    pub max_header_bytes: u32,
}

/// `top --sort`: the columns of the task and process tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SortColumn {
    Pid,
    Comm,
    Scan,
    Pte,
    Hint,
    Local,
    Migr,
    Skip,
    Node,
    Thp,
    Fail,
    Lat,
    Cow,
    Stalls,
    Reason,
    Moves,
    Cgroup,
}

impl SortColumn {
    /// Its index in `top::view::COLUMNS` (the same order).
    pub fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Seconds between refreshes (a bare number of seconds, or 500ms, 2s ...).
    #[arg(long, short = 'd', default_value = "1", value_parser = parse_duration)]
    pub delay: Duration,

    /// Batch mode: plain-text frames on stdout (no terminal control), like `top -b`. The first
    /// frame comes half a second after attach (or after --delay if shorter), the rest every
    /// --delay; each frame states its interval. With -n 1 the one frame covers a whole --delay.
    #[arg(long, short = 'b')]
    pub batch: bool,

    /// Number of frames in batch mode (default: until Ctrl-C).
    #[arg(long, short = 'n', requires = "batch", value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: Option<u64>,

    /// In batch mode, one JSON object per frame (JSON Lines): `stat --json`'s fields for the
    /// interval, plus `frame`, `interval_s`, `rates`, `own` and `caps`.
    #[arg(long, requires = "batch")]
    pub json: bool,

    /// Rows of a batch-mode text frame.
    #[arg(long, default_value_t = 20)]
    pub rows: usize,

    /// Sort tasks and processes by this column (default: scan time, or where this kernel
    /// does not measure it, hint faults, else skipped VMAs). In the view: `s`, `1`-`5`.
    #[arg(long, short = 's', value_enum)]
    pub sort: Option<SortColumn>,

    /// Keep a task, process or cgroup listed while it was active within this window (1s to
    /// 10m; 30, 30s, 2m ...).
    ///
    /// NUMA balancing works in bursts (a scan every 1-60 s): a row stays listed for WINDOW after
    /// its last activity, LAST says how long ago that was, and a column beside the interval's
    /// gives the sort column's value (or the busiest's) over the window, e.g. `HINT/s@10s`.
    /// The nodes view shades the node-to-node migrations of the window. In the view, `w` cycles
    /// 5, 10, 30 and 60 s.
    #[arg(long, value_name = "WINDOW", default_value = "10s",
          value_parser = parse_window)]
    pub window: u64,

    /// Only this process (thread-group id) and the processes it forks from now on.
    #[arg(long, short = 'p')]
    pub pid: Option<u32>,

    #[command(flatten)]
    pub view: ViewArgs,

    #[command(flatten)]
    pub kernel: KernelArgs,
}

#[derive(Debug, Args)]
pub struct StatArgs {
    /// How long to count (e.g. 10s, 2m, 1h30m); default: until Ctrl-C or the COMMAND exits.
    #[arg(long, short = 'd', value_parser = parse_duration, conflicts_with = "command")]
    pub duration: Option<Duration>,

    /// Print JSON (schema numatrace.stat/2, see docs/json-schema.md) instead of a table. It
    /// holds more than the table (each VMA's scan times and skips by reason, seed 001's hint
    /// faults per region pass), which the kernel programs then collect: a little more work per
    /// event.
    #[arg(long)]
    pub json: bool,

    /// Write the report to FILE instead of stdout (a traced command keeps stdout to itself).
    /// Mode 0600, yours under sudo; an existing FILE is refused, before the window, unless
    /// --force.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,

    /// Replace the -o FILE if it exists (never written through a symlink: the entry is replaced).
    #[arg(long)]
    pub force: bool,

    /// Only this process (thread-group id) and the processes it forks from now on.
    #[arg(long, short = 'p', conflicts_with = "command")]
    pub pid: Option<u32>,

    #[command(flatten)]
    pub view: ViewArgs,

    /// Rows in the text table (the JSON always lists every task).
    #[arg(long, default_value_t = 25)]
    pub rows: usize,

    #[command(flatten)]
    pub kernel: KernelArgs,

    /// Capacity of each in-kernel per-VMA table (PTE updates; skips by reason and their
    /// scan-sequence gaps); VMAs beyond it are counted under "dropped" (their PTE updates and
    /// skips still count per task).
    #[arg(long, default_value_t = MAX_VMAS, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_vmas: u32,

    /// Ring buffer size in bytes, rounded up to a power of two (at least 64 KiB).
    #[arg(long, default_value_t = DEFAULT_RINGBUF_BYTES, value_parser = parse_ringbuf_size)]
    pub ringbuf_size: u32,

    /// Forward the kernel programs' debug messages (aya-log) to numatrace's log at debug level.
    #[arg(long)]
    pub bpf_log: bool,

    #[command(flatten)]
    pub traced: TracedArgs,
}

/// Which tasks a view shows: `stat`, `top` and `record` take the same filters.
#[derive(Clone, Debug, Default, Args)]
pub struct ViewArgs {
    /// Only tasks whose name (comm, at most 15 characters) is NAME.
    #[arg(long, value_name = "NAME")]
    pub comm: Option<String>,

    /// Only tasks in this cgroup v2 directory or below it: a path under the cgroup2 mount
    /// (`/system.slice/foo.service`) or the full path (`/sys/fs/cgroup/system.slice/foo.service`).
    /// Everything is still counted (and by `record`, written); the view and the report show
    /// that subtree (cgroup v2 only).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
}

/// The kernel side's table size and sampling rate, as every attaching subcommand takes them.
#[derive(Clone, Debug, Args)]
pub struct KernelArgs {
    /// Capacity of the in-kernel per-task table (~820 bytes a task with its pid's key,
    /// allocated when the programs load). A task that finds it full is not counted per task until an exit frees a
    /// slot: its events are reported under "dropped" (task_map_full); the totals stay exact.
    /// At most 4194304, the kernel's largest pid_max
    #[arg(long, default_value_t = DEFAULT_MAX_TASKS, value_parser = clap::value_parser!(u32).range(64..=4_194_304))]
    pub max_tasks: u32,

    /// Sampling frequency (per CPU) of the scan-share fallback, used only where task_numa_work
    /// cannot be hooked: more samples, finer estimates, more overhead.
    #[arg(long, default_value_t = 99, value_parser = clap::value_parser!(u64).range(1..=10000))]
    pub sample_hz: u64,
}

/// A command numatrace starts and traces from its first instruction (`stat`, `record`).
#[derive(Clone, Debug, Default, Args)]
pub struct TracedArgs {
    /// Run COMMAND as USER (a name or uid; strace's -u; root without sudo only). Under sudo
    /// COMMAND runs as the user who ran sudo and no one else.
    #[arg(long, short = 'u', value_name = "USER", requires = "command")]
    pub user: Option<String>,

    /// The command to run and trace, after `--`: it and its children, from its first
    /// instruction to its exit.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// The longest activity window `top` keeps (`--window`): ten minutes of history.
pub const TOP_WINDOW_MAX_S: u64 = 600;

/// `--window`: a duration from 1 s to 10 min, in whole seconds.
pub fn parse_window(s: &str) -> Result<u64, String> {
    let d: Duration = parse_duration(s)?;
    let secs = d.as_secs_f64().round() as u64;
    if !(1..=TOP_WINDOW_MAX_S).contains(&secs) {
        return Err(format!(
            "the window must be between 1 s and {TOP_WINDOW_MAX_S} s"
        ));
    }
    Ok(secs)
}

/// A duration: a bare number of seconds (`16`, `0.5`, as `top -d` and `perf` take), or with
/// units (`10s`, `2m`, `1h30m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = match s.trim().parse::<f64>() {
        Ok(secs) => Duration::try_from_secs_f64(secs)
            .map_err(|_| "the duration must be a positive number of seconds".to_owned())?,
        Err(_) => humantime::parse_duration(s)
            .map_err(|e| format!("{e} (examples: 16 (seconds), 10s, 2m, 1h30m)"))?,
    };
    if d.is_zero() {
        return Err("the duration must be longer than zero".into());
    }
    Ok(d)
}

pub fn parse_ringbuf_size(s: &str) -> Result<u32, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of bytes"))?;
    let n = n.max(64 << 10).next_power_of_two();
    u32::try_from(n)
        .ok()
        .filter(|&n| n <= 1 << 30)
        .ok_or_else(|| "at most 1 GiB".to_owned())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("numatrace").chain(args.iter().copied()))
    }

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn stat_command_after_double_dash() {
        let Command::Stat(a) = parse(&["stat", "--json", "--", "ls", "-l"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert!(a.json);
        assert_eq!(a.traced.command, ["ls", "-l"]);
        assert_eq!(a.duration, None);
        assert_eq!(a.kernel.max_tasks, DEFAULT_MAX_TASKS);
    }

    #[test]
    fn stat_duration_and_pid() {
        let Command::Stat(a) = parse(&["stat", "-d", "1m30s", "--pid", "42"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert_eq!(a.duration, Some(Duration::from_secs(90)));
        assert_eq!(a.pid, Some(42));
        let Command::Stat(a) = parse(&["stat", "-d", "16", "--cgroup", "/system.slice"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert_eq!(a.duration, Some(Duration::from_secs(16)), "bare seconds");
        assert_eq!(a.view.cgroup.as_deref(), Some("/system.slice"));
        assert_eq!(a.max_vmas, MAX_VMAS);
    }

    #[test]
    fn stat_rejects_conflicts_and_bad_values() {
        assert!(parse(&["stat", "--pid", "1", "--", "ls"]).is_err());
        assert!(parse(&["stat", "-d", "5s", "--", "ls"]).is_err());
        assert!(parse(&["stat", "-d", "0s"]).is_err());
        assert!(parse(&["stat", "-d", "soon"]).is_err());
        assert!(parse(&["stat", "--max-tasks", "3"]).is_err());
        assert!(parse(&["stat", "-d", "-1"]).is_err());
        assert!(parse(&["stat", "-d", "0"]).is_err());
        assert!(parse(&["stat", "-d", "1e30"]).is_err());
        assert!(parse(&["stat", "-d", "nan"]).is_err());
    }

    #[test]
    fn top_options() {
        let Command::Top(a) = parse(&["top", "-b", "-n", "3", "-d", "0.5", "--json"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert!(a.batch && a.json);
        assert_eq!(a.iterations, Some(3));
        assert_eq!(a.delay, Duration::from_millis(500));
        let Command::Top(a) = parse(&["top"]).unwrap().command else {
            panic!()
        };
        assert_eq!(a.delay, Duration::from_secs(1));
        assert!(parse(&["top", "-n", "3"]).is_err(), "-n needs -b");
        let Command::Top(a) = parse(&["top", "-s", "hint"]).unwrap().command else {
            panic!()
        };
        assert_eq!(a.sort, Some(SortColumn::Hint));
        assert!(parse(&["top", "-s", "bogus"]).is_err());
        assert!(parse(&["top", "--json"]).is_err(), "--json needs -b");
    }

    #[test]
    fn sizes_and_report_options() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("8192"), Ok(8192));
        assert!(parse_size("1x").is_err() && parse_size("10").is_err());
        assert!(parse(&["report"]).is_err(), "a file or --diff");
        assert!(parse(&["report", "--diff", "a"]).is_err(), "two files");
        assert!(parse(&["report", "--diff", "a", "b"]).is_ok());
        assert!(parse(&["report", "a", "--json", "--format", "text"]).is_err());
        assert!(parse(&["record", "-d", "5s", "--", "true"]).is_err());
        assert!(parse(&["record", "--redact", "--max-size", "1G", "--", "true"]).is_ok());
    }

    #[test]
    fn ringbuf_size_rounds_up() {
        assert_eq!(parse_ringbuf_size("100000"), Ok(131072));
        assert_eq!(parse_ringbuf_size("1"), Ok(65536));
        assert!(parse_ringbuf_size("x").is_err());
        assert!(parse_ringbuf_size("4294967296").is_err());
    }
}
