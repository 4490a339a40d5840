//! The control channel: a Unix socket outside the mount, one command per line, one reply line
//! per command.
//!
//! | command | reply |
//! |---|---|
//! | `lose-power [GLOB]` | `ok files=F bytes=B entries=E skipped=S matching=M`: what was dropped; M of the B bytes from files whose path matches GLOB (0 without one) |
//! | `stats` | `ok files=… unsynced_bytes=… held_bytes=… pending_entries=… writes=… fsyncs=… fsyncdirs=… written_back=… journal_overflowed=… power_losses=… lost_bytes=…` |
//! | `freeze-on OP GLOB` | `ok`: the next OP (`write`, `truncate`, `fsync`, `fsyncdir`, `create`, `rename`, `unlink`) on a path matching GLOB blocks, unanswered, until `lose-power` |
//! | `freeze-off` | `ok`: disarms a freeze point that has not been hit |
//! | `wait-frozen MS` | `frozen OP PATH` once an operation is frozen, or `err …` after MS milliseconds |
//! | `thaw` | `ok`: the frozen operation goes on as if never stopped (`err …` if none is) |
//! | `fsync-delay MS` | `ok`: every later fsync (and fsync of a directory) is answered MS milliseconds after it is done, as by a slow disk; other operations go on meanwhile; `0` answers at once again |
//! | `unmount` | `ok`, then the filesystem unmounts and the process exits |
//!
//! Anything else gets `err …`. Each connection is served by a thread of its own, so a
//! `wait-frozen` blocks only its own connection; a test holds a handful of them at most.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use fuser::SessionUnmounter;

use crate::disk::{Disk, FreezePoint, Op};

/// The longest line a client may send; a longer one closes the connection.
const MAX_LINE: u64 = 4096;

/// What a command asks of the server besides its reply.
#[derive(Debug, PartialEq, Eq)]
pub enum After {
    /// Nothing: read the next command.
    Continue,
    /// Unmount the filesystem.
    Unmount,
}

/// Answers one command line.
pub fn answer(disk: &Disk, line: &str) -> (String, After) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let reply = match words.as_slice() {
        ["lose-power", tally @ ..] if tally.len() <= 1 => {
            match disk.lose_power(tally.first().copied()) {
                Ok(loss) => format!(
                    "ok files={} bytes={} entries={} skipped={} matching={}",
                    loss.files, loss.bytes, loss.entries, loss.skipped, loss.matching_bytes
                ),
                Err(error) => format!("err lose-power: {error}"),
            }
        }
        ["stats"] => {
            let state = disk.lock();
            let undo = state.undo.stats();
            let counters = state.counters;
            format!(
                "ok files={} unsynced_bytes={} held_bytes={} pending_entries={} writes={} \
                 fsyncs={} fsyncdirs={} written_back={} journal_overflowed={} \
                 power_losses={} lost_bytes={}",
                undo.files,
                undo.unsynced_bytes,
                undo.held_bytes,
                state.names.pending(),
                counters.writes,
                counters.fsyncs,
                counters.fsyncdirs,
                undo.written_back,
                state.names.overflowed,
                counters.power_losses,
                counters.lost_bytes,
            )
        }
        ["freeze-on", op, glob] => match Op::parse(op) {
            Some(op) => {
                disk.freeze_on(FreezePoint {
                    op,
                    glob: (*glob).to_owned(),
                });
                "ok".to_owned()
            }
            None => format!("err unknown operation {op:?}"),
        },
        ["freeze-off"] => {
            disk.freeze_off();
            "ok".to_owned()
        }
        ["wait-frozen", millis] => match millis.parse::<u64>() {
            Ok(millis) => match disk.wait_frozen(Duration::from_millis(millis)) {
                Some(frozen) => format!("frozen {frozen}"),
                None => format!("err nothing frozen within {millis} ms"),
            },
            Err(_) => format!("err not a number of milliseconds: {millis:?}"),
        },
        ["thaw"] => {
            if disk.thaw() {
                "ok".to_owned()
            } else {
                "err nothing is frozen".to_owned()
            }
        }
        ["fsync-delay", millis] => match millis.parse::<u64>() {
            Ok(millis) => {
                disk.set_fsync_delay(Duration::from_millis(millis));
                "ok".to_owned()
            }
            Err(_) => format!("err not a number of milliseconds: {millis:?}"),
        },
        ["unmount"] => return ("ok".to_owned(), After::Unmount),
        _ => format!("err unknown command {line:?}"),
    };
    (reply, After::Continue)
}

/// Serves the control socket on its own threads until the process exits.
pub fn serve(
    listener: UnixListener,
    disk: Arc<Disk>,
    unmounter: SessionUnmounter,
) -> io::Result<()> {
    let unmounter = Arc::new(Mutex::new(unmounter));
    thread::Builder::new()
        .name("powerloss-control".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (disk, unmounter) = (disk.clone(), unmounter.clone());
                let spawned = thread::Builder::new()
                    .name("powerloss-client".into())
                    .spawn(move || converse(stream, &disk, &unmounter));
                if let Err(error) = spawned {
                    eprintln!("tickd-powerloss: cannot serve a control connection: {error}");
                }
            }
        })?;
    Ok(())
}

fn converse(stream: UnixStream, disk: &Disk, unmounter: &Mutex<SessionUnmounter>) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream.take(u64::MAX));
    loop {
        let mut line = String::new();
        reader.get_mut().set_limit(MAX_LINE);
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if !line.ends_with('\n') => return,
            Ok(_) => {}
        }
        let (reply, after) = answer(disk, line.trim());
        if writeln!(writer, "{reply}").is_err() {
            return;
        }
        if after == After::Unmount {
            let mut unmounter = unmounter.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(error) = unmounter.unmount() {
                eprintln!("tickd-powerloss: unmount failed: {error}");
            }
            return;
        }
    }
}
