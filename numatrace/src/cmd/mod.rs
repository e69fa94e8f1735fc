//! Subcommands: each wires sources, model and a report together.
pub mod check;
pub mod probes;
pub mod record;
pub mod report;
pub mod shell;
pub mod stat;
