//! [`HddConfig`] and its [`HddOverrides`] twin, and their validation (the
//! presets are in `presets.rs`).

use super::queue::QueueOrder;
use super::seek::SeekFigures;
use super::shared::{non_negative, positive, settings, validate_platters, ConfigError};

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

impl HddConfig {
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
        validate_platters(
            device,
            self.heads,
            self.cylinders,
            self.rpm,
            self.outer_rate_mb_s,
            self.inner_rate_mb_s,
        )?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hdd::Hdd;

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

    /// Settings valid one by one that together describe platters past
    /// 2^60 bytes are refused (their byte offsets would overflow), naming
    /// the settings; the SMR model shares the check.
    #[test]
    fn platters_too_large_for_byte_offsets_are_refused() {
        use crate::model::smr::{Smr, SmrConfig};
        let huge = |config: &mut HddConfig, case: usize| match case {
            0 => config.heads = u32::MAX,
            1 => config.outer_rate_mb_s = 1e308,
            2 => config.inner_rate_mb_s = u32::MAX as f64,
            _ => config.rpm = 1e-300,
        };
        for case in 0..4 {
            let mut config = HddConfig::savvio_10k4();
            huge(&mut config, case);
            let error = Hdd::new(&config, 0).unwrap_err();
            assert!(error.key.contains("heads, cylinders"), "{error}");
            assert!(error.reason.contains("at most 2^60"), "{error}");
        }
        let mut config = SmrConfig::archive_8tb();
        config.heads = u32::MAX;
        assert!(Smr::new(&config, 0).unwrap_err().key.contains("cylinders"));
        assert!(Smr::new(&SmrConfig::archive_8tb(), 0).is_ok());
    }
}
