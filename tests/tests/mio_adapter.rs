//! The shared loopback scenarios, run against the mio adapter.

use feedwire_tests::adapter::MioAdapter;

feedwire_tests::adapter_scenarios!(MioAdapter);

/// mio only: a stream quiet for a second gives its read buffer back (idle memory).
#[test]
fn quiet_streams_give_their_read_buffer_back() {
    use std::time::Duration;

    use feedwire_core::{StreamConfig, StreamEvent};
    use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
    use feedwire_tests::adapter::Adapter;

    let srv = ReplayServer::start(ReplayConfig {
        count: Some(100),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let mut s = MioAdapter.start(StreamConfig::binance_stream(&srv.url()), None, 1024);
    let mut data = 0;
    while data < 100 {
        if let Some(StreamEvent::Data { .. }) = s.next_event(Duration::from_secs(20)).unwrap() {
            data += 1;
        }
    }
    assert!(
        s.stats().read_buffer_bytes > 0,
        "a busy stream holds its buffer"
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        s.stats().read_buffer_bytes,
        0,
        "released after a quiet second"
    );
    s.stop();
}

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
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (tx, rx) = std::sync::mpsc::sync_channel(64);
        let config = StreamConfig::binance_stream(&url);
        let (id, _) = feed.connect(config, Delivery::Channel(tx)).unwrap();
        while !matches!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            StreamEvent::Opened { .. }
        ) {}
        ids.push(id);
    }
    feed.stop(ids[0]);
    feed.shutdown();
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
