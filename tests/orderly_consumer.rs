//! Orderly and key-ordered consumption end to end on the embedded broker.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use common::{
    client, cluster_with_topic, eventually, fast_retry_cluster, fast_retry_config,
    from_first_offset, producer, receive, receive_within, recording, start_cluster, text, Shared,
    BROKER,
};
use rocketmq_actor::consumer::Messages;
use rocketmq_actor::consumer::{OrderlyContext, OrderlyStatus, PushConsumerConfig};
use rocketmq_actor::Producer;
use rocketmq_actor::PushConsumer;
use rocketmq_actor::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::{Message, MessageExt, MessageQueue};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

/// How long the high-volume tests here wait for the next delivery: thousands of messages go
/// through queue locks and rebalances on a shared machine.
const BULK_PATIENCE: Duration = Duration::from_secs(60);

/// Sends messages `start..start + count`, message i with key `k{i % keys}` and body
/// "k{key}:{seq}". Messages of one key are sent one after the other (concurrent sends give no
/// order guarantee, as with any RocketMQ client); different keys are sent concurrently. A send
/// that times out on a loaded machine is sent again, as an ordered producer would: the copy
/// follows its original, so it can only show up as a duplicate, never out of order.
async fn produce_keyed(producer: &Producer, topic: &str, start: usize, count: usize, keys: usize) {
    let per_key = (0..keys).map(|k| {
        let producer = producer.clone();
        async move {
            let mut i = start + (k + keys - start % keys) % keys;
            while i < start + count {
                let key = format!("k{}", i % keys);
                let body = format!("{key}:{}", i / keys);
                let mut attempts = 0;
                while let Err(e) = producer
                    .send_with_key(Message::new(topic, body.clone()), &key)
                    .await
                {
                    attempts += 1;
                    assert!(attempts < 5, "sending {body} failed {attempts} times: {e}");
                }
                i += keys;
            }
        }
    });
    futures::future::join_all(per_key).await;
}

fn key_and_seq(message: &MessageExt) -> (String, usize) {
    let body = text(message);
    let (key, seq) = body.split_once(':').expect("key:seq body");
    (key.to_owned(), seq.parse().expect("sequence number"))
}

/// A one-broker cluster whose `topic` has `queues` queues holding messages `0..count` of
/// [`produce_keyed`] over `keys` keys, and the address of its name server.
async fn cluster_with_keyed(
    topic: &str,
    queues: i32,
    count: usize,
    keys: usize,
) -> (EmbeddedCluster, String) {
    let (cluster, namesrv) = cluster_with_topic(topic, queues).await;
    produce_keyed(&producer(&cluster), topic, 0, count, keys).await;
    (cluster, namesrv)
}

/// Shared observations of every consumer in the test.
#[derive(Default)]
struct Observed {
    /// Highest sequence seen per key.
    high: HashMap<String, usize>,
    /// Calls running right now per unit of serialization: the queue, or the key in
    /// key-ordered mode.
    active: HashMap<String, usize>,
    /// Key-ordered mode: calls of one queue may overlap, calls of one key may not.
    by_key: bool,
    distinct: BTreeSet<(String, usize)>,
    order_violations: usize,
    overlap_violations: usize,
    duplicates: usize,
}

impl Observed {
    fn record(&mut self, message: &MessageExt) {
        let (key, seq) = key_and_seq(message);
        let high = self.high.get(&key).copied();
        match high {
            // A message may only follow the one before it of its key.
            None if seq != 0 => self.order_violations += 1,
            Some(high) if seq > high + 1 => self.order_violations += 1,
            Some(high) if seq <= high => self.duplicates += 1,
            _ => {}
        }
        self.high
            .insert(key.clone(), high.map_or(seq, |h| h.max(seq)));
        self.distinct.insert((key, seq));
    }
}

async fn orderly_consumer(
    namesrv: &str,
    group: &str,
    topic: &str,
    observed: Shared<Observed>,
    progress: UnboundedSender<()>,
    configure: impl FnOnce(&mut PushConsumerConfig),
) -> PushConsumer {
    from_first_offset(namesrv, group, topic, "*")
        .configure(|c| {
            c.consume_message_batch_max_size = 8;
            c.persist_consumer_offset_interval = Duration::from_millis(100);
            configure(c);
        })
        .orderly_listener_fn(move |messages: Messages, ctx: OrderlyContext| {
            let observed = observed.clone();
            let progress = progress.clone();
            async move {
                let unit = if observed.borrow().by_key {
                    key_and_seq(&messages[0]).0
                } else {
                    ctx.queue.to_string()
                };
                {
                    let mut o = observed.borrow_mut();
                    let running = o.active.entry(unit.clone()).or_default();
                    *running += 1;
                    if *running > 1 {
                        o.overlap_violations += 1;
                    }
                }
                // Give other consumers' calls a chance to interleave with this one.
                tokio::task::yield_now().await;
                {
                    let mut o = observed.borrow_mut();
                    for m in &messages {
                        o.record(m);
                    }
                    if let Some(running) = o.active.get_mut(&unit) {
                        *running -= 1;
                    }
                }
                for _ in &messages {
                    let _ = progress.send(());
                }
                (OrderlyStatus::Success, ctx)
            }
        })
        .start()
        .await
        .expect("consumer starts")
}

#[actix_rt::test]
async fn order_holds_per_queue_while_consumers_join_and_leave() {
    order_holds_while_consumers_join_and_leave(false).await;
}

#[actix_rt::test]
async fn order_holds_per_key_while_key_ordered_consumers_join_and_leave() {
    order_holds_while_consumers_join_and_leave(true).await;
}

/// 100,000 messages over 1,000 keys on 2 brokers × 8 queues, consumed by 3 orderly consumers
/// while members leave and join twice: nothing is lost, no message of a key is consumed before
/// the one before it, and no queue (or key, in key-ordered mode) ever has two calls at once.
async fn order_holds_while_consumers_join_and_leave(by_key: bool) {
    const TOTAL: usize = 100_000;
    const KEYS: usize = 1000;
    let cluster = fast_retry_cluster(2).await;
    let namesrv = cluster.namesrv_addr();
    let topic = if by_key {
        "KeyOrderedChurn"
    } else {
        "OrderedChurn"
    };
    let producer = producer(&cluster);
    produce_keyed(&producer, topic, 0, TOTAL / 2, KEYS).await;
    let observed = Shared::new(Observed {
        by_key,
        ..Observed::default()
    });
    let (tx, mut rx) = unbounded_channel();
    let group = if by_key {
        "key_ordered_churn"
    } else {
        "ordered_churn"
    };
    let mut consumers = Vec::new();
    for _ in 0..3 {
        consumers.push(
            orderly_consumer(&namesrv, group, topic, observed.clone(), tx.clone(), |c| {
                c.key_ordered = by_key
            })
            .await,
        );
    }
    // Members come and go while the second half is produced.
    receive_within(&mut rx, 10_000, BULK_PATIENCE).await;
    consumers.remove(0).shutdown().await;
    produce_keyed(&producer, topic, TOTAL / 2, TOTAL / 4, KEYS).await;
    consumers.push(
        orderly_consumer(&namesrv, group, topic, observed.clone(), tx.clone(), |c| {
            c.key_ordered = by_key
        })
        .await,
    );
    receive_within(&mut rx, 10_000, BULK_PATIENCE).await;
    consumers.remove(1).shutdown().await;
    consumers.push(
        orderly_consumer(&namesrv, group, topic, observed.clone(), tx.clone(), |c| {
            c.key_ordered = by_key
        })
        .await,
    );
    produce_keyed(&producer, topic, TOTAL * 3 / 4, TOTAL / 4, KEYS).await;
    receive_within(&mut rx, 10_000, BULK_PATIENCE).await;
    consumers.remove(0).shutdown().await;
    while observed.borrow().distinct.len() < TOTAL {
        tokio::time::timeout(BULK_PATIENCE, rx.recv())
            .await
            .unwrap_or_else(|_| {
                panic!("stalled at {} of {TOTAL}", observed.borrow().distinct.len())
            })
            .unwrap();
    }
    {
        let o = observed.borrow();
        assert_eq!(o.distinct.len(), TOTAL, "nothing lost");
        assert_eq!(
            o.order_violations, 0,
            "per-key (and so per-queue) order holds"
        );
        assert_eq!(
            o.overlap_violations, 0,
            "never two calls on one queue (one key, in key-ordered mode) at once"
        );
    }
    for c in consumers {
        c.shutdown().await;
    }
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_suspended_batch_is_consumed_again_before_anything_after_it() {
    let (cluster, namesrv) = cluster_with_keyed("Suspend", 1, 10, 1).await;
    let (tx, mut rx) = unbounded_channel::<(usize, i32)>();
    let consumer = from_first_offset(&namesrv, "suspend_group", "Suspend", "*")
        .orderly_listener_fn(move |messages: Messages, mut ctx: OrderlyContext| {
            let tx = tx.clone();
            async move {
                let (_, seq) = key_and_seq(&messages[0]);
                if seq == 3 && messages[0].reconsume_times < 2 {
                    ctx.suspend_time = Duration::from_millis(20);
                    let _ = tx.send((seq, messages[0].reconsume_times));
                    return (OrderlyStatus::SuspendCurrentQueueAMoment, ctx);
                }
                let _ = tx.send((seq, messages[0].reconsume_times));
                (OrderlyStatus::Success, ctx)
            }
        })
        .start()
        .await
        .unwrap();
    let order = receive(&mut rx, 12).await;
    let expected: Vec<(usize, i32)> = (0..3)
        .map(|s| (s, 0))
        .chain([(3, 0), (3, 1), (3, 2)])
        .chain((4..10).map(|s| (s, 0)))
        .collect();
    assert_eq!(order, expected);
    consumer.shutdown().await;
    cluster.shutdown().await;
}

/// A listener that panics while messages `3` (in its closure) and `6` (in its future) are new
/// gets each again after the suspend, before anything after it, and the queue goes on: the
/// panic is a suspend of that one call, not the end of the runtime.
async fn a_panicking_orderly_listener_is_suspended_and_goes_on(key_ordered: bool) {
    let topic = if key_ordered {
        "PanicKeys"
    } else {
        "PanicQueue"
    };
    let (cluster, namesrv) = cluster_with_keyed(topic, 1, 10, 1).await;
    let (tx, mut rx) = unbounded_channel::<(usize, i32)>();
    let consumer = from_first_offset(&namesrv, &format!("{topic}_group"), topic, "*")
        .key_ordered(key_ordered)
        .configure(|c| c.suspend_current_queue_time = Duration::from_millis(20))
        .orderly_listener_fn(move |messages: Messages, ctx: OrderlyContext| {
            let (_, seq) = key_and_seq(&messages[0]);
            let first_delivery = messages[0].reconsume_times == 0;
            if seq == 3 && first_delivery {
                panic!("listener bug in the closure on the first delivery of 3");
            }
            let tx = tx.clone();
            async move {
                if seq == 6 && first_delivery {
                    panic!("listener bug in the future on the first delivery of 6");
                }
                let _ = tx.send((seq, messages[0].reconsume_times));
                (OrderlyStatus::Success, ctx)
            }
        })
        .start()
        .await
        .unwrap();
    let order = receive(&mut rx, 10).await;
    let expected: Vec<(usize, i32)> = (0..10)
        .map(|seq| (seq, i32::from(seq == 3 || seq == 6)))
        .collect();
    assert_eq!(order, expected);
    let stats = consumer.stats().await;
    assert_eq!((stats.consumed_ok, stats.consumed_failed), (10, 2));
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_panicking_orderly_listener_is_suspended_and_the_queue_goes_on() {
    a_panicking_orderly_listener_is_suspended_and_goes_on(false).await;
}

#[actix_rt::test]
async fn a_panicking_key_ordered_listener_is_suspended_and_the_key_goes_on() {
    a_panicking_orderly_listener_is_suspended_and_goes_on(true).await;
}

/// Whether an orderly call's context starts with the defaults (`default_suspend`, auto-commit,
/// queue 0 of `topic`); then changes all of it, which must not reach the next call.
fn started_fresh_then_changed(
    ctx: &mut OrderlyContext,
    default_suspend: Duration,
    topic: &str,
) -> bool {
    let fresh = ctx.suspend_time == default_suspend
        && ctx.auto_commit
        && ctx.queue == MessageQueue::new(topic, BROKER, 0);
    ctx.suspend_time = Duration::from_millis(10);
    ctx.queue.topic.push_str("-changed");
    ctx.queue.queue_id = 99;
    fresh
}

/// What an orderly listener reporting (seq, reconsume times, whether its context started
/// fresh) saw of seq 0..10 when its calls failed on the first delivery of 3 and of 6: every
/// call started fresh, and each failed call came back at once, before the next.
/// Records the call over `messages` (its sequence number, delivery count and whether its
/// context started fresh) and answers as [`expect_fresh_calls_and_failures_at_3_and_6`]
/// expects: the first delivery of 3 panics, the first of 6 suspends the queue.
fn record_then_fail_at_3_and_6(
    messages: &[MessageExt],
    fresh: bool,
    tx: &tokio::sync::mpsc::UnboundedSender<(usize, i32, bool)>,
) -> OrderlyStatus {
    let (_, seq) = key_and_seq(&messages[0]);
    let first_delivery = messages[0].reconsume_times == 0;
    let _ = tx.send((seq, messages[0].reconsume_times, fresh));
    match seq {
        3 if first_delivery => panic!("listener bug on the first delivery of 3"),
        6 if first_delivery => OrderlyStatus::SuspendCurrentQueueAMoment,
        _ => OrderlyStatus::Success,
    }
}

async fn expect_fresh_calls_and_failures_at_3_and_6(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, i32, bool)>,
    consumer: &PushConsumer,
) {
    let seen = receive(rx, 12).await;
    assert!(seen.iter().all(|(_, _, fresh)| *fresh), "{seen:?}");
    let order: Vec<(usize, i32)> = seen.iter().map(|(seq, times, _)| (*seq, *times)).collect();
    let expected: Vec<(usize, i32)> = (0..10)
        .flat_map(|seq| {
            let again = (seq == 3 || seq == 6).then_some((seq, 1));
            std::iter::once((seq, 0)).chain(again)
        })
        .collect();
    assert_eq!(
        order, expected,
        "each failed call comes back at once, before the next"
    );
    // A call's outcome is counted once the consumer has settled it, which may follow the
    // listener's report when the call ran on a consume thread.
    eventually("10 calls counted consumed and 2 failed", || async {
        let stats = consumer.stats().await;
        ((stats.consumed_ok, stats.consumed_failed) == (10, 2)).then_some(())
    })
    .await;
}

async fn a_sync_orderly_listener_keeps_order_through_a_panic_and_a_suspend(key_ordered: bool) {
    let topic = if key_ordered { "SyncKeys" } else { "SyncQueue" };
    let (cluster, namesrv) = cluster_with_keyed(topic, 1, 10, 1).await;
    // (seq, reconsume times, whether the call's context started with the defaults).
    let (tx, mut rx) = unbounded_channel::<(usize, i32, bool)>();
    let default_suspend = Duration::from_millis(20);
    let consumer = from_first_offset(&namesrv, &format!("{topic}_group"), topic, "*")
        .key_ordered(key_ordered)
        .configure(|c| c.suspend_current_queue_time = default_suspend)
        .orderly_listener_sync_fn(move |messages, ctx| {
            let fresh = started_fresh_then_changed(ctx, default_suspend, topic);
            record_then_fail_at_3_and_6(messages, fresh, &tx)
        })
        .start()
        .await
        .unwrap();
    expect_fresh_calls_and_failures_at_3_and_6(&mut rx, &consumer).await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_sync_orderly_listener_keeps_queue_order_through_a_panic_and_a_suspend() {
    a_sync_orderly_listener_keeps_order_through_a_panic_and_a_suspend(false).await;
}

#[actix_rt::test]
async fn a_sync_key_ordered_listener_keeps_key_order_through_a_panic_and_a_suspend() {
    a_sync_orderly_listener_keeps_order_through_a_panic_and_a_suspend(true).await;
}

/// An async orderly listener (queue- or key-ordered) whose every call changes its context's
/// queue and suspend time, and suspends `m6` once: every call must start with the defaults.
async fn an_async_orderly_listener_gets_a_fresh_context_per_call(key_ordered: bool) {
    let topic = if key_ordered {
        "FreshKeys"
    } else {
        "FreshQueue"
    };
    let (cluster, namesrv) = cluster_with_keyed(topic, 1, 10, 1).await;
    let (tx, mut rx) = unbounded_channel::<(usize, bool)>();
    let default_suspend = Duration::from_millis(20);
    let consumer = from_first_offset(&namesrv, &format!("{topic}_group"), topic, "*")
        .key_ordered(key_ordered)
        .configure(|c| c.suspend_current_queue_time = default_suspend)
        .orderly_listener_fn(move |messages: Messages, mut ctx: OrderlyContext| {
            let fresh = started_fresh_then_changed(&mut ctx, default_suspend, topic);
            let (_, seq) = key_and_seq(&messages[0]);
            let _ = tx.send((seq, fresh));
            let status = if seq == 6 && messages[0].reconsume_times == 0 {
                OrderlyStatus::SuspendCurrentQueueAMoment
            } else {
                OrderlyStatus::Success
            };
            std::future::ready((status, ctx))
        })
        .start()
        .await
        .unwrap();
    let seen = receive(&mut rx, 11).await;
    assert!(seen.iter().all(|(_, fresh)| *fresh), "{seen:?}");
    let order: Vec<usize> = seen.iter().map(|(seq, _)| *seq).collect();
    let expected: Vec<usize> = (0..7).chain(6..10).collect();
    assert_eq!(order, expected);
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn an_async_orderly_listener_gets_a_fresh_context_per_call_in_queue_order() {
    an_async_orderly_listener_gets_a_fresh_context_per_call(false).await;
}

#[actix_rt::test]
async fn an_async_key_ordered_listener_gets_a_fresh_context_per_call() {
    an_async_orderly_listener_gets_a_fresh_context_per_call(true).await;
}

/// A borrowing async orderly listener (queue- or key-ordered) whose every call changes its
/// context and whose calls over every third message wait: `3` panics and `6` suspends after
/// waiting, on their first delivery. Every call must start with the defaults, and each failed
/// call must come back at once, before the next.
async fn a_borrowing_orderly_listener_keeps_order_through_waits_panics_and_suspends(
    key_ordered: bool,
) {
    let topic = if key_ordered {
        "BorrowKeys"
    } else {
        "BorrowQueue"
    };
    let (cluster, namesrv) = cluster_with_keyed(topic, 1, 10, 1).await;
    // (seq, reconsume times, whether the call's context started with the defaults).
    let (tx, mut rx) = unbounded_channel::<(usize, i32, bool)>();
    let default_suspend = Duration::from_millis(20);
    let consumer = from_first_offset(&namesrv, &format!("{topic}_group"), topic, "*")
        .key_ordered(key_ordered)
        .configure(|c| c.suspend_current_queue_time = default_suspend)
        .orderly_listener_async(async move |messages, ctx| {
            let fresh = started_fresh_then_changed(ctx, default_suspend, topic);
            let (_, seq) = key_and_seq(&messages[0]);
            if seq % 3 == 0 {
                tokio::task::yield_now().await;
            }
            record_then_fail_at_3_and_6(messages, fresh, &tx)
        })
        .start()
        .await
        .unwrap();
    expect_fresh_calls_and_failures_at_3_and_6(&mut rx, &consumer).await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_borrowing_orderly_listener_keeps_queue_order_through_waits_panics_and_suspends() {
    a_borrowing_orderly_listener_keeps_order_through_waits_panics_and_suspends(false).await;
}

#[actix_rt::test]
async fn a_borrowing_key_ordered_listener_keeps_key_order_through_waits_panics_and_suspends() {
    a_borrowing_orderly_listener_keeps_order_through_waits_panics_and_suspends(true).await;
}

#[actix_rt::test]
async fn rollback_without_auto_commit_replays_since_the_last_commit() {
    let (cluster, namesrv) = cluster_with_keyed("Rollback", 1, 6, 1).await;
    let (tx, mut rx) = unbounded_channel::<usize>();
    let rolled_back = Shared::new(false);
    let consumer = from_first_offset(&namesrv, "rollback_group", "Rollback", "*")
        .orderly_listener_fn(move |messages: Messages, mut ctx: OrderlyContext| {
            let tx = tx.clone();
            let rolled_back = rolled_back.clone();
            async move {
                ctx.auto_commit = false;
                ctx.suspend_time = Duration::from_millis(20);
                let (_, seq) = key_and_seq(&messages[0]);
                let _ = tx.send(seq);
                let status = match seq {
                    1 | 3 | 5 => OrderlyStatus::Commit,
                    2 if !*rolled_back.borrow() => {
                        *rolled_back.borrow_mut() = true;
                        OrderlyStatus::Rollback
                    }
                    _ => OrderlyStatus::Success,
                };
                (status, ctx)
            }
        })
        .start()
        .await
        .unwrap();
    let seen = receive(&mut rx, 7).await;
    // 0,1 committed; 2 rolled back → replayed from 2 (the last commit was after 1).
    assert_eq!(seen, vec![0, 1, 2, 2, 3, 4, 5]);
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_poison_message_goes_to_the_dead_letter_queue_and_the_queue_moves_on() {
    let (cluster, namesrv) = cluster_with_keyed("Poison", 1, 5, 1).await;
    let (tx, mut rx) = unbounded_channel::<(usize, i32)>();
    let consumer = from_first_offset(&namesrv, "poison_group", "Poison", "*")
        .configure(|c| c.max_reconsume_times = Some(2))
        .orderly_listener_fn(move |messages: Messages, mut ctx: OrderlyContext| {
            let tx = tx.clone();
            async move {
                ctx.suspend_time = Duration::from_millis(10);
                let (_, seq) = key_and_seq(&messages[0]);
                let _ = tx.send((seq, messages[0].reconsume_times));
                if seq == 1 {
                    panic!("poison message");
                }
                (OrderlyStatus::Success, ctx)
            }
        })
        .start()
        .await
        .unwrap();
    let seen = receive(&mut rx, 7).await;
    assert_eq!(
        seen,
        vec![(0, 0), (1, 0), (1, 1), (1, 2), (2, 0), (3, 0), (4, 0)],
        "a panic counts as a suspend; at the maximum the message leaves the queue"
    );
    let (dlq_tx, mut dlq_rx) = unbounded_channel();
    let dlq = from_first_offset(&namesrv, "poison_dlq_reader", "%DLQ%poison_group", "*")
        .listener_fn(recording(dlq_tx))
        .start()
        .await
        .unwrap();
    let (dead, _) = receive(&mut dlq_rx, 1).await.remove(0);
    assert_eq!(dead, "k0:1", "the poison message is in the DLQ");
    consumer.shutdown().await;
    dlq.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn key_ordered_mode_runs_keys_concurrently_and_each_key_in_order() {
    const KEYS: usize = 50;
    const TOTAL: usize = 2000;
    let (cluster, namesrv) = cluster_with_keyed("Keyed", 1, TOTAL, KEYS).await;
    let observed = Shared::new(Observed::default());
    let in_flight_keys = Shared::new((HashMap::<String, usize>::new(), 0usize, 0usize));
    let (tx, mut rx) = unbounded_channel::<()>();
    let (o, f) = (observed.clone(), in_flight_keys.clone());
    let consumer = from_first_offset(&namesrv, "keyed_group", "Keyed", "*")
        .configure(|c| c.consume_concurrency_max = Some(16))
        .key_ordered(true)
        .orderly_listener_fn(move |messages: Messages, ctx: OrderlyContext| {
            let (o, f, tx) = (o.clone(), f.clone(), tx.clone());
            async move {
                let (key, _) = key_and_seq(&messages[0]);
                {
                    let mut f = f.borrow_mut();
                    let same_key = f.0.entry(key.clone()).or_default();
                    *same_key += 1;
                    if *same_key > 1 {
                        f.2 += 1; // two calls of one key at once
                    }
                    f.1 = f.1.max(f.0.values().filter(|n| **n > 0).count());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                o.borrow_mut().record(&messages[0]);
                if let Some(n) = f.borrow_mut().0.get_mut(&key) {
                    *n -= 1;
                }
                let _ = tx.send(());
                (OrderlyStatus::Success, ctx)
            }
        })
        .start()
        .await
        .unwrap();
    receive_within(&mut rx, TOTAL, BULK_PATIENCE).await;
    {
        let o = observed.borrow();
        let f = in_flight_keys.borrow();
        assert_eq!(o.distinct.len(), TOTAL);
        assert_eq!(o.order_violations, 0, "each key stays in order");
        assert_eq!(f.2, 0, "never two calls of one key at once");
        assert!(
            f.1 > 1,
            "different keys of one queue ran concurrently (peak {})",
            f.1
        );
    }
    consumer.shutdown().await;
    cluster.shutdown().await;
}

/// `key_ordered(true)` holds whatever the order of the builder's calls: a whole configuration
/// given after it (its default `key_ordered = false`) does not turn it off.
#[actix_rt::test]
async fn key_ordering_survives_a_configuration_given_after_it() {
    const KEYS: usize = 10;
    const TOTAL: usize = 200;
    let (cluster, namesrv) = cluster_with_keyed("KeyedThenConfig", 1, TOTAL, KEYS).await;
    let observed = Shared::new(Observed::default());
    let in_flight_keys = Shared::new((HashMap::<String, usize>::new(), 0usize));
    let (tx, mut rx) = unbounded_channel::<()>();
    let (o, f) = (observed.clone(), in_flight_keys.clone());
    let consumer = from_first_offset(&namesrv, "keyed_then_config", "KeyedThenConfig", "*")
        .key_ordered(true)
        .config(PushConsumerConfig {
            consumer_group: "keyed_then_config".into(),
            consume_from_where: rocketmq_actor::consumer::ConsumeFromWhere::FirstOffset,
            consume_concurrency_max: Some(16),
            ..PushConsumerConfig::default()
        })
        .orderly_listener_fn(move |messages: Messages, ctx: OrderlyContext| {
            let (o, f, tx) = (o.clone(), f.clone(), tx.clone());
            async move {
                let (key, _) = key_and_seq(&messages[0]);
                {
                    let mut f = f.borrow_mut();
                    *f.0.entry(key.clone()).or_default() += 1;
                    f.1 = f.1.max(f.0.values().filter(|n| **n > 0).count());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                o.borrow_mut().record(&messages[0]);
                if let Some(n) = f.borrow_mut().0.get_mut(&key) {
                    *n -= 1;
                }
                let _ = tx.send(());
                (OrderlyStatus::Success, ctx)
            }
        })
        .start()
        .await
        .unwrap();
    receive_within(&mut rx, TOTAL, BULK_PATIENCE).await;
    assert_eq!(
        observed.borrow().order_violations,
        0,
        "each key stays in order"
    );
    let peak = in_flight_keys.borrow().1;
    assert!(
        peak > 1,
        "keys of the one queue ran concurrently (peak {peak}): the consumer is key-ordered"
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}

/// How many of `topic`'s queues on the cluster's broker a new client of `group` gets when it
/// asks for their broker locks (LOCK_BATCH_MQ), as another member would.
async fn locks_another_client_gets(cluster: &EmbeddedCluster, group: &str, topic: &str) -> usize {
    use rocketmq_actor::protocol::body::{
        decode_json, encode_json, LockBatchRequestBody, LockBatchResponseBody,
    };
    use rocketmq_actor::protocol::codes::request_code;
    use rocketmq_actor::protocol::RemotingCommand;
    let intruder = client(cluster);
    let route = intruder.route(topic).await.unwrap();
    let addr = route.master_addr(BROKER).unwrap().to_owned();
    let body = LockBatchRequestBody {
        consumer_group: group.into(),
        client_id: intruder.client_id().to_owned(),
        only_this_broker: true,
        mq_set: route.consume_queues.clone(),
    };
    let command =
        RemotingCommand::request(request_code::LOCK_BATCH_MQ).with_body(encode_json(&body));
    let response = intruder.invoke(&addr, command).await.unwrap();
    let granted: LockBatchResponseBody = decode_json(response.body.as_deref().unwrap()).unwrap();
    intruder.shutdown().await;
    granted.lock_ok_mq_set.len()
}

#[actix_rt::test]
async fn another_client_cannot_lock_a_queue_an_orderly_consumer_holds() {
    let (cluster, namesrv) = cluster_with_keyed("Locked", 2, 10, 2).await;
    let observed = Shared::new(Observed::default());
    let (tx, mut rx) = unbounded_channel();
    let consumer = orderly_consumer(&namesrv, "locked_group", "Locked", observed, tx, |_| {}).await;
    receive(&mut rx, 10).await;
    let queues = consumer.owned_queues().await;
    assert!(queues.iter().filter(|q| q.topic == "Locked").count() == 2);
    assert_eq!(
        locks_another_client_gets(&cluster, "locked_group", "Locked").await,
        0,
        "the consumer's locks are exclusive"
    );
    consumer.shutdown().await;
    // After shutdown the consumer unlocked everything: the other client gets the locks.
    assert_eq!(
        locks_another_client_gets(&cluster, "locked_group", "Locked").await,
        2
    );
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn an_orderly_consumer_renews_its_broker_locks_before_they_expire() {
    // Locks last 400 ms on this broker, and the consumer renews its own every 100 ms.
    let cluster = start_cluster(EmbeddedConfig {
        lock_expiry: Duration::from_millis(400),
        ..fast_retry_config(1)
    })
    .await;
    cluster.create_topic("Renewed", 2).await.unwrap();
    produce_keyed(&producer(&cluster), "Renewed", 0, 10, 2).await;
    let observed = Shared::new(Observed::default());
    let (tx, mut rx) = unbounded_channel();
    let consumer = orderly_consumer(
        &cluster.namesrv_addr(),
        "renew_group",
        "Renewed",
        observed.clone(),
        tx,
        |c| c.lock_interval = Duration::from_millis(100),
    )
    .await;
    receive(&mut rx, 10).await;
    // Three lock lifetimes with no message: only the renewals keep the locks.
    actix_rt::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        locks_another_client_gets(&cluster, "renew_group", "Renewed").await,
        0,
        "the consumer renewed its locks"
    );
    // And it still consumes, in order.
    produce_keyed(&producer(&cluster), "Renewed", 10, 10, 2).await;
    receive(&mut rx, 10).await;
    assert_eq!(observed.borrow().order_violations, 0);
    consumer.shutdown().await;
    cluster.shutdown().await;
}
