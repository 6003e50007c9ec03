//! Arbitrary messages through every routing preset. Checks: no panic; the class depends on
//! the first `scan_len` bytes only.
#![no_main]

use bytes::Bytes;
use feedwire_core::{classify, RouteRules};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let [scan, rest @ ..] = input else { return };
    let scan_len = usize::from(*scan) + 1;
    for rules in [
        RouteRules::binance_stream(),
        RouteRules::binance_ws_api(),
        RouteRules::betfair(),
    ] {
        let rules = RouteRules { scan_len, ..rules };
        let full = classify(&Bytes::copy_from_slice(rest), &rules);
        let head = classify(
            &Bytes::copy_from_slice(&rest[..rest.len().min(scan_len)]),
            &rules,
        );
        // Ids are slices of the message; compare classes by their debug form of head bytes.
        assert_eq!(
            format!("{full:?}"),
            format!("{head:?}"),
            "class depends on bytes beyond the head"
        );
    }
});
