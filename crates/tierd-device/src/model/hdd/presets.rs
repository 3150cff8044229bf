//! The drive presets: datasheet parameters of the Savvio 10K.4, Cheetah
//! 15K.7 and Constellation.2.

use super::config::HddConfig;
use super::queue::QueueOrder;
use super::seek::SeekFigures;
use crate::model::DevicePreset;

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
            DevicePreset::Wd1200jb => Some(Self::wd1200jb()),
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

    /// Western Digital Caviar WD1200JB, 120 GB, 7200 rpm, 8 MB buffer, ATA/100:
    /// paper 003's disk (its Table 1, WD1200JB-75CRA0). Datasheet (WD
    /// specifications 2879-001034): 234,441,648 sectors; read seek 8.9 ms
    /// average, 2.0 ms track-to-track, 21 ms full stroke; write seek 10.9 ms
    /// average. Media rates are not on the datasheet: about 50 MB/s at the
    /// outer diameter and 29 MB/s at the inner, as reviews of the drive's
    /// 40 GB-per-platter generation measured (an estimate: three platters,
    /// six heads).
    pub fn wd1200jb() -> HddConfig {
        let capacity_bytes = 234_441_648 * 512;
        let (outer, inner) = (50.0, 29.0);
        let track_bytes = (outer + inner) / 2.0 * 1e6 * 60.0 / 7_200.0;
        let cylinders = (capacity_bytes as f64 / (6.0 * track_bytes)).ceil() as u32;
        HddConfig {
            name: "wd1200jb".to_string(),
            capacity_bytes,
            rpm: 7_200.0,
            heads: 6,
            cylinders,
            zones: 16,
            outer_rate_mb_s: outer,
            inner_rate_mb_s: inner,
            read_seek: SeekFigures {
                track_to_track_ms: 2.0,
                average_ms: 8.9,
                full_stroke_ms: 21.0,
            },
            write_seek: SeekFigures {
                track_to_track_ms: 2.0,
                average_ms: 10.9,
                full_stroke_ms: 22.0,
            },
            track_switch_ms: 1.0,
            overhead_ms: 0.3,
            cache_hit_overhead_ms: 0.1,
            interface_rate_mb_s: 100.0,
            // ATA without command queueing: one command at a time, in order.
            queue_order: QueueOrder::Fifo,
            queue_depth: 1,
            starvation_limit_ms: 1000.0,
            // 8 MB buffer.
            cache_segments: 16,
            segment_bytes: 512 << 10,
            sequential_prefetch_bytes: 128 << 10,
            write_cache: false,
            write_cache_bytes: 4 << 20,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hdd::Hdd;

    #[test]
    fn geometry_holds_the_capacity_and_outer_zones_are_faster() {
        for config in [
            HddConfig::savvio_10k4(),
            HddConfig::cheetah_15k7(),
            HddConfig::constellation_2(),
            HddConfig::wd1200jb(),
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
}
