//! `--prefill`: before the replay, write every byte range the window reads
//! (`docs/engine/replay.md`, "Prefill"). A trace records the reads of data
//! that existed before it started; a fresh export holds none of it, and a
//! tier that tracks what was written (a replicated tier's allocation map, a
//! reduced tier's block map) answers a read of never-written space with
//! zeroes without touching its device, so without the prefill such a
//! replay measures nothing of the disk.
//!
//! [`read_ranges`] is the sans-IO part (the ranges, merged); [`prefill`]
//! writes them over one connection, then FLUSHes.

use tierd_common::clock::Clock;
use tierd_nbd::client::{ClientReceiver, ClientSender};
use tierd_trace::Op;

use crate::pattern::fill_pattern;
use crate::schedule::{Due, Schedule};
use crate::wrap::place;
use crate::LoadError;

/// Longest write the prefill sends.
pub const PREFILL_WRITE_BYTES: u64 = 1 << 20;
/// Most prefill writes in flight.
pub const PREFILL_IN_FLIGHT: usize = 16;

/// What the prefill wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Prefilled {
    /// Disjoint byte ranges written (the window's reads, merged).
    pub ranges: u64,
    pub bytes: u64,
    /// Write requests sent (ranges cut at [`PREFILL_WRITE_BYTES`]).
    pub writes: u64,
    /// From the first write to the FLUSH's reply, on the clock.
    pub wall_ns: u64,
}

/// The byte ranges `[start, end)` the window's reads touch on an export of
/// `export_bytes` (placed as the replay places them: wrapped requests where
/// they land), sorted, overlapping and touching ones merged.
pub fn read_ranges(
    schedule: &mut Schedule,
    export_bytes: u64,
) -> Result<Vec<(u64, u64)>, LoadError> {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    while let Some(Due { request, .. }) = schedule.next_due()? {
        if request.op != Op::Read {
            continue;
        }
        let placed = place(request.offset_bytes, request.length_bytes, export_bytes);
        if placed.length_bytes > 0 {
            ranges.push((
                placed.offset_bytes,
                placed.offset_bytes + placed.length_bytes,
            ));
        }
    }
    Ok(merge(ranges))
}

/// Sorts `ranges` and merges those that overlap or touch.
pub fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// Writes `ranges` (in the replay's write pattern, pieces of at most
/// [`PREFILL_WRITE_BYTES`], up to [`PREFILL_IN_FLIGHT`] in flight) over one
/// connection, then FLUSHes and waits for every reply. Any failed request
/// stops it.
pub fn prefill(
    ranges: &[(u64, u64)],
    sender: &mut ClientSender,
    receiver: &mut ClientReceiver,
    clock: &dyn Clock,
) -> Result<Prefilled, LoadError> {
    let start_ns = clock.now_ns();
    let mut done = Prefilled {
        ranges: ranges.len() as u64,
        ..Prefilled::default()
    };
    let failed = |what: &str, error: tierd_nbd::ClientError| {
        LoadError::Target(format!("prefill: {what}: {error}"))
    };
    let mut in_flight = 0usize;
    let mut buffer: Vec<u8> = Vec::new();
    let mut wait_one = |in_flight: &mut usize| -> Result<(), LoadError> {
        let completion = receiver
            .receive()
            .map_err(|error| failed("a reply", error))?;
        completion.result().map_err(|error| {
            failed(
                &format!(
                    "the write of {} bytes at {}",
                    completion.length_bytes, completion.offset_bytes
                ),
                error,
            )
        })?;
        *in_flight -= 1;
        Ok(())
    };
    for &(start, end) in ranges {
        let mut at = start;
        while at < end {
            let length = (end - at).min(PREFILL_WRITE_BYTES);
            buffer.resize(length as usize, 0);
            fill_pattern(&mut buffer, at);
            if in_flight >= PREFILL_IN_FLIGHT {
                wait_one(&mut in_flight)?;
            }
            sender
                .submit_write(at, &buffer, false)
                .map_err(|error| failed(&format!("sending the write at {at}"), error))?;
            in_flight += 1;
            done.writes += 1;
            done.bytes += length;
            at += length;
        }
    }
    while in_flight > 0 {
        wait_one(&mut in_flight)?;
    }
    sender
        .submit_flush()
        .map_err(|error| failed("sending the FLUSH", error))?;
    in_flight = 1;
    wait_one(&mut in_flight)?;
    done.wall_ns = clock.now_ns().saturating_sub(start_ns);
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_when_they_overlap_or_touch() {
        assert_eq!(
            merge(vec![
                (100, 200),
                (0, 50),
                (150, 300),
                (300, 310),
                (400, 401),
                (50, 60)
            ]),
            vec![(0, 60), (100, 310), (400, 401)]
        );
        assert_eq!(merge(Vec::new()), Vec::<(u64, u64)>::new());
        assert_eq!(merge(vec![(0, 10), (2, 3)]), vec![(0, 10)]);
    }
}
