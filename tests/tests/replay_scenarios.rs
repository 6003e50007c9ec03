//! The replay server's payloads are what their scenarios' names promise: valid JSON in the
//! shapes of Binance's and Betfair's messages, with the documented sizes of book, the
//! weights of the mix, and variety (no two payloads alike), each seed its own.

use std::collections::HashSet;

use bytes::Bytes;
use feedwire_replay::{Scenario, BETFAIR_IMAGE_CLK};
use serde_json::Value;

fn json(payload: &Bytes) -> Value {
    serde_json::from_slice(payload).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(payload));
    })
}

/// `data` of a combined-stream envelope whose `stream` is `stream`.
fn data_of<'a>(v: &'a Value, stream: &str) -> &'a Value {
    assert_eq!(v["stream"], stream, "{v}");
    &v["data"]
}

fn assert_keys(v: &Value, keys: &[&str]) {
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"));
    let mut got: Vec<&str> = obj.keys().map(String::as_str).collect();
    let mut want = keys.to_vec();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "{v}");
}

/// A book side: `levels` `[price, quantity]` pairs, each a decimal string.
fn assert_levels(side: &Value, levels: usize) {
    let side = side
        .as_array()
        .unwrap_or_else(|| panic!("not a book side: {side}"));
    assert_eq!(side.len(), levels);
    for level in side {
        let pair = level.as_array().unwrap();
        assert_eq!(pair.len(), 2, "{level}");
        for n in pair {
            let s = n.as_str().unwrap();
            assert!(
                s.parse::<f64>()
                    .is_ok_and(|x| x > 0.0 || s.starts_with("0.")),
                "{s}"
            );
        }
    }
}

fn assert_agg_trade(v: &Value) {
    let stream = v["stream"].as_str().unwrap();
    assert!(stream.ends_with("usdt@aggTrade"), "{stream}");
    let d = &v["data"];
    assert_keys(d, &["e", "E", "s", "a", "p", "q", "f", "l", "T", "m", "M"]);
    assert_eq!(d["e"], "aggTrade");
    assert_eq!(
        d["s"].as_str().unwrap().to_lowercase(),
        stream.trim_end_matches("@aggTrade")
    );
    let (first, last) = (d["f"].as_u64().unwrap(), d["l"].as_u64().unwrap());
    assert!((first..=first + 2).contains(&last), "{d}");
    assert!(d["m"].is_boolean() && d["E"] == d["T"], "{d}");
}

fn assert_kline(v: &Value) {
    let stream = v["stream"].as_str().unwrap();
    assert!(stream.ends_with("usdt@kline_1m"), "{stream}");
    let k = &v["data"]["k"];
    assert_eq!(v["data"]["e"], "kline");
    assert_eq!(k["i"], "1m");
    assert_eq!(
        k["T"].as_u64().unwrap(),
        k["t"].as_u64().unwrap() + 59_999,
        "a minute's candle: {k}"
    );
    assert_eq!(k["s"], v["data"]["s"]);
}

fn assert_depth20(v: &Value) {
    let d = data_of(v, "btcusdt@depth20@100ms");
    assert_keys(d, &["lastUpdateId", "bids", "asks"]);
    assert_levels(&d["bids"], 20);
    assert_levels(&d["asks"], 20);
}

fn assert_depth_diff(v: &Value) {
    let d = data_of(v, "btcusdt@depth@100ms");
    assert_eq!(d["e"], "depthUpdate");
    assert_eq!(d["u"].as_u64().unwrap(), d["U"].as_u64().unwrap() + 1);
    assert_levels(&d["b"], 200);
    assert_levels(&d["a"], 200);
}

#[test]
fn binance_payloads_have_their_streams_shapes() {
    for p in Scenario::SmallAggTrade.payloads(1) {
        assert_agg_trade(&json(&p));
    }
    for p in Scenario::MediumKline.payloads(1) {
        assert_kline(&json(&p));
    }
    for p in Scenario::LargeDepth20.payloads(1) {
        assert_depth20(&json(&p));
    }
    for p in Scenario::XlargeDepthDiff.payloads(1) {
        assert_depth_diff(&json(&p));
    }
    for p in Scenario::HugeTickerArr.payloads(1) {
        let v = json(&p);
        let tickers = data_of(&v, "!ticker@arr").as_array().unwrap();
        assert_eq!(tickers.len(), 1400);
        for (k, t) in tickers.iter().enumerate() {
            assert_eq!(t["e"], "24hrTicker");
            assert_eq!(t["s"], format!("SYM{k:04}USDT"), "each symbol once");
            assert_eq!(t.as_object().unwrap().len(), 23, "{t}");
        }
    }
}

/// The number at `pointer` in each of `scenario`'s payloads, in order.
fn numbers(scenario: Scenario, pointer: &str) -> Vec<u64> {
    let payloads = scenario.payloads(1);
    let at = |p: &Bytes| json(p).pointer(pointer).and_then(Value::as_u64);
    payloads
        .iter()
        .map(|p| at(p).unwrap_or_else(|| panic!("{pointer} in {}", scenario.name())))
        .collect()
}

/// Event times are November 2023 on, and a stream's ids and times step forward payload by
/// payload by the documented amounts.
#[test]
fn times_and_ids_advance_from_payload_to_payload() {
    const T0: u64 = 1_700_000_000_000;
    for (scenario, pointer, start, step) in [
        (Scenario::SmallAggTrade, "/data/E", T0, 1),
        (Scenario::SmallAggTrade, "/data/a", 1_000_000, 1),
        (Scenario::SmallAggTrade, "/data/f", 2_000_000, 1),
        (Scenario::MediumKline, "/data/E", T0, 60_000),
        (Scenario::MediumKline, "/data/k/f", 100, 1),
        (Scenario::MediumKline, "/data/k/L", 200, 1),
        (Scenario::LargeDepth20, "/data/lastUpdateId", 160_000_000, 1),
        (Scenario::XlargeDepthDiff, "/data/E", T0, 1),
        (Scenario::XlargeDepthDiff, "/data/U", 160_000_000, 2),
        (Scenario::HugeTickerArr, "/data/0/E", T0, 1),
        (Scenario::BetfairMcm, "/pt", T0, 1),
    ] {
        let got = numbers(scenario, pointer);
        let want: Vec<u64> = (0..got.len() as u64).map(|i| start + i * step).collect();
        assert_eq!(got, want, "{} {pointer}", scenario.name());
    }
}

#[test]
fn the_mix_is_weighted_as_documented() {
    let payloads = Scenario::MultiplexMix.payloads(1);
    let mut kinds = [0usize; 4];
    for p in &payloads {
        let v = json(p);
        let stream = v["stream"].as_str().unwrap();
        let kind = if stream.ends_with("@aggTrade") {
            assert_agg_trade(&v);
            0
        } else if stream.ends_with("@kline_1m") {
            assert_kline(&v);
            1
        } else if stream.ends_with("@depth20@100ms") {
            assert_depth20(&v);
            2
        } else {
            assert_depth_diff(&v);
            3
        };
        kinds[kind] += 1;
    }
    // 60 / 20 / 18 / 2 percent of 2048, within a few standard deviations.
    let n = payloads.len() as f64;
    for (got, (name, share)) in kinds.iter().zip([
        ("aggTrade", 0.60),
        ("kline", 0.20),
        ("depth20", 0.18),
        ("depth diff", 0.02),
    ]) {
        let expected = n * share;
        let spread = 4.0 * (n * share * (1.0 - share)).sqrt();
        assert!(
            (*got as f64 - expected).abs() <= spread,
            "{name}: {got} of {n}, expected {expected:.0} ± {spread:.0}"
        );
    }
}

#[test]
fn betfair_lines_open_with_the_image_then_deltas_and_heartbeats() {
    let payloads = Scenario::BetfairMcm.payloads(1);
    assert!(Scenario::BetfairMcm.is_lines() && Scenario::BetfairMcm.opens_once());
    for (i, p) in payloads.iter().enumerate() {
        assert!(!p.contains(&b'\n'), "a line holds no line end");
        let v = json(p);
        assert_eq!(v["op"], "mcm");
        assert_eq!(v["id"], 2, "a fresh client's first subscription");
        assert_eq!(v["clk"], format!("AAAA{i:06}"));
        assert!(v["pt"].is_u64(), "{v}");
        match i {
            0 => {
                assert_eq!(v["ct"], "SUB_IMAGE");
                assert_eq!(v["initialClk"], BETFAIR_IMAGE_CLK);
                assert_eq!(v["mc"][0]["img"], true);
            }
            _ if i % 50 == 49 => {
                assert_eq!(v["ct"], "HEARTBEAT");
                assert!(v.get("mc").is_none(), "{v}");
            }
            _ => {
                assert!(
                    v.get("ct").is_none() && v.get("initialClk").is_none(),
                    "{v}"
                );
                let mc = v["mc"].as_array().unwrap();
                assert_eq!(mc.len(), 1);
                assert!(mc[0]["id"].as_str().unwrap().starts_with("1.2"), "{v}");
                let rc = mc[0]["rc"].as_array().unwrap();
                assert!((1..=4).contains(&rc.len()), "{v}");
                for runner in rc {
                    assert!(runner["id"].is_u64(), "{runner}");
                    let atb = runner["atb"][0].as_array().unwrap();
                    assert_eq!(atb.len(), 2, "[price, size]: {runner}");
                }
            }
        }
    }
}

#[test]
fn payloads_differ_from_each_other_and_from_seed_to_seed() {
    for scenario in Scenario::ALL {
        let one = scenario.payloads(1);
        let distinct: HashSet<&Bytes> = one.iter().collect();
        assert_eq!(distinct.len(), one.len(), "{}", scenario.name());
        let expected = match scenario {
            Scenario::HugeTickerArr => 8,
            Scenario::XlargeDepthDiff => 64,
            _ => 2048,
        };
        assert_eq!(one.len(), expected, "{}", scenario.name());
        assert_eq!(one, scenario.payloads(1), "{}: seeded", scenario.name());
        let other = scenario.payloads(2);
        let shared = other.iter().filter(|p| distinct.contains(p)).count();
        // Betfair's heartbeats (every 50th line) carry nothing random.
        let seedless = if scenario == Scenario::BetfairMcm {
            one.len() / 50
        } else {
            0
        };
        assert_eq!(
            shared,
            seedless,
            "{}: seed 2 repeats seed 1",
            scenario.name()
        );
    }
}

#[test]
fn names_and_counts_are_the_documented_ones() {
    let documented = [
        ("small_aggtrade", 300_000),
        ("medium_kline", 150_000),
        ("large_depth20", 60_000),
        ("xlarge_depth_diff", 30_000),
        ("huge_ticker_arr", 600),
        ("multiplex_mix", 120_000),
        ("betfair_mcm", 1_000_000),
    ];
    for (scenario, (name, count)) in Scenario::ALL.into_iter().zip(documented) {
        assert_eq!(scenario.name(), name);
        assert_eq!(Scenario::from_name(name), Some(scenario));
        assert_eq!(scenario.default_count(), count, "{name}");
        assert_eq!(scenario.is_lines(), name == "betfair_mcm", "{name}");
        assert_eq!(
            scenario.opens_once(),
            name == "betfair_mcm",
            "{name}: its image"
        );
    }
    assert_eq!(Scenario::from_name("no_such_scenario"), None);
}
