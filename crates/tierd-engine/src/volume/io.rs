//! The user IO path: read, write, discard, write zeroes and flush, routed
//! by the tiering table, mirrored to a moving segment's target and
//! written through to home for volatile tiers.

use std::sync::atomic::Ordering;

use tierd_policy::{SegmentId, TierId};

use crate::device::{BlockDevice, DeviceError};

use super::{Volume, VolumeError};

enum Mutation<'a> {
    Write(&'a [u8]),
    Discard,
    Zero,
}

impl Mutation<'_> {
    fn slice(&self, start: usize, length: usize) -> Mutation<'_> {
        match self {
            Mutation::Write(data) => Mutation::Write(&data[start..start + length]),
            Mutation::Discard => Mutation::Discard,
            Mutation::Zero => Mutation::Zero,
        }
    }

    fn apply(&self, device: &dyn BlockDevice, offset: u64, length: u64) -> Result<(), DeviceError> {
        match self {
            Mutation::Write(data) => device.write_at(offset, data),
            Mutation::Discard => device.discard(offset, length),
            Mutation::Zero => device.write_zeroes(offset, length),
        }
    }
}

impl Volume {
    fn check_range(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), VolumeError> {
        match offset_bytes.checked_add(length_bytes) {
            Some(end) if end <= self.options.size_bytes => Ok(()),
            _ => Err(VolumeError::OutOfRange {
                offset_bytes,
                length_bytes,
                size_bytes: self.options.size_bytes,
            }),
        }
    }

    /// Splits `[offset, offset+length)` at segment boundaries:
    /// `(segment, offset in segment, length, offset in request)`.
    fn pieces(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> impl Iterator<Item = (SegmentId, u64, u64, u64)> + '_ {
        let segment_bytes = self.options.segment_bytes;
        let end = offset_bytes + length_bytes;
        let mut at = offset_bytes;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let segment = at / segment_bytes;
            let within = at % segment_bytes;
            let length = (segment_bytes - within).min(end - at);
            let piece = (segment as SegmentId, within, length, at - offset_bytes);
            at += length;
            Some(piece)
        })
    }

    /// Reads `buf.len()` bytes at `offset_bytes`.
    pub fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        self.check_range(offset_bytes, buf.len() as u64)?;
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
                self.mutate_piece(segment, within, length, &piece, &mut touched)?;
            let response_ns = self.clock.now_ns().saturating_sub(started_ns);
            self.monitor
                .record_user_io(segment, tier, true, length, response_ns, moving);
        }
        if fua {
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
    fn mutate_piece(
        &self,
        segment: SegmentId,
        within: u64,
        length: u64,
        mutation: &Mutation,
        touched: &mut [bool; 8],
    ) -> Result<(TierId, bool), VolumeError> {
        let home = self.home();
        let guard = self.entries[segment as usize].read();
        let entry = *guard;
        let source = entry.location;
        let source_tier = &self.tiers[source.tier as usize];
        let active = if entry.moving {
            self.active.read().clone()
        } else {
            None
        };
        let active = active.filter(|active| active.segment == segment);
        // Home gets every write to a segment on a write-through tier, and to
        // one moving onto such a tier from another fast tier (so home is
        // current when the flip lands it in RAM).
        let target_write_through = active
            .as_ref()
            .is_some_and(|active| self.tiers[active.to.tier as usize].write_through);
        let needs_home = source.tier != home && (source_tier.write_through || target_write_through);
        if source.tier != home && !needs_home {
            // The home copy goes stale before the data lands on the fast tier.
            self.home_current[segment as usize].store(false, Ordering::Release);
        }
        let chunk_bytes = self.options.chunk_bytes;
        let first_chunk = (within / chunk_bytes) as usize;
        let last_chunk = ((within + length.max(1) - 1) / chunk_bytes) as usize;
        let _chunk_guards: Vec<_> = match &active {
            Some(active) => (first_chunk..=last_chunk)
                .map(|chunk| active.chunk_locks[chunk].read())
                .collect(),
            None => Vec::new(),
        };
        mutation.apply(
            source_tier.device.as_ref(),
            self.slot_offset(source) + within,
            length,
        )?;
        touched[source.tier as usize] = true;
        if let Some(active) = &active {
            let target = active.to;
            let home_write_covers = target.tier == home && needs_home;
            if !home_write_covers {
                let target_device = &self.tiers[target.tier as usize].device;
                // Mirror the parts that fall in chunks already copied.
                for chunk in first_chunk..=last_chunk {
                    if !active.copied[chunk].load(Ordering::Acquire) {
                        continue;
                    }
                    let chunk_start = chunk as u64 * chunk_bytes;
                    let start = within.max(chunk_start);
                    let end = (within + length).min(chunk_start + chunk_bytes);
                    if start >= end {
                        continue;
                    }
                    let part = match mutation {
                        Mutation::Write(data) => Mutation::Write(
                            &data[(start - within) as usize..(end - within) as usize],
                        ),
                        Mutation::Discard => Mutation::Discard,
                        Mutation::Zero => Mutation::Zero,
                    };
                    part.apply(
                        target_device.as_ref(),
                        self.slot_offset(target) + start,
                        end - start,
                    )?;
                    touched[target.tier as usize] = true;
                }
            }
        }
        if needs_home {
            mutation.apply(
                self.tiers[home as usize].device.as_ref(),
                u64::from(segment) * self.options.segment_bytes + within,
                length,
            )?;
            touched[home as usize] = true;
        }
        drop(guard);
        Ok((source.tier, entry.moving))
    }

    /// Makes every completed write durable on every tier.
    pub fn flush(&self) -> Result<(), VolumeError> {
        let mut first_error = None;
        for tier in &self.tiers {
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
