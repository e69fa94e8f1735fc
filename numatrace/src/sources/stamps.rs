//! Which task entries a read may take as unchanged since the previous one, by the stamp every
//! program leaves in an entry it takes (`touched`: the low 32 bits of jiffies, written before
//! it counts anything there). Shared by the two ways of reading the task map: the iterator,
//! whose walk reads the kernel's jiffies itself, and the batched read, which reads them from
//! /proc/timer_list just before it starts.
//!
//! A count landing after a read copied its entry was stamped before that read began at the
//! earliest, less the time a program takes between its stamp and its count (microseconds;
//! a margin of a quarter of a second at least, [`MARGIN_JIFFIES`] jiffies at least, covers a
//! program preempted that long on a preemptible kernel; one preempted longer has its count read
//! at the task's next event or the next whole read). So the next read takes as unchanged only
//! an entry stamped before the previous read's start less the margin; every [`FULL_EVERY`],
//! after a read that did not complete, and for a report's final counts the map is read whole.

use std::{
    fs::File,
    io::Read as _,
    time::{Duration, Instant},
};

/// Jiffies before the previous read's start from which a stamp counts as a change, at least:
/// 256 ms at HZ=250, 640 ms at 100.
pub const MARGIN_JIFFIES: u32 = 64;
/// The margin in time, at least: once the kernel's HZ is known (from reads' start jiffies a
/// second apart or more), the margin is this many seconds of jiffies where that is more than
/// [`MARGIN_JIFFIES`] (250 at HZ=1000); until then [`FIRST_MARGIN_JIFFIES`].
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
}

impl Default for Stamps {
    fn default() -> Self {
        Self {
            since: None,
            last_whole: None,
            origin: None,
            margin: FIRST_MARGIN_JIFFIES,
        }
    }
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
        self.since.is_some() && self.last_whole.is_some_and(|t| t.elapsed() < FULL_EVERY)
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
            None => self.origin = Some((started, now)),
            Some((j0, t0)) => {
                let secs = now.duration_since(t0).as_secs_f64();
                if secs >= 1.0 {
                    let hz = f64::from(started.wrapping_sub(j0)) / secs;
                    self.margin = MARGIN_JIFFIES.max((hz * MARGIN_SECS).ceil() as u32);
                }
            }
        }
        self.since = Some(started.wrapping_sub(self.margin));
    }
}

/// Whether an entry stamped `touched` changed since a read whose clock gave `since`: a
/// wrapping compare of 32 bits of jiffies (an entry untouched for over 2^31 jiffies may read
/// as changed: read whole, which costs a copy and is never wrong). The kernel side's iterator
/// decides the same way (`TaskIterControl::sends`).
pub fn stamped_since(touched: u32, since: u32) -> bool {
    touched.wrapping_sub(since) as i32 >= 0
}

/// The kernel's jiffies now, low 32 bits (what programs stamp), from /proc/timer_list: its
/// first CPU's `jiffies:` line, a few KiB in. `None` where the file is missing or unreadable
/// (not root, a kernel without tick-oneshot): the batched read then takes nothing as
/// unchanged.
pub fn jiffies_now() -> Option<u32> {
    let mut f = File::open("/proc/timer_list").ok()?;
    let mut text = Vec::with_capacity(READ_STEP);
    while text.len() < READ_MAX {
        let at = text.len();
        text.resize(at + READ_STEP, 0);
        let n = f.read(&mut text[at..]).ok()?;
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
/// is in the first CPU's part: the file can be megabytes on a large machine).
const READ_STEP: usize = 8 * 1024;
const READ_MAX: usize = 64 * 1024;

/// The low 32 bits of the first complete `jiffies: N` line of `text`.
fn parse_jiffies(text: &[u8]) -> Option<u32> {
    const KEY: &[u8] = b"\njiffies: ";
    let at = text.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = &text[at..];
    let end = rest.iter().position(|&b| b == b'\n')?;
    let digits = &rest[..end];
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jiffies_come_from_the_first_complete_line() {
        let text = b"Timer List Version: v0.10\n\ncpu: 0\n .last_jiffies   : 4310285607\n\
                     jiffies: 4310285607\n\ncpu: 1\njiffies: 4310285608\n";
        assert_eq!(parse_jiffies(text), Some(4_310_285_607u64 as u32));
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

    /// No whole read yet, or the latest longer ago than FULL_EVERY: whole.
    #[test]
    fn a_whole_read_is_due_every_full_every() {
        let mut s = Stamps::default();
        s.completed_at(10, false, Instant::now());
        assert!(!s.changed_only(), "no whole read yet");
        s.last_whole = Instant::now().checked_sub(FULL_EVERY + Duration::from_secs(1));
        assert!(!s.changed_only());
        s.completed(20, true);
        assert!(s.changed_only());
    }
}
