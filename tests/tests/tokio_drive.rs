//! The tokio adapter's stream future driven on the caller's task (`drive_lending`): it ends
//! when the stream does, and while it waits it sleeps — counted in polls of the future, which
//! a busy wait multiplies by thousands.

use std::future::Future;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use feedwire_core::{DataHandler, DataRef, StreamConfig, StreamEvent};
use feedwire_replay::{ReplayConfig, ReplayServer, Scenario, TestPki};
use feedwire_tests::scenarios::accept_upgrade;
use feedwire_tokio::{drive_lending, TokioOptions};

/// The close handshake's timeout in these tests.
const CLOSE_TIMEOUT: Duration = Duration::from_millis(300);

/// What the mute server heard after the upgrade: each client frame's opcode, in order, and a
/// notification per frame.
#[derive(Default)]
struct Heard {
    opcodes: std::sync::Mutex<Vec<u8>>,
    frame: tokio::sync::Notify,
}

/// A WebSocket server that accepts one client and then never writes again — not even the
/// answer to a Close — and reads until the client goes, noting the frames it hears.
fn mute_server() -> (SocketAddr, Arc<Heard>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let heard = Arc::new(Heard::default());
    let noted = Arc::clone(&heard);
    let server = thread::spawn(move || {
        let (mut sock, _) = listener.accept().expect("accept");
        accept_upgrade(&mut sock);
        let mut buf = [0u8; 4096];
        let mut pending = Vec::new();
        while let Ok(n @ 1..) = sock.read(&mut buf) {
            pending.extend_from_slice(&buf[..n]);
            // Client frames here are control frames: masked, payload under 126 bytes.
            while let [first, second, ..] = pending[..] {
                let size = 2 + 4 + usize::from(second & 0x7F);
                if pending.len() < size {
                    break;
                }
                noted.opcodes.lock().expect("lock").push(first & 0x0F);
                noted.frame.notify_one();
                pending.drain(..size);
            }
        }
    });
    (addr, heard, server)
}

/// Signals the stream's opening; counts data messages; keeps how it ended.
struct Watch {
    opened: Option<tokio::sync::oneshot::Sender<()>>,
    data: Arc<AtomicU64>,
    ended: Arc<std::sync::Mutex<Option<StreamEvent>>>,
}

impl DataHandler for Watch {
    fn on_data(&mut self, _: DataRef<'_>) {
        self.data.fetch_add(1, Ordering::Relaxed);
    }

    fn on_event(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::Opened { .. } => {
                if let Some(tx) = self.opened.take() {
                    let _ = tx.send(());
                }
            }
            StreamEvent::Closed { .. } | StreamEvent::Crashed(_) => {
                *self.ended.lock().expect("lock") = Some(event);
            }
            _ => {}
        }
    }
}

/// A watch that signals the opening, and where it keeps how the stream ended.
fn watch_opening() -> (
    Watch,
    tokio::sync::oneshot::Receiver<()>,
    Arc<std::sync::Mutex<Option<StreamEvent>>>,
) {
    let (opened_tx, opened_rx) = tokio::sync::oneshot::channel();
    let ended = Arc::new(std::sync::Mutex::new(None));
    let watch = Watch {
        opened: Some(opened_tx),
        data: Arc::default(),
        ended: Arc::clone(&ended),
    };
    (watch, opened_rx, ended)
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn assert_closed_by_us(ended: &std::sync::Mutex<Option<StreamEvent>>) {
    let ended = ended.lock().expect("lock");
    assert!(
        matches!(
            *ended,
            Some(StreamEvent::Closed {
                by: feedwire_core::CloseInitiator::Local,
                ..
            })
        ),
        "ended with {ended:?}"
    );
}

/// Every handle dropped on an open stream stops it; the close handshake then goes unanswered
/// and the future waits out the close timeout — asleep: a few polls (the command, the
/// timer), not one per scheduler turn. (It used to wait on the closed command channel, which
/// is always ready: 100% CPU until the timeout.)
#[test]
fn with_every_handle_gone_the_close_is_awaited_asleep() {
    let (addr, _, server) = mute_server();
    let mut config = StreamConfig::binance_stream(&format!("ws://{addr}/ws"));
    config.timeouts.close = CLOSE_TIMEOUT;
    let (watch, opened_rx, ended) = watch_opening();
    let rt = current_thread();
    let dropped = AtomicBool::new(false);
    let polls_after_drop = AtomicU64::new(0);
    let took = rt.block_on(async {
        let (handle, drive) = drive_lending(config, TokioOptions::default(), watch).expect("ok");
        let mut drive = pin!(drive);
        let counted = std::future::poll_fn(|cx| {
            if dropped.load(Ordering::Relaxed) {
                polls_after_drop.fetch_add(1, Ordering::Relaxed);
            }
            drive.as_mut().poll(cx)
        });
        let drop_when_open = async {
            tokio::time::timeout(Duration::from_secs(10), opened_rx)
                .await
                .expect("opened in time")
                .expect("signal");
            drop(handle);
            dropped.store(true, Ordering::Relaxed);
            Instant::now()
        };
        let (_, since) = tokio::time::timeout(
            Duration::from_secs(10),
            futures_util::future::join(counted, drop_when_open),
        )
        .await
        .expect("the stream ended in time");
        since.elapsed()
    });
    // The last writes of a closed connection run on a task of their own: the runtime's end
    // drops them, and with them the socket, so the server sees the client go.
    drop(rt);
    server.join().expect("server");
    assert!(
        took >= CLOSE_TIMEOUT,
        "ended after {took:?}, before the close timeout"
    );
    let polls = polls_after_drop.load(Ordering::Relaxed);
    assert!(
        polls <= 20,
        "{polls} polls while waiting {took:?} for the close"
    );
    assert!(
        matches!(
            *ended.lock().expect("lock"),
            Some(StreamEvent::Closed { .. })
        ),
        "ended with {:?}",
        ended.lock().expect("lock")
    );
}

/// A waker that forwards to another until it is retired, and then wakes nothing: a task's
/// old waker, once the future has moved on.
struct Forward {
    to: Waker,
    retired: AtomicBool,
}

impl Wake for Forward {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.retired.load(Ordering::Relaxed) {
            self.to.wake_by_ref();
        }
    }
}

/// The future polled first with one waker, then — once open — with another, the first
/// retired: what a future moved to another task, or into a combinator, sees. A wait skips a
/// source that still holds the task's waker; it must see that the waker changed. Here no
/// timer is armed while open, so only the command channel can carry the stop: left holding
/// the retired waker, it would never wake the future, and the time limit fails the test.
#[test]
fn a_stop_reaches_a_future_polled_under_a_new_waker() {
    stop_under_a_new_waker(None, false);
}

/// As above, with the first poll under the new waker made after the task spent its tokio
/// budget: the command channel then returns `Pending` without taking the waker (tokio asks
/// for a re-poll instead), and that poll must not count as the channel holding it.
#[test]
fn a_poll_with_the_budget_spent_registers_nothing_and_the_stop_still_arrives() {
    stop_under_a_new_waker(None, true);
}

/// As above, with the idle timer armed under the first waker: it has to fire into the new
/// one (its ping reaches the server) with nothing else waking the future.
#[test]
fn a_timer_armed_under_the_old_waker_fires_into_the_new_one() {
    stop_under_a_new_waker(Some(Duration::from_millis(300)), false);
}

fn stop_under_a_new_waker(idle: Option<Duration>, spend_budget: bool) {
    let (addr, heard, server) = mute_server();
    let mut config = StreamConfig::binance_stream(&format!("ws://{addr}/ws"));
    config.timeouts.close = CLOSE_TIMEOUT;
    config.timeouts.first_data = None;
    config.timeouts.idle = idle;
    let (watch, opened_rx, ended) = watch_opening();
    let rt = current_thread();
    let switch = AtomicBool::new(false);
    rt.block_on(async {
        let (handle, drive) = drive_lending(config, TokioOptions::default(), watch).expect("ok");
        let mut drive = pin!(drive);
        let forward = |cx: &Context<'_>| {
            Arc::new(Forward {
                to: cx.waker().clone(),
                retired: AtomicBool::new(false),
            })
        };
        let (mut old, mut new) = (None, None);
        let polled = std::future::poll_fn(|cx| {
            let switched = switch.load(Ordering::Relaxed);
            if switched && new.is_none() && spend_budget {
                while tokio::task::coop::has_budget_remaining() {
                    let _ = pin!(tokio::task::coop::consume_budget()).poll(cx);
                }
            }
            let waker = if switched { &mut new } else { &mut old };
            let waker = Waker::from(Arc::clone(waker.get_or_insert_with(|| forward(cx))));
            let poll = drive.as_mut().poll(&mut Context::from_waker(&waker));
            if let Some(first) = old.as_ref().filter(|_| switched) {
                first.retired.store(true, Ordering::Relaxed);
            }
            poll
        });
        let control = async {
            tokio::time::timeout(Duration::from_secs(10), opened_rx)
                .await
                .expect("opened in time")
                .expect("signal");
            switch.store(true, Ordering::Relaxed);
            // One wake-up of this branch, so that the future is polled with the new waker;
            // after it, nothing but the future's own sources wakes it.
            tokio::time::sleep(Duration::from_millis(20)).await;
            if idle.is_some() {
                tokio::time::timeout(Duration::from_secs(5), heard.frame.notified())
                    .await
                    .expect("the idle timer's ping within 5 s");
                assert_eq!(
                    heard.opcodes.lock().expect("lock")[..],
                    [0x9],
                    "a ping first"
                );
            }
            handle.stop();
        };
        tokio::time::timeout(
            Duration::from_secs(10),
            futures_util::future::join(polled, control),
        )
        .await
        .expect("the stop ended the stream in time");
    });
    drop(rt);
    server.join().expect("server");
    assert_closed_by_us(&ended);
    assert_eq!(
        heard.opcodes.lock().expect("lock").last(),
        Some(&0x8),
        "our Close went out"
    );
}

/// The future driven in `block_on` itself (no task of its own) reads a whole firehose, and
/// ends, with the stream closed by us, once `stop()` is called.
#[test]
fn driven_in_block_on_every_message_arrives_and_stop_ends_the_future() {
    read_all_then_stop(TokioOptions::default());
}

/// `busy_poll`: the future spins instead of sleeping, without end (`Duration::MAX`, which
/// must not overflow a deadline) — and still every message arrives, the runtime's other task
/// (a timer loop) runs, and its `stop()` ends the future. A spin that kept the runtime from
/// its drivers would never see the stop: the watchdog fails the test instead of hanging.
#[test]
fn a_busy_polling_stream_lets_the_runtime_run_and_stops_at_once() {
    let done = Arc::new(AtomicBool::new(false));
    let watched = Arc::clone(&done);
    thread::spawn(move || {
        thread::sleep(Duration::from_secs(60));
        if !watched.load(Ordering::Relaxed) {
            eprintln!("a busy-polling stream did not end within 60 s");
            std::process::abort();
        }
    });
    read_all_then_stop(TokioOptions {
        busy_poll: Duration::MAX,
        ..TokioOptions::default()
    });
    done.store(true, Ordering::Relaxed);
}

fn read_all_then_stop(options: TokioOptions) {
    const COUNT: u64 = 20_000;
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(usize::try_from(COUNT).expect("count")),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .expect("replay server");
    let data = Arc::new(AtomicU64::new(0));
    let ended = Arc::new(std::sync::Mutex::new(None));
    let watch = Watch {
        opened: None,
        data: Arc::clone(&data),
        ended: Arc::clone(&ended),
    };
    let rt = current_thread();
    let (handle, drive) = drive_lending(StreamConfig::binance_stream(&srv.url()), options, watch)
        .expect("valid config");
    let seen = Arc::clone(&data);
    let stopper = rt.spawn(async move {
        while seen.load(Ordering::Relaxed) < COUNT {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        handle.stop();
    });
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), drive)
            .await
            .expect("the stream ended in time");
    });
    rt.block_on(stopper).expect("stopper");
    assert_eq!(data.load(Ordering::Relaxed), COUNT);
    assert_closed_by_us(&ended);
}

/// The future dropped while its stream connects — to an address that never answers, so
/// the connect cannot complete — takes the connection attempt with it: no task is left
/// behind (it stayed until the kernel gave up on the SYNs, and for good on a server that
/// accepts and never answers the TLS handshake).
#[test]
fn dropping_the_future_while_it_connects_leaves_no_task_behind() {
    let (silent, _listener, _queued) = feedwire_tests::scenarios::silent_address();
    current_thread().block_on(async {
        let metrics = tokio::runtime::Handle::current().metrics();
        let before = metrics.num_alive_tasks();
        let (watch, _opened, _ended) = watch_opening();
        let config = StreamConfig::binance_stream(&format!("ws://{silent}/ws"));
        let (_handle, drive) = drive_lending(config, TokioOptions::default(), watch).unwrap();
        let connecting = tokio::time::timeout(Duration::from_millis(300), drive).await;
        assert!(connecting.is_err(), "the connect cannot complete");
        let deadline = Instant::now() + Duration::from_secs(5);
        while metrics.num_alive_tasks() > before {
            assert!(
                Instant::now() < deadline,
                "the connect task outlived the stream"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// A stream's future dropped once open (a `select!` that took another branch) leaves its
/// statistics saying closed, and a lending handler's panic, on the task the future was
/// spawned on, crashed. Both used to read "open" for good, rates falling to zero as if the
/// market had gone quiet.
#[test]
fn a_dropped_or_panicked_stream_is_not_left_open_in_its_statistics() {
    struct PanicsOnData;
    impl DataHandler for PanicsOnData {
        fn on_data(&mut self, _: DataRef<'_>) {
            panic!("a handler's bug");
        }
        fn on_event(&mut self, _: StreamEvent) {}
    }
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(1_000_000),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .expect("replay server");
    let config = || StreamConfig::binance_stream(&srv.url());
    let rt = current_thread();

    let (watch, opened, _ended) = watch_opening();
    let (handle, drive) = drive_lending(config(), TokioOptions::default(), watch).unwrap();
    rt.block_on(async {
        tokio::select! {
            () = drive => panic!("the stream ended by itself"),
            opened = opened => opened.expect("opened"),
        }
    });
    assert_eq!(handle.stats().state, 5, "closed");

    let (handle, drive) = drive_lending(config(), TokioOptions::default(), PanicsOnData).unwrap();
    let joined = rt.block_on(rt.spawn(drive));
    assert!(joined.expect_err("the handler panicked").is_panic());
    assert_eq!(handle.stats().state, 6, "crashed");
}

/// `stop()` and, at once, the runtime's end (a `main` that stops its stream and returns):
/// the Close still reaches the server — the stream's task, dropped with the runtime, writes
/// it if the socket takes it then. It used to go nowhere: the stop was still a command in
/// the channel when the task went. The runtime's end alone closes the same way; a `crash()`
/// right before it sends nothing, as a crash does.
#[test]
fn a_stop_right_before_the_runtime_ends_still_sends_the_close() {
    for (last, heard_then) in [("stop", &[8u8][..]), ("nothing", &[8]), ("crash", &[])] {
        let (addr, heard, server) = mute_server();
        let rt = current_thread();
        let handle = rt.block_on(async {
            let config = StreamConfig::binance_stream(&format!("ws://{addr}/ws"));
            let (handle, mut events) =
                feedwire_tokio::connect(config, TokioOptions::default()).expect("ok");
            loop {
                match tokio::time::timeout(Duration::from_secs(10), events.next()).await {
                    Ok(Some(StreamEvent::Opened { .. })) => break handle,
                    Ok(Some(_)) => {}
                    other => panic!("not opened: {other:?}"),
                }
            }
        });
        match last {
            "stop" => handle.stop(),
            "crash" => handle.crash("given up"),
            _ => {}
        }
        drop(rt);
        server.join().expect("server");
        assert_eq!(
            *heard.opcodes.lock().expect("lock"),
            heard_then,
            "after {last}"
        );
    }
}

/// The same over TLS: the Close, then the close_notify after it — two writes of the
/// dropped task's; the server reads a clean end, not a connection cut short.
#[test]
fn a_stop_right_before_the_runtime_ends_closes_tls_cleanly() {
    let pki = TestPki::generate().expect("test CA");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server_config = pki.server_config();
    let server = thread::spawn(move || {
        let (sock, _) = listener.accept().expect("accept");
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let conn = feedwire_core::rustls::ServerConnection::new(server_config).expect("tls");
        let mut tls = feedwire_core::rustls::StreamOwned::new(conn, sock);
        accept_upgrade(&mut tls);
        let mut buf = [0u8; 4096];
        let mut heard = Vec::new();
        let clean = loop {
            match tls.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => heard.extend_from_slice(&buf[..n]),
                Err(e) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
                    break false;
                }
            }
        };
        (heard, clean)
    });
    let rt = current_thread();
    let handle = rt.block_on(async {
        let config = StreamConfig::binance_stream(&format!("wss://127.0.0.1:{}/ws", addr.port()));
        let options = TokioOptions {
            tls: Some(feedwire_core::tls_config_with_roots(pki.root_store())),
            ..TokioOptions::default()
        };
        let (handle, mut events) = feedwire_tokio::connect(config, options).expect("ok");
        loop {
            match tokio::time::timeout(Duration::from_secs(10), events.next()).await {
                Ok(Some(StreamEvent::Opened { .. })) => break handle,
                Ok(Some(_)) => {}
                other => panic!("not opened: {other:?}"),
            }
        }
    });
    handle.stop();
    drop(rt);
    let (heard, clean) = server.join().expect("server");
    let frames = feedwire_core::testing::decode_client_frames(&heard);
    assert_eq!(
        frames.iter().map(|f| f.1).collect::<Vec<_>>(),
        [8],
        "our Close"
    );
    assert!(clean, "close_notify after the Close");
}
