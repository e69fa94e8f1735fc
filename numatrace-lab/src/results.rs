//! What a lab guest sends back on its second serial port (ttyS1, raw mode): named files, each
//! `NUMATRACE-LAB FILE <name> <length>\n<bytes>\n`, then `NUMATRACE-LAB END\n`. The console
//! (ttyS0) stays for the kernel and progress; nothing it prints can corrupt a file.

use std::io::Write;

use anyhow::{Context as _, Result, bail};

const FILE: &str = "NUMATRACE-LAB FILE ";
const END: &[u8] = b"NUMATRACE-LAB END\n";

/// Largest file a guest may send (a capture of a long run stays far below).
pub const MAX_FILE: usize = 1 << 30;

/// A file name the host will write under its output directory: letters, digits, `.`, `_`, `-`,
/// not starting with a dot, at most 100 bytes.
pub fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
}

/// Writes one file to the stream.
pub fn send(w: &mut dyn Write, name: &str, bytes: &[u8]) -> Result<()> {
    if !plain_name(name) {
        bail!("not a plain file name: {name:?}");
    }
    writeln!(w, "{FILE}{name} {}", bytes.len())?;
    w.write_all(bytes)?;
    w.write_all(b"\n")?;
    w.flush()?;
    Ok(())
}

/// Ends the stream: the host knows nothing was cut off.
pub fn end(w: &mut dyn Write) -> Result<()> {
    w.write_all(END)?;
    w.flush()?;
    Ok(())
}

/// What came back: the files in order, and whether the stream ended properly.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Received {
    pub files: Vec<(String, Vec<u8>)>,
    pub complete: bool,
}

impl Received {
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice())
    }
}

/// Reads a stream; a damaged one is an error, a cut-off one is `complete: false`.
pub fn receive(mut s: &[u8]) -> Result<Received> {
    let mut r = Received::default();
    loop {
        if s.is_empty() {
            return Ok(r);
        }
        if s.starts_with(END) {
            r.complete = true;
            return Ok(r);
        }
        let Some(nl) = s.iter().position(|c| *c == b'\n') else {
            return Ok(r);
        };
        let header = std::str::from_utf8(&s[..nl]).context("a damaged header")?;
        let rest = header
            .strip_prefix(FILE)
            .with_context(|| format!("not a file header: {:.60}", header.escape_debug()))?;
        let (name, len) = rest.rsplit_once(' ').context("a header without a length")?;
        let len: usize = len.parse().context("a header's length")?;
        if !plain_name(name) || len > MAX_FILE {
            bail!("a header out of bounds: {:.60}", header.escape_debug());
        }
        s = &s[nl + 1..];
        if s.len() < len + 1 {
            // Cut off mid-file: the guest died while sending.
            return Ok(r);
        }
        if s[len] != b'\n' {
            bail!("{name}: the stream lost its framing");
        }
        r.files.push((name.to_owned(), s[..len].to_vec()));
        s = &s[len + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_round_trip_and_damage_is_seen() {
        let mut w = Vec::new();
        send(&mut w, "stdout", b"line\nNUMATRACE-LAB END\n").unwrap();
        send(&mut w, "a.ntrace", &[0, 1, 2, b'\n']).unwrap();
        assert!(send(&mut w, "../x", b"").is_err());
        assert!(send(&mut w, ".hidden", b"").is_err());
        let cut = receive(&w).unwrap();
        assert!(!cut.complete);
        assert_eq!(cut.files.len(), 2);
        end(&mut w).unwrap();
        let r = receive(&w).unwrap();
        assert!(r.complete);
        assert_eq!(r.get("stdout"), Some(&b"line\nNUMATRACE-LAB END\n"[..]));
        assert_eq!(r.get("a.ntrace"), Some(&[0, 1, 2, b'\n'][..]));
        // Cut mid-file: what came whole is kept.
        let r = receive(&w[..w.len() - 30]).unwrap();
        assert_eq!((r.files.len(), r.complete), (1, false));
        assert!(receive(b"garbage\n").is_err());
        assert!(receive(b"NUMATRACE-LAB FILE x 99999999999\n").is_err());
    }
}
