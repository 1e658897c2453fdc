//! SVG line charts for the examples that measure, written with `plotters` (SVG
//! backend, line series, no system libraries).

use std::ops::Range;
use std::path::{Path, PathBuf};

use backstop::BoxError;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Where the example was asked to write its chart: the path given with `--chart`
/// (`cargo run --release --example outage -- --chart docs/outage.svg`), relative to
/// the directory it runs in. Without it, `None`: the example writes no file.
pub fn requested() -> Result<Option<PathBuf>, BoxError> {
    Ok(args(&[])?.chart)
}

/// What an example was asked on its command line: `--chart <path>` (see
/// [`requested`]) and which of its own `flags` (each a word such as `--quick`).
pub struct Args {
    pub chart: Option<PathBuf>,
    pub flags: Vec<&'static str>,
}

impl Args {
    /// Whether `flag` was given.
    pub fn has(&self, flag: &str) -> bool {
        self.flags.contains(&flag)
    }
}

/// Reads the command line: `--chart <path>` and any of `flags`; anything else is
/// an error that lists what the example takes.
pub fn args(flags: &[&'static str]) -> Result<Args, BoxError> {
    let mut args = std::env::args_os().skip(1);
    let mut parsed = Args {
        chart: None,
        flags: Vec::new(),
    };
    while let Some(arg) = args.next() {
        if arg.to_str() == Some("--chart") {
            let to = args.next().ok_or("--chart needs a path")?;
            parsed.chart = Some(PathBuf::from(to));
            continue;
        }
        match flags.iter().find(|flag| arg.to_str() == Some(**flag)) {
            Some(flag) => parsed.flags.push(flag),
            None => {
                let takes: Vec<&str> = std::iter::once("--chart <path>")
                    .chain(flags.iter().copied())
                    .collect();
                return Err(format!(
                    "unknown argument {arg:?}: the arguments are {}",
                    takes.join(", ")
                )
                .into());
            }
        }
    }
    Ok(parsed)
}

/// One line of a chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
}

/// The highest value of any series: where a chart's y axis ends.
pub fn top(series: &[Series]) -> f64 {
    series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
}

/// The colours the examples use, in order.
pub const COLORS: [RGBColor; 6] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// The colour of a reference line (a capacity, a limit) beside the series.
pub const GREY: RGBColor = RGBColor(0x99, 0x99, 0x99);

/// How a chart reads: its title, axis names, the y labels' format and where the
/// legend goes.
pub struct Look<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    pub y_format: fn(&f64) -> String,
    pub legend: SeriesLabelPosition,
}

/// Writes a line chart of `series` to `path` (an SVG file).
pub fn lines<X>(
    path: &Path,
    look: Look<'_>,
    x: X,
    y: Range<f64>,
    series: &[Series],
) -> Result<(), BoxError>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let root = canvas(path, (800, 480))?;
    plot(&root, look, x, y, series)?;
    root.present().map_err(text)
}

/// Writes two line charts side by side to `path` (an SVG file): two measures
/// against the same x, each on its own y axis (`right_y` may be a log scale).
pub fn side_by_side<X, Y>(
    path: &Path,
    (left, left_x, left_y, left_series): (Look<'_>, X, Range<f64>, &[Series]),
    (right, right_x, right_y, right_series): (Look<'_>, X, Y, &[Series]),
) -> Result<(), BoxError>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let root = canvas(path, (1200, 480))?;
    let (l, r) = root.split_horizontally(600);
    plot(&l, left, left_x, left_y, left_series)?;
    plot(&r, right, right_x, right_y, right_series)?;
    root.present().map_err(text)
}

/// A white SVG canvas of `size` pixels, writing to `path`.
fn canvas(path: &Path, size: (u32, u32)) -> Result<DrawingArea<SVGBackend<'_>, Shift>, BoxError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(text)?;
    Ok(root)
}

/// Draws one chart of `series` on `area`.
fn plot<X, Y>(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    look: Look<'_>,
    x: X,
    y: Y,
    series: &[Series],
) -> Result<(), BoxError>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(look.title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)
        .map_err(text)?;
    chart
        .configure_mesh()
        .x_desc(look.x_desc)
        .y_desc(look.y_desc)
        .y_label_formatter(&look.y_format)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(text)?;
    for s in series {
        let color = s.color;
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(text)?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(look.legend)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(text)?;
    Ok(())
}

/// A chart error as text (plotters' errors borrow the backend's).
fn text<E: std::fmt::Display>(e: E) -> BoxError {
    e.to_string().into()
}

/// The points of the empirical CDF of `sorted` (milliseconds), at most `max`
/// of them: the quantiles at even steps from the quantile `from` on, and the last
/// point.
pub fn cdf(sorted_ms: &[f64], max: usize, from: f64) -> Vec<(f64, f64)> {
    let n = sorted_ms.len();
    if n == 0 {
        return Vec::new();
    }
    let first = ((from * n as f64) as usize).min(n - 1);
    let step = ((n - first) / max.max(1)).max(1);
    let mut points: Vec<_> = (first..n)
        .step_by(step)
        .map(|i| (sorted_ms[i], (i + 1) as f64 / n as f64))
        .collect();
    points.push((sorted_ms[n - 1], 1.0));
    points
}
