//! `numatrace probes`.

use anyhow::{Context as _, Result};

use crate::{
    bpf::loader::{LoadError, LoadOptions, Session},
    kernel::facts::KernelFacts,
    report::probes::ProbesReport,
};

/// Prints the report; returns the process exit code (1 when nothing could attach).
pub fn run(json: bool, dump_facts: bool, no_fentry: bool) -> Result<i32> {
    if let Some(w) = crate::kernel::tunables::pending_warning() {
        eprintln!("numatrace: warning: {w}");
    }
    let facts = KernelFacts::gather().context("reading kernel facts")?;
    let opts = LoadOptions {
        ringbuf_bytes: 64 << 10,
        // Attach for real but count nothing: the followed set stays empty.
        filter_tgids: true,
        no_fentry,
        ..LoadOptions::reading(crate::bpf::needs::PROBES)
    };
    let (facts, hooks, code) = match Session::start(facts, &opts) {
        Ok(s) => (s.facts, s.hooks, 0),
        Err(LoadError::NothingAttached { facts, hooks, .. }) => (*facts, hooks, 1),
        Err(e) => return Err(e.into()),
    };
    if dump_facts {
        println!("{}", serde_json::to_string_pretty(&facts)?);
        return Ok(code);
    }
    let report = ProbesReport::new(&facts, &hooks);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    if code != 0 {
        eprintln!("numatrace: no hook could be attached on this kernel");
    }
    Ok(code)
}
