//! Finding 8 of the hardening issue, against a real node: everything a node writes in its data
//! directory (RocksDB's log, the snapshot, the directories) is its user's alone. The files hold
//! every http queue id, the capability to pop that queue's ticks.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::StatusCode;
use tickd_tests::api::register;
use tickd_tests::{TestCluster, eventually, unique_name};

/// Every entry under `dir`, with its mode bits.
fn modes(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let entries = std::fs::read_dir(&next)
            .unwrap_or_else(|error| panic!("read {}: {error}", next.display()));
        for entry in entries.flatten() {
            let Ok(metadata) = entry.metadata() else {
                continue; // RocksDB removed it meanwhile
            };
            if metadata.is_dir() {
                pending.push(entry.path());
            }
            found.push((entry.path(), metadata.permissions().mode() & 0o777));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nodes_data_directory_and_its_files_are_its_users_alone() {
    let cluster = TestCluster::builder()
        .nodes(1)
        .snapshot_every(5)
        .start()
        .await;
    let node = cluster.node_ids()[0];
    for n in 0..12 {
        let name = unique_name(&format!("private-{n}"));
        let (status, _, body) = register(&cluster, node, &name, "every.1.hours").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let data_dir = cluster.data_dir(node);
    // The snapshot holds the clocks: wait until one is written, so that its file is checked too.
    eventually(
        "a snapshot file",
        Duration::from_secs(20),
        Duration::from_millis(200),
        || async {
            modes(&data_dir)
                .into_iter()
                .find(|(path, _)| path.to_string_lossy().contains("snapshot") && path.is_file())
        },
    )
    .await;
    let entries = modes(&data_dir);
    assert!(
        entries.len() > 5,
        "a data directory with its log and snapshot: {entries:?}"
    );
    let open: Vec<String> = entries
        .iter()
        .filter(|(_, mode)| mode & 0o077 != 0)
        .map(|(path, mode)| format!("{} {mode:o}", path.display()))
        .collect();
    assert!(
        open.is_empty(),
        "readable by others than the node's user: {open:#?}"
    );
}
