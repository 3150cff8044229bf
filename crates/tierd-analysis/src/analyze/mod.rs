//! The papers' hot-spot analysis of one volume (`tierd trace analyze`).
//!
//! One streaming pass: requests are split at segment boundaries and counted
//! per (segment, period); each period, when complete, feeds spike runs, spike
//! regions, concentration selection and tracking, and the IO matrix; a FIFO
//! cache sees every 4 KiB page. Exact definitions, with the paper section each
//! one implements: `docs/analysis.md`.

pub mod concentration;
mod render;
pub mod spike;

use std::cmp::Reverse;

use serde::Serialize;
use tierd_common::hash::FastMap;
use tierd_common::units::NS_PER_SECOND;
use tierd_trace::{Op, TraceError, TraceReader, VolumeId};

use crate::matrix::{IoMatrix, MatrixCell, MatrixColumn};
use crate::touch::{is_clamped, touched_units, touched_units_at_least_one, BLOCK_BYTES};
use tierd_policy::cache::fifo::Fifo;
use tierd_policy::cache::{PageCache, MAX_CAPACITY_PAGES};

pub use concentration::{Concentration, PredictionRow};
pub use render::render_text;
pub use spike::{DurationBucket, RegionSummary, SpikeSummary};

use concentration::{select_groups, SegmentIo, Selection, Tracker};
use spike::SpikeTracker;

// The FIFO is fed the analysis's 4 KiB block numbers: the same pages as the
// simulator's page caches.
const _: () = assert!(BLOCK_BYTES == tierd_policy::cache::PAGE_BYTES);

/// Settings of [`analyze`]. Defaults follow the papers (see each field).
#[derive(Clone, Debug, PartialEq)]
pub struct AnalyzeOptions {
    /// Segment ("sub-LUN") size; 000 and 002 use 1 GB. Default 1 GiB.
    pub segment_bytes: u64,
    /// Period; 000 uses 60 s, 002's runtime 24 s. Default 60 s.
    pub period_ns: u64,
    /// LUN size; `None`: the end of the last segment any request touches.
    pub volume_bytes: Option<u64>,
    /// A (segment, period) or (chunk, period) spikes at ≥ this many iops
    /// (000 §3 footnote 2: 1 iops).
    pub spike_iops: f64,
    /// Chunk size of spike regions (000 Table 6 reports down to 0.1 GB). Default 100 MiB.
    pub region_granularity_bytes: u64,
    /// N of 002 §4.2 step 2: segments kept per period. Default 30.
    pub top_n: usize,
    /// M of 002 §4.2 step 4, in percent. Default 60.
    pub share_percent: f64,
    /// When the kept groups hold < M% of a period's IO, select none (true)
    /// or all of them (false, the default: the paper's step 4 runs out of groups).
    pub require_share: bool,
    /// FIFO cache size for `fifo_hit_ratio`; `None`: `top_n × segment_bytes`.
    pub cache_bytes: Option<u64>,
    /// Last A of the prediction table. Default 10.
    pub prediction_max_periods: u64,
    /// Rows of `segment_table` (0: no table). Default 20.
    pub segment_table_rows: usize,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            period_ns: 60 * NS_PER_SECOND,
            volume_bytes: None,
            spike_iops: 1.0,
            region_granularity_bytes: 100 << 20,
            top_n: 30,
            share_percent: 60.0,
            require_share: false,
            cache_bytes: None,
            prediction_max_periods: 10,
            segment_table_rows: 20,
        }
    }
}

impl AnalyzeOptions {
    /// `Err` names the first setting that cannot work and says what it needs.
    /// [`analyze`] itself never fails on settings: it treats a zero size or
    /// period as 1 and `top_n` 0 as 1.
    pub fn validate(&self) -> Result<(), String> {
        if self.segment_bytes == 0 {
            return Err("segment size must be at least 1 byte (the papers use 1 GiB)".into());
        }
        if self.period_ns == 0 {
            return Err("period must be longer than 0 (the papers use 60s or 24s)".into());
        }
        if self.region_granularity_bytes == 0 {
            return Err("spike region granularity must be at least 1 byte (default 100MiB)".into());
        }
        if self.top_n == 0 {
            return Err("top N must be at least 1 segment (the paper uses 20-30)".into());
        }
        if !self.share_percent.is_finite()
            || self.share_percent <= 0.0
            || self.share_percent > 100.0
        {
            return Err(format!(
                "share percent M must be in (0, 100], got {} (the paper uses 50-60)",
                self.share_percent
            ));
        }
        if !self.spike_iops.is_finite() || self.spike_iops < 0.0 {
            return Err(format!(
                "spike iops must be a number ≥ 0, got {}",
                self.spike_iops
            ));
        }
        Ok(())
    }
}

/// The settings an analysis ran with, echoed in its JSON.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    pub segment_bytes: u64,
    pub period_s: f64,
    pub spike_iops: f64,
    pub region_granularity_bytes: u64,
    pub top_n: usize,
    pub share_percent: f64,
    pub require_share: bool,
    pub prediction_max_periods: u64,
}

/// Summary of the IO concentrations (002 Table 1, Fig. 1). JSON keys are the field names.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConcentrationSummary {
    pub count: u64,
    pub ongoing_at_end: u64,
    pub mean_duration_periods: Option<f64>,
    pub mean_duration_s: Option<f64>,
    pub max_duration_periods: Option<u64>,
    pub static_count: u64,
    pub moving_count: u64,
    pub arbitrary_share: Option<f64>,
    /// IO inside concentrations / all IO.
    pub io_share: Option<f64>,
    /// Write IO / IO inside concentrations.
    pub write_ratio: Option<f64>,
    /// Mean group size in segments over (concentration, period) pairs.
    pub mean_segments: Option<f64>,
    /// Mean over periods with concentrations of their segments / all segments.
    pub mean_lun_share: Option<f64>,
    /// Max over periods of the segments in concentrations × segment size.
    pub peak_bytes: u64,
    pub list: Vec<Concentration>,
}

/// One row of the segment table.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SegmentRow {
    pub segment: u64,
    pub offset_bytes: u64,
    pub io: u64,
    pub writes: u64,
    /// io / all IO.
    pub share: f64,
    /// Periods with IO.
    pub active_periods: u64,
    /// Spike cells of this segment.
    pub spike_periods: u64,
}

/// The result of [`analyze`]. JSON keys are the field names; `matrix` is left out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Analysis {
    pub format: String,
    pub settings: Settings,
    /// `time_ns` of the first request (origin of period 0).
    pub start_time_ns: Option<u64>,
    pub requests: u64,
    /// IO counted per segment (a request counts once in every segment it touches).
    pub io: u64,
    pub volume_bytes: u64,
    pub segments: u64,
    pub periods: u64,
    pub write_ratio: Option<f64>,
    pub peak_iops: Option<f64>,
    pub mean_iops: Option<f64>,
    /// OTF-AST Table 3: IO share of the busiest 1% / 10% of segments.
    pub top1_share: Option<f64>,
    pub top10_share: Option<f64>,
    /// k of the 1% / 10% shares.
    pub top1_segments: u64,
    pub top10_segments: u64,
    pub spikes: SpikeSummary,
    pub concentrations: ConcentrationSummary,
    pub prediction_table: Vec<PredictionRow>,
    pub fifo_cache_bytes: u64,
    pub fifo_accesses: u64,
    pub fifo_hits: u64,
    pub fifo_hit_ratio: Option<f64>,
    pub segment_table: Option<Vec<SegmentRow>>,
    pub clamped_requests: u64,
    pub warnings: Vec<String>,
    /// Segment × period IO counts, for heat maps.
    #[serde(skip)]
    pub matrix: IoMatrix,
}

impl std::fmt::Display for Analysis {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&render_text(self))
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct SegmentTotals {
    io: u64,
    writes: u64,
    active_periods: u64,
    spike_periods: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct CellCount {
    io: u64,
    writes: u64,
}

/// The state of one pass.
struct Pass {
    segment_bytes: u64,
    period_ns: u64,
    period_s: f64,
    granularity_bytes: u64,
    spike_iops: f64,
    selection: Selection,
    timed: bool,

    origin_ns: Option<u64>,
    current_period: u64,
    period_cells: FastMap<u64, CellCount>,
    period_chunks: FastMap<u64, u64>,
    period_requests: u64,
    peak_period_requests: u64,

    totals: FastMap<u64, SegmentTotals>,
    requests: u64,
    write_requests: u64,
    io: u64,
    max_segment: Option<u64>,
    first_volume: Option<VolumeId>,
    other_volumes: bool,
    late_requests: u64,
    clamped_requests: u64,

    columns: Vec<MatrixColumn>,
    spikes: SpikeTracker,
    tracker: Tracker,
    /// flashcache's FIFO, the policy crate's (the simulator's `fifo` cache);
    /// hits and misses do not depend on reads vs writes, so every access is
    /// given as a read.
    fifo: Fifo,
    fifo_accesses: u64,
    fifo_hits: u64,

    // Scratch buffers reused every period.
    scratch_cells: Vec<SegmentIo>,
    scratch_chunks: Vec<u64>,
}

impl Pass {
    fn add(&mut self, request: &tierd_trace::Request) {
        let period = if self.timed {
            let origin = *self.origin_ns.get_or_insert(request.time_ns);
            let period = request.time_ns.saturating_sub(origin) / self.period_ns;
            if period < self.current_period || request.time_ns < origin {
                self.late_requests += 1;
            }
            period.max(self.current_period)
        } else {
            self.origin_ns.get_or_insert(request.time_ns);
            0
        };
        if period != self.current_period {
            self.finish_period();
            self.current_period = period;
        }

        self.requests += 1;
        self.period_requests += 1;
        let is_write = request.op == Op::Write;
        if is_write {
            self.write_requests += 1;
        }
        if is_clamped(request) {
            self.clamped_requests += 1;
        }
        match self.first_volume {
            None => self.first_volume = Some(request.volume),
            Some(volume) if volume != request.volume => self.other_volumes = true,
            Some(_) => {}
        }

        let (first, last) = touched_units_at_least_one(request, self.segment_bytes);
        self.max_segment = Some(self.max_segment.map_or(last, |max| max.max(last)));
        for segment in first..=last {
            let cell = self.period_cells.entry(segment).or_default();
            cell.io += 1;
            cell.writes += u64::from(is_write);
            self.io += 1;
        }
        let (first, last) = touched_units_at_least_one(request, self.granularity_bytes);
        for chunk in first..=last {
            *self.period_chunks.entry(chunk).or_default() += 1;
        }
        if let Some((first, last)) = touched_units(request, BLOCK_BYTES) {
            for page in first..=last {
                self.fifo_accesses += 1;
                self.fifo_hits += u64::from(self.fifo.access(page, false).hit);
            }
        }
    }

    /// Whether `io` in one period reaches the spike threshold.
    fn spikes(&self, io: u64) -> bool {
        io > 0 && io as f64 / self.period_s >= self.spike_iops
    }

    fn finish_period(&mut self) {
        if self.period_requests == 0 {
            return;
        }
        let period = self.current_period;
        self.peak_period_requests = self.peak_period_requests.max(self.period_requests);
        self.period_requests = 0;

        // Cells of the period, sorted by segment: totals, spikes, matrix column.
        let mut cells: Vec<MatrixCell> = Vec::with_capacity(self.period_cells.len());
        self.scratch_cells.clear();
        let mut period_cells = std::mem::take(&mut self.period_cells);
        for (segment, count) in period_cells.drain() {
            self.scratch_cells.push(SegmentIo {
                segment,
                io: count.io,
                writes: count.writes,
            });
        }
        self.period_cells = period_cells;
        self.scratch_cells.sort_unstable_by_key(|cell| cell.segment);
        for cell in &self.scratch_cells {
            let spiking = self.spikes(cell.io);
            let totals = self.totals.entry(cell.segment).or_default();
            totals.io += cell.io;
            totals.writes += cell.writes;
            totals.active_periods += 1;
            if spiking {
                totals.spike_periods += 1;
                self.spikes.observe_cell(cell.segment, period, cell.io);
            }
            cells.push(MatrixCell {
                segment: cell.segment,
                io: u32::try_from(cell.io).unwrap_or(u32::MAX),
                writes: u32::try_from(cell.writes).unwrap_or(u32::MAX),
            });
        }
        self.columns.push(MatrixColumn { period, cells });

        // Spike regions.
        self.scratch_chunks.clear();
        let mut period_chunks = std::mem::take(&mut self.period_chunks);
        for (chunk, io) in period_chunks.drain() {
            if self.spikes(io) {
                self.scratch_chunks.push(chunk);
            }
        }
        self.period_chunks = period_chunks;
        self.spikes
            .observe_regions(&mut self.scratch_chunks, self.granularity_bytes);

        // Concentrations.
        let groups = select_groups(&mut self.scratch_cells, &self.selection);
        self.tracker.observe(period, &groups);
    }
}

/// Reads `reader` to the end and analyses it.
///
/// Expects one volume (filter with `OpenOptions::volume`); several volumes are
/// analysed as one address space, with a warning. Never fails on settings
/// (see [`AnalyzeOptions::validate`]); fails only when the reader does.
pub fn analyze(
    reader: &mut dyn TraceReader,
    options: &AnalyzeOptions,
) -> Result<Analysis, TraceError> {
    let segment_bytes = options.segment_bytes.max(1);
    let period_ns = options.period_ns.max(1);
    let period_s = period_ns as f64 / NS_PER_SECOND as f64;
    let top_n = options.top_n.max(1);
    let cache_bytes = options
        .cache_bytes
        .unwrap_or_else(|| (top_n as u64).saturating_mul(segment_bytes));
    let cache_pages = cache_bytes / BLOCK_BYTES;
    let timed = !reader.format().is_block_only();
    let mut pass = Pass {
        segment_bytes,
        period_ns,
        period_s,
        granularity_bytes: options.region_granularity_bytes.max(1),
        spike_iops: options.spike_iops,
        selection: Selection {
            top_n,
            share_percent: options.share_percent,
            require_share: options.require_share,
        },
        timed,
        origin_ns: None,
        current_period: 0,
        period_cells: FastMap::default(),
        period_chunks: FastMap::default(),
        period_requests: 0,
        peak_period_requests: 0,
        totals: FastMap::default(),
        requests: 0,
        write_requests: 0,
        io: 0,
        max_segment: None,
        first_volume: None,
        other_volumes: false,
        late_requests: 0,
        clamped_requests: 0,
        columns: Vec::new(),
        spikes: SpikeTracker::default(),
        tracker: Tracker::default(),
        fifo: Fifo::new(cache_pages.min(MAX_CAPACITY_PAGES)),
        fifo_accesses: 0,
        fifo_hits: 0,
        scratch_cells: Vec::new(),
        scratch_chunks: Vec::new(),
    };
    while let Some(request) = reader.next_request()? {
        pass.add(&request);
    }
    pass.finish_period();

    let mut warnings = Vec::new();
    if !timed && pass.requests > 0 {
        warnings.push(format!(
            "the {} format has no times: every request was put in period 0, so spikes, \
             concentrations and iops describe the whole trace as one period",
            reader.format()
        ));
    }
    if pass.other_volumes {
        warnings.push(format!(
            "the trace holds several volumes ({}); they were analysed as one address space. \
             Pass --volume NAME to analyse one",
            reader.volumes().names().join(", ")
        ));
    }
    if pass.late_requests > 0 {
        warnings.push(format!(
            "{} requests were earlier than a request read before them (unsorted trace); \
             they were counted in the later period",
            pass.late_requests
        ));
    }
    if pass.clamped_requests > 0 {
        warnings.push(format!(
            "{} requests are longer than 1 GiB; only their first 1 GiB was counted in segments, \
             regions and the cache",
            pass.clamped_requests
        ));
    }
    if cache_pages > MAX_CAPACITY_PAGES {
        warnings.push(format!(
            "the FIFO cache of {cache_bytes} bytes is larger than the page caches' maximum of \
             {MAX_CAPACITY_PAGES} pages of {BLOCK_BYTES} bytes; that maximum was simulated \
             (the hit ratio differs only if the trace touches more distinct pages)"
        ));
    }

    let touched_segments = pass.max_segment.map_or(0, |max| max.saturating_add(1));
    let (volume_bytes, segments) = match options.volume_bytes {
        Some(volume_bytes) => {
            let segments = volume_bytes.div_ceil(segment_bytes);
            if touched_segments > segments {
                warnings.push(format!(
                    "requests reach segment {} but the volume size {} bytes has {} segments; \
                     the segments were extended to cover them",
                    touched_segments - 1,
                    volume_bytes,
                    segments
                ));
                (volume_bytes, touched_segments)
            } else {
                (volume_bytes, segments)
            }
        }
        None => (
            touched_segments.saturating_mul(segment_bytes),
            touched_segments,
        ),
    };
    let periods = if pass.requests == 0 {
        0
    } else {
        pass.current_period.saturating_add(1)
    };

    // Top shares (000 Table 3).
    let mut segment_io: Vec<(u64, u64)> = pass
        .totals
        .iter()
        .map(|(segment, totals)| (*segment, totals.io))
        .collect();
    segment_io.sort_unstable_by_key(|(segment, io)| (Reverse(*io), *segment));
    let top_k = |fraction: f64| ((fraction * segments as f64).round() as u64).max(1);
    let share_of_top = |k: u64| {
        (pass.io > 0).then(|| {
            let top: u64 = segment_io
                .iter()
                .take(usize::try_from(k).unwrap_or(usize::MAX))
                .map(|(_, io)| io)
                .sum();
            top as f64 / pass.io as f64
        })
    };
    let top1_segments = top_k(0.01);
    let top10_segments = top_k(0.10);

    let segment_table = (options.segment_table_rows > 0).then(|| {
        segment_io
            .iter()
            .take(options.segment_table_rows)
            .map(|(segment, _)| {
                let totals = pass.totals[segment];
                SegmentRow {
                    segment: *segment,
                    offset_bytes: segment.saturating_mul(segment_bytes),
                    io: totals.io,
                    writes: totals.writes,
                    share: if pass.io > 0 {
                        totals.io as f64 / pass.io as f64
                    } else {
                        0.0
                    },
                    active_periods: totals.active_periods,
                    spike_periods: totals.spike_periods,
                }
            })
            .collect()
    });

    // Concentrations (002 Table 1) and the prediction table (Table 2).
    let last_period = (periods > 0).then(|| periods - 1);
    let tracked = pass.tracker.finish(last_period);
    let count = tracked.records.len() as u64;
    let ratio = |numerator: u64, denominator: u64| {
        (denominator > 0).then(|| numerator as f64 / denominator as f64)
    };
    let duration_sum: u64 = tracked.records.iter().map(|record| record.periods).sum();
    let mean_duration_periods = ratio(duration_sum, count);
    let ended: Vec<u64> = tracked
        .records
        .iter()
        .filter(|record| !record.ongoing)
        .map(|record| record.periods)
        .collect();
    let prediction_table =
        concentration::prediction_table(&ended, options.prediction_max_periods, period_s);
    let concentrations = ConcentrationSummary {
        count,
        ongoing_at_end: count - ended.len() as u64,
        mean_duration_periods,
        mean_duration_s: mean_duration_periods.map(|periods| periods * period_s),
        max_duration_periods: tracked.records.iter().map(|record| record.periods).max(),
        static_count: tracked
            .records
            .iter()
            .filter(|record| !record.moving)
            .count() as u64,
        moving_count: tracked
            .records
            .iter()
            .filter(|record| record.moving)
            .count() as u64,
        arbitrary_share: ratio(
            tracked
                .records
                .iter()
                .filter(|record| record.arbitrary)
                .count() as u64,
            count,
        ),
        io_share: ratio(tracked.io, pass.io),
        write_ratio: ratio(tracked.writes, tracked.io),
        mean_segments: ratio(tracked.group_segments, tracked.group_periods),
        mean_lun_share: (tracked.periods_with_concentrations > 0 && segments > 0).then(|| {
            tracked.footprint_segments_sum as f64
                / (tracked.periods_with_concentrations as f64 * segments as f64)
        }),
        peak_bytes: tracked
            .footprint_segments_peak
            .saturating_mul(segment_bytes),
        list: tracked.records,
    };

    let matrix = IoMatrix {
        segments,
        periods,
        segment_bytes,
        period_ns,
        columns: pass.columns,
    };

    Ok(Analysis {
        format: reader.format().name().to_string(),
        settings: Settings {
            segment_bytes,
            period_s,
            spike_iops: options.spike_iops,
            region_granularity_bytes: pass.granularity_bytes,
            top_n,
            share_percent: options.share_percent,
            require_share: options.require_share,
            prediction_max_periods: options.prediction_max_periods,
        },
        start_time_ns: pass.origin_ns,
        requests: pass.requests,
        io: pass.io,
        volume_bytes,
        segments,
        periods,
        write_ratio: ratio(pass.write_requests, pass.requests),
        peak_iops: (timed && pass.requests > 0)
            .then(|| pass.peak_period_requests as f64 / period_s),
        mean_iops: (timed && periods > 0)
            .then(|| pass.requests as f64 / (periods as f64 * period_s)),
        top1_share: share_of_top(top1_segments),
        top10_share: share_of_top(top10_segments),
        top1_segments,
        top10_segments,
        spikes: pass.spikes.finish(period_s),
        concentrations,
        prediction_table,
        fifo_cache_bytes: cache_bytes,
        fifo_accesses: pass.fifo_accesses,
        fifo_hits: pass.fifo_hits,
        fifo_hit_ratio: ratio(pass.fifo_hits, pass.fifo_accesses),
        segment_table,
        clamped_requests: pass.clamped_requests,
        warnings,
        matrix,
    })
}
