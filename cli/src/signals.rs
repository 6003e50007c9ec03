//! SIGINT (Ctrl-C) and SIGTERM: both ask for a graceful stop.

/// Handlers for SIGINT and SIGTERM, installed when this is created (so a Ctrl-C that comes
/// early is not the default kill), awaited with [`Interrupts::recv`].
pub(crate) struct Interrupts {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Interrupts {
    pub(crate) fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                int: signal(SignalKind::interrupt())?,
                term: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Resolves on the next SIGINT or SIGTERM.
    pub(crate) async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
