//! Operator mistakes with tier files and metadata, against real `tierd
//! serve` processes (issue 11 §1): a file that is not what the volume was
//! is refused at start naming volume, tier, path and what differs, never
//! served; `--accept-reset` starts anyway and says what it gives up; a
//! second server cannot take the same files; a file truncated under a
//! running server fails its tier with EIO (never zeroes).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::serve::ServeProcess;
use common::{small_stack_config, FastTier};
use tierd_common::clock::{Clock, SystemClock};
use tierd_nbd::Client;

const MIB: u64 = 1 << 20;

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = small_stack_config("data", "", FastTier::File { faults: false }, "");
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    dir
}

fn serve(dir: &Path) -> ServeProcess {
    ServeProcess::start(dir, Some(Path::new("config.toml")))
}

/// `tierd serve` that is expected to refuse: its exit status and stderr.
fn serve_refused(dir: &Path, extra: &[&str]) -> (Output, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(["serve", "--config", "config.toml"])
        .args(extra)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stderr)
}

fn data(dir: &Path, name: &str) -> PathBuf {
    dir.join("data").join(name)
}

/// Writes a pattern to the first 4 MiB, moves segment 1 to the fast tier,
/// and stops cleanly.
fn populate(dir: &Path) -> Vec<u8> {
    let mut server = serve(dir);
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    let pattern: Vec<u8> = (0..4 * MIB).map(|i| (i * 7 % 251) as u8 | 1).collect();
    client.write(0, &pattern, true).unwrap();
    client.disconnect().unwrap();
    let output = common::tierd_in(
        dir,
        &[
            "move",
            "--config",
            "config.toml",
            "--volume",
            "vol0",
            "--segment",
            "1",
            "--to",
            "ssd",
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    wait_until(|| {
        let output = common::tierd_in(dir, &["status", "--config", "config.toml", "--json"]);
        let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        status["volumes"][0]["placement"]
            .as_str()
            .unwrap()
            .starts_with("10")
    });
    assert!(server.stop().success(), "{}", server.stderr());
    pattern
}

fn wait_until(done: impl Fn() -> bool) {
    let clock = SystemClock::new();
    let start = clock.now_ns();
    while !done() {
        assert!(clock.now_ns() - start < 60_000_000_000, "timed out");
        clock.sleep_ns(50_000_000);
    }
}

fn read_all(server: &mut ServeProcess, length: u64) -> Vec<u8> {
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    let mut back = vec![0u8; length as usize];
    client.read(0, &mut back).unwrap();
    back
}

#[test]
fn swapped_tier_files_are_refused_and_named() {
    let dir = setup();
    let dir = dir.path();
    populate(dir);
    std::fs::rename(data(dir, "ssd.img"), data(dir, "tmp")).unwrap();
    std::fs::rename(data(dir, "disk.img"), data(dir, "ssd.img")).unwrap();
    std::fs::rename(data(dir, "tmp"), data(dir, "disk.img")).unwrap();
    let (output, stderr) = serve_refused(dir, &[]);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("volume vol0"), "{stderr}");
    assert!(stderr.contains("tier ssd ("), "{stderr}");
    assert!(stderr.contains("tier \"disk\" file"), "{stderr}");
    assert!(stderr.contains("swapped"), "{stderr}");
    assert!(stderr.contains("--accept-reset"), "{stderr}");
}

#[test]
fn another_volumes_file_is_refused_and_accept_reset_says_what_is_lost() {
    let dir = setup();
    let dir = dir.path();
    let pattern = populate(dir);
    // A second installation of the same config: same names, other volume.
    let other = setup();
    let mut server = serve(other.path());
    server.stop();
    std::fs::copy(data(other.path(), "ssd.img"), data(dir, "ssd.img")).unwrap();
    let (output, stderr) = serve_refused(dir, &[]);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("another volume's file"), "{stderr}");
    // Segment 1 was on ssd: the refusal says exactly that it would be lost.
    assert!(
        stderr.contains("the 1 segments placed on it (segment 1;"),
        "{stderr}"
    );

    let mut server = ServeProcess::spawn_args(
        dir,
        Some(Path::new("config.toml")),
        &["--accept-reset", "ssd"],
    );
    server.wait_line(common::serve::READY_PREFIX);
    assert!(
        server.stderr().contains("accept-reset"),
        "{}",
        server.stderr()
    );
    // Segment 1 is on home again, with home's (older, here equal) copy;
    // the rest is intact.
    let back = read_all(&mut server, 4 * MIB);
    assert_eq!(back[..MIB as usize], pattern[..MIB as usize]);
    assert_eq!(back[2 * MIB as usize..], pattern[2 * MIB as usize..]);
    server.stop();
    // Stamped now: the next plain start works.
    let mut server = serve(dir);
    server.stop();
}

#[test]
fn restored_backups_of_a_tier_or_the_metadata_are_refused() {
    let dir = setup();
    let dir = dir.path();
    populate(dir);
    let backup = dir.join("disk.backup");
    std::fs::copy(data(dir, "disk.img"), &backup).unwrap();
    let meta_backup = dir.join("meta.backup");
    std::fs::create_dir(&meta_backup).unwrap();
    for name in ["checkpoint", "journal", "identity"] {
        std::fs::copy(data(dir, "meta/vol0").join(name), meta_backup.join(name)).unwrap();
    }
    let mut server = serve(dir);
    server.stop();
    // The tier file from before the last start.
    let current = dir.join("disk.current");
    std::fs::copy(data(dir, "disk.img"), &current).unwrap();
    std::fs::copy(&backup, data(dir, "disk.img")).unwrap();
    let (output, stderr) = serve_refused(dir, &[]);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tier disk") && stderr.contains("older than the metadata"),
        "{stderr}"
    );
    std::fs::copy(&current, data(dir, "disk.img")).unwrap();
    // The metadata from before the last start.
    for name in ["checkpoint", "journal", "identity"] {
        std::fs::copy(meta_backup.join(name), data(dir, "meta/vol0").join(name)).unwrap();
    }
    let (output, stderr) = serve_refused(dir, &[]);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("newer than the metadata"), "{stderr}");
}

#[test]
fn missing_empty_or_truncated_files_and_missing_metadata_are_refused() {
    let dir = setup();
    let dir = dir.path();
    populate(dir);
    let keep = dir.join("keep");
    std::fs::copy(data(dir, "disk.img"), &keep).unwrap();

    std::fs::remove_file(data(dir, "disk.img")).unwrap();
    let (output, stderr) = serve_refused(dir, &[]);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tier disk") && stderr.contains("missing"),
        "{stderr}"
    );
    assert!(
        !data(dir, "disk.img").exists(),
        "the refused start left an empty file behind"
    );

    std::fs::write(data(dir, "disk.img"), b"").unwrap();
    let (_, stderr) = serve_refused(dir, &[]);
    assert!(stderr.contains("the file is empty"), "{stderr}");

    std::fs::copy(&keep, data(dir, "disk.img")).unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(data(dir, "disk.img"))
        .unwrap();
    file.set_len(32 * MIB).unwrap();
    let (_, stderr) = serve_refused(dir, &[]);
    assert!(stderr.contains("shorter than"), "{stderr}");
    // The refusal did not regrow the file.
    assert_eq!(
        std::fs::metadata(data(dir, "disk.img")).unwrap().len(),
        32 * MIB
    );
    std::fs::copy(&keep, data(dir, "disk.img")).unwrap();

    let journal = data(dir, "meta/vol0/journal");
    std::fs::rename(&journal, dir.join("journal")).unwrap();
    let (_, stderr) = serve_refused(dir, &[]);
    assert!(stderr.contains("journal is missing"), "{stderr}");
    std::fs::rename(dir.join("journal"), &journal).unwrap();

    std::fs::rename(data(dir, "meta"), dir.join("meta")).unwrap();
    let (_, stderr) = serve_refused(dir, &[]);
    assert!(stderr.contains("has no identity"), "{stderr}");
    std::fs::remove_dir_all(data(dir, "meta")).ok();
    std::fs::rename(dir.join("meta"), data(dir, "meta")).unwrap();
    let mut server = serve(dir);
    server.stop();
}

#[test]
fn a_second_server_on_the_same_files_is_refused_naming_the_holder() {
    let dir = setup();
    let dir = dir.path();
    let mut first = serve(dir);
    // Another data_dir, the same tier files and metadata by absolute path.
    let data_dir = dir.join("data").canonicalize().unwrap();
    let config = std::fs::read_to_string(dir.join("config.toml"))
        .unwrap()
        .replace(
            "data_dir = \"data\"",
            &format!(
                "data_dir = \"data2\"\nmetadata_dir = {:?}",
                data_dir.join("meta")
            ),
        )
        .replace(
            "path = \"ssd.img\"",
            &format!("path = {:?}", data_dir.join("ssd.img")),
        )
        .replace(
            "path = \"disk.img\"",
            &format!("path = {:?}", data_dir.join("disk.img")),
        );
    std::fs::write(dir.join("second.toml"), &config).unwrap();
    let output = common::tierd_in(dir, &["serve", "--config", "second.toml"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("in use by process {}", first.pid())),
        "{stderr}"
    );
    // Without the shared metadata directory, the tier file's lock refuses.
    let config = config.replace(&format!("metadata_dir = {:?}", data_dir.join("meta")), "");
    std::fs::write(dir.join("second.toml"), &config).unwrap();
    let output = common::tierd_in(dir, &["serve", "--config", "second.toml"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("locked by process {}", first.pid())),
        "{stderr}"
    );
    assert!(first.is_running());
    first.stop();
}

#[test]
fn two_tiers_on_one_file_are_a_config_error_naming_both_keys() {
    let dir = setup();
    let dir = dir.path();
    let config = std::fs::read_to_string(dir.join("config.toml"))
        .unwrap()
        .replace("path = \"ssd.img\"", "path = \"./disk.img\"");
    std::fs::write(dir.join("config.toml"), config).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/disk.img"), b"x").unwrap();
    let (output, stderr) = serve_refused(dir, &[]);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tier[0] (name \"ssd\").path")
            && stderr.contains("tier[1] (name \"disk\").path"),
        "{stderr}"
    );
    assert!(stderr.contains("are the same file"), "{stderr}");
}

#[test]
fn a_tier_file_truncated_under_the_server_fails_with_eio_not_zeroes() {
    let dir = setup();
    let dir = dir.path();
    let mut server = serve(dir);
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    let pattern = vec![0xabu8; MIB as usize];
    client.write(40 * MIB, &pattern, true).unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(data(dir, "disk.img"))
        .unwrap();
    file.set_len(16 * MIB).unwrap();
    let mut back = vec![0u8; MIB as usize];
    let read = client.read(40 * MIB, &mut back);
    assert!(
        read.is_err(),
        "a read past the truncation returned data: {:?}",
        &back[..8]
    );
    // Within the file that is left, the tier is failed too (the periodic
    // check or the read above), and status names it with the reason.
    wait_until(|| {
        let output = common::tierd_in(dir, &["status", "--config", "config.toml", "--json"]);
        let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        status["volumes"][0]["tiers"][1]["failed"]
            .as_str()
            .is_some_and(|reason| reason.contains("truncated"))
    });
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    assert!(client.read(0, &mut back).is_err());
    let text = common::tierd_in(dir, &["status", "--config", "config.toml"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("FAILED: "));
    server.stop();
}

#[test]
fn a_torn_last_journal_record_is_repaired_and_logged_as_a_warning() {
    let dir = setup();
    let dir = dir.path();
    let pattern = populate(dir);
    // Half of a record header at the end: a crash during an append.
    let journal = data(dir, "meta/vol0/journal");
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes.extend_from_slice(&[40, 0, 0, 0, 1, 2]);
    std::fs::write(&journal, bytes).unwrap();
    let mut server = serve(dir);
    let warned = server.stderr().lines().any(|line| {
        line.contains("level=warn") && line.contains("dropped a torn record header of 6 bytes")
    });
    assert!(warned, "{}", server.stderr());
    assert_eq!(read_all(&mut server, 4 * MIB), pattern);
    let output = common::tierd_in(dir, &["status", "--config", "config.toml"]);
    assert!(String::from_utf8_lossy(&output.stdout).contains("dropped a torn record"));
    server.stop();
}

/// Metadata and tier files from before identities (no `identity` file, no
/// superblocks, files of exactly their data size) are adopted: stamped at
/// the next start, with every byte and the placement kept.
#[test]
fn a_volume_from_before_identities_is_adopted_with_its_data() {
    let dir = setup();
    let dir = dir.path();
    let pattern = populate(dir);
    std::fs::remove_file(data(dir, "meta/vol0/identity")).unwrap();
    for (name, size) in [("ssd.img", 16 * MIB), ("disk.img", 64 * MIB)] {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(data(dir, name))
            .unwrap();
        file.set_len(size).unwrap();
    }
    let mut server = serve(dir);
    assert!(
        server
            .stderr()
            .contains("metadata from before tier identities"),
        "{}",
        server.stderr()
    );
    assert_eq!(read_all(&mut server, 4 * MIB), pattern);
    server.stop();
    assert!(data(dir, "meta/vol0/identity").exists());
    let mut server = serve(dir);
    assert_eq!(read_all(&mut server, 4 * MIB), pattern);
    let output = common::tierd_in(dir, &["status", "--config", "config.toml", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(status["volumes"][0]["placement"]
        .as_str()
        .unwrap()
        .starts_with("10"));
    server.stop();
}
