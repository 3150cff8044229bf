//! Hard disk drive model (see `docs/devices/hdd.md` for the formulas and
//! sources).
//!
//! One actuator serves one IO at a time. Service time is
//! controller overhead + seek + rotational wait + media transfer, computed
//! from deterministic geometry: the cylinder and the angle of a sector follow
//! from its offset (zoned recording, track skew), the platter angle follows
//! from virtual time and rpm. The seek curve is two-piece, `a + b·√d` up to a
//! knee and `c + e·d` beyond, fitted to the datasheet's track-to-track,
//! average and full-stroke figures ([`SeekCurve::fit`]).
//!
//! Around the mechanism: a request queue served FIFO, by elevator (LOOK) or
//! shortest-positioning-time-first over an NCQ/TCQ window; a segmented
//! read-ahead cache (a read that finds its data in a segment, or in the
//! stream the head is still reading, is served at interface speed); an
//! optional write-back cache, off by default as on the papers' servers.
//!
//! This file also holds what the SMR model shares with it ([`Mechanics`],
//! [`SegmentCache`]) and the settings plumbing every model uses
//! ([`ConfigError`], the `settings!` macro that gives each `…Config` a
//! `…Overrides` twin whose fields are all optional, for `[tier.model]`).

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use serde::{Deserialize, Serialize};
use tierd_common::op::Op;
use tierd_common::rng::{Rng, SeededRng};

use super::{Completion, DeviceCounters, DeviceIo, DeviceModel, DevicePreset};

// ---------------------------------------------------------------------------
// Settings plumbing shared by every model.

/// A model setting that cannot work, named by its key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("device {device}: setting `{key}`: {reason}")]
pub struct ConfigError {
    /// Model or preset name.
    pub device: String,
    /// The offending key as a tier file writes it.
    pub key: String,
    /// What is wrong and what is allowed.
    pub reason: String,
}

impl ConfigError {
    pub(crate) fn new(device: &str, key: &str, reason: impl Into<String>) -> Self {
        Self {
            device: device.to_string(),
            key: key.to_string(),
            reason: reason.into(),
        }
    }
}

/// Checks that a float setting is finite and positive.
pub(crate) fn positive(device: &str, key: &str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(ConfigError::new(
            device,
            key,
            format!("{value} is not allowed: a finite number above zero"),
        ))
    }
}

/// Checks that a float setting is finite and not negative.
pub(crate) fn non_negative(device: &str, key: &str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(ConfigError::new(
            device,
            key,
            format!("{value} is not allowed: a finite number, zero or above"),
        ))
    }
}

/// Defines a model's `Config` (every field required, `deny_unknown_fields`)
/// and its `Overrides` twin (every field optional) with `apply`, so a tier
/// file can change a few parameters of a preset and keep the rest.
macro_rules! settings {
    (
        $(#[$config_meta:meta])*
        config $config:ident;
        $(#[$overrides_meta:meta])*
        overrides $overrides:ident;
        { $( $(#[$field_meta:meta])* $field:ident : $type:ty, )* }
    ) => {
        $(#[$config_meta])*
        #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $config {
            $( $(#[$field_meta])* pub $field: $type, )*
        }

        $(#[$overrides_meta])*
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $overrides {
            $(
                $(#[$field_meta])*
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $field: Option<$type>,
            )*
        }

        impl $overrides {
            /// Replaces every field of `config` that this override sets.
            pub fn apply(&self, config: &mut $config) {
                $( if let Some(value) = &self.$field { config.$field = value.clone(); } )*
            }
        }
    };
}
pub(crate) use settings;

/// Adds one completed IO to cumulative counters (not `busy_ns`).
pub(crate) fn count_completion(
    counters: &mut DeviceCounters,
    op: Op,
    length_bytes: u64,
    completion: &Completion,
) {
    match op {
        Op::Read => {
            counters.reads += 1;
            counters.read_bytes += length_bytes;
        }
        Op::Write => {
            counters.writes += 1;
            counters.write_bytes += length_bytes;
        }
    }
    if completion.background {
        counters.background_ios += 1;
    }
    counters.response_ns_total += completion.response_ns();
    counters.service_ns_total += completion.service_ns();
}

/// Clamps an IO to the device (the caller's bug, served anyway).
pub(crate) fn clamp_io(mut io: DeviceIo, capacity_bytes: u64) -> DeviceIo {
    let last = capacity_bytes.saturating_sub(1);
    io.offset_bytes = io.offset_bytes.min(last);
    io.length_bytes = io
        .length_bytes
        .min(capacity_bytes.saturating_sub(io.offset_bytes));
    io
}

pub(crate) fn ms_to_ns(milliseconds: f64) -> f64 {
    milliseconds * 1e6
}

/// Nanoseconds per byte at `megabytes_per_second` (decimal MB, as datasheets).
pub(crate) fn ns_per_byte(megabytes_per_second: f64) -> f64 {
    1e3 / megabytes_per_second
}

/// A completion waiting for its time, ordered by (time, submission order).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timed {
    pub(crate) completion: Completion,
    pub(crate) op: Op,
    pub(crate) length_bytes: u64,
    pub(crate) sequence: u64,
}

impl Timed {
    fn key(&self) -> (u64, u64) {
        (self.completion.done_ns, self.sequence)
    }
}

impl PartialEq for Timed {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timed {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

// ---------------------------------------------------------------------------
// Seek curve.

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

// ---------------------------------------------------------------------------
// Geometry and mechanics.

#[derive(Clone, Copy, Debug)]
struct Zone {
    first_byte: u64,
    end_byte: u64,
    first_cylinder: u32,
    track_bytes: u64,
}

/// Where a byte lives on the platters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Location {
    pub cylinder: u32,
    /// Global track index (cylinder × heads + head, in zone order).
    pub track: u64,
    pub track_bytes: u64,
    pub byte_in_track: u64,
    /// Angle of the byte in revolutions, `[0, 1)`, skew included.
    pub angle: f64,
}

/// Zoned recording: cylinders split into equal bands of constant bytes per
/// track, decreasing linearly from the outer to the inner diameter (linear
/// density constant, so track length ∝ radius). Offset 0 is outermost.
#[derive(Clone, Debug)]
pub struct Geometry {
    zones: Vec<Zone>,
    heads: u32,
    cylinders: u32,
    bytes: u64,
    revolution_ns: f64,
    revolutions_per_ns: f64,
    track_switch_ns: f64,
    skew_per_track: f64,
}

/// The fractional part of a non-negative `value` (a cast, not a libm call:
/// the baseline x86-64 target has no rounding instruction).
#[inline]
fn fraction(value: f64) -> f64 {
    value - (value as i64) as f64
}

/// Sector size used for rounding track capacities.
const SECTOR_BYTES: u64 = 512;

impl Geometry {
    /// `outer_track_bytes` and `inner_track_bytes` are the bytes per track
    /// at the two diameters; each zone takes the value at its middle.
    pub fn new(
        heads: u32,
        cylinders: u32,
        zones: u32,
        outer_track_bytes: f64,
        inner_track_bytes: f64,
        revolution_ns: f64,
        track_switch_ns: f64,
    ) -> Geometry {
        let zone_count = zones.clamp(1, cylinders.max(1));
        let mut list = Vec::with_capacity(zone_count as usize);
        let mut first_byte = 0u64;
        for zone in 0..zone_count {
            let first_cylinder =
                (u64::from(zone) * u64::from(cylinders) / u64::from(zone_count)) as u32;
            let next_cylinder =
                (u64::from(zone + 1) * u64::from(cylinders) / u64::from(zone_count)) as u32;
            let middle = (f64::from(zone) + 0.5) / f64::from(zone_count);
            let raw = outer_track_bytes - (outer_track_bytes - inner_track_bytes) * middle;
            let track_bytes = ((raw / SECTOR_BYTES as f64).ceil() as u64).max(1) * SECTOR_BYTES;
            let bytes = u64::from(next_cylinder - first_cylinder) * u64::from(heads) * track_bytes;
            list.push(Zone {
                first_byte,
                end_byte: first_byte + bytes,
                first_cylinder,
                track_bytes,
            });
            first_byte += bytes;
        }
        Geometry {
            zones: list,
            heads: heads.max(1),
            cylinders,
            bytes: first_byte,
            revolution_ns,
            revolutions_per_ns: 1.0 / revolution_ns,
            track_switch_ns,
            skew_per_track: track_switch_ns / revolution_ns,
        }
    }

    /// Bytes the platters hold.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn cylinders(&self) -> u32 {
        self.cylinders
    }

    pub fn revolution_ns(&self) -> f64 {
        self.revolution_ns
    }

    /// Media rate of the zone holding `offset`, bytes per second.
    pub fn rate_bytes_per_second(&self, offset: u64) -> f64 {
        self.locate(offset).track_bytes as f64 * 1e9 / self.revolution_ns
    }

    /// Where `offset` is (clamped to the last byte).
    #[inline]
    pub fn locate(&self, offset: u64) -> Location {
        let offset = offset.min(self.bytes.saturating_sub(1));
        let index = self
            .zones
            .partition_point(|zone| zone.end_byte <= offset)
            .min(self.zones.len() - 1);
        let zone = &self.zones[index];
        let relative = offset - zone.first_byte;
        let track_in_zone = relative / zone.track_bytes;
        let byte_in_track = relative % zone.track_bytes;
        let track = u64::from(zone.first_cylinder) * u64::from(self.heads) + track_in_zone;
        let cylinder = zone.first_cylinder + (track_in_zone / u64::from(self.heads)) as u32;
        let angle = fraction(
            byte_in_track as f64 / zone.track_bytes as f64 + track as f64 * self.skew_per_track,
        );
        Location {
            cylinder,
            track,
            track_bytes: zone.track_bytes,
            byte_in_track,
            angle,
        }
    }

    /// Time to pass `length` bytes under the head from `location`: the bytes
    /// at the track's rate plus one track switch per track boundary crossed
    /// (the skew hides the switch, so no revolution is lost).
    #[inline]
    pub fn transfer_ns(&self, location: &Location, length: u64) -> f64 {
        if length == 0 {
            return 0.0;
        }
        let crossings = (location.byte_in_track + length - 1) / location.track_bytes;
        length as f64 / location.track_bytes as f64 * self.revolution_ns
            + crossings as f64 * self.track_switch_ns
    }

    /// Average nanoseconds per byte when streaming from `location`.
    pub fn streaming_ns_per_byte(&self, location: &Location) -> f64 {
        (self.revolution_ns + self.track_switch_ns) / location.track_bytes as f64
    }
}

/// The actuator and spindle: where the head is and how long moves take.
#[derive(Clone, Debug)]
pub struct Mechanics {
    pub geometry: Geometry,
    read_seek: SeekCurve,
    write_seek: SeekCurve,
    head_cylinder: u32,
    head_track: u64,
    /// Spindle angle at time zero, in nanoseconds of rotation.
    phase_ns: f64,
}

/// A rotational wait this close to a whole revolution is rounding error on a
/// sector that is exactly under the head.
const ANGLE_EPSILON: f64 = 1e-7;

impl Mechanics {
    pub fn new(
        geometry: Geometry,
        read_seek: SeekCurve,
        write_seek: SeekCurve,
        phase_ns: f64,
    ) -> Mechanics {
        Mechanics {
            geometry,
            read_seek,
            write_seek,
            head_cylinder: 0,
            head_track: 0,
            phase_ns,
        }
    }

    pub fn head_cylinder(&self) -> u32 {
        self.head_cylinder
    }

    pub fn read_seek(&self) -> &SeekCurve {
        &self.read_seek
    }

    /// Seek plus rotational wait to reach `location`, starting at `start_ns`.
    #[inline]
    pub fn positioning_ns(&self, start_ns: f64, location: &Location, op: Op) -> f64 {
        let seek_ns = self.seek_ns(location, op);
        seek_ns + self.rotational_wait_ns(start_ns + seek_ns, location.angle)
    }

    /// Seek time only (a head switch when the cylinder is the same).
    #[inline]
    pub fn seek_ns(&self, location: &Location, op: Op) -> f64 {
        let distance = self.head_cylinder.abs_diff(location.cylinder);
        if distance == 0 {
            if location.track == self.head_track {
                0.0
            } else {
                self.geometry.track_switch_ns
            }
        } else {
            match op {
                Op::Read => self.read_seek.time_ns(distance),
                Op::Write => self.write_seek.time_ns(distance),
            }
        }
    }

    /// Wait at `arrival_ns` until `angle` comes under the head.
    #[inline]
    pub fn rotational_wait_ns(&self, arrival_ns: f64, angle: f64) -> f64 {
        let revolution = self.geometry.revolution_ns;
        let platter = fraction((arrival_ns + self.phase_ns) * self.geometry.revolutions_per_ns);
        let mut gap = angle - platter;
        if gap < 0.0 {
            gap += 1.0;
        }
        if gap > 1.0 - ANGLE_EPSILON {
            gap = 0.0;
        }
        gap * revolution
    }

    /// Positions, transfers `length` bytes at `offset` and leaves the head
    /// on the last track; returns when the transfer ends.
    pub fn access(&mut self, start_ns: f64, offset: u64, length: u64, op: Op) -> f64 {
        let location = self.geometry.locate(offset);
        let done = start_ns
            + self.positioning_ns(start_ns, &location, op)
            + self.geometry.transfer_ns(&location, length);
        self.park_after(&location, offset, length);
        done
    }

    /// Moves the head to `cylinder` without timing it (the caller timed it).
    pub fn set_head(&mut self, location: &Location) {
        self.head_cylinder = location.cylinder;
        self.head_track = location.track;
    }

    /// Leaves the head where a transfer of `length` bytes from `offset`
    /// (at `location`) ends.
    pub fn park_after(&mut self, location: &Location, offset: u64, length: u64) {
        if location.byte_in_track + length <= location.track_bytes {
            self.set_head(location);
        } else {
            let last = self.geometry.locate(offset + length - 1);
            self.set_head(&last);
        }
    }
}

// ---------------------------------------------------------------------------
// Segmented read-ahead cache.

#[derive(Clone, Copy, Debug, Default)]
struct Segment {
    start: u64,
    end: u64,
    last_use: u64,
}

impl Segment {
    fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// The read the head is still streaming into a segment after a read miss.
#[derive(Clone, Copy, Debug)]
struct Stream {
    segment: usize,
    from_byte: u64,
    cap_byte: u64,
    start_ns: f64,
    ns_per_byte: f64,
}

/// Buffer segments holding recently read data. After a read miss the head
/// keeps reading the following bytes into the segment for as long as it is
/// not sent elsewhere, up to half a segment ahead of what the host consumed
/// (a circular segment buffer). Reads wholly inside a segment, or inside
/// the part of the stream still to come, are hits. Writes invalidate the
/// segments they overlap.
#[derive(Clone, Debug)]
pub struct SegmentCache {
    segments: Vec<Segment>,
    /// Flat copies of what a lookup needs, kept in step with `segments`:
    /// the first byte (`u64::MAX` when empty) and the end a request may
    /// reach (the stream's cap for the streaming segment).
    lookup_starts: Vec<u64>,
    lookup_ends: Vec<u64>,
    segment_bytes: u64,
    limit_bytes: u64,
    stream: Option<Stream>,
    uses: u64,
}

impl SegmentCache {
    pub fn new(count: u32, segment_bytes: u64, limit_bytes: u64) -> SegmentCache {
        let count = if segment_bytes == 0 {
            0
        } else {
            count as usize
        };
        SegmentCache {
            segments: vec![Segment::default(); count],
            lookup_starts: vec![u64::MAX; count],
            lookup_ends: vec![0; count],
            segment_bytes,
            limit_bytes,
            stream: None,
            uses: 0,
        }
    }

    fn refresh(&mut self, index: usize) {
        let segment = self.segments[index];
        let streaming = self.stream.filter(|stream| stream.segment == index);
        if segment.is_empty() && streaming.is_none() {
            self.lookup_starts[index] = u64::MAX;
            self.lookup_ends[index] = 0;
        } else {
            self.lookup_starts[index] = segment.start;
            self.lookup_ends[index] = streaming.map_or(segment.end, |stream| stream.cap_byte);
        }
    }

    /// If `[offset, offset + length)` is (or will be, from the stream) in a
    /// segment: the segment and the time the last byte is in the buffer.
    #[inline]
    pub fn lookup(&self, now_ns: f64, offset: u64, length: u64) -> Option<(usize, f64)> {
        let end = offset + length;
        // Branch-free over every segment (vectorisable): SPTF asks this for
        // each queued read at each dispatch.
        let mut index = usize::MAX;
        for (position, (&start, &reach)) in self
            .lookup_starts
            .iter()
            .zip(&self.lookup_ends)
            .enumerate()
            .rev()
        {
            if start <= offset && end <= reach {
                index = position;
            }
        }
        if index == usize::MAX {
            return None;
        }
        let ready = match self.stream {
            Some(stream) if stream.segment == index && end > stream.from_byte => {
                now_ns.max(stream.start_ns + (end - stream.from_byte) as f64 * stream.ns_per_byte)
            }
            _ => now_ns,
        };
        Some((index, ready))
    }

    /// Records a hit on `index`; a hit on the stream keeps it reading ahead
    /// of the host.
    pub fn note_hit(&mut self, index: usize, offset: u64, length: u64) {
        self.uses += 1;
        let half = self.segment_bytes / 2;
        let Some(segment) = self.segments.get_mut(index) else {
            return;
        };
        segment.last_use = self.uses;
        if let Some(stream) = self.stream.as_mut().filter(|s| s.segment == index) {
            stream.cap_byte = stream
                .cap_byte
                .max((offset + length + half).min(self.limit_bytes));
            segment.start = segment
                .start
                .max(stream.cap_byte.saturating_sub(self.segment_bytes));
            self.refresh(index);
        }
    }

    /// The head leaves: the stream's segment keeps what was read by `now_ns`.
    pub fn stop_stream(&mut self, now_ns: f64) {
        if let Some(stream) = self.stream.take() {
            let streamed = if now_ns > stream.start_ns {
                ((now_ns - stream.start_ns) / stream.ns_per_byte) as u64
            } else {
                0
            };
            let end = (stream.from_byte + streamed).min(stream.cap_byte);
            if let Some(segment) = self.segments.get_mut(stream.segment) {
                segment.end = end;
                self.refresh(stream.segment);
            }
        }
    }

    /// A read miss of `[offset, offset + length)` finished at `done_ns`: its
    /// data goes into the least recently used segment and the head goes on
    /// reading from its end.
    pub fn start_stream(&mut self, done_ns: f64, offset: u64, length: u64, ns_per_byte: f64) {
        if self.segments.is_empty() {
            return;
        }
        self.stop_stream(done_ns);
        let end = offset + length;
        let follows = self.follows(offset);
        let index = follows.unwrap_or_else(|| {
            self.segments
                .iter()
                .enumerate()
                .min_by_key(|(_, segment)| segment.last_use)
                .map_or(0, |(index, _)| index)
        });
        let cap = (end + self.segment_bytes / 2)
            .min(self.limit_bytes)
            .max(end);
        self.uses += 1;
        let segment = &mut self.segments[index];
        segment.start = offset.max(cap.saturating_sub(self.segment_bytes));
        segment.end = end;
        segment.last_use = self.uses;
        self.stream = Some(Stream {
            segment: index,
            from_byte: end,
            cap_byte: cap,
            start_ns: done_ns,
            ns_per_byte,
        });
        self.refresh(index);
    }

    /// The segment whose data ends exactly at `offset` (a sequential miss).
    pub fn follows(&self, offset: u64) -> Option<usize> {
        self.lookup_ends
            .iter()
            .zip(&self.lookup_starts)
            .position(|(&reach, &start)| reach == offset && start < reach)
    }

    /// A write to `[offset, offset + length)`: drops overlapping segments.
    pub fn invalidate(&mut self, now_ns: f64, offset: u64, length: u64) {
        let end = offset + length.max(1);
        if let Some(stream) = self.stream {
            if self.lookup_starts[stream.segment] < end && offset < self.lookup_ends[stream.segment]
            {
                self.stop_stream(now_ns);
            }
        }
        for index in 0..self.segments.len() {
            if self.lookup_starts[index] < end && offset < self.lookup_ends[index] {
                self.segments[index] = Segment {
                    last_use: self.segments[index].last_use,
                    ..Segment::default()
                };
                self.refresh(index);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Request queue.

/// Order in which queued requests are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueueOrder {
    /// Arrival order.
    Fifo,
    /// Elevator (LOOK): sweep up serving the nearest cylinder above, then down.
    Elevator,
    /// Shortest positioning time first over the first `queue_depth` queued
    /// requests (NCQ/TCQ), oldest first once one waited past the starvation
    /// limit.
    Sptf,
}

/// A queued request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    pub(crate) io: DeviceIo,
    pub(crate) arrival_ns: u64,
    pub(crate) sequence: u64,
    pub(crate) location: Location,
    /// Destage of write-cached data: no completion is reported.
    pub(crate) internal: bool,
    /// Precomputed for SPTF, which estimates every queued request at every
    /// dispatch: earliest media start (arrival + overhead), earliest buffer
    /// answer (arrival + hit overhead), and the interface transfer.
    pub(crate) ready_ns: f64,
    pub(crate) hit_ready_ns: f64,
    pub(crate) hit_transfer_ns: f64,
}

impl Pending {
    pub(crate) fn new(
        io: DeviceIo,
        arrival_ns: u64,
        sequence: u64,
        location: Location,
        timing: &CommandTiming,
    ) -> Pending {
        Pending {
            io,
            arrival_ns,
            sequence,
            location,
            internal: false,
            ready_ns: (arrival_ns + timing.overhead_ns) as i64 as f64,
            hit_ready_ns: (arrival_ns + timing.hit_overhead_ns) as i64 as f64,
            hit_transfer_ns: io.length_bytes as i64 as f64 * timing.interface_ns_per_byte,
        }
    }
}

/// Per-command controller costs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CommandTiming {
    pub(crate) overhead_ns: u64,
    pub(crate) hit_overhead_ns: u64,
    pub(crate) interface_ns_per_byte: f64,
}

#[derive(Clone, Copy, Debug)]
struct ByCylinder(Pending);

impl ByCylinder {
    fn key(&self) -> (u32, u64) {
        (self.0.location.cylinder, self.0.sequence)
    }
}
impl PartialEq for ByCylinder {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for ByCylinder {}
impl PartialOrd for ByCylinder {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByCylinder {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// The queue in front of the actuator. FIFO is a deque; the elevator is two
/// heaps (this sweep, next sweep), `O(log n)`; SPTF scans a window of at
/// most `depth` requests (bounded, 32 by default) fed from a FIFO.
#[derive(Clone, Debug)]
pub(crate) struct RequestQueue {
    order: QueueOrder,
    depth: usize,
    waiting: VecDeque<Pending>,
    window: Vec<Pending>,
    ascending: bool,
    upward: BinaryHeap<Reverse<ByCylinder>>,
    downward: BinaryHeap<ByCylinder>,
    starvation_limit_ns: u64,
}

impl RequestQueue {
    pub(crate) fn new(order: QueueOrder, depth: u32, starvation_limit_ns: u64) -> RequestQueue {
        let depth = depth.max(1) as usize;
        RequestQueue {
            order,
            depth,
            waiting: VecDeque::with_capacity(64),
            window: Vec::with_capacity(depth),
            ascending: true,
            upward: BinaryHeap::new(),
            downward: BinaryHeap::new(),
            starvation_limit_ns,
        }
    }

    pub(crate) fn push(&mut self, pending: Pending, head_cylinder: u32) {
        match self.order {
            QueueOrder::Fifo => self.waiting.push_back(pending),
            QueueOrder::Sptf => {
                if self.window.len() < self.depth {
                    self.window.push(pending);
                } else {
                    self.waiting.push_back(pending);
                }
            }
            QueueOrder::Elevator => {
                // Up: ahead of the head on an upward sweep, or behind it on
                // a downward one (served on the next upward sweep).
                let cylinder = pending.location.cylinder;
                let goes_up = if self.ascending {
                    cylinder >= head_cylinder
                } else {
                    cylinder > head_cylinder
                };
                if goes_up {
                    self.upward.push(Reverse(ByCylinder(pending)));
                } else {
                    self.downward.push(ByCylinder(pending));
                }
            }
        }
    }

    /// The next request to serve at `now_ns`; `cost` estimates the time to
    /// serve a candidate (used by SPTF only).
    pub(crate) fn pop(
        &mut self,
        now_ns: u64,
        mut cost: impl FnMut(&Pending) -> f64,
    ) -> Option<Pending> {
        match self.order {
            QueueOrder::Fifo => self.waiting.pop_front(),
            QueueOrder::Elevator => {
                if self.ascending {
                    if let Some(Reverse(ByCylinder(pending))) = self.upward.pop() {
                        return Some(pending);
                    }
                    self.ascending = false;
                    self.downward.pop().map(|ByCylinder(pending)| pending)
                } else {
                    if let Some(ByCylinder(pending)) = self.downward.pop() {
                        return Some(pending);
                    }
                    self.ascending = true;
                    self.upward
                        .pop()
                        .map(|Reverse(ByCylinder(pending))| pending)
                }
            }
            QueueOrder::Sptf => {
                if self.window.is_empty() {
                    return None;
                }
                let (oldest_index, oldest) = self
                    .window
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, pending)| pending.sequence)?;
                let chosen = if now_ns.saturating_sub(oldest.arrival_ns) >= self.starvation_limit_ns
                {
                    oldest_index
                } else {
                    let mut best = 0;
                    let mut best_cost = f64::INFINITY;
                    let mut best_sequence = u64::MAX;
                    for (index, pending) in self.window.iter().enumerate() {
                        let estimate = cost(pending);
                        if estimate < best_cost
                            || (estimate == best_cost && pending.sequence < best_sequence)
                        {
                            best = index;
                            best_cost = estimate;
                            best_sequence = pending.sequence;
                        }
                    }
                    best
                };
                let pending = self.window.swap_remove(chosen);
                if let Some(next) = self.waiting.pop_front() {
                    self.window.push(next);
                }
                Some(pending)
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The HDD model.

settings! {
    /// Every parameter of an HDD model. Times in milliseconds, rates in
    /// decimal MB/s, as datasheets give them.
    config HddConfig;
    /// A partial [`HddConfig`]: the keys a tier file's `[tier.model]` may set
    /// on an HDD preset.
    overrides HddOverrides;
    {
        /// Name in reports.
        name: String,
        /// Addressable bytes. Less than the platters hold: the volume sits on
        /// the outer part (short-stroked). More: the disk gets more
        /// cylinders of the same density and the seek curve is refitted
        /// with the same datasheet times.
        capacity_bytes: u64,
        rpm: f64,
        /// Recording surfaces.
        heads: u32,
        /// Tracks per surface.
        cylinders: u32,
        /// Recording zones (constant bytes per track inside one).
        zones: u32,
        /// Media rate at the outer and inner diameter (bits under the head,
        /// track switches not included).
        outer_rate_mb_s: f64,
        inner_rate_mb_s: f64,
        read_seek: SeekFigures,
        write_seek: SeekFigures,
        /// Head switch at a track boundary (hidden by the track skew).
        track_switch_ms: f64,
        /// Controller overhead per command that goes to the media; it
        /// overlaps the previous command when the request waited in the queue.
        overhead_ms: f64,
        /// Controller overhead of a command served from the buffer.
        cache_hit_overhead_ms: f64,
        /// Host interface rate (buffer hits, write-cache transfers).
        interface_rate_mb_s: f64,
        queue_order: QueueOrder,
        /// NCQ/TCQ window for `sptf` (the drive's command queue).
        queue_depth: u32,
        /// A request waiting this long is served next whatever its cost.
        starvation_limit_ms: f64,
        /// Read-ahead buffer segments (0 turns the read cache off).
        cache_segments: u32,
        segment_bytes: u64,
        /// After a miss that continues a segment (a sequential reader), the
        /// head reads this much further even with commands waiting.
        sequential_prefetch_bytes: u64,
        /// Write-back cache: writes complete once in the buffer and are
        /// destaged later. Off on the papers' servers (and by default).
        write_cache: bool,
        write_cache_bytes: u64,
    }
}

/// Bytes per track at the outer and inner diameters that give `capacity`
/// bytes on `heads × cylinders` tracks with the given inner/outer ratio.
fn average_rate_mb_s(capacity_bytes: u64, heads: u32, cylinders: u32, rpm: f64) -> f64 {
    let track_bytes = capacity_bytes as f64 / (f64::from(heads) * f64::from(cylinders));
    track_bytes * rpm / 60.0 / 1e6
}

impl HddConfig {
    /// The preset's parameters, or `None` if `preset` is not an HDD.
    pub fn preset(preset: DevicePreset) -> Option<HddConfig> {
        match preset {
            DevicePreset::Savvio10k4 => Some(Self::savvio_10k4()),
            DevicePreset::Cheetah15k7 => Some(Self::cheetah_15k7()),
            DevicePreset::Constellation2 => Some(Self::constellation_2()),
            _ => None,
        }
    }

    /// Seagate Savvio 10K.4 ST9600204SS, 600 GB, 10k rpm, 6 heads,
    /// 147,620 tracks per surface, ~113 MB/s average media rate.
    pub fn savvio_10k4() -> HddConfig {
        let capacity_bytes = 1_172_123_568 * 512;
        let average = average_rate_mb_s(capacity_bytes, 6, 147_620, 10_000.0);
        // Track length ∝ radius; a 2.5" platter's ID/OD ratio is about 0.6.
        HddConfig {
            name: "savvio10k4".to_string(),
            capacity_bytes,
            rpm: 10_000.0,
            heads: 6,
            cylinders: 147_620,
            zones: 24,
            outer_rate_mb_s: 2.0 * average / 1.6,
            inner_rate_mb_s: 2.0 * average * 0.6 / 1.6,
            read_seek: SeekFigures {
                track_to_track_ms: 0.30,
                average_ms: 3.8,
                full_stroke_ms: 7.81,
            },
            write_seek: SeekFigures {
                track_to_track_ms: 0.56,
                average_ms: 4.4,
                full_stroke_ms: 8.18,
            },
            track_switch_ms: 0.30,
            overhead_ms: 0.2,
            cache_hit_overhead_ms: 0.05,
            interface_rate_mb_s: 600.0,
            queue_order: QueueOrder::Sptf,
            queue_depth: 32,
            starvation_limit_ms: 1000.0,
            // 16 MiB buffer, about 13 MB of it usable as cache.
            cache_segments: 16,
            segment_bytes: 832 << 10,
            sequential_prefetch_bytes: 128 << 10,
            write_cache: false,
            write_cache_bytes: 8 << 20,
        }
    }

    /// Seagate Cheetah 15K.7 ST3600057SS, 600 GB, 15k rpm, 8 heads,
    /// 204–122 MB/s.
    pub fn cheetah_15k7() -> HddConfig {
        let capacity_bytes = 1_172_123_568 * 512;
        let (outer, inner) = (204.0, 122.0);
        let track_bytes = (outer + inner) / 2.0 * 1e6 * 60.0 / 15_000.0;
        let cylinders = (capacity_bytes as f64 / (8.0 * track_bytes)).ceil() as u32;
        HddConfig {
            name: "cheetah15k7".to_string(),
            capacity_bytes,
            rpm: 15_000.0,
            heads: 8,
            cylinders,
            zones: 24,
            outer_rate_mb_s: outer,
            inner_rate_mb_s: inner,
            read_seek: SeekFigures {
                track_to_track_ms: 0.2,
                average_ms: 3.4,
                full_stroke_ms: 6.6,
            },
            write_seek: SeekFigures {
                track_to_track_ms: 0.44,
                average_ms: 3.9,
                full_stroke_ms: 7.4,
            },
            track_switch_ms: 0.2,
            overhead_ms: 0.2,
            cache_hit_overhead_ms: 0.05,
            interface_rate_mb_s: 600.0,
            queue_order: QueueOrder::Sptf,
            queue_depth: 32,
            starvation_limit_ms: 1000.0,
            cache_segments: 16,
            segment_bytes: 832 << 10,
            sequential_prefetch_bytes: 128 << 10,
            write_cache: false,
            write_cache_bytes: 8 << 20,
        }
    }

    /// Seagate Constellation.2 ST91000640NS, 1 TB, 7200 rpm, 4 heads,
    /// about 115–63 MB/s.
    pub fn constellation_2() -> HddConfig {
        let capacity_bytes = 1_953_525_168 * 512;
        let (outer, inner) = (115.0, 63.0);
        let track_bytes = (outer + inner) / 2.0 * 1e6 * 60.0 / 7_200.0;
        let cylinders = (capacity_bytes as f64 / (4.0 * track_bytes)).ceil() as u32;
        HddConfig {
            name: "constellation2".to_string(),
            capacity_bytes,
            rpm: 7_200.0,
            heads: 4,
            cylinders,
            zones: 24,
            outer_rate_mb_s: outer,
            inner_rate_mb_s: inner,
            read_seek: SeekFigures {
                track_to_track_ms: 0.23,
                average_ms: 7.5,
                full_stroke_ms: 17.06,
            },
            write_seek: SeekFigures {
                track_to_track_ms: 0.5,
                average_ms: 8.0,
                full_stroke_ms: 17.5,
            },
            track_switch_ms: 0.3,
            overhead_ms: 0.2,
            cache_hit_overhead_ms: 0.05,
            interface_rate_mb_s: 600.0,
            queue_order: QueueOrder::Sptf,
            queue_depth: 32,
            starvation_limit_ms: 1000.0,
            cache_segments: 16,
            segment_bytes: 3 << 20,
            sequential_prefetch_bytes: 128 << 10,
            write_cache: false,
            write_cache_bytes: 32 << 20,
        }
    }

    /// Checks every value; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let device = self.name.as_str();
        if self.capacity_bytes == 0 {
            return Err(ConfigError::new(
                device,
                "capacity_bytes",
                "must be above zero",
            ));
        }
        positive(device, "rpm", self.rpm)?;
        for (key, value) in [("heads", self.heads), ("cylinders", self.cylinders)] {
            if value == 0 {
                return Err(ConfigError::new(device, key, "must be above zero"));
            }
        }
        if self.cylinders < 3 {
            return Err(ConfigError::new(device, "cylinders", "at least 3"));
        }
        if self.zones == 0 {
            return Err(ConfigError::new(device, "zones", "must be above zero"));
        }
        positive(device, "outer_rate_mb_s", self.outer_rate_mb_s)?;
        positive(device, "inner_rate_mb_s", self.inner_rate_mb_s)?;
        validate_seek(device, "read_seek", &self.read_seek)?;
        validate_seek(device, "write_seek", &self.write_seek)?;
        non_negative(device, "track_switch_ms", self.track_switch_ms)?;
        non_negative(device, "overhead_ms", self.overhead_ms)?;
        non_negative(device, "cache_hit_overhead_ms", self.cache_hit_overhead_ms)?;
        positive(device, "interface_rate_mb_s", self.interface_rate_mb_s)?;
        if self.queue_depth == 0 || self.queue_depth > 256 {
            return Err(ConfigError::new(device, "queue_depth", "1 to 256"));
        }
        non_negative(device, "starvation_limit_ms", self.starvation_limit_ms)?;
        if self.cache_segments > 1024 {
            return Err(ConfigError::new(device, "cache_segments", "0 to 1024"));
        }
        Ok(())
    }
}

pub(crate) fn validate_seek(
    device: &str,
    key: &str,
    figures: &SeekFigures,
) -> Result<(), ConfigError> {
    positive(
        device,
        &format!("{key}.track_to_track_ms"),
        figures.track_to_track_ms,
    )?;
    positive(device, &format!("{key}.average_ms"), figures.average_ms)?;
    positive(
        device,
        &format!("{key}.full_stroke_ms"),
        figures.full_stroke_ms,
    )?;
    if !(figures.track_to_track_ms <= figures.average_ms
        && figures.average_ms <= figures.full_stroke_ms)
    {
        return Err(ConfigError::new(
            device,
            key,
            "needs track_to_track_ms ≤ average_ms ≤ full_stroke_ms",
        ));
    }
    Ok(())
}

/// Builds the mechanics for `addressable_bytes` on a disk described by the
/// given figures (see [`HddConfig::capacity_bytes`] for a size that differs
/// from what the platters hold). `seed` sets the spindle's angle at time 0.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_mechanics(
    addressable_bytes: u64,
    rpm: f64,
    heads: u32,
    cylinders: u32,
    zones: u32,
    outer_rate_mb_s: f64,
    inner_rate_mb_s: f64,
    read_seek: &SeekFigures,
    write_seek: &SeekFigures,
    track_switch_ms: f64,
    seed: u64,
) -> Mechanics {
    let revolution_ns = 60e9 / rpm;
    let outer_track_bytes = outer_rate_mb_s * 1e6 * revolution_ns / 1e9;
    let inner_track_bytes = inner_rate_mb_s * 1e6 * revolution_ns / 1e9;
    let switch_ns = ms_to_ns(track_switch_ms);
    let mut cylinders = cylinders;
    let mut geometry = Geometry::new(
        heads,
        cylinders,
        zones,
        outer_track_bytes,
        inner_track_bytes,
        revolution_ns,
        switch_ns,
    );
    // Grow the disk (same density) until it holds the addressable bytes.
    for _ in 0..8 {
        if geometry.bytes() >= addressable_bytes {
            break;
        }
        let scale = addressable_bytes as f64 / geometry.bytes().max(1) as f64;
        cylinders =
            ((f64::from(cylinders) * scale).ceil() as u64 + 1).min(u64::from(u32::MAX)) as u32;
        geometry = Geometry::new(
            heads,
            cylinders,
            zones,
            outer_track_bytes,
            inner_track_bytes,
            revolution_ns,
            switch_ns,
        );
    }
    let read_curve = SeekCurve::fit(read_seek, cylinders);
    let write_curve = SeekCurve::fit(write_seek, cylinders);
    let phase_ns = SeededRng::new(seed).next_f64() * revolution_ns;
    Mechanics::new(geometry, read_curve, write_curve, phase_ns)
}

/// What the actuator is doing.
#[derive(Clone, Copy, Debug)]
struct Service {
    pending: Pending,
    start_ns: u64,
    /// The host sees the IO done.
    done_ns: u64,
    /// The actuator is free (later than `done_ns` after a sequential
    /// prefetch).
    free_ns: u64,
    reported: bool,
}

/// An event-driven HDD (see the module docs).
#[derive(Clone, Debug)]
pub struct Hdd {
    name: String,
    capacity_bytes: u64,
    mechanics: Mechanics,
    cache: SegmentCache,
    queue: RequestQueue,
    service: Option<Service>,
    /// Write-cache acknowledgements waiting for their time.
    acknowledged: BinaryHeap<Reverse<Timed>>,
    /// Completed in model time, not yet handed out by `advance`.
    finished: Vec<Completion>,
    counters: DeviceCounters,
    clock_ns: u64,
    sequence: u64,
    host_queued: usize,
    timing: CommandTiming,
    sequential_prefetch_bytes: u64,
    write_cache_bytes: u64,
    dirty_bytes: u64,
}

impl Hdd {
    /// A model from `config`; `seed` sets the spindle phase at time 0 (the
    /// model is otherwise deterministic).
    pub fn new(config: &HddConfig, seed: u64) -> Result<Hdd, ConfigError> {
        config.validate()?;
        let mechanics = build_mechanics(
            config.capacity_bytes,
            config.rpm,
            config.heads,
            config.cylinders,
            config.zones,
            config.outer_rate_mb_s,
            config.inner_rate_mb_s,
            &config.read_seek,
            &config.write_seek,
            config.track_switch_ms,
            seed,
        );
        Ok(Hdd {
            name: config.name.clone(),
            capacity_bytes: config.capacity_bytes,
            cache: SegmentCache::new(
                config.cache_segments,
                config.segment_bytes,
                config.capacity_bytes,
            ),
            mechanics,
            queue: RequestQueue::new(
                config.queue_order,
                config.queue_depth,
                ms_to_ns(config.starvation_limit_ms) as u64,
            ),
            service: None,
            acknowledged: BinaryHeap::new(),
            finished: Vec::with_capacity(64),
            counters: DeviceCounters::default(),
            clock_ns: 0,
            sequence: 0,
            host_queued: 0,
            timing: CommandTiming {
                overhead_ns: ms_to_ns(config.overhead_ms) as u64,
                hit_overhead_ns: ms_to_ns(config.cache_hit_overhead_ms) as u64,
                interface_ns_per_byte: ns_per_byte(config.interface_rate_mb_s),
            },
            sequential_prefetch_bytes: config.sequential_prefetch_bytes,
            write_cache_bytes: if config.write_cache {
                config.write_cache_bytes
            } else {
                0
            },
            dirty_bytes: 0,
        })
    }

    /// The preset's model at its own capacity.
    pub fn preset(preset: DevicePreset, seed: u64) -> Option<Hdd> {
        HddConfig::preset(preset).and_then(|config| Hdd::new(&config, seed).ok())
    }

    /// The mechanics (geometry, seek curves), for reports and tests.
    pub fn mechanics(&self) -> &Mechanics {
        &self.mechanics
    }

    /// Processes every event up to `now_ns`.
    fn run_until(&mut self, now_ns: u64) {
        loop {
            let service_event = self.service.map(|service| {
                if service.reported {
                    service.free_ns
                } else {
                    service.done_ns
                }
            });
            let acknowledged_event = self
                .acknowledged
                .peek()
                .map(|Reverse(timed)| timed.completion.done_ns);
            match (service_event, acknowledged_event) {
                (Some(service_ns), acknowledged)
                    if service_ns <= now_ns && acknowledged.is_none_or(|a| service_ns <= a) =>
                {
                    self.service_event();
                }
                (_, Some(acknowledged_ns)) if acknowledged_ns <= now_ns => {
                    if let Some(Reverse(timed)) = self.acknowledged.pop() {
                        count_completion(
                            &mut self.counters,
                            timed.op,
                            timed.length_bytes,
                            &timed.completion,
                        );
                        self.finished.push(timed.completion);
                    }
                }
                _ => break,
            }
        }
        self.clock_ns = self.clock_ns.max(now_ns);
    }

    fn service_event(&mut self) {
        let Some(mut service) = self.service else {
            return;
        };
        if !service.reported {
            service.reported = true;
            let pending = service.pending;
            if pending.internal {
                self.dirty_bytes = self.dirty_bytes.saturating_sub(pending.io.length_bytes);
            } else {
                let completion = Completion {
                    id: pending.io.id,
                    arrival_ns: pending.arrival_ns,
                    start_ns: service.start_ns,
                    done_ns: service.done_ns,
                    background: pending.io.background,
                };
                count_completion(
                    &mut self.counters,
                    pending.io.op,
                    pending.io.length_bytes,
                    &completion,
                );
                self.finished.push(completion);
            }
            self.service = Some(service);
            return;
        }
        self.counters.busy_ns += service.free_ns - service.start_ns;
        self.service = None;
        self.dispatch(service.free_ns);
    }

    /// Starts the next queued request at `now_ns` if the actuator is free.
    fn dispatch(&mut self, now_ns: u64) {
        if self.service.is_some() {
            return;
        }
        let Hdd {
            queue,
            mechanics,
            cache,
            ..
        } = self;
        let now = now_ns as i64 as f64;
        let estimate = |pending: &Pending| estimate_ns(mechanics, cache, now, pending);
        let Some(pending) = queue.pop(now_ns, estimate) else {
            return;
        };
        if !pending.internal {
            self.host_queued -= 1;
        }
        self.serve(pending, now_ns);
    }

    fn serve(&mut self, pending: Pending, now_ns: u64) {
        let io = pending.io;
        let now = now_ns as f64;
        let mut done = None;
        if io.op == Op::Read {
            let check = now.max((pending.arrival_ns + self.timing.hit_overhead_ns) as f64);
            if let Some((segment, ready)) =
                self.cache.lookup(check, io.offset_bytes, io.length_bytes)
            {
                self.cache
                    .note_hit(segment, io.offset_bytes, io.length_bytes);
                let transfer = io.length_bytes as f64 * self.timing.interface_ns_per_byte;
                done = Some((check + transfer).max(ready));
            }
        }
        let (done_ns, free_ns) = match done {
            Some(done) => {
                let done = done.ceil() as u64;
                (done, done)
            }
            None => {
                let ready = now.max((pending.arrival_ns + self.timing.overhead_ns) as f64);
                let sequential = io.op == Op::Read && self.cache.follows(io.offset_bytes).is_some();
                self.cache.stop_stream(ready);
                if io.op == Op::Write {
                    self.cache
                        .invalidate(ready, io.offset_bytes, io.length_bytes);
                }
                let location = pending.location;
                let end = ready
                    + self.mechanics.positioning_ns(ready, &location, io.op)
                    + self
                        .mechanics
                        .geometry
                        .transfer_ns(&location, io.length_bytes);
                self.mechanics
                    .park_after(&location, io.offset_bytes, io.length_bytes);
                let mut free = end;
                if io.op == Op::Read && io.length_bytes > 0 {
                    let rate = self.mechanics.geometry.streaming_ns_per_byte(&location);
                    self.cache
                        .start_stream(end, io.offset_bytes, io.length_bytes, rate);
                    if sequential {
                        let bytes = self
                            .sequential_prefetch_bytes
                            .min(self.capacity_bytes - (io.offset_bytes + io.length_bytes));
                        free = end + bytes as f64 * rate;
                    }
                }
                let done = end.ceil() as u64;
                (done, (free.ceil() as u64).max(done))
            }
        };
        self.service = Some(Service {
            pending,
            start_ns: now_ns,
            done_ns,
            free_ns,
            reported: false,
        });
    }
}

/// Estimated time to serve `pending` if started at `now_ns` (SPTF's cost):
/// a buffer hit costs its transfer; a miss its overhead wait and positioning.
#[inline]
fn estimate_ns(mechanics: &Mechanics, cache: &SegmentCache, now: f64, pending: &Pending) -> f64 {
    let io = &pending.io;
    if io.op == Op::Read {
        let check = now.max(pending.hit_ready_ns);
        if let Some((_, ready)) = cache.lookup(check, io.offset_bytes, io.length_bytes) {
            return (check + pending.hit_transfer_ns).max(ready) - now;
        }
    }
    let ready = now.max(pending.ready_ns);
    ready - now + mechanics.positioning_ns(ready, &pending.location, io.op)
}

impl DeviceModel for Hdd {
    fn name(&self) -> &str {
        &self.name
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn submit(&mut self, now_ns: u64, io: DeviceIo) {
        self.run_until(now_ns);
        let io = clamp_io(io, self.capacity_bytes);
        self.sequence += 1;
        let location = self.mechanics.geometry.locate(io.offset_bytes);
        let pending = Pending::new(io, now_ns, self.sequence, location, &self.timing);
        if io.op == Op::Write
            && self.write_cache_bytes > 0
            && self.dirty_bytes + io.length_bytes <= self.write_cache_bytes
        {
            // Write-back: done once in the buffer; the media write follows.
            self.dirty_bytes += io.length_bytes;
            let done = now_ns
                + self.timing.hit_overhead_ns
                + (io.length_bytes as f64 * self.timing.interface_ns_per_byte).ceil() as u64;
            self.acknowledged.push(Reverse(Timed {
                completion: Completion {
                    id: io.id,
                    arrival_ns: now_ns,
                    start_ns: now_ns,
                    done_ns: done,
                    background: io.background,
                },
                op: io.op,
                length_bytes: io.length_bytes,
                sequence: self.sequence,
            }));
            self.queue.push(
                Pending {
                    internal: true,
                    ..pending
                },
                self.mechanics.head_cylinder(),
            );
        } else {
            self.host_queued += 1;
            self.queue.push(pending, self.mechanics.head_cylinder());
        }
        self.dispatch(now_ns);
    }

    fn next_event_ns(&self) -> Option<u64> {
        if let Some(first) = self.finished.first() {
            return Some(first.done_ns);
        }
        let service = self.service.map(|service| {
            if service.reported {
                service.free_ns
            } else {
                service.done_ns
            }
        });
        let acknowledged = self
            .acknowledged
            .peek()
            .map(|Reverse(timed)| timed.completion.done_ns);
        match (service, acknowledged) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>) {
        self.run_until(now_ns);
        done.append(&mut self.finished);
    }

    fn outstanding(&self) -> usize {
        let in_service = self
            .service
            .filter(|service| !service.reported && !service.pending.internal)
            .map_or(0, |_| 1);
        self.host_queued + in_service + self.acknowledged.len() + self.finished.len()
    }

    fn counters(&self) -> DeviceCounters {
        let mut counters = self.counters;
        if let Some(service) = self.service {
            if self.clock_ns > service.start_ns {
                counters.busy_ns += self.clock_ns.min(service.free_ns) - service.start_ns;
            }
        }
        counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn geometry_holds_the_capacity_and_outer_zones_are_faster() {
        for config in [
            HddConfig::savvio_10k4(),
            HddConfig::cheetah_15k7(),
            HddConfig::constellation_2(),
        ] {
            let hdd = Hdd::new(&config, 1).unwrap();
            let geometry = &hdd.mechanics().geometry;
            assert!(geometry.bytes() >= config.capacity_bytes, "{}", config.name);
            assert!(geometry.bytes() < config.capacity_bytes + config.capacity_bytes / 100);
            let outer = geometry.rate_bytes_per_second(0) / 1e6;
            let inner = geometry.rate_bytes_per_second(config.capacity_bytes - 1) / 1e6;
            assert!(outer > inner * 1.5, "{}: {outer} vs {inner}", config.name);
            assert!((outer - config.outer_rate_mb_s).abs() / config.outer_rate_mb_s < 0.05);
        }
    }

    #[test]
    fn locations_walk_the_tracks_in_order() {
        let geometry = Geometry::new(2, 10, 2, 4096.0, 2048.0, 6e6, 0.0);
        let first = geometry.locate(0);
        assert_eq!(
            (first.cylinder, first.track, first.byte_in_track),
            (0, 0, 0)
        );
        let next_track = geometry.locate(first.track_bytes);
        assert_eq!((next_track.cylinder, next_track.track), (0, 1));
        let next_cylinder = geometry.locate(2 * first.track_bytes);
        assert_eq!(next_cylinder.cylinder, 1);
        let last = geometry.locate(geometry.bytes() - 1);
        assert_eq!(last.cylinder, 9);
        assert!(last.track_bytes < first.track_bytes);
    }

    #[test]
    fn overrides_change_only_what_they_name() {
        let overrides: HddOverrides =
            serde_json::from_str(r#"{"queue_order":"elevator","overhead_ms":0.5}"#).unwrap();
        let mut config = HddConfig::savvio_10k4();
        overrides.apply(&mut config);
        assert_eq!(config.queue_order, QueueOrder::Elevator);
        assert_eq!(config.overhead_ms, 0.5);
        assert_eq!(config.rpm, 10_000.0);
        let unknown = serde_json::from_str::<HddOverrides>(r#"{"rmp":1}"#).unwrap_err();
        assert!(unknown.to_string().contains("rmp"), "{unknown}");
    }

    #[test]
    fn invalid_settings_name_their_key() {
        let mut config = HddConfig::savvio_10k4();
        config.rpm = 0.0;
        let error = Hdd::new(&config, 0).unwrap_err();
        assert_eq!(error.key, "rpm");
        let mut config = HddConfig::savvio_10k4();
        config.read_seek.average_ms = 9.0;
        assert_eq!(Hdd::new(&config, 0).unwrap_err().key, "read_seek");
    }
}
