//! The admin socket's request protocol without its socket: framing one
//! request line, parsing and checking it into an [`AdminRequest`], and the
//! error texts a client gets back. `tierd serve` (`tierd-cli`'s
//! `serve/admin.rs`) runs the socket and the effects; this module is pure
//! so the `admin_request` fuzz target can drive it.
//!
//! | request line | parsed as |
//! |---|---|
//! | `{"cmd":"status"}` | [`AdminRequest::Status`] |
//! | `{"cmd":"move","volume":"vol0","segment":3,"to":"mem"}` | [`AdminRequest::Move`] |
//! | `{"cmd":"fault","tier":"ssd","gone":true}` | [`AdminRequest::Fault`] |
//! | `{"cmd":"fault","tier":"ssd","config":{"read_error_probability":0.1}}` | [`AdminRequest::Fault`] |
//! | `{"cmd":"pin","volume":"vol0","segment":3,"tier":"mem","until_unix_ns":1795615200000000000}` | [`AdminRequest::Pin`] (`until_unix_ns` optional) |
//! | `{"cmd":"unpin","volume":"vol0","segment":3}` | [`AdminRequest::Unpin`] |
//! | `{"cmd":"cache","volume":"vol0","mode":"writethrough"}` | [`AdminRequest::Cache`] (`mode`: writeback, writethrough, writearound, detach) |
//!
//! Keys other than these are ignored. Every rejection is a non-empty
//! message saying what was expected; the server sends it back as
//! `{"error":"..."}` ([`error_reply`]). Checks run in a fixed order (the
//! first failing one is reported): for a move, the volume name, that the
//! volume exists, the segment number, that it is in range, the tier name,
//! that the volume has that tier; for a fault, the tier name, `gone`,
//! `config`, and that at least one of the two is given (whether the tier
//! exists and has a fault wrapper is the server's check, on its live
//! tiers).

use std::io::{self, BufRead, Read};

use serde_json::{json, Value};

use crate::device::fault::FaultConfig;

/// Longest request line accepted, newline included.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// One request, checked.
#[derive(Clone, Debug, PartialEq)]
pub enum AdminRequest {
    /// Every volume's status.
    Status,
    /// Queue a migration of one segment.
    Move(MoveRequest),
    /// The fault drill on one tier.
    Fault(FaultRequest),
    /// Pin a segment to a tier (`tierd pin`).
    Pin(PinRequest),
    /// End a segment's pin (`tierd unpin`).
    Unpin(UnpinRequest),
    /// Switch a cache volume's mode or detach it (`tierd cache`).
    Cache(CacheRequest),
}

/// `{"cmd":"cache","volume":"vol0","mode":"detach"}`: the volume exists and
/// the mode is one of `writeback`, `writethrough`, `writearound`, `detach`
/// (whether the volume is a cache volume is the server's to say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheRequest {
    pub volume: String,
    pub mode: String,
}

/// The modes `tierd cache --mode` accepts.
pub const CACHE_MODES: [&str; 4] = ["writeback", "writethrough", "writearound", "detach"];

/// `{"cmd":"pin",...}`: checked like a move (`tier` is one of the
/// volume's tiers, `segment` in range).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinRequest {
    pub volume: String,
    pub segment: u32,
    pub tier: String,
    /// Wall time (ns since the Unix epoch) when the pin ends; none: never.
    pub until_unix_ns: Option<u64>,
}

/// `{"cmd":"unpin",...}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnpinRequest {
    pub volume: String,
    pub segment: u32,
}

/// `{"cmd":"move",...}`: checked against the served volumes, so `volume`
/// exists, `segment` is below its segment count and `to` is one of its
/// tiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveRequest {
    pub volume: String,
    pub segment: u32,
    pub to: String,
}

/// `{"cmd":"fault",...}`: at least one of `gone` and `config` is set.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRequest {
    pub tier: String,
    /// Mark the tier gone (`true`) or back (`false`).
    pub gone: Option<bool>,
    /// Replace the tier's injected-fault probabilities.
    pub config: Option<FaultConfig>,
}

/// What a move request is checked against: one served volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeShape {
    pub name: String,
    pub segment_count: u32,
    /// Its tier stack, fastest first.
    pub tier_names: Vec<String>,
}

/// How reading one request line ended.
#[derive(Debug, PartialEq, Eq)]
pub enum RequestLine {
    /// The client closed the connection with no bytes pending.
    End,
    /// A line (with its newline, unless the stream ended without one) is in
    /// the buffer.
    Line,
    /// More than [`MAX_REQUEST_BYTES`] without a newline: the server answers
    /// with [`line_too_long_message`] and closes, since the rest of the line
    /// cannot be told from the next request.
    TooLong,
}

/// Reads the next request line into `line` (cleared first), never
/// buffering more than [`MAX_REQUEST_BYTES`] + 1 bytes of it.
pub fn read_request_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<RequestLine> {
    line.clear();
    let read = reader
        .take(MAX_REQUEST_BYTES as u64 + 1)
        .read_until(b'\n', line)?;
    if read == 0 {
        Ok(RequestLine::End)
    } else if line.len() > MAX_REQUEST_BYTES {
        Ok(RequestLine::TooLong)
    } else {
        Ok(RequestLine::Line)
    }
}

/// The error text for [`RequestLine::TooLong`].
pub fn line_too_long_message() -> String {
    format!("request line longer than {MAX_REQUEST_BYTES} bytes; closing")
}

/// The reply carrying an error message.
pub fn error_reply(message: impl Into<String>) -> Value {
    json!({ "error": message.into() })
}

/// Parses and checks one request line (a trailing newline is allowed)
/// against the served `volumes`; `Err` holds the message for the client.
pub fn parse_request(line: &[u8], volumes: &[VolumeShape]) -> Result<AdminRequest, String> {
    let request: Value = serde_json::from_slice(line).map_err(|error| {
        format!("request is not JSON ({error}); send e.g. {{\"cmd\":\"status\"}}")
    })?;
    match request.get("cmd").and_then(Value::as_str) {
        Some("status") => Ok(AdminRequest::Status),
        Some("move") => parse_move(&request, volumes).map(AdminRequest::Move),
        Some("fault") => parse_fault(&request).map(AdminRequest::Fault),
        Some("pin") => parse_pin(&request, volumes).map(AdminRequest::Pin),
        Some("unpin") => parse_unpin(&request, volumes).map(AdminRequest::Unpin),
        Some("cache") => parse_cache(&request, volumes).map(AdminRequest::Cache),
        Some(other) => Err(format!(
            "unknown cmd {other:?}: allowed are \"status\", \"move\", \"fault\", \"pin\" and \"unpin\""
        )),
        None => Err(
            "the request needs a \"cmd\" string: \"status\", \"move\", \"fault\", \"pin\" or \"unpin\""
                .to_string(),
        ),
    }
}

/// The volume and segment of a move, pin or unpin (`cmd` names it in the
/// messages), checked in that order.
fn volume_and_segment<'a>(
    request: &Value,
    volumes: &'a [VolumeShape],
    cmd: &str,
) -> Result<(&'a VolumeShape, u32), String> {
    let name = request
        .get("volume")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{cmd} needs \"volume\": a volume name"))?;
    let volume = volumes
        .iter()
        .find(|volume| volume.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = volumes.iter().map(|volume| volume.name.as_str()).collect();
            format!("no volume {name:?} (volumes: {known:?})")
        })?;
    let segment = request
        .get("segment")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("{cmd} needs \"segment\": a segment number"))?;
    let segment = u32::try_from(segment)
        .ok()
        .filter(|segment| *segment < volume.segment_count)
        .ok_or_else(|| {
            format!(
                "segment {segment} is beyond volume {name}'s {} segments (0 to {})",
                volume.segment_count,
                volume.segment_count.saturating_sub(1)
            )
        })?;
    Ok((volume, segment))
}

fn parse_pin(request: &Value, volumes: &[VolumeShape]) -> Result<PinRequest, String> {
    let (volume, segment) = volume_and_segment(request, volumes, "pin")?;
    let tier_name = request
        .get("tier")
        .and_then(Value::as_str)
        .ok_or("pin needs \"tier\": a tier name")?;
    let tiers = &volume.tier_names;
    if !tiers.iter().any(|tier| tier == tier_name) {
        return Err(format!(
            "volume {} has no tier {tier_name:?} (its stack, fastest first: {tiers:?})",
            volume.name
        ));
    }
    let until_unix_ns = match request.get("until_unix_ns") {
        None | Some(Value::Null) => None,
        Some(value) => Some(value.as_u64().ok_or(
            "pin: \"until_unix_ns\" must be a whole number of nanoseconds since the Unix epoch",
        )?),
    };
    Ok(PinRequest {
        volume: volume.name.clone(),
        segment,
        tier: tier_name.to_string(),
        until_unix_ns,
    })
}

fn parse_unpin(request: &Value, volumes: &[VolumeShape]) -> Result<UnpinRequest, String> {
    let (volume, segment) = volume_and_segment(request, volumes, "unpin")?;
    Ok(UnpinRequest {
        volume: volume.name.clone(),
        segment,
    })
}

fn parse_cache(request: &Value, volumes: &[VolumeShape]) -> Result<CacheRequest, String> {
    let name = request
        .get("volume")
        .and_then(Value::as_str)
        .ok_or("cache needs \"volume\": a volume name")?;
    if !volumes.iter().any(|volume| volume.name == name) {
        let names: Vec<&str> = volumes.iter().map(|volume| volume.name.as_str()).collect();
        return Err(format!("no volume {name:?} (served: {names:?})"));
    }
    let mode = request
        .get("mode")
        .and_then(Value::as_str)
        .ok_or("cache needs \"mode\": writeback, writethrough, writearound or detach")?;
    if !CACHE_MODES.contains(&mode) {
        return Err(format!(
            "cache mode {mode:?}: expected writeback, writethrough, writearound or detach"
        ));
    }
    Ok(CacheRequest {
        volume: name.to_string(),
        mode: mode.to_string(),
    })
}

fn parse_move(request: &Value, volumes: &[VolumeShape]) -> Result<MoveRequest, String> {
    let (volume, segment) = volume_and_segment(request, volumes, "move")?;
    let name = volume.name.as_str();
    let tier_name = request
        .get("to")
        .and_then(Value::as_str)
        .ok_or("move needs \"to\": a tier name")?;
    let tiers = &volume.tier_names;
    if !tiers.iter().any(|tier| tier == tier_name) {
        return Err(format!(
            "volume {name} has no tier {tier_name:?} (its stack, fastest first: {tiers:?})"
        ));
    }
    Ok(MoveRequest {
        volume: name.to_string(),
        segment,
        to: tier_name.to_string(),
    })
}

fn parse_fault(request: &Value) -> Result<FaultRequest, String> {
    let tier = request
        .get("tier")
        .and_then(Value::as_str)
        .ok_or("fault needs \"tier\": a tier name")?;
    let gone = match request.get("gone") {
        None => None,
        Some(value) => Some(
            value
                .as_bool()
                .ok_or("fault: \"gone\" must be true or false")?,
        ),
    };
    let config = match request.get("config") {
        None => None,
        Some(value) => Some(
            serde_json::from_value::<FaultConfig>(value.clone())
                .map_err(|error| format!("fault: bad \"config\": {error}"))
                .and_then(|config| {
                    config
                        .validate()
                        .map(|()| config)
                        .map_err(|error| format!("fault: bad \"config\": {error}"))
                })?,
        ),
    };
    if gone.is_none() && config.is_none() {
        return Err("fault needs \"gone\": true|false and/or \"config\": {...}".into());
    }
    Ok(FaultRequest {
        tier: tier.to_string(),
        gone,
        config,
    })
}

impl AdminRequest {
    /// The request as a client sends it (one line of this JSON, then a
    /// newline); [`parse_request`] gives back an equal request.
    pub fn to_json(&self) -> Value {
        match self {
            AdminRequest::Status => json!({ "cmd": "status" }),
            AdminRequest::Move(request) => json!({
                "cmd": "move",
                "volume": request.volume,
                "segment": request.segment,
                "to": request.to,
            }),
            AdminRequest::Fault(request) => {
                let mut value = json!({ "cmd": "fault", "tier": request.tier });
                if let Some(gone) = request.gone {
                    value["gone"] = Value::Bool(gone);
                }
                if let Some(config) = &request.config {
                    value["config"] = serde_json::to_value(config).unwrap_or(Value::Null);
                }
                value
            }
            AdminRequest::Pin(request) => {
                let mut value = json!({
                    "cmd": "pin",
                    "volume": request.volume,
                    "segment": request.segment,
                    "tier": request.tier,
                });
                if let Some(until) = request.until_unix_ns {
                    value["until_unix_ns"] = json!(until);
                }
                value
            }
            AdminRequest::Cache(request) => json!({
                "cmd": "cache",
                "volume": request.volume,
                "mode": request.mode,
            }),
            AdminRequest::Unpin(request) => json!({
                "cmd": "unpin",
                "volume": request.volume,
                "segment": request.segment,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volumes() -> Vec<VolumeShape> {
        vec![VolumeShape {
            name: "vol0".into(),
            segment_count: 4,
            tier_names: vec!["mem".into(), "disk".into()],
        }]
    }

    fn parse(line: &str) -> Result<AdminRequest, String> {
        parse_request(line.as_bytes(), &volumes())
    }

    #[test]
    fn the_three_commands_parse() {
        assert_eq!(parse("{\"cmd\":\"status\"}\n"), Ok(AdminRequest::Status));
        assert_eq!(
            parse(r#"{"cmd":"move","volume":"vol0","segment":3,"to":"mem","extra":1}"#),
            Ok(AdminRequest::Move(MoveRequest {
                volume: "vol0".into(),
                segment: 3,
                to: "mem".into(),
            }))
        );
        assert_eq!(
            parse(r#"{"cmd":"fault","tier":"ssd","gone":true}"#),
            Ok(AdminRequest::Fault(FaultRequest {
                tier: "ssd".into(),
                gone: Some(true),
                config: None,
            }))
        );
        let Ok(AdminRequest::Fault(fault)) =
            parse(r#"{"cmd":"fault","tier":"ssd","config":{"read_error_probability":0.25}}"#)
        else {
            panic!("a fault with a config parses");
        };
        assert_eq!(fault.gone, None);
        let config = fault.config.unwrap();
        assert_eq!(config.read_error_probability, 0.25);
        assert_eq!(config.write_error_probability, 0.0);
    }

    #[test]
    fn rejections_say_what_is_expected() {
        let cases = [
            ("not json", "request is not JSON ("),
            ("[1,2]", "the request needs a \"cmd\" string"),
            (r#"{"cmd":7}"#, "the request needs a \"cmd\" string"),
            (
                r#"{"cmd":"launch"}"#,
                "unknown cmd \"launch\": allowed are \"status\", \"move\", \"fault\", \"pin\" and \"unpin\"",
            ),
            (r#"{"cmd":"move"}"#, "move needs \"volume\": a volume name"),
            (
                r#"{"cmd":"move","volume":"nope"}"#,
                "no volume \"nope\" (volumes: [\"vol0\"])",
            ),
            (
                r#"{"cmd":"move","volume":"vol0","segment":-1}"#,
                "move needs \"segment\": a segment number",
            ),
            (
                r#"{"cmd":"move","volume":"vol0","segment":4,"to":"mem"}"#,
                "segment 4 is beyond volume vol0's 4 segments (0 to 3)",
            ),
            (
                r#"{"cmd":"move","volume":"vol0","segment":4294967296}"#,
                "segment 4294967296 is beyond volume vol0's 4 segments (0 to 3)",
            ),
            (
                r#"{"cmd":"move","volume":"vol0","segment":0}"#,
                "move needs \"to\": a tier name",
            ),
            (
                r#"{"cmd":"move","volume":"vol0","segment":0,"to":"ssd"}"#,
                "volume vol0 has no tier \"ssd\" (its stack, fastest first: [\"mem\", \"disk\"])",
            ),
            (r#"{"cmd":"fault"}"#, "fault needs \"tier\": a tier name"),
            (r#"{"cmd":"pin"}"#, "pin needs \"volume\": a volume name"),
            (
                r#"{"cmd":"pin","volume":"vol0","segment":4,"tier":"mem"}"#,
                "segment 4 is beyond volume vol0's 4 segments (0 to 3)",
            ),
            (
                r#"{"cmd":"pin","volume":"vol0","segment":1}"#,
                "pin needs \"tier\": a tier name",
            ),
            (
                r#"{"cmd":"pin","volume":"vol0","segment":1,"tier":"ssd"}"#,
                "volume vol0 has no tier \"ssd\"",
            ),
            (
                r#"{"cmd":"pin","volume":"vol0","segment":1,"tier":"mem","until_unix_ns":-5}"#,
                "pin: \"until_unix_ns\" must be",
            ),
            (
                r#"{"cmd":"unpin","volume":"vol0"}"#,
                "unpin needs \"segment\": a segment number",
            ),
            (
                r#"{"cmd":"fault","tier":"ssd","gone":1}"#,
                "fault: \"gone\" must be true or false",
            ),
            (
                r#"{"cmd":"fault","tier":"ssd","config":{"typo":1}}"#,
                "fault: bad \"config\": unknown field `typo`",
            ),
            (
                r#"{"cmd":"fault","tier":"ssd","config":{"write_error_probability":1.5}}"#,
                "fault: bad \"config\": write_error_probability = 1.5: a probability must be from 0 to 1",
            ),
            (
                r#"{"cmd":"fault","tier":"ssd"}"#,
                "fault needs \"gone\": true|false and/or \"config\": {...}",
            ),
        ];
        for (line, expected) in cases {
            let message = parse(line).unwrap_err();
            assert!(message.starts_with(expected), "{line}: {message}");
        }
    }

    #[test]
    fn the_volume_is_checked_before_the_segment_as_the_server_always_did() {
        assert_eq!(
            parse(r#"{"cmd":"move","volume":"nope","segment":"x"}"#).unwrap_err(),
            "no volume \"nope\" (volumes: [\"vol0\"])"
        );
    }

    #[test]
    fn cache_requests_name_the_volume_and_a_known_mode() {
        assert_eq!(
            parse(r#"{"cmd":"cache","volume":"vol0","mode":"detach"}"#),
            Ok(AdminRequest::Cache(CacheRequest {
                volume: "vol0".into(),
                mode: "detach".into()
            }))
        );
        assert!(
            parse(r#"{"cmd":"cache","volume":"vol0","mode":"write-back"}"#)
                .unwrap_err()
                .contains("writethrough")
        );
        assert!(parse(r#"{"cmd":"cache","volume":"nope","mode":"detach"}"#)
            .unwrap_err()
            .contains("no volume"));
    }

    #[test]
    fn requests_survive_a_round_trip_through_their_json() {
        let requests = [
            AdminRequest::Status,
            AdminRequest::Cache(CacheRequest {
                volume: "vol0".into(),
                mode: "writethrough".into(),
            }),
            AdminRequest::Move(MoveRequest {
                volume: "vol0".into(),
                segment: 2,
                to: "disk".into(),
            }),
            AdminRequest::Pin(PinRequest {
                volume: "vol0".into(),
                segment: 3,
                tier: "mem".into(),
                until_unix_ns: Some(u64::MAX),
            }),
            AdminRequest::Pin(PinRequest {
                volume: "vol0".into(),
                segment: 0,
                tier: "disk".into(),
                until_unix_ns: None,
            }),
            AdminRequest::Unpin(UnpinRequest {
                volume: "vol0".into(),
                segment: 1,
            }),
            AdminRequest::Fault(FaultRequest {
                tier: "ssd \"quoted\"\n".into(),
                gone: Some(false),
                config: Some(FaultConfig {
                    delay_probability: 0.5,
                    delay_ns: crate::device::fault::MAX_DELAY_NS,
                    ..FaultConfig::default()
                }),
            }),
        ];
        for request in requests {
            let line = request.to_json().to_string();
            assert_eq!(parse(&line), Ok(request), "{line}");
        }
    }

    #[test]
    fn lines_are_framed_and_an_overlong_one_is_refused() {
        let mut input = b"{\"cmd\":\"status\"}\n\nlast".to_vec();
        let mut reader = io::BufReader::with_capacity(7, &input[..]);
        let mut line = Vec::new();
        let mut lines = Vec::new();
        loop {
            match read_request_line(&mut reader, &mut line).unwrap() {
                RequestLine::End => break,
                RequestLine::Line => lines.push(String::from_utf8(line.clone()).unwrap()),
                RequestLine::TooLong => panic!("no line is too long here"),
            }
        }
        assert_eq!(lines, ["{\"cmd\":\"status\"}\n", "\n", "last"]);

        input = vec![b' '; MAX_REQUEST_BYTES - 1];
        input.push(b'\n');
        input.extend_from_slice(&vec![b' '; MAX_REQUEST_BYTES]);
        input.push(b'\n');
        let mut reader = &input[..];
        assert_eq!(
            read_request_line(&mut reader, &mut line).unwrap(),
            RequestLine::Line
        );
        assert_eq!(line.len(), MAX_REQUEST_BYTES);
        assert_eq!(
            read_request_line(&mut reader, &mut line).unwrap(),
            RequestLine::TooLong
        );
        assert_eq!(line.len(), MAX_REQUEST_BYTES + 1);
        assert!(line_too_long_message().contains("65536"));
        assert_eq!(
            error_reply("boom").to_string(),
            "{\"error\":\"boom\"}".to_string()
        );
    }
}
