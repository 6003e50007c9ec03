//! `feedwire stream URL`: a client for real endpoints. Data to stdout as each message
//! completes; responses and lifecycle to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, ValueEnum};
use feedwire_core::rustls::pki_types::pem::PemObject;
use feedwire_core::rustls::pki_types::CertificateDer;
use feedwire_core::rustls::RootCertStore;
use feedwire_core::{
    mozilla_roots, tls_config_with_roots, BetfairAuth, BetfairSubscription, StreamConfig,
    StreamEvent,
};
use feedwire_tokio::{connect, TokioOptions};

use crate::Failure;

/// Connects to a real endpoint and prints every data message as soon as it is complete.
/// `ws://`/`wss://` are WebSocket streams (Binance style), `tcp://`/`tls://` CRLF line
/// streams (Betfair style). Ctrl-C or SIGTERM stops gracefully (Close frame at once), exit 0.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  feedwire stream wss://stream.binance.com:9443/ws --subscribe btcusdt@aggTrade,ethusdt@trade
  feedwire stream wss://stream.binance.com:9443/stream?streams=btcusdt@depth20 --count 10 --jsonl
  feedwire stream tls://stream-api.betfair.com:443 --subscribe 1.234567 \\
      --app-key KEY --session TOKEN
  feedwire stream wss://127.0.0.1:9001/ws --ca feedwire-replay-ca.pem --subscribe btcusdt@aggTrade")]
pub(crate) struct StreamArgs {
    /// ws://, wss://, tcp:// or tls:// URL.
    url: String,
    /// Streams to subscribe (Binance), or market ids (Betfair); comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "A,B,C")]
    subscribe: Vec<String>,
    /// Extra upgrade request header (repeatable), e.g. `X-MBX-APIKEY:abc`.
    #[arg(long = "header", value_name = "K:V")]
    headers: Vec<String>,
    /// Also trust the CA certificate(s) in this PEM file (verification is never switched off).
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// Most bytes per socket read (default 256 KiB).
    #[arg(long, value_name = "BYTES")]
    max_read_size: Option<usize>,
    /// Connect to this address instead of resolving the URL's host, which still names the
    /// server for TLS (repeatable; tried in order, each but the last for 2 s).
    #[arg(long = "connect-to", value_name = "IP:PORT")]
    connect_to: Vec<std::net::SocketAddr>,
    /// Print each payload as received, one per line (the default).
    #[arg(long, conflicts_with = "jsonl")]
    raw: bool,
    /// Print one JSON object per message: {"recv_us":…,"payload":…}.
    #[arg(long)]
    jsonl: bool,
    /// Stop gracefully after this many data messages.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Classification preset (default: binance for ws/wss, betfair for tcp/tls).
    #[arg(long, value_enum)]
    preset: Option<Preset>,
    /// Betfair application key.
    #[arg(long, env = "BETFAIR_APP_KEY", hide_env_values = true)]
    app_key: Option<String>,
    /// Betfair session token.
    #[arg(long, env = "BETFAIR_SESSION", hide_env_values = true)]
    session: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Preset {
    /// Binance stream endpoint (SUBSCRIBE / result / error).
    Binance,
    /// Binance WebSocket API (id / status).
    BinanceWsApi,
    /// Betfair Exchange Stream API (op / status).
    Betfair,
}

fn config(args: &StreamArgs) -> Result<StreamConfig, Failure> {
    let scheme = args.url.split("://").next().unwrap_or_default();
    let lines = matches!(scheme, "tcp" | "tls");
    if !lines && !matches!(scheme, "ws" | "wss") {
        return Err(Failure::usage(format!(
            "{}: the URL must start with ws://, wss://, tcp:// or tls://",
            args.url
        )));
    }
    let preset = args.preset.unwrap_or(if lines {
        Preset::Betfair
    } else {
        Preset::Binance
    });
    let mut config = match preset {
        Preset::Binance => StreamConfig::binance_stream(&args.url),
        Preset::BinanceWsApi => StreamConfig::binance_ws_api(&args.url),
        Preset::Betfair => {
            let (Some(app_key), Some(session)) = (args.app_key.clone(), args.session.clone())
            else {
                return Err(Failure::usage(
                    "Betfair streams authenticate: give --app-key and --session \
                     (or BETFAIR_APP_KEY and BETFAIR_SESSION)",
                ));
            };
            StreamConfig::betfair(&args.url, BetfairAuth { app_key, session })
        }
    };
    for h in &args.headers {
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| Failure::usage(format!("--header {h}: expected NAME:VALUE")))?;
        config
            .ws
            .extra_headers
            .push((k.trim().to_owned(), v.trim().to_owned()));
    }
    config.connect_to.clone_from(&args.connect_to);
    if let Some(n) = args.max_read_size {
        config.ws.max_read_size = n;
    }
    Ok(config)
}

fn roots(ca: Option<&PathBuf>) -> Result<Option<RootCertStore>, Failure> {
    let Some(path) = ca else { return Ok(None) };
    let pem =
        std::fs::read(path).map_err(|e| Failure::usage(format!("--ca {}: {e}", path.display())))?;
    let mut roots: RootCertStore = mozilla_roots();
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| Failure::usage(format!("--ca {}: {e}", path.display())))?;
        roots
            .add(cert)
            .map_err(|e| Failure::usage(format!("--ca {}: {e}", path.display())))?;
        added += 1;
    }
    if added == 0 {
        return Err(Failure::usage(format!(
            "--ca {}: no certificate in the file",
            path.display()
        )));
    }
    Ok(Some(roots))
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Writes one data message; false when stdout is gone (a closed pipe).
fn print_data(payload: &[u8], jsonl: bool) -> bool {
    let mut out = std::io::stdout().lock();
    let written = if jsonl {
        let is_json = serde_json::from_slice::<&serde_json::value::RawValue>(payload).is_ok();
        let body = if is_json {
            String::from_utf8_lossy(payload).into_owned()
        } else {
            serde_json::Value::String(String::from_utf8_lossy(payload).into_owned()).to_string()
        };
        writeln!(out, "{{\"recv_us\":{},\"payload\":{body}}}", now_us())
    } else {
        out.write_all(payload).and_then(|()| out.write_all(b"\n"))
    };
    // Flushed per message, terminal or not: a pipe sees each message as it completes.
    written.and_then(|()| out.flush()).is_ok()
}

pub(crate) async fn run(args: StreamArgs) -> Result<(), Failure> {
    let mut interrupts = crate::signals::Interrupts::install()
        .map_err(|e| Failure::failed(format!("cannot handle signals: {e}")))?;
    let config = config(&args)?;
    let lines = matches!(config.url.split("://").next(), Some("tcp" | "tls"));
    let options = TokioOptions {
        tls: roots(args.ca.as_ref())?.map(tls_config_with_roots),
        ..TokioOptions::default()
    };
    let url = config.url.clone();
    let (handle, mut events) =
        connect(config, options).map_err(|e| Failure::usage(e.to_string()))?;
    if !args.subscribe.is_empty() {
        let result = if lines {
            let ids: Vec<String> = args.subscribe.iter().map(|m| format!("\"{m}\"")).collect();
            handle
                .subscribe_markets(BetfairSubscription {
                    filter_json: format!("{{\"marketIds\":[{}]}}", ids.join(",")),
                    data_filter_json: None,
                    heartbeat_ms: None,
                    conflate_ms: None,
                })
                .await
        } else {
            let refs: Vec<&str> = args.subscribe.iter().map(String::as_str).collect();
            handle.subscribe(&refs).await
        };
        result.map_err(|e| Failure::usage(format!("--subscribe: {e}")))?;
    }
    let mut opened = false;
    let mut received = 0u64;
    let mut stopping = false;
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            _ = interrupts.recv(), if !stopping => {
                eprintln!("stopping");
                stopping = true;
                handle.stop();
                continue;
            }
        };
        match event {
            Some(StreamEvent::Data { payload, .. }) => {
                if args.count.is_some_and(|n| received >= n) {
                    // Messages that were already on their way while the close completes.
                    continue;
                }
                received += 1;
                if !print_data(&payload, args.jsonl) {
                    stopping = true;
                    handle.stop();
                }
                if args.count == Some(received) && !stopping {
                    stopping = true;
                    handle.stop();
                }
            }
            Some(StreamEvent::Opened { reconnected }) => {
                opened = true;
                eprintln!(
                    "{} {url}",
                    if reconnected {
                        "reconnected to"
                    } else {
                        "connected to"
                    }
                );
            }
            Some(StreamEvent::Reconnecting {
                attempt,
                delay,
                reason,
                planned,
            }) => {
                if !opened && !planned {
                    handle.crash("the first connection failed");
                    return Err(Failure::failed(format!("{url}: {reason}")));
                }
                eprintln!(
                    "connection ended ({reason}); reconnecting in {delay:?} (attempt {attempt})"
                );
            }
            Some(StreamEvent::Response {
                payload, is_error, ..
            })
            | Some(StreamEvent::UnsolicitedResponse {
                payload, is_error, ..
            }) => {
                let tag = if is_error {
                    "error response"
                } else {
                    "response"
                };
                eprintln!("{tag}: {}", String::from_utf8_lossy(&payload));
            }
            Some(StreamEvent::Subscribed { streams, .. }) => {
                eprintln!("subscribed: {}", streams.join(", "));
            }
            Some(StreamEvent::Closed { by, code }) => {
                eprintln!("closed by {by:?} ({code}) after {received} messages");
                return Ok(());
            }
            Some(StreamEvent::Crashed(reason)) => {
                return Err(Failure::failed(format!("{url}: {reason}")));
            }
            Some(_) => {}
            None => return Ok(()),
        }
    }
}
