//! Harness shared by the end-to-end tests on the embedded broker: starting a cluster, producing
//! numbered messages, consumers that start from the first offset, and waits that are bounded so
//! a test fails instead of hanging.
//!
//! Every test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::fmt::Debug;
use std::future::{Future, Ready};
use std::ops::Range;
use std::time::{Duration, Instant};

use rocketmq_actor::consumer::ConsumeFromWhere;
use rocketmq_actor::consumer::{ConsumeContext, ConsumeStatus, Messages};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::{Client, ClientConfig};
use rocketmq_actor::{Message, MessageExt, MessageQueue};
use rocketmq_actor::{Producer, ProducerConfig, SendResult};
use rocketmq_actor::{PushConsumer, PushConsumerBuilder};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// The first broker of an embedded cluster (the only one of a one-broker cluster).
pub const BROKER: &str = "broker-a";

/// How long a test waits for something that should happen before calling it lost.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// How long a test watches for something that must not happen. Absence can only be observed
/// over time; this is kept short.
pub const QUIET: Duration = Duration::from_millis(500);

/// An ephemeral cluster of `brokers` brokers whose retry delay levels are a thousand times
/// shorter than the real table: level 3 (10 s, the first retry) becomes 10 ms.
pub fn fast_retry_config(brokers: usize) -> EmbeddedConfig {
    EmbeddedConfig {
        brokers,
        delay_scale: 0.001,
        ..EmbeddedConfig::ephemeral()
    }
}

/// A cluster started from `config`; panics if it cannot start.
pub async fn start_cluster(config: EmbeddedConfig) -> EmbeddedCluster {
    EmbeddedCluster::start(config)
        .await
        .expect("embedded cluster starts")
}

/// A cluster started from [`fast_retry_config`].
pub async fn fast_retry_cluster(brokers: usize) -> EmbeddedCluster {
    start_cluster(fast_retry_config(brokers)).await
}

/// A one-broker [`fast_retry_cluster`] with `topic` created on `queues` queues, and the address
/// of its name server.
pub async fn cluster_with_topic(topic: &str, queues: i32) -> (EmbeddedCluster, String) {
    let cluster = fast_retry_cluster(1).await;
    cluster
        .create_topic(topic, queues)
        .await
        .expect("topic created");
    let namesrv = cluster.namesrv_addr();
    (cluster, namesrv)
}

/// A new client instance on the cluster's name server.
pub fn client(cluster: &EmbeddedCluster) -> Client {
    Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client starts")
}

/// A producer with the default configuration on its own client instance.
pub fn producer(cluster: &EmbeddedCluster) -> Producer {
    producer_on(&client(cluster))
}

/// A producer with the default configuration sharing `client`'s routes and connections.
pub fn producer_on(client: &Client) -> Producer {
    Producer::new(client.clone(), ProducerConfig::default())
}

/// Queue `queue_id` of `topic` on [`BROKER`].
pub fn mq(topic: &str, queue_id: i32) -> MessageQueue {
    MessageQueue::new(topic, BROKER, queue_id)
}

/// The body of the `i`th numbered message.
pub fn body_of(i: usize) -> String {
    format!("m{i}")
}

/// A message body as text.
pub fn text(message: &MessageExt) -> String {
    String::from_utf8_lossy(message.body()).into_owned()
}

/// Sends [`body_of`]`(i)` for every `i` of `range`, one at a time (so a one-queue topic stores
/// them in that order).
pub async fn send_numbered(
    producer: &Producer,
    topic: &str,
    range: Range<usize>,
) -> Vec<SendResult> {
    send_numbered_messages(producer, range, |i| Message::new(topic, body_of(i))).await
}

/// [`send_numbered`] with every message tagged `tag`.
pub async fn send_numbered_tagged(
    producer: &Producer,
    topic: &str,
    range: Range<usize>,
    tag: &str,
) -> Vec<SendResult> {
    send_numbered_messages(producer, range, |i| {
        Message::new(topic, body_of(i)).with_tags(tag)
    })
    .await
}

async fn send_numbered_messages(
    producer: &Producer,
    range: Range<usize>,
    message: impl Fn(usize) -> Message,
) -> Vec<SendResult> {
    let mut results = Vec::with_capacity(range.len());
    for i in range {
        results.push(producer.send(message(i)).await.expect("send succeeds"));
    }
    results
}

/// Receives exactly `count` items, panicking if one does not come within [`PATIENCE`] of the
/// one before it or the senders go away.
pub async fn receive<T>(rx: &mut UnboundedReceiver<T>, count: usize) -> Vec<T> {
    receive_within(rx, count, PATIENCE).await
}

/// [`receive`] with its own bound on the wait for each item.
pub async fn receive_within<T>(
    rx: &mut UnboundedReceiver<T>,
    count: usize,
    patience: Duration,
) -> Vec<T> {
    let mut items = Vec::with_capacity(count);
    while items.len() < count {
        match tokio::time::timeout(patience, rx.recv()).await {
            Ok(Some(item)) => items.push(item),
            Ok(None) => panic!("the listener went away after {} of {count}", items.len()),
            Err(_) => panic!("only {} of {count} deliveries arrived", items.len()),
        }
    }
    items
}

/// Asserts that nothing arrives for [`QUIET`] and that the senders are still there.
pub async fn assert_quiet<T: Debug>(rx: &mut UnboundedReceiver<T>, context: &str) {
    match tokio::time::timeout(QUIET, rx.recv()).await {
        Err(_) => {}
        Ok(Some(item)) => panic!("{context}: unexpected delivery {item:?}"),
        Ok(None) => panic!("{context}: the listener went away"),
    }
}

/// Polls `probe` until it yields a value; panics after [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the offset [`BROKER`] holds for `group` on queue 0 of `topic` equals `expected`;
/// panics with the last value seen after [`PATIENCE`].
pub async fn await_committed(cluster: &EmbeddedCluster, group: &str, topic: &str, expected: i64) {
    let mut last = None;
    let reached = tokio::time::timeout(PATIENCE, async {
        loop {
            last = cluster
                .committed_offset(BROKER, group, topic, 0)
                .await
                .expect("broker answers");
            if last == Some(expected) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        reached.is_ok(),
        "the committed offset of {topic}/0 stayed at {last:?}, expected {expected}"
    );
}

/// A consumer of `group` subscribed to `topic` with the tag `expression`, starting from the
/// first offset of every queue the group has no offset for (so it sees what was sent before it
/// started).
pub fn from_first_offset(
    namesrv: &str,
    group: &str,
    topic: &str,
    expression: &str,
) -> PushConsumerBuilder {
    PushConsumer::builder()
        .namesrv_addr(namesrv)
        .group(group)
        .subscribe(topic, expression)
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
}

/// A listener that reports (body, reconsume times) of every message and succeeds.
pub fn recording(
    tx: UnboundedSender<(String, i32)>,
) -> impl Fn(Messages, ConsumeContext) -> Ready<(ConsumeStatus, ConsumeContext)> + 'static {
    move |messages, ctx| {
        for m in &messages {
            let _ = tx.send((text(m), m.reconsume_times));
        }
        std::future::ready((ConsumeStatus::Success, ctx))
    }
}

/// Milliseconds since the Unix epoch on the wall clock (the one brokers stamp messages with).
pub fn now_ms() -> i64 {
    rocketmq_actor::util::now_ms()
}

#[path = "shared.rs"]
mod shared;
#[allow(unused_imports)]
pub use shared::Shared;

/// A name server that accepts connections and never answers (held until the returned task is
/// dropped with the test's runtime); its address.
pub async fn silent_name_server() -> (String, tokio::task::JoinHandle<()>) {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = silent.local_addr().expect("address").to_string();
    let holder = actix_rt::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    (addr, holder)
}
