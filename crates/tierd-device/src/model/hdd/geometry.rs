//! Zoned recording geometry: where an offset lives (cylinder, track, angle)
//! and how long bytes take to pass under the head.

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
    pub(super) revolution_ns: f64,
    pub(super) revolutions_per_ns: f64,
    pub(super) track_switch_ns: f64,
    skew_per_track: f64,
}

/// The fractional part of a non-negative `value` (a cast, not a libm call:
/// the baseline x86-64 target has no rounding instruction).
#[inline]
pub(super) fn fraction(value: f64) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
