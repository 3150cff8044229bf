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

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day count since 1970-01-01 (`civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

const RFC3339_EXAMPLES: &str = "2026-11-25T14:00:00Z, 2026-11-25T15:00:00+01:00";

/// Parses an RFC 3339 date-time (`2026-11-25T14:00:00Z`,
/// `2026-11-25 15:00:00.5+01:00`; `t`/`z` in lower case too) into
/// nanoseconds since the Unix epoch. Times before 1970 are refused.
pub fn parse_rfc3339_unix_ns(text: &str) -> Result<u64, UnitError> {
    let fail = |reason: &str| UnitError {
        text: text.to_string(),
        what: "an RFC 3339 time",
        reason: reason.to_string(),
        examples: RFC3339_EXAMPLES,
    };
    let bytes = text.trim().as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Result<u32, UnitError> {
        let part = bytes
            .get(range)
            .ok_or_else(|| fail("too short for YYYY-MM-DDTHH:MM:SS and a zone"))?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err(fail("expected digits"));
        }
        Ok(part
            .iter()
            .fold(0u32, |value, digit| value * 10 + u32::from(digit - b'0')))
    };
    let separator = |at: usize, allowed: &[u8]| -> Result<(), UnitError> {
        match bytes.get(at) {
            Some(byte) if allowed.contains(byte) => Ok(()),
            _ => Err(fail("expected YYYY-MM-DDTHH:MM:SS")),
        }
    };
    let year = digits(0..4)?;
    separator(4, b"-")?;
    let month = digits(5..7)?;
    separator(7, b"-")?;
    let day = digits(8..10)?;
    separator(10, b"Tt ")?;
    let hour = digits(11..13)?;
    separator(13, b":")?;
    let minute = digits(14..16)?;
    separator(16, b":")?;
    let second = digits(17..19)?;
    let mut at = 19;
    let mut fraction_ns = 0u64;
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        if at == start {
            return Err(fail("expected digits after the decimal point"));
        }
        for (index, digit) in bytes[start..at].iter().take(9).enumerate() {
            fraction_ns += u64::from(digit - b'0') * 10u64.pow(8 - index as u32);
        }
    }
    let offset_s: i64 = match bytes.get(at) {
        Some(b'Z' | b'z') if at + 1 == bytes.len() => 0,
        Some(sign @ (b'+' | b'-')) if at + 6 == bytes.len() => {
            separator(at + 3, b":")?;
            let hours = i64::from(digits(at + 1..at + 3)?);
            let minutes = i64::from(digits(at + 4..at + 6)?);
            if hours > 23 || minutes > 59 {
                return Err(fail("zone offset out of range"));
            }
            let offset = hours * 3600 + minutes * 60;
            if *sign == b'+' {
                offset
            } else {
                -offset
            }
        }
        _ => return Err(fail("expected a zone: Z or +HH:MM / -HH:MM at the end")),
    };
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => return Err(fail("month out of range")),
    };
    if day == 0 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return Err(fail("day, hour, minute or second out of range"));
    }
    let days = days_from_civil(i64::from(year), month, day);
    let seconds =
        days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second)
            - offset_s;
    let seconds = u64::try_from(seconds).map_err(|_| fail("before 1970"))?;
    seconds
        .checked_mul(NS_PER_SECOND)
        .and_then(|ns| ns.checked_add(fraction_ns))
        .ok_or_else(|| fail("too far in the future"))
}

/// Nanoseconds since the Unix epoch as RFC 3339 in UTC, to the second:
/// `2026-11-25T14:00:00Z`.
pub fn format_rfc3339_utc(unix_ns: u64) -> String {
    let seconds = (unix_ns / NS_PER_SECOND) as i64;
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let in_day = seconds.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60
    )
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
    fn rfc3339_times_parse_and_format() {
        assert_eq!(parse_rfc3339_unix_ns("1970-01-01T00:00:00Z").unwrap(), 0);
        let ns = parse_rfc3339_unix_ns("2026-11-25T14:00:00Z").unwrap();
        assert_eq!(ns, 1_795_615_200 * NS_PER_SECOND);
        assert_eq!(format_rfc3339_utc(ns), "2026-11-25T14:00:00Z");
        assert_eq!(
            parse_rfc3339_unix_ns("2026-11-25 15:00:00.25+01:00").unwrap(),
            ns + 250_000_000
        );
        assert_eq!(
            parse_rfc3339_unix_ns("2024-02-29t23:59:59z").unwrap(),
            1_709_251_199 * NS_PER_SECOND
        );
        assert_eq!(
            format_rfc3339_utc(1_709_251_199 * NS_PER_SECOND),
            "2024-02-29T23:59:59Z"
        );
        for bad in [
            "2026-11-25T14:00:00",
            "2026-02-30T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "2h",
            "",
            "2026-11-25T14:00:00+1:00",
        ] {
            assert!(parse_rfc3339_unix_ns(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn display() {
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(Bytes(1536 * 1024 * 1024).to_string(), "1.50 GiB");
        assert_eq!(Duration(1_500_000).to_string(), "1.5 ms");
        assert_eq!(Duration(90 * NS_PER_SECOND).to_string(), "90.0 s");
    }
}
