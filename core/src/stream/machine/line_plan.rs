//! What the fast path does with a data message whose head fitted a learned shape, worked out
//! once per shape and kept with it as a word (the shape's memo, `ShapeFit::memo`) until its
//! verdict changes. A Betfair change message's verdict asks the same of every line of its
//! shape: the heartbeat flag, which feed's position it moves (from its `op`, a fixed value of
//! the shape), and where its `clk` lies (the same range while the shape's layout fits). So a
//! line costs a test of that word and the copy of its clock, not the decoding of the verdict's
//! three extracted ranges and its `op` (13 instructions a line fewer in a socket run, 23 in
//! memory; callgrind, `betfair_mcm`).

use std::ops::Range;

use super::positions::Positions;
use super::Feed;
use crate::route::{ShapeFit, Verdict};
use crate::stream::clocks::INLINE;

/// A verdict's plan, as the memo word holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LinePlan(u64);

/// Decode the verdict for each message: not plain data, or something the word does not hold
/// (an image's `initialClk`, an `op` that varies within the shape, a long clock).
const GENERAL: u64 = 1;
const HEARTBEAT: u64 = 1 << 1;
/// Copy the clock at `START`/`LEN` into this feed's position.
const CLOCK: u64 = 1 << 2;
/// The feed is Orders (else Markets).
const ORDERS: u64 = 1 << 3;
const START_SHIFT: u32 = 16;
const LEN_SHIFT: u32 = 48;

impl LinePlan {
    /// The plan for `fit`'s verdict; `payload` is a head the shape fitted.
    pub(super) fn of(fit: &ShapeFit<'_>, payload: &[u8]) -> Self {
        let Verdict::Data {
            heartbeat,
            shutdown: false,
            extracted: [op, initial, clk],
        } = fit.verdict
        else {
            return Self(GENERAL);
        };
        let heartbeat = if *heartbeat { HEARTBEAT } else { 0 };
        let Some(op) = op else {
            return Self(heartbeat); // no feed: no position
        };
        if !fit.extract_is_fixed(0) || initial.is_some() {
            return Self(GENERAL);
        }
        let (Some(feed), Some(clk)) = (payload.get(op.clone()).and_then(Feed::of_op), clk) else {
            return Self(heartbeat); // not a change message, or no clock: no position moves
        };
        match (u32::try_from(clk.start), u8::try_from(clk.len())) {
            (Ok(start), Ok(len)) if usize::from(len) <= INLINE => {
                let orders = if matches!(feed, Feed::Orders) {
                    ORDERS
                } else {
                    0
                };
                let at = u64::from(start) << START_SHIFT | u64::from(len) << LEN_SHIFT;
                Self(heartbeat | CLOCK | orders | at)
            }
            _ => Self(GENERAL),
        }
    }

    pub(super) fn word(self) -> u64 {
        self.0
    }

    pub(super) fn from_word(word: u64) -> Self {
        Self(word)
    }

    /// Whether the verdict must be decoded for each message.
    #[inline(always)]
    pub(super) fn is_general(self) -> bool {
        self.0 & GENERAL != 0
    }

    /// Records `payload`'s clock as the plan says; its heartbeat flag. For a plan that is not
    /// [general](Self::is_general).
    #[inline(always)]
    pub(super) fn apply(self, positions: &mut impl Positions, payload: &[u8]) -> bool {
        if self.0 & CLOCK != 0 {
            let feed = usize::from(self.0 & ORDERS != 0);
            positions.update_clk(feed, payload, self.clock());
        }
        self.0 & HEARTBEAT != 0
    }

    /// Where the clock lies in the message.
    #[inline(always)]
    fn clock(self) -> Range<usize> {
        // Both fit a `usize`: 32 and 8 bits.
        let start = (self.0 >> START_SHIFT) as u32 as usize;
        let len = usize::from((self.0 >> LEN_SHIFT) as u8);
        start..start + len
    }
}

#[cfg(test)]
mod tests {
    use super::LinePlan;
    use crate::route::{Classifier, HeadShapes, RouteRules};
    use crate::stream::clocks::Clocks;

    /// The plan of `head`'s shape, learned from `head` and fitted by it again.
    fn plan(rules: RouteRules, head: &[u8]) -> LinePlan {
        let classifier = Classifier::new(rules);
        let mut shapes = HeadShapes::default();
        classifier.verdict_by_shape(head, &mut shapes);
        let mut learned = None;
        let crate::route::ByShape::Fitted(fitted) =
            classifier.verdict_by_shape_in(head, &mut shapes, &mut learned)
        else {
            panic!("the head fits its own shape");
        };
        LinePlan::of(&shapes.fitted_with_memo(fitted.slot), head)
    }

    #[test]
    fn a_change_message_copies_its_clock_to_its_feed() {
        for (op, feed) in [("mcm", 0), ("ocm", 1)] {
            let head = format!(r#"{{"op":"{op}","id":2,"clk":"AAAA01","pt":17,"mc":[]}}"#);
            let plan = plan(RouteRules::betfair(), head.as_bytes());
            assert!(!plan.is_general());
            let mut clocks = [Clocks::default(), Clocks::default()];
            // The position counts once the subscription's image came.
            let image = br#"{"op":"mcm","initialClk":"I","clk":"C"}"#;
            for c in &mut clocks {
                c.update(image, Some((image, 28..29)), None);
            }
            assert!(!plan.apply(&mut clocks, head.as_bytes()));
            assert_eq!(clocks[feed].clk(), b"AAAA01", "{op}");
            assert_eq!(clocks[1 - feed].clk(), b"", "{op}");
        }
    }

    #[test]
    fn heartbeats_and_images_and_long_clocks() {
        let beat = br#"{"op":"mcm","id":2,"ct":"HEARTBEAT","clk":"AB","pt":17}"#;
        let plan_of_beat = plan(RouteRules::betfair(), beat);
        let mut clocks = [Clocks::default(), Clocks::default()];
        assert!(plan_of_beat.apply(&mut clocks, beat));
        // An image (its `initialClk`), a clock longer than kept inline: decoded each time.
        let image = br#"{"op":"mcm","id":2,"initialClk":"I","clk":"C","pt":1,"mc":[]}"#;
        assert!(plan(RouteRules::betfair(), image).is_general());
        let long = format!(
            r#"{{"op":"mcm","id":2,"clk":"{}","pt":1,"mc":[]}}"#,
            "L".repeat(40)
        );
        assert!(plan(RouteRules::betfair(), long.as_bytes()).is_general());
        // A response is no data.
        let status = br#"{"op":"status","id":3,"statusCode":"SUCCESS","connectionClosed":false}"#;
        let classifier = Classifier::new(RouteRules::betfair());
        let mut shapes = HeadShapes::default();
        classifier.verdict_by_shape(status, &mut shapes);
        let mut learned = None;
        assert!(matches!(
            classifier.verdict_by_shape_in(status, &mut shapes, &mut learned),
            crate::route::ByShape::Other(_)
        ));
    }

    #[test]
    fn an_op_that_varies_within_the_shape_is_decoded_each_time() {
        // Rules that test nothing on `op`: its value is no fixed part of the shape, and a
        // line of the same shape may carry another feed's `op`.
        let rules = RouteRules {
            response: Vec::new(),
            error: Vec::new(),
            ..RouteRules::betfair()
        };
        let head = br#"{"op":"mcm","id":2,"clk":"AAAA01","pt":17,"mc":[]}"#;
        assert!(plan(rules, head).is_general());
    }
}
