//! More push-consumer behaviour end to end, on the embedded broker, through the public API:
//! consume timeout, flow control (count and span), actor listeners, TOML configuration,
//! suspend/resume, consuming from a timestamp, broker-driven offset resets and the admin calls a
//! broker makes into a consumer (running info, consume directly).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use actix::prelude::*;
use common::{
    assert_quiet, await_committed, body_of, cluster_with_topic, eventually, fast_retry_cluster,
    from_first_offset, mq, now_ms, producer, receive, recording, send_numbered, text, Shared,
    BROKER, QUIET,
};
use rocketmq_actor::consumer::config::format_consume_timestamp_utc;
use rocketmq_actor::consumer::{ConsumeFromWhere, PushConsumerConfig};
use rocketmq_actor::consumer::{ConsumeMessages, ConsumeReply, ConsumeStatus};
use rocketmq_actor::protocol::body::{
    decode_json, CMResult, ConsumeMessageDirectlyResult, ConsumerRunningInfo,
};
use rocketmq_actor::protocol::response_code;
use rocketmq_actor::rpc::DEFAULT_BROKER_SUSPEND as BROKER_SUSPEND_MAX_TIME;
use rocketmq_actor::EmbeddedCluster;
use rocketmq_actor::Producer;
use rocketmq_actor::PushConsumer;
use rocketmq_actor::{Error, Message, MessageQueue};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;

/// Sends `m0..m{count}` in batches of 100.
async fn send_backlog(producer: &Producer, topic: &str, count: usize) {
    let mut next = 0;
    while next < count {
        let end = (next + 100).min(count);
        let batch = (next..end)
            .map(|i| Message::new(topic, body_of(i)))
            .collect();
        producer
            .send_batch(batch)
            .await
            .expect("batch send succeeds");
        next = end;
    }
}

/// A builder with what every test here shares: every tag, first offset, offsets persisted every
/// 100 ms (so [`await_committed`] sees them soon).
fn builder(namesrv: &str, group: &str, topic: &str) -> rocketmq_actor::PushConsumerBuilder {
    from_first_offset(namesrv, group, topic, "*")
        .configure(|c| c.persist_consumer_offset_interval = Duration::from_millis(100))
}

/// A gate listener calls can wait on; opening it releases every waiting and future call.
#[derive(Clone)]
struct Gate(watch::Receiver<bool>);

impl Gate {
    fn closed() -> (watch::Sender<bool>, Gate) {
        let (open, rx) = watch::channel(false);
        (open, Gate(rx))
    }

    async fn pass(mut self) {
        // An error means the sender is gone: treat as open so nothing hangs forever.
        let _ = self.0.wait_for(|open| *open).await;
    }
}

/// Polls the consumer's stats until `pulled` reaches `at_least`, returning it.
async fn pulled_at_least(consumer: &PushConsumer, at_least: u64) -> u64 {
    eventually(&format!("{at_least} pulled messages"), || async {
        let pulled = consumer.stats().await.pulled;
        (pulled >= at_least).then_some(pulled)
    })
    .await
}

/// The highest `pulled` seen while watching for [`QUIET`].
async fn max_pulled_over_quiet_window(consumer: &PushConsumer) -> u64 {
    let until = Instant::now() + QUIET;
    let mut max = 0;
    while Instant::now() < until {
        max = max.max(consumer.stats().await.pulled);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    max.max(consumer.stats().await.pulled)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StuckCall {
    NotStarted,
    Running,
    Returned,
    Cancelled,
}

/// Marks the stuck call cancelled if its future is dropped before it returns.
struct CancelGuard(Shared<StuckCall>);

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.0.get() == StuckCall::Running {
            self.0.set(StuckCall::Cancelled);
        }
    }
}

#[actix_rt::test]
async fn a_call_stuck_past_consume_timeout_is_redelivered_and_stops_pinning_the_offset() {
    let topic = "Timeout";
    let group = "timeout_group";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    send_numbered(&producer(&cluster), topic, 0..5).await;

    let (tx, mut rx) = unbounded_channel::<(String, i32)>();
    let stuck = Shared::new(StuckCall::NotStarted);
    let listener_stuck = stuck.clone();
    let consumer = builder(&namesrv, group, topic)
        .configure(|c| {
            c.consume_timeout = Duration::from_millis(300);
            // The stuck call never ends: shutdown must not wait for it forever.
            c.shutdown_await = Some(Duration::from_millis(100));
        })
        .listener_fn(move |messages, ctx| {
            let tx = tx.clone();
            let stuck = listener_stuck.clone();
            async move {
                for m in &messages {
                    if text(m) == "m0" && m.reconsume_times == 0 {
                        stuck.set(StuckCall::Running);
                        let _guard = CancelGuard(stuck.clone());
                        futures::future::pending::<()>().await;
                        stuck.set(StuckCall::Returned);
                    }
                    let _ = tx.send((text(m), m.reconsume_times));
                }
                (ConsumeStatus::Success, ctx)
            }
        })
        .start()
        .await
        .expect("consumer starts");

    let seen: BTreeSet<(String, i32)> = receive(&mut rx, 5).await.into_iter().collect();
    let expected: BTreeSet<(String, i32)> = [("m0", 1), ("m1", 0), ("m2", 0), ("m3", 0), ("m4", 0)]
        .into_iter()
        .map(|(b, t)| (b.to_owned(), t))
        .collect();
    assert_eq!(
        seen, expected,
        "m0 came back through the retry topic, the rest once"
    );
    assert_eq!(
        stuck.get(),
        StuckCall::Running,
        "the redelivery happened while the first call was still running"
    );
    // Nothing pins the queue any more: every offset up to the end is committed.
    await_committed(&cluster, group, topic, 5).await;
    assert_quiet(&mut rx, "m0 was handed back once only").await;
    assert_eq!(
        stuck.get(),
        StuckCall::Running,
        "the stuck call was not interrupted"
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_timed_out_call_that_fails_later_does_not_cause_a_second_redelivery() {
    let topic = "TimeoutLate";
    let group = "timeout_late_group";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    send_numbered(&producer(&cluster), topic, 0..1).await;

    let (tx, mut rx) = unbounded_channel::<(String, i32)>();
    let (release, gate) = Gate::closed();
    let consumer = builder(&namesrv, group, topic)
        .configure(|c| c.consume_timeout = Duration::from_millis(300))
        .listener_fn(move |messages, ctx| {
            let (tx, gate) = (tx.clone(), gate.clone());
            async move {
                let first = messages.iter().any(|m| m.reconsume_times == 0);
                for m in &messages {
                    let _ = tx.send((text(m), m.reconsume_times));
                }
                if first {
                    // Outlives consume_timeout, then fails: the runtime already sent the
                    // message back when the call timed out, so this outcome must be ignored.
                    gate.pass().await;
                    return (ConsumeStatus::ReconsumeLater, ctx);
                }
                (ConsumeStatus::Success, ctx)
            }
        })
        .start()
        .await
        .expect("consumer starts");
    let deliveries = receive(&mut rx, 2).await;
    assert_eq!(
        deliveries,
        vec![("m0".to_owned(), 0), ("m0".to_owned(), 1)],
        "first delivery, then the timeout redelivery"
    );
    release.send(true).unwrap();
    assert_quiet(
        &mut rx,
        "the late failure of a timed-out call was sent back again",
    )
    .await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn pulling_stops_once_the_queue_caches_more_than_its_threshold() {
    let topic = "Flow";
    let group = "flow_group";
    let backlog = 10_000;
    let (threshold, batch) = (100u64, 32u64);
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    send_backlog(&producer(&cluster), topic, backlog).await;

    let (tx, mut rx) = unbounded_channel::<String>();
    let (release, gate) = Gate::closed();
    let consumer = builder(&namesrv, group, topic)
        .configure(|c| {
            c.pull_threshold_for_queue = threshold as u32;
            c.pull_batch_size = batch as u32;
        })
        .listener_fn(move |messages, ctx| {
            let (tx, gate) = (tx.clone(), gate.clone());
            async move {
                gate.pass().await;
                for m in &messages {
                    let _ = tx.send(text(m));
                }
                (ConsumeStatus::Success, ctx)
            }
        })
        .start()
        .await
        .expect("consumer starts");

    let pulled = pulled_at_least(&consumer, threshold).await;
    assert!(
        pulled > threshold,
        "pulling went on until the cache exceeded the threshold"
    );
    let max = max_pulled_over_quiet_window(&consumer).await;
    assert!(
        max <= threshold + batch,
        "pulled {max} messages while nothing was consumed; the cache limit allows {}",
        threshold + batch
    );
    assert_eq!(
        consumer.stats().await.consumed_ok,
        0,
        "the gate held every call"
    );

    release.send(true).unwrap();
    let seen = receive(&mut rx, backlog).await;
    let distinct: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), backlog, "every message arrived, none twice");
    assert!(distinct.iter().all(|b| b
        .strip_prefix('m')
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| n < backlog)));
    await_committed(&cluster, group, topic, backlog as i64).await;
    assert_quiet(&mut rx, "a message arrived twice").await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

/// The commit offset the consumer reports for queue 0 of `topic` in its running info.
async fn reported_commit_offset(
    cluster: &EmbeddedCluster,
    group: &str,
    consumer: &PushConsumer,
    topic: &str,
) -> i64 {
    let response = cluster
        .consumer_running_info(BROKER, group, consumer.client_id(), false)
        .await
        .expect("the consumer answers");
    assert_eq!(response.code, response_code::SUCCESS);
    let info: ConsumerRunningInfo =
        decode_json(response.body.as_deref().unwrap_or_default()).expect("running info parses");
    info.mq_table
        .get(&mq(topic, 0))
        .map(|q| q.commit_offset)
        .expect("the queue is in the running info")
}

#[actix_rt::test]
async fn a_slow_head_message_pins_the_offset_and_the_span_limit_bounds_pulling() {
    let topic = "Span";
    let group = "span_group";
    let (total, max_span, batch) = (300usize, 50u64, 32u64);
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    send_backlog(&producer(&cluster), topic, total).await;

    let (tx, mut rx) = unbounded_channel::<String>();
    let (release_head, head_gate) = Gate::closed();
    let (release_rest, rest_gate) = Gate::closed();
    let consumer = builder(&namesrv, group, topic)
        .configure(|c| {
            c.consume_concurrently_max_span = max_span as u32;
            c.pull_batch_size = batch as u32;
            // The count limit (default 1000) is far above what the span allows.
            assert!(u64::from(c.pull_threshold_for_queue) > max_span + batch);
        })
        .listener_fn(move |messages, ctx| {
            let tx = tx.clone();
            let head = messages.iter().any(|m| m.queue_offset == 0);
            let gate = if head {
                head_gate.clone()
            } else {
                rest_gate.clone()
            };
            async move {
                gate.pass().await;
                for m in &messages {
                    let _ = tx.send(text(m));
                }
                (ConsumeStatus::Success, ctx)
            }
        })
        .start()
        .await
        .expect("consumer starts");

    // Nothing is consumed: the span of the cache, not its size, stops the pulls.
    pulled_at_least(&consumer, max_span + 1).await;
    let max = max_pulled_over_quiet_window(&consumer).await;
    assert!(
        max <= max_span + batch,
        "pulled {max} messages with the head stuck; the span limit allows {}",
        max_span + batch
    );

    // With everything but the head consumed, the cache spans nothing and pulling goes on, but
    // the head pins the committed offset.
    release_rest.send(true).unwrap();
    let rest: BTreeSet<String> = receive(&mut rx, total - 1).await.into_iter().collect();
    let expected: BTreeSet<String> = (1..total).map(body_of).collect();
    assert_eq!(rest, expected);
    eventually("every message but the head settled", || async {
        (consumer.stats().await.consumed_ok == (total - 1) as u64).then_some(())
    })
    .await;
    assert_eq!(
        reported_commit_offset(&cluster, group, &consumer, topic).await,
        0,
        "the unfinished head message pins the offset"
    );

    release_head.send(true).unwrap();
    assert_eq!(receive(&mut rx, 1).await, vec!["m0".to_owned()]);
    await_committed(&cluster, group, topic, total as i64).await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

/// A user's actor as the listener: records (body, reconsume times) and acknowledges only the
/// first two messages of the first batch holding `m0`.
struct Recorder {
    tx: UnboundedSender<(String, i32)>,
    batches: Shared<Vec<Vec<String>>>,
}

impl Actor for Recorder {
    type Context = Context<Self>;
}

impl Handler<ConsumeMessages> for Recorder {
    type Result = ConsumeReply;

    fn handle(&mut self, msg: ConsumeMessages, _ctx: &mut Self::Context) -> ConsumeReply {
        let bodies: Vec<String> = msg.messages.iter().map(text).collect();
        for m in msg.messages.iter() {
            let _ = self.tx.send((text(m), m.reconsume_times));
        }
        let first_of_m0 = msg
            .messages
            .iter()
            .any(|m| text(m) == "m0" && m.reconsume_times == 0);
        self.batches.borrow_mut().push(bodies);
        if first_of_m0 {
            ConsumeReply {
                ack_index: Some(1),
                ..ConsumeReply::success()
            }
        } else {
            ConsumeReply::success()
        }
    }
}

#[actix_rt::test]
async fn an_actor_listener_receives_every_message_and_its_ack_index_is_honoured() {
    let topic = "ActorListener";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    let count = 10;
    send_numbered(&producer(&cluster), topic, 0..count).await;

    let (tx, mut rx) = unbounded_channel();
    let batches = Shared::new(Vec::new());
    let recorder = Recorder {
        tx,
        batches: batches.clone(),
    }
    .start();
    let consumer = builder(&namesrv, "actor_group", topic)
        .configure(|c| c.consume_message_batch_max_size = 4)
        .listener_actor(recorder.recipient())
        .start()
        .await
        .expect("consumer starts");

    // Every message once, then the two unacknowledged ones of m0's batch again.
    let seen = receive(&mut rx, count + 2).await;
    let first_time: BTreeSet<String> = seen
        .iter()
        .filter(|(_, times)| *times == 0)
        .map(|(b, _)| b.clone())
        .collect();
    assert_eq!(first_time, (0..count).map(body_of).collect());
    let retried: BTreeSet<String> = seen
        .iter()
        .filter(|(_, times)| *times == 1)
        .map(|(b, _)| b.clone())
        .collect();
    // Messages of one queue come in queue order, four per call: m0's batch is m0..m3.
    assert_eq!(batches.borrow()[0], ["m0", "m1", "m2", "m3"]);
    assert_eq!(retried, ["m2".to_owned(), "m3".to_owned()].into());
    assert_quiet(&mut rx, "acknowledged messages came back").await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_consumer_built_from_toml_uses_its_settings_and_bad_values_name_the_option() {
    let topic = "TomlTopic";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    send_numbered(&producer(&cluster), topic, 0..20).await;

    let config = PushConsumerConfig::from_toml_str(
        r#"
        consumer_group = "toml_group"
        consume_from_where = "first_offset"
        consume_message_batch_max_size = 5
        pull_batch_size = 8
        persist_consumer_offset_interval = "100ms"
        consume_timeout = "2m 30s"
        rebalance_interval = "1m"

        [subscriptions]
        TomlTopic = "*"
        "#,
    )
    .expect("the document is valid");
    assert_eq!(
        config.persist_consumer_offset_interval,
        Duration::from_millis(100)
    );
    assert_eq!(config.consume_timeout, Duration::from_secs(150));

    let (tx, mut rx) = unbounded_channel::<Vec<String>>();
    let consumer = PushConsumer::builder()
        .namesrv_addr(namesrv.clone())
        .config(config.clone())
        .listener_fn(move |messages, ctx| {
            let _ = tx.send(messages.iter().map(text).collect());
            async move { (ConsumeStatus::Success, ctx) }
        })
        .start()
        .await
        .expect("consumer starts from the TOML configuration");
    let mut seen = Vec::new();
    let mut largest_batch = 0;
    while seen.len() < 20 {
        let batch = receive(&mut rx, 1).await.remove(0);
        largest_batch = largest_batch.max(batch.len());
        seen.extend(batch);
    }
    assert_eq!(
        seen.iter().collect::<BTreeSet<_>>(),
        (0..20).map(body_of).collect::<Vec<_>>().iter().collect(),
        "the subscription and start position came from the document"
    );
    assert_eq!(
        largest_batch, 5,
        "listener calls get up to consume_message_batch_max_size"
    );
    await_committed(&cluster, "toml_group", topic, 20).await;
    consumer.shutdown().await;

    // A value out of range is refused when the document is read, naming the option.
    let out_of_range = PushConsumerConfig::from_toml_str(
        "consumer_group = \"toml_group\"\npull_batch_size = 5000\n",
    );
    assert!(
        matches!(
            out_of_range,
            Err(Error::Config {
                option: "pull_batch_size",
                ..
            })
        ),
        "{out_of_range:?}"
    );
    // A bad value set after loading is refused by start(), naming the option.
    let mut broken = config;
    broken.consume_timeout = Duration::ZERO;
    let started = PushConsumer::builder()
        .namesrv_addr(namesrv)
        .config(broken)
        .listener_fn(|_messages, ctx| async move { (ConsumeStatus::Success, ctx) })
        .start()
        .await;
    match started {
        Err(Error::Config { option, .. }) => assert_eq!(option, "consume_timeout"),
        Err(other) => panic!("expected a configuration error, got {other}"),
        Ok(_) => panic!("a zero consume_timeout was accepted"),
    }
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_toml_duration_that_is_not_one_is_reported_with_its_key() {
    let bad_duration = PushConsumerConfig::from_toml_str(
        "consumer_group = \"toml_group\"\nconsume_timeout = \"fortnight\"\n",
    )
    .expect_err("not a duration");
    assert!(
        bad_duration.to_string().contains("consume_timeout"),
        "the error names the option: {bad_duration}"
    );
}

/// A consumer of a one-queue topic that has consumed `m0..m3` and records every delivery.
async fn consuming_three(
    cluster: &EmbeddedCluster,
    topic: &str,
    group: &str,
) -> (Producer, PushConsumer, UnboundedReceiver<(String, i32)>) {
    cluster.create_topic(topic, 1).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    let producer = producer(cluster);
    send_numbered(&producer, topic, 0..3).await;
    let (tx, mut rx) = unbounded_channel();
    let consumer = builder(&namesrv, group, topic)
        .listener_fn(recording(tx))
        .start()
        .await
        .expect("consumer starts");
    receive(&mut rx, 3).await;
    (producer, consumer, rx)
}

#[actix_rt::test]
async fn a_suspended_consumer_consumes_nothing_new_until_resumed() {
    let cluster = fast_retry_cluster(1).await;
    let topic = "Suspend";
    let (producer, consumer, mut rx) = consuming_three(&cluster, topic, "suspend_group").await;

    consumer.suspend().await;
    // The pull the broker held when suspend() was called may still answer with this one (see
    // the strict test below); nothing after it may be consumed.
    send_numbered(&producer, topic, 100..101).await;
    let mut early = Vec::new();
    while let Ok(Some((body, _))) = tokio::time::timeout(QUIET, rx.recv()).await {
        early.push(body);
    }
    assert!(
        early.iter().all(|b| b == "m100"),
        "only the held pull's message may arrive while suspended: {early:?}"
    );
    send_numbered(&producer, topic, 3..6).await;
    assert_quiet(&mut rx, "consumed while suspended").await;

    consumer.resume().await;
    let expected: BTreeSet<String> = (3..6).chain(100..101).map(body_of).collect();
    let after: Vec<String> = receive(&mut rx, expected.len() - early.len())
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    let all: Vec<String> = early.into_iter().chain(after).collect();
    assert_eq!(all.len(), expected.len(), "nothing twice: {all:?}");
    assert_eq!(all.into_iter().collect::<BTreeSet<_>>(), expected);
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn after_suspend_returns_no_new_message_is_consumed() {
    let cluster = fast_retry_cluster(1).await;
    let topic = "SuspendStrict";
    let (producer, consumer, mut rx) =
        consuming_three(&cluster, topic, "suspend_strict_group").await;

    consumer.suspend().await;
    send_numbered(&producer, topic, 3..6).await;
    assert_quiet(&mut rx, "consumed while suspended").await;

    consumer.resume().await;
    let after: BTreeSet<String> = receive(&mut rx, 3)
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    assert_eq!(after, (3..6).map(body_of).collect());
    consumer.shutdown().await;
    cluster.shutdown().await;
}

/// Waits until the wall clock is at or past `epoch_ms` (the broker stamps store times with the
/// same clock). There is no event for "time has passed", so this one sleeps.
async fn wall_clock_past(epoch_ms: i64) {
    loop {
        let now = now_ms();
        if now >= epoch_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis((epoch_ms - now) as u64)).await;
    }
}

/// Stores `m0..m10` on a one-queue topic, then, from the next whole second on, `m10..m20`;
/// with `retention`, the topic's first message (stored before `m0`) has expired. Returns the
/// consumer started with `ConsumeFromWhere::Timestamp` at that second, and what it receives.
async fn consume_from_second_batch_time(
    cluster: &EmbeddedCluster,
    topic: &str,
    retention: bool,
) -> (PushConsumer, UnboundedReceiver<(String, i32)>) {
    cluster.create_topic(topic, 1).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    let producer = producer(cluster);
    if retention {
        producer
            .send(Message::new(topic, "expired"))
            .await
            .expect("send succeeds");
        cluster
            .truncate_queue_before(BROKER, topic, 0, 1)
            .await
            .unwrap();
    }
    send_numbered(&producer, topic, 0..10).await;
    // consume_timestamp has whole seconds: start the second batch on the next second.
    let boundary = (now_ms() / 1000 + 1) * 1000;
    wall_clock_past(boundary).await;
    send_numbered(&producer, topic, 10..20).await;

    let (tx, rx) = unbounded_channel();
    let consumer = builder(&namesrv, &format!("{topic}_group"), topic)
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::Timestamp;
            c.consume_timestamp = Some(format_consume_timestamp_utc(boundary));
        })
        .listener_fn(recording(tx))
        .start()
        .await
        .expect("consumer starts");
    (consumer, rx)
}

/// Runs [`consume_from_second_batch_time`] on a cluster of its own and checks that the consumer
/// gets exactly the second batch.
async fn assert_only_the_second_batch_is_consumed(topic: &str, retention: bool) {
    let cluster = fast_retry_cluster(1).await;
    let (consumer, mut rx) = consume_from_second_batch_time(&cluster, topic, retention).await;
    let seen: BTreeSet<String> = receive(&mut rx, 10)
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    assert_eq!(
        seen,
        (10..20).map(body_of).collect(),
        "only the second batch"
    );
    assert_quiet(&mut rx, "a message stored before the timestamp").await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn consuming_from_a_timestamp_skips_what_was_stored_before_it() {
    // The usual state of a topic in service: its oldest messages have expired.
    assert_only_the_second_batch_is_consumed("FromTimestamp", true).await;
}

#[actix_rt::test]
async fn consuming_from_a_timestamp_on_a_young_topic_skips_what_was_stored_before_it() {
    assert_only_the_second_batch_is_consumed("YoungFromTimestamp", false).await;
}

/// A consumer of `m0..m10` on a one-queue topic that has consumed (and committed) everything,
/// and the time separating `m0..m5` from `m5..m10`.
async fn consumed_ten(
    cluster: &EmbeddedCluster,
    topic: &str,
    group: &str,
) -> (PushConsumer, UnboundedReceiver<(String, i32)>, i64) {
    cluster.create_topic(topic, 1).await.unwrap();
    let namesrv = cluster.namesrv_addr();
    let producer = producer(cluster);
    send_numbered(&producer, topic, 0..5).await;
    let second_half = now_ms() + 1;
    wall_clock_past(second_half).await;
    send_numbered(&producer, topic, 5..10).await;

    let (tx, mut rx) = unbounded_channel();
    let consumer = builder(&namesrv, group, topic)
        .listener_fn(recording(tx))
        .start()
        .await
        .expect("consumer starts");
    receive(&mut rx, 10).await;
    await_committed(cluster, group, topic, 10).await;
    (consumer, rx, second_half)
}

/// Resets `group` on `topic` to `timestamp_ms` and checks the offset the broker chose.
async fn reset_to_m5(cluster: &EmbeddedCluster, group: &str, topic: &str, timestamp_ms: i64) {
    let table = cluster
        .reset_offsets(group, topic, timestamp_ms, true)
        .await
        .expect("reset accepted");
    assert_eq!(
        table.get(&mq(topic, 0)),
        Some(&5),
        "the first message stored at or after the reset time is m5"
    );
}

#[actix_rt::test]
async fn a_broker_offset_reset_makes_the_consumer_consume_again_from_there() {
    let cluster = fast_retry_cluster(1).await;
    let (topic, group) = ("Reset", "reset_group");
    let (consumer, mut rx, second_half) = consumed_ten(&cluster, topic, group).await;

    reset_to_m5(&cluster, group, topic, second_half).await;
    let again: BTreeSet<String> = receive(&mut rx, 5)
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    assert_eq!(
        again,
        (5..10).map(body_of).collect(),
        "consumed again from the reset point"
    );
    assert_quiet(&mut rx, "a message before the reset point").await;
    await_committed(&cluster, group, topic, 10).await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_broker_offset_reset_takes_effect_without_waiting_for_the_held_pull() {
    let cluster = fast_retry_cluster(1).await;
    let (topic, group) = ("ResetPrompt", "reset_prompt_group");
    let (consumer, mut rx, second_half) = consumed_ten(&cluster, topic, group).await;

    reset_to_m5(&cluster, group, topic, second_half).await;
    // Not a speed requirement: the consumer must not sit out the long poll it had parked on
    // the broker before the reset (held for BROKER_SUSPEND_MAX_TIME when nothing new arrives).
    let bound = BROKER_SUSPEND_MAX_TIME / 3;
    let first = tokio::time::timeout(bound, rx.recv()).await;
    assert!(
        matches!(first, Ok(Some(_))),
        "nothing re-consumed within {bound:?} of the reset"
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn the_broker_can_read_running_info_and_make_the_consumer_consume_one_message() {
    let topic = "Admin";
    let group = "admin_group";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    let sent = send_numbered(&producer(&cluster), topic, 0..10).await;

    let (tx, mut rx) = unbounded_channel();
    let consumer = builder(&namesrv, group, topic)
        .listener_fn(recording(tx))
        .start()
        .await
        .expect("consumer starts");
    receive(&mut rx, 10).await;
    eventually("all ten settled", || async {
        (consumer.stats().await.consumed_ok == 10).then_some(())
    })
    .await;

    let response = cluster
        .consumer_running_info(BROKER, group, consumer.client_id(), false)
        .await
        .expect("the consumer answers");
    assert_eq!(response.code, response_code::SUCCESS);
    let body = response.body.clone().unwrap_or_default();
    assert!(String::from_utf8_lossy(&body).contains("commitOffset"));
    let info: ConsumerRunningInfo = decode_json(&body).expect("running info parses");
    let mut expected = BTreeMap::new();
    for queue_id in 0..2 {
        let end = cluster.max_offset(BROKER, topic, queue_id).await.unwrap();
        expected.insert(mq(topic, queue_id), end);
    }
    assert_eq!(expected.values().sum::<i64>(), 10);
    let reported: BTreeMap<MessageQueue, i64> = info
        .mq_table
        .iter()
        .filter(|(mq, _)| mq.topic == topic)
        .map(|(mq, q)| (mq.clone(), q.commit_offset))
        .collect();
    assert_eq!(
        reported, expected,
        "each owned queue committed up to its end"
    );
    let owned: BTreeSet<MessageQueue> = consumer
        .owned_queues()
        .await
        .into_iter()
        .filter(|mq| mq.topic == topic)
        .collect();
    assert_eq!(owned, reported.keys().cloned().collect());
    assert!(info.subscription_set.iter().any(|s| s.topic == topic));

    // Consume m3 again on demand, by its message id.
    let response = cluster
        .consume_message_directly(BROKER, group, consumer.client_id(), &sent[3].msg_id)
        .await
        .expect("the consumer answers");
    assert_eq!(response.code, response_code::SUCCESS);
    let body = response.body.clone().unwrap_or_default();
    assert!(String::from_utf8_lossy(&body).contains("CR_SUCCESS"));
    let result: ConsumeMessageDirectlyResult = decode_json(&body).expect("result parses");
    assert_eq!(result.consume_result, Some(CMResult::CrSuccess));
    assert_eq!(receive(&mut rx, 1).await, vec![("m3".to_owned(), 0)]);
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_broker_offset_reset_of_a_suspended_consumer_is_what_its_shutdown_persists() {
    let cluster = fast_retry_cluster(1).await;
    let (topic, group) = ("ResetSuspended", "reset_suspended_group");
    let (consumer, mut rx, second_half) = consumed_ten(&cluster, topic, group).await;
    consumer.suspend().await;

    reset_to_m5(&cluster, group, topic, second_half).await;
    eventually("the queue took the reset", || async {
        let lags = consumer.lag().await;
        let committed = lags
            .iter()
            .find(|l| l.queue == mq(topic, 0))?
            .committed_offset;
        (committed == Some(5)).then_some(())
    })
    .await;
    // Suspended: nothing is consumed again, so the offset it persists on the way out is the
    // reset one, not what it had committed before the reset.
    consumer.shutdown().await;
    assert_eq!(
        cluster
            .committed_offset(BROKER, group, topic, 0)
            .await
            .unwrap(),
        Some(5)
    );
    assert_quiet(&mut rx, "a message consumed while suspended").await;
    cluster.shutdown().await;
}
