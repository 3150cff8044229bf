//! Drive-managed SMR model (see `docs/devices/smr.md`).
//!
//! The mechanics are the HDD's ([`Mechanics`]: zoned geometry, fitted seek
//! curve, rotational position from time), with a shingled translation layer
//! in front:
//!
//! - the platters hold a persistent **media cache** of `media_cache_bytes`
//!   at the outer diameter (physical offset 0), then the logical space cut
//!   into **bands** of `band_bytes` (whole tracks: no multiple of 1 MiB);
//! - a write that starts at a band's first byte opens a **band-fill
//!   stream**; writes that continue an open stream go straight to the band
//!   (a whole band written in order replaces it, dropping anything the cache
//!   held for it). A direct write stops at its band's end: the part past it
//!   goes to the media cache and the stream goes on in the next band, which
//!   then needs a read-modify-write for its first bytes. A stream pushed out
//!   by newer ones before its band is full leaves the band needing one too;
//! - every other write is appended to the media cache (a log: the head writes
//!   where it lands on the log's track, no rotational wait) and marks the
//!   bands it touches dirty;
//! - a read of a dirty band's dirty range also reads the fragments from the
//!   media cache (a second positioning);
//! - **cleaning** rewrites one dirty band at a time, oldest first: read its
//!   cached fragments, read the band, write the band back (~0.5 s for 30 MB).
//!   A cleaning step cannot be interrupted: IOs arriving meanwhile wait. Steps
//!   start (a) back to back once the host has been idle for
//!   `idle_clean_delay_ms`, (b) under load, before the next host command
//!   once `busy_clean_spacing_ms` has passed since the previous step ended
//!   and the last write burst has drained, unless the host's last command
//!   was sequential or a write, and (c) whenever a write needs room in a
//!   full media cache.
//!
//! Rule (b) is what paper 001 shows: its reads ran back to back with no idle
//! time, yet after random writes 15% of random reads took over 100 ms, while
//! sequential reads were not slowed. The **write burst** is a count of the
//! bytes host writes put in the media cache that drains at
//! `write_burst_decay_mb_s`: after a burst faster than that, cleaning under
//! load starts later the more was written (paper 001: the burst of slow reads
//! starts at a time that depends on the amount written). The queue is FIFO
//! (the paper's benchmark ran at QD1).

use std::collections::VecDeque;

use tierd_common::hash::FastMap;
use tierd_common::op::Op;

use super::hdd::{
    build_mechanics, clamp_io, count_completion, ms_to_ns, non_negative, ns_per_byte, positive,
    settings, validate_platters, validate_seek, CommandTiming, ConfigError, Location, Mechanics,
    Pending, SeekFigures, SegmentCache,
};
use super::{Completion, DeviceCounters, DeviceIo, DeviceModel, DevicePreset};

settings! {
    /// Every parameter of a drive-managed SMR model. Times in milliseconds,
    /// rates in decimal MB/s.
    config SmrConfig;
    /// A partial [`SmrConfig`] for a tier file's `[tier.model]`.
    overrides SmrOverrides;
    {
        name: String,
        /// Logical (addressable) bytes.
        capacity_bytes: u64,
        rpm: f64,
        heads: u32,
        /// Tracks per surface, media cache included.
        cylinders: u32,
        zones: u32,
        outer_rate_mb_s: f64,
        inner_rate_mb_s: f64,
        read_seek: SeekFigures,
        write_seek: SeekFigures,
        track_switch_ms: f64,
        overhead_ms: f64,
        cache_hit_overhead_ms: f64,
        interface_rate_mb_s: f64,
        cache_segments: u32,
        segment_bytes: u64,
        sequential_prefetch_bytes: u64,
        /// Persistent media cache at the outer diameter.
        media_cache_bytes: u64,
        band_bytes: u64,
        /// Band-fill streams tracked at once.
        sequential_streams: u32,
        /// Host idle time after which cleaning runs back to back.
        idle_clean_delay_ms: f64,
        /// Under load, least time between the end of one cleaning step and
        /// the start of the next.
        busy_clean_spacing_ms: f64,
        /// Fixed cost of one band clean on top of its reads and writes.
        clean_overhead_ms: f64,
        /// Rate at which the drive forgets a write burst: every byte a host
        /// write puts in the media cache adds to a count that drains at this
        /// rate, and cleaning under load waits until the count is empty.
        write_burst_decay_mb_s: f64,
    }
}

impl SmrConfig {
    /// The preset's parameters, or `None` if `preset` is not an SMR disk.
    pub fn preset(preset: DevicePreset) -> Option<SmrConfig> {
        match preset {
            DevicePreset::Archive8tb => Some(Self::archive_8tb()),
            _ => None,
        }
    }

    /// Seagate Archive 8 TB ST8000AS0002: 5,980 rpm, 190 MB/s outer,
    /// 25 GiB media cache, bands of 16 outer tracks (30.2 MB, no multiple
    /// of 1 MiB).
    pub fn archive_8tb() -> SmrConfig {
        let capacity_bytes = 8_001_563_222_016;
        let media_cache_bytes = 25 << 30;
        let heads = 12;
        let (outer, inner) = (190.0, 110.0);
        let track_bytes = (outer + inner) / 2.0 * 1e6 * 60.0 / 5_980.0;
        let cylinders = ((capacity_bytes + media_cache_bytes) as f64
            / (f64::from(heads) * track_bytes))
            .ceil() as u32;
        SmrConfig {
            name: "archive8tb".to_string(),
            capacity_bytes,
            rpm: 5_980.0,
            heads,
            cylinders,
            zones: 24,
            outer_rate_mb_s: outer,
            inner_rate_mb_s: inner,
            read_seek: SeekFigures {
                track_to_track_ms: 0.5,
                average_ms: 8.5,
                full_stroke_ms: 17.0,
            },
            write_seek: SeekFigures {
                track_to_track_ms: 0.8,
                average_ms: 9.5,
                full_stroke_ms: 18.0,
            },
            track_switch_ms: 0.5,
            overhead_ms: 0.2,
            cache_hit_overhead_ms: 0.05,
            interface_rate_mb_s: 600.0,
            cache_segments: 16,
            segment_bytes: 4 << 20,
            sequential_prefetch_bytes: 256 << 10,
            media_cache_bytes,
            // 16 tracks of the outermost zone (1,889,792 bytes each): a band
            // is whole tracks, so its boundaries fall inside 1 MiB writes.
            band_bytes: 16 * 1_889_792,
            sequential_streams: 4,
            idle_clean_delay_ms: 1_000.0,
            busy_clean_spacing_ms: 100.0,
            clean_overhead_ms: 20.0,
            write_burst_decay_mb_s: 100.0,
        }
    }

    /// Checks every value; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let device = self.name.as_str();
        for (key, value) in [
            ("capacity_bytes", self.capacity_bytes),
            ("media_cache_bytes", self.media_cache_bytes),
            ("band_bytes", self.band_bytes),
        ] {
            if value == 0 {
                return Err(ConfigError::new(device, key, "must be above zero"));
            }
        }
        positive(device, "rpm", self.rpm)?;
        if self.heads == 0 {
            return Err(ConfigError::new(device, "heads", "must be above zero"));
        }
        if self.cylinders < 3 {
            return Err(ConfigError::new(device, "cylinders", "at least 3"));
        }
        if self.zones == 0 {
            return Err(ConfigError::new(device, "zones", "must be above zero"));
        }
        positive(device, "outer_rate_mb_s", self.outer_rate_mb_s)?;
        positive(device, "inner_rate_mb_s", self.inner_rate_mb_s)?;
        validate_platters(
            device,
            self.heads,
            self.cylinders,
            self.rpm,
            self.outer_rate_mb_s,
            self.inner_rate_mb_s,
        )?;
        validate_seek(device, "read_seek", &self.read_seek)?;
        validate_seek(device, "write_seek", &self.write_seek)?;
        for (key, value) in [
            ("track_switch_ms", self.track_switch_ms),
            ("overhead_ms", self.overhead_ms),
            ("cache_hit_overhead_ms", self.cache_hit_overhead_ms),
            ("idle_clean_delay_ms", self.idle_clean_delay_ms),
            ("busy_clean_spacing_ms", self.busy_clean_spacing_ms),
            ("clean_overhead_ms", self.clean_overhead_ms),
        ] {
            non_negative(device, key, value)?;
        }
        positive(device, "interface_rate_mb_s", self.interface_rate_mb_s)?;
        positive(
            device,
            "write_burst_decay_mb_s",
            self.write_burst_decay_mb_s,
        )?;
        if self.sequential_streams == 0 || self.sequential_streams > 64 {
            return Err(ConfigError::new(device, "sequential_streams", "1 to 64"));
        }
        if self.cache_segments > 1024 {
            return Err(ConfigError::new(device, "cache_segments", "0 to 1024"));
        }
        Ok(())
    }
}

/// What the media cache holds for one dirty band.
#[derive(Clone, Copy, Debug)]
struct BandState {
    /// Bytes appended to the media cache for this band.
    cache_bytes: u64,
    /// Logical range that differs from the band on the platter.
    low: u64,
    high: u64,
    /// Physical offset of the band's latest fragment in the media cache.
    cache_position: u64,
}

/// An open band-fill stream.
#[derive(Clone, Copy, Debug)]
struct FillStream {
    /// Next logical byte the stream expects.
    next_byte: u64,
    /// The stream wrote the band holding `next_byte` from its first byte
    /// (false once a command's spill past a band's end went to the media
    /// cache: that band's first bytes are not on the platter).
    band_from_start: bool,
    last_use: u64,
}

#[derive(Clone, Copy, Debug)]
enum Job {
    Host(Pending),
    Clean,
}

#[derive(Clone, Copy, Debug)]
struct Service {
    job: Job,
    start_ns: u64,
    done_ns: u64,
    free_ns: u64,
    reported: bool,
}

/// Where a write goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// Continues open stream `index`.
    Continue(usize),
    /// Starts a band: opens a stream.
    Open,
    MediaCache,
}

/// Shingled-translation-layer activity, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmrStats {
    /// Bands currently needing a clean.
    pub dirty_bands: u64,
    /// Bytes currently held in the media cache.
    pub media_cache_used_bytes: u64,
    pub bands_cleaned: u64,
    /// Time spent cleaning.
    pub clean_ns_total: u64,
    /// Host writes appended to the media cache / written straight to bands.
    pub cache_writes: u64,
    pub direct_writes: u64,
    /// Direct writes that ran past their band's end: the part past it went
    /// to the media cache (counted in `direct_writes` only).
    pub split_writes: u64,
    /// Host reads that also read fragments from the media cache.
    pub fragmented_reads: u64,
}

/// A read slower than this is slow (paper 001 counts reads over 100 ms).
pub const SLOW_READ_MS: f64 = 100.0;

/// The burst of slow reads after a write load (paper 001 Fig. 7), as the
/// probe and the validation tests measure it. `reads` holds each read's
/// time in seconds after the writes ended (when it was issued) and its
/// latency in milliseconds, in any order. Returns `(start_s, length_s)`:
/// the time of the first read slower than [`SLOW_READ_MS`], and the time
/// from it to the last such read (0 for a single slow read); `None` when no
/// read was slow. Reads whose time or latency is not a number are ignored.
pub fn burst(reads: &[(f64, f64)]) -> Option<(f64, f64)> {
    let mut first_s = f64::INFINITY;
    let mut last_s = f64::NEG_INFINITY;
    for &(time_s, latency_ms) in reads {
        if latency_ms > SLOW_READ_MS && time_s.is_finite() {
            first_s = first_s.min(time_s);
            last_s = last_s.max(time_s);
        }
    }
    (first_s <= last_s).then_some((first_s, last_s - first_s))
}

/// An event-driven drive-managed SMR disk (see the module docs).
#[derive(Clone, Debug)]
pub struct Smr {
    name: String,
    capacity_bytes: u64,
    mechanics: Mechanics,
    cache: SegmentCache,
    queue: VecDeque<Pending>,
    service: Option<Service>,
    finished: Vec<Completion>,
    counters: DeviceCounters,
    clock_ns: u64,
    sequence: u64,
    timing: CommandTiming,
    sequential_prefetch_bytes: u64,
    media_cache_bytes: u64,
    band_bytes: u64,
    bands: FastMap<u64, BandState>,
    clean_order: VecDeque<u64>,
    log_head_byte: u64,
    streams: Vec<Option<FillStream>>,
    stream_uses: u64,
    idle_clean_delay_ns: u64,
    busy_clean_spacing_ns: u64,
    clean_overhead_ns: u64,
    /// Nanoseconds the write-burst count takes to drain one byte.
    burst_decay_ns_per_byte: f64,
    /// When the write-burst count is empty (cleaning under load may start).
    burst_clear_ns: u64,
    /// When the host last had nothing outstanding.
    quiet_since_ns: u64,
    last_clean_end_ns: u64,
    /// When the drive last finished a job (host IO or cleaning step).
    free_since_ns: u64,
    /// The last host command read or wrote sequentially.
    sequential_host: bool,
    /// The last host command was a write.
    writing_host: bool,
    stats: SmrStats,
}

impl Smr {
    /// A model from `config`; `seed` sets the spindle phase at time 0.
    pub fn new(config: &SmrConfig, seed: u64) -> Result<Smr, ConfigError> {
        config.validate()?;
        let mechanics = build_mechanics(
            config.capacity_bytes + config.media_cache_bytes,
            config.rpm,
            config.heads,
            config.cylinders,
            config.zones,
            config.outer_rate_mb_s,
            config.inner_rate_mb_s,
            &config.read_seek,
            &config.write_seek,
            config.track_switch_ms,
            seed,
        );
        Ok(Smr {
            name: config.name.clone(),
            capacity_bytes: config.capacity_bytes,
            mechanics,
            cache: SegmentCache::new(
                config.cache_segments,
                config.segment_bytes,
                config.capacity_bytes,
            ),
            queue: VecDeque::with_capacity(64),
            service: None,
            finished: Vec::with_capacity(64),
            counters: DeviceCounters::default(),
            clock_ns: 0,
            sequence: 0,
            timing: CommandTiming {
                overhead_ns: ms_to_ns(config.overhead_ms) as u64,
                hit_overhead_ns: ms_to_ns(config.cache_hit_overhead_ms) as u64,
                interface_ns_per_byte: ns_per_byte(config.interface_rate_mb_s),
            },
            sequential_prefetch_bytes: config.sequential_prefetch_bytes,
            media_cache_bytes: config.media_cache_bytes,
            band_bytes: config.band_bytes,
            bands: FastMap::default(),
            clean_order: VecDeque::new(),
            log_head_byte: 0,
            streams: vec![None; config.sequential_streams as usize],
            stream_uses: 0,
            idle_clean_delay_ns: ms_to_ns(config.idle_clean_delay_ms) as u64,
            busy_clean_spacing_ns: ms_to_ns(config.busy_clean_spacing_ms) as u64,
            clean_overhead_ns: ms_to_ns(config.clean_overhead_ms) as u64,
            burst_decay_ns_per_byte: ns_per_byte(config.write_burst_decay_mb_s),
            burst_clear_ns: 0,
            quiet_since_ns: 0,
            last_clean_end_ns: 0,
            free_since_ns: 0,
            sequential_host: false,
            writing_host: false,
            stats: SmrStats::default(),
        })
    }

    /// The preset's model at its own capacity.
    pub fn preset(preset: DevicePreset, seed: u64) -> Option<Smr> {
        SmrConfig::preset(preset).and_then(|config| Smr::new(&config, seed).ok())
    }

    /// Translation-layer counters.
    pub fn stats(&self) -> SmrStats {
        SmrStats {
            dirty_bands: self.bands.len() as u64,
            ..self.stats
        }
    }

    pub fn mechanics(&self) -> &Mechanics {
        &self.mechanics
    }

    fn physical(&self, logical: u64) -> u64 {
        self.media_cache_bytes + logical
    }

    fn route(&self, offset: u64) -> Route {
        for (index, stream) in self.streams.iter().enumerate() {
            if stream.is_some_and(|stream| stream.next_byte == offset) {
                return Route::Continue(index);
            }
        }
        if offset.is_multiple_of(self.band_bytes) {
            Route::Open
        } else {
            Route::MediaCache
        }
    }

    /// The bytes a host write of `[offset, offset + length)` puts in the
    /// media cache: all of it, or, for a band-fill write, the part past the
    /// end of the band it starts in.
    fn cached_bytes(&self, offset: u64, length: u64) -> u64 {
        match self.route(offset) {
            Route::MediaCache => length,
            Route::Continue(_) | Route::Open => {
                let band_end = (offset / self.band_bytes + 1) * self.band_bytes;
                (offset + length).saturating_sub(band_end)
            }
        }
    }

    fn processing_time(&self) -> Option<u64> {
        self.service.map(|service| {
            if service.reported {
                service.free_ns
            } else {
                service.done_ns
            }
        })
    }

    fn run_until(&mut self, now_ns: u64) {
        loop {
            match self.processing_time() {
                Some(time) if time <= now_ns => self.service_event(),
                Some(_) => break,
                None => match self.idle_wakeup_ns() {
                    Some(time) if time <= now_ns => {
                        self.try_start(time);
                        if self.service.is_none() {
                            break;
                        }
                    }
                    _ => break,
                },
            }
        }
        self.clock_ns = self.clock_ns.max(now_ns);
    }

    /// With nothing in service and nothing queued: when cleaning starts.
    fn idle_wakeup_ns(&self) -> Option<u64> {
        if self.service.is_some() || !self.queue.is_empty() || self.bands.is_empty() {
            return None;
        }
        let idle = self.quiet_since_ns + self.idle_clean_delay_ns;
        let wakeup = match self.busy_clean_from_ns() {
            Some(busy) => idle.min(busy),
            None => idle,
        };
        Some(wakeup.max(self.free_since_ns))
    }

    /// Rule (b): from when a cleaning step may start before the next host
    /// command; `None` while the last host command was sequential or a
    /// write (the drive does not clean into a stream or a write burst).
    fn busy_clean_from_ns(&self) -> Option<u64> {
        if self.sequential_host || self.writing_host {
            return None;
        }
        Some((self.last_clean_end_ns + self.busy_clean_spacing_ns).max(self.burst_clear_ns))
    }

    fn service_event(&mut self) {
        let Some(mut service) = self.service else {
            return;
        };
        if !service.reported {
            service.reported = true;
            if let Job::Host(pending) = service.job {
                let completion = Completion {
                    id: pending.io.id,
                    arrival_ns: pending.arrival_ns,
                    start_ns: service.start_ns,
                    done_ns: service.done_ns,
                    background: pending.io.background,
                    op: pending.io.op,
                    length_bytes: pending.io.length_bytes,
                };
                count_completion(
                    &mut self.counters,
                    pending.io.op,
                    pending.io.length_bytes,
                    &completion,
                );
                self.finished.push(completion);
                if self.queue.is_empty() {
                    self.quiet_since_ns = service.done_ns;
                }
            }
            self.service = Some(service);
            return;
        }
        self.counters.busy_ns += service.free_ns - service.start_ns;
        self.service = None;
        self.free_since_ns = service.free_ns;
        if matches!(service.job, Job::Clean) {
            self.last_clean_end_ns = service.free_ns;
        }
        self.try_start(service.free_ns);
    }

    /// Decides what the drive does next at `now_ns` when it is free.
    fn try_start(&mut self, now_ns: u64) {
        if self.service.is_some() {
            return;
        }
        if !self.bands.is_empty() {
            let spacing_passed = self
                .busy_clean_from_ns()
                .is_some_and(|from_ns| now_ns >= from_ns);
            let idle_long =
                self.queue.is_empty() && now_ns >= self.quiet_since_ns + self.idle_clean_delay_ns;
            let cache_full = self.queue.front().is_some_and(|front| {
                let cached = self.cached_bytes(front.io.offset_bytes, front.io.length_bytes);
                front.io.op == Op::Write
                    && cached > 0
                    && self.stats.media_cache_used_bytes + cached > self.media_cache_bytes
            });
            if spacing_passed || idle_long || cache_full {
                self.clean(now_ns);
                return;
            }
        }
        if let Some(pending) = self.queue.pop_front() {
            self.serve(pending, now_ns);
        }
    }

    /// Cleans the oldest dirty band, starting at `now_ns`.
    fn clean(&mut self, now_ns: u64) {
        let band = loop {
            match self.clean_order.pop_front() {
                Some(band) if self.bands.contains_key(&band) => break band,
                Some(_) => continue,
                None => return,
            }
        };
        let Some(state) = self.bands.remove(&band) else {
            return;
        };
        let mut time = (now_ns + self.clean_overhead_ns) as f64;
        self.cache.stop_stream(time);
        if state.cache_bytes > 0 {
            let fragment = state.cache_bytes.min(self.band_bytes);
            time = self
                .mechanics
                .access(time, state.cache_position, fragment, Op::Read);
        }
        let band_start = band * self.band_bytes;
        let band_length = self.band_bytes.min(self.capacity_bytes - band_start);
        let physical = self.physical(band_start);
        time = self.mechanics.access(time, physical, band_length, Op::Read);
        time = self
            .mechanics
            .access(time, physical, band_length, Op::Write);
        self.stats.media_cache_used_bytes = self
            .stats
            .media_cache_used_bytes
            .saturating_sub(state.cache_bytes);
        let end = (time.ceil() as u64).max(now_ns);
        self.stats.bands_cleaned += 1;
        self.stats.clean_ns_total += end - now_ns;
        self.service = Some(Service {
            job: Job::Clean,
            start_ns: now_ns,
            done_ns: end,
            free_ns: end,
            reported: false,
        });
    }

    fn serve(&mut self, pending: Pending, now_ns: u64) {
        let (done, free) = match pending.io.op {
            Op::Read => self.serve_read(&pending, now_ns),
            Op::Write => self.serve_write(&pending, now_ns),
        };
        let done_ns = (done.ceil() as u64).max(now_ns);
        self.service = Some(Service {
            job: Job::Host(pending),
            start_ns: now_ns,
            done_ns,
            free_ns: (free.ceil() as u64).max(done_ns),
            reported: false,
        });
    }

    fn serve_read(&mut self, pending: &Pending, now_ns: u64) -> (f64, f64) {
        let io = pending.io;
        let now = now_ns as f64;
        let check = now.max((pending.arrival_ns + self.timing.hit_overhead_ns) as f64);
        self.writing_host = false;
        if let Some((segment, ready)) = self.cache.lookup(check, io.offset_bytes, io.length_bytes) {
            self.cache
                .note_hit(segment, io.offset_bytes, io.length_bytes);
            self.sequential_host = true;
            let done =
                (check + io.length_bytes as f64 * self.timing.interface_ns_per_byte).max(ready);
            return (done, done);
        }
        let ready = now.max((pending.arrival_ns + self.timing.overhead_ns) as f64);
        let sequential = self.cache.follows(io.offset_bytes).is_some();
        self.sequential_host = sequential;
        self.cache.stop_stream(ready);
        let physical = self.physical(io.offset_bytes);
        let location: Location = self.mechanics.geometry.locate(physical);
        let mut end = self
            .mechanics
            .access(ready, physical, io.length_bytes, Op::Read);
        let mut fragmented = false;
        if io.length_bytes > 0 {
            let end_byte = io.offset_bytes + io.length_bytes;
            let first_band = io.offset_bytes / self.band_bytes;
            let last_band = (end_byte - 1) / self.band_bytes;
            for band in first_band..=last_band {
                if let Some(state) = self.bands.get(&band).copied() {
                    if state.low < end_byte && io.offset_bytes < state.high && state.cache_bytes > 0
                    {
                        let fragment = state.cache_bytes.min(io.length_bytes);
                        end = self
                            .mechanics
                            .access(end, state.cache_position, fragment, Op::Read);
                        fragmented = true;
                    }
                }
            }
        }
        if fragmented {
            // The head ended in the media cache: no read-ahead, but the
            // buffer holds what was read, so a read continuing it is still
            // sequential.
            self.stats.fragmented_reads += 1;
            let rate = self.mechanics.geometry.streaming_ns_per_byte(&location);
            self.cache
                .start_stream(end, io.offset_bytes, io.length_bytes, rate);
            self.cache.stop_stream(end);
            return (end, end);
        }
        let mut free = end;
        if io.length_bytes > 0 {
            let rate = self.mechanics.geometry.streaming_ns_per_byte(&location);
            self.cache
                .start_stream(end, io.offset_bytes, io.length_bytes, rate);
            if sequential {
                let bytes = self
                    .sequential_prefetch_bytes
                    .min(self.capacity_bytes - (io.offset_bytes + io.length_bytes));
                free = end + bytes as f64 * rate;
            }
        }
        (end, free)
    }

    fn serve_write(&mut self, pending: &Pending, now_ns: u64) -> (f64, f64) {
        let io = pending.io;
        let ready = (now_ns as f64).max((pending.arrival_ns + self.timing.overhead_ns) as f64);
        self.cache
            .invalidate(ready, io.offset_bytes, io.length_bytes);
        self.cache.stop_stream(ready);
        let route = self.route(io.offset_bytes);
        self.sequential_host = route != Route::MediaCache;
        self.writing_host = true;
        self.stream_uses += 1;
        let end = match route {
            Route::Continue(index) => self.write_direct(index, &io, ready),
            Route::Open => {
                let index = self.open_stream();
                self.write_direct(index, &io, ready)
            }
            Route::MediaCache => {
                self.stats.cache_writes += 1;
                self.write_to_media_cache(io.offset_bytes, io.length_bytes, ready)
            }
        };
        (end, end)
    }

    /// A free stream slot, or the least recently used one; a stream pushed
    /// out in the middle of its band leaves the band's rest to repair.
    fn open_stream(&mut self) -> usize {
        let index = self
            .streams
            .iter()
            .position(Option::is_none)
            .unwrap_or_else(|| {
                self.streams
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, stream)| stream.map_or(0, |stream| stream.last_use))
                    .map_or(0, |(index, _)| index)
            });
        if let Some(stream) = self.streams[index].take() {
            if !stream.next_byte.is_multiple_of(self.band_bytes)
                && stream.next_byte < self.capacity_bytes
            {
                let band = stream.next_byte / self.band_bytes;
                let band_end = ((band + 1) * self.band_bytes).min(self.capacity_bytes);
                let position = self.log_head_byte;
                self.mark_dirty(band, stream.next_byte, band_end, 0, position);
            }
        }
        index
    }

    /// Writes `io` through stream `index`: straight to the band it starts
    /// in, up to that band's end; the part past the end (the write crossed a
    /// band boundary) goes to the media cache, and the stream goes on in
    /// the next band from where the write ended.
    fn write_direct(&mut self, index: usize, io: &DeviceIo, ready: f64) -> f64 {
        self.stats.direct_writes += 1;
        let band = io.offset_bytes / self.band_bytes;
        let band_end = ((band + 1) * self.band_bytes).min(self.capacity_bytes);
        let write_end = io.offset_bytes + io.length_bytes;
        let direct_end = write_end.min(band_end);
        let from_start = io.offset_bytes.is_multiple_of(self.band_bytes)
            || self.streams[index].is_some_and(|stream| stream.band_from_start);
        let physical = self.physical(io.offset_bytes);
        let mut end =
            self.mechanics
                .access(ready, physical, direct_end - io.offset_bytes, Op::Write);
        if direct_end == band_end && from_start {
            // Written from its first byte to its last: the band is replaced.
            if let Some(state) = self.bands.remove(&band) {
                self.stats.media_cache_used_bytes = self
                    .stats
                    .media_cache_used_bytes
                    .saturating_sub(state.cache_bytes);
            }
        }
        let spill = write_end - direct_end;
        if spill > 0 {
            self.stats.split_writes += 1;
            end = self.write_to_media_cache(direct_end, spill, end);
        }
        self.streams[index] = Some(FillStream {
            next_byte: write_end,
            band_from_start: write_end.is_multiple_of(self.band_bytes)
                || (spill == 0 && from_start),
            last_use: self.stream_uses,
        });
        end
    }

    /// Appends `[offset, offset + length)` to the media cache log, starting
    /// at `ready`; returns when the write ends.
    fn write_to_media_cache(&mut self, offset: u64, length: u64, ready: f64) -> f64 {
        let position = self.log_head_byte;
        let location = self.mechanics.geometry.locate(position);
        // The log is written wherever the head lands: seek, no rotation.
        let end = ready
            + self.mechanics.seek_ns(&location, Op::Write)
            + self.mechanics.geometry.transfer_ns(&location, length);
        self.mechanics.park_after(&location, position, length);
        self.log_head_byte = (position + length) % self.media_cache_bytes;
        self.stats.media_cache_used_bytes += length;
        // The write burst the drive lets drain before cleaning under load.
        let burst_ns = (length as f64 * self.burst_decay_ns_per_byte) as u64;
        self.burst_clear_ns = self.burst_clear_ns.max(ready as u64) + burst_ns;
        if length > 0 {
            let end_byte = offset + length;
            let first_band = offset / self.band_bytes;
            let last_band = (end_byte - 1) / self.band_bytes;
            for band in first_band..=last_band {
                let low = offset.max(band * self.band_bytes);
                let high = end_byte.min((band + 1) * self.band_bytes);
                self.mark_dirty(band, low, high, high - low, position);
            }
        }
        end
    }

    fn mark_dirty(&mut self, band: u64, low: u64, high: u64, cache_bytes: u64, position: u64) {
        let clean_order = &mut self.clean_order;
        let state = self.bands.entry(band).or_insert_with(|| {
            clean_order.push_back(band);
            BandState {
                cache_bytes: 0,
                low,
                high,
                cache_position: position,
            }
        });
        state.cache_bytes += cache_bytes;
        state.low = state.low.min(low);
        state.high = state.high.max(high);
        if cache_bytes > 0 {
            state.cache_position = position;
        }
    }
}

impl DeviceModel for Smr {
    fn name(&self) -> &str {
        &self.name
    }

    fn smr_stats(&self) -> Option<SmrStats> {
        Some(self.stats())
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn submit(&mut self, now_ns: u64, io: DeviceIo) {
        self.run_until(now_ns);
        let io = clamp_io(io, self.capacity_bytes);
        self.sequence += 1;
        self.queue.push_back(Pending::new(
            io,
            now_ns,
            self.sequence,
            Location::default(),
            &self.timing,
        ));
        self.try_start(now_ns);
    }

    fn next_event_ns(&self) -> Option<u64> {
        if let Some(first) = self.finished.first() {
            return Some(first.done_ns);
        }
        self.processing_time().or_else(|| self.idle_wakeup_ns())
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>) {
        self.run_until(now_ns);
        done.append(&mut self.finished);
    }

    fn outstanding(&self) -> usize {
        let in_service = self
            .service
            .filter(|service| !service.reported && matches!(service.job, Job::Host(_)))
            .map_or(0, |_| 1);
        self.queue.len() + in_service + self.finished.len()
    }

    fn counters(&self) -> DeviceCounters {
        let mut counters = self.counters;
        if let Some(service) = self.service {
            if self.clock_ns > service.start_ns {
                counters.busy_ns += self.clock_ns.min(service.free_ns) - service.start_ns;
            }
        }
        counters
    }
}

#[cfg(test)]
mod tests {
    use super::burst;

    #[test]
    fn burst_runs_from_the_first_slow_read_to_the_last() {
        assert_eq!(burst(&[]), None);
        assert_eq!(burst(&[(0.0, 20.0), (1.0, 100.0), (2.0, 99.0)]), None);
        // Out of order, with fast reads before, inside and after the burst.
        let reads = [
            (9.0, 30.0),
            (5.5, 480.0),
            (0.5, 21.0),
            (3.0, 101.0),
            (4.0, 25.0),
            (7.0, f64::NAN),
            (f64::NAN, 900.0),
        ];
        assert_eq!(burst(&reads), Some((3.0, 2.5)));
        assert_eq!(burst(&[(2.0, 150.0)]), Some((2.0, 0.0)));
    }
}
