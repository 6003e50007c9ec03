//! Arbitrary messages through every routing preset. Checks: no panic; the class depends on
//! the first `scan_len` bytes only — but for a response's id, which is read from the rest
//! only when the head holds none.
#![no_main]

use bytes::Bytes;
use feedwire_core::{classify, Class, RouteRules};
use libfuzzer_sys::fuzz_target;

/// The class with a response's id left out, and the id.
fn split_id(class: Class) -> (Class, Option<feedwire_core::ResponseId>) {
    match class {
        Class::Response { id, is_error } => (Class::Response { id: None, is_error }, id),
        data => (data, None),
    }
}

fuzz_target!(|input: &[u8]| {
    let [scan, rest @ ..] = input else { return };
    let scan_len = usize::from(*scan) + 1;
    for rules in [
        RouteRules::binance_stream(),
        RouteRules::binance_ws_api(),
        RouteRules::betfair(),
    ] {
        let rules = RouteRules { scan_len, ..rules };
        let (full, full_id) = split_id(classify(&Bytes::copy_from_slice(rest), &rules));
        let (head, head_id) = split_id(classify(
            &Bytes::copy_from_slice(&rest[..rest.len().min(scan_len)]),
            &rules,
        ));
        assert_eq!(full, head, "class depends on bytes beyond the head");
        if head_id.is_some() {
            assert_eq!(full_id, head_id, "the head's id was not the one reported");
        }
    }
});
