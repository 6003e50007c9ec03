//! Stable stream ids: a slab whose slots carry a generation, so a late event or command for a
//! closed stream never reaches the stream that reused its slot.

/// Generations wrap within 31 bits.
pub(crate) const GENERATION_MASK: u32 = 0x7FFF_FFFF;

/// Entries addressed by `(index, generation)`.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    pub(crate) fn insert(&mut self, value: T) -> (u32, u32) {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 streams")
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.1 = Some(value);
        (index, slot.0)
    }

    pub(crate) fn get_mut(&mut self, index: u32, generation: u32) -> Option<&mut T> {
        match self.slots.get_mut(index as usize) {
            Some((g, Some(v))) if *g == generation => Some(v),
            _ => None,
        }
    }

    pub(crate) fn remove(&mut self, index: u32, generation: u32) -> Option<T> {
        match self.slots.get_mut(index as usize) {
            Some((g, value @ Some(_))) if *g == generation => {
                // 31 bits: the top bit of a 64-bit token marks the application's own sources.
                *g = g.wrapping_add(1) & GENERATION_MASK;
                self.free.push(index);
                value.take()
            }
            _ => None,
        }
    }

    /// Live `(index, generation)` pairs.
    pub(crate) fn ids(&self) -> Vec<(u32, u32)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, (_, v))| v.is_some())
            .map(|(i, (g, _))| (i as u32, *g))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_slot_does_not_answer_to_the_old_id() {
        let mut s = Slab::default();
        let (i, g) = s.insert("a");
        assert_eq!(s.remove(i, g), Some("a"));
        let (j, h) = s.insert("b");
        assert_eq!(i, j);
        assert_ne!(g, h);
        assert!(s.get_mut(i, g).is_none());
        assert_eq!(s.get_mut(j, h), Some(&mut "b"));
    }
}
