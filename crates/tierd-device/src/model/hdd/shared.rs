//! Settings plumbing shared by every model (HDD, SMR, SSD, memory): the
//! [`ConfigError`] a bad setting reports, the range checks, the `settings!`
//! macro, and the completion bookkeeping the models have in common.

use std::cmp::Ordering;

use tierd_common::op::Op;

use crate::model::{Completion, DeviceCounters, DeviceIo};

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

/// Most bytes a disk's platters may hold: 2^60 (an exabyte, a million
/// times today's disks), far inside what the geometry's byte arithmetic
/// holds.
pub(crate) const MAX_PLATTER_BYTES: f64 = (1u64 << 60) as f64;

/// Checks that heads × cylinders × the longest track (the faster of the
/// two media rates over one revolution) stays within [`MAX_PLATTER_BYTES`]:
/// the settings are each valid, but together they could describe a disk
/// whose byte offsets overflow.
pub(crate) fn validate_platters(
    device: &str,
    heads: u32,
    cylinders: u32,
    rpm: f64,
    outer_rate_mb_s: f64,
    inner_rate_mb_s: f64,
) -> Result<(), ConfigError> {
    let track_bytes = outer_rate_mb_s.max(inner_rate_mb_s) * 1e6 * 60.0 / rpm;
    let bytes = f64::from(heads) * f64::from(cylinders) * track_bytes;
    // Also refuses NaN and infinity.
    if bytes < MAX_PLATTER_BYTES {
        return Ok(());
    }
    Err(ConfigError::new(
        device,
        "heads, cylinders, rpm, outer_rate_mb_s, inner_rate_mb_s",
        format!(
            "together they make platters of {bytes:.3e} bytes (heads × cylinders × the faster media rate × 60 / rpm); at most 2^60: lower heads, cylinders or the rates"
        ),
    ))
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
