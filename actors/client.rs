//! The client instance: the base layer every producer and consumer kind shares.
//!
//! One [`ClientInstance`] actor per client owns the connections (one per remote address), the
//! name-server list with failover and the topic route cache, refreshed every
//! `poll_name_server_interval`. The cache itself is shared with every [`Client`] handle behind a
//! read-write lock, so the data path (pulls, sends, offset commits) reads routes and connections
//! without a mailbox round trip; only a miss goes to the actor, which coalesces concurrent
//! look-ups of one topic into one name-server request.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use actix::prelude::*;
use actix::{WeakAddr, WeakRecipient};
use tokio::sync::oneshot;

use crate::acl::Credentials;
use crate::actors::connection::{
    self, Connection, ConnectionConfig, RegisterHandler, ServerRequest,
};
use crate::actors::puller::Pull;
use crate::actors::runtime;
use crate::error::{Error, NameServerFailures, ProtocolError, Result};
use crate::filter::Selector;
use crate::hooks::{Hooks, RequestHooks, RpcHook};
use crate::identity::{default_instance_name, pick_client_ip, process_token};
use crate::message::{decode_messages, decode_offset_msg_id, MessageExt, MessageQueue};
use crate::protocol::body::{
    decode_json, encode_json, CheckClientRequestBody, ConsumerConnection, ConsumerListBody,
    HeartbeatData, LockBatchResponseBody, ResetOffsetBody, TopicRouteData,
};
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::command::RequestFrame;
use crate::protocol::header::{
    GetConsumerConnectionListRequestHeader, GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader, GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader,
    GetRouteInfoRequestHeader, OffsetResponseHeader, QueryConsumerOffsetResponseHeader,
    ResetOffsetRequestHeader, SearchOffsetRequestHeader, ViewMessageRequestHeader,
};
use crate::protocol::RemotingCommand;
use crate::remoting::Expiry;
use crate::route::{NameServerList, TopicRoute};
use crate::rpc::{
    broker_error, consumer_ids_command, expect_success, heartbeat_command, lock_batch_command,
    query_offset_command, send_back_command, unregister_client_command, update_offset_command,
    PullRequest, PullResult, RawPullResult, Subscription,
};

/// Where the broker's answer to a pull goes (see [`Client::try_send_pulls`]).
pub(crate) type PullReply = oneshot::Sender<Result<RemotingCommand>>;

/// The pulls of one puller turn grouped by the connection they go to. Kept by the puller
/// between turns, so that its groups' memory serves the next turn.
#[derive(Default)]
pub(crate) struct PullBatches {
    groups: Vec<PullGroup>,
    /// How many of `groups` this turn uses.
    used: usize,
}

/// The pulls of a turn to one broker address.
#[derive(Default)]
struct PullGroup {
    addr: String,
    requests: Vec<connection::EncodedRequest>,
    /// The pull of each request, should the connection not take them (the way that can wait
    /// starts from the pull).
    pulls: Vec<Arc<PullRequest>>,
}

impl PullBatches {
    /// Adds `encoded`, the frame of `pull`, to the group of `addr`.
    fn add(&mut self, addr: &str, pull: Arc<PullRequest>, encoded: connection::EncodedRequest) {
        let found = self.groups[..self.used].iter().position(|g| g.addr == addr);
        let at = match found {
            Some(at) => at,
            None => {
                if self.used == self.groups.len() {
                    self.groups.push(PullGroup::default());
                }
                let group = &mut self.groups[self.used];
                group.addr.clear();
                group.addr.push_str(addr);
                self.used += 1;
                self.used - 1
            }
        };
        let group = &mut self.groups[at];
        group.requests.push(encoded);
        group.pulls.push(pull);
    }
}

impl PullGroup {
    /// Queues the group's requests on the cached connection to its address, as one message
    /// when there are several (a lone one goes as itself, and the group keeps its memory);
    /// those the connection cannot take now go to `wait`.
    fn send(&mut self, shared: &ClientShared, wait: &mut Vec<Pull>) {
        let refused = match self.requests.len() {
            0 => Vec::new(),
            1 => match self.requests.pop() {
                Some(request) => match shared.try_send_cached(&self.addr, request) {
                    Ok(()) => Vec::new(),
                    Err(request) => vec![request],
                },
                None => Vec::new(),
            },
            _ => {
                let requests = connection::EncodedRequests(std::mem::take(&mut self.requests));
                match shared.try_send_cached(&self.addr, requests) {
                    Ok(()) => Vec::new(),
                    Err(requests) => requests.0,
                }
            }
        };
        for (request, encoded) in self.pulls.drain(..).zip(refused) {
            wait.push(Pull {
                request,
                reply: encoded.reply,
                expiry: encoded.expiry,
            });
        }
    }
}

/// Settings shared by everything that uses one client instance.
///
/// ```
/// use std::time::Duration;
/// use rocketmq_actor::ClientConfig;
/// let mut config = ClientConfig::new("127.0.0.1:9876;127.0.0.1:9877");
/// config.request_timeout = Duration::from_secs(5);
/// assert_ne!(config.client_ip, "");
/// ```
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Name-server addresses, `;`-separated (`127.0.0.1:9876;127.0.0.1:9877`).
    pub namesrv_addr: String,
    /// The IP put into the client id and into message ids. Default: the host's first
    /// non-loopback address (IPv4 preferred), as Java does.
    pub client_ip: String,
    /// Instance name; the client id is `client_ip@instance_name`. Default: `pid#token#n`, where
    /// the token is drawn once per process start and `n` counts instances in the process, so no
    /// two clients share an id even when pid and IP collide (containers all run as pid 1).
    pub instance_name: Option<String>,
    /// Timeout of ordinary RPCs (route look-ups, offset queries…).
    pub request_timeout: Duration,
    /// How often cached routes are refreshed.
    pub poll_name_server_interval: Duration,
    /// Connection tuning.
    pub connection: ConnectionConfig,
    /// Hooks run around every request this client sends, in order (see [`RpcHook`]).
    pub rpc_hooks: Hooks<dyn RpcHook>,
    /// The account requests are signed with, for a cluster with ACL: every request gets
    /// `AccessKey` and `Signature` (after the [`rpc_hooks`](Self::rpc_hooks) ran, so what they
    /// add is signed). `None`: requests go unsigned.
    pub credentials: Option<Credentials>,
    /// TLS to the name servers and/or brokers; `None`: plaintext everywhere (feature `tls`).
    #[cfg(feature = "tls")]
    pub tls: Option<crate::tls::TlsConfig>,
}

impl ClientConfig {
    /// A configuration pointing at the given name servers, other values at their defaults.
    pub fn new(namesrv_addr: impl Into<String>) -> Self {
        ClientConfig {
            namesrv_addr: namesrv_addr.into(),
            client_ip: host_ip().to_string(),
            instance_name: None,
            request_timeout: Duration::from_secs(3),
            poll_name_server_interval: Duration::from_secs(30),
            connection: ConnectionConfig::default(),
            rpc_hooks: Hooks::new(),
            credentials: None,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// Adds a hook run around every request (after those added before).
    pub fn with_rpc_hook(mut self, hook: Arc<dyn RpcHook>) -> Self {
        self.rpc_hooks.push(hook);
        self
    }

    /// Signs every request with `credentials` (see [`ClientConfig::credentials`]).
    ///
    /// ```
    /// use rocketmq_actor::acl::Credentials;
    /// use rocketmq_actor::ClientConfig;
    /// let config = ClientConfig::new("127.0.0.1:9876")
    ///     .with_credentials(Credentials::new("RocketMQ", "12345678"));
    /// assert!(!format!("{config:?}").contains("12345678"));
    /// ```
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }
}

/// The host's address for client ids: see [`pick_client_ip`].
/// Why a broker refuses a SQL92 subscription, from its answer's code and remark, with what
/// to do about it.
pub(crate) fn selector_refusal_reason(code: i32, remark: &str) -> String {
    match code {
        response_code::SYSTEM_ERROR => format!(
            "{remark}; switch property filtering on with enablePropertyFilter = true in the \
             broker's configuration (the [broker] table of a rocketmq-rust broker's TOML, \
             broker.conf of a Java broker) and restart it"
        ),
        response_code::SUBSCRIPTION_PARSE_FAILED => {
            format!("the broker cannot compile it: {remark}")
        }
        response_code::REQUEST_CODE_NOT_SUPPORTED => "the broker does not know \
             CHECK_CLIENT_CONFIG: brokers older than RocketMQ 4.1 cannot filter by SQL92"
            .to_owned(),
        code => format!("code {code}: {remark}"),
    }
}

pub(crate) fn host_ip() -> IpAddr {
    let addrs: Vec<IpAddr> = if_addrs::get_if_addrs()
        .map(|interfaces| interfaces.into_iter().map(|i| i.ip()).collect())
        .unwrap_or_default();
    pick_client_ip(&addrs)
}

static INSTANCE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// What the client instance shares with its handles: read on the data path, written by the
/// actor (routes, connections) only.
pub(crate) struct ClientShared {
    client_id: String,
    client_ip: IpAddr,
    request_timeout: Duration,
    connections: RwLock<HashMap<String, Addr<Connection>, foldhash::fast::RandomState>>,
    routes: RwLock<HashMap<String, Arc<TopicRoute>, foldhash::fast::RandomState>>,
    /// Run around every request (the RPC hooks, then the ACL signature).
    hooks: RequestHooks,
    /// The configured name-server list, as given (a namespace may be derived from it).
    namesrv_addr: String,
}

impl ClientShared {
    fn cached_connection(&self, addr: &str) -> Option<Addr<Connection>> {
        let connections = self.connections.read().unwrap_or_else(|e| e.into_inner());
        connections.get(addr).filter(|c| c.connected()).cloned()
    }

    /// Queues `request` on the cached, live connection to `addr` if its mailbox has room,
    /// without taking a handle of its own (cloning an `Addr` allocates); hands `request` back
    /// otherwise, for the path that can wait.
    fn try_send_cached<M>(&self, addr: &str, request: M) -> std::result::Result<(), M>
    where
        M: actix::Message<Result = ()> + Send + 'static,
        Connection: Handler<M>,
    {
        let connections = self.connections.read().unwrap_or_else(|e| e.into_inner());
        match connections.get(addr).filter(|c| c.connected()) {
            Some(conn) => conn.try_send(request).map_err(|e| e.into_inner()),
            None => Err(request),
        }
    }

    fn cached_route(&self, topic: &str) -> Option<Arc<TopicRoute>> {
        let routes = self.routes.read().unwrap_or_else(|e| e.into_inner());
        routes.get(topic).cloned()
    }

    fn set_route(&self, topic: &str, route: Option<Arc<TopicRoute>>) {
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        match route {
            Some(route) => routes.insert(topic.to_owned(), route),
            None => routes.remove(topic),
        };
    }
}

/// Returns the connection actor for a remote address, creating it on first use.
#[derive(Message)]
#[rtype(result = "Result<Addr<Connection>>")]
pub(crate) struct GetConnection(pub String);

/// Returns the route of a topic: from the cache, or from the name servers when absent or when
/// `refresh` is set.
#[derive(Message)]
#[rtype(result = "Result<Arc<TopicRoute>>")]
pub(crate) struct GetRoute {
    /// The topic.
    pub topic: String,
    /// Skip the cache.
    pub refresh: bool,
}

/// Closes every connection and stops the instance.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Shutdown;

/// Routes requests that brokers send to this client (NOTIFY_CONSUMER_IDS_CHANGED,
/// RESET_CONSUMER_CLIENT_OFFSET, GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY) to the
/// consumer of the group they name. One consumer per group per client instance: brokers know
/// consumers by client id, so two of one group would be indistinguishable.
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub(crate) struct RegisterConsumer {
    /// The consumer group.
    pub group: String,
    /// Who answers the group's server requests.
    pub handler: Recipient<ServerRequest>,
}

/// Removes a consumer registered with [`RegisterConsumer`].
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct UnregisterConsumer(pub String);

/// The client instance actor. Use it through [`Client`].
pub(crate) struct ClientInstance {
    config: ClientConfig,
    shared: Arc<ClientShared>,
    /// Its own address, weak: what connections answer server requests to.
    myself: Option<WeakAddr<ClientInstance>>,
    /// Who answers each group's server requests; weak, so a registration keeps no consumer
    /// alive (a consumer dropped without unregistering is skipped as if unknown).
    consumers: HashMap<String, WeakRecipient<ServerRequest>>,
    /// Shut down by its owner: a restart (handles still exist) answers every request with
    /// [`Error::Shutdown`] instead of opening connections again.
    shut_down: bool,
    namesrv: NameServerList,
    refreshing: HashSet<String>,
    /// Callers waiting for a route fetch already under way, by topic: one name-server request
    /// serves them all, however many sends or queues ask at once.
    route_waiters: HashMap<String, Vec<oneshot::Sender<Result<Arc<TopicRoute>>>>>,
    /// The TLS setup of [`ClientConfig::tls`], built once at start (files read, PEM parsed).
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::TlsConnector>,
}

impl ClientInstance {
    fn connection(&mut self, addr: &str) -> Addr<Connection> {
        if let Some(conn) = self.shared.cached_connection(addr) {
            return conn;
        }
        #[allow(unused_mut)]
        let mut conn = Connection::with_config(addr, self.config.connection.clone());
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let name_server = self.namesrv.addrs().iter().any(|a| a == addr);
            if tls.covers(name_server) {
                conn = conn.with_tls(tls.clone());
            }
        }
        let conn = conn.start_supervised();
        if let Some(myself) = &self.myself {
            // Registration is a control message on a fresh actor: it cannot be refused. Weak:
            // the instance owns its connections, not the reverse.
            conn.do_send(RegisterHandler {
                code: None,
                handler: myself.clone().recipient(),
            });
        }
        self.shared
            .connections
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(addr.to_owned(), conn.clone());
        conn
    }

    /// Asks the name servers in failover order for the route of `topic`.
    fn fetch_route(
        &mut self,
        topic: String,
    ) -> impl ActorFuture<Self, Output = Result<Arc<TopicRoute>>> {
        let attempts: Vec<(String, Addr<Connection>)> = self
            .namesrv
            .try_order()
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .into_iter()
            .map(|addr| {
                let conn = self.connection(&addr);
                (addr, conn)
            })
            .collect();
        let timeout = self.config.request_timeout;
        let query_topic = topic.clone();
        let shared = self.shared.clone();
        async move {
            let mut failures = NameServerFailures::default();
            for (addr, conn) in attempts {
                let header = GetRouteInfoRequestHeader {
                    topic: query_topic.clone(),
                    ..Default::default()
                };
                let command = RemotingCommand::request_with_header(
                    request_code::GET_ROUTEINFO_BY_TOPIC,
                    &header,
                );
                match call(&conn, &addr, &shared.hooks, command, timeout).await {
                    Ok(response) if response.code == response_code::SUCCESS => {
                        let body = response.body.unwrap_or_default();
                        return match decode_json::<TopicRouteData>(&body) {
                            Ok(data) => match crate::route::check_route(&data) {
                                Ok(()) => Ok((addr, Some(data))),
                                Err(why) => Err(Error::Protocol(ProtocolError::Json(format!(
                                    "route of {query_topic} from {addr}: {why}"
                                )))),
                            },
                            Err(e) => Err(Error::Protocol(e)),
                        };
                    }
                    Ok(response) if response.code == response_code::TOPIC_NOT_EXIST => {
                        return Ok((addr, None));
                    }
                    Ok(response) => failures.push_answer(broker_error(
                        &addr,
                        request_code::GET_ROUTEINFO_BY_TOPIC,
                        response,
                    )),
                    Err(e) => failures.push(&addr, e),
                }
            }
            Err(failures.into_error())
        }
        .into_actor(self)
        .map(move |result, act, _ctx| {
            act.refreshing.remove(&topic);
            let (addr, data) = result?;
            act.namesrv.mark_good(&addr);
            match data {
                Some(data) => {
                    let route = Arc::new(TopicRoute::new(topic.clone(), data));
                    act.shared.set_route(&topic, Some(route.clone()));
                    Ok(route)
                }
                None => {
                    act.shared.set_route(&topic, None);
                    Err(Error::TopicRouteNotFound(topic))
                }
            }
        })
    }

    fn refresh_all(&mut self, ctx: &mut Context<Self>) {
        let topics: Vec<String> = self
            .shared
            .routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        for topic in topics {
            if !self.refreshing.insert(topic.clone()) {
                continue;
            }
            let refresh = self.fetch_route(topic.clone()).map(move |result, _act, _ctx| {
                if let Err(e) = result {
                    tracing::warn!(%topic, error = %e, "route refresh failed; keeping the cached route");
                }
            });
            ctx.spawn(refresh);
        }
    }
}

impl Actor for ClientInstance {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.myself = Some(ctx.address().downgrade());
        if self.shut_down {
            return;
        }
        // A client started and left before its actor first ran is started by the runtime's
        // own teardown (already stopping, with no runtime to arm a timer on): there is nothing
        // left to refresh for.
        if ctx.state() == ActorState::Stopping || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        // Timers are armed here so that a restarted instance re-arms them.
        ctx.run_interval(self.config.poll_name_server_interval, |act, ctx| {
            act.refresh_all(ctx)
        });
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        let connections = std::mem::take(
            &mut *self
                .shared
                .connections
                .write()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for conn in connections.values() {
            conn.do_send(connection::Close);
        }
    }
}

impl Supervised for ClientInstance {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        // Fetches under way were futures of the old context: their waiters are told so.
        self.refreshing.clear();
        self.route_waiters.clear();
        if !self.shut_down {
            tracing::warn!(client_id = %self.shared.client_id, "client instance failed; restarted");
        }
    }
}

impl ClientInstance {
    fn shut_down_error() -> Error {
        Error::Shutdown("the client instance was shut down".into())
    }
}

impl Handler<GetConnection> for ClientInstance {
    type Result = Result<Addr<Connection>>;

    fn handle(&mut self, msg: GetConnection, _ctx: &mut Self::Context) -> Self::Result {
        if self.shut_down {
            return Err(Self::shut_down_error());
        }
        Ok(self.connection(&msg.0))
    }
}

impl Handler<GetRoute> for ClientInstance {
    type Result = ResponseActFuture<Self, Result<Arc<TopicRoute>>>;

    fn handle(&mut self, msg: GetRoute, _ctx: &mut Self::Context) -> Self::Result {
        if self.shut_down {
            return Box::pin(fut::ready(Err(Self::shut_down_error())));
        }
        if !msg.refresh {
            if let Some(route) = self.shared.cached_route(&msg.topic) {
                return Box::pin(fut::ready(Ok(route)));
            }
        }
        if let Some(waiters) = self.route_waiters.get_mut(&msg.topic) {
            let (tx, rx) = oneshot::channel();
            waiters.push(tx);
            return Box::pin(
                async move {
                    rx.await
                        .unwrap_or_else(|_| Err(Error::Shutdown("client instance stopped".into())))
                }
                .into_actor(self),
            );
        }
        self.route_waiters.insert(msg.topic.clone(), Vec::new());
        let topic = msg.topic.clone();
        Box::pin(self.fetch_route(msg.topic).map(move |result, act, _ctx| {
            for waiter in act.route_waiters.remove(&topic).unwrap_or_default() {
                let _ = waiter.send(match &result {
                    Ok(route) => Ok(route.clone()),
                    Err(e) => Err(share_error(e)),
                });
            }
            result
        }))
    }
}

impl Handler<RegisterConsumer> for ClientInstance {
    type Result = Result<()>;

    fn handle(&mut self, msg: RegisterConsumer, _ctx: &mut Self::Context) -> Result<()> {
        if self.shut_down {
            return Err(Self::shut_down_error());
        }
        let registered = self.consumers.get(&msg.group);
        if registered.is_some_and(|handler| handler.upgrade().is_some()) {
            return Err(Error::Config {
                option: "consumer_group",
                value: msg.group,
                allowed: "a group not already consumed through this client instance".into(),
            });
        }
        self.consumers.insert(msg.group, msg.handler.downgrade());
        Ok(())
    }
}

impl Handler<UnregisterConsumer> for ClientInstance {
    type Result = ();

    fn handle(&mut self, msg: UnregisterConsumer, _ctx: &mut Self::Context) {
        self.consumers.remove(&msg.0);
    }
}

impl Handler<ServerRequest> for ClientInstance {
    type Result = ResponseFuture<Option<RemotingCommand>>;

    fn handle(&mut self, msg: ServerRequest, _ctx: &mut Self::Context) -> Self::Result {
        let group = msg
            .command
            .ext("consumerGroup")
            .or_else(|| msg.command.ext("group"))
            .unwrap_or_default()
            .to_owned();
        let code = msg.command.code;
        let Some(consumer) = self.consumers.get(&group).and_then(WeakRecipient::upgrade) else {
            tracing::debug!(code, %group, peer = %msg.peer, "server request for a group this client does not consume");
            let answer = RemotingCommand::response(
                response_code::SYSTEM_ERROR,
                Some(format!(
                    "The Consumer Group <{group}> not exist in this consumer"
                )),
            );
            return Box::pin(async move { Some(answer) });
        };
        Box::pin(async move {
            match consumer.send(msg).await {
                Ok(answer) => answer,
                Err(e) => Some(RemotingCommand::response(
                    response_code::SYSTEM_ERROR,
                    Some(format!("consumer of {group} unavailable: {e}")),
                )),
            }
        })
    }
}

impl Handler<Shutdown> for ClientInstance {
    type Result = ();

    fn handle(&mut self, _msg: Shutdown, ctx: &mut Self::Context) {
        self.shut_down = true;
        ctx.stop();
    }
}

/// A copy of a route-fetch error for the other callers that waited on the same fetch.
fn share_error(error: &Error) -> Error {
    match error {
        Error::TopicRouteNotFound(topic) => Error::TopicRouteNotFound(topic.clone()),
        other => Error::NameServerUnavailable {
            detail: other.to_string(),
            last: None,
        },
    }
}

/// Sends `command` on `conn` (the connection to `peer`) and waits for the response, whatever
/// its code; `hooks` run before the request goes and when its response arrives.
pub(crate) async fn call(
    conn: &Addr<Connection>,
    peer: &str,
    hooks: &RequestHooks,
    command: RemotingCommand,
    timeout: Duration,
) -> Result<RemotingCommand> {
    hooked(hooks, peer, command, |command| {
        connection::call_command(conn, peer, command, timeout)
    })
    .await
}

/// Runs `hooks` around `send`, which sends `command` to `peer` and waits for its response.
async fn hooked<F, Fut>(
    hooks: &RequestHooks,
    peer: &str,
    mut command: RemotingCommand,
    send: F,
) -> Result<RemotingCommand>
where
    F: FnOnce(RemotingCommand) -> Fut,
    Fut: std::future::Future<Output = Result<RemotingCommand>>,
{
    if hooks.is_empty() {
        return send(command).await;
    }
    hooks.before(peer, &mut command);
    let code = command.code;
    let response = send(command).await?;
    hooks.after(peer, code, &response);
    Ok(response)
}

/// A cheap, cloneable, `Send + Sync` handle to a client instance: the base layer.
///
/// Every producer and consumer kind runs on one; give the same `Client` to several of them
/// (`PushConsumer::builder().client(client.clone())`, `Producer::new(client.clone(), …)`) so they
/// share connections and routes. Its typed methods are the RPCs a consumer needs, for users who
/// want full control (the push consumer is built on exactly these).
///
/// ```no_run
/// # async fn demo() -> rocketmq_actor::Result<()> {
/// use rocketmq_actor::{Client, ClientConfig};
/// use rocketmq_actor::rpc::PullRequest;
/// let client = Client::start(ClientConfig::new("127.0.0.1:9876"))?;
/// for queue in client.fetch_subscribe_message_queues("TopicTest").await? {
///     let committed = client.query_consumer_offset("my-group", &queue).await?.unwrap_or(0);
///     let pulled = client.pull(&PullRequest::new("my-group", queue.clone(), committed)).await?;
///     println!("{queue}: {} messages", pulled.messages.len());
///     client.update_consumer_offset("my-group", &queue, pulled.next_begin_offset).await?;
/// }
/// client.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    addr: Addr<ClientInstance>,
    shared: Arc<ClientShared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("client_id", &self.shared.client_id)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Starts a client instance (on the current actix arbiter, or on the crate's background
    /// runtime thread when called outside an actix system). Fails on an invalid name-server
    /// list or client IP, or a TLS setup that cannot be used (an unreadable CA file…).
    pub fn start(config: ClientConfig) -> Result<Client> {
        let namesrv = NameServerList::parse(&config.namesrv_addr)?;
        #[cfg(feature = "tls")]
        let tls = config
            .tls
            .as_ref()
            .map(crate::tls::TlsConfig::connector)
            .transpose()?;
        let client_ip: IpAddr = config.client_ip.parse().map_err(|_| Error::Config {
            option: "client_ip",
            value: config.client_ip.clone(),
            allowed: "an IPv4 or IPv6 address".into(),
        })?;
        let instance_name = config.instance_name.clone().unwrap_or_else(|| {
            default_instance_name(
                std::process::id(),
                process_token(),
                INSTANCE_COUNTER.fetch_add(1, Ordering::Relaxed),
            )
        });
        let shared = Arc::new(ClientShared {
            client_id: format!("{}@{}", config.client_ip, instance_name),
            client_ip,
            request_timeout: config.request_timeout,
            connections: RwLock::new(HashMap::default()),
            routes: RwLock::new(HashMap::default()),
            hooks: RequestHooks::new(config.rpc_hooks.clone(), config.credentials.clone()),
            namesrv_addr: config.namesrv_addr.clone(),
        });
        let instance = ClientInstance {
            config,
            shared: shared.clone(),
            myself: None,
            consumers: HashMap::new(),
            shut_down: false,
            namesrv,
            refreshing: HashSet::new(),
            route_waiters: HashMap::new(),
            #[cfg(feature = "tls")]
            tls,
        };
        Ok(Client {
            addr: runtime::start_supervised(instance)?,
            shared,
        })
    }

    /// The client id brokers know this instance by (`ip@instance`).
    pub fn client_id(&self) -> &str {
        &self.shared.client_id
    }

    /// The IP of the client id, also written into the ids of the messages this client sends.
    pub fn client_ip(&self) -> IpAddr {
        self.shared.client_ip
    }

    /// The default RPC timeout.
    pub fn request_timeout(&self) -> Duration {
        self.shared.request_timeout
    }

    pub(crate) fn actor(&self) -> &Addr<ClientInstance> {
        &self.addr
    }

    /// The name-server list this client was started with, as configured.
    pub fn namesrv_addr(&self) -> &str {
        &self.shared.namesrv_addr
    }

    /// The route of `topic`, from the cache when present (no mailbox round trip).
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        if let Some(route) = self.shared.cached_route(topic) {
            return Ok(route);
        }
        // Boxed: the name-server round trip would otherwise enlarge every pull's future.
        Box::pin(self.get_route(topic, false)).await
    }

    /// The route of `topic`, fetched from the name servers now.
    pub async fn refresh_route(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        self.get_route(topic, true).await
    }

    /// The cached route of `topic`, if any, without asking anyone.
    pub fn cached_route(&self, topic: &str) -> Option<Arc<TopicRoute>> {
        self.shared.cached_route(topic)
    }

    /// Every broker address of every cached route: where a group member heartbeats (as Java
    /// heartbeats every broker its client instance knows).
    pub(crate) fn known_broker_addrs(&self) -> std::collections::BTreeSet<String> {
        let routes = self.shared.routes.read().unwrap_or_else(|e| e.into_inner());
        routes
            .values()
            .flat_map(|route| route.all_addrs().map(str::to_owned))
            .collect()
    }

    /// Puts a route the caller derived (the producer's auto-create route) into the cache, until
    /// the next refresh replaces or removes it.
    pub(crate) fn cache_route(&self, route: Arc<TopicRoute>) {
        let topic = route.topic.clone();
        self.shared.set_route(&topic, Some(route));
    }

    async fn get_route(&self, topic: &str, refresh: bool) -> Result<Arc<TopicRoute>> {
        self.addr
            .send(GetRoute {
                topic: topic.to_owned(),
                refresh,
            })
            .await?
    }

    /// The queues consumers of `topic` read (Java `fetchSubscribeMessageQueues`), asked of the
    /// name servers now.
    pub async fn fetch_subscribe_message_queues(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        let route = self.refresh_route(topic).await?;
        if route.consume_queues.is_empty() {
            return Err(Error::TopicRouteNotFound(format!(
                "{topic} (no readable queue)"
            )));
        }
        Ok(route.consume_queues.clone())
    }

    /// The connection to `addr`: from the shared cache, or opened by the client instance.
    pub(crate) async fn connection(&self, addr: &str) -> Result<Addr<Connection>> {
        if let Some(conn) = self.shared.cached_connection(addr) {
            return Ok(conn);
        }
        self.addr.send(GetConnection(addr.to_owned())).await?
    }

    /// Sends `frame` to `addr` and waits up to `timeout` for the response (any response code):
    /// the data path's request (sends and pulls), which no hook sees.
    pub(crate) async fn call_encoded(
        &self,
        addr: &str,
        frame: RequestFrame,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        let code = frame.code();
        let (reply, response) = tokio::sync::oneshot::channel();
        let request = connection::EncodedRequest {
            frame,
            reply,
            expiry: None,
        };
        self.enqueue(addr, request).await?;
        connection::await_reply(response, addr, code, timeout).await
    }

    /// Queues `frame` on the cached connection to `addr` if it is up and has room in its
    /// mailbox now, and returns where the answer will arrive; otherwise hands `frame` back, for
    /// [`Client::call_encoded`], which waits for the connection or the room. For a caller that
    /// waits for the answer its own way (a send, up to the deadline it has already set).
    pub(crate) fn try_enqueue_encoded(
        &self,
        addr: &str,
        frame: RequestFrame,
    ) -> std::result::Result<tokio::sync::oneshot::Receiver<Result<RemotingCommand>>, RequestFrame>
    {
        let (reply, response) = tokio::sync::oneshot::channel();
        let request = connection::EncodedRequest {
            frame,
            reply,
            expiry: None,
        };
        match self.shared.try_send_cached(addr, request) {
            Ok(()) => Ok(response),
            Err(request) => Err(request.frame),
        }
    }

    /// Queues `request` on the connection to `addr`: straight on the cached one when it is up
    /// and has room in its mailbox, and otherwise the way that can wait (opening the
    /// connection, or waiting for mailbox room, as [`connection::enqueue`] does).
    async fn enqueue<M>(&self, addr: &str, request: M) -> Result<()>
    where
        M: actix::Message<Result = ()> + Send + 'static,
        Connection: Handler<M>,
    {
        match self.shared.try_send_cached(addr, request) {
            Ok(()) => Ok(()),
            // Boxed: the rare path's futures would otherwise enlarge every request's future,
            // which callers move around (a send's is stored in whatever collects it).
            Err(request) => Box::pin(self.enqueue_opening(addr, request)).await,
        }
    }

    /// [`Client::enqueue`] when the cached connection cannot take `request` at once.
    async fn enqueue_opening<M>(&self, addr: &str, request: M) -> Result<()>
    where
        M: actix::Message<Result = ()> + Send + 'static,
        Connection: Handler<M>,
    {
        let conn = self.connection(addr).await?;
        connection::enqueue(&conn, addr, request).await
    }

    /// Sends `command` to `addr` and returns the response whatever its code: the escape hatch
    /// for admin requests this layer does not type.
    pub async fn request(
        &self,
        addr: &str,
        command: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        hooked(&self.shared.hooks, addr, command, |command| async move {
            let code = command.code;
            let (reply, response) = tokio::sync::oneshot::channel();
            self.enqueue(addr, connection::CommandRequest { command, reply })
                .await?;
            connection::await_reply(response, addr, code, timeout).await
        })
        .await
    }

    /// Sends `command` to `addr` and returns the response; a code other than SUCCESS is an
    /// [`Error::Broker`].
    pub async fn invoke(&self, addr: &str, command: RemotingCommand) -> Result<RemotingCommand> {
        let code = command.code;
        let response = self.request(addr, command, self.request_timeout()).await?;
        expect_success(addr, code, response)
    }

    /// Sends `command` to `addr` one-way (no response).
    pub async fn invoke_oneway(&self, addr: &str, mut command: RemotingCommand) -> Result<()> {
        let conn = self.connection(addr).await?;
        self.shared.hooks.before(addr, &mut command);
        conn.send(connection::Oneway { command }).await?
    }

    /// What runs around each request of this client (the producer asks whether anything does).
    pub(crate) fn request_hooks(&self) -> &RequestHooks {
        &self.shared.hooks
    }

    /// Closes every connection and stops the instance.
    pub async fn shutdown(&self) {
        let _ = self.addr.send(Shutdown).await;
    }
}

/// The address in `route` a pull of `request` goes to: the suggested broker, or the master
/// when the route lists no such slave.
fn pull_addr_in<'r>(route: &'r TopicRoute, request: &PullRequest) -> Result<&'r str> {
    let queue = &request.queue;
    route
        .pull_addr(&queue.broker_name, request.broker_id)
        .ok_or_else(|| {
            Error::TopicRouteNotFound(format!("{} on {}", queue.topic, queue.broker_name))
        })
}

/// The typed RPCs of the base layer.
impl Client {
    /// The master address of `queue`'s broker, where offsets, sends-back and locks go.
    pub async fn master_addr(&self, queue: &MessageQueue) -> Result<String> {
        let route = self.route(&queue.topic).await?;
        route
            .master_addr(&queue.broker_name)
            .map(str::to_owned)
            .ok_or_else(|| {
                Error::TopicRouteNotFound(format!("{} on {}", queue.topic, queue.broker_name))
            })
    }

    /// PULL_MESSAGE: pulls from the queue's broker (`request.broker_id`: the master, or the
    /// slave an earlier answer suggested, the master when the route lists no such slave),
    /// long-polling if the request says so, and re-filters by exact tag.
    pub async fn pull(&self, request: &PullRequest) -> Result<PullResult> {
        self.pull_raw(request).await?.decode(request)
    }

    /// [`Client::pull`] with the messages left in their wire form, for a consumer that buffers
    /// them and decodes each batch only when the application takes it.
    pub(crate) async fn pull_raw(&self, request: &PullRequest) -> Result<RawPullResult> {
        let route = self.route(&request.queue.topic).await?;
        let addr = pull_addr_in(&route, request)?;
        // Without hooks nobody needs the command as a value: it is encoded at once.
        let response = if self.shared.hooks.is_empty() {
            self.call_encoded(addr, request.to_frame()?, request.timeout)
                .await?
        } else {
            // Boxed: only clients with request hooks take this path.
            Box::pin(self.request(addr, request.to_command(), request.timeout)).await?
        };
        request.read_raw_response(addr, response)
    }

    /// Puts the pulls of `turn` (a puller's batch, emptied) on the wire without waiting, those
    /// to one broker connection as one message, with one route lookup per run of pulls of
    /// one topic: the consumer's pull path when the route and a connected connection are
    /// cached and no request hook must see the commands. Those that cannot go so are put in
    /// `wait`, for [`Client::send_pull`]; a pull whose waiter has gone is dropped, one that
    /// cannot be encoded is answered with the error. The connection fails each pull with a
    /// timeout at its expiry.
    pub(crate) fn try_send_pulls(
        &self,
        turn: &mut Vec<Pull>,
        batches: &mut PullBatches,
        wait: &mut Vec<Pull>,
    ) {
        if !self.shared.hooks.is_empty() {
            wait.append(turn);
            return;
        }
        let mut route: Option<Arc<TopicRoute>> = None;
        for pull in turn.drain(..) {
            if pull.reply.is_closed() {
                continue;
            }
            let queue = &pull.request.queue;
            if route.as_ref().is_none_or(|r| r.topic != queue.topic) {
                route = self.shared.cached_route(&queue.topic);
            }
            let Some(addr) = route
                .as_ref()
                .and_then(|r| r.pull_addr(&queue.broker_name, pull.request.broker_id))
            else {
                wait.push(pull);
                continue;
            };
            let Pull {
                request,
                reply,
                expiry,
            } = pull;
            match request.to_frame() {
                Ok(frame) => batches.add(
                    addr,
                    request,
                    connection::EncodedRequest {
                        frame,
                        reply,
                        expiry,
                    },
                ),
                Err(e) => {
                    let _ = reply.send(Err(e.into()));
                }
            }
        }
        for group in batches.groups.iter_mut().take(batches.used) {
            group.send(&self.shared, wait);
        }
        batches.used = 0;
    }

    /// [`Client::try_send_pulls`] the way that can wait: fetching the route, opening the
    /// connection, waiting for room in its mailbox, or going through the request hooks. The
    /// answer, or the error that kept the request from the broker, goes to `reply` (one that
    /// could not be queued drops it, which its waiter reads as a closed connection). Timed out
    /// at `expiry` by the connection, or through the hooks by the request's own timeout.
    pub(crate) async fn send_pull(
        &self,
        request: &PullRequest,
        reply: PullReply,
        expiry: Option<Expiry>,
    ) {
        let addr = match self
            .route(&request.queue.topic)
            .await
            .and_then(|route| pull_addr_in(&route, request).map(str::to_owned))
        {
            Ok(addr) => addr,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        if !self.shared.hooks.is_empty() {
            let answer = self
                .request(&addr, request.to_command(), request.timeout)
                .await;
            let _ = reply.send(answer);
            return;
        }
        let frame = match request.to_frame() {
            Ok(frame) => frame,
            Err(e) => {
                let _ = reply.send(Err(e.into()));
                return;
            }
        };
        // A request that cannot be queued is dropped with its reply, which its waiter reads as
        // a closed connection.
        let request = connection::EncodedRequest {
            frame,
            reply,
            expiry,
        };
        let _ = self.enqueue(&addr, request).await;
    }

    /// The address a pull of `request` goes to, for naming it in an error: the cached route's,
    /// or the broker's name when the route is gone.
    pub(crate) fn pull_peer(&self, request: &PullRequest) -> String {
        let queue = &request.queue;
        self.shared
            .cached_route(&queue.topic)
            .and_then(|route| {
                route
                    .pull_addr(&queue.broker_name, request.broker_id)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| queue.broker_name.clone())
    }

    async fn invoke_master(
        &self,
        queue: &MessageQueue,
        command: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        let addr = self.master_addr(queue).await?;
        let code = command.code;
        let response = self.request(&addr, command, timeout).await?;
        expect_success(&addr, code, response)
    }

    async fn offset_call(&self, queue: &MessageQueue, command: RemotingCommand) -> Result<i64> {
        let response = self
            .invoke_master(queue, command, self.request_timeout())
            .await?;
        Ok(response.decode_header::<OffsetResponseHeader>()?.offset)
    }

    /// The queue's end offset (one past its last message): GET_MAX_OFFSET.
    pub async fn max_offset(&self, queue: &MessageQueue) -> Result<i64> {
        let header = GetMaxOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            committed: true,
            bname: Some(queue.broker_name.clone()),
        };
        let command = RemotingCommand::request_with_header(request_code::GET_MAX_OFFSET, &header);
        self.offset_call(queue, command).await
    }

    /// The queue's smallest offset still stored: GET_MIN_OFFSET.
    pub async fn min_offset(&self, queue: &MessageQueue) -> Result<i64> {
        let header = GetMinOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            bname: Some(queue.broker_name.clone()),
        };
        let command = RemotingCommand::request_with_header(request_code::GET_MIN_OFFSET, &header);
        self.offset_call(queue, command).await
    }

    /// The offset of the first message stored at or after `timestamp_ms`:
    /// SEARCH_OFFSET_BY_TIMESTAMP.
    pub async fn search_offset(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<i64> {
        let header = SearchOffsetRequestHeader {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            timestamp: timestamp_ms,
            boundary_type: None,
            bname: Some(queue.broker_name.clone()),
        };
        let command =
            RemotingCommand::request_with_header(request_code::SEARCH_OFFSET_BY_TIMESTAMP, &header);
        self.offset_call(queue, command).await
    }

    /// The store time (epoch ms) of the queue's oldest message: GET_EARLIEST_MSG_STORETIME.
    pub async fn earliest_msg_store_time(&self, queue: &MessageQueue) -> Result<i64> {
        let header = GetEarliestMsgStoretimeRequestHeader {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            bname: Some(queue.broker_name.clone()),
        };
        let command =
            RemotingCommand::request_with_header(request_code::GET_EARLIEST_MSG_STORETIME, &header);
        let response = self
            .invoke_master(queue, command, self.request_timeout())
            .await?;
        Ok(response
            .decode_header::<GetEarliestMsgStoretimeResponseHeader>()?
            .timestamp)
    }

    /// The group's committed offset of `queue` (QUERY_CONSUMER_OFFSET): `None` when the broker
    /// has none stored for the group.
    pub async fn query_consumer_offset(
        &self,
        group: &str,
        queue: &MessageQueue,
    ) -> Result<Option<i64>> {
        self.query_consumer_offset_with(group, queue, false).await
    }

    /// QUERY_CONSUMER_OFFSET; with `zero_if_not_found` the broker may answer 0 for a group
    /// without a stored offset (its default, what Java's consumer asks for).
    pub(crate) async fn query_consumer_offset_with(
        &self,
        group: &str,
        queue: &MessageQueue,
        zero_if_not_found: bool,
    ) -> Result<Option<i64>> {
        let addr = self.master_addr(queue).await?;
        let command = query_offset_command(group, queue, zero_if_not_found);
        let response = self.request(&addr, command, self.request_timeout()).await?;
        match response.code {
            response_code::SUCCESS => Ok(Some(
                response
                    .decode_header::<QueryConsumerOffsetResponseHeader>()?
                    .offset,
            )),
            response_code::QUERY_NOT_FOUND => Ok(None),
            _ => Err(broker_error(
                &addr,
                request_code::QUERY_CONSUMER_OFFSET,
                response,
            )),
        }
    }

    /// Stores `offset` as the group's committed offset of `queue` and waits for the broker's
    /// answer (UPDATE_CONSUMER_OFFSET).
    pub async fn update_consumer_offset(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<()> {
        let command = update_offset_command(group, queue, offset);
        self.invoke_master(queue, command, self.request_timeout())
            .await?;
        Ok(())
    }

    /// Like [`Client::update_consumer_offset`], one-way (as Java's periodic persist).
    pub async fn update_consumer_offset_oneway(
        &self,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<()> {
        let addr = self.master_addr(queue).await?;
        self.invoke_oneway(&addr, update_offset_command(group, queue, offset))
            .await
    }

    /// The client ids of the group's members as a broker of `topic` knows them
    /// (GET_CONSUMER_LIST_BY_GROUP to the lowest master address of the topic's route, so every
    /// member asks the same broker). A broker that cannot be reached is passed over for the
    /// next master; when none answers, the route is read again (brokers may have come back on
    /// other addresses) and its masters are tried once more.
    pub async fn consumer_ids(&self, group: &str, topic: &str) -> Result<(String, Vec<String>)> {
        let mut route = self.route(topic).await?;
        let mut tried = std::collections::BTreeSet::new();
        let mut last_error = None;
        for refreshed in [false, true] {
            if refreshed {
                route = self.refresh_route(topic).await?;
            }
            let mut masters: Vec<&str> = route
                .data
                .broker_datas
                .iter()
                .filter_map(|b| b.master_addr())
                .collect();
            masters.sort_unstable();
            for addr in masters {
                if !tried.insert(addr.to_owned()) {
                    continue;
                }
                match self.invoke(addr, consumer_ids_command(group)).await {
                    Ok(response) => {
                        let members: ConsumerListBody =
                            decode_json(response.body.as_deref().unwrap_or_default())?;
                        return Ok((addr.to_owned(), members.consumer_id_list));
                    }
                    Err(e) if e.is_transport() => last_error = Some(e),
                    Err(e) => return Err(e),
                }
            }
            if last_error.is_none() {
                break;
            }
        }
        Err(last_error.unwrap_or_else(|| Error::TopicRouteNotFound(topic.to_owned())))
    }

    /// GET_CONSUMER_CONNECTION_LIST: the group's connected clients, its subscriptions, consume
    /// type, message model and start policy, as the masters of the group's retry topic
    /// (`%RETRY%<group>`, which every broker a member heartbeats creates) know them, merged over
    /// those brokers (a client is listed once, by its first connection; Java's admin asks one
    /// broker). Fails with [`Error::TopicRouteNotFound`] when no broker has the retry topic (the
    /// group never connected), and with the broker's CONSUMER_NOT_ONLINE error (or a transport
    /// error) when no broker lists a member now.
    pub async fn consumer_connections(&self, group: &str) -> Result<ConsumerConnection> {
        let route = self
            .refresh_route(&crate::consumer::retry::retry_topic(group))
            .await?;
        let mut merged: Option<ConsumerConnection> = None;
        let mut last_error = None;
        for addr in route
            .data
            .broker_datas
            .iter()
            .filter_map(|b| b.master_addr())
        {
            let header = GetConsumerConnectionListRequestHeader {
                consumer_group: group.to_owned(),
            };
            let command = RemotingCommand::request_with_header(
                request_code::GET_CONSUMER_CONNECTION_LIST,
                &header,
            );
            let answer: ConsumerConnection = match self.invoke(addr, command).await {
                Ok(response) => decode_json(response.body.as_deref().unwrap_or_default())?,
                Err(e) => {
                    last_error = Some(e);
                    continue;
                }
            };
            let Some(merged) = merged.as_mut() else {
                merged = Some(answer);
                continue;
            };
            for connection in answer.connection_set {
                if !merged
                    .connection_set
                    .iter()
                    .any(|c| c.client_id == connection.client_id)
                {
                    merged.connection_set.push(connection);
                }
            }
            for (topic, sub) in answer.subscription_table {
                match merged.subscription_table.get(&topic) {
                    Some(known) if known.sub_version >= sub.sub_version => {}
                    _ => {
                        merged.subscription_table.insert(topic, sub);
                    }
                }
            }
        }
        merged.ok_or_else(|| {
            last_error.unwrap_or_else(|| Error::TopicRouteNotFound(format!("%RETRY%{group}")))
        })
    }

    /// The subscriptions of `selectors` (topic → selector) at `sub_version`, each SQL92 one
    /// checked with the brokers by [`Client::check_subscription`] first.
    pub(crate) async fn checked_subscriptions(
        &self,
        group: &str,
        selectors: &BTreeMap<String, Selector>,
        sub_version: i64,
        namespace: Option<&str>,
    ) -> Result<BTreeMap<String, Arc<Subscription>>> {
        let mut subscriptions = BTreeMap::new();
        for (topic, selector) in selectors {
            let subscription = Subscription::new(selector.clone(), sub_version);
            self.check_subscription(group, topic, &subscription, namespace)
                .await?;
            subscriptions.insert(topic.clone(), Arc::new(subscription));
        }
        Ok(subscriptions)
    }

    /// CHECK_CLIENT_CONFIG of a SQL92 subscription at every master serving `topic`, before a
    /// consumer starts (Java's `checkClientInBroker` asks one of them). A broker that
    /// refuses fails the start with [`Error::SelectorRefused`], saying how to switch property
    /// filtering on; a tag subscription, a topic without a route yet and an unreachable broker
    /// are not checked (the pulls report those).
    async fn check_subscription(
        &self,
        group: &str,
        topic: &str,
        subscription: &Subscription,
        namespace: Option<&str>,
    ) -> Result<()> {
        if !subscription.selector.is_sql() {
            return Ok(());
        }
        let Ok(route) = self.route(topic).await else {
            return Ok(());
        };
        let body = CheckClientRequestBody {
            client_id: self.client_id().to_owned(),
            group: group.to_owned(),
            subscription_data: Some(subscription.to_wire(topic)),
            namespace: namespace.map(str::to_owned),
        };
        for broker in &route.data.broker_datas {
            let Some(addr) = broker.master_addr() else {
                continue;
            };
            let command = RemotingCommand::request(request_code::CHECK_CLIENT_CONFIG)
                .with_body(encode_json(&body));
            let response = match self.request(addr, command, self.request_timeout()).await {
                Ok(response) => response,
                Err(error) => {
                    tracing::warn!(%error, broker = %broker.broker_name, %topic,
                        "could not ask the broker whether it filters by SQL92");
                    continue;
                }
            };
            if response.code == response_code::SUCCESS {
                continue;
            }
            let remark = response.remark.unwrap_or_default();
            let reason = selector_refusal_reason(response.code, &remark);
            return Err(Error::SelectorRefused {
                broker: broker.broker_name.clone(),
                group: group.to_owned(),
                topic: topic.to_owned(),
                expression: subscription.selector.expression().to_owned(),
                reason,
            });
        }
        Ok(())
    }

    /// HEART_BEAT to the broker at `addr`.
    pub async fn heartbeat(&self, addr: &str, data: &HeartbeatData) -> Result<()> {
        self.invoke(addr, heartbeat_command(data)).await?;
        Ok(())
    }

    /// UNREGISTER_CLIENT at the broker at `addr`, for a producer group, a consumer group or both.
    pub async fn unregister_client(
        &self,
        addr: &str,
        producer_group: Option<&str>,
        consumer_group: Option<&str>,
    ) -> Result<()> {
        let command = unregister_client_command(self.client_id(), producer_group, consumer_group);
        self.invoke(addr, command).await?;
        Ok(())
    }

    /// LOCK_BATCH_MQ: asks the brokers for the group's locks on `queues` (one request per
    /// broker) and returns the queues now locked by this client.
    pub async fn lock_batch(
        &self,
        group: &str,
        queues: &[MessageQueue],
        timeout: Duration,
    ) -> Result<Vec<MessageQueue>> {
        let mut locked = Vec::new();
        for (broker_queues, addr) in self.by_master(queues).await? {
            let command = lock_batch_command(true, group, self.client_id(), &broker_queues);
            let response = self.request(&addr, command, timeout).await?;
            let response = expect_success(&addr, request_code::LOCK_BATCH_MQ, response)?;
            let granted: LockBatchResponseBody =
                decode_json(response.body.as_deref().unwrap_or_default())?;
            locked.extend(granted.lock_ok_mq_set);
        }
        Ok(locked)
    }

    /// UNLOCK_BATCH_MQ: releases the group's locks on `queues` held by this client.
    pub async fn unlock_batch(
        &self,
        group: &str,
        queues: &[MessageQueue],
        timeout: Duration,
    ) -> Result<()> {
        for (broker_queues, addr) in self.by_master(queues).await? {
            let command = lock_batch_command(false, group, self.client_id(), &broker_queues);
            let response = self.request(&addr, command, timeout).await?;
            expect_success(&addr, request_code::UNLOCK_BATCH_MQ, response)?;
        }
        Ok(())
    }

    /// `queues` grouped by their broker's master address.
    async fn by_master(&self, queues: &[MessageQueue]) -> Result<Vec<(Vec<MessageQueue>, String)>> {
        let mut groups: Vec<(Vec<MessageQueue>, String)> = Vec::new();
        for queue in queues {
            let addr = self.master_addr(queue).await?;
            match groups.iter_mut().find(|(_, a)| *a == addr) {
                Some((group, _)) => group.push(queue.clone()),
                None => groups.push((vec![queue.clone()], addr)),
            }
        }
        Ok(groups)
    }

    /// CONSUMER_SEND_MSG_BACK: hands `message` (pulled from `queue`) back to its broker for
    /// redelivery through the group's retry topic after `delay_level` (0 = by reconsume count),
    /// or to the dead-letter queue once it was consumed `max_reconsume_times` times.
    pub async fn send_message_back(
        &self,
        group: &str,
        queue: &MessageQueue,
        message: &MessageExt,
        delay_level: i32,
        max_reconsume_times: i32,
        timeout: Duration,
    ) -> Result<()> {
        let command = send_back_command(group, queue, message, delay_level, max_reconsume_times);
        self.invoke_master(queue, command, timeout).await?;
        Ok(())
    }

    /// Resets `group`'s offsets of `topic` to the first message stored at or after
    /// `timestamp_ms` (`-1`: the end of each queue), as Java's admin `resetOffsetByTimestamp`:
    /// INVOKE_BROKER_TO_RESET_OFFSET to the master of every broker of the topic. A broker
    /// resets its stored offsets itself (RocketMQ 5 and rocketmq-rust: the group's consumers
    /// see the new offset at their next pull) or tells the group's live clients
    /// (RESET_CONSUMER_CLIENT_OFFSET, RocketMQ 4 and the embedded broker); when it answers
    /// that no client is online, the offsets are written directly (UPDATE_CONSUMER_OFFSET).
    /// Without `force` an offset only moves back. Returns each queue's new offset.
    pub async fn reset_offset_by_timestamp(
        &self,
        group: &str,
        topic: &str,
        timestamp_ms: i64,
        force: bool,
    ) -> Result<Vec<(MessageQueue, i64)>> {
        let route = self.refresh_route(topic).await?;
        let mut table = Vec::new();
        for broker in &route.data.broker_datas {
            let Some(addr) = broker.master_addr() else {
                continue;
            };
            let header = ResetOffsetRequestHeader {
                topic: topic.to_owned(),
                group: group.to_owned(),
                queue_id: -1,
                // -1 means "no explicit offset" (Java sends it so).
                offset: Some(-1),
                timestamp: timestamp_ms,
                is_force: force,
            };
            let command = RemotingCommand::request_with_header(
                request_code::INVOKE_BROKER_TO_RESET_OFFSET,
                &header,
            );
            let response = self.request(addr, command, self.request_timeout()).await?;
            match response.code {
                response_code::SUCCESS => {
                    let body =
                        ResetOffsetBody::decode(response.body.as_deref().unwrap_or_default())?;
                    table.extend(body.offset_table);
                }
                response_code::CONSUMER_NOT_ONLINE => {
                    let queues: Vec<MessageQueue> = route
                        .consume_queues
                        .iter()
                        .filter(|q| q.broker_name == broker.broker_name)
                        .cloned()
                        .collect();
                    for queue in queues {
                        let target = if timestamp_ms < 0 {
                            self.max_offset(&queue).await?
                        } else {
                            self.search_offset(&queue, timestamp_ms).await?
                        };
                        let current = self.query_consumer_offset(group, &queue).await?;
                        let offset = match current {
                            Some(current) if !force && target >= current => current,
                            _ => {
                                self.update_consumer_offset(group, &queue, target).await?;
                                target
                            }
                        };
                        table.push((queue, offset));
                    }
                }
                _ => {
                    return Err(broker_error(
                        addr,
                        request_code::INVOKE_BROKER_TO_RESET_OFFSET,
                        response,
                    ))
                }
            }
        }
        table.sort();
        Ok(table)
    }

    /// VIEW_MESSAGE_BY_ID: the stored message an offset message id (`offset_msg_id` of a send
    /// result) points to, read from the broker that stored it.
    pub async fn view_message(&self, offset_msg_id: &str) -> Result<MessageExt> {
        let id = decode_offset_msg_id(offset_msg_id)?;
        let addr = id.store_host.to_string();
        let command = RemotingCommand::request_with_header(
            request_code::VIEW_MESSAGE_BY_ID,
            &ViewMessageRequestHeader {
                offset: id.commit_log_offset,
            },
        );
        let response = self.invoke(&addr, command).await?;
        decode_messages(response.body.unwrap_or_default())?
            .into_iter()
            .next()
            .ok_or_else(|| {
                Error::Protocol(crate::error::ProtocolError::InvalidMessage(format!(
                    "{addr} answered VIEW_MESSAGE_BY_ID for {offset_msg_id} without a message"
                )))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Client>();
    }

    #[test]
    fn a_bad_client_ip_is_a_config_error() {
        let mut config = ClientConfig::new("127.0.0.1:9876");
        config.client_ip = "not-an-ip".into();
        match Client::start(config) {
            Err(Error::Config { option, .. }) => assert_eq!(option, "client_ip"),
            other => panic!("expected a config error, got {other:?}"),
        }
    }
}
