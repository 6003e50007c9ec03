//! Stable stream ids: a slab whose slots carry a generation, so a late event or command for a
//! closed stream never reaches the stream that reused its slot, and which carries a number
//! of its own, so that an id from another loop never reaches a stream of this one.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::StreamId;

/// The next slab's number.
static NEXT_SLAB: AtomicU32 = AtomicU32::new(0);

/// Generations wrap within 31 bits.
pub(crate) const GENERATION_MASK: u32 = 0x7FFF_FFFF;

/// Entries addressed by [`StreamId`]: this slab's number, a slot's index and generation.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    /// Distinct from every other slab's in the process (until 2^32 loops were made).
    number: u32,
    /// Each entry in an allocation of its own: a stream's is about 4 KB, and slots in place
    /// would hold room for up to twice the streams (the vector grows by doubling: 6.8 KB a
    /// stream at 300 streams), keep a closed stream's room for good, and move every entry at
    /// each growth. A slot is 16 bytes.
    slots: Vec<(u32, Option<Box<T>>)>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            number: NEXT_SLAB.fetch_add(1, Ordering::Relaxed),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// The id of this slab's slot `index` in its `generation` (from a token or a timer).
    pub(crate) fn id(&self, index: u32, generation: u32) -> StreamId {
        StreamId {
            slab: self.number,
            index,
            generation,
        }
    }

    pub(crate) fn insert(&mut self, value: T) -> StreamId {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 streams")
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.1 = Some(Box::new(value));
        let generation = slot.0;
        self.id(index, generation)
    }

    pub(crate) fn get_mut(&mut self, id: StreamId) -> Option<&mut T> {
        if id.slab != self.number {
            return None;
        }
        match self.slots.get_mut(id.index as usize) {
            Some((g, Some(v))) if *g == id.generation => Some(&mut **v),
            _ => None,
        }
    }

    pub(crate) fn remove(&mut self, id: StreamId) -> Option<T> {
        if id.slab != self.number {
            return None;
        }
        match self.slots.get_mut(id.index as usize) {
            Some((g, value @ Some(_))) if *g == id.generation => {
                // 31 bits: the top bit of a 64-bit token marks the application's own sources.
                *g = g.wrapping_add(1) & GENERATION_MASK;
                self.free.push(id.index);
                value.take().map(|v| *v)
            }
            _ => None,
        }
    }

    /// The live entries' ids.
    pub(crate) fn ids(&self) -> Vec<StreamId> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, (_, v))| v.is_some())
            .map(|(i, (g, _))| self.id(i as u32, *g))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_slot_does_not_answer_to_the_old_id() {
        let mut s = Slab::default();
        let a = s.insert("a");
        assert_eq!(s.remove(a), Some("a"));
        let b = s.insert("b");
        assert_eq!(a.index, b.index);
        assert_ne!(a.generation, b.generation);
        assert!(s.get_mut(a).is_none());
        assert_eq!(s.get_mut(b), Some(&mut "b"));
    }

    #[test]
    fn a_stale_id_removes_nothing_and_generations_wrap_within_31_bits() {
        let mut s = Slab::default();
        let mut stale = Vec::new();
        for i in 0..100 {
            let id = s.insert(i);
            for old in &stale {
                assert!(s.remove(*old).is_none(), "{old:?} removed {id:?}'s entry");
                assert!(s.get_mut(*old).is_none());
            }
            assert_eq!(s.remove(id), Some(i));
            stale.push(id);
        }
        let generations: std::collections::HashSet<u32> =
            stale.iter().map(|id| id.generation).collect();
        assert_eq!(
            generations.len(),
            stale.len(),
            "each use of the slot its own"
        );
        // At the last 31-bit generation the next is 0 again, never a token's top bit.
        let id = s.insert(0);
        s.slots[id.index as usize].0 = GENERATION_MASK;
        assert_eq!(s.remove(s.id(id.index, GENERATION_MASK)), Some(0));
        assert_eq!(s.insert(1).generation, 0);
    }

    #[test]
    fn an_id_from_another_slab_reaches_nothing() {
        let (mut one, mut other) = (Slab::default(), Slab::default());
        let a = one.insert("a");
        let b = other.insert("b");
        assert_eq!((a.index, a.generation), (b.index, b.generation));
        assert_ne!(a, b, "ids of two loops differ");
        assert!(one.get_mut(b).is_none());
        assert!(other.remove(a).is_none());
        assert_eq!(one.get_mut(a), Some(&mut "a"));
        assert_eq!(other.get_mut(b), Some(&mut "b"));
    }
}
