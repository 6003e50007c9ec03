//! The ordering rule shared by both engines' fast paths: a complete message is offered to the
//! embedding stream only while no event is queued ahead of it.

use std::collections::VecDeque;

/// Offers `item` to `take` if `queue` is empty, else queues it (as `wrap(item)`); an item
/// `take` hands back is queued too. Once anything is queued, every later item is queued
/// behind it, so items come out in arrival order whichever way each one went.
#[inline]
pub(crate) fn offer_in_order<T, E>(
    queue: &mut VecDeque<E>,
    item: T,
    take: &mut impl FnMut(T) -> Option<T>,
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
