//! tracefs: where it is mounted (mounting it when it is not), and tracepoint `format` files.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TracefsError {
    #[error("tracefs is not mounted and mounting it at {path} failed: {source}")]
    Mount {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Where tracefs is, and whether this call mounted it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracefs {
    pub root: PathBuf,
    pub mounted_by_us: bool,
}

impl Tracefs {
    /// Finds tracefs, mounting it at /sys/kernel/tracing when no mount exists (as `perf` does;
    /// it is left mounted, which changes nothing in what the kernel traces).
    pub fn find_or_mount() -> Result<Self, TracefsError> {
        for c in CANDIDATES {
            if Path::new(c).join("events").is_dir() {
                return Ok(Self {
                    root: c.into(),
                    mounted_by_us: false,
                });
            }
        }
        let root = PathBuf::from(CANDIDATES[0]);
        mount_tracefs(&root).map_err(|source| TracefsError::Mount {
            path: root.clone(),
            source,
        })?;
        Ok(Self {
            root,
            mounted_by_us: true,
        })
    }

    pub fn event_dir(&self, category: &str, name: &str) -> PathBuf {
        self.root.join("events").join(category).join(name)
    }

    /// The event's format, or `None` when this kernel has no such tracepoint.
    pub fn format(&self, category: &str, name: &str) -> Result<Option<Format>, TracefsError> {
        let path = self.event_dir(category, name).join("format");
        match fs::read_to_string(&path) {
            Ok(text) => Ok(Some(Format::parse(&text))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(TracefsError::Read { path, source }),
        }
    }
}

fn mount_tracefs(at: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    let target = CString::new(at.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: all pointers are valid NUL-terminated strings for the duration of the call.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One field of a tracepoint record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Field {
    pub offset: u32,
    pub size: u32,
    pub signed: bool,
}

/// The fields of a tracepoint record by name, parsed from its tracefs `format` file.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Format {
    pub id: Option<u32>,
    pub fields: BTreeMap<String, Field>,
}

impl Format {
    /// Parses lines like
    /// `field:unsigned long vm_start;<TAB>offset:16;<TAB>size:8;<TAB>signed:0;`.
    pub fn parse(text: &str) -> Self {
        let mut out = Self::default();
        for line in text.lines() {
            let line = line.trim();
            if let Some(id) = line.strip_prefix("ID:") {
                out.id = id.trim().parse().ok();
                continue;
            }
            let Some(rest) = line.strip_prefix("field:") else {
                continue;
            };
            let mut parts = rest.split(';').map(str::trim);
            let Some(decl) = parts.next() else { continue };
            let mut offset = None;
            let mut size = None;
            let mut signed = false;
            for p in parts {
                if let Some(v) = p.strip_prefix("offset:") {
                    offset = v.parse().ok();
                } else if let Some(v) = p.strip_prefix("size:") {
                    size = v.parse().ok();
                } else if let Some(v) = p.strip_prefix("signed:") {
                    signed = v == "1";
                }
            }
            // The name is the last word of the declaration, without any array suffix.
            let name = decl
                .rsplit(|c: char| c.is_whitespace() || c == '*')
                .next()
                .unwrap_or(decl);
            let name = name.split('[').next().unwrap_or(name);
            if let (Some(offset), Some(size)) = (offset, size) {
                out.fields.insert(
                    name.to_owned(),
                    Field {
                        offset,
                        size,
                        signed,
                    },
                );
            }
        }
        out
    }

    /// Offset of the first of `names` that exists with the given size.
    pub fn offset(&self, names: &[&str], size: u32) -> Option<u32> {
        names
            .iter()
            .filter_map(|n| self.fields.get(*n))
            .find(|f| f.size == size)
            .map(|f| f.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // As printed by this machine's 6.18 kernel.
    const SKIP_VMA: &str = "name: sched_skip_vma_numa
ID: 312
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned long numa_scan_offset;\toffset:8;\tsize:8;\tsigned:0;
\tfield:unsigned long vm_start;\toffset:16;\tsize:8;\tsigned:0;
\tfield:unsigned long vm_end;\toffset:24;\tsize:8;\tsigned:0;
\tfield:enum numa_vmaskip_reason reason;\toffset:32;\tsize:4;\tsigned:0;

print fmt: \"numa_scan_offset=%lX\", REC->numa_scan_offset
";

    #[test]
    fn parses_fields_and_id() {
        let f = Format::parse(SKIP_VMA);
        assert_eq!(f.id, Some(312));
        assert_eq!(f.offset(&["reason"], 4), Some(32));
        assert_eq!(f.offset(&["vm_start"], 8), Some(16));
        assert_eq!(f.offset(&["common_pid"], 4), Some(4));
        assert!(f.fields["common_pid"].signed);
        assert_eq!(f.fields.len(), 8);
    }

    #[test]
    fn array_and_pointer_names() {
        let f = Format::parse(
            "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:void * ptr;\toffset:24;\tsize:8;\tsigned:0;",
        );
        assert_eq!(f.offset(&["comm"], 16), Some(8));
        assert_eq!(f.offset(&["ptr"], 8), Some(24));
    }

    #[test]
    fn offset_checks_size_and_alternatives() {
        let f = Format::parse(SKIP_VMA);
        assert_eq!(f.offset(&["reason"], 8), None, "wrong size is not a match");
        assert_eq!(f.offset(&["nope", "vm_end"], 8), Some(24));
        assert_eq!(f.offset(&["nope"], 8), None);
    }
}
