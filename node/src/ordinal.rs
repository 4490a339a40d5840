//! A node's id from its host name, where a StatefulSet names the hosts.
//!
//! Kubernetes names the pods of a StatefulSet `<set>-0`, `<set>-1`, … and gives each pod its
//! name as its host name; tickd's node ids start at 1 (a cluster file's first node is node 1,
//! as Ticktok's deployments and tickd's own documentation number them). So the pod `tickd-2`
//! runs node 3. One rendered cluster file then serves every pod of the set, and no pod needs a
//! configuration of its own.

use tickd_raft::NodeId;

/// The node id of the host named `host`: its ordinal (the digits after its last `-`) plus one.
pub fn node_of_host(host: &str) -> Result<NodeId, String> {
    let ordinal = host
        .rsplit_once('-')
        .map(|(_, ordinal)| ordinal)
        .filter(|ordinal| !ordinal.is_empty() && ordinal.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            format!(
                "this host's name {host:?} does not end in -<ordinal> as the pods of a \
                 StatefulSet do (tickd-0 runs node 1); give the node's id with --node or \
                 TICKD_NODE"
            )
        })?;
    ordinal
        .parse::<NodeId>()
        .ok()
        .and_then(|ordinal| ordinal.checked_add(1))
        .ok_or_else(|| format!("the ordinal of the host name {host:?} is too large for a node id"))
}

/// This machine's host name, as the kernel holds it (in a container, the container's own).
pub fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ordinal_of_a_statefulset_pod_is_its_node_id_less_one() {
        assert_eq!(node_of_host("tickd-0"), Ok(1));
        assert_eq!(node_of_host("tickd-2"), Ok(3));
        assert_eq!(node_of_host("my-tickd-cluster-41"), Ok(42));
        assert_eq!(node_of_host("tickd-007"), Ok(8));
    }

    #[test]
    fn a_name_without_an_ordinal_is_refused_with_what_to_do() {
        for host in ["tickd", "tickd-", "tickd-a", "tickd-1a", "tickd-+1", ""] {
            let error = node_of_host(host).expect_err(host);
            assert!(error.contains("--node"), "{host}: {error}");
        }
        let error = node_of_host(&format!("tickd-{}", u64::MAX)).expect_err("too large");
        assert!(error.contains("too large"), "{error}");
    }
}
