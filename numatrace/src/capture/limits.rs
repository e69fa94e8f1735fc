//! What a capture may hold before `report` refuses it: captures come from strangers, so every
//! size a file claims or a compressor expands is bounded here, each refused in one line that
//! names its limit (the values and why: see the capture module doc).
//!
//! A section's JSON is walked once with [`scan`] before it is parsed: the walk allocates
//! nothing, counts what a parse would build (tasks, VMAs, events, JSON values) and measures
//! every string by the key it sits under, so a section of a million tiny task records is
//! refused before a million `TaskRecord`s exist.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use thiserror::Error;

use super::format::{FormatError, Limits, Reader, size};

/// Every limit a reader applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Decompressed bytes of one section.
    pub section_bytes: u64,
    /// Decompressed bytes of all sections: this, or `total_ratio` times the file's size when
    /// that is larger.
    pub total_bytes: u64,
    pub total_ratio: u64,
    pub sections: u64,
    /// Tasks in one snapshot section, distinct tasks over the capture, and task and VMA
    /// records in all snapshots (what parsing costs: a few microseconds each).
    pub tasks: u64,
    pub distinct_tasks: u64,
    pub records: u64,
    /// VMA records in one snapshot section.
    pub vmas: u64,
    pub samples: u64,
    /// Event records in one section, and over the capture.
    pub section_events: u64,
    pub events: u64,
    /// JSON values (numbers, strings, arrays, objects...) in one section.
    pub values: u64,
    /// Longest string by what it is.
    pub comm_bytes: u64,
    pub hostname_bytes: u64,
    pub path_bytes: u64,
    pub arg_bytes: u64,
    pub string_bytes: u64,
}

pub const CAPS: Caps = Caps {
    section_bytes: 64 << 20,
    total_bytes: 2 << 30,
    total_ratio: 16,
    sections: 1 << 21,
    tasks: 1 << 16,
    distinct_tasks: 1 << 17,
    records: 1 << 23,
    vmas: 1 << 18,
    samples: 1 << 18,
    section_events: 1 << 20,
    events: 1 << 32,
    values: 1 << 23,
    comm_bytes: 64,
    hostname_bytes: 256,
    path_bytes: 64 << 10,
    arg_bytes: 1 << 20,
    string_bytes: 1 << 20,
};

impl Caps {
    /// The container's limits for a file of `file_bytes` bytes.
    pub fn format(&self, file_bytes: u64) -> Limits {
        Limits {
            section_bytes: self.section_bytes,
            total_bytes: self
                .total_bytes
                .max(file_bytes.saturating_mul(self.total_ratio)),
            sections: self.sections,
        }
    }
}

/// A limit a capture went past.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Refusal {
    #[error("{what} past the limit of {limit} per section")]
    Count { what: &'static str, limit: u64 },
    #[error("{what} past the limit of {limit} per capture")]
    Total { what: &'static str, limit: u64 },
    #[error("a `{key}` string of {bytes} bytes, past the limit of {}", size(*limit))]
    String {
        key: &'static str,
        bytes: u64,
        limit: u64,
    },
}

/// What a section holds, as [`scan`] counted it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Elements of the top-level array (events in an events section), if it is one.
    pub top_len: Option<u64>,
    pub tasks: u64,
    pub vmas: u64,
    pub values: u64,
}

/// Walks `json` without building it; `Ok(Err(_))` names a limit it goes past, `Err(_)` is
/// JSON that does not parse (or nests deeper than serde_json's 128 levels).
pub fn scan(json: &[u8], caps: &Caps) -> Result<Result<Tally, Refusal>, serde_json::Error> {
    let mut st = State {
        caps,
        tally: Tally::default(),
        refused: None,
    };
    let mut de = serde_json::Deserializer::from_slice(json);
    let r = Walk {
        st: &mut st,
        ctx: Ctx::Top,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    match (st.refused, r) {
        (Some(refusal), _) => Ok(Err(refusal)),
        (None, Err(e)) => Err(e),
        (None, Ok(())) => Ok(Ok(st.tally)),
    }
}

struct State<'c> {
    caps: &'c Caps,
    tally: Tally,
    refused: Option<Refusal>,
}

impl State<'_> {
    fn refuse<E: de::Error>(&mut self, r: Refusal) -> E {
        self.refused = Some(r);
        E::custom("refused")
    }

    /// One more JSON value.
    fn value<E: de::Error>(&mut self) -> Result<(), E> {
        self.tally.values += 1;
        if self.tally.values > self.caps.values {
            return Err(self.refuse(Refusal::Count {
                what: "JSON values",
                limit: self.caps.values,
            }));
        }
        Ok(())
    }

    /// One more element of an array that lists tasks, VMAs or events.
    fn element<E: de::Error>(&mut self, of: Ctx) -> Result<(), E> {
        let (c, t) = (self.caps, &mut self.tally);
        let (n, limit, what) = match of {
            Ctx::Tasks => (&mut t.tasks, c.tasks, "tasks"),
            Ctx::VmaList => (&mut t.vmas, c.vmas, "VMA records"),
            Ctx::Top => (t.top_len.get_or_insert(0), c.section_events, "events"),
            _ => return Ok(()),
        };
        *n += 1;
        if *n > limit {
            return Err(self.refuse(Refusal::Count { what, limit }));
        }
        Ok(())
    }
}

/// Where a value sits: what the key above it (or the section, for the top level) says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctx {
    Top,
    Tasks,
    Vmas,
    VmaList,
    Comm,
    Hostname,
    Path(&'static str),
    Args(&'static str),
    Other,
}

impl Ctx {
    fn of_key(k: &str) -> Self {
        match k {
            "tasks" => Self::Tasks,
            "vmas" => Self::Vmas,
            "comm" | "comm_filter" => Self::Comm,
            "hostname" => Self::Hostname,
            "cgroup" => Self::Path("cgroup"),
            "cgroup_filter" => Self::Path("cgroup_filter"),
            "mapping" => Self::Path("mapping"),
            "path" => Self::Path("path"),
            "command_line" => Self::Args("command_line"),
            "command" => Self::Args("command"),
            _ => Self::Other,
        }
    }

    /// The context of this value's elements (array items, object values).
    fn inner(self) -> Self {
        match self {
            Self::Vmas => Self::VmaList,
            Self::Args(k) => Self::Args(k),
            _ => Self::Other,
        }
    }

    fn string_limit(self, c: &Caps) -> (&'static str, u64) {
        match self {
            Self::Comm => ("comm", c.comm_bytes),
            Self::Hostname => ("hostname", c.hostname_bytes),
            Self::Path(k) => (k, c.path_bytes),
            Self::Args(k) => (k, c.arg_bytes),
            _ => ("string", c.string_bytes),
        }
    }
}

struct Walk<'s, 'c> {
    st: &'s mut State<'c>,
    ctx: Ctx,
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Walk<'_, '_> {
    fn string<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.st.value()?;
        let (key, limit) = self.ctx.string_limit(self.st.caps);
        let bytes = s.len() as u64;
        if bytes > limit {
            return Err(self.st.refuse(Refusal::String { key, bytes, limit }));
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.st.value()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.st.value()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.st.value()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.st.value()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.st.value()
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.string(s)
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<(), E> {
        self.st.value()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
        self.st.value()?;
        // Each element is one of what this array lists (tasks, VMAs, events...).
        let each = match self.ctx {
            Ctx::Top | Ctx::Tasks | Ctx::VmaList => self.ctx,
            _ => Ctx::Other,
        };
        let inner = self.ctx.inner();
        // The walk builds nothing, so counting each element after it is read still stops
        // at the limit.
        while let Some(()) = a.next_element_seed(Walk {
            st: &mut *self.st,
            ctx: inner,
        })? {
            if each != Ctx::Other {
                self.st.element(each)?;
            }
        }
        if self.ctx == Ctx::Top {
            self.st.tally.top_len.get_or_insert(0);
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
        self.st.value()?;
        let inner = self.ctx.inner();
        while let Some(ctx) = a.next_key_seed(Key)? {
            {
                let (_, limit) = Ctx::Other.string_limit(self.st.caps);
                if ctx.1 > limit {
                    return Err(self.st.refuse(Refusal::String {
                        key: "key",
                        bytes: ctx.1,
                        limit,
                    }));
                }
            }
            let ctx = if inner == Ctx::Other { ctx.0 } else { inner };
            let st = &mut *self.st;
            a.next_value_seed(Walk { st, ctx })?;
        }
        Ok(())
    }
}

/// An object key: the context of its value and its length, without allocating.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = (Ctx, u64);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(Ctx, u64), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = (Ctx, u64);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(Ctx, u64), E> {
        Ok((Ctx::of_key(s), s.len() as u64))
    }
}

// Here rather than in format.rs, so that the container format does not import its caps back.
impl<R: std::io::Read> Reader<R> {
    /// A reader with the capture module's default limits.
    pub fn new(r: R) -> Result<Self, FormatError> {
        Self::with_limits(r, CAPS.format(0))
    }
}
