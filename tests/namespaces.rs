//! Namespaces end to end, on the embedded broker, through the public API: the application
//! names topics and groups without the namespace everywhere, the broker stores and tracks them
//! with it (`ns%T`, `ns%G`, `%RETRY%ns%G`, `%DLQ%ns%G`), and two namespaces on one broker
//! never see each other's messages or offsets.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use actix::{Actor, Context, Handler};
use common::{assert_quiet, fast_retry_cluster, mq, receive, text, BROKER, PATIENCE};
use rocketmq_actor::consumer::{
    ConsumeFromWhere, ConsumeStatus, ConsumerEvent, OrderlyStatus, PushConsumerConfig,
};
use rocketmq_actor::embedded::EmbeddedCluster;
use rocketmq_actor::message::property;
use rocketmq_actor::pull::{LitePullConsumer, PullConsumer, PullScheduleService, PullStatus};
use rocketmq_actor::rpc::PullRequest;
use rocketmq_actor::{
    Client, Message, MessageExt, MessageQueue, Producer, ProducerConfig, PushConsumer,
};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

/// Forwards a consumer's events to the test.
struct EventLog(UnboundedSender<ConsumerEvent>);

impl Actor for EventLog {
    type Context = Context<Self>;
}

impl Handler<ConsumerEvent> for EventLog {
    type Result = ();

    fn handle(&mut self, event: ConsumerEvent, _ctx: &mut Self::Context) {
        let _ = self.0.send(event);
    }
}

/// A producer in `namespace` on its own client.
fn producer_in(cluster: &EmbeddedCluster, namespace: &str) -> Producer {
    Producer::new(
        common::client(cluster),
        ProducerConfig {
            namespace: Some(namespace.into()),
            ..ProducerConfig::default()
        },
    )
}

/// Every message stored in `topic` (every queue of [`BROKER`]), read with a plain client that
/// has no namespace: what the broker really holds.
async fn stored(client: &Client, topic: &str, queues: i32) -> Vec<MessageExt> {
    let mut all = Vec::new();
    for queue_id in 0..queues {
        let result = client
            .pull(&PullRequest::new("ns_inspector", mq(topic, queue_id), 0))
            .await
            .expect("the broker answers");
        all.extend(result.messages);
    }
    all
}

/// The sum of the max offsets of `topic`'s queues on [`BROKER`].
async fn stored_count(cluster: &EmbeddedCluster, topic: &str, queues: i32) -> i64 {
    let mut total = 0;
    for queue_id in 0..queues {
        total += cluster
            .max_offset(BROKER, topic, queue_id)
            .await
            .expect("the broker answers");
    }
    total
}

/// The offsets `group` committed on `topic`'s queues on [`BROKER`].
async fn committed(
    cluster: &EmbeddedCluster,
    group: &str,
    topic: &str,
    queues: i32,
) -> Vec<Option<i64>> {
    let mut offsets = Vec::new();
    for queue_id in 0..queues {
        offsets.push(
            cluster
                .committed_offset(BROKER, group, topic, queue_id)
                .await
                .expect("the broker answers"),
        );
    }
    offsets
}

/// Two tenants use the same topic and group names on one broker: each producer's messages go
/// to its own `ns%Orders`, each consumer gets only its namespace's messages (topic and queue
/// shown as `Orders`), and each group's offsets are its own.
#[actix_rt::test]
async fn two_namespaces_with_the_same_names_on_one_broker_are_isolated() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    // What the brokers give an auto-created topic.
    let queues = 8;
    for ns in ["tenant_a", "tenant_b"] {
        let producer = producer_in(&cluster, ns);
        for i in 0..10 {
            // The topic does not exist yet: the broker creates `ns%Orders` on the first send.
            let sent = producer
                .send(Message::new("Orders", format!("{ns}-{i}")))
                .await
                .expect("send succeeds");
            assert_eq!(
                sent.queue.topic, "Orders",
                "the send result names the user's topic"
            );
        }
    }
    assert_eq!(stored_count(&cluster, "tenant_a%Orders", queues).await, 10);
    assert_eq!(stored_count(&cluster, "tenant_b%Orders", queues).await, 10);
    assert_eq!(
        stored_count(&cluster, "Orders", queues).await,
        0,
        "nothing unwrapped"
    );
    let inspector = common::client(&cluster);
    let raw = stored(&inspector, "tenant_a%Orders", queues).await;
    assert_eq!(raw.len(), 10);
    assert!(
        raw.iter().all(|m| m.topic() == "tenant_a%Orders"),
        "the broker holds wire names"
    );

    let mut consumers = Vec::new();
    let mut receivers = Vec::new();
    let (events_tx, mut events) = unbounded_channel();
    let event_log = EventLog(events_tx).start();
    for ns in ["tenant_a", "tenant_b"] {
        let (tx, rx) = unbounded_channel::<(String, String, String)>();
        let consumer = PushConsumer::builder()
            .namesrv_addr(&namesrv)
            .namespace(ns)
            .event_recipient(event_log.clone().recipient())
            .group("billing")
            .subscribe("Orders", "*")
            .configure(|c| {
                c.consume_from_where = ConsumeFromWhere::FirstOffset;
                c.persist_consumer_offset_interval = Duration::from_millis(100);
            })
            .listener_fn(move |messages, ctx| {
                for m in &messages {
                    let _ = tx.send((m.topic().to_owned(), ctx.queue.topic.clone(), text(m)));
                }
                std::future::ready((ConsumeStatus::Success, ctx))
            })
            .start()
            .await
            .expect("consumer starts");
        consumers.push(consumer);
        receivers.push(rx);
    }
    for (ns, rx) in ["tenant_a", "tenant_b"].into_iter().zip(&mut receivers) {
        let got = receive(rx, 10).await;
        let bodies: BTreeSet<String> = got
            .iter()
            .map(|(topic, queue_topic, body)| {
                assert_eq!(topic, "Orders", "the message topic is unwrapped");
                assert_eq!(queue_topic, "Orders", "the context's queue is unwrapped");
                body.clone()
            })
            .collect();
        let expected: BTreeSet<String> = (0..10).map(|i| format!("{ns}-{i}")).collect();
        assert_eq!(bodies, expected, "{ns} gets exactly its own messages");
        assert_quiet(rx, "a message of the other namespace").await;
    }
    // What the application sees of its queues carries no namespace: events, owned queues,
    // status, lag.
    let mut assigned = BTreeSet::new();
    while assigned.len() < 2 {
        match receive(&mut events, 1).await.remove(0) {
            ConsumerEvent::QueuesAssigned(queues) => {
                assigned.extend(queues.into_iter().map(|q| q.topic))
            }
            ConsumerEvent::Problem { topic, .. } => assert!(!topic.contains("tenant"), "{topic}"),
            _ => {}
        }
    }
    assert_eq!(
        assigned,
        BTreeSet::from(["Orders".to_owned(), "%RETRY%billing".to_owned()])
    );
    for consumer in &consumers {
        let owned: BTreeSet<String> = consumer
            .owned_queues()
            .await
            .into_iter()
            .map(|q| q.topic)
            .collect();
        assert_eq!(
            owned,
            BTreeSet::from(["Orders".to_owned(), "%RETRY%billing".to_owned()])
        );
        let status = consumer.status().await;
        assert!(status
            .owned_queues
            .iter()
            .all(|q| !q.topic.contains("tenant")));
        let lag = consumer.lag().await;
        assert!(
            lag.iter().all(|l| !l.queue.topic.contains("tenant")),
            "{lag:?}"
        );
    }
    // Each group's offsets are under its wrapped name, and only there.
    for ns in ["tenant_a", "tenant_b"] {
        let group = format!("{ns}%billing");
        let topic = format!("{ns}%Orders");
        common::eventually("every message committed", || async {
            let offsets = committed(&cluster, &group, &topic, queues).await;
            (offsets.iter().flatten().sum::<i64>() == 10).then_some(())
        })
        .await;
    }
    assert_eq!(
        committed(&cluster, "billing", "Orders", queues).await,
        vec![None; 8],
        "nothing committed under the bare names"
    );
    // The groups are told apart on the broker too.
    assert_eq!(
        cluster
            .consumer_ids(BROKER, "tenant_a%billing")
            .await
            .expect("broker answers")
            .len(),
        1
    );
    assert!(cluster
        .consumer_ids(BROKER, "billing")
        .await
        .expect("broker answers")
        .is_empty());
    for consumer in consumers {
        consumer.shutdown().await;
    }
    inspector.shutdown().await;
    cluster.shutdown().await;
}

/// A failed message goes through `%RETRY%ns%G` and comes back under its original topic,
/// unwrapped, with its reconsume count; one that keeps failing ends in `%DLQ%ns%G`.
#[actix_rt::test]
async fn retries_go_through_the_namespaced_retry_topic_and_poison_ends_in_its_dlq() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    cluster
        .create_topic("ns1%Payments", 1)
        .await
        .expect("topic");
    let producer = producer_in(&cluster, "ns1");
    for body in ["once", "poison"] {
        producer
            .send(Message::new("Payments", body))
            .await
            .expect("send succeeds");
    }
    let (tx, mut rx) = unbounded_channel::<(String, String, i32, Option<String>)>();
    let consumer = PushConsumer::builder()
        .namesrv_addr(&namesrv)
        .group("payer")
        .subscribe("Payments", "*")
        .config(PushConsumerConfig {
            namespace: Some("ns1".into()),
            consume_from_where: ConsumeFromWhere::FirstOffset,
            max_reconsume_times: Some(2),
            ..PushConsumerConfig::new("payer")
        })
        .listener_fn(move |messages, ctx| {
            let mut status = ConsumeStatus::Success;
            for m in &messages {
                let body = text(m);
                let retry_topic = m.property(property::RETRY_TOPIC).map(str::to_owned);
                let _ = tx.send((
                    m.topic().to_owned(),
                    body.clone(),
                    m.reconsume_times,
                    retry_topic,
                ));
                if body == "poison" || (body == "once" && m.reconsume_times == 0) {
                    status = ConsumeStatus::ReconsumeLater;
                }
            }
            std::future::ready((status, ctx))
        })
        .start()
        .await
        .expect("consumer starts");
    // once: 0, 1; poison: 0, 1, 2 — in any interleaving.
    let got = receive(&mut rx, 5).await;
    let mut by_body: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (topic, body, times, retry_topic) in &got {
        assert_eq!(
            topic, "Payments",
            "a retried message shows its original topic: {got:?}"
        );
        if *times > 0 {
            assert_eq!(
                retry_topic.as_deref(),
                Some("ns1%Payments"),
                "RETRY_TOPIC keeps the wire name"
            );
        }
        by_body.entry(body.clone()).or_default().push(*times);
    }
    assert_eq!(by_body["once"], vec![0, 1]);
    assert_eq!(by_body["poison"], vec![0, 1, 2]);
    assert_quiet(&mut rx, "a delivery past max_reconsume_times").await;

    // The retries went through the namespaced retry topic, the poison message to its DLQ.
    assert!(
        cluster
            .max_offset(BROKER, "%RETRY%ns1%payer", 0)
            .await
            .expect("answers")
            >= 3
    );
    assert_eq!(
        cluster
            .max_offset(BROKER, "%RETRY%payer", 0)
            .await
            .expect("answers"),
        0
    );
    common::eventually("the poison message in the DLQ", || async {
        let inspector = common::client(&cluster);
        let dead = stored(&inspector, "%DLQ%ns1%payer", 1).await;
        inspector.shutdown().await;
        (dead.len() == 1).then_some(dead)
    })
    .await
    .iter()
    .for_each(|dead| assert_eq!(text(dead), "poison"));
    consumer.shutdown().await;
    cluster.shutdown().await;
}

/// Orderly consumption under a namespace: the broker lock is taken for the wrapped group, the
/// messages come in queue order with their topic unwrapped, and a message that reached its
/// maximum goes to `%DLQ%ns%G` with `RETRY_TOPIC` naming the wire topic.
#[actix_rt::test]
async fn orderly_consumption_under_a_namespace() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    cluster.create_topic("ord%Steps", 1).await.expect("topic");
    let producer = producer_in(&cluster, "ord");
    for i in 0..10 {
        producer
            .send_to_queue(Message::new("Steps", format!("s{i}")), &mq("Steps", 0))
            .await
            .expect("send succeeds");
    }
    let (tx, mut rx) = unbounded_channel::<(String, String, MessageQueue)>();
    let consumer = PushConsumer::builder()
        .namesrv_addr(&namesrv)
        .namespace("ord")
        .group("stepper")
        .subscribe("Steps", "*")
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::FirstOffset;
            c.max_reconsume_times = Some(1);
            c.suspend_current_queue_time = Duration::from_millis(10);
        })
        .orderly_listener_fn(move |messages, ctx| {
            let mut status = OrderlyStatus::Success;
            for m in &messages {
                let _ = tx.send((m.topic().to_owned(), text(m), ctx.queue.clone()));
                if text(m) == "s4" {
                    status = OrderlyStatus::SuspendCurrentQueueAMoment;
                }
            }
            std::future::ready((status, ctx))
        })
        .start()
        .await
        .expect("consumer starts");
    // s4 fails twice (delivery and one retry), then goes to the DLQ and the queue moves on.
    let got = receive(&mut rx, 11).await;
    let bodies: Vec<&str> = got.iter().map(|(_, body, _)| body.as_str()).collect();
    assert_eq!(
        bodies,
        vec!["s0", "s1", "s2", "s3", "s4", "s4", "s5", "s6", "s7", "s8", "s9"]
    );
    for (topic, _, queue) in &got {
        assert_eq!(topic, "Steps");
        assert_eq!(
            *queue,
            mq("Steps", 0),
            "the orderly context's queue is unwrapped"
        );
    }
    let dead = common::eventually("s4 in the DLQ", || async {
        let inspector = common::client(&cluster);
        let dead = stored(&inspector, "%DLQ%ord%stepper", 1).await;
        inspector.shutdown().await;
        (dead.len() == 1).then_some(dead)
    })
    .await;
    assert_eq!(text(&dead[0]), "s4");
    assert_eq!(dead[0].property(property::RETRY_TOPIC), Some("ord%Steps"));
    // The lock is the wrapped group's: another client of the same group in the namespace is
    // refused it, the bare group gets it.
    let other = common::client(&cluster);
    let queue = mq("ord%Steps", 0);
    let locked = other
        .lock_batch(
            "ord%stepper",
            std::slice::from_ref(&queue),
            Duration::from_secs(3),
        )
        .await
        .expect("broker answers");
    assert!(
        locked.is_empty(),
        "the consumer holds the lock of ord%stepper"
    );
    let locked = other
        .lock_batch(
            "stepper",
            std::slice::from_ref(&queue),
            Duration::from_secs(3),
        )
        .await
        .expect("broker answers");
    assert_eq!(locked, vec![queue.clone()], "the bare group's lock is free");
    other
        .unlock_batch(
            "stepper",
            std::slice::from_ref(&queue),
            Duration::from_secs(3),
        )
        .await
        .expect("unlock");
    common::eventually("the offset committed past s9", || async {
        (committed(&cluster, "ord%stepper", "ord%Steps", 1).await == vec![Some(10)]).then_some(())
    })
    .await;
    consumer.shutdown().await;
    other.shutdown().await;
    cluster.shutdown().await;
}

/// The pull consumer under a namespace: queues come unwrapped (from the name servers and from
/// the division), pulls take them and return messages with unwrapped topics, offsets are kept
/// under the wrapped group, and a send-back goes to `%RETRY%ns%G`.
#[actix_rt::test]
async fn the_pull_consumer_and_schedule_service_under_a_namespace() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    cluster.create_topic("pns%Ledger", 2).await.expect("topic");
    let producer = producer_in(&cluster, "pns");
    for i in 0..6 {
        producer
            .send_to_queue(
                Message::new("Ledger", format!("l{i}")),
                &mq("Ledger", i % 2),
            )
            .await
            .expect("send succeeds");
    }
    let (changes_tx, mut changes) = unbounded_channel::<(String, Vec<MessageQueue>)>();
    let consumer = PullConsumer::builder()
        .namesrv_addr(&namesrv)
        .namespace("pns")
        .group("auditor")
        .subscribe("Ledger")
        .message_queue_listener_fn(move |topic, _all, divided| {
            let _ = changes_tx.send((topic.to_owned(), divided.to_vec()));
        })
        .start()
        .await
        .expect("pull consumer starts");
    let (topic, divided) = receive(&mut changes, 1).await.remove(0);
    assert_eq!(topic, "Ledger");
    assert_eq!(divided, vec![mq("Ledger", 0), mq("Ledger", 1)]);
    assert_eq!(consumer.message_queues_divided("Ledger").await, divided);
    assert_eq!(consumer.group(), "auditor");

    let queues = consumer
        .fetch_subscribe_message_queues("Ledger")
        .await
        .expect("queues");
    assert_eq!(queues, vec![mq("Ledger", 0), mq("Ledger", 1)]);
    let mut pulled = Vec::new();
    for queue in &queues {
        assert_eq!(consumer.max_offset(queue).await.expect("max"), 3);
        assert_eq!(consumer.min_offset(queue).await.expect("min"), 0);
        let offset = consumer
            .fetch_consume_offset(queue, false)
            .await
            .expect("offset")
            .unwrap_or(0);
        let result = consumer.pull(queue, "*", offset, 32).await.expect("pull");
        assert_eq!(result.status, PullStatus::Found);
        assert!(result.messages.iter().all(|m| m.topic() == "Ledger"));
        consumer
            .update_consume_offset(queue, result.next_begin_offset)
            .await;
        pulled.extend(result.messages);
    }
    assert_eq!(pulled.len(), 6);
    consumer.persist_consume_offsets().await.expect("persisted");
    assert_eq!(
        committed(&cluster, "pns%auditor", "pns%Ledger", 2).await,
        vec![Some(3), Some(3)]
    );
    assert_eq!(
        committed(&cluster, "auditor", "Ledger", 2).await,
        vec![None, None]
    );
    assert_eq!(
        consumer
            .fetch_consume_offset(&queues[0], true)
            .await
            .expect("offset"),
        Some(3)
    );
    // A message handed back goes to the wrapped group's retry topic.
    consumer
        .send_message_back(&pulled[0], 0)
        .await
        .expect("send-back succeeds");
    // (After the retry delay, through the broker's schedule topic.)
    common::eventually("the message in %RETRY%pns%auditor", || async {
        let inspector = common::client(&cluster);
        let back = stored(&inspector, "%RETRY%pns%auditor", 1).await;
        inspector.shutdown().await;
        (back.len() == 1).then_some(())
    })
    .await;
    consumer.shutdown().await;

    // A schedule service of another group of the namespace: its callbacks get unwrapped queues
    // and pull through its consumer with them.
    let (seen_tx, mut seen) = unbounded_channel::<(MessageQueue, Vec<String>)>();
    let service = PullScheduleService::builder()
        .namesrv_addr(&namesrv)
        .namespace("pns")
        .group("scheduler")
        .register_pull_task_fn("Ledger", move |queue, mut ctx| {
            let seen_tx = seen_tx.clone();
            async move {
                let consumer = ctx.pull_consumer().clone();
                let offset = consumer
                    .fetch_consume_offset(&queue, false)
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or(0);
                if let Ok(result) = consumer.pull(&queue, "*", offset, 32).await {
                    if !result.messages.is_empty() {
                        let topics = result
                            .messages
                            .iter()
                            .map(|m| m.topic().to_owned())
                            .collect();
                        let _ = seen_tx.send((queue.clone(), topics));
                    }
                    consumer
                        .update_consume_offset(&queue, result.next_begin_offset)
                        .await;
                }
                ctx.set_pull_next_delay(Duration::from_millis(20));
                ctx
            }
        })
        .start()
        .await
        .expect("service starts");
    let runs = receive(&mut seen, 2).await;
    let run_queues: BTreeSet<MessageQueue> = runs.iter().map(|(q, _)| q.clone()).collect();
    assert_eq!(
        run_queues,
        BTreeSet::from([mq("Ledger", 0), mq("Ledger", 1)])
    );
    assert!(runs
        .iter()
        .all(|(_, topics)| topics.iter().all(|t| t == "Ledger")));
    let mut tasks = service.running_tasks().await;
    tasks.sort();
    assert_eq!(tasks, vec![mq("Ledger", 0), mq("Ledger", 1)]);
    service.shutdown().await;
    assert_eq!(
        committed(&cluster, "pns%scheduler", "pns%Ledger", 2).await,
        vec![Some(3), Some(3)]
    );
    cluster.shutdown().await;
}

/// The lite pull consumer under a namespace: its assignment, polled messages, topic listener
/// and seeks all use unwrapped names; commits land under the wrapped group.
#[actix_rt::test]
async fn the_lite_pull_consumer_under_a_namespace() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    cluster.create_topic("lns%Events", 2).await.expect("topic");
    let producer = producer_in(&cluster, "lns");
    for i in 0..8 {
        producer
            .send_to_queue(
                Message::new("Events", format!("e{i}")),
                &mq("Events", i % 2),
            )
            .await
            .expect("send succeeds");
    }
    let (topics_tx, mut topics) = unbounded_channel::<(String, Vec<MessageQueue>)>();
    let consumer = LitePullConsumer::builder()
        .namesrv_addr(&namesrv)
        .namespace("lns")
        .group("reader")
        .subscribe("Events", "*")
        .topic_queue_change_listener("Events", move |topic, queues| {
            let _ = topics_tx.send((topic.to_owned(), queues.to_vec()));
        })
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::FirstOffset;
            c.auto_commit = false;
        })
        .start()
        .await
        .expect("lite consumer starts");
    let (topic, queues) = receive(&mut topics, 1).await.remove(0);
    assert_eq!(topic, "Events");
    assert_eq!(queues, vec![mq("Events", 0), mq("Events", 1)]);
    let mut bodies = BTreeSet::new();
    while bodies.len() < 8 {
        let batch = consumer.poll_timeout(PATIENCE).await;
        assert!(!batch.is_empty(), "messages come");
        for m in &batch {
            assert_eq!(m.topic(), "Events");
            bodies.insert(text(m));
        }
    }
    let mut assignment = consumer.assignment().await;
    assignment.sort();
    assert_eq!(assignment, vec![mq("Events", 0), mq("Events", 1)]);
    consumer.commit_sync().await.expect("committed");
    assert_eq!(
        committed(&cluster, "lns%reader", "lns%Events", 2).await,
        vec![Some(4), Some(4)]
    );
    assert_eq!(
        consumer
            .committed(&mq("Events", 1))
            .await
            .expect("committed"),
        Some(4)
    );
    // A seek by the unwrapped queue: its messages come again.
    consumer.seek(&mq("Events", 0), 2).await.expect("seek");
    let again = consumer.poll_timeout(PATIENCE).await;
    let again: Vec<String> = again.iter().map(text).collect();
    assert_eq!(again, vec!["e4", "e6"]);
    consumer.shutdown().await;

    // Assign mode with unwrapped queues.
    let assigned = LitePullConsumer::builder()
        .namesrv_addr(&namesrv)
        .namespace("lns")
        .group("assigned_reader")
        .assign(vec![mq("Events", 1)])
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .start()
        .await
        .expect("lite consumer starts");
    let batch = assigned.poll_timeout(PATIENCE).await;
    let got: Vec<(String, String)> = batch
        .iter()
        .map(|m| (m.topic().to_owned(), text(m)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("Events".to_owned(), "e1".to_owned()),
            ("Events".to_owned(), "e3".to_owned()),
            ("Events".to_owned(), "e5".to_owned()),
            ("Events".to_owned(), "e7".to_owned()),
        ]
    );
    assert_eq!(assigned.assignment().await, vec![mq("Events", 1)]);
    assigned.shutdown().await;
    cluster.shutdown().await;
}

/// An invalid namespace is a configuration error naming the option, for every kind.
#[actix_rt::test]
async fn an_invalid_namespace_is_refused_at_start() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    let is_namespace_error = |e: rocketmq_actor::Error| {
        matches!(
            e,
            rocketmq_actor::Error::Config {
                option: "namespace",
                ..
            }
        )
    };
    let push = PushConsumer::builder()
        .namesrv_addr(&namesrv)
        .namespace("a%b")
        .group("g")
        .subscribe("T", "*")
        .listener_fn(|_, ctx| std::future::ready((ConsumeStatus::Success, ctx)))
        .start()
        .await;
    assert!(push.is_err_and(is_namespace_error));
    let pull = PullConsumer::builder()
        .namesrv_addr(&namesrv)
        .namespace("a b")
        .group("g")
        .start()
        .await;
    assert!(pull.is_err_and(is_namespace_error));
    let lite = LitePullConsumer::builder()
        .namesrv_addr(&namesrv)
        .namespace("ns.1")
        .group("g")
        .subscribe("T", "*")
        .start()
        .await;
    assert!(lite.is_err_and(is_namespace_error));
    let bad = ProducerConfig {
        namespace: Some("x%".into()),
        ..ProducerConfig::default()
    };
    assert!(bad.validate().is_err_and(is_namespace_error));
    let producer = Producer::new(common::client(&cluster), bad);
    let sent = producer.send(Message::new("T", "body")).await;
    assert!(sent.is_err_and(is_namespace_error));
    // Blank is no namespace.
    let producer = producer_in(&cluster, "  ");
    let sent = producer
        .send(Message::new("Plain", "body"))
        .await
        .expect("sent");
    assert_eq!(sent.queue.topic, "Plain");
    assert_eq!(stored_count(&cluster, "Plain", 8).await, 1);
    cluster.shutdown().await;
}
