//! The live half of the SMR home tier (`docs/engine/smr.md`): the cache
//! core's whole-band destage ([`BlockCache::next_destage_io`] /
//! [`BlockCache::destage_io_done`], the same calls the simulator makes)
//! driven with real IO, and the parts of user writes the core planned
//! `Blocked` (their band is being rewritten) done once the band is.
//!
//! ## Rules kept here
//! - **One driver at a time.** A rewrite's IO is done by whoever holds the
//!   layer's `destage` lock: the writeback thread, or a user write waiting
//!   for the band (it *helps*: it drives the rewrite to its end itself, so
//!   a blocked write never depends on another thread being scheduled, and
//!   a single-threaded caller such as DST cannot deadlock). Each IO is
//!   done and reported before the next is asked for, so the core never has
//!   more than one destage IO in flight, and none is in flight when the
//!   lock is released.
//! - **No block lock.** The core's generation and write counts keep a block
//!   written meanwhile dirty; writes into the band go to their slots or
//!   wait (`Blocked`), so home's bytes in the band do not change under the
//!   rewrite.
//! - **The band is assembled in memory**: home's current data of the
//!   ranges no dirty block covers, then each dirty block from its slot,
//!   then the band is written from its first byte to its end, in the
//!   core's order, through the segment path (not durable: the next commit
//!   flushes home before it journals the blocks' release, as every
//!   writeback).
//! - **Failures**: a failed slot read marks the cache tier lost; a failed
//!   home IO ends the rewrite cleaning nothing (the band is rewritten
//!   later). Either way the error is returned.

use std::sync::atomic::Ordering;

use serde::Serialize;
use tierd_core::cache::{BlockId, DestageIo, DestageIoKind, Step};

use super::cache::{CacheLayer, CacheStep};
use super::io::Mutation;
use super::{Volume, VolumeError};

/// The band being assembled, held by whoever drives the rewrite's IO.
#[derive(Default)]
pub(super) struct Destage {
    /// The band in `buffer`: volume bytes (offset, length).
    band: Option<(u64, u64)>,
    buffer: Vec<u8>,
}

/// Destage totals, for status and the rate.
#[derive(Default)]
pub(super) struct DestageCounters {
    pub(super) read_bytes: std::sync::atomic::AtomicU64,
    pub(super) written_bytes: std::sync::atomic::AtomicU64,
    /// `(at_ns, written_bytes)` once a second or so, the last few: the rate.
    pub(super) samples: parking_lot::Mutex<std::collections::VecDeque<(u64, u64)>>,
}

/// Destage rate window: samples kept (about one a second).
const RATE_SAMPLES: usize = 11;
const RATE_SAMPLE_NS: u64 = 1_000_000_000;

/// How long a destage driver goes on.
#[derive(Clone, Copy, Debug)]
enum Until {
    /// At most this many bytes of IO (the writeback thread's step).
    Bytes(u64),
    /// The rewrite of this band (volume bytes) has ended.
    BandDone((u64, u64)),
}

/// What `tierd status` shows of an SMR home (`"smr"` in the cache status).
#[derive(Clone, Debug, Serialize)]
pub struct SmrStatus {
    pub band_bytes: u64,
    pub first_band_offset_bytes: u64,
    /// Bytes staged on the cache tier, waiting for their band's rewrite.
    pub staged_bytes: u64,
    /// Bands holding staged blocks.
    pub staged_bands: u64,
    /// The band being rewritten: volume bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewriting: Option<BandRange>,
    /// Whole-band rewrites finished since start, and the dirty blocks they cleaned.
    pub band_rewrites: u64,
    pub band_rewrite_blocks: u64,
    /// Destage IO at home since start: clean parts read, whole bands written.
    pub destage_read_bytes: u64,
    pub destage_written_bytes: u64,
    /// Whole-band bytes written per second over the last ~10 s.
    pub destage_bytes_per_s: f64,
    /// Blocks of user writes that waited for their band's rewrite.
    pub blocked_blocks: u64,
    /// Write blocks that went home outside a band rewrite (no free slot,
    /// writethrough, draining): each lands in the drive's media cache.
    pub unstaged_home_write_blocks: u64,
    /// The disk's translation layer as its model predicts it (a home with
    /// `model`: emulated, or `model_mode = "predict"` on a real disk): what
    /// its media cache holds and what it has cleaned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub home_model: Option<SmrModelStatus>,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct BandRange {
    pub offset_bytes: u64,
    pub length_bytes: u64,
}

/// The emulated SMR disk's state, as its model predicts it.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SmrModelStatus {
    /// Bands the drive still has to clean (each ~0.5 s, uninterruptible).
    pub dirty_bands: u64,
    pub media_cache_used_bytes: u64,
    pub bands_cleaned: u64,
    /// Host writes the drive appended to its media cache / wrote straight to bands.
    pub media_cache_writes: u64,
    pub direct_writes: u64,
}

impl Volume {
    /// One background step of the SMR destage (the writeback thread's, in
    /// place of per-block writeback): drives band rewrites for at most
    /// `destage_step_bytes` of IO.
    pub(super) fn destage_step(&self, layer: &CacheLayer) -> Result<CacheStep, VolumeError> {
        let step = self.drive_destage(layer, Until::Bytes(layer.options.destage_step_bytes));
        self.sample_destage_rate(layer);
        step
    }

    /// Home counts as busy until no user IO has been in flight for
    /// `destage_idle_ns`.
    fn destage_user_waiting(&self, layer: &CacheLayer) -> bool {
        layer.user_io_in_flight.load(Ordering::Relaxed) > 0
            || self
                .clock
                .now_ns()
                .saturating_sub(layer.last_user_io_ns.load(Ordering::Relaxed))
                < layer.options.destage_idle_ns
    }

    /// Drives the destage: asks the core for IOs and does them until
    /// `until`, or the core hands out nothing now.
    fn drive_destage(&self, layer: &CacheLayer, until: Until) -> Result<CacheStep, VolumeError> {
        let mut destage = layer.destage.lock();
        let (mut bytes, mut ios) = (0, 0);
        let mut rewriting = false;
        loop {
            if let Until::Bytes(budget) = until {
                if bytes >= budget {
                    break;
                }
            }
            let user_waiting = self.destage_user_waiting(layer);
            let (io, band) = {
                let mut core = layer.core.lock();
                if core.bypass() {
                    break;
                }
                if let Until::BandDone(band) = until {
                    if core.cache.rewriting_band() != Some(band) {
                        break;
                    }
                }
                let Some(io) = core.cache.next_destage_io(user_waiting) else {
                    rewriting = core.cache.rewriting_band().is_some();
                    break;
                };
                let band = core
                    .cache
                    .rewriting_band()
                    .expect("a destage IO belongs to the band being rewritten");
                (io, band)
            };
            if destage.band != Some(band) {
                destage.band = Some(band);
                destage.buffer.resize(band.1 as usize, 0);
            }
            self.destage_io(layer, &mut destage, band, io)?;
            bytes += io.length_bytes;
            ios += 1;
        }
        if ios == 0 {
            // A rewrite that yields to user IO goes on soon.
            return Ok(if rewriting {
                CacheStep::Busy
            } else {
                CacheStep::Idle
            });
        }
        Ok(CacheStep::Wrote {
            bytes,
            blocks: ios,
            pause_ns: 0,
        })
    }

    /// Does one destage IO into or out of the band's buffer and reports it.
    fn destage_io(
        &self,
        layer: &CacheLayer,
        destage: &mut Destage,
        band: (u64, u64),
        io: DestageIo,
    ) -> Result<(), VolumeError> {
        let length = io.length_bytes as usize;
        let result: Result<(), VolumeError> = match io.kind {
            DestageIoKind::ReadHome => {
                let at = (io.offset_bytes - band.0) as usize;
                self.read_tiered(io.offset_bytes, &mut destage.buffer[at..at + length])
            }
            DestageIoKind::ReadSlot { block, .. } => {
                let at = (block * layer.options.block_bytes - band.0) as usize;
                self.cache_device()
                    .read_at(io.offset_bytes, &mut destage.buffer[at..at + length])
                    .map_err(|error| {
                        self.cache_tier_failed(&error.to_string());
                        VolumeError::from(error)
                    })
            }
            DestageIoKind::WriteHome => {
                let at = (io.offset_bytes - band.0) as usize;
                self.mutate_tiered(
                    io.offset_bytes,
                    io.length_bytes,
                    &Mutation::Write(&destage.buffer[at..at + length]),
                    false,
                )
            }
        };
        let ok = result.is_ok();
        let done = layer.core.lock().cache.destage_io_done(io, ok);
        match io.kind {
            DestageIoKind::ReadHome if ok => {
                layer
                    .destage_counters
                    .read_bytes
                    .fetch_add(io.length_bytes, Ordering::Relaxed);
            }
            DestageIoKind::WriteHome if ok => {
                layer
                    .destage_counters
                    .written_bytes
                    .fetch_add(io.length_bytes, Ordering::Relaxed);
            }
            _ => {}
        }
        if done.is_some() {
            destage.band = None;
        }
        if let Some(done) = done.filter(|done| !done.ok) {
            tracing::warn!(
                volume = %self.options.name,
                band = done.band,
                offset_bytes = done.offset_bytes,
                "SMR band rewrite failed; its blocks stay staged and the band is rewritten later"
            );
        }
        result
    }

    /// The parts of a write planned `Blocked` (their band was being
    /// rewritten): for each run of them, helps the band's rewrite to its
    /// end, then does the part again as a write of its own (which may
    /// block on a later rewrite of the band, and then helps that one).
    pub(super) fn write_blocked_parts(
        &self,
        layer: &CacheLayer,
        blocked: &[BlockId],
        offset_bytes: u64,
        length_bytes: u64,
        mutation: &Mutation,
        fua: bool,
    ) -> Result<(), VolumeError> {
        let smr = layer
            .options
            .smr
            .expect("only an SMR home blocks a write on a band");
        let block_bytes = layer.options.block_bytes;
        let end = offset_bytes + length_bytes;
        let mut index = 0;
        while index < blocked.len() {
            let mut last = index;
            while last + 1 < blocked.len() && blocked[last + 1] == blocked[last] + 1 {
                last += 1;
            }
            let start = (blocked[index] * block_bytes).max(offset_bytes);
            let stop = ((blocked[last] + 1) * block_bytes).min(end);
            index = last + 1;
            let band = smr.band_range(smr.band_of(start), self.options.size_bytes);
            self.help_rewrite(layer, band)?;
            let at = (start - offset_bytes) as usize;
            let part = mutation.slice(
                at,
                if matches!(mutation, Mutation::Write(_)) {
                    (stop - start) as usize
                } else {
                    0
                },
            );
            self.cached_mutate(start, stop - start, &part, fua)?;
        }
        Ok(())
    }

    /// Drives the rewrite of `band` until it ends (a user write waits for
    /// it). When the core hands out nothing for it (a later rewrite of the
    /// band, started after this write was planned, yields to user IO), the
    /// caller plans the part again: that blocks it on the new rewrite,
    /// which then stops yielding.
    fn help_rewrite(&self, layer: &CacheLayer, band: (u64, u64)) -> Result<(), VolumeError> {
        if let CacheStep::Idle | CacheStep::Busy =
            self.drive_destage(layer, Until::BandDone(band))?
        {
            if layer.core.lock().cache.rewriting_band() == Some(band) {
                self.clock.sleep_ns(100_000);
            }
        }
        Ok(())
    }

    /// Takes a rate sample about once a second.
    fn sample_destage_rate(&self, layer: &CacheLayer) {
        let now_ns = self.clock.now_ns();
        let written = layer.destage_counters.written_bytes.load(Ordering::Relaxed);
        let mut samples = layer.destage_counters.samples.lock();
        if samples
            .back()
            .is_some_and(|&(at_ns, _)| now_ns.saturating_sub(at_ns) < RATE_SAMPLE_NS)
        {
            return;
        }
        samples.push_back((now_ns, written));
        while samples.len() > RATE_SAMPLES {
            samples.pop_front();
        }
    }

    /// The SMR part of the cache status (`None` without SMR staging).
    pub(super) fn smr_status(
        &self,
        layer: &CacheLayer,
        core: &super::cache::CacheCore,
    ) -> Option<SmrStatus> {
        let smr = core.cache.smr()?;
        let counters = core.cache.counters();
        let block_bytes = layer.options.block_bytes;
        let written = layer.destage_counters.written_bytes.load(Ordering::Relaxed);
        let rate = {
            let samples = layer.destage_counters.samples.lock();
            match samples.front() {
                Some(&(at_ns, bytes)) => {
                    let elapsed_ns = self.clock.now_ns().saturating_sub(at_ns);
                    if elapsed_ns == 0 {
                        0.0
                    } else {
                        (written - bytes) as f64 * 1e9 / elapsed_ns as f64
                    }
                }
                None => 0.0,
            }
        };
        let home_model = self.tiers[self.home() as usize]
            .device
            .smr_model_stats()
            .map(|stats| SmrModelStatus {
                dirty_bands: stats.dirty_bands,
                media_cache_used_bytes: stats.media_cache_used_bytes,
                bands_cleaned: stats.bands_cleaned,
                media_cache_writes: stats.cache_writes,
                direct_writes: stats.direct_writes,
            });
        Some(SmrStatus {
            band_bytes: smr.band_bytes,
            first_band_offset_bytes: smr.first_band_offset_bytes,
            staged_bytes: core.cache.dirty_blocks() * block_bytes,
            staged_bands: core.cache.dirty_bands().count() as u64,
            rewriting: core
                .cache
                .rewriting_band()
                .map(|(offset_bytes, length_bytes)| BandRange {
                    offset_bytes,
                    length_bytes,
                }),
            band_rewrites: counters.band_rewrites,
            band_rewrite_blocks: counters.band_rewrite_blocks,
            destage_read_bytes: layer.destage_counters.read_bytes.load(Ordering::Relaxed),
            destage_written_bytes: written,
            destage_bytes_per_s: rate,
            blocked_blocks: counters.blocked_blocks,
            unstaged_home_write_blocks: counters.smr_home_writes,
            home_model,
        })
    }

    /// Blocks of `steps` planned `Blocked`, in order.
    pub(super) fn blocked_blocks(steps: &[Step]) -> Vec<BlockId> {
        steps
            .iter()
            .filter(|step| step.io == tierd_core::cache::BlockIo::Blocked)
            .map(|step| step.block)
            .collect()
    }
}
