//! What a node itself records, read from its `/metrics` scrape: the publish-time lateness
//! histogram, to set beside the lateness the consumers measure, and what the Raft log's
//! RocksDB holds in memory, to set beside the node's resident memory.

use std::collections::BTreeMap;

/// The histogram of how late after its instant the leader published each tick.
const PUBLISH_LATENESS: &str = "tickd_tick_publish_lateness_seconds";

/// A node's scrape.
pub async fn scrape(http: &reqwest::Client, api: &str, token: &str) -> Result<String, String> {
    let response = http
        .get(format!("{api}/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| format!("{api}/metrics: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{api}/metrics answered {}", response.status()));
    }
    response
        .text()
        .await
        .map_err(|e| format!("{api}/metrics: {e}"))
}

/// The 99th percentile of publish lateness between two scrapes of the same node, in ms, as
/// the upper bound of the histogram bucket it falls in; `None` if nothing was published.
pub fn publish_lateness_p99_ms(before: &str, after: &str) -> Option<f64> {
    let (before, after) = (
        buckets(before, PUBLISH_LATENESS),
        buckets(after, PUBLISH_LATENESS),
    );
    let window: Vec<(f64, f64)> = after
        .iter()
        .map(|(bound, count)| {
            let earlier = before.get(bound).copied().unwrap_or(0.0);
            (f64::from_bits(*bound), count - earlier)
        })
        .collect();
    let total = window.last()?.1;
    if total <= 0.0 {
        return None;
    }
    window
        .iter()
        .find(|(_, count)| *count >= 0.99 * total)
        .map(|(bound, _)| bound * 1e3)
}

/// What the Raft log's RocksDB holds in memory, by part.
const LOG_MEMORY: &str = "tickd_raft_log_memory_bytes";

/// The Raft log's memory in a scrape, bytes: its memtables and its block cache; `None` for a
/// part the scrape does not have.
pub fn log_memory_bytes(scrape: &str) -> (Option<u64>, Option<u64>) {
    let part = |name: &str| {
        let prefix = format!("{LOG_MEMORY}{{part=\"{name}\"}} ");
        scrape
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .map(|bytes| bytes as u64)
    };
    (part("memtables"), part("block_cache"))
}

/// The cumulative bucket counts of `metric`, summed over label sets, keyed by the bits of the
/// bucket's upper bound (`+Inf` included), in ascending order of bound.
fn buckets(scrape: &str, metric: &str) -> BTreeMap<u64, f64> {
    let prefix = format!("{metric}_bucket{{");
    let mut buckets = BTreeMap::new();
    for line in scrape.lines().filter(|line| line.starts_with(&prefix)) {
        let Some((labels, value)) = line.rsplit_once("} ") else {
            continue;
        };
        let Some(bound) = labels
            .split("le=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        else {
            continue;
        };
        let bound = if bound == "+Inf" {
            Some(f64::INFINITY)
        } else {
            bound.parse().ok()
        };
        if let (Some(bound), Ok(count)) = (bound, value.trim().parse::<f64>()) {
            // Positive floats order like their bits.
            *buckets.entry(f64::to_bits(bound)).or_insert(0.0) += count;
        }
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape_with(counts: [u64; 4]) -> String {
        format!(
            "# TYPE tickd_tick_publish_lateness_seconds histogram\n\
             tickd_tick_publish_lateness_seconds_bucket{{le=\"0.001\"}} {}\n\
             tickd_tick_publish_lateness_seconds_bucket{{le=\"0.005\"}} {}\n\
             tickd_tick_publish_lateness_seconds_bucket{{le=\"0.01\"}} {}\n\
             tickd_tick_publish_lateness_seconds_bucket{{le=\"+Inf\"}} {}\n\
             tickd_tick_publish_lateness_seconds_sum 1.5\n\
             tickd_other_bucket{{le=\"0.001\"}} 99\n",
            counts[0], counts[1], counts[2], counts[3]
        )
    }

    #[test]
    fn the_p99_is_the_bound_of_the_bucket_it_falls_in_within_the_window() {
        // Before the window: 100 ticks, all under 1 ms. In it: 1 000 more, 20 of them 5–10 ms.
        let before = scrape_with([100, 100, 100, 100]);
        let after = scrape_with([600, 1_080, 1_100, 1_100]);
        assert_eq!(publish_lateness_p99_ms(&before, &after), Some(10.0));
        let all_fast = scrape_with([1_100, 1_100, 1_100, 1_100]);
        assert_eq!(publish_lateness_p99_ms(&before, &all_fast), Some(1.0));
    }

    #[test]
    fn the_log_memory_parts_are_read_by_label() {
        let scrape = "tickd_raft_log_memory_bytes{part=\"block_cache\"} 4096\n\
                      tickd_raft_log_memory_bytes{part=\"memtables\"} 2101248\n\
                      tickd_raft_log_memory_bytes{part=\"table_readers\"} 7\n";
        assert_eq!(log_memory_bytes(scrape), (Some(2_101_248), Some(4_096)));
        assert_eq!(log_memory_bytes("tickd_clocks 5\n"), (None, None));
    }

    #[test]
    fn nothing_published_or_no_histogram_gives_none() {
        let same = scrape_with([5, 5, 5, 5]);
        assert_eq!(publish_lateness_p99_ms(&same, &same), None);
        assert_eq!(publish_lateness_p99_ms("", "tickd_up 1\n"), None);
    }
}
