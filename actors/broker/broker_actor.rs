//! The broker actor: owns one [`BrokerCore`], feeds it frames, ticks and admin calls, and
//! executes the [`Action`]s it returns.

use super::listener::{ListenerActor, StopListener};
use super::name_server::{NameServerActor, RegisterBroker, UnregisterBroker};
use super::persistence::DataDir;
use super::session::{CloseSession, Outbound, SessionActor};
use crate::actors::now_ms;
use crate::broker::{Action, BrokerCore, ConnId};
use crate::protocol::RemotingCommand;
use actix::prelude::*;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::oneshot;

/// The broker actor.
pub struct BrokerActor {
    core: BrokerCore,
    sessions: HashMap<ConnId, Addr<SessionActor>>,
    name_server: Option<Addr<NameServerActor>>,
    listener: Option<Addr<ListenerActor>>,
    calls: HashMap<u64, oneshot::Sender<Result<RemotingCommand, String>>>,
    next_token: u64,
    tick_interval: Duration,
    data_dir: Option<DataDir>,
}

impl BrokerActor {
    /// A broker actor around `core`, registering with `name_server`, ticking every
    /// `tick_interval`, persisting to `data_dir` when given.
    pub fn new(
        core: BrokerCore,
        name_server: Option<Addr<NameServerActor>>,
        tick_interval: Duration,
        data_dir: Option<DataDir>,
    ) -> Self {
        BrokerActor {
            core,
            sessions: HashMap::new(),
            name_server,
            listener: None,
            calls: HashMap::new(),
            next_token: 1,
            tick_interval,
            data_dir,
        }
    }

    fn register(&self) {
        if let Some(ns) = &self.name_server {
            ns.do_send(RegisterBroker(self.core.registration()));
        }
    }

    fn run(&mut self, actions: Vec<Action>) {
        let mut topics_changed = false;
        for action in actions {
            match action {
                Action::Send { conn, command } => {
                    if let Some(session) = self.sessions.get(&conn) {
                        session.do_send(Outbound(command));
                    }
                }
                Action::Close { conn } => {
                    if let Some(session) = self.sessions.remove(&conn) {
                        session.do_send(CloseSession);
                    }
                }
                Action::CallDone { token, result } => {
                    if let Some(tx) = self.calls.remove(&token) {
                        let _ = tx.send(result);
                    }
                }
                Action::TopicsChanged => topics_changed = true,
            }
        }
        if topics_changed {
            self.register();
        }
        if let Some(dir) = &mut self.data_dir {
            if self.core.take_data_changed() {
                if let Err(error) = dir.save(&self.core) {
                    tracing::warn!(%error, "embedded broker cannot persist its data");
                }
            }
        }
    }

    fn close_all_sessions(&mut self) {
        for (conn, session) in self.sessions.drain() {
            session.do_send(CloseSession);
            let actions = self.core.on_disconnect(conn);
            // Nobody is left to notify on a full close, but calls waiting on it must fail.
            for action in actions {
                if let Action::CallDone { token, result } = action {
                    if let Some(tx) = self.calls.remove(&token) {
                        let _ = tx.send(result);
                    }
                }
            }
        }
    }
}

impl Actor for BrokerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.register();
        ctx.run_interval(self.tick_interval, |act, _ctx| {
            let actions = act.core.on_tick(now_ms());
            act.run(actions);
        });
    }
}

/// A session started for connection `conn` from `peer`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SessionConnected {
    /// Connection id.
    pub conn: ConnId,
    /// Remote address.
    pub peer: SocketAddr,
    /// The session actor.
    pub session: Addr<SessionActor>,
}

/// A frame arrived on `conn`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Inbound {
    /// Connection id.
    pub conn: ConnId,
    /// The decoded command.
    pub command: RemotingCommand,
}

/// The connection closed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Disconnected {
    /// Connection id.
    pub conn: ConnId,
}

impl Handler<SessionConnected> for BrokerActor {
    type Result = ();
    fn handle(&mut self, msg: SessionConnected, _ctx: &mut Context<Self>) {
        self.core.on_connect(msg.conn, msg.peer);
        self.sessions.insert(msg.conn, msg.session);
    }
}

impl Handler<Inbound> for BrokerActor {
    type Result = ();
    fn handle(&mut self, msg: Inbound, _ctx: &mut Context<Self>) {
        if !self.sessions.contains_key(&msg.conn) {
            return;
        }
        let (conn, opaque, answer) = (
            msg.conn,
            msg.command.opaque,
            !msg.command.is_oneway() && !msg.command.is_response(),
        );
        let core = &mut self.core;
        // The core never panics on input by design; should a bug slip through, one client's
        // request must cost that request, not the broker every client shares.
        let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            core.handle(conn, msg.command, now_ms())
        }));
        match handled {
            Ok(actions) => self.run(actions),
            Err(_) => {
                tracing::error!(conn, "embedded broker failed on a request");
                if answer {
                    let response = RemotingCommand::response(
                        crate::protocol::codes::response_code::SYSTEM_ERROR,
                        Some("embedded broker internal error".into()),
                    )
                    .with_opaque(opaque);
                    self.run(vec![Action::Send {
                        conn,
                        command: response,
                    }]);
                }
            }
        }
    }
}

impl Handler<Disconnected> for BrokerActor {
    type Result = ();
    fn handle(&mut self, msg: Disconnected, _ctx: &mut Context<Self>) {
        if self.sessions.remove(&msg.conn).is_some() {
            let actions = self.core.on_disconnect(msg.conn);
            self.run(actions);
        }
    }
}

/// Runs a closure on the core (admin calls, fault injection, inspection) and executes the
/// actions it returns.
pub struct WithCore<R: Send + 'static>(pub CoreJob<R>);

/// A closure run on the core with the current time; returns a value and actions to execute.
pub type CoreJob<R> = Box<dyn FnOnce(&mut BrokerCore, i64) -> (R, Vec<Action>) + Send>;

impl<R: Send + 'static> Message for WithCore<R> {
    type Result = R;
}

impl<R: Send + 'static> Handler<WithCore<R>> for BrokerActor {
    type Result = MessageResult<WithCore<R>>;
    fn handle(&mut self, msg: WithCore<R>, _ctx: &mut Context<Self>) -> Self::Result {
        let (result, actions) = (msg.0)(&mut self.core, now_ms());
        self.run(actions);
        MessageResult(result)
    }
}

/// Starts a call into a client: the closure gets a fresh token and returns the actions that
/// send the request; the receiver yields the client's answer.
pub struct CallClient(pub ClientCallStart);

/// Starts a client call on the core: gets the call token and the time, returns the actions
/// that send the request (or why it cannot be sent).
pub type ClientCallStart =
    Box<dyn FnOnce(&mut BrokerCore, u64, i64) -> Result<Vec<Action>, String> + Send>;

impl Message for CallClient {
    type Result = Result<oneshot::Receiver<Result<RemotingCommand, String>>, String>;
}

impl Handler<CallClient> for BrokerActor {
    type Result = Result<oneshot::Receiver<Result<RemotingCommand, String>>, String>;
    fn handle(&mut self, msg: CallClient, _ctx: &mut Context<Self>) -> Self::Result {
        let token = self.next_token;
        self.next_token += 1;
        let actions = (msg.0)(&mut self.core, token, now_ms())?;
        let (tx, rx) = oneshot::channel();
        self.calls.insert(token, tx);
        self.run(actions);
        Ok(rx)
    }
}

/// Attaches the listener serving this broker (after a bind or a restart).
#[derive(Message)]
#[rtype(result = "()")]
pub struct AttachListener(pub Addr<ListenerActor>);

impl Handler<AttachListener> for BrokerActor {
    type Result = ();
    fn handle(&mut self, msg: AttachListener, _ctx: &mut Context<Self>) {
        self.listener = Some(msg.0);
        self.register();
    }
}

/// Closes every client connection (fault injection); the port stays open.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DropConnections;

impl Handler<DropConnections> for BrokerActor {
    type Result = ();
    fn handle(&mut self, _msg: DropConnections, _ctx: &mut Context<Self>) {
        self.close_all_sessions();
    }
}

/// Stops serving like a broker process going down: closes the port and every connection,
/// forgets volatile state (registrations, locks, long polls) and, when `unregister` is set,
/// leaves the name server. Stored data stays for a restart.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopServing {
    /// Leave the name server (graceful shutdown) instead of vanishing (crash).
    pub unregister: bool,
}

impl Handler<StopServing> for BrokerActor {
    type Result = ();
    fn handle(&mut self, msg: StopServing, _ctx: &mut Context<Self>) {
        if let Some(listener) = self.listener.take() {
            listener.do_send(StopListener);
        }
        self.close_all_sessions();
        self.core.on_restart();
        for (_, tx) in self.calls.drain() {
            let _ = tx.send(Err("broker stopped".into()));
        }
        if msg.unregister {
            if let Some(ns) = &self.name_server {
                ns.do_send(UnregisterBroker(self.core.config().broker_name.clone()));
            }
        }
    }
}

/// Stops the actor for good.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopBroker;

impl Handler<StopBroker> for BrokerActor {
    type Result = ();
    fn handle(&mut self, _msg: StopBroker, ctx: &mut Context<Self>) {
        if let Some(listener) = self.listener.take() {
            listener.do_send(StopListener);
        }
        self.close_all_sessions();
        if let Some(dir) = &mut self.data_dir {
            let _ = dir.save(&self.core);
        }
        ctx.stop();
    }
}
