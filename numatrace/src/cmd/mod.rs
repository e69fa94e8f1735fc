//! The frontends, siblings that share nothing but the layers below them: `stat`, `top`,
//! `serve`, `record`, `report`, `check` and `probes`, each wiring the session, the engine and a
//! report together for one subcommand; and `shell`, the completions and man pages made from
//! the command line itself.
pub mod check;
pub mod probes;
pub mod record;
pub mod report;
pub mod serve;
pub mod shell;
pub mod stat;
pub mod top;
