//! The frontends, siblings that share nothing but the layers below them, one per subcommand:
//! `stat`, `record` and `check` count over a session window, `top` and `serve` read the engine
//! live, `probes` attaches once to report the hooks, `report` reads a capture without the
//! kernel; `shell` makes the completions and man pages from the command line itself; `lab`
//! runs any of them in QEMU guests of other kernels.
pub mod check;
pub mod lab;
pub mod probes;
pub mod record;
pub mod report;
pub mod serve;
pub mod shell;
pub mod stat;
pub mod top;
