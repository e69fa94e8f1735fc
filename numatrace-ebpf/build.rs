use which::which;

/// The eBPF crate is linked by the `bpf-linker` on PATH (set by `cargo xtask`). Rebuild when that
/// binary changes, since cargo cannot see it as a dependency.
fn main() {
    match which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(_) => println!(
            "cargo:warning=bpf-linker is not on PATH: build through `cargo xtask build`, which installs it"
        ),
    }
}
