//! `tierd model fit`: the SMR model's parameters from a probe's fit phases,
//! as Skylight (Aghayev et al., FAST 2015) reads them from latency
//! (docs/probe.md, "Fitting a model"). Pure: phases in, numbers out.
//!
//! | parameter | phase | how |
//! |---|---|---|
//! | `band_bytes` | fit-stride | a 4 KiB fragment every 1 MiB over a span; each band touched is cleaned once and each clean is one op that waited: band = span / (cleans − 1) |
//! | clean time per band | fit-stride | mean wait of the reads that waited for a clean (latency − the median read) |
//! | `busy_clean_spacing_ms` | fit-stride | under back-to-back reads, the 5th percentile of the time from one clean's end to the next clean's start |
//! | `idle_clean_delay_ms` | fit-idle | the idle time after which a read finds cleaning under way (bisected) |
//! | `media_cache_bytes` | fit-fill | random 64 KiB writes until most writes wait for a clean: bytes the cache held then (written, less what the cleans before freed, replayed with the fitted band size) |
//! | `clean_overhead_ms` | all of the above | what the model needs on top of its mechanics to clean a band in the measured time |

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use tierd_common::hash::FastMap;
use tierd_common::op::Op;
use tierd_device::model::smr::{Smr, SmrConfig};
use tierd_device::model::{DeviceIo, DeviceModel};

use super::runner::{slow_threshold_ns, FILL_SLOW_IN_WINDOW, FILL_WINDOW, STRIDE_BYTES};
use super::summary::{quantile, Phase, Record};

/// Band size assumed when the probe has no stride phase (Archive 8 TB).
const BAND_BYTES_DEFAULT: u64 = 30 << 20;
/// See [`fit_fill`].
const FULL_HORIZON: usize = 64;
const FULL_FOLLOWING_SLOW: usize = 3;

/// Fitted parameters; `None` when the probe could not show one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    pub media_cache_bytes: Option<u64>,
    pub band_bytes: Option<u64>,
    /// Measured time to clean one band holding one fragment.
    pub clean_ms_per_band: Option<f64>,
    pub busy_clean_spacing_ms: Option<f64>,
    pub idle_clean_delay_ms: Option<f64>,
    /// Chosen so the model (with its mechanics) cleans a band in `clean_ms_per_band`.
    pub clean_overhead_ms: Option<f64>,
    /// Cleans counted in the stride phase, and the fragments written.
    pub stride_cleans: u64,
    pub stride_fragments: u64,
    /// Which phase each parameter came from.
    pub sources: Vec<(String, String)>,
}

fn median_ns<'a>(records: impl Iterator<Item = &'a Record>) -> u64 {
    let mut latencies: Vec<u64> = records.map(Record::latency_ns).collect();
    latencies.sort_unstable();
    quantile(&latencies, 0.5)
}

/// Band size, clean time and busy spacing from the stride phase.
pub fn fit_stride(phase: &Phase, fit: &mut Fit) {
    let baseline = phase.paper_reads as usize;
    let records = &phase.records;
    if records.len() <= baseline {
        return;
    }
    let read_median_ns = median_ns(records[..baseline].iter());
    let writes: Vec<&Record> = records.iter().filter(|r| r.is_write()).collect();
    let write_median_ns = median_ns(writes.iter().copied());
    let after: Vec<&Record> = records[baseline..]
        .iter()
        .filter(|r| !r.is_write() && r.start_ns() >= phase.writes_end_ns)
        .collect();
    let read_threshold_ns = slow_threshold_ns(read_median_ns);
    let slow_writes = writes
        .iter()
        .filter(|r| r.latency_ns() > slow_threshold_ns(write_median_ns))
        .count() as u64;
    let slow_reads: Vec<&&Record> = after
        .iter()
        .filter(|r| r.latency_ns() > read_threshold_ns)
        .collect();
    let cleans = slow_writes + slow_reads.len() as u64;
    let fragments = writes.len() as u64;
    fit.stride_cleans = cleans;
    fit.stride_fragments = fragments;
    if cleans >= 2 && fragments >= 2 {
        let span = (fragments - 1) * STRIDE_BYTES;
        let band = span as f64 / (cleans - 1) as f64;
        fit.band_bytes = Some(((band / 4096.0).round() as u64).max(1) * 4096);
        fit.sources.push((
            "band_bytes".into(),
            format!(
                "fit-stride: {fragments} fragments 1 MiB apart, {cleans} cleans ({} waiting writes, {} waiting reads): span / (cleans - 1)",
                slow_writes,
                slow_reads.len()
            ),
        ));
    }
    if !slow_reads.is_empty() {
        let waits: Vec<f64> = slow_reads
            .iter()
            .map(|r| r.latency_ns().saturating_sub(read_median_ns) as f64 / 1e6)
            .collect();
        fit.clean_ms_per_band = Some(waits.iter().sum::<f64>() / waits.len() as f64);
        fit.sources.push((
            "clean_ms_per_band".into(),
            format!(
                "fit-stride: mean wait of {} reads that waited (latency - median read {:.1} ms)",
                waits.len(),
                read_median_ns as f64 / 1e6
            ),
        ));
    }
    let mut gaps: Vec<u64> = slow_reads
        .windows(2)
        .map(|pair| {
            let clean_end = pair[0].end_ns().saturating_sub(read_median_ns);
            pair[1].start_ns().saturating_sub(clean_end)
        })
        .collect();
    gaps.sort_unstable();
    if !gaps.is_empty() {
        fit.busy_clean_spacing_ms = Some(quantile(&gaps, 0.05) as f64 / 1e6);
        fit.sources.push((
            "busy_clean_spacing_ms".into(),
            format!(
                "fit-stride: 5th percentile of {} gaps from a clean's end to the next clean's start under back-to-back reads",
                gaps.len()
            ),
        ));
    }
}

/// Idle-clean delay from the idle phase: its probe reads are the 4 KiB
/// reads after an idle gap; the first 16 records are the baseline polls.
pub fn fit_idle(phase: &Phase, fit: &mut Fit) {
    let records = &phase.records;
    if records.len() <= 16 {
        return;
    }
    let threshold_ns = records[..16]
        .iter()
        .map(Record::latency_ns)
        .max()
        .unwrap_or(0)
        + 10_000_000;
    // idle time -> any probe read after it waited
    let mut tests: Vec<(u64, bool)> = Vec::new();
    for pair in records[16..].windows(2) {
        let (previous, probe) = (pair[0], pair[1]);
        if probe.is_write() || probe.length_bytes() != 4096 {
            continue;
        }
        let idle_ns = probe.start_ns().saturating_sub(previous.end_ns());
        let waited = probe.latency_ns() > threshold_ns;
        match tests.iter_mut().find(|(idle, _)| *idle == idle_ns) {
            Some(test) => test.1 |= waited,
            None => tests.push((idle_ns, waited)),
        }
    }
    let Some(first_wait) = tests
        .iter()
        .filter(|(_, waited)| *waited)
        .map(|(idle, _)| *idle)
        .min()
    else {
        return;
    };
    let last_quiet = tests
        .iter()
        .filter(|(idle, waited)| !*waited && *idle < first_wait)
        .map(|(idle, _)| *idle)
        .max()
        .unwrap_or(0);
    fit.idle_clean_delay_ms = Some((first_wait + last_quiet) as f64 / 2.0 / 1e6);
    fit.sources.push((
        "idle_clean_delay_ms".into(),
        format!(
            "fit-idle: reads after {:.0} ms idle found cleaning under way, after {:.0} ms not",
            first_wait as f64 / 1e6,
            last_quiet as f64 / 1e6
        ),
    ));
}

/// Media-cache size from the fill phase (see the module docs).
pub fn fit_fill(phase: &Phase, fit: &mut Fit) {
    let records = &phase.records;
    if records.len() < 256 + FILL_WINDOW {
        return;
    }
    let threshold_ns = slow_threshold_ns(median_ns(records[..256].iter()));
    let slow: Vec<bool> = records
        .iter()
        .map(|r| r.latency_ns() > threshold_ns)
        .collect();
    // The cache is full at the first write that waited with at least
    // FULL_FOLLOWING_SLOW more waiting within the next FULL_HORIZON writes
    // (cleans under load alone are hundreds of writes apart).
    let full = (0..slow.len()).find(|&index| {
        slow[index]
            && slow[index + 1..(index + 1 + FULL_HORIZON).min(slow.len())]
                .iter()
                .filter(|&&s| s)
                .count()
                >= FULL_FOLLOWING_SLOW
    });
    let dense = (0..=slow.len().saturating_sub(FILL_WINDOW)).any(|start| {
        slow[start..(start + FILL_WINDOW).min(slow.len())]
            .iter()
            .filter(|&&s| s)
            .count()
            >= FILL_SLOW_IN_WINDOW
    });
    let Some(full) = full.filter(|_| dense) else {
        return;
    };
    // Replay the cache: each clean (a write that waited) frees the oldest
    // dirty band, as the drive cleans oldest first.
    let band = fit.band_bytes.unwrap_or(BAND_BYTES_DEFAULT);
    let mut held: FastMap<u64, u64> = FastMap::default();
    let mut order: VecDeque<u64> = VecDeque::new();
    let mut used = 0u64;
    for (record, &waited) in records[..full].iter().zip(&slow) {
        if waited {
            while let Some(oldest) = order.pop_front() {
                if let Some(bytes) = held.remove(&oldest) {
                    used -= bytes;
                    break;
                }
            }
        }
        let key = record.offset_bytes() / band;
        let entry = held.entry(key).or_insert_with(|| {
            order.push_back(key);
            0
        });
        *entry += record.length_bytes();
        used += record.length_bytes();
    }
    let estimate = used + records[full].length_bytes() / 2;
    fit.media_cache_bytes = Some(estimate.div_ceil(4096) * 4096);
    fit.sources.push((
        "media_cache_bytes".into(),
        format!(
            "fit-fill: write {} of {} waited with most after it waiting too; {} bytes written before it, {} held after replaying the cleans before it",
            full + 1,
            records.len(),
            records[..full].iter().map(Record::length_bytes).sum::<u64>(),
            used
        ),
    ));
}

/// The time `config`'s model takes to clean one band holding one 4 KiB
/// fragment, ms: a fragment written, then the idle drive cleans it.
pub fn model_clean_ms(config: &SmrConfig) -> Option<f64> {
    let mut model = Smr::new(config, 1).ok()?;
    let mut done = Vec::new();
    let offset = config.capacity_bytes / 2 / 4096 * 4096 + 4096;
    model.submit(
        0,
        DeviceIo {
            id: 1,
            op: Op::Write,
            offset_bytes: offset,
            length_bytes: 4096,
            background: false,
        },
    );
    let mut guard = 0;
    while let Some(event_ns) = model.next_event_ns() {
        model.advance(event_ns, &mut done);
        guard += 1;
        if (model.stats().bands_cleaned > 0 && model.next_event_ns().is_none()) || guard > 1000 {
            break;
        }
    }
    let stats = model.stats();
    (stats.bands_cleaned > 0)
        .then(|| stats.clean_ns_total as f64 / stats.bands_cleaned as f64 / 1e6)
}

/// Fits every parameter the phases show. `base`: the model whose mechanics
/// the fitted parameters go with (the probed model, or the Archive 8 TB
/// preset at the probed size for a real disk).
pub fn fit(phases: &[Phase], base: &SmrConfig) -> Fit {
    let mut fit = Fit::default();
    for phase in phases {
        match phase.name.as_str() {
            "fit-stride" => fit_stride(phase, &mut fit),
            "fit-idle" => fit_idle(phase, &mut fit),
            _ => {}
        }
    }
    if let Some(phase) = phases.iter().find(|phase| phase.name == "fit-fill") {
        fit_fill(phase, &mut fit);
    }
    if let (Some(band_bytes), Some(measured_ms)) = (fit.band_bytes, fit.clean_ms_per_band) {
        let mut config = base.clone();
        config.band_bytes = band_bytes;
        config.clean_overhead_ms = 0.0;
        if let Some(bytes) = fit.media_cache_bytes {
            config.media_cache_bytes = bytes;
        }
        if let Some(mechanics_ms) = model_clean_ms(&config) {
            fit.clean_overhead_ms = Some((measured_ms - mechanics_ms).max(0.0));
            fit.sources.push((
                "clean_overhead_ms".into(),
                format!(
                    "measured clean {measured_ms:.1} ms less the model's mechanics for the fitted band ({mechanics_ms:.1} ms)"
                ),
            ));
        }
    }
    fit
}

/// `base` with the fitted parameters applied.
pub fn fitted_config(base: &SmrConfig, fit: &Fit) -> SmrConfig {
    let mut config = base.clone();
    if let Some(value) = fit.media_cache_bytes {
        config.media_cache_bytes = value;
    }
    if let Some(value) = fit.band_bytes {
        config.band_bytes = value;
    }
    if let Some(value) = fit.busy_clean_spacing_ms {
        config.busy_clean_spacing_ms = value;
    }
    if let Some(value) = fit.idle_clean_delay_ms {
        config.idle_clean_delay_ms = value;
    }
    if let Some(value) = fit.clean_overhead_ms {
        config.clean_overhead_ms = value;
    }
    config
}

/// A tier stack file (`tierd sim --tiers FILE`) with one tier: the probed
/// disk as the `archive8tb` model with the fitted parameters in
/// `[tier.model]`.
pub fn stack_toml(base: &SmrConfig, fit: &Fit, source: &str) -> String {
    let config = fitted_config(base, fit);
    let mut text = String::new();
    text.push_str(&format!(
        "# A drive-managed SMR disk fitted by `tierd model fit` from {source}\n\
         # (docs/probe.md, \"Fitting a model\"). Where each value comes from:\n"
    ));
    for (key, how) in &fit.sources {
        text.push_str(&format!("#   {key}: {how}\n"));
    }
    if let Some(ms) = fit.clean_ms_per_band {
        text.push_str(&format!("# measured clean time per band: {ms:.1} ms\n"));
    }
    text.push_str(
        "# Parameters the probe could not show keep the archive8tb preset's values.\n\
         name = \"fitted-smr\"\n\
         description = \"drive-managed SMR disk, parameters fitted from a probe\"\n\n\
         [[tier]]\n\
         name = \"smr\"\n\
         device = \"archive8tb\"\n",
    );
    text.push_str(&format!(
        "# probed capacity: {} bytes (left out: the simulator sizes home to its volume,\n\
         # and refuses a home smaller than the volume)\n\n[tier.model]\n",
        config.capacity_bytes
    ));
    text.push_str(&format!("cylinders = {}\n", config.cylinders));
    text.push_str(&format!(
        "media_cache_bytes = {}\n",
        config.media_cache_bytes
    ));
    text.push_str(&format!("band_bytes = {}\n", config.band_bytes));
    text.push_str(&format!(
        "busy_clean_spacing_ms = {:.3}\n",
        config.busy_clean_spacing_ms
    ));
    text.push_str(&format!(
        "idle_clean_delay_ms = {:.3}\n",
        config.idle_clean_delay_ms
    ));
    text.push_str(&format!(
        "clean_overhead_ms = {:.3}\n",
        config.clean_overhead_ms
    ));
    text
}
