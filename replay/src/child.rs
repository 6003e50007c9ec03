//! The replay server in a child process, so that a measurement of the client (CPU time, RSS)
//! does not include the server. The measuring program re-runs its own executable with
//! [`CHILD_ARG`]; its `main` calls [`serve_if_child`] first, which serves until the parent
//! closes the child's stdin (or exits).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use crate::{Mode, ReplayConfig, ReplayServer, Scenario};

/// The first argument that makes [`serve_if_child`] serve instead of returning.
pub const CHILD_ARG: &str = "--feedwire-replay-child";

/// A replay server running in a child process; dropping it ends the child.
#[derive(Debug)]
pub struct ChildServer {
    child: Child,
    stdin: Option<ChildStdin>,
    url: String,
    subscribe_url: String,
    messages_per_connection: usize,
    ca_pem: Option<String>,
}

impl ChildServer {
    /// Starts `config` in a child process (this executable, run with [`CHILD_ARG`]) and waits
    /// until it listens. Faults are not passed on (measurements use clean servers).
    pub fn spawn(config: &ReplayConfig) -> io::Result<Self> {
        Self::spawn_on_cpu(config, None)
    }

    /// [`spawn`](Self::spawn), the server's threads kept to CPU `cpu` when given.
    pub fn spawn_on_cpu(config: &ReplayConfig, cpu: Option<usize>) -> io::Result<Self> {
        let mode = match config.mode {
            Mode::Firehose => "firehose".to_owned(),
            Mode::Paced { per_sec } => format!("paced:{per_sec}"),
            Mode::Live { per_sec } => format!("live:{per_sec}"),
        };
        let mut child = Command::new(std::env::current_exe()?)
            .arg(CHILD_ARG)
            .arg(config.scenario.name())
            .arg(config.count.map_or("default".to_owned(), |c| c.to_string()))
            .arg(mode)
            .arg(u8::from(config.tls).to_string())
            .arg(config.seed.to_string())
            .arg(config.port.to_string())
            .arg(u8::from(config.hold_open).to_string())
            .arg(cpu.map_or("any".to_owned(), |c| c.to_string()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let mut lines = BufReader::new(stdout);
        let mut field = |name: &str| -> io::Result<String> {
            let mut line = String::new();
            lines.read_line(&mut line)?;
            line.trim_end()
                .strip_prefix(name)
                .and_then(|v| v.strip_prefix('='))
                .map(str::to_owned)
                .ok_or_else(|| {
                    io::Error::other(format!("replay child: expected {name}=, got {line:?}"))
                })
        };
        let url = field("url")?;
        let subscribe_url = field("subscribe_url")?;
        let messages_per_connection = field("count")?
            .parse()
            .map_err(|_| io::Error::other("replay child: bad count"))?;
        let pem_len: usize = field("ca_pem_bytes")?
            .parse()
            .map_err(|_| io::Error::other("replay child: bad ca_pem_bytes"))?;
        let mut pem = vec![0; pem_len];
        lines.read_exact(&mut pem)?;
        let ca_pem = (pem_len > 0)
            .then(|| String::from_utf8(pem).map_err(|_| io::Error::other("replay child: PEM")))
            .transpose()?;
        Ok(Self {
            child,
            stdin,
            url,
            subscribe_url,
            messages_per_connection,
            ca_pem,
        })
    }

    /// See [`ReplayServer::url`].
    pub fn url(&self) -> &str {
        &self.url
    }

    /// See [`ReplayServer::subscribe_url`].
    pub fn subscribe_url(&self) -> &str {
        &self.subscribe_url
    }

    /// Messages each connection receives.
    pub fn messages_per_connection(&self) -> usize {
        self.messages_per_connection
    }

    /// CPU time the server has used so far (see [`crate::measure::process_cpu_time`]):
    /// read before and after a client's run, what serving it cost.
    pub fn cpu_time(&self) -> Option<std::time::Duration> {
        crate::measure::process_cpu_time(self.child.id())
    }

    /// The test CA, PEM, when serving TLS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }
}

/// A root store holding the certificates of `pem` (a [`ChildServer::ca_pem`] passed on to
/// another process); what does not parse is left out.
pub fn root_store_of(pem: &str) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()).flatten() {
        let _ = roots.add(cert);
    }
    roots
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        drop(self.stdin.take()); // the child's cue to exit
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Call first in `main` of a program that uses [`ChildServer`]: when this process is such a
/// child, it serves until its stdin closes and then exits; otherwise it returns at once.
pub fn serve_if_child() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(CHILD_ARG) {
        return;
    }
    match serve(&args[2..]) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("replay child: {e}");
            std::process::exit(2)
        }
    }
}

fn serve(args: &[String]) -> io::Result<()> {
    let [scenario, count, mode, tls, seed, port, hold_open, cpu] = args else {
        return Err(io::Error::other("expected 8 arguments"));
    };
    let bad = |what: &str| io::Error::other(format!("bad {what}"));
    // Before the server starts its threads: they inherit the CPU.
    if cpu != "any" {
        crate::measure::pin_to_cpu(cpu.parse().map_err(|_| bad("cpu"))?)?;
    }
    let scenario = Scenario::from_name(scenario).ok_or_else(|| bad("scenario"))?;
    let rate = |r: &str| r.parse().map_err(|_| bad("rate"));
    let mode = if let Some(r) = mode.strip_prefix("paced:") {
        Mode::Paced { per_sec: rate(r)? }
    } else if let Some(r) = mode.strip_prefix("live:") {
        Mode::Live { per_sec: rate(r)? }
    } else {
        Mode::Firehose
    };
    let config = ReplayConfig {
        count: if count == "default" {
            None
        } else {
            Some(count.parse().map_err(|_| bad("count"))?)
        },
        mode,
        tls: tls == "1",
        seed: seed.parse().map_err(|_| bad("seed"))?,
        port: port.parse().map_err(|_| bad("port"))?,
        hold_open: hold_open == "1",
        ..ReplayConfig::new(scenario)
    };
    let server = ReplayServer::start(config)?;
    let pem = server.pki().map_or(String::new(), |p| p.ca_pem.clone());
    let mut out = io::stdout().lock();
    write!(
        out,
        "url={}\nsubscribe_url={}\ncount={}\nca_pem_bytes={}\n{pem}",
        server.url(),
        server.subscribe_url(),
        server.messages_per_connection(),
        pem.len()
    )?;
    out.flush()?;
    drop(out);
    // Serve until the parent closes our stdin (or dies).
    let mut sink = [0u8; 64];
    while io::stdin().read(&mut sink)? > 0 {}
    drop(server);
    Ok(())
}
