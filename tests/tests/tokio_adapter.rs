//! The tokio adapter on 127.0.0.1 against the replay server: plain and TLS WebSocket, Betfair
//! lines over TLS, stop and crash, dropped handles, a slow consumer.

use std::time::Duration;

use feedwire_core::{
    tls_config_with_roots, BetfairAuth, BetfairSubscription, CloseInitiator, EndReason,
    StreamConfig, StreamEvent,
};
use feedwire_replay::{Fault, ReplayConfig, ReplayServer, Scenario};
use feedwire_tokio::{connect, Events, StreamHandle, TokioOptions};

const TIMEOUT: Duration = Duration::from_secs(20);

fn options_for(srv: &ReplayServer) -> TokioOptions {
    TokioOptions {
        tls: srv.pki().map(|p| tls_config_with_roots(p.root_store())),
        ..TokioOptions::default()
    }
}

/// Reads events until `stop_after` data messages, then stops and reads to the end.
async fn consume(
    handle: &StreamHandle,
    events: &mut Events,
    stop_after: usize,
) -> (usize, Vec<StreamEvent>) {
    let mut data = 0;
    let mut others = Vec::new();
    loop {
        let event = tokio::time::timeout(TIMEOUT, events.next())
            .await
            .expect("event in time");
        match event {
            Some(StreamEvent::Data { .. }) => {
                data += 1;
                if data == stop_after {
                    handle.stop();
                }
            }
            Some(e) => others.push(e),
            None => return (data, others),
        }
    }
}

#[tokio::test]
async fn websocket_firehose_plain_and_tls() {
    for tls in [false, true] {
        let srv = ReplayServer::start(ReplayConfig {
            count: Some(50_000),
            tls,
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        })
        .unwrap();
        let (handle, mut events) =
            connect(StreamConfig::binance_stream(&srv.url()), options_for(&srv)).unwrap();
        let (data, others) = consume(&handle, &mut events, 50_000).await;
        assert!(data >= 50_000, "tls={tls}");
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
        let stats = handle.stats();
        assert!(stats.messages_received >= 50_000);
    }
}

#[tokio::test]
async fn betfair_lines_over_tls() {
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(5_000),
        tls: true,
        ..ReplayConfig::new(Scenario::BetfairMcm)
    })
    .unwrap();
    let auth = BetfairAuth {
        app_key: "k".into(),
        session: "s".into(),
    };
    let config = StreamConfig::betfair(&srv.url(), auth);
    let (handle, mut events) = connect(config, options_for(&srv)).unwrap();
    let sub = BetfairSubscription {
        filter_json: r#"{"marketIds":["1.2345"]}"#.into(),
        data_filter_json: None,
        heartbeat_ms: Some(5000),
        conflate_ms: None,
    };
    handle.subscribe_markets(sub).await.unwrap();
    let mut data = 0;
    let mut authenticated = false;
    loop {
        match tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
            Some(StreamEvent::Authenticated) => authenticated = true,
            Some(StreamEvent::Data { .. }) => {
                data += 1;
                if data == 5_000 {
                    handle.stop();
                }
            }
            Some(StreamEvent::Closed { .. }) | None => break,
            Some(_) => {}
        }
    }
    assert!(authenticated);
    assert_eq!(data, 5_000);
}

#[tokio::test]
async fn stop_on_an_idle_stream_ends_it_promptly() {
    let srv = ReplayServer::start(ReplayConfig {
        fault: Some(Fault::SilenceAfterSubscribe),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let (handle, mut events) = connect(
        StreamConfig::binance_stream(&srv.subscribe_url()),
        options_for(&srv),
    )
    .unwrap();
    handle.subscribe(&["btcusdt@aggTrade"]).await.unwrap();
    loop {
        match tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
            Some(StreamEvent::Subscribed { .. }) => break,
            Some(_) => {}
            None => panic!("ended early"),
        }
    }
    handle.stop();
    // The server is silent: only our Close (and its echo) can end the stream.
    let mut last = None;
    while let Some(e) = tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
        last = Some(e);
    }
    assert_eq!(
        last,
        Some(StreamEvent::Closed {
            by: CloseInitiator::Local,
            code: 1000
        })
    );
}

#[tokio::test]
async fn crash_drops_the_connection_and_ends_the_events() {
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(1_000_000),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let (handle, mut events) =
        connect(StreamConfig::binance_stream(&srv.url()), options_for(&srv)).unwrap();
    let mut data = 0;
    let mut crashed = false;
    while let Some(e) = tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
        match e {
            StreamEvent::Data { .. } => {
                data += 1;
                if data == 1000 {
                    handle.crash("test");
                }
            }
            StreamEvent::Crashed(EndReason::UserCrash(r)) => {
                assert_eq!(r, "test");
                crashed = true;
            }
            _ => {}
        }
    }
    assert!(crashed);
    assert!(data >= 1000);
}

#[tokio::test]
async fn dropping_every_handle_stops_the_stream() {
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(1_000_000),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let (handle, mut events) =
        connect(StreamConfig::binance_stream(&srv.url()), options_for(&srv)).unwrap();
    drop(handle);
    let mut last = None;
    while let Some(e) = tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
        last = Some(e);
    }
    assert!(
        matches!(
            last,
            Some(StreamEvent::Closed {
                by: CloseInitiator::Local,
                ..
            })
        ),
        "{last:?}"
    );
}

#[tokio::test]
async fn a_slow_consumer_keeps_memory_bounded() {
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(300_000),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let options = TokioOptions {
        event_capacity: 64,
        ..options_for(&srv)
    };
    let (handle, mut events) = connect(StreamConfig::binance_stream(&srv.url()), options).unwrap();
    // Take one event, then stall: the adapter must stop reading, not buffer the firehose.
    let _ = events.next().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stalled = handle.stats().messages_received;
    assert!(
        stalled < 20_000,
        "read {stalled} messages while the consumer slept"
    );
    handle.stop();
    let mut data = 0;
    while let Some(e) = tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
        if matches!(e, StreamEvent::Data { .. }) {
            data += 1;
        }
    }
    assert!(
        data as u64 >= stalled - 1,
        "nothing dropped: {data} of {stalled}"
    );
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_typed_tls_error_never_a_fallback() {
    let srv = ReplayServer::start(ReplayConfig {
        tls: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    // Default options trust the public roots only, not the replay server's start-up CA.
    let (handle, mut events) = connect(
        StreamConfig::binance_stream(&srv.url()),
        TokioOptions::default(),
    )
    .unwrap();
    let mut reason = None;
    while let Some(e) = tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
        match e {
            StreamEvent::Data { .. } => panic!("data over an unverified connection"),
            StreamEvent::Reconnecting { reason: r, .. } => {
                reason = Some(r);
                handle.crash("seen");
            }
            _ => {}
        }
    }
    match reason {
        Some(EndReason::Tls(failure)) => assert!(failure.certificate, "{failure:?}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn faults_lead_to_reconnects_with_every_complete_message_delivered_once() {
    for (fault, expect) in [
        (Fault::Reset { after: 100 }, 100usize),
        (Fault::CloseMidFrame { after: 250 }, 250),
    ] {
        let srv = ReplayServer::start(ReplayConfig {
            fault: Some(fault),
            count: Some(1000),
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        })
        .unwrap();
        let payloads = srv.payloads().to_vec();
        let (handle, mut events) =
            connect(StreamConfig::binance_stream(&srv.url()), options_for(&srv)).unwrap();
        let mut got = Vec::new();
        let mut reconnects = 0;
        while let Some(e) = tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
            match e {
                StreamEvent::Data { payload, .. } if reconnects == 0 => got.push(payload),
                StreamEvent::Reconnecting { .. } => {
                    reconnects += 1;
                    handle.stop();
                }
                _ => {}
            }
        }
        assert_eq!(reconnects, 1, "{fault:?}");
        assert_eq!(got.len(), expect, "{fault:?}");
        assert!(
            got.iter()
                .enumerate()
                .all(|(i, p)| *p == payloads[i % payloads.len()]),
            "in order, once: {fault:?}"
        );
    }
}

#[tokio::test]
async fn ws_api_request_resolves_with_its_response() {
    let srv = ReplayServer::start(ReplayConfig::new(Scenario::SmallAggTrade)).unwrap();
    let config = StreamConfig::binance_ws_api(&srv.subscribe_url());
    let (handle, mut events) = connect(config, options_for(&srv)).unwrap();
    while let Some(e) = events.next().await {
        if matches!(e, StreamEvent::Opened { .. }) {
            break;
        }
    }
    let response = tokio::time::timeout(TIMEOUT, handle.request("time", None))
        .await
        .unwrap()
        .unwrap();
    assert!(!response.is_error);
    let feedwire_core::RequestId::Str(uuid) = &response.id else {
        panic!("{response:?}")
    };
    assert!(response
        .payload
        .starts_with(format!("{{\"id\":\"{uuid}\",\"status\":200").as_bytes()));
    handle.stop();
    while events.next().await.is_some() {}
}

/// A server that completes the WebSocket handshake, then reads and ignores everything.
fn silent_websocket_server() -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let thread = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = sock.read(&mut buf).unwrap();
            head.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&head);
        let key = text
            .lines()
            .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
            .unwrap()
            .trim()
            .to_owned();
        let accept = feedwire_core::accept_key(key.as_bytes());
        write!(sock, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n").unwrap();
        while matches!(sock.read(&mut buf), Ok(n) if n > 0) {}
    });
    (addr, thread)
}

#[tokio::test]
async fn unanswered_request_times_out_once() {
    let (addr, _server) = silent_websocket_server();
    let mut config = StreamConfig::binance_ws_api(&format!("ws://{addr}/ws-api/v3"));
    config.router.request_timeout = Duration::from_millis(300);
    let (handle, mut events) = connect(config, TokioOptions::default()).unwrap();
    while let Some(e) = events.next().await {
        if matches!(e, StreamEvent::Opened { .. }) {
            break;
        }
    }
    let result = tokio::time::timeout(TIMEOUT, handle.request("time", None))
        .await
        .unwrap();
    assert_eq!(result, Err(feedwire_tokio::CommandError::TimedOut));
    handle.crash("done");
    while let Some(e) = events.next().await {
        assert!(
            !matches!(e, StreamEvent::RequestTimedOut { .. }),
            "reported to the caller only"
        );
    }
}

#[tokio::test]
async fn silence_after_subscribe_reconnects_on_the_first_data_timeout() {
    let srv = ReplayServer::start(ReplayConfig {
        fault: Some(Fault::SilenceAfterSubscribe),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let mut config = StreamConfig::binance_stream(&srv.subscribe_url());
    config.timeouts.first_data = Some(Duration::from_millis(300));
    let (handle, mut events) = connect(config, options_for(&srv)).unwrap();
    handle.subscribe(&["btcusdt@aggTrade"]).await.unwrap();
    let mut reason = None;
    while let Some(e) = tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
        if let StreamEvent::Reconnecting { reason: r, .. } = e {
            reason = Some(r);
            handle.stop();
        }
    }
    assert_eq!(reason, Some(EndReason::FirstDataTimeout));
}

#[tokio::test]
async fn a_handshake_that_never_answers_hits_the_connect_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _keep = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s); // accept, never answer
        }
    });
    let mut config = StreamConfig::binance_stream(&format!("ws://{addr}/ws"));
    config.timeouts.connect = Duration::from_millis(300);
    let (handle, mut events) = connect(config, TokioOptions::default()).unwrap();
    let mut reason = None;
    while let Some(e) = tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
        if let StreamEvent::Reconnecting { reason: r, .. } = e {
            reason = Some(r);
            handle.crash("seen");
        }
    }
    assert_eq!(reason, Some(EndReason::ConnectTimeout));
}

/// An independent server (tokio-tungstenite) that echoes every data message.
async fn tungstenite_echo_server() -> std::net::SocketAddr {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
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
    addr
}

#[tokio::test]
async fn interop_echo_through_the_adapter_0_bytes_to_1_mib() {
    let addr = tungstenite_echo_server().await;
    let (handle, mut events) = connect(
        StreamConfig::binance_ws_api(&format!("ws://{addr}/echo")),
        TokioOptions::default(),
    )
    .unwrap();
    // Application messages need an open stream (sending earlier is a typed error).
    assert!(matches!(
        handle.send_text("too early").await,
        Err(feedwire_tokio::CommandError::Stream(_))
    ));
    while let Some(e) = events.next().await {
        if matches!(e, StreamEvent::Opened { .. }) {
            break;
        }
    }
    for len in [0usize, 1, 125, 126, 65535, 65536, 1 << 20] {
        let text = "é".repeat(len / 2);
        handle.send_text(text.clone()).await.unwrap();
        let binary: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        handle.send_binary(binary.clone()).await.unwrap();
        let mut echoed = Vec::new();
        while echoed.len() < 2 {
            match tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
                Some(StreamEvent::Data { payload, .. }) => echoed.push(payload),
                Some(_) => {}
                None => panic!("ended"),
            }
        }
        assert_eq!(echoed[0], text.as_bytes(), "text {len}");
        assert_eq!(echoed[1], binary, "binary {len}");
    }
    handle.stop();
    let mut last = None;
    while let Some(e) = tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
        last = Some(e);
    }
    assert_eq!(
        last,
        Some(StreamEvent::Closed {
            by: CloseInitiator::Local,
            code: 1000
        })
    );
}

#[tokio::test]
async fn dropping_the_event_receiver_stops_the_stream() {
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(1_000_000),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let (handle, events) =
        connect(StreamConfig::binance_stream(&srv.url()), options_for(&srv)).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(events);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    // State 5 is Closed (see StatsSnapshot::state).
    while handle.stats().state != 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {:?}",
            handle.stats().state
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn refused_upgrades_back_off_and_retry() {
    let srv = ReplayServer::start(ReplayConfig {
        fault: Some(Fault::RefuseUpgrade(503)),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let (handle, mut events) =
        connect(StreamConfig::binance_stream(&srv.url()), options_for(&srv)).unwrap();
    let mut delays = Vec::new();
    while let Some(e) = tokio::time::timeout(TIMEOUT, events.next()).await.unwrap() {
        if let StreamEvent::Reconnecting { delay, reason, .. } = e {
            assert!(
                matches!(
                    reason,
                    EndReason::WebSocket(feedwire_core::Error::Handshake(
                        feedwire_core::HandshakeError::Rejected { status: 503, .. }
                    ))
                ),
                "{reason:?}"
            );
            delays.push(delay);
            if delays.len() == 3 {
                handle.crash("enough");
            }
        }
    }
    assert_eq!(delays.len(), 3);
    assert!(srv.connections() >= 3);
}
