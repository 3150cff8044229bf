//! End-to-end simulator speed: requests replayed per second, single-threaded,
//! from a native `.tierd` trace through device models and a strategy.
//! Results and the machine are in `BENCHMARKS.md` ("Simulator speed").
//!
//! `cargo bench -p tierd-sim --bench replay` writes a 10 M-request native
//! trace (the `usr_1` synthetic preset, seed 1, its first 10 M requests) to a
//! temporary directory and replays it in each scenario below, reporting wall
//! time and the thread's own CPU time (`/proc/thread-self/schedstat`: on the
//! shared 2-core machine wall time also counts the neighbours). Under
//! `cargo test --all-targets` (no `--bench` argument) the trace shrinks to
//! 20 000 requests, so the bench is exercised without slowing the tests.
//!
//! `TIERD_BENCH_REQUESTS=N` overrides the trace length;
//! `TIERD_BENCH_ONLY=TEXT` runs only the scenarios whose name contains TEXT.

use std::path::Path;

use tierd_common::clock::{Clock, SystemClock};
use tierd_device::DeviceModel;
use tierd_sim::testing::FixedLatencyDevice;
use tierd_sim::{Replay, SimConfig, Strategy, TierStack};
use tierd_trace::{create_writer, open_trace, OpenOptions, VolumeTable, WriteOptions};

fn full_size() -> bool {
    std::env::args().any(|argument| argument == "--bench")
}

fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn write_trace(path: &Path, requests: usize) -> u64 {
    let preset = tierd_synth::preset("usr_1").expect("preset");
    let generator = tierd_synth::Generator::new(preset, 1, tierd_synth::generator::MAX_HOURS)
        .expect("generator");
    let mut volumes = VolumeTable::new();
    volumes.intern(preset.volume_name);
    let mut writer =
        create_writer(path, tierd_trace::Format::Tierd, &WriteOptions::default()).expect("writer");
    for request in generator.take(requests) {
        writer.write_request(&request, &volumes).expect("write");
    }
    writer.finish().expect("finish");
    preset.volume_bytes
}

struct Scenario {
    name: &'static str,
    stack: &'static str,
    strategy: &'static str,
    speed: f64,
    /// Fixed-latency devices instead of the preset models: the engine's own cost.
    fixed_devices: bool,
}

const SCENARIOS: [Scenario; 17] = [
    Scenario {
        name: "engine only (fixed-latency devices), none",
        stack: "hdd-ssd",
        strategy: "none",
        speed: 1.0,
        fixed_devices: true,
    },
    Scenario {
        name: "engine only (fixed-latency devices), otf-ast",
        stack: "hdd-ssd",
        strategy: "otf-ast",
        speed: 1.0,
        fixed_devices: true,
    },
    Scenario {
        name: "engine only (fixed-latency devices), atsmf",
        stack: "ssd-mem",
        strategy: "atsmf",
        speed: 1.0,
        fixed_devices: true,
    },
    // The block cache's own cost (planning, eviction, adaptive's shadows
    // and promotion), without the device models' (issue 14 §3), each
    // eviction policy side by side.
    Scenario {
        name: "engine only (fixed-latency devices), fifo cache",
        stack: "ssd-mem",
        strategy: "fifo",
        speed: 1.0,
        fixed_devices: true,
    },
    Scenario {
        name: "engine only (fixed-latency devices), lru cache",
        stack: "ssd-mem",
        strategy: "lru",
        speed: 1.0,
        fixed_devices: true,
    },
    Scenario {
        name: "engine only (fixed-latency devices), arc cache",
        stack: "ssd-mem",
        strategy: "arc",
        speed: 1.0,
        fixed_devices: true,
    },
    Scenario {
        name: "engine only (fixed-latency devices), s3fifo cache",
        stack: "ssd-mem",
        strategy: "s3fifo",
        speed: 1.0,
        fixed_devices: true,
    },
    Scenario {
        name: "engine only (fixed-latency devices), adaptive",
        stack: "ssd-mem",
        strategy: "adaptive",
        speed: 1.0,
        fixed_devices: true,
    },
    Scenario {
        name: "hdd-ssd models, none, x1",
        stack: "hdd-ssd",
        strategy: "none",
        speed: 1.0,
        fixed_devices: false,
    },
    Scenario {
        name: "hdd-ssd models, otf-ast, x1",
        stack: "hdd-ssd",
        strategy: "otf-ast",
        speed: 1.0,
        fixed_devices: false,
    },
    Scenario {
        name: "hdd-ssd models, otf-ast, x8 (saturated HDD)",
        stack: "hdd-ssd",
        strategy: "otf-ast",
        speed: 8.0,
        fixed_devices: false,
    },
    Scenario {
        name: "ssd-mem models, atsmf, x1",
        stack: "ssd-mem",
        strategy: "atsmf",
        speed: 1.0,
        fixed_devices: false,
    },
    Scenario {
        name: "ssd-mem models, lru cache (4 KiB pages), x1",
        stack: "ssd-mem",
        strategy: "lru",
        speed: 1.0,
        fixed_devices: false,
    },
    Scenario {
        name: "ssd-mem models, s3fifo cache, x1",
        stack: "ssd-mem",
        strategy: "s3fifo",
        speed: 1.0,
        fixed_devices: false,
    },
    Scenario {
        name: "ssd-mem models, adaptive, x1",
        stack: "ssd-mem",
        strategy: "adaptive",
        speed: 1.0,
        fixed_devices: false,
    },
    Scenario {
        name: "hdd-ssd models, s3fifo cache, x1",
        stack: "hdd-ssd",
        strategy: "s3fifo",
        speed: 1.0,
        fixed_devices: false,
    },
    Scenario {
        name: "hdd-ssd models, adaptive, x1",
        stack: "hdd-ssd",
        strategy: "adaptive",
        speed: 1.0,
        fixed_devices: false,
    },
];

fn fixed_devices(config: &SimConfig) -> Vec<Box<dyn DeviceModel>> {
    (0..config.stack.tiers.len())
        .map(|tier| {
            let capacity = config.tier_capacity_bytes(tier);
            let (latency_ns, servers) = if tier + 1 == config.stack.tiers.len() {
                (500_000, 4)
            } else {
                (50_000, 8)
            };
            Box::new(
                FixedLatencyDevice::new("fixed", capacity, latency_ns, latency_ns)
                    .with_servers(servers),
            ) as Box<dyn DeviceModel>
        })
        .collect()
}

fn main() {
    let requests: usize = std::env::var("TIERD_BENCH_REQUESTS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(if full_size() { 10_000_000 } else { 20_000 });
    let directory = tempfile::tempdir().expect("temp dir");
    let path = directory.path().join("usr_1.tierd");
    let clock = SystemClock::new();
    let volume_bytes = write_trace(&path, requests);
    let written_ns = clock.now_ns();
    let file_bytes = std::fs::metadata(&path).map_or(0, |metadata| metadata.len());
    println!(
        "trace: {requests} requests of synthetic usr_1 (seed 1), {:.1} MB native, written in {:.2} s",
        file_bytes as f64 / 1e6,
        written_ns as f64 / 1e9
    );

    // Reading alone, for reference.
    let cpu_start = thread_cpu_ns();
    let wall_start = clock.now_ns();
    let mut reader = open_trace(&path, &OpenOptions::default()).expect("open");
    let mut count = 0u64;
    while reader.next_request().expect("read").is_some() {
        count += 1;
    }
    report(
        "read the trace only",
        count,
        clock.now_ns() - wall_start,
        thread_cpu_ns() - cpu_start,
    );
    assert_eq!(count as usize, requests);

    let only = std::env::var("TIERD_BENCH_ONLY").unwrap_or_default();
    for scenario in SCENARIOS
        .iter()
        .filter(|scenario| scenario.name.contains(&only))
    {
        let stack = TierStack::preset(scenario.stack).expect("stack");
        let mut config = SimConfig::new(stack, volume_bytes);
        config.replay = Replay::OpenLoop {
            speed: scenario.speed,
        };
        let strategy = Strategy::parse(scenario.strategy).expect("strategy");
        let mut reader = open_trace(&path, &OpenOptions::default()).expect("open");
        let cpu_start = thread_cpu_ns();
        let wall_start = clock.now_ns();
        let result = if scenario.fixed_devices {
            let controller = tierd_sim::build_controller(&config, &strategy).expect("controller");
            tierd_sim::run_with(
                &config,
                strategy.name(),
                controller,
                fixed_devices(&config),
                reader.as_mut(),
                &mut |_| {},
            )
        } else {
            tierd_sim::run(&config, &strategy, reader.as_mut(), &mut |_| {})
        }
        .expect("run");
        let wall_ns = clock.now_ns() - wall_start;
        let cpu_ns = thread_cpu_ns() - cpu_start;
        assert_eq!(result.requests as usize, requests, "{}", scenario.name);
        report(scenario.name, result.requests, wall_ns, cpu_ns);
        let device_ios: u64 = result.tiers.iter().map(|tier| tier.counters.ios()).sum();
        println!(
            "{:<48} device IOs {device_ios} ({:.2} per request), {} moves, {:.1} GB moved, {:.1} h replayed",
            "",
            device_ios as f64 / result.requests.max(1) as f64,
            result.moves,
            result.migrated_bytes as f64 / 1e9,
            result.elapsed_ns as f64 / 3.6e12
        );
    }
}

fn report(name: &str, requests: u64, wall_ns: u64, cpu_ns: u64) {
    let rate = |ns: u64| {
        if ns == 0 {
            0.0
        } else {
            requests as f64 * 1e3 / ns as f64
        }
    };
    println!(
        "{name:<48} {requests:>10} requests  wall {:>7.2} s ({:>5.2} M/s)  cpu {:>7.2} s ({:>5.2} M/s)",
        wall_ns as f64 / 1e9,
        rate(wall_ns),
        cpu_ns as f64 / 1e9,
        rate(cpu_ns),
    );
}
