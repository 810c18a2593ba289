//! SQL92 selectors against a real RocketMQ cluster: `broker-a` filters by SQL92
//! (`enablePropertyFilter = true`), `broker-b` does not (scripts/real-cluster.sh). A push, a
//! lite pull and a pull consumer get exactly the selected messages from broker-a; the
//! precheck refuses broker-b at `start()` with the way to switch filtering on.
//!
//! ```text
//! scripts/real-cluster.sh start
//! ROCKETMQ_NAMESRV=127.0.0.1:9876 cargo test --test interop_sql -- --ignored
//! ```
//!
//! The rocketmq-rust 1.0.0 broker evaluates SQL92 without the message's properties (its
//! `MessageDecoder::decode_properties` advances its buffer to the topic, then indexes it from
//! the record's start, finds nothing, and every property reads as NULL: `region IS NOT NULL`
//! selects no message). The two selection tests (`…gets_exactly…`) fail against it for that
//! reason, so `.ci/run` skips them there and says so; they pass against a broker that reads
//! properties.

mod interop_common;
use interop_common::*;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::filter::Selector;
use rocketmq_actor::pull::{LitePullConsumer, PullConsumer};
use rocketmq_actor::{Client, Error, Message, MessageExt, MessageQueue, Producer};
use rocketmq_actor::{ProducerConfig, PushConsumer};
use tokio::sync::mpsc::unbounded_channel;

const PATIENCE: Duration = Duration::from_secs(60);
const EU_ABOVE_20: &str = "region = 'eu' AND amount > 20";
const ORDERS: usize = 104;

/// Orders 0..104: region `eu` for those ending in 3, amount = the number.
async fn produce_orders(client: &Client, topic: &str) {
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for i in 0..ORDERS {
        let region = if i % 10 == 3 { "eu" } else { "us" };
        let message = Message::new(topic, format!("m{i}"))
            .with_property("region", region)
            .with_property("amount", i.to_string());
        producer
            .send(message)
            .await
            .unwrap_or_else(|e| panic!("send m{i}: {e}"));
    }
}

fn selected() -> BTreeSet<String> {
    (0..ORDERS)
        .filter(|i| i % 10 == 3 && *i > 20)
        .map(|i| format!("m{i}"))
        .collect()
}

fn text(message: &MessageExt) -> String {
    String::from_utf8_lossy(message.body()).into_owned()
}

/// A topic on the filtering broker holding the orders.
async fn filtering_topic(client: &Client, namesrv: &str) -> String {
    let topic = unique("SqlOrders");
    create_topic_on(client, namesrv, &topic, &["broker-a"]).await;
    produce_orders(client, &topic).await;
    topic
}

#[actix_rt::test]
#[ignore = "needs a real cluster: scripts/real-cluster.sh start; ROCKETMQ_NAMESRV"]
async fn a_push_consumer_gets_exactly_the_selection_from_a_filtering_broker() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = filtering_topic(&client, &namesrv).await;
    let (tx, mut rx) = unbounded_channel();
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .group(unique("sql_push"))
        .subscribe(&topic, Selector::sql(EU_ABOVE_20))
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .listener_sync_fn(move |messages, _ctx| {
            for m in messages {
                let _ = tx.send(text(m));
            }
            ConsumeStatus::Success
        })
        .start()
        .await
        .expect("the consumer starts");
    let mut got = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while got.len() < selected().len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(body)) => got.push(body),
            _ => panic!("only {got:?} came"),
        }
    }
    // Anything the broker should have filtered out would come within this second.
    if let Ok(Some(extra)) = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
        panic!("{extra} is not selected");
    }
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), selected());
    consumer.shutdown().await;
    client.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: scripts/real-cluster.sh start; ROCKETMQ_NAMESRV"]
async fn a_lite_and_a_pull_consumer_get_exactly_the_selection() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = filtering_topic(&client, &namesrv).await;
    let lite = LitePullConsumer::builder()
        .client(client.clone())
        .group(unique("sql_lite"))
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .subscribe(&topic, Selector::sql(EU_ABOVE_20))
        .start()
        .await
        .expect("the lite consumer starts");
    let mut got = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while got.len() < selected().len() {
        assert!(Instant::now() < deadline, "only {got:?} came");
        got.extend(
            lite.poll_timeout(Duration::from_millis(500))
                .await
                .iter()
                .map(text),
        );
    }
    assert!(lite.poll_timeout(Duration::from_secs(1)).await.is_empty());
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), selected());
    lite.shutdown().await;

    let pull = PullConsumer::builder()
        .client(client.clone())
        .group(unique("sql_pull"))
        .start()
        .await
        .expect("the pull consumer starts");
    let mut pulled = BTreeSet::new();
    for queue_id in 0..QUEUES_PER_BROKER {
        let queue = MessageQueue::new(&topic, "broker-a", queue_id);
        let end = client.max_offset(&queue).await.expect("max offset");
        let mut offset = 0;
        while offset < end {
            let result = pull
                .pull(&queue, Selector::sql(EU_ABOVE_20), offset, 8)
                .await
                .expect("the pull succeeds");
            assert!(result.next_begin_offset > offset, "{result:?}");
            pulled.extend(result.messages.iter().map(text));
            offset = result.next_begin_offset;
        }
    }
    assert_eq!(pulled, selected());
    pull.shutdown().await;
    client.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: scripts/real-cluster.sh start; ROCKETMQ_NAMESRV"]
async fn a_sql92_subscription_registers_with_the_broker_as_java_sends_it() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = filtering_topic(&client, &namesrv).await;
    let group = unique("sql_registered");
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .group(&group)
        .subscribe(&topic, Selector::sql(EU_ABOVE_20))
        .listener_sync_fn(|_, _| ConsumeStatus::Success)
        .start()
        .await
        .expect("the consumer starts");
    let connections = client
        .consumer_connections(&group)
        .await
        .expect("the broker lists the group");
    let subscription = connections
        .subscription_table
        .get(&topic)
        .unwrap_or_else(|| panic!("no subscription of {topic}: {connections:?}"));
    assert_eq!(subscription.expression_type, "SQL92");
    assert_eq!(subscription.sub_string, EU_ABOVE_20);
    assert!(subscription.tags_set.is_empty() && subscription.code_set.is_empty());
    consumer.shutdown().await;
    client.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: scripts/real-cluster.sh start; ROCKETMQ_NAMESRV"]
async fn a_broker_without_property_filtering_is_refused_at_start() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("SqlRefused");
    create_topic_on(&client, &namesrv, &topic, &["broker-b"]).await;
    let check = |started: Result<(), Error>| match started {
        Err(Error::SelectorRefused { broker, reason, .. }) => {
            assert_eq!(broker, "broker-b");
            assert!(reason.contains("enablePropertyFilter"), "{reason}");
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(()) => panic!("started against a broker without property filtering"),
    };
    check(
        PushConsumer::builder()
            .client(client.clone())
            .group(unique("sql_refused"))
            .subscribe(&topic, Selector::sql(EU_ABOVE_20))
            .listener_sync_fn(|_, _| ConsumeStatus::Success)
            .start()
            .await
            .map(drop),
    );
    check(
        LitePullConsumer::builder()
            .client(client.clone())
            .group(unique("sql_refused_lite"))
            .subscribe(&topic, Selector::sql(EU_ABOVE_20))
            .start()
            .await
            .map(drop),
    );
    client.shutdown().await;
}
