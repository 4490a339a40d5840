//! The run's figures as pictures: SVG files beside `latest.json`, for what a reader would
//! rather see than read.
//!
//! - `lateness.svg`: the cumulative distribution of tick lateness, tickd beside the bare
//!   ticker, for each population of the lateness scenario (its median round);
//! - `registrations.svg`: the p99 of a registration by the number of concurrent clients, tickd
//!   (plain and with TLS) beside etcd, through the followers and through the leader;
//! - `failover.svg`: each leader kill's phases, from the kill until a survivor leads, until
//!   its lease holds and until the first tick arrives.
//!
//! A plot is drawn only for a scenario the run measured. plotters writes SVG text elements
//! without font files, so nothing here depends on the machine's fonts.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::failover::FailoverResult;
use crate::lateness::{LatenessRow, median_rounds};
use crate::register::{RegisterRow, Target};
use crate::report::Report;

/// The size of every plot, in pixels.
const SIZE: (u32, u32) = (900, 540);
/// The colours of the series, in order: tickd's first.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(127, 127, 127),
];

/// Draws every plot the report has the figures for into `dir`; the files written.
pub fn draw(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let plots = [
        ("lateness.svg", lateness(&report.lateness)),
        ("registrations.svg", registrations(&report.registrations)),
        ("failover.svg", failover(report)),
    ];
    let mut written = Vec::new();
    for (name, plot) in plots {
        let Some(svg) = plot.transpose()? else {
            continue;
        };
        let path = dir.join(name);
        std::fs::write(&path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// Renders one plot into SVG text.
fn svg(
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String>,
) -> Result<String, String> {
    let mut text = String::new();
    {
        let area = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        area.fill(&WHITE).map_err(|e| e.to_string())?;
        draw(&area)?;
        area.present().map_err(|e| e.to_string())?;
    }
    Ok(text)
}

/// The lateness distributions, or `None` if the run measured none.
fn lateness(rows: &[LatenessRow]) -> Option<Result<String, String>> {
    let measured: Vec<&LatenessRow> = median_rounds(rows)
        .into_iter()
        .filter(|row| !row.tickd.distribution.is_empty() || !row.baseline.distribution.is_empty())
        .collect();
    if measured.is_empty() {
        return None;
    }
    let longest = measured
        .iter()
        .flat_map(|row| [&row.tickd.distribution, &row.baseline.distribution])
        .flatten()
        .map(|(_, ms)| *ms)
        .fold(1.0, f64::max);
    Some(svg(|area| {
        let mut chart = ChartBuilder::on(area)
            .caption(
                "Tick lateness: tickd beside a bare ticker",
                ("sans-serif", 22),
            )
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..longest * 1.05, 0.0..1.0)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc("lateness (ms): receipt minus the tick's instant")
            .y_desc("share of ticks at or below")
            .draw()
            .map_err(|e| e.to_string())?;
        let mut colours = PALETTE.iter();
        for row in &measured {
            for (who, delivered) in [("tickd", &row.tickd), ("bare ticker", &row.baseline)] {
                let colour = *colours.next().unwrap_or(&BLACK);
                let points = delivered
                    .distribution
                    .iter()
                    .map(|(share, ms)| (*ms, *share));
                chart
                    .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                    .map_err(|e| e.to_string())?
                    .label(format!(
                        "{who}, {} clocks{}",
                        row.clocks,
                        of_rounds(rows, row)
                    ))
                    .legend(line_swatch(colour));
            }
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    }))
}

/// How a lateness series names its round: nothing for a size measured once, else which of
/// how many it is (the median, [`median_rounds`]).
fn of_rounds(rows: &[LatenessRow], median: &LatenessRow) -> String {
    match rows
        .iter()
        .filter(|row| row.clocks == median.clocks)
        .count()
    {
        0 | 1 => String::new(),
        rounds => format!(" (round {}, the median of {rounds})", median.round),
    }
}

/// The registration p99 by concurrency, or `None` if the run measured none.
fn registrations(rows: &[RegisterRow]) -> Option<Result<String, String>> {
    if rows.is_empty() {
        return None;
    }
    // The levels double (1, 16, 64, 256): the axis is their base-2 logarithm, labelled in
    // clients at each power of two.
    let most_clients = rows
        .iter()
        .map(|row| row.load.clients)
        .max()
        .unwrap_or(1)
        .max(2);
    let widest = (most_clients as f64).log2().ceil();
    let slowest = rows
        .iter()
        .map(|row| row.load.latency.p99_ms)
        .fold(1.0, f64::max);
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for row in rows {
        let target = match row.target {
            Target::Followers => "through the followers",
            Target::Leader => "through the leader",
        };
        let name = format!("{} {target}", row.system);
        let point = ((row.load.clients as f64).log2(), row.load.latency.p99_ms);
        match series.iter_mut().find(|(each, _)| *each == name) {
            Some((_, points)) => points.push(point),
            None => series.push((name, vec![point])),
        }
    }
    Some(svg(|area| {
        let mut chart = ChartBuilder::on(area)
            .caption("Registration p99 by concurrent clients", ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d(-0.25..widest + 0.25, 0.0..slowest * 1.1)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_labels(widest as usize + 1)
            .x_label_formatter(&|power| format!("{}", 2f64.powf(power.round())))
            .x_desc("concurrent clients")
            .y_desc("p99 (ms), on a majority's disk")
            .draw()
            .map_err(|e| e.to_string())?;
        for ((name, points), colour) in series.into_iter().zip(PALETTE.iter().cycle()) {
            let colour = *colour;
            chart
                .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(name)
                .legend(line_swatch(colour));
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|point| Circle::new(point, 3, colour.filled())),
                )
                .map_err(|e| e.to_string())?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    }))
}

/// The failover kills' phases, plain and with TLS, or `None` if the run killed no leader.
fn failover(report: &Report) -> Option<Result<String, String>> {
    let runs: Vec<(&str, &FailoverResult)> = [
        ("plain", report.failover.as_ref()),
        ("TLS", report.failover_tls.as_ref()),
    ]
    .into_iter()
    .filter_map(|(name, run)| Some((name, run?)))
    .filter(|(_, run)| !run.timelines.is_empty())
    .collect();
    if runs.is_empty() {
        return None;
    }
    let kills: Vec<(String, [f64; 3])> = runs
        .iter()
        .flat_map(|(name, run)| {
            run.timelines
                .iter()
                .enumerate()
                .map(move |(index, timeline)| {
                    let first = timeline.first_tick_ms;
                    let lease = timeline.lease_ms.unwrap_or(first).min(first);
                    let leading = timeline.leading_ms.unwrap_or(lease).min(lease);
                    (format!("{name} {}", index + 1), [leading, lease, first])
                })
        })
        .collect();
    let longest = kills
        .iter()
        .map(|(_, phases)| phases[2])
        .fold(1.0, f64::max);
    let count = kills.len();
    Some(svg(|area| {
        let mut chart = ChartBuilder::on(area)
            .caption("Failover: each leader kill, in phases", ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(72)
            // Room on the right for the legend, past the longest kill.
            .build_cartesian_2d(0.0..longest * 1.5, -0.5..count as f64 - 0.5)
            .map_err(|e| e.to_string())?;
        let names: Vec<String> = kills.iter().map(|(name, _)| name.clone()).collect();
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .disable_y_mesh()
            .y_labels(count.max(1))
            .y_label_formatter(&|y| {
                let index = y.round();
                names
                    .get(index as usize)
                    .filter(|_| index >= 0.0 && (y - index).abs() < 0.01)
                    .cloned()
                    .unwrap_or_default()
            })
            .x_desc("ms from the SIGKILL")
            .y_desc("kill")
            .draw()
            .map_err(|e| e.to_string())?;
        let phases = [
            ("until a survivor leads (election)", PALETTE[0]),
            ("until its lease holds", PALETTE[1]),
            ("until the first tick arrives", PALETTE[2]),
        ];
        for (phase, (label, colour)) in phases.into_iter().enumerate() {
            let bars = kills.iter().enumerate().map(|(row, (_, bounds))| {
                let from = if phase == 0 { 0.0 } else { bounds[phase - 1] };
                let row = row as f64;
                Rectangle::new(
                    [(from, row - 0.3), (bounds[phase], row + 0.3)],
                    colour.filled(),
                )
            });
            chart
                .draw_series(bars)
                .map_err(|e| e.to_string())?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled())
                });
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    }))
}

/// A line series' swatch in the legend: a short stroke of its colour.
fn line_swatch(colour: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(2))
}

/// Draws a chart's legend at `position`.
fn legend<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> Result<(), String>
where
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::Timeline;
    use crate::lateness::Delivered;
    use crate::load::LoadResult;
    use crate::stats::{Percentiles, distribution_ms};

    fn delivered(samples: Vec<f64>) -> Delivered {
        let received = samples.len();
        let (lateness, distribution) = distribution_ms(samples);
        Delivered {
            expected: received,
            received,
            lateness,
            distribution,
        }
    }

    fn registration(
        system: &'static str,
        target: Target,
        clients: usize,
        p99_ms: f64,
    ) -> RegisterRow {
        RegisterRow {
            system,
            target,
            load: LoadResult {
                clients,
                succeeded: 100,
                failed: 0,
                per_s: 1_000.0,
                latency: Percentiles {
                    count: 100,
                    p99_ms,
                    ..Percentiles::default()
                },
            },
        }
    }

    #[test]
    fn a_run_that_measured_nothing_draws_nothing() {
        let dir = tempfile::tempdir().expect("a directory");
        let written = draw(&Report::default(), dir.path()).expect("no plot to fail");
        assert!(written.is_empty());
    }

    /// A lateness round whose tickd and bare ticker lateness are 1..=`tickd` and
    /// 1..=`baseline` ms.
    fn round(clocks: usize, round: usize, tickd: u32, baseline: u32) -> LatenessRow {
        LatenessRow {
            clocks,
            round,
            tickd: delivered((1..=tickd).map(f64::from).collect()),
            node_publish_lateness_p99_ms: None,
            baseline: delivered((1..=baseline).map(f64::from).collect()),
        }
    }

    #[test]
    fn each_measured_scenario_gets_its_plot_with_every_series_named() {
        let dir = tempfile::tempdir().expect("a directory");
        let report = Report {
            lateness: vec![
                round(1_000, 1, 500, 400),
                round(10_000, 1, 300, 100),
                round(10_000, 2, 200, 100),
                round(10_000, 3, 100, 100),
            ],
            registrations: vec![
                registration("tickd", Target::Followers, 1, 2.0),
                registration("tickd", Target::Followers, 64, 10.0),
                registration("etcd", Target::Leader, 1, 1.0),
                registration("etcd", Target::Leader, 64, 19.0),
            ],
            failover: Some(FailoverResult {
                kills: 1,
                to_first_tick: Percentiles::default(),
                to_leading: Percentiles::default(),
                leading_to_lease: Percentiles::default(),
                lease_to_first_tick: Percentiles::default(),
                timelines: vec![Timeline {
                    leading_ms: Some(900.0),
                    lease_ms: Some(903.0),
                    first_tick_ms: 920.0,
                    first_tick_due_ms: 200.0,
                }],
                lost_ticks: 0,
                repeated_ticks: 0,
                expected_ticks: 10,
            }),
            ..Report::default()
        };
        let written = draw(&report, dir.path()).expect("the plots");
        let names: Vec<String> = written
            .iter()
            .filter_map(|path| Some(path.file_name()?.to_str()?.to_owned()))
            .collect();
        assert_eq!(names, ["lateness.svg", "registrations.svg", "failover.svg"]);
        let text = |name: &str| std::fs::read_to_string(dir.path().join(name)).expect("a plot");
        let lateness = text("lateness.svg");
        for label in [
            "tickd, 1000 clocks\n",
            "bare ticker, 1000 clocks\n",
            "tickd, 10000 clocks (round 2, the median of 3)",
            "bare ticker, 10000 clocks (round 2, the median of 3)",
        ] {
            assert!(
                lateness.contains(label),
                "{label} missing from the lateness plot"
            );
        }
        // The other rounds are not drawn.
        assert_eq!(lateness.matches("10000 clocks").count(), 2, "{lateness}");
        let registrations = text("registrations.svg");
        for label in ["tickd through the followers", "etcd through the leader"] {
            assert!(registrations.contains(label), "{label} missing");
        }
        let failover = text("failover.svg");
        assert!(failover.contains("until a survivor leads"));
        assert!(failover.contains("plain 1"));
        // Three phases of one kill: three bars beside the legend's three swatches.
        assert!(failover.matches("<rect").count() >= 6, "{failover}");
    }
}
