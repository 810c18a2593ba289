//! The pull consumer kinds on the embedded broker: the pull consumer's methods, the schedule
//! service under membership churn, the lite pull consumer's seek / pause / commit, and offset
//! resets by time while consumers run.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{
    body_of, cluster_with_topic, eventually, fast_retry_cluster, mq, producer, receive,
    send_numbered, text, Shared, BROKER, PATIENCE,
};
use futures::StreamExt;
use rocketmq_actor::consumer::{retry_topic, ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::pull::{
    LitePullConsumer, MessageStream, PullConsumer, PullScheduleService, PullStatus,
};
use rocketmq_actor::{Client, ClientConfig, Message, MessageExt, MessageQueue, PushConsumer};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

fn pull_consumer(namesrv: &str, group: &str) -> rocketmq_actor::pull::PullConsumerBuilder {
    PullConsumer::builder()
        .namesrv_addr(namesrv)
        .group(group)
        .configure(|c| {
            c.rebalance_interval = Duration::from_millis(500);
            c.persist_consumer_offset_interval = Duration::from_millis(200);
        })
}

fn lite(namesrv: &str, group: &str) -> rocketmq_actor::pull::LitePullConsumerBuilder {
    LitePullConsumer::builder()
        .namesrv_addr(namesrv)
        .group(group)
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::FirstOffset;
            c.base.rebalance_interval = Duration::from_millis(500);
            c.base.persist_consumer_offset_interval = Duration::from_millis(200);
        })
}

/// Polls until `count` messages came, failing after [`PATIENCE`].
async fn poll_n(consumer: &LitePullConsumer, count: usize) -> Vec<MessageExt> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while got.len() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {count} messages came",
            got.len()
        );
        got.extend(consumer.poll_timeout(Duration::from_millis(200)).await);
    }
    got
}

fn bodies(messages: &[MessageExt]) -> Vec<String> {
    messages.iter().map(text).collect()
}

/// The bodies of the next messages of `stream` until `into` holds `count`, failing after
/// [`PATIENCE`] for each.
async fn read_stream(stream: &mut MessageStream, into: &mut Vec<String>, count: usize) {
    while into.len() < count {
        let message = tokio::time::timeout(PATIENCE, stream.next())
            .await
            .expect("a message in time")
            .expect("the stream goes on");
        into.push(text(&message));
    }
}

/// The bodies of the first `count` messages of a new stream of `consumer`.
async fn stream_bodies(consumer: &LitePullConsumer, count: usize) -> Vec<String> {
    let mut got = Vec::new();
    read_stream(&mut consumer.stream(), &mut got, count).await;
    got
}

#[actix_rt::test]
async fn the_pull_consumer_pulls_keeps_offsets_and_hears_of_its_queues() {
    let topic = "PullBasics";
    let group = "pull_basics";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    let producer = producer(&cluster);
    let queue = mq(topic, 0);
    for i in 0..6 {
        let tag = if i < 3 { "a" } else { "b" };
        producer
            .send_to_queue(Message::new(topic, body_of(i)).with_tags(tag), &queue)
            .await
            .expect("sent");
    }
    let (tx, mut changes) = unbounded_channel();
    let consumer = pull_consumer(&namesrv, group)
        .subscribe(topic)
        .message_queue_listener_fn(move |topic, all, divided| {
            let _ = tx.send((topic.to_owned(), all.len(), divided.to_vec()));
        })
        .start()
        .await
        .expect("pull consumer starts");
    let (told_topic, all, divided) = receive(&mut changes, 1).await.remove(0);
    assert_eq!((told_topic.as_str(), all), (topic, 2));
    assert_eq!(
        divided,
        vec![mq(topic, 0), mq(topic, 1)],
        "the only member owns both"
    );
    assert_eq!(consumer.message_queues_divided(topic).await, divided);

    assert_eq!(
        consumer
            .fetch_subscribe_message_queues(topic)
            .await
            .expect("queues"),
        vec![mq(topic, 0), mq(topic, 1)]
    );
    assert_eq!(consumer.min_offset(&queue).await.expect("min"), 0);
    assert_eq!(consumer.max_offset(&queue).await.expect("max"), 6);
    let tagged = consumer.pull(&queue, "b", 0, 32).await.expect("pull");
    assert_eq!(tagged.status, PullStatus::Found);
    assert_eq!(bodies(&tagged.messages), ["m3", "m4", "m5"]);
    assert_eq!(tagged.next_begin_offset, 6);
    let first_two = consumer.pull(&queue, "*", 0, 2).await.expect("pull");
    assert_eq!(bodies(&first_two.messages), ["m0", "m1"]);
    let empty = consumer
        .pull(&mq(topic, 1), "*", 0, 32)
        .await
        .expect("pull");
    assert_eq!(empty.status, PullStatus::NoNewMsg);

    // Long polling: the pull is answered when a message arrives.
    let waiting = {
        let consumer = consumer.clone();
        actix_rt::spawn(async move {
            consumer
                .pull_block_if_not_found(&mq("PullBasics", 1), "*", 0, 32)
                .await
        })
    };
    eventually("the broker holds the pull", || async {
        (cluster.held_pulls(BROKER).await.ok()? > 0).then_some(())
    })
    .await;
    producer
        .send_to_queue(Message::new(topic, "late"), &mq(topic, 1))
        .await
        .expect("sent");
    let woken = waiting.await.expect("task").expect("long poll answered");
    assert_eq!(woken.status, PullStatus::Found);
    assert_eq!(bodies(&woken.messages), ["late"]);

    // Offsets: none stored, then kept in memory, then persisted to the broker.
    assert_eq!(
        consumer
            .fetch_consume_offset(&queue, true)
            .await
            .expect("offset"),
        None
    );
    consumer.update_consume_offset(&queue, 4).await;
    assert_eq!(
        consumer
            .fetch_consume_offset(&queue, false)
            .await
            .expect("offset"),
        Some(4)
    );
    consumer.update_consume_offset(&queue, 2).await;
    assert_eq!(
        consumer
            .fetch_consume_offset(&queue, false)
            .await
            .expect("offset"),
        Some(2),
        "an update may move the offset back"
    );
    consumer.persist_consume_offsets().await.expect("persisted");
    assert_eq!(
        consumer
            .fetch_consume_offset(&queue, true)
            .await
            .expect("offset"),
        Some(2)
    );
    assert_eq!(
        cluster
            .committed_offset(BROKER, group, topic, 0)
            .await
            .expect("broker"),
        Some(2)
    );
    let stored = consumer
        .earliest_msg_store_time(&queue)
        .await
        .expect("time");
    assert_eq!(
        consumer
            .search_offset(&queue, stored)
            .await
            .expect("search"),
        0
    );

    // A message handed back comes through the group's retry topic.
    consumer
        .send_message_back(&first_two.messages[0], 1)
        .await
        .expect("sent back");
    let retry = MessageQueue::new(retry_topic(group), BROKER, 0);
    let retried = eventually("the message reaches the retry topic", || async {
        let result = consumer
            .pull_block_if_not_found(&retry, "*", 0, 32)
            .await
            .ok()?;
        (result.status == PullStatus::Found).then_some(result.messages)
    })
    .await;
    assert_eq!(bodies(&retried), ["m0"]);

    consumer.shutdown().await;
    cluster.shutdown().await;
}

/// What a schedule-service task saw: (member, queue, offset, body).
type Seen = (usize, MessageQueue, i64, String);

async fn schedule_member(
    namesrv: &str,
    member: usize,
    topic: &'static str,
    seen: tokio::sync::mpsc::UnboundedSender<Seen>,
) -> PullScheduleService {
    let client = Client::start(ClientConfig::new(namesrv)).expect("client");
    PullScheduleService::builder()
        .client(client)
        .group("schedule_group")
        .configure(|c| {
            c.rebalance_interval = Duration::from_millis(300);
            c.persist_consumer_offset_interval = Duration::from_millis(100);
        })
        .register_pull_task_fn(topic, move |queue, mut ctx| {
            let seen = seen.clone();
            async move {
                let consumer = ctx.pull_consumer().clone();
                let offset = match consumer.fetch_consume_offset(&queue, false).await {
                    Ok(Some(offset)) => offset,
                    Ok(None) => 0,
                    Err(_) => return ctx,
                };
                if let Ok(result) = consumer.pull(&queue, "*", offset, 32).await {
                    for m in &result.messages {
                        let _ = seen.send((member, queue.clone(), m.queue_offset, text(m)));
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
        .expect("schedule service starts")
}

/// Waits until the running tasks of `members` are disjoint and cover `queues`.
async fn settled(members: &[&PullScheduleService], queues: usize) -> Vec<BTreeSet<MessageQueue>> {
    eventually("every queue's task runs in exactly one member", || async {
        let mut sets = Vec::new();
        for m in members {
            sets.push(m.running_tasks().await.into_iter().collect::<BTreeSet<_>>());
        }
        let total: usize = sets.iter().map(BTreeSet::len).sum();
        let union: BTreeSet<_> = sets.iter().flatten().cloned().collect();
        (total == queues && union.len() == queues).then_some(sets)
    })
    .await
}

/// Collects what was seen until every body of `expected` is among it.
async fn collect_until(
    rx: &mut UnboundedReceiver<Seen>,
    seen: &mut Vec<Seen>,
    expected: &BTreeSet<String>,
) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let got: BTreeSet<String> = seen.iter().map(|s| s.3.clone()).collect();
        if expected.is_subset(&got) {
            return;
        }
        let missing = expected.difference(&got).count();
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(item)) => seen.push(item),
            _ => panic!("{missing} messages never reached a task"),
        }
    }
}

#[actix_rt::test]
async fn three_schedule_services_share_the_queues_through_joins_and_leaves() {
    let topic = "Scheduled";
    let (cluster, namesrv) = cluster_with_topic(topic, 8).await;
    let producer = producer(&cluster);
    let (tx, mut rx) = unbounded_channel();
    let mut seen = Vec::new();

    let first = schedule_member(&namesrv, 1, topic, tx.clone()).await;
    let second = schedule_member(&namesrv, 2, topic, tx.clone()).await;
    let third = schedule_member(&namesrv, 3, topic, tx.clone()).await;
    let sets = settled(&[&first, &second, &third], 8).await;
    assert!(
        sets.iter().all(|s| !s.is_empty()),
        "each member got a share: {sets:?}"
    );
    send_numbered(&producer, topic, 0..300).await;
    let expected: BTreeSet<String> = (0..300).map(body_of).collect();
    collect_until(&mut rx, &mut seen, &expected).await;

    // One leaves: the other two take its queues over, nothing is lost.
    second.shutdown().await;
    settled(&[&first, &third], 8).await;
    send_numbered(&producer, topic, 300..600).await;
    let expected: BTreeSet<String> = (0..600).map(body_of).collect();
    collect_until(&mut rx, &mut seen, &expected).await;

    // A new one joins and gets a share.
    let fourth = schedule_member(&namesrv, 4, topic, tx.clone()).await;
    let sets = settled(&[&first, &third, &fourth], 8).await;
    assert!(!sets[2].is_empty(), "the newcomer owns queues");
    send_numbered(&producer, topic, 600..900).await;
    let expected: BTreeSet<String> = (0..900).map(body_of).collect();
    collect_until(&mut rx, &mut seen, &expected).await;

    // Duplicates happen only around a handoff, never as a second copy from one queue owner.
    let mut by_member: BTreeMap<(usize, String), usize> = BTreeMap::new();
    for (member, _, _, body) in &seen {
        *by_member.entry((*member, body.clone())).or_default() += 1;
    }
    assert!(
        by_member.values().all(|&n| n == 1),
        "a member never consumed one message twice"
    );
    first.shutdown().await;
    third.shutdown().await;
    fourth.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_panicking_pull_task_is_retried_not_fatal() {
    let topic = "PanickyTask";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    let calls = Shared::new(0usize);
    let counter = calls.clone();
    let service = PullScheduleService::builder()
        .namesrv_addr(&namesrv)
        .group("panicky_group")
        .register_pull_task_fn(topic, move |_queue, ctx| {
            let counter = counter.clone();
            async move {
                *counter.borrow_mut() += 1;
                if counter.get() == 1 {
                    panic!("the first run fails");
                }
                ctx
            }
        })
        .start()
        .await
        .expect("starts");
    eventually("the task runs again after its panic", || async {
        (calls.get() >= 2).then_some(())
    })
    .await;
    assert_eq!(service.running_tasks().await, vec![mq(topic, 0)]);
    service.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn lite_pull_seeks_back_and_delivers_again_from_the_seek_point() {
    let topic = "LiteSeek";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    send_numbered(&producer(&cluster), topic, 0..20).await;
    let consumer = lite(&namesrv, "lite_seek")
        .subscribe(topic, "*")
        .start()
        .await
        .expect("lite consumer starts");
    let first = poll_n(&consumer, 20).await;
    assert_eq!(bodies(&first), (0..20).map(body_of).collect::<Vec<_>>());
    let queue = mq(topic, 0);
    consumer.seek(&queue, 5).await.expect("seek");
    let again = poll_n(&consumer, 15).await;
    assert_eq!(bodies(&again), (5..20).map(body_of).collect::<Vec<_>>());
    assert!(consumer.seek(&queue, 99).await.is_err(), "beyond the end");
    consumer.seek_to_begin(&queue).await.expect("seek to begin");
    assert_eq!(text(&poll_n(&consumer, 1).await[0]), "m0");
    consumer.seek_to_end(&queue).await.expect("seek to end");
    assert!(consumer
        .poll_timeout(Duration::from_millis(300))
        .await
        .is_empty());
    let stored = first[7].store_timestamp;
    assert!(
        consumer
            .offset_for_timestamp(&queue, stored)
            .await
            .expect("search")
            <= 7
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn paused_queues_deliver_nothing_until_resumed() {
    let topic = "LitePause";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    let producer = producer(&cluster);
    let consumer = lite(&namesrv, "lite_pause")
        .assign(vec![mq(topic, 0), mq(topic, 1)])
        .start()
        .await
        .expect("starts");
    consumer.pause(&[mq(topic, 1)]).await;
    for i in 0..10 {
        let queue = mq(topic, (i % 2) as i32);
        producer
            .send_to_queue(Message::new(topic, body_of(i)), &queue)
            .await
            .expect("sent");
    }
    let got = poll_n(&consumer, 5).await;
    assert!(got.iter().all(|m| m.queue_id == 0), "only queue 0 delivers");
    assert!(
        consumer
            .poll_timeout(Duration::from_millis(500))
            .await
            .is_empty(),
        "nothing from the paused queue"
    );
    consumer.resume(&[mq(topic, 1)]).await;
    let rest = poll_n(&consumer, 5).await;
    assert!(rest.iter().all(|m| m.queue_id == 1));
    assert_eq!(
        consumer.assignment().await,
        vec![mq(topic, 0), mq(topic, 1)]
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn committed_offsets_survive_a_restart_without_loss_or_duplicates() {
    let topic = "LiteCommit";
    let group = "lite_commit";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    let producer = producer(&cluster);
    send_numbered(&producer, topic, 0..40).await;
    let manual = |namesrv: &str| {
        lite(namesrv, group)
            .subscribe(topic, "*")
            .configure(|c| c.auto_commit = false)
    };
    let consumer = manual(&namesrv).start().await.expect("starts");
    let first = poll_n(&consumer, 40).await;
    consumer.commit_sync().await.expect("committed");
    let queue = mq(topic, 0);
    let committed = consumer.committed(&queue).await.expect("committed offset");
    assert!(committed.is_some_and(|o| o > 0));
    consumer.shutdown().await;

    send_numbered(&producer, topic, 40..60).await;
    let consumer = manual(&namesrv).start().await.expect("restarts");
    let second = poll_n(&consumer, 20).await;
    assert!(
        consumer
            .poll_timeout(Duration::from_millis(500))
            .await
            .is_empty(),
        "nothing more than the new messages"
    );
    let all: Vec<String> = bodies(&first).into_iter().chain(bodies(&second)).collect();
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(all.len(), 60, "no duplicates");
    assert_eq!(distinct.len(), 60, "nothing lost");
    consumer.commit_sync().await.expect("committed");

    // Without a commit, a restart delivers the uncommitted messages again (at-least-once).
    send_numbered(&producer, topic, 60..70).await;
    let polled = poll_n(&consumer, 10).await;
    assert_eq!(polled.len(), 10);
    consumer.shutdown().await;
    let consumer = manual(&namesrv).start().await.expect("restarts again");
    let again = poll_n(&consumer, 10).await;
    assert_eq!(
        bodies(&again).into_iter().collect::<BTreeSet<_>>(),
        (60..70).map(body_of).collect::<BTreeSet<_>>()
    );
    // An explicit commit of chosen offsets.
    let mut offsets = BTreeMap::new();
    offsets.insert(queue.clone(), 1);
    consumer.commit(&offsets).await.expect("commit");
    assert_eq!(consumer.committed(&queue).await.expect("read"), Some(1));
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn the_lite_stream_yields_every_message() {
    let topic = "LiteStream";
    let (cluster, namesrv) = cluster_with_topic(topic, 4).await;
    send_numbered(&producer(&cluster), topic, 0..100).await;
    let consumer = lite(&namesrv, "lite_stream")
        .subscribe(topic, "*")
        .start()
        .await
        .expect("starts");
    let got: BTreeSet<String> = tokio::time::timeout(
        PATIENCE,
        consumer
            .stream()
            .take(100)
            .map(|m| text(&m))
            .collect::<BTreeSet<_>>(),
    )
    .await
    .expect("100 messages streamed");
    assert_eq!(got, (0..100).map(body_of).collect());
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn the_lite_stream_commits_only_what_it_yielded() {
    let topic = "LiteStreamCommit";
    let group = "lite_stream_commit";
    // One queue, so the stream's order is the queue's order and a batch holds many messages.
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    let producer = producer(&cluster);
    send_numbered(&producer, topic, 0..40).await;
    let manual = |namesrv: &str| {
        lite(namesrv, group)
            .subscribe(topic, "*")
            .configure(|c| c.auto_commit = false)
    };
    let consumer = manual(&namesrv).start().await.expect("starts");
    let mut stream = consumer.stream();
    let mut first = Vec::new();
    read_stream(&mut stream, &mut first, 5).await;
    assert_eq!(first, (0..5).map(body_of).collect::<Vec<_>>());
    // Commit mid-batch: only the five yielded count.
    consumer.commit_sync().await.expect("committed");
    let queues = consumer.assignment().await;
    assert_eq!(queues.len(), 1);
    assert_eq!(consumer.committed(&queues[0]).await.expect("read"), Some(5));

    // Dropping the stream mid-batch skips nothing: a new stream starts at the sixth.
    drop(stream);
    let next: Vec<String> = stream_bodies(&consumer, 35).await;
    assert_eq!(next, (5..40).map(body_of).collect::<Vec<_>>());
    consumer.commit_sync().await.expect("committed");
    consumer.shutdown().await;

    // After a restart, only new messages come.
    send_numbered(&producer, topic, 40..45).await;
    let consumer = manual(&namesrv).start().await.expect("restarts");
    let after: Vec<String> = stream_bodies(&consumer, 5).await;
    assert_eq!(after, (40..45).map(body_of).collect::<Vec<_>>());
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn the_lite_stream_runs_past_the_consume_span_without_a_commit() {
    let topic = "LiteStreamSpan";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    // More than `consume_max_span` (2000) messages on one queue, never committed.
    send_numbered(&producer(&cluster), topic, 0..2600).await;
    let consumer = lite(&namesrv, "lite_stream_span")
        .subscribe(topic, "*")
        .configure(|c| {
            c.auto_commit = false;
            c.pull_batch_size = 32;
        })
        .start()
        .await
        .expect("starts");
    let got: Vec<String> = stream_bodies(&consumer, 2600).await;
    assert_eq!(got, (0..2600).map(body_of).collect::<Vec<_>>());
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_paused_queue_stops_a_stream_mid_batch_and_resumes_where_it_stopped() {
    let topic = "LiteStreamPause";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    send_numbered(&producer(&cluster), topic, 0..40).await;
    let consumer = lite(&namesrv, "lite_stream_pause")
        .subscribe(topic, "*")
        .configure(|c| c.pull_batch_size = 20)
        .start()
        .await
        .expect("starts");
    let mut stream = consumer.stream();
    let mut got = Vec::new();
    read_stream(&mut stream, &mut got, 3).await;
    let queues = consumer.assignment().await;
    consumer.pause(&queues).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(500), stream.next())
            .await
            .is_err(),
        "nothing from a paused queue, not even the rest of the batch in hand"
    );
    consumer.resume(&queues).await;
    read_stream(&mut stream, &mut got, 40).await;
    assert_eq!(
        got,
        (0..40).map(body_of).collect::<Vec<_>>(),
        "no gap, no repeat"
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_reset_by_time_rewinds_running_push_and_lite_consumers() {
    let topic = "ResetRunning";
    let cluster = fast_retry_cluster(2).await;
    cluster.create_topic(topic, 2).await.expect("topic");
    let namesrv = cluster.namesrv_addr();
    let producer = producer(&cluster);
    send_numbered(&producer, topic, 0..30).await;

    let (push_tx, mut push_rx) = unbounded_channel();
    let push = PushConsumer::builder()
        .namesrv_addr(&namesrv)
        .group("reset_push")
        .subscribe(topic, "*")
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::FirstOffset;
            c.persist_consumer_offset_interval = Duration::from_millis(100);
        })
        .listener_fn(move |messages, ctx| {
            for m in &messages {
                let _ = push_tx.send(text(m));
            }
            async move { (ConsumeStatus::Success, ctx) }
        })
        .start()
        .await
        .expect("push starts");
    let lite = lite(&namesrv, "reset_lite")
        .subscribe(topic, "*")
        .start()
        .await
        .expect("lite starts");
    let expected: BTreeSet<String> = (0..30).map(body_of).collect();
    let pushed: BTreeSet<String> = receive(&mut push_rx, 30).await.into_iter().collect();
    assert_eq!(pushed, expected);
    assert_eq!(
        bodies(&poll_n(&lite, 30).await)
            .into_iter()
            .collect::<BTreeSet<_>>(),
        expected
    );
    // Let both commit, so the broker knows where they are.
    lite.commit_sync().await.expect("lite commits");
    eventually("the push consumer committed everything", || async {
        let mut total = 0;
        for broker in cluster.broker_names() {
            for q in 0..2 {
                total += cluster
                    .committed_offset(&broker, "reset_push", topic, q)
                    .await
                    .ok()??;
            }
        }
        (total == 30).then_some(())
    })
    .await;

    let admin = Client::start(ClientConfig::new(&namesrv)).expect("client");
    for group in ["reset_push", "reset_lite"] {
        let table = admin
            .reset_offset_by_timestamp(group, topic, 0, true)
            .await
            .expect("reset");
        assert_eq!(table.len(), 4, "every queue of both brokers: {table:?}");
        assert!(table.iter().all(|(_, offset)| *offset == 0));
    }
    let pushed_again: BTreeSet<String> = receive(&mut push_rx, 30).await.into_iter().collect();
    assert_eq!(pushed_again, expected, "the push consumer rewound");
    let polled_again: BTreeSet<String> = bodies(&poll_n(&lite, 30).await).into_iter().collect();
    assert_eq!(polled_again, expected, "the lite consumer rewound");

    push.shutdown().await;
    lite.shutdown().await;
    admin.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_reset_reaches_a_schedule_task_in_a_long_poll_and_a_hand_pulling_consumer() {
    let topic = "ResetPullKinds";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    let producer = producer(&cluster);
    send_numbered(&producer, topic, 0..20).await;
    let queue = mq(topic, 0);

    // A schedule service whose task long-polls and stores the offset it pulled up to.
    let (seen_tx, mut seen_rx) = unbounded_channel();
    let service = PullScheduleService::builder()
        .namesrv_addr(&namesrv)
        .group("reset_schedule")
        .configure(|c| c.persist_consumer_offset_interval = Duration::from_millis(100))
        .register_pull_task_fn(topic, move |queue, mut ctx| {
            let seen = seen_tx.clone();
            async move {
                let consumer = ctx.pull_consumer().clone();
                let offset = match consumer.fetch_consume_offset(&queue, false).await {
                    Ok(offset) => offset.unwrap_or(0),
                    Err(_) => return ctx,
                };
                if let Ok(result) = consumer
                    .pull_block_if_not_found(&queue, "*", offset, 32)
                    .await
                {
                    for m in &result.messages {
                        let _ = seen.send(text(m));
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
    let expected: Vec<String> = (0..20).map(body_of).collect();
    assert_eq!(receive(&mut seen_rx, 20).await, expected);

    // A pull consumer that subscribes to nothing and pulls by hand.
    let (reset_tx, mut resets) = unbounded_channel();
    let hand = pull_consumer(&namesrv, "reset_hand")
        .offset_reset_listener_fn(move |queue, offset| {
            let _ = reset_tx.send((queue.clone(), offset));
        })
        .start()
        .await
        .expect("pull consumer starts");
    assert_eq!(
        hand.fetch_subscribe_message_queues(topic)
            .await
            .expect("queues"),
        vec![queue.clone()]
    );
    let pulled = hand.pull(&queue, "*", 0, 32).await.expect("pull");
    assert_eq!(pulled.messages.len(), 20);
    hand.update_consume_offset(&queue, pulled.next_begin_offset)
        .await;
    hand.persist_consume_offsets().await.expect("persisted");

    // The task is now held in a long poll at offset 20, and its offset is on the broker (a
    // group that never committed cannot be reset).
    eventually("the task's pull is held", || async {
        (cluster.held_pulls(BROKER).await.ok()? > 0).then_some(())
    })
    .await;
    eventually("the task's offset is persisted", || async {
        let committed = cluster
            .committed_offset(BROKER, "reset_schedule", topic, 0)
            .await
            .ok()??;
        (committed == 20).then_some(())
    })
    .await;
    let admin = Client::start(ClientConfig::new(&namesrv)).expect("client");
    let mut rewound = Vec::new();
    for group in ["reset_schedule", "reset_hand"] {
        rewound.push(
            admin
                .reset_offset_by_timestamp(group, topic, 0, true)
                .await
                .expect("reset"),
        );
    }
    assert_eq!(rewound[0], vec![(queue.clone(), 0)]);
    assert_eq!(rewound[1], vec![(queue.clone(), 0)]);
    // The hand-pulling consumer was online (heartbeated when it fetched the queues): told.
    assert_eq!(receive(&mut resets, 1).await, vec![(queue.clone(), 0)]);
    assert_eq!(
        hand.fetch_consume_offset(&queue, false)
            .await
            .expect("offset"),
        Some(0)
    );

    // Wake the held poll: its call stores 21, which must not undo the reset.
    send_numbered(&producer, topic, 20..21).await;
    let again = receive(&mut seen_rx, 22).await;
    assert_eq!(again[0], body_of(20), "the held poll's message");
    assert_eq!(
        again[1..],
        (0..21).map(body_of).collect::<Vec<_>>()[..],
        "then everything again from the reset point"
    );
    service.shutdown().await;
    hand.shutdown().await;
    admin.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_reset_of_a_group_with_no_live_member_rewrites_its_stored_offsets() {
    let topic = "ResetOffline";
    let group = "reset_offline";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    send_numbered(&producer(&cluster), topic, 0..10).await;
    // A member stores offsets, then leaves: the group is known but has no live member.
    let member = pull_consumer(&namesrv, group)
        .start()
        .await
        .expect("starts");
    member
        .fetch_subscribe_message_queues(topic)
        .await
        .expect("queues");
    for q in 0..2 {
        member.update_consume_offset(&mq(topic, q), 5).await;
    }
    member.persist_consume_offsets().await.expect("persisted");
    member.shutdown().await;
    let admin = Client::start(ClientConfig::new(&namesrv)).expect("client");
    let table = admin
        .reset_offset_by_timestamp(group, topic, 0, true)
        .await
        .expect("reset");
    assert_eq!(table, vec![(mq(topic, 0), 0), (mq(topic, 1), 0)]);
    for q in 0..2 {
        assert_eq!(
            cluster
                .committed_offset(BROKER, group, topic, q)
                .await
                .expect("broker"),
            Some(0)
        );
    }
    // To the end: every queue's max offset.
    let table = admin
        .reset_offset_by_timestamp(group, topic, -1, true)
        .await
        .expect("reset to the end");
    let ends: i64 = table.iter().map(|(_, offset)| offset).sum();
    assert_eq!(ends, 10);
    admin.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn assigned_queues_come_as_batches_and_the_topic_listener_hears_new_queues() {
    let topic = "LiteAssigned";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    let producer = producer(&cluster);
    for i in 0..20 {
        producer
            .send_to_queue(Message::new(topic, body_of(i)), &mq(topic, i as i32 % 2))
            .await
            .expect("sent");
    }
    let (tx, mut changes) = unbounded_channel();
    let consumer = lite(&namesrv, "lite_assigned")
        .assign(vec![mq(topic, 1)])
        .topic_queue_change_listener(topic, move |topic, queues| {
            let _ = tx.send((topic.to_owned(), queues.len()));
        })
        .configure(|c| c.topic_metadata_check_interval = Duration::from_millis(100))
        .start()
        .await
        .expect("starts");
    assert_eq!(
        receive(&mut changes, 1).await,
        vec![(topic.to_owned(), 2)],
        "told the queue set at start"
    );
    let mut batches = consumer.batches();
    let mut got = Vec::new();
    while got.len() < 10 {
        let batch = tokio::time::timeout(PATIENCE, batches.next())
            .await
            .expect("in time")
            .expect("a batch");
        assert!(!batch.is_empty(), "batches are never empty");
        assert!(
            batch.iter().all(|m| m.queue_id == 1),
            "only the assigned queue"
        );
        got.extend(bodies(&batch));
    }
    let odd: Vec<String> = (0..20).filter(|i| i % 2 == 1).map(body_of).collect();
    assert_eq!(got, odd);

    // The topic grows: the listener hears of it.
    cluster.create_topic(topic, 4).await.expect("more queues");
    assert_eq!(receive(&mut changes, 1).await, vec![(topic.to_owned(), 4)]);
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_long_run_of_filtered_out_messages_does_not_stall_a_lite_queue() {
    let topic = "LiteFilteredRun";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    let producer = producer(&cluster);
    let queue = mq(topic, 0);
    // Far more than `consume_max_span` (2000) messages the subscription does not want.
    let unwanted: Vec<Message> = (0..2500)
        .map(|i| Message::new(topic, body_of(i)).with_tags("other"))
        .collect();
    for chunk in unwanted.chunks(100) {
        producer
            .send_batch(chunk.to_vec())
            .await
            .expect("batch sent");
    }
    for i in 2500..2510 {
        producer
            .send_to_queue(Message::new(topic, body_of(i)).with_tags("wanted"), &queue)
            .await
            .expect("sent");
    }
    let consumer = lite(&namesrv, "lite_filtered_run")
        .subscribe(topic, "wanted")
        .configure(|c| c.auto_commit = false)
        .start()
        .await
        .expect("starts");
    let got = bodies(&poll_n(&consumer, 10).await);
    assert_eq!(got, (2500..2510).map(body_of).collect::<Vec<_>>());
    consumer.commit_sync().await.expect("committed");
    assert_eq!(
        consumer.committed(&queue).await.expect("read"),
        Some(2510),
        "the commit covers the filtered-out run too"
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
}
