//! The embedded broker's sans-I/O core.
//!
//! [`BrokerCore`] answers broker requests exactly as a real RocketMQ broker would (protocol.md
//! §2), and [`NameServerCore`] answers the name-server requests from the registered brokers.
//! Neither touches a socket or a clock: the actix shell in `actors::broker` feeds them commands
//! with a connection id and the current time, and executes the [`Action`]s they return.
//!
//! ```ignore
//! use rocketmq_actor::broker::{Action, BrokerConfig, BrokerCore};
//! use rocketmq_actor::protocol::{codes::request_code, RemotingCommand};
//!
//! let mut core = BrokerCore::new(BrokerConfig::default());
//! core.on_connect(1, "127.0.0.1:50000".parse().unwrap());
//! let request = RemotingCommand::request(request_code::GET_MAX_OFFSET)
//!     .with_ext("topic", "TopicTest")
//!     .with_ext("queueId", "0")
//!     .with_opaque(7);
//! let actions = core.handle(1, request, 0);
//! let Action::Send { conn: 1, command } = &actions[0] else { panic!() };
//! assert_eq!((command.opaque, command.ext("offset")), (7, Some("0")));
//! ```

pub mod acl;
pub mod clients;
pub mod locks;
pub mod nameserver;
pub mod offsets;
pub mod record;
pub mod schedule;
pub mod store;

mod admin;
mod pull;
mod selection;
mod send;

pub use admin::ResetResult;
pub use nameserver::{BrokerRegistration, NameServerCore};

use crate::error::ProtocolError;
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::header::{CommandHeader, NotifyConsumerIdsChangedRequestHeader};
use crate::protocol::RemotingCommand;
use clients::ClientTable;
use locks::LockTable;
use offsets::OffsetTable;
use schedule::{DelayLevels, ScheduleProgress};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use store::{MessageStore, PullLimits, TopicConfig};

/// Identifies one client connection of the broker.
pub type ConnId = u64;

/// The auto-create template topic a broker with `autoCreateTopicEnable` registers.
pub const AUTO_CREATE_TOPIC: &str = "TBW102";
/// Prefix of a group's retry topic.
pub const RETRY_PREFIX: &str = "%RETRY%";
/// Prefix of a group's dead-letter topic.
pub const DLQ_PREFIX: &str = "%DLQ%";

/// Something the shell must do after a core call.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Write a command (a response or a broker-initiated request) to a connection.
    Send {
        /// Target connection.
        conn: ConnId,
        /// What to write.
        command: RemotingCommand,
    },
    /// Close a connection (idle expiry).
    Close {
        /// Connection to close.
        conn: ConnId,
    },
    /// A call started with [`BrokerCore::call_client`] finished.
    CallDone {
        /// Token returned by `call_client`.
        token: u64,
        /// The client's response, or why there is none.
        result: Result<RemotingCommand, String>,
    },
    /// The topic set changed: re-register the broker with the name server.
    TopicsChanged,
}

/// A request code singled out by fault injection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this response code and remark instead of processing.
    Fail {
        /// Response code.
        code: i32,
        /// Remark.
        remark: String,
    },
    /// Process the request this many milliseconds late.
    Delay {
        /// Delay in ms.
        millis: i64,
    },
    /// Swallow the request: no processing, no answer (the client times out).
    Drop,
}

/// Configuration of one broker core.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// `brokerName`, e.g. `broker-a`.
    pub broker_name: String,
    /// `brokerClusterName`.
    pub cluster_name: String,
    /// Address written into records and message ids; should be the listen address.
    pub store_host: SocketAddr,
    /// Queue count of auto-created topics (the real broker's `defaultTopicQueueNums`).
    pub default_queues: i32,
    /// Create topics on first send (through `TBW102`).
    pub auto_create_topic: bool,
    /// Idle time after which a client channel is dropped (120 s).
    pub channel_expiry_ms: i64,
    /// Queue lock lifetime without renewal (60 s).
    pub lock_expiry_ms: i64,
    /// Delay of each level for retries and delayed messages.
    pub delay_levels: DelayLevels,
    /// Default max reconsume times of a group (`retryMaxTimes`, 16).
    pub retry_max_times: i32,
    /// How long the broker waits for a client answering GET_CONSUMER_RUNNING_INFO etc. (10 s).
    pub client_call_timeout_ms: i64,
    /// Per-pull limits.
    pub pull_limits: PullLimits,
    /// Largest accepted message body (4 MiB).
    pub max_message_size: usize,
    /// ACL mode: every request is checked against these accounts and answered NO_PERMISSION
    /// when refused. `None`: no checks.
    pub acl: Option<acl::AclConfig>,
    /// Filter by SQL92 (`enablePropertyFilter`; on here, off by default in a real broker).
    /// Off, a SQL92 subscription is refused as a broker without property filtering refuses it.
    pub enable_property_filter: bool,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            broker_name: "broker-a".into(),
            cluster_name: "DefaultCluster".into(),
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            default_queues: 8,
            auto_create_topic: true,
            channel_expiry_ms: 120_000,
            lock_expiry_ms: 60_000,
            delay_levels: DelayLevels::default(),
            retry_max_times: 16,
            client_call_timeout_ms: 10_000,
            pull_limits: PullLimits::default(),
            max_message_size: 4 * 1024 * 1024,
            acl: None,
            enable_property_filter: true,
        }
    }
}

/// Who waits for a client's answer to a broker-initiated request.
#[derive(Clone, Debug)]
enum Waiter {
    /// An admin request on another connection, answered with the client's response.
    Forward { conn: ConnId, opaque: i32 },
    /// A call from the embedding program.
    Token(u64),
}

#[derive(Clone, Debug)]
struct PendingCall {
    conn: ConnId,
    deadline_ms: i64,
    waiter: Waiter,
}

/// A request delayed by fault injection.
#[derive(Clone, Debug)]
struct DelayedRequest {
    due_ms: i64,
    conn: ConnId,
    request: RemotingCommand,
}

/// An error answer of a handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    code: i32,
    remark: String,
}

impl Failure {
    pub(crate) fn new(code: i32, remark: impl Into<String>) -> Self {
        Failure {
            code,
            remark: remark.into(),
        }
    }
    pub(crate) fn system(remark: impl Into<String>) -> Self {
        Failure::new(response_code::SYSTEM_ERROR, remark)
    }
}

/// What a handler produced: a response, or nothing (held long poll, oneway, forwarded call).
pub(crate) type Handled = Result<Option<RemotingCommand>, Failure>;

/// What Java's `decodeCommandCustomHeader` (and the processor behind it) answers for a header
/// that does not decode: SYSTEM_ERROR with the exception text as remark.
pub(crate) fn header_failure(error: ProtocolError) -> Failure {
    match error {
        ProtocolError::MissingField(name) => Failure::system(format!(
            "org.apache.rocketmq.remoting.exception.RemotingCommandException: the custom field <{name}> is null"
        )),
        ProtocolError::InvalidField { field, value } => Failure::system(format!(
            "java.lang.NumberFormatException: For input string: \"{value}\" (field {field})"
        )),
        other => Failure::system(other.to_string()),
    }
}

/// Reads a request's typed header, failing the way the real broker does.
pub(crate) fn read_header<H: CommandHeader>(req: &RemotingCommand) -> Result<H, Failure> {
    req.decode_header::<H>().map_err(header_failure)
}

/// A field the typed header treats as optional but this request needs (Java's processors fail
/// on the null the same way as the header check does).
pub(crate) fn needed<T>(value: Option<T>, name: &'static str) -> Result<T, Failure> {
    value.ok_or_else(|| header_failure(ProtocolError::MissingField(name)))
}

/// The retry topic of a consumer group.
pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_PREFIX}{group}")
}

/// The dead-letter topic of a consumer group.
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_PREFIX}{group}")
}

/// Topic names the real `TopicValidator` accepts: 1..=127 characters of `[%|a-zA-Z0-9_-]`.
pub(crate) fn validate_topic(topic: &str) -> Result<(), Failure> {
    if topic.trim().is_empty() {
        return Err(Failure::system("The specified topic is blank."));
    }
    if topic.len() > 127 {
        return Err(Failure::system(
            "The specified topic is longer than topic max length.",
        ));
    }
    if !topic
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-'))
    {
        return Err(Failure::system(format!(
            "The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )));
    }
    Ok(())
}

/// Java's `TopicValidator.validateGroup`: not blank, at most 255 characters of
/// `^[%|a-zA-Z0-9_-]+$`.
pub(crate) fn validate_group(group: &str) -> Result<(), Failure> {
    let fails = |why: String| Err(Failure::new(response_code::INVALID_PARAMETER, why));
    if group.trim().is_empty() {
        return fails("the specified group is blank".into());
    }
    if group.len() > 255 {
        return fails("the specified group is longer than group max length 255".into());
    }
    if !group
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-'))
    {
        return fails(format!(
            "the specified group[{group}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        ));
    }
    Ok(())
}

/// The sans-I/O broker.
#[derive(Debug)]
pub struct BrokerCore {
    config: BrokerConfig,
    store: MessageStore,
    offsets: OffsetTable,
    clients: ClientTable,
    locks: LockTable,
    /// Subscription groups known to the broker (auto-created like `autoCreateSubscriptionGroup`).
    groups: BTreeMap<String, crate::protocol::body::SubscriptionGroupConfig>,
    /// What GET_BROKER_RUNTIME_INFO reports.
    stats: admin::RuntimeStats,
    held: pull::HeldPulls,
    schedule: ScheduleProgress,
    faults: HashMap<i32, Fault>,
    delayed: Vec<DelayedRequest>,
    pending: HashMap<i32, PendingCall>,
    next_opaque: i32,
    peers: HashMap<ConnId, SocketAddr>,
    queue_cursor: u32,
    uniq_ids: crate::message::UniqueIdGenerator,
    data_changed: bool,
    /// What each SQL92 expression selected, per queue and offset.
    selections: selection::Selections,
    /// Compiled SQL92 expressions by text (see `with_filter`).
    sql_filters:
        HashMap<String, Result<std::sync::Arc<crate::filter::SqlFilter>, crate::filter::SqlError>>,
}

impl BrokerCore {
    /// A broker with the auto-create template topic and the schedule topic.
    pub fn new(config: BrokerConfig) -> Self {
        let mut store = MessageStore::new(config.store_host);
        store.set_pull_limits(config.pull_limits);
        let mut template = TopicConfig::new(AUTO_CREATE_TOPIC, config.default_queues);
        template.perm = store::perm::READ_WRITE | store::perm::INHERIT;
        if config.auto_create_topic {
            store.upsert_topic(template);
        }
        store.upsert_topic(TopicConfig::new(
            schedule::SCHEDULE_TOPIC,
            config.delay_levels.max_level(),
        ));
        let locks = LockTable::new(config.lock_expiry_ms);
        let uniq_ids = crate::message::UniqueIdGenerator::from_system(config.store_host.ip());
        BrokerCore {
            config,
            store,
            offsets: OffsetTable::default(),
            clients: ClientTable::default(),
            locks,
            groups: BTreeMap::new(),
            stats: admin::RuntimeStats::default(),
            held: pull::HeldPulls::default(),
            schedule: ScheduleProgress::default(),
            faults: HashMap::new(),
            delayed: Vec::new(),
            pending: HashMap::new(),
            next_opaque: 0,
            peers: HashMap::new(),
            queue_cursor: 0,
            uniq_ids,
            data_changed: false,
            sql_filters: HashMap::new(),
            selections: selection::Selections::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// Read access to the message store.
    pub fn store(&self) -> &MessageStore {
        &self.store
    }

    /// Write access to the message store (tests, persistence, fault injection).
    pub fn store_mut(&mut self) -> &mut MessageStore {
        &mut self.store
    }

    /// Who holds `group`'s lock of `mq` at `now_ms` (an expired lock is nobody's).
    pub fn lock_holder(
        &self,
        group: &str,
        mq: &crate::message::MessageQueue,
        now_ms: i64,
    ) -> Option<&str> {
        self.locks.holder(group, mq, now_ms)
    }

    /// The committed consumer offsets.
    pub fn offsets(&self) -> &OffsetTable {
        &self.offsets
    }

    /// Replaces the committed consumer offsets (persistence reload).
    pub fn set_offsets(&mut self, offsets: OffsetTable) {
        // A group with stored offsets existed before the restart.
        for group in offsets.groups() {
            self.ensure_group(&group);
        }
        self.offsets = offsets;
    }

    /// The subscription groups (persisted with the data).
    pub fn group_configs(&self) -> Vec<crate::protocol::body::SubscriptionGroupConfig> {
        self.groups.values().cloned().collect()
    }

    /// Restores the subscription groups of a data directory.
    pub fn set_group_configs(
        &mut self,
        groups: Vec<crate::protocol::body::SubscriptionGroupConfig>,
    ) {
        for group in groups {
            self.groups.insert(group.group_name.clone(), group);
        }
    }

    /// Scheduler progress (persisted with the data).
    pub fn schedule_progress(&self) -> &ScheduleProgress {
        &self.schedule
    }

    /// Restores scheduler progress (persistence reload).
    pub fn set_schedule_progress(&mut self, progress: ScheduleProgress) {
        self.schedule = progress;
    }

    /// Client registrations.
    pub fn clients(&self) -> &ClientTable {
        &self.clients
    }

    /// Every topic configuration (what is registered with the name server).
    pub fn topic_configs(&self) -> Vec<TopicConfig> {
        self.store.topics().cloned().collect()
    }

    /// The registration to send to the name server.
    pub fn registration(&self) -> BrokerRegistration {
        BrokerRegistration {
            cluster_name: self.config.cluster_name.clone(),
            broker_name: self.config.broker_name.clone(),
            broker_id: 0,
            addr: self.config.store_host.to_string(),
            topics: self.topic_configs(),
        }
    }

    /// Returns and clears the "stored data changed" flag (for persistence).
    pub fn take_data_changed(&mut self) -> bool {
        std::mem::take(&mut self.data_changed)
    }

    /// Creates or updates a topic directly (admin/test setup).
    pub fn create_topic(&mut self, config: TopicConfig) -> Vec<Action> {
        self.store.upsert_topic(config);
        self.data_changed = true;
        vec![Action::TopicsChanged]
    }

    /// Injects (or with `None` clears) a fault for a request code.
    pub fn set_fault(&mut self, request_code: i32, fault: Option<Fault>) {
        match fault {
            Some(f) => self.faults.insert(request_code, f),
            None => self.faults.remove(&request_code),
        };
    }

    /// Replaces the ACL (`None`: no checks).
    pub fn set_acl(&mut self, acl: Option<acl::AclConfig>) {
        self.config.acl = acl;
    }

    /// Clears every injected fault.
    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Freezes or unfreezes what pulls see of a queue; unfreezing wakes held pulls on it.
    pub fn set_queue_paused(
        &mut self,
        topic: &str,
        queue_id: i32,
        paused: bool,
        now_ms: i64,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        if self.store.set_paused(topic, queue_id, paused) && !paused {
            self.wake_held(topic, queue_id, None, now_ms, &mut out);
        }
        out
    }

    /// A connection was accepted from `peer` (the born host of what it sends).
    pub fn on_connect(&mut self, conn: ConnId, peer: SocketAddr) {
        self.peers.insert(conn, peer);
    }

    /// A connection closed: unregisters its clients (notifying the rest of their groups), drops
    /// its held pulls and fails calls waiting on it.
    pub fn on_disconnect(&mut self, conn: ConnId) -> Vec<Action> {
        let mut out = Vec::new();
        self.peers.remove(&conn);
        self.held.remove_conn(conn);
        self.delayed.retain(|d| d.conn != conn);
        for change in self.clients.remove_connection(conn) {
            self.notify_ids_changed(&change.group, &change.notify, &mut out);
        }
        let failed: Vec<i32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.conn == conn)
            .map(|(o, _)| *o)
            .collect();
        for opaque in failed {
            if let Some(call) = self.pending.remove(&opaque) {
                self.finish_call(call, Err(format!("connection {conn} closed")), &mut out);
            }
        }
        for call in self.pending.values_mut() {
            if let Waiter::Forward { conn: origin, .. } = call.waiter {
                if origin == conn {
                    // Nobody to answer any more; let the call time out quietly.
                    call.waiter = Waiter::Token(u64::MAX);
                }
            }
        }
        out
    }

    /// Forgets everything volatile, as a broker process restart does: connections, client
    /// registrations, locks, held pulls, pending calls. Messages, topics and offsets stay.
    pub fn on_restart(&mut self) {
        self.peers.clear();
        self.clients.clear();
        self.locks.clear();
        self.held = pull::HeldPulls::default();
        self.delayed.clear();
        self.pending.clear();
    }

    /// Handles one frame received on `conn` at `now_ms`.
    pub fn handle(&mut self, conn: ConnId, request: RemotingCommand, now_ms: i64) -> Vec<Action> {
        let mut out = Vec::new();
        self.stats.boot_ms.get_or_insert(now_ms);
        if request.is_response() {
            self.on_client_response(conn, request, &mut out);
            return out;
        }
        if let Some(acl) = &self.config.acl {
            if let Err(remark) = acl.check(self.peer(conn).ip(), &request) {
                if !request.is_oneway() {
                    out.push(Action::Send {
                        conn,
                        command: RemotingCommand::response_to(
                            &request,
                            response_code::NO_PERMISSION,
                            Some(remark),
                        ),
                    });
                }
                return out;
            }
        }
        match self.faults.get(&request.code).cloned() {
            Some(Fault::Fail { code, remark }) => {
                if !request.is_oneway() {
                    out.push(Action::Send {
                        conn,
                        command: RemotingCommand::response_to(&request, code, Some(remark)),
                    });
                }
                return out;
            }
            Some(Fault::Drop) => return out,
            Some(Fault::Delay { millis }) => {
                self.delayed.push(DelayedRequest {
                    due_ms: now_ms.saturating_add(millis),
                    conn,
                    request,
                });
                return out;
            }
            None => {}
        }
        self.process(conn, request, now_ms, &mut out);
        out
    }

    fn process(
        &mut self,
        conn: ConnId,
        request: RemotingCommand,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) {
        let oneway = request.is_oneway();
        let result = self.dispatch(conn, &request, now_ms, out);
        let response = match result {
            Ok(Some(response)) => response,
            Ok(None) => return,
            Err(failure) => {
                RemotingCommand::response_to(&request, failure.code, Some(failure.remark))
            }
        };
        if !oneway {
            out.push(Action::Send {
                conn,
                command: response,
            });
        }
    }

    fn dispatch(
        &mut self,
        conn: ConnId,
        req: &RemotingCommand,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) -> Handled {
        use request_code as rc;
        match req.code {
            rc::SEND_MESSAGE | rc::SEND_MESSAGE_V2 => self.on_send(conn, req, now_ms, out),
            rc::SEND_BATCH_MESSAGE => self.on_send_batch(conn, req, now_ms, out),
            rc::PULL_MESSAGE | rc::LITE_PULL_MESSAGE => self.on_pull(conn, req, now_ms, true),
            rc::QUERY_CONSUMER_OFFSET => self.on_query_consumer_offset(req),
            rc::UPDATE_CONSUMER_OFFSET => self.on_update_consumer_offset(req),
            rc::GET_MAX_OFFSET => self.on_get_max_offset(req),
            rc::GET_MIN_OFFSET => self.on_get_min_offset(req),
            rc::SEARCH_OFFSET_BY_TIMESTAMP => self.on_search_offset(req),
            rc::GET_EARLIEST_MSG_STORETIME => self.on_earliest_store_time(req),
            rc::VIEW_MESSAGE_BY_ID => self.on_view_message(req),
            rc::HEART_BEAT => self.on_heartbeat(conn, req, now_ms, out),
            rc::CHECK_CLIENT_CONFIG => self.on_check_client_config(req),
            rc::UNREGISTER_CLIENT => self.on_unregister(conn, req, out),
            rc::GET_CONSUMER_LIST_BY_GROUP => self.on_consumer_list(req),
            rc::GET_CONSUMER_CONNECTION_LIST => self.on_consumer_connections(req),
            rc::LOCK_BATCH_MQ => self.on_lock(req, now_ms),
            rc::UNLOCK_BATCH_MQ => self.on_unlock(req),
            rc::CONSUMER_SEND_MSG_BACK => self.on_send_back(req, now_ms, out),
            rc::UPDATE_AND_CREATE_TOPIC => self.on_update_topic(req, out),
            rc::GET_TOPIC_CONFIG => self.on_get_topic_config(req),
            rc::GET_ALL_TOPIC_CONFIG => self.on_get_all_topic_config(req),
            rc::GET_TOPIC_STATS_INFO => self.on_topic_stats(req),
            rc::DELETE_TOPIC_IN_BROKER => self.on_delete_topic(req, out),
            rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG => self.on_get_all_groups(req),
            rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => self.on_put_group(req),
            rc::DELETE_SUBSCRIPTIONGROUP => self.on_delete_group(req),
            rc::GET_BROKER_RUNTIME_INFO => self.on_runtime_info(req, now_ms),
            rc::INVOKE_BROKER_TO_RESET_OFFSET => self.on_invoke_reset_offset(req, out),
            rc::GET_CONSUMER_RUNNING_INFO | rc::CONSUME_MESSAGE_DIRECTLY => {
                self.on_forward_to_client(conn, req, now_ms, out)
            }
            code => Err(Failure::new(
                response_code::REQUEST_CODE_NOT_SUPPORTED,
                format!(" request type {code} not supported"),
            )),
        }
    }

    /// Periodic work at `now_ms`: due delayed messages, expired long polls, idle channels,
    /// client calls without answer, fault-delayed requests, expired locks.
    pub fn on_tick(&mut self, now_ms: i64) -> Vec<Action> {
        let mut out = Vec::new();
        self.deliver_due_scheduled(now_ms, &mut out);
        self.expire_held(now_ms, &mut out);
        let idle = self
            .clients
            .expired_connections(now_ms, self.config.channel_expiry_ms);
        for conn in idle {
            out.extend(self.on_disconnect(conn));
            out.push(Action::Close { conn });
        }
        let timed_out: Vec<i32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline_ms <= now_ms)
            .map(|(o, _)| *o)
            .collect();
        for opaque in timed_out {
            if let Some(call) = self.pending.remove(&opaque) {
                self.finish_call(call, Err("timeout".into()), &mut out);
            }
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.delayed)
            .into_iter()
            .partition(|d| d.due_ms <= now_ms);
        self.delayed = later;
        for d in due {
            self.process(d.conn, d.request, now_ms, &mut out);
        }
        self.locks.purge_expired(now_ms);
        out
    }

    /// The earliest time at which [`BrokerCore::on_tick`] has work to do, if any is scheduled.
    pub fn next_deadline(&self) -> Option<i64> {
        let held = self.held.earliest_deadline();
        let delayed = self.delayed.iter().map(|d| d.due_ms).min();
        let pending = self.pending.values().map(|p| p.deadline_ms).min();
        let scheduled = self.next_scheduled_due();
        [held, delayed, pending, scheduled]
            .into_iter()
            .flatten()
            .min()
    }

    fn next_opaque(&mut self) -> i32 {
        self.next_opaque = self.next_opaque.wrapping_add(1);
        self.next_opaque
    }

    fn notify_ids_changed(&mut self, group: &str, conns: &[ConnId], out: &mut Vec<Action>) {
        for &conn in conns {
            let opaque = self.next_opaque();
            let header = NotifyConsumerIdsChangedRequestHeader {
                consumer_group: group.to_owned(),
            };
            let mut command = RemotingCommand::request_with_header(
                request_code::NOTIFY_CONSUMER_IDS_CHANGED,
                &header,
            )
            .with_opaque(opaque);
            command.mark_oneway();
            out.push(Action::Send { conn, command });
        }
    }

    fn peer(&self, conn: ConnId) -> SocketAddr {
        self.peers
            .get(&conn)
            .copied()
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Ensures a subscription group exists (the real broker auto-creates them).
    fn ensure_group(&mut self, group: &str) {
        if !self.groups.contains_key(group) {
            self.groups.insert(
                group.to_owned(),
                crate::protocol::body::SubscriptionGroupConfig::new(group),
            );
            self.data_changed = true;
        }
    }

    /// Creates a retry or DLQ topic if missing (`createTopicInSendMessageBackMethod`).
    fn ensure_system_topic(&mut self, topic: &str, queues: i32, out: &mut Vec<Action>) {
        if self.store.topic(topic).is_none() {
            self.store.upsert_topic(TopicConfig::new(topic, queues));
            self.data_changed = true;
            out.push(Action::TopicsChanged);
        }
    }
}

/// Helper for tests and the shell: the response of the first `Send` to `conn` in `actions`.
pub fn response_for(actions: &[Action], conn: ConnId) -> Option<&RemotingCommand> {
    actions.iter().find_map(|a| match a {
        Action::Send { conn: c, command } if *c == conn && command.is_response() => Some(command),
        _ => None,
    })
}

#[cfg(test)]
pub(crate) mod tests;
