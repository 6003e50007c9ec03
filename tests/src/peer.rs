//! Independent peer programs the interop tests run (the Autobahn fuzzingserver, OpenSSL's
//! `s_server`): started in a directory of the test's own, their output kept in a log file
//! there, ended on drop.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

/// A peer program running in a child process; killed (and reaped) on drop.
#[derive(Debug)]
pub struct PeerProcess {
    child: Child,
    log: PathBuf,
}

impl PeerProcess {
    /// Runs `command` in `dir`, its standard output and error into `dir/log_name`; its
    /// standard input is a pipe ([`take_input`](Self::take_input)).
    ///
    /// # Panics
    /// If the log file cannot be made or the program cannot start.
    pub fn spawn(mut command: Command, dir: &Path, log_name: &str) -> Self {
        let log = dir.join(log_name);
        let out =
            File::create(&log).unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let err = out.try_clone().expect("a second handle on the log file");
        let child = command
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        Self { child, log }
    }

    /// The program's standard input (once); dropping it closes the pipe.
    pub fn take_input(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// What the program has written so far (both streams, as they reached the file).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the program to exit by itself.
    pub fn wait(&mut self) {
        let _ = self.child.wait();
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free a moment ago, for a peer program to listen on (it binds it itself).
///
/// # Panics
/// If no port can be bound.
pub fn free_loopback_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}
