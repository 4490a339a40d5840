//! The client side of node-to-node traffic: Raft RPCs and the internal routes.
//!
//! One [`PeerTransport`] per process holds the pooled `reqwest::Client`s; openraft's
//! per-peer [`PeerConnection`]s and the [`Replica`](crate::Replica)'s forwarding share them,
//! so connections to a peer are reused by every kind of traffic.
//!
//! Under mutual TLS ([`PeerSecurity::MutualTls`]) every call is HTTPS, through a client of the
//! peer's own: it trusts only the cluster's CA, checks that the peer's certificate is valid
//! for the host it dials (rustls' standard server-name check against the member's advertised
//! Raft address) and names the node it dials ([`PeerTls`]), and presents this node's own
//! certificate; the cluster secret is then never sent. Over plain HTTP every call
//! but the membership challenge carries the secret in a header.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use tokio::time::Instant;

use crate::append_flight::{AppendAnswer, AppendFlight, AppendRange, Boarding, flight_deadline};
use crate::proof::{Challenge, PROOF_PATH, Proof};
use crate::secret::{ClusterSecret, SECRET_HEADER};
use crate::{NodeAddr, NodeId, TypeConfig, telemetry};

/// Path of the append-entries RPC.
pub const APPEND_PATH: &str = "/raft/append";
/// Path of the vote RPC.
pub const VOTE_PATH: &str = "/raft/vote";
/// Path of the install-snapshot RPC (one chunk per request).
pub const SNAPSHOT_PATH: &str = "/raft/snapshot";
/// Path on which the leader accepts commands forwarded by followers.
pub const WRITE_PATH: &str = "/internal/write";
/// Path on which the leader hands out read indexes to followers.
pub const READ_INDEX_PATH: &str = "/internal/read-index";
/// Path on which the leader accepts membership changes forwarded by followers.
pub const MEMBERSHIP_PATH: &str = "/internal/membership";
/// Path on which every node describes itself.
pub const STATUS_PATH: &str = "/internal/status";
/// Path on which every node says how long it has not heard a leader: the pre-vote of an
/// early campaign ([`crate::leader_loss`]).
pub const LEADER_SILENCE_PATH: &str = "/internal/leader-silence";

/// The largest answer read from a peer. An answer is at most as large as what one node
/// legitimately sends another (a forwarded pop's ticks, a status), which is what a peer's
/// request may carry ([`crate::rpc::MAX_RPC_BODY_BYTES`]); an answer past it is cut off and
/// the call fails with [`TransportError::TooLarge`], so a hostile or broken listener at a
/// peer's address cannot make this node allocate without bound.
pub const MAX_ANSWER_BYTES: usize = crate::rpc::MAX_RPC_BODY_BYTES;

/// The largest refusal message read from a peer; the rest of a longer one is dropped.
const MAX_REFUSAL_BYTES: usize = 64 * 1024;

/// How long a new connection to a peer may take before the peer counts as unreachable. Peers
/// are on a local network; a slower connect means the peer is down or stopped.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Why a call to a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// No connection could be made: the peer is down or cut off. Callers back off.
    #[error("peer {addr} is unreachable: {source}")]
    Unreachable {
        /// The peer's address.
        addr: String,
        /// What the HTTP client reported.
        source: reqwest::Error,
    },
    /// The peer took the request but did not answer within the call's deadline: it is busy,
    /// stopped, or the link dropped the answer. Unlike [`Self::Unreachable`], this is no
    /// reason to back off: a loaded follower that misses one 100 ms append deadline should get
    /// the next append at once, not half a second later.
    #[error("peer {addr} did not answer in time: {source}")]
    Slow {
        /// The peer's address.
        addr: String,
        /// What the HTTP client reported.
        source: reqwest::Error,
    },
    /// The peer answered with an HTTP error: a wrong cluster secret or a request it could not
    /// parse. Both mean misconfiguration or version skew, not a transient fault.
    #[error("peer {addr} refused the request with HTTP {status}: {message}")]
    Refused {
        /// The peer's address.
        addr: String,
        /// The HTTP status.
        status: u16,
        /// The body of the refusal.
        message: String,
    },
    /// The request could not be encoded as JSON: a bug, not a fault of the peer.
    #[error("a request to peer {addr} could not be encoded: {source}")]
    Unencodable {
        /// The peer's address.
        addr: String,
        /// The encoding error.
        source: serde_json::Error,
    },
    /// The peer answered 200 with a body that does not decode.
    #[error("peer {addr} sent an answer that does not decode: {source}")]
    Garbled {
        /// The peer's address.
        addr: String,
        /// The decoding error.
        source: serde_json::Error,
    },
    /// No HTTP client could be made for the peer: reqwest refused this node's TLS settings
    /// for it. A fault of this node's configuration, not of the peer.
    #[error("no HTTP client could be made to call peer {addr}: {source}")]
    NoClient {
        /// The peer's address.
        addr: String,
        /// What the HTTP client reported.
        source: reqwest::Error,
    },
    /// The peer's answer was larger than [`MAX_ANSWER_BYTES`]: no tickd node sends that, so
    /// the address is not (or no longer) a working peer. Reading stopped at the limit.
    #[error("peer {addr} sent an answer larger than {limit} bytes; reading stopped there")]
    TooLarge {
        /// The peer's address.
        addr: String,
        /// The limit that was exceeded.
        limit: usize,
    },
}

impl TransportError {
    /// What went wrong, in words that hold nothing the peer sent (no body, no message of its):
    /// safe to hand back to whoever asked for the call, when the peer is any address an
    /// operator typed (adding a node). The whole error goes to this node's log.
    pub fn summary(&self) -> String {
        match self {
            Self::Unreachable { source, .. } if source.is_connect() => {
                "no connection could be made".to_owned()
            }
            Self::Unreachable { .. } => "the connection failed".to_owned(),
            Self::Slow { .. } => "it did not answer in time".to_owned(),
            Self::Refused { status, .. } => format!("it answered HTTP {status}"),
            Self::Unencodable { .. } => "the request could not be encoded".to_owned(),
            Self::Garbled { .. } => "its answer is not a tickd node's".to_owned(),
            Self::TooLarge { limit, .. } => format!("its answer was larger than {limit} bytes"),
            Self::NoClient { .. } => "this node could not make a client to call it".to_owned(),
        }
    }
}

/// Reads `response`'s body a chunk at a time, and stops with `Ok(None)` as soon as it would
/// exceed `limit` bytes (at once when the announced length already does).
async fn read_limited(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<Option<Vec<u8>>, reqwest::Error> {
    if response
        .content_length()
        .is_some_and(|announced| announced > limit as u64)
    {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// How node-to-node calls are protected; see [`crate::peer_auth`] for the server side.
#[derive(Debug)]
pub enum PeerSecurity {
    /// Plain HTTP, each call carrying the cluster secret.
    Secret,
    /// HTTPS with a client configuration per peer: the cluster CA as the only root, this
    /// node's certificate as its client identity, and a check that the peer's certificate
    /// names the node dialled. No secret is sent.
    MutualTls(Arc<dyn PeerTls>),
}

/// The TLS configuration of calls to one peer. The node, which reads certificates, makes it;
/// this crate keeps one HTTP client per peer with its own configuration, because the check
/// that a certificate names the node dialled needs to know which node that is, and a TLS
/// handshake knows only the host. Several members may share a host (every one of them does
/// on a single machine), and each member's certificate is valid for it.
pub trait PeerTls: Send + Sync + std::fmt::Debug {
    /// The configuration of calls to node `peer`: it accepts only a certificate of the cluster
    /// that is valid for the host dialled and names `peer`.
    fn client_config(&self, peer: NodeId) -> rustls::ClientConfig;
}

/// The most peers a node keeps an HTTP client for under mutual TLS. A cluster has at most a
/// handful of members; ids beyond them come from add-node requests, which an operator sends.
/// Past the limit every client is dropped and rebuilt on its next call (a reconnect), so no
/// sequence of ids grows the map without bound.
const MAX_PEER_CLIENTS: usize = 64;

/// The HTTP clients of node-to-node calls.
#[derive(Clone, Debug)]
enum PeerClients {
    /// Plain HTTP: one pooled client for every peer.
    Shared(reqwest::Client),
    /// Mutual TLS: a pooled client per peer, made on its first call.
    PerPeer {
        tls: Arc<dyn PeerTls>,
        made: Arc<Mutex<BTreeMap<NodeId, reqwest::Client>>>,
    },
}

impl PeerClients {
    /// The settings every client to peers shares. No proxy is consulted: node-to-node traffic
    /// must never be diverted by an `HTTP_PROXY` variable meant for something else.
    fn builder() -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
    }

    /// The client for calls to `peer`.
    fn client(&self, peer: NodeId) -> Result<reqwest::Client, reqwest::Error> {
        let (tls, made) = match self {
            PeerClients::Shared(client) => return Ok(client.clone()),
            PeerClients::PerPeer { tls, made } => (tls, made),
        };
        let mut made = made.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = made.get(&peer) {
            return Ok(client.clone());
        }
        let client = Self::builder()
            .tls_backend_preconfigured(tls.client_config(peer))
            .https_only(true)
            .build()?;
        if made.len() >= MAX_PEER_CLIENTS {
            made.clear();
        }
        made.insert(peer, client.clone());
        Ok(client)
    }
}

/// `body` as JSON, for a request to the peer at `addr`.
fn encode<Req: Serialize + ?Sized>(addr: &str, body: &Req) -> Result<Vec<u8>, TransportError> {
    serde_json::to_vec(body).map_err(|source| TransportError::Unencodable {
        addr: addr.to_string(),
        source,
    })
}

/// A TLS client configuration that trusts nothing, for an HTTP client that only ever speaks
/// plain HTTP: building it needs no root certificates from the system.
pub fn unused_tls() -> Result<rustls::ClientConfig, rustls::Error> {
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth())
}

/// Why the peers' HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientSetupError {
    /// reqwest refused the settings.
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    /// The TLS configuration could not be made.
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// The pooled HTTP clients for all node-to-node calls.
#[derive(Clone, Debug)]
pub struct PeerTransport {
    clients: PeerClients,
    secret: ClusterSecret,
    /// `https` under mutual TLS, `http` otherwise.
    scheme: &'static str,
    /// Whether calls carry the secret: only over plain HTTP.
    sends_secret: bool,
    dial: Arc<BTreeMap<NodeId, String>>,
}

impl PeerTransport {
    /// Builds the process-wide clients (one shared over plain HTTP, one per peer under TLS).
    ///
    /// `dial` overrides, per peer, the address this node connects to instead of the peer's
    /// advertised Raft address: for a peer reachable from here only through a NAT, a load
    /// balancer or a tunnel (the chaos tests put a fault-injecting proxy there).
    pub fn new(
        secret: ClusterSecret,
        dial: BTreeMap<NodeId, String>,
        security: PeerSecurity,
    ) -> Result<Self, ClientSetupError> {
        let (clients, scheme, sends_secret) = match security {
            // Plain HTTP: no TLS is ever spoken, so none is configured. reqwest's default would
            // load the system's roots, and a slim image without `ca-certificates` has none: the
            // node would not start for want of something it never uses.
            PeerSecurity::Secret => {
                let client = PeerClients::builder()
                    .tls_backend_preconfigured(unused_tls()?)
                    .build()?;
                (PeerClients::Shared(client), "http", true)
            }
            PeerSecurity::MutualTls(tls) => (
                PeerClients::PerPeer {
                    tls,
                    made: Arc::default(),
                },
                "https",
                false,
            ),
        };
        Ok(Self {
            clients,
            secret,
            scheme,
            sends_secret,
            dial: Arc::new(dial),
        })
    }

    fn url(&self, addr: &str, path: &str) -> String {
        format!("{}://{addr}{path}", self.scheme)
    }

    /// The address at which this node reaches peer `id`, advertised as `node`.
    pub fn address_of<'a>(&'a self, id: NodeId, node: &'a NodeAddr) -> &'a str {
        self.dial
            .get(&id)
            .map_or(node.raft.as_str(), String::as_str)
    }

    /// POSTs `body` as JSON to peer `id` at `addr` (`{addr}{path}`) and decodes the JSON
    /// answer.
    pub async fn post<Req, Resp>(
        &self,
        id: NodeId,
        addr: &str,
        path: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Resp, TransportError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        self.post_encoded(id, addr, path, encode(addr, body)?, timeout)
            .await
    }

    /// POSTs `body`, already encoded as JSON, to peer `id` at `addr` and decodes the JSON
    /// answer.
    pub async fn post_encoded<Resp>(
        &self,
        id: NodeId,
        addr: &str,
        path: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Resp, TransportError>
    where
        Resp: DeserializeOwned,
    {
        let request = self
            .client(id, addr)?
            .post(self.url(addr, path))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        self.send(addr, self.authenticated(request), timeout).await
    }

    /// GETs `{addr}{path}` of peer `id` and decodes the JSON answer.
    pub async fn get<Resp>(
        &self,
        id: NodeId,
        addr: &str,
        path: &str,
        timeout: Duration,
    ) -> Result<Resp, TransportError>
    where
        Resp: DeserializeOwned,
    {
        let request = self.client(id, addr)?.get(self.url(addr, path));
        self.send(addr, self.authenticated(request), timeout).await
    }

    /// Asks the node at `addr`, to be added as node `id`, to prove that it holds the cluster
    /// secret. The one request sent without the secret: the node has not yet shown it belongs
    /// (see [`crate::proof`]). Under mutual TLS the node has also shown a certificate of the
    /// cluster's CA for the host being added, naming node `id`, before the challenge is sent.
    pub async fn challenge(
        &self,
        id: NodeId,
        addr: &str,
        challenge: &Challenge,
        timeout: Duration,
    ) -> Result<Proof, TransportError> {
        let request = self
            .client(id, addr)?
            .post(self.url(addr, PROOF_PATH))
            .json(challenge);
        self.send(addr, request, timeout).await
    }

    /// The HTTP client for calls to peer `id` at `addr`.
    fn client(&self, id: NodeId, addr: &str) -> Result<reqwest::Client, TransportError> {
        self.clients
            .client(id)
            .map_err(|source| TransportError::NoClient {
                addr: addr.to_string(),
                source,
            })
    }

    /// The secret this node's requests carry, to check a peer's proof against.
    pub(crate) fn secret(&self) -> &ClusterSecret {
        &self.secret
    }

    fn authenticated(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if self.sends_secret {
            request.header(SECRET_HEADER, self.secret.expose())
        } else {
            request
        }
    }

    async fn send<Resp: DeserializeOwned>(
        &self,
        addr: &str,
        request: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<Resp, TransportError> {
        let unreachable = |source: reqwest::Error| {
            let addr = addr.to_string();
            if source.is_timeout() && !source.is_connect() {
                TransportError::Slow { addr, source }
            } else {
                TransportError::Unreachable { addr, source }
            }
        };
        let mut response = request.timeout(timeout).send().await.map_err(unreachable)?;
        let status = response.status();
        if !status.is_success() {
            // A refusal's message is for a log line: its first bytes are enough.
            let mut message = Vec::new();
            while let Ok(Some(chunk)) = response.chunk().await {
                let room = MAX_REFUSAL_BYTES - message.len();
                message.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if message.len() == MAX_REFUSAL_BYTES {
                    break;
                }
            }
            return Err(TransportError::Refused {
                addr: addr.to_string(),
                status: status.as_u16(),
                message: String::from_utf8_lossy(&message).into_owned(),
            });
        }
        let body = read_limited(&mut response, MAX_ANSWER_BYTES)
            .await
            .map_err(unreachable)?
            .ok_or_else(|| TransportError::TooLarge {
                addr: addr.to_string(),
                limit: MAX_ANSWER_BYTES,
            })?;
        serde_json::from_slice(&body).map_err(|source| TransportError::Garbled {
            addr: addr.to_string(),
            source,
        })
    }
}

/// openraft's factory of peer connections.
#[derive(Clone, Debug)]
pub struct PeerNetwork {
    transport: PeerTransport,
}

impl PeerNetwork {
    /// A network that sends every RPC through `transport`.
    pub fn new(transport: PeerTransport) -> Self {
        Self { transport }
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> PeerConnection {
        PeerConnection {
            peer: Peer {
                target,
                addr: self.transport.address_of(target, node).to_string(),
                transport: self.transport.clone(),
            },
            appends: AppendFlight::default(),
        }
    }
}

/// The RPC channel to one peer, for one replication stream (one leader term).
pub struct PeerConnection {
    peer: Peer,
    /// The append in flight to this peer, which may outlive openraft's deadline.
    appends: AppendFlight,
}

/// Whom a connection calls, and through what.
#[derive(Clone, Debug)]
struct Peer {
    target: NodeId,
    addr: String,
    transport: PeerTransport,
}

impl Peer {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        rpc: &Req,
        timeout: Duration,
    ) -> Result<Resp, RPCError<NodeId, NodeAddr, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let answer = self
            .transport
            .post(self.target, &self.addr, path, rpc, timeout)
            .await;
        self.judge(answer)
    }

    /// Turns a transport's answer into openraft's terms.
    #[allow(
        clippy::result_large_err,
        reason = "openraft's RPC error, as its network trait returns it"
    )]
    fn judge<Resp, E>(
        &self,
        answer: Result<Result<Resp, RaftError<NodeId, E>>, TransportError>,
    ) -> Result<Resp, RPCError<NodeId, NodeAddr, RaftError<NodeId, E>>>
    where
        E: std::error::Error,
    {
        let answer = answer.map_err(|error| match &error {
            // A dead or misconfigured peer: openraft should back off.
            TransportError::Unreachable { .. }
            | TransportError::Refused { .. }
            | TransportError::TooLarge { .. }
            | TransportError::NoClient { .. }
            | TransportError::Unencodable { .. } => RPCError::Unreachable(Unreachable::new(&error)),
            // A slow answer is retried with the next event, as openraft's own timeout is.
            TransportError::Slow { .. } | TransportError::Garbled { .. } => {
                RPCError::Network(NetworkError::new(&error))
            }
        })?;
        answer.map_err(|remote| RPCError::RemoteError(RemoteError::new(self.target, remote)))
    }

    /// Sends `rpc` in a task of its own, with a deadline of its encoded size and the
    /// follower's `typical` append time ([`flight_deadline`]).
    fn launch_append(
        &self,
        rpc: AppendEntriesRequest<TypeConfig>,
        typical: Duration,
    ) -> tokio::task::JoinHandle<AppendAnswer> {
        let peer = self.clone();
        tokio::spawn(async move {
            let body = match encode(&peer.addr, &rpc) {
                Ok(body) => body,
                Err(error) => return peer.judge(Err(error)),
            };
            telemetry::record_append_sent(peer.target, body.len());
            let deadline = flight_deadline(body.len(), typical);
            let answer = peer
                .transport
                .post_encoded(peer.target, &peer.addr, APPEND_PATH, body, deadline)
                .await;
            peer.judge(answer)
        })
    }

    /// Sends the follower an empty append from `prev`, answered or not within a heartbeat:
    /// it tells the follower that its leader lives while a flight is still on its way.
    fn keepalive(&self, heartbeat: AppendEntriesRequest<TypeConfig>) {
        let peer = self.clone();
        tokio::spawn(async move {
            let deadline = Duration::from_millis(crate::timing::HEARTBEAT_MS);
            let _: AppendAnswer = peer.call(APPEND_PATH, &heartbeat, deadline).await;
        });
    }
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        // A heartbeat is small and answered without a write: it goes straight out.
        if rpc.entries.is_empty() {
            return self.peer.call(APPEND_PATH, &rpc, option.hard_ttl()).await;
        }
        let asked = AppendRange::of(&rpc);
        match self.appends.prepare(&asked, Instant::now()) {
            Boarding::Start => {
                let task = self.peer.launch_append(rpc, self.appends.typical());
                self.appends.depart(asked.clone(), task, Instant::now());
            }
            Boarding::Join { keepalive } => {
                if keepalive {
                    self.peer.keepalive(AppendEntriesRequest {
                        vote: rpc.vote,
                        prev_log_id: rpc.prev_log_id,
                        leader_commit: rpc.leader_commit,
                        entries: Vec::new(),
                    });
                }
            }
        }
        let (answer, flown) = self.appends.land(&asked).await;
        if let Some((took, carried)) = flown {
            telemetry::record_append(self.peer.target, took, carried);
        }
        answer
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeAddr, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.peer.call(SNAPSHOT_PATH, &rpc, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        self.peer.call(VOTE_PATH, &rpc, option.hard_ttl()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain-HTTP transport, as a node without TLS builds it. reqwest needs a TLS provider
    /// for any client; the binary installs ring at start-up, and so do the tests.
    fn plain_transport() -> PeerTransport {
        let _ = rustls::crypto::ring::default_provider().install_default();
        PeerTransport::new(
            ClusterSecret::new("s3cret"),
            BTreeMap::new(),
            PeerSecurity::Secret,
        )
        .expect("an HTTP client")
    }

    fn connection_to(addr: String) -> PeerConnection {
        PeerConnection {
            peer: Peer {
                target: 2,
                addr,
                transport: plain_transport(),
            },
            appends: AppendFlight::default(),
        }
    }

    async fn vote_to(
        connection: &mut PeerConnection,
    ) -> RPCError<NodeId, NodeAddr, RaftError<NodeId>> {
        let request = VoteRequest::new(openraft::Vote::new(1, 1), None);
        let option = RPCOption::new(Duration::from_millis(200));
        connection
            .vote(request, option)
            .await
            .expect_err("nobody answers the vote")
    }

    /// A peer that takes the connection but does not answer in time is slow, not gone:
    /// openraft must retry at its next event rather than back off for half a second.
    #[tokio::test]
    async fn a_silent_peer_is_not_reported_unreachable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address").to_string();
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let error = vote_to(&mut connection_to(addr)).await;
        silent.abort();
        assert!(matches!(error, RPCError::Network(_)), "{error:?}");
    }

    /// An answer past [`MAX_ANSWER_BYTES`] is cut off with a clear error, whether its length
    /// is announced or it simply never ends.
    #[tokio::test]
    async fn an_oversized_answer_is_cut_off() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

        for announced in [true, false] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a loopback port");
            let addr = listener.local_addr().expect("its address").to_string();
            let flood = tokio::spawn(async move {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let head = if announced {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
                        MAX_ANSWER_BYTES + 1
                    )
                } else {
                    "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_string()
                };
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'['; 1 << 20];
                while stream.write_all(&chunk).await.is_ok() {}
            });
            let transport = plain_transport();
            let answer: Result<serde_json::Value, _> = transport
                .get(2, &addr, STATUS_PATH, Duration::from_secs(30))
                .await;
            flood.abort();
            assert!(
                matches!(answer, Err(TransportError::TooLarge { limit, .. }) if limit == MAX_ANSWER_BYTES),
                "announced={announced}: {answer:?}"
            );
        }
    }

    /// What a refusal says is not repeated by its summary: a peer's address may be anything an
    /// operator typed, and its body must not travel back to the caller (a fixed-path reader).
    #[tokio::test]
    async fn a_summary_holds_nothing_the_peer_sent() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address").to_string();
        let talker = tokio::spawn(async move {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            let body = "internal-admin-page: password=hunter2";
            let answer = format!(
                "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        });
        let answer: Result<serde_json::Value, _> = plain_transport()
            .get(2, &addr, STATUS_PATH, Duration::from_secs(5))
            .await;
        talker.abort();
        let error = answer.expect_err("a 500 is a refusal");
        assert!(
            error.to_string().contains("hunter2"),
            "the log keeps it: {error}"
        );
        assert_eq!(error.summary(), "it answered HTTP 500");
    }

    /// A refused connection means the peer is down: openraft backs off.
    #[tokio::test]
    async fn a_refused_connection_is_reported_unreachable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("its address").to_string();
        drop(listener);
        let error = vote_to(&mut connection_to(addr)).await;
        assert!(matches!(error, RPCError::Unreachable(_)), "{error:?}");
    }
}
