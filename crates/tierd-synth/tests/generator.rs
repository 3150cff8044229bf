//! Properties every preset's stream keeps: determinism, time order, offsets
//! inside the volume, the busy window recurring, the expected count.

use tierd_common::units::{NS_PER_SECOND, SECTOR_BYTES};
use tierd_synth::{preset, presets, relative_error, Generator, SynthError};
use tierd_trace::Request;

fn generate(name: &str, seed: u64, hours: f64) -> Vec<Request> {
    Generator::new(preset(name).expect("preset"), seed, hours)
        .expect("generator")
        .collect()
}

#[test]
fn same_seed_same_stream_other_seed_other_stream() {
    for preset in presets() {
        let first = generate(preset.name, 7, 0.05);
        let again = generate(preset.name, 7, 0.05);
        let other = generate(preset.name, 8, 0.05);
        assert!(
            !first.is_empty(),
            "{}: no request in 3 minutes",
            preset.name
        );
        assert_eq!(first, again, "{}: seed 7 twice", preset.name);
        assert_ne!(first, other, "{}: seeds 7 and 8", preset.name);
    }
}

#[test]
fn a_shorter_run_is_a_prefix_of_a_longer_one() {
    for name in ["usr_1", "proj_2", "hm_0"] {
        let short = generate(name, 3, 0.02);
        let long = generate(name, 3, 0.05);
        assert!(short.len() < long.len(), "{name}");
        assert_eq!(short[..], long[..short.len()], "{name}");
    }
}

#[test]
fn requests_are_ordered_aligned_and_inside_the_volume() {
    for preset in presets() {
        // The whole default window for the small presets; the first 15
        // minutes for the busy ones keep the debug build quick.
        let hours = preset.default_hours.min(0.25);
        let end_ns = (hours * 3600.0 * NS_PER_SECOND as f64) as u64;
        let requests = generate(preset.name, 1, hours);
        assert!(
            requests[0].time_ns < 10 * NS_PER_SECOND,
            "{}: late first request",
            preset.name
        );
        let mut previous_ns = 0;
        let mut writes = 0usize;
        for request in &requests {
            assert!(
                request.time_ns >= previous_ns,
                "{}: time went back at {request:?}",
                preset.name
            );
            previous_ns = request.time_ns;
            assert!(
                request.time_ns < end_ns,
                "{}: {request:?} after the end",
                preset.name
            );
            assert_eq!(request.volume, 0);
            assert_eq!(
                request.offset_bytes % SECTOR_BYTES,
                0,
                "{}: {request:?}",
                preset.name
            );
            assert!(request.length_bytes > 0, "{}: {request:?}", preset.name);
            assert!(
                request.end_bytes() <= preset.volume_bytes,
                "{}: {request:?} past {} bytes",
                preset.name,
                preset.volume_bytes
            );
            assert_eq!(request.response_ns, None);
            writes += usize::from(request.op.is_write());
        }
        if let Some(target) = preset.targets.write_ratio {
            let ratio = writes as f64 / requests.len() as f64;
            assert!(
                (ratio - target.value).abs() < 0.03,
                "{}: write ratio {ratio}",
                preset.name
            );
        }
    }
}

#[test]
fn sizes_follow_the_size_mix() {
    let preset = preset("src1_1").unwrap();
    let requests = generate("src1_1", 1, 0.1);
    for request in &requests {
        assert!(
            preset
                .model
                .sizes
                .iter()
                .any(|size| size.bytes == request.length_bytes),
            "{request:?} not in the mix"
        );
    }
    let total: f64 = preset.model.sizes.iter().map(|size| size.weight).sum();
    let four_k = preset
        .model
        .sizes
        .iter()
        .find(|size| size.bytes == 4096)
        .unwrap()
        .weight
        / total;
    let measured = requests
        .iter()
        .filter(|request| request.length_bytes == 4096)
        .count() as f64
        / requests.len() as f64;
    assert!(
        (measured - four_k).abs() < 0.02,
        "4 KiB share {measured} vs {four_k}"
    );
}

#[test]
fn the_busy_window_recurs_and_quiet_time_runs_at_the_quiet_rate() {
    // web_2: a 6 h busy state once a week, background only in between.
    let preset = preset("web_2").unwrap();
    let model = &preset.model;
    let (window_h, recurrence_h) = (model.window_hours, model.recurrence_hours);
    assert!(recurrence_h > window_h + 1.0, "web_2 must have quiet time");
    let requests = generate("web_2", 5, recurrence_h + window_h);
    let second_s = NS_PER_SECOND as f64;
    let count = |from_h: f64, to_h: f64| {
        let (from_ns, to_ns) = (from_h * 3600.0 * second_s, to_h * 3600.0 * second_s);
        requests
            .iter()
            .filter(|request| {
                (request.time_ns as f64) >= from_ns && (request.time_ns as f64) < to_ns
            })
            .count() as f64
    };
    let first_window = count(0.0, window_h);
    let quiet = count(window_h, recurrence_h);
    let second_window = count(recurrence_h, recurrence_h + window_h);
    let window_expected = model.window_mean_iops * window_h * 3600.0;
    assert!(
        relative_error(first_window, window_expected).abs() < 0.01,
        "{first_window}"
    );
    assert!(
        relative_error(second_window, window_expected).abs() < 0.01,
        "{second_window}"
    );
    let quiet_expected = model.quiet_mean_iops * (recurrence_h - window_h) * 3600.0;
    assert!(
        relative_error(quiet, quiet_expected).abs() < 0.05,
        "{quiet} vs {quiet_expected}"
    );
    // Each window gets its own plan: the second is not a copy of the first.
    let offsets = |from_h: f64| {
        let from_ns = (from_h * 3600.0 * second_s) as u64;
        requests
            .iter()
            .filter(|request| request.time_ns >= from_ns)
            .take(100)
            .map(|request| request.offset_bytes)
            .collect::<Vec<_>>()
    };
    assert_ne!(offsets(0.0), offsets(recurrence_h));
}

#[test]
fn expected_requests_match_the_generated_count() {
    for name in ["web_2", "usr_2", "hm_0"] {
        let preset = preset(name).unwrap();
        let hours = preset.default_hours;
        let expected = Generator::expected_requests(preset, 4, hours).unwrap();
        let generated = generate(name, 4, hours).len() as f64;
        // Poisson: the standard deviation is sqrt(expected), well under 1%.
        assert!(
            relative_error(generated, expected).abs() < 5.0 / expected.sqrt(),
            "{name}: {generated} generated, {expected} expected"
        );
    }
}

#[test]
fn bad_hours_are_refused_with_the_reason() {
    let preset = preset("usr_1").unwrap();
    for hours in [0.0, -1.0, f64::NAN, f64::INFINITY, 2.0e6] {
        match Generator::new(preset, 1, hours) {
            Err(SynthError::BadHours { .. }) => {}
            other => panic!("hours {hours}: {:?}", other.map(|_| "a generator")),
        }
    }
    let message = Generator::new(preset, 1, -1.0).err().unwrap().to_string();
    assert!(
        message.contains("hours") && message.contains("-1"),
        "{message}"
    );
}
