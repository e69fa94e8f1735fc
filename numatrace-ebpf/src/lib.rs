#![no_std]
// Lets numatrace declare this crate as a build-dependency (see numatrace/Cargo.toml); the
// programs are the binary target.
