//! The channel a registration asks for (SPEC §1, §2): none (the cluster's default, as
//! Ticktok's clients send), `{"type": "http"}`, `{"type": "rabbit"}` or
//! `{"type": "webhook", "url": …}`, checked before anything is proposed.
//!
//! A webhook's URL is checked twice here, as written ([`WebhookUrl::parse`]) and as resolved
//! now (every address must be one SPEC §5 allows); the engine checks it again at every
//! delivery, since a name may resolve differently later.

use std::net::IpAddr;
use std::time::Duration;

use axum::http::StatusCode;
use serde::Deserialize;
use tickd_domain::webhook::{SECRET_BYTES, address_allowed};
use tickd_domain::{Channel, Clock, Excerpt, Webhook, WebhookSecret, WebhookUrl};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::ids;

/// How long a registration waits for its webhook host to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The channel a registration names.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum RequestedChannel {
    /// A RabbitMQ queue (the default when the cluster has a broker).
    Rabbit,
    /// An http poll URL (the default otherwise).
    Http,
    /// Each tick `POST`ed to `url`, signed with a secret the answer returns once.
    Webhook {
        /// An absolute `http://` or `https://` URL without credentials, at most 2 048 bytes,
        /// whose host resolves only to public addresses (unless the cluster file sets
        /// `webhook_allow_private`).
        #[schema(
            min_length = 1,
            max_length = 2048,
            pattern = "^[hH][tT][tT][pP][sS]?://"
        )]
        url: String,
    },
}

impl RequestedChannel {
    fn name(&self) -> &'static str {
        match self {
            RequestedChannel::Rabbit => "rabbit",
            RequestedChannel::Http => "http",
            RequestedChannel::Webhook { .. } => "webhook",
        }
    }
}

/// The channel of a clock this registration would create, checked: the requested one, or the
/// cluster's default. A webhook's receiver is resolved here.
pub async fn choose(
    requested: Option<&RequestedChannel>,
    has_broker: bool,
    allow_private: bool,
) -> Result<Channel, ApiError> {
    match requested {
        None if has_broker => Ok(Channel::Rabbit),
        None | Some(RequestedChannel::Http) => Ok(Channel::Http {
            queue_id: ids::queue_id(),
        }),
        Some(RequestedChannel::Rabbit) if has_broker => Ok(Channel::Rabbit),
        Some(RequestedChannel::Rabbit) => Err(ApiError::bad_request(
            "invalid channel: this cluster has no RabbitMQ (no rabbit_uri); ask for \
             {\"type\": \"http\"} or {\"type\": \"webhook\", \"url\": \"…\"}",
        )),
        Some(RequestedChannel::Webhook { url }) => {
            let url =
                WebhookUrl::parse(url).map_err(|error| ApiError::bad_request(error.to_string()))?;
            check_receiver(&url, allow_private).await?;
            Ok(Channel::Webhook(Box::new(Webhook {
                url,
                secret: WebhookSecret::from_bytes(ids::random_bytes::<SECRET_BYTES>()),
            })))
        }
    }
}

/// Checks that every address `url` names or resolves to now may receive ticks.
async fn check_receiver(url: &WebhookUrl, allow_private: bool) -> Result<(), ApiError> {
    let addresses: Vec<IpAddr> = match url.literal_address() {
        Some(address) => vec![address],
        None => {
            let host = url.as_url().host_str().unwrap_or_default();
            let resolved =
                tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, 0)))
                    .await
                    .map_err(|_| {
                        ApiError::bad_request(format!(
                            "invalid webhook url: its host {host} did not resolve within {} s",
                            RESOLVE_TIMEOUT.as_secs()
                        ))
                    })?;
            resolved
                .map_err(|error| {
                    ApiError::bad_request(format!(
                        "invalid webhook url: its host {host} does not resolve ({error})"
                    ))
                })?
                .map(|address| address.ip())
                .collect()
        }
    };
    if let Some(refused) = addresses
        .iter()
        .find(|address| !address_allowed(**address, allow_private))
    {
        return Err(ApiError::bad_request(format!(
            "invalid webhook url: {} is not a public address ({refused}); ticks are not sent \
             to loopback, private, link-local or other internal addresses unless the cluster \
             file sets webhook_allow_private = true",
            url.as_url().host_str().unwrap_or_default()
        )));
    }
    if addresses.is_empty() {
        return Err(ApiError::bad_request(
            "invalid webhook url: its host resolves to no address",
        ));
    }
    Ok(())
}

/// The 409 of a registration that names another channel than `existing`'s, the clock of its
/// (name, schedule) pair; `None` when it names none or the same one (for a webhook, the same
/// URL).
pub fn conflict(existing: &Clock, requested: Option<&RequestedChannel>) -> Option<ApiError> {
    let requested = requested?;
    let same = match (&existing.channel, requested) {
        (Channel::Rabbit, RequestedChannel::Rabbit)
        | (Channel::Http { .. }, RequestedChannel::Http) => true,
        (Channel::Webhook(webhook), RequestedChannel::Webhook { url }) => {
            WebhookUrl::parse(url).is_ok_and(|url| url == webhook.url)
        }
        _ => false,
    };
    if same {
        return None;
    }
    let has = match &existing.channel {
        Channel::Rabbit => "a rabbit channel".to_owned(),
        Channel::Http { .. } => "an http channel".to_owned(),
        Channel::Webhook(webhook) => format!("a webhook channel to {}", webhook.url),
    };
    Some(ApiError::new(
        StatusCode::CONFLICT,
        format!(
            "the clock of this name and schedule exists with {has}; this registration asks for \
             a {} channel{}. Register without \"channel\" (or with the clock's) to join it, or \
             use another name",
            requested.name(),
            match requested {
                RequestedChannel::Webhook { url } => format!(" to {}", Excerpt::of(url)),
                _ => String::new(),
            }
        ),
    ))
}
