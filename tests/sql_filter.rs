//! SQL92 selectors on the embedded broker: every consumer kind gets exactly the messages its
//! expression selects, a syntax error fails before anything is sent, and a broker without
//! property filtering refuses at `start()` with the way to switch it on.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{
    assert_quiet, fast_retry_config, from_first_offset, mq, producer_on, receive, start_cluster,
    text, PATIENCE,
};
use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus, OrderlyStatus};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::filter::Selector;
use rocketmq_actor::pull::{LitePullConsumer, PullConsumer, PullStatus};
use rocketmq_actor::PushConsumerBuilder;
use rocketmq_actor::{Client, ClientConfig, Error, Message, MessageExt, Producer, ProducerConfig};
use tokio::sync::mpsc::unbounded_channel;

/// Selects orders of region `eu` above 20: of orders 0..=103, those numbered 23, 33, … 103.
const EU_ABOVE_20: &str = "region = 'eu' AND amount > 20";

fn order(topic: &str, i: usize) -> Message {
    let region = if i % 10 == 3 { "eu" } else { "us" };
    Message::new(topic, format!("m{i}"))
        .with_property("region", region)
        .with_property("amount", i.to_string())
}

fn selected() -> Vec<String> {
    (0..=103)
        .filter(|i| i % 10 == 3 && *i > 20)
        .map(|i| format!("m{i}"))
        .collect()
}

/// A cluster with `topic` on one queue (so the last order, which is selected, arrives after
/// every other) holding orders 0..=103.
async fn cluster_with_orders(topic: &str, config: EmbeddedConfig) -> (EmbeddedCluster, Client) {
    let cluster = start_cluster(config).await;
    cluster.create_topic(topic, 1).await.expect("topic created");
    let client = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client starts");
    let producer = producer_on(&client);
    for i in 0..=103 {
        producer.send(order(topic, i)).await.expect("send succeeds");
    }
    (cluster, client)
}

/// A push consumer of `group` reading `Orders` from its start by [`EU_ABOVE_20`].
fn eu_consumer(cluster: &EmbeddedCluster, group: &str) -> PushConsumerBuilder {
    from_first_offset(&cluster.namesrv_addr(), group, "Orders", "*")
        .subscribe("Orders", Selector::sql(EU_ABOVE_20))
}

fn bodies(messages: &[MessageExt]) -> Vec<String> {
    messages.iter().map(text).collect()
}

#[actix_rt::test]
async fn a_push_consumer_gets_exactly_what_its_expression_selects() {
    let (cluster, _client) = cluster_with_orders("Orders", fast_retry_config(1)).await;
    let (tx, mut rx) = unbounded_channel();
    let consumer = eu_consumer(&cluster, "eu_billing")
        .listener_sync_fn(move |messages, _ctx| {
            for m in messages {
                let _ = tx.send(text(m));
            }
            ConsumeStatus::Success
        })
        .start()
        .await
        .expect("the consumer starts");
    let got: BTreeSet<String> = receive(&mut rx, selected().len())
        .await
        .into_iter()
        .collect();
    assert_eq!(got, selected().into_iter().collect::<BTreeSet<_>>());
    assert_quiet(&mut rx, "a message the expression does not select").await;
    consumer.shutdown().await;
}

#[actix_rt::test]
async fn an_orderly_consumer_gets_the_selection_in_queue_order() {
    let (cluster, _client) = cluster_with_orders("Orders", fast_retry_config(1)).await;
    let (tx, mut rx) = unbounded_channel();
    let consumer = eu_consumer(&cluster, "eu_ledger")
        .orderly_listener_sync_fn(move |messages, _ctx| {
            for m in messages {
                let _ = tx.send(text(m));
            }
            OrderlyStatus::Success
        })
        .start()
        .await
        .expect("the consumer starts");
    assert_eq!(receive(&mut rx, selected().len()).await, selected());
    assert_quiet(&mut rx, "a message the expression does not select").await;
    consumer.shutdown().await;
}

#[actix_rt::test]
async fn a_failed_selected_message_comes_back_from_the_retry_topic() {
    let (cluster, _client) = cluster_with_orders("Orders", fast_retry_config(1)).await;
    let (tx, mut rx) = unbounded_channel();
    let consumer = from_first_offset(&cluster.namesrv_addr(), "eu_retry", "Orders", "*")
        .subscribe("Orders", Selector::sql("amount = 23"))
        .listener_sync_fn(move |messages, _ctx| {
            for m in messages {
                let _ = tx.send((text(m), m.reconsume_times));
            }
            if messages.iter().any(|m| m.reconsume_times == 0) {
                ConsumeStatus::ReconsumeLater
            } else {
                ConsumeStatus::Success
            }
        })
        .start()
        .await
        .expect("the consumer starts");
    // The retry topic is subscribed to with `*`: the broker lets its messages through, as a
    // Java broker does by default (`filterSupportRetry = false`).
    assert_eq!(
        receive(&mut rx, 2).await,
        vec![("m23".to_owned(), 0), ("m23".to_owned(), 1)]
    );
    assert_quiet(&mut rx, "a third delivery").await;
    consumer.shutdown().await;
}

#[actix_rt::test]
async fn a_lite_pull_consumer_polls_exactly_the_selection() {
    let (cluster, _client) = cluster_with_orders("Orders", fast_retry_config(1)).await;
    let consumer = LitePullConsumer::builder()
        .namesrv_addr(cluster.namesrv_addr())
        .group("eu_lite")
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .subscribe("Orders", Selector::sql(EU_ABOVE_20))
        .start()
        .await
        .expect("the consumer starts");
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while got.len() < selected().len() {
        assert!(tokio::time::Instant::now() < deadline, "only {got:?} came");
        got.extend(bodies(
            &consumer.poll_timeout(Duration::from_millis(200)).await,
        ));
    }
    assert_eq!(got, selected());
    assert!(
        consumer
            .poll_timeout(Duration::from_millis(300))
            .await
            .is_empty(),
        "a message the expression does not select"
    );
    consumer.shutdown().await;
}

#[actix_rt::test]
async fn a_pull_by_sql_skips_what_the_expression_does_not_select() {
    let (_cluster, client) = cluster_with_orders("Orders", fast_retry_config(1)).await;
    let consumer = PullConsumer::builder()
        .client(client)
        .group("eu_pull")
        .start()
        .await
        .expect("the consumer starts");
    let queue = mq("Orders", 0);
    let mut got = Vec::new();
    let mut offset = 0;
    while offset < 104 {
        let result = consumer
            .pull(&queue, Selector::sql(EU_ABOVE_20), offset, 8)
            .await
            .expect("the pull succeeds");
        assert!(result.next_begin_offset > offset, "the pull moved on");
        got.extend(bodies(&result.messages));
        offset = result.next_begin_offset;
    }
    assert_eq!(got, selected());
    // A range the expression selects nothing of is passed over as a whole.
    let none = consumer
        .pull(&queue, Selector::sql("amount > 1000"), 0, 8)
        .await
        .expect("the pull succeeds");
    assert_eq!(none.status, PullStatus::NoMatchedMsg);
    assert_eq!(none.next_begin_offset, 104);
    consumer.shutdown().await;
}

#[actix_rt::test]
async fn a_syntax_error_fails_before_anything_is_sent() {
    let (cluster, client) = cluster_with_orders("Orders", fast_retry_config(1)).await;
    let started = from_first_offset(&cluster.namesrv_addr(), "bad_sql", "Orders", "*")
        .subscribe("Orders", Selector::sql("amount >"))
        .listener_sync_fn(|_, _| ConsumeStatus::Success)
        .start()
        .await;
    match started {
        Err(Error::InvalidSelector { topic, error, .. }) => {
            assert_eq!(topic, "Orders");
            assert_eq!(error.position(), 9);
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("a consumer with a broken expression started"),
    }
    assert!(
        client.consumer_ids("bad_sql", "Orders").await.is_err()
            || client
                .consumer_ids("bad_sql", "Orders")
                .await
                .is_ok_and(|(_, ids)| ids.is_empty()),
        "the broker heard of the group"
    );
    let lite = LitePullConsumer::builder()
        .namesrv_addr(cluster.namesrv_addr())
        .group("bad_sql_lite")
        .subscribe("Orders", Selector::sql("region = 'eu"))
        .start()
        .await;
    assert!(matches!(lite, Err(Error::InvalidSelector { .. })));
    let pull = PullConsumer::builder()
        .client(client)
        .group("bad_sql_pull")
        .start()
        .await
        .expect("the consumer starts");
    let pulled = pull
        .pull(&mq("Orders", 0), Selector::sql("amount IN (1)"), 0, 8)
        .await;
    assert!(
        matches!(pulled, Err(Error::InvalidSelector { .. })),
        "{pulled:?}"
    );
    pull.shutdown().await;
}

#[actix_rt::test]
async fn a_broker_without_property_filtering_refuses_at_start() {
    let config = EmbeddedConfig {
        enable_property_filter: false,
        ..fast_retry_config(1)
    };
    let (cluster, client) = cluster_with_orders("Orders", config).await;
    let refused = |started: Result<(), Error>| match started {
        Err(Error::SelectorRefused { reason, broker, .. }) => {
            assert!(reason.contains("enablePropertyFilter"), "{reason}");
            assert_eq!(broker, "broker-a");
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(()) => panic!("started against a broker without property filtering"),
    };
    refused(
        eu_consumer(&cluster, "no_filter")
            .listener_sync_fn(|_, _| ConsumeStatus::Success)
            .start()
            .await
            .map(drop),
    );
    refused(
        LitePullConsumer::builder()
            .namesrv_addr(cluster.namesrv_addr())
            .group("no_filter_lite")
            .subscribe("Orders", Selector::sql(EU_ABOVE_20))
            .start()
            .await
            .map(drop),
    );
    let pull = PullConsumer::builder()
        .client(client)
        .group("no_filter_pull")
        .start()
        .await
        .expect("the consumer starts");
    refused(
        pull.pull(&mq("Orders", 0), Selector::sql(EU_ABOVE_20), 0, 8)
            .await
            .map(drop),
    );
    pull.shutdown().await;
    // Tags still work there.
    let tags = from_first_offset(&cluster.namesrv_addr(), "tags_only", "Orders", "*")
        .listener_sync_fn(|_, _| ConsumeStatus::Success)
        .start()
        .await
        .expect("a tag subscription starts");
    tags.shutdown().await;
}

#[actix_rt::test]
async fn a_namespaced_consumer_filters_its_namespace_topic() {
    let cluster = start_cluster(fast_retry_config(1)).await;
    cluster
        .create_topic("tenant_a%Orders", 1)
        .await
        .expect("topic created");
    let client = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client starts");
    let producer = Producer::new(
        client,
        ProducerConfig {
            namespace: Some("tenant_a".into()),
            ..ProducerConfig::default()
        },
    );
    for i in 0..=103 {
        producer
            .send(order("Orders", i))
            .await
            .expect("send succeeds");
    }
    let (tx, mut rx) = unbounded_channel();
    let consumer = eu_consumer(&cluster, "eu_tenant")
        .namespace("tenant_a")
        .listener_sync_fn(move |messages, _ctx| {
            for m in messages {
                let _ = tx.send((m.topic().to_owned(), text(m)));
            }
            ConsumeStatus::Success
        })
        .start()
        .await
        .expect("the consumer starts");
    let got = receive(&mut rx, selected().len()).await;
    assert!(got.iter().all(|(topic, _)| topic == "Orders"), "{got:?}");
    let bodies: BTreeSet<String> = got.into_iter().map(|(_, body)| body).collect();
    assert_eq!(bodies, selected().into_iter().collect::<BTreeSet<_>>());
    consumer.shutdown().await;
}
