//! Head-scan classification of one message: response or data, the response's id and whether
//! it is an error. Looks at no more than `scan_len` bytes.

use bytes::Bytes;

use super::head_scan::{TopLevelPairs, Value};
use super::rules::{Condition, RouteRules};

/// A response's id as found in its head.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ResponseId {
    /// A non-negative integer that fits `u64`.
    Int(u64),
    /// A string (content between the quotes, escapes as sent), zero-copy.
    Str(Bytes),
    /// Anything else — a negative, fractional or out-of-range number, `null`, … — as the raw
    /// token. It never matches a request of ours.
    Other(Bytes),
}

/// What a message is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// A data message.
    Data {
        /// It matched a heartbeat condition.
        heartbeat: bool,
        /// It matched a shutdown-notice condition.
        shutdown: bool,
        /// String values of [`RouteRules::extract_keys`] found in the head, in the order of
        /// the keys (zero-copy).
        extracted: Extracted,
    },
    /// An endpoint response.
    Response {
        /// Its id, if the head held a complete one.
        id: Option<ResponseId>,
        /// It matched an error condition.
        is_error: bool,
    },
}

/// String values of [`RouteRules::extract_keys`] from a data message's head, in key order
/// (at most three keys).
pub type Extracted = [Option<Bytes>; 3];

/// Classifies `payload` by its first `rules.scan_len` bytes. Compiles the rules on every
/// call; hot paths keep a [`Classifier`].
pub fn classify(payload: &Bytes, rules: &RouteRules) -> Class {
    Classifier::new(rules.clone()).classify(payload)
}

/// Rules compiled for speed: before any structural scan, the head is searched (SIMD
/// substring search) for the substrings without which no rule can hold — `"result"`,
/// `"error"`, `"serverShutdown"` for Binance streams. A head holding none of them is plain
/// data, which is the common case, so most messages cost a few substring searches over at
/// most `scan_len` bytes instead of a byte-by-byte walk through nested values. Rules that
/// extract fields from every message (Betfair) always scan.
#[derive(Debug, Clone)]
pub struct Classifier {
    rules: RouteRules,
    needles: Vec<memchr::memmem::Finder<'static>>,
}

impl Classifier {
    /// Compiles `rules`.
    pub fn new(rules: RouteRules) -> Self {
        let quoted = |k: &str| format!("\"{k}\"");
        let mut needles: Vec<String> = Vec::new();
        for c in rules
            .response
            .iter()
            .chain(&rules.heartbeat)
            .chain(&rules.shutdown)
        {
            needles.push(match c {
                // The value is rarer than the key (`"serverShutdown"` versus `"e"`).
                Condition::Equals { token, .. } if token.len() >= 3 => token.clone(),
                other => quoted(other.key()),
            });
        }
        if !rules.extract_keys.is_empty() {
            // Extracted keys (Betfair `op`) are in nearly every message: a prefilter would
            // always pass, so go straight to the scan.
            needles.clear();
        }
        needles.sort();
        needles.dedup();
        let needles = needles
            .iter()
            .map(|n| memchr::memmem::Finder::new(n.as_bytes()).into_owned())
            .collect();
        Self { rules, needles }
    }

    /// The rules it was compiled from.
    pub fn rules(&self) -> &RouteRules {
        &self.rules
    }

    /// Classifies `payload` by its first `scan_len` bytes.
    pub fn classify(&self, payload: &Bytes) -> Class {
        let head = &payload[..payload.len().min(self.rules.scan_len)];
        let prefiltered = !self.needles.is_empty();
        if prefiltered && !self.needles.iter().any(|f| f.find(head).is_some()) {
            return Class::Data {
                heartbeat: false,
                shutdown: false,
                extracted: Extracted::default(),
            };
        }
        scan(payload, head, &self.rules)
    }
}

/// The structural scan of a head that may hold a rule's key.
fn scan(payload: &Bytes, head: &[u8], rules: &RouteRules) -> Class {
    // The first occurrence of each key the rules mention; rules hold a handful of keys, so
    // a linear list beats hashing.
    let mut seen: [Option<(&str, Value)>; 8] = Default::default();
    let mut n = 0;
    for (key, value) in TopLevelPairs::new(head) {
        let key = &head[key];
        let wanted = rules
            .response
            .iter()
            .chain(&rules.error)
            .chain(&rules.heartbeat)
            .chain(&rules.shutdown)
            .map(Condition::key)
            .chain(std::iter::once(rules.id_key.as_str()))
            .chain(rules.extract_keys.iter().map(String::as_str))
            .find(|k| k.as_bytes() == key);
        if let Some(k) = wanted {
            if n < seen.len() && !seen[..n].iter().flatten().any(|(s, _)| *s == k) {
                seen[n] = Some((k, value));
                n += 1;
            }
        }
    }
    let lookup = |key: &str| {
        seen[..n]
            .iter()
            .flatten()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    };
    let holds = |c: &Condition| match c {
        Condition::HasKey(k) => lookup(k).is_some(),
        Condition::Equals { key, token } => {
            lookup(key).and_then(|v| v.raw(head).map(|r| r == token.as_bytes())) == Some(true)
        }
        Condition::NotEquals { key, token } => {
            lookup(key).and_then(|v| v.raw(head).map(|r| r != token.as_bytes())) == Some(true)
        }
    };
    if rules.response.iter().any(holds) {
        let id = lookup(&rules.id_key).and_then(|v| response_id(payload, &v));
        Class::Response {
            id,
            is_error: rules.error.iter().any(holds),
        }
    } else {
        let mut extracted: Extracted = Default::default();
        for (slot, key) in extracted.iter_mut().zip(&rules.extract_keys) {
            if let Some(Value::Str(r)) = lookup(key) {
                *slot = Some(payload.slice(r));
            }
        }
        Class::Data {
            heartbeat: rules.heartbeat.iter().any(holds),
            shutdown: rules.shutdown.iter().any(holds),
            extracted,
        }
    }
}

fn response_id(payload: &Bytes, value: &Value) -> Option<ResponseId> {
    match value {
        Value::Str(r) => Some(ResponseId::Str(payload.slice(r.clone()))),
        Value::Token(r) => {
            let raw = &payload[r.clone()];
            // JSON integers only: digits, no sign, no leading zero (so `+5` or `05` can never
            // match request 5).
            let canonical =
                raw.iter().all(u8::is_ascii_digit) && (raw.len() == 1 || raw[0] != b'0');
            let parsed = canonical
                .then(|| std::str::from_utf8(raw).ok()?.parse::<u64>().ok())
                .flatten();
            Some(parsed.map_or_else(
                || ResponseId::Other(payload.slice(r.clone())),
                ResponseId::Int,
            ))
        }
        Value::Composite | Value::Truncated => None,
    }
}
