//! SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE, CONSUMER_SEND_MSG_BACK and the
//! scheduled-message store behind retries and delayed messages.

use super::record;
use super::schedule::SCHEDULE_TOPIC;
use super::store::{perm, NewMessage, PutError, PutResult, TopicConfig};
use super::{
    dlq_topic, header_failure, read_header, retry_topic, validate_topic, Action, BrokerCore,
    ConnId, Failure, Handled, DLQ_PREFIX, RETRY_PREFIX,
};
use crate::filter::tags_code;
use crate::message::encode::MAX_PROPERTIES_LEN;
use crate::message::{offset_msg_id, property, Properties};
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::header::{
    CommandHeader, ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader,
    SendMessageResponseHeader,
};
use crate::protocol::RemotingCommand;

/// `MQVersion.V3_4_9`: from this client version on, `maxReconsumeTimes` in the request counts.
const VERSION_HONOURS_MAX_RECONSUME: i32 = 121;
/// The real broker's default region id, echoed in send responses.
const REGION_ID: &str = "DefaultRegion";
/// The suffix Java appends to many error remarks.
pub(crate) const FAQ_SUFFIX: &str =
    "\nSee http://rocketmq.apache.org/docs/faq/ for further details.";

/// The send header under the key set the request code implies: one-letter V2 keys for
/// SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE, long V1 keys for SEND_MESSAGE — each accepting the
/// other set when only that one is present, as the embedded broker always has.
fn send_header(req: &RemotingCommand) -> Result<SendMessageRequestHeader, Failure> {
    let ext = req.ext_fields_or_empty();
    let v1_only = ext.contains_key("topic") && !ext.contains_key("b");
    let result = if req.code == request_code::SEND_MESSAGE || v1_only {
        SendMessageRequestHeader::read_ext(ext)
    } else {
        SendMessageRequestHeader::read_v2(ext)
    };
    result.map_err(header_failure)
}

/// Where a stored message landed, for the send response.
struct Stored {
    put: PutResult,
    msg_id: String,
}

impl BrokerCore {
    /// Stores a message, diverting it to the schedule topic when it carries a positive DELAY
    /// level, and wakes long polls of the queue it lands in.
    fn put_message(
        &mut self,
        mut msg: NewMessage,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) -> Result<Stored, Failure> {
        let props = &mut msg.properties;
        let delay_level = props
            .get(property::DELAY)
            .and_then(|d| d.trim().parse::<i32>().ok())
            .unwrap_or(0);
        // Transaction half/rollback messages are never scheduled (sys flag bits 2-3 = 0x4/0xC).
        let tran_type = msg.sys_flag & 0xC;
        if delay_level > 0 && (tran_type == 0 || tran_type == 0x8) {
            let level = delay_level.min(self.config.delay_levels.max_level());
            let delay = self.config.delay_levels.delay_ms(level).unwrap_or(0);
            props.insert(property::REAL_TOPIC, &msg.topic);
            props.insert(property::REAL_QID, msg.queue_id.to_string());
            msg.topic = SCHEDULE_TOPIC.to_owned();
            msg.queue_id = level - 1;
            msg.tags_code = now_ms.saturating_add(delay);
        }
        // The raw text is never shorter than what gets stored, so only a long one needs the
        // exact (scanning) length.
        if msg.properties.raw_wire().len() > MAX_PROPERTIES_LEN {
            let properties_len = msg.properties.wire_len();
            if properties_len > MAX_PROPERTIES_LEN {
                return Err(Failure::new(
                    response_code::MESSAGE_ILLEGAL,
                    format!("message properties length too long {properties_len}"),
                ));
            }
        }
        let queue_id = msg.queue_id;
        let tags = msg.tags_code;
        // Only a parked pull needs the topic after the message is moved into the store.
        let wake_topic =
            (!self.held.is_empty() && msg.topic != SCHEDULE_TOPIC).then(|| msg.topic.clone());
        // Expressions pulled with on this topic answer for the message now, once.
        let select_topic = self
            .selections
            .knows_topic(&msg.topic)
            .then(|| msg.topic.clone());
        let put = self.store.put(msg, now_ms).map_err(|e| match e {
            PutError::Record(e) => Failure::new(response_code::MESSAGE_ILLEGAL, e.to_string()),
            other => Failure::system(other.to_string()),
        })?;
        self.data_changed = true;
        self.stats.puts += 1;
        if let Some(topic) = select_topic {
            self.select_stored(&topic, queue_id, put.queue_offset);
        }
        if let Some(topic) = wake_topic {
            self.wake_held(&topic, queue_id, Some(tags), now_ms, out);
        }
        Ok(Stored {
            put,
            msg_id: offset_msg_id(self.store.store_host(), put.commit_log_offset),
        })
    }

    /// Makes sure the topic a send goes to exists, auto-creating it like
    /// `createTopicInSendMessageMethod`.
    fn topic_for_send(
        &mut self,
        topic: &str,
        default_topic: &str,
        default_queue_nums: i32,
        out: &mut Vec<Action>,
    ) -> Result<(), Failure> {
        if self.store.topic(topic).is_some() {
            return Ok(());
        }
        if topic.starts_with(RETRY_PREFIX) {
            self.ensure_system_topic(topic, 1, out);
        } else {
            let template = self
                .store
                .topic(default_topic)
                .filter(|t| t.perm & perm::INHERIT != 0)
                .cloned();
            if let Some(template) = template {
                let queues = default_queue_nums.min(template.write_queue_nums).max(1);
                let mut config = TopicConfig::new(topic, queues);
                config.perm = template.perm & !perm::INHERIT;
                self.store.upsert_topic(config);
                self.data_changed = true;
                out.push(Action::TopicsChanged);
            }
        }
        match self.store.topic(topic) {
            Some(_) => Ok(()),
            None => Err(Failure::new(
                response_code::TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist, apply first please!{FAQ_SUFFIX}"),
            )),
        }
    }

    fn pick_queue(&mut self, write_queue_nums: i32) -> i32 {
        self.queue_cursor = self.queue_cursor.wrapping_add(1);
        let n = u32::try_from(write_queue_nums.max(1)).unwrap_or(1);
        i32::try_from(self.queue_cursor % n).unwrap_or(0)
    }

    /// Common checks of SEND_MESSAGE(_V2) and SEND_BATCH_MESSAGE (`msgCheck`).
    fn check_send(
        &mut self,
        conn: ConnId,
        header: &SendMessageRequestHeader,
        out: &mut Vec<Action>,
    ) -> Result<i32, Failure> {
        let topic = header.topic.as_str();
        let queue_id = header.queue_id;
        validate_topic(topic)?;
        if topic == SCHEDULE_TOPIC || topic.starts_with("rmq_sys_") || topic.starts_with("RMQ_SYS_")
        {
            return Err(Failure::new(
                response_code::NO_PERMISSION,
                format!("Sending message to topic[{topic}] is forbidden."),
            ));
        }
        self.topic_for_send(
            topic,
            &header.default_topic,
            header.default_topic_queue_nums,
            out,
        )?;
        let Some(config) = self.store.topic(topic) else {
            return Err(Failure::system(format!("topic[{topic}] vanished")));
        };
        let (perm, read_queues, write_queues) =
            (config.perm, config.read_queue_nums, config.write_queue_nums);
        if perm & perm::WRITE == 0 {
            return Err(Failure::new(
                response_code::NO_PERMISSION,
                format!("the topic[{topic}] sending message is forbidden"),
            ));
        }
        if queue_id >= read_queues.max(write_queues) {
            return Err(Failure::system(format!(
                "request queueId[{queue_id}] is illegal, {config:?} Producer: {}",
                self.peer(conn)
            )));
        }
        Ok(if queue_id < 0 {
            self.pick_queue(write_queues)
        } else {
            queue_id
        })
    }

    fn check_body(&self, body: &bytes::Bytes) -> Result<(), Failure> {
        if body.len() > self.config.max_message_size {
            return Err(Failure::new(
                response_code::MESSAGE_ILLEGAL,
                format!(
                    "the message body size over max value, MAX: {}",
                    self.config.max_message_size
                ),
            ));
        }
        Ok(())
    }

    /// Adds what the broker stamps on every received message.
    fn stamp_properties(&self, props: &mut Properties, now_ms: i64) {
        props.insert(property::CLUSTER, &self.config.cluster_name);
        let has_id = matches!(props.get(property::UNIQ_KEY), Some(id) if !id.is_empty());
        if !has_id {
            props.insert(property::UNIQ_KEY, self.uniq_ids.next_id(now_ms));
        }
    }

    fn send_response(
        req: &RemotingCommand,
        msg_id: &str,
        queue_id: i32,
        queue_offset: i64,
    ) -> RemotingCommand {
        let header = SendMessageResponseHeader {
            msg_id: msg_id.to_owned(),
            queue_id,
            queue_offset,
            transaction_id: None,
            batch_uniq_id: None,
        };
        RemotingCommand::response_to(req, response_code::SUCCESS, None)
            .with_header(&header)
            .with_ext(property::MSG_REGION, REGION_ID)
            .with_ext(property::TRACE_ON, "true")
    }

    pub(super) fn on_send(
        &mut self,
        conn: ConnId,
        req: &RemotingCommand,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) -> Handled {
        let header = send_header(req)?;
        let reconsume_times = header.reconsume_times.unwrap_or(0);
        let max_reconsume = header.max_reconsume_times;
        let queue_id = self.check_send(conn, &header, out)?;
        let mut topic = header.topic;
        let body = req.body.clone().unwrap_or_default();
        self.check_body(&body)?;
        let mut props = Properties::parse(header.properties.as_deref().unwrap_or(""));
        let mut store_queue = queue_id;
        if let Some(group) = topic.strip_prefix(RETRY_PREFIX).map(str::to_owned) {
            // handleRetryAndDLQ: a client-side retry past the limit goes to the DLQ.
            self.ensure_group(&group);
            let mut max = self.config.retry_max_times;
            if req.version >= VERSION_HONOURS_MAX_RECONSUME {
                if let Some(m) = max_reconsume {
                    max = m;
                }
            }
            if reconsume_times >= max {
                topic = dlq_topic(&group);
                store_queue = 0;
                self.ensure_system_topic(&topic, 1, out);
            }
        }
        self.stamp_properties(&mut props, now_ms);
        let msg = NewMessage {
            topic,
            queue_id: store_queue,
            flag: header.flag,
            body,
            tags_code: i64::from(tags_code(props.get(property::TAGS))),
            properties: props,
            sys_flag: header.sys_flag,
            born_timestamp: header.born_timestamp,
            born_host: self.peer(conn),
            reconsume_times,
            prepared_transaction_offset: 0,
        };
        let stored = self.put_message(msg, now_ms, out)?;
        Ok(Some(Self::send_response(
            req,
            &stored.msg_id,
            queue_id,
            stored.put.queue_offset,
        )))
    }

    pub(super) fn on_send_batch(
        &mut self,
        conn: ConnId,
        req: &RemotingCommand,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) -> Handled {
        let header = send_header(req)?;
        let topic = header.topic.clone();
        if topic.len() > 127 {
            return Err(Failure::new(
                response_code::MESSAGE_ILLEGAL,
                format!("message topic length too long {}", topic.len()),
            ));
        }
        if topic.starts_with(RETRY_PREFIX) {
            return Err(Failure::new(
                response_code::MESSAGE_ILLEGAL,
                format!("batch request does not support retry group {topic}"),
            ));
        }
        let queue_id = self.check_send(conn, &header, out)?;
        let body = req.body.clone().unwrap_or_default();
        self.check_body(&body)?;
        let messages = crate::message::decode_batch_body(body).map_err(|e| {
            Failure::new(
                response_code::MESSAGE_ILLEGAL,
                format!("bad batch body: {e}"),
            )
        })?;
        if messages.is_empty() {
            return Err(Failure::new(
                response_code::MESSAGE_ILLEGAL,
                "the batch body holds no message",
            ));
        }
        let born_host = self.peer(conn);
        let mut ids = Vec::with_capacity(messages.len());
        let mut first_offset = None;
        for m in messages {
            let mut props = m.properties;
            self.stamp_properties(&mut props, now_ms);
            // A batch is stored as is: a DELAY inside it is not honoured by the real broker either.
            props.remove(property::DELAY);
            let msg = NewMessage {
                topic: topic.clone(),
                queue_id,
                flag: m.flag,
                body: m.body,
                tags_code: i64::from(tags_code(props.get(property::TAGS))),
                properties: props,
                sys_flag: header.sys_flag,
                born_timestamp: header.born_timestamp,
                born_host,
                reconsume_times: 0,
                prepared_transaction_offset: 0,
            };
            let stored = self.put_message(msg, now_ms, out)?;
            first_offset.get_or_insert(stored.put.queue_offset);
            ids.push(stored.msg_id);
        }
        Ok(Some(Self::send_response(
            req,
            &ids.join(","),
            queue_id,
            first_offset.unwrap_or(0),
        )))
    }

    pub(super) fn on_send_back(
        &mut self,
        req: &RemotingCommand,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) -> Handled {
        let ConsumerSendMsgBackRequestHeader {
            offset,
            group,
            delay_level,
            max_reconsume_times: max_reconsume,
            ..
        } = read_header(req)?;
        self.ensure_group(&group);
        let mut topic = retry_topic(&group);
        self.ensure_system_topic(&topic, 1, out);
        let original = self
            .store
            .record_at_physical(offset)
            .and_then(|raw| record::decode_stored(raw).ok())
            .ok_or_else(|| Failure::system(format!("look message by offset failed, {offset}")))?;
        let original_topic = original.message.topic;
        let mut props = original.message.properties;
        if props.get(property::RETRY_TOPIC).is_none() {
            props.insert(property::RETRY_TOPIC, &original_topic);
        }
        props.insert(property::WAIT, "false");
        let mut max = self.config.retry_max_times;
        if req.version >= VERSION_HONOURS_MAX_RECONSUME {
            if let Some(m) = max_reconsume {
                max = m;
            }
        }
        let origin_id = match props.get(property::ORIGIN_MESSAGE_ID) {
            Some(id) if !id.trim().is_empty() => id.to_owned(),
            _ => offset_msg_id(original.store_host, original.commit_log_offset),
        };
        props.insert(property::ORIGIN_MESSAGE_ID, &origin_id);
        if original.reconsume_times >= max || delay_level < 0 {
            topic = dlq_topic(&group);
            self.ensure_system_topic(&topic, 1, out);
            props.insert(property::DELAY, "0");
            let origin_topic = props
                .get(property::RETRY_TOPIC)
                .unwrap_or(&original_topic)
                .to_owned();
            props.insert(property::DLQ_ORIGIN_TOPIC, origin_topic);
            props.insert(property::DLQ_ORIGIN_MESSAGE_ID, &origin_id);
        } else {
            let level = if delay_level == 0 {
                3 + original.reconsume_times
            } else {
                delay_level
            };
            props.insert(property::DELAY, level.to_string());
        }
        let msg = NewMessage {
            topic,
            queue_id: 0,
            flag: original.message.flag,
            body: original.message.body,
            tags_code: i64::from(tags_code(props.get(property::TAGS))),
            properties: props,
            sys_flag: original.sys_flag,
            born_timestamp: original.born_timestamp,
            born_host: original.born_host,
            reconsume_times: original.reconsume_times.saturating_add(1),
            prepared_transaction_offset: 0,
        };
        self.put_message(msg, now_ms, out)?;
        Ok(Some(RemotingCommand::response_to(
            req,
            response_code::SUCCESS,
            None,
        )))
    }

    /// Moves every due scheduled message to its real topic (`ScheduleMessageService`).
    pub(super) fn deliver_due_scheduled(&mut self, now_ms: i64, out: &mut Vec<Action>) {
        for level in 1..=self.config.delay_levels.max_level() {
            let queue_id = level - 1;
            let mut next = self.schedule.next_offset(level);
            let max = self.store.max_offset(SCHEDULE_TOPIC, queue_id);
            next = next.max(self.store.min_offset(SCHEDULE_TOPIC, queue_id));
            while next < max {
                let Some(due) = self.store.tags_code_at(SCHEDULE_TOPIC, queue_id, next) else {
                    break;
                };
                if due > now_ms {
                    break;
                }
                let scheduled = self
                    .store
                    .record_at(SCHEDULE_TOPIC, queue_id, next)
                    .and_then(|raw| record::decode_stored(raw).ok());
                next += 1;
                let Some(rec) = scheduled else { continue };
                let mut props = rec.message.properties;
                props.remove(property::DELAY);
                let real_topic = props.get(property::REAL_TOPIC).map(str::to_owned);
                let real_qid = props
                    .get(property::REAL_QID)
                    .and_then(|q| q.parse::<i32>().ok());
                let (Some(real_topic), Some(real_qid)) = (real_topic, real_qid) else {
                    continue;
                };
                if self.store.topic(&real_topic).is_none() {
                    let system =
                        real_topic.starts_with(RETRY_PREFIX) || real_topic.starts_with(DLQ_PREFIX);
                    if !system {
                        continue;
                    }
                    self.ensure_system_topic(&real_topic, 1, out);
                }
                let msg = NewMessage {
                    topic: real_topic,
                    queue_id: real_qid,
                    flag: rec.message.flag,
                    tags_code: i64::from(tags_code(props.get(property::TAGS))),
                    body: rec.message.body,
                    properties: props,
                    sys_flag: rec.sys_flag,
                    born_timestamp: rec.born_timestamp,
                    born_host: rec.born_host,
                    reconsume_times: rec.reconsume_times,
                    prepared_transaction_offset: rec.prepared_transaction_offset,
                };
                // A failure here (queue gone) drops the message, as the real scheduler logs and
                // skips it.
                let _ = self.put_message(msg, now_ms, out);
            }
            if next != self.schedule.next_offset(level) {
                self.schedule.advance(level, next);
                self.data_changed = true;
            }
        }
    }

    /// Deliver time of the earliest pending scheduled message.
    pub(super) fn next_scheduled_due(&self) -> Option<i64> {
        (1..=self.config.delay_levels.max_level())
            .filter_map(|level| {
                let next = self
                    .schedule
                    .next_offset(level)
                    .max(self.store.min_offset(SCHEDULE_TOPIC, level - 1));
                self.store.tags_code_at(SCHEDULE_TOPIC, level - 1, next)
            })
            .min()
    }
}
