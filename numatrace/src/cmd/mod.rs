//! Subcommands: each wires sources, model and a report together.
pub mod check;
pub mod probes;
pub mod stat;
