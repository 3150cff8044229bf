//! The request stream of a preset.

use tierd_common::rng::{Rng, SeededRng};
use tierd_common::units::{NS_PER_SECOND, PAGE_BYTES, SECTOR_BYTES};
use tierd_trace::{Op, Request};

use crate::model::Model;
use crate::schedule::{ClassState, Plan, TICK_S};
use crate::{Preset, SynthError};

/// Longest run accepted (about 114 years): keeps every time in nanoseconds
/// far inside `u64`.
pub const MAX_HOURS: f64 = 1_000_000.0;

// Sub-stream numbers of the root seed; one per kind of decision, so that a
// change in how one is drawn does not shift the others.
const STREAM_LAYOUT: u64 = 1;
const STREAM_SCHEDULE: u64 = 2;
const STREAM_ARRIVALS: u64 = 3;
const STREAM_CHOICE: u64 = 4;
const STREAM_OFFSETS: u64 = 5;
const STREAM_SIZES: u64 = 6;
const STREAM_OPS: u64 = 7;

/// Tries at placing a warm region away from the others.
const WARM_PLACE_TRIES: usize = 8;
/// Gap kept between warm regions (one default segment).
const WARM_DISTANCE_BYTES: f64 = (1u64 << 30) as f64;

#[derive(Clone, Copy, Debug)]
struct WarmRegion {
    start_bytes: f64,
    width_bytes: f64,
}

/// A spike that is live in the current tick.
#[derive(Clone, Copy, Debug)]
struct LiveSpike {
    index: usize,
    /// Cumulative share up to and including this spike.
    cumulative_share: f64,
    center_bytes: f64,
}

/// Generates a preset's requests, in non-decreasing time order, from time 0
/// to `hours`.
///
/// Guarantees: the same preset, seed and hours give the same stream, byte
/// for byte, from the same build (across platforms, `ln` and `powf` of the
/// system math library may differ in the last bit); a shorter run is a
/// prefix of a longer one with the same seed; every request has volume 0,
/// a 512 B-aligned offset and `offset + length <= volume_bytes`; memory does
/// not grow with `hours` (one window's plan at a time).
///
/// Arrivals are a Poisson process whose rate is constant within each 1 s
/// tick: the busy-window rate (background plus volume spikes) or the quiet
/// rate. Each request goes to a live data spike with that spike's current
/// share, else to the background.
pub struct Generator {
    model: Model,
    volume_bytes: u64,
    end_ns: u64,
    window_ticks: u64,
    recurrence_ticks: u64,

    schedule_rng: SeededRng,
    arrivals: SeededRng,
    choice: SeededRng,
    offsets: SeededRng,
    sizes: SeededRng,
    ops: SeededRng,

    warm_regions: Vec<WarmRegion>,
    warm_cumulative: Vec<f64>,
    size_cumulative: Vec<f64>,
    class_states: Vec<ClassState>,

    plan_epoch: Option<u64>,
    plan: Option<Plan>,

    tick: u64,
    tick_rate: f64,
    within_tick_s: f64,
    live: Vec<LiveSpike>,
    live_share: f64,
    background_last_end: u64,
    finished: bool,
    /// An application start-up trace ([`crate::apps`]), generated whole.
    app: Option<std::vec::IntoIter<Request>>,
}

impl Generator {
    /// A generator for `hours` of `preset` from root seed `seed`.
    pub fn new(preset: &Preset, seed: u64, hours: f64) -> Result<Generator, SynthError> {
        if !(hours.is_finite() && hours > 0.0 && hours <= MAX_HOURS) {
            return Err(SynthError::BadHours {
                hours,
                max: MAX_HOURS,
            });
        }
        let model = preset.model;
        let volume_bytes = preset.volume_bytes;
        let largest = model.sizes.iter().map(|size| size.bytes).max().unwrap_or(0);
        if model.sizes.is_empty() || largest == 0 || largest > volume_bytes {
            return Err(SynthError::BadModel {
                preset: preset.name.to_string(),
                reason: format!(
                    "request sizes must be 1..={volume_bytes} bytes and the size mix non-empty"
                ),
            });
        }
        let root = SeededRng::new(seed);
        let mut layout = root.derive(STREAM_LAYOUT);
        let (warm_regions, warm_cumulative) =
            place_warm_regions(&model, volume_bytes as f64, &mut layout);
        let class_states = model
            .spike_classes
            .iter()
            .map(|_| ClassState::new(&mut layout))
            .collect();
        let mut total_weight = 0.0;
        let size_cumulative = model
            .sizes
            .iter()
            .map(|size| {
                total_weight += size.weight.max(0.0);
                total_weight
            })
            .collect();
        let window_ticks = ((model.window_hours * 3600.0 / TICK_S).round() as u64).max(1);
        let recurrence_ticks =
            ((model.recurrence_hours * 3600.0 / TICK_S).round() as u64).max(window_ticks);
        let mut generator = Generator {
            model,
            volume_bytes,
            end_ns: (hours * 3600.0 * NS_PER_SECOND as f64) as u64,
            window_ticks,
            recurrence_ticks,
            schedule_rng: root.derive(STREAM_SCHEDULE),
            arrivals: root.derive(STREAM_ARRIVALS),
            choice: root.derive(STREAM_CHOICE),
            offsets: root.derive(STREAM_OFFSETS),
            sizes: root.derive(STREAM_SIZES),
            ops: root.derive(STREAM_OPS),
            warm_regions,
            warm_cumulative,
            size_cumulative,
            class_states,
            plan_epoch: None,
            plan: None,
            tick: 0,
            tick_rate: 0.0,
            within_tick_s: 0.0,
            live: Vec::new(),
            live_share: 0.0,
            background_last_end: u64::MAX,
            finished: false,
            app: None,
        };
        if let Some(app) = crate::apps::find(preset.name) {
            generator.app = Some(crate::apps::requests(app, seed, generator.end_ns).into_iter());
            return Ok(generator);
        }
        generator.enter_tick();
        Ok(generator)
    }

    /// Expected number of requests from time 0 to `hours` (the integral of the
    /// rate the arrivals follow), computed from the plans alone, without
    /// drawing requests. Consumes a fresh copy of the schedule stream, so it
    /// does not disturb this generator.
    pub fn expected_requests(preset: &Preset, seed: u64, hours: f64) -> Result<f64, SynthError> {
        let mut generator = Generator::new(preset, seed, hours)?;
        let last_tick = generator.end_ns.div_ceil(NS_PER_SECOND);
        let mut expected = 0.0;
        while generator.tick < last_tick {
            let tick_end_ns = (generator.tick + 1) * NS_PER_SECOND;
            let covered = if tick_end_ns > generator.end_ns {
                (generator.end_ns - generator.tick * NS_PER_SECOND) as f64 / NS_PER_SECOND as f64
            } else {
                1.0
            };
            expected += generator.tick_rate * TICK_S * covered;
            generator.tick += 1;
            generator.enter_tick();
        }
        Ok(expected)
    }

    /// Sets the rate and the live spikes for `self.tick`.
    fn enter_tick(&mut self) {
        self.within_tick_s = 0.0;
        self.live.clear();
        self.live_share = 0.0;
        if self.tick.saturating_mul(NS_PER_SECOND) >= self.end_ns {
            self.finished = true;
            return;
        }
        let epoch = self.tick / self.recurrence_ticks;
        let tick_in_epoch = self.tick % self.recurrence_ticks;
        if tick_in_epoch >= self.window_ticks {
            self.plan = None;
            self.tick_rate = self.model.quiet_mean_iops.max(0.0);
            return;
        }
        if self.plan_epoch != Some(epoch) || self.plan.is_none() {
            let mut rng = self.schedule_rng.derive(epoch);
            let window_start_s = (epoch * self.recurrence_ticks) as f64 * TICK_S;
            self.plan = Some(Plan::build(
                &self.model,
                self.volume_bytes,
                window_start_s,
                &mut self.class_states,
                &mut rng,
            ));
            self.plan_epoch = Some(epoch);
        }
        let Some(plan) = self.plan.as_ref() else {
            return;
        };
        let time_s = (tick_in_epoch as f64 + 0.5) * TICK_S;
        self.tick_rate = plan.rate(time_s).max(0.0);
        let volume = self.volume_bytes as f64;
        let mut total = 0.0;
        for (index, spike) in plan.spikes.iter().enumerate() {
            let share = spike.peak_share * spike.shape.at(time_s);
            if share > 0.0 {
                total += share;
                self.live.push(LiveSpike {
                    index,
                    cumulative_share: total,
                    center_bytes: spike.center_at(time_s, volume),
                });
            }
        }
        let cap = self.model.max_spike_share.clamp(0.0, 1.0);
        if total > cap && total > 0.0 {
            let factor = cap / total;
            for live in &mut self.live {
                live.cumulative_share *= factor;
            }
            total = cap;
        }
        self.live_share = total;
    }

    fn draw_size(&mut self) -> u64 {
        let total = self.size_cumulative.last().copied().unwrap_or(0.0);
        let pick = self.sizes.next_f64() * total;
        let index = self
            .size_cumulative
            .iter()
            .position(|cumulative| pick < *cumulative)
            .unwrap_or(self.size_cumulative.len() - 1);
        self.model.sizes[index].bytes
    }

    /// A 512 B-aligned offset for a request of `length` near `position`,
    /// clamped into the volume; 4 KiB aligned for the preset's share.
    fn place(&mut self, position: f64, length: u64) -> u64 {
        let last_start = self.volume_bytes - length;
        let alignment = if self.offsets.chance(self.model.aligned_4k_fraction) {
            PAGE_BYTES
        } else {
            SECTOR_BYTES
        };
        let offset = if position <= 0.0 { 0 } else { position as u64 }.min(last_start);
        offset / alignment * alignment
    }

    fn request(&mut self, time_ns: u64) -> Request {
        let length = self.draw_size();
        let pick = self.choice.next_f64();
        let live = self
            .live
            .iter()
            .find(|live| pick < live.cumulative_share)
            .copied();
        let (offset, write_fraction) = match live {
            Some(live) => self.spike_offset(live, length),
            None => self.background_offset(length),
        };
        let op = if self.ops.chance(write_fraction) {
            Op::Write
        } else {
            Op::Read
        };
        Request {
            time_ns,
            volume: 0,
            op,
            offset_bytes: offset,
            length_bytes: length,
            response_ns: None,
        }
    }

    fn spike_offset(&mut self, live: LiveSpike, length: u64) -> (u64, f64) {
        let Some(plan) = self.plan.as_ref() else {
            return self.background_offset(length);
        };
        let spike = &plan.spikes[live.index];
        let class = self.model.spike_classes[spike.class];
        let half = spike.width_bytes / 2.0;
        let last_end = spike.last_end_bytes;
        let (low, high) = (live.center_bytes - half, live.center_bytes + half);
        let sequential = self.offsets.chance(class.sequential_probability)
            && last_end != u64::MAX
            && (last_end as f64) >= low
            && (last_end as f64) < high
            && last_end + length <= self.volume_bytes;
        let offset = if sequential {
            last_end
        } else {
            let core = class.core_share > 0.0 && self.offsets.chance(class.core_share);
            let spread = if core {
                half * class.core_width_fraction.clamp(0.0, 1.0)
            } else {
                half
            };
            let position = live.center_bytes - spread + self.offsets.next_f64() * 2.0 * spread;
            self.place(position, length)
        };
        if let Some(plan) = self.plan.as_mut() {
            plan.spikes[live.index].last_end_bytes = offset + length;
        }
        (offset, class.write_fraction)
    }

    fn background_offset(&mut self, length: u64) -> (u64, f64) {
        let background = self.model.background;
        let last_end = self.background_last_end;
        let offset = if last_end != u64::MAX
            && last_end + length <= self.volume_bytes
            && self.offsets.chance(background.sequential_probability)
        {
            last_end
        } else {
            let volume = self.volume_bytes as f64;
            let warm = !self.warm_regions.is_empty() && self.offsets.chance(background.warm_share);
            let position = if warm {
                let total = self.warm_cumulative.last().copied().unwrap_or(0.0);
                let pick = self.offsets.next_f64() * total;
                let index = self
                    .warm_cumulative
                    .iter()
                    .position(|cumulative| pick < *cumulative)
                    .unwrap_or(self.warm_regions.len() - 1);
                let region = self.warm_regions[index];
                region.start_bytes + self.offsets.next_f64() * region.width_bytes
            } else {
                let low = background.area.low.clamp(0.0, 1.0) * volume;
                let high = background.area.high.clamp(0.0, 1.0) * volume;
                low + self.offsets.next_f64() * (high - low).max(0.0)
            };
            self.place(position, length)
        };
        self.background_last_end = offset + length;
        (offset, background.write_fraction)
    }
}

fn place_warm_regions(
    model: &Model,
    volume_bytes: f64,
    rng: &mut SeededRng,
) -> (Vec<WarmRegion>, Vec<f64>) {
    let background = model.background;
    let count = background.warm_regions as usize;
    let low = background.warm_area.low.clamp(0.0, 1.0) * volume_bytes;
    let high = background.warm_area.high.clamp(0.0, 1.0) * volume_bytes;
    let mut regions = Vec::with_capacity(count);
    let mut cumulative = Vec::with_capacity(count);
    let mut total = 0.0;
    for rank in 0..count {
        // Widths evenly spread (log scale) over the span, the busiest region
        // the narrowest: small hot files (metadata, logs), larger lukewarm ones.
        let quantile = if count > 1 {
            rank as f64 / (count - 1) as f64
        } else {
            0.5
        };
        let width_bytes = background
            .warm_width_bytes
            .at_log(quantile)
            .min(high - low)
            .max(0.0);
        // Warm regions are distinct files: keep them a segment apart from the
        // busier ones when the area leaves room (a few tries, then anywhere).
        let mut start_bytes = low;
        for _ in 0..WARM_PLACE_TRIES {
            start_bytes = low + rng.next_f64() * (high - low - width_bytes).max(0.0);
            let clear = regions.iter().all(|other: &WarmRegion| {
                start_bytes >= other.start_bytes + other.width_bytes + WARM_DISTANCE_BYTES
                    || start_bytes + width_bytes + WARM_DISTANCE_BYTES <= other.start_bytes
            });
            if clear {
                break;
            }
        }
        regions.push(WarmRegion {
            start_bytes,
            width_bytes,
        });
        total += 1.0 / ((rank + 1) as f64).powf(background.warm_zipf_exponent);
        cumulative.push(total);
    }
    (regions, cumulative)
}

impl Iterator for Generator {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if let Some(app) = self.app.as_mut() {
            return app.next();
        }
        loop {
            if self.finished {
                return None;
            }
            if self.tick_rate > 0.0 {
                let gap_s = self.arrivals.exponential(1.0 / self.tick_rate);
                if self.within_tick_s + gap_s < TICK_S {
                    self.within_tick_s += gap_s;
                    let tick_start_ns = self.tick * NS_PER_SECOND;
                    let within_ns =
                        ((self.within_tick_s * NS_PER_SECOND as f64) as u64).min(NS_PER_SECOND - 1);
                    let time_ns = tick_start_ns + within_ns;
                    if time_ns >= self.end_ns {
                        self.finished = true;
                        return None;
                    }
                    return Some(self.request(time_ns));
                }
            }
            // No arrival left in this tick (the process is memoryless, so the
            // next tick starts afresh).
            self.tick += 1;
            self.enter_tick();
        }
    }
}
