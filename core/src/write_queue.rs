//! Bytes waiting for a socket, written vectored: the part of writing that every transport
//! shares. The queue does no I/O itself; the caller passes the write.

use std::collections::VecDeque;
use std::io::{self, IoSlice};

use bytes::{Buf, Bytes};

/// Chunks gathered per vectored write.
const GATHER: usize = 64;

/// An ordered queue of outgoing chunks.
#[derive(Debug, Default)]
pub struct WriteQueue {
    chunks: VecDeque<Bytes>,
}

impl WriteQueue {
    /// Appends a chunk (empty ones are dropped).
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.chunks.push_back(chunk);
        }
    }

    /// Takes the next whole chunk, for callers that write one chunk at a time (async
    /// `write_all`).
    pub fn pop(&mut self) -> Option<Bytes> {
        self.chunks.pop_front()
    }

    /// Whether everything was written.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
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
    fn a_zero_length_write_is_an_error_not_a_spin() {
        let mut q = WriteQueue::default();
        q.push(Bytes::from_static(b"x"));
        assert_eq!(
            q.write_with(|_| Ok(0)).unwrap_err().kind(),
            io::ErrorKind::WriteZero
        );
    }
}
