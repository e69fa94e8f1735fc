//! Kernel versions: what the catalogue and the facts both speak of.

use serde::{Deserialize, Serialize};

/// `major.minor.patch` of the running kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KernelVersion {
    /// Parses the leading `x.y[.z]` of a release string such as `6.1.0-27-cloud-amd64`.
    pub fn parse(release: &str) -> Option<Self> {
        let mut nums = release
            .split(|c: char| !c.is_ascii_digit())
            .take(3)
            .map(|s| s.parse::<u32>().ok());
        let major = nums.next()??;
        let minor = nums.next()??;
        let patch = nums.next().flatten().unwrap_or(0);
        Some(Self {
            major,
            minor,
            patch,
        })
    }

    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }
}

impl std::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}
