//! The gaps a consumer sees from its ticks alone (SPEC §5, `skipped`): the instants of an
//! every-second clock between two ticks it received must be the later tick's `skipped`.

use serde_json::Value;

/// The instant of a scheduled tick, from its id (`<clock>-<instant>`).
pub fn instant_of(tick: &Value) -> u64 {
    tick["tick_id"]
        .as_str()
        .and_then(|id| id.rsplit_once('-'))
        .and_then(|(_, at)| at.parse().ok())
        .unwrap_or_else(|| panic!("a scheduled tick id: {tick}"))
}

/// Checks that every gap between the received scheduled ticks of an every-second clock, given
/// as (instant, skipped), is counted by the later tick's `skipped` (a tick received twice,
/// after a failover, is kept once); returns the total skipped after the first tick.
pub fn gaps_counted(ticks: impl IntoIterator<Item = (u64, u64)>) -> u64 {
    let mut instants: Vec<(u64, u64)> = ticks.into_iter().collect();
    instants.sort_unstable();
    instants.dedup_by_key(|(instant, _)| *instant);
    for pair in instants.windows(2) {
        let [(before, _), (after, skipped)] = pair else {
            continue;
        };
        assert_eq!(
            (after - before) / 1_000 - 1,
            *skipped,
            "the tick of {after} after the one of {before}: {instants:?}"
        );
    }
    instants.iter().skip(1).map(|(_, skipped)| skipped).sum()
}

/// [`gaps_counted`] of the scheduled ticks among the messages `ticks`.
pub fn gaps_counted_in(ticks: &[Value]) -> u64 {
    gaps_counted(
        ticks
            .iter()
            .filter(|tick| tick["manual"] == false)
            .map(|tick| {
                let skipped = tick["skipped"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("every tick says what it skipped: {tick}"));
                (instant_of(tick), skipped)
            }),
    )
}
