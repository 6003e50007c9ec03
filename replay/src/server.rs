//! The replay server: a tokio runtime on its own thread, one task per connection.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::pki::TestPki;
use crate::scenario::Scenario;
use crate::scenario::{BETFAIR_IMAGE_CLK, BETFAIR_REQUEST_ID};
use crate::wire::{self, ClientFrame};

/// Bytes per write in firehose mode (whole frames or lines only).
const BATCH: usize = 256 * 1024;

/// How data is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Pre-encoded messages in large writes, as fast as the socket takes them.
    Firehose,
    /// A fixed rate, sent in batches once a millisecond; every message opens with
    /// `"ts_us":<send time, µs since the epoch>` (after its first string pair, if any), the
    /// time its batch was written.
    Paced {
        /// Messages per second.
        per_sec: u32,
    },
    /// One feed at a fixed rate from the server's start, shared by every connection as an
    /// exchange's is: a connection is sent the messages that fall due from when its stream
    /// starts, so two connections open at once get the same messages at about the same
    /// time. Sent as `Paced` is, every message opening with its `"ts_us"` and then
    /// `"seq":<its number in the feed, from 0>`; message `seq` is the payload
    /// [`payload(seq)`](ReplayServer::payload) on every connection (so a Betfair
    /// connection joining after message 0 gets no image). `count` caps the messages of one
    /// connection; a fault's `after` counts those of its connection.
    Live {
        /// Messages per second.
        per_sec: u32,
    },
}

/// A misbehaviour on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Answer the subscription, then send nothing.
    SilenceAfterSubscribe,
    /// After this many messages, write half a frame (or line) and close.
    CloseMidFrame {
        /// Messages sent first.
        after: usize,
    },
    /// After this many messages, reset the TCP connection.
    Reset {
        /// Messages sent first.
        after: usize,
    },
    /// Refuse the WebSocket upgrade with this HTTP status (429, 503).
    RefuseUpgrade(u16),
    /// Refuse the WebSocket upgrade with this HTTP status and a `Retry-After` of this many
    /// seconds, as Binance answers too many connection attempts (429, then 418 for a client
    /// that retries sooner).
    RefuseUpgradeFor {
        /// HTTP status.
        status: u16,
        /// `Retry-After`, seconds.
        retry_after_s: u32,
    },
    /// After this many messages, send a Binance `serverShutdown` notice, then go on.
    ServerShutdown {
        /// Messages sent first.
        after: usize,
    },
    /// After this many messages, send nothing more and answer nothing (no pong, no reply)
    /// with the connection left open: a peer gone half-open.
    GoSilent {
        /// Messages sent first.
        after: usize,
    },
}

/// What the server serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayConfig {
    /// Payload shapes; `betfair_mcm` is served as CRLF lines, the rest as WebSocket.
    pub scenario: Scenario,
    /// Messages per connection (default: the scenario's count).
    pub count: Option<usize>,
    /// Firehose or paced.
    pub mode: Mode,
    /// A fault, if any.
    pub fault: Option<Fault>,
    /// Serve TLS with a CA generated at start-up.
    pub tls: bool,
    /// Payload seed.
    pub seed: u64,
    /// Port on 127.0.0.1 (0: any free port).
    pub port: u16,
    /// After the last message keep the connection open (the client ends it) instead of
    /// closing it (WebSocket Close 1000; lines: end of stream).
    pub hold_open: bool,
}

impl ReplayConfig {
    /// A firehose of `scenario`, plain TCP, any port.
    pub fn new(scenario: Scenario) -> Self {
        Self {
            scenario,
            count: None,
            mode: Mode::Firehose,
            fault: None,
            tls: false,
            seed: 1,
            port: 0,
            hold_open: false,
        }
    }
}

/// Pre-encoded messages shared by every connection.
#[derive(Debug)]
struct Shared {
    config: ReplayConfig,
    /// The messages every connection sends, unless it re-encodes its own (a Betfair
    /// subscription with another id than the payloads carry).
    cycle: Arc<Cycle>,
    total: usize,
    connections: AtomicU64,
    /// The only Betfair session token a login is accepted with; `None`: any.
    betfair_session: Mutex<Option<String>>,
    /// Betfair logins still to refuse for now, as at the account's connection limit.
    betfair_logins_to_refuse: AtomicU64,
    /// Every Betfair subscription request received, in order.
    betfair_subscriptions: Mutex<Vec<String>>,
    /// When the server started: message 0 of a [`Mode::Live`] feed.
    feed_start: std::time::Instant,
}

/// The distinct payloads a connection cycles through, each encoded (frame or line).
#[derive(Debug)]
struct Cycle {
    payloads: Vec<Bytes>,
    /// Every payload encoded, back to back.
    encoded: Bytes,
    /// `offsets[i]..offsets[i + 1]` is payload `i` encoded.
    offsets: Vec<usize>,
}

impl Cycle {
    /// Payload `i` encoded.
    fn encoded(&self, i: usize) -> &[u8] {
        &self.encoded[self.offsets[i]..self.offsets[i + 1]]
    }
}

/// `payload` as the answer to the Betfair subscription request `id`: Betfair echoes the id in
/// every change message, and each image has a position of its own (its `initialClk`, here
/// the made-up one with the id appended). Payloads that do not open with the made-up id are
/// kept.
fn with_betfair_id(payload: &Bytes, id: &str) -> Bytes {
    let made = format!("{{\"op\":\"mcm\",\"id\":{BETFAIR_REQUEST_ID},");
    let Some(rest) = payload.strip_prefix(made.as_bytes()) else {
        return payload.clone();
    };
    let mut out = format!("{{\"op\":\"mcm\",\"id\":{id},").into_bytes();
    let image = format!("\"initialClk\":\"{BETFAIR_IMAGE_CLK}");
    match rest.strip_prefix(image.as_bytes()) {
        Some(after) => {
            out.extend_from_slice(image.as_bytes());
            out.extend_from_slice(id.as_bytes());
            out.extend_from_slice(after);
        }
        None => out.extend_from_slice(rest),
    }
    Bytes::from(out)
}

/// `payload` as the first message of a subscription that resumed from a position: an image
/// (`"ct":"SUB_IMAGE"`, its markets `"img":true`) becomes a `RESUB_DELTA`, what changed
/// since (the same changes, no longer replacing the markets' state), keeping its
/// `initialClk`: the position the next resumption starts from. Other payloads are kept.
fn as_resub_delta(payload: &Bytes) -> Bytes {
    const IMAGE: &str = "\"ct\":\"SUB_IMAGE\"";
    let Ok(text) = std::str::from_utf8(payload) else {
        return payload.clone();
    };
    if !text.contains(IMAGE) {
        return payload.clone();
    }
    let delta = text
        .replace(IMAGE, "\"ct\":\"RESUB_DELTA\"")
        .replace(",\"img\":true", "");
    Bytes::from(delta)
}

impl Shared {
    /// Which payload a connection's message `sent` (from 0) is
    /// ([`Scenario::payload_index`]).
    fn index(&self, sent: usize) -> usize {
        (self.config.scenario).payload_index(sent, self.cycle.payloads.len())
    }

    /// `payloads` encoded for this server's connections.
    fn cycle(&self, payloads: Vec<Bytes>) -> Cycle {
        let mut encoded = Vec::new();
        let mut offsets = vec![0];
        for p in &payloads {
            self.encode(p, &mut encoded);
            offsets.push(encoded.len());
        }
        Cycle {
            payloads,
            encoded: Bytes::from(encoded),
            offsets,
        }
    }

    /// Appends `payload` as a frame or a line; returns where in `out` the payload starts.
    fn encode(&self, payload: &[u8], out: &mut Vec<u8>) -> usize {
        if self.config.scenario.is_lines() {
            let at = out.len();
            out.extend_from_slice(payload);
            out.extend_from_slice(b"\r\n");
            at
        } else {
            wire::push_frame(out, 1, payload);
            out.len() - payload.len()
        }
    }
}

/// A running replay server; dropping it stops it.
#[derive(Debug)]
pub struct ReplayServer {
    addr: SocketAddr,
    pki: Option<TestPki>,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ReplayServer {
    /// Binds 127.0.0.1 and starts serving on a thread of its own.
    pub fn start(config: ReplayConfig) -> io::Result<Self> {
        let payloads = config.scenario.payloads(config.seed);
        let total = config.count.unwrap_or(config.scenario.default_count());
        let mut shared = Shared {
            config: config.clone(),
            cycle: Arc::new(Cycle {
                payloads: Vec::new(),
                encoded: Bytes::new(),
                offsets: vec![0],
            }),
            total,
            connections: AtomicU64::new(0),
            betfair_session: Mutex::new(None),
            betfair_logins_to_refuse: AtomicU64::new(0),
            betfair_subscriptions: Mutex::new(Vec::new()),
            feed_start: std::time::Instant::now(),
        };
        shared.cycle = Arc::new(shared.cycle(payloads));
        let shared = Arc::new(shared);
        let pki = if config.tls {
            Some(TestPki::generate().map_err(io::Error::other)?)
        } else {
            None
        };
        let listener = std::net::TcpListener::bind(("127.0.0.1", config.port))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop_tx, stop_rx) = oneshot::channel();
        let acceptor = pki
            .as_ref()
            .map(|p| tokio_rustls::TlsAcceptor::from(p.server.clone()));
        let task_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("feedwire-replay".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime");
                rt.block_on(async move {
                    let listener = TcpListener::from_std(listener).expect("listener into tokio");
                    tokio::select! {
                        _ = accept_loop(listener, acceptor, task_shared) => {}
                        _ = stop_rx => {}
                    }
                });
            })?;
        tracing::info!(%addr, scenario = config.scenario.name(), tls = config.tls, "replay server listening");
        Ok(Self {
            addr,
            pki,
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL a client connects to: `ws://`/`wss://…/stream?streams=…` (streaming starts
    /// after the handshake) or `tcp://`/`tls://` for lines.
    pub fn url(&self) -> String {
        let port = self.addr.port();
        match (
            self.shared.config.scenario.is_lines(),
            self.shared.config.tls,
        ) {
            (true, false) => format!("tcp://127.0.0.1:{port}"),
            (true, true) => format!("tls://127.0.0.1:{port}"),
            (false, tls) => {
                let scheme = if tls { "wss" } else { "ws" };
                format!("{scheme}://127.0.0.1:{port}/stream?streams=btcusdt@aggTrade")
            }
        }
    }

    /// The URL of the bare endpoint: streaming starts after a SUBSCRIBE.
    pub fn subscribe_url(&self) -> String {
        let url = self.url();
        url.split_once("/stream?")
            .map_or(url.clone(), |(base, _)| format!("{base}/ws"))
    }

    /// The CA to trust for TLS, if serving TLS.
    pub fn pki(&self) -> Option<&TestPki> {
        self.pki.as_ref()
    }

    /// Messages each connection receives.
    pub fn messages_per_connection(&self) -> usize {
        self.shared.total
    }

    /// The distinct payloads (message `i` is [`payload(i)`](Self::payload)).
    pub fn payloads(&self) -> &[Bytes] {
        &self.shared.cycle.payloads
    }

    /// The payload of a connection's message `i` (from 0): the payloads in turn, the first
    /// once only when the scenario [opens with it](Scenario::opens_once).
    pub fn payload(&self, i: usize) -> &Bytes {
        &self.shared.cycle.payloads[self.shared.index(i)]
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// From now on a Betfair login is accepted only with `session` (a session token renewed
    /// by a new login); any other is refused as Betfair refuses an expired one
    /// (`INVALID_SESSION_INFORMATION`, connection closed). Until called, any is accepted.
    pub fn require_betfair_session(&self, session: &str) {
        *self
            .shared
            .betfair_session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(session.to_owned());
    }

    /// Every Betfair subscription request received so far, as sent, in order.
    pub fn betfair_subscriptions(&self) -> Vec<String> {
        self.shared
            .betfair_subscriptions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The next `count` Betfair logins are refused as Betfair refuses one at the account's
    /// connection limit (`MAX_CONNECTION_LIMIT_EXCEEDED`, connection closed): what a client
    /// whose streams reconnect together after a network blip meets while the server has not
    /// yet seen their old connections go.
    pub fn refuse_betfair_logins_for_now(&self, count: u64) {
        self.shared
            .betfair_logins_to_refuse
            .store(count, Ordering::Relaxed);
    }
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
) {
    while let Ok((sock, _)) = listener.accept().await {
        shared.connections.fetch_add(1, Ordering::Relaxed);
        let _ = sock.set_nodelay(true);
        let shared = shared.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            if matches!(shared.config.fault, Some(Fault::Reset { .. })) {
                // Dropping the socket then sends RST instead of FIN.
                let _ = sock.set_zero_linger();
            }
            let result = match acceptor {
                Some(a) => match a.accept(sock).await {
                    Ok(tls) => serve(tls, shared).await,
                    Err(e) => Err(e),
                },
                None => serve(sock, shared).await,
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "replay connection ended");
            }
        });
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    sock: S,
    shared: Arc<Shared>,
) -> io::Result<()> {
    let (mut rd, mut wr) = tokio::io::split(sock);
    let lines = shared.config.scenario.is_lines();
    let mut inbuf = Vec::with_capacity(4096);
    let mut start_now = false;
    let mut subscriptions = Vec::new();
    if lines {
        let greeting = format!(
            "{{\"op\":\"connection\",\"connectionId\":\"replay-{}\"}}\r\n",
            shared.connections.load(Ordering::Relaxed)
        );
        wr.write_all(greeting.as_bytes()).await?;
    } else {
        let upgrade = loop {
            let mut tmp = [0u8; 4096];
            let n = rd.read(&mut tmp).await?;
            if n == 0 {
                return Ok(());
            }
            inbuf.extend_from_slice(&tmp[..n]);
            match wire::parse_upgrade(&inbuf) {
                Ok(Some(u)) => break u,
                Ok(None) if inbuf.len() < 16 * 1024 => {}
                _ => return Err(io::Error::other("bad upgrade request")),
            }
        };
        let refusal = match shared.config.fault {
            Some(Fault::RefuseUpgrade(status)) => Some(wire::refusal(status, None)),
            Some(Fault::RefuseUpgradeFor {
                status,
                retry_after_s,
            }) => Some(wire::refusal(status, Some(retry_after_s))),
            _ => None,
        };
        if let Some(refusal) = refusal {
            wr.write_all(&refusal).await?;
            return wr.shutdown().await;
        }
        wr.write_all(&wire::switching_protocols(&upgrade.key))
            .await?;
        inbuf.drain(..upgrade.head_len);
        start_now = upgrade.path.contains("streams=");
        subscriptions = wire::path_streams(&upgrade.path)
            .into_iter()
            .map(str::to_owned)
            .collect();
    }
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut tmp = vec![0u8; 16 * 1024];
        loop {
            let parsed: Vec<ClientFrame> = if lines {
                wire::take_lines(&mut inbuf)
                    .into_iter()
                    .map(|l| ClientFrame {
                        opcode: 1,
                        payload: l,
                    })
                    .collect()
            } else {
                match wire::take_client_frames(&mut inbuf) {
                    Ok(f) => f,
                    Err(_) => return,
                }
            };
            for f in parsed {
                if ctl_tx.send(f).is_err() {
                    return;
                }
            }
            match rd.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => inbuf.extend_from_slice(&tmp[..n]),
            }
        }
    });
    let result = Writer {
        cycle: Arc::clone(&shared.cycle),
        shared,
        started: start_now,
        silent: false,
        mute: false,
        subscriptions,
        sent: 0,
        feed_first: None,
        close_sent: false,
        shutdown_noticed: false,
        close_after_reply: false,
    }
    .run(&mut wr, ctl_rx)
    .await;
    reader.abort();
    result
}

struct Writer {
    shared: Arc<Shared>,
    /// The messages this connection sends: the shared ones, or its own re-encoding.
    cycle: Arc<Cycle>,
    started: bool,
    silent: bool,
    /// Gone half-open (`Fault::GoSilent`): client frames get no answer.
    mute: bool,
    /// The connection's streams, in the order subscribed (the path's first), as Binance
    /// lists them in a `LIST_SUBSCRIPTIONS` answer.
    subscriptions: Vec<String>,
    sent: usize,
    /// [`Mode::Live`]: the feed's number of this connection's first message, fixed when
    /// its stream starts.
    feed_first: Option<usize>,
    close_sent: bool,
    shutdown_noticed: bool,
    /// The reply just queued ends the connection (a refused Betfair login).
    close_after_reply: bool,
}

enum Next {
    Continue,
    Done,
}

impl Writer {
    fn lines(&self) -> bool {
        self.shared.config.scenario.is_lines()
    }

    async fn run<W: AsyncWrite + Unpin>(
        mut self,
        wr: &mut W,
        mut ctl: mpsc::UnboundedReceiver<ClientFrame>,
    ) -> io::Result<()> {
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let paced_start = tokio::time::Instant::now();
        loop {
            let streaming = self.started && !self.silent && self.sent < self.shared.total;
            if !streaming {
                if self.started
                    && self.sent >= self.shared.total
                    && !self.close_sent
                    && !self.shared.config.hold_open
                {
                    self.close_sent = true;
                    if self.lines() {
                        wr.flush().await?;
                        return wr.shutdown().await;
                    }
                    let mut out = Vec::new();
                    wire::push_frame(&mut out, 8, &1000u16.to_be_bytes());
                    wr.write_all(&out).await?;
                }
                // Nothing more to send until the client speaks: what TLS still buffers must
                // go out now, or the last messages wait for the client's next frame.
                wr.flush().await?;
                match ctl.recv().await {
                    Some(f) => {
                        if let Next::Done = self.control(wr, f).await? {
                            return Ok(());
                        }
                    }
                    None => return Ok(()),
                }
                continue;
            }
            while let Ok(f) = ctl.try_recv() {
                if let Next::Done = self.control(wr, f).await? {
                    return Ok(());
                }
            }
            match self.shared.config.mode {
                Mode::Firehose => {
                    if let Next::Done = self.firehose_batch(wr).await? {
                        return Ok(());
                    }
                }
                Mode::Paced { per_sec } => {
                    tick.tick().await;
                    let due = (paced_start.elapsed().as_secs_f64() * f64::from(per_sec)) as usize;
                    let upto = due.min(self.shared.total);
                    if let Next::Done = self.paced_batch(wr, upto).await? {
                        return Ok(());
                    }
                }
                Mode::Live { per_sec } => {
                    let due = |start: std::time::Instant| {
                        (start.elapsed().as_secs_f64() * f64::from(per_sec)) as usize
                    };
                    let first = *self
                        .feed_first
                        .get_or_insert_with(|| due(self.shared.feed_start));
                    tick.tick().await;
                    let upto = due(self.shared.feed_start)
                        .saturating_sub(first)
                        .min(self.shared.total);
                    if let Next::Done = self.paced_batch(wr, upto).await? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Messages until the next fault point, capped by `upto`.
    fn limit(&self, upto: usize) -> usize {
        match self.shared.config.fault {
            Some(
                Fault::CloseMidFrame { after } | Fault::Reset { after } | Fault::GoSilent { after },
            ) => upto.min(after),
            Some(Fault::ServerShutdown { after }) if !self.shutdown_noticed => upto.min(after),
            _ => upto,
        }
    }

    /// Acts on a fault due now; `Done` ends the connection.
    async fn fault_due<W: AsyncWrite + Unpin>(&mut self, wr: &mut W) -> io::Result<Next> {
        match self.shared.config.fault {
            Some(Fault::CloseMidFrame { after }) if self.sent == after => {
                let frame = self.cycle.encoded(self.shared.index(self.sent));
                wr.write_all(&frame[..frame.len() / 2]).await?;
                wr.flush().await?;
                wr.shutdown().await?;
                Ok(Next::Done)
            }
            Some(Fault::Reset { after }) if self.sent == after => {
                wr.flush().await?;
                Ok(Next::Done)
            }
            Some(Fault::ServerShutdown { after })
                if self.sent == after && !self.shutdown_noticed =>
            {
                self.shutdown_noticed = true;
                let notice = format!("{{\"e\":\"serverShutdown\",\"E\":{}}}", now_us() / 1000);
                let mut out = Vec::new();
                self.shared.encode(notice.as_bytes(), &mut out);
                wr.write_all(&out).await?;
                Ok(Next::Continue)
            }
            Some(Fault::GoSilent { after }) if self.sent == after && !self.mute => {
                wr.flush().await?;
                (self.silent, self.mute) = (true, true);
                Ok(Next::Continue)
            }
            _ => Ok(Next::Continue),
        }
    }

    async fn firehose_batch<W: AsyncWrite + Unpin>(&mut self, wr: &mut W) -> io::Result<Next> {
        if let Next::Done = self.fault_due(wr).await? {
            return Ok(Next::Done);
        }
        let limit = self.limit(self.shared.total);
        let n = self.cycle.payloads.len();
        let first = self.shared.index(self.sent);
        let mut last = first;
        let mut count = 0;
        // Consecutive payloads are contiguous in `encoded` until the cycle wraps.
        while self.sent + count < limit
            && last < n
            && self.cycle.offsets[last + 1] - self.cycle.offsets[first] <= BATCH.max(1)
        {
            last += 1;
            count += 1;
        }
        if count == 0 && self.sent < limit {
            // One payload larger than a batch.
            last = first + 1;
            count = 1;
        }
        if count > 0 {
            wr.write_all(&self.cycle.encoded[self.cycle.offsets[first]..self.cycle.offsets[last]])
                .await?;
            self.sent += count;
        }
        self.fault_due(wr).await
    }

    async fn paced_batch<W: AsyncWrite + Unpin>(
        &mut self,
        wr: &mut W,
        upto: usize,
    ) -> io::Result<Next> {
        if let Next::Done = self.fault_due(wr).await? {
            return Ok(Next::Done);
        }
        let limit = self.limit(upto);
        let mut out = Vec::new();
        // Each message is stamped with the encoding time now (a valid stamp of the final
        // width); the batch's send time overwrites all of them right before the write, so a
        // stamp is when the message was sent — not when it was encoded, which for the first
        // of a hundred messages is tens of µs (formatting the others) earlier and would
        // count as every client's latency.
        let provisional = now_us().to_string();
        let mut stamps = Vec::new();
        let mut stamped = Vec::new();
        while self.sent < limit {
            let seq = self.feed_first.map(|first| first + self.sent);
            let p = &self.cycle.payloads[self.shared.index(seq.unwrap_or(self.sent))];
            let at = stamp_offset(p);
            stamped.clear();
            stamped.extend_from_slice(&p[..at]);
            stamped.extend_from_slice(STAMP_KEY);
            stamped.extend_from_slice(provisional.as_bytes());
            stamped.push(b',');
            if let Some(seq) = seq {
                stamped.extend_from_slice(SEQ_KEY);
                stamped.extend_from_slice(seq.to_string().as_bytes());
                stamped.push(b',');
            }
            stamped.extend_from_slice(&p[at..]);
            let payload_at = self.shared.encode(&stamped, &mut out);
            stamps.push(payload_at + at + STAMP_KEY.len());
            self.sent += 1;
        }
        if !out.is_empty() {
            stamp(&mut out, &stamps, provisional.len());
            wr.write_all(&out).await?;
            // The next batch is a tick away: nothing may wait in a TLS buffer meanwhile.
            wr.flush().await?;
        }
        self.fault_due(wr).await
    }

    /// Answers one client frame or line.
    async fn control<W: AsyncWrite + Unpin>(
        &mut self,
        wr: &mut W,
        f: ClientFrame,
    ) -> io::Result<Next> {
        if self.mute {
            return Ok(Next::Continue);
        }
        let mut out = Vec::new();
        match f.opcode {
            9 => wire::push_frame(&mut out, 10, &f.payload),
            8 => {
                if !self.close_sent {
                    wire::push_frame(&mut out, 8, f.payload.get(..2).unwrap_or(&[]));
                }
                wr.write_all(&out).await?;
                wr.flush().await?;
                let _ = wr.shutdown().await;
                return Ok(Next::Done);
            }
            1 => {
                let text = String::from_utf8_lossy(&f.payload);
                let reply = if self.lines() {
                    self.betfair_reply(&text)
                } else {
                    self.binance_reply(&text)
                };
                if let Some(reply) = reply {
                    self.shared.encode(reply.as_bytes(), &mut out);
                }
            }
            _ => {}
        }
        if !out.is_empty() {
            wr.write_all(&out).await?;
        }
        if self.close_after_reply {
            wr.flush().await?;
            let _ = wr.shutdown().await;
            return Ok(Next::Done);
        }
        Ok(Next::Continue)
    }

    /// Whether this Betfair login is one [`ReplayServer::refuse_betfair_logins_for_now`]
    /// still refuses (counting it).
    fn login_refused_for_now(&self) -> bool {
        self.shared
            .betfair_logins_to_refuse
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Whether a Betfair login's session token is one [`ReplayServer::require_betfair_session`]
    /// accepts.
    fn session_accepted(&self, login: &str) -> bool {
        let required = self
            .shared
            .betfair_session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        required
            .as_deref()
            .is_none_or(|session| wire::json_field(login, "session") == Some(session))
    }

    fn binance_reply(&mut self, text: &str) -> Option<String> {
        let id = wire::json_field(text, "id")?;
        if text.contains(&format!("\"id\":\"{id}\"")) {
            // A WebSocket API request (string id): answer every method with an empty result.
            return Some(format!(
                "{{\"id\":\"{id}\",\"status\":200,\"result\":{{}},\"rateLimits\":[{{\"rateLimitType\":\"REQUEST_WEIGHT\",\"interval\":\"MINUTE\",\"intervalNum\":1,\"limit\":6000,\"count\":1}}]}}"
            ));
        }
        let params = wire::json_strings(text, "params");
        Some(match wire::json_field(text, "method") {
            Some("SUBSCRIBE") => {
                self.started = true;
                self.silent =
                    matches!(self.shared.config.fault, Some(Fault::SilenceAfterSubscribe));
                for stream in params {
                    if !self.subscriptions.iter().any(|s| s == stream) {
                        self.subscriptions.push(stream.to_owned());
                    }
                }
                format!("{{\"result\":null,\"id\":{id}}}")
            }
            Some("UNSUBSCRIBE") => {
                self.subscriptions.retain(|s| !params.contains(&s.as_str()));
                format!("{{\"result\":null,\"id\":{id}}}")
            }
            Some("LIST_SUBSCRIPTIONS") => {
                // The real envelope: every stream, then the id (past 256 bytes for a dozen
                // streams or more).
                let list = self
                    .subscriptions
                    .iter()
                    .map(|s| format!("\"{s}\""))
                    .collect::<Vec<_>>()
                    .join(",");
                format!("{{\"result\":[{list}],\"id\":{id}}}")
            }
            _ => format!("{{\"error\":{{\"code\":2,\"msg\":\"Invalid request\"}},\"id\":{id}}}"),
        })
    }

    fn betfair_reply(&mut self, text: &str) -> Option<String> {
        let id = wire::json_field(text, "id")?;
        let ok = format!("{{\"op\":\"status\",\"id\":{id},\"statusCode\":\"SUCCESS\",\"connectionClosed\":false}}");
        Some(match wire::json_field(text, "op") {
            Some("authentication") if !self.session_accepted(text) => {
                self.close_after_reply = true;
                format!(
                    "{{\"op\":\"status\",\"id\":{id},\"statusCode\":\"FAILURE\",\"errorCode\":\"INVALID_SESSION_INFORMATION\",\"errorMessage\":\"Invalid session information\",\"connectionClosed\":true}}"
                )
            }
            Some("authentication") if self.login_refused_for_now() => {
                self.close_after_reply = true;
                format!(
                    "{{\"op\":\"status\",\"id\":{id},\"statusCode\":\"FAILURE\",\"errorCode\":\"MAX_CONNECTION_LIMIT_EXCEEDED\",\"errorMessage\":\"You have exceeded your max connection limit which is: 10 connection(s).\",\"connectionClosed\":true}}"
                )
            }
            Some("authentication" | "heartbeat") => ok,
            Some(op @ ("marketSubscription" | "orderSubscription")) => {
                self.shared
                    .betfair_subscriptions
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(text.to_owned());
                if op == "marketSubscription" {
                    // Betfair echoes the subscription's id in every change message, and
                    // answers one that resumes from a position with what changed since.
                    let resumes = wire::json_field(text, "initialClk").is_some();
                    self.cycle = if id == BETFAIR_REQUEST_ID && !resumes {
                        Arc::clone(&self.shared.cycle)
                    } else {
                        let made = self.shared.cycle.payloads.iter();
                        let payloads = made
                            .map(|p| with_betfair_id(p, id))
                            .map(|p| if resumes { as_resub_delta(&p) } else { p })
                            .collect();
                        Arc::new(self.shared.cycle(payloads))
                    };
                }
                self.started = true;
                self.silent = matches!(self.shared.config.fault, Some(Fault::SilenceAfterSubscribe));
                ok
            }
            _ => format!(
                "{{\"op\":\"status\",\"id\":{id},\"statusCode\":\"FAILURE\",\"errorCode\":\"INVALID_INPUT\",\"connectionClosed\":false}}"
            ),
        })
    }
}

/// Bytes of a payload searched for the send stamp.
pub const STAMP_WITHIN: usize = 96;

/// Where a paced message's send stamp goes: right after the first pair when its value is a
/// plain string (`{"stream":"btcusdt@aggTrade",` or `{"op":"mcm",`), so that the message
/// still opens as the real feed's does (clients may decide by the first key); else first.
fn stamp_offset(p: &[u8]) -> usize {
    let after_first_pair = || {
        let key_end = 2 + memchr::memchr(b'"', p.get(2..)?)?;
        let value = key_end + 3;
        (p.starts_with(b"{\"") && p.get(key_end + 1..value)? == b":\"").then_some(())?;
        let value_end = value + memchr::memchr2(b'"', b'\\', p.get(value..)?)?;
        (p[value_end] == b'"' && p.get(value_end + 1) == Some(&b',')).then_some(value_end + 2)
    };
    after_first_pair().unwrap_or(1).min(p.len())
}

/// The key of a paced message's send stamp, with its colon.
const STAMP_KEY: &[u8] = b"\"ts_us\":";

/// The key of a live message's number in the feed, with its colon.
const SEQ_KEY: &[u8] = b"\"seq\":";

/// A [`Mode::Live`] message's number in the feed: the `"seq":<digits>` pair within the
/// first [`STAMP_WITHIN`] bytes.
pub fn feed_seq(payload: &[u8]) -> Option<u64> {
    let head = &payload[..payload.len().min(STAMP_WITHIN)];
    let digits = &head[memchr::memmem::find(head, SEQ_KEY)? + SEQ_KEY.len()..];
    let end = digits
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// Writes the time now (µs since the Unix epoch) over the `width` digits of the provisional
/// stamp at each of `at` in `out`. A clock whose reading has another number of digits (not
/// before the year 2286) leaves the provisional stamps: the encoding time, valid too.
fn stamp(out: &mut [u8], at: &[usize], width: usize) {
    let now = now_us().to_string();
    if now.len() != width {
        return;
    }
    for &at in at {
        out[at..at + width].copy_from_slice(now.as_bytes());
    }
}

/// The send time a paced server stamped on a message (µs since the Unix epoch): a
/// `"ts_us":<digits>` pair within the first [`STAMP_WITHIN`] bytes.
pub fn sent_at_us(payload: &[u8]) -> Option<u64> {
    // Built once: `memmem::find` builds its searcher on every call, 35 of a call's 55 ns,
    // which every message of a latency run paid — and the messages behind it in the same
    // batch waited for, in every client's figures.
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(STAMP_KEY));
    let head = &payload[..payload.len().min(STAMP_WITHIN)];
    let digits = &head[FINDER.find(head)? + STAMP_KEY.len()..];
    let mut value = 0u64;
    let mut any = false;
    for &b in digits.iter().take(20) {
        if !b.is_ascii_digit() {
            break;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        any = true;
    }
    any.then_some(value)
}

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

#[cfg(test)]
mod tests {
    use super::{sent_at_us, stamp_offset};

    #[test]
    fn the_stamp_follows_the_first_string_pair() {
        let p = br#"{"stream":"btcusdt@aggTrade","data":{"e":"aggTrade"}}"#;
        assert_eq!(&p[..stamp_offset(p)], br#"{"stream":"btcusdt@aggTrade","#);
        let p = br#"{"op":"mcm","id":2}"#;
        assert_eq!(&p[..stamp_offset(p)], br#"{"op":"mcm","#);
        for first in [
            &br#"{"e":1,"x":2}"#[..],
            br#"{"a":"x"y","b":1}"#,
            b"[1,2]",
            b"{",
            b"",
        ] {
            // First (after the opening byte), never beyond the end.
            let expected = first.len().min(1);
            assert_eq!(
                stamp_offset(first),
                expected,
                "{}",
                String::from_utf8_lossy(first)
            );
        }
    }

    #[test]
    fn reads_the_send_stamp() {
        assert_eq!(
            sent_at_us(b"{\"stream\":\"x\",\"ts_us\":1700000000123456,\"data\":{}}"),
            Some(1_700_000_000_123_456)
        );
        assert_eq!(
            sent_at_us(b"{\"ts_us\":1700000000123456,\"e\":1}"),
            Some(1_700_000_000_123_456)
        );
        assert_eq!(sent_at_us(b"{\"stream\":\"x\"}"), None);
        assert_eq!(sent_at_us(b"{\"ts_us\":"), None);
    }
}
