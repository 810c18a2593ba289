//! Supervision: a queue actor and a connection actor made to fail while a consumer runs; the
//! consumer carries on and loses nothing. Dropping a consumer's handle shuts it down.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use rocketmq_actor::consumer::ConsumerEvent;

use super::common::*;
use crate::actors::connection;
use crate::actors::queue;

const TOPIC: &str = "SupervisedTopic";

/// Receives messages until every body of `expected` was seen; returns how many deliveries it
/// took (duplicates included).
async fn receive_all(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, i32)>,
    expected: &BTreeSet<String>,
    seen: &mut BTreeSet<String>,
) -> usize {
    let mut deliveries = 0;
    while !expected.is_subset(seen) {
        match tokio::time::timeout(PATIENCE, rx.recv()).await {
            Ok(Some((body, _))) => {
                deliveries += 1;
                seen.insert(body);
            }
            Ok(None) => panic!("the listener went away"),
            Err(_) => {
                let missing: Vec<_> = expected.difference(seen).take(5).collect();
                panic!(
                    "{} messages never came, e.g. {missing:?}",
                    expected.difference(seen).count()
                )
            }
        }
    }
    deliveries
}

/// A consumer of `group` on a fresh one-broker cluster with [`TOPIC`] on `queues` queues, that
/// has consumed messages `0..consumed` already.
struct Consuming {
    cluster: rocketmq_actor::embedded::EmbeddedCluster,
    producer: rocketmq_actor::Producer,
    consumer: rocketmq_actor::PushConsumer,
    events: std::pin::Pin<Box<dyn futures::Stream<Item = ConsumerEvent> + Send>>,
    rx: tokio::sync::mpsc::UnboundedReceiver<(String, i32)>,
    seen: BTreeSet<String>,
}

async fn consuming(
    group: &str,
    queues: i32,
    consumed: usize,
    configure: impl FnOnce(&mut rocketmq_actor::PushConsumerConfig),
) -> Consuming {
    let (cluster, namesrv) = cluster_with_topic(TOPIC, queues).await;
    let producer = producer(&cluster);
    send_numbered(&producer, TOPIC, 0..consumed).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = from_first_offset(&namesrv, group, TOPIC, "*")
        .configure(configure)
        .listener_fn(recording(tx))
        .start()
        .await
        .expect("consumer starts");
    let events = Box::pin(consumer.events());
    let mut seen = BTreeSet::new();
    receive_all(&mut rx, &(0..consumed).map(body_of).collect(), &mut seen).await;
    Consuming {
        cluster,
        producer,
        consumer,
        events,
        rx,
        seen,
    }
}

#[actix_rt::test]
async fn a_failed_queue_actor_and_a_failed_connection_are_restarted_and_nothing_is_lost() {
    let Consuming {
        cluster,
        producer,
        consumer,
        mut events,
        mut rx,
        mut seen,
    } = consuming("supervised", 4, 200, |_| {}).await;

    // One queue actor and the broker connection fail, as a bug in either would make them.
    let queues = consumer.queue_actors().await;
    let (failed_queue, actor) = queues
        .iter()
        .find(|(mq, _)| mq.topic == TOPIC)
        .cloned()
        .expect("the consumer owns a queue of the topic");
    actor.send(queue::Fail).await.expect("queue actor answers");
    let broker_addr = cluster
        .broker_addr(BROKER)
        .expect("the broker has an address");
    let consumer_conn = consumer_connection(&consumer, &broker_addr).await;
    consumer_conn
        .send(connection::Fail)
        .await
        .expect("connection answers");

    let restarted = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = events.next().await {
            if let ConsumerEvent::QueueRestarted { queue, .. } = event {
                return queue;
            }
        }
        panic!("the event stream ended");
    })
    .await
    .expect("the queue actor is restarted");
    assert_eq!(restarted, failed_queue);

    send_numbered(&producer, TOPIC, 200..400).await;
    let all: BTreeSet<String> = (0..400).map(body_of).collect();
    receive_all(&mut rx, &all, &mut seen).await;
    // The same actors are still the ones running.
    assert!(actor.connected(), "the queue actor's address still works");
    assert!(
        consumer_conn.send(connection::IsConnected).await.is_ok(),
        "the connection's address still works"
    );
    let status = consumer.status().await;
    assert_eq!(status.queue_restarts, 1);
    assert_eq!(status.owned_queues.len(), queues.len());
    assert!(status.problems.is_empty(), "{:?}", status.problems);
    consumer.shutdown().await;
    cluster.shutdown().await;
}

/// The consumer's connection to `addr` (its client is its own: the builder made it).
async fn consumer_connection(
    consumer: &rocketmq_actor::PushConsumer,
    addr: &str,
) -> actix::Addr<connection::Connection> {
    consumer
        .client_for_tests()
        .await
        .connection(addr)
        .await
        .expect("the consumer's client connects to its broker")
}

#[actix_rt::test]
async fn a_queue_actor_that_fails_too_often_gives_up_and_the_next_rebalance_starts_it_afresh() {
    let Consuming {
        cluster,
        producer,
        consumer,
        mut events,
        mut rx,
        mut seen,
    } = consuming("gives_up", 1, 20, |c| {
        c.restart_policy.max_restarts = 1;
        c.restart_policy.backoff_initial = Duration::from_millis(10);
    })
    .await;
    let (queue, actor) = consumer.queue_actors().await.remove(0);
    actor.send(queue::Fail).await.expect("queue actor answers");
    actor
        .send(queue::Fail)
        .await
        .expect("restarted queue actor answers");
    let gave_up = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = events.next().await {
            if let ConsumerEvent::QueueGaveUp { queue, failures } = event {
                return (queue, failures);
            }
        }
        panic!("the event stream ended");
    })
    .await
    .expect("the queue actor gives up");
    assert_eq!(gave_up, (queue.clone(), 2));
    // The next pass replaces the idle actor with a fresh one, which reads on.
    consumer.rebalance().await;
    let fresh = eventually("a fresh queue actor", || async {
        let actors = consumer.queue_actors().await;
        actors
            .into_iter()
            .find(|(mq, addr)| *mq == queue && *addr != actor)
            .map(|(_, addr)| addr)
    })
    .await;
    drop(fresh);
    send_numbered(&producer, TOPIC, 20..40).await;
    receive_all(&mut rx, &(0..40).map(body_of).collect(), &mut seen).await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn dropping_the_handle_shuts_the_consumer_down_and_leaves_the_group() {
    let Consuming {
        cluster,
        consumer,
        mut events,
        rx: _listened,
        ..
    } = consuming("dropped", 2, 10, |_| {}).await;
    drop(consumer);
    let stopped = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = events.next().await {
            if event == ConsumerEvent::Stopped {
                return true;
            }
        }
        false
    })
    .await
    .expect("the consumer stops");
    assert!(stopped);
    // It left the group and committed what it consumed.
    let observer = client(&cluster);
    let members = observer.consumer_ids("dropped", TOPIC).await;
    assert!(
        members.is_err() || matches!(&members, Ok((_, ids)) if ids.is_empty()),
        "{members:?}"
    );
    let mut committed = 0;
    for queue_id in 0..2 {
        committed += cluster
            .committed_offset(BROKER, "dropped", TOPIC, queue_id)
            .await
            .expect("broker answers")
            .unwrap_or(0);
    }
    assert_eq!(committed, 10);
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_send_made_while_its_broker_restarts_waits_for_it_within_the_send_timeout() {
    let (cluster, _namesrv) = cluster_with_topic("Restarting", 2).await;
    let client = client(&cluster);
    let producer = rocketmq_actor::Producer::new(
        client.clone(),
        rocketmq_actor::ProducerConfig {
            send_timeout: Duration::from_secs(10),
            ..Default::default()
        },
    );
    let before = producer
        .send(rocketmq_actor::Message::new("Restarting", "before"))
        .await
        .expect("the broker is up");
    let broker = cluster.broker_names()[0].clone();
    cluster.stop_broker(&broker, false).await.unwrap();
    // The send starts while the only broker refuses connections; the broker comes back
    // 300 ms later (the fault schedule, not a synchronisation).
    let sending = actix_rt::spawn(async move {
        producer
            .send(rocketmq_actor::Message::new("Restarting", "during"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !sending.is_finished(),
        "the send gave up while the broker was down"
    );
    cluster.restart_broker(&broker).await.unwrap();
    let during = sending
        .await
        .unwrap()
        .expect("the send goes through once the broker is back");
    assert_eq!(during.queue.broker_name, before.queue.broker_name);

    // A broker that stays away fails the send once its time is spent.
    let producer = rocketmq_actor::Producer::new(
        client,
        rocketmq_actor::ProducerConfig {
            send_timeout: Duration::from_millis(400),
            ..Default::default()
        },
    );
    cluster.stop_broker(&broker, false).await.unwrap();
    let error = producer
        .send(rocketmq_actor::Message::new("Restarting", "lost"))
        .await
        .expect_err("no broker to take it");
    assert!(error.is_transport(), "{error}");
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_dropped_broker_connection_is_reported_as_disconnected_then_reconnected() {
    let Consuming {
        cluster,
        producer,
        consumer,
        mut events,
        mut rx,
        mut seen,
    } = consuming("reconnects", 2, 10, |_| {}).await;
    cluster.drop_connections().await.unwrap();
    let broker = cluster.broker_addr(BROKER).expect("broker address");
    let (mut down, mut up) = (false, false);
    tokio::time::timeout(PATIENCE, async {
        while let Some(event) = events.next().await {
            match event {
                ConsumerEvent::Disconnected { broker: b, .. } if b == broker => down = true,
                ConsumerEvent::Reconnected { broker: b } if b == broker && down => {
                    up = true;
                    return;
                }
                _ => {}
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("disconnected: {down}, reconnected: {up}"));
    // And it still consumes.
    send_numbered(&producer, TOPIC, 10..20).await;
    receive_all(&mut rx, &(0..20).map(body_of).collect(), &mut seen).await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_supervised_consumer_that_fails_is_started_afresh_by_its_supervisor_and_loses_nothing() {
    use actix::prelude::*;
    use rocketmq_actor::consumer::{GetConsumerStatus, StopConsumer, SupervisedConsumer};

    let (cluster, namesrv) = cluster_with_topic(TOPIC, 2).await;
    let producer = producer(&cluster);
    send_numbered(&producer, TOPIC, 0..50).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let actor = Supervisor::start(move |_| {
        SupervisedConsumer::new(move || {
            from_first_offset(&namesrv, "supervised_whole", TOPIC, "*")
                .configure(|c| c.restart_policy.backoff_initial = Duration::from_millis(10))
                .listener_fn(recording(tx.clone()))
        })
    });
    let mut seen = BTreeSet::new();
    receive_all(&mut rx, &(0..50).map(body_of).collect(), &mut seen).await;

    actor
        .send(crate::actors::supervised_consumer::Fail)
        .await
        .expect("the actor answers");
    // Only a consumer started afresh can consume what is sent now: the failed one was dropped.
    send_numbered(&producer, TOPIC, 50..100).await;
    receive_all(&mut rx, &(0..100).map(body_of).collect(), &mut seen).await;
    let status = actor
        .send(GetConsumerStatus)
        .await
        .expect("the same address still works")
        .expect("a consumer runs");
    assert!(!status.owned_queues.is_empty());

    actor.send(StopConsumer).await.expect("the actor answers");
    assert_eq!(actor.send(GetConsumerStatus).await.ok().flatten(), None);
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_missing_topic_is_a_problem_in_events_and_status_until_it_exists() {
    let cluster = fast_retry_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = from_first_offset(&namesrv, "waits_for_topic", "NotYetThere", "*")
        .configure(|c| c.rebalance_retry_interval = Duration::from_millis(100))
        .listener_fn(recording(tx))
        .start()
        .await
        .expect("a consumer starts without its topic");
    let mut events = consumer.events();
    let status = consumer.status().await;
    let cause = status
        .problems
        .get("NotYetThere")
        .unwrap_or_else(|| panic!("no problem reported: {:?}", status.problems));
    assert!(cause.contains("NotYetThere"), "{cause}");

    cluster.create_topic("NotYetThere", 2).await.unwrap();
    tokio::time::timeout(PATIENCE, async {
        while let Some(event) = events.next().await {
            if let ConsumerEvent::ProblemCleared { topic } = event {
                if topic == "NotYetThere" {
                    return;
                }
            }
        }
    })
    .await
    .expect("the problem clears once the topic exists");
    assert!(consumer.status().await.problems.is_empty());
    send_numbered(&producer(&cluster), "NotYetThere", 0..5).await;
    let mut seen = BTreeSet::new();
    receive_all(&mut rx, &(0..5).map(body_of).collect(), &mut seen).await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_name_server_that_does_not_answer_is_a_problem_in_status() {
    let (namesrv, _holder) = silent_name_server().await;
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = from_first_offset(&namesrv, "silent_namesrv", TOPIC, "*")
        .configure(|c| c.rebalance_retry_interval = Duration::from_millis(100))
        .listener_fn(recording(tx))
        .start()
        .await
        .expect("a consumer starts while its name server is silent");
    let status = consumer.status().await;
    let cause = status
        .problems
        .get(TOPIC)
        .unwrap_or_else(|| panic!("no problem reported: {:?}", status.problems));
    assert!(
        cause.contains("no name server answered") && cause.contains("timed out"),
        "{cause}"
    );
    consumer.shutdown().await;
}
