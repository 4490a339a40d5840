//! openraft's own warnings and errors, at most one line per call site per period.
//!
//! openraft logs a replication failure at every attempt: about 17 lines a second while a
//! follower is cut off, for as long as it is, which buries everything else in the journal
//! and can fill a disk. tickd reports such a stall once itself, with what to do
//! (`raft/src/progress.rs`, the `stalled_ms` of `GET /api/v1/cluster` and its metric), so the
//! repeats add nothing. The throttle keeps the first line of each openraft call site and drops
//! that site's next ones until [`EVERY`] has passed; tickd's own lines are never dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::Metadata;
use tracing::callsite::Identifier;

/// How often one openraft call site may write a warning or an error.
pub const EVERY: Duration = Duration::from_secs(10);

/// The targets whose events are throttled: openraft's modules.
const THROTTLED_TARGET: &str = "openraft";

/// When each throttled call site last wrote a line.
#[derive(Debug, Default)]
pub struct Throttle {
    last: Mutex<HashMap<Identifier, Instant>>,
}

impl Throttle {
    /// Whether the event described by `metadata` is written now. Spans, and every event
    /// outside openraft, always are; an openraft event is written when its call site wrote
    /// nothing in the last [`EVERY`]. The map holds at most one entry per openraft call site
    /// that ever logged, a fixed set.
    pub fn admits(&self, metadata: &Metadata<'_>, now: Instant) -> bool {
        if !metadata.is_event() || !metadata.target().starts_with(THROTTLED_TARGET) {
            return true;
        }
        let Ok(mut last) = self.last.lock() else {
            return true;
        };
        match last.get(&metadata.callsite()) {
            Some(at) if now.duration_since(*at) < EVERY => false,
            _ => {
                last.insert(metadata.callsite(), now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::{Context, SubscriberExt as _};

    use super::*;

    /// Counts the events that reach it.
    struct Count(Arc<AtomicUsize>);

    impl<S: tracing::Subscriber> Layer<S> for Count {
        fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn written(emit: impl Fn()) -> usize {
        let count = Arc::new(AtomicUsize::new(0));
        let throttle = Arc::new(Throttle::default());
        // Dynamic: a plain `filter_fn` is asked once per call site and its answer cached.
        let filter = tracing_subscriber::filter::dynamic_filter_fn(move |metadata, _| {
            throttle.admits(metadata, Instant::now())
        });
        let subscriber =
            tracing_subscriber::registry().with(Count(count.clone()).with_filter(filter));
        tracing::subscriber::with_default(subscriber, emit);
        count.load(Ordering::Relaxed)
    }

    #[test]
    fn an_openraft_call_site_writes_once_per_period_and_tickd_always() {
        let openraft = written(|| {
            for attempt in 0..100 {
                tracing::warn!(target: "openraft::replication", attempt, "append failed");
            }
        });
        assert_eq!(openraft, 1);
        let two_sites = written(|| {
            for attempt in 0..10 {
                tracing::warn!(target: "openraft::replication", attempt, "append failed");
                tracing::error!(target: "openraft::core", attempt, "vote failed");
            }
        });
        assert_eq!(two_sites, 2);
        let tickd = written(|| {
            for attempt in 0..100 {
                tracing::warn!(target: "tickd_raft::progress", attempt, "stalled");
            }
        });
        assert_eq!(tickd, 100);
    }

    /// Keeps the metadata of the last event that reaches it.
    struct Keep(Arc<Mutex<Option<&'static Metadata<'static>>>>);

    impl<S: tracing::Subscriber> Layer<S> for Keep {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            if let Ok(mut kept) = self.0.lock() {
                *kept = Some(event.metadata());
            }
        }
    }

    #[test]
    fn a_call_site_writes_again_once_the_period_has_passed() {
        let kept = Arc::new(Mutex::new(None));
        let subscriber = tracing_subscriber::registry().with(Keep(kept.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "openraft::replication", "append failed");
        });
        let metadata = kept
            .lock()
            .ok()
            .and_then(|kept| *kept)
            .expect("the event reached the layer");
        let throttle = Throttle::default();
        let start = Instant::now();
        assert!(throttle.admits(metadata, start));
        assert!(!throttle.admits(metadata, start + EVERY / 2));
        assert!(throttle.admits(metadata, start + EVERY));
        assert!(!throttle.admits(metadata, start + EVERY + EVERY / 2));
    }
}
