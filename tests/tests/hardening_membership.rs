//! Taking over a cluster, tried the way a hostile client would (issue: hardening, finding 1).
//!
//! Before: `POST /api/v1/cluster/nodes` needed only the access token every Ticktok client
//! holds; the leader then contacted the given Raft address with the cluster secret in a
//! header, so a bare TCP listener received the secret, and a fake node that answered was made
//! a voter. Now membership changes need the operator token, the leader's first contact with a
//! new address is a challenge that carries no credential, and only a holder of the secret can
//! answer it for its own address. With the secret, a vote at a term no peer can reach is
//! refused instead of honoured.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tickd_tests::api::{NODES_PATH, authed, cluster_view, operator, send};
use tickd_tests::config::TEST_SECRET;
use tickd_tests::{NodeId, TestCluster, ports};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// What a fake node's listener answers every request with.
#[derive(Clone)]
enum Answer {
    /// A proof made up without the secret.
    Forged,
    /// The answer of a real member, to which the challenge is relayed.
    RelayTo(String),
}

/// A listener posing as a node: it records every request it receives and answers as told.
struct FakeNode {
    address: String,
    received: Arc<Mutex<Vec<String>>>,
}

impl FakeNode {
    async fn start(answer: Answer) -> FakeNode {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("its address").to_string();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let log = Arc::clone(&log);
                let answer = answer.clone();
                tokio::spawn(async move {
                    let request = read_request(&mut stream).await;
                    log.lock().expect("the log").push(request.clone());
                    let body = respond(&answer, &request).await;
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: \
                         {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        FakeNode { address, received }
    }

    fn received(&self) -> Vec<String> {
        self.received.lock().expect("the log").clone()
    }
}

/// Reads one HTTP request: its head, and as much body as `content-length` says.
async fn read_request(stream: &mut tokio::net::TcpStream) -> String {
    let mut bytes = Vec::new();
    let mut buffer = [0_u8; 4096];
    loop {
        let read =
            match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await {
                Ok(Ok(read)) if read > 0 => read,
                _ => break,
            };
        bytes.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&bytes);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if bytes.len() >= end + 4 + length {
                break;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The body a fake node answers `request` with.
async fn respond(answer: &Answer, request: &str) -> String {
    let status = json!({
        "id": 4, "role": "learner", "term": 0, "leader": null,
        "last_applied": null, "initialized": false,
    });
    let body = request.split("\r\n\r\n").nth(1).unwrap_or_default();
    match answer {
        // For its own address (the request's Host), with a MAC made up without the secret.
        Answer::Forged => {
            let host = request
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("host")
                        .then(|| value.trim().to_owned())
                })
                .unwrap_or_default();
            json!({"status": status, "raft": host, "proof": "00".repeat(32)}).to_string()
        }
        Answer::RelayTo(member) => {
            let challenge: Value = serde_json::from_str(body).unwrap_or_default();
            tickd_tests::http::client_builder()
                .build()
                .expect("an HTTP client")
                .post(format!("http://{member}/internal/prove"))
                .json(&challenge)
                .send()
                .await
                .map(|response| response.text())
                .expect("the member answers")
                .await
                .unwrap_or_default()
        }
    }
}

fn add_request(fake: &FakeNode) -> Value {
    let api = format!("127.0.0.1:{}", ports::allocate(1)[0]);
    json!({"id": 4, "api": api, "raft": fake.address})
}

fn voters(view: &tickd_tests::api::ClusterView) -> Vec<NodeId> {
    view.nodes
        .iter()
        .filter(|n| n.voter)
        .map(|n| n.id)
        .collect()
}

fn assert_no_secret(fake: &FakeNode) {
    for request in fake.received() {
        assert!(
            !request.contains(TEST_SECRET) && !request.to_lowercase().contains("x-tickd-secret"),
            "the fake node received a credential:\n{request}"
        );
    }
}

#[tokio::test]
async fn the_access_token_cannot_add_a_node_and_a_fake_node_learns_no_secret() {
    let cluster = TestCluster::start(3).await;
    let before = voters(&cluster_view(&cluster, 1).await);

    // The client token is not enough, and the address is not even contacted.
    let fake = FakeNode::start(Answer::Forged).await;
    let body = add_request(&fake);
    let (status, _, answer) = send(authed(&cluster, Method::POST, 2, NODES_PATH).json(&body)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or_default()
            .contains("operator token"),
        "{answer}"
    );
    assert!(
        fake.received().is_empty(),
        "contacted: {:?}",
        fake.received()
    );

    // With the operator token: a challenge without credentials, a forged proof refused.
    let (status, _, answer) =
        send(operator(&cluster, Method::POST, 2, NODES_PATH).json(&body)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not prove"), "{answer}");
    let received = fake.received();
    assert_eq!(
        received.len(),
        1,
        "one challenge, nothing after it: {received:?}"
    );
    assert!(
        received[0].starts_with("POST /internal/prove "),
        "{}",
        received[0]
    );
    assert_no_secret(&fake);

    // A listener that relays the challenge to a real member gets that member's proof, bound
    // to the member's address: refused too.
    let relay = FakeNode::start(Answer::RelayTo(cluster.raft_addr(3).to_string())).await;
    let body = add_request(&relay);
    let (status, _, answer) =
        send(operator(&cluster, Method::POST, 1, NODES_PATH).json(&body)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or_default()
            .contains("did not prove"),
        "{answer}"
    );
    assert_no_secret(&relay);

    let after = voters(&cluster_view(&cluster, 1).await);
    assert_eq!(after, before, "the membership did not change");
    assert_eq!(
        cluster_view(&cluster, 1).await.nodes.len(),
        3,
        "no learner either"
    );
}

#[tokio::test]
async fn a_vote_at_a_term_no_peer_can_reach_is_refused() {
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let term = cluster_view(&cluster, leader).await.term;
    let huge = 1_u64 << 63;
    let vote = json!({
        "vote": {"leader_id": {"term": huge, "node_id": 9}, "committed": false},
        "last_log_id": null,
    });
    let response = cluster
        .client()
        .post(format!("http://{}/raft/vote", cluster.raft_addr(leader)))
        .header("x-tickd-secret", TEST_SECRET)
        .json(&vote)
        .send()
        .await
        .expect("the Raft port answers");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let text = response.text().await.unwrap_or_default();
    assert!(text.contains("beyond what any peer can reach"), "{text}");
    let view = cluster_view(&cluster, leader).await;
    assert!(view.term < huge, "the term jumped to {}", view.term);
    assert!(view.term <= term + 2, "term {term} became {}", view.term);
    assert_eq!(view.leader, Some(leader), "the leader kept its place");
}
