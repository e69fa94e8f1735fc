use which::which;

/// The eBPF crate is linked by the `bpf-linker` on PATH (set by `cargo xtask`). Rebuild when that
/// binary changes, since cargo cannot see it as a dependency.
fn main() {
    // Which `struct pt_regs` the kprobe and perf-event programs read: numatrace's build.rs
    // passes `--cfg bpf_target_arch` for the architecture it is built for; otherwise (clippy,
    // a plain build of this crate) AYA_BPF_TARGET_ARCH or the host's, as aya-ebpf decides.
    println!("cargo::rustc-check-cfg=cfg(bpf_target_arch, values(\"x86_64\", \"aarch64\"))");
    println!("cargo::rerun-if-env-changed=AYA_BPF_TARGET_ARCH");
    if std::env::var_os("CARGO_CFG_BPF_TARGET_ARCH").is_none() {
        let arch = std::env::var("AYA_BPF_TARGET_ARCH").unwrap_or_else(|_| {
            let host = std::env::var("HOST").unwrap_or_default();
            host.split('-').next().unwrap_or("x86_64").to_owned()
        });
        println!("cargo::rustc-cfg=bpf_target_arch=\"{arch}\"");
    }
    match which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(_) => println!(
            "cargo:warning=bpf-linker is not on PATH: build through `cargo xtask build`, which installs it"
        ),
    }
}
