//! `numatrace probes` against the running kernel.

mod common;

use std::path::Path;

use common::{numatrace, tracefs_root};

#[test]
fn probes_json_covers_every_hook_with_a_verdict() {
    require_root!("probes_json_covers_every_hook_with_a_verdict");
    let out = numatrace(&["probes", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "probes failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("probes prints JSON");
    assert_eq!(v["schema"], "numatrace.probes/1");
    let hooks = v["hooks"].as_array().expect("hooks array");
    let names: Vec<&str> = hooks.iter().filter_map(|h| h["name"].as_str()).collect();
    for want in [
        "sched:sched_skip_vma_numa",
        "sched:sched_move_numa",
        "sched:sched_swap_numa",
        "sched:sched_stick_numa",
        "migrate:mm_migrate_pages",
        "task_numa_work",
        "change_prot_numa",
        "task_numa_fault",
        "do_numa_page",
        "do_huge_pmd_numa_page",
        "mpol_misplaced",
        "migrate_misplaced_folio|_page",
        "migration_entry_wait",
    ] {
        assert!(
            names.contains(&want),
            "probes does not list {want}: {names:?}"
        );
    }

    let tracefs = tracefs_root();
    for h in hooks {
        let name = h["name"].as_str().unwrap();
        let attached = h["attached"].as_bool().unwrap();
        let reasons = h["reasons"].as_array().unwrap();
        match h["kind"].as_str().unwrap() {
            "tracepoint" => {
                // Supported ⇒ attached; unsupported ⇒ reported with a reason.
                let (cat, event) = name.split_once(':').unwrap();
                let exists = tracefs.join("events").join(cat).join(event).is_dir();
                assert_eq!(
                    attached, exists,
                    "{name}: attached={attached}, in tracefs={exists}"
                );
                if attached && h["mechanism"] == "tp_btf" {
                    // Carried by its tp_btf twin, which must then be attached.
                    let twin = hooks
                        .iter()
                        .find(|t| t["name"] == format!("tp_btf:{event}"))
                        .unwrap_or_else(|| panic!("{name} carried by no tp_btf hook"));
                    assert_eq!(twin["attached"], true, "{name} carried by {twin}");
                    assert!(
                        reasons
                            .iter()
                            .any(|r| r.as_str().unwrap().contains("counted by")),
                        "{h}"
                    );
                } else if attached {
                    assert_eq!(h["mechanism"], "tracepoint", "{name}");
                } else {
                    assert!(!reasons.is_empty(), "{name} unattached without a reason");
                }
            }
            "function" => {
                let mechanism = h["mechanism"].as_str().unwrap();
                if attached {
                    assert!(
                        mechanism == "fentry" || mechanism == "kprobe",
                        "{name}: attached via {mechanism}"
                    );
                } else if mechanism == "none" {
                    assert!(!reasons.is_empty(), "{name} unavailable without a reason");
                } else {
                    // The kernel allows it, and every function hook has programs: not attaching
                    // is a load or attach failure.
                    panic!("{name} could attach via {mechanism} but did not: {h}");
                }
            }
            "tp_btf" => {
                // Needs the classic tracepoint (and BTF with the fields it reads).
                let (_, event) = name.split_once(':').unwrap();
                let exists = tracefs.join("events/sched").join(event).is_dir();
                if attached {
                    assert!(exists, "{name} attached without its tracepoint");
                    assert_eq!(h["mechanism"], "tp_btf", "{name}");
                } else if h["mechanism"] == "none" {
                    assert!(!reasons.is_empty(), "{name} unattached without a reason");
                } else {
                    panic!("{name} could attach via tp_btf but did not: {h}");
                }
            }
            "sampling" => {
                let work = hooks
                    .iter()
                    .find(|h| h["name"] == "task_numa_work")
                    .unwrap();
                if work["attached"] == true {
                    assert!(!attached, "sampling is only the fallback");
                }
            }
            other => panic!("unknown kind {other}"),
        }
    }

    let kprobes = Path::new("/sys/bus/event_source/devices/kprobe").exists()
        || tracefs.join("kprobe_events").exists();
    assert_eq!(v["kernel"]["kprobes"], kprobes);
    if !kprobes {
        let work = hooks
            .iter()
            .find(|h| h["name"] == "task_numa_work")
            .unwrap();
        let text = work["reasons"].to_string();
        assert!(text.contains("kprobes not built in"), "{text}");
    }
}

#[test]
fn probes_text_is_a_table() {
    require_root!("probes_text_is_a_table");
    if common::host_covers("probes_text_is_a_table") {
        return;
    }
    let out = numatrace(&["probes"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("kernel "), "{text}");
    assert!(text.contains("HOOK"), "{text}");
    assert!(text.contains("hooks attached"), "{text}");
}
