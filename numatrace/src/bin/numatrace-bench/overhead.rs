//! Workload throughput untraced and under each tracer, rounds in rotating order so that drift
//! of the machine falls on every configuration alike; ratios are taken within a round.

use std::time::Duration;

use crate::record::Overhead;
use anyhow::Result;

use crate::{
    floor,
    frontends::{self, Bins, Kind},
    workloads::{THROUGHPUT, throughput},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    Untraced,
    /// Empty programs on every hook numatrace uses: the cost of any tracer there.
    Floor,
    Tracer(Kind),
}

impl Config {
    pub fn name(self) -> &'static str {
        match self {
            Self::Untraced => "untraced",
            Self::Floor => "empty programs",
            Self::Tracer(k) => k.name(),
        }
    }
}

pub const CONFIGS: [Config; 7] = [
    Config::Untraced,
    Config::Floor,
    Config::Tracer(Kind::Stat),
    Config::Tracer(Kind::Top),
    Config::Tracer(Kind::Serve),
    Config::Tracer(Kind::Record),
    Config::Tracer(Kind::Bpftrace),
];

pub fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// Something that runs beside the workloads for one configuration.
enum Guard {
    None,
    Floors(#[allow(dead_code)] Vec<floor::Floor>),
    Tracer(frontends::Running),
}

fn start(c: Config, ctx: &Ctx) -> Result<Guard> {
    Ok(match c {
        Config::Untraced => Guard::None,
        Config::Floor => {
            let (floors, errors) = floor::attach_all(
                &ctx.plan,
                |h| ctx.attached.contains(h),
                &crate::load_options(),
            );
            for e in errors {
                eprintln!("numatrace-bench: floor: {e}");
            }
            Guard::Floors(floors)
        }
        Config::Tracer(k) => Guard::Tracer(frontends::start(k, &ctx.bins, &ctx.script, 19473)?),
    })
}

pub struct Ctx {
    pub bins: Bins,
    pub plan: numatrace::plan::Plan,
    pub attached: std::collections::HashSet<String>,
    pub script: String,
}

/// `rounds` rounds; in round r the configurations start at index r (rotation).
pub fn measure(ctx: &Ctx, rounds: usize, duration: Duration) -> (Vec<Overhead>, Vec<String>) {
    let w = THROUGHPUT.len();
    // rates[config][workload][round]
    let mut rates = vec![vec![vec![f64::NAN; rounds]; w]; CONFIGS.len()];
    let mut notes = Vec::new();
    let mut unavailable = vec![false; CONFIGS.len()];
    // `r` also sets each round's rotation, not only an index.
    #[allow(clippy::needless_range_loop)]
    for r in 0..rounds {
        for k in 0..CONFIGS.len() {
            let ci = (k + r) % CONFIGS.len();
            let c = CONFIGS[ci];
            if unavailable[ci] {
                continue;
            }
            eprintln!("numatrace-bench: round {}/{rounds}: {}", r + 1, c.name());
            let guard = match start(c, ctx) {
                Ok(g) => g,
                Err(e) => {
                    notes.push(format!("{}: not measured: {e:#}", c.name()));
                    unavailable[ci] = true;
                    continue;
                }
            };
            for (wi, wl) in THROUGHPUT.iter().enumerate() {
                match throughput(&ctx.bins.workload, wl, duration) {
                    Ok(x) => rates[ci][wi][r] = x,
                    Err(e) => notes.push(format!("{} under {}: {e:#}", wl.name, c.name())),
                }
            }
            match guard {
                Guard::Tracer(t) => {
                    if let Err(e) = t.stop() {
                        notes.push(format!("{}: {e:#}", c.name()));
                    }
                }
                Guard::Floors(f) => drop(f),
                Guard::None => {}
            }
        }
    }
    let mut out = Vec::new();
    for (ci, c) in CONFIGS.iter().enumerate().skip(1) {
        if unavailable[ci] {
            continue;
        }
        for (wi, wl) in THROUGHPUT.iter().enumerate() {
            let ratios: Vec<f64> = (0..rounds)
                .map(|r| rates[ci][wi][r] / rates[0][wi][r])
                .collect();
            out.push(Overhead {
                workload: wl.name.to_owned(),
                config: c.name().to_owned(),
                median: median(&ratios),
                ratios,
            });
        }
    }
    (out, notes)
}
