//! Histogram math on the kernel's log2 buckets (latencies, pages per migration).

use serde::{Deserialize, Serialize};

/// A log2 histogram: bucket `b` holds values in [2^(b-1), 2^b) (bucket 0: the value 0).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Log2Bucket {
    /// Exclusive upper bound of the bucket.
    pub lt: u64,
    pub count: u64,
}

/// Non-empty buckets, in order.
pub fn log2_buckets(counts: &[u64]) -> Vec<Log2Bucket> {
    counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(b, &count)| Log2Bucket {
            lt: if b >= 64 { u64::MAX } else { 1u64 << b },
            count,
        })
        .collect()
}

/// Upper bound of the bucket holding quantile `q` (buckets hold values below `lt`).
pub fn quantile(buckets: &[Log2Bucket], q: f64) -> Option<u64> {
    let total = buckets.iter().fold(0u64, |a, b| a.saturating_add(b.count));
    if total == 0 {
        return None;
    }
    let want = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0u64;
    buckets.iter().find_map(|b| {
        seen = seen.saturating_add(b.count);
        (seen >= want).then_some(b.lt)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_of_log2_buckets() {
        let b = [
            Log2Bucket {
                lt: 1024,
                count: 98,
            },
            Log2Bucket {
                lt: 1 << 22,
                count: 2,
            },
        ];
        assert_eq!(quantile(&b, 0.5), Some(1024));
        assert_eq!(quantile(&b, 0.99), Some(1 << 22));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn buckets_are_log2_upper_bounds() {
        let b = log2_buckets(&[2, 0, 5, 1]);
        assert_eq!(
            b,
            vec![
                Log2Bucket { lt: 1, count: 2 },
                Log2Bucket { lt: 4, count: 5 },
                Log2Bucket { lt: 8, count: 1 },
            ]
        );
    }
}
