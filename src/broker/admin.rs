//! Client management (heartbeat, unregister, consumer list), queue locks, topic admin, and the
//! calls the broker makes into clients (reset offsets, running info, consume directly).

use super::clients::{ClientChannel, ConsumerRegistration, Subscription};
use super::pull::subscription_from_expression;
use super::record::{self, parse_offset_message_id};
use super::store::TopicConfig;
use super::{
    field, message_queue_offset_table_json, optional_num, required, required_num, retry_topic,
    validate_topic, Action, BrokerCore, ConnId, Failure, Handled, PendingCall, Waiter,
};
use crate::message::MessageQueue;
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::RemotingCommand;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// `MQVersion.V3_0_7_SNAPSHOT`: oldest client that understands RESET_CONSUMER_CLIENT_OFFSET.
const VERSION_RESET_OFFSET: i32 = 28;
/// `MQVersion.V3_1_8_SNAPSHOT`: oldest client answering running-info / consume-directly calls.
const VERSION_CLIENT_CALLS: i32 = 62;

fn json_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn json_i64(v: &Value, key: &str) -> Option<i64> {
    let value = v.get(key)?;
    value
        .as_i64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
}

fn parse_subscription(v: &Value) -> Option<Subscription> {
    let topic = json_str(v, "topic")?;
    let expression_type = json_str(v, "expressionType");
    let mut sub = subscription_from_expression(
        topic,
        json_str(v, "subString"),
        expression_type,
        json_i64(v, "subVersion").unwrap_or(0),
    );
    // The client's codeSet is authoritative when present (it is what Java matches against).
    if let Some(codes) = v.get("codeSet").and_then(Value::as_array) {
        let set: BTreeSet<i32> = codes
            .iter()
            .filter_map(|c| c.as_i64().and_then(|c| i32::try_from(c).ok()))
            .collect();
        if !set.is_empty() || sub.sub_string == "*" {
            sub.code_set = set;
        }
    }
    sub.class_filter_mode = v
        .get("classFilterMode")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Some(sub)
}

fn parse_json_body(req: &RemotingCommand) -> Result<Value, Failure> {
    let body = req
        .body
        .as_deref()
        .ok_or_else(|| Failure::system("java.lang.NullPointerException: request body is null"))?;
    serde_json::from_slice(body).map_err(|e| {
        Failure::system(format!("com.alibaba.fastjson.JSONException: {e}"))
    })
}

fn parse_mq_set(v: &Value) -> Vec<MessageQueue> {
    v.get("mqSet")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|mq| serde_json::from_value::<MessageQueue>(mq.clone()).ok())
                .collect()
        })
        .unwrap_or_default()
}

impl BrokerCore {
    pub(super) fn on_heartbeat(
        &mut self,
        conn: ConnId,
        req: &RemotingCommand,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) -> Handled {
        let data = parse_json_body(req)?;
        let client_id = json_str(&data, "clientID").unwrap_or("").to_owned();
        let channel = ClientChannel {
            conn,
            client_id,
            language: req.language.name().to_owned(),
            version: req.version,
            last_update_ms: now_ms,
        };
        let consumers = data
            .get("consumerDataSet")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for consumer in &consumers {
            let Some(group) = json_str(consumer, "groupName").map(str::to_owned) else {
                continue;
            };
            self.ensure_group(&group);
            self.ensure_system_topic(&retry_topic(&group), 1, out);
            let subscriptions = consumer
                .get("subscriptionDataSet")
                .and_then(Value::as_array)
                .map(|subs| subs.iter().filter_map(parse_subscription).collect())
                .unwrap_or_default();
            let registration = ConsumerRegistration {
                group,
                consume_type: json_str(consumer, "consumeType").unwrap_or("").to_owned(),
                message_model: json_str(consumer, "messageModel")
                    .unwrap_or("CLUSTERING")
                    .to_owned(),
                consume_from_where: json_str(consumer, "consumeFromWhere")
                    .unwrap_or("")
                    .to_owned(),
                subscriptions,
            };
            if let Some(change) = self.clients.register_consumer(channel.clone(), registration) {
                self.notify_ids_changed(&change.group, &change.notify, out);
            }
        }
        let producers = data
            .get("producerDataSet")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for producer in &producers {
            if let Some(group) = json_str(producer, "groupName") {
                self.clients.register_producer(group, channel.clone());
            }
        }
        Ok(Some(
            RemotingCommand::response_to(req, response_code::SUCCESS, None)
                .with_ext("IS_SUPPORT_HEART_BEAT_V2", "true")
                .with_ext("IS_SUB_CHANGE", "true"),
        ))
    }

    pub(super) fn on_unregister(
        &mut self,
        conn: ConnId,
        req: &RemotingCommand,
        out: &mut Vec<Action>,
    ) -> Handled {
        required(req, &["clientID"])?;
        if let Some(group) = field(req, &["producerGroup"]) {
            self.clients.unregister_producer(group, conn);
        }
        if let Some(group) = field(req, &["consumerGroup"]).map(str::to_owned) {
            if let Some(change) = self.clients.unregister_consumer(&group, conn) {
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
        let group = required(req, &["consumerGroup"])?;
        let ids = self
            .clients
            .consumer_group(group)
            .map(|g| g.client_ids())
            .unwrap_or_default();
        if ids.is_empty() {
            return Err(Failure::system(format!(
                "no consumer for this group, {group}"
            )));
        }
        let body = serde_json::json!({ "consumerIdList": ids }).to_string();
        Ok(Some(
            RemotingCommand::response_to(req, response_code::SUCCESS, None)
                .with_body(bytes::Bytes::from(body)),
        ))
    }

    pub(super) fn on_lock(&mut self, req: &RemotingCommand, now_ms: i64) -> Handled {
        let body = parse_json_body(req)?;
        let group = json_str(&body, "consumerGroup").unwrap_or("").to_owned();
        let client_id = json_str(&body, "clientId").unwrap_or("").to_owned();
        let queues = parse_mq_set(&body);
        let locked = self.locks.try_lock_batch(&group, &queues, &client_id, now_ms);
        let locked: Vec<&MessageQueue> = locked.iter().collect();
        let body = serde_json::json!({ "lockOKMQSet": locked }).to_string();
        Ok(Some(
            RemotingCommand::response_to(req, response_code::SUCCESS, None)
                .with_body(bytes::Bytes::from(body)),
        ))
    }

    pub(super) fn on_unlock(&mut self, req: &RemotingCommand) -> Handled {
        let body = parse_json_body(req)?;
        let group = json_str(&body, "consumerGroup").unwrap_or("").to_owned();
        let client_id = json_str(&body, "clientId").unwrap_or("").to_owned();
        let queues = parse_mq_set(&body);
        self.locks.unlock_batch(&group, &queues, &client_id);
        Ok(Some(RemotingCommand::response_to(
            req,
            response_code::SUCCESS,
            None,
        )))
    }

    pub(super) fn on_update_topic(&mut self, req: &RemotingCommand, out: &mut Vec<Action>) -> Handled {
        let topic = required(req, &["topic"])?.to_owned();
        let read: i32 = required_num(req, &["readQueueNums"])?;
        let write: i32 = required_num(req, &["writeQueueNums"])?;
        let perm: i32 = required_num(req, &["perm"])?;
        let topic_sys_flag: i32 = optional_num(req, &["topicSysFlag"])?.unwrap_or(0);
        let order = field(req, &["order"]).is_some_and(|o| o.eq_ignore_ascii_case("true"));
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
        if let Some((_, offset)) = parse_offset_message_id(msg_id) {
            if let Some(raw) = self.store.record_at_physical(offset) {
                return Ok(raw.to_vec());
            }
        }
        let needle = format!("UNIQ_KEY\u{1}{msg_id}\u{2}");
        self.store
            .records()
            .find(|raw| {
                record::decode_record(raw).is_ok_and(|r| r.properties.contains(needle.as_str()))
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
        let group = required(req, &["consumerGroup"])?.to_owned();
        let client_id = required(req, &["clientId"])?.to_owned();
        let target = self.callable_client(&group, &client_id)?;
        let mut command = req.clone();
        if req.code == request_code::CONSUME_MESSAGE_DIRECTLY {
            let msg_id = required(req, &["msgId"])?.to_owned();
            let raw = self.record_for_msg_id(&msg_id)?;
            command = command
                .with_ext("brokerName", self.config.broker_name.clone())
                .with_body(bytes::Bytes::from(raw));
        }
        self.start_call(
            target,
            command,
            now_ms,
            Waiter::Forward {
                conn,
                opaque: req.opaque,
            },
            out,
        );
        Ok(None)
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
                    Err(reason) => {
                        RemotingCommand::response(response_code::SYSTEM_ERROR, None)
                            .with_opaque(opaque)
                            .with_remark(format!("invoke consumer failed: {reason}"))
                    }
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
        let command = RemotingCommand::request(request_code::GET_CONSUMER_RUNNING_INFO)
            .with_ext("consumerGroup", group)
            .with_ext("clientId", client_id)
            .with_ext("jstackEnable", jstack.to_string());
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
        let topic = record::decode_record(&raw)
            .map(|r| r.topic)
            .unwrap_or_default();
        let command = RemotingCommand::request(request_code::CONSUME_MESSAGE_DIRECTLY)
            .with_ext("consumerGroup", group)
            .with_ext("clientId", client_id)
            .with_ext("msgId", msg_id)
            .with_ext("brokerName", self.config.broker_name.clone())
            .with_ext("topic", topic)
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
    ) -> Result<(BTreeMap<MessageQueue, i64>, Vec<Action>), (i32, String)> {
        let Some(config) = self.store.topic(topic).cloned() else {
            return Err((
                response_code::TOPIC_NOT_EXIST,
                format!("[reset-offset] reset offset failed, no topic in this broker. topic={topic}"),
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
                format!("the client does not support this feature. version={}", old.version),
            ));
        }
        let body = format!(
            "{{\"offsetTable\":{}}}",
            message_queue_offset_table_json(&table)
        );
        let mut out = Vec::new();
        for member in members {
            let opaque = self.next_opaque();
            let mut command = RemotingCommand::request(request_code::RESET_CONSUMER_CLIENT_OFFSET)
                .with_ext("topic", topic)
                .with_ext("group", group)
                .with_ext("timestamp", timestamp_ms.to_string())
                .with_ext("isForce", "false")
                .with_ext("queueId", "-1")
                .with_opaque(opaque)
                .with_body(bytes::Bytes::from(body.clone()));
            command.mark_oneway();
            out.push(Action::Send {
                conn: member.conn,
                command,
            });
        }
        Ok((table, out))
    }
}
