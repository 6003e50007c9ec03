//! Answers a caller awaits. Both adapters let an application send a request and await its
//! answer (a SUBSCRIBE's result): they keep the caller's reply handle under the request's id
//! and, as the stream's events come out, hand the answer — or its timeout — to that handle
//! instead of the event queue. The routing is the same whatever the handle is (a tokio
//! oneshot, a std channel), so it lives here, generic over the handle.

use std::collections::HashMap;

use bytes::Bytes;

use super::event::StreamEvent;
use crate::route::RequestId;

/// How a request someone awaits ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The server answered.
    Response {
        /// Id the request was sent with.
        id: RequestId,
        /// The response (zero-copy).
        payload: Bytes,
        /// It reports an error.
        is_error: bool,
    },
    /// No answer came in time.
    TimedOut,
    /// The connection ended before an answer came.
    Lost,
}

/// Reply handles of `R` by request id: the requests whose answers a caller awaits.
///
/// INVARIANT: an id is here from [`insert`](Self::insert) until its answer or timeout is
/// [`claim`](Self::claim)ed, or until [`clear`](Self::clear); each handle is used at most once.
#[derive(Debug)]
pub struct AwaitedAnswers<R> {
    waiting: HashMap<RequestId, R>,
}

impl<R> Default for AwaitedAnswers<R> {
    fn default() -> Self {
        Self {
            waiting: HashMap::new(),
        }
    }
}

impl<R> AwaitedAnswers<R> {
    /// No request awaited.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether no caller awaits anything (then every event is the queue's).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// A caller awaits the answer to request `id` through `reply`.
    pub fn insert(&mut self, id: RequestId, reply: R) {
        self.waiting.insert(id, reply);
    }

    /// Routes one of the stream's events: the answer to (or the timeout of) an awaited request
    /// goes to `answer` with the caller's handle, and `None` comes back; any other event
    /// comes back for the queue — among them answers nobody awaits, as the stream made them.
    #[inline]
    pub fn claim(
        &mut self,
        event: StreamEvent,
        answer: impl FnOnce(R, Answer),
    ) -> Option<StreamEvent> {
        let id = match &event {
            StreamEvent::Response { id, .. }
            | StreamEvent::RequestTimedOut { id, .. }
            | StreamEvent::RequestLost { id, .. } => id,
            _ => return Some(event),
        };
        let Some(reply) = self.waiting.remove(id) else {
            return Some(event);
        };
        match event {
            StreamEvent::Response {
                id,
                payload,
                is_error,
                ..
            } => answer(
                reply,
                Answer::Response {
                    id,
                    payload,
                    is_error,
                },
            ),
            StreamEvent::RequestLost { .. } => answer(reply, Answer::Lost),
            _ => answer(reply, Answer::TimedOut),
        }
        None
    }

    /// Drops every handle: the stream ended, and a dropped handle tells its caller so.
    pub fn clear(&mut self) {
        self.waiting.clear();
    }

    /// Takes every handle, for a transport to answer their callers itself (a stream it
    /// dropped, where a dropped handle would say something else).
    pub fn take_all(&mut self) -> impl Iterator<Item = R> + '_ {
        self.waiting.drain().map(|(_, reply)| reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::event::RequestKind;

    fn response(id: RequestId) -> StreamEvent {
        StreamEvent::Response {
            id,
            kind: Box::new(RequestKind::Subscribe(vec!["btcusdt@aggTrade".into()])),
            payload: Bytes::from_static(b"{\"result\":null,\"id\":7}"),
            is_error: false,
        }
    }

    #[test]
    fn awaited_answers_and_timeouts_go_to_their_callers_once_and_the_rest_comes_back() {
        let mut awaited = AwaitedAnswers::new();
        let (answered, timed_out, unawaited) = (
            RequestId::Int(7),
            RequestId::Int(8),
            RequestId::Str("9".into()),
        );
        awaited.insert(answered.clone(), "answered");
        awaited.insert(timed_out.clone(), "timed out");
        let mut got = Vec::new();
        let mut claim = |awaited: &mut AwaitedAnswers<&'static str>, event| {
            awaited.claim(event, |reply, answer| got.push((reply, answer)))
        };

        assert_eq!(
            claim(&mut awaited, response(unawaited.clone())),
            Some(response(unawaited))
        );
        let data = StreamEvent::Data {
            payload: Bytes::from_static(b"{}"),
            heartbeat: false,
            received: std::time::Instant::now(),
        };
        assert_eq!(claim(&mut awaited, data.clone()), Some(data));
        assert_eq!(claim(&mut awaited, response(answered.clone())), None);
        let timeout = |id| StreamEvent::RequestTimedOut {
            id,
            kind: RequestKind::Subscribe(vec!["btcusdt@aggTrade".into()]),
        };
        assert_eq!(claim(&mut awaited, timeout(timed_out)), None);
        assert!(awaited.is_empty());
        // Claimed once: a second answer under the same id is the queue's.
        assert_eq!(
            claim(&mut awaited, response(answered.clone())),
            Some(response(answered.clone()))
        );
        assert_eq!(
            got,
            [
                (
                    "answered",
                    Answer::Response {
                        id: answered,
                        payload: Bytes::from_static(b"{\"result\":null,\"id\":7}"),
                        is_error: false,
                    }
                ),
                ("timed out", Answer::TimedOut),
            ]
        );
    }

    #[test]
    fn a_lost_request_goes_to_its_caller_as_lost() {
        let mut awaited = AwaitedAnswers::new();
        assert!(awaited.is_empty());
        awaited.insert(RequestId::Int(3), "lost");
        assert!(!awaited.is_empty(), "a caller awaits request 3");
        let mut got = Vec::new();
        let lost = StreamEvent::RequestLost {
            id: RequestId::Int(3),
            kind: RequestKind::Request("time".into()),
        };
        assert_eq!(
            awaited.claim(lost, |reply, answer| got.push((reply, answer))),
            None
        );
        assert_eq!(got, [("lost", Answer::Lost)]);
        assert!(awaited.is_empty());
    }

    #[test]
    fn clear_drops_the_handles() {
        let mut awaited = AwaitedAnswers::new();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        awaited.insert(RequestId::Int(1), tx);
        awaited.clear();
        assert!(awaited.is_empty());
        assert!(rx.recv().is_err(), "the caller learns nobody will answer");
    }

    #[test]
    fn take_all_hands_every_handle_over() {
        let mut awaited = AwaitedAnswers::new();
        awaited.insert(RequestId::Int(1), "one");
        awaited.insert(RequestId::Int(2), "two");
        let mut taken: Vec<_> = awaited.take_all().collect();
        taken.sort_unstable();
        assert_eq!(taken, ["one", "two"]);
        assert!(awaited.is_empty());
    }
}
