//! A fault-injecting TCP proxy for one directed link between two nodes (A dials B through it).
//!
//! Each link of a test cluster gets its own proxy, so faults are per link and per direction:
//! a partition isolating node A black-holes every link from and to A. Changing a link's mode
//! also cuts its open connections, so pooled keep-alive connections cannot outlive a
//! partition.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What a link does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// Forward everything.
    Pass,
    /// Forward everything, each chunk late by this much.
    Delay(Duration),
    /// Refuse: connections are closed at once.
    Drop,
    /// Swallow: connections are accepted and their bytes discarded, nothing is answered, so
    /// the dialing node sees timeouts rather than refusals.
    Blackhole,
}

/// One running proxy.
#[derive(Debug)]
pub struct LinkProxy {
    listen: SocketAddr,
    mode: watch::Sender<LinkMode>,
    task: tokio::task::JoinHandle<()>,
}

impl LinkProxy {
    /// Starts a proxy on `listen` that forwards to `target`.
    pub async fn start(listen: SocketAddr, target: SocketAddr) -> std::io::Result<LinkProxy> {
        let listener = TcpListener::bind(listen).await?;
        let (mode, modes) = watch::channel(LinkMode::Pass);
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let modes = modes.clone();
                tokio::spawn(serve(inbound, target, modes));
            }
        });
        Ok(LinkProxy { listen, mode, task })
    }

    /// The address the dialing node connects to.
    pub fn address(&self) -> SocketAddr {
        self.listen
    }

    /// Changes what the link does; open connections are cut.
    pub fn set(&self, mode: LinkMode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut inbound: TcpStream, target: SocketAddr, mut modes: watch::Receiver<LinkMode>) {
    let mode = *modes.borrow_and_update();
    match mode {
        LinkMode::Drop => {}
        LinkMode::Blackhole => {
            let mut sink = [0u8; 4096];
            loop {
                tokio::select! {
                    read = inbound.read(&mut sink) => if matches!(read, Ok(0) | Err(_)) { return },
                    _ = modes.changed() => return,
                }
            }
        }
        LinkMode::Pass | LinkMode::Delay(_) => {
            let Ok(mut outbound) = TcpStream::connect(target).await else {
                return;
            };
            let delay = match mode {
                LinkMode::Delay(delay) => delay,
                _ => Duration::ZERO,
            };
            let (mut in_read, mut in_write) = inbound.split();
            let (mut out_read, mut out_write) = outbound.split();
            tokio::select! {
                _ = pipe(&mut in_read, &mut out_write, delay) => {}
                _ = pipe(&mut out_read, &mut in_write, delay) => {}
                _ = modes.changed() => {}
            }
        }
    }
}

async fn pipe<R, W>(from: &mut R, to: &mut W, delay: Duration)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
