//! Interoperability with a real RocketMQ cluster (one name server, brokers `broker-a` and
//! `broker-b`), e.g. the one `scripts/real-cluster.sh start` runs.
//!
//! Every test is skipped (with a message on stderr) unless `ROCKETMQ_NAMESRV` names the name
//! server:
//!
//! ```text
//! scripts/real-cluster.sh start
//! ROCKETMQ_NAMESRV=127.0.0.1:9876 cargo test --test interop_produce -- --nocapture
//! ```
//!
//! Each run uses fresh topic and group names (time-stamped), so runs do not see each other's
//! messages, offsets or locks.

mod interop_common;
use interop_common::*;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rocketmq_actor::message::decode_messages;
use rocketmq_actor::protocol::body::{
    decode_json, encode_json, ConsumeFromWhere, ConsumeType, ConsumerData, ConsumerListBody,
    HeartbeatData, LockBatchRequestBody, LockBatchResponseBody, MessageModel, SubscriptionData,
    UnlockBatchRequestBody,
};
use rocketmq_actor::protocol::codes::{pull_sys_flag, request_code, response_code};
use rocketmq_actor::protocol::header::{
    GetConsumerListByGroupRequestHeader, GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader, GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader,
    HeartbeatRequestHeader, LockBatchMqRequestHeader, OffsetResponseHeader,
    PullMessageRequestHeader, PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader, SearchOffsetRequestHeader, UnlockBatchMqRequestHeader,
    UnregisterClientRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use rocketmq_actor::protocol::{RemotingCommand, SerializeType};
use rocketmq_actor::route::TopicRoute;
use rocketmq_actor::Client;
use rocketmq_actor::{Message, MessageExt, MessageQueue};
use rocketmq_actor::{Producer, ProducerConfig, SendResult, SendStatus};

/// How long a long-polling pull waits on the broker for a message to arrive.
const PULL_SUSPEND: Duration = Duration::from_millis(1000);
/// How long all the pulls of one queue may take before its messages count as missing.
const PULL_DEADLINE: Duration = Duration::from_secs(30);

/// One PULL_MESSAGE (FLAG_SUBSCRIPTION, `*`; long-polling when `suspend`): the response code,
/// header and messages.
async fn pull_once(
    client: &Client,
    route: &TopicRoute,
    queue: &MessageQueue,
    group: &str,
    offset: i64,
    suspend: bool,
) -> (i32, PullMessageResponseHeader, Vec<MessageExt>) {
    let addr = route
        .pull_addr(&queue.broker_name, 0)
        .expect("broker address in route");
    let (sys_flag, suspend_timeout_millis) = if suspend {
        (
            pull_sys_flag::SUBSCRIPTION | pull_sys_flag::SUSPEND,
            PULL_SUSPEND.as_millis() as i64,
        )
    } else {
        (pull_sys_flag::SUBSCRIPTION, 0)
    };
    let header = PullMessageRequestHeader {
        consumer_group: group.to_owned(),
        topic: queue.topic.clone(),
        queue_id: queue.queue_id,
        queue_offset: offset,
        max_msg_nums: 32,
        sys_flag,
        commit_offset: 0,
        suspend_timeout_millis,
        subscription: Some("*".into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        max_msg_bytes: None,
        bname: Some(queue.broker_name.clone()),
    };
    let response = client
        .request(
            addr,
            RemotingCommand::request_with_header(request_code::PULL_MESSAGE, &header),
            PULL_SUSPEND + Duration::from_secs(10),
        )
        .await
        .expect("pull answered");
    let pull_codes = [
        response_code::SUCCESS,
        response_code::PULL_NOT_FOUND,
        response_code::PULL_RETRY_IMMEDIATELY,
        response_code::PULL_OFFSET_MOVED,
    ];
    // Other codes carry no pull header, only a remark worth showing.
    assert!(
        pull_codes.contains(&response.code),
        "{queue}: pull at {offset} answered {} {:?}",
        response.code,
        response.remark
    );
    let reply: PullMessageResponseHeader = response.decode_header().expect("pull header");
    let messages = if response.code == response_code::SUCCESS {
        let mut messages =
            decode_messages(response.body.clone().unwrap_or_default()).expect("pull body");
        for message in &mut messages {
            message.broker_name = queue.broker_name.as_str().into();
        }
        messages
    } else {
        Vec::new()
    };
    (response.code, reply, messages)
}

/// Every message of `queue` from offset 0, in queue order, where `end` is the offset after the
/// last message sent to it.
///
/// A send is acknowledged once the message is in the commit log; the broker dispatches it to
/// the consume queue asynchronously, so a pull right after the send may not see it yet. Below
/// `end` the pulls therefore long-poll (the broker answers as soon as a message is dispatched);
/// at `end` one plain pull makes sure nothing more is there.
async fn pull_all(
    client: &Client,
    route: &TopicRoute,
    queue: &MessageQueue,
    group: &str,
    end: i64,
) -> Vec<MessageExt> {
    let deadline = Instant::now() + PULL_DEADLINE;
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let waiting = offset < end;
        let (code, reply, messages) = pull_once(client, route, queue, group, offset, waiting).await;
        match code {
            response_code::SUCCESS => {
                assert!(
                    reply.next_begin_offset > offset,
                    "{queue}: FOUND must advance the offset"
                );
                all.extend(messages);
                offset = reply.next_begin_offset;
            }
            response_code::PULL_NOT_FOUND if !waiting => return all,
            response_code::PULL_NOT_FOUND => assert!(
                Instant::now() < deadline,
                "{queue}: offsets {offset}..{end} not readable within {PULL_DEADLINE:?}"
            ),
            code => panic!("{queue}: pull at {offset} answered {code}"),
        }
    }
}

/// Every message of every consume queue of the route, per queue; `ends` gives the offset after
/// the last message sent to each queue (absent: none sent).
async fn pull_topic(
    client: &Client,
    route: &TopicRoute,
    group: &str,
    ends: &BTreeMap<MessageQueue, i64>,
) -> BTreeMap<MessageQueue, Vec<MessageExt>> {
    let pulls = route.consume_queues.iter().map(|queue| async move {
        let end = ends.get(queue).copied().unwrap_or(0);
        (
            queue.clone(),
            pull_all(client, route, queue, group, end).await,
        )
    });
    futures::future::join_all(pulls).await.into_iter().collect()
}

fn body_of(index: usize) -> Bytes {
    let mut body = format!("interop-{index}-").into_bytes();
    body.resize(128, b'x');
    Bytes::from(body)
}

fn index_of(message: &MessageExt) -> usize {
    std::str::from_utf8(message.body())
        .ok()
        .and_then(|text| text.strip_prefix("interop-"))
        .and_then(|rest| rest.split('-').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected body {:?}", message.body()))
}

async fn send_heartbeat(client: &Client, addr: &str, group: &str, topic: &str) -> RemotingCommand {
    let heartbeat = HeartbeatData {
        client_id: client.client_id().to_owned(),
        producer_data_set: Vec::new(),
        consumer_data_set: vec![ConsumerData {
            group_name: group.to_owned(),
            consume_type: ConsumeType::ConsumePassively,
            message_model: MessageModel::Clustering,
            consume_from_where: ConsumeFromWhere::ConsumeFromFirstOffset,
            subscription_data_set: vec![
                SubscriptionData {
                    topic: topic.to_owned(),
                    sub_version: now_ms(),
                    ..Default::default()
                },
                SubscriptionData {
                    topic: format!("%RETRY%{group}"),
                    sub_version: now_ms(),
                    ..Default::default()
                },
            ],
            unit_mode: false,
        }],
        heartbeat_fingerprint: 0,
        without_sub: false,
    };
    let command = RemotingCommand::request_with_header(
        request_code::HEART_BEAT,
        &HeartbeatRequestHeader::default(),
    )
    .with_body(encode_json(&heartbeat));
    client
        .invoke(addr, command)
        .await
        .unwrap_or_else(|e| panic!("HEART_BEAT to {addr}: {e}"))
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn produce_across_two_brokers_and_read_everything_back() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("InteropProduce");
    let route = create_topic(&client, &namesrv, &topic).await;
    assert_eq!(
        route.produce_queues.len(),
        2 * QUEUES_PER_BROKER as usize,
        "{route:?}"
    );

    let producer = Producer::new(client.clone(), ProducerConfig::default());
    const COUNT: usize = 200;
    // All at once, as `rocketmq-actor produce` sends: the client must not flood the name server
    // with one route request per send.
    let sends = (0..COUNT).map(|i| {
        let producer = producer.clone();
        let message = Message::new(topic.clone(), body_of(i))
            .with_tags("TagA")
            .with_keys(format!("key-{i}"));
        async move { producer.send(message).await }
    });
    let mut sent = Vec::with_capacity(COUNT);
    for (i, result) in futures::future::join_all(sends)
        .await
        .into_iter()
        .enumerate()
    {
        let result = result.unwrap_or_else(|e| panic!("send {i}: {e}"));
        assert_eq!(result.status, SendStatus::SendOk);
        sent.push(result);
    }
    let mut per_broker: BTreeMap<String, usize> = BTreeMap::new();
    for result in &sent {
        *per_broker
            .entry(result.queue.broker_name.clone())
            .or_default() += 1;
    }
    for name in BROKERS {
        assert!(
            per_broker.get(name).copied().unwrap_or(0) > 0,
            "round robin must use both brokers: {per_broker:?}"
        );
    }

    let per_queue = pull_topic(
        &client,
        &route,
        &unique("interop_reader"),
        &queue_ends(&sent),
    )
    .await;
    let mut seen = BTreeSet::new();
    let mut pulled_per_broker: BTreeMap<String, usize> = BTreeMap::new();
    for (queue, messages) in &per_queue {
        for (position, message) in messages.iter().enumerate() {
            let index = index_of(message);
            assert!(seen.insert(index), "message {index} read twice");
            assert_eq!(message.body(), &body_of(index));
            assert_eq!(message.topic(), topic);
            assert_eq!(message.tags(), Some("TagA"));
            assert_eq!(message.keys(), vec![format!("key-{index}").as_str()]);
            assert_eq!(message.queue_id, queue.queue_id);
            assert_eq!(message.queue_offset, position as i64, "{queue}");
            assert_eq!(
                message.msg_id(),
                sent[index].msg_id.as_str(),
                "consumers see the producer's UNIQ_KEY as msgId"
            );
            *pulled_per_broker
                .entry(queue.broker_name.clone())
                .or_default() += 1;
        }
    }
    assert_eq!(seen.len(), COUNT, "every message read back exactly once");
    assert_eq!(
        pulled_per_broker, per_broker,
        "messages are where the sends said"
    );
    client.shutdown().await;
}

/// Sends messages `indexes` (tag `TagA`) to `topic` with at most `concurrency` in flight;
/// returns the results of the sends that succeeded and the errors of the others.
async fn send_concurrently(
    producer: &Producer,
    topic: &str,
    indexes: std::ops::Range<usize>,
    concurrency: usize,
) -> (Vec<SendResult>, Vec<String>) {
    use futures::stream::{self, StreamExt};
    let results: Vec<_> = stream::iter(indexes)
        .map(|i| {
            let producer = producer.clone();
            let message = Message::new(topic.to_owned(), body_of(i)).with_tags("TagA");
            async move { producer.send(message).await }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let mut sent = Vec::new();
    let mut errors = Vec::new();
    for result in results {
        match result {
            Ok(result) => sent.push(result),
            Err(e) => errors.push(e.to_string()),
        }
    }
    (sent, errors)
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn auto_created_topic_spreads_over_both_brokers() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("InteropAutoCreate");
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    // Nothing creates the topic beforehand: the brokers auto-create it on the first sends,
    // which the producer routes with the template topic's route.
    const COUNT: usize = 64;
    let (sent, errors) = send_concurrently(&producer, &topic, 0..COUNT, 16).await;
    assert!(errors.is_empty(), "{errors:?}");
    let brokers_used: BTreeSet<&str> = sent.iter().map(|r| r.queue.broker_name.as_str()).collect();
    assert_eq!(
        brokers_used,
        BTreeSet::from(BROKERS),
        "sends reach both brokers"
    );

    // Each broker creates the topic with the requested queue count, capped by its template.
    let template = client.route("TBW102").await.expect("TBW102 route");
    let route = wait_for_route(&client, &topic, &BROKERS).await;
    for queue_data in &route.data.queue_datas {
        let template_queues = template
            .data
            .queue_datas
            .iter()
            .find(|q| q.broker_name == queue_data.broker_name)
            .map_or(0, |q| q.write_queue_nums);
        let expected = template_queues.min(ProducerConfig::default().default_topic_queue_nums);
        assert_eq!(queue_data.write_queue_nums, expected, "{queue_data:?}");
    }
    let per_queue = pull_topic(
        &client,
        &route,
        &unique("interop_auto_reader"),
        &queue_ends(&sent),
    )
    .await;
    let mut indexes: Vec<usize> = per_queue.values().flatten().map(index_of).collect();
    indexes.sort_unstable();
    assert_eq!(
        indexes,
        (0..COUNT).collect::<Vec<_>>(),
        "every message read back once"
    );
    client.shutdown().await;
}

/// What `rocketmq-actor produce` does with its default `--inflight 512`: hundreds of first sends
/// to a new topic at once. The Rust name server silently drops some answers when ~100 or more
/// route requests are pipelined on one connection, so this needs the client to coalesce
/// concurrent look-ups of one topic into one request.
#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn a_burst_of_first_sends_to_a_new_topic_succeeds() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("InteropBurst");
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    const COUNT: usize = 1000;
    let (sent, errors) = send_concurrently(&producer, &topic, 0..COUNT, 512).await;
    assert!(
        errors.is_empty(),
        "{} of {COUNT} sends failed, e.g. {:?}",
        errors.len(),
        errors.first()
    );
    assert_eq!(sent.len(), COUNT);
    client.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn send_with_key_keeps_each_key_in_one_queue() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("InteropKeys");
    let route = create_topic(&client, &namesrv, &topic).await;
    let producer = Producer::new(client.clone(), ProducerConfig::default());

    const KEYS: usize = 10;
    const COUNT: usize = 100;
    let mut sent_queue: HashMap<String, BTreeSet<MessageQueue>> = HashMap::new();
    let mut sent = Vec::with_capacity(COUNT);
    // Sequential sends: the order within each key's queue must be the send order.
    for i in 0..COUNT {
        let key = format!("k{}", i % KEYS);
        let message = Message::new(topic.clone(), body_of(i)).with_tags("TagK");
        let result = producer
            .send_with_key(message, &key)
            .await
            .unwrap_or_else(|e| panic!("send {i}: {e}"));
        sent_queue
            .entry(key)
            .or_default()
            .insert(result.queue.clone());
        sent.push(result);
    }
    for (key, queues) in &sent_queue {
        assert_eq!(queues.len(), 1, "key {key} was sent to {queues:?}");
    }
    let distinct_queues: BTreeSet<&MessageQueue> = sent_queue.values().flatten().collect();
    assert!(
        distinct_queues.len() > 1,
        "{KEYS} keys over {} queues should not all hash to one queue",
        route.produce_queues.len()
    );

    let per_queue = pull_topic(
        &client,
        &route,
        &unique("interop_key_reader"),
        &queue_ends(&sent),
    )
    .await;
    let mut read = 0;
    for (queue, messages) in &per_queue {
        let mut last_index_per_key: HashMap<String, usize> = HashMap::new();
        for message in messages {
            read += 1;
            let index = index_of(message);
            let key = format!("k{}", index % KEYS);
            assert_eq!(
                message.keys(),
                vec![key.as_str()],
                "send_with_key adds the key"
            );
            assert!(
                sent_queue[&key].contains(queue),
                "message {index} with key {key} found in {queue}"
            );
            if let Some(previous) = last_index_per_key.insert(key.clone(), index) {
                assert!(
                    previous < index,
                    "key {key}: {previous} stored after {index}"
                );
            }
        }
    }
    assert_eq!(read, COUNT);
    client.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn send_batch_stores_every_message_in_one_queue() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("InteropBatch");
    let route = create_topic(&client, &namesrv, &topic).await;
    let producer = Producer::new(client.clone(), ProducerConfig::default());

    const BATCH: usize = 16;
    let batch: Vec<Message> = (0..BATCH)
        .map(|i| {
            Message::new(topic.clone(), body_of(i))
                .with_tags(if i % 2 == 0 { "Even" } else { "Odd" })
                .with_keys(format!("batch-{i}"))
        })
        .collect();
    let sent = producer.send_batch(batch).await.expect("send_batch");
    assert_eq!(sent.status, SendStatus::SendOk);
    let ids: Vec<&str> = sent.msg_id.split(',').collect();
    assert_eq!(ids.len(), BATCH, "one msgId per message: {}", sent.msg_id);

    let batch_end = BTreeMap::from([(sent.queue.clone(), sent.queue_offset + BATCH as i64)]);
    let per_queue = pull_topic(&client, &route, &unique("interop_batch_reader"), &batch_end).await;
    for (queue, messages) in &per_queue {
        if queue != &sent.queue {
            assert!(messages.is_empty(), "{queue} holds part of the batch");
        }
    }
    let messages = &per_queue[&sent.queue];
    assert_eq!(
        messages.len(),
        BATCH,
        "the whole batch is in {}",
        sent.queue
    );
    for (i, message) in messages.iter().enumerate() {
        assert_eq!(index_of(message), i, "batch order is kept");
        assert_eq!(message.body(), &body_of(i));
        assert_eq!(
            message.tags(),
            Some(if i % 2 == 0 { "Even" } else { "Odd" })
        );
        assert_eq!(message.keys(), vec![format!("batch-{i}").as_str()]);
        assert_eq!(message.queue_offset, sent.queue_offset + i as i64);
        assert_eq!(message.msg_id(), ids[i]);
    }
    client.shutdown().await;
}

async fn offset_call(client: &Client, addr: &str, command: RemotingCommand) -> i64 {
    let response = client
        .invoke(addr, command)
        .await
        .unwrap_or_else(|e| panic!("offset request: {e}"));
    let header: OffsetResponseHeader = response.decode_header().expect("offset header");
    header.offset
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn offset_queries_and_consumer_offset_commit_round_trip() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("InteropOffsets");
    let group = unique("interop_offsets");
    let route = create_topic(&client, &namesrv, &topic).await;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let queue = MessageQueue::new(&topic, "broker-b", 1);
    let addr = route.master_addr("broker-b").expect("master").to_owned();

    const COUNT: i64 = 20;
    for i in 0..COUNT {
        let sent = producer
            .send_to_queue(Message::new(topic.clone(), body_of(i as usize)), &queue)
            .await
            .expect("send_to_queue");
        assert_eq!(sent.queue, queue);
        assert_eq!(sent.queue_offset, i);
    }
    let stored = pull_all(&client, &route, &queue, &group, COUNT).await;
    assert_eq!(stored.len(), COUNT as usize);

    let max = offset_call(
        &client,
        &addr,
        RemotingCommand::request_with_header(
            request_code::GET_MAX_OFFSET,
            &GetMaxOffsetRequestHeader {
                topic: topic.clone(),
                queue_id: queue.queue_id,
                bname: Some(queue.broker_name.clone()),
                ..Default::default()
            },
        ),
    )
    .await;
    assert_eq!(max, COUNT, "max offset is one past the last message");
    let min = offset_call(
        &client,
        &addr,
        RemotingCommand::request_with_header(
            request_code::GET_MIN_OFFSET,
            &GetMinOffsetRequestHeader {
                topic: topic.clone(),
                queue_id: queue.queue_id,
                bname: Some(queue.broker_name.clone()),
            },
        ),
    )
    .await;
    assert_eq!(min, 0);

    let earliest = client
        .invoke(
            &addr,
            RemotingCommand::request_with_header(
                request_code::GET_EARLIEST_MSG_STORETIME,
                &GetEarliestMsgStoretimeRequestHeader {
                    topic: topic.clone(),
                    queue_id: queue.queue_id,
                    bname: Some(queue.broker_name.clone()),
                },
            ),
        )
        .await
        .expect("GET_EARLIEST_MSG_STORETIME");
    let earliest: GetEarliestMsgStoretimeResponseHeader =
        earliest.decode_header().expect("timestamp header");
    assert_eq!(earliest.timestamp, stored[0].store_timestamp);

    let search = |timestamp: i64, boundary: &str| {
        RemotingCommand::request_with_header(
            request_code::SEARCH_OFFSET_BY_TIMESTAMP,
            &SearchOffsetRequestHeader {
                topic: topic.clone(),
                queue_id: queue.queue_id,
                timestamp,
                boundary_type: Some(boundary.to_owned()),
                bname: Some(queue.broker_name.clone()),
            },
        )
    };
    let first_store = stored[0].store_timestamp;
    assert_eq!(
        offset_call(&client, &addr, search(first_store - 60_000, "LOWER")).await,
        0,
        "a time before the first message finds offset 0"
    );
    // For the store time of any message: LOWER finds the first message stored at that
    // millisecond, UPPER the last one.
    for probe in [
        &stored[0],
        &stored[stored.len() / 2],
        &stored[stored.len() - 1],
    ] {
        let time = probe.store_timestamp;
        let same_ms = || stored.iter().filter(|m| m.store_timestamp == time);
        let lower = same_ms().map(|m| m.queue_offset).min().unwrap_or_default();
        let upper = same_ms().map(|m| m.queue_offset).max().unwrap_or_default();
        assert_eq!(
            offset_call(&client, &addr, search(time, "LOWER")).await,
            lower,
            "LOWER search for store time {time}"
        );
        assert_eq!(
            offset_call(&client, &addr, search(time, "UPPER")).await,
            upper,
            "UPPER search for store time {time}"
        );
    }

    // A group must exist before the broker keeps its offsets: a heartbeat creates it.
    send_heartbeat(&client, &addr, &group, &topic).await;
    let query = || {
        RemotingCommand::request_with_header(
            request_code::QUERY_CONSUMER_OFFSET,
            &QueryConsumerOffsetRequestHeader {
                consumer_group: group.clone(),
                topic: topic.clone(),
                queue_id: queue.queue_id,
                set_zero_if_not_found: Some(false),
                bname: Some(queue.broker_name.clone()),
            },
        )
    };
    let before = client
        .request(&addr, query(), Duration::from_secs(5))
        .await
        .expect("QUERY_CONSUMER_OFFSET");
    assert_eq!(
        before.code,
        response_code::QUERY_NOT_FOUND,
        "a new group has no offset: {:?}",
        before.remark
    );

    let committed = 7;
    client
        .invoke(
            &addr,
            RemotingCommand::request_with_header(
                request_code::UPDATE_CONSUMER_OFFSET,
                &UpdateConsumerOffsetRequestHeader {
                    consumer_group: group.clone(),
                    topic: topic.clone(),
                    queue_id: queue.queue_id,
                    commit_offset: committed,
                    bname: Some(queue.broker_name.clone()),
                },
            ),
        )
        .await
        .expect("UPDATE_CONSUMER_OFFSET");
    let after = client
        .invoke(&addr, query())
        .await
        .expect("query after commit");
    let header: QueryConsumerOffsetResponseHeader = after.decode_header().expect("offset header");
    assert_eq!(header.offset, committed);
    client.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn binary_header_requests_are_understood() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("InteropBinary");
    let route = create_topic(&client, &namesrv, &topic).await;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let queue = MessageQueue::new(&topic, "broker-a", 2);
    for i in 0..3 {
        producer
            .send_to_queue(Message::new(topic.clone(), body_of(i)), &queue)
            .await
            .expect("send_to_queue");
    }
    // Wait until the three are dispatched to the consume queue (the max offset counts them).
    let dispatched = pull_all(&client, &route, &queue, &unique("interop_binary"), 3).await;
    assert_eq!(dispatched.len(), 3);
    let addr = route.master_addr("broker-a").expect("master").to_owned();
    let header = GetMaxOffsetRequestHeader {
        topic: topic.clone(),
        queue_id: queue.queue_id,
        bname: Some(queue.broker_name.clone()),
        ..Default::default()
    };
    let request = RemotingCommand::request_with_header(request_code::GET_MAX_OFFSET, &header)
        .with_serialize_type(SerializeType::RocketMq);
    assert_eq!(offset_call(&client, &addr, request).await, 3);

    // A ROCKETMQ-encoded name-server request too (the reply comes back as JSON).
    let route_request = RemotingCommand::request_with_header(
        request_code::GET_ROUTEINFO_BY_TOPIC,
        &rocketmq_actor::protocol::header::GetRouteInfoRequestHeader {
            topic: topic.clone(),
            ..Default::default()
        },
    )
    .with_serialize_type(SerializeType::RocketMq);
    let response = client
        .invoke(&namesrv, route_request)
        .await
        .expect("binary GET_ROUTEINFO_BY_TOPIC");
    let data: rocketmq_actor::protocol::body::TopicRouteData =
        decode_json(&response.body.unwrap_or_default()).expect("route JSON");
    assert_eq!(data.queue_datas.len(), 2);
    client.shutdown().await;
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn heartbeat_registers_the_client_in_its_group() {
    let namesrv = namesrv();
    let client = start_client(&namesrv);
    let topic = unique("InteropHeartbeat");
    let group = unique("interop_heartbeat");
    let route = create_topic(&client, &namesrv, &topic).await;
    let addr = route.master_addr("broker-a").expect("master").to_owned();

    let reply = send_heartbeat(&client, &addr, &group, &topic).await;
    assert_eq!(reply.code, response_code::SUCCESS);

    assert_eq!(
        members(&client, &addr, &group).await,
        vec![client.client_id().to_owned()]
    );

    // After UNREGISTER_CLIENT the group no longer lists us (SYSTEM_ERROR "no consumer for this
    // group" when it is empty, as Java answers).
    client
        .invoke(
            &addr,
            RemotingCommand::request_with_header(
                request_code::UNREGISTER_CLIENT,
                &UnregisterClientRequestHeader {
                    client_id: client.client_id().to_owned(),
                    producer_group: None,
                    consumer_group: Some(group.clone()),
                },
            ),
        )
        .await
        .expect("UNREGISTER_CLIENT");
    assert!(
        members(&client, &addr, &group).await.is_empty(),
        "unregistered client still listed"
    );
    assert!(
        members(&client, &addr, &unique("interop_nobody"))
            .await
            .is_empty(),
        "a group nobody heartbeated has no members"
    );
    client.shutdown().await;
}

/// The client ids GET_CONSUMER_LIST_BY_GROUP lists (none when the broker says the group is
/// empty).
async fn members(client: &Client, addr: &str, group: &str) -> Vec<String> {
    let response = client
        .request(
            addr,
            RemotingCommand::request_with_header(
                request_code::GET_CONSUMER_LIST_BY_GROUP,
                &GetConsumerListByGroupRequestHeader {
                    consumer_group: group.to_owned(),
                },
            ),
            Duration::from_secs(5),
        )
        .await
        .expect("GET_CONSUMER_LIST_BY_GROUP answered");
    match response.code {
        response_code::SUCCESS => {
            decode_json::<ConsumerListBody>(&response.body.unwrap_or_default())
                .expect("consumer list JSON")
                .consumer_id_list
        }
        response_code::SYSTEM_ERROR => Vec::new(),
        code => panic!(
            "GET_CONSUMER_LIST_BY_GROUP answered {code} {:?}",
            response.remark
        ),
    }
}

async fn lock(
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
    let locked: LockBatchResponseBody =
        decode_json(&response.body.unwrap_or_default()).expect("lock response JSON");
    locked.lock_ok_mq_set.into_iter().collect()
}

async fn unlock(client: &Client, addr: &str, group: &str, queues: &[MessageQueue]) {
    let body = UnlockBatchRequestBody {
        consumer_group: group.to_owned(),
        client_id: client.client_id().to_owned(),
        only_this_broker: true,
        mq_set: queues.to_vec(),
    };
    let command = RemotingCommand::request_with_header(
        request_code::UNLOCK_BATCH_MQ,
        &UnlockBatchMqRequestHeader::default(),
    )
    .with_body(encode_json(&body));
    client.invoke(addr, command).await.expect("UNLOCK_BATCH_MQ");
}

#[actix_rt::test]
#[ignore = "needs a real cluster: ROCKETMQ_NAMESRV=host:port, run with --ignored (see .ci/run)"]
async fn a_locked_queue_cannot_be_locked_by_another_client() {
    let namesrv = namesrv();
    let first = start_client(&namesrv);
    let second = start_client(&namesrv);
    assert_ne!(first.client_id(), second.client_id());
    let topic = unique("InteropLock");
    let group = unique("interop_lock");
    let route = create_topic(&first, &namesrv, &topic).await;
    let addr = route.master_addr("broker-a").expect("master").to_owned();
    let queues: Vec<MessageQueue> = (0..3)
        .map(|id| MessageQueue::new(&topic, "broker-a", id))
        .collect();
    // Orderly consumers heartbeat before locking; do the same for both.
    send_heartbeat(&first, &addr, &group, &topic).await;
    send_heartbeat(&second, &addr, &group, &topic).await;

    let held = lock(&first, &addr, &group, &queues[..2]).await;
    assert_eq!(held, queues[..2].iter().cloned().collect());
    assert_eq!(
        lock(&first, &addr, &group, &queues[..2]).await,
        held,
        "re-locking what one holds succeeds"
    );

    let contended = lock(&second, &addr, &group, &queues).await;
    assert_eq!(
        contended,
        BTreeSet::from([queues[2].clone()]),
        "only the free queue is granted to the second client"
    );

    unlock(&first, &addr, &group, &queues[..1]).await;
    let after_unlock = lock(&second, &addr, &group, &queues[..2]).await;
    assert_eq!(
        after_unlock,
        BTreeSet::from([queues[0].clone()]),
        "the released queue moves; the still-held one does not"
    );
    first.shutdown().await;
    second.shutdown().await;
}
