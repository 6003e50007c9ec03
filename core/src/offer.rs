//! How an embedding stream takes complete messages from an engine's fast path, and the
//! ordering rule both engines follow: a message is offered only while no event is queued
//! ahead of it.

use std::collections::VecDeque;

use bytes::Bytes;

/// What a message offered to a [`Take`] is. A constant at each call site in the engines, so
/// that a taker inlined there keeps only the arms its engine can reach (the line framer's
/// copy of the stream's fast path carries the learned-shape check inline; the WebSocket
/// decoder's, which rarely needs it, calls it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offered {
    /// A WebSocket text message.
    Text,
    /// A WebSocket binary message.
    Binary,
    /// A line (always text).
    Line,
}

impl Offered {
    /// A WebSocket message's kind.
    #[inline(always)]
    pub(crate) fn frame(binary: bool) -> Self {
        if binary {
            Self::Binary
        } else {
            Self::Text
        }
    }
}

/// What the embedding stream does with a complete data message the engine offers it.
///
/// Two ways: owned (the message is a `Bytes` slice of the read buffer, handed back if not
/// taken) and lent (the message is borrowed from the read buffer before the buffer lets go of
/// it, so that taking it costs no slice, no reference count and no queue entry).
pub(crate) trait Take {
    /// Whether the fast lanes lend messages out of the read buffer ([`Take::lend`]) rather
    /// than cutting owned slices for [`Take::take`].
    const LENDS: bool;
    /// A message still in the read buffer; whether it was taken. Called only when `LENDS`.
    fn lend(&mut self, _payload: &[u8], _kind: Offered) -> bool {
        false
    }
    /// An owned message; handed back if not taken.
    fn take(&mut self, payload: Bytes, kind: Offered) -> Option<Bytes>;
}

/// Takes owned messages with `F`, which hands back what it does not take.
pub(crate) struct Owned<F>(pub F);

impl<F: FnMut(Bytes, Offered) -> Option<Bytes>> Take for Owned<F> {
    const LENDS: bool = false;

    #[inline(always)]
    fn take(&mut self, payload: Bytes, kind: Offered) -> Option<Bytes> {
        (self.0)(payload, kind)
    }
}

/// Takes nothing: every message is queued as an event (an engine used on its own).
pub(crate) struct TakeNothing;

impl Take for TakeNothing {
    const LENDS: bool = false;

    fn take(&mut self, payload: Bytes, _: Offered) -> Option<Bytes> {
        Some(payload)
    }
}

/// Borrows messages with `F`, which says whether it took each; owned messages (assembled
/// from fragments, or from the general decoder) are lent too.
pub(crate) struct Lent<F>(pub F);

impl<F: FnMut(&[u8], Offered) -> bool> Take for Lent<F> {
    const LENDS: bool = true;

    #[inline(always)]
    fn lend(&mut self, payload: &[u8], kind: Offered) -> bool {
        (self.0)(payload, kind)
    }

    fn take(&mut self, payload: Bytes, kind: Offered) -> Option<Bytes> {
        (!(self.0)(&payload, kind)).then_some(payload)
    }
}

/// Offers `item` to `take` if `queue` is empty, else queues it (as `wrap(item)`); an item
/// `take` hands back is queued too. Once anything is queued, every later item is queued
/// behind it, so items come out in arrival order whichever way each one went.
#[inline]
pub(crate) fn offer_in_order<T, E>(
    queue: &mut VecDeque<E>,
    item: T,
    take: impl FnOnce(T) -> Option<T>,
    wrap: impl FnOnce(T) -> E,
) {
    let back = if queue.is_empty() {
        take(item)
    } else {
        Some(item)
    };
    if let Some(item) = back {
        queue.push_back(wrap(item));
    }
}
