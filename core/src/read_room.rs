//! Where one read goes: a read buffer's room offered as initialised bytes or as uninitialised
//! memory written through [`BufMut`] (the transport's choice: a `recv` into spare room skips
//! the zero-fill that handing out `&mut [u8]` needs for bytes not yet written).

use bytes::buf::Limit;
use bytes::{BufMut, BytesMut};

/// A read's room as uninitialised memory (what `read_spare` hands out on [`crate::Stream`],
/// [`crate::WebSocketClient`] and [`crate::LineClient`]): the read block, limited to the
/// offer. Write into it only through [`BufMut`] — a `recv` into its
/// [`chunk_mut`](BufMut::chunk_mut) followed by [`advance_mut`](BufMut::advance_mut), tokio's
/// `try_read_buf`, [`put_slice`](BufMut::put_slice) — then pass the count written to
/// `handle_read`. Anything else done to the block through
/// [`get_mut`](bytes::buf::Limit::get_mut) is a transport bug: at best `handle_read` panics.
pub type ReadSpare<'a> = Limit<&'a mut BytesMut>;

/// Where one read goes: a read buffer's room as bytes ([`crate::Stream::read_buf`]: zeroed
/// where they are new), or as uninitialised memory ([`crate::Stream::read_spare`]).
#[derive(Debug)]
pub enum ReadRoom<'a> {
    /// Initialised bytes, written by index.
    Bytes(&'a mut [u8]),
    /// Uninitialised room, written through [`BufMut`]: what it holds is what was written.
    Spare(ReadSpare<'a>),
}

impl ReadRoom<'_> {
    /// Bytes that can be written (for `Spare`, still: writing shrinks it).
    #[inline]
    pub fn len(&self) -> usize {
        self.left(0)
    }

    /// Nothing can be written: no connection to read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes still free once `filled` have been written.
    #[inline]
    pub(crate) fn left(&self, filled: usize) -> usize {
        match self {
            Self::Bytes(buf) => buf.len() - filled,
            Self::Spare(room) => room.remaining_mut(),
        }
    }

    /// Writes `bytes` after the `filled` already written.
    #[inline]
    pub(crate) fn write(&mut self, filled: usize, bytes: &[u8]) {
        match self {
            Self::Bytes(buf) => buf[filled..filled + bytes.len()].copy_from_slice(bytes),
            Self::Spare(room) => room.put_slice(bytes),
        }
    }
}
