//! Segment × period heat maps of an [`Analysis`]: PNG or SVG by extension.
//!
//! Segment on the y axis (segment 0 at the bottom), period on the x axis (time
//! in minutes), colour = IO on a log scale, white = no IO. The plot area is
//! bounded; when there are more periods or segments than bins, cells are
//! merged and a bin shows the **sum** of their IO, so a hot spot never
//! disappears. See `docs/analysis.md`, "Heat map".

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::analyze::Analysis;

/// Most bins along x / y in a PNG (one bin is at least one pixel).
pub const PNG_MAX_BINS: (usize, usize) = (1600, 800);
/// Most bins along x / y in an SVG (one `<rect>` per non-empty bin).
pub const SVG_MAX_BINS: (usize, usize) = (600, 400);

#[derive(Debug, thiserror::Error)]
pub enum HeatmapError {
    #[error(
        "{path}: cannot tell the image type from the extension; use a path ending in .png or .svg"
    )]
    UnsupportedExtension { path: PathBuf },
    #[error("{path}: cannot write the heat map: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: cannot encode the PNG: {source}")]
    Png {
        path: PathBuf,
        #[source]
        source: png::EncodingError,
    },
}

/// Writes the heat map of `analysis` to `path`: PNG for `.png`, SVG for
/// `.svg` (case-insensitive); any other extension is an error.
pub fn write(analysis: &Analysis, path: &Path) -> Result<(), HeatmapError> {
    let extension = path
        .extension()
        .and_then(|extension| extension.to_str())
        .map(str::to_ascii_lowercase);
    let io_error = |source| HeatmapError::Io {
        path: path.to_path_buf(),
        source,
    };
    match extension.as_deref() {
        Some("png") => {
            let image = render_png(analysis);
            let file = std::fs::File::create(path).map_err(io_error)?;
            let png_error = |source| HeatmapError::Png {
                path: path.to_path_buf(),
                source,
            };
            let mut encoder =
                png::Encoder::new(std::io::BufWriter::new(file), image.width, image.height);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header().map_err(png_error)?;
            writer.write_image_data(&image.pixels).map_err(png_error)?;
            writer.finish().map_err(png_error)
        }
        Some("svg") => {
            let text = render_svg(analysis);
            let mut file = std::fs::File::create(path).map_err(io_error)?;
            file.write_all(text.as_bytes()).map_err(io_error)
        }
        _ => Err(HeatmapError::UnsupportedExtension {
            path: path.to_path_buf(),
        }),
    }
}

/// IO summed into bins; `values[row * columns + column]`, row 0 = lowest segments.
struct Bins {
    columns: usize,
    rows: usize,
    values: Vec<u64>,
    max: u64,
}

fn bin_of(index: u64, count: u64, bins: usize) -> usize {
    if count == 0 {
        return 0;
    }
    let bin = u128::from(index) * bins as u128 / u128::from(count);
    (bin as usize).min(bins.saturating_sub(1))
}

fn binned(analysis: &Analysis, max_bins: (usize, usize)) -> Bins {
    let matrix = &analysis.matrix;
    let columns = usize::try_from(matrix.periods)
        .unwrap_or(usize::MAX)
        .clamp(1, max_bins.0);
    let rows = usize::try_from(matrix.segments)
        .unwrap_or(usize::MAX)
        .clamp(1, max_bins.1);
    let mut values = vec![0u64; columns * rows];
    for (period, cell) in matrix.cells() {
        let column = bin_of(period, matrix.periods.max(1), columns);
        let row = bin_of(cell.segment, matrix.segments.max(1), rows);
        values[row * columns + column] += u64::from(cell.io);
    }
    let max = values.iter().copied().max().unwrap_or(0);
    Bins {
        columns,
        rows,
        values,
        max,
    }
}

/// Colour stops from light (few IO) to dark (most IO).
const STOPS: [[u8; 3]; 5] = [
    [255, 237, 160],
    [254, 178, 76],
    [240, 59, 32],
    [189, 0, 38],
    [60, 0, 40],
];
const WHITE: [u8; 3] = [255, 255, 255];
const INK: [u8; 3] = [30, 30, 30];
const GRID: [u8; 3] = [200, 200, 200];

/// Position of `value` on the log scale, in 0..=1 (0 for no IO).
fn level(value: u64, max: u64) -> f64 {
    if value == 0 || max == 0 {
        return 0.0;
    }
    if max == 1 {
        return 1.0;
    }
    ((value as f64).ln_1p() / (max as f64).ln_1p()).clamp(0.0, 1.0)
}

fn colour_at(position: f64) -> [u8; 3] {
    let scaled = position.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let index = (scaled.floor() as usize).min(STOPS.len() - 2);
    let fraction = scaled - index as f64;
    let (low, high) = (STOPS[index], STOPS[index + 1]);
    let mut colour = [0u8; 3];
    for channel in 0..3 {
        let value = f64::from(low[channel])
            + (f64::from(high[channel]) - f64::from(low[channel])) * fraction;
        colour[channel] = value.round().clamp(0.0, 255.0) as u8;
    }
    colour
}

fn colour(value: u64, max: u64) -> [u8; 3] {
    if value == 0 {
        WHITE
    } else {
        colour_at(level(value, max))
    }
}

/// A "nice" tick step (1, 2 or 5 × 10^k) giving at most about `target` ticks over `span`.
fn tick_step(span: f64, target: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / target;
    let magnitude = 10f64.powf(raw.log10().floor());
    for factor in [1.0, 2.0, 5.0, 10.0] {
        if factor * magnitude >= raw {
            return factor * magnitude;
        }
    }
    10.0 * magnitude
}

fn format_tick(value: f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        format!("{}", value.round() as i64)
    } else {
        let text = format!("{value:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Ticks along an axis: (value, label).
fn ticks(span: f64, target: f64) -> Vec<f64> {
    let step = tick_step(span, target);
    let mut values = Vec::new();
    let mut value = 0.0;
    while value <= span + step * 1e-9 && values.len() < 100 {
        values.push(value);
        value += step;
    }
    values
}

fn segment_label(segment: f64, segment_bytes: u64) -> String {
    let gib = segment * segment_bytes as f64 / (1u64 << 30) as f64;
    format!(
        "{} ({}G)",
        format_tick(segment),
        format_tick((gib * 100.0).round() / 100.0)
    )
}

/// Legend tick values: 1, 10, 100, ... up to `max`, and `max` itself.
fn legend_values(max: u64) -> Vec<u64> {
    let mut values = Vec::new();
    let mut value = 1u64;
    while value <= max {
        values.push(value);
        match value.checked_mul(10) {
            Some(next) => value = next,
            None => break,
        }
    }
    if values.last() != Some(&max) && max > 0 {
        values.push(max);
    }
    values
}

const TITLE: &str = "IO per segment and period (log scale)";

fn subtitle(analysis: &Analysis) -> String {
    format!(
        "{} segments of {}, {} periods of {} s",
        analysis.segments,
        tierd_common::units::Bytes(analysis.settings.segment_bytes),
        analysis.periods,
        analysis.settings.period_s
    )
}

fn total_minutes(analysis: &Analysis) -> f64 {
    analysis.periods as f64 * analysis.settings.period_s / 60.0
}

// ---------------------------------------------------------------------------
// PNG

/// An RGB image.
pub struct Image {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl Image {
    fn new(width: u32, height: u32) -> Self {
        Self {
            width,
            height,
            pixels: vec![255; width as usize * height as usize * 3],
        }
    }

    fn fill(&mut self, x: i64, y: i64, width: i64, height: i64, colour: [u8; 3]) {
        let x0 = x.clamp(0, i64::from(self.width));
        let y0 = y.clamp(0, i64::from(self.height));
        let x1 = (x + width).clamp(0, i64::from(self.width));
        let y1 = (y + height).clamp(0, i64::from(self.height));
        if x1 <= x0 || y1 <= y0 {
            return;
        }
        for row in y0..y1 {
            let start = (row as usize * self.width as usize + x0 as usize) * 3;
            let end = (row as usize * self.width as usize + x1 as usize) * 3;
            for pixel in self.pixels[start..end].chunks_exact_mut(3) {
                pixel.copy_from_slice(&colour);
            }
        }
    }

    /// Draws `text` (upper-cased) with its top-left corner at (x, y).
    fn text(&mut self, x: i64, y: i64, text: &str, colour: [u8; 3]) {
        let mut cursor = x;
        for character in text.chars() {
            let rows = glyph(character.to_ascii_uppercase());
            for (row, bits) in rows.iter().enumerate() {
                for column in 0..5 {
                    if bits & (0b10000 >> column) != 0 {
                        self.fill(
                            cursor + column * FONT_SCALE,
                            y + row as i64 * FONT_SCALE,
                            FONT_SCALE,
                            FONT_SCALE,
                            colour,
                        );
                    }
                }
            }
            cursor += GLYPH_ADVANCE;
        }
    }
}

const FONT_SCALE: i64 = 2;
const GLYPH_ADVANCE: i64 = 6 * FONT_SCALE;
const GLYPH_HEIGHT: i64 = 7 * FONT_SCALE;

fn text_width(text: &str) -> i64 {
    text.chars().count() as i64 * GLYPH_ADVANCE
}

/// A 5×7 bitmap glyph, one row per byte, bit 4 = leftmost column.
fn glyph(character: char) -> [u8; 7] {
    match character {
        '0' => [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E],
        '1' => [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E],
        '2' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F],
        '3' => [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E],
        '4' => [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02],
        '5' => [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E],
        '6' => [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E],
        '7' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E],
        '9' => [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C],
        'A' => [0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'B' => [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E],
        'C' => [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E],
        'D' => [0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C],
        'E' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F],
        'F' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10],
        'G' => [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F],
        'H' => [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'I' => [0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F],
        'M' => [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'P' => [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10],
        'Q' => [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D],
        'R' => [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11],
        'S' => [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E],
        'T' => [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A],
        'X' => [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04],
        'Z' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F],
        ' ' => [0; 7],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        '.' => [0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C],
        ',' => [0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08],
        ';' => [0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08],
        '-' => [0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00],
        '/' => [0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00],
        ':' => [0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00],
        '=' => [0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00],
        '%' => [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03],
        '+' => [0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00],
        '<' => [0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02],
        '>' => [0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08],
        _ => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04],
    }
}

/// Renders the PNG heat map into memory (also used by tests).
pub fn render_png(analysis: &Analysis) -> Image {
    let bins = binned(analysis, PNG_MAX_BINS);
    // Small matrices get fat cells so the image stays readable.
    let cell_width = (800 / bins.columns).clamp(1, 32) as i64;
    let cell_height = (400 / bins.rows).clamp(1, 24) as i64;
    let plot_width = bins.columns as i64 * cell_width;
    let plot_height = bins.rows as i64 * cell_height;

    let segment_bytes = analysis.settings.segment_bytes;
    let y_ticks = ticks(analysis.segments as f64, 8.0);
    let y_labels: Vec<String> = y_ticks
        .iter()
        .map(|segment| segment_label(*segment, segment_bytes))
        .collect();
    let label_width = y_labels
        .iter()
        .map(|label| text_width(label))
        .max()
        .unwrap_or(0);
    let legend_values = legend_values(bins.max);
    let legend_label_width = legend_values
        .iter()
        .map(|value| text_width(&value.to_string()))
        .max()
        .unwrap_or(0)
        .max(text_width("IO"));

    let subtitle = subtitle(analysis);
    let y_title = "segment (GiB offset)";
    let x_title = "time (minutes)";
    let margin = 16;
    let line = GLYPH_HEIGHT + 8;
    let plot_x = margin + label_width + 10;
    let plot_y = margin + 3 * line + 20;
    let legend_x = plot_x + plot_width + 30;
    let legend_width = 20;
    let width = (legend_x + legend_width + 8 + legend_label_width + margin)
        .max(margin * 2 + text_width(TITLE))
        .max(margin * 2 + text_width(&subtitle))
        .max(margin * 2 + text_width(y_title));
    let height = plot_y + plot_height.max(40) + 8 + GLYPH_HEIGHT + 10 + GLYPH_HEIGHT + margin;
    let mut image = Image::new(width as u32, height as u32);

    image.text(margin, margin, TITLE, INK);
    image.text(margin, margin + line, &subtitle, INK);
    image.text(margin, margin + 2 * line + 8, y_title, INK);

    // Cells.
    for row in 0..bins.rows {
        for column in 0..bins.columns {
            let value = bins.values[row * bins.columns + column];
            if value == 0 {
                continue;
            }
            let x = plot_x + column as i64 * cell_width;
            let y = plot_y + plot_height - (row as i64 + 1) * cell_height;
            image.fill(x, y, cell_width, cell_height, colour(value, bins.max));
        }
    }

    // Frame.
    image.fill(plot_x - 1, plot_y - 1, plot_width + 2, 1, INK);
    image.fill(plot_x - 1, plot_y + plot_height, plot_width + 2, 1, INK);
    image.fill(plot_x - 1, plot_y - 1, 1, plot_height + 2, INK);
    image.fill(plot_x + plot_width, plot_y - 1, 1, plot_height + 2, INK);

    // Y ticks: segment index and GiB offset.
    let segments = analysis.segments.max(1) as f64;
    for (segment, label) in y_ticks.iter().zip(&y_labels) {
        let y = plot_y + plot_height - ((segment / segments) * plot_height as f64).round() as i64;
        image.fill(plot_x - 5, y, 4, 1, INK);
        image.text(
            plot_x - 8 - text_width(label),
            y - GLYPH_HEIGHT / 2,
            label,
            INK,
        );
    }

    // X ticks: minutes from the first request.
    let minutes = total_minutes(analysis);
    let x_ticks = ticks(minutes, 10.0);
    for minute in &x_ticks {
        let x = plot_x
            + if minutes > 0.0 {
                ((minute / minutes) * plot_width as f64).round() as i64
            } else {
                0
            };
        image.fill(x, plot_y + plot_height + 1, 1, 5, INK);
        let label = format_tick(*minute);
        image.text(
            x - text_width(&label) / 2,
            plot_y + plot_height + 8,
            &label,
            INK,
        );
    }
    image.text(
        plot_x + plot_width / 2 - text_width(x_title) / 2,
        plot_y + plot_height + 8 + GLYPH_HEIGHT + 10,
        x_title,
        INK,
    );

    // Legend: a colour bar from 1 IO (bottom) to the maximum (top).
    image.text(legend_x, plot_y - GLYPH_HEIGHT - 8, "IO", INK);
    let bar_height = plot_height.max(40);
    for step in 0..bar_height {
        let position = (step as f64 + 0.5) / bar_height as f64;
        image.fill(
            legend_x,
            plot_y + bar_height - 1 - step,
            legend_width,
            1,
            colour_at(position),
        );
    }
    image.fill(legend_x, plot_y + bar_height, legend_width, 1, GRID);
    let mut labelled: Vec<i64> = Vec::new();
    // The maximum first, so a power of ten right under it yields its place.
    for value in legend_values.iter().rev() {
        let position = level(*value, bins.max);
        let y = plot_y + bar_height - (position * bar_height as f64).round() as i64;
        if labelled
            .iter()
            .any(|other| (other - y).abs() < GLYPH_HEIGHT + 2)
        {
            continue;
        }
        labelled.push(y);
        image.fill(legend_x + legend_width, y, 4, 1, INK);
        image.text(
            legend_x + legend_width + 8,
            y - GLYPH_HEIGHT / 2,
            &value.to_string(),
            INK,
        );
    }
    image
}

// ---------------------------------------------------------------------------
// SVG

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn hex(colour: [u8; 3]) -> String {
    format!("#{:02x}{:02x}{:02x}", colour[0], colour[1], colour[2])
}

/// Renders the SVG heat map as text (also used by tests).
pub fn render_svg(analysis: &Analysis) -> String {
    let bins = binned(analysis, SVG_MAX_BINS);
    let plot_width = 800.0;
    let plot_height = 400.0;
    let cell_width = plot_width / bins.columns as f64;
    let cell_height = plot_height / bins.rows as f64;
    let plot_x = 130.0;
    let plot_y = 60.0;
    let legend_x = plot_x + plot_width + 30.0;
    let width = legend_x + 120.0;
    let height = plot_y + plot_height + 70.0;

    let mut svg = String::new();
    // Writing to a String cannot fail; the results are ignored.
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="{width}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{plot_x}" y="24" font-size="14">{TITLE}; {}</text>"#,
        escape(&subtitle(analysis))
    );
    let _ = writeln!(
        svg,
        r#"<text x="10" y="{}">segment (GiB offset)</text>"#,
        plot_y - 10.0
    );
    let _ = writeln!(svg, r#"<g class="cells">"#);
    for row in 0..bins.rows {
        for column in 0..bins.columns {
            let value = bins.values[row * bins.columns + column];
            if value == 0 {
                continue;
            }
            let x = plot_x + column as f64 * cell_width;
            let y = plot_y + plot_height - (row as f64 + 1.0) * cell_height;
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.2}" y="{y:.2}" width="{cell_width:.2}" height="{cell_height:.2}" fill="{}"><title>{value} IO</title></rect>"#,
                hex(colour(value, bins.max))
            );
        }
    }
    let _ = writeln!(svg, "</g>");
    let _ = writeln!(
        svg,
        r#"<rect x="{plot_x}" y="{plot_y}" width="{plot_width}" height="{plot_height}" fill="none" stroke="black"/>"#
    );

    let segments = analysis.segments.max(1) as f64;
    for segment in ticks(analysis.segments as f64, 8.0) {
        let y = plot_y + plot_height - segment / segments * plot_height;
        let _ = writeln!(
            svg,
            r#"<line x1="{}" y1="{y:.2}" x2="{plot_x}" y2="{y:.2}" stroke="black"/><text x="{}" y="{:.2}" text-anchor="end">{}</text>"#,
            plot_x - 5.0,
            plot_x - 8.0,
            y + 4.0,
            escape(&segment_label(segment, analysis.settings.segment_bytes))
        );
    }
    let minutes = total_minutes(analysis);
    for minute in ticks(minutes, 10.0) {
        let x = plot_x
            + if minutes > 0.0 {
                minute / minutes * plot_width
            } else {
                0.0
            };
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.2}" y1="{}" x2="{x:.2}" y2="{}" stroke="black"/><text x="{x:.2}" y="{}" text-anchor="middle">{}</text>"#,
            plot_y + plot_height,
            plot_y + plot_height + 5.0,
            plot_y + plot_height + 18.0,
            format_tick(minute)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">time (minutes)</text>"#,
        plot_x + plot_width / 2.0,
        plot_y + plot_height + 40.0
    );

    // Legend.
    let _ = writeln!(svg, r#"<g class="legend">"#);
    let _ = writeln!(
        svg,
        r#"<text x="{legend_x}" y="{}">IO</text>"#,
        plot_y - 10.0
    );
    let steps = 50;
    for step in 0..steps {
        let position = (step as f64 + 0.5) / steps as f64;
        let y = plot_y + plot_height - (step as f64 + 1.0) * plot_height / steps as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{legend_x}" y="{y:.2}" width="20" height="{:.2}" fill="{}"/>"#,
            plot_height / steps as f64 + 0.5,
            hex(colour_at(position))
        );
    }
    let mut labelled: Vec<f64> = Vec::new();
    for value in legend_values(bins.max).into_iter().rev() {
        let y = plot_y + plot_height - level(value, bins.max) * plot_height;
        if labelled.iter().any(|other| (other - y).abs() < 14.0) {
            continue;
        }
        labelled.push(y);
        let _ = writeln!(
            svg,
            r#"<line x1="{}" y1="{y:.2}" x2="{}" y2="{y:.2}" stroke="black"/><text x="{}" y="{:.2}">{value}</text>"#,
            legend_x + 20.0,
            legend_x + 24.0,
            legend_x + 28.0,
            y + 4.0
        );
    }
    let _ = writeln!(svg, "</g>");
    let _ = writeln!(svg, "</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ticks() {
        assert_eq!(tick_step(100.0, 10.0), 10.0);
        assert_eq!(tick_step(130.0, 10.0), 20.0);
        assert_eq!(tick_step(13.0, 10.0), 2.0);
        assert_eq!(ticks(13.0, 10.0), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
        assert_eq!(format_tick(2.5), "2.5");
        assert_eq!(format_tick(3.0), "3");
        assert_eq!(legend_values(250), [1, 10, 100, 250]);
        assert_eq!(legend_values(100), [1, 10, 100]);
        assert!(legend_values(0).is_empty());
    }

    #[test]
    fn colours_darken_with_io() {
        assert_eq!(colour(0, 10), WHITE);
        assert_eq!(colour(10, 10), STOPS[4]);
        assert_eq!(colour(1, 1), STOPS[4]);
        let light = colour(1, 1000);
        let dark = colour(500, 1000);
        let sum = |colour: [u8; 3]| {
            colour
                .iter()
                .map(|channel| u32::from(*channel))
                .sum::<u32>()
        };
        assert!(sum(light) > sum(dark));
    }

    #[test]
    fn bins_sum_merged_cells() {
        assert_eq!(bin_of(0, 3200, 1600), 0);
        assert_eq!(bin_of(1, 3200, 1600), 0);
        assert_eq!(bin_of(3199, 3200, 1600), 1599);
        assert_eq!(bin_of(5, 10, 10), 5);
    }
}
