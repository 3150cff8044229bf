//! The cache baselines: a page cache over tier 0 and home.

use super::*;

/// Cache-baseline counters.
#[derive(Default)]
pub(super) struct CacheCounters {
    pub(super) page_accesses: u64,
    pub(super) page_hits: u64,
    pub(super) read_pages: u64,
    pub(super) read_hit_pages: u64,
    pub(super) write_pages: u64,
    pub(super) dirty_evictions: u64,
    pub(super) clean_evictions: u64,
    pub(super) fill_bytes: u64,
    pub(super) writeback_bytes: u64,
}

impl<'run> Engine<'run> {
    pub(super) fn fast_offset(&self, page: u64, length: u64) -> u64 {
        let offset = (page % self.fast_device_pages) * PAGE_BYTES;
        let capacity = self.devices[0].capacity_bytes();
        offset.min(capacity.saturating_sub(length))
    }

    pub(super) fn dispatch_cache(&mut self, request_index: u32, request: &Request) {
        let is_write = request.op.is_write();
        let start = request.offset_bytes;
        let end = request.end_bytes();
        let first_page = start / PAGE_BYTES;
        let last_page = (end - 1) / PAGE_BYTES;
        // Every page is looked up in order; consecutive read pages with the
        // same outcome (hit or miss) become one device IO.
        let mut run: Option<(u64, bool)> = None;
        for page in first_page..=last_page {
            let access = match &mut self.controller {
                Controller::Cache(cache) => cache.access(page, is_write),
                Controller::Policy(_) => return,
            };
            let counters = &mut self.cache_counters;
            counters.page_accesses += 1;
            counters.page_hits += u64::from(access.hit);
            if is_write {
                counters.write_pages += 1;
            } else {
                counters.read_pages += 1;
                counters.read_hit_pages += u64::from(access.hit);
            }
            if let Some(evicted) = access.evicted {
                if evicted.dirty {
                    self.cache_counters.dirty_evictions += 1;
                    let offset = self.fast_offset(evicted.page, PAGE_BYTES);
                    self.submit(
                        0,
                        DeviceIo {
                            id: (KIND_WRITEBACK_READ << KIND_SHIFT) | (evicted.page & PAYLOAD_MASK),
                            op: Op::Read,
                            offset_bytes: offset,
                            length_bytes: PAGE_BYTES,
                            background: true,
                        },
                    );
                } else {
                    self.cache_counters.clean_evictions += 1;
                }
            }
            if !is_write {
                match run {
                    Some((run_first, run_hit)) if run_hit != access.hit => {
                        self.cache_run_piece(request_index, request, run_first, page - 1, run_hit);
                        run = Some((page, access.hit));
                    }
                    None => run = Some((page, access.hit)),
                    Some(_) => {}
                }
            }
        }
        if is_write {
            // Write-back, write-allocate: the whole write goes to the fast tier.
            let span = (last_page - first_page + 1) * PAGE_BYTES;
            let device_offset = self.fast_offset(first_page, span) + start % PAGE_BYTES;
            self.requests.get_mut(request_index).pieces_left += 1;
            self.submit_cache_piece(
                request_index,
                request,
                start,
                end - start,
                0,
                device_offset,
                0,
                0,
            );
        } else if let Some((run_first, run_hit)) = run {
            self.cache_run_piece(request_index, request, run_first, last_page, run_hit);
        }
    }

    /// A read run of pages `first..=last` that all hit (fast) or all missed
    /// (slow, then filled into the fast tier).
    pub(super) fn cache_run_piece(
        &mut self,
        request_index: u32,
        request: &Request,
        first: u64,
        last: u64,
        hit: bool,
    ) {
        let start = request.offset_bytes.max(first * PAGE_BYTES);
        let end = request.end_bytes().min((last + 1) * PAGE_BYTES);
        self.requests.get_mut(request_index).pieces_left += 1;
        let run_bytes = (last - first + 1) * PAGE_BYTES;
        if hit {
            let device_offset = self.fast_offset(first, run_bytes) + (start - first * PAGE_BYTES);
            self.submit_cache_piece(
                request_index,
                request,
                start,
                end - start,
                0,
                device_offset,
                0,
                0,
            );
        } else {
            let fill_offset = self.fast_offset(first, run_bytes);
            let home = self.home as TierId;
            self.submit_cache_piece(
                request_index,
                request,
                start,
                end - start,
                home,
                start,
                fill_offset,
                run_bytes,
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn submit_cache_piece(
        &mut self,
        request_index: u32,
        request: &Request,
        volume_offset: u64,
        bytes: u64,
        tier: TierId,
        device_offset: u64,
        fill_offset: u64,
        fill_bytes: u64,
    ) {
        let piece_index = self.pieces.insert(Piece {
            request: request_index,
            segment: (volume_offset / self.config.segment_bytes) as SegmentId,
            tier,
            is_write: request.op.is_write(),
            volume_offset,
            device_offset,
            bytes,
            fill_offset,
            fill_bytes,
            parts_left: 1,
            ..Piece::default()
        });
        self.pieces_total += 1;
        self.submit(
            tier as usize,
            DeviceIo {
                id: (KIND_USER << KIND_SHIFT) | u64::from(piece_index),
                op: request.op,
                offset_bytes: device_offset,
                length_bytes: bytes,
                background: false,
            },
        );
    }
}
