//! Head-scan classification of one message: response or data, the response's id and whether
//! it is an error. Looks at no more than `scan_len` bytes, but for the id of a response whose
//! head does not hold it (see [`Classifier::classify`]).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use super::head_scan::{first_key_among, for_each_compact_pair, for_each_pair, value_is, Value};
use super::head_shape::{Fitted, HeadShapes, KeyRoles};
use super::rules::{Condition, RouteRules, MAX_EXTRACT_KEYS};

mod lead_key;
mod shared;
use lead_key::Leads;

/// A response's id, as the message carries it.
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
        /// Its id, if it has a complete one: from the head, or from the rest of the message
        /// when the head holds none.
        id: Option<ResponseId>,
        /// It matched an error condition.
        is_error: bool,
    },
}

/// String values of [`RouteRules::extract_keys`] from a data message's head, in key order
/// (at most [`MAX_EXTRACT_KEYS`]).
pub type Extracted = [Option<Bytes>; MAX_EXTRACT_KEYS];

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
/// extract fields from every message (Betfair) always scan — on a stream's fast path along
/// the shapes of its last heads (`HeadShapes`), walking in full only heads of a new shape.
///
/// Cloning is cheap and shares the compiled tables (reference counts): they never change once
/// compiled. A stream's router takes its classifier from [`Classifier::shared`], so streams
/// whose rules are equal hold one copy of them.
#[derive(Debug, Clone)]
pub struct Classifier {
    /// [`RouteRules::scan_len`]. The rules themselves are not kept: every stream holds a
    /// classifier, and what else they say is compiled below.
    scan_len: usize,
    /// [`RouteRules::stop_at_composite`].
    stop_at_composite: bool,
    needles: Arc<[memchr::memmem::Finder<'static>]>,
    /// An `Arc<[_]>`, not a `Vec` behind the `Arc`: the length is read inline, as a
    /// `Vec`'s is, on nearly every message's path.
    first_keys: Arc<[FirstKey]>,
    /// The first two of `first_keys`, as the decoder's loop checks them inline.
    leads: Leads,
    first_key_checks: Arc<[FirstKeyCheck]>,
    /// Behind one pointer more than the fields above: only the scan of a head no first key
    /// or prefilter settled, and learning a head's shape, read it.
    compiled: Arc<Compiled>,
    /// No first keys and no prefilter: a message is judged by the head shapes alone.
    by_shape_alone: bool,
}

/// The rules with each key replaced by its index among the distinct keys they mention, so
/// the scan matches a key once (lengths first, short keys as one integer compare) and every
/// condition is an array lookup. Kept in a few flat vectors: every stream holds one, and
/// idle streams are counted in bytes.
#[derive(Debug, Clone)]
struct Compiled {
    /// Every distinct key, back to back.
    key_bytes: Vec<u8>,
    keys: Vec<Key>,
    /// Every `Equals`/`NotEquals` token, back to back.
    token_bytes: Vec<u8>,
    /// Response, error, heartbeat and shutdown conditions, in that order (see `lists`).
    conds: Vec<Cond>,
    lists: [Range<usize>; 4],
    id_key: usize,
    /// What the rules do with each key, for learning head shapes; also where the key
    /// indexes of `extract_keys` (at most three) are kept.
    roles: KeyRoles,
    /// Bit `b % 64` set for the first byte `b` of every key: most keys of a message are
    /// none of the rules' (`pt`, `mc`), and this rules them out with one test.
    first_bytes: u64,
}

const RESPONSE: usize = 0;
const ERROR: usize = 1;
const HEARTBEAT: usize = 2;
const SHUTDOWN: usize = 3;

#[derive(Debug, Clone, Copy)]
struct Key {
    start: usize,
    len: usize,
    /// The key's first eight bytes as a little-endian integer, zero-padded: equal lengths and
    /// equal words decide keys of up to eight bytes in one compare (no `memcmp` call).
    word: u64,
}

#[inline(always)]
fn first_byte_bit(b: u8) -> u64 {
    1 << (b % 64)
}

/// `bytes[at..at + len]`'s first eight bytes, zero-padded, as [`Key::word`] holds them.
#[inline(always)]
fn word_at(bytes: &[u8], at: usize, len: usize) -> u64 {
    let mut word = [0u8; 8];
    match bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        Some(&chunk) => word = chunk,
        None => {
            let n = len.min(8);
            word[..n].copy_from_slice(&bytes[at..at + n]);
        }
    }
    let w = u64::from_le_bytes(word);
    if len >= 8 {
        w
    } else {
        w & ((1u64 << (8 * len)) - 1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Test {
    Present,
    Equals,
    NotEquals,
    InnerEquals,
}

#[derive(Debug, Clone)]
struct Cond {
    key: usize,
    test: Test,
    /// The token's bytes in `token_bytes` (empty for `Present`).
    token: Range<usize>,
    /// For `InnerEquals`, the inner key's bytes in `token_bytes` (else empty).
    inner: Range<usize>,
}

/// Values of the keys seen, by key index, kept on the stack for up to this many keys.
const STACK_KEYS: usize = 16;

impl Compiled {
    fn new(rules: &RouteRules) -> Self {
        let mut c = Self {
            key_bytes: Vec::new(),
            keys: Vec::new(),
            token_bytes: Vec::new(),
            conds: Vec::new(),
            lists: Default::default(),
            id_key: 0,
            first_bytes: 0,
            roles: KeyRoles {
                keys: 0,
                fixed: 0,
                extract: [None; 3],
            },
        };
        let lists = [
            &rules.response,
            &rules.error,
            &rules.heartbeat,
            &rules.shutdown,
        ];
        for (slot, list) in lists.into_iter().enumerate() {
            let first = c.conds.len();
            for cond in list {
                let key = c.index(cond.key());
                let (test, token, inner) = match cond {
                    Condition::HasKey(_) => (Test::Present, "", ""),
                    Condition::Equals { token, .. } => (Test::Equals, token.as_str(), ""),
                    Condition::NotEquals { token, .. } => (Test::NotEquals, token.as_str(), ""),
                    Condition::InnerEquals { inner, token, .. } => {
                        (Test::InnerEquals, token.as_str(), inner.as_str())
                    }
                };
                let mut add = |bytes: &str| {
                    let at = c.token_bytes.len();
                    c.token_bytes.extend_from_slice(bytes.as_bytes());
                    at..c.token_bytes.len()
                };
                let (token, inner) = (add(token), add(inner));
                c.conds.push(Cond {
                    key,
                    test,
                    token,
                    inner,
                });
            }
            c.lists[slot] = first..c.conds.len();
        }
        c.id_key = c.index(&rules.id_key);
        let mut extract = [None; MAX_EXTRACT_KEYS];
        // More keys are refused by `RouterConfig::validate`; a classifier made without it
        // reports the first ones.
        for (slot, key) in rules.extract_keys.iter().take(MAX_EXTRACT_KEYS).enumerate() {
            extract[slot] = Some(c.index(key));
        }
        // Every rule key's first value is part of a shape but an extracted key's that no
        // condition tests (Betfair `clk`, `initialClk`): those change with every message.
        let bit = |k: usize| if k < 64 { 1u64 << k } else { 0 };
        let tested = c.conds.iter().fold(0, |bits, cond| bits | bit(cond.key));
        let extracted = extract.iter().flatten().fold(0, |bits, &k| bits | bit(k));
        let all = (0..c.keys.len()).fold(0, |bits, k| bits | bit(k));
        c.roles = KeyRoles {
            keys: c.keys.len(),
            fixed: all & !(extracted & !tested),
            extract,
        };
        c
    }

    /// The index of `key`, added if new.
    fn index(&mut self, key: &str) -> usize {
        let key = key.as_bytes();
        if let Some(i) = self.key_index(key, 0..key.len()) {
            return i;
        }
        let start = self.key_bytes.len();
        self.key_bytes.extend_from_slice(key);
        self.first_bytes |= key.first().map_or(0, |&b| first_byte_bit(b));
        self.keys.push(Key {
            start,
            len: key.len(),
            word: word_at(key, 0, key.len()),
        });
        self.keys.len() - 1
    }

    fn key(&self, i: usize) -> &[u8] {
        let k = self.keys[i];
        &self.key_bytes[k.start..k.start + k.len]
    }

    /// The index of the key `bytes[range]`, if the rules mention it.
    #[inline(always)]
    fn key_index(&self, bytes: &[u8], range: Range<usize>) -> Option<usize> {
        let len = range.len();
        match bytes.get(range.start) {
            // (An empty key has no first byte: `bytes[range.start]` is its closing quote.)
            Some(&b) if len > 0 && self.first_bytes & first_byte_bit(b) == 0 => return None,
            _ => {}
        }
        let word = word_at(bytes, range.start, len);
        self.keys.iter().position(|k| {
            k.len == len
                && k.word == word
                && (len <= 8
                    || self.key_bytes[k.start + 8..k.start + len]
                        == bytes[range.start + 8..range.end])
        })
    }

    fn list(&self, which: usize) -> &[Cond] {
        &self.conds[self.lists[which].clone()]
    }

    fn token(&self, cond: &Cond) -> &[u8] {
        &self.token_bytes[cond.token.clone()]
    }
}

/// One of `data_first_keys`, compiled.
#[derive(Debug, Clone)]
struct FirstKey {
    /// Its index in [`Compiled::keys`].
    key: usize,
    /// A `NotEquals` on this key needs the whole value: the general path decides.
    needs_scan: bool,
    /// The compact opening `{"key":` as a little-endian integer over its first
    /// [`PREFIX_BYTES`] bytes, with `prefix_mask` selecting its length; when it is longer,
    /// mask 0 and prefix 1, which no head matches. Servers send compact JSON, so one integer
    /// compare usually decides.
    prefix: u128,
    prefix_mask: u128,
    /// Length of that opening: where the value starts in a compact head.
    value_at: usize,
    /// Heartbeat and shutdown conditions on this key, as a range of
    /// [`Classifier::first_key_checks`].
    checks: Range<usize>,
    /// Bit `b` set when a value whose second byte is `b` may equal one of the checks'
    /// tokens (every bit when a token is shorter than two bytes): nearly every value's
    /// second byte rules all of them out at once (`"b…` against `"!serverShutdown"`).
    may_hold: [u64; 4],
}

/// A heartbeat or shutdown condition on a first key (`Equals` or `Present`).
#[derive(Debug, Clone)]
struct FirstKeyCheck {
    shutdown: bool,
    /// The token's bytes in `Compiled::token_bytes`; `None` for `Present`.
    token: Option<Range<usize>>,
}

/// Bytes of a head compared at once on the first-key fast path.
const PREFIX_BYTES: usize = 16;

/// A compact object's opening with `key` first: `{"key":`.
fn opening(key: &str) -> String {
    format!("{{\"{key}\":")
}

impl FirstKey {
    fn new(key: usize, name: &str, needs_scan: bool, checks: Range<usize>) -> Self {
        let opening = opening(name);
        let (prefix, prefix_mask) = if opening.len() <= PREFIX_BYTES {
            let mut word = [0u8; PREFIX_BYTES];
            word[..opening.len()].copy_from_slice(opening.as_bytes());
            let mask = if opening.len() == PREFIX_BYTES {
                u128::MAX
            } else {
                (1u128 << (8 * opening.len())) - 1
            };
            (u128::from_le_bytes(word), mask)
        } else {
            (1, 0)
        };
        Self {
            key,
            needs_scan,
            prefix,
            prefix_mask,
            value_at: opening.len(),
            checks,
            may_hold: [0; 4],
        }
    }

    /// Whether a value with second byte `b` may make any of the checks hold.
    #[inline(always)]
    fn may_hold(&self, b: u8) -> bool {
        lead_key::may_hold(&self.may_hold, b)
    }
}

impl Classifier {
    /// Compiles `rules`, every call anew; [`Classifier::shared`] reuses a classifier compiled
    /// for equal rules (what every stream's router does).
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
                // The value is rarer than the key (`"serverShutdown"` versus `"e"`). Without
                // its opening quote it is within every longer token that ends alike
                // (`"!serverShutdown"`), which then needs no search of its own.
                Condition::Equals { token, .. } | Condition::InnerEquals { token, .. }
                    if token.len() >= 3 =>
                {
                    match token.strip_prefix('"') {
                        Some(inner) if inner.len() >= 3 => inner,
                        _ => token,
                    }
                    .to_owned()
                }
                other => quoted(other.key()),
            });
        }
        if !rules.extract_keys.is_empty() {
            // Extracted keys (Betfair `op`) are in nearly every message: a prefilter would
            // always pass, so go straight to the scan.
            needles.clear();
        }
        // A head holding a needle holds every needle within it: only the innermost are
        // searched for (a finder is 288 bytes, and every stream holds its own).
        needles.sort_by_key(String::len);
        let mut innermost: Vec<String> = Vec::with_capacity(needles.len());
        for n in needles {
            if !innermost.iter().any(|kept| n.contains(kept.as_str())) {
                innermost.push(n);
            }
        }
        let needles = innermost;
        let needles: Vec<_> = needles
            .iter()
            .map(|n| memchr::memmem::Finder::new(n.as_bytes()).into_owned())
            .collect();
        let mut compiled = Compiled::new(&rules);
        let mut first_key_checks = Vec::new();
        let first_keys: Vec<FirstKey> = rules
            .data_first_keys
            .iter()
            .map(|k| {
                let key = compiled.index(k);
                let start = first_key_checks.len();
                let mut needs_scan = false;
                for (shutdown, list) in [(false, HEARTBEAT), (true, SHUTDOWN)] {
                    for cond in compiled.list(list).iter().filter(|c| c.key == key) {
                        let token = match cond.test {
                            Test::Present => None,
                            Test::Equals => Some(cond.token.clone()),
                            Test::NotEquals | Test::InnerEquals => {
                                needs_scan = true;
                                None
                            }
                        };
                        first_key_checks.push(FirstKeyCheck { shutdown, token });
                    }
                }
                let mut first = FirstKey::new(key, k, needs_scan, start..first_key_checks.len());
                for check in &first_key_checks[start..] {
                    match check
                        .token
                        .clone()
                        .map(|t| compiled.token_bytes[t].get(1).copied())
                    {
                        Some(Some(b)) => first.may_hold[usize::from(b >> 6)] |= 1 << (b & 63),
                        _ => first.may_hold = [u64::MAX; 4], // `Present`, or a short token
                    }
                }
                first
            })
            .collect();
        Self {
            leads: Leads::new(&first_keys, &rules.data_first_keys, rules.scan_len),
            scan_len: rules.scan_len,
            stop_at_composite: rules.stop_at_composite,
            by_shape_alone: needles.is_empty() && first_keys.is_empty(),
            needles: needles.into(),
            first_keys: first_keys.into(),
            first_key_checks: first_key_checks.into(),
            compiled: Arc::new(compiled),
        }
    }

    /// Whether `self` and `other` share their compiled tables (one was cloned from the other,
    /// or both came from [`Classifier::shared`] with equal rules).
    pub fn shares_tables_with(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.compiled, &other.compiled)
    }

    /// Clones of this classifier alive, itself included: every clone holds each table once.
    fn holders(&self) -> usize {
        Arc::strong_count(&self.compiled)
    }

    /// Classifies `payload` by its first `scan_len` bytes. Only a response's id may come from
    /// further on: when the head holds no complete one, the message's whole top level is
    /// walked for it (a Binance `LIST_SUBSCRIPTIONS` answer puts its `id` after the list).
    pub fn classify(&self, payload: &Bytes) -> Class {
        match self.verdict(payload) {
            Verdict::Data {
                heartbeat,
                shutdown,
                extracted,
            } => Class::Data {
                heartbeat,
                shutdown,
                extracted: extracted.map(|r| r.map(|r| payload.slice(r))),
            },
            Verdict::Response { id, is_error } => Class::Response {
                id: self.response_id(payload, id),
                is_error,
            },
        }
    }

    /// The id of a message the head classified as a response: the id key's value in the
    /// head, else — when the message runs past the head and the head holds no complete id —
    /// the first id key's value in a walk of the message's whole top level. Binance's
    /// `LIST_SUBSCRIPTIONS` answer lists every stream before its `id`, so the answer for a
    /// connection with a dozen streams or more has it beyond 256 bytes; without the walk it
    /// would meet no request. Only responses take the walk (never data, whose class the head
    /// alone decides), and a walk costs time linear in the message's length (nested values
    /// skipped bracket by bracket), once per answer.
    fn response_id(&self, payload: &Bytes, in_head: Option<Value>) -> Option<ResponseId> {
        let value = match in_head {
            Some(Value::Truncated) | None if payload.len() > self.scan_len => {
                top_level_value(payload, self.compiled.key(self.compiled.id_key))?
            }
            Some(value) => value,
            None => return None,
        };
        response_id(payload, &value)
    }

    /// [`classify`](Self::classify) on borrowed bytes, with extracted values and the response
    /// id as ranges of `payload`: no reference count is taken for values read in place and
    /// dropped at once.
    pub(crate) fn verdict(&self, payload: &[u8]) -> Verdict {
        let head = &payload[..payload.len().min(self.scan_len)];
        if !self.first_keys.is_empty() {
            if let Some(verdict) = self.by_first_key(head) {
                return verdict;
            }
        }
        self.verdict_by_scan(payload)
    }

    /// [`verdict`](Self::verdict) for a message whose first key decided nothing
    /// ([`plain_by_first_key`](Self::plain_by_first_key) said `None`): the prefilter, then
    /// the head scan.
    pub(crate) fn verdict_by_scan(&self, payload: &[u8]) -> Verdict {
        let head = &payload[..payload.len().min(self.scan_len)];
        let prefiltered = !self.needles.is_empty();
        if prefiltered && !self.needles.iter().any(|f| f.find(head).is_some()) {
            return Verdict::PLAIN_DATA;
        }
        scan(head, &self.compiled, self.stop_at_composite)
    }

    /// [`verdict_by_scan`](Self::verdict_by_scan) that walks the head along a shape learned
    /// from earlier messages of the stream when one fits (see [`HeadShapes`]), and learns
    /// this head's shape when none does.
    pub(crate) fn verdict_by_shape(&self, payload: &[u8], shapes: &mut HeadShapes) -> Verdict {
        match self.verdict_by_shape_in(payload, shapes, &mut None) {
            ByShape::Fitted(fitted) => shapes.fitted_with_memo(fitted.slot).verdict.clone(),
            ByShape::Other(verdict) => verdict.clone(),
        }
    }

    /// [`verdict_by_shape`](Self::verdict_by_shape) lent, not moved: the slot of the shape
    /// that fitted (its verdict and the caller's memo of it are
    /// [`HeadShapes::fitted_with_memo`]), else a verdict in `learned` (or a constant). A
    /// reference, not a closure called with it: a closure the compiler may keep out of line
    /// (it did, in a large caller), this inlines whole.
    #[inline(always)]
    pub(crate) fn verdict_by_shape_in<'a>(
        &self,
        payload: &[u8],
        shapes: &mut HeadShapes,
        learned: &'a mut Option<Verdict>,
    ) -> ByShape<'a> {
        let prefiltered = !self.needles.is_empty();
        if prefiltered
            && !self
                .needles
                .iter()
                .any(|f| f.find(self.head(payload)).is_some())
        {
            return ByShape::Other(&Verdict::PLAIN_DATA);
        }
        self.verdict_by_shape_alone(payload, shapes, learned)
    }

    /// Whether the rules leave a message to the head shapes alone (no first keys, no
    /// prefilter): then [`verdict_by_shape_alone`](Self::verdict_by_shape_alone) is
    /// [`verdict_by_shape_in`](Self::verdict_by_shape_in), a few instructions less (Betfair).
    #[inline(always)]
    pub(crate) fn by_shape_alone(&self) -> bool {
        self.by_shape_alone
    }

    /// [`verdict_by_shape_in`](Self::verdict_by_shape_in) without the prefilter.
    #[inline(always)]
    pub(crate) fn verdict_by_shape_alone<'a>(
        &self,
        payload: &[u8],
        shapes: &mut HeadShapes,
        learned: &'a mut Option<Verdict>,
    ) -> ByShape<'a> {
        if let Some(fitted) = shapes.fit(payload, self.scan_len) {
            return ByShape::Fitted(fitted);
        }
        let head = self.head(payload);
        ByShape::Other(learned.insert(self.verdict_and_shape(head, shapes)))
    }

    /// The bytes of `payload` the rules look at.
    #[inline(always)]
    fn head<'p>(&self, payload: &'p [u8]) -> &'p [u8] {
        &payload[..payload.len().min(self.scan_len)]
    }

    /// The full walk of a head no shape fitted, learning its shape.
    #[inline(never)]
    fn verdict_and_shape(&self, head: &[u8], shapes: &mut HeadShapes) -> Verdict {
        let c = &self.compiled;
        let verdict = scan(head, c, self.stop_at_composite);
        shapes.learn(
            head,
            self.stop_at_composite,
            |key| c.key_index(head, key),
            &c.roles,
            &verdict,
        );
        verdict
    }
}

/// A verdict by the learned head shapes ([`Classifier::verdict_by_shape_in`]).
#[derive(Debug)]
pub(crate) enum ByShape<'a> {
    /// A learned shape fitted the head: the caller's memo of its verdict, and the slot where
    /// [`HeadShapes::fitted_with_memo`] finds the verdict (taken only when needed: the memo
    /// is enough for most messages).
    Fitted(Fitted),
    /// The rules' prefilter settled it, or no shape fitted and the head was walked in full.
    Other(&'a Verdict),
}

/// What classification found; see [`Classifier::verdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A data message; `extracted` holds ranges of the payload.
    Data {
        heartbeat: bool,
        shutdown: bool,
        extracted: [Option<Range<usize>>; 3],
    },
    /// An endpoint response; `id` is the raw value of its id key (see [`response_id`]).
    Response { id: Option<Value>, is_error: bool },
}

/// Plain data: what a shape holds before it learns anything.
impl Default for Verdict {
    fn default() -> Self {
        Self::PLAIN_DATA
    }
}

impl Verdict {
    const PLAIN_DATA: Self = Self::Data {
        heartbeat: false,
        shutdown: false,
        extracted: [None, None, None],
    };
}

impl Classifier {
    /// Which of `data_first_keys` the object opens with, and where its value starts: one
    /// integer compare per key for compact JSON, else the general reader.
    fn first_key(&self, head: &[u8]) -> Option<(usize, usize)> {
        if let Some(&h) = head.first_chunk::<PREFIX_BYTES>() {
            let word = u128::from_le_bytes(h);
            for (i, k) in self.first_keys.iter().enumerate() {
                if word & k.prefix_mask == k.prefix {
                    // Whitespace before the value: the general reader finds where it starts.
                    if matches!(head.get(k.value_at), Some(b' ' | b'\t' | b'\r' | b'\n')) {
                        break;
                    }
                    return Some((i, k.value_at));
                }
            }
        }
        self.first_key_by_reading(head)
    }

    /// [`first_key`](Self::first_key) for a head that is not compact JSON.
    #[inline(never)]
    fn first_key_by_reading(&self, head: &[u8]) -> Option<(usize, usize)> {
        let c = &self.compiled;
        first_key_among(head, self.first_keys.iter().map(|k| c.key(k.key)))
    }

    /// Data when the first key is one of `data_first_keys`, judged on that key alone.
    fn by_first_key(&self, head: &[u8]) -> Option<Verdict> {
        let flags = self.first_key_flags(head)?;
        Some(Verdict::Data {
            heartbeat: flags.heartbeat,
            shutdown: flags.shutdown,
            extracted: [None, None, None],
        })
    }

    /// [`by_first_key`](Self::by_first_key) as two flags, with nothing extracted: the
    /// stream's fast path asks only this for nearly every Binance message, so no `Verdict`
    /// (80 bytes) is built for it, and the leads ([`Leads`]) answer most of them inline, in
    /// the decoder's loop. `payload` is the whole message.
    #[inline(always)]
    pub(crate) fn plain_by_first_key(&self, payload: &[u8]) -> Option<FirstKeyFlags> {
        if self.first_keys.is_empty() {
            return None;
        }
        if self.leads.settle_plain(payload) {
            return Some(FirstKeyFlags::default());
        }
        self.plain_by_first_key_in_general(payload)
    }

    /// [`plain_by_first_key`](Self::plain_by_first_key) where no lead settles the message.
    #[inline(never)]
    fn plain_by_first_key_in_general(&self, payload: &[u8]) -> Option<FirstKeyFlags> {
        self.first_key_flags(&payload[..payload.len().min(self.scan_len)])
    }

    fn first_key_flags(&self, head: &[u8]) -> Option<FirstKeyFlags> {
        let (which, at) = self.first_key(head)?;
        let first = &self.first_keys[which];
        if first.needs_scan {
            return None;
        }
        if head.get(at + 1).is_some_and(|&b| !first.may_hold(b)) {
            return Some(FirstKeyFlags::default());
        }
        Some(self.first_key_checks(head, first, at))
    }

    /// The heartbeat and shutdown checks on `first`, whose value starts at `at`.
    #[inline(never)]
    fn first_key_checks(&self, head: &[u8], first: &FirstKey, at: usize) -> FirstKeyFlags {
        let c = &self.compiled;
        let mut flags = FirstKeyFlags::default();
        for check in &self.first_key_checks[first.checks.clone()] {
            let holds = match &check.token {
                None => true,
                Some(token) => value_is(head, at, &c.token_bytes[token.clone()]),
            };
            if check.shutdown {
                flags.shutdown |= holds;
            } else {
                flags.heartbeat |= holds;
            }
        }
        flags
    }
}

/// What a data message's first key says about it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FirstKeyFlags {
    pub(crate) heartbeat: bool,
    pub(crate) shutdown: bool,
}

/// Keeps `value` if `key` is one the rules mention and it is the key's first occurrence;
/// whether any key is still `missing` a value.
#[inline(always)]
fn record(
    c: &Compiled,
    head: &[u8],
    values: &mut [Option<Value>],
    missing: &mut usize,
    key: Range<usize>,
    value: Value,
) -> bool {
    if let Some(i) = c.key_index(head, key) {
        if values[i].is_none() {
            values[i] = Some(value);
            *missing -= 1;
        }
    }
    *missing > 0
}

/// Whether `cond` holds for the first values of the keys (`values`, by key index).
#[inline(always)]
fn holds(c: &Compiled, head: &[u8], values: &[Option<Value>], cond: &Cond) -> bool {
    let value = values[cond.key].as_ref();
    match cond.test {
        Test::Present => value.is_some(),
        Test::Equals => value.and_then(|v| v.raw(head)) == Some(c.token(cond)),
        Test::NotEquals => value
            .and_then(|v| v.raw(head))
            .is_some_and(|raw| raw != c.token(cond)),
        Test::InnerEquals => inner_holds(c, head, value, cond),
    }
}

/// [`holds`] for `InnerEquals`: whether `value` is an object (complete within `head`) whose
/// inner key has the token, the first time it appears. Out of line: rules without it (every
/// preset's data path) carry none of it.
#[cold]
#[inline(never)]
fn inner_holds(c: &Compiled, head: &[u8], value: Option<&Value>, cond: &Cond) -> bool {
    let Some(&Value::Composite(at)) = value else {
        return false;
    };
    let object = &head[at..];
    top_level_value(object, &c.token_bytes[cond.inner.clone()])
        .is_some_and(|value| value.raw(object) == Some(c.token(cond)))
}

/// The structural scan of a head that may hold a rule's key.
fn scan(head: &[u8], c: &Compiled, stop_at_composite: bool) -> Verdict {
    with_values(c.keys.len(), |values| {
        walk_values(head, c, stop_at_composite, values);
        judge(head, c, values)
    })
}

/// Runs `f` with a slot per rule key (all `None`), on the stack for up to [`STACK_KEYS`].
#[inline(always)]
fn with_values<R>(keys: usize, f: impl FnOnce(&mut [Option<Value>]) -> R) -> R {
    let mut stack: [Option<Value>; STACK_KEYS] = Default::default();
    if keys <= STACK_KEYS {
        f(&mut stack[..keys])
    } else {
        f(&mut vec![None; keys])
    }
}

/// Fills `values` (all `None`) with the first value of each rule key in the head walk:
/// the compact lane, else the general walk.
#[inline(always)]
fn walk_values(head: &[u8], c: &Compiled, stop_at_composite: bool, values: &mut [Option<Value>]) {
    // Once every key has a value, later pairs cannot change anything.
    let mut missing = values.len();
    let compact = for_each_compact_pair(head, stop_at_composite, |key, value| {
        record(c, head, values, &mut missing, key, value)
    });
    if !compact {
        values.fill(None);
        missing = values.len();
        for_each_pair(head, stop_at_composite, |key, value| {
            record(c, head, values, &mut missing, key, value)
        });
    }
}

/// The verdict the rules give for the first values of their keys.
#[inline(always)]
fn judge(head: &[u8], c: &Compiled, values: &[Option<Value>]) -> Verdict {
    let any_holds = |which: usize| {
        c.list(which).iter().any(
            #[inline(always)]
            |cond| holds(c, head, values, cond),
        )
    };
    if any_holds(RESPONSE) {
        Verdict::Response {
            id: values[c.id_key].clone(),
            is_error: any_holds(ERROR),
        }
    } else {
        let mut extracted: [Option<Range<usize>>; 3] = Default::default();
        for (slot, key) in extracted.iter_mut().zip(c.roles.extract) {
            if let Some(Value::Str(r)) = key.and_then(|k| values[k].as_ref()) {
                *slot = Some(r.clone());
            }
        }
        Verdict::Data {
            heartbeat: any_holds(HEARTBEAT),
            shutdown: any_holds(SHUTDOWN),
            extracted,
        }
    }
}

/// The value of the first top-level `key` of the object `payload` opens, walking all of it
/// (nested objects and arrays skipped whole); `None` if the walk meets no such key.
fn top_level_value(payload: &[u8], key: &[u8]) -> Option<Value> {
    first_value(payload, key, false)
}

/// The value of the first top-level `key` of the object `payload` opens, the walk stopping at
/// the first object or array value when `stop_at_composite`.
fn first_value(payload: &[u8], key: &[u8], stop_at_composite: bool) -> Option<Value> {
    let mut found = None;
    for_each_pair(payload, stop_at_composite, |k, value| {
        if payload[k] != *key {
            return true;
        }
        found = Some(value);
        false
    });
    found
}

/// The integer the first top-level `key` of the object `payload` opens holds; `None` if
/// there is no such key or its value is not a JSON integer in [`canonical_u64`]'s sense.
pub(crate) fn top_level_int(payload: &[u8], key: &[u8]) -> Option<u64> {
    match top_level_value(payload, key)? {
        Value::Token(r) => canonical_u64(payload.get(r)?),
        _ => None,
    }
}

/// The content (escapes as sent) of the string the first top-level `key` of the object
/// `payload` opens holds, looked for only among the keys before the object's first object
/// or array value (so the cost never depends on the nested content); `None` if there is no
/// such key there or its value is not a string.
pub(crate) fn head_str<'a>(payload: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    match first_value(payload, key, true)? {
        Value::Str(r) => payload.get(r),
        _ => None,
    }
}

/// `raw` as a JSON integer: digits only, no sign, no leading zero (so `+5` or `05` can never
/// match request 5), within `u64`.
fn canonical_u64(raw: &[u8]) -> Option<u64> {
    let canonical =
        !raw.is_empty() && raw.iter().all(u8::is_ascii_digit) && (raw.len() == 1 || raw[0] != b'0');
    canonical
        .then(|| std::str::from_utf8(raw).ok()?.parse::<u64>().ok())
        .flatten()
}

fn response_id(payload: &Bytes, value: &Value) -> Option<ResponseId> {
    match value {
        Value::Str(r) => Some(ResponseId::Str(payload.slice(r.clone()))),
        Value::Token(r) => Some(canonical_u64(&payload[r.clone()]).map_or_else(
            || ResponseId::Other(payload.slice(r.clone())),
            ResponseId::Int,
        )),
        Value::Composite(_) | Value::Truncated => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `"!serverShutdown"` holds `serverShutdown"`: Binance's rules have a head searched for
    /// three needles, not four, and a head with either token, behind a key the first-key
    /// path leaves to the scan, is still a shutdown notice.
    #[test]
    fn a_needle_within_another_is_searched_for_alone() {
        let c = Classifier::new(RouteRules::binance_stream());
        let mut needles: Vec<&[u8]> = c.needles.iter().map(|f| f.needle()).collect();
        needles.sort_unstable();
        assert_eq!(
            needles,
            [&b"\"error\""[..], b"\"result\"", b"serverShutdown\""]
        );
        let shutdown = |head: &'static str| match c.classify(&Bytes::from_static(head.as_bytes())) {
            Class::Data { shutdown, .. } => shutdown,
            other => panic!("{head}: {other:?}"),
        };
        assert!(shutdown(r#"{"x":1,"stream":"!serverShutdown"}"#));
        assert!(shutdown(r#"{"x":1,"e":"serverShutdown"}"#));
        assert!(!shutdown(r#"{"x":1,"stream":"serverShutdown"}"#));
        assert!(!shutdown(r#"{"x":1,"e":"!serverShutdown"}"#));
    }
}
