//! Latency samples and their percentiles.

use serde::Serialize;
use std::time::Duration;

/// Percentiles of one set of samples, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Percentiles {
    /// How many samples there were.
    pub count: usize,
    /// The median.
    pub p50_ms: f64,
    /// The 99th percentile.
    pub p99_ms: f64,
    /// The 99.9th percentile.
    pub p999_ms: f64,
    /// The largest sample.
    pub max_ms: f64,
}

impl Percentiles {
    /// The percentiles of `samples` (milliseconds), by the nearest-rank method: every reported
    /// figure is a sample that was actually observed.
    pub fn of_ms(mut samples: Vec<f64>) -> Percentiles {
        samples.sort_by(f64::total_cmp);
        Percentiles::of_sorted(&samples)
    }

    /// The percentiles of `sorted`, ascending.
    fn of_sorted(sorted: &[f64]) -> Percentiles {
        let Some(&max_ms) = sorted.last() else {
            return Percentiles::default();
        };
        Percentiles {
            count: sorted.len(),
            p50_ms: nearest_rank(sorted, 0.50),
            p99_ms: nearest_rank(sorted, 0.99),
            p999_ms: nearest_rank(sorted, 0.999),
            max_ms,
        }
    }

    /// The percentiles of `durations`.
    pub fn of(durations: &[Duration]) -> Percentiles {
        Percentiles::of_ms(durations.iter().map(|d| d.as_secs_f64() * 1e3).collect())
    }
}

/// The share of the samples at or below each point of a distribution that [`distribution_ms`]
/// draws: every hundredth, then the tail a p99 hides.
const DISTRIBUTION_POINTS: [f64; 4] = [0.995, 0.999, 0.9999, 1.0];

/// The percentiles of `samples` (milliseconds) and their distribution: `(share, ms)` points,
/// the smallest sample with at least that share of the samples at or below it, for a plot of
/// the cumulative distribution.
pub fn distribution_ms(mut samples: Vec<f64>) -> (Percentiles, Vec<(f64, f64)>) {
    samples.sort_by(f64::total_cmp);
    if samples.is_empty() {
        return (Percentiles::default(), Vec::new());
    }
    let shares = (0..100)
        .map(|hundredth| f64::from(hundredth) / 100.0)
        .chain(DISTRIBUTION_POINTS);
    let points = shares
        .map(|share| (share, nearest_rank(&samples, share)))
        .collect();
    (Percentiles::of_sorted(&samples), points)
}

/// Nearest rank: the smallest of `sorted` (ascending, not empty) with at least `share` of them
/// at or below it.
fn nearest_rank(sorted: &[f64], share: f64) -> f64 {
    let position = (share * sorted.len() as f64).ceil() as usize;
    sorted[position.clamp(1, sorted.len()) - 1]
}

/// `numerator / denominator`, or 0 when the denominator is 0 (a figure that was not measured).
pub fn ratio(numerator: f64, denominator: f64) -> f64 {
    if denominator > 0.0 {
        numerator / denominator
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_are_observed_samples() {
        let samples: Vec<f64> = (1..=1000).map(f64::from).collect();
        let p = Percentiles::of_ms(samples);
        assert_eq!(p.count, 1000);
        assert_eq!(p.p50_ms, 500.0);
        assert_eq!(p.p99_ms, 990.0);
        assert_eq!(p.p999_ms, 999.0);
        assert_eq!(p.max_ms, 1000.0);
    }

    #[test]
    fn a_distribution_holds_every_hundredth_and_the_tail() {
        let samples: Vec<f64> = (1..=10_000).map(f64::from).collect();
        let (percentiles, points) = distribution_ms(samples);
        assert_eq!(percentiles.p99_ms, 9_900.0);
        assert_eq!(points.len(), 104);
        assert_eq!(points[0], (0.0, 1.0));
        assert_eq!(points[50], (0.5, 5_000.0));
        assert_eq!(points[points.len() - 2], (0.9999, 9_999.0));
        assert_eq!(points[points.len() - 1], (1.0, 10_000.0));
        assert!(distribution_ms(Vec::new()).1.is_empty());
    }

    #[test]
    fn a_single_sample_is_every_percentile() {
        let p = Percentiles::of_ms(vec![7.0]);
        assert_eq!(
            (p.p50_ms, p.p99_ms, p.p999_ms, p.max_ms),
            (7.0, 7.0, 7.0, 7.0)
        );
    }

    #[test]
    fn no_samples_give_zeroes_and_unsorted_input_is_sorted() {
        assert_eq!(Percentiles::of_ms(Vec::new()), Percentiles::default());
        let p = Percentiles::of_ms(vec![3.0, 1.0, 2.0]);
        assert_eq!((p.p50_ms, p.max_ms), (2.0, 3.0));
    }

    #[test]
    fn a_ratio_over_nothing_is_zero() {
        assert_eq!(ratio(1.0, 0.0), 0.0);
        assert_eq!(ratio(3.0, 2.0), 1.5);
    }
}
