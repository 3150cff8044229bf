//! The pure NBD parsers of `tierd_nbd::proto` (and the NBD URI parser).
//! First byte % 8 picks the parser; the rest is its input.
//!
//! Properties checked beyond "no panic": a request header that parses
//! encodes back to the same 28 bytes; parsed strings respect the protocol's
//! 4096-byte limit; a reply header's variant matches the length its magic
//! announces.

use tierd_nbd::proto::{
    parse_client_flags, parse_info_request, parse_meta_context_request, parse_option_header,
    parse_option_reply_header, parse_reply_header, parse_request_header, reply_header_bytes,
    ReplyHeader, MAX_META_CONTEXT_QUERIES, MAX_STRING_BYTES, OPTION_HEADER_BYTES,
    OPTION_REPLY_HEADER_BYTES, REQUEST_HEADER_BYTES, SIMPLE_REPLY_BYTES,
    STRUCTURED_REPLY_HEADER_BYTES,
};

/// The first `N` bytes of `data`, zero-padded.
fn fixed<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut bytes = [0u8; N];
    let count = data.len().min(N);
    bytes[..count].copy_from_slice(&data[..count]);
    bytes
}

pub fn run(data: &[u8]) {
    let Some((mode, rest)) = crate::split_mode(data) else {
        return;
    };
    match mode % 8 {
        0 => {
            let bytes: [u8; REQUEST_HEADER_BYTES] = fixed(rest);
            if let Ok(header) = parse_request_header(&bytes) {
                assert_eq!(header.encode(), bytes, "request header round trip");
            }
        }
        1 => {
            let _ = parse_client_flags(&fixed(rest));
        }
        2 => {
            let bytes: [u8; OPTION_HEADER_BYTES] = fixed(rest);
            let _ = parse_option_header(&bytes);
        }
        3 => match parse_info_request(rest) {
            Ok(request) => {
                assert!(request.export_name.len() <= MAX_STRING_BYTES);
                let _ = request.wants(0);
            }
            Err(error) => drop(error.to_string()),
        },
        4 => match parse_meta_context_request(rest) {
            Ok(request) => {
                assert!(request.export_name.len() <= MAX_STRING_BYTES);
                assert!(request.queries.len() <= MAX_META_CONTEXT_QUERIES);
                assert!(request
                    .queries
                    .iter()
                    .all(|query| query.len() <= MAX_STRING_BYTES));
            }
            Err(error) => drop(error.to_string()),
        },
        5 => {
            let bytes: [u8; OPTION_REPLY_HEADER_BYTES] = fixed(rest);
            let _ = parse_option_reply_header(&bytes);
        }
        6 => {
            let announced = reply_header_bytes(&fixed(rest));
            match parse_reply_header(rest) {
                Ok(ReplyHeader::Simple { .. }) => {
                    assert_eq!(announced.ok(), Some(SIMPLE_REPLY_BYTES))
                }
                Ok(ReplyHeader::Chunk { .. }) => {
                    assert_eq!(announced.ok(), Some(STRUCTURED_REPLY_HEADER_BYTES))
                }
                Err(error) => drop(error.to_string()),
            }
        }
        _ => {
            if let Ok(uri) = std::str::from_utf8(rest) {
                match tierd_nbd::parse_nbd_uri(uri) {
                    Ok(parsed) => drop(format!("{parsed:?}")),
                    Err(error) => drop(error.to_string()),
                }
            }
        }
    }
}
