//! `numatrace record` and `report` as a reporter and a kernel developer use them: a capture of a
//! workload read back as an unprivileged user equals `stat` of the same run; a capture killed
//! with SIGKILL is read up to its last whole section; bad files get one line; `--diff` of a
//! capture with itself shows no change; the Perfetto export is JSON with the documented fields.
//! In the 2-node guests, a capture of a migrating workload reports migrations and node flows
//! and holds the regression context at both ends, each item present or absent with the reason
//! (and is printed on the console for `vm-test` to read on the host); on the primary line,
//! `report --diff` of seed 000's reproducer and control holds mmtests' rows of both, checked
//! against the rows computed by hand from each capture's raw counters.

mod common;

use std::{
    collections::BTreeMap,
    ffi::CString,
    fs,
    io::{BufRead as _, BufReader, Write as _},
    os::unix::{ffi::OsStrExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::mpsc,
    time::Duration,
};

use common::{numatrace_bin, wait_until, workload_bin};
use numatrace::{
    capture::{CaptureWriter, SECTION_FIRST, SECTION_MACHINE, SECTION_PROBES},
    engine::Snapshot,
};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("numatrace-record-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    // The unprivileged user that reports reads captures and writes traces here (like /tmp).
    let _ = fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o1777));
    dir.join(name)
}

fn report(args: &[&str], as_nobody: bool) -> Output {
    let mut c = Command::new(numatrace_bin());
    c.arg("report").args(args);
    if as_nobody && common::is_root() {
        c.uid(65534).gid(65534);
    }
    c.output().expect("numatrace report")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// A small valid capture written with the library, no kernel needed: header, machine, probes
/// and a first snapshot (a capture cut short right after recording began).
fn synthetic(path: &Path) {
    let mut w = CaptureWriter::create(path, 1 << 30).unwrap();
    w.section(
        SECTION_MACHINE,
        &serde_json::json!({"hostname": "box", "nodes": []}),
    )
    .unwrap();
    w.section(SECTION_PROBES, &Vec::<serde_json::Value>::new())
        .unwrap();
    w.section(SECTION_FIRST, &Snapshot::default()).unwrap();
    w.finish().unwrap();
}

/// The header `CaptureWriter` writes: 16 bytes and the writer's name.
fn header_len() -> usize {
    16 + format!("numatrace {}", env!("CARGO_PKG_VERSION")).len()
}

#[test]
fn bad_files_get_one_line_naming_file_and_problem() {
    if common::host_covers("bad_files_get_one_line_naming_file_and_problem") {
        return;
    }
    let good = tmp("good.ntrace");
    synthetic(&good);
    let bytes = fs::read(&good).unwrap();
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "not a numatrace capture"),
        (
            "text",
            b"hello, world\n".to_vec(),
            "not a numatrace capture",
        ),
        ("header-only", bytes[..12].to_vec(), "cut short"),
        (
            "no-sections",
            bytes[..header_len()].to_vec(),
            "no machine section",
        ),
    ];
    let mut newer = bytes.clone();
    newer[8] = 7;
    cases.push(("newer", newer, "newer numatrace"));
    let mut flipped = bytes.clone();
    let at = bytes.len() - 5;
    flipped[at] ^= 0x55;
    cases.push(("flipped", flipped, "checksum"));
    for (name, data, says) in cases {
        let p = tmp(&format!("{name}.ntrace"));
        fs::write(&p, data).unwrap();
        let out = report(&[p.to_str().unwrap()], true);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(
            err.contains(p.to_str().unwrap()),
            "{name} names the file: {err}"
        );
        assert!(err.contains(says), "{name}: {err}");
    }
    let out = report(&["/nonexistent/x.ntrace"], false);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/x.ntrace"));
}

/// A process gated on a FIFO: started, its pid known, waiting for a byte.
struct Gated {
    child: Child,
    pid: u32,
    gate: PathBuf,
}

impl Gated {
    fn start(workload: &[&str]) -> Self {
        let gate = tmp("gate");
        let pid_file = tmp("pid");
        let _ = fs::remove_file(&gate);
        let _ = fs::remove_file(&pid_file);
        let c = CString::new(gate.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let child = Command::new(workload_bin())
            .arg("--pid-file")
            .arg(&pid_file)
            .arg("--gate")
            .arg(&gate)
            .args(workload)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(30), || fs::read_to_string(&pid_file)
                .is_ok_and(|s| !s.trim().is_empty())),
            "no pid file"
        );
        let pid = fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        Self { child, pid, gate }
    }

    fn open(mut self) {
        fs::OpenOptions::new()
            .write(true)
            .open(&self.gate)
            .and_then(|mut f| f.write_all(b"g"))
            .expect("open the gate");
        assert!(self.child.wait().unwrap().success());
    }
}

/// Spawns numatrace with these arguments and returns once it says it is counting.
fn counting(args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(numatrace_bin())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l.contains("counting") => return (child, rx),
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{args:?} never said it was counting");
            }
        }
    }
}

/// The counts both instances see the same way (timings and CPU samples are each instance's own
/// measurement, so they differ by nanoseconds and samples).
fn counts(totals: &serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    let mut m = BTreeMap::new();
    for (group, fields) in [
        (
            "hint_faults",
            &[
                "faults",
                "local",
                "pages",
                "faults_4k",
                "faults_thp",
                "migrated_pages",
                "cow_shared",
            ][..],
        ),
        ("scan", &["calls", "pte_updates", "prot_numa_calls"][..]),
        (
            "migrations",
            &["calls", "pages_ok", "pages_failed", "attempts", "succeeded"][..],
        ),
        (
            "placement",
            &["moves", "swaps_out", "swaps_in", "sticks"][..],
        ),
    ] {
        for f in fields {
            m.insert(format!("{group}.{f}"), totals[group][f].clone());
        }
    }
    m.insert("skipped_vmas".into(), totals["skipped_vmas"].clone());
    m
}

#[test]
fn a_capture_read_as_nobody_equals_stat_of_the_same_run() {
    const TEST: &str = "a_capture_read_as_nobody_equals_stat_of_the_same_run";
    require_root!(TEST);
    let _balancing = common::Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let w = Gated::start(&[
        "threads",
        "--threads",
        "2",
        "--mem-mib",
        "32",
        "--duration",
        "5s",
    ]);
    let pid = w.pid.to_string();
    let stat_out = tmp("stat.json");
    let cap = tmp("run.ntrace");
    let (stat, _) = counting(&[
        "stat",
        "--pid",
        &pid,
        "--json",
        "-o",
        stat_out.to_str().unwrap(),
    ]);
    let (record, _) = counting(&[
        "record",
        "--pid",
        &pid,
        "--interval",
        "500ms",
        "-o",
        cap.to_str().unwrap(),
    ]);
    w.open();
    for (name, c) in [("stat", stat), ("record", record)] {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{name}: {:?}", out.status);
    }
    fs::set_permissions(&cap, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let stat: serde_json::Value = serde_json::from_slice(&fs::read(&stat_out).unwrap()).unwrap();
    let rep = json(&report(&[cap.to_str().unwrap(), "--format", "json"], true));
    assert_eq!(rep["schema"], "numatrace.report/1");
    assert_eq!(rep["stat"]["schema"], "numatrace.stat/2");
    assert_eq!(rep["capture"]["complete"], true);
    assert!(
        rep["capture"]["samples"].as_u64().unwrap() >= 2,
        "{}",
        rep["capture"]
    );
    let (a, b) = (counts(&stat["totals"]), counts(&rep["stat"]["totals"]));
    println!("stat: {a:?}\nreport: {b:?}");
    assert_eq!(a, b, "record and stat of one run");
    assert_eq!(
        stat["tasks"].as_array().unwrap().len(),
        rep["stat"]["tasks"].as_array().unwrap().len()
    );
    // Each count is absent where its hook did not attach.
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    assert!(
        n(&a["scan.calls"])
            + n(&a["hint_faults.faults"])
            + n(&rep["stat"]["totals"]["skipped_vmas_total"])
            > 0,
        "the workload was seen at all"
    );
    // The same text as stat's, verdicts and findings after it.
    let text = report(&[cap.to_str().unwrap()], true);
    let text = String::from_utf8_lossy(&text.stdout);
    for want in [
        "Capture ",
        "Verdicts this capture's evidence supports:",
        "002 ",
        "003 ",
        "Findings:",
    ] {
        assert!(text.contains(want), "{want} in:\n{text}");
    }
    // --diff of a capture with itself.
    let d = report(
        &["--diff", cap.to_str().unwrap(), cap.to_str().unwrap()],
        true,
    );
    let d_text = String::from_utf8_lossy(&d.stdout);
    assert!(
        d.status.success() && d_text.contains("No change."),
        "{d_text}"
    );
    let dj = json(&report(
        &[
            "--diff",
            cap.to_str().unwrap(),
            cap.to_str().unwrap(),
            "--format",
            "json",
        ],
        true,
    ));
    assert!(
        dj["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["change"] == 0.0)
    );
    chrome_trace_is_valid(&cap, false);
}

/// The Perfetto export: valid JSON, every event with the documented fields, complete events
/// never overlapping on one track; with `spans`, at least one complete event.
fn chrome_trace_is_valid(cap: &Path, spans: bool) -> serde_json::Value {
    // One trace per capture: `report -o` refuses a file that exists.
    let stem = cap.file_stem().unwrap().to_string_lossy();
    let out = tmp(&format!("{stem}.trace.json"));
    let r = report(
        &[
            cap.to_str().unwrap(),
            "--format",
            "chrome-trace",
            "-o",
            out.to_str().unwrap(),
        ],
        true,
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value =
        serde_json::from_slice(&fs::read(&out).unwrap()).expect("trace JSON");
    let events = v["traceEvents"].as_array().expect("traceEvents");
    assert!(!events.is_empty());
    let mut tracks: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        assert!(
            e["name"].is_string() && e["pid"].is_u64() && e["tid"].is_u64(),
            "{e}"
        );
        match ph {
            "M" => assert!(e["args"]["name"].is_string(), "{e}"),
            "X" => {
                let (ts, dur) = (
                    e["ts"].as_f64().expect("ts"),
                    e["dur"].as_f64().expect("dur"),
                );
                assert!(dur >= 0.0);
                tracks
                    .entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
                    .or_default()
                    .push((ts, ts + dur));
            }
            "i" => assert!(e["ts"].is_f64() || e["ts"].is_u64(), "{e}"),
            "C" => assert!(e["args"].is_object() && e["ts"].is_number(), "{e}"),
            other => panic!("unexpected ph {other}: {e}"),
        }
    }
    for (track, mut spans) in tracks.clone() {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in spans.windows(2) {
            assert!(w[1].0 >= w[0].1 - 1e-3, "overlap on track {track:?}: {w:?}");
        }
    }
    if spans {
        assert!(!tracks.is_empty(), "no complete events");
    }
    v
}

#[test]
fn a_capture_killed_with_sigkill_is_read_up_to_its_last_section() {
    const TEST: &str = "a_capture_killed_with_sigkill_is_read_up_to_its_last_section";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    let cap = tmp("killed.ntrace");
    let (mut record, _) = counting(&[
        "record",
        "-d",
        "60s",
        "--interval",
        "200ms",
        "-o",
        cap.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_secs(2));
    record.kill().unwrap();
    record.wait().unwrap();
    assert!(
        common::programs_released(),
        "programs left attached after SIGKILL"
    );
    fs::set_permissions(&cap, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let rep = json(&report(&[cap.to_str().unwrap(), "--format", "json"], true));
    assert_eq!(rep["capture"]["complete"], false);
    assert!(
        rep["capture"]["samples"].as_u64().unwrap() >= 3,
        "{}",
        rep["capture"]
    );
    assert!(rep["stat"]["window"]["duration_s"].as_f64().unwrap() > 0.4);
    let text = report(&[cap.to_str().unwrap()], true);
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("INCOMPLETE"));
}

#[test]
fn a_capture_in_a_two_node_guest_shows_migrations_and_node_flows() {
    const TEST: &str = "a_capture_in_a_two_node_guest_shows_migrations_and_node_flows";
    require_root!(TEST);
    let Some(probes) = common::migrating_guest(TEST) else {
        return;
    };
    let _balancing = common::Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let cap = record_workload(
        "guest.ntrace",
        "500ms",
        &["migrate", "--mem-mib", "32", "--duration", "8s"],
    );
    let rep = json(&report(&[cap.to_str().unwrap(), "--format", "json"], true));
    let totals = &rep["stat"]["totals"];
    println!("totals: {}", totals["hint_faults"]);
    assert!(totals["hint_faults"]["migrated_pages"].as_u64().unwrap() > 0);
    assert!(!rep["stat"]["node_matrix"].as_array().unwrap().is_empty());
    // What a regression report is asked for, on every kernel line; the busiest task of a
    // window that migrated pages is named with its procfs NUMA state.
    regression_context_is_complete(&rep);
    let end = &rep["state_end"];
    assert!(!end["busiest"].as_array().unwrap().is_empty(), "{end}");
    assert!(
        end["processes"][0]["process"]["mems_allowed"].is_string(),
        "{end}"
    );
    // The recorded command comes first, with its numa_maps; the tunables were read (from
    // debugfs as mounted, or mounted privately for the read; sysctls before 5.13).
    assert_eq!(
        end["processes"][0]["chosen"], "the recorded command",
        "{end}"
    );
    let maps = &end["processes"][0]["process"]["numa_maps"];
    assert!(maps.get("absent").is_none(), "{maps}");
    let tunables = &end["system"]["tunables"];
    println!("tunables from {}: {tunables}", end["tunables_source"]);
    assert!(tunables.get("absent").is_none(), "{tunables}");
    let text = String::from_utf8_lossy(&report(&[cap.to_str().unwrap()], true).stdout).into_owned();
    for want in [
        "Ops NUMA hint faults",
        "Regression context:",
        "sysctls:",
        "nodes:",
    ] {
        assert!(text.contains(want), "{want} in:\n{text}");
    }
    assert_eq!(rep["verdicts"].as_array().unwrap().len(), 2);
    let trace = chrome_trace_is_valid(&cap, true);
    if common::attached(&probes, "migrate_misplaced_folio|_page") {
        let migrations = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "migration")
            .count();
        assert!(migrations > 0, "no migration spans");
    }
    // `vm-test` prints it on the console and reads it on the host with the host's numatrace.
    if let Ok(dir) = std::env::var("NUMATRACE_CAPTURE_OUT") {
        fs::copy(&cap, Path::new(&dir).join("migrate.ntrace")).unwrap();
    }
}

/// Whether `item` (a capture's `ITEM`) is present, or absent with a reason: never silently
/// missing.
fn present_or_says_why(name: &str, item: &serde_json::Value) -> bool {
    match item.get("absent") {
        Some(why) => {
            let why = why.as_str().unwrap_or_default();
            assert!(!why.is_empty(), "{name}: absent without a reason: {item}");
            println!("{name}: absent ({why})");
            false
        }
        None => {
            assert!(!item.is_null(), "{name}: missing");
            true
        }
    }
}

/// The kernel's release as (major, minor).
fn release() -> (u32, u32) {
    let r = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut it = r.trim().split(['.', '-']).map(|x| x.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// What a regression report is asked for, in a capture's state at both ends of its window,
/// on every kernel line: each item present, or absent with the reason.
fn regression_context_is_complete(rep: &serde_json::Value) {
    for phase in ["state_start", "state_end"] {
        let st = &rep[phase];
        assert_eq!(st["phase"], &phase[6..], "{phase}");
        let sys = &st["system"];
        // Every kernel has these.
        assert!(present_or_says_why("vmstat", &sys["vmstat"]));
        assert!(sys["vmstat"]["numa_hint_faults"].is_u64(), "{sys}");
        assert!(present_or_says_why("nodes", &sys["nodes"]));
        assert_eq!(sys["nodes"].as_array().unwrap().len(), common::numa_nodes());
        assert!(present_or_says_why("numastat", &sys["numastat"]));
        assert!(present_or_says_why("thp", &sys["thp"]));
        assert!(sys["thp"]["enabled"].is_string(), "{}", sys["thp"]);
        assert!(present_or_says_why("cmdline", &sys["cmdline"]));
        assert!(present_or_says_why(
            "kernel.numa_balancing",
            &sys["sysctls"]["kernel.numa_balancing"]
        ));
        for name in [
            "vm.numa_stat",
            "vm.zone_reclaim_mode",
            "vm.numa_zonelist_order",
        ] {
            present_or_says_why(name, &sys["sysctls"][name]);
        }
        // debugfs holds the scan tunables from 5.13; before, they are sysctls.
        let tunables = present_or_says_why("tunables", &sys["tunables"]);
        if release() >= (5, 13) {
            assert!(tunables, "{}", sys["tunables"]);
            assert!(sys["tunables"]["scan_delay_ms"].is_string());
        } else {
            assert!(sys["sysctls"]["kernel.numa_balancing_scan_delay_ms"].is_string());
        }
        present_or_says_why("config", &sys["config"]);
        for (k, v) in sys["tiering"].as_object().unwrap() {
            present_or_says_why(k, v);
        }
        // The busiest tasks: their sched NUMA fields, numa_maps per node, allowed nodes, cpuset.
        let note = st["busiest_note"].as_str().unwrap();
        assert!(!note.is_empty());
        for t in st["busiest"].as_array().unwrap() {
            if present_or_says_why("sched", &t["task"]["sched"]) {
                assert!(t["task"]["sched"]["numa_preferred_nid"].is_string(), "{t}");
            }
        }
        for p in st["processes"].as_array().unwrap() {
            let pr = &p["process"];
            for k in ["numa_maps", "mems_allowed", "cpus_allowed", "cpuset"] {
                present_or_says_why(k, &pr[k]);
            }
        }
    }
}

/// mmtests' rows from a capture's raw counters, computed here by hand.
fn hand_rows(rep: &serde_json::Value) -> BTreeMap<&'static str, f64> {
    let d = |k: &str| {
        let (a, b) = (
            &rep["state_start"]["system"]["vmstat"][k],
            &rep["state_end"]["system"]["vmstat"][k],
        );
        (b.as_u64().unwrap() - a.as_u64().unwrap()) as f64
    };
    let mut m = BTreeMap::new();
    m.insert("NUMA alloc hit", d("numa_hit"));
    m.insert("NUMA alloc local", d("numa_local"));
    m.insert("NUMA base PTE updates", d("numa_pte_updates"));
    if rep["state_end"]["system"]["vmstat"]["numa_huge_pte_updates"].is_u64() {
        m.insert(
            "NUMA page range updates",
            d("numa_pte_updates") + 512.0 * d("numa_huge_pte_updates"),
        );
    }
    m.insert("NUMA hint faults", d("numa_hint_faults"));
    m.insert("NUMA hint local faults", d("numa_hint_faults_local"));
    let faults = d("numa_hint_faults");
    m.insert(
        "NUMA hint local percent",
        if faults == 0.0 {
            100.0
        } else {
            d("numa_hint_faults_local") * 100.0 / faults
        },
    );
    m.insert("NUMA pages migrated", d("numa_pages_migrated"));
    m.insert(
        "AutoNUMA cost",
        (7.0 * d("numa_pte_updates") + 5000.0 * faults + 19.0 * d("numa_pages_migrated")) / 1e6,
    );
    m
}

/// Records `args` (a numatrace-workload command) into `name`, a sample every `interval`; the
/// capture is made readable by the unprivileged reader (captures are created 0600), as a user
/// would share it.
fn record_workload(name: &str, interval: &str, args: &[&str]) -> PathBuf {
    let cap = tmp(name);
    let out = Command::new(numatrace_bin())
        .args([
            "record",
            "--interval",
            interval,
            "-o",
            cap.to_str().unwrap(),
            "--",
        ])
        .arg(workload_bin())
        .args(args)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::set_permissions(&cap, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    cap
}

/// Seed 000's reproducer (COW-shared pages) and its control (private copies), each recorded,
/// then compared as a maintainer would: `report` of each has mmtests' rows equal to the ones
/// computed here from its raw vmstat, and `report --diff` has both, row by row, with the
/// change; the text fits 80 columns. The diff is printed for the README's example.
#[test]
fn a_diff_of_the_seed_000_reproducer_and_its_control_holds_both_row_by_row() {
    const TEST: &str = "a_diff_of_the_seed_000_reproducer_and_its_control_holds_both_row_by_row";
    require_root!(TEST);
    // Nothing in the comparison depends on the kernel line (the capture's content is checked
    // on every line by the migrating capture's test).
    if common::other_line_covers(TEST) || common::migrating_guest(TEST).is_none() {
        return;
    }
    let _balancing = common::Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let cow = |mode: &str| {
        [
            "cow",
            "--mode",
            mode,
            "--children",
            "2",
            "--mem-mib",
            "32",
            "--duration",
            "6s",
        ]
        .map(str::to_owned)
    };
    let shared = record_workload(
        "patched.ntrace",
        "1s",
        &cow("shared").each_ref().map(String::as_str),
    );
    let private = record_workload(
        "control.ntrace",
        "1s",
        &cow("private").each_ref().map(String::as_str),
    );
    let mut reps = Vec::new();
    for cap in [&private, &shared] {
        let rep = json(&report(&[cap.to_str().unwrap(), "--format", "json"], true));
        let hand = hand_rows(&rep);
        let rows = rep["mmtests"].as_array().unwrap();
        for (label, want) in &hand {
            let got = rows
                .iter()
                .find(|r| r["label"] == *label)
                .unwrap_or_else(|| panic!("no {label} row"));
            assert!(
                (got["value"].as_f64().unwrap() - want).abs() < 1e-9,
                "{label}: {got} vs {want} by hand"
            );
        }
        reps.push(rep);
    }
    // The control (private copies, misplaced) hint-faults: the row that shows it is there.
    assert!(hand_rows(&reps[0])["NUMA hint faults"] > 0.0);
    let (c, s) = (private.to_str().unwrap(), shared.to_str().unwrap());
    let dj = json(&report(&["--diff", c, s, "--format", "json"], true));
    assert_eq!(dj["before_name"], "control");
    assert_eq!(dj["after_name"], "patched");
    let rows = dj["mmtests"].as_array().unwrap();
    assert_eq!(rows.len(), reps[0]["mmtests"].as_array().unwrap().len());
    for (i, row) in rows.iter().enumerate() {
        let (b, a) = (&reps[0]["mmtests"][i], &reps[1]["mmtests"][i]);
        assert_eq!(row["label"], b["label"]);
        assert_eq!(row["base"], b["value"], "{row}");
        assert_eq!(row["patched"], a["value"], "{row}");
        if let (Some(b), Some(a)) = (b["value"].as_f64(), a["value"].as_f64())
            && b != 0.0
        {
            let pct = row["change_pct"].as_f64().unwrap();
            assert!((pct - (a - b) / b * 100.0).abs() < 1e-9, "{row}");
        }
    }
    assert!(!dj["rows"].as_array().unwrap().is_empty());
    assert!(!dj["verdicts"].as_array().unwrap().is_empty());
    assert!(dj["settings_compared"].as_u64().unwrap() > 10, "{dj}");
    let text = report(&["--diff", c, s], true);
    let text = String::from_utf8_lossy(&text.stdout);
    println!("{text}");
    for want in [
        "Ops NUMA hint faults",
        "Ops AutoNUMA cost",
        "numatrace's own counts",
        "Verdicts",
        "Findings, base:",
        "Settings that differ",
    ] {
        assert!(text.contains(want), "{want} in:\n{text}");
    }
    let wide: Vec<&str> = text.lines().filter(|l| l.chars().count() > 80).collect();
    assert!(wide.is_empty(), "lines past 80 columns: {wide:#?}");
}

/// The debugfs and securityfs lines of this process's mount table (the host's, for a test run
/// in it).
fn kernel_fs_mounts() -> Vec<String> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(" - debugfs ") || l.contains(" - securityfs "))
        .map(str::to_owned)
        .collect()
}

/// Issue 38: on a host where only the tracepoints attach (nothing that numatrace counts may
/// involve the command) and debugfs is not mounted, `record -- CMD` still keeps CMD's own
/// numa_maps — read right after it exec'd, and the last read from while it lived (a zombie's
/// are empty) — each marked as the recorded command with when it was read; and the scan
/// tunables are read through a private debugfs mount, or say exactly why not. numatrace runs
/// in a mount namespace of its own where debugfs is unmounted: the host's mounts are not
/// touched, and stay as they were. Once for a command of a few seconds, once for one that
/// exits before the first interval.
#[test]
fn a_recorded_command_keeps_its_numa_maps_and_the_tunables_say_where_from() {
    const TEST: &str = "a_recorded_command_keeps_its_numa_maps_and_the_tunables_say_where_from";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    if Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .status()
        .map_or(true, |s| !s.success())
    {
        common::skip(TEST, "no working `unshare -m` (util-linux) on this machine");
        return;
    }
    let host_before = kernel_fs_mounts();
    for (name, duration) in [("long", "2500ms"), ("short", "300ms")] {
        let cap = tmp(&format!("command-{name}.ntrace"));
        let _ = fs::remove_file(&cap);
        // In the namespace: debugfs unmounted (if it was mounted), then numatrace itself.
        let script = "umount -l /sys/kernel/debug 2>/dev/null; \
                      if grep -q ' /sys/kernel/debug debugfs ' /proc/self/mounts; then exit 99; fi; \
                      exec \"$0\" \"$@\"";
        let out = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", script])
            .arg(numatrace_bin())
            .args([
                "record",
                "--interval",
                "1s",
                "-o",
                cap.to_str().unwrap(),
                "--",
            ])
            .arg(workload_bin())
            .args([
                "threads",
                "--threads",
                "2",
                "--mem-mib",
                "16",
                "--duration",
                duration,
            ])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", common::text(&out));
        let rep = json(&report(&[cap.to_str().unwrap(), "--format", "json"], false));
        let mut reads = Vec::new();
        for phase in ["state_start", "state_end"] {
            let st = &rep[phase];
            let p = &st["processes"][0];
            assert_eq!(p["chosen"], "the recorded command", "{name} {phase}: {st}");
            assert_eq!(st["busiest"][0]["chosen"], "the recorded command");
            assert_eq!(p["comm"], "numatrace-workl", "{name} {phase}: {p}");
            let maps = &p["process"]["numa_maps"];
            assert!(maps.get("absent").is_none(), "{name} {phase}: {maps}");
            let kib = |k: &str| -> u64 {
                maps[k]
                    .as_object()
                    .unwrap()
                    .values()
                    .map(|v| v.as_u64().unwrap())
                    .sum()
            };
            assert!(kib("kib_by_node") > 0, "{name} {phase}: no pages: {maps}");
            reads.push((p["read_unix_s"].as_f64().unwrap(), kib("anon_kib_by_node")));
            let tunables = &st["system"]["tunables"];
            println!(
                "{name} {phase}: tunables {tunables} from {}",
                st["tunables_source"]
            );
            assert_eq!(
                st["tunables_source"],
                numatrace::kernel::tunables::FROM_PRIVATE_DEBUGFS,
                "{name} {phase}"
            );
            match tunables.get("absent") {
                // This machine's kernel is locked down: no mount shows them, and it says so.
                Some(why) => assert!(
                    why.as_str().unwrap().contains("locked down"),
                    "{name} {phase}: {tunables}"
                ),
                None => assert!(tunables["scan_delay_ms"].is_string(), "{tunables}"),
            }
        }
        // The end's read is its last while it lived: after the start's, within the window,
        // with the 2 × 16 MiB the threads touched; it exited after it.
        let end = &rep["state_end"]["processes"][0];
        assert_eq!(end["exited"], true, "{end}");
        let exited = end["exited_unix_s"].as_f64().unwrap();
        assert!(
            reads[0].0 < reads[1].0 && reads[1].0 <= exited,
            "{reads:?} {end}"
        );
        assert!(
            reads[1].1 >= 32 << 10,
            "{name}: anon KiB at the end {reads:?}"
        );
        let text = report(&[cap.to_str().unwrap()], false);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("the recorded command, read at"), "{text}");
        assert!(text.contains("mounted privately for the read"), "{text}");
    }
    assert_eq!(kernel_fs_mounts(), host_before, "the host's mounts changed");
}
