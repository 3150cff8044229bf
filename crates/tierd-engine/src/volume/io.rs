//! The user IO path: read, write, discard, write zeroes and flush, routed
//! by the tiering table, mirrored to a moving segment's target and
//! written through to home for volatile tiers.

use std::sync::atomic::Ordering;

use tierd_policy::{SegmentId, TierId};

use crate::device::{BlockDevice, DeviceError};

use tierd_core::moves::{Part, Route};
use tierd_core::placement::write_reaches_home;

use super::{ActiveMove, Handed, Volume, VolumeError};

pub(super) enum Mutation<'a> {
    Write(&'a [u8]),
    Discard,
    Zero,
}

impl Mutation<'_> {
    /// The part `start..start+length` of the request (data only for a write).
    pub(super) fn slice(&self, start: usize, length: usize) -> Mutation<'_> {
        match self {
            Mutation::Write(data) => Mutation::Write(&data[start..start + length]),
            Mutation::Discard => Mutation::Discard,
            Mutation::Zero => Mutation::Zero,
        }
    }

    /// What the mover needs to apply `part` (segment offsets) of this
    /// request, which starts at `within` in the segment.
    pub(super) fn handed(&self, within: u64, part: Part) -> Handed {
        match self {
            Mutation::Write(data) => {
                let start = (part.offset_bytes - within) as usize;
                Handed::Data(data[start..start + part.length_bytes as usize].to_vec())
            }
            Mutation::Discard => Handed::Discard,
            Mutation::Zero => Handed::Zero,
        }
    }

    /// `fua`: a write is made durable by itself (only its range);
    /// discard and zero leave that to the flush after them.
    pub(super) fn apply(
        &self,
        device: &dyn BlockDevice,
        offset: u64,
        length: u64,
        fua: bool,
    ) -> Result<(), DeviceError> {
        match self {
            Mutation::Write(data) if fua => device.write_at_durable(offset, data),
            Mutation::Write(data) => device.write_at(offset, data),
            Mutation::Discard => device.discard(offset, length),
            Mutation::Zero => device.write_zeroes(offset, length),
        }
    }
}

/// Forgets an unfinished tracked write when its thread unwinds.
struct WriteGuard<'a> {
    active: Option<&'a ActiveMove>,
    id: Option<u64>,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        if let (Some(active), Some(id)) = (self.active, self.id) {
            let mut state = active.state.lock();
            state.machine.forget_write(id);
            state.failure.get_or_insert_with(|| {
                "failed: a write to the segment ended unfinished".to_string()
            });
        }
    }
}

impl Volume {
    pub(super) fn check_range(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<(), VolumeError> {
        match offset_bytes.checked_add(length_bytes) {
            Some(end) if end <= self.options.size_bytes => Ok(()),
            _ => Err(VolumeError::OutOfRange {
                offset_bytes,
                length_bytes,
                size_bytes: self.options.size_bytes,
            }),
        }
    }

    /// Splits `[offset, offset+length)` at segment boundaries (the shared
    /// splitter, `tierd_core::split`): `(segment, offset in segment, length,
    /// offset in request)`.
    pub(super) fn pieces(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> impl Iterator<Item = (SegmentId, u64, u64, u64)> {
        tierd_core::split::pieces(offset_bytes, length_bytes, self.options.segment_bytes).map(
            |piece| {
                (
                    piece.segment as SegmentId,
                    piece.within_bytes,
                    piece.length_bytes,
                    piece.at_bytes,
                )
            },
        )
    }

    /// Reads `buf.len()` bytes at `offset_bytes`.
    pub fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        self.check_range(offset_bytes, buf.len() as u64)?;
        if self.cache.is_some() {
            return self.cached_read(offset_bytes, buf);
        }
        self.read_tiered(offset_bytes, buf)
    }

    /// A read routed by the tiering table (on a cache volume: home's part).
    pub(super) fn read_tiered(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        for (segment, within, length, at) in self.pieces(offset_bytes, buf.len() as u64) {
            let started_ns = self.clock.now_ns();
            let piece = &mut buf[at as usize..(at + length) as usize];
            let guard = self.entries[segment as usize].read();
            let entry = *guard;
            let device = &self.tiers[entry.location.tier as usize].device;
            let mut served_by = entry.location.tier;
            if let Err(error) = device.read_at(self.slot_offset(entry.location) + within, piece) {
                // A failed fast tier: the home copy serves if it is current.
                let home = self.home();
                if entry.location.tier != home
                    && self.home_current[segment as usize].load(Ordering::Acquire)
                {
                    self.tiers[home as usize].device.read_at(
                        u64::from(segment) * self.options.segment_bytes + within,
                        piece,
                    )?;
                    served_by = home;
                } else {
                    return Err(error.into());
                }
            }
            drop(guard);
            let response_ns = self.clock.now_ns().saturating_sub(started_ns);
            self.monitor.record_user_io(
                segment,
                served_by,
                false,
                length,
                response_ns,
                entry.moving,
            );
        }
        Ok(())
    }

    pub fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), VolumeError> {
        self.mutate(offset_bytes, data.len() as u64, &Mutation::Write(data), fua)
    }

    pub fn discard(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
    ) -> Result<(), VolumeError> {
        self.mutate(offset_bytes, length_bytes, &Mutation::Discard, fua)
    }

    pub fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
    ) -> Result<(), VolumeError> {
        self.mutate(offset_bytes, length_bytes, &Mutation::Zero, fua)
    }

    fn mutate(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        mutation: &Mutation,
        fua: bool,
    ) -> Result<(), VolumeError> {
        self.check_range(offset_bytes, length_bytes)?;
        if self.cache.is_some() {
            return self.cached_mutate(offset_bytes, length_bytes, mutation, fua);
        }
        self.mutate_tiered(offset_bytes, length_bytes, mutation, fua)
    }

    /// A write, discard or zero routed by the tiering table (on a cache
    /// volume: home's part).
    pub(super) fn mutate_tiered(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        mutation: &Mutation,
        fua: bool,
    ) -> Result<(), VolumeError> {
        let pieces = self.pieces(offset_bytes, length_bytes);
        let mut touched = [false; 8];
        for (segment, within, length, at) in pieces {
            let started_ns = self.clock.now_ns();
            let piece = mutation.slice(
                at as usize,
                if matches!(mutation, Mutation::Write(_)) {
                    length as usize
                } else {
                    0
                },
            );
            let (tier, moving) =
                self.mutate_piece(segment, within, length, &piece, fua, &mut touched)?;
            let response_ns = self.clock.now_ns().saturating_sub(started_ns);
            self.monitor
                .record_user_io(segment, tier, true, length, response_ns, moving);
        }
        // FUA writes were durable piece by piece; discard and zero flush.
        if fua && !matches!(mutation, Mutation::Write(_)) {
            for (tier, touched) in self.tiers.iter().zip(touched) {
                if touched {
                    tier.device.flush()?;
                }
            }
        }
        Ok(())
    }

    /// One segment's part of a write/discard/zero. Returns the tier that
    /// served it and whether the segment was moving.
    ///
    /// To a moving segment, the shared move machine
    /// (`tierd_core::moves`) says which parts also go to the target now
    /// (chunks already copied) and which are handed to the mover (chunks
    /// being copied; it applies them after the copy lands). Nothing here
    /// waits for a copy. A target that fails a mirrored part fails the move,
    /// not the write: the source stays the segment's home. With `fua` the
    /// source half (and the write-through to home) is durable before the
    /// ack; mirrored and handed-over parts need not be, because the source
    /// is the segment's durable home until the flip, which flushes the
    /// target first.
    fn mutate_piece(
        &self,
        segment: SegmentId,
        within: u64,
        length: u64,
        mutation: &Mutation,
        fua: bool,
        touched: &mut [bool; 8],
    ) -> Result<(TierId, bool), VolumeError> {
        let home = self.home();
        let guard = self.entries[segment as usize].read();
        let entry = *guard;
        let source = entry.location;
        let source_tier = &self.tiers[source.tier as usize];
        let active = if entry.moving {
            self.active
                .read()
                .iter()
                .find(|active| active.segment == segment)
                .cloned()
        } else {
            None
        };
        // Home gets every write to a segment on a write-through tier, and to
        // one moving onto such a tier from another fast tier (so home is
        // current when the flip lands it in RAM).
        let needs_home = write_reaches_home(
            home,
            source.tier,
            active.as_ref().map(|active| active.to.tier),
            |tier| self.tiers[tier as usize].write_through,
        );
        if source.tier != home && !needs_home {
            // The home copy goes stale before the data lands on the fast tier.
            self.home_current[segment as usize].store(false, Ordering::Release);
        }
        let mut route = Route::default();
        let mut mirror = Vec::new();
        // A write that unwinds (a panic below) must not leave its move
        // waiting for it: the guard forgets it and fails the move.
        let mut unwinding = WriteGuard {
            active: active.as_deref(),
            id: None,
        };
        let tracked = active.as_ref().map(|active| {
            let id = self.next_write_id.fetch_add(1, Ordering::Relaxed);
            let mut state = active.state.lock();
            state.machine.write_begin(id, within, length, &mut route);
            for &(chunk, part) in &route.hand_over {
                state
                    .machine
                    .hand_over(id, chunk, part, mutation.handed(within, part));
            }
            mirror.append(&mut route.mirror);
            id
        });
        unwinding.id = tracked;
        let source_result = mutation.apply(
            source_tier.device.as_ref(),
            self.slot_offset(source) + within,
            length,
            fua,
        );
        if let (Some(active), Some(id)) = (&active, tracked) {
            let mut state = active.state.lock();
            state
                .machine
                .write_source_done(id, within, length, &mut route);
            for &(chunk, part) in &route.hand_over {
                state
                    .machine
                    .hand_over(id, chunk, part, mutation.handed(within, part));
            }
            mirror.append(&mut route.mirror);
        }
        let source_result = source_result.map_err(VolumeError::from);
        touched[source.tier as usize] |= source_result.is_ok();
        if let (Some(active), Some(id)) = (&active, tracked) {
            let target = active.to;
            // A write through to home below covers a target that is home.
            let covered = target.tier == home && needs_home;
            let mut failure = None;
            for part in &mirror {
                if covered || source_result.is_err() || failure.is_some() {
                    continue;
                }
                let start = (part.offset_bytes - within) as usize;
                let piece = mutation.slice(start, part.length_bytes as usize);
                match piece.apply(
                    self.tiers[target.tier as usize].device.as_ref(),
                    self.slot_offset(target) + part.offset_bytes,
                    part.length_bytes,
                    false,
                ) {
                    Ok(()) => touched[target.tier as usize] = true,
                    Err(error) => failure = Some(error),
                }
            }
            let mut state = active.state.lock();
            for _ in &mirror {
                state.machine.write_part_done(id);
            }
            if let Some(error) = failure {
                state
                    .failure
                    .get_or_insert_with(|| format!("failed: mirroring a write: {error}"));
            }
        }
        unwinding.id = None;
        source_result?;
        if needs_home {
            mutation.apply(
                self.tiers[home as usize].device.as_ref(),
                u64::from(segment) * self.options.segment_bytes + within,
                length,
                fua,
            )?;
            touched[home as usize] = true;
        }
        drop(guard);
        Ok((source.tier, entry.moving))
    }

    /// Makes every completed write durable on every tier. On a cache
    /// volume also commits the cache's mapping changes, after the tiers are
    /// flushed (an unmapping never becomes durable before the home copy it
    /// relies on).
    pub fn flush(&self) -> Result<(), VolumeError> {
        if self.cache.is_some() {
            return self.cache_commit(true);
        }
        self.flush_tiers()
    }

    /// Flushes every tier's device.
    /// A lost cache tier is skipped: the cache is bypassed and holds
    /// nothing the volume still needs (its dirty blocks are reported lost),
    /// so a FLUSH of home must not fail because of it.
    pub(super) fn flush_tiers(&self) -> Result<(), VolumeError> {
        let mut first_error = None;
        let lost_cache_tier = self
            .cache
            .as_ref()
            .filter(|layer| layer.core.lock().lost.is_some())
            .map(|layer| layer.tier as usize);
        for (index, tier) in self.tiers.iter().enumerate() {
            if Some(index) == lost_cache_tier {
                continue;
            }
            if let Err(error) = tier.device.flush() {
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }
}
