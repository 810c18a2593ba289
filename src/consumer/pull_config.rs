//! Configuration of the pull consumer kinds: every option of Java's `DefaultMQPullConsumer`
//! (used by the pull consumer and the schedule service) and `DefaultLitePullConsumer`, with
//! their Java defaults and the ranges Java enforces, checked at start.

use std::path::PathBuf;
use std::time::Duration;

use crate::consumer::config::{
    strategy_on_the_wire, AllocateStrategyKind, ConsumeFromWhere, MessageModel,
};
use crate::error::{Error, Result};
use crate::namespace::Namespace;

/// Options of [`PullConsumer`](crate::pull::PullConsumer) and
/// [`PullScheduleService`](crate::pull::PullScheduleService) (Java `DefaultMQPullConsumer`).
///
/// ```
/// use std::time::Duration;
/// use rocketmq_actor::consumer::PullConsumerConfig;
/// let config = PullConsumerConfig::new("my-group");
/// assert_eq!(config.broker_suspend_max_time, Duration::from_secs(20));
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PullConsumerConfig {
    /// The consumer group (required).
    pub consumer_group: String,
    /// Clustering (queues divided among the group, offsets on the brokers) or broadcasting
    /// (every member gets every queue, offsets in a local file).
    pub message_model: MessageModel,
    /// How queues are divided among the group's members.
    pub allocate_strategy: AllocateStrategyKind,
    /// How long a broker may hold `pull_block_if_not_found` (Java 20 s).
    pub broker_suspend_max_time: Duration,
    /// Client timeout of a long-polling pull; must exceed the suspend time (Java 30 s).
    pub consumer_timeout_when_suspend: Duration,
    /// Client timeout of a plain pull (Java 10 s).
    pub consumer_pull_timeout: Duration,
    /// How often offsets are persisted (Java 5 s).
    pub persist_consumer_offset_interval: Duration,
    /// How often queues are re-divided (Java 20 s).
    pub rebalance_interval: Duration,
    /// How often the brokers hear from this member (Java 30 s).
    pub heartbeat_broker_interval: Duration,
    /// Where broadcasting offsets are kept (default `~/.rocketmq_offsets`).
    pub offset_store_dir: Option<PathBuf>,
    /// `maxReconsumeTimes` sent with a send-back (Java 16).
    pub max_reconsume_times: i32,
    /// The namespace (Java `ClientConfig.namespace`): group and topics are prefixed with
    /// `namespace%` on the wire and every queue and message the application gets has it
    /// stripped (see [`crate::namespace`]). `None` or blank: the one of an `MQ_INST_…`
    /// name-server address, else none.
    pub namespace: Option<String>,
}

impl PullConsumerConfig {
    /// The Java defaults for `group`.
    pub fn new(group: impl Into<String>) -> Self {
        PullConsumerConfig {
            consumer_group: group.into(),
            message_model: MessageModel::Clustering,
            allocate_strategy: AllocateStrategyKind::Averagely,
            broker_suspend_max_time: Duration::from_secs(20),
            consumer_timeout_when_suspend: Duration::from_secs(30),
            consumer_pull_timeout: Duration::from_secs(10),
            persist_consumer_offset_interval: Duration::from_secs(5),
            rebalance_interval: Duration::from_secs(20),
            heartbeat_broker_interval: Duration::from_secs(30),
            offset_store_dir: None,
            max_reconsume_times: 16,
            namespace: None,
        }
    }

    /// Checks every option; the first violation names the option, the value and the range.
    pub fn validate(&self) -> Result<()> {
        validate_group(&self.consumer_group)?;
        if self.consumer_timeout_when_suspend <= self.broker_suspend_max_time {
            return Err(config_error(
                "consumer_timeout_when_suspend",
                format!("{:?}", self.consumer_timeout_when_suspend),
                format!(
                    "more than broker_suspend_max_time ({:?})",
                    self.broker_suspend_max_time
                ),
            ));
        }
        at_least(
            "broker_suspend_max_time",
            self.broker_suspend_max_time,
            ms(1),
        )?;
        at_least("consumer_pull_timeout", self.consumer_pull_timeout, ms(1))?;
        at_least(
            "persist_consumer_offset_interval",
            self.persist_consumer_offset_interval,
            ms(100),
        )?;
        at_least("rebalance_interval", self.rebalance_interval, ms(100))?;
        at_least(
            "heartbeat_broker_interval",
            self.heartbeat_broker_interval,
            ms(100),
        )?;
        if !(-1..=16).contains(&self.max_reconsume_times) {
            return Err(config_error(
                "max_reconsume_times",
                self.max_reconsume_times,
                "-1..=16",
            ));
        }
        if let Some(namespace) = &self.namespace {
            crate::namespace::validate(namespace)?;
        }
        Ok(())
    }

    /// The configuration as the consumer uses it on the wire under `namespace`: the group and
    /// the queues of a `by_config` strategy wrapped. Unchanged without a namespace.
    pub(crate) fn on_the_wire(&self, namespace: &Namespace) -> PullConsumerConfig {
        let mut wire = self.clone();
        wire.consumer_group = namespace.wrap(&self.consumer_group).into_owned();
        wire.allocate_strategy = strategy_on_the_wire(&self.allocate_strategy, namespace);
        wire
    }
}

/// Options of [`LitePullConsumer`](crate::pull::LitePullConsumer) (Java
/// `DefaultLitePullConsumer`), with Java's defaults.
///
/// ```
/// use std::time::Duration;
/// use rocketmq_actor::consumer::LitePullConsumerConfig;
/// let mut config = LitePullConsumerConfig::new("my-group");
/// assert_eq!(config.pull_batch_size, 10);
/// config.auto_commit_interval = Duration::from_millis(500);
/// assert!(config.validate().is_err(), "auto-commit runs at most once a second");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LitePullConsumerConfig {
    /// Group, message model, allocation, timeouts and intervals shared with the pull consumer.
    pub base: PullConsumerConfig,
    /// Messages per pull and at most per `poll` (Java 10, 1..=1024).
    pub pull_batch_size: u32,
    /// Messages cached across all queues before pulls pause (Java 10,000).
    pub pull_threshold_for_all: u32,
    /// Messages cached per queue before its pulls pause (Java 1,000, 1..=65,535).
    pub pull_threshold_for_queue: u32,
    /// Body MiB cached per queue before its pulls pause (Java 100, 1..=1,024).
    pub pull_threshold_size_for_queue: u32,
    /// Offset span cached per queue before its pulls pause (Java 2,000, 1..=65,535).
    pub consume_max_span: u32,
    /// How long `poll` waits for messages by default (Java 5 s).
    pub poll_timeout: Duration,
    /// Commit the offsets of what earlier polls returned, at most every
    /// `auto_commit_interval`, when the next poll is made (and at shutdown).
    pub auto_commit: bool,
    /// Java 5 s, at least 1 s.
    pub auto_commit_interval: Duration,
    /// How often subscribed topics' queue sets are checked for the change listener (Java 30 s).
    pub topic_metadata_check_interval: Duration,
    /// Back-off after a failed pull (Java 1 s).
    pub pull_delay_on_exception: Duration,
    /// Where a queue without a committed offset starts.
    pub consume_from_where: ConsumeFromWhere,
    /// With [`ConsumeFromWhere::Timestamp`]: epoch milliseconds (default: 30 minutes ago).
    pub consume_timestamp_ms: Option<i64>,
}

impl LitePullConsumerConfig {
    /// The Java defaults for `group`.
    pub fn new(group: impl Into<String>) -> Self {
        LitePullConsumerConfig {
            base: PullConsumerConfig::new(group),
            pull_batch_size: 10,
            pull_threshold_for_all: 10_000,
            pull_threshold_for_queue: 1_000,
            pull_threshold_size_for_queue: 100,
            consume_max_span: 2_000,
            poll_timeout: Duration::from_secs(5),
            auto_commit: true,
            auto_commit_interval: Duration::from_secs(5),
            topic_metadata_check_interval: Duration::from_secs(30),
            pull_delay_on_exception: Duration::from_secs(1),
            consume_from_where: ConsumeFromWhere::LastOffset,
            consume_timestamp_ms: None,
        }
    }

    /// Checks every option; the first violation names the option, the value and the range.
    pub fn validate(&self) -> Result<()> {
        self.base.validate()?;
        in_range("pull_batch_size", self.pull_batch_size, 1, 1024)?;
        in_range(
            "pull_threshold_for_all",
            self.pull_threshold_for_all,
            1,
            u32::MAX,
        )?;
        in_range(
            "pull_threshold_for_queue",
            self.pull_threshold_for_queue,
            1,
            65_535,
        )?;
        in_range(
            "pull_threshold_size_for_queue",
            self.pull_threshold_size_for_queue,
            1,
            1024,
        )?;
        in_range("consume_max_span", self.consume_max_span, 1, 65_535)?;
        at_least("poll_timeout", self.poll_timeout, ms(1))?;
        at_least("auto_commit_interval", self.auto_commit_interval, ms(1000))?;
        at_least(
            "topic_metadata_check_interval",
            self.topic_metadata_check_interval,
            ms(100),
        )?;
        Ok(())
    }
}

/// Whether a cached queue may be pulled again: under the count, size and span thresholds.
pub(crate) fn may_pull_lite(
    config: &LitePullConsumerConfig,
    queue_count: u64,
    queue_bytes: u64,
    queue_span: u64,
    all_count: u64,
) -> bool {
    queue_count < u64::from(config.pull_threshold_for_queue)
        && queue_bytes < u64::from(config.pull_threshold_size_for_queue) * 1024 * 1024
        && queue_span < u64::from(config.consume_max_span)
        && all_count < u64::from(config.pull_threshold_for_all)
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn validate_group(group: &str) -> Result<()> {
    if group.is_empty() || group.len() > 255 {
        return Err(config_error("consumer_group", group, "1..=255 characters"));
    }
    if !group
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '%' || c == '|')
    {
        return Err(config_error(
            "consumer_group",
            group,
            "letters, digits, '-', '_', '%' and '|'",
        ));
    }
    Ok(())
}

fn at_least(option: &'static str, value: Duration, min: Duration) -> Result<()> {
    if value < min {
        return Err(config_error(
            option,
            format!("{value:?}"),
            format!("at least {min:?}"),
        ));
    }
    Ok(())
}

fn in_range(option: &'static str, value: u32, min: u32, max: u32) -> Result<()> {
    if !(min..=max).contains(&value) {
        return Err(config_error(option, value, format!("{min}..={max}")));
    }
    Ok(())
}

fn config_error(option: &'static str, value: impl ToString, allowed: impl Into<String>) -> Error {
    Error::Config {
        option,
        value: value.to_string(),
        allowed: allowed.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option_of(error: Error) -> &'static str {
        match error {
            Error::Config { option, .. } => option,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn lite_flow_control_stops_at_each_threshold() {
        let config = LitePullConsumerConfig::new("g");
        assert!(may_pull_lite(&config, 999, 1 << 20, 10, 5_000));
        assert!(
            !may_pull_lite(&config, 1_000, 0, 0, 0),
            "queue count threshold"
        );
        assert!(
            !may_pull_lite(&config, 1, 100 << 20, 0, 0),
            "queue size threshold"
        );
        assert!(!may_pull_lite(&config, 1, 0, 2_000, 0), "span threshold");
        assert!(
            !may_pull_lite(&config, 1, 0, 0, 10_000),
            "threshold for all queues"
        );
    }

    #[test]
    fn java_defaults_validate_and_bad_values_name_their_option() {
        assert!(LitePullConsumerConfig::new("g").validate().is_ok());
        assert_eq!(
            option_of(PullConsumerConfig::new("").validate().unwrap_err()),
            "consumer_group"
        );
        let mut pull = PullConsumerConfig::new("g");
        pull.consumer_timeout_when_suspend = Duration::from_secs(20);
        assert_eq!(
            option_of(pull.validate().unwrap_err()),
            "consumer_timeout_when_suspend"
        );
        let mut lite = LitePullConsumerConfig::new("g");
        lite.pull_batch_size = 0;
        assert_eq!(option_of(lite.validate().unwrap_err()), "pull_batch_size");
        lite.pull_batch_size = 10;
        lite.consume_max_span = 70_000;
        assert_eq!(option_of(lite.validate().unwrap_err()), "consume_max_span");
    }
}
