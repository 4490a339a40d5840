//! The listeners' limits from the file (timeouts and connection caps) and the quota of requests
//! without a token: each positive, and consistent with the others.

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

use tickd_api::strangers::StrangerQuota;

use super::{ClusterFile, Problem};
use crate::listener::{self, ListenerLimits};

/// The limits of a listener with the default timeouts.
pub(super) fn default_limits(
    max_connections: usize,
    max_connections_per_address: usize,
    reserved_for_members: usize,
    members: HashSet<IpAddr>,
) -> ListenerLimits {
    ListenerLimits {
        header_read_timeout: listener::DEFAULT_HEADER_READ_TIMEOUT,
        request_timeout: listener::DEFAULT_REQUEST_TIMEOUT,
        body_timeout: listener::DEFAULT_BODY_TIMEOUT,
        write_timeout: listener::DEFAULT_WRITE_TIMEOUT,
        max_connections,
        max_connections_per_address,
        reserved_for_members,
        members,
    }
}

/// The two listeners' limits from the file, checked: every timeout and cap positive, the
/// reserve below the Raft cap, and a request timeout that cannot cut a long poll.
pub(super) fn listener_limits(
    file: &ClusterFile,
    members: HashSet<IpAddr>,
    forward_deadline: Duration,
) -> Result<(ListenerLimits, ListenerLimits), Problem> {
    let timeout = |key: &str, value: Option<u64>, default: Duration| match value {
        Some(0) => Err(Problem::Invalid(format!(
            "`{key}` is 0; set a positive number of milliseconds or remove it (default {})",
            default.as_millis()
        ))),
        Some(ms) => Ok(Duration::from_millis(ms)),
        None => Ok(default),
    };
    let cap = |key: &str, value: Option<usize>, default: usize| match value {
        Some(0) => Err(Problem::Invalid(format!(
            "`{key}` is 0, which would refuse every connection; set a positive number or \
             remove it (default {default})"
        ))),
        Some(value) => Ok(value),
        None => Ok(default),
    };
    let header_read_timeout = timeout(
        "header_read_timeout_ms",
        file.header_read_timeout_ms,
        listener::DEFAULT_HEADER_READ_TIMEOUT,
    )?;
    let request_timeout = timeout(
        "request_timeout_ms",
        file.request_timeout_ms,
        listener::DEFAULT_REQUEST_TIMEOUT,
    )?;
    let body_timeout = timeout(
        "body_timeout_ms",
        file.body_timeout_ms,
        listener::DEFAULT_BODY_TIMEOUT,
    )?;
    let write_timeout = timeout(
        "write_timeout_ms",
        file.write_timeout_ms,
        listener::DEFAULT_WRITE_TIMEOUT,
    )?;
    // A long poll holds its request for up to the longest `?wait`, then forwards a pop to the
    // leader within the forward deadline: a shorter request timeout would cut it.
    let longest_poll =
        Duration::from_secs(tickd_api::routes::queues::MAX_WAIT_SECONDS) + forward_deadline;
    if request_timeout <= longest_poll {
        return Err(Problem::Invalid(format!(
            "`request_timeout_ms` = {} would cut long polls: set it above {} ({} s, the longest \
             `?wait`, plus `forward_deadline_ms`)",
            request_timeout.as_millis(),
            longest_poll.as_millis(),
            tickd_api::routes::queues::MAX_WAIT_SECONDS
        )));
    }
    let raft_max = cap(
        "raft_max_connections",
        file.raft_max_connections,
        listener::DEFAULT_RAFT_MAX_CONNECTIONS,
    )?;
    let reserved = file
        .raft_reserved_connections
        .unwrap_or(listener::DEFAULT_RAFT_RESERVED_FOR_MEMBERS.min(raft_max / 2));
    if reserved >= raft_max {
        return Err(Problem::Invalid(format!(
            "`raft_reserved_connections` = {reserved} leaves nothing of `raft_max_connections` \
             = {raft_max} to anyone else; set it below the cap"
        )));
    }
    let api = ListenerLimits {
        header_read_timeout,
        request_timeout,
        body_timeout,
        write_timeout,
        max_connections: cap(
            "api_max_connections",
            file.api_max_connections,
            listener::DEFAULT_API_MAX_CONNECTIONS,
        )?,
        max_connections_per_address: cap(
            "api_max_connections_per_address",
            file.api_max_connections_per_address,
            listener::DEFAULT_API_MAX_CONNECTIONS_PER_ADDRESS,
        )?,
        reserved_for_members: 0,
        members: HashSet::new(),
    };
    let raft = ListenerLimits {
        max_connections: raft_max,
        max_connections_per_address: cap(
            "raft_max_connections_per_address",
            file.raft_max_connections_per_address,
            listener::DEFAULT_RAFT_MAX_CONNECTIONS_PER_ADDRESS,
        )?,
        reserved_for_members: reserved,
        members,
        ..api.clone()
    };
    Ok((api, raft))
}

/// `unauthenticated_rate_per_second` and `unauthenticated_burst`: a burst below one request
/// would refuse every stranger, health checks included, so it is refused unless the rate is 0
/// (the limit off).
pub(super) fn stranger_quota(file: &ClusterFile) -> Result<StrangerQuota, Problem> {
    let defaults = StrangerQuota::default();
    let quota = StrangerQuota {
        rate_per_second: file
            .unauthenticated_rate_per_second
            .unwrap_or(defaults.rate_per_second),
        burst: file.unauthenticated_burst.unwrap_or(defaults.burst),
    };
    if quota.rate_per_second > 0 && quota.burst == 0 {
        return Err(Problem::Invalid(
            "`unauthenticated_burst` is 0, which would refuse every request without a token \
             (health checks too); set it to at least 1, or set \
             `unauthenticated_rate_per_second = 0` to turn the limit off"
                .into(),
        ));
    }
    Ok(quota)
}
