//! Accepts TCP connections on one port and starts a session actor for each.
//!
//! With TLS ([`ListenerTls`]) a connection first waits for its first byte: a ClientHello
//! (`0x16`) gets the TLS handshake, anything else is served in plaintext (permissive mode) or
//! closed (enforcing mode), as a Java or rocketmq-rust broker does on its one port.

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

/// How long an accepted connection may take to send its first byte when the listener serves
/// TLS (until then it is neither TLS nor plaintext); a broker drops idle clients after 120 s.
#[cfg(feature = "tls")]
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a TLS handshake may take once the ClientHello arrived.
#[cfg(feature = "tls")]
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a listener serves TLS: the mode and the server's rustls setup.
#[cfg(feature = "tls")]
#[derive(Clone)]
pub struct ListenerTls {
    /// Whether plaintext clients are served too.
    pub mode: crate::tls::TlsMode,
    /// The handshake's setup (certificate, client authentication).
    pub acceptor: tokio_rustls::TlsAcceptor,
}

/// Without the `tls` feature a listener never serves TLS.
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
pub enum ListenerTls {}

/// The listener actor; stopping it closes the listening socket (open sessions stay, and so do
/// none of the handshakes under way).
pub struct ListenerActor {
    routes: SessionRoutes,
    /// TLS on this port, if any.
    tls: Option<ListenerTls>,
    /// Accept failures since the last warning, and when that was.
    failures: u64,
    last_warning: Option<Instant>,
}

impl ListenerActor {
    /// Starts accepting on an already bound listener, serving TLS as `tls` says.
    pub fn start_on(
        listener: TcpListener,
        routes: SessionRoutes,
        tls: Option<ListenerTls>,
    ) -> Addr<Self> {
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
                tls,
                failures: 0,
                last_warning: None,
            }
        })
    }
}

/// A connection on a TLS port once its first byte told what it is.
#[cfg(feature = "tls")]
enum Accepted {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

#[cfg(feature = "tls")]
impl ListenerActor {
    /// Waits for the connection's first byte, runs the handshake if it is a ClientHello, and
    /// starts the session — or closes the connection. Runs beside the accept loop, so a slow
    /// client holds up nobody else.
    fn accept_tls(
        &mut self,
        tls: ListenerTls,
        conn: crate::broker::ConnId,
        stream: TcpStream,
        peer: std::net::SocketAddr,
        ctx: &mut Context<Self>,
    ) {
        use crate::tls::{classify_first_byte, FirstByte};
        let accept = async move {
            let mut first = [0u8; 1];
            let peeked = tokio::time::timeout(FIRST_BYTE_TIMEOUT, stream.peek(&mut first)).await;
            let first = match peeked {
                Ok(Ok(0)) => None,
                Ok(Ok(_)) => Some(first[0]),
                Ok(Err(e)) => return Err(format!("read failed: {e}")),
                Err(_) => return Err(format!("sent nothing within {FIRST_BYTE_TIMEOUT:?}")),
            };
            match classify_first_byte(tls.mode, first) {
                FirstByte::Plain => Ok(Accepted::Plain(stream)),
                FirstByte::Refuse if first.is_none() => {
                    Err("closed before sending anything".into())
                }
                FirstByte::Refuse => {
                    Err("plaintext connection closed: this port is in TLS enforcing mode".into())
                }
                FirstByte::Tls => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor.accept(stream)).await
                    {
                        Ok(Ok(stream)) => Ok(Accepted::Tls(Box::new(stream))),
                        Ok(Err(e)) => Err(format!("TLS handshake failed: {e}")),
                        Err(_) => Err(format!("no TLS handshake within {HANDSHAKE_TIMEOUT:?}")),
                    }
                }
            }
        };
        ctx.spawn(
            accept
                .into_actor(self)
                .map(move |accepted, act, _ctx| match accepted {
                    Ok(Accepted::Plain(stream)) => {
                        SessionActor::start_on(conn, stream.into_split(), peer, act.routes.clone());
                    }
                    Ok(Accepted::Tls(stream)) => {
                        SessionActor::start_on(
                            conn,
                            tokio::io::split(*stream),
                            peer,
                            act.routes.clone(),
                        );
                    }
                    Err(why) => tracing::info!(%peer, %why, "embedded broker refused a connection"),
                }),
        );
    }
}

impl Actor for ListenerActor {
    type Context = Context<Self>;
}

impl StreamHandler<std::io::Result<(TcpStream, std::net::SocketAddr)>> for ListenerActor {
    // Without TLS no handshake is spawned in the context.
    #[cfg_attr(not(feature = "tls"), allow(unused_variables))]
    fn handle(
        &mut self,
        item: std::io::Result<(TcpStream, std::net::SocketAddr)>,
        ctx: &mut Context<Self>,
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
                match self.tls.clone() {
                    None => {
                        SessionActor::start_on(
                            conn,
                            stream.into_split(),
                            peer,
                            self.routes.clone(),
                        );
                    }
                    #[cfg(feature = "tls")]
                    Some(tls) => self.accept_tls(tls, conn, stream, peer, ctx),
                    #[cfg(not(feature = "tls"))]
                    Some(never) => match never {},
                }
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
