//! The session layer: what the frontends share around the engine — one window of counting
//! ([`window`]: `stat`, `record` and `check` differ only in what they observe while it is open
//! and print after), the signals that end a window or a live view ([`signals`]: also `top` and
//! `serve`) and the `--cgroup` filter, checked against the cgroup2 mount ([`filter`]).
pub mod filter;
pub mod signals;
pub mod window;

pub use filter::cgroup_filter;
pub use signals::Signals;
pub use window::{CollectOptions, Collected, NoObserver, Observer, collect, collect_with};
