//! Where the fast path records the stream positions a Betfair change message carries: a
//! Betfair stream's clocks, or nowhere. The read loop is compiled once for each, so that
//! neither tests per message which kind of stream it serves: a Binance stream's loop has no
//! position code at all, and a Betfair stream's reaches its clocks as directly as when they
//! were part of the stream rather than boxed beside it.

use std::ops::Range;

use super::Feed;
use crate::stream::clocks::Clocks;

/// A token's source and range within it, as [`Clocks::update`] takes it; `None`: absent.
type TokenAt<'a> = Option<(&'a [u8], Range<usize>)>;

/// A Betfair stream's positions by [`Feed`], or none.
pub(super) trait Positions {
    /// [`Clocks::update`] of `feed`'s clocks.
    fn update(&mut self, feed: Feed, message: &[u8], initial_clk: TokenAt<'_>, clk: TokenAt<'_>);

    /// [`Clocks::update_clk`] of the clocks of feed number `feed`.
    fn update_clk(&mut self, feed: usize, message: &[u8], clk: Range<usize>);
}

impl Positions for [Clocks; 2] {
    #[inline(always)]
    fn update(&mut self, feed: Feed, message: &[u8], initial_clk: TokenAt<'_>, clk: TokenAt<'_>) {
        self[feed as usize].update(message, initial_clk, clk);
    }

    #[inline(always)]
    fn update_clk(&mut self, feed: usize, message: &[u8], clk: Range<usize>) {
        self[feed].update_clk(message, clk);
    }
}

/// The positions of a stream without Betfair feeds: nothing is recorded (its rules may
/// still extract an `op` and clocks; nothing would ever read them).
pub(super) struct NoPositions;

impl Positions for NoPositions {
    #[inline(always)]
    fn update(&mut self, _: Feed, _: &[u8], _: TokenAt<'_>, _: TokenAt<'_>) {}

    #[inline(always)]
    fn update_clk(&mut self, _: usize, _: &[u8], _: Range<usize>) {}
}
