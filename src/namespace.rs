//! Namespaces (Java 5's `ClientConfig.namespace`): one cluster shared by several tenants or
//! environments, each client prefixing its topics and groups with its namespace on the wire and
//! stripping it again from what it hands the application.
//!
//! The rules are Java's `NamespaceUtil`, with `%` as the separator:
//!
//! | name the application uses | on the wire (namespace `ns1`) |
//! |---|---|
//! | topic `T`, group `G` | `ns1%T`, `ns1%G` |
//! | retry topic `%RETRY%G`, dead-letter topic `%DLQ%G` | `%RETRY%ns1%G`, `%DLQ%ns1%G` |
//! | `ns1%T` (already wrapped) | `ns1%T` (left alone) |
//! | system topics and groups (`TBW102`, `SCHEDULE_TOPIC_XXXX`, `rmq_sys_…`, `CID_RMQ_SYS_…`) | unchanged |
//!
//! Unwrapping strips the namespace only when the name (after a `%RETRY%` or `%DLQ%` prefix)
//! starts with `ns1%`; a name of another namespace is left as it is.
//!
//! ```
//! use rocketmq_actor::namespace::{unwrap, wrap, Namespace};
//! assert_eq!(wrap("ns1", "Orders"), "ns1%Orders");
//! assert_eq!(wrap("ns1", "%RETRY%billing"), "%RETRY%ns1%billing");
//! assert_eq!(wrap("ns1", "TBW102"), "TBW102");
//! assert_eq!(unwrap("ns1", "%DLQ%ns1%billing"), "%DLQ%billing");
//! assert_eq!(unwrap("ns1", "ns2%Orders"), "ns2%Orders");
//!
//! let ns = Namespace::new("ns1").unwrap();
//! assert_eq!(ns.wrap("Orders"), "ns1%Orders");
//! assert_eq!(Namespace::none().wrap("Orders"), "Orders");
//! ```
//!
//! Everything here is pure; the producer and consumer handles apply it at their public
//! boundary (names in: wrapped; names out: unwrapped), so the actors below them only ever see
//! wire names.
//!
//! Java 5's `namespaceV2` (no renaming; the ext fields `ns` and `nsd` on every request, read
//! by a proxy only) is not supported.

use std::borrow::Cow;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::message::{MessageExt, MessageQueue};

/// Separates the namespace from the name (Java `NamespaceUtil.NAMESPACE_SEPARATOR`).
pub const SEPARATOR: char = '%';
/// Prefix of a group's retry topic.
const RETRY_PREFIX: &str = "%RETRY%";
/// Prefix of a group's dead-letter topic.
const DLQ_PREFIX: &str = "%DLQ%";

/// The system topics (Java `TopicValidator.SYSTEM_TOPIC_SET`): never wrapped.
pub const SYSTEM_TOPICS: [&str; 10] = [
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "BenchmarkTest",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
];
/// Prefix of system topics (Java `TopicValidator.SYSTEM_TOPIC_PREFIX`).
pub const SYSTEM_TOPIC_PREFIX: &str = "rmq_sys_";
/// Prefix of system consumer groups (Java `MixAll.CID_RMQ_SYS_PREFIX`).
pub const SYSTEM_GROUP_PREFIX: &str = "CID_RMQ_SYS_";

/// Whether `name` is a system topic or group, which no namespace applies to (Java
/// `NamespaceUtil.isSystemResource`).
///
/// ```
/// use rocketmq_actor::namespace::is_system_resource;
/// assert!(is_system_resource("TBW102") && is_system_resource("rmq_sys_x"));
/// assert!(is_system_resource("CID_RMQ_SYS_TRANS"));
/// assert!(!is_system_resource("Orders"));
/// ```
pub fn is_system_resource(name: &str) -> bool {
    SYSTEM_TOPICS.contains(&name)
        || name.starts_with(SYSTEM_TOPIC_PREFIX)
        || name.starts_with(SYSTEM_GROUP_PREFIX)
}

/// `name` without its `%RETRY%` or `%DLQ%` prefix, and that prefix (Java
/// `withOutRetryAndDLQ`: one prefix at most).
fn split_prefix(name: &str) -> (&'static str, &str) {
    if let Some(rest) = name.strip_prefix(RETRY_PREFIX) {
        (RETRY_PREFIX, rest)
    } else if let Some(rest) = name.strip_prefix(DLQ_PREFIX) {
        (DLQ_PREFIX, rest)
    } else {
        ("", name)
    }
}

/// Whether `rest` starts with `namespace%`.
fn starts_with_namespace(rest: &str, namespace: &str) -> bool {
    rest.strip_prefix(namespace)
        .is_some_and(|after| after.starts_with(SEPARATOR))
}

/// Whether `name` already carries `namespace` (after a retry or dead-letter prefix); never for
/// a system name or an empty namespace (Java `isAlreadyWithNamespace`).
pub fn is_wrapped(namespace: &str, name: &str) -> bool {
    if namespace.is_empty() || name.is_empty() || is_system_resource(name) {
        return false;
    }
    starts_with_namespace(split_prefix(name).1, namespace)
}

/// `name` as it goes on the wire under `namespace` (Java `NamespaceUtil.wrapNamespace`): a
/// `%RETRY%`/`%DLQ%` prefix is kept in front, then `namespace%`, then the rest. System names,
/// names already carrying the namespace, and anything with an empty namespace are returned
/// as they are.
pub fn wrap<'a>(namespace: &str, name: &'a str) -> Cow<'a, str> {
    if namespace.is_empty()
        || name.is_empty()
        || is_system_resource(name)
        || is_wrapped(namespace, name)
    {
        return Cow::Borrowed(name);
    }
    let (prefix, rest) = split_prefix(name);
    let mut wrapped = String::with_capacity(name.len() + namespace.len() + 1);
    wrapped.push_str(prefix);
    wrapped.push_str(namespace);
    wrapped.push(SEPARATOR);
    wrapped.push_str(rest);
    Cow::Owned(wrapped)
}

/// `name` as the application sees it (Java `NamespaceUtil.withoutNamespace(name, namespace)`):
/// when `name` (after a `%RETRY%`/`%DLQ%` prefix) starts with `namespace%`, everything up to and
/// including the first `%` of that rest is dropped and the prefix kept; any other name — of
/// another namespace, of none, a system name — is returned as it is.
pub fn unwrap<'a>(namespace: &str, name: &'a str) -> Cow<'a, str> {
    if namespace.is_empty() || name.is_empty() || is_system_resource(name) {
        return Cow::Borrowed(name);
    }
    let (prefix, rest) = split_prefix(name);
    if !starts_with_namespace(rest, namespace) {
        return Cow::Borrowed(name);
    }
    match rest.find(SEPARATOR) {
        Some(index) if index > 0 => {
            let after = &rest[index + SEPARATOR.len_utf8()..];
            if prefix.is_empty() {
                Cow::Borrowed(after)
            } else {
                Cow::Owned(format!("{prefix}{after}"))
            }
        }
        _ => Cow::Borrowed(name),
    }
}

/// The namespace Java derives from a name-server address of the form
/// `[scheme://]MQ_INST_<x>_<y>.<host…>` (the instance id before the first `.`), when no
/// namespace is configured (`ClientConfig.getNamespace`).
///
/// ```
/// use rocketmq_actor::namespace::namespace_from_namesrv_addr;
/// assert_eq!(namespace_from_namesrv_addr("MQ_INST_1234_abcd.mq.example.com:80"), Some("MQ_INST_1234_abcd"));
/// assert_eq!(namespace_from_namesrv_addr("http://MQ_INST_1_x.host:9876"), Some("MQ_INST_1_x"));
/// assert_eq!(namespace_from_namesrv_addr("127.0.0.1:9876"), None);
/// ```
pub fn namespace_from_namesrv_addr(addr: &str) -> Option<&str> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let rest = match addr.find("://") {
        Some(index) if index > 0 && addr[..index].chars().all(is_word) => &addr[index + 3..],
        _ => addr,
    };
    let (instance, _host) = rest.split_once('.')?;
    let id = instance.strip_prefix("MQ_INST_")?;
    // `\w+_\w+`: word characters with an underscore that is neither first nor last.
    let inner_underscore = id
        .char_indices()
        .any(|(i, c)| c == '_' && i > 0 && i + 1 < id.len());
    (id.chars().all(is_word) && inner_underscore).then_some(instance)
}

/// Whether `c` may appear in a namespace: the characters Java allows in topic and group names
/// (`^[%|a-zA-Z0-9_-]+$`) except the separator `%`.
fn is_namespace_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '|' | '_' | '-')
}

/// The error of an invalid namespace.
fn invalid(value: &str) -> Error {
    Error::Config {
        option: "namespace",
        value: format!("{value:?}"),
        allowed: "letters, digits, '_', '-' and '|' (Java's topic characters without the \
                  separator '%'), or blank for none"
            .into(),
    }
}

/// Checks a configured namespace: blank (empty or white space) means none; otherwise only
/// `[a-zA-Z0-9_|-]` (the characters of Java's topic and group names, less the separator `%`,
/// which would make wrapped names ambiguous).
///
/// ```
/// use rocketmq_actor::namespace::validate;
/// assert!(validate("tenant-a_1").is_ok() && validate("").is_ok() && validate("  ").is_ok());
/// assert!(validate("a%b").is_err() && validate("a b").is_err() && validate("ns.1").is_err());
/// ```
pub fn validate(namespace: &str) -> Result<()> {
    if namespace.trim().is_empty() || namespace.chars().all(is_namespace_char) {
        Ok(())
    } else {
        Err(invalid(namespace))
    }
}

/// A client's namespace, or none: what its producer or consumer wraps names with.
///
/// `Namespace::none()` (the default) leaves every name as it is, so code that applies it
/// needs no special case.
///
/// ```
/// use rocketmq_actor::namespace::Namespace;
/// use rocketmq_actor::MessageQueue;
/// let ns = Namespace::new("prod").unwrap();
/// let queue = MessageQueue::new("Orders", "broker-a", 0);
/// assert_eq!(ns.wrap_queue(&queue).topic, "prod%Orders");
/// assert_eq!(*ns.unwrap_queue(&ns.wrap_queue(&queue)), queue);
/// assert!(Namespace::new(" ").unwrap().is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Namespace(Option<Arc<str>>);

impl Namespace {
    /// No namespace.
    pub fn none() -> Self {
        Namespace(None)
    }

    /// The namespace `namespace`, checked with [`validate`]; blank gives none.
    pub fn new(namespace: &str) -> Result<Self> {
        validate(namespace)?;
        if namespace.trim().is_empty() {
            Ok(Namespace(None))
        } else {
            Ok(Namespace(Some(namespace.into())))
        }
    }

    /// The namespace of a producer or consumer: the configured one if it is not blank, else the
    /// one Java derives from an `MQ_INST_…` name-server address
    /// ([`namespace_from_namesrv_addr`]), else none.
    pub fn resolve(configured: Option<&str>, namesrv_addr: &str) -> Result<Self> {
        match configured {
            Some(ns) if !ns.trim().is_empty() => Namespace::new(ns),
            _ => match namespace_from_namesrv_addr(namesrv_addr) {
                Some(derived) => Namespace::new(derived),
                None => Ok(Namespace(None)),
            },
        }
    }

    /// The namespace's text, if there is one.
    pub fn as_str(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// Whether this is no namespace.
    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// `name` on the wire ([`wrap`]).
    pub fn wrap<'a>(&self, name: &'a str) -> Cow<'a, str> {
        match &self.0 {
            Some(ns) => wrap(ns, name),
            None => Cow::Borrowed(name),
        }
    }

    /// `name` as the application sees it ([`unwrap`]).
    pub fn unwrap<'a>(&self, name: &'a str) -> Cow<'a, str> {
        match &self.0 {
            Some(ns) => unwrap(ns, name),
            None => Cow::Borrowed(name),
        }
    }

    /// `queue` with its topic on the wire.
    pub fn wrap_queue<'a>(&self, queue: &'a MessageQueue) -> Cow<'a, MessageQueue> {
        match self.wrap(&queue.topic) {
            Cow::Borrowed(_) => Cow::Borrowed(queue),
            Cow::Owned(topic) => Cow::Owned(MessageQueue {
                topic,
                broker_name: queue.broker_name.clone(),
                queue_id: queue.queue_id,
            }),
        }
    }

    /// `queue` with its topic as the application sees it.
    pub fn unwrap_queue<'a>(&self, queue: &'a MessageQueue) -> Cow<'a, MessageQueue> {
        match self.unwrapped(&queue.topic) {
            None => Cow::Borrowed(queue),
            Some(topic) => Cow::Owned(MessageQueue {
                topic,
                broker_name: queue.broker_name.clone(),
                queue_id: queue.queue_id,
            }),
        }
    }

    /// Every queue of `queues` with its topic as the application sees it.
    pub fn unwrap_queues(&self, mut queues: Vec<MessageQueue>) -> Vec<MessageQueue> {
        for queue in &mut queues {
            if let Some(topic) = self.unwrapped(&queue.topic) {
                queue.topic = topic;
            }
        }
        queues
    }

    /// `name` unwrapped, when unwrapping changes it.
    fn unwrapped(&self, name: &str) -> Option<String> {
        let unwrapped = self.unwrap(name);
        // Unwrapping either keeps the name or drops at least `ns%` from it.
        (unwrapped.len() != name.len()).then(|| unwrapped.into_owned())
    }

    /// Every queue of `queues` with its topic on the wire.
    pub fn wrap_queues(&self, queues: &[MessageQueue]) -> Vec<MessageQueue> {
        queues
            .iter()
            .map(|queue| self.wrap_queue(queue).into_owned())
            .collect()
    }

    /// Gives a received message the topic the application knows (Java
    /// `resetRetryAndNamespace`): a message redelivered through the group's retry topic
    /// (`%RETRY%` + `wire_group`, when given) first gets back its original topic from the
    /// `RETRY_TOPIC` property, then the namespace is stripped. The `RETRY_TOPIC` property
    /// itself keeps the wire name.
    pub fn unwrap_received(&self, message: &mut MessageExt, wire_group: Option<&str>) {
        if self.is_none() {
            return;
        }
        if let Some(group) = wire_group {
            crate::consumer::retry::restore_original_topic(message, group);
        }
        if let Some(topic) = self.unwrapped(&message.message.topic) {
            message.message.topic = topic.into();
        }
    }

    /// `message` with its topic on the wire, for a send-back or a re-send to the retry topic
    /// (the application saw it unwrapped); borrowed when nothing changes.
    pub fn wire_message<'a>(&self, message: &'a MessageExt) -> Cow<'a, MessageExt> {
        match self.wrap(message.topic()) {
            Cow::Borrowed(_) => Cow::Borrowed(message),
            Cow::Owned(topic) => {
                let mut wire = message.clone();
                wire.message.topic = topic.into();
                Cow::Owned(wire)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{property, Message};
    use proptest::prelude::*;

    #[test]
    fn the_worked_examples_of_java() {
        for (name, wire) in [
            ("T", "ns1%T"),
            ("G", "ns1%G"),
            ("%RETRY%G", "%RETRY%ns1%G"),
            ("%DLQ%G", "%DLQ%ns1%G"),
            ("ns1%T", "ns1%T"),
            ("%RETRY%ns1%G", "%RETRY%ns1%G"),
            ("TBW102", "TBW102"),
            ("SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX"),
            ("rmq_sys_x", "rmq_sys_x"),
            ("RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRACE_TOPIC"),
            ("CID_RMQ_SYS_x", "CID_RMQ_SYS_x"),
            ("", ""),
        ] {
            assert_eq!(wrap("ns1", name), wire, "wrap({name:?})");
        }
        for (wire, name) in [
            ("ns1%T", "T"),
            ("%RETRY%ns1%G", "%RETRY%G"),
            ("%DLQ%ns1%G", "%DLQ%G"),
            ("ns2%T", "ns2%T"),
            ("%RETRY%ns2%G", "%RETRY%ns2%G"),
            ("ns1%a%b", "a%b"),
            ("T", "T"),
            ("ns1", "ns1"),
            ("ns10%T", "ns10%T"),
            ("TBW102", "TBW102"),
        ] {
            assert_eq!(unwrap("ns1", wire), name, "unwrap({wire:?})");
        }
        // No namespace: nothing changes.
        assert_eq!(wrap("", "T"), "T");
        assert_eq!(unwrap("", "ns1%T"), "ns1%T");
        assert!(is_wrapped("ns1", "%DLQ%ns1%G") && !is_wrapped("ns1", "ns10%G"));
    }

    #[test]
    fn namespaces_are_validated_and_blank_is_none() {
        assert_eq!(Namespace::new("a|b-c_1").unwrap().as_str(), Some("a|b-c_1"));
        assert!(Namespace::new("").unwrap().is_none());
        assert!(Namespace::new(" \t").unwrap().is_none());
        for bad in ["a%b", "%", "a b", "ns/1", "né"] {
            match Namespace::new(bad) {
                Err(Error::Config { option, value, .. }) => {
                    assert_eq!(option, "namespace");
                    assert!(value.contains(bad.trim()), "{value}");
                }
                other => panic!("{bad:?} accepted: {other:?}"),
            }
        }
    }

    #[test]
    fn the_namespace_derived_from_an_instance_endpoint() {
        let derived = |addr| Namespace::resolve(None, addr).unwrap();
        assert_eq!(
            derived("MQ_INST_123_abc.mq.example.com:80").as_str(),
            Some("MQ_INST_123_abc")
        );
        assert_eq!(
            derived("http://MQ_INST_a_b.x:9876").as_str(),
            Some("MQ_INST_a_b")
        );
        for plain in [
            "127.0.0.1:9876",
            "MQ_INST_abc.host:1",
            "MQ_INST__x.host:1",
            "MQ_INST_x_.host:1",
            "MQ_INST_a_b",
            "x/MQ_INST_a_b.host",
        ] {
            assert!(derived(plain).is_none(), "{plain}");
        }
        // A configured namespace wins; a blank one falls back to the derived one.
        let addr = "MQ_INST_1_x.host:9876";
        assert_eq!(
            Namespace::resolve(Some("mine"), addr).unwrap().as_str(),
            Some("mine")
        );
        assert_eq!(
            Namespace::resolve(Some(" "), addr).unwrap().as_str(),
            Some("MQ_INST_1_x")
        );
    }

    #[test]
    fn queues_and_messages_cross_the_boundary() {
        let ns = Namespace::new("ns1").unwrap();
        let queue = MessageQueue::new("T", "broker-a", 2);
        let wire = ns.wrap_queue(&queue).into_owned();
        assert_eq!(wire, MessageQueue::new("ns1%T", "broker-a", 2));
        assert!(matches!(ns.wrap_queue(&wire), Cow::Borrowed(_)));
        assert_eq!(ns.unwrap_queues(vec![wire.clone()]), vec![queue.clone()]);
        assert!(matches!(
            Namespace::none().unwrap_queue(&wire),
            Cow::Borrowed(q) if *q == wire
        ));

        // A retried message: its topic is the group's retry topic, RETRY_TOPIC the wrapped
        // original; the application sees the original, unwrapped, and RETRY_TOPIC stays.
        let mut retried = MessageExt::from(
            Message::new("%RETRY%ns1%G", "b").with_property(property::RETRY_TOPIC, "ns1%T"),
        );
        ns.unwrap_received(&mut retried, Some("ns1%G"));
        assert_eq!(retried.topic(), "T");
        assert_eq!(retried.property(property::RETRY_TOPIC), Some("ns1%T"));
        // Sent back, it goes out under its wire topic again.
        assert_eq!(ns.wire_message(&retried).topic(), "ns1%T");

        // Another group's retry topic keeps its retry prefix, unwrapped.
        let mut other = MessageExt::from(
            Message::new("%RETRY%ns1%H", "b").with_property(property::RETRY_TOPIC, "ns1%T"),
        );
        ns.unwrap_received(&mut other, Some("ns1%G"));
        assert_eq!(other.topic(), "%RETRY%H");
        // Without a namespace nothing is touched, not even a retry topic.
        let mut plain = MessageExt::from(
            Message::new("%RETRY%G", "b").with_property(property::RETRY_TOPIC, "T"),
        );
        Namespace::none().unwrap_received(&mut plain, Some("G"));
        assert_eq!(plain.topic(), "%RETRY%G");
        assert!(matches!(
            Namespace::none().wire_message(&plain),
            Cow::Borrowed(_)
        ));
    }

    /// A namespace: Java's name characters without `%`.
    fn namespace() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9_|-]{1,12}"
    }

    /// Any name of Java's character set, sometimes with a retry or dead-letter prefix, or a
    /// system name.
    fn any_name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[%|a-zA-Z0-9_-]{0,20}",
            "(%RETRY%|%DLQ%)[%|a-zA-Z0-9_-]{0,20}",
            proptest::sample::select(SYSTEM_TOPICS.to_vec()).prop_map(str::to_owned),
            "(rmq_sys_|CID_RMQ_SYS_)[a-zA-Z0-9_]{0,8}",
        ]
    }

    proptest! {
        #[test]
        fn unwrap_undoes_wrap_for_every_user_name(ns in namespace(), name in any_name()) {
            prop_assume!(!is_wrapped(&ns, &name));
            let wire = wrap(&ns, &name);
            prop_assert_eq!(unwrap(&ns, &wire), name.as_str());
        }

        #[test]
        fn wrap_is_idempotent(ns in namespace(), name in any_name()) {
            let once = wrap(&ns, &name).into_owned();
            prop_assert_eq!(wrap(&ns, &once), once.as_str());
            prop_assert!(name.is_empty() || is_system_resource(&name) || is_wrapped(&ns, &once));
        }

        #[test]
        fn system_names_are_never_touched(
            ns in namespace(),
            name in prop_oneof![
                proptest::sample::select(SYSTEM_TOPICS.to_vec()).prop_map(str::to_owned),
                "(rmq_sys_|CID_RMQ_SYS_)[%|a-zA-Z0-9_-]{0,8}",
            ],
        ) {
            prop_assert_eq!(wrap(&ns, &name), name.as_str());
            prop_assert_eq!(unwrap(&ns, &name), name.as_str());
        }

        #[test]
        fn another_namespace_is_left_alone(a in namespace(), b in namespace(), name in any_name()) {
            prop_assume!(a != b);
            let wire = wrap(&b, &name);
            prop_assert_eq!(unwrap(&a, &wire), wire.as_ref());
        }

        #[test]
        fn the_retry_and_dead_letter_topics_of_a_wrapped_group(ns in namespace(), group in "[a-zA-Z0-9_-]{1,20}") {
            prop_assume!(!is_system_resource(&group) && !is_wrapped(&ns, &group));
            let wire_group = wrap(&ns, &group).into_owned();
            // What the consumer derives from its wrapped group is what wrapping the user's
            // retry and dead-letter topics gives.
            let retry = format!("%RETRY%{wire_group}");
            let dlq = format!("%DLQ%{wire_group}");
            prop_assert_eq!(wrap(&ns, &format!("%RETRY%{group}")).into_owned(), retry.clone());
            prop_assert_eq!(wrap(&ns, &format!("%DLQ%{group}")).into_owned(), dlq);
            let user_retry = format!("%RETRY%{group}");
            prop_assert_eq!(unwrap(&ns, &retry), user_retry.as_str());
        }
    }
}
