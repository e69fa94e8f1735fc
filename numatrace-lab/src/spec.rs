//! What `--kernel` names: a kernel image file, a built kernel tree (its
//! `arch/x86/boot/bzImage` and `.config`), or a distribution line (`debian:6.12`, `ubuntu:6.8`),
//! resolved to an image and the config to check it against.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::{
    image,
    kernels::{self, KERNELS},
};

/// A `--kernel` argument, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelSpec {
    /// `debian:6.12`: the line's label (`6.12`).
    Line(&'static str),
    Image(PathBuf),
    Tree(PathBuf),
}

/// The lines a user can name, for errors and `--help`.
pub fn line_names() -> String {
    KERNELS
        .iter()
        .map(|k| format!("{}:{}", k.distro, k.label))
        .collect::<Vec<_>>()
        .join(", ")
}

impl KernelSpec {
    pub fn parse(s: &str) -> Result<Self> {
        if let Some((distro, label)) = s.split_once(':') {
            if !s.contains('/') && !Path::new(s).exists() {
                return KERNELS
                    .iter()
                    .find(|k| k.distro == distro && k.label == label)
                    .map(|k| Self::Line(k.label))
                    .with_context(|| {
                        format!(
                            "--kernel {s}: no such kernel line (lines: {})",
                            line_names()
                        )
                    });
            }
        }
        let p = PathBuf::from(s);
        let meta = std::fs::metadata(&p).with_context(|| {
            format!(
                "--kernel {s}: not a file, a kernel tree or a line ({})",
                line_names()
            )
        })?;
        Ok(if meta.is_dir() {
            Self::Tree(p)
        } else {
            Self::Image(p)
        })
    }
}

/// Where a config came from, for the preflight's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigFrom {
    File(PathBuf),
    Embedded,
    None,
}

/// A spec resolved to files.
pub struct Resolved {
    /// What the user wrote.
    pub label: String,
    pub image: PathBuf,
    /// The image's version string, from its header.
    pub version: Option<String>,
    pub config: Option<String>,
    pub config_from: ConfigFrom,
}

/// Fetches a line if it is not cached (`say` hears the download), checks that the image is an
/// x86-64 kernel, and finds its config: the tree's `.config`, a `config-VERSION` beside
/// `vmlinuz-VERSION` (or a `config` beside any image), or the one embedded with IKCONFIG.
pub fn resolve(spec: &KernelSpec, label: &str, say: &dyn Fn(&str)) -> Result<Resolved> {
    let (image, config_file) = match spec {
        KernelSpec::Line(l) => {
            let k = kernels::line(l).context("a known line")?;
            let files = kernels::kernel_image(k, true, say)?;
            (files.image, files.config)
        }
        KernelSpec::Tree(dir) => {
            let image = dir.join("arch/x86/boot/bzImage");
            if !image.exists() {
                bail!(
                    "--kernel {label}: no arch/x86/boot/bzImage in this tree: build it first \
                     (make -j$(nproc) bzImage)"
                );
            }
            let config = dir.join(".config");
            (image, config.exists().then_some(config))
        }
        KernelSpec::Image(path) => (path.clone(), config_beside(path)),
    };
    let bytes = std::fs::read(&image).with_context(|| format!("reading {}", image.display()))?;
    let header = image::inspect(&bytes).map_err(|e| anyhow::anyhow!("--kernel {label}: {e}"))?;
    let (config, config_from) = match config_file {
        Some(f) => (
            Some(std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?),
            ConfigFrom::File(f),
        ),
        None => match image::embedded_config(&bytes) {
            Some(c) => (Some(c), ConfigFrom::Embedded),
            None => (None, ConfigFrom::None),
        },
    };
    Ok(Resolved {
        label: label.to_owned(),
        image,
        version: header.version,
        config,
        config_from,
    })
}

/// `config-VERSION` beside `vmlinuz-VERSION` (as /boot has them), or `config` beside the image.
fn config_beside(image: &Path) -> Option<PathBuf> {
    let dir = image.parent()?;
    let name = image.file_name()?.to_string_lossy().into_owned();
    let versioned = name
        .strip_prefix("vmlinuz-")
        .or_else(|| name.strip_prefix("bzImage-"))
        .map(|v| dir.join(format!("config-{v}")));
    versioned
        .filter(|p| p.exists())
        .or_else(|| Some(dir.join("config")).filter(|p| p.exists()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(
            KernelSpec::parse("debian:6.12").unwrap(),
            KernelSpec::Line("6.12")
        );
        assert_eq!(
            KernelSpec::parse("ubuntu:6.8").unwrap(),
            KernelSpec::Line("6.8")
        );
        let e = KernelSpec::parse("debian:9.9").unwrap_err().to_string();
        assert!(e.contains("debian:6.12"), "{e}");
        assert!(KernelSpec::parse("/nonexistent/bzImage").is_err());
        assert_eq!(
            KernelSpec::parse("/").unwrap(),
            KernelSpec::Tree(PathBuf::from("/"))
        );
    }
}
