//! The transport's inputs: connected or not, bytes read, end of stream, deadlines.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use super::inbound::plain_data;
use super::positions::{NoPositions, Positions};
use super::Stream;
use crate::offer::{Lent, Owned, TakeNothing};
use crate::read_room::{ReadRoom, ReadSpare};
use crate::route::{Classifier, HeadShapes};
use crate::stream::config::Profile;
use crate::stream::connection::Connection;
use crate::stream::event::{DataHandler, DataRef, EndReason, StreamEvent, StreamState};
use crate::stream::stats::Stats;
use crate::stream::timers::Timer;

impl Stream {
    /// Space for the next read from the connection; empty when there is none (the stream
    /// ended the connection in this very call and a `Disconnect` is waiting in
    /// [`poll_transport`](Self::poll_transport)): check [`is_connected`](Self::is_connected)
    /// before reading. Allocates a read block when the connection has none (its first read,
    /// the first after a quiet release): an event loop asks once the socket is readable, not
    /// before it waits, or a quiet stream holds a block again at once.
    pub fn read_buf(&mut self) -> &mut [u8] {
        match self.conn.as_mut() {
            Some(conn) => conn.read_buf(),
            None => &mut [],
        }
    }

    /// [`read_buf`](Self::read_buf)'s room as uninitialised memory, for a transport that can
    /// read into it (a `recv` into spare capacity, tokio's `try_read_buf`; see [`ReadSpare`]):
    /// the same bytes offered, without zeroing them first — a `memset` a byte read, whenever
    /// queued messages have taken the block's front (5-11% of a queued message's cost in
    /// memory). Then [`handle_read`](Self::handle_read) (or a lending variant) with the count
    /// written, as after `read_buf`. `None` where `read_buf` is empty: no connection to read.
    pub fn read_spare(&mut self) -> Option<ReadSpare<'_>> {
        self.conn.as_mut().map(Connection::read_spare)
    }

    /// [`read_spare`](Self::read_spare)'s room, or an empty [`ReadRoom::Bytes`] where there
    /// is no connection to read: for code that takes either kind of room.
    pub fn read_room(&mut self) -> ReadRoom<'_> {
        match self.conn.as_mut() {
            Some(conn) => ReadRoom::Spare(conn.read_spare()),
            None => ReadRoom::Bytes(&mut []),
        }
    }

    /// The transport connected (TCP, and TLS for `wss`/`tls`).
    pub fn handle_connected(&mut self, now: Instant) {
        if !matches!(self.state, StreamState::Connecting { .. }) {
            return;
        }
        tracing::debug!(host = %self.endpoint.host, port = self.endpoint.port, "stream transport connected");
        if self.endpoint.scheme.is_websocket() {
            let mut ws = self.config.ws.clone();
            ws.close_timeout = self.config.timeouts.close;
            let mut seed = [0u8; 32];
            self.rng.fill(&mut seed);
            match Connection::websocket(&self.config.url, ws, seed) {
                Ok(c) => self.conn = Some(c),
                Err(e) => return self.end_connection(EndReason::ConnectFailed(e.to_string()), now),
            }
        } else {
            self.conn = Some(Connection::lines(
                self.config.delimiter,
                self.config.ws.max_read_size,
                self.config.max_line,
            ));
        }
        self.state = StreamState::Handshaking;
        if !self.endpoint.scheme.is_websocket()
            && !matches!(self.config.profile, Profile::Betfair(_))
        {
            self.on_open(now);
        }
        self.publish(now);
    }

    /// The transport could not connect.
    pub fn handle_connect_failed(&mut self, reason: &str, now: Instant) {
        if matches!(self.state, StreamState::Connecting { .. }) {
            self.end_connection(EndReason::ConnectFailed(reason.to_owned()), now);
            self.publish(now);
        }
    }

    /// TLS failed, during the handshake or after.
    pub fn handle_tls_error(&mut self, error: &crate::tls::TlsError, now: Instant) {
        if self.conn.is_some() || matches!(self.state, StreamState::Connecting { .. }) {
            self.end_connection(EndReason::Tls(error.into()), now);
            self.publish(now);
        }
    }

    /// The transport failed after connecting.
    pub fn handle_transport_error(&mut self, reason: &str, now: Instant) {
        if self.conn.is_some() {
            self.end_connection(EndReason::Transport(reason.to_owned()), now);
            self.publish(now);
        }
    }

    /// The transport holds its reads back because the application is behind (events it
    /// has not taken yet): call it before [`handle_timeout`](Self::handle_timeout) while
    /// so. Reading nothing then is not the peer's silence. It counts as input for the idle
    /// timer: a connection whose bytes wait unread in the socket must not be ended as
    /// stalled, with those bytes, because the application paused longer than the idle
    /// timeout and `probe_answer`. Requests past their timeout wait for the next read: their
    /// answers may be in the socket (an order request must not be reported timed out, and
    /// sent again, because the market data before its answer was not taken). A planned
    /// reconnect for the connection's age waits too: its Close would time out behind the
    /// held reads. Once reads go on, all three are measured again.
    pub fn handle_reads_held(&mut self, now: Instant) {
        if self.conn.is_some() {
            self.last_input = now;
            self.probing = false;
            self.reads_held = true;
        }
    }

    /// The transport wrote `n` bytes into [`read_buf`](Self::read_buf).
    pub fn handle_read(&mut self, n: usize, now: Instant) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        // The fast path: a data message on a stream that already had data goes straight to
        // the event queue (no engine event, no routing enum). The first data message (its
        // timer), responses, shutdown notices and whatever follows them in this read take
        // the general path in `drain_connection`, in order.
        if self.got_data {
            let classifier = self.router.classifier();
            let (events, stats, shapes) =
                (&mut self.events, &mut self.stats, &mut self.head_shapes);
            // The loop compiled for this stream's kind: no test of it a message (`positions`).
            match self.betfair.as_deref_mut() {
                Some(feeds) => {
                    queue_data(
                        conn,
                        n,
                        now,
                        PlainData::new(classifier, shapes, &mut feeds.clocks),
                        events,
                        stats,
                    );
                }
                None => {
                    queue_data(
                        conn,
                        n,
                        now,
                        PlainData::new(classifier, shapes, &mut NoPositions),
                        events,
                        stats,
                    );
                }
            }
        } else {
            conn.handle_read_offering(n, &mut TakeNothing);
        }
        self.after_read(n, now);
    }

    /// [`handle_read`](Self::handle_read) that lends data messages to `on_data` instead of
    /// queueing them: each payload is borrowed from the read buffer during the call (no
    /// slice, no reference count, no event), in arrival order. Everything else — and any
    /// data message that arrives behind an event not yet polled — is queued as usual, so
    /// calling `on_data` for what this lends and then draining
    /// [`poll_event`](Self::poll_event) sees every message in arrival order. Lending starts
    /// only with an empty event queue; the first data message of each connection is queued
    /// (it stops the first-data timer on the general path).
    pub fn handle_read_with(&mut self, n: usize, now: Instant, on_data: impl FnMut(DataRef<'_>)) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if !(self.got_data && self.events.is_empty()) {
            return self.handle_read(n, now);
        }
        let classifier = self.router.classifier();
        let shapes = &mut self.head_shapes;
        let (messages, bytes) = match self.betfair.as_deref_mut() {
            Some(feeds) => lend_data(
                conn,
                n,
                now,
                PlainData::new(classifier, shapes, &mut feeds.clocks),
                on_data,
            ),
            None => lend_data(
                conn,
                n,
                now,
                PlainData::new(classifier, shapes, &mut NoPositions),
                on_data,
            ),
        };
        self.stats.received_many(messages, bytes);
        self.after_read(n, now);
    }

    /// [`handle_read_with`](Self::handle_read_with) lending to `handler`, or
    /// [`handle_read`](Self::handle_read) without one: for an adapter whose delivery may or
    /// may not lend (and must not lend while events wait for its handler). Generic, so that
    /// an adapter holding its handler's type calls `on_data` directly (inlined), not through
    /// a vtable once per message; `dyn DataHandler` works too.
    pub fn handle_read_lending<H: DataHandler + ?Sized>(
        &mut self,
        n: usize,
        now: Instant,
        handler: Option<&mut H>,
    ) {
        match handler {
            Some(h) => self.handle_read_with(n, now, |d| h.on_data(d)),
            None => self.handle_read(n, now),
        }
    }

    /// What every read (of `n` bytes) does after the engine took the bytes: statistics,
    /// timers, then the events.
    pub(super) fn after_read(&mut self, n: usize, now: Instant) {
        self.stats.read(n >= self.config.ws.max_read_size);
        self.stats.set_last_receive(now);
        self.probing = false;
        self.reads_held = false;
        // The idle timer is not moved here (an addition and a new earliest deadline a read):
        // when it fires, it finds this read and re-arms from it (`on_timer`). Nor is the
        // quiet-release timer, but after a quiet spell released the memory (and left it
        // unarmed).
        self.last_input = now;
        if self.timers.get(Timer::QuietRelease).is_none() {
            self.arm_quiet_release(now);
        }
        self.drain_connection(now);
        self.publish(now);
    }

    /// The transport reached end of stream.
    pub fn handle_eof(&mut self, now: Instant) {
        if let Some(conn) = self.conn.as_mut() {
            conn.handle_eof();
            self.drain_connection(now);
            if self.conn.is_some() {
                // The engine ended without an event (already terminal): end here.
                self.end_connection(EndReason::Eof, now);
            }
            self.publish(now);
        }
    }

    /// Acts on every deadline that passed by `now`. A driver that was held up past a
    /// deadline (a slow handler, a thread busy elsewhere) reads what its socket holds
    /// first: an answer, a Close or data already there then counts as in time, rather than
    /// a request timing out with its answer unsolicited after it (both adapters do so).
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(conn) = self.conn.as_mut() {
            conn.handle_timeout(now);
            self.drain_connection(now);
        }
        if !self.reads_held {
            self.router.handle_timeout(now);
        }
        while let Some(t) = self.router.poll_timed_out() {
            self.events.push_back(StreamEvent::RequestTimedOut {
                id: t.id,
                kind: t.tag,
            });
        }
        for timer in self.timers.take_expired(now) {
            self.on_timer(timer, now);
        }
        self.publish(now);
    }

    /// Whether the connection has been quiet for
    /// [`Timeouts::release_read_memory`](crate::Timeouts::release_read_memory) since the
    /// last call, and gave its read block back (unless a frame was half received): found in
    /// [`handle_timeout`](Self::handle_timeout), and the transport's cue to give back its
    /// own read memory too — a TLS session's ciphertext buffer
    /// ([`TlsSession::release_read_buffer`](crate::TlsSession::release_read_buffer)). Ask
    /// after `handle_timeout`; true once per quiet spell.
    pub fn poll_read_memory_released(&mut self) -> bool {
        std::mem::take(&mut self.read_memory_released)
    }

    /// Frees the connection's read buffer if nothing partial is buffered, at once (the
    /// stream does so itself after
    /// [`Timeouts::release_read_memory`](crate::Timeouts::release_read_memory) of quiet).
    pub fn release_read_buffer(&mut self, now: Instant) -> bool {
        let released = self
            .conn
            .as_mut()
            .is_some_and(Connection::release_read_buffer);
        if released {
            self.publish(now);
        }
        released
    }

    /// The connection's TLS session holds `bytes` in its own buffers
    /// ([`TlsSession::buffer_capacity`](crate::TlsSession::buffer_capacity)), for
    /// [`StatsSnapshot::tls_buffer_bytes`](crate::StatsSnapshot::tls_buffer_bytes), published
    /// at once when it changed. [`StreamInput`](crate::StreamInput) and
    /// [`LendingInput`](crate::LendingInput) report it at every TLS read (where the buffer
    /// grows); a transport reports it after
    /// [`TlsSession::release_read_buffer`](crate::TlsSession::release_read_buffer). Ignored
    /// without a connection: the session ends with it, and the figure is 0 then.
    pub fn set_tls_buffer_bytes(&mut self, bytes: usize, now: Instant) {
        if self.conn.is_some() && self.stats.set_tls_buffer_bytes(bytes as u64) {
            self.publish(now);
        }
    }
}

/// What the fast path judges a message with ([`plain_data`]): the stream's rules and head
/// shapes, and where its positions go.
struct PlainData<'a, P> {
    classifier: &'a Classifier,
    shapes: &'a mut HeadShapes,
    positions: &'a mut P,
}

impl<'a, P: Positions> PlainData<'a, P> {
    fn new(classifier: &'a Classifier, shapes: &'a mut HeadShapes, positions: &'a mut P) -> Self {
        Self {
            classifier,
            shapes,
            positions,
        }
    }
}

/// [`Stream::handle_read`]'s fast path: `n` bytes read on `conn`, plain data queued as
/// events (counted in `stats`), the rest left to the general path.
#[inline(always)]
fn queue_data(
    conn: &mut Connection,
    n: usize,
    now: Instant,
    plain: PlainData<'_, impl Positions>,
    events: &mut VecDeque<StreamEvent>,
    stats: &mut Stats,
) {
    // Taken apart, so that the loop holds each where the struct would add a load.
    let PlainData {
        classifier,
        shapes,
        positions,
    } = plain;
    conn.handle_read_offering(
        n,
        &mut Owned(|payload: Bytes, kind| {
            match plain_data(classifier, shapes, positions, &payload, kind) {
                Some(heartbeat) => {
                    stats.received(payload.len());
                    events.push_back(StreamEvent::Data {
                        payload,
                        heartbeat,
                        received: now,
                    });
                    None
                }
                None => Some(payload),
            }
        }),
    );
}

/// [`Stream::handle_read_with`]'s read: `n` bytes read on `conn`, plain data lent to
/// `on_data`; the messages and bytes lent. Counted here and added to the statistics once a
/// read: two register additions a message, not two read-modify-writes.
#[inline(always)]
fn lend_data(
    conn: &mut Connection,
    n: usize,
    now: Instant,
    plain: PlainData<'_, impl Positions>,
    mut on_data: impl FnMut(DataRef<'_>),
) -> (u64, u64) {
    let PlainData {
        classifier,
        shapes,
        positions,
    } = plain;
    let (mut messages, mut bytes) = (0u64, 0u64);
    conn.handle_read_offering(
        n,
        &mut Lent(
            #[inline(always)]
            |payload: &[u8], kind| match plain_data(classifier, shapes, positions, payload, kind) {
                Some(heartbeat) => {
                    messages += 1;
                    bytes += payload.len() as u64;
                    on_data(DataRef {
                        payload,
                        heartbeat,
                        received: now,
                    });
                    true
                }
                None => false,
            },
        ),
    );
    (messages, bytes)
}
