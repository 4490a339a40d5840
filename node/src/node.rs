//! Wiring one node: storage, Raft, network, API, and their shutdown.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use tickd_api::{AccessToken, ApiConfig, CheckSpace, PollTracker, QueueDeclarer};
use tickd_engine::{Broker, Publisher, Publishers, Webhooks};
use tickd_raft::cluster_clock::ClusterClock;
use tickd_raft::network::{PeerNetwork, PeerSecurity, PeerTransport};
use tickd_raft::peer_auth::PeerAuth;
use tickd_raft::secret::ClusterSecret;
use tickd_raft::{NodeAddr, NodeId, Raft, Replica};
use tickd_storage::DiskReserve;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::bootstrap;
use crate::broker::{self, BrokerConfigError};
use crate::config::NodeConfig;
use crate::credentials::{self, Role};
use crate::listener::{self, Listener, Members, Security};
use crate::supervisor::{STOP_GRACE, Supervisor, TaskFailure};
use crate::telemetry;
use crate::tls::{self, NodeTls, TlsError};

/// Why a node could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The data directory or a credential file could not be prepared.
    #[error("cannot prepare the data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Storage could not be opened.
    #[error(transparent)]
    Storage(#[from] tickd_storage::OpenError),
    /// The Raft configuration is invalid.
    #[error("invalid Raft configuration: {0}")]
    RaftConfig(#[from] Box<openraft::ConfigError>),
    /// openraft refused to start.
    #[error("cannot start Raft: {0}")]
    Raft(String),
    /// The TLS files could not be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The RabbitMQ settings cannot be used.
    #[error(transparent)]
    Broker(#[from] BrokerConfigError),
    /// The HTTP client for webhooks could not be built.
    #[error(transparent)]
    Webhooks(#[from] tickd_engine::webhook::ClientError),
    /// The HTTP client for peers could not be built.
    #[error("cannot build the HTTP client for peers: {0}")]
    Transport(#[from] tickd_raft::network::ClientSetupError),
    /// A listening address is taken or not local.
    #[error("cannot listen on {address} ({what}): {source}; is another tickd running there?")]
    Listen {
        /// Which listener.
        what: &'static str,
        /// The address.
        address: std::net::SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The access token and the operator token are the same: every client would be an operator.
    #[error(
        "the operator token is the same as the access token (check OPERATOR_TOKEN and \
         ACCESS_TOKEN): every client would be an operator; give the operator token a value of \
         its own"
    )]
    SameTokens,
    /// The metrics recorder could not be installed.
    #[error("cannot install the metrics recorder: {0}")]
    Metrics(#[from] metrics_exporter_prometheus::BuildError),
    /// openraft's core stopped on an error (a storage fault such as ENOSPC or EIO). It does not
    /// restart by itself; the node exits so that its supervisor restarts it.
    #[error(
        "the consensus core stopped: {0}; exiting so that a restart recovers from the durable \
         log (check the data directory's disk: space, permissions, I/O errors)"
    )]
    CoreFailed(String),
    /// A task of the node ended before the node was told to stop (see [`crate::supervisor`]).
    #[error(
        "{0}; exiting so that a restart brings the node back whole (the log above says what \
         led to it)"
    )]
    TaskFailed(TaskFailure),
    /// A server or signal handler failed.
    #[error("{what} failed: {source}")]
    Serve {
        /// What failed.
        what: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Runs the node until SIGTERM or SIGINT.
pub async fn run(config: NodeConfig) -> Result<(), NodeError> {
    // First, so that nothing recorded during start-up is lost.
    let metrics = telemetry::install()?;
    let rabbit_uri = std::env::var("RABBIT_URI")
        .ok()
        .filter(|uri| !uri.is_empty())
        .or(config.rabbit_uri.clone());
    let client_uri = broker::client_uri(
        rabbit_uri.as_deref(),
        config.rabbit_client_uri.clone(),
        config.api.ip().is_loopback(),
    )?;
    let broker_endpoint = broker::endpoint(rabbit_uri, config.rabbit_ca_file.as_deref())?;
    let webhooks = Webhooks::new(
        config.webhook.engine.clone(),
        tls::webhook_client_config(config.webhook.ca_file.as_deref())?,
        &format!("tickd-node-{}", config.id),
    )?;
    let data_dir = config.data_dir.clone();
    let data_dir_error = |source| NodeError::DataDir {
        path: data_dir.clone(),
        source,
    };
    tickd_storage::create_durable_dir(&data_dir).map_err(data_dir_error)?;
    let (token, origin) = credentials::token(
        Role::Client,
        std::env::var(Role::Client.variable()).ok(),
        config.token.clone(),
        &data_dir,
    )
    .map_err(data_dir_error)?;
    let operator_from_env = std::env::var(Role::Operator.variable()).ok();
    let operator = if config.listed.len() > 1 {
        credentials::shared_token(
            Role::Operator,
            operator_from_env,
            config.operator_token.clone(),
        )
    } else {
        let single = credentials::token(
            Role::Operator,
            operator_from_env,
            config.operator_token.clone(),
            &data_dir,
        );
        Some(single.map_err(data_dir_error)?)
    };
    let (operator_token, operator_origin) = match operator {
        Some((operator, _)) if operator == token => return Err(NodeError::SameTokens),
        Some((operator, origin)) => (AccessToken::new(operator), origin.to_string()),
        None => {
            // A cluster file of a release without operator tokens: the node runs, so that a
            // rolling upgrade needs no change to the file, and the operator's routes say
            // what is missing.
            tracing::warn!(
                "the cluster file sets no `operator_token`: membership changes, backup, \
                 restore and the metrics (unless `metrics_require_token = false`) are refused \
                 until every node's file sets the same one"
            );
            (
                AccessToken::unset(),
                "neither the environment nor the cluster file (none is set)".to_string(),
            )
        }
    };
    let secret =
        credentials::cluster_secret(config.secret.clone(), &data_dir).map_err(data_dir_error)?;

    let tls = config.tls.as_ref().map(tls::load).transpose()?;
    let (log_store, state_machine, state) = tickd_storage::open(&data_dir)?;
    let log_memory = log_store.memory();
    let raft_config = Arc::new(tickd_raft::timing::raft_config(config.snapshot_every)?);
    let peer_security = match &tls {
        Some(tls) => PeerSecurity::MutualTls(tls.peers.clone()),
        None => PeerSecurity::Secret,
    };
    let transport = PeerTransport::new(
        ClusterSecret::new(secret.clone()),
        config.dial.clone(),
        peer_security,
    )?;
    let raft = Raft::new(
        config.id,
        raft_config,
        PeerNetwork::new(transport.clone()),
        log_store,
        state_machine,
    )
    .await
    .map_err(|fatal| NodeError::Raft(fatal.to_string()))?;
    let clock = ClusterClock::new(config.max_clock_offset);
    let mut supervisor = Supervisor::default();
    let (replica, proposals) = Replica::new(
        config.id,
        raft.clone(),
        state,
        transport,
        config.forward_deadline,
        clock,
    );
    supervisor.spawn("write queue", proposals);

    let raft_listener = listen("Raft RPC", config.raft).await?;
    let api_listener = listen("REST API", config.api).await?;
    let (stop, stopped) = watch::channel(false);
    let (peer_auth, raft_security, api_security) = match &tls {
        Some(NodeTls {
            api,
            raft: raft_tls,
            ..
        }) => (
            PeerAuth::Certificate,
            Security::Tls {
                config: raft_tls.clone(),
                members: Some(members_now(raft.clone(), config.listed.clone())),
            },
            Security::Tls {
                config: api.clone(),
                members: None,
            },
        ),
        None => (
            PeerAuth::Secret(ClusterSecret::new(secret.clone())),
            Security::Plain,
            Security::Plain,
        ),
    };
    let raft_server = listener::serve(
        raft_listener,
        tickd_raft::rpc::router(
            &replica,
            peer_auth,
            ClusterSecret::new(secret),
            config.raft_address.clone(),
        ),
        Listener::Raft,
        raft_security,
        config.raft_limits.clone(),
        stopped.clone(),
    );
    let broker = broker_endpoint.map(|endpoint| {
        Broker::new(
            endpoint,
            config.engine.clock_ttl,
            format!("tickd-node-{}", config.id),
        )
    });
    let declarer = broker
        .clone()
        .map(|broker| Arc::new(RabbitQueues(broker)) as Arc<dyn QueueDeclarer>);
    let publishers = Publishers {
        rabbit: broker.map(|broker| Arc::new(broker) as Arc<dyn Publisher>),
        webhook: Arc::new(webhooks),
    };
    let api = ApiConfig {
        token: AccessToken::new(token),
        operator_token,
        public_url: config.public_url.clone(),
        api_address: config.api_address.clone(),
        link_hosts: config.link_hosts.clone(),
        tls: tls.is_some(),
        rabbit_uri: client_uri,
        webhook_allow_private: config.webhook.engine.allow_private,
        max_clocks: config.max_clocks,
        metrics_require_token: config.metrics_require_token,
        max_long_polls: config.max_long_polls,
        max_deliveries: config.max_deliveries,
        strangers: config.strangers,
        dashboard_dir: config.dashboard_dir.clone(),
    };
    let polls = PollTracker::default();
    let reserve = DiskReserve::new(data_dir.clone(), config.disk_reserve_bytes);
    let space = {
        let reserve = reserve.clone();
        Arc::new(move || reserve.check().map_err(|error| error.to_string())) as CheckSpace
    };
    let render = telemetry::renderer(metrics.clone(), replica.state().clone(), log_memory);
    let router = tickd_api::router(replica.clone(), api, declarer, polls.clone(), render, space);
    let api_server = listener::serve(
        api_listener,
        router,
        Listener::Api,
        api_security,
        config.api_limits.clone(),
        stopped.clone(),
    );
    supervisor.spawn(
        "poll reporter",
        tickd_api::polls::report(polls, replica.clone(), stopped.clone()),
    );
    supervisor.spawn(
        "raft telemetry",
        tickd_raft::telemetry::watch(raft.clone(), stopped.clone()),
    );
    supervisor.spawn(
        "snapshot pacer",
        tickd_raft::snapshot_pace::run(raft.clone(), config.snapshot_every, stopped.clone()),
    );
    supervisor.spawn(
        "clock monitor",
        tickd_raft::clock_monitor::run(replica.clone(), stopped.clone()),
    );
    supervisor.spawn(
        "leader watch",
        tickd_raft::leader_loss::run(replica.clone(), stopped.clone()),
    );
    supervisor.spawn(
        "progress monitor",
        tickd_raft::progress::run(replica.clone(), stopped.clone()),
    );
    supervisor.spawn(
        "level monitor",
        tickd_raft::level_monitor::run(replica.clone(), stopped.clone()),
    );
    supervisor.spawn(
        "node telemetry",
        telemetry::upkeep(metrics, reserve, stopped.clone()),
    );
    supervisor.spawn(
        "engine",
        tickd_engine::run(
            replica.clone(),
            Arc::new(publishers),
            config.engine.clone(),
            stopped,
        ),
    );
    supervisor.spawn("Raft listener", raft_server);
    supervisor.spawn("API listener", api_server);
    supervisor.spawn_once(
        "cluster formation",
        bootstrap::form_cluster(
            raft.clone(),
            replica.clone(),
            config.members.clone(),
            config.join,
        ),
    );

    tracing::info!(
        node = config.id,
        api = %config.api_address,
        raft = %config.raft_address,
        tls = tls.is_some(),
        data_dir = %data_dir.display(),
        token_from = %origin,
        operator_token_from = %operator_origin,
        "tickd is running; the API access token is in {origin}, the operator token in \
         {operator_origin}"
    );

    tokio::select! {
        signalled = wait_for_shutdown_signal() => signalled?,
        fatal = tickd_raft::failure::core_failed(&raft) => {
            // Health already answers DOWN (it reads the same state). Nothing is flushed or
            // drained: whatever was acknowledged is on disk, and a restart replays the log.
            tracing::error!(error = %fatal, "the consensus core stopped; exiting");
            return Err(NodeError::CoreFailed(fatal.to_string()));
        }
        failure = supervisor.failure() => {
            // The same crash-only exit: DOWN at once, then out, the restart recovering.
            replica.mark_failed(failure.to_string());
            tracing::error!(task = failure.task, "{failure}; exiting");
            return Err(NodeError::TaskFailed(failure));
        }
    }
    tracing::info!("shutting down");
    let _ = stop.send(true);
    if let Err(error) = raft.shutdown().await {
        tracing::warn!(%error, "Raft did not shut down cleanly");
    }
    drop(replica);
    supervisor.stop(STOP_GRACE).await;
    tracing::info!("stopped");
    Ok(())
}

async fn listen(
    what: &'static str,
    address: std::net::SocketAddr,
) -> Result<TcpListener, NodeError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| NodeError::Listen {
            what,
            address,
            source,
        })
}

/// Whom the Raft listener accepts under mutual TLS: the current membership (voters and
/// learners), or, while this node belongs to none yet (before the cluster forms, or while it
/// waits to be added), every node of its cluster file.
fn members_now(raft: Raft, listed: BTreeMap<NodeId, NodeAddr>) -> Members {
    Arc::new(move || {
        let metrics = raft.metrics();
        let current: BTreeMap<NodeId, NodeAddr> = metrics
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, node)| (*id, node.clone()))
            .collect();
        if current.is_empty() {
            listed.clone()
        } else {
            current
        }
    })
}

async fn wait_for_shutdown_signal() -> Result<(), NodeError> {
    let failed = |source| NodeError::Serve {
        what: "installing the signal handler",
        source,
    };
    let mut terminate = signal(SignalKind::terminate()).map_err(failed)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(failed)?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    Ok(())
}

/// The API's view of the broker: it only declares queues.
struct RabbitQueues(Broker);

impl QueueDeclarer for RabbitQueues {
    fn declare<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move { self.0.declare_queue(queue).await.map_err(|e| e.to_string()) })
    }
}
