//! The cluster file's webhook settings (SPEC §5), with their defaults and bounds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ClusterFile;

/// How long after its instant a webhook tick is still tried, by default: an hour, long enough
/// for a receiver's restart or a deploy. Undelivered ticks wait in the replicated outbox until
/// then, so the retry time also bounds how many a dead receiver leaves there (3 600 per
/// `every.1.seconds` clock).
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(3_600);
/// The longest retry time accepted: a day.
const MAX_RETRY_FOR: Duration = Duration::from_secs(86_400);
/// How long one attempt may take, by default, the answer read included.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The shortest and longest attempt timeouts accepted.
const ATTEMPT_TIMEOUT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(60);
/// Attempts at once to one receiver (host and port), by default.
pub const DEFAULT_PER_RECEIVER: usize = 32;
/// Ticks one receiver may have admitted (running or waiting for one of its attempts) before
/// its further ticks wait a second without an attempt: half of the engine's ticks in flight
/// (`tickd_engine::decisions::MAX_IN_FLIGHT`), so that one receiver, however many clocks it
/// takes, leaves the other half to every other destination.
pub const DEFAULT_ADMITTED_PER_RECEIVER: usize = tickd_engine::decisions::MAX_IN_FLIGHT / 2;
/// Attempts at once to all receivers together, by default.
pub const DEFAULT_TOTAL: usize = 512;

/// The webhook settings of a node, after defaults and validation.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// The engine's settings.
    pub engine: tickd_engine::WebhookSettings,
    /// Certificates trusted for `https` receivers beside the system's roots.
    pub ca_file: Option<PathBuf>,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            engine: tickd_engine::WebhookSettings {
                retry_for: DEFAULT_RETRY_FOR,
                attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
                allow_private: false,
                per_receiver: DEFAULT_PER_RECEIVER,
                admitted_per_receiver: DEFAULT_ADMITTED_PER_RECEIVER,
                total: DEFAULT_TOTAL,
            },
            ca_file: None,
        }
    }
}

/// The settings the `webhook_*` keys of `file` make; `base` is the folder relative paths start
/// from. The error names the key and its bounds.
pub(super) fn settings(file: &ClusterFile, base: &Path) -> Result<WebhookConfig, String> {
    let defaults = WebhookConfig::default().engine;
    let retry_for = file
        .webhook_retry_for_ms
        .map_or(DEFAULT_RETRY_FOR, Duration::from_millis);
    if retry_for > MAX_RETRY_FOR {
        return Err(format!(
            "`webhook_retry_for_ms` is {} ms; the most is {} ms (a day)",
            retry_for.as_millis(),
            MAX_RETRY_FOR.as_millis()
        ));
    }
    let attempt_timeout = file
        .webhook_timeout_ms
        .map_or(DEFAULT_ATTEMPT_TIMEOUT, Duration::from_millis);
    if !ATTEMPT_TIMEOUT_RANGE.contains(&attempt_timeout) {
        return Err(format!(
            "`webhook_timeout_ms` is {} ms; it must be from {} to {} ms",
            attempt_timeout.as_millis(),
            ATTEMPT_TIMEOUT_RANGE.start().as_millis(),
            ATTEMPT_TIMEOUT_RANGE.end().as_millis()
        ));
    }
    let total = positive("webhook_max_concurrency", file.webhook_max_concurrency)?
        .unwrap_or(defaults.total);
    let per_receiver = positive(
        "webhook_max_concurrency_per_receiver",
        file.webhook_max_concurrency_per_receiver,
    )?
    .unwrap_or(defaults.per_receiver);
    Ok(WebhookConfig {
        engine: tickd_engine::WebhookSettings {
            retry_for,
            attempt_timeout,
            allow_private: file.webhook_allow_private.unwrap_or(false),
            per_receiver,
            admitted_per_receiver: defaults.admitted_per_receiver,
            total,
        },
        ca_file: file.webhook_ca_file.as_ref().map(|path| base.join(path)),
    })
}

fn positive(key: &str, value: Option<usize>) -> Result<Option<usize>, String> {
    match value {
        Some(0) => Err(format!("`{key}` is 0; it must be at least 1")),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings of a cluster file holding `keys`.
    fn settings_of(keys: &str) -> Result<WebhookConfig, String> {
        let file: ClusterFile = toml::from_str(&format!("secret = \"s\"\n{keys}"))
            .map_err(|error| error.to_string())?;
        settings(&file, Path::new("/etc/tickd"))
    }

    #[test]
    fn unset_keys_take_the_documented_defaults() {
        let config = settings_of("").expect("defaults are valid");
        assert_eq!(config.engine.retry_for, Duration::from_secs(3_600));
        assert_eq!(config.engine.attempt_timeout, Duration::from_secs(10));
        assert!(!config.engine.allow_private);
        assert_eq!(config.engine.per_receiver, 32);
        assert_eq!(config.engine.total, 512);
        assert_eq!(config.ca_file, None);
    }

    #[test]
    fn keys_out_of_bounds_are_refused_by_name() {
        for (keys, named) in [
            ("webhook_retry_for_ms = 86400001", "webhook_retry_for_ms"),
            ("webhook_timeout_ms = 99", "webhook_timeout_ms"),
            ("webhook_timeout_ms = 60001", "webhook_timeout_ms"),
            ("webhook_max_concurrency = 0", "webhook_max_concurrency"),
            (
                "webhook_max_concurrency_per_receiver = 0",
                "webhook_max_concurrency_per_receiver",
            ),
        ] {
            let error = settings_of(keys).expect_err(named);
            assert!(error.contains(named), "{error}");
        }
    }

    #[test]
    fn set_keys_are_taken_and_the_ca_file_is_relative_to_the_cluster_file() {
        let config = settings_of(
            "webhook_allow_private = true\nwebhook_retry_for_ms = 20000\n\
             webhook_ca_file = \"ca.pem\"\nwebhook_max_concurrency_per_receiver = 4",
        )
        .expect("valid");
        assert!(config.engine.allow_private);
        assert_eq!(config.engine.retry_for, Duration::from_secs(20));
        assert_eq!(config.engine.per_receiver, 4);
        assert_eq!(config.ca_file, Some(PathBuf::from("/etc/tickd/ca.pem")));
    }
}
