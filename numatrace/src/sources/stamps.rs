//! Which task entries a read may take as unchanged since the previous one, by the stamp every
//! program leaves in an entry it takes (`touched`: the low 32 bits of jiffies, written before
//! it counts anything there). Shared by the two ways of reading the task map: the iterator,
//! whose walk reads the kernel's jiffies itself, and the batched read, which takes them from
//! times(2) just before it starts ([`Jiffies`]).
//!
//! A count landing after a read copied its entry was stamped before that read began at the
//! earliest, less the time a program takes between its stamp and its count (microseconds;
//! a margin of a quarter of a second at least, [`MARGIN_JIFFIES`] jiffies at least, covers a
//! program preempted that long on a preemptible kernel; one preempted longer has its count read
//! at the task's next event or the next whole read). So the next read takes as unchanged only
//! an entry stamped before the previous read's start less the margin; every [`FULL_EVERY`],
//! after a read that did not complete, and for a report's final counts the map is read whole.

use numatrace_common::stamped_since;
use std::time::{Duration, Instant};

/// Jiffies before the previous read's start from which a stamp counts as a change, at least:
/// 256 ms at HZ=250, 640 ms at 100.
pub const MARGIN_JIFFIES: u32 = 64;
/// The margin in time, at least: once the kernel's HZ is known (from [`Jiffies`], or from
/// reads' start jiffies a second apart or more), the margin is this many seconds of jiffies
/// where that is more than [`MARGIN_JIFFIES`] (250 at HZ=1000); until then
/// [`FIRST_MARGIN_JIFFIES`].
const MARGIN_SECS: f64 = 0.25;
/// The margin before HZ is known: a quarter of a second at HZ=1000, more at lower HZ.
const FIRST_MARGIN_JIFFIES: u32 = 250;
/// The longest run of reads that take entries as unchanged.
pub const FULL_EVERY: Duration = Duration::from_secs(60);

/// The stamps' clock as one reader of the task map keeps it.
#[derive(Clone, Debug)]
pub struct Stamps {
    /// Stamps at or after this are changes for the next read; `None`: it must be whole.
    since: Option<u32>,
    /// When the latest whole read completed.
    last_whole: Option<Instant>,
    /// The first completed read's start jiffies and when it completed: the kernel's HZ, later.
    origin: Option<(u32, Instant)>,
    /// Jiffies of margin (see [`MARGIN_SECS`]).
    margin: u32,
    /// HZ was given ([`Stamps::set_hz`]): not learnt from reads.
    hz_given: bool,
}

impl Default for Stamps {
    fn default() -> Self {
        Self {
            since: None,
            last_whole: None,
            origin: None,
            margin: FIRST_MARGIN_JIFFIES,
            hz_given: false,
        }
    }
}

/// The margin at `hz` (see [`MARGIN_SECS`]).
fn margin_at(hz: f64) -> u32 {
    MARGIN_JIFFIES.max((hz * MARGIN_SECS).ceil() as u32)
}

impl Stamps {
    /// The low bits of jiffies from which the next read takes a stamp as a change (the previous
    /// read's start less the margin); `None`: the next read must be whole.
    pub fn since(&self) -> Option<u32> {
        self.since
    }

    /// Jiffies before the previous read's start from which the next read takes a stamp as a
    /// change.
    pub fn margin(&self) -> u32 {
        self.margin
    }

    /// Whether the next read may take entries as unchanged: a whole read has come before it,
    /// less than [`FULL_EVERY`] ago, and every read since has completed.
    pub fn changed_only(&self) -> bool {
        self.changed_only_at(Instant::now())
    }

    fn changed_only_at(&self, now: Instant) -> bool {
        self.since.is_some()
            && self
                .last_whole
                .is_some_and(|t| now.saturating_duration_since(t) < FULL_EVERY)
    }

    /// The kernel's HZ, known exactly (the batched read's [`Jiffies`]): the margin follows it
    /// from the next read on, instead of from reads a second apart.
    pub fn set_hz(&mut self, hz: u64) {
        self.margin = margin_at(hz as f64);
        self.hz_given = true;
    }

    /// The next read must be whole: call as a read starts (until it completes, the next is
    /// whole) and where its entries were not all taken in.
    pub fn invalidate(&mut self) {
        self.since = None;
    }

    /// A read that began at jiffies `started` has completed; `whole`: it took no entry as
    /// unchanged.
    pub fn completed(&mut self, started: u32, whole: bool) {
        self.completed_at(started, whole, Instant::now());
    }

    fn completed_at(&mut self, started: u32, whole: bool, now: Instant) {
        if whole {
            self.last_whole = Some(now);
        }
        match self.origin {
            _ if self.hz_given => {}
            None => self.origin = Some((started, now)),
            Some((j0, t0)) => {
                let secs = now.duration_since(t0).as_secs_f64();
                if secs >= 1.0 {
                    self.margin = margin_at(f64::from(started.wrapping_sub(j0)) / secs);
                }
            }
        }
        self.since = Some(started.wrapping_sub(self.margin));
    }
}

/// Whether a read whose clock gave `since` (`None`: a whole read) may take an entry stamped
/// `touched` as unchanged since the previous read: stamped before it.
pub fn untouched(touched: u32, since: Option<u32>) -> bool {
    since.is_some_and(|s| !stamped_since(touched, s))
}

/// The kernel's jiffies as userspace reads them at the cost of one system call: times(2)
/// returns them converted to USER_HZ clock ticks (`jiffies_64_to_clock_t`), which this turns
/// back into jiffies, rounding down (a start taken early makes more entries count as changed:
/// never wrong). The conversion needs the kernel's HZ, which clock_getres(2) of the coarse
/// clocks gives on every kernel: their resolution is the tick, `TICK_NSEC` =
/// (10⁹ + HZ/2) / HZ (`LOW_RES_NSEC`, include/vdso/ktime.h). One system call, no /proc file:
/// the earlier readings of the kernel's jiffies (/proc/schedstat, /proc/timer_list) were
/// missing from kernels without CONFIG_SCHEDSTATS and cost the kernel seconds with many
/// threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Jiffies {
    hz: u64,
    user_hz: u64,
}

impl Jiffies {
    /// `None` only where the coarse clock's resolution is not a tick of a HZ the kernel can
    /// have (10 to 10 000): the batched read then takes nothing as unchanged.
    pub fn probe() -> Option<Self> {
        // SAFETY: sysconf only reads a constant.
        let user_hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
        Self::from_tick(coarse_resolution_ns()?, user_hz)
    }

    /// HZ from the tick's length in ns; checked: the kernel's own rounding of that HZ gives
    /// the same tick.
    fn from_tick(tick_nsec: u64, user_hz: u64) -> Option<Self> {
        if user_hz == 0 || tick_nsec == 0 {
            return None;
        }
        let hz = (NSEC_PER_SEC as f64 / tick_nsec as f64).round() as u64;
        if !(10..=10_000).contains(&hz) || (NSEC_PER_SEC + hz / 2) / hz != tick_nsec {
            return None;
        }
        Some(Self { hz, user_hz })
    }

    /// The kernel's HZ.
    pub fn hz(&self) -> u64 {
        self.hz
    }

    /// Jiffies now, low 32 bits (what programs stamp), at most HZ / USER_HZ + 1 behind.
    pub fn now(&self) -> Option<u32> {
        Some(self.of_ticks(clock_ticks()?) as u32)
    }

    /// The least jiffies value the kernel turns into `ticks` (the inverse of its
    /// `jiffies_64_to_clock_t`: jiffies × TICK_NSEC / (NSEC_PER_SEC / USER_HZ), rounded down).
    fn of_ticks(&self, ticks: u64) -> u64 {
        let tick_nsec = (NSEC_PER_SEC + self.hz / 2) / self.hz;
        let per_tick = NSEC_PER_SEC / self.user_hz;
        (u128::from(ticks) * u128::from(per_tick)).div_ceil(u128::from(tick_nsec)) as u64
    }
}

const NSEC_PER_SEC: u64 = 1_000_000_000;

/// times(2): the kernel's jiffies in USER_HZ clock ticks.
fn clock_ticks() -> Option<u64> {
    let mut t = libc::tms {
        tms_utime: 0,
        tms_stime: 0,
        tms_cutime: 0,
        tms_cstime: 0,
    };
    // SAFETY: times writes the struct it is given.
    let r = unsafe { libc::times(&mut t) };
    // (clock_t)-1 is its error (EFAULT, not with this buffer).
    u64::try_from(r).ok()
}

/// clock_getres(2) of CLOCK_MONOTONIC_COARSE, in ns: the kernel's tick.
fn coarse_resolution_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_getres writes the struct it is given.
    if unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let ns = u64::try_from(ts.tv_nsec).ok()?;
    secs.checked_mul(NSEC_PER_SEC)?.checked_add(ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{fs::File, io::Read as _};

    // ---- The kernel's jiffies read directly, to check the probe against -----------------

    /// Above this many threads on the machine (each may have an hrtimer armed), /proc/timer_list
    /// is not read: at 2 048 armed timers its first CPU's part costs the kernel ~0.2 s.
    const TIMER_LIST_MAX_THREADS: u64 = 2048;

    /// The kernel's jiffies from /proc/schedstat: its `timestamp` line, printed before any CPU's.
    fn schedstat_jiffies() -> Option<u64> {
        let mut f = File::open("/proc/schedstat").ok()?;
        let mut text = vec![0; 4096];
        let n = read_some(&mut f, &mut text)?;
        parse_line(&text[..n], b"\ntimestamp ")
    }

    /// One read(2) of a /proc file, again where a signal interrupted it.
    fn read_some(f: &mut File, buf: &mut [u8]) -> Option<usize> {
        loop {
            match f.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => return r.ok(),
            }
        }
    }

    /// How many threads the machine has: /proc/loadavg's `running/total` field.
    fn threads() -> Option<u64> {
        let text = std::fs::read_to_string("/proc/loadavg").ok()?;
        parse_threads(&text)
    }

    fn parse_threads(loadavg: &str) -> Option<u64> {
        loadavg
            .split_whitespace()
            .nth(3)?
            .split_once('/')?
            .1
            .parse()
            .ok()
    }

    /// The kernel's jiffies from /proc/timer_list: its first CPU's `jiffies:` line.
    fn timer_list_jiffies() -> Option<u64> {
        let mut f = File::open("/proc/timer_list").ok()?;
        let mut text = Vec::with_capacity(READ_STEP);
        while text.len() < READ_MAX {
            let at = text.len();
            text.resize(at + READ_STEP, 0);
            let n = read_some(&mut f, &mut text[at..])?;
            text.truncate(at + n);
            if let Some(j) = parse_jiffies(&text) {
                return Some(j);
            }
            if n == 0 {
                return None;
            }
        }
        None
    }

    /// /proc/timer_list is read this much at a time, and no further than [`READ_MAX`] (the line
    /// is in the first CPU's part, after its timers: the file can be megabytes on a large
    /// machine).
    const READ_STEP: usize = 16 * 1024;
    const READ_MAX: usize = 1024 * 1024;

    /// The first complete `jiffies: N` line of `text`.
    fn parse_jiffies(text: &[u8]) -> Option<u64> {
        parse_line(text, b"\njiffies: ")
    }

    /// The number of the first complete line of `text` that starts with `key` (`key` begins with
    /// the newline before it).
    fn parse_line(text: &[u8], key: &[u8]) -> Option<u64> {
        let at = text.windows(key.len()).position(|w| w == key)? + key.len();
        let rest = &text[at..];
        let end = rest.iter().position(|&b| b == b'\n')?;
        let digits = &rest[..end];
        if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    }

    /// CONFIG_HZ of the running kernel, where its config is readable (as `record` reads it
    /// for a capture's system state).
    fn config_hz() -> Option<u64> {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
        let config =
            crate::kernel::sysstate::kernel_config(std::path::Path::new("/"), release.trim())
                .ok()?;
        config.options.get("CONFIG_HZ")?.parse().ok()
    }

    /// The kernel's jiffies now, where root can read them cheaply: /proc/schedstat's
    /// `timestamp` line, else /proc/timer_list's on a machine with few threads.
    fn kernel_jiffies() -> Option<u64> {
        schedstat_jiffies().or_else(|| {
            (threads()? <= TIMER_LIST_MAX_THREADS)
                .then(timer_list_jiffies)
                .flatten()
        })
    }

    #[test]
    fn jiffies_come_from_the_first_complete_line() {
        let text = b"Timer List Version: v0.10\n\ncpu: 0\n .last_jiffies   : 4310285607\n\
                     jiffies: 4310285607\n\ncpu: 1\njiffies: 4310285608\n";
        assert_eq!(parse_jiffies(text), Some(4_310_285_607));
        // Cut before the line's end: not yet.
        assert_eq!(parse_jiffies(b"cpu: 0\njiffies: 43102"), None);
        // Not numbers, or too long for a u64: none.
        assert_eq!(parse_jiffies(b"x\njiffies: 12a4\n"), None);
        assert_eq!(parse_jiffies(b"x\njiffies: \n"), None);
        assert_eq!(
            parse_jiffies(b"x\njiffies: 99999999999999999999999\n"),
            None
        );
        assert_eq!(parse_jiffies(b"x\njiffies: -5\n"), None);
        // A field that ends in the same word is not the line.
        assert_eq!(parse_jiffies(b"x\n .last_jiffies: 5\n"), None);
    }

    #[test]
    fn schedstat_timestamp_and_thread_count_parse() {
        let text = b"version 17\ntimestamp 4310285607\ncpu0 0 0 0 0 0 0 1 2 3\n";
        assert_eq!(parse_line(text, b"\ntimestamp "), Some(4_310_285_607));
        assert_eq!(
            parse_line(b"version 17\ntimestamp 43", b"\ntimestamp "),
            None
        );
        assert_eq!(
            parse_threads("0.00 0.01 0.05 3/10120 13581\n"),
            Some(10_120)
        );
        assert_eq!(parse_threads("0.00 0.01 0.05\n"), None);
        assert_eq!(parse_threads("0.00 0.01 0.05 3-10120 1\n"), None);
    }

    /// The tick of each HZ a kernel can be built with gives that HZ back; a resolution that
    /// is no tick (a high-resolution clock's 1 ns, a rounding the kernel does not make) gives
    /// none.
    #[test]
    fn hz_comes_from_the_tick_length() {
        for hz in [24, 48, 100, 128, 250, 256, 300, 512, 1000, 1024, 1200] {
            let tick = (NSEC_PER_SEC + hz / 2) / hz;
            assert_eq!(Jiffies::from_tick(tick, 100).map(|j| j.hz()), Some(hz));
        }
        for tick in [0, 1, 3_333_334, 4_000_001, 1_000_000_000, 200_000_000] {
            assert_eq!(Jiffies::from_tick(tick, 100), None, "tick {tick} ns");
        }
        assert_eq!(Jiffies::from_tick(4_000_000, 0), None);
    }

    /// The probe always gives HZ on Linux: the kernel's CONFIG_HZ where its config is readable;
    /// and where root reads the kernel's jiffies directly, jiffies from times(2) at that HZ are
    /// within a tick of them.
    #[test]
    fn the_probe_agrees_with_the_kernel_where_it_reads() {
        let j = Jiffies::probe().expect("the coarse clock's resolution is a tick");
        match config_hz() {
            Some(hz) => assert_eq!(j.hz(), hz, "HZ against the kernel's CONFIG_HZ"),
            None => {
                eprintln!(
                    "SKIPPED (part): no readable kernel config (/proc/config.gz, /boot/config-*); \
                     HZ {} checked against the values x86-64 and arm64 offer, not CONFIG_HZ",
                    j.hz()
                );
                assert!([100, 250, 300, 1000].contains(&j.hz()), "HZ {}", j.hz());
            }
        }
        // times(2) turned back lags the kernel's jiffies by up to HZ / USER_HZ + 1: the direct
        // reading lies between the two around it, give or take that.
        let lo = j.now().unwrap();
        let Some(direct) = kernel_jiffies() else {
            eprintln!(
                "SKIPPED (half): neither /proc/schedstat nor a short /proc/timer_list is \
                 readable here (root); HZ {} not checked against the kernel's jiffies",
                j.hz()
            );
            return;
        };
        let direct = direct as u32;
        let hi = j.now().unwrap();
        let lag = (j.hz() / 100 + 1) as u32;
        let from = lo.wrapping_sub(lag);
        assert!(
            direct.wrapping_sub(from) <= hi.wrapping_add(lag).wrapping_sub(from),
            "jiffies {direct}, from times(2) {lo} before and {hi} after (HZ {})",
            j.hz()
        );
    }

    #[test]
    fn a_stamp_is_a_change_from_since_on_across_the_wrap() {
        assert!(stamped_since(100, 100));
        assert!(stamped_since(101, 100));
        assert!(!stamped_since(99, 100));
        assert!(stamped_since(3, u32::MAX - 2));
        assert!(!stamped_since(u32::MAX - 3, u32::MAX - 2));
    }

    /// The margin is FIRST_MARGIN_JIFFIES until reads a second apart give HZ, then a quarter
    /// of a second of jiffies, MARGIN_JIFFIES at least; a read in progress or one that was not
    /// taken in leaves the next whole.
    #[test]
    fn the_margin_follows_hz_and_an_unfinished_read_makes_the_next_whole() {
        let t0 = Instant::now();
        let mut s = Stamps::default();
        assert!(!s.changed_only());
        s.completed_at(1000, true, t0);
        assert_eq!(s.since(), Some(1000 - FIRST_MARGIN_JIFFIES));
        assert!(s.changed_only());
        // Half a second later: HZ not judged yet.
        s.completed_at(1500, false, t0 + Duration::from_millis(500));
        assert_eq!(s.since(), Some(1500 - FIRST_MARGIN_JIFFIES));
        // 2 s after the first at HZ=1000: 250 jiffies.
        s.completed_at(3000, false, t0 + Duration::from_secs(2));
        assert_eq!(s.margin(), 250);
        // HZ=100: 25 would be less than the floor.
        let mut low = Stamps::default();
        low.completed_at(u32::MAX - 10, true, t0);
        low.completed_at(189, false, t0 + Duration::from_secs(2));
        assert_eq!(low.margin(), MARGIN_JIFFIES);
        assert_eq!(low.since(), Some(189 - MARGIN_JIFFIES));
        low.invalidate();
        assert!(!low.changed_only());
        assert_eq!(low.since(), None);
    }

    /// A HZ given (the batched read's clock knows it) sets the margin from the first read on,
    /// and reads at another pace do not change it.
    #[test]
    fn a_given_hz_sets_the_margin_from_the_first_read() {
        let t0 = Instant::now();
        let mut s = Stamps::default();
        s.set_hz(1000);
        s.completed_at(10_000, true, t0);
        assert_eq!(s.since(), Some(10_000 - 250));
        // Start jiffies that would give HZ=100 if learnt: the given HZ stands.
        s.completed_at(10_200, false, t0 + Duration::from_secs(2));
        assert_eq!((s.margin(), s.since()), (250, Some(10_200 - 250)));
        let mut low = Stamps::default();
        low.set_hz(250);
        assert_eq!(low.margin(), MARGIN_JIFFIES);
        low.completed_at(5, true, t0);
        assert_eq!(low.since(), Some(5u32.wrapping_sub(MARGIN_JIFFIES)));
    }

    /// The kernel's conversion to clock ticks (`jiffies_64_to_clock_t`), as it computes it.
    fn kernel_ticks(j: u64, hz: u64, user_hz: u64) -> u64 {
        let tick_nsec = (NSEC_PER_SEC + hz / 2) / hz;
        let per_tick = NSEC_PER_SEC / user_hz;
        if tick_nsec.is_multiple_of(per_tick) {
            if hz < user_hz {
                j * user_hz / hz
            } else {
                j / (hz / user_hz)
            }
        } else {
            (u128::from(j) * u128::from(tick_nsec) / u128::from(per_tick)) as u64
        }
    }

    /// Turned back from clock ticks, jiffies are never ahead of the kernel's and at most
    /// HZ / USER_HZ + 1 behind, for the usual HZ, near boot (jiffies start 300 s before the
    /// 32-bit wrap) and years on.
    #[test]
    fn jiffies_come_back_from_clock_ticks_rounded_down() {
        // Spread over years: a multiplicative step through the range (no test helper of a
        // higher layer).
        let mut spread = 7u64;
        for hz in [100u64, 250, 300, 1000] {
            let c = Jiffies { hz, user_hz: 100 };
            let start = (1u64 << 32) - 300 * hz;
            for n in 0..20_000u64 {
                spread = spread
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                let j = start + n + (spread >> 20) % (u64::from(u32::MAX) * 50);
                let ticks = kernel_ticks(j, hz, 100);
                let est = c.of_ticks(ticks);
                assert!(est <= j, "HZ {hz}: {est} ahead of {j}");
                assert!(j - est <= hz / 100 + 1, "HZ {hz}: {est} too far behind {j}");
            }
        }
    }

    /// No whole read yet, or the latest longer ago than FULL_EVERY: whole.
    #[test]
    fn a_whole_read_is_due_every_full_every() {
        let t0 = Instant::now();
        let mut s = Stamps::default();
        s.completed_at(10, false, t0);
        assert!(!s.changed_only_at(t0), "no whole read yet");
        s.completed_at(20, true, t0);
        assert!(s.changed_only_at(t0 + FULL_EVERY - Duration::from_secs(1)));
        assert!(!s.changed_only_at(t0 + FULL_EVERY + Duration::from_secs(1)));
    }
}
