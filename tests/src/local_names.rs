//! Name resolution kept on this machine for a test's nodes: a wrapper that starts `tickd` in a
//! mount namespace of its own where `/etc/hosts` is a file the test controls and
//! `/etc/resolv.conf` names only `127.0.0.1`, where no DNS server listens. A name the hosts file
//! does not hold then fails to resolve at once, and no query leaves the machine.
//!
//! A webhook URL with a host name is resolved by the node at registration and again at every
//! delivery: without this, a fuzzer's random names would be asked of the machine's resolver,
//! and one that resolved to a public address would get ticks.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::cluster::tickd_binary;

/// The resolver configuration of the wrapped nodes: a server on loopback that is not there.
const RESOLV_CONF: &str = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n";

/// A wrapper of the `tickd` binary and the hosts file its nodes resolve names through.
#[derive(Debug, Clone)]
pub struct LocalNames {
    /// The wrapper, for `TestCluster::builder().binary`.
    pub wrapper: PathBuf,
    /// The hosts file. It is bound, not copied: the test may rewrite it in place while the
    /// nodes run, and they see the new names.
    pub hosts: PathBuf,
}

/// Writes, in `dir`, a hosts file holding `hosts` and a wrapper of the `tickd` binary whose
/// nodes resolve names through it alone.
///
/// # Panics
///
/// When a file cannot be written.
pub fn in_folder(dir: &Path, hosts: &str) -> LocalNames {
    let hosts_file = dir.join("hosts");
    std::fs::write(&hosts_file, hosts).expect("write the wrapper's hosts file");
    LocalNames {
        wrapper: wrapper(dir, &hosts_file),
        hosts: hosts_file,
    }
}

fn wrapper(dir: &Path, hosts: &Path) -> PathBuf {
    let resolv = dir.join("resolv.conf");
    std::fs::write(&resolv, RESOLV_CONF).expect("write the wrapper's resolv.conf");
    let wrapper = dir.join("tickd-with-local-names");
    let script = format!(
        "#!/bin/sh\nexec unshare --mount --propagation private sh -c \
         'mount --bind \"$0\" /etc/hosts && mount --bind \"$1\" /etc/resolv.conf && shift && \
         exec \"$@\"' {hosts:?} {resolv:?} {tickd:?} \"$@\"\n",
        tickd = tickd_binary()
    );
    std::fs::write(&wrapper, script).expect("write the wrapper");
    let mut permissions = std::fs::metadata(&wrapper)
        .expect("the wrapper")
        .permissions();
    permissions.set_mode(0o755);
    std::fs::set_permissions(&wrapper, permissions).expect("make the wrapper executable");
    wrapper
}
