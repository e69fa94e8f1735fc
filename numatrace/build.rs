//! Builds `numatrace-ebpf` for the BPF target with the pinned nightly (through aya-build) so
//! that `src/bpf/object.rs` can embed it: one binary to copy onto another machine.
use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
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
    aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root.as_str(),
            ..Default::default()
        }],
        aya_build::Toolchain::Custom(&nightly),
    )
    .context("building the eBPF object: run `cargo xtask build`, which installs the pinned nightly and bpf-linker")
}
