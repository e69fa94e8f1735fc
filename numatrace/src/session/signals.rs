//! SIGINT, SIGTERM and SIGHUP, caught from numatrace's start so that none of them kills it
//! half-way through attaching or detaching: each ends the open window instead.

use anyhow::{Context as _, Result};
use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGINT/SIGTERM, caught from numatrace's start so that neither kills it half-way.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
    /// The first signal received, for runs of several windows (`check --patch all` stops).
    received: Option<i32>,
}

impl Signals {
    pub fn new() -> Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).context("SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("SIGTERM handler")?,
            hup: signal(SignalKind::hangup()).context("SIGHUP handler")?,
            received: None,
        })
    }

    /// The next SIGINT, SIGTERM or SIGHUP (a closed terminal ends the window too).
    pub async fn any(&mut self) -> i32 {
        let sig = tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        };
        self.received.get_or_insert(sig);
        sig
    }

    /// Whether a window so far was ended by a signal (which one, the first).
    pub fn received(&self) -> Option<i32> {
        self.received
    }
}
