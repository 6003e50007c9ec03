//! The loopback scenarios every adapter must pass, on 127.0.0.1 against the replay server
//! (and a few hand-made peers). Each function panics with a message on failure; an adapter's
//! test file calls each one with its [`Adapter`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use feedwire_core::testing::accept_response;
use feedwire_core::{
    BetfairAuth, BetfairSubscription, CloseInitiator, EndReason, Error, HandshakeError,
    PermanentFailure, PlannedReconnect, RequestKind, StreamConfig, StreamEvent,
};
use feedwire_replay::{
    feed_seq, Fault, Mode, ReplayConfig, ReplayServer, Scenario, BETFAIR_IMAGE_CLK,
};

use crate::adapter::{Adapter, Session};

const TIMEOUT: Duration = Duration::from_secs(20);
const CAPACITY: usize = 4096;

fn start(adapter: &dyn Adapter, config: StreamConfig, srv: &ReplayServer) -> Box<dyn Session> {
    adapter.start(config, srv.pki().map(|p| p.root_store()), CAPACITY)
}

fn next(s: &mut dyn Session) -> Option<StreamEvent> {
    s.next_event(TIMEOUT).expect("an event within the timeout")
}

/// Events until the end, counting data messages; stops after `stop_after` of them.
fn consume(s: &mut dyn Session, stop_after: usize) -> (usize, Vec<StreamEvent>) {
    let (mut data, mut others) = (0, Vec::new());
    while let Some(e) = next(s) {
        match e {
            StreamEvent::Data { .. } => {
                data += 1;
                if data == stop_after {
                    s.stop();
                }
            }
            other => others.push(other),
        }
    }
    (data, others)
}

/// Drains the events; the last one.
fn last_event(s: &mut dyn Session) -> Option<StreamEvent> {
    let mut last = None;
    while let Some(e) = next(s) {
        last = Some(e);
    }
    last
}

const CLOSED_BY_US: StreamEvent = StreamEvent::Closed {
    by: CloseInitiator::Local,
    code: 1000,
};

fn wait_for(s: &mut dyn Session, pred: impl Fn(&StreamEvent) -> bool) {
    loop {
        match next(s) {
            Some(e) if pred(&e) => return,
            Some(_) => {}
            None => panic!("the stream ended first"),
        }
    }
}

fn replay(config: ReplayConfig) -> ReplayServer {
    ReplayServer::start(config).expect("replay server")
}

/// WebSocket firehose, plain and TLS: every message, then a clean stop.
pub fn websocket_firehose(adapter: &dyn Adapter) {
    for tls in [false, true] {
        let srv = replay(ReplayConfig {
            count: Some(50_000),
            tls,
            hold_open: true,
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        });
        let mut s = start(adapter, StreamConfig::binance_stream(&srv.url()), &srv);
        let (data, others) = consume(s.as_mut(), 50_000);
        assert_eq!(data, 50_000, "tls={tls}");
        assert!(
            matches!(
                others.last(),
                Some(StreamEvent::Closed {
                    by: CloseInitiator::Local,
                    ..
                })
            ),
            "{others:?}"
        );
        let stats = s.stats();
        assert_eq!(stats.messages_received, 50_000);
        // Each read is counted, none takes more than `max_read_size` (256 KiB).
        assert!(
            stats.reads >= stats.bytes_received.div_ceil(256 * 1024)
                && stats.full_reads <= stats.reads,
            "tls={tls}: {} reads, {} full, for {} bytes",
            stats.reads,
            stats.full_reads,
            stats.bytes_received
        );
    }
}

/// 454 KB messages, plain and TLS, every one intact and in order: the reads that stop at
/// a large frame's end and the receive low-water mark (the rest of the frame) lose, join
/// or hold back nothing.
pub fn large_messages_arrive_exactly(adapter: &dyn Adapter) {
    const COUNT: usize = 24;
    for tls in [false, true] {
        let srv = replay(ReplayConfig {
            count: Some(COUNT),
            tls,
            hold_open: true,
            ..ReplayConfig::new(Scenario::HugeTickerArr)
        });
        let mut s = start(adapter, StreamConfig::binance_stream(&srv.url()), &srv);
        let mut data = 0;
        while data < COUNT {
            match next(s.as_mut()) {
                Some(StreamEvent::Data { payload, .. }) => {
                    assert!(
                        payload == srv.payload(data),
                        "tls={tls}: message {data} differs ({} bytes)",
                        payload.len()
                    );
                    data += 1;
                }
                Some(_) => {}
                None => panic!("tls={tls}: ended after {data} messages"),
            }
        }
        s.stop();
        assert_eq!(last_event(s.as_mut()), Some(CLOSED_BY_US), "tls={tls}");
    }
}

/// An 80 KB frame trickling in, 1 KB every 50 ms (4 s): the stream waits for the frame's
/// rest (`SO_RCVLOWAT`; capped at a quarter of a fresh socket's receive buffer, 32 KiB on
/// Linux's defaults, still more than arrives in an idle period), but the idle probe lowers
/// the mark again, so the trickle counts as life — the message arrives and the connection is
/// not ended as silent.
pub fn a_large_frame_trickling_in_is_not_taken_for_silence(adapter: &dyn Adapter) {
    const LEN: usize = 80 * 1024;
    const PIECE: usize = 1024;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut payload = br#"{"e":"big","d":""#.to_vec();
    payload.resize(LEN - 2, b'x');
    payload.extend_from_slice(br#""}"#);
    let frame = feedwire_core::testing::server_frame(true, 1, &payload);
    std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        accept_upgrade(&mut sock);
        for piece in frame.chunks(PIECE) {
            if sock.write_all(piece).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Keep the connection open until the client is done.
        let mut buf = [0u8; 4096];
        while matches!(sock.read(&mut buf), Ok(n) if n > 0) {}
    });
    let mut config = StreamConfig::binance_stream(&format!("ws://{addr}/ws"));
    // Without the probe's lower mark no read would come for ~1.6 s (32 KiB) and the stream
    // would be ended as silent at 1 s; with it, the server may stall up to 1 s unnoticed.
    config.timeouts.idle = Some(Duration::from_millis(500));
    config.timeouts.probe_answer = Duration::from_millis(500);
    config.reconnect.enabled = false;
    let mut s = adapter.start(config, None, CAPACITY);
    loop {
        match next(s.as_mut()) {
            Some(StreamEvent::Data { payload: got, .. }) => {
                assert!(got == payload, "{} bytes", got.len());
                break;
            }
            Some(StreamEvent::Reconnecting { reason, .. }) => {
                panic!("ended while the frame arrived: {reason:?}")
            }
            Some(StreamEvent::Closed { .. } | StreamEvent::Crashed(_)) => {
                panic!("ended while the frame arrived")
            }
            Some(_) => {}
            None => panic!("ended while the frame arrived"),
        }
    }
    s.stop();
}

/// Betfair lines over TLS: authentication, market and order subscriptions, every mcm line.
pub fn betfair_lines_over_tls(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        count: Some(5_000),
        tls: true,
        hold_open: true,
        ..ReplayConfig::new(Scenario::BetfairMcm)
    });
    let auth = BetfairAuth {
        app_key: "k".into(),
        session: "s".into(),
    };
    let mut s = start(adapter, StreamConfig::betfair(&srv.url(), auth), &srv);
    let sub = BetfairSubscription {
        filter_json: r#"{"marketIds":["1.2345"]}"#.into(),
        data_filter_json: None,
        heartbeat_ms: Some(5000),
        conflate_ms: None,
    };
    s.subscribe_markets(sub.clone()).unwrap();
    s.subscribe_orders(BetfairSubscription {
        filter_json: "{}".into(),
        ..sub
    })
    .unwrap();
    let (data, others) = consume(s.as_mut(), 5_000);
    assert_eq!(data, 5_000);
    assert!(others.contains(&StreamEvent::Authenticated), "{others:?}");
    let subscribed: Vec<_> = others
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Subscribed { streams, .. } => Some(streams.join(",")),
            _ => None,
        })
        .collect();
    assert_eq!(
        subscribed,
        ["marketSubscription", "orderSubscription"],
        "{others:?}"
    );
}

/// stop() on a stream receiving nothing: only our Close (and its echo) can end it.
pub fn stop_on_an_idle_stream(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        fault: Some(Fault::SilenceAfterSubscribe),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut s = start(
        adapter,
        StreamConfig::binance_stream(&srv.subscribe_url()),
        &srv,
    );
    s.subscribe(&["btcusdt@aggTrade"]).unwrap();
    wait_for(s.as_mut(), |e| matches!(e, StreamEvent::Subscribed { .. }));
    s.stop();
    assert_eq!(last_event(s.as_mut()), Some(CLOSED_BY_US));
}

/// crash() on a busy stream: the events end with the crash, no reconnect.
pub fn crash_on_a_busy_stream(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        count: Some(1_000_000),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut s = start(adapter, StreamConfig::binance_stream(&srv.url()), &srv);
    let mut data = 0;
    let mut end = None;
    while let Some(e) = next(s.as_mut()) {
        match e {
            StreamEvent::Data { .. } => {
                data += 1;
                if data == 1000 {
                    s.crash("test");
                }
            }
            StreamEvent::Crashed(r) => end = Some(r),
            StreamEvent::Reconnecting { .. } => panic!("no reconnect after crash"),
            _ => {}
        }
    }
    assert_eq!(end, Some(EndReason::UserCrash("test".into())));
    assert_eq!(srv.connections(), 1);
}

/// Reads a client's upgrade request from `sock` (a socket, or a TLS stream over one) and
/// answers 101 (a loopback server's side of the handshake, for tests that then write frames
/// by hand).
pub fn accept_upgrade(sock: &mut (impl Read + Write)) {
    let mut buf = [0u8; 4096];
    let mut head = Vec::new();
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = sock.read(&mut buf).expect("upgrade request");
        assert!(n > 0, "the client left during the handshake");
        head.extend_from_slice(&buf[..n]);
    }
    sock.write_all(&accept_response(&head)).expect("101");
}

/// A WebSocket server for one client that, `delay` after the upgrade, writes `count` small
/// text messages `gap` apart, each its own segment (`TCP_NODELAY`), then reads until the
/// client goes: a paced feed whose arrivals a test can count wake-ups against.
pub fn paced_segments_server(
    count: usize,
    delay: Duration,
    gap: Duration,
) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().expect("accept");
        accept_upgrade(&mut sock);
        sock.set_nodelay(true).expect("nodelay");
        let frame = feedwire_core::testing::server_frame(true, 1, br#"{"e":"x"}"#);
        std::thread::sleep(delay);
        for _ in 0..count {
            sock.write_all(&frame).expect("a paced message");
            std::thread::sleep(gap);
        }
        while matches!(sock.read(&mut [0; 512]), Ok(n) if n > 0) {}
    });
    (addr, server)
}

/// The `n`th Ping's payload: its number, padded to the largest control payload.
fn ping_payload(n: usize) -> [u8; 125] {
    let mut payload = [b'.'; 125];
    let digits = n.to_string();
    payload[..digits.len()].copy_from_slice(digits.as_bytes());
    payload
}

/// A peer that floods Pings and reads nothing: the client keeps reading, and what it queues
/// for the peer stays bounded — when the peer finally reads, it finds at most the kernel's
/// buffers and the adapter's backlog of Pongs, not one per Ping — and the latest Ping is
/// answered. Then data still flows.
pub fn a_ping_flood_from_a_peer_that_does_not_read_stays_bounded(adapter: &dyn Adapter) {
    const FLOOD: usize = 16 << 20; // bytes of Pings
    const PING: usize = 125 + 2;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        accept_upgrade(&mut sock);
        // A client that stopped reading would block this write: fail instead of hanging.
        sock.set_write_timeout(Some(TIMEOUT)).unwrap();
        let mut batch = Vec::with_capacity(1024 * PING);
        let mut pings = 0usize;
        while pings * PING < FLOOD {
            batch.clear();
            for _ in 0..1024 {
                feedwire_core::push_server_frame(&mut batch, true, 9, &ping_payload(pings));
                pings += 1;
            }
            sock.write_all(&batch)
                .expect("the client keeps reading Pings");
        }
        let last = ping_payload(pings - 1).to_vec();
        // Now read what the client queued meanwhile, until it has been quiet a while.
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut received = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match sock.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        let frames = feedwire_core::testing::decode_client_frames(&received);
        sock.write_all(&feedwire_core::testing::server_frame(
            true,
            1,
            b"after the flood",
        ))
        .unwrap();
        (pings, received.len(), frames, last, sock)
    });
    let mut s = adapter.start(
        StreamConfig::binance_stream(&format!("ws://{addr}/ws")),
        None,
        CAPACITY,
    );
    wait_for(
        s.as_mut(),
        |e| matches!(e, StreamEvent::Data { payload, .. } if payload == "after the flood"),
    );
    let (pings, received, frames, last, _sock) = peer.join().expect("peer");
    assert!(frames.iter().all(|(_, op, _)| *op == 0xA), "only Pongs");
    // Unbounded, the client would have queued a Pong per Ping: 16 MiB of them. Bounded, the
    // peer finds what the two sockets' buffers and the adapter's backlog hold.
    assert!(
        received < 4 << 20,
        "{received} bytes of Pongs queued for {pings} Pings"
    );
    assert_eq!(
        frames.last().map(|f| &f.2),
        Some(&last),
        "the latest Ping answered"
    );
    // (This peer would not answer a Close: end at once.)
    s.crash("done");
    while next(s.as_mut()).is_some() {}
}

/// An unanswered request times out, reported to its caller only, once.
pub fn unanswered_request_times_out(adapter: &dyn Adapter) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        accept_upgrade(&mut sock);
        let mut buf = [0u8; 4096];
        while matches!(sock.read(&mut buf), Ok(n) if n > 0) {}
    });
    let mut config = StreamConfig::binance_ws_api(&format!("ws://{addr}/ws-api/v3"));
    config.router.request_timeout = Duration::from_millis(300);
    let mut s = adapter.start(config, None, CAPACITY);
    wait_for(s.as_mut(), |e| matches!(e, StreamEvent::Opened { .. }));
    let err = s.request("time").unwrap_err();
    assert!(err.contains("timed out"), "{err}");
    s.crash("done");
    while let Some(e) = next(s.as_mut()) {
        assert!(
            !matches!(e, StreamEvent::RequestTimedOut { .. }),
            "reported to the caller only"
        );
    }
}

/// A server that sends one and a half frames, waits for the client's Close, then sends the
/// rest of the frame and echoes the Close.
fn half_frame_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        accept_upgrade(&mut sock);
        let mut buf = [0u8; 4096];
        let mut out = Vec::new();
        let frame = |p: &[u8]| [&[0x81, p.len() as u8][..], p].concat();
        out.extend(frame(br#"{"e":"first"}"#));
        let second = frame(br#"{"e":"second, arriving in two halves"}"#);
        out.extend(&second[..10]);
        sock.write_all(&out).unwrap();
        // Wait for the client's Close, then finish the frame and echo.
        loop {
            let n = sock.read(&mut buf).unwrap();
            if n == 0 || buf[..n].contains(&0x88) {
                break;
            }
        }
        sock.write_all(&second[10..]).unwrap();
        sock.write_all(&[0x88, 0x02, 0x03, 0xE8]).unwrap();
    });
    addr
}

/// stop() while a message is half received: the message still arrives, then Closed.
pub fn stop_with_a_half_received_message(adapter: &dyn Adapter) {
    let addr = half_frame_server();
    let mut config = StreamConfig::binance_stream(&format!("ws://{addr}/stream?streams=a@b"));
    config.reconnect.enabled = false;
    let mut s = adapter.start(config, None, CAPACITY);
    wait_for(
        s.as_mut(),
        |e| matches!(e, StreamEvent::Data { payload, .. } if payload == "{\"e\":\"first\"}"),
    );
    s.stop();
    let mut rest = Vec::new();
    while let Some(e) = next(s.as_mut()) {
        rest.push(e);
    }
    assert!(
        matches!(&rest[0], StreamEvent::Data { payload, .. } if payload.starts_with(b"{\"e\":\"second")),
        "{rest:?}"
    );
    assert_eq!(rest.last(), Some(&CLOSED_BY_US));
}

/// Dropping the event receiver stops the stream.
pub fn dropping_the_events_stops_the_stream(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        count: Some(1_000_000),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut s = start(adapter, StreamConfig::binance_stream(&srv.url()), &srv);
    wait_for(s.as_mut(), |e| matches!(e, StreamEvent::Data { .. }));
    s.drop_events();
    wait_until_closed(s.as_ref());
}

/// Dropping the event receiver of a quiet stream (open, nothing arriving; its handle kept)
/// stops it too. Both adapters noticed the drop only when the stream's next events found
/// nobody: a quiet stream stayed connected, reconnecting when it dropped, for as long as
/// its handle (a whole mio loop's) lived.
pub fn dropping_the_events_of_a_quiet_stream_stops_it(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        count: Some(0),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    // Nothing else may wake the stream within the test's time: no first-data wait, no idle
    // probe, and a connect deadline (whose timer may stay armed, stale, after the
    // connection opened) well past it.
    let mut config = StreamConfig::binance_stream(&srv.url());
    config.timeouts.first_data = None;
    config.timeouts.idle = None;
    config.timeouts.connect = 3 * TIMEOUT;
    let mut s = start(adapter, config, &srv);
    wait_for(s.as_mut(), |e| matches!(e, StreamEvent::Opened { .. }));
    s.drop_events();
    wait_until_closed(s.as_ref());
}

/// Waits (at most [`TIMEOUT`]) for the stream's statistics to say it is closed.
fn wait_until_closed(s: &dyn Session) {
    let deadline = Instant::now() + TIMEOUT;
    // State 5 is Closed (see StatsSnapshot::state).
    while s.stats().state != 5 {
        assert!(
            Instant::now() < deadline,
            "still in state {}",
            s.stats().state
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (at most [`TIMEOUT`]) for the stream's read buffer and its TLS session's buffers to
/// be given back; then, how long before now its last read was (the stream's own stamp, so
/// the consumer's pace does not enter it).
fn wait_until_released(s: &dyn Session, what: &str) -> Duration {
    let started = Instant::now();
    loop {
        let stats = s.stats();
        if stats.read_buffer_bytes == 0 && stats.tls_buffer_bytes == 0 {
            break;
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "{what}: never released ({} bytes read buffer, {} TLS)",
            stats.read_buffer_bytes,
            stats.tls_buffer_bytes
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let last_read = s.stats().last_receive.expect("the stream has read");
    Instant::now().saturating_duration_since(last_read)
}

/// What a stream's TLS session holds (`StatsSnapshot::tls_buffer_bytes`): within `over_tls`
/// over TLS, nothing without it.
fn assert_tls_buffer(tls: bool, held: u64, over_tls: impl std::ops::RangeBounds<u64>) {
    if tls {
        assert!(over_tls.contains(&held), "TLS buffers hold {held} bytes");
    } else {
        assert_eq!(held, 0, "no TLS, no TLS buffers");
    }
}

/// A stream quiet for a second (`Timeouts::release_read_memory`) gives its read buffer back
/// — over TLS too, where the adapter then frees the session's ciphertext buffer — and works
/// on: the next read takes a buffer again, and the next quiet second gives it back again.
pub fn quiet_streams_give_their_read_memory_back(adapter: &dyn Adapter) {
    for tls in [false, true] {
        let srv = replay(ReplayConfig {
            count: Some(100),
            tls,
            hold_open: true,
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        });
        let mut s = start(adapter, StreamConfig::binance_stream(&srv.url()), &srv);
        let mut data = 0;
        while data < 100 {
            if let Some(StreamEvent::Data { .. }) = next(s.as_mut()) {
                data += 1;
            }
        }
        let busy = s.stats();
        assert!(
            busy.read_buffer_bytes > 0,
            "tls={tls}: a stream just read holds its buffer"
        );
        // The session's ciphertext buffer is allocated whole: 64 KiB for a read and room
        // for a partial record.
        assert_tls_buffer(tls, busy.tls_buffer_bytes, 64 * 1024 + 1..);
        // Exact, not a guess at scheduling: the release comes from a timer that fires no
        // sooner than a second after the last read, and `now` is later still.
        let quiet = wait_until_released(s.as_ref(), &format!("tls={tls}"));
        assert!(
            quiet >= Duration::from_secs(1),
            "tls={tls}: released with the last read {quiet:?} ago, within a quiet second"
        );
        // A request's answer is a read: the stream works on, and goes quiet again.
        let reads = s.stats().reads;
        s.list_subscriptions().unwrap();
        assert_eq!(
            listed_streams(s.as_mut()),
            ["btcusdt@aggTrade"],
            "tls={tls}"
        );
        assert!(s.stats().reads > reads, "tls={tls}: the answer was read");
        let woken = s.stats();
        assert!(
            woken.read_buffer_bytes > 0,
            "tls={tls}: the read took a buffer again"
        );
        // A page for the answer's record (and the request's room in the outbox), not the
        // whole buffer again.
        assert_tls_buffer(tls, woken.tls_buffer_bytes, 4096..16 * 1024);
        let quiet = wait_until_released(s.as_ref(), &format!("tls={tls}, after the answer"));
        assert!(
            quiet >= Duration::from_secs(1),
            "tls={tls}: {quiet:?} after the answer"
        );
        s.stop();
        assert_eq!(last_event(s.as_mut()), Some(CLOSED_BY_US), "tls={tls}");
    }
}

/// A consumer that stops taking events makes the adapter stop reading: memory stays
/// bounded, and nothing is dropped.
pub fn slow_consumer_keeps_memory_bounded(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        count: Some(300_000),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut s = adapter.start(StreamConfig::binance_stream(&srv.url()), None, 64);
    wait_for(s.as_mut(), |e| matches!(e, StreamEvent::Data { .. }));
    std::thread::sleep(Duration::from_millis(300));
    let stalled = s.stats().messages_received;
    assert!(
        stalled < 20_000,
        "read {stalled} messages while the consumer slept"
    );
    s.stop();
    let (data, _) = consume(s.as_mut(), usize::MAX);
    assert!(
        data as u64 + 1 >= stalled,
        "nothing dropped: {data} of {stalled}"
    );
}

/// Every data message carries the time of the read that completed it: within the run,
/// never earlier than a message before it, and — a firehose takes many reads — not one
/// stamp for all.
pub fn data_is_stamped_with_its_read_time(adapter: &dyn Adapter) {
    const COUNT: usize = 100_000;
    let srv = replay(ReplayConfig {
        count: Some(COUNT),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let started = Instant::now();
    let mut s = start(adapter, StreamConfig::binance_stream(&srv.url()), &srv);
    let mut stamps = Vec::with_capacity(COUNT);
    while let Some(e) = next(s.as_mut()) {
        if let StreamEvent::Data { received, .. } = e {
            stamps.push(received);
            if stamps.len() == COUNT {
                s.stop();
            }
        }
    }
    let ended = Instant::now();
    assert_eq!(stamps.len(), COUNT);
    assert!(
        stamps.windows(2).all(|w| w[0] <= w[1]),
        "stamps in read order"
    );
    assert!(
        started <= stamps[0] && stamps[COUNT - 1] <= ended,
        "within the run"
    );
    assert!(stamps[0] < stamps[COUNT - 1], "many reads, not one stamp");
}

/// A certificate from an untrusted CA: a typed TLS error, never data; a stream never open
/// ends at once, or (`PermanentFailure::Retry`) keeps trying.
pub fn untrusted_certificate_is_a_typed_error(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        tls: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut config = StreamConfig::binance_stream(&srv.url());
    let mut s = adapter.start(config.clone(), None, CAPACITY);
    let mut end = None;
    while let Some(e) = next(s.as_mut()) {
        match e {
            StreamEvent::Data { .. } => panic!("data over an unverified connection"),
            StreamEvent::Reconnecting { reason, .. } => panic!("retried: {reason}"),
            StreamEvent::Crashed(reason) => end = Some(reason),
            _ => {}
        }
    }
    assert!(
        matches!(&end, Some(EndReason::Tls(f)) if f.certificate),
        "{end:?}"
    );

    config.reconnect.permanent = PermanentFailure::Retry;
    let mut s = adapter.start(config, None, CAPACITY);
    let mut reason = None;
    while let Some(e) = next(s.as_mut()) {
        match e {
            StreamEvent::Data { .. } => panic!("data over an unverified connection"),
            StreamEvent::Reconnecting { reason: r, .. } => {
                reason = Some(r);
                s.crash("seen");
            }
            _ => {}
        }
    }
    assert!(
        matches!(&reason, Some(EndReason::Tls(f)) if f.certificate),
        "{reason:?}"
    );
}

/// An upgrade refused with 404 (a wrong path) ends a stream never open: the mistake shows
/// at once, not as retries for ever.
pub fn a_wrong_path_ends_a_stream_never_open(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        fault: Some(Fault::RefuseUpgrade(404)),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut s = start(adapter, StreamConfig::binance_stream(&srv.url()), &srv);
    let mut events = Vec::new();
    while let Some(e) = next(s.as_mut()) {
        events.push(e);
    }
    let refused = matches!(
        events.last(),
        Some(StreamEvent::Crashed(EndReason::WebSocket(
            Error::Handshake(HandshakeError::Rejected { status: 404, .. })
        )))
    );
    assert!(refused, "{events:?}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, StreamEvent::Reconnecting { .. })),
        "{events:?}"
    );
}

/// Reset and close-mid-frame: every complete message once, in order, then a reconnect.
pub fn faults_reconnect_without_loss_or_duplicates(adapter: &dyn Adapter) {
    for (fault, expect) in [
        (Fault::Reset { after: 100 }, 100usize),
        (Fault::CloseMidFrame { after: 250 }, 250),
    ] {
        let srv = replay(ReplayConfig {
            fault: Some(fault),
            count: Some(1000),
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        });
        let mut s = start(adapter, StreamConfig::binance_stream(&srv.url()), &srv);
        let (mut got, mut reconnects) = (Vec::new(), 0);
        while let Some(e) = next(s.as_mut()) {
            match e {
                StreamEvent::Data { payload, .. } if reconnects == 0 => got.push(payload),
                StreamEvent::Reconnecting { .. } => {
                    reconnects += 1;
                    s.stop();
                }
                _ => {}
            }
        }
        assert_eq!((reconnects, got.len()), (1, expect), "{fault:?}");
        assert!(
            got.iter().enumerate().all(|(i, p)| p == srv.payload(i)),
            "{fault:?}"
        );
    }
}

/// Make-before-break after a `serverShutdown` notice (`PlannedReconnect::Advise`): the
/// stream reports it and goes on delivering on the same connection; the application starts
/// a second stream and stops the first once the second delivers. The first never
/// reconnects; nothing between is missed. Left alone, the stream replaces the connection
/// itself when the grace ends.
pub fn a_reported_shutdown_keeps_the_connection_until_replaced(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        fault: Some(Fault::ServerShutdown { after: 100 }),
        count: Some(1000),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let advising = |grace| {
        let mut c = StreamConfig::binance_stream(&srv.url());
        c.reconnect.planned = PlannedReconnect::Advise { grace };
        c
    };
    let is_notice = |p: &[u8]| p.starts_with(br#"{"e":"serverShutdown""#);
    let config = advising(Duration::from_secs(60));
    let mut old = start(adapter, config.clone(), &srv);
    let (mut got, mut due_after) = (Vec::new(), None);
    while got.len() < 1000 {
        match next(old.as_mut()) {
            Some(StreamEvent::Data { payload, .. }) if !is_notice(&payload) => got.push(payload),
            Some(StreamEvent::ReconnectDue { reason, .. }) => {
                assert_eq!(reason, EndReason::ServerShutdown);
                due_after = Some(got.len());
            }
            Some(e @ (StreamEvent::Reconnecting { .. } | StreamEvent::Closed { .. })) => {
                panic!("{e:?}")
            }
            Some(_) => {}
            None => panic!("ended"),
        }
    }
    assert_eq!(due_after, Some(100));
    assert!(got.iter().enumerate().all(|(i, p)| p == srv.payload(i)));
    let mut new = start(adapter, config, &srv);
    wait_for(new.as_mut(), |e| matches!(e, StreamEvent::Data { .. }));
    old.stop();
    assert_eq!(last_event(old.as_mut()), Some(CLOSED_BY_US));
    new.stop();
    assert_eq!(last_event(new.as_mut()), Some(CLOSED_BY_US));

    let mut left = start(adapter, advising(Duration::from_millis(200)), &srv);
    let deadline = loop {
        match next(left.as_mut()) {
            Some(StreamEvent::ReconnectDue { deadline, .. }) => break deadline,
            Some(_) => {}
            None => panic!("ended"),
        }
    };
    wait_for(left.as_mut(), |e| {
        matches!(e, StreamEvent::Reconnecting { reason, planned: true, delay, .. }
            if *reason == EndReason::ServerShutdown && delay.is_zero())
    });
    assert!(Instant::now() >= deadline, "not before the grace ended");
    wait_for(left.as_mut(), |e| {
        matches!(e, StreamEvent::Opened { reconnected: true })
    });
    left.stop();
    assert_eq!(last_event(left.as_mut()), Some(CLOSED_BY_US));
}

/// Make-before-break on a live feed (one numbered feed for every connection, as an
/// exchange's): at `ReconnectDue` the application starts a second stream with the first
/// one's subscriptions (as the first has them), takes both, and stops the first once the
/// second has reached what the first delivered. Each stream's messages are consecutive, and
/// together (merged by the feed's numbers) they miss nothing.
pub fn make_before_break_on_a_live_feed_misses_nothing(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        mode: Mode::Live { per_sec: 20_000 },
        fault: Some(Fault::ServerShutdown { after: 1_000 }),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut config = StreamConfig::binance_stream(&srv.subscribe_url());
    config.reconnect.planned = PlannedReconnect::Advise {
        grace: Duration::from_secs(60),
    };
    let mut old = start(adapter, config.clone(), &srv);
    old.subscribe(&["btcusdt@aggTrade", "ethusdt@aggTrade", "bnbusdt@aggTrade"])
        .unwrap();
    old.unsubscribe(&["ethusdt@aggTrade"]).unwrap();
    let mut from_old = Vec::new();
    loop {
        let e = next(old.as_mut());
        if matches!(e, Some(StreamEvent::ReconnectDue { .. })) {
            break;
        }
        numbered(e, &mut from_old);
    }
    let subscriptions = old.subscriptions().unwrap();
    assert_eq!(subscriptions, ["bnbusdt@aggTrade", "btcusdt@aggTrade"]);
    let mut new = start(adapter, config, &srv);
    let names: Vec<&str> = subscriptions.iter().map(String::as_str).collect();
    new.subscribe(&names).unwrap();
    let mut from_new = Vec::new();
    let give_up = Instant::now() + TIMEOUT;
    // Until the old stream has delivered the new one's first message.
    while from_new
        .first()
        .is_none_or(|first| from_old.last() < Some(first))
    {
        assert!(Instant::now() < give_up, "no overlap");
        take_ready(old.as_mut(), &mut from_old);
        take_ready(new.as_mut(), &mut from_new);
    }
    old.stop();
    loop {
        match next(old.as_mut()) {
            Some(StreamEvent::Closed { .. }) => break,
            e => numbered(e, &mut from_old),
        }
    }
    let old_last = *from_old.last().unwrap();
    while from_new.last().is_none_or(|&l| l < old_last + 100) {
        numbered(next(new.as_mut()), &mut from_new);
    }
    new.stop();
    let consecutive = |seqs: &[u64]| seqs.windows(2).all(|w| w[1] == w[0] + 1);
    assert!(consecutive(&from_old), "old: {from_old:?}");
    assert!(consecutive(&from_new), "new: {from_new:?}");
    let mut merged: Vec<u64> = from_old.iter().chain(&from_new).copied().collect();
    merged.sort_unstable();
    merged.dedup();
    assert!(
        consecutive(&merged),
        "a gap between {old_last} and {from_new:?}"
    );
}

/// A data event's number in a live feed into `seqs` (the shutdown notice has none); any end
/// of the stream, or of its connection, fails the test.
fn numbered(e: Option<StreamEvent>, seqs: &mut Vec<u64>) {
    match e {
        Some(StreamEvent::Data { payload, .. }) => seqs.extend(feed_seq(&payload)),
        Some(
            e @ (StreamEvent::Reconnecting { .. }
            | StreamEvent::Closed { .. }
            | StreamEvent::Crashed(_)),
        ) => panic!("{e:?}"),
        Some(_) => {}
        None => panic!("ended"),
    }
}

/// The events `s` has ready now (within a millisecond each), through [`numbered`]: at most
/// 64, so that a stream whose events keep coming does not keep its peer waiting.
fn take_ready(s: &mut dyn Session, seqs: &mut Vec<u64>) {
    for _ in 0..64 {
        let Ok(e) = s.next_event(Duration::from_millis(1)) else {
            return;
        };
        numbered(e, seqs);
    }
}

/// 503 on the upgrade: back off and retry.
pub fn refused_upgrades_back_off_and_retry(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        fault: Some(Fault::RefuseUpgrade(503)),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut s = start(adapter, StreamConfig::binance_stream(&srv.url()), &srv);
    let mut retries = 0;
    while let Some(e) = next(s.as_mut()) {
        if let StreamEvent::Reconnecting { reason, .. } = e {
            let refused = matches!(
                reason,
                EndReason::WebSocket(Error::Handshake(HandshakeError::Rejected {
                    status: 503,
                    ..
                }))
            );
            assert!(refused, "{reason:?}");
            retries += 1;
            if retries == 3 {
                s.crash("enough");
            }
        }
    }
    assert_eq!(retries, 3);
}

/// Silence after the subscription: the first-data timeout reconnects.
pub fn silence_after_subscribe_hits_the_first_data_timeout(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        fault: Some(Fault::SilenceAfterSubscribe),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut config = StreamConfig::binance_stream(&srv.subscribe_url());
    config.timeouts.first_data = Some(Duration::from_millis(300));
    let mut s = start(adapter, config, &srv);
    s.subscribe(&["btcusdt@aggTrade"]).unwrap();
    let mut reason = None;
    while let Some(e) = next(s.as_mut()) {
        if let StreamEvent::Reconnecting { reason: r, .. } = e {
            reason = Some(r);
            s.stop();
        }
    }
    assert_eq!(reason, Some(EndReason::FirstDataTimeout));
}

/// Data for a while (the idle deadline moves on every read), then a peer gone half-open
/// (no data, no pong): the idle timeout probes once and ends the connection — not while
/// data flows (every message arrived first), not never (within the event timeout) —
/// whatever the adapter does with deadlines that keep moving.
pub fn silence_after_data_hits_the_idle_timeout(adapter: &dyn Adapter) {
    const MESSAGES: usize = 1500;
    let srv = replay(ReplayConfig {
        mode: feedwire_replay::Mode::Paced { per_sec: 5_000 },
        fault: Some(Fault::GoSilent { after: MESSAGES }),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut config = StreamConfig::binance_stream(&srv.subscribe_url());
    config.timeouts.idle = Some(Duration::from_millis(300));
    config.timeouts.probe_answer = Duration::from_millis(300);
    let mut s = start(adapter, config, &srv);
    s.subscribe(&["btcusdt@aggTrade"]).unwrap();
    let (mut data, mut reason) = (0, None);
    while let Some(e) = next(s.as_mut()) {
        match e {
            StreamEvent::Data { .. } => data += 1,
            StreamEvent::Reconnecting { reason: r, .. } => {
                assert_eq!(data, MESSAGES, "the idle timeout fired while data flowed");
                reason = Some(r);
                s.stop();
            }
            _ => {}
        }
    }
    assert_eq!(data, MESSAGES);
    assert_eq!(reason, Some(EndReason::IdleTimeout));
}

/// A quiet stream whose server answers each probe (a Pong, and nothing else) stays open
/// through probe after probe: the answer, however small, wakes the adapter — while a probe is
/// out it reads every byte — and counts as life, within `probe_answer`.
pub fn a_quiet_stream_whose_probes_are_answered_stays_open(adapter: &dyn Adapter) {
    const IDLE: Duration = Duration::from_millis(100);
    // Generous for a loopback Pong on a loaded machine; unanswered, a probe would still end
    // the connection well within the quiet time.
    const ANSWER: Duration = Duration::from_secs(1);
    const QUIET_FOR: Duration = Duration::from_secs(2);
    let srv = replay(ReplayConfig {
        count: Some(0),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut config = StreamConfig::binance_stream(&srv.url());
    config.timeouts.first_data = None;
    config.timeouts.idle = Some(IDLE);
    config.timeouts.probe_answer = ANSWER;
    let mut s = start(adapter, config, &srv);
    wait_for(s.as_mut(), |e| matches!(e, StreamEvent::Opened { .. }));
    match s.next_event(QUIET_FOR) {
        Err(()) => {}
        Ok(e) => panic!("the quiet stream changed: {e:?}"),
    }
    assert_eq!(s.stats().reconnects, 0);
    assert_eq!(srv.connections(), 1);
    s.stop();
    assert_eq!(last_event(s.as_mut()), Some(CLOSED_BY_US));
}

/// Three streams given one connect budget of two attempts a second: two connect at once, the
/// third waits for its turn — a second after the first — and then opens and receives like
/// the others. (Only a lower bound on the wait is checked: a loaded machine can only make
/// it longer.)
pub fn streams_sharing_a_connect_budget_take_turns(adapter: &dyn Adapter) {
    const WINDOW: Duration = Duration::from_secs(1);
    let srv = replay(ReplayConfig {
        count: Some(10),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let budget = feedwire_core::ConnectBudget::new(2, WINDOW).expect("budget");
    let started = Instant::now();
    let mut streams: Vec<Box<dyn Session>> = (0..3)
        .map(|_| {
            let config = StreamConfig {
                connect_budget: Some(budget.clone()),
                ..StreamConfig::binance_stream(&srv.url())
            };
            start(adapter, config, &srv)
        })
        .collect();
    let mut opened = Vec::new();
    for s in &mut streams {
        wait_for(s.as_mut(), |e| matches!(e, StreamEvent::Opened { .. }));
        opened.push(started.elapsed());
        let (data, _) = consume(s.as_mut(), 10);
        assert_eq!(data, 10);
    }
    assert!(
        opened[2] >= WINDOW,
        "the third opened after {:?}",
        opened[2]
    );
    assert_eq!(srv.connections(), 3);
}

/// A Betfair subscription to one market, all fields as the server defaults them.
fn one_market() -> BetfairSubscription {
    BetfairSubscription {
        filter_json: r#"{"marketIds":["1.2345"]}"#.into(),
        data_filter_json: None,
        heartbeat_ms: None,
        conflate_ms: None,
    }
}

/// A Betfair stream to `srv` subscribed to [`one_market`], reconnecting after 10 ms at first.
fn subscribed_to_one_market(adapter: &dyn Adapter, srv: &ReplayServer) -> Box<dyn Session> {
    let auth = BetfairAuth {
        app_key: "k".into(),
        session: "s".into(),
    };
    let mut config = StreamConfig::betfair(&srv.url(), auth);
    config.reconnect.initial_delay = Duration::from_millis(10);
    let mut s = start(adapter, config, srv);
    s.subscribe_markets(one_market()).unwrap();
    s
}

/// A Betfair session token renewed by a new login while the stream runs: with the new
/// token set on the stream, the login after a reconnect succeeds and data flows on; without,
/// that login is refused (`INVALID_SESSION_INFORMATION`, as Betfair refuses an expired
/// token) and the stream crashes with the refusal as the reason.
pub fn a_renewed_betfair_session_is_used_after_a_reconnect(adapter: &dyn Adapter) {
    for renew_on_the_stream in [true, false] {
        let srv = replay(ReplayConfig {
            mode: feedwire_replay::Mode::Paced { per_sec: 2_000 },
            // Each connection goes half-open after 50 lines: the idle timeout reconnects, two
            // idle periods later — time enough to renew the token before that, even on a
            // loaded machine.
            fault: Some(Fault::GoSilent { after: 50 }),
            ..ReplayConfig::new(Scenario::BetfairMcm)
        });
        let auth = |session: &str| BetfairAuth {
            app_key: "k".into(),
            session: session.into(),
        };
        let mut config = StreamConfig::betfair(&srv.url(), auth("first"));
        config.timeouts.idle = Some(Duration::from_secs(1));
        config.timeouts.probe_answer = Duration::from_secs(1);
        let mut s = start(adapter, config, &srv);
        s.subscribe_markets(one_market()).unwrap();
        wait_for(s.as_mut(), |e| *e == StreamEvent::Authenticated);
        srv.require_betfair_session("renewed");
        if renew_on_the_stream {
            s.set_betfair_auth(auth("renewed")).unwrap();
        }
        let (mut reconnects, mut data_after) = (0, 0);
        let end = loop {
            match next(s.as_mut()) {
                Some(StreamEvent::Reconnecting { .. }) => reconnects += 1,
                Some(StreamEvent::Data { .. }) if reconnects > 0 => {
                    data_after += 1;
                    if data_after == 50 {
                        s.stop();
                    }
                }
                Some(StreamEvent::Crashed(reason)) => break Some(reason),
                Some(_) => {}
                None => break None,
            }
        };
        if renew_on_the_stream {
            assert_eq!((end, data_after), (None, 50));
        } else {
            let Some(EndReason::FatalResponse(refusal)) = end else {
                panic!("{end:?}")
            };
            let refusal = String::from_utf8_lossy(&refusal);
            assert!(refusal.contains("INVALID_SESSION_INFORMATION"), "{refusal}");
        }
    }
}

/// Betfair refuses the logins of a client at its account's connection limit (a network blip:
/// the server has not seen the old connections go yet): the stream tries again after the
/// backoff, keeps its subscription, and data flows once a login is taken — it used to crash
/// on the first refusal.
pub fn a_betfair_login_refused_for_now_is_tried_again(adapter: &dyn Adapter) {
    const REFUSED: u64 = 2;
    let srv = replay(ReplayConfig {
        count: Some(100),
        hold_open: true,
        ..ReplayConfig::new(Scenario::BetfairMcm)
    });
    srv.refuse_betfair_logins_for_now(REFUSED);
    let mut s = subscribed_to_one_market(adapter, &srv);
    let (mut refused, mut data) = (0, 0);
    while let Some(e) = next(s.as_mut()) {
        match e {
            StreamEvent::Reconnecting {
                reason: EndReason::RefusedForNow(refusal),
                ..
            } => {
                let refusal = String::from_utf8_lossy(&refusal);
                assert!(
                    refusal.contains("MAX_CONNECTION_LIMIT_EXCEEDED"),
                    "{refusal}"
                );
                refused += 1;
            }
            StreamEvent::Data { .. } => {
                data += 1;
                if data == 100 {
                    s.stop();
                }
            }
            StreamEvent::Crashed(reason) => panic!("crashed: {reason}"),
            _ => {}
        }
    }
    assert_eq!((refused, data), (REFUSED, 100));
}

/// An application that stops taking events for longer than the idle timeout and the probe's
/// answer together: the adapter holds its reads meanwhile (the socket fills), and when the
/// application goes on every message arrives on the same connection. The idle timer used to
/// run on through the pause — no reads, so a probe, no reads, so "stalled" — and the stream
/// reconnected, the bytes waiting in the socket lost with the connection.
pub fn a_consumer_paused_past_the_idle_timeout_loses_nothing(adapter: &dyn Adapter) {
    const COUNT: usize = 300_000;
    let srv = replay(ReplayConfig {
        count: Some(COUNT),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut config = StreamConfig::binance_stream(&srv.url());
    config.timeouts.idle = Some(Duration::from_millis(200));
    config.timeouts.probe_answer = Duration::from_millis(200);
    // A small buffer, as for the slow consumer: full within the pause, so reads are held.
    let mut s = adapter.start(config, None, 64);
    wait_for(s.as_mut(), |e| matches!(e, StreamEvent::Data { .. }));
    std::thread::sleep(Duration::from_millis(1500));
    let read = s.stats().messages_received;
    assert!(
        read < COUNT as u64,
        "reads were not held: {read} read in the pause"
    );
    let mut data = 1;
    while let Some(e) = next(s.as_mut()) {
        match e {
            StreamEvent::Data { .. } => {
                data += 1;
                if data == COUNT {
                    s.stop();
                }
            }
            StreamEvent::Reconnecting { reason, .. } => {
                panic!("reconnected after {data} messages: {reason}")
            }
            _ => {}
        }
    }
    assert_eq!(data, COUNT);
    assert_eq!(srv.connections(), 1);
}

/// Each connection is cut mid-line after `CUT` lines: every resubscription resumes from the
/// `clk` of the last line the application got — nothing missed, nothing twice — and from the
/// `initialClk` of the connection before, its image or, once resumed, its `RESUB_DELTA` (the
/// replay echoes each subscription's id in its lines, as Betfair does, so a reconnected
/// stream takes the new connection's first message as its own).
pub fn a_betfair_stream_resumes_from_the_last_line_it_delivered(adapter: &dyn Adapter) {
    const CUT: usize = 300;
    let srv = replay(ReplayConfig {
        fault: Some(Fault::CloseMidFrame { after: CUT }),
        ..ReplayConfig::new(Scenario::BetfairMcm)
    });
    let mut s = subscribed_to_one_market(adapter, &srv);
    let clk_of = |line: &[u8]| {
        let line = String::from_utf8_lossy(line);
        let start = line.find(r#""clk":""#).expect("a clk") + 7;
        let len = line[start..].find('"').expect("its end");
        line[start..start + len].to_owned()
    };
    let ct_of = |line: &[u8]| {
        let line = String::from_utf8_lossy(line);
        ["SUB_IMAGE", "RESUB_DELTA"]
            .into_iter()
            .find(|ct| line.contains(&format!(r#""ct":"{ct}""#)))
    };
    // Per connection: the lines delivered, the last one's `clk`, and the first one's `ct`.
    let (mut last_clk, mut cut_at, mut data) = (String::new(), Vec::new(), 0);
    let mut first_ct = Vec::new();
    while let Some(e) = next(s.as_mut()) {
        match e {
            StreamEvent::Data { payload, .. } => {
                if data == 0 {
                    first_ct.push(ct_of(&payload));
                }
                data += 1;
                last_clk = clk_of(&payload);
                if cut_at.len() == 2 {
                    s.stop();
                }
            }
            StreamEvent::Reconnecting { .. } => {
                assert_eq!(data, CUT, "every whole line of a cut connection");
                cut_at.push(last_clk.clone());
                data = 0;
            }
            StreamEvent::Crashed(reason) => panic!("crashed: {reason}"),
            _ => {}
        }
    }
    // A new subscription gets an image; one that resumes, what changed since its position.
    assert_eq!(
        first_ct,
        [Some("SUB_IMAGE"), Some("RESUB_DELTA"), Some("RESUB_DELTA")]
    );
    let subscriptions = srv.betfair_subscriptions();
    assert_eq!(subscriptions.len(), 3, "{subscriptions:?}");
    assert!(!subscriptions[0].contains("clk"), "{}", subscriptions[0]);
    // The positions: the first connection's image (request 2), the second's `RESUB_DELTA`
    // (request 4, after the login that is request 3).
    for (resubscription, (clk, image)) in
        subscriptions[1..].iter().zip(cut_at.iter().zip(["", "4"]))
    {
        let position = format!(r#""initialClk":"{BETFAIR_IMAGE_CLK}{image}","clk":"{clk}"}}"#);
        assert!(
            resubscription.ends_with(&position),
            "{resubscription} after {clk}"
        );
    }
}

/// A server that accepts and never answers the handshake: the connect timeout.
pub fn unanswered_handshake_hits_the_connect_timeout(adapter: &dyn Adapter) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept() {
            held.push(sock);
        }
    });
    let mut config = StreamConfig::binance_stream(&format!("ws://{addr}/ws"));
    config.timeouts.connect = Duration::from_millis(300);
    let mut s = adapter.start(config, None, CAPACITY);
    assert_eq!(
        first_attempt_end(s.as_mut()),
        Some(EndReason::ConnectTimeout)
    );
}

/// Why the stream's first attempt ended (its first `Reconnecting`); the stream is crashed
/// there and its events read to their end.
fn first_attempt_end(s: &mut dyn Session) -> Option<EndReason> {
    let mut reason = None;
    while let Some(e) = next(s) {
        if let StreamEvent::Reconnecting { reason: r, .. } = e {
            reason = Some(r);
            s.crash("seen");
        }
    }
    reason
}

/// A WebSocket API request resolves with its response.
pub fn ws_api_request_resolves(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig::new(Scenario::SmallAggTrade));
    let mut s = start(
        adapter,
        StreamConfig::binance_ws_api(&srv.subscribe_url()),
        &srv,
    );
    wait_for(s.as_mut(), |e| matches!(e, StreamEvent::Opened { .. }));
    let payload = s.request("time").unwrap();
    assert!(payload.starts_with(b"{\"id\":\""), "{payload:?}");
    assert!(std::str::from_utf8(&payload)
        .unwrap()
        .contains("\"status\":200"));
    s.stop();
    while next(s.as_mut()).is_some() {}
}

/// The streams a `LIST_SUBSCRIPTIONS` answer lists, from the next such answer (data and
/// other events skipped).
fn listed_streams(s: &mut dyn Session) -> Vec<String> {
    loop {
        match next(s) {
            Some(StreamEvent::Response {
                kind,
                payload,
                is_error: false,
                ..
            }) if *kind == RequestKind::ListSubscriptions => {
                let text = std::str::from_utf8(&payload).expect("UTF-8 answer");
                let list = text
                    .strip_prefix(r#"{"result":["#)
                    .and_then(|rest| rest.split_once(']'))
                    .map(|(list, _)| list)
                    .unwrap_or_else(|| panic!("a list answer: {text}"));
                return list
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.trim_matches('"').to_owned())
                    .collect();
            }
            Some(StreamEvent::UnsolicitedResponse { payload, .. }) => {
                panic!("the answer met no request: {payload:?}")
            }
            Some(_) => {}
            None => panic!("the stream ended first"),
        }
    }
}

/// `LIST_SUBSCRIPTIONS` answers list every stream before their id: with thirty streams the
/// id is far past the 256-byte head that classifies messages. Each answer still meets its
/// request (as a `Response` event), after a subscribe and after an unsubscribe.
pub fn many_subscriptions_are_listed(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        count: Some(100),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut s = start(
        adapter,
        StreamConfig::binance_stream(&srv.subscribe_url()),
        &srv,
    );
    let names: Vec<String> = (0..30).map(|i| format!("sym{i:03}usdt@aggTrade")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    s.subscribe(&refs).unwrap();
    wait_for(s.as_mut(), |e| matches!(e, StreamEvent::Subscribed { .. }));
    s.list_subscriptions().unwrap();
    assert_eq!(listed_streams(s.as_mut()), names);
    s.unsubscribe(&refs[..10]).unwrap();
    wait_for(s.as_mut(), |e| {
        matches!(e, StreamEvent::Unsubscribed { .. })
    });
    s.list_subscriptions().unwrap();
    assert_eq!(listed_streams(s.as_mut()), names[10..]);
    s.stop();
    assert_eq!(last_event(s.as_mut()), Some(CLOSED_BY_US));
}

/// An independent server (tokio-tungstenite on its own thread) that echoes data messages.
fn tungstenite_echo_server() -> SocketAddr {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let config = WebSocketConfig::default()
                        .max_message_size(Some(64 << 20))
                        .max_frame_size(Some(64 << 20));
                    let Ok(mut ws) =
                        tokio_tungstenite::accept_async_with_config(sock, Some(config)).await
                    else {
                        return;
                    };
                    while let Some(Ok(m)) = ws.next().await {
                        if (m.is_text() || m.is_binary()) && ws.send(m).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
    });
    rx.recv().unwrap()
}

/// Interop through the adapter: text and binary echoed by tokio-tungstenite, 0 B to 1 MiB.
pub fn interop_echo_0_bytes_to_1_mib(adapter: &dyn Adapter) {
    let addr = tungstenite_echo_server();
    let mut s = adapter.start(
        StreamConfig::binance_ws_api(&format!("ws://{addr}/echo")),
        None,
        CAPACITY,
    );
    wait_for(s.as_mut(), |e| matches!(e, StreamEvent::Opened { .. }));
    for len in [0usize, 1, 125, 126, 65535, 65536, 1 << 20] {
        let text = "é".repeat(len / 2);
        s.send_text(&text).unwrap();
        let binary: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        s.send_binary(&binary).unwrap();
        let mut echoed = Vec::new();
        while echoed.len() < 2 {
            match next(s.as_mut()) {
                Some(StreamEvent::Data { payload, .. }) => echoed.push(payload),
                Some(_) => {}
                None => panic!("ended"),
            }
        }
        assert_eq!(echoed[0], text.as_bytes(), "text {len}");
        assert_eq!(echoed[1], binary, "binary {len}");
    }
    s.stop();
    assert_eq!(last_event(s.as_mut()), Some(CLOSED_BY_US));
}

/// After a reset the stream reconnects by itself, resubscribes, and data flows again.
pub fn reconnect_resubscribes_and_data_flows_again(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        fault: Some(Fault::Reset { after: 100 }),
        count: Some(1000),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let mut s = start(
        adapter,
        StreamConfig::binance_stream(&srv.subscribe_url()),
        &srv,
    );
    s.subscribe(&["btcusdt@aggTrade"]).unwrap();
    let (mut before, mut after, mut resubscribed, mut reconnected) = (0, 0, false, false);
    while let Some(e) = next(s.as_mut()) {
        match e {
            StreamEvent::Data { .. } if !reconnected => before += 1,
            StreamEvent::Data { .. } => {
                after += 1;
                if after == 50 {
                    s.stop();
                }
            }
            StreamEvent::Opened { reconnected: true } => reconnected = true,
            StreamEvent::Resubscribed { count } => {
                assert_eq!(count, 1);
                resubscribed = true;
            }
            _ => {}
        }
    }
    assert_eq!(before, 100);
    assert!(reconnected && resubscribed);
    // Messages already received when stop() ran are still delivered.
    assert!(after >= 50, "{after}");
    assert!(srv.connections() >= 2);
    assert!(s.stats().reconnects >= 1);
}

/// A host name (resolved off the loop / by the runtime) reaches the same server as its
/// address: every message arrives.
pub fn host_names_are_resolved(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        count: Some(1000),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let url = srv.url().replace("127.0.0.1", "localhost");
    let mut s = start(adapter, StreamConfig::binance_stream(&url), &srv);
    let (data, _) = consume(s.as_mut(), 1000);
    assert_eq!(data, 1000, "{url}");
}

/// A listener on loopback that never answers a connect: its accept queue (of one) is
/// full, so further SYNs are dropped — what a blackholed address does. Keep both parts
/// alive for as long as the address must stay silent.
pub fn silent_address() -> (SocketAddr, std::net::TcpListener, std::net::TcpStream) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    let listener = rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
        socket.listen(0).expect("listen")
    });
    let listener = listener.into_std().expect("std listener");
    let addr = listener.local_addr().expect("addr");
    let queued = std::net::TcpStream::connect(addr).expect("the one queued connection");
    (addr, listener, queued)
}

/// Of two addresses, the first never answers (a blackholed route): the stream moves to the
/// second after `ADDRESS_FALLBACK` and opens within its first attempt. It used to wait on
/// the first for the whole connect timeout, then retry it first again, and never open.
pub fn a_silent_address_falls_back_to_the_next(adapter: &dyn Adapter) {
    let srv = replay(ReplayConfig {
        count: Some(100),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let (silent, _listener, _queued) = silent_address();
    let mut config = StreamConfig::binance_stream(&srv.url());
    config.connect_to = vec![silent, srv.addr()];
    let mut s = start(adapter, config, &srv);
    loop {
        match next(s.as_mut()) {
            Some(StreamEvent::Opened { .. }) => break,
            Some(e @ StreamEvent::Reconnecting { .. }) => panic!("not opened at once: {e:?}"),
            Some(_) => {}
            None => panic!("the stream ended first"),
        }
    }
    let (data, _) = consume(s.as_mut(), 100);
    assert_eq!(data, 100);
}

/// A single address that never answers has the stream's whole connect timeout, not
/// `ADDRESS_FALLBACK` (meant for an address with others after it): the attempt ends as a
/// connect timeout. (2.5 s: the fallback is 2 s.)
pub fn a_single_silent_address_has_the_whole_connect_timeout(adapter: &dyn Adapter) {
    let (silent, _listener, _queued) = silent_address();
    let mut config = StreamConfig::binance_stream(&format!("ws://{silent}/ws"));
    config.timeouts.connect = Duration::from_millis(2500);
    let mut s = adapter.start(config, None, CAPACITY);
    assert_eq!(
        first_attempt_end(s.as_mut()),
        Some(EndReason::ConnectTimeout)
    );
}

/// Declares one `#[test]` per shared scenario for `$adapter` (a unit struct implementing
/// [`Adapter`]): an adapter's test file is this one line, so no adapter can skip a scenario.
/// `@handler` declares those that apply to a delivery that cannot push back (a handler
/// called with every event): all but those about a full or dropped receiver.
#[macro_export]
macro_rules! adapter_scenarios {
    ($adapter:expr) => {
        $crate::adapter_scenarios!(@handler $adapter);
        $crate::adapter_scenarios!(@each $adapter;
            dropping_the_events_stops_the_stream,
            dropping_the_events_of_a_quiet_stream_stops_it,
            slow_consumer_keeps_memory_bounded,
            a_consumer_paused_past_the_idle_timeout_loses_nothing,
        );
    };
    (@handler $adapter:expr) => {
        $crate::adapter_scenarios!(@each $adapter;
            websocket_firehose,
            quiet_streams_give_their_read_memory_back,
            betfair_lines_over_tls,
            stop_on_an_idle_stream,
            crash_on_a_busy_stream,
            stop_with_a_half_received_message,
            large_messages_arrive_exactly,
            a_large_frame_trickling_in_is_not_taken_for_silence,
            untrusted_certificate_is_a_typed_error,
            a_wrong_path_ends_a_stream_never_open,
            data_is_stamped_with_its_read_time,
            faults_reconnect_without_loss_or_duplicates,
            a_reported_shutdown_keeps_the_connection_until_replaced,
            make_before_break_on_a_live_feed_misses_nothing,
            refused_upgrades_back_off_and_retry,
            silence_after_subscribe_hits_the_first_data_timeout,
            silence_after_data_hits_the_idle_timeout,
            a_quiet_stream_whose_probes_are_answered_stays_open,
            streams_sharing_a_connect_budget_take_turns,
            unanswered_handshake_hits_the_connect_timeout,
            ws_api_request_resolves,
            a_silent_address_falls_back_to_the_next,
            a_single_silent_address_has_the_whole_connect_timeout,
            many_subscriptions_are_listed,
            a_ping_flood_from_a_peer_that_does_not_read_stays_bounded,
            unanswered_request_times_out,
            reconnect_resubscribes_and_data_flows_again,
            interop_echo_0_bytes_to_1_mib,
            host_names_are_resolved,
            a_renewed_betfair_session_is_used_after_a_reconnect,
            a_betfair_login_refused_for_now_is_tried_again,
            a_betfair_stream_resumes_from_the_last_line_it_delivered,
        );
    };
    (@each $adapter:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::scenarios::$name(&$adapter);
            }
        )*
    };
}
