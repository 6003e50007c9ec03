//! The limit: what reading the bytes costs with no library at all. WebSocket: 256 KiB reads,
//! frame headers parsed only to find message boundaries, payloads untouched (no UTF-8
//! validation). Lines: 256 KiB reads and a memchr newline count. Over TLS the reads go
//! through rustls's own blocking stream (`StreamOwned`, the buffered `ClientConnection`):
//! what reading costs with TLS as rustls's documentation sets it up and no other library.

use std::io::{Read, Write};
use std::net::TcpStream;

use super::{err, Extra, Target, STALL};
use crate::recorder::Recorder;

/// Bytes the limit reads per system call.
pub const READ: usize = 256 * 1024;
/// Bytes of a message's start kept for the latency stamp.
const HEAD: usize = feedwire_replay::STAMP_WITHIN;

pub(super) fn run(target: &Target, rec: Recorder) -> Result<(Recorder, Extra), String> {
    let sock = TcpStream::connect(&target.addr).map_err(|e| err("connect")(&e))?;
    sock.set_nodelay(true).map_err(|e| err("nodelay")(&e))?;
    sock.set_read_timeout(Some(STALL))
        .map_err(|e| err("timeout")(&e))?;
    match target.tls.as_ref() {
        Some(config) => receive(super::tls::blocking(target, config, sock)?, target, rec),
        None => receive(sock, target, rec),
    }
}

fn receive(
    mut sock: impl Read + Write,
    target: &Target,
    mut rec: Recorder,
) -> Result<(Recorder, Extra), String> {
    let mut buf = vec![0u8; READ];
    if target.lines {
        lines(&mut sock, &mut buf, &mut rec)?;
    } else {
        let (start, end) = handshake(&mut sock, target, &mut buf)?;
        let mut frames = Frames::default();
        if !frames.feed(&buf[start..end], &mut rec) {
            loop {
                let n = read(&mut sock, &mut buf)?;
                if frames.feed(&buf[..n], &mut rec) {
                    break;
                }
            }
        }
    }
    Ok((rec, Extra::default()))
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

/// Frame boundaries across reads.
struct Frames {
    /// Payload bytes of the current frame not yet seen.
    left: u64,
    len: usize,
    in_frame: bool,
    header: [u8; 14],
    header_len: usize,
    head: [u8; HEAD],
    head_len: usize,
}

impl Default for Frames {
    fn default() -> Self {
        Self {
            left: 0,
            len: 0,
            in_frame: false,
            header: [0; 14],
            header_len: 0,
            head: [0; HEAD],
            head_len: 0,
        }
    }
}

impl Frames {
    /// Returns true once the recorder is complete.
    fn feed(&mut self, mut data: &[u8], rec: &mut Recorder) -> bool {
        let want_head = rec.wants_head();
        while !data.is_empty() {
            if self.in_frame {
                let take = (self.left.min(data.len() as u64)) as usize;
                if want_head && self.head_len < HEAD {
                    let n = take.min(HEAD - self.head_len);
                    self.head[self.head_len..self.head_len + n].copy_from_slice(&data[..n]);
                    self.head_len += n;
                }
                data = &data[take..];
                self.left -= take as u64;
                if self.left == 0 {
                    self.in_frame = false;
                    if rec.on_message(self.len, &self.head[..self.head_len]) {
                        return true;
                    }
                }
                continue;
            }
            // Header: 2 bytes, then 0, 2 or 8 bytes of extended length (server frames are
            // unmasked).
            let need = |h: &[u8]| match h.get(1).map(|b| b & 0x7F) {
                None => 2,
                Some(126) => 4,
                Some(127) => 10,
                Some(_) => 2,
            };
            while self.header_len < need(&self.header[..self.header_len]) && !data.is_empty() {
                self.header[self.header_len] = data[0];
                self.header_len += 1;
                data = &data[1..];
            }
            let h = &self.header[..self.header_len];
            if h.len() < need(h) {
                return false;
            }
            let len = match h[1] & 0x7F {
                126 => u64::from(u16::from_be_bytes([h[2], h[3]])),
                127 => u64::from_be_bytes(h[2..10].try_into().expect("8 bytes")),
                n => u64::from(n),
            };
            let data_frame = h[0] & 0x0F != 0x8 && h[0] & 0x08 == 0;
            self.header_len = 0;
            self.head_len = 0;
            if len == 0 {
                if data_frame && rec.on_message(0, &[]) {
                    return true;
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
        false
    }
}

/// Betfair-style: authenticate, subscribe, then count lines (the greeting and the two status
/// answers are not data).
fn lines(sock: &mut (impl Read + Write), buf: &mut [u8], rec: &mut Recorder) -> Result<(), String> {
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
        let n = read(sock, buf)?;
        let chunk = &buf[..n];
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
