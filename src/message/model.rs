//! Messages to send ([`Message`]) and messages as stored by a broker ([`MessageExt`]).

use bytes::Bytes;
use std::borrow::Cow;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use super::id::offset_msg_id;
use super::properties::{property, Properties};
use super::topic::Topic;

/// A message as a producer builds it: topic, user flag, properties and body.
///
/// ```
/// use rocketmq_actor::Message;
/// let msg = Message::new("TopicTest", "hello")
///     .with_tags("TagA")
///     .with_keys(["order-1", "user-7"])
///     .with_property("color", "red");
/// assert_eq!(msg.tags(), Some("TagA"));
/// assert_eq!(msg.keys(), vec!["order-1", "user-7"]);
/// assert_eq!(msg.property("KEYS"), Some("order-1 user-7"));
/// assert_eq!(msg.property("color"), Some("red"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// Topic the message is sent to.
    pub topic: Topic,
    /// Opaque user flag, stored and returned as is.
    pub flag: i32,
    /// Properties (tags, keys, ids and user properties).
    pub properties: Properties,
    /// Payload.
    pub body: Bytes,
}

/// Business keys given to [`Message::with_keys`]: one string (used as is, so it may already
/// hold several space-separated keys) or a list of keys (joined with spaces).
pub trait IntoKeys {
    /// The `KEYS` property value.
    fn into_keys(self) -> String;
}

impl IntoKeys for &str {
    fn into_keys(self) -> String {
        self.to_owned()
    }
}

impl IntoKeys for String {
    fn into_keys(self) -> String {
        self
    }
}

impl IntoKeys for &String {
    fn into_keys(self) -> String {
        self.clone()
    }
}

fn join_keys<S: AsRef<str>>(keys: impl IntoIterator<Item = S>) -> String {
    let mut joined = String::new();
    for key in keys {
        let key = key.as_ref();
        if key.is_empty() {
            continue;
        }
        if !joined.is_empty() {
            joined.push_str(property::KEY_SEPARATOR);
        }
        joined.push_str(key);
    }
    joined
}

impl<S: AsRef<str>, const N: usize> IntoKeys for [S; N] {
    fn into_keys(self) -> String {
        join_keys(self)
    }
}

impl<S: AsRef<str>> IntoKeys for Vec<S> {
    fn into_keys(self) -> String {
        join_keys(self)
    }
}

impl<S: AsRef<str>> IntoKeys for &[S] {
    fn into_keys(self) -> String {
        join_keys(self)
    }
}

impl Message {
    /// A message with no properties and flag 0.
    pub fn new(topic: impl Into<Topic>, body: impl Into<Bytes>) -> Self {
        Message {
            topic: topic.into(),
            flag: 0,
            properties: Properties::new(),
            body: body.into(),
        }
    }

    /// Sets the tag (`TAGS`), used for broker-side filtering.
    pub fn with_tags(mut self, tags: impl AsRef<str>) -> Self {
        self.properties.insert(property::TAGS, tags);
        self
    }

    /// Sets the business keys (`KEYS`, space-separated); see [`IntoKeys`].
    pub fn with_keys(mut self, keys: impl IntoKeys) -> Self {
        self.properties.insert(property::KEYS, keys.into_keys());
        self
    }

    /// Sets any property (ignored when the name or value is empty or holds `\x01`/`\x02`).
    pub fn with_property(mut self, name: impl AsRef<str>, value: impl AsRef<str>) -> Self {
        self.properties.insert(name, value);
        self
    }

    /// Sets the user flag.
    pub fn with_flag(mut self, flag: i32) -> Self {
        self.flag = flag;
        self
    }

    /// Sets the sharding key of an ordered message (`__SHARDINGKEY`).
    pub fn with_sharding_key(mut self, key: impl AsRef<str>) -> Self {
        self.properties.insert(property::SHARDING_KEY, key);
        self
    }

    /// Sets the delay level of a scheduled message (`DELAY`); levels ≤ 0 clear it.
    pub fn with_delay_level(mut self, level: i32) -> Self {
        if level > 0 {
            self.properties.insert(property::DELAY, level.to_string());
        } else {
            self.properties.remove(property::DELAY);
        }
        self
    }

    /// The tag, if any.
    pub fn tags(&self) -> Option<&str> {
        self.properties.get(property::TAGS)
    }

    /// The business keys (the `KEYS` property split on spaces; empty pieces skipped).
    pub fn keys(&self) -> Vec<&str> {
        self.properties
            .get(property::KEYS)
            .map(|keys| {
                keys.split(property::KEY_SEPARATOR)
                    .filter(|k| !k.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The sharding key (`__SHARDINGKEY`), if any.
    pub fn sharding_key(&self) -> Option<&str> {
        self.properties.get(property::SHARDING_KEY)
    }

    /// The delay level (`DELAY`), 0 when absent or not a number.
    pub fn delay_level(&self) -> i32 {
        self.properties
            .get(property::DELAY)
            .and_then(|level| level.parse().ok())
            .unwrap_or(0)
    }

    /// The client-generated unique id (`UNIQ_KEY`), if any.
    pub fn unique_key(&self) -> Option<&str> {
        self.properties.get(property::UNIQ_KEY)
    }

    /// Whether the producer asked to wait for the store (`WAIT`; absent means `true`).
    pub fn wait_store_msg_ok(&self) -> bool {
        self.properties.get(property::WAIT) != Some("false")
    }

    /// Any property.
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties.get(name)
    }
}

/// A message as stored by a broker and delivered to consumers.
///
/// ```
/// use rocketmq_actor::{Message, MessageExt};
/// let mut ext = MessageExt::from(Message::new("TopicTest", "hi").with_tags("TagA"));
/// ext.store_host = "127.0.0.1:10911".parse().unwrap();
/// ext.commit_log_offset = 0;
/// assert_eq!(ext.offset_msg_id(), "7F00000100002A9F0000000000000000");
/// // No UNIQ_KEY: the msgId falls back to the offset id, as in Java.
/// assert_eq!(ext.msg_id(), "7F00000100002A9F0000000000000000");
/// assert_eq!(ext.tags(), Some("TagA"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageExt {
    /// Topic, flag, properties and body.
    pub message: Message,
    /// Broker the message was pulled from (set by the consumer, not on the wire; empty
    /// otherwise). Shared by every message of a pull, so setting it copies no string.
    pub broker_name: Arc<str>,
    /// Queue id within the topic.
    pub queue_id: i32,
    /// Size of the stored record in bytes.
    pub store_size: i32,
    /// Logical offset in the consume queue.
    pub queue_offset: i64,
    /// `SYSFLAG` bits (see [`sys_flag`](super::sys_flag)); the compressed bit is cleared once
    /// the body has been decompressed.
    pub sys_flag: i32,
    /// When the producer created the message (ms since the epoch).
    pub born_timestamp: i64,
    /// Producer address.
    pub born_host: SocketAddr,
    /// When the broker stored the message (ms since the epoch).
    pub store_timestamp: i64,
    /// Broker address.
    pub store_host: SocketAddr,
    /// Physical offset in the broker's commit log.
    pub commit_log_offset: i64,
    /// CRC32 of the stored body, `& 0x7FFFFFFF`.
    pub body_crc: i32,
    /// How many times the message has been redelivered.
    pub reconsume_times: i32,
    /// Commit-log offset of the prepared half of a transactional message.
    pub prepared_transaction_offset: i64,
}

impl Default for MessageExt {
    fn default() -> Self {
        let unspecified = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
        MessageExt {
            message: Message::default(),
            broker_name: no_broker(),
            queue_id: 0,
            store_size: 0,
            queue_offset: 0,
            sys_flag: 0,
            born_timestamp: 0,
            born_host: unspecified,
            store_timestamp: 0,
            store_host: unspecified,
            commit_log_offset: 0,
            body_crc: 0,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        }
    }
}

impl From<Message> for MessageExt {
    fn from(message: Message) -> Self {
        MessageExt {
            message,
            ..MessageExt::default()
        }
    }
}

impl MessageExt {
    /// The id Java consumers show: `UNIQ_KEY` when present, otherwise the offset id.
    pub fn msg_id(&self) -> Cow<'_, str> {
        match self.message.unique_key() {
            Some(id) => Cow::Borrowed(id),
            None => Cow::Owned(self.offset_msg_id()),
        }
    }

    /// The broker's id of the message: store host and commit-log offset in hex (§3.8).
    pub fn offset_msg_id(&self) -> String {
        offset_msg_id(self.store_host, self.commit_log_offset)
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.message.topic
    }

    /// The tag, if any.
    pub fn tags(&self) -> Option<&str> {
        self.message.tags()
    }

    /// The business keys.
    pub fn keys(&self) -> Vec<&str> {
        self.message.keys()
    }

    /// The (decompressed) body.
    pub fn body(&self) -> &Bytes {
        &self.message.body
    }

    /// The user flag.
    pub fn flag(&self) -> i32 {
        self.message.flag
    }

    /// Any property.
    pub fn property(&self, name: &str) -> Option<&str> {
        self.message.properties.get(name)
    }

    /// All properties.
    pub fn properties(&self) -> &Properties {
        &self.message.properties
    }

    /// Mutable access to the properties (e.g. to add `MIN_OFFSET`/`MAX_OFFSET` after a pull).
    pub fn properties_mut(&mut self) -> &mut Properties {
        &mut self.message.properties
    }

    /// Transaction id of a transactional message: its `UNIQ_KEY` when `TRAN_MSG` is `true`.
    pub fn transaction_id(&self) -> Option<&str> {
        let transactional = self
            .property(property::TRAN_MSG)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if transactional {
            self.message.unique_key()
        } else {
            None
        }
    }
}

/// The empty broker name of a message no consumer has pulled: one shared allocation per
/// thread, so decoding a record allocates nothing for it.
pub(crate) fn no_broker() -> Arc<str> {
    thread_local! {
        static EMPTY: Arc<str> = Arc::from("");
    }
    EMPTY.with(Arc::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_accept_a_string_or_a_list() {
        let one = Message::new("T", "").with_keys("a b  c");
        assert_eq!(one.keys(), vec!["a", "b", "c"]);
        let list =
            Message::new("T", "").with_keys(vec!["x".to_string(), String::new(), "y".into()]);
        assert_eq!(list.property(property::KEYS), Some("x y"));
        assert!(Message::new("T", "").keys().is_empty());
    }

    #[test]
    fn sharding_key_delay_and_wait() {
        let msg = Message::new("T", "b")
            .with_sharding_key("user-1")
            .with_delay_level(3);
        assert_eq!(msg.sharding_key(), Some("user-1"));
        assert_eq!(msg.delay_level(), 3);
        assert!(msg.wait_store_msg_ok());
        let msg = msg
            .with_delay_level(0)
            .with_property(property::WAIT, "false");
        assert_eq!(msg.delay_level(), 0);
        assert!(!msg.wait_store_msg_ok());
    }

    #[test]
    fn msg_id_prefers_uniq_key() {
        let mut ext =
            MessageExt::from(Message::new("T", "b").with_property(property::UNIQ_KEY, "ABC"));
        ext.store_host = "127.0.0.1:10911".parse().unwrap();
        assert_eq!(ext.msg_id(), "ABC");
        assert_eq!(ext.offset_msg_id(), "7F00000100002A9F0000000000000000");
    }

    #[test]
    fn transaction_id_only_for_transactional_messages() {
        let msg = Message::new("T", "").with_property(property::UNIQ_KEY, "U1");
        assert_eq!(MessageExt::from(msg.clone()).transaction_id(), None);
        let tx = MessageExt::from(msg.with_property(property::TRAN_MSG, "true"));
        assert_eq!(tx.transaction_id(), Some("U1"));
    }
}
