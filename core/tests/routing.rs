//! Head-scan classification: presets, and the adversarial cases of the seed's head scan
//! (markers at the 256-byte boundary, escaped quotes, odd ids, truncated or non-JSON heads).

use bytes::Bytes;
use feedwire_core::{classify, Class, ResponseId, RouteRules};

fn class(msg: &str, rules: &RouteRules) -> Class {
    classify(&Bytes::copy_from_slice(msg.as_bytes()), rules)
}

fn response(id: Option<ResponseId>, is_error: bool) -> Class {
    Class::Response { id, is_error }
}

/// `class` with a response's id left out.
fn without_id(class: &Class) -> Class {
    match class {
        Class::Response { is_error, .. } => response(None, *is_error),
        data => data.clone(),
    }
}

fn response_id(class: &Class) -> Option<&ResponseId> {
    match class {
        Class::Response { id, .. } => id.as_ref(),
        _ => None,
    }
}

const DATA: Class = Class::Data {
    heartbeat: false,
    shutdown: false,
    extracted: [None, None, None],
};

fn betfair_data(
    heartbeat: bool,
    initial_clk: Option<&'static str>,
    clk: Option<&'static str>,
) -> Class {
    Class::Data {
        heartbeat,
        shutdown: false,
        extracted: [
            Some(Bytes::from("mcm")),
            initial_clk.map(Bytes::from),
            clk.map(Bytes::from),
        ],
    }
}

#[test]
fn binance_stream_preset() {
    let r = RouteRules::binance_stream();
    assert_eq!(
        class(r#"{"result":null,"id":1}"#, &r),
        response(Some(ResponseId::Int(1)), false)
    );
    assert_eq!(
        class(
            r#"{"error":{"code":2,"msg":"Invalid request: unknown variant"},"id":7}"#,
            &r
        ),
        response(Some(ResponseId::Int(7)), true)
    );
    assert_eq!(
        class(r#"{"result":["btcusdt@aggTrade"],"id":3}"#, &r),
        response(Some(ResponseId::Int(3)), false)
    );
    assert_eq!(
        class(
            r#"{"stream":"btcusdt@aggTrade","data":{"e":"aggTrade","result":1,"id":2}}"#,
            &r
        ),
        DATA
    );
    assert_eq!(
        class(r#"{"e":"aggTrade","E":1,"s":"BTCUSDT","p":"1.0"}"#, &r),
        DATA
    );
}

#[test]
fn binance_server_shutdown_notices() {
    let r = RouteRules::binance_stream();
    let shutdown = Class::Data {
        heartbeat: false,
        shutdown: true,
        extracted: [None, None, None],
    };
    assert_eq!(
        class(r#"{"e":"serverShutdown","E":1700000000000}"#, &r),
        shutdown
    );
    assert_eq!(
        class(
            r#"{"stream":"!serverShutdown","data":{"e":"serverShutdown","E":1}}"#,
            &r
        ),
        shutdown
    );
    assert_eq!(
        class(
            r#"{"stream":"btcusdt@aggTrade","data":{"e":"serverShutdown"}}"#,
            &r
        ),
        DATA
    );
}

#[test]
fn binance_ws_api_server_shutdown_notices_are_wrapped_events() {
    let r = RouteRules::binance_ws_api();
    let shutdown = Class::Data {
        heartbeat: false,
        shutdown: true,
        extracted: [None, None, None],
    };
    // The form Binance documents, and with whitespace and the time first.
    assert_eq!(
        class(r#"{"event":{"e":"serverShutdown","E":1770123456789}}"#, &r),
        shutdown
    );
    assert_eq!(
        class(
            r#"{ "event" : { "E" : 1770123456789 , "e" : "serverShutdown" } }"#,
            &r
        ),
        shutdown
    );
    // User data events share the envelope; a value elsewhere, a deeper one, or a notice
    // cut off by the end of the head is not the notice.
    assert_eq!(
        class(
            r#"{"subscriptionId":0,"event":{"e":"outboundAccountPosition","E":1}}"#,
            &r
        ),
        DATA
    );
    assert_eq!(class(r#"{"event":{"x":{"e":"serverShutdown"}}}"#, &r), DATA);
    assert_eq!(class(r#"{"other":{"e":"serverShutdown"}}"#, &r), DATA);
    let cut = format!(
        r#"{{"pad":"{}","event":{{"e":"serverShutdown"}}}}"#,
        "x".repeat(220)
    );
    assert_eq!(class(&cut, &r), DATA);
    // A response is still a response.
    assert_eq!(
        without_id(&class(
            r#"{"id":"a","status":200,"result":{"e":"serverShutdown"}}"#,
            &r
        )),
        response(None, false)
    );
}

#[test]
fn the_first_key_decides_for_data_first_keys() {
    let r = RouteRules::binance_stream();
    // `stream` / `e` first: data, whatever follows (responses never start with them).
    assert_eq!(class(r#"{"stream":"x","result":null,"id":1}"#, &r), DATA);
    assert_eq!(
        class(r#"{"e":"trade","error":{"code":1},"id":1}"#, &r),
        DATA
    );
    // Any other first key: the full head scan.
    assert_eq!(
        class(r#"{"result":null,"stream":"x","id":1}"#, &r),
        response(Some(ResponseId::Int(1)), false)
    );
    assert_eq!(
        class(r#"{"id":1,"e":"trade","result":null}"#, &r),
        response(Some(ResponseId::Int(1)), false)
    );
    // Whitespace around the first key and a shutdown notice judged on it.
    let shutdown = Class::Data {
        heartbeat: false,
        shutdown: true,
        extracted: [None, None, None],
    };
    assert_eq!(class(" { \"e\" :\t\"serverShutdown\" }", &r), shutdown);
    assert_eq!(
        class("{ \"stream\" : \"x\", \"result\": null, \"id\": 1 }", &r),
        DATA
    );
    assert_eq!(class(r#"{"e":"serverShutdownX"}"#, &r), DATA);
    assert_eq!(
        class(r#"{"streams":1,"result":null,"id":2}"#, &r),
        response(Some(ResponseId::Int(2)), false)
    );
}

#[test]
fn a_heartbeat_is_judged_on_the_first_key() {
    // A heartbeat condition on one of `data_first_keys`: decided on that key alone, compact
    // or spaced, like the shutdown notice.
    let r = RouteRules {
        heartbeat: vec![feedwire_core::Condition::equals_str("e", "hb")],
        ..RouteRules::binance_stream()
    };
    let heartbeat = Class::Data {
        heartbeat: true,
        shutdown: false,
        extracted: [None, None, None],
    };
    assert_eq!(class(r#"{"e":"hb","E":1}"#, &r), heartbeat);
    assert_eq!(class(r#"{ "e" : "hb" }"#, &r), heartbeat);
    assert_eq!(class(r#"{"e":"trade","E":1}"#, &r), DATA);
}

#[test]
fn binance_ws_api_preset() {
    let r = RouteRules::binance_ws_api();
    let uuid = "e2a85d9f-07a5-4f94-8d5f-789dc3deb097";
    let ok =
        format!(r#"{{"id":"{uuid}","status":200,"result":{{"serverTime":1}},"rateLimits":[]}}"#);
    assert_eq!(
        class(&ok, &r),
        response(Some(ResponseId::Str(Bytes::from(uuid))), false)
    );
    let bad = format!(r#"{{"id":"{uuid}","status":400,"error":{{"code":-1102,"msg":"x"}}}}"#);
    assert_eq!(
        class(&bad, &r),
        response(Some(ResponseId::Str(Bytes::from(uuid))), true)
    );
    let status_only = format!(r#"{{"id":"{uuid}","status":429}}"#);
    assert_eq!(
        class(&status_only, &r),
        response(Some(ResponseId::Str(Bytes::from(uuid))), true)
    );
    assert_eq!(
        class(
            r#"{"event":{"e":"outboundAccountExtracted"},"subscriptionId":0}"#,
            &r
        ),
        DATA
    );
}

#[test]
fn betfair_preset() {
    let r = RouteRules::betfair();
    assert_eq!(
        class(
            r#"{"op":"connection","connectionId":"002-051134157842-432409"}"#,
            &r
        ),
        response(None, false)
    );
    assert_eq!(
        class(
            r#"{"op":"status","id":1,"statusCode":"SUCCESS","connectionClosed":false}"#,
            &r
        ),
        response(Some(ResponseId::Int(1)), false)
    );
    assert_eq!(
        class(
            r#"{"op":"status","id":2,"statusCode":"FAILURE","errorCode":"INVALID_APP_KEY","connectionClosed":true}"#,
            &r
        ),
        response(Some(ResponseId::Int(2)), true)
    );
    assert_eq!(
        class(r#"{"op":"mcm","id":1,"clk":"AAA","pt":1,"mc":[]}"#, &r),
        betfair_data(false, None, Some("AAA"))
    );
    assert_eq!(
        class(
            r#"{"op":"mcm","id":1,"initialClk":"G1F2","clk":"AAB","ct":"SUB_IMAGE","pt":1,"mc":[]}"#,
            &r
        ),
        betfair_data(false, Some("G1F2"), Some("AAB"))
    );
    assert_eq!(
        class(
            r#"{"op":"mcm","id":1,"ct":"HEARTBEAT","clk":"AAA","pt":1}"#,
            &r
        ),
        betfair_data(true, None, Some("AAA"))
    );
    assert_eq!(
        class(r#"{"op":"ocm","id":3,"oc":[]}"#, &r),
        Class::Data {
            heartbeat: false,
            shutdown: false,
            extracted: [Some(Bytes::from("ocm")), None, None]
        }
    );
}

/// `{"pad":"…","result":null,"id":1}` with the closing quote of `result` at byte `at`.
fn marker_at(at: usize) -> String {
    let prefix = r#"{"pad":""#.len() + r#"","result"#.len();
    format!(
        r#"{{"pad":"{}","result":null,"id":1}}"#,
        "x".repeat(at - prefix)
    )
}

#[test]
fn marker_at_bytes_255_256_257() {
    let r = RouteRules::binance_stream();
    for at in [255usize, 256, 257] {
        let msg = marker_at(at);
        assert_eq!(msg.as_bytes()[at], b'"', "test setup for {at}");
        // The marker decides, from the head; the id, past the head, is read from the rest.
        let expected = if at < 256 {
            response(Some(ResponseId::Int(1)), false)
        } else {
            DATA
        };
        assert_eq!(
            class(&msg, &r),
            expected,
            "closing quote of the marker at byte {at}"
        );
    }
    // With the marker and the id inside the head, the id is found too.
    let near = format!(r#"{{"pad":"{}","result":null,"id":1}}"#, "x".repeat(200));
    assert_eq!(class(&near, &r), response(Some(ResponseId::Int(1)), false));
}

#[test]
fn scan_length_is_configurable() {
    let r = RouteRules {
        scan_len: 512,
        ..RouteRules::binance_stream()
    };
    assert_eq!(
        class(&marker_at(300), &r),
        response(Some(ResponseId::Int(1)), false)
    );
}

#[test]
fn whitespace_and_key_order_variations() {
    let r = RouteRules::binance_stream();
    for msg in [
        r#"{"id":5,"result":null}"#,
        " {\n\t\"id\" : 5 ,\r\n \"result\" :\tnull } ",
        r#"{ "result" : null , "id" : 5 }"#,
    ] {
        assert_eq!(
            class(msg, &r),
            response(Some(ResponseId::Int(5)), false),
            "{msg:?}"
        );
    }
}

#[test]
fn escaped_quotes_in_strings_before_the_marker() {
    let r = RouteRules::binance_stream();
    assert_eq!(
        class(r#"{"note":"\"result\":null,\"id\":1","e":"x"}"#, &r),
        DATA
    );
    assert_eq!(
        class(
            r#"{"note":"ends in backslash \\","result":null,"id":3}"#,
            &r
        ),
        response(Some(ResponseId::Int(3)), false)
    );
}

#[test]
fn odd_ids() {
    let r = RouteRules::binance_stream();
    let other = |s: &str| Some(ResponseId::Other(Bytes::copy_from_slice(s.as_bytes())));
    assert_eq!(
        class(r#"{"result":null,"id":18446744073709551615}"#, &r),
        response(Some(ResponseId::Int(u64::MAX)), false)
    );
    assert_eq!(
        class(r#"{"result":null,"id":18446744073709551616}"#, &r),
        response(other("18446744073709551616"), false)
    );
    assert_eq!(
        class(r#"{"result":null,"id":-1}"#, &r),
        response(other("-1"), false)
    );
    assert_eq!(
        class(r#"{"result":null,"id":05}"#, &r),
        response(other("05"), false)
    );
    assert_eq!(
        class(r#"{"result":null,"id":1.5}"#, &r),
        response(other("1.5"), false)
    );
    assert_eq!(
        class(r#"{"result":null,"id":null}"#, &r),
        response(other("null"), false)
    );
    assert_eq!(
        class(r#"{"result":null,"id":{"n":1}}"#, &r),
        response(None, false)
    );
}

/// `LIST_SUBSCRIPTIONS` answers list every stream before their `id`: past a dozen streams the
/// id is beyond the head. The head still decides the class; the id is read from the rest.
#[test]
fn a_response_id_beyond_the_head_is_found_in_the_rest() {
    let r = RouteRules::binance_stream();
    let list = (0..30)
        .map(|i| format!(r#""sym{i:03}usdt@aggTrade""#))
        .collect::<Vec<_>>()
        .join(",");
    let answer = format!(r#"{{"result":[{list}],"id":7}}"#);
    assert!(answer.len() > 2 * r.scan_len);
    assert_eq!(
        class(&answer, &r),
        response(Some(ResponseId::Int(7)), false)
    );
    // Ids inside nested values are not the response's; brackets and quotes in strings do
    // not end the nested value early.
    let nested = format!(r#"{{"result":[{{"id":1,"s":"]}}\""}},{list}],"id" : "x-9"}}"#);
    assert_eq!(
        class(&nested, &r),
        response(Some(ResponseId::Str(Bytes::from_static(b"x-9"))), false)
    );
    // An error answer too.
    let error = format!(
        r#"{{"error":{{"code":2,"msg":"{}"}},"id":3}}"#,
        "m".repeat(300)
    );
    assert_eq!(class(&error, &r), response(Some(ResponseId::Int(3)), true));
    // An id cut off by the end of the head (digits on both sides of byte 256) is read whole.
    let pad = 256 - r#"{"result":"","id":12"#.len();
    let cut = format!(r#"{{"result":"{}","id":12345}}"#, "p".repeat(pad));
    assert_eq!(&cut[254..258], "1234");
    assert_eq!(
        class(&cut, &r),
        response(Some(ResponseId::Int(12345)), false)
    );
    // No id anywhere, or JSON that breaks off before one: no id (and no panic).
    for no_id in [
        format!(r#"{{"result":[{list}]}}"#),
        format!(r#"{{"result":[{list}]"#),
        format!(r#"{{"result":[{list}],"id""#),
        format!(r#"{{"result":[{list}],"id":"#),
        format!(r#"{{"result":[{list}] "id":1}}"#),
    ] {
        assert_eq!(class(&no_id, &r), response(None, false), "{no_id}");
    }
    // Data is decided by its head alone: an `id` (or `result`) past it changes nothing.
    let data = format!(
        r#"{{"e":"trade","pad":"{}","result":null,"id":1}}"#,
        "x".repeat(300)
    );
    assert_eq!(class(&data, &r), DATA);
}

#[test]
fn duplicated_keys_first_occurrence_counts() {
    let r = RouteRules::binance_stream();
    assert_eq!(
        class(r#"{"result":null,"id":1,"id":2}"#, &r),
        response(Some(ResponseId::Int(1)), false)
    );
    let b = RouteRules::betfair();
    assert_eq!(
        class(r#"{"op":"mcm","op":"status","id":1}"#, &b),
        betfair_data(false, None, None)
    );
}

#[test]
fn truncated_and_non_json_heads_are_data() {
    let r = RouteRules::binance_stream();
    for msg in [
        "",
        "{",
        r#"{"resu"#,
        "pong",
        "[1,2,3]",
        "\u{feff}{\"result\":null}",
        r#"{"result"x"#,
        "null",
    ] {
        assert_eq!(class(msg, &r), DATA, "{msg:?}");
    }
    // Key complete, value cut off by the end of the message: still a response.
    assert_eq!(class(r#"{"result":{"a":"#, &r), response(None, false));
}

#[test]
fn data_with_markers_beyond_the_head_is_data() {
    let r = RouteRules::binance_stream();
    let big = format!(
        r#"{{"stream":"x","data":{{"pad":"{}"}},"result":null,"error":1,"id":9}}"#,
        "y".repeat(5000)
    );
    assert_eq!(class(&big, &r), DATA);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The first-key fast path (one integer compare of a compact opening) decides
        /// exactly as the general reader does: a space after `{` forces the general reader
        /// and must not change the class, for any key, value and length (heads shorter and
        /// longer than the 16 bytes compared at once).
        #[test]
        fn compact_first_key_path_agrees_with_the_general_reader(
            key in prop_oneof![
                prop::sample::select(vec!["stream", "e", "streams", "strea", "E", "result", "id", "error"])
                    .prop_map(str::to_owned),
                "[a-z]{0,20}",
            ],
            gap in prop_oneof![Just(""), Just(" "), Just("\t")],
            value in prop_oneof![
                prop::sample::select(vec![
                    r#""!serverShutdown""#, r#""serverShutdown""#, r#""serverShutdownX""#,
                    r#""!server""#, r#""x""#, "null", "1",
                ])
                .prop_map(str::to_owned),
                "[\"a-z!@0-9{}:,]{0,24}",
            ],
            rest in "[\"a-z0-9{}:, ]{0,40}",
        ) {
            let compact = format!("{{\"{key}\":{gap}{value}{rest}");
            let spaced = format!("{{ \"{key}\":{gap}{value}{rest}");
            for rules in [RouteRules::binance_stream(), RouteRules::binance_ws_api(), RouteRules::betfair()] {
                prop_assert_eq!(
                    classify(&Bytes::from(compact.clone()), &rules),
                    classify(&Bytes::from(spaced.clone()), &rules),
                    "{}", compact
                );
            }
        }

        /// Classification looks at the head only: whatever follows byte `scan_len` cannot
        /// change the class — only a response's id, and only when the head holds none
        /// (then it is the first top-level id in the whole message). Arbitrary bytes never
        /// panic.
        #[test]
        fn bytes_beyond_the_head_never_change_the_class(
            head in prop_oneof![
                "[{}\\[\\]\":, a-z0-9\\\\]{0,300}",
                Just(r#"{"result":null,"id":12"#.to_owned()),
                Just(r#"{"op":"status","id":1,"statusCode":"FAILURE""#.to_owned()),
            ],
            tail_a in prop::collection::vec(any::<u8>(), 0..64),
            tail_b in prop::collection::vec(any::<u8>(), 0..64),
            scan_len in 1usize..300,
        ) {
            for rules in [RouteRules::binance_stream(), RouteRules::binance_ws_api(), RouteRules::betfair()] {
                let rules = RouteRules { scan_len, ..rules };
                let mut base = head.as_bytes().to_vec();
                base.resize(base.len().max(scan_len), b' ');
                let a = [&base[..], &tail_a[..]].concat();
                let b = [&base[..scan_len], &tail_b[..]].concat();
                let head_alone = classify(&Bytes::copy_from_slice(&base[..scan_len]), &rules);
                let (a, b) = (classify(&Bytes::from(a), &rules), classify(&Bytes::from(b), &rules));
                prop_assert_eq!(without_id(&a), without_id(&b));
                if let Class::Response { id: Some(id), .. } = &head_alone {
                    prop_assert_eq!(response_id(&a), Some(id));
                    prop_assert_eq!(response_id(&b), Some(id));
                }
            }
        }
    }
}

#[test]
fn rules_with_more_keys_than_the_stack_holds_still_classify() {
    // Twenty keys: their values are kept on the heap rather than the stack (sixteen).
    let keys: Vec<String> = (0..20).map(|i| format!("key{i}")).collect();
    let r = RouteRules {
        response: keys
            .iter()
            .map(|k| feedwire_core::Condition::has_key(k))
            .collect(),
        ..RouteRules::betfair()
    };
    for k in &keys {
        let hit = format!(r#"{{"x":1,"{k}":2}}"#);
        assert!(matches!(class(&hit, &r), Class::Response { .. }), "{hit}");
    }
    assert!(matches!(class(r#"{"key20":1}"#, &r), Class::Data { .. }));
}

#[test]
fn keys_are_matched_whole_whatever_their_length() {
    // Keys of 0, 1, 6, 8, 9 and 16 bytes, and near misses sharing a first byte or eight
    // bytes, or all but the last of six.
    let r = RouteRules {
        response: [
            "",
            "k",
            "result",
            "eightkey",
            "ninekeysx",
            "sixteenbyteskeys",
        ]
        .into_iter()
        .map(feedwire_core::Condition::has_key)
        .collect(),
        ..RouteRules::betfair()
    };
    for hit in [
        r#"{"":1}"#,
        r#"{"x":1,"k":2}"#,
        r#"{"result":1}"#,
        r#"{"eightkey":1}"#,
        r#"{"ninekeysx":1}"#,
        r#"{"sixteenbyteskeys":1}"#,
    ] {
        assert!(matches!(class(hit, &r), Class::Response { .. }), "{hit}");
    }
    for miss in [
        r#"{"kk":1}"#,
        r#"{"resulx":1}"#,
        r#"{"rxsult":1}"#,
        r#"{"eightkez":1}"#,
        r#"{"eightkeyx":1}"#,
        r#"{"ninekeysy":1}"#,
        r#"{"sixteenbyteskeyz":1}"#,
        r#"{" ":1}"#,
    ] {
        assert!(matches!(class(miss, &r), Class::Data { .. }), "{miss}");
    }
}
