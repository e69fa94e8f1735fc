//! The capture file's container: a header, then self-describing sections, each compressed on its
//! own (zstd) and checksummed (CRC-32), so a reader skips the kinds it does not know and a file
//! cut short (SIGKILL, full disk) is read up to its last whole section.
//!
//! ```text
//! header   "NUMATRCE" | major u16 | minor u16 | compression u8 (1 = zstd) | 0 u8
//!          | writer length u16 | writer (UTF-8, e.g. "numatrace 0.1.0")      (little endian)
//! section  "SECT" | kind u32 | flags u32 (bit 0: zstd) | stored length u32
//!          | raw length u32 | CRC-32 of the stored bytes u32 | stored bytes
//! ```
//!
//! A reader refuses a newer major version and ignores section kinds it does not know; minor
//! versions only add kinds. It also refuses, one line naming the limit, a section that
//! decompresses past [`Limits::section_bytes`], a file whose sections together decompress past
//! [`Limits::total_bytes`] and more than [`Limits::sections`] sections: zstd is decoded as a
//! stream that stops at the limit, with its window bounded ([`WINDOW_LOG_MAX`]).

use std::io::{self, Read, Write};

use thiserror::Error;

pub const MAGIC: &[u8; 8] = b"NUMATRCE";
pub const SECTION_MAGIC: &[u8; 4] = b"SECT";
pub const MAJOR: u16 = 1;
pub const MINOR: u16 = 0;
pub const COMPRESSION_ZSTD: u8 = 1;
const FLAG_ZSTD: u32 = 1;
/// Bounds that keep a reader's memory bounded whatever the file says.
pub const MAX_STORED: u32 = 64 << 20;
pub const MAX_RAW: u32 = 256 << 20;
const SECTION_HEADER: usize = 24;
const ZSTD_LEVEL: i32 = 3;
/// The largest zstd window a reader accepts (16 MiB; level 3 uses at most 2 MiB, level 19
/// 8 MiB): what a crafted frame can make the decoder allocate.
pub const WINDOW_LOG_MAX: u32 = 24;

/// What a reader accepts, whatever the file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Decompressed bytes of one section.
    pub section_bytes: u64,
    /// Decompressed bytes of all sections together.
    pub total_bytes: u64,
    pub sections: u64,
}

/// `n` bytes in the largest binary unit that divides it ("64 MiB", "4 GiB", "1000 bytes").
pub fn size(n: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} bytes")
}

#[derive(Debug, Error)]
pub enum FormatError {
    #[error("not a numatrace capture (no NUMATRCE header)")]
    NotCapture,
    #[error(
        "written by a newer numatrace (capture format {0}.{1}); this one reads format {MAJOR}.x"
    )]
    NewerMajor(u16, u16),
    #[error("unknown compression {0}")]
    Compression(u8),
    #[error("corrupted section at byte {offset}: {what}")]
    Corrupted { offset: u64, what: String },
    #[error(
        "section {index} at byte {offset} decompresses past the limit of {} per section",
        size(*limit)
    )]
    SectionTooLarge { index: u64, offset: u64, limit: u64 },
    #[error(
        "section {index} at byte {offset} decompresses past the limit of {} for all sections \
         together",
        size(*limit)
    )]
    TotalTooLarge { index: u64, offset: u64, limit: u64 },
    #[error("section {index} at byte {offset} is past the limit of {limit} sections")]
    TooManySections { index: u64, offset: u64, limit: u64 },
    #[error("{0}")]
    Io(#[from] io::Error),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub major: u16,
    pub minor: u16,
    pub writer: String,
}

/// One section as read: its kind and decompressed bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub kind: u32,
    /// Its place in the file (the first section is 1) and the byte its header starts at.
    pub index: u64,
    pub offset: u64,
    pub data: Vec<u8>,
}

pub fn write_header<W: Write>(w: &mut W, writer: &str) -> io::Result<()> {
    let name = writer.as_bytes();
    let len = u16::try_from(name.len()).unwrap_or(u16::MAX);
    w.write_all(MAGIC)?;
    w.write_all(&MAJOR.to_le_bytes())?;
    w.write_all(&MINOR.to_le_bytes())?;
    w.write_all(&[COMPRESSION_ZSTD, 0])?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(&name[..usize::from(len)])
}

/// Compresses and writes one section; returns the bytes written.
pub fn write_section<W: Write>(w: &mut W, kind: u32, raw: &[u8]) -> io::Result<u64> {
    let raw_len = u32::try_from(raw.len())
        .ok()
        .filter(|n| *n <= MAX_RAW)
        .ok_or_else(|| io::Error::other(format!("section of {} bytes is too large", raw.len())))?;
    let stored = zstd::bulk::compress(raw, ZSTD_LEVEL)?;
    let stored_len = u32::try_from(stored.len())
        .ok()
        .filter(|n| *n <= MAX_STORED)
        .ok_or_else(|| io::Error::other("compressed section too large"))?;
    let mut head = Vec::with_capacity(SECTION_HEADER);
    head.extend_from_slice(SECTION_MAGIC);
    head.extend_from_slice(&kind.to_le_bytes());
    head.extend_from_slice(&FLAG_ZSTD.to_le_bytes());
    head.extend_from_slice(&stored_len.to_le_bytes());
    head.extend_from_slice(&raw_len.to_le_bytes());
    head.extend_from_slice(&crc32fast::hash(&stored).to_le_bytes());
    // One write for the whole section: a reader never sees a header without its bytes unless
    // the writer died in the middle, which the reader then reports as an incomplete tail.
    head.extend_from_slice(&stored);
    w.write_all(&head)?;
    Ok(head.len() as u64)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads as much as `buf` holds; fewer bytes only at the end of the input.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Sections in file order, then how the file ended.
pub struct Reader<R> {
    r: R,
    pub header: Header,
    offset: u64,
    /// Set once the input ended inside a section: the file was cut short there.
    pub truncated_at: Option<u64>,
    limits: Limits,
    /// Sections read so far, and their decompressed bytes.
    sections: u64,
    total: u64,
}

impl<R: Read> Reader<R> {
    pub fn with_limits(mut r: R, limits: Limits) -> Result<Self, FormatError> {
        let mut fixed = [0u8; 16];
        let n = read_full(&mut r, &mut fixed)?;
        if n < 8 || &fixed[..8] != MAGIC {
            return Err(FormatError::NotCapture);
        }
        if n < 16 {
            return Err(FormatError::Corrupted {
                offset: n as u64,
                what: "the header is cut short".into(),
            });
        }
        let (major, minor) = (u16_at(&fixed, 8), u16_at(&fixed, 10));
        if major > MAJOR {
            return Err(FormatError::NewerMajor(major, minor));
        }
        if fixed[12] != COMPRESSION_ZSTD {
            return Err(FormatError::Compression(fixed[12]));
        }
        let len = usize::from(u16_at(&fixed, 14));
        let mut name = vec![0u8; len];
        if read_full(&mut r, &mut name)? < len {
            return Err(FormatError::Corrupted {
                offset: 16,
                what: "the header is cut short".into(),
            });
        }
        Ok(Self {
            r,
            header: Header {
                major,
                minor,
                writer: String::from_utf8_lossy(&name).into_owned(),
            },
            offset: 16 + len as u64,
            truncated_at: None,
            limits,
            sections: 0,
            total: 0,
        })
    }

    /// The next whole section; `Ok(None)` at the end of the input (cleanly or cut short: see
    /// `truncated_at`). A section that is whole but wrong is an error.
    pub fn next_section(&mut self) -> Result<Option<Section>, FormatError> {
        if self.truncated_at.is_some() {
            return Ok(None);
        }
        let offset = self.offset;
        let bad = |what: String| FormatError::Corrupted { offset, what };
        let mut head = [0u8; SECTION_HEADER];
        let n = read_full(&mut self.r, &mut head)?;
        if n == 0 {
            return Ok(None);
        }
        if n < SECTION_HEADER {
            self.truncated_at = Some(offset);
            return Ok(None);
        }
        if &head[..4] != SECTION_MAGIC {
            return Err(bad("no section marker".into()));
        }
        let kind = u32_at(&head, 4);
        let flags = u32_at(&head, 8);
        let stored_len = u32_at(&head, 12);
        let raw_len = u32_at(&head, 16);
        let crc = u32_at(&head, 20);
        let index = self.sections + 1;
        if index > self.limits.sections {
            return Err(FormatError::TooManySections {
                index,
                offset,
                limit: self.limits.sections,
            });
        }
        if stored_len > MAX_STORED {
            return Err(bad(format!(
                "stored size {stored_len} beyond the format's limit of {}",
                size(MAX_STORED.into())
            )));
        }
        let claimed = if flags & FLAG_ZSTD != 0 {
            raw_len
        } else {
            stored_len
        };
        if u64::from(claimed) > self.limits.section_bytes {
            return Err(FormatError::SectionTooLarge {
                index,
                offset,
                limit: self.limits.section_bytes,
            });
        }
        // Read as it comes (not allocated from the header's claim): a file cut short costs
        // what it holds.
        let mut stored = Vec::new();
        (&mut self.r)
            .take(u64::from(stored_len))
            .read_to_end(&mut stored)?;
        if stored.len() < stored_len as usize {
            self.truncated_at = Some(offset);
            return Ok(None);
        }
        if crc32fast::hash(&stored) != crc {
            return Err(bad("checksum mismatch".into()));
        }
        let left = self.limits.total_bytes.saturating_sub(self.total);
        let data = if flags & FLAG_ZSTD != 0 {
            // Streamed with a hard stop one byte past what may come, so memory follows what
            // the data really holds, never more than the limits, whatever it claims.
            let stop = u64::from(raw_len).min(left).saturating_add(1);
            // Reserved (not touched) up front: growing by doubling would copy and fault in
            // more than the data.
            let mut data = Vec::with_capacity(stop.min(u64::from(raw_len)) as usize);
            zstd::stream::read::Decoder::with_buffer(&stored[..])
                .and_then(|mut d| {
                    d.window_log_max(WINDOW_LOG_MAX)?;
                    d.take(stop).read_to_end(&mut data)
                })
                .map_err(|e| bad(format!("zstd: {e}")))?;
            if data.len() as u64 > left {
                return Err(FormatError::TotalTooLarge {
                    index,
                    offset,
                    limit: self.limits.total_bytes,
                });
            }
            if data.len() != raw_len as usize {
                return Err(bad("decompressed size differs from the header's".into()));
            }
            data
        } else {
            if stored.len() as u64 > left {
                return Err(FormatError::TotalTooLarge {
                    index,
                    offset,
                    limit: self.limits.total_bytes,
                });
            }
            stored
        };
        self.sections = index;
        self.total += data.len() as u64;
        self.offset += (SECTION_HEADER + stored_len as usize) as u64;
        Ok(Some(Section {
            kind,
            index,
            offset,
            data,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(sections: &[(u32, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(&mut out, "numatrace test").unwrap();
        for (k, d) in sections {
            write_section(&mut out, *k, d).unwrap();
        }
        out
    }

    fn read_all(b: &[u8]) -> Result<(Vec<Section>, Option<u64>), FormatError> {
        let mut r = Reader::new(b)?;
        let mut v = Vec::new();
        while let Some(s) = r.next_section()? {
            v.push(s);
        }
        Ok((v, r.truncated_at))
    }

    #[test]
    fn round_trip_and_unknown_kinds_are_just_sections() {
        let b = file(&[(1, b"hello"), (999, b"from the future"), (2, &[7u8; 10000])]);
        let (s, cut) = read_all(&b).unwrap();
        assert_eq!(cut, None);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].data, b"hello");
        assert_eq!(s[1].kind, 999);
        assert_eq!(s[2].data.len(), 10000);
    }

    #[test]
    fn a_cut_file_reads_up_to_its_last_whole_section() {
        let mut b = Vec::new();
        write_header(&mut b, "numatrace test").unwrap();
        let mut ends = vec![b.len()];
        for (k, d) in [(1u32, &b"one"[..]), (2, b"two")] {
            write_section(&mut b, k, d).unwrap();
            ends.push(b.len());
        }
        for cut in 0..=b.len() {
            match read_all(&b[..cut]) {
                Err(FormatError::NotCapture) => assert!(cut < 8),
                Err(FormatError::Corrupted { .. }) => assert!(cut < ends[0]),
                Err(e) => panic!("cut at {cut}: {e}"),
                Ok((s, t)) => {
                    let whole = ends.iter().filter(|e| **e <= cut).count() - 1;
                    assert_eq!(s.len(), whole, "cut at {cut}");
                    assert_eq!(t.is_some(), !ends.contains(&cut), "cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let b = file(&[(1, b"payload payload payload")]);
        let mut flipped = b.clone();
        let last = flipped.len() - 3;
        flipped[last] ^= 0xff;
        assert!(matches!(
            read_all(&flipped),
            Err(FormatError::Corrupted { .. })
        ));
        let mut newer = b.clone();
        newer[8] = 9;
        assert!(matches!(
            read_all(&newer),
            Err(FormatError::NewerMajor(9, 0))
        ));
        assert!(matches!(
            read_all(b"#!/bin/sh\necho hi\n"),
            Err(FormatError::NotCapture)
        ));
        // A section claiming 4 GiB is refused before anything is allocated.
        let mut huge = b.clone();
        let at = 16 + "numatrace test".len() + 12;
        huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            read_all(&huge),
            Err(FormatError::Corrupted { .. })
        ));
    }
}
