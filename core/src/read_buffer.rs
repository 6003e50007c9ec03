//! The engine-owned read buffer: the transport reads into [`ReadBuffer::read_buf`] (at most
//! `max_read_size` bytes per read) and the engine hands out complete messages as zero-copy
//! [`Bytes`] slices of it.
//!
//! Read size: reads start at [`INITIAL_READ_SIZE`] and grow each time a read fills all it was
//! offered, up to `max_read_size`: an offer of bytes ([`ReadBuffer::read_buf`], zeroed where
//! new, so every byte offered is memory touched) doubles; an offer of uninitialised room
//! ([`ReadBuffer::read_spare`], where only the bytes a read writes are touched) goes to
//! `max_read_size` at once, so a busy stream's second read is already a full one. Reads that
//! stay small shrink it again: the owner reviews it once a period
//! ([`ReadBuffer::review_read_size`]; the stream does every `release_read_memory`), and if no
//! read since the last review took more than a quarter of it, it falls to the power of two at
//! least twice the largest of them. A quiet stream (a handshake, then heartbeats) so holds a
//! few KiB, and a stream that had a burst does not keep a burst's read size — nor, when it
//! queues its messages, walk a burst-sized block with small reads, touching all of it — while
//! a busy one, whose reads in a period include large ones, keeps its size and its block.
//! Releasing the block when idle starts the ramp again.
//!
//! Memory: the buffer is a block of `2 × read size` bytes, allocated on the first read.
//! When the space after the unconsumed bytes is smaller than one read, the unconsumed bytes
//! (at most one partial frame) move to the block's front if nothing in front of them is
//! still held, else to a fresh block, and the old block is freed once the application drops
//! the last message that points into it. A read that starts inside a frame of known length
//! over [`SMALL_PARTIAL`] bytes ends at that frame's end: no part of the next frame is left
//! over to move, and a lending stream's next read starts at the block's front. A block
//! nothing was cut from (every message lent) grows in place as reads ramp up: one allocation
//! faulted in, not one per doubling. A frame larger than a block gets a block of exactly its
//! size; the block after it is normal-sized again, so one large message never doubles the
//! buffer for good.
//!
//! Zero-fill: handing out `&mut [u8]` without `unsafe` needs initialised bytes. Each byte of
//! a block is zeroed once, right before it is first offered; bytes offered but not filled by a
//! short read are offered again without zeroing. A block whose messages were lent rather than
//! cut out ([`ReadBuffer::discard`]) stays whole and initialised: the next read starts at its
//! front again (or right after the partial frame, moved there), with nothing to zero — only
//! cutting out owned messages gives up a block's front for good, and the next lap of a queueing
//! stream zeroes every byte again (a `memset` a byte read: 5-11% of a queued message's cost in
//! memory). A transport that can write into uninitialised memory (a `recv` into a `BufMut`'s
//! spare room) takes [`ReadBuffer::read_spare`] instead: the same room, never zeroed.

use bytes::{BufMut, Bytes, BytesMut};

use crate::config::MAX_READ_SIZE;
use crate::read_room::ReadSpare;

/// Bytes offered by the first read of a fresh (or released) buffer.
pub(crate) const INITIAL_READ_SIZE: usize = 1024;

/// Largest partial frame (bytes) moved to the block's front before every read, when the
/// bytes in front of it were lent.
const SMALL_PARTIAL: usize = 16 * 1024;

/// Blocks kept for reuse after the reader moved on from them.
const RETIRED_BLOCKS: usize = 2;

/// Largest block (bytes) allocated for a frame of known length before its bytes arrive. A
/// declared length is only the peer's word: past this, the block grows with what has
/// arrived (twice that), so that a header declaring 2^62 bytes under a limit of `usize::MAX`
/// costs what the peer actually sends, not an allocation that aborts the process. Above the
/// default `max_frame_size` (16 MiB), so frames within the defaults get their block at once.
const FRAME_PRESIZE: usize = 32 * 1024 * 1024;

#[derive(Debug)]
pub(crate) struct ReadBuffer {
    /// INVARIANT: `start + filled <= buf.len() <= buf.capacity()`. `buf[start..start + filled]`
    /// is unconsumed input; `buf[start + filled..]` is initialised spare space that can be
    /// offered without zeroing.
    buf: BytesMut,
    /// Bytes at the front of `buf` lent and discarded, not cut off: written over by the next
    /// reads, or cut off (`advance`) before an owned message is cut out.
    start: usize,
    filled: usize,
    max_read_size: usize,
    /// Bytes offered per read now: `INITIAL_READ_SIZE` (capped by `max_read_size`), grown
    /// after every read that filled its whole offer (doubled, or for uninitialised room
    /// raised to `max_read_size`), shrunk by a review that found only small reads; never
    /// above `max_read_size`, never below the initial size.
    read_size: usize,
    /// Length of the slice the last `read_buf` handed out.
    offered: usize,
    /// The last offer was uninitialised room (`read_spare`), not bytes.
    offered_spare: bool,
    /// The largest read since the last review of the read size, bytes.
    read_peak: usize,
    /// Blocks left behind, oldest first, kept for reuse once their messages are dropped
    /// (at most [`RETIRED_BLOCKS`]).
    retired: Vec<BytesMut>,
    /// The capacities of `retired`, summed (bytes): kept rather than summed when asked, as
    /// the stream's statistics ask after every read.
    retained: usize,
    /// Total bytes of the frame that starts at offset 0, when its header has been parsed and
    /// it is still incomplete (exact); or the size to grow to for a message of unknown length
    /// (not exact); 0 when nothing is pending.
    frame_hint: usize,
    hint_is_exact: bool,
    /// No message has been cut out of the block (`consume`) since it was allocated: it is
    /// not shared, so it can grow in place.
    uncut: bool,
}

impl ReadBuffer {
    /// A buffer offering at most `max_read_size` bytes a read, capped at
    /// [`MAX_READ_SIZE`] (a `WsConfig` past it is refused; a `LineClient` built directly is
    /// held to it here, where a block twice the read size must fit a `usize`).
    pub(crate) fn new(max_read_size: usize) -> Self {
        assert!(
            max_read_size > 0,
            "max_read_size must be validated as non-zero"
        );
        let max_read_size = max_read_size.min(MAX_READ_SIZE);
        Self {
            buf: BytesMut::new(),
            start: 0,
            filled: 0,
            max_read_size,
            read_size: INITIAL_READ_SIZE.min(max_read_size),
            offered: 0,
            offered_spare: false,
            read_peak: 0,
            retired: Vec::new(),
            retained: 0,
            frame_hint: 0,
            hint_is_exact: true,
            uncut: true,
        }
    }

    fn block_size(&self) -> usize {
        (2 * self.read_size).max(INITIAL_READ_SIZE)
    }

    /// The block is more than twice what the pending frame and one read need: left by a
    /// large frame, or by reads that have since shrunk.
    fn oversized(&self) -> bool {
        self.buf.capacity() > 2 * self.block_size().max(self.frame_room())
    }

    /// Writable space for the next read: at most `max_read_size` bytes, never empty.
    #[inline]
    pub(crate) fn read_buf(&mut self) -> &mut [u8] {
        // Between messages of a stream that keeps up (a paced stream, every read): nothing
        // buffered, nothing pending, the block already initialised for a full read and of
        // normal size. What the general path below would offer then, without its checks.
        let read_size = self.read_size;
        self.offered_spare = false;
        if self.start == 0
            && self.filled == 0
            && self.frame_hint == 0
            && read_size <= self.buf.len()
            && self.buf.capacity() <= 2 * self.block_size()
        {
            self.offered = read_size;
            return &mut self.buf[..read_size];
        }
        self.prepare_read()
    }

    /// [`read_buf`](Self::read_buf)'s room as uninitialised spare capacity, never zeroed: the
    /// block's length ends where the unconsumed bytes do, and the limit is the offer (at most
    /// `max_read_size` bytes, never 0, all within the block's capacity, so writing it never
    /// reallocates). The transport writes through [`BufMut`], which advances the length by
    /// what it wrote; [`commit`](Self::commit) then takes up to that many.
    #[inline]
    pub(crate) fn read_spare(&mut self) -> ReadSpare<'_> {
        // `read_buf`'s fast case, the block's capacity standing for its initialised length.
        let read_size = self.read_size;
        self.offered_spare = true;
        let (from, end) = if self.start == 0
            && self.filled == 0
            && self.frame_hint == 0
            && read_size <= self.buf.capacity()
            && self.buf.capacity() <= 2 * self.block_size()
        {
            (0, read_size)
        } else {
            self.prepare_spare()
        };
        self.buf.truncate(from);
        self.offered = end - from;
        (&mut self.buf).limit(end - from)
    }

    /// [`read_spare`](Self::read_spare)'s room when the block must change first or the read
    /// is not a plain full one: where the offer starts and ends in the block.
    #[inline(never)]
    fn prepare_spare(&mut self) -> (usize, usize) {
        self.make_room()
    }

    /// [`read_buf`](Self::read_buf) when the block must change first or the read is not a
    /// plain full one: kept out of line so that the common case is a few inlined checks.
    #[inline(never)]
    fn prepare_read(&mut self) -> &mut [u8] {
        let (from, end) = self.make_room();
        if self.buf.len() < end {
            self.buf.resize(end, 0);
        }
        self.offered = end - from;
        &mut self.buf[from..end]
    }

    /// Makes room in the block for the next read; where the offer starts (the end of the
    /// unconsumed bytes) and ends, within the block's capacity.
    #[inline(always)]
    fn make_room(&mut self) -> (usize, usize) {
        // Lent bytes in front of a small partial frame: the partial moves to the front now
        // (a copy of at most `SMALL_PARTIAL` bytes), so reads keep landing in the block's
        // first `read size` bytes, still in cache from the last lap, instead of walking the
        // whole block through memory the caches have let go of.
        let lent_in_front = self.start > 0;
        if self.filled <= SMALL_PARTIAL {
            if self.oversized() {
                // Grown for a large frame that is done now, or for reads that have shrunk
                // since: a block of normal size again, so one large message or one burst
                // never holds its memory for good (and a queueing stream's small reads do
                // not walk a large block, touching all of it).
                if self.uncut {
                    self.move_to_normal_block();
                } else {
                    self.leave_oversized_block();
                }
            } else if lent_in_front {
                self.move_partial_to_front();
            }
        }
        // A frame of known length has its block already: read it at full size.
        let cap = if self.hint_is_exact && self.frame_hint > self.filled {
            self.max_read_size
        } else {
            self.read_size
        };
        // Room wanted for one read: a full read, or just the rest of a known-length frame.
        let want = if self.frame_hint > self.filled {
            (self.frame_hint - self.filled).min(cap)
        } else {
            cap
        };
        // With lent bytes in front, never less than a full read while the partial frame is
        // small: moving a few KB within the block costs less than the extra system call
        // (µs) a read shrunk to the block's tail costs. (Owned messages keep the old rule:
        // moving them means another block, and the application may still hold this one.)
        let want = if lent_in_front && self.filled <= self.read_size / 4 {
            want.max(self.read_size)
        } else {
            want
        };
        let known_frame_outgrows_block =
            self.hint_is_exact && self.frame_room() > self.buf.capacity();
        if self.buf.capacity() - (self.start + self.filled) < want || known_frame_outgrows_block {
            if self.start > 0
                && !known_frame_outgrows_block
                && self.buf.capacity() - self.filled >= want
            {
                // Lent bytes in front: the partial frame moves over them, in the block.
                self.move_partial_to_front();
            } else {
                // Room for the unconsumed bytes and one read, at least a block.
                let size = self
                    .block_size()
                    .max(self.frame_room())
                    .max(self.filled + want);
                if self.uncut && self.buf.capacity() < size {
                    self.grow_in_place(size);
                } else {
                    self.cut_front();
                    if !self.reclaim(size) {
                        self.move_to_fresh_block(size, true);
                    }
                }
            }
        }
        let from = self.start + self.filled;
        let mut end = (from + cap).min(self.buf.capacity());
        if self.hint_is_exact && self.frame_hint > SMALL_PARTIAL.max(self.filled) {
            // A large frame's rest: the read stops at its end, so nothing is left unconsumed
            // and the next read starts at the block's front. A read running past it would
            // end in the next frame, whose partial (up to a frame, hundreds of KB) is copied
            // to the front when the block runs out — a copy per lap for a system call per
            // frame at most.
            end = end.min(self.start + self.frame_hint);
        }
        (from, end)
    }

    /// The block the pending frame or message wants now, bytes: the frame hint, but for a
    /// known length past [`FRAME_PRESIZE`] no more than twice what has arrived.
    fn frame_room(&self) -> usize {
        if self.hint_is_exact {
            self.frame_hint
                .min(FRAME_PRESIZE.max(self.filled.saturating_mul(2)))
        } else {
            self.frame_hint
        }
    }

    /// Records that the transport wrote `n` bytes at the start of the last `read_buf` (or
    /// through the last `read_spare`, which advanced the block's length past them).
    #[inline]
    pub(crate) fn commit(&mut self, n: usize) {
        assert!(
            self.start + self.filled + n <= self.buf.len(),
            "commit({n}) exceeds the bytes written into what read_buf or read_spare handed out"
        );
        self.filled += n;
        self.read_peak = self.read_peak.max(n);
        if n == self.offered {
            self.read_size = if self.offered_spare {
                self.max_read_size
            } else {
                (2 * self.read_size).min(self.max_read_size)
            };
        }
    }

    /// Reviews the read size, once a period (the caller's: the stream's is its
    /// `release_read_memory`): if no read since the last review took more than a quarter of
    /// it, it shrinks to the power of two at least twice the largest of them (at least the
    /// initial size), and the block follows at the next read (a block more than twice the
    /// new size is left for one of normal size). The retired blocks go at once: sized for
    /// the reads before, they would not be reused, and a slow trickle may take long to
    /// push them out. Returns whether it shrank.
    pub(crate) fn review_read_size(&mut self) -> bool {
        let fits = (2 * self.read_peak)
            .next_power_of_two()
            .max(INITIAL_READ_SIZE.min(self.max_read_size));
        self.read_peak = 0;
        if 2 * fits > self.read_size {
            return false;
        }
        self.read_size = fits;
        self.retired = Vec::new();
        self.retained = 0;
        true
    }

    #[cfg(test)]
    fn extend(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let dst = self.read_buf();
            let n = dst.len().min(data.len());
            dst[..n].copy_from_slice(&data[..n]);
            self.commit(n);
            data = &data[n..];
        }
    }

    /// Unconsumed input.
    pub(crate) fn filled(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.filled]
    }

    /// Removes the first `n` unconsumed bytes and returns them, zero-copy.
    pub(crate) fn consume(&mut self, n: usize) -> Bytes {
        assert!(
            n <= self.filled,
            "consume({n}) beyond the {} filled bytes",
            self.filled
        );
        if n == 0 {
            return Bytes::new();
        }
        self.cut_front();
        self.filled -= n;
        self.uncut = false;
        self.buf.split_to(n).freeze()
    }

    /// Gives up the lent bytes at the front for good, so that `buf` starts at the input.
    fn cut_front(&mut self) {
        if self.start > 0 {
            bytes::Buf::advance(&mut self.buf, self.start);
            self.start = 0;
        }
    }

    /// Removes the first `n` unconsumed bytes without handing them out (they were lent and
    /// are done with): no slice, no reference count, and the block stays whole.
    pub(crate) fn discard(&mut self, n: usize) {
        assert!(
            n <= self.filled,
            "discard({n}) beyond the {} filled bytes",
            self.filled
        );
        self.filled -= n;
        // Nothing left: the next read starts at the front again (still in cache).
        self.start = if self.filled == 0 { 0 } else { self.start + n };
    }

    /// Bytes still missing from the frame at offset 0 when its length is known (its header
    /// is in); 0 otherwise.
    pub(crate) fn frame_rest(&self) -> usize {
        if self.hint_is_exact {
            self.frame_hint.saturating_sub(self.filled)
        } else {
            0
        }
    }

    /// Announces that the frame at offset 0 is `total` bytes long (header included), so the
    /// next reads can be sized for it. 0 clears the hint.
    pub(crate) fn set_frame_hint(&mut self, total: usize) {
        self.frame_hint = total;
        self.hint_is_exact = true;
    }

    /// Announces that the unconsumed bytes start a message of unknown length (a line still
    /// missing its delimiter): room grows geometrically, so a long line is copied O(1) times
    /// per byte on average, not once per read.
    pub(crate) fn set_unknown_length_hint(&mut self) {
        self.hint_is_exact = false;
        self.frame_hint = if self.filled == 0 {
            0
        } else {
            (2 * self.filled).max(self.filled + self.max_read_size)
        };
    }

    /// Drops the block when nothing is buffered, so an idle connection holds no read memory;
    /// returns whether it did.
    pub(crate) fn release_if_empty(&mut self) -> bool {
        if self.filled != 0 {
            return false;
        }
        self.start = 0;
        self.read_size = INITIAL_READ_SIZE.min(self.max_read_size);
        self.read_peak = 0;
        self.frame_hint = 0;
        let held = self.buf.capacity() > 0 || !self.retired.is_empty();
        self.buf = BytesMut::new();
        self.uncut = true;
        self.retired = Vec::new();
        self.retained = 0;
        held
    }

    /// Bytes currently allocated to the block this buffer writes into.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Bytes held for reuse in retired blocks (at most two blocks).
    pub(crate) fn retained(&self) -> usize {
        debug_assert_eq!(
            self.retained,
            self.retired.iter().map(BytesMut::capacity).sum::<usize>()
        );
        self.retained
    }

    /// Reuses the current block when every message cut from it has been dropped (the usual
    /// case with a consumer that keeps up): the partial frame moves to its front, and no
    /// memory is allocated or faulted in. A block more than twice `size` (left by a large
    /// frame) is not kept.
    fn reclaim(&mut self, size: usize) -> bool {
        if self.buf.capacity() == 0 {
            return false;
        }
        // Zeroed-but-unfilled bytes would be moved along for nothing.
        self.buf.truncate(self.filled);
        if !self.buf.try_reclaim(size - self.filled) {
            return false;
        }
        self.buf.capacity() <= 2 * size
    }

    /// Grows a block nothing was cut from to at least `size` bytes: lent bytes in front are
    /// done with, so the partial frame moves to the front, then the allocation grows in
    /// place (`realloc`: a large block's pages are remapped rather than copied, and the
    /// bytes already zeroed stay initialised). While reads ramp up, a lending stream thus
    /// faults in one block's worth of memory rather than every block of the ramp.
    fn grow_in_place(&mut self, size: usize) {
        self.move_partial_to_front();
        self.buf.reserve(size - self.buf.len());
    }

    /// Replaces a block nothing was cut from (no message points into it: it is freed at
    /// once) by one of normal size holding the unconsumed bytes.
    fn move_to_normal_block(&mut self) {
        let size = self.block_size().max(self.filled + self.read_size);
        let mut block = BytesMut::with_capacity(size);
        block.extend_from_slice(self.filled());
        self.buf = block;
        self.start = 0;
    }

    /// Moves the unconsumed bytes (at most a small partial frame) out of a block that messages
    /// were cut from and that is oversized now, into a block of normal size. The messages
    /// still out keep the old block alive until they are dropped; it is not retired, as it
    /// would not be reused at this size.
    fn leave_oversized_block(&mut self) {
        self.cut_front();
        let size = self.block_size().max(self.filled + self.read_size);
        self.move_to_fresh_block(size, false);
    }

    /// Moves the unconsumed bytes over the lent ones in front of them, within the block.
    fn move_partial_to_front(&mut self) {
        if self.start > 0 {
            self.buf
                .copy_within(self.start..self.start + self.filled, 0);
            self.start = 0;
        }
    }

    /// Moves the unconsumed bytes to another block: a retired one whose messages have all
    /// been dropped if there is one (already faulted in: no page faults, no allocation),
    /// else a new allocation. The block left behind is retired if `retire`, so that a
    /// consumer a few blocks behind the reader (a queue between them) still lets blocks be
    /// reused.
    fn move_to_fresh_block(&mut self, size: usize, retire: bool) {
        let size = size.max(self.filled + 1);
        let reusable = self.retired.iter_mut().position(|b| {
            b.clear();
            b.try_reclaim(size) && b.capacity() <= 2 * size
        });
        // A retired block may have been cut from (shared until its messages drop).
        self.uncut = reusable.is_none();
        let mut fresh = match reusable {
            Some(i) => self.retired.swap_remove(i),
            None => BytesMut::with_capacity(size),
        };
        fresh.extend_from_slice(&self.buf[..self.filled]);
        let old = std::mem::replace(&mut self.buf, fresh);
        // A view with no capacity (the block was cut out to its very end) has no bytes of
        // its own to keep.
        if retire && old.capacity() > 0 {
            if self.retired.len() == RETIRED_BLOCKS {
                self.retired.remove(0);
            }
            self.retired.push(old);
        }
        // Reclaiming changes a retired block's capacity, so sum them afresh.
        self.retained = self.retired.iter().map(BytesMut::capacity).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_at_most_max_read_size() {
        let mut rb = ReadBuffer::new(100);
        assert_eq!(rb.read_buf().len(), 100);
        rb.commit(30);
        assert_eq!(rb.read_buf().len(), 100);
        assert_eq!(rb.filled().len(), 30);
    }

    #[test]
    fn consumed_bytes_stay_valid_after_more_reads() {
        let mut rb = ReadBuffer::new(8);
        rb.extend(b"hello world, this spans blocks");
        let first = rb.consume(5);
        rb.extend(&[b'x'; 10_000]);
        assert_eq!(&first[..], b"hello");
        assert_eq!(&rb.filled()[..7], b" world,");
    }

    #[test]
    fn large_frame_gets_exact_block_then_buffer_shrinks_back() {
        let mut rb = ReadBuffer::new(1024);
        let normal = {
            rb.read_buf();
            rb.capacity()
        };
        rb.commit(10);
        rb.set_frame_hint(100_000);
        let mut total = 10;
        while total < 100_000 {
            let n = rb.read_buf().len().min(100_000 - total);
            assert!(n <= 1024);
            rb.commit(n);
            total += n;
        }
        assert!(rb.capacity() >= 100_000);
        let frame = rb.consume(100_000);
        assert_eq!(frame.len(), 100_000);
        rb.set_frame_hint(0);
        rb.read_buf();
        assert_eq!(rb.capacity(), normal, "buffer returns to its normal size");
    }

    #[test]
    fn unknown_length_message_grows_geometrically() {
        let mut rb = ReadBuffer::new(1000);
        let mut blocks = 0;
        let mut last_cap = 0;
        for _ in 0..200 {
            let n = rb.read_buf().len();
            assert_eq!(n, 1000, "reads stay full-sized");
            rb.commit(n);
            rb.set_unknown_length_hint();
            if rb.capacity() != last_cap {
                blocks += 1;
                last_cap = rb.capacity();
            }
        }
        assert!(blocks <= 8, "200 KB in {blocks} blocks");
        assert_eq!(rb.filled().len(), 200_000);
    }

    #[test]
    fn a_stream_that_keeps_up_reads_into_the_same_bytes_every_time() {
        // A paced stream: each read is one message, lent and let go before the next read.
        let mut rb = ReadBuffer::new(256 * 1024);
        let first = rb.read_buf().as_ptr();
        let capacity = rb.capacity();
        for _ in 0..100 {
            let buf = rb.read_buf();
            assert_eq!(buf.as_ptr(), first, "the block's front, still in cache");
            assert_eq!(buf.len(), INITIAL_READ_SIZE);
            buf[..200].fill(b'x');
            rb.commit(200);
            assert_eq!(rb.filled(), &[b'x'; 200][..]);
            rb.discard(200);
        }
        assert_eq!(
            rb.capacity(),
            capacity,
            "no allocation after the first read"
        );
        // A partial message left behind takes the general path, and the next read follows it.
        rb.read_buf();
        rb.commit(10);
        rb.discard(4);
        let next = rb.read_buf().as_ptr();
        assert_eq!(rb.filled().len(), 6);
        assert_eq!(
            next,
            first.wrapping_add(6),
            "read lands after the partial, moved to the front"
        );
    }

    #[test]
    fn reads_start_small_and_double_while_they_come_back_full() {
        let mut rb = ReadBuffer::new(256 * 1024);
        let mut sizes = Vec::new();
        for _ in 0..12 {
            let n = rb.read_buf().len();
            sizes.push(n);
            rb.commit(n);
            rb.consume(n);
        }
        assert_eq!(sizes[0], INITIAL_READ_SIZE);
        assert_eq!(sizes[1], 2 * INITIAL_READ_SIZE);
        assert!(sizes.windows(2).all(|w| w[1] >= w[0]), "{sizes:?}");
        assert!(sizes.len() - sizes.iter().filter(|&&n| n == 256 * 1024).count() <= 8);
        assert_eq!(sizes[11], 256 * 1024, "capped at max_read_size: {sizes:?}");
        // Short reads do not grow it; a release starts the ramp again.
        let mut quiet = ReadBuffer::new(256 * 1024);
        for _ in 0..10 {
            quiet.read_buf();
            quiet.commit(100);
            quiet.consume(100);
        }
        assert_eq!(quiet.read_buf().len(), INITIAL_READ_SIZE);
        assert!(quiet.capacity() <= 2 * INITIAL_READ_SIZE);
        rb.release_if_empty();
        assert_eq!(rb.read_buf().len(), INITIAL_READ_SIZE);
    }

    /// One read through `read_spare` of up to `n` bytes (all of the offer when it is
    /// larger); the offer's length.
    fn spare_read(rb: &mut ReadBuffer, n: usize) -> usize {
        let mut room = rb.read_spare();
        let offered = room.remaining_mut();
        room.put_bytes(b'x', n.min(offered));
        rb.commit(n.min(offered));
        offered
    }

    /// `reads` reads that fill their offers, each read's bytes taken whole (lent, or cut out
    /// and dropped).
    fn burst(rb: &mut ReadBuffer, reads: usize, lend: bool) {
        for _ in 0..reads {
            let n = rb.read_buf().len();
            rb.commit(n);
            if lend {
                rb.discard(n);
            } else {
                drop(rb.consume(n));
            }
        }
    }

    #[test]
    fn a_spare_offer_that_comes_back_full_goes_to_full_size_reads() {
        let mut rb = ReadBuffer::new(256 * 1024);
        assert_eq!(spare_read(&mut rb, 100), INITIAL_READ_SIZE);
        rb.consume(100);
        assert_eq!(spare_read(&mut rb, usize::MAX), INITIAL_READ_SIZE);
        rb.consume(INITIAL_READ_SIZE);
        // Untouched room costs no memory: the next read may take what a socket holds.
        assert_eq!(spare_read(&mut rb, 10), 256 * 1024);
        // Bytes, each zeroed before it is offered, still double.
        let mut bytes = ReadBuffer::new(256 * 1024);
        let n = bytes.read_buf().len();
        bytes.commit(n);
        assert_eq!(bytes.read_buf().len(), 2 * INITIAL_READ_SIZE);
    }

    #[test]
    fn a_review_after_small_reads_shrinks_the_read_size_and_the_block() {
        for lend in [false, true] {
            let mut rb = ReadBuffer::new(256 * 1024);
            // A burst: full reads, then a trickle of 200-byte messages, one a read.
            burst(&mut rb, 12, lend);
            assert!(!rb.review_read_size(), "the burst's reads were full ones");
            assert_eq!(rb.read_buf().len(), 256 * 1024);
            assert!(rb.capacity() >= 256 * 1024);
            for _ in 0..5 {
                rb.read_buf();
                rb.commit(200);
                if lend {
                    rb.discard(200);
                } else {
                    drop(rb.consume(200));
                }
            }
            assert_eq!(
                rb.read_buf().len(),
                256 * 1024,
                "nothing shrinks between reviews"
            );
            assert!(rb.review_read_size());
            assert_eq!(
                rb.read_buf().len(),
                INITIAL_READ_SIZE,
                "the power of two at least twice 200 bytes, at least the initial size"
            );
            assert!(
                rb.capacity() <= 2 * INITIAL_READ_SIZE,
                "the burst's block is left (lend: {lend}): {}",
                rb.capacity()
            );
            assert_eq!(rb.retained(), 0, "and the blocks it retired");
            // A read that fills its offer grows it again.
            let n = rb.read_buf().len();
            rb.commit(n);
            assert_eq!(rb.read_buf().len(), 2 * INITIAL_READ_SIZE);
        }
    }

    #[test]
    fn a_review_keeps_the_read_size_of_a_stream_with_one_large_read() {
        let mut rb = ReadBuffer::new(256 * 1024);
        burst(&mut rb, 12, false);
        rb.review_read_size();
        // Many small reads and one of over a quarter, as a firehose that waits on its
        // sender brings them: the size stays.
        for i in 0..200 {
            assert_eq!(rb.read_buf().len(), 256 * 1024, "read {i}");
            let n = if i == 150 { 64 * 1024 + 1 } else { 9_000 };
            rb.commit(n);
            drop(rb.consume(n));
        }
        assert!(!rb.review_read_size());
        assert_eq!(rb.read_buf().len(), 256 * 1024);
        // Reads of at most a quarter but over an eighth: halved, not further.
        for _ in 0..10 {
            rb.read_buf();
            rb.commit(40_000);
            drop(rb.consume(40_000));
        }
        assert!(rb.review_read_size());
        assert_eq!(rb.read_buf().len(), 128 * 1024);
        // No read at all since the last review: the initial size.
        assert!(rb.review_read_size());
        assert_eq!(rb.read_buf().len(), INITIAL_READ_SIZE);
    }

    #[test]
    fn a_queueing_trickle_after_a_burst_reads_into_a_few_pages_once_reviewed() {
        // Messages cut out and dropped, one a read after a burst: the bytes the reads walk
        // over (a queueing stream touches every byte it reads into) stay within a few KiB
        // once the read size is reviewed, rather than the burst block's hundreds.
        let mut rb = ReadBuffer::new(256 * 1024);
        burst(&mut rb, 12, false);
        rb.review_read_size();
        let mut walked = std::collections::BTreeSet::new();
        for i in 0..2_000 {
            if i == 10 {
                rb.review_read_size();
            }
            let at = rb.read_buf().as_ptr() as usize;
            if i >= 10 {
                walked.insert(at / 4096);
            }
            rb.commit(200);
            drop(rb.consume(200));
        }
        assert!(walked.len() <= 8, "{} pages read into", walked.len());
    }
    #[test]
    fn a_block_is_reused_once_its_messages_are_dropped() {
        let mut rb = ReadBuffer::new(1024);
        rb.extend(&[b'a'; 1500]);
        let first = rb.filled().as_ptr() as usize;
        // Keep the partial tail, drop every delivered message: the tail after it is too
        // short for a full read, so the partial moves to the block's front.
        drop(rb.consume(1400));
        rb.extend(&[b'b'; 500]);
        assert_eq!(
            rb.filled().as_ptr() as usize,
            first,
            "the same block again, not a fresh one"
        );
        assert_eq!(
            &rb.filled()[..100],
            &[b'a'; 100][..],
            "the tail moved to the front"
        );
        // A message still held keeps its block: the buffer moves to a fresh one.
        let held = rb.consume(600);
        rb.extend(&[b'c'; 5000]);
        assert!(held.iter().all(|&b| b == b'a' || b == b'b'));
    }

    #[test]
    fn a_small_partial_frame_never_shrinks_the_next_read_when_lending() {
        // Small frames lent, the last one cut by the read: whatever is left of the block,
        // every read is offered in full (a read shrunk to the block's tail costs a system
        // call for a few bytes). Cut-out messages may shrink it (another block otherwise).
        for lend in [true, false] {
            let mut rb = ReadBuffer::new(1024);
            for _ in 0..12 {
                let n = rb.read_buf().len();
                rb.commit(n);
                rb.consume(n);
            }
            for round in 0..50 {
                let offered = rb.read_buf().len();
                if lend {
                    assert_eq!(offered, 1024, "round {round}");
                } else {
                    assert!(offered >= 63, "the rest of the frame fits: round {round}");
                }
                // A short read: most of it whole frames, then the first 37 bytes of a
                // 100-byte frame.
                rb.commit(offered.min(300 + 7 * round));
                let whole = rb.filled().len() - 37;
                if lend {
                    rb.discard(whole);
                } else {
                    drop(rb.consume(whole));
                }
                rb.set_frame_hint(100);
            }
        }
    }

    #[test]
    fn a_partial_frame_stays_put_while_its_block_is_held_and_its_rest_fits() {
        // Messages cut out and still held by the application: moving the partial frame means
        // another block. So while the rest of its frame fits in the block's tail, the read
        // is offered that tail, however short, and the partial stays where it is.
        let mut rb = ReadBuffer::new(1024);
        for _ in 0..4 {
            let n = rb.read_buf().len();
            rb.commit(n);
            drop(rb.consume(n));
        }
        let mut held = Vec::new();
        let mut shortest = usize::MAX;
        for round in 0..6 {
            let (partial_at, tail) = (rb.filled().as_ptr(), rb.capacity() - rb.filled().len());
            let offered = rb.read_buf().len();
            if round > 0 {
                assert_eq!(rb.filled().as_ptr(), partial_at, "round {round}");
                assert_eq!(offered, tail.min(1024), "round {round}");
                shortest = shortest.min(offered);
            }
            // 300 bytes: whole frames, then the first 37 bytes of a 100-byte one.
            rb.commit(offered.min(300));
            held.push(rb.consume(rb.filled().len() - 37));
            rb.set_frame_hint(100);
        }
        assert!(
            shortest < 1024,
            "a tail shorter than a read was offered: {shortest}"
        );
    }

    #[test]
    fn a_large_partial_frame_moves_over_lent_bytes_in_a_held_block() {
        // One message cut out and held, the rest lent, a 20,000-byte partial frame at the
        // block's end: the partial moves over the lent bytes, in the block, not to another.
        let mut rb = ReadBuffer::new(64 * 1024);
        for _ in 0..8 {
            let n = rb.read_buf().len();
            rb.commit(n);
            drop(rb.consume(n));
        }
        for _ in 0..2 {
            let n = rb.read_buf().len();
            rb.commit(n);
        }
        let held = rb.consume(100);
        let front = held.as_ptr() as usize + 100;
        rb.discard(rb.filled().len() - 20_000);
        let partial = rb.filled().to_vec();
        rb.set_frame_hint(30_000);
        rb.read_buf();
        assert_eq!(
            rb.filled().as_ptr() as usize,
            front,
            "moved to the block's front"
        );
        assert_eq!(rb.filled(), &partial[..]);
    }

    /// Reads `total` bytes in reads as large as offered, as from a sender that always has
    /// more.
    fn read_fully(rb: &mut ReadBuffer, total: usize) {
        let mut left = total;
        while left > 0 {
            let n = rb.read_buf().len().min(left);
            rb.commit(n);
            left -= n;
        }
    }

    /// What the engine does after a read of frames all `frame` bytes long: the complete ones
    /// lent (discarded) or cut out, and the partial one's length announced.
    fn take_whole_frames(rb: &mut ReadBuffer, frame: usize, lend: bool) {
        let whole = rb.filled().len() / frame * frame;
        if lend {
            rb.discard(whole);
        } else {
            drop(rb.consume(whole));
        }
        rb.set_frame_hint(if rb.filled().is_empty() { 0 } else { frame });
    }

    #[test]
    fn full_offers_ramp_reads_to_max_read_size_whatever_the_frame_size() {
        // A sender that always has more: every offer is filled. Frames of one size, lent
        // (discarded) or cut out as each completes. Whatever the size, the reads reach
        // `max_read_size` — a block whose tail one frame fits exactly must not pin them at
        // one frame per read (a system call and a move of the partial frame per message).
        const MAX: usize = 64 * 1024;
        for lend in [true, false] {
            for frame in (700..9_000).step_by(97).chain([20_000, 40_000]) {
                let mut rb = ReadBuffer::new(MAX);
                let mut largest = 0;
                for _ in 0..40 {
                    let offered = rb.read_buf().len();
                    largest = largest.max(offered);
                    rb.commit(offered);
                    take_whole_frames(&mut rb, frame, lend);
                }
                assert_eq!(largest, MAX, "frame {frame}, lent {lend}");
            }
        }
    }

    #[test]
    fn reads_stay_full_sized_whatever_the_length_of_the_partial_line() {
        // Lines: a partial line's length is unknown until its delimiter arrives. With a
        // sender that always has more, every read after the ramp is a full one, also when
        // the partial line is longer than the block's free tail (moving it within the block
        // would leave room for a short read only: the block grows instead).
        const MAX: usize = 64 * 1024;
        for lend in [true, false] {
            for line in [700, 5_000, 20_000, 40_000, 100_000] {
                let mut rb = ReadBuffer::new(MAX);
                let mut offers = Vec::new();
                for _ in 0..40 {
                    let offered = rb.read_buf().len();
                    offers.push(offered);
                    rb.commit(offered);
                    let whole = rb.filled().len() / line * line;
                    if lend {
                        rb.discard(whole);
                    } else {
                        drop(rb.consume(whole));
                    }
                    rb.set_unknown_length_hint();
                }
                assert!(
                    offers[7..].iter().all(|&n| n == MAX),
                    "line {line}, lent {lend}: {offers:?}"
                );
            }
        }
    }

    #[test]
    fn a_lending_ramp_grows_one_block_in_place() {
        // Full reads, everything lent but a partial frame: from the first read up to
        // `max_read_size` the buffer grows its one block (already faulted-in pages stay in
        // use); no block is left behind to be freed or reused later.
        const MAX: usize = 256 * 1024;
        let mut rb = ReadBuffer::new(MAX);
        for _ in 0..30 {
            let offered = rb.read_buf().len();
            rb.commit(offered);
            let lent = rb.filled().len() - 100;
            rb.discard(lent);
            assert_eq!(rb.retained(), 0, "no block left behind");
        }
        assert_eq!(rb.read_buf().len(), MAX);
        assert!(rb.capacity() <= 2 * MAX + INITIAL_READ_SIZE);
    }

    #[test]
    fn a_lent_large_frame_leaves_a_normal_block_behind() {
        // One 1 MB frame on a stream reading 16 KiB at most, lent like the small frames
        // around it: its block holds it whole, and once it is done the buffer goes back to
        // a block of normal size rather than keeping the large one for good.
        let mut rb = ReadBuffer::new(16 * 1024);
        read_fully(&mut rb, 50_000);
        rb.discard(50_000);
        let normal = rb.capacity();
        rb.set_frame_hint(1_000_000);
        read_fully(&mut rb, 1_000_000);
        assert!(rb.capacity() >= 1_000_000);
        rb.discard(1_000_000);
        rb.set_frame_hint(0);
        read_fully(&mut rb, 50_000);
        rb.discard(50_000);
        assert_eq!(rb.capacity(), normal, "back to a normal block");
    }

    #[test]
    fn a_large_frame_block_is_given_up_when_every_read_after_it_is_lent_whole() {
        // After the large frame, each read holds whole messages only (a paced stream): the
        // block is empty before every read, the case the fast path serves. It must still
        // notice the oversized block and go back to a normal one.
        const MAX: usize = 16 * 1024;
        let mut rb = ReadBuffer::new(MAX);
        rb.read_buf();
        rb.commit(10);
        rb.set_frame_hint(1_000_000);
        read_fully(&mut rb, 1_000_000 - 10);
        rb.discard(1_000_000);
        rb.set_frame_hint(0);
        assert!(rb.capacity() >= 1_000_000);
        for _ in 0..3 {
            rb.read_buf();
            rb.commit(200);
            rb.discard(200);
        }
        assert_eq!(
            rb.capacity(),
            2 * MAX,
            "back to a block of twice the read size"
        );
    }

    #[test]
    fn a_frame_within_the_default_limit_gets_its_whole_block_at_once() {
        // A frame of the default `max_frame_size` (16 MiB): its header is in, its block is
        // allocated for all of it before the next read, so the payload is never copied from
        // a smaller block into a larger one on the way. Also when the frame's first 20 KB
        // end a full-sized read whose frames were lent: the block has room for another read
        // then, but not for the frame.
        let frame = 16 * 1024 * 1024 + 14;
        for (reads, partial) in [(1, 14), (12, 20_000)] {
            let mut rb = ReadBuffer::new(256 * 1024);
            for _ in 0..reads {
                let n = rb.read_buf().len();
                rb.commit(n);
                rb.discard(rb.filled().len().saturating_sub(partial));
            }
            rb.set_frame_hint(frame);
            let at = rb.read_buf().as_ptr() as usize;
            assert!(rb.capacity() >= frame, "{} bytes", rb.capacity());
            read_fully(&mut rb, frame - partial);
            assert_eq!(rb.filled().as_ptr() as usize + partial, at, "never moved");
            assert_eq!(rb.filled().len(), frame);
        }
    }

    #[test]
    fn a_read_into_a_large_frame_stops_at_its_end() {
        // A sender that always has more, frames of 300 KB (Binance's 24hrTicker array is
        // ~450 KB): a read that starts inside a large frame ends where it ends, so no partial
        // frame is ever left to be moved, and a lending stream reads into the same block
        // front lap after lap; reads still reach `max_read_size`.
        const MAX: usize = 1024 * 1024;
        const FRAME: usize = 300_000;
        for lend in [true, false] {
            let mut rb = ReadBuffer::new(MAX);
            let (mut pos, mut largest) = (0, 0);
            let mut fronts = Vec::new();
            for _ in 0..60 {
                let partial = rb.filled().len();
                let buf = rb.read_buf();
                let offered = buf.len();
                if partial == 0 && offered == MAX {
                    fronts.push(buf.as_ptr() as usize);
                }
                largest = largest.max(offered);
                rb.commit(offered);
                pos += offered;
                if partial > 0 {
                    assert_eq!(pos % FRAME, 0, "lent {lend}: a read ran past the frame");
                }
                take_whole_frames(&mut rb, FRAME, lend);
            }
            assert_eq!(largest, MAX, "lent {lend}");
            if lend {
                assert!(fronts.len() > 10, "{fronts:x?}");
                assert!(fronts.iter().all(|&at| at == fronts[0]), "{fronts:x?}");
            }
        }
    }

    #[test]
    fn reads_after_lent_frames_land_at_the_block_front() {
        // Reads ramped to full size, then reads of 10-12 KB (a stream keeping up), all lent
        // but a partial frame of 100 bytes, or 10,000 (a depth message cut by the read):
        // the partial is copied to the front before every read, so every read lands at the
        // same place instead of walking through the block.
        for (read, partial) in [(10_000, 100), (12_000, 10_000)] {
            let mut rb = ReadBuffer::new(64 * 1024);
            let mut offers = Vec::new();
            for i in 0..40 {
                let buf = rb.read_buf();
                offers.push(buf.as_ptr() as usize);
                let n = if i < 15 { buf.len() } else { read };
                rb.commit(n);
                let kept = if i < 15 { 100 } else { partial };
                rb.discard(rb.filled().len() - kept);
            }
            let settled = &offers[16..];
            assert!(
                settled.iter().all(|&at| at == settled[0]),
                "{partial}: {offers:x?}"
            );
        }
    }

    #[test]
    fn discarded_bytes_leave_the_block_free_for_reuse() {
        let mut rb = ReadBuffer::new(1024);
        rb.extend(&[b'a'; 1500]);
        let first = rb.filled().as_ptr() as usize;
        let block = rb.capacity();
        rb.discard(1400);
        assert_eq!(rb.filled(), &[b'a'; 100][..]);
        rb.extend(&[b'b'; 1000]);
        let base = rb.filled().as_ptr() as usize;
        assert_eq!(
            base, first,
            "nothing was handed out of the discarded bytes: the tail moved to the block's front"
        );
        assert_eq!(rb.capacity(), block);
        assert_eq!(&rb.filled()[..100], &[b'a'; 100][..]);
        assert_eq!(&rb.filled()[100..], &[b'b'; 1000][..]);
        assert_eq!(&rb.consume(1100)[..2], b"aa");
    }

    #[test]
    fn a_lent_block_is_read_into_again_without_zeroing() {
        let mut rb = ReadBuffer::new(1024);
        rb.extend(&[b'a'; 4000]);
        // Grown in place (2 KiB, then doubled): 96 bytes left after the input.
        assert_eq!(rb.capacity(), 4096);
        let (block, capacity) = (rb.filled().as_ptr() as usize, rb.capacity());
        rb.discard(3990);
        rb.extend(&[b'b'; 500]);
        assert_eq!(
            rb.filled().as_ptr() as usize,
            block,
            "the tail moved to the front"
        );
        assert_eq!(&rb.filled()[..10], &[b'a'; 10][..]);
        assert_eq!(&rb.filled()[10..], &[b'b'; 500][..]);
        rb.discard(510);
        // Everything lent: the next read is offered the block's front again, as it was left
        // (old bytes, not zeroes: nothing was zero-filled), and no block was allocated.
        let offered = rb.read_buf();
        assert_eq!(offered.as_ptr() as usize, block);
        assert_eq!(offered[0], b'a');
        assert_eq!(rb.capacity(), capacity);
        // Cutting out an owned message after lending still yields the right bytes.
        rb.commit(0);
        rb.extend(b"xyz");
        assert_eq!(&rb.consume(2)[..], b"xy");
        assert_eq!(rb.filled(), b"z");
    }

    #[test]
    fn release_when_idle() {
        let mut rb = ReadBuffer::new(1024);
        assert!(
            !rb.release_if_empty(),
            "nothing allocated yet: nothing freed"
        );
        rb.extend(b"abc");
        assert!(!rb.release_if_empty(), "a partial message is buffered");
        assert_eq!(rb.filled(), b"abc");
        rb.consume(3);
        assert!(rb.release_if_empty());
        assert_eq!(rb.capacity(), 0);
        assert!(!rb.release_if_empty(), "freed already");
    }

    #[test]
    fn a_block_left_behind_is_retained_until_release() {
        // A message still held keeps its block: the reader moves to another and keeps the
        // old one for reuse, counted in `retained` until the buffer is released.
        let mut rb = ReadBuffer::new(1024);
        rb.extend(&[b'a'; 1500]);
        let first_block = rb.capacity();
        let held = rb.consume(1400);
        assert_eq!(rb.retained(), 0);
        rb.extend(&[b'b'; 2000]);
        // Counted from the end of the message cut out last: the bytes before it are the
        // application's until it drops them.
        assert_eq!(
            rb.retained(),
            first_block - 1400,
            "the held block, kept for reuse"
        );
        assert_eq!(&held[..], &[b'a'; 1400][..]);
        rb.consume(rb.filled().len());
        assert!(rb.release_if_empty());
        assert_eq!((rb.capacity(), rb.retained()), (0, 0));
    }

    #[test]
    fn a_block_up_to_twice_the_size_needed_is_reused() {
        // Messages cut out and dropped at once. A 3,000-byte frame outgrows the 2 KiB block
        // and gets one of its own; once it is done, that block (under twice the normal size)
        // is reused for the frames after it rather than a normal-sized one allocated.
        let mut rb = ReadBuffer::new(1024);
        rb.extend(&[b'a'; 10]);
        rb.set_frame_hint(3000);
        rb.extend(&[b'a'; 2990]);
        let block = rb.filled().as_ptr() as usize;
        drop(rb.consume(3000));
        rb.set_frame_hint(0);
        for _ in 0..6 {
            rb.extend(&[b'b'; 700]);
            drop(rb.consume(700));
        }
        rb.extend(&[b'c'; 700]);
        assert_eq!(
            rb.filled().as_ptr() as usize,
            block,
            "the large frame's block again"
        );
    }

    #[test]
    fn a_long_line_block_is_given_up_with_a_partial_line_after_it() {
        // A 1 MB line lent, the read that ends it also bringing the next line's first 100
        // bytes: those move to a block of normal size, not one sized by the long line.
        const MAX: usize = 16 * 1024;
        let mut rb = ReadBuffer::new(MAX);
        let mut left = 1_000_000;
        while left > 0 {
            let n = rb.read_buf().len().min(left);
            rb.commit(n);
            left -= n;
            rb.set_unknown_length_hint();
        }
        rb.read_buf()[..100].fill(b'x');
        rb.commit(100);
        rb.discard(1_000_000);
        rb.set_unknown_length_hint();
        assert!(rb.capacity() >= 1_000_000);
        rb.read_buf();
        assert_eq!(rb.capacity(), 2 * MAX, "a block of twice the read size");
        assert_eq!(rb.filled(), &[b'x'; 100][..]);
    }

    #[test]
    fn a_retired_block_is_reused_once_its_messages_are_dropped() {
        // A consumer a few messages behind: blocks are left behind with messages still
        // held, one of them larger than normal (3,000 bytes, sized for a long line) but
        // under twice the 2 KiB wanted. Once its messages are dropped, the next move takes
        // it rather than a new block.
        let mut rb = ReadBuffer::new(1024);
        rb.extend(&[b'a'; 1600]);
        let held_first = rb.consume(100);
        rb.set_unknown_length_hint();
        rb.extend(&[b'a'; 1024]);
        let line_block = rb.filled().as_ptr() as usize;
        assert_eq!(rb.capacity(), 3000, "twice the partial line");
        let held_line = rb.consume(rb.filled().len() - 100);
        let mut held = Vec::new();
        for fill in [b'b', b'c'] {
            rb.set_unknown_length_hint();
            rb.extend(&[fill; 2000]);
            held.push(rb.consume(rb.filled().len() - 100));
        }
        assert!(rb.retained() > 0);
        drop((held_first, held_line));
        // Full reads, each message but a 100-byte partial cut out and held, until the
        // current block runs out and the partial moves.
        for _ in 0..10 {
            let before = rb.filled().as_ptr() as usize;
            let n = rb.read_buf().len();
            let now = rb.filled().as_ptr() as usize;
            if now != before {
                assert_eq!(now, line_block, "the long line's block again");
                return;
            }
            rb.commit(n);
            held.push(rb.consume(rb.filled().len() - 100));
        }
        panic!("the partial never moved");
    }

    /// One step of a transport and an engine working a buffer: a read of up to `read` bytes
    /// (a full offer when it is larger), then, with what is unconsumed, one of: nothing, cut a
    /// message out (held or dropped), lend one (discard), announce a frame or a long line, or
    /// finish a frame (everything lent, or cut out and dropped; the hint cleared, or for a lent
    /// frame sometimes left), or review the read size.
    #[derive(Debug, Clone)]
    struct Step {
        read: usize,
        then: u8,
        amount: usize,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        (
            prop_oneof![1usize..64, 64usize..3000, 3000usize..300_000],
            0u8..9,
            0usize..100_000,
        )
            .prop_map(|(read, then, amount)| Step { read, then, amount })
    }

    /// Runs `steps` on a buffer of `max_read_size`, reading through `read_buf` or
    /// `read_spare`; returns each step's offer length, unconsumed bytes and block capacity.
    /// Checks the buffer against a model of the stream's bytes as it goes: the unconsumed
    /// bytes are what was read and not yet taken, and a message cut out keeps its bytes
    /// while the buffer moves on (blocks moved, reused, left, grown).
    fn offers(steps: &[Step], max_read_size: usize, spare: bool) -> Vec<(usize, Vec<u8>, usize)> {
        let mut rb = ReadBuffer::new(max_read_size);
        let mut held: Vec<(Bytes, Vec<u8>)> = Vec::new();
        let mut model = std::collections::VecDeque::new();
        let mut out = Vec::new();
        for (i, s) in steps.iter().enumerate() {
            let fill = (i % 251) as u8;
            let offered = if spare {
                let mut room = rb.read_spare();
                let offered = room.remaining_mut();
                room.put_bytes(fill, s.read.min(offered));
                offered
            } else {
                let buf = rb.read_buf();
                let n = s.read.min(buf.len());
                buf[..n].fill(fill);
                let offered = buf.len();
                // Growing as a spare offer does, so that the two walk the same blocks.
                rb.offered_spare = true;
                offered
            };
            if spare {
                assert_eq!(
                    rb.buf.len(),
                    rb.start + rb.filled + s.read.min(offered),
                    "nothing past the bytes written is initialised by the offer"
                );
            }
            rb.commit(s.read.min(offered));
            model.extend(std::iter::repeat_n(fill, s.read.min(offered)));
            let filled = rb.filled().len();
            let n = s.amount % (filled + 1);
            let taken = match s.then {
                1..=3 | 6 | 7 => {
                    let all = matches!(s.then, 6 | 7);
                    model.drain(..if all { filled } else { n }).collect()
                }
                _ => Vec::new(),
            };
            match s.then {
                1 => held.push((rb.consume(n), taken)),
                2 => assert_eq!(rb.consume(n), taken),
                3 => rb.discard(n),
                4 => rb.set_frame_hint(filled + s.amount),
                5 => rb.set_unknown_length_hint(),
                6 => {
                    rb.discard(filled);
                    if s.amount % 2 == 0 {
                        rb.set_frame_hint(0);
                    }
                }
                7 => {
                    assert_eq!(rb.consume(filled), taken);
                    rb.set_frame_hint(0);
                }
                8 => {
                    rb.review_read_size();
                }
                _ => {}
            }
            assert!(
                rb.filled().iter().eq(model.iter()),
                "step {i}: the unconsumed bytes"
            );
            for (message, bytes) in &held {
                assert_eq!(message, bytes, "step {i}: a held message's bytes");
            }
            if held.len() > 3 {
                held.remove(0);
            }
            out.push((offered, rb.filled().to_vec(), rb.capacity()));
        }
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 64, ..proptest::prelude::ProptestConfig::default()
        })]

        /// A spare offer is `read_buf`'s room without the zeroing: the same length, the same
        /// bytes taken, the same blocks, whatever the reads and the engine do between them.
        #[test]
        fn a_spare_offer_is_the_room_read_buf_offers(
            steps in proptest::collection::vec(step(), 1..60),
            max_read_size in proptest::prop_oneof![
                proptest::strategy::Just(256 * 1024),
                1usize..5000,
            ],
        ) {
            proptest::prop_assert_eq!(
                offers(&steps, max_read_size, true),
                offers(&steps, max_read_size, false)
            );
        }
    }

    #[test]
    fn spare_and_slice_offers_mix() {
        let mut rb = ReadBuffer::new(1024);
        rb.read_spare().put_slice(b"hello ");
        rb.commit(6);
        rb.read_buf()[..5].copy_from_slice(b"world");
        rb.commit(5);
        let mut room = rb.read_spare();
        assert_eq!(room.remaining_mut(), 1024);
        room.put_slice(b"!");
        rb.commit(1);
        assert_eq!(rb.filled(), b"hello world!");
        let message = rb.consume(12);
        // The block's front is cut out: the next offer starts behind it, uninitialised.
        rb.read_spare().put_slice(b"next");
        rb.commit(4);
        assert_eq!(rb.buf.len(), 4);
        assert_eq!(&message[..], b"hello world!");
        assert_eq!(rb.filled(), b"next");
    }

    #[test]
    #[should_panic(expected = "exceeds the bytes written")]
    fn committing_more_than_a_spare_offer_got_is_a_transport_bug() {
        let mut rb = ReadBuffer::new(1024);
        rb.read_spare().put_slice(b"abc");
        rb.commit(4);
    }
}
