mod common;

use std::io::BufReader;

use common::*;
use tierd_analysis::analyze::{analyze, AnalyzeOptions};
use tierd_analysis::heatmap::{self, HeatmapError};
use tierd_trace::Op;

fn small_analysis() -> tierd_analysis::Analysis {
    let mut requests = Vec::new();
    for period in 0..12 {
        requests.extend(burst(period, 100, Op::Read, 10 * GIB, 4096));
        requests.extend(burst(
            period,
            1 + period,
            Op::Write,
            (20 + period) * GIB,
            4096,
        ));
    }
    let options = AnalyzeOptions {
        volume_bytes: Some(64 * GIB),
        ..AnalyzeOptions::default()
    };
    analyze(&mut reader(requests), &options).unwrap()
}

fn decode(path: &std::path::Path) -> (png::OutputInfo, Vec<u8>) {
    let file = std::fs::File::open(path).unwrap();
    let mut decoder = png::Decoder::new(BufReader::new(file)).read_info().unwrap();
    let mut pixels = vec![0; decoder.output_buffer_size().unwrap()];
    let info = decoder.next_frame(&mut pixels).unwrap();
    pixels.truncate(info.buffer_size());
    (info, pixels)
}

#[test]
fn png_decodes_to_the_rendered_image() {
    let analysis = small_analysis();
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("heat.png");
    heatmap::write(&analysis, &path).unwrap();
    let rendered = heatmap::render_png(&analysis);
    let (info, pixels) = decode(&path);
    assert_eq!((info.width, info.height), (rendered.width, rendered.height));
    assert_eq!(info.color_type, png::ColorType::Rgb);
    assert_eq!(pixels, rendered.pixels);
    // 12 periods × 64 segments: cells are 32 px wide and 6 px tall; the plot has hot pixels.
    assert!(
        rendered.width > 12 * 32 && rendered.width < 1000,
        "{}",
        rendered.width
    );
    let darkest = pixels
        .chunks_exact(3)
        .filter(|pixel| pixel[1] < 20 && pixel[0] > 40)
        .count();
    assert!(darkest > 0, "no dark (hot) pixels");
}

#[test]
fn big_matrices_are_downsampled_to_a_bounded_image() {
    // 5000 periods × 2000 segments, one request per period walking over the segments.
    let requests: Vec<_> = (0..5000u64)
        .map(|period| read(period * 60 * SECOND_NS, (period % 2000) * GIB, 4096))
        .collect();
    let options = AnalyzeOptions {
        volume_bytes: Some(2000 * GIB),
        segment_table_rows: 0,
        ..AnalyzeOptions::default()
    };
    let analysis = analyze(&mut reader(requests), &options).unwrap();
    assert_eq!((analysis.periods, analysis.segments), (5000, 2000));
    assert!(analysis.segment_table.is_none());
    let image = heatmap::render_png(&analysis);
    assert!(
        image.width <= 2000 && image.height <= 1000,
        "{}x{}",
        image.width,
        image.height
    );
    let svg = heatmap::render_svg(&analysis);
    // At most 600 × 400 bins, one rect each, plus frame and legend.
    assert!(svg.matches("<rect").count() <= 600 * 400 + 100);
}

#[test]
fn svg_has_cells_axes_and_legend() {
    let analysis = small_analysis();
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("heat.SVG");
    heatmap::write(&analysis, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("time (minutes)"));
    assert!(svg.contains("segment (GiB offset)"));
    assert!(svg.contains("<g class=\"legend\">"));
    // Cells: segment 10 in 12 periods, segments 20..=31 once each → 24 non-empty cells.
    let cells = svg
        .split("<g class=\"cells\">")
        .nth(1)
        .unwrap()
        .split("</g>")
        .next()
        .unwrap();
    assert_eq!(cells.matches("<rect").count(), 24);
    assert!(cells.contains("<title>100 IO</title>"));
}

#[test]
fn unknown_extension_is_a_clear_error() {
    let analysis = small_analysis();
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("heat.jpg");
    let error = heatmap::write(&analysis, &path).unwrap_err();
    assert!(matches!(error, HeatmapError::UnsupportedExtension { .. }));
    let message = error.to_string();
    assert!(
        message.contains("heat.jpg") && message.contains(".png or .svg"),
        "{message}"
    );
    assert!(!path.exists());
    // A directory that does not exist names the path.
    let missing = directory.path().join("no/such/dir/heat.png");
    let error = heatmap::write(&analysis, &missing).unwrap_err();
    assert!(error.to_string().contains("no/such/dir"), "{error}");
}
