//! Bounded connections (issue 18, item 2), against real `tickd` processes: half-sent requests
//! and stalled bodies are cut by the listeners' timers, one client address cannot take a
//! listener's whole budget, a flood of idle connections on a follower's Raft port leaves
//! the cluster serving, and a client that stops reading an unpaged list (which holds an image
//! of the clocks) is cut by the write timeout and gives its place among a node's few back.
//!
//! The floods come from loopback addresses other than 127.0.0.1 (127.0.0.2 and up, all of
//! 127.0.0.0/8 is loopback on Linux): the test nodes' own address is 127.0.0.1, which the Raft
//! listener treats as a member's, so a stranger must come from elsewhere to be a stranger.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::future::join_all;
use reqwest::StatusCode;
use tickd_tests::TestCluster;
use tickd_tests::api::{clock_id, get_clock, register};
use tickd_tests::config::TEST_SECRET;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

/// The header-read timeout the timer tests configure, short so that they run in seconds.
const SHORT_TIMEOUT_MS: u64 = 2_000;
/// Slack on top of a configured timeout before a connection counts as held too long.
const SLACK: Duration = Duration::from_secs(3);
/// How long the flood's refused connections may take to be seen closed. The listener accepts
/// and closes them one by one, and pauses 100 ms after a failed accept (the follower runs
/// with 1 024 descriptors): inside the whole suite on this 2-core box, 3 s once saw only 821
/// of the 844 needed.
const FLOOD_DRAIN: Duration = Duration::from_secs(15);

/// A loopback address other than the nodes' own 127.0.0.1.
fn stranger(n: u16) -> IpAddr {
    let [hi, lo] = n.to_be_bytes();
    IpAddr::V4(Ipv4Addr::new(127, 1, hi, lo))
}

/// Opens a TCP connection to `to` from `from` (any port).
async fn connect_from(from: IpAddr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::new(from, 0))
        .unwrap_or_else(|error| panic!("bind {from}: {error}"));
    socket
        .connect(to)
        .await
        .unwrap_or_else(|error| panic!("connect {from} -> {to}: {error}"))
}

/// Whether the server closes `stream` within `within`: a read returns end-of-file or an error.
/// Whatever the server answers before closing is read and dropped.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buffer = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match timeout(left, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// The status line of the first answer on `stream`, if one arrives within `within`.
async fn status_line(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    let deadline = Instant::now() + within;
    while !answer.windows(2).any(|pair| pair == b"\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        match timeout(left, stream.read(&mut buffer)).await {
            Ok(Ok(read)) if read > 0 => answer.extend_from_slice(&buffer[..read]),
            _ => return None,
        }
    }
    let text = String::from_utf8_lossy(&answer);
    text.lines().next().map(str::to_string)
}

#[tokio::test]
async fn half_sent_requests_are_closed_within_the_header_timeout() {
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("header_read_timeout_ms", SHORT_TIMEOUT_MS.to_string())
        .setting("api_max_connections", "1000")
        .setting("api_max_connections_per_address", "1000")
        .start()
        .await;
    let api = cluster.api_addr(1);
    let opened = join_all((0..300).map(|_| async move {
        let mut stream = TcpStream::connect(api).await.expect("connect to the API");
        // A request head that never ends: no blank line.
        stream
            .write_all(b"POST /api/v1/clocks HTTP/1.1\r\nHost: tickd\r\nContent-Ty")
            .await
            .expect("send half a request");
        stream
    }))
    .await;
    let started = Instant::now();
    let limit = Duration::from_millis(SHORT_TIMEOUT_MS) + SLACK;
    let closed = join_all(
        opened
            .into_iter()
            .map(|mut stream| async move { closed_within(&mut stream, limit).await }),
    )
    .await;
    let held = closed.iter().filter(|closed| !**closed).count();
    assert_eq!(
        held,
        0,
        "{held} of 300 half-sent requests were still open {:?} after they were sent \
         (header_read_timeout_ms = {SHORT_TIMEOUT_MS})",
        started.elapsed()
    );
    let (status, _, body) = register(&cluster, 1, "after-the-flood", "every.5.seconds").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn a_stalled_request_body_is_cut_within_the_body_timeout() {
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("body_timeout_ms", SHORT_TIMEOUT_MS.to_string())
        .start()
        .await;
    let mut stream = TcpStream::connect(cluster.api_addr(1))
        .await
        .expect("connect to the API");
    let head = format!(
        "POST /api/v1/clocks HTTP/1.1\r\nHost: tickd\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"name\":",
        cluster.token()
    );
    stream.write_all(head.as_bytes()).await.expect("send");
    let started = Instant::now();
    let answered = status_line(&mut stream, Duration::from_millis(SHORT_TIMEOUT_MS) + SLACK).await;
    let status = answered.unwrap_or_else(|| {
        panic!(
            "no answer {:?} after a body stalled at 9 of 100 bytes (body_timeout_ms = \
             {SHORT_TIMEOUT_MS})",
            started.elapsed()
        )
    });
    assert!(
        status.contains(" 4"),
        "a stalled body gets a client error, not {status:?}"
    );
    assert!(
        closed_within(&mut stream, SLACK).await,
        "and the connection is closed"
    );
}

#[tokio::test]
async fn one_address_cannot_take_a_listeners_whole_budget() {
    const PER_ADDRESS: usize = 8;
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("api_max_connections_per_address", PER_ADDRESS.to_string())
        .start()
        .await;
    let api = cluster.api_addr(1);
    let greedy = stranger(1);
    let mut held = Vec::new();
    for _ in 0..PER_ADDRESS {
        held.push(connect_from(greedy, api).await);
    }
    // The connections within the cap are taken and kept (header_read_timeout is 10 s).
    for stream in &mut held {
        assert!(
            !closed_within(stream, Duration::from_millis(100)).await,
            "a connection within the per-address cap was closed"
        );
    }
    let mut over = connect_from(greedy, api).await;
    assert!(
        closed_within(&mut over, Duration::from_secs(2)).await,
        "connection {} from {greedy} (cap {PER_ADDRESS}) was not closed at once",
        PER_ADDRESS + 1
    );
    // Another address is still served.
    let mut other = connect_from(stranger(2), api).await;
    other
        .write_all(b"GET /mgmt/health HTTP/1.1\r\nHost: tickd\r\n\r\n")
        .await
        .expect("send");
    let status = status_line(&mut other, Duration::from_secs(5)).await;
    assert!(
        status.as_deref().is_some_and(|line| line.contains(" 200")),
        "another address must be served: {status:?}"
    );
    drop(held);
}

/// Issue 43, N2: strangers from many addresses (eight IPv4 addresses, each under its own cap)
/// fill the API listener with connections that never prove anything; a client with a token
/// still gets an answer, because the listener closes the oldest unproven connection to make
/// room, and counts it.
#[tokio::test]
async fn a_full_api_listener_closes_the_oldest_stranger_for_a_token_holder() {
    const CAP: usize = 24;
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("api_max_connections", CAP.to_string())
        .setting("api_max_connections_per_address", "8")
        .start()
        .await;
    let api = cluster.api_addr(1);
    // As many strangers as the cap, three per address (each within its address's cap of
    // eight): with the harness's own connections the listener is full of connections that
    // proved nothing, whichever of them it has already closed to make room.
    let mut strangers = Vec::new();
    for n in 0..CAP {
        let from = stranger(10 + u16::try_from(n % 8).expect("a small number"));
        strangers.push(connect_from(from, api).await);
    }
    let mut client = connect_from(stranger(100), api).await;
    let request = format!(
        "GET /api/v1/clocks HTTP/1.1\r\nHost: tickd\r\nAuthorization: Bearer {}\r\n\r\n",
        cluster.token()
    );
    client.write_all(request.as_bytes()).await.expect("send");
    let status = status_line(&mut client, Duration::from_secs(10)).await;
    assert!(
        status.as_deref().is_some_and(|line| line.contains(" 200")),
        "a token holder on a listener full of strangers: {status:?}"
    );
    let evicted = {
        let mut closed = 0;
        for stream in &mut strangers {
            if closed_within(stream, Duration::from_millis(200)).await {
                closed += 1;
            }
        }
        closed
    };
    assert!(
        evicted >= 1,
        "no stranger's connection was closed to make room"
    );
    let (status, _, metrics) = tickd_tests::api::send(tickd_tests::api::operator(
        &cluster,
        reqwest::Method::GET,
        1,
        "/metrics",
    ))
    .await;
    assert_eq!(status, StatusCode::OK);
    let text = metrics.as_str().unwrap_or_default();
    assert!(
        text.lines()
            .any(|line| line.starts_with("tickd_connections_evicted_total")
                && !line.trim_end().ends_with(" 0")),
        "the eviction is not counted: {}",
        text.lines()
            .filter(|line| line.contains("evicted"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test]
async fn idle_connections_to_a_followers_raft_port_leave_the_cluster_serving() {
    const FLOOD: u16 = 1_100;
    // The header timer would close the flood after its timeout; a long one leaves the
    // connection caps alone to hold the node up while the test runs.
    let cluster = TestCluster::builder()
        .nodes(3)
        .setting("header_read_timeout_ms", "120000")
        .start()
        .await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    // The descriptor limit the finding hit: the usual 1 024.
    let pid = cluster.pid(follower).expect("the follower runs");
    let lowered = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), "--nofile=1024:1024"])
        .status()
        .expect("run prlimit");
    assert!(lowered.success(), "prlimit failed");

    // 1 100 idle connections from 100 stranger addresses, 11 each: each address stays under
    // its own cap, so only the listener's cap (less the members' reserve) stops them.
    let raft = cluster.raft_addr(follower);
    // The test holds its ends of the flood open until it is over.
    // At most `OPENING` handshakes at once: a burst of all of them would overflow the
    // listener's accept queue, and the kernel then leaves some half-open on the node's side
    // (the client believes it is connected, the node has not yet accepted it) for longer than
    // the drain window, which says nothing about the node's caps.
    const OPENING: usize = 32;
    let mut flood: Vec<TcpStream> = futures::stream::iter(0..FLOOD)
        .map(|n| connect_from(stranger(n % 100 + 1), raft))
        .buffer_unordered(OPENING)
        .collect()
        .await;
    let closed = join_all(
        flood
            .iter_mut()
            .map(|stream| closed_within(stream, FLOOD_DRAIN)),
    )
    .await;
    let refused = closed.iter().filter(|closed| **closed).count();
    assert!(
        refused >= usize::from(FLOOD) - 256,
        "only {refused} of {FLOOD} idle connections were refused; the Raft listener's cap is 256"
    );

    // A member's address still gets in: the reserve.
    let mut member = connect_from(IpAddr::V4(Ipv4Addr::LOCALHOST), raft).await;
    let status = format!(
        "GET /internal/status HTTP/1.1\r\nHost: tickd\r\nx-tickd-secret: {TEST_SECRET}\r\n\r\n"
    );
    member.write_all(status.as_bytes()).await.expect("send");
    let answer = status_line(&mut member, Duration::from_secs(5)).await;
    assert!(
        answer.as_deref().is_some_and(|line| line.contains(" 200")),
        "a member's connection to the flooded Raft port must be served: {answer:?}"
    );

    // The cluster serves: a registration through the flooded follower commits, and the
    // follower applies it (and one through the leader).
    for via in [follower, leader] {
        let (status, _, body) = register(
            &cluster,
            via,
            &format!("during-the-flood-{via}"),
            "every.5.seconds",
        )
        .await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "register via node {via}: {body}"
        );
        let id = clock_id(&body);
        let (status, _, body) = get_clock(&cluster, follower, &id).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "the flooded follower must apply the clock: {body}"
        );
    }
    drop(flood);
}

/// Opens a connection to `to` whose receive buffer is as small as the kernel allows, so that
/// the node's writes block as soon as the client stops reading.
async fn connect_small(to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .set_recv_buffer_size(4096)
        .expect("a small receive buffer");
    socket
        .connect(to)
        .await
        .unwrap_or_else(|error| panic!("connect -> {to}: {error}"))
}

/// Reads what `stream` still holds until the node closes it, within `within`: the bytes, or
/// `None` when the connection is still open at the end.
async fn rest_until_closed(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + within;
    let mut rest = Vec::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match timeout(left, stream.read(&mut buffer)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(rest),
            Ok(Ok(read)) => rest.extend_from_slice(&buffer[..read]),
        }
    }
}

#[tokio::test]
async fn a_client_that_stops_reading_an_unpaged_list_is_cut_and_gives_back_its_place() {
    // Enough clocks, with long names, that a list (about 4 MB) outgrows what the sockets and
    // hyper buffer between a node and a client that reads nothing.
    const CLOCKS: usize = 10_000;
    const MAX_UNPAGED_LISTS: usize = 4;
    let cluster = TestCluster::builder()
        .nodes(1)
        .setting("write_timeout_ms", SHORT_TIMEOUT_MS.to_string())
        .start()
        .await;
    let padding = "x".repeat(120);
    let names: Vec<String> = (0..CLOCKS).map(|n| format!("{padding}-{n}")).collect();
    let registered = futures::stream::iter(&names)
        .map(|name| register(&cluster, 1, name, "every.1.hours"))
        .buffer_unordered(32)
        .filter(|(status, _, _)| futures::future::ready(*status == StatusCode::CREATED))
        .count()
        .await;
    assert_eq!(registered, CLOCKS);

    let request = format!(
        "GET /api/v1/clocks HTTP/1.1\r\nHost: tickd\r\nAuthorization: Bearer {}\r\n\r\n",
        cluster.token()
    );
    let mut stalled = Vec::new();
    for n in 0..MAX_UNPAGED_LISTS {
        let mut stream = connect_small(cluster.api_addr(1)).await;
        stream.write_all(request.as_bytes()).await.expect("send");
        let status = status_line(&mut stream, SLACK)
            .await
            .unwrap_or_else(|| panic!("list {n}: no answer"));
        assert!(status.contains(" 200 "), "list {n}: {status}");
        stalled.push(stream);
    }
    let every = || {
        cluster
            .client()
            .get(format!("{}/api/v1/clocks", cluster.api_url(1)))
            .bearer_auth(cluster.token())
            .send()
    };
    let refused = every().await.expect("an answer");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));
    let message = refused.text().await.expect("a body");
    assert!(
        message.contains("unpaged lists") && message.contains("?limit="),
        "{message}"
    );
    let page = cluster
        .client()
        .get(format!("{}/api/v1/clocks?limit=10", cluster.api_url(1)))
        .bearer_auth(cluster.token())
        .send()
        .await
        .expect("an answer");
    assert_eq!(page.status(), StatusCode::OK, "a page needs no place");

    // Nothing is read for longer than the write timeout: each list is cut, short of its end.
    tokio::time::sleep(Duration::from_millis(SHORT_TIMEOUT_MS) + SLACK).await;
    for (n, mut stream) in stalled.into_iter().enumerate() {
        let rest = rest_until_closed(&mut stream, SLACK).await.unwrap_or_else(|| {
            panic!("list {n} is still open after its client read nothing for longer than write_timeout_ms")
        });
        assert!(
            !rest.ends_with(b"0\r\n\r\n"),
            "list {n} was sent to its end ({} more bytes): it did not outgrow the buffers",
            rest.len()
        );
    }
    let whole = every().await.expect("an answer");
    assert_eq!(
        whole.status(),
        StatusCode::OK,
        "the cut lists gave their places back"
    );
    let clocks: Vec<serde_json::Value> = whole.json().await.expect("the whole list");
    assert_eq!(clocks.len(), CLOCKS);
}
