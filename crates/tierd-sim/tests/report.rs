//! The HTML report (`tierd_sim::report`): a real run of several policies over
//! a short synthetic workload on the `hdd-ssd` stack, written to a temporary
//! directory and read back.

use std::path::Path;
use std::sync::OnceLock;

use tierd_sim::report::{self, HeatMap, HeatMapCell, ReplayTimeReader, ReportOptions};
use tierd_sim::{Replay, SimConfig, SimReport, Strategy, TierStack};
use tierd_trace::{Format, IteratorReader, TraceReader};

const PRESET: &str = "usr_1";
const HOURS: f64 = 0.05;
const PERIOD_NS: u64 = 20_000_000_000;
const POLICIES: &str = "none,otf-ast,lru";

struct Fixture {
    report: SimReport,
    heat_map: HeatMap,
}

fn open_workload() -> Box<dyn TraceReader> {
    let preset = tierd_synth::preset(PRESET).unwrap();
    let generator = tierd_synth::Generator::new(preset, 1, HOURS).unwrap();
    Box::new(IteratorReader::new(
        generator,
        &[preset.volume_name],
        Format::Tierd,
        "synthetic workload",
    ))
}

/// A heat map counted by hand: requests per (period, first segment) in replay
/// time, as the report's caller would compute it.
fn heat_map(config: &SimConfig) -> HeatMap {
    let mut reader = ReplayTimeReader::new(open_workload(), config.window, config.replay);
    let mut counts: std::collections::BTreeMap<(u64, u64), (u64, u64)> = Default::default();
    while let Some(request) = reader.next_request().unwrap() {
        let key = (
            request.time_ns / config.period_ns,
            request.offset_bytes / config.segment_bytes,
        );
        let entry = counts.entry(key).or_default();
        entry.0 += 1;
        entry.1 += u64::from(request.op.is_write());
    }
    let cells: Vec<HeatMapCell> = counts
        .into_iter()
        .map(|((period, segment), (io, writes))| HeatMapCell {
            period,
            segment,
            io,
            writes,
        })
        .collect();
    HeatMap {
        svg: r#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>"#.to_string(),
        segment_bytes: config.segment_bytes,
        period_ns: config.period_ns,
        segments: config.segments(),
        periods: cells.iter().map(|cell| cell.period + 1).max().unwrap_or(0),
        cells,
        note: "counted by the test".to_string(),
    }
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let preset = tierd_synth::preset(PRESET).unwrap();
        let stack = TierStack::preset("hdd-ssd").unwrap();
        let mut config = SimConfig::new(stack, preset.volume_bytes);
        config.period_ns = PERIOD_NS;
        config.replay = Replay::OpenLoop { speed: 1.0 };
        let runs = Strategy::parse_list(POLICIES)
            .unwrap()
            .iter()
            .map(|strategy| {
                let mut reader = open_workload();
                tierd_sim::run(&config, strategy, reader.as_mut(), &mut |_| {}).unwrap()
            })
            .collect();
        let label = tierd_synth::label(preset, 1, HOURS);
        let report = SimReport::new(label, "synthetic", &config.stack, runs);
        let heat_map = heat_map(&config);
        Fixture { report, heat_map }
    })
}

fn read(directory: &Path, name: &str) -> String {
    std::fs::read_to_string(directory.join(name)).unwrap_or_else(|error| panic!("{name}: {error}"))
}

/// Splits one CSV line into fields (quoted fields may hold commas and "").
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut characters = line.chars().peekable();
    while let Some(character) = characters.next() {
        match (character, quoted) {
            ('"', true) if characters.peek() == Some(&'"') => {
                field.push('"');
                characters.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (character, _) => field.push(character),
        }
    }
    fields.push(field);
    fields
}

/// Header and rows of a CSV file; every row must have the header's width.
fn csv(directory: &Path, name: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let text = read(directory, name);
    let mut lines = text.lines();
    let header = csv_fields(lines.next().unwrap_or_else(|| panic!("{name} is empty")));
    let rows: Vec<Vec<String>> = lines.map(csv_fields).collect();
    for (index, row) in rows.iter().enumerate() {
        assert_eq!(
            row.len(),
            header.len(),
            "{name} row {index} has {} fields, the header {}",
            row.len(),
            header.len()
        );
    }
    (header, rows)
}

fn column(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|column| column == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
}

/// A small XML well-formedness check: one root element, tags balanced and
/// properly nested, attributes quoted, `<` never in text or attribute values,
/// `&` only as an entity.
fn check_xml(text: &str) -> Result<(), String> {
    fn check_entities(text: &str, at: usize) -> Result<(), String> {
        let mut rest = text;
        while let Some(position) = rest.find('&') {
            rest = &rest[position + 1..];
            let end = rest
                .find(';')
                .ok_or_else(|| format!("unterminated entity near byte {at}"))?;
            let name = &rest[..end];
            let valid = matches!(name, "amp" | "lt" | "gt" | "quot" | "apos")
                || name
                    .strip_prefix("#x")
                    .is_some_and(|hex| u32::from_str_radix(hex, 16).is_ok())
                || name
                    .strip_prefix('#')
                    .is_some_and(|decimal| decimal.parse::<u32>().is_ok());
            if !valid {
                return Err(format!("bad entity &{name}; near byte {at}"));
            }
        }
        if text.contains('<') {
            return Err(format!("raw < near byte {at}"));
        }
        Ok(())
    }
    let mut stack: Vec<String> = Vec::new();
    let mut roots = 0;
    let mut position = 0;
    while position < text.len() {
        let rest = &text[position..];
        let Some(open) = rest.find('<') else {
            check_entities(rest, position)?;
            if !rest.trim().is_empty() && stack.is_empty() {
                return Err("text after the root element".into());
            }
            break;
        };
        let before = &rest[..open];
        check_entities(before, position)?;
        if !before.trim().is_empty() && stack.is_empty() {
            return Err(format!("text outside the root element at byte {position}"));
        }
        let tag_start = position + open;
        let tag_text = &text[tag_start..];
        if tag_text.starts_with("<?") {
            let end = tag_text.find("?>").ok_or("unterminated <?")?;
            position = tag_start + end + 2;
            continue;
        }
        if tag_text.starts_with("<!--") {
            let end = tag_text.find("-->").ok_or("unterminated comment")?;
            position = tag_start + end + 3;
            continue;
        }
        // Find the closing '>' outside quotes.
        let mut quote: Option<char> = None;
        let mut end = None;
        for (offset, character) in tag_text.char_indices().skip(1) {
            match (character, quote) {
                ('"' | '\'', None) => quote = Some(character),
                (character, Some(open_quote)) if character == open_quote => quote = None,
                ('<', _) => return Err(format!("< inside a tag at byte {}", tag_start + offset)),
                ('>', None) => {
                    end = Some(offset);
                    break;
                }
                _ => {}
            }
        }
        let end = end.ok_or_else(|| format!("unterminated tag at byte {tag_start}"))?;
        let inner = &tag_text[1..end];
        position = tag_start + end + 1;
        if let Some(name) = inner.strip_prefix('/') {
            let name = name.trim();
            match stack.pop() {
                Some(open_name) if open_name == name => {}
                other => return Err(format!("</{name}> closes {other:?} at byte {tag_start}")),
            }
            continue;
        }
        let self_closing = inner.ends_with('/');
        let inner = inner.trim_end_matches('/');
        let name_end = inner
            .find(|character: char| character.is_whitespace())
            .unwrap_or(inner.len());
        let name = &inner[..name_end];
        if name.is_empty()
            || !name
                .chars()
                .all(|character| character.is_ascii_alphanumeric() || "-_:".contains(character))
        {
            return Err(format!("bad element name {name:?} at byte {tag_start}"));
        }
        // Attributes: name="value" or name='value', separated by whitespace.
        let mut attributes = inner[name_end..].trim();
        while !attributes.is_empty() {
            let equals = attributes.find('=').ok_or_else(|| {
                format!("attribute without a value in <{name}> at byte {tag_start}")
            })?;
            let attribute = attributes[..equals].trim();
            if attribute.is_empty() || attribute.contains(char::is_whitespace) {
                return Err(format!("bad attribute {attribute:?} in <{name}>"));
            }
            let value = attributes[equals + 1..].trim_start();
            let quote = value
                .chars()
                .next()
                .filter(|quote| *quote == '"' || *quote == '\'')
                .ok_or_else(|| format!("unquoted attribute {attribute} in <{name}>"))?;
            let close = value[1..]
                .find(quote)
                .ok_or_else(|| format!("unterminated attribute {attribute} in <{name}>"))?;
            check_entities(&value[1..1 + close], tag_start)?;
            attributes = value[close + 2..].trim_start();
        }
        if stack.is_empty() {
            roots += 1;
        }
        if !self_closing {
            stack.push(name.to_string());
        }
    }
    if !stack.is_empty() {
        return Err(format!("unclosed elements {stack:?}"));
    }
    if roots != 1 {
        return Err(format!("{roots} root elements"));
    }
    Ok(())
}

#[test]
fn the_xml_check_catches_broken_documents() {
    assert!(check_xml(r#"<svg a="1"><g><rect/></g><text>a &amp; b</text></svg>"#).is_ok());
    assert!(check_xml(r#"<svg><g></svg>"#).is_err());
    assert!(check_xml(r#"<svg><g></svg></g>"#).is_err());
    assert!(check_xml(r#"<svg a=1></svg>"#).is_err());
    assert!(check_xml(r#"<svg><text>a & b</text></svg>"#).is_err());
    assert!(check_xml(r#"<svg><text>a < b</text></svg>"#).is_err());
    assert!(check_xml(r#"<svg></svg><svg></svg>"#).is_err());
}

#[test]
fn the_report_directory_holds_the_page_every_plot_and_every_csv() {
    let fixture = fixture();
    let directory = tempfile::tempdir().unwrap();
    let target = directory.path().join("nested").join("report");
    let index = report::write(
        &target,
        &fixture.report,
        Some(&fixture.heat_map),
        &ReportOptions::default(),
    )
    .unwrap();
    assert_eq!(index, target.join("index.html"));
    let page = read(&target, "index.html");
    for name in [
        "iops.svg",
        "util.svg",
        "fast-bytes.svg",
        "response-cdf.svg",
        "heatmap.svg",
    ] {
        let svg = read(&target, name);
        check_xml(&svg).unwrap_or_else(|error| panic!("{name}: {error}"));
        assert!(svg.starts_with("<svg "), "{name}");
        assert!(
            page.contains(&format!("src=\"{name}\"")),
            "page lacks {name}"
        );
    }
    for name in [
        "iops.csv",
        "util.csv",
        "fast-bytes.csv",
        "response-cdf.csv",
        "heatmap.csv",
        "moves.csv",
        "result.json",
    ] {
        assert!(target.join(name).is_file(), "{name} missing");
        assert!(
            page.contains(&format!("href=\"{name}\"")),
            "page lacks a link to {name}"
        );
    }
    // The page: balanced tables, no scripts.
    assert_eq!(
        page.matches("<table").count(),
        page.matches("</table>").count()
    );
    assert!(!page.contains("<script"));
    let json: serde_json::Value = serde_json::from_str(&read(&target, "result.json")).unwrap();
    assert_eq!(json["runs"].as_array().unwrap().len(), 3);
}

#[test]
fn the_page_names_the_trace_says_synthetic_and_shows_the_terminal_tables() {
    let fixture = fixture();
    let files = report::render(
        &fixture.report,
        Some(&fixture.heat_map),
        &ReportOptions::default(),
    )
    .unwrap();
    assert_eq!(files[0].name, "index.html");
    let page = &files[0].contents;
    // The label, HTML-escaped as a whole (it has no markup characters).
    assert!(fixture.report.trace.contains("not a real trace"));
    assert!(page.contains(&fixture.report.trace), "trace label missing");
    assert!(page.contains(">synthetic<"), "no synthetic badge");
    assert!(page.contains("hdd-ssd"));
    assert!(page.contains("20.0 s"), "period missing");
    assert!(page.contains("x1 (arrival"), "replay speed missing");
    // Every cell of both terminal tables appears as a table cell.
    for rows in [
        tierd_sim::tables::iops_rows(&fixture.report),
        tierd_sim::tables::response_rows(&fixture.report),
    ] {
        assert_eq!(rows.len(), 1 + fixture.report.runs.len());
        for row in &rows[1..] {
            let html_row: String = row.iter().map(|cell| format!("<td>{cell}</td>")).collect();
            assert!(
                page.contains(&html_row),
                "row {row:?} missing from the page"
            );
        }
    }

    let mut file_report = fixture.report.clone();
    file_report.trace = "traces/a<b>&c.csv".to_string();
    file_report.trace_kind = "file".to_string();
    let files = report::render(&file_report, None, &ReportOptions::default()).unwrap();
    let page = &files[0].contents;
    assert!(page.contains("traces/a&lt;b&gt;&amp;c.csv"));
    assert!(page.contains(">trace file<"));
    assert!(!page.contains(">synthetic<"));
    assert!(!files.iter().any(|file| file.name.starts_with("heatmap")));
}

#[test]
fn per_period_csvs_have_one_row_per_period_of_every_run() {
    let fixture = fixture();
    let directory = tempfile::tempdir().unwrap();
    report::write(
        directory.path(),
        &fixture.report,
        None,
        &ReportOptions::default(),
    )
    .unwrap();
    let runs = &fixture.report.runs;
    assert!(
        runs.iter().all(|run| run.periods.len() >= 5),
        "too few periods to test"
    );
    for (name, units) in [
        ("iops.csv", ["start_min", "iops"]),
        ("util.csv", ["ssd_util_percent", "hdd_util_percent"]),
        ("fast-bytes.csv", ["end_min", "ssd_used_bytes"]),
    ] {
        let (header, rows) = csv(directory.path(), name);
        for unit in units {
            column(&header, unit);
        }
        let policy = column(&header, "policy");
        let period = column(&header, "period");
        for run in runs {
            let periods: Vec<u64> = rows
                .iter()
                .filter(|row| row[policy] == run.policy)
                .map(|row| row[period].parse().unwrap())
                .collect();
            let expected: Vec<u64> = run.periods.iter().map(|period| period.index).collect();
            assert_eq!(periods, expected, "{name}: {}", run.policy);
        }
        assert_eq!(
            rows.len(),
            runs.iter().map(|run| run.periods.len()).sum::<usize>()
        );
    }

    // The values are the run's: requests per period and the home %util.
    let (header, rows) = csv(directory.path(), "iops.csv");
    let requests = column(&header, "requests");
    let total: u64 = rows
        .iter()
        .filter(|row| row[0] == "otf-ast")
        .map(|row| row[requests].parse::<u64>().unwrap())
        .sum();
    let otf_ast = runs.iter().find(|run| run.policy == "otf-ast").unwrap();
    assert_eq!(total, otf_ast.requests);
    let (header, rows) = csv(directory.path(), "util.csv");
    let util = column(&header, "hdd_util_percent");
    for (row, period) in rows
        .iter()
        .filter(|row| row[0] == "none")
        .zip(&runs[0].periods)
    {
        let percent: f64 = row[util].parse().unwrap();
        assert!((percent - period.tiers[1].util * 100.0).abs() < 1e-9);
    }
}

#[test]
fn response_cdfs_end_at_one_and_count_every_request() {
    let fixture = fixture();
    let files = report::render(&fixture.report, None, &ReportOptions::default()).unwrap();
    let text = &files
        .iter()
        .find(|file| file.name == "response-cdf.csv")
        .unwrap()
        .contents;
    let mut lines = text.lines();
    let header = csv_fields(lines.next().unwrap());
    assert!(header.contains(&"bucket_high_us".to_string()));
    let rows: Vec<Vec<String>> = lines.map(csv_fields).collect();
    let (policy, scope, count, fraction) = (
        column(&header, "policy"),
        column(&header, "scope"),
        column(&header, "count"),
        column(&header, "cumulative_fraction"),
    );
    for run in &fixture.report.runs {
        let all: Vec<&Vec<String>> = rows
            .iter()
            .filter(|row| row[policy] == run.policy && row[scope] == "all")
            .collect();
        let counted: u64 = all
            .iter()
            .map(|row| row[count].parse::<u64>().unwrap())
            .sum();
        assert_eq!(counted, run.requests, "{}", run.policy);
        assert_eq!(all.last().unwrap()[fraction], "1");
        let fractions: Vec<f64> = all
            .iter()
            .map(|row| row[fraction].parse().unwrap())
            .collect();
        assert!(fractions.windows(2).all(|pair| pair[0] <= pair[1]));
        for tier in &run.tiers {
            let pieces: u64 = rows
                .iter()
                .filter(|row| row[policy] == run.policy && row[scope] == tier.name)
                .map(|row| row[count].parse::<u64>().unwrap())
                .sum();
            assert_eq!(
                pieces,
                tier.response.count(),
                "{} {}",
                run.policy,
                tier.name
            );
        }
    }
}

/// Lines (`<polyline>`) of an SVG whose tooltip starts with `label`.
fn lines_labelled(svg: &str, label: &str) -> usize {
    svg.split("<polyline")
        .skip(1)
        .filter(|line| {
            line.split("<title>")
                .nth(1)
                .is_some_and(|title| title.starts_with(label))
        })
        .count()
}

#[test]
fn every_plot_has_one_line_per_policy() {
    let fixture = fixture();
    let files = report::render(&fixture.report, None, &ReportOptions::default()).unwrap();
    let svg = |name: &str| {
        &files
            .iter()
            .find(|file| file.name == name)
            .unwrap_or_else(|| panic!("{name} missing"))
            .contents
    };
    let runs = &fixture.report.runs;
    let tiers = runs[0].tiers.len();
    for run in runs {
        let label = run.policy.as_str();
        assert_eq!(lines_labelled(svg("iops.svg"), label), 1, "iops {label}");
        assert_eq!(
            lines_labelled(svg("fast-bytes.svg"), label),
            1,
            "fast {label}"
        );
        // One per tier panel.
        assert_eq!(
            lines_labelled(svg("util.svg"), &format!("{label} on ")),
            tiers
        );
        // Overall; per tier only where the run served pieces there.
        assert_eq!(
            lines_labelled(svg("response-cdf.svg"), &format!("{label} (all)")),
            1
        );
        for tier in &run.tiers {
            let expected = usize::from(tier.response.count() > 0);
            assert_eq!(
                lines_labelled(svg("response-cdf.svg"), &format!("{label} ({})", tier.name)),
                expected,
                "{label} on {}",
                tier.name
            );
        }
        // The legend names every policy once per chart.
        for name in ["iops.svg", "util.svg", "fast-bytes.svg", "response-cdf.svg"] {
            assert!(
                svg(name).contains(&format!(">{}</text>", run.policy)),
                "{name}"
            );
        }
    }
    assert_eq!(svg("iops.svg").matches("<polyline").count(), runs.len());
}

#[test]
fn moves_are_listed_and_all_in_the_csv() {
    let fixture = fixture();
    let options = ReportOptions {
        moves_listed: 1,
        ..ReportOptions::default()
    };
    let files = report::render(&fixture.report, None, &options).unwrap();
    let moves = &files
        .iter()
        .find(|file| file.name == "moves.csv")
        .unwrap()
        .contents;
    let total: usize = fixture
        .report
        .runs
        .iter()
        .map(|run| run.move_log.len())
        .sum();
    assert!(total > 0, "the fixture made no moves");
    assert_eq!(moves.lines().count(), 1 + total);
    let page = &files[0].contents;
    for run in &fixture.report.runs {
        if let Some(first) = run.move_log.first() {
            assert!(
                page.contains(&first.rule),
                "{}: rule of the first move",
                run.policy
            );
            assert!(page.contains(&format!("the first {} below", run.move_log.len().min(1))));
        }
    }
}

#[test]
fn the_heat_map_csv_lists_every_cell() {
    let fixture = fixture();
    let directory = tempfile::tempdir().unwrap();
    report::write(
        directory.path(),
        &fixture.report,
        Some(&fixture.heat_map),
        &ReportOptions::default(),
    )
    .unwrap();
    let (header, rows) = csv(directory.path(), "heatmap.csv");
    assert_eq!(rows.len(), fixture.heat_map.cells.len());
    let io = column(&header, "io");
    let total: u64 = rows.iter().map(|row| row[io].parse::<u64>().unwrap()).sum();
    // Every request counted once (the fixture counts requests, not pieces).
    assert_eq!(total, fixture.report.runs[0].requests);
    column(&header, "offset_gib");
    assert_eq!(read(directory.path(), "heatmap.svg"), fixture.heat_map.svg);
}

#[test]
fn writing_where_a_file_stands_names_the_path() {
    let fixture = fixture();
    let directory = tempfile::tempdir().unwrap();
    let blocker = directory.path().join("taken");
    std::fs::write(&blocker, "x").unwrap();
    let error = report::write(&blocker, &fixture.report, None, &ReportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("taken"), "{error}");
}

#[test]
fn a_report_without_runs_still_renders() {
    let stack = TierStack::preset("ssd-mem").unwrap();
    let empty = SimReport::new("nothing".to_string(), "file", &stack, Vec::new());
    let files = report::render(&empty, None, &ReportOptions::default()).unwrap();
    for file in files.iter().filter(|file| file.name.ends_with(".svg")) {
        check_xml(&file.contents).unwrap_or_else(|error| panic!("{}: {error}", file.name));
    }
    for file in files.iter().filter(|file| file.name.ends_with(".csv")) {
        assert_eq!(
            file.contents.lines().count(),
            1,
            "{}: header only",
            file.name
        );
    }
    assert!(files[0].contents.contains("nothing"));
}

/// A size sweep (`tierd sim --fast-bytes`): every policy at two fast-tier
/// sizes, as the CLI runs it.
#[test]
fn a_size_sweep_reports_each_runs_size_its_curves_and_a_curve_plot() {
    let preset = tierd_synth::preset(PRESET).unwrap();
    let stack = TierStack::preset("hdd-ssd").unwrap();
    let mut config = SimConfig::new(stack, preset.volume_bytes);
    config.period_ns = PERIOD_NS;
    config.replay = Replay::OpenLoop { speed: 1.0 };
    let sizes = [64u64 << 20, 2 << 30];
    let mut runs = Vec::new();
    for bytes in sizes {
        let sized = tierd_sim::sweep::with_fast_bytes(&config, bytes);
        for strategy in Strategy::parse_list("none,otf-ast,lru").unwrap() {
            let mut reader = open_workload();
            runs.push(tierd_sim::run(&sized, &strategy, reader.as_mut(), &mut |_| {}).unwrap());
        }
    }
    let report = SimReport::new("sweep".to_string(), "synthetic", &config.stack, runs);
    // Every run says the capacity it was given; tiering the segments of it.
    let given: Vec<u64> = report.runs.iter().map(|run| run.fast_bytes).collect();
    assert_eq!(
        given,
        [sizes[0], sizes[0], sizes[0], sizes[1], sizes[1], sizes[1]]
    );
    assert_eq!(report.runs[1].fast_segments, Some(0));
    assert_eq!(report.runs[4].fast_segments, Some(2));
    assert_eq!(
        report.runs[2].cache.as_ref().unwrap().capacity_pages,
        (64 << 20) / 4096
    );
    // One curve point per run, by policy then size; hit ratios in range,
    // and the larger cache misses no more than the smaller one.
    assert_eq!(report.curve.len(), 6);
    let lru: Vec<_> = report
        .curve
        .iter()
        .filter(|point| point.policy == "lru")
        .collect();
    assert_eq!(lru.len(), 2);
    assert!(lru[1].hit_ratio >= lru[0].hit_ratio, "{lru:?}");
    assert!((lru[0].hit_ratio + lru[0].miss_ratio - 1.0).abs() < 1e-12);
    let text = tierd_sim::tables::render_text(&report);
    assert!(text.contains(tierd_sim::tables::HIT_CURVE_TITLE), "{text}");
    assert!(
        text.contains("64.00 MiB") && text.contains("2.00 GiB"),
        "{text}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["runs"][0]["fast_bytes"], sizes[0]);
    assert_eq!(json["curve"].as_array().unwrap().len(), 6);
    let files = report::render(&report, None, &ReportOptions::default()).unwrap();
    let curves = files.iter().find(|file| file.name == "curves.svg").unwrap();
    check_xml(&curves.contents).unwrap();
    assert_eq!(
        lines_labelled(&curves.contents, "lru"),
        2,
        "one line per panel"
    );
    let csv = files.iter().find(|file| file.name == "curves.csv").unwrap();
    assert_eq!(csv.contents.lines().count(), 7);
    assert!(files[0].contents.contains("curves.svg"));
    // The per-run CSVs tell one policy's runs apart by their size: lru's
    // rows of iops.csv carry both sizes (they once carried only "lru").
    for name in [
        "iops.csv",
        "util.csv",
        "fast-bytes.csv",
        "response-cdf.csv",
        "moves.csv",
    ] {
        let file = files.iter().find(|file| file.name == name).unwrap();
        let header = file.contents.lines().next().unwrap();
        assert!(header.ends_with(",fast_bytes"), "{name}: {header}");
    }
    let iops = files.iter().find(|file| file.name == "iops.csv").unwrap();
    let lru_sizes: std::collections::BTreeSet<&str> = iops
        .contents
        .lines()
        .skip(1)
        .filter(|line| line.starts_with("lru,"))
        .map(|line| line.rsplit(',').next().unwrap())
        .collect();
    let expected: std::collections::BTreeSet<String> =
        sizes.iter().map(|bytes| bytes.to_string()).collect();
    assert_eq!(
        lru_sizes,
        expected.iter().map(String::as_str).collect(),
        "iops.csv sizes of lru"
    );
}
