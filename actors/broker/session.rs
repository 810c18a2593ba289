//! One accepted client connection of the embedded cluster: frames in, frames out.
//!
//! Name-server requests go to the name-server actor, everything else to the broker actor;
//! a listener with neither answers REQUEST_CODE_NOT_SUPPORTED. A frame that does not decode
//! closes this connection only, and so does a client that stops reading while the bytes
//! waiting for it pile up past [`SessionRoutes::max_outbound_bytes`]: one client must not be
//! able to make the broker buffer without bound. Across all sessions of a cluster the bytes
//! waiting are bounded too ([`OutboundBudget`]): many slow readers, each under its own cap,
//! must not add up to gigabytes.

use super::broker_actor::{BrokerActor, Disconnected, Inbound, SessionConnected};
use super::name_server::{NameServerActor, NameServerRequest};
use crate::broker::nameserver::is_name_server_code;
use crate::broker::ConnId;
use crate::error::ProtocolError;
use crate::protocol::codes::response_code;
use crate::protocol::{RemotingCodec, RemotingCommand};
use actix::prelude::*;
use bytes::{Bytes, BytesMut};
use futures::SinkExt;
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{BytesCodec, FramedRead, FramedWrite};

/// Default of [`SessionRoutes::max_outbound_bytes`]: far above what a reading client ever has
/// queued (a few pull responses of at most 256 KiB), far below what hurts the process.
pub const DEFAULT_MAX_OUTBOUND_BYTES: usize = 64 * 1024 * 1024;

/// Default of the cluster-wide cap on bytes waiting for clients ([`OutboundBudget`]).
pub const DEFAULT_MAX_TOTAL_OUTBOUND_BYTES: usize = 256 * 1024 * 1024;

/// What a session may always have waiting for its client, even when the cluster-wide total is
/// spent: a healthy client has at most a few pull responses (256 KiB each) in flight.
pub const OUTBOUND_FAIR_SHARE_BYTES: usize = 4 * 1024 * 1024;

/// The bytes waiting for clients across every session of one embedded cluster, and their cap.
///
/// Past the cap, a session whose own backlog exceeds [`OUTBOUND_FAIR_SHARE_BYTES`] is
/// disconnected on its next write; sessions under their fair share carry on. So the total stays
/// within the cap plus one fair share per connection, whatever the number of stuck readers.
#[derive(Clone, Debug)]
pub struct OutboundBudget {
    cap: usize,
    used: Arc<AtomicUsize>,
}

impl OutboundBudget {
    /// A budget of `cap` bytes, none used.
    pub fn new(cap: usize) -> Self {
        OutboundBudget {
            cap,
            used: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Bytes waiting for clients now, across all sessions.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn allows(&self, own_backlog_after: usize, frame: usize) -> bool {
        own_backlog_after <= OUTBOUND_FAIR_SHARE_BYTES || self.used() + frame <= self.cap
    }

    fn take(&self, bytes: usize) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
    }

    fn give_back(&self, bytes: usize) {
        // Never below zero, whatever the order of a session's last writes and its teardown.
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}

/// Where a session sends what it receives, and how much it may buffer for its client.
#[derive(Clone)]
pub struct SessionRoutes {
    /// The broker behind this port, if any.
    pub broker: Option<Addr<BrokerActor>>,
    /// The name server behind this port, if any.
    pub name_server: Option<Addr<NameServerActor>>,
    /// Encoded frames not yet handed to the socket above which the client is considered
    /// stuck and disconnected.
    pub max_outbound_bytes: usize,
    /// The cluster-wide budget this session's backlog counts against.
    pub budget: OutboundBudget,
}

/// Writes a command to the connection.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Outbound(pub RemotingCommand);

/// Closes the connection (after writing what is already queued).
#[derive(Message)]
#[rtype(result = "()")]
pub struct CloseSession;

/// The actor owning one TCP connection.
pub struct SessionActor {
    conn: ConnId,
    peer: SocketAddr,
    routes: SessionRoutes,
    /// Frames for the writer task; dropping it lets the writer flush and close the socket.
    outbound: mpsc::UnboundedSender<Bytes>,
    /// Bytes sent to the writer task and not yet flushed to the socket.
    backlog: Rc<Cell<usize>>,
    /// Fired to make the writer drop the socket at once instead of draining its queue.
    abort_writer: Option<oneshot::Sender<()>>,
}

/// Writes frames in arrival order, flushing once per burst rather than once per frame, so a
/// pipelining producer gets its responses in few syscalls.
async fn write_frames<W: AsyncWrite + Unpin>(
    write_half: W,
    mut frames: mpsc::UnboundedReceiver<Bytes>,
    backlog: Rc<Cell<usize>>,
    budget: OutboundBudget,
) -> std::io::Result<()> {
    let mut sink = FramedWrite::new(write_half, BytesCodec::new());
    while let Some(frame) = frames.recv().await {
        let mut burst = frame.len();
        sink.feed(frame).await?;
        while let Ok(frame) = frames.try_recv() {
            burst += frame.len();
            sink.feed(frame).await?;
        }
        SinkExt::<Bytes>::flush(&mut sink).await?;
        backlog.set(backlog.get().saturating_sub(burst));
        budget.give_back(burst);
    }
    Ok(())
}

impl SessionActor {
    /// Starts a session on the two halves of an accepted stream (TCP, or TLS over TCP).
    pub fn start_on<R, W>(
        conn: ConnId,
        (read, write): (R, W),
        peer: SocketAddr,
        routes: SessionRoutes,
    ) -> Addr<Self>
    where
        R: AsyncRead + Unpin + 'static,
        W: AsyncWrite + Unpin + 'static,
    {
        SessionActor::create(move |ctx| {
            let (outbound, frames) = mpsc::unbounded_channel();
            let (abort_writer, aborted) = oneshot::channel::<()>();
            let backlog = Rc::new(Cell::new(0));
            let session = ctx.address();
            let writer_backlog = backlog.clone();
            let budget = routes.budget.clone();
            actix::spawn(async move {
                // Dropping the abort sender without firing it means "drain, then close".
                let aborted = async {
                    if aborted.await.is_err() {
                        std::future::pending::<()>().await;
                    }
                };
                let left_behind = writer_backlog.clone();
                tokio::select! {
                    written = write_frames(write, frames, writer_backlog, budget.clone()) => {
                        if let Err(error) = written {
                            tracing::debug!(%peer, %error, "embedded broker write failed");
                            session.do_send(CloseSession);
                        }
                    }
                    () = aborted => {}
                }
                // Whatever was never written no longer waits for anyone.
                budget.give_back(left_behind.replace(0));
            });
            if let Some(broker) = &routes.broker {
                // Sent before any frame so the broker knows the peer (born host) first.
                broker.do_send(SessionConnected {
                    conn,
                    peer,
                    session: ctx.address(),
                });
            }
            ctx.add_stream(FramedRead::new(read, RemotingCodec::default()));
            SessionActor {
                conn,
                peer,
                routes,
                outbound,
                backlog,
                abort_writer: Some(abort_writer),
            }
        })
    }

    /// Ends the session without flushing what is queued (a stuck or misbehaving client).
    fn abort(&mut self, ctx: &mut Context<Self>) {
        if let Some(abort) = self.abort_writer.take() {
            let _ = abort.send(());
        }
        ctx.stop();
    }

    fn write(&mut self, command: RemotingCommand, ctx: &mut Context<Self>) {
        let mut frame = BytesMut::new();
        if let Err(error) = command.encode(&mut frame) {
            tracing::warn!(peer = %self.peer, %error, code = command.code, "cannot encode a frame");
            return;
        }
        let backlog = self.backlog.get().saturating_add(frame.len());
        if backlog > self.routes.max_outbound_bytes {
            tracing::warn!(
                peer = %self.peer,
                backlog,
                "client is not reading its responses; closing the connection"
            );
            self.abort(ctx);
            return;
        }
        if !self.routes.budget.allows(backlog, frame.len()) {
            tracing::warn!(
                peer = %self.peer,
                backlog,
                total = self.routes.budget.used(),
                "clients are not reading their responses and the broker's output budget is spent; closing this one"
            );
            self.abort(ctx);
            return;
        }
        self.backlog.set(backlog);
        self.routes.budget.take(frame.len());
        if self.outbound.send(frame.freeze()).is_err() {
            // The writer is gone (socket failed); the read side ends the session.
            ctx.stop();
        }
    }

    fn dispatch(&mut self, command: RemotingCommand, ctx: &mut Context<Self>) {
        if !command.is_response() && is_name_server_code(command.code) {
            if let Some(ns) = self.routes.name_server.clone() {
                ns.send(NameServerRequest(command))
                    .into_actor(self)
                    .map(|reply, act, ctx| {
                        if let Ok(Some(response)) = reply {
                            act.write(response, ctx);
                        }
                    })
                    .wait(ctx);
                return;
            }
        }
        match &self.routes.broker {
            Some(broker) => broker.do_send(Inbound {
                conn: self.conn,
                command,
            }),
            None if !command.is_response() && !command.is_oneway() => {
                let code = command.code;
                let response = RemotingCommand::response_to(
                    &command,
                    response_code::REQUEST_CODE_NOT_SUPPORTED,
                    Some(format!(" request type {code} not supported")),
                );
                self.write(response, ctx);
            }
            None => {}
        }
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        if let Some(broker) = &self.routes.broker {
            broker.do_send(Disconnected { conn: self.conn });
        }
        tracing::debug!(peer = %self.peer, conn = self.conn, "embedded broker session closed");
    }
}

impl StreamHandler<Result<RemotingCommand, ProtocolError>> for SessionActor {
    fn handle(&mut self, item: Result<RemotingCommand, ProtocolError>, ctx: &mut Context<Self>) {
        match item {
            Ok(command) => self.dispatch(command, ctx),
            Err(error) => {
                tracing::warn!(peer = %self.peer, %error, "malformed frame, closing connection");
                self.abort(ctx);
            }
        }
    }
}

impl Handler<Outbound> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: Outbound, ctx: &mut Context<Self>) {
        self.write(msg.0, ctx);
    }
}

impl Handler<CloseSession> for SessionActor {
    type Result = ();
    fn handle(&mut self, _msg: CloseSession, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
