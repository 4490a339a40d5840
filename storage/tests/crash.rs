//! Durability under SIGKILL, for real: a child process appends entries and reports each one
//! the store called durable; the parent kills it with SIGKILL mid-stream, reopens the store
//! and checks that every reported entry is there.
//!
//! The child is this same test binary, re-run with an environment variable that selects the
//! `append_until_killed` role.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
use tickd_raft::TypeConfig;

const CHILD_DIR_VAR: &str = "TICKD_CRASH_TEST_DIR";

fn entry(index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Blank,
    }
}

/// The child's role: append forever, printing each index once it is durable.
#[tokio::test]
async fn append_until_killed() {
    let Ok(dir) = std::env::var(CHILD_DIR_VAR) else {
        return; // Only meaningful as the child of `sigkill_during_appends_loses_no_durable_entry`.
    };
    let (mut log, _sm, _handle) = tickd_storage::open(dir.as_ref()).expect("open the store");
    log.save_vote(&Vote::new(1, 1))
        .await
        .expect("save the vote");
    for index in 1.. {
        log.blocking_append([entry(index)]).await.expect("append");
        println!("durable {index}");
    }
}

#[tokio::test]
async fn sigkill_during_appends_loses_no_durable_entry() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut child = Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            "append_until_killed",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_VAR, dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the appending child");
    let stdout = child.stdout.take().expect("child stdout");

    let mut reported = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read the child's output");
        if let Some(index) = line.strip_prefix("durable ") {
            reported = index.parse().expect("an index");
        }
        if reported >= 300 || Instant::now() > deadline {
            break;
        }
    }
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    assert!(
        reported >= 300,
        "the child reported only {reported} durable entries in 60 s"
    );

    let (mut log, mut sm, _handle) = tickd_storage::open(dir.path()).expect("reopen the store");
    assert_eq!(
        log.read_vote().await.expect("read the vote"),
        Some(Vote::new(1, 1))
    );
    let entries = log
        .try_get_log_entries(1..=reported)
        .await
        .expect("read the log");
    let indexes: Vec<u64> = entries.iter().map(|entry| entry.log_id.index).collect();
    assert_eq!(
        indexes,
        (1..=reported).collect::<Vec<_>>(),
        "a durable entry was lost"
    );
    let state = log.get_log_state().await.expect("log state");
    assert!(state.last_log_id.expect("a last log id").index >= reported);
    assert_eq!(sm.applied_state().await.expect("applied state").0, None);
}
