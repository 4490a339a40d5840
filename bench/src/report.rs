//! The run's result: `target/bench/latest.json`, the headline table, and the floors.

use serde::Serialize;

use crate::failover::FailoverResult;
use crate::footprint::FootprintResult;
use crate::lateness::{self, Delivered, LatenessRow};
use crate::leases::LeaseRow;
use crate::register::{self, RegisterRow, Target};
use crate::scale::ScaleResult;
use crate::stats::ratio;

/// The clock count whose lateness is the headline figure.
pub const HEADLINE_CLOCKS: usize = 10_000;
/// The client count whose registration rate is the headline figure.
pub const HEADLINE_CLIENTS: usize = 64;

/// The headline figures, named as the issue and `docs/BENCHMARKS.md` name them. A figure whose
/// scenario did not run or failed is `None` (`null` in the JSON), never a zero that could pass
/// for a measurement.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Headline {
    /// Registrations per second, 64 clients through the followers.
    pub register_per_s: Option<f64>,
    /// Their p99 latency.
    pub register_p99_ms: Option<f64>,
    /// etcd puts per second under the same load.
    pub etcd_put_per_s: Option<f64>,
    /// `register_per_s / etcd_put_per_s`.
    pub register_vs_etcd: Option<f64>,
    /// The same ratio with one client through the followers: a lone writer's round trip.
    pub register_one_client_vs_etcd: Option<f64>,
    /// The p99 of the same load on a cluster with HTTPS on its API and mutual TLS between its
    /// nodes.
    pub register_tls_p99_ms: Option<f64>,
    /// `register_tls_p99_ms / register_p99_ms`: what TLS costs a registration.
    pub register_tls_vs_plain_p99: Option<f64>,
    /// p99 tick lateness with 10 000 clocks, receipt minus `scheduled_at`.
    pub tick_lateness_p99_ms: Option<f64>,
    /// The bare ticker's p99 with the same clocks.
    pub baseline_lateness_p99_ms: Option<f64>,
    /// `tick_lateness_p99_ms / baseline_lateness_p99_ms`.
    pub lateness_vs_baseline_p99: Option<f64>,
    /// p99 from a leader kill to the new leader's first delivered tick.
    pub failover_p99_ms: Option<f64>,
    /// Instants not delivered across the failover scenario.
    pub failover_lost_ticks: Option<usize>,
    /// `failover_p99_ms` on a cluster with TLS on.
    pub failover_tls_p99_ms: Option<f64>,
    /// `failover_lost_ticks` on a cluster with TLS on.
    pub failover_tls_lost_ticks: Option<usize>,
    /// Largest node RSS with 100 000 active clocks, divided by the clock count.
    pub bytes_per_clock: Option<f64>,
    /// The busiest node's CPU at rest holding the scale population, percent of one core.
    pub scale_idle_cpu_pct: Option<f64>,
    /// The busiest node's CPU at rest when the same cluster was empty.
    pub scale_idle_cpu_empty_pct: Option<f64>,
    /// Largest node RSS holding the scale population, divided by its clocks.
    pub scale_bytes_per_clock: Option<f64>,
    /// The same of a follower restarted among the population, which loaded it from its
    /// snapshot.
    pub scale_bytes_per_clock_restarted: Option<f64>,
    /// p99 lateness of the frequent http clocks among the population.
    pub scale_lateness_p99_ms: Option<f64>,
    /// That p99 over the same clocks' p99 on the empty cluster.
    pub scale_lateness_vs_empty_p99: Option<f64>,
    /// The same ratio while dashboards and scrapes watch every node.
    pub scale_watched_lateness_vs_empty_p99: Option<f64>,
    /// p99 webhook lateness (arrival at the receiver minus `scheduled_at`) of the webhook
    /// scenario's clocks.
    pub webhook_lateness_p99_ms: Option<f64>,
    /// The bare sender's p99 with as many clocks.
    pub webhook_baseline_p99_ms: Option<f64>,
    /// `webhook_lateness_p99_ms / webhook_baseline_p99_ms`.
    pub webhook_vs_baseline_p99: Option<f64>,
    /// Ticks of the webhook window tickd had not delivered by the end of its grace.
    pub webhook_missing_ticks: Option<usize>,
    /// CPU tickd's nodes spent per tick of the webhook window, in microseconds, together.
    pub webhook_cpu_us_per_tick: Option<f64>,
    /// The bare sender's CPU per tick of its window.
    pub webhook_baseline_cpu_us_per_tick: Option<f64>,
    /// [`WebhookRow::cpu_ratio`]: the CPU a tick costs the machine with tickd over with the
    /// bare sender. The burst of each second is CPU-bound on two shared cores, so this is
    /// what bounds the p99 ratio; unlike a tail, it says which process spends it.
    pub webhook_vs_baseline_cpu: Option<f64>,
    /// Lease-and-ack round trips per second, one tick each, over 1 000 queues.
    pub lease_ack_per_s: Option<f64>,
    /// Pops per second, one tick each, over the same queues on the same cluster.
    pub lease_pop_per_s: Option<f64>,
    /// `lease_ack_per_s / lease_pop_per_s`: what the ack's second write costs.
    pub lease_vs_pop: Option<f64>,
    /// Lease-and-ack round trips per second, one tick each, on one queue of 1 000 ticks.
    pub lease_ack_one_queue_per_s: Option<f64>,
    /// Ticks per second the pops took on that queue (each pop takes up to 100).
    pub pop_ticks_one_queue_per_s: Option<f64>,
}

/// The webhook scenario's result: tickd's webhook deliveries beside the bare sender's.
#[derive(Debug, Clone, Serialize)]
pub struct WebhookRow {
    /// Active webhook clocks, every one posting to the same receiver.
    pub clocks: usize,
    /// tickd's deliveries.
    pub tickd: Delivered,
    /// The bare sender's deliveries.
    pub baseline: Delivered,
    /// `tickd.lateness.p99_ms / baseline.lateness.p99_ms`.
    pub p99_ratio: f64,
    /// What tickd's window cost in CPU.
    pub tickd_cpu: CpuPerTick,
    /// What the bare sender's window cost in CPU.
    pub baseline_cpu: CpuPerTick,
}

impl WebhookRow {
    /// The CPU per tick of tickd's nodes and the receiver over that of the bare sender and
    /// the receiver: every process the burst of each second shares the cores with.
    pub fn cpu_ratio(&self) -> f64 {
        ratio(
            self.tickd_cpu.sender_us + self.tickd_cpu.receiver_us,
            self.baseline_cpu.sender_us + self.baseline_cpu.receiver_us,
        )
    }
}

/// The CPU (user and system) a window of ticks cost, per tick, in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuPerTick {
    /// The sending side: tickd's nodes together, or the bare sender.
    pub sender_us: f64,
    /// The receiver: the benchmark's own process, which does little else meanwhile.
    pub receiver_us: f64,
}

/// Everything a run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// `quick` or `full`.
    pub profile: String,
    /// When the run finished, RFC 3339.
    pub finished_at: String,
    /// The headline figures.
    #[serde(flatten)]
    pub headline: Headline,
    /// Every registration level.
    pub registrations: Vec<RegisterRow>,
    /// Every lateness population.
    pub lateness: Vec<LatenessRow>,
    /// The failover scenario.
    pub failover: Option<FailoverResult>,
    /// The failover scenario on a cluster with TLS on.
    pub failover_tls: Option<FailoverResult>,
    /// The footprint scenario.
    pub footprint: Option<FootprintResult>,
    /// The scale scenario.
    pub scale: Option<ScaleResult>,
    /// The webhook scenario.
    pub webhook: Option<WebhookRow>,
    /// The lease scenario.
    pub lease: Option<LeaseRow>,
    /// Floors that did not hold.
    pub floors_missed: Vec<String>,
    /// Scenarios that could not finish, and why.
    pub failed: Vec<String>,
}

impl Report {
    /// Keeps a scenario's result, or records why it failed so that the run goes on with the
    /// next scenario and still reports what it measured.
    pub fn record<T>(&mut self, scenario: &str, result: Result<T, String>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(reason) => {
                eprintln!("  {scenario} failed: {reason}");
                self.failed.push(format!("{scenario}: {reason}"));
                None
            }
        }
    }

    /// Derives the headline figures and checks them against the floors.
    pub fn conclude(&mut self) {
        let with = |system: &str, clients: usize| {
            self.registrations.iter().find(|row| {
                row.system == system
                    && row.target == Target::Followers
                    && row.load.clients == clients
            })
        };
        let at = |system: &str| with(system, HEADLINE_CLIENTS);
        let mut headline = Headline::default();
        if let (Some(tickd), Some(etcd)) = (at(register::PLAIN), at("etcd")) {
            headline.register_per_s = Some(tickd.load.per_s);
            headline.register_p99_ms = Some(tickd.load.latency.p99_ms);
            headline.etcd_put_per_s = Some(etcd.load.per_s);
            headline.register_vs_etcd = Some(ratio(tickd.load.per_s, etcd.load.per_s));
        }
        if let (Some(tickd), Some(etcd)) = (with(register::PLAIN, 1), with("etcd", 1)) {
            headline.register_one_client_vs_etcd = Some(ratio(tickd.load.per_s, etcd.load.per_s));
        }
        if let (Some(plain), Some(tls)) = (at(register::PLAIN), at(register::TLS)) {
            headline.register_tls_p99_ms = Some(tls.load.latency.p99_ms);
            headline.register_tls_vs_plain_p99 =
                Some(ratio(tls.load.latency.p99_ms, plain.load.latency.p99_ms));
        }
        if let Some(row) = lateness::median_rounds(&self.lateness)
            .into_iter()
            .find(|row| row.clocks == HEADLINE_CLOCKS)
        {
            headline.tick_lateness_p99_ms = Some(row.tickd.lateness.p99_ms);
            headline.baseline_lateness_p99_ms = Some(row.baseline.lateness.p99_ms);
            headline.lateness_vs_baseline_p99 = Some(row.p99_ratio());
        }
        if let Some(failover) = &self.failover {
            headline.failover_p99_ms = Some(failover.to_first_tick.p99_ms);
            headline.failover_lost_ticks = Some(failover.lost_ticks);
        }
        if let Some(failover) = &self.failover_tls {
            headline.failover_tls_p99_ms = Some(failover.to_first_tick.p99_ms);
            headline.failover_tls_lost_ticks = Some(failover.lost_ticks);
        }
        if let Some(footprint) = &self.footprint {
            headline.bytes_per_clock = Some(footprint.bytes_per_clock);
        }
        if let Some(scale) = &self.scale {
            headline.scale_idle_cpu_pct = Some(scale.idle_cpu_max_pct());
            headline.scale_idle_cpu_empty_pct =
                Some(scale.idle_cpu_empty_pct.iter().copied().fold(0.0, f64::max));
            headline.scale_bytes_per_clock = Some(scale.bytes_per_clock);
            headline.scale_bytes_per_clock_restarted = Some(scale.bytes_per_clock_restarted);
            headline.scale_lateness_p99_ms = Some(scale.frequent_lateness.p99_ms);
            headline.scale_lateness_vs_empty_p99 = Some(scale.lateness_vs_empty_p99());
            headline.scale_watched_lateness_vs_empty_p99 =
                Some(scale.watched_lateness_vs_empty_p99());
        }
        if let Some(webhook) = &self.webhook {
            headline.webhook_lateness_p99_ms = Some(webhook.tickd.lateness.p99_ms);
            headline.webhook_baseline_p99_ms = Some(webhook.baseline.lateness.p99_ms);
            headline.webhook_vs_baseline_p99 = Some(webhook.p99_ratio);
            headline.webhook_missing_ticks = Some(
                webhook
                    .tickd
                    .expected
                    .saturating_sub(webhook.tickd.received),
            );
            headline.webhook_cpu_us_per_tick = Some(webhook.tickd_cpu.sender_us);
            headline.webhook_baseline_cpu_us_per_tick = Some(webhook.baseline_cpu.sender_us);
            headline.webhook_vs_baseline_cpu = Some(webhook.cpu_ratio());
        }
        if let Some(lease) = &self.lease {
            headline.lease_ack_per_s = Some(lease.many.lease_ack.per_s);
            headline.lease_pop_per_s = Some(lease.many.pops_per_s);
            headline.lease_vs_pop = Some(lease.ratio_many());
            headline.lease_ack_one_queue_per_s = Some(lease.one.lease_ack.per_s);
            headline.pop_ticks_one_queue_per_s = Some(lease.one.pop_ticks_per_s);
        }
        self.floors_missed = floors_missed(&headline);
        self.headline = headline;
    }

    /// The headline table.
    pub fn print(&self) {
        println!("\n{:<35} {:>12}  floor", "figure", "value");
        for (name, value) in self.headline.figures() {
            let floor = FLOORS
                .iter()
                .find(|floor| floor.figure == name)
                .map_or(String::new(), Floor::describe);
            let value = value.map_or("not measured".to_string(), |v| format!("{v:.2}"));
            println!("{name:<35} {value:>12}  {floor}");
        }
        for row in lateness::median_rounds(&self.lateness) {
            let rounds: Vec<String> = self
                .lateness
                .iter()
                .filter(|each| each.clocks == row.clocks)
                .map(|each| format!("{:.2}", each.p99_ratio()))
                .collect();
            if rounds.len() > 1 {
                println!(
                    "lateness p99 ratio at {} clocks, by round: {} (median: round {})",
                    row.clocks,
                    rounds.join(", "),
                    row.round
                );
            }
        }
        for failure in &self.failed {
            println!("scenario failed: {failure}");
        }
        if self.floors_missed.is_empty() {
            println!("\nevery floor holds");
        } else {
            println!("\nfloors missed: {}", self.floors_missed.join("; "));
        }
    }
}

/// A floor of the issue: the least (or most) a headline figure may be.
struct Floor {
    figure: &'static str,
    bound: f64,
    /// Whether the figure must be at least `bound` (else at most).
    at_least: bool,
}

/// The floors, one place for the table and the check.
const FLOORS: [Floor; 16] = [
    Floor {
        figure: "register_per_s",
        bound: 2_000.0,
        at_least: true,
    },
    Floor {
        figure: "register_vs_etcd",
        bound: 2.0,
        at_least: true,
    },
    Floor {
        figure: "register_one_client_vs_etcd",
        bound: 1.0,
        at_least: true,
    },
    Floor {
        figure: "register_tls_vs_plain_p99",
        bound: 1.15,
        at_least: false,
    },
    Floor {
        figure: "tick_lateness_p99_ms",
        bound: 10.0,
        at_least: false,
    },
    Floor {
        figure: "lateness_vs_baseline_p99",
        bound: 1.0,
        at_least: false,
    },
    Floor {
        figure: "failover_p99_ms",
        bound: 1_000.0,
        at_least: false,
    },
    Floor {
        figure: "failover_lost_ticks",
        bound: 0.0,
        at_least: false,
    },
    Floor {
        figure: "failover_tls_p99_ms",
        bound: 1_000.0,
        at_least: false,
    },
    Floor {
        figure: "failover_tls_lost_ticks",
        bound: 0.0,
        at_least: false,
    },
    Floor {
        figure: "bytes_per_clock",
        bound: 1_024.0,
        at_least: false,
    },
    Floor {
        figure: "scale_idle_cpu_pct",
        bound: 3.0,
        at_least: false,
    },
    Floor {
        figure: "scale_bytes_per_clock",
        bound: 512.0,
        at_least: false,
    },
    Floor {
        figure: "scale_lateness_vs_empty_p99",
        bound: 2.0,
        at_least: false,
    },
    Floor {
        figure: "scale_watched_lateness_vs_empty_p99",
        bound: 1.2,
        at_least: false,
    },
    Floor {
        figure: "webhook_vs_baseline_p99",
        bound: 1.2,
        at_least: false,
    },
];

impl Floor {
    fn describe(&self) -> String {
        format!("{} {}", if self.at_least { ">=" } else { "<=" }, self.bound)
    }

    fn holds(&self, value: f64) -> bool {
        if self.at_least {
            value >= self.bound
        } else {
            value <= self.bound
        }
    }
}

impl Headline {
    /// Every headline figure by name, in the order of the table.
    fn figures(&self) -> [(&'static str, Option<f64>); 34] {
        [
            ("register_per_s", self.register_per_s),
            ("register_p99_ms", self.register_p99_ms),
            ("etcd_put_per_s", self.etcd_put_per_s),
            ("register_vs_etcd", self.register_vs_etcd),
            (
                "register_one_client_vs_etcd",
                self.register_one_client_vs_etcd,
            ),
            ("register_tls_p99_ms", self.register_tls_p99_ms),
            ("register_tls_vs_plain_p99", self.register_tls_vs_plain_p99),
            ("tick_lateness_p99_ms", self.tick_lateness_p99_ms),
            ("baseline_lateness_p99_ms", self.baseline_lateness_p99_ms),
            ("lateness_vs_baseline_p99", self.lateness_vs_baseline_p99),
            ("failover_p99_ms", self.failover_p99_ms),
            (
                "failover_lost_ticks",
                self.failover_lost_ticks.map(|lost| lost as f64),
            ),
            ("failover_tls_p99_ms", self.failover_tls_p99_ms),
            (
                "failover_tls_lost_ticks",
                self.failover_tls_lost_ticks.map(|lost| lost as f64),
            ),
            ("bytes_per_clock", self.bytes_per_clock),
            ("scale_idle_cpu_pct", self.scale_idle_cpu_pct),
            ("scale_idle_cpu_empty_pct", self.scale_idle_cpu_empty_pct),
            ("scale_bytes_per_clock", self.scale_bytes_per_clock),
            (
                "scale_bytes_per_clock_restarted",
                self.scale_bytes_per_clock_restarted,
            ),
            ("scale_lateness_p99_ms", self.scale_lateness_p99_ms),
            (
                "scale_lateness_vs_empty_p99",
                self.scale_lateness_vs_empty_p99,
            ),
            (
                "scale_watched_lateness_vs_empty_p99",
                self.scale_watched_lateness_vs_empty_p99,
            ),
            ("webhook_lateness_p99_ms", self.webhook_lateness_p99_ms),
            ("webhook_baseline_p99_ms", self.webhook_baseline_p99_ms),
            ("webhook_vs_baseline_p99", self.webhook_vs_baseline_p99),
            (
                "webhook_missing_ticks",
                self.webhook_missing_ticks.map(|missing| missing as f64),
            ),
            ("webhook_cpu_us_per_tick", self.webhook_cpu_us_per_tick),
            (
                "webhook_baseline_cpu_us_per_tick",
                self.webhook_baseline_cpu_us_per_tick,
            ),
            ("webhook_vs_baseline_cpu", self.webhook_vs_baseline_cpu),
            ("lease_ack_per_s", self.lease_ack_per_s),
            ("lease_pop_per_s", self.lease_pop_per_s),
            ("lease_vs_pop", self.lease_vs_pop),
            ("lease_ack_one_queue_per_s", self.lease_ack_one_queue_per_s),
            ("pop_ticks_one_queue_per_s", self.pop_ticks_one_queue_per_s),
        ]
    }
}

/// The floors of the issue that a measured figure misses. An unmeasured figure misses none
/// here: its scenario's failure is in [`Report::failed`], which fails the run on its own.
fn floors_missed(h: &Headline) -> Vec<String> {
    let figures = h.figures();
    FLOORS
        .iter()
        .filter_map(|floor| {
            let (_, value) = figures.iter().find(|(name, _)| *name == floor.figure)?;
            let value = (*value)?;
            (!floor.holds(value)).then(|| {
                format!(
                    "{} {value} misses its floor {}",
                    floor.figure,
                    floor.describe()
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmeasured_figures_miss_no_floor_and_measured_ones_are_checked() {
        assert!(floors_missed(&Headline::default()).is_empty());
        let headline = Headline {
            register_per_s: Some(1_500.0),
            register_vs_etcd: Some(2.5),
            failover_p99_ms: Some(0.0),
            failover_lost_ticks: Some(2),
            bytes_per_clock: Some(900.0),
            ..Headline::default()
        };
        let missed = floors_missed(&headline);
        assert_eq!(missed.len(), 2, "{missed:?}");
        assert!(missed[0].starts_with("register_per_s"));
        assert!(missed[1].starts_with("failover_lost_ticks"));
    }

    #[test]
    fn a_webhook_p99_over_1_2_times_the_bare_senders_misses_its_floor() {
        let delivered = |p99_ms: f64, received: usize| Delivered {
            expected: 100,
            received,
            lateness: crate::stats::Percentiles {
                count: received,
                p99_ms,
                ..crate::stats::Percentiles::default()
            },
            distribution: Vec::new(),
        };
        let mut report = Report {
            webhook: Some(WebhookRow {
                clocks: 10,
                tickd: delivered(13.0, 97),
                baseline: delivered(10.0, 100),
                p99_ratio: 1.3,
                tickd_cpu: CpuPerTick {
                    sender_us: 40.0,
                    receiver_us: 20.0,
                },
                baseline_cpu: CpuPerTick {
                    sender_us: 30.0,
                    receiver_us: 20.0,
                },
            }),
            ..Report::default()
        };
        report.conclude();
        assert_eq!(report.headline.webhook_missing_ticks, Some(3));
        assert_eq!(report.headline.webhook_vs_baseline_cpu, Some(1.2));
        assert_eq!(report.headline.webhook_cpu_us_per_tick, Some(40.0));
        assert_eq!(report.floors_missed.len(), 1, "{:?}", report.floors_missed);
        assert!(report.floors_missed[0].starts_with("webhook_vs_baseline_p99"));

        if let Some(row) = &mut report.webhook {
            row.p99_ratio = 1.2;
        }
        report.conclude();
        assert!(
            report.floors_missed.is_empty(),
            "{:?}",
            report.floors_missed
        );
    }

    #[test]
    fn the_lease_figures_are_those_of_their_phases() {
        let phase = |queues: usize, lease_per_s: f64, pops_per_s: f64, ticks_per_s: f64| {
            crate::leases::LeasePhase {
                queues,
                lease_ack: crate::load::LoadResult {
                    clients: 32,
                    succeeded: 1_000,
                    failed: 0,
                    per_s: lease_per_s,
                    latency: crate::stats::Percentiles::default(),
                },
                pops_per_s,
                pop_ticks_per_s: ticks_per_s,
            }
        };
        let mut report = Report {
            lease: Some(LeaseRow {
                many: phase(1_000, 600.0, 1_200.0, 1_200.0),
                one: phase(1, 300.0, 20.0, 2_000.0),
            }),
            ..Report::default()
        };
        report.conclude();
        let headline = &report.headline;
        assert_eq!(headline.lease_ack_per_s, Some(600.0));
        assert_eq!(headline.lease_pop_per_s, Some(1_200.0));
        assert_eq!(headline.lease_vs_pop, Some(0.5));
        assert_eq!(headline.lease_ack_one_queue_per_s, Some(300.0));
        assert_eq!(headline.pop_ticks_one_queue_per_s, Some(2_000.0));
        assert!(
            report.floors_missed.is_empty(),
            "{:?}",
            report.floors_missed
        );
    }

    #[test]
    fn an_unmeasured_figure_is_null_in_the_json_not_zero() {
        let json = serde_json::to_value(Report::default()).expect("the report serializes");
        assert!(json["failover_lost_ticks"].is_null(), "{json}");
        assert!(json["register_per_s"].is_null(), "{json}");
    }
}
