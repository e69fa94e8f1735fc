//! Ctrl-C and SIGTERM as a flag: a boot in progress sees it, kills QEMU and returns, and the
//! caller's temporary files are removed on the way out (the default action would end the
//! process before any of that).

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// From now on SIGINT and SIGTERM set the flag instead of ending the process.
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Whether Ctrl-C or SIGTERM came since [`install`].
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
