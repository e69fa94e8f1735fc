//! `numatrace lab` as a user runs it: bad inputs give one-line errors before anything boots and
//! leave nothing behind; two kernel lines side by side give their own verdicts; a record A/B
//! gives a diff. The boots need QEMU (installed as root by `cargo xtask test`) and the network
//! once (the kernels are cached); without QEMU they skip, saying so.

mod common;

use std::{
    fs,
    path::Path,
    process::{Command, Output},
};

use common::{numatrace_bin, skip};

/// `numatrace lab ARGS` with its scratch space under `tmp` (so that leftovers can be seen).
fn lab(tmp: &Path, args: &[&str]) -> Output {
    Command::new(numatrace_bin())
        .arg("lab")
        .args(args)
        .env("TMPDIR", tmp)
        .current_dir(tmp)
        .output()
        .expect("running numatrace lab")
}

/// A setup header as an x86-64 bzImage has it (boot flag, "HdrS", 64-bit, a version string),
/// nothing bootable after it: enough for the preflight, which refuses before any boot.
fn fake_bzimage() -> Vec<u8> {
    let mut b = vec![0u8; 8 * 512];
    b[0x1f1] = 4;
    b[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes());
    b[0x202..0x206].copy_from_slice(b"HdrS");
    b[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
    b[0x236..0x238].copy_from_slice(&1u16.to_le_bytes());
    b[0x20e..0x210].copy_from_slice(&0x200u16.to_le_bytes());
    let v = b"6.12.0-fabricated (lab test) #1 SMP";
    b[0x400..0x400 + v.len()].copy_from_slice(v);
    b
}

/// No QEMU of this test's scratch space is running, and no scratch directory is left.
fn nothing_left(tmp: &Path) {
    let left: Vec<String> = fs::read_dir(tmp)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("numatrace-lab."))
        .collect();
    assert!(left.is_empty(), "scratch left behind: {left:?}");
    let tmp = tmp.to_string_lossy().into_owned();
    for p in fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let cmdline = fs::read(p.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        assert!(
            !(cmdline.contains("qemu-system") && cmdline.contains(&tmp)),
            "QEMU still running: {cmdline}"
        );
    }
}

fn one_line_error(o: &Output, words: &str) {
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let last = stderr.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.contains(words),
        "wanted {words:?} in the last line: {stderr}"
    );
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn bad_inputs_are_refused_before_anything_boots() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let p = |n: &str| tmp.join(n).to_string_lossy().into_owned();
    fs::write(tmp.join("empty"), b"").unwrap();
    one_line_error(
        &lab(tmp, &["--kernel", &p("empty"), "--", "probes"]),
        "an empty file, not a kernel image",
    );
    let random: Vec<u8> = (0..65536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(tmp.join("random"), random).unwrap();
    one_line_error(
        &lab(tmp, &["--kernel", &p("random"), "--", "probes"]),
        "not a kernel image",
    );
    fs::create_dir(tmp.join("tree")).unwrap();
    one_line_error(
        &lab(tmp, &["--kernel", &p("tree"), "--", "check"]),
        "no arch/x86/boot/bzImage in this tree",
    );
    one_line_error(
        &lab(tmp, &["--kernel", "debian:9.9", "--", "check"]),
        "no such kernel line",
    );
    one_line_error(
        &lab(tmp, &["--kernel", &p("empty"), "--", "top"]),
        "lab runs check, stat, record or probes",
    );
    // A kernel built without NUMA balancing (its config beside it, as /boot has them): named
    // with what it costs, not booted, exit 1.
    fs::write(tmp.join("vmlinuz-6.12.0-fabricated"), fake_bzimage()).unwrap();
    fs::write(
        tmp.join("config-6.12.0-fabricated"),
        "CONFIG_NUMA=y\n# CONFIG_NUMA_BALANCING is not set\nCONFIG_BPF_SYSCALL=y\n\
         CONFIG_PERF_EVENTS=y\nCONFIG_BLK_DEV_INITRD=y\nCONFIG_SERIAL_8250_CONSOLE=y\n",
    )
    .unwrap();
    let o = lab(
        tmp,
        &["--kernel", &p("vmlinuz-6.12.0-fabricated"), "--", "check"],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("CONFIG_NUMA_BALANCING is off: without it: no automatic NUMA balancing"),
        "{stderr}"
    );
    assert!(stderr.contains("CONFIG_KPROBES is off"), "{stderr}");
    assert!(
        stderr.contains("not booted: nothing could run without CONFIG_NUMA_BALANCING"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("6.12.0-fabricated"), "{stdout}");
    nothing_left(tmp);
}

#[test]
fn the_config_fragment_turns_on_what_the_preflight_checks() {
    let dir = tempfile::tempdir().unwrap();
    let o = lab(dir.path(), &["--config-fragment"]);
    assert!(o.status.success());
    let f = String::from_utf8_lossy(&o.stdout);
    for need in [
        "NUMA",
        "NUMA_BALANCING",
        "BPF_SYSCALL",
        "DEBUG_INFO_BTF",
        "KPROBES",
        "FUNCTION_TRACER",
        "MEMCG",
        "SCHED_DEBUG",
        "IKCONFIG_PROC",
    ] {
        assert!(f.contains(&format!("\nCONFIG_{need}=y\n")), "{need}: {f}");
    }
}

/// QEMU present, or the test skips saying why.
fn qemu(test: &str) -> bool {
    let ok = Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(
            test,
            "qemu-system-x86_64 is not installed (cargo xtask test installs it as root)",
        );
    }
    ok
}

#[test]
fn two_lines_side_by_side_give_their_own_verdicts() {
    const TEST: &str = "two_lines_side_by_side_give_their_own_verdicts";
    if !qemu(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let o = lab(
        tmp,
        &[
            "--kernel",
            "debian:6.1",
            "--kernel",
            "debian:6.12",
            "--out",
            "out",
            "--",
            "check",
            "--patch",
            "002",
        ],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stdout}\n{stderr}");
    // Seed 002's check needs tp_btf on sched_skip_vma_numa (6.8+): unsupported on 6.1.
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("KERNEL"))
        .collect();
    assert!(table[0].ends_with("SEED 002"), "{stdout}");
    assert!(
        table[1].starts_with("debian:6.1 ") && table[1].ends_with("unsupported"),
        "{stdout}"
    );
    assert!(
        table[2].starts_with("debian:6.12") && table[2].ends_with("behaves-as-patched"),
        "{stdout}"
    );
    assert!(stderr.contains("[1/2] debian:6.1: booting"), "{stderr}");
    assert!(
        stderr.contains("running numatrace check --json --patch 002"),
        "{stderr}"
    );
    for log in ["1-debian_6.1.console.log", "2-debian_6.12.console.log"] {
        let text = fs::read_to_string(tmp.join("out").join(log)).unwrap();
        assert!(text.contains("numatrace-lab: collecting"), "{log}");
    }
    nothing_left(tmp);
}

#[test]
fn a_record_a_b_gives_its_captures_and_a_diff() {
    const TEST: &str = "a_record_a_b_gives_its_captures_and_a_diff";
    if !qemu(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let o = lab(
        tmp,
        &[
            "--kernel",
            "debian:6.12",
            "--kernel",
            "debian:7.x",
            "--out",
            "ab",
            "--",
            "record",
            "--",
            "numatrace-workload",
            "migrate",
            "--duration",
            "4s",
        ],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stdout}\n{stderr}");
    for capture in [
        "1-debian_6.12.capture.ntrace",
        "2-debian_7.x.capture.ntrace",
    ] {
        let bytes = fs::read(tmp.join("ab").join(capture)).unwrap();
        assert!(bytes.len() > 1000, "{capture}: {} bytes", bytes.len());
    }
    assert!(stdout.contains("report --diff"), "{stdout}");
    // The host's report reads each guest's capture.
    let report = Command::new(numatrace_bin())
        .args(["report", "ab/1-debian_6.12.capture.ntrace"])
        .current_dir(tmp)
        .output()
        .unwrap();
    assert!(report.status.success(), "{report:?}");
    nothing_left(tmp);
}
