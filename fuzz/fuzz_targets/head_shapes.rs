//! Arbitrary streams of heads (lines of the input) through every routing preset, classified
//! along learned head shapes and by the full walk. Checks: no panic; the same verdicts.
#![no_main]

use feedwire_core::testing::shaped_verdicts_differ;
use feedwire_core::RouteRules;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let [scan, stop, rest @ ..] = input else {
        return;
    };
    for rules in [
        RouteRules::binance_stream(),
        RouteRules::binance_ws_api(),
        RouteRules::betfair(),
    ] {
        let rules = RouteRules {
            scan_len: usize::from(*scan) + 1,
            stop_at_composite: stop & 1 == 1,
            ..rules
        };
        if let Some(head) = shaped_verdicts_differ(&rules, rest.split(|&b| b == b'\n')) {
            panic!("verdicts differ for {:?}", String::from_utf8_lossy(head));
        }
    }
});
