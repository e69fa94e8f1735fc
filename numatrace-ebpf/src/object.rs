//! What every eBPF object of this crate carries: a panic handler (a program that could reach it
//! would loop, which the verifier refuses) and its licence.

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

// GPL: the tracing helpers (bpf_probe_read_kernel, ring buffer) require a GPL-compatible licence.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
