//! Hand-built traces for the analysis tests.
#![allow(dead_code)]

use tierd_trace::{Format, IteratorReader, Op, Request};

pub const SECOND_NS: u64 = 1_000_000_000;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

pub fn request(time_ns: u64, op: Op, offset_bytes: u64, length_bytes: u64) -> Request {
    Request {
        time_ns,
        volume: 0,
        op,
        offset_bytes,
        length_bytes,
        response_ns: None,
    }
}

pub fn read(time_ns: u64, offset_bytes: u64, length_bytes: u64) -> Request {
    request(time_ns, Op::Read, offset_bytes, length_bytes)
}

pub fn write(time_ns: u64, offset_bytes: u64, length_bytes: u64) -> Request {
    request(time_ns, Op::Write, offset_bytes, length_bytes)
}

/// `count` requests in period `period` (60 s periods), 1 ms apart from the period start.
pub fn burst(
    period: u64,
    count: u64,
    op: Op,
    offset_bytes: u64,
    length_bytes: u64,
) -> Vec<Request> {
    (0..count)
        .map(|index| {
            request(
                period * 60 * SECOND_NS + index * 1_000_000,
                op,
                offset_bytes,
                length_bytes,
            )
        })
        .collect()
}

pub fn reader(mut requests: Vec<Request>) -> IteratorReader<std::vec::IntoIter<Request>> {
    requests.sort_by_key(|request| request.time_ns);
    IteratorReader::new(
        requests.into_iter(),
        &["test"],
        Format::Msr,
        "hand-built trace",
    )
}
