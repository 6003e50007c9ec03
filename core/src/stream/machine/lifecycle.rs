//! A connection's life: connecting, opening (and subscribing), timers, planned reconnects,
//! the end of a connection and of the stream.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{Stream, STREAMS_PER_REQUEST};
use crate::deadline::after;
use crate::error::HandshakeError;
use crate::stream::backoff::reconnect_delay;
use crate::stream::config::{PermanentFailure, PlannedReconnect, Profile};
use crate::stream::event::{EndReason, RequestKind, StreamEvent, StreamState, TransportCommand};
use crate::stream::profile;
use crate::stream::timers::Timer;
use crate::ws::CloseInitiator;

/// How long a planned reconnect for the connection's age waits while reads are held before
/// it asks again.
const LIFETIME_RETRY: Duration = Duration::from_secs(1);

impl Stream {
    pub(super) fn start_connecting(&mut self, now: Instant) {
        self.state = StreamState::Connecting {
            attempt: self.attempt,
        };
        tracing::info!(host = %self.endpoint.host, port = self.endpoint.port, attempt = self.attempt, "stream connecting");
        self.events.push_back(StreamEvent::Connecting {
            attempt: self.attempt,
        });
        let turn = self
            .config
            .connect_budget
            .as_ref()
            .map(|b| b.take_turn(now));
        match turn {
            Some(turn) if turn > now => {
                let wait = turn - now;
                tracing::info!(host = %self.endpoint.host, ?wait, "connect waits for its turn in the shared budget");
                self.awaiting_turn = true;
                self.timers.set(Timer::Turn, turn);
            }
            _ => self.connect_now(now),
        }
    }

    /// Asks the transport to connect, the connect timeout running from now.
    fn connect_now(&mut self, now: Instant) {
        self.awaiting_turn = false;
        self.transport
            .push_back(TransportCommand::Connect(self.endpoint.clone()));
        self.timers
            .set(Timer::Connect, after(now, self.config.timeouts.connect));
    }

    pub(super) fn on_open(&mut self, now: Instant) {
        self.state = StreamState::Open;
        self.opened_at = Some(now);
        self.got_data = false;
        self.probing = false;
        self.reads_held = false;
        self.logged_in = false;
        let t = &self.config.timeouts;
        self.timers.stop(Timer::Connect);
        self.last_input = now;
        if let Some(idle) = t.idle {
            self.timers.set(Timer::Idle, after(now, idle));
        }
        if let Some(k) = t.keepalive {
            self.timers.set(Timer::Keepalive, after(now, k));
        }
        if let Some(l) = t.max_lifetime {
            let l = self.lifetime_spread(l);
            self.timers.set(Timer::Lifetime, after(now, l));
        }
        if let Some(q) = self.config.timeouts.release_read_memory {
            self.timers.set(Timer::QuietRelease, after(now, q));
        }
        let reconnected = self.ever_opened;
        self.ever_opened = true;
        self.session_is_reconnect = reconnected;
        tracing::info!(host = %self.endpoint.host, reconnected, "stream open");
        self.events.push_back(StreamEvent::Opened { reconnected });
        match self.config.profile.clone() {
            Profile::BinanceStream => {
                // The URL subscribed its own streams again: undo those the application
                // unsubscribed, then subscribe the rest it wants.
                let dropped: Vec<String> = self
                    .url_streams
                    .difference(&self.streams)
                    .cloned()
                    .collect();
                for chunk in dropped.chunks(STREAMS_PER_REQUEST) {
                    let template = profile::binance_method("UNSUBSCRIBE", chunk);
                    self.queue_control(RequestKind::Unsubscribe(chunk.to_vec()), template, now);
                }
                let streams: Vec<String> = self
                    .streams
                    .difference(&self.url_streams)
                    .cloned()
                    .collect();
                let mut count = 0;
                for chunk in streams.chunks(STREAMS_PER_REQUEST) {
                    let template = profile::binance_method("SUBSCRIBE", chunk);
                    self.queue_control(RequestKind::Subscribe(chunk.to_vec()), template, now);
                    count += 1;
                }
                if reconnected && count > 0 {
                    self.events.push_back(StreamEvent::Resubscribed { count });
                }
                if !self.streams.is_empty() || self.endpoint.resource.contains('@') {
                    self.arm_first_data(now);
                }
            }
            Profile::Betfair(auth) => {
                let template = profile::betfair_authentication(&auth);
                // Only a full pending-request table can refuse this; without a login the
                // stream is useless, so that ends it with the reason.
                if let Err(e) = self.send_request(RequestKind::Authentication, &template, now) {
                    self.finish(StreamState::Crashed(EndReason::RequestFailed(e)), now);
                }
            }
            Profile::BinanceWsApi => {}
        }
    }

    /// This connection's lifetime: `max` less a random part of up to 1/144 of it (the 10
    /// minutes Binance's preset leaves of its 24 hours). Connections opened together — a
    /// program's streams at start-up, or after an outage — would otherwise all reconnect at
    /// the same instant every day, and a burst of hundreds of connects trips Binance's limit
    /// of 300 per 5 minutes per IP (429 and a `Retry-After` those streams then wait out).
    fn lifetime_spread(&mut self, max: Duration) -> Duration {
        let random = f64::from(u32::from_ne_bytes(self.rng.mask_key())) / f64::from(u32::MAX);
        max - (max / 144).mul_f64(random)
    }

    /// Arms the first-data timer for the subscriptions sent now, unless data came already or
    /// a connection with the same subscriptions already ended for want of it.
    pub(super) fn arm_first_data(&mut self, now: Instant) {
        if self.first_data_spent {
            return;
        }
        if let (Some(fd), false) = (self.config.timeouts.first_data, self.got_data) {
            if self.timers.get(Timer::FirstData).is_none() {
                self.timers.set(Timer::FirstData, after(now, fd));
            }
        }
    }

    pub(super) fn on_timer(&mut self, timer: Timer, now: Instant) {
        if self.state.is_terminal() {
            return;
        }
        match timer {
            Timer::Connect => {
                if matches!(
                    self.state,
                    StreamState::Connecting { .. } | StreamState::Handshaking
                ) {
                    self.end_connection(EndReason::ConnectTimeout, now);
                }
            }
            Timer::FirstData => {
                if !self.got_data && matches!(self.state, StreamState::Open) {
                    self.first_data_spent = true;
                    self.end_connection(EndReason::FirstDataTimeout, now);
                }
            }
            Timer::Idle => {
                if !matches!(self.state, StreamState::Open) {
                    return;
                }
                let Some(idle) = self.config.timeouts.idle else {
                    return;
                };
                // Armed from an earlier moment: bytes came since, so the silence began with
                // the last read.
                let silent_until = after(self.last_input, idle);
                if silent_until > now {
                    return self.timers.set(Timer::Idle, silent_until);
                }
                if self.probing {
                    return self.end_connection(EndReason::IdleTimeout, now);
                }
                self.probe(now);
                self.probing = true;
                let answer = self.config.timeouts.probe_answer;
                self.timers.set(Timer::Idle, after(now, answer));
            }
            Timer::Keepalive => {
                if matches!(self.state, StreamState::Open) {
                    self.probe(now);
                    if let Some(k) = self.config.timeouts.keepalive {
                        self.timers.set(Timer::Keepalive, after(now, k));
                    }
                }
            }
            Timer::Reconnect => {
                if matches!(self.state, StreamState::Reconnecting { .. }) {
                    self.start_connecting(now);
                }
            }
            // Set only while `Connecting` without a `Connect` out; cleared when that ends.
            Timer::Turn => {
                if self.awaiting_turn {
                    self.connect_now(now);
                }
            }
            Timer::Pace => self.flush_outbox(now),
            Timer::QuietRelease => self.release_if_quiet(now),
            Timer::Lifetime => {
                // Not while reads wait for the application: our Close would time out behind
                // them and the connection go with what they hold. Asked again a second on.
                if self.reads_held {
                    self.timers.set(Timer::Lifetime, after(now, LIFETIME_RETRY));
                } else if let Some(reason) = self.advised.take() {
                    // The grace given with the report is over.
                    self.replace_connection(reason, now);
                } else {
                    self.planned_reconnect(EndReason::LifetimeReached, now);
                }
            }
        }
    }

    /// The quiet-release timer fired: armed from an earlier moment, it re-arms from the last
    /// read if one came since (a busy stream: one wake-up a period) and reviews the read
    /// size (reads that stayed small shrink it, and the block with it); otherwise the read
    /// memory goes back and the timer waits for the next read to arm it again
    /// ([`after_read`](Self::after_read)), so a quiet stream is not woken for it.
    fn release_if_quiet(&mut self, now: Instant) {
        let Some(quiet) = self.config.timeouts.release_read_memory else {
            return;
        };
        let quiet_until = after(self.last_input, quiet);
        if quiet_until > now {
            if let Some(conn) = self.conn.as_mut() {
                conn.review_read_size();
            }
            return self.timers.set(Timer::QuietRelease, quiet_until);
        }
        if let Some(conn) = self.conn.as_mut() {
            conn.release_read_buffer();
            self.read_memory_released = true;
        }
        // Its room is a read's events, swapped with the transport's queues (72 bytes an
        // event: 94 KB after a 256 KiB read of 0.2 KB messages handed over as events).
        if self.events.is_empty() {
            self.events = VecDeque::new();
        }
        // Room for a few commands (416 bytes) from the connect.
        if self.transport.is_empty() {
            self.transport = VecDeque::new();
        }
    }

    /// After a read: the quiet-release timer, if a quiet spell left it unarmed, runs again
    /// from this read (while the connection is open).
    #[cold]
    #[inline(never)]
    pub(super) fn arm_quiet_release(&mut self, now: Instant) {
        if let (Some(quiet), StreamState::Open) =
            (self.config.timeouts.release_read_memory, &self.state)
        {
            self.timers.set(Timer::QuietRelease, after(now, quiet));
        }
    }

    pub(super) fn probe(&mut self, now: Instant) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if !conn.ping() && matches!(self.config.profile, Profile::Betfair(_)) {
            let _ = self.send_request(RequestKind::Heartbeat, &profile::betfair_heartbeat(), now);
        }
    }

    /// The current connection is to be replaced on purpose: ends it and connects again at
    /// once, or (`PlannedReconnect::Advise`) reports it and keeps the connection for the
    /// grace. Once a connection: a later notice, or its age, changes nothing.
    pub(super) fn planned_reconnect(&mut self, reason: EndReason, now: Instant) {
        if !matches!(self.state, StreamState::Open)
            || self.planned.is_some()
            || self.advised.is_some()
        {
            return;
        }
        if let PlannedReconnect::Advise { grace } = self.config.reconnect.planned {
            let deadline = after(now, grace);
            tracing::info!(host = %self.endpoint.host, %reason, ?grace, "planned reconnect due");
            self.advised = Some(reason.clone());
            // The connection's age can no longer matter: its timer holds the deadline.
            self.timers.set(Timer::Lifetime, deadline);
            self.events
                .push_back(StreamEvent::ReconnectDue { reason, deadline });
            return;
        }
        self.replace_connection(reason, now);
    }

    /// Ends the current connection on purpose and connects again at once.
    fn replace_connection(&mut self, reason: EndReason, now: Instant) {
        if !matches!(self.state, StreamState::Open) || self.planned.is_some() {
            return;
        }
        tracing::info!(host = %self.endpoint.host, %reason, "planned reconnect");
        self.planned = Some(reason.clone());
        if self.conn.as_mut().is_some_and(|c| c.close(now)) {
            self.state = StreamState::Closing;
            self.timers.clear();
        } else {
            self.end_connection(reason, now);
        }
    }

    /// The current connection is over: reconnect, or end the stream.
    pub(super) fn end_connection(&mut self, reason: EndReason, now: Instant) {
        if self.state.is_terminal() {
            return;
        }
        if self.stop_requested {
            return self.finish(
                StreamState::Closed {
                    by: CloseInitiator::Local,
                },
                now,
            );
        }
        let fatal = matches!(
            reason,
            EndReason::FatalResponse(_) | EndReason::UserCrash(_)
        ) || (reason.is_permanent()
            && match self.config.reconnect.permanent {
                PermanentFailure::EndIfNeverOpen => !self.ever_opened,
                PermanentFailure::End => true,
                PermanentFailure::Retry => false,
            });
        // A planned reconnect ends with its own reason, however the closing connection then
        // went (close handshake, reset, or a violation in the bytes after the notice): the
        // same bytes must give the same report however reads split them, and whether the
        // engine failed before or after the stream acted on the notice depends on that.
        // A connection kept after its report ends as the planned reconnect it was to be.
        let planned = self.planned.take().or_else(|| self.advised.take());
        let was_planned = planned.is_some();
        let reason = match planned {
            Some(why) if !fatal => {
                tracing::debug!(host = %self.endpoint.host, ended = %reason, "planned reconnect: connection ended");
                why
            }
            _ => reason,
        };
        self.release_connection(true);
        self.timers.clear();
        self.outbox.clear();
        self.paced.clear();
        let healthy = self.opened_at.is_some_and(|t| {
            now.saturating_duration_since(t) >= self.config.reconnect.healthy_after
        });
        self.opened_at = None;
        if !self.config.reconnect.enabled || fatal {
            let end = match reason {
                EndReason::ClosedByPeer { code, .. } if !fatal => {
                    self.events.push_back(StreamEvent::Closed {
                        by: CloseInitiator::Remote,
                        code,
                    });
                    StreamState::Closed {
                        by: CloseInitiator::Remote,
                    }
                }
                other => StreamState::Crashed(other),
            };
            // Released above: releasing again would ask an attempt still connecting to
            // disconnect twice.
            return self.end_released(end, now);
        }
        // `attempt` numbers connection attempts: 1 for the first; a planned reconnect starts
        // the count afresh, a healthy connection makes the next retry a first retry.
        if was_planned {
            self.attempt = 0;
        } else if healthy {
            self.attempt = 1;
        }
        self.attempt += 1;
        let retry = self.attempt - 1;
        if let Some(max) = self.config.reconnect.max_attempts {
            if retry > max {
                let gave_up = EndReason::GaveUp {
                    attempts: max,
                    last: Box::new(reason),
                };
                return self.finish(StreamState::Crashed(gave_up), now);
            }
        }
        let delay = if was_planned {
            Duration::ZERO
        } else {
            let random = u32::from_ne_bytes(self.rng.mask_key());
            // Never sooner than the server asked: a client that retries through a 429's
            // Retry-After gets its IP banned (Binance answers 418 then).
            reconnect_delay(&self.config.reconnect, retry, random)
                .max(asked_to_wait(&reason).unwrap_or_default())
        };
        self.stats.reconnect();
        tracing::info!(host = %self.endpoint.host, %reason, attempt = self.attempt, ?delay, "stream reconnecting");
        self.events.push_back(StreamEvent::Reconnecting {
            attempt: self.attempt,
            delay,
            reason,
            planned: was_planned,
        });
        let at = after(now, delay);
        self.state = StreamState::Reconnecting {
            attempt: self.attempt,
            at,
        };
        if was_planned {
            self.start_connecting(now);
        } else {
            self.timers.set(Timer::Reconnect, at);
        }
    }

    /// Detaches the current connection (if any) and tells the transport to drop it. With
    /// `flush`, bytes the engine still queued (a Close echo, a Close with an error code) are
    /// handed out by `poll_transmit` before the transport acts on the `Disconnect`.
    pub(super) fn release_connection(&mut self, flush: bool) {
        // Answers come on the connection a request went out on: none can come now. What
        // the stream redoes on the next connection (subscriptions, authentication) ends
        // silently; what an application asked for is reported lost, at once.
        let events = &mut self.events;
        self.router.abandon_pending(|id, kind| {
            if matches!(
                kind,
                RequestKind::Request(_) | RequestKind::ListSubscriptions
            ) {
                events.push_back(StreamEvent::RequestLost { id, kind });
            }
        });
        // The transport drops the TLS session with the connection.
        self.stats.set_tls_buffer_bytes(0);
        let had = self.conn.take().map(|c| {
            if flush {
                self.draining = Some(c);
            }
        });
        if !flush {
            self.draining = None;
        }
        // An attempt still waiting for its turn asked the transport for nothing.
        let connecting =
            matches!(self.state, StreamState::Connecting { .. }) && !self.awaiting_turn;
        self.awaiting_turn = false;
        if had.is_some() || connecting {
            self.transport.push_back(TransportCommand::Disconnect);
        }
    }

    /// Enters a terminal state: drops the connection and reports the end once.
    pub(super) fn finish(&mut self, end: StreamState, now: Instant) {
        // A crash drops the connection with whatever it still had to send; a close lets a
        // queued Close frame out first.
        self.release_connection(!matches!(end, StreamState::Crashed(_)));
        self.end_released(end, now);
    }

    /// Enters a terminal state once the connection is released.
    fn end_released(&mut self, end: StreamState, _now: Instant) {
        if matches!(end, StreamState::Crashed(_)) {
            self.draining = None;
        }
        self.timers.clear();
        self.outbox.clear();
        match &end {
            StreamState::Closed { by } => {
                if !matches!(self.events.back(), Some(StreamEvent::Closed { .. })) {
                    self.events.push_back(StreamEvent::Closed {
                        by: *by,
                        code: 1000,
                    });
                }
                tracing::info!(host = %self.endpoint.host, ?by, "stream closed");
            }
            StreamState::Crashed(reason) => {
                tracing::warn!(host = %self.endpoint.host, %reason, "stream crashed");
                self.events.push_back(StreamEvent::Crashed(reason.clone()));
            }
            _ => unreachable!("finish is only called with a terminal state"),
        }
        self.state = end;
    }
}

/// How long the server asked us to wait before connecting again: a refused upgrade's
/// `Retry-After`.
fn asked_to_wait(reason: &EndReason) -> Option<Duration> {
    match reason {
        EndReason::WebSocket(crate::Error::Handshake(HandshakeError::Rejected {
            refusal, ..
        })) => refusal.retry_after,
        _ => None,
    }
}
