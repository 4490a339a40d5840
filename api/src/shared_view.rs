//! A view several readers share: built by one of them, reused by the others while it is fresh.
//!
//! Every open event stream shows the same cluster status, the same listing of the clocks and
//! the same statistics. Built per stream, their cost grew with the number of dashboards
//! watching: each stream probed every peer, passed over the registry and encoded the
//! statistics on its own, on the node that also fires the ticks. A [`SharedView`] lets the
//! first stream that needs a view build it and every other stream take the same one, so that
//! watching costs a node the same whether one dashboard or thirty-two watch it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

/// One view, keyed by what it was built from, and the instant its build began.
pub(crate) struct SharedView<K, V> {
    /// Held while a view is built, so that readers arriving meanwhile wait for that build
    /// instead of starting their own.
    last: Mutex<Option<Built<K, V>>>,
}

struct Built<K, V> {
    key: K,
    began: Instant,
    value: Arc<V>,
}

impl<K, V> Default for SharedView<K, V> {
    fn default() -> Self {
        SharedView {
            last: Mutex::new(None),
        }
    }
}

impl<K: PartialEq, V> SharedView<K, V> {
    /// The view of the key `read` returns: the last one built, if it was built of that key
    /// and began at most `max_age` ago; otherwise a new one, built by `build` from what `read`
    /// returned beside the key, and kept for the next reader. `read` runs once this reader
    /// holds the view, so that the key is compared as it is then, not as it was while the
    /// reader waited for another's build (which would build an older view again). A failed
    /// build is not kept: the next reader tries again. Should the reader building go away (a
    /// stream closed), the next one waiting builds instead.
    pub(crate) async fn get<I, E, Build>(
        &self,
        max_age: Duration,
        read: impl FnOnce() -> (K, I),
        build: impl FnOnce(I) -> Build,
    ) -> Result<Arc<V>, E>
    where
        Build: Future<Output = Result<V, E>>,
    {
        let mut last = self.last.lock().await;
        let (key, input) = read();
        if let Some(built) = last.as_ref()
            && built.key == key
            && built.began.elapsed() <= max_age
        {
            return Ok(built.value.clone());
        }
        let began = Instant::now();
        let value = Arc::new(build(input).await?);
        *last = Some(Built {
            key,
            began,
            value: value.clone(),
        });
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    const LONG: Duration = Duration::from_secs(3_600);

    /// The view of `key`, from a build that counts itself and yields the count.
    async fn counted(
        view: &SharedView<u32, usize>,
        key: u32,
        max_age: Duration,
        builds: &AtomicUsize,
    ) -> usize {
        let value = view
            .get(
                max_age,
                || (key, ()),
                |()| async { Ok::<_, Infallible>(builds.fetch_add(1, Ordering::SeqCst) + 1) },
            )
            .await;
        value.map_or(0, |value| *value)
    }

    #[tokio::test]
    async fn a_fresh_view_of_the_same_key_is_built_once() {
        let view = SharedView::default();
        let builds = AtomicUsize::new(0);
        for _ in 0..5 {
            assert_eq!(counted(&view, 1, LONG, &builds).await, 1);
        }
        assert_eq!(builds.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_new_key_or_an_old_view_is_built_again() {
        let view = SharedView::default();
        let builds = AtomicUsize::new(0);
        let values = [
            counted(&view, 1, LONG, &builds).await,
            counted(&view, 2, LONG, &builds).await,
            counted(&view, 2, Duration::ZERO, &builds).await,
            counted(&view, 2, LONG, &builds).await,
        ];
        assert_eq!(values, [1, 2, 3, 3]);
    }

    #[tokio::test]
    async fn a_failed_build_is_not_kept() {
        let view: SharedView<u8, &str> = SharedView::default();
        let down = view.get(LONG, || (1, ()), |()| async { Err("down") }).await;
        assert_eq!(down, Err("down"));
        let up = view
            .get(LONG, || (1, ()), |()| async { Ok::<_, &str>("up") })
            .await;
        assert_eq!(up.map(|value| *value), Ok("up"));
    }

    #[tokio::test]
    async fn readers_arriving_during_a_build_wait_for_it_instead_of_building() {
        let view = Arc::new(SharedView::<u32, usize>::default());
        let builds = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..8)
            .map(|_| {
                let (view, builds) = (view.clone(), builds.clone());
                tokio::spawn(async move {
                    let slow = |()| async move {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok::<_, Infallible>(builds.fetch_add(1, Ordering::SeqCst) + 1)
                    };
                    let value = view.get(LONG, || (1, ()), slow).await;
                    value.map_or(0, |value| *value)
                })
            })
            .collect();
        for reader in readers {
            assert_eq!(reader.await.ok(), Some(1));
        }
        assert_eq!(builds.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_key_is_read_once_the_reader_holds_the_view() {
        // The key moves from 1 to 2 while a reader waits for a build of 2: a reader that read
        // the key before waiting would build the older view of 1 after it.
        let view = Arc::new(SharedView::<usize, u32>::default());
        let key = Arc::new(AtomicUsize::new(1));
        let builds = Arc::new(AtomicUsize::new(0));
        let building = {
            let (view, key, builds) = (view.clone(), key.clone(), builds.clone());
            tokio::spawn(async move {
                let build = |()| async move {
                    builds.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    key.store(2, Ordering::SeqCst);
                    Ok::<_, Infallible>(2)
                };
                view.get(LONG, || (2, ()), build)
                    .await
                    .map_or(0, |value| *value)
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let current = || (key.load(Ordering::SeqCst), ());
        let waited = view
            .get(LONG, current, |()| async {
                builds.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Infallible>(1)
            })
            .await;
        assert_eq!(building.await.ok(), Some(2));
        assert_eq!(waited.map(|value| *value), Ok(2));
        assert_eq!(builds.load(Ordering::SeqCst), 1);
    }
}
