//! The push consumer end to end, on the embedded broker, through the public API.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use rocketmq_actor::actors::broker::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::actors::client::{Client, ClientConfig};
use rocketmq_actor::actors::consumer::PushConsumer;
use rocketmq_actor::actors::listener::ConsumeStatus;
use rocketmq_actor::actors::producer::{Producer, ProducerConfig};
use rocketmq_actor::consumer::{ConsumeFromWhere, MessageModel};
use rocketmq_actor::{Message, MessageExt, MessageQueue};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// What a listener saw: (consumer index, user-visible topic, body, reconsume times, queue).
#[derive(Debug, Clone)]
struct Seen {
    consumer: usize,
    body: String,
    tags: Option<String>,
    reconsume_times: i32,
    queue: MessageQueue,
}

async fn cluster(brokers: usize) -> EmbeddedCluster {
    EmbeddedCluster::start(EmbeddedConfig {
        brokers,
        delay_scale: 0.001,
        ..EmbeddedConfig::ephemeral()
    })
    .await
    .expect("embedded cluster starts")
}

async fn produce(namesrv: &str, topic: &str, count: usize, tag: Option<&str>) -> Producer {
    let client = Client::start(ClientConfig::new(namesrv)).unwrap();
    let producer = Producer::new(client, ProducerConfig::default());
    for i in 0..count {
        let mut message = Message::new(topic, format!("m{i}"));
        if let Some(tag) = tag {
            message = message.with_tags(tag);
        }
        producer.send(message).await.expect("send succeeds");
    }
    producer
}

fn seen_of(consumer: usize, messages: &[MessageExt], queue: &MessageQueue) -> Vec<Seen> {
    messages
        .iter()
        .map(|m| Seen {
            consumer,
            body: String::from_utf8_lossy(m.body()).into_owned(),
            tags: m.tags().map(str::to_owned),
            reconsume_times: m.reconsume_times,
            queue: queue.clone(),
        })
        .collect()
}

/// A consumer that records every message and always succeeds.
async fn recording_consumer(
    namesrv: &str,
    group: &str,
    topic: &str,
    expression: &str,
    index: usize,
    sink: UnboundedSender<Seen>,
    model: MessageModel,
    offset_dir: Option<std::path::PathBuf>,
) -> PushConsumer {
    PushConsumer::builder()
        .namesrv_addr(namesrv)
        .group(group)
        .subscribe(topic, expression)
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::FirstOffset;
            c.message_model = model;
            c.offset_store_dir = offset_dir;
            c.persist_consumer_offset_interval = Duration::from_millis(200);
        })
        .listener_fn(move |messages, ctx| {
            let sink = sink.clone();
            async move {
                for seen in seen_of(index, &messages, &ctx.queue) {
                    let _ = sink.send(seen);
                }
                (ConsumeStatus::Success, ctx)
            }
        })
        .start()
        .await
        .expect("consumer starts")
}

async fn receive(rx: &mut UnboundedReceiver<Seen>, count: usize) -> Vec<Seen> {
    let mut seen = Vec::with_capacity(count);
    while seen.len() < count {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
            Ok(Some(s)) => seen.push(s),
            Ok(None) => break,
            Err(_) => panic!("only {} of {count} messages arrived", seen.len()),
        }
    }
    seen
}

fn bodies(seen: &[Seen]) -> BTreeSet<String> {
    seen.iter().map(|s| s.body.clone()).collect()
}

#[actix_rt::test]
async fn a_consumer_receives_every_message_of_a_topic() {
    let cluster = cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    produce(&namesrv, "Basic", 100, None).await;
    let (tx, mut rx) = unbounded_channel();
    let consumer = recording_consumer(
        &namesrv,
        "basic_group",
        "Basic",
        "*",
        0,
        tx,
        MessageModel::Clustering,
        None,
    )
    .await;
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
    let cluster = cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    let producer = produce(&namesrv, "Restart", 50, None).await;
    let (tx, mut rx) = unbounded_channel();
    let first = recording_consumer(
        &namesrv,
        "restart_group",
        "Restart",
        "*",
        0,
        tx.clone(),
        MessageModel::Clustering,
        None,
    )
    .await;
    let before = receive(&mut rx, 50).await;
    first.shutdown().await;
    for i in 50..80 {
        producer
            .send(Message::new("Restart", format!("m{i}")))
            .await
            .unwrap();
    }
    let second = recording_consumer(
        &namesrv,
        "restart_group",
        "Restart",
        "*",
        1,
        tx,
        MessageModel::Clustering,
        None,
    )
    .await;
    let after = receive(&mut rx, 30).await;
    let expected: BTreeSet<String> = (50..80).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies(&after), expected, "the restarted consumer gets only the new messages");
    assert_eq!(before.len() + after.len(), 80);
    // Nothing else arrives: every message was delivered exactly once.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), rx.recv()).await.is_err(),
        "a duplicate arrived"
    );
    second.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn tag_filtering_delivers_only_matching_tags_even_on_hash_collisions() {
    let cluster = cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    // "Aa" and "BB" have the same Java hash code: the broker cannot tell them apart.
    produce(&namesrv, "Tags", 20, Some("Aa")).await;
    produce(&namesrv, "Tags", 20, Some("BB")).await;
    produce(&namesrv, "Tags", 20, Some("Other")).await;
    let (tx, mut rx) = unbounded_channel();
    let consumer = recording_consumer(
        &namesrv,
        "tags_group",
        "Tags",
        "Aa",
        0,
        tx,
        MessageModel::Clustering,
        None,
    )
    .await;
    let seen = receive(&mut rx, 20).await;
    assert!(seen.iter().all(|s| s.tags.as_deref() == Some("Aa")));
    assert!(
        tokio::time::timeout(Duration::from_millis(500), rx.recv()).await.is_err(),
        "a message with another tag was delivered"
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn three_consumers_share_two_brokers_without_loss_while_members_come_and_go() {
    let cluster = cluster(2).await;
    let namesrv = cluster.namesrv_addr();
    let topic = "Shared";
    let producer = produce(&namesrv, topic, 300, None).await;
    let (tx, mut rx) = unbounded_channel();
    let start = |i: usize, tx: UnboundedSender<Seen>| {
        let namesrv = namesrv.clone();
        async move {
            recording_consumer(
                &namesrv,
                "shared_group",
                topic,
                "*",
                i,
                tx,
                MessageModel::Clustering,
                None,
            )
            .await
        }
    };
    let c0 = start(0, tx.clone()).await;
    let c1 = start(1, tx.clone()).await;
    let mut seen = receive(&mut rx, 100).await;
    let c2 = start(2, tx.clone()).await;
    for i in 300..600 {
        producer
            .send(Message::new(topic, format!("m{i}")))
            .await
            .unwrap();
    }
    seen.extend(receive(&mut rx, 200).await);
    c1.shutdown().await;
    for i in 600..900 {
        producer
            .send(Message::new(topic, format!("m{i}")))
            .await
            .unwrap();
    }
    let c3 = start(3, tx.clone()).await;
    // Everything arrives (at-least-once across rebalances: duplicates are allowed, loss is not).
    let expected: BTreeSet<String> = (0..900).map(|i| format!("m{i}")).collect();
    while bodies(&seen) != expected {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
            Ok(Some(s)) => seen.push(s),
            _ => panic!(
                "lost messages: {:?}",
                expected.difference(&bodies(&seen)).take(10).collect::<Vec<_>>()
            ),
        }
    }
    // Once settled, each of the 16 queues is owned by exactly one consumer.
    let mut owners: HashMap<MessageQueue, usize> = HashMap::new();
    for _ in 0..100 {
        owners.clear();
        let mut total = 0;
        for (i, c) in [(0, &c0), (2, &c2), (3, &c3)] {
            for mq in c.owned_queues().await.into_iter().filter(|q| q.topic == topic) {
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
    assert_eq!(per_consumer.len(), 3, "all three live consumers own queues: {per_consumer:?}");
    for c in [c0, c2, c3] {
        c.shutdown().await;
    }
    cluster.shutdown().await;
}
