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
        if samples.is_empty() {
            return Percentiles::default();
        }
        samples.sort_by(f64::total_cmp);
        let rank = |quantile: f64| {
            // Nearest rank: the smallest sample with at least `quantile` of them at or below it.
            let position = (quantile * samples.len() as f64).ceil() as usize;
            samples[position.clamp(1, samples.len()) - 1]
        };
        Percentiles {
            count: samples.len(),
            p50_ms: rank(0.50),
            p99_ms: rank(0.99),
            p999_ms: rank(0.999),
            max_ms: samples[samples.len() - 1],
        }
    }

    /// The percentiles of `durations`.
    pub fn of(durations: &[Duration]) -> Percentiles {
        Percentiles::of_ms(durations.iter().map(|d| d.as_secs_f64() * 1e3).collect())
    }
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
