//! A scripted peer for `Stream` in virtual time: no sockets, no sleeping.

use std::time::{Duration, Instant};

use feedwire_core::testing::{accept_response, decode_client_frames, server_frame};
use feedwire_core::{
    Stream, StreamConfig, StreamError, StreamEvent, StreamState, TransportCommand,
};

pub struct Harness {
    pub s: Stream,
    pub now: Instant,
    /// Raw bytes the stream wrote on the current connection.
    pub sent: Vec<u8>,
    pub events: Vec<StreamEvent>,
    pub commands: Vec<TransportCommand>,
    pub connected: bool,
}

impl Harness {
    /// Sends `text` as the application until the stream refuses it (at most `most` times):
    /// how many went, and the refusal.
    pub fn send_until_refused(&mut self, text: &str, most: usize) -> (usize, StreamError) {
        for sent in 0..most {
            if let Err(e) = self.s.send_text(text) {
                return (sent, e);
            }
        }
        panic!("never refused in {most} sends");
    }

    pub fn new(config: StreamConfig) -> Self {
        Self::with_seed(config, [11; 32])
    }

    /// A harness whose stream draws from `seed`.
    pub fn with_seed(config: StreamConfig, seed: [u8; 32]) -> Self {
        let now = Instant::now();
        let s = Stream::new(config, seed, now).expect("valid config");
        let mut h = Self {
            s,
            now,
            sent: Vec::new(),
            events: Vec::new(),
            commands: Vec::new(),
            connected: false,
        };
        h.pump();
        h
    }

    /// Drains every output of the stream.
    pub fn pump(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(c) = self.s.poll_transport() {
                if c == TransportCommand::Disconnect {
                    self.connected = false;
                }
                self.commands.push(c);
                progressed = true;
            }
            while let Some(chunk) = self.s.poll_transmit() {
                self.sent.extend_from_slice(&chunk);
                progressed = true;
            }
            while let Some(e) = self.s.poll_event() {
                self.events.push(e);
                progressed = true;
            }
            if !progressed {
                return;
            }
        }
    }

    pub fn take_events(&mut self) -> Vec<StreamEvent> {
        std::mem::take(&mut self.events)
    }

    pub fn take_commands(&mut self) -> Vec<TransportCommand> {
        std::mem::take(&mut self.commands)
    }

    /// The transport connected.
    pub fn connect(&mut self) {
        self.sent.clear();
        self.connected = true;
        self.s.handle_connected(self.now);
        self.pump();
    }

    /// Connects and completes the WebSocket handshake.
    pub fn open_ws(&mut self) {
        self.connect();
        let request = std::mem::take(&mut self.sent);
        self.feed(&accept_response(&request));
    }

    /// Bytes from the peer, in reads of at most what `read_buf` offers.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.s.is_connected() {
            let buf = self.s.read_buf();
            let n = buf.len().min(bytes.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            self.s.handle_read(n, self.now);
            bytes = &bytes[n..];
            self.pump();
        }
    }

    pub fn feed_text(&mut self, text: &str) {
        self.feed(&server_frame(true, 1, text.as_bytes()));
    }

    /// Moves virtual time forward by `d`, firing every deadline on the way in order. Every
    /// deadline a timeout leaves is later than it: one due again at once would have an
    /// adapter's loop spin (here, the test would never end).
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            match self.s.poll_timeout() {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.s.handle_timeout(self.now);
                    self.pump();
                    if let Some(next) = self.s.poll_timeout() {
                        assert!(
                            next > self.now,
                            "a timeout at {:?} left a deadline {:?} not after it: {:?}",
                            self.now,
                            next,
                            self.s.state()
                        );
                    }
                }
                _ => break,
            }
        }
        self.now = end;
    }

    /// Text frames the client sent since the last call (unmasked).
    pub fn sent_texts(&mut self) -> Vec<String> {
        let frames = decode_client_frames(&std::mem::take(&mut self.sent));
        frames
            .into_iter()
            .filter(|(_, op, _)| *op == 1)
            .map(|(_, _, p)| String::from_utf8(p).expect("utf8"))
            .collect()
    }

    /// All frames the client sent since the last call: (opcode, payload).
    pub fn sent_frames(&mut self) -> Vec<(u8, Vec<u8>)> {
        decode_client_frames(&std::mem::take(&mut self.sent))
            .into_iter()
            .map(|(_, op, p)| (op, p))
            .collect()
    }

    pub fn state(&self) -> StreamState {
        self.s.state().clone()
    }
}

impl Harness {
    /// A Betfair stream subscribed to every market, connected, greeted and authenticated;
    /// its events so far taken.
    pub fn betfair_authenticated() -> Self {
        let auth = feedwire_core::BetfairAuth {
            app_key: "k".into(),
            session: "s".into(),
        };
        let mut h = Harness::new(StreamConfig::betfair("tcp://127.0.0.1:9", auth));
        let sub = feedwire_core::BetfairSubscription {
            filter_json: "{}".into(),
            data_filter_json: None,
            heartbeat_ms: None,
            conflate_ms: None,
        };
        h.s.subscribe_markets(sub, h.now).expect("valid");
        h.connect();
        h.feed_line(r#"{"op":"connection","connectionId":"1"}"#);
        h.feed_line(r#"{"op":"status","id":1,"statusCode":"SUCCESS"}"#);
        h.take_events();
        h
    }

    /// Drops a Betfair connection, waits out the backoff, and greets and authenticates the
    /// next one; the lines sent on it (the resubscription carries the clocks seen).
    pub fn betfair_reconnect(&mut self) -> Vec<String> {
        self.s.handle_transport_error("reset", self.now);
        self.advance(Duration::from_secs(30));
        self.connect();
        self.sent.clear();
        self.feed_line(r#"{"op":"connection","connectionId":"2"}"#);
        self.feed_line(r#"{"op":"status","id":3,"statusCode":"SUCCESS"}"#);
        self.sent_lines()
    }

    /// Lines the client sent since the last call (line streams).
    pub fn sent_lines(&mut self) -> Vec<String> {
        let raw = String::from_utf8(std::mem::take(&mut self.sent)).expect("utf8");
        raw.split_terminator("\r\n").map(str::to_owned).collect()
    }

    pub fn feed_line(&mut self, line: &str) {
        self.feed(format!("{line}\r\n").as_bytes());
    }
}

/// Why the first event of `events` reconnects, if it is a `Reconnecting`.
pub fn reconnect_reason(events: &[StreamEvent]) -> Option<&feedwire_core::EndReason> {
    match events.first() {
        Some(StreamEvent::Reconnecting { reason, .. }) => Some(reason),
        _ => None,
    }
}

/// Connects (TCP up) and lets the connect timeout pass without an answer: the stream must
/// give up on this connection and schedule a reconnect for that reason.
pub fn assert_connect_times_out(config: feedwire_core::StreamConfig) {
    let timeout = config.timeouts.connect;
    let mut h = Harness::new(config);
    h.connect();
    h.take_events();
    h.advance(timeout);
    let evs = h.take_events();
    assert!(
        matches!(
            reconnect_reason(&evs),
            Some(feedwire_core::EndReason::ConnectTimeout)
        ),
        "{evs:?}"
    );
}
