//! The guest architectures: amd64 (x86-64) and arm64 (aarch64), each with its QEMU, machine,
//! console, Debian package architecture and Rust target.

use std::{fmt, str::FromStr};

/// An architecture numatrace is built for and boots guests of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    #[default]
    Amd64,
    Arm64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::Amd64, Arch::Arm64];

    /// Debian's name (`dpkg --print-architecture`, package indexes, .deb file names).
    pub fn debian(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The static (musl) Rust target the guests' binaries are built for.
    pub fn musl_target(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64-unknown-linux-musl",
            Arch::Arm64 => "aarch64-unknown-linux-musl",
        }
    }

    /// Rust's `target_arch` (what `file` and ELF headers call it, too).
    pub fn rust_arch(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }

    /// ELF `e_machine`.
    pub fn elf_machine(self) -> u16 {
        match self {
            Arch::Amd64 => 62,
            Arch::Arm64 => 183,
        }
    }

    /// The QEMU binary and the Debian package that has it.
    pub fn qemu(self) -> (&'static str, &'static str) {
        match self {
            Arch::Amd64 => ("qemu-system-x86_64", "qemu-system-x86"),
            Arch::Arm64 => ("qemu-system-aarch64", "qemu-system-arm"),
        }
    }

    /// The guest's serial console device.
    pub fn console(self) -> &'static str {
        match self {
            Arch::Amd64 => "ttyS0",
            Arch::Arm64 => "ttyAMA0",
        }
    }

    /// The architecture this program runs on.
    pub fn host() -> Arch {
        if cfg!(target_arch = "aarch64") {
            Arch::Arm64
        } else {
            Arch::Amd64
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.debian())
    }
}

impl FromStr for Arch {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "amd64" | "x86_64" | "x86-64" => Ok(Arch::Amd64),
            "arm64" | "aarch64" => Ok(Arch::Arm64),
            _ => Err(format!(
                "{s}: not an architecture numatrace builds for (amd64, arm64)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_both_ways() {
        for a in Arch::ALL {
            assert_eq!(a.debian().parse::<Arch>(), Ok(a));
            assert_eq!(a.rust_arch().parse::<Arch>(), Ok(a));
        }
        assert!("riscv64".parse::<Arch>().is_err());
    }
}
