//! `numatrace serve`: a Prometheus endpoint on the engine. Every scrape takes a snapshot, folds
//! it into monotonic per-task / per-cgroup / total counters ([`fold`]), builds the families of
//! the metric catalogue ([`crate::report::metrics`], in [`expose`]) and hands them to a `prometheus` registry through a custom
//! collector. Scrapes that arrive while one is being read share its result.

pub mod auth;
pub mod expose;
pub mod fold;
#[cfg(test)]
mod fold_reference;
pub mod http;
pub mod server;
pub mod webconfig;
mod yaml;

use std::{
    net::SocketAddr,
    os::fd::{FromRawFd as _, RawFd},
    sync::Arc,
    time::Instant,
};

use anyhow::{Context as _, Result};
use prometheus::{Encoder as _, Registry, TextEncoder};

use tokio::sync::Mutex;

use crate::{
    bpf::loader::{HookReport, LoadOptions},
    cli::ServeArgs,
    engine::{Detail, Engine},
    kernel::{facts::KernelFacts, vmstat::Vmstat},
    report::{
        measured::Measured,
        metrics::{self as catalogue, Spec},
    },
    session::Signals,
};
use auth::Auth;
use expose::{Inputs, SnapshotCollector};
use fold::{Fold, FoldLimits};
use server::{Limits, Server};
use tokio_rustls::TlsAcceptor;
use webconfig::WebConfig;

/// What a scrape reads and updates, one scrape at a time.
struct Live {
    engine: Option<Engine>,
    fold: Fold,
    high_water: expose::HighWater,
    /// The latest response body and when it was complete.
    cached: Option<(Instant, Arc<String>)>,
}

pub struct Exporter {
    live: Mutex<Live>,
    specs: Vec<Spec>,
    registry: Registry,
    collector: Arc<SnapshotCollector>,
    pub hooks: Vec<HookReport>,
    /// What the hooks measure (fixed while serve runs, so no series comes and goes).
    measured: Measured,
    release: String,
    numa_balancing: Option<u32>,
    bpf_stats: bool,
}

/// The registry owns a boxed collector; the exporter keeps a handle to set its families.
struct Shared(Arc<SnapshotCollector>);

impl prometheus::core::Collector for Shared {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.0.desc()
    }
    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.0.collect()
    }
}

impl Exporter {
    fn new(mut engine: Engine, limits: FoldLimits) -> Result<Self> {
        // The fold adds what tasks counted between scrapes, summed as the engine reads them,
        // and walks the tasks' rows: it needs the counts of only the tasks it exports.
        engine.track_increments();
        engine.list_rows_only();
        let bpf_stats = match engine.enable_bpf_stats() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("numatrace_bpf_* stay empty: {e:#}");
                false
            }
        };
        let vmstat = Vmstat::read().unwrap_or_default().0;
        let specs = catalogue::families(vmstat.keys());
        let collector = Arc::new(SnapshotCollector::new(&specs).context("metric descriptors")?);
        let registry = Registry::new();
        registry
            .register(Box::new(Shared(Arc::clone(&collector))))
            .context("registering the collector")?;
        // numatrace's own CPU time, memory and descriptors (process_*).
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .context("registering the process collector")?;
        Ok(Self {
            hooks: engine.hooks.clone(),
            measured: Measured::from_hooks(&engine.hooks),
            release: engine.facts.release.clone(),
            numa_balancing: engine.facts.numa_balancing,
            live: Mutex::new(Live {
                engine: Some(engine),
                fold: Fold::new(limits),
                high_water: expose::HighWater::default(),
                cached: None,
            }),
            specs,
            registry,
            collector,
            bpf_stats,
        })
    }

    /// The exposition text, read fresh unless a read that completed after `arrived` exists
    /// (a concurrent scrape's).
    pub async fn scrape(&self, arrived: Instant) -> Result<Arc<String>> {
        let mut live = self.live.lock().await;
        if let Some((done, body)) = &live.cached
            && *done >= arrived
        {
            return Ok(Arc::clone(body));
        }
        let started = Instant::now();
        let body = tokio::task::block_in_place(|| self.read(&mut live, started))?;
        let body = Arc::new(body);
        live.cached = Some((Instant::now(), Arc::clone(&body)));
        Ok(body)
    }

    fn read(&self, live: &mut Live, started: Instant) -> Result<String> {
        let engine = live.engine.as_mut().context("serve is stopping")?;
        let snap = engine.snapshot(Detail::Summary)?;
        let gaps = engine.gap_totals().unwrap_or_else(|e| {
            tracing::warn!("{e:#}");
            (0, 0, 0)
        });
        let programs = if self.bpf_stats {
            engine.program_stats()
        } else {
            Vec::new()
        };
        live.fold.advance(engine, &snap)?;
        // Exited tasks folded in twice are in the aggregates for good: forget them, so memory
        // stays bounded by the live tasks however many come and go.
        let settled = live.fold.settled();
        let mut forgotten = 0;
        if !settled.is_empty() {
            let gone = engine.forget_exited(&settled);
            forgotten = gone.len();
            live.fold.forget(&gone);
        }
        let inputs = Inputs {
            snap: &snap,
            hooks: &self.hooks,
            measured: &self.measured,
            kernel_release: &self.release,
            numa_balancing: self.numa_balancing,
            gaps,
            programs: &programs,
            bpf_stats: self.bpf_stats,
            scrape_seconds: started.elapsed().as_secs_f64(),
            tasks_tracked: live.fold.tasks_read.saturating_sub(forgotten),
            own_cpu_ns: crate::sources::procfs::own_cpu_ns(),
        };
        let mut families = expose::build(&self.specs, &live.fold, &inputs);
        engine.recycle(snap);
        live.high_water.apply(&mut families);
        self.collector.set(families);
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .context("encoding the metrics")?;
        String::from_utf8(out).context("encoding the metrics")
    }

    /// Detaches: later scrapes get an error.
    async fn stop(&self) -> Result<()> {
        let engine = self.live.lock().await.engine.take();
        if let Some(engine) = engine {
            engine.stop().await?;
        }
        Ok(())
    }
}

/// The socket systemd passed (socket activation: LISTEN_PID is us, LISTEN_FDS ≥ 1), if any.
fn activated_listener() -> Result<Option<std::net::TcpListener>> {
    let ours = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    let fds = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<i32>().ok())
        .unwrap_or(0);
    if !ours || fds < 1 {
        return Ok(None);
    }
    const SD_LISTEN_FDS_START: RawFd = 3;
    // SAFETY: systemd passes fd 3 open for us alone (LISTEN_PID is our pid).
    let l = unsafe { std::net::TcpListener::from_raw_fd(SD_LISTEN_FDS_START) };
    l.set_nonblocking(true)
        .context("the socket systemd passed")?;
    Ok(Some(l))
}

/// The web config's TLS acceptor, auth and headers, read before anything is attached so that
/// a bad file fails at start with one line.
fn secure(args: &ServeArgs) -> Result<(WebConfig, Option<TlsAcceptor>, Option<Arc<Auth>>)> {
    let Some(path) = &args.web_config_file else {
        return Ok((WebConfig::default(), None, None));
    };
    let what = || format!("--web.config.file {}", path.display());
    let config = WebConfig::load(path).with_context(what)?;
    let tls = match &config.tls {
        Some(files) => Some(TlsAcceptor::from(Arc::new(
            files.server_config().with_context(what)?,
        ))),
        None => None,
    };
    let auth = Auth::new(config.users.clone())?;
    Ok((config, tls, auth))
}

pub async fn run(args: ServeArgs, no_fentry: bool) -> Result<i32> {
    let (web, tls, auth) = secure(&args)?;
    let mut signals = Signals::new()?;
    let listener = match activated_listener()? {
        Some(l) => tokio::net::TcpListener::from_std(l)?,
        None => tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?,
    };
    let addr: SocketAddr = listener.local_addr()?;
    if !addr.ip().is_loopback() && (tls.is_none() || auth.is_none()) {
        tracing::warn!(
            "serving {addr}, beyond loopback, without {}: anyone who reaches the port can \
             scrape it (see --web.config.file)",
            match (&tls, &auth) {
                (None, None) => "TLS or basic auth",
                (None, _) => "TLS (basic auth passwords cross the network in clear)",
                _ => "basic auth",
            }
        );
    }
    let facts = KernelFacts::gather().context("reading kernel facts")?;
    let load = LoadOptions {
        max_tasks: args.kernel.max_tasks,
        sample_hz: args.kernel.sample_hz,
        no_fentry,
        ..LoadOptions::reading(crate::bpf::needs::SERVE)
    };
    let engine = Engine::start(facts, &load)?;
    let limits = FoldLimits {
        top_tasks: args.top_tasks,
        cgroup_depth: args.cgroups_depth,
        max_cgroups: args.max_cgroups,
    };
    let exporter = Arc::new(Exporter::new(engine, limits)?);
    // The first read starts the fold, so that the first scrape already has a previous one.
    exporter.scrape(Instant::now()).await?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    eprintln!(
        "numatrace: serving {scheme}://{addr}/metrics ({}; Ctrl-C stops)",
        web.summary()
    );
    let server = Arc::new(Server {
        exporter: Arc::clone(&exporter),
        limits: Limits {
            header_timeout: args.header_timeout,
            idle_timeout: args.idle_timeout,
            max_connections: args.max_connections as usize,
            max_header_bytes: args.max_header_bytes as usize,
        },
        tls,
        auth,
        headers: web.headers,
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut server = tokio::spawn(server.run(listener, stop_rx));
    let served = tokio::select! {
        sig = signals.any() => {
            tracing::info!(sig, "stopping");
            let _ = stop_tx.send(true);
            // Connections still open after a few seconds are cut.
            match tokio::time::timeout(std::time::Duration::from_secs(5), &mut server).await {
                Ok(r) => r.context("HTTP server"),
                Err(_) => {
                    server.abort();
                    Ok(())
                }
            }
        }
        r = &mut server => r.context("HTTP server"),
    };
    exporter.stop().await?;
    served?;
    Ok(0)
}
