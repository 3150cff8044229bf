//! packaging/grafana/tierd.json: valid dashboard JSON whose every query
//! names metrics a live `tierd serve` exports (with the labels the queries
//! select and group by), on a server with a tiered volume, a cache volume
//! (over a home declared SMR, so the staging's families show) and a
//! reduced tier, so every family is present.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use common::serve::ServeProcess;
use serde_json::Value;
use tierd_nbd::Client;

const CONFIG: &str = r#"data_dir = "data"
[metrics]
listen = "127.0.0.1:0"

[[tier]]
name = "mem"
backend = "memory"
size = "16MiB"

[[tier]]
name = "disk"
backend = "file"
path = "disk.img"
size = "64MiB"

[[tier]]
name = "ssd"
backend = "file"
path = "ssd.img"
size = "16MiB"

[[tier]]
name = "hdd"
backend = "file"
path = "hdd.img"
size = "64MiB"
smr = { band = "1MiB" }

[[tier]]
name = "flash"
backend = "file"
path = "flash.img"
size = "32MiB"
reduce = { block = "4KiB", compress = "lz4", dedup = true, mode = "inline", logical = "64MiB" }

[[volume]]
name = "tiered"
size = "64MiB"
segment = "1MiB"
tiers = ["mem", "disk"]
period = "200ms"

[volume.policy]
kind = "none"

[[volume]]
name = "cached"
size = "64MiB"
segment = "16MiB"
tiers = ["ssd", "hdd"]
cache = { tier = "ssd", block = "64KiB", mode = "writeback" }

[[volume]]
name = "reduced"
size = "64MiB"
segment = "16MiB"
tiers = ["flash"]
"#;

fn scrape(address: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.0 200 OK"), "{response}");
    response
}

/// Families by name: their type and the label names their series carry.
fn families(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut out: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
            out.insert(name.to_string(), (kind.to_string(), BTreeSet::new()));
        } else if line.starts_with("tierd_") {
            let (series, labels) = match line.split_once('{') {
                Some((series, rest)) => (series, rest.split('}').next().unwrap()),
                None => (line.split_whitespace().next().unwrap(), ""),
            };
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    series
                        .strip_suffix(suffix)
                        .filter(|base| out.get(*base).is_some_and(|(kind, _)| kind == "histogram"))
                })
                .unwrap_or(series);
            let entry = out
                .get_mut(family)
                .unwrap_or_else(|| panic!("{series} has no # TYPE"));
            for pair in labels.split(',').filter(|pair| !pair.is_empty()) {
                entry.1.insert(pair.split('=').next().unwrap().to_string());
            }
        }
    }
    out
}

/// Every query expression of the dashboard, with its panel's title.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push((
                panel["title"].as_str().unwrap().to_string(),
                target["expr"].as_str().expect("an expr").to_string(),
            ));
        }
    }
    out
}

/// The metric names in a PromQL expression (identifiers starting tierd_).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut at = 0;
    while let Some(found) = expr[at..].find("tierd_") {
        let start = at + found;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        names.push(expr[start..end].to_string());
        at = end;
    }
    names
}

/// Label names a query groups by (`by (a, b)`) or selects (`{a=~"..."}`).
fn label_names(expr: &str) -> BTreeSet<String> {
    let mut labels = BTreeSet::new();
    for part in expr.split("by (").skip(1) {
        for label in part.split(')').next().unwrap().split(',') {
            labels.insert(label.trim().to_string());
        }
    }
    for part in expr.split('{').skip(1) {
        for pair in part.split('}').next().unwrap().split(',') {
            if let Some(name) = pair.split(['=', '!']).next() {
                if !name.trim().is_empty() {
                    labels.insert(name.trim().to_string());
                }
            }
        }
    }
    labels.remove("le");
    labels
}

#[test]
fn every_dashboard_query_names_metrics_and_labels_a_live_server_exports() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/grafana/tierd.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "tierd-overview");
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 30);
    let dir = tempfile::tempdir().unwrap();
    let config = common::write_file(dir.path(), "config.toml", CONFIG);
    let mut server = ServeProcess::start(dir.path(), Some(&config));
    let line = server.wait_line("tierd: metrics at http://");
    let address = line
        .trim_start_matches("tierd: metrics at http://")
        .trim_end_matches("/metrics")
        .to_string();
    for volume in ["tiered", "cached", "reduced"] {
        let mut client = Client::connect_uri(&server.uri(volume)).unwrap();
        client.write(0, &vec![7u8; 65536], false).unwrap();
        let mut back = vec![0u8; 65536];
        client.read(0, &mut back).unwrap();
        client.flush().unwrap();
    }
    // An operator move, so the by-rule family has a sample to check labels on.
    let moved = std::process::Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args([
            "move",
            "--config",
            "config.toml",
            "--volume",
            "tiered",
            "--segment",
            "0",
            "--to",
            "mem",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(moved.status.success(), "{}", common::stderr(&moved));
    let clock = tierd_common::clock::SystemClock::new();
    let deadline = tierd_common::clock::Clock::now_ns(&clock) + 60_000_000_000;
    let text = loop {
        let text = scrape(&address);
        if text.contains("tierd_volume_moves_by_rule_total{volume=\"tiered\",rule=\"operator\"} 1")
        {
            break text;
        }
        assert!(
            tierd_common::clock::Clock::now_ns(&clock) < deadline,
            "the operator move never finished:\n{text}"
        );
        tierd_common::clock::Clock::sleep_ns(&clock, 50_000_000);
    };
    let exported = families(&text);
    let queries = queries(&dashboard);
    assert!(queries.len() >= 20, "{} queries", queries.len());
    let mut used = BTreeSet::new();
    for (title, expr) in &queries {
        let names = metric_names(expr);
        assert!(
            !names.is_empty(),
            "panel {title:?}: {expr} names no tierd metric"
        );
        for name in names {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    name.strip_suffix(suffix).filter(|base| {
                        exported
                            .get(*base)
                            .is_some_and(|(kind, _)| kind == "histogram")
                    })
                })
                .unwrap_or(&name)
                .to_string();
            let Some((_, labels)) = exported.get(&family) else {
                panic!(
                    "panel {title:?}: {name} is not exported; exported: {:?}",
                    exported.keys()
                );
            };
            for label in label_names(expr) {
                assert!(
                    labels.contains(&label),
                    "panel {title:?}: {family} has no label {label} (has {labels:?})"
                );
            }
            used.insert(family);
        }
    }
    // The dashboard covers what the issue names: per-volume requests and
    // latency, tier utilisation and occupancy, moves, cache hits, reduction.
    for family in [
        "tierd_volume_requests_total",
        "tierd_volume_request_latency_seconds",
        "tierd_tier_busy_seconds_total",
        "tierd_tier_used_bytes",
        "tierd_volume_moves_completed_total",
        "tierd_volume_moves_by_rule_total",
        "tierd_volume_moves_dropped_by_reason_total",
        "tierd_cache_read_hit_ratio",
        "tierd_reduction_ratio",
    ] {
        assert!(
            used.contains(family),
            "the dashboard does not show {family}"
        );
    }
}
