//! What a browser gets at `/` (SPEC, "GET / — the dashboard"), without a token: tickd's own
//! dashboard, embedded in the binary ([`page`]), or, when the cluster file sets
//! `dashboard_dir`, that folder instead ([`folder`]), so that Ticktok's dashboard build works
//! unchanged. Either is the router's fallback: API routes always win.

pub mod folder;
pub mod page;
