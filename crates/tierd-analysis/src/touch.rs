//! Which blocks, segments or chunks a request touches.
//!
//! One rule for every unit `U` (4 KiB block, segment, region chunk): a request
//! covering bytes `[a, b)` touches units `a / U ..= (b - 1) / U`. Only the first
//! [`MAX_TOUCH_BYTES`] of a request are enumerated, so one corrupt length cannot
//! stall an analysis; callers count such requests with [`is_clamped`].

use tierd_trace::Request;

/// Bytes of one block for block counting and the FIFO cache.
pub const BLOCK_BYTES: u64 = 4096;

/// Longest stretch of a request that is enumerated unit by unit (1 GiB).
pub const MAX_TOUCH_BYTES: u64 = 1 << 30;

/// Whether only the first [`MAX_TOUCH_BYTES`] of `request` are enumerated.
pub fn is_clamped(request: &Request) -> bool {
    request.length_bytes > MAX_TOUCH_BYTES
}

/// The end (exclusive) of the enumerated stretch of `request`.
fn touch_end_bytes(request: &Request) -> u64 {
    request
        .offset_bytes
        .saturating_add(request.length_bytes.min(MAX_TOUCH_BYTES))
}

/// Units of `unit_bytes` touched by `request`, as an inclusive range
/// `(first, last)`; `None` for a zero-length request (or one at the very end of
/// the 64-bit address space). `unit_bytes` MUST be non-zero.
pub fn touched_units(request: &Request, unit_bytes: u64) -> Option<(u64, u64)> {
    let end_bytes = touch_end_bytes(request);
    if end_bytes <= request.offset_bytes {
        return None;
    }
    Some((
        request.offset_bytes / unit_bytes,
        (end_bytes - 1) / unit_bytes,
    ))
}

/// Like [`touched_units`], but a zero-length request touches the one unit that
/// holds its offset (it is still an IO to that segment).
pub fn touched_units_at_least_one(request: &Request, unit_bytes: u64) -> (u64, u64) {
    touched_units(request, unit_bytes).unwrap_or_else(|| {
        let unit = request.offset_bytes / unit_bytes;
        (unit, unit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierd_trace::Op;

    fn request(offset_bytes: u64, length_bytes: u64) -> Request {
        Request {
            time_ns: 0,
            volume: 0,
            op: Op::Read,
            offset_bytes,
            length_bytes,
            response_ns: None,
        }
    }

    #[test]
    fn blocks_across_boundaries() {
        // [4095, 4097) straddles blocks 0 and 1.
        assert_eq!(touched_units(&request(4095, 2), 4096), Some((0, 1)));
        // [4096, 8192) is exactly block 1.
        assert_eq!(touched_units(&request(4096, 4096), 4096), Some((1, 1)));
        // [512, 1024) lies inside block 0.
        assert_eq!(touched_units(&request(512, 512), 4096), Some((0, 0)));
        assert_eq!(touched_units(&request(8192, 0), 4096), None);
        assert_eq!(touched_units_at_least_one(&request(8192, 0), 4096), (2, 2));
    }

    #[test]
    fn huge_lengths_are_clamped_and_never_overflow() {
        let huge = request(u64::MAX - 10, u64::MAX);
        assert!(is_clamped(&huge));
        // Saturates at u64::MAX: bytes [MAX-10, MAX) → blocks up to (MAX-1)/4096.
        assert_eq!(
            touched_units(&huge, 4096),
            Some(((u64::MAX - 10) / 4096, (u64::MAX - 1) / 4096))
        );
        let long = request(0, 10 << 30);
        assert_eq!(touched_units(&long, 1 << 30), Some((0, 0)));
        assert_eq!(touched_units(&request(u64::MAX, 5), 4096), None);
    }
}
