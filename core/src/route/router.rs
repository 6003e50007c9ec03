//! [`Router`]: classification plus request/response correlation, shared by both framings.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::classify::{Class, Classifier, Extracted, ResponseId};
use super::pending::{PendingRequests, RequestHandle, RequestId};
use super::rules::{RouteRules, MAX_EXTRACT_KEYS};
use crate::deadline::after;
use crate::error::{ConfigError, CorrelationError};
use crate::rng::{MaskRng, Seed};

/// How request ids are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdStyle {
    /// Increasing integers from 1; after `wrap_after` they start at 1 again, skipping ids
    /// still pending.
    Counter {
        /// Largest id before wrapping (e.g. `i32::MAX` for servers with 32-bit ids).
        wrap_after: u64,
    },
    /// Random (version 4) UUIDs from the injected random source.
    Uuid,
}

/// Routing and correlation settings, with presets per protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    /// How messages are classified.
    pub rules: RouteRules,
    /// How request ids are made.
    pub id_style: IdStyle,
    /// How long a request waits for its response (default 10 s).
    pub request_timeout: Duration,
    /// Most requests pending at once (default 1024); more is [`CorrelationError::Full`].
    pub max_pending: usize,
}

impl RouterConfig {
    /// Checks the limits (called by [`Stream::new`](crate::Stream::new)): a `scan_len` of 0
    /// would recognise no response, a `max_pending` of 0 would refuse every request, and
    /// values of extract keys past [`MAX_EXTRACT_KEYS`] would never be reported.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.rules.extract_keys.len() > MAX_EXTRACT_KEYS {
            return Err(ConfigError::TooMany {
                name: "extract_keys",
                max: MAX_EXTRACT_KEYS,
            });
        }
        if self.rules.scan_len == 0 {
            return Err(ConfigError::ZeroLimit("scan_len"));
        }
        if self.max_pending == 0 {
            return Err(ConfigError::ZeroLimit("max_pending"));
        }
        Ok(())
    }

    fn with(rules: RouteRules, id_style: IdStyle) -> Self {
        Self {
            rules,
            id_style,
            request_timeout: Duration::from_secs(10),
            max_pending: 1024,
        }
    }

    /// Binance stream endpoint: integer ids.
    pub fn binance_stream() -> Self {
        Self::with(
            RouteRules::binance_stream(),
            IdStyle::Counter {
                wrap_after: u64::MAX,
            },
        )
    }

    /// Binance WebSocket API: UUID ids.
    pub fn binance_ws_api() -> Self {
        Self::with(RouteRules::binance_ws_api(), IdStyle::Uuid)
    }

    /// Betfair Exchange Stream API: integer ids (32-bit on the wire).
    pub fn betfair() -> Self {
        Self::with(
            RouteRules::betfair(),
            IdStyle::Counter {
                wrap_after: i32::MAX as u64,
            },
        )
    }
}

/// Where a message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Routed<T> {
    /// A data message.
    Data {
        /// The message, untouched.
        payload: Bytes,
        /// It matched a heartbeat rule.
        heartbeat: bool,
        /// It matched a shutdown-notice rule.
        shutdown: bool,
        /// Stream-extracted tokens found in its head (see [`RouteRules::extract_keys`]).
        extracted: Extracted,
    },
    /// The response to a pending request of ours.
    Answer {
        /// The response, untouched.
        payload: Bytes,
        /// The id the request was sent with.
        id: RequestId,
        /// The tag given at [`Router::register`].
        tag: T,
        /// The request's handle.
        handle: RequestHandle,
        /// It matched an error rule.
        is_error: bool,
    },
    /// A response that matches no pending request (late, foreign, or without an id).
    Unsolicited {
        /// The response, untouched.
        payload: Bytes,
        /// Its id, if it had one.
        id: Option<ResponseId>,
        /// It matched an error rule.
        is_error: bool,
    },
}

/// A request whose deadline passed without a response; reported exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut<T> {
    /// The request's handle.
    pub handle: RequestHandle,
    /// The id it was sent with.
    pub id: RequestId,
    /// The tag given at [`Router::register`].
    pub tag: T,
}

/// Classifies messages and matches responses to requests. Sans-IO: time is an argument.
#[derive(Debug)]
pub struct Router<T> {
    /// The configuration's own settings; its rules live on only compiled, in `classifier`
    /// (every stream holds a router, and a copy of the rules is most of a kilobyte).
    ids: IdSource,
    request_timeout: Duration,
    max_pending: usize,
    classifier: Classifier,
    pending: PendingRequests<T>,
    timed_out: VecDeque<TimedOut<T>>,
}

/// Where a router's ids come from ([`IdStyle`] with its state).
#[derive(Debug)]
enum IdSource {
    Counter {
        wrap_after: u64,
        /// The last id handed out.
        last: u64,
    },
    /// Boxed: 320 bytes of generator that the integer ids of most streams never use.
    Uuid(Box<MaskRng>),
}

impl<T> Router<T> {
    /// A router; `seed` feeds UUID ids.
    pub fn new(config: RouterConfig, seed: Seed) -> Self {
        Self {
            ids: match config.id_style {
                IdStyle::Counter { wrap_after } => IdSource::Counter {
                    wrap_after,
                    last: 0,
                },
                IdStyle::Uuid => IdSource::Uuid(Box::new(MaskRng::from_seed(seed))),
            },
            request_timeout: config.request_timeout,
            max_pending: config.max_pending,
            classifier: Classifier::shared(config.rules),
            pending: PendingRequests::new(config.max_pending),
            timed_out: VecDeque::new(),
        }
    }

    /// Requests pending now.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Makes a fresh id and registers a request with it, due by `now + request_timeout`.
    /// Put the returned id into the request you send.
    pub fn register(
        &mut self,
        tag: T,
        now: Instant,
    ) -> Result<(RequestId, RequestHandle), CorrelationError> {
        if self.pending.len() >= self.max_pending {
            return Err(CorrelationError::Full {
                capacity: self.max_pending,
            });
        }
        let id = self.next_id()?;
        let handle = self
            .pending
            .insert(id.clone(), tag, after(now, self.request_timeout))?;
        Ok((id, handle))
    }

    /// Forgets a pending request; `None` if it already ended.
    pub fn cancel(&mut self, handle: RequestHandle) -> Option<T> {
        self.pending.cancel(handle)
    }

    /// The compiled classification rules (for a fast path that routes data itself).
    pub fn classifier(&self) -> &Classifier {
        &self.classifier
    }

    /// Routes a text message (or line) by its head.
    pub fn route(&mut self, payload: Bytes) -> Routed<T> {
        match self.classifier.classify(&payload) {
            Class::Data {
                heartbeat,
                shutdown,
                extracted,
            } => Routed::Data {
                payload,
                heartbeat,
                shutdown,
                extracted,
            },
            Class::Response { id, is_error } => {
                let matched = match &id {
                    Some(ResponseId::Int(n)) => self
                        .pending
                        .take_int(*n)
                        .map(|(h, t)| (RequestId::Int(*n), h, t)),
                    Some(ResponseId::Str(s)) => std::str::from_utf8(s).ok().and_then(|s| {
                        self.pending
                            .take_str(s)
                            .map(|(h, t)| (RequestId::Str(s.into()), h, t))
                    }),
                    Some(ResponseId::Other(_)) | None => None,
                };
                match matched {
                    Some((id, handle, tag)) => Routed::Answer {
                        payload,
                        id,
                        tag,
                        handle,
                        is_error,
                    },
                    None => Routed::Unsolicited {
                        payload,
                        id,
                        is_error,
                    },
                }
            }
        }
    }

    /// Routes a binary message: always data (no endpoint answers in binary).
    pub fn route_binary(&mut self, payload: Bytes) -> Routed<T> {
        Routed::Data {
            payload,
            heartbeat: false,
            shutdown: false,
            extracted: Extracted::default(),
        }
    }

    /// The earliest request deadline.
    #[must_use]
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.pending.next_deadline()
    }

    /// Ends every request whose deadline passed by `now`; collect them with
    /// [`poll_timed_out`](Self::poll_timed_out).
    pub fn handle_timeout(&mut self, now: Instant) {
        let out = &mut self.timed_out;
        self.pending.expire(now, |handle, id, tag| {
            out.push_back(TimedOut { handle, id, tag })
        });
    }

    /// Ends every pending request, oldest first, calling `on_lost` with each: for when the
    /// connection they were sent on ended (an answer can only come on that connection).
    pub fn abandon_pending(&mut self, mut on_lost: impl FnMut(RequestId, T)) {
        self.pending.abandon(|_, id, tag| on_lost(id, tag));
    }

    /// The next request that timed out.
    #[must_use]
    pub fn poll_timed_out(&mut self) -> Option<TimedOut<T>> {
        self.timed_out.pop_front()
    }

    fn next_id(&mut self) -> Result<RequestId, CorrelationError> {
        match &mut self.ids {
            IdSource::Counter { wrap_after, last } => {
                let wrap_after = (*wrap_after).max(1);
                // At most `pending + 1` candidates can be needed; fewer ids than that in the
                // range means every id is taken.
                for _ in 0..=self.pending.len() {
                    *last = if *last >= wrap_after { 1 } else { *last + 1 };
                    let id = RequestId::Int(*last);
                    if !self.pending.contains(&id) {
                        return Ok(id);
                    }
                }
                Err(CorrelationError::IdsExhausted)
            }
            IdSource::Uuid(rng) => {
                let mut bytes = [0u8; 16];
                rng.fill(&mut bytes);
                let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
                let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
                Ok(RequestId::Str(
                    uuid.hyphenated().encode_lower(&mut text).into(),
                ))
            }
        }
    }
}
