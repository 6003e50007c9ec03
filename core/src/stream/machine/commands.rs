//! The application's commands: stop and crash, subscriptions, requests, sends; control
//! messages paced by `control_rate`.

use std::time::{Duration, Instant};

use super::{Feed, Outgoing, Stream, STREAMS_PER_REQUEST};
use crate::error::StreamError;
use crate::route::RequestId;
use crate::stream::clocks::Clocks;
use crate::stream::config::{BetfairAuth, Profile};
use crate::stream::connection::Connection;
use crate::stream::event::{EndReason, RequestKind, StreamState};
use crate::stream::profile::{self, BetfairSubscription, Template};
use crate::stream::timers::Timer;
use crate::ws::CloseInitiator;

impl Stream {
    /// Graceful stop: WebSocket Close (then wait for the peer up to the close timeout), or
    /// the end of a line session. Ends as `Closed { by: Local }`; no reconnect follows.
    /// Takes effect at once: events already queued stay queued, a message partly received
    /// at this call is delivered when it completes, and nothing else is (data, answers and
    /// notices alike: the peer's bytes up to its Close are read and dropped).
    pub fn stop(&mut self, now: Instant) {
        if self.state.is_terminal() || self.stop_requested {
            return;
        }
        self.stop_requested = true;
        self.partial_at_stop = self
            .conn
            .as_ref()
            .is_some_and(Connection::is_receiving_a_message);
        // Closes the reads' fast paths: every later message reaches `on_message`, which
        // drops it.
        self.got_data = false;
        tracing::info!(host = %self.endpoint.host, "stream stop requested");
        self.timers.clear();
        self.outbox.clear();
        let closing = matches!(self.state, StreamState::Open)
            && self.conn.as_mut().is_some_and(|c| c.close(now));
        if closing {
            self.state = StreamState::Closing;
        } else {
            self.finish(
                StreamState::Closed {
                    by: CloseInitiator::Local,
                },
                now,
            );
        }
        self.publish(now);
    }

    /// Immediate end: no close handshake, the transport drops the connection now. Ends as
    /// `Crashed(UserCrash(reason))`; no reconnect follows.
    pub fn crash(&mut self, reason: &str, now: Instant) {
        if self.state.is_terminal() {
            return;
        }
        tracing::warn!(host = %self.endpoint.host, reason, "stream crash requested");
        self.finish(
            StreamState::Crashed(EndReason::UserCrash(reason.to_owned())),
            now,
        );
        self.publish(now);
    }

    /// Subscribes to Binance streams (e.g. `btcusdt@aggTrade`). Sent now if open (paced),
    /// otherwise on the next connection.
    pub fn subscribe(&mut self, streams: &[&str], now: Instant) -> Result<(), StreamError> {
        self.check_profile(matches!(self.config.profile, Profile::BinanceStream))?;
        if let Some(bad) = streams.iter().find(|s| !profile::is_plain_json_string(s)) {
            return Err(StreamError::InvalidStreamName((*bad).to_owned()));
        }
        let mut new: Vec<String> = Vec::new();
        for s in streams {
            // A name given twice in one call is one stream (and once in the request).
            if !self.streams.contains(*s) && !new.iter().any(|n| n == s) {
                new.push((*s).to_owned());
            }
        }
        if self.streams.len() + new.len() > self.config.max_streams {
            return Err(StreamError::TooManyStreams {
                max: self.config.max_streams,
            });
        }
        if new.is_empty() {
            return Ok(());
        }
        self.streams.extend(new.iter().cloned());
        self.stats.set_subscriptions(self.streams.len());
        // New streams deserve their own wait for data.
        self.first_data_spent = false;
        if matches!(self.state, StreamState::Open) {
            self.arm_first_data(now);
            for chunk in new.chunks(STREAMS_PER_REQUEST) {
                let template = profile::binance_method("SUBSCRIBE", chunk);
                self.queue_control(RequestKind::Subscribe(chunk.to_vec()), template, now);
            }
        }
        self.publish(now);
        Ok(())
    }

    /// Unsubscribes Binance streams (those the URL names too); a stream not subscribed is an
    /// error and nothing is sent.
    pub fn unsubscribe(&mut self, streams: &[&str], now: Instant) -> Result<(), StreamError> {
        self.check_profile(matches!(self.config.profile, Profile::BinanceStream))?;
        if let Some(missing) = streams.iter().find(|s| !self.streams.contains(**s)) {
            return Err(StreamError::NotSubscribed((*missing).to_owned()));
        }
        // A name given twice in one call goes once.
        let gone: Vec<String> = streams
            .iter()
            .filter(|s| self.streams.remove(**s))
            .map(|s| (*s).to_owned())
            .collect();
        self.stats.set_subscriptions(self.streams.len());
        if matches!(self.state, StreamState::Open) {
            for chunk in gone.chunks(STREAMS_PER_REQUEST) {
                let template = profile::binance_method("UNSUBSCRIBE", chunk);
                self.queue_control(RequestKind::Unsubscribe(chunk.to_vec()), template, now);
            }
        }
        self.publish(now);
        Ok(())
    }

    /// Asks a Binance stream endpoint for its subscriptions; the answer arrives as
    /// [`StreamEvent::Response`](crate::StreamEvent::Response).
    pub fn list_subscriptions(&mut self, now: Instant) -> Result<(), StreamError> {
        self.check_profile(matches!(self.config.profile, Profile::BinanceStream))?;
        self.check_open()?;
        self.queue_control(
            RequestKind::ListSubscriptions,
            profile::binance_method("LIST_SUBSCRIPTIONS", &[]),
            now,
        );
        Ok(())
    }

    /// Sends a Binance WebSocket API request; `params_json` is a JSON value (or none). The
    /// answer arrives as [`StreamEvent::Response`](crate::StreamEvent::Response) with the returned id.
    pub fn request(
        &mut self,
        method: &str,
        params_json: Option<&str>,
        now: Instant,
    ) -> Result<RequestId, StreamError> {
        self.check_profile(matches!(self.config.profile, Profile::BinanceWsApi))?;
        self.check_open()?;
        if !profile::is_plain_json_string(method) {
            return Err(StreamError::InvalidStreamName(method.to_owned()));
        }
        let template = profile::binance_api_request(method, params_json);
        self.send_request(RequestKind::Request(method.to_owned()), &template, now)
    }

    /// Replaces the Betfair credentials for the logins to come: the next one (a reconnect's,
    /// or the current connection's if it has not sent its own yet) uses them; a connection
    /// logged in already stays as it is. For a session token renewed by a new login: the
    /// stream keeps its subscriptions and positions, and a reconnect resumes them instead of
    /// failing its login with the old token (fatal: the stream would crash, and a new stream
    /// start from full images).
    pub fn set_betfair_auth(&mut self, auth: BetfairAuth) -> Result<(), StreamError> {
        self.check_profile(matches!(self.config.profile, Profile::Betfair(_)))?;
        if !profile::is_usable_auth(&auth) {
            return Err(StreamError::InvalidCredential);
        }
        tracing::info!(host = %self.endpoint.host, "Betfair credentials replaced");
        self.config.profile = Profile::Betfair(auth);
        Ok(())
    }

    /// Sets the Betfair market subscription (replacing any previous one); sent now if
    /// authenticated, and again on every reconnect, resuming from the latest `clk` (of its
    /// own image, and of a segmented image only once its last segment came; else it asks
    /// for a new image).
    pub fn subscribe_markets(
        &mut self,
        sub: BetfairSubscription,
        now: Instant,
    ) -> Result<(), StreamError> {
        self.set_betfair_subscription(Feed::Markets, sub, now)
    }

    /// Sets the Betfair order subscription; see [`subscribe_markets`](Self::subscribe_markets).
    pub fn subscribe_orders(
        &mut self,
        sub: BetfairSubscription,
        now: Instant,
    ) -> Result<(), StreamError> {
        self.set_betfair_subscription(Feed::Orders, sub, now)
    }

    /// Sends an application text message (or line) as is; refused while
    /// [`max_send_queue`](crate::StreamConfig::max_send_queue) bytes wait.
    pub fn send_text(&mut self, text: &str) -> Result<(), StreamError> {
        let conn = self.app_send_room()?;
        conn.send_text(text)?;
        self.stats.sent(text.len());
        Ok(())
    }

    /// Sends an application binary message (WebSocket streams only); refused while
    /// [`max_send_queue`](crate::StreamConfig::max_send_queue) bytes wait.
    pub fn send_binary(&mut self, data: &[u8]) -> Result<(), StreamError> {
        let conn = self.app_send_room()?;
        match conn.send_binary(data) {
            None => Err(StreamError::NotSupported),
            Some(false) => Err(StreamError::NotOpen),
            Some(true) => {
                self.stats.sent(data.len());
                Ok(())
            }
        }
    }

    /// The open connection, if an application message may be queued on it now.
    fn app_send_room(&mut self) -> Result<&mut Connection, StreamError> {
        self.check_open()?;
        let max = self.config.max_send_queue;
        let conn = self.conn.as_mut().ok_or(StreamError::NotOpen)?;
        match conn.queued_bytes() {
            queued if queued >= max => Err(StreamError::SendQueueFull { queued, max }),
            _ => Ok(conn),
        }
    }

    /// Queues a control message subject to pacing, or sends it now. A SUBSCRIBE (or
    /// UNSUBSCRIBE) that would queue behind one of its kind still waiting for the pacing
    /// budget joins it instead, up to a request's worth of streams: an application that
    /// subscribes streams one call at a time (a loop over its symbols) has them all out in
    /// a second, not at four streams a second (100 streams took 24 s). As for streams given
    /// in one call, an answer — a refusal too — then covers every stream of the request.
    pub(super) fn queue_control(&mut self, kind: RequestKind, template: Template, now: Instant) {
        let kind = match self.outbox.back_mut() {
            Some(waiting) => match join_waiting(waiting, kind) {
                Ok(()) => return,
                Err(kind) => kind,
            },
            None => kind,
        };
        self.outbox.push_back(Outgoing { kind, template });
        self.flush_outbox(now);
    }

    pub(super) fn flush_outbox(&mut self, now: Instant) {
        while !self.outbox.is_empty() {
            if let Some(rate) = self.config.control_rate {
                while self
                    .paced
                    .front()
                    .is_some_and(|t| now.saturating_duration_since(*t).as_secs_f64() >= 1.0)
                {
                    self.paced.pop_front();
                }
                if self.paced.len() >= rate.max(1) as usize {
                    let oldest = *self.paced.front().expect("non-empty: len >= rate >= 1");
                    self.timers
                        .set(Timer::Pace, oldest + Duration::from_secs(1));
                    return;
                }
                self.paced.push_back(now);
            }
            let out = self.outbox.pop_front().expect("checked non-empty");
            if let Err(e) = self.send_request(out.kind, &out.template, now) {
                tracing::warn!(error = %e, "control message dropped");
            }
        }
    }

    pub(super) fn send_request(
        &mut self,
        kind: RequestKind,
        template: &Template,
        now: Instant,
    ) -> Result<RequestId, StreamError> {
        let conn = self.conn.as_mut().ok_or(StreamError::NotOpen)?;
        let (id, handle) = self
            .router
            .register(kind, now)
            .map_err(StreamError::Correlation)?;
        let text = template.render(&id);
        if let Err(e) = conn.send_text(&text) {
            self.router.cancel(handle);
            return Err(e);
        }
        self.stats.sent(text.len());
        Ok(id)
    }

    pub(super) fn set_betfair_subscription(
        &mut self,
        feed: Feed,
        sub: BetfairSubscription,
        now: Instant,
    ) -> Result<(), StreamError> {
        self.check_profile(matches!(self.config.profile, Profile::Betfair(_)))?;
        let feeds = self.betfair.get_or_insert_with(Box::default);
        feeds.clocks[feed as usize] = Clocks::default();
        feeds.subs[feed as usize] = Some(sub.on_one_line());
        self.stats.set_subscriptions(self.betfair_subscriptions());
        self.first_data_spent = false;
        let sent = if matches!(self.state, StreamState::Open) && self.logged_in {
            self.arm_first_data(now);
            self.send_betfair_subscription(feed, now)
        } else {
            Ok(())
        };
        // The count is read from other threads (a dashboard): now, not at the next read.
        self.publish(now);
        sent
    }

    pub(super) fn send_betfair_subscription(
        &mut self,
        feed: Feed,
        now: Instant,
    ) -> Result<(), StreamError> {
        let Some(feeds) = self.betfair.as_deref() else {
            return Ok(());
        };
        if let Some(sub) = &feeds.subs[feed as usize] {
            let (op, filter, kind) = match feed {
                Feed::Markets => (
                    "marketSubscription",
                    "marketFilter",
                    RequestKind::MarketSubscription,
                ),
                Feed::Orders => (
                    "orderSubscription",
                    "orderFilter",
                    RequestKind::OrderSubscription,
                ),
            };
            let t = profile::betfair_subscription(op, filter, sub, &feeds.clocks[feed as usize]);
            if let RequestId::Int(id) = self.send_request(kind, &t, now)? {
                if let Some(clocks) = self.clocks_mut(feed) {
                    clocks.sent(id);
                }
            }
        }
        Ok(())
    }
}

/// Adds the streams of `kind` to the `waiting` request of the same method, if the two fit in
/// one request; else hands `kind` back.
fn join_waiting(waiting: &mut Outgoing, kind: RequestKind) -> Result<(), RequestKind> {
    let fits = |streams: &Vec<String>, more: &Vec<String>| {
        streams.len() + more.len() <= STREAMS_PER_REQUEST
    };
    let (method, streams, more) = match (&mut waiting.kind, kind) {
        (RequestKind::Subscribe(streams), RequestKind::Subscribe(more)) if fits(streams, &more) => {
            ("SUBSCRIBE", streams, more)
        }
        (RequestKind::Unsubscribe(streams), RequestKind::Unsubscribe(more))
            if fits(streams, &more) =>
        {
            ("UNSUBSCRIBE", streams, more)
        }
        (_, kind) => return Err(kind),
    };
    streams.extend(more);
    waiting.template = profile::binance_method(method, streams);
    Ok(())
}
