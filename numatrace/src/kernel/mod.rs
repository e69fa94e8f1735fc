//! Reading the running kernel: facts for the plan, tracefs, capabilities, /proc/vmstat, the
//! machine-wide state a regression report quotes (`sysstate`), and
//! memory tiering (`tiering`), the layout the kernel states in /proc/kcore (`vmcoreinfo`), and
//! the catalogue of every hook the product uses with what each needs of a kernel.
pub mod btf;
pub mod caps;
pub mod catalogue;
pub mod facts;
pub mod mempolicy;
pub mod nodes;
pub mod preempt;
pub mod private_mount;
pub mod sysstate;
pub mod tiering;
pub mod tracefs;
pub mod tunables;
pub mod version;
pub mod vmcoreinfo;
pub mod vmstat;

use std::{fs::File, io::Read as _, path::Path};

/// A /proc file read whole in one read(2) per 4 KiB page of output (a seq_file's buffer) and the
/// end-of-file read. `fs::read_to_string` sees a size of 0 and probes from 32 bytes up,
/// doubling: nine reads of /proc/vmstat, each of which makes the kernel sum every counter over
/// every CPU again (its seq_file's `start`). (sysfs files report 4 096 and read the same way.)
pub fn read_text(path: impl AsRef<Path>) -> std::io::Result<String> {
    let mut text = String::with_capacity(16 * 1024);
    File::open(path)?.read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::read_text;

    /// Whole, past the first 16 KiB too, and as `fs::read_to_string` reads it.
    #[test]
    fn read_text_reads_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let text: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        assert!(text.len() > 16 * 1024);
        std::fs::write(&path, &text).unwrap();
        assert_eq!(read_text(&path).unwrap(), text);
        let vmstat = read_text("/proc/vmstat").unwrap();
        assert!(vmstat.starts_with("nr_free_pages "), "{vmstat:.40}");
        assert!(vmstat.ends_with('\n'));
        assert!(read_text(dir.path().join("missing")).is_err());
    }
}
