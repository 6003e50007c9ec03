//! Reads that sweep: an event loop's read that takes, in one system call, what was queued
//! and what arrived while it copied.
//!
//! Why: Linux's TCP receive holds the socket while it copies, and segments arriving meanwhile
//! wait in the socket's backlog. A blocking read that has copied something processes that
//! backlog and copies on; a non-blocking one returns at the end of what was queued when it
//! began and leaves the backlog to the next call. Over loopback, with the sender on another
//! CPU, a non-blocking reader makes nearly twice the reads of a blocking one for the same
//! bytes — each a system call, a socket lock and a window update: a raw reader that waits in
//! `epoll_wait` and reads non-blocking took 1.07-1.08× the CPU per message of a blocking read
//! loop, the same reader reading in blocking mode 1.00-1.03× (1 KB and 9 KB firehoses, 256 KiB
//! reads, pinned, receive buffers fixed, 11 alternating rounds: 503 / 259 / 276 reads of 1 KB
//! messages for non-blocking / blocking-mode after readiness / blocking).
//!
//! An event loop can have both. The socket is put in blocking mode once connected
//! ([`SweepingReads::enable`]); a read that cannot sleep is made without `MSG_DONTWAIT`, every
//! other with it, and every write with it. A blocking `recv` sleeps only when it has copied
//! fewer bytes than its target (`SO_RCVLOWAT`, at most the buffer's length) and the connection
//! is open. Right after readiness reported the socket readable — at least the mark's worth
//! queued, or its end, or an error — and before any read of it, with the mark unchanged since
//! and this reader the only one, the bytes queued are at least the target: the read cannot
//! sleep. That is the one read made blocking ([`SweepingReads::readable`] says it may be;
//! any read, and any change of the mark, takes the permission back). A receive timeout
//! ([`STALL_BOUND`]) bounds the read should that ever not hold: it then returns `WouldBlock`,
//! is counted ([`SweepingReads::stalls`]) and logged as a warning (`tracing`).

use std::io::{self, IoSlice};
use std::time::Duration;

use bytes::BufMut;

use crate::{AsSocket, RecvLowWater};

/// The receive timeout of a socket in sweeping mode: the longest a read made blocking could
/// sleep if the rule above were broken (the kernel rounds it up to one scheduler tick,
/// 1-10 ms).
pub const STALL_BOUND: Duration = Duration::from_millis(1);

/// How an event loop reads and writes one connected socket: sweeping reads where the
/// platform allows them (Linux), else plain non-blocking ones.
#[derive(Debug, Default, Clone)]
pub struct SweepingReads {
    /// The socket is in blocking mode: reads that may sleep and writes pass `MSG_DONTWAIT`.
    enabled: bool,
    /// Readiness reported the socket readable and nothing read it or moved its mark since.
    may_sweep: bool,
    /// Reads made blocking that found nothing within [`STALL_BOUND`].
    stalls: u64,
}

impl SweepingReads {
    /// Puts the connected socket (non-blocking until now) in blocking mode with the
    /// [`STALL_BOUND`] receive timeout. Where that fails or is unsupported the socket stays
    /// non-blocking and reads stay plain.
    pub fn enable(&mut self, sock: &(impl AsSocket + ?Sized)) {
        self.enabled = sys::make_blocking(sock).is_ok();
        self.may_sweep = false;
    }

    /// Puts the socket back in non-blocking mode and reads and writes plainly again (for code
    /// that will drive it as a non-blocking socket, such as a runtime's own writes).
    ///
    /// # Errors
    /// The system call's error: the socket may still be in blocking mode.
    pub fn disable(&mut self, sock: &(impl AsSocket + ?Sized)) -> io::Result<()> {
        if self.enabled {
            sys::make_nonblocking(sock)?;
            self.enabled = false;
            self.may_sweep = false;
        }
        Ok(())
    }

    /// Whether [`enable`](Self::enable) put the socket in blocking mode.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Readiness reported the socket readable (`EPOLLIN`, its end or an error; not urgent
    /// data alone): the next read may sweep.
    #[inline]
    pub fn readable(&mut self) {
        self.may_sweep = true;
    }

    /// The socket's receive low-water mark changed: the bytes readiness counted may no
    /// longer reach a read's target, so the next read does not sweep.
    #[inline]
    pub fn mark_changed(&mut self) {
        self.may_sweep = false;
    }

    /// Sets the socket's receive low-water mark through `mark` (see [`RecvLowWater::set`]),
    /// taking back the next read's permission to sweep when the mark moves.
    ///
    /// # Errors
    /// Those of [`RecvLowWater::set`].
    pub fn set_mark(
        &mut self,
        mark: &mut RecvLowWater,
        sock: &(impl AsSocket + ?Sized),
        wanted: usize,
    ) -> io::Result<()> {
        let was = mark.current();
        let set = mark.set(sock, wanted);
        if mark.current() != was {
            self.mark_changed();
        }
        set
    }

    /// Reads made blocking that found nothing within [`STALL_BOUND`]: the rule was broken
    /// (0 on a correct loop).
    pub fn stalls(&self) -> u64 {
        self.stalls
    }

    /// Reads into `buf`: sweeping if readiness allowed it, else without waiting (`WouldBlock`
    /// when nothing is queued). `plain` reads a socket that was not [enabled](Self::enable):
    /// the caller's own non-blocking read.
    ///
    /// # Errors
    /// The system call's error; `WouldBlock` when nothing is queued (also after a stall, and
    /// after a signal interrupted one: a read that slept).
    #[inline]
    pub fn read(
        &mut self,
        sock: &(impl AsSocket + ?Sized),
        buf: &mut [u8],
        plain: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        if !self.enabled {
            return plain(buf);
        }
        let sweep = std::mem::take(&mut self.may_sweep);
        let read = sys::recv(sock, buf, !sweep);
        self.counted(sweep, read)
    }

    /// [`read`](Self::read) into `buf`'s spare room, uninitialised memory (nothing is zeroed
    /// before the kernel writes it), advancing `buf` past the bytes read: one system call into
    /// its first [`chunk_mut`](BufMut::chunk_mut) (all of the room a read buffer offers, e.g.
    /// a `BytesMut` limited to the read's size). Why: a reader in safe Rust zeroes every byte
    /// before it is read into whenever it cannot reuse bytes already initialised — each lap of
    /// a read buffer whose messages were cut out and handed on, a `memset` a byte received.
    ///
    /// # Errors
    /// As [`read`](Self::read); `Unsupported` on a socket not [enabled](Self::enable) (read it
    /// plainly, into initialised bytes).
    #[inline]
    pub fn read_spare(
        &mut self,
        sock: &(impl AsSocket + ?Sized),
        buf: &mut impl BufMut,
    ) -> io::Result<usize> {
        if !self.enabled {
            return Err(io::ErrorKind::Unsupported.into());
        }
        let sweep = std::mem::take(&mut self.may_sweep);
        let read = sys::recv_spare(sock, buf, !sweep);
        self.counted(sweep, read)
    }

    /// A read's result, a sweeping read that found nothing counted as a stall.
    #[inline(always)]
    fn counted(&mut self, swept: bool, read: io::Result<usize>) -> io::Result<usize> {
        match read {
            Err(e)
                if swept
                    && matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
            {
                self.stalls += 1;
                stalled(self.stalls);
                Err(io::ErrorKind::WouldBlock.into())
            }
            done => done,
        }
    }

    /// Writes `bufs` without waiting (`WouldBlock` when the send buffer is full). `plain`
    /// writes to a socket that was not [enabled](Self::enable).
    ///
    /// # Errors
    /// The system call's error; `WouldBlock` when the send buffer is full.
    #[inline]
    pub fn write_vectored(
        &self,
        sock: &(impl AsSocket + ?Sized),
        bufs: &[IoSlice<'_>],
        plain: impl FnOnce(&[IoSlice<'_>]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        if self.enabled {
            sys::send_vectored(sock, bufs)
        } else {
            plain(bufs)
        }
    }
}

/// A read made blocking found nothing within its bound: the loop waited for up to a tick
/// where it should not have. Logged at a connection's 1st, 2nd, 4th, 8th… stall, so that a
/// kernel breaking the rule on every read would not log per read.
#[cold]
#[inline(never)]
fn stalled(stalls: u64) {
    if stalls.is_power_of_two() {
        tracing::warn!(
            stalls,
            "a read after readiness found nothing and waited out its bound"
        );
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod sys {
    use std::io::{self, IoSlice};
    use std::os::fd::{AsFd, AsRawFd};

    use bytes::BufMut;

    use socket2::SockRef;

    /// Blocking mode, with the [`super::STALL_BOUND`] receive timeout.
    pub(super) fn make_blocking(sock: &(impl AsFd + ?Sized)) -> io::Result<()> {
        let fd = sock.as_fd();
        let sock = SockRef::from(&fd);
        sock.set_read_timeout(Some(super::STALL_BOUND))?;
        sock.set_nonblocking(false)
    }

    /// Non-blocking mode again.
    pub(super) fn make_nonblocking(sock: &(impl AsFd + ?Sized)) -> io::Result<()> {
        let fd = sock.as_fd();
        SockRef::from(&fd).set_nonblocking(true)
    }

    /// `recv` into `buf`, with `MSG_DONTWAIT` when `nowait`.
    #[allow(
        unsafe_code,
        reason = "one recv for initialised and uninitialised bytes alike"
    )]
    pub(super) fn recv(
        sock: &(impl AsFd + ?Sized),
        buf: &mut [u8],
        nowait: bool,
    ) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the whole call.
        unsafe { recv_raw(sock, buf.as_mut_ptr(), buf.len(), nowait) }
    }

    /// `recv` into `buf`'s first chunk of spare room, then `buf` advanced past the bytes
    /// read, with `MSG_DONTWAIT` when `nowait`.
    #[allow(
        unsafe_code,
        reason = "a BufMut's spare room is uninitialised: written by the kernel, then advanced"
    )]
    pub(super) fn recv_spare(
        sock: &(impl AsFd + ?Sized),
        buf: &mut impl BufMut,
        nowait: bool,
    ) -> io::Result<usize> {
        let chunk = buf.chunk_mut();
        let len = chunk.len();
        // SAFETY: `chunk` is `buf`'s spare room, valid for writes of `len` bytes (initialised
        // or not) while `buf` is borrowed, which it is for the whole call.
        let n = unsafe { recv_raw(sock, chunk.as_mut_ptr(), len, nowait)? };
        // SAFETY: the kernel initialised the first `n` bytes of the chunk (`recv` returns
        // what it wrote, at most `len`), the first bytes of `buf`'s spare room.
        unsafe { buf.advance_mut(n) };
        Ok(n)
    }

    /// `recv` into the `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes for the duration of the call.
    #[allow(unsafe_code, reason = "the recv system call")]
    unsafe fn recv_raw(
        sock: &(impl AsFd + ?Sized),
        ptr: *mut u8,
        len: usize,
        nowait: bool,
    ) -> io::Result<usize> {
        let flags = if nowait { libc::MSG_DONTWAIT } else { 0 };
        let fd = sock.as_fd();
        // SAFETY: `fd` is borrowed from a live socket for the whole call, so it stays open;
        // the caller promises `ptr` valid for writes of `len` bytes, and the kernel writes
        // at most that many.
        let n = unsafe { libc::recv(fd.as_raw_fd(), ptr.cast::<libc::c_void>(), len, flags) };
        // A negative count is the one error value; anything else fits `usize`.
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    /// `sendmsg` with `MSG_DONTWAIT` (and `MSG_NOSIGNAL`: a closed peer is an error, not a
    /// signal).
    pub(super) fn send_vectored(
        sock: &(impl AsFd + ?Sized),
        bufs: &[IoSlice<'_>],
    ) -> io::Result<usize> {
        let fd = sock.as_fd();
        SockRef::from(&fd).send_vectored_with_flags(bufs, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod sys {
    use std::io::{self, IoSlice};

    pub(super) fn make_blocking(_sock: &(impl super::AsSocket + ?Sized)) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    pub(super) fn make_nonblocking(_sock: &(impl super::AsSocket + ?Sized)) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    pub(super) fn recv(
        _sock: &(impl super::AsSocket + ?Sized),
        _buf: &mut [u8],
        _nowait: bool,
    ) -> io::Result<usize> {
        Err(io::ErrorKind::Unsupported.into())
    }

    pub(super) fn recv_spare(
        _sock: &(impl super::AsSocket + ?Sized),
        _buf: &mut impl bytes::BufMut,
        _nowait: bool,
    ) -> io::Result<usize> {
        Err(io::ErrorKind::Unsupported.into())
    }

    pub(super) fn send_vectored(
        _sock: &(impl super::AsSocket + ?Sized),
        _bufs: &[IoSlice<'_>],
    ) -> io::Result<usize> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use std::io::{IoSlice, Read, Write};
    use std::net::TcpStream;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::test_pairs::{pair, registered_pair};

    /// A connected pair: the client non-blocking and registered for edge-triggered
    /// readability, as an event loop holds it, then made sweeping.
    fn sweeping_pair() -> (mio::net::TcpStream, TcpStream, mio::Poll, SweepingReads) {
        let (client, server, poll) = registered_pair();
        let mut reads = SweepingReads::default();
        reads.enable(&client);
        assert!(reads.is_enabled());
        (client, server, poll, reads)
    }

    /// Runs `f` on another thread; fails if it has not finished within 5 s (a read that
    /// sleeps where it must not would sleep until data that never comes, but for the
    /// receive timeout — so the timeout is raised to a minute first where that matters).
    fn within_5s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(5))
            .expect("blocked where it must not")
    }

    fn no_plain(_: &mut [u8]) -> io::Result<usize> {
        panic!("an enabled reader read plainly")
    }

    /// Reads the empty `client` (on another thread, within 5 s): `WouldBlock`.
    fn read_empty(client: mio::net::TcpStream, mut reads: SweepingReads) -> SweepingReads {
        within_5s(move || {
            let mut buf = [0u8; 16];
            let err = reads.read(&client, &mut buf, no_plain).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
            reads
        })
    }

    #[test]
    fn a_read_after_readiness_sweeps_and_every_other_read_does_not_wait() {
        let (client, mut server, mut poll, mut reads) = sweeping_pair();
        // A minute's timeout: a read made blocking on an empty socket would now hang
        // past the 5 s check rather than return after a tick.
        socket2::SockRef::from(&client)
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut events = mio::Events::with_capacity(4);
        server.write_all(&[b'a'; 1000]).unwrap();
        poll.poll(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        assert!(events.iter().any(|e| e.is_readable()));
        reads.readable();
        let (client, reads) = within_5s(move || {
            let mut buf = [0u8; 1000];
            // Exactly what was queued: the read returns all of it and leaves nothing.
            assert_eq!(reads.read(&client, &mut buf, no_plain).unwrap(), 1000);
            // The next read may find nothing: it must not wait.
            let err = reads.read(&client, &mut buf, no_plain).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
            (client, reads)
        });
        assert_eq!(reads.stalls(), 0);
        // A mark moved after readiness takes the permission back too.
        let mut reads = reads;
        reads.readable();
        let mut mark = RecvLowWater::default();
        reads.set_mark(&mut mark, &client, 5000).unwrap();
        assert_eq!(mark.current(), 5000);
        assert_eq!(read_empty(client, reads).stalls(), 0);
    }

    #[test]
    fn a_read_made_blocking_on_an_empty_socket_is_bounded_and_counted() {
        let (client, _server, _poll, mut reads) = sweeping_pair();
        reads.readable(); // wrongly: nothing is queued
        assert_eq!(read_empty(client, reads).stalls(), 1);
    }

    #[test]
    fn writes_do_not_wait_for_a_full_send_buffer() {
        let (client, server, _poll, reads) = sweeping_pair();
        let written = within_5s(move || {
            let _server = server; // open, never read
            let chunk = vec![b'x'; 1 << 20];
            let mut written = 0usize;
            loop {
                match reads.write_vectored(&client, &[IoSlice::new(&chunk)], |_| {
                    panic!("an enabled writer wrote plainly")
                }) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return written,
                    Err(e) => panic!("{e}"),
                }
            }
        });
        assert!(written > 0);
    }

    #[test]
    fn disabled_again_the_socket_is_non_blocking() {
        let (client, _server, _poll, mut reads) = sweeping_pair();
        // A minute's timeout: still blocking, the read below would hang past the check.
        socket2::SockRef::from(&client)
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        reads.readable();
        reads.disable(&client).unwrap();
        assert!(!reads.is_enabled());
        let err = within_5s(move || {
            let mut buf = [0u8; 16];
            // Plainly, on the socket itself: non-blocking again, it does not wait.
            (&client).read(&mut buf).unwrap_err()
        });
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn a_reader_not_enabled_reads_and_writes_plainly() {
        let (client, mut server) = pair();
        let mut reads = SweepingReads::default();
        assert!(!reads.is_enabled());
        server.write_all(b"hi").unwrap();
        let mut buf = [0u8; 2];
        reads.readable();
        let n = reads
            .read(&client, &mut buf, |b| (&client).read(b))
            .unwrap();
        assert_eq!(n, 2);
        let n = reads
            .write_vectored(&client, &[IoSlice::new(b"yo")], |b| {
                (&client).write_vectored(b)
            })
            .unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn a_spare_read_fills_uninitialised_room_and_advances_past_it() {
        let (client, mut server, mut poll, mut reads) = sweeping_pair();
        socket2::SockRef::from(&client)
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut events = mio::Events::with_capacity(4);
        let sent: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        server.write_all(&sent).unwrap();
        poll.poll(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        reads.readable();
        let (block, reads) = within_5s(move || {
            let mut block = bytes::BytesMut::with_capacity(8192);
            block.extend_from_slice(b"kept");
            // Room for 2,000 bytes: the read takes that many and leaves the rest queued.
            let mut room = (&mut block).limit(2000);
            assert_eq!(reads.read_spare(&client, &mut room).unwrap(), 2000);
            let mut room = (&mut block).limit(5000);
            assert_eq!(reads.read_spare(&client, &mut room).unwrap(), 1000);
            // Nothing left: the next read must not wait.
            let err = reads.read_spare(&client, &mut room).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
            (block, reads)
        });
        assert_eq!(&block[..4], b"kept");
        assert_eq!(&block[4..], &sent[..]);
        assert_eq!(reads.stalls(), 0);
        // A reader that did not enable sweeping refuses: its caller reads plainly.
        let (plain, _server) = pair();
        let mut room = bytes::BytesMut::with_capacity(16);
        let err = SweepingReads::default()
            .read_spare(&plain, &mut room)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Unsupported);
        assert!(room.is_empty());
    }
}
