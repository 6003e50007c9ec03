//! Deterministic market-data payloads in the shapes of Binance and Betfair streams.

use bytes::Bytes;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// The subscription request id the `betfair_mcm` lines carry: a fresh client's first
/// subscription (its login is request 1). A connection answering another id re-encodes its
/// lines with that one, as Betfair echoes the id.
pub(crate) const BETFAIR_REQUEST_ID: &str = "2";

/// The `initialClk` of the `betfair_mcm` image (a connection answering a subscription with
/// another id than its lines were made with appends that id: each image has its own).
pub const BETFAIR_IMAGE_CLK: &str = "G1FwiqK2G4Qb";

/// A named workload: payload shape and message count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// ~0.2 KB aggTrade in the combined envelope, 300,000 messages.
    SmallAggTrade,
    /// ~0.3 KB kline, 150,000.
    MediumKline,
    /// ~1.0 KB partial book, 20 levels a side, 60,000.
    LargeDepth20,
    /// ~9.1 KB depth diff, 200 levels a side, 30,000.
    XlargeDepthDiff,
    /// ~454 KB array of 1,400 24hrTicker objects, 600.
    HugeTickerArr,
    /// aggTrade 60 / kline 20 / depth20 18 / depth diff 2 percent, 120,000.
    MultiplexMix,
    /// Betfair `mcm` market changes (lines mode): a SUB_IMAGE, then deltas and heartbeats.
    BetfairMcm,
}

impl Scenario {
    /// Every scenario, in the order benchmarks list them.
    pub const ALL: [Scenario; 7] = [
        Self::SmallAggTrade,
        Self::MediumKline,
        Self::LargeDepth20,
        Self::XlargeDepthDiff,
        Self::HugeTickerArr,
        Self::MultiplexMix,
        Self::BetfairMcm,
    ];

    /// The name used on command lines and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::SmallAggTrade => "small_aggtrade",
            Self::MediumKline => "medium_kline",
            Self::LargeDepth20 => "large_depth20",
            Self::XlargeDepthDiff => "xlarge_depth_diff",
            Self::HugeTickerArr => "huge_ticker_arr",
            Self::MultiplexMix => "multiplex_mix",
            Self::BetfairMcm => "betfair_mcm",
        }
    }

    /// Parses [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Messages in one run.
    pub fn default_count(self) -> usize {
        match self {
            Self::SmallAggTrade => 300_000,
            Self::MediumKline => 150_000,
            Self::LargeDepth20 => 60_000,
            Self::XlargeDepthDiff => 30_000,
            Self::HugeTickerArr => 600,
            Self::MultiplexMix => 120_000,
            Self::BetfairMcm => 1_000_000,
        }
    }

    /// Whether its first payload opens each connection and is not served again: a Betfair
    /// subscription's image comes once, then the deltas cycle (an image every cycle had
    /// clients relearn their head shapes: 12 instructions a message more).
    pub fn opens_once(self) -> bool {
        self == Self::BetfairMcm
    }

    /// Which of `distinct` payloads a connection's message `sent` (from 0) is: they cycle,
    /// skipping the first after it opened the connection when the scenario [opens with
    /// it](Self::opens_once).
    pub fn payload_index(self, sent: usize, distinct: usize) -> usize {
        if self.opens_once() && sent > 0 && distinct > 1 {
            1 + (sent - 1) % (distinct - 1)
        } else {
            sent % distinct
        }
    }

    /// Whether it is served as CRLF lines (Betfair) rather than WebSocket frames.
    pub fn is_lines(self) -> bool {
        self == Self::BetfairMcm
    }

    /// Distinct payloads generated; a run cycles through them. Enough variety to defeat
    /// caching tricks, small enough to build in milliseconds.
    fn distinct(self) -> usize {
        match self {
            Self::HugeTickerArr => 8,
            Self::XlargeDepthDiff => 64,
            _ => 2048,
        }
    }

    /// The distinct payloads, generated from `seed`.
    pub fn payloads(self, seed: u64) -> Vec<Bytes> {
        let mut g = Gen(ChaCha8Rng::seed_from_u64(seed ^ self as u64));
        (0..self.distinct())
            .map(|i| {
                let text = match self {
                    Self::SmallAggTrade => g.agg_trade(i),
                    Self::MediumKline => g.kline(i),
                    Self::LargeDepth20 => g.depth20(i),
                    Self::XlargeDepthDiff => g.depth_diff(i),
                    Self::HugeTickerArr => g.ticker_arr(i),
                    Self::MultiplexMix => match g.below(100) {
                        0..=59 => g.agg_trade(i),
                        60..=79 => g.kline(i),
                        80..=97 => g.depth20(i),
                        _ => g.depth_diff(i),
                    },
                    Self::BetfairMcm => g.mcm(i),
                };
                Bytes::from(text)
            })
            .collect()
    }
}

struct Gen(ChaCha8Rng);

const SYMBOLS: [&str; 8] = [
    "BTCUSDT", "ETHUSDT", "BNBUSDT", "SOLUSDT", "XRPUSDT", "ADAUSDT", "DOGEUSDT", "TRXUSDT",
];
const T0: u64 = 1_700_000_000_000;

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }

    fn price(&mut self) -> String {
        format!("{}.{:02}", 60_000 + self.below(10_000), self.below(100))
    }

    fn qty(&mut self) -> String {
        format!("{}.{:05}", self.below(10), self.below(100_000))
    }

    fn levels(&mut self, n: usize) -> String {
        let mut s = String::from("[");
        for i in 0..n {
            if i > 0 {
                s.push(',');
            }
            s.push_str(&format!("[\"{}\",\"{}\"]", self.price(), self.qty()));
        }
        s.push(']');
        s
    }

    fn agg_trade(&mut self, i: usize) -> String {
        let sym = SYMBOLS[i % SYMBOLS.len()];
        let t = T0 + i as u64;
        format!(
            "{{\"stream\":\"{}@aggTrade\",\"data\":{{\"e\":\"aggTrade\",\"E\":{t},\"s\":\"{sym}\",\"a\":{},\"p\":\"{}\",\"q\":\"{}\",\"f\":{},\"l\":{},\"T\":{t},\"m\":{},\"M\":true}}}}",
            sym.to_lowercase(),
            1_000_000 + i,
            self.price(),
            self.qty(),
            2_000_000 + i,
            2_000_000 + i + self.below(3) as usize,
            self.below(2) == 0
        )
    }

    fn kline(&mut self, i: usize) -> String {
        let sym = SYMBOLS[i % SYMBOLS.len()];
        let t = T0 + 60_000 * i as u64;
        format!(
            "{{\"stream\":\"{}@kline_1m\",\"data\":{{\"e\":\"kline\",\"E\":{t},\"s\":\"{sym}\",\"k\":{{\"t\":{t},\"T\":{},\"s\":\"{sym}\",\"i\":\"1m\",\"f\":{},\"L\":{},\"o\":\"{}\",\"c\":\"{}\",\"h\":\"{}\",\"l\":\"{}\",\"v\":\"{}\",\"n\":{},\"x\":false,\"q\":\"{}\",\"V\":\"{}\",\"Q\":\"{}\",\"B\":\"0\"}}}}}}",
            sym.to_lowercase(),
            t + 59_999,
            100 + i,
            200 + i,
            self.price(),
            self.price(),
            self.price(),
            self.price(),
            self.qty(),
            self.below(500),
            self.qty(),
            self.qty(),
            self.qty()
        )
    }

    fn depth20(&mut self, i: usize) -> String {
        let bids = self.levels(20);
        let asks = self.levels(20);
        format!(
            "{{\"stream\":\"btcusdt@depth20@100ms\",\"data\":{{\"lastUpdateId\":{},\"bids\":{bids},\"asks\":{asks}}}}}",
            160_000_000 + i
        )
    }

    fn depth_diff(&mut self, i: usize) -> String {
        let bids = self.levels(200);
        let asks = self.levels(200);
        format!(
            "{{\"stream\":\"btcusdt@depth@100ms\",\"data\":{{\"e\":\"depthUpdate\",\"E\":{},\"s\":\"BTCUSDT\",\"U\":{},\"u\":{},\"b\":{bids},\"a\":{asks}}}}}",
            T0 + i as u64,
            160_000_000 + 2 * i,
            160_000_001 + 2 * i
        )
    }

    fn ticker_arr(&mut self, i: usize) -> String {
        let mut s = String::from("{\"stream\":\"!ticker@arr\",\"data\":[");
        for k in 0..1400 {
            if k > 0 {
                s.push(',');
            }
            s.push_str(&format!(
                "{{\"e\":\"24hrTicker\",\"E\":{},\"s\":\"SYM{k:04}USDT\",\"p\":\"{}\",\"P\":\"1.234\",\"w\":\"{}\",\"x\":\"{}\",\"c\":\"{}\",\"Q\":\"{}\",\"b\":\"{}\",\"B\":\"{}\",\"a\":\"{}\",\"A\":\"{}\",\"o\":\"{}\",\"h\":\"{}\",\"l\":\"{}\",\"v\":\"{}\",\"q\":\"{}\",\"O\":{},\"C\":{},\"F\":{},\"L\":{},\"n\":{}}}",
                T0 + i as u64,
                self.price(), self.price(), self.price(), self.price(), self.qty(), self.price(), self.qty(),
                self.price(), self.qty(), self.price(), self.price(), self.price(), self.qty(), self.qty(),
                T0 - 86_400_000, T0, 1000 + k, 2000 + k, 1000
            ));
        }
        s.push_str("]}");
        s
    }

    fn mcm(&mut self, i: usize) -> String {
        let heartbeat = i % 50 == 49;
        if heartbeat {
            return format!(
                "{{\"op\":\"mcm\",\"id\":{BETFAIR_REQUEST_ID},\"ct\":\"HEARTBEAT\",\"clk\":\"AAAA{i:06}\",\"pt\":{}}}",
                T0 + i as u64
            );
        }
        let mut rc = String::new();
        for k in 0..(1 + self.below(4)) {
            if k > 0 {
                rc.push(',');
            }
            rc.push_str(&format!(
                "{{\"atb\":[[{}.{:02},{}.{:02}]],\"id\":{}}}",
                1 + self.below(20),
                self.below(100),
                self.below(500),
                self.below(100),
                47_000 + self.below(10)
            ));
        }
        if i == 0 {
            // The subscription's first message: its image, with the position to resume from.
            return format!(
                "{{\"op\":\"mcm\",\"id\":{BETFAIR_REQUEST_ID},\"initialClk\":\"{BETFAIR_IMAGE_CLK}\",\"clk\":\"AAAA{i:06}\",\"conflateMs\":0,\"heartbeatMs\":5000,\"pt\":{},\"ct\":\"SUB_IMAGE\",\"mc\":[{{\"id\":\"1.{}\",\"rc\":[{rc}],\"img\":true}}]}}",
                T0 + i as u64,
                200_000_000 + self.below(50)
            );
        }
        format!(
            "{{\"op\":\"mcm\",\"id\":{BETFAIR_REQUEST_ID},\"clk\":\"AAAA{i:06}\",\"pt\":{},\"mc\":[{{\"id\":\"1.{}\",\"rc\":[{rc}]}}]}}",
            T0 + i as u64,
            200_000_000 + self.below(50)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_scenario_names() {
        let avg = |s: Scenario| {
            let p = s.payloads(1);
            p.iter().map(|b| b.len()).sum::<usize>() / p.len()
        };
        let within = |v: usize, lo: usize, hi: usize| (lo..=hi).contains(&v);
        assert!(
            within(avg(Scenario::SmallAggTrade), 150, 260),
            "{}",
            avg(Scenario::SmallAggTrade)
        );
        assert!(
            within(avg(Scenario::MediumKline), 250, 420),
            "{}",
            avg(Scenario::MediumKline)
        );
        assert!(
            within(avg(Scenario::LargeDepth20), 800, 1200),
            "{}",
            avg(Scenario::LargeDepth20)
        );
        assert!(
            within(avg(Scenario::XlargeDepthDiff), 8000, 10_500),
            "{}",
            avg(Scenario::XlargeDepthDiff)
        );
        assert!(
            within(avg(Scenario::HugeTickerArr), 400_000, 520_000),
            "{}",
            avg(Scenario::HugeTickerArr)
        );
    }

    #[test]
    fn deterministic_for_a_seed() {
        assert_eq!(
            Scenario::MultiplexMix.payloads(7),
            Scenario::MultiplexMix.payloads(7)
        );
        assert_ne!(
            Scenario::SmallAggTrade.payloads(7)[0],
            Scenario::SmallAggTrade.payloads(8)[0]
        );
    }
}
