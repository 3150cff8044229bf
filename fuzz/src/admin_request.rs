//! The admin socket protocol of `tierd serve` (`tierd_engine::admin_proto`):
//! the input is what a client sends, split into request lines exactly as
//! the server reads them (`read_request_line` through a `BufReader`), each
//! parsed and checked against a fixed set of volumes, stopping after an
//! over-long line as the server does.
//!
//! First byte: bits 0–1 pick the reader's buffer size (1, 7, 64 or 8192
//! bytes, so lines straddle buffer ends differently); bit 2 pads the first
//! line with `MAX_REQUEST_BYTES - 32 + (bits 3–7)` spaces in front, so
//! lines just under, at and just over the 64 KiB limit come up (JSON
//! allows the leading whitespace, so a padded request still parses: a
//! padded `{"cmd":"status"}` line is exactly at the limit with bits 3–7 =
//! 15 and one byte over with 16).
//!
//! Checked beyond "no panic": the lines put back together are the input
//! read so far, each ending at its first newline; an over-long line holds
//! exactly one byte more than the limit and ends the connection; every rejection is a non-empty message
//! whose `{"error":...}` reply is one line of JSON that gives the message
//! back; parsing is deterministic; an accepted request satisfies its
//! checks (the volume exists, the segment is in range, the tier is in the
//! volume's stack; a fault sets `gone` or `config`), and its JSON
//! (`AdminRequest::to_json`), sent as a line, parses back to the same
//! request.

use std::io::BufReader;

use serde_json::Value;
use tierd_engine::admin_proto::{
    error_reply, line_too_long_message, parse_request, read_request_line, AdminRequest,
    RequestLine, VolumeShape, MAX_REQUEST_BYTES,
};
use tierd_engine::device::fault::FaultConfig;

/// The volumes requests are checked against.
pub fn volumes() -> Vec<VolumeShape> {
    let names = |tiers: &[&str]| tiers.iter().map(|tier| tier.to_string()).collect();
    vec![
        VolumeShape {
            name: "vol0".into(),
            segment_count: 16,
            tier_names: names(&["mem", "ssd", "disk"]),
        },
        VolumeShape {
            name: "v1".into(),
            segment_count: 1,
            tier_names: names(&["disk"]),
        },
        VolumeShape {
            name: "empty".into(),
            segment_count: 0,
            tier_names: names(&["mem", "disk"]),
        },
    ]
}

/// serde_json's default float parsing (no `float_roundtrip` feature) may
/// land one or two units in the last place away from the shortest
/// representation it printed; anything further is a real difference.
fn close(left: f64, right: f64) -> bool {
    left == right || (left - right).abs() <= 4.0 * f64::EPSILON * left.abs().max(right.abs())
}

fn same_config(left: &FaultConfig, right: &FaultConfig) -> bool {
    close(left.read_error_probability, right.read_error_probability)
        && close(left.write_error_probability, right.write_error_probability)
        && close(left.flush_error_probability, right.flush_error_probability)
        && close(left.delay_probability, right.delay_probability)
        && left.delay_ns == right.delay_ns
}

fn same_request(left: &AdminRequest, right: &AdminRequest) -> bool {
    match (left, right) {
        (AdminRequest::Fault(left), AdminRequest::Fault(right)) => {
            left.tier == right.tier
                && left.gone == right.gone
                && match (&left.config, &right.config) {
                    (Some(left), Some(right)) => same_config(left, right),
                    (None, None) => true,
                    _ => false,
                }
        }
        _ => left == right,
    }
}

fn check_accepted(request: &AdminRequest, volumes: &[VolumeShape]) {
    match request {
        AdminRequest::Status => {}
        AdminRequest::Move(request) => {
            let volume = volumes
                .iter()
                .find(|volume| volume.name == request.volume)
                .expect("an accepted move names a served volume");
            assert!(request.segment < volume.segment_count, "{request:?}");
            assert!(
                volume.tier_names.contains(&request.to),
                "{request:?} names a tier outside the volume's stack"
            );
        }
        AdminRequest::Fault(request) => {
            assert!(
                request.gone.is_some() || request.config.is_some(),
                "{request:?} changes nothing"
            );
        }
        AdminRequest::Pin(request) => {
            let volume = volumes
                .iter()
                .find(|volume| volume.name == request.volume)
                .expect("an accepted pin names a served volume");
            assert!(request.segment < volume.segment_count, "{request:?}");
            assert!(
                volume.tier_names.contains(&request.tier),
                "{request:?} names a tier outside the volume's stack"
            );
        }
        AdminRequest::Unpin(request) => {
            let volume = volumes
                .iter()
                .find(|volume| volume.name == request.volume)
                .expect("an accepted unpin names a served volume");
            assert!(request.segment < volume.segment_count, "{request:?}");
        }
        AdminRequest::Cache(request) => {
            assert!(
                volumes.iter().any(|volume| volume.name == request.volume),
                "an accepted cache request names a served volume: {request:?}"
            );
            assert!(
                tierd_engine::admin_proto::CACHE_MODES.contains(&request.mode.as_str()),
                "{request:?} names a mode tierd cache does not accept"
            );
        }
    }
    let mut line = request.to_json().to_string();
    assert!(!line.contains('\n'), "a request's JSON is one line: {line}");
    line.push('\n');
    match parse_request(line.as_bytes(), volumes) {
        Ok(again) => assert!(
            same_request(request, &again),
            "{request:?} sent as {line:?} came back as {again:?}"
        ),
        Err(message) => panic!("{request:?} sent as {line:?} was refused: {message}"),
    }
}

fn check_rejected(message: &str) {
    assert!(!message.is_empty(), "a rejection without a message");
    let reply = error_reply(message).to_string();
    assert!(!reply.contains('\n'), "a reply is one line: {reply:?}");
    let parsed: Value = serde_json::from_str(&reply).expect("the error reply is JSON");
    assert_eq!(parsed["error"].as_str(), Some(message));
}

pub fn run(data: &[u8]) {
    let Some((mode, rest)) = crate::split_mode(data) else {
        return;
    };
    let capacity = [1, 7, 64, 8192][usize::from(mode & 3)];
    let input: Vec<u8> = if mode & 4 != 0 {
        let padding = MAX_REQUEST_BYTES - 32 + usize::from(mode >> 3);
        let mut padded = vec![b' '; padding];
        padded.extend_from_slice(rest);
        padded
    } else {
        rest.to_vec()
    };
    let volumes = volumes();
    let mut reader = BufReader::with_capacity(capacity, &input[..]);
    let mut line = Vec::new();
    let mut consumed_bytes = 0;
    loop {
        let framed = read_request_line(&mut reader, &mut line).expect("reading memory cannot fail");
        match framed {
            RequestLine::End => {
                assert_eq!(consumed_bytes, input.len(), "lines do not cover the input");
                return;
            }
            RequestLine::TooLong => {
                assert_eq!(line.len(), MAX_REQUEST_BYTES + 1);
                // Its newline, if any, is its last byte (a 64 KiB request
                // plus its newline is one byte too many).
                let newline_at = line.iter().position(|byte| *byte == b'\n');
                assert!(newline_at.is_none() || newline_at == Some(MAX_REQUEST_BYTES));
                assert_eq!(
                    &input[consumed_bytes..consumed_bytes + line.len()],
                    &line[..]
                );
                check_rejected(&line_too_long_message());
                return;
            }
            RequestLine::Line => {}
        }
        assert!(!line.is_empty() && line.len() <= MAX_REQUEST_BYTES);
        let newline_at = line.iter().position(|byte| *byte == b'\n');
        assert!(
            newline_at.is_none() || newline_at == Some(line.len() - 1),
            "a line ends at its first newline"
        );
        assert_eq!(
            &input[consumed_bytes..consumed_bytes + line.len()],
            &line[..]
        );
        consumed_bytes += line.len();
        let parsed = parse_request(&line, &volumes);
        match &parsed {
            Ok(request) => check_accepted(request, &volumes),
            Err(message) => check_rejected(message),
        }
        let again = parse_request(&line, &volumes);
        match (&parsed, &again) {
            (Ok(first), Ok(second)) => assert_eq!(first, second),
            (Err(first), Err(second)) => assert_eq!(first, second),
            _ => panic!("parsing {line:?} is not deterministic"),
        }
    }
}
