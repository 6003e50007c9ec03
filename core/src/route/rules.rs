//! Classification rules as data: which top-level keys and values in a message's head make it
//! an endpoint response, an error, or a heartbeat. Built-in presets cover Binance streams,
//! the Binance WebSocket API and the Betfair Exchange Stream API.

/// A test on one top-level key of the head.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Condition {
    /// The key is present (its value may run past the head).
    HasKey(String),
    /// The key's value is exactly this JSON token (`"\"status\""`, `"200"`, `"null"`).
    Equals {
        /// Top-level key.
        key: String,
        /// Raw JSON token, strings with their quotes.
        token: String,
    },
    /// The key is present with a complete value other than this JSON token.
    NotEquals {
        /// Top-level key.
        key: String,
        /// Raw JSON token, strings with their quotes.
        token: String,
    },
    /// The key's value is an object, complete within the head, whose own key `inner` has
    /// exactly this JSON token: the Binance WebSocket API's notices are wrapped,
    /// `{"event":{"e":"serverShutdown","E":…}}`.
    InnerEquals {
        /// Top-level key.
        key: String,
        /// A key of the object that is its value.
        inner: String,
        /// Raw JSON token, strings with their quotes.
        token: String,
    },
}

impl Condition {
    /// `HasKey`.
    pub fn has_key(key: &str) -> Self {
        Self::HasKey(key.to_owned())
    }

    /// `Equals` with a JSON string value.
    pub fn equals_str(key: &str, value: &str) -> Self {
        Self::Equals {
            key: key.to_owned(),
            token: format!("\"{value}\""),
        }
    }

    /// `NotEquals` with a raw JSON token.
    pub fn not_equals(key: &str, token: &str) -> Self {
        Self::NotEquals {
            key: key.to_owned(),
            token: token.to_owned(),
        }
    }

    /// `InnerEquals` with a JSON string value.
    pub fn inner_equals_str(key: &str, inner: &str, value: &str) -> Self {
        Self::InnerEquals {
            key: key.to_owned(),
            inner: inner.to_owned(),
            token: format!("\"{value}\""),
        }
    }

    pub(crate) fn key(&self) -> &str {
        match self {
            Self::HasKey(k)
            | Self::Equals { key: k, .. }
            | Self::NotEquals { key: k, .. }
            | Self::InnerEquals { key: k, .. } => k,
        }
    }
}

/// Most [`RouteRules::extract_keys`] a classifier reports: their values travel with every
/// data message in a fixed array ([`Extracted`](crate::route::Extracted)), no allocation.
pub const MAX_EXTRACT_KEYS: usize = 3;

/// How messages are told apart. A message is a **response** if any `response` condition
/// holds on its head, else **data**. Only top-level keys whose bytes end inside the first
/// `scan_len` bytes count; for duplicated keys the first occurrence counts. One exception,
/// off the data path: a response whose head holds no complete `id_key` value is walked to
/// its end for it, so that an answer listing many streams before its id still meets its
/// request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteRules {
    /// Bytes of each message examined (default 256). Classification cost depends on this,
    /// never on the message size.
    pub scan_len: usize,
    /// Any of these → response.
    pub response: Vec<Condition>,
    /// For a response: any of these → it reports an error.
    pub error: Vec<Condition>,
    /// For data: any of these → a heartbeat (e.g. Betfair `"ct":"HEARTBEAT"`).
    pub heartbeat: Vec<Condition>,
    /// For data: any of these → the server announces it will shut the connection down
    /// (Binance `serverShutdown`), so the stream should reconnect before it does.
    pub shutdown: Vec<Condition>,
    /// The key carrying a response's request id (looked for past the head when the head
    /// holds none).
    pub id_key: String,
    /// Keys whose string values are reported for data messages (at most
    /// [`MAX_EXTRACT_KEYS`]; more is [`ConfigError::TooMany`](crate::ConfigError::TooMany)),
    /// e.g. the Betfair message type and stream position (`op`, `initialClk`, `clk`) so
    /// that a resubscription resumes without a gap.
    pub extract_keys: Vec<String>,
    /// A message whose **first** top-level key is one of these is data (no response starts
    /// with them): only the conditions on that first key are evaluated and the rest of the
    /// head is not looked at. Binance data starts with `stream` (combined streams) or `e`,
    /// responses with `result`/`error`/`id`, so most messages are classified from their
    /// first few bytes.
    pub data_first_keys: Vec<String>,
    /// Stop the scan at the first object or array value: keys after it are not seen. For
    /// protocols that put every key the rules use before their one bulky value (Betfair
    /// puts `op`, `clk`, `ct`, `statusCode` before `mc`/`oc`), this keeps the cost of a
    /// message independent of its nested content.
    pub stop_at_composite: bool,
}

impl RouteRules {
    /// Binance stream endpoint: `{"result":null,"id":1}`,
    /// `{"error":{"code":2,"msg":"…"},"id":1}`; data is `{"stream":…,"data":…}` or `{"e":…}`.
    pub fn binance_stream() -> Self {
        Self {
            scan_len: 256,
            response: vec![Condition::has_key("result"), Condition::has_key("error")],
            error: vec![Condition::has_key("error")],
            heartbeat: Vec::new(),
            shutdown: vec![
                Condition::equals_str("e", "serverShutdown"),
                Condition::equals_str("stream", "!serverShutdown"),
            ],
            id_key: "id".to_owned(),
            extract_keys: Vec::new(),
            data_first_keys: vec!["stream".to_owned(), "e".to_owned()],
            stop_at_composite: false,
        }
    }

    /// Binance WebSocket API: `{"id":"<uuid>","status":200,"result":…}` and
    /// `{"id":"…","status":400,"error":{…}}`; the shutdown notice is an event,
    /// `{"event":{"e":"serverShutdown",…}}`.
    pub fn binance_ws_api() -> Self {
        Self {
            scan_len: 256,
            response: vec![
                Condition::has_key("status"),
                Condition::has_key("result"),
                Condition::has_key("error"),
            ],
            error: vec![
                Condition::has_key("error"),
                Condition::not_equals("status", "200"),
            ],
            heartbeat: Vec::new(),
            shutdown: vec![
                Condition::inner_equals_str("event", "e", "serverShutdown"),
                Condition::equals_str("e", "serverShutdown"),
            ],
            id_key: "id".to_owned(),
            extract_keys: Vec::new(),
            data_first_keys: Vec::new(),
            stop_at_composite: false,
        }
    }

    /// Betfair Exchange Stream API: `{"op":"connection",…}` and
    /// `{"op":"status","id":1,"statusCode":"SUCCESS"|"FAILURE",…}` are responses; `mcm` and
    /// `ocm` are data, heartbeats being `mcm` with `"ct":"HEARTBEAT"`.
    pub fn betfair() -> Self {
        Self {
            scan_len: 256,
            response: vec![
                Condition::equals_str("op", "connection"),
                Condition::equals_str("op", "status"),
            ],
            error: vec![Condition::equals_str("statusCode", "FAILURE")],
            heartbeat: vec![Condition::equals_str("ct", "HEARTBEAT")],
            shutdown: Vec::new(),
            id_key: "id".to_owned(),
            extract_keys: vec!["op".to_owned(), "initialClk".to_owned(), "clk".to_owned()],
            data_first_keys: Vec::new(),
            stop_at_composite: true,
        }
    }
}
