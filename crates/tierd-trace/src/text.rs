//! The shared machinery of every line-oriented format: line numbering, error
//! reporting with file/line/text/expectation, `--skip-bad-lines`, and fast
//! allocation-free field parsing helpers.

use std::io::BufRead;
use std::path::Path;

use crate::error::{excerpt, Result, TraceError};
use crate::format::Format;
use crate::input::Input;
use crate::reader::TraceReader;
use crate::request::{Request, VolumeId, VolumeTable};

#[cfg(test)]
pub(crate) mod test_support;

/// What one line of a text trace holds.
pub enum Parsed {
    Request(Request),
    /// A valid line that is not a request: a header, a comment, a blkparse
    /// event of another kind, an fio-iolog `open`/`close`.
    Skip,
}

/// Why a line did not parse. Kept small: it is built only on the error path.
#[derive(Debug)]
pub struct LineError(pub String);

impl LineError {
    pub fn new(reason: impl Into<String>) -> Self {
        LineError(reason.into())
    }
}

/// One line-oriented format.
///
/// `parse_line` MUST return `Err` for any line that does not fit the format's
/// grammar, even one it would otherwise skip: format detection tries every
/// text format on the first lines of a file and relies on that. It MUST NOT
/// panic on any bytes. It gets the line without its line ending; blank lines
/// never reach it.
pub trait LineFormat: Send {
    const FORMAT: Format;
    /// What a valid line looks like, for error messages.
    const EXPECTED: &'static str;

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError>;
}

/// A [`TraceReader`] over any [`LineFormat`].
pub struct TextReader<F: LineFormat> {
    input: Input,
    format: F,
    line: Vec<u8>,
    line_number: u64,
    volumes: VolumeTable,
    skip_bad_lines: bool,
    skipped_lines: u64,
    ignored_lines: u64,
    byte_offset: u64,
    done: bool,
}

impl<F: LineFormat> TextReader<F> {
    pub fn new(input: Input, format: F, skip_bad_lines: bool) -> Self {
        Self {
            input,
            format,
            line: Vec::with_capacity(256),
            line_number: 0,
            volumes: VolumeTable::new(),
            skip_bad_lines,
            skipped_lines: 0,
            ignored_lines: 0,
            byte_offset: 0,
            done: false,
        }
    }
}

impl<F: LineFormat> TraceReader for TextReader<F> {
    fn next_request(&mut self) -> Result<Option<Request>> {
        if self.done {
            return Ok(None);
        }
        loop {
            self.line.clear();
            let read = match self.input.reader.read_until(b'\n', &mut self.line) {
                Ok(read) => read,
                Err(source) => {
                    self.done = true;
                    return Err(TraceError::Read {
                        path: self.input.path.clone(),
                        offset: self.byte_offset,
                        source,
                    });
                }
            };
            if read == 0 {
                self.done = true;
                return Ok(None);
            }
            self.byte_offset += read as u64;
            self.line_number += 1;
            let line = trim_line_end(&self.line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match self.format.parse_line(line, &mut self.volumes) {
                Ok(Parsed::Request(request)) => return Ok(Some(request)),
                Ok(Parsed::Skip) => self.ignored_lines += 1,
                Err(_) if self.skip_bad_lines => self.skipped_lines += 1,
                Err(LineError(reason)) => {
                    self.done = true;
                    return Err(TraceError::BadLine {
                        path: self.input.path.clone(),
                        line: self.line_number,
                        format: F::FORMAT,
                        text: excerpt(line),
                        reason,
                        expected: F::EXPECTED,
                    });
                }
            }
        }
    }

    fn format(&self) -> Format {
        F::FORMAT
    }

    fn volumes(&self) -> &VolumeTable {
        &self.volumes
    }

    fn skipped_lines(&self) -> u64 {
        self.skipped_lines
    }

    fn ignored_lines(&self) -> u64 {
        self.ignored_lines
    }

    fn path(&self) -> &Path {
        &self.input.path
    }
}

/// Tries `format` on sample lines (format detection). Returns `Ok(requests)`
/// when every non-blank line parses and at least one is a request, else the
/// first failure as a short reason.
pub fn try_lines<F: LineFormat>(mut format: F, lines: &[&[u8]]) -> Result<usize, String> {
    let mut volumes = VolumeTable::new();
    let mut requests = 0;
    for (index, line) in lines.iter().enumerate() {
        let line = trim_line_end(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match format.parse_line(line, &mut volumes) {
            Ok(Parsed::Request(_)) => requests += 1,
            Ok(Parsed::Skip) => {}
            Err(LineError(reason)) => return Err(format!("line {}: {reason}", index + 1)),
        }
    }
    if requests == 0 {
        Err("no request in the first lines".to_string())
    } else {
        Ok(requests)
    }
}

/// The complete lines of a detection sample: at most 64, without a last line
/// that the sample cut in the middle.
pub fn head_lines(head: &[u8]) -> Vec<&[u8]> {
    let complete = match head.iter().rposition(|byte| *byte == b'\n') {
        Some(last_newline) if head.len() >= crate::open::DETECT_BYTES => &head[..last_newline],
        _ => head,
    };
    complete
        .split(|byte| *byte == b'\n')
        .filter(|line| !trim_line_end(line).is_empty())
        .take(64)
        .collect()
}

pub fn trim_line_end(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && (line[end - 1] == b'\n' || line[end - 1] == b'\r') {
        end -= 1;
    }
    &line[..end]
}

/// Splits on one separator byte. Fields keep surrounding spaces; use
/// [`trim`] where a format allows them.
#[inline]
pub fn split(line: &[u8], separator: u8) -> impl Iterator<Item = &[u8]> {
    line.split(move |byte| *byte == separator)
}

/// Splits on runs of spaces and tabs, ignoring leading and trailing ones.
#[inline]
pub fn split_whitespace(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|byte| *byte == b' ' || *byte == b'\t')
        .filter(|field| !field.is_empty())
}

#[inline]
pub fn trim(field: &[u8]) -> &[u8] {
    field.trim_ascii()
}

/// Takes the next field or fails naming it.
#[inline]
pub fn field<'a>(
    fields: &mut impl Iterator<Item = &'a [u8]>,
    name: &str,
) -> Result<&'a [u8], LineError> {
    fields
        .next()
        .ok_or_else(|| LineError(format!("missing field {name}")))
}

/// Fails when fields remain after the last expected one.
#[inline]
pub fn no_more_fields<'a>(
    fields: &mut impl Iterator<Item = &'a [u8]>,
    count: usize,
) -> Result<(), LineError> {
    match fields.next() {
        None => Ok(()),
        Some(_) => Err(LineError(format!("more than {count} fields"))),
    }
}

/// Parses a decimal unsigned integer with no sign, spaces or other characters.
#[inline]
pub fn parse_u64(field: &[u8], name: &str) -> Result<u64, LineError> {
    if field.is_empty() || field.len() > 20 {
        return Err(bad_number(field, name));
    }
    let mut value: u64 = 0;
    for &byte in field {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return Err(bad_number(field, name));
        }
        value = value
            .checked_mul(10)
            .and_then(|value| value.checked_add(u64::from(digit)))
            .ok_or_else(|| LineError(format!("field {name} {:?} is too large", excerpt(field))))?;
    }
    Ok(value)
}

/// Parses a hexadecimal unsigned integer (optional `0x`).
pub fn parse_hex_u64(field: &[u8], name: &str) -> Result<u64, LineError> {
    let digits = field
        .strip_prefix(b"0x")
        .or_else(|| field.strip_prefix(b"0X"))
        .unwrap_or(field);
    let text = std::str::from_utf8(digits).map_err(|_| bad_number(field, name))?;
    if text.is_empty() || text.starts_with('+') {
        return Err(bad_number(field, name));
    }
    u64::from_str_radix(text, 16).map_err(|_| bad_number(field, name))
}

/// Parses a non-negative decimal such as `26.214000` or `1487198985.038926`
/// and returns it multiplied by `10^scale` exactly (no floating-point
/// rounding): `parse_scaled("26.214000", 6)` is 26,214,000. Digits beyond the
/// scale are truncated. Also accepts a plain integer and an exponent-free
/// leading `+`-less form only.
pub fn parse_scaled(field: &[u8], scale: u32, name: &str) -> Result<u64, LineError> {
    let (whole, fraction) = match field.iter().position(|byte| *byte == b'.') {
        Some(dot) => (&field[..dot], &field[dot + 1..]),
        None => (field, &field[field.len()..]),
    };
    if whole.is_empty() && fraction.is_empty() {
        return Err(bad_number(field, name));
    }
    let whole_value = if whole.is_empty() {
        0
    } else {
        parse_u64(whole, name).map_err(|_| bad_number(field, name))?
    };
    let mut fraction_value: u64 = 0;
    let mut digits_used = 0;
    for &byte in fraction {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return Err(bad_number(field, name));
        }
        if digits_used < scale {
            fraction_value = fraction_value * 10 + u64::from(digit);
            digits_used += 1;
        }
    }
    let fraction_value = fraction_value * 10u64.pow(scale - digits_used);
    whole_value
        .checked_mul(10u64.pow(scale))
        .and_then(|value| value.checked_add(fraction_value))
        .ok_or_else(|| LineError(format!("field {name} {:?} is too large", excerpt(field))))
}

/// `value * factor`: a count in the file's unit (sectors, pages, seconds)
/// turned into bytes or nanoseconds. Fails naming the field `name`, its value
/// and the target `unit` when the product does not fit in a u64.
#[inline]
pub fn scale(value: u64, factor: u64, name: &str, unit: &str) -> Result<u64, LineError> {
    value
        .checked_mul(factor)
        .ok_or_else(|| LineError(format!("{name} {value} is too large to hold in {unit}")))
}

/// The volume of the previous line, so that a run of lines on one volume
/// looks its name up once. A hit compares bytes and allocates nothing; a miss
/// reuses the cached key's buffer and interns the name.
#[derive(Default)]
pub struct VolumeCache {
    last_key: Vec<u8>,
    last_id: Option<VolumeId>,
}

impl VolumeCache {
    /// The id of the volume named `key`, interned in `volumes` on a miss.
    /// The caller MUST pass the same `volumes` on every call.
    #[inline]
    pub fn id(&mut self, key: &[u8], volumes: &mut VolumeTable) -> VolumeId {
        match self.last_id {
            Some(id) if self.last_key == key => id,
            _ => {
                self.last_key.clear();
                self.last_key.extend_from_slice(key);
                self.remember(volumes)
            }
        }
    }

    /// Like [`id`](Self::id) for the name `first`, `separator`, `second`
    /// (MSR's `host_disk`). The name is built only on a miss; a hit is a
    /// length check and two byte compares.
    #[inline]
    pub fn id_joined(
        &mut self,
        first: &[u8],
        separator: u8,
        second: &[u8],
        volumes: &mut VolumeTable,
    ) -> VolumeId {
        match self.last_id {
            Some(id) if self.is_last_key(first, separator, second) => id,
            _ => {
                self.last_key.clear();
                self.last_key.extend_from_slice(first);
                self.last_key.push(separator);
                self.last_key.extend_from_slice(second);
                self.remember(volumes)
            }
        }
    }

    /// Whether the cached key is `first`, `separator`, `second`.
    #[inline]
    fn is_last_key(&self, first: &[u8], separator: u8, second: &[u8]) -> bool {
        let key = self.last_key.as_slice();
        key.len() == first.len() + 1 + second.len()
            && key.get(first.len()) == Some(&separator)
            && key.starts_with(first)
            && key.ends_with(second)
    }

    #[cold]
    fn remember(&mut self, volumes: &mut VolumeTable) -> VolumeId {
        let id = volumes.intern_bytes(&self.last_key);
        self.last_id = Some(id);
        id
    }
}

fn bad_number(field: &[u8], name: &str) -> LineError {
    LineError(format!("field {name} {:?} is not a number", excerpt(field)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        assert_eq!(parse_u64(b"0", "x").unwrap(), 0);
        assert_eq!(parse_u64(b"18446744073709551615", "x").unwrap(), u64::MAX);
        assert!(parse_u64(b"18446744073709551616", "x").is_err());
        assert!(parse_u64(b"", "x").is_err());
        assert!(parse_u64(b"-1", "x").is_err());
        assert!(parse_u64(b"1 ", "x").is_err());
        assert_eq!(parse_hex_u64(b"2a", "op").unwrap(), 42);
        assert_eq!(parse_hex_u64(b"0x28", "op").unwrap(), 40);
        assert!(parse_hex_u64(b"zz", "op").is_err());
    }

    #[test]
    fn scaled_decimals_are_exact() {
        assert_eq!(parse_scaled(b"26.214000", 6, "t").unwrap(), 26_214_000);
        assert_eq!(
            parse_scaled(b"1487198985.038926", 9, "t").unwrap(),
            1_487_198_985_038_926_000
        );
        assert_eq!(parse_scaled(b"7", 3, "t").unwrap(), 7_000);
        assert_eq!(parse_scaled(b".5", 3, "t").unwrap(), 500);
        assert_eq!(parse_scaled(b"1.23456", 3, "t").unwrap(), 1_234);
        assert!(parse_scaled(b".", 3, "t").is_err());
        assert!(parse_scaled(b"1.2.3", 3, "t").is_err());
        assert!(parse_scaled(b"1e5", 3, "t").is_err());
    }

    #[test]
    fn scale_names_the_field_on_overflow() {
        assert_eq!(scale(3, 512, "lba", "bytes").unwrap(), 1_536);
        let LineError(reason) = scale(u64::MAX, 2, "lba", "bytes").unwrap_err();
        assert_eq!(
            reason,
            "lba 18446744073709551615 is too large to hold in bytes"
        );
    }

    #[test]
    fn volume_cache_interns_each_run_once() {
        let mut volumes = VolumeTable::new();
        let mut cache = VolumeCache::default();
        let first = cache.id(b"14", &mut volumes);
        assert_eq!(cache.id(b"14", &mut volumes), first);
        let second = cache.id(b"3", &mut volumes);
        assert_ne!(first, second);
        assert_eq!(cache.id(b"14", &mut volumes), first);
        assert_eq!(volumes.names(), ["14", "3"]);

        let mut cache = VolumeCache::default();
        let hm_0 = cache.id_joined(b"hm", b'_', b"0", &mut volumes);
        assert_eq!(cache.id_joined(b"hm", b'_', b"0", &mut volumes), hm_0);
        let hm_1 = cache.id_joined(b"hm", b'_', b"1", &mut volumes);
        let h_m0 = cache.id_joined(b"h", b'_', b"m0", &mut volumes);
        assert_eq!(cache.id_joined(b"hm", b'_', b"0", &mut volumes), hm_0);
        assert_ne!(hm_0, hm_1);
        assert_ne!(hm_0, h_m0);
        assert_eq!(volumes.names(), ["14", "3", "hm_0", "hm_1", "h_m0"]);
    }

    #[test]
    fn splitting() {
        let fields: Vec<&[u8]> = split_whitespace(b"  8,16   5  2 ").collect();
        assert_eq!(fields, vec![&b"8,16"[..], b"5", b"2"]);
        let fields: Vec<&[u8]> = split(b"a,,b", b',').collect();
        assert_eq!(fields, vec![&b"a"[..], b"", b"b"]);
    }
}
