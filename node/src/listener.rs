//! Bounded connections: how the node's two listeners (REST API and Raft RPC) accept, time and
//! cap the connections they serve.
//!
//! Every connection is bounded in time and in number:
//!
//! * **Header read / idle**: hyper's HTTP/1 header-read timer runs from the moment a
//!   connection opens, and again from the end of each response, until a complete request head
//!   has arrived. A client that sends half a request, or keeps a connection open without a
//!   request, is disconnected after [`ListenerLimits::header_read_timeout`]; the same timer is
//!   therefore the keep-alive idle timeout.
//! * **Request**: a request must be answered within [`ListenerLimits::request_timeout`]
//!   (`408` otherwise; tower-http's `Timeout`). On the API this is above the longest long poll
//!   plus the forward deadline, checked when the cluster file is read, so it never cuts a
//!   legitimate `?wait`.
//! * **Body**: a request body that delivers nothing for [`ListenerLimits::body_timeout`] fails
//!   (tower-http's `RequestBodyTimeout`); a body that trickles is cut by the request timeout.
//! * **Write**: a write the client does not take for [`ListenerLimits::write_timeout`] closes
//!   the connection (`tokio-io-timeout`). The request timeout ends when a response starts, so
//!   without it a client that stops reading a streamed response (an unpaged list, an event
//!   stream) would hold it, and what it holds, for as long as it kept the socket open.
//! * **Count**: at most [`ListenerLimits::max_connections`] connections per listener and
//!   [`ListenerLimits::max_connections_per_address`] per client address (an IPv4 address, or
//!   an IPv6 /64). A connection over a cap is closed at once, before any byte is read, and
//!   counted in [`CONNECTIONS_REFUSED`]. A full API listener first makes room by closing its
//!   oldest connection that has proven nothing ([`Standing`]: no request with a valid token,
//!   no pop of a queue that exists), counted in [`CONNECTIONS_EVICTED`]: strangers without a
//!   token cannot keep the clients that have one out.
//!
//! The Raft listener keeps [`ListenerLimits::reserved_for_members`] of its connections for the
//! cluster's own addresses (the IPs of every `[[node]]` of the cluster file), so a node whose
//! Raft port is flooded still takes its peers' connections. The reserve is keyed by source IP
//! because that is all a listener knows before it reads a byte (the cluster secret arrives with
//! the first request, after the connection has been taken). Member addresses are exempt from
//! the per-address cap, because on one host every peer shares one IP; strangers are held to
//! the per-address cap and to what the reserve leaves. The reserve cannot tell a stranger on a
//! member's own IP (another process on a node's host, or anything on 127.0.0.1 in a one-host
//! cluster) from a peer: that is the limit of keying by address, and why the tests flood from
//! other loopback addresses (127.0.0.2 and up).
//!
//! Only HTTP/1.1 is served: tickd's peers and Ticktok clients speak it, and HTTP/2 with prior
//! knowledge would bypass the header-read timer.
//!
//! **TLS** ([`Security::Tls`]): the handshake runs in the connection's own task, so a slow one
//! never holds up the accept loop, and it must finish within the header-read timeout, so a
//! connection that never completes it is closed like one that never sends a request. On the
//! Raft listener a completed handshake is not enough: the peer's certificate must name a
//! current member ([`crate::tls::identify`]), and each request of the connection carries that
//! member as a [`VerifiedPeer`] for the Raft router. A refused handshake or identity is closed
//! at once, counted in [`TLS_REFUSED`] by reason, and logged at most once per 10 s per
//! listener (with the number held back), since anyone can provoke it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::http::StatusCode;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use metrics::{Gauge, counter, describe_counter, describe_gauge, gauge};
use tickd_api::log_limit::{LOG_EVERY, LogLimit};
use tickd_api::standing::Standing;
use tickd_raft::peer_auth::VerifiedPeer;
use tickd_raft::{NodeAddr, NodeId};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio_io_timeout::TimeoutStream;
use tower::ServiceExt as _;
use tower_http::timeout::{RequestBodyTimeout, Timeout};

use crate::tls;

/// Connections closed at accept because a cap was reached, by listener and reason.
pub const CONNECTIONS_REFUSED: &str = "tickd_connections_refused_total";
/// API connections closed to make room for a new one, because the listener was full and
/// they had proven nothing (no valid token, no pop of a queue that exists).
pub const CONNECTIONS_EVICTED: &str = "tickd_connections_evicted_total";
/// Connections a listener holds open, by listener.
pub const CONNECTIONS_OPEN: &str = "tickd_connections_open";
/// Connections closed because their TLS handshake failed or their certificate named no
/// member, by listener and reason.
pub const TLS_REFUSED: &str = "tickd_tls_refused_total";

/// Default wait for a complete request head, which is also the keep-alive idle timeout.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound on answering one request. Above the API's longest long poll (30 s) plus the
/// default forward deadline (5 s), with room for the linearization around them.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Default longest pause between two pieces of a request body.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Default longest wait for the client to take a write of the response: a client that reads
/// nothing for this long is gone or hostile.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap on the API listener's connections.
pub const DEFAULT_API_MAX_CONNECTIONS: usize = 512;
/// Default cap on one client address's connections to the API listener.
pub const DEFAULT_API_MAX_CONNECTIONS_PER_ADDRESS: usize = 128;
/// Default cap on the Raft listener's connections.
pub const DEFAULT_RAFT_MAX_CONNECTIONS: usize = 256;
/// Default cap on the Raft listener's connections from one address that is not a member's.
pub const DEFAULT_RAFT_MAX_CONNECTIONS_PER_ADDRESS: usize = 16;
/// Default slice of the Raft listener's cap that only the members' addresses may take.
pub const DEFAULT_RAFT_RESERVED_FOR_MEMBERS: usize = 64;

/// Pause after a failed `accept` (out of descriptors, say) before the next one, so that a full
/// descriptor table does not turn the accept loop into a busy loop.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The limits of one listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerLimits {
    /// How long a connection may take to deliver a complete request head, counted from its
    /// opening or from the end of the previous response (so also the idle timeout).
    pub header_read_timeout: Duration,
    /// How long one request may take to be answered.
    pub request_timeout: Duration,
    /// The longest pause between two pieces of a request body.
    pub body_timeout: Duration,
    /// The longest a write of the response may wait for the client to read.
    pub write_timeout: Duration,
    /// The most connections the listener holds at once.
    pub max_connections: usize,
    /// The most connections one client IP address may hold (member addresses excepted).
    pub max_connections_per_address: usize,
    /// How many of `max_connections` only the member addresses may take.
    pub reserved_for_members: usize,
    /// The member addresses: the IPs of the cluster file's nodes (empty on the API listener).
    pub members: HashSet<IpAddr>,
}

/// The members a peer's certificate may name right now (the current membership, or the
/// cluster file's nodes before this node belongs to one).
pub type Members = Arc<dyn Fn() -> BTreeMap<NodeId, NodeAddr> + Send + Sync>;

/// How a listener's connections are secured.
#[derive(Clone)]
pub enum Security {
    /// Plain HTTP.
    Plain,
    /// TLS with this configuration. With `members` (the Raft listener), the peer's certificate
    /// must name one of them.
    Tls {
        /// The server configuration (certificate, key, client-certificate policy).
        config: Arc<rustls::ServerConfig>,
        /// Who may connect, when the listener checks identities.
        members: Option<Members>,
    },
}

/// Which of the node's listeners, as the metrics label it.
#[derive(Debug, Clone, Copy)]
pub enum Listener {
    /// The REST API.
    Api,
    /// The Raft RPCs and internal routes.
    Raft,
}

impl Listener {
    fn label(self) -> &'static str {
        match self {
            Listener::Api => "api",
            Listener::Raft => "raft",
        }
    }
}

/// Registers the help text of the listeners' metrics.
pub fn describe() {
    describe_counter!(
        CONNECTIONS_REFUSED,
        "Connections closed at accept because the listener (reason=listener) or the client \
         address (reason=address) was at its cap, by listener (api, raft)"
    );
    describe_counter!(
        CONNECTIONS_EVICTED,
        "API connections closed to make room for a new one: the listener was full and they \
         had proven nothing (no request with a valid token, no pop of a queue that exists)"
    );
    describe_gauge!(
        CONNECTIONS_OPEN,
        "Connections the listener holds open, by listener (api, raft)"
    );
    describe_counter!(
        TLS_REFUSED,
        "Connections closed because the TLS handshake failed (reason=untrusted, expired, \
         not_yet_valid, bad_certificate, no_certificate, handshake, timeout) or the peer's \
         certificate named no current member (reason=no_node_id, not_a_member, wrong_host), \
         by listener (api, raft)"
    );
}

/// Serves `router` on `listener` within `limits` until `stopped` turns true, then stops
/// accepting and lets the open connections finish their requests.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    which: Listener,
    security: Security,
    limits: ListenerLimits,
    mut stopped: watch::Receiver<bool>,
) -> std::io::Result<()> {
    describe();
    let label = which.label();
    counter!(CONNECTIONS_REFUSED, "listener" => label, "reason" => "listener").increment(0);
    counter!(CONNECTIONS_REFUSED, "listener" => label, "reason" => "address").increment(0);
    counter!(CONNECTIONS_EVICTED).increment(0);
    let open = gauge!(CONNECTIONS_OPEN, "listener" => label);
    open.set(0.0);
    let service = Timeout::with_status_code(
        RequestBodyTimeout::new(router, limits.body_timeout),
        StatusCode::REQUEST_TIMEOUT,
        limits.request_timeout,
    );
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let handshake_timeout = limits.header_read_timeout;
    let write_timeout = limits.write_timeout;
    let admission = Arc::new(Admission::new(limits));
    let refusals = Arc::new(LogLimit::new(LOG_EVERY));
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.wait_for(|stop| *stop) => break,
        };
        // Test builds only (the `fail` crate's `failpoints` feature): a listener that quits.
        fail::fail_point!("api-listener", matches!(which, Listener::Api), |_| Ok(()));
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, listener = label, "cannot accept a connection");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        // API connections may be closed to make room, until one of their requests proves them.
        let standing = matches!(which, Listener::Api).then(Standing::default);
        let slot = match admission.admit(peer.ip(), standing.clone()) {
            Ok(slot) => slot,
            Err(refusal) => {
                // Dropping the stream closes it before a byte is read.
                counter!(CONNECTIONS_REFUSED, "listener" => label, "reason" => refusal.label())
                    .increment(1);
                tracing::debug!(%peer, listener = label, reason = refusal.label(),
                    "connection refused: at the connection cap");
                continue;
            }
        };
        // Without TCP_NODELAY, a response written in two segments waits for the client's
        // delayed ACK: 40 ms added to every Raft RPC and every API call.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on an accepted connection");
        }
        let connection = Connection {
            http: http.clone(),
            service: service.clone(),
            watcher: graceful.watcher(),
            peer,
            open: open.clone(),
            write_timeout,
            standing,
            evicted: slot.evicted(),
        };
        let security = security.clone();
        let refusals = Arc::clone(&refusals);
        tokio::spawn(async move {
            let Security::Tls { config, members } = security else {
                connection.serve(stream, None).await;
                drop(slot);
                return;
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            let refuse = |reason: &'static str, why: String| {
                counter!(TLS_REFUSED, "listener" => label, "reason" => reason).increment(1);
                if let Some(held_back) = refusals.admit() {
                    tracing::warn!(%peer, listener = label, reason, held_back,
                        "TLS connection refused: {why}");
                }
            };
            let stream =
                match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => return refuse(handshake_refusal(&error), error.to_string()),
                    Err(_) => {
                        return refuse(
                            "timeout",
                            format!("no TLS handshake within {handshake_timeout:?}"),
                        );
                    }
                };
            let verified = match members {
                None => None,
                Some(members) => {
                    match tls::identify(stream.get_ref().1.peer_certificates(), &members()) {
                        Ok(id) => Some(VerifiedPeer(id)),
                        Err(refusal) => return refuse(refusal.label(), refusal.to_string()),
                    }
                }
            };
            connection.serve(stream, verified).await;
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// The service of one listener: the router within its request and body timeouts.
type TimedRouter = Timeout<RequestBodyTimeout<axum::Router>>;

/// What serving one accepted connection takes.
struct Connection {
    http: hyper::server::conn::http1::Builder,
    service: TimedRouter,
    watcher: Watcher,
    peer: SocketAddr,
    open: Gauge,
    write_timeout: Duration,
    /// On the API listener, whether a request has proven the connection; each request
    /// carries it for the API to set.
    standing: Option<Standing>,
    /// Told when a full listener closes this connection to make room for a new one.
    evicted: Arc<Notify>,
}

impl Connection {
    /// Serves HTTP/1.1 on `stream` until the client closes it, a timer closes it, or the node
    /// shuts down. Every request carries the client's address (axum's [`ConnectInfo`]) and,
    /// on a verified Raft connection, the member it came from.
    async fn serve<S>(self, stream: S, verified: Option<VerifiedPeer>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Self {
            http,
            service,
            watcher,
            peer,
            open,
            write_timeout,
            standing,
            evicted,
        } = self;
        let service = service.map_request(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            if let Some(standing) = &standing {
                request.extensions_mut().insert(standing.clone());
            }
            if let Some(verified) = verified {
                request.extensions_mut().insert(verified);
            }
            request
        });
        let mut stream = TimeoutStream::new(stream);
        stream.set_write_timeout(Some(write_timeout));
        let connection = http.serve_connection(
            TokioIo::new(Box::pin(stream)),
            TowerToHyperService::new(service),
        );
        open.increment(1.0);
        tokio::select! {
            served = watcher.watch(connection) => if let Err(error) = served {
                tracing::debug!(%error, %peer, "connection closed with an error");
            },
            () = evicted.notified() => {
                tracing::debug!(%peer, "connection closed to make room: it had proven nothing");
            }
        }
        open.decrement(1.0);
    }
}

/// The metric reason of a failed TLS handshake.
fn handshake_refusal(error: &std::io::Error) -> &'static str {
    use rustls::CertificateError as Certificate;
    let rustls_error = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match rustls_error {
        Some(rustls::Error::InvalidCertificate(problem)) => match problem {
            Certificate::Expired | Certificate::ExpiredContext { .. } => "expired",
            Certificate::NotValidYet | Certificate::NotValidYetContext { .. } => "not_yet_valid",
            Certificate::UnknownIssuer | Certificate::BadSignature => "untrusted",
            _ => "bad_certificate",
        },
        Some(rustls::Error::NoCertificatesPresented) => "no_certificate",
        _ => "handshake",
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The listener is at its cap (for a stranger: at its cap less the members' reserve).
    ListenerFull,
    /// The client address is at its per-address cap.
    AddressFull,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::ListenerFull => "listener",
            Refusal::AddressFull => "address",
        }
    }
}

/// The connection counts of one listener.
#[derive(Debug)]
struct Admission {
    limits: ListenerLimits,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    /// By [`address_key`].
    per_address: HashMap<IpAddr, usize>,
    /// The API's connections in the order they were admitted: a full listener closes the
    /// oldest that has proven nothing.
    evictable: BTreeMap<u64, Evictable>,
    next_sequence: u64,
}

/// An API connection that a full listener may close.
#[derive(Debug)]
struct Evictable {
    standing: Standing,
    key: IpAddr,
    release: Release,
}

/// How a slot's place is given back exactly once: by its connection's end, or by the
/// eviction that closes it.
#[derive(Debug, Clone, Default)]
struct Release {
    done: Arc<AtomicBool>,
    evicted: Arc<Notify>,
}

/// Whom a connection counts against: its IPv4 address, or its IPv6 address's /64, which one
/// host usually holds whole (as the API's per-address rate limit keys it). Without the mask a
/// host with a /64 had 2^64 addresses' worth of connections.
fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

impl Admission {
    fn new(limits: ListenerLimits) -> Self {
        Self {
            limits,
            counts: Mutex::new(Counts::default()),
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        // The counts stay consistent under a panic (each update is one statement).
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a slot for a connection from `ip`, or says which cap refuses it. A connection
    /// with a `standing` (the API's) may be closed later to make room, and may itself make
    /// room by closing the oldest such connection that has proven nothing.
    fn admit(self: &Arc<Self>, ip: IpAddr, standing: Option<Standing>) -> Result<Slot, Refusal> {
        let ip = ip.to_canonical();
        let key = address_key(ip);
        let limits = &self.limits;
        let member = limits.members.contains(&ip);
        let mut counts = self.counts();
        let from_address = counts.per_address.get(&key).copied().unwrap_or(0);
        if !member && from_address >= limits.max_connections_per_address {
            return Err(Refusal::AddressFull);
        }
        let cap = if member {
            limits.max_connections
        } else {
            limits
                .max_connections
                .saturating_sub(limits.reserved_for_members)
        };
        if counts.total >= cap && !(standing.is_some() && counts.evict_oldest_unproven()) {
            return Err(Refusal::ListenerFull);
        }
        counts.total += 1;
        *counts.per_address.entry(key).or_insert(0) += 1;
        let release = Release::default();
        let sequence = standing.map(|standing| {
            let sequence = counts.next_sequence;
            counts.next_sequence += 1;
            counts.evictable.insert(
                sequence,
                Evictable {
                    standing,
                    key,
                    release: release.clone(),
                },
            );
            sequence
        });
        Ok(Slot {
            admission: Arc::clone(self),
            key,
            sequence,
            release,
        })
    }
}

impl Counts {
    /// Closes the oldest connection that has proven nothing, giving its place back now;
    /// `false` when every one has proven itself.
    fn evict_oldest_unproven(&mut self) -> bool {
        let Some(sequence) = self
            .evictable
            .iter()
            .find(|(_, connection)| !connection.standing.is_proven())
            .map(|(sequence, _)| *sequence)
        else {
            return false;
        };
        let Some(victim) = self.evictable.remove(&sequence) else {
            return false;
        };
        self.give_back(victim.key);
        victim.release.done.store(true, Ordering::Relaxed);
        victim.release.evicted.notify_one();
        counter!(CONNECTIONS_EVICTED).increment(1);
        true
    }

    fn give_back(&mut self, key: IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(count) = self.per_address.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_address.remove(&key);
            }
        }
    }
}

/// One admitted connection's place in the counts, given back when dropped (unless an eviction
/// gave it back already).
#[derive(Debug)]
struct Slot {
    admission: Arc<Admission>,
    key: IpAddr,
    /// Its place among the evictable connections, if it is one.
    sequence: Option<u64>,
    release: Release,
}

impl Slot {
    /// Told when the listener closes this connection to make room.
    fn evicted(&self) -> Arc<Notify> {
        Arc::clone(&self.release.evicted)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.admission.counts();
        if let Some(sequence) = self.sequence {
            counts.evictable.remove(&sequence);
        }
        if !self.release.done.swap(true, Ordering::Relaxed) {
            counts.give_back(self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_address: usize, reserved: usize) -> ListenerLimits {
        ListenerLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            max_connections: max,
            max_connections_per_address: per_address,
            reserved_for_members: reserved,
            members: HashSet::from([IpAddr::from([10, 0, 0, 1])]),
        }
    }

    const MEMBER: [u8; 4] = [10, 0, 0, 1];

    #[test]
    fn a_stranger_is_held_to_its_address_cap_and_leaves_the_reserve() {
        // 12 connections, 4 of them reserved: strangers share 8, at most 3 per address.
        let admission = Arc::new(Admission::new(limits(12, 3, 4)));
        let mut slots = Vec::new();
        for host in 2..=3u8 {
            for _ in 0..3 {
                slots.push(
                    admission
                        .admit([10, 0, 0, host].into(), None)
                        .expect("under the caps"),
                );
            }
            assert_eq!(
                admission.admit([10, 0, 0, host].into(), None).err(),
                Some(Refusal::AddressFull)
            );
        }
        for _ in 0..2 {
            slots.push(
                admission
                    .admit([10, 0, 0, 9].into(), None)
                    .expect("under the caps"),
            );
        }
        // 8 of 12 taken: the next stranger is refused, members are not.
        assert_eq!(
            admission.admit([10, 0, 0, 10].into(), None).err(),
            Some(Refusal::ListenerFull)
        );
        for _ in 0..4 {
            slots.push(admission.admit(MEMBER.into(), None).expect("the reserve"));
        }
        assert_eq!(
            admission.admit(MEMBER.into(), None).err(),
            Some(Refusal::ListenerFull)
        );
        // Closing connections gives their slots back.
        slots.clear();
        assert!(admission.admit([10, 0, 0, 9].into(), None).is_ok());
    }

    /// The hostile probe's N2: a full API listener closes its oldest connection that proved
    /// nothing to admit a new one, and never one that proved itself.
    #[test]
    fn a_full_api_listener_makes_room_by_closing_the_oldest_unproven_connection() {
        let admission = Arc::new(Admission::new(limits(3, 3, 0)));
        let flood: Vec<(Standing, Slot)> = (0..2)
            .map(|_| {
                let standing = Standing::default();
                let slot = admission
                    .admit([10, 0, 0, 2].into(), Some(standing.clone()))
                    .expect("under the cap");
                (standing, slot)
            })
            .collect();
        let client = Standing::default();
        let _client_slot = admission
            .admit([10, 0, 0, 3].into(), Some(client.clone()))
            .expect("the last place");
        client.prove();
        // Full: a newcomer closes the oldest unproven connection, the flood's first.
        let newcomer = Standing::default();
        let _newcomer_slot = admission
            .admit([10, 0, 0, 4].into(), Some(newcomer.clone()))
            .expect("room made");
        let first_closed = flood[0].1.release.done.load(Ordering::Relaxed);
        assert!(first_closed, "the oldest unproven connection was closed");
        assert!(!flood[1].1.release.done.load(Ordering::Relaxed));
        newcomer.prove();
        flood[1].0.prove();
        // Everyone left has proven itself: nothing is closed for a stranger.
        assert_eq!(
            admission
                .admit([10, 0, 0, 5].into(), Some(Standing::default()))
                .err(),
            Some(Refusal::ListenerFull)
        );
        // The closed connection's end does not give its place back a second time.
        drop(flood);
        assert_eq!(admission.counts().total, 2);
    }

    #[test]
    fn an_ipv6_host_counts_by_its_slash_64() {
        let admission = Arc::new(Admission::new(limits(10, 2, 0)));
        let one: IpAddr = "2001:db8:1:2::1".parse().expect("an address");
        let other: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("an address");
        let elsewhere: IpAddr = "2001:db8:1:3::1".parse().expect("an address");
        let _first = admission.admit(one, None).expect("first");
        let _second = admission.admit(other, None).expect("second");
        assert_eq!(admission.admit(one, None).err(), Some(Refusal::AddressFull));
        assert!(admission.admit(elsewhere, None).is_ok());
    }

    #[test]
    fn an_ipv4_mapped_address_counts_as_its_ipv4_address() {
        let admission = Arc::new(Admission::new(limits(10, 1, 0)));
        let _held = admission.admit([10, 0, 0, 7].into(), None).expect("first");
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().expect("an address");
        assert_eq!(
            admission.admit(mapped, None).err(),
            Some(Refusal::AddressFull)
        );
    }
}
