//! Is a file an x86-64 kernel image QEMU can boot (`-kernel`), which version, and the config it
//! carries (IKCONFIG), read from the bytes alone: the x86 boot protocol's setup header.

use std::io::Read as _;

use flate2::read::GzDecoder;

/// Why a file cannot be booted as an x86-64 kernel, in words for a one-line error.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NotBootable {
    #[error("an empty file, not a kernel image")]
    Empty,
    #[error("an arm64 kernel image: this lab boots x86-64 kernels")]
    Arm64,
    #[error(
        "an uncompressed vmlinux (ELF): boot the bzImage built beside it (arch/x86/boot/bzImage)"
    )]
    Vmlinux,
    #[error("an ELF file for another architecture (machine {0}), not an x86-64 kernel")]
    OtherElf(u16),
    #[error("a gzip-compressed file (arm64's vmlinuz is one), not an x86-64 bzImage")]
    Gzip,
    #[error("a 32-bit x86 kernel: this lab boots x86-64 kernels")]
    X86_32,
    #[error("not a kernel image (no x86 boot header, no known kernel format)")]
    Unknown,
}

/// What the setup header says.
#[derive(Debug, PartialEq, Eq)]
pub struct Bzimage {
    /// The kernel's version string (`6.12.117+deb13-cloud-amd64 (debian-kernel@…) #1 SMP …`).
    pub version: Option<String>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// An ELF file's `e_machine` (62 x86-64, 183 aarch64); `None` when `bytes` are not ELF.
pub fn elf_machine(bytes: &[u8]) -> Option<u16> {
    if !bytes.starts_with(b"\x7fELF") {
        return None;
    }
    u16_at(bytes, 0x12)
}

/// Whether `bytes` are an x86-64 bzImage, and its version.
pub fn inspect(bytes: &[u8]) -> Result<Bzimage, NotBootable> {
    if bytes.is_empty() {
        return Err(NotBootable::Empty);
    }
    if bytes.get(0x38..0x3c) == Some(b"ARM\x64") {
        return Err(NotBootable::Arm64);
    }
    if bytes.starts_with(b"\x7fELF") {
        return match elf_machine(bytes) {
            Some(62) => Err(NotBootable::Vmlinux),
            Some(m) => Err(NotBootable::OtherElf(m)),
            None => Err(NotBootable::Unknown),
        };
    }
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return Err(NotBootable::Gzip);
    }
    if bytes.get(0x202..0x206) != Some(b"HdrS") || u16_at(bytes, 0x1fe) != Some(0xaa55) {
        return Err(NotBootable::Unknown);
    }
    // xloadflags (protocol 2.12+): XLF_KERNEL_64. Older 64-bit kernels lack the field; their
    // long-mode entry is still there, so only a header that has it and says no is refused.
    let protocol = u16_at(bytes, 0x206).unwrap_or(0);
    if protocol >= 0x020c && u16_at(bytes, 0x236).is_some_and(|f| f & 1 == 0) {
        return Err(NotBootable::X86_32);
    }
    let version = u16_at(bytes, 0x20e)
        .filter(|o| *o != 0)
        .and_then(|o| bytes.get(o as usize + 0x200..))
        .map(|s| {
            let end = s.iter().position(|c| *c == 0).unwrap_or(s.len()).min(200);
            String::from_utf8_lossy(&s[..end]).into_owned()
        });
    Ok(Bzimage { version })
}

/// `uname -r` out of a version string (its first word).
pub fn release(version: &str) -> &str {
    version.split_whitespace().next().unwrap_or(version)
}

/// The config embedded with IKCONFIG, when the image's payload is gzip-compressed (the
/// default of `make defconfig`); None otherwise (other compressors, or no IKCONFIG).
pub fn embedded_config(bytes: &[u8]) -> Option<String> {
    let setup_sects = match *bytes.get(0x1f1)? {
        0 => 4,
        n => n as usize,
    };
    let offset = u32_at(bytes, 0x248)? as usize;
    let length = u32_at(bytes, 0x24c)? as usize;
    let start = (setup_sects + 1) * 512 + offset;
    let payload = bytes.get(start..start.checked_add(length)?)?;
    if !payload.starts_with(&[0x1f, 0x8b]) {
        return None;
    }
    let mut vmlinux = Vec::new();
    // A kernel is tens of MiB; the bound keeps a hostile file from filling memory.
    GzDecoder::new(payload)
        .take(512 << 20)
        .read_to_end(&mut vmlinux)
        .ok()?;
    let at = find(&vmlinux, b"IKCFG_ST")? + 8;
    let end = at + find(&vmlinux[at..], b"IKCFG_ED")?;
    let mut text = String::new();
    GzDecoder::new(&vmlinux[at..end])
        .take(16 << 20)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A setup header as a bzImage has it, with `payload` gzipped after it.
    pub fn fake_bzimage(version: &str, payload: &[u8]) -> Vec<u8> {
        use flate2::{Compression, write::GzEncoder};
        use std::io::Write as _;
        let mut b = vec![0u8; 5 * 512];
        b[0x1f1] = 4;
        b[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes());
        b[0x202..0x206].copy_from_slice(b"HdrS");
        b[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
        b[0x236..0x238].copy_from_slice(&1u16.to_le_bytes());
        b[0x20e..0x210].copy_from_slice(&(0x400u16 - 0x200).to_le_bytes());
        b[0x400..0x400 + version.len()].copy_from_slice(version.as_bytes());
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(payload).unwrap();
        let gz = gz.finish().unwrap();
        b[0x248..0x24c].copy_from_slice(&0u32.to_le_bytes());
        b[0x24c..0x250].copy_from_slice(&(gz.len() as u32).to_le_bytes());
        b.extend_from_slice(&gz);
        b
    }

    #[test]
    fn a_bzimage_and_its_config_are_read() {
        use flate2::{Compression, write::GzEncoder};
        use std::io::Write as _;
        let mut cfg = GzEncoder::new(Vec::new(), Compression::fast());
        cfg.write_all(b"CONFIG_NUMA=y\n").unwrap();
        let mut vmlinux = b"junk IKCFG_ST".to_vec();
        vmlinux.extend(cfg.finish().unwrap());
        vmlinux.extend(b"IKCFG_ED more");
        let img = fake_bzimage("6.12.0-test (me@host) #1 SMP", &vmlinux);
        let b = inspect(&img).unwrap();
        assert_eq!(b.version.as_deref(), Some("6.12.0-test (me@host) #1 SMP"));
        assert_eq!(release(b.version.as_deref().unwrap()), "6.12.0-test");
        assert_eq!(embedded_config(&img).as_deref(), Some("CONFIG_NUMA=y\n"));
        assert_eq!(embedded_config(&fake_bzimage("x", b"no config")), None);
    }

    #[test]
    fn other_files_say_what_they_are() {
        assert_eq!(inspect(b""), Err(NotBootable::Empty));
        assert_eq!(inspect(&[7u8; 4096]), Err(NotBootable::Unknown));
        assert_eq!(inspect(b"\x1f\x8b\x08\0rest"), Err(NotBootable::Gzip));
        let mut arm = vec![0u8; 0x40];
        arm[0x38..0x3c].copy_from_slice(b"ARM\x64");
        assert_eq!(inspect(&arm), Err(NotBootable::Arm64));
        let mut elf = b"\x7fELF".to_vec();
        elf.resize(0x14, 0);
        elf[0x12] = 62;
        assert_eq!(inspect(&elf), Err(NotBootable::Vmlinux));
        elf[0x12] = 183;
        assert_eq!(inspect(&elf), Err(NotBootable::OtherElf(183)));
        // Cut short: never a panic.
        let img = fake_bzimage("v", b"x");
        for n in [0x203, 0x210, 0x250, 600] {
            let _ = inspect(&img[..n]);
            let _ = embedded_config(&img[..n]);
        }
    }
}
