//! Per-event kernel cost of every attached program against its floor, from the kernel's BPF
//! run-time statistics over a real workload.

use std::time::Duration;

use anyhow::Result;
use numatrace::engine::{Detail, Engine};
use numatrace_common::Counter;

use crate::{
    floor, lookup, peer,
    record::{HookPeer, LookupCost, PeerCost, ProgramCost, RingLoad},
    workloads::Mix,
};

/// bpftrace's name for a program on `target` (a function or tracepoint name).
fn bpftrace_name(target: &str) -> &str {
    &target[..target.len().min(15)]
}

/// The peers for the programs that attached here (none without bpftrace), each with the
/// program of numatrace it is compared with.
fn start_peers(
    bpftrace: Option<&std::path::Path>,
    attached: &[String],
) -> Vec<(&'static peer::Probe, &'static str, peer::Peer)> {
    let Some(bt) = bpftrace else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in peer::PROBES {
        let Some(program) = p
            .programs
            .iter()
            .copied()
            .find(|n| attached.iter().any(|a| a == n))
        else {
            continue;
        };
        match peer::Peer::start(bt, p.script, None) {
            Ok(peer) => out.push((p, program, peer)),
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
    peers: &[(&'static peer::Probe, &'static str, peer::Peer)],
    before: &[(u64, u64)],
    real0: &[(String, u64, u64)],
    real1: &[(String, u64, u64)],
    tracked_exits: u64,
) -> Vec<PeerCost> {
    peers
        .iter()
        .zip(before)
        .map(|((p, program, peer), (pt0, pn0))| {
            let ((t0, n0), (t1, n1)) = (stat_of(real0, program), stat_of(real1, program));
            let (pt1, pn1) = peer.stats();
            PeerCost {
                pass: pass.to_owned(),
                program: (*program).to_owned(),
                runs: n1 - n0,
                ns_per_run: per_run(t1 - t0, n1 - n0),
                peer: p.peer.to_owned(),
                peer_runs: pn1 - pn0,
                peer_ns_per_run: per_run(pt1 - pt0, pn1 - pn0),
                tracked: (*program == "tp_sched_process_exit").then_some(tracked_exits),
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
    let peer0: Vec<(u64, u64)> = peers.iter().map(|(_, _, p)| p.stats()).collect();
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
    /// Per hook, finding the running task's entry three ways (`lookup`).
    pub lookups: Vec<LookupCost>,
    pub ring: RingLoad,
    pub peers: Vec<PeerCost>,
    /// Floors and lookup programs that could not be attached.
    pub errors: Vec<String>,
    /// What the reader of the tables should know (e.g. bpftrace's program names).
    pub notes: Vec<String>,
}

/// The sample keys of a hook's lookup programs, in [`lookup::Lookup::stats`]' order.
const LOOKUP_WAYS: [&str; 3] = ["hash", "ts", "cpu"];

/// How often every program's statistics are read during a run (guest time under `-icount`).
const POLL: Duration = Duration::from_millis(200);

/// An interval whose ns/run exceeds this many times the program's median interval is taken to
/// carry another vCPU's time slice (see [`clean_cost`]).
const SLICE_OUTLIER: f64 = 3.0;

/// One read of every program's statistics: (key, Σ run time ns, Σ runs).
type Sample = Vec<(String, u64, u64)>;

/// A program's cost over a run from its statistics read every [`POLL`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Cost {
    /// Runs over the whole run.
    runs: u64,
    /// ns per run over the intervals kept.
    ns_per_run: Option<f64>,
    /// Intervals left out as carrying another vCPU's slice.
    dropped: usize,
}

/// Under TCG both vCPUs run on one host thread, switching every few milliseconds of guest time;
/// a program that is running when the switch comes counts the other vCPU's whole slice as its
/// own run time — a few such runs dominate a program's sum (one 50 ms slice adds 4 µs to each of
/// 12 000 runs). Each interval's ns/run is compared with the program's median interval; those
/// above [`SLICE_OUTLIER`]× it are left out and the rest summed. Every program, numatrace's, the
/// empty ones and bpftrace's, is measured the same way.
fn clean_cost(points: &[(u64, u64)]) -> Cost {
    let steps: Vec<(u64, u64)> = points
        .windows(2)
        .map(|w| (w[1].0.saturating_sub(w[0].0), w[1].1.saturating_sub(w[0].1)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let runs = steps.iter().map(|(_, n)| n).sum();
    let mut rates: Vec<f64> = steps.iter().map(|(t, n)| *t as f64 / *n as f64).collect();
    rates.sort_by(f64::total_cmp);
    let Some(&median) = rates.get(rates.len() / 2) else {
        return Cost::default();
    };
    let (mut t, mut n, mut dropped) = (0u64, 0u64, 0usize);
    for (dt, dn) in &steps {
        if *dt as f64 / *dn as f64 > SLICE_OUTLIER * median {
            dropped += 1;
        } else {
            t += dt;
            n += dn;
        }
    }
    Cost {
        runs,
        ns_per_run: per_run(t, n),
        dropped,
    }
}

/// Each key's [`Cost`] over a series of samples.
fn clean_costs(samples: &[Sample]) -> std::collections::BTreeMap<String, Cost> {
    let mut series: std::collections::BTreeMap<String, Vec<(u64, u64)>> = Default::default();
    for s in samples {
        for (k, t, n) in s {
            series.entry(k.clone()).or_default().push((*t, *n));
        }
    }
    series
        .into_iter()
        .map(|(k, p)| (k, clean_cost(&p)))
        .collect()
}

/// bpftrace's programs keyed `bt:NAME#K` (the K-th of that name: its names are truncated).
fn script_sample(sp: &peer::Peer) -> Sample {
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    sp.named_stats()
        .into_iter()
        .map(|(n, t, r)| {
            let k = seen.entry(n.clone()).or_default();
            *k += 1;
            (format!("bt:{n}#{k}"), t, r)
        })
        .collect()
}

/// Attaches numatrace twice, as `record` and as `stat` attach it (each command's declared
/// reads: `numatrace::bpf::needs`), a floor beside each program, runs `mix` with statistics on,
/// reading every program's statistics each [`POLL`], and returns each program's cost per command
/// ([`clean_cost`]) and the ring buffer's load under `record`.
pub fn measure(
    mix: &Mix,
    duration: Duration,
    bpftrace: Option<&std::path::Path>,
    script: Option<(&std::path::Path, &str)>,
) -> Result<Measured> {
    let rt = crate::runtime()?;
    let _rt = rt.enter();
    let mut engines = Vec::new();
    for (command, needs) in [
        ("record", numatrace::bpf::needs::RECORD),
        ("stat", numatrace::bpf::needs::STAT),
    ] {
        let opts = numatrace::bpf::loader::LoadOptions::reading(needs);
        let facts = numatrace::kernel::facts::KernelFacts::gather()?;
        let mut engine = Engine::start(facts, &opts)?;
        // Counted, not kept: with no room every record goes to `lost`.
        engine.tap_events(0);
        engines.push((command, engine, opts));
    }
    // BPF statistics are system-wide: one holder turns them on for both.
    engines[0].1.enable_bpf_stats()?;
    let (_, engine, opts) = &engines[0];
    let hooks: std::collections::HashSet<String> = engine
        .hooks
        .iter()
        .filter(|h| h.attached)
        .map(|h| h.name.clone())
        .collect();
    let attached = |name: &str| hooks.contains(name);
    let (floors, floor_errors) = floor::attach_all(&engine.plan, attached, opts);
    let mut errors: Vec<String> = floor_errors
        .into_iter()
        .map(|e| format!("floor: {e}"))
        .collect();
    let (lookups, lookup_errors) = lookup::attach_all(&engine.plan, attached, opts);
    errors.extend(
        lookup_errors
            .into_iter()
            .map(|e| format!("lookup programs: {e}")),
    );
    let peers = start_peers(bpftrace, &program_names(engine));
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
    let sample = |engines: &[(&str, Engine, _)]| -> Sample {
        let mut v = Sample::new();
        for (command, e, _) in engines {
            v.extend(
                e.program_stats()
                    .into_iter()
                    .map(|(p, t, n)| (format!("{command}:{p}"), t, n)),
            );
        }
        for (i, f) in floors.iter().enumerate() {
            let (t, n) = f.stats();
            v.push((format!("floor:{i}"), t, n));
        }
        for (i, l) in lookups.iter().enumerate() {
            for ((t, n), way) in l.stats().into_iter().zip(LOOKUP_WAYS) {
                v.push((format!("lookup:{i}:{way}"), t, n));
            }
        }
        if let Some(sp) = &script_peer {
            v.extend(script_sample(sp));
        }
        v
    };
    let real0 = engines[0].1.program_stats();
    let peer0: Vec<(u64, u64)> = peers.iter().map(|(_, _, p)| p.stats()).collect();
    let before = engines[0].1.snapshot(Detail::Summary)?;
    let mut samples = vec![sample(&engines)];
    let t = std::time::Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let run = s.spawn(|| mix.run(duration));
        while !run.is_finished() {
            std::thread::sleep(POLL);
            samples.push(sample(&engines));
        }
        run.join()
            .map_err(|_| anyhow::anyhow!("the workload thread panicked"))?
    })?;
    samples.push(sample(&engines));
    let after = engines[0].1.snapshot(Detail::Summary)?;
    let seconds = t.elapsed().as_secs_f64();
    let (events, lost) = engines[0].1.take_events();
    let real1 = engines[0].1.program_stats();
    let tracked = after.counter(Counter::ExitSnapshots) - before.counter(Counter::ExitSnapshots);
    let peer_costs = peer_rows("system-wide", &peers, &peer0, &real0, &real1, tracked);
    drop(peers);
    let costs = clean_costs(&samples);
    let cost = |key: &str| costs.get(key).copied().unwrap_or_default();
    // Σ over programs of ns/run × runs: their time on the hook's events.
    let time_of = |keys: &mut dyn Iterator<Item = String>| -> f64 {
        keys.map(|k| cost(&k))
            .map(|c| c.ns_per_run.map_or(0.0, |ns| ns * c.runs as f64))
            .sum()
    };
    let engine = &engines[0].1;
    let mut hooks = Vec::new();
    let mut notes = Vec::new();
    let dropped: usize = costs.values().map(|c| c.dropped).sum();
    let intervals = samples.len().saturating_sub(1);
    notes.push(format!(
        "statistics read every {} ms ({intervals} intervals); {dropped} program-intervals left \
         out as carrying the other vCPU's time slice (over {SLICE_OUTLIER}× the program's \
         median interval)",
        POLL.as_millis()
    ));
    if let Some(sp) = &script_peer {
        let s1 = sp.named_stats();
        let mut names: Vec<&str> = s1.iter().map(|(n, ..)| n.as_str()).collect();
        names.sort_unstable();
        notes.push(format!(
            "bpftrace's script loaded {} programs: {}",
            names.len(),
            names.join(", ")
        ));
        for (command, ..) in &engines {
            for h in engine.plan.hooks.iter().filter(|h| attached(h.spec.name)) {
                let target = match (h.spec.kind, h.symbol.as_deref()) {
                    (numatrace::kernel::catalogue::HookKind::Tracepoint { name, .. }, _) => name,
                    (numatrace::kernel::catalogue::HookKind::Function { .. }, Some(s)) => s,
                    _ => continue,
                };
                let mut programs: Vec<&str> = h.programs().to_vec();
                // The tp_btf program on the same tracepoint runs on the same events: its cost
                // is the hook's too.
                if let numatrace::kernel::catalogue::HookKind::Tracepoint { name, .. } = h.spec.kind
                {
                    for b in engine.plan.hooks.iter().filter(|b| {
                        attached(b.spec.name)
                            && matches!(b.spec.kind,
                                numatrace::kernel::catalogue::HookKind::BtfTracepoint {
                                    tracepoint, ..
                                } if tracepoint.split(':').nth(1) == Some(name))
                    }) {
                        programs.extend(b.programs());
                    }
                }
                let events = programs
                    .first()
                    .map_or(0, |p| cost(&format!("{command}:{p}")).runs);
                let ours = time_of(&mut programs.iter().map(|p| format!("{command}:{p}")));
                let name = bpftrace_name(target);
                let theirs: Vec<String> = costs
                    .keys()
                    .filter(|k| {
                        k.strip_prefix("bt:")
                            .and_then(|k| k.rsplit_once('#'))
                            .is_some_and(|(n, _)| n == name)
                    })
                    .cloned()
                    .collect();
                let k = theirs.len();
                let bt = time_of(&mut theirs.into_iter());
                let per_event = |t: f64| (events > 0).then(|| t / events as f64);
                hooks.push(HookPeer {
                    command: (*command).to_owned(),
                    hook: h.spec.name.to_owned(),
                    events,
                    ns_per_event: per_event(ours),
                    bpftrace_ns_per_event: if k > 0 { per_event(bt) } else { None },
                    bpftrace_programs: k,
                });
            }
        }
    }
    drop(script_peer);
    // The empty program beside `twin` on `hook`.
    let floor_cost = |hook: &str, twin: &str| {
        floors
            .iter()
            .position(|f| f.hook == hook && f.twin == twin)
            .map(|i| cost(&format!("floor:{i}")))
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for (command, ..) in &engines {
        for h in engine.plan.hooks.iter().filter(|h| attached(h.spec.name)) {
            for program in h.programs() {
                let c = cost(&format!("{command}:{program}"));
                let f = floor_cost(h.spec.name, program);
                out.push(ProgramCost {
                    command: (*command).to_owned(),
                    hook: h.spec.name.to_owned(),
                    mechanism: h.mechanism.to_string(),
                    program: program.to_owned(),
                    runs: c.runs,
                    ns_per_run: c.ns_per_run,
                    floor_runs: f.runs,
                    floor_ns_per_run: f.ns_per_run,
                });
            }
        }
    }
    let ring = RingLoad {
        records: events.len() as u64 + lost,
        seconds,
        dropped: after.counter(Counter::RingbufFull) - before.counter(Counter::RingbufFull),
    };
    let lookup_costs = lookups
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let [hash, ts, cpu] = LOOKUP_WAYS.map(|way| cost(&format!("lookup:{i}:{way}")));
            let floor = floor_cost(&l.hook, l.twin);
            LookupCost {
                hook: l.hook.clone(),
                mechanism: l.mechanism.clone(),
                events: hash.runs,
                hash_ns_per_run: hash.ns_per_run,
                ts_ns_per_run: ts.ns_per_run,
                cpu_ns_per_run: cpu.ns_per_run,
                floor_ns_per_run: floor.ns_per_run,
            }
        })
        .collect();
    drop(lookups);
    drop(floors);
    for (_, e, _) in engines {
        rt.block_on(e.stop())?;
    }
    Ok(Measured {
        costs: out,
        hooks,
        lookups: lookup_costs,
        ring,
        peers: peer_costs,
        errors,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_with_another_vcpus_slice_is_left_out() {
        // 100 runs of 1 000 ns per interval; the third carries a 50 ms slice.
        let mut p = vec![(0u64, 0u64)];
        for i in 1..=10u64 {
            let extra = if i == 3 { 50_000_000 } else { 0 };
            let (t, n) = p[p.len() - 1];
            p.push((t + 100_000 + extra, n + 100));
        }
        let c = clean_cost(&p);
        assert_eq!(c.runs, 1000);
        assert_eq!(c.dropped, 1);
        assert_eq!(c.ns_per_run, Some(1000.0));
        // Without events in an interval, nothing is judged there.
        assert_eq!(clean_cost(&[(0, 0), (5, 0)]), Cost::default());
    }
}
