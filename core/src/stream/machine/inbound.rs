//! What the connection delivers: each message routed to data, an answer to a request of
//! ours, or an unsolicited response; the fast path's check for plain data.

use std::ops::Range;
use std::time::Instant;

use bytes::Bytes;

use super::line_plan::LinePlan;
use super::positions::Positions;
use super::{Feed, Stream};
use crate::offer::Offered;
use crate::route::{ByShape, Classifier, Fitted, HeadShapes, RequestId, Routed, ShapeFit, Verdict};
use crate::stream::clocks::Clocks;
use crate::stream::config::Profile;
use crate::stream::connection::{ConnEvent, Connection};
use crate::stream::event::{EndReason, RequestKind, StreamEvent, StreamState};
use crate::stream::profile::{self, BetfairRefusal};
use crate::stream::timers::Timer;
use crate::ws::CloseInitiator;

impl Stream {
    /// Takes the connection's events, in order, until none is left or the stream ended.
    /// Always inlined: left to itself the compiler stopped inlining it into the lending read
    /// once routing grew (callgrind: 28 instructions a paced read for the call and check).
    #[inline(always)]
    pub(super) fn drain_connection(&mut self, now: Instant) {
        // After a read whose messages were all lent there is nothing to take: this check
        // costs a few instructions, the loop's set-up tens (a paced stream's every read).
        if self.conn.as_ref().is_some_and(Connection::has_events) {
            self.take_connection_events(now);
        }
    }

    #[inline(never)]
    fn take_connection_events(&mut self, now: Instant) {
        while let Some(event) = self.conn.as_mut().and_then(Connection::next_event) {
            match event {
                ConnEvent::Opened => self.on_open(now),
                ConnEvent::Message { payload, binary } => self.on_message(payload, binary, now),
                ConnEvent::Closed { by, code, reason } => self.on_closed(by, code, reason, now),
                ConnEvent::Ended(reason) => self.end_connection(reason, now),
            }
            if self.state.is_terminal() {
                return;
            }
        }
    }

    pub(super) fn on_message(&mut self, payload: Bytes, binary: bool, now: Instant) {
        // Between `stop()` and the peer's Close only the message that was half received at
        // the stop is delivered (the first to complete after it); the rest is dropped.
        if self.stop_requested && !std::mem::take(&mut self.partial_at_stop) {
            return;
        }
        self.stats.received(payload.len());
        let routed = if binary {
            self.router.route_binary(payload)
        } else {
            self.router.route(payload)
        };
        match routed {
            Routed::Data {
                payload,
                heartbeat,
                shutdown,
                extracted,
            } => {
                // After a stop the fast paths stay shut (see `got_data`).
                if !self.got_data && !self.stop_requested {
                    self.got_data = true;
                    self.first_data_spent = false;
                    self.timers.stop(Timer::FirstData);
                }
                if let Some(feeds) = self.betfair.as_deref_mut() {
                    update_clocks(&mut feeds.clocks, &payload, &extracted);
                }
                self.events.push_back(StreamEvent::Data {
                    payload,
                    heartbeat,
                    received: now,
                });
                if shutdown {
                    self.planned_reconnect(EndReason::ServerShutdown, now);
                }
            }
            Routed::Answer {
                payload,
                id,
                tag,
                is_error,
                ..
            } => {
                self.stats.response();
                self.on_answer(id, tag, payload, is_error, now);
            }
            Routed::Unsolicited {
                payload,
                id,
                is_error,
            } => {
                self.stats.response();
                let betfair_greeting = matches!(self.config.profile, Profile::Betfair(_))
                    && matches!(self.state, StreamState::Handshaking)
                    && id.is_none();
                if betfair_greeting {
                    self.on_open(now);
                } else {
                    self.events.push_back(StreamEvent::UnsolicitedResponse {
                        id: id.map(Box::new),
                        payload,
                        is_error,
                    });
                }
            }
        }
    }

    pub(super) fn on_answer(
        &mut self,
        id: RequestId,
        kind: RequestKind,
        payload: Bytes,
        is_error: bool,
        now: Instant,
    ) {
        let subscription = matches!(
            kind,
            RequestKind::Subscribe(_)
                | RequestKind::Unsubscribe(_)
                | RequestKind::MarketSubscription
                | RequestKind::OrderSubscription
        );
        if is_error && matches!(self.config.profile, Profile::Betfair(_)) {
            match (profile::betfair_refusal(&payload), Feed::of_request(&kind)) {
                (BetfairRefusal::ForNow, _) => {
                    let refusal = Bytes::copy_from_slice(&payload);
                    return self.end_connection(EndReason::RefusedForNow(refusal), now);
                }
                // Only a request that resumed from a position: one without, refused the same
                // way, would be sent again at once without end.
                (BetfairRefusal::UnknownPosition, Some(feed))
                    if self.clocks_of(feed).is_some_and(|c| c.resumes()) =>
                {
                    let host = &self.endpoint.host;
                    tracing::warn!(%host, ?feed, "position refused: a new image");
                    if let Some(clocks) = self.clocks_mut(feed) {
                        *clocks = Clocks::default();
                    }
                    // On this connection if the server keeps it, else on the next.
                    if let Err(error) = self.send_betfair_subscription(feed, now) {
                        let host = &self.endpoint.host;
                        tracing::debug!(%host, %error, "resubscription waits");
                    }
                    return;
                }
                _ => {}
            }
        }
        let fatal = is_error
            && ((subscription && self.config.crash_on_error_response)
                || kind == RequestKind::Authentication);
        if fatal {
            // Kept by the stream's state and the application: its own copy, not the block's.
            let response = Bytes::copy_from_slice(&payload);
            return self.finish(
                StreamState::Crashed(EndReason::FatalResponse(response)),
                now,
            );
        }
        if let (RequestKind::Subscribe(refused), true) = (&kind, is_error) {
            // A refused subscription is not active: do not resubscribe it after a reconnect.
            for s in refused {
                self.streams.remove(s);
            }
            self.stats.set_subscriptions(self.streams.len());
        }
        let event = match (kind, is_error) {
            (RequestKind::Authentication, false) => {
                self.logged_in = true;
                self.events.push_back(StreamEvent::Authenticated);
                let before = self.stats.messages_sent();
                for feed in [Feed::Markets, Feed::Orders] {
                    if let Err(error) = self.send_betfair_subscription(feed, now) {
                        let host = &self.endpoint.host;
                        tracing::warn!(%host, %error, ?feed, "subscription not sent");
                    }
                }
                let count = (self.stats.messages_sent() - before) as usize;
                if self.session_is_reconnect && count > 0 {
                    self.events.push_back(StreamEvent::Resubscribed { count });
                }
                if count > 0 {
                    self.arm_first_data(now);
                }
                return;
            }
            (RequestKind::Heartbeat, _) => return,
            (RequestKind::Subscribe(streams), false) => StreamEvent::Subscribed { streams, id },
            (RequestKind::Unsubscribe(streams), false) => StreamEvent::Unsubscribed { streams, id },
            (RequestKind::MarketSubscription, false) => StreamEvent::Subscribed {
                streams: vec!["marketSubscription".to_owned()],
                id,
            },
            (RequestKind::OrderSubscription, false) => StreamEvent::Subscribed {
                streams: vec!["orderSubscription".to_owned()],
                id,
            },
            (kind, is_error) => StreamEvent::Response {
                id,
                kind: Box::new(kind),
                payload,
                is_error,
            },
        };
        self.events.push_back(event);
    }

    pub(super) fn on_closed(&mut self, by: CloseInitiator, code: u16, reason: Bytes, now: Instant) {
        // An end's reason is what applications keep (the last one of each stream, for a
        // dashboard): a slice of the read block would keep the whole block (up to twice
        // `max_read_size`) alive with it. At most 123 bytes, copied once a connection.
        let reason = Bytes::copy_from_slice(&reason);
        match by {
            CloseInitiator::Remote => {
                self.end_connection(EndReason::ClosedByPeer { code, reason }, now)
            }
            CloseInitiator::Local => {
                let reason = self
                    .planned
                    .clone()
                    .unwrap_or(EndReason::ClosedByPeer { code, reason });
                self.end_connection(reason, now);
            }
        }
    }
}

/// The fast path's judgement of a message on a stream that already had data: `Some(heartbeat)`
/// for plain data (its Betfair positions recorded), `None` for anything the general path must
/// route (a response, a shutdown notice). `kind` is a constant where an engine offers (see
/// [`Offered`]): a line is judged by the stream's learned head shapes inline (every Betfair
/// line takes that road); a WebSocket text message whose first key settles nothing (rare on
/// Binance) calls it out of line, so the decoder's loop does not carry it.
#[inline(always)]
pub(super) fn plain_data(
    classifier: &Classifier,
    shapes: &mut HeadShapes,
    positions: &mut impl Positions,
    payload: &[u8],
    kind: Offered,
) -> Option<bool> {
    if kind == Offered::Binary {
        return Some(false);
    }
    if kind == Offered::Line && classifier.by_shape_alone() {
        return plain_by_shape::<false>(classifier, shapes, positions, payload);
    }
    if let Some(flags) = classifier.plain_by_first_key(payload) {
        return (!flags.shutdown).then_some(flags.heartbeat);
    }
    if kind == Offered::Line {
        plain_by_shape::<true>(classifier, shapes, positions, payload)
    } else {
        out_of_line(|| plain_by_shape::<true>(classifier, shapes, positions, payload))
    }
}

/// Calls `f` in a function of its own: code its caller's loop need not carry.
#[inline(never)]
fn out_of_line<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// [`plain_data`] for a message its first key did not settle: by the stream's learned head
/// shapes. A fitted shape's verdict is acted on as its plan says ([`LinePlan`]), worked out
/// the first time the shape fits. `PREFILTER`: the rules may have a prefilter (else
/// [`Classifier::by_shape_alone`]).
#[inline(always)]
fn plain_by_shape<const PREFILTER: bool>(
    classifier: &Classifier,
    shapes: &mut HeadShapes,
    positions: &mut impl Positions,
    payload: &[u8],
) -> Option<bool> {
    let mut learned = None;
    let by_shape = if PREFILTER {
        classifier.verdict_by_shape_in(payload, shapes, &mut learned)
    } else {
        classifier.verdict_by_shape_alone(payload, shapes, &mut learned)
    };
    let verdict = match by_shape {
        ByShape::Fitted(Fitted { slot, memo }) => {
            let plan = match memo {
                Some(word) => LinePlan::from_word(word),
                None => first_plan(shapes.fitted_with_memo(slot), payload),
            };
            if !plan.is_general() {
                return Some(plan.apply(positions, payload));
            }
            shapes.fitted_with_memo(slot).verdict
        }
        ByShape::Other(verdict) => verdict,
    };
    match verdict {
        Verdict::Data {
            heartbeat,
            shutdown: false,
            extracted,
        } => {
            if let [Some(op), initial, clk] = extracted {
                let at = |range: &Option<Range<usize>>| range.clone().map(|r| (payload, r));
                if let Some(feed) = payload.get(op.clone()).and_then(Feed::of_op) {
                    positions.update(feed, payload, at(initial), at(clk));
                }
            }
            Some(*heartbeat)
        }
        _ => None,
    }
}

/// The plan of a shape that fitted for the first time since its verdict changed, kept in its
/// memo. Out of line: once per shape.
#[inline(never)]
fn first_plan(fit: ShapeFit<'_>, payload: &[u8]) -> LinePlan {
    let plan = LinePlan::of(&fit, payload);
    *fit.memo = Some(plan.word());
    plan
}

/// Records the stream positions a Betfair change `message` carries (`extracted` holds its
/// `op`, `initialClk` and `clk`); nothing for other messages.
fn update_clocks(clocks: &mut [Clocks; 2], message: &[u8], extracted: &[Option<Bytes>; 3]) {
    let [Some(op), initial, clk] = extracted else {
        return;
    };
    if let Some(feed) = Feed::of_op(op) {
        clocks[feed as usize].update(message, whole(initial), whole(clk));
    }
}

/// All of `value`, as the source and range [`Clocks::update`] takes.
fn whole(value: &Option<Bytes>) -> Option<(&[u8], Range<usize>)> {
    value.as_deref().map(|b| (b, 0..b.len()))
}
