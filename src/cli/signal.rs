//! SIGINT and SIGTERM as a request to stop.

/// SIGINT (Ctrl-C) and SIGTERM — what systemd, Docker and Kubernetes send to stop a service —
/// watched from the moment this is made: a signal that comes while a consumer is still
/// starting is kept, and the command ends cleanly right after the start (offsets committed, the
/// group left) instead of the process dying half-started. Neither signal is a crash.
pub struct ShutdownSignal {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignal {
    /// Starts watching both signals.
    pub fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let watch = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(watched) => Some(watched),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch {name}; it will not end the command cleanly");
                    None
                }
            };
            ShutdownSignal {
                interrupt: watch(SignalKind::interrupt(), "SIGINT"),
                terminate: watch(SignalKind::terminate(), "SIGTERM"),
            }
        }
        #[cfg(not(unix))]
        ShutdownSignal {}
    }

    /// Resolves at the first signal (at once if one came already).
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        {
            async fn next(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = next(&mut self.interrupt) => {}
                _ = next(&mut self.terminate) => {}
            }
        }
        #[cfg(not(unix))]
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot watch Ctrl-C");
            std::future::pending::<()>().await;
        }
    }
}
