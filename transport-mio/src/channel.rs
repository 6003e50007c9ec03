//! A stream's events from its loop to a thread of the application's: bounded, handed over a
//! batch at a time (one lock a socket read on the loop's side, one a batch on the
//! consumer's, not a channel operation a message), and a consumer that makes room wakes the
//! loop at once. The same channel, its events tagged with their stream, serves many streams
//! ([`shared_event_channel`](crate::shared_event_channel)).
//!
//! Why not a std `sync_channel`: its receiver cannot wake the loop, so once a consumer fell
//! behind and the channel filled, the loop could only look again a millisecond later, and
//! every millisecond after that: a consumer that had been behind once got at most `capacity`
//! events a millisecond from then on (64: 59,000 messages a second, from a feed that gives
//! millions), and after any back-pressure the messages waiting in the socket waited up to a
//! millisecond more.

use std::collections::VecDeque;
use std::sync::mpsc::{RecvError, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use feedwire_core::StreamEvent;
use mio::Waker;

/// A bounded channel for one stream's events: give the sender to
/// [`Delivery::Channel`](crate::Delivery::Channel), take the events from the receiver on
/// any thread.
///
/// At most `capacity` events (at least 1) wait in the channel, and as many again in the
/// batch the receiver took last; when the channel is full the loop stops reading the stream
/// (its socket holds the rest) until the receiver takes the waiting events, which wakes it.
/// The receiver's end comes after the stream's last event (`Closed`, `Crashed`); dropping
/// the receiver stops the stream at once, a quiet one too — or, dropped before the stream is
/// added, as it is added.
pub fn event_channel(capacity: usize) -> (EventSender, Events) {
    let shared = Shared::new(capacity);
    (
        EventSender {
            shared: shared.clone(),
        },
        Events::new(shared),
    )
}

pub(crate) struct Shared<T> {
    state: Mutex<State<T>>,
    /// Signalled when events arrive, or the last sender goes, while the consumer waits.
    filled: Condvar,
}

struct State<T> {
    /// INVARIANT: at most `capacity` events.
    queue: VecDeque<T>,
    capacity: usize,
    /// A loop had events the queue had no room for: taking the queue wakes the loops.
    loop_waits: bool,
    /// The consumer sleeps on `filled`: a send signals it (no system call otherwise).
    consumer_waits: bool,
    /// The stream went quiet ([`EventSender::release_room`]): the consumer frees its drained
    /// batch's buffer at its next look, woken for it if it sleeps.
    shrink: bool,
    /// Senders alive: once none is, the receiver ends after the last event waiting.
    senders: usize,
    receiver_gone: bool,
    /// The wakers of the loops whose streams send here, each with the number of its
    /// streams attached (one loop, one stream for a stream's own channel).
    wakers: Vec<(Arc<Waker>, usize)>,
    /// Stops each attached stream still sending, by its attachment's number: a stream whose
    /// receiver went would otherwise run on until its next event found nobody — for a
    /// quiet one, for good, holding its connection (Betfair allows an account a few).
    on_receiver_gone: Vec<(u64, Stop)>,
    /// The next attachment's number.
    next_attachment: u64,
}

/// Stops a stream: a command to its loop.
pub(crate) type Stop = Box<dyn FnOnce() + Send>;

impl<T> Shared<T> {
    /// A channel with one sender.
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                capacity: capacity.max(1),
                loop_waits: false,
                consumer_waits: false,
                shrink: false,
                senders: 1,
                receiver_gone: false,
                wakers: Vec::new(),
                on_receiver_gone: Vec::new(),
                next_attachment: 0,
            }),
            filled: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Nothing panics while the lock is held but an allocation failure; the state stays
        // whole either way.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ties a stream to the channel: `waker` for the consumer to wake its loop when it
    /// makes room, `stop` to stop it when the receiver is dropped — at once if it is gone
    /// already. Returns the attachment's number, for [`detach`](Self::detach).
    pub(crate) fn attach(&self, waker: Arc<Waker>, stop: Stop) -> u64 {
        let mut state = self.lock();
        let number = state.next_attachment;
        state.next_attachment += 1;
        match state
            .wakers
            .iter_mut()
            .find(|(w, _)| Arc::ptr_eq(w, &waker))
        {
            Some((_, streams)) => *streams += 1,
            None => state.wakers.push((waker, 1)),
        }
        if state.receiver_gone {
            drop(state);
            stop();
        } else {
            state.on_receiver_gone.push((number, stop));
        }
        number
    }

    /// A sender goes: its stream's attachment (if any) with it, and with the last sender
    /// the channel's input — a waiting consumer is told.
    pub(crate) fn detach(&self, attachment: Option<(u64, &Arc<Waker>)>) {
        let mut state = self.lock();
        if let Some((number, waker)) = attachment {
            state.on_receiver_gone.retain(|(n, _)| *n != number);
            if let Some(i) = state.wakers.iter().position(|(w, _)| Arc::ptr_eq(w, waker)) {
                state.wakers[i].1 -= 1;
                if state.wakers[i].1 == 0 {
                    state.wakers.swap_remove(i);
                }
            }
        }
        state.senders -= 1;
        let signal = state.senders == 0 && state.consumer_waits;
        drop(state);
        if signal {
            self.filled.notify_one();
        }
    }

    /// Stops held and loops' wakers held, for tests: neither may grow with streams gone.
    #[cfg(test)]
    pub(crate) fn attachments(&self) -> (usize, usize) {
        let state = self.lock();
        (state.on_receiver_gone.len(), state.wakers.len())
    }

    /// One more sender (a clone).
    pub(crate) fn add_sender(&self) {
        self.lock().senders += 1;
    }

    /// Moves what fits of `pending` (from its front, each event through `tag`) into the
    /// channel, in order; what does not fit stays in `pending`, and the consumer wakes the
    /// loop when it makes room.
    pub(crate) fn send(
        &self,
        pending: &mut VecDeque<StreamEvent>,
        tag: impl FnMut(StreamEvent) -> T,
    ) -> Result<(), ReceiverGone> {
        let mut state = self.lock();
        if state.receiver_gone {
            return Err(ReceiverGone);
        }
        let signal = state.put(pending, tag);
        drop(state);
        if signal {
            self.filled.notify_one();
        }
        Ok(())
    }
}

impl<T> State<T> {
    /// Moves what fits of `pending` into the queue; whether the consumer waits for it.
    fn put(
        &mut self,
        pending: &mut VecDeque<StreamEvent>,
        tag: impl FnMut(StreamEvent) -> T,
    ) -> bool {
        let n = (self.capacity - self.queue.len()).min(pending.len());
        self.queue.extend(pending.drain(..n).map(tag));
        // Set, never cleared here: another stream may be waiting for room too.
        self.loop_waits |= !pending.is_empty();
        self.consumer_waits && !self.queue.is_empty()
    }
}

impl Shared<StreamEvent> {
    /// As [`send`](Self::send), untagged: the whole batch, when the queue is empty and it
    /// fits, trades buffers with the queue (the loop keeps the queue's emptied one), no
    /// event moved one by one.
    fn send_own(&self, pending: &mut VecDeque<StreamEvent>) -> Result<(), ReceiverGone> {
        let mut state = self.lock();
        if state.receiver_gone {
            return Err(ReceiverGone);
        }
        let signal = if state.queue.is_empty() && pending.len() <= state.capacity {
            std::mem::swap(&mut state.queue, pending);
            state.consumer_waits && !state.queue.is_empty()
        } else {
            state.put(pending, |e| e)
        };
        drop(state);
        if signal {
            self.filled.notify_one();
        }
        Ok(())
    }
}

/// The loop's end of an [`event_channel`].
pub struct EventSender {
    shared: Arc<Shared<StreamEvent>>,
}

/// The receiver went: the stream has nobody to deliver to.
#[derive(Debug)]
pub(crate) struct ReceiverGone;

impl EventSender {
    /// Ties the channel to its stream's loop: `waker` for the consumer to wake it when it
    /// makes room, `on_receiver_gone` to stop the stream when the receiver is dropped.
    pub(crate) fn attach(&self, waker: Arc<Waker>, on_receiver_gone: Stop) {
        // The channel is the stream's own: it goes with the stream, nothing to detach.
        self.shared.attach(waker, on_receiver_gone);
    }

    /// Moves what fits of `pending` (from its front) into the channel, in order; what does
    /// not fit stays in `pending`, and the consumer wakes the loop when it makes room.
    pub(crate) fn send(&self, pending: &mut VecDeque<StreamEvent>) -> Result<(), ReceiverGone> {
        self.shared.send_own(pending)
    }

    /// The stream went quiet: the buffers its batches travel in are freed where they are
    /// empty — the channel's queue now, the consumer's drained batch at its next look (a
    /// sleeping consumer is woken for it, once a quiet spell). A busy stream's batches
    /// trade these buffers back and forth and allocate none; each holds room for as many
    /// events as a read once brought (72 bytes an event, up to the channel's capacity).
    #[cold]
    pub(crate) fn release_room(&self) {
        let mut state = self.shared.lock();
        if state.queue.is_empty() {
            state.queue = VecDeque::new();
        }
        state.shrink = true;
        let signal = state.consumer_waits;
        drop(state);
        if signal {
            self.shared.filled.notify_one();
        }
    }
}

impl Drop for EventSender {
    fn drop(&mut self) {
        self.shared.detach(None);
    }
}

impl std::fmt::Debug for EventSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventSender")
    }
}

/// Events, in order, from an [`event_channel`] (a stream's) or a
/// [`shared_event_channel`](crate::shared_event_channel) (`T` = `(StreamId, StreamEvent)`).
/// Iterating blocks for each next event and ends after the last, once no sender is left.
pub struct Events<T = StreamEvent> {
    shared: Arc<Shared<T>>,
    /// The events taken from the channel last, handed out one by one.
    batch: VecDeque<T>,
}

impl<T> Events<T> {
    pub(crate) fn new(shared: Arc<Shared<T>>) -> Self {
        Self {
            shared,
            batch: VecDeque::new(),
        }
    }

    /// The next event, waiting for it; `Err` once every sender is gone and every event was
    /// taken.
    pub fn recv(&mut self) -> Result<T, RecvError> {
        self.take(None).map_err(|_| RecvError)
    }

    /// The next event, waiting at most `timeout` for it.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.take(Some(Instant::now() + timeout))
    }

    /// The next event if one waits.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        if let Some(e) = self.batch.pop_front() {
            return Ok(e);
        }
        let mut state = self.shared.lock();
        shrink_if_asked(&mut self.batch, &mut state);
        if state.queue.is_empty() {
            return Err(if state.senders == 0 {
                TryRecvError::Disconnected
            } else {
                TryRecvError::Empty
            });
        }
        take_queue(&mut self.batch, state);
        Ok(self.batch.pop_front().expect("a batch just taken"))
    }

    /// The next event: from the batch, else the channel's whole queue becomes the batch,
    /// waiting until `deadline` (`None`: for ever) for one.
    fn take(&mut self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        if let Some(e) = self.batch.pop_front() {
            return Ok(e);
        }
        let mut state = self.shared.lock();
        loop {
            shrink_if_asked(&mut self.batch, &mut state);
            if !state.queue.is_empty() {
                break;
            }
            if state.senders == 0 {
                return Err(RecvTimeoutError::Disconnected);
            }
            state.consumer_waits = true;
            state = match deadline {
                None => self
                    .shared
                    .filled
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        state.consumer_waits = false;
                        return Err(RecvTimeoutError::Timeout);
                    }
                    self.shared
                        .filled
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
            state.consumer_waits = false;
        }
        take_queue(&mut self.batch, state);
        Ok(self.batch.pop_front().expect("a batch just taken"))
    }
}

/// The consumer's `batch`, drained, gives its buffer back if the loop asked
/// ([`EventSender::release_room`]).
fn shrink_if_asked<T>(batch: &mut VecDeque<T>, state: &mut State<T>) {
    if std::mem::take(&mut state.shrink) {
        *batch = VecDeque::new();
    }
}

/// Takes every waiting event as the `batch` (empty: its buffer goes to the channel for the
/// next ones), and wakes the loops if one waits for the room.
fn take_queue<T>(batch: &mut VecDeque<T>, mut state: MutexGuard<'_, State<T>>) {
    std::mem::swap(batch, &mut state.queue);
    if !state.loop_waits {
        return;
    }
    state.loop_waits = false;
    // A loop that cannot be woken has ended: its streams' senders go with it.
    if let [(only, _)] = state.wakers.as_slice() {
        // The common case, one loop: woken without the lock held, which it may want next.
        let waker = only.clone();
        drop(state);
        let _ = waker.wake();
    } else {
        for (waker, _) in &state.wakers {
            let _ = waker.wake();
        }
    }
}

impl<T> Iterator for Events<T> {
    type Item = T;

    /// Blocks for the next event; `None` after the last.
    fn next(&mut self) -> Option<T> {
        self.recv().ok()
    }
}

impl<T> Drop for Events<T> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.receiver_gone = true;
        // The events and the read blocks their payloads hold go now, not with the streams.
        state.queue = VecDeque::new();
        let stops = std::mem::take(&mut state.on_receiver_gone);
        drop(state);
        for (_, stop) in stops {
            stop();
        }
    }
}

impl<T> std::fmt::Debug for Events<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("batch", &self.batch.len())
            .finish_non_exhaustive()
    }
}

/// What the channels' tests share: numbered events and a loop's poll to see wakes on.
#[cfg(test)]
pub(crate) mod test_support {
    use std::time::Duration;

    use feedwire_core::StreamEvent;
    use mio::{Events as MioEvents, Poll, Token};

    pub(crate) const WAKER: Token = Token(7);

    pub(crate) fn event(n: u32) -> StreamEvent {
        StreamEvent::Connecting { attempt: n }
    }

    pub(crate) fn attempt(e: StreamEvent) -> u32 {
        match e {
            StreamEvent::Connecting { attempt } => attempt,
            other => panic!("{other:?}"),
        }
    }

    /// Whether the loop's poll was woken (not waiting).
    pub(crate) fn woken(poll: &mut Poll) -> bool {
        let mut events = MioEvents::with_capacity(4);
        poll.poll(&mut events, Some(Duration::ZERO)).unwrap();
        events.iter().any(|e| e.token() == WAKER)
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{attempt, event, woken, WAKER};
    use super::*;

    use mio::Poll;

    fn pending(range: std::ops::Range<u32>) -> VecDeque<StreamEvent> {
        range.map(event).collect()
    }

    /// A poll with the channel's sender attached to its waker; the receiver's drop wakes it
    /// too, as the loop's stop command does.
    fn attached(capacity: usize) -> (EventSender, Events, Poll) {
        let poll = Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).unwrap());
        let (tx, rx) = event_channel(capacity);
        let stop = waker.clone();
        tx.attach(
            waker,
            Box::new(move || {
                let _ = stop.wake();
            }),
        );
        (tx, rx, poll)
    }

    #[test]
    fn what_does_not_fit_waits_and_taking_the_queue_wakes_the_loop() {
        let (tx, mut rx, mut poll) = attached(3);
        let mut left = pending(0..5);
        tx.send(&mut left).unwrap();
        assert_eq!(left.len(), 2, "three fit");
        assert!(!woken(&mut poll));
        assert_eq!(attempt(rx.recv().unwrap()), 0);
        assert!(
            woken(&mut poll),
            "the consumer made room: the loop is woken"
        );
        tx.send(&mut left).unwrap();
        assert!(left.is_empty());
        let got: Vec<u32> = (0..4).map(|_| attempt(rx.recv().unwrap())).collect();
        assert_eq!(got, [1, 2, 3, 4], "in order across batches");
        assert!(!woken(&mut poll), "the loop had nothing left: no wake");
    }

    /// A quiet stream's batches give their buffers back: the channel's queue at once, the
    /// consumer's drained batch at its next look, a sleeping consumer woken for it; the
    /// events that follow arrive as ever.
    #[test]
    fn a_quiet_streams_batch_buffers_are_freed() {
        let (tx, mut rx, _poll) = attached(1024);
        let mut loop_side = VecDeque::new();
        // Two rounds: the queue and the consumer's batch each end up with a 500-event buffer.
        for round in 0..2 {
            loop_side.extend(pending(round * 500..round * 500 + 500));
            tx.send(&mut loop_side).unwrap();
            for n in round * 500..round * 500 + 500 {
                assert_eq!(attempt(rx.recv().unwrap()), n);
            }
        }
        assert!(rx.batch.capacity() >= 500);
        assert!(tx.shared.lock().queue.capacity() >= 500);
        let consumer = std::thread::spawn(move || {
            let first = attempt(rx.recv().unwrap());
            (first, rx)
        });
        let until = |what: &str, done: &dyn Fn(&State<StreamEvent>) -> bool| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !done(&tx.shared.lock()) {
                assert!(Instant::now() < deadline, "{what}");
                std::thread::yield_now();
            }
        };
        until("the consumer sleeps", &|s| s.consumer_waits);
        tx.release_room();
        assert_eq!(tx.shared.lock().queue.capacity(), 0, "freed at once");
        // The sleeping consumer takes the request: it is woken, frees its batch, sleeps on.
        until("the consumer is woken for it", &|s| !s.shrink);
        assert!(!consumer.is_finished(), "no event: it sleeps on");
        let mut one = pending(1000..1001);
        tx.send(&mut one).unwrap();
        let (first, rx) = consumer.join().unwrap();
        assert_eq!(first, 1000);
        assert!(rx.batch.capacity() < 500, "{}", rx.batch.capacity());
        assert_eq!(
            tx.shared.lock().queue.capacity(),
            0,
            "the consumer's old batch came back freed"
        );
    }

    /// Through a loop: a stream whose events came in large batches and went quiet frees its
    /// loop's event queue and its channel's, so the next event travels in a small buffer.
    #[test]
    fn a_quiet_stream_on_a_loop_gives_its_event_buffers_back() {
        use feedwire_core::StreamConfig;
        use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
        const COUNT: usize = 3000;
        let srv = ReplayServer::start(ReplayConfig {
            count: Some(COUNT),
            hold_open: true,
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        })
        .unwrap();
        let mut config = StreamConfig::binance_stream(&srv.url());
        config.timeouts.release_read_memory = Some(Duration::from_millis(200));
        let handle = crate::LoopHandle::spawn(crate::MioOptions::default()).unwrap();
        let (tx, mut rx) = event_channel(4096);
        let (id, stats) = handle
            .connect(config, crate::Delivery::Channel(tx))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let next = |rx: &mut Events| {
            let left = deadline.saturating_duration_since(Instant::now());
            rx.recv_timeout(left).expect("an event in time")
        };
        let (mut data, mut largest) = (0, 0);
        while data < COUNT {
            if let StreamEvent::Data { .. } = next(&mut rx) {
                data += 1;
            }
            largest = largest.max(rx.batch.capacity());
        }
        assert!(
            largest >= 64,
            "batches of {largest} events: too small to tell"
        );
        while stats.snapshot(Instant::now()).read_buffer_bytes > 0
            || rx.shared.lock().queue.capacity() > 0
        {
            assert!(Instant::now() < deadline, "never released");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The loop's own queue was freed too: the answer comes in a fresh buffer.
        handle.list_subscriptions(id).unwrap();
        while !matches!(next(&mut rx), StreamEvent::Response { .. }) {}
        assert!(rx.batch.capacity() < 64, "{}", rx.batch.capacity());
        handle.stop(id);
        while !matches!(next(&mut rx), StreamEvent::Closed { .. }) {}
    }

    #[test]
    fn a_loop_with_nothing_left_is_not_woken() {
        let (tx, mut rx, mut poll) = attached(8);
        for round in 0..3 {
            let mut batch = pending(round * 4..round * 4 + 4);
            tx.send(&mut batch).unwrap();
            assert!(batch.is_empty());
            for n in round * 4..round * 4 + 4 {
                assert_eq!(attempt(rx.recv().unwrap()), n);
            }
        }
        assert!(!woken(&mut poll));
    }

    #[test]
    fn at_most_capacity_events_wait_in_the_channel() {
        let (tx, mut rx, _poll) = attached(4);
        let mut left = pending(0..10);
        for _ in 0..3 {
            tx.send(&mut left).unwrap();
        }
        assert_eq!(left.len(), 6, "sends to a full channel move nothing");
        // The receiver takes the four as its batch; four more fit behind them.
        assert_eq!(attempt(rx.try_recv().unwrap()), 0);
        tx.send(&mut left).unwrap();
        assert_eq!(left.len(), 2);
        let got: Vec<u32> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(attempt)
            .collect();
        assert_eq!(got, [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);
    }

    #[test]
    fn the_receiver_ends_after_the_last_event_once_the_sender_is_gone() {
        let (tx, mut rx, _poll) = attached(4);
        tx.send(&mut pending(0..2)).unwrap();
        drop(tx);
        assert_eq!(attempt(rx.recv().unwrap()), 0);
        assert_eq!(attempt(rx.recv().unwrap()), 1);
        assert_eq!(rx.recv(), Err(RecvError));
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap_err(),
            RecvTimeoutError::Disconnected
        );
    }

    #[test]
    fn a_dropped_receiver_refuses_sends_and_stops_the_stream() {
        for events in [0, 3] {
            let (tx, rx, mut poll) = attached(1);
            let mut left = pending(0..events);
            tx.send(&mut left).unwrap();
            assert!(!woken(&mut poll));
            drop(rx);
            assert!(woken(&mut poll), "{events} events: told to stop the stream");
            assert!(tx.send(&mut left).is_err());
        }
    }

    #[test]
    fn recv_timeout_waits_then_times_out() {
        let (_tx, mut rx, _poll) = attached(1);
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(20)).unwrap_err(),
            RecvTimeoutError::Timeout
        );
    }

    #[test]
    fn a_waiting_consumer_gets_events_sent_from_another_thread() {
        let (tx, rx, _poll) = attached(16);
        let producer = std::thread::spawn(move || {
            let mut left = VecDeque::new();
            for n in 0..10_000 {
                left.push_back(event(n));
                if n % 7 == 0 {
                    while !left.is_empty() {
                        tx.send(&mut left).unwrap();
                        std::thread::yield_now();
                    }
                }
            }
            while !left.is_empty() {
                tx.send(&mut left).unwrap();
                std::thread::yield_now();
            }
            tx.send(&mut VecDeque::from([StreamEvent::Authenticated]))
                .unwrap();
        });
        let got: Vec<StreamEvent> = rx.collect();
        producer.join().unwrap();
        assert_eq!(got.len(), 10_001);
        for (n, e) in got.into_iter().take(10_000).enumerate() {
            assert_eq!(attempt(e), n as u32);
        }
    }

    /// What the loop and the consumer do to the channel, in any order.
    #[derive(Debug, Clone)]
    enum Op {
        /// The loop reads this many events and delivers what waits.
        Read(usize),
        /// The loop delivers what waits (a turn after a wake).
        Deliver,
        /// The consumer takes one event if one is there.
        Take,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0usize..12).prop_map(Op::Read),
            Just(Op::Deliver),
            Just(Op::Take),
            Just(Op::Take),
        ]
    }

    proptest::proptest! {
        /// However the loop's reads and the consumer's takes interleave: every event arrives
        /// once and in order, at most `capacity` wait in the channel, and whenever the loop
        /// is left waiting for room the consumer's next take of the channel wakes it.
        #[test]
        fn any_interleaving_delivers_in_order_within_the_bound_and_wakes_a_waiting_loop(
            capacity in 1usize..8,
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let (tx, mut rx, mut poll) = attached(capacity);
            let (mut next, mut expected) = (0u32, 0u32);
            let mut pending = VecDeque::new();
            for op in ops {
                match op {
                    Op::Read(n) => {
                        pending.extend((next..next + n as u32).map(event));
                        next += n as u32;
                        tx.send(&mut pending).unwrap();
                    }
                    Op::Deliver => tx.send(&mut pending).unwrap(),
                    Op::Take => {
                        let waited = !pending.is_empty();
                        let batch_empty = rx.batch.is_empty();
                        let queued = tx.shared.lock().queue.len();
                        if let Ok(e) = rx.try_recv() {
                            proptest::prop_assert_eq!(attempt(e), expected);
                            expected += 1;
                        }
                        // Taking a new batch with the loop waiting must wake it.
                        let took_queue = batch_empty && queued > 0;
                        proptest::prop_assert_eq!(woken(&mut poll), waited && took_queue);
                    }
                }
                proptest::prop_assert!(tx.shared.lock().queue.len() <= capacity);
            }
            // Everything sent arrives once the loop delivers what was left.
            loop {
                tx.send(&mut pending).unwrap();
                match rx.try_recv() {
                    Ok(e) => {
                        proptest::prop_assert_eq!(attempt(e), expected);
                        expected += 1;
                    }
                    Err(_) if pending.is_empty() => break,
                    Err(_) => {}
                }
            }
            proptest::prop_assert_eq!(expected, next);
        }
    }
}
