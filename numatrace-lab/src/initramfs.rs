//! A guest's initramfs: a gzipped cpio archive (`newc`, the format the kernel unpacks) written
//! here, so that packing needs neither cpio nor root (a device node is bytes in the archive).

use std::{collections::BTreeSet, fs, io::Write as _, path::Path};

use anyhow::{Context as _, Result, bail};
use flate2::{Compression, write::GzEncoder};

/// An archive being built: entries in the order the kernel will create them.
#[derive(Default)]
pub struct Initramfs {
    out: Vec<u8>,
    dirs: BTreeSet<String>,
    names: BTreeSet<String>,
    ino: u32,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

impl Initramfs {
    pub fn new() -> Self {
        Self::default()
    }

    /// A directory (and its parents), mode 0755.
    pub fn dir(&mut self, path: &str) -> Result<&mut Self> {
        let path = clean(path)?;
        let mut at = String::new();
        for part in path.split('/') {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(part);
            if self.dirs.insert(at.clone()) {
                let name = at.clone();
                self.entry(&name, S_IFDIR | 0o755, (0, 0), &[])?;
            }
        }
        Ok(self)
    }

    /// A regular file with `bytes`, `mode` its permission bits.
    pub fn bytes(&mut self, path: &str, bytes: &[u8], mode: u32) -> Result<&mut Self> {
        let path = clean(path)?;
        self.parent(&path)?;
        self.entry(&path, S_IFREG | (mode & 0o7777), (0, 0), bytes)?;
        Ok(self)
    }

    /// A regular file copied from `src` (its permission bits kept).
    pub fn file(&mut self, path: &str, src: &Path) -> Result<&mut Self> {
        use std::os::unix::fs::PermissionsExt as _;
        let bytes = fs::read(src).with_context(|| format!("reading {}", src.display()))?;
        let mode = fs::metadata(src)?.permissions().mode();
        self.bytes(path, &bytes, mode)
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> Result<&mut Self> {
        let path = clean(path)?;
        self.parent(&path)?;
        self.entry(&path, S_IFLNK | 0o777, (0, 0), target.as_bytes())?;
        Ok(self)
    }

    /// A character device node (e.g. `dev/console`, 5:1).
    pub fn char_device(&mut self, path: &str, major: u32, minor: u32) -> Result<&mut Self> {
        let path = clean(path)?;
        self.parent(&path)?;
        self.entry(&path, S_IFCHR | 0o600, (major, minor), &[])?;
        Ok(self)
    }

    /// The archive, gzipped, written to `out` (a new file: never one that exists).
    pub fn write(mut self, out: &Path) -> Result<()> {
        self.entry("TRAILER!!!", 0, (0, 0), &[])?;
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(out)
            .with_context(|| format!("creating {}", out.display()))?;
        let mut gz = GzEncoder::new(file, Compression::fast());
        gz.write_all(&self.out)?;
        gz.finish()?.sync_all()?;
        Ok(())
    }

    fn parent(&mut self, path: &str) -> Result<()> {
        if let Some((dir, _)) = path.rsplit_once('/') {
            self.dir(dir)?;
        }
        Ok(())
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) -> Result<()> {
        if name != "TRAILER!!!" && mode & S_IFDIR != S_IFDIR && !self.names.insert(name.into()) {
            bail!("initramfs: {name} added twice");
        }
        self.ino += 1;
        let fields = [
            self.ino,
            mode,
            0,
            0,
            if mode & S_IFDIR == S_IFDIR { 2 } else { 1 },
            0,
            u32::try_from(data.len()).context("a file over 4 GiB")?,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0,
        ];
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        pad4(&mut self.out);
        self.out.extend_from_slice(data);
        pad4(&mut self.out);
        Ok(())
    }
}

fn pad4(v: &mut Vec<u8>) {
    while v.len() % 4 != 0 {
        v.push(0);
    }
}

/// A relative path without `.`, `..` or empty parts.
fn clean(path: &str) -> Result<String> {
    let path = path.trim_start_matches('/');
    if path.is_empty()
        || path
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
    {
        bail!("initramfs: not a plain path: {path:?}");
    }
    Ok(path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_newc_with_parents_first() {
        let mut i = Initramfs::new();
        i.bytes("a/b/c", b"hello", 0o755).unwrap();
        i.char_device("dev/console", 5, 1).unwrap();
        i.symlink("init", "a/b/c").unwrap();
        assert!(i.bytes("a/b/c", b"again", 0o644).is_err());
        assert!(i.bytes("../x", b"", 0o644).is_err());
        let text = String::from_utf8_lossy(&i.out).into_owned();
        let a = text.find("a\0").unwrap();
        let ab = text.find("a/b\0").unwrap();
        let abc = text.find("a/b/c\0").unwrap();
        assert!(a < ab && ab < abc);
        assert!(text.starts_with("070701"));
        // The file's header: mode 0100755, size 5.
        let header = &text[abc - 110 + 6..abc];
        assert_eq!(&header[8..16], "000081ed");
        assert_eq!(&header[48..56], "00000005");
        assert_eq!(i.out.len() % 4, 0);
    }
}
