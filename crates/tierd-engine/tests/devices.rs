//! The device layer as the engine stacks it: stats over emulated latency over
//! fault injection over a real backend, all behind `Arc<dyn BlockDevice>`.

use std::sync::Arc;

use tierd_common::clock::{Clock, ManualClock};
use tierd_device::DevicePreset;
use tierd_engine::device::fault::{FaultConfig, FaultDevice};
use tierd_engine::device::file::FileDevice;
use tierd_engine::device::latency::{LatencyDevice, TimeMode};
use tierd_engine::device::memory::MemoryDevice;
use tierd_engine::device::stats::StatsDevice;
use tierd_engine::device::{BlockDevice, DeviceErrorKind};

const SIZE_BYTES: u64 = 16 << 20;

struct Stack {
    clock: Arc<ManualClock>,
    fault: Arc<FaultDevice>,
    latency: Arc<LatencyDevice>,
    top: Arc<StatsDevice>,
}

fn stack(backend: Arc<dyn BlockDevice>, preset: DevicePreset) -> Stack {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let fault = Arc::new(FaultDevice::new(
        backend,
        FaultConfig::default(),
        99,
        clock.clone(),
    ));
    let model = preset.build(Some(SIZE_BYTES), 3).unwrap();
    let latency = Arc::new(
        LatencyDevice::new(fault.clone(), model, clock.clone()).with_time_mode(TimeMode::Virtual),
    );
    let top = Arc::new(StatsDevice::new(latency.clone(), clock.clone()));
    Stack {
        clock,
        fault,
        latency,
        top,
    }
}

#[test]
fn stats_see_the_emulated_latency_of_a_file_backend() {
    let directory = tempfile::tempdir().unwrap();
    let file = FileDevice::open(
        directory.path().join("hdd.img"),
        Some(SIZE_BYTES),
        false,
        true,
    )
    .unwrap();
    let stack = stack(Arc::new(file), DevicePreset::Savvio10k4);
    let device: Arc<dyn BlockDevice> = stack.top.clone();

    let start_ns = stack.clock.now_ns();
    device.write_at(4 << 20, &[0xC3; 8192]).unwrap();
    let write_ns = stack.clock.now_ns() - start_ns;
    let mut buf = vec![0u8; 8192];
    device.read_at(4 << 20, &mut buf).unwrap();
    let read_ns = stack.clock.now_ns() - start_ns - write_ns;
    assert!(buf.iter().all(|&b| b == 0xC3));
    device.flush().unwrap();

    // Milliseconds of disk time, all of it seen by the stats wrapper.
    assert!(write_ns > 100_000, "{write_ns} ns");
    let stats = device.stats().unwrap();
    assert_eq!((stats.reads, stats.writes, stats.flushes), (1, 1, 1));
    assert_eq!(stats.write_latency.sum_ns(), u128::from(write_ns));
    assert_eq!(stats.read_latency.sum_ns(), u128::from(read_ns));
    // One sample: every percentile is exact.
    assert_eq!(stats.write_latency.quantile_ns(0.5), Some(write_ns));
    assert_eq!(stats.busy_ns, write_ns + read_ns);
    let model = stack.latency.model_counters();
    assert_eq!((model.reads, model.writes), (1, 1));
}

#[test]
fn injected_faults_reach_the_stats_and_leave_data_alone() {
    let memory = Arc::new(MemoryDevice::new("ram", SIZE_BYTES));
    let stack = stack(memory.clone(), DevicePreset::X25e);
    let device: Arc<dyn BlockDevice> = stack.top.clone();
    device.write_at(0, &[1; 4096]).unwrap();

    stack.fault.set_config(FaultConfig {
        write_error_probability: 1.0,
        ..FaultConfig::default()
    });
    let error = device.write_at(0, &[2; 4096]).unwrap_err();
    assert_eq!(error.errno(), libc::EIO);
    let mut buf = [0u8; 4096];
    memory.read_at(0, &mut buf).unwrap();
    assert_eq!(buf, [1; 4096], "the failed write changed nothing");

    stack.fault.set_config(FaultConfig::default());
    stack.fault.set_gone(true);
    assert_eq!(
        device.read_at(0, &mut buf).unwrap_err().kind,
        DeviceErrorKind::Gone
    );
    stack.fault.set_gone(false);
    device.read_at(0, &mut buf).unwrap();

    let stats = device.stats().unwrap();
    assert_eq!(stats.errors, 2);
    assert_eq!(stats.writes, 1);
    assert_eq!(stats.reads, 1);
    let faults = stack.fault.counters();
    assert_eq!((faults.writes_failed, faults.gone_ops), (1, 1));
}

/// Writes `count` MiB sequentially from `offset` to the emulated tier,
/// 1 MiB at a time; its SMR model's counters after.
fn smr_after_writes(
    device: &Arc<dyn BlockDevice>,
    offset: u64,
    count: u64,
) -> tierd_device::model::smr::SmrStats {
    let data = vec![7u8; 1 << 20];
    for index in 0..count {
        device.write_at(offset + index * (1 << 20), &data).unwrap();
    }
    device.smr_model_stats().expect("an emulated SMR tier")
}

/// A tier's `model_params` and `model_file` reach the `LatencyDevice` the
/// engine wraps it in (`engine::build_tier`): the SMR model runs with the
/// overridden band. 8 MiB written in order from a band's first byte
/// replaces that band (straight to the platter, nothing for the drive to
/// clean); the same writes into the middle of a band of the preset's size
/// go through the media cache and leave the band dirty.
#[test]
fn an_emulated_tier_runs_its_model_with_the_overridden_parameters() {
    use tierd_engine::config::Config;
    let dir = tempfile::tempdir().unwrap();
    let fitted = include_str!("data/fitted-archive8tb.toml");
    std::fs::write(dir.path().join("my-disk.toml"), fitted).unwrap();
    let fitted_band = toml::from_str::<toml::Table>(fitted).unwrap()["tier"][0]["model"]
        ["band_bytes"]
        .as_integer()
        .unwrap() as u64;
    let preset_band = tierd_device::model::smr::SmrConfig::archive_8tb().band_bytes;
    assert_ne!(fitted_band, preset_band);
    let text = r#"
data_dir = "data"
[server]
listen = ["unix:tierd.sock"]
[[tier]]
name = "params"
backend = "file"
path = "params.img"
size = "256MiB"
model = "archive8tb"
model_params = { band_bytes = 8388608 }
[[tier]]
name = "file"
backend = "file"
path = "file.img"
size = "256MiB"
model_file = "my-disk.toml"
[[tier]]
name = "preset"
backend = "file"
path = "preset.img"
size = "256MiB"
model = "archive8tb"
[[volume]]
name = "a"
size = "256MiB"
segment = "64MiB"
tiers = ["params"]
[[volume]]
name = "b"
size = "256MiB"
segment = "64MiB"
tiers = ["file"]
[[volume]]
name = "c"
size = "256MiB"
segment = "64MiB"
tiers = ["preset"]
"#;
    let config = Config::parse(text, "test.toml", dir.path()).unwrap();
    assert_eq!(config.tiers[0].smr_geometry(), Some((8 << 20, 0)));
    assert_eq!(config.tiers[1].smr_geometry(), Some((fitted_band, 0)));
    assert_eq!(config.tiers[2].smr_geometry(), Some((preset_band, 0)));
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let build = |index: usize| {
        tierd_engine::engine::build_tier(&config.tiers[index], &clock, 1, true)
            .unwrap()
            .device
    };
    // Band 1 of the overridden model, whole.
    let params = smr_after_writes(&build(0), 8 << 20, 8);
    assert_eq!(
        (params.direct_writes, params.cache_writes),
        (8, 0),
        "{params:?}"
    );
    assert_eq!(params.dirty_bands, 0, "{params:?}");
    // The same bytes on the preset's model: inside band 0.
    let preset = build(2);
    let inside = smr_after_writes(&preset, 8 << 20, 8);
    assert_eq!(
        (inside.direct_writes, inside.cache_writes),
        (0, 8),
        "{inside:?}"
    );
    assert_eq!(inside.dirty_bands, 1, "{inside:?}");
    // From the fitted band's first byte: a band start only for the fitted
    // model.
    let file = smr_after_writes(&build(1), fitted_band, 1);
    assert_eq!((file.direct_writes, file.cache_writes), (1, 0), "{file:?}");
    let preset = smr_after_writes(&preset, fitted_band, 1);
    assert_eq!(preset.cache_writes, inside.cache_writes + 1, "{preset:?}");
}

/// `model_mode = "predict"`: the model follows the device without adding
/// latency (the clock never moves for an operation), and tracks what an
/// SMR disk does with the writes: a small write lands in its media cache
/// and dirties a band, which the model cleans once the disk has been idle.
#[test]
fn a_predicting_model_adds_no_latency_and_tracks_the_smr_media_cache() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let memory: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new("smr", 1 << 30));
    let model = DevicePreset::Archive8tb.build(Some(1 << 30), 3).unwrap();
    let latency = LatencyDevice::new(memory, model, clock.clone())
        .with_time_mode(TimeMode::Virtual)
        .predicting();
    assert!(latency.predicts_only());
    let device: Arc<dyn BlockDevice> = Arc::new(StatsDevice::new(Arc::new(latency), clock.clone()));
    let start_ns = clock.now_ns();
    device.write_at(12 << 10, &[7u8; 4096]).unwrap();
    let mut back = [0u8; 4096];
    device.read_at(12 << 10, &mut back).unwrap();
    assert_eq!(back, [7u8; 4096]);
    assert_eq!(clock.now_ns(), start_ns, "a predicting model added latency");
    let stats = device
        .smr_model_stats()
        .expect("the SMR model, through the stats wrapper");
    assert_eq!((stats.cache_writes, stats.dirty_bands), (1, 1), "{stats:?}");
    clock.advance_ns(30_000_000_000);
    let stats = device.smr_model_stats().unwrap();
    assert_eq!(
        (stats.dirty_bands, stats.bands_cleaned),
        (0, 1),
        "{stats:?}"
    );
}
