//! Head-scan classification of one message: response or data, the response's id and whether
//! it is an error. Looks at no more than `scan_len` bytes.

use bytes::Bytes;

use super::head_scan::{first_key_among, value_is, TopLevelPairs, Value};
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
    first_keys: Vec<FirstKey>,
    compiled: Compiled,
}

/// The rules with each key replaced by its index among the distinct keys they mention, so
/// the scan matches a key once (lengths first, short keys as one integer compare) and every
/// condition is an array lookup.
#[derive(Debug, Clone)]
struct Compiled {
    keys: Vec<Key>,
    response: Vec<Cond>,
    error: Vec<Cond>,
    heartbeat: Vec<Cond>,
    shutdown: Vec<Cond>,
    id_key: usize,
    extract: Vec<usize>,
}

#[derive(Debug, Clone)]
struct Key {
    bytes: Vec<u8>,
    /// The bytes as a little-endian integer when at most 8 long.
    packed: Option<u64>,
}

#[derive(Debug, Clone)]
struct Cond {
    key: usize,
    test: Test,
}

#[derive(Debug, Clone)]
enum Test {
    Present,
    Equals(Vec<u8>),
    NotEquals(Vec<u8>),
}

/// Values of the keys seen, by key index, kept on the stack for up to this many keys.
const STACK_KEYS: usize = 16;

fn pack(bytes: &[u8]) -> Option<u64> {
    (bytes.len() <= 8).then(|| {
        let mut word = [0u8; 8];
        word[..bytes.len()].copy_from_slice(bytes);
        u64::from_le_bytes(word)
    })
}

impl Compiled {
    fn new(rules: &RouteRules) -> Self {
        let mut keys: Vec<Key> = Vec::new();
        let mut index = |k: &str| -> usize {
            if let Some(i) = keys.iter().position(|x| x.bytes == k.as_bytes()) {
                return i;
            }
            keys.push(Key {
                bytes: k.as_bytes().to_vec(),
                packed: pack(k.as_bytes()),
            });
            keys.len() - 1
        };
        let mut conds = |list: &[Condition]| -> Vec<Cond> {
            list.iter()
                .map(|c| Cond {
                    key: index(c.key()),
                    test: match c {
                        Condition::HasKey(_) => Test::Present,
                        Condition::Equals { token, .. } => Test::Equals(token.as_bytes().to_vec()),
                        Condition::NotEquals { token, .. } => {
                            Test::NotEquals(token.as_bytes().to_vec())
                        }
                    },
                })
                .collect()
        };
        let response = conds(&rules.response);
        let error = conds(&rules.error);
        let heartbeat = conds(&rules.heartbeat);
        let shutdown = conds(&rules.shutdown);
        let id_key = index(&rules.id_key);
        let extract = rules.extract_keys.iter().map(|k| index(k)).collect();
        Self {
            keys,
            response,
            error,
            heartbeat,
            shutdown,
            id_key,
            extract,
        }
    }

    fn key_index(&self, key: &[u8]) -> Option<usize> {
        let packed = pack(key);
        self.keys.iter().position(|k| {
            k.bytes.len() == key.len()
                && match (k.packed, packed) {
                    (Some(a), Some(b)) => a == b,
                    _ => k.bytes == key,
                }
        })
    }
}

/// One of `data_first_keys`, compiled: the key with its closing quote, and the tokens its
/// value is compared with.
#[derive(Debug, Clone)]
struct FirstKey {
    /// `stream"`: compared right after the object's `{"`.
    quoted: Vec<u8>,
    /// `Equals` tokens of heartbeat conditions on this key.
    heartbeat: Vec<Vec<u8>>,
    /// `Equals` tokens of shutdown conditions on this key.
    shutdown: Vec<Vec<u8>>,
    /// `HasKey` conditions: (heartbeat, shutdown) hold whenever this key comes first.
    present: (bool, bool),
    /// A `NotEquals` on this key needs the whole value: the general path decides.
    needs_scan: bool,
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
        let first_keys = rules
            .data_first_keys
            .iter()
            .map(|key| {
                let on = |list: &[Condition]| -> (Vec<Vec<u8>>, bool, bool) {
                    let mut tokens = Vec::new();
                    let (mut present, mut needs_scan) = (false, false);
                    for c in list.iter().filter(|c| c.key() == key) {
                        match c {
                            Condition::HasKey(_) => present = true,
                            Condition::Equals { token, .. } => {
                                tokens.push(token.clone().into_bytes())
                            }
                            Condition::NotEquals { .. } => needs_scan = true,
                        }
                    }
                    (tokens, present, needs_scan)
                };
                let (heartbeat, hb_present, hb_scan) = on(&rules.heartbeat);
                let (shutdown, sd_present, sd_scan) = on(&rules.shutdown);
                FirstKey {
                    quoted: format!("{key}\"").into_bytes(),
                    heartbeat,
                    shutdown,
                    present: (hb_present, sd_present),
                    needs_scan: hb_scan || sd_scan,
                }
            })
            .collect();
        let compiled = Compiled::new(&rules);
        Self {
            rules,
            needles,
            first_keys,
            compiled,
        }
    }

    /// The rules it was compiled from.
    pub fn rules(&self) -> &RouteRules {
        &self.rules
    }

    /// Classifies `payload` by its first `scan_len` bytes.
    pub fn classify(&self, payload: &Bytes) -> Class {
        let head = &payload[..payload.len().min(self.rules.scan_len)];
        if !self.rules.data_first_keys.is_empty() {
            if let Some(class) = self.by_first_key(head) {
                return class;
            }
        }
        let prefiltered = !self.needles.is_empty();
        if prefiltered && !self.needles.iter().any(|f| f.find(head).is_some()) {
            return Class::Data {
                heartbeat: false,
                shutdown: false,
                extracted: Extracted::default(),
            };
        }
        scan(payload, head, &self.compiled, self.rules.stop_at_composite)
    }
}

impl Classifier {
    /// Data when the first key is one of `data_first_keys`, judged on that key alone.
    fn by_first_key(&self, head: &[u8]) -> Option<Class> {
        let (which, at) = first_key_among(head, self.first_keys.iter().map(|k| &k.quoted[..]))?;
        let key = &self.first_keys[which];
        if key.needs_scan {
            return None;
        }
        let any = |tokens: &[Vec<u8>]| tokens.iter().any(|t| value_is(head, at, t));
        Some(Class::Data {
            heartbeat: key.present.0 || any(&key.heartbeat),
            shutdown: key.present.1 || any(&key.shutdown),
            extracted: Extracted::default(),
        })
    }
}

/// The structural scan of a head that may hold a rule's key.
fn scan(payload: &Bytes, head: &[u8], c: &Compiled, stop_at_composite: bool) -> Class {
    // The first occurrence of each key the rules mention, by key index.
    let mut stack: [Option<Value>; STACK_KEYS] = Default::default();
    let mut heap = Vec::new();
    let values: &mut [Option<Value>] = if c.keys.len() <= STACK_KEYS {
        &mut stack[..c.keys.len()]
    } else {
        heap.resize(c.keys.len(), None);
        &mut heap
    };
    for (key, value) in TopLevelPairs::with_stop(head, stop_at_composite) {
        if let Some(i) = c.key_index(&head[key]) {
            if values[i].is_none() {
                values[i] = Some(value);
            }
        }
    }
    let holds = |cond: &Cond| {
        let value = values[cond.key].as_ref();
        match &cond.test {
            Test::Present => value.is_some(),
            Test::Equals(token) => value.and_then(|v| v.raw(head)) == Some(token.as_slice()),
            Test::NotEquals(token) => value
                .and_then(|v| v.raw(head))
                .is_some_and(|raw| raw != token.as_slice()),
        }
    };
    if c.response.iter().any(holds) {
        let id = values[c.id_key]
            .as_ref()
            .and_then(|v| response_id(payload, v));
        Class::Response {
            id,
            is_error: c.error.iter().any(holds),
        }
    } else {
        let mut extracted: Extracted = Default::default();
        for (slot, &key) in extracted.iter_mut().zip(&c.extract) {
            if let Some(Value::Str(r)) = &values[key] {
                *slot = Some(payload.slice(r.clone()));
            }
        }
        Class::Data {
            heartbeat: c.heartbeat.iter().any(holds),
            shutdown: c.shutdown.iter().any(holds),
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
