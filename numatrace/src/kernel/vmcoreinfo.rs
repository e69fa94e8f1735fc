//! The kernel's own statement of its memory layout: the VMCOREINFO note that `/proc/kcore`
//! carries (4.19+; root, CONFIG_PROC_KCORE, not under lockdown). On arm64 it names
//! `VMEMMAP_START` and `PHYS_OFFSET`, which give the `vmemmap` array a `struct page` pointer is
//! an index into whatever VA_BITS (48 or 52) and layout the kernel was built with — the
//! formula for VMEMMAP_START changed between 6.1 and 6.12, the kernel's number did not.
//!
//! Only the ELF header, the program headers and the notes are read, bounded; the text is
//! parsed as untrusted (`KEY=VALUE` lines).

use std::{
    collections::BTreeMap,
    fs::File,
    io::{Read as _, Seek as _, SeekFrom},
    path::Path,
};

/// The notes are a few KiB; anything larger is not read.
const MAX_NOTES: u64 = 1 << 20;
const PT_NOTE: u32 = 4;

/// `KEY=VALUE` lines of the VMCOREINFO note, or `None` where it cannot be read.
pub fn read(kcore: &Path) -> Option<BTreeMap<String, String>> {
    let mut f = File::open(kcore).ok()?;
    let mut eh = [0u8; 64];
    f.read_exact(&mut eh).ok()?;
    // ELF64, little-endian (both architectures numatrace runs on).
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(&eh, 32), u16_at(&eh, 54), u16_at(&eh, 56));
    if phentsize != 56 || phnum == 0 {
        return None;
    }
    f.seek(SeekFrom::Start(phoff)).ok()?;
    let mut ph = vec![0u8; 56 * usize::from(phnum.min(4096))];
    f.read_exact(&mut ph).ok()?;
    let note = ph
        .as_chunks::<56>()
        .0
        .iter()
        .find(|p| u32_at(&p[..], 0) == PT_NOTE)
        .map(|p| (u64_at(&p[..], 8), u64_at(&p[..], 32)))?;
    let (off, size) = note;
    if size == 0 || size > MAX_NOTES {
        return None;
    }
    f.seek(SeekFrom::Start(off)).ok()?;
    let mut notes = vec![0u8; size as usize];
    f.read_exact(&mut notes).ok()?;
    parse_notes(&notes)
}

/// The VMCOREINFO note's lines among ELF notes (namesz, descsz, type, name, desc; 4-aligned).
fn parse_notes(mut b: &[u8]) -> Option<BTreeMap<String, String>> {
    let align = |n: usize| n.checked_add(3).map(|v| v & !3);
    while b.len() >= 12 {
        let namesz = u32::from_le_bytes(b[0..4].try_into().ok()?) as usize;
        let descsz = u32::from_le_bytes(b[4..8].try_into().ok()?) as usize;
        let name_end = 12usize.checked_add(align(namesz)?)?;
        let desc_end = name_end.checked_add(align(descsz)?)?;
        if desc_end > b.len() || 12 + namesz > b.len() || name_end + descsz > b.len() {
            return None;
        }
        let name = &b[12..12 + namesz];
        if name.strip_suffix(b"\0").unwrap_or(name) == b"VMCOREINFO" {
            let text = String::from_utf8_lossy(&b[name_end..name_end + descsz]);
            return Some(
                text.lines()
                    .filter_map(|l| l.split_once('='))
                    .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                    .collect(),
            );
        }
        b = &b[desc_end..];
    }
    None
}

/// A number as VMCOREINFO writes it: `0x…` hexadecimal or decimal.
pub fn number(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// arm64's `vmemmap` (the address of `struct page` number 0): `VMEMMAP_START` minus the pages
/// below `PHYS_OFFSET` (arch/arm64/include/asm/pgtable.h: `(struct page *)VMEMMAP_START -
/// (memstart_addr >> PAGE_SHIFT)`), with `PAGESIZE` and `SIZE(page)` from the same note.
/// `memstart_addr` is signed and the note prints it as unsigned hex: it is negative where a
/// kernel built for 52-bit VA runs on a CPU without LPA2 (Graviton2/3, Ampere Altra: the kernel
/// moves it down by the difference of the two linear maps) or KASLR moves the linear map, and
/// the kernel's shift is then arithmetic — so is this one, and the pointer arithmetic wraps as
/// the kernel's does.
pub fn arm64_vmemmap(info: &BTreeMap<String, String>) -> Option<u64> {
    let get = |k: &str| info.get(k).and_then(|v| number(v));
    let start = get("NUMBER(VMEMMAP_START)")?;
    let phys = get("NUMBER(PHYS_OFFSET)")? as i64;
    let page = get("PAGESIZE")?;
    let size = get("SIZE(page)")?;
    if !page.is_power_of_two() || size == 0 {
        return None;
    }
    let pfn_offset = (phys >> page.trailing_zeros()) as u64;
    Some(start.wrapping_sub(pfn_offset.wrapping_mul(size)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &str, desc: &str, kind: u32) -> Vec<u8> {
        let mut v = Vec::new();
        let n = format!("{name}\0");
        v.extend((n.len() as u32).to_le_bytes());
        v.extend((desc.len() as u32).to_le_bytes());
        v.extend(kind.to_le_bytes());
        v.extend(n.as_bytes());
        v.resize(v.len().next_multiple_of(4), 0);
        v.extend(desc.as_bytes());
        v.resize(v.len().next_multiple_of(4), 0);
        v
    }

    #[test]
    fn the_vmcoreinfo_note_is_found_among_others_and_gives_arm64_vmemmap() {
        // Debian's 6.12.118 cloud-arm64 kernel (52-bit VA) in a QEMU virt guest, RAM at 1 GiB,
        // on a CPU with LPA2 (-cpu max).
        let text = "OSRELEASE=6.12.118+deb13-cloud-arm64\nPAGESIZE=4096\nSIZE(page)=64\n\
                    NUMBER(VA_BITS)=52\nNUMBER(VMEMMAP_START)=0xffffc1ffc0000000\n\
                    NUMBER(PHYS_OFFSET)=0x40000000\n";
        let mut notes = note("CORE", "prstatus", 1);
        notes.extend(note("VMCOREINFO", text, 0));
        let info = parse_notes(&notes).unwrap();
        assert_eq!(info["NUMBER(VA_BITS)"], "52");
        assert_eq!(
            arm64_vmemmap(&info),
            Some(0xffff_c1ff_c000_0000 - 0x40000 * 64)
        );
    }

    #[test]
    fn a_negative_phys_offset_moves_vmemmap_up_as_the_kernels_signed_shift_does() {
        // The same kernel on a CPU without LPA2 (48-bit VA at run time): memstart_addr =
        // 0x40000000 - (_PAGE_OFFSET(48) - _PAGE_OFFSET(52)), negative, printed as u64.
        let phys = 0x4000_0000i64 - 0x000f_0000_0000_0000;
        let text = format!(
            "PAGESIZE=4096\nSIZE(page)=64\nNUMBER(VMEMMAP_START)=0xffffc1ffc0000000\n\
             NUMBER(PHYS_OFFSET)=0x{:x}\n",
            phys as u64
        );
        let info = parse_notes(&note("VMCOREINFO", &text, 0)).unwrap();
        let vmemmap = arm64_vmemmap(&info).unwrap();
        // (phys >> 12) * 64 below VMEMMAP_START, i.e. above it by the negative amount.
        assert_eq!(vmemmap, 0xffff_c1ff_c000_0000 + 0x3bff_ff00_0000);
        // The struct page of the first RAM page (PFN 0x40000) lies inside the vmemmap region
        // [VMEMMAP_START, -1 GiB).
        let first = vmemmap.wrapping_add(0x40000 * 64);
        assert!((0xffff_c1ff_c000_0000..0xffff_ffff_c000_0000).contains(&first));
    }

    #[test]
    fn hostile_notes_are_refused_not_trusted() {
        assert!(parse_notes(&[0xff; 12]).is_none());
        let mut bad = note("VMCOREINFO", "A=1", 0);
        bad[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse_notes(&bad).is_none());
        assert!(parse_notes(&note("CORE", "x", 1)).is_none());
        let info = parse_notes(&note("VMCOREINFO", "PAGESIZE=4096\n", 0)).unwrap();
        assert_eq!(arm64_vmemmap(&info), None);
        assert_eq!(number("0x10"), Some(16));
        assert_eq!(number("12"), Some(12));
        assert_eq!(number("zz"), None);
    }
}
