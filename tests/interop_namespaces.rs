//! Namespaces against a real RocketMQ cluster (one name server, brokers `broker-a` and
//! `broker-b`), e.g. the one `scripts/real-cluster.sh start` runs. Wrapping is done by the
//! client alone, so a broker needs nothing special: these tests check that two namespaces
//! sharing topic and group names stay apart on it, that retries go through
//! `%RETRY%<namespace>%<group>` and come back under the original, unwrapped topic, and that the
//! pull kinds keep their offsets under the wrapped group.
//!
//! ```text
//! scripts/real-cluster.sh start
//! ROCKETMQ_NAMESRV=127.0.0.1:9876 cargo test --test interop_namespaces -- --ignored
//! ```
//!
//! Names are fresh per run (time-stamped); topics are created up front on both brokers under
//! their wire names (`<namespace>%<topic>`), as an operator would.

mod interop_common;
use interop_common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::pull::{LitePullConsumer, PullConsumer, PullStatus};
use rocketmq_actor::{Client, Message, MessageQueue, Producer, ProducerConfig, PushConsumer};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// A real broker takes its time: a retry waits for its delay level (10 s for the first).
const PATIENCE: Duration = Duration::from_secs(90);

/// A producer in `namespace`.
fn producer_in(client: &Client, namespace: &str) -> Producer {
    Producer::new(
        client.clone(),
        ProducerConfig {
            namespace: Some(namespace.to_owned()),
            ..ProducerConfig::default()
        },
    )
}

/// Sends `"{tag}-m{i}"` for every `i` of `0..count` to `topic` (unwrapped name); returns the
/// end offset of each queue, named as on the wire.
async fn send(
    producer: &Producer,
    namespace: &str,
    topic: &str,
    tag: &str,
    count: usize,
) -> BTreeMap<MessageQueue, i64> {
    let mut ends = BTreeMap::new();
    for i in 0..count {
        let sent = producer
            .send(Message::new(topic, format!("{tag}-m{i}")))
            .await
            .unwrap_or_else(|e| panic!("send {i}: {e}"));
        assert_eq!(
            sent.queue.topic, topic,
            "the send result names the user's topic"
        );
        let wire = MessageQueue::new(
            format!("{namespace}%{topic}"),
            &sent.queue.broker_name,
            sent.queue.queue_id,
        );
        let end = ends.entry(wire).or_insert(0);
        *end = (*end).max(sent.queue_offset + 1);
    }
    ends
}

async fn receive<T>(rx: &mut UnboundedReceiver<T>, count: usize) -> Vec<T> {
    let deadline = Instant::now() + PATIENCE;
    let mut items = Vec::with_capacity(count);
    while items.len() < count {
        match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
            Ok(Some(item)) => items.push(item),
            Ok(None) => panic!("the listener went away after {} of {count}", items.len()),
            Err(_) => panic!("only {} of {count} deliveries arrived", items.len()),
        }
    }
    items
}

/// Waits until `group` (wire name) committed at least the end of every queue of `ends`.
async fn await_committed(client: &Client, group: &str, ends: &BTreeMap<MessageQueue, i64>) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut behind = Vec::new();
        for (queue, end) in ends {
            let committed = client
                .query_consumer_offset(group, queue)
                .await
                .ok()
                .flatten();
            if committed.is_none_or(|c| c < *end) {
                behind.push(format!("{queue}: {committed:?} < {end}"));
            }
        }
        if behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{group} did not commit to the end: {behind:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn two_namespaces_stay_apart_and_retry_through_their_own_retry_topics() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("NsOrders");
    let group = unique("ns_billing");
    let namespaces = [unique("nsA"), unique("nsB")];
    const COUNT: usize = 8;
    let mut ends = Vec::new();
    for (index, ns) in namespaces.iter().enumerate() {
        create_topic(&client, &namesrv, &format!("{ns}%{topic}")).await;
        let producer = producer_in(&client, ns);
        ends.push(send(&producer, ns, &topic, &format!("t{index}"), COUNT).await);
    }
    let mut consumers = Vec::new();
    let mut receivers = Vec::new();
    for ns in &namespaces {
        let (tx, rx) = unbounded_channel::<(String, String, i32, String)>();
        // Fails the first delivery of every message, accepts the second.
        let failed_once = std::sync::Mutex::new(BTreeSet::new());
        let consumer = PushConsumer::builder()
            .namesrv_addr(namesrv.as_str())
            .namespace(ns.as_str())
            .group(group.as_str())
            .subscribe(topic.as_str(), "*")
            .configure(|c| {
                c.consume_from_where = ConsumeFromWhere::FirstOffset;
                c.persist_consumer_offset_interval = Duration::from_millis(200);
            })
            .listener_fn(move |messages, ctx| {
                let mut status = ConsumeStatus::Success;
                for m in &messages {
                    let body = String::from_utf8_lossy(m.body()).into_owned();
                    let first = failed_once
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(body.clone());
                    if first {
                        status = ConsumeStatus::ReconsumeLater;
                    }
                    let _ = tx.send((
                        m.topic().to_owned(),
                        body,
                        m.reconsume_times,
                        ctx.queue.topic.clone(),
                    ));
                }
                std::future::ready((status, ctx))
            })
            .start()
            .await
            .expect("consumer starts");
        consumers.push(consumer);
        receivers.push(rx);
    }
    let retry = format!("%RETRY%{group}");
    for (index, rx) in receivers.iter_mut().enumerate() {
        let seen = receive(rx, 2 * COUNT).await;
        let mut by_body: BTreeMap<String, Vec<(i32, String)>> = BTreeMap::new();
        for (message_topic, body, times, queue_topic) in seen {
            assert_eq!(
                message_topic, topic,
                "the listener sees the unwrapped original topic"
            );
            by_body.entry(body).or_default().push((times, queue_topic));
        }
        let expected: BTreeSet<String> = (0..COUNT).map(|i| format!("t{index}-m{i}")).collect();
        assert_eq!(
            by_body.keys().cloned().collect::<BTreeSet<_>>(),
            expected,
            "namespace {index} gets exactly its own messages"
        );
        for (body, deliveries) in &by_body {
            assert_eq!(
                deliveries,
                &vec![(0, topic.clone()), (1, retry.clone())],
                "{body}: first from the topic, then from the group's retry topic (unwrapped)"
            );
        }
    }
    for (ns, ends) in namespaces.iter().zip(&ends) {
        await_committed(&client, &format!("{ns}%{group}"), ends).await;
        // The broker knows the group's retry topic under its wire name.
        client
            .refresh_route(&format!("%RETRY%{ns}%{group}"))
            .await
            .expect("the namespaced retry topic is routed");
    }
    for consumer in consumers {
        consumer.shutdown().await;
    }
    client.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn the_pull_kinds_under_a_namespace_keep_offsets_under_the_wrapped_group() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let ns = unique("nsP");
    let topic = unique("NsLedger");
    const COUNT: usize = 16;
    let route = create_topic(&client, &namesrv, &format!("{ns}%{topic}")).await;
    let ends = send(&producer_in(&client, &ns), &ns, &topic, "p", COUNT).await;

    // The pull consumer: unwrapped queues in, unwrapped messages out.
    let group = unique("ns_puller");
    let consumer = PullConsumer::builder()
        .client(client.clone())
        .namespace(ns.as_str())
        .group(group.as_str())
        .start()
        .await
        .expect("pull consumer starts");
    let queues = consumer
        .fetch_subscribe_message_queues(&topic)
        .await
        .expect("queues");
    assert_eq!(queues.len(), route.consume_queues.len());
    assert!(queues.iter().all(|q| q.topic == topic), "{queues:?}");
    let mut bodies = BTreeSet::new();
    for queue in &queues {
        // Up to the end the sends reported (a broker may acknowledge a send a moment before
        // the message can be pulled: the long poll waits for it).
        let wire = MessageQueue::new(format!("{ns}%{topic}"), &queue.broker_name, queue.queue_id);
        let end = ends.get(&wire).copied().unwrap_or(0);
        let mut offset = 0;
        while offset < end {
            let result = consumer
                .pull_block_if_not_found(queue, "*", offset, 32)
                .await
                .expect("pull");
            if result.status == PullStatus::Found {
                for m in &result.messages {
                    assert_eq!(m.topic(), topic);
                    bodies.insert(String::from_utf8_lossy(m.body()).into_owned());
                }
            }
            offset = result.next_begin_offset;
        }
        consumer.update_consume_offset(queue, offset).await;
    }
    assert_eq!(bodies.len(), COUNT);
    consumer
        .persist_consume_offsets()
        .await
        .expect("offsets persisted");
    await_committed(&client, &format!("{ns}%{group}"), &ends).await;
    consumer.shutdown().await;

    // The lite pull consumer, subscribed: the same, through poll and commit_sync.
    let group = unique("ns_lite");
    let lite = LitePullConsumer::builder()
        .client(client.clone())
        .namespace(ns.as_str())
        .group(group.as_str())
        .subscribe(topic.as_str(), "*")
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::FirstOffset;
            c.auto_commit = false;
        })
        .start()
        .await
        .expect("lite consumer starts");
    let mut bodies = BTreeSet::new();
    let deadline = Instant::now() + PATIENCE;
    while bodies.len() < COUNT {
        assert!(
            Instant::now() < deadline,
            "only {} of {COUNT} polled",
            bodies.len()
        );
        for m in lite.poll_timeout(Duration::from_secs(5)).await {
            assert_eq!(m.topic(), topic);
            bodies.insert(String::from_utf8_lossy(m.body()).into_owned());
        }
    }
    assert!(lite.assignment().await.iter().all(|q| q.topic == topic));
    lite.commit_sync().await.expect("committed");
    await_committed(&client, &format!("{ns}%{group}"), &ends).await;
    lite.shutdown().await;
    client.shutdown().await;
}
