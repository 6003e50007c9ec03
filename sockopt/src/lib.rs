//! The socket calls feedwire's event loops make that std, mio and tokio do not offer: the
//! receive low-water mark (`SO_RCVLOWAT`), which makes the kernel hold back a socket's
//! readiness until that many bytes are queued, and sweeping reads ([`SweepingReads`]: the
//! one read after readiness made in blocking mode, every other read and write with
//! `MSG_DONTWAIT`).
//!
//! Why: a WebSocket frame of hundreds of KB cannot be delivered before its last byte, yet
//! over loopback it arrives in five or more pieces, each a wake-up, a read and an
//! `epoll_wait`. With the mark set to the bytes still missing
//! ([`Stream::read_low_water`](https://docs.rs/feedwire-core)), an event loop wakes once,
//! when the frame can complete. An end of stream or an error still wakes it whatever the
//! mark.
//!
//! For readiness-driven loops only (mio, tokio): their reads either do not wait or, sweeping,
//! follow a readiness that already counted the mark's worth. Not for blocking read loops:
//! Linux wakes a reader asleep in `recv` only once a whole mark's worth has arrived since
//! what it already copied, so a blocking read that copied part of the bytes it waits for can
//! sleep until its timeout with all of them queued — seen in the benchmark's blocking
//! client, the last 82 KB of a TLS stream waiting a minute.
//!
//! Linux only (and Android); elsewhere [`set_recv_low_water`] returns `Unsupported` and
//! [`RecvLowWater`] stays at 1 byte, the default. A mark the receive buffer cannot hold
//! twice over is never set (see [`RecvLowWater`]).
//!
//! This crate holds one `setsockopt`, one `getsockopt` and one `recv` call, `unsafe` each, and
//! one `advance_mut` past what `recv` wrote into a buffer's uninitialised spare room
//! ([`SweepingReads::read_spare`]; blocking mode, the receive timeout and `sendmsg` go
//! through socket2's safe calls); the
//! only other `unsafe` in the workspace is core's: its AVX2 and AVX-512 ASCII checks and line
//! maps (`lines/newlines.rs`).

use std::io;

mod sweeping;
pub use sweeping::{SweepingReads, STALL_BOUND};

/// A socket whose descriptor the options can be set on (any `AsFd` on Unix).
#[cfg(unix)]
pub trait AsSocket: std::os::fd::AsFd {}
#[cfg(unix)]
impl<T: std::os::fd::AsFd + ?Sized> AsSocket for T {}

/// A socket whose descriptor the options can be set on (nothing is set off Unix).
#[cfg(not(unix))]
pub trait AsSocket {}
#[cfg(not(unix))]
impl<T: ?Sized> AsSocket for T {}

/// Sets the socket's receive low-water mark to `bytes` (clamped to 1..=`i32::MAX`).
///
/// Careful: when the mark does not fit the receive buffer, Linux grows the buffer to fit it
/// exactly and clamps the receive window to the mark (`tcp_set_rcvlowat`), leaving no room
/// for a window rounded down to whole segments (64 KiB on loopback).
/// [`RecvLowWater`] keeps the mark at a quarter of the buffer, where the kernel changes
/// neither.
///
/// # Errors
/// The system call's error; `Unsupported` off Linux.
pub fn set_recv_low_water(sock: &(impl AsSocket + ?Sized), bytes: usize) -> io::Result<()> {
    let value = i32::try_from(bytes.max(1)).unwrap_or(i32::MAX);
    sys::set(sock, sys::SO_RCVLOWAT, value)
}

/// The socket's receive low-water mark, bytes.
///
/// # Errors
/// The system call's error; `Unsupported` off Linux.
pub fn recv_low_water(sock: &(impl AsSocket + ?Sized)) -> io::Result<usize> {
    let value = sys::get(sock, sys::SO_RCVLOWAT)?;
    usize::try_from(value).map_err(|_| io::Error::other("negative SO_RCVLOWAT"))
}

/// The socket's receive buffer (`SO_RCVBUF`: what the kernel accounts queued bytes
/// against, overhead included), bytes.
///
/// # Errors
/// The system call's error; `Unsupported` off Linux.
pub fn recv_buffer_size(sock: &(impl AsSocket + ?Sized)) -> io::Result<usize> {
    let value = sys::get(sock, sys::SO_RCVBUF)?;
    usize::try_from(value).map_err(|_| io::Error::other("negative SO_RCVBUF"))
}

/// A socket's receive low-water mark as last set, so that it is set only when it changes (a
/// system call each time): a stream of small messages never makes one.
///
/// A raised mark is at most a quarter of the receive buffer as it is then (one more system
/// call to read it): the buffer then holds at least twice the mark, so the mark's worth can
/// always come in, and the kernel never resizes the buffer or clamps the window for it
/// (see [`set_recv_low_water`]). A connection whose buffer is still small (a fresh one;
/// Linux grows it as the reader keeps up) gets a smaller mark, or 1.
///
/// Raising the mark only saves wake-ups, so a failure to raise it leaves it where it was and
/// gives up raising it for good (where the option is unsupported, it stays at 1); lowering
/// it is what lets the reader see bytes it waits for, so a failure to lower it is returned.
#[derive(Debug, Clone)]
pub struct RecvLowWater {
    current: usize,
    can_raise: bool,
}

impl Default for RecvLowWater {
    fn default() -> Self {
        Self {
            current: 1,
            can_raise: true,
        }
    }
}

impl RecvLowWater {
    /// The mark as set now, bytes (1 on a fresh socket).
    pub fn current(&self) -> usize {
        self.current
    }

    /// Sets the mark to `wanted` bytes (at least 1, at most a quarter of the receive
    /// buffer) if that differs from the current one.
    ///
    /// # Errors
    /// Lowering the mark failed: the reader may not be woken for bytes it needs, so the
    /// connection should be treated as broken.
    pub fn set(&mut self, sock: &(impl AsSocket + ?Sized), wanted: usize) -> io::Result<()> {
        let mut target = wanted.max(1);
        if target == self.current {
            return Ok(());
        }
        if target > 1 {
            target = match self.can_raise.then(|| recv_buffer_size(sock)) {
                Some(Ok(buffer)) => target.min(buffer / 4).max(1),
                Some(Err(_)) => {
                    self.can_raise = false;
                    1
                }
                None => 1,
            };
        }
        if target == self.current {
            return Ok(());
        }
        match set_recv_low_water(sock, target) {
            Ok(()) => {
                self.current = target;
                Ok(())
            }
            Err(_) if target > self.current => {
                self.can_raise = false;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod sys {
    use std::io;
    use std::mem::size_of;
    use std::os::fd::{AsFd, AsRawFd};

    use libc::{c_int, c_void, socklen_t, SOL_SOCKET};

    pub(crate) use libc::{SO_RCVBUF, SO_RCVLOWAT};

    /// Sets an `int`-valued `SOL_SOCKET` option.
    #[allow(unsafe_code, reason = "setsockopt has no safe wrapper for SO_RCVLOWAT")]
    pub(crate) fn set(sock: &(impl AsFd + ?Sized), option: c_int, value: c_int) -> io::Result<()> {
        let fd = sock.as_fd();
        // SAFETY: `fd` is borrowed from a live socket for the whole call, so it stays open;
        // the option value points to a `c_int` on this stack frame and the length passed is
        // exactly its size, so the kernel reads only that `c_int`.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                SOL_SOCKET,
                option,
                std::ptr::from_ref(&value).cast::<c_void>(),
                size_of::<c_int>() as socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Reads an `int`-valued `SOL_SOCKET` option.
    #[allow(unsafe_code, reason = "getsockopt has no safe wrapper for SO_RCVLOWAT")]
    pub(crate) fn get(sock: &(impl AsFd + ?Sized), option: c_int) -> io::Result<c_int> {
        let mut value: c_int = 0;
        let mut len = size_of::<c_int>() as socklen_t;
        let fd = sock.as_fd();
        // SAFETY: `fd` is borrowed from a live socket for the whole call; the kernel writes
        // at most `len` bytes (the size of `value`, on this stack frame) and stores the
        // length written in `len`, both valid for writes for the duration of the call.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                SOL_SOCKET,
                option,
                std::ptr::from_mut(&mut value).cast::<c_void>(),
                &mut len,
            )
        };
        if rc == 0 {
            Ok(value)
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod sys {
    use std::io;

    pub(crate) const SO_RCVBUF: i32 = 0;
    pub(crate) const SO_RCVLOWAT: i32 = 0;

    pub(crate) fn set(
        _sock: &(impl super::AsSocket + ?Sized),
        _option: i32,
        _value: i32,
    ) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    pub(crate) fn get(_sock: &(impl super::AsSocket + ?Sized), _option: i32) -> io::Result<i32> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// Loopback socket pairs for this crate's tests.
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod test_pairs {
    use std::net::{TcpListener, TcpStream};

    /// A connected client and server, both blocking.
    pub(crate) fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    /// A non-blocking client registered for edge-triggered readability, as the adapters
    /// use it, and its blocking peer.
    pub(crate) fn registered_pair() -> (mio::net::TcpStream, TcpStream, mio::Poll) {
        let (client, server) = pair();
        client.set_nonblocking(true).unwrap();
        let mut client = mio::net::TcpStream::from_std(client);
        let poll = mio::Poll::new().unwrap();
        poll.registry()
            .register(&mut client, mio::Token(0), mio::Interest::READABLE)
            .unwrap();
        (client, server, poll)
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    use super::test_pairs::{pair, registered_pair};
    use super::*;

    #[test]
    fn the_mark_reads_back_as_set() {
        let (client, _server) = pair();
        assert_eq!(recv_low_water(&client).unwrap(), 1);
        set_recv_low_water(&client, 100_000).unwrap();
        assert_eq!(recv_low_water(&client).unwrap(), 100_000);
        set_recv_low_water(&client, 0).unwrap();
        assert_eq!(recv_low_water(&client).unwrap(), 1, "0 means 1");
    }

    #[test]
    fn readiness_waits_for_the_mark_and_an_end_wakes_it_anyway() {
        // What the transports rely on, with edge-triggered epoll as mio and tokio use it:
        // fewer bytes than the mark raise no event; the mark's worth does; the peer's end
        // does even below the mark. (An event that should not come would come within µs
        // over loopback; 100 ms without one is not a race.)
        let (mut client, mut server, mut poll) = registered_pair();
        let mut events = mio::Events::with_capacity(8);
        let mut wait = |poll: &mut mio::Poll| {
            poll.poll(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
            events.iter().any(|e| e.is_readable() || e.is_read_closed())
        };
        let mut mark = RecvLowWater::default();
        mark.set(&client, 3000).unwrap();
        assert_eq!(mark.current(), 3000);
        server.write_all(&[b'a'; 1000]).unwrap();
        assert!(
            !wait(&mut poll),
            "1000 bytes of a 3000-byte mark raised an event"
        );
        server.write_all(&[b'b'; 2000]).unwrap();
        assert!(wait(&mut poll), "the mark's worth raised no event");
        let mut buf = [0u8; 8192];
        assert_eq!(client.read(&mut buf).unwrap(), 3000);
        server.write_all(&[b'c'; 10]).unwrap();
        assert!(!wait(&mut poll));
        drop(server);
        assert!(wait(&mut poll), "the end raised no event below the mark");
        assert_eq!(client.read(&mut buf).unwrap(), 10);
        assert_eq!(client.read(&mut buf).unwrap(), 0);
    }

    #[test]
    fn lowering_the_mark_raises_the_event_for_bytes_already_queued() {
        // A transport lowers the mark after bytes below it arrived (the idle probe went
        // out): the kernel must signal them now, not at the next arrival.
        let (mut client, mut server, mut poll) = registered_pair();
        let mut events = mio::Events::with_capacity(8);
        let mut mark = RecvLowWater::default();
        mark.set(&client, 20_000).unwrap();
        assert_eq!(mark.current(), 20_000);
        server.write_all(&[b'a'; 500]).unwrap();
        poll.poll(&mut events, Some(Duration::from_millis(100)))
            .unwrap();
        assert!(events.is_empty());
        mark.set(&client, 1).unwrap();
        poll.poll(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        assert!(events.iter().any(|e| e.is_readable()));
        let mut buf = [0u8; 1000];
        assert_eq!(client.read(&mut buf).unwrap(), 500);
    }

    #[test]
    fn a_raised_mark_is_at_most_a_quarter_of_the_receive_buffer() {
        let (client, _server) = pair();
        let buffer = recv_buffer_size(&client).unwrap();
        assert!(buffer >= 4096, "{buffer}");
        let mut mark = RecvLowWater::default();
        mark.set(&client, 100 * buffer).unwrap();
        assert_eq!(mark.current(), buffer / 4);
        assert_eq!(recv_low_water(&client).unwrap(), buffer / 4);
        assert_eq!(
            recv_buffer_size(&client).unwrap(),
            buffer,
            "the kernel did not resize the buffer for the mark"
        );
        mark.set(&client, 1000).unwrap();
        assert_eq!(recv_low_water(&client).unwrap(), 1000);
    }

    /// A socket whose options read but do not set: `as_fd` lends the socket's descriptor
    /// for the first call (reading the receive buffer's size) and `/dev/null`'s after it
    /// (so setting the mark fails, `ENOTSOCK`), as a socket type without the option would.
    struct ReadsButDoesNotSet {
        sock: TcpStream,
        not_a_socket: std::fs::File,
        calls: std::cell::Cell<u32>,
    }

    impl std::os::fd::AsFd for ReadsButDoesNotSet {
        fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.calls.set(self.calls.get() + 1);
            if self.calls.get() == 1 {
                self.sock.as_fd()
            } else {
                self.not_a_socket.as_fd()
            }
        }
    }

    #[test]
    fn a_mark_that_cannot_be_raised_is_given_up_and_one_that_cannot_be_lowered_is_an_error() {
        let (client, _server) = pair();
        let refusing = ReadsButDoesNotSet {
            sock: client.try_clone().unwrap(),
            not_a_socket: std::fs::File::open("/dev/null").unwrap(),
            calls: std::cell::Cell::new(0),
        };
        // Raising fails: reading goes on without the mark (more wake-ups, nothing lost),
        // and the tracker stops trying.
        let mut mark = RecvLowWater::default();
        mark.set(&refusing, 20_000).unwrap();
        assert_eq!(mark.current(), 1);
        assert_eq!(
            refusing.calls.get(),
            2,
            "read the buffer, then tried to set"
        );
        mark.set(&client, 20_000).unwrap();
        assert_eq!(mark.current(), 1, "no second try");
        assert_eq!(recv_low_water(&client).unwrap(), 1);

        // Lowering fails: the reader might wait for bytes that are already there.
        let mut mark = RecvLowWater::default();
        mark.set(&client, 20_000).unwrap();
        let not_a_socket = std::fs::File::open("/dev/null").unwrap();
        assert!(mark.set(&not_a_socket, 1).is_err());
        assert_eq!(mark.current(), 20_000);
    }

    #[test]
    fn the_mark_is_set_only_when_it_changes() {
        let (client, _server) = pair();
        let mut mark = RecvLowWater::default();
        mark.set(&client, 1).unwrap();
        assert_eq!(recv_low_water(&client).unwrap(), 1);
        mark.set(&client, 20_000).unwrap();
        assert_eq!(recv_low_water(&client).unwrap(), 20_000);
        // Changed behind the tracker's back: an equal request makes no call, so it stays.
        set_recv_low_water(&client, 5).unwrap();
        mark.set(&client, 20_000).unwrap();
        assert_eq!(recv_low_water(&client).unwrap(), 5);
        mark.set(&client, 1).unwrap();
        assert_eq!(recv_low_water(&client).unwrap(), 1);
    }
}
