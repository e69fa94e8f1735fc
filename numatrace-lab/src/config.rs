//! The kernel options numatrace needs, what a kernel without each loses, and the config fragment
//! that turns them all on (for `scripts/kconfig/merge_config.sh`).

use std::collections::BTreeMap;

/// One option numatrace needs.
pub struct Need {
    /// Without `CONFIG_`.
    pub option: &'static str,
    /// What its absence costs.
    pub costs: &'static str,
    /// Without it nothing could run in a lab guest.
    pub fatal: bool,
}

/// Every option, the fatal ones first.
pub const NEEDS: &[Need] = &[
    Need {
        option: "NUMA",
        costs: "no NUMA nodes: nothing to balance",
        fatal: true,
    },
    Need {
        option: "NUMA_BALANCING",
        costs: "no automatic NUMA balancing: nothing to trace",
        fatal: true,
    },
    Need {
        option: "BPF_SYSCALL",
        costs: "no BPF: no program loads",
        fatal: true,
    },
    Need {
        option: "PERF_EVENTS",
        costs: "no perf events: tracepoint programs cannot attach",
        fatal: true,
    },
    Need {
        option: "BLK_DEV_INITRD",
        costs: "no initramfs: the lab cannot start numatrace in the guest",
        fatal: true,
    },
    Need {
        option: "SERIAL_8250_CONSOLE",
        costs: "no serial console: the lab cannot read the guest",
        fatal: true,
    },
    Need {
        option: "MIGRATION",
        costs: "no page migration: hint faults are counted, nothing migrates",
        fatal: false,
    },
    Need {
        option: "BPF_JIT",
        costs: "programs run interpreted (slower) and fentry/fexit need the JIT",
        fatal: false,
    },
    Need {
        option: "DEBUG_INFO_BTF",
        costs: "no BTF: no fentry/fexit or tp_btf (seed 002's check), offsets from tracefs only",
        fatal: false,
    },
    Need {
        option: "FUNCTION_TRACER",
        costs: "no fentry/fexit (function hooks use kprobes if there are any)",
        fatal: false,
    },
    Need {
        option: "KPROBES",
        costs: "no kprobes: function hooks only by fentry",
        fatal: false,
    },
    Need {
        option: "KPROBE_EVENTS",
        costs: "no kprobe events: function hooks only by fentry",
        fatal: false,
    },
    Need {
        option: "TRANSPARENT_HUGEPAGE",
        costs: "no THP: seeds 001 and 004 cannot be checked, no THP counts",
        fatal: false,
    },
    Need {
        option: "MEMCG",
        costs: "no memory cgroups: no per-cgroup memory.stat to compare with",
        fatal: false,
    },
    Need {
        option: "DEBUG_FS",
        costs: "no debugfs: the scan tunables checks 002 and 003 shorten are out of reach",
        fatal: false,
    },
    Need {
        option: "SCHED_DEBUG",
        costs: "no sched debugfs: the scan tunables checks 002 and 003 shorten are out of reach",
        fatal: false,
    },
    Need {
        option: "IKCONFIG_PROC",
        costs: "no /proc/config.gz: a capture quotes the config only where \
                /boot/config-RELEASE exists (in lab guests it does)",
        fatal: false,
    },
    Need {
        option: "ACPI_HMAT",
        costs: "no HMAT: --slow-node is a plain third node, not a lower memory tier",
        fatal: false,
    },
];

/// Options the fragment also sets: what the needs above depend on in Kconfig.
const ALSO: &[&str] = &[
    "ACPI_NUMA",
    "X86_64_ACPI_NUMA",
    "NUMA_KEEP_MEMINFO",
    "BPF",
    "BPF_EVENTS",
    "FTRACE",
    "DYNAMIC_FTRACE",
    "DEBUG_INFO",
    "DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT",
    "MEMCG",
    "CGROUPS",
    "IKCONFIG",
    "SERIAL_8250",
    "DEVTMPFS",
];

/// A kernel config: option (without `CONFIG_`) to value, `y`, `m` or a string; an option
/// `# … is not set` or absent is off.
pub struct Config(BTreeMap<String, String>);

impl Config {
    pub fn parse(text: &str) -> Self {
        let mut m = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.trim().strip_prefix("CONFIG_") else {
                continue;
            };
            if let Some((k, v)) = rest.split_once('=') {
                if v != "n" {
                    m.insert(k.to_owned(), v.to_owned());
                }
            }
        }
        Self(m)
    }

    pub fn is_on(&self, option: &str) -> bool {
        self.0
            .get(option)
            .is_some_and(|v| !v.is_empty() && v != "n")
    }

    /// The needs this config leaves off.
    pub fn missing(&self) -> Vec<&'static Need> {
        NEEDS.iter().filter(|n| !self.is_on(n.option)).collect()
    }

    /// How many options it sets (0: not a config at all).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The fragment that turns every need on: `make defconfig`, then
/// `scripts/kconfig/merge_config.sh -m .config FRAGMENT && make olddefconfig`.
pub fn fragment() -> String {
    let mut out = String::from(
        "# numatrace's needs (numatrace lab --config-fragment): merge onto a defconfig with\n\
         #   scripts/kconfig/merge_config.sh -m .config THIS_FILE && make olddefconfig\n",
    );
    for n in NEEDS {
        out.push_str(&format!("# {}\nCONFIG_{}=y\n", without(n), n.option));
    }
    out.push_str("# what those depend on\n");
    for o in ALSO
        .iter()
        .filter(|o| !NEEDS.iter().any(|n| n.option == **o))
    {
        out.push_str(&format!("CONFIG_{o}=y\n"));
    }
    out
}

/// "without it: COSTS".
pub fn without(n: &Need) -> String {
    format!("without it: {}", n.costs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_off_are_named_with_their_cost() {
        let c = Config::parse(
            "# comment\nCONFIG_NUMA=y\n# CONFIG_NUMA_BALANCING is not set\nCONFIG_BPF_SYSCALL=y\n\
             CONFIG_PERF_EVENTS=y\nCONFIG_BLK_DEV_INITRD=y\nCONFIG_SERIAL_8250_CONSOLE=y\n\
             CONFIG_KPROBES=n\nCONFIG_LOCALVERSION=\"\"\n",
        );
        let missing: Vec<&str> = c.missing().iter().map(|n| n.option).collect();
        assert!(missing.contains(&"NUMA_BALANCING"));
        assert!(missing.contains(&"KPROBES"), "=n is off");
        assert!(!missing.contains(&"NUMA"));
        assert!(c.missing().iter().any(|n| n.fatal));
        assert!(Config::parse("not a config\n").is_empty());
    }

    #[test]
    fn the_fragment_turns_every_need_on() {
        let f = Config::parse(&fragment());
        assert!(f.missing().is_empty());
        assert!(f.is_on("ACPI_NUMA"));
    }
}
