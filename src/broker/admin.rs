//! Client management (heartbeat, unregister, consumer list), queue locks, topic admin, and the
//! calls the broker makes into clients (reset offsets, running info, consume directly).

use super::clients::{ClientChannel, ConsumerRegistration, Subscription};
use super::pull::subscription_from_expression;
use super::record;
use super::store::TopicConfig;
use super::{
    needed, read_header, retry_topic, validate_topic, Action, BrokerCore, ConnId, Failure, Handled,
    PendingCall, Waiter,
};
use crate::message::{decode_offset_msg_id, MessageQueue};
use crate::protocol::body::{
    decode_json, encode_json, CheckClientRequestBody, ClientConnection, ConsumerConnection,
    ConsumerListBody, HeartbeatData, KvTable, LockBatchRequestBody, LockBatchResponseBody,
    ResetOffsetBody, SubscriptionData, SubscriptionGroupConfig, SubscriptionGroupTable,
    TopicConfigTable, TopicOffset, TopicStatsTable, UnlockBatchRequestBody,
};
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::header::{
    ConsumeMessageDirectlyRequestHeader, DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader, GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader, GetConsumerRunningInfoRequestHeader,
    GetTopicConfigRequestHeader, HeartbeatResponseHeader, ResetOffsetRequestHeader,
    UnregisterClientRequestHeader, UpdateTopicRequestHeader,
};
use crate::protocol::RemotingCommand;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;

/// `MQVersion.V3_0_7_SNAPSHOT`: oldest client that understands RESET_CONSUMER_CLIENT_OFFSET.
const VERSION_RESET_OFFSET: i32 = 28;
/// `MQVersion.V3_1_8_SNAPSHOT`: oldest client answering running-info / consume-directly calls.
const VERSION_CLIENT_CALLS: i32 = 62;

fn subscription_of(data: &SubscriptionData) -> Subscription {
    let mut sub = subscription_from_expression(
        &data.topic,
        Some(&data.sub_string),
        Some(&data.expression_type),
        data.sub_version,
    );
    // The client's codeSet is authoritative when present (it is what Java matches against).
    if !data.code_set.is_empty() {
        sub.code_set = data.code_set.iter().copied().collect();
    }
    sub.class_filter_mode = data.class_filter_mode;
    sub
}

/// A registered subscription as the wire's `SubscriptionData` (GET_CONSUMER_CONNECTION_LIST).
fn subscription_data(sub: &Subscription) -> SubscriptionData {
    let tags_set = if sub.is_tag_type() {
        crate::filter::TagExpression::parse(&sub.sub_string)
            .tags()
            .to_vec()
    } else {
        Vec::new()
    };
    SubscriptionData {
        class_filter_mode: sub.class_filter_mode,
        topic: sub.topic.clone(),
        sub_string: sub.sub_string.clone(),
        tags_set,
        code_set: sub.code_set.iter().copied().collect(),
        sub_version: sub.sub_version,
        expression_type: sub.expression_type.clone(),
    }
}

impl BrokerCore {
    /// CHECK_CLIENT_CONFIG: whether this broker would serve a subscription (Java's
    /// `ClientManageProcessor.checkClientConfig`): tags always; SQL92 when property
    /// filtering is on and the expression compiles.
    pub(super) fn on_check_client_config(&mut self, req: &RemotingCommand) -> Handled {
        let success = || {
            Ok(Some(RemotingCommand::response_to(
                req,
                response_code::SUCCESS,
                None,
            )))
        };
        if req.body.as_deref().is_none_or(<[u8]>::is_empty) {
            return success();
        }
        let body: CheckClientRequestBody = json_body(req)?;
        let Some(data) = body.subscription_data else {
            return success();
        };
        let subscription = subscription_of(&data);
        if subscription.is_tag_type() {
            return success();
        }
        if let Some(refusal) = self.property_filter_refusal(&subscription.expression_type) {
            return Err(refusal);
        }
        match self.with_filter(subscription).sql {
            Some(Ok(_)) => success(),
            Some(Err(error)) => Err(Failure::new(
                response_code::SUBSCRIPTION_PARSE_FAILED,
                format!("SQL92 expression `{}` {error}", data.sub_string),
            )),
            None => Err(Failure::new(
                response_code::SUBSCRIPTION_PARSE_FAILED,
                format!("unsupported filter type {}", data.expression_type),
            )),
        }
    }
}

/// A request's JSON body; a missing or unparsable one fails as Java's fastjson does.
fn json_body<T: DeserializeOwned>(req: &RemotingCommand) -> Result<T, Failure> {
    let body = req
        .body
        .as_deref()
        .ok_or_else(|| Failure::system("java.lang.NullPointerException: request body is null"))?;
    decode_json(body)
        .map_err(|e| Failure::system(format!("com.alibaba.fastjson.JSONException: {e}")))
}

/// What GET_BROKER_RUNTIME_INFO reports besides the store's own figures.
#[derive(Clone, Debug, Default)]
pub struct RuntimeStats {
    /// When the broker handled its first request (ms since the epoch).
    pub boot_ms: Option<i64>,
    /// Messages stored since then.
    pub puts: u64,
    /// Messages pulls returned since then.
    pub gets: u64,
}

/// A successful answer carrying `body` as JSON.
fn json_reply<T: serde::Serialize>(req: &RemotingCommand, body: &T) -> Handled {
    Ok(Some(
        RemotingCommand::response_to(req, response_code::SUCCESS, None)
            .with_body(encode_json(body)),
    ))
}

/// Result of [`BrokerCore::reset_offsets`]: the new offset of each queue and the pushes to the
/// group's clients, or the real broker's (response code, remark).
pub type ResetResult = Result<(BTreeMap<MessageQueue, i64>, Vec<Action>), (i32, String)>;

impl BrokerCore {
    pub(super) fn on_heartbeat(
        &mut self,
        conn: ConnId,
        req: &RemotingCommand,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) -> Handled {
        let data: HeartbeatData = json_body(req)?;
        let channel = ClientChannel {
            conn,
            client_id: data.client_id,
            language: req.language.name().to_owned(),
            version: req.version,
            last_update_ms: now_ms,
        };
        for consumer in data.consumer_data_set {
            if consumer.group_name.is_empty() {
                continue;
            }
            let group = consumer.group_name;
            self.ensure_group(&group);
            self.ensure_system_topic(&retry_topic(&group), 1, out);
            let registration = ConsumerRegistration {
                group,
                consume_type: consumer.consume_type,
                message_model: consumer.message_model,
                consume_from_where: consumer.consume_from_where,
                subscriptions: consumer
                    .subscription_data_set
                    .iter()
                    .filter(|sub| !sub.topic.is_empty())
                    .map(|data| self.with_filter(subscription_of(data)))
                    .collect(),
            };
            if let Some(change) = self
                .clients
                .register_consumer(channel.clone(), registration)
            {
                self.notify_ids_changed(&change.group, &change.notify, out);
            }
        }
        for producer in data.producer_data_set {
            if !producer.group_name.is_empty() {
                self.clients
                    .register_producer(&producer.group_name, channel.clone());
            }
        }
        let header = HeartbeatResponseHeader {
            is_support_heart_beat_v2: Some(true),
            is_sub_change: Some(true),
        };
        Ok(Some(
            RemotingCommand::response_to(req, response_code::SUCCESS, None).with_header(&header),
        ))
    }

    pub(super) fn on_unregister(
        &mut self,
        conn: ConnId,
        req: &RemotingCommand,
        out: &mut Vec<Action>,
    ) -> Handled {
        let header: UnregisterClientRequestHeader = read_header(req)?;
        if let Some(group) = &header.producer_group {
            self.clients.unregister_producer(group, conn);
        }
        if let Some(group) = &header.consumer_group {
            if let Some(change) = self.clients.unregister_consumer(group, conn) {
                self.notify_ids_changed(&change.group, &change.notify, out);
            }
        }
        Ok(Some(RemotingCommand::response_to(
            req,
            response_code::SUCCESS,
            None,
        )))
    }

    pub(super) fn on_consumer_list(&mut self, req: &RemotingCommand) -> Handled {
        let GetConsumerListByGroupRequestHeader {
            consumer_group: group,
        } = read_header(req)?;
        let ids = self
            .clients
            .consumer_group(&group)
            .map(|g| g.client_ids())
            .unwrap_or_default();
        if ids.is_empty() {
            return Err(Failure::system(format!(
                "no consumer for this group, {group}"
            )));
        }
        let body = ConsumerListBody {
            consumer_id_list: ids,
        };
        Ok(Some(
            RemotingCommand::response_to(req, response_code::SUCCESS, None)
                .with_body(encode_json(&body)),
        ))
    }

    /// GET_CONSUMER_CONNECTION_LIST (admin `consumerConnection`): the group's connections and
    /// what it declared in its heartbeats; CONSUMER_NOT_ONLINE when it has no member here (Java
    /// `AdminBrokerProcessor.getConsumerConnectionList`).
    pub(super) fn on_consumer_connections(&mut self, req: &RemotingCommand) -> Handled {
        let GetConsumerConnectionListRequestHeader {
            consumer_group: group,
        } = read_header(req)?;
        let info = self.clients.consumer_group(&group).ok_or_else(|| {
            Failure::new(
                response_code::CONSUMER_NOT_ONLINE,
                format!("the consumer group[{group}] not online"),
            )
        })?;
        let body = ConsumerConnection {
            connection_set: info
                .channels
                .values()
                .map(|channel| ClientConnection {
                    client_id: channel.client_id.clone(),
                    client_addr: self.peer(channel.conn).to_string(),
                    language: channel.language.clone(),
                    version: channel.version,
                })
                .collect(),
            subscription_table: info
                .subscriptions
                .iter()
                .map(|(topic, sub)| (topic.clone(), subscription_data(sub)))
                .collect(),
            consume_type: info.consume_type,
            message_model: info.message_model,
            consume_from_where: info.consume_from_where,
        };
        Ok(Some(
            RemotingCommand::response_to(req, response_code::SUCCESS, None)
                .with_body(encode_json(&body)),
        ))
    }

    pub(super) fn on_lock(&mut self, req: &RemotingCommand, now_ms: i64) -> Handled {
        let body: LockBatchRequestBody = json_body(req)?;
        let locked =
            self.locks
                .try_lock_batch(&body.consumer_group, &body.mq_set, &body.client_id, now_ms);
        let body = LockBatchResponseBody {
            lock_ok_mq_set: locked.into_iter().collect(),
        };
        Ok(Some(
            RemotingCommand::response_to(req, response_code::SUCCESS, None)
                .with_body(encode_json(&body)),
        ))
    }

    pub(super) fn on_unlock(&mut self, req: &RemotingCommand) -> Handled {
        let body: UnlockBatchRequestBody = json_body(req)?;
        self.locks
            .unlock_batch(&body.consumer_group, &body.mq_set, &body.client_id);
        Ok(Some(RemotingCommand::response_to(
            req,
            response_code::SUCCESS,
            None,
        )))
    }

    pub(super) fn on_update_topic(
        &mut self,
        req: &RemotingCommand,
        out: &mut Vec<Action>,
    ) -> Handled {
        let UpdateTopicRequestHeader {
            topic,
            read_queue_nums: read,
            write_queue_nums: write,
            perm,
            topic_sys_flag,
            order,
            ..
        } = read_header(req)?;
        let topic_sys_flag = topic_sys_flag.unwrap_or(0);
        validate_topic(&topic)?;
        if topic == super::AUTO_CREATE_TOPIC || topic == super::schedule::SCHEDULE_TOPIC {
            return Err(Failure::system(format!(
                "The topic[{topic}] is conflict with system topic."
            )));
        }
        if read < 0 || write < 0 {
            return Err(Failure::new(
                response_code::INVALID_PARAMETER,
                format!("invalid queue nums: read {read}, write {write}"),
            ));
        }
        out.extend(self.create_topic(TopicConfig {
            topic_name: topic,
            read_queue_nums: read,
            write_queue_nums: write,
            perm,
            topic_sys_flag,
            order,
        }));
        Ok(Some(RemotingCommand::response_to(
            req,
            response_code::SUCCESS,
            None,
        )))
    }

    /// GET_TOPIC_CONFIG: one topic's configuration, TOPIC_NOT_EXIST when this broker has none.
    pub(super) fn on_get_topic_config(&mut self, req: &RemotingCommand) -> Handled {
        let GetTopicConfigRequestHeader { topic } = read_header(req)?;
        match self.store.topic(&topic) {
            Some(config) => json_reply(req, config),
            None => Err(Failure::new(
                response_code::TOPIC_NOT_EXIST,
                format!("No topic in this broker. topic: {topic}"),
            )),
        }
    }

    /// GET_ALL_TOPIC_CONFIG: every topic of this broker, system topics included.
    pub(super) fn on_get_all_topic_config(&mut self, req: &RemotingCommand) -> Handled {
        let table = TopicConfigTable {
            topic_config_table: self
                .store
                .topics()
                .map(|t| (t.topic_name.clone(), t.clone()))
                .collect(),
        };
        json_reply(req, &table)
    }

    /// GET_TOPIC_STATS_INFO: each queue's stored range and last store time.
    pub(super) fn on_topic_stats(&mut self, req: &RemotingCommand) -> Handled {
        let GetTopicConfigRequestHeader { topic } = read_header(req)?;
        let config = self.store.topic(&topic).cloned().ok_or_else(|| {
            Failure::new(
                response_code::TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist"),
            )
        })?;
        let queues = config.read_queue_nums.max(config.write_queue_nums);
        let offset_table = (0..queues)
            .map(|queue_id| {
                let (min, max) = (
                    self.store.min_offset(&topic, queue_id),
                    self.store.max_offset(&topic, queue_id),
                );
                let last = if max > min {
                    self.store.store_time_at(&topic, queue_id, max - 1)
                } else {
                    None
                };
                let queue = MessageQueue::new(&topic, &self.config.broker_name, queue_id);
                let offsets = TopicOffset {
                    min_offset: min,
                    max_offset: max,
                    last_update_timestamp: last.unwrap_or(0),
                };
                (queue, offsets)
            })
            .collect();
        json_reply(req, &TopicStatsTable { offset_table })
    }

    /// DELETE_TOPIC_IN_BROKER: the topic's queues, configuration and committed offsets go;
    /// its records stay in the commit log until it is cleaned, as on a real broker. Deleting
    /// a topic this broker does not have succeeds.
    pub(super) fn on_delete_topic(
        &mut self,
        req: &RemotingCommand,
        out: &mut Vec<Action>,
    ) -> Handled {
        let DeleteTopicRequestHeader { topic } = read_header(req)?;
        if topic.trim().is_empty() {
            return Err(Failure::new(
                response_code::INVALID_PARAMETER,
                "The specified topic is blank.",
            ));
        }
        if topic == super::AUTO_CREATE_TOPIC || topic == super::schedule::SCHEDULE_TOPIC {
            return Err(Failure::new(
                response_code::INVALID_PARAMETER,
                format!("The topic[{topic}] is conflict with system topic."),
            ));
        }
        if self.store.delete_topic(&topic) {
            self.offsets.remove_topic(&topic);
            self.data_changed = true;
            out.push(Action::TopicsChanged);
        }
        Ok(Some(RemotingCommand::response_to(
            req,
            response_code::SUCCESS,
            None,
        )))
    }

    /// GET_ALL_SUBSCRIPTIONGROUP_CONFIG: every group this broker knows.
    pub(super) fn on_get_all_groups(&mut self, req: &RemotingCommand) -> Handled {
        let table = SubscriptionGroupTable {
            subscription_group_table: self.groups.clone(),
        };
        json_reply(req, &table)
    }

    /// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the body is the group's configuration.
    pub(super) fn on_put_group(&mut self, req: &RemotingCommand) -> Handled {
        let config: SubscriptionGroupConfig = json_body(req)?;
        super::validate_group(&config.group_name)?;
        self.groups.insert(config.group_name.clone(), config);
        self.data_changed = true;
        Ok(Some(RemotingCommand::response_to(
            req,
            response_code::SUCCESS,
            None,
        )))
    }

    /// DELETE_SUBSCRIPTIONGROUP: the group's configuration, and its committed offsets with
    /// `cleanOffset`. Members still running create it again with their next heartbeat.
    pub(super) fn on_delete_group(&mut self, req: &RemotingCommand) -> Handled {
        let DeleteSubscriptionGroupRequestHeader {
            group_name,
            clean_offset,
        } = read_header(req)?;
        self.groups.remove(&group_name);
        if clean_offset {
            self.offsets.remove_group(&group_name);
        }
        self.data_changed = true;
        Ok(Some(RemotingCommand::response_to(
            req,
            response_code::SUCCESS,
            None,
        )))
    }

    /// GET_BROKER_RUNTIME_INFO: the figures a Java broker reports that this one keeps, under
    /// Java's key names (`msgPutTotalTodayNow` counts since the broker started).
    pub(super) fn on_runtime_info(&mut self, req: &RemotingCommand, now_ms: i64) -> Handled {
        let boot_ms = self.stats.boot_ms.unwrap_or(now_ms);
        let uptime =
            std::time::Duration::from_secs(u64::try_from((now_ms - boot_ms) / 1000).unwrap_or(0));
        let earliest = self
            .store
            .topics()
            .flat_map(|t| {
                let queues = t.read_queue_nums.max(t.write_queue_nums);
                (0..queues).map(move |q| (t.topic_name.as_str(), q))
            })
            .map(|(topic, queue_id)| self.store.earliest_store_time(topic, queue_id))
            .filter(|t| *t > 0)
            .min()
            .unwrap_or(0);
        let table: BTreeMap<String, String> = [
            (
                "brokerVersionDesc",
                format!("rocketmq-actor-embedded-{}", env!("CARGO_PKG_VERSION")),
            ),
            ("brokerActive", "true".to_owned()),
            ("bootTimestamp", boot_ms.to_string()),
            ("runtime", humantime::format_duration(uptime).to_string()),
            ("commitLogMinOffset", "0".to_owned()),
            (
                "commitLogMaxOffset",
                self.store.commit_log_max_offset().to_string(),
            ),
            ("msgPutTotalTodayNow", self.stats.puts.to_string()),
            ("msgGetTotalTodayNow", self.stats.gets.to_string()),
            ("earliestMessageTimeStamp", earliest.to_string()),
            ("topicCount", self.store.topics().count().to_string()),
            ("groupCount", self.groups.len().to_string()),
            ("clientConnections", self.peers.len().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        json_reply(req, &KvTable { table })
    }

    /// Checks that a group member can take a client call and returns its connection.
    fn callable_client(&self, group: &str, client_id: &str) -> Result<ConnId, Failure> {
        let channel = self.clients.conn_of(group, client_id).ok_or_else(|| {
            Failure::system(format!("The Consumer <{group}> <{client_id}> not online"))
        })?;
        if channel.version < VERSION_CLIENT_CALLS {
            return Err(Failure::system(format!(
                "The Consumer <{group}> Version <{}> too low to finish, please upgrade it to V3_1_8_SNAPSHOT",
                channel.version
            )));
        }
        Ok(channel.conn)
    }

    /// The body of CONSUME_MESSAGE_DIRECTLY: the stored record named by an offset message id
    /// (or, as a convenience, by its UNIQ_KEY).
    fn record_for_msg_id(&self, msg_id: &str) -> Result<Vec<u8>, Failure> {
        if let Ok(id) = decode_offset_msg_id(msg_id) {
            if let Some(raw) = self.store.record_at_physical(id.commit_log_offset) {
                return Ok(raw.to_vec());
            }
        }
        // A byte search finds candidates cheaply; decoding confirms the id is the UNIQ_KEY
        // property and not text that happens to sit in a body.
        let needle = format!("UNIQ_KEY\u{1}{msg_id}\u{2}");
        self.store
            .records()
            .filter(|raw| contains_bytes(raw, needle.as_bytes()))
            .find(|raw| {
                record::decode_stored(raw)
                    .is_ok_and(|m| m.message.properties.get("UNIQ_KEY") == Some(msg_id))
            })
            .map(<[u8]>::to_vec)
            .ok_or_else(|| Failure::system(format!("can not find message by msgId {msg_id}")))
    }

    fn start_call(
        &mut self,
        conn: ConnId,
        mut command: RemotingCommand,
        now_ms: i64,
        waiter: Waiter,
        out: &mut Vec<Action>,
    ) {
        let opaque = self.next_opaque();
        command.opaque = opaque;
        command.flag = 0;
        self.pending.insert(
            opaque,
            PendingCall {
                conn,
                deadline_ms: now_ms.saturating_add(self.config.client_call_timeout_ms),
                waiter,
            },
        );
        out.push(Action::Send { conn, command });
    }

    /// GET_CONSUMER_RUNNING_INFO / CONSUME_MESSAGE_DIRECTLY sent to the broker by an admin tool:
    /// forwarded to the named client, whose answer goes back to the admin.
    pub(super) fn on_forward_to_client(
        &mut self,
        conn: ConnId,
        req: &RemotingCommand,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) -> Handled {
        let mut command = req.clone();
        if req.code == request_code::CONSUME_MESSAGE_DIRECTLY {
            let header: ConsumeMessageDirectlyRequestHeader = read_header(req)?;
            let client_id = needed(header.client_id, "clientId")?;
            let target = self.callable_client(&header.consumer_group, &client_id)?;
            let msg_id = needed(header.msg_id, "msgId")?;
            let raw = self.record_for_msg_id(&msg_id)?;
            command = command
                .with_ext("brokerName", self.config.broker_name.clone())
                .with_body(bytes::Bytes::from(raw));
            self.forward(conn, target, req.opaque, command, now_ms, out);
        } else {
            let header: GetConsumerRunningInfoRequestHeader = read_header(req)?;
            let target = self.callable_client(&header.consumer_group, &header.client_id)?;
            self.forward(conn, target, req.opaque, command, now_ms, out);
        }
        Ok(None)
    }

    /// Sends `command` to the client on `target`; its answer goes back to `origin` under the
    /// opaque the origin used.
    fn forward(
        &mut self,
        origin: ConnId,
        target: ConnId,
        opaque: i32,
        command: RemotingCommand,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) {
        let waiter = Waiter::Forward {
            conn: origin,
            opaque,
        };
        self.start_call(target, command, now_ms, waiter, out);
    }

    /// INVOKE_BROKER_TO_RESET_OFFSET (admin "reset offset by time"): computes every queue's
    /// offset at the timestamp, pushes RESET_CONSUMER_CLIENT_OFFSET to the group's live clients
    /// and answers the table (Java `AdminBrokerProcessor.resetOffset`).
    pub(super) fn on_invoke_reset_offset(
        &mut self,
        req: &RemotingCommand,
        out: &mut Vec<Action>,
    ) -> Handled {
        let header: ResetOffsetRequestHeader = read_header(req)?;
        let (table, actions) = self
            .reset_offsets(
                &header.topic,
                &header.group,
                header.timestamp,
                header.is_force,
            )
            .map_err(|(code, remark)| Failure::new(code, remark))?;
        out.extend(actions);
        let body = ResetOffsetBody {
            offset_table: table.into_iter().collect(),
        }
        .encode();
        Ok(Some(
            RemotingCommand::response_to(req, response_code::SUCCESS, None).with_body(body),
        ))
    }

    pub(super) fn on_client_response(
        &mut self,
        _conn: ConnId,
        response: RemotingCommand,
        out: &mut Vec<Action>,
    ) {
        if let Some(call) = self.pending.remove(&response.opaque) {
            self.finish_call(call, Ok(response), out);
        }
    }

    pub(super) fn finish_call(
        &mut self,
        call: PendingCall,
        result: Result<RemotingCommand, String>,
        out: &mut Vec<Action>,
    ) {
        match call.waiter {
            Waiter::Token(u64::MAX) => {}
            Waiter::Token(token) => out.push(Action::CallDone { token, result }),
            Waiter::Forward { conn, opaque } => {
                let command = match result {
                    Ok(mut response) => {
                        response.opaque = opaque;
                        response
                    }
                    Err(reason) => RemotingCommand::response(response_code::SYSTEM_ERROR, None)
                        .with_opaque(opaque)
                        .with_remark(format!("invoke consumer failed: {reason}")),
                };
                out.push(Action::Send { conn, command });
            }
        }
    }

    /// Asks a client of `group` for its running info; the answer comes back as
    /// [`Action::CallDone`] with `token`.
    pub fn request_running_info(
        &mut self,
        token: u64,
        group: &str,
        client_id: &str,
        jstack: bool,
        now_ms: i64,
    ) -> Result<Vec<Action>, String> {
        let conn = self
            .callable_client(group, client_id)
            .map_err(|f| f.remark)?;
        let header = GetConsumerRunningInfoRequestHeader {
            consumer_group: group.to_owned(),
            client_id: client_id.to_owned(),
            jstack_enable: jstack,
        };
        let command =
            RemotingCommand::request_with_header(request_code::GET_CONSUMER_RUNNING_INFO, &header);
        let mut out = Vec::new();
        self.start_call(conn, command, now_ms, Waiter::Token(token), &mut out);
        Ok(out)
    }

    /// Asks a client to consume one stored message now (`msg_id` = offset message id or
    /// UNIQ_KEY); the answer comes back as [`Action::CallDone`] with `token`.
    pub fn request_consume_directly(
        &mut self,
        token: u64,
        group: &str,
        client_id: &str,
        msg_id: &str,
        now_ms: i64,
    ) -> Result<Vec<Action>, String> {
        let conn = self
            .callable_client(group, client_id)
            .map_err(|f| f.remark)?;
        let raw = self.record_for_msg_id(msg_id).map_err(|f| f.remark)?;
        let topic = record::decode_stored(&raw)
            .map(|m| String::from(m.message.topic))
            .unwrap_or_default();
        let header = ConsumeMessageDirectlyRequestHeader {
            consumer_group: group.to_owned(),
            client_id: Some(client_id.to_owned()),
            msg_id: Some(msg_id.to_owned()),
            broker_name: Some(self.config.broker_name.clone()),
            topic: Some(topic),
            topic_sys_flag: None,
            group_sys_flag: None,
        };
        let command =
            RemotingCommand::request_with_header(request_code::CONSUME_MESSAGE_DIRECTLY, &header)
                .with_body(bytes::Bytes::from(raw));
        let mut out = Vec::new();
        self.start_call(conn, command, now_ms, Waiter::Token(token), &mut out);
        Ok(out)
    }

    /// Resets a group's offsets on `topic` to the first message stored at or after
    /// `timestamp_ms` (−1 = the end), as `Broker2Client.resetOffset`: each queue moves back only
    /// (unless `force`), and every member gets a oneway RESET_CONSUMER_CLIENT_OFFSET with the
    /// object-key offset table. Returns the new offsets and the pushes.
    pub fn reset_offsets(
        &mut self,
        topic: &str,
        group: &str,
        timestamp_ms: i64,
        force: bool,
    ) -> ResetResult {
        let Some(config) = self.store.topic(topic).cloned() else {
            return Err((
                response_code::TOPIC_NOT_EXIST,
                format!(
                    "[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
                ),
            ));
        };
        let mut table = BTreeMap::new();
        for queue_id in 0..config.write_queue_nums {
            let Some(consumer_offset) = self.offsets.query(group, topic, queue_id) else {
                return Err((
                    response_code::SYSTEM_ERROR,
                    format!("THe consumer group <{group}> not exist"),
                ));
            };
            let target = if timestamp_ms == -1 {
                self.store.max_offset(topic, queue_id)
            } else {
                self.store
                    .search_offset_by_time(topic, queue_id, timestamp_ms, false)
            }
            .max(0);
            let offset = if force || target < consumer_offset {
                target
            } else {
                consumer_offset
            };
            table.insert(
                MessageQueue::new(topic, self.config.broker_name.clone(), queue_id),
                offset,
            );
        }
        let members: Vec<ClientChannel> = self
            .clients
            .consumer_group(group)
            .map(|g| g.channels.values().cloned().collect())
            .unwrap_or_default();
        if members.is_empty() {
            return Err((
                response_code::CONSUMER_NOT_ONLINE,
                format!(
                    "Consumer not online, so can not reset offset, Group: {group} Topic: {topic} Timestamp: {timestamp_ms}"
                ),
            ));
        }
        if let Some(old) = members.iter().find(|m| m.version < VERSION_RESET_OFFSET) {
            return Err((
                response_code::SYSTEM_ERROR,
                format!(
                    "the client does not support this feature. version={}",
                    old.version
                ),
            ));
        }
        let body = ResetOffsetBody {
            offset_table: table.iter().map(|(mq, o)| (mq.clone(), *o)).collect(),
        }
        .encode();
        // Broker2Client never sets `isForce` on the push (the clients only ever see false).
        let header = ResetOffsetRequestHeader {
            topic: topic.to_owned(),
            group: group.to_owned(),
            queue_id: -1,
            offset: None,
            timestamp: timestamp_ms,
            is_force: false,
        };
        let mut out = Vec::new();
        for member in members {
            let opaque = self.next_opaque();
            let mut command = RemotingCommand::request_with_header(
                request_code::RESET_CONSUMER_CLIENT_OFFSET,
                &header,
            )
            .with_opaque(opaque)
            .with_body(body.clone());
            command.mark_oneway();
            out.push(Action::Send {
                conn: member.conn,
                command,
            });
        }
        Ok((table, out))
    }
}

/// Whether `needle` occurs in `haystack`.
fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}
