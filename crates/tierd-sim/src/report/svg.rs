//! Line charts as hand-written SVG: stacked panels sharing one legend, with
//! linear or log-10 x axes, tick labels, grid lines and axis titles. No
//! scripts, no external fonts; every chart is a standalone file.

use std::fmt::Write as _;

/// Width of every chart, px.
pub const CHART_WIDTH: f64 = 900.0;
const PLOT_LEFT: f64 = 84.0;
const PLOT_RIGHT: f64 = 24.0;
const PANEL_HEIGHT: f64 = 230.0;
const PANEL_TITLE_HEIGHT: f64 = 26.0;
const X_AXIS_HEIGHT: f64 = 48.0;
const LEGEND_ROW_HEIGHT: f64 = 18.0;
/// Share of a panel's height left free above and below the y range.
const Y_INSET_FRACTION: f64 = 0.03;
/// Average advance of a 12 px sans-serif character, for laying out legends.
const CHARACTER_WIDTH: f64 = 7.0;

/// Colour-blind-safe line colours (Okabe–Ito), assigned to runs in order.
pub const PALETTE: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#8c8c8c",
];

/// Colour of the `index`th run.
pub fn colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    Linear,
    /// Log 10; non-positive values are left out.
    Log,
}

/// How tick values are written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TickFormat {
    /// Plain numbers with as many decimals as the tick step needs.
    Number,
    /// A duration given in microseconds: `100 µs`, `1 ms`, `10 s`.
    Microseconds,
}

/// One line.
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub colour: &'static str,
    pub dashed: bool,
    /// (x, y) in data units, in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// One plot area with its own y axis.
#[derive(Clone, Debug)]
pub struct Panel {
    pub title: String,
    pub y_label: String,
    /// Fixed y range; `None`: from 0 to a round value above the data.
    pub y_range: Option<(f64, f64)>,
    pub y_format: TickFormat,
    /// A dashed horizontal reference line (value, label), drawn when it
    /// falls inside the y range (it does not stretch the axis).
    pub reference: Option<(f64, String)>,
    pub series: Vec<Series>,
}

/// A chart: panels stacked top to bottom over one x axis range.
#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub subtitle: String,
    pub x_label: String,
    pub x_scale: Scale,
    pub x_format: TickFormat,
    /// Fixed x range; `None`: the data's (linear: from 0; log: whole decades).
    pub x_range: Option<(f64, f64)>,
    pub panels: Vec<Panel>,
    /// (label, colour, dashed) for the shared legend.
    pub legend: Vec<(String, &'static str, bool)>,
}

/// Escapes text for SVG/HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters are not allowed in XML 1.0.
            character if character.is_control() && character != '\n' && character != '\t' => {
                out.push(' ')
            }
            character => out.push(character),
        }
    }
    out
}

/// A round tick step (1, 2 or 5 × 10^k) giving at most about `target` ticks over `span`.
pub fn tick_step(span: f64, target: f64) -> f64 {
    if !(span > 0.0 && span.is_finite()) {
        return 1.0;
    }
    let raw = span / target;
    let magnitude = 10f64.powf(raw.log10().floor());
    for factor in [1.0, 2.0, 5.0] {
        if factor * magnitude >= raw * (1.0 - 1e-9) {
            return factor * magnitude;
        }
    }
    10.0 * magnitude
}

/// `value` written with the decimals a tick `step` needs.
pub fn format_number(value: f64, step: f64) -> String {
    let decimals = if step >= 1.0 || step <= 0.0 || !step.is_finite() {
        0
    } else {
        ((-step.log10()).ceil() as usize).min(9)
    };
    let text = format!("{value:.decimals$}");
    if text == "-0" {
        "0".to_string()
    } else {
        text
    }
}

/// A duration in µs as a tick label: `500 ns`, `20 µs`, `1.5 ms`, `10 s`.
pub fn format_microseconds(value_us: f64) -> String {
    let (value, unit) = if value_us >= 1e6 {
        (value_us / 1e6, "s")
    } else if value_us >= 1e3 {
        (value_us / 1e3, "ms")
    } else if value_us >= 1.0 {
        (value_us, "µs")
    } else {
        (value_us * 1e3, "ns")
    };
    let text = format!("{value:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} {unit}")
}

fn format_tick(value: f64, step: f64, format: TickFormat) -> String {
    match format {
        TickFormat::Number => format_number(value, step),
        TickFormat::Microseconds => format_microseconds(value),
    }
}

/// Linear ticks from `low` to `high` at a round step.
fn linear_ticks(low: f64, high: f64, target: f64) -> (Vec<f64>, f64) {
    let step = tick_step(high - low, target);
    let mut ticks = Vec::new();
    let mut index = (low / step).ceil();
    while index * step <= high + step * 1e-9 && ticks.len() < 200 {
        ticks.push(index * step);
        index += 1.0;
    }
    (ticks, step)
}

/// Whole decades covering `low..=high` (both > 0).
fn decade_range(low: f64, high: f64) -> (f64, f64) {
    let low = 10f64.powf(low.log10().floor());
    let mut high = 10f64.powf(high.log10().ceil());
    if high <= low {
        high = low * 10.0;
    }
    (low, high)
}

/// A round upper bound for a y axis starting at 0.
fn round_up(max: f64) -> f64 {
    if !(max > 0.0 && max.is_finite()) {
        return 1.0;
    }
    let step = tick_step(max, 5.0);
    (max / step).ceil() * step
}

struct XAxis {
    scale: Scale,
    low: f64,
    high: f64,
}

impl XAxis {
    /// Position of `value` in 0..=1 along the axis, `None` when it cannot be drawn.
    fn position(&self, value: f64) -> Option<f64> {
        match self.scale {
            Scale::Linear => Some((value - self.low) / (self.high - self.low)),
            Scale::Log => (value > 0.0).then(|| {
                (value.log10() - self.low.log10()) / (self.high.log10() - self.low.log10())
            }),
        }
    }
}

fn x_axis(chart: &Chart) -> XAxis {
    let values = chart
        .panels
        .iter()
        .flat_map(|panel| &panel.series)
        .flat_map(|series| &series.points)
        .map(|point| point.0)
        .filter(|value| value.is_finite() && (chart.x_scale == Scale::Linear || *value > 0.0));
    let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
    for value in values {
        low = low.min(value);
        high = high.max(value);
    }
    let (low, high) = match (chart.x_range, chart.x_scale) {
        (Some(range), _) => range,
        (None, Scale::Linear) if high.is_finite() => (low.min(0.0), high.max(low + 1e-9)),
        (None, Scale::Log) if high.is_finite() => decade_range(low, high),
        (None, Scale::Linear) => (0.0, 1.0),
        (None, Scale::Log) => (1.0, 10.0),
    };
    let high = if high > low { high } else { low + 1.0 };
    XAxis {
        scale: chart.x_scale,
        low,
        high,
    }
}

/// Legend entries laid out in rows: (x, row) per entry.
fn legend_layout(
    legend: &[(String, &'static str, bool)],
    width: f64,
) -> (Vec<(f64, usize)>, usize) {
    let mut places = Vec::with_capacity(legend.len());
    let mut x = PLOT_LEFT;
    let mut row = 0;
    for (label, _, _) in legend {
        let entry_width = 34.0 + label.chars().count() as f64 * CHARACTER_WIDTH + 18.0;
        if x + entry_width > width - PLOT_RIGHT && x > PLOT_LEFT {
            x = PLOT_LEFT;
            row += 1;
        }
        places.push((x, row));
        x += entry_width;
    }
    let rows = if legend.is_empty() { 0 } else { row + 1 };
    (places, rows)
}

/// Keeps at most `limit` points per series: consecutive points are merged
/// into their mean (x and y), so long runs still draw as a readable line.
fn thin(points: &[(f64, f64)], limit: usize) -> Vec<(f64, f64)> {
    if points.len() <= limit || limit == 0 {
        return points.to_vec();
    }
    let group = points.len().div_ceil(limit);
    points
        .chunks(group)
        .map(|chunk| {
            let count = chunk.len() as f64;
            let x = chunk.iter().map(|point| point.0).sum::<f64>() / count;
            let y = chunk.iter().map(|point| point.1).sum::<f64>() / count;
            (x, y)
        })
        .collect()
}

/// Most points drawn per line (the CSV files keep every value).
pub const MAX_POINTS_PER_LINE: usize = 1500;

/// Renders `chart` as a standalone SVG document.
pub fn render(chart: &Chart) -> String {
    let width = CHART_WIDTH;
    let plot_width = width - PLOT_LEFT - PLOT_RIGHT;
    let (legend_places, legend_rows) = legend_layout(&chart.legend, width);
    let header_height = 50.0 + legend_rows as f64 * LEGEND_ROW_HEIGHT + 6.0;
    let panel_block = PANEL_TITLE_HEIGHT + PANEL_HEIGHT;
    let height =
        header_height + chart.panels.len().max(1) as f64 * (panel_block + 14.0) + X_AXIS_HEIGHT;
    let axis = x_axis(chart);

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
        r#"<text x="{PLOT_LEFT}" y="20" font-size="15" font-weight="bold">{}</text>"#,
        escape(&chart.title)
    );
    let _ = writeln!(
        svg,
        r##"<text x="{PLOT_LEFT}" y="38" fill="#444">{}</text>"##,
        escape(&chart.subtitle)
    );
    let _ = writeln!(svg, r#"<g class="legend">"#);
    for ((label, colour, dashed), (x, row)) in chart.legend.iter().zip(&legend_places) {
        let y = 50.0 + *row as f64 * LEGEND_ROW_HEIGHT + 6.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}" stroke-width="2.5"{}/><text x="{}" y="{}">{}</text>"#,
            x + 28.0,
            if *dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            },
            x + 34.0,
            y + 4.0,
            escape(label)
        );
    }
    let _ = writeln!(svg, "</g>");

    let (x_ticks, x_step) = match axis.scale {
        Scale::Linear => linear_ticks(axis.low, axis.high, 10.0),
        Scale::Log => {
            let mut ticks = Vec::new();
            let mut value = axis.low;
            while value <= axis.high * (1.0 + 1e-9) && ticks.len() < 40 {
                ticks.push(value);
                value *= 10.0;
            }
            (ticks, 1.0)
        }
    };

    for (index, panel) in chart.panels.iter().enumerate() {
        let top = header_height + index as f64 * (panel_block + 14.0);
        let plot_top = top + PANEL_TITLE_HEIGHT;
        let plot_bottom = plot_top + PANEL_HEIGHT;
        let _ = writeln!(svg, r#"<g class="panel">"#);
        let _ = writeln!(
            svg,
            r#"<text x="{PLOT_LEFT}" y="{}" font-size="13" font-weight="bold">{}</text>"#,
            top + 16.0,
            escape(&panel.title)
        );

        let data_max = panel
            .series
            .iter()
            .flat_map(|series| &series.points)
            .map(|point| point.1)
            .filter(|value| value.is_finite())
            .fold(0.0f64, f64::max);
        let (y_low, y_high) = panel.y_range.unwrap_or((0.0, round_up(data_max)));
        let y_high = if y_high > y_low { y_high } else { y_low + 1.0 };
        // The data span a little less than the plot's height, so a line at
        // the bottom or the top of the range is not hidden by the frame.
        let inset = PANEL_HEIGHT * Y_INSET_FRACTION;
        let y_of = |value: f64| {
            plot_bottom
                - inset
                - (value.clamp(y_low, y_high) - y_low) / (y_high - y_low)
                    * (PANEL_HEIGHT - 2.0 * inset)
        };
        let x_of = |value: f64| {
            axis.position(value)
                .filter(|position| position.is_finite())
                .map(|position| PLOT_LEFT + position.clamp(-0.01, 1.01) * plot_width)
        };

        // Grid and y ticks.
        let (y_ticks, y_step) = linear_ticks(y_low, y_high, 5.0);
        for value in &y_ticks {
            let y = y_of(*value);
            let _ = writeln!(
                svg,
                r##"<line x1="{PLOT_LEFT}" y1="{y:.2}" x2="{:.2}" y2="{y:.2}" stroke="#e3e3e3"/><text x="{}" y="{:.2}" text-anchor="end">{}</text>"##,
                PLOT_LEFT + plot_width,
                PLOT_LEFT - 6.0,
                y + 4.0,
                escape(&format_tick(*value, y_step, panel.y_format))
            );
        }
        for value in &x_ticks {
            if let Some(x) = x_of(*value) {
                let _ = writeln!(
                    svg,
                    r##"<line x1="{x:.2}" y1="{plot_top:.2}" x2="{x:.2}" y2="{plot_bottom:.2}" stroke="#e3e3e3"/>"##
                );
            }
        }
        if axis.scale == Scale::Log {
            // Minor grid: 2..9 within each decade.
            let mut decade = axis.low;
            while decade < axis.high && decade > 0.0 {
                for factor in 2..10 {
                    if let Some(x) =
                        x_of(decade * f64::from(factor)).filter(|x| *x <= PLOT_LEFT + plot_width)
                    {
                        let _ = writeln!(
                            svg,
                            r##"<line x1="{x:.2}" y1="{plot_top:.2}" x2="{x:.2}" y2="{plot_bottom:.2}" stroke="#f2f2f2"/>"##
                        );
                    }
                }
                decade *= 10.0;
            }
        }
        // Y axis title, rotated.
        let _ = writeln!(
            svg,
            r#"<text transform="translate(18 {:.2}) rotate(-90)" text-anchor="middle">{}</text>"#,
            plot_top + PANEL_HEIGHT / 2.0,
            escape(&panel.y_label)
        );

        // Frame, then the lines over it, clipped to the plot area. Earlier
        // lines are drawn wider, so a line hidden under a later one with the
        // same values still shows as a coloured edge.
        let _ = writeln!(
            svg,
            r#"<rect x="{PLOT_LEFT}" y="{plot_top:.2}" width="{plot_width}" height="{PANEL_HEIGHT}" fill="none" stroke="black"/>"#
        );
        let clip = format!("clip-{index}");
        let _ = writeln!(
            svg,
            r#"<clipPath id="{clip}"><rect x="{PLOT_LEFT}" y="{plot_top:.2}" width="{plot_width}" height="{PANEL_HEIGHT}"/></clipPath>"#
        );
        let _ = writeln!(
            svg,
            r#"<g clip-path="url(#{clip})" fill="none" stroke-linejoin="round">"#
        );
        let lines = panel.series.len();
        for (number, series) in panel.series.iter().enumerate() {
            let stroke_width = 1.6 + 0.6 * (lines - 1 - number).min(5) as f64;
            let points = thin(&series.points, MAX_POINTS_PER_LINE);
            let mut path = String::new();
            for (x, y) in points {
                let Some(x) = x_of(x) else { continue };
                if !y.is_finite() {
                    continue;
                }
                let _ = write!(path, "{x:.2},{:.2} ", y_of(y));
            }
            if path.is_empty() {
                continue;
            }
            let _ = writeln!(
                svg,
                r#"<polyline stroke="{}" stroke-width="{stroke_width:.1}"{} points="{}"><title>{}</title></polyline>"#,
                series.colour,
                if series.dashed {
                    r#" stroke-dasharray="6 4""#
                } else {
                    ""
                },
                path.trim_end(),
                escape(&series.label)
            );
        }
        let _ = writeln!(svg, "</g>");
        if let Some((value, label)) = &panel.reference {
            if (y_low..=y_high).contains(value) {
                let y = y_of(*value);
                let _ = writeln!(
                    svg,
                    r##"<line x1="{PLOT_LEFT}" y1="{y:.2}" x2="{:.2}" y2="{y:.2}" stroke="#555" stroke-dasharray="3 3"/><text x="{:.2}" y="{:.2}" text-anchor="end" fill="#555">{}</text>"##,
                    PLOT_LEFT + plot_width,
                    PLOT_LEFT + plot_width - 4.0,
                    y - 4.0,
                    escape(label)
                );
            }
        }
        if panel.series.iter().all(|series| series.points.is_empty()) {
            let _ = writeln!(
                svg,
                r##"<text x="{:.2}" y="{:.2}" text-anchor="middle" fill="#888">no data</text>"##,
                PLOT_LEFT + plot_width / 2.0,
                plot_top + PANEL_HEIGHT / 2.0
            );
        }
        // X tick marks (labels under the last panel only).
        let last = index + 1 == chart.panels.len();
        for value in &x_ticks {
            if let Some(x) = x_of(*value) {
                let _ = write!(
                    svg,
                    r#"<line x1="{x:.2}" y1="{plot_bottom:.2}" x2="{x:.2}" y2="{:.2}" stroke="black"/>"#,
                    plot_bottom + 5.0
                );
                if last {
                    let _ = write!(
                        svg,
                        r#"<text x="{x:.2}" y="{:.2}" text-anchor="middle">{}</text>"#,
                        plot_bottom + 18.0,
                        escape(&format_tick(*value, x_step, chart.x_format))
                    );
                }
                svg.push('\n');
            }
        }
        if last {
            let _ = writeln!(
                svg,
                r#"<text x="{:.2}" y="{:.2}" text-anchor="middle">{}</text>"#,
                PLOT_LEFT + plot_width / 2.0,
                plot_bottom + 38.0,
                escape(&chart.x_label)
            );
        }
        let _ = writeln!(svg, "</g>");
    }
    let _ = writeln!(svg, "</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_steps_and_labels() {
        assert_eq!(tick_step(100.0, 10.0), 10.0);
        assert_eq!(tick_step(130.0, 10.0), 20.0);
        assert_eq!(tick_step(0.9, 5.0), 0.2);
        assert_eq!(round_up(1234.0), 1500.0);
        assert_eq!(round_up(90.0), 100.0);
        assert_eq!(round_up(0.0), 1.0);
        assert_eq!(format_number(0.4, 0.2), "0.4");
        assert_eq!(format_number(1200.0, 200.0), "1200");
        assert_eq!(format_microseconds(100.0), "100 µs");
        assert_eq!(format_microseconds(1000.0), "1 ms");
        assert_eq!(format_microseconds(0.1), "100 ns");
        assert_eq!(format_microseconds(2.5e6), "2.5 s");
        assert_eq!(decade_range(3.0, 4000.0), (1.0, 10000.0));
        let (ticks, step) = linear_ticks(0.0, 1.0, 5.0);
        assert_eq!(step, 0.2);
        assert_eq!(ticks.len(), 6);
    }

    #[test]
    fn thinning_keeps_means() {
        let points: Vec<(f64, f64)> = (0..10).map(|index| (index as f64, 1.0)).collect();
        assert_eq!(thin(&points, 20), points);
        let thinned = thin(&points, 5);
        assert_eq!(thinned.len(), 5);
        assert_eq!(thinned[0], (0.5, 1.0));
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(escape("x\u{1}y"), "x y");
    }

    #[test]
    fn log_axis_drops_non_positive_values() {
        let chart = Chart {
            title: "t".into(),
            subtitle: String::new(),
            x_label: "x".into(),
            x_scale: Scale::Log,
            x_format: TickFormat::Microseconds,
            x_range: None,
            panels: vec![Panel {
                title: "p".into(),
                y_label: "y".into(),
                y_range: Some((0.0, 100.0)),
                y_format: TickFormat::Number,
                reference: None,
                series: vec![Series {
                    label: "s".into(),
                    colour: colour(0),
                    dashed: false,
                    points: vec![(0.0, 0.0), (20.0, 50.0), (3000.0, 100.0)],
                }],
            }],
            legend: vec![("s".into(), colour(0), false)],
        };
        let axis = x_axis(&chart);
        assert_eq!((axis.low, axis.high), (10.0, 10000.0));
        let svg = render(&chart);
        // Two drawable points only.
        let points = svg
            .split("points=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap();
        assert_eq!(points.split_whitespace().count(), 2);
    }
}
