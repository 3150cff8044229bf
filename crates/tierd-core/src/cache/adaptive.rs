//! Adaptive admission: the cache measures, while it runs, which admission
//! rule pays on the devices it has, and uses that one — including "admit
//! nothing", so a cache that would only cost (fills that are never hit
//! again, a home device that the fills' extra reads push into saturation)
//! stands aside and the volume runs as if it had no fast tier.
//!
//! ## How
//! - **Candidates**: off (admit nothing), `frequency:8`, `frequency:4`,
//!   `frequency:2`, `always`. The cache starts off and decides after each
//!   epoch.
//! - **Shadows** (miniature simulation, Waldspurger et al., ATC '17; spatial
//!   sampling as in SHARDS): one metadata-only copy of the cache per
//!   candidate that admits something — the same eviction policy and
//!   admission rule over a hash-sampled share of the blocks, scaled so a
//!   shadow holds at most [`SHADOW_BLOCKS`]. Each counts what its rule would
//!   have done: the bytes its hits would have served, its fills, the extra
//!   home bytes a fill reads (the whole block, not the part asked), merge
//!   reads and dirtied blocks (each costs one writeback).
//! - **Costs, measured**: the caller reports every device IO it completes
//!   (`observe_io`: which device, read or write, bytes, service time and
//!   response time). Per device and direction, service time is fitted as
//!   `fixed + per_byte × bytes` (exponentially weighted least squares,
//!   starting from a prior: the device model's own figures in the simulator
//!   and for emulated tiers, a deliberately slow generic disk otherwise), and
//!   the device's load is `x = Σ response / Σ service` over the epoch.
//! - **Value of busy time** (M/M/1 reasoning, `x = 1 / (1 − ρ)`): taking a
//!   request of service `S` off a device saves `S · x²` of user response in
//!   total (its own `S · x`, and the wait of those queued behind it, `S ·
//!   (x² − x)`); background work (writebacks, slot writes of fills) costs
//!   only the others' wait `S · (x² − x)`, nothing on an idle device; a
//!   user request made longer by `ΔS` (a fill reads a whole block) costs
//!   `ΔS · (1 + x² − x)`.
//! - **Gain** of a candidate over the epoch = home time its hits and
//!   absorbed writes save − home time its fills, merges and writebacks add −
//!   fast-tier time it uses, each weighted as above. Off gains 0. The best
//!   candidate is chosen when it beats the current one by more than
//!   [`SWITCH_MARGIN`] of the larger gain (hysteresis); counts decay by half
//!   each epoch so the choice follows the workload.
//!
//! Sans-IO: no clock, no IO. An epoch is a count of sampled block accesses,
//! so a replay at any speed decides at the same points of the request stream.

use std::fmt;

use tierd_common::hash::FastSet;
use tierd_policy::cache::{build_cache, CacheKind, PageCache};

use super::admission::FrequencyFilter;
use super::{BlockId, CacheMode};

/// Most blocks one shadow holds; the sampling rate is chosen so the
/// shadow of a large cache holds about this many.
pub const SHADOW_BLOCKS: u64 = 4096;
/// Sampled block accesses per epoch, at least (and at least as many as a
/// shadow holds, so each epoch sees a shadow's worth of turnover).
pub const EPOCH_MIN_ACCESSES: u64 = 2048;
/// A candidate replaces the current rule only when its gain exceeds the
/// current one's by this share of the larger magnitude.
pub const SWITCH_MARGIN: f64 = 0.10;
/// The load factor `x` is capped here (a device this far past saturation
/// is simply "saturated"; the cap keeps one epoch from swamping the rest).
pub const MAX_LOAD_FACTOR: f64 = 30.0;
/// Weight of the prior's pseudo-observations in the service-time fits.
const PRIOR_WEIGHT: f64 = 2.0;

/// A rule the adaptive admission can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Admit nothing: misses go home, hits on what is cached still hit.
    Off,
    /// Admit on the N-th miss within the window (N = 1: always).
    Misses(u8),
}

impl Rule {
    /// The candidates, from the most reluctant to the most eager.
    pub const CANDIDATES: [Rule; 5] = [
        Rule::Off,
        Rule::Misses(8),
        Rule::Misses(4),
        Rule::Misses(2),
        Rule::Misses(1),
    ];
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Off => f.write_str("off"),
            Rule::Misses(1) => f.write_str("always"),
            Rule::Misses(misses) => write!(f, "frequency:{misses}"),
        }
    }
}

/// Which device an IO went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRole {
    /// The cached volume's home device.
    Home,
    /// The fast tier holding the slots.
    Fast,
}

/// A device's service time before any IO is measured: `fixed_ns +
/// ns_per_byte × bytes`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServicePrior {
    pub fixed_ns: f64,
    pub ns_per_byte: f64,
}

impl ServicePrior {
    /// A prior from two measured (or modelled) service times: of a small
    /// and of a large IO.
    pub fn from_two(small_bytes: u64, small_ns: u64, large_bytes: u64, large_ns: u64) -> Self {
        let span = large_bytes.saturating_sub(small_bytes).max(1) as f64;
        let ns_per_byte = (large_ns as f64 - small_ns as f64).max(0.0) / span;
        let fixed_ns = (small_ns as f64 - ns_per_byte * small_bytes as f64).max(0.0);
        ServicePrior {
            fixed_ns,
            ns_per_byte,
        }
    }
}

/// Priors of the two devices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DevicePriors {
    pub home: ServicePrior,
    pub fast: ServicePrior,
}

impl Default for DevicePriors {
    /// Deliberately pessimistic about fills: a home device that reads at
    /// 100 MB/s after a 5 ms positioning (a slow disk) and a fast tier at
    /// 1 GB/s after 50 µs. Measurements replace these within an epoch or
    /// two; being slow-looking first only delays the first admission.
    fn default() -> Self {
        DevicePriors {
            home: ServicePrior {
                fixed_ns: 5_000_000.0,
                ns_per_byte: 10.0,
            },
            fast: ServicePrior {
                fixed_ns: 50_000.0,
                ns_per_byte: 1.0,
            },
        }
    }
}

/// Weighted sums of `(bytes, ns)` points for a least-squares line.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    n: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
}

impl Sums {
    fn add(&mut self, x: f64, y: f64, weight: f64) {
        self.n += weight;
        self.sx += weight * x;
        self.sy += weight * y;
        self.sxx += weight * x * x;
        self.sxy += weight * x * y;
    }

    fn scale(&mut self, factor: f64) {
        for sum in [
            &mut self.n,
            &mut self.sx,
            &mut self.sy,
            &mut self.sxx,
            &mut self.sxy,
        ] {
            *sum *= factor;
        }
    }
}

/// Exponentially weighted least squares of service time on bytes, with the
/// prior's slope as a ridge term: a few bytes' worth of spread that
/// measurements of varied sizes outweigh at once, but that still gives the
/// slope when every measured IO has one size (a 4 KiB workload says nothing
/// of what a 64 KiB fill costs).
#[derive(Clone, Copy, Debug)]
struct ServiceFit {
    prior: ServicePrior,
    measured: Sums,
}

/// The ridge weight: as much spread of sizes as [`PRIOR_WEIGHT`] IOs half
/// at 4 KiB and half at 64 KiB would give.
const PRIOR_SPREAD: f64 = PRIOR_WEIGHT * 30720.0 * 30720.0;

impl ServiceFit {
    fn new(prior: ServicePrior) -> ServiceFit {
        ServiceFit {
            prior,
            measured: Sums::default(),
        }
    }

    fn add(&mut self, bytes: f64, service_ns: f64) {
        self.measured.add(bytes, service_ns, 1.0);
    }

    /// Halves the weight of everything measured so far.
    fn decay(&mut self) {
        self.measured.scale(0.5);
    }

    /// `(fixed_ns, ns_per_byte)`, both ≥ 0.
    fn line(&self) -> (f64, f64) {
        let m = &self.measured;
        if m.n < 1.0 {
            return (self.prior.fixed_ns, self.prior.ns_per_byte);
        }
        let mean_x = m.sx / m.n;
        let mean_y = m.sy / m.n;
        let spread = (m.sxx - m.sx * mean_x).max(0.0);
        let co_spread = m.sxy - m.sx * mean_y;
        let slope = ((co_spread + PRIOR_SPREAD * self.prior.ns_per_byte) / (spread + PRIOR_SPREAD))
            .max(0.0);
        let fixed = (mean_y - slope * mean_x).max(0.0);
        (fixed, slope)
    }
}

/// What one device's IO cost, as the policy sees it.
#[derive(Clone, Copy, Debug)]
struct DeviceCost {
    read: ServiceFit,
    write: ServiceFit,
    response_ns: f64,
    service_ns: f64,
}

impl DeviceCost {
    fn new(prior: ServicePrior) -> DeviceCost {
        DeviceCost {
            read: ServiceFit::new(prior),
            write: ServiceFit::new(prior),
            response_ns: 0.0,
            service_ns: 0.0,
        }
    }

    /// `x = Σ response / Σ service` (1 with nothing measured).
    fn load_factor(&self) -> f64 {
        if self.service_ns <= 0.0 {
            return 1.0;
        }
        (self.response_ns / self.service_ns).clamp(1.0, MAX_LOAD_FACTOR)
    }

    fn decay(&mut self) {
        self.read.decay();
        self.write.decay();
        self.response_ns *= 0.5;
        self.service_ns *= 0.5;
    }
}

/// What a shadow's rule would have done (sampled blocks; decayed sums).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tally {
    /// Read bytes served by hits, and the requests' share of them (a
    /// request whose blocks all hit counts 1: it saves one home IO).
    pub read_hit_bytes: f64,
    pub read_hit_share: f64,
    /// Fills, and the home bytes they read beyond what the user asked.
    pub fills: f64,
    pub fill_extra_bytes: f64,
    /// Write bytes absorbed by slots (writeback), and their request share.
    pub write_bytes: f64,
    pub write_share: f64,
    /// Partial-block write allocations (each reads the block from home first).
    pub merges: f64,
    /// Clean blocks a write made dirty (each costs one writeback).
    pub dirtied: f64,
    /// Writethrough: slot bytes written beside home.
    pub through_bytes: f64,
}

impl Tally {
    fn decay(&mut self) {
        for value in [
            &mut self.read_hit_bytes,
            &mut self.read_hit_share,
            &mut self.fills,
            &mut self.fill_extra_bytes,
            &mut self.write_bytes,
            &mut self.write_share,
            &mut self.merges,
            &mut self.dirtied,
            &mut self.through_bytes,
        ] {
            *value *= 0.5;
        }
    }
}

/// One candidate's metadata-only cache.
struct Shadow {
    rule: Rule,
    policy: Box<dyn PageCache>,
    filter: FrequencyFilter,
    dirty: FastSet<BlockId>,
    tally: Tally,
}

impl Shadow {
    fn admits(&mut self, block: BlockId) -> bool {
        match self.rule {
            Rule::Off => false,
            Rule::Misses(1) => true,
            Rule::Misses(_) => self.filter.miss(block),
        }
    }

    fn insert(&mut self, block: BlockId, is_write: bool) {
        if let Some(victim) = self.policy.access(block, is_write).evicted {
            self.dirty.remove(&victim.page);
        }
    }
}

/// Why the cache admits what it admits: for status and reports.
#[derive(Clone, Debug, PartialEq)]
pub struct AdaptiveStatus {
    /// The rule in force.
    pub rule: Rule,
    pub epochs: u64,
    pub switches: u64,
    /// Epochs each candidate rule was in force, in [`Rule::CANDIDATES`] order.
    pub epochs_by_rule: [u64; 5],
    /// Each candidate's gain over the last epoch, in ns of user response
    /// saved (scaled from the sample; off is 0).
    pub gains_ns: Vec<(Rule, f64)>,
    /// Load factors `x` of home and the fast tier at the last decision.
    pub home_load: f64,
    pub fast_load: f64,
    /// Service-time fits at the last decision: `(fixed_ns, ns_per_byte)`
    /// of home reads and fast-tier reads.
    pub home_read: (f64, f64),
    pub fast_read: (f64, f64),
    /// The share of blocks the shadows see.
    pub sample_rate: f64,
}

/// The adaptive admission state of one cache.
pub(crate) struct Adaptive {
    rule: Rule,
    /// The live frequency filter (its threshold follows the rule).
    filter: FrequencyFilter,
    shadows: Vec<Shadow>,
    block_bytes: u64,
    volume_bytes: u64,
    sample_below: u64,
    sample_rate: f64,
    epoch_accesses: u64,
    accesses: u64,
    home: DeviceCost,
    fast: DeviceCost,
    status: AdaptiveStatus,
}

impl fmt::Debug for Adaptive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Adaptive")
            .field("rule", &self.rule)
            .field("sample_rate", &self.sample_rate)
            .finish_non_exhaustive()
    }
}

/// A block's place in `0..u64::MAX`, uniform over blocks (for sampling).
fn block_hash(block: BlockId) -> u64 {
    let mut x = block.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Adaptive {
    /// Adaptive admission for a cache whose policy (`kind`) holds
    /// `capacity_blocks` blocks of `block_bytes`; the frequency window
    /// holds `window_blocks` entries, as the fixed rules' does.
    pub(crate) fn new(
        kind: CacheKind,
        capacity_blocks: u64,
        window_blocks: u64,
        block_bytes: u64,
        volume_bytes: u64,
        priors: DevicePriors,
    ) -> Adaptive {
        let capacity_blocks = capacity_blocks.max(1);
        let sample_rate = (SHADOW_BLOCKS as f64 / capacity_blocks as f64).min(1.0);
        let shadow_blocks = ((capacity_blocks as f64 * sample_rate).round() as u64).max(1);
        let shadow_window = ((window_blocks as f64 * sample_rate).round() as u64).max(1);
        let sample_below = if sample_rate >= 1.0 {
            u64::MAX
        } else {
            (sample_rate * u64::MAX as f64) as u64
        };
        let shadows = Rule::CANDIDATES
            .iter()
            .filter(|rule| **rule != Rule::Off)
            .map(|&rule| Shadow {
                rule,
                policy: build_cache(kind, shadow_blocks),
                filter: FrequencyFilter::new(
                    match rule {
                        Rule::Misses(misses) => misses.max(2),
                        Rule::Off => 2,
                    },
                    shadow_window,
                ),
                dirty: FastSet::default(),
                tally: Tally::default(),
            })
            .collect();
        let home = DeviceCost::new(priors.home);
        let fast = DeviceCost::new(priors.fast);
        Adaptive {
            rule: Rule::Off,
            filter: FrequencyFilter::new(2, window_blocks),
            shadows,
            block_bytes,
            volume_bytes,
            sample_below,
            sample_rate,
            epoch_accesses: EPOCH_MIN_ACCESSES.max(shadow_blocks),
            accesses: 0,
            status: AdaptiveStatus {
                rule: Rule::Off,
                epochs: 0,
                switches: 0,
                epochs_by_rule: [0; 5],
                gains_ns: Vec::new(),
                home_load: 1.0,
                fast_load: 1.0,
                home_read: home.read.line(),
                fast_read: fast.read.line(),
                sample_rate,
            },
            home,
            fast,
        }
    }

    #[cfg(test)]
    pub(crate) fn rule(&self) -> Rule {
        self.rule
    }

    pub(crate) fn status(&self) -> &AdaptiveStatus {
        &self.status
    }

    /// Counts a miss of `block` under the rule in force; whether it is admitted.
    pub(crate) fn admit(&mut self, block: BlockId) -> bool {
        match self.rule {
            Rule::Off => false,
            Rule::Misses(1) => true,
            Rule::Misses(_) => self.filter.miss(block),
        }
    }

    /// A device IO completed.
    pub(crate) fn observe_io(
        &mut self,
        role: DeviceRole,
        is_write: bool,
        bytes: u64,
        service_ns: u64,
        response_ns: u64,
    ) {
        let device = match role {
            DeviceRole::Home => &mut self.home,
            DeviceRole::Fast => &mut self.fast,
        };
        let fit = if is_write {
            &mut device.write
        } else {
            &mut device.read
        };
        fit.add(bytes as f64, service_ns as f64);
        device.service_ns += service_ns as f64;
        device.response_ns += response_ns.max(service_ns) as f64;
    }

    /// A user request: every shadow sees its sampled blocks.
    pub(crate) fn observe_request(
        &mut self,
        offset_bytes: u64,
        length_bytes: u64,
        is_write: bool,
        sequential: bool,
        mode: CacheMode,
    ) {
        if length_bytes == 0 {
            return;
        }
        let block_bytes = self.block_bytes;
        let end = offset_bytes + length_bytes;
        let first = offset_bytes / block_bytes;
        let last = (end - 1) / block_bytes;
        for block in first..=last {
            if block_hash(block) > self.sample_below {
                continue;
            }
            let start = block * block_bytes;
            let block_len = block_bytes
                .min(self.volume_bytes.saturating_sub(start))
                .max(1);
            let part = (end.min(start + block_len) - offset_bytes.max(start)) as f64;
            let share = part / length_bytes as f64;
            let extra = block_len as f64 - part;
            self.accesses += 1;
            for shadow in &mut self.shadows {
                let hit = shadow.policy.contains(block);
                if hit {
                    shadow.policy.access(block, is_write);
                }
                let tally = &mut shadow.tally;
                match (is_write, hit) {
                    (false, true) => {
                        tally.read_hit_bytes += part;
                        tally.read_hit_share += share;
                    }
                    (false, false) => {
                        if !sequential && shadow.admits(block) {
                            shadow.insert(block, false);
                            shadow.tally.fills += 1.0;
                            shadow.tally.fill_extra_bytes += extra;
                        }
                    }
                    (true, hit) => {
                        let allocate = !hit
                            && mode != CacheMode::Writearound
                            && !sequential
                            && shadow.admits(block);
                        if !hit && !allocate {
                            continue;
                        }
                        if allocate {
                            shadow.insert(block, true);
                            if extra > 0.0 {
                                shadow.tally.merges += 1.0;
                            }
                        }
                        let tally = &mut shadow.tally;
                        if mode == CacheMode::Writeback {
                            tally.write_bytes += part;
                            tally.write_share += share;
                            if shadow.dirty.insert(block) {
                                tally.dirtied += 1.0;
                            }
                        } else {
                            tally.through_bytes += part;
                        }
                    }
                }
            }
        }
        if self.accesses >= self.epoch_accesses {
            self.accesses = 0;
            self.decide();
        }
    }

    /// The user response a shadow's rule would have saved over the epoch, in ns.
    fn gain_ns(&self, tally: &Tally) -> f64 {
        let block = self.block_bytes as f64;
        let (home_read_fixed, home_read_byte) = self.home.read.line();
        let (home_write_fixed, home_write_byte) = self.home.write.line();
        let (fast_read_fixed, fast_read_byte) = self.fast.read.line();
        let (fast_write_fixed, fast_write_byte) = self.fast.write.line();
        let xh = self.home.load_factor();
        let xf = self.fast.load_factor();
        // Taking user IO off a device, or putting it on.
        let user_h = xh * xh;
        let user_f = xf * xf;
        // Background IO: only those queued behind it wait.
        let background_h = xh * xh - xh;
        let background_f = xf * xf - xf;
        // A user IO made longer.
        let longer_h = 1.0 + xh * xh - xh;

        let home_saved = user_h
            * (home_read_fixed * tally.read_hit_share
                + home_read_byte * tally.read_hit_bytes
                + home_write_fixed * tally.write_share
                + home_write_byte * tally.write_bytes);
        let home_added = longer_h * home_read_byte * tally.fill_extra_bytes
            + user_h * tally.merges * (home_read_fixed + home_read_byte * block)
            + background_h * tally.dirtied * (home_write_fixed + home_write_byte * block);
        let fast_used = user_f
            * (fast_read_fixed * tally.read_hit_share
                + fast_read_byte * tally.read_hit_bytes
                + fast_write_fixed * tally.write_share
                + fast_write_byte * (tally.write_bytes + tally.through_bytes)
                + tally.merges * fast_write_byte * block)
            + background_f
                * (tally.fills * (fast_write_fixed + fast_write_byte * block)
                    + tally.dirtied * (fast_read_fixed + fast_read_byte * block));
        (home_saved - home_added - fast_used) / self.sample_rate
    }

    fn decide(&mut self) {
        let mut gains: Vec<(Rule, f64)> = vec![(Rule::Off, 0.0)];
        for shadow in &self.shadows {
            gains.push((shadow.rule, self.gain_ns(&shadow.tally)));
        }
        let gain_of = |rule: Rule| {
            gains
                .iter()
                .find(|(candidate, _)| *candidate == rule)
                .map_or(0.0, |(_, gain)| *gain)
        };
        let current = gain_of(self.rule);
        let (best_rule, best) = gains.iter().copied().fold(
            (Rule::Off, 0.0),
            |(rule, gain), (candidate, candidate_gain)| {
                if candidate_gain > gain {
                    (candidate, candidate_gain)
                } else {
                    (rule, gain)
                }
            },
        );
        let margin = SWITCH_MARGIN * best.abs().max(current.abs());
        if best_rule != self.rule && best > current + margin {
            self.rule = best_rule;
            self.status.switches += 1;
            if let Rule::Misses(misses) = best_rule {
                self.filter.set_misses(misses.max(2));
            }
        }
        if let Some(index) = Rule::CANDIDATES.iter().position(|rule| *rule == self.rule) {
            self.status.epochs_by_rule[index] += 1;
        }
        self.status.rule = self.rule;
        self.status.epochs += 1;
        self.status.home_load = self.home.load_factor();
        self.status.fast_load = self.fast.load_factor();
        self.status.home_read = self.home.read.line();
        self.status.fast_read = self.fast.read.line();
        self.status.gains_ns = gains;
        for shadow in &mut self.shadows {
            shadow.tally.decay();
        }
        self.home.decay();
        self.fast.decay();
    }
}

/// Resident blocks of a shadow, for tests.
#[cfg(test)]
impl Adaptive {
    fn shadow_len(&self, rule: Rule) -> u64 {
        self.shadows
            .iter()
            .find(|shadow| shadow.rule == rule)
            .map_or(0, |shadow| shadow.policy.len())
    }

    fn tally(&self, rule: Rule) -> Tally {
        self.shadows
            .iter()
            .find(|shadow| shadow.rule == rule)
            .map(|shadow| shadow.tally)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    fn adaptive(capacity: u64) -> Adaptive {
        Adaptive::new(
            CacheKind::S3fifo,
            capacity,
            capacity,
            64 * KIB,
            1 << 40,
            DevicePriors::default(),
        )
    }

    #[test]
    fn a_prior_from_two_points_is_the_line_through_them() {
        let prior = ServicePrior::from_two(4096, 8_040_960, 1 << 20, 18_000_000);
        assert!((prior.ns_per_byte - 9.5).abs() < 0.1, "{prior:?}");
        assert!((prior.fixed_ns - 8_002_000.0).abs() < 1000.0, "{prior:?}");
        let fit = ServiceFit::new(prior);
        let (fixed, per_byte) = fit.line();
        assert!(
            (fixed - prior.fixed_ns).abs() < 1.0 && (per_byte - prior.ns_per_byte).abs() < 1e-6
        );
    }

    #[test]
    fn the_fit_learns_the_devices_line_from_what_it_measures() {
        let mut fit = ServiceFit::new(DevicePriors::default().home);
        // Ten epochs of 1000 measurements of a device at 100 µs + 2 ns/B
        // outweigh the prior (5 ms + 10 ns/B).
        for epoch in 0..10u64 {
            for round in 0..1000u64 {
                let bytes = 4096 << ((epoch + round) % 6);
                fit.add(bytes as f64, 100_000.0 + 2.0 * bytes as f64);
            }
            fit.decay();
        }
        let (fixed, per_byte) = fit.line();
        assert!((per_byte - 2.0).abs() < 0.1, "{per_byte}");
        assert!((fixed - 100_000.0).abs() < 20_000.0, "{fixed}");
        // One size only: the prior still gives the slope.
        let mut fit = ServiceFit::new(DevicePriors::default().home);
        for _ in 0..10_000 {
            fit.add(4096.0, 8_000_000.0);
        }
        let (fixed, per_byte) = fit.line();
        assert!((per_byte - 10.0).abs() < 0.5, "{per_byte}");
        assert!(
            (fixed + 4096.0 * per_byte - 8_000_000.0).abs() < 10_000.0,
            "{fixed}"
        );
    }

    #[test]
    fn scattered_reads_that_never_return_keep_the_cache_off() {
        let mut cache = adaptive(1024);
        for request in 0..50_000u64 {
            // Every block read once: no candidate gets a hit.
            let offset = block_hash(request) % (1 << 34) / 4096 * 4096;
            cache.observe_request(offset, 4096, false, false, CacheMode::Writeback);
            cache.observe_io(DeviceRole::Home, false, 4096, 5_000_000, 5_000_000);
        }
        assert!(cache.status().epochs >= 10);
        assert_eq!(cache.rule(), Rule::Off, "{:?}", cache.status());
        // An eager shadow filled, and paid for it; a reluctant one never admitted.
        assert!(cache.tally(Rule::Misses(1)).fills > 0.0);
        assert!(cache.gain_ns(&cache.tally(Rule::Misses(1))) < 0.0);
        assert_eq!(cache.shadow_len(Rule::Misses(8)), 0);
    }

    #[test]
    fn a_small_hot_set_is_admitted() {
        let mut cache = adaptive(1024);
        for request in 0..50_000u64 {
            // 256 blocks read over and over.
            let offset = (block_hash(request) % 256) * 64 * KIB;
            cache.observe_request(offset, 4096, false, false, CacheMode::Writeback);
            cache.observe_io(DeviceRole::Home, false, 4096, 5_000_000, 5_000_000);
        }
        assert_ne!(cache.rule(), Rule::Off, "{:?}", cache.status());
        let gains = &cache.status().gains_ns;
        assert!(
            gains
                .iter()
                .all(|(rule, gain)| *rule == Rule::Off || *gain > 0.0),
            "{gains:?}"
        );
    }

    #[test]
    fn fills_that_saturate_home_are_not_paid_for() {
        // Reuse over a working set eight times the cache, and a home device
        // saturated (response 20× service) that pays 10 ns a byte: each
        // 64 KiB fill's extra 60 KiB costs more queueing than the rare hits
        // save. The eager rules lose; what is left admits (almost) nothing.
        let mut cache = adaptive(256);
        for request in 0..100_000u64 {
            let offset = (block_hash(request) % 2048) * 64 * KIB;
            cache.observe_request(offset, 4096, false, false, CacheMode::Writeback);
            let service = 100_000 + 10 * 4096;
            cache.observe_io(DeviceRole::Home, false, 4096, service, 20 * service);
            cache.observe_io(
                DeviceRole::Home,
                false,
                64 * KIB,
                100_000 + 10 * 64 * KIB,
                0,
            );
        }
        let status = cache.status();
        assert!(
            matches!(status.rule, Rule::Off | Rule::Misses(4..)),
            "{status:?}"
        );
        for eager in [Rule::Misses(1), Rule::Misses(2)] {
            assert!(cache.gain_ns(&cache.tally(eager)) < 0.0, "{status:?}");
        }
        assert!(status.home_load > 2.0, "{status:?}");
    }

    #[test]
    fn sampling_keeps_a_large_caches_shadows_small() {
        let cache = adaptive(1 << 20);
        assert!((cache.sample_rate - SHADOW_BLOCKS as f64 / (1 << 20) as f64).abs() < 1e-12);
        let sampled = (0..1u64 << 20)
            .filter(|&block| block_hash(block) <= cache.sample_below)
            .count() as f64;
        let expected = (1u64 << 20) as f64 * cache.sample_rate;
        assert!(
            (sampled - expected).abs() < 0.1 * expected,
            "{sampled} vs {expected}"
        );
    }
}
