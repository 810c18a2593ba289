//! The pull loop's decisions as pure functions (Java `DefaultMQPushConsumerImpl.pullMessage`
//! and its `PullCallback`): whether a queue may be pulled now, what to put in the request, and
//! what a pull result means for the next offset, the cache and the offset store.
//!
//! ```ignore
//! use std::time::Duration;
//! use rocketmq_actor::consumer::flow::{decide_pull, DelayReason, PullDecision, PullGate, QueueThresholds};
//! use rocketmq_actor::consumer::process_queue::CacheStats;
//! use rocketmq_actor::consumer::PushConsumerConfig;
//!
//! let cfg = PushConsumerConfig::new("g");
//! let limits = QueueThresholds::for_owned_queues(&cfg, 4);
//! let gate = PullGate {
//!     cache: CacheStats { count: 1001, body_bytes: 0, span: 0 },
//!     ..PullGate::ready()
//! };
//! assert_eq!(
//!     decide_pull(&cfg, &limits, &gate),
//!     PullDecision::Delay(Duration::from_millis(50), DelayReason::CachedCount { cached: 1001, limit: 1000 }),
//! );
//! ```

use super::config::PushConsumerConfig;
use super::process_queue::CacheStats;
use crate::protocol::codes::{pull_sys_flag, response_code};
use std::time::Duration;

/// Re-pull delay when the local cache is over a threshold (Java
/// `PULL_TIME_DELAY_MILLS_WHEN_CACHE_FLOW_CONTROL`).
pub const CACHE_FLOW_CONTROL_DELAY: Duration = Duration::from_millis(50);
/// Re-pull delay after the broker answered `FLOW_CONTROL` (215).
pub const BROKER_FLOW_CONTROL_DELAY: Duration = Duration::from_millis(20);
/// Delay before pulling again after the broker answered that it does not know the group's
/// subscription (SUBSCRIPTION_NOT_EXIST / NOT_LATEST, e.g. just after it restarted): the queue
/// asks for a heartbeat at once, which goes ahead of this pull on the same connection.
pub const NOT_REGISTERED_DELAY: Duration = Duration::from_millis(500);
/// How long a queue (or a group member) waits after a broker refused it for authentication
/// or permission: retrying sooner cannot help, the account or its grants must change first.
pub const ACCESS_DENIED_DELAY: Duration = Duration::from_secs(30);
/// Re-pull delay while the consumer is paused (Java `PULL_TIME_DELAY_MILLS_WHEN_SUSPEND`).
pub const PAUSED_DELAY: Duration = Duration::from_millis(1000);
/// How long the broker may hold a pull (`suspendTimeoutMillis`, Java
/// `BROKER_SUSPEND_MAX_TIME_MILLIS`).
pub const BROKER_SUSPEND_MAX_TIME: Duration = Duration::from_secs(15);
/// Client-side timeout of a long-polling pull; must exceed [`BROKER_SUSPEND_MAX_TIME`] (Java
/// `CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND`).
pub const PULL_TIMEOUT_WHEN_SUSPENDED: Duration = Duration::from_secs(30);

const MIB: u64 = 1024 * 1024;

/// The effective per-queue cache limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueThresholds {
    /// Most messages a queue may cache before pulls pause.
    pub max_cached_count: u64,
    /// Most body MiB a queue may cache before pulls pause.
    pub max_cached_size_mib: u64,
}

impl QueueThresholds {
    /// The per-queue limits after a rebalance left this consumer with `owned_queues` queues
    /// (all topics, as Java counts them): a topic-level limit, when set, is spread as
    /// `max(1, topic limit ÷ owned queues)`; otherwise, or with no queue, the per-queue option
    /// applies.
    ///
    /// ```ignore
    /// use rocketmq_actor::consumer::{flow::QueueThresholds, PushConsumerConfig};
    /// let cfg = PushConsumerConfig { pull_threshold_for_topic: Some(1000), ..PushConsumerConfig::new("g") };
    /// assert_eq!(QueueThresholds::for_owned_queues(&cfg, 3).max_cached_count, 333);
    /// assert_eq!(QueueThresholds::for_owned_queues(&cfg, 5000).max_cached_count, 1);
    /// ```
    pub fn for_owned_queues(cfg: &PushConsumerConfig, owned_queues: usize) -> Self {
        let spread = |topic_limit: Option<u32>, queue_limit: u32| -> u64 {
            match topic_limit {
                Some(total) if owned_queues > 0 => (u64::from(total) / owned_queues as u64).max(1),
                _ => u64::from(queue_limit),
            }
        };
        QueueThresholds {
            max_cached_count: spread(cfg.pull_threshold_for_topic, cfg.pull_threshold_for_queue),
            max_cached_size_mib: spread(
                cfg.pull_threshold_size_for_topic_mib,
                cfg.pull_threshold_size_for_queue_mib,
            ),
        }
    }
}

/// The state of a queue and its consumer when a pull is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullGate {
    /// The process queue was dropped.
    pub dropped: bool,
    /// The consumer is running (not starting, not shutting down).
    pub running: bool,
    /// The consumer was paused (suspended) by the user or an offset reset.
    pub paused: bool,
    /// The queue's cache numbers.
    pub cache: CacheStats,
    /// Orderly: the queue's broker lock is held (set it for broadcasting, which needs no lock).
    pub locked: bool,
    /// Orderly: the start offset was already re-read from the broker since the lock was won.
    pub offset_fixed_since_lock: bool,
    /// A subscription exists for the queue's topic.
    pub has_subscription: bool,
}

impl PullGate {
    /// A running, unpaused, empty, locked, subscribed queue: the base for struct updates.
    pub fn ready() -> Self {
        PullGate {
            dropped: false,
            running: true,
            paused: false,
            cache: CacheStats::default(),
            locked: true,
            offset_fixed_since_lock: true,
            has_subscription: true,
        }
    }
}

/// Why a pull was postponed (for logs and flow-control counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayReason {
    /// The consumer is not running.
    NotRunning,
    /// The broker refused the pull for authentication or permission.
    AccessDenied,
    /// The broker does not know this consumer's subscription yet (a heartbeat was asked for).
    NotRegistered,
    /// The consumer is paused.
    Paused,
    /// Too many cached messages.
    CachedCount {
        /// Messages cached.
        cached: u64,
        /// The limit.
        limit: u64,
    },
    /// Too many cached body MiB.
    CachedSize {
        /// Whole MiB cached.
        cached_mib: u64,
        /// The limit.
        limit_mib: u64,
    },
    /// Concurrent mode: the cached offsets span too far (a slow message pins the offset).
    Span {
        /// Highest minus lowest cached offset.
        span: i64,
        /// `consume_concurrently_max_span`.
        limit: u32,
    },
    /// Orderly: the broker lock is not held.
    NotLocked,
    /// No subscription for the topic.
    NoSubscription,
    /// The broker answered `FLOW_CONTROL`.
    BrokerFlowControl,
    /// The pull failed (network, timeout, broker error).
    PullFailed,
}

/// What to do with a due pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullDecision {
    /// The queue was dropped: end its pull loop.
    Stop,
    /// Send the pull now (record the pull time first).
    PullNow,
    /// Orderly, first pull since the lock was won: re-read the start offset from the broker
    /// (another consumer may have moved it), adopt it, mark the offset fixed, and decide again.
    /// On failure, retry after `pull_delay_on_error`.
    RecomputeOffset,
    /// Try again after the delay.
    Delay(Duration, DelayReason),
}

/// The flow-control checks of Java's `pullMessage`, in Java's order: dropped → stop; not
/// running → error delay; paused → 1 s; cached count over the limit → 50 ms; cached MiB
/// (rounded down) over the limit → 50 ms; concurrent and span over
/// `consume_concurrently_max_span` → 50 ms; orderly and not locked → error delay; orderly and
/// first pull since locked → recompute offset; no subscription → error delay.
pub fn decide_pull(
    cfg: &PushConsumerConfig,
    thresholds: &QueueThresholds,
    gate: &PullGate,
) -> PullDecision {
    if gate.dropped {
        return PullDecision::Stop;
    }
    if !gate.running {
        return PullDecision::Delay(cfg.pull_delay_on_error, DelayReason::NotRunning);
    }
    if gate.paused {
        return PullDecision::Delay(PAUSED_DELAY, DelayReason::Paused);
    }
    if gate.cache.count > thresholds.max_cached_count {
        return PullDecision::Delay(
            CACHE_FLOW_CONTROL_DELAY,
            DelayReason::CachedCount {
                cached: gate.cache.count,
                limit: thresholds.max_cached_count,
            },
        );
    }
    let cached_mib = gate.cache.body_bytes / MIB;
    if cached_mib > thresholds.max_cached_size_mib {
        return PullDecision::Delay(
            CACHE_FLOW_CONTROL_DELAY,
            DelayReason::CachedSize {
                cached_mib,
                limit_mib: thresholds.max_cached_size_mib,
            },
        );
    }
    if cfg.is_orderly() {
        if !gate.locked {
            return PullDecision::Delay(cfg.pull_delay_on_error, DelayReason::NotLocked);
        }
        if !gate.offset_fixed_since_lock {
            return PullDecision::RecomputeOffset;
        }
    } else if gate.cache.span > i64::from(cfg.consume_concurrently_max_span) {
        return PullDecision::Delay(
            CACHE_FLOW_CONTROL_DELAY,
            DelayReason::Span {
                span: gate.cache.span,
                limit: cfg.consume_concurrently_max_span,
            },
        );
    }
    if !gate.has_subscription {
        return PullDecision::Delay(cfg.pull_delay_on_error, DelayReason::NoSubscription);
    }
    PullDecision::PullNow
}

/// The variable parts of a `PULL_MESSAGE` request a push consumer sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullRequestFlags {
    /// `sysFlag`: `SUSPEND` always, `COMMIT_OFFSET` when an offset is piggybacked,
    /// `SUBSCRIPTION` with `post_subscription_when_pull`.
    pub sys_flag: i32,
    /// `commitOffset`: the in-memory consume offset, or 0 when none is committed.
    pub commit_offset: i64,
    /// Whether to send `subscription` (the expression) in the request.
    pub send_subscription: bool,
    /// `suspendTimeoutMillis`.
    pub suspend_timeout: Duration,
    /// The client-side timeout of the request.
    pub request_timeout: Duration,
}

/// The flags of a pull: clustering consumers piggyback their in-memory offset for the queue
/// (`COMMIT_OFFSET`) when it is above 0, as Java does; a missing or negative offset is never
/// sent (Java issue #2708: committing -1/0 during network flapping re-consumes everything).
pub fn pull_request_flags(
    cfg: &PushConsumerConfig,
    memory_offset: Option<i64>,
) -> PullRequestFlags {
    let piggyback = match memory_offset {
        Some(offset) if cfg.is_clustering() && offset > 0 => Some(offset),
        _ => None,
    };
    let mut sys_flag = pull_sys_flag::SUSPEND;
    if piggyback.is_some() {
        sys_flag |= pull_sys_flag::COMMIT_OFFSET;
    }
    if cfg.post_subscription_when_pull {
        sys_flag |= pull_sys_flag::SUBSCRIPTION;
    }
    PullRequestFlags {
        sys_flag,
        commit_offset: piggyback.unwrap_or(0),
        send_subscription: cfg.post_subscription_when_pull,
        suspend_timeout: BROKER_SUSPEND_MAX_TIME,
        request_timeout: PULL_TIMEOUT_WHEN_SUSPENDED,
    }
}

/// A pull response's status (Java `PullStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PullStatus {
    /// `SUCCESS`: messages in the body.
    Found,
    /// `PULL_NOT_FOUND`: nothing new (after long polling).
    NoNewMsg,
    /// `PULL_RETRY_IMMEDIATELY`: messages existed but none matched the subscription.
    NoMatchedMsg,
    /// `PULL_OFFSET_MOVED`: the offset was out of range or reset on the broker.
    OffsetIllegal,
}

impl PullStatus {
    /// The status of a pull response code; `None` means an error (the push consumer backs off
    /// as Java does).
    pub fn from_response_code(code: i32) -> Option<Self> {
        match code {
            response_code::SUCCESS => Some(PullStatus::Found),
            response_code::PULL_NOT_FOUND => Some(PullStatus::NoNewMsg),
            response_code::PULL_RETRY_IMMEDIATELY => Some(PullStatus::NoMatchedMsg),
            response_code::PULL_OFFSET_MOVED => Some(PullStatus::OffsetIllegal),
            _ => None,
        }
    }
}

/// How long to wait before re-pulling after a failed pull: 20 ms after a broker
/// `FLOW_CONTROL`, `pull_delay_on_error` after anything else (`None` = no response at all).
pub fn pull_error_delay(
    cfg: &PushConsumerConfig,
    response_code: Option<i32>,
) -> (Duration, DelayReason) {
    match response_code {
        Some(response_code::FLOW_CONTROL) => {
            (BROKER_FLOW_CONTROL_DELAY, DelayReason::BrokerFlowControl)
        }
        Some(response_code::SUBSCRIPTION_NOT_EXIST | response_code::SUBSCRIPTION_NOT_LATEST) => {
            (NOT_REGISTERED_DELAY, DelayReason::NotRegistered)
        }
        _ => (cfg.pull_delay_on_error, DelayReason::PullFailed),
    }
}

/// A successful pull response, after the client decoded and re-filtered the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullResult {
    /// The response status.
    pub status: PullStatus,
    /// The offset the request asked for.
    pub requested_offset: i64,
    /// `nextBeginOffset` of the response.
    pub next_begin_offset: i64,
    /// Messages left after client-side filtering.
    pub delivered: usize,
    /// Queue offset of the first of them.
    pub first_delivered_offset: Option<i64>,
    /// Whether the queue's cache holds no message (before these are added).
    pub cache_empty: bool,
}

/// What to do next with the queue's pull loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextPull {
    /// Pull again right away.
    Immediately,
    /// Pull again after the delay (`pull_interval`).
    After(Duration),
    /// End the loop (the queue is being dropped).
    Stop,
}

/// A change the pull result makes to the offset store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetUpdate {
    /// Raise the stored offset to this value if it is higher (nothing cached, nothing matched:
    /// the consumer has effectively consumed up to here).
    IncreaseOnly(i64),
    /// Set the offset to this value whatever it was, ignore further updates for the queue until
    /// it is removed, and persist it now (`OFFSET_ILLEGAL`).
    FreezeAndPersist(i64),
}

/// The consequences of a pull result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullOutcome {
    /// The offset of the next pull.
    pub next_offset: i64,
    /// Put the delivered messages into the process queue and submit them for consumption.
    pub deliver: bool,
    /// When to pull again.
    pub next_pull: NextPull,
    /// What to change in the offset store.
    pub offset_update: Option<OffsetUpdate>,
    /// Mark the process queue dropped and remove it (and its offset, after persisting).
    pub drop_queue: bool,
    /// Trigger a rebalance now, which re-adds the queue from its corrected offset.
    pub rebalance: bool,
    /// The broker answered with offsets below the request (Java logs "\[BUG\] pull message
    /// result maybe data wrong"); worth a warning, nothing else changes.
    pub suspicious: bool,
}

/// Java's pull callback for a response that is not an error:
///
/// - `Found` with messages: adopt `nextBeginOffset`, deliver, pull again after
///   `pull_interval` (at once when zero).
/// - `Found` with everything filtered out, `NoNewMsg`, `NoMatchedMsg`: adopt
///   `nextBeginOffset`, pull again at once; if the cache is empty, raise the stored offset to
///   it (increase-only). Java skips that raise for an all-filtered `Found`; doing it too keeps
///   a consumer whose subscription filters everything client-side from re-reading the queue
///   after a restart.
/// - `OffsetIllegal`: adopt `nextBeginOffset`, drop the queue, freeze and persist the offset,
///   rebalance (which re-adds the queue from there).
pub fn on_pull_result(cfg: &PushConsumerConfig, result: &PullResult) -> PullOutcome {
    let suspicious = result.next_begin_offset < result.requested_offset
        || result
            .first_delivered_offset
            .is_some_and(|first| first < result.requested_offset);
    let nothing_to_consume = PullOutcome {
        next_offset: result.next_begin_offset,
        deliver: false,
        next_pull: NextPull::Immediately,
        offset_update: result
            .cache_empty
            .then_some(OffsetUpdate::IncreaseOnly(result.next_begin_offset)),
        drop_queue: false,
        rebalance: false,
        suspicious,
    };
    match result.status {
        PullStatus::Found if result.delivered > 0 => PullOutcome {
            next_offset: result.next_begin_offset,
            deliver: true,
            next_pull: if cfg.pull_interval.is_zero() {
                NextPull::Immediately
            } else {
                NextPull::After(cfg.pull_interval)
            },
            offset_update: None,
            drop_queue: false,
            rebalance: false,
            suspicious,
        },
        PullStatus::Found | PullStatus::NoNewMsg | PullStatus::NoMatchedMsg => nothing_to_consume,
        PullStatus::OffsetIllegal => PullOutcome {
            next_offset: result.next_begin_offset,
            deliver: false,
            next_pull: NextPull::Stop,
            offset_update: Some(OffsetUpdate::FreezeAndPersist(result.next_begin_offset)),
            drop_queue: true,
            rebalance: true,
            suspicious: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::config::{ConsumeMode, MessageModel};
    use proptest::prelude::*;

    fn cfg() -> PushConsumerConfig {
        PushConsumerConfig::new("g")
    }

    fn orderly() -> PushConsumerConfig {
        PushConsumerConfig {
            consume_mode: ConsumeMode::Orderly,
            ..cfg()
        }
    }

    fn limits(cfg: &PushConsumerConfig) -> QueueThresholds {
        QueueThresholds::for_owned_queues(cfg, 1)
    }

    fn stats(count: u64, body_bytes: u64, span: i64) -> CacheStats {
        CacheStats {
            count,
            body_bytes,
            span,
        }
    }

    #[test]
    fn checks_run_in_java_order_with_java_delays() {
        let c = cfg();
        let l = limits(&c);
        let everything_wrong = PullGate {
            dropped: true,
            running: false,
            paused: true,
            cache: stats(5000, 500 * MIB, 9000),
            locked: false,
            offset_fixed_since_lock: false,
            has_subscription: false,
        };
        assert_eq!(decide_pull(&c, &l, &everything_wrong), PullDecision::Stop);
        let g = PullGate {
            dropped: false,
            ..everything_wrong
        };
        assert_eq!(
            decide_pull(&c, &l, &g),
            PullDecision::Delay(Duration::from_secs(1), DelayReason::NotRunning)
        );
        let g = PullGate { running: true, ..g };
        assert_eq!(
            decide_pull(&c, &l, &g),
            PullDecision::Delay(Duration::from_millis(1000), DelayReason::Paused)
        );
        let g = PullGate { paused: false, ..g };
        assert!(matches!(
            decide_pull(&c, &l, &g),
            PullDecision::Delay(d, DelayReason::CachedCount { cached: 5000, limit: 1000 }) if d == Duration::from_millis(50)
        ));
        let g = PullGate {
            cache: stats(10, 500 * MIB, 9000),
            ..g
        };
        assert!(matches!(
            decide_pull(&c, &l, &g),
            PullDecision::Delay(d, DelayReason::CachedSize { cached_mib: 500, limit_mib: 100 }) if d == Duration::from_millis(50)
        ));
        let g = PullGate {
            cache: stats(10, MIB, 9000),
            ..g
        };
        assert!(matches!(
            decide_pull(&c, &l, &g),
            PullDecision::Delay(d, DelayReason::Span { span: 9000, limit: 2000 }) if d == Duration::from_millis(50)
        ));
        // Concurrent mode ignores locks.
        let g = PullGate {
            cache: stats(10, MIB, 5),
            ..g
        };
        assert_eq!(
            decide_pull(&c, &l, &g),
            PullDecision::Delay(Duration::from_secs(1), DelayReason::NoSubscription)
        );
        let g = PullGate {
            has_subscription: true,
            ..g
        };
        assert_eq!(decide_pull(&c, &l, &g), PullDecision::PullNow);
    }

    #[test]
    fn thresholds_are_exclusive_and_size_is_in_whole_mib() {
        let c = cfg();
        let l = limits(&c);
        // In bytes, not through MIB: the unit itself is under test. 101 MiB less one byte
        // is 100 whole MiB, within the default limit of 100.
        let at_limit = PullGate {
            cache: stats(1000, 105_906_175, 2000),
            ..PullGate::ready()
        };
        assert_eq!(decide_pull(&c, &l, &at_limit), PullDecision::PullNow);
        let over = PullGate {
            cache: stats(1000, 105_906_176, 2000),
            ..PullGate::ready()
        };
        assert!(matches!(
            decide_pull(&c, &l, &over),
            PullDecision::Delay(_, DelayReason::CachedSize { .. })
        ));
    }

    #[test]
    fn orderly_needs_the_lock_then_fixes_the_offset_once() {
        let c = orderly();
        let l = limits(&c);
        // A wide span does not matter in orderly mode.
        let unlocked = PullGate {
            locked: false,
            cache: stats(1, 1, 1_000_000),
            ..PullGate::ready()
        };
        assert_eq!(
            decide_pull(&c, &l, &unlocked),
            PullDecision::Delay(Duration::from_secs(1), DelayReason::NotLocked)
        );
        let first = PullGate {
            locked: true,
            offset_fixed_since_lock: false,
            ..unlocked
        };
        assert_eq!(decide_pull(&c, &l, &first), PullDecision::RecomputeOffset);
        let fixed = PullGate {
            offset_fixed_since_lock: true,
            ..first
        };
        assert_eq!(decide_pull(&c, &l, &fixed), PullDecision::PullNow);
    }

    #[test]
    fn error_delay_follows_the_config() {
        let c = PushConsumerConfig {
            pull_delay_on_error: Duration::from_millis(3000),
            ..cfg()
        };
        let g = PullGate {
            running: false,
            ..PullGate::ready()
        };
        assert_eq!(
            decide_pull(&c, &limits(&c), &g),
            PullDecision::Delay(Duration::from_secs(3), DelayReason::NotRunning)
        );
        assert_eq!(
            pull_error_delay(&c, Some(215)),
            (Duration::from_millis(20), DelayReason::BrokerFlowControl)
        );
        // A broker that forgot the group: pull again soon, after the heartbeat asked for.
        assert_eq!(
            pull_error_delay(&c, Some(25)),
            (Duration::from_millis(500), DelayReason::NotRegistered)
        );
        assert_eq!(
            pull_error_delay(&c, Some(24)),
            (Duration::from_millis(500), DelayReason::NotRegistered)
        );
        assert_eq!(
            pull_error_delay(&c, Some(17)),
            (Duration::from_secs(3), DelayReason::PullFailed)
        );
        assert_eq!(
            pull_error_delay(&c, None),
            (Duration::from_secs(3), DelayReason::PullFailed)
        );
    }

    #[test]
    fn topic_thresholds_are_spread_over_owned_queues() {
        let c = PushConsumerConfig {
            pull_threshold_for_topic: Some(100),
            pull_threshold_size_for_topic_mib: Some(50),
            ..cfg()
        };
        let l = QueueThresholds::for_owned_queues(&c, 8);
        assert_eq!(l.max_cached_count, 12);
        assert_eq!(l.max_cached_size_mib, 6);
        let l = QueueThresholds::for_owned_queues(&c, 200);
        assert_eq!((l.max_cached_count, l.max_cached_size_mib), (1, 1));
        // No queue yet: the per-queue options stay.
        let l = QueueThresholds::for_owned_queues(&c, 0);
        assert_eq!((l.max_cached_count, l.max_cached_size_mib), (1000, 100));
        // Topic limits off: per-queue options whatever the queue count.
        let l = QueueThresholds::for_owned_queues(&cfg(), 8);
        assert_eq!((l.max_cached_count, l.max_cached_size_mib), (1000, 100));
    }

    #[test]
    fn pull_flags_piggyback_only_positive_clustering_offsets() {
        let c = cfg();
        let f = pull_request_flags(&c, Some(42));
        assert_eq!(f.sys_flag, 0x1 | 0x2);
        assert_eq!(f.commit_offset, 42);
        assert!(!f.send_subscription);
        assert_eq!(f.suspend_timeout, Duration::from_secs(15));
        assert_eq!(f.request_timeout, Duration::from_secs(30));
        for offset in [None, Some(0), Some(-1)] {
            let f = pull_request_flags(&c, offset);
            assert_eq!((f.sys_flag, f.commit_offset), (0x2, 0), "{offset:?}");
        }
        let broadcasting = PushConsumerConfig {
            message_model: MessageModel::Broadcasting,
            post_subscription_when_pull: true,
            ..cfg()
        };
        let f = pull_request_flags(&broadcasting, Some(42));
        assert_eq!((f.sys_flag, f.commit_offset), (0x2 | 0x4, 0));
        assert!(f.send_subscription);
    }

    #[test]
    fn response_codes_map_to_statuses() {
        assert_eq!(PullStatus::from_response_code(0), Some(PullStatus::Found));
        assert_eq!(
            PullStatus::from_response_code(19),
            Some(PullStatus::NoNewMsg)
        );
        assert_eq!(
            PullStatus::from_response_code(20),
            Some(PullStatus::NoMatchedMsg)
        );
        assert_eq!(
            PullStatus::from_response_code(21),
            Some(PullStatus::OffsetIllegal)
        );
        for code in [1, 2, 17, 24, 25, 26, 215] {
            assert_eq!(PullStatus::from_response_code(code), None);
        }
    }

    fn result(status: PullStatus) -> PullResult {
        PullResult {
            status,
            requested_offset: 100,
            next_begin_offset: 132,
            delivered: 32,
            first_delivered_offset: Some(100),
            cache_empty: true,
        }
    }

    #[test]
    fn found_delivers_and_pulls_again() {
        let o = on_pull_result(&cfg(), &result(PullStatus::Found));
        assert_eq!(o.next_offset, 132);
        assert!(o.deliver && !o.drop_queue && !o.rebalance && !o.suspicious);
        assert_eq!(o.next_pull, NextPull::Immediately);
        assert_eq!(o.offset_update, None);
        let slow = PushConsumerConfig {
            pull_interval: Duration::from_millis(200),
            ..cfg()
        };
        assert_eq!(
            on_pull_result(&slow, &result(PullStatus::Found)).next_pull,
            NextPull::After(Duration::from_millis(200))
        );
    }

    #[test]
    fn nothing_new_raises_the_offset_only_when_the_cache_is_empty() {
        for status in [
            PullStatus::NoNewMsg,
            PullStatus::NoMatchedMsg,
            PullStatus::Found,
        ] {
            let r = PullResult {
                delivered: 0,
                first_delivered_offset: None,
                ..result(status)
            };
            let o = on_pull_result(&cfg(), &r);
            assert_eq!(o.next_offset, 132);
            assert!(!o.deliver);
            assert_eq!(o.next_pull, NextPull::Immediately);
            assert_eq!(o.offset_update, Some(OffsetUpdate::IncreaseOnly(132)));
            let busy = PullResult {
                cache_empty: false,
                ..r
            };
            assert_eq!(on_pull_result(&cfg(), &busy).offset_update, None);
        }
    }

    #[test]
    fn offset_illegal_drops_freezes_and_rebalances() {
        let r = PullResult {
            next_begin_offset: 7,
            delivered: 0,
            first_delivered_offset: None,
            ..result(PullStatus::OffsetIllegal)
        };
        let o = on_pull_result(&cfg(), &r);
        assert_eq!(o.next_offset, 7);
        assert_eq!(o.offset_update, Some(OffsetUpdate::FreezeAndPersist(7)));
        assert!(o.drop_queue && o.rebalance && !o.deliver);
        assert_eq!(o.next_pull, NextPull::Stop);
    }

    #[test]
    fn offsets_below_the_request_are_flagged() {
        let r = PullResult {
            first_delivered_offset: Some(99),
            ..result(PullStatus::Found)
        };
        assert!(on_pull_result(&cfg(), &r).suspicious);
        let r = PullResult {
            next_begin_offset: 50,
            delivered: 0,
            first_delivered_offset: None,
            ..result(PullStatus::NoNewMsg)
        };
        assert!(on_pull_result(&cfg(), &r).suspicious);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn a_pull_is_sent_only_when_every_limit_holds(
            count in 0u64..3000, mib in 0u64..300, span in 0i64..5000,
            paused: bool, running: bool, dropped: bool, subscribed: bool, queues in 0usize..20,
            topic_limit in proptest::option::of(1u32..20000),
        ) {
            let c = PushConsumerConfig { pull_threshold_for_topic: topic_limit, ..cfg() };
            let l = QueueThresholds::for_owned_queues(&c, queues);
            let per_queue = match topic_limit {
                Some(t) if queues > 0 => (u64::from(t) / queues as u64).max(1),
                _ => 1000,
            };
            prop_assert_eq!(l.max_cached_count, per_queue);
            let g = PullGate {
                dropped, running, paused,
                cache: stats(count, mib * MIB, span),
                locked: false, offset_fixed_since_lock: false,
                has_subscription: subscribed,
            };
            let pull = decide_pull(&c, &l, &g) == PullDecision::PullNow;
            prop_assert_eq!(
                pull,
                !dropped && running && !paused && count <= per_queue && mib <= 100 && span <= 2000 && subscribed
            );
        }

        #[test]
        fn the_next_offset_is_always_next_begin_offset(
            code in prop::sample::select(vec![0, 19, 20, 21]),
            requested in 0i64..1000, next in 0i64..1000, delivered in 0usize..40, empty: bool,
        ) {
            let status = PullStatus::from_response_code(code).unwrap();
            let r = PullResult {
                status, requested_offset: requested, next_begin_offset: next, delivered,
                first_delivered_offset: (delivered > 0).then_some(requested), cache_empty: empty,
            };
            let o = on_pull_result(&cfg(), &r);
            prop_assert_eq!(o.next_offset, next);
            prop_assert_eq!(o.deliver, status == PullStatus::Found && delivered > 0);
            prop_assert_eq!(o.drop_queue, status == PullStatus::OffsetIllegal);
            if let Some(OffsetUpdate::IncreaseOnly(v)) = o.offset_update {
                prop_assert!(empty);
                prop_assert_eq!(v, next);
            }
        }
    }
}
