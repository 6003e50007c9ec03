//! `feedwire demo`: the embedded replay server, a stream to it, a live status line, a summary.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use feedwire_bench::si;
use feedwire_core::{
    tls_config_with_roots, BetfairAuth, BetfairSubscription, StreamConfig, StreamEvent,
};
use feedwire_replay::{sent_at_us, Mode, ReplayConfig, ReplayServer};
use feedwire_tokio::{connect, TokioOptions};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::replay_cmd::Served;
use crate::Failure;

/// Starts the embedded replay server (no network needed), connects a stream to it,
/// subscribes, and shows msgs/s, MB/s, totals and one-way latency from the server's send
/// stamps to the reads that completed the messages (their `received`); a summary at the end. Ctrl-C stops at once and still prints the summary.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  feedwire demo
  feedwire demo --duration 10 --tls
  feedwire demo --lines --tls          Betfair-style lines over TLS
  feedwire demo --scenario large_depth20 --rate 20000")]
pub(crate) struct DemoArgs {
    #[command(flatten)]
    served: Served,
    /// Seconds to run (default: until Ctrl-C).
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// Messages per second the server sends, each stamped with its send time.
    #[arg(long, default_value_t = 50_000)]
    rate: u32,
}

/// Counters for the status line and the summary.
struct Tally {
    messages: u64,
    bytes: u64,
    latency: Histogram<u64>,
}

impl Tally {
    fn new() -> Self {
        Self {
            messages: 0,
            bytes: 0,
            latency: Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds"),
        }
    }

    fn record(&mut self, payload: &[u8], now_us: u64) {
        self.messages += 1;
        self.bytes += payload.len() as u64;
        if let Some(sent) = sent_at_us(payload) {
            let _ = self.latency.record(now_us.saturating_sub(sent).max(1));
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Wall-clock microseconds for the adapter's read stamps: the offset between the two
/// clocks taken once, so a message costs no clock read (its `received` is its read's time).
struct WallClock {
    origin: Instant,
    origin_us: u64,
}

impl WallClock {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            origin_us: now_us(),
        }
    }

    fn us(&self, at: Instant) -> u64 {
        self.origin_us + at.saturating_duration_since(self.origin).as_micros() as u64
    }
}

pub(crate) async fn run(args: DemoArgs) -> Result<(), Failure> {
    let mut interrupts = crate::signals::Interrupts::install()
        .map_err(|e| Failure::failed(format!("cannot handle signals: {e}")))?;
    let scenario = args.served.scenario()?;
    let rate_per_sec = args.rate.max(1);
    let seconds = args.duration.map(|d| d.max(0.1));
    // Enough messages for the whole run (a day when it runs until Ctrl-C).
    let count = (f64::from(rate_per_sec) * seconds.unwrap_or(86_400.0) * 1.2) as usize + 1000;
    let server = ReplayServer::start(ReplayConfig {
        count: Some(count),
        mode: Mode::Paced {
            per_sec: rate_per_sec,
        },
        tls: args.served.tls,
        hold_open: true,
        ..ReplayConfig::new(scenario)
    })
    .map_err(|e| Failure::failed(format!("cannot start the replay server: {e}")))?;
    let config = if scenario.is_lines() {
        StreamConfig::betfair(
            &server.url(),
            BetfairAuth {
                app_key: "demo".to_owned(),
                session: "demo".to_owned(),
            },
        )
    } else {
        StreamConfig::binance_stream(&server.subscribe_url())
    };
    let options = TokioOptions {
        tls: server.pki().map(|p| tls_config_with_roots(p.root_store())),
        ..TokioOptions::default()
    };
    let url = config.url.clone();
    let max_read_kib = config.ws.max_read_size / 1024;
    let (handle, mut events) =
        connect(config, options).map_err(|e| Failure::usage(e.to_string()))?;
    let subscribed = if scenario.is_lines() {
        handle
            .subscribe_markets(BetfairSubscription {
                filter_json: "{\"marketIds\":[\"1.234567\"]}".to_owned(),
                data_filter_json: None,
                heartbeat_ms: None,
                conflate_ms: None,
            })
            .await
    } else {
        handle.subscribe(&["btcusdt@aggTrade"]).await
    };
    subscribed.map_err(|e| Failure::failed(format!("subscribe: {e}")))?;

    let terminal = std::io::stdout().is_terminal();
    let bar = terminal.then(|| {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout());
        bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("a valid template"));
        bar
    });
    println!(
        "feedwire demo: {} at {} msgs/s from the embedded replay server, {url}",
        scenario.name(),
        rate_per_sec
    );
    let started = Instant::now();
    let wall = WallClock::new();
    let deadline = seconds.map(|s| tokio::time::Instant::now() + Duration::from_secs_f64(s));
    let mut total = Tally::new();
    let mut window = Tally::new();
    let mut window_start = Instant::now();
    let mut tick = tokio::time::interval(if terminal {
        Duration::from_millis(250)
    } else {
        Duration::from_secs(1)
    });
    tick.tick().await;
    let mut stopping = false;
    let mut ending = None;
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(StreamEvent::Data { payload, received, .. }) => {
                    let now = wall.us(received);
                    total.record(&payload, now);
                    window.record(&payload, now);
                }
                Some(StreamEvent::Reconnecting { attempt, reason, .. }) => {
                    status_note(bar.as_ref(), &format!("reconnecting (attempt {attempt}): {reason}"));
                }
                Some(e @ (StreamEvent::Closed { .. } | StreamEvent::Crashed(_))) => {
                    ending = Some(e);
                    break;
                }
                Some(_) => {}
                None => break,
            },
            _ = tick.tick() => {
                let secs = window_start.elapsed().as_secs_f64().max(1e-6);
                let line = format!(
                    "{} msgs/s  {:.1} MB/s  total {}  latency p50 {} µs p99 {} µs  reconnects {}",
                    si(window.messages as f64 / secs),
                    window.bytes as f64 / 1e6 / secs,
                    total.messages,
                    window.latency.value_at_quantile(0.5),
                    window.latency.value_at_quantile(0.99),
                    handle.stats().reconnects,
                );
                match &bar {
                    Some(bar) => bar.set_message(line),
                    None => println!("{line}"),
                }
                window = Tally::new();
                window_start = Instant::now();
            }
            _ = async { tokio::time::sleep_until(deadline.expect("guarded")).await }, if deadline.is_some() && !stopping => {
                stopping = true;
                handle.stop();
            }
            _ = interrupts.recv(), if !stopping => {
                stopping = true;
                handle.stop();
            }
            _ = tokio::time::sleep(Duration::from_secs(3)), if stopping => break,
        }
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let secs = started.elapsed().as_secs_f64();
    let stats = handle.stats();
    let h = &total.latency;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\nsummary");
    let _ = writeln!(
        out,
        "  scenario        {} ({})",
        scenario.name(),
        if args.served.tls { "TLS" } else { "plain" }
    );
    let _ = writeln!(out, "  duration        {secs:.2} s");
    let _ = writeln!(out, "  messages        {}", total.messages);
    let _ = writeln!(
        out,
        "  throughput      {} msgs/s, {:.2} MB/s",
        si(total.messages as f64 / secs),
        total.bytes as f64 / 1e6 / secs
    );
    let _ = writeln!(
        out,
        "  latency (µs)    p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max()
    );
    let _ = writeln!(
        out,
        "  reads           {} ({} of them full, finding {} KiB or more waiting)",
        stats.reads, stats.full_reads, max_read_kib
    );
    let _ = writeln!(out, "  reconnects      {}", stats.reconnects);
    let _ = writeln!(
        out,
        "  ended           {}",
        match &ending {
            Some(StreamEvent::Closed { by, code }) => format!("closed by {by:?} ({code})"),
            Some(StreamEvent::Crashed(reason)) => format!("crashed: {reason}"),
            _ => "without a close".to_owned(),
        }
    );
    let _ = out.flush();
    match ending {
        Some(StreamEvent::Crashed(reason)) => {
            Err(Failure::failed(format!("the stream crashed: {reason}")))
        }
        _ => Ok(()),
    }
}

fn status_note(bar: Option<&ProgressBar>, note: &str) {
    match bar {
        Some(bar) => bar.println(note),
        None => eprintln!("{note}"),
    }
}
