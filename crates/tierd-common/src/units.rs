//! Human units for sizes and durations: "1GiB", "512", "4k", "60s", "24s",
//! "500ms", "2h". Used by the CLI and by every TOML setting, so an operator
//! writes sizes and times the way they think of them.

use std::fmt;

/// A size or duration string that could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {text:?} as {what}: {reason} (examples: {examples})")]
pub struct UnitError {
    pub text: String,
    pub what: &'static str,
    pub reason: String,
    pub examples: &'static str,
}

const SIZE_EXAMPLES: &str = "4096, 4KiB, 1MiB, 1GiB, 2TB";
const DURATION_EXAMPLES: &str = "500ms, 24s, 60s, 5m, 2h, 1d";

fn split_number(text: &str) -> (&str, &str) {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    (number, unit.trim())
}

fn parse_number(
    text: &str,
    number: &str,
    what: &'static str,
    examples: &'static str,
) -> Result<f64, UnitError> {
    let cleaned: String = number.chars().filter(|c| *c != '_').collect();
    cleaned.parse::<f64>().map_err(|_| UnitError {
        text: text.to_string(),
        what,
        reason: "no number at the start".to_string(),
        examples,
    })
}

/// Parses a byte count. Binary units (KiB, MiB, GiB, TiB, and the shorthand
/// K/M/G/T) are powers of 1024; decimal units (kB, MB, GB, TB) are powers of
/// 1000; a bare number is bytes.
pub fn parse_bytes(text: &str) -> Result<u64, UnitError> {
    let (number, unit) = split_number(text);
    let value = parse_number(text, number, "a size", SIZE_EXAMPLES)?;
    let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" | "ki" => 1024.0,
        "m" | "mib" | "mi" => 1024.0 * 1024.0,
        "g" | "gib" | "gi" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" | "ti" => 1024.0f64.powi(4),
        "p" | "pib" | "pi" => 1024.0f64.powi(5),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "pb" => 1e15,
        _ => {
            return Err(UnitError {
                text: text.to_string(),
                what: "a size",
                reason: format!("unknown unit {unit:?}"),
                examples: SIZE_EXAMPLES,
            })
        }
    };
    let bytes = value * multiplier;
    if !(0.0..1.8e19).contains(&bytes) || bytes.fract() != 0.0 {
        return Err(UnitError {
            text: text.to_string(),
            what: "a size",
            reason: "not a whole number of bytes that fits in 64 bits".to_string(),
            examples: SIZE_EXAMPLES,
        });
    }
    Ok(bytes as u64)
}

/// Parses a duration into nanoseconds. Units: ns, us, ms, s, m/min, h, d; a
/// bare number is seconds.
pub fn parse_duration_ns(text: &str) -> Result<u64, UnitError> {
    let (number, unit) = split_number(text);
    let value = parse_number(text, number, "a duration", DURATION_EXAMPLES)?;
    let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "" | "s" | "sec" => 1e9,
        "m" | "min" => 60e9,
        "h" | "hour" | "hours" => 3600e9,
        "d" | "day" | "days" => 86_400e9,
        _ => {
            return Err(UnitError {
                text: text.to_string(),
                what: "a duration",
                reason: format!("unknown unit {unit:?}"),
                examples: DURATION_EXAMPLES,
            })
        }
    };
    let nanoseconds = (value * multiplier).round();
    if !(0.0..1.8e19).contains(&nanoseconds) {
        return Err(UnitError {
            text: text.to_string(),
            what: "a duration",
            reason: "out of range".to_string(),
            examples: DURATION_EXAMPLES,
        });
    }
    Ok(nanoseconds as u64)
}

/// Bytes in binary units with up to two decimals: `1.50 GiB`.
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            write!(formatter, "{} B", self.0)
        } else {
            write!(formatter, "{value:.2} {}", UNITS[unit])
        }
    }
}

/// A nanosecond duration in the largest unit that keeps it readable.
pub struct Duration(pub u64);

impl fmt::Display for Duration {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0 as f64;
        if ns < 1e3 {
            write!(formatter, "{} ns", self.0)
        } else if ns < 1e6 {
            write!(formatter, "{:.1} us", ns / 1e3)
        } else if ns < 1e9 {
            write!(formatter, "{:.1} ms", ns / 1e6)
        } else if ns < 120e9 {
            write!(formatter, "{:.1} s", ns / 1e9)
        } else if ns < 7200e9 {
            write!(formatter, "{:.1} min", ns / 60e9)
        } else {
            write!(formatter, "{:.1} h", ns / 3600e9)
        }
    }
}

pub const NS_PER_SECOND: u64 = 1_000_000_000;
pub const SECTOR_BYTES: u64 = 512;
pub const PAGE_BYTES: u64 = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("4KiB").unwrap(), 4096);
        assert_eq!(parse_bytes("4k").unwrap(), 4096);
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes(" 1 GiB ").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("2GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_bytes("1.5MiB").unwrap(), 1_572_864);
        assert_eq!(parse_bytes("1_000").unwrap(), 1000);
    }

    #[test]
    fn bad_sizes_say_why() {
        let error = parse_bytes("12 parsecs").unwrap_err();
        assert!(
            error.to_string().contains("unknown unit \"parsecs\""),
            "{error}"
        );
        assert!(parse_bytes("GiB").is_err());
        assert!(parse_bytes("0.3").is_err());
        assert!(parse_bytes("99999999999TiB").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("60s").unwrap(), 60 * NS_PER_SECOND);
        assert_eq!(parse_duration_ns("24").unwrap(), 24 * NS_PER_SECOND);
        assert_eq!(parse_duration_ns("500ms").unwrap(), 500_000_000);
        assert_eq!(parse_duration_ns("2h").unwrap(), 7200 * NS_PER_SECOND);
        assert_eq!(parse_duration_ns("1.5m").unwrap(), 90 * NS_PER_SECOND);
        assert!(parse_duration_ns("3 fortnights").is_err());
    }

    #[test]
    fn display() {
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(Bytes(1536 * 1024 * 1024).to_string(), "1.50 GiB");
        assert_eq!(Duration(1_500_000).to_string(), "1.5 ms");
        assert_eq!(Duration(90 * NS_PER_SECOND).to_string(), "90.0 s");
    }
}
