//! The pull consumer kinds against a real RocketMQ cluster (brokers `broker-a` and `broker-b`):
//! the pull consumer, the schedule service, the lite pull consumer and a reset by time.
//! Skipped (with a message on stderr) unless `ROCKETMQ_NAMESRV` names the name server:
//!
//! ```text
//! scripts/real-cluster.sh start
//! ROCKETMQ_NAMESRV=127.0.0.1:9876 cargo test --test interop_pull -- --nocapture
//! ```

mod interop_common;
use interop_common::*;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rocketmq_actor::consumer::ConsumeFromWhere;
use rocketmq_actor::pull::{LitePullConsumer, PullConsumer, PullScheduleService, PullStatus};
use rocketmq_actor::{Message, MessageExt, MessageQueue, Producer, ProducerConfig};
use tokio::sync::mpsc::unbounded_channel;

const PATIENCE: Duration = Duration::from_secs(60);

async fn produce(namesrv: &str, topic: &str, range: std::ops::Range<usize>) {
    let client = start_client(namesrv);
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for i in range {
        producer
            .send(Message::new(topic, format!("m{i}")))
            .await
            .unwrap_or_else(|e| panic!("send m{i}: {e}"));
    }
    client.shutdown().await;
}

fn text(message: &MessageExt) -> String {
    String::from_utf8_lossy(message.body()).into_owned()
}

fn expected(range: std::ops::Range<usize>) -> BTreeSet<String> {
    range.map(|i| format!("m{i}")).collect()
}

async fn poll_until(consumer: &LitePullConsumer, want: &BTreeSet<String>) -> Vec<String> {
    let deadline = Instant::now() + PATIENCE;
    let mut got = Vec::new();
    while !want.iter().all(|w| got.contains(w)) {
        assert!(
            Instant::now() < deadline,
            "only {} of {} came",
            got.len(),
            want.len()
        );
        got.extend(
            consumer
                .poll_timeout(Duration::from_millis(500))
                .await
                .iter()
                .map(text),
        );
    }
    got
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn the_pull_consumer_reads_every_queue_and_keeps_its_offsets() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("PullInterop");
    create_topic(&client, &namesrv, &topic).await;
    produce(&namesrv, &topic, 0..40).await;
    let consumer = PullConsumer::builder()
        .client(client.clone())
        .group(unique("pull_group"))
        .start()
        .await
        .expect("pull consumer starts");
    let queues = consumer
        .fetch_subscribe_message_queues(&topic)
        .await
        .expect("queues");
    assert_eq!(queues.len(), 2 * QUEUES_PER_BROKER as usize);
    let mut got = BTreeSet::new();
    let deadline = Instant::now() + PATIENCE;
    while got.len() < 40 {
        assert!(Instant::now() < deadline, "only {} of 40 pulled", got.len());
        for queue in &queues {
            let offset = consumer
                .fetch_consume_offset(queue, false)
                .await
                .expect("offset")
                .unwrap_or(0);
            let result = consumer
                .pull(queue, "*", offset, 32)
                .await
                .unwrap_or_else(|e| panic!("pull {queue}: {e}"));
            if result.status == PullStatus::Found {
                got.extend(result.messages.iter().map(text));
            }
            consumer
                .update_consume_offset(queue, result.next_begin_offset)
                .await;
        }
    }
    assert_eq!(got, expected(0..40));
    consumer.persist_consume_offsets().await.expect("persisted");
    let mut total = 0;
    for queue in &queues {
        total += consumer
            .fetch_consume_offset(queue, true)
            .await
            .expect("stored offset")
            .unwrap_or(0);
    }
    assert_eq!(total, 40, "the broker holds every queue's offset");
    // Long polling on the real broker: a pull at the end is answered by a new message.
    let queue: MessageQueue = queues[0].clone();
    let end = consumer.max_offset(&queue).await.expect("max");
    let waiting = {
        let consumer = consumer.clone();
        let queue = queue.clone();
        actix_rt::spawn(async move { consumer.pull_block_if_not_found(&queue, "*", end, 32).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    producer
        .send_to_queue(Message::new(&topic, "late"), &queue)
        .await
        .expect("sent");
    let woken = waiting.await.expect("task").expect("answered");
    assert_eq!(woken.status, PullStatus::Found);
    consumer.shutdown().await;
    client.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn two_schedule_services_consume_everything_with_each_queue_once() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("ScheduleInterop");
    let group = unique("schedule_group");
    create_topic(&client, &namesrv, &topic).await;
    let (tx, mut rx) = unbounded_channel::<String>();
    let mut services = Vec::new();
    for _ in 0..2 {
        let tx = tx.clone();
        let service = PullScheduleService::builder()
            .client(start_client(&namesrv))
            .group(&group)
            .configure(|c| c.rebalance_interval = Duration::from_secs(1))
            .register_pull_task_fn(&topic, move |queue, mut ctx| {
                let tx = tx.clone();
                async move {
                    let consumer = ctx.pull_consumer().clone();
                    let offset = consumer
                        .fetch_consume_offset(&queue, false)
                        .await
                        .ok()
                        .flatten()
                        .unwrap_or(0);
                    if let Ok(result) = consumer
                        .pull_block_if_not_found(&queue, "*", offset, 32)
                        .await
                    {
                        for m in &result.messages {
                            let _ = tx.send(text(m));
                        }
                        consumer
                            .update_consume_offset(&queue, result.next_begin_offset)
                            .await;
                    }
                    ctx.set_pull_next_delay(Duration::ZERO);
                    ctx
                }
            })
            .start()
            .await
            .expect("schedule service starts");
        services.push(service);
    }
    let deadline = Instant::now() + PATIENCE;
    loop {
        let a: BTreeSet<_> = services[0].running_tasks().await.into_iter().collect();
        let b: BTreeSet<_> = services[1].running_tasks().await.into_iter().collect();
        if a.len() + b.len() == 8 && a.is_disjoint(&b) && !a.is_empty() && !b.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "tasks not divided: {a:?} / {b:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    produce(&namesrv, &topic, 0..100).await;
    let mut got = BTreeSet::new();
    while got.len() < 100 {
        match tokio::time::timeout(PATIENCE, rx.recv()).await {
            Ok(Some(body)) => {
                got.insert(body);
            }
            _ => panic!("only {} of 100 consumed", got.len()),
        }
    }
    assert_eq!(got, expected(0..100));
    for service in &services {
        service.shutdown().await;
    }
    client.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn the_lite_consumer_commits_resumes_and_follows_a_reset_by_time() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("LiteInterop");
    let group = unique("lite_group");
    create_topic(&client, &namesrv, &topic).await;
    produce(&namesrv, &topic, 0..50).await;
    let start = || {
        LitePullConsumer::builder()
            .client(client.clone())
            .group(&group)
            .subscribe(&topic, "*")
            .configure(|c| {
                c.consume_from_where = ConsumeFromWhere::FirstOffset;
                c.auto_commit = false;
            })
            .start()
    };
    let consumer = start().await.expect("lite starts");
    let first = poll_until(&consumer, &expected(0..50)).await;
    assert_eq!(first.len(), 50, "no duplicates");
    consumer.commit_sync().await.expect("committed");
    consumer.shutdown().await;

    produce(&namesrv, &topic, 50..70).await;
    let consumer = start().await.expect("lite restarts");
    let second = poll_until(&consumer, &expected(50..70)).await;
    assert_eq!(
        second.len(),
        20,
        "resumed after the committed offsets, no duplicates"
    );
    consumer.commit_sync().await.expect("committed");

    // A reset by time while it runs: the broker resets its stored offsets and the next pull of
    // each queue reports the new position.
    let table = client
        .reset_offset_by_timestamp(&group, &topic, 0, true)
        .await
        .expect("reset by time");
    assert_eq!(table.len(), 8, "{table:?}");
    let again = poll_until(&consumer, &expected(0..70)).await;
    assert!(again.len() >= 70);
    consumer.shutdown().await;
    client.shutdown().await;
}
