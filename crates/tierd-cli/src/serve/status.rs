//! `tierd status` without a server (placement read from the metadata files,
//! never written), and the text rendering of the status JSON.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;
use tierd_engine::config::{Backend, Config, VolumeConfig};
use tierd_engine::meta::{decode_checkpoint, decode_journal, Location, MetaStore, Pin, Record};
use tierd_engine::volume::{PinStatus, TierStatus, VolumeStatus};
use tierd_policy::build_policy;

use crate::CliError;

/// Recent moves the text output lists per volume.
const RECENT_MOVES_SHOWN: usize = 10;
/// Volumes with at most this many segments get their full placement map.
const MAP_SEGMENTS: usize = 256;

/// Every configured volume's status as its metadata describes it. Reads the
/// checkpoint and journal bytes and decodes them as recovery would (a
/// journal older than the checkpoint is ignored; damage is an error naming
/// the file and byte offset), without opening them for writing.
pub fn offline_status(config: &Config) -> Result<Vec<VolumeStatus>, CliError> {
    config
        .volumes
        .iter()
        .map(|volume| offline_volume(config, volume))
        .collect()
}

/// The error of `tierd status` where no server has run: no data directory
/// (so no metadata to read and no admin socket), said plainly instead of
/// printing volumes that look empty and healthy.
pub fn nothing_there(data_dir: &Path, config: Option<&Path>) -> String {
    match config {
        None => format!(
            "no tierd server has run here: {} does not exist (the embedded default's data directory, in the working directory). Run `tierd status` from the directory `tierd serve` ran in, or pass the server's configuration with --config FILE",
            data_dir.display()
        ),
        Some(config) => format!(
            "no tierd server has run with {}: its data directory {} does not exist. Start it with `tierd serve --config {}`, or pass the configuration the server runs with (--config FILE)",
            config.display(),
            data_dir.display(),
            config.display()
        ),
    }
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, CliError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(CliError(format!(
            "{}: cannot read: {error}",
            path.display()
        ))),
    }
}

fn offline_volume(config: &Config, volume: &VolumeConfig) -> Result<VolumeStatus, CliError> {
    let meta_dir = config.metadata_dir().join(&volume.name);
    let segment_bytes = volume.segment.0;
    let segments = volume.size.0.div_ceil(segment_bytes) as u32;
    let home = (volume.tiers.len() - 1) as u8;
    let mut placement: Vec<Location> = (0..segments)
        .map(|segment| Location {
            tier: home,
            slot: segment,
        })
        .collect();
    let mut warnings = Vec::new();
    let checkpoint_path = MetaStore::checkpoint_path(&meta_dir);
    let journal_path = MetaStore::journal_path(&meta_dir);
    let mut generation = 0;
    let mut checkpoint = None;
    if let Some(bytes) = read_optional(&checkpoint_path)? {
        let (checkpoint_generation, decoded) = decode_checkpoint(&checkpoint_path, &bytes)?;
        generation = checkpoint_generation;
        if decoded.placement.len() == placement.len() && decoded.tiers == volume.tiers {
            placement.clone_from(&decoded.placement);
        } else {
            warnings.push(format!(
                "{}: the checkpoint describes {} segments over tiers {:?}, the configuration {} segments over {:?}; the server will refuse to start until they agree",
                checkpoint_path.display(),
                decoded.placement.len(),
                decoded.tiers,
                segments,
                volume.tiers
            ));
        }
        checkpoint = Some(decoded);
    } else {
        warnings.push(format!(
            "no checkpoint in {}: the volume has not been served yet (every segment is home)",
            meta_dir.display()
        ));
    }
    let mut journal_moves = 0u64;
    // Journaled moves with their time (as recovery counts them).
    let mut journal_timed = 0u64;
    let mut journal_move_ns = 0f64;
    let mut pins: std::collections::BTreeMap<u32, Pin> = checkpoint
        .as_ref()
        .map(|checkpoint: &tierd_engine::meta::Checkpoint| {
            checkpoint
                .pins
                .iter()
                .map(|pin| (pin.segment, *pin))
                .collect()
        })
        .unwrap_or_default();
    if let Some(bytes) = read_optional(&journal_path)? {
        let decoded = decode_journal(&journal_path, &bytes)?;
        if decoded.generation == generation {
            for record in &decoded.records {
                match record {
                    Record::Place {
                        segment,
                        location,
                        move_ns,
                    } => {
                        if let Some(slot) = placement.get_mut(*segment as usize) {
                            *slot = *location;
                            journal_moves += 1;
                            if let Some(move_ns) = move_ns {
                                journal_timed += 1;
                                journal_move_ns += *move_ns as f64;
                            }
                        }
                    }
                    Record::Pin { .. } | Record::Unpin { .. } => record.apply_to_pins(&mut pins),
                    Record::CacheMap { .. }
                    | Record::CacheMode { .. }
                    | Record::CacheDetached
                    | Record::CacheLost { .. }
                    | Record::CacheRewritten { .. } => {}
                }
            }
            if let Some(note) = decoded.torn_tail {
                warnings.push(format!("{}: {note}", journal_path.display()));
            }
        } else if decoded.generation > generation {
            return Err(CliError(format!(
                "{} at byte offset 12: journal generation {} is newer than the checkpoint's {generation}; the server will refuse to start on it",
                journal_path.display(),
                decoded.generation
            )));
        }
    }
    let tiers: Vec<TierStatus> = volume
        .tiers
        .iter()
        .enumerate()
        .map(|(index, name)| {
            let tier = config.tiers.iter().find(|tier| &tier.name == name);
            let capacity_bytes = tier
                .and_then(|tier| tier.size.map(|size| size.0))
                .or_else(|| {
                    tier.and_then(|tier| tier.path.as_ref())
                        .and_then(|path| std::fs::metadata(path).ok())
                        // The file ends in tierd's identity superblock.
                        .map(|metadata| {
                            metadata
                                .len()
                                .saturating_sub(tierd_engine::identity::SUPERBLOCK_BYTES)
                        })
                })
                .unwrap_or(0);
            let volatile = tier.is_some_and(|tier| tier.backend == Backend::Memory);
            let used_segments = placement
                .iter()
                .filter(|location| location.tier as usize == index)
                .count() as u32;
            TierStatus {
                name: name.clone(),
                volatile,
                write_through: volatile && !tier.is_some_and(|tier| tier.unsafe_volatile),
                capacity_segments: if index == home as usize {
                    segments
                } else {
                    (capacity_bytes / segment_bytes) as u32
                },
                used_segments,
                used_bytes: u64::from(used_segments) * segment_bytes,
                capacity_bytes,
                stats: None,
                failed: None,
                reduction: None,
                replicas: None,
            }
        })
        .collect();
    let checkpoint_moves = checkpoint
        .as_ref()
        .map_or(0, |checkpoint| checkpoint.completed_moves);
    let checkpoint_timed = checkpoint.as_ref().map_or(0, |checkpoint| {
        checkpoint.timed_moves.unwrap_or(checkpoint.completed_moves)
    });
    let checkpoint_move_ns = checkpoint.as_ref().map_or(0.0, |checkpoint| {
        checkpoint.mean_move_ns.unwrap_or(0.0) * checkpoint_timed as f64
    });
    let timed = checkpoint_timed + journal_timed;
    let mean_move_ns = (timed > 0).then(|| (checkpoint_move_ns + journal_move_ns) / timed as f64);
    let pins = pins
        .values()
        .map(|pin| {
            PinStatus::new(
                pin,
                &volume.tiers,
                placement
                    .get(pin.segment as usize)
                    .map(|location| location.tier),
            )
        })
        .collect();
    let last_plan = checkpoint
        .as_ref()
        .and_then(|checkpoint| checkpoint.last_plan.clone());
    let policy = checkpoint.as_ref().map_or_else(
        || build_policy(&volume.policy()).name().to_string(),
        |checkpoint| checkpoint.policy.clone(),
    );
    Ok(VolumeStatus {
        name: volume.name.clone(),
        size_bytes: volume.size.0,
        segment_bytes,
        segments,
        policy,
        periods_closed: 0,
        placement_by_tier: tiers
            .iter()
            .map(|tier| (tier.name.clone(), tier.used_segments))
            .collect(),
        placement: placement
            .iter()
            .map(|location| char::from_digit(u32::from(location.tier), 10).unwrap_or('?'))
            .collect(),
        tiers,
        in_flight: Vec::new(),
        pending_moves: 0,
        completed_moves: checkpoint_moves + journal_moves,
        dropped_moves: 0,
        dropped_moves_by_reason: Default::default(),
        completed_moves_by_rule: Default::default(),
        mean_move_ns,
        max_chunk_hold_ns: 0,
        max_switch_over_ns: 0,
        recent_moves: checkpoint
            .map(|checkpoint| checkpoint.recent_moves)
            .unwrap_or_default(),
        warnings,
        // Which tiers are lost is known only to a running server.
        unavailable: Vec::new(),
        pins,
        last_plan,
        // The cache's counters live in a running server.
        cache: None,
    })
}

/// `12.0 MiB`-style sizes.
fn size_text(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn number(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("?")
}

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The human-readable status: per volume its placement by tier, tier usage
/// and IO counters, moves in flight, recent moves with their reasons, and
/// warnings.
pub fn render_text(report: &Value) -> String {
    let mut out = String::new();
    if report.get("server_running").and_then(Value::as_bool) == Some(true) {
        out.push_str("server running\n");
    } else {
        out.push_str("server not running; placement from metadata\n");
    }
    for volume in array(report, "volumes") {
        let segment_bytes = number(volume, "segment_bytes");
        let _ = writeln!(
            out,
            "\nvolume {}: {}, {} segments of {}, policy {}, {} periods closed",
            text(volume, "name"),
            size_text(number(volume, "size_bytes")),
            number(volume, "segments"),
            size_text(segment_bytes),
            text(volume, "policy"),
            number(volume, "periods_closed"),
        );
        let placement: Vec<String> = array(volume, "placement_by_tier")
            .iter()
            .map(|pair| {
                let name = pair.get(0).and_then(Value::as_str).unwrap_or("?");
                let count = pair.get(1).and_then(Value::as_u64).unwrap_or(0);
                format!(
                    "{name} {count} segments ({})",
                    size_text(count * segment_bytes)
                )
            })
            .collect();
        let _ = writeln!(out, "  placement: {}", placement.join(", "));
        let map = text(volume, "placement");
        if map.len() <= MAP_SEGMENTS {
            let _ = writeln!(out, "  map (tier index per segment, 0 = fastest): {map}");
        }
        out.push_str("  tiers:\n");
        for tier in array(volume, "tiers") {
            let mut flags = Vec::new();
            if tier.get("volatile").and_then(Value::as_bool) == Some(true) {
                flags.push(
                    if tier.get("write_through").and_then(Value::as_bool) == Some(true) {
                        "volatile, written through"
                    } else {
                        "volatile, NOT written through (unsafe_volatile)"
                    },
                );
            }
            let _ = write!(
                out,
                "    {:<10} used {}/{} segments ({} of {})",
                text(tier, "name"),
                number(tier, "used_segments"),
                number(tier, "capacity_segments"),
                size_text(number(tier, "used_bytes")),
                size_text(number(tier, "capacity_bytes")),
            );
            if let Some(stats) = tier.get("stats").filter(|stats| stats.is_object()) {
                let _ = write!(
                    out,
                    "; reads {} ({}), writes {} ({}), busy {:.3} s, errors {}",
                    number(stats, "reads"),
                    size_text(number(stats, "read_bytes")),
                    number(stats, "writes"),
                    size_text(number(stats, "write_bytes")),
                    number(stats, "busy_ns") as f64 / 1e9,
                    number(stats, "errors"),
                );
            }
            if !flags.is_empty() {
                let _ = write!(out, " [{}]", flags.join("; "));
            }
            out.push('\n');
            if let Some(reason) = tier.get("failed").and_then(Value::as_str) {
                let _ = writeln!(out, "      FAILED: {reason}");
            }
            if let Some(reduction) = tier.get("reduction").filter(|value| value.is_object()) {
                let float = |key: &str| reduction.get(key).and_then(Value::as_f64).unwrap_or(0.0);
                let _ = writeln!(
                    out,
                    "      reduction {} ({}), now {}: {} logical in {} physical ({:.2}:1; zero {}, dedup {}, \
                     compression saved {}); staged {}; {} workers at {:.0}% utilisation; {} switches; \
                     {} of {} free ({} dead; cleaner emptied {} packs, copied {})",
                    text(reduction, "setting"),
                    text(reduction, "rule"),
                    text(reduction, "mode"),
                    size_text(number(reduction, "logical_bytes")),
                    size_text(number(reduction, "physical_bytes")),
                    float("ratio"),
                    size_text(number(reduction, "zero_bytes")),
                    size_text(number(reduction, "dedup_bytes")),
                    size_text(number(reduction, "compress_saved_bytes")),
                    size_text(number(reduction, "staged_bytes")),
                    number(reduction, "workers"),
                    float("utilisation") * 100.0,
                    number(reduction, "switches"),
                    size_text(number(reduction, "free_bytes")),
                    size_text(number(reduction, "capacity_bytes")),
                    size_text(number(reduction, "dead_bytes")),
                    number(reduction, "cleaned_packs"),
                    size_text(number(reduction, "cleaner_relocated_bytes")),
                );
            }
            if let Some(replicas) = tier.get("replicas").filter(|value| value.is_object()) {
                let _ = writeln!(
                    out,
                    "      replicas: {} extents replicated, {} current copies ({} pending) in {} of free \
                     space; {} of {} reads from replicas ({}), head travel saved {}; {} copies made, \
                     {} dropped by writes, {} by reclaim, {} by trims; {} read groups, {} recurrences",
                    number(replicas, "replicated_extents"),
                    number(replicas, "current_copies"),
                    number(replicas, "pending_copies"),
                    size_text(number(replicas, "replica_extents") * number(replicas, "extent_bytes")),
                    number(replicas, "reads_from_replicas"),
                    number(replicas, "reads_routed"),
                    size_text(number(replicas, "bytes_from_replicas")),
                    size_text(
                        replicas
                            .get("seek_distance_saved_bytes")
                            .and_then(Value::as_i64)
                            .unwrap_or(0)
                            .max(0) as u64
                    ),
                    number(replicas, "copies_made"),
                    number(replicas, "dropped_by_writes"),
                    number(replicas, "dropped_by_reclaim"),
                    number(replicas, "dropped_by_trims"),
                    number(replicas, "groups"),
                    number(replicas, "recurrences"),
                );
            }
        }
        let mean = volume
            .get("mean_move_ns")
            .and_then(Value::as_f64)
            .map(|mean| format!(", mean {:.1} ms each", mean / 1e6))
            .unwrap_or_default();
        // Dropped moves by reason, those with a count (docs/placement.md).
        let reasons: Vec<String> = volume
            .get("dropped_moves_by_reason")
            .and_then(Value::as_object)
            .map(|reasons| {
                reasons
                    .iter()
                    .filter_map(|(reason, count)| {
                        count
                            .as_u64()
                            .filter(|count| *count > 0)
                            .map(|count| format!("{count} {}", reason.replace('_', " ")))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let dropped = if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join(", "))
        };
        let _ = writeln!(
            out,
            "  moves: {} completed, {} dropped{dropped}, {} queued{mean}; longest chunk copy {:.3} ms, longest switch-over {:.3} ms",
            number(volume, "completed_moves"),
            number(volume, "dropped_moves"),
            number(volume, "pending_moves"),
            number(volume, "max_chunk_hold_ns") as f64 / 1e6,
            number(volume, "max_switch_over_ns") as f64 / 1e6,
        );
        let in_flight = array(volume, "in_flight");
        if in_flight.is_empty() {
            out.push_str("  in flight: none\n");
        } else {
            out.push_str("  in flight:\n");
            for moving in in_flight {
                let _ = writeln!(
                    out,
                    "    segment {} {} -> {}: {} of {} copied; rule {}: {}",
                    number(moving, "segment"),
                    text(moving, "from"),
                    text(moving, "to"),
                    size_text(number(moving, "copied_bytes")),
                    size_text(number(moving, "total_bytes")),
                    text(moving, "rule"),
                    text(moving, "detail"),
                );
            }
        }
        let recent = array(volume, "recent_moves");
        if recent.is_empty() {
            out.push_str("  recent moves: none\n");
        } else {
            let shown = recent.len().min(RECENT_MOVES_SHOWN);
            let _ = writeln!(
                out,
                "  recent moves (newest last, {shown} of {}):",
                recent.len()
            );
            for moved in &recent[recent.len() - shown..] {
                let took_ns =
                    number(moved, "finished_ns").saturating_sub(number(moved, "started_ns"));
                let _ = writeln!(
                    out,
                    "    segment {} {} -> {}: {} ({} copied in {:.1} ms); rule {}: {}",
                    number(moved, "segment"),
                    text(moved, "from"),
                    text(moved, "to"),
                    text(moved, "outcome"),
                    size_text(number(moved, "bytes_copied")),
                    took_ns as f64 / 1e6,
                    text(moved, "rule"),
                    text(moved, "detail"),
                );
            }
        }
        let pins = array(volume, "pins");
        if !pins.is_empty() {
            out.push_str("  pins (no policy moves these):\n");
            for pin in pins {
                let until = pin
                    .get("until")
                    .and_then(Value::as_str)
                    .map_or_else(|| "until unpinned".to_string(), |at| format!("until {at}"));
                let placed = if pin.get("placed").and_then(Value::as_bool) == Some(true) {
                    "on it"
                } else {
                    "not there yet: its move is queued"
                };
                let _ = writeln!(
                    out,
                    "    segment {} -> {} ({until}; {placed})",
                    number(pin, "segment"),
                    text(pin, "tier"),
                );
            }
        }
        if let Some(plan) = volume.get("last_plan").filter(|plan| plan.is_object()) {
            let at = plan
                .get("planned_unix_ns")
                .and_then(Value::as_u64)
                .map(tierd_common::units::format_rfc3339_utc)
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  last plan ({at}): {} moves proposed, {} queued; {}",
                number(plan, "moves"),
                number(plan, "queued"),
                text(plan, "summary"),
            );
        } else {
            out.push_str("  last plan: none yet\n");
        }
        if let Some(cache) = volume.get("cache").filter(|cache| cache.is_object()) {
            let ratio = |key: &str| cache.get(key).and_then(Value::as_f64).unwrap_or(0.0) * 100.0;
            let _ = writeln!(
                out,
                "  cache on {} ({}, {} blocks): {} of {} used, {} dirty; hits {:.1}% of read blocks, {:.1}% of written; {} written back; {} allocations, {} clean / {} dirty evictions",
                text(cache, "tier"),
                text(cache, "mode"),
                size_text(number(cache, "block_bytes")),
                size_text(number(cache, "occupancy_bytes")),
                size_text(number(cache, "slots") * number(cache, "block_bytes")),
                size_text(number(cache, "dirty_bytes")),
                ratio("read_hit_ratio"),
                ratio("write_hit_ratio"),
                size_text(number(cache, "written_back_bytes")),
                number(cache, "allocations"),
                number(cache, "clean_evictions"),
                number(cache, "dirty_evictions"),
            );
            if let Some(adaptive) = cache.get("adaptive").filter(|value| value.is_object()) {
                let gains: Vec<String> = adaptive
                    .get("gains_ms")
                    .and_then(Value::as_object)
                    .map(|gains| {
                        gains
                            .iter()
                            .map(|(rule, gain)| {
                                format!("{rule} {:+.1}", gain.as_f64().unwrap_or(0.0))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "    admission adaptive: {} now ({} switches over {} epochs); last epoch's estimated gain, ms: {}; utilisation home {:.0}%, cache {:.0}%",
                    text(adaptive, "rule"),
                    number(adaptive, "switches"),
                    number(adaptive, "epochs"),
                    if gains.is_empty() { "none yet".to_string() } else { gains.join(", ") },
                    adaptive.get("home_utilization").and_then(Value::as_f64).unwrap_or(0.0) * 100.0,
                    adaptive.get("fast_utilization").and_then(Value::as_f64).unwrap_or(0.0) * 100.0,
                );
                if let Some(promotion) = adaptive.get("promotion").filter(|value| value.is_object())
                {
                    let _ = writeln!(
                        out,
                        "    promotion: {} segments promoted, {} copied in; last epoch weighed {}: {} promoted, {} heat not expected to last, {} not worth the copy, {} over the copy budget",
                        number(promotion, "segments"),
                        size_text(number(cache, "promoted_bytes")),
                        number(promotion, "weighed"),
                        number(promotion, "promoted"),
                        number(promotion, "short_lived"),
                        number(promotion, "not_worth"),
                        number(promotion, "over_budget"),
                    );
                }
            }
            if let Some(smr) = cache.get("smr").filter(|value| value.is_object()) {
                let rewriting = smr
                    .get("rewriting")
                    .filter(|value| value.is_object())
                    .map(|band| {
                        format!(
                            "rewriting the band at byte {}",
                            number(band, "offset_bytes")
                        )
                    })
                    .unwrap_or_else(|| "no band being rewritten".to_string());
                let _ = writeln!(
                    out,
                    "    SMR home (bands of {}): {} staged in {} bands; {} band rewrites ({} written, {} read, {}/s lately); {rewriting}; {} blocks waited for a rewrite, {} went home unstaged",
                    size_text(number(smr, "band_bytes")),
                    size_text(number(smr, "staged_bytes")),
                    number(smr, "staged_bands"),
                    number(smr, "band_rewrites"),
                    size_text(number(smr, "destage_written_bytes")),
                    size_text(number(smr, "destage_read_bytes")),
                    size_text(smr.get("destage_bytes_per_s").and_then(Value::as_f64).unwrap_or(0.0) as u64),
                    number(smr, "blocked_blocks"),
                    number(smr, "unstaged_home_write_blocks"),
                );
                if let Some(model) = smr.get("home_model").filter(|value| value.is_object()) {
                    let _ = writeln!(
                        out,
                        "    SMR disk model: {} dirty bands to clean, media cache {} used; {} bands cleaned, {} media-cache writes, {} direct",
                        number(model, "dirty_bands"),
                        size_text(number(model, "media_cache_used_bytes")),
                        number(model, "bands_cleaned"),
                        number(model, "media_cache_writes"),
                        number(model, "direct_writes"),
                    );
                }
            }
            if text(cache, "mode") == "detaching" {
                let _ = writeln!(
                    out,
                    "    detaching: {} dirty left to write back",
                    size_text(number(cache, "dirty_bytes"))
                );
            }
            if let Some(reason) = cache.get("lost").and_then(Value::as_str) {
                let _ = writeln!(out, "    CACHE TIER LOST: {reason}");
            }
        }
        let unavailable = array(volume, "unavailable");
        if !unavailable.is_empty() {
            out.push_str(
                "  UNAVAILABLE (only copy on a lost tier; reads fail with EIO):
",
            );
            for range in unavailable {
                let _ = writeln!(
                    out,
                    "    bytes {}..{} (segments {}-{}) on tier {}",
                    number(range, "offset_bytes"),
                    number(range, "offset_bytes") + number(range, "length_bytes"),
                    number(range, "first_segment"),
                    number(range, "last_segment"),
                    text(range, "tier"),
                );
            }
        }
        let warnings = array(volume, "warnings");
        if !warnings.is_empty() {
            out.push_str("  warnings:\n");
            for warning in warnings {
                let _ = writeln!(out, "    {}", warning.as_str().unwrap_or("?"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(size_text(0), "0 B");
        assert_eq!(size_text(1 << 20), "1 MiB");
        assert_eq!(size_text(3 << 29), "1.5 GiB");
    }

    #[test]
    fn text_shows_placement_moves_and_reasons() {
        let report = serde_json::json!({
            "server_running": true,
            "volumes": [{
                "name": "vol0", "size_bytes": 4u64 << 20, "segment_bytes": 1u64 << 20,
                "segments": 4, "policy": "otf-ast", "periods_closed": 7,
                "placement_by_tier": [["mem", 1], ["disk", 3]],
                "placement": "1011",
                "tiers": [
                    {"name": "mem", "volatile": true, "write_through": true,
                     "capacity_segments": 2, "used_segments": 1, "used_bytes": 1u64 << 20,
                     "capacity_bytes": 2u64 << 20,
                     "stats": {"reads": 5, "read_bytes": 5 * 4096, "writes": 2,
                               "write_bytes": 8192, "busy_ns": 1_500_000_000u64, "errors": 0}},
                    {"name": "disk", "volatile": false, "write_through": false,
                     "capacity_segments": 4, "used_segments": 3, "used_bytes": 3u64 << 20,
                     "capacity_bytes": 4u64 << 20, "stats": null}
                ],
                "in_flight": [{"segment": 2, "from": "disk", "to": "mem", "rule": "promote",
                               "detail": "heat 9 > 4", "copied_bytes": 1u64 << 19,
                               "total_bytes": 1u64 << 20}],
                "pending_moves": 0, "completed_moves": 3, "dropped_moves": 1,
                "mean_move_ns": 2_000_000.0,
                "recent_moves": [{"segment": 1, "from": "disk", "to": "mem", "rule": "operator",
                                  "detail": "requested with tierd move", "started_ns": 0,
                                  "finished_ns": 3_000_000u64, "bytes_copied": 1u64 << 20,
                                  "outcome": "done"}],
                "warnings": ["something to know"],
                "pins": [{"segment": 2, "tier": "mem", "until": "2026-11-25T15:00:00Z",
                          "until_unix_ns": 1_795_618_800_000_000_000u64, "placed": false}],
                "last_plan": {"period_end_ns": 5, "planned_unix_ns": 1_795_615_200_000_000_000u64,
                              "moves": 0, "queued": 0,
                              "summary": "home util 46.0%, inside 10.0-70.0%: no move"}
            }]
        });
        let text = render_text(&report);
        assert!(text.starts_with("server running\n"), "{text}");
        assert!(
            text.contains("placement: mem 1 segments (1 MiB), disk 3 segments (3 MiB)"),
            "{text}"
        );
        assert!(
            text.contains("used 1/2 segments (1 MiB of 2 MiB); reads 5 (20 KiB)"),
            "{text}"
        );
        assert!(text.contains("busy 1.500 s"), "{text}");
        assert!(
            text.contains(
                "segment 2 disk -> mem: 512 KiB of 1 MiB copied; rule promote: heat 9 > 4"
            ),
            "{text}"
        );
        assert!(text.contains("segment 1 disk -> mem: done (1 MiB copied in 3.0 ms); rule operator: requested with tierd move"), "{text}");
        assert!(text.contains("mean 2.0 ms each"), "{text}");
        assert!(text.contains("    something to know"), "{text}");
        assert!(
            text.contains("    segment 2 -> mem (until 2026-11-25T15:00:00Z; not there yet: its move is queued)"),
            "{text}"
        );
        assert!(
            text.contains("  last plan (2026-11-25T14:00:00Z): 0 moves proposed, 0 queued; home util 46.0%, inside 10.0-70.0%: no move"),
            "{text}"
        );
    }
}
