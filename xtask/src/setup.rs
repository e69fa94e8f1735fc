//! Installs and finds the pinned toolchains and bpf-linker, and the Debian packages a step
//! needs (as root, with apt). Every check comes before any install, so a second run costs a few
//! `rustc --version` and `dpkg-query` calls.

use std::{
    env, fmt, fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::process::{check, output};

/// The pins of `[workspace.metadata.numatrace]` in the root Cargo.toml.
pub struct Pins {
    pub stable: String,
    pub nightly: String,
    pub bpf_linker: String,
    pub cargo_fuzz: String,
}

pub fn workspace_root() -> PathBuf {
    // xtask/ is one level below the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent directory")
        .to_path_buf()
}

fn pins() -> Result<Pins> {
    let out = output(
        Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .current_dir(workspace_root()),
    )?;
    let v: serde_json::Value = serde_json::from_str(&out).context("cargo metadata output")?;
    let m = &v["metadata"]["numatrace"];
    let get = |k: &str| {
        m[k].as_str()
            .map(str::to_owned)
            .with_context(|| format!("[workspace.metadata.numatrace] {k} is not set"))
    };
    Ok(Pins {
        stable: get("stable")?,
        nightly: get("nightly")?,
        bpf_linker: get("bpf-linker")?,
        cargo_fuzz: get("cargo-fuzz")?,
    })
}

/// Where downloads and builds that outlive a clone are cached.
pub use numatrace_lab::cache_dir;

pub struct Tools {
    pub pins: Pins,
    /// Directory holding `bpf-linker`, to put first on PATH.
    pub bpf_linker_bin: PathBuf,
}

impl fmt::Display for Tools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rust {} (host), {} (eBPF), bpf-linker {} in {}",
            self.pins.stable,
            self.pins.nightly,
            self.pins.bpf_linker,
            self.bpf_linker_bin.display()
        )
    }
}

impl Tools {
    /// A cargo command on the pinned stable toolchain with bpf-linker on PATH.
    pub fn cargo(&self, toolchain: &str) -> Command {
        let mut c = Command::new("rustup");
        c.args(["run", toolchain, "cargo"]);
        c.current_dir(workspace_root());
        let path = env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![self.bpf_linker_bin.clone()];
        paths.extend(env::split_paths(&path));
        c.env(
            "PATH",
            env::join_paths(paths).expect("PATH entries are valid"),
        );
        // Set by the outer `cargo run`; they would pin children to the machine's toolchain.
        for k in [
            "RUSTC",
            "RUSTDOC",
            "RUSTUP_TOOLCHAIN",
            "CARGO",
            "RUSTC_WRAPPER",
        ] {
            c.env_remove(k);
        }
        scrub_outer_package(&mut c);
        c
    }
}

/// Removes from `c`'s environment what the outer `cargo run` says of xtask itself
/// (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...): a build script that names one of them in
/// rerun-if-env-changed (ring names six) is compared against the cargo process's own, so it
/// would run again, and its crate and every crate above it compile again, in each clone, whose
/// path the value carries (CI's clean clones compiled ring, rustls and rcgen three times
/// each). Cargo gives every build script its own values.
fn scrub_outer_package(c: &mut Command) {
    for (k, _) in env::vars_os() {
        if k.to_str().is_some_and(is_outer_package_var) {
            c.env_remove(k);
        }
    }
}

fn is_outer_package_var(k: &str) -> bool {
    k.starts_with("CARGO_PKG_")
        || matches!(
            k,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
        )
}

fn toolchain_ready(name: &str, components: &[&str]) -> bool {
    let ok = Command::new("rustup")
        .args(["run", name, "rustc", "--version"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        return false;
    }
    let installed = Command::new("rustup")
        .args(["component", "list", "--installed", "--toolchain", name])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    components.iter().all(|c| {
        installed
            .lines()
            .any(|l| l.starts_with(&format!("{c}-")) || l == *c)
    })
}

fn ensure_toolchain(name: &str, components: &[&str]) -> Result<()> {
    if toolchain_ready(name, components) {
        return Ok(());
    }
    eprintln!(
        "xtask: installing Rust toolchain {name} ({})",
        components.join(", ")
    );
    // RUSTUP_AUTO_INSTALL=0 on these machines: installing explicitly is the only way.
    check(
        Command::new("rustup")
            .args([
                "toolchain",
                "install",
                name,
                "--profile",
                "minimal",
                "--component",
            ])
            .arg(components.join(","))
            .env_remove("RUSTUP_TOOLCHAIN"),
    )
}

fn sysroot(toolchain: &str) -> Result<PathBuf> {
    Ok(PathBuf::from(
        output(
            Command::new("rustup")
                .args(["run", toolchain, "rustc", "--print", "sysroot"])
                .env_remove("RUSTUP_TOOLCHAIN"),
        )?
        .trim(),
    ))
}

/// bpf-linker built against the pinned nightly's own libLLVM, so that the linker reads exactly
/// the bitcode that rustc writes (Debian has no matching LLVM, and release binaries cannot be
/// downloaded here).
fn ensure_bpf_linker(p: &Pins) -> Result<PathBuf> {
    let root = cache_dir().join(format!("bpf-linker-{}-{}", p.bpf_linker, p.nightly));
    let bin = root.join("bin");
    let linker = bin.join("bpf-linker");
    if Command::new(&linker)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Ok(bin);
    }
    let sysroot = sysroot(&p.nightly)?;
    let libllvm = fs::read_dir(sysroot.join("lib"))
        .context("reading the nightly sysroot")?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libLLVM.so."))
        })
        .with_context(|| format!("no libLLVM.so.* in {}", sysroot.display()))?;
    let prefix = root.join("llvm");
    let lib = prefix.join("lib");
    fs::create_dir_all(&lib)?;
    for name in [
        PathBuf::from("libLLVM.so"),
        PathBuf::from(libllvm.file_name().expect("a file name")),
    ] {
        let link = lib.join(name);
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(&libllvm, &link)
            .with_context(|| format!("linking {}", link.display()))?;
    }
    eprintln!(
        "xtask: building bpf-linker {} against {} (about a minute)",
        p.bpf_linker,
        libllvm.display()
    );
    check(
        Command::new("rustup")
            .args([
                "run",
                &p.stable,
                "cargo",
                "install",
                "bpf-linker",
                "--locked",
                "--force",
            ])
            .arg("--version")
            .arg(format!("={}", p.bpf_linker))
            .arg("--root")
            .arg(&root)
            .env("LLVM_PREFIX", &prefix)
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO"),
    )?;
    if !linker.exists() {
        bail!("bpf-linker was not installed at {}", linker.display());
    }
    Ok(bin)
}

/// cargo-fuzz at its pinned version, for `cargo xtask test`'s fuzzing step only (not every
/// build needs it); returns the directory holding `cargo-fuzz`.
pub fn ensure_cargo_fuzz(p: &Pins) -> Result<PathBuf> {
    let root = cache_dir().join(format!("cargo-fuzz-{}", p.cargo_fuzz));
    let bin = root.join("bin");
    let installed = Command::new(bin.join("cargo-fuzz"))
        .arg("--version")
        .output()
        .is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains(&p.cargo_fuzz)
        });
    if installed {
        return Ok(bin);
    }
    eprintln!(
        "xtask: building cargo-fuzz {} (a few minutes, once)",
        p.cargo_fuzz
    );
    check(
        Command::new("rustup")
            .args([
                "run",
                &p.stable,
                "cargo",
                "install",
                "cargo-fuzz",
                "--locked",
                "--force",
            ])
            .arg("--version")
            .arg(format!("={}", p.cargo_fuzz))
            .arg("--root")
            .arg(&root)
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO")
            .env_remove("CARGO_TARGET_DIR"),
    )?;
    Ok(bin)
}

pub fn dpkg_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn apt_update() -> Result<()> {
    check(Command::new("apt-get").args(["update", "-qq"]))
}

/// Installs Debian packages that are missing (needs root).
pub fn ensure_packages(pkgs: &[&str]) -> Result<()> {
    let missing: Vec<&str> = pkgs
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: apt-get install {}", missing.join(" "));
    apt_update()?;
    check(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// Makes sure everything the other steps need is installed.
pub fn ensure() -> Result<Tools> {
    let pins = pins()?;
    ensure_toolchain(
        &pins.stable,
        &["rustc", "cargo", "rust-std", "clippy", "rustfmt"],
    )?;
    ensure_toolchain(&pins.nightly, &["rustc", "cargo", "rust-src", "clippy"])?;
    let bpf_linker_bin = ensure_bpf_linker(&pins)?;
    Ok(Tools {
        pins,
        bpf_linker_bin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cargo test` sets the package's variables at run time, as `cargo run` does for xtask:
    /// the children's cargo sees none of them, and keeps the rest (CARGO_HOME, PATH).
    #[test]
    fn children_do_not_inherit_the_outer_packages_variables() {
        assert!(
            env::var_os("CARGO_MANIFEST_DIR").is_some() && env::var_os("CARGO_PKG_NAME").is_some()
        );
        let mut c = Command::new("true");
        scrub_outer_package(&mut c);
        let removed: Vec<String> = c
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        for k in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO_PKG_VERSION"] {
            assert!(removed.iter().any(|r| r == k), "{k} kept: {removed:?}");
        }
        assert!(
            removed.iter().all(|r| is_outer_package_var(r)),
            "{removed:?}"
        );
        assert!(!is_outer_package_var("CARGO_HOME") && !is_outer_package_var("CARGO_TARGET_DIR"));
    }
}
