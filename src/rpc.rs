//! The typed requests of the base layer, sans I/O: for each RPC a consumer needs, the command it
//! sends and the reading of its answer. [`Client`](crate::Client) carries them over the wire;
//! everything here is a pure function of its inputs and is tested without sockets.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, ProtocolError, RequestCode, ResponseCode, Result};
use crate::filter::Selector;
use crate::message::decode::decode_messages_of;
use crate::message::{MessageExt, MessageQueue};
use crate::protocol::body::{
    encode_json, LockBatchRequestBody, SubscriptionData, UnlockBatchRequestBody,
};
use crate::protocol::codes::{pull_sys_flag, request_code, response_code};
use crate::protocol::command::RequestFrame;
use crate::protocol::header::{
    ConsumerSendMsgBackRequestHeader, LockBatchMqRequestHeader, PullMessageRequestHeader,
    PullMessageResponseHeader, QueryConsumerOffsetRequestHeader, UnlockBatchMqRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use crate::protocol::RemotingCommand;

pub use crate::consumer::flow::PullStatus;

/// How long a broker may hold a long-polling pull (Java `brokerSuspendMaxTimeMillis`, 15 s for
/// the push consumer, 20 s for the pull consumer).
pub const DEFAULT_BROKER_SUSPEND: Duration = Duration::from_secs(15);

/// A topic subscription as pulls and heartbeats carry it: the selector and the version that
/// ties the two together.
///
/// ```
/// use rocketmq_actor::filter::Selector;
/// use rocketmq_actor::rpc::Subscription;
/// let sub = Subscription::new("TagA || TagB", 1);
/// let tags = sub.selector.tags().expect("a tag selector");
/// assert!(tags.matches_tags(Some("TagB")));
/// assert!(!tags.matches_tags(Some("TagC")));
/// let by_sql = Subscription::new(Selector::sql("amount > 100"), 1);
/// assert_eq!(by_sql.to_wire("Orders").expression_type, "SQL92");
/// ```
#[derive(Debug, Clone)]
pub struct Subscription {
    /// What to select (the client re-filters tags exactly; brokers filter tags by hash and
    /// evaluate SQL92).
    pub selector: Selector,
    /// `subVersion`: heartbeats and pulls of one subscription must carry the same.
    pub sub_version: i64,
}

impl Subscription {
    /// A subscription by `selector` (text is a tag expression, `*` for all).
    pub fn new(selector: impl Into<Selector>, sub_version: i64) -> Self {
        Subscription {
            selector: selector.into(),
            sub_version,
        }
    }

    /// The subscription to every message (`*`).
    pub fn all(sub_version: i64) -> Self {
        Subscription {
            selector: Selector::all(),
            sub_version,
        }
    }

    /// The subscription as heartbeats and running-info replies describe it.
    pub fn to_wire(&self, topic: &str) -> SubscriptionData {
        let tags = self.selector.tags();
        SubscriptionData {
            class_filter_mode: false,
            topic: topic.to_owned(),
            sub_string: self.selector.expression().to_owned(),
            tags_set: tags.map(|t| t.tags().to_vec()).unwrap_or_default(),
            code_set: tags.map(|t| t.codes().to_vec()).unwrap_or_default(),
            sub_version: self.sub_version,
            expression_type: self.selector.expression_type().into(),
        }
    }
}

/// One PULL_MESSAGE: which queue, from where, how much, and whether the broker may hold it.
///
/// ```
/// use std::time::Duration;
/// use rocketmq_actor::rpc::{PullRequest, Subscription};
/// use rocketmq_actor::MessageQueue;
/// let request = PullRequest::new("my-group", MessageQueue::new("T", "broker-a", 0), 0)
///     .subscription(Subscription::new("TagA", 0))
///     .max_messages(64)
///     .long_poll(Duration::from_secs(15));
/// assert_eq!(request.max_messages, 64);
/// ```
#[derive(Debug, Clone)]
pub struct PullRequest {
    /// The consumer group.
    pub group: Arc<str>,
    /// The queue.
    pub queue: MessageQueue,
    /// The offset to read from.
    pub offset: i64,
    /// `maxMsgNums` (Java default 32).
    pub max_messages: i32,
    /// `maxMsgBytes`: a cap on the answer's size, when set.
    pub max_bytes: Option<i32>,
    /// What to pull.
    pub subscription: Arc<Subscription>,
    /// Send the expression with the pull (`FLAG_SUBSCRIPTION`), so the broker filters by it
    /// even without a heartbeat; otherwise the broker uses the group's registered subscription.
    pub send_subscription: bool,
    /// Piggyback the group's consume offset for this queue (`FLAG_COMMIT_OFFSET`).
    pub commit_offset: Option<i64>,
    /// Long polling: how long the broker may hold the request when nothing is new
    /// (`FLAG_SUSPEND`); `None` answers at once.
    pub suspend: Option<Duration>,
    /// The client-side timeout (must exceed `suspend`).
    pub timeout: Duration,
    /// Which broker of the queue's broker set to pull from: 0 the master, else the slave the
    /// last answer suggested (`PullResult::suggest_broker_id`, as Java follows it when the
    /// master is busy or the messages are cold). A pull from a slave piggybacks no offset.
    pub broker_id: i64,
}

impl PullRequest {
    /// A pull of up to 32 messages of every tag from `offset`, answered at once.
    pub fn new(group: impl Into<Arc<str>>, queue: MessageQueue, offset: i64) -> Self {
        PullRequest {
            group: group.into(),
            queue,
            offset,
            max_messages: 32,
            max_bytes: None,
            subscription: Arc::new(Subscription::all(0)),
            send_subscription: true,
            commit_offset: None,
            suspend: None,
            timeout: Duration::from_secs(10),
            broker_id: 0,
        }
    }

    /// Pulls only what `subscription` selects.
    pub fn subscription(mut self, subscription: impl Into<Arc<Subscription>>) -> Self {
        self.subscription = subscription.into();
        self
    }

    /// At most `max` messages per answer.
    pub fn max_messages(mut self, max: i32) -> Self {
        self.max_messages = max;
        self
    }

    /// Lets the broker hold the pull up to `suspend` when nothing is new; the client waits
    /// `suspend` + 15 s (Java's `consumerTimeoutMillisWhenSuspend` margin).
    pub fn long_poll(mut self, suspend: Duration) -> Self {
        self.suspend = Some(suspend);
        self.timeout = suspend + Duration::from_secs(15);
        self
    }

    /// Piggybacks `offset` as the group's consume offset of the queue.
    pub fn commit_offset(mut self, offset: i64) -> Self {
        self.commit_offset = Some(offset);
        self
    }

    /// The PULL_MESSAGE command.
    pub fn to_command(&self) -> RemotingCommand {
        let header = PullMessageRequestHeader {
            consumer_group: self.group.to_string(),
            topic: self.queue.topic.clone(),
            queue_id: self.queue.queue_id,
            queue_offset: self.offset,
            max_msg_nums: self.max_messages,
            sys_flag: self.sys_flag(),
            commit_offset: self.commit_offset.unwrap_or(0),
            suspend_timeout_millis: self.suspend_millis(),
            subscription: self
                .send_subscription
                .then(|| self.subscription.selector.expression().to_owned()),
            sub_version: self.subscription.sub_version,
            expression_type: Some(self.subscription.selector.expression_type().into()),
            max_msg_bytes: self.max_bytes,
            bname: Some(self.queue.broker_name.clone()),
        };
        RemotingCommand::request_with_header(request_code::PULL_MESSAGE, &header)
    }

    /// The PULL_MESSAGE request encoded at once, the same command as
    /// [`PullRequest::to_command`] without building its header and ext fields first (the
    /// pull path's form when no RPC hook needs to see the command).
    pub(crate) fn to_frame(&self) -> std::result::Result<RequestFrame, ProtocolError> {
        RequestFrame::json(request_code::PULL_MESSAGE, b"", |ext| {
            // In ascending key order, as the command's encoding sorts them; the keys are
            // constant JSON text (a pull is sent for every batch a queue receives).
            ext.str_member(b"\"bname\":", &self.queue.broker_name);
            ext.int_member(b"\"commitOffset\":", self.commit_offset.unwrap_or(0));
            ext.str_member(b"\"consumerGroup\":", &self.group);
            ext.str_member(
                b"\"expressionType\":",
                self.subscription.selector.expression_type(),
            );
            if let Some(max_bytes) = self.max_bytes {
                ext.int_member(b"\"maxMsgBytes\":", i64::from(max_bytes));
            }
            ext.int_member(b"\"maxMsgNums\":", i64::from(self.max_messages));
            ext.int_member(b"\"queueId\":", i64::from(self.queue.queue_id));
            ext.int_member(b"\"queueOffset\":", self.offset);
            ext.int_member(b"\"subVersion\":", self.subscription.sub_version);
            if self.send_subscription {
                ext.str_member(
                    b"\"subscription\":",
                    self.subscription.selector.expression(),
                );
            }
            ext.int_member(b"\"suspendTimeoutMillis\":", self.suspend_millis());
            ext.int_member(b"\"sysFlag\":", i64::from(self.sys_flag()));
            ext.str_member(b"\"topic\":", &self.queue.topic);
        })
    }

    fn suspend_millis(&self) -> i64 {
        self.suspend
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    fn sys_flag(&self) -> i32 {
        let mut sys_flag = 0;
        // A slave does not take commits (Java clears the flag for a pull from a slave).
        if self.commit_offset.is_some() && self.broker_id == 0 {
            sys_flag |= pull_sys_flag::COMMIT_OFFSET;
        }
        if self.suspend.is_some() {
            sys_flag |= pull_sys_flag::SUSPEND;
        }
        if self.send_subscription {
            sys_flag |= pull_sys_flag::SUBSCRIPTION;
        }
        sys_flag
    }

    /// Reads the broker's answer: the status, the offsets, and the messages kept after the
    /// exact tag re-filter, each with its broker name set. `peer` names the broker in errors.
    pub fn read_response(&self, peer: &str, response: RemotingCommand) -> Result<PullResult> {
        self.read_raw_response(peer, response)?.decode(self)
    }

    /// The broker's answer with the messages still in their wire form (decoded later with
    /// [`decode_pulled`], by a consumer that buffers them).
    pub(crate) fn read_raw_response(
        &self,
        peer: &str,
        response: RemotingCommand,
    ) -> Result<RawPullResult> {
        self.read_raw_answer(|| peer.to_owned(), response)
    }

    /// [`read_raw_response`](Self::read_raw_response) naming the broker only when the answer
    /// is an error: `peer` is asked for then.
    pub(crate) fn read_raw_answer(
        &self,
        peer: impl FnOnce() -> String,
        response: RemotingCommand,
    ) -> Result<RawPullResult> {
        let Some(status) = PullStatus::from_response_code(response.code) else {
            return Err(broker_error(&peer(), request_code::PULL_MESSAGE, response));
        };
        let reply: PullMessageResponseHeader = response.decode_header()?;
        let body = if status == PullStatus::Found {
            response.body.unwrap_or_default()
        } else {
            Bytes::new()
        };
        Ok(RawPullResult {
            status,
            next_begin_offset: reply.next_begin_offset,
            min_offset: reply.min_offset,
            max_offset: reply.max_offset,
            suggest_broker_id: reply.suggest_which_broker_id,
            offset_delta: reply.offset_delta,
            body,
        })
    }
}

/// A pull's answer whose messages are not decoded yet.
#[derive(Debug)]
pub(crate) struct RawPullResult {
    pub status: PullStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub suggest_broker_id: i64,
    /// Added to each record's queue offset (static-topic brokers).
    pub offset_delta: Option<i64>,
    /// The stored records (empty unless `Found`).
    pub body: Bytes,
}

impl RawPullResult {
    /// The full answer, messages decoded and re-filtered for `request`.
    pub(crate) fn decode(self, request: &PullRequest) -> Result<PullResult> {
        let (messages, unfiltered) = decode_pulled(
            &self.body,
            &request.subscription,
            &request.queue,
            self.offset_delta,
        )?;
        Ok(PullResult {
            status: self.status,
            next_begin_offset: self.next_begin_offset,
            min_offset: self.min_offset,
            max_offset: self.max_offset,
            suggest_broker_id: self.suggest_broker_id,
            messages,
            unfiltered,
        })
    }
}

/// Decodes the stored records of a pull's body, keeps those `subscription` selects (exact tag
/// re-filter) and completes them (offset delta, `queue`'s broker name). Returns the messages and
/// how many the broker sent.
pub(crate) fn decode_pulled(
    body: &Bytes,
    subscription: &Subscription,
    queue: &MessageQueue,
    offset_delta: Option<i64>,
) -> Result<(Vec<MessageExt>, usize)> {
    if body.is_empty() {
        return Ok((Vec::new(), 0));
    }
    // Filtered and completed in place: the decoded records are never moved again.
    let broker: std::sync::Arc<str> = std::sync::Arc::from(queue.broker_name.as_str());
    let mut messages = decode_messages_of(body.clone(), &broker)?;
    let unfiltered = messages.len();
    // Tags are re-filtered exactly (brokers compare hash codes); SQL92 only the broker
    // evaluates.
    if let Some(tags) = subscription.selector.tags().filter(|tags| !tags.is_all()) {
        messages.retain(|message| tags.matches_tags(message.tags()));
    }
    if let Some(delta) = offset_delta {
        for message in &mut messages {
            message.queue_offset += delta;
        }
    }
    Ok((messages, unfiltered))
}

/// What a pull brought back.
#[derive(Debug)]
pub struct PullResult {
    /// Found, nothing new, nothing matching, or an offset out of range.
    pub status: PullStatus,
    /// Where to pull next.
    pub next_begin_offset: i64,
    /// The queue's smallest offset.
    pub min_offset: i64,
    /// The queue's end offset (one past its last message).
    pub max_offset: i64,
    /// The broker id to pull from next (0 = master).
    pub suggest_broker_id: i64,
    /// The messages kept after the exact tag re-filter, with their broker name set.
    pub messages: Vec<MessageExt>,
    /// How many messages the broker sent (before the re-filter).
    pub unfiltered: usize,
}

impl PullResult {
    /// "Nothing new" at `offset`, answered locally (a long poll ended by a shutdown): the queue's
    /// bounds are unknown, so `min_offset` and `max_offset` are `offset` too.
    pub(crate) fn nothing_new(offset: i64) -> Self {
        PullResult {
            status: PullStatus::NoNewMsg,
            next_begin_offset: offset,
            min_offset: offset,
            max_offset: offset,
            suggest_broker_id: 0,
            messages: Vec::new(),
            unfiltered: 0,
        }
    }
}

/// The error for a response whose code is not a success for `request`.
pub(crate) fn broker_error(peer: &str, request: i32, response: RemotingCommand) -> Error {
    let remark = response.remark.unwrap_or_default();
    if crate::error::is_access_denial(response.code, &remark) {
        return Error::AccessDenied {
            peer: peer.to_owned(),
            request: RequestCode(request),
            code: ResponseCode(response.code),
            remark,
        };
    }
    Error::Broker {
        peer: peer.to_owned(),
        request: RequestCode(request),
        code: ResponseCode(response.code),
        remark,
    }
}

/// `response` when its code is SUCCESS, else the [`Error::Broker`] naming `request`.
pub(crate) fn expect_success(
    peer: &str,
    request: i32,
    response: RemotingCommand,
) -> Result<RemotingCommand> {
    if response.code == response_code::SUCCESS {
        Ok(response)
    } else {
        Err(broker_error(peer, request, response))
    }
}

/// QUERY_CONSUMER_OFFSET. With `zero_if_not_found = false` a group without a stored offset is
/// answered QUERY_NOT_FOUND instead of 0.
pub(crate) fn query_offset_command(
    group: &str,
    queue: &MessageQueue,
    zero_if_not_found: bool,
) -> RemotingCommand {
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: group.to_owned(),
        topic: queue.topic.clone(),
        queue_id: queue.queue_id,
        bname: Some(queue.broker_name.clone()),
        set_zero_if_not_found: (!zero_if_not_found).then_some(false),
    };
    RemotingCommand::request_with_header(request_code::QUERY_CONSUMER_OFFSET, &header)
}

/// UPDATE_CONSUMER_OFFSET.
pub(crate) fn update_offset_command(
    group: &str,
    queue: &MessageQueue,
    offset: i64,
) -> RemotingCommand {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.to_owned(),
        topic: queue.topic.clone(),
        queue_id: queue.queue_id,
        commit_offset: offset,
        bname: Some(queue.broker_name.clone()),
    };
    RemotingCommand::request_with_header(request_code::UPDATE_CONSUMER_OFFSET, &header)
}

/// GET_CONSUMER_LIST_BY_GROUP: the client ids of `group`'s members as a broker knows them.
pub(crate) fn consumer_ids_command(group: &str) -> RemotingCommand {
    let header = crate::protocol::header::GetConsumerListByGroupRequestHeader {
        consumer_group: group.to_owned(),
    };
    RemotingCommand::request_with_header(request_code::GET_CONSUMER_LIST_BY_GROUP, &header)
}

/// HEART_BEAT carrying `data` (the client's producer and consumer groups and subscriptions).
pub(crate) fn heartbeat_command(data: &crate::protocol::body::HeartbeatData) -> RemotingCommand {
    RemotingCommand::request_with_header(
        request_code::HEART_BEAT,
        &crate::protocol::header::HeartbeatRequestHeader {},
    )
    .with_body(crate::protocol::body::encode_json(data))
}

/// UNREGISTER_CLIENT of `client_id` for a producer group, a consumer group or both.
pub(crate) fn unregister_client_command(
    client_id: &str,
    producer_group: Option<&str>,
    consumer_group: Option<&str>,
) -> RemotingCommand {
    let header = crate::protocol::header::UnregisterClientRequestHeader {
        client_id: client_id.to_owned(),
        producer_group: producer_group.map(str::to_owned),
        consumer_group: consumer_group.map(str::to_owned),
    };
    RemotingCommand::request_with_header(request_code::UNREGISTER_CLIENT, &header)
}

/// LOCK_BATCH_MQ or UNLOCK_BATCH_MQ for `queues` (all of one broker): the two requests carry the
/// same fields on the wire.
pub(crate) fn lock_batch_command(
    lock: bool,
    group: &str,
    client_id: &str,
    queues: &[MessageQueue],
) -> RemotingCommand {
    let broker_name = queues.first().map(|q| q.broker_name.clone());
    if lock {
        let body = LockBatchRequestBody {
            consumer_group: group.to_owned(),
            client_id: client_id.to_owned(),
            only_this_broker: true,
            mq_set: queues.to_vec(),
        };
        let header = LockBatchMqRequestHeader { bname: broker_name };
        RemotingCommand::request_with_header(request_code::LOCK_BATCH_MQ, &header)
            .with_body(encode_json(&body))
    } else {
        let body = UnlockBatchRequestBody {
            consumer_group: group.to_owned(),
            client_id: client_id.to_owned(),
            only_this_broker: true,
            mq_set: queues.to_vec(),
        };
        let header = UnlockBatchMqRequestHeader { bname: broker_name };
        RemotingCommand::request_with_header(request_code::UNLOCK_BATCH_MQ, &header)
            .with_body(encode_json(&body))
    }
}

/// CONSUMER_SEND_MSG_BACK: hand `message` back to its broker for redelivery through the group's
/// retry topic after `delay_level` (0 = the broker's choice by reconsume count).
pub(crate) fn send_back_command(
    group: &str,
    queue: &MessageQueue,
    message: &MessageExt,
    delay_level: i32,
    max_reconsume_times: i32,
) -> RemotingCommand {
    let header = ConsumerSendMsgBackRequestHeader {
        offset: message.commit_log_offset,
        group: group.to_owned(),
        delay_level,
        origin_msg_id: Some(message.msg_id().into_owned()),
        origin_topic: Some(message.topic().to_owned()),
        unit_mode: false,
        max_reconsume_times: Some(max_reconsume_times),
        bname: Some(queue.broker_name.clone()),
    };
    RemotingCommand::request_with_header(request_code::CONSUMER_SEND_MSG_BACK, &header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_flags_follow_the_request() {
        let queue = MessageQueue::new("T", "b", 3);
        let plain = PullRequest::new("g", queue.clone(), 7).to_command();
        assert_eq!(plain.ext("sysFlag"), Some("4"));
        assert_eq!(plain.ext("suspendTimeoutMillis"), Some("0"));
        let long = PullRequest::new("g", queue, 7)
            .long_poll(Duration::from_secs(15))
            .commit_offset(5)
            .to_command();
        assert_eq!(long.ext("sysFlag"), Some("7"));
        assert_eq!(long.ext("commitOffset"), Some("5"));
        assert_eq!(long.ext("suspendTimeoutMillis"), Some("15000"));
        assert_eq!(long.ext("queueOffset"), Some("7"));
    }

    #[test]
    fn the_encoded_pull_is_the_pull_command() {
        let queue = MessageQueue::new("Topic\u{1}\"x", "broker-a", 3);
        let variants = [
            PullRequest::new("g", queue.clone(), 7),
            PullRequest::new("group-中", queue.clone(), 1 << 40)
                .subscription(Subscription::new("TagA || TagB", 17))
                .max_messages(64)
                .long_poll(Duration::from_secs(15))
                .commit_offset(5),
            PullRequest {
                max_bytes: Some(262_144),
                send_subscription: false,
                broker_id: 1,
                ..PullRequest::new("g", queue, -1).commit_offset(3)
            },
        ];
        for request in variants {
            let mut frame = request.to_frame().unwrap();
            frame.set_opaque(9);
            let from_frame = RemotingCommand::decode(frame.into_bytes().slice(4..)).unwrap();
            let mut command = request.to_command();
            command.opaque = 9;
            let mut wire = bytes::BytesMut::new();
            command.encode(&mut wire).unwrap();
            let from_command = RemotingCommand::decode(wire.freeze().slice(4..)).unwrap();
            assert_eq!(from_frame.code, from_command.code);
            assert_eq!(from_frame.opaque, from_command.opaque);
            let fields = |c: &RemotingCommand| {
                c.ext_fields
                    .as_ref()
                    .map(|ext| {
                        ext.iter()
                            .map(|(k, v)| (k.to_owned(), v.to_owned()))
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
            };
            assert_eq!(fields(&from_frame), fields(&from_command), "{request:?}");
            assert!(fields(&from_frame).len() >= 11);
        }
    }

    #[test]
    fn a_pull_from_a_slave_piggybacks_no_offset() {
        let mut request = PullRequest::new("g", MessageQueue::new("T", "b", 3), 7).commit_offset(5);
        request.broker_id = 1;
        assert_eq!(request.to_command().ext("sysFlag"), Some("4"));
    }

    #[test]
    fn a_failed_pull_names_the_request_and_code() {
        let request = PullRequest::new("g", MessageQueue::new("T", "b", 0), 0);
        let answer =
            RemotingCommand::response(response_code::SUBSCRIPTION_NOT_EXIST, Some("no sub".into()));
        let error = request.read_response("1.2.3.4:10911", answer).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("PULL_MESSAGE"), "{text}");
        assert!(text.contains("SUBSCRIPTION_NOT_EXIST"), "{text}");
        assert_eq!(
            error.response_code(),
            Some(response_code::SUBSCRIPTION_NOT_EXIST)
        );
    }

    #[test]
    fn lock_and_unlock_share_their_fields() {
        let queues = [
            MessageQueue::new("T", "b", 0),
            MessageQueue::new("T", "b", 1),
        ];
        let lock = lock_batch_command(true, "g", "c", &queues);
        let unlock = lock_batch_command(false, "g", "c", &queues);
        assert_eq!(lock.code, request_code::LOCK_BATCH_MQ);
        assert_eq!(unlock.code, request_code::UNLOCK_BATCH_MQ);
        assert_eq!(lock.body, unlock.body);
        assert_eq!(lock.ext("bname"), Some("b"));
    }
}
