//! Retry and dead-letter handling: topic names, delay levels, and the message a consumer
//! re-sends itself when the broker cannot take a failed message back.
//!
//! ```ignore
//! use rocketmq_actor::consumer::retry::{dlq_topic, is_retry_topic, retry_topic};
//! assert_eq!(retry_topic("orders"), "%RETRY%orders");
//! assert_eq!(dlq_topic("orders"), "%DLQ%orders");
//! assert!(is_retry_topic("%RETRY%orders"));
//! ```

use crate::message::{property, Message, MessageExt};
use std::ops::Range;
use std::time::Duration;

/// Prefix of a group's retry topic (Java `MixAll.RETRY_GROUP_TOPIC_PREFIX`).
pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";
/// Prefix of a group's dead-letter topic (Java `MixAll.DLQ_GROUP_TOPIC_PREFIX`).
pub const DLQ_TOPIC_PREFIX: &str = "%DLQ%";

/// The broker's default delay levels 1..=18 (`messageDelayLevel`).
pub const DELAY_LEVELS: [Duration; 18] = [
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(2 * 60),
    Duration::from_secs(3 * 60),
    Duration::from_secs(4 * 60),
    Duration::from_secs(5 * 60),
    Duration::from_secs(6 * 60),
    Duration::from_secs(7 * 60),
    Duration::from_secs(8 * 60),
    Duration::from_secs(9 * 60),
    Duration::from_secs(10 * 60),
    Duration::from_secs(20 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(60 * 60),
    Duration::from_secs(2 * 60 * 60),
];

/// The first delay level of a retry: the `n`-th redelivery (`n` = reconsume times) uses level
/// `3 + n` (10 s, 30 s, 1 m, …).
pub const FIRST_RETRY_DELAY_LEVEL: i32 = 3;
/// Delay level used when a consume timeout sends a message back (Java `cleanExpireMsg`).
pub const CONSUME_TIMEOUT_DELAY_LEVEL: i32 = 3;
/// When both the send-back RPC and the fallback re-send fail, the message is consumed again
/// locally after this long.
pub const LOCAL_RECONSUME_DELAY: Duration = Duration::from_secs(5);
/// Timeout of `CONSUMER_SEND_MSG_BACK`.
pub const SEND_BACK_TIMEOUT: Duration = Duration::from_millis(5000);
/// Lower bound of an orderly queue's suspend time.
pub const MIN_SUSPEND_TIME: Duration = Duration::from_millis(10);
/// Upper bound of an orderly queue's suspend time.
pub const MAX_SUSPEND_TIME: Duration = Duration::from_millis(30_000);

/// `%RETRY%<group>`.
pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_TOPIC_PREFIX}{group}")
}

/// `%DLQ%<group>`.
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_TOPIC_PREFIX}{group}")
}

/// Whether `topic` is some group's retry topic.
pub fn is_retry_topic(topic: &str) -> bool {
    topic.starts_with(RETRY_TOPIC_PREFIX)
}

/// Whether `topic` is some group's dead-letter topic.
pub fn is_dlq_topic(topic: &str) -> bool {
    topic.starts_with(DLQ_TOPIC_PREFIX)
}

/// The group a retry topic belongs to.
///
/// ```ignore
/// use rocketmq_actor::consumer::retry::group_of_retry_topic;
/// assert_eq!(group_of_retry_topic("%RETRY%g1"), Some("g1"));
/// assert_eq!(group_of_retry_topic("TopicTest"), None);
/// ```
pub fn group_of_retry_topic(topic: &str) -> Option<&str> {
    topic
        .strip_prefix(RETRY_TOPIC_PREFIX)
        .filter(|group| !group.is_empty())
}

/// The delay of `level` (1-based): levels above the table use its last entry, as the broker
/// does; levels ≤ 0 mean no delay (`None`).
pub fn delay_of_level(level: i32) -> Option<Duration> {
    if level <= 0 {
        return None;
    }
    let index = usize::try_from(level - 1)
        .unwrap_or(usize::MAX)
        .min(DELAY_LEVELS.len() - 1);
    DELAY_LEVELS.get(index).copied()
}

/// The delay level of the next delivery of a message already delivered `reconsume_times`
/// times (`3 + reconsume_times`, as the broker computes for delay level 0 and the client's
/// fallback writes into `DELAY`).
pub fn retry_delay_level(reconsume_times: i32) -> i32 {
    FIRST_RETRY_DELAY_LEVEL.saturating_add(reconsume_times.max(0))
}

/// Clamps an orderly queue's suspend time to [10 ms, 30 s], as Java does.
pub fn clamp_suspend_time(suspend: Duration) -> Duration {
    suspend.clamp(MIN_SUSPEND_TIME, MAX_SUSPEND_TIME)
}

/// Which messages of a concurrently consumed batch of `batch_len` failed and must be retried
/// (Java `processConsumeResult`): all of them when the listener asked to reconsume later
/// (or failed), otherwise those after `ack_index` (the listener's "0..=ack_index succeeded";
/// `None` = all succeeded).
///
/// ```ignore
/// use rocketmq_actor::consumer::retry::failed_range;
/// assert_eq!(failed_range(true, None, 4), 4..4);
/// assert_eq!(failed_range(true, Some(1), 4), 2..4);
/// assert_eq!(failed_range(false, Some(1), 4), 0..4);
/// ```
#[inline]
pub fn failed_range(success: bool, ack_index: Option<usize>, batch_len: usize) -> Range<usize> {
    if !success {
        return 0..batch_len;
    }
    match ack_index {
        Some(index) => index.saturating_add(1).min(batch_len)..batch_len,
        None => batch_len..batch_len,
    }
}

/// What an orderly consumer does with a message of a batch the listener suspended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderlyRetry {
    /// Put it back and consume the queue again after the suspend time (its reconsume count
    /// goes up by one).
    Suspend,
    /// It reached the maximum: send [`build_retry_message`] (whose `RECONSUME_TIME` exceeds the
    /// maximum, so the broker puts it in the DLQ) and commit past it; if that send fails,
    /// suspend instead.
    SendToDeadLetter,
}

/// Java `checkReconsumeTimes`: a message delivered `reconsume_times` times goes to the DLQ once
/// that reaches `max_reconsume_times` (`None` = unlimited, orderly's default).
pub fn orderly_retry(reconsume_times: i32, max_reconsume_times: Option<u32>) -> OrderlyRetry {
    match max_reconsume_times {
        Some(max) if i64::from(reconsume_times) >= i64::from(max) => OrderlyRetry::SendToDeadLetter,
        _ => OrderlyRetry::Suspend,
    }
}

/// The topic a message was originally sent to: a message redelivered through `%RETRY%<group>`
/// carries it in `RETRY_TOPIC`.
pub fn original_topic<'a>(msg: &'a MessageExt, group: &str) -> &'a str {
    let topic = msg.topic();
    match msg.property(property::RETRY_TOPIC) {
        Some(original) if group_of_retry_topic(topic) == Some(group) => original,
        _ => topic,
    }
}

/// Gives a message redelivered through `%RETRY%<group>` its original topic back before it is
/// handed to the listener (Java `resetRetryAndNamespace`). Returns whether it changed.
pub fn restore_original_topic(msg: &mut MessageExt, group: &str) -> bool {
    let original = original_topic(msg, group);
    if original == msg.topic() {
        return false;
    }
    msg.message.topic = original.into();
    true
}

/// The message a consumer sends to `%RETRY%<group>` itself when `CONSUMER_SEND_MSG_BACK`
/// failed (concurrent mode), or when an orderly message reached its maximum reconsume times
/// (the broker then routes it to the DLQ because `RECONSUME_TIME` > max).
///
/// Same body, flag and properties as `msg`, plus: `RETRY_TOPIC` = the original topic,
/// `ORIGIN_MESSAGE_ID` = the first delivery's id (kept if already set, else `msg`'s id),
/// `RECONSUME_TIME` = reconsume times + 1, `MAX_RECONSUME_TIMES` = `max_reconsume_times`,
/// `DELAY` = 3 + reconsume times; the transaction marker `TRAN_MSG` is removed.
///
/// ```ignore
/// use rocketmq_actor::consumer::retry::build_retry_message;
/// use rocketmq_actor::message::{property, Message, MessageExt};
///
/// let mut failed = MessageExt::from(Message::new("Orders", "body").with_property(property::UNIQ_KEY, "ID1"));
/// failed.reconsume_times = 2;
/// let retry = build_retry_message(&failed, "billing", 16);
/// assert_eq!(retry.topic, "%RETRY%billing");
/// assert_eq!(retry.property(property::RETRY_TOPIC), Some("Orders"));
/// assert_eq!(retry.property(property::ORIGIN_MESSAGE_ID), Some("ID1"));
/// assert_eq!(retry.property(property::RECONSUME_TIME), Some("3"));
/// assert_eq!(retry.property(property::DELAY), Some("5"));
/// ```
pub fn build_retry_message(msg: &MessageExt, group: &str, max_reconsume_times: i32) -> Message {
    let mut retry = Message {
        topic: retry_topic(group).into(),
        flag: msg.flag(),
        properties: msg.properties().clone(),
        body: msg.body().clone(),
    };
    let origin_id = match msg.property(property::ORIGIN_MESSAGE_ID) {
        Some(id) if !id.trim().is_empty() => id.to_owned(),
        _ => msg.msg_id().into_owned(),
    };
    let props = &mut retry.properties;
    props.insert(property::ORIGIN_MESSAGE_ID, origin_id);
    props.insert(property::RETRY_TOPIC, original_topic(msg, group));
    props.insert(
        property::RECONSUME_TIME,
        msg.reconsume_times.saturating_add(1).to_string(),
    );
    props.insert(
        property::MAX_RECONSUME_TIMES,
        max_reconsume_times.to_string(),
    );
    props.remove(property::TRAN_MSG);
    props.insert(
        property::DELAY,
        retry_delay_level(msg.reconsume_times).to_string(),
    );
    retry
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn failed(topic: &str, reconsume_times: i32) -> MessageExt {
        let mut m = MessageExt::from(
            Message::new(topic, "payload")
                .with_tags("TagA")
                .with_property(property::UNIQ_KEY, "UNIQ-1")
                .with_property(property::TRAN_MSG, "true")
                .with_flag(7),
        );
        m.reconsume_times = reconsume_times;
        m
    }

    #[test]
    fn topic_names() {
        assert_eq!(retry_topic("g"), "%RETRY%g");
        assert_eq!(dlq_topic("g"), "%DLQ%g");
        assert!(is_retry_topic("%RETRY%g") && !is_retry_topic("%DLQ%g") && !is_retry_topic("g"));
        assert!(is_dlq_topic("%DLQ%g") && !is_dlq_topic("%RETRY%g"));
        assert_eq!(group_of_retry_topic("%RETRY%"), None);
        // The 120-character group limit exists so that its retry topic fits in 127.
        assert_eq!(retry_topic(&"g".repeat(120)).len(), 127);
    }

    #[test]
    fn delay_table_matches_the_broker_default() {
        let text = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";
        let parsed: Vec<Duration> = text
            .split(' ')
            .map(|d| humantime::parse_duration(d).unwrap())
            .collect();
        assert_eq!(parsed, DELAY_LEVELS.to_vec());
        assert_eq!(delay_of_level(1), Some(Duration::from_secs(1)));
        assert_eq!(delay_of_level(3), Some(Duration::from_secs(10)));
        assert_eq!(delay_of_level(18), Some(Duration::from_secs(7200)));
        assert_eq!(delay_of_level(40), Some(Duration::from_secs(7200)));
        assert_eq!(delay_of_level(0), None);
        assert_eq!(delay_of_level(-1), None);
        // 16 retries from level 3 to 18 add up to 4 h 45 min 40 s (≈ 4 h 46 min).
        let total: Duration = (0..16)
            .filter_map(|n| delay_of_level(retry_delay_level(n)))
            .sum();
        assert_eq!(total, Duration::from_secs(4 * 3600 + 45 * 60 + 40));
    }

    #[test]
    fn suspend_time_is_clamped() {
        assert_eq!(
            clamp_suspend_time(Duration::ZERO),
            Duration::from_millis(10)
        );
        assert_eq!(
            clamp_suspend_time(Duration::from_millis(500)),
            Duration::from_millis(500)
        );
        assert_eq!(
            clamp_suspend_time(Duration::from_secs(60)),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn retried_messages_get_their_topic_back() {
        let mut m = failed("%RETRY%g", 1);
        m.message.properties.insert(property::RETRY_TOPIC, "Orders");
        assert_eq!(original_topic(&m, "g"), "Orders");
        // Another group's retry topic is left alone.
        assert_eq!(original_topic(&m, "other"), "%RETRY%g");
        assert!(restore_original_topic(&mut m, "g"));
        assert_eq!(m.topic(), "Orders");
        assert!(!restore_original_topic(&mut m, "g"));
        // No RETRY_TOPIC: nothing to restore.
        let mut plain = failed("%RETRY%g", 0);
        assert!(!restore_original_topic(&mut plain, "g"));
    }

    #[test]
    fn fallback_retry_message_carries_the_bookkeeping() {
        let m = failed("Orders", 4);
        let r = build_retry_message(&m, "g", 16);
        assert_eq!(r.topic, "%RETRY%g");
        assert_eq!(r.body, m.message.body);
        assert_eq!(r.flag, 7);
        assert_eq!(r.tags(), Some("TagA"));
        assert_eq!(r.property(property::RETRY_TOPIC), Some("Orders"));
        assert_eq!(r.property(property::ORIGIN_MESSAGE_ID), Some("UNIQ-1"));
        assert_eq!(r.property(property::RECONSUME_TIME), Some("5"));
        assert_eq!(r.property(property::MAX_RECONSUME_TIMES), Some("16"));
        assert_eq!(r.property(property::DELAY), Some("7"));
        assert_eq!(r.property(property::TRAN_MSG), None);
    }

    #[test]
    fn a_redelivered_message_keeps_its_first_id_and_original_topic() {
        let mut m = failed("%RETRY%g", 2);
        m.message.properties.insert(property::RETRY_TOPIC, "Orders");
        m.message
            .properties
            .insert(property::ORIGIN_MESSAGE_ID, "FIRST");
        let r = build_retry_message(&m, "g", i32::MAX);
        assert_eq!(r.property(property::RETRY_TOPIC), Some("Orders"));
        assert_eq!(r.property(property::ORIGIN_MESSAGE_ID), Some("FIRST"));
        assert_eq!(
            r.property(property::MAX_RECONSUME_TIMES),
            Some(i32::MAX.to_string().as_str())
        );
    }

    #[test]
    fn without_uniq_key_the_offset_id_is_the_origin() {
        let mut m = MessageExt::from(Message::new("T", "b"));
        m.commit_log_offset = 0x1234;
        let r = build_retry_message(&m, "g", 16);
        assert_eq!(
            r.property(property::ORIGIN_MESSAGE_ID),
            Some(m.offset_msg_id().as_str())
        );
    }

    #[test]
    fn failed_messages_of_a_batch() {
        assert_eq!(failed_range(false, None, 3), 0..3);
        assert_eq!(failed_range(true, Some(0), 3), 1..3);
        assert_eq!(failed_range(true, Some(2), 3), 3..3);
        assert_eq!(failed_range(true, Some(usize::MAX), 3), 3..3);
        assert_eq!(failed_range(true, None, 0), 0..0);
    }

    #[test]
    fn orderly_messages_reach_the_dlq_at_the_maximum() {
        assert_eq!(orderly_retry(0, Some(3)), OrderlyRetry::Suspend);
        assert_eq!(orderly_retry(2, Some(3)), OrderlyRetry::Suspend);
        assert_eq!(orderly_retry(3, Some(3)), OrderlyRetry::SendToDeadLetter);
        assert_eq!(orderly_retry(0, Some(0)), OrderlyRetry::SendToDeadLetter);
        assert_eq!(orderly_retry(i32::MAX, None), OrderlyRetry::Suspend);
        // The re-sent message then carries RECONSUME_TIME = max + 1, which the broker sends to
        // the DLQ.
        let r = build_retry_message(&failed("T", 3), "g", 3);
        assert_eq!(r.property(property::RECONSUME_TIME), Some("4"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn retry_delay_grows_with_each_attempt(times in 0i32..100) {
            let level = retry_delay_level(times);
            prop_assert_eq!(level, 3 + times);
            let now = delay_of_level(level).unwrap();
            let next = delay_of_level(retry_delay_level(times + 1)).unwrap();
            prop_assert!(next >= now);
            let r = build_retry_message(&failed("T", times), "g", 16);
            let expected = (times + 1).to_string();
            prop_assert_eq!(r.property(property::RECONSUME_TIME), Some(expected.as_str()));
        }
    }
}
