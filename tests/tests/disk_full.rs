//! A node whose disk fills up: new clocks are refused while space is left, a storage error
//! that still happens stops the node (non-zero exit, saying why) instead of leaving a zombie
//! that answers 503 to every write while its health says UP, and
//! after space is freed and the node restarted every acknowledged registration is there.
//!
//! The data directory sits on a tmpfs the test mounts, so the test needs root (as the
//! power-loss tests need /dev/fuse); it fails, never skips, without it.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tickd_tests::api::{clock_id, health, list_where, register, try_send};
use tickd_tests::{TestCluster, eventually};
use tokio::sync::Mutex;

/// The filesystem's size: a few thousand clocks fill it.
const TMPFS_SIZE: &str = "24m";

/// The reserve the node keeps free, in MiB: RocksDB preallocates its write-ahead log in
/// blocks of about 4.6 MiB, so less would not leave room for a flush and a snapshot.
const RESERVE_MB: u64 = 8;

/// More registrations than the filesystem can hold: reaching this without a refusal fails.
const MAX_REGISTRATIONS: usize = 100_000;

/// Registrations in flight at once (the node batches them into one log entry).
const CONCURRENCY: usize = 16;

/// How long the node may take to exit once its disk is full and writes keep coming.
const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

/// A tmpfs mounted for one test, unmounted (lazily) on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "cannot mount a tmpfs at {} ({status}): this test needs root",
            dir.path().display()
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes zeros to `path` until the filesystem is full; returns how many bytes fitted.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).expect("create the filler file");
    let block = vec![0_u8; 64 * 1024];
    let mut written = 0_u64;
    loop {
        match file.write(&block) {
            Ok(0) => return written,
            Ok(bytes) => written += bytes as u64,
            Err(error) => {
                assert_eq!(
                    error.raw_os_error(),
                    Some(28),
                    "filling {} stopped on {error}, not ENOSPC",
                    path.display()
                );
                return written;
            }
        }
    }
}

/// Every clock name the node lists (it holds only ACTIVE clocks here, and PAUSED ones from
/// the last phase).
async fn names(cluster: &TestCluster) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for status in ["ACTIVE", "PAUSED"] {
        let (code, _, listed) = list_where(cluster, 1, &[("status", status)]).await;
        assert_eq!(code, StatusCode::OK, "{listed}");
        for clock in listed.as_array().into_iter().flatten() {
            names.insert(clock["name"].as_str().expect("a name").to_owned());
        }
    }
    names
}

#[tokio::test]
async fn a_full_disk_is_refused_before_it_happens_and_a_storage_error_stops_the_node() {
    let tmpfs = Tmpfs::mount(TMPFS_SIZE);
    let cluster = TestCluster::builder()
        .nodes(1)
        .data_root(tmpfs.path())
        .setting("disk_reserve_mb", RESERVE_MB.to_string())
        .start()
        .await;

    // 1. Registrations until the node refuses one: it says why, and it still serves.
    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let refusal = Arc::new(Mutex::new(None::<Value>));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let (cluster, acknowledged, refusal, next) = (
            &cluster,
            Arc::clone(&acknowledged),
            Arc::clone(&refusal),
            Arc::clone(&next),
        );
        workers.push(async move {
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= MAX_REGISTRATIONS || refusal.lock().await.is_some() {
                    return;
                }
                // Long names fill the disk in fewer registrations.
                let name = format!("{n:08}-{}", "x".repeat(180));
                let (status, _, body) = register(cluster, 1, &name, "@never").await;
                match status {
                    StatusCode::CREATED => {
                        acknowledged.lock().await.insert(name);
                    }
                    StatusCode::INSUFFICIENT_STORAGE => {
                        *refusal.lock().await = Some(body);
                        return;
                    }
                    other => panic!("registration {n}: {other} {body}"),
                }
            }
        });
    }
    futures::future::join_all(workers).await;
    let refusal = refusal
        .lock()
        .await
        .take()
        .unwrap_or_else(|| panic!("{MAX_REGISTRATIONS} registrations and no refusal"));
    let message = refusal["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains("below its reserve") && message.contains("disk_reserve_mb"),
        "{refusal}"
    );
    let acknowledged = acknowledged.lock().await.clone();
    assert!(
        acknowledged.len() > 100,
        "only {} registrations before the refusal: the reserve is checked wrong",
        acknowledged.len()
    );
    assert!(cluster.is_running(1), "the node refused, it did not stop");
    let (code, _, body) = health(&cluster, 1).await;
    assert_eq!(code, StatusCode::OK, "a refusing node is still UP: {body}");
    assert_eq!(names(&cluster).await, acknowledged, "reads go on");

    // 2. The disk fills anyway (another program): writes that need no new space still come
    // (pausing clocks), the log append fails, and the node stops instead of lingering.
    let filler = tmpfs.path().join("filler");
    fill(&filler);
    let victims: Vec<String> = {
        let (code, _, listed) = list_where(&cluster, 1, &[("status", "ACTIVE")]).await;
        assert_eq!(code, StatusCode::OK, "{listed}");
        listed
            .as_array()
            .into_iter()
            .flatten()
            .map(clock_id)
            .collect()
    };
    let deadline = tokio::time::Instant::now() + EXIT_TIMEOUT;
    for id in victims.iter().cycle() {
        if !cluster.is_running(1) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the node still runs {EXIT_TIMEOUT:?} after its disk filled"
        );
        // Refused or failed, it does not matter: the point is to make the node append.
        let pause = cluster
            .client()
            .put(format!("{}/api/v1/clocks/{id}/pause", cluster.api_url(1)))
            .bearer_auth(cluster.token());
        let _ = try_send(pause).await;
    }
    eventually(
        "the node to exit",
        EXIT_TIMEOUT,
        Duration::from_millis(100),
        || async { (!cluster.is_running(1)).then_some(()) },
    )
    .await;
    let log = cluster.failure_log(1);
    assert!(
        log.contains("the consensus core stopped"),
        "the node did not say why it stopped:\n{log}"
    );

    // 3. Space is freed, the node restarted: every acknowledged registration is there.
    std::fs::remove_file(&filler).expect("remove the filler");
    cluster.restart(1);
    cluster.wait_healthy(1, Duration::from_secs(60)).await;
    let listed = names(&cluster).await;
    let lost: Vec<&String> = acknowledged.difference(&listed).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged registrations lost, e.g. {:?}",
        lost.len(),
        acknowledged.len(),
        lost.first()
    );
    let (status, _, body) = register(&cluster, 1, "after the restart", "@never").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}
