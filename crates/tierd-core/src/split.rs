//! Splitting a request at segment boundaries.

/// One segment's part of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub segment: u64,
    /// Offset of the piece within its segment.
    pub within_bytes: u64,
    pub length_bytes: u64,
    /// Offset of the piece within the request.
    pub at_bytes: u64,
}

/// The pieces of `[offset_bytes, offset_bytes + length_bytes)` for segments
/// of `segment_bytes`, in order. An empty request has no pieces.
pub fn pieces(
    offset_bytes: u64,
    length_bytes: u64,
    segment_bytes: u64,
) -> impl Iterator<Item = Piece> {
    debug_assert!(segment_bytes > 0);
    let end = offset_bytes.saturating_add(length_bytes);
    let mut at = offset_bytes;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let segment = at / segment_bytes;
        let within_bytes = at % segment_bytes;
        let length = (segment_bytes - within_bytes).min(end - at);
        let piece = Piece {
            segment,
            within_bytes,
            length_bytes: length,
            at_bytes: at - offset_bytes,
        };
        at += length;
        Some(piece)
    })
}

/// How many segments `[offset_bytes, offset_bytes + length_bytes)` touches.
pub fn piece_count(offset_bytes: u64, length_bytes: u64, segment_bytes: u64) -> u64 {
    if length_bytes == 0 {
        return 0;
    }
    let last = (offset_bytes + length_bytes - 1) / segment_bytes;
    last - offset_bytes / segment_bytes + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_cut_at_every_segment_boundary() {
        let cut: Vec<_> = pieces(900, 2300, 1000).collect();
        assert_eq!(
            cut,
            vec![
                Piece {
                    segment: 0,
                    within_bytes: 900,
                    length_bytes: 100,
                    at_bytes: 0
                },
                Piece {
                    segment: 1,
                    within_bytes: 0,
                    length_bytes: 1000,
                    at_bytes: 100
                },
                Piece {
                    segment: 2,
                    within_bytes: 0,
                    length_bytes: 1000,
                    at_bytes: 1100
                },
                Piece {
                    segment: 3,
                    within_bytes: 0,
                    length_bytes: 200,
                    at_bytes: 2100
                },
            ]
        );
        assert_eq!(piece_count(900, 2300, 1000), 4);
        assert_eq!(pieces(5, 0, 1000).count(), 0);
        assert_eq!(piece_count(5, 0, 1000), 0);
        assert_eq!(piece_count(0, 1000, 1000), 1);
    }
}
