//! Name resolution off the loop thread: `getaddrinfo` blocks, so a small pool of resolver
//! threads (started on first use) does it and reports through the loop's channel and waker.
//! Hosts that are IP literals, and endpoints given their addresses (`connect_to`), skip the
//! pool. Resolved addresses come back in the order to try them (`connect_order`).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use feedwire_core::{connect_order, Endpoint};
use mio::Waker;

use crate::handle::{Command, StreamId};

/// Resolver threads at most: enough that one slow name does not hold up every other.
const THREADS: usize = 2;

struct Job {
    id: StreamId,
    host: String,
    port: u16,
}

/// Hands lookups to the pool; results come back as [`Command::Resolved`].
pub(crate) struct Resolver<H> {
    loopback: Sender<Command<H>>,
    waker: Arc<Waker>,
    jobs: Option<Sender<Job>>,
}

impl<H: Send + 'static> Resolver<H> {
    pub(crate) fn new(loopback: Sender<Command<H>>, waker: Arc<Waker>) -> Self {
        Self {
            loopback,
            waker,
            jobs: None,
        }
    }

    /// Starts finding the addresses of `endpoint` for stream `id`.
    pub(crate) fn resolve(&mut self, id: StreamId, endpoint: &Endpoint) {
        if !endpoint.connect_to.is_empty() {
            return self.report(id, Ok(endpoint.connect_to.clone()));
        }
        let (host, port) = (endpoint.host.as_str(), endpoint.port);
        // URL hosts keep IPv6 brackets; `IpAddr` parses without them.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            self.report(id, Ok(vec![SocketAddr::new(ip, port)]));
            return;
        }
        if self.jobs.is_none() {
            if let Err(err) = self.start_pool() {
                return self.report(id, Err(format!("DNS {host}: no resolver thread: {err}")));
            }
        }
        let job = Job {
            id,
            host: host.to_owned(),
            port,
        };
        if let Some(Err(_)) = self.jobs.as_ref().map(|tx| tx.send(job)) {
            self.report(id, Err(format!("DNS {host}: resolver threads ended")));
        }
    }

    fn report(&self, id: StreamId, result: Result<Vec<SocketAddr>, String>) {
        let _ = self.loopback.send(Command::Resolved(id, result));
        let _ = self.waker.wake();
    }

    fn start_pool(&mut self) -> std::io::Result<()> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..THREADS {
            let rx = rx.clone();
            let loopback = self.loopback.clone();
            let waker = self.waker.clone();
            std::thread::Builder::new()
                .name(format!("feedwire-mio-dns-{n}"))
                .spawn(move || serve(&rx, &loopback, &waker))?;
        }
        self.jobs = Some(tx);
        Ok(())
    }
}

/// One resolver thread: takes jobs until the loop (the only sender) is gone.
fn serve<H>(jobs: &Mutex<Receiver<Job>>, loopback: &Sender<Command<H>>, waker: &Waker) {
    loop {
        // The lock is held only while waiting for the next job, never during a lookup.
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let result = (job.host.as_str(), job.port)
            .to_socket_addrs()
            .map_err(|err| format!("DNS {}: {err}", job.host))
            .map(connect_order)
            .and_then(|addrs| {
                if addrs.is_empty() {
                    Err(format!("DNS {}: no address", job.host))
                } else {
                    Ok(addrs)
                }
            });
        if loopback.send(Command::Resolved(job.id, result)).is_err() {
            return;
        }
        let _ = waker.wake();
    }
}
