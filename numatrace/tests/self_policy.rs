//! numatrace keeps itself out of NUMA balancing (its own memory policy lacks MPOL_F_MOF, so the
//! scanner skips its VMAs), and reports what activity of its own the kernel still counts.

mod common;

use common::Sysctl;

#[test]
fn numatrace_draws_no_hint_faults_of_its_own() {
    const TEST: &str = "numatrace_draws_no_hint_faults_of_its_own";
    require_root!(TEST);
    // set_mempolicy and the scanner's MPOL_F_MOF test are the same on every line.
    if common::other_line_covers(TEST) {
        return;
    }
    let probes = common::probes();
    if !common::attached(&probes, "change_prot_numa")
        || !common::attached(&probes, "task_numa_fault")
    {
        common::skip(
            TEST,
            "change_prot_numa / task_numa_fault cannot be hooked here: own PTE updates and faults are not seen",
        );
        return;
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let idle = || std::thread::sleep(std::time::Duration::from_secs(5));
    // Measured before (the kernel's default policy) and after (numatrace's own).
    // SAFETY: set before any thread of this test process reads the environment concurrently.
    unsafe { std::env::set_var("NUMATRACE_SELF_MEMPOLICY", "default") };
    let before = common::stat_window(&[], &[], idle);
    unsafe { std::env::remove_var("NUMATRACE_SELF_MEMPOLICY") };
    let after = common::stat_window(&[], &[], idle);
    let own = |v: &serde_json::Value| {
        (
            v["self"]["scan"]["pte_updates"].as_u64().unwrap(),
            v["self"]["hint_faults"]["faults"].as_u64().unwrap(),
            // Absent without sched_skip_vma_numa (before 6.7).
            v["self"]["skipped_vmas_total"].as_u64(),
        )
    };
    println!(
        "numatrace's own (PTE updates, hint faults, skipped VMAs) over 5 s idle: default policy {:?}, its own policy {:?}",
        own(&before),
        own(&after)
    );
    let (ptes, faults, _) = own(&after);
    assert_eq!(
        (ptes, faults),
        (0, 0),
        "the scanner still works on numatrace's memory"
    );
    if own(&before).0 == 0 {
        println!("note: with the default policy the scanner did not reach numatrace either in 5 s");
    }
}
