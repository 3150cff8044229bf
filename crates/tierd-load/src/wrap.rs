//! Requests that end past the export: `--wrap` puts them onto it
//! (`docs/engine/replay.md`, "Offsets past the export").

use tierd_common::units::PAGE_BYTES;

/// Where a request lands on an export of `export_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub offset_bytes: u64,
    pub length_bytes: u64,
    /// The request did not fit and was moved.
    pub wrapped: bool,
}

/// Unchanged when the request fits, else wrapped modulo the export size
/// rounded down to 4 KiB (keeping its offset within a 4 KiB page), moved
/// back by whole pages when it would still cross the end, and cut to that
/// size when it is longer.
pub fn place(offset_bytes: u64, length_bytes: u64, export_bytes: u64) -> Placed {
    if offset_bytes.saturating_add(length_bytes) <= export_bytes {
        return Placed {
            offset_bytes,
            length_bytes,
            wrapped: false,
        };
    }
    let usable = export_bytes - export_bytes % PAGE_BYTES;
    if usable == 0 {
        return Placed {
            offset_bytes: 0,
            length_bytes: length_bytes.min(export_bytes),
            wrapped: true,
        };
    }
    let mut offset = offset_bytes % usable;
    if offset + length_bytes > usable {
        let over = offset + length_bytes - usable;
        let back = over.div_ceil(PAGE_BYTES) * PAGE_BYTES;
        offset = offset.saturating_sub(back);
        if offset % PAGE_BYTES != offset_bytes % PAGE_BYTES {
            // Moving back would have crossed zero: start at the page offset.
            offset = offset_bytes % PAGE_BYTES;
        }
    }
    Placed {
        offset_bytes: offset,
        length_bytes: length_bytes.min(usable - offset),
        wrapped: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(offset: u64, length: u64, export: u64) -> (u64, u64, bool) {
        let placed = place(offset, length, export);
        (placed.offset_bytes, placed.length_bytes, placed.wrapped)
    }

    #[test]
    fn requests_that_fit_stay() {
        assert_eq!(placed(4096, 8192, 1 << 20), (4096, 8192, false));
        assert_eq!(
            placed((1 << 20) - 512, 512, 1 << 20),
            ((1 << 20) - 512, 512, false)
        );
    }

    #[test]
    fn requests_past_the_end_wrap_inside_keeping_page_offsets() {
        let export = (1u64 << 20) + 1000; // usable: 1 MiB
        let (offset, length, wrapped) = placed(3 * (1 << 20) + 4096 + 512, 4096, export);
        assert!(wrapped);
        assert_eq!((offset, length), (4096 + 512, 4096));
        // Wraps to the last page and would cross the usable end: moved back.
        let (offset, length, _) = placed(2 * (1 << 20) - 512, 4096, export);
        assert_eq!(offset % PAGE_BYTES, 4096 - 512);
        assert!(offset + length <= 1 << 20, "{offset}+{length}");
        assert_eq!(length, 4096);
        // Longer than the export: cut.
        let (offset, length, _) = placed(1 << 30, 4 << 20, export);
        assert_eq!(offset, 0);
        assert_eq!(length, 1 << 20);
        for (offset, length) in [(u64::MAX - 10, 4096), (u64::MAX, 1), (5 << 20, 1 << 20)] {
            let (at, placed_length, _) = placed(offset, length, export);
            assert!(at + placed_length <= export, "{offset} {length}");
        }
        // An export smaller than a page: everything lands at 0, cut to it.
        assert_eq!(placed(9000, 4096, 1000), (0, 1000, true));
    }
}
