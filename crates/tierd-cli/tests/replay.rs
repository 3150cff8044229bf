//! `tierd replay` against an in-process NBD server over a memory export:
//! counts match the trace, writes land with the documented pattern, server
//! errors are counted and fail the command, bad input is named.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{path_arg, stderr, stdout, tierd, write_file};
use tierd_nbd::{Client, Export, MemoryExport, Server, ServerConfig, ServerHandle};

const EXPORT_BYTES: usize = 1 << 20;

// The throwaway CA and certificates of tierd-nbd's TLS tests.
#[path = "../../tierd-nbd/tests/common/pki.rs"]
mod pki;

/// A server on a Unix socket in `directory`; returns its handle and URI.
fn serve(directory: &Path, writable: bool) -> (ServerHandle, String) {
    serve_with(directory, writable, ServerConfig::default())
}

fn serve_with(directory: &Path, writable: bool, config: ServerConfig) -> (ServerHandle, String) {
    // A read-only export makes every write fail (EPERM).
    let export = MemoryExport::new(EXPORT_BYTES);
    let export = Arc::new(if writable { export } else { export.read_only() });
    let server = Server::new(vec![("vol".to_string(), export as Arc<dyn Export>)], config).unwrap();
    let handle = server.serve_unix(directory.join("nbd.sock")).unwrap();
    let uri = handle.address().uri("vol");
    (handle, uri)
}

/// One trace request: read or write, offset, length.
type Traced = (bool, u64, u64);

/// An MSR Cambridge CSV of `requests`, one every 2 ms (FILETIME ticks are
/// 100 ns), volume `hm_0`.
fn msr_trace(directory: &Path, requests: &[Traced]) -> PathBuf {
    let mut text = String::new();
    let start = 128_166_385_295_514_878u64;
    for (index, (is_write, offset, length)) in requests.iter().enumerate() {
        let kind = if *is_write { "Write" } else { "Read" };
        text.push_str(&format!(
            "{},hm,0,{kind},{offset},{length},1000\n",
            start + index as u64 * 20_000
        ));
    }
    write_file(directory, "trace.csv", &text)
}

/// The documented pattern (docs/engine/replay.md), written independently
/// of the command's code: byte x holds byte x % 8 (little-endian) of
/// ((x - x % 8) XOR 0x7469_6572_6452_504c) * 0x9E37_79B9_7F4A_7C15 (wrapping).
fn expected_pattern(offset: u64, length: u64) -> Vec<u8> {
    (offset..offset + length)
        .map(|x| {
            let word = ((x - x % 8) ^ 0x7469_6572_6452_504c).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            word.to_le_bytes()[(x % 8) as usize]
        })
        .collect()
}

/// A mix of reads and writes inside the export, some not page aligned,
/// some overlapping.
fn mixed_requests() -> Vec<Traced> {
    let mut requests = Vec::new();
    for index in 0..60u64 {
        let is_write = index % 3 != 0;
        let offset = (index * 37 % 200) * 4096 + if index % 7 == 0 { 512 } else { 0 };
        let length = [4096, 512, 8192, 65536][(index % 4) as usize];
        requests.push((is_write, offset, length));
    }
    requests
}

fn json_of(output: &std::process::Output) -> serde_json::Value {
    serde_json::from_str(&stdout(output)).unwrap_or_else(|error| {
        panic!(
            "not JSON ({error}): {}\nstderr: {}",
            stdout(output),
            stderr(output)
        )
    })
}

#[test]
fn replays_every_request_and_the_writes_land() {
    let directory = tempfile::tempdir().unwrap();
    let (handle, uri) = serve(directory.path(), true);
    let requests = mixed_requests();
    let trace = msr_trace(directory.path(), &requests);
    let output = tierd(&[
        "replay",
        "--trace",
        path_arg(&trace),
        "--target",
        &uri,
        "--speed",
        "100",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json = json_of(&output);
    let run = &json["runs"][0];
    let writes = requests.iter().filter(|request| request.0).count() as u64;
    let bytes: u64 = requests.iter().map(|request| request.2).sum();
    assert_eq!(run["policy"], "live");
    assert_eq!(run["requests"], requests.len() as u64);
    assert_eq!(run["writes"], writes);
    assert_eq!(run["reads"], requests.len() as u64 - writes);
    assert_eq!(run["bytes"], bytes);
    assert_eq!(run["errors"], 0);
    assert_eq!(run["wrapped_requests"], 0);
    assert_eq!(run["not_issued"], 0);
    assert_eq!(run["response"]["count"], requests.len() as u64);
    assert_eq!(run["response_from_due"]["count"], requests.len() as u64);
    assert!(run["avg_response_us"].as_f64().unwrap() > 0.0);
    assert!(run["response_p99_us"].as_f64().unwrap() >= run["response_p50_us"].as_f64().unwrap());
    assert!(run["late_issues"].is_u64());
    assert_eq!(run["settings"]["replay"]["speed"], 100.0);
    let periods = run["periods"].as_array().unwrap();
    let in_periods: u64 = periods
        .iter()
        .map(|period| period["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(in_periods, requests.len() as u64);

    let mut client = Client::connect_uri(&uri).unwrap();
    let mut written = vec![false; EXPORT_BYTES];
    for (is_write, offset, length) in &requests {
        if *is_write {
            let mut buffer = vec![0u8; *length as usize];
            client.read(*offset, &mut buffer).unwrap();
            assert!(
                buffer == expected_pattern(*offset, *length),
                "write at {offset} (+{length}) did not land with the pattern"
            );
            written[*offset as usize..(*offset + *length) as usize].fill(true);
        }
    }
    // Bytes no write touched are still zero (reads change nothing).
    let mut whole = vec![0u8; EXPORT_BYTES];
    client.read(0, &mut whole).unwrap();
    assert!(whole
        .iter()
        .zip(&written)
        .all(|(byte, written)| *written || *byte == 0));
    client.disconnect().unwrap();
    handle.shutdown();
}

#[test]
fn replays_over_tls_with_a_client_certificate() {
    let directory = tempfile::tempdir().unwrap();
    let pki_dir = directory.path().join("pki");
    pki::TestPki::new().write(&pki_dir, None);
    let tls = tierd_nbd::TlsServer::load(
        &tierd_nbd::TlsFiles {
            certificate: pki_dir.join("server-cert.pem"),
            key: pki_dir.join("server-key.pem"),
            client_ca: Some(pki_dir.join("ca-cert.pem")),
        },
        tierd_nbd::TlsMode::Require,
    )
    .unwrap();
    let (handle, uri) = serve_with(
        directory.path(),
        true,
        ServerConfig {
            tls: Some(tls),
            ..ServerConfig::default()
        },
    );
    let tls_uri = format!(
        "{}&tls-certificates={}",
        uri.replacen("nbd+unix", "nbds+unix", 1),
        pki_dir.display()
    );
    let requests = mixed_requests();
    let trace = msr_trace(directory.path(), &requests);
    let replay = |target: &str| {
        tierd(&[
            "replay",
            "--trace",
            path_arg(&trace),
            "--target",
            target,
            "--speed",
            "100",
            "--connections",
            "2",
            "--json",
        ])
    };
    let output = replay(&tls_uri);
    assert!(
        output.status.success(),
        "{:?}\nstdout: {}\nstderr: {}",
        output.status,
        stdout(&output),
        stderr(&output)
    );
    let run = &json_of(&output)["runs"][0];
    assert_eq!(run["requests"], requests.len() as u64);
    assert_eq!(run["errors"], 0);
    let mut client = Client::connect_uri(&tls_uri).unwrap();
    for (is_write, offset, length) in requests.iter().rev() {
        if *is_write {
            let mut buffer = vec![0u8; *length as usize];
            client.read(*offset, &mut buffer).unwrap();
            assert!(buffer == expected_pattern(*offset, *length));
            break;
        }
    }
    client.disconnect().unwrap();
    // The same server refuses plain text.
    let output = replay(&uri);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("connection 0"),
        "{}",
        stderr(&output)
    );
    handle.shutdown();
}

#[test]
fn the_text_output_has_the_simulators_tables_and_the_live_figures() {
    let directory = tempfile::tempdir().unwrap();
    let (handle, uri) = serve(directory.path(), true);
    let trace = msr_trace(directory.path(), &mixed_requests()[..10]);
    let report = directory.path().join("report");
    let output = tierd(&[
        "replay",
        "--trace",
        path_arg(&trace),
        "--target",
        &uri,
        "--speed",
        "50",
        "--label",
        "mem-run",
        "--report",
        path_arg(&report),
        "--connections",
        "2",
        "--max-inflight",
        "4",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("IOPS, as paper 000"), "{text}");
    assert!(text.contains("Response time, as paper 002"), "{text}");
    assert!(text.contains("late issues"), "{text}");
    assert!(
        text.lines()
            .any(|line| line.starts_with("mem-run") && line.contains(" 10 ")),
        "{text}"
    );
    for name in ["index.html", "response-cdf.csv", "iops.csv", "heatmap.svg"] {
        assert!(report.join(name).exists(), "{name} missing");
    }
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("result.json")).unwrap())
            .unwrap();
    assert_eq!(result["runs"][0]["requests"], 10);
    assert_eq!(result["runs"][0]["connections"], 2);
    let cdf = std::fs::read_to_string(report.join("response-cdf.csv")).unwrap();
    assert!(
        cdf.lines()
            .skip(1)
            .all(|line| line.starts_with("mem-run,all,")),
        "{cdf}"
    );
    assert!(cdf.lines().count() > 1, "{cdf}");
    handle.shutdown();
}

#[test]
fn requests_past_the_export_are_refused_unless_wrap_is_asked_for() {
    let directory = tempfile::tempdir().unwrap();
    let (handle, uri) = serve(directory.path(), true);
    let beyond = EXPORT_BYTES as u64 * 3 + 8192;
    let requests = vec![
        (true, 4096, 4096),
        (true, beyond, 4096),
        (false, beyond, 512),
    ];
    let trace = msr_trace(directory.path(), &requests);
    // By default, as `tierd sim` refuses requests past its volume: nothing is sent.
    for extra in [&[][..], &["--verify-size"][..]] {
        let mut args = vec![
            "replay",
            "--trace",
            path_arg(&trace),
            "--target",
            &uri,
            "--speed",
            "100",
        ];
        args.extend_from_slice(extra);
        let output = tierd(&args);
        assert!(!output.status.success(), "{extra:?}");
        let message = stderr(&output);
        assert!(
            message.contains("2 of 3 requests end past the 1048576-byte export")
                && message.contains(&format!("offset {beyond}"))
                && message.contains("--wrap"),
            "{message}"
        );
    }
    let mut client = Client::connect_uri(&uri).unwrap();
    let mut buffer = vec![0u8; 4096];
    client.read(4096, &mut buffer).unwrap();
    assert!(
        buffer.iter().all(|byte| *byte == 0),
        "a refused replay wrote"
    );
    client.disconnect().unwrap();

    let output = tierd(&[
        "replay",
        "--trace",
        path_arg(&trace),
        "--target",
        &uri,
        "--speed",
        "100",
        "--wrap",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let run = &json_of(&output)["runs"][0];
    assert_eq!(run["wrapped_requests"], 2);
    assert_eq!(run["requests"], 3);
    // The wrapped write landed at offset modulo the export size.
    let mut client = Client::connect_uri(&uri).unwrap();
    let mut buffer = vec![0u8; 4096];
    client.read(8192, &mut buffer).unwrap();
    assert!(buffer == expected_pattern(8192, 4096));
    client.disconnect().unwrap();
    handle.shutdown();
}

#[test]
fn the_period_of_the_series_fits_a_short_replay() {
    let directory = tempfile::tempdir().unwrap();
    let (handle, uri) = serve(directory.path(), true);
    // 121 requests one second apart: a 2-minute trace, replayed x60 in 2 s.
    let mut text = String::new();
    let start = 128_166_385_295_514_878u64;
    for index in 0..121u64 {
        text.push_str(&format!(
            "{},hm,0,Read,{},4096,1000\n",
            start + index * 10_000_000,
            index * 4096
        ));
    }
    let trace = write_file(directory.path(), "two-minutes.csv", &text);
    let output = tierd(&[
        "replay",
        "--trace",
        path_arg(&trace),
        "--target",
        &uri,
        "--speed",
        "60",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let run = &json_of(&output)["runs"][0];
    let period_ns = run["settings"]["period_ns"].as_u64().unwrap();
    let periods = run["periods"].as_array().unwrap().len();
    assert!(
        period_ns <= 200_000_000 && periods >= 10,
        "a 2 s replay in periods of {period_ns} ns: {periods} points"
    );
    // --period still decides when given.
    let output = tierd(&[
        "replay",
        "--trace",
        path_arg(&trace),
        "--target",
        &uri,
        "--speed",
        "60",
        "--period",
        "1s",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let run = &json_of(&output)["runs"][0];
    assert_eq!(run["settings"]["period_ns"], 1_000_000_000u64);
    handle.shutdown();
}

#[test]
fn the_report_is_titled_as_a_replay_with_the_live_volumes_settings() {
    let directory = tempfile::tempdir().unwrap();
    let dir = directory.path();
    std::fs::write(
        dir.join("config.toml"),
        common::small_stack_config("data", "", common::FastTier::Memory, ""),
    )
    .unwrap();
    let mut server = common::serve::ServeProcess::start(dir, Some(Path::new("config.toml")));
    let uri = server.uri("vol0");
    let trace = msr_trace(dir, &mixed_requests()[..10]);
    let report = dir.join("report");
    let output = tierd(&[
        "replay",
        "--trace",
        path_arg(&trace),
        "--target",
        &uri,
        "--speed",
        "100",
        "--report",
        path_arg(&report),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("mem > disk"), "{text}");
    let page = std::fs::read_to_string(report.join("index.html")).unwrap();
    assert!(page.contains("<h1>tierd replay report</h1>"), "{page}");
    assert!(!page.contains("tierd sim report"), "{page}");
    // The live volume: 64 MiB in 1 MiB segments over mem > disk.
    assert!(page.contains("(64 segments)"), "{page}");
    assert!(page.contains("mem &gt; disk"), "{page}");
    assert!(!page.contains("0 B (0 segments)"), "{page}");
    assert!(!page.contains("chunks of 0 B"), "{page}");
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("result.json")).unwrap())
            .unwrap();
    assert_eq!(result["runs"][0]["settings"]["segment_bytes"], 1u64 << 20);
    assert_eq!(result["runs"][0]["settings"]["segments"], 64);
    server.stop();
}

#[test]
fn a_terminal_gets_a_progress_line() {
    let directory = tempfile::tempdir().unwrap();
    let (handle, uri) = serve(directory.path(), true);
    let trace = msr_trace(directory.path(), &mixed_requests());
    // 60 requests 2 ms apart at x0.2: 0.6 s.
    let Some(terminal) = common::on_a_terminal(&[
        "replay",
        "--trace",
        path_arg(&trace),
        "--target",
        &uri,
        "--speed",
        "0.2",
    ]) else {
        return;
    };
    let progress: Vec<&str> = terminal
        .split(['\r', '\n'])
        .filter(|line| line.starts_with("tierd replay: ") && line.contains("requests/s"))
        .collect();
    assert!(!progress.is_empty(), "no progress line in {terminal:?}");
    assert!(
        progress
            .iter()
            .any(|line| line.contains(" of 60 requests replayed") && line.contains("ETA")),
        "{progress:?}"
    );
    // Not on a pipe.
    let output = tierd(&[
        "replay",
        "--trace",
        path_arg(&trace),
        "--target",
        &uri,
        "--speed",
        "10",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        !stderr(&output).contains("requests/s"),
        "{}",
        stderr(&output)
    );
    handle.shutdown();
}

#[test]
fn server_errors_are_counted_and_fail_the_command() {
    let directory = tempfile::tempdir().unwrap();
    let (handle, uri) = serve(directory.path(), false);
    let requests = vec![(false, 0, 4096), (true, 4096, 4096), (true, 8192, 512)];
    let trace = msr_trace(directory.path(), &requests);
    let output = tierd(&[
        "replay",
        "--trace",
        path_arg(&trace),
        "--target",
        &uri,
        "--speed",
        "100",
        "--json",
    ]);
    assert!(!output.status.success());
    let run = &json_of(&output)["runs"][0];
    assert_eq!(run["requests"], 3);
    assert_eq!(run["errors"], 2);
    assert_eq!(run["errors_by_name"]["EPERM"], 2);
    let message = stderr(&output);
    assert!(
        message.contains("2 request(s) failed on the server"),
        "{message}"
    );
    handle.shutdown();
}

#[test]
fn bad_targets_are_named() {
    let directory = tempfile::tempdir().unwrap();
    let trace = msr_trace(directory.path(), &[(false, 0, 4096)]);
    let cases = [
        ("http://host/vol", "unknown scheme \"http\""),
        ("nbd+unix:///vol", "missing ?socket=PATH"),
        ("nbds://host/vol", "TLS"),
    ];
    for (target, expected) in cases {
        let output = tierd(&["replay", "--trace", path_arg(&trace), "--target", target]);
        assert!(!output.status.success(), "{target}");
        let message = stderr(&output);
        assert!(
            message.contains("--target") && message.contains(expected),
            "{target}: {message}"
        );
    }
    let missing = directory.path().join("absent.sock");
    let target = format!("nbd+unix:///vol?socket={}", missing.display());
    let output = tierd(&["replay", "--trace", path_arg(&trace), "--target", &target]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains(&target), "{}", stderr(&output));
}

#[test]
fn trace_errors_name_the_file_and_line_before_any_io() {
    let directory = tempfile::tempdir().unwrap();
    let trace = write_file(
        directory.path(),
        "bad.csv",
        "128166385295514878,hm,0,Read,0,4096,10\n\
         128166385295534878,hm,0,Write,4096,4096,10\n\
         128166385295554878,hm,0,Erase,8192,4096,10\n",
    );
    // No server at this socket: the trace is checked before connecting.
    let target = format!(
        "nbd+unix:///vol?socket={}",
        directory.path().join("none.sock").display()
    );
    let output = tierd(&["replay", "--trace", path_arg(&trace), "--target", &target]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains(&format!("{}:3:", trace.display())) && message.contains("Erase"),
        "{message}"
    );
    let output = tierd(&[
        "replay",
        "--trace",
        path_arg(&directory.path().join("missing.csv")),
        "--target",
        &target,
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("missing.csv: cannot open"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn bad_settings_are_refused() {
    let directory = tempfile::tempdir().unwrap();
    let trace = msr_trace(directory.path(), &[(false, 0, 4096)]);
    let target = "nbd+unix:///vol?socket=/nonexistent.sock";
    for (option, value, expected) in [
        ("--speed", "0", "--speed 0 is not a factor > 0"),
        ("--max-inflight", "0", "--max-inflight must be at least 1"),
        (
            "--connections",
            "65",
            "--connections 65 is not between 1 and 64",
        ),
    ] {
        let output = tierd(&[
            "replay",
            "--trace",
            path_arg(&trace),
            "--target",
            target,
            option,
            value,
        ]);
        assert!(!output.status.success(), "{option} {value}");
        assert!(stderr(&output).contains(expected), "{}", stderr(&output));
    }
}
