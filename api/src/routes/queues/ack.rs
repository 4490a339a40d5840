//! `POST /api/v1/queues/{queue_id}/ack`: remove leased ticks for good, by their receipts
//! (SPEC §2, lease and ack; `tickd_domain::leases`).
//!
//! One Raft write for all the receipts of one ack; each receipt is answered: acked, or
//! refused with its reason (its lease ran out, it is unknown to this queue, or the ack
//! presented it twice). A refused receipt is never a silent success, and changes nothing. A
//! receipt acked before and presented again before its deadline is acked again: an ack is safe
//! to retry, by the client or by the node forwarding it.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use tickd_domain::leases::MAX_ACK_RECEIPTS;
use tickd_domain::{AckRefusal, Command, Level, Outcome, Receipt, leases_need_level};
use utoipa::ToSchema;

use super::{known_queue, no_such_queue, unexpected, unserved};
use crate::AppState;
use crate::error::{ApiError, BodyShape, ErrorBody};
use crate::{level_wait, telemetry};

/// The longest receipt the log carries, in bytes: a receipt tickd issues has 35 at most. A
/// longer one is answered `unknown` here, without reaching the log.
pub const MAX_RECEIPT_BYTES: usize = 64;

/// The ack body.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = AckRequest)]
pub struct AckBody {
    /// The receipts of the leased ticks to remove, at most 100.
    #[schema(max_items = 100)]
    receipts: Vec<String>,
}

/// What an ack body looks like, for the errors that reject one.
const ACK: BodyShape = BodyShape {
    what: "ack",
    example: r#"{"receipts": ["…"]}"#,
    limit_bytes: crate::MAX_BODY_BYTES,
};

/// The answer to an ack.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = AckAnswer)]
pub struct AckAnswer {
    /// How many receipts were acked: their ticks removed by this ack, or by an earlier ack
    /// of the same receipt before its deadline (a retry).
    acked: u64,
    /// The receipts it refused, in the order presented, each with its reason.
    refused: Vec<RefusedView>,
}

/// One refused receipt.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = RefusedReceipt)]
pub struct RefusedView {
    /// The receipt as presented.
    receipt: String,
    /// `expired`: its lease ran out and its tick is handed out again; `unknown`: never issued
    /// for this queue, acked and past its deadline, or its tick was handed out again under a
    /// new receipt;
    /// `repeated`: the ack presented it before.
    reason: AckRefusal,
}

impl AckBody {
    /// The receipts, or a 400 when there are too many.
    fn receipts(self) -> Result<Vec<Receipt>, ApiError> {
        if self.receipts.len() > MAX_ACK_RECEIPTS {
            return Err(ApiError::bad_request(format!(
                "an ack presents at most {MAX_ACK_RECEIPTS} receipts, not {}; ack in several \
                 requests",
                self.receipts.len()
            )));
        }
        Ok(self.receipts.into_iter().map(Receipt::new).collect())
    }
}

/// Whether a receipt could have been issued: one longer than [`MAX_RECEIPT_BYTES`] is unknown
/// to every queue, and is answered so without a write.
fn may_be_issued(receipt: &Receipt) -> bool {
    receipt.as_str().len() <= MAX_RECEIPT_BYTES
}

/// The handler.
#[utoipa::path(
    post,
    path = "/api/v1/queues/{queue_id}/ack",
    tag = "queues",
    security(()),
    summary = "Ack leased ticks of an http channel: remove them for good",
    description = "tickd's, beside the pop, with the same capability (no token). Removes the \
        leased ticks of the receipts whose lease has not run out, and answers how many; every \
        other receipt is refused with its reason, and changes nothing. A receipt acked before \
        its deadline counts as acked again, so a retried ack gets the same answer.",
    params(
        ("queue_id" = String, Path, description = "The queue id from the channel's URL"),
    ),
    request_body = AckBody,
    responses(
        (status = 200, description = "How many ticks were acked, and the receipts refused",
            body = AckAnswer),
        (status = 400, description = "More than 100 receipts, or a malformed body",
            body = ErrorBody),
        (status = 404, description = "No such queue, or its clock was removed",
            body = ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = ErrorBody),
        (status = 415, description = "Body not declared as JSON", body = ErrorBody),
        (status = 503, description = "No leader reachable, or a node of the cluster runs a \
            release without leases", body = ErrorBody),
    ),
)]
pub async fn ack(
    State(app): State<AppState>,
    Path(queue): Path<String>,
    body: Result<Json<AckBody>, JsonRejection>,
) -> Result<Json<AckAnswer>, ApiError> {
    let Json(body) = body.map_err(|rejection| ACK.reject(rejection))?;
    let receipts = body.receipts()?;
    let queue = known_queue(&app, queue).await?;
    level_wait::require(&app, Level::has_leases, leases_need_level).await?;
    let (presented, impossible): (Vec<Receipt>, Vec<Receipt>) =
        receipts.iter().cloned().partition(may_be_issued);
    let now_ms = app.replica.clock().earliest_now_ms();
    let outcome = app
        .replica
        .write(Command::Ack {
            queue: queue.clone(),
            receipts: presented,
            now_ms,
        })
        .await
        .map_err(unserved)?;
    match outcome {
        Outcome::Acked { acked, refused } => {
            telemetry::record_acked(acked);
            let mut reasons: Vec<(Receipt, AckRefusal)> = refused
                .into_iter()
                .map(|refused| (refused.receipt, refused.reason))
                .chain(
                    impossible
                        .into_iter()
                        .map(|receipt| (receipt, AckRefusal::Unknown)),
                )
                .collect();
            // In the order presented.
            reasons.sort_by_key(|(receipt, _)| {
                receipts
                    .iter()
                    .position(|presented| presented == receipt)
                    .unwrap_or(usize::MAX)
            });
            Ok(Json(AckAnswer {
                acked,
                refused: reasons
                    .into_iter()
                    .map(|(receipt, reason)| RefusedView {
                        receipt: receipt.as_str().to_owned(),
                        reason,
                    })
                    .collect(),
            }))
        }
        Outcome::NotFound => Err(no_such_queue(&queue)),
        Outcome::Rejected { reason } => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, reason)),
        other => Err(unexpected(&other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_are_bounded_in_number_and_longer_ones_never_issued() {
        let body = |receipts: Vec<String>| AckBody { receipts };
        assert_eq!(
            body(vec!["a.0".into(); MAX_ACK_RECEIPTS])
                .receipts()
                .map(|receipts| receipts.len())
                .map_err(|error| error.status()),
            Ok(MAX_ACK_RECEIPTS)
        );
        let too_many = body(vec!["a.0".into(); MAX_ACK_RECEIPTS + 1]).receipts();
        assert_eq!(
            too_many.map_err(|error| error.status()).err(),
            Some(StatusCode::BAD_REQUEST)
        );
        assert!(may_be_issued(&Receipt::new("r".repeat(MAX_RECEIPT_BYTES))));
        assert!(!may_be_issued(&Receipt::new(
            "r".repeat(MAX_RECEIPT_BYTES + 1)
        )));
    }
}
