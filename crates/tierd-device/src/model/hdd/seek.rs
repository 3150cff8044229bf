//! The seek curve: datasheet figures and the two-piece curve fitted to them.

use serde::{Deserialize, Serialize};

use super::shared::ms_to_ns;

/// Datasheet seek figures for one direction (read or write), without the
/// controller overhead.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeekFigures {
    pub track_to_track_ms: f64,
    /// Mean over uniformly random start and end cylinders.
    pub average_ms: f64,
    pub full_stroke_ms: f64,
}

/// Seek time against distance in cylinders: `a + b·√d` for `d ≤ knee`,
/// `c + e·d` beyond, continuous with a continuous slope at the knee.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeekCurve {
    knee_cylinders: f64,
    sqrt_base_ns: f64,
    sqrt_slope_ns: f64,
    line_base_ns: f64,
    line_slope_ns: f64,
}

impl SeekCurve {
    /// Fits the curve to the three datasheet points over `cylinders`:
    /// `s(1)` = track-to-track, `s(cylinders − 1)` = full stroke, and the
    /// mean of `s(|X − Y|)` for X, Y uniform over the cylinders = average.
    /// Value and slope continuity at the knee leave the knee as the one free
    /// parameter, found by bisection (the mean grows with the knee). An
    /// average outside what the family can give is clamped to the nearest
    /// achievable curve.
    pub fn fit(figures: &SeekFigures, cylinders: u32) -> SeekCurve {
        let track_ns = ms_to_ns(figures.track_to_track_ms);
        let full_ns = ms_to_ns(figures.full_stroke_ms);
        let average_ns = ms_to_ns(figures.average_ms);
        let count = f64::from(cylinders.max(3));
        let mut low = 1.0f64;
        let mut high = count - 1.0;
        if Self::with_knee(track_ns, full_ns, count, low).mean_ns(cylinders) >= average_ns {
            return Self::with_knee(track_ns, full_ns, count, low);
        }
        if Self::with_knee(track_ns, full_ns, count, high).mean_ns(cylinders) <= average_ns {
            return Self::with_knee(track_ns, full_ns, count, high);
        }
        for _ in 0..200 {
            let middle = 0.5 * (low + high);
            if Self::with_knee(track_ns, full_ns, count, middle).mean_ns(cylinders) < average_ns {
                low = middle;
            } else {
                high = middle;
            }
        }
        Self::with_knee(track_ns, full_ns, count, 0.5 * (low + high))
    }

    fn with_knee(track_ns: f64, full_ns: f64, count: f64, knee: f64) -> SeekCurve {
        let root = knee.sqrt();
        let sqrt_slope_ns =
            (full_ns - track_ns) / (root / 2.0 + (count - 1.0) / (2.0 * root) - 1.0);
        let sqrt_base_ns = track_ns - sqrt_slope_ns;
        SeekCurve {
            knee_cylinders: knee,
            sqrt_base_ns,
            sqrt_slope_ns,
            line_base_ns: sqrt_base_ns + sqrt_slope_ns * root / 2.0,
            line_slope_ns: sqrt_slope_ns / (2.0 * root),
        }
    }

    /// Seek time for a move of `distance` cylinders (zero for no move).
    #[inline]
    pub fn time_ns(&self, distance: u32) -> f64 {
        if distance == 0 {
            return 0.0;
        }
        let d = f64::from(distance);
        if d <= self.knee_cylinders {
            self.sqrt_base_ns + self.sqrt_slope_ns * d.sqrt()
        } else {
            self.line_base_ns + self.line_slope_ns * d
        }
    }

    /// Mean seek time over uniformly random start and end cylinders
    /// (distance density `2(N − d)/N²`), in closed form.
    pub fn mean_ns(&self, cylinders: u32) -> f64 {
        let n = f64::from(cylinders.max(2));
        let knee = self.knee_cylinders.min(n);
        let sqrt_part = self.sqrt_base_ns * (n * knee - knee * knee / 2.0)
            + self.sqrt_slope_ns * (2.0 * n / 3.0 * knee.powf(1.5) - 0.4 * knee.powf(2.5));
        let line = |x: f64| {
            self.line_base_ns * (n * x - x * x / 2.0)
                + self.line_slope_ns * (n * x * x / 2.0 - x * x * x / 3.0)
        };
        2.0 * (sqrt_part + line(n) - line(knee)) / (n * n)
    }

    /// Distance in cylinders where the curve turns from √ to linear.
    pub fn knee_cylinders(&self) -> f64 {
        self.knee_cylinders
    }

    /// `(a, b, c, e)` in milliseconds: `a + b·√d`, then `c + e·d`.
    pub fn coefficients_ms(&self) -> (f64, f64, f64, f64) {
        (
            self.sqrt_base_ns / 1e6,
            self.sqrt_slope_ns / 1e6,
            self.line_base_ns / 1e6,
            self.line_slope_ns / 1e6,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hdd::HddConfig;

    #[test]
    fn seek_fit_reproduces_the_calibration_curve() {
        // CALIBRATION.md: read 0.283 + 0.0166·√d for d ≤ 45,240, else
        // 2.049 + 3.90e-5·d (ms), for the Savvio 10K.4.
        let config = HddConfig::savvio_10k4();
        let curve = SeekCurve::fit(&config.read_seek, config.cylinders);
        let (a, b, c, e) = curve.coefficients_ms();
        assert!((a - 0.283).abs() < 0.01, "a = {a}");
        assert!((b - 0.0166).abs() < 0.0005, "b = {b}");
        assert!((c - 2.049).abs() < 0.03, "c = {c}");
        assert!((e - 3.90e-5).abs() < 0.1e-5, "e = {e}");
        assert!((curve.knee_cylinders() - 45_240.0).abs() < 1_500.0);
        assert!((curve.time_ns(1) / 1e6 - 0.30).abs() < 1e-6);
        assert!((curve.time_ns(config.cylinders - 1) / 1e6 - 7.81).abs() < 1e-3);
        assert!((curve.mean_ns(config.cylinders) / 1e6 - 3.8).abs() < 1e-6);
    }

    #[test]
    fn mean_in_closed_form_matches_a_numeric_average() {
        let curve = SeekCurve::fit(
            &SeekFigures {
                track_to_track_ms: 0.2,
                average_ms: 3.4,
                full_stroke_ms: 6.6,
            },
            1_000,
        );
        let mut total = 0.0;
        let mut count = 0.0;
        for x in 0..1_000u32 {
            for y in 0..1_000u32 {
                total += curve.time_ns(x.abs_diff(y));
                count += 1.0;
            }
        }
        let numeric = total / count;
        let closed = curve.mean_ns(1_000);
        assert!(
            (numeric - closed).abs() / closed < 0.01,
            "{numeric} vs {closed}"
        );
    }
}
