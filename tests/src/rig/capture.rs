//! A packet capture of the rig's bridge: `tcpdump` in the switch namespace, for as long as a
//! scenario runs.
//!
//! Every packet between two hosts, and between a host and the test process, crosses the
//! bridge, so a capture there sees all of the rig's traffic. tcpdump is required: a test that
//! captures fails when it is missing (`scripts/test` installs it), it never skips.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::cluster::send_signal;
use crate::tools;

/// How long tcpdump may take to open the bridge and say so.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long tcpdump may take to flush its file and exit after SIGINT.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A running capture; [`stop`](Capture::stop) ends it and returns the file.
#[derive(Debug)]
pub struct Capture {
    child: Option<Child>,
    file: PathBuf,
    /// What tcpdump has printed so far (its standard error): its start and its summary.
    said: Arc<Mutex<String>>,
    /// Holds the capture file until the capture is dropped.
    _dir: TempDir,
}

impl Capture {
    /// Starts `tcpdump -i <bridge>` in `namespace` and waits until it listens.
    ///
    /// # Panics
    ///
    /// When tcpdump is not installed, cannot be started or does not listen in time.
    pub(crate) fn start(namespace: &str, bridge: &str) -> Capture {
        let tcpdump = tools::require("tcpdump");
        let dir = tempfile::Builder::new()
            .prefix("tickd-capture-")
            .tempdir()
            .expect("create the capture's temporary directory");
        let file = dir.path().join("bridge.pcap");
        // --immediate-mode hands each packet to tcpdump as it arrives (by default the kernel
        // holds them in blocks for up to a second, and a capture stopped before the block is
        // handed over saw nothing), -U writes each one to the file at once, -n resolves no
        // names (no DNS from the rig), and -Z root keeps tcpdump from dropping to a user that
        // cannot write the file.
        let mut child = Command::new("ip")
            .args(["netns", "exec", namespace])
            .arg(&tcpdump)
            .args([
                "-i",
                bridge,
                "--immediate-mode",
                "-U",
                "-n",
                "-Z",
                "root",
                "-w",
            ])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("start {} in {namespace}: {error}", tcpdump.display()));
        let said = Arc::new(Mutex::new(String::new()));
        if let Some(stderr) = child.stderr.take() {
            let said = said.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut said = said.lock().unwrap_or_else(PoisonError::into_inner);
                    said.push_str(&line);
                    said.push('\n');
                }
            });
        }
        let mut capture = Capture {
            child: Some(child),
            file,
            said,
            _dir: dir,
        };
        capture.wait_listening();
        capture
    }

    fn said(&self) -> String {
        self.said
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until tcpdump says it listens; panics with what it said when it exits or takes
    /// too long.
    fn wait_listening(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self.said().contains("listening on") {
                return;
            }
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("tcpdump exited at start ({status}): {}", self.said());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "tcpdump did not listen within {START_TIMEOUT:?}: {}",
            self.said()
        );
    }

    /// Ends the capture (SIGINT, so that tcpdump flushes its file) and returns the pcap file.
    ///
    /// # Panics
    ///
    /// When tcpdump does not exit in time or the file cannot be read.
    pub fn stop(mut self) -> Vec<u8> {
        let Some(mut child) = self.child.take() else {
            panic!("the capture has already stopped");
        };
        send_signal(child.id(), "INT");
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "tcpdump did not exit within {STOP_TIMEOUT:?} of SIGINT: {}",
                        self.said()
                    );
                }
            }
        }
        std::fs::read(&self.file).unwrap_or_else(|error| {
            panic!(
                "read the capture {}: {error}; tcpdump said: {}",
                self.file.display(),
                self.said()
            )
        })
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
