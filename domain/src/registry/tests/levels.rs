//! Cluster level 1: commands apply as v0.1.0 applied them, without the bounds and the tick
//! statistics later levels brought, so that a cluster mid-upgrade stays one state machine.

use super::*;

#[test]
fn at_level_1_no_tick_statistics_are_kept() {
    let (registry, _) = outage_then_deliveries(Level::V0_1);
    assert!(stats_of(&registry, "ra").is_empty());
    assert!(stats_of(&registry, "hc").is_empty());
    assert_eq!(registry.ledger().series.buckets().count(), 0);
}

#[test]
fn at_level_1_commands_apply_as_v0_1_0_applied_them() {
    let v0_1 = Level::V0_1;
    let mut registry = Registry::new();
    registry.apply_at(v0_1, rabbit("r", "@never", "ra", 0));
    let http = match registry.apply_at(v0_1, register("h", "@never", "hc", NO_LIMIT)) {
        Outcome::Registered { clock, .. } => clock,
        other => panic!("a registration: {other:?}"),
    };
    registry.apply_at(v0_1, intent_keeping_three(1_000, 1_000));
    // Manual ticks: no cap on those waiting for the broker, none on an http queue.
    for (clock, now_ms) in [("ra", 0), ("hc", 0)].repeat(5).into_iter().zip(0..) {
        let ticked = registry.apply_at(
            v0_1,
            Command::Tick {
                id: id(clock.0),
                now_ms,
                request: None,
            },
        );
        assert!(matches!(ticked, Outcome::Updated(_)), "{ticked:?}");
    }
    let waiting = |registry: &Registry| {
        registry
            .ledger()
            .queues
            .get(&queue_for("hc"))
            .map(std::collections::VecDeque::len)
    };
    assert_eq!(waiting(&registry), Some(5), "kept past the limit of 3");
    assert_eq!(registry.ledger().outbox.len(), 5);
    // A proposed queue id already in use is taken, as v0.1.0 takes it.
    let twin = Command::Register {
        name: "twin".to_owned(),
        schedule: schedule("@never"),
        id: id("tw"),
        channel: http.channel.clone(),
        max_clocks: NO_LIMIT,
        now_ms: 2_000,
        overlap: crate::Overlap::Allow,
    };
    assert!(matches!(
        registry.clone().apply_at(v0_1, twin.clone()),
        Outcome::Registered { created: true, .. }
    ));
    assert!(matches!(
        registry.clone().apply(twin),
        Outcome::Rejected { .. }
    ));
    // A registration stamped far behind the watermark files every instant since its
    // stamp, where level 2 files one look-ahead window.
    let mut far = Registry::new();
    far.apply_at(v0_1, intent(MAX_LOOKAHEAD_MS * 3, MAX_LOOKAHEAD_MS * 3));
    let mut bounded = far.clone();
    let stale = rabbit("s", "every.1.seconds", "st", 0);
    far.apply_at(v0_1, stale.clone());
    bounded.apply(stale);
    assert!(far.ledger().outbox.len() > bounded.ledger().outbox.len());
}
