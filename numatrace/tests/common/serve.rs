//! A running `numatrace serve`, for the tests that scrape it.

use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, Stdio},
};

use super::numatrace_bin;

/// A running `serve` on a free loopback port, stopped (SIGTERM) on drop.
pub struct Serve {
    pub child: Child,
    pub addr: String,
}

impl Serve {
    /// `serve --listen 127.0.0.1:0 EXTRA…`, once it says where it listens.
    pub fn start(extra: &[&str]) -> Self {
        let mut child = Command::new(numatrace_bin())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("numatrace serve");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        let addr = loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 {
                panic!("serve exited before listening: {seen}");
            }
            seen.push_str(&line);
            if let Some(rest) = line.split("serving http").nth(1) {
                let rest = rest.trim_start_matches('s').trim_start_matches("://");
                break rest.split('/').next().unwrap().to_owned();
            }
        };
        // Keep draining stderr so that serve never blocks on it.
        std::thread::spawn(move || {
            for l in err.lines().map_while(Result::ok) {
                eprintln!("serve: {l}");
            }
        });
        Self { child, addr }
    }

    /// SIGTERM, and the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: kill has no memory effects.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        std::mem::forget(self);
        status
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}
