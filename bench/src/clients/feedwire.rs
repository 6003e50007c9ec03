//! feedwire three ways: the core's `Stream` on a blocking socket, the mio loop turned on the
//! measuring thread, and the tokio adapter on a current-thread runtime. All use the full
//! stream machine (classification, statistics, timers), as an application would, in the
//! fastest way each offers: data messages lent in place (`handle_read_with`,
//! `Delivery::Lend`, `connect_lending`), other events queued.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use feedwire_core::{
    os_seed, BetfairAuth, BetfairSubscription, DataHandler, DataRef, Stream, StreamConfig,
    StreamEvent, TransportCommand,
};
use feedwire_mio::{Delivery, MioLoop, MioOptions};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

use super::{err, runtime, Extra, Target, STALL};
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
}

impl DataHandler for Record {
    fn on_data(&mut self, data: DataRef<'_>) {
        if let Some(rec) = self.rec.as_mut() {
            if rec.on_message(data.payload.len(), data.payload) {
                let _ = self.done.send(Ok(self.rec.take().expect("present")));
            }
        }
    }

    fn on_event(&mut self, event: StreamEvent) {
        if self.rec.is_some()
            && matches!(event, StreamEvent::Closed { .. } | StreamEvent::Crashed(_))
        {
            self.rec = None;
            let _ = self.done.send(Err(format!("ended early: {event:?}")));
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

pub(super) fn blocking(target: &Target, mut rec: Recorder) -> Result<(Recorder, Extra), String> {
    let mut s =
        Stream::new(config(target), os_seed(), Instant::now()).map_err(|e| err("config")(&e))?;
    if target.lines {
        s.subscribe_markets(markets(), Instant::now())
            .map_err(|e| err("subscribe")(&e))?;
    }
    let stats = s.stats_handle();
    let mut sock: Option<TcpStream> = None;
    loop {
        while let Some(cmd) = s.poll_transport() {
            match cmd {
                TransportCommand::Connect(ep) => {
                    let t = TcpStream::connect((ep.host.as_str(), ep.port))
                        .map_err(|e| err("connect")(&e))?;
                    t.set_nodelay(true).map_err(|e| err("nodelay")(&e))?;
                    t.set_read_timeout(Some(STALL))
                        .map_err(|e| err("timeout")(&e))?;
                    sock = Some(t);
                    s.handle_connected(Instant::now());
                }
                TransportCommand::Disconnect => sock = None,
            }
        }
        let Some(sk) = sock.as_mut() else {
            return Err(format!("disconnected: {:?}", s.state()));
        };
        while let Some(chunk) = s.poll_transmit() {
            sk.write_all(&chunk).map_err(|e| err("write")(&e))?;
        }
        let mut done = false;
        while !done {
            let Some(event) = s.poll_event() else { break };
            done = record(&mut rec, &event)?;
        }
        if !done {
            match sk.read(s.read_buf()) {
                Ok(0) => s.handle_eof(Instant::now()),
                Ok(n) => s.handle_read_with(n, Instant::now(), |d| {
                    done = done || rec.on_message(d.payload.len(), d.payload);
                }),
                Err(e) => return Err(err("read")(&e)),
            }
        }
        if done {
            let extra = Extra {
                read_buffer_bytes: Some(stats.snapshot().read_buffer_bytes),
            };
            s.stop(Instant::now());
            return Ok((rec, extra));
        }
    }
}

pub(super) fn mio(target: &Target, rec: Recorder) -> Result<(Recorder, Extra), String> {
    let mut feed = MioLoop::new(MioOptions::default()).map_err(|e| err("mio")(&e))?;
    let (tx, mut rx) = unbounded_channel();
    let (id, stats) = feed
        .connect(
            config(target),
            Delivery::Lend(Box::new(Record {
                rec: Some(rec),
                done: tx,
            })),
        )
        .map_err(|e| err("connect")(&e))?;
    if target.lines {
        feed.subscribe_markets(id, markets())
            .map_err(|e| err("subscribe")(&e))?;
    }
    let deadline = Instant::now() + STALL;
    loop {
        feed.turn(Some(Duration::from_millis(100)), |_| {})
            .map_err(|e| err("poll")(&e))?;
        if let Ok(rec) = rx.try_recv() {
            let extra = Extra {
                read_buffer_bytes: Some(stats.snapshot().read_buffer_bytes),
            };
            feed.stop(id);
            return Ok((rec?, extra));
        }
        if Instant::now() > deadline {
            return Err("stalled".to_owned());
        }
    }
}

pub(super) fn tokio(target: &Target, rec: Recorder) -> Result<(Recorder, Extra), String> {
    let rt = runtime()?;
    rt.block_on(async {
        let (tx, mut rx) = unbounded_channel();
        let record = Record {
            rec: Some(rec),
            done: tx,
        };
        let handle = feedwire_tokio::connect_lending(config(target), Default::default(), record)
            .map_err(|e| err("config")(&e))?;
        if target.lines {
            handle
                .subscribe_markets(markets())
                .await
                .map_err(|e| err("subscribe")(&e))?;
        }
        let rec = tokio::time::timeout(STALL, rx.recv())
            .await
            .map_err(|_| "stalled".to_owned())?
            .ok_or("the stream's task ended")??;
        let extra = Extra {
            read_buffer_bytes: Some(handle.stats().read_buffer_bytes),
        };
        handle.stop();
        Ok((rec, extra))
    })
}
