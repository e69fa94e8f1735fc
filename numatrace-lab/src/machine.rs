//! The guest machine: QEMU's command line for N nodes with CPUs (distance 20 between them) and
//! optionally a CPU-less node the ACPI HMAT describes as slower, and a boot that reads the serial
//! console as it comes, with a deadline, and never leaves QEMU running.

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::arch::Arch;

/// How QEMU runs the guest's vCPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation (`-cpu host`).
    Kvm,
    /// One host thread per vCPU (TCG; the default without KVM).
    Tcg,
    /// All vCPUs on one thread, where emulated cross-modifying code is coherent (the retry
    /// after a text-patch flake).
    TcgSingle,
    /// One thread, guest time counting executed instructions (`-icount shift=N`: 2^N ns per
    /// instruction, no sleeping, no alignment with the host clock), so that what the guest
    /// measures in nanoseconds is a count of instructions and repeats from run to run.
    Icount(u8),
}

/// A guest's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// Nodes with CPUs and memory.
    pub nodes: u32,
    /// vCPUs, spread over the nodes in blocks (at least one per node).
    pub cpus: u32,
    /// Memory of each node with CPUs, MiB.
    pub node_mib: u64,
    /// A CPU-less node of this many MiB, slower (HMAT: latency 4x, bandwidth 1/4 of local):
    /// kernels that place boot-time nodes in memory tiers by HMAT (about 6.10+) put it in a tier
    /// of its own, which memory tiering promotes from and demotion demotes to.
    pub slow_mib: Option<u64>,
    pub accel: Accel,
    /// amd64: QEMU's `pc` machine (ACPI: SRAT, SLIT, HMAT). arm64: `virt`, booted without
    /// firmware, so the kernel reads its nodes and distances from the device tree, which has no
    /// HMAT: no slow node there.
    pub arch: Arch,
}

impl Machine {
    /// The test harness's guest: two nodes with a CPU and 1 GiB each, a slow 512 MiB third.
    pub fn harness(accel: Accel) -> Self {
        Self::harness_for(Arch::Amd64, accel)
    }

    /// The harness's guest on `arch` (arm64: no slow third node, see [`Machine::arch`]).
    pub fn harness_for(arch: Arch, accel: Accel) -> Self {
        Self {
            nodes: 2,
            cpus: 2,
            node_mib: 1024,
            slow_mib: (arch == Arch::Amd64).then_some(512),
            accel,
            arch,
        }
    }

    /// Nodes in all (the slow one included).
    pub fn node_count(&self) -> u32 {
        self.nodes + u32::from(self.slow_mib.is_some())
    }

    pub fn check(&self) -> Result<()> {
        if self.nodes == 0 || self.nodes > 16 {
            bail!("--nodes: 1 to 16 nodes with CPUs");
        }
        if self.cpus < self.nodes || self.cpus > 64 {
            bail!("--cpus: at least one per node ({}), at most 64", self.nodes);
        }
        if self.node_mib < 128 || self.slow_mib.is_some_and(|m| m < 128) {
            bail!("memory per node: at least 128 MiB");
        }
        if self.arch == Arch::Arm64 && self.slow_mib.is_some() {
            bail!(
                "--slow-node: arm64 guests boot without firmware, so without ACPI HMAT to describe \
                 a slower node"
            );
        }
        Ok(())
    }

    /// `-machine`, `-m`, `-smp`, the memory backends and `-numa` options.
    pub fn topology(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |s: String| a.push(s);
        let total = self.node_mib * u64::from(self.nodes) + self.slow_mib.unwrap_or(0);
        if self.arch == Arch::Arm64 {
            push("-machine".into());
            push("virt".into());
        } else if self.slow_mib.is_some() {
            push("-machine".into());
            push("hmat=on".into());
        }
        push("-m".into());
        push(format!("{total}M"));
        push("-smp".into());
        push(self.cpus.to_string());
        let per = self.cpus / self.nodes;
        for n in 0..self.nodes {
            let first = n * per;
            // The last node takes what does not divide evenly.
            let last = if n + 1 == self.nodes {
                self.cpus - 1
            } else {
                first + per - 1
            };
            push("-object".into());
            push(format!(
                "memory-backend-ram,id=m{n},size={}M",
                self.node_mib
            ));
            push("-numa".into());
            push(if first == last {
                format!("node,nodeid={n},cpus={first},memdev=m{n}")
            } else {
                format!("node,nodeid={n},cpus={first}-{last},memdev=m{n}")
            });
        }
        let slow = self.nodes;
        if let Some(mib) = self.slow_mib {
            push("-object".into());
            push(format!("memory-backend-ram,id=m{slow},size={mib}M"));
            push("-numa".into());
            push(format!("node,nodeid={slow},memdev=m{slow},initiator=0"));
        }
        for src in 0..self.node_count() {
            for dst in src + 1..self.node_count() {
                let d = if self.slow_mib.is_some() && dst == slow {
                    30
                } else {
                    20
                };
                push("-numa".into());
                push(format!("dist,src={src},dst={dst},val={d}"));
            }
        }
        if self.slow_mib.is_some() {
            for initiator in 0..self.nodes {
                for target in 0..self.node_count() {
                    let (latency, bandwidth) = match (initiator == target, target == slow) {
                        (true, _) => (10, "8G"),
                        (false, true) => (40, "2G"),
                        (false, false) => (20, "4G"),
                    };
                    push("-numa".into());
                    push(format!(
                        "hmat-lb,initiator={initiator},target={target},hierarchy=memory,\
                         data-type=access-latency,latency={latency}"
                    ));
                    push("-numa".into());
                    push(format!(
                        "hmat-lb,initiator={initiator},target={target},hierarchy=memory,\
                         data-type=access-bandwidth,bandwidth={bandwidth}"
                    ));
                }
            }
        }
        a
    }

    fn accel_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Accel::Icount(shift) = self.accel {
            a.push("-icount".to_owned());
            a.push(format!("shift={shift},sleep=off,align=off"));
        }
        // arm64's `max` emulates pointer authentication with QARMA, which costs TCG more
        // than the whole rest of a hint fault; the implementation-defined algorithm is cheap.
        // No LPA2, as on the arm64 servers people run (Graviton2/3, Ampere Altra): a kernel
        // built for 52-bit VA (Debian's 6.12 and 7.x) then runs with 48 bits and a negative
        // memstart_addr, the case a page's node is hardest to get right in.
        let max = match self.arch {
            Arch::Amd64 => "max",
            Arch::Arm64 => "max,pauth-impdef=on,lpa2=off",
        };
        let (accel, cpu) = match self.accel {
            Accel::Kvm => ("kvm", "host"),
            Accel::Tcg => ("tcg,thread=multi", max),
            Accel::TcgSingle | Accel::Icount(_) => ("tcg,thread=single", max),
        };
        a.extend(["-accel", accel, "-cpu", cpu].map(String::from));
        a
    }
}

/// What a boot is given besides the machine.
pub struct Boot<'a> {
    pub kernel: &'a Path,
    pub initrd: &'a Path,
    /// The kernel command line.
    pub append: &'a str,
    /// A guest that has not powered off by then is killed.
    pub timeout: Duration,
    /// The guest's second serial port (ttyS1) is written to this file.
    pub data: Option<PathBuf>,
    /// Killed (outcome `NoSign`) if the console has not shown this text by then: how a KVM
    /// that does not really boot guests is told apart quickly.
    pub sign: Option<(&'a str, Duration)>,
}

/// How a boot ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// QEMU exited 0 (the guest powered off, or rebooted with `-no-reboot`).
    Exited,
    /// QEMU exited otherwise.
    Failed(String),
    TimedOut(Duration),
    /// Ctrl-C or SIGTERM (see [`crate::interrupt`]).
    Interrupted,
    NoSign,
}

pub struct Booted {
    /// The serial console, every line.
    pub console: String,
    pub outcome: Outcome,
}

/// QEMU, killed and reaped however the boot ends (an error, a panic, an interrupt).
struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// The console kept in memory (and in the log) at most.
const MAX_CONSOLE: usize = 16 << 20;

/// The QEMU binary for x86-64 guests.
pub const QEMU: &str = "qemu-system-x86_64";

/// A one-line error when the amd64 QEMU is not installed.
pub fn qemu_present() -> Result<()> {
    qemu_present_for(Arch::Amd64)
}

/// A one-line error when `arch`'s QEMU is not installed.
pub fn qemu_present_for(arch: Arch) -> Result<()> {
    let (qemu, package) = arch.qemu();
    match Command::new(qemu)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(_) => Ok(()),
        Err(_) => bail!(
            "{qemu} is not installed: install Debian's {package} \
             (sudo apt-get install --no-install-recommends {package})"
        ),
    }
}

impl Machine {
    /// Boots `b`, handing each console line to `on_line` as it arrives.
    pub fn boot(&self, b: &Boot, on_line: &mut dyn FnMut(&str)) -> Result<Booted> {
        qemu_present_for(self.arch)?;
        let qemu_bin = self.arch.qemu().0;
        let mut qemu = Command::new(qemu_bin);
        qemu.args(self.accel_args())
            .args(self.topology())
            .arg("-kernel")
            .arg(b.kernel)
            .arg("-initrd")
            .arg(b.initrd)
            .args([
                "-nographic",
                "-no-reboot",
                "-nodefaults",
                "-serial",
                "mon:stdio",
            ]);
        if let Some(data) = &b.data {
            qemu.arg("-serial").arg(format!("file:{}", data.display()));
        }
        // Its own process group, so that Ctrl-C reaches only us (we kill it and clean up), and
        // killed by the kernel if we die without that chance.
        use std::os::unix::process::CommandExt as _;
        qemu.process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            qemu.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = qemu
            .arg("-append")
            .arg(b.append)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {qemu_bin}"))?;
        let mut qemu = Qemu(child);
        let (tx, rx) = mpsc::channel::<String>();
        let stdout = qemu.0.stdout.take().expect("piped");
        let stderr = qemu.0.stderr.take().expect("piped");
        let tx2 = tx.clone();
        // Lines as bytes, made text lossily: a kernel can print anything, and a reader that
        // stopped would leave QEMU blocked on a full pipe.
        fn read_lines(r: impl std::io::Read, prefix: &'static str, tx: mpsc::Sender<String>) {
            let mut r = BufReader::new(r);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = format!("{prefix}{}", String::from_utf8_lossy(&buf));
                        if tx
                            .send(line.trim_end_matches(['\n', '\r']).to_owned())
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
        }
        std::thread::spawn(move || read_lines(stdout, "", tx));
        // QEMU's own complaints (a bad option, KVM refused) go to the same log, marked.
        std::thread::spawn(move || read_lines(stderr, "qemu: ", tx2));
        let start = Instant::now();
        let mut console = String::new();
        let mut signed = b.sign.is_none();
        let outcome = loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let line = line.trim_end_matches('\r');
                    if let Some((sign, _)) = b.sign {
                        signed |= line.contains(sign);
                    }
                    on_line(line);
                    // A kernel flooding its console keeps the last MAX_CONSOLE bytes.
                    if console.len() > MAX_CONSOLE {
                        let cut = console.len() - MAX_CONSOLE / 2;
                        let cut = (cut..console.len())
                            .find(|i| console.is_char_boundary(*i))
                            .unwrap_or(console.len());
                        console.replace_range(..cut, "[… earlier console lines dropped]\n");
                    }
                    console.push_str(line);
                    console.push('\n');
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = qemu.0.wait()?;
                    break if status.success() {
                        Outcome::Exited
                    } else {
                        Outcome::Failed(status.to_string())
                    };
                }
            }
            if crate::interrupt::requested() {
                break Outcome::Interrupted;
            }
            if start.elapsed() > b.timeout {
                break Outcome::TimedOut(b.timeout);
            }
            if let Some((_, within)) = b.sign {
                if !signed && start.elapsed() > within {
                    break Outcome::NoSign;
                }
            }
        };
        drop(qemu);
        Ok(Booted { console, outcome })
    }
}

/// The guest died of an `int3` Oops at a patched instruction: the kernel was live-patching its
/// text (static keys or ftrace, e.g. when a tracefs instance starts pid filtering) and a vCPU
/// executed a stale breakpoint after the patch had completed — a race of emulated
/// cross-modifying code under multi-threaded TCG, seen once in many runs on 6.12 while the
/// stat_skip_vma test set up its tracefs reference (6.12, and 6.8 with `__text_poke` on the
/// stack). A crash of any other kind is not retried. 6.12 prints `Oops: int3: 0000 [#1]`,
/// 6.8 `int3: 0000 [#1]`.
pub fn tcg_text_patch_flake(log: &str) -> bool {
    log.lines().any(|l| l.contains("int3: 0000 [#"))
}

/// Whether KVM may be tried: `/dev/kvm` opens read-write for this user. (Whether it really
/// boots a guest is only known by booting one: nested KVM on some hosts aborts or hangs.)
pub fn kvm_usable() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_int3_text_patching_crash_is_retried() {
        let int3 = "test x ... [  240.88] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n\
                    RIP: 0010:__schedule+0x339/0xbf0\nKernel panic - not syncing\n";
        assert!(tcg_text_patch_flake(int3));
        let int3_68 = "test x ... [  518.84] int3: 0000 [#1] PREEMPT SMP NOPTI\n\
                       RIP: 0010:ttwu_do_activate+0x12d/0x260\n";
        assert!(tcg_text_patch_flake(int3_68));
        let gp = "Oops: general protection fault, probably for non-canonical address\n\
                  Kernel panic - not syncing\n";
        assert!(!tcg_text_patch_flake(gp));
        assert!(!tcg_text_patch_flake("vm-test: DONE\n"));
    }

    #[test]
    fn the_harness_topology_is_two_nodes_and_a_slow_third() {
        let t = Machine::harness(Accel::Tcg).topology().join(" ");
        assert!(t.starts_with("-machine hmat=on -m 2560M -smp 2"), "{t}");
        assert!(t.contains("node,nodeid=0,cpus=0,memdev=m0"));
        assert!(t.contains("node,nodeid=1,cpus=1,memdev=m1"));
        assert!(t.contains("node,nodeid=2,memdev=m2,initiator=0"));
        assert!(t.contains("dist,src=0,dst=1,val=20"));
        assert!(t.contains("dist,src=1,dst=2,val=30"));
        assert_eq!(t.matches("hmat-lb").count(), 12);
    }

    #[test]
    fn the_arm64_harness_is_two_nodes_of_a_virt_machine() {
        let m = Machine::harness_for(Arch::Arm64, Accel::Tcg);
        m.check().unwrap();
        let t = m.topology().join(" ");
        assert!(t.starts_with("-machine virt -m 2048M -smp 2"), "{t}");
        assert!(
            t.contains("dist,src=0,dst=1,val=20") && !t.contains("hmat"),
            "{t}"
        );
        assert_eq!(m.node_count(), 2);
        assert!(
            m.accel_args()
                .join(" ")
                .contains("pauth-impdef=on,lpa2=off")
        );
        let slow = Machine {
            slow_mib: Some(256),
            ..m
        };
        assert!(slow.check().is_err());
    }

    #[test]
    fn cpus_are_spread_in_blocks() {
        let m = Machine {
            nodes: 3,
            cpus: 7,
            node_mib: 256,
            slow_mib: None,
            accel: Accel::Tcg,
            arch: Arch::Amd64,
        };
        m.check().unwrap();
        let t = m.topology().join(" ");
        assert!(!t.contains("hmat"));
        assert!(t.contains("cpus=0-1,") && t.contains("cpus=2-3,") && t.contains("cpus=4-6,"));
        assert!(t.contains("-m 768M"));
        assert!(
            Machine {
                cpus: 2,
                ..m.clone()
            }
            .check()
            .is_err()
        );
    }
}
