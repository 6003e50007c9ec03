//! The mio loop turned by the application's own thread, with the application's own source
//! registered in the same `Poll`.

use std::net::UdpSocket as StdUdp;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use feedwire_core::{CloseInitiator, StreamConfig, StreamEvent};
use feedwire_mio::{
    user_token, user_token_number, Delivery, Handler, MioLoop, MioOptions, StreamId,
};
use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
use mio::net::UdpSocket;
use mio::Interest;

#[derive(Default)]
struct Seen {
    data: AtomicU64,
    ends: Mutex<Vec<StreamEvent>>,
    ended: AtomicBool,
}

struct Record(Arc<Seen>);

impl Handler for Record {
    fn on_event(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::Data { .. } => {
                self.0.data.fetch_add(1, Ordering::Relaxed);
            }
            e @ (StreamEvent::Closed { .. } | StreamEvent::Crashed(_)) => {
                self.0.ends.lock().unwrap().push(e);
                self.0.ended.store(true, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

fn turn_until(feed: &mut MioLoop, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        assert!(feed.turn(Some(Duration::from_millis(50)), |_| {}).unwrap());
    }
}

/// A replay server of `count` small messages per connection, each held open after them.
fn held_open(count: usize) -> ReplayServer {
    ReplayServer::start(ReplayConfig {
        count: Some(count),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap()
}

#[test]
fn the_application_turns_the_loop_and_shares_its_poll() {
    let srv = held_open(1000);
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let mut own = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    feed.registry()
        .register(&mut own, user_token(7), Interest::READABLE)
        .unwrap();
    let seen = Arc::new(Seen::default());
    let (id, stats) = feed
        .connect(
            StreamConfig::binance_stream(&srv.url()),
            Delivery::Handler(Box::new(Record(seen.clone()))),
        )
        .unwrap();

    StdUdp::bind("127.0.0.1:0")
        .unwrap()
        .send_to(b"ping", own.local_addr().unwrap())
        .unwrap();
    let mut user_events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.data.load(Ordering::Relaxed) < 1000 || user_events.is_empty() {
        assert!(Instant::now() < deadline, "data and the user event");
        feed.turn(Some(Duration::from_millis(50)), |e| {
            user_events.push(user_token_number(e.token()));
        })
        .unwrap();
    }
    assert_eq!(user_events, vec![Some(7)], "the application's event, once");
    let mut buf = [0u8; 8];
    assert_eq!(own.recv_from(&mut buf).unwrap().0, 4);
    assert_eq!(stats.snapshot(Instant::now()).messages_received, 1000);

    // A direct stop on the loop's thread; the Close handshake completes in later turns.
    feed.stop(id);
    turn_until(&mut feed, "the close", || {
        seen.ended.load(Ordering::Relaxed)
    });
    assert_eq!(
        seen.ends.lock().unwrap().as_slice(),
        &[StreamEvent::Closed {
            by: CloseInitiator::Local,
            code: 1000
        }]
    );
}

/// A replay server of `count` small messages, a loop with `options` and one stream on it,
/// turned until every message arrived.
fn streaming(count: usize, options: MioOptions) -> (ReplayServer, MioLoop, Arc<Seen>, StreamId) {
    let srv = held_open(count);
    let mut feed = MioLoop::new(options).unwrap();
    let seen = Arc::new(Seen::default());
    let (id, stats) = feed
        .connect(
            StreamConfig::binance_stream(&srv.url()),
            Delivery::Handler(Box::new(Record(seen.clone()))),
        )
        .unwrap();
    turn_until(&mut feed, "data", || {
        seen.data.load(Ordering::Relaxed) == count as u64
    });
    assert_eq!(
        stats.snapshot(Instant::now()).messages_received,
        count as u64
    );
    (srv, feed, seen, id)
}

/// Crashes `id` from another thread 100 ms from now while this one turns the loop with no
/// limit of its own, so only the command's waker can end the wait; asserts the crash arrived
/// within `within`.
fn crash_from_another_thread(feed: &mut MioLoop, id: StreamId, seen: &Seen, within: Duration) {
    let handle = feed.handle();
    let other = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        handle.crash(id, "from another thread");
    });
    let start = Instant::now();
    while !seen.ended.load(Ordering::Relaxed) {
        feed.turn(None, |_| {}).unwrap();
        assert!(start.elapsed() < within, "the command did not end the wait");
    }
    other.join().unwrap();
    assert!(matches!(
        seen.ends.lock().unwrap().as_slice(),
        [StreamEvent::Crashed(_)]
    ));
}

#[test]
fn a_command_from_another_thread_wakes_a_waiting_turn() {
    let (_srv, mut feed, seen, id) = streaming(10, MioOptions::default());
    crash_from_another_thread(&mut feed, id, &seen, Duration::from_secs(20));
}

/// `busy_poll`: every message arrives through the spinning wait, a turn's own limit still
/// ends it (the spin is capped by it), and a command wakes a spinning turn.
#[test]
fn a_busy_polling_loop_delivers_keeps_its_limits_and_hears_commands() {
    // A spin with no end (and no overflow): only a turn's limit or an event may end it.
    let (_srv, mut feed, seen, id) = streaming(
        1000,
        MioOptions {
            busy_poll: Duration::MAX,
            ..MioOptions::default()
        },
    );
    // Nothing more comes: the turn ends at its own limit.
    let start = Instant::now();
    assert!(feed.turn(Some(Duration::from_millis(20)), |_| {}).unwrap());
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );

    crash_from_another_thread(&mut feed, id, &seen, Duration::from_secs(20));
}

/// A handler holding the embedded loop's handle is inside the application's `turn` when it
/// is called: its blocking calls are refused (they would wait for a turn that cannot come),
/// a stop from it works.
#[test]
fn a_handler_calling_the_loop_it_is_turned_by_is_refused_not_hung() {
    use feedwire_tests::loop_reentry::{assert_refused_then_stopped, CallsItsOwnLoop, STOP_SIGNAL};

    let srv = held_open(200);
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let (handler, id, outcome) = CallsItsOwnLoop::new(feed.handle());
    let (sid, _) = feed
        .connect(
            StreamConfig::binance_stream(&srv.url()),
            Delivery::Handler(Box::new(handler)),
        )
        .unwrap();
    id.set(sid).unwrap();
    turn_until(&mut feed, "data", || outcome.lock().unwrap().data > 0);
    // From the loop's thread between turns, its own method; the confirmation makes the
    // handler stop the stream.
    feed.subscribe(sid, &[STOP_SIGNAL]).unwrap();
    turn_until(&mut feed, "the stop from the handler", || {
        outcome.lock().unwrap().end.is_some()
    });
    assert_refused_then_stopped(&outcome.lock().unwrap());
}

/// The application turns its loop when it likes: between two turns it may work for longer
/// than a request's timeout. An answer that arrived meanwhile is in the socket when the
/// loop turns again, and it is read before the deadline it beat is fired: the subscription
/// is confirmed, not reported as timed out (with its answer then unsolicited).
#[test]
fn an_answer_that_came_between_turns_beats_its_deadline() {
    struct Events(Arc<Mutex<Vec<StreamEvent>>>);
    impl Handler for Events {
        fn on_event(&mut self, event: StreamEvent) {
            if !matches!(event, StreamEvent::Data { .. }) {
                self.0.lock().unwrap().push(event);
            }
        }
    }

    let srv = held_open(0);
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let mut config = StreamConfig::binance_stream(&srv.url());
    config.router.request_timeout = Duration::from_millis(100);
    let (id, _) = feed
        .connect(config, Delivery::Handler(Box::new(Events(events.clone()))))
        .unwrap();
    turn_until(&mut feed, "open", || {
        events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, StreamEvent::Opened { .. }))
    });
    events.lock().unwrap().clear();
    // Sent within the call; the answer comes while the application is busy elsewhere.
    feed.subscribe(id, &["ethusdt@trade"]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    turn_until(&mut feed, "the answer", || {
        !events.lock().unwrap().is_empty()
    });
    let seen = events.lock().unwrap().clone();
    let confirmed = |streams: &Vec<String>| streams == &["ethusdt@trade"];
    assert!(
        matches!(seen.as_slice(), [StreamEvent::Subscribed { streams, .. }] if confirmed(streams)),
        "{seen:?}"
    );
    // The URL's stream and the one added: what a stream taking over would subscribe.
    assert_eq!(
        feed.subscriptions(id).unwrap(),
        ["btcusdt@aggTrade", "ethusdt@trade"]
    );
}

/// A burst of commands larger than a turn takes (forty stops queued through the handle
/// while the application is not turning) is taken a slice at a time between the streams'
/// reads — and all of it, the turns after the first not waiting for a wake: every stream
/// closes.
#[test]
fn a_burst_of_commands_is_taken_whole_a_slice_at_a_time() {
    let srv = held_open(10);
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let streams: Vec<(StreamId, Arc<Seen>)> = (0..40)
        .map(|_| {
            let seen = Arc::new(Seen::default());
            let (id, _) = feed
                .connect(
                    StreamConfig::binance_stream(&srv.url()),
                    Delivery::Handler(Box::new(Record(seen.clone()))),
                )
                .unwrap();
            (id, seen)
        })
        .collect();
    turn_until(&mut feed, "data on every stream", || {
        streams
            .iter()
            .all(|(_, seen)| seen.data.load(Ordering::Relaxed) == 10)
    });
    let handle = feed.handle();
    for (id, _) in &streams {
        handle.stop(*id);
    }
    turn_until(&mut feed, "every stream's close", || {
        streams
            .iter()
            .all(|(_, seen)| seen.ended.load(Ordering::Relaxed))
    });
}

/// An application that turns the loop and takes a stream's events from its `event_channel`
/// on the same thread, between turns, waiting in each turn for as long as the loop likes:
/// taking a full channel's events wakes the loop's `Poll` (there is no timed look for room
/// any more), so the next turn delivers at once rather than sleeping to a deadline (the
/// read buffers' sweep, a second away: 2,000 messages through a channel of 8 would take
/// minutes).
#[test]
fn a_consumer_on_the_loops_own_thread_wakes_its_next_turn() {
    const COUNT: usize = 2_000;
    let srv = held_open(COUNT);
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let (tx, mut events) = feedwire_mio::event_channel(8);
    feed.connect(
        StreamConfig::binance_stream(&srv.url()),
        Delivery::Channel(tx),
    )
    .unwrap();
    let start = Instant::now();
    let mut data = 0;
    while data < COUNT {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{data} messages in a minute: the turns slept"
        );
        feed.turn(None, |_| {}).unwrap();
        while let Ok(event) = events.try_recv() {
            data += usize::from(matches!(event, StreamEvent::Data { .. }));
        }
    }
}

/// Every event, as it came, with the time the handler got it and the time it returned.
#[derive(Clone, Default)]
struct Timeline(Arc<Mutex<Vec<(StreamEvent, Instant, Instant)>>>);

impl Timeline {
    fn any(&self, what: fn(&StreamEvent) -> bool) -> bool {
        self.0.lock().unwrap().iter().any(|(e, ..)| what(e))
    }

    fn count(&self, what: fn(&StreamEvent) -> bool) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(e, ..)| what(e))
            .count()
    }

    fn events(&self) -> Vec<StreamEvent> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(e, ..)| e.clone())
            .collect()
    }
}

/// Records into a [`Timeline`]; each data message takes its handler `busy`.
struct Recorder {
    timeline: Timeline,
    busy: Duration,
}

impl Handler for Recorder {
    fn on_event(&mut self, event: StreamEvent) {
        let got = Instant::now();
        if matches!(event, StreamEvent::Data { .. }) {
            std::thread::sleep(self.busy);
        }
        self.timeline
            .0
            .lock()
            .unwrap()
            .push((event, got, Instant::now()));
    }
}

/// A stream on `feed` to a one-connection server run by hand: it answers the upgrade, then
/// runs `script` on the socket, then holds the connection until the client goes. Its
/// messages' handler takes `busy` each; its timers are off unless `config` sets them.
fn hand_served(
    feed: &mut MioLoop,
    path: &str,
    busy: Duration,
    config: impl FnOnce(&mut StreamConfig),
    script: impl FnOnce(&mut std::net::TcpStream) + Send + 'static,
) -> (StreamId, Timeline, std::thread::JoinHandle<()>) {
    use std::io::Read;

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        feedwire_tests::scenarios::accept_upgrade(&mut sock);
        script(&mut sock);
        while matches!(sock.read(&mut [0; 512]), Ok(n) if n > 0) {}
    });
    let mut stream_config = StreamConfig::binance_stream(&format!("ws://{addr}{path}"));
    stream_config.timeouts.first_data = None;
    stream_config.timeouts.idle = None;
    stream_config.timeouts.keepalive = None;
    config(&mut stream_config);
    let timeline = Timeline::default();
    let handler = Recorder {
        timeline: timeline.clone(),
        busy,
    };
    let (id, _) = feed
        .connect(stream_config, Delivery::Handler(Box::new(handler)))
        .unwrap();
    (id, timeline, server)
}

fn opened(e: &StreamEvent) -> bool {
    matches!(e, StreamEvent::Opened { .. })
}

fn reconnecting(e: &StreamEvent) -> bool {
    matches!(e, StreamEvent::Reconnecting { .. })
}

fn data(e: &StreamEvent) -> bool {
    matches!(e, StreamEvent::Data { .. })
}

/// Turns `feed` and takes `events` until `want` data messages are counted (`taken` of them
/// already), failing at `deadline`; the count, which may overshoot by what one turn brought.
fn take_data(
    feed: &mut MioLoop,
    events: &mut feedwire_mio::Events,
    mut taken: usize,
    want: usize,
    deadline: Instant,
) -> usize {
    while taken < want {
        assert!(Instant::now() < deadline, "{taken} of {want} messages");
        feed.turn(Some(Duration::from_millis(50)), |_| {}).unwrap();
        while let Ok(event) = events.try_recv() {
            taken += usize::from(data(&event));
        }
    }
    taken
}

/// A small message's payload.
const SMALL: &[u8] = br#"{"e":"x"}"#;

/// A server script: waits for `go`, writes `frames` messages of `payload`, optionally ends
/// its side (a FIN, no Close), then says so on `done`.
fn write_on_go(
    frames: usize,
    payload: &'static [u8],
    end: bool,
) -> (
    std::sync::mpsc::Sender<()>,
    std::sync::mpsc::Receiver<()>,
    impl FnOnce(&mut std::net::TcpStream) + Send + 'static,
) {
    use std::io::Write;

    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let (done, done_rx) = std::sync::mpsc::channel::<()>();
    let script = move |sock: &mut std::net::TcpStream| {
        go_rx.recv().unwrap();
        let frame = feedwire_core::testing::server_frame(true, 1, payload);
        for _ in 0..frames {
            sock.write_all(&frame).unwrap();
        }
        if end {
            sock.shutdown(std::net::Shutdown::Write).unwrap();
        }
        done.send(()).unwrap();
    };
    (go, done_rx, script)
}

/// A peer's last messages and its end (a FIN, no Close) that are both in the socket when the
/// loop looks come as one readiness event, reported once (edge-triggered): the reads go on
/// past the messages' short read to the end, which is seen in that turn — not at the idle
/// timeout, nor never with the timers off.
#[test]
fn a_peers_end_that_came_with_its_last_messages_is_seen_in_the_same_turn() {
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let (go, written, script) = write_on_go(3, SMALL, true);
    let (id, timeline, server) = hand_served(&mut feed, "/ws", Duration::ZERO, |_| {}, script);
    turn_until(&mut feed, "the stream to open", || timeline.any(opened));
    go.send(()).unwrap();
    written.recv().unwrap();
    // Loopback: the bytes and the FIN are in our socket once the server's calls return;
    // the pause only lets the kernel finish its softirq work.
    std::thread::sleep(Duration::from_millis(50));
    for turn in 1.. {
        assert!(
            turn <= 3,
            "the end not seen in 3 turns: {:?}",
            timeline.events()
        );
        feed.turn(Some(Duration::from_millis(100)), |_| {}).unwrap();
        if timeline.any(reconnecting) {
            break;
        }
    }
    assert_eq!(timeline.count(data), 3);
    feed.stop(id);
    drop(feed);
    server.join().unwrap();
}

/// A timer's effects reach the application in the turn that fired it: the turn that waited
/// for the first-data deadline returns with the stream's `Reconnecting` — not a turn later,
/// when the next wake-up (the idle-buffer sweep, up to a second on) services the stream.
#[test]
fn a_timers_events_come_with_the_turn_that_fired_it() {
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let first_data = Duration::from_millis(300);
    let (id, timeline, server) = hand_served(
        &mut feed,
        "/stream?streams=btcusdt@aggTrade",
        Duration::ZERO,
        |c| c.timeouts.first_data = Some(first_data),
        |_| {},
    );
    turn_until(&mut feed, "the stream to open", || timeline.any(opened));
    // The loop armed the deadline before the test saw `Opened`: past `due`, it is due.
    let due = Instant::now() + first_data;
    loop {
        assert!(feed.turn(Some(Duration::from_secs(5)), |_| {}).unwrap());
        let reconnected = timeline.any(reconnecting);
        if reconnected || Instant::now() >= due {
            assert!(
                reconnected,
                "a turn past the deadline without its Reconnecting: {:?}",
                timeline.events()
            );
            break;
        }
    }
    feed.stop(id);
    drop(feed);
    server.join().unwrap();
}

/// Streams serviced in one wake-up are each stamped with the time their own service began:
/// a message read after another stream's slow handler is not dated before that handler
/// returned (its `received` feeds latency figures).
#[test]
fn streams_serviced_in_one_turn_are_stamped_with_their_own_service_time() {
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let busy = Duration::from_millis(5);
    let (go_a, written_a, script_a) = write_on_go(1, SMALL, false);
    let (go_b, written_b, script_b) = write_on_go(1, SMALL, false);
    let (a, timeline_a, server_a) = hand_served(&mut feed, "/ws", busy, |_| {}, script_a);
    let (b, timeline_b, server_b) = hand_served(&mut feed, "/ws", busy, |_| {}, script_b);
    turn_until(&mut feed, "both streams to open", || {
        timeline_a.any(opened) && timeline_b.any(opened)
    });
    go_a.send(()).unwrap();
    go_b.send(()).unwrap();
    written_a.recv().unwrap();
    written_b.recv().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    // Both messages are in their sockets: one wake-up reports both streams.
    feed.turn(Some(Duration::from_secs(5)), |_| {}).unwrap();
    let message = |timeline: &Timeline| {
        let all = timeline.0.lock().unwrap();
        let found = all.iter().find(|(e, ..)| data(e)).cloned();
        match found {
            Some((StreamEvent::Data { received, .. }, _, returned)) => (received, returned),
            _ => panic!("no message in one turn: {:?}", timeline.events()),
        }
    };
    let ((received_a, returned_a), (received_b, returned_b)) =
        (message(&timeline_a), message(&timeline_b));
    let (first_returned, second_received) = if returned_a < returned_b {
        (returned_a, received_b)
    } else {
        (returned_b, received_a)
    };
    assert!(
        second_received >= first_returned,
        "the second stream's message is dated {:?} before the first's handler returned",
        first_returned - second_received
    );
    feed.stop(a);
    feed.stop(b);
    drop(feed);
    server_a.join().unwrap();
    server_b.join().unwrap();
}

/// A stream's reads within one service after its first are each stamped when they were
/// read: a message read after a slow handler returned is not dated at the service's start
/// (the first read is; a wake-up for one message reads the clock once).
#[test]
fn each_further_read_of_a_service_is_stamped_when_it_was_read() {
    static LARGE: [u8; 3000] = [b'x'; 3000];
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    // 72 KB in the socket at once, read 4 KiB at a time, all in one service (the read
    // budget is 1 MiB); each message's handler takes 5 ms.
    let (go, written, script) = write_on_go(24, &LARGE, false);
    let (id, timeline, server) = hand_served(
        &mut feed,
        "/ws",
        Duration::from_millis(5),
        |c| c.ws.max_read_size = 4096,
        script,
    );
    turn_until(&mut feed, "the stream to open", || timeline.any(opened));
    go.send(()).unwrap();
    written.recv().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    feed.turn(Some(Duration::from_secs(5)), |_| {}).unwrap();
    let messages: Vec<(Instant, Instant)> = timeline
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(e, _, returned)| match e {
            StreamEvent::Data { received, .. } => Some((*received, *returned)),
            _ => None,
        })
        .collect();
    assert_eq!(messages.len(), 24, "one turn: {:?}", timeline.events());
    let (_, first_returned) = messages[0];
    let (last_received, _) = messages[23];
    assert!(
        last_received >= first_returned,
        "the last message, read reads after the first, is dated {:?} before the first's \
         handler returned",
        first_returned - last_received
    );
    feed.stop(id);
    drop(feed);
    server.join().unwrap();
}

/// Output the socket could not take at once goes out as the peer reads it, with nothing else
/// happening on the stream (no input, its timers off): the loop asks to hear when the socket
/// is writable while output waits.
#[test]
fn output_the_socket_could_not_take_goes_out_as_the_peer_reads() {
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let (reader, client) = slow_reader();
    let (id, timeline, server) = hand_served(
        &mut feed,
        "/ws",
        Duration::ZERO,
        |c| c.max_send_queue = 64 << 20,
        move |sock| reader.read(sock),
    );
    turn_until(&mut feed, "the stream to open", || timeline.any(opened));
    assert_eq!(client.send(&mut feed, id), SLOW_READ + 14);
    feed.stop(id);
    drop(feed);
    server.join().unwrap();
}

/// What a reader that waits gets: more than loopback's socket buffers hold between them.
const SLOW_READ: usize = 32 << 20;

/// The server's side of [`slow_reader`].
struct SlowReader {
    go: std::sync::mpsc::Receiver<()>,
    got: std::sync::mpsc::Sender<usize>,
}

/// The client's side of [`slow_reader`].
struct SlowReaderClient {
    go: std::sync::mpsc::Sender<()>,
    got: std::sync::mpsc::Receiver<usize>,
}

/// A server that reads nothing until the client has sent [`SLOW_READ`] bytes in one binary
/// message and turned a while (the socket could not take them at once), then reads the
/// whole frame and says how many bytes came.
fn slow_reader() -> (SlowReader, SlowReaderClient) {
    let (go, go_rx) = std::sync::mpsc::channel();
    let (got_tx, got) = std::sync::mpsc::channel();
    let reader = SlowReader {
        go: go_rx,
        got: got_tx,
    };
    (reader, SlowReaderClient { go, got })
}

impl SlowReader {
    fn read(self, sock: &mut std::net::TcpStream) {
        use std::io::Read;
        self.go.recv().unwrap();
        // A masked frame's header of that length is 14 bytes.
        let (mut total, mut buf) = (0, vec![0u8; 1 << 16]);
        while total < SLOW_READ + 14 {
            match sock.read(&mut buf).unwrap() {
                0 => break,
                n => total += n,
            }
        }
        self.got.send(total).unwrap();
    }
}

impl SlowReaderClient {
    /// Sends the message, turns, lets the reader go; turns until it says how many bytes came.
    fn send(&self, feed: &mut MioLoop, id: StreamId) -> usize {
        feed.send_binary(id, &vec![7u8; SLOW_READ]).unwrap();
        for _ in 0..3 {
            feed.turn(Some(Duration::from_millis(20)), |_| {}).unwrap();
        }
        self.go.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(total) = self.got.try_recv() {
                return total;
            }
            assert!(
                Instant::now() < deadline,
                "the rest of the message did not go out"
            );
            feed.turn(Some(Duration::from_millis(100)), |_| {}).unwrap();
        }
    }
}

/// A loop with nothing to do sleeps until its next deadline or `max_wait`: an idle
/// connection costs no CPU. (Over a second of 200 ms turns, about six; a loop that never
/// slept would turn hundreds of thousands of times.)
#[test]
fn an_idle_loop_sleeps_between_turns() {
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let (id, timeline, server) = hand_served(&mut feed, "/ws", Duration::ZERO, |_| {}, |_| {});
    turn_until(&mut feed, "the stream to open", || timeline.any(opened));
    let turns = turns_in_a_second(&mut feed);
    assert!(turns <= 20, "{turns} turns in a second of nothing");
    feed.stop(id);
    drop(feed);
    server.join().unwrap();
}

/// Turns `feed` for a second, at most 200 ms a turn; how many turns that took.
fn turns_in_a_second(feed: &mut MioLoop) -> usize {
    let (start, mut turns) = (Instant::now(), 0);
    while start.elapsed() < Duration::from_secs(1) {
        feed.turn(Some(Duration::from_millis(200)), |_| {}).unwrap();
        turns += 1;
    }
    turns
}

/// A consumer that does not take its events: the loop stops reading the stream (its socket
/// holds the rest) and sleeps until the consumer makes room — it does not spin on the input
/// it is holding back, nor wake for each piece of it that arrives. The server writes its
/// 100 messages 2 ms apart, each its own segment: a socket left registered for readability
/// woke the loop for every one (106 turns in the second; about ten now, half of them the
/// 200 ms turns' own). Once the consumer takes, every message comes: what arrived while the
/// socket was not registered is reported when it is again.
#[test]
fn a_loop_whose_consumer_is_behind_sleeps_until_it_takes() {
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let (tx, mut events) = feedwire_mio::event_channel(4);
    let (addr, server) = feedwire_tests::scenarios::paced_segments_server(
        100,
        Duration::ZERO,
        Duration::from_millis(2),
    );
    let mut config = StreamConfig::binance_stream(&format!("ws://{addr}/ws"));
    config.timeouts.keepalive = None;
    let (id, _) = feed.connect(config, Delivery::Channel(tx)).unwrap();
    let turns = turns_in_a_second(&mut feed);
    assert!(turns <= 20, "{turns} turns in a second with a full channel");
    take_data(
        &mut feed,
        &mut events,
        0,
        100,
        Instant::now() + Duration::from_secs(20),
    );
    feed.stop(id);
    drop(feed);
    server.join().unwrap();
}

/// Output waiting for a slow peer while the stream's consumer is behind: the socket, not
/// registered for readability then, is registered for writability alone, the output goes
/// out as the peer reads, and once the consumer takes, the input held back comes whole.
#[test]
fn output_waiting_while_the_consumer_is_behind_goes_out_and_the_input_follows() {
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let (tx, mut events) = feedwire_mio::event_channel(4);
    let (reader, client) = slow_reader();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut sock, _) = listener.accept().unwrap();
        feedwire_tests::scenarios::accept_upgrade(&mut sock);
        let frame = feedwire_core::testing::server_frame(true, 1, SMALL);
        sock.write_all(&frame.repeat(100)).unwrap();
        reader.read(&mut sock);
        while matches!(sock.read(&mut [0; 512]), Ok(n) if n > 0) {}
    });
    let mut config = StreamConfig::binance_stream(&format!("ws://{addr}/ws"));
    config.timeouts.first_data = None;
    config.timeouts.idle = None;
    config.timeouts.keepalive = None;
    config.max_send_queue = 64 << 20;
    let (id, _) = feed.connect(config, Delivery::Channel(tx)).unwrap();
    let (mut taken, mut open) = (0, false);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !open {
        assert!(Instant::now() < deadline, "the stream did not open");
        feed.turn(Some(Duration::from_millis(50)), |_| {}).unwrap();
        while let Ok(event) = events.try_recv() {
            open |= opened(&event);
            taken += usize::from(data(&event));
        }
    }
    // The channel fills and stays full: the consumer is behind from here on.
    for _ in 0..3 {
        feed.turn(Some(Duration::from_millis(20)), |_| {}).unwrap();
    }
    assert_eq!(client.send(&mut feed, id), SLOW_READ + 14);
    assert_eq!(take_data(&mut feed, &mut events, taken, 100, deadline), 100);
    feed.stop(id);
    drop(feed);
    server.join().unwrap();
}

/// A read budget spent with input left: the next turn does not wait (for the next deadline,
/// the idle sweep's a second on) before it reads on — nothing that arrived is held back.
/// 256 KiB read 4 KiB a turn: 64 turns without a wait take milliseconds; waiting for the
/// sweep each time, over a minute, and the 20 s bound fails.
#[test]
fn input_left_by_a_spent_read_budget_is_read_on_without_waiting() {
    const MESSAGES: usize = 1300;
    let options = MioOptions {
        read_budget: 4096,
        ..MioOptions::default()
    };
    let mut feed = MioLoop::new(options).unwrap();
    let script = |sock: &mut std::net::TcpStream| {
        use std::io::Write;
        let payload = [b'7'; 200];
        let frame = feedwire_core::testing::server_frame(true, 1, &payload);
        let all: Vec<u8> = (0..MESSAGES).flat_map(|_| frame.iter().copied()).collect();
        sock.write_all(&all).unwrap();
    };
    let (id, timeline, server) = hand_served(
        &mut feed,
        "/ws",
        Duration::ZERO,
        |c| c.ws.max_read_size = 4096,
        script,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while timeline.count(data) < MESSAGES {
        assert!(
            Instant::now() < deadline,
            "{} of {MESSAGES} messages",
            timeline.count(data)
        );
        feed.turn(None, |_| {}).unwrap();
    }
    feed.stop(id);
    drop(feed);
    server.join().unwrap();
}

/// A stream stopped while its addresses are on their way (the resolver reports through the
/// loop's channel, even for an IP literal) and kept by events its consumer has not taken
/// makes no connection when they arrive: a stopped stream must not connect.
#[test]
fn a_stream_stopped_before_its_addresses_came_makes_no_connection() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let (tx, mut events) = feedwire_mio::event_channel(1);
    let config = StreamConfig::binance_stream(&format!("ws://{addr}/ws"));
    let (id, _) = feed.connect(config, Delivery::Channel(tx)).unwrap();
    feed.stop(id);
    for _ in 0..3 {
        feed.turn(Some(Duration::from_millis(20)), |_| {}).unwrap();
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a stopped stream connected: {other:?}"),
    }
    // Its events still come: the stream ends closed.
    let (mut closed, deadline) = (false, Instant::now() + Duration::from_secs(20));
    while !closed {
        assert!(Instant::now() < deadline, "no Closed");
        feed.turn(Some(Duration::from_millis(20)), |_| {}).unwrap();
        while let Ok(event) = events.try_recv() {
            closed |= matches!(event, StreamEvent::Closed { .. });
        }
    }
}

/// A consumer that has fallen behind (its channel full, events waiting in the loop) stops
/// the stream's reads until it takes — from the read that found it behind on, not only from
/// the next turn: the socket holds the rest, and the loop holds at most one read's events,
/// not a read budget's (1 MiB) nor a read's more for every turn it makes meanwhile.
#[test]
fn a_stream_whose_consumer_is_behind_is_not_read() {
    const MAX_READ: usize = 16 * 1024;
    /// Bytes of the smallest `small_aggtrade` message, at least.
    const MIN_MESSAGE: usize = 150;
    let srv = held_open(1_000_000);
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let (tx, _events) = feedwire_mio::event_channel(4);
    let mut config = StreamConfig::binance_stream(&srv.url());
    config.ws.max_read_size = MAX_READ;
    let (id, stats) = feed.connect(config, Delivery::Channel(tx)).unwrap();
    let received = || stats.snapshot(Instant::now()).messages_received;
    // The channel holds four events (Connecting, Opened, two messages): a third message
    // waits in the loop, and from then on nothing is read.
    turn_until(&mut feed, "a message the channel has no room for", || {
        received() > 2
    });
    for _ in 0..3 {
        feed.turn(Some(Duration::from_millis(20)), |_| {}).unwrap();
    }
    let held = received();
    let one_read = (MAX_READ / MIN_MESSAGE) as u64;
    assert!(
        held <= 2 + one_read,
        "{held} messages read for a channel of four: more than one read after it filled"
    );
    for _ in 0..20 {
        feed.turn(Some(Duration::from_millis(20)), |_| {}).unwrap();
    }
    assert_eq!(received(), held, "read on while the consumer took nothing");
    feed.stop(id);
}

/// A signal delivered while the loop waits (a profiler's SIGPROF, the application's own
/// handler) interrupts `epoll_wait`: that is a turn that found nothing, not an error — on
/// its own thread the loop ends at an error, every stream with it.
#[test]
fn a_signal_during_the_wait_is_a_turn_that_found_nothing() {
    use nix::sys::pthread::{pthread_kill, pthread_self};
    use nix::sys::signal::Signal;

    let caught = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, caught.clone()).unwrap();
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let waiting = pthread_self();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        pthread_kill(waiting, Signal::SIGUSR1).unwrap();
    });
    let turned = feed.turn(Some(Duration::from_secs(5)), |_| {});
    sender.join().unwrap();
    assert!(caught.load(Ordering::SeqCst), "the signal came");
    assert!(matches!(turned, Ok(true)), "{turned:?}");
}

/// A user token carries its number and the top bit; a stream's token (top bit clear) has no
/// user number.
#[test]
fn user_tokens_round_trip_and_stream_tokens_are_not_users() {
    for n in [0, 7, u32::MAX] {
        assert_eq!(user_token_number(user_token(n)), Some(n));
    }
    assert_eq!(user_token_number(mio::Token(7)), None);
    assert_eq!(user_token_number(mio::Token((3 << 32) | 7)), None);
}

/// A Binance stream to `url` on `feed`, its events recorded; returned once it is open.
fn open_recorded(feed: &mut MioLoop, url: &str) -> (StreamId, Timeline) {
    let timeline = Timeline::default();
    let handler = Recorder {
        timeline: timeline.clone(),
        busy: Duration::ZERO,
    };
    let (id, _) = feed
        .connect(
            StreamConfig::binance_stream(url),
            Delivery::Handler(Box::new(handler)),
        )
        .unwrap();
    turn_until(feed, "the stream to open", || timeline.any(opened));
    (id, timeline)
}

/// `crash` ends the stream within the call: the handler has its `Crashed` when it returns,
/// and the stream is gone from the loop — every call for it says so.
#[test]
fn crash_ends_a_stream_within_the_call_and_calls_for_it_find_no_stream() {
    let srv = held_open(10);
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let (id, timeline) = open_recorded(&mut feed, &srv.url());
    feed.crash(id, "enough");
    assert!(
        timeline.any(|e| matches!(e, StreamEvent::Crashed(_))),
        "{:?}",
        timeline.events()
    );
    // Every call reaches the loop, which has no such stream any more.
    let sub = || feedwire_core::BetfairSubscription {
        filter_json: String::from("{}"),
        data_filter_json: None,
        heartbeat_ms: None,
        conflate_ms: None,
    };
    let auth = feedwire_core::BetfairAuth {
        app_key: String::from("key"),
        session: String::from("token"),
    };
    for (call, result) in [
        ("subscribe", feed.subscribe(id, &["btcusdt@trade"])),
        ("unsubscribe", feed.unsubscribe(id, &["btcusdt@trade"])),
        ("list_subscriptions", feed.list_subscriptions(id)),
        ("subscriptions", feed.subscriptions(id).map(drop)),
        ("subscribe_markets", feed.subscribe_markets(id, sub())),
        ("subscribe_orders", feed.subscribe_orders(id, sub())),
        ("set_betfair_auth", feed.set_betfair_auth(id, auth)),
        ("send_text", feed.send_text(id, "{}")),
        ("send_binary", feed.send_binary(id, b"{}")),
    ] {
        assert!(
            matches!(result, Err(feedwire_mio::LoopError::NoStream)),
            "{call}: {result:?}"
        );
    }
}

/// The embedded loop's subscription calls act within the call: a subscribe and an
/// unsubscribe change the stream's list, and unsubscribing a stream not subscribed is an
/// error.
#[test]
fn subscriptions_change_within_the_embedded_calls() {
    let srv = ReplayServer::start(ReplayConfig::new(Scenario::SmallAggTrade)).unwrap();
    let mut feed = MioLoop::new(MioOptions::default()).unwrap();
    let (id, _) = open_recorded(&mut feed, &srv.subscribe_url());
    feed.subscribe(id, &["btcusdt@aggTrade", "ethusdt@aggTrade"])
        .unwrap();
    feed.unsubscribe(id, &["btcusdt@aggTrade"]).unwrap();
    assert_eq!(feed.subscriptions(id).unwrap(), ["ethusdt@aggTrade"]);
    assert!(feed.unsubscribe(id, &["btcusdt@aggTrade"]).is_err());
    feed.stop(id);
}
