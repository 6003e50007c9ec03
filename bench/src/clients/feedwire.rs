//! feedwire three ways: the core's `Stream` on a blocking socket, the mio loop turned on the
//! measuring thread, and the tokio adapter's stream future awaited in a current-thread
//! runtime's `block_on` (`drive_lending`). All use the full
//! stream machine (classification, statistics, timers), as an application would, in the
//! fastest way each offers: data messages lent in place (`handle_read_with`,
//! `Delivery::Lend`, `drive_lending`), other events queued. Over TLS all three use the
//! core's `TlsSession` (the blocking loop drives it itself).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use feedwire_core::{
    os_seed, BetfairAuth, BetfairSubscription, DataHandler, DataRef, HandshakeOnly, LendingInput,
    StatsSnapshot, Stream, StreamConfig, StreamEvent, StreamInput, TlsSession, TransportCommand,
};
use feedwire_mio::{Delivery, MioLoop, MioOptions};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

use super::{err, runtime, Extra, Reads, Target, SPIN, STALL};
use crate::recorder::Recorder;

fn config(target: &Target) -> StreamConfig {
    if target.lines {
        StreamConfig::betfair(
            &target.url,
            BetfairAuth {
                app_key: "bench".to_owned(),
                session: "bench".to_owned(),
            },
        )
    } else {
        StreamConfig::binance_stream(&target.url)
    }
}

/// Feeds a queued event to the recorder; whether the run is complete. An end is an error:
/// every run stops the stream itself.
fn record(rec: &mut Recorder, event: &StreamEvent) -> Result<bool, String> {
    match event {
        StreamEvent::Data { payload, .. } => Ok(rec.on_message(payload.len(), payload)),
        StreamEvent::Closed { .. } | StreamEvent::Crashed(_) => {
            Err(format!("ended early: {event:?}"))
        }
        _ => Ok(false),
    }
}

/// Owns the recorder on the adapter's thread or task; gives it back once complete, or the
/// reason the stream ended first.
struct Record {
    rec: Option<Recorder>,
    /// A tokio channel: the mio client polls it, the tokio client awaits it.
    done: UnboundedSender<Result<Recorder, String>>,
    /// Set once `done` holds the outcome: the mio client's turn loop looks at this flag, not
    /// the channel, whose `try_recv` cost the harness ~80 instructions a turn.
    ended: Arc<AtomicBool>,
}

impl Record {
    fn new(rec: Recorder, done: UnboundedSender<Result<Recorder, String>>) -> Self {
        Self {
            rec: Some(rec),
            done,
            ended: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Hands the complete recorder back: once per run, out of the per-message path.
    #[cold]
    #[inline(never)]
    fn complete(&mut self) {
        if let Some(rec) = self.rec.take() {
            self.end(Ok(rec));
        }
    }

    fn end(&mut self, outcome: Result<Recorder, String>) {
        let _ = self.done.send(outcome);
        self.ended.store(true, Ordering::Release);
    }
}

impl DataHandler for Record {
    #[inline]
    fn on_data(&mut self, data: DataRef<'_>) {
        if let Some(rec) = self.rec.as_mut() {
            if rec.on_message(data.payload.len(), data.payload) {
                self.complete();
            }
        }
    }

    fn on_event(&mut self, event: StreamEvent) {
        if self.rec.is_some()
            && matches!(event, StreamEvent::Closed { .. } | StreamEvent::Crashed(_))
        {
            self.rec = None;
            self.end(Err(format!("ended early: {event:?}")));
        }
    }
}

fn markets() -> BetfairSubscription {
    BetfairSubscription {
        filter_json: "{}".to_owned(),
        data_filter_json: None,
        heartbeat_ms: None,
        conflate_ms: None,
    }
}

/// Lends data messages to the recorder (the blocking loop over TLS); other events stay
/// queued for the loop.
struct Lend<'a> {
    rec: &'a mut Recorder,
    done: bool,
}

impl DataHandler for Lend<'_> {
    fn on_data(&mut self, d: DataRef<'_>) {
        self.done = self.done || self.rec.on_message(d.payload.len(), d.payload);
    }

    fn on_event(&mut self, _: StreamEvent) {}
}

/// A blocking socket, and the TLS session on it when the target asks for one.
struct Conn {
    sock: TcpStream,
    tls: Option<TlsSession>,
}

impl Conn {
    fn open(target: &Target, host: &str, port: u16) -> Result<Self, String> {
        let mut sock = TcpStream::connect((host, port)).map_err(|e| err("connect")(&e))?;
        sock.set_nodelay(true).map_err(|e| err("nodelay")(&e))?;
        sock.set_read_timeout(Some(STALL))
            .map_err(|e| err("timeout")(&e))?;
        let Some(config) = target.tls.as_ref() else {
            return Ok(Self { sock, tls: None });
        };
        let mut tls = TlsSession::new(config.clone(), host).map_err(|e| err("tls")(&e))?;
        while tls.is_handshaking() {
            while let Some(c) = tls.poll_transmit() {
                sock.write_all(&c).map_err(|e| err("write")(&e))?;
            }
            match sock.read(tls.read_buf()) {
                Ok(0) => return Err("closed during the TLS handshake".to_owned()),
                Ok(n) => tls
                    .handle_read(n, &mut HandshakeOnly)
                    .map_err(|e| err("tls handshake")(&e))?,
                Err(e) => return Err(err("read")(&e)),
            }
        }
        // The client's Finished: a Betfair server says nothing until it has it.
        while let Some(c) = tls.poll_transmit() {
            sock.write_all(&c).map_err(|e| err("write")(&e))?;
        }
        Ok(Self {
            sock,
            tls: Some(tls),
        })
    }

    fn write(&mut self, chunk: &[u8]) -> Result<(), String> {
        let Some(tls) = self.tls.as_mut() else {
            return self.sock.write_all(chunk).map_err(|e| err("write")(&e));
        };
        tls.write_plaintext(chunk);
        while let Some(c) = tls.poll_transmit() {
            self.sock.write_all(&c).map_err(|e| err("write")(&e))?;
        }
        Ok(())
    }

    /// One read into the stream; whether the recorder is complete. Plain reads lend to a
    /// closure (`handle_read_with`, inlined); TLS lends through a [`DataHandler`], the form
    /// `TlsSession`'s sink takes.
    fn read(&mut self, s: &mut Stream, rec: &mut Recorder) -> Result<bool, String> {
        let now = Instant::now();
        let Some(tls) = self.tls.as_mut() else {
            let mut done = false;
            match self.sock.read(s.read_buf()) {
                Ok(0) => s.handle_eof(now),
                Ok(n) => s.handle_read_with(n, now, |d| {
                    done = done || rec.on_message(d.payload.len(), d.payload);
                }),
                Err(e) => return Err(err("read")(&e)),
            }
            return Ok(done);
        };
        let mut lend = Lend { rec, done: false };
        match self.sock.read(tls.read_buf()) {
            Ok(0) => {
                let _ = tls.handle_eof(&mut StreamInput { stream: s, now });
                s.handle_eof(now);
            }
            Ok(n) => {
                let input = &mut LendingInput {
                    stream: s,
                    now,
                    handler: Some(&mut lend),
                };
                if let Err(e) = tls.handle_read(n, input) {
                    s.handle_tls_error(&e, now);
                }
            }
            Err(e) => return Err(err("read")(&e)),
        }
        Ok(lend.done)
    }
}

pub(super) fn blocking(target: &Target, mut rec: Recorder) -> Result<(Recorder, Extra), String> {
    let mut s =
        Stream::new(config(target), os_seed(), Instant::now()).map_err(|e| err("config")(&e))?;
    if target.lines {
        s.subscribe_markets(markets(), Instant::now())
            .map_err(|e| err("subscribe")(&e))?;
    }
    let stats = s.stats_handle();
    let mut conn: Option<Conn> = None;
    loop {
        while let Some(cmd) = s.poll_transport() {
            match cmd {
                TransportCommand::Connect(ep) => {
                    let mut c = Conn::open(target, &ep.host, ep.port)?;
                    s.handle_connected(Instant::now());
                    if let Some(tls) = c.tls.as_mut() {
                        let input = &mut StreamInput {
                            stream: &mut s,
                            now: Instant::now(),
                        };
                        tls.flush_plaintext(input).map_err(|e| err("tls")(&e))?;
                    }
                    conn = Some(c);
                }
                TransportCommand::Disconnect => conn = None,
            }
        }
        let Some(c) = conn.as_mut() else {
            return Err(format!("disconnected: {:?}", s.state()));
        };
        while let Some(chunk) = s.poll_transmit() {
            c.write(&chunk)?;
        }
        let mut done = false;
        while !done {
            let Some(event) = s.poll_event() else { break };
            done = record(&mut rec, &event)?;
        }
        if !done {
            done = c.read(&mut s, &mut rec)?;
        }
        if done {
            let extra = extra_of(&stats.snapshot(Instant::now()));
            s.stop(Instant::now());
            return Ok((rec, extra));
        }
    }
}

/// What a feedwire client reports besides the recorder: from its stream's statistics.
fn extra_of(stats: &StatsSnapshot) -> Extra {
    Extra {
        read_buffer_bytes: Some(stats.read_buffer_bytes),
        reads: Some(Reads {
            all: stats.reads,
            full: stats.full_reads,
        }),
    }
}

/// `busy_poll` of a client that spins (`SPINS`) between the paced server's batches (1 ms
/// apart) instead of sleeping: [`SPIN`].
const fn busy_poll(spins: bool) -> Duration {
    if spins {
        SPIN
    } else {
        Duration::ZERO
    }
}

/// The mio loop turned on the measuring thread; with `SPINS`, [`MioOptions::busy_poll`] at
/// [`SPIN`].
pub(super) fn mio<const SPINS: bool>(
    target: &Target,
    rec: Recorder,
) -> Result<(Recorder, Extra), String> {
    let options = MioOptions {
        tls: target.tls.clone(),
        busy_poll: busy_poll(SPINS),
        ..MioOptions::default()
    };
    // Typed for its handler: `on_data` is called without a vtable.
    let mut feed = MioLoop::lending_to(options).map_err(|e| err("mio")(&e))?;
    let (tx, mut rx) = unbounded_channel();
    let record = Record::new(rec, tx);
    let ended = Arc::clone(&record.ended);
    let (id, stats) = feed
        .connect(config(target), Delivery::Lend(record))
        .map_err(|e| err("connect")(&e))?;
    if target.lines {
        feed.subscribe_markets(id, markets())
            .map_err(|e| err("subscribe")(&e))?;
    }
    let deadline = Instant::now() + STALL;
    // The stall check reads the clock every 16th turn: a turn is a wake-up (on a paced feed,
    // one a message), and a clock read a turn is the harness's, not the loop's, cost — the
    // other clients' harnesses read none per read. At most 1.6 s late (100 ms a turn).
    for turn in 1u64.. {
        feed.turn(Some(Duration::from_millis(100)), |_| {})
            .map_err(|e| err("poll")(&e))?;
        if !ended.load(Ordering::Acquire) {
            if turn % 16 == 0 && Instant::now() > deadline {
                break;
            }
            continue;
        }
        // Sent before the flag was set.
        let rec = rx.try_recv().map_err(|e| err("the run's outcome")(&e))?;
        let extra = extra_of(&stats.snapshot(Instant::now()));
        feed.stop(id);
        return Ok((rec?, extra));
    }
    Err("stalled".to_owned())
}

/// The tokio adapter's stream future in a current-thread runtime's `block_on`; with `SPINS`,
/// [`feedwire_tokio::TokioOptions::busy_poll`] at [`SPIN`].
pub(super) fn tokio<const SPINS: bool>(
    target: &Target,
    rec: Recorder,
) -> Result<(Recorder, Extra), String> {
    let rt = runtime()?;
    let lines = target.lines;
    rt.block_on(async {
        let (tx, mut rx) = unbounded_channel();
        let record = Record::new(rec, tx);
        let options = feedwire_tokio::TokioOptions {
            tls: target.tls.clone(),
            busy_poll: busy_poll(SPINS),
            ..Default::default()
        };
        let (handle, drive) = feedwire_tokio::drive_lending(config(target), options, record)
            .map_err(|e| err("config")(&e))?;
        let watch = async move {
            if lines {
                handle
                    .subscribe_markets(markets())
                    .await
                    .map_err(|e| err("subscribe")(&e))?;
            }
            let rec = tokio::time::timeout(STALL, rx.recv())
                .await
                .map_err(|_| "stalled".to_owned())?
                .ok_or("the stream's task ended")??;
            let extra = extra_of(&handle.stats());
            handle.stop();
            Ok((rec, extra))
        };
        // The stream's future on the runtime's own thread (as nexus-async-net reads), the
        // measurement's bookkeeping on a task beside it.
        let watch = tokio::spawn(watch);
        drive.await;
        watch.await.map_err(|e| err("watch")(&e))?
    })
}
