//! The embedded RocketMQ-compatible cluster: a name server and N brokers on loopback, speaking
//! the same remoting protocol as a real one, so the client, its examples and tests run with
//! nothing installed (a test double in the spirit of librdkafka's mock cluster).
//!
//! With one broker a single port answers both name-server and broker requests; with more, the
//! name server has its own port and each broker (`broker-a`, `broker-b`, …) listens on an
//! ephemeral port of the same interface.
//!
//! ```no_run
//! # async fn demo() -> rocketmq_actor::Result<()> {
//! use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
//! let cluster = EmbeddedCluster::start(EmbeddedConfig::default()).await?;
//! println!("name server at {}", cluster.namesrv_addr());
//! cluster.shutdown().await;
//! # Ok(()) }
//! ```

pub mod broker_actor;
pub mod listener;
pub mod name_server;
pub mod persistence;
pub mod session;

use crate::broker::acl::AclConfig;
use crate::broker::schedule::DelayLevels;
use crate::broker::store::TopicConfig;
use crate::broker::{Action, BrokerConfig, BrokerCore, Fault};
use crate::error::{Error, RequestCode, ResponseCode, Result};
use crate::message::MessageQueue;
use crate::protocol::codes::request_code;
use crate::protocol::RemotingCommand;
use actix::prelude::*;
use broker_actor::{
    AttachListener, BrokerActor, CallClient, ClientCallStart, DropConnections, StopBroker,
    StopServing, WithCore,
};
use listener::{ListenerActor, ListenerTls, StopListener};
use name_server::{NameServerActor, StopNameServer};
use persistence::DataDir;
use session::SessionRoutes;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::TcpListener;

/// Configuration of an [`EmbeddedCluster`].
#[derive(Clone, Debug)]
pub struct EmbeddedConfig {
    /// Name-server address (and, with one broker, the broker's too); port 0 = ephemeral.
    pub listen: SocketAddr,
    /// Number of brokers: 1 = one shared port, more = one port each.
    pub brokers: usize,
    /// Queue count of auto-created topics (the TBW102 template size).
    pub queues: i32,
    /// Keep messages and offsets in this directory (one sub-directory per broker).
    pub data_dir: Option<PathBuf>,
    /// Queue lock lifetime without renewal.
    pub lock_expiry: Duration,
    /// Idle time after which a client channel is dropped.
    pub channel_expiry: Duration,
    /// Delay levels (level 1 first); `None` = the standard 18 levels.
    pub delay_levels: Option<Vec<Duration>>,
    /// Multiplies every delay level (e.g. 0.001 makes retries a thousand times faster).
    pub delay_scale: f64,
    /// Default max reconsume times of a group.
    pub max_reconsume_times: i32,
    /// Cluster name announced in routes and stamped on messages.
    pub cluster_name: String,
    /// Create topics on first send.
    pub auto_create_topic: bool,
    /// How often brokers run timers (long-poll expiry, delayed messages, idle channels).
    pub tick_interval: Duration,
    /// A client whose unread responses exceed this many bytes is disconnected.
    pub max_outbound_bytes: usize,
    /// Bytes waiting for all clients together above which clients holding more than their fair
    /// share (4 MiB, what a healthy client may always have waiting) are disconnected.
    pub max_total_outbound_bytes: usize,
    /// ACL mode (the accounts of a Java broker's `plain_acl.yml`, see [`AclConfig`]): the
    /// brokers check every request's signature and permissions and refuse with NO_PERMISSION.
    /// The name server stays unchecked, as Java's. `None`: no checks.
    pub acl: Option<AclConfig>,
    /// Filter by SQL92 (`enablePropertyFilter`). On by default here (a real broker has it
    /// off by default); off, SQL92 subscriptions are refused as such a broker refuses them.
    pub enable_property_filter: bool,
    /// Serve TLS on every port (name server and brokers), permissive or enforcing, with a
    /// given or a generated certificate (feature `tls`); `None`: plaintext only.
    #[cfg(feature = "tls")]
    pub tls: Option<crate::tls::ServerTlsConfig>,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9876)),
            brokers: 1,
            queues: 8,
            data_dir: None,
            lock_expiry: Duration::from_secs(60),
            channel_expiry: Duration::from_secs(120),
            delay_levels: None,
            delay_scale: 1.0,
            max_reconsume_times: 16,
            cluster_name: "DefaultCluster".into(),
            auto_create_topic: true,
            tick_interval: Duration::from_millis(10),
            max_outbound_bytes: session::DEFAULT_MAX_OUTBOUND_BYTES,
            max_total_outbound_bytes: session::DEFAULT_MAX_TOTAL_OUTBOUND_BYTES,
            acl: None,
            enable_property_filter: true,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

impl EmbeddedConfig {
    /// A config on an ephemeral loopback port (what tests want).
    pub fn ephemeral() -> Self {
        EmbeddedConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..EmbeddedConfig::default()
        }
    }

    fn broker_config(&self, index: usize, store_host: SocketAddr) -> BrokerConfig {
        let levels = match &self.delay_levels {
            Some(levels) => DelayLevels::from_durations(levels),
            None => DelayLevels::default(),
        };
        let levels = if (self.delay_scale - 1.0).abs() > f64::EPSILON {
            levels.scaled(self.delay_scale)
        } else {
            levels
        };
        BrokerConfig {
            broker_name: broker_name(index),
            cluster_name: self.cluster_name.clone(),
            store_host,
            default_queues: self.queues.max(1),
            auto_create_topic: self.auto_create_topic,
            channel_expiry_ms: duration_ms(self.channel_expiry),
            lock_expiry_ms: duration_ms(self.lock_expiry),
            delay_levels: levels,
            retry_max_times: self.max_reconsume_times,
            acl: self.acl.clone(),
            enable_property_filter: self.enable_property_filter,
            ..BrokerConfig::default()
        }
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `broker-a`, `broker-b`, …, `broker-z`, then `broker-26`, ….
pub fn broker_name(index: usize) -> String {
    match u8::try_from(index) {
        Ok(i) if i < 26 => format!("broker-{}", char::from(b'a' + i)),
        _ => format!("broker-{index}"),
    }
}

struct BrokerHandle {
    name: String,
    addr: SocketAddr,
    actor: Addr<BrokerActor>,
    /// Whether this broker shares the name server's port.
    shared_port: bool,
}

/// A running embedded cluster: a name server and brokers on loopback ports, speaking the
/// RocketMQ protocol. Started from any async runtime; its actors run on the caller's actix
/// arbiter, or on the crate's runtime thread outside an actix system.
pub struct EmbeddedCluster {
    namesrv_addr: SocketAddr,
    max_outbound_bytes: usize,
    budget: session::OutboundBudget,
    name_server: Addr<NameServerActor>,
    namesrv_listener: Option<Addr<ListenerActor>>,
    brokers: Vec<BrokerHandle>,
    /// TLS on every port, kept for the listeners of restarted brokers.
    tls: Option<ListenerTls>,
    /// The CA of a generated certificate (PEM), for clients to trust.
    #[cfg(feature = "tls")]
    tls_ca_pem: Option<String>,
}

fn bind_error(addr: SocketAddr, e: std::io::Error) -> Error {
    Error::Listen {
        addr: addr.to_string(),
        source: e,
    }
}

impl EmbeddedCluster {
    /// Binds the ports and starts the name server and brokers (on the current arbiter inside an
    /// actix system, else on the crate's runtime thread).
    pub async fn start(config: EmbeddedConfig) -> Result<EmbeddedCluster> {
        crate::actors::runtime::run_on_actix(move || Self::start_here(config)).await?
    }

    async fn start_here(config: EmbeddedConfig) -> Result<EmbeddedCluster> {
        let brokers_wanted = config.brokers.max(1);
        #[cfg(feature = "tls")]
        let (tls, tls_ca_pem) = match &config.tls {
            Some(tls) => {
                let ip = config.listen.ip();
                let extra = if ip.is_unspecified() || ip.is_loopback() {
                    Vec::new()
                } else {
                    vec![ip.to_string()]
                };
                let (server, ca_pem) = tls.build(&extra)?;
                let listener_tls = ListenerTls {
                    mode: tls.mode,
                    acceptor: tokio_rustls::TlsAcceptor::from(server),
                };
                (Some(listener_tls), ca_pem)
            }
            None => (None, None),
        };
        #[cfg(not(feature = "tls"))]
        let tls: Option<ListenerTls> = None;
        let name_server = NameServerActor::default().start();
        let ns_listener = TcpListener::bind(config.listen)
            .await
            .map_err(|e| bind_error(config.listen, e))?;
        let namesrv_addr = ns_listener.local_addr().map_err(Error::Io)?;
        let mut brokers = Vec::new();
        let budget = session::OutboundBudget::new(config.max_total_outbound_bytes);
        let mut namesrv_listener = None;
        let mut shared = Some(ns_listener);
        for index in 0..brokers_wanted {
            let (listener, shared_port) = match (brokers_wanted, shared.take()) {
                (1, Some(l)) => (l, true),
                (_, other) => {
                    shared = other;
                    let any = SocketAddr::new(config.listen.ip(), 0);
                    let l = TcpListener::bind(any)
                        .await
                        .map_err(|e| bind_error(any, e))?;
                    (l, false)
                }
            };
            let addr = listener.local_addr().map_err(Error::Io)?;
            let mut core = BrokerCore::new(config.broker_config(index, addr));
            let data_dir = match &config.data_dir {
                Some(root) => {
                    let mut dir =
                        DataDir::open(&root.join(broker_name(index))).map_err(Error::Io)?;
                    dir.load(&mut core).map_err(Error::Io)?;
                    Some(dir)
                }
                None => None,
            };
            let actor = BrokerActor::new(
                core,
                Some(name_server.clone()),
                config.tick_interval,
                data_dir,
            )
            .start();
            let routes = SessionRoutes {
                broker: Some(actor.clone()),
                name_server: shared_port.then(|| name_server.clone()),
                max_outbound_bytes: config.max_outbound_bytes,
                budget: budget.clone(),
            };
            let listener_actor = ListenerActor::start_on(listener, routes, tls.clone());
            actor.send(AttachListener(listener_actor)).await?;
            brokers.push(BrokerHandle {
                name: broker_name(index),
                addr,
                actor,
                shared_port,
            });
        }
        if let Some(listener) = shared {
            namesrv_listener = Some(ListenerActor::start_on(
                listener,
                SessionRoutes {
                    broker: None,
                    name_server: Some(name_server.clone()),
                    max_outbound_bytes: config.max_outbound_bytes,
                    budget: budget.clone(),
                },
                tls.clone(),
            ));
        }
        Ok(EmbeddedCluster {
            namesrv_addr,
            max_outbound_bytes: config.max_outbound_bytes,
            budget,
            name_server,
            namesrv_listener,
            brokers,
            tls,
            #[cfg(feature = "tls")]
            tls_ca_pem,
        })
    }

    /// The CA certificate (PEM) that signed the certificate this cluster generated for TLS:
    /// what a client trusts (`TlsConfig::ca_pem`). `None` without TLS or with a certificate
    /// given in the configuration.
    #[cfg(feature = "tls")]
    pub fn tls_ca_pem(&self) -> Option<&str> {
        self.tls_ca_pem.as_deref()
    }

    /// `host:port` of the name server (what clients put in `namesrv_addr`).
    pub fn namesrv_addr(&self) -> String {
        self.namesrv_addr.to_string()
    }

    /// `host:port` of a broker by name.
    pub fn broker_addr(&self, name: &str) -> Option<String> {
        self.broker(name).ok().map(|b| b.addr.to_string())
    }

    /// Broker names, in order (`broker-a`, …).
    pub fn broker_names(&self) -> Vec<String> {
        self.brokers.iter().map(|b| b.name.clone()).collect()
    }

    fn broker(&self, name: &str) -> Result<&BrokerHandle> {
        self.brokers
            .iter()
            .find(|b| b.name == name)
            .ok_or_else(|| Error::Config {
                option: "broker",
                value: name.to_owned(),
                allowed: self.broker_names().join(", "),
            })
    }

    /// Runs a closure on one broker's core; the actions it returns are executed.
    pub(crate) async fn with_core<R, F>(&self, broker: &str, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut BrokerCore, i64) -> (R, Vec<Action>) + Send + 'static,
    {
        self.broker(broker)?
            .actor
            .send(WithCore(Box::new(f)))
            .await
            .map_err(Error::from)
    }

    /// How many long-polling pulls `broker` holds now (a test waits for its pull to be parked).
    pub async fn held_pulls(&self, broker: &str) -> Result<usize> {
        self.with_core(broker, |core, _| (core.held_pull_count(), Vec::new()))
            .await
    }

    /// Drops the messages of a queue below `offset`, as retention does (a consumer then finds
    /// its offset out of range).
    pub async fn truncate_queue_before(
        &self,
        broker: &str,
        topic: &str,
        queue_id: i32,
        offset: i64,
    ) -> Result<()> {
        let topic = topic.to_owned();
        self.with_core(broker, move |core, _| {
            core.store_mut().truncate_before(&topic, queue_id, offset);
            ((), Vec::new())
        })
        .await
    }

    /// The bytes `broker`'s commit log holds.
    pub async fn commit_log_bytes(&self, broker: &str) -> Result<i64> {
        self.with_core(broker, |core, _| {
            (core.store().commit_log_max_offset(), Vec::new())
        })
        .await
    }

    /// Creates (or updates) a topic with `queues` read/write queues on every broker.
    pub async fn create_topic(&self, topic: &str, queues: i32) -> Result<()> {
        for b in &self.brokers {
            let config = TopicConfig::new(topic, queues);
            self.with_core(&b.name, move |core, _| ((), core.create_topic(config)))
                .await?;
        }
        Ok(())
    }

    /// The offset a group committed for a queue on a broker.
    pub async fn committed_offset(
        &self,
        broker: &str,
        group: &str,
        topic: &str,
        queue_id: i32,
    ) -> Result<Option<i64>> {
        let (group, topic) = (group.to_owned(), topic.to_owned());
        self.with_core(broker, move |core, _| {
            (core.offsets().query(&group, &topic, queue_id), Vec::new())
        })
        .await
    }

    /// Max offset (message count ever written) of a queue on a broker.
    pub async fn max_offset(&self, broker: &str, topic: &str, queue_id: i32) -> Result<i64> {
        let topic = topic.to_owned();
        self.with_core(broker, move |core, _| {
            (core.store().max_offset(&topic, queue_id), Vec::new())
        })
        .await
    }

    /// Client ids registered in a consumer group on a broker.
    pub async fn consumer_ids(&self, broker: &str, group: &str) -> Result<Vec<String>> {
        let group = group.to_owned();
        self.with_core(broker, move |core, _| {
            let ids = core
                .clients()
                .consumer_group(&group)
                .map(|g| g.client_ids())
                .unwrap_or_default();
            (ids, Vec::new())
        })
        .await
    }

    /// Resets a group's offsets on `topic` to `timestamp_ms` (−1 = end) on every broker that
    /// has the topic, pushing RESET_CONSUMER_CLIENT_OFFSET to the group's clients. Returns the
    /// offsets sent.
    pub async fn reset_offsets(
        &self,
        group: &str,
        topic: &str,
        timestamp_ms: i64,
        force: bool,
    ) -> Result<BTreeMap<MessageQueue, i64>> {
        let mut all = BTreeMap::new();
        let mut last_error = None;
        for b in &self.brokers {
            let (g, t) = (group.to_owned(), topic.to_owned());
            let result = self
                .with_core(&b.name, move |core, _| {
                    match core.reset_offsets(&t, &g, timestamp_ms, force) {
                        Ok((table, actions)) => (Ok(table), actions),
                        Err(e) => (Err(e), Vec::new()),
                    }
                })
                .await?;
            match result {
                Ok(table) => all.extend(table),
                Err((code, remark)) => {
                    last_error = Some(Error::Broker {
                        peer: b.addr.to_string(),
                        request: RequestCode(request_code::INVOKE_BROKER_TO_RESET_OFFSET),
                        code: ResponseCode(code),
                        remark,
                    })
                }
            }
        }
        match (all.is_empty(), last_error) {
            (true, Some(e)) => Err(e),
            _ => Ok(all),
        }
    }

    async fn call_client(
        &self,
        broker: &str,
        request_code: i32,
        start: ClientCallStart,
    ) -> Result<RemotingCommand> {
        let handle = self.broker(broker)?;
        let peer = handle.addr.to_string();
        let rx = handle
            .actor
            .send(CallClient(start))
            .await?
            .map_err(|remark| Error::Broker {
                peer: peer.clone(),
                request: RequestCode(request_code),
                code: ResponseCode(crate::protocol::codes::response_code::SYSTEM_ERROR),
                remark,
            })?;
        match rx.await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(reason)) => Err(Error::ConnectionClosed(format!(
                "client call failed: {reason}"
            ))),
            Err(_) => Err(Error::Shutdown("embedded broker stopped".into())),
        }
    }

    /// Asks a consumer client for its `ConsumerRunningInfo` (GET_CONSUMER_RUNNING_INFO) through
    /// `broker`, returning the client's raw response.
    pub async fn consumer_running_info(
        &self,
        broker: &str,
        group: &str,
        client_id: &str,
        jstack: bool,
    ) -> Result<RemotingCommand> {
        let (g, c) = (group.to_owned(), client_id.to_owned());
        self.call_client(
            broker,
            request_code::GET_CONSUMER_RUNNING_INFO,
            Box::new(move |core, token, now| core.request_running_info(token, &g, &c, jstack, now)),
        )
        .await
    }

    /// Makes a consumer client consume one stored message now (CONSUME_MESSAGE_DIRECTLY),
    /// returning the client's raw response. `msg_id` is an offset message id or a UNIQ_KEY.
    pub async fn consume_message_directly(
        &self,
        broker: &str,
        group: &str,
        client_id: &str,
        msg_id: &str,
    ) -> Result<RemotingCommand> {
        let (g, c, m) = (group.to_owned(), client_id.to_owned(), msg_id.to_owned());
        self.call_client(
            broker,
            request_code::CONSUME_MESSAGE_DIRECTLY,
            Box::new(move |core, token, now| core.request_consume_directly(token, &g, &c, &m, now)),
        )
        .await
    }

    /// Replaces the ACL of every broker (`None`: no checks from now on), as a Java broker
    /// reloads a changed `plain_acl.yml`: requests from then on are checked against it.
    pub async fn set_acl(&self, acl: Option<AclConfig>) -> Result<()> {
        for b in &self.brokers {
            let acl = acl.clone();
            self.with_core(&b.name, move |core, _| {
                core.set_acl(acl);
                ((), Vec::new())
            })
            .await?;
        }
        Ok(())
    }

    /// Injects a fault for a request code on one broker (`None` clears it).
    pub async fn set_fault(
        &self,
        broker: &str,
        request_code: i32,
        fault: Option<Fault>,
    ) -> Result<()> {
        self.with_core(broker, move |core, _| {
            core.set_fault(request_code, fault);
            ((), Vec::new())
        })
        .await
    }

    /// Freezes (or unfreezes) what pulls see of a queue.
    pub async fn pause_queue(
        &self,
        broker: &str,
        topic: &str,
        queue_id: i32,
        paused: bool,
    ) -> Result<()> {
        let topic = topic.to_owned();
        self.with_core(broker, move |core, now| {
            ((), core.set_queue_paused(&topic, queue_id, paused, now))
        })
        .await
    }

    /// Closes every client connection of every broker (clients must reconnect).
    pub async fn drop_connections(&self) -> Result<()> {
        for b in &self.brokers {
            b.actor.send(DropConnections).await?;
        }
        Ok(())
    }

    /// Stops a broker like a process going down; its data stays for [`Self::restart_broker`].
    /// `unregister` = graceful (routes drop it) vs crash (routes still list it).
    /// With a single broker the shared name-server port goes down too.
    pub async fn stop_broker(&self, name: &str, unregister: bool) -> Result<()> {
        self.broker(name)?
            .actor
            .send(StopServing { unregister })
            .await
            .map_err(Error::from)
    }

    /// Reopens a stopped broker on its previous address.
    pub async fn restart_broker(&self, name: &str) -> Result<()> {
        let handle = self.broker(name)?;
        let listener = TcpListener::bind(handle.addr)
            .await
            .map_err(|e| bind_error(handle.addr, e))?;
        let routes = SessionRoutes {
            broker: Some(handle.actor.clone()),
            name_server: handle.shared_port.then(|| self.name_server.clone()),
            max_outbound_bytes: self.max_outbound_bytes,
            budget: self.budget.clone(),
        };
        let listener_actor = ListenerActor::start_on(listener, routes, self.tls.clone());
        handle
            .actor
            .send(AttachListener(listener_actor))
            .await
            .map_err(Error::from)
    }

    /// Stops everything (persisting data when a data directory is configured).
    pub async fn shutdown(self) {
        if let Some(listener) = &self.namesrv_listener {
            let _ = listener.send(StopListener).await;
        }
        for b in &self.brokers {
            let _ = b.actor.send(StopBroker).await;
        }
        let _ = self.name_server.send(StopNameServer).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codes::{request_code as rc, response_code as code};
    use crate::protocol::RemotingCodec;
    use futures::{SinkExt, StreamExt};
    use tokio::net::TcpStream;
    use tokio_util::codec::Framed;

    type Conn = Framed<TcpStream, RemotingCodec>;

    async fn connect(addr: &str) -> Conn {
        Framed::new(
            TcpStream::connect(addr).await.unwrap(),
            RemotingCodec::default(),
        )
    }

    async fn call(conn: &mut Conn, req: RemotingCommand) -> RemotingCommand {
        let opaque = req.opaque;
        conn.send(req).await.unwrap();
        loop {
            let frame = conn.next().await.unwrap().unwrap();
            if frame.is_response() && frame.opaque == opaque {
                return frame;
            }
        }
    }

    fn send_req(topic: &str, opaque: i32) -> RemotingCommand {
        RemotingCommand::request(rc::SEND_MESSAGE_V2)
            .with_ext("a", "pg")
            .with_ext("b", topic)
            .with_ext("c", "TBW102")
            .with_ext("d", "4")
            .with_ext("e", "0")
            .with_ext("f", "0")
            .with_ext("g", "1")
            .with_ext("h", "0")
            .with_opaque(opaque)
            .with_body(bytes::Bytes::from_static(b"payload"))
    }

    fn held_pull(topic: &str, opaque: i32) -> RemotingCommand {
        RemotingCommand::request(rc::PULL_MESSAGE)
            .with_ext("consumerGroup", "g")
            .with_ext("topic", topic)
            .with_ext("queueId", "0")
            .with_ext("queueOffset", "0")
            .with_ext("maxMsgNums", "32")
            .with_ext("sysFlag", "6")
            .with_ext("commitOffset", "0")
            .with_ext("suspendTimeoutMillis", "20000")
            .with_ext("subscription", "*")
            .with_ext("subVersion", "0")
            .with_opaque(opaque)
    }

    #[actix_rt::test]
    async fn standalone_port_serves_routes_sends_and_long_polls() {
        let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral())
            .await
            .unwrap();
        let addr = cluster.namesrv_addr();
        assert_eq!(
            cluster.broker_addr("broker-a").as_deref(),
            Some(addr.as_str())
        );
        let mut producer = connect(&addr).await;
        let mut consumer = connect(&addr).await;
        // TBW102 is routable before any topic exists (the producer's auto-create path).
        let route = RemotingCommand::request(rc::GET_ROUTEINFO_BY_TOPIC)
            .with_ext("topic", "TBW102")
            .with_opaque(1);
        assert_eq!(call(&mut producer, route).await.code, code::SUCCESS);
        let first = call(&mut producer, send_req("E2E", 2)).await;
        assert_eq!(first.code, code::SUCCESS);
        // The pull is held, then woken by the send on another connection.
        consumer
            .send(held_pull("E2E", 3).with_ext("queueOffset", "1"))
            .await
            .unwrap();
        let sent = call(&mut producer, send_req("E2E", 4)).await;
        assert_eq!(sent.ext("queueOffset"), Some("1"));
        let woken = consumer.next().await.unwrap().unwrap();
        assert_eq!((woken.code, woken.opaque), (code::SUCCESS, 3));
        let msgs = crate::message::decode_messages(woken.body.unwrap()).unwrap();
        assert_eq!(
            msgs[0].born_host.ip(),
            std::net::IpAddr::from([127, 0, 0, 1])
        );
        let route = RemotingCommand::request(rc::GET_ROUTEINFO_BY_TOPIC)
            .with_ext("topic", "E2E")
            .with_opaque(5);
        let r = call(&mut consumer, route).await;
        let v: serde_json::Value = serde_json::from_slice(r.body.as_deref().unwrap()).unwrap();
        assert_eq!(
            v["brokerDatas"][0]["brokerAddrs"]["0"],
            serde_json::Value::from(addr.clone())
        );
        // A garbage frame closes only that connection.
        use tokio::io::AsyncWriteExt;
        let mut raw = TcpStream::connect(&addr).await.unwrap();
        raw.write_all(&[0, 0, 0, 8, 0, 0, 0, 200, 1, 2, 3, 4])
            .await
            .unwrap();
        let mut buf = [0u8; 16];
        use tokio::io::AsyncReadExt;
        assert_eq!(raw.read(&mut buf).await.unwrap(), 0);
        assert_eq!(
            call(&mut producer, send_req("E2E", 6)).await.code,
            code::SUCCESS
        );
        cluster.shutdown().await;
    }

    #[actix_rt::test]
    async fn cluster_mode_routes_every_broker_and_survives_restart() {
        let config = EmbeddedConfig {
            brokers: 2,
            ..EmbeddedConfig::ephemeral()
        };
        let cluster = EmbeddedCluster::start(config).await.unwrap();
        cluster.create_topic("Spread", 2).await.unwrap();
        let mut ns = connect(&cluster.namesrv_addr()).await;
        let route = RemotingCommand::request(rc::GET_ROUTEINFO_BY_TOPIC)
            .with_ext("topic", "Spread")
            .with_opaque(1);
        let r = call(&mut ns, route.clone()).await;
        let v: serde_json::Value = serde_json::from_slice(r.body.as_deref().unwrap()).unwrap();
        assert_eq!(v["brokerDatas"].as_array().unwrap().len(), 2);
        // The name-server port does not serve broker requests in cluster mode.
        let r = call(&mut ns, send_req("Spread", 2)).await;
        assert_eq!(r.code, code::REQUEST_CODE_NOT_SUPPORTED);
        let b = cluster.broker_addr("broker-b").unwrap();
        let mut conn = connect(&b).await;
        assert_eq!(
            call(&mut conn, send_req("Spread", 3)).await.code,
            code::SUCCESS
        );
        cluster.stop_broker("broker-b", true).await.unwrap();
        assert!(conn.next().await.is_none());
        let r = call(&mut ns, route.clone().with_opaque(4)).await;
        let v: serde_json::Value = serde_json::from_slice(r.body.as_deref().unwrap()).unwrap();
        assert_eq!(v["brokerDatas"].as_array().unwrap().len(), 1);
        cluster.restart_broker("broker-b").await.unwrap();
        let mut conn = connect(&b).await;
        let r = call(&mut conn, send_req("Spread", 5)).await;
        assert_eq!(r.ext("queueOffset"), Some("1"));
        assert_eq!(
            cluster.max_offset("broker-b", "Spread", 0).await.unwrap(),
            2
        );
        cluster.shutdown().await;
    }

    #[actix_rt::test]
    async fn a_restarted_standalone_broker_keeps_messages_and_offsets() {
        let dir = std::env::temp_dir().join(format!(
            "rocketmq-actor-embedded-{}-{}",
            std::process::id(),
            crate::actors::now_ms()
        ));
        let config = EmbeddedConfig {
            data_dir: Some(dir.clone()),
            ..EmbeddedConfig::ephemeral()
        };
        let cluster = EmbeddedCluster::start(config.clone()).await.unwrap();
        let mut conn = connect(&cluster.namesrv_addr()).await;
        for opaque in 1..=3 {
            assert_eq!(
                call(&mut conn, send_req("Durable", opaque)).await.code,
                code::SUCCESS
            );
        }
        cluster
            .with_core("broker-a", |core, _| {
                core.set_offsets({
                    let mut t = crate::broker::offsets::OffsetTable::default();
                    t.commit("g", "Durable", 0, 2);
                    t
                });
                // Offsets are saved with the next change; a send makes one.
                ((), Vec::new())
            })
            .await
            .unwrap();
        assert_eq!(
            call(&mut conn, send_req("Durable", 4)).await.code,
            code::SUCCESS
        );
        cluster.shutdown().await;

        let cluster = EmbeddedCluster::start(config).await.unwrap();
        assert_eq!(
            cluster.max_offset("broker-a", "Durable", 0).await.unwrap(),
            4
        );
        assert_eq!(
            cluster
                .committed_offset("broker-a", "g", "Durable", 0)
                .await
                .unwrap(),
            Some(2)
        );
        let mut conn = connect(&cluster.namesrv_addr()).await;
        let r = call(&mut conn, send_req("Durable", 5)).await;
        assert_eq!(r.ext("queueOffset"), Some("4"));
        cluster.shutdown().await;
        let _ = std::fs::remove_dir_all(dir);
    }
}
