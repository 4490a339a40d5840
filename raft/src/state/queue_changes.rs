//! Per-queue change notifications, from the state machine's apply to the long polls.
//!
//! A long poll (`GET /api/v1/queues/{id}/pop?wait=N`) must wake when its queue changes — a
//! tick filed or popped, the queue removed — and only then: waking every poll on every Raft
//! event made 500 idle polls cost a leader a third of its CPU.
//!
//! A poll [`QueueChanges::watch`]es its queue before it reads the state, so that no change can
//! fall between its read and its wait. Apply [`QueueChanges::observe`]s the watched queues
//! before it applies a group of entries, and afterwards signals those whose
//! [`Fingerprint`] changed. Only queues someone waits on are compared, so apply costs nothing
//! extra while nobody polls, and the comparison is independent of the command kinds: a new
//! command that touches queues cannot be forgotten here.
//!
//! The map holds an entry per queue with at least one waiter and removes it when its last
//! waiter goes away, so it never holds more entries than there are polls waiting (bounded by
//! the API's cap on concurrent long polls).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tickd_domain::{QueueId, Registry, TickId};
use tokio::sync::watch;

/// The waiters of each watched queue (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct QueueChanges(Arc<Mutex<HashMap<QueueId, Watched>>>);

/// One watched queue.
#[derive(Debug)]
struct Watched {
    /// Bumped on every change; each waiter holds a receiver.
    version: watch::Sender<u64>,
    /// How many [`QueueWatch`]es exist for the queue; the entry goes when it reaches zero.
    waiters: usize,
}

/// What a long poll looks at in a queue: whether it exists, how many ticks it holds and the
/// newest of them, and how many are leased. Every change a poll cares about changes one of
/// these: a pop shortens the queue, a filed tick lengthens it or (when the queue is full and
/// drops its oldest) changes its newest tick, a lease or an ack changes the leased count, a
/// removed clock removes the queue. (A lease running out changes nothing in the state: a
/// poll wakes for it by its deadline, `TickLedger::next_due_in_queue`.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    exists: bool,
    ticks: usize,
    newest: Option<TickId>,
    leased: usize,
}

impl Fingerprint {
    /// The fingerprint of `queue` in `registry`.
    pub fn of(registry: &Registry, queue: &QueueId) -> Self {
        let ticks = registry.ledger().queues().get(queue);
        Self {
            exists: registry.clock_of_queue(queue).is_some(),
            ticks: ticks.map_or(0, |ticks| ticks.len()),
            newest: ticks
                .and_then(|ticks| ticks.back())
                .map(|tick| tick.id.clone()),
            leased: registry.ledger().leased_in_queue(queue),
        }
    }
}

impl QueueChanges {
    /// Starts watching `queue`. Changes applied from now on wake [`QueueWatch::changed`].
    pub fn watch(&self, queue: &QueueId) -> QueueWatch {
        let mut watched = self.lock();
        let entry = watched.entry(queue.clone()).or_insert_with(|| Watched {
            version: watch::channel(0).0,
            waiters: 0,
        });
        entry.waiters += 1;
        QueueWatch {
            changes: self.clone(),
            queue: queue.clone(),
            version: entry.version.subscribe(),
        }
    }

    /// How many queues are watched now.
    pub fn watched(&self) -> usize {
        self.lock().len()
    }

    /// Takes the fingerprint of every watched queue, before apply changes `registry`.
    pub fn observe(&self, registry: &Registry) -> Observation {
        let queues: Vec<QueueId> = self.lock().keys().cloned().collect();
        let before = queues
            .into_iter()
            .map(|queue| {
                let fingerprint = Fingerprint::of(registry, &queue);
                (queue, fingerprint)
            })
            .collect();
        Observation {
            changes: self.clone(),
            before,
        }
    }

    /// Wakes every watcher: the whole state was replaced (a snapshot was installed).
    pub fn notify_all(&self) {
        for watched in self.lock().values() {
            watched.version.send_modify(|version| *version += 1);
        }
    }

    fn notify(&self, queues: &[QueueId]) {
        let watched = self.lock();
        for queue in queues {
            if let Some(watched) = watched.get(queue) {
                watched.version.send_modify(|version| *version += 1);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<QueueId, Watched>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The watched queues' fingerprints before an apply.
#[derive(Debug)]
#[must_use = "call `changed` once the entries are applied"]
pub struct Observation {
    changes: QueueChanges,
    before: Vec<(QueueId, Fingerprint)>,
}

impl Observation {
    /// The watched queues that `registry`, now applied, changed. Call it under the state's
    /// write lock, and [`Changed::notify`] after releasing it, so that the woken polls do not
    /// wait for the lock.
    pub fn changed(self, registry: &Registry) -> Changed {
        let queues = self
            .before
            .into_iter()
            .filter(|(queue, before)| Fingerprint::of(registry, queue) != *before)
            .map(|(queue, _)| queue)
            .collect();
        Changed {
            changes: self.changes,
            queues,
        }
    }
}

/// Queues an apply changed, to be signalled.
#[derive(Debug)]
#[must_use = "call `notify`"]
pub struct Changed {
    changes: QueueChanges,
    queues: Vec<QueueId>,
}

impl Changed {
    /// Wakes the waiters of the changed queues.
    pub fn notify(self) {
        if !self.queues.is_empty() {
            self.changes.notify(&self.queues);
        }
    }

    /// The changed queues.
    pub fn queues(&self) -> &[QueueId] {
        &self.queues
    }
}

/// One waiter's interest in a queue; dropping it ends the interest.
#[derive(Debug)]
pub struct QueueWatch {
    changes: QueueChanges,
    queue: QueueId,
    version: watch::Receiver<u64>,
}

impl QueueWatch {
    /// Returns once the queue changed since the watch began or since the last call returned.
    pub async fn changed(&mut self) {
        if self.version.changed().await.is_err() {
            // The sender lives in the map as long as this watch does, so this cannot happen;
            // if it did, waking at once would make the poll spin.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for QueueWatch {
    fn drop(&mut self) {
        let mut watched = self.changes.lock();
        if let Some(entry) = watched.get_mut(&self.queue) {
            entry.waiters = entry.waiters.saturating_sub(1);
            if entry.waiters == 0 {
                watched.remove(&self.queue);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tickd_domain::{Channel, ClockId, Command, Schedule};

    use super::*;

    fn queue(n: u8) -> QueueId {
        QueueId::new(format!("{n:032x}"))
    }

    /// A registry with an http clock `c<n>` on `queue(n)` for each `n`.
    fn registry(queues: &[u8]) -> Registry {
        let mut registry = Registry::new();
        for n in queues {
            registry.apply(Command::Register {
                name: format!("c{n}"),
                schedule: Schedule::parse("@never").expect("a schedule"),
                id: ClockId::new(format!("c{n}")),
                channel: Channel::Http {
                    queue_id: queue(*n),
                },
                max_clocks: 100,
                now_ms: 1_000,
                overlap: tickd_domain::Overlap::Allow,
            });
        }
        registry
    }

    async fn woken(watch: &mut QueueWatch) -> bool {
        tokio::time::timeout(Duration::from_millis(20), watch.changed())
            .await
            .is_ok()
    }

    #[test]
    fn the_map_holds_only_queues_someone_waits_on() {
        let changes = QueueChanges::default();
        let first = changes.watch(&queue(1));
        let second = changes.watch(&queue(1));
        let other = changes.watch(&queue(2));
        assert_eq!(changes.watched(), 2);
        drop(first);
        assert_eq!(changes.watched(), 2, "queue 1 still has a waiter");
        drop(second);
        assert_eq!(
            changes.watched(),
            1,
            "queue 1's entry went with its last waiter"
        );
        drop(other);
        assert_eq!(changes.watched(), 0);
        // Many polls of many queues, all gone: nothing left behind.
        let watches: Vec<_> = (0..200).map(|n| changes.watch(&queue(n))).collect();
        assert_eq!(changes.watched(), 200);
        drop(watches);
        assert_eq!(changes.watched(), 0);
    }

    #[tokio::test]
    async fn apply_wakes_the_queues_it_changed_and_no_other() {
        let changes = QueueChanges::default();
        let mut registry = registry(&[1, 2]);
        let mut ticked = changes.watch(&queue(1));
        let mut idle = changes.watch(&queue(2));

        let observed = changes.observe(&registry);
        registry.apply(Command::Tick {
            id: ClockId::new("c1".into()),
            now_ms: 2_000,
            request: None,
        });
        let changed = observed.changed(&registry);
        assert_eq!(changed.queues(), &[queue(1)]);
        changed.notify();
        assert!(
            woken(&mut ticked).await,
            "a manual tick wakes its queue's poll"
        );
        assert!(!woken(&mut idle).await, "another queue's poll sleeps on");
        assert!(!woken(&mut ticked).await, "one change wakes once");

        // A pop empties the queue: a change too.
        let observed = changes.observe(&registry);
        registry.apply(Command::Pop {
            queue: queue(1),
            now_ms: 3_000,
            request: "r1".into(),
        });
        observed.changed(&registry).notify();
        assert!(
            woken(&mut ticked).await,
            "a pop wakes the queue's other polls"
        );

        // An entry that touches no queue wakes nobody.
        let observed = changes.observe(&registry);
        registry.apply(Command::Touch {
            queues: vec![queue(2)],
            now_ms: 4_000,
        });
        assert!(observed.changed(&registry).queues().is_empty());
    }

    #[tokio::test]
    async fn a_removed_queue_wakes_its_polls() {
        let changes = QueueChanges::default();
        let mut registry = registry(&[3]);
        let mut watch = changes.watch(&queue(3));
        let observed = changes.observe(&registry);
        registry.apply(Command::Purge {
            clocks: vec![ClockId::new("c3".into())],
        });
        observed.changed(&registry).notify();
        assert!(woken(&mut watch).await);
    }

    #[tokio::test]
    async fn a_change_between_watching_and_waiting_is_not_missed() {
        let changes = QueueChanges::default();
        let mut registry = registry(&[4]);
        // The poll watches, then reads the state (empty); apply ticks before it waits.
        let mut watch = changes.watch(&queue(4));
        let observed = changes.observe(&registry);
        registry.apply(Command::Tick {
            id: ClockId::new("c4".into()),
            now_ms: 2_000,
            request: None,
        });
        observed.changed(&registry).notify();
        assert!(woken(&mut watch).await);
    }

    #[tokio::test]
    async fn an_installed_snapshot_wakes_everyone() {
        let changes = QueueChanges::default();
        let mut first = changes.watch(&queue(5));
        let mut second = changes.watch(&queue(6));
        changes.notify_all();
        assert!(woken(&mut first).await && woken(&mut second).await);
    }
}
