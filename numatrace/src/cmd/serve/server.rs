//! serve's connections: an accept loop over hyper's HTTP/1.1 connection builder, with the
//! limits that keep a slow or hostile peer from holding the endpoint (axum::serve has none).
//!
//! - A connection must send its request header (and finish its TLS handshake) within
//!   `header_timeout` of its first byte, or of being accepted if it sends none; between requests
//!   a keep-alive connection may stay idle for `idle_timeout`.
//! - At most `max_connections` are open. One more evicts the connection that has waited
//!   longest without a request in progress (a half-sent header by when it began, an idle
//!   keep-alive by when it went idle), or is closed at once if every connection is being
//!   answered: nothing queues, and a flood of half-open connections cannot keep a scrape out.
//! - A request header larger than `max_header_bytes` is answered 431; bodies are never read.
//! - With basic auth, a connection counts as being answered only once its password is checked
//!   (or while bcrypt checks it: one at a time), and a 401 closes it: clients without the password can neither queue on the password check
//!   nor hold a slot (see `auth`).
//! - On stop, no more connections are accepted; those without an answer in progress close at
//!   once, answers in progress finish.

use std::{
    collections::HashMap,
    convert::Infallible,
    net::IpAddr,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use hyper::{
    Request, Response, StatusCode,
    body::Incoming,
    header::{self, HeaderName, HeaderValue},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{Notify, watch},
    task::{AbortHandle, JoinSet},
};
use tokio_rustls::TlsAcceptor;

use super::{
    Exporter,
    auth::Auth,
    http::{self, Body},
};

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_header_bytes: usize,
}

pub struct Server {
    pub exporter: Arc<Exporter>,
    pub limits: Limits,
    pub tls: Option<TlsAcceptor>,
    pub auth: Option<Arc<Auth>>,
    /// Added to every response.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// Where a connection is, for its deadline and for eviction.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// No request in progress since `since` (accepted, or the last answer sent); the next
    /// request's first byte arrived at `started`.
    Waiting {
        since: Instant,
        first: bool,
        started: Option<Instant>,
    },
    /// `n` answers in progress since `since`; `unread`: bytes arrived meanwhile (a pipelined
    /// request). Bounded too: a client that stops reading must not hold its slot for ever.
    Busy {
        n: usize,
        unread: bool,
        since: Instant,
    },
}

struct Conn {
    phase: Mutex<Phase>,
    /// The deadline may have moved earlier.
    changed: Notify,
}

impl Conn {
    fn new() -> Self {
        Self {
            phase: Mutex::new(Phase::Waiting {
                since: Instant::now(),
                first: true,
                started: None,
            }),
            changed: Notify::new(),
        }
    }

    fn deadline(&self, l: &Limits) -> Option<Instant> {
        match *self.phase.lock().unwrap() {
            Phase::Waiting {
                started: Some(t), ..
            } => Some(t + l.header_timeout),
            Phase::Waiting {
                since, first: true, ..
            } => Some(since + l.header_timeout),
            Phase::Waiting { since, .. } => Some(since + l.idle_timeout),
            Phase::Busy { since, .. } => Some(since + l.idle_timeout),
        }
    }

    /// Since when it has had no request in progress.
    fn waiting_since(&self) -> Option<Instant> {
        match *self.phase.lock().unwrap() {
            Phase::Waiting { since, .. } => Some(since),
            Phase::Busy { .. } => None,
        }
    }

    /// Its place in the eviction order (the earliest goes first), None while it is being
    /// answered: a new connection by when it was accepted, an idle keep-alive by when it went
    /// idle, and a keep-alive whose next request is arriving (or having its password checked)
    /// by when that request began — so a scraper whose request has just come in on a
    /// connection idle since its last scrape is not taken for the longest-waiting one.
    fn eviction_key(&self) -> Option<Instant> {
        match *self.phase.lock().unwrap() {
            Phase::Waiting {
                since, first: true, ..
            } => Some(since),
            Phase::Waiting { since, started, .. } => Some(started.unwrap_or(since)),
            Phase::Busy { .. } => None,
        }
    }

    fn bytes_arrived(&self) {
        let mut p = self.phase.lock().unwrap();
        match &mut *p {
            Phase::Waiting { started, .. } if started.is_none() => {
                *started = Some(Instant::now());
                self.changed.notify_one();
            }
            Phase::Busy { unread, .. } => *unread = true,
            Phase::Waiting { .. } => {}
        }
    }

    fn begin(self: &Arc<Self>) -> Answering {
        let mut p = self.phase.lock().unwrap();
        *p = match *p {
            Phase::Busy { n, unread, since } => Phase::Busy {
                n: n + 1,
                unread,
                since,
            },
            Phase::Waiting { .. } => Phase::Busy {
                n: 1,
                unread: false,
                since: Instant::now(),
            },
        };
        Answering(Arc::clone(self))
    }
}

/// An answer in progress: from the request header read until its body is handed to the socket.
struct Answering(Arc<Conn>);

impl Drop for Answering {
    fn drop(&mut self) {
        let mut p = self.0.phase.lock().unwrap();
        if let Phase::Busy { n, unread, since } = *p {
            let now = Instant::now();
            *p = if n > 1 {
                Phase::Busy {
                    n: n - 1,
                    unread,
                    since,
                }
            } else {
                Phase::Waiting {
                    since: now,
                    first: false,
                    started: unread.then_some(now),
                }
            };
        }
        self.0.changed.notify_one();
    }
}

/// A response body that keeps its connection busy until hyper has written it.
pub struct Guarded {
    inner: Body,
    _answering: Answering,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The TCP stream, noting when bytes arrive (under TLS too: a slow handshake is a slow header).
struct Watched {
    tcp: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.tcp).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            me.conn.bytes_arrived();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

/// The open connections, by id.
#[derive(Default)]
struct Table {
    open: Mutex<HashMap<u64, (Arc<Conn>, AbortHandle)>>,
    next: AtomicU64,
}

/// Removes its connection from the table when the connection's task ends (or is aborted).
struct Slot {
    table: Arc<Table>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.open.lock().unwrap().remove(&self.id);
    }
}

/// Logs a warning at most every 10 s (a flood must not flood the journal too).
struct Throttled(Mutex<Option<Instant>>);

impl Throttled {
    fn due(&self) -> bool {
        let mut last = self.0.lock().unwrap();
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < Duration::from_secs(10)) {
            return false;
        }
        *last = Some(now);
        true
    }
}

impl Server {
    /// Accepts until `stop` turns true, then lets the open connections finish (the caller
    /// bounds how long).
    pub async fn run(self: Arc<Self>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
        let table = Arc::new(Table::default());
        let mut tasks = JoinSet::new();
        let warned_full = Throttled(Mutex::new(None));
        let warned_accept = Throttled(Mutex::new(None));
        loop {
            let accepted = tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
                a = listener.accept() => a,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or memory: wait a little rather than spin.
                    if warned_accept.due() {
                        tracing::warn!("accepting a connection: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let mut open = table.open.lock().unwrap();
            if open.len() >= self.limits.max_connections {
                let oldest = open
                    .iter()
                    .filter_map(|(id, (c, _))| Some((c.eviction_key()?, *id)))
                    .min();
                match oldest {
                    Some((_, id)) => {
                        if let Some((_, task)) = open.remove(&id) {
                            task.abort();
                        }
                        tracing::debug!("connection cap: closed the longest-waiting one");
                    }
                    None => {
                        drop(open);
                        drop(tcp);
                        if warned_full.due() {
                            tracing::warn!(
                                "{} connections are being answered (--max-connections): \
                                 closed a new one from {peer}",
                                self.limits.max_connections
                            );
                        }
                        continue;
                    }
                }
            }
            let _ = tcp.set_nodelay(true);
            let conn = Arc::new(Conn::new());
            let id = table.next.fetch_add(1, Ordering::Relaxed);
            let slot = Slot {
                table: Arc::clone(&table),
                id,
            };
            let me = Arc::clone(&self);
            let c = Arc::clone(&conn);
            let stop = stop.clone();
            // Inserted under the lock the task's Slot needs to remove it: never removed first.
            let task = tasks.spawn(async move {
                let _slot = slot;
                me.connection(tcp, peer.ip(), c, stop).await;
            });
            open.insert(id, (conn, task));
        }
        drop(listener);
        while tasks.join_next().await.is_some() {}
    }

    async fn connection(
        self: Arc<Self>,
        tcp: TcpStream,
        peer: IpAddr,
        conn: Arc<Conn>,
        stop: watch::Receiver<bool>,
    ) {
        let io = Watched {
            tcp,
            conn: Arc::clone(&conn),
        };
        let Some(tls) = &self.tls else {
            return self.http(io, peer, conn, stop).await;
        };
        let deadline = conn.deadline(&self.limits).unwrap_or_else(Instant::now);
        let mut changed = stop.clone();
        // The handshake and the first request header share one deadline, counted from accept.
        let handshake = tokio::select! {
            r = tokio::time::timeout_at(deadline.into(), tls.accept(io)) => r,
            _ = changed.wait_for(|s| *s) => return,
        };
        match handshake {
            Ok(Ok(stream)) => self.http(stream, peer, conn, stop).await,
            Ok(Err(e)) => tracing::debug!("TLS handshake: {e}"),
            Err(_) => tracing::debug!("TLS handshake timed out"),
        }
    }

    async fn http<I>(
        self: Arc<Self>,
        io: I,
        peer: IpAddr,
        conn: Arc<Conn>,
        mut stop: watch::Receiver<bool>,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let me = Arc::clone(&self);
        let c = Arc::clone(&conn);
        let service = service_fn(move |req| {
            let me = Arc::clone(&me);
            let c = Arc::clone(&c);
            // Busy from when hyper runs the answer, not when it parsed the request: hyper
            // holds a pipelined request's future until its write buffer drains, and a client
            // that never reads would otherwise sit "busy" with no deadline. And only once the
            // password is checked: a connection whose client has not proven who it is never
            // counts as busy, so it can always be evicted for a new one (issue 33) — except
            // the one whose password bcrypt is checking right now (one at a time): evicting it
            // would let a flood of new connections cut off a scraper's first request.
            async move {
                let (allowed, checked) = match &me.auth {
                    Some(auth) => auth.check(req.headers(), peer, || c.begin()).await,
                    None => (true, None),
                };
                let answering = checked.unwrap_or_else(|| c.begin());
                Ok::<_, Infallible>(me.answer(req, allowed, answering).await)
            }
        });
        let mut builder = http1::Builder::new();
        builder
            .keep_alive(true)
            .half_close(false)
            .max_buf_size(self.limits.max_header_bytes);
        let served = builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(served);
        let mut stopping = false;
        loop {
            let deadline = conn.deadline(&self.limits);
            let timer = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = served.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("HTTP connection: {e}");
                    }
                    return;
                }
                () = timer => {
                    if conn.deadline(&self.limits).is_some_and(|d| d <= Instant::now()) {
                        // Dropping the connection closes it.
                        tracing::debug!("closing a connection that sent no request in time");
                        return;
                    }
                }
                () = conn.changed.notified() => {}
                _ = stop.wait_for(|s| *s), if !stopping => {
                    // Nothing in progress (idle, or a header not yet whole): close now.
                    if conn.waiting_since().is_some() {
                        return;
                    }
                    stopping = true;
                    served.as_mut().graceful_shutdown();
                }
            }
        }
    }

    async fn answer(
        &self,
        req: Request<Incoming>,
        allowed: bool,
        answering: Answering,
    ) -> Response<Guarded> {
        let mut response = if allowed {
            http::handle(&self.exporter, &req).await
        } else {
            let mut r = http::response(
                StatusCode::UNAUTHORIZED,
                "text/plain; charset=utf-8",
                "Unauthorized\n",
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
            // The connection closes after it: requests pipelined behind a wrong password are
            // not answered, and a client that never reads cannot keep a slot with them.
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            r
        };
        for (name, value) in &self.headers {
            response.headers_mut().insert(name.clone(), value.clone());
        }
        response.map(|inner| Guarded {
            inner,
            _answering: answering,
        })
    }
}
