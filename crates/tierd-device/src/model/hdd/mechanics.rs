//! The actuator and spindle ([`Mechanics`]): seek and rotational timing from
//! the head's position, and how the mechanics are built from datasheet
//! figures. Shared with the SMR model.

use tierd_common::op::Op;
use tierd_common::rng::{Rng, SeededRng};

use super::geometry::{fraction, Geometry, Location};
use super::seek::{SeekCurve, SeekFigures};
use super::shared::ms_to_ns;

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

/// Builds the mechanics for `addressable_bytes` on a disk described by the
/// given figures (see
/// [`HddConfig::capacity_bytes`](super::HddConfig::capacity_bytes) for a
/// size that differs from what the platters hold). `seed` sets the
/// spindle's angle at time 0.
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
