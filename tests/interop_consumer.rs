//! The push consumer against a real RocketMQ cluster (one name server, brokers `broker-a` and
//! `broker-b`), e.g. the one `scripts/real-cluster.sh start` runs: the behaviour a user relies
//! on — every message delivered, rebalancing, broadcasting, tag filtering, retries, orderly
//! consumption under broker locks, consuming from a timestamp, resuming after a restart.
//!
//! Every test is skipped (with a message on stderr) unless `ROCKETMQ_NAMESRV` names the name
//! server:
//!
//! ```text
//! scripts/real-cluster.sh start
//! ROCKETMQ_NAMESRV=127.0.0.1:9876 cargo test --test interop_consumer -- --nocapture
//! ```
//!
//! Each test uses fresh topic and group names (time-stamped), so runs do not see each other's
//! messages, offsets or locks. Topics are created up front (UPDATE_AND_CREATE_TOPIC on both
//! brokers, then a bounded wait for the name server's route) so that every test spans both
//! brokers; auto-creation by a first send would put the topic on whichever broker it reached.
//!
//! Set `RUST_LOG=rocketmq_actor=debug` to see the consumer runtime's tracing.

mod interop_common;
use interop_common::*;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::{Future, Ready};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocketmq_actor::consumer::config::format_consume_timestamp_utc;
use rocketmq_actor::consumer::decode_local_offsets;
use rocketmq_actor::consumer::retry_topic;
use rocketmq_actor::consumer::{ConsumeContext, ConsumeStatus, Messages};
use rocketmq_actor::consumer::{ConsumeFromWhere, MessageModel, OrderlyContext, OrderlyStatus};
use rocketmq_actor::protocol::body::{
    decode_json, encode_json, LockBatchRequestBody, LockBatchResponseBody,
};
use rocketmq_actor::protocol::codes::{request_code, response_code};
use rocketmq_actor::protocol::header::{
    LockBatchMqRequestHeader, QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
};
use rocketmq_actor::protocol::RemotingCommand;
use rocketmq_actor::route::TopicRoute;
use rocketmq_actor::Client;
use rocketmq_actor::{Message, MessageExt, MessageQueue};
use rocketmq_actor::{Producer, ProducerConfig, SendResult, SendStatus};
use rocketmq_actor::{PushConsumer, PushConsumerBuilder};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// How long a test waits for something that should happen before calling it lost. Generous:
/// a real broker takes its time (retries wait for a delay level and for the retry topic's
/// route; rebalancing after a member leaves may wait for the 20 s rebalance timer).
const PATIENCE: Duration = Duration::from_secs(90);
/// How often a condition without an event to await (queue ownership, committed offsets) is
/// polled.
const POLL: Duration = Duration::from_millis(100);
/// How often consumers here persist offsets (the default is 5 s).
const PERSIST_EVERY: Duration = Duration::from_millis(200);

/// A client, a producer and a fresh topic on both brokers.
struct Fixture {
    namesrv: String,
    client: Client,
    producer: Producer,
    topic: String,
    route: Arc<TopicRoute>,
}

impl Fixture {
    async fn new(namesrv: String, topic_prefix: &str) -> Fixture {
        let client = start_client(&namesrv);
        let topic = unique(topic_prefix);
        let route = create_topic(&client, &namesrv, &topic).await;
        assert_eq!(
            route.consume_queues.len(),
            BROKERS.len() * QUEUES_PER_BROKER as usize
        );
        let producer = Producer::new(client.clone(), ProducerConfig::default());
        Fixture {
            namesrv,
            client,
            producer,
            topic,
            route,
        }
    }

    /// Sends `message(i)` for every `i` of `range`, all at once; panics on any failure.
    async fn send_all(
        &self,
        range: std::ops::Range<usize>,
        message: impl Fn(usize) -> Message,
    ) -> Vec<SendResult> {
        let sends = range.map(|i| {
            let producer = self.producer.clone();
            let message = message(i);
            async move { (i, producer.send(message).await) }
        });
        futures::future::join_all(sends)
            .await
            .into_iter()
            .map(|(i, result)| {
                let result = result.unwrap_or_else(|e| panic!("send {i}: {e}"));
                assert_eq!(result.status, SendStatus::SendOk);
                result
            })
            .collect()
    }

    /// Sends `m{i}` for every `i` of `range`.
    async fn send_numbered(&self, range: std::ops::Range<usize>) -> Vec<SendResult> {
        let topic = self.topic.clone();
        self.send_all(range, |i| Message::new(topic.as_str(), body_of(i)))
            .await
    }

    /// A consumer builder for `group` on this topic: first offset for new groups, offsets
    /// persisted every [`PERSIST_EVERY`].
    fn consumer(&self, group: &str, expression: &str) -> PushConsumerBuilder {
        PushConsumer::builder()
            .namesrv_addr(self.namesrv.as_str())
            .group(group)
            .subscribe(self.topic.as_str(), expression)
            .configure(|c| {
                c.consume_from_where = ConsumeFromWhere::FirstOffset;
                c.persist_consumer_offset_interval = PERSIST_EVERY;
            })
    }

    async fn shutdown(self) {
        self.client.shutdown().await;
    }
}

fn body_of(i: usize) -> String {
    format!("m{i}")
}

/// What a listener saw of one message.
#[derive(Debug, Clone)]
struct Seen {
    /// Which consumer of the test.
    consumer: usize,
    /// The topic the message reports (the original topic, also for retries).
    topic: String,
    body: String,
    tags: Option<String>,
    msg_id: String,
    reconsume_times: i32,
    /// The queue it was pulled from (`%RETRY%<group>` for a retry).
    queue: MessageQueue,
    /// When the listener saw it.
    at: Instant,
}

fn seen_of(consumer: usize, message: &MessageExt, queue: &MessageQueue) -> Seen {
    Seen {
        consumer,
        topic: message.topic().to_owned(),
        body: String::from_utf8_lossy(message.body()).into_owned(),
        tags: message.tags().map(str::to_owned),
        msg_id: message.msg_id().into_owned(),
        reconsume_times: message.reconsume_times,
        queue: queue.clone(),
        at: Instant::now(),
    }
}

/// A listener that reports every message and succeeds.
fn recording(
    consumer: usize,
    sink: UnboundedSender<Seen>,
) -> impl Fn(Messages, ConsumeContext) -> Ready<(ConsumeStatus, ConsumeContext)> + 'static {
    move |messages, ctx| {
        for m in &messages {
            let _ = sink.send(seen_of(consumer, m, &ctx.queue));
        }
        std::future::ready((ConsumeStatus::Success, ctx))
    }
}

/// Receives exactly `count` deliveries, panicking if they do not come within [`PATIENCE`].
async fn receive(rx: &mut UnboundedReceiver<Seen>, count: usize) -> Vec<Seen> {
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::with_capacity(count);
    while seen.len() < count {
        match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
            Ok(Some(s)) => seen.push(s),
            Ok(None) => panic!("the listeners went away after {} of {count}", seen.len()),
            Err(_) => panic!("only {} of {count} deliveries arrived", seen.len()),
        }
    }
    seen
}

/// Receives until every body of `expected` was delivered at least once; returns everything
/// received (duplicates included).
async fn receive_all_of(
    rx: &mut UnboundedReceiver<Seen>,
    expected: &BTreeSet<String>,
) -> Vec<Seen> {
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    let mut missing = expected.clone();
    while !missing.is_empty() {
        match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
            Ok(Some(s)) => {
                missing.remove(&s.body);
                seen.push(s);
            }
            Ok(None) => panic!("the listeners went away; {} missing", missing.len()),
            Err(_) => panic!(
                "{} of {} messages never arrived, e.g. {:?}",
                missing.len(),
                expected.len(),
                missing.iter().take(5).collect::<Vec<_>>()
            ),
        }
    }
    seen
}

/// Polls `probe` every [`POLL`] until it yields a value; panics after [`PATIENCE`] with the
/// last state it described.
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(state) => assert!(
                Instant::now() < deadline,
                "timed out after {PATIENCE:?} waiting for {what}; last: {state}"
            ),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The offset the broker holds for `group` on `queue` (`None`: nothing committed).
async fn committed_offset(
    client: &Client,
    route: &TopicRoute,
    group: &str,
    queue: &MessageQueue,
) -> Option<i64> {
    let addr = route
        .master_addr(&queue.broker_name)
        .expect("master in route");
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: group.to_owned(),
        topic: queue.topic.clone(),
        queue_id: queue.queue_id,
        set_zero_if_not_found: Some(false),
        bname: Some(queue.broker_name.clone()),
    };
    let response = client
        .request(
            addr,
            RemotingCommand::request_with_header(request_code::QUERY_CONSUMER_OFFSET, &header),
            Duration::from_secs(5),
        )
        .await
        .expect("QUERY_CONSUMER_OFFSET answered");
    match response.code {
        response_code::SUCCESS => response
            .decode_header::<QueryConsumerOffsetResponseHeader>()
            .ok()
            .map(|h| h.offset),
        _ => None,
    }
}

/// The queues of `ends` whose committed offset for `group` is below their end, described.
async fn committed_behind(
    client: &Client,
    route: &TopicRoute,
    group: &str,
    ends: &BTreeMap<MessageQueue, i64>,
) -> Vec<String> {
    let mut behind = Vec::new();
    for (queue, end) in ends {
        let committed = committed_offset(client, route, group, queue).await;
        if committed.is_none_or(|c| c < *end) {
            behind.push(format!("{queue}: {committed:?} < {end}"));
        }
    }
    behind
}

/// Waits until the broker holds, for `group`, a committed offset at least the end of every
/// queue in `ends`: the group has then consumed (or filtered out) everything sent, so any
/// delivery still to come would be a duplicate.
async fn await_committed_to_end(
    client: &Client,
    route: &TopicRoute,
    group: &str,
    ends: &BTreeMap<MessageQueue, i64>,
) {
    eventually(
        "the group's offsets to reach the end of every queue",
        || async {
            let behind = committed_behind(client, route, group, ends).await;
            if behind.is_empty() {
                Ok(())
            } else {
                Err(behind.join(", "))
            }
        },
    )
    .await
}

/// Asserts that nothing is waiting in `rx` right now.
fn assert_nothing_more(rx: &mut UnboundedReceiver<Seen>, context: &str) {
    if let Ok(extra) = rx.try_recv() {
        panic!("{context}: unexpected delivery {extra:?}");
    }
}

fn bodies(seen: &[Seen]) -> BTreeSet<String> {
    seen.iter().map(|s| s.body.clone()).collect()
}

fn numbered(range: std::ops::Range<usize>) -> BTreeSet<String> {
    range.map(body_of).collect()
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn a_consumer_receives_every_message_from_both_brokers_once() {
    let namesrv = namesrv();
    let fx = Fixture::new(namesrv, "ConsumeBoth").await;
    const COUNT: usize = 200;
    let sent = fx.send_numbered(0..COUNT).await;
    let group = unique("both_group");
    let (tx, mut rx) = unbounded_channel();
    let consumer = fx
        .consumer(&group, "*")
        .listener_fn(recording(0, tx))
        .start()
        .await
        .expect("consumer starts");

    let seen = receive(&mut rx, COUNT).await;
    assert_eq!(bodies(&seen), numbered(0..COUNT), "every message, once");
    let brokers: BTreeSet<&str> = seen.iter().map(|s| s.queue.broker_name.as_str()).collect();
    assert_eq!(
        brokers,
        BTreeSet::from(BROKERS),
        "consumed from both brokers"
    );
    let sent_ids: HashMap<String, &str> = sent
        .iter()
        .enumerate()
        .map(|(i, r)| (body_of(i), r.msg_id.as_str()))
        .collect();
    for s in &seen {
        assert_eq!(s.topic, fx.topic);
        assert_eq!(s.reconsume_times, 0);
        assert_eq!(
            s.msg_id, sent_ids[&s.body],
            "the consumer sees the producer's msgId"
        );
    }
    await_committed_to_end(&fx.client, &fx.route, &group, &queue_ends(&sent)).await;
    assert_nothing_more(&mut rx, "after every offset was committed");
    let stats = consumer.stats().await;
    assert_eq!(stats.consumed_ok, COUNT as u64);
    assert_eq!(stats.consumed_failed, 0);
    consumer.shutdown().await;
    fx.shutdown().await;
}

/// Which consumers (by index) own each queue of `topic` now.
async fn ownership(
    consumers: &[(usize, &PushConsumer)],
    topic: &str,
) -> BTreeMap<MessageQueue, Vec<usize>> {
    let mut owners: BTreeMap<MessageQueue, Vec<usize>> = BTreeMap::new();
    for (index, consumer) in consumers {
        for queue in consumer.owned_queues().await {
            if queue.topic == topic {
                owners.entry(queue).or_default().push(*index);
            }
        }
    }
    owners
}

/// Waits until every queue of the route is owned by exactly one of `consumers` and each of
/// them owns at least one; returns the owner of each queue.
async fn await_settled(
    consumers: &[(usize, &PushConsumer)],
    route: &TopicRoute,
) -> BTreeMap<MessageQueue, usize> {
    let topic = route.topic.as_str();
    let all: BTreeSet<MessageQueue> = route.consume_queues.iter().cloned().collect();
    eventually("every queue to have exactly one owner", || async {
        let owners = ownership(consumers, topic).await;
        let single: BTreeMap<MessageQueue, usize> = owners
            .iter()
            .filter(|(_, o)| o.len() == 1)
            .map(|(q, o)| (q.clone(), o[0]))
            .collect();
        let every_consumer_owns = consumers
            .iter()
            .all(|(i, _)| single.values().any(|owner| owner == i));
        if single.len() == owners.len()
            && owners.keys().cloned().collect::<BTreeSet<_>>() == all
            && every_consumer_owns
        {
            Ok(single)
        } else {
            Err(format!("{owners:?}"))
        }
    })
    .await
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn clustering_consumers_share_the_queues_and_lose_nothing_while_members_change() {
    let namesrv = namesrv();
    let fx = Fixture::new(namesrv, "Rebalance").await;
    const FIRST: usize = 300;
    const SECOND: usize = 300;
    let mut sent = fx.send_numbered(0..FIRST).await;
    let group = unique("rebalance_group");
    let (tx, mut rx) = unbounded_channel();
    let mut started = Vec::new();
    let run_started = Instant::now();
    for index in 0..3 {
        started.push(
            fx.consumer(&group, "*")
                .listener_fn(recording(index, tx.clone()))
                .start()
                .await
                .expect("consumer starts"),
        );
    }
    let mut seen = receive_all_of(&mut rx, &numbered(0..FIRST)).await;
    {
        let members: Vec<(usize, &PushConsumer)> = started.iter().enumerate().collect();
        let owners = await_settled(&members, &fx.route).await;
        eprintln!(
            "rebalance: first settled {:?} after the start",
            run_started.elapsed()
        );
        let mut per_consumer: BTreeMap<usize, usize> = BTreeMap::new();
        for owner in owners.values() {
            *per_consumer.entry(*owner).or_default() += 1;
        }
        // 8 queues over 3 members: averagely, 3 + 3 + 2.
        let mut counts: Vec<usize> = per_consumer.values().copied().collect();
        counts.sort_unstable();
        assert_eq!(counts, vec![2, 3, 3], "{owners:?}");
    }

    // A fourth member joins, the first leaves, and more messages arrive meanwhile.
    let churn_started = Instant::now();
    started.push(
        fx.consumer(&group, "*")
            .listener_fn(recording(3, tx.clone()))
            .start()
            .await
            .expect("consumer starts"),
    );
    let more = {
        let topic = fx.topic.clone();
        let producer = fx.producer.clone();
        actix_rt::spawn(async move {
            let sends = (FIRST..FIRST + SECOND).map(|i| {
                let producer = producer.clone();
                let message = Message::new(topic.as_str(), body_of(i));
                async move { producer.send(message).await }
            });
            futures::future::join_all(sends).await
        })
    };
    let leaving = started.remove(0);
    leaving.shutdown().await;
    for result in more.await.expect("sender task") {
        sent.push(result.expect("send succeeds"));
    }

    let missing = &numbered(0..FIRST + SECOND) - &bodies(&seen);
    seen.extend(receive_all_of(&mut rx, &missing).await);
    let remaining: Vec<(usize, &PushConsumer)> = started
        .iter()
        .enumerate()
        .map(|(position, c)| (position + 1, c))
        .collect();
    let owners = await_settled(&remaining, &fx.route).await;
    eprintln!(
        "rebalance: settled {:?} after the member change",
        churn_started.elapsed()
    );
    assert!(
        owners.values().all(|owner| *owner != 0),
        "the member that left owns nothing"
    );
    await_committed_to_end(&fx.client, &fx.route, &group, &queue_ends(&sent)).await;
    seen.extend(std::iter::from_fn(|| rx.try_recv().ok()));
    assert_eq!(bodies(&seen), numbered(0..FIRST + SECOND), "nothing lost");
    let mut per_body: HashMap<&str, usize> = HashMap::new();
    for s in &seen {
        *per_body.entry(&s.body).or_default() += 1;
    }
    let duplicates = seen.len() - per_body.len();
    eprintln!(
        "rebalance: {duplicates} duplicate deliveries of {}",
        seen.len()
    );
    for consumer in started {
        consumer.shutdown().await;
    }
    fx.shutdown().await;
}

/// A fresh directory under the system temp dir (removed by the test at the end).
fn temp_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(prefix));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn broadcasting(
    fx: &Fixture,
    group: &str,
    dir: &Path,
    index: usize,
    sink: UnboundedSender<Seen>,
) -> PushConsumerBuilder {
    let dir = dir.to_path_buf();
    fx.consumer(group, "*")
        .configure(move |c| {
            c.message_model = MessageModel::Broadcasting;
            c.offset_store_dir = Some(dir);
        })
        .listener_fn(recording(index, sink))
}

/// Receives until every consumer of `consumers` has seen every body of `expected`.
async fn receive_per_consumer(
    rx: &mut UnboundedReceiver<Seen>,
    consumers: &[usize],
    expected: &BTreeSet<String>,
) -> BTreeMap<usize, Vec<String>> {
    let deadline = Instant::now() + PATIENCE;
    let mut per_consumer: BTreeMap<usize, Vec<String>> =
        consumers.iter().map(|c| (*c, Vec::new())).collect();
    let done = |p: &BTreeMap<usize, Vec<String>>| {
        p.values().all(|b| expected.iter().all(|e| b.contains(e)))
    };
    while !done(&per_consumer) {
        match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
            Ok(Some(s)) => per_consumer.entry(s.consumer).or_default().push(s.body),
            Ok(None) => panic!("the listeners went away"),
            Err(_) => panic!(
                "not every consumer saw every message: {:?}",
                per_consumer
                    .iter()
                    .map(|(c, b)| (c, b.len()))
                    .collect::<Vec<_>>()
            ),
        }
    }
    per_consumer
}

/// The offsets in the local offset file of `group` under `dir` (empty until it is written).
fn local_offsets(dir: &Path, group: &str) -> BTreeMap<MessageQueue, i64> {
    let Some(file) = walk(dir).into_iter().find(|f| {
        f.to_string_lossy().contains(group) && f.extension().is_some_and(|e| e == "json")
    }) else {
        return BTreeMap::new();
    };
    std::fs::read_to_string(&file)
        .ok()
        .and_then(|text| decode_local_offsets(&text).ok())
        .unwrap_or_default()
}

/// The queues of `ends` whose offset in the file is below their end, described.
fn file_behind(dir: &Path, group: &str, ends: &BTreeMap<MessageQueue, i64>) -> Vec<String> {
    let offsets = local_offsets(dir, group);
    ends.iter()
        .filter(|(queue, end)| offsets.get(*queue).is_none_or(|o| o < *end))
        .map(|(queue, end)| format!("{queue}: {:?} < {end}", offsets.get(queue)))
        .collect()
}

/// Waits until the offset file of `group` under `dir` has reached the end of every queue.
async fn await_file_to_end(dir: &Path, group: &str, ends: &BTreeMap<MessageQueue, i64>) {
    eventually(
        "the offset file to reach the end of every queue",
        || async {
            let behind = file_behind(dir, group, ends);
            if behind.is_empty() {
                Ok(())
            } else {
                Err(behind.join(", "))
            }
        },
    )
    .await
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn broadcasting_consumers_each_see_every_message_and_resume_from_their_offset_file() {
    let namesrv = namesrv();
    let fx = Fixture::new(namesrv, "Broadcast").await;
    const FIRST: usize = 100;
    const SECOND: usize = 50;
    let mut sent = fx.send_numbered(0..FIRST).await;
    let group = unique("broadcast_group");
    let dirs = [
        temp_dir("broadcast_offsets_a"),
        temp_dir("broadcast_offsets_b"),
    ];
    let (tx, mut rx) = unbounded_channel();
    let a = broadcasting(&fx, &group, &dirs[0], 0, tx.clone())
        .start()
        .await
        .expect("consumer a starts");
    let b = broadcasting(&fx, &group, &dirs[1], 1, tx.clone())
        .start()
        .await
        .expect("consumer b starts");
    let first = receive_per_consumer(&mut rx, &[0, 1], &numbered(0..FIRST)).await;
    for (consumer, got) in &first {
        assert_eq!(
            got.len(),
            FIRST,
            "consumer {consumer} got each message once"
        );
    }
    // Every broadcasting consumer owns every queue.
    for consumer in [&a, &b] {
        let owned: BTreeSet<MessageQueue> = consumer
            .owned_queues()
            .await
            .into_iter()
            .filter(|q| q.topic == fx.topic)
            .collect();
        assert_eq!(owned, fx.route.consume_queues.iter().cloned().collect());
    }

    // A clean shutdown leaves a's offsets in its file; messages sent while it is down are what
    // it consumes after the restart — and nothing it consumed before.
    a.shutdown().await;
    let behind = file_behind(&dirs[0], &group, &queue_ends(&sent));
    assert!(
        behind.is_empty(),
        "offsets in a's file after shutdown: {behind:?}"
    );
    sent.extend(fx.send_numbered(FIRST..FIRST + SECOND).await);
    let a = broadcasting(&fx, &group, &dirs[0], 2, tx.clone())
        .start()
        .await
        .expect("consumer a restarts");
    let second = receive_per_consumer(&mut rx, &[1, 2], &numbered(FIRST..FIRST + SECOND)).await;
    // Once both files reached the end of every queue, every delivery has been made.
    let ends = queue_ends(&sent);
    await_file_to_end(&dirs[0], &group, &ends).await;
    await_file_to_end(&dirs[1], &group, &ends).await;
    let mut second = second;
    for s in std::iter::from_fn(|| rx.try_recv().ok()) {
        second.entry(s.consumer).or_default().push(s.body);
    }
    assert_eq!(
        second[&2].iter().cloned().collect::<BTreeSet<_>>(),
        numbered(FIRST..FIRST + SECOND),
        "the restarted consumer resumes where it stopped"
    );
    assert_eq!(second[&2].len(), SECOND, "no duplicates after the restart");
    assert_eq!(
        second[&1].len(),
        SECOND,
        "the other consumer goes on unaffected"
    );
    assert!(
        !second.contains_key(&0),
        "the stopped consumer consumed nothing"
    );
    a.shutdown().await;
    b.shutdown().await;
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
    fx.shutdown().await;
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn a_tag_subscription_delivers_only_matching_tags_even_on_hash_collisions() {
    let namesrv = namesrv();
    let fx = Fixture::new(namesrv, "Tags").await;
    // "Aa" and "BB" have the same Java hash code (2112), which is all a broker filters on.
    const TAGS: [&str; 4] = ["TagA", "TagB", "Aa", "BB"];
    const PER_TAG: usize = 25;
    let topic = fx.topic.clone();
    let sent = fx
        .send_all(0..TAGS.len() * PER_TAG, |i| {
            Message::new(topic.as_str(), body_of(i)).with_tags(TAGS[i % TAGS.len()])
        })
        .await;
    let group = unique("tags_group");
    let (tx, mut rx) = unbounded_channel();
    let consumer = fx
        .consumer(&group, "TagA || Aa")
        .listener_fn(recording(0, tx))
        .start()
        .await
        .expect("consumer starts");
    let expected: BTreeSet<String> = (0..TAGS.len() * PER_TAG)
        .filter(|i| matches!(TAGS[i % TAGS.len()], "TagA" | "Aa"))
        .map(body_of)
        .collect();
    let seen = receive(&mut rx, expected.len()).await;
    assert_eq!(bodies(&seen), expected);
    for s in &seen {
        assert!(
            matches!(s.tags.as_deref(), Some("TagA" | "Aa")),
            "delivered a message tagged {:?}",
            s.tags
        );
    }
    // Once the group's offsets passed every message, the others were filtered, not late.
    await_committed_to_end(&fx.client, &fx.route, &group, &queue_ends(&sent)).await;
    assert_nothing_more(&mut rx, "after the offsets passed every message");
    consumer.shutdown().await;
    fx.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn a_failed_message_comes_back_from_the_retry_topic_with_its_original_topic() {
    let namesrv = namesrv();
    let fx = Fixture::new(namesrv, "Retry").await;
    const COUNT: usize = 8;
    let sent = fx.send_numbered(0..COUNT).await;
    let group = unique("retry_group");
    let (tx, mut rx) = unbounded_channel();
    // Fails the first delivery of every message, accepts the second.
    let failed_once = Shared::new(BTreeSet::new());
    let consumer = fx
        .consumer(&group, "*")
        .configure(|c| c.consume_message_batch_max_size = 1)
        .listener_fn(move |messages: Messages, ctx: ConsumeContext| {
            let mut status = ConsumeStatus::Success;
            for m in &messages {
                let seen = seen_of(0, m, &ctx.queue);
                if failed_once.borrow_mut().insert(seen.body.clone()) {
                    status = ConsumeStatus::ReconsumeLater;
                }
                let _ = tx.send(seen);
            }
            std::future::ready((status, ctx))
        })
        .start()
        .await
        .expect("consumer starts");

    let seen = receive(&mut rx, 2 * COUNT).await;
    let retry = retry_topic(&group);
    let sent_ids: HashMap<String, &str> = sent
        .iter()
        .enumerate()
        .map(|(i, r)| (body_of(i), r.msg_id.as_str()))
        .collect();
    let mut delays = Vec::new();
    for body in numbered(0..COUNT) {
        let deliveries: Vec<&Seen> = seen.iter().filter(|s| s.body == body).collect();
        assert_eq!(deliveries.len(), 2, "{body}: {deliveries:?}");
        let (first, again) = (deliveries[0], deliveries[1]);
        assert_eq!(first.reconsume_times, 0);
        assert_eq!(first.queue.topic, fx.topic);
        assert_eq!(again.queue.topic, retry, "redelivered from the retry topic");
        assert_eq!(again.reconsume_times, 1);
        assert_eq!(
            again.topic, fx.topic,
            "the listener sees the original topic"
        );
        assert_eq!(
            again.msg_id, sent_ids[&body],
            "the retried message keeps its msgId"
        );
        delays.push(again.at - first.at);
    }
    delays.sort_unstable();
    eprintln!(
        "retry: redelivered after {:?} (fastest) to {:?} (slowest)",
        delays[0],
        delays[delays.len() - 1]
    );
    let stats = consumer.stats().await;
    assert_eq!(stats.sent_back, COUNT as u64);
    assert_eq!(stats.consumed_failed, COUNT as u64);
    assert_eq!(stats.consumed_ok, COUNT as u64);
    consumer.shutdown().await;
    fx.shutdown().await;
}

/// Sends `KEYS` keys × `PER_KEY` messages, body `k{key}:{seq}`, with `send_with_key`: each
/// key's messages one after the other (so their queue holds them in sequence), the keys
/// concurrently.
async fn send_keyed(fx: &Fixture, keys: usize, per_key: usize) {
    let sends = (0..keys).map(|k| {
        let producer = fx.producer.clone();
        let topic = fx.topic.clone();
        async move {
            let key = format!("k{k}");
            for seq in 0..per_key {
                let message = Message::new(topic.as_str(), format!("{key}:{seq}"));
                producer
                    .send_with_key(message, &key)
                    .await
                    .unwrap_or_else(|e| panic!("send {key}:{seq}: {e}"));
            }
        }
    });
    futures::future::join_all(sends).await;
}

/// What orderly listeners observed.
#[derive(Default)]
struct OrderLog {
    /// Sequence numbers per key, in delivery order.
    per_key: BTreeMap<String, Vec<usize>>,
    /// Listener calls running per queue right now.
    running: HashMap<MessageQueue, usize>,
    /// Times a call started on a queue while another call on it was running.
    overlaps: usize,
}

fn key_and_seq(message: &MessageExt) -> (String, usize) {
    let body = String::from_utf8_lossy(message.body()).into_owned();
    let (key, seq) = body.split_once(':').expect("key:seq body");
    (key.to_owned(), seq.parse().expect("sequence number"))
}

async fn orderly_consumer(
    fx: &Fixture,
    group: &str,
    key_ordered: bool,
    log: Shared<OrderLog>,
    progress: UnboundedSender<()>,
) -> PushConsumer {
    fx.consumer(group, "*")
        .configure(|c| c.consume_message_batch_max_size = 4)
        .key_ordered(key_ordered)
        .orderly_listener_fn(move |messages: Messages, ctx: OrderlyContext| {
            let log = log.clone();
            let progress = progress.clone();
            async move {
                {
                    let mut log = log.borrow_mut();
                    let running = log.running.entry(ctx.queue.clone()).or_default();
                    *running += 1;
                    if *running > 1 && !key_ordered {
                        log.overlaps += 1;
                    }
                }
                // Let other calls interleave with this one if the runtime allowed it.
                tokio::task::yield_now().await;
                let mut log = log.borrow_mut();
                for m in &messages {
                    let (key, seq) = key_and_seq(m);
                    log.per_key.entry(key).or_default().push(seq);
                    let _ = progress.send(());
                }
                if let Some(running) = log.running.get_mut(&ctx.queue) {
                    *running -= 1;
                }
                (OrderlyStatus::Success, ctx)
            }
        })
        .start()
        .await
        .expect("orderly consumer starts")
}

async fn await_progress(rx: &mut UnboundedReceiver<()>, count: usize) {
    let deadline = Instant::now() + PATIENCE;
    for received in 0..count {
        match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
            Ok(Some(())) => {}
            _ => panic!("only {received} of {count} messages consumed"),
        }
    }
}

fn assert_sequential_per_key(log: &OrderLog, keys: usize, per_key: usize) {
    assert_eq!(log.per_key.len(), keys);
    for (key, seqs) in &log.per_key {
        assert_eq!(
            seqs,
            &(0..per_key).collect::<Vec<_>>(),
            "key {key} consumed in send order, each once"
        );
    }
}

/// LOCK_BATCH_MQ for `queues` as `client` (a member of `group` by its heartbeat-less id).
async fn try_lock(
    client: &Client,
    addr: &str,
    group: &str,
    queues: &[MessageQueue],
) -> BTreeSet<MessageQueue> {
    let body = LockBatchRequestBody {
        consumer_group: group.to_owned(),
        client_id: client.client_id().to_owned(),
        only_this_broker: true,
        mq_set: queues.to_vec(),
    };
    let command = RemotingCommand::request_with_header(
        request_code::LOCK_BATCH_MQ,
        &LockBatchMqRequestHeader::default(),
    )
    .with_body(encode_json(&body));
    let response = client.invoke(addr, command).await.expect("LOCK_BATCH_MQ");
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    let locked: LockBatchResponseBody =
        decode_json(&response.body.unwrap_or_default()).expect("lock response JSON");
    locked.lock_ok_mq_set.into_iter().collect()
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn an_orderly_consumer_keeps_each_key_in_order_and_holds_the_broker_locks() {
    let namesrv = namesrv();
    let fx = Fixture::new(namesrv, "Orderly").await;
    const KEYS: usize = 16;
    const PER_KEY: usize = 25;
    send_keyed(&fx, KEYS, PER_KEY).await;
    let group = unique("orderly_group");
    let log = Shared::new(OrderLog::default());
    let (tx, mut rx) = unbounded_channel();
    let consumer = orderly_consumer(&fx, &group, false, log.clone(), tx).await;
    await_progress(&mut rx, KEYS * PER_KEY).await;
    {
        let log = log.borrow();
        assert_sequential_per_key(&log, KEYS, PER_KEY);
        assert_eq!(log.overlaps, 0, "never two calls on one queue at once");
    }

    // The consumer holds the lock of every queue it owns: another client of the group gets
    // none of them, on either broker.
    let intruder = start_client(&fx.namesrv);
    let owned: Vec<MessageQueue> = consumer
        .owned_queues()
        .await
        .into_iter()
        .filter(|q| q.topic == fx.topic)
        .collect();
    assert_eq!(owned.len(), fx.route.consume_queues.len());
    for broker in BROKERS {
        let addr = fx.route.master_addr(broker).expect("master").to_owned();
        let queues: Vec<MessageQueue> = owned
            .iter()
            .filter(|q| q.broker_name == broker)
            .cloned()
            .collect();
        assert_eq!(
            try_lock(&intruder, &addr, &group, &queues).await,
            BTreeSet::new(),
            "{broker}: the consumer's locks are exclusive"
        );
    }
    // A clean shutdown releases them.
    consumer.shutdown().await;
    for broker in BROKERS {
        let addr = fx.route.master_addr(broker).expect("master").to_owned();
        let queues: Vec<MessageQueue> = owned
            .iter()
            .filter(|q| q.broker_name == broker)
            .cloned()
            .collect();
        assert_eq!(
            try_lock(&intruder, &addr, &group, &queues).await,
            queues.iter().cloned().collect(),
            "{broker}: released at shutdown"
        );
    }
    intruder.shutdown().await;
    fx.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn a_key_ordered_consumer_keeps_each_key_in_order() {
    let namesrv = namesrv();
    let fx = Fixture::new(namesrv, "KeyOrdered").await;
    const KEYS: usize = 16;
    const PER_KEY: usize = 25;
    send_keyed(&fx, KEYS, PER_KEY).await;
    let group = unique("key_ordered_group");
    let log = Shared::new(OrderLog::default());
    let (tx, mut rx) = unbounded_channel();
    let consumer = orderly_consumer(&fx, &group, true, log.clone(), tx).await;
    await_progress(&mut rx, KEYS * PER_KEY).await;
    assert_sequential_per_key(&log.borrow(), KEYS, PER_KEY);
    consumer.shutdown().await;
    fx.shutdown().await;
}

/// Waits until the wall clock is at or past `epoch_ms` (the brokers stamp store times with
/// the same clock). There is no event for "time has passed", so this one sleeps.
async fn wall_clock_past(epoch_ms: i64) {
    loop {
        let now = now_ms();
        if now >= epoch_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis((epoch_ms - now) as u64)).await;
    }
}

/// Sends `m0..m{before}`, then from the next whole second on `m{before}..m{before + after}`;
/// returns the results of both and that second (epoch ms).
async fn send_around_a_second(
    fx: &Fixture,
    before: usize,
    after: usize,
) -> (Vec<SendResult>, Vec<SendResult>, i64) {
    let early = fx.send_numbered(0..before).await;
    // consume_timestamp has whole seconds: the second batch starts on the next one.
    let boundary = (now_ms() / 1000 + 1) * 1000;
    wall_clock_past(boundary).await;
    let late = fx.send_numbered(before..before + after).await;
    (early, late, boundary)
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn search_offset_by_timestamp_finds_the_first_message_stored_at_or_after_it() {
    let namesrv = namesrv();
    let fx = Fixture::new(namesrv, "SearchOffset").await;
    let (early, late, boundary) = send_around_a_second(&fx, 40, 40).await;
    let early_ends = queue_ends(&early);
    let late_ends = queue_ends(&late);
    for queue in &fx.route.consume_queues {
        // Per queue: the first late message, else the end of the queue.
        let first_late = late
            .iter()
            .filter(|r| &r.queue == queue)
            .map(|r| r.queue_offset)
            .min();
        let end = late_ends
            .get(queue)
            .or(early_ends.get(queue))
            .copied()
            .unwrap_or(0);
        let expected = first_late.unwrap_or(end);
        let found = fx
            .client
            .search_offset(queue, boundary)
            .await
            .unwrap_or_else(|e| panic!("SEARCH_OFFSET_BY_TIMESTAMP {queue}: {e}"));
        assert_eq!(found, expected, "{queue}");
    }
    fx.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn consuming_from_a_timestamp_skips_what_was_stored_before_it() {
    let namesrv = namesrv();
    let fx = Fixture::new(namesrv, "FromTimestamp").await;
    let (early, late, boundary) = send_around_a_second(&fx, 40, 40).await;
    let group = unique("timestamp_group");
    let (tx, mut rx) = unbounded_channel();
    let consumer = fx
        .consumer(&group, "*")
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::Timestamp;
            c.consume_timestamp = Some(format_consume_timestamp_utc(boundary));
        })
        .listener_fn(recording(0, tx))
        .start()
        .await
        .expect("consumer starts");
    let ends = queue_ends(early.iter().chain(&late));
    await_committed_to_end(&fx.client, &fx.route, &group, &ends).await;
    let seen: Vec<Seen> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
    assert_eq!(
        bodies(&seen),
        numbered(40..80),
        "only what was stored at or after the timestamp"
    );
    assert_eq!(seen.len(), 40, "each once");
    consumer.shutdown().await;
    fx.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn a_restarted_consumer_resumes_after_its_committed_offsets_without_duplicates() {
    let namesrv = namesrv();
    let fx = Fixture::new(namesrv, "Resume").await;
    const FIRST: usize = 150;
    const SECOND: usize = 100;
    let mut sent = fx.send_numbered(0..FIRST).await;
    let group = unique("resume_group");
    let (tx, mut rx) = unbounded_channel();
    let first = fx
        .consumer(&group, "*")
        .listener_fn(recording(0, tx.clone()))
        .start()
        .await
        .expect("consumer starts");
    let before = receive(&mut rx, FIRST).await;
    assert_eq!(bodies(&before), numbered(0..FIRST));
    // A clean shutdown persists the offsets on the brokers before it returns.
    first.shutdown().await;
    let behind = committed_behind(&fx.client, &fx.route, &group, &queue_ends(&sent)).await;
    assert!(behind.is_empty(), "not persisted at shutdown: {behind:?}");

    sent.extend(fx.send_numbered(FIRST..FIRST + SECOND).await);
    let second = fx
        .consumer(&group, "*")
        .listener_fn(recording(1, tx))
        .start()
        .await
        .expect("consumer restarts");
    let after = receive(&mut rx, SECOND).await;
    assert_eq!(
        bodies(&after),
        numbered(FIRST..FIRST + SECOND),
        "only what was sent while it was down"
    );
    await_committed_to_end(&fx.client, &fx.route, &group, &queue_ends(&sent)).await;
    assert_nothing_more(&mut rx, "after the restart consumed everything");
    second.shutdown().await;
    fx.shutdown().await;
}

/// Starts a consumer of a topic nobody created yet, then creates the topic on both brokers and
/// sends to it; returns how long after the creation the consumer had consumed everything.
async fn consume_a_topic_created_after_the_consumer(namesrv: &str) -> Duration {
    let client = start_client(namesrv);
    let topic = unique("Later");
    let group = unique("later_group");
    let (tx, mut rx) = unbounded_channel();
    let consumer = PushConsumer::builder()
        .namesrv_addr(namesrv)
        .group(group.as_str())
        .subscribe(topic.as_str(), "*")
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .listener_fn(recording(0, tx))
        .start()
        .await
        .expect("a consumer starts without its topic's route");
    let created = Instant::now();
    create_topic(&client, namesrv, &topic).await;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    const COUNT: usize = 20;
    for i in 0..COUNT {
        producer
            .send(Message::new(topic.as_str(), body_of(i)))
            .await
            .unwrap_or_else(|e| panic!("send {i}: {e}"));
    }
    let seen = receive(&mut rx, COUNT).await;
    let took = created.elapsed();
    assert_eq!(bodies(&seen), numbered(0..COUNT));
    eprintln!("later topic: all consumed {took:?} after the topic was created");
    consumer.shutdown().await;
    client.shutdown().await;
    took
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn a_consumer_started_before_its_topic_exists_consumes_once_it_is_created() {
    let namesrv = namesrv();
    consume_a_topic_created_after_the_consumer(&namesrv).await;
}

/// A rebalance pass that cannot see a topic is retried after `rebalance_retry_interval` (1 s),
/// so a new topic should be consumed within seconds — not after the next 30 s heartbeat.
#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn a_topic_created_after_the_consumer_started_is_consumed_within_seconds() {
    let namesrv = namesrv();
    let took = consume_a_topic_created_after_the_consumer(&namesrv).await;
    let bound = Duration::from_secs(10);
    assert!(took < bound, "took {took:?}, more than {bound:?}");
}
