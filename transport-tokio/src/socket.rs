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

use feedwire_sockopt::RecvLowWater;
use tokio::net::TcpStream;

/// A connection's TCP socket (non-blocking in every state).
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
    pub(crate) fn registered(&mut self) -> io::Result<&mut TcpStream> {
        if !matches!(self, Self::Registered(_)) {
            self.register_again()?;
        }
        match self {
            Self::Registered(sock) => Ok(sock),
            _ => Err(lost()),
        }
    }

    #[cold]
    #[inline(never)]
    fn register_again(&mut self) -> io::Result<()> {
        match std::mem::replace(self, Self::Lost) {
            Self::Parked(sock) => *self = Self::Registered(TcpStream::from_std(sock)?),
            other => *self = other,
        }
        Ok(())
    }

    /// Whether the socket is out of the reactor.
    #[cfg(test)]
    pub(crate) fn is_parked(&self) -> bool {
        matches!(self, Self::Parked(_))
    }

    /// Writes what the socket takes now, without waiting.
    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Registered(sock) => sock.try_write(buf),
            Self::Parked(sock) => (&*sock).write(buf),
            Self::Lost => Err(lost()),
        }
    }

    /// Writes what the socket takes now of `slices`, in order, without waiting.
    #[inline]
    pub(crate) fn try_write_vectored(&self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Self::Registered(sock) => sock.try_write_vectored(slices),
            Self::Parked(sock) => (&*sock).write_vectored(slices),
            Self::Lost => Err(lost()),
        }
    }

    /// Keeps the socket's receive low-water mark at `wanted` bytes (see `RecvLowWater`).
    #[inline]
    pub(crate) fn set_low_water(&self, mark: &mut RecvLowWater, wanted: usize) -> io::Result<()> {
        match self {
            Self::Registered(sock) => mark.set(sock, wanted),
            Self::Parked(sock) => mark.set(sock, wanted),
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
        sock.park().unwrap();
        assert!(sock.is_parked());
        sock.park().unwrap();
        assert_eq!(sock.try_write(b"ab").unwrap(), 2);
        let slices = [IoSlice::new(b"cd"), IoSlice::new(b"e")];
        assert_eq!(sock.try_write_vectored(&slices).unwrap(), 3);
        let mut got = [0u8; 5];
        server.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abcde");
        server.write_all(b"while parked").unwrap();
        let mut buf = [0u8; 12];
        let registered = sock.registered().unwrap();
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
        assert_eq!(
            sock.try_write(b"x").unwrap_err().kind(),
            io::ErrorKind::NotConnected
        );
        assert!(sock.try_write_vectored(&[IoSlice::new(b"x")]).is_err());
        assert!(sock.registered().is_err());
        let mut mark = RecvLowWater::default();
        sock.set_low_water(&mut mark, 4096).unwrap();
    }
}
