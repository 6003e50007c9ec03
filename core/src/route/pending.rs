//! Requests awaiting their response: a bounded table of generation-checked slots, indexed by
//! request id, with deadlines in a heap. A request ends exactly once: answered, timed out or
//! cancelled.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;

use crate::error::CorrelationError;

/// A request id we generated, as it goes on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestId {
    /// An integer id (Binance streams, Betfair).
    Int(u64),
    /// A string id (Binance WebSocket API: a UUID).
    Str(Box<str>),
}

impl RequestId {
    /// Appends the id as a JSON token (strings quoted) to `out`.
    pub fn write_json(&self, out: &mut String) {
        use std::fmt::Write as _;
        match self {
            Self::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Self::Str(s) => {
                out.push('"');
                out.push_str(s);
                out.push('"');
            }
        }
    }
}

/// Names one pending request; stale handles (their slot reused) match nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestHandle {
    slot: u32,
    generation: u32,
}

#[derive(Debug)]
struct Entry<T> {
    id: RequestId,
    tag: T,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    entry: Option<Entry<T>>,
}

/// The pending-request table.
#[derive(Debug)]
pub struct PendingRequests<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    by_int: HashMap<u64, u32>,
    by_str: HashMap<Box<str>, u32>,
    /// Deadlines; entries whose slot generation moved on are stale and skipped.
    deadlines: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    capacity: usize,
}

impl<T> PendingRequests<T> {
    /// A table holding at most `capacity` requests at once.
    pub fn new(capacity: usize) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            by_int: HashMap::new(),
            by_str: HashMap::new(),
            deadlines: BinaryHeap::new(),
            capacity,
        }
    }

    /// Requests pending now.
    pub fn len(&self) -> usize {
        self.by_int.len() + self.by_str.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `id` is pending.
    pub fn contains(&self, id: &RequestId) -> bool {
        match id {
            RequestId::Int(n) => self.by_int.contains_key(n),
            RequestId::Str(s) => self.by_str.contains_key(s),
        }
    }

    /// Registers a request answered by `deadline` at the latest.
    pub fn insert(
        &mut self,
        id: RequestId,
        tag: T,
        deadline: Instant,
    ) -> Result<RequestHandle, CorrelationError> {
        if self.contains(&id) {
            return Err(CorrelationError::DuplicateId);
        }
        if self.len() >= self.capacity {
            return Err(CorrelationError::Full {
                capacity: self.capacity,
            });
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    entry: None,
                });
                u32::try_from(self.slots.len() - 1).expect("capacity fits u32")
            }
        };
        let s = &mut self.slots[slot as usize];
        match &id {
            RequestId::Int(n) => self.by_int.insert(*n, slot),
            RequestId::Str(k) => self.by_str.insert(k.clone(), slot),
        };
        s.entry = Some(Entry { id, tag });
        let handle = RequestHandle {
            slot,
            generation: s.generation,
        };
        self.deadlines.push(Reverse((deadline, slot, s.generation)));
        Ok(handle)
    }

    /// Removes and returns the request whose id is `int` or `text`.
    pub fn take_int(&mut self, id: u64) -> Option<(RequestHandle, T)> {
        let slot = *self.by_int.get(&id)?;
        self.remove_slot(slot)
    }

    /// Removes and returns the request whose string id is `id`.
    pub fn take_str(&mut self, id: &str) -> Option<(RequestHandle, T)> {
        let slot = *self.by_str.get(id)?;
        self.remove_slot(slot)
    }

    /// Cancels a request; `None` if it already ended (or the handle is stale).
    pub fn cancel(&mut self, handle: RequestHandle) -> Option<T> {
        let slot = self.slots.get(handle.slot as usize)?;
        if slot.generation != handle.generation || slot.entry.is_none() {
            return None;
        }
        self.remove_slot(handle.slot).map(|(_, tag)| tag)
    }

    /// The earliest pending deadline.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        self.drop_stale_deadlines();
        self.deadlines.peek().map(|Reverse((d, _, _))| *d)
    }

    /// Removes every request whose deadline is at or before `now`, oldest first.
    pub fn expire(
        &mut self,
        now: Instant,
        mut on_expired: impl FnMut(RequestHandle, RequestId, T),
    ) {
        loop {
            self.drop_stale_deadlines();
            match self.deadlines.peek() {
                Some(Reverse((d, slot, _))) if *d <= now => {
                    let slot = *slot;
                    self.deadlines.pop();
                    let handle = RequestHandle {
                        slot,
                        generation: self.slots[slot as usize].generation,
                    };
                    let id = self.slots[slot as usize]
                        .entry
                        .as_ref()
                        .map(|e| e.id.clone());
                    if let (Some(id), Some((_, tag))) = (id, self.remove_slot(slot)) {
                        on_expired(handle, id, tag);
                    }
                }
                _ => return,
            }
        }
    }

    /// Removes every request, oldest deadline first: their connection ended, so no answer
    /// can come.
    pub fn abandon(&mut self, mut on_abandoned: impl FnMut(RequestHandle, RequestId, T)) {
        while let Some(Reverse((_, slot, generation))) = self.deadlines.pop() {
            let s = &self.slots[slot as usize];
            if s.generation != generation {
                continue;
            }
            let id = s.entry.as_ref().map(|e| e.id.clone());
            if let (Some(id), Some((handle, tag))) = (id, self.remove_slot(slot)) {
                on_abandoned(handle, id, tag);
            }
        }
    }

    fn drop_stale_deadlines(&mut self) {
        while let Some(Reverse((_, slot, generation))) = self.deadlines.peek() {
            let s = &self.slots[*slot as usize];
            if s.generation == *generation && s.entry.is_some() {
                return;
            }
            self.deadlines.pop();
        }
    }

    fn remove_slot(&mut self, slot: u32) -> Option<(RequestHandle, T)> {
        let s = &mut self.slots[slot as usize];
        let entry = s.entry.take()?;
        let handle = RequestHandle {
            slot,
            generation: s.generation,
        };
        s.generation = s.generation.wrapping_add(1);
        match &entry.id {
            RequestId::Int(n) => self.by_int.remove(n),
            RequestId::Str(k) => self.by_str.remove(k),
        };
        self.free.push(slot);
        Some((handle, entry.tag))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{PendingRequests, RequestId};

    #[test]
    fn a_request_ends_once_whichever_way_and_the_table_says_what_is_left() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut table = PendingRequests::new(4);
        assert!(table.is_empty());
        let first = table.insert(RequestId::Int(1), "one", at(30)).unwrap();
        table
            .insert(RequestId::Str("b".into()), "two", at(10))
            .unwrap();
        table.insert(RequestId::Int(3), "three", at(20)).unwrap();
        assert_eq!((table.len(), table.is_empty()), (3, false));
        assert!(table.contains(&RequestId::Str("b".into())));

        // Answered: gone, and a second answer or a cancel finds nothing.
        assert_eq!(table.take_int(1).map(|(_, tag)| tag), Some("one"));
        assert_eq!(table.take_int(1), None);
        assert_eq!(table.cancel(first), None);
        assert!(!table.contains(&RequestId::Int(1)));
        // The freed slot is reused; the old handle does not name the new request.
        let fourth = table.insert(RequestId::Int(4), "four", at(40)).unwrap();
        assert_eq!(table.cancel(first), None);
        assert_eq!(table.len(), 3);

        // Timed out, earliest deadline first, at or before `now` only.
        assert_eq!(table.next_deadline(), Some(at(10)));
        let mut expired = Vec::new();
        table.expire(at(20), |_, id, tag| expired.push((id, tag)));
        assert_eq!(
            expired,
            [
                (RequestId::Str("b".into()), "two"),
                (RequestId::Int(3), "three")
            ]
        );
        assert_eq!(table.take_str("b"), None);
        assert_eq!(table.len(), 1);

        // Cancelled; then the connection's end abandons what is left.
        assert_eq!(table.cancel(fourth), Some("four"));
        assert!(table.is_empty());
        assert_eq!(table.next_deadline(), None, "no stale deadline left");
        table.insert(RequestId::Int(5), "five", at(50)).unwrap();
        let mut abandoned = Vec::new();
        table.abandon(|_, id, tag| abandoned.push((id, tag)));
        assert_eq!(abandoned, [(RequestId::Int(5), "five")]);
        assert!(table.is_empty());
    }
}
