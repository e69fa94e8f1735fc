//! Per-event kernel cost of every attached program against its floor, from the kernel's BPF
//! run-time statistics over a real workload.

use std::time::Duration;

use anyhow::Result;
use numatrace::engine::{Detail, Engine};
use numatrace_common::Counter;
use serde::Serialize;

use crate::{floor, workloads::Mix};

#[derive(Serialize)]
pub struct ProgramCost {
    pub hook: String,
    pub mechanism: String,
    pub program: String,
    pub runs: u64,
    pub ns_per_run: Option<f64>,
    pub floor_runs: u64,
    pub floor_ns_per_run: Option<f64>,
}

#[derive(Serialize)]
pub struct RingLoad {
    /// Records the kernel side submitted and userspace decoded during the run.
    pub records: u64,
    pub seconds: f64,
    /// Records the kernel could not submit (ring buffer full).
    pub dropped: u64,
}

fn per_run(t: u64, n: u64) -> Option<f64> {
    (n > 0).then(|| t as f64 / n as f64)
}

/// Attaches numatrace as `record` does (every record kind on), a floor beside each program,
/// runs `mix` with statistics on and returns each program's cost and the ring buffer's load.
pub fn measure(mix: &Mix, duration: Duration) -> Result<(Vec<ProgramCost>, RingLoad, Vec<String>)> {
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
    engine.enable_bpf_stats()?;
    let real0 = engine.program_stats();
    let floor0: Vec<(u64, u64)> = floors.iter().map(floor::Floor::stats).collect();
    let before = engine.snapshot(Detail::Summary)?;
    let t = std::time::Instant::now();
    mix.run(duration)?;
    let after = engine.snapshot(Detail::Summary)?;
    let seconds = t.elapsed().as_secs_f64();
    let (events, lost) = engine.take_events();
    let real1 = engine.program_stats();
    let mut out = Vec::new();
    for h in engine.plan.hooks.iter().filter(|h| attached(h.spec.name)) {
        for program in h.programs() {
            let stat = |v: &[(String, u64, u64)]| {
                v.iter()
                    .find(|(n, ..)| n == program)
                    .map_or((0, 0), |(_, t, n)| (*t, *n))
            };
            let ((t0, n0), (t1, n1)) = (stat(&real0), stat(&real1));
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
    Ok((out, ring, errors))
}
