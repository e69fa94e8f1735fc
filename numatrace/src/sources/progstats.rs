//! What the kernel says about a loaded program that aya does not: its recursion misses.

use std::os::fd::{AsFd, AsRawFd as _};

use aya_obj::generated::bpf_prog_info;

/// `BPF_OBJ_GET_INFO_BY_FD` (include/uapi/linux/bpf.h).
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// The `info` member of `union bpf_attr`.
#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// Runs of the program the kernel skipped (bpf_prog_info.recursion_misses, 5.12+; 0 before):
/// a trampoline (fentry/fexit) program is skipped when it is already running on the CPU, which
/// a preemptible kernel allows (the first run preempted, another task calling the hooked
/// function on that CPU); a kprobe program when another kprobe program runs on the CPU.
pub fn recursion_misses(prog: impl AsFd) -> std::io::Result<u64> {
    // SAFETY: bpf_prog_info is plain integers (and bitfields of them): all zeroes is valid.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr = InfoAttr {
        bpf_fd: prog.as_fd().as_raw_fd() as u32,
        info_len: size_of::<bpf_prog_info>() as u32,
        info: (&raw mut info) as u64,
    };
    // SAFETY: `attr` points at a writable `bpf_prog_info` of `info_len` bytes; the kernel
    // writes at most that many (fewer on older kernels, leaving the rest zero).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &raw mut attr,
            size_of::<InfoAttr>(),
        )
    };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(info.recursion_misses)
}
