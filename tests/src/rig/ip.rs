//! The rig's names, and the `ip` (iproute2) and `nft` commands that make and undo it.
//!
//! Every namespace a rig makes is named `tickd-rig-<pid>-<subnet>-<role>`, with the pid of the
//! test process that made it, so that a later run can tell a leftover of a dead process (a
//! test binary killed before its `Drop` ran) from a rig another process is using, and remove
//! only the former. The one link in the root namespace is named after the rig's subnet
//! (`tdrig<subnet>`): creating it is how a rig claims its subnet, atomically, against every
//! other rig on the machine, and it disappears with the switch namespace that holds its peer.

use std::path::Path;
use std::process::Command;

/// The first part of the name of every namespace a rig makes.
pub const NAMESPACE_PREFIX: &str = "tickd-rig-";

/// The name of the rig's bridge, inside the switch namespace.
pub const BRIDGE: &str = "br0";

/// The name of a host's interface, inside the host's namespace.
pub const HOST_LINK: &str = "eth0";

/// The name of the switch's end of the root namespace's link.
pub const UPLINK: &str = "uplink";

/// The switch namespace of the rig that process `pid` made on `subnet`.
pub fn switch_namespace(pid: u32, subnet: u8) -> String {
    format!("{NAMESPACE_PREFIX}{pid}-{subnet}-sw")
}

/// The namespace of host `index` (from 1) of the rig that process `pid` made on `subnet`.
pub fn host_namespace(pid: u32, subnet: u8, index: u8) -> String {
    format!("{NAMESPACE_PREFIX}{pid}-{subnet}-h{index}")
}

/// The switch's port for host `index`, inside the switch namespace.
pub fn switch_port(index: u8) -> String {
    format!("h{index}")
}

/// The root namespace's link into the rig on `subnet`: at most 8 bytes, well inside the
/// kernel's 15.
pub fn root_link(subnet: u8) -> String {
    format!("tdrig{subnet}")
}

/// The pid of the process that made a rig namespace, from its name; `None` for a namespace
/// that is not a rig's.
pub fn owner_pid(namespace: &str) -> Option<u32> {
    let rest = namespace.strip_prefix(NAMESPACE_PREFIX)?;
    rest.split('-').next()?.parse().ok()
}

/// Runs `ip ARGS`; its standard output, or what went wrong.
pub fn ip(args: &[&str]) -> Result<String, String> {
    run("ip", args)
}

/// Runs `program ARGS`; its standard output, or the command and what it printed on failure.
pub fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|error| format!("cannot run `{program}`: {error}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Deletes every rig namespace whose maker is no longer running: what a test binary killed
/// before it could clean up left behind. Its links go with it. Failures are reported and
/// otherwise ignored: a leftover costs an address range, not a test.
pub fn sweep_leftovers() {
    let Ok(listing) = ip(&["netns", "list"]) else {
        return;
    };
    for namespace in listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
    {
        let Some(pid) = owner_pid(namespace) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Err(error) = ip(&["netns", "del", namespace]) {
            eprintln!("tickd-tests: could not remove the leftover namespace {namespace}: {error}");
        }
    }
}

/// Whether any address or route of the root namespace lies in `10.213.<subnet>.0/24`: some
/// other network uses it, and a rig there would shadow it.
pub fn subnet_in_use(prefix: &str) -> Result<bool, String> {
    let routes = ip(&["-4", "route", "show", "root", prefix])?;
    let addresses = ip(&["-4", "-o", "addr", "show", "to", prefix])?;
    Ok(!routes.trim().is_empty() || !addresses.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_their_maker_and_fit_the_kernel() {
        let namespace = host_namespace(4_194_304, 254, 5);
        assert_eq!(owner_pid(&namespace), Some(4_194_304));
        assert_eq!(owner_pid(&switch_namespace(17, 3)), Some(17));
        assert_eq!(owner_pid("tickd-rig-nopid-3-sw"), None);
        assert_eq!(owner_pid("someone-else"), None);
        for name in [root_link(254), switch_port(5), BRIDGE.into(), UPLINK.into()] {
            assert!(name.len() <= 15, "{name} is too long for an interface");
        }
    }
}
