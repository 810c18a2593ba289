//! Typed request/response headers and their mapping to a command's ext fields
//! (protocol.md §2). Keys are the Java field names (`bname`, `clientID`, `isForce`, …); every
//! value is a string, booleans lowercase.

use super::command::ExtFields;
use crate::error::ProtocolError;

/// A typed custom header: converts to and from the string → string ext fields.
///
/// ```
/// use rocketmq_actor::protocol::header::{CommandHeader, GetRouteInfoRequestHeader};
/// use rocketmq_actor::protocol::ExtFields;
///
/// let header = GetRouteInfoRequestHeader { topic: "TopicTest".into(), accept_standard_json_only: None };
/// let mut ext = ExtFields::new();
/// header.write_ext(&mut ext);
/// assert_eq!(ext.get("topic"), Some("TopicTest"));
/// assert_eq!(GetRouteInfoRequestHeader::read_ext(&ext).unwrap(), header);
/// ```
pub trait CommandHeader: Sized {
    /// Writes every present field under its Java key.
    fn write_ext(&self, ext: &mut ExtFields);
    /// Reads the header; a missing required key is [`ProtocolError::MissingField`], an
    /// unparsable value [`ProtocolError::InvalidField`]. Unknown keys are ignored.
    fn read_ext(ext: &ExtFields) -> Result<Self, ProtocolError>;
}

/// A header field type and its ext-field text form (what Java's `toString`/`parseX` do).
pub trait HeaderValue: Sized {
    /// Whether `""` is a value of this type (only for strings); for other types an empty
    /// optional value reads as absent.
    const ACCEPTS_EMPTY: bool = false;
    /// The text written into the ext fields.
    fn to_ext(&self) -> String;
    /// Parses the ext-field text of `field`.
    fn from_ext(field: &'static str, text: &str) -> Result<Self, ProtocolError>;
    /// Sets `key` to this value's text in `ext` (the provided form goes through
    /// [`HeaderValue::to_ext`]; the built-in types write without an intermediate `String`).
    fn write_to(&self, key: &str, ext: &mut ExtFields) {
        ext.insert_str(key, &self.to_ext());
    }
}

/// Writes an integer's decimal text into `ext` without allocating for it.
fn write_integer(ext: &mut ExtFields, key: &str, value: i64) {
    let mut digits = [0u8; 20];
    let mut unwritten: &mut [u8] = &mut digits;
    crate::protocol::json::write_i64(&mut unwritten, value);
    let left = unwritten.len();
    let written = digits.len() - left;
    if let Some(text) = digits
        .get(..written)
        .and_then(|d| std::str::from_utf8(d).ok())
    {
        ext.insert_str(key, text);
    }
}

impl HeaderValue for String {
    const ACCEPTS_EMPTY: bool = true;
    fn to_ext(&self) -> String {
        self.clone()
    }
    fn write_to(&self, key: &str, ext: &mut ExtFields) {
        ext.insert_str(key, self);
    }
    fn from_ext(_field: &'static str, text: &str) -> Result<Self, ProtocolError> {
        Ok(text.to_owned())
    }
}

fn invalid(field: &'static str, text: &str) -> ProtocolError {
    ProtocolError::InvalidField {
        field,
        value: text.to_owned(),
    }
}

impl HeaderValue for i32 {
    fn to_ext(&self) -> String {
        self.to_string()
    }
    fn write_to(&self, key: &str, ext: &mut ExtFields) {
        write_integer(ext, key, i64::from(*self));
    }
    fn from_ext(field: &'static str, text: &str) -> Result<Self, ProtocolError> {
        plain_integer(text)
            .and_then(|value| i32::try_from(value).ok())
            .map_or_else(|| text.trim().parse().map_err(|_| invalid(field, text)), Ok)
    }
}

/// `text` read as a plain decimal integer (digits, maybe a leading `-`, nothing else), the
/// form every broker writes: without the trimming and the general parser's checks, which
/// otherwise cost more than the rest of reading a send's or a pull's answer header.
/// `None` for any other text, which the general parser then reads or rejects.
#[inline]
fn plain_integer(text: &str) -> Option<i64> {
    match crate::protocol::json::plain_integer_at(text.as_bytes(), 0) {
        Some((value, end)) if end == text.len() => Some(value),
        _ => None,
    }
}

impl HeaderValue for i64 {
    fn to_ext(&self) -> String {
        self.to_string()
    }
    fn write_to(&self, key: &str, ext: &mut ExtFields) {
        write_integer(ext, key, *self);
    }
    fn from_ext(field: &'static str, text: &str) -> Result<Self, ProtocolError> {
        plain_integer(text)
            .map_or_else(|| text.trim().parse().map_err(|_| invalid(field, text)), Ok)
    }
}

impl HeaderValue for bool {
    fn to_ext(&self) -> String {
        if *self { "true" } else { "false" }.to_owned()
    }
    fn write_to(&self, key: &str, ext: &mut ExtFields) {
        ext.insert_str(key, if *self { "true" } else { "false" });
    }
    fn from_ext(field: &'static str, text: &str) -> Result<Self, ProtocolError> {
        let text_trimmed = text.trim();
        if text_trimmed.eq_ignore_ascii_case("true") {
            Ok(true)
        } else if text_trimmed.eq_ignore_ascii_case("false") {
            Ok(false)
        } else {
            Err(invalid(field, text))
        }
    }
}

/// Reads a required field.
pub fn read_required<T: HeaderValue>(
    ext: &ExtFields,
    key: &'static str,
) -> Result<T, ProtocolError> {
    match ext.get(key) {
        Some(text) => T::from_ext(key, text),
        None => Err(ProtocolError::MissingField(key)),
    }
}

/// Reads an optional field (an empty non-string value counts as absent).
pub fn read_optional<T: HeaderValue>(
    ext: &ExtFields,
    key: &'static str,
) -> Result<Option<T>, ProtocolError> {
    match ext.get(key) {
        Some(text) if T::ACCEPTS_EMPTY || !text.trim().is_empty() => {
            T::from_ext(key, text).map(Some)
        }
        _ => Ok(None),
    }
}

/// Reads a field that falls back to `default` when absent (Java primitives with a default).
pub fn read_or<T: HeaderValue>(
    ext: &ExtFields,
    key: &'static str,
    default: T,
) -> Result<T, ProtocolError> {
    Ok(read_optional(ext, key)?.unwrap_or(default))
}

/// Writes a field.
pub fn write_value<T: HeaderValue>(ext: &mut ExtFields, key: &str, value: &T) {
    value.write_to(key, ext);
}

/// Writes an optional field when present.
pub fn write_optional<T: HeaderValue>(ext: &mut ExtFields, key: &str, value: &Option<T>) {
    if let Some(value) = value {
        write_value(ext, key, value);
    }
}

/// Declares a header struct whose fields are `req` (must be present), `opt` (`Option`) or
/// `def` (always written, a default when absent), with their Java keys.
macro_rules! command_header {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $kind:ident $field:ident : $ty:ty = $key:literal $(, default $default:expr)? ;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name {
            $(
                $(#[$field_meta])*
                pub $field: command_header!(@type $kind $ty),
            )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    $( $field: command_header!(@default $kind $ty $(, $default)?), )*
                }
            }
        }

        impl CommandHeader for $name {
            fn write_ext(&self, ext: &mut ExtFields) {
                let _ = &ext;
                $( command_header!(@write $kind ext, $key, &self.$field); )*
            }

            fn read_ext(ext: &ExtFields) -> Result<Self, ProtocolError> {
                let _ = ext;
                Ok($name {
                    $( $field: command_header!(@read $kind ext, $key, $ty $(, $default)?), )*
                })
            }
        }

        #[cfg(test)]
        impl $name {
            /// Every key this header writes (tests check names against protocol.md).
            #[allow(dead_code)]
            pub(crate) const KEYS: &'static [&'static str] = &[$($key),*];

            /// A header whose fields are drawn from `seeds` (property tests).
            #[allow(dead_code)]
            pub(crate) fn from_seeds(seeds: &mut dyn Iterator<Item = u64>) -> Self {
                let _ = &seeds;
                $name {
                    $( $field: command_header!(@seed $kind $ty, seeds), )*
                }
            }
        }
    };
    (@type req $ty:ty) => { $ty };
    (@type def $ty:ty) => { $ty };
    (@type opt $ty:ty) => { Option<$ty> };
    (@default req $ty:ty) => { <$ty as Default>::default() };
    (@default def $ty:ty) => { <$ty as Default>::default() };
    (@default def $ty:ty, $default:expr) => { $default };
    (@default opt $ty:ty) => { None };
    (@write req $ext:ident, $key:literal, $value:expr) => { write_value($ext, $key, $value) };
    (@write def $ext:ident, $key:literal, $value:expr) => { write_value($ext, $key, $value) };
    (@write opt $ext:ident, $key:literal, $value:expr) => { write_optional($ext, $key, $value) };
    (@read req $ext:ident, $key:literal, $ty:ty) => { read_required::<$ty>($ext, $key)? };
    (@read def $ext:ident, $key:literal, $ty:ty) => { read_or::<$ty>($ext, $key, <$ty as Default>::default())? };
    (@read def $ext:ident, $key:literal, $ty:ty, $default:expr) => { read_or::<$ty>($ext, $key, $default)? };
    (@read opt $ext:ident, $key:literal, $ty:ty) => { read_optional::<$ty>($ext, $key)? };
    (@seed req $ty:ty, $seeds:ident) => { <$ty as tests::FromSeed>::from_seed($seeds) };
    (@seed def $ty:ty, $seeds:ident) => { <$ty as tests::FromSeed>::from_seed($seeds) };
    (@seed opt $ty:ty, $seeds:ident) => { <Option<$ty> as tests::FromSeed>::from_seed($seeds) };
}

command_header! {
    /// GET_ROUTEINFO_BY_TOPIC (105) request.
    pub struct GetRouteInfoRequestHeader {
        /// Topic to route.
        req topic: String = "topic";
        /// `true` forces standard JSON route data whatever our version.
        opt accept_standard_json_only: bool = "acceptStandardJsonOnly";
    }
}

command_header! {
    /// PULL_MESSAGE (11) request (also LITE_PULL_MESSAGE 361).
    pub struct PullMessageRequestHeader {
        /// Consumer group.
        req consumer_group: String = "consumerGroup";
        /// Topic.
        req topic: String = "topic";
        /// Queue id.
        req queue_id: i32 = "queueId";
        /// Logical offset to read from.
        req queue_offset: i64 = "queueOffset";
        /// Max messages to return (Java push default 32).
        req max_msg_nums: i32 = "maxMsgNums";
        /// `pull_sys_flag` bits.
        req sys_flag: i32 = "sysFlag";
        /// Offset the broker commits when `COMMIT_OFFSET` is set (0 if none).
        req commit_offset: i64 = "commitOffset";
        /// Long-poll hold time in ms (Java push 15000).
        req suspend_timeout_millis: i64 = "suspendTimeoutMillis";
        /// Subscription expression (used with the `SUBSCRIPTION` flag).
        opt subscription: String = "subscription";
        /// Must equal the heartbeat's subVersion.
        req sub_version: i64 = "subVersion";
        /// `"TAG"` or `"SQL92"`.
        opt expression_type: String = "expressionType";
        /// Byte limit of the reply (Java push 256 KiB).
        opt max_msg_bytes: i32 = "maxMsgBytes";
        /// Target broker name.
        opt bname: String = "bname";
    }
}

command_header! {
    /// PULL_MESSAGE (11) response.
    pub struct PullMessageResponseHeader {
        /// Broker id to pull from next (0 = master).
        req suggest_which_broker_id: i64 = "suggestWhichBrokerId";
        /// Offset to pull next.
        req next_begin_offset: i64 = "nextBeginOffset";
        /// Min logical offset of the queue.
        req min_offset: i64 = "minOffset";
        /// Max logical offset of the queue (next to be written).
        req max_offset: i64 = "maxOffset";
        /// Added to each message's queue offset (static topics).
        opt offset_delta: i64 = "offsetDelta";
        /// Topic sys flag.
        opt topic_sys_flag: i32 = "topicSysFlag";
        /// Group sys flag.
        opt group_sys_flag: i32 = "groupSysFlag";
        /// On NO_PERMISSION: 1 broker, 2 group, 3 topic, 4 broadcasting, 5 subscription.
        opt forbidden_type: i32 = "forbiddenType";
    }
}

command_header! {
    /// QUERY_CONSUMER_OFFSET (14) request.
    pub struct QueryConsumerOffsetRequestHeader {
        /// Consumer group.
        req consumer_group: String = "consumerGroup";
        /// Topic.
        req topic: String = "topic";
        /// Queue id.
        req queue_id: i32 = "queueId";
        /// Answer 0 instead of QUERY_NOT_FOUND when the queue still holds offset 0.
        opt set_zero_if_not_found: bool = "setZeroIfNotFound";
        /// Target broker name.
        opt bname: String = "bname";
    }
}

command_header! {
    /// QUERY_CONSUMER_OFFSET (14) response.
    pub struct QueryConsumerOffsetResponseHeader {
        /// The committed offset (next message to consume).
        req offset: i64 = "offset";
    }
}

command_header! {
    /// UPDATE_CONSUMER_OFFSET (15) request (usually oneway).
    pub struct UpdateConsumerOffsetRequestHeader {
        /// Consumer group.
        req consumer_group: String = "consumerGroup";
        /// Topic.
        req topic: String = "topic";
        /// Queue id.
        req queue_id: i32 = "queueId";
        /// Offset to commit (next message to consume).
        req commit_offset: i64 = "commitOffset";
        /// Target broker name.
        opt bname: String = "bname";
    }
}

command_header! {
    /// UPDATE_AND_CREATE_TOPIC (17) request (Java `CreateTopicRequestHeader`).
    pub struct UpdateTopicRequestHeader {
        /// Topic to create or update.
        req topic: String = "topic";
        /// Template topic (`"TBW102"`).
        req default_topic: String = "defaultTopic";
        /// Read queue count.
        req read_queue_nums: i32 = "readQueueNums";
        /// Write queue count.
        req write_queue_nums: i32 = "writeQueueNums";
        /// `perm` bits (6 = read + write).
        req perm: i32 = "perm";
        /// `"SINGLE_TAG"` or `"MULTI_TAG"`.
        def topic_filter_type: String = "topicFilterType", default "SINGLE_TAG".to_owned();
        /// Topic sys flag.
        opt topic_sys_flag: i32 = "topicSysFlag";
        /// Ordered topic.
        def order: bool = "order";
        /// Topic attributes (`+key=value,…`).
        opt attributes: String = "attributes";
        /// Force the update.
        opt force: bool = "force";
    }
}

command_header! {
    /// DELETE_TOPIC_IN_BROKER (215) request.
    pub struct DeleteTopicRequestHeader {
        /// Topic to delete.
        req topic: String = "topic";
    }
}

command_header! {
    /// DELETE_TOPIC_IN_NAMESRV (216) request.
    pub struct DeleteTopicFromNamesrvRequestHeader {
        /// Topic to delete.
        req topic: String = "topic";
        /// Only from this cluster's brokers; absent: from every broker. (rocketmq-rust reads an
        /// empty name as a cluster that does not exist: leave it out rather than empty.)
        opt cluster_name: String = "clusterName";
    }
}

command_header! {
    /// GET_TOPIC_CONFIG (351) and GET_TOPIC_STATS_INFO (202) request.
    pub struct GetTopicConfigRequestHeader {
        /// Topic.
        req topic: String = "topic";
    }
}

command_header! {
    /// DELETE_SUBSCRIPTIONGROUP (207) request.
    pub struct DeleteSubscriptionGroupRequestHeader {
        /// Group to delete.
        req group_name: String = "groupName";
        /// Delete the group's committed offsets too.
        def clean_offset: bool = "cleanOffset";
    }
}

command_header! {
    /// SEARCH_OFFSET_BY_TIMESTAMP (29) request.
    pub struct SearchOffsetRequestHeader {
        /// Topic.
        req topic: String = "topic";
        /// Queue id.
        req queue_id: i32 = "queueId";
        /// Timestamp in ms.
        req timestamp: i64 = "timestamp";
        /// `"LOWER"` (default) or `"UPPER"`, case-insensitive.
        opt boundary_type: String = "boundaryType";
        /// Target broker name.
        opt bname: String = "bname";
    }
}

command_header! {
    /// GET_MAX_OFFSET (30) request.
    pub struct GetMaxOffsetRequestHeader {
        /// Topic.
        req topic: String = "topic";
        /// Queue id.
        req queue_id: i32 = "queueId";
        /// Only committed (dispatched) messages count; Java always sends it, default `true`.
        def committed: bool = "committed", default true;
        /// Target broker name.
        opt bname: String = "bname";
    }
}

command_header! {
    /// GET_MIN_OFFSET (31) request.
    pub struct GetMinOffsetRequestHeader {
        /// Topic.
        req topic: String = "topic";
        /// Queue id.
        req queue_id: i32 = "queueId";
        /// Target broker name.
        opt bname: String = "bname";
    }
}

command_header! {
    /// GET_EARLIEST_MSG_STORETIME (32) request.
    pub struct GetEarliestMsgStoretimeRequestHeader {
        /// Topic.
        req topic: String = "topic";
        /// Queue id.
        req queue_id: i32 = "queueId";
        /// Target broker name.
        opt bname: String = "bname";
    }
}

command_header! {
    /// Response of SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31).
    pub struct OffsetResponseHeader {
        /// The offset asked for.
        req offset: i64 = "offset";
    }
}

command_header! {
    /// GET_EARLIEST_MSG_STORETIME (32) response.
    pub struct GetEarliestMsgStoretimeResponseHeader {
        /// Store timestamp (ms) of the earliest message.
        req timestamp: i64 = "timestamp";
    }
}

command_header! {
    /// VIEW_MESSAGE_BY_ID (33) request.
    pub struct ViewMessageRequestHeader {
        /// Commit-log offset decoded from the offset message id.
        req offset: i64 = "offset";
    }
}

command_header! {
    /// HEART_BEAT (34) request: no own fields (ext fields `{}`); the body is `HeartbeatData`.
    pub struct HeartbeatRequestHeader {}
}

command_header! {
    /// HEART_BEAT (34) response ext fields.
    pub struct HeartbeatResponseHeader {
        /// The broker supports heartbeat V2 (fingerprints).
        opt is_support_heart_beat_v2: bool = "IS_SUPPORT_HEART_BEAT_V2";
        /// The broker's view of our subscriptions changed.
        opt is_sub_change: bool = "IS_SUB_CHANGE";
    }
}

command_header! {
    /// UNREGISTER_CLIENT (35) request.
    pub struct UnregisterClientRequestHeader {
        /// Client id (key `clientID`, capital ID).
        req client_id: String = "clientID";
        /// Producer group to leave.
        opt producer_group: String = "producerGroup";
        /// Consumer group to leave.
        opt consumer_group: String = "consumerGroup";
    }
}

command_header! {
    /// CONSUMER_SEND_MSG_BACK (36) request.
    pub struct ConsumerSendMsgBackRequestHeader {
        /// The message's commit-log (physical) offset.
        req offset: i64 = "offset";
        /// Consumer group.
        req group: String = "group";
        /// 0 = broker picks `3 + reconsumeTimes`, < 0 = straight to DLQ, 1..18 = level.
        req delay_level: i32 = "delayLevel";
        /// The message's msgId (UNIQ_KEY if present).
        opt origin_msg_id: String = "originMsgId";
        /// The message's topic.
        opt origin_topic: String = "originTopic";
        /// Java primitive, always sent (`"false"`).
        def unit_mode: bool = "unitMode";
        /// Retries before the DLQ (Java push concurrent default 16).
        opt max_reconsume_times: i32 = "maxReconsumeTimes";
        /// Target broker name.
        opt bname: String = "bname";
    }
}

command_header! {
    /// GET_CONSUMER_LIST_BY_GROUP (38) request.
    pub struct GetConsumerListByGroupRequestHeader {
        /// Consumer group.
        req consumer_group: String = "consumerGroup";
    }
}

command_header! {
    /// GET_CONSUMER_CONNECTION_LIST (203) request.
    pub struct GetConsumerConnectionListRequestHeader {
        /// Consumer group.
        req consumer_group: String = "consumerGroup";
    }
}

command_header! {
    /// NOTIFY_CONSUMER_IDS_CHANGED (40) request (broker → client, oneway).
    pub struct NotifyConsumerIdsChangedRequestHeader {
        /// The group whose membership changed.
        req consumer_group: String = "consumerGroup";
    }
}

command_header! {
    /// LOCK_BATCH_MQ (41) request: only the optional rpc keys; the body says what to lock.
    pub struct LockBatchMqRequestHeader {
        /// Target broker name.
        opt bname: String = "bname";
    }
}

command_header! {
    /// UNLOCK_BATCH_MQ (42) request: only the optional rpc keys; the body says what to unlock.
    pub struct UnlockBatchMqRequestHeader {
        /// Target broker name.
        opt bname: String = "bname";
    }
}

command_header! {
    /// RESET_CONSUMER_CLIENT_OFFSET (220) request (broker → client, oneway).
    pub struct ResetOffsetRequestHeader {
        /// Topic.
        req topic: String = "topic";
        /// Consumer group.
        req group: String = "group";
        /// Queue id, `-1` for all queues.
        def queue_id: i32 = "queueId", default -1;
        /// Explicit offset (absent when resetting by timestamp).
        opt offset: i64 = "offset";
        /// Reset-to timestamp in ms.
        req timestamp: i64 = "timestamp";
        /// Force the reset (key is literally `isForce`).
        req is_force: bool = "isForce";
    }
}

command_header! {
    /// GET_CONSUMER_STATUS_FROM_CLIENT (221) request (deprecated, broker → client).
    pub struct GetConsumerStatusRequestHeader {
        /// Topic.
        req topic: String = "topic";
        /// Consumer group.
        req group: String = "group";
        /// Client address filter.
        opt client_addr: String = "clientAddr";
    }
}

command_header! {
    /// GET_CONSUMER_RUNNING_INFO (307) request.
    pub struct GetConsumerRunningInfoRequestHeader {
        /// Consumer group.
        req consumer_group: String = "consumerGroup";
        /// Target client id.
        req client_id: String = "clientId";
        /// Include a thread dump.
        def jstack_enable: bool = "jstackEnable";
    }
}

command_header! {
    /// CONSUME_MESSAGE_DIRECTLY (309) request (Java `ConsumeMessageDirectlyResultRequestHeader`).
    pub struct ConsumeMessageDirectlyRequestHeader {
        /// Consumer group.
        req consumer_group: String = "consumerGroup";
        /// Target client id.
        opt client_id: String = "clientId";
        /// Message id.
        opt msg_id: String = "msgId";
        /// Broker holding the message (overwritten by the broker).
        opt broker_name: String = "brokerName";
        /// Topic.
        opt topic: String = "topic";
        /// Topic sys flag.
        opt topic_sys_flag: i32 = "topicSysFlag";
        /// Group sys flag.
        opt group_sys_flag: i32 = "groupSysFlag";
    }
}

command_header! {
    /// SEND_MESSAGE (10/310/320) response.
    pub struct SendMessageResponseHeader {
        /// The offset message id (store host + commit-log offset).
        req msg_id: String = "msgId";
        /// Queue the message went to.
        req queue_id: i32 = "queueId";
        /// Logical offset of the message in its queue.
        req queue_offset: i64 = "queueOffset";
        /// Transaction id (transactional messages).
        opt transaction_id: String = "transactionId";
        /// Unique id of a batch.
        opt batch_uniq_id: String = "batchUniqId";
    }
}

/// SEND_MESSAGE (10) request header, with the V1 long keys as its [`CommandHeader`] form.
///
/// SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) carry the same content under one-letter
/// keys: use [`SendMessageRequestHeaderV2`] (or [`SendMessageRequestHeader::write_v2`]).
/// [`CommandHeader::read_ext`] accepts either key set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendMessageRequestHeader {
    /// Producer group (`a`).
    pub producer_group: String,
    /// Topic (`b`).
    pub topic: String,
    /// Auto-create template topic, `"TBW102"` (`c`).
    pub default_topic: String,
    /// Queue count for auto-created topics, 4 (`d`).
    pub default_topic_queue_nums: i32,
    /// Target queue; negative lets the broker choose (`e`).
    pub queue_id: i32,
    /// `MessageSysFlag` bits (`f`).
    pub sys_flag: i32,
    /// Born timestamp in ms (`g`).
    pub born_timestamp: i64,
    /// User flag (`h`).
    pub flag: i32,
    /// Properties string `k\x01v\x02…` (`i`).
    pub properties: Option<String>,
    /// Reconsume count (`j`).
    pub reconsume_times: Option<i32>,
    /// Unit mode (`k`).
    pub unit_mode: Option<bool>,
    /// Max reconsume times, for retry-topic sends (`l`).
    pub max_reconsume_times: Option<i32>,
    /// Batch body (`m`).
    pub batch: Option<bool>,
    /// Target broker name (V1 `bname`, V2 `n`).
    pub bname: Option<String>,
}

/// The key sets of the two send header versions, in field order.
struct SendKeys {
    producer_group: &'static str,
    topic: &'static str,
    default_topic: &'static str,
    default_topic_queue_nums: &'static str,
    queue_id: &'static str,
    sys_flag: &'static str,
    born_timestamp: &'static str,
    flag: &'static str,
    properties: &'static str,
    reconsume_times: &'static str,
    unit_mode: &'static str,
    max_reconsume_times: &'static str,
    batch: &'static str,
    bname: &'static str,
}

const SEND_KEYS_V1: SendKeys = SendKeys {
    producer_group: "producerGroup",
    topic: "topic",
    default_topic: "defaultTopic",
    default_topic_queue_nums: "defaultTopicQueueNums",
    queue_id: "queueId",
    sys_flag: "sysFlag",
    born_timestamp: "bornTimestamp",
    flag: "flag",
    properties: "properties",
    reconsume_times: "reconsumeTimes",
    unit_mode: "unitMode",
    max_reconsume_times: "maxReconsumeTimes",
    batch: "batch",
    bname: "bname",
};

const SEND_KEYS_V2: SendKeys = SendKeys {
    producer_group: "a",
    topic: "b",
    default_topic: "c",
    default_topic_queue_nums: "d",
    queue_id: "e",
    sys_flag: "f",
    born_timestamp: "g",
    flag: "h",
    properties: "i",
    reconsume_times: "j",
    unit_mode: "k",
    max_reconsume_times: "l",
    batch: "m",
    bname: "n",
};

impl SendMessageRequestHeader {
    fn write_keys(&self, ext: &mut ExtFields, keys: &SendKeys) {
        write_value(ext, keys.producer_group, &self.producer_group);
        write_value(ext, keys.topic, &self.topic);
        write_value(ext, keys.default_topic, &self.default_topic);
        write_value(
            ext,
            keys.default_topic_queue_nums,
            &self.default_topic_queue_nums,
        );
        write_value(ext, keys.queue_id, &self.queue_id);
        write_value(ext, keys.sys_flag, &self.sys_flag);
        write_value(ext, keys.born_timestamp, &self.born_timestamp);
        write_value(ext, keys.flag, &self.flag);
        write_optional(ext, keys.properties, &self.properties);
        write_optional(ext, keys.reconsume_times, &self.reconsume_times);
        write_optional(ext, keys.unit_mode, &self.unit_mode);
        write_optional(ext, keys.max_reconsume_times, &self.max_reconsume_times);
        write_optional(ext, keys.batch, &self.batch);
        write_optional(ext, keys.bname, &self.bname);
    }

    fn read_keys(ext: &ExtFields, keys: &SendKeys) -> Result<Self, ProtocolError> {
        Ok(SendMessageRequestHeader {
            producer_group: read_required(ext, keys.producer_group)?,
            topic: read_required(ext, keys.topic)?,
            default_topic: read_required(ext, keys.default_topic)?,
            default_topic_queue_nums: read_required(ext, keys.default_topic_queue_nums)?,
            queue_id: read_required(ext, keys.queue_id)?,
            sys_flag: read_required(ext, keys.sys_flag)?,
            born_timestamp: read_required(ext, keys.born_timestamp)?,
            flag: read_required(ext, keys.flag)?,
            properties: read_optional(ext, keys.properties)?,
            reconsume_times: read_optional(ext, keys.reconsume_times)?,
            unit_mode: read_optional(ext, keys.unit_mode)?,
            max_reconsume_times: read_optional(ext, keys.max_reconsume_times)?,
            batch: read_optional(ext, keys.batch)?,
            bname: read_optional(ext, keys.bname)?,
        })
    }

    /// Writes the V2 one-letter keys `a`..`n` (SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE).
    pub fn write_v2(&self, ext: &mut ExtFields) {
        self.write_keys(ext, &SEND_KEYS_V2);
    }

    /// Reads the V2 one-letter keys only.
    pub fn read_v2(ext: &ExtFields) -> Result<Self, ProtocolError> {
        Self::read_keys(ext, &SEND_KEYS_V2)
    }

    /// Reads the V1 long keys only.
    pub fn read_v1(ext: &ExtFields) -> Result<Self, ProtocolError> {
        Self::read_keys(ext, &SEND_KEYS_V1)
    }
}

impl CommandHeader for SendMessageRequestHeader {
    /// Writes the V1 long keys (SEND_MESSAGE, code 10).
    fn write_ext(&self, ext: &mut ExtFields) {
        self.write_keys(ext, &SEND_KEYS_V1);
    }

    /// Reads V1 keys, or V2 keys when the V1 `topic` key is absent and V2's `b` is present.
    fn read_ext(ext: &ExtFields) -> Result<Self, ProtocolError> {
        if !ext.contains_key(SEND_KEYS_V1.topic) && ext.contains_key(SEND_KEYS_V2.topic) {
            Self::read_v2(ext)
        } else {
            Self::read_v1(ext)
        }
    }
}

/// [`SendMessageRequestHeader`] in its V2 wire form (one-letter keys), for
/// `RemotingCommand::request_with_header(SEND_MESSAGE_V2, &SendMessageRequestHeaderV2(h))`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendMessageRequestHeaderV2(pub SendMessageRequestHeader);

impl CommandHeader for SendMessageRequestHeaderV2 {
    fn write_ext(&self, ext: &mut ExtFields) {
        self.0.write_v2(ext);
    }

    fn read_ext(ext: &ExtFields) -> Result<Self, ProtocolError> {
        SendMessageRequestHeader::read_v2(ext).map(SendMessageRequestHeaderV2)
    }
}

/// A V2 send header borrowing its text from the message being sent, written straight into a
/// [`RequestFrame`](super::command::RequestFrame) — the per-send fast path, with exactly the
/// keys and values [`SendMessageRequestHeader::write_v2`] produces for the same fields.
///
/// ```
/// use rocketmq_actor::protocol::command::{RemotingCommand, RequestFrame};
/// use rocketmq_actor::protocol::header::{SendMessageRequestHeader, SendMessageRequestHeaderFields};
/// let fields = SendMessageRequestHeaderFields {
///     producer_group: "G", topic: "T", default_topic: "TBW102", default_topic_queue_nums: 8,
///     queue_id: 1, sys_flag: 0, born_timestamp: 1, flag: 0, properties: "TAGS\u{1}a\u{2}",
///     reconsume_times: 0, unit_mode: false, max_reconsume_times: None, batch: false,
///     bname: "broker-a",
/// };
/// let frame = RequestFrame::json(310, b"body", |ext| fields.write_v2(ext)).unwrap();
/// let command = RemotingCommand::decode(frame.into_bytes().slice(4..)).unwrap();
/// let header = SendMessageRequestHeader::read_v2(command.ext_fields_or_empty()).unwrap();
/// assert_eq!(header.properties.as_deref(), Some("TAGS\u{1}a\u{2}"));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct SendMessageRequestHeaderFields<'a> {
    /// Producer group (`a`).
    pub producer_group: &'a str,
    /// Topic (`b`).
    pub topic: &'a str,
    /// Auto-create template topic (`c`).
    pub default_topic: &'a str,
    /// Queue count for auto-created topics (`d`).
    pub default_topic_queue_nums: i32,
    /// Target queue (`e`).
    pub queue_id: i32,
    /// `MessageSysFlag` bits (`f`).
    pub sys_flag: i32,
    /// Born timestamp in ms (`g`).
    pub born_timestamp: i64,
    /// User flag (`h`).
    pub flag: i32,
    /// Properties wire text (`i`).
    pub properties: &'a str,
    /// Reconsume count (`j`).
    pub reconsume_times: i32,
    /// Unit mode (`k`).
    pub unit_mode: bool,
    /// Max reconsume times, for retry-topic sends (`l`).
    pub max_reconsume_times: Option<i32>,
    /// Batch body (`m`).
    pub batch: bool,
    /// Target broker name (`n`).
    pub bname: &'a str,
}

impl From<&SendMessageRequestHeaderFields<'_>> for SendMessageRequestHeader {
    /// The owned header whose [`SendMessageRequestHeader::write_v2`] writes exactly what
    /// [`SendMessageRequestHeaderFields::write_v2`] writes.
    fn from(fields: &SendMessageRequestHeaderFields<'_>) -> Self {
        SendMessageRequestHeader {
            producer_group: fields.producer_group.to_owned(),
            topic: fields.topic.to_owned(),
            default_topic: fields.default_topic.to_owned(),
            default_topic_queue_nums: fields.default_topic_queue_nums,
            queue_id: fields.queue_id,
            sys_flag: fields.sys_flag,
            born_timestamp: fields.born_timestamp,
            flag: fields.flag,
            properties: Some(fields.properties.to_owned()),
            reconsume_times: Some(fields.reconsume_times),
            unit_mode: Some(fields.unit_mode),
            max_reconsume_times: fields.max_reconsume_times,
            batch: Some(fields.batch),
            bname: Some(fields.bname.to_owned()),
        }
    }
}

impl SendMessageRequestHeaderFields<'_> {
    /// Writes the V2 one-letter keys, in the ascending order JSON headers use.
    pub fn write_v2(&self, ext: &mut super::command::ExtWriter<'_>) {
        // The V2 keys of `SEND_KEYS_V2`, as JSON members: a send writes no key text of its
        // own (the frame tests compare this with the typed header's encoding).
        ext.str_member(b"\"a\":", self.producer_group);
        ext.str_member(b"\"b\":", self.topic);
        ext.str_member(b"\"c\":", self.default_topic);
        ext.int_member(b"\"d\":", i64::from(self.default_topic_queue_nums));
        ext.int_member(b"\"e\":", i64::from(self.queue_id));
        ext.int_member(b"\"f\":", i64::from(self.sys_flag));
        ext.int_member(b"\"g\":", self.born_timestamp);
        ext.int_member(b"\"h\":", i64::from(self.flag));
        ext.str_member(b"\"i\":", self.properties);
        ext.int_member(b"\"j\":", i64::from(self.reconsume_times));
        ext.bool_member(b"\"k\":", self.unit_mode);
        if let Some(max) = self.max_reconsume_times {
            ext.int_member(b"\"l\":", i64::from(max));
        }
        ext.bool_member(b"\"m\":", self.batch);
        ext.str_member(b"\"n\":", self.bname);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::command::{RemotingCommand, SerializeType};
    use bytes::BytesMut;
    use proptest::prelude::*;

    /// Builds test values deterministically from a stream of random numbers.
    pub(crate) trait FromSeed {
        fn from_seed(seeds: &mut dyn Iterator<Item = u64>) -> Self;
    }

    impl FromSeed for String {
        fn from_seed(seeds: &mut dyn Iterator<Item = u64>) -> Self {
            const ALPHABET: &[char] = &[
                'a', 'Z', '0', '%', ' ', '"', '\\', '中', '\n', '@', '#', '|',
            ];
            let seed = seeds.next().unwrap_or(0);
            let len = 1 + (seed % 8) as usize;
            (0..len)
                .map(|i| ALPHABET[((seed >> (i * 4 + 3)) as usize) % ALPHABET.len()])
                .collect()
        }
    }

    impl FromSeed for i32 {
        fn from_seed(seeds: &mut dyn Iterator<Item = u64>) -> Self {
            seeds.next().unwrap_or(0) as i32
        }
    }

    impl FromSeed for i64 {
        fn from_seed(seeds: &mut dyn Iterator<Item = u64>) -> Self {
            seeds.next().unwrap_or(0) as i64
        }
    }

    impl FromSeed for bool {
        fn from_seed(seeds: &mut dyn Iterator<Item = u64>) -> Self {
            seeds.next().unwrap_or(0) % 2 == 1
        }
    }

    impl<T: FromSeed> FromSeed for Option<T> {
        fn from_seed(seeds: &mut dyn Iterator<Item = u64>) -> Self {
            if seeds.next().unwrap_or(0).is_multiple_of(3) {
                None
            } else {
                Some(T::from_seed(seeds))
            }
        }
    }

    impl SendMessageRequestHeader {
        fn from_seeds(seeds: &mut dyn Iterator<Item = u64>) -> Self {
            SendMessageRequestHeader {
                producer_group: FromSeed::from_seed(seeds),
                topic: FromSeed::from_seed(seeds),
                default_topic: FromSeed::from_seed(seeds),
                default_topic_queue_nums: FromSeed::from_seed(seeds),
                queue_id: FromSeed::from_seed(seeds),
                sys_flag: FromSeed::from_seed(seeds),
                born_timestamp: FromSeed::from_seed(seeds),
                flag: FromSeed::from_seed(seeds),
                properties: FromSeed::from_seed(seeds),
                reconsume_times: FromSeed::from_seed(seeds),
                unit_mode: FromSeed::from_seed(seeds),
                max_reconsume_times: FromSeed::from_seed(seeds),
                batch: FromSeed::from_seed(seeds),
                bname: FromSeed::from_seed(seeds),
            }
        }
    }

    impl SendMessageRequestHeaderV2 {
        fn from_seeds(seeds: &mut dyn Iterator<Item = u64>) -> Self {
            SendMessageRequestHeaderV2(SendMessageRequestHeader::from_seeds(seeds))
        }
    }

    /// Runs `$body` once per header type, with `$ty` bound to the type.
    macro_rules! for_each_header {
        ($ty:ident => $body:block) => {{
            for_each_header!(@each $ty $body;
                GetRouteInfoRequestHeader, PullMessageRequestHeader, PullMessageResponseHeader,
                QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
                UpdateConsumerOffsetRequestHeader, UpdateTopicRequestHeader,
                SearchOffsetRequestHeader, GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader,
                GetEarliestMsgStoretimeRequestHeader, OffsetResponseHeader,
                GetEarliestMsgStoretimeResponseHeader, ViewMessageRequestHeader,
                HeartbeatRequestHeader, HeartbeatResponseHeader, UnregisterClientRequestHeader,
                ConsumerSendMsgBackRequestHeader, GetConsumerListByGroupRequestHeader,
                GetConsumerConnectionListRequestHeader,
                NotifyConsumerIdsChangedRequestHeader, LockBatchMqRequestHeader,
                UnlockBatchMqRequestHeader, ResetOffsetRequestHeader,
                GetConsumerStatusRequestHeader, GetConsumerRunningInfoRequestHeader,
                ConsumeMessageDirectlyRequestHeader, SendMessageResponseHeader,
                SendMessageRequestHeader, SendMessageRequestHeaderV2);
        }};
        (@each $ty:ident $body:block; $($name:ident),*) => {
            $( { type $ty = $name; $body } )*
        };
    }

    fn ext_of<H: CommandHeader>(header: &H) -> ExtFields {
        let mut ext = ExtFields::new();
        header.write_ext(&mut ext);
        ext
    }

    fn ext(pairs: &[(&str, &str)]) -> ExtFields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn integer_fields_read_as_java_parses_them_plain_or_not() {
        assert_eq!(i64::from_ext("f", "123456").ok(), Some(123_456));
        assert_eq!(
            i64::from_ext("f", "-9223372036854775808").ok(),
            Some(i64::MIN)
        );
        assert_eq!(i64::from_ext("f", " 42 ").ok(), Some(42));
        assert_eq!(i64::from_ext("f", "+7").ok(), Some(7));
        assert_eq!(i32::from_ext("f", "-2147483648").ok(), Some(i32::MIN));
        for bad in ["", "-", "12a", "1 2", "9223372036854775808"] {
            assert!(i64::from_ext("f", bad).is_err(), "{bad:?}");
        }
        for bad in ["2147483648", "-2147483649", "0x10"] {
            assert!(i32::from_ext("f", bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn integer_fields_read_like_the_standard_parser(text in "[ +-]?[0-9]{0,20} ?") {
            prop_assert_eq!(i64::from_ext("f", &text).ok(), text.trim().parse::<i64>().ok());
            prop_assert_eq!(i32::from_ext("f", &text).ok(), text.trim().parse::<i32>().ok());
        }
    }

    #[test]
    fn borrowed_send_header_frame_matches_the_ext_map_encoding() {
        use crate::protocol::command::RequestFrame;
        for (max, properties) in [
            (None, "TAGS\u{1}a\"b\u{2}UNIQ_KEY\u{1}X\u{2}"),
            (Some(16), ""),
        ] {
            let fields = SendMessageRequestHeaderFields {
                producer_group: "group \\ 中",
                topic: "%RETRY%g",
                default_topic: "TBW102",
                default_topic_queue_nums: 8,
                queue_id: -3,
                sys_flag: 1,
                born_timestamp: -1_700_000_000_000,
                flag: i32::MIN,
                properties,
                reconsume_times: 2,
                unit_mode: false,
                max_reconsume_times: max,
                batch: true,
                bname: "broker-a",
            };
            let owned = SendMessageRequestHeader {
                producer_group: fields.producer_group.into(),
                topic: fields.topic.into(),
                default_topic: fields.default_topic.into(),
                default_topic_queue_nums: fields.default_topic_queue_nums,
                queue_id: fields.queue_id,
                sys_flag: fields.sys_flag,
                born_timestamp: fields.born_timestamp,
                flag: fields.flag,
                properties: Some(properties.into()),
                reconsume_times: Some(2),
                unit_mode: Some(false),
                max_reconsume_times: max,
                batch: Some(true),
                bname: Some("broker-a".into()),
            };
            assert_eq!(SendMessageRequestHeader::from(&fields), owned);
            for opaque in [0, 1, -1, i32::MAX, i32::MIN, 123_456] {
                let mut frame =
                    RequestFrame::json(320, b"payload", |ext| fields.write_v2(ext)).unwrap();
                frame.set_opaque(opaque);
                let fast = frame.into_bytes();
                let mut expected = RemotingCommand::request(320)
                    .with_opaque(opaque)
                    .with_body(bytes::Bytes::from_static(b"payload"));
                let mut ext = ExtFields::new();
                owned.write_v2(&mut ext);
                expected.ext_fields = Some(ext);
                let decoded = RemotingCommand::decode(fast.slice(4..)).unwrap();
                assert_eq!(decoded, expected);
                // Standard JSON, as a Java or Rust broker parses it.
                let header_len = u32::from_be_bytes(fast[4..8].try_into().unwrap()) as usize;
                let length = u32::from_be_bytes(fast[..4].try_into().unwrap()) as usize;
                assert_eq!(length, fast.len() - 4);
                let json: serde_json::Value =
                    serde_json::from_slice(&fast[8..8 + header_len]).unwrap();
                assert_eq!(json["opaque"], opaque);
                assert_eq!(json["extFields"]["i"], properties);
            }
        }
    }

    #[test]
    fn pull_request_uses_java_field_names() {
        let header = PullMessageRequestHeader {
            consumer_group: "g".into(),
            topic: "T".into(),
            queue_id: 3,
            queue_offset: 100,
            max_msg_nums: 32,
            sys_flag: 2,
            commit_offset: 0,
            suspend_timeout_millis: 15000,
            subscription: Some("*".into()),
            sub_version: 1_718_000_000_000,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            bname: Some("broker-a".into()),
        };
        let expected = ext(&[
            ("consumerGroup", "g"),
            ("topic", "T"),
            ("queueId", "3"),
            ("queueOffset", "100"),
            ("maxMsgNums", "32"),
            ("sysFlag", "2"),
            ("commitOffset", "0"),
            ("suspendTimeoutMillis", "15000"),
            ("subscription", "*"),
            ("subVersion", "1718000000000"),
            ("expressionType", "TAG"),
            ("bname", "broker-a"),
        ]);
        assert_eq!(ext_of(&header), expected);
        assert_eq!(
            PullMessageRequestHeader::read_ext(&expected).unwrap(),
            header
        );
    }

    #[test]
    fn quirky_key_names_match_java() {
        let unregister = UnregisterClientRequestHeader {
            client_id: "cid".into(),
            producer_group: None,
            consumer_group: Some("g".into()),
        };
        assert_eq!(
            ext_of(&unregister),
            ext(&[("clientID", "cid"), ("consumerGroup", "g")])
        );

        let reset = ResetOffsetRequestHeader {
            topic: "T".into(),
            group: "g".into(),
            queue_id: -1,
            offset: None,
            timestamp: 5,
            is_force: false,
        };
        assert_eq!(
            ext_of(&reset),
            ext(&[
                ("topic", "T"),
                ("group", "g"),
                ("queueId", "-1"),
                ("timestamp", "5"),
                ("isForce", "false")
            ])
        );
        // The broker sends neither queueId nor offset in some versions: queueId defaults to -1.
        let minimal = ext(&[
            ("topic", "T"),
            ("group", "g"),
            ("timestamp", "5"),
            ("isForce", "FALSE"),
        ]);
        assert_eq!(ResetOffsetRequestHeader::read_ext(&minimal).unwrap(), reset);

        let running = GetConsumerRunningInfoRequestHeader {
            consumer_group: "g".into(),
            client_id: "c".into(),
            jstack_enable: true,
        };
        assert_eq!(
            ext_of(&running),
            ext(&[
                ("consumerGroup", "g"),
                ("clientId", "c"),
                ("jstackEnable", "true")
            ])
        );
        assert!(
            GetMaxOffsetRequestHeader::read_ext(&ext(&[("topic", "T"), ("queueId", "0")]))
                .unwrap()
                .committed
        );
    }

    #[test]
    fn send_header_v1_and_v2_keys() {
        let header = SendMessageRequestHeader {
            producer_group: "pg".into(),
            topic: "T".into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: 4,
            queue_id: 1,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            flag: 0,
            properties: Some("TAGS\u{1}A\u{2}".into()),
            reconsume_times: Some(0),
            unit_mode: Some(false),
            max_reconsume_times: None,
            batch: Some(false),
            bname: Some("broker-a".into()),
        };
        let v2 = ext_of(&SendMessageRequestHeaderV2(header.clone()));
        let keys: Vec<&str> = v2.keys().collect();
        assert_eq!(
            keys,
            ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "n"]
        );
        assert_eq!(v2.get("c"), Some("TBW102"));
        assert_eq!(v2.get("k"), Some("false"));
        let v1 = ext_of(&header);
        assert_eq!(v1.get("bname"), Some("broker-a"));
        assert_eq!(v1.get("defaultTopicQueueNums"), Some("4"));
        // read_ext accepts either form.
        assert_eq!(SendMessageRequestHeader::read_ext(&v1).unwrap(), header);
        assert_eq!(SendMessageRequestHeader::read_ext(&v2).unwrap(), header);
        assert!(SendMessageRequestHeaderV2::read_ext(&v1).is_err());
    }

    #[test]
    fn missing_and_invalid_fields_are_typed_errors() {
        let no_topic = ext(&[("consumerGroup", "g"), ("queueId", "0")]);
        assert!(matches!(
            QueryConsumerOffsetRequestHeader::read_ext(&no_topic),
            Err(ProtocolError::MissingField("topic"))
        ));
        let bad_queue = ext(&[("consumerGroup", "g"), ("topic", "T"), ("queueId", "zero")]);
        assert!(matches!(
            QueryConsumerOffsetRequestHeader::read_ext(&bad_queue),
            Err(ProtocolError::InvalidField {
                field: "queueId",
                ..
            })
        ));
        let bad_bool = ext(&[
            ("consumerGroup", "g"),
            ("topic", "T"),
            ("queueId", "1"),
            ("setZeroIfNotFound", "yes"),
        ]);
        assert!(matches!(
            QueryConsumerOffsetRequestHeader::read_ext(&bad_bool),
            Err(ProtocolError::InvalidField {
                field: "setZeroIfNotFound",
                ..
            })
        ));
        let overflow = ext(&[("offset", "9223372036854775808")]);
        assert!(matches!(
            OffsetResponseHeader::read_ext(&overflow),
            Err(ProtocolError::InvalidField {
                field: "offset",
                ..
            })
        ));
        // An empty optional number reads as absent rather than failing.
        let empty_opt = ext(&[
            ("suggestWhichBrokerId", "0"),
            ("nextBeginOffset", "1"),
            ("minOffset", "0"),
            ("maxOffset", "9"),
            ("offsetDelta", ""),
        ]);
        assert_eq!(
            PullMessageResponseHeader::read_ext(&empty_opt)
                .unwrap()
                .offset_delta,
            None
        );
    }

    #[test]
    fn headers_ride_in_commands_both_serializations() {
        let header = ConsumerSendMsgBackRequestHeader {
            offset: 4242,
            group: "g".into(),
            delay_level: 0,
            origin_msg_id: Some("ID".into()),
            origin_topic: Some("T".into()),
            unit_mode: false,
            max_reconsume_times: Some(16),
            bname: None,
        };
        for ser in [SerializeType::Json, SerializeType::RocketMq] {
            let command =
                RemotingCommand::request_with_header(36, &header).with_serialize_type(ser);
            let mut buf = BytesMut::new();
            command.encode(&mut buf).unwrap();
            let decoded = RemotingCommand::decode(buf.freeze().slice(4..)).unwrap();
            assert_eq!(decoded.ext("unitMode"), Some("false"));
            assert_eq!(
                decoded
                    .decode_header::<ConsumerSendMsgBackRequestHeader>()
                    .unwrap(),
                header
            );
        }
        let empty = RemotingCommand::request_with_header(34, &HeartbeatRequestHeader {});
        assert_eq!(empty.ext_fields, Some(ExtFields::new()));
    }

    #[test]
    fn declared_keys_are_what_gets_written() {
        let mut seeds = (1..).map(|n: u64| n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let header = ConsumeMessageDirectlyRequestHeader::from_seeds(&mut seeds);
        for key in ext_of(&header).keys() {
            assert!(ConsumeMessageDirectlyRequestHeader::KEYS.contains(&key));
        }
    }

    const ALL_KEYS: &[&str] = &[
        "topic",
        "consumerGroup",
        "queueId",
        "queueOffset",
        "maxMsgNums",
        "sysFlag",
        "commitOffset",
        "suspendTimeoutMillis",
        "subVersion",
        "offset",
        "timestamp",
        "isForce",
        "group",
        "clientID",
        "clientId",
        "delayLevel",
        "suggestWhichBrokerId",
        "nextBeginOffset",
        "minOffset",
        "maxOffset",
        "msgId",
        "a",
        "b",
        "c",
        "d",
        "e",
        "f",
        "g",
        "h",
        "committed",
        "bname",
        "jstackEnable",
        "defaultTopic",
        "readQueueNums",
        "writeQueueNums",
        "perm",
        "order",
        "unitMode",
        "producerGroup",
        "defaultTopicQueueNums",
        "bornTimestamp",
        "flag",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_header_round_trips(seeds in proptest::collection::vec(any::<u64>(), 40)) {
            for_each_header!(H => {
                let header = H::from_seeds(&mut seeds.iter().copied());
                let ext = ext_of(&header);
                prop_assert_eq!(&H::read_ext(&ext).unwrap(), &header);
                for ser in [SerializeType::Json, SerializeType::RocketMq] {
                    let command = RemotingCommand::request_with_header(1, &header).with_serialize_type(ser);
                    let mut buf = BytesMut::new();
                    command.encode(&mut buf).unwrap();
                    let decoded = RemotingCommand::decode(buf.freeze().slice(4..)).unwrap();
                    prop_assert_eq!(&decoded.decode_header::<H>().unwrap(), &header);
                }
            });
        }

        #[test]
        fn arbitrary_ext_fields_never_panic(
            entries in proptest::collection::vec(
                (proptest::sample::select(ALL_KEYS), "-?[0-9]{0,20}|true|FALSE|\\PC{0,6}"), 0..24)
        ) {
            let ext: ExtFields = entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            for_each_header!(H => {
                let _ = H::read_ext(&ext);
            });
        }
    }
}
