//! Strings from `/proc` or a capture, rendered for a terminal or a plain-text file. A process
//! names itself (comm), a cgroup path, a mapping or a stranger's capture can hold escape
//! sequences; numatrace runs as root and prints to an admin's terminal, so every such string is
//! shown through [`Escaped`] (or [`escape`]) in text output. JSON output keeps the exact string
//! (serde escapes it there).
//!
//! What is escaped, visibly and unambiguously (the backslash itself is doubled):
//! - C0 controls and DEL: `\n`, `\r`, `\t`, else `\x1b` (two hex digits);
//! - C1 controls (U+0080-U+009F; some terminals take U+009B as CSI), the bidirectional
//!   overrides, embeddings, isolates and marks (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F,
//!   U+061C), and the line and paragraph separators (U+2028, U+2029): `\u{202e}`;
//! - in bytes ([`EscapedBytes`]), each byte of invalid UTF-8: `\xff`.

use std::{
    borrow::Cow,
    fmt::{self, Write as _},
};

/// Whether `c` is shown escaped.
pub fn needs_escape(c: char) -> bool {
    c == '\\'
        || c.is_control()
        || matches!(
            c,
            '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{061c}'
                | '\u{2028}'
                | '\u{2029}'
        )
}

fn write_escaped(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    let mut clean = 0;
    for (i, c) in s.char_indices() {
        if !needs_escape(c) {
            continue;
        }
        out.write_str(&s[clean..i])?;
        match c {
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c if c.is_ascii() => write!(out, "\\x{:02x}", u32::from(c))?,
            c => write!(out, "\\u{{{:x}}}", u32::from(c))?,
        }
        clean = i + c.len_utf8();
    }
    out.write_str(&s[clean..])
}

/// `s` as [`Escaped`] shows it; borrowed when nothing needs escaping.
pub fn escape(s: &str) -> Cow<'_, str> {
    if s.chars().any(needs_escape) {
        let mut out = String::with_capacity(s.len() + 8);
        // Writing to a String cannot fail.
        let _ = write_escaped(&mut out, s);
        Cow::Owned(out)
    } else {
        Cow::Borrowed(s)
    }
}

/// Displays a string with control characters, bidi controls and backslashes escaped.
/// Width, fill and alignment (`{:<24}`) apply to the escaped text.
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.width().is_some() || f.precision().is_some() {
            f.pad(&escape(self.0))
        } else {
            write_escaped(f, self.0)
        }
    }
}

/// Displays bytes as [`Escaped`] does their UTF-8, each byte of invalid UTF-8 as `\xNN`.
#[derive(Clone, Copy, Debug)]
pub struct EscapedBytes<'a>(pub &'a [u8]);

impl fmt::Display for EscapedBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        for chunk in self.0.utf8_chunks() {
            write_escaped(&mut out, chunk.valid())?;
            for b in chunk.invalid() {
                write!(out, "\\x{b:02x}")?;
            }
        }
        f.pad(&out)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The inverse of the escaping, to show that it loses nothing.
    fn unescape(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut it = s.chars().peekable();
        while let Some(c) = it.next() {
            if c != '\\' {
                let mut b = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                continue;
            }
            match it.next().expect("a lone backslash") {
                '\\' => out.push(b'\\'),
                'n' => out.push(b'\n'),
                'r' => out.push(b'\r'),
                't' => out.push(b'\t'),
                'x' => {
                    let h: String = it.by_ref().take(2).collect();
                    out.push(u8::from_str_radix(&h, 16).expect("two hex digits"));
                }
                'u' => {
                    assert_eq!(it.next(), Some('{'));
                    let h: String = it.by_ref().take_while(|&c| c != '}').collect();
                    let c = char::from_u32(u32::from_str_radix(&h, 16).unwrap()).unwrap();
                    let mut b = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                }
                other => panic!("unknown escape \\{other}"),
            }
        }
        out
    }

    /// Nothing a terminal acts on, or that reorders the text, is left.
    fn inert(s: &str) -> bool {
        s.chars().all(|c| c == '\\' || !needs_escape(c))
    }

    #[test]
    fn escapes_what_a_terminal_acts_on() {
        assert_eq!(escape("\x1b]0;owned\x07"), "\\x1b]0;owned\\x07");
        assert_eq!(escape("\x1b[2J"), "\\x1b[2J");
        assert_eq!(escape("a\nb\rc\td\x7f"), "a\\nb\\rc\\td\\x7f");
        assert_eq!(escape("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(escape("evil\u{202e}fdp.exe"), "evil\\u{202e}fdp.exe");
        assert_eq!(
            escape("\u{2066}x\u{2069}\u{2028}"),
            "\\u{2066}x\\u{2069}\\u{2028}"
        );
        // systemd's own escapes stay readable and tell themselves apart from ours.
        assert_eq!(
            escape("/system.slice/system-systemd\\x2dfsck.slice"),
            "/system.slice/system-systemd\\\\x2dfsck.slice"
        );
    }

    #[test]
    fn plain_text_is_borrowed_and_unchanged() {
        for s in [
            "",
            "worker-a",
            "/app.slice",
            "[heap]",
            "héllo wörld",
            "名前",
            "0-3,8",
        ] {
            assert!(matches!(escape(s), Cow::Borrowed(_)), "{s}");
            assert_eq!(Escaped(s).to_string(), s);
        }
    }

    #[test]
    fn display_pads_the_escaped_text() {
        assert_eq!(format!("{:<6}|", Escaped("a\x1b")), "a\\x1b |");
        assert_eq!(format!("{:>4}|", Escaped("ab")), "  ab|");
        assert_eq!(format!("{}", Escaped("\x07")), "\\x07");
    }

    #[test]
    fn invalid_utf8_shows_its_bytes() {
        assert_eq!(
            EscapedBytes(b"ok\xff\xfe\x1b").to_string(),
            "ok\\xff\\xfe\\x1b"
        );
        assert_eq!(EscapedBytes("é\\".as_bytes()).to_string(), "é\\\\");
        assert_eq!(unescape(&EscapedBytes(b"a\xc3(b").to_string()), b"a\xc3(b");
    }

    proptest! {
        #[test]
        fn output_has_no_control_character_and_round_trips(s in any::<String>()) {
            let e = Escaped(&s).to_string();
            prop_assert!(inert(&e), "{e:?}");
            let raw = ['\n', '\r', '\t', '\x1b', '\x07', '\u{9b}'];
            prop_assert!(!e.contains(raw), "{:?}", e);
            prop_assert_eq!(unescape(&e), s.as_bytes());
            prop_assert_eq!(escape(&s), e);
        }

        #[test]
        fn control_heavy_strings_too(
            s in proptest::collection::vec(
                prop_oneof![
                    (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap()),
                    (0x7fu32..0xa0).prop_map(|c| char::from_u32(c).unwrap()),
                    (0x2028u32..0x2070).prop_filter_map("a char", char::from_u32),
                    Just('\\'),
                    any::<char>(),
                ],
                0..64,
            ).prop_map(|v| v.into_iter().collect::<String>())
        ) {
            let e = Escaped(&s).to_string();
            prop_assert!(inert(&e), "{e:?}");
            prop_assert_eq!(unescape(&e), s.as_bytes());
        }

        #[test]
        fn any_bytes_render_inert_and_round_trip(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let e = EscapedBytes(&b).to_string();
            prop_assert!(inert(&e), "{e:?}");
            prop_assert_eq!(unescape(&e), b);
        }
    }
}
