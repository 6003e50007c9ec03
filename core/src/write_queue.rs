//! Bytes waiting for a socket, written vectored: the part of writing that every transport
//! shares. The queue does no I/O itself; the caller passes the write.
//!
//! It also bounds what waits. A peer that stops reading (while still sending: a Ping flood,
//! or a server that is simply stuck) must not make the client queue without end, so a
//! transport takes the stream's bytes only while fewer than [`WriteQueue::BACKLOG`] wait
//! here ([`fill`](WriteQueue::fill)); the rest stays in the stream, where what the engine
//! adds by itself is bounded (it owes only the latest Ping's Pong). Measured before the
//! bound: a loopback peer writing Pings for 4 s and reading nothing grew a client to 2.3 GB.

use std::collections::VecDeque;
use std::io::{self, IoSlice};

use bytes::{Buf, Bytes};

use crate::tls::TlsSession;

/// Chunks gathered per vectored write.
const GATHER: usize = 64;

/// An ordered queue of outgoing chunks.
#[derive(Debug, Default)]
pub struct WriteQueue {
    chunks: VecDeque<Bytes>,
    /// Bytes in `chunks`.
    bytes: usize,
    /// The last [`fill`](Self::fill) stopped at the bound, not for want of bytes: the
    /// stream may hold more.
    held_back: bool,
}

impl WriteQueue {
    /// Bytes past which [`fill`](Self::fill) takes nothing more from the stream: the socket's
    /// own send buffer holds far more, so a peer that reads keeps this from filling, and one
    /// that does not is left to the stream's timeouts.
    pub const BACKLOG: usize = 64 * 1024;

    /// Appends a chunk (empty ones are dropped).
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.bytes += chunk.len();
            self.chunks.push_back(chunk);
        }
    }

    /// Takes the next whole chunk, for callers that write one chunk at a time (async
    /// `write_all`).
    pub fn pop(&mut self) -> Option<Bytes> {
        let chunk = self.chunks.pop_front()?;
        self.bytes -= chunk.len();
        Some(chunk)
    }

    /// Whether everything was written.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Bytes waiting.
    pub fn queued_bytes(&self) -> usize {
        self.bytes
    }

    /// Takes chunks from `next` (the stream's `poll_transmit`) while fewer than
    /// [`BACKLOG`](Self::BACKLOG) bytes wait — encrypted by `tls` when the connection has
    /// it. Returns whether it took any. A transport calls it after every change to the
    /// stream, and again whenever a write empties the queue.
    pub fn fill(
        &mut self,
        next: impl FnMut() -> Option<Bytes>,
        tls: Option<&mut TlsSession>,
    ) -> bool {
        self.fill_up_to(Self::BACKLOG, next, tls)
    }

    /// After a write: when it emptied the queue and the last [`fill`](Self::fill) left bytes
    /// in the stream for want of room, fills again; whether it took any (then write again).
    /// The common path — nothing held back — is two loads and no call.
    #[inline]
    pub fn refill(
        &mut self,
        next: impl FnMut() -> Option<Bytes>,
        tls: Option<&mut TlsSession>,
    ) -> bool {
        self.chunks.is_empty() && self.held_back && self.refill_held_back(next, tls)
    }

    #[cold]
    #[inline(never)]
    fn refill_held_back(
        &mut self,
        next: impl FnMut() -> Option<Bytes>,
        tls: Option<&mut TlsSession>,
    ) -> bool {
        self.fill(next, tls)
    }

    /// For a connection the stream let go of: every byte it still holds (its Close frame),
    /// whatever the bound — none may be left to reach the next connection — then, over TLS,
    /// a close_notify; all queued for the transport's last, best-effort flush.
    pub fn fill_for_close(
        &mut self,
        next: impl FnMut() -> Option<Bytes>,
        mut tls: Option<&mut TlsSession>,
    ) {
        self.fill_up_to(usize::MAX, next, tls.as_deref_mut());
        if let Some(tls) = tls {
            tls.send_close_notify();
            while let Some(record) = tls.poll_transmit() {
                self.push(record);
            }
        }
    }

    fn fill_up_to(
        &mut self,
        bound: usize,
        mut next: impl FnMut() -> Option<Bytes>,
        mut tls: Option<&mut TlsSession>,
    ) -> bool {
        let mut took = false;
        self.held_back = false;
        loop {
            if self.bytes >= bound {
                self.held_back = true;
                break;
            }
            let Some(chunk) = next() else { break };
            took = true;
            match tls.as_deref_mut() {
                Some(tls) => {
                    tls.write_plaintext(&chunk);
                    while let Some(record) = tls.poll_transmit() {
                        self.push(record);
                    }
                }
                None => self.push(chunk),
            }
        }
        took
    }

    /// Writes with `write` (e.g. `|s| sock.write_vectored(s)`), up to 64 chunks per call,
    /// until the queue is empty or `write` would block (`Ok`, the rest stays queued). Slices
    /// are gathered on the stack: no allocation per write.
    pub fn write_with(
        &mut self,
        mut write: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
    ) -> io::Result<()> {
        while !self.chunks.is_empty() {
            let written = {
                let mut slices = [IoSlice::new(&[]); GATHER];
                let mut count = 0;
                for (slot, chunk) in slices.iter_mut().zip(&self.chunks) {
                    *slot = IoSlice::new(chunk);
                    count += 1;
                }
                match write(&slices[..count]) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) => return Err(e),
                }
            };
            self.advance(written);
        }
        Ok(())
    }

    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let front = self
                .chunks
                .front_mut()
                .expect("a write reported more bytes than were queued");
            let take = n.min(front.len());
            front.advance(take);
            self.bytes -= take;
            n -= take;
            if front.is_empty() {
                self.chunks.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes everything queued, the socket taking all it is given.
    fn write_out(q: &mut WriteQueue) {
        q.write_with(|slices| Ok(slices.iter().map(|s| s.len()).sum()))
            .unwrap();
    }

    #[test]
    fn fill_stops_at_the_backlog_and_fill_for_close_takes_everything() {
        let chunk = Bytes::from(vec![7u8; 10_000]);
        let mut source = std::iter::repeat_n(chunk, 20);
        let mut q = WriteQueue::default();
        assert!(q.fill(|| source.next(), None));
        // Taken until at least BACKLOG bytes wait, and not one chunk more.
        assert_eq!(q.queued_bytes(), 70_000);
        assert!(q.held_back);
        assert!(
            !q.refill(|| source.next(), None),
            "not written out: nothing taken"
        );
        assert!(!q.fill(|| source.next(), None), "no room: nothing taken");
        assert_eq!(q.pop().map(|c| c.len()), Some(10_000));
        assert_eq!(q.queued_bytes(), 60_000);
        assert!(q.fill(|| source.next(), None));
        assert_eq!(q.queued_bytes(), 70_000);
        q.fill_for_close(|| source.next(), None);
        assert_eq!(q.queued_bytes(), 190_000);
        assert!(!q.held_back, "the source ran dry");
        assert_eq!(source.next(), None);
        // Partial writes keep the count exact.
        q.write_with(|_| Ok(5)).unwrap(); // five bytes a write, 38,000 writes
        assert_eq!(q.queued_bytes(), 0);
        assert!(q.is_empty());
    }

    #[test]
    fn refill_takes_more_only_once_a_held_back_queue_is_written_out() {
        let chunk = Bytes::from(vec![7u8; 40_000]);
        let mut source = std::iter::repeat_n(chunk, 3);
        let mut q = WriteQueue::default();
        assert!(q.fill(|| source.next(), None));
        assert_eq!(q.queued_bytes(), 80_000, "held back at the bound");
        let mut room = Some(50_000);
        q.write_with(|_| room.take().ok_or(io::ErrorKind::WouldBlock.into()))
            .unwrap();
        assert!(
            !q.refill(|| source.next(), None),
            "not empty yet: nothing taken"
        );
        assert_eq!(q.queued_bytes(), 30_000);
        write_out(&mut q);
        assert!(
            q.refill(|| source.next(), None),
            "written out: the rest taken"
        );
        assert_eq!(q.queued_bytes(), 40_000);
        // Nothing held back: a queue written out takes nothing more on its own.
        write_out(&mut q);
        let mut more = std::iter::once(Bytes::from_static(b"later"));
        assert!(!q.refill(|| more.next(), None));
        assert!(q.is_empty());
        assert_eq!(
            more.next().as_deref(),
            Some(&b"later"[..]),
            "left in the stream"
        );
        // Held back with the stream's last bytes: written out, the refill finds none.
        let mut last = std::iter::repeat_n(Bytes::from(vec![7u8; 40_000]), 2);
        assert!(q.fill(|| last.next(), None));
        write_out(&mut q);
        assert!(!q.refill(|| last.next(), None), "nothing left to take");
    }

    #[test]
    fn partial_writes_resume_where_they_stopped() {
        let mut q = WriteQueue::default();
        for c in ["abc", "", "defg", "h"] {
            q.push(Bytes::from(c));
        }
        let mut out = Vec::new();
        let mut budget = [2usize, 3, 0];
        let mut call = 0;
        // Two short writes, then "would block".
        q.write_with(|slices| {
            let allowed = budget[call];
            call += 1;
            if allowed == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let all: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
            out.extend_from_slice(&all[..allowed]);
            Ok(allowed)
        })
        .unwrap();
        assert_eq!(out, b"abcde");
        assert!(!q.is_empty());
        assert_eq!(q.queued_bytes(), 3, "the count follows partial writes");
        budget = [usize::MAX, 0, 0];
        call = 0;
        q.write_with(|slices| {
            let all: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
            let n = all.len().min(budget[call]);
            call += 1;
            out.extend_from_slice(&all[..n]);
            Ok(n)
        })
        .unwrap();
        assert_eq!(out, b"abcdefgh");
        assert!(q.is_empty());
    }

    #[test]
    fn a_write_that_writes_nothing_or_fails_is_an_error_not_a_spin() {
        let mut q = WriteQueue::default();
        q.push(Bytes::from_static(b"x"));
        assert_eq!(
            q.write_with(|_| Ok(0)).unwrap_err().kind(),
            io::ErrorKind::WriteZero
        );
        // Any failure but "would block" is the caller's to see; the bytes stay queued.
        assert_eq!(
            q.write_with(|_| Err(io::ErrorKind::BrokenPipe.into()))
                .unwrap_err()
                .kind(),
            io::ErrorKind::BrokenPipe
        );
        assert_eq!(q.queued_bytes(), 1);
    }
}
