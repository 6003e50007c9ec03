//! The clients measured side by side. Each connects to the target, feeds every complete data
//! message to the [`Recorder`] until it says the run is complete, and hands it back. All
//! consume the payload bytes as their library delivers them by default (UTF-8 validated
//! where the library validates text).

use std::sync::Arc;
use std::time::Duration;

use feedwire_core::rustls::ClientConfig;

use crate::recorder::Recorder;

mod feedwire;
mod limit;
mod tls;

pub use limit::{Frames as LimitFrames, READ as LIMIT_READ_SIZE};
mod peers_blocking;
mod peers_tokio;

/// Where a run connects.
#[derive(Debug, Clone)]
pub struct Target {
    /// `ws://127.0.0.1:P/stream?streams=…` or `tcp://127.0.0.1:P`.
    pub url: String,
    /// `127.0.0.1:P`.
    pub addr: String,
    /// Request path for WebSocket (`/stream?streams=…`).
    pub path: String,
    /// CRLF lines (Betfair style) instead of WebSocket.
    pub lines: bool,
    /// TLS (`wss://`, `tls://`), trusting the replay server's CA; every client uses this one
    /// rustls configuration.
    pub tls: Option<Arc<ClientConfig>>,
}

impl Target {
    /// Splits a replay server URL; a TLS URL needs [`with_tls`](Self::with_tls).
    pub fn from_url(url: &str) -> Self {
        let lines = url.starts_with("tcp://") || url.starts_with("tls://");
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        let (addr, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        Self {
            url: url.to_owned(),
            addr: addr.to_owned(),
            path: path.to_owned(),
            lines,
            tls: None,
        }
    }

    /// The same target over TLS with `config`.
    pub fn with_tls(self, config: Arc<ClientConfig>) -> Self {
        Self {
            tls: Some(config),
            ..self
        }
    }

    /// The host part of `addr`: the name TLS verifies.
    pub fn host(&self) -> &str {
        self.addr.rsplit_once(':').map_or(&self.addr, |(h, _)| h)
    }
}

/// What a client reports besides the recorder.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extra {
    /// The read buffer the client still holds after the run, bytes (feedwire clients).
    pub read_buffer_bytes: Option<u64>,
    /// The run's reads, and those of them that came back with all of 256 KiB — the socket
    /// held that much more: the client was behind the server (feedwire clients, from their
    /// statistics, and the limit).
    pub reads: Option<Reads>,
}

/// A run's reads (see [`Extra::reads`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reads {
    /// Reads that returned bytes.
    pub all: u64,
    /// Reads that returned all of 256 KiB.
    pub full: u64,
}

/// A run: connect, receive until the recorder is complete, return it.
pub type RunFn = fn(&Target, Recorder) -> Result<(Recorder, Extra), String>;

/// One measured client.
#[derive(Debug, Clone, Copy)]
pub struct Client {
    /// Name in tables and JSON.
    pub name: &'static str,
    /// Speaks WebSocket.
    pub websocket: bool,
    /// Speaks CRLF lines.
    pub lines: bool,
    /// A peer library (not feedwire, not the limit): the "best peer" ratio is over these.
    pub peer: bool,
    /// Measured in the throughput and memory tables too, not only for latency: false for a
    /// configuration that only changes how a client waits (a firehose never waits).
    pub throughput: bool,
    /// The run.
    pub run: RunFn,
}

/// Every client, the limit first.
pub const ALL: &[Client] = &[
    Client {
        name: "limit",
        websocket: true,
        lines: true,
        peer: false,
        throughput: true,
        run: limit::run,
    },
    Client {
        name: "limit-utf8",
        websocket: true,
        lines: false,
        peer: false,
        throughput: true,
        run: limit::run_utf8,
    },
    Client {
        name: "limit-spin",
        websocket: true,
        lines: false,
        peer: false,
        throughput: false,
        run: limit::run_spin,
    },
    Client {
        name: "feedwire-blocking",
        websocket: true,
        lines: true,
        peer: false,
        throughput: true,
        run: feedwire::blocking,
    },
    Client {
        name: "feedwire-mio",
        websocket: true,
        lines: true,
        peer: false,
        throughput: true,
        run: feedwire::mio::<false>,
    },
    Client {
        name: "feedwire-mio-spin",
        websocket: true,
        lines: false,
        peer: false,
        throughput: false,
        run: feedwire::mio::<true>,
    },
    Client {
        name: "feedwire-tokio",
        websocket: true,
        lines: true,
        peer: false,
        throughput: true,
        run: feedwire::tokio::<false>,
    },
    Client {
        name: "feedwire-tokio-spin",
        websocket: true,
        lines: false,
        peer: false,
        throughput: false,
        run: feedwire::tokio::<true>,
    },
    Client {
        name: "tokio-tungstenite",
        websocket: true,
        lines: false,
        peer: true,
        throughput: true,
        run: peers_tokio::tungstenite,
    },
    Client {
        name: "fastwebsockets",
        websocket: true,
        lines: false,
        peer: true,
        throughput: true,
        run: peers_tokio::fastwebsockets,
    },
    Client {
        name: "tokio-websockets",
        websocket: true,
        lines: false,
        peer: true,
        throughput: true,
        run: peers_tokio::tokio_websockets,
    },
    Client {
        name: "nexus-web",
        websocket: true,
        lines: false,
        peer: true,
        throughput: true,
        run: peers_blocking::nexus_web,
    },
    Client {
        name: "nexus-async-net",
        websocket: true,
        lines: false,
        peer: true,
        throughput: true,
        run: peers_tokio::nexus_async_net,
    },
    Client {
        name: "sockudo-ws",
        websocket: true,
        lines: false,
        peer: true,
        throughput: true,
        run: peers_tokio::sockudo_ws,
    },
];

/// The `-spin` clients' `busy_poll`: twice the paced server's 1 ms between batches, so they
/// never sleep in a latency run.
pub(crate) const SPIN: Duration = Duration::from_millis(2);

/// No run may hang the benchmark: blocking reads and async runs give up after this.
pub(crate) const STALL: Duration = Duration::from_secs(60);

/// A current-thread tokio runtime: the fastest idiomatic setup for one connection, and all
/// of the client's work stays on the measuring thread.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

pub(crate) fn err(context: &str) -> impl Fn(&dyn std::fmt::Display) -> String + '_ {
    move |e| format!("{context}: {e}")
}
