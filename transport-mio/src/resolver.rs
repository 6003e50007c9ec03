//! Name resolution off the loop thread: `getaddrinfo` blocks, so a small pool of resolver
//! threads (started on first use) does it and reports through the loop's channel and waker.
//! Hosts that are IP literals, and endpoints given their addresses (`connect_to`), skip the
//! pool. Resolved addresses come back in the order to try them (`connect_order`). Streams
//! asking for a host already being looked up wait for that lookup: a thousand streams to
//! one exchange reconnecting at once make one `getaddrinfo`, not a thousand queued behind
//! two threads (each possibly a round trip to a DNS server) while their connect timeouts
//! run.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use feedwire_core::{connect_order, Endpoint};
use mio::Waker;

use crate::handle::{Command, StreamId};

/// Resolver threads at most: enough that one slow name does not hold up every other.
const THREADS: usize = 2;

struct Job {
    host: String,
    port: u16,
}

/// Hands lookups to the pool; results come back as [`Command::Looked`] for every stream
/// that asked for the host meanwhile ([`finished`](Resolver::finished)), or at once as
/// [`Command::Resolved`].
pub(crate) struct Resolver<H> {
    loopback: Sender<Command<H>>,
    waker: Arc<Waker>,
    jobs: Option<Sender<Job>>,
    /// Lookups under way: when each was handed to the pool, and the streams waiting for it.
    waiting: HashMap<(String, u16), (Instant, Vec<StreamId>)>,
}

/// A lookup handed to the pool this long ago has been lost (glibc gives up on a name after
/// 5 s × 2 attempts × 3 servers): the next stream asking hands the host over again.
const LOOKUP_LOST: Duration = Duration::from_secs(40);

impl<H: Send + 'static> Resolver<H> {
    pub(crate) fn new(loopback: Sender<Command<H>>, waker: Arc<Waker>) -> Self {
        Self {
            loopback,
            waker,
            jobs: None,
            waiting: HashMap::new(),
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
        let now = Instant::now();
        let key = (host.to_owned(), port);
        if let Some((asked, ids)) = self.waiting.get_mut(&key) {
            ids.push(id);
            if now.saturating_duration_since(*asked) < LOOKUP_LOST {
                return;
            }
            *asked = now;
        }
        if self.jobs.is_none() {
            if let Err(err) = self.start_pool() {
                return self.report(id, Err(format!("DNS {host}: no resolver thread: {err}")));
            }
        }
        let job = Job {
            host: host.to_owned(),
            port,
        };
        if let Some(Err(_)) = self.jobs.as_ref().map(|tx| tx.send(job)) {
            let ids = self.waiting.remove(&key).map_or(vec![id], |(_, ids)| ids);
            for id in ids {
                self.report(id, Err(format!("DNS {host}: resolver threads ended")));
            }
            return;
        }
        self.waiting.entry(key).or_insert_with(|| (now, vec![id]));
    }

    /// The streams that waited for the lookup of `host:port`, which just came back.
    pub(crate) fn finished(&mut self, host: String, port: u16) -> Vec<StreamId> {
        self.waiting
            .remove(&(host, port))
            .map(|(_, ids)| ids)
            .unwrap_or_default()
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
        if loopback
            .send(Command::Looked(job.host, job.port, result))
            .is_err()
        {
            return;
        }
        let _ = waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::RecvTimeoutError;

    use super::*;
    use crate::AnyDataHandler;

    fn endpoint(url: &str) -> Endpoint {
        Endpoint::parse(url).unwrap()
    }

    #[test]
    fn streams_asking_for_a_host_under_lookup_share_it() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let (tx, rx) = mpsc::channel::<Command<AnyDataHandler>>();
        let mut resolver = Resolver::new(tx, waker);
        let ids: Vec<StreamId> = (0..100)
            .map(|index| StreamId {
                slab: 0,
                index,
                generation: 0,
            })
            .collect();
        for id in &ids {
            resolver.resolve(*id, &endpoint("ws://localhost:9443/ws"));
        }
        // One lookup answers all of them.
        let (host, port) = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Command::Looked(host, port, Ok(addrs))) => {
                assert!(!addrs.is_empty());
                (host, port)
            }
            _ => panic!("no lookup result"),
        };
        assert_eq!(resolver.finished(host, port), ids);
        assert!(matches!(
            rx.recv_timeout(Duration::from_millis(200)),
            Err(RecvTimeoutError::Timeout)
        ));
        // Literals and given addresses are answered at once, per stream.
        let id = StreamId {
            slab: 0,
            index: 7,
            generation: 1,
        };
        resolver.resolve(id, &endpoint("ws://127.0.0.1:9443/ws"));
        assert!(matches!(rx.try_recv(), Ok(Command::Resolved(i, Ok(_))) if i == id));
    }
}
