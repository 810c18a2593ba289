//! The push consumer end to end, on the embedded broker, through the public API.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use common::{
    assert_quiet, cluster_with_topic, fast_retry_cluster, from_first_offset, producer, receive,
    send_numbered, send_numbered_tagged, text,
};
use rocketmq_actor::consumer::{ConsumeContext, ConsumeStatus, Messages};
use rocketmq_actor::consumer::{MessageModel, PushConsumerConfig};
use rocketmq_actor::PushConsumer;
use rocketmq_actor::{MessageExt, MessageQueue};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

/// What a listener saw.
#[derive(Debug, Clone)]
struct Seen {
    consumer: usize,
    body: String,
    tags: Option<String>,
}

fn seen_of(consumer: usize, messages: &[MessageExt]) -> Vec<Seen> {
    messages
        .iter()
        .map(|m| Seen {
            consumer,
            body: text(m),
            tags: m.tags().map(str::to_owned),
        })
        .collect()
}

/// Message model and offset directory of a recording consumer.
struct Setup {
    model: MessageModel,
    offset_dir: Option<std::path::PathBuf>,
}

fn clustering() -> Setup {
    Setup {
        model: MessageModel::Clustering,
        offset_dir: None,
    }
}

fn broadcasting(dir: std::path::PathBuf) -> Setup {
    Setup {
        model: MessageModel::Broadcasting,
        offset_dir: Some(dir),
    }
}

/// A consumer that records every message and always succeeds.
async fn recording_consumer(
    namesrv: &str,
    group: &str,
    topic: &str,
    expression: &str,
    index: usize,
    sink: UnboundedSender<Seen>,
    setup: Setup,
) -> PushConsumer {
    let Setup { model, offset_dir } = setup;
    from_first_offset(namesrv, group, topic, expression)
        .configure(|c| {
            c.message_model = model;
            c.offset_store_dir = offset_dir;
            c.persist_consumer_offset_interval = Duration::from_millis(200);
        })
        .listener_fn(move |messages, ctx| {
            let sink = sink.clone();
            async move {
                for seen in seen_of(index, &messages) {
                    let _ = sink.send(seen);
                }
                (ConsumeStatus::Success, ctx)
            }
        })
        .start()
        .await
        .expect("consumer starts")
}

fn bodies(seen: &[Seen]) -> BTreeSet<String> {
    seen.iter().map(|s| s.body.clone()).collect()
}

#[actix_rt::test]
async fn a_consumer_receives_every_message_of_a_topic() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    send_numbered(&producer(&cluster), "Basic", 0..100).await;
    let (tx, mut rx) = unbounded_channel();
    let consumer =
        recording_consumer(&namesrv, "basic_group", "Basic", "*", 0, tx, clustering()).await;
    let seen = receive(&mut rx, 100).await;
    let expected: BTreeSet<String> = (0..100).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies(&seen), expected);
    assert_eq!(seen.len(), 100, "no duplicates");
    let stats = consumer.stats().await;
    assert_eq!(stats.consumed_ok, 100);
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_clean_shutdown_and_restart_redelivers_nothing() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    let producer = producer(&cluster);
    send_numbered(&producer, "Restart", 0..50).await;
    let (tx, mut rx) = unbounded_channel();
    let first = recording_consumer(
        &namesrv,
        "restart_group",
        "Restart",
        "*",
        0,
        tx.clone(),
        clustering(),
    )
    .await;
    let before = receive(&mut rx, 50).await;
    first.shutdown().await;
    send_numbered(&producer, "Restart", 50..80).await;
    let second = recording_consumer(
        &namesrv,
        "restart_group",
        "Restart",
        "*",
        1,
        tx,
        clustering(),
    )
    .await;
    let after = receive(&mut rx, 30).await;
    let expected: BTreeSet<String> = (50..80).map(|i| format!("m{i}")).collect();
    assert_eq!(
        bodies(&after),
        expected,
        "the restarted consumer gets only the new messages"
    );
    assert_eq!(before.len() + after.len(), 80);
    // Nothing else arrives: every message was delivered exactly once.
    assert_quiet(&mut rx, "a duplicate arrived").await;
    second.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn tag_filtering_delivers_only_matching_tags_even_on_hash_collisions() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    // "Aa" and "BB" have the same Java hash code: the broker cannot tell them apart.
    let producer = producer(&cluster);
    send_numbered_tagged(&producer, "Tags", 0..20, "Aa").await;
    send_numbered_tagged(&producer, "Tags", 0..20, "BB").await;
    send_numbered_tagged(&producer, "Tags", 0..20, "Other").await;
    let (tx, mut rx) = unbounded_channel();
    let consumer =
        recording_consumer(&namesrv, "tags_group", "Tags", "Aa", 0, tx, clustering()).await;
    let seen = receive(&mut rx, 20).await;
    assert!(seen.iter().all(|s| s.tags.as_deref() == Some("Aa")));
    assert_quiet(&mut rx, "a message with another tag was delivered").await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn three_consumers_share_two_brokers_without_loss_while_members_come_and_go() {
    let cluster = fast_retry_cluster(2).await;
    let namesrv = cluster.namesrv_addr();
    let topic = "Shared";
    let producer = producer(&cluster);
    send_numbered(&producer, topic, 0..300).await;
    let (tx, mut rx) = unbounded_channel();
    let start = |i: usize, tx: UnboundedSender<Seen>| {
        let namesrv = namesrv.clone();
        async move {
            recording_consumer(&namesrv, "shared_group", topic, "*", i, tx, clustering()).await
        }
    };
    let c0 = start(0, tx.clone()).await;
    let c1 = start(1, tx.clone()).await;
    let mut seen = receive(&mut rx, 100).await;
    let c2 = start(2, tx.clone()).await;
    send_numbered(&producer, topic, 300..600).await;
    seen.extend(receive(&mut rx, 200).await);
    c1.shutdown().await;
    send_numbered(&producer, topic, 600..900).await;
    let c3 = start(3, tx.clone()).await;
    // Everything arrives (at-least-once across rebalances: duplicates are allowed, loss is not).
    let expected: BTreeSet<String> = (0..900).map(|i| format!("m{i}")).collect();
    while bodies(&seen) != expected {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
            Ok(Some(s)) => seen.push(s),
            _ => panic!(
                "lost messages: {:?}",
                expected
                    .difference(&bodies(&seen))
                    .take(10)
                    .collect::<Vec<_>>()
            ),
        }
    }
    // Once settled, each of the 16 queues is owned by exactly one consumer.
    let mut owners: HashMap<MessageQueue, usize> = HashMap::new();
    for _ in 0..100 {
        owners.clear();
        let mut total = 0;
        for (i, c) in [(0, &c0), (2, &c2), (3, &c3)] {
            for mq in c
                .owned_queues()
                .await
                .into_iter()
                .filter(|q| q.topic == topic)
            {
                owners.insert(mq, i);
                total += 1;
            }
        }
        if total == 16 && owners.len() == 16 {
            break;
        }
        c0.rebalance().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(owners.len(), 16, "every queue owned");
    let per_consumer: BTreeMap<usize, usize> = owners.values().fold(BTreeMap::new(), |mut m, c| {
        *m.entry(*c).or_default() += 1;
        m
    });
    assert_eq!(
        per_consumer.len(),
        3,
        "all three live consumers own queues: {per_consumer:?}"
    );
    for c in [c0, c2, c3] {
        c.shutdown().await;
    }
    cluster.shutdown().await;
}

/// Starts a consumer of every tag of `topic` from the first offset, configured by `configure`,
/// whose listener is the given closure.
async fn consumer_with<F, Fut>(
    namesrv: &str,
    group: &str,
    topic: &str,
    configure: impl FnOnce(&mut PushConsumerConfig),
    listener: F,
) -> PushConsumer
where
    F: Fn(Messages, ConsumeContext) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = (ConsumeStatus, ConsumeContext)> + 'static,
{
    from_first_offset(namesrv, group, topic, "*")
        .configure(configure)
        .listener_fn(listener)
        .start()
        .await
        .expect("consumer starts")
}

#[actix_rt::test]
async fn broadcasting_delivers_everything_to_everyone_and_resumes_from_the_local_file() {
    let cluster = fast_retry_cluster(2).await;
    let namesrv = cluster.namesrv_addr();
    let producer = producer(&cluster);
    send_numbered(&producer, "Broadcast", 0..40).await;
    let dirs: Vec<std::path::PathBuf> = (0..2)
        .map(|i| std::env::temp_dir().join(format!("rmq-actor-bcast-{}-{i}", std::process::id())))
        .collect();
    for dir in &dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
    let (tx, mut rx) = unbounded_channel();
    let mut consumers = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        consumers.push(
            recording_consumer(
                &namesrv,
                "bcast_group",
                "Broadcast",
                "*",
                i,
                tx.clone(),
                broadcasting(dir.clone()),
            )
            .await,
        );
    }
    let seen = receive(&mut rx, 80).await;
    for i in 0..2 {
        let mine: Vec<Seen> = seen.iter().filter(|s| s.consumer == i).cloned().collect();
        assert_eq!(mine.len(), 40, "consumer {i} saw every message once");
        assert_eq!(bodies(&mine).len(), 40);
    }
    for c in consumers {
        c.shutdown().await;
    }
    send_numbered(&producer, "Broadcast", 40..50).await;
    let restarted = recording_consumer(
        &namesrv,
        "bcast_group",
        "Broadcast",
        "*",
        0,
        tx,
        broadcasting(dirs[0].clone()),
    )
    .await;
    let after = receive(&mut rx, 10).await;
    let expected: BTreeSet<String> = (40..50).map(|i| format!("m{i}")).collect();
    assert_eq!(
        bodies(&after),
        expected,
        "resumed from the offsets in the local file"
    );
    assert_quiet(&mut rx, "a message consumed before the restart came again").await;
    restarted.shutdown().await;
    cluster.shutdown().await;
    for dir in &dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[actix_rt::test]
async fn failed_messages_are_retried_then_land_in_the_dead_letter_queue() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    send_numbered(&producer(&cluster), "Retry", 0..1).await;
    let (tx, mut rx) = unbounded_channel::<i32>();
    let failing = consumer_with(
        &namesrv,
        "retry_group",
        "Retry",
        |c| c.max_reconsume_times = Some(2),
        move |messages, ctx| {
            let tx = tx.clone();
            async move {
                for m in &messages {
                    assert_eq!(m.topic(), "Retry", "the listener sees the original topic");
                    let _ = tx.send(m.reconsume_times);
                }
                (ConsumeStatus::ReconsumeLater, ctx)
            }
        },
    )
    .await;
    let deliveries = receive(&mut rx, 3).await;
    assert_eq!(deliveries, vec![0, 1, 2]);
    // After max reconsume times the broker moves it to %DLQ%retry_group.
    let (dlq_tx, mut dlq_rx) = unbounded_channel();
    let dlq_reader = recording_consumer(
        &namesrv,
        "dlq_reader",
        "%DLQ%retry_group",
        "*",
        9,
        dlq_tx,
        clustering(),
    )
    .await;
    let dead = receive(&mut dlq_rx, 1).await;
    assert_eq!(dead[0].body, "m0");
    assert_quiet(&mut rx, "no fourth delivery").await;
    failing.shutdown().await;
    dlq_reader.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn ack_index_retries_only_the_unacknowledged_part_of_a_batch() {
    let (cluster, namesrv) = cluster_with_topic("Ack", 1).await;
    send_numbered(&producer(&cluster), "Ack", 0..4).await;
    let (tx, mut rx) = unbounded_channel::<(String, i32)>();
    let consumer = consumer_with(
        &namesrv,
        "ack_group",
        "Ack",
        |c| c.consume_message_batch_max_size = 4,
        move |messages, mut ctx| {
            let tx = tx.clone();
            async move {
                for m in &messages {
                    let _ = tx.send((text(m), m.reconsume_times));
                }
                if messages.len() == 4 {
                    ctx.ack_index = Some(1); // m0 and m1 done, m2 and m3 to retry
                }
                (ConsumeStatus::Success, ctx)
            }
        },
    )
    .await;
    let seen = receive(&mut rx, 6).await;
    let retried: BTreeSet<String> = seen
        .iter()
        .filter(|(_, times)| *times == 1)
        .map(|(b, _)| b.clone())
        .collect();
    assert_eq!(retried, ["m2".to_string(), "m3".to_string()].into());
    assert_quiet(&mut rx, "an acknowledged message came back").await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn calls_that_acknowledge_their_whole_batch_are_never_retried() {
    // `ack_index = Some(len - 1)` is how Java listeners often say "all of it"; the calls of
    // one pull run back to back, and each acknowledgement counts for its own batch only.
    let (cluster, namesrv) = cluster_with_topic("AckAll", 1).await;
    send_numbered(&producer(&cluster), "AckAll", 0..40).await;
    let (tx, mut rx) = unbounded_channel::<(String, i32)>();
    let consumer = consumer_with(
        &namesrv,
        "ack_all_group",
        "AckAll",
        |_| {},
        move |messages, mut ctx| {
            let tx = tx.clone();
            async move {
                for m in &messages {
                    let _ = tx.send((text(m), m.reconsume_times));
                }
                ctx.ack_index = messages.len().checked_sub(1);
                (ConsumeStatus::Success, ctx)
            }
        },
    )
    .await;
    let seen = receive(&mut rx, 40).await;
    assert!(seen.iter().all(|(_, times)| *times == 0), "{seen:?}");
    let distinct: BTreeSet<&str> = seen.iter().map(|(body, _)| body.as_str()).collect();
    assert_eq!(distinct.len(), 40);
    assert_quiet(&mut rx, "an acknowledged message came back").await;
    let stats = consumer.stats().await;
    assert_eq!((stats.consumed_ok, stats.consumed_failed), (40, 0));
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_panicking_listener_gets_the_message_again_and_the_runtime_survives() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    send_numbered(&producer(&cluster), "Panic", 0..3).await;
    let (tx, mut rx) = unbounded_channel::<(String, i32)>();
    let consumer = consumer_with(
        &namesrv,
        "panic_group",
        "Panic",
        |_| {},
        move |messages, ctx| {
            let tx = tx.clone();
            async move {
                for m in &messages {
                    let body = text(m);
                    if body == "m1" && m.reconsume_times == 0 {
                        panic!("listener bug on first delivery of m1");
                    }
                    let _ = tx.send((body, m.reconsume_times));
                }
                (ConsumeStatus::Success, ctx)
            }
        },
    )
    .await;
    let seen: BTreeMap<String, i32> = receive(&mut rx, 3).await.into_iter().collect();
    assert_eq!(seen.get("m1"), Some(&1), "m1 came back after the panic");
    assert_eq!(seen.len(), 3);
    // The calls after the panicking one ran once each, and only m1 came back.
    assert_quiet(&mut rx, "a message was consumed twice").await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_sync_listener_gets_a_fresh_context_per_call_and_its_rejected_and_panicked_calls_come_back(
) {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    send_numbered(&producer(&cluster), "SyncListener", 0..20).await;
    // (body, reconsume times, whether the call's context started with the defaults).
    let (tx, mut rx) = unbounded_channel::<(String, i32, bool)>();
    let consumer = from_first_offset(&namesrv, "sync_group", "SyncListener", "*")
        .listener_sync_fn(move |messages, ctx| {
            let fresh = starts_fresh(ctx, "SyncListener", "sync_group");
            // What one call leaves in its context must not reach the next.
            ctx.queue.topic = "changed by the listener".into();
            ctx.ack_index = messages.len().checked_sub(1);
            let mut status = ConsumeStatus::Success;
            for m in messages {
                if record_then_judge(m, fresh, &tx, &["m5"]) == ConsumeStatus::ReconsumeLater {
                    status = ConsumeStatus::ReconsumeLater;
                }
            }
            status
        })
        .start()
        .await
        .expect("consumer starts");
    // m2 was rejected, m5's call panicked.
    expect_fresh_contexts_and_retries(&mut rx, &consumer, &["m2", "m5"]).await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

/// Records the delivery of `m` (body, reconsume times, whether its call's context started
/// fresh) and judges it as the fresh-context tests expect: the first delivery of a body in
/// `panicking` panics, the first of m2 is rejected, anything else succeeds.
fn record_then_judge(
    m: &MessageExt,
    fresh: bool,
    tx: &UnboundedSender<(String, i32, bool)>,
    panicking: &[&str],
) -> ConsumeStatus {
    let body = text(m);
    let first_delivery = m.reconsume_times == 0;
    let _ = tx.send((body.clone(), m.reconsume_times, fresh));
    if first_delivery && panicking.contains(&body.as_str()) {
        panic!("listener bug on the first delivery of {body}");
    }
    if body == "m2" && first_delivery {
        ConsumeStatus::ReconsumeLater
    } else {
        ConsumeStatus::Success
    }
}

/// Whether a listener call's context starts with the defaults: no `ack_index`, delay level 0,
/// and the queue of `topic` or of `group`'s retry topic (retried messages come from there).
fn starts_fresh(ctx: &ConsumeContext, topic: &str, group: &str) -> bool {
    ctx.ack_index.is_none()
        && ctx.delay_level == 0
        && (ctx.queue.topic == topic || ctx.queue.topic == format!("%RETRY%{group}"))
}

/// What a listener reporting (body, reconsume times, whether its context started with the
/// defaults) saw of messages m0..m19: every call started with a fresh context, exactly
/// `retried` came back, once each, every message was consumed and nothing more; the stats
/// count 20 successes and one failure per retried message.
async fn expect_fresh_contexts_and_retries(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, i32, bool)>,
    consumer: &PushConsumer,
    retried: &[&str],
) {
    let seen = receive(rx, 20 + retried.len()).await;
    assert!(seen.iter().all(|(_, _, fresh)| *fresh), "{seen:?}");
    let again: BTreeSet<&str> = seen
        .iter()
        .filter(|(_, times, _)| *times == 1)
        .map(|(body, _, _)| body.as_str())
        .collect();
    let expected: BTreeSet<&str> = retried.iter().copied().collect();
    assert_eq!(again, expected, "the failed calls came back once each");
    let distinct: BTreeSet<&str> = seen.iter().map(|(body, _, _)| body.as_str()).collect();
    assert_eq!(distinct.len(), 20);
    assert_quiet(rx, "a message was consumed more often than it failed").await;
    let stats = consumer.stats().await;
    assert_eq!(
        (stats.consumed_ok, stats.consumed_failed),
        (20, retried.len() as u64)
    );
}

#[actix_rt::test]
async fn a_closure_listener_gets_a_fresh_context_per_call_whatever_the_last_call_left_in_its_own() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    send_numbered(&producer(&cluster), "FnListener", 0..20).await;
    // (body, reconsume times, whether the call's context started with the defaults).
    let (tx, mut rx) = unbounded_channel::<(String, i32, bool)>();
    let consumer = from_first_offset(&namesrv, "fn_group", "FnListener", "*")
        .listener_fn(move |messages, mut ctx| {
            let fresh = starts_fresh(&ctx, "FnListener", "fn_group");
            let mut status = ConsumeStatus::Success;
            for m in &messages {
                if record_then_judge(m, fresh, &tx, &[]) == ConsumeStatus::ReconsumeLater {
                    status = ConsumeStatus::ReconsumeLater;
                }
            }
            // The context goes back with the status: what it carries must not reach the
            // next call, which finishes at once too (no await here).
            ctx.queue.topic = "changed by the listener".into();
            if status == ConsumeStatus::Success {
                ctx.ack_index = messages.len().checked_sub(1);
                ctx.delay_level = 2;
            }
            async move { (status, ctx) }
        })
        .start()
        .await
        .expect("consumer starts");
    expect_fresh_contexts_and_retries(&mut rx, &consumer, &["m2"]).await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_borrowing_async_listener_gets_a_fresh_context_per_call_through_waits_failures_and_panics(
) {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    send_numbered(&producer(&cluster), "AsyncListener", 0..20).await;
    // (body, reconsume times, whether the call's context started with the defaults).
    let (tx, mut rx) = unbounded_channel::<(String, i32, bool)>();
    let consumer = from_first_offset(&namesrv, "async_group", "AsyncListener", "*")
        .listener_async(async move |messages, ctx| {
            let fresh = starts_fresh(ctx, "AsyncListener", "async_group");
            // What one call leaves in its context must not reach the next.
            ctx.queue.topic = "changed by the listener".into();
            let mut status = ConsumeStatus::Success;
            for m in messages {
                let body = text(m);
                let number: u32 = body.trim_start_matches('m').parse().unwrap_or(0);
                // Every third message's call waits, so it finishes after the calls behind it
                // have started, with the context it was lent.
                if number.is_multiple_of(3) {
                    tokio::task::yield_now().await;
                }
                if record_then_judge(m, fresh, &tx, &["m5", "m12"]) == ConsumeStatus::ReconsumeLater
                {
                    status = ConsumeStatus::ReconsumeLater;
                }
                if body == "m9" {
                    // Straight to the dead-letter queue: m9 must never come back, which only
                    // holds if the context this waiting call changed is the one settled.
                    ctx.delay_level = -1;
                    status = ConsumeStatus::ReconsumeLater;
                }
            }
            if status == ConsumeStatus::Success {
                ctx.ack_index = messages.len().checked_sub(1);
                ctx.delay_level = 2;
            }
            status
        })
        .start()
        .await
        .expect("consumer starts");
    // m2 was rejected and m5's call panicked at once, m12's after waiting: each comes back
    // once. m9, dead-lettered after waiting, does not.
    let seen = receive(&mut rx, 23).await;
    assert!(seen.iter().all(|(_, _, fresh)| *fresh), "{seen:?}");
    let again: BTreeSet<&str> = seen
        .iter()
        .filter(|(_, times, _)| *times == 1)
        .map(|(body, _, _)| body.as_str())
        .collect();
    assert_eq!(again, ["m12", "m2", "m5"].into());
    let distinct: BTreeSet<&str> = seen.iter().map(|(body, _, _)| body.as_str()).collect();
    assert_eq!(distinct.len(), 20);
    assert_quiet(&mut rx, "a dead-lettered or consumed message came back").await;
    let stats = consumer.stats().await;
    assert_eq!((stats.consumed_ok, stats.consumed_failed), (19, 4));
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn the_concurrency_limit_bounds_listener_calls_across_all_queues() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    send_numbered(&producer(&cluster), "Bound", 0..40).await;
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (tx, mut rx) = unbounded_channel::<()>();
    let (r, p) = (running.clone(), peak.clone());
    let consumer = consumer_with(
        &namesrv,
        "bound_group",
        "Bound",
        |c| c.consume_concurrency_max = Some(3),
        move |_messages, ctx| {
            let (r, p, tx) = (r.clone(), p.clone(), tx.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                let _ = tx.send(());
                (ConsumeStatus::Success, ctx)
            }
        },
    )
    .await;
    receive(&mut rx, 40).await;
    assert_eq!(
        peak.load(Ordering::SeqCst),
        3,
        "the limit is reached and never passed"
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_running_consumer_persists_what_it_consumed_with_each_periodic_persist() {
    // Broadcasting: its offsets go to a local file, so nothing but the store's periodic
    // persist can write them while the consumer runs (a clustering consumer's pulls would
    // also carry the commit to the broker).
    let (cluster, namesrv) = cluster_with_topic("LivePersist", 1).await;
    let producer = producer(&cluster);
    send_numbered(&producer, "LivePersist", 0..40).await;
    let dir = std::env::temp_dir().join(format!("rmq-actor-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (tx, mut rx) = unbounded_channel();
    let consumer = recording_consumer(
        &namesrv,
        "live_persist",
        "LivePersist",
        "*",
        0,
        tx,
        broadcasting(dir.clone()),
    )
    .await;
    let queue = common::mq("LivePersist", 0);
    // `<dir>/<instance>/<group>/offsets.json`, the one file of its name there.
    let persisted = || async {
        let instance = std::fs::read_dir(&dir).ok()?.next()?.ok()?.path();
        let file = instance.join("live_persist").join("offsets.json");
        let text = std::fs::read_to_string(file).ok()?;
        let offsets = rocketmq_actor::consumer::decode_local_offsets(&text).ok()?;
        offsets.get(&queue).copied()
    };
    receive(&mut rx, 40).await;
    common::eventually("the file holds offset 40", || async {
        (persisted().await == Some(40)).then_some(())
    })
    .await;
    send_numbered(&producer, "LivePersist", 40..55).await;
    receive(&mut rx, 15).await;
    common::eventually("the file holds offset 55", || async {
        (persisted().await == Some(55)).then_some(())
    })
    .await;
    consumer.shutdown().await;
    cluster.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A by-value listener's batches share their pull's messages; within a run of calls, a batch
/// the listener drops hands its count on the pull to the next call's batch. Batches a
/// listener keeps, past its call and on another thread, must still hold their own messages.
#[actix_rt::test]
async fn batches_a_by_value_listener_keeps_or_sends_away_hold_their_own_messages() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    send_numbered(&producer(&cluster), "KeptBatches", 0..200).await;
    let (kept_tx, mut kept_rx) = unbounded_channel::<Messages>();
    let (dropped_tx, mut dropped_rx) = unbounded_channel::<String>();
    let consumer = from_first_offset(&namesrv, "kept_batches_group", "KeptBatches", "*")
        .listener_fn(move |messages, ctx| {
            let body = text(&messages[0]);
            let number: usize = body[1..].parse().unwrap_or_default();
            // Every third batch is kept (it leaves the call), the others are dropped in it.
            if number.is_multiple_of(3) {
                let _ = kept_tx.send(messages);
            } else {
                let _ = dropped_tx.send(body);
                drop(messages);
            }
            async move { (ConsumeStatus::Success, ctx) }
        })
        .start()
        .await
        .expect("consumer starts");
    let kept_count = (0..200).filter(|n| n % 3 == 0).count();
    let kept = receive(&mut kept_rx, kept_count).await;
    let dropped: BTreeSet<String> = receive(&mut dropped_rx, 200 - kept_count)
        .await
        .into_iter()
        .collect();
    consumer.shutdown().await;
    // Read on another thread, after every later call of the consumer has run.
    let kept_bodies = std::thread::spawn(move || {
        kept.iter()
            .map(|batch| batch.iter().map(text).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    })
    .join()
    .expect("the reader ends");
    assert!(kept_bodies.iter().all(|bodies| bodies.len() == 1));
    let kept_set: BTreeSet<String> = kept_bodies.into_iter().flatten().collect();
    let expected_kept: BTreeSet<String> = (0..200)
        .filter(|n| n % 3 == 0)
        .map(|n| format!("m{n}"))
        .collect();
    assert_eq!(kept_set, expected_kept);
    let expected_dropped: BTreeSet<String> = (0..200)
        .filter(|n| n % 3 != 0)
        .map(|n| format!("m{n}"))
        .collect();
    assert_eq!(dropped, expected_dropped);
    cluster.shutdown().await;
}
