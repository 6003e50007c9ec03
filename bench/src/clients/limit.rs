//! The limit: what reading the bytes costs with no library at all. WebSocket: 256 KiB reads,
//! frame headers parsed only to find message boundaries, payloads untouched (no UTF-8
//! validation). Lines: 256 KiB reads and a memchr newline count. Over TLS the reads go
//! through rustls's own blocking stream (`StreamOwned`, the buffered `ClientConnection`):
//! what reading costs with TLS as rustls's documentation sets it up and no other library.
//!
//! `limit-utf8` is the same WebSocket reader plus the UTF-8 validation feedwire gives text
//! messages (its fast lanes' check, [`TextValidator::whole_in_lane`], the walk compiled for
//! the same vectors): between the two rows lies the cost of validation, between `limit-utf8`
//! and a feedwire row the cost of everything else the library does.
//!
//! Each read lands in a 256 KiB window of a buffer a page longer, the window moved on by
//! [`WINDOW_SHIFT`] bytes every read ([`Windows`]): the same bytes every read would let a
//! CPU's slow copy path set the limit for whole runs (see [`Windows`]).
//!
//! `limit-spin` is the WebSocket reader on a non-blocking socket that reads again at once
//! when there is nothing (latency runs only): the floor for clients that spin rather than
//! sleep between bursts, whose latency the sleeping limit would flatter.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use feedwire_core::testing::{in_vectors, Lane, TextCheck, TextValidator};

use super::{err, Extra, Reads, Target, STALL};
use crate::recorder::Recorder;

/// Bytes the limit reads per system call.
pub const READ: usize = 256 * 1024;
/// Bytes each read's window starts on from the last one's, modulo a page: seven cache lines,
/// so that 64 reads pass before an offset comes round, each window as aligned within a cache
/// line as the buffer itself.
const WINDOW_SHIFT: usize = 448;
/// Bytes of a page, the span the windows' starts move in.
const PAGE: usize = 4096;
/// Bytes of a message's start kept for the latency stamp.
const HEAD: usize = feedwire_replay::STAMP_WITHIN;

pub(super) fn run(target: &Target, rec: Recorder) -> Result<(Recorder, Extra), String> {
    connect_and_receive(target, rec, false, false)
}

/// [`run`] with text payloads validated as UTF-8, as feedwire validates them.
pub(super) fn run_utf8(target: &Target, rec: Recorder) -> Result<(Recorder, Extra), String> {
    connect_and_receive(target, rec, true, false)
}

/// [`run`] on a non-blocking socket, spinning until bytes come: the floor for the `-spin`
/// clients, as [`run`] is for the clients that sleep.
pub(super) fn run_spin(target: &Target, rec: Recorder) -> Result<(Recorder, Extra), String> {
    connect_and_receive(target, rec, false, true)
}

fn connect_and_receive(
    target: &Target,
    rec: Recorder,
    validate: bool,
    spin: bool,
) -> Result<(Recorder, Extra), String> {
    let sock = TcpStream::connect(&target.addr).map_err(|e| err("connect")(&e))?;
    sock.set_nodelay(true).map_err(|e| err("nodelay")(&e))?;
    sock.set_read_timeout(Some(STALL))
        .map_err(|e| err("timeout")(&e))?;
    let nonblocking = |s: &TcpStream| s.set_nonblocking(true).map_err(|e| err("nonblocking")(&e));
    match target.tls.as_ref() {
        Some(config) => {
            // The TLS handshake is done blocking; only the reads after it spin.
            let tls = super::tls::blocking(target, config, sock)?;
            if spin {
                nonblocking(&tls.sock)?;
                return receive(Spinning(tls, STALL), target, rec, validate);
            }
            receive(tls, target, rec, validate)
        }
        None if spin => {
            nonblocking(&sock)?;
            receive(Spinning(sock, STALL), target, rec, validate)
        }
        None => receive(sock, target, rec, validate),
    }
}

/// A non-blocking socket used as a blocking one: an operation that would block is tried
/// again at once, for at most the given while ([`STALL`]), then fails as timed out.
struct Spinning<S>(S, Duration);

impl<S> Spinning<S> {
    fn retry<T>(&mut self, mut op: impl FnMut(&mut S) -> io::Result<T>) -> io::Result<T> {
        let since = Instant::now();
        loop {
            match op(&mut self.0) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if since.elapsed() > self.1 {
                        return Err(io::ErrorKind::TimedOut.into());
                    }
                    std::hint::spin_loop();
                }
                done => return done,
            }
        }
    }
}

impl<S: Read> Read for Spinning<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.retry(|s| s.read(buf))
    }
}

impl<S: Write> Write for Spinning<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.retry(|s| s.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.retry(Write::flush)
    }
}

fn receive(
    sock: impl Read + Write,
    target: &Target,
    mut rec: Recorder,
    validate: bool,
) -> Result<(Recorder, Extra), String> {
    let mut sock = Counted {
        inner: sock,
        reads: Reads::default(),
    };
    let mut windows = Windows::new();
    if target.lines {
        lines(&mut sock, &mut windows, &mut rec)?;
    } else {
        let (start, end) = handshake(&mut sock, target, windows.next())?;
        let mut frames = Frames::new(validate);
        if !frames.feed(&windows.last()[start..end], &mut rec)? {
            loop {
                let n = read(&mut sock, windows.next())?;
                if frames.feed(&windows.last()[..n], &mut rec)? {
                    break;
                }
            }
        }
    }
    let extra = Extra {
        reads: Some(sock.reads),
        ..Extra::default()
    };
    Ok((rec, extra))
}

/// The limit's reads' buffer: [`READ`] bytes a read, each read's window [`WINDOW_SHIFT`]
/// bytes further into the buffer's first page than the last one's (wrapping).
///
/// Why not the same bytes every read: the kernel copies a read's bytes with `rep movsb` where
/// the CPU has fast short `rep movsb` (FSRM), and on some CPUs that copy crawls whenever the
/// destination lies 1-15 bytes past the source modulo 4 KiB — on the AMD EPYC (Zen 4) these
/// benchmarks ran on, 3.5 GB/s against 35-57 at any other offset (a copy of 1 KB to 256 KiB
/// between two buffers in cache). A reader behind its feed gets 256 KiB a read, each read
/// starting where the last one ended, so with a fixed buffer every read copies at the
/// offsets of the first: the raw loop reading into the front of one buffer spent 1.7-3.8 µs
/// per 9 KB message in 43 of 46 rounds, with moving windows 0.79-0.87 in 16 of 16 (feedwire's
/// blocking client 0.79-0.97, its reads moving by themselves: each lands after the partial
/// frame the last one left). The limit is the floor of reading, so it keeps no bad offset.
struct Windows {
    buf: Vec<u8>,
    /// Where the last window starts (bytes, below [`PAGE`]).
    at: usize,
}

impl Windows {
    fn new() -> Self {
        Self {
            buf: vec![0; READ + PAGE],
            at: PAGE - WINDOW_SHIFT,
        }
    }

    /// The next read's window ([`READ`] bytes).
    fn next(&mut self) -> &mut [u8] {
        self.at = (self.at + WINDOW_SHIFT) % PAGE;
        &mut self.buf[self.at..self.at + READ]
    }

    /// The window [`next`](Self::next) handed out last.
    fn last(&self) -> &[u8] {
        &self.buf[self.at..self.at + READ]
    }
}

/// A reader that counts its reads, and those that filled all of [`READ`] (as a feedwire
/// stream's statistics count them at its `max_read_size`, the same 256 KiB): two additions
/// a read.
struct Counted<S> {
    inner: S,
    reads: Reads,
}

impl<S: Read> Read for Counted<S> {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.reads.all += u64::from(n > 0);
        self.reads.full += u64::from(n == READ);
        Ok(n)
    }
}

impl<S: Write> Write for Counted<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn read(sock: &mut impl Read, buf: &mut [u8]) -> Result<usize, String> {
    match sock.read(buf) {
        Ok(0) => Err("the server closed early".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(err("read")(&e)),
    }
}

/// A hand-written upgrade; returns where the bytes after the response head lie in `buf`.
fn handshake(
    sock: &mut (impl Read + Write),
    t: &Target,
    buf: &mut [u8],
) -> Result<(usize, usize), String> {
    write!(
        sock,
        "GET {} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        t.path, t.addr
    )
    .map_err(|e| err("upgrade request")(&e))?;
    let mut filled = 0;
    loop {
        filled += read(sock, &mut buf[filled..])?;
        if let Some(i) = memchr::memmem::find(&buf[..filled], b"\r\n\r\n") {
            if !buf.starts_with(b"HTTP/1.1 101") {
                return Err("upgrade refused".to_owned());
            }
            return Ok((i + 4, filled));
        }
        if filled == buf.len() {
            return Err("response head too long".to_owned());
        }
    }
}

/// The limit's WebSocket reader: finds message boundaries across reads from the frame
/// headers alone (server frames, unmasked), and with `validate` checks text payloads.
#[derive(Debug)]
pub struct Frames {
    /// Payload bytes of the current frame not yet seen.
    left: u64,
    len: usize,
    in_frame: bool,
    /// The current frame is a data frame (not a control frame: those are skipped).
    data_frame: bool,
    header: [u8; 14],
    header_len: usize,
    head: [u8; HEAD],
    head_len: usize,
    /// Validate text payloads (`limit-utf8`).
    validate: bool,
    /// The message in progress is text (its first frame was), so its frames are validated.
    text: bool,
    /// The current frame is its message's last (FIN).
    fin: bool,
    /// The current frame is a whole text message (a text frame with FIN).
    whole_message: bool,
    utf8: TextValidator,
}

impl Frames {
    /// A reader at a frame boundary; `validate`: check text payloads as feedwire does.
    pub fn new(validate: bool) -> Self {
        Self {
            left: 0,
            len: 0,
            in_frame: false,
            data_frame: false,
            header: [0; 14],
            header_len: 0,
            head: [0; HEAD],
            head_len: 0,
            validate,
            text: false,
            fin: true,
            whole_message: false,
            utf8: TextValidator::default(),
        }
    }

    /// Returns true once the recorder is complete; an error for a text payload that is not
    /// UTF-8. The walk runs compiled for the vectors feedwire's fast lanes run in, with
    /// their check of a whole message ([`in_vectors`]), as feedwire's lanes do a read.
    pub fn feed(&mut self, data: &[u8], rec: &mut Recorder) -> Result<bool, String> {
        in_vectors(FeedLane {
            frames: self,
            data,
            rec,
        })
    }

    /// [`feed`](Self::feed), whole text messages checked with `check`.
    #[inline(always)]
    fn feed_in(
        &mut self,
        check: impl TextCheck,
        mut data: &[u8],
        rec: &mut Recorder,
    ) -> Result<bool, String> {
        let want_head = rec.wants_head();
        while !data.is_empty() {
            if self.in_frame {
                let take = (self.left.min(data.len() as u64)) as usize;
                if self.validate
                    && self.data_frame
                    && self.text
                    && !self.valid(check, &data[..take])
                {
                    return Err("a text message is not valid UTF-8".to_owned());
                }
                if want_head && self.head_len < HEAD {
                    let n = take.min(HEAD - self.head_len);
                    self.head[self.head_len..self.head_len + n].copy_from_slice(&data[..n]);
                    self.head_len += n;
                }
                data = &data[take..];
                self.left -= take as u64;
                if self.left == 0 {
                    self.in_frame = false;
                    if self.data_frame && rec.on_message(self.len, &self.head[..self.head_len]) {
                        return Ok(true);
                    }
                }
                continue;
            }
            let Some((b0, len)) = self.header(&mut data) else {
                return Ok(false);
            };
            // Opcodes 0x8-0xF (Close, Ping, Pong, reserved) are the control frames.
            let data_frame = b0 & 0x08 == 0;
            self.data_frame = data_frame;
            if data_frame {
                self.fin = b0 & 0x80 != 0;
                match b0 & 0x0F {
                    0x1 => self.text = true,
                    0x2 => self.text = false,
                    _ => {} // a continuation: its message's kind
                }
                self.whole_message = b0 & 0x0F == 0x1 && self.fin;
            }
            self.head_len = 0;
            if len == 0 {
                (self.left, self.len) = (0, 0);
                if data_frame && self.validate && self.text && self.fin && !self.valid(check, &[]) {
                    return Err("a text message is not valid UTF-8".to_owned());
                }
                if data_frame && rec.on_message(0, &[]) {
                    return Ok(true);
                }
                continue;
            }
            if !data_frame {
                // Control frames (a ping) are skipped, not counted.
                let skip = len.min(data.len() as u64) as usize;
                data = &data[skip..];
                if (skip as u64) < len {
                    self.left = len - skip as u64;
                    self.in_frame = true;
                    self.len = 0;
                }
                continue;
            }
            self.left = len;
            self.len = len as usize;
            self.in_frame = true;
        }
        Ok(false)
    }

    /// The next frame's first byte and payload length, its header taken off `data`: read in
    /// place when `data` holds all of it (nearly always), else gathered across reads. A
    /// header is 2 bytes, then 0, 2 or 8 bytes of extended length (server frames are
    /// unmasked).
    #[inline(always)]
    fn header(&mut self, data: &mut &[u8]) -> Option<(u8, u64)> {
        if self.header_len == 0 {
            if let [b0, b1, ref rest @ ..] = **data {
                match b1 & 0x7F {
                    126 if rest.len() >= 2 => {
                        *data = &rest[2..];
                        return Some((b0, u16::from_be_bytes([rest[0], rest[1]]).into()));
                    }
                    127 if rest.len() >= 8 => {
                        *data = &rest[8..];
                        let len = u64::from_be_bytes(rest[..8].try_into().expect("8 bytes"));
                        return Some((b0, len));
                    }
                    126 | 127 => {}
                    n => {
                        *data = rest;
                        return Some((b0, n.into()));
                    }
                }
            }
        }
        let need = |h: &[u8]| match h.get(1).map(|b| b & 0x7F) {
            None => 2,
            Some(126) => 4,
            Some(127) => 10,
            Some(_) => 2,
        };
        while self.header_len < need(&self.header[..self.header_len]) && !data.is_empty() {
            self.header[self.header_len] = data[0];
            self.header_len += 1;
            *data = &data[1..];
        }
        let h = &self.header[..self.header_len];
        if h.len() < need(h) {
            return None;
        }
        let len = match h[1] & 0x7F {
            126 => u64::from(u16::from_be_bytes([h[2], h[3]])),
            127 => u64::from_be_bytes(h[2..10].try_into().expect("8 bytes")),
            n => u64::from(n),
        };
        self.header_len = 0;
        Some((h[0], len))
    }

    /// Validates `piece` of the current frame's payload, whose unseen bytes (`left`) it
    /// starts at — as feedwire does: a message whole in one read gets the whole-message
    /// check, one in pieces the streaming check.
    #[inline(always)]
    fn valid(&mut self, check: impl TextCheck, piece: &[u8]) -> bool {
        let ends_frame = piece.len() as u64 == self.left;
        if !(ends_frame && self.fin) {
            self.utf8.feed(piece)
        } else if self.whole_message && self.left == self.len as u64 {
            check.is_valid(piece)
        } else {
            self.utf8.feed_last(piece)
        }
    }
}

/// One read's walk, for [`in_vectors`].
struct FeedLane<'a> {
    frames: &'a mut Frames,
    data: &'a [u8],
    rec: &'a mut Recorder,
}

impl Lane for FeedLane<'_> {
    type Output = Result<bool, String>;

    #[inline(always)]
    fn run<C: TextCheck>(self, check: C) -> Self::Output {
        self.frames.feed_in(check, self.data, self.rec)
    }
}

/// Betfair-style: authenticate, subscribe, then count lines (the greeting and the two status
/// answers are not data).
fn lines(
    sock: &mut (impl Read + Write),
    windows: &mut Windows,
    rec: &mut Recorder,
) -> Result<(), String> {
    sock.write_all(
        b"{\"op\":\"authentication\",\"id\":1,\"appKey\":\"bench\",\"session\":\"bench\"}\r\n\
          {\"op\":\"marketSubscription\",\"id\":2,\"marketFilter\":{}}\r\n",
    )
    .map_err(|e| err("subscribe")(&e))?;
    let mut skip = 3;
    let mut line_len = 0usize;
    let mut head = [0u8; HEAD];
    let mut head_len = 0;
    let want_head = rec.wants_head();
    loop {
        let n = read(sock, windows.next())?;
        let chunk = &windows.last()[..n];
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', chunk) {
            let len = line_len + end - start;
            if want_head && head_len < HEAD {
                let k = (end - start).min(HEAD - head_len);
                head[head_len..head_len + k].copy_from_slice(&chunk[start..start + k]);
                head_len += k;
            }
            line_len = 0;
            start = end + 1;
            if skip > 0 {
                skip -= 1;
                head_len = 0;
                continue;
            }
            let done = rec.on_message(len.saturating_sub(1), &head[..head_len]);
            head_len = 0;
            if done {
                return Ok(());
            }
        }
        if want_head && head_len < HEAD {
            let k = (n - start).min(HEAD - head_len);
            head[head_len..head_len + k].copy_from_slice(&chunk[start..start + k]);
            head_len += k;
        }
        line_len += n - start;
    }
}

#[cfg(test)]
mod tests {
    use feedwire_core::testing::server_frame;

    use super::*;

    /// Answers each call with the next of `script` (then `WouldBlock` for ever), counting
    /// flushes.
    struct Scripted {
        script: Vec<io::Result<usize>>,
        flushes: usize,
    }

    impl Scripted {
        fn new(mut script: Vec<io::Result<usize>>) -> Self {
            script.reverse();
            Self { script, flushes: 0 }
        }

        fn next(&mut self) -> io::Result<usize> {
            self.script
                .pop()
                .unwrap_or_else(|| Err(io::ErrorKind::WouldBlock.into()))
        }
    }

    impl Read for Scripted {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            self.next()
        }
    }

    impl Write for Scripted {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            self.next()
        }

        fn flush(&mut self) -> io::Result<()> {
            self.next()?;
            self.flushes += 1;
            Ok(())
        }
    }

    /// Reads `pieces` one a call (then the end), and takes whatever is written.
    struct Pieces(std::collections::VecDeque<Vec<u8>>);

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let Some(mut piece) = self.0.pop_front() else {
                return Ok(0);
            };
            let n = piece.len().min(buf.len());
            buf[..n].copy_from_slice(&piece[..n]);
            if n < piece.len() {
                self.0.push_front(piece.split_off(n));
            }
            Ok(n)
        }
    }

    impl Write for Pieces {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_upgrade_response_is_gathered_across_reads_up_to_the_buffer() {
        let target = Target::from_url("ws://127.0.0.1:1/ws");
        let frame = server_frame(true, 0x1, b"{}");
        let mut rest = b" Protocols\r\nUpgrade: websocket\r\n\r\n".to_vec();
        rest.extend_from_slice(&frame);
        let mut sock = Pieces([b"HTTP/1.1 101 Switching".to_vec(), rest].into());
        let mut buf = vec![0u8; 1024];
        let (start, end) = handshake(&mut sock, &target, &mut buf).unwrap();
        assert_eq!(&buf[start..end], &frame[..], "the bytes after the head");
        let mut endless = Pieces(vec![b"HTTP/1.1 101 x".to_vec(); 100].into());
        let e = handshake(&mut endless, &target, &mut buf).unwrap_err();
        assert_eq!(e, "response head too long");
    }

    #[test]
    fn each_read_lands_whole_cache_lines_from_the_front_where_the_last_63_reads_did_not() {
        let mut windows = Windows::new();
        let base = windows.buf.as_ptr() as usize;
        let mut start = || {
            let window = windows.next();
            assert_eq!(window.len(), READ);
            window.as_ptr() as usize - base
        };
        let starts: Vec<usize> = (0..PAGE / 64).map(|_| start()).collect();
        assert_eq!(starts[0], 0, "the first read (the upgrade's) at the front");
        assert!(starts.iter().all(|&s| s % 64 == 0 && s < PAGE));
        let mut distinct = starts.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), PAGE / 64, "{starts:?}");
        assert_eq!(start(), 0, "round again after 64 reads");
    }

    /// Microseconds since the epoch: a send stamp of now.
    fn now_us() -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros()
    }

    /// In latency runs each message's first bytes reach the recorder, however reads cut them:
    /// the send stamp is read from a message cut a few bytes in.
    #[test]
    fn heads_are_gathered_across_reads_in_latency_runs() {
        let now = now_us();
        let payload = format!(
            "{{\"stream\":\"x\",\"ts_us\":{},\"p\":\"{}\"}}",
            now - 100,
            "9".repeat(300)
        );
        let wire = server_frame(true, 0x1, payload.as_bytes());
        for at in [3, 10, 40, HEAD, wire.len() - 1] {
            let mut frames = Frames::new(true);
            let mut rec = Recorder::new(1, true);
            assert!(!frames.feed(&wire[..at], &mut rec).unwrap());
            assert!(frames.feed(&wire[at..], &mut rec).unwrap());
            assert_eq!(rec.latency().unwrap().len(), 1, "cut at {at}");
        }
    }

    #[test]
    fn every_header_length_is_read_however_the_header_is_cut() {
        // 7-bit, 16-bit and 64-bit lengths: headers of 2, 4 and 10 bytes.
        for len in [100, 1_000, 70_000] {
            let wire = server_frame(true, 0x1, "é".repeat(len / 2).as_bytes());
            for at in 0..=12 {
                let mut frames = Frames::new(true);
                let mut rec = Recorder::new(1, false);
                assert!(
                    !frames.feed(&wire[..at], &mut rec).unwrap(),
                    "{len} cut at {at}"
                );
                assert!(
                    frames.feed(&wire[at..], &mut rec).unwrap(),
                    "{len} cut at {at}"
                );
                assert_eq!(rec.window().unwrap().bytes, len as u64);
            }
        }
    }

    /// The line splitter in a latency run: three lines that are not data, then stamped
    /// lines, each cut across reads a few bytes in — every stamp read.
    #[test]
    fn line_heads_are_gathered_across_reads_in_latency_runs() {
        let now = now_us();
        let line = format!(
            "{{\"op\":\"mcm\",\"ts_us\":{},\"pt\":1,\"mc\":[{}]}}\r\n",
            now - 100,
            "1,".repeat(100) + "1"
        )
        .into_bytes();
        let mut pieces = vec![b"{\"op\":\"connection\"}\r\n{\"op\":\"status\"}\r\n".to_vec()];
        pieces.push(b"{\"op\":\"status\"}\r\n".to_vec());
        for cut in [3, 10, 60, HEAD + 5] {
            pieces.extend([line[..cut].to_vec(), line[cut..].to_vec()]);
        }
        // One line in three reads, the second past the head's end.
        let (a, b) = (3, HEAD + 20);
        pieces.extend([&line[..a], &line[a..b], &line[b..]].map(<[u8]>::to_vec));
        let mut rec = Recorder::new(5, true);
        lines(&mut Pieces(pieces.into()), &mut Windows::new(), &mut rec).unwrap();
        assert_eq!(rec.latency().unwrap().len(), 5);
    }

    #[test]
    fn spinning_retries_what_would_block_until_the_stall() {
        let would_block = || Err(io::ErrorKind::WouldBlock.into());
        let stall = Duration::from_millis(20);
        let mut s = Spinning(
            Scripted::new(vec![would_block(), would_block(), Ok(7)]),
            stall,
        );
        assert_eq!(s.read(&mut [0; 8]).unwrap(), 7);
        let mut s = Spinning(Scripted::new(vec![would_block(), Ok(0)]), stall);
        s.flush().unwrap();
        assert_eq!(s.0.flushes, 1, "the socket's own flush, retried");
        // Nothing ever comes: timed out, once the stall is over.
        let mut s = Spinning(Scripted::new(Vec::new()), stall);
        let since = Instant::now();
        let e = s.read(&mut [0; 8]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(since.elapsed() >= stall);
        // Any other error is the caller's at once: not retried, not turned into a timeout.
        let reset = Err(io::ErrorKind::ConnectionReset.into());
        let mut s = Spinning(Scripted::new(vec![reset, Ok(1)]), stall);
        let e = s.write(b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset);
    }

    /// `wire` fed in two pieces split at every position: Ok(messages) or the error.
    fn every_split(wire: &[u8], validate: bool) -> Vec<Result<u64, String>> {
        (0..=wire.len())
            .map(|at| {
                let mut frames = Frames::new(validate);
                let mut rec = Recorder::new(u64::MAX, false);
                frames.feed(&wire[..at], &mut rec)?;
                frames.feed(&wire[at..], &mut rec)?;
                Ok(rec.messages())
            })
            .collect()
    }

    #[test]
    fn valid_text_passes_whatever_the_split() {
        let mut wire = server_frame(true, 0x1, "héllo €".as_bytes());
        wire.extend(server_frame(true, 0x2, b"\xff binary is not checked"));
        wire.extend(server_frame(true, 0x9, b"\xff ping"));
        // A text message in two frames, a character cut between them.
        wire.extend(server_frame(false, 0x1, b"ab\xe2\x82"));
        wire.extend(server_frame(true, 0x0, b"\xac!"));
        wire.extend(server_frame(true, 0x1, b""));
        for result in every_split(&wire, true) {
            // Frames are counted, not messages: the limit does not join fragments.
            assert_eq!(result, Ok(5));
        }
    }

    #[test]
    fn invalid_text_fails_whatever_the_split_and_only_when_validating() {
        let cases: [&[&[u8]]; 3] = [
            &[b"ok \xff"],
            &[b"cut at the end \xe2\x82"],
            &[b"ab\xe2", b"\x28 continuation breaks it"],
        ];
        for pieces in cases {
            let mut wire = Vec::new();
            for (i, p) in pieces.iter().enumerate() {
                let opcode = if i == 0 { 0x1 } else { 0x0 };
                wire.extend(server_frame(i + 1 == pieces.len(), opcode, p));
            }
            for result in every_split(&wire, true) {
                assert!(result.is_err(), "{pieces:?}");
            }
            for result in every_split(&wire, false) {
                assert_eq!(result, Ok(pieces.len() as u64), "{pieces:?}");
            }
        }
    }
}
