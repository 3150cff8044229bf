//! Each shape has the property its name claims, measured on its output
//! (not on the model), and the same seed gives the same trace.

use tierd_common::hash::FastMap;
use tierd_common::units::NS_PER_SECOND;
use tierd_trace::Request;

use crate::{label, preset, shape, shapes, Generator};

const GIB: u64 = 1 << 30;
const REGION_BYTES: u64 = 64 << 20;

fn requests(name: &str, seed: u64, hours: f64) -> Vec<Request> {
    Generator::new(shape(name).unwrap(), seed, hours)
        .unwrap()
        .collect()
}

/// Requests per (time bin, place) with places of `place_bytes`.
fn counts(requests: &[Request], bin_s: u64, place_bytes: u64) -> Vec<FastMap<u64, u64>> {
    let mut bins: Vec<FastMap<u64, u64>> = Vec::new();
    for request in requests {
        let bin = (request.time_ns / (bin_s * NS_PER_SECOND)) as usize;
        if bin >= bins.len() {
            bins.resize_with(bin + 1, FastMap::default);
        }
        *bins[bin]
            .entry(request.offset_bytes / place_bytes)
            .or_default() += 1;
    }
    bins
}

/// Lengths (in bins) of the runs during which a place holds at least
/// `share` of its bin's requests, and the share of all requests such hot
/// (bin, place) pairs take.
fn hot_runs(bins: &[FastMap<u64, u64>], share: f64) -> (Vec<usize>, f64) {
    let mut open: FastMap<u64, usize> = FastMap::default();
    let mut runs = Vec::new();
    let (mut hot, mut all) = (0u64, 0u64);
    for bin in bins {
        let total: u64 = bin.values().sum();
        all += total;
        let mut next: FastMap<u64, usize> = FastMap::default();
        for (&place, &count) in bin {
            if count >= 5 && count as f64 >= share * total as f64 {
                hot += count;
                next.insert(place, open.get(&place).copied().unwrap_or(0) + 1);
            }
        }
        for (place, length) in &open {
            if !next.contains_key(place) {
                runs.push(*length);
            }
        }
        open = next;
    }
    runs.extend(open.values());
    runs.sort_unstable();
    (runs, hot as f64 / all.max(1) as f64)
}

fn percentile(sorted: &[usize], fraction: f64) -> usize {
    sorted[((sorted.len() - 1) as f64 * fraction) as usize]
}

/// The busiest place of each bin and its share of the bin.
fn hottest(bins: &[FastMap<u64, u64>]) -> Vec<(u64, f64)> {
    bins.iter()
        .filter(|bin| !bin.is_empty())
        .map(|bin| {
            let total: u64 = bin.values().sum();
            let (&place, &count) = bin
                .iter()
                .max_by_key(|(place, count)| (**count, std::cmp::Reverse(**place)))
                .unwrap();
            (place, count as f64 / total as f64)
        })
        .collect()
}

/// Share of all requests the busiest `fraction` of places take.
fn top_share(requests: &[Request], place_bytes: u64, places: u64, fraction: f64) -> f64 {
    let mut per_place: FastMap<u64, u64> = FastMap::default();
    for request in requests {
        *per_place
            .entry(request.offset_bytes / place_bytes)
            .or_default() += 1;
    }
    let mut counts: Vec<u64> = per_place.into_values().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let top = ((places as f64 * fraction).ceil() as usize).max(1);
    counts.iter().take(top).sum::<u64>() as f64 / requests.len() as f64
}

#[test]
fn same_seed_same_trace_and_every_label_says_generated_shape() {
    for shape in shapes() {
        let first = requests(shape.name, 7, 0.05);
        assert!(!first.is_empty(), "{}", shape.name);
        assert_eq!(first, requests(shape.name, 7, 0.05), "{}", shape.name);
        assert_ne!(first, requests(shape.name, 8, 0.05), "{}", shape.name);
        assert!(first.iter().all(|r| r.end_bytes() <= shape.volume_bytes));
        let text = label(shape, 7, 1.0);
        assert!(text.starts_with("synthetic (generated shape "), "{text}");
        assert!(text.ends_with("not a real trace"), "{text}");
        // Reachable wherever a preset name is accepted.
        let named = preset(&format!("shape:{}", shape.name)).unwrap();
        assert_eq!(named.name, shape.name);
        // Short enough for a grid: an hour, at most ~1 M requests.
        let expected = shape.model.window_mean_iops * 3600.0 * shape.default_hours;
        assert!(expected <= 1_000_000.0, "{}: {expected}", shape.name);
    }
    let error = preset("shape:nope").unwrap_err().to_string();
    assert!(error.contains("walking"), "{error}");
    assert!(preset("nope")
        .unwrap_err()
        .to_string()
        .contains("shape:no-heat"));
}

#[test]
fn boot_storm_concentrations_are_short_and_scattered() {
    let trace = requests("boot-storm", 1, 1.0);
    let (runs, hot) = hot_runs(&counts(&trace, 10, REGION_BYTES), 0.04);
    assert!(runs.len() >= 100, "{} concentrations", runs.len());
    // Seconds to a minute: 95% last at most 80 s (8 bins of 10 s).
    assert!(
        percentile(&runs, 0.95) <= 8,
        "{:?}",
        &runs[runs.len() - 20..]
    );
    assert!(hot >= 0.3, "hot share {hot}");
}

#[test]
fn walking_concentration_moves_across_segments() {
    let trace = requests("walking", 1, 1.0);
    let hottest = hottest(&counts(&trace, 120, GIB));
    let mut segments: Vec<u64> = hottest.iter().map(|(segment, _)| *segment).collect();
    let changes = segments
        .windows(2)
        .filter(|pair| pair[0] != pair[1])
        .count();
    assert!(changes * 2 >= segments.len(), "{segments:?}");
    segments.sort_unstable();
    segments.dedup();
    assert!(segments.len() >= 10, "{segments:?}");
    // One concentration: its segment takes a large share of each bin.
    let concentrated = hottest.iter().filter(|(_, share)| *share >= 0.35).count();
    assert!(concentrated * 10 >= hottest.len() * 9, "{hottest:?}");
}

#[test]
fn long_write_spikes_last_tens_of_minutes_and_are_write_heavy() {
    let trace = requests("long-write-spikes", 1, 1.0);
    let bins = counts(&trace, 300, GIB);
    let (runs, _) = hot_runs(&bins, 0.2);
    // A segment that stays hot for 20 minutes or more (4 bins of 5 min).
    assert!(runs.iter().any(|length| *length >= 4), "{runs:?}");
    // Its IO is mostly writes.
    let hottest_segment = hottest(&[counts(&trace, 3600, GIB).remove(0)])[0].0;
    let (mut writes, mut all) = (0, 0);
    for request in &trace {
        if request.offset_bytes / GIB == hottest_segment {
            all += 1;
            writes += u64::from(request.op == tierd_trace::Op::Write);
        }
    }
    assert!(writes as f64 >= 0.6 * all as f64, "{writes} of {all}");
    // Short noise beside it: short hot runs at 64 MiB granularity exist.
    let (short, _) = hot_runs(&counts(&trace, 10, REGION_BYTES), 0.03);
    assert!(
        short.iter().filter(|length| **length <= 4).count() >= 50,
        "{}",
        short.len()
    );
}

#[test]
fn short_spikes_dominate_the_load_and_last_tens_of_seconds() {
    let trace = requests("short-spikes", 1, 1.0);
    let (runs, hot) = hot_runs(&counts(&trace, 10, REGION_BYTES), 0.05);
    assert!(hot >= 0.5, "hot share {hot}");
    assert!(
        percentile(&runs, 0.95) <= 9,
        "{:?}",
        &runs[runs.len() - 20..]
    );
    assert!(percentile(&runs, 0.5) >= 2, "{runs:?}");
}

#[test]
fn no_heat_top_one_percent_takes_about_one_percent() {
    let shape = shape("no-heat").unwrap();
    let trace = requests("no-heat", 1, 1.0);
    let places = shape.volume_bytes / REGION_BYTES;
    let share = top_share(&trace, REGION_BYTES, places, 0.01);
    assert!((0.008..0.015).contains(&share), "top 1% share {share}");
}

#[test]
fn large_working_set_is_skewed_but_wide() {
    let shape = shape("large-working-set").unwrap();
    let trace = requests("large-working-set", 1, 1.0);
    let mut blocks: Vec<u64> = trace
        .iter()
        .flat_map(|r| r.offset_bytes / 4096..r.end_bytes().div_ceil(4096))
        .collect();
    blocks.sort_unstable();
    blocks.dedup();
    let touched_bytes = blocks.len() as u64 * 4096;
    eprintln!(
        "large-working-set: working set {touched_bytes} bytes, {} requests",
        trace.len()
    );
    assert!(touched_bytes >= 4 * GIB, "working set {touched_bytes}");
    let places = shape.volume_bytes / REGION_BYTES;
    let top10 = top_share(&trace, REGION_BYTES, places, 0.1);
    let top1 = top_share(&trace, REGION_BYTES, places, 0.01);
    assert!(top10 >= 0.3, "top 10% {top10}");
    assert!(top1 <= 0.25, "top 1% {top1}");
}
