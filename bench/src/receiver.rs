//! The receiving end of the webhook scenario: an HTTP server on loopback, in the benchmark's
//! own process, that answers every tick 200 and stamps it with its arrival time.
//!
//! tickd's leader and the bare sender post to the same receiver, one after the other, so the
//! receiver's own cost (axum, a JSON parse, a lock) is the same for both and cancels out of the
//! ratio. It does not check signatures: that would add the same HMAC to both sides and measure
//! nothing more; the bare sender's test checks that its signatures verify.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use tokio::net::TcpListener;

use crate::consumer::{Delivery, now_ms};

type Sink = Arc<Mutex<Vec<Delivery>>>;

/// A receiver on `127.0.0.1` answering `POST /hook`, recording every tick it is sent.
pub struct WebhookReceiver {
    address: SocketAddr,
    received: Sink,
    server: tokio::task::JoinHandle<()>,
}

impl WebhookReceiver {
    /// Listens on a free loopback port.
    pub async fn start() -> Result<WebhookReceiver, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("a loopback port for the webhook receiver: {e}"))?;
        let address = listener
            .local_addr()
            .map_err(|e| format!("the webhook receiver's address: {e}"))?;
        let received: Sink = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(received.clone());
        let server = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("  the webhook receiver stopped: {error}");
            }
        });
        Ok(WebhookReceiver {
            address,
            received,
            server,
        })
    }

    /// The URL ticks are sent to.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.address)
    }

    /// Takes everything received so far.
    pub fn drain(&self) -> Vec<Delivery> {
        std::mem::take(&mut *self.received.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Stamps the delivery before anything else, then keeps it. A body that is not a tick is
/// answered 400, which neither sender retries, so that a malformed message shows up as a tick
/// missing from the count rather than as a tick received.
async fn receive(State(sink): State<Sink>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let received_ms = now_ms();
    // tickd names its node in the User-Agent; the bare sender names itself.
    let publisher = headers
        .get(header::USER_AGENT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let Some(tick) = Delivery::read(&body, received_ms, publisher) else {
        return StatusCode::BAD_REQUEST;
    };
    sink.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(tick);
    StatusCode::OK
}
