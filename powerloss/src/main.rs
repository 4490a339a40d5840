//! `tickd-powerloss`: mounts the power-loss filesystem, or sends one command to a mounted one.
//!
//! ```text
//! tickd-powerloss mount --backing DIR --mountpoint DIR --control SOCKET
//! tickd-powerloss ctl --control SOCKET lose-power
//! ```

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tickd_powerloss::{DEFAULT_MAX_UNDO_BYTES, Mount};

#[derive(Debug, Parser)]
#[command(about = "A FUSE filesystem for tests that can lose unsynced writes on command")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Mounts the filesystem and serves it until it is unmounted.
    Mount {
        /// The directory whose files the filesystem shows.
        #[arg(long)]
        backing: PathBuf,
        /// Where to mount it.
        #[arg(long)]
        mountpoint: PathBuf,
        /// The control socket, outside the mount.
        #[arg(long)]
        control: PathBuf,
        /// The cap on memory kept to undo unsynced changes.
        #[arg(long, default_value_t = DEFAULT_MAX_UNDO_BYTES)]
        max_undo_bytes: u64,
    },
    /// Sends one command line to a mounted filesystem and prints its reply.
    Ctl {
        /// The control socket.
        #[arg(long)]
        control: PathBuf,
        /// The command and its arguments, e.g. `lose-power` or `freeze-on fsync raft/*.log`.
        #[arg(required = true)]
        words: Vec<String>,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Mount {
            backing,
            mountpoint,
            control,
            max_undo_bytes,
        } => {
            let mount = Mount {
                backing,
                mountpoint,
                control,
                max_undo_bytes,
            };
            match tickd_powerloss::serve(&mount) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!(
                        "tickd-powerloss: mounting {} at {}: {error}",
                        mount.backing.display(),
                        mount.mountpoint.display()
                    );
                    ExitCode::FAILURE
                }
            }
        }
        Command::Ctl { control, words } => {
            let sent = UnixStream::connect(&control).and_then(|mut stream| {
                writeln!(stream, "{}", words.join(" "))?;
                let mut reply = String::new();
                BufReader::new(stream).read_line(&mut reply)?;
                Ok(reply)
            });
            match sent {
                Ok(reply) => {
                    print!("{reply}");
                    if reply.starts_with("err") {
                        ExitCode::FAILURE
                    } else {
                        ExitCode::SUCCESS
                    }
                }
                Err(error) => {
                    eprintln!("tickd-powerloss: {}: {error}", control.display());
                    ExitCode::FAILURE
                }
            }
        }
    }
}
