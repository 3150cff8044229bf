//! Fast-tier sizes: equal capacity for every strategy of a run set, the
//! size sweep of `tierd sim --fast-bytes LIST`, and its curves (hit ratio
//! and mean response time against size: a miss-ratio curve, as
//! libCacheSim prints one).
//!
//! The rule: every strategy of a report gets the same fast-tier capacity,
//! the fast tier's (`tier[0].capacity` of the stack, which a sweep sets).
//! A page cache uses all of it in 4 KiB pages; a tiering policy uses the
//! whole segments that fit, `floor(bytes / segment_bytes)`, so it loses the
//! remainder ([`capacity_notes`] says so) and gets nothing from a size
//! smaller than one segment.

use serde::Serialize;
use tierd_common::units::{parse_bytes, Bytes, PAGE_BYTES};
use tierd_trace::{TraceError, TraceReader};

use crate::config::{SimConfig, Window};
use crate::result::{RunResult, SimReport};

/// One entry of a `--fast-bytes` list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FastSize {
    /// An absolute size in bytes (`512MiB`, `2GiB`, `64GB`).
    Bytes(u64),
    /// A percentage (0 < p ≤ 100) of the trace's working set.
    Percent(f64),
}

const ACCEPTED: &str = "a size (512MiB, 2GiB, 64GB) or a percentage of the trace's working set above 0 and at most 100 (1%, 5%, 10%, 25%)";

/// Parses a comma list such as `512MiB,2GiB` or `1%,5%,10%,25%`; an error
/// names the entry and what is accepted.
pub fn parse_fast_sizes(list: &str) -> Result<Vec<FastSize>, String> {
    let mut sizes = Vec::new();
    for entry in list.split(',').map(str::trim) {
        if entry.is_empty() {
            return Err(format!(
                "an empty entry in {list:?}; each entry is {ACCEPTED}"
            ));
        }
        let size = match entry.strip_suffix('%') {
            Some(number) => match number.trim().parse::<f64>() {
                Ok(percent) if percent > 0.0 && percent <= 100.0 => FastSize::Percent(percent),
                _ => return Err(format!("entry {entry:?} is not {ACCEPTED}")),
            },
            None => match parse_bytes(entry) {
                Ok(0) => {
                    return Err(format!(
                        "entry {entry:?} is zero bytes; each entry is {ACCEPTED}"
                    ))
                }
                Ok(bytes) => FastSize::Bytes(bytes),
                Err(error) => {
                    return Err(format!(
                        "entry {entry:?}: {error}; each entry is {ACCEPTED}"
                    ))
                }
            },
        };
        sizes.push(size);
    }
    Ok(sizes)
}

/// Whether any entry is a percentage (the working set must be counted).
pub fn needs_working_set(sizes: &[FastSize]) -> bool {
    sizes
        .iter()
        .any(|size| matches!(size, FastSize::Percent(_)))
}

/// The sizes in bytes: percentages of `working_set_bytes`, rounded down
/// to whole 4 KiB pages (at least one). Listed in the order given; a size
/// listed twice (after rounding) is an error naming both entries.
pub fn resolve(sizes: &[FastSize], working_set_bytes: Option<u64>) -> Result<Vec<u64>, String> {
    let mut resolved: Vec<u64> = Vec::with_capacity(sizes.len());
    for (index, size) in sizes.iter().enumerate() {
        let bytes = match *size {
            FastSize::Bytes(bytes) => bytes,
            FastSize::Percent(percent) => {
                let Some(working_set) = working_set_bytes else {
                    return Err(format!(
                        "entry {percent}% needs the trace's working set, which is not known"
                    ));
                };
                let bytes = (working_set as f64 * percent / 100.0) as u64;
                (bytes / PAGE_BYTES).max(1) * PAGE_BYTES
            }
        };
        if let Some(earlier) = resolved.iter().position(|other| *other == bytes) {
            return Err(format!(
                "entries {} and {} are both {} ({bytes} bytes); list each size once",
                earlier + 1,
                index + 1,
                Bytes(bytes)
            ));
        }
        resolved.push(bytes);
    }
    Ok(resolved)
}

/// Distinct bytes a trace touches at 4 KiB granularity: a bitmap of
/// blocks, grown as offsets appear.
#[derive(Clone, Debug, Default)]
pub struct WorkingSet {
    words: Vec<u64>,
    blocks: u64,
}

impl WorkingSet {
    pub fn add(&mut self, offset_bytes: u64, length_bytes: u64) {
        if length_bytes == 0 {
            return;
        }
        let first = offset_bytes / PAGE_BYTES;
        let last = (offset_bytes + length_bytes - 1) / PAGE_BYTES;
        for block in first..=last {
            let word = (block / 64) as usize;
            if word >= self.words.len() {
                self.words.resize((word + 1).next_power_of_two(), 0);
            }
            let bit = 1u64 << (block % 64);
            if self.words[word] & bit == 0 {
                self.words[word] |= bit;
                self.blocks += 1;
            }
        }
    }

    pub fn bytes(&self) -> u64 {
        self.blocks * PAGE_BYTES
    }
}

/// The working set of what a run replays: the requests of `reader` inside
/// `window` (trace time from the first request, as the runs cut it), one
/// pass.
pub fn working_set_bytes(reader: &mut dyn TraceReader, window: Window) -> Result<u64, TraceError> {
    let mut set = WorkingSet::default();
    let mut first_ns = None;
    while let Some(request) = reader.next_request()? {
        let since = request
            .time_ns
            .saturating_sub(*first_ns.get_or_insert(request.time_ns));
        if window.to_ns.is_some_and(|to| since >= to) {
            break;
        }
        if window.from_ns.is_some_and(|from| since < from) {
            continue;
        }
        set.add(request.offset_bytes, request.length_bytes);
    }
    Ok(set.bytes())
}

/// `config` with its fast tier (tier 0) set to `fast_bytes`: what a sweep
/// point runs with. The device model is built at that size too.
pub fn with_fast_bytes(config: &SimConfig, fast_bytes: u64) -> SimConfig {
    let mut config = config.clone();
    if config.stack.tiers.len() > 1 {
        config.stack.tiers[0].capacity_bytes = Some(fast_bytes);
    }
    config
}

/// The sentences a report prints about the capacities: what tiering loses
/// to whole segments at each size, sizes smaller than one segment, and a
/// `--cache-bytes` override.
pub fn capacity_notes(
    segment_bytes: u64,
    sizes: &[u64],
    tiering: bool,
    cache_bytes: Option<u64>,
) -> Vec<String> {
    let mut notes = Vec::new();
    if tiering {
        for &bytes in sizes {
            let segments = bytes / segment_bytes;
            let lost = bytes - segments * segment_bytes;
            if segments == 0 {
                notes.push(format!(
                    "fast tier {}: smaller than one {} segment, so the tiering policies get no fast-tier space at this size (they run as none)",
                    Bytes(bytes),
                    Bytes(segment_bytes)
                ));
            } else if lost > 0 {
                notes.push(format!(
                    "fast tier {}: tiering uses {segments} whole {} segment{} = {} and loses {} to the last partial segment; the caches use all of it",
                    Bytes(bytes),
                    Bytes(segment_bytes),
                    if segments == 1 { "" } else { "s" },
                    Bytes(segments * segment_bytes),
                    Bytes(lost)
                ));
            }
        }
    }
    if let Some(bytes) = cache_bytes {
        notes.push(format!(
            "--cache-bytes {}: the page caches get this instead of the fast tier's capacity, so they and the tiering policies do not compare at equal capacity",
            Bytes(bytes)
        ));
    }
    notes
}

/// One point of a curve: a policy at a fast-tier size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CurvePoint {
    pub policy: String,
    pub fast_bytes: u64,
    /// Caches: page hit ratio (`cache.hit_ratio`); tiering: the share of
    /// IO the fast tier served (`fast_io_share`).
    pub hit_ratio: f64,
    /// 1 − `hit_ratio`.
    pub miss_ratio: f64,
    pub avg_response_us: f64,
}

/// A run's hit ratio as the curves count it.
pub fn hit_ratio(run: &RunResult) -> f64 {
    run.cache
        .as_ref()
        .map_or(run.fast_io_share, |cache| cache.hit_ratio)
}

/// Every run as a curve point, by policy (in first-seen order), then size
/// ascending.
pub fn curve(runs: &[RunResult]) -> Vec<CurvePoint> {
    let mut policies: Vec<&str> = Vec::new();
    for run in runs {
        if !policies.contains(&run.policy.as_str()) {
            policies.push(&run.policy);
        }
    }
    let mut points = Vec::with_capacity(runs.len());
    for policy in policies {
        let mut of_policy: Vec<&RunResult> =
            runs.iter().filter(|run| run.policy == policy).collect();
        of_policy.sort_by_key(|run| run.fast_bytes);
        for run in of_policy {
            let hit = hit_ratio(run);
            points.push(CurvePoint {
                policy: run.policy.clone(),
                fast_bytes: run.fast_bytes,
                hit_ratio: hit,
                miss_ratio: 1.0 - hit,
                avg_response_us: run.avg_response_us,
            });
        }
    }
    points
}

/// The distinct fast-tier sizes of a report's runs, ascending.
pub fn sizes(report: &SimReport) -> Vec<u64> {
    let mut sizes: Vec<u64> = report.runs.iter().map(|run| run.fast_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_and_bad_ones_are_named() {
        assert_eq!(
            parse_fast_sizes("512MiB, 2GiB,5%").unwrap(),
            [
                FastSize::Bytes(512 << 20),
                FastSize::Bytes(2 << 30),
                FastSize::Percent(5.0)
            ]
        );
        for (list, named) in [
            ("1%,5x", "\"5x\""),
            ("0%", "\"0%\""),
            ("150%", "\"150%\""),
            ("0", "\"0\""),
            ("1GiB,,2GiB", "empty"),
            ("abc%", "\"abc%\""),
        ] {
            let message = parse_fast_sizes(list).unwrap_err();
            assert!(message.contains(named), "{list}: {message}");
            assert!(
                message.contains("percentage") || message.contains("size"),
                "{message}"
            );
        }
    }

    #[test]
    fn percentages_are_of_the_working_set_in_whole_pages_and_sizes_are_listed_once() {
        let sizes = parse_fast_sizes("10%,1MiB,100%").unwrap();
        // 10 % of 10 MiB is 1 MiB, listed again as 1MiB.
        let message = resolve(&sizes, Some(10 << 20)).unwrap_err();
        assert!(message.contains("entries 1 and 2"), "{message}");
        assert_eq!(
            resolve(&parse_fast_sizes("1%,50%").unwrap(), Some(1 << 20)).unwrap(),
            [8192, 512 << 10]
        );
        assert_eq!(
            resolve(&[FastSize::Percent(0.001)], Some(1 << 20)).unwrap(),
            [PAGE_BYTES]
        );
        assert!(resolve(&[FastSize::Percent(1.0)], None).is_err());
    }

    #[test]
    fn the_working_set_counts_each_4kib_block_once() {
        let mut set = WorkingSet::default();
        set.add(0, 4096);
        set.add(100, 10);
        set.add(4095, 2);
        set.add(1 << 30, 8192);
        set.add(5, 0);
        assert_eq!(set.bytes(), 4 * 4096);
    }

    #[test]
    fn notes_say_what_tiering_loses_to_whole_segments() {
        let notes = capacity_notes(1 << 30, &[64_000_000_000, 512 << 20, 2 << 30], true, None);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("59 whole"), "{}", notes[0]);
        assert!(notes[1].contains("smaller than one"), "{}", notes[1]);
        assert!(capacity_notes(1 << 30, &[512 << 20], false, None).is_empty());
        let override_note = capacity_notes(1 << 30, &[], false, Some(1 << 30));
        assert!(override_note[0].contains("not compare at equal capacity"));
    }
}
