//! The connection actor: one TCP connection to one remote address (a name server or a broker).
//!
//! It multiplexes any number of concurrent requests over the socket by `opaque`, applies a timeout
//! to each, sends one-way commands, dispatches requests the server initiates to registered
//! handlers, and reconnects with exponential backoff. A dropped connection fails every pending
//! request at once; a malformed frame closes only this connection.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix::io::{FramedWrite, WriteHandler};
use actix::prelude::*;
use actix::WeakRecipient;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_util::codec::{BytesCodec, FramedRead};

use crate::actors::spawn_ticker;
use crate::error::{Error, ProtocolError, RequestCode, Result};
use crate::metrics::ConnectionMetrics;
use crate::protocol::codes::response_code;
use crate::protocol::command::RequestFrame;
use crate::protocol::{RemotingCodec, RemotingCommand};
use crate::remoting::{Backoff, Expiry, RequestTable};

/// Initial capacity of a connection's read buffer.
const READ_BUFFER_CAPACITY: usize = 512 * 1024;

/// How often a connection fails the requests whose [`Expiry`] passed: the latest such a
/// request is failed (queue actors' pulls, whose timeouts are tens of seconds).
const EXPIRY_SWEEP_EVERY: Duration = Duration::from_millis(250);

/// The read side of an established transport: a TCP stream's, or a TLS stream's over it.
type TransportRead = Box<dyn AsyncRead + Unpin>;
/// The write side of an established transport.
type TransportWrite = Box<dyn AsyncWrite + Unpin>;

/// Why a connect attempt failed, kept so that every waiting caller gets its own error.
enum ConnectFailure {
    /// The TCP connect failed or timed out.
    Tcp(std::io::Error),
    /// The TLS handshake failed; the reason is already worded for the operator, the error
    /// is the handshake's own (none for a timeout).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Tls(String, Option<std::sync::Arc<std::io::Error>>),
}

impl ConnectFailure {
    fn to_error(&self, peer: &str) -> Error {
        match self {
            ConnectFailure::Tcp(reason) => Error::Connect {
                addr: peer.to_owned(),
                source: std::io::Error::new(reason.kind(), reason.to_string()),
            },
            ConnectFailure::Tls(reason, source) => Error::Tls {
                addr: peer.to_owned(),
                reason: reason.clone(),
                source: source.clone(),
            },
        }
    }
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectFailure::Tcp(reason) => write!(f, "{reason}"),
            ConnectFailure::Tls(reason, _) => write!(f, "TLS handshake failed: {reason}"),
        }
    }
}

/// Tuning of the client's TCP connections (one per name server or broker address).
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// How long a TCP connect may take.
    pub connect_timeout: Duration,
    /// First delay before reconnecting after a failure; doubles on each further failure.
    pub backoff_initial: Duration,
    /// Upper bound of the reconnect delay.
    pub backoff_max: Duration,
    /// Largest frame accepted from the peer.
    pub max_frame_len: usize,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            connect_timeout: Duration::from_secs(3),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            max_frame_len: 16 * 1024 * 1024,
        }
    }
}

/// Sends a request and resolves with the peer's response (whatever its response code).
///
/// The connection assigns the `opaque`; a response code other than SUCCESS is *not* an error
/// here, because many codes (PULL_NOT_FOUND, QUERY_NOT_FOUND…) are normal answers.
#[derive(Message)]
#[rtype(result = "Result<RemotingCommand>")]
pub struct Request {
    /// The command to send.
    pub command: RemotingCommand,
    /// How long to wait for the response.
    pub timeout: Duration,
}

/// Sends a request already encoded by the caller (the producer's fast path); the connection
/// only fills in the opaque and answers through `reply`. Sent by `Client::call_encoded`, which
/// also applies the timeout: keeping the wait out of the actor saves a boxed future and a
/// second channel per request. A queue actor's pull leaves its timeout to the connection
/// instead (`expiry`), which saves it a runtime timer per pull.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EncodedRequest {
    /// The request frame; its opaque is assigned here.
    pub frame: RequestFrame,
    /// Receives the response, or the error that ended the connection.
    pub reply: oneshot::Sender<Result<RemotingCommand>>,
    /// When `reply` gets a timeout error if no answer came by then (swept every
    /// [`EXPIRY_SWEEP_EVERY`]); `None` when the caller times the wait itself.
    pub expiry: Option<Expiry>,
}

/// Several [`EncodedRequest`]s in one message: the pulls of one puller turn to this
/// connection's broker.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EncodedRequests(pub Vec<EncodedRequest>);

/// Sends a command flagged one-way: the peer never answers. Resolves once it is queued for
/// writing (or fails if the connection cannot be established).
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub struct Oneway {
    /// The command to send.
    pub command: RemotingCommand,
}

/// A request the peer initiated (NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_RUNNING_INFO…).
///
/// The handler answers with the response command to send back (its opaque and response flag are
/// set by the connection), or `None` to send nothing. Replies to one-way requests are dropped.
#[derive(Message, Clone)]
#[rtype(result = "Option<RemotingCommand>")]
pub struct ServerRequest {
    /// The request as received.
    pub command: RemotingCommand,
    /// The address of the peer that sent it.
    pub peer: String,
}

/// Registers the handler of server-initiated requests with `code`, or of every code without a
/// handler of its own when `code` is `None`. The connection holds it weakly: being registered
/// keeps no handler alive (the client instance owns its connections, not the reverse).
#[derive(Message)]
#[rtype(result = "()")]
pub struct RegisterHandler {
    /// The request code, or `None` for the fallback handler.
    pub code: Option<i32>,
    /// Who answers.
    pub handler: WeakRecipient<ServerRequest>,
}

/// What happened to a connection, sent to subscribers.
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
pub enum ConnectionEvent {
    /// The TCP connection to `peer` is established.
    Connected {
        /// The remote address.
        peer: String,
    },
    /// The TCP connection to `peer` is gone; pending requests have failed.
    Disconnected {
        /// The remote address.
        peer: String,
        /// Why it closed.
        reason: String,
    },
}

/// Subscribes to [`ConnectionEvent`]s. Held weakly: a subscriber that stops is forgotten, and
/// subscribing keeps nobody alive.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Subscribe(pub WeakRecipient<ConnectionEvent>);

/// Closes the socket (failing pending requests) without stopping the actor; the next request
/// reconnects. Used by fault-injection tests and by clients dropping a stale broker.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Disconnect;

/// Closes the connection for good, failing pending requests; later requests fail at once as
/// closed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Close;

/// Makes the actor fail (stop unexpectedly) as a bug would: its supervisor restarts it, pending
/// requests fail as closed, and the next request reconnects. For fault-injection tests.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Fail;

/// Whether the socket is established now (mainly for tests and diagnostics).
#[derive(Message)]
#[rtype(result = "bool")]
pub struct IsConnected;

/// Who waits for an answer: the caller's reply channel.
type Reply = oneshot::Sender<Result<RemotingCommand>>;

enum State {
    /// No socket. A request connects once `retry_at` has passed.
    Idle { retry_at: Option<Instant> },
    /// A connect is under way; frames wait here, each with the opaque of the request that
    /// waits for its answer (`None`: one-way frames and responses).
    Connecting { queued: Vec<(Option<i32>, Bytes)> },
    /// Established.
    Connected {
        writer: FramedWrite<Bytes, TransportWrite, BytesCodec>,
        reader: SpawnHandle,
        /// Whether a frame arrived on this socket yet: a peer that closes before answering
        /// anything may be a server that requires TLS.
        answered: bool,
    },
}

/// A frame (or the end of the stream) read from socket number `generation`.
struct Incoming {
    generation: u64,
    item: Option<std::result::Result<RemotingCommand, ProtocolError>>,
}

impl Message for Incoming {
    type Result = ();
}

/// One TCP connection to one remote address. See the module documentation. Users reach it
/// through [`Client::invoke`](crate::Client::invoke), which picks the connection of an address
/// from the client's cache.
pub struct Connection {
    peer: String,
    config: ConnectionConfig,
    state: State,
    generation: u64,
    /// Requests waiting for their answer (the sans-I/O table of `crate::remoting`).
    pending: RequestTable<Reply>,
    handlers: HashMap<i32, WeakRecipient<ServerRequest>>,
    fallback_handler: Option<WeakRecipient<ServerRequest>>,
    subscribers: Vec<WeakRecipient<ConnectionEvent>>,
    backoff: Backoff,
    /// When the current connection was established.
    connected_at: Option<Instant>,
    /// Closed by its owner ([`Close`]): a restart (its address is still held somewhere) leaves
    /// it closed, answering every request as closed, until the last address is dropped.
    closed: bool,
    /// Restarts after failures (see [`Fail`]), for diagnostics and tests.
    restarts: u64,
    /// Reconnect and disconnect counters.
    metrics: ConnectionMetrics,
    /// A connection was up before (the next one is a reconnect).
    ever_connected: bool,
    /// The task that sends [`SweepExpired`] every [`EXPIRY_SWEEP_EVERY`].
    expiry_ticker: Option<actix_rt::task::JoinHandle<()>>,
    /// TLS over the TCP connection, when the client's configuration asks for it here.
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::TlsConnector>,
}

impl Connection {
    /// A connection to `peer` (`host:port`) with the default configuration. Nothing is
    /// connected until the first request.
    #[cfg(test)]
    pub fn new(peer: impl Into<String>) -> Self {
        Self::with_config(peer, ConnectionConfig::default())
    }

    /// A connection to `peer` with `config`.
    pub fn with_config(peer: impl Into<String>, config: ConnectionConfig) -> Self {
        let peer = peer.into();
        Connection {
            metrics: ConnectionMetrics::new(&peer),
            ever_connected: false,
            peer,
            backoff: Backoff::new(config.backoff_initial, config.backoff_max),
            connected_at: None,
            config,
            state: State::Idle { retry_at: None },
            generation: 0,
            pending: RequestTable::new(),
            handlers: HashMap::new(),
            fallback_handler: None,
            subscribers: Vec::new(),
            closed: false,
            restarts: 0,
            expiry_ticker: None,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// Runs a TLS handshake over every TCP connection before the first frame.
    #[cfg(feature = "tls")]
    pub(crate) fn with_tls(mut self, tls: crate::tls::TlsConnector) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Starts the connection under a supervisor: when it fails it is restarted in place (same
    /// address, same handlers and subscribers) and reconnects on the next request.
    pub(crate) fn start_supervised(self) -> Addr<Connection> {
        Supervisor::start(move |_| self)
    }

    /// The error of a request to a connection closed for good.
    fn closed_error(&self) -> Error {
        Error::ConnectionClosed(self.peer.clone())
    }

    /// Queues an encoded frame, connecting first if needed. `waiting` is the opaque of the
    /// request whose caller waits for the answer: if that caller gives up before the
    /// connection is up, the frame is not written (a send reported as failed must not be
    /// stored later, and the caller may already be retrying it elsewhere).
    fn write_frame(&mut self, frame: Bytes, waiting: Option<i32>, ctx: &mut Context<Self>) {
        if self.closed {
            return;
        }
        match &mut self.state {
            State::Connected { writer, .. } => writer.write(frame),
            State::Connecting { queued } => queued.push((waiting, frame)),
            State::Idle { retry_at } => {
                let delay = retry_at
                    .map(|at| at.saturating_duration_since(Instant::now()))
                    .unwrap_or_default();
                self.state = State::Connecting {
                    queued: vec![(waiting, frame)],
                };
                self.connect(delay, ctx);
            }
        }
    }

    fn connect(&mut self, delay: Duration, ctx: &mut Context<Self>) {
        let peer = self.peer.clone();
        let connect_timeout = self.config.connect_timeout;
        #[cfg(feature = "tls")]
        let tls = self.tls.clone();
        let attempt = async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let stream =
                match tokio::time::timeout(connect_timeout, TcpStream::connect(&peer)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => return Err(ConnectFailure::Tcp(e)),
                    Err(_) => {
                        return Err(ConnectFailure::Tcp(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("connect timed out after {connect_timeout:?}"),
                        )))
                    }
                };
            let _ = stream.set_nodelay(true);
            #[cfg(feature = "tls")]
            if let Some(tls) = tls {
                return tls_handshake(&tls, &peer, stream, connect_timeout).await;
            }
            let (read_half, write_half) = stream.into_split();
            Ok((
                Box::new(read_half) as TransportRead,
                Box::new(write_half) as TransportWrite,
            ))
        };
        ctx.spawn(
            attempt
                .into_actor(self)
                .map(|result, act, ctx| act.on_connect_result(result, ctx)),
        );
    }

    fn on_connect_result(
        &mut self,
        result: std::result::Result<(TransportRead, TransportWrite), ConnectFailure>,
        ctx: &mut Context<Self>,
    ) {
        let queued = match std::mem::replace(&mut self.state, State::Idle { retry_at: None }) {
            State::Connecting { queued } => queued,
            other => {
                // A Disconnect/Close raced with the connect: keep the newer state.
                self.state = other;
                return;
            }
        };
        match result {
            Ok((read_half, write_half)) => {
                self.generation += 1;
                let generation = self.generation;
                let frames =
                    // Pull responses run to hundreds of KiB: a roomy buffer avoids regrowing
                    // (and copying) it for every large frame.
                    FramedRead::with_capacity(
                        read_half,
                        RemotingCodec::new(self.config.max_frame_len),
                        READ_BUFFER_CAPACITY,
                    )
                        .map(move |item| Incoming {
                            generation,
                            item: Some(item),
                        })
                        .chain(futures::stream::once(async move {
                            Incoming {
                                generation,
                                item: None,
                            }
                        }));
                let reader = ctx.add_stream(frames);
                let mut writer = FramedWrite::new(write_half, BytesCodec::new(), ctx);
                for (waiting, frame) in queued {
                    let abandoned = waiting.is_some_and(|opaque| {
                        !self
                            .pending
                            .is_waiting(opaque, |reply: &Reply| !reply.is_closed())
                    });
                    if !abandoned {
                        writer.write(frame);
                    }
                }
                self.state = State::Connected {
                    writer,
                    reader,
                    answered: false,
                };
                self.connected_at = Some(Instant::now());
                self.backoff.on_connected();
                tracing::debug!(peer = %self.peer, "connected");
                self.notify(ConnectionEvent::Connected {
                    peer: self.peer.clone(),
                });
            }
            Err(reason) => {
                let wait = self.backoff.on_failure();
                tracing::warn!(peer = %self.peer, %reason, backoff = ?wait, "connect failed");
                self.state = State::Idle {
                    retry_at: Some(Instant::now() + wait),
                };
                // Each waiting caller gets its own copy of the cause.
                self.fail_pending(|peer| reason.to_error(peer));
            }
        }
    }

    /// Tears the socket down and fails every pending request.
    fn on_disconnect(&mut self, reason: String, ctx: &mut Context<Self>) {
        self.tear_down(reason, false, ctx);
    }

    /// [`Self::on_disconnect`] for a socket the peer closed or reset: if it did so before a
    /// single frame arrived, the callers learn why that may be ([`Error::HungUp`]).
    fn on_peer_closed(&mut self, reason: String, ctx: &mut Context<Self>) {
        self.tear_down(reason, true, ctx);
    }

    fn tear_down(&mut self, reason: String, by_peer: bool, ctx: &mut Context<Self>) {
        let answered = if let State::Connected {
            writer,
            reader,
            answered,
        } = &mut self.state
        {
            writer.close();
            ctx.cancel_future(writer.handle());
            ctx.cancel_future(*reader);
            *answered
        } else {
            return;
        };
        tracing::info!(peer = %self.peer, %reason, pending = self.pending.len(), "connection closed");
        self.connected_at = None;
        self.state = State::Idle {
            retry_at: Some(Instant::now() + self.backoff.on_failure()),
        };
        let hung_up = self.hung_up_reason(by_peer && !answered, &reason);
        self.fail_pending(|peer| match &hung_up {
            Some(reason) => Error::HungUp {
                addr: peer.to_owned(),
                reason: reason.clone(),
            },
            None => Error::ConnectionClosed(peer.to_owned()),
        });
        self.notify(ConnectionEvent::Disconnected {
            peer: self.peer.clone(),
            reason,
        });
    }

    /// Why a connection that closed before a single frame arrived was likely closed: a peer
    /// that hangs up on a plaintext connection at once is what a server requiring TLS does; on
    /// a TLS connection the read error says it (a refused client certificate arrives as an
    /// alert after the handshake). `None` once the peer answered something, or when the close
    /// was not the peer's doing.
    fn hung_up_reason(&self, before_any_answer: bool, reason: &str) -> Option<String> {
        if !before_any_answer {
            None
        } else if self.uses_tls() && reason.contains("alert") {
            Some(format!(
                "{reason} (a server that requires a client certificate sends this when none or \
                 an untrusted one is presented)"
            ))
        } else if self.uses_tls() {
            Some(reason.to_owned())
        } else {
            Some(format!(
                "{reason}; a server that requires TLS does this to plaintext clients (connect with TLS)"
            ))
        }
    }

    fn uses_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        {
            self.tls.is_some()
        }
        #[cfg(not(feature = "tls"))]
        {
            false
        }
    }

    /// Fails the requests whose [`Expiry`] passed with a timeout (their answers, should they
    /// come, find nothing).
    fn fail_expired(&mut self) {
        for (_, pending) in self.pending.take_expired(Instant::now()) {
            if let Some(expiry) = pending.expiry {
                let _ = pending.reply.send(Err(Error::Timeout {
                    peer: self.peer.clone(),
                    code: RequestCode(expiry.code),
                    timeout: expiry.timeout,
                }));
            }
        }
    }

    fn fail_pending(&mut self, error: impl Fn(&str) -> Error) {
        for (_, pending) in self.pending.drain() {
            let _ = pending.reply.send(Err(error(&self.peer)));
        }
    }

    fn notify(&mut self, event: ConnectionEvent) {
        match &event {
            ConnectionEvent::Connected { .. } => {
                if self.ever_connected {
                    self.metrics.reconnected();
                }
                self.ever_connected = true;
            }
            ConnectionEvent::Disconnected { .. } => self.metrics.disconnected(),
        }
        self.subscribers.retain(|s| s.upgrade().is_some());
        for subscriber in &self.subscribers {
            if let Some(subscriber) = subscriber.upgrade() {
                // Events are rare control messages; a full subscriber mailbox must not block I/O.
                let _ = subscriber.try_send(event.clone());
            }
        }
    }

    fn on_server_request(&mut self, command: RemotingCommand, ctx: &mut Context<Self>) {
        let handler = self
            .handlers
            .get(&command.code)
            .and_then(WeakRecipient::upgrade)
            .or_else(|| {
                self.fallback_handler
                    .as_ref()
                    .and_then(WeakRecipient::upgrade)
            });
        let oneway = command.is_oneway();
        let Some(handler) = handler else {
            tracing::debug!(peer = %self.peer, code = command.code, "server request without handler");
            if !oneway {
                let response = RemotingCommand::response_to(
                    &command,
                    response_code::REQUEST_CODE_NOT_SUPPORTED,
                    Some(format!(" request type {} not supported", command.code)),
                );
                self.write_response(response, ctx);
            }
            return;
        };
        let request = ServerRequest {
            peer: self.peer.clone(),
            command: command.clone(),
        };
        let answer = handler.send(request);
        ctx.spawn(answer.into_actor(self).map(move |result, act, ctx| {
            if oneway {
                return;
            }
            let response = match result {
                Ok(Some(mut response)) => {
                    response.opaque = command.opaque;
                    response.flag |= RemotingCommand::FLAG_RESPONSE;
                    response
                }
                Ok(None) => return,
                Err(e) => RemotingCommand::response_to(
                    &command,
                    response_code::SYSTEM_ERROR,
                    Some(format!("handler unavailable: {e}")),
                ),
            };
            act.write_response(response, ctx);
        }));
    }

    fn write_response(&mut self, response: RemotingCommand, ctx: &mut Context<Self>) {
        let mut frame = BytesMut::new();
        match response.encode(&mut frame) {
            Ok(()) => self.write_frame(frame.freeze(), None, ctx),
            Err(e) => tracing::warn!(peer = %self.peer, error = %e, "cannot encode response"),
        }
    }
}

impl Actor for Connection {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Many producers and queue actors share one connection; a roomy mailbox keeps their
        // `send`s from parking (parked senders resume in no particular order).
        ctx.set_mailbox_capacity(4096);
        // A ticker task, not a timer of this context, which actix would poll on every read
        // and write (see `spawn_ticker`).
        if let Some(old) = self.expiry_ticker.take() {
            old.abort();
        }
        let me = ctx.address().downgrade();
        self.expiry_ticker = Some(spawn_ticker(me, EXPIRY_SWEEP_EVERY, SweepExpired));
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        if let Some(ticker) = self.expiry_ticker.take() {
            ticker.abort();
        }
        self.fail_pending(|peer| Error::ConnectionClosed(peer.to_owned()));
    }
}

/// Fail the requests whose [`Expiry`] passed (sent every [`EXPIRY_SWEEP_EVERY`]).
#[derive(Message, Clone, Copy)]
#[rtype(result = "()")]
struct SweepExpired;

impl Handler<SweepExpired> for Connection {
    type Result = ();

    fn handle(&mut self, _tick: SweepExpired, _ctx: &mut Self::Context) {
        self.fail_expired();
    }
}

impl Supervised for Connection {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        // The socket's reader and writer were futures of the old context: they are gone.
        let was_connected = matches!(self.state, State::Connected { .. });
        self.generation += 1;
        self.fail_pending(|peer| Error::ConnectionClosed(peer.to_owned()));
        if self.closed {
            self.connected_at = None;
            self.state = State::Idle { retry_at: None };
            return;
        }
        self.restarts += 1;
        let wait = self.backoff.on_failure();
        tracing::warn!(peer = %self.peer, restarts = self.restarts, backoff = ?wait, "connection actor failed; restarted");
        self.state = State::Idle {
            retry_at: Some(Instant::now() + wait),
        };
        if was_connected {
            self.notify(ConnectionEvent::Disconnected {
                peer: self.peer.clone(),
                reason: "connection actor restarted".into(),
            });
        }
    }
}

impl WriteHandler<std::io::Error> for Connection {
    fn error(&mut self, err: std::io::Error, ctx: &mut Self::Context) -> Running {
        self.on_disconnect(format!("write failed: {err}"), ctx);
        Running::Continue
    }

    fn finished(&mut self, _ctx: &mut Self::Context) {
        // The writer of a closed socket ended; the reader side reports the disconnect.
    }
}

impl StreamHandler<Incoming> for Connection {
    fn handle(&mut self, incoming: Incoming, ctx: &mut Self::Context) {
        if incoming.generation != self.generation {
            return; // a frame from a socket already replaced
        }
        if let (State::Connected { answered, .. }, Some(Ok(_))) = (&mut self.state, &incoming.item)
        {
            *answered = true;
        }
        match incoming.item {
            Some(Ok(command)) if command.is_response() => match self.pending.take(command.opaque) {
                Some(pending) => {
                    let _ = pending.reply.send(Ok(command));
                }
                None => tracing::debug!(
                    peer = %self.peer,
                    opaque = command.opaque,
                    "response for no pending request (it timed out)"
                ),
            },
            Some(Ok(command)) => self.on_server_request(command, ctx),
            Some(Err(e)) => {
                // A reset or other socket error arrives through the codec too; only a real decoding
                // failure is the peer's fault.
                let what = match &e {
                    ProtocolError::Io(_) => "connection error",
                    _ => "malformed frame",
                };
                tracing::warn!(peer = %self.peer, error = %e, "{what}, closing connection");
                match &e {
                    ProtocolError::Io(_) => self.on_peer_closed(format!("{what}: {e}"), ctx),
                    _ => self.on_disconnect(format!("{what}: {e}"), ctx),
                }
            }
            None => self.on_peer_closed("closed by peer".into(), ctx),
        }
    }

    fn finished(&mut self, _ctx: &mut Self::Context) {
        // End of stream is delivered as `Incoming { item: None }`; do not stop the actor.
    }
}

/// A typed request answered through `reply` (what [`Request`] and the client's calls use):
/// the wait and its timeout stay with the caller. Were the wait a future of this actor, every
/// frame read would poll all of them — with thousands of long polls parked on one broker
/// connection, quadratic work.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CommandRequest {
    /// The command to send; its opaque is assigned here.
    pub command: RemotingCommand,
    /// Receives the response, or the error that ended the connection.
    pub reply: oneshot::Sender<Result<RemotingCommand>>,
}

impl Connection {
    /// Registers the waiter of a request and returns the opaque to send it with; `None` when
    /// there is nothing to send (the connection is closed — the waiter is told — or the caller
    /// gave up while the request sat in the mailbox).
    fn register_waiter(&mut self, reply: Reply, expiry: Option<Expiry>) -> Option<i32> {
        if self.closed {
            let _ = reply.send(Err(self.closed_error()));
            return None;
        }
        if reply.is_closed() {
            return None;
        }
        let opaque = self.pending.register_expiring(reply, expiry);
        // A timed-out request leaves its entry behind (its caller waited outside the actor).
        self.pending.sweep_abandoned(|reply| reply.is_closed());
        Some(opaque)
    }
}

impl Handler<CommandRequest> for Connection {
    type Result = ();

    fn handle(&mut self, msg: CommandRequest, ctx: &mut Self::Context) {
        let CommandRequest { mut command, reply } = msg;
        let Some(opaque) = self.register_waiter(reply, None) else {
            return;
        };
        command.opaque = opaque;
        command.flag &= !(RemotingCommand::FLAG_RESPONSE | RemotingCommand::FLAG_ONEWAY);
        let mut frame = BytesMut::new();
        if let Err(e) = command.encode(&mut frame) {
            if let Some(pending) = self.pending.take(opaque) {
                let _ = pending.reply.send(Err(Error::Protocol(e)));
            }
            return;
        }
        self.write_frame(frame.freeze(), Some(opaque), ctx);
    }
}

impl Handler<Request> for Connection {
    type Result = ResponseFuture<Result<RemotingCommand>>;

    fn handle(&mut self, msg: Request, ctx: &mut Self::Context) -> Self::Result {
        let (reply, response) = oneshot::channel();
        let code = msg.command.code;
        Handler::<CommandRequest>::handle(
            self,
            CommandRequest {
                command: msg.command,
                reply,
            },
            ctx,
        );
        let peer = self.peer.clone();
        let timeout = msg.timeout;
        Box::pin(async move { await_reply(response, &peer, code, timeout).await })
    }
}

/// Waits up to `timeout` for the answer to a request of `code` sent to `peer`.
pub(crate) async fn await_reply(
    response: oneshot::Receiver<Result<RemotingCommand>>,
    peer: &str,
    code: i32,
    timeout: Duration,
) -> Result<RemotingCommand> {
    settle_reply(
        tokio::time::timeout(timeout, response).await,
        || peer.to_owned(),
        code,
        timeout,
    )
}

/// What a caller that waited up to `timeout` for the answer to a request of `code` gets: the
/// answer, the error the connection sent, or, when the connection dropped the request or the
/// time ran out, an error naming `peer` (asked for only then: a request that succeeds
/// allocates no name).
pub(crate) fn settle_reply(
    waited: std::result::Result<
        std::result::Result<Result<RemotingCommand>, oneshot::error::RecvError>,
        tokio::time::error::Elapsed,
    >,
    peer: impl FnOnce() -> String,
    code: i32,
    timeout: Duration,
) -> Result<RemotingCommand> {
    match waited {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(Error::ConnectionClosed(peer())),
        Err(_) => Err(Error::Timeout {
            peer: peer(),
            code: RequestCode(code),
            timeout,
        }),
    }
}

/// Sends `command` on `conn` and waits up to `timeout` for the response (any response code),
/// queued as [`enqueue`] does.
pub(crate) async fn call_command(
    conn: &Addr<Connection>,
    peer: &str,
    command: RemotingCommand,
    timeout: Duration,
) -> Result<RemotingCommand> {
    let code = command.code;
    let (reply, response) = oneshot::channel();
    enqueue(conn, peer, CommandRequest { command, reply }).await?;
    await_reply(response, peer, code, timeout).await
}

/// Queues `request` on `conn` with `try_send`, which respects the mailbox capacity; only when
/// the mailbox is full does the caller wait for room (`send`), so a flood of requests is slowed
/// down instead of piling up without bound. A stopped connection reads as closed.
pub(crate) async fn enqueue<M>(conn: &Addr<Connection>, peer: &str, request: M) -> Result<()>
where
    M: Message<Result = ()> + Send + 'static,
    Connection: Handler<M>,
{
    match conn.try_send(request) {
        Ok(()) => Ok(()),
        Err(actix::dev::SendError::Full(request)) => conn
            .send(request)
            .await
            .map_err(|_| Error::ConnectionClosed(peer.to_owned())),
        Err(actix::dev::SendError::Closed(_)) => Err(Error::ConnectionClosed(peer.to_owned())),
    }
}

impl Handler<EncodedRequest> for Connection {
    type Result = ();

    fn handle(&mut self, msg: EncodedRequest, ctx: &mut Self::Context) {
        self.send_encoded(msg, ctx);
    }
}

impl Handler<EncodedRequests> for Connection {
    type Result = ();

    fn handle(&mut self, msg: EncodedRequests, ctx: &mut Self::Context) {
        for request in msg.0 {
            self.send_encoded(request, ctx);
        }
    }
}

impl Connection {
    fn send_encoded(&mut self, request: EncodedRequest, ctx: &mut Context<Self>) {
        let EncodedRequest {
            mut frame,
            reply,
            expiry,
        } = request;
        let Some(opaque) = self.register_waiter(reply, expiry) else {
            return;
        };
        frame.set_opaque(opaque);
        self.write_frame(frame.into_bytes(), Some(opaque), ctx);
    }
}

/// Sends `frame` on `conn` and waits up to `timeout` for the response (any response code),
/// queued as [`enqueue`] does. (The data path goes through `Client::call_encoded`, which skips
/// taking a handle of the connection when it can.)
#[cfg(test)]
pub(crate) async fn call_encoded(
    conn: &Addr<Connection>,
    peer: &str,
    frame: RequestFrame,
    timeout: Duration,
) -> Result<RemotingCommand> {
    let code = frame.code();
    let (reply, response) = oneshot::channel();
    enqueue(
        conn,
        peer,
        EncodedRequest {
            frame,
            reply,
            expiry: None,
        },
    )
    .await?;
    await_reply(response, peer, code, timeout).await
}

impl Handler<Oneway> for Connection {
    type Result = Result<()>;

    fn handle(&mut self, msg: Oneway, ctx: &mut Self::Context) -> Self::Result {
        if self.closed {
            return Err(self.closed_error());
        }
        let mut command = msg.command;
        command.opaque = self.pending.allocate_opaque();
        command.mark_oneway();
        let mut frame = BytesMut::new();
        command.encode(&mut frame)?;
        self.write_frame(frame.freeze(), None, ctx);
        Ok(())
    }
}

impl Handler<RegisterHandler> for Connection {
    type Result = ();

    fn handle(&mut self, msg: RegisterHandler, _ctx: &mut Self::Context) {
        match msg.code {
            Some(code) => {
                self.handlers.insert(code, msg.handler);
            }
            None => self.fallback_handler = Some(msg.handler),
        }
    }
}

impl Handler<Subscribe> for Connection {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, _ctx: &mut Self::Context) {
        self.subscribers.push(msg.0);
    }
}

impl Handler<Disconnect> for Connection {
    type Result = ();

    fn handle(&mut self, _msg: Disconnect, ctx: &mut Self::Context) {
        self.on_disconnect("disconnect requested".into(), ctx);
    }
}

impl Handler<Close> for Connection {
    type Result = ();

    fn handle(&mut self, _msg: Close, ctx: &mut Self::Context) {
        self.on_disconnect("closed by owner".into(), ctx);
        self.closed = true;
        ctx.stop();
    }
}

impl Handler<Fail> for Connection {
    type Result = ();

    fn handle(&mut self, _msg: Fail, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// How long the current connection has been up (`None` while not connected).
#[derive(Message)]
#[rtype(result = "Option<Duration>")]
pub(crate) struct ConnectedFor;

impl Handler<ConnectedFor> for Connection {
    type Result = Option<Duration>;

    fn handle(&mut self, _msg: ConnectedFor, _ctx: &mut Self::Context) -> Option<Duration> {
        match self.state {
            State::Connected { .. } => self.connected_at.map(|at| at.elapsed()),
            _ => None,
        }
    }
}

impl Handler<IsConnected> for Connection {
    type Result = bool;

    fn handle(&mut self, _msg: IsConnected, _ctx: &mut Self::Context) -> bool {
        matches!(self.state, State::Connected { .. })
    }
}

/// The TLS handshake over a connected TCP stream, bounded by `timeout`; a failure is worded for
/// the operator (see `tls::describe_handshake_failure`).
#[cfg(feature = "tls")]
async fn tls_handshake(
    tls: &crate::tls::TlsConnector,
    peer: &str,
    stream: TcpStream,
    timeout: Duration,
) -> std::result::Result<(TransportRead, TransportWrite), ConnectFailure> {
    let name = tls
        .server_name_for(peer)
        .map_err(|reason| ConnectFailure::Tls(reason, None))?;
    let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
    match tokio::time::timeout(timeout, connector.connect(name, stream)).await {
        Ok(Ok(stream)) => {
            let (read_half, write_half) = tokio::io::split(stream);
            Ok((Box::new(read_half), Box::new(write_half)))
        }
        Ok(Err(e)) => Err(ConnectFailure::Tls(
            crate::tls::describe_handshake_failure(&e),
            Some(std::sync::Arc::new(e)),
        )),
        Err(_) => Err(ConnectFailure::Tls(
            format!(
                "no handshake within {timeout:?} (the peer accepted the connection but did not \
                 answer the ClientHello)"
            ),
            None,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codes::request_code;
    use futures::SinkExt;
    use tokio::net::TcpListener;
    use tokio_util::codec::Framed;

    fn route_frame(topic: &str) -> RequestFrame {
        RequestFrame::json(request_code::GET_ROUTEINFO_BY_TOPIC, b"", |ext| {
            ext.str("topic", topic)
        })
        .unwrap()
    }

    #[actix_rt::test]
    async fn encoded_requests_get_their_own_responses_a_timeout_or_a_closed_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (timed_out_tx, timed_out_rx) = oneshot::channel::<()>();
        let server = actix_rt::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut server = Framed::new(socket, RemotingCodec::default());
            let ignored = server.next().await.unwrap().unwrap();
            let answered = server.next().await.unwrap().unwrap();
            assert_ne!(ignored.opaque, answered.opaque);
            let topic = answered.ext("topic").map(str::to_owned);
            let response = RemotingCommand::response_to(&answered, response_code::SUCCESS, topic);
            server.send(response).await.unwrap();
            // Answer the ignored request only after its caller gave up: it must be dropped.
            timed_out_rx.await.unwrap();
            let late = RemotingCommand::response_to(&ignored, response_code::SUCCESS, None);
            server.send(late).await.unwrap();
            let last = server.next().await.unwrap().unwrap();
            assert_eq!(last.ext("topic"), Some("T2"));
            // Hang up without answering: the pending request fails as closed.
        });
        let conn = Connection::new(addr.clone()).start();
        let slow = call_encoded(&conn, &addr, route_frame("T0"), Duration::from_millis(200));
        let fast = call_encoded(&conn, &addr, route_frame("T1"), Duration::from_secs(10));
        let (slow, fast) = futures::join!(slow, fast);
        assert_eq!(fast.unwrap().remark.as_deref(), Some("T1"));
        match slow {
            Err(Error::Timeout { code, .. }) => {
                assert_eq!(code.0, request_code::GET_ROUTEINFO_BY_TOPIC)
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        timed_out_tx.send(()).unwrap();
        let last = call_encoded(&conn, &addr, route_frame("T2"), Duration::from_secs(10)).await;
        assert!(
            matches!(last, Err(Error::ConnectionClosed(ref peer)) if *peer == addr),
            "{last:?}"
        );
        server.await.unwrap();
    }

    #[actix_rt::test]
    async fn an_encoded_request_to_a_stopped_connection_fails_as_closed() {
        let conn = Connection::new("127.0.0.1:1").start();
        conn.send(Close).await.unwrap();
        let result = call_encoded(
            &conn,
            "127.0.0.1:1",
            route_frame("T"),
            Duration::from_secs(5),
        );
        assert!(matches!(result.await, Err(Error::ConnectionClosed(_))));
    }
}
