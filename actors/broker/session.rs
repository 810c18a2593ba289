//! One accepted client connection of the embedded cluster: frames in, frames out.
//!
//! Name-server requests go to the name-server actor, everything else to the broker actor;
//! a listener with neither answers REQUEST_CODE_NOT_SUPPORTED. A frame that does not decode
//! closes this connection only.

use super::broker_actor::{BrokerActor, Disconnected, Inbound, SessionConnected};
use super::name_server::{NameServerActor, NameServerRequest};
use crate::broker::nameserver::is_name_server_code;
use crate::broker::ConnId;
use crate::error::ProtocolError;
use crate::protocol::codes::response_code;
use crate::protocol::{RemotingCodec, RemotingCommand};
use actix::prelude::*;
use std::net::SocketAddr;
use tokio::io::WriteHalf;
use tokio::net::TcpStream;
use tokio_util::codec::FramedRead;

/// Where a session sends what it receives.
#[derive(Clone)]
pub struct SessionRoutes {
    /// The broker behind this port, if any.
    pub broker: Option<Addr<BrokerActor>>,
    /// The name server behind this port, if any.
    pub name_server: Option<Addr<NameServerActor>>,
}

/// Writes a command to the connection.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Outbound(pub RemotingCommand);

/// Closes the connection.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CloseSession;

/// The actor owning one TCP connection.
pub struct SessionActor {
    conn: ConnId,
    peer: SocketAddr,
    routes: SessionRoutes,
    writer: actix::io::FramedWrite<RemotingCommand, WriteHalf<TcpStream>, RemotingCodec>,
}

impl SessionActor {
    /// Starts a session on an accepted stream.
    pub fn start_on(
        conn: ConnId,
        stream: TcpStream,
        peer: SocketAddr,
        routes: SessionRoutes,
    ) -> Addr<Self> {
        SessionActor::create(move |ctx| {
            let (read, write) = tokio::io::split(stream);
            let writer = actix::io::FramedWrite::new(write, RemotingCodec::default(), ctx);
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
                writer,
            }
        })
    }

    fn dispatch(&mut self, command: RemotingCommand, ctx: &mut Context<Self>) {
        if !command.is_response() && is_name_server_code(command.code) {
            if let Some(ns) = self.routes.name_server.clone() {
                ns.send(NameServerRequest(command))
                    .into_actor(self)
                    .map(|reply, act, _| {
                        if let Ok(Some(response)) = reply {
                            act.writer.write(response);
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
                self.writer.write(RemotingCommand::response_to(
                    &command,
                    response_code::REQUEST_CODE_NOT_SUPPORTED,
                    Some(format!(" request type {code} not supported")),
                ));
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

impl actix::io::WriteHandler<ProtocolError> for SessionActor {}

impl StreamHandler<Result<RemotingCommand, ProtocolError>> for SessionActor {
    fn handle(&mut self, item: Result<RemotingCommand, ProtocolError>, ctx: &mut Context<Self>) {
        match item {
            Ok(command) => self.dispatch(command, ctx),
            Err(error) => {
                tracing::warn!(peer = %self.peer, %error, "malformed frame, closing connection");
                ctx.stop();
            }
        }
    }
}

impl Handler<Outbound> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: Outbound, _ctx: &mut Context<Self>) {
        self.writer.write(msg.0);
    }
}

impl Handler<CloseSession> for SessionActor {
    type Result = ();
    fn handle(&mut self, _msg: CloseSession, ctx: &mut Context<Self>) {
        self.writer.close();
        ctx.stop();
    }
}
