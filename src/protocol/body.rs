//! JSON bodies with Java property names (protocol.md §2, §5).
//!
//! Parsing is lenient the way peers need it: `null` and absent are alike, unknown keys are
//! ignored, numbers may come as strings, and fastjson's non-standard map keys (bare numbers,
//! objects used as keys) are accepted by [`decode_json`]. Encoding emits every field (the Rust
//! broker requires them), omitting only `Option`s that are `None` as fastjson does.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::{DeserializeOwned, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use super::codes::perm;
use super::json::{normalize_keys, parse_lenient_i64, write_i64, write_json_string};
use crate::error::ProtocolError;
use crate::message::MessageQueue;

/// Parses a JSON body, tolerating fastjson's unquoted numeric keys (`{0:"addr"}`) and object
/// keys (`{{"topic":"T",…}:1}`).
///
/// Standard JSON goes straight to serde; only input serde rejects is rewritten and retried.
///
/// ```
/// use rocketmq_actor::protocol::body::{decode_json, BrokerData};
/// let legacy = br#"{"cluster":"c","brokerName":"b","brokerAddrs":{0:"10.0.0.1:10911"}}"#;
/// let broker: BrokerData = decode_json(legacy).unwrap();
/// assert_eq!(broker.master_addr(), Some("10.0.0.1:10911"));
/// ```
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ProtocolError> {
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(first_error) => {
            let normalized = std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| normalize_keys(text).ok().flatten());
            match normalized {
                Some(text) => {
                    serde_json::from_str(&text).map_err(|e| ProtocolError::Json(e.to_string()))
                }
                None => Err(ProtocolError::Json(first_error.to_string())),
            }
        }
    }
}

/// Serializes a body to JSON bytes.
///
/// Every body type of this module serializes infallibly (string map keys only); should a
/// foreign type fail, the result is an empty body, which peers reject loudly.
pub fn encode_json<T: Serialize>(value: &T) -> Bytes {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .unwrap_or_default()
}

/// Serde helpers accepting what Java and Rust peers send: `null` for anything, numbers as
/// strings, booleans as strings.
pub mod lenient {
    use super::*;

    /// `null` → `T::default()`, otherwise `T`'s own deserializer.
    pub fn null_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: Default + Deserialize<'de>,
    {
        Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
    }

    struct IntegerVisitor;

    impl<'de> Visitor<'de> for IntegerVisitor {
        type Value = Option<i64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer, a numeric string or null")
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            i64::try_from(v)
                .map(Some)
                .map_err(|_| E::custom(format!("{v} overflows i64")))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            parse_lenient_i64(&v.to_string())
                .map(Some)
                .ok_or_else(|| E::custom(format!("{v} is not an integer")))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            if v.trim().is_empty() {
                return Ok(None);
            }
            parse_lenient_i64(v)
                .map(Some)
                .ok_or_else(|| E::custom(format!("`{v}` is not an integer")))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    /// An `i64` given as a number or a string; `null` → 0.
    pub fn i64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
        Ok(deserializer.deserialize_any(IntegerVisitor)?.unwrap_or(0))
    }

    /// An optional `i64` given as a number or a string.
    pub fn opt_i64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
        deserializer.deserialize_any(IntegerVisitor)
    }

    /// An `i32` given as a number or a string; `null` → 0.
    pub fn i32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
        let value = i64(deserializer)?;
        i32::try_from(value).map_err(|_| serde::de::Error::custom(format!("{value} overflows i32")))
    }

    struct FloatVisitor;

    impl<'de> Visitor<'de> for FloatVisitor {
        type Value = f64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number, a numeric string or null")
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<f64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<f64, E> {
            v.trim()
                .parse()
                .map_err(|_| E::custom(format!("`{v}` is not a number")))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<f64, E> {
            Ok(0.0)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<f64, E> {
            Ok(0.0)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<f64, D::Error> {
            d.deserialize_any(self)
        }
    }

    /// An `f64` given as a number or a string; `null` (what serde writes for NaN) → 0.
    pub fn f64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        deserializer.deserialize_any(FloatVisitor)
    }

    struct BoolVisitor;

    impl<'de> Visitor<'de> for BoolVisitor {
        type Value = bool;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a boolean, \"true\"/\"false\", 0/1 or null")
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<bool, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<bool, E> {
            Ok(v != 0)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<bool, E> {
            Ok(v != 0)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<bool, E> {
            match v.trim() {
                t if t.eq_ignore_ascii_case("true") || t == "1" => Ok(true),
                t if t.eq_ignore_ascii_case("false") || t == "0" || t.is_empty() => Ok(false),
                _ => Err(E::custom(format!("`{v}` is not a boolean"))),
            }
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_any(self)
        }
    }

    /// A `bool` given as a boolean, a string or 0/1; `null` → false.
    pub fn bool<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(BoolVisitor)
    }

    struct StringVisitor;

    impl<'de> Visitor<'de> for StringVisitor {
        type Value = Option<String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string, a number, a boolean or null")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_owned()))
        }
        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    /// A string, with numbers/booleans as their text; `null` → `""`.
    pub fn string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        Ok(deserializer
            .deserialize_any(StringVisitor)?
            .unwrap_or_default())
    }

    /// An optional string, with numbers/booleans as their text.
    pub fn opt_string<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<String>, D::Error> {
        deserializer.deserialize_any(StringVisitor)
    }

    /// A string → string map whose values may be any scalar; `null` map → empty, `null`
    /// values dropped.
    pub fn string_map<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<String, String>, D::Error> {
        #[derive(Deserialize)]
        struct Value(#[serde(deserialize_with = "opt_string")] Option<String>);
        let raw: Option<BTreeMap<String, Value>> = Option::deserialize(deserializer)?;
        Ok(raw
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, Value(v))| v.map(|v| (k, v)))
            .collect())
    }
}

/// An `i64` that deserializes leniently (number, numeric string, `null` → 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct LenientI64(i64);

impl<'de> Deserialize<'de> for LenientI64 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        lenient::i64(deserializer).map(LenientI64)
    }
}

/// MessageQueue as peers write it, parsed leniently.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireQueue {
    #[serde(default, deserialize_with = "lenient::string")]
    topic: String,
    #[serde(default, deserialize_with = "lenient::string")]
    broker_name: String,
    #[serde(default, deserialize_with = "lenient::i32")]
    queue_id: i32,
}

impl From<WireQueue> for MessageQueue {
    fn from(wire: WireQueue) -> Self {
        MessageQueue::new(wire.topic, wire.broker_name, wire.queue_id)
    }
}

fn queue_vec<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<MessageQueue>, D::Error> {
    let raw: Option<Vec<WireQueue>> = Option::deserialize(deserializer)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .map(MessageQueue::from)
        .collect())
}

/// The JSON object text of a queue with fastjson's (alphabetical) key order:
/// `{"brokerName":"b","queueId":0,"topic":"T"}`.
pub fn message_queue_json(mq: &MessageQueue) -> String {
    let mut out = Vec::with_capacity(48 + mq.topic.len() + mq.broker_name.len());
    write_message_queue_json(&mut out, mq);
    String::from_utf8(out).unwrap_or_default()
}

fn write_message_queue_json(out: &mut Vec<u8>, mq: &MessageQueue) {
    out.extend_from_slice(b"{\"brokerName\":");
    write_json_string(out, &mq.broker_name);
    out.extend_from_slice(b",\"queueId\":");
    write_i64(out, i64::from(mq.queue_id));
    out.extend_from_slice(b",\"topic\":");
    write_json_string(out, &mq.topic);
    out.push(b'}');
}

/// Parses a map key naming a queue: its JSON object text (any key order) or Java's
/// `MessageQueue [topic=T, brokerName=b, queueId=0]`.
pub fn parse_message_queue_key(key: &str) -> Option<MessageQueue> {
    let key = key.trim();
    if key.starts_with('{') {
        return serde_json::from_str::<WireQueue>(key)
            .ok()
            .map(MessageQueue::from);
    }
    let inner = key
        .strip_prefix("MessageQueue [topic=")?
        .strip_suffix(']')?;
    let (topic, rest) = inner.rsplit_once(", brokerName=")?;
    let (broker_name, queue_id) = rest.rsplit_once(", queueId=")?;
    Some(MessageQueue::new(
        topic,
        broker_name,
        queue_id.trim().parse().ok()?,
    ))
}

/// Deserializes a MessageQueue-keyed map (string keys, see [`parse_message_queue_key`]) into
/// wire-order pairs.
fn queue_keyed_pairs<'de, D, V>(deserializer: D) -> Result<Vec<(MessageQueue, V)>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct PairsVisitor<V>(PhantomData<V>);

    impl<'de, V: Deserialize<'de>> Visitor<'de> for PairsVisitor<V> {
        type Value = Vec<(MessageQueue, V)>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map keyed by MessageQueue")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut pairs = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                let mq = parse_message_queue_key(&key).ok_or_else(|| {
                    serde::de::Error::custom(format!("`{key}` is not a MessageQueue key"))
                })?;
                pairs.push((mq, map.next_value()?));
            }
            Ok(pairs)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    deserializer.deserialize_any(PairsVisitor(PhantomData))
}

fn queue_offset_pairs<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<(MessageQueue, i64)>, D::Error> {
    Ok(queue_keyed_pairs::<D, LenientI64>(deserializer)?
        .into_iter()
        .map(|(mq, LenientI64(offset))| (mq, offset))
        .collect())
}

fn queue_keyed_map<'de, D, V>(deserializer: D) -> Result<BTreeMap<MessageQueue, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    Ok(queue_keyed_pairs(deserializer)?.into_iter().collect())
}

/// Serializes a MessageQueue-keyed map with stringified-JSON keys (what rocketmq-rust emits
/// and fastjson re-parses).
fn serialize_queue_keyed_map<S, V>(
    map: &BTreeMap<MessageQueue, V>,
    serializer: S,
) -> Result<S::Ok, S::Error>
where
    S: Serializer,
    V: Serialize,
{
    let mut out = serializer.serialize_map(Some(map.len()))?;
    for (mq, value) in map {
        out.serialize_entry(&message_queue_json(mq), value)?;
    }
    out.end()
}

/// Writes `{<mq object>:offset,…}` — fastjson's object-key form.
fn write_object_key_offsets(out: &mut Vec<u8>, pairs: &[(MessageQueue, i64)]) {
    out.push(b'{');
    for (i, (mq, offset)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_message_queue_json(out, mq);
        out.push(b':');
        write_i64(out, *offset);
    }
    out.push(b'}');
}

// ---------------------------------------------------------------------------------------------
// Route data (GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO)
// ---------------------------------------------------------------------------------------------

/// Route of a topic as the name server returns it (GET_ROUTEINFO_BY_TOPIC body).
///
/// Parse with [`decode_json`] to accept the legacy `{0:"addr"}` broker address form.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicRouteData {
    /// `"broker-a:4;broker-b:4"` for ordered topics.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub order_topic_conf: Option<String>,
    /// Queue counts and permissions per broker.
    #[serde(deserialize_with = "lenient::null_default")]
    pub queue_datas: Vec<QueueData>,
    /// Addresses per broker.
    #[serde(deserialize_with = "lenient::null_default")]
    pub broker_datas: Vec<BrokerData>,
    /// Filter servers per broker address (always `{}` in practice; Rust peers require it).
    #[serde(deserialize_with = "lenient::null_default")]
    pub filter_server_table: BTreeMap<String, Vec<String>>,
    /// Static-topic mapping (Java key; the Rust name server says `topicQueueMappingInfo`).
    #[serde(
        alias = "topicQueueMappingInfo",
        skip_serializing_if = "Option::is_none"
    )]
    pub topic_queue_mapping_by_broker: Option<serde_json::Value>,
}

/// One broker's queues of a topic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueueData {
    /// Broker name.
    #[serde(deserialize_with = "lenient::string")]
    pub broker_name: String,
    /// Readable queues: consumers see ids `0..read_queue_nums`.
    #[serde(deserialize_with = "lenient::i32")]
    pub read_queue_nums: i32,
    /// Writable queues: producers use ids `0..write_queue_nums`.
    #[serde(deserialize_with = "lenient::i32")]
    pub write_queue_nums: i32,
    /// [`perm`] bits.
    #[serde(deserialize_with = "lenient::i32")]
    pub perm: i32,
    /// Topic sys flag.
    #[serde(deserialize_with = "lenient::i32")]
    pub topic_sys_flag: i32,
}

impl QueueData {
    /// Consumers may read (PERM_READ).
    pub fn is_readable(&self) -> bool {
        self.perm & perm::READ != 0
    }

    /// Producers may write (PERM_WRITE).
    pub fn is_writable(&self) -> bool {
        self.perm & perm::WRITE != 0
    }
}

/// One broker (master/slave set) and its addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BrokerData {
    /// Cluster name.
    #[serde(deserialize_with = "lenient::string")]
    pub cluster: String,
    /// Broker name.
    #[serde(deserialize_with = "lenient::string")]
    pub broker_name: String,
    /// Broker id → `host:port`; id 0 is the master.
    #[serde(deserialize_with = "lenient::null_default")]
    pub broker_addrs: BTreeMap<i64, String>,
    /// Zone name.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub zone_name: Option<String>,
    /// A slave acts as master when the master is down (5.x).
    #[serde(deserialize_with = "lenient::bool")]
    pub enable_acting_master: bool,
}

impl BrokerData {
    /// Java's `MixAll.MASTER_ID`.
    pub const MASTER_ID: i64 = 0;

    /// The master's address (id 0).
    pub fn master_addr(&self) -> Option<&str> {
        self.broker_addrs.get(&Self::MASTER_ID).map(String::as_str)
    }

    /// The address for `broker_id`; else, for a slave id, the next id; else the master; else
    /// any address (the Java client's fallback when a suggested broker is missing).
    pub fn select_addr(&self, broker_id: i64) -> Option<&str> {
        let lookup = |id: i64| self.broker_addrs.get(&id).map(String::as_str);
        lookup(broker_id)
            .or_else(|| {
                (broker_id != Self::MASTER_ID)
                    .then(|| broker_id.checked_add(1).and_then(lookup))
                    .flatten()
            })
            .or_else(|| self.master_addr())
            .or_else(|| self.broker_addrs.values().next().map(String::as_str))
    }
}

/// GET_BROKER_CLUSTER_INFO (106) body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterInfo {
    /// Broker name → broker data.
    #[serde(deserialize_with = "lenient::null_default")]
    pub broker_addr_table: BTreeMap<String, BrokerData>,
    /// Cluster name → broker names.
    #[serde(deserialize_with = "lenient::null_default")]
    pub cluster_addr_table: BTreeMap<String, Vec<String>>,
}

// ---------------------------------------------------------------------------------------------
// Heartbeat (HEART_BEAT)
// ---------------------------------------------------------------------------------------------

/// HEART_BEAT (34) body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HeartbeatData {
    /// Stable unique client id, `ip@instance` (key `clientID`).
    #[serde(rename = "clientID", deserialize_with = "lenient::string")]
    pub client_id: String,
    /// Producer groups of this client.
    #[serde(deserialize_with = "lenient::null_default")]
    pub producer_data_set: Vec<ProducerData>,
    /// Consumer groups of this client.
    #[serde(deserialize_with = "lenient::null_default")]
    pub consumer_data_set: Vec<ConsumerData>,
    /// Non-zero switches to heartbeat V2; send 0.
    #[serde(deserialize_with = "lenient::i32")]
    pub heartbeat_fingerprint: i32,
    /// V2: subscriptions omitted.
    #[serde(deserialize_with = "lenient::bool")]
    pub without_sub: bool,
}

/// A producer group registration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProducerData {
    /// Producer group.
    #[serde(deserialize_with = "lenient::string")]
    pub group_name: String,
}

/// How a consumer gets messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConsumeType {
    /// Pull / lite pull consumers.
    ConsumeActively,
    /// Push consumers.
    #[default]
    ConsumePassively,
    /// POP consumers.
    ConsumePop,
}

/// Clustering (queues shared by the group) or broadcasting (every member reads everything).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MessageModel {
    /// Every member consumes every message.
    Broadcasting,
    /// Queues are divided among the group.
    #[default]
    Clustering,
}

/// Where a group without a committed offset starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConsumeFromWhere {
    /// From the end of the queue.
    #[default]
    ConsumeFromLastOffset,
    /// Deprecated.
    ConsumeFromLastOffsetAndFromMinWhenBootFirst,
    /// Deprecated.
    ConsumeFromMinOffset,
    /// Deprecated.
    ConsumeFromMaxOffset,
    /// From the beginning of the queue.
    ConsumeFromFirstOffset,
    /// From a timestamp.
    ConsumeFromTimestamp,
}

/// A consumer group registration (every field is required by the Rust broker).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerData {
    /// Consumer group.
    #[serde(deserialize_with = "lenient::string")]
    pub group_name: String,
    /// Push, pull or pop.
    #[serde(deserialize_with = "lenient::null_default")]
    pub consume_type: ConsumeType,
    /// Clustering or broadcasting.
    #[serde(deserialize_with = "lenient::null_default")]
    pub message_model: MessageModel,
    /// Start position (informational for the broker).
    #[serde(deserialize_with = "lenient::null_default")]
    pub consume_from_where: ConsumeFromWhere,
    /// Subscriptions, including `%RETRY%<group>` for clustering push consumers.
    #[serde(deserialize_with = "lenient::null_default")]
    pub subscription_data_set: Vec<SubscriptionData>,
    /// Unit mode (legacy), false.
    #[serde(deserialize_with = "lenient::bool")]
    pub unit_mode: bool,
}

/// The body of CHECK_CLIENT_CONFIG: a subscription the client means to use, asked of a
/// broker before the consumer starts (Java's `CheckClientRequestBody`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CheckClientRequestBody {
    /// The asking client.
    #[serde(deserialize_with = "lenient::string")]
    pub client_id: String,
    /// The consumer group.
    #[serde(deserialize_with = "lenient::string")]
    pub group: String,
    /// The subscription to check.
    pub subscription_data: Option<SubscriptionData>,
    /// The client's namespace, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// One topic subscription (every field is required by the Rust broker).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionData {
    /// Class filter mode (legacy), false.
    #[serde(deserialize_with = "lenient::bool")]
    pub class_filter_mode: bool,
    /// Topic.
    #[serde(deserialize_with = "lenient::string")]
    pub topic: String,
    /// The expression as written (`"*"`, `"TagA || TagB"`, SQL).
    #[serde(deserialize_with = "lenient::string")]
    pub sub_string: String,
    /// Tags of a TAG expression (empty for `*` and SQL92).
    #[serde(deserialize_with = "lenient::null_default")]
    pub tags_set: Vec<String>,
    /// Java `String.hashCode` of each tag.
    #[serde(deserialize_with = "lenient::null_default")]
    pub code_set: Vec<i32>,
    /// Timestamp (ms) that grows when the subscription changes.
    #[serde(deserialize_with = "lenient::i64")]
    pub sub_version: i64,
    /// `"TAG"` or `"SQL92"`.
    #[serde(deserialize_with = "lenient::string")]
    pub expression_type: String,
}

impl Default for SubscriptionData {
    /// Subscribe-all with a TAG expression: what Java assumes for missing fields.
    fn default() -> Self {
        SubscriptionData {
            class_filter_mode: false,
            topic: String::new(),
            sub_string: "*".to_owned(),
            tags_set: Vec::new(),
            code_set: Vec::new(),
            sub_version: 0,
            expression_type: "TAG".to_owned(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Group membership and locks
// ---------------------------------------------------------------------------------------------

/// GET_CONSUMER_LIST_BY_GROUP (38) response body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerListBody {
    /// Client ids of the group's members.
    #[serde(deserialize_with = "lenient::null_default")]
    pub consumer_id_list: Vec<String>,
}

/// GET_CONSUMER_CONNECTION_LIST (203) response body (Java `ConsumerConnection`): a consumer
/// group's connected clients and what the group declared in its heartbeats.
///
/// ```
/// use rocketmq_actor::protocol::body::{decode_json, ConsumerConnection, MessageModel};
/// let body: ConsumerConnection = decode_json(br#"{"connectionSet":[{"clientAddr":"10.0.0.9:51234",
///   "clientId":"10.0.0.9@42","language":"JAVA","version":453}],
///   "consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY",
///   "messageModel":"CLUSTERING","subscriptionTable":{"Orders":{"subString":"*","topic":"Orders"}}}"#).unwrap();
/// assert_eq!(body.connection_set[0].client_id, "10.0.0.9@42");
/// assert_eq!(body.message_model, MessageModel::Clustering);
/// assert_eq!(body.subscription_table["Orders"].sub_string, "*");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerConnection {
    /// One entry per client connection (a Java `HashSet`).
    #[serde(deserialize_with = "lenient::null_default")]
    pub connection_set: Vec<ClientConnection>,
    /// Topic → the group's subscription of it.
    #[serde(deserialize_with = "lenient::null_default")]
    pub subscription_table: BTreeMap<String, SubscriptionData>,
    /// Push, pull or pop.
    #[serde(deserialize_with = "lenient::null_default")]
    pub consume_type: ConsumeType,
    /// Clustering or broadcasting.
    #[serde(deserialize_with = "lenient::null_default")]
    pub message_model: MessageModel,
    /// Where members without a committed offset start.
    #[serde(deserialize_with = "lenient::null_default")]
    pub consume_from_where: ConsumeFromWhere,
}

/// One client connection of a [`ConsumerConnection`] (Java `Connection`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClientConnection {
    /// The client id (`ip@instance`).
    #[serde(deserialize_with = "lenient::string")]
    pub client_id: String,
    /// The connection's remote address as the broker sees it (`ip:port`).
    #[serde(deserialize_with = "lenient::string")]
    pub client_addr: String,
    /// The client's language (`JAVA`, `RUST`, …: the request header's language code).
    #[serde(deserialize_with = "lenient::string")]
    pub language: String,
    /// The client's version ordinal (Java `MQVersion`).
    #[serde(deserialize_with = "lenient::i32")]
    pub version: i32,
}

/// LOCK_BATCH_MQ (41) request body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LockBatchRequestBody {
    /// Consumer group.
    #[serde(deserialize_with = "lenient::string")]
    pub consumer_group: String,
    /// Client asking for the locks.
    #[serde(deserialize_with = "lenient::string")]
    pub client_id: String,
    /// Do not forward to other brokers.
    #[serde(deserialize_with = "lenient::bool")]
    pub only_this_broker: bool,
    /// Queues to lock.
    #[serde(deserialize_with = "queue_vec")]
    pub mq_set: Vec<MessageQueue>,
}

/// LOCK_BATCH_MQ (41) response body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LockBatchResponseBody {
    /// Queues now locked by the caller (key `lockOKMQSet`).
    #[serde(rename = "lockOKMQSet", deserialize_with = "queue_vec")]
    pub lock_ok_mq_set: Vec<MessageQueue>,
}

/// UNLOCK_BATCH_MQ (42) request body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UnlockBatchRequestBody {
    /// Consumer group.
    #[serde(deserialize_with = "lenient::string")]
    pub consumer_group: String,
    /// Client releasing the locks.
    #[serde(deserialize_with = "lenient::string")]
    pub client_id: String,
    /// Do not forward to other brokers.
    #[serde(deserialize_with = "lenient::bool")]
    pub only_this_broker: bool,
    /// Queues to unlock.
    #[serde(deserialize_with = "queue_vec")]
    pub mq_set: Vec<MessageQueue>,
}

// ---------------------------------------------------------------------------------------------
// Server-initiated calls (RESET_CONSUMER_CLIENT_OFFSET, GET_CONSUMER_STATUS_FROM_CLIENT, …)
// ---------------------------------------------------------------------------------------------

/// Queue → offset pairs in wire order (a fastjson `Map<MessageQueue, Long>`).
pub type QueueOffsets = Vec<(MessageQueue, i64)>;

/// RESET_CONSUMER_CLIENT_OFFSET (220) body: queue → offset.
///
/// On the wire the keys are MessageQueue *objects* (fastjson); use [`ResetOffsetBody::encode`]
/// to write that form and [`ResetOffsetBody::decode`] (or [`decode_json`]) to read it or the
/// stringified-key form.
///
/// ```
/// use rocketmq_actor::protocol::body::ResetOffsetBody;
/// let body = ResetOffsetBody::decode(
///     br#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:100}}"#).unwrap();
/// assert_eq!(body.offset_table[0].1, 100);
/// assert_eq!(&body.encode()[..], br#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:100}}"#);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResetOffsetBody {
    /// Queue → offset to reset to, in wire order.
    #[serde(deserialize_with = "queue_offset_pairs")]
    pub offset_table: Vec<(MessageQueue, i64)>,
}

impl ResetOffsetBody {
    /// The fastjson object-key form the brokers send.
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(32 + self.offset_table.len() * 64);
        out.extend_from_slice(b"{\"offsetTable\":");
        write_object_key_offsets(&mut out, &self.offset_table);
        out.push(b'}');
        Bytes::from(out)
    }

    /// Parses either key form.
    pub fn decode(bytes: &[u8]) -> Result<Self, ProtocolError> {
        decode_json(bytes)
    }
}

#[derive(Default, Deserialize)]
struct OffsetTableRepr(#[serde(deserialize_with = "queue_offset_pairs")] Vec<(MessageQueue, i64)>);

fn consumer_offset_tables<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, QueueOffsets>, D::Error> {
    let raw: Option<BTreeMap<String, OffsetTableRepr>> = Option::deserialize(deserializer)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .map(|(client, OffsetTableRepr(table))| (client, table))
        .collect())
}

/// GET_CONSUMER_STATUS_FROM_CLIENT (221) reply body (deprecated call).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GetConsumerStatusBody {
    /// This client's queue → offset.
    #[serde(deserialize_with = "queue_offset_pairs")]
    pub message_queue_table: Vec<(MessageQueue, i64)>,
    /// Client id → its queue → offset (aggregated by admin tools).
    #[serde(deserialize_with = "consumer_offset_tables")]
    pub consumer_table: BTreeMap<String, QueueOffsets>,
}

impl GetConsumerStatusBody {
    /// The fastjson object-key form a Java client replies with.
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(64 + self.message_queue_table.len() * 64);
        out.extend_from_slice(b"{\"consumerTable\":{");
        for (i, (client, table)) in self.consumer_table.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json_string(&mut out, client);
            out.push(b':');
            write_object_key_offsets(&mut out, table);
        }
        out.extend_from_slice(b"},\"messageQueueTable\":");
        write_object_key_offsets(&mut out, &self.message_queue_table);
        out.push(b'}');
        Bytes::from(out)
    }

    /// Parses either key form.
    pub fn decode(bytes: &[u8]) -> Result<Self, ProtocolError> {
        decode_json(bytes)
    }
}

/// GET_CONSUMER_RUNNING_INFO (307) reply body.
///
/// `mqTable`/`mqPopTable` are written with stringified MessageQueue keys, which fastjson and
/// rocketmq-rust both read; both key forms are parsed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerRunningInfo {
    /// `PROP_*` entries (name server address, consume type, client version, start time…).
    #[serde(deserialize_with = "lenient::string_map")]
    pub properties: BTreeMap<String, String>,
    /// The client's subscriptions.
    #[serde(deserialize_with = "lenient::null_default")]
    pub subscription_set: Vec<SubscriptionData>,
    /// Per assigned queue: the process queue's state.
    #[serde(
        serialize_with = "serialize_queue_keyed_map",
        deserialize_with = "queue_keyed_map"
    )]
    pub mq_table: BTreeMap<MessageQueue, ProcessQueueInfo>,
    /// Per POP queue: its state (empty for classic consumers).
    #[serde(
        serialize_with = "serialize_queue_keyed_map",
        deserialize_with = "queue_keyed_map"
    )]
    pub mq_pop_table: BTreeMap<MessageQueue, PopProcessQueueInfo>,
    /// Per topic: throughput and latency statistics.
    #[serde(deserialize_with = "lenient::null_default")]
    pub status_table: BTreeMap<String, ConsumeStatus>,
    /// Free-form user information.
    #[serde(deserialize_with = "lenient::string_map")]
    pub user_consumer_info: BTreeMap<String, String>,
    /// Thread dump, when asked for with `jstackEnable`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub jstack: Option<String>,
}

/// State of one process queue (Java `ProcessQueueInfo`; `droped` sic).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProcessQueueInfo {
    /// Offset committed (or to be committed) for the queue.
    #[serde(deserialize_with = "lenient::i64")]
    pub commit_offset: i64,
    /// Smallest cached message offset.
    #[serde(deserialize_with = "lenient::i64")]
    pub cached_msg_min_offset: i64,
    /// Largest cached message offset.
    #[serde(deserialize_with = "lenient::i64")]
    pub cached_msg_max_offset: i64,
    /// Cached message count.
    #[serde(deserialize_with = "lenient::i32")]
    pub cached_msg_count: i32,
    /// Cached body size in MiB.
    #[serde(rename = "cachedMsgSizeInMiB", deserialize_with = "lenient::i32")]
    pub cached_msg_size_in_mib: i32,
    /// Orderly: smallest offset in the consuming batch.
    #[serde(deserialize_with = "lenient::i64")]
    pub transaction_msg_min_offset: i64,
    /// Orderly: largest offset in the consuming batch.
    #[serde(deserialize_with = "lenient::i64")]
    pub transaction_msg_max_offset: i64,
    /// Orderly: messages in the consuming batch.
    #[serde(deserialize_with = "lenient::i32")]
    pub transaction_msg_count: i32,
    /// Orderly: the broker lock is held.
    #[serde(deserialize_with = "lenient::bool")]
    pub locked: bool,
    /// Orderly: failed unlock attempts.
    #[serde(deserialize_with = "lenient::i64")]
    pub try_unlock_times: i64,
    /// Orderly: last lock time (ms).
    #[serde(deserialize_with = "lenient::i64")]
    pub last_lock_timestamp: i64,
    /// The queue was dropped (rebalanced away).
    #[serde(deserialize_with = "lenient::bool")]
    pub droped: bool,
    /// Last pull time (ms).
    #[serde(deserialize_with = "lenient::i64")]
    pub last_pull_timestamp: i64,
    /// Last consume time (ms).
    #[serde(deserialize_with = "lenient::i64")]
    pub last_consume_timestamp: i64,
}

/// State of one POP queue (Java `PopProcessQueueInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PopProcessQueueInfo {
    /// Messages waiting for an ack.
    #[serde(deserialize_with = "lenient::i32")]
    pub wait_ack_count: i32,
    /// Dropped (sic).
    #[serde(deserialize_with = "lenient::bool")]
    pub droped: bool,
    /// Last pop time (ms).
    #[serde(deserialize_with = "lenient::i64")]
    pub last_pop_timestamp: i64,
}

/// Per-topic consumption statistics (Java `ConsumeStatus`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsumeStatus {
    /// Mean pull round trip (ms).
    #[serde(rename = "pullRT", deserialize_with = "lenient::f64")]
    pub pull_rt: f64,
    /// Pulled messages per second.
    #[serde(rename = "pullTPS", deserialize_with = "lenient::f64")]
    pub pull_tps: f64,
    /// Mean consume time (ms).
    #[serde(rename = "consumeRT", deserialize_with = "lenient::f64")]
    pub consume_rt: f64,
    /// Successfully consumed messages per second.
    #[serde(rename = "consumeOKTPS", deserialize_with = "lenient::f64")]
    pub consume_ok_tps: f64,
    /// Failed messages per second.
    #[serde(rename = "consumeFailedTPS", deserialize_with = "lenient::f64")]
    pub consume_failed_tps: f64,
    /// Failed messages in the last hour.
    #[serde(rename = "consumeFailedMsgs", deserialize_with = "lenient::i64")]
    pub consume_failed_msgs: i64,
}

/// Outcome of CONSUME_MESSAGE_DIRECTLY (Java `CMResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CMResult {
    /// Consumed.
    #[serde(rename = "CR_SUCCESS")]
    CrSuccess,
    /// Asked to be retried later.
    #[serde(rename = "CR_LATER")]
    CrLater,
    /// Orderly: roll back.
    #[serde(rename = "CR_ROLLBACK")]
    CrRollback,
    /// Orderly: commit.
    #[serde(rename = "CR_COMMIT")]
    CrCommit,
    /// The listener failed.
    #[serde(rename = "CR_THROW_EXCEPTION")]
    CrThrowException,
    /// The listener returned nothing.
    #[serde(rename = "CR_RETURN_NULL")]
    CrReturnNull,
}

/// CONSUME_MESSAGE_DIRECTLY (309) reply body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumeMessageDirectlyResult {
    /// The consumer is orderly.
    #[serde(deserialize_with = "lenient::bool")]
    pub order: bool,
    /// Orderly: auto commit.
    #[serde(deserialize_with = "lenient::bool")]
    pub auto_commit: bool,
    /// The outcome (`null` when unknown).
    #[serde(deserialize_with = "lenient::null_default")]
    pub consume_result: Option<CMResult>,
    /// Details, e.g. the listener's error.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub remark: Option<String>,
    /// Time spent consuming (ms; Java's spelling).
    #[serde(deserialize_with = "lenient::i64")]
    pub spent_time_mills: i64,
}

// ---------------------------------------------------------------------------------------------
// Administration: topics, subscription groups, broker state
// ---------------------------------------------------------------------------------------------

/// A topic's configuration on a broker (Java `TopicConfig`): what UPDATE_AND_CREATE_TOPIC (17)
/// sets, GET_TOPIC_CONFIG (351) and GET_ALL_TOPIC_CONFIG (21) return, and a broker registers
/// with the name server.
///
/// ```
/// use rocketmq_actor::admin::TopicConfig;
/// let mut orders = TopicConfig::new("Orders", 8);
/// orders.order = true;
/// assert_eq!((orders.read_queue_nums, orders.write_queue_nums, orders.perm), (8, 8, 6));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfig {
    /// Topic name.
    pub topic_name: String,
    /// Queues consumers see.
    #[serde(deserialize_with = "lenient::i32")]
    pub read_queue_nums: i32,
    /// Queues producers see.
    #[serde(deserialize_with = "lenient::i32")]
    pub write_queue_nums: i32,
    /// `PermName` bits: 4 read, 2 write, 1 inherit ([`crate::protocol::codes::perm`]).
    #[serde(deserialize_with = "lenient::i32")]
    pub perm: i32,
    /// `TopicSysFlag` bits.
    #[serde(default, deserialize_with = "lenient::i32")]
    pub topic_sys_flag: i32,
    /// Ordered topic.
    #[serde(default, deserialize_with = "lenient::bool")]
    pub order: bool,
}

impl TopicConfig {
    /// A read-write topic with `queues` read and write queues.
    pub fn new(name: impl Into<String>, queues: i32) -> Self {
        TopicConfig {
            topic_name: name.into(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: crate::protocol::codes::perm::READ | crate::protocol::codes::perm::WRITE,
            topic_sys_flag: 0,
            order: false,
        }
    }
}

/// GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicList {
    /// Every topic some broker registered, system topics included.
    #[serde(deserialize_with = "lenient::null_default")]
    pub topic_list: Vec<String>,
}

/// GET_ALL_TOPIC_CONFIG (21) body (Java `TopicConfigSerializeWrapper`; the data version and
/// static-topic mappings are not read).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicConfigTable {
    /// Topic name → its configuration on the broker.
    #[serde(deserialize_with = "lenient::null_default")]
    pub topic_config_table: BTreeMap<String, TopicConfig>,
}

/// GET_BROKER_RUNTIME_INFO (28) body (Java `KVTable`): every value a string, the keys the
/// broker's own (Java and rocketmq-rust fill different sets).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KvTable {
    /// Key → value.
    #[serde(deserialize_with = "lenient::string_map")]
    pub table: BTreeMap<String, String>,
}

/// A consumer group's configuration on a broker (Java `SubscriptionGroupConfig`), as
/// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) lists it and UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
/// (200) sets it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionGroupConfig {
    /// Group name.
    #[serde(deserialize_with = "lenient::string")]
    pub group_name: String,
    /// Members may consume.
    #[serde(deserialize_with = "lenient::bool")]
    pub consume_enable: bool,
    /// A new member starts from the queue's first offset when it has none.
    #[serde(deserialize_with = "lenient::bool")]
    pub consume_from_min_enable: bool,
    /// Broadcasting consumption is allowed.
    #[serde(deserialize_with = "lenient::bool")]
    pub consume_broadcast_enable: bool,
    /// Queues of the group's retry topic.
    #[serde(deserialize_with = "lenient::i32")]
    pub retry_queue_nums: i32,
    /// Deliveries before a message goes to the dead-letter topic.
    #[serde(deserialize_with = "lenient::i32")]
    pub retry_max_times: i32,
    /// The broker id members pull from.
    #[serde(deserialize_with = "lenient::i64")]
    pub broker_id: i64,
    /// The broker id members pull from when they fall behind.
    #[serde(deserialize_with = "lenient::i64")]
    pub which_broker_when_consume_slowly: i64,
    /// Members are told when the membership changes.
    #[serde(deserialize_with = "lenient::bool")]
    pub notify_consumer_ids_changed_enable: bool,
}

impl SubscriptionGroupConfig {
    /// A group with the broker defaults (Java's): consume enabled, 1 retry queue, 16 retries.
    pub fn new(name: impl Into<String>) -> Self {
        SubscriptionGroupConfig {
            group_name: name.into(),
            ..Default::default()
        }
    }
}

impl Default for SubscriptionGroupConfig {
    fn default() -> Self {
        SubscriptionGroupConfig {
            group_name: String::new(),
            consume_enable: true,
            consume_from_min_enable: true,
            consume_broadcast_enable: true,
            retry_queue_nums: 1,
            retry_max_times: 16,
            broker_id: 0,
            which_broker_when_consume_slowly: 1,
            notify_consumer_ids_changed_enable: true,
        }
    }
}

/// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) body (Java `SubscriptionGroupWrapper`; the data
/// version and forbidden table are not read).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionGroupTable {
    /// Group name → its configuration on the broker.
    #[serde(deserialize_with = "lenient::null_default")]
    pub subscription_group_table: BTreeMap<String, SubscriptionGroupConfig>,
}

/// One queue's stored range in GET_TOPIC_STATS_INFO (Java `TopicOffset`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicOffset {
    /// The queue's first offset still stored.
    #[serde(deserialize_with = "lenient::i64")]
    pub min_offset: i64,
    /// One past the queue's last offset.
    #[serde(deserialize_with = "lenient::i64")]
    pub max_offset: i64,
    /// Store time (ms) of the queue's last message; 0 for an empty queue.
    #[serde(deserialize_with = "lenient::i64")]
    pub last_update_timestamp: i64,
}

/// GET_TOPIC_STATS_INFO (202) body (Java `TopicStatsTable`). Java writes the queue keys as raw
/// JSON objects, rocketmq-rust as JSON strings; both are read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicStatsTable {
    /// Queue → its stored range.
    #[serde(
        deserialize_with = "queue_keyed_map",
        serialize_with = "serialize_queue_keyed_map"
    )]
    pub offset_table: BTreeMap<MessageQueue, TopicOffset>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn to_value<T: Serialize>(body: &T) -> Value {
        serde_json::from_slice(&encode_json(body)).unwrap()
    }

    /// The §2.4 example of protocol.md, comments stripped.
    const ROUTE_STANDARD: &str = r#"{
      "orderTopicConf": "broker-a:4;broker-b:4",
      "queueDatas": [
        {"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}
      ],
      "brokerDatas": [
        {"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},
         "brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false,
         "zoneName":"z1"}
      ],
      "filterServerTable": {}
    }"#;

    #[test]
    fn route_data_standard_form() {
        let route: TopicRouteData = decode_json(ROUTE_STANDARD.as_bytes()).unwrap();
        assert_eq!(
            route.order_topic_conf.as_deref(),
            Some("broker-a:4;broker-b:4")
        );
        let queue = &route.queue_datas[0];
        assert_eq!(
            (queue.read_queue_nums, queue.write_queue_nums, queue.perm),
            (4, 4, 6)
        );
        assert!(queue.is_readable() && queue.is_writable());
        let broker = &route.broker_datas[0];
        assert_eq!(broker.master_addr(), Some("10.0.0.1:10911"));
        assert_eq!(
            broker.broker_addrs.get(&1).map(String::as_str),
            Some("10.0.0.2:10911")
        );
        assert_eq!(broker.zone_name.as_deref(), Some("z1"));
        assert_eq!(broker.cluster, "DefaultCluster");
    }

    #[test]
    fn route_data_legacy_unquoted_keys_and_rust_nulls() {
        let legacy = ROUTE_STANDARD
            .replace(r#""0":"10.0.0.1"#, r#"0:"10.0.0.1"#)
            .replace(r#""1":"10.0.0.2"#, r#"1:"10.0.0.2"#);
        assert!(legacy.contains("{0:\""));
        let from_legacy: TopicRouteData = decode_json(legacy.as_bytes()).unwrap();
        let from_standard: TopicRouteData = decode_json(ROUTE_STANDARD.as_bytes()).unwrap();
        assert_eq!(from_legacy, from_standard);

        let rust_style = r#"{"orderTopicConf":null,"queueDatas":[{"brokerName":"b","readQueueNums":"8",
            "writeQueueNums":8,"perm":4,"topicSysFlag":null}],"brokerDatas":[{"cluster":"c","brokerName":"b",
            "brokerAddrs":{"0":"h:1"},"zoneName":null,"enableActingMaster":null}],"filterServerTable":null,
            "topicQueueMappingInfo":{"b":{"x":1}},"somethingNew":[1]}"#;
        let route: TopicRouteData = decode_json(rust_style.as_bytes()).unwrap();
        assert_eq!(route.order_topic_conf, None);
        assert_eq!(route.queue_datas[0].read_queue_nums, 8);
        assert!(!route.queue_datas[0].is_writable());
        assert_eq!(route.broker_datas[0].zone_name, None);
        assert!(route.topic_queue_mapping_by_broker.is_some());
    }

    #[test]
    fn route_data_encodes_standard_json_with_filter_server_table() {
        let route: TopicRouteData = decode_json(ROUTE_STANDARD.as_bytes()).unwrap();
        let value = to_value(&route);
        assert_eq!(value["filterServerTable"], json!({}));
        assert_eq!(
            value["brokerDatas"][0]["brokerAddrs"]["1"],
            "10.0.0.2:10911"
        );
        assert!(value.get("topicQueueMappingByBroker").is_none());
    }

    #[test]
    fn broker_address_selection_follows_java() {
        let broker = BrokerData {
            broker_addrs: [(0, "m".to_owned()), (2, "s2".to_owned())]
                .into_iter()
                .collect(),
            ..BrokerData::default()
        };
        assert_eq!(broker.select_addr(0), Some("m"));
        assert_eq!(broker.select_addr(2), Some("s2"));
        assert_eq!(
            broker.select_addr(1),
            Some("s2"),
            "slave 1 missing: try id 2"
        );
        assert_eq!(broker.select_addr(7), Some("m"));
        let slaves_only = BrokerData {
            broker_addrs: [(3, "s3".to_owned())].into_iter().collect(),
            ..BrokerData::default()
        };
        assert_eq!(slaves_only.select_addr(0), Some("s3"));
        assert_eq!(BrokerData::default().select_addr(0), None);
    }

    fn sample_heartbeat() -> HeartbeatData {
        HeartbeatData {
            client_id: "192.168.1.10@12345#928374650".into(),
            producer_data_set: vec![ProducerData {
                group_name: "CLIENT_INNER_PRODUCER".into(),
            }],
            consumer_data_set: vec![ConsumerData {
                group_name: "my_group".into(),
                consume_type: ConsumeType::ConsumePassively,
                message_model: MessageModel::Clustering,
                consume_from_where: ConsumeFromWhere::ConsumeFromLastOffset,
                subscription_data_set: vec![SubscriptionData {
                    topic: "TopicTest".into(),
                    sub_string: "TagA || TagB".into(),
                    tags_set: vec!["TagA".into(), "TagB".into()],
                    code_set: vec![2598919, 2598920],
                    sub_version: 1_718_000_000_000,
                    ..SubscriptionData::default()
                }],
                unit_mode: false,
            }],
            heartbeat_fingerprint: 0,
            without_sub: false,
        }
    }

    #[test]
    fn heartbeat_emits_every_field_with_java_names() {
        let value = to_value(&sample_heartbeat());
        let expected = json!({
            "clientID": "192.168.1.10@12345#928374650",
            "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
            "consumerDataSet": [{
                "groupName": "my_group",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [{
                    "classFilterMode": false, "topic": "TopicTest", "subString": "TagA || TagB",
                    "tagsSet": ["TagA", "TagB"], "codeSet": [2598919, 2598920],
                    "subVersion": 1718000000000i64, "expressionType": "TAG"
                }],
                "unitMode": false
            }],
            "heartbeatFingerprint": 0,
            "withoutSub": false
        });
        assert_eq!(value, expected);
        let back: HeartbeatData = decode_json(&encode_json(&sample_heartbeat())).unwrap();
        assert_eq!(back, sample_heartbeat());
    }

    #[test]
    fn sparse_heartbeat_from_a_java_client_parses_with_defaults() {
        let sparse = br#"{"clientID":"c","consumerDataSet":[{"groupName":"g",
            "consumeType":"CONSUME_ACTIVELY","messageModel":"BROADCASTING",
            "consumeFromWhere":"CONSUME_FROM_TIMESTAMP",
            "subscriptionDataSet":[{"topic":"T","subVersion":"17"}]}]}"#;
        let heartbeat: HeartbeatData = decode_json(sparse).unwrap();
        let consumer = &heartbeat.consumer_data_set[0];
        assert_eq!(consumer.consume_type, ConsumeType::ConsumeActively);
        assert_eq!(consumer.message_model, MessageModel::Broadcasting);
        assert_eq!(
            consumer.consume_from_where,
            ConsumeFromWhere::ConsumeFromTimestamp
        );
        let sub = &consumer.subscription_data_set[0];
        assert_eq!(
            (sub.sub_string.as_str(), sub.expression_type.as_str()),
            ("*", "TAG")
        );
        assert_eq!(sub.sub_version, 17);
        assert!(heartbeat.producer_data_set.is_empty());
    }

    #[test]
    fn lock_bodies_use_java_names() {
        let mq = MessageQueue::new("TopicTest", "broker-a", 0);
        let request = LockBatchRequestBody {
            consumer_group: "g".into(),
            client_id: "cid".into(),
            only_this_broker: false,
            mq_set: vec![mq.clone()],
        };
        assert_eq!(
            to_value(&request),
            json!({"consumerGroup":"g","clientId":"cid","onlyThisBroker":false,
                   "mqSet":[{"topic":"TopicTest","brokerName":"broker-a","queueId":0}]})
        );
        let response: LockBatchResponseBody = decode_json(
            br#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":"0","topic":"TopicTest"}]}"#,
        )
        .unwrap();
        assert_eq!(response.lock_ok_mq_set, vec![mq]);
        assert!(to_value(&response).get("lockOKMQSet").is_some());
        let list: ConsumerListBody = decode_json(br#"{"consumerIdList":["a","b"]}"#).unwrap();
        assert_eq!(list.consumer_id_list, ["a", "b"]);
    }

    #[test]
    fn reset_offset_body_reads_every_key_form() {
        let expected = vec![
            (MessageQueue::new("T", "b", 0), 100),
            (MessageQueue::new("T", "b", 1), 200),
        ];
        let java = br#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:100,{"brokerName":"b","queueId":1,"topic":"T"}:200}}"#;
        assert_eq!(
            ResetOffsetBody::decode(java).unwrap().offset_table,
            expected
        );
        let rust_broker = br#"{"offsetTable":{{"topic":"T","brokerName":"b","queueId":0}:100, {"topic":"T","brokerName":"b","queueId":1}:"200"}}"#;
        assert_eq!(
            ResetOffsetBody::decode(rust_broker).unwrap().offset_table,
            expected
        );
        let stringified = br#"{"offsetTable":{"{\"topic\":\"T\",\"brokerName\":\"b\",\"queueId\":0}":100,"MessageQueue [topic=T, brokerName=b, queueId=1]":200}}"#;
        assert_eq!(
            ResetOffsetBody::decode(stringified).unwrap().offset_table,
            expected
        );
        assert!(ResetOffsetBody::decode(br#"{"offsetTable":{"nonsense":1}}"#).is_err());
        assert!(ResetOffsetBody::decode(br#"{"offsetTable":null}"#)
            .unwrap()
            .offset_table
            .is_empty());
    }

    #[test]
    fn reset_offset_body_encodes_object_keys_like_the_java_broker() {
        let body = ResetOffsetBody {
            offset_table: vec![(MessageQueue::new("T\"x", "b", 3), -1)],
        };
        assert_eq!(
            &body.encode()[..],
            br#"{"offsetTable":{{"brokerName":"b","queueId":3,"topic":"T\"x"}:-1}}"#
        );
        assert_eq!(ResetOffsetBody::decode(&body.encode()).unwrap(), body);
    }

    #[test]
    fn consumer_connection_round_trips_with_java_names() {
        let body = ConsumerConnection {
            connection_set: vec![ClientConnection {
                client_id: "10.0.0.9@42".into(),
                client_addr: "10.0.0.9:51234".into(),
                language: "RUST".into(),
                version: 479,
            }],
            subscription_table: [(
                "Orders".to_owned(),
                SubscriptionData {
                    topic: "Orders".into(),
                    sub_string: "TagA || TagB".into(),
                    tags_set: vec!["TagA".into(), "TagB".into()],
                    code_set: vec![2_598_919, 2_598_920],
                    sub_version: 7,
                    ..SubscriptionData::default()
                },
            )]
            .into_iter()
            .collect(),
            consume_type: ConsumeType::ConsumeActively,
            message_model: MessageModel::Broadcasting,
            consume_from_where: ConsumeFromWhere::ConsumeFromFirstOffset,
        };
        let value = to_value(&body);
        assert_eq!(value["connectionSet"][0]["clientAddr"], "10.0.0.9:51234");
        assert_eq!(value["connectionSet"][0]["version"], 479);
        assert_eq!(
            value["subscriptionTable"]["Orders"]["subString"],
            "TagA || TagB"
        );
        assert_eq!(value["consumeType"], "CONSUME_ACTIVELY");
        assert_eq!(value["messageModel"], "BROADCASTING");
        assert_eq!(value["consumeFromWhere"], "CONSUME_FROM_FIRST_OFFSET");
        let back: ConsumerConnection = decode_json(&encode_json(&body)).unwrap();
        assert_eq!(back, body);
        // What a broker of a group without members would never send, read leniently.
        let sparse: ConsumerConnection =
            decode_json(br#"{"connectionSet":null,"version":"1"}"#).unwrap();
        assert_eq!(sparse, ConsumerConnection::default());
    }

    #[test]
    fn consumer_status_body_round_trips_in_object_key_form() {
        let table = vec![(MessageQueue::new("T", "b", 0), 5)];
        let body = GetConsumerStatusBody {
            message_queue_table: table.clone(),
            consumer_table: [("cid".to_owned(), table)].into_iter().collect(),
        };
        let wire = body.encode();
        assert!(wire.starts_with(br#"{"consumerTable":{"cid":{{"brokerName""#));
        assert_eq!(GetConsumerStatusBody::decode(&wire).unwrap(), body);
    }

    fn sample_running_info() -> ConsumerRunningInfo {
        let mq = MessageQueue::new("T", "b", 2);
        ConsumerRunningInfo {
            properties: [(
                "PROP_CONSUME_TYPE".to_owned(),
                "CONSUME_PASSIVELY".to_owned(),
            )]
            .into_iter()
            .collect(),
            subscription_set: vec![SubscriptionData::default()],
            mq_table: [(
                mq.clone(),
                ProcessQueueInfo {
                    commit_offset: 10,
                    cached_msg_count: 3,
                    droped: true,
                    ..ProcessQueueInfo::default()
                },
            )]
            .into_iter()
            .collect(),
            mq_pop_table: BTreeMap::new(),
            status_table: [(
                "T".to_owned(),
                ConsumeStatus {
                    pull_rt: 1.5,
                    consume_ok_tps: 20.25,
                    consume_failed_msgs: 2,
                    ..ConsumeStatus::default()
                },
            )]
            .into_iter()
            .collect(),
            user_consumer_info: BTreeMap::new(),
            jstack: None,
        }
    }

    #[test]
    fn running_info_uses_stringified_queue_keys_and_java_names() {
        let value = to_value(&sample_running_info());
        let mq_table = value["mqTable"].as_object().unwrap();
        let (key, info) = mq_table.iter().next().unwrap();
        assert_eq!(key, r#"{"brokerName":"b","queueId":2,"topic":"T"}"#);
        assert_eq!(info["droped"], true);
        assert_eq!(info["cachedMsgSizeInMiB"], 0);
        assert_eq!(value["statusTable"]["T"]["pullRT"], 1.5);
        assert_eq!(value["statusTable"]["T"]["consumeOKTPS"], 20.25);
        assert!(value.get("jstack").is_none());
        let back: ConsumerRunningInfo = decode_json(&encode_json(&sample_running_info())).unwrap();
        assert_eq!(back, sample_running_info());
        // The fastjson object-key form parses to the same thing.
        let object_keys = br#"{"mqTable":{{"brokerName":"b","queueId":2,"topic":"T"}:{"commitOffset":10,"cachedMsgCount":3,"droped":true}},
            "properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"},"subscriptionSet":[{}],
            "statusTable":{"T":{"pullRT":1.5,"consumeOKTPS":"20.25","consumeFailedMsgs":2}}}"#;
        assert_eq!(
            decode_json::<ConsumerRunningInfo>(object_keys).unwrap(),
            sample_running_info()
        );
    }

    #[test]
    fn consume_directly_result_uses_cr_names() {
        let result = ConsumeMessageDirectlyResult {
            order: false,
            auto_commit: true,
            consume_result: Some(CMResult::CrThrowException),
            remark: Some("boom".into()),
            spent_time_mills: 12,
        };
        assert_eq!(
            to_value(&result),
            json!({"order":false,"autoCommit":true,"consumeResult":"CR_THROW_EXCEPTION",
                   "remark":"boom","spentTimeMills":12})
        );
        for (name, variant) in [
            ("CR_SUCCESS", CMResult::CrSuccess),
            ("CR_LATER", CMResult::CrLater),
            ("CR_ROLLBACK", CMResult::CrRollback),
            ("CR_COMMIT", CMResult::CrCommit),
            ("CR_RETURN_NULL", CMResult::CrReturnNull),
        ] {
            let text = format!(r#"{{"consumeResult":"{name}"}}"#);
            let parsed: ConsumeMessageDirectlyResult = decode_json(text.as_bytes()).unwrap();
            assert_eq!(parsed.consume_result, Some(variant));
        }
    }

    #[test]
    fn lenient_numbers_and_nulls() {
        let queue: QueueData = decode_json(
            br#"{"brokerName":null,"readQueueNums":"4","writeQueueNums":4.0,"perm":null,"topicSysFlag":"  "}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(queue.read_queue_nums, 4);
        assert_eq!(queue.write_queue_nums, 4);
        assert_eq!(queue.perm, 0);
        assert!(decode_json::<QueueData>(br#"{"readQueueNums":"four"}"#).is_err());
        assert!(decode_json::<QueueData>(br#"{"readQueueNums":4294967296}"#).is_err());
        let info: ProcessQueueInfo =
            decode_json(br#"{"locked":"true","droped":1,"tryUnlockTimes":"9007199254740993"}"#)
                .unwrap();
        assert!(info.locked && info.droped);
        assert_eq!(info.try_unlock_times, 9_007_199_254_740_993);
    }

    #[test]
    fn garbage_is_a_json_error() {
        assert!(matches!(
            decode_json::<TopicRouteData>(b"not json"),
            Err(ProtocolError::Json(_))
        ));
        assert!(matches!(
            decode_json::<TopicRouteData>(b"\xff\xfe"),
            Err(ProtocolError::Json(_))
        ));
        assert!(matches!(
            decode_json::<HeartbeatData>(b"[1,2"),
            Err(ProtocolError::Json(_))
        ));
    }

    fn short_text() -> impl Strategy<Value = String> {
        "\\PC{0,8}"
    }

    fn arb_mq() -> impl Strategy<Value = MessageQueue> {
        (short_text(), short_text(), any::<i32>()).prop_map(|(t, b, q)| MessageQueue::new(t, b, q))
    }

    fn arb_f64() -> impl Strategy<Value = f64> {
        // Quarter steps are exact in decimal and binary: the round trip is then exact too.
        any::<i32>().prop_map(|v| f64::from(v) / 4.0)
    }

    prop_compose! {
        fn arb_queue_data()(broker_name in short_text(), read in any::<i32>(), write in any::<i32>(),
                            perm in any::<i32>(), flag in any::<i32>()) -> QueueData {
            QueueData { broker_name, read_queue_nums: read, write_queue_nums: write, perm, topic_sys_flag: flag }
        }
    }

    prop_compose! {
        fn arb_broker_data()(cluster in short_text(), broker_name in short_text(),
                             addrs in proptest::collection::btree_map(any::<i64>(), short_text(), 0..4),
                             zone in proptest::option::of(short_text()), acting in any::<bool>()) -> BrokerData {
            BrokerData { cluster, broker_name, broker_addrs: addrs, zone_name: zone, enable_acting_master: acting }
        }
    }

    prop_compose! {
        fn arb_route()(conf in proptest::option::of(short_text()),
                       queues in proptest::collection::vec(arb_queue_data(), 0..3),
                       brokers in proptest::collection::vec(arb_broker_data(), 0..3),
                       filters in proptest::collection::btree_map(short_text(), proptest::collection::vec(short_text(), 0..2), 0..2))
                       -> TopicRouteData {
            TopicRouteData { order_topic_conf: conf, queue_datas: queues, broker_datas: brokers,
                             filter_server_table: filters, topic_queue_mapping_by_broker: None }
        }
    }

    prop_compose! {
        fn arb_subscription()(class_filter_mode in any::<bool>(), topic in short_text(), sub_string in short_text(),
                              tags in proptest::collection::vec(short_text(), 0..3),
                              codes in proptest::collection::vec(any::<i32>(), 0..3),
                              sub_version in any::<i64>(), expression_type in short_text()) -> SubscriptionData {
            SubscriptionData { class_filter_mode, topic, sub_string, tags_set: tags, code_set: codes, sub_version, expression_type }
        }
    }

    fn arb_consume_type() -> impl Strategy<Value = ConsumeType> {
        prop_oneof![
            Just(ConsumeType::ConsumeActively),
            Just(ConsumeType::ConsumePassively),
            Just(ConsumeType::ConsumePop)
        ]
    }

    fn arb_from_where() -> impl Strategy<Value = ConsumeFromWhere> {
        prop_oneof![
            Just(ConsumeFromWhere::ConsumeFromLastOffset),
            Just(ConsumeFromWhere::ConsumeFromLastOffsetAndFromMinWhenBootFirst),
            Just(ConsumeFromWhere::ConsumeFromMinOffset),
            Just(ConsumeFromWhere::ConsumeFromMaxOffset),
            Just(ConsumeFromWhere::ConsumeFromFirstOffset),
            Just(ConsumeFromWhere::ConsumeFromTimestamp),
        ]
    }

    prop_compose! {
        fn arb_heartbeat()(client_id in short_text(),
                           producers in proptest::collection::vec(short_text(), 0..2),
                           consumers in proptest::collection::vec(
                               (short_text(), arb_consume_type(), any::<bool>(), arb_from_where(),
                                proptest::collection::vec(arb_subscription(), 0..3), any::<bool>()), 0..3),
                           fingerprint in any::<i32>(), without_sub in any::<bool>()) -> HeartbeatData {
            HeartbeatData {
                client_id,
                producer_data_set: producers.into_iter().map(|group_name| ProducerData { group_name }).collect(),
                consumer_data_set: consumers.into_iter().map(|(group_name, consume_type, broadcasting, consume_from_where, subs, unit_mode)| ConsumerData {
                    group_name, consume_type,
                    message_model: if broadcasting { MessageModel::Broadcasting } else { MessageModel::Clustering },
                    consume_from_where, subscription_data_set: subs, unit_mode,
                }).collect(),
                heartbeat_fingerprint: fingerprint,
                without_sub,
            }
        }
    }

    prop_compose! {
        fn arb_process_queue_info()(a in any::<[i64; 8]>(), b in any::<[i32; 3]>(), locked in any::<bool>(), droped in any::<bool>())
                                   -> ProcessQueueInfo {
            ProcessQueueInfo {
                commit_offset: a[0], cached_msg_min_offset: a[1], cached_msg_max_offset: a[2],
                cached_msg_count: b[0], cached_msg_size_in_mib: b[1], transaction_msg_min_offset: a[3],
                transaction_msg_max_offset: a[4], transaction_msg_count: b[2], locked,
                try_unlock_times: a[5], last_lock_timestamp: a[6], droped,
                last_pull_timestamp: a[7], last_consume_timestamp: a[0].wrapping_add(1),
            }
        }
    }

    prop_compose! {
        fn arb_consume_status()(f in proptest::array::uniform5(arb_f64()), failed in any::<i64>()) -> ConsumeStatus {
            ConsumeStatus { pull_rt: f[0], pull_tps: f[1], consume_rt: f[2], consume_ok_tps: f[3], consume_failed_tps: f[4], consume_failed_msgs: failed }
        }
    }

    prop_compose! {
        fn arb_running_info()(properties in proptest::collection::btree_map(short_text(), short_text(), 0..3),
                              subs in proptest::collection::vec(arb_subscription(), 0..2),
                              mq_table in proptest::collection::btree_map(arb_mq(), arb_process_queue_info(), 0..3),
                              pop in proptest::collection::btree_map(arb_mq(), (any::<i32>(), any::<bool>(), any::<i64>()), 0..2),
                              status in proptest::collection::btree_map(short_text(), arb_consume_status(), 0..2),
                              user in proptest::collection::btree_map(short_text(), short_text(), 0..2),
                              jstack in proptest::option::of(short_text())) -> ConsumerRunningInfo {
            ConsumerRunningInfo {
                properties, subscription_set: subs, mq_table,
                mq_pop_table: pop.into_iter().map(|(mq, (wait_ack_count, droped, last_pop_timestamp))|
                    (mq, PopProcessQueueInfo { wait_ack_count, droped, last_pop_timestamp })).collect(),
                status_table: status, user_consumer_info: user, jstack,
            }
        }
    }

    fn arb_cm_result() -> impl Strategy<Value = Option<CMResult>> {
        proptest::option::of(prop_oneof![
            Just(CMResult::CrSuccess),
            Just(CMResult::CrLater),
            Just(CMResult::CrRollback),
            Just(CMResult::CrCommit),
            Just(CMResult::CrThrowException),
            Just(CMResult::CrReturnNull),
        ])
    }

    fn round_trip<T: Serialize + DeserializeOwned + PartialEq + fmt::Debug>(
        value: &T,
    ) -> Result<(), TestCaseError> {
        let back: T =
            decode_json(&encode_json(value)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, value);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn route_and_cluster_round_trip(route in arb_route(), brokers in proptest::collection::btree_map(short_text(), arb_broker_data(), 0..3)) {
            round_trip(&route)?;
            for broker in &route.broker_datas {
                round_trip(broker)?;
            }
            for queue in &route.queue_datas {
                round_trip(queue)?;
            }
            let cluster = ClusterInfo {
                cluster_addr_table: [("c".to_owned(), brokers.keys().cloned().collect())].into_iter().collect(),
                broker_addr_table: brokers,
            };
            round_trip(&cluster)?;
        }

        #[test]
        fn heartbeat_round_trips(heartbeat in arb_heartbeat()) {
            round_trip(&heartbeat)?;
        }

        #[test]
        fn membership_and_lock_bodies_round_trip(ids in proptest::collection::vec(short_text(), 0..4),
                                                 group in short_text(), client in short_text(), only in any::<bool>(),
                                                 mqs in proptest::collection::vec(arb_mq(), 0..4)) {
            round_trip(&ConsumerListBody { consumer_id_list: ids })?;
            round_trip(&LockBatchRequestBody { consumer_group: group.clone(), client_id: client.clone(), only_this_broker: only, mq_set: mqs.clone() })?;
            round_trip(&UnlockBatchRequestBody { consumer_group: group, client_id: client, only_this_broker: only, mq_set: mqs.clone() })?;
            round_trip(&LockBatchResponseBody { lock_ok_mq_set: mqs })?;
        }

        #[test]
        fn offset_table_bodies_round_trip(table in proptest::collection::vec((arb_mq(), any::<i64>()), 0..4),
                                          clients in proptest::collection::btree_map(short_text(), proptest::collection::vec((arb_mq(), any::<i64>()), 0..3), 0..3)) {
            let reset = ResetOffsetBody { offset_table: table.clone() };
            prop_assert_eq!(ResetOffsetBody::decode(&reset.encode()).unwrap(), reset);
            let status = GetConsumerStatusBody { message_queue_table: table, consumer_table: clients };
            prop_assert_eq!(GetConsumerStatusBody::decode(&status.encode()).unwrap(), status);
        }

        #[test]
        fn running_info_and_direct_result_round_trip(info in arb_running_info(), result in arb_cm_result(),
                                                     order in any::<bool>(), remark in proptest::option::of(short_text()),
                                                     spent in any::<i64>()) {
            round_trip(&info)?;
            round_trip(&ConsumeMessageDirectlyResult { order, auto_commit: !order, consume_result: result, remark, spent_time_mills: spent })?;
        }

        #[test]
        fn arbitrary_input_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64),
                                        text in "[{}\\[\\]:,\"0-9a-zA-Z \\\\]{0,48}") {
            for input in [&bytes[..], text.as_bytes()] {
                let _ = decode_json::<TopicRouteData>(input);
                let _ = decode_json::<ClusterInfo>(input);
                let _ = decode_json::<HeartbeatData>(input);
                let _ = decode_json::<ConsumerListBody>(input);
                let _ = decode_json::<ConsumerConnection>(input);
                let _ = decode_json::<LockBatchRequestBody>(input);
                let _ = decode_json::<LockBatchResponseBody>(input);
                let _ = decode_json::<UnlockBatchRequestBody>(input);
                let _ = ResetOffsetBody::decode(input);
                let _ = GetConsumerStatusBody::decode(input);
                let _ = decode_json::<ConsumerRunningInfo>(input);
                let _ = decode_json::<ConsumeMessageDirectlyResult>(input);
            }
        }
    }
}
