//! The shared loopback scenarios, run against the tokio adapter.

use feedwire_tests::adapter::TokioAdapter;

feedwire_tests::adapter_scenarios!(TokioAdapter);

/// tokio: an answer that arrived while the stream's task could not run (its thread busy
/// for longer than the request timeout) is read before the deadline it beat is fired — as
/// on the mio loop (`mio_embedded`): the subscription is confirmed, not timed out.
#[test]
fn an_answer_that_came_while_the_task_was_held_up_beats_its_deadline() {
    use std::time::Duration;

    use feedwire_core::{StreamConfig, StreamEvent};
    use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
    use feedwire_tokio::TokioOptions;

    let srv = ReplayServer::start(ReplayConfig {
        count: Some(0),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    // One thread: while the test's task sleeps on it, the stream's task cannot run.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut config = StreamConfig::binance_stream(&srv.url());
        config.router.request_timeout = Duration::from_millis(100);
        let (handle, mut events) =
            feedwire_tokio::connect(config, TokioOptions::default()).unwrap();
        let in_time = Duration::from_secs(20);
        while !matches!(
            tokio::time::timeout(in_time, events.next()).await.unwrap(),
            Some(StreamEvent::Opened { .. })
        ) {}
        handle.subscribe(&["ethusdt@trade"]).await.unwrap();
        // Let the task send it, then hold the thread past the deadline.
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(300));
        let next = tokio::time::timeout(in_time, events.next()).await.unwrap();
        let confirmed = |streams: &Vec<String>| streams == &["ethusdt@trade"];
        assert!(
            matches!(&next, Some(StreamEvent::Subscribed { streams, .. }) if confirmed(streams)),
            "{next:?}"
        );
        handle.stop();
    });
}

/// tokio: `Events` is a `futures_core::Stream`, so many streams merge into one consumer
/// (`select_all` here; `tokio_stream::StreamMap` keyed the same way) — the tokio side of
/// the mio loop's `shared_event_channel`. Each stream's messages complete and in order, and
/// the merged stream ends after the last stream's end.
#[test]
fn many_streams_merge_into_one_consumer() {
    use std::collections::HashMap;
    use std::time::Duration;

    use bytes::Bytes;
    use feedwire_core::{StreamConfig, StreamEvent};
    use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
    use feedwire_tokio::TokioOptions;
    use futures_util::stream::{select_all, StreamExt};

    const PER_STREAM: usize = 3_000;
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(PER_STREAM),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Batches of two events: every stream waits for the merged consumer again and again.
        let options = TokioOptions {
            event_capacity: 2,
            ..TokioOptions::default()
        };
        let (mut handles, mut merged) = (Vec::new(), Vec::new());
        for n in 0..5 {
            let config = StreamConfig::binance_stream(&srv.url());
            let (handle, events) = feedwire_tokio::connect(config, options.clone()).unwrap();
            handles.push(handle);
            merged.push(events.map(move |e| (n, e)));
        }
        let mut merged = select_all(merged);
        let mut data: HashMap<usize, Vec<Bytes>> = HashMap::new();
        let mut ended = 0;
        let in_time = Duration::from_secs(20);
        while let Some((n, event)) = tokio::time::timeout(in_time, merged.next()).await.unwrap() {
            match event {
                StreamEvent::Data { payload, .. } => {
                    let got = data.entry(n).or_default();
                    got.push(payload);
                    if got.len() == PER_STREAM {
                        handles[n].stop();
                    }
                }
                StreamEvent::Closed { .. } => ended += 1,
                StreamEvent::Crashed(reason) => panic!("stream {n} crashed: {reason}"),
                _ => {}
            }
        }
        assert_eq!(ended, 5, "the merged stream ends after every stream's end");
        let first = &data[&0];
        assert_eq!(first.len(), PER_STREAM);
        for n in 1..5 {
            assert!(
                data[&n] == *first,
                "stream {n}: the feed, complete and in order"
            );
        }
    });
}

/// tokio: an application behind its events (its channel full) has the stream's socket taken
/// out of the reactor. The server writes 100 messages 2 ms apart, a segment each, while the
/// application takes nothing: left in the reactor, each woke the runtime's thread for
/// nothing (102 voluntary context switches of that thread in the second; 2 now). Once the
/// application takes, every message comes: what arrived meanwhile is read.
#[test]
fn an_application_behind_its_events_is_not_woken_by_what_arrives() {
    use std::time::Duration;

    use feedwire_tokio::TokioOptions;

    /// This thread's voluntary context switches so far (Linux).
    fn switches() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("voluntary_ctxt_switches"))
            .unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    let (addr, server) = feedwire_tests::scenarios::paced_segments_server(
        100,
        Duration::from_millis(300),
        Duration::from_millis(2),
    );
    // One thread, this one: the reactor's wake-ups are its context switches.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let config = untimed_config(addr);
        let options = TokioOptions {
            event_capacity: 4,
            ..TokioOptions::default()
        };
        let (handle, mut events) = feedwire_tokio::connect(config, options).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = switches();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let woken = switches() - before;
        assert!(
            woken <= 20,
            "{woken} wake-ups in a second of taking nothing"
        );
        assert_eq!(take_data(&mut events, 100).await, 100);
        drop(handle);
    });
    drop(rt);
    server.join().unwrap();
}

/// tokio: output waiting for a slow peer while the application is behind (a batch in its
/// channel, more read and waiting) keeps the socket in the reactor — its writability is
/// awaited, the output goes out as the peer reads — and once the application takes, the
/// input held back comes whole.
#[test]
fn output_waiting_while_the_application_is_behind_goes_out_and_the_input_follows() {
    use std::time::{Duration, Instant};

    use feedwire_core::StreamEvent;
    use feedwire_tokio::TokioOptions;

    // More than loopback's socket buffers hold between them; a masked frame's header is 14
    // bytes.
    const SENT: usize = 32 << 20;
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let (got_tx, got) = std::sync::mpsc::channel::<usize>();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut sock, _) = listener.accept().unwrap();
        feedwire_tests::scenarios::accept_upgrade(&mut sock);
        let frame = feedwire_core::testing::server_frame(true, 1, br#"{"e":"x"}"#);
        // The second hundred comes while the first waits in the application's channel.
        sock.write_all(&frame.repeat(100)).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        sock.write_all(&frame.repeat(100)).unwrap();
        go_rx.recv().unwrap(); // not reading until then
        let (mut total, mut buf) = (0, vec![0u8; 1 << 16]);
        while total < SENT + 14 {
            match sock.read(&mut buf).unwrap() {
                0 => break,
                n => total += n,
            }
        }
        got_tx.send(total).unwrap();
        while matches!(sock.read(&mut buf), Ok(n) if n > 0) {}
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut config = untimed_config(addr);
        config.max_send_queue = 64 << 20;
        let options = TokioOptions {
            event_capacity: 4,
            ..TokioOptions::default()
        };
        let (handle, mut events) = feedwire_tokio::connect(config, options).unwrap();
        let mut taken = 0;
        let opened = async {
            loop {
                match events.next().await {
                    Some(StreamEvent::Opened { .. }) => break,
                    Some(StreamEvent::Data { .. }) => taken += 1,
                    Some(_) => {}
                    None => panic!("the stream ended before it opened"),
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), opened)
            .await
            .expect("the stream to open");
        // The channel fills and stays full: the application is behind from here on.
        tokio::time::sleep(Duration::from_millis(300)).await;
        handle.send_binary(vec![7u8; SENT]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        go.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let total = loop {
            if let Ok(total) = got.try_recv() {
                break total;
            }
            assert!(Instant::now() < deadline, "the message did not go out");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(total, SENT + 14);
        assert_eq!(taken + take_data(&mut events, 200 - taken).await, 200);
        drop(handle);
    });
    drop(rt);
    server.join().unwrap();
}

/// Takes data messages from `events` until `n` came, the stream ended or 20 s passed; how
/// many came.
async fn take_data(events: &mut feedwire_tokio::Events, n: usize) -> usize {
    use feedwire_core::StreamEvent;

    let mut taken = 0;
    let take = async {
        while taken < n {
            match events.next().await {
                Some(StreamEvent::Data { .. }) => taken += 1,
                Some(_) => {}
                None => break,
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(20), take).await;
    taken
}

/// A Binance stream to `addr` with no timers of its own (no first-data, idle or keepalive
/// deadline): what wakes it is the test's doing.
fn untimed_config(addr: std::net::SocketAddr) -> feedwire_core::StreamConfig {
    let mut config = feedwire_core::StreamConfig::binance_stream(&format!("ws://{addr}/ws"));
    config.timeouts.first_data = None;
    config.timeouts.idle = None;
    config.timeouts.keepalive = None;
    config
}
