//! Accepts TCP connections on one port and starts a session actor for each.

use super::session::{SessionActor, SessionRoutes};
use actix::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::{TcpListener, TcpStream};

/// Connection ids are unique across every listener of the process, so a broker never confuses
/// two sessions.
static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// The listener actor; stopping it closes the listening socket (open sessions stay).
pub struct ListenerActor {
    routes: SessionRoutes,
}

impl ListenerActor {
    /// Starts accepting on an already bound listener.
    pub fn start_on(listener: TcpListener, routes: SessionRoutes) -> Addr<Self> {
        ListenerActor::create(move |ctx| {
            let accepts = futures::stream::unfold(listener, |listener| async move {
                let next = listener.accept().await;
                Some((next, listener))
            });
            ctx.add_stream(accepts);
            ListenerActor { routes }
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
                let _ = stream.set_nodelay(true);
                let conn = NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed);
                SessionActor::start_on(conn, stream, peer, self.routes.clone());
            }
            // Accept errors (e.g. too many open files) are transient; keep listening.
            Err(error) => tracing::warn!(%error, "embedded broker accept failed"),
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
