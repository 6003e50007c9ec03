//! No allocation per message in steady state — the hot-path rule, checked where it is easiest
//! to break: a stream at a moderate rate, where every message is its own read and, in the
//! event loops, its own wake-up (a paced feed, as most production streams are). The core fed
//! one frame per read, the mio loop and the tokio adapter each fed by a server that writes
//! one frame per millisecond, each lending to a handler and delivering to its event channel
//! (a batch of events a read, the emptied batch reused). Allocations are counted
//! process-wide (`stats_alloc`), so this binary has no test harness (`harness = false`):
//! libtest's own threads spawn tests and report results while a test runs, and those
//! allocations landed in the count. `main` runs the checks one after another (or the one
//! nextest names, a process each), and nothing else allocates meanwhile (the server writes
//! pre-encoded frames from a plain thread).

use std::alloc::System;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use feedwire_core::rustls::{ServerConfig, ServerConnection, StreamOwned};
use feedwire_core::testing::{open_websocket_stream, server_frame};
use feedwire_core::{
    tls_config_with_roots, DataHandler, DataRef, Stream, StreamConfig, StreamEvent,
};
use feedwire_mio::{Delivery, MioLoop, MioOptions};
use feedwire_replay::TestPki;
use feedwire_tests::scenarios::accept_upgrade;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Messages before counting starts (read buffer ramp, first-data path, statistics).
const WARM_UP: u64 = 50;
/// Messages counted.
const MEASURED: u64 = 300;

const PAYLOAD: &[u8] = br#"{"stream":"btcusdt@aggTrade","data":{"e":"aggTrade","E":1700000000000,"s":"BTCUSDT","a":1,"p":"43000.10","q":"0.010","f":1,"l":1,"T":1700000000000,"m":true,"M":false}}"#;

fn url(addr: SocketAddr, tls: bool) -> String {
    let scheme = if tls { "wss" } else { "ws" };
    format!("{scheme}://{addr}/stream?streams=btcusdt@aggTrade")
}

/// Counts lent messages; no allocation.
struct Count(Arc<AtomicU64>);

impl DataHandler for Count {
    fn on_data(&mut self, _: DataRef<'_>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn on_event(&mut self, _: StreamEvent) {}
}

/// Allocations (and reallocations) while `run` goes on.
fn allocations_during(run: impl FnOnce()) -> usize {
    let region = Region::new(GLOBAL);
    run();
    let change = region.change();
    change.allocations + change.reallocations
}

/// Most of the [`MEASURED`] messages were `wake_ups` of their own (else the count proves
/// nothing), and fewer than one wake-up in ten allocated: one per wake-up fails, a rare
/// once-a-second allocation does not.
fn assert_rare(allocations: usize, wake_ups: u64, what: &str) {
    assert!(
        wake_ups >= MEASURED / 2,
        "only {wake_ups} {what} for {MEASURED} messages"
    );
    assert!(
        allocations * 10 < usize::try_from(wake_ups).expect("count"),
        "{allocations} allocations in {wake_ups} {what}"
    );
}

/// A server that accepts one WebSocket client and writes `frames` frames of [`PAYLOAD`], one
/// per write, `gap` apart; then waits for the client to go. Over TLS when given a
/// configuration: the handshake and the upgrade live, then every frame encrypted (a record
/// each) before the first is written, so the server allocates nothing while the client's
/// allocations are counted.
fn paced_server(
    frames: u64,
    gap: Duration,
    tls: Option<Arc<ServerConfig>>,
) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let frame = server_frame(true, 1, PAYLOAD);
    let frames = usize::try_from(frames).expect("count");
    let server = thread::spawn(move || {
        let (mut sock, _) = listener.accept().expect("accept");
        sock.set_nodelay(true).expect("nodelay");
        let writes = match tls {
            None => {
                accept_upgrade(&mut sock);
                vec![frame; frames]
            }
            Some(config) => {
                let conn = ServerConnection::new(config).expect("server connection");
                let mut tls = StreamOwned::new(conn, sock);
                accept_upgrade(&mut tls);
                tls.flush().expect("101");
                let records = (0..frames)
                    .map(|_| {
                        tls.conn.writer().write_all(&frame).expect("plaintext");
                        let mut record = Vec::new();
                        while tls.conn.wants_write() {
                            tls.conn.write_tls(&mut record).expect("encrypt");
                        }
                        record
                    })
                    .collect();
                sock = tls.sock;
                records
            }
        };
        let mut buf = [0u8; 4096];
        for write in &writes {
            if sock.write_all(write).is_err() {
                return;
            }
            thread::sleep(gap);
        }
        while matches!(sock.read(&mut buf), Ok(n) if n > 0) {}
    });
    (addr, server)
}

fn main() {
    let checks: [(&str, fn()); 7] = [
        (
            "the_core_allocates_nothing_per_message_read_alone",
            the_core_allocates_nothing_per_message_read_alone,
        ),
        (
            "the_mio_loop_allocates_nothing_per_wake_up",
            the_mio_loop_allocates_nothing_per_wake_up,
        ),
        (
            "the_mio_loop_allocates_nothing_of_its_own_per_wake_up_over_tls",
            the_mio_loop_allocates_nothing_of_its_own_per_wake_up_over_tls,
        ),
        (
            "the_mio_event_channel_allocates_nothing_per_wake_up",
            the_mio_event_channel_allocates_nothing_per_wake_up,
        ),
        (
            "the_tokio_adapter_allocates_nothing_per_wake_up",
            the_tokio_adapter_allocates_nothing_per_wake_up,
        ),
        (
            "the_tokio_adapter_allocates_nothing_of_its_own_per_wake_up_over_tls",
            the_tokio_adapter_allocates_nothing_of_its_own_per_wake_up_over_tls,
        ),
        (
            "the_tokio_event_channel_allocates_nothing_per_batch",
            the_tokio_event_channel_allocates_nothing_per_batch,
        ),
    ];
    feedwire_tests::checks::run(&checks);
}

fn the_core_allocates_nothing_per_message_read_alone() {
    let mut now = Instant::now();
    let config = StreamConfig::binance_stream("ws://127.0.0.1:1/stream?streams=btcusdt@aggTrade");
    let mut s = open_websocket_stream(config, now);
    let frame = server_frame(true, 1, PAYLOAD);
    let mut lent = 0u64;
    let mut read = |s: &mut Stream, bytes: &[u8], now: Instant| {
        s.read_buf()[..bytes.len()].copy_from_slice(bytes);
        s.handle_read_with(bytes.len(), now, |_| lent += 1);
        while s.poll_event().is_some() {}
        while s.poll_transmit().is_some() {}
    };
    for _ in 0..WARM_UP {
        now += Duration::from_millis(1);
        read(&mut s, &frame, now);
    }
    let allocations = allocations_during(|| {
        for _ in 0..MEASURED {
            now += Duration::from_millis(1);
            read(&mut s, &frame, now);
        }
    });
    assert!(lent >= WARM_UP + MEASURED - 1, "{lent} messages lent");
    assert_eq!(allocations, 0, "allocations over {MEASURED} reads");
}

fn the_mio_loop_allocates_nothing_per_wake_up() {
    let seen = Arc::new(AtomicU64::new(0));
    let delivery = Delivery::Lend(Box::new(Count(Arc::clone(&seen))));
    let (allocations, turns) = mio_allocations(delivery, None, || seen.load(Ordering::Relaxed));
    assert_rare(allocations, turns, "turns");
}

/// Over TLS, nothing of ours either: records are decrypted and their messages lent as over
/// TCP. rustls 0.23 copies each record's plaintext into a `Vec` of its own
/// (`ReadTraffic::next_record`; decrypting in place is its to-do), one allocation per record:
/// the server writes a record per message, so those [`MEASURED`] are not ours.
fn the_mio_loop_allocates_nothing_of_its_own_per_wake_up_over_tls() {
    let pki = TestPki::generate().expect("test CA");
    let seen = Arc::new(AtomicU64::new(0));
    let delivery = Delivery::Lend(Box::new(Count(Arc::clone(&seen))));
    let (allocations, turns) =
        mio_allocations(delivery, Some(&pki), || seen.load(Ordering::Relaxed));
    let records = usize::try_from(MEASURED).expect("count");
    assert_rare(allocations.saturating_sub(records), turns, "turns");
}

/// The mio loop's event channel, its consumer taking events between the loop's turns: each
/// read's events are swapped in as a batch, the emptied queue swapped back.
fn the_mio_event_channel_allocates_nothing_per_wake_up() {
    let (tx, mut events) = feedwire_mio::event_channel(64);
    let mut seen = 0;
    let delivery = Delivery::<Box<Count>>::Channel(tx);
    let (allocations, turns) = mio_allocations(delivery, None, || {
        while let Ok(event) = events.try_recv() {
            seen += u64::from(matches!(event, StreamEvent::Data { .. }));
        }
        seen
    });
    assert_rare(allocations, turns, "turns");
}

/// An embedded mio loop reading a paced server's messages into `delivery`: the allocations
/// over the [`MEASURED`] messages after the warm-up, and the turns they took. `seen`, called
/// after each turn, counts the messages delivered so far.
fn mio_allocations<H: DataHandler + Send + 'static>(
    delivery: Delivery<H>,
    tls: Option<&TestPki>,
    mut seen: impl FnMut() -> u64,
) -> (usize, u64) {
    let (addr, server) = paced_server(
        WARM_UP + MEASURED,
        Duration::from_millis(1),
        tls.map(TestPki::server_config),
    );
    let options = MioOptions {
        tls: tls.map(|pki| tls_config_with_roots(pki.root_store())),
        ..MioOptions::default()
    };
    let url = url(addr, tls.is_some());
    let mut feed = MioLoop::<H>::lending_to(options).expect("loop");
    let (id, _) = feed
        .connect(StreamConfig::binance_stream(&url), delivery)
        .expect("connect");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut turn_until = |n: u64, turns: &mut u64| loop {
        let got = seen();
        if got >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{got} of {n} messages");
        feed.turn(Some(Duration::from_millis(100)), |_| {})
            .expect("turn");
        *turns += 1;
    };
    let mut turns = 0;
    turn_until(WARM_UP, &mut turns);
    turns = 0;
    let allocations = allocations_during(|| turn_until(WARM_UP + MEASURED, &mut turns));
    feed.stop(id);
    drop(feed);
    server.join().expect("server");
    (allocations, turns)
}

fn the_tokio_adapter_allocates_nothing_per_wake_up() {
    let allocations = tokio_allocations(None);
    assert_rare(allocations.count, allocations.apart, "messages read apart");
}

/// Over TLS, nothing of its own: see the mio loop's check for rustls's one per record.
fn the_tokio_adapter_allocates_nothing_of_its_own_per_wake_up_over_tls() {
    let pki = TestPki::generate().expect("test CA");
    let allocations = tokio_allocations(Some(&pki));
    let records = usize::try_from(MEASURED).expect("count");
    assert_rare(
        allocations.count.saturating_sub(records),
        allocations.apart,
        "messages read apart",
    );
}

/// Allocations over [`MEASURED`] messages, and how many of them were read apart.
struct Counted {
    count: usize,
    apart: u64,
}

/// The tokio adapter reading a paced server's messages (over TLS with `tls`'s certificate)
/// into a lending handler on a current-thread runtime.
fn tokio_allocations(tls: Option<&TestPki>) -> Counted {
    let (addr, server) = paced_server(
        WARM_UP + MEASURED,
        Duration::from_millis(1),
        tls.map(TestPki::server_config),
    );
    let options = feedwire_tokio::TokioOptions {
        tls: tls.map(|pki| tls_config_with_roots(pki.root_store())),
        ..feedwire_tokio::TokioOptions::default()
    };
    let url = url(addr, tls.is_some());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let seen = Arc::new(AtomicU64::new(0));
    let (warm_tx, warm_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let apart = Arc::new(AtomicU64::new(0));
    let handler = Signal {
        count: Arc::clone(&seen),
        warm: Some(warm_tx),
        done: Some(done_tx),
        apart: Arc::clone(&apart),
        last: None,
    };
    let allocations = rt.block_on(async move {
        let handle =
            feedwire_tokio::connect_lending(StreamConfig::binance_stream(&url), options, handler)
                .expect("connect");
        tokio::time::timeout(Duration::from_secs(20), warm_rx)
            .await
            .expect("warm-up in time")
            .expect("signal");
        let region = Region::new(GLOBAL);
        tokio::time::timeout(Duration::from_secs(20), done_rx)
            .await
            .expect("messages in time")
            .expect("signal");
        let change = region.change();
        handle.stop();
        change.allocations + change.reallocations
    });
    assert!(seen.load(Ordering::Relaxed) >= WARM_UP + MEASURED);
    drop(rt);
    server.join().expect("server");
    Counted {
        count: allocations,
        apart: apart.load(Ordering::Relaxed),
    }
}

/// The tokio adapter's event channel: each read's events go to the application as a batch,
/// and the emptied batch comes back to the stream's task for the next read's (else one
/// `VecDeque` a read: a message on a paced feed).
fn the_tokio_event_channel_allocates_nothing_per_batch() {
    let (addr, server) = paced_server(WARM_UP + MEASURED, Duration::from_millis(1), None);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (allocations, apart) = rt.block_on(async move {
        let (handle, mut events) = feedwire_tokio::connect(
            StreamConfig::binance_stream(&url(addr, false)),
            feedwire_tokio::TokioOptions::default(),
        )
        .expect("connect");
        let counted = async {
            let (mut seen, mut apart, mut last) = (0, 0, None);
            let mut region = None;
            while seen < WARM_UP + MEASURED {
                let event = events.next().await.expect("the stream stays open");
                if !matches!(event, StreamEvent::Data { .. }) {
                    continue;
                }
                drop(event);
                seen += 1;
                if seen == WARM_UP {
                    region = Some(Region::new(GLOBAL));
                } else if seen > WARM_UP && came_apart(&mut last, Instant::now()) {
                    apart += 1;
                }
            }
            let change = region.expect("counted from the warm-up on").change();
            (change.allocations + change.reallocations, apart)
        };
        let counted = tokio::time::timeout(Duration::from_secs(20), counted)
            .await
            .expect("messages in time");
        handle.stop();
        counted
    });
    assert_rare(allocations, apart, "messages read apart");
    drop(rt);
    server.join().expect("server");
}

/// Whether a message seen `now` came 300 µs or more after the one before (`last`): a read
/// of its own.
fn came_apart(last: &mut Option<Instant>, now: Instant) -> bool {
    let apart = last.is_some_and(|last| now - last >= Duration::from_micros(300));
    *last = Some(now);
    apart
}

/// Counts lent messages and signals when the warm-up and the measured messages are in.
struct Signal {
    count: Arc<AtomicU64>,
    warm: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::sync::oneshot::Sender<()>>,
    /// Measured messages that came 300 µs or more after the one before: reads of their own.
    apart: Arc<AtomicU64>,
    last: Option<Instant>,
}

impl DataHandler for Signal {
    fn on_data(&mut self, _: DataRef<'_>) {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        if came_apart(&mut self.last, Instant::now()) && n > WARM_UP {
            self.apart.fetch_add(1, Ordering::Relaxed);
        }
        if n == WARM_UP {
            if let Some(tx) = self.warm.take() {
                let _ = tx.send(());
            }
        }
        if n == WARM_UP + MEASURED {
            if let Some(tx) = self.done.take() {
                let _ = tx.send(());
            }
        }
    }

    fn on_event(&mut self, _: StreamEvent) {}
}
