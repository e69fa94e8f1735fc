//! The tracers a benchmark runs beside a workload: numatrace's long-running commands as a user
//! starts them, and bpftrace. Each is started, waited for until it is counting, and stopped
//! with SIGINT as a user stops it.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpStream,
    path::PathBuf,
    process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// How long a tracer may take to attach (program loads take seconds each in emulated guests).
const READY_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `numatrace stat` (system-wide, until Ctrl-C).
    Stat,
    /// `numatrace top -b -d 1`.
    Top,
    /// `numatrace serve`, scraped once a second.
    Serve,
    /// `numatrace record`.
    Record,
    /// bpftrace with the same aggregation on the same hooks.
    Bpftrace,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Stat => "stat",
            Self::Top => "top -b",
            Self::Serve => "serve",
            Self::Record => "record",
            Self::Bpftrace => "bpftrace",
        }
    }
}

pub struct Bins {
    pub numatrace: PathBuf,
    pub workload: PathBuf,
    pub bpftrace: Option<PathBuf>,
}

/// A started tracer.
pub struct Running {
    pub kind: Kind,
    child: Child,
    /// From spawn to counting: the first frame of top, the first complete scrape of serve.
    pub ready_after: Duration,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Each scrape's duration (serve).
    pub scrapes: Arc<Mutex<Vec<Duration>>>,
    pub scrape_errors: Arc<Mutex<u64>>,
    /// Frames seen (top).
    pub frames: Arc<Mutex<u64>>,
}

/// GET /metrics; Ok only for a complete 200 response.
pub fn scrape(port: u16) -> Result<usize> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    if !body.starts_with(b"HTTP/1.1 200") {
        bail!(
            "scrape: {}",
            String::from_utf8_lossy(&body[..body.len().min(80)])
        );
    }
    Ok(body.len())
}

/// Lines of a pipe, forwarded to a channel (and so drained: a tracer never blocks on output).
fn lines<R: std::io::Read + Send + 'static>(r: R, tx: mpsc::Sender<String>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    })
}

fn wait_for(rx: &mpsc::Receiver<String>, what: &str, pred: impl Fn(&str) -> bool) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if pred(&line) => return Ok(()),
            Ok(line) => seen.push(line),
            Err(_) => bail!("{what} never became ready; it said: {}", seen.join(" | ")),
        }
    }
}

/// SIGINT to `child`, as Ctrl-C, and its exit status once it exits (None: still running a
/// minute later; the caller kills it).
pub fn interrupt(child: &mut Child) -> Result<Option<ExitStatus>> {
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(s) = child.try_wait()? {
            return Ok(Some(s));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(None)
}

fn numatrace(bins: &Bins, args: &[&str]) -> Command {
    let mut c = Command::new(&bins.numatrace);
    c.args(args).stdin(Stdio::null());
    c
}

/// Starts `kind` and returns once it counts. `script`: bpftrace's program; `port`: serve's.
pub fn start(kind: Kind, bins: &Bins, script: &str, port: u16) -> Result<Running> {
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let scrapes = Arc::new(Mutex::new(Vec::new()));
    let scrape_errors = Arc::new(Mutex::new(0));
    let frames = Arc::new(Mutex::new(0));
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    let listen = format!("127.0.0.1:{port}");
    let mut cmd = match kind {
        Kind::Stat => numatrace(bins, &["stat"]),
        Kind::Top => numatrace(bins, &["top", "-b", "-d", "1"]),
        Kind::Serve => numatrace(bins, &["serve", "--listen", &listen]),
        // A scratch capture, replaced by every run.
        Kind::Record => numatrace(
            bins,
            &["record", "--force", "-o", "/tmp/numatrace-bench.ntrace"],
        ),
        Kind::Bpftrace => {
            let Some(b) = &bins.bpftrace else {
                bail!("bpftrace is not installed here");
            };
            let mut c = Command::new(b);
            c.args(["-B", "line", "-e", script]).stdin(Stdio::null());
            c
        }
    };
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", kind.name()))?;
    let out: ChildStdout = child.stdout.take().context("stdout")?;
    let err: ChildStderr = child.stderr.take().context("stderr")?;
    let ready = match kind {
        Kind::Stat | Kind::Record => {
            threads.push(lines(out, mpsc::channel().0));
            threads.push(lines(err, tx));
            wait_for(&rx, kind.name(), |l| l.starts_with("numatrace: counting"))
        }
        Kind::Top => {
            threads.push(lines(err, mpsc::channel().0));
            threads.push(lines(out, tx));
            let r = wait_for(&rx, kind.name(), |l| !l.trim().is_empty());
            // Count frames from here on (a frame starts with the header line `numatrace`).
            let frames = Arc::clone(&frames);
            threads.push(std::thread::spawn(move || {
                while let Ok(l) = rx.recv() {
                    if l.starts_with("numatrace") {
                        *frames.lock().unwrap() += 1;
                    }
                }
            }));
            r
        }
        Kind::Serve => {
            threads.push(lines(out, mpsc::channel().0));
            threads.push(lines(err, tx));
            wait_for(&rx, kind.name(), |l| l.starts_with("numatrace: serving")).and_then(|()| {
                let deadline = Instant::now() + READY_TIMEOUT;
                while scrape(port).is_err() {
                    if Instant::now() > deadline {
                        bail!("serve never answered a scrape");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(())
            })
        }
        Kind::Bpftrace => {
            threads.push(lines(out, tx));
            threads.push(lines(err, mpsc::channel().0));
            wait_for(&rx, "bpftrace", |l| l.trim() == "ready")
        }
    };
    let ready_after = t0.elapsed();
    if let Err(e) = ready {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    if kind == Kind::Serve {
        let (stop, scrapes, errors) = (
            Arc::clone(&stop),
            Arc::clone(&scrapes),
            Arc::clone(&scrape_errors),
        );
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                match scrape(port) {
                    Ok(_) => scrapes.lock().unwrap().push(t.elapsed()),
                    Err(_) => *errors.lock().unwrap() += 1,
                }
                std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
            }
        }));
    }
    Ok(Running {
        kind,
        child,
        ready_after,
        stop,
        threads,
        scrapes,
        scrape_errors,
        frames,
    })
}

impl Drop for Running {
    /// Not stopped through [`Running::stop`] (an error on the way): killed, never left running.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGINT, as Ctrl-C; killed if it has not exited within a minute.
    pub fn stop(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let status = interrupt(&mut self.child)?;
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let kind = self.kind;
        match status {
            Some(s) if s.success() => Ok(()),
            Some(s) => bail!("{} exited with {s}", kind.name()),
            None => bail!(
                "{} did not stop within a minute of SIGINT: killed",
                kind.name()
            ),
        }
    }
}
