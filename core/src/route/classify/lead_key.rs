//! The classifier's fast path for the first two of `data_first_keys`, read inline in the
//! decoder's loop.

use super::{opening, FirstKey, PREFIX_BYTES};

/// Whether bit `b` of `bits` is set.
#[inline(always)]
pub(super) fn may_hold(bits: &[u64; 4], b: u8) -> bool {
    bits[usize::from(b >> 6)] & 1 << (b & 63) != 0
}

/// How many of `data_first_keys` are read inline: Binance's two (`stream` on combined
/// streams, `e` on raw ones).
const LEADS: usize = 2;

/// The first [`LEADS`] of `data_first_keys` where a compact head settles them alone: each
/// opening, and the second bytes of values that may hold one of its checks. Kept in the
/// classifier's own fields, not behind the `first_keys` vector, and read inline: nearly every
/// Binance message opens with `{"stream":"` or `{"e":"` and a second byte no check's token
/// has, and this answers it in about 20 instructions, where the general path's call, loop and
/// bounds cost about 60 (callgrind, `in_memory small_aggtrade --lend`: 185 → 139 a message).
///
/// A head opens with one lead's opening at most, and with no other key's (a key whose opening is a
/// prefix of another's or has one, which takes a quote in a name or a key listed twice, is no
/// lead), so the leads can be tried in any order and the one whose opening matches decides —
/// inline, or by sending the head to the general path. A lead's opening is [`NO_LEAD`]'s, which no
/// head matches, when there is no such key, when it is longer than [`PREFIX_BYTES`], when it needs
/// a scan, and when `scan_len` would cut a head inside the bytes compared or before the value's
/// second byte: the general path decides those heads.
#[derive(Debug, Clone)]
pub(super) struct Leads([LeadKey; LEADS]);

#[derive(Debug, Clone, Copy)]
struct LeadKey {
    prefix: u128,
    prefix_mask: u128,
    /// Where the value starts in a compact head; with the byte after it, inside `scan_len`.
    value_at: usize,
    may_hold: [u64; 4],
}

/// An opening no head matches (no bits selected, one bit wanted).
const NO_LEAD: LeadKey = LeadKey {
    prefix: 1,
    prefix_mask: 0,
    value_at: 0,
    may_hold: [u64::MAX; 4],
};

impl Leads {
    /// The leads of `first_keys`, compiled from `names` (`data_first_keys`, in order).
    pub(super) fn new(first_keys: &[FirstKey], names: &[String], scan_len: usize) -> Self {
        let openings: Vec<String> = names.iter().map(|n| opening(n)).collect();
        let mut leads = [NO_LEAD; LEADS];
        for (i, k) in first_keys.iter().enumerate().take(LEADS) {
            let overlaps = openings.iter().enumerate().any(|(j, o)| {
                j != i && (o.starts_with(&openings[i]) || openings[i].starts_with(o.as_str()))
            });
            if !overlaps && !k.needs_scan && PREFIX_BYTES <= scan_len && k.value_at + 1 < scan_len {
                leads[i] = LeadKey {
                    prefix: k.prefix,
                    prefix_mask: k.prefix_mask,
                    value_at: k.value_at,
                    may_hold: k.may_hold,
                };
            }
        }
        Self(leads)
    }

    /// Whether `payload` opens with one of the leads, compact, and a value whose second byte
    /// rules out every check of that key: plain data, no flags.
    #[inline(always)]
    pub(super) fn settle_plain(&self, payload: &[u8]) -> bool {
        let Some(&head) = payload.first_chunk::<PREFIX_BYTES>() else {
            return false;
        };
        let word = u128::from_le_bytes(head);
        for lead in &self.0 {
            if word & lead.prefix_mask == lead.prefix {
                return match payload.get(lead.value_at..lead.value_at + 2) {
                    Some(&[v0, v1]) => {
                        !matches!(v0, b' ' | b'\t' | b'\r' | b'\n') && !may_hold(&lead.may_hold, v1)
                    }
                    _ => false,
                };
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{Classifier, FirstKeyFlags};
    use crate::{Condition, RouteRules};

    /// Rules whose first keys the leads settle differently: Binance's (`stream` first, a
    /// shutdown check on `e`), a heartbeat with a one-byte token on a lead (every second
    /// byte may hold it), a `NotEquals` on it (a scan: no lead), a short `scan_len`, the keys
    /// the other way round, a first key too long to compare at once, openings one of which
    /// is a prefix of the other (a quote in a name), and a key listed twice.
    fn rule_sets() -> Vec<RouteRules> {
        let binance = RouteRules::binance_stream();
        vec![
            binance.clone(),
            RouteRules::binance_ws_api(),
            RouteRules::betfair(),
            RouteRules {
                heartbeat: vec![Condition::equals_str("stream", "h")],
                ..binance.clone()
            },
            RouteRules {
                heartbeat: vec![Condition::equals_str("stream", "hb")],
                ..binance.clone()
            },
            RouteRules {
                shutdown: vec![Condition::not_equals("stream", "\"x\"")],
                ..binance.clone()
            },
            RouteRules {
                scan_len: 12,
                ..binance.clone()
            },
            RouteRules {
                data_first_keys: names(&["e", "stream"]),
                ..binance.clone()
            },
            RouteRules {
                data_first_keys: names(&["a_key_longer_than_sixteen", "stream"]),
                ..binance.clone()
            },
            RouteRules {
                data_first_keys: names(&["a", "a\":b"]),
                ..binance.clone()
            },
            RouteRules {
                data_first_keys: names(&["a\":b", "a", "stream"]),
                ..binance.clone()
            },
            // `a` needs a scan and is no lead: `{"a":b":` must not be taken for the other.
            RouteRules {
                data_first_keys: names(&["a", "a\":b"]),
                shutdown: vec![Condition::not_equals("a", "\"x\"")],
                ..binance.clone()
            },
            RouteRules {
                data_first_keys: names(&["stream", "stream"]),
                ..binance
            },
        ]
    }

    fn names(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|&k| k.to_owned()).collect()
    }

    #[test]
    fn the_leads_settle_binance_data_and_leave_checks_to_the_general_path() {
        let c = Classifier::new(RouteRules::binance_stream());
        let plain = Some(FirstKeyFlags::default());
        let data = br#"{"stream":"btcusdt@aggTrade","data":{"e":"aggTrade"}}"#;
        assert!(c.leads.settle_plain(data));
        assert_eq!(c.plain_by_first_key(data), plain);
        // A raw stream's `e`, the second lead; its shutdown check's token shares `s`, so the
        // general path decides the notice.
        let unwrapped = br#"{"e":"aggTrade","E":1}"#;
        assert!(c.leads.settle_plain(unwrapped));
        assert_eq!(c.plain_by_first_key(unwrapped), plain);
        let shutdown = br#"{"e":"serverShutdown","E":1}"#;
        assert!(!c.leads.settle_plain(shutdown));
        assert_eq!(
            c.plain_by_first_key(shutdown),
            Some(FirstKeyFlags {
                heartbeat: false,
                shutdown: true
            })
        );
        // Whitespace before the value, a spaced opening, a head cut before the value's
        // second byte: not settled inline.
        for declined in [
            &br#"{"stream": "btcusdt@aggTrade","data":{}}"#[..],
            br#"{ "stream":"btcusdt@aggTrade","data":{}}"#,
            br#"{"stream":""#,
            br#"{"stream":"#,
        ] {
            assert!(!c.leads.settle_plain(declined), "{declined:?}");
        }
        // A heartbeat whose token's second byte (after the quote) the value shares: the check
        // decides, whether it holds or not; any other value is settled inline.
        let hb = Classifier::new(RouteRules {
            heartbeat: vec![Condition::equals_str("stream", "hb")],
            ..RouteRules::binance_stream()
        });
        assert!(!hb.leads.settle_plain(br#"{"stream":"hb","x":1}"#));
        assert!(!hb.leads.settle_plain(br#"{"stream":"hx","x":1}"#));
        assert!(hb.leads.settle_plain(br#"{"stream":"xh","x":1}"#));
        assert_eq!(hb.plain_by_first_key(br#"{"stream":"hx","x":1}"#), plain);
        assert_eq!(
            hb.plain_by_first_key(br#"{"stream":"hb","x":1}"#),
            Some(FirstKeyFlags {
                heartbeat: true,
                shutdown: false
            })
        );
    }

    #[test]
    fn no_lead_where_the_general_path_must_decide() {
        let none = |rules: RouteRules| {
            let c = Classifier::new(rules);
            !c.leads
                .settle_plain(br#"{"stream":"btcusdt@aggTrade","data":{}}"#)
        };
        let binance = RouteRules::binance_stream();
        assert!(none(RouteRules::betfair()));
        assert!(none(RouteRules {
            scan_len: 12,
            ..binance.clone()
        }));
        assert!(none(RouteRules {
            shutdown: vec![Condition::not_equals("stream", "\"x\"")],
            ..binance.clone()
        }));
        assert!(none(RouteRules {
            data_first_keys: names(&["e", "e", "stream"]),
            ..binance.clone()
        }));
        // Only the first two keys can be leads (`stream`, third, is none); a first key too long
        // to compare is none, and the second still is one.
        assert!(none(RouteRules {
            data_first_keys: names(&["id", "e", "stream"]),
            ..binance.clone()
        }));
        assert!(!none(RouteRules {
            data_first_keys: names(&["a_key_longer_than_sixteen", "stream"]),
            ..binance.clone()
        }));
        // `{"a":` opens `{"a":b":` too: neither is a lead (and `stream`, third, is none).
        let overlapping = Classifier::new(RouteRules {
            data_first_keys: names(&["a", "a\":b", "stream"]),
            ..binance.clone()
        });
        assert!(!overlapping.leads.settle_plain(br#"{"a":"x","y":1234}"#));
        assert!(!overlapping.leads.settle_plain(br#"{"a":b":"x","y":1234}"#));
        let alone = Classifier::new(RouteRules {
            data_first_keys: names(&["a"]),
            ..binance
        });
        assert!(alone.leads.settle_plain(br#"{"a":"x","y":1234}"#));
    }

    proptest! {
        /// The inline leads answer exactly as the general path (the first keys' loop, the
        /// general reader, the checks) for every head, whatever the rules.
        #[test]
        fn the_leads_agree_with_the_general_path(
            key in prop_oneof![
                3 => Just("stream"),
                1 => prop::sample::select(vec![
                    "e", "streams", "strea", "result", "id", "a", "a\":b",
                ]),
            ],
            gap in prop_oneof![Just(""), Just(" "), Just("\t"), Just("\n")],
            value in prop_oneof![
                prop::sample::select(vec![
                    r#""serverShutdown""#, r#""hb""#, r#""h""#, r#""hx""#, r#""x""#,
                    r#""btcusdt@aggTrade""#, "null", "1", r#"""#, "",
                ])
                .prop_map(str::to_owned),
                "[\"a-z!@0-9{}:, ]{0,24}",
            ],
            rest in "[\"a-z0-9{}:, ]{0,40}",
        ) {
            let text = format!("{{\"{key}\":{gap}{value}{rest}");
            for rules in rule_sets() {
                let c = Classifier::new(rules);
                // Every length: heads cut inside the opening, at the value, after it.
                for cut in 0..=text.len() {
                    let payload = &text.as_bytes()[..cut];
                    let general = if c.first_keys.is_empty() {
                        None
                    } else {
                        c.plain_by_first_key_in_general(payload)
                    };
                    let inline = c.plain_by_first_key(payload);
                    prop_assert_eq!(inline, general, "{}", payload.escape_ascii());
                }
            }
        }
    }
}
