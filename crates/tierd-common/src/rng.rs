//! Injected randomness.
//!
//! One root seed derives every random stream of a run ([`SeededRng::derive`]),
//! so a seed printed at start reproduces the run exactly. The generator is
//! xoshiro256** seeded through SplitMix64; it is fast, small and has no OS
//! dependency.

/// A source of pseudo-random numbers. Everything that needs randomness takes
/// one of these from its caller.
pub trait Rng {
    /// The next 64 uniformly distributed bits.
    fn next_u64(&mut self) -> u64;

    /// Uniform in `[0, 1)`, with 53 bits of precision.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `[0, bound)`. `bound` must be non-zero.
    fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "Rng::below(0)");
        // Lemire's multiply-shift with rejection: unbiased.
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let product = u128::from(self.next_u64()) * u128::from(bound);
            if (product as u64) >= threshold {
                return (product >> 64) as u64;
            }
        }
    }

    /// Uniform integer in `[low, high)`; `high` must exceed `low`.
    fn range(&mut self, low: u64, high: u64) -> u64 {
        assert!(high > low, "Rng::range({low}, {high})");
        low + self.below(high - low)
    }

    /// `true` with probability `probability` (clamped to `[0, 1]`).
    fn chance(&mut self, probability: f64) -> bool {
        self.next_f64() < probability
    }

    /// Exponentially distributed with the given mean.
    fn exponential(&mut self, mean: f64) -> f64 {
        // 1 - u is in (0, 1], so ln never sees zero.
        -mean * (1.0 - self.next_f64()).ln()
    }

    /// Normally distributed (Box-Muller).
    fn normal(&mut self, mean: f64, standard_deviation: f64) -> f64 {
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        mean + standard_deviation * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Log-normally distributed with the given median and shape `sigma`.
    fn log_normal(&mut self, median: f64, sigma: f64) -> f64 {
        median * self.normal(0.0, sigma).exp()
    }

    /// Pareto (type I) with scale `minimum` and shape `alpha`.
    fn pareto(&mut self, minimum: f64, alpha: f64) -> f64 {
        minimum / (1.0 - self.next_f64()).powf(1.0 / alpha)
    }
}

/// SplitMix64: used to expand one seed into generator state and to derive
/// child seeds.
#[inline]
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xoshiro256**, seeded from a single `u64`.
#[derive(Clone, Debug)]
pub struct SeededRng {
    state: [u64; 4],
    seed: u64,
}

impl SeededRng {
    pub fn new(seed: u64) -> Self {
        let mut expander = seed;
        let state = [
            splitmix64(&mut expander),
            splitmix64(&mut expander),
            splitmix64(&mut expander),
            splitmix64(&mut expander),
        ];
        Self { state, seed }
    }

    /// The seed this generator was created from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// An independent generator for a named sub-stream. The same parent seed and
    /// `stream` always give the same child, whatever else the parent was used
    /// for, so adding a consumer does not shift every other stream.
    pub fn derive(&self, stream: u64) -> SeededRng {
        let mut mix = self.seed ^ stream.wrapping_mul(0xd6e8_feb8_6659_fd93);
        SeededRng::new(splitmix64(&mut mix))
    }
}

impl Rng for SeededRng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        let result = self.state[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let shifted = self.state[1] << 17;
        self.state[2] ^= self.state[0];
        self.state[3] ^= self.state[1];
        self.state[1] ^= self.state[2];
        self.state[0] ^= self.state[3];
        self.state[2] ^= shifted;
        self.state[3] = self.state[3].rotate_left(45);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut first = SeededRng::new(42);
        let mut second = SeededRng::new(42);
        for _ in 0..100 {
            assert_eq!(first.next_u64(), second.next_u64());
        }
        assert_ne!(SeededRng::new(1).next_u64(), SeededRng::new(2).next_u64());
    }

    #[test]
    fn derived_streams_are_stable_and_distinct() {
        let root = SeededRng::new(7);
        assert_eq!(root.derive(3).next_u64(), root.derive(3).next_u64());
        assert_ne!(root.derive(3).next_u64(), root.derive(4).next_u64());
    }

    #[test]
    fn below_is_in_range_and_roughly_uniform() {
        let mut rng = SeededRng::new(9);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[rng.below(10) as usize] += 1;
        }
        for count in counts {
            assert!((9_500..10_500).contains(&count), "{counts:?}");
        }
    }

    #[test]
    fn distributions_have_their_means() {
        let mut rng = SeededRng::new(11);
        let samples = 200_000;
        let exponential_mean =
            (0..samples).map(|_| rng.exponential(3.0)).sum::<f64>() / samples as f64;
        assert!((exponential_mean - 3.0).abs() < 0.05, "{exponential_mean}");
        let normal_mean = (0..samples).map(|_| rng.normal(5.0, 2.0)).sum::<f64>() / samples as f64;
        assert!((normal_mean - 5.0).abs() < 0.03, "{normal_mean}");
        let unit = (0..samples).map(|_| rng.next_f64()).fold(0.0f64, f64::max);
        assert!(unit < 1.0);
    }
}
