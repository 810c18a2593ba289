//! Synchronous listeners on the consume threads: a listener that blocks or burns CPU runs on up
//! to `consume_thread_max` threads side by side, orderly queues stay in order, and a panic on
//! a consume thread is retried as one on the consumer's thread.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    cluster_with_topic, eventually, from_first_offset, producer, receive, send_numbered, text,
};
use rocketmq_actor::consumer::{ConsumeMode, ConsumeStatus, OrderlyStatus, PushConsumerConfig};
use rocketmq_actor::{Error, Message};
use tokio::sync::mpsc::unbounded_channel;

/// How long each call of the blocking listeners blocks, as a synchronous database call would.
const BLOCKING_CALL: Duration = Duration::from_millis(5);

/// Listener calls in flight now and the most seen at once; and, for calls that must run one
/// at a time per unit (a queue, a key), the units busy now and how often a call found its
/// unit busy.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    most: AtomicUsize,
    busy: Mutex<HashSet<String>>,
    overlaps: AtomicUsize,
}

impl InFlight {
    /// Runs `call` counted as in flight.
    fn during<T>(&self, call: impl FnOnce() -> T) -> T {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let result = call();
        self.now.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Blocks for [`BLOCKING_CALL`] counted as in flight, as a call of `unit`.
    fn block_as(&self, unit: String) {
        if !self.busy.lock().expect("not poisoned").insert(unit.clone()) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.during(|| std::thread::sleep(BLOCKING_CALL));
        self.busy.lock().expect("not poisoned").remove(&unit);
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }

    fn overlaps(&self) -> usize {
        self.overlaps.load(Ordering::SeqCst)
    }
}

fn thread_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or_default()
        .to_string()
}

#[actix_rt::test]
async fn a_blocking_synchronous_listener_runs_side_by_side_on_the_consume_threads() {
    let (cluster, namesrv) = cluster_with_topic("Blocking", 4).await;
    send_numbered(&producer(&cluster), "Blocking", 0..200).await;
    let in_flight = Arc::new(InFlight::default());
    let (tx, mut rx) = unbounded_channel();
    let calls = in_flight.clone();
    let consumer = from_first_offset(&namesrv, "blocking_group", "Blocking", "*")
        .configure(|c| {
            c.consume_thread_min = 8;
            c.consume_thread_max = 8;
        })
        .listener_sync_fn(move |messages, _ctx| {
            calls.during(|| std::thread::sleep(BLOCKING_CALL));
            for m in messages {
                let _ = tx.send((text(m), thread_name()));
            }
            ConsumeStatus::Success
        })
        .start()
        .await
        .expect("consumer starts");
    let seen = receive(&mut rx, 200).await;
    let bodies: BTreeSet<String> = seen.iter().map(|(body, _)| body.clone()).collect();
    assert_eq!(bodies.len(), 200, "every message, once");
    let pooled: BTreeSet<&str> = seen
        .iter()
        .map(|(_, thread)| thread.as_str())
        .filter(|thread| thread.starts_with("rmq-consume-blocking_group-"))
        .collect();
    // The first call shows the listener is slow; the calls after it run on the pool.
    assert!(
        seen.iter()
            .filter(|(_, thread)| pooled.contains(thread.as_str()))
            .count()
            >= 190,
        "the calls after the first slow ones run on the consume threads"
    );
    assert!(
        (2..=8).contains(&pooled.len()),
        "between 2 and consume_thread_max threads ran calls: {pooled:?}"
    );
    assert!(
        (2..=8).contains(&in_flight.most()),
        "calls ran side by side, at most consume_thread_max at once: {}",
        in_flight.most()
    );
    eventually("200 messages counted consumed", || async {
        (consumer.stats().await.consumed_ok == 200).then_some(())
    })
    .await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_blocking_listener_of_whole_pulls_moves_to_the_consume_threads_too() {
    // One call per pull (batch size 32): each run is a single call, judged as a whole.
    let (cluster, namesrv) = cluster_with_topic("BlockingBatches", 2).await;
    send_numbered(&producer(&cluster), "BlockingBatches", 0..200).await;
    let (tx, mut rx) = unbounded_channel();
    let consumer = from_first_offset(&namesrv, "blocking_batches", "BlockingBatches", "*")
        .configure(|c| c.consume_message_batch_max_size = 32)
        .listener_sync_fn(move |messages, _ctx| {
            std::thread::sleep(BLOCKING_CALL);
            for m in messages {
                let _ = tx.send((text(m), thread_name()));
            }
            ConsumeStatus::Success
        })
        .start()
        .await
        .expect("consumer starts");
    let seen = receive(&mut rx, 200).await;
    let bodies: BTreeSet<&str> = seen.iter().map(|(body, _)| body.as_str()).collect();
    assert_eq!(bodies.len(), 200, "every message, once");
    assert!(
        seen.iter()
            .any(|(_, thread)| thread.starts_with("rmq-consume-blocking_batches-")),
        "later pulls' calls run on the consume threads"
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_blocking_orderly_listener_keeps_each_queue_in_order_and_runs_queues_side_by_side() {
    let (cluster, namesrv) = cluster_with_topic("BlockingOrderly", 4).await;
    send_numbered(&producer(&cluster), "BlockingOrderly", 0..160).await;
    let in_flight = Arc::new(InFlight::default());
    let (tx, mut rx) = unbounded_channel();
    let calls = in_flight.clone();
    let consumer = from_first_offset(&namesrv, "blocking_orderly_group", "BlockingOrderly", "*")
        .orderly_listener_sync_fn(move |messages, ctx| {
            let queue = ctx.queue.queue_id;
            calls.block_as(queue.to_string());
            for m in messages {
                let _ = tx.send((queue, m.queue_offset));
            }
            OrderlyStatus::Success
        })
        .start()
        .await
        .expect("consumer starts");
    let seen = receive(&mut rx, 160).await;
    let mut by_queue: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for (queue, offset) in seen {
        by_queue.entry(queue).or_default().push(offset);
    }
    for (queue, offsets) in &by_queue {
        let expected: Vec<i64> = (0..offsets.len() as i64).collect();
        assert_eq!(offsets, &expected, "queue {queue} consumed once, in order");
    }
    assert_eq!(by_queue.len(), 4);
    assert_eq!(in_flight.overlaps(), 0, "no two calls of one queue at once");
    assert!(
        in_flight.most() >= 2,
        "the queues' calls ran side by side: at most {} at once",
        in_flight.most()
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_blocking_key_ordered_listener_keeps_each_key_in_order_and_runs_keys_side_by_side() {
    let (cluster, namesrv) = cluster_with_topic("BlockingKeys", 1).await;
    let producer = producer(&cluster);
    // 4 keys on one queue, each key's messages numbered in order.
    for i in 0..80 {
        let key = format!("k{}", i % 4);
        let message =
            Message::new("BlockingKeys", format!("{key}:{}", i / 4)).with_keys([key.as_str()]);
        producer.send(message).await.expect("sent");
    }
    let in_flight = Arc::new(InFlight::default());
    let (tx, mut rx) = unbounded_channel();
    let calls = in_flight.clone();
    let consumer = from_first_offset(&namesrv, "blocking_keys_group", "BlockingKeys", "*")
        .key_ordered(true)
        .orderly_listener_sync_fn(move |messages, _ctx| {
            let body = text(&messages[0]);
            let (key, _) = body.split_once(':').expect("key:seq");
            calls.block_as(key.to_owned());
            for m in messages {
                let _ = tx.send(text(m));
            }
            OrderlyStatus::Success
        })
        .start()
        .await
        .expect("consumer starts");
    let seen = receive(&mut rx, 80).await;
    let mut by_key: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for body in seen {
        let (key, seq) = body.split_once(':').expect("key:seq");
        by_key
            .entry(key.to_owned())
            .or_default()
            .push(seq.parse().expect("a number"));
    }
    for (key, seqs) in &by_key {
        assert_eq!(
            seqs,
            &(0..20).collect::<Vec<_>>(),
            "key {key} once, in order"
        );
    }
    assert_eq!(in_flight.overlaps(), 0, "no two calls of one key at once");
    assert!(
        in_flight.most() >= 2,
        "the keys of one queue ran side by side: at most {} at once",
        in_flight.most()
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_panic_on_a_consume_thread_is_retried_like_one_on_the_consumers_thread() {
    let (cluster, namesrv) = cluster_with_topic("PooledPanic", 2).await;
    send_numbered(&producer(&cluster), "PooledPanic", 0..40).await;
    let (tx, mut rx) = unbounded_channel();
    let consumer = from_first_offset(&namesrv, "pooled_panic_group", "PooledPanic", "*")
        .listener_sync_fn(move |messages, _ctx| {
            std::thread::sleep(BLOCKING_CALL);
            for m in messages {
                let pooled = thread_name().starts_with("rmq-consume-");
                // The first delivery of m30 panics once its calls run on the pool.
                if text(m) == "m30" && m.reconsume_times == 0 && pooled {
                    panic!("the listener fails on m30");
                }
                let _ = tx.send((text(m), m.reconsume_times, pooled));
            }
            ConsumeStatus::Success
        })
        .start()
        .await
        .expect("consumer starts");
    let seen = receive(&mut rx, 40).await;
    let m30: Vec<_> = seen.iter().filter(|(body, ..)| body == "m30").collect();
    assert_eq!(m30.len(), 1, "m30 once more, after its panic");
    let (_, reconsume_times, pooled) = m30[0];
    assert!(*pooled, "m30 ran on a consume thread");
    assert_eq!(*reconsume_times, 1, "m30 came back as a retry");
    let bodies: BTreeSet<&str> = seen.iter().map(|(body, ..)| body.as_str()).collect();
    assert_eq!(bodies.len(), 40, "nothing lost");
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn an_orderly_listener_keeps_the_consumer_orderly_when_a_configuration_follows() {
    let (cluster, namesrv) = cluster_with_topic("OrderlyThenConfig", 2).await;
    send_numbered(&producer(&cluster), "OrderlyThenConfig", 0..20).await;
    let (tx, mut rx) = unbounded_channel();
    let consumer = from_first_offset(&namesrv, "orderly_then_config", "OrderlyThenConfig", "*")
        .orderly_listener_sync_fn(move |messages, ctx| {
            for m in messages {
                let _ = tx.send((ctx.queue.queue_id, m.queue_offset));
            }
            OrderlyStatus::Success
        })
        // A whole configuration given after the listener: its default concurrent mode does
        // not replace the listener's.
        .config(PushConsumerConfig {
            consumer_group: "orderly_then_config".into(),
            consume_from_where: rocketmq_actor::consumer::ConsumeFromWhere::FirstOffset,
            ..PushConsumerConfig::default()
        })
        .start()
        .await
        .expect("consumer starts");
    let seen = receive(&mut rx, 20).await;
    assert_eq!(seen.len(), 20);
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_configuration_asking_for_orderly_consumption_needs_an_orderly_listener() {
    let (cluster, namesrv) = cluster_with_topic("OrderlyConfig", 1).await;
    let started = from_first_offset(&namesrv, "orderly_config", "OrderlyConfig", "*")
        .listener_sync_fn(|_messages, _ctx| ConsumeStatus::Success)
        .configure(|c| c.consume_mode = ConsumeMode::Orderly)
        .start()
        .await;
    match started {
        Err(Error::Config { option, value, .. }) => {
            assert_eq!((option, value.as_str()), ("consume_mode", "orderly"));
        }
        other => panic!(
            "expected a configuration error, got {:?}",
            other.map(|_| ())
        ),
    }
    cluster.shutdown().await;
}
