//! Keeping numatrace out of NUMA balancing's way.
//!
//! The scanner (task_numa_work) skips every VMA whose memory policy lacks MPOL_F_MOF
//! (`vma_policy_mof`, as "unsuitable"); a VMA without a policy of its own takes the task's. The
//! kernel's default policies carry MOF, an explicit MPOL_LOCAL does not, and it allocates as
//! the default does (on the local node). So with MPOL_LOCAL numatrace's own pages are never
//! made PROT_NONE, it takes no hint faults and its pages never migrate: it stays out of the
//! counts it reports. Threads inherit the policy; so would exec'd children, whence
//! [`reset_for_child`].

const MPOL_DEFAULT: libc::c_long = 0;
const MPOL_LOCAL: libc::c_long = 4;

/// Set to `default` to leave numatrace's own memory policy alone (to measure what it costs).
pub const ENV: &str = "NUMATRACE_SELF_MEMPOLICY";

fn set_mempolicy(mode: libc::c_long) -> std::io::Result<()> {
    // SAFETY: set_mempolicy(2) with an empty node mask reads no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            mode,
            std::ptr::null::<libc::c_ulong>(),
            0 as libc::c_ulong,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes numatrace's process (this thread and every thread created after) invisible to the
/// scanner; call before any thread starts. Returns the policy in force.
pub fn keep_out_of_numa_balancing() -> &'static str {
    if std::env::var(ENV).is_ok_and(|v| v == "default") {
        return "default";
    }
    match set_mempolicy(MPOL_LOCAL) {
        Ok(()) => "local",
        Err(e) => {
            // Kernels without NUMA support refuse it; nothing to keep out of then.
            tracing::debug!("set_mempolicy(MPOL_LOCAL): {e}");
            "default"
        }
    }
}

/// A command numatrace runs must start with the kernel's default policy, not numatrace's.
pub fn reset_for_child() {
    let _ = set_mempolicy(MPOL_DEFAULT);
}
