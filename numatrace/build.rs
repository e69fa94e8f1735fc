//! Builds `numatrace-ebpf` for the BPF target with the pinned nightly so that `src/bpf/mod.rs`
//! can embed it: one binary to copy onto another machine.
//!
//! The same cargo invocation as aya-build's `build_ebpf`, but quiet: cargo's progress lines are
//! shown only when the eBPF build fails (aya-build turns each of them into a build-script
//! warning, some fifty per build); compiler diagnostics are always shown.
use std::{
    env,
    ffi::OsString,
    io::{BufRead as _, BufReader},
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{Context as _, anyhow, bail};
use cargo_metadata::{Artifact, CompilerMessage, Message};

fn main() -> anyhow::Result<()> {
    println!("cargo::rustc-check-cfg=cfg(fuzzing)");
    // cargo fuzz's build (`--cfg fuzzing`) reads captures and never loads a program: the eBPF
    // object, a nightly build of its own, is left out there (src/bpf/mod.rs).
    if env::var_os("CARGO_CFG_FUZZING").is_some() {
        return Ok(());
    }
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let nightly = metadata.workspace_metadata["numatrace"]["nightly"]
        .as_str()
        .ok_or_else(|| anyhow!("[workspace.metadata.numatrace] nightly is not set"))?
        .to_owned();
    let ebpf = metadata
        .packages
        .iter()
        .find(|p| p.name.as_str() == "numatrace-ebpf")
        .ok_or_else(|| anyhow!("numatrace-ebpf package not found"))?;
    let root = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    // Rebuild when the eBPF sources change (the build-dependency covers its library only).
    println!("cargo::rerun-if-changed={root}");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    let arch = env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH not set")?;

    let mut rustflags = OsString::new();
    for (i, f) in [
        format!("--cfg=bpf_target_arch=\"{arch}\""),
        "-Cdebuginfo=2".into(),
        "-Clink-arg=--btf".into(),
    ]
    .iter()
    .enumerate()
    {
        if i > 0 {
            rustflags.push("\x1f");
        }
        rustflags.push(f);
    }
    let target_dir = out_dir.join("ebpf-target");
    let mut cmd = Command::new("rustup");
    cmd.args(["run", &nightly, "cargo", "build", "--package"])
        .arg(ebpf.name.as_str())
        .args([
            "--bins",
            "--message-format=json",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--target-dir",
        ])
        .arg(&target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags)
        // The host build's toolchain must not leak into the nightly build.
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTUP_TOOLCHAIN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().context(
        "running rustup: `cargo xtask build` installs the pinned nightly and bpf-linker",
    )?;
    let stderr = child.stderr.take().expect("piped stderr");
    let progress = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let mut executables = Vec::new();
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    for message in Message::parse_stream(stdout) {
        match message.context("cargo's JSON messages")? {
            Message::CompilerArtifact(Artifact {
                executable: Some(exe),
                target,
                ..
            }) => executables.push((target.name, exe.into_std_path_buf())),
            Message::CompilerMessage(CompilerMessage { message, .. }) => {
                for line in message.rendered.unwrap_or_default().lines() {
                    println!("cargo::warning={line}");
                }
            }
            _ => {}
        }
    }
    let status = child.wait().context("waiting for the eBPF build")?;
    let progress = progress.join().unwrap_or_default();
    if !status.success() {
        for line in &progress {
            println!("cargo::warning={line}");
        }
        bail!(
            "building the eBPF object failed ({status}): run `cargo xtask build`, which installs \
             the pinned nightly and bpf-linker; cargo's output is above"
        );
    }
    for (name, exe) in executables {
        let dst = out_dir.join(&name);
        std::fs::copy(&exe, &dst)
            .with_context(|| format!("copying {} to {}", exe.display(), dst.display()))?;
    }
    Ok(())
}
