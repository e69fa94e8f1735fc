//! Per-event kernel cost of every attached program against its floor, from the kernel's BPF
//! run-time statistics over a real workload.

use std::time::Duration;

use anyhow::Result;
use numatrace::engine::{Detail, Engine};
use numatrace_common::Counter;

use crate::{
    floor, peer,
    record::{HookPeer, PeerCost, ProgramCost, RingLoad},
    workloads::Mix,
};

/// bpftrace's name for a program on `target` (a function or tracepoint name).
fn bpftrace_name(target: &str) -> &str {
    &target[..target.len().min(15)]
}

/// The peers for the programs that attached here (none without bpftrace).
fn start_peers(
    bpftrace: Option<&std::path::Path>,
    attached: &[String],
) -> Vec<(&'static peer::Probe, peer::Peer)> {
    let Some(bt) = bpftrace else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in peer::PROBES
        .iter()
        .filter(|p| attached.iter().any(|a| a == p.program))
    {
        match peer::Peer::start(bt, p.script, None) {
            Ok(peer) => out.push((p, peer)),
            Err(e) => eprintln!("numatrace-bench: {}: {e:#}", p.peer),
        }
    }
    out
}

/// The programs of the engine's object that are loaded.
fn program_names(engine: &Engine) -> Vec<String> {
    engine
        .program_stats()
        .into_iter()
        .map(|(n, ..)| n)
        .collect()
}

fn stat_of(v: &[(String, u64, u64)], program: &str) -> (u64, u64) {
    v.iter()
        .find(|(n, ..)| n == program)
        .map_or((0, 0), |(_, t, n)| (*t, *n))
}

/// Both sides' deltas over a run, one row per peer.
fn peer_rows(
    pass: &'static str,
    peers: &[(&'static peer::Probe, peer::Peer)],
    before: &[(u64, u64)],
    real0: &[(String, u64, u64)],
    real1: &[(String, u64, u64)],
    tracked_exits: u64,
) -> Vec<PeerCost> {
    peers
        .iter()
        .zip(before)
        .map(|((p, peer), (pt0, pn0))| {
            let ((t0, n0), (t1, n1)) = (stat_of(real0, p.program), stat_of(real1, p.program));
            let (pt1, pn1) = peer.stats();
            PeerCost {
                pass: pass.to_owned(),
                program: p.program.to_owned(),
                runs: n1 - n0,
                ns_per_run: per_run(t1 - t0, n1 - n0),
                peer: p.peer.to_owned(),
                peer_runs: pn1 - pn0,
                peer_ns_per_run: per_run(pt1 - pt0, pn1 - pn0),
                tracked: (p.program == "tp_sched_process_exit").then_some(tracked_exits),
            }
        })
        .collect()
}

/// numatrace following nobody while `tasks` short-lived tasks fork and exit: the cost of its
/// programs for tasks it never tracked, beside bpftrace's on the same tracepoints.
pub fn measure_untracked(
    mix: &Mix,
    tasks: usize,
    bpftrace: &std::path::Path,
) -> Result<Vec<PeerCost>> {
    let rt = crate::runtime()?;
    let _rt = rt.enter();
    let mut opts = crate::load_options();
    opts.filter_tgids = true;
    let facts = numatrace::kernel::facts::KernelFacts::gather()?;
    let mut engine = Engine::start(facts, &opts)?;
    let peers = start_peers(Some(bpftrace), &program_names(&engine));
    engine.enable_bpf_stats()?;
    let real0 = engine.program_stats();
    let peer0: Vec<(u64, u64)> = peers.iter().map(|(_, p)| p.stats()).collect();
    let before = engine.snapshot(Detail::Summary)?;
    mix.churn(tasks)?;
    let after = engine.snapshot(Detail::Summary)?;
    let real1 = engine.program_stats();
    let tracked = after.counter(Counter::ExitSnapshots) - before.counter(Counter::ExitSnapshots);
    let rows = peer_rows("untracked", &peers, &peer0, &real0, &real1, tracked);
    drop(peers);
    rt.block_on(engine.stop())?;
    Ok(rows)
}

fn per_run(t: u64, n: u64) -> Option<f64> {
    (n > 0).then(|| t as f64 / n as f64)
}

/// What one programs run found.
pub struct Measured {
    pub costs: Vec<ProgramCost>,
    /// Per hook against bpftrace's overhead script (given a script).
    pub hooks: Vec<HookPeer>,
    pub ring: RingLoad,
    pub peers: Vec<PeerCost>,
    /// Floors that could not be attached.
    pub errors: Vec<String>,
    /// What the reader of the tables should know (e.g. bpftrace's program names).
    pub notes: Vec<String>,
}

/// Attaches numatrace as `record` does (every record kind on), a floor beside each program,
/// runs `mix` with statistics on and returns each program's cost and the ring buffer's load.
pub fn measure(
    mix: &Mix,
    duration: Duration,
    bpftrace: Option<&std::path::Path>,
    script: Option<(&std::path::Path, &str)>,
) -> Result<Measured> {
    let rt = crate::runtime()?;
    let _rt = rt.enter();
    let mut opts = crate::load_options();
    opts.emit_spans = true;
    let facts = numatrace::kernel::facts::KernelFacts::gather()?;
    let mut engine = Engine::start(facts, &opts)?;
    // Counted, not kept: with no room every record goes to `lost`.
    engine.tap_events(0);
    let hooks: std::collections::HashSet<String> = engine
        .hooks
        .iter()
        .filter(|h| h.attached)
        .map(|h| h.name.clone())
        .collect();
    let attached = |name: &str| hooks.contains(name);
    let (floors, errors) = floor::attach_all(&engine.plan, attached, &opts);
    let peers = start_peers(bpftrace, &program_names(&engine));
    let script_peer = match script {
        // The script prints "ready" once every probe is attached.
        Some((bt, s)) => match peer::Peer::start(bt, s, Some("ready")) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("numatrace-bench: bpftrace's script: {e:#}");
                None
            }
        },
        None => None,
    };
    engine.enable_bpf_stats()?;
    let real0 = engine.program_stats();
    let peer0: Vec<(u64, u64)> = peers.iter().map(|(_, p)| p.stats()).collect();
    let script0 = script_peer.as_ref().map(peer::Peer::named_stats);
    let floor0: Vec<(u64, u64)> = floors.iter().map(floor::Floor::stats).collect();
    let before = engine.snapshot(Detail::Summary)?;
    let t = std::time::Instant::now();
    mix.run(duration)?;
    let after = engine.snapshot(Detail::Summary)?;
    let seconds = t.elapsed().as_secs_f64();
    let (events, lost) = engine.take_events();
    let real1 = engine.program_stats();
    let tracked = after.counter(Counter::ExitSnapshots) - before.counter(Counter::ExitSnapshots);
    let peer_costs = peer_rows("system-wide", &peers, &peer0, &real0, &real1, tracked);
    drop(peers);
    let mut hooks = Vec::new();
    let mut notes = Vec::new();
    if let (Some(sp), Some(s0)) = (&script_peer, &script0) {
        let s1 = sp.named_stats();
        let mut names: Vec<&str> = s1.iter().map(|(n, ..)| n.as_str()).collect();
        names.sort_unstable();
        notes.push(format!(
            "bpftrace's script loaded {} programs: {}",
            names.len(),
            names.join(", ")
        ));
        // bpftrace's programs on one target: Σ run time over the run, and how many there are.
        let sum = |v: &[(String, u64, u64)], name: &str| {
            v.iter()
                .filter(|(n, ..)| n == name)
                .fold((0u64, 0usize), |(t, k), (_, a, _)| (t + a, k + 1))
        };
        for h in engine.plan.hooks.iter().filter(|h| attached(h.spec.name)) {
            let target = match (h.spec.kind, h.symbol.as_deref()) {
                (numatrace::kernel::catalogue::HookKind::Tracepoint { name, .. }, _) => name,
                (numatrace::kernel::catalogue::HookKind::Function { .. }, Some(s)) => s,
                _ => continue,
            };
            let programs = h.programs();
            let mut t = 0;
            let mut events = 0;
            for (i, program) in programs.iter().enumerate() {
                let ((t0, n0), (t1, n1)) = (stat_of(&real0, program), stat_of(&real1, program));
                t += t1 - t0;
                if i == 0 {
                    events = n1 - n0;
                }
            }
            let name = bpftrace_name(target);
            let ((t1, k), (t0, _)) = (sum(&s1, name), sum(s0, name));
            hooks.push(HookPeer {
                hook: h.spec.name.to_owned(),
                events,
                ns_per_event: per_run(t, events),
                bpftrace_ns_per_event: if k > 0 {
                    per_run(t1 - t0, events)
                } else {
                    None
                },
                bpftrace_programs: k,
            });
        }
    }
    drop(script_peer);
    let mut out = Vec::new();
    for h in engine.plan.hooks.iter().filter(|h| attached(h.spec.name)) {
        for program in h.programs() {
            let ((t0, n0), (t1, n1)) = (stat_of(&real0, program), stat_of(&real1, program));
            let (ft, fn_) = floors
                .iter()
                .zip(&floor0)
                .find(|(f, _)| f.hook == h.spec.name && f.twin == program)
                .map_or((0, 0), |(f, (t0, n0))| {
                    let (t1, n1) = f.stats();
                    (t1 - t0, n1 - n0)
                });
            out.push(ProgramCost {
                hook: h.spec.name.to_owned(),
                mechanism: h.mechanism.to_string(),
                program: program.to_owned(),
                runs: n1 - n0,
                ns_per_run: per_run(t1 - t0, n1 - n0),
                floor_runs: fn_,
                floor_ns_per_run: per_run(ft, fn_),
            });
        }
    }
    let ring = RingLoad {
        records: events.len() as u64 + lost,
        seconds,
        dropped: after.counter(Counter::RingbufFull) - before.counter(Counter::RingbufFull),
    };
    drop(floors);
    rt.block_on(engine.stop())?;
    Ok(Measured {
        costs: out,
        hooks,
        ring,
        peers: peer_costs,
        errors,
        notes,
    })
}
