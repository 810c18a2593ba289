//! The client instance: the one actor per process-level client that every producer and consumer
//! shares. It owns the connections (one per remote address), the name-server list with failover
//! and the topic route cache, refreshed every `poll_name_server_interval`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::actors::connection::{
    self, Connection, ConnectionConfig, RegisterHandler, ServerRequest,
};
use crate::error::{Error, Result};
use crate::message::MessageQueue;
use crate::protocol::body::{decode_json, TopicRouteData};
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::header::{
    GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader, GetRouteInfoRequestHeader,
    OffsetResponseHeader, SearchOffsetRequestHeader,
};
use crate::protocol::RemotingCommand;
use crate::route::{NameServerList, TopicRoute};

/// Settings shared by everything that uses one client instance.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Name-server addresses, `;`-separated (`127.0.0.1:9876;127.0.0.1:9877`).
    pub namesrv_addr: String,
    /// The IP put into the client id (Java: the first non-loopback address).
    pub client_ip: String,
    /// Instance name; the client id is `client_ip@instance_name`. Default: `pid#counter`,
    /// unique per client instance in the process so two consumers never share an id.
    pub instance_name: Option<String>,
    /// Timeout of ordinary RPCs (route look-ups, offset queries…).
    pub request_timeout: Duration,
    /// How often cached routes are refreshed.
    pub poll_name_server_interval: Duration,
    /// Connection tuning.
    pub connection: ConnectionConfig,
}

impl ClientConfig {
    /// A configuration pointing at the given name servers, other values at their defaults.
    pub fn new(namesrv_addr: impl Into<String>) -> Self {
        ClientConfig {
            namesrv_addr: namesrv_addr.into(),
            client_ip: "127.0.0.1".into(),
            instance_name: None,
            request_timeout: Duration::from_secs(3),
            poll_name_server_interval: Duration::from_secs(30),
            connection: ConnectionConfig::default(),
        }
    }
}

static INSTANCE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Returns the connection actor for a remote address, creating it on first use.
#[derive(Message)]
#[rtype(result = "Addr<Connection>")]
pub struct GetConnection(pub String);

/// Returns the route of a topic: from the cache, or from the name servers when absent or when
/// `refresh` is set.
#[derive(Message)]
#[rtype(result = "Result<Arc<TopicRoute>>")]
pub struct GetRoute {
    /// The topic.
    pub topic: String,
    /// Skip the cache.
    pub refresh: bool,
}

/// Returns the client id.
#[derive(Message)]
#[rtype(result = "String")]
pub struct GetClientId;

/// Closes every connection and stops the instance.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// Routes requests that brokers send to this client (NOTIFY_CONSUMER_IDS_CHANGED,
/// RESET_CONSUMER_CLIENT_OFFSET, GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY) to the
/// consumer of the group they name. One consumer per group per client instance: brokers know
/// consumers by client id, so two of one group would be indistinguishable.
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub struct RegisterConsumer {
    /// The consumer group.
    pub group: String,
    /// Who answers the group's server requests.
    pub handler: Recipient<ServerRequest>,
}

/// Removes a consumer registered with [`RegisterConsumer`].
#[derive(Message)]
#[rtype(result = "()")]
pub struct UnregisterConsumer(pub String);

/// The client instance actor. Use it through [`Client`].
pub struct ClientInstance {
    config: ClientConfig,
    myself: Option<Addr<ClientInstance>>,
    consumers: HashMap<String, Recipient<ServerRequest>>,
    client_id: String,
    namesrv: NameServerList,
    connections: HashMap<String, Addr<Connection>>,
    routes: HashMap<String, Arc<TopicRoute>>,
    refreshing: HashSet<String>,
    /// Callers waiting for a route fetch already under way, by topic: one name-server request
    /// serves them all, however many sends or queues ask at once.
    route_waiters: HashMap<String, Vec<oneshot::Sender<Result<Arc<TopicRoute>>>>>,
}

impl ClientInstance {
    fn connection(&mut self, addr: &str) -> Addr<Connection> {
        if let Some(conn) = self.connections.get(addr) {
            if conn.connected() {
                return conn.clone();
            }
        }
        let conn = Connection::with_config(addr, self.config.connection.clone()).start();
        if let Some(myself) = &self.myself {
            // Registration is a control message on a fresh actor: it cannot be refused.
            conn.do_send(RegisterHandler {
                code: None,
                handler: myself.clone().recipient(),
            });
        }
        self.connections.insert(addr.to_owned(), conn.clone());
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
        async move {
            let mut failures = Vec::new();
            for (addr, conn) in attempts {
                let header = GetRouteInfoRequestHeader {
                    topic: query_topic.clone(),
                    ..Default::default()
                };
                let command = RemotingCommand::request_with_header(
                    request_code::GET_ROUTEINFO_BY_TOPIC,
                    &header,
                );
                match call(&conn, command, timeout).await {
                    Ok(response) if response.code == response_code::SUCCESS => {
                        let body = response.body.unwrap_or_default();
                        return match decode_json::<TopicRouteData>(&body) {
                            Ok(data) => Ok((addr, Some(data))),
                            Err(e) => Err(Error::Protocol(e)),
                        };
                    }
                    Ok(response) if response.code == response_code::TOPIC_NOT_EXIST => {
                        return Ok((addr, None));
                    }
                    Ok(response) => failures.push(format!(
                        "{addr}: code {} {}",
                        response.code,
                        response.remark.unwrap_or_default()
                    )),
                    Err(e) => failures.push(format!("{addr}: {e}")),
                }
            }
            Err(Error::NameServerUnavailable(failures.join("; ")))
        }
        .into_actor(self)
        .map(move |result, act, _ctx| {
            act.refreshing.remove(&topic);
            let (addr, data) = result?;
            act.namesrv.mark_good(&addr);
            match data {
                Some(data) => {
                    let route = Arc::new(TopicRoute::new(topic.clone(), data));
                    act.routes.insert(topic, route.clone());
                    Ok(route)
                }
                None => {
                    act.routes.remove(&topic);
                    Err(Error::TopicRouteNotFound(topic))
                }
            }
        })
    }

    fn refresh_all(&mut self, ctx: &mut Context<Self>) {
        let topics: Vec<String> = self.routes.keys().cloned().collect();
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
        self.myself = Some(ctx.address());
        // Timers are armed here so that a restarted instance re-arms them.
        ctx.run_interval(self.config.poll_name_server_interval, |act, ctx| {
            act.refresh_all(ctx)
        });
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        for conn in self.connections.values() {
            conn.do_send(connection::Close);
        }
    }
}

impl Handler<GetConnection> for ClientInstance {
    type Result = MessageResult<GetConnection>;

    fn handle(&mut self, msg: GetConnection, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.connection(&msg.0))
    }
}

impl Handler<GetRoute> for ClientInstance {
    type Result = ResponseActFuture<Self, Result<Arc<TopicRoute>>>;

    fn handle(&mut self, msg: GetRoute, _ctx: &mut Self::Context) -> Self::Result {
        if !msg.refresh {
            if let Some(route) = self.routes.get(&msg.topic) {
                return Box::pin(fut::ready(Ok(route.clone())));
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
        if self.consumers.contains_key(&msg.group) {
            return Err(Error::Config {
                option: "consumer_group",
                value: msg.group,
                allowed: "a group not already consumed through this client instance".into(),
            });
        }
        self.consumers.insert(msg.group, msg.handler);
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
        let Some(consumer) = self.consumers.get(&group).cloned() else {
            tracing::debug!(code, %group, "server request for a group this client does not consume");
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

impl Handler<GetClientId> for ClientInstance {
    type Result = String;

    fn handle(&mut self, _msg: GetClientId, _ctx: &mut Self::Context) -> String {
        self.client_id.clone()
    }
}

impl Handler<Shutdown> for ClientInstance {
    type Result = ();

    fn handle(&mut self, _msg: Shutdown, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// A copy of a route-fetch error for the other callers that waited on the same fetch.
fn share_error(error: &Error) -> Error {
    match error {
        Error::TopicRouteNotFound(topic) => Error::TopicRouteNotFound(topic.clone()),
        other => Error::NameServerUnavailable(other.to_string()),
    }
}

/// Sends `command` on `conn` and waits for the response.
pub async fn call(
    conn: &Addr<Connection>,
    command: RemotingCommand,
    timeout: Duration,
) -> Result<RemotingCommand> {
    conn.send(connection::Request { command, timeout })
        .await
        .map_err(|e| Error::Shutdown(format!("connection actor: {e}")))?
}

/// Like [`call`], but a response code other than SUCCESS becomes [`Error::Broker`].
pub async fn call_ok(
    conn: &Addr<Connection>,
    peer: &str,
    command: RemotingCommand,
    timeout: Duration,
) -> Result<RemotingCommand> {
    let response = call(conn, command, timeout).await?;
    if response.code == response_code::SUCCESS {
        Ok(response)
    } else {
        Err(Error::Broker {
            peer: peer.to_owned(),
            code: response.code,
            remark: response.remark.unwrap_or_default(),
        })
    }
}

/// A cheap, cloneable handle to a client instance.
///
/// ```no_run
/// # async fn demo() -> rocketmq_actor::Result<()> {
/// use rocketmq_actor::actors::client::{Client, ClientConfig};
/// let client = Client::start(ClientConfig::new("127.0.0.1:9876"))?;
/// let route = client.route("TopicTest").await?;
/// println!("{} consume queues", route.consume_queues.len());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    addr: Addr<ClientInstance>,
    client_id: Arc<str>,
    request_timeout: Duration,
}

impl Client {
    /// Starts a client instance on the current actix arbiter. Fails on an invalid name-server
    /// list.
    pub fn start(config: ClientConfig) -> Result<Client> {
        let namesrv = NameServerList::parse(&config.namesrv_addr)?;
        let instance_name = config.instance_name.clone().unwrap_or_else(|| {
            format!(
                "{}#{}",
                std::process::id(),
                INSTANCE_COUNTER.fetch_add(1, Ordering::Relaxed)
            )
        });
        let client_id = format!("{}@{}", config.client_ip, instance_name);
        let request_timeout = config.request_timeout;
        let instance = ClientInstance {
            config,
            myself: None,
            consumers: HashMap::new(),
            client_id: client_id.clone(),
            namesrv,
            connections: HashMap::new(),
            routes: HashMap::new(),
            refreshing: HashSet::new(),
            route_waiters: HashMap::new(),
        };
        Ok(Client {
            addr: instance.start(),
            client_id: client_id.into(),
            request_timeout,
        })
    }

    /// The client id brokers know this instance by.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The default RPC timeout.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The actor behind the handle.
    pub fn actor(&self) -> &Addr<ClientInstance> {
        &self.addr
    }

    /// The route of `topic`, from the cache when present.
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        self.get_route(topic, false).await
    }

    /// The route of `topic`, fetched from the name servers now.
    pub async fn refresh_route(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        self.get_route(topic, true).await
    }

    async fn get_route(&self, topic: &str, refresh: bool) -> Result<Arc<TopicRoute>> {
        self.addr
            .send(GetRoute {
                topic: topic.to_owned(),
                refresh,
            })
            .await
            .map_err(|e| Error::Shutdown(format!("client instance: {e}")))?
    }

    /// The connection to `addr`.
    pub async fn connection(&self, addr: &str) -> Result<Addr<Connection>> {
        self.addr
            .send(GetConnection(addr.to_owned()))
            .await
            .map_err(|e| Error::Shutdown(format!("client instance: {e}")))
    }

    /// Sends `command` to `addr` and returns the response, failing on a non-SUCCESS code.
    pub async fn invoke(&self, addr: &str, command: RemotingCommand) -> Result<RemotingCommand> {
        let conn = self.connection(addr).await?;
        call_ok(&conn, addr, command, self.request_timeout).await
    }

    /// Sends `command` to `addr` one-way.
    pub async fn invoke_oneway(&self, addr: &str, command: RemotingCommand) -> Result<()> {
        let conn = self.connection(addr).await?;
        conn.send(connection::Oneway { command })
            .await
            .map_err(|e| Error::Shutdown(format!("connection actor: {e}")))?
    }

    /// Closes every connection and stops the instance.
    pub async fn shutdown(&self) {
        let _ = self.addr.send(Shutdown).await;
    }
}

/// Offset look-ups on the master of a queue's broker, shared by every consumer kind.
impl Client {
    /// The address and connection of the master of `queue`'s broker, where offsets, sends-back
    /// and locks go.
    pub async fn master_connection(
        &self,
        queue: &MessageQueue,
    ) -> Result<(String, Addr<Connection>)> {
        let route = self.route(&queue.topic).await?;
        let addr = route
            .master_addr(&queue.broker_name)
            .ok_or_else(|| {
                Error::TopicRouteNotFound(format!("{} on {}", queue.topic, queue.broker_name))
            })?
            .to_owned();
        let conn = self.connection(&addr).await?;
        Ok((addr, conn))
    }

    async fn offset_call(&self, queue: &MessageQueue, command: RemotingCommand) -> Result<i64> {
        let (addr, conn) = self.master_connection(queue).await?;
        let response = call_ok(&conn, &addr, command, self.request_timeout).await?;
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
}
