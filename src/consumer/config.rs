//! Push consumer configuration: every option of the Java `DefaultMQPushConsumer`, with its Java
//! default and the range Java's `checkConfig()` enforces, plus the options this crate adds.
//!
//! Loadable from TOML or JSON with **snake_case keys**; durations are humantime strings
//! (`"20s"`, `"15m"`, `"50ms"`) or integers of milliseconds (see `consumer::serde_duration` in the sources).
//! Unknown keys are rejected so that a typo does not silently fall back to a default.
//!
//! ```
//! # #[cfg(feature = "toml")] {
//! use std::time::Duration;
//! use rocketmq_actor::consumer::{ConsumeMode, MessageModel, PushConsumerConfig};
//!
//! let cfg = PushConsumerConfig::from_toml_str(r#"
//!     consumer_group = "order_service"
//!     message_model = "clustering"
//!     consume_mode = "orderly"
//!     consume_timeout = "5m"
//!     pull_batch_size = 64
//!     allocate_strategy = "averagely_by_circle"
//!
//!     [subscriptions]
//!     TopicOrders = "created || paid"
//! "#).unwrap();
//! assert_eq!(cfg.consume_mode, ConsumeMode::Orderly);
//! assert_eq!(cfg.message_model, MessageModel::Clustering);
//! assert_eq!(cfg.consume_timeout, Duration::from_secs(300));
//! assert_eq!(cfg.pull_threshold_for_queue, 1000); // Java default kept
//! # }
//! ```
//!
//! | key | default | allowed |
//! |---|---|---|
//! | `consumer_group` | required | `[%\|a-zA-Z0-9_-]`, 1..=120 chars, not `DEFAULT_CONSUMER` |
//! | `message_model` | `clustering` | `clustering`, `broadcasting` |
//! | `consume_mode` | `concurrently` | `concurrently`, `orderly` |
//! | `consume_from_where` | `last_offset` | `last_offset`, `first_offset`, `timestamp` (Java names accepted) |
//! | `consume_timestamp` | now − 30 min | `yyyyMMddHHmmss` (UTC) with optional `Z`/`±HHMM`/`±HH:MM` |
//! | `allocate_strategy` | `averagely` | see [`AllocateStrategyKind`] |
//! | `subscriptions` | `{}` | topic → tag expression (`"*"`, `"A \|\| B"`) |
//! | `consume_thread_min` / `consume_thread_max` | 20 / 20 | [1, 1000], min ≤ max |
//! | `consume_concurrency_max` | = `consume_thread_max` | [1, 1000] |
//! | `consume_concurrently_max_span` | 2000 | [1, 65535] |
//! | `pull_threshold_for_queue` | 1000 | [1, 65535] messages |
//! | `pull_threshold_size_for_queue_mib` | 100 | [1, 1024] MiB of bodies |
//! | `pull_threshold_for_topic` | off | [1, 6553500] messages |
//! | `pull_threshold_size_for_topic_mib` | off | [1, 102400] MiB |
//! | `pull_interval` | `0s` | [0, 65535 ms] |
//! | `pull_batch_size` | 32 | [1, 1024] |
//! | `pull_batch_size_in_bytes` | 262144 | ≥ 1 |
//! | `consume_message_batch_max_size` | 1 | [1, 1024] |
//! | `max_reconsume_times` | 16 (concurrently), unlimited (orderly) | any |
//! | `suspend_current_queue_time` | `1s` | clamped to [10 ms, 30 s] when used |
//! | `consume_timeout` | `15m` | > 0 |
//! | `shutdown_await` | wait for in-flight work | any; `"0s"` = Java's default (no wait) |
//! | `post_subscription_when_pull` | false | |
//! | `poll_name_server_interval` | `30s` | > 0 |
//! | `heartbeat_broker_interval` | `30s` | > 0 |
//! | `persist_consumer_offset_interval` | `5s` | > 0 |
//! | `rebalance_interval` / `rebalance_retry_interval` | `20s` / `1s` | > 0 |
//! | `lock_max_live_time` / `lock_interval` | `30s` / `20s` | > 0, interval < live time |
//! | `pull_max_idle_time` | `120s` | > 0 |
//! | `max_time_consume_continuously` | `60s` | > 0 |
//! | `unlock_delay` | `20s` | |
//! | `pull_delay_on_error` | `1s` | > 0 |
//! | `offset_store_dir` | `~/.rocketmq_offsets` | a directory |
//! | `restart_policy` | 10 restarts a minute, backoff `100ms` doubling to `10s` | (not in Java) |
//! | `handoff_wait` | `1s` | [0, 60 s] (not in Java) |
//! | `namespace` | none | `[a-zA-Z0-9_\|-]`, blank = none (see [`crate::namespace`]) |

use super::supervision::RestartPolicy;
use crate::error::{Error, Result};
use crate::filter::Selector;
use crate::message::MessageQueue;
use crate::namespace::Namespace;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use super::serde_duration;

/// Java's `MixAll.DEFAULT_CONSUMER_GROUP`, reserved for the client's internal use.
pub const DEFAULT_CONSUMER_GROUP: &str = "DEFAULT_CONSUMER";
/// Longest accepted group name: `%RETRY%` + group must fit the 127-character topic limit
/// (Java `Validators.GROUP_MAX_LENGTH`, 120 since 5.3.2; older clients allowed 255).
pub const GROUP_MAX_LENGTH: usize = 120;
/// Longest accepted topic name (Java `Validators.TOPIC_MAX_LENGTH`).
pub const TOPIC_MAX_LENGTH: usize = 127;
/// How far back the default `consume_timestamp` lies: 30 minutes, as in Java.
pub const DEFAULT_CONSUME_TIMESTAMP_LOOKBACK: Duration = Duration::from_secs(30 * 60);
/// `max_reconsume_times` of a concurrent consumer when none is configured (Java: -1 → 16).
pub const DEFAULT_MAX_RECONSUME_TIMES_CONCURRENTLY: u32 = 16;

/// How the queues of a subscribed topic are shared by the consumers of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageModel {
    /// Each queue is owned by one consumer of the group; offsets live on the broker.
    #[default]
    #[serde(alias = "CLUSTERING")]
    Clustering,
    /// Every consumer takes every queue; offsets live in a local file per consumer.
    #[serde(alias = "BROADCASTING")]
    Broadcasting,
}

impl MessageModel {
    /// The Java enum name, as sent in heartbeats (`"CLUSTERING"`).
    pub fn java_name(self) -> &'static str {
        match self {
            MessageModel::Clustering => "CLUSTERING",
            MessageModel::Broadcasting => "BROADCASTING",
        }
    }
}

/// Where a queue with no stored consume offset starts.
///
/// Java's deprecated `CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST`,
/// `CONSUME_FROM_MIN_OFFSET` and `CONSUME_FROM_MAX_OFFSET` behave as `LastOffset` there, and are
/// read as `LastOffset` here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumeFromWhere {
    /// The queue's max offset (only new messages); `0` for retry topics.
    #[default]
    #[serde(
        alias = "CONSUME_FROM_LAST_OFFSET",
        alias = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        alias = "CONSUME_FROM_MIN_OFFSET",
        alias = "CONSUME_FROM_MAX_OFFSET"
    )]
    LastOffset,
    /// Offset 0 (the broker corrects it to the min offset through `OFFSET_ILLEGAL`).
    #[serde(alias = "CONSUME_FROM_FIRST_OFFSET")]
    FirstOffset,
    /// The first message stored at or after `consume_timestamp`.
    #[serde(alias = "CONSUME_FROM_TIMESTAMP")]
    Timestamp,
}

impl ConsumeFromWhere {
    /// The Java enum name, as sent in heartbeats (`"CONSUME_FROM_LAST_OFFSET"`).
    pub fn java_name(self) -> &'static str {
        match self {
            ConsumeFromWhere::LastOffset => "CONSUME_FROM_LAST_OFFSET",
            ConsumeFromWhere::FirstOffset => "CONSUME_FROM_FIRST_OFFSET",
            ConsumeFromWhere::Timestamp => "CONSUME_FROM_TIMESTAMP",
        }
    }
}

/// Whether messages of one queue may be consumed in parallel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumeMode {
    /// Any number of batches of a queue at once (Java `MessageListenerConcurrently`).
    #[default]
    Concurrently,
    /// One batch of a queue at a time, in queue order, under a broker lock in clustering mode
    /// (Java `MessageListenerOrderly`).
    Orderly,
}

/// The built-in queue allocation strategies (see [`super::allocate`]).
///
/// In TOML/JSON either a bare name (`allocate_strategy = "averagely"`) or a table tagged by
/// `kind`:
///
/// ```toml
/// [allocate_strategy]
/// kind = "machine_room_nearby"
/// separator = "@"
/// inner = "averagely"
/// ```
///
/// Queue lists use snake_case keys: `{ topic = "T", broker_name = "broker-a", queue_id = 0 }`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AllocateStrategyKind {
    /// Contiguous, evenly sized ranges of the sorted queues (Java `AllocateMessageQueueAveragely`).
    #[default]
    Averagely,
    /// Queue `k` to consumer `k % consumers` (Java `AllocateMessageQueueAveragelyByCircle`).
    AveragelyByCircle,
    /// An MD5 hash ring with `virtual_nodes` points per consumer (Java default 10); moves few
    /// queues when consumers come and go.
    ConsistentHash {
        /// Points per consumer on the ring.
        virtual_nodes: u32,
    },
    /// A fixed list of queues, whatever the other consumers do.
    ByConfig {
        /// The queues this consumer takes.
        #[serde(with = "snake_case_queues")]
        queues: Vec<MessageQueue>,
    },
    /// Only queues of brokers named `<room>@<name>` with `room` in `rooms`, shared evenly.
    ByMachineRoom {
        /// The machine rooms this group consumes from.
        rooms: BTreeSet<String>,
    },
    /// Queues go to consumers of the same machine room; queues of rooms without any consumer
    /// are shared by everyone. Rooms are read from names split at `separator` (see
    /// [`super::allocate::SeparatorRoomResolver`]).
    MachineRoomNearby {
        /// The strategy used inside each room.
        inner: Box<AllocateStrategyKind>,
        /// Separator of the room part in broker names and client ids.
        separator: String,
    },
}

/// Default number of virtual nodes of [`AllocateStrategyKind::ConsistentHash`].
pub const DEFAULT_VIRTUAL_NODES: u32 = 10;

fn default_virtual_nodes() -> u32 {
    DEFAULT_VIRTUAL_NODES
}

fn default_room_separator() -> String {
    "@".to_owned()
}

fn default_inner_strategy() -> Box<AllocateStrategyKind> {
    Box::new(AllocateStrategyKind::Averagely)
}

/// Reading side of [`AllocateStrategyKind`]: a bare name or a `kind`-tagged table.
#[derive(Deserialize)]
#[serde(untagged)]
enum StrategyRepr {
    Name(StrategyName),
    Tagged(TaggedStrategy),
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum StrategyName {
    Averagely,
    AveragelyByCircle,
    ConsistentHash,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum TaggedStrategy {
    Averagely,
    AveragelyByCircle,
    ConsistentHash {
        #[serde(default = "default_virtual_nodes")]
        virtual_nodes: u32,
    },
    ByConfig {
        #[serde(with = "snake_case_queues")]
        queues: Vec<MessageQueue>,
    },
    ByMachineRoom {
        rooms: BTreeSet<String>,
    },
    MachineRoomNearby {
        #[serde(default = "default_inner_strategy")]
        inner: Box<AllocateStrategyKind>,
        #[serde(default = "default_room_separator")]
        separator: String,
    },
}

impl<'de> Deserialize<'de> for AllocateStrategyKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match StrategyRepr::deserialize(deserializer)? {
            StrategyRepr::Name(StrategyName::Averagely) => AllocateStrategyKind::Averagely,
            StrategyRepr::Name(StrategyName::AveragelyByCircle) => {
                AllocateStrategyKind::AveragelyByCircle
            }
            StrategyRepr::Name(StrategyName::ConsistentHash) => {
                AllocateStrategyKind::ConsistentHash {
                    virtual_nodes: DEFAULT_VIRTUAL_NODES,
                }
            }
            StrategyRepr::Tagged(t) => match t {
                TaggedStrategy::Averagely => AllocateStrategyKind::Averagely,
                TaggedStrategy::AveragelyByCircle => AllocateStrategyKind::AveragelyByCircle,
                TaggedStrategy::ConsistentHash { virtual_nodes } => {
                    AllocateStrategyKind::ConsistentHash { virtual_nodes }
                }
                TaggedStrategy::ByConfig { queues } => AllocateStrategyKind::ByConfig { queues },
                TaggedStrategy::ByMachineRoom { rooms } => {
                    AllocateStrategyKind::ByMachineRoom { rooms }
                }
                TaggedStrategy::MachineRoomNearby { inner, separator } => {
                    AllocateStrategyKind::MachineRoomNearby { inner, separator }
                }
            },
        })
    }
}

/// `Vec<MessageQueue>` with snake_case keys (`broker_name`, `queue_id`); the camelCase keys of
/// the wire form are accepted too.
mod snake_case_queues {
    use crate::message::MessageQueue;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct QueueRepr {
        topic: String,
        #[serde(alias = "brokerName")]
        broker_name: String,
        #[serde(alias = "queueId")]
        queue_id: i32,
    }

    pub fn serialize<S: Serializer>(queues: &[MessageQueue], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(queues.iter().map(|q| QueueRepr {
            topic: q.topic.clone(),
            broker_name: q.broker_name.clone(),
            queue_id: q.queue_id,
        }))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<MessageQueue>, D::Error> {
        let reprs = Vec::<QueueRepr>::deserialize(d)?;
        Ok(reprs
            .into_iter()
            .map(|r| MessageQueue::new(r.topic, r.broker_name, r.queue_id))
            .collect())
    }
}

/// Every option of a push consumer. Build with [`PushConsumerConfig::new`] (Java defaults) and
/// struct update syntax, or load with [`PushConsumerConfig::from_toml_str`] /
/// [`PushConsumerConfig::from_json_str`]; check with [`PushConsumerConfig::validate`].
///
/// ```
/// use std::time::Duration;
/// use rocketmq_actor::consumer::PushConsumerConfig;
///
/// let cfg = PushConsumerConfig {
///     consume_thread_max: 64,
///     shutdown_await: Some(Duration::from_secs(10)),
///     ..PushConsumerConfig::new("billing")
/// };
/// assert!(cfg.validate().is_ok());
/// assert_eq!(cfg.effective_consume_concurrency(), 64);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushConsumerConfig {
    /// The consumer group (Java `consumerGroup`): required, `[%|a-zA-Z0-9_-]`, at most 120
    /// characters, not `DEFAULT_CONSUMER`.
    pub consumer_group: String,
    /// Clustering (queues shared out) or broadcasting (every consumer gets everything).
    pub message_model: MessageModel,
    /// Concurrent or orderly consumption (Java picks it from the listener's type).
    pub consume_mode: ConsumeMode,
    /// Orderly only, opt-in (not in Java): within one queue, messages with different ordering
    /// keys (`__SHARDINGKEY`, else the first `KEYS` token) are consumed concurrently while
    /// messages with the same key stay strictly ordered (`__SHARDINGKEY`, else the first of KEYS). Default
    /// false: the whole queue is one ordered stream.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub key_ordered: bool,
    /// Where a queue without a stored offset starts.
    pub consume_from_where: ConsumeFromWhere,
    /// The start time for [`ConsumeFromWhere::Timestamp`]: `yyyyMMddHHmmss`, read as UTC unless
    /// followed by `Z`, `±HHMM` or `±HH:MM` (Java reads it in the JVM's local zone; this crate has
    /// no time-zone database, so give the offset explicitly). `None` = 30 minutes before start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consume_timestamp: Option<String>,
    /// How queues are shared among the group's consumers (clustering only).
    pub allocate_strategy: AllocateStrategyKind,
    /// Topic → selector: a tag expression (`"*"`, `"TagA || TagB"`) or, as a table,
    /// SQL92 (`{ sql = "amount > 100" }`). The retry topic of the group is added by the
    /// consumer itself in clustering mode.
    pub subscriptions: BTreeMap<String, Selector>,
    /// Java `consumeThreadMin` (default 20, [1, 1000]). Kept for parity: Java's pool never grows
    /// past it; here it is only checked against `consume_thread_max`.
    pub consume_thread_min: u32,
    /// Java `consumeThreadMax` (default 20, [1, 1000]). Unlike Java it does bound consumption:
    /// it is the concurrency limit when `consume_concurrency_max` is unset.
    pub consume_thread_max: u32,
    /// Hard limit on listener calls in flight at once across all queues ([1, 1000]); defaults to
    /// `consume_thread_max`. See [`PushConsumerConfig::effective_consume_concurrency`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consume_concurrency_max: Option<u32>,
    /// Concurrent mode stops pulling a queue while the offset span of its cached messages
    /// exceeds this (default 2000, [1, 65535]).
    pub consume_concurrently_max_span: u32,
    /// Stop pulling a queue while it caches more than this many messages (default 1000,
    /// [1, 65535]).
    pub pull_threshold_for_queue: u32,
    /// Stop pulling a queue while its cached bodies exceed this many MiB (default 100,
    /// [1, 1024]).
    pub pull_threshold_size_for_queue_mib: u32,
    /// When set, the per-queue message limit becomes `max(1, this ÷ owned queues)` (Java
    /// `pullThresholdForTopic`, [1, 6553500]; default off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_threshold_for_topic: Option<u32>,
    /// When set, the per-queue MiB limit becomes `max(1, this ÷ owned queues)` ([1, 102400];
    /// default off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_threshold_size_for_topic_mib: Option<u32>,
    /// Pause between a successful pull and the next one of the same queue (default 0,
    /// [0, 65535 ms]).
    #[serde(with = "serde_duration")]
    pub pull_interval: Duration,
    /// Messages asked for per pull (`maxMsgNums`, default 32, [1, 1024]).
    pub pull_batch_size: u32,
    /// Bytes asked for per pull (`maxMsgBytes`, default 256 KiB; the Java broker ignores it).
    pub pull_batch_size_in_bytes: u32,
    /// Messages handed to one listener call (default 1, [1, 1024]).
    pub consume_message_batch_max_size: u32,
    /// Deliveries before a message goes to the DLQ. `None` = Java's -1: 16 when consuming
    /// concurrently, unlimited when orderly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_reconsume_times: Option<u32>,
    /// Orderly mode: how long a queue pauses after a failed batch (default 1 s, clamped to
    /// [10 ms, 30 s] when used, as Java does).
    #[serde(with = "serde_duration")]
    pub suspend_current_queue_time: Duration,
    /// A message whose consumption started longer ago than this is sent back for retry and
    /// stops pinning the queue's offset (default 15 min).
    #[serde(with = "serde_duration")]
    pub consume_timeout: Duration,
    /// How long shutdown waits for listener calls in flight before persisting offsets. `None`
    /// (the default) waits until they finish, so no message is consumed twice because of a
    /// shutdown; Java's default is `0s` (do not wait), which causes duplicates. Calls still
    /// running when it ends are abandoned (not committed, so redelivered), with a warning per
    /// queue on the `tracing` target `rocketmq_actor::shutdown`.
    #[serde(
        with = "serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub shutdown_await: Option<Duration>,
    /// Send the subscription expression with every pull (`FLAG_SUBSCRIPTION`) instead of
    /// relying on the heartbeat-registered one (Java default false).
    pub post_subscription_when_pull: bool,
    /// Topic route refresh period (default 30 s).
    #[serde(with = "serde_duration")]
    pub poll_name_server_interval: Duration,
    /// Heartbeat period to every broker (default 30 s).
    #[serde(with = "serde_duration")]
    pub heartbeat_broker_interval: Duration,
    /// Offset persistence period (default 5 s).
    #[serde(with = "serde_duration")]
    pub persist_consumer_offset_interval: Duration,
    /// Rebalance period (default 20 s).
    #[serde(with = "serde_duration")]
    pub rebalance_interval: Duration,
    /// Retry delay of a rebalance that left the consumer unbalanced, e.g. a failed lock or
    /// offset query (Java 5.x: 1 s).
    #[serde(with = "serde_duration")]
    pub rebalance_retry_interval: Duration,
    /// Orderly: a queue lock older than this counts as expired on the client (default 30 s;
    /// brokers expire locks after 60 s).
    #[serde(with = "serde_duration")]
    pub lock_max_live_time: Duration,
    /// Orderly: lock renewal period (default 20 s); must be shorter than `lock_max_live_time`.
    #[serde(with = "serde_duration")]
    pub lock_interval: Duration,
    /// A queue whose pulls stalled this long is dropped and re-added by the next rebalance
    /// (default 120 s).
    #[serde(with = "serde_duration")]
    pub pull_max_idle_time: Duration,
    /// Orderly: a queue yields to others after consuming continuously this long (default 60 s).
    #[serde(with = "serde_duration")]
    pub max_time_consume_continuously: Duration,
    /// Orderly: delay before unlocking a dropped queue that still had messages in flight
    /// (default 20 s).
    #[serde(with = "serde_duration")]
    pub unlock_delay: Duration,
    /// Pause before re-pulling after a pull error or a non-pullable state (Java
    /// `pullTimeDelayMillsWhenException`, default 1 s).
    #[serde(with = "serde_duration")]
    pub pull_delay_on_error: Duration,
    /// Broadcasting: root of the local offset files (`<dir>/DEFAULT/<group>/offsets.json`).
    /// `None` = `~/.rocketmq_offsets`, as Java. The path is the same for every run, so a
    /// restarted member resumes where it stopped (Java names the directory after a client id
    /// that changes with every process, and starts over); two broadcasting members of one
    /// group on one host must therefore be given different directories.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset_store_dir: Option<PathBuf>,
    /// How the consumer's supervised actors (queue actors, the rebalancer, the heartbeat, the
    /// offset store) are restarted when one fails (not in Java, whose threads just die).
    pub restart_policy: RestartPolicy,
    /// Clustering: how long a queue taken over from a member that is still in the group waits
    /// before its first offset read, so the previous owner can commit what it consumed as it
    /// lets go (it gets the same membership notice at the same moment). `0s` starts at once,
    /// as Java does, and re-delivers what the previous owner had not yet committed (default
    /// `1s`, [0, 60 s]; queues of departed members and first assignments never wait).
    #[serde(with = "serde_duration")]
    pub handoff_wait: Duration,
    /// The namespace (Java `ClientConfig.namespace`): the group and the subscribed topics are
    /// prefixed with `namespace%` on the wire (so are the group's retry and dead-letter topics,
    /// `%RETRY%namespace%group`), and stripped from every topic and queue the application sees
    /// (see [`crate::namespace`]). `None` or blank: the one of an `MQ_INST_…` name-server
    /// address, else none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl Default for PushConsumerConfig {
    fn default() -> Self {
        PushConsumerConfig {
            consumer_group: String::new(),
            message_model: MessageModel::Clustering,
            consume_mode: ConsumeMode::Concurrently,
            key_ordered: false,
            consume_from_where: ConsumeFromWhere::LastOffset,
            consume_timestamp: None,
            allocate_strategy: AllocateStrategyKind::Averagely,
            subscriptions: BTreeMap::new(),
            consume_thread_min: 20,
            consume_thread_max: 20,
            consume_concurrency_max: None,
            consume_concurrently_max_span: 2000,
            pull_threshold_for_queue: 1000,
            pull_threshold_size_for_queue_mib: 100,
            pull_threshold_for_topic: None,
            pull_threshold_size_for_topic_mib: None,
            pull_interval: Duration::ZERO,
            pull_batch_size: 32,
            pull_batch_size_in_bytes: 256 * 1024,
            consume_message_batch_max_size: 1,
            max_reconsume_times: None,
            suspend_current_queue_time: Duration::from_millis(1000),
            consume_timeout: Duration::from_secs(15 * 60),
            shutdown_await: None,
            post_subscription_when_pull: false,
            poll_name_server_interval: Duration::from_secs(30),
            heartbeat_broker_interval: Duration::from_secs(30),
            persist_consumer_offset_interval: Duration::from_secs(5),
            rebalance_interval: Duration::from_secs(20),
            rebalance_retry_interval: Duration::from_secs(1),
            lock_max_live_time: Duration::from_secs(30),
            lock_interval: Duration::from_secs(20),
            pull_max_idle_time: Duration::from_secs(120),
            max_time_consume_continuously: Duration::from_secs(60),
            unlock_delay: Duration::from_secs(20),
            pull_delay_on_error: Duration::from_millis(1000),
            offset_store_dir: None,
            restart_policy: RestartPolicy::default(),
            handoff_wait: Duration::from_secs(1),
            namespace: None,
        }
    }
}

fn config_error(option: &'static str, value: impl ToString, allowed: impl Into<String>) -> Error {
    Error::Config {
        option,
        value: value.to_string(),
        allowed: allowed.into(),
    }
}

fn check_range(option: &'static str, value: u32, min: u32, max: u32) -> Result<()> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(config_error(
            option,
            value,
            format!("an integer in [{min}, {max}]"),
        ))
    }
}

fn check_positive(option: &'static str, value: Duration) -> Result<()> {
    if value.is_zero() {
        Err(config_error(
            option,
            humantime::format_duration(value),
            "a duration greater than zero",
        ))
    } else {
        Ok(())
    }
}

/// Java's `TopicValidator.isTopicOrGroupIllegal` character set: `^[%|a-zA-Z0-9_-]+$`.
fn is_legal_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-')
}

/// Checks a consumer group name as Java's `Validators.checkGroup` and `checkConfig` do.
///
/// ```
/// use rocketmq_actor::consumer::config::validate_group_name;
/// assert!(validate_group_name("order_service-1").is_ok());
/// assert!(validate_group_name("bad group").is_err());
/// assert!(validate_group_name("DEFAULT_CONSUMER").is_err());
/// ```
pub fn validate_group_name(group: &str) -> Result<()> {
    const OPTION: &str = "consumer_group";
    if group.trim().is_empty() {
        return Err(config_error(
            OPTION,
            format!("{group:?}"),
            "a non-blank name",
        ));
    }
    if group.chars().count() > GROUP_MAX_LENGTH {
        return Err(config_error(
            OPTION,
            group,
            format!("at most {GROUP_MAX_LENGTH} characters"),
        ));
    }
    if !group.chars().all(is_legal_name_char) {
        return Err(config_error(
            OPTION,
            group,
            "only characters matching ^[%|a-zA-Z0-9_-]+$",
        ));
    }
    if group == DEFAULT_CONSUMER_GROUP {
        return Err(config_error(
            OPTION,
            group,
            "any name but DEFAULT_CONSUMER (reserved by the client)",
        ));
    }
    Ok(())
}

/// Checks a subscription: the topic's name, a non-blank expression, and a SQL92 expression's
/// syntax (the error gives its position).
pub(crate) fn validate_selector(topic: &str, selector: &Selector) -> Result<()> {
    validate_topic_name(topic)?;
    let expression = selector.expression();
    if expression.trim().is_empty() {
        return Err(config_error(
            "subscriptions",
            format!("{topic} = {expression:?}"),
            "a non-blank expression such as \"*\", \"TagA || TagB\" or SQL92",
        ));
    }
    selector.check().map_err(|error| Error::InvalidSelector {
        topic: topic.to_owned(),
        expression: expression.to_owned(),
        error,
    })
}

/// Checks a topic name as Java's `Validators.checkTopic` does (charset and length).
pub fn validate_topic_name(topic: &str) -> Result<()> {
    const OPTION: &str = "subscriptions";
    if topic.trim().is_empty() {
        return Err(config_error(
            OPTION,
            format!("{topic:?}"),
            "non-blank topic names",
        ));
    }
    if topic.chars().count() > TOPIC_MAX_LENGTH {
        return Err(config_error(
            OPTION,
            topic,
            format!("topic names of at most {TOPIC_MAX_LENGTH} characters"),
        ));
    }
    if !topic.chars().all(is_legal_name_char) {
        return Err(config_error(
            OPTION,
            topic,
            "topic names matching ^[%|a-zA-Z0-9_-]+$",
        ));
    }
    Ok(())
}

/// `kind` with the topics of its configured queues wrapped in `namespace`.
pub(crate) fn strategy_on_the_wire(
    kind: &AllocateStrategyKind,
    namespace: &Namespace,
) -> AllocateStrategyKind {
    match kind {
        AllocateStrategyKind::ByConfig { queues } => AllocateStrategyKind::ByConfig {
            queues: namespace.wrap_queues(queues),
        },
        AllocateStrategyKind::MachineRoomNearby { inner, separator } => {
            AllocateStrategyKind::MachineRoomNearby {
                inner: Box::new(strategy_on_the_wire(inner, namespace)),
                separator: separator.clone(),
            }
        }
        other => other.clone(),
    }
}

fn validate_strategy(kind: &AllocateStrategyKind) -> Result<()> {
    const OPTION: &str = "allocate_strategy";
    match kind {
        AllocateStrategyKind::Averagely | AllocateStrategyKind::AveragelyByCircle => Ok(()),
        AllocateStrategyKind::ConsistentHash { virtual_nodes } => {
            check_range("allocate_strategy.virtual_nodes", *virtual_nodes, 1, 10_000)
        }
        AllocateStrategyKind::ByConfig { queues } if queues.is_empty() => Err(config_error(
            OPTION,
            "by_config with no queues",
            "a non-empty queue list",
        )),
        AllocateStrategyKind::ByConfig { .. } => Ok(()),
        AllocateStrategyKind::ByMachineRoom { rooms } if rooms.is_empty() => Err(config_error(
            OPTION,
            "by_machine_room with no rooms",
            "a non-empty room list",
        )),
        AllocateStrategyKind::ByMachineRoom { .. } => Ok(()),
        AllocateStrategyKind::MachineRoomNearby { separator, .. } if separator.is_empty() => {
            Err(config_error(
                OPTION,
                "an empty separator",
                "a non-empty separator such as \"@\"",
            ))
        }
        AllocateStrategyKind::MachineRoomNearby { inner, .. } => match inner.as_ref() {
            AllocateStrategyKind::MachineRoomNearby { .. } => Err(config_error(
                OPTION,
                "machine_room_nearby inside machine_room_nearby",
                "a plain inner strategy",
            )),
            other => validate_strategy(other),
        },
    }
}

impl PushConsumerConfig {
    /// Java defaults for the given group.
    pub fn new(consumer_group: impl Into<String>) -> Self {
        PushConsumerConfig {
            consumer_group: consumer_group.into(),
            ..PushConsumerConfig::default()
        }
    }

    /// Parses a TOML document (snake_case keys) and validates it (feature `toml`).
    #[cfg(feature = "toml")]
    pub fn from_toml_str(text: &str) -> Result<Self> {
        let cfg: PushConsumerConfig = toml::from_str(text)
            .map_err(|e| config_error("toml", e.to_string(), "a valid consumer TOML document"))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parses a JSON document (snake_case keys) and validates it.
    pub fn from_json_str(text: &str) -> Result<Self> {
        let cfg: PushConsumerConfig = serde_json::from_str(text)
            .map_err(|e| config_error("json", e, "a valid consumer JSON document"))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The configuration as TOML (what [`PushConsumerConfig::from_toml_str`] reads back;
    /// feature `toml`).
    #[cfg(feature = "toml")]
    pub fn to_toml_string(&self) -> Result<String> {
        toml::to_string(self).map_err(|e| config_error("toml", e, "a serializable configuration"))
    }

    /// Checks every option against Java's `checkConfig()` ranges and this crate's own rules;
    /// the first violation is returned as [`Error::Config`] naming the option, the value and
    /// the allowed range.
    pub fn validate(&self) -> Result<()> {
        validate_group_name(&self.consumer_group)?;
        for (topic, selector) in &self.subscriptions {
            validate_selector(topic, selector)?;
        }
        if let Some(ts) = &self.consume_timestamp {
            if parse_consume_timestamp(ts).is_none() {
                return Err(config_error(
                    "consume_timestamp",
                    ts,
                    "yyyyMMddHHmmss with an optional Z, ±HHMM or ±HH:MM offset",
                ));
            }
        }
        validate_strategy(&self.allocate_strategy)?;
        if self.key_ordered && self.consume_mode != ConsumeMode::Orderly {
            return Err(config_error(
                "key_ordered",
                "true",
                "only with consume_mode = \"orderly\"",
            ));
        }
        check_range("consume_thread_min", self.consume_thread_min, 1, 1000)?;
        check_range("consume_thread_max", self.consume_thread_max, 1, 1000)?;
        if self.consume_thread_min > self.consume_thread_max {
            return Err(config_error(
                "consume_thread_min",
                self.consume_thread_min,
                format!("at most consume_thread_max ({})", self.consume_thread_max),
            ));
        }
        if let Some(max) = self.consume_concurrency_max {
            check_range("consume_concurrency_max", max, 1, 1000)?;
        }
        check_range(
            "consume_concurrently_max_span",
            self.consume_concurrently_max_span,
            1,
            65535,
        )?;
        check_range(
            "pull_threshold_for_queue",
            self.pull_threshold_for_queue,
            1,
            65535,
        )?;
        check_range(
            "pull_threshold_size_for_queue_mib",
            self.pull_threshold_size_for_queue_mib,
            1,
            1024,
        )?;
        if let Some(v) = self.pull_threshold_for_topic {
            check_range("pull_threshold_for_topic", v, 1, 6_553_500)?;
        }
        if let Some(v) = self.pull_threshold_size_for_topic_mib {
            check_range("pull_threshold_size_for_topic_mib", v, 1, 102_400)?;
        }
        if self.pull_interval > Duration::from_millis(65535) {
            return Err(config_error(
                "pull_interval",
                humantime::format_duration(self.pull_interval),
                "a duration in [0ms, 65535ms]",
            ));
        }
        check_range("pull_batch_size", self.pull_batch_size, 1, 1024)?;
        check_range(
            "pull_batch_size_in_bytes",
            self.pull_batch_size_in_bytes,
            1,
            u32::MAX,
        )?;
        check_range(
            "consume_message_batch_max_size",
            self.consume_message_batch_max_size,
            1,
            1024,
        )?;
        check_positive("consume_timeout", self.consume_timeout)?;
        if self.handoff_wait > Duration::from_secs(60) {
            return Err(config_error(
                "handoff_wait",
                humantime::format_duration(self.handoff_wait),
                "a duration in [0s, 60s]",
            ));
        }
        check_positive("poll_name_server_interval", self.poll_name_server_interval)?;
        check_positive("heartbeat_broker_interval", self.heartbeat_broker_interval)?;
        check_positive(
            "persist_consumer_offset_interval",
            self.persist_consumer_offset_interval,
        )?;
        check_positive("rebalance_interval", self.rebalance_interval)?;
        check_positive("rebalance_retry_interval", self.rebalance_retry_interval)?;
        check_positive("lock_max_live_time", self.lock_max_live_time)?;
        check_positive("lock_interval", self.lock_interval)?;
        if self.lock_interval >= self.lock_max_live_time {
            return Err(config_error(
                "lock_interval",
                humantime::format_duration(self.lock_interval),
                format!(
                    "shorter than lock_max_live_time ({}), or locks expire between renewals",
                    humantime::format_duration(self.lock_max_live_time)
                ),
            ));
        }
        check_positive("pull_max_idle_time", self.pull_max_idle_time)?;
        check_positive(
            "max_time_consume_continuously",
            self.max_time_consume_continuously,
        )?;
        check_positive("pull_delay_on_error", self.pull_delay_on_error)?;
        if let Some(namespace) = &self.namespace {
            crate::namespace::validate(namespace)?;
        }
        Ok(())
    }

    /// The configuration as the consumer uses it on the wire under `namespace`: group,
    /// subscribed topics and the queues of a `by_config` strategy wrapped (Java wraps the
    /// group at `start()` and each topic at `subscribe`). Unchanged without a namespace.
    pub(crate) fn on_the_wire(&self, namespace: &Namespace) -> PushConsumerConfig {
        let mut wire = self.clone();
        wire.consumer_group = namespace.wrap(&self.consumer_group).into_owned();
        wire.subscriptions = self
            .subscriptions
            .iter()
            .map(|(topic, expression)| (namespace.wrap(topic).into_owned(), expression.clone()))
            .collect();
        wire.allocate_strategy = strategy_on_the_wire(&self.allocate_strategy, namespace);
        wire
    }

    /// Whether queues are shared out among the group (clustering) rather than all taken.
    pub fn is_clustering(&self) -> bool {
        self.message_model == MessageModel::Clustering
    }

    /// Whether consumption is orderly.
    pub fn is_orderly(&self) -> bool {
        self.consume_mode == ConsumeMode::Orderly
    }

    /// Whether consumption is orderly per key rather than per queue ([`Self::key_ordered`]).
    pub fn is_key_ordered(&self) -> bool {
        self.is_orderly() && self.key_ordered
    }

    /// The limit on listener calls in flight at once: `consume_concurrency_max`, else
    /// `consume_thread_max`.
    pub fn effective_consume_concurrency(&self) -> u32 {
        self.consume_concurrency_max
            .unwrap_or(self.consume_thread_max)
    }

    /// Deliveries before the DLQ, `None` meaning unlimited (orderly with nothing configured).
    pub fn effective_max_reconsume_times(&self) -> Option<u32> {
        match (self.max_reconsume_times, self.consume_mode) {
            (Some(n), _) => Some(n),
            (None, ConsumeMode::Concurrently) => Some(DEFAULT_MAX_RECONSUME_TIMES_CONCURRENTLY),
            (None, ConsumeMode::Orderly) => None,
        }
    }

    /// `maxReconsumeTimes` as sent to the broker (`CONSUMER_SEND_MSG_BACK`, the
    /// `MAX_RECONSUME_TIMES` property): unlimited is Java's `Integer.MAX_VALUE`.
    pub fn max_reconsume_times_for_wire(&self) -> i32 {
        self.effective_max_reconsume_times()
            .map_or(i32::MAX, |n| i32::try_from(n).unwrap_or(i32::MAX))
    }

    /// The start time (epoch ms) of [`ConsumeFromWhere::Timestamp`]: the configured
    /// `consume_timestamp`, or 30 minutes before `now_ms` when none is set.
    pub fn consume_timestamp_ms(&self, now_ms: i64) -> Result<i64> {
        match &self.consume_timestamp {
            None => {
                Ok(now_ms.saturating_sub(DEFAULT_CONSUME_TIMESTAMP_LOOKBACK.as_millis() as i64))
            }
            Some(ts) => parse_consume_timestamp(ts).ok_or_else(|| {
                config_error(
                    "consume_timestamp",
                    ts,
                    "yyyyMMddHHmmss with an optional Z, ±HHMM or ±HH:MM offset",
                )
            }),
        }
    }
}

fn parse_digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses a `consume_timestamp` into epoch milliseconds.
///
/// Accepts Java's `yyyyMMddHHmmss`, read as UTC, optionally followed by `Z`, `±HHMM` or
/// `±HH:MM` (the zone the wall-clock time is in). Unlike Java's lenient `SimpleDateFormat`,
/// out-of-range fields (month 13, 31 April…) are rejected.
///
/// ```
/// use rocketmq_actor::consumer::config::parse_consume_timestamp;
/// assert_eq!(parse_consume_timestamp("20240101000000"), Some(1_704_067_200_000));
/// assert_eq!(parse_consume_timestamp("20240101080000+0800"), Some(1_704_067_200_000));
/// assert_eq!(parse_consume_timestamp("20241301000000"), None);
/// ```
pub fn parse_consume_timestamp(text: &str) -> Option<i64> {
    let text = text.trim();
    let (wall, zone) = (text.get(..14)?, text.get(14..)?);
    // `time` checks the fields (month 13, 31 April…); only ASCII digits get that far.
    if !wall.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let wall = time::PrimitiveDateTime::parse(wall, &CONSUME_TIMESTAMP_FORMAT).ok()?;
    let offset_seconds = match zone {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match zone.get(..1)? {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            let rest = zone.get(1..)?;
            let (hh, mm) = match rest.len() {
                4 => (rest.get(..2)?, rest.get(2..)?),
                5 if rest.get(2..3)? == ":" => (rest.get(..2)?, rest.get(3..)?),
                _ => return None,
            };
            let (hh, mm) = (parse_digits(hh)?, parse_digits(mm)?);
            if hh > 23 || mm > 59 {
                return None;
            }
            sign * (hh * 3600 + mm * 60)
        }
    };
    let seconds = wall.assume_utc().unix_timestamp() - offset_seconds;
    Some(seconds * 1000)
}

/// Java's `yyyyMMddHHmmss`.
const CONSUME_TIMESTAMP_FORMAT: &[time::format_description::BorrowedFormatItem<'static>] =
    time::macros::format_description!("[year][month][day][hour][minute][second]");

/// Formats epoch milliseconds as a UTC `yyyyMMddHHmmss` (sub-second part dropped), the form
/// [`parse_consume_timestamp`] reads.
///
/// ```
/// use rocketmq_actor::consumer::config::format_consume_timestamp_utc;
/// assert_eq!(format_consume_timestamp_utc(1_704_067_200_999), "20240101000000");
/// ```
pub fn format_consume_timestamp_utc(epoch_ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(epoch_ms.div_euclid(1000))
        .ok()
        .and_then(|time| time.format(&CONSUME_TIMESTAMP_FORMAT).ok())
        // Outside years 1–9999 (time's range): the earliest or latest form Java reads.
        .unwrap_or_else(|| {
            if epoch_ms < 0 {
                "00010101000000".to_owned()
            } else {
                "99991231235959".to_owned()
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config_option(err: Error) -> (&'static str, String, String) {
        match err {
            Error::Config {
                option,
                value,
                allowed,
            } => (option, value, allowed),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    fn valid() -> PushConsumerConfig {
        PushConsumerConfig::new("group_a")
    }

    #[test]
    fn defaults_are_java_defaults() {
        let c = valid();
        assert_eq!(c.message_model, MessageModel::Clustering);
        assert_eq!(c.consume_from_where, ConsumeFromWhere::LastOffset);
        assert_eq!(c.allocate_strategy, AllocateStrategyKind::Averagely);
        assert_eq!((c.consume_thread_min, c.consume_thread_max), (20, 20));
        assert_eq!(c.consume_concurrently_max_span, 2000);
        assert_eq!(c.pull_threshold_for_queue, 1000);
        assert_eq!(c.pull_threshold_size_for_queue_mib, 100);
        assert_eq!(c.pull_threshold_for_topic, None);
        assert_eq!(c.pull_threshold_size_for_topic_mib, None);
        assert_eq!(c.pull_interval, Duration::ZERO);
        assert_eq!(c.pull_batch_size, 32);
        assert_eq!(c.consume_message_batch_max_size, 1);
        assert_eq!(c.suspend_current_queue_time, Duration::from_secs(1));
        assert_eq!(c.consume_timeout, Duration::from_secs(900));
        assert_eq!(c.poll_name_server_interval, Duration::from_secs(30));
        assert_eq!(c.heartbeat_broker_interval, Duration::from_secs(30));
        assert_eq!(c.persist_consumer_offset_interval, Duration::from_secs(5));
        assert_eq!(c.rebalance_interval, Duration::from_secs(20));
        assert_eq!(c.lock_max_live_time, Duration::from_secs(30));
        assert_eq!(c.lock_interval, Duration::from_secs(20));
        assert_eq!(c.pull_max_idle_time, Duration::from_secs(120));
        assert_eq!(c.max_time_consume_continuously, Duration::from_secs(60));
        assert_eq!(c.unlock_delay, Duration::from_secs(20));
        assert_eq!(c.shutdown_await, None);
        assert!(!c.post_subscription_when_pull);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn reconsume_limits_follow_the_consume_mode() {
        let mut c = valid();
        assert_eq!(c.effective_max_reconsume_times(), Some(16));
        assert_eq!(c.max_reconsume_times_for_wire(), 16);
        c.consume_mode = ConsumeMode::Orderly;
        assert_eq!(c.effective_max_reconsume_times(), None);
        assert_eq!(c.max_reconsume_times_for_wire(), i32::MAX);
        c.max_reconsume_times = Some(3);
        assert_eq!(c.effective_max_reconsume_times(), Some(3));
        assert_eq!(c.max_reconsume_times_for_wire(), 3);
    }

    #[test]
    fn concurrency_limit_falls_back_to_thread_max() {
        let mut c = valid();
        c.consume_thread_max = 48;
        assert_eq!(c.effective_consume_concurrency(), 48);
        c.consume_concurrency_max = Some(5);
        assert_eq!(c.effective_consume_concurrency(), 5);
    }

    #[test]
    fn group_name_rules() {
        assert!(validate_group_name("a%|_-Z9").is_ok());
        assert!(validate_group_name(&"g".repeat(120)).is_ok());
        let (option, value, allowed) =
            config_option(validate_group_name(&"g".repeat(121)).unwrap_err());
        assert_eq!(option, "consumer_group");
        assert_eq!(value.len(), 121);
        assert!(allowed.contains("120"));
        for bad in ["", "   ", "has space", "dot.ted", "ünï", "DEFAULT_CONSUMER"] {
            let (option, _, _) = config_option(validate_group_name(bad).unwrap_err());
            assert_eq!(option, "consumer_group", "{bad:?}");
        }
    }

    #[test]
    fn each_range_violation_names_option_value_and_range() {
        type Mutation = fn(&mut PushConsumerConfig);
        let cases: &[(Mutation, &str, &str)] = &[
            (|c| c.consume_thread_min = 0, "consume_thread_min", "0"),
            (
                |c| c.consume_thread_max = 1001,
                "consume_thread_max",
                "1001",
            ),
            (
                |c| c.consume_concurrency_max = Some(0),
                "consume_concurrency_max",
                "0",
            ),
            (
                |c| c.consume_concurrently_max_span = 65536,
                "consume_concurrently_max_span",
                "65536",
            ),
            (
                |c| c.pull_threshold_for_queue = 0,
                "pull_threshold_for_queue",
                "0",
            ),
            (
                |c| c.pull_threshold_size_for_queue_mib = 1025,
                "pull_threshold_size_for_queue_mib",
                "1025",
            ),
            (
                |c| c.pull_threshold_for_topic = Some(6_553_501),
                "pull_threshold_for_topic",
                "6553501",
            ),
            (
                |c| c.pull_threshold_size_for_topic_mib = Some(0),
                "pull_threshold_size_for_topic_mib",
                "0",
            ),
            (
                |c| c.pull_interval = Duration::from_millis(65536),
                "pull_interval",
                "1m 5s 536ms",
            ),
            (|c| c.pull_batch_size = 1025, "pull_batch_size", "1025"),
            (
                |c| c.consume_message_batch_max_size = 0,
                "consume_message_batch_max_size",
                "0",
            ),
            (
                |c| c.consume_timeout = Duration::ZERO,
                "consume_timeout",
                "0s",
            ),
            (
                |c| c.lock_interval = Duration::from_secs(30),
                "lock_interval",
                "30s",
            ),
            (
                |c| c.consume_timestamp = Some("2024".into()),
                "consume_timestamp",
                "2024",
            ),
            (
                |c| {
                    c.subscriptions.insert("bad topic".into(), "*".into());
                },
                "subscriptions",
                "bad topic",
            ),
            (
                |c| {
                    c.subscriptions.insert("T".into(), " ".into());
                },
                "subscriptions",
                "T = \" \"",
            ),
            (
                |c| c.allocate_strategy = AllocateStrategyKind::ConsistentHash { virtual_nodes: 0 },
                "allocate_strategy.virtual_nodes",
                "0",
            ),
        ];
        for (mutate, option, value) in cases {
            let mut c = valid();
            mutate(&mut c);
            let (got_option, got_value, allowed) = config_option(c.validate().unwrap_err());
            assert_eq!(got_option, *option);
            assert_eq!(got_value, *value, "{option}");
            assert!(!allowed.is_empty());
        }
    }

    #[test]
    fn thread_min_above_max_is_rejected() {
        let c = PushConsumerConfig {
            consume_thread_min: 30,
            consume_thread_max: 10,
            ..valid()
        };
        let (option, value, allowed) = config_option(c.validate().unwrap_err());
        assert_eq!((option, value.as_str()), ("consume_thread_min", "30"));
        assert!(allowed.contains("10"));
    }

    #[test]
    fn range_bounds_are_inclusive() {
        let c = PushConsumerConfig {
            consume_thread_min: 1000,
            consume_thread_max: 1000,
            consume_concurrently_max_span: 65535,
            pull_threshold_for_queue: 1,
            pull_threshold_size_for_queue_mib: 1024,
            pull_threshold_for_topic: Some(6_553_500),
            pull_threshold_size_for_topic_mib: Some(102_400),
            pull_interval: Duration::from_millis(65535),
            pull_batch_size: 1024,
            consume_message_batch_max_size: 1024,
            ..valid()
        };
        assert!(c.validate().is_ok());
    }

    #[cfg(feature = "toml")]
    #[test]
    fn loads_toml_with_snake_case_keys_and_humantime_durations() {
        let c = PushConsumerConfig::from_toml_str(
            r#"
            consumer_group = "g1"
            message_model = "broadcasting"
            consume_from_where = "CONSUME_FROM_MIN_OFFSET"
            consume_timestamp = "20240102030405"
            pull_interval = "250ms"
            shutdown_await = "20s"
            persist_consumer_offset_interval = 2500
            pull_threshold_for_topic = 5000
            [subscriptions]
            "T1" = "*"
            [allocate_strategy]
            kind = "consistent_hash"
            "#,
        )
        .unwrap();
        assert_eq!(c.message_model, MessageModel::Broadcasting);
        assert_eq!(c.consume_from_where, ConsumeFromWhere::LastOffset);
        assert_eq!(c.pull_interval, Duration::from_millis(250));
        assert_eq!(c.shutdown_await, Some(Duration::from_secs(20)));
        assert_eq!(
            c.persist_consumer_offset_interval,
            Duration::from_millis(2500)
        );
        assert_eq!(c.pull_threshold_for_topic, Some(5000));
        assert_eq!(
            c.subscriptions.get("T1").map(Selector::expression),
            Some("*")
        );
        assert_eq!(
            c.allocate_strategy,
            AllocateStrategyKind::ConsistentHash { virtual_nodes: 10 }
        );
    }

    #[test]
    fn loads_json_and_every_strategy_form() {
        let c = PushConsumerConfig::from_json_str(
            r#"{"consumer_group":"g","consume_timeout":"2m",
                "allocate_strategy":{"kind":"machine_room_nearby","inner":{"kind":"by_config",
                  "queues":[{"topic":"T","broker_name":"b","queue_id":1},
                            {"topic":"T","brokerName":"b","queueId":2}]}}}"#,
        )
        .unwrap();
        assert_eq!(c.consume_timeout, Duration::from_secs(120));
        assert_eq!(
            c.allocate_strategy,
            AllocateStrategyKind::MachineRoomNearby {
                inner: Box::new(AllocateStrategyKind::ByConfig {
                    queues: vec![
                        MessageQueue::new("T", "b", 1),
                        MessageQueue::new("T", "b", 2)
                    ]
                }),
                separator: "@".into(),
            }
        );
        for (text, want) in [
            ("\"averagely\"", AllocateStrategyKind::Averagely),
            (
                "\"averagely_by_circle\"",
                AllocateStrategyKind::AveragelyByCircle,
            ),
            (
                "{\"kind\":\"consistent_hash\",\"virtual_nodes\":3}",
                AllocateStrategyKind::ConsistentHash { virtual_nodes: 3 },
            ),
            (
                "{\"kind\":\"by_machine_room\",\"rooms\":[\"r1\"]}",
                AllocateStrategyKind::ByMachineRoom {
                    rooms: ["r1".to_owned()].into(),
                },
            ),
        ] {
            let got: AllocateStrategyKind = serde_json::from_str(text).unwrap();
            assert_eq!(got, want, "{text}");
        }
    }

    #[cfg(feature = "toml")]
    #[test]
    fn unknown_keys_and_bad_values_are_reported() {
        let (option, value, _) = config_option(
            PushConsumerConfig::from_toml_str("consumer_group = \"g\"\npull_batchsize = 3\n")
                .unwrap_err(),
        );
        assert_eq!(option, "toml");
        assert!(value.contains("pull_batchsize"), "{value}");
        let (option, value, _) = config_option(
            PushConsumerConfig::from_json_str(
                r#"{"consumer_group":"g","consume_timeout":"later"}"#,
            )
            .unwrap_err(),
        );
        assert_eq!(option, "json");
        assert!(value.contains("later"), "{value}");
        // Parsing succeeds, validation names the option.
        let (option, value, _) = config_option(
            PushConsumerConfig::from_toml_str("consumer_group = \"g\"\npull_batch_size = 0\n")
                .unwrap_err(),
        );
        assert_eq!((option, value.as_str()), ("pull_batch_size", "0"));
        let (option, _, _) =
            config_option(PushConsumerConfig::from_toml_str("pull_batch_size = 3\n").unwrap_err());
        assert_eq!(option, "consumer_group");
        assert!(serde_json::from_str::<AllocateStrategyKind>("\"by_guess\"").is_err());
        assert!(serde_json::from_str::<AllocateStrategyKind>(
            r#"{"kind":"consistent_hash","virtual_node":3}"#
        )
        .is_err());
    }

    #[cfg(feature = "toml")]
    #[test]
    fn key_ordered_is_an_orderly_only_opt_in() {
        let text = "consumer_group = \"g\"\nconsume_mode = \"orderly\"\nkey_ordered = true\n";
        let c = PushConsumerConfig::from_toml_str(text).unwrap();
        assert!(c.is_orderly() && c.is_key_ordered());
        assert!(!valid().is_key_ordered());
        // Off by default, and not written out when off.
        assert!(!valid().to_toml_string().unwrap().contains("key_ordered"));
        let concurrent = PushConsumerConfig {
            key_ordered: true,
            ..valid()
        };
        match concurrent.validate() {
            Err(Error::Config { option, .. }) => assert_eq!(option, "key_ordered"),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[cfg(feature = "toml")]
    #[test]
    fn toml_and_json_round_trip() {
        let c = PushConsumerConfig {
            consume_mode: ConsumeMode::Orderly,
            key_ordered: true,
            consume_timestamp: Some("20240102030405+0800".into()),
            consume_concurrency_max: Some(7),
            shutdown_await: Some(Duration::from_millis(1500)),
            pull_threshold_size_for_topic_mib: Some(300),
            offset_store_dir: Some(PathBuf::from("/var/lib/offsets")),
            allocate_strategy: AllocateStrategyKind::MachineRoomNearby {
                inner: Box::new(AllocateStrategyKind::ByMachineRoom {
                    rooms: ["r1".to_owned(), "r2".to_owned()].into(),
                }),
                separator: "#".into(),
            },
            subscriptions: [("T".to_owned(), "a || b".into())].into(),
            ..valid()
        };
        let text = c.to_toml_string().unwrap();
        assert_eq!(PushConsumerConfig::from_toml_str(&text).unwrap(), c);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(PushConsumerConfig::from_json_str(&json).unwrap(), c);
        let default_text = valid().to_toml_string().unwrap();
        assert!(
            default_text.contains("consume_timeout = \"15m\""),
            "{default_text}"
        );
        assert!(!default_text.contains("shutdown_await"));
    }

    #[test]
    fn consume_timestamp_parsing() {
        // 2024-01-01T00:00:00Z is 1_704_067_200 s after the epoch.
        let base = 1_704_067_200_000;
        assert_eq!(parse_consume_timestamp("20240101000000"), Some(base));
        assert_eq!(parse_consume_timestamp("20240101000000Z"), Some(base));
        assert_eq!(parse_consume_timestamp("20240101083000+08:30"), Some(base));
        assert_eq!(parse_consume_timestamp("20231231190000-0500"), Some(base));
        assert_eq!(parse_consume_timestamp("19700101000000"), Some(0));
        // Leap day exists in 2024, not in 2023.
        assert_eq!(
            parse_consume_timestamp("20240229000000"),
            Some(base + 59 * 86_400_000)
        );
        for bad in [
            "20230229000000",
            "20240431000000",
            "20240101240000",
            "20240101006000",
            "2024010100000",
            "2024-01-01 00:00",
            "20240101000000+8",
            "20240101000000+2400",
            "2024010100000a",
        ] {
            assert_eq!(parse_consume_timestamp(bad), None, "{bad}");
        }
        let c = PushConsumerConfig {
            consume_timestamp: None,
            ..valid()
        };
        assert_eq!(c.consume_timestamp_ms(base).unwrap(), base - 1_800_000);
    }

    #[test]
    #[cfg(feature = "toml")]
    fn the_namespace_is_read_from_toml_validated_and_applied_on_the_wire() {
        let text = "consumer_group = \"billing\"\nnamespace = \"tenant_a\"\n\n[subscriptions]\nOrders = \"*\"\n";
        let c = PushConsumerConfig::from_toml_str(text).unwrap();
        assert_eq!(c.namespace.as_deref(), Some("tenant_a"));
        assert_eq!(
            PushConsumerConfig::from_toml_str(&c.to_toml_string().unwrap()).unwrap(),
            c
        );
        let (option, value, _) = config_option(
            PushConsumerConfig::from_toml_str("consumer_group = \"g\"\nnamespace = \"a%b\"\n")
                .unwrap_err(),
        );
        assert_eq!(option, "namespace");
        assert!(value.contains("a%b"));
        // No namespace key: none, and nothing written for it.
        assert!(!valid().to_toml_string().unwrap().contains("namespace"));

        let ns = Namespace::new("tenant_a").unwrap();
        let c = PushConsumerConfig {
            allocate_strategy: AllocateStrategyKind::MachineRoomNearby {
                inner: Box::new(AllocateStrategyKind::ByConfig {
                    queues: vec![MessageQueue::new("Orders", "b", 1)],
                }),
                separator: "@".into(),
            },
            ..c
        };
        let wire = c.on_the_wire(&ns);
        assert_eq!(wire.consumer_group, "tenant_a%billing");
        assert_eq!(
            wire.subscriptions.keys().collect::<Vec<_>>(),
            vec!["tenant_a%Orders"]
        );
        let AllocateStrategyKind::MachineRoomNearby { inner, .. } = &wire.allocate_strategy else {
            panic!("strategy kept");
        };
        assert_eq!(
            **inner,
            AllocateStrategyKind::ByConfig {
                queues: vec![MessageQueue::new("tenant_a%Orders", "b", 1)]
            }
        );
        assert_eq!(c.on_the_wire(&Namespace::none()), c);
        // The wrapped group must still fit the group limit.
        let long = PushConsumerConfig::new("g".repeat(120)).on_the_wire(&ns);
        assert_eq!(
            config_option(long.validate().unwrap_err()).0,
            "consumer_group"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn timestamp_format_and_parse_are_inverse(secs in -2_000_000_000i64..8_000_000_000) {
            let ms = secs * 1000;
            // Years 1906..=2223: always four digits.
            let text = format_consume_timestamp_utc(ms);
            prop_assert_eq!(text.len(), 14);
            prop_assert_eq!(parse_consume_timestamp(&text), Some(ms));
        }

        #[test]
        fn validation_accepts_exactly_the_java_ranges(
            min in 0u32..1100, max in 0u32..1100, span in 0u32..70000, batch in 0u32..1100,
        ) {
            let c = PushConsumerConfig {
                consume_thread_min: min,
                consume_thread_max: max,
                consume_concurrently_max_span: span,
                pull_batch_size: batch,
                ..valid()
            };
            let expected_ok = (1..=1000).contains(&min)
                && (1..=1000).contains(&max)
                && min <= max
                && (1..=65535).contains(&span)
                && (1..=1024).contains(&batch);
            prop_assert_eq!(c.validate().is_ok(), expected_ok);
        }
    }

    #[test]
    #[cfg(feature = "toml")]
    fn subscriptions_take_sql92_as_a_table_and_report_its_syntax_errors() {
        let c = PushConsumerConfig::from_toml_str(
            r#"
            consumer_group = "g1"
            [subscriptions]
            Orders = { sql = "region = 'eu' AND amount > 100" }
            Refunds = "TagA || TagB"
            "#,
        )
        .unwrap();
        assert_eq!(
            c.subscriptions.get("Orders"),
            Some(&Selector::sql("region = 'eu' AND amount > 100"))
        );
        assert_eq!(
            c.subscriptions
                .get("Refunds")
                .map(Selector::expression_type),
            Some("TAG")
        );
        let broken = PushConsumerConfig::from_toml_str(
            "consumer_group = \"g1\"\n[subscriptions]\nOrders = { sql = \"amount >\" }\n",
        );
        match broken {
            Err(Error::InvalidSelector { topic, error, .. }) => {
                assert_eq!((topic.as_str(), error.position()), ("Orders", 9));
            }
            other => panic!("{other:?}"),
        }
        let json = PushConsumerConfig::from_json_str(
            r#"{"consumer_group": "g1", "subscriptions": {"Orders": {"sql": "a = 1"}, "T": "*"}}"#,
        )
        .unwrap();
        assert!(json.subscriptions["Orders"].is_sql());
        assert!(PushConsumerConfig::from_json_str(
            r#"{"consumer_group": "g1", "subscriptions": {"Orders": {"sequel": "a = 1"}}}"#,
        )
        .is_err());
    }
}
