//! The shared loopback scenarios, run against the mio adapter.

use feedwire_tests::adapter::MioAdapter;

feedwire_tests::adapter_scenarios!(MioAdapter);

/// mio only: a handler's blocking call on its own loop's handle (a subscribe in reaction to
/// data) is refused at once — it used to wait for an answer only the loop it blocked could
/// give, hanging every stream of the loop and every thread that called it. The loop goes
/// on: another thread's call is answered, and a stop from the handler (nothing to wait for)
/// ends the stream.
#[test]
fn a_handler_calling_its_own_loop_is_refused_not_hung() {
    use std::time::{Duration, Instant};

    use feedwire_core::StreamConfig;
    use feedwire_mio::{Delivery, LoopHandle, MioOptions};
    use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
    use feedwire_tests::loop_reentry::{assert_refused_then_stopped, CallsItsOwnLoop, STOP_SIGNAL};

    let srv = ReplayServer::start(ReplayConfig {
        count: Some(2000),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let handle = LoopHandle::spawn(MioOptions::default()).unwrap();
    let (handler, id, outcome) = CallsItsOwnLoop::new(handle.clone());
    let (sid, _) = handle
        .connect(
            StreamConfig::binance_stream(&srv.url()),
            Delivery::Handler(Box::new(handler)),
        )
        .unwrap();
    id.set(sid).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while outcome.lock().unwrap().data == 0 {
        assert!(Instant::now() < deadline, "no data");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The loop still answers another thread; the confirmation makes the handler stop.
    handle.subscribe(sid, &[STOP_SIGNAL]).unwrap();
    while outcome.lock().unwrap().end.is_none() {
        assert!(Instant::now() < deadline, "the stop from the handler");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_refused_then_stopped(&outcome.lock().unwrap());
    handle.shutdown();
}

/// mio only: a shutdown stops every stream on the way out — a stream stopped just before
/// it, and one it finds open, each put a Close (1000) on the wire. The stop used to be
/// dropped with the stream: the server saw the connection end without a Close.
#[test]
fn shutdown_puts_each_streams_close_on_the_wire() {
    streams_closed_by(feedwire_mio::LoopHandle::shutdown);
}

/// mio only: dropping the last handle of a spawned loop (a clone dropped before it) shuts
/// it down as `shutdown` does, each stream's Close on the wire. The loop used to run on
/// with its streams connected and its thread parked, until the process ended.
#[test]
fn dropping_the_last_handle_shuts_the_loop_down() {
    streams_closed_by(|feed| {
        let clone = feed.clone();
        drop(feed);
        drop(clone);
    });
}

/// mio only: `shutdown` stops the loop whatever clones of its handle remain (dropping a
/// handle only does when it is the last): the clones' calls then say the loop is gone.
#[test]
fn shutdown_ends_the_loop_for_every_clone_of_its_handle() {
    use feedwire_core::StreamConfig;
    use feedwire_mio::{Delivery, LoopError, LoopHandle, MioOptions};

    let feed = LoopHandle::spawn(MioOptions::default()).unwrap();
    let clone = feed.clone();
    feed.shutdown();
    let config = StreamConfig::binance_stream("ws://127.0.0.1:9/ws");
    let delivery = Delivery::Channel(feedwire_mio::event_channel(8).0);
    assert!(matches!(
        clone.connect(config, delivery),
        Err(LoopError::LoopGone)
    ));
}

/// mio only: dropping the last handle returns once the loop has ended — its thread joined,
/// its streams and their handlers dropped (a handler's drop that takes 100 ms has finished):
/// what the streams held is released when the drop returns, not some time after.
#[test]
fn dropping_the_last_handle_waits_for_the_loop_to_end() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use feedwire_core::{StreamConfig, StreamEvent};
    use feedwire_mio::{Delivery, Handler, LoopHandle, MioOptions};

    struct SlowToDrop(Arc<AtomicBool>);
    impl Handler for SlowToDrop {
        fn on_event(&mut self, _: StreamEvent) {}
    }
    impl Drop for SlowToDrop {
        fn drop(&mut self) {
            std::thread::sleep(Duration::from_millis(100));
            self.0.store(true, Ordering::SeqCst);
        }
    }

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}/ws", listener.local_addr().unwrap());
    let feed = LoopHandle::spawn(MioOptions::default()).unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let handler = Delivery::Handler(Box::new(SlowToDrop(dropped.clone())));
    feed.connect(StreamConfig::binance_stream(&url), handler)
        .unwrap();
    drop(feed);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the handler is still being dropped after the last handle"
    );
}

/// Two streams on a loop, each open with its receiver kept, the first stopped; then
/// `end(handle)`: each peer has read one Close (1000) and the end of the connection.
fn streams_closed_by(end: impl FnOnce(feedwire_mio::LoopHandle)) {
    use std::io::Read;
    use std::net::TcpListener;
    use std::time::Duration;

    use feedwire_core::{StreamConfig, StreamEvent};
    use feedwire_mio::{Delivery, LoopHandle, MioOptions};

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}/ws", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let socks: Vec<_> = (0..2)
            .map(|_| {
                let (mut sock, _) = listener.accept().unwrap();
                feedwire_tests::scenarios::accept_upgrade(&mut sock);
                sock.set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                sock
            })
            .collect();
        socks
            .into_iter()
            .map(|mut sock| {
                let mut got = Vec::new();
                let mut buf = [0u8; 256];
                while let Ok(n @ 1..) = sock.read(&mut buf) {
                    got.extend_from_slice(&buf[..n]);
                }
                got
            })
            .collect::<Vec<_>>()
    });
    let feed = LoopHandle::spawn(MioOptions::default()).unwrap();
    // The receivers are kept: dropping one stops its stream by itself.
    let (mut ids, mut receivers) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let (tx, mut rx) = feedwire_mio::event_channel(64);
        let config = StreamConfig::binance_stream(&url);
        let (id, _) = feed.connect(config, Delivery::Channel(tx)).unwrap();
        while !matches!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            StreamEvent::Opened { .. }
        ) {}
        ids.push(id);
        receivers.push(rx);
    }
    feed.stop(ids[0]);
    end(feed);
    for got in server.join().unwrap() {
        // A masked Close frame: FIN + opcode 8, mask bit and length 2, key, code 1000.
        assert_eq!(got.len(), 8, "{got:x?}");
        assert_eq!(&got[..2], [0x88, 0x82]);
        let code: Vec<u8> = got[6..]
            .iter()
            .zip(&got[2..6])
            .map(|(b, k)| b ^ k)
            .collect();
        assert_eq!(code, 1000u16.to_be_bytes());
    }
}

/// mio only: a handler that panics (a parser's `unwrap` on a rare message) takes down its
/// own stream only. It used to unwind the loop's thread: every other stream on the loop
/// stopped without a word to its handler, and every call said `LoopGone`. Now the other
/// stream's data flows on, the loop answers calls, the panicked stream is gone
/// (`NoStream`) and its statistics say it crashed; a lending handler the same.
#[test]
fn a_panicking_handler_takes_down_only_its_own_stream() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use feedwire_core::{DataHandler, DataRef, StreamConfig, StreamEvent};
    use feedwire_mio::{Delivery, Handler, LoopError, LoopHandle, MioOptions};
    use feedwire_replay::{Mode, ReplayConfig, ReplayServer, Scenario};

    struct Counts(Arc<AtomicUsize>);
    impl Handler for Counts {
        fn on_event(&mut self, event: StreamEvent) {
            if matches!(event, StreamEvent::Data { .. }) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    struct PanicsOnData;
    impl Handler for PanicsOnData {
        fn on_event(&mut self, event: StreamEvent) {
            assert!(!matches!(event, StreamEvent::Data { .. }), "a user's bug");
        }
    }
    struct LendPanics;
    impl DataHandler for LendPanics {
        fn on_data(&mut self, _: DataRef<'_>) {
            panic!("a user's bug, in place");
        }
        fn on_event(&mut self, _: StreamEvent) {}
    }

    let srv = ReplayServer::start(ReplayConfig {
        mode: Mode::Paced { per_sec: 1_000 },
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let config = || StreamConfig::binance_stream(&srv.subscribe_url());
    let feed = LoopHandle::spawn(MioOptions::default()).unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let (good, _) = feed
        .connect(config(), Delivery::Handler(Box::new(Counts(seen.clone()))))
        .unwrap();
    feed.subscribe(good, &["btcusdt@aggTrade"]).unwrap();
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_for("data on the good stream", &|| {
        seen.load(Ordering::Relaxed) > 0
    });

    for delivery in [
        Delivery::Handler(Box::new(PanicsOnData)),
        Delivery::Lend(Box::new(LendPanics) as Box<dyn DataHandler + Send>),
    ] {
        let (bad, stats) = feed.connect(config(), delivery).unwrap();
        feed.subscribe(bad, &["btcusdt@aggTrade"]).unwrap();
        wait_for("the panicked stream gone", &|| {
            matches!(feed.list_subscriptions(bad), Err(LoopError::NoStream))
        });
        assert_eq!(
            stats.snapshot(Instant::now()).state,
            6,
            "its statistics say crashed"
        );
        let before = seen.load(Ordering::Relaxed);
        wait_for("the good stream's data flows on", &|| {
            seen.load(Ordering::Relaxed) > before + 50
        });
        feed.list_subscriptions(good).expect("the loop answers");
    }
    feed.stop(good);
    feed.shutdown();
}

/// mio only: with a handler (`Delivery::Handler`), the answer to a request goes to the
/// caller waiting in `request`, not to the handler as an event — the handler's data goes
/// to it straight from the read, the answers are picked out first.
#[test]
fn a_handlers_stream_answers_a_request_to_its_caller() {
    use std::sync::mpsc::{channel, Sender};
    use std::time::Duration;

    use feedwire_core::{StreamConfig, StreamEvent};
    use feedwire_mio::{Delivery, Handler, LoopHandle, MioOptions};
    use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};

    struct Forward(Sender<StreamEvent>);
    impl Handler for Forward {
        fn on_event(&mut self, event: StreamEvent) {
            let _ = self.0.send(event);
        }
    }

    let srv = ReplayServer::start(ReplayConfig::new(Scenario::SmallAggTrade)).unwrap();
    let handle = LoopHandle::spawn(MioOptions::default()).unwrap();
    let (tx, events) = channel();
    let (id, _) = handle
        .connect(
            StreamConfig::binance_ws_api(&srv.subscribe_url()),
            Delivery::Handler(Box::new(Forward(tx))),
        )
        .unwrap();
    let next = || events.recv_timeout(Duration::from_secs(20)).unwrap();
    while !matches!(next(), StreamEvent::Opened { .. }) {}
    // From another thread, so that an answer that never comes fails the test (in 20 s).
    let (answer_tx, answer) = channel();
    let requester = handle.clone();
    std::thread::spawn(move || answer_tx.send(requester.request(id, "time", None)));
    let payload = answer
        .recv_timeout(Duration::from_secs(20))
        .expect("the answer reached the caller")
        .unwrap();
    assert!(payload.starts_with(b"{\"id\":\""), "{payload:?}");
    handle.stop(id);
    loop {
        match next() {
            StreamEvent::Closed { .. } => break,
            e @ (StreamEvent::Response { .. } | StreamEvent::UnsolicitedResponse { .. }) => {
                panic!("the handler was given the answer: {e:?}")
            }
            _ => {}
        }
    }
    handle.shutdown();
}
