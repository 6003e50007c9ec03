//! The replay server against the core on blocking loopback sockets: every scenario shape
//! delivered exactly, TLS with the start-up CA, Betfair lines, subscription answers, faults.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use feedwire_core::{
    os_seed, tls_config_with_roots, BetfairAuth, BetfairSubscription, CloseInitiator, EndReason,
    Error, Event, HandshakeError, Stream, StreamConfig, StreamEvent, StreamInput, TlsSession,
    TransportCommand, WsConfig,
};
use feedwire_replay::{Fault, Mode, ReplayConfig, ReplayServer, Scenario};
use feedwire_tests::blocking::{tls_messages, BlockingClient};

const TIMEOUT: Duration = Duration::from_secs(20);

fn server(scenario: Scenario, count: usize, fault: Option<Fault>) -> ReplayServer {
    ReplayServer::start(ReplayConfig {
        count: Some(count),
        fault,
        ..ReplayConfig::new(scenario)
    })
    .unwrap()
}

/// Every message until the server closes, with the way the connection ended.
fn drain(client: &mut BlockingClient) -> (Vec<Bytes>, Option<Event>) {
    let (msgs, end) = client.messages_until_end();
    (msgs, end.unwrap_or_else(|e| panic!("transport error: {e}")))
}

#[test]
fn every_websocket_scenario_arrives_exactly() {
    for (scenario, count) in [
        (Scenario::SmallAggTrade, 20_000),
        (Scenario::MediumKline, 5_000),
        (Scenario::LargeDepth20, 2_000),
        (Scenario::XlargeDepthDiff, 300),
        (Scenario::HugeTickerArr, 12),
        (Scenario::MultiplexMix, 5_000),
    ] {
        let srv = server(scenario, count, None);
        let mut client = BlockingClient::connect(&srv.url(), WsConfig::default(), TIMEOUT).unwrap();
        let (msgs, end) = drain(&mut client);
        assert_eq!(msgs.len(), count, "{}", scenario.name());
        assert!(
            msgs.iter().enumerate().all(|(i, m)| m == srv.payload(i)),
            "{}",
            scenario.name()
        );
        assert!(
            matches!(
                end,
                Some(Event::Closed {
                    by: CloseInitiator::Remote,
                    ..
                })
            ),
            "{}: {end:?}",
            scenario.name()
        );
    }
}

#[test]
fn refused_upgrade_reports_the_status() {
    for status in [429u16, 503] {
        let srv = server(
            Scenario::SmallAggTrade,
            10,
            Some(Fault::RefuseUpgrade(status)),
        );
        let err = BlockingClient::connect(&srv.url(), WsConfig::default(), TIMEOUT).unwrap_err();
        assert!(
            err.to_string().contains(&format!("status: {status}")),
            "{err}"
        );
    }
}

#[test]
fn close_mid_frame_delivers_every_complete_message_then_1006() {
    let srv = server(
        Scenario::SmallAggTrade,
        1000,
        Some(Fault::CloseMidFrame { after: 321 }),
    );
    let mut client = BlockingClient::connect(&srv.url(), WsConfig::default(), TIMEOUT).unwrap();
    let (msgs, end) = drain(&mut client);
    assert_eq!(msgs.len(), 321);
    assert_eq!(end, Some(Event::Failed(Error::UnexpectedEof)));
}

#[test]
fn reset_is_a_transport_error_after_the_complete_messages() {
    let srv = server(
        Scenario::SmallAggTrade,
        1000,
        Some(Fault::Reset { after: 100 }),
    );
    let mut client = BlockingClient::connect(&srv.url(), WsConfig::default(), TIMEOUT).unwrap();
    let mut got = 0;
    let end = loop {
        match client.next_event() {
            Ok(Some(Event::Message(_))) => got += 1,
            Ok(Some(Event::Failed(e))) => break Ok(e),
            Ok(other) => panic!("{other:?}"),
            Err(e) => break Err(e.kind()),
        }
    };
    assert_eq!(got, 100);
    assert!(
        matches!(
            end,
            Err(ErrorKind::ConnectionReset) | Ok(Error::UnexpectedEof)
        ),
        "{end:?}"
    );
}

fn roots_of(srv: &ReplayServer) -> feedwire_core::rustls::RootCertStore {
    srv.pki().unwrap().root_store()
}

#[test]
fn websocket_over_tls_with_the_startup_ca() {
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(3_000),
        tls: true,
        ..ReplayConfig::new(Scenario::MultiplexMix)
    })
    .unwrap();
    assert!(srv.url().starts_with("wss://127.0.0.1:"));
    let msgs = tls_messages(
        &srv.url(),
        srv.addr(),
        roots_of(&srv),
        usize::MAX,
        Duration::ZERO,
    );
    assert_eq!(msgs.len(), 3_000);
    assert!(msgs.iter().enumerate().all(|(i, m)| m == srv.payload(i)));
}

/// A reader that falls behind fills the socket, so the server's last TLS records can be left
/// in its TLS buffer when it stops writing; held open with nothing more to send, it must flush
/// them rather than wait for the client to speak (the last messages used to stall there).
#[test]
fn tls_firehose_held_open_delivers_the_last_messages_to_a_slow_reader() {
    // More than loopback's socket buffers hold, so the server ends up blocked on writes;
    // whether its last records fit is a race, so a few rounds (each stalled about one time in
    // three before the fix).
    let count = 20_000;
    for _ in 0..3 {
        let srv = ReplayServer::start(ReplayConfig {
            count: Some(count),
            tls: true,
            hold_open: true,
            ..ReplayConfig::new(Scenario::LargeDepth20)
        })
        .unwrap();
        let msgs = tls_messages(
            &srv.url(),
            srv.addr(),
            roots_of(&srv),
            count,
            Duration::from_millis(1),
        );
        assert_eq!(msgs.len(), count);
    }
}

/// Drives a `Stream` over blocking sockets (TLS when the URL says so) until `done` says
/// stop or the stream ends; returns its events.
fn run_stream(
    srv: &ReplayServer,
    mut stream: Stream,
    mut done: impl FnMut(&StreamEvent, &mut Stream) -> bool,
) -> Vec<StreamEvent> {
    let mut sock: Option<TcpStream> = None;
    let mut tls: Option<TlsSession> = None;
    let mut events = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while !stream.state().is_terminal() {
        assert!(
            Instant::now() < deadline,
            "stream did not finish: {:?}",
            stream.state()
        );
        let now = Instant::now();
        while let Some(c) = stream.poll_transmit() {
            match tls.as_mut() {
                Some(t) => t.write_plaintext(&c),
                None => sock.as_mut().unwrap().write_all(&c).unwrap(),
            }
        }
        if let (Some(t), Some(s)) = (tls.as_mut(), sock.as_mut()) {
            while let Some(c) = t.poll_transmit() {
                s.write_all(&c).unwrap();
            }
        }
        while let Some(cmd) = stream.poll_transport() {
            match cmd {
                TransportCommand::Connect(ep) => {
                    let s = TcpStream::connect((ep.host.as_str(), ep.port)).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                    if ep.scheme.is_tls() {
                        let roots = srv.pki().unwrap().root_store();
                        let mut t =
                            TlsSession::new(tls_config_with_roots(roots), &ep.host).unwrap();
                        let mut s = s;
                        while t.is_handshaking() {
                            while let Some(c) = t.poll_transmit() {
                                s.write_all(&c).unwrap();
                            }
                            let n = s.read(t.read_buf()).unwrap();
                            t.handle_read(
                                n,
                                &mut StreamInput {
                                    stream: &mut stream,
                                    now,
                                },
                            )
                            .unwrap();
                        }
                        sock = Some(s);
                        tls = Some(t);
                    } else {
                        sock = Some(s);
                    }
                    stream.handle_connected(now);
                    if let Some(t) = tls.as_mut() {
                        // Data that came with the last handshake records goes in now.
                        t.flush_plaintext(&mut StreamInput {
                            stream: &mut stream,
                            now,
                        })
                        .unwrap();
                    }
                }
                TransportCommand::Disconnect => {
                    sock = None;
                    tls = None;
                }
            }
        }
        while let Some(e) = stream.poll_event() {
            let stop = done(&e, &mut stream);
            events.push(e);
            if stop {
                return events;
            }
        }
        if let Some(at) = stream.poll_timeout() {
            if at <= Instant::now() {
                stream.handle_timeout(Instant::now());
                continue;
            }
        }
        let Some(s) = sock.as_mut().filter(|_| stream.is_connected()) else {
            std::thread::sleep(Duration::from_millis(5));
            stream.handle_timeout(Instant::now());
            continue;
        };
        let read = match tls.as_mut() {
            Some(t) => s.read(t.read_buf()),
            None => s.read(stream.read_buf()),
        };
        let now = Instant::now();
        match (read, tls.as_mut()) {
            (Ok(0), Some(t)) => {
                let _ = t.handle_eof(&mut StreamInput {
                    stream: &mut stream,
                    now,
                });
                stream.handle_eof(now);
            }
            (Ok(0), None) => stream.handle_eof(now),
            (Ok(n), Some(t)) => {
                if let Err(e) = t.handle_read(
                    n,
                    &mut StreamInput {
                        stream: &mut stream,
                        now,
                    },
                ) {
                    stream.handle_transport_error(&e.to_string(), now);
                }
            }
            (Ok(n), None) => stream.handle_read(n, now),
            (Err(e), _) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                stream.handle_timeout(now)
            }
            (Err(e), _) => stream.handle_transport_error(&e.to_string(), now),
        }
    }
    events.extend(std::iter::from_fn(|| stream.poll_event()));
    events
}

fn betfair_stream(srv: &ReplayServer) -> Stream {
    let auth = BetfairAuth {
        app_key: "appkey".into(),
        session: "token".into(),
    };
    let mut stream = Stream::new(
        StreamConfig::betfair(&srv.url(), auth),
        os_seed(),
        Instant::now(),
    )
    .unwrap();
    let sub = BetfairSubscription {
        filter_json: r#"{"marketIds":["1.2345"]}"#.into(),
        data_filter_json: None,
        heartbeat_ms: Some(5000),
        conflate_ms: None,
    };
    stream.subscribe_markets(sub, Instant::now()).unwrap();
    stream
}

#[test]
fn betfair_lines_plain_and_tls_with_auth_and_subscription() {
    // Past the end of the payloads' cycle (2,048): the image opens the connection only.
    const COUNT: usize = 2_100;
    for tls in [false, true] {
        let srv = ReplayServer::start(ReplayConfig {
            count: Some(COUNT),
            tls,
            ..ReplayConfig::new(Scenario::BetfairMcm)
        })
        .unwrap();
        let mut lines = Vec::new();
        let events = run_stream(&srv, betfair_stream(&srv), |e, s| {
            if let StreamEvent::Data { payload, .. } = e {
                lines.push(payload.clone());
                if lines.len() == COUNT {
                    s.stop(Instant::now());
                }
            }
            false
        });
        let data = lines.len();
        assert!(lines.iter().enumerate().all(|(i, l)| l == srv.payload(i)));
        let images: Vec<usize> = (0..data)
            .filter(|&i| {
                std::str::from_utf8(&lines[i])
                    .unwrap()
                    .contains("SUB_IMAGE")
            })
            .collect();
        assert_eq!(images, [0], "one image, first");
        assert!(
            events.contains(&StreamEvent::Authenticated),
            "tls={tls}: {events:?}"
        );
        let heartbeats = events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    StreamEvent::Data {
                        heartbeat: true,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(data, COUNT, "tls={tls}");
        assert_eq!(heartbeats, 41, "every 50th payload is a heartbeat");
        assert!(
            matches!(
                events.last(),
                Some(StreamEvent::Closed {
                    by: CloseInitiator::Local,
                    ..
                })
            ),
            "{:?}",
            events.last()
        );
    }
}

#[test]
fn binance_subscription_is_answered_then_data_flows() {
    let srv = server(Scenario::SmallAggTrade, 500, None);
    let mut stream = Stream::new(
        StreamConfig::binance_stream(&srv.subscribe_url()),
        os_seed(),
        Instant::now(),
    )
    .unwrap();
    stream
        .subscribe(&["btcusdt@aggTrade"], Instant::now())
        .unwrap();
    let mut data = 0;
    let events = run_stream(&srv, stream, |e, s| {
        if matches!(e, StreamEvent::Data { .. }) {
            data += 1;
            if data == 500 {
                s.stop(Instant::now());
            }
        }
        false
    });
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::Subscribed { .. })),
        "{events:?}"
    );
    assert_eq!(data, 500);
}

#[test]
fn server_shutdown_notice_triggers_a_planned_reconnect() {
    let srv = server(
        Scenario::SmallAggTrade,
        1_000,
        Some(Fault::ServerShutdown { after: 50 }),
    );
    let stream = Stream::new(
        StreamConfig::binance_stream(&srv.url()),
        os_seed(),
        Instant::now(),
    )
    .unwrap();
    let events = run_stream(&srv, stream, |e, s| {
        if matches!(e, StreamEvent::Opened { reconnected: true }) {
            s.stop(Instant::now());
        }
        false
    });
    assert!(
        events.iter().any(|e| matches!(
            e,
            StreamEvent::Reconnecting {
                reason: EndReason::ServerShutdown,
                planned: true,
                ..
            }
        )),
        "{events:?}"
    );
    assert!(srv.connections() >= 2);
}

/// 429 with `Retry-After: 1` (as Binance answers too many connection attempts): the stream,
/// whose own first backoff is at most 250 ms, tries again only after a second.
#[test]
fn a_refusal_with_retry_after_holds_the_next_attempt_back() {
    let srv = server(
        Scenario::SmallAggTrade,
        10,
        Some(Fault::RefuseUpgradeFor {
            status: 429,
            retry_after_s: 1,
        }),
    );
    let stream = Stream::new(
        StreamConfig::binance_stream(&srv.url()),
        os_seed(),
        Instant::now(),
    )
    .unwrap();
    let mut refused_at = Vec::new();
    let events = run_stream(&srv, stream, |e, s| {
        if let StreamEvent::Reconnecting {
            reason:
                EndReason::WebSocket(Error::Handshake(HandshakeError::Rejected {
                    status: 429,
                    refusal,
                })),
            delay,
            ..
        } = e
        {
            assert_eq!(refusal.retry_after, Some(Duration::from_secs(1)));
            assert_eq!(*delay, Duration::from_secs(1));
            refused_at.push(Instant::now());
            if refused_at.len() == 2 {
                s.crash("enough", Instant::now());
            }
        }
        false
    });
    assert_eq!(refused_at.len(), 2, "{events:?}");
    assert!(refused_at[1] - refused_at[0] >= Duration::from_secs(1));
}

#[test]
fn refused_upgrade_makes_the_stream_back_off_and_retry() {
    let srv = server(Scenario::SmallAggTrade, 10, Some(Fault::RefuseUpgrade(429)));
    let stream = Stream::new(
        StreamConfig::binance_stream(&srv.url()),
        os_seed(),
        Instant::now(),
    )
    .unwrap();
    let mut refusals = 0;
    let events = run_stream(&srv, stream, |e, s| {
        if let StreamEvent::Reconnecting {
            reason:
                EndReason::WebSocket(Error::Handshake(HandshakeError::Rejected { status: 429, .. })),
            ..
        } = e
        {
            refusals += 1;
            if refusals == 2 {
                s.crash("enough", Instant::now());
            }
        }
        false
    });
    assert_eq!(refusals, 2, "{events:?}");
}

#[test]
fn paced_mode_stamps_every_message() {
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(200),
        mode: Mode::Paced { per_sec: 2_000 },
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let mut client = BlockingClient::connect(&srv.url(), WsConfig::default(), TIMEOUT).unwrap();
    let (msgs, _) = drain(&mut client);
    assert_eq!(msgs.len(), 200);
    // Judge the pacing by the server's own stamps (not by our clock): non-decreasing, and
    // spread over about 0.1 s for 200 messages at 2,000/s, never sent all at once. A loaded
    // machine only spreads them further.
    let stamps: Vec<u64> = msgs
        .iter()
        .map(|m| {
            // After the first pair, so the message still opens with `"stream"`.
            assert!(
                m.starts_with(b"{\"stream\":\""),
                "{}",
                String::from_utf8_lossy(m)
            );
            feedwire_replay::sent_at_us(m).expect("stamped")
        })
        .collect();
    assert!(
        stamps.windows(2).all(|w| w[0] <= w[1]),
        "stamps in sending order"
    );
    let spread_us = stamps[stamps.len() - 1] - stamps[0];
    assert!(
        spread_us >= 50_000,
        "paced over {spread_us} us, not a burst"
    );
}

/// `Mode::Live`: one feed for every connection, as an exchange's — a connection opened later
/// starts later in it, and a message's number names the same payload on every connection.
#[test]
fn a_live_feed_is_one_sequence_shared_by_every_connection() {
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(200),
        mode: Mode::Live { per_sec: 2_000 },
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    // Every message of a connection, telling `started` once the first has come: its place
    // in the feed is fixed by then.
    let receive = |url: String, started: std::sync::mpsc::Sender<()>| {
        move || {
            let mut client = BlockingClient::connect(&url, WsConfig::default(), TIMEOUT).unwrap();
            let first = loop {
                match client.next_event() {
                    Ok(Some(Event::Message(m))) => break m.payload,
                    Ok(Some(Event::Ping(_) | Event::Pong(_))) => {}
                    other => panic!("{other:?}"),
                }
            };
            let _ = started.send(());
            [vec![first], drain(&mut client).0].concat()
        }
    };
    let (started, first_came) = std::sync::mpsc::channel();
    let first = std::thread::spawn(receive(srv.url(), started.clone()));
    first_came.recv_timeout(TIMEOUT).unwrap();
    // The later connection starts at least 60 ms further on in the feed, however loaded
    // the machine: its first message cannot be due before it connects.
    std::thread::sleep(Duration::from_millis(60));
    let later = std::thread::spawn(receive(srv.url(), started));
    let feeds = [first.join().unwrap(), later.join().unwrap()];
    let mut firsts = Vec::new();
    for msgs in &feeds {
        assert_eq!(msgs.len(), 200);
        let seqs: Vec<u64> = msgs
            .iter()
            .map(|m| feedwire_replay::feed_seq(m).expect("numbered"))
            .collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        for (m, seq) in msgs.iter().zip(&seqs) {
            // The payload numbered `seq`, with the stamp and the number put in after its
            // first pair: `{"stream":"btcusdt@aggTrade","ts_us":…,"seq":…,"data":…}`.
            let find = |h: &[u8], n: &[u8]| h.windows(n.len()).position(|w| w == n).unwrap();
            let (head, rest) = m.split_at(find(m, b"\"ts_us\""));
            let rest = &rest[find(rest, b",\"seq\":") + 1..];
            let rest = &rest[find(rest, b",") + 1..];
            let usize_seq = usize::try_from(*seq).unwrap();
            assert_eq!([head, rest].concat(), srv.payload(usize_seq).as_ref());
        }
        firsts.push(seqs[0]);
    }
    // 60 ms after the first one's first message was due, at 2,000 a second: at least 120
    // messages on (a loaded machine, more).
    assert!(firsts[1] >= firsts[0] + 120, "{firsts:?}");
}

#[test]
fn a_paced_batch_carries_the_time_it_was_written() {
    // At 100,000/s the server writes a millisecond's messages at once — about a hundred,
    // more when its timer is late — and their stamps are the write's time, not each one's
    // encoding time: far fewer distinct stamps than messages (the pacing takes 30 ms, so
    // about 30 batches however the ticks fall).
    let count = 3_000;
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(count),
        mode: Mode::Paced { per_sec: 100_000 },
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let mut client = BlockingClient::connect(&srv.url(), WsConfig::default(), TIMEOUT).unwrap();
    let (msgs, _) = drain(&mut client);
    assert_eq!(msgs.len(), count);
    let stamps: Vec<u64> = msgs
        .iter()
        .map(|m| feedwire_replay::sent_at_us(m).expect("stamped"))
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]));
    let mut distinct = stamps;
    distinct.dedup();
    assert!(
        distinct.len() <= count / 10,
        "{} distinct stamps for {count} messages",
        distinct.len()
    );
}
