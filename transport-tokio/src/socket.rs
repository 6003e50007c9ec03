//! The connection's socket, in the runtime's reactor or parked out of it.
//!
//! While the application is behind (a batch waits for room in its event channel) the stream
//! reads nothing; a socket left in the reactor still woke the runtime's driver for every
//! segment that arrived meanwhile (readiness is edge-triggered: an `epoll_wait` return and
//! a park again each, with no task to run) — on a paced feed about one a message, until the
//! receive window closed, on the threads the application was short of. Parked, the socket
//! is out of the reactor; registered again, it reports at once what arrived meanwhile
//! (`epoll` answers a registration with the readiness the socket already has).

use std::io::{self, IoSlice, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use feedwire_core::ReadRoom;
use feedwire_sockopt::{RecvLowWater, SweepingReads};
use tokio::io::{AsyncRead, Interest, ReadBuf};
use tokio::net::TcpStream;

/// How a connection's socket is read and written: on a current-thread runtime, sweeping (the
/// socket in blocking mode, the first read after readiness made blocking; see
/// [`SweepingReads`]); on a multi-thread one, plainly non-blocking.
///
/// Why only there: the read that sweeps must follow a readiness reported after the last read.
/// tokio keeps readiness until a read clears it, and a clear is skipped when an event came in
/// since the readiness was looked at. On a current-thread runtime nothing comes in while the
/// stream's task runs (the driver turns between task polls), so the clear after a read always
/// happens and the next readiness comes from an `epoll_wait` after it; on a multi-thread
/// runtime another worker's driver may report bytes the read then takes, and the readiness
/// it leaves would let the next read sleep.
#[derive(Debug)]
pub(crate) struct Sweep {
    reads: SweepingReads,
    /// Readiness was cleared after the last read (or nothing read the socket yet): the next
    /// readiness is an `epoll_wait`'s after it.
    cleared: bool,
}

impl Sweep {
    /// For a socket the stream's task will read: sweeping where the runtime is current-thread.
    /// `read_before`: something read the socket already (the TLS handshake), so readiness
    /// tokio still holds may be older than that read.
    pub(crate) fn new(sock: &TcpStream, read_before: bool) -> Self {
        let mut reads = SweepingReads::default();
        let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
        if matches!(flavor, Ok(tokio::runtime::RuntimeFlavor::CurrentThread)) {
            reads.enable(sock);
        }
        Self {
            reads,
            cleared: !read_before,
        }
    }

    /// Reads and writes plainly, the socket left non-blocking.
    #[cfg(test)]
    pub(crate) fn plain() -> Self {
        Self {
            reads: SweepingReads::default(),
            cleared: true,
        }
    }

    /// Whether reads sweep (the socket is in blocking mode).
    #[cfg(test)]
    pub(crate) fn is_enabled(&self) -> bool {
        self.reads.is_enabled()
    }

    /// Reads made blocking that found nothing within their bound (0 on a correct driver).
    #[cfg(test)]
    pub(crate) fn stalls(&self) -> u64 {
        self.reads.stalls()
    }
}

/// A connection's TCP socket: non-blocking, or in blocking mode read and written as
/// [`Sweep`] says.
#[derive(Debug)]
pub(crate) enum Socket {
    /// In the reactor: reads and writability are awaited.
    Registered(TcpStream),
    /// Out of the reactor: never awaited, written to directly.
    Parked(std::net::TcpStream),
    /// A move between the two failed and took the socket with it (that error was reported
    /// to the stream, which lets the connection go).
    Lost,
}

impl Socket {
    /// Takes the socket out of the reactor (if it is in).
    #[inline]
    pub(crate) fn park(&mut self) -> io::Result<()> {
        if matches!(self, Self::Registered(_)) {
            self.take_out()?;
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn take_out(&mut self) -> io::Result<()> {
        match std::mem::replace(self, Self::Lost) {
            Self::Registered(sock) => *self = Self::Parked(sock.into_std()?),
            other => *self = other,
        }
        Ok(())
    }

    /// The socket in the reactor, registered again if it was parked. Must run within the
    /// runtime (every caller is on the stream's task). Inline: every read and every wait
    /// asks, and the socket is nearly always in.
    #[inline]
    pub(crate) fn registered(&mut self, sweep: &mut Sweep) -> io::Result<&mut TcpStream> {
        if !matches!(self, Self::Registered(_)) {
            self.register_again(sweep)?;
        }
        match self {
            Self::Registered(sock) => Ok(sock),
            _ => Err(lost()),
        }
    }

    /// tokio registers only non-blocking sockets (a debug build panics otherwise): a
    /// sweeping socket is registered non-blocking and put back in blocking mode after.
    #[cold]
    #[inline(never)]
    fn register_again(&mut self, sweep: &mut Sweep) -> io::Result<()> {
        match std::mem::replace(self, Self::Lost) {
            Self::Parked(sock) => {
                if sweep.reads.is_enabled() {
                    sock.set_nonblocking(true)?;
                }
                let sock = TcpStream::from_std(sock)?;
                if sweep.reads.is_enabled() {
                    sweep.reads.enable(&sock);
                }
                *self = Self::Registered(sock);
            }
            other => *self = other,
        }
        Ok(())
    }

    /// Reads into the room `room` gives once the socket is readable (registered again if it
    /// was parked): `Pending` holds the task's waker. `room` is called only when readiness
    /// says there is something to read, at most once: a quiet stream's read buffer was given
    /// back (`release_read_memory`), and asking for it would allocate one again just to find
    /// nothing. A read that filled less than the room (or found nothing) clears the socket's
    /// readiness: new bytes raise a new event, so no read is made only to find the socket
    /// empty.
    #[inline]
    pub(crate) fn poll_read<'b>(
        &mut self,
        cx: &mut Context<'_>,
        sweep: &mut Sweep,
        room: impl FnOnce() -> ReadRoom<'b>,
    ) -> Poll<io::Result<usize>> {
        let sock = self.registered(sweep)?;
        let sweeping = sweep.reads.is_enabled();
        ready!(sock.poll_read_ready(cx))?;
        let mut room = room();
        if let (ReadRoom::Bytes(buf), false) = (&mut room, sweeping) {
            // tokio's own read clears readiness after a short read (and waits again, the
            // buffer kept, when readiness was stale).
            let mut read_buf = ReadBuf::new(buf);
            ready!(Pin::new(sock).poll_read(cx, &mut read_buf))?;
            return Poll::Ready(Ok(read_buf.filled().len()));
        }
        let sock: &TcpStream = sock;
        let offered = room.len();
        loop {
            if sweeping && std::mem::take(&mut sweep.cleared) {
                sweep.reads.readable();
            }
            let mut short = None;
            // A short read is returned to `try_io` as `WouldBlock` so that it clears the
            // readiness, and its count kept aside.
            let result = sock.try_io(Interest::READABLE, || {
                let n = match &mut room {
                    ReadRoom::Bytes(buf) => sweep
                        .reads
                        .read(sock, buf, |_| Err(io::ErrorKind::Unsupported.into()))?,
                    ReadRoom::Spare(spare) if sweeping => sweep.reads.read_spare(sock, spare)?,
                    // tokio's read into uninitialised memory, within this `try_io` (its own
                    // clears nothing after a short read).
                    ReadRoom::Spare(spare) => sock.try_read_buf(spare)?,
                };
                if n > 0 && n < offered {
                    short = Some(n);
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            });
            match result {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if sweeping {
                        sweep.cleared = true;
                    }
                    if let Some(n) = short {
                        return Poll::Ready(Ok(n));
                    }
                    // Nothing: readiness is cleared, so this poll registers the waker.
                    ready!(sock.poll_read_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Back to non-blocking mode for the runtime's own writes (the last bytes' flush).
    pub(crate) fn stop_sweeping(&self, sweep: &mut Sweep) -> io::Result<()> {
        match self {
            Self::Registered(sock) => sweep.reads.disable(sock),
            Self::Parked(sock) => sweep.reads.disable(sock),
            Self::Lost => Ok(()),
        }
    }

    /// Whether the socket is out of the reactor.
    #[cfg(test)]
    pub(crate) fn is_parked(&self) -> bool {
        matches!(self, Self::Parked(_))
    }

    /// Writes what the socket takes now, without waiting.
    pub(crate) fn try_write(&self, sweep: &Sweep, buf: &[u8]) -> io::Result<usize> {
        self.try_write_vectored(sweep, &[IoSlice::new(buf)])
    }

    /// Writes what the socket takes now of `slices`, in order, without waiting.
    #[inline]
    pub(crate) fn try_write_vectored(
        &self,
        sweep: &Sweep,
        slices: &[IoSlice<'_>],
    ) -> io::Result<usize> {
        let reads = &sweep.reads;
        match self {
            Self::Registered(sock) if reads.is_enabled() => sock.try_io(Interest::WRITABLE, || {
                reads.write_vectored(sock, slices, |_| Err(io::ErrorKind::Unsupported.into()))
            }),
            Self::Registered(sock) => sock.try_write_vectored(slices),
            Self::Parked(sock) => {
                reads.write_vectored(sock, slices, |b| (&*sock).write_vectored(b))
            }
            Self::Lost => Err(lost()),
        }
    }

    /// Keeps the socket's receive low-water mark at `wanted` bytes (see `RecvLowWater`); a
    /// moved mark takes back the next read's permission to sweep.
    #[inline]
    pub(crate) fn set_low_water(
        &self,
        sweep: &mut Sweep,
        mark: &mut RecvLowWater,
        wanted: usize,
    ) -> io::Result<()> {
        match self {
            Self::Registered(sock) => sweep.reads.set_mark(mark, sock, wanted),
            Self::Parked(sock) => sweep.reads.set_mark(mark, sock, wanted),
            Self::Lost => Ok(()),
        }
    }
}

fn lost() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the socket was lost moving into or out of the reactor",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use std::io::Read;

    fn pair() -> (Socket, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.set_nonblocking(true).unwrap();
        let (server, _) = listener.accept().unwrap();
        (
            Socket::Registered(TcpStream::from_std(client).unwrap()),
            server,
        )
    }

    /// Parked and registered again, the socket is the same connection: what was written to
    /// it while parked arrives, and what arrived while it was parked is read at once.
    #[tokio::test]
    async fn a_parked_socket_writes_and_reads_what_came_once_registered_again() {
        use tokio::io::AsyncReadExt;

        let (mut sock, mut server) = pair();
        let sweep = Sweep::plain();
        sock.park().unwrap();
        assert!(sock.is_parked());
        sock.park().unwrap();
        assert_eq!(sock.try_write(&sweep, b"ab").unwrap(), 2);
        let slices = [IoSlice::new(b"cd"), IoSlice::new(b"e")];
        assert_eq!(sock.try_write_vectored(&sweep, &slices).unwrap(), 3);
        let mut got = [0u8; 5];
        server.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abcde");
        server.write_all(b"while parked").unwrap();
        let mut buf = [0u8; 12];
        let registered = sock.registered(&mut Sweep::plain()).unwrap();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            registered.read_exact(&mut buf),
        )
        .await
        .expect("what arrived while parked is read once registered")
        .unwrap();
        assert_eq!(&buf, b"while parked");
        assert!(!sock.is_parked());
    }

    #[tokio::test]
    async fn a_lost_socket_says_so_and_takes_no_mark() {
        let mut sock = Socket::Lost;
        let mut sweep = Sweep::plain();
        assert_eq!(
            sock.try_write(&sweep, b"x").unwrap_err().kind(),
            io::ErrorKind::NotConnected
        );
        assert!(sock
            .try_write_vectored(&sweep, &[IoSlice::new(b"x")])
            .is_err());
        assert!(sock.registered(&mut Sweep::plain()).is_err());
        let mut mark = RecvLowWater::default();
        sock.set_low_water(&mut sweep, &mut mark, 4096).unwrap();
    }

    /// Polls a read once, with a waker that does nothing.
    fn poll_once(sock: &mut Socket, sweep: &mut Sweep, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        sock.poll_read(&mut cx, sweep, move || ReadRoom::Bytes(buf))
    }

    /// Reads until one returns bytes (within 5 s; each `Pending` yields to the runtime so
    /// its driver sees new readiness).
    async fn read_some(sock: &mut Socket, sweep: &mut Sweep, buf: &mut [u8]) -> usize {
        let wait = std::future::poll_fn(|cx| {
            let buf = &mut *buf;
            sock.poll_read(cx, sweep, move || ReadRoom::Bytes(buf))
        });
        tokio::time::timeout(std::time::Duration::from_secs(5), wait)
            .await
            .expect("bytes were written")
            .unwrap()
    }

    /// On a current-thread runtime the socket is in blocking mode, yet a read never waits in
    /// the system call: a read of what is there takes it, the read after a full one finds
    /// nothing without waiting (no stall), and once readiness was cleared the next bytes
    /// are read as readiness reports them — and writes do not wait for a full send buffer.
    #[tokio::test]
    async fn on_a_current_thread_runtime_reads_sweep_and_never_wait_in_the_socket() {
        let (mut sock, mut server) = pair();
        let Socket::Registered(registered) = &sock else {
            unreachable!()
        };
        let mut sweep = Sweep::new(registered, false);
        assert!(sweep.is_enabled());
        server.write_all(&[b'a'; 1000]).unwrap();
        let mut buf = [0u8; 1000];
        assert_eq!(read_some(&mut sock, &mut sweep, &mut buf).await, 1000);
        // A full read leaves readiness set; the next read must not be the blocking one.
        assert!(poll_once(&mut sock, &mut sweep, &mut buf).is_pending());
        assert_eq!(sweep.stalls(), 0);
        server.write_all(b"bcd").unwrap();
        assert_eq!(read_some(&mut sock, &mut sweep, &mut buf).await, 3);
        assert_eq!(&buf[..3], b"bcd");
        // That was short: readiness cleared, the next poll waits for new bytes.
        assert!(poll_once(&mut sock, &mut sweep, &mut buf).is_pending());
        server.write_all(b"e").unwrap();
        assert_eq!(read_some(&mut sock, &mut sweep, &mut buf).await, 1);
        assert_eq!(sweep.stalls(), 0);
        // Parked and registered again (tokio takes only non-blocking sockets), still
        // sweeping.
        sock.park().unwrap();
        server.write_all(b"fg").unwrap();
        assert_eq!(read_some(&mut sock, &mut sweep, &mut buf).await, 2);
        assert!(sweep.is_enabled());
        assert!(poll_once(&mut sock, &mut sweep, &mut buf).is_pending());
        assert_eq!(sweep.stalls(), 0);
        let chunk = vec![b'x'; 1 << 20];
        let mut written = 0;
        while let Ok(n) = sock.try_write(&sweep, &chunk) {
            written += n;
        }
        assert!(written > 0);
        let err = sock.try_write(&sweep, &chunk).unwrap_err();
        assert_eq!(
            err.kind(),
            io::ErrorKind::WouldBlock,
            "the send buffer is full"
        );
        // Back to non-blocking for tokio's own writes.
        sock.stop_sweeping(&mut sweep).unwrap();
        assert!(!sweep.is_enabled());
    }

    /// While nothing is readable no buffer is asked for (a quiet stream's was given back:
    /// asking would allocate it again), sweeping or not; once bytes come, one is, once a read.
    async fn asks_for_a_buffer_only_when_readable(sweeping: bool) {
        let (mut sock, mut server) = pair();
        let Socket::Registered(registered) = &sock else {
            unreachable!()
        };
        let mut sweep = Sweep::new(registered, false);
        assert_eq!(sweep.is_enabled(), sweeping);
        let mut asked = 0;
        let mut buf = [0u8; 16];
        for _ in 0..3 {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let poll = sock.poll_read(&mut cx, &mut sweep, || {
                asked += 1;
                ReadRoom::Bytes(&mut buf[..])
            });
            assert!(poll.is_pending());
            tokio::task::yield_now().await;
        }
        assert_eq!(asked, 0, "nothing to read, no buffer");
        server.write_all(b"abc").unwrap();
        let wait = std::future::poll_fn(|cx| {
            sock.poll_read(cx, &mut sweep, || {
                asked += 1;
                ReadRoom::Bytes(&mut buf[..])
            })
        });
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), wait)
            .await
            .expect("bytes were written")
            .unwrap();
        assert_eq!(&buf[..n], b"abc");
        assert_eq!(asked, 1);
    }

    #[tokio::test]
    async fn a_sweeping_socket_asks_for_a_buffer_only_when_readable() {
        asks_for_a_buffer_only_when_readable(true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plain_socket_asks_for_a_buffer_only_when_readable() {
        asks_for_a_buffer_only_when_readable(false).await;
    }

    /// Reads into `block`'s spare room, at most `limit` bytes, until a read returns bytes
    /// (within 5 s).
    async fn read_spare_some(
        sock: &mut Socket,
        sweep: &mut Sweep,
        block: &mut bytes::BytesMut,
        limit: usize,
    ) -> usize {
        let wait = std::future::poll_fn(|cx| {
            sock.poll_read(cx, sweep, || ReadRoom::Spare((&mut *block).limit(limit)))
        });
        tokio::time::timeout(std::time::Duration::from_secs(5), wait)
            .await
            .expect("bytes were written")
            .unwrap()
    }

    /// A stream's read buffer is read into as uninitialised spare room, sweeping or not: the
    /// bytes land after what the block holds, a read stops at the room's limit, and a short
    /// one clears readiness like a read into bytes.
    async fn spare_reads(sweeping: bool) {
        let (mut sock, mut server) = pair();
        let Socket::Registered(registered) = &sock else {
            unreachable!()
        };
        let mut sweep = Sweep::new(registered, false);
        assert_eq!(sweep.is_enabled(), sweeping);
        let mut block = bytes::BytesMut::with_capacity(64);
        block.extend_from_slice(b"kept:");
        server.write_all(b"abc").unwrap();
        assert_eq!(
            read_spare_some(&mut sock, &mut sweep, &mut block, 16).await,
            3
        );
        assert_eq!(&block[..], b"kept:abc");
        // Short: readiness cleared, the next poll waits and, sweeping (a current-thread
        // runtime), asks for no room. Plain, on a multi-thread runtime, another worker's driver
        // may set readiness again for the bytes just read (an event it took before the clear):
        // then the room is asked for, the read finds nothing, and the poll waits all the same.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut asked = false;
        let mut probe = bytes::BytesMut::with_capacity(16);
        let poll = sock.poll_read(&mut cx, &mut sweep, || {
            asked = true;
            ReadRoom::Spare((&mut probe).limit(16))
        });
        assert!(poll.is_pending());
        assert!(probe.is_empty());
        assert!(!(sweeping && asked), "room asked for with nothing to read");
        server.write_all(&[b'x'; 20]).unwrap();
        assert_eq!(
            read_spare_some(&mut sock, &mut sweep, &mut block, 16).await,
            16
        );
        assert_eq!(
            read_spare_some(&mut sock, &mut sweep, &mut block, 16).await,
            4
        );
        assert_eq!(&block[8..], &[b'x'; 20][..]);
        assert_eq!(sweep.stalls(), 0);
    }

    #[tokio::test]
    async fn a_sweeping_socket_reads_into_spare_room() {
        spare_reads(true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plain_socket_reads_into_spare_room() {
        spare_reads(false).await;
    }

    /// On a multi-thread runtime another worker's driver may report readiness while the
    /// task reads, so reads stay non-blocking.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_multi_thread_runtime_reads_stay_plain() {
        let (mut sock, mut server) = pair();
        let Socket::Registered(registered) = &sock else {
            unreachable!()
        };
        let mut sweep = Sweep::new(registered, false);
        assert!(!sweep.is_enabled());
        server.write_all(b"plain").unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(read_some(&mut sock, &mut sweep, &mut buf).await, 5);
    }
}
