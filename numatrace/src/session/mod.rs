//! The session layer: what every frontend does around the engine — one window of counting
//! ([`window`]), the signals that end it ([`signals`]) and the filters it is given
//! ([`filter`]). Frontends differ only in what they observe while it is open and print after.
pub mod filter;
pub mod signals;
pub mod window;

pub use filter::cgroup_filter;
pub use signals::Signals;
pub use window::{CollectOptions, Collected, NoObserver, Observer, collect, collect_with};
