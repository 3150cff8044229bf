//! The plan of one busy window: its volume spikes (rate bumps), scaled to the
//! preset's mean and peak, and its data spikes (hot spots). A plan is built
//! when the generator enters a window and dropped when it leaves, so memory
//! does not grow with the length of the run.

use std::collections::VecDeque;

use tierd_common::rng::{Rng, SeededRng};

use crate::model::{Arrival, Model, Span, SpikeClass, NEW_PLACE_DISTANCE_BYTES};

/// Seconds per generator tick: the rate and the live spikes are evaluated
/// once per tick (at its midpoint) and held constant inside it.
pub(crate) const TICK_S: f64 = 1.0;

/// How many earlier start places a class remembers for revisits.
const HISTORY_LENGTH: usize = 16;

/// Onset–plateau–decay shape, 0 outside `[start, start + onset + plateau + decay)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Shape {
    pub start_s: f64,
    pub onset_s: f64,
    pub plateau_s: f64,
    pub decay_s: f64,
}

impl Shape {
    pub fn end_s(&self) -> f64 {
        self.start_s + self.onset_s + self.plateau_s + self.decay_s
    }

    /// Height in `[0, 1]` at time `time_s`.
    pub fn at(&self, time_s: f64) -> f64 {
        let since = time_s - self.start_s;
        if since < 0.0 || time_s >= self.end_s() {
            return 0.0;
        }
        if since < self.onset_s {
            return since / self.onset_s;
        }
        let into_decay = since - self.onset_s - self.plateau_s;
        if into_decay < 0.0 {
            return 1.0;
        }
        (1.0 - into_decay / self.decay_s).clamp(0.0, 1.0)
    }

    fn draw(start_s: f64, onset: Span, plateau: Span, decay: Span, rng: &mut SeededRng) -> Self {
        Self {
            start_s,
            onset_s: onset.draw(rng).max(0.0),
            plateau_s: plateau.draw(rng).max(0.0),
            decay_s: decay.draw(rng).max(0.0),
        }
    }
}

/// One data spike of a plan.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Spike {
    pub shape: Shape,
    pub class: usize,
    pub peak_share: f64,
    pub center_bytes: f64,
    pub width_bytes: f64,
    /// 0 when the spike does not drift.
    pub drift_interval_s: f64,
    /// Signed step per interval.
    pub drift_step_bytes: f64,
    /// Bytes of room the drift walks back and forth in, from where the spike
    /// starts on the way it first walks; 0: the whole volume
    /// ([`SpikeClass::drift_range_bytes`]).
    pub drift_range_bytes: f64,
    /// Where this spike's previous request ended (sequential runs).
    pub last_end_bytes: u64,
}

impl Spike {
    /// Centre at `time_s`, after the drift steps taken so far; a drifting
    /// spike bounces off the ends of the volume, or of its drift range when
    /// it has one.
    pub fn center_at(&self, time_s: f64, volume_bytes: f64) -> f64 {
        if self.drift_interval_s <= 0.0 {
            return self.center_bytes;
        }
        let steps = ((time_s - self.shape.start_s).max(0.0) / self.drift_interval_s).floor();
        let (low, high) = self.center_bounds(volume_bytes);
        reflect(self.center_bytes + steps * self.drift_step_bytes, low, high)
    }

    /// The lowest and highest centre the spike's drift reaches.
    fn center_bounds(&self, volume_bytes: f64) -> (f64, f64) {
        let half = self.width_bytes / 2.0;
        let (mut low, mut high) = (half, volume_bytes - half);
        if self.drift_range_bytes > self.width_bytes {
            let reach = self.drift_range_bytes - self.width_bytes;
            if self.drift_step_bytes >= 0.0 {
                low = low.max(self.center_bytes);
                high = high.min(self.center_bytes + reach);
            } else {
                low = low.max(self.center_bytes - reach);
                high = high.min(self.center_bytes);
            }
        }
        (low, high.max(low))
    }
}

/// Folds `value` into `[low, high]` by reflecting at both ends.
fn reflect(value: f64, low: f64, high: f64) -> f64 {
    let length = high - low;
    if length <= 0.0 {
        return (low + high) / 2.0;
    }
    let folded = (value - low).rem_euclid(2.0 * length);
    if folded <= length {
        low + folded
    } else {
        low + 2.0 * length - folded
    }
}

/// A place a spike of the class started at, the range it covered over its
/// life (drift included), and when (absolute seconds from the start of the
/// run) it ended.
#[derive(Clone, Copy, Debug)]
struct Visit {
    center_bytes: f64,
    low_bytes: f64,
    high_bytes: f64,
    end_s: f64,
}

/// What a class carries from one window to the next: quota credits and the
/// places its spikes started at.
#[derive(Clone, Debug)]
pub(crate) struct ClassState {
    revisit_credit: f64,
    drift_credit: f64,
    history: VecDeque<Visit>,
}

impl ClassState {
    pub fn new(rng: &mut SeededRng) -> Self {
        Self {
            revisit_credit: rng.next_f64(),
            drift_credit: rng.next_f64(),
            history: VecDeque::with_capacity(HISTORY_LENGTH),
        }
    }

    /// Quota assignment: true for `fraction` of calls in the long run, with
    /// the phase set by the initial credit.
    fn take(credit: &mut f64, fraction: f64) -> bool {
        *credit += fraction.clamp(0.0, 1.0);
        if *credit >= 1.0 {
            *credit -= 1.0;
            true
        } else {
            false
        }
    }

    fn remember(&mut self, visit: Visit) {
        if self.history.len() == HISTORY_LENGTH {
            self.history.pop_front();
        }
        self.history.push_back(visit);
    }
}

/// A busy window's plan.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub bumps: Vec<Shape>,
    /// Rate at time t: `scale * (1 + amplitude * sum of bumps at t)`.
    pub scale: f64,
    pub amplitude: f64,
    pub spikes: Vec<Spike>,
}

impl Plan {
    pub fn rate(&self, time_s: f64) -> f64 {
        let bumps: f64 = self.bumps.iter().map(|bump| bump.at(time_s)).sum();
        self.scale * (1.0 + self.amplitude * bumps)
    }

    /// Builds the plan of the window that starts `window_start_s` seconds
    /// into the run. `rng` is this window's own stream.
    pub fn build(
        model: &Model,
        volume_bytes: u64,
        window_start_s: f64,
        states: &mut [ClassState],
        rng: &mut SeededRng,
    ) -> Plan {
        let window_s = model.window_hours * 3600.0;
        let bumps: Vec<Shape> = (0..model.volume_spikes.count)
            .map(|_| {
                let spikes = &model.volume_spikes;
                let start_s = spikes.start_fraction.draw(rng) * window_s;
                Shape::draw(
                    start_s,
                    spikes.onset_s,
                    spikes.plateau_s,
                    spikes.decay_s,
                    rng,
                )
            })
            .collect();
        let (scale, amplitude) = normalise(
            &bumps,
            window_s,
            model.window_mean_iops,
            model.window_peak_iops,
        );
        let mut spikes = Vec::new();
        for (index, class) in model.spike_classes.iter().enumerate() {
            let shapes = class_shapes(class, window_s, rng);
            // Widths and shares stratified over the window's spikes (one per
            // quantile slot, in random order), so a window's mix of narrow
            // and wide, weak and strong spikes does not swing with the seed.
            let count = shapes.len();
            let width_order = permutation(count, rng);
            let share_order = permutation(count, rng);
            let mut placer = Placer {
                index,
                class,
                volume_bytes: volume_bytes as f64,
                window_start_s,
                state: &mut states[index],
            };
            for (slot, shape) in shapes.into_iter().enumerate() {
                let width_fraction = (width_order[slot] as f64 + rng.next_f64()) / count as f64;
                let share_fraction = (share_order[slot] as f64 + rng.next_f64()) / count as f64;
                let spike = placer.place(shape, width_fraction, share_fraction, &spikes, rng);
                spikes.push(spike);
            }
        }
        Plan {
            bumps,
            scale,
            amplitude,
            spikes,
        }
    }
}

/// The address range `spike` covers over its life.
fn swept_range(spike: &Spike, volume_bytes: f64) -> (f64, f64) {
    let half = spike.width_bytes / 2.0;
    let (mut low, mut high) = (spike.center_bytes, spike.center_bytes);
    if spike.drift_interval_s > 0.0 {
        let life_s = spike.shape.end_s() - spike.shape.start_s;
        let steps = ((life_s / spike.drift_interval_s).floor() as usize).min(MAX_SPIKES_PER_CLASS);
        for step in 1..=steps {
            let center = spike.center_at(
                spike.shape.start_s + step as f64 * spike.drift_interval_s,
                volume_bytes,
            );
            low = low.min(center);
            high = high.max(center);
        }
    }
    (low - half, high + half)
}

/// A uniformly random permutation of `0..count` (Fisher–Yates).
fn permutation(count: usize, rng: &mut SeededRng) -> Vec<usize> {
    let mut order: Vec<usize> = (0..count).collect();
    for index in (1..count).rev() {
        let other = rng.below(index as u64 + 1) as usize;
        order.swap(index, other);
    }
    order
}

/// Upper bound on one class's spikes in one window (keeps a plan small
/// whatever a preset says).
const MAX_SPIKES_PER_CLASS: usize = 10_000;

/// Tries at finding a new place away from recent ones.
const NEW_PLACE_TRIES: usize = 8;

/// The shapes (times) of one class's spikes in a window, in start order.
fn class_shapes(class: &SpikeClass, window_s: f64, rng: &mut SeededRng) -> Vec<Shape> {
    let mut shapes = Vec::new();
    if class.concurrent <= 0.0 {
        return shapes;
    }
    let draw = |start_s: f64, rng: &mut SeededRng| {
        Shape::draw(start_s, class.onset_s, class.plateau_s, class.decay_s, rng)
    };
    let lanes = class.concurrent.round().max(1.0) as usize;
    match class.arrival {
        Arrival::Persistent => {
            for _ in 0..lanes {
                let mut shape = draw(0.0, rng);
                shape.start_s = -shape.onset_s;
                shape.plateau_s = shape.plateau_s.max(window_s);
                shapes.push(shape);
            }
        }
        Arrival::Chain => {
            for _ in 0..lanes {
                // Open inside the first spike's plateau.
                let mut shape = draw(0.0, rng);
                shape.start_s = -shape.onset_s - rng.next_f64() * shape.plateau_s;
                loop {
                    let next_start_s = shape.start_s + shape.onset_s + shape.plateau_s;
                    let decay_s = shape.decay_s;
                    shapes.push(shape);
                    if next_start_s >= window_s || shapes.len() >= MAX_SPIKES_PER_CLASS {
                        break;
                    }
                    shape = draw(next_start_s, rng);
                    shape.onset_s = decay_s;
                }
            }
            shapes.sort_by(|left, right| left.start_s.total_cmp(&right.start_s));
        }
        Arrival::Inside => {
            for slot in 0..lanes {
                let mut shape = draw(0.0, rng);
                let room_s = (window_s - shape.end_s()).max(0.0);
                shape.start_s = (slot as f64 + rng.next_f64()) / lanes as f64 * room_s;
                shapes.push(shape);
            }
        }
        Arrival::Stratified => {
            let life_s = class.onset_s.mean() + class.plateau_s.mean() + class.decay_s.mean();
            if life_s <= 0.0 {
                return shapes;
            }
            let span_s = window_s + life_s;
            let expected = (class.concurrent * span_s / life_s).min(MAX_SPIKES_PER_CLASS as f64);
            let whole = expected.floor();
            let count = whole as usize + usize::from(rng.chance(expected - whole));
            let slot_s = span_s / count.max(1) as f64;
            for slot in 0..count {
                let start_s = -life_s + (slot as f64 + rng.next_f64()) * slot_s;
                shapes.push(draw(start_s, rng));
            }
        }
    }
    shapes
}

/// Gives a class's spikes their place, size, share and drift.
struct Placer<'a> {
    index: usize,
    class: &'a SpikeClass,
    volume_bytes: f64,
    window_start_s: f64,
    state: &'a mut ClassState,
}

impl Placer<'_> {
    /// Places one spike; `width_fraction` and `share_fraction` are its
    /// quantiles of the class's width and share spans.
    fn place(
        &mut self,
        shape: Shape,
        width_fraction: f64,
        share_fraction: f64,
        earlier: &[Spike],
        rng: &mut SeededRng,
    ) -> Spike {
        let class = self.class;
        let mut spike = Spike {
            shape,
            class: self.index,
            peak_share: class.peak_share.at(share_fraction),
            center_bytes: 0.0,
            width_bytes: class
                .width_bytes
                .at_log(width_fraction)
                .min(self.volume_bytes),
            drift_interval_s: 0.0,
            drift_step_bytes: 0.0,
            drift_range_bytes: class.drift_range_bytes,
            last_end_bytes: u64::MAX,
        };
        // Spikes inside a host stay put (they are bursts at one place).
        let drifts = class.inside_class.is_none()
            && ClassState::take(&mut self.state.drift_credit, class.drift_fraction);
        if drifts {
            spike.drift_interval_s = class.drift_interval_s.draw(rng).max(TICK_S);
            let direction = if rng.chance(0.5) { 1.0 } else { -1.0 };
            spike.drift_step_bytes = direction * class.drift_step_bytes as f64;
        }
        match class.inside_class {
            Some(host) => self.inside(&mut spike, host, earlier, rng),
            None => self.choose_place(&mut spike, rng),
        }
        let (low_bytes, high_bytes) = swept_range(&spike, self.volume_bytes);
        // A revisit goes where this spike was when it was first seen: the
        // window start for a spike that began (and maybe walked) before it.
        let seen_center_bytes = spike.center_at(shape.start_s.max(0.0), self.volume_bytes);
        self.state.remember(Visit {
            center_bytes: seen_center_bytes,
            low_bytes,
            high_bytes,
            end_s: self.window_start_s + shape.end_s(),
        });
        spike
    }

    /// Sets the spike's centre at `center_bytes` and, when it drifts, turns
    /// it away from an end of the volume it would hit going its way but not
    /// the other (a bounce folds the walk back over the segments it left).
    fn set_center(&self, spike: &mut Spike, center_bytes: f64) {
        spike.center_bytes = center_bytes;
        if spike.drift_interval_s <= 0.0 {
            return;
        }
        let life_s = spike.shape.end_s() - spike.shape.start_s;
        let mut travel_bytes = life_s / spike.drift_interval_s * spike.drift_step_bytes.abs();
        if spike.drift_range_bytes > spike.width_bytes {
            travel_bytes = travel_bytes.min(spike.drift_range_bytes - spike.width_bytes);
        }
        let room_up = self.volume_bytes - spike.width_bytes / 2.0 - center_bytes;
        let room_down = center_bytes - spike.width_bytes / 2.0;
        let up = spike.drift_step_bytes > 0.0;
        if (up && room_up < travel_bytes && room_down > room_up)
            || (!up && room_down < travel_bytes && room_up > room_down)
        {
            spike.drift_step_bytes = -spike.drift_step_bytes;
        }
    }

    /// A revisit (by quota, to where a spike that has ended by this one's
    /// start was first seen) or a new place whose whole walk keeps
    /// [`NEW_PLACE_DISTANCE_BYTES`] from the ranges recent spikes covered, so
    /// that it starts a concentration of its own at a place not hot before.
    fn choose_place(&mut self, spike: &mut Spike, rng: &mut SeededRng) {
        let class = self.class;
        let start_s = self.window_start_s + spike.shape.start_s;
        let credit = self.state.revisit_credit + class.revisit_fraction.clamp(0.0, 1.0);
        self.state.revisit_credit = credit.min(2.0);
        if self.state.revisit_credit >= 1.0 {
            let ended: Vec<f64> = self
                .state
                .history
                .iter()
                .filter(|visit| visit.end_s <= start_s)
                .map(|visit| visit.center_bytes)
                .collect();
            if !ended.is_empty() {
                self.state.revisit_credit -= 1.0;
                let center = ended[rng.below(ended.len() as u64) as usize];
                self.set_center(spike, center);
                return;
            }
        }
        let half = spike.width_bytes / 2.0;
        let low = class.area.low * self.volume_bytes + half;
        let high = (class.area.high * self.volume_bytes - half).max(low);
        let preferred_step = spike.drift_step_bytes;
        for _ in 0..NEW_PLACE_TRIES {
            spike.drift_step_bytes = preferred_step;
            self.set_center(spike, low + rng.next_f64() * (high - low));
            let (walk_low, walk_high) = swept_range(spike, self.volume_bytes);
            let clear = self.state.history.iter().all(|visit| {
                walk_low >= visit.high_bytes + NEW_PLACE_DISTANCE_BYTES
                    || walk_high + NEW_PLACE_DISTANCE_BYTES <= visit.low_bytes
            });
            if clear {
                return;
            }
        }
    }

    /// Puts the spike inside the spike of class `host` live at its start:
    /// at the host's leading edge when the host drifts (so the burst stays
    /// inside it longest), else at its centre. A spike with no live host is
    /// placed like any other.
    fn inside(&mut self, spike: &mut Spike, host: usize, earlier: &[Spike], rng: &mut SeededRng) {
        let time_s = spike.shape.start_s;
        let live = earlier.iter().find(|other| {
            other.class == host && other.shape.start_s <= time_s && time_s < other.shape.end_s()
        });
        let Some(other) = live else {
            self.choose_place(spike, rng);
            return;
        };
        let center = other.center_at(time_s, self.volume_bytes);
        let room = ((other.width_bytes - spike.width_bytes) / 2.0).max(0.0);
        spike.center_bytes = center + other.drift_step_bytes.signum() * room;
    }
}

/// Chooses `scale` and `amplitude` so that the expected requests per tick,
/// `scale * (1 + amplitude * bumps)`, average `mean_iops` over the window and
/// reach `peak_iops` in the busiest whole minute. When the bumps cannot reach
/// the peak without a negative base the amplitude is capped (the peak then
/// falls short); no bumps or a peak at or below the mean give a flat rate.
fn normalise(bumps: &[Shape], window_s: f64, mean_iops: f64, peak_iops: f64) -> (f64, f64) {
    let ticks = (window_s / TICK_S).round() as u64;
    let ticks_per_minute = (60.0 / TICK_S).round() as u64;
    if bumps.is_empty() || peak_iops <= mean_iops || ticks < ticks_per_minute {
        return (mean_iops, 0.0);
    }
    let mut total = 0.0;
    let mut busiest_minute = 0.0f64;
    let mut minute = 0.0;
    for tick in 0..ticks {
        let time_s = (tick as f64 + 0.5) * TICK_S;
        let height: f64 = bumps.iter().map(|bump| bump.at(time_s)).sum();
        total += height;
        minute += height;
        if (tick + 1) % ticks_per_minute == 0 {
            busiest_minute = busiest_minute.max(minute);
            minute = 0.0;
        }
    }
    let ticks = ticks as f64;
    let per_minute = ticks_per_minute as f64;
    // Solve scale*(ticks + a*total) = mean*ticks and
    //       scale*(per_minute + a*busiest) = peak*per_minute for a.
    let ratio = peak_iops / mean_iops;
    let denominator = busiest_minute - ratio * per_minute / ticks * total;
    let amplitude = if denominator > 1e-9 {
        (ratio - 1.0) * per_minute / denominator
    } else {
        1000.0
    };
    let scale = mean_iops * ticks / (ticks + amplitude * total);
    (scale, amplitude)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_ramps_up_holds_and_ramps_down() {
        let shape = Shape {
            start_s: 10.0,
            onset_s: 10.0,
            plateau_s: 20.0,
            decay_s: 10.0,
        };
        assert_eq!(shape.at(5.0), 0.0);
        assert!((shape.at(15.0) - 0.5).abs() < 1e-12);
        assert_eq!(shape.at(30.0), 1.0);
        assert!((shape.at(45.0) - 0.5).abs() < 1e-12);
        assert_eq!(shape.at(50.0), 0.0);
        let instant = Shape {
            start_s: 0.0,
            onset_s: 0.0,
            plateau_s: 5.0,
            decay_s: 0.0,
        };
        assert_eq!(instant.at(0.0), 1.0);
        assert_eq!(instant.at(5.0), 0.0);
    }

    #[test]
    fn reflect_stays_inside() {
        assert_eq!(reflect(5.0, 0.0, 10.0), 5.0);
        assert_eq!(reflect(12.0, 0.0, 10.0), 8.0);
        assert_eq!(reflect(-3.0, 0.0, 10.0), 3.0);
        assert_eq!(reflect(23.0, 0.0, 10.0), 3.0);
    }

    #[test]
    fn normalise_hits_mean_and_peak() {
        let bumps = [Shape {
            start_s: 600.0,
            onset_s: 300.0,
            plateau_s: 600.0,
            decay_s: 300.0,
        }];
        let window_s = 3600.0;
        let (scale, amplitude) = normalise(&bumps, window_s, 100.0, 250.0);
        let rates: Vec<f64> = (0..3600)
            .map(|tick| scale * (1.0 + amplitude * bumps[0].at(tick as f64 + 0.5)))
            .collect();
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let peak = rates
            .chunks(60)
            .map(|minute| minute.iter().sum::<f64>() / 60.0)
            .fold(0.0, f64::max);
        assert!((mean - 100.0).abs() < 1e-6, "{mean}");
        assert!((peak - 250.0).abs() < 1e-6, "{peak}");
        assert_eq!(normalise(&[], window_s, 100.0, 250.0), (100.0, 0.0));
    }

    #[test]
    fn a_drift_range_keeps_the_walk_inside_it_both_ways() {
        const GIB_F: f64 = (1u64 << 30) as f64;
        let volume_bytes = 170.0 * GIB_F;
        let spike = |step_bytes: f64, range_bytes: f64| Spike {
            shape: Shape {
                start_s: 0.0,
                onset_s: 0.0,
                plateau_s: 6.0 * 3600.0,
                decay_s: 0.0,
            },
            class: 0,
            peak_share: 0.95,
            center_bytes: 80.0 * GIB_F,
            width_bytes: 10.0 * GIB_F,
            drift_interval_s: 10.0,
            drift_step_bytes: step_bytes,
            drift_range_bytes: range_bytes,
            last_end_bytes: u64::MAX,
        };
        for step_bytes in [GIB_F / 8.0, -GIB_F / 8.0] {
            let confined = spike(step_bytes, 40.0 * GIB_F);
            let centers: Vec<f64> = (0..2160)
                .map(|tick| confined.center_at(tick as f64 * 10.0, volume_bytes))
                .collect();
            let low = centers.iter().copied().fold(f64::INFINITY, f64::min);
            let high = centers.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            // The centre travels range - width = 30 GiB, from the start on
            // the way the walk first goes, and comes back over it.
            let (expected_low, expected_high) = if step_bytes > 0.0 {
                (80.0 * GIB_F, 110.0 * GIB_F)
            } else {
                (50.0 * GIB_F, 80.0 * GIB_F)
            };
            assert_eq!(
                (low, high),
                (expected_low, expected_high),
                "step {step_bytes}"
            );
            let returns = centers
                .windows(2)
                .filter(|pair| {
                    (pair[1] - pair[0]).signum() != step_bytes.signum() && pair[1] != pair[0]
                })
                .count();
            assert!(returns > 100, "the walk turns back: {returns}");
            assert_eq!(
                swept_range(&confined, volume_bytes),
                (expected_low - 5.0 * GIB_F, expected_high + 5.0 * GIB_F)
            );
            // Without a range the same walk crosses the volume.
            let free = spike(step_bytes, 0.0);
            let (free_low, free_high) = swept_range(&free, volume_bytes);
            assert_eq!((free_low, free_high), (0.0, volume_bytes));
        }
    }

    #[test]
    fn quota_gives_its_fraction() {
        let mut credit = 0.3;
        let taken = (0..100)
            .filter(|_| ClassState::take(&mut credit, 0.25))
            .count();
        assert_eq!(taken, 25);
    }
}
