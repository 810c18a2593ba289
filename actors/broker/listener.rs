//! Accepts TCP connections on one port and starts a session actor for each.

use super::session::{SessionActor, SessionRoutes};
use crate::remoting::Backoff;
use actix::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

/// After an accept fails (too many open files, out of buffers) the next one waits from 10 ms up
/// to 1 s: the error persists until connections close, and accepting again at once spins a core.
const ACCEPT_RETRY_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_RETRY_MAX: Duration = Duration::from_secs(1);
/// While accepts keep failing, one warning per this interval, with the count.
const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(10);

/// Connection ids are unique across every listener of the process, so a broker never confuses
/// two sessions.
static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// The listener actor; stopping it closes the listening socket (open sessions stay).
pub struct ListenerActor {
    routes: SessionRoutes,
    /// Accept failures since the last warning, and when that was.
    failures: u64,
    last_warning: Option<Instant>,
}

impl ListenerActor {
    /// Starts accepting on an already bound listener.
    pub fn start_on(listener: TcpListener, routes: SessionRoutes) -> Addr<Self> {
        ListenerActor::create(move |ctx| {
            let backoff = Backoff::new(ACCEPT_RETRY_FIRST, ACCEPT_RETRY_MAX);
            let accepts = futures::stream::unfold(
                (listener, backoff),
                |(listener, mut backoff)| async move {
                    let next = listener.accept().await;
                    match &next {
                        Ok(_) => backoff.on_connected(),
                        Err(_) => tokio::time::sleep(backoff.on_failure()).await,
                    }
                    Some((next, (listener, backoff)))
                },
            );
            ctx.add_stream(accepts);
            ListenerActor {
                routes,
                failures: 0,
                last_warning: None,
            }
        })
    }
}

impl Actor for ListenerActor {
    type Context = Context<Self>;
}

impl StreamHandler<std::io::Result<(TcpStream, std::net::SocketAddr)>> for ListenerActor {
    fn handle(
        &mut self,
        item: std::io::Result<(TcpStream, std::net::SocketAddr)>,
        _ctx: &mut Context<Self>,
    ) {
        match item {
            Ok((stream, peer)) => {
                if self.failures > 0 {
                    tracing::info!(failed = self.failures, "embedded broker accepts again");
                    self.failures = 0;
                    self.last_warning = None;
                }
                let _ = stream.set_nodelay(true);
                let conn = NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed);
                SessionActor::start_on(conn, stream, peer, self.routes.clone());
            }
            // Accept errors (e.g. too many open files) are transient: keep listening, after a
            // growing pause (the stream waits), and say so once per interval.
            Err(error) => {
                self.failures += 1;
                let due = self
                    .last_warning
                    .is_none_or(|at| at.elapsed() >= ACCEPT_WARN_EVERY);
                if due {
                    tracing::warn!(%error, failed = self.failures, "embedded broker cannot accept connections; retrying with backoff");
                    self.last_warning = Some(Instant::now());
                }
            }
        }
    }

    fn finished(&mut self, _ctx: &mut Context<Self>) {}
}

/// Stops the listener (closing the port).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopListener;

impl Handler<StopListener> for ListenerActor {
    type Result = ();
    fn handle(&mut self, _msg: StopListener, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
