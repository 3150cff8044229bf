//! `tierd probe` and `tierd model fit` end to end (docs/probe.md): the
//! refusals, the JSON interface, paper 001's effects on the emulated
//! Archive 8 TB at a small scale (virtual time), a plain file with
//! O_DIRECT, and a fit written as a tier stack the simulator loads.

mod common;

use std::path::Path;

use common::serve::ServeProcess as Server;
use serde_json::Value;

/// A sparse file of `bytes`.
fn sparse(directory: &Path, name: &str, bytes: u64) -> std::path::PathBuf {
    let path = directory.join(name);
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(bytes).unwrap();
    path
}

fn json(output: &std::process::Output) -> Value {
    assert!(
        output.status.success(),
        "tierd failed:\n{}",
        common::stderr(output)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("not JSON ({error}):\n{}", common::stdout(output)))
}

fn combination<'a>(value: &'a Value, write: &str, read: &str) -> Vec<&'a Value> {
    value["combinations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["write"] == write && c["read"] == read)
        .collect()
}

#[test]
fn probe_refuses_without_destructive_and_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let disk = sparse(dir.path(), "disk.img", 1 << 30);
    let output = common::tierd(&["probe", common::path_arg(&disk), "--scale", "0.01"]);
    assert!(!output.status.success());
    let message = common::stderr(&output);
    assert!(message.contains("--destructive"), "{message}");
    assert!(message.contains("disk.img"), "{message}");
}

#[test]
fn probe_refuses_a_file_smaller_than_it_needs_and_says_how_big() {
    let dir = tempfile::tempdir().unwrap();
    let disk = sparse(dir.path(), "disk.img", 8 << 20);
    let output = common::tierd(&[
        "probe",
        common::path_arg(&disk),
        "--destructive",
        "--model",
        "smr-archive8tb",
        "--scale",
        "0.01",
    ]);
    assert!(!output.status.success());
    let message = common::stderr(&output);
    // 10 GiB × 0.01 = 102 MiB written and read from byte 0.
    assert!(message.contains("needs at least"), "{message}");
    assert!(message.contains("106954752 bytes"), "{message}");
    assert!(message.contains("truncate -s"), "{message}");
}

#[test]
fn probe_refuses_a_tier_file_of_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::small_stack_config("data", "", common::FastTier::Memory, "");
    let config_path = common::write_file(dir.path(), "config.toml", &config);
    let mut server = Server::start(dir.path(), Some(&config_path));
    let tier = dir.path().join("data/disk.img");
    let output = common::tierd(&[
        "probe",
        common::path_arg(&tier),
        "--destructive",
        "--model",
        "archive8tb",
        "--scale",
        "0.001",
    ]);
    let message = common::stderr(&output);
    assert!(!output.status.success(), "{message}");
    assert!(message.contains("locked"), "{message}");
    assert!(
        message.contains(&format!("process {}", server.pid())),
        "{message}"
    );
    server.stop();
    // The server gone, the same probe runs.
    let output = common::tierd(&[
        "probe",
        common::path_arg(&tier),
        "--destructive",
        "--model",
        "archive8tb",
        "--scale",
        "0.001",
        "--out",
        common::path_arg(&dir.path().join("out")),
    ]);
    assert!(output.status.success(), "{}", common::stderr(&output));
}

#[test]
fn emulated_archive8tb_shows_slow_reads_after_random_writes_and_none_before() {
    let dir = tempfile::tempdir().unwrap();
    let disk = sparse(dir.path(), "disk.img", 8 << 30);
    let out = dir.path().join("out");
    let output = common::tierd(&[
        "probe",
        common::path_arg(&disk),
        "--destructive",
        "--model",
        "smr-archive8tb",
        "--scale",
        "0.01",
        "--json",
        "--out",
        common::path_arg(&out),
    ]);
    let value = json(&output);
    assert_eq!(value["model"], "smr-archive8tb");
    assert_eq!(value["scale"], 0.01);
    let keys = [
        "write",
        "read",
        "written_bytes",
        "reads",
        "slow_fraction_100ms",
        "p50_ms",
        "p99_ms",
        "burst_start_s",
        "burst_length_s",
    ];
    let all = value["combinations"].as_array().unwrap();
    assert_eq!(all.len(), 8, "{value:#}");
    for c in all {
        for key in keys {
            assert!(c.get(key).is_some(), "{key} missing in {c}");
        }
        assert_eq!(c["reads"], 102, "{c}");
        let fraction = c["slow_fraction_100ms"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&fraction), "{c}");
        assert!(c["p50_ms"].as_f64().unwrap() <= c["p99_ms"].as_f64().unwrap());
    }
    for read in ["sr", "rr"] {
        let before = combination(&value, "none", read)[0];
        assert_eq!(before["slow_fraction_100ms"], 0.0, "{before}");
        assert!(before["burst_start_s"].is_null(), "{before}");
    }
    let rw_rr = combination(&value, "rw", "rr");
    assert_eq!(rw_rr.len(), 3, "one per amount written");
    let largest = rw_rr.last().unwrap();
    let sw_rr = combination(&value, "sw", "rr")[0];
    let slow_rw = largest["slow_fraction_100ms"].as_f64().unwrap();
    let slow_sw = sw_rr["slow_fraction_100ms"].as_f64().unwrap();
    assert!(slow_rw > slow_sw, "rw {slow_rw} vs sw {slow_sw}");
    assert!(slow_rw >= 0.05, "{largest}");
    // Paper 001: 3 % after sequential writes (bands that the 1 MiB writes
    // cross mid-write need a repair), far below random writes' 15 %.
    assert!(slow_sw > 0.0 && slow_sw <= 0.06, "{sw_rr}");
    // Random writes of 1, 5 and 10 GiB (× 0.01): the burst lasts longer
    // the more was written.
    let lengths: Vec<f64> = rw_rr
        .iter()
        .map(|c| c["burst_length_s"].as_f64().unwrap())
        .collect();
    assert!(
        lengths[0] < lengths[1] && lengths[1] < lengths[2],
        "{lengths:?}"
    );
    // ... and starts later (paper 001: the start is predictable from the
    // amount written).
    let starts: Vec<f64> = rw_rr
        .iter()
        .map(|c| c["burst_start_s"].as_f64().unwrap())
        .collect();
    assert!(starts[0] < starts[1] && starts[1] < starts[2], "{starts:?}");
    // The files.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 3);
    let csv = std::fs::read_to_string(out.join("reads.csv")).unwrap();
    assert!(csv.starts_with("write,read,written_bytes,index,offset_bytes"));
    assert!(csv.lines().count() > 8 * 102);
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("probe.json")).unwrap()).unwrap();
    assert_eq!(saved["phases"].as_array().unwrap().len(), 8);
    // Bands are not scaled (a clean must still take ~0.5 s to show).
    assert_eq!(
        saved["model_parameters"]["band_bytes"].as_u64(),
        Some(tierd_device::model::smr::SmrConfig::archive_8tb().band_bytes)
    );
}

#[test]
fn plain_file_probe_completes_with_o_direct() {
    // On the target directory's filesystem: /tmp may be a tmpfs, which
    // refuses O_DIRECT.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let disk = sparse(dir.path(), "disk.img", 16 << 20);
    let output = common::tierd(&[
        "probe",
        common::path_arg(&disk),
        "--destructive",
        "--scale",
        "0.001",
        "--written",
        "1GiB,2GiB",
        "--read",
        "2GiB",
        "--settle-poll",
        "1ms",
        "--json",
        "--out",
        common::path_arg(&dir.path().join("out")),
    ]);
    let value = json(&output);
    assert!(value["model"].is_null());
    let all = value["combinations"].as_array().unwrap();
    assert_eq!(all.len(), 7);
    assert!(all.iter().all(|c| c["reads"] == 2), "{value:#}");
}

#[test]
fn a_fit_is_a_tier_stack_the_simulator_loads_and_model_fit_rewrites_it() {
    let dir = tempfile::tempdir().unwrap();
    let disk = sparse(dir.path(), "disk.img", 4 << 30);
    let out = dir.path().join("out");
    let output = common::tierd(&[
        "probe",
        common::path_arg(&disk),
        "--destructive",
        "--model",
        "smr-archive8tb",
        "--scale",
        "0.004",
        "--fit-only",
        "--out",
        common::path_arg(&out),
    ]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    let written = std::fs::read_to_string(out.join("model.toml")).unwrap();
    let refit = dir.path().join("refit.toml");
    let output = common::tierd(&[
        "model",
        "fit",
        common::path_arg(&out.join("probe.json")),
        "--out",
        common::path_arg(&refit),
        "--json",
    ]);
    let fit = json(&output);
    assert!(fit["band_bytes"].as_u64().is_some(), "{fit}");
    assert!(fit["media_cache_bytes"].as_u64().is_some(), "{fit}");
    let rewritten = std::fs::read_to_string(&refit).unwrap();
    assert_eq!(
        written
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>(),
        rewritten
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
    );
    // The simulator takes it as a tier stack, and the probe as a model.
    let stack = tierd_sim::TierStack::load(common::path_arg(&refit)).unwrap();
    assert_eq!(stack.tiers.len(), 1);
    let home = &stack.tiers[0];
    home.device
        .build_with(home.capacity_bytes, home.model.clone(), 1)
        .expect("the simulator builds the fitted model");
    let output = common::tierd(&[
        "probe",
        common::path_arg(&disk),
        "--destructive",
        "--model-config",
        common::path_arg(&refit),
        "--scale",
        "0.004",
        "--written",
        "10GiB",
        "--json",
        "--out",
        common::path_arg(&dir.path().join("again")),
    ]);
    let value = json(&output);
    assert_eq!(value["model"], "smr-archive8tb");
    assert_eq!(
        value["model_parameters"]["band_bytes"].as_u64(),
        fit["band_bytes"].as_u64()
    );
}

/// `tierd status --config config.toml --json`'s first volume's
/// `cache.smr`, run in `dir`.
fn smr_status(dir: &Path) -> Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(["status", "--config", "config.toml", "--json"])
        .current_dir(dir)
        .output()
        .expect("run tierd status");
    json(&output)["volumes"][0]["cache"]["smr"].clone()
}

/// A fit runs live (issue 16 §2: "a device TOML that `tierd sim` and
/// emulated tiers accept"): `tierd model fit ... --out my-disk.toml`
/// beside a config whose SMR home says `model_file = "my-disk.toml"`,
/// served by `tierd serve` in real time behind an emulated P3700. The
/// cache volume stages by the fitted band: `tierd status` reports it, and
/// a write staged inside band 1 is destaged as that one band rewritten
/// whole, which the emulated disk (the fitted model) takes as a band-fill
/// stream: nothing in its media cache. Had the staging used the preset's
/// band (30,236,672 bytes) over the fitted model, its rewrites would start
/// inside the model's bands and go through the media cache.
#[test]
fn a_fit_is_a_model_file_tierd_serve_emulates_and_stages_by() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let disk = sparse(dir, "probed.img", 4 << 30);
    let out = dir.join("probe");
    let output = common::tierd(&[
        "probe",
        common::path_arg(&disk),
        "--destructive",
        "--model",
        "smr-archive8tb",
        "--scale",
        "0.004",
        "--fit-only",
        "--out",
        common::path_arg(&out),
    ]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    let output = common::tierd(&[
        "model",
        "fit",
        common::path_arg(&out.join("probe.json")),
        "--out",
        common::path_arg(&dir.join("my-disk.toml")),
        "--json",
    ]);
    let fit = json(&output);
    let band = fit["band_bytes"].as_u64().expect("a fitted band");
    let preset_band = tierd_device::model::smr::SmrConfig::archive_8tb().band_bytes;
    assert_ne!(band, preset_band, "the fit should differ from the preset");
    std::fs::remove_file(&disk).unwrap();
    common::write_file(
        dir,
        "config.toml",
        r#"data_dir = "data"
[server]
listen = ["unix:tierd.sock"]

[[tier]]
name = "ssd"
backend = "file"
path = "ssd.img"
size = "64MiB"
model = "p3700"

[[tier]]
name = "smr"
backend = "file"
path = "smr.img"
size = "1GiB"
model_file = "my-disk.toml"

[[volume]]
name = "smr"
size = "1GiB"
segment = "1GiB"
tiers = ["ssd", "smr"]
period = "10s"
cache = { tier = "ssd", block = "4KiB", mode = "writeback", policy = "lru", admission = "always", smr_staging = true, smr_idle = "1s" }
"#,
    );
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let smr = smr_status(dir);
    assert_eq!(smr["band_bytes"].as_u64(), Some(band), "{smr:#}");
    let mut client = tierd_nbd::Client::connect_uri(&server.uri("smr")).unwrap();
    let written: Vec<(u64, Vec<u8>)> = [3u64, 100, 1000]
        .iter()
        .map(|block| (band + block * 4096, vec![*block as u8 + 1; 4096]))
        .collect();
    for (at, data) in &written {
        client.write(*at, data, false).unwrap();
    }
    client.flush().unwrap();
    let mut smr = smr_status(dir);
    for _ in 0..600 {
        if smr["staged_bytes"] == 0 && smr["band_rewrites"].as_u64() >= Some(1) {
            break;
        }
        std::thread::park_timeout(std::time::Duration::from_millis(100));
        smr = smr_status(dir);
    }
    assert_eq!(smr["staged_bytes"], 0, "destaged: {smr:#}");
    assert_eq!(smr["band_rewrites"], 1, "{smr:#}");
    assert_eq!(smr["destage_written_bytes"].as_u64(), Some(band), "{smr:#}");
    assert_eq!(smr["home_model"]["media_cache_writes"], 0, "{smr:#}");
    assert_eq!(smr["home_model"]["dirty_bands"], 0, "{smr:#}");
    let mut back = vec![0u8; 4096];
    for (at, data) in &written {
        client.read(*at, &mut back).unwrap();
        assert!(back == *data, "block at byte {at}");
    }
    drop(client);
    server.stop();
}

#[test]
fn probe_runs_on_a_block_device_and_refuses_it_mounted() {
    use common::tools::{self, Cleanup};
    if !tools::require_tools(&["losetup", "mkfs.ext4", "mount", "umount"]) {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 && !tools::missing("root (for losetup and mount)") {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let image = sparse(dir.path(), "loop.img", 64 << 20);
    let mut cleanup = Cleanup::default();
    let output = tools::run(tools::tool("losetup").args(["-f", "--show"]).arg(&image));
    let device = common::stdout(&output).trim().to_string();
    assert!(
        device.starts_with("/dev/loop"),
        "losetup printed {device:?}"
    );
    cleanup.push(format!("losetup -d {device}"), {
        let device = device.clone();
        move || {
            let _ = tools::tool("losetup").args(["-d", &device]).status();
        }
    });
    // Unmounted: the real device path (O_DIRECT, O_EXCL) runs.
    let output = common::tierd(&[
        "probe",
        &device,
        "--destructive",
        "--scale",
        "0.001",
        "--settle-poll",
        "1ms",
        "--json",
        "--out",
        common::path_arg(&dir.path().join("out")),
    ]);
    let value = json(&output);
    assert_eq!(value["device_bytes"], 64 << 20);
    assert_eq!(value["direct"], true);
    // Mounted: refused, naming the mount.
    tools::run(tools::tool("mkfs.ext4").args(["-q", &device]));
    let point = dir.path().join("mnt");
    tools::mount(&device, &point, &mut cleanup);
    let output = common::tierd(&["probe", &device, "--destructive", "--scale", "0.001"]);
    let message = common::stderr(&output);
    assert!(!output.status.success(), "{message}");
    assert!(message.contains("is mounted"), "{message}");
    assert!(message.contains(common::path_arg(&point)), "{message}");
    tools::unmount(&point, &mut cleanup);
}
