//! [`LineClient`]: a sans-IO connection that speaks CRLF-delimited lines.

use std::collections::VecDeque;
use std::ops::Range;

use bytes::Bytes;

use super::framer::{Delimiter, LineFramer};
use crate::error::LineError;
use crate::offer::{offer_in_order, Offered, Take, TakeNothing};
use crate::read_buffer::ReadBuffer;
use crate::read_room::ReadSpare;
use crate::transmit::TransmitQueue;

/// An event from [`LineClient::poll_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LineEvent {
    /// A complete line, delimiter removed: a zero-copy slice of the read buffer.
    Line(Bytes),
    /// The peer ended the stream cleanly (no partial line pending). Terminal.
    Ended,
    /// The stream failed. Terminal; reported once, then kept by [`LineClient::error`].
    Failed(LineError),
}

/// A sans-IO line stream: the caller owns the socket (and any TLS), this owns the read buffer.
///
/// The calling contract is that of [`crate::WebSocketClient`]: after every change drain
/// [`poll_transmit`](Self::poll_transmit) and [`poll_event`](Self::poll_event), then read into
/// [`read_buf`](Self::read_buf) and report with [`handle_read`](Self::handle_read) or
/// [`handle_eof`](Self::handle_eof). Every line whose delimiter is among the bytes of one
/// `handle_read` is queued before that call returns.
#[derive(Debug)]
pub struct LineClient {
    rb: ReadBuffer,
    framer: LineFramer,
    delimiter: Delimiter,
    /// Reused between reads so splitting allocates nothing in steady state.
    ranges: Vec<Range<usize>>,
    tx: TransmitQueue,
    events: VecDeque<LineEvent>,
    /// `None` while open; the end once reached (sticky).
    ended: Option<Option<LineError>>,
}

impl LineClient {
    /// A line stream reading at most `max_read_size` bytes per read (at most 1 GiB: larger is
    /// taken as 1 GiB) and refusing lines over `max_line` bytes.
    ///
    /// # Panics
    /// If `max_read_size` is 0 (validate configuration first).
    pub fn new(delimiter: Delimiter, max_read_size: usize, max_line: usize) -> Self {
        Self {
            rb: ReadBuffer::new(max_read_size),
            framer: LineFramer::new(delimiter, max_line),
            delimiter,
            ranges: Vec::new(),
            tx: TransmitQueue::default(),
            events: VecDeque::new(),
            ended: None,
        }
    }

    /// Bytes waiting in [`poll_transmit`](Self::poll_transmit).
    pub fn queued_bytes(&self) -> usize {
        self.tx.queued_bytes()
    }

    /// The failure that ended the stream, if it failed.
    pub fn error(&self) -> Option<&LineError> {
        self.ended.as_ref().and_then(Option::as_ref)
    }

    /// Ended or failed, and every queued byte handed out.
    pub fn is_finished(&self) -> bool {
        self.ended.is_some() && self.tx.is_empty()
    }

    /// Bytes allocated to the read buffer: the block it writes into, plus up to two earlier
    /// blocks kept for reuse once the application has dropped their messages.
    pub fn read_buffer_capacity(&self) -> usize {
        self.rb.capacity() + self.rb.retained()
    }

    /// Reviews the read size; call it once a period on a connection that is reading (a
    /// [`Stream`](crate::Stream) does every `release_read_memory`, 1 s by default). Reads
    /// grow while they fill what they are offered; if no read since the last review took
    /// more than a quarter of the read size, it shrinks to the power of two at least twice
    /// the largest of them (at least 1 KiB), and the next read leaves a block more than twice
    /// the new size: a connection that had a burst does not keep a burst's buffer, nor, when
    /// its messages are cut out and queued, walk it with small reads. Returns whether it
    /// shrank.
    pub fn review_read_size(&mut self) -> bool {
        self.rb.review_read_size()
    }

    /// Frees the read buffer's block if no partial line is buffered; returns whether it did.
    /// The event queue's room goes too, when it holds no event.
    /// For transports holding many mostly-idle streams: call it when a stream goes quiet,
    /// not after every read (the next read would allocate and zero a new block).
    pub fn release_read_buffer(&mut self) -> bool {
        if self.events.is_empty() {
            // Its room was a read's events (or the handshake's): nothing a quiet
            // connection needs.
            self.events = VecDeque::new();
        }
        self.rb.release_if_empty()
    }

    /// Space for the next read: at most `max_read_size` bytes, never empty.
    pub fn read_buf(&mut self) -> &mut [u8] {
        self.rb.read_buf()
    }

    /// [`read_buf`](Self::read_buf)'s room as uninitialised memory, for a transport that can
    /// read into it (see [`ReadSpare`]): the same bytes offered, without zeroing them first.
    pub fn read_spare(&mut self) -> ReadSpare<'_> {
        self.rb.read_spare()
    }

    /// The transport wrote `n` bytes into [`read_buf`](Self::read_buf) (or through
    /// [`read_spare`](Self::read_spare)).
    ///
    /// # Panics
    /// If `n` exceeds what the transport wrote into the room it was offered (a transport bug).
    pub fn handle_read(&mut self, n: usize) {
        self.handle_read_offering(n, &mut TakeNothing);
    }

    /// [`handle_read`](Self::handle_read) for an embedding engine with a fast path: each
    /// complete line is first offered to `take` (lent or owned, see [`Take`]), as long as no
    /// event is queued ahead of it; a line not taken is queued as usual, and every line after
    /// it is queued too, so order is kept.
    pub(crate) fn handle_read_offering<T: Take>(&mut self, n: usize, take: &mut T) {
        self.rb.commit(n);
        if self.ended.is_some() {
            let all = self.rb.filled().len();
            self.rb.consume(all);
            return;
        }
        // Lending: lines are lent as the search finds them, while taken; the buffer lets go
        // of them without a slice each. The rest (from the first line not taken, or all of
        // them if an event is queued already; usually just the partial line at the end) is
        // split and queued in order.
        if T::LENDS && self.events.is_empty() {
            let lent = self
                .framer
                .take_lines(self.rb.filled(), |line| take.lend(line, Offered::Line));
            self.rb.discard(lent);
        }
        let result = self.framer.split(self.rb.filled(), &mut self.ranges);
        let consumed = match result {
            Ok(c) => c,
            Err(_) => self.rb.filled().len(),
        };
        let input = self.rb.consume(consumed);
        for range in self.ranges.drain(..) {
            let line = input.slice(range);
            if T::LENDS {
                self.events.push_back(LineEvent::Line(line));
            } else {
                offer_in_order(
                    &mut self.events,
                    line,
                    |line| take.take(line, Offered::Line),
                    LineEvent::Line,
                );
            }
        }
        match result {
            Ok(_) => self.rb.set_unknown_length_hint(),
            Err(e) => self.fail(e),
        }
    }

    /// Feeds bytes the caller already holds, in pieces of at most `max_read_size`.
    pub fn handle_input(&mut self, data: &[u8]) {
        crate::tls::PlaintextSink::feed(self, data);
    }

    /// The transport reached end of stream. A partial line left over is an error.
    pub fn handle_eof(&mut self) {
        if self.ended.is_some() {
            return;
        }
        match self.rb.filled().len() {
            0 => {
                tracing::debug!("line stream ended by peer");
                self.ended = Some(None);
                self.events.push_back(LineEvent::Ended);
            }
            len => self.fail(LineError::TruncatedLine { len }),
        }
    }

    /// Queues `line` followed by the delimiter. The line must not contain the delimiter.
    pub fn send_line(&mut self, line: &[u8]) -> Result<(), LineError> {
        if self.ended.is_some() {
            return Err(LineError::NotOpen);
        }
        if memchr::memmem::find(line, self.delimiter.as_bytes()).is_some() {
            return Err(LineError::DelimiterInLine);
        }
        self.tx.push_line(line, self.delimiter.as_bytes());
        Ok(())
    }

    /// Ends the session from our side: nothing more is sent or delivered.
    pub fn finish(&mut self) {
        if self.ended.is_none() {
            self.ended = Some(None);
            self.events.push_back(LineEvent::Ended);
        }
    }

    /// The next chunk of bytes to write, in order.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        self.tx.pop()
    }

    /// Whether [`poll_event`](Self::poll_event) has an event to return.
    #[must_use]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Bytes of room the event queue holds, used or not.
    pub(crate) fn event_room(&self) -> usize {
        self.events.capacity() * std::mem::size_of::<LineEvent>()
    }

    /// The next event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<LineEvent> {
        self.events.pop_front()
    }

    fn fail(&mut self, error: LineError) {
        tracing::debug!(%error, "line stream failed");
        self.events.push_back(LineEvent::Failed(error.clone()));
        self.ended = Some(Some(error));
        let all = self.rb.filled().len();
        self.rb.consume(all);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offer::Lent;

    fn read(client: &mut LineClient, bytes: &[u8], take: &mut impl Take) {
        let buf = client.read_buf();
        buf[..bytes.len()].copy_from_slice(bytes);
        client.handle_read_offering(bytes.len(), take);
    }

    /// Reads `bytes`, lending each line but `declined` (noted in `lent`, taken or not).
    fn lend(client: &mut LineClient, bytes: &[u8], lent: &mut Vec<Vec<u8>>, declined: &[u8]) {
        let mut take = Lent(|line: &[u8], _| {
            lent.push(line.to_vec());
            line != declined
        });
        read(client, bytes, &mut take);
    }

    fn lines(client: &mut LineClient) -> Vec<LineEvent> {
        std::iter::from_fn(|| client.poll_event()).collect()
    }

    #[test]
    fn a_line_is_not_lent_ahead_of_one_queued_before_it() {
        let mut client = LineClient::new(Delimiter::CrLf, 1024, 1024);
        let mut lent = Vec::new();
        // The first line is declined (queued); the second, in the same read, is queued
        // behind it.
        lend(&mut client, b"status\r\ndata1\r\n", &mut lent, b"status");
        // A later read, the queue not yet drained: nothing is lent past it.
        lend(&mut client, b"data2\r\n", &mut lent, b"");
        assert_eq!(lent, [b"status".to_vec()]);
        let line = |l: &'static [u8]| LineEvent::Line(Bytes::from_static(l));
        assert_eq!(
            lines(&mut client),
            [line(b"status"), line(b"data1"), line(b"data2")]
        );
        // Drained: lent again.
        lend(&mut client, b"data3\r\n", &mut lent, b"");
        assert_eq!(lent.last().map(Vec::as_slice), Some(&b"data3"[..]));
        assert!(lines(&mut client).is_empty());
    }

    #[test]
    fn finish_ends_the_stream_once_and_it_is_finished_when_flushed() {
        let mut client = LineClient::new(Delimiter::CrLf, 1024, 1024);
        assert!(!client.is_finished());
        client.send_line(b"bye").unwrap();
        assert!(!client.has_events());
        client.finish();
        client.finish();
        assert!(client.has_events());
        assert_eq!(lines(&mut client), [LineEvent::Ended]);
        assert!(!client.has_events());
        assert_eq!(client.send_line(b"more"), Err(LineError::NotOpen));
        assert!(!client.is_finished(), "a line still to write");
        assert_eq!(client.poll_transmit().as_deref(), Some(&b"bye\r\n"[..]));
        assert!(client.is_finished());
        // Nothing more is delivered.
        read(&mut client, b"late\r\n", &mut TakeNothing);
        assert!(lines(&mut client).is_empty());
    }

    #[test]
    fn the_read_buffer_is_released_only_without_a_partial_line() {
        let mut client = LineClient::new(Delimiter::CrLf, 4096, 4096);
        read(&mut client, b"whole\r\npart", &mut TakeNothing);
        let held = client.read_buffer_capacity();
        assert!(held > 0);
        assert!(!client.release_read_buffer(), "a partial line is buffered");
        assert_eq!(client.read_buffer_capacity(), held);
        read(&mut client, b"ial\r\n", &mut TakeNothing);
        assert_eq!(lines(&mut client).len(), 2);
        assert!(client.release_read_buffer());
        assert!(
            client.read_buffer_capacity() < held,
            "{}",
            client.read_buffer_capacity()
        );
    }
}
