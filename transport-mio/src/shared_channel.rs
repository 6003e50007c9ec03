//! Many streams' events into one consumer: the [`event_channel`](crate::event_channel)'s
//! batches and wake-ups, each event tagged with the [`StreamId`] it came from. For an
//! application holding hundreds of streams, one receiver to wait on instead of hundreds.

use std::collections::VecDeque;
use std::sync::Arc;

use feedwire_core::StreamEvent;
use mio::Waker;

use crate::channel::{ReceiverGone, Shared, Stop};
use crate::{Events, StreamId};

/// A bounded channel for the events of many streams, on one loop or several: give each
/// stream a clone of the sender ([`Delivery::Shared`](crate::Delivery::Shared)), take
/// `(StreamId, StreamEvent)` from the receiver on any thread. Each stream's events arrive
/// in its order; those of different streams interleave as the loops read them.
///
/// At most `capacity` events (at least 1) wait, and as many again in the batch the receiver
/// took last; when the channel is full the loops stop reading the streams that have events
/// waiting (their sockets hold the rest) until the receiver takes what waits, which wakes
/// them. The receiver ends once every sender is gone — each stream's after its last event
/// (`Closed`, `Crashed`), and the application's own (drop it once the streams are added).
/// Dropping the receiver stops every stream sending to it, a quiet one too, and any stream
/// added with a sender to it afterwards.
pub fn shared_event_channel(
    capacity: usize,
) -> (SharedEventSender, Events<(StreamId, StreamEvent)>) {
    let shared = Shared::new(capacity);
    (
        SharedEventSender {
            shared: shared.clone(),
            stream: None,
        },
        Events::new(shared),
    )
}

/// The senders' end of a [`shared_event_channel`]: cloned, one for each stream.
pub struct SharedEventSender {
    shared: Arc<Shared<(StreamId, StreamEvent)>>,
    /// The stream this sender delivers for, its attachment's number and its loop's waker,
    /// from when it is added to a loop.
    stream: Option<(StreamId, u64, Arc<Waker>)>,
}

impl SharedEventSender {
    /// Ties this sender to the stream `id` on a loop: `waker` for the consumer to wake the
    /// loop when it makes room, `on_receiver_gone` to stop the stream when the receiver is
    /// dropped (at once if it is gone already).
    pub(crate) fn attach(&mut self, id: StreamId, waker: Arc<Waker>, on_receiver_gone: Stop) {
        if self.stream.is_some() {
            return;
        }
        let number = self.shared.attach(waker.clone(), on_receiver_gone);
        self.stream = Some((id, number, waker));
    }

    /// Moves what fits of `pending` (from its front, tagged with the stream's id) into the
    /// channel, in order; what does not fit stays in `pending`, and the consumer wakes the
    /// loop when it makes room.
    pub(crate) fn send(&self, pending: &mut VecDeque<StreamEvent>) -> Result<(), ReceiverGone> {
        // Attached when the stream was added, before it had any event to send.
        let Some((id, ..)) = self.stream else {
            return Err(ReceiverGone);
        };
        self.shared.send(pending, |e| (id, e))
    }
}

impl Clone for SharedEventSender {
    /// A sender for another stream (not yet tied to one).
    fn clone(&self) -> Self {
        self.shared.add_sender();
        Self {
            shared: self.shared.clone(),
            stream: None,
        }
    }
}

impl Drop for SharedEventSender {
    fn drop(&mut self) {
        let attachment = self.stream.as_ref().map(|(_, n, w)| (*n, w));
        self.shared.detach(attachment);
    }
}

impl std::fmt::Debug for SharedEventSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedEventSender")
            .field("stream", &self.stream.as_ref().map(|(id, ..)| *id))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::TryRecvError;

    use mio::Poll;

    use super::*;
    use crate::channel::test_support::{attempt, event, woken, WAKER};

    fn id(index: u32) -> StreamId {
        StreamId {
            slab: 0,
            index,
            generation: 0,
        }
    }

    fn a_loop() -> (Poll, Arc<Waker>) {
        let poll = Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).unwrap());
        (poll, waker)
    }

    /// A stop that counts its calls.
    fn counted(stops: &Arc<AtomicUsize>) -> Stop {
        let stops = stops.clone();
        Box::new(move || {
            stops.fetch_add(1, Ordering::Relaxed);
        })
    }

    #[test]
    fn events_are_tagged_with_their_stream_and_each_loop_waiting_is_woken() {
        let ((mut poll_a, waker_a), (mut poll_b, waker_b)) = (a_loop(), a_loop());
        let stops = Arc::new(AtomicUsize::new(0));
        let (tx, mut rx) = shared_event_channel(4);
        let (mut one, mut two, mut three) = (tx.clone(), tx.clone(), tx.clone());
        drop(tx);
        one.attach(id(1), waker_a.clone(), counted(&stops));
        two.attach(id(2), waker_a, counted(&stops));
        three.attach(id(3), waker_b, counted(&stops));
        let mut pending_one: VecDeque<_> = (0..3).map(event).collect();
        let mut pending_three: VecDeque<_> = (10..13).map(event).collect();
        one.send(&mut pending_one).unwrap();
        three.send(&mut pending_three).unwrap();
        assert_eq!(pending_three.len(), 2, "one of three fits");
        // A stream whose events all fit does not clear the other's wait.
        two.send(&mut VecDeque::new()).unwrap();
        let (who, e) = rx.try_recv().unwrap();
        assert_eq!((who, attempt(e)), (id(1), 0));
        assert!(woken(&mut poll_a) && woken(&mut poll_b), "both loops woken");
        let rest: Vec<(StreamId, u32)> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|(who, e)| (who, attempt(e)))
            .collect();
        assert_eq!(rest, [(id(1), 1), (id(1), 2), (id(3), 10)]);
        three.send(&mut pending_three).unwrap();
        let rest: Vec<u32> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|(who, e)| {
                assert_eq!(who, id(3));
                attempt(e)
            })
            .collect();
        assert_eq!(rest, [11, 12], "each stream's events in order");
        assert!(!woken(&mut poll_a) && !woken(&mut poll_b), "nobody waited");
        assert_eq!(stops.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn streams_that_come_and_go_leave_nothing_behind() {
        let ((_a, waker_a), (_b, waker_b)) = (a_loop(), a_loop());
        let (tx, _rx) = shared_event_channel(8);
        let mut kept = tx.clone();
        kept.attach(id(0), waker_a.clone(), Box::new(|| {}));
        for n in 1..=1_000 {
            let mut stream = tx.clone();
            let (waker, loops) = if n % 2 == 0 {
                (&waker_a, 1)
            } else {
                (&waker_b, 2)
            };
            stream.attach(id(n), waker.clone(), Box::new(|| {}));
            assert_eq!(tx.shared.attachments(), (2, loops), "a loop's waker once");
        }
        assert_eq!(
            tx.shared.attachments(),
            (1, 1),
            "only the stream still sending"
        );
        drop(kept);
        assert_eq!(tx.shared.attachments(), (0, 0));
    }

    #[test]
    fn the_receiver_ends_once_every_sender_is_gone() {
        let (_poll, waker) = a_loop();
        let (tx, mut rx) = shared_event_channel(8);
        let mut stream = tx.clone();
        stream.attach(id(1), waker, Box::new(|| {}));
        stream.send(&mut VecDeque::from([event(1)])).unwrap();
        drop(stream);
        assert_eq!(attempt(rx.try_recv().unwrap().1), 1);
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty, "one left");
        drop(tx);
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
    }

    #[test]
    fn dropping_the_receiver_stops_the_streams_sending_and_any_attached_later() {
        let (_poll, waker) = a_loop();
        let stops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = shared_event_channel(8);
        let (mut one, mut two, mut gone) = (tx.clone(), tx.clone(), tx.clone());
        one.attach(id(1), waker.clone(), counted(&stops));
        two.attach(id(2), waker.clone(), counted(&stops));
        gone.attach(id(3), waker.clone(), counted(&stops));
        // A stream that ended is not stopped again.
        drop(gone);
        drop(rx);
        assert_eq!(stops.load(Ordering::Relaxed), 2);
        assert!(one.send(&mut VecDeque::from([event(1)])).is_err());
        let mut late = tx.clone();
        late.attach(id(4), waker, counted(&stops));
        assert_eq!(stops.load(Ordering::Relaxed), 3, "stopped as it is added");
    }

    #[test]
    fn a_streams_own_channel_dropped_before_the_stream_is_added_stops_it_as_it_is_added() {
        let (_poll, waker) = a_loop();
        let stops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = crate::event_channel(8);
        drop(rx);
        tx.attach(waker, counted(&stops));
        assert_eq!(stops.load(Ordering::Relaxed), 1);
    }
}
