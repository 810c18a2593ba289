//! The embedded broker end to end: every behaviour a user of the embedded cluster would notice,
//! driven over TCP through the crate's own client stack (`Client`, its `Connection`s and the
//! `Producer`), against an [`EmbeddedCluster`] on ephemeral ports.
//!
//! Nothing here sleeps to synchronise: server-initiated requests are forwarded by handler actors
//! into channels the tests await, and the few conditions that can only be polled (a pull being
//! parked by the broker) are polled in bounded loops. Every await that could hang has a timeout
//! that fails the test instead.

use super::common;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::Bytes;
use common::{
    client, fast_retry_config, mq, now_ms, producer_on, send_numbered, start_cluster, BROKER,
};
use rocketmq_actor::actors::broker::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::actors::client::{call, Client, ClientConfig};
use rocketmq_actor::actors::connection::{
    Connection, ConnectionEvent, RegisterHandler, ServerRequest, Subscribe,
};
use rocketmq_actor::actors::producer::{Producer, ProducerConfig, SendResult};
use rocketmq_actor::broker::Fault;
use rocketmq_actor::message::{decode_messages, property};
use rocketmq_actor::protocol::body::{
    decode_json, encode_json, CMResult, ConsumeFromWhere, ConsumeMessageDirectlyResult,
    ConsumeType, ConsumerData, ConsumerListBody, ConsumerRunningInfo, HeartbeatData,
    LockBatchRequestBody, LockBatchResponseBody, MessageModel, ResetOffsetBody, SubscriptionData,
    UnlockBatchRequestBody,
};
use rocketmq_actor::protocol::codes::{pull_sys_flag, request_code, response_code};
use rocketmq_actor::protocol::header::{
    ConsumerSendMsgBackRequestHeader, GetConsumerListByGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader, GetRouteInfoRequestHeader, HeartbeatRequestHeader,
    LockBatchMqRequestHeader, PullMessageRequestHeader, PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader, ResetOffsetRequestHeader,
    SendMessageRequestHeader, UnlockBatchMqRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use rocketmq_actor::protocol::RemotingCommand;
use rocketmq_actor::{Error, Message, MessageExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Upper bound of any single wait; reaching it fails the test.
const PATIENCE: Duration = Duration::from_secs(10);

// ------------------------------------------------------------------------------------------
// Harness
// ------------------------------------------------------------------------------------------

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// A standalone cluster with the real (unscaled) delay table.
async fn cluster() -> EmbeddedCluster {
    start_cluster(EmbeddedConfig::ephemeral()).await
}

fn broker_addr(cluster: &EmbeddedCluster) -> String {
    cluster.broker_addr(BROKER).unwrap()
}

/// The client's connection to the broker (the one its producer and heartbeats use too).
async fn broker_conn(client: &Client, cluster: &EmbeddedCluster) -> Addr<Connection> {
    client.connection(&broker_addr(cluster)).await.unwrap()
}

async fn rpc(conn: &Addr<Connection>, command: RemotingCommand) -> RemotingCommand {
    let no_hooks = crate::hooks::RequestHooks::default();
    within(
        "a response",
        call(conn, "broker", &no_hooks, command, PATIENCE),
    )
    .await
    .unwrap()
}

/// A pull with its subscription in the request (no heartbeat needed) that is answered at once.
fn pull_header(
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
    expr: &str,
) -> PullMessageRequestHeader {
    PullMessageRequestHeader {
        consumer_group: group.to_owned(),
        topic: topic.to_owned(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: 32,
        sys_flag: pull_sys_flag::SUBSCRIPTION,
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: Some(expr.to_owned()),
        sub_version: 0,
        expression_type: Some("TAG".to_owned()),
        max_msg_bytes: None,
        bname: Some(BROKER.to_owned()),
    }
}

/// The same pull, parked by the broker for up to 20 s when nothing is there.
fn long_poll_header(
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
) -> PullMessageRequestHeader {
    PullMessageRequestHeader {
        sys_flag: pull_sys_flag::SUBSCRIPTION | pull_sys_flag::SUSPEND,
        suspend_timeout_millis: 20_000,
        ..pull_header(group, topic, queue_id, offset, "*")
    }
}

async fn pull(conn: &Addr<Connection>, header: &PullMessageRequestHeader) -> RemotingCommand {
    rpc(
        conn,
        RemotingCommand::request_with_header(request_code::PULL_MESSAGE, header),
    )
    .await
}

fn pulled(response: &RemotingCommand) -> Vec<MessageExt> {
    assert_eq!(response.code, response_code::SUCCESS, "{response:?}");
    decode_messages(response.body.clone().unwrap_or_default()).unwrap()
}

fn next_offset(response: &RemotingCommand) -> i64 {
    response
        .decode_header::<PullMessageResponseHeader>()
        .unwrap()
        .next_begin_offset
}

/// Every message of a queue, read with raw pulls from offset 0 until the broker has no more.
async fn pull_all(conn: &Addr<Connection>, topic: &str, queue_id: i32) -> Vec<MessageExt> {
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let response = pull(conn, &pull_header("reader", topic, queue_id, offset, "*")).await;
        if response.code == response_code::PULL_NOT_FOUND {
            return all;
        }
        offset = next_offset(&response);
        all.extend(pulled(&response));
    }
}

fn consumer_data(group: &str, topic: &str) -> ConsumerData {
    ConsumerData {
        group_name: group.to_owned(),
        consume_type: ConsumeType::ConsumePassively,
        message_model: MessageModel::Clustering,
        consume_from_where: ConsumeFromWhere::ConsumeFromFirstOffset,
        subscription_data_set: vec![SubscriptionData {
            topic: topic.to_owned(),
            sub_version: 1,
            ..SubscriptionData::default()
        }],
        unit_mode: false,
    }
}

/// Registers `client` as a consumer of `group` on `topic` (a HEART_BEAT on its connection).
async fn heartbeat(conn: &Addr<Connection>, client: &Client, group: &str, topic: &str) {
    let data = HeartbeatData {
        client_id: client.client_id().to_owned(),
        consumer_data_set: vec![consumer_data(group, topic)],
        ..HeartbeatData::default()
    };
    let command =
        RemotingCommand::request_with_header(request_code::HEART_BEAT, &HeartbeatRequestHeader {})
            .with_body(encode_json(&data));
    let response = rpc(conn, command).await;
    assert_eq!(response.code, response_code::SUCCESS, "{response:?}");
}

type Reply = Box<dyn Fn(&RemotingCommand) -> Option<RemotingCommand>>;

/// Answers server-initiated requests with `reply` and forwards each one to a channel.
struct Forwarder {
    seen: mpsc::UnboundedSender<RemotingCommand>,
    reply: Reply,
}

impl Actor for Forwarder {
    type Context = Context<Self>;
}

impl Handler<ServerRequest> for Forwarder {
    type Result = Option<RemotingCommand>;

    fn handle(&mut self, msg: ServerRequest, _ctx: &mut Context<Self>) -> Self::Result {
        let reply = (self.reply)(&msg.command);
        let _ = self.seen.send(msg.command);
        reply
    }
}

async fn on_request(
    conn: &Addr<Connection>,
    code: i32,
    reply: Reply,
) -> mpsc::UnboundedReceiver<RemotingCommand> {
    let (seen, received) = mpsc::unbounded_channel();
    let handler = Forwarder {
        seen: seen.clone(),
        reply,
    }
    .start();
    conn.send(RegisterHandler {
        code: Some(code),
        handler: handler.downgrade().recipient(),
    })
    .await
    .unwrap();
    // The connection holds handlers weakly: this one lives while the test reads its requests.
    actix_rt::spawn(async move {
        seen.closed().await;
        drop(handler);
    });
    received
}

async fn next_request(
    received: &mut mpsc::UnboundedReceiver<RemotingCommand>,
    what: &str,
) -> RemotingCommand {
    within(what, received.recv()).await.unwrap()
}

/// Forwards connection events to a channel.
struct EventForwarder(mpsc::UnboundedSender<ConnectionEvent>);

impl Actor for EventForwarder {
    type Context = Context<Self>;
}

impl Handler<ConnectionEvent> for EventForwarder {
    type Result = ();

    fn handle(&mut self, msg: ConnectionEvent, _ctx: &mut Context<Self>) {
        let _ = self.0.send(msg);
    }
}

async fn held_pulls(cluster: &EmbeddedCluster) -> usize {
    cluster
        .with_core(BROKER, |core, _| (core.held_pull_count(), Vec::new()))
        .await
        .unwrap()
}

/// Polls until the broker has parked `count` pulls (a pull crosses a socket first).
async fn until_held(cluster: &EmbeddedCluster, count: usize) {
    let deadline = Instant::now() + PATIENCE;
    while held_pulls(cluster).await != count {
        assert!(
            Instant::now() < deadline,
            "the broker never parked {count} pull(s)"
        );
        tokio::task::yield_now().await;
    }
}

/// Bytes that do not compress, so the producer sends them as they are.
fn incompressible(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

async fn is_closed_by_peer(raw: &mut TcpStream) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match within("the broker to close the socket", raw.read(&mut buf)).await {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue,
        }
    }
}

// ------------------------------------------------------------------------------------------
// Tests
// ------------------------------------------------------------------------------------------

#[actix_rt::test]
async fn a_producer_creates_a_new_topic_through_the_tbw102_route() {
    let cluster = start_cluster(EmbeddedConfig {
        queues: 6,
        ..EmbeddedConfig::ephemeral()
    })
    .await;
    let client = client(&cluster);
    // The template topic is routable from the start, with the cluster's queue count.
    let template = client.route("TBW102").await.unwrap();
    assert_eq!(template.produce_queues.len(), 6);
    assert!(matches!(
        client.route("Fresh").await,
        Err(Error::TopicRouteNotFound(_))
    ));
    // The producer asks for 3 queues; a broker creates min(3, template's 6) = 3.
    let producer = Producer::new(
        client.clone(),
        ProducerConfig {
            default_topic_queue_nums: 3,
            ..ProducerConfig::default()
        },
    );
    let sent = producer
        .send(Message::new("Fresh", "first").with_tags("TagA"))
        .await
        .unwrap();
    assert!((0..3).contains(&sent.queue.queue_id), "{sent:?}");
    assert_eq!(sent.queue_offset, 0);
    let route = client.refresh_route("Fresh").await.unwrap();
    assert_eq!(route.produce_queues.len(), 3);
    assert_eq!(
        route.master_addr(BROKER),
        Some(broker_addr(&cluster).as_str())
    );
    let conn = broker_conn(&client, &cluster).await;
    let back = pull_all(&conn, "Fresh", sent.queue.queue_id).await;
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].msg_id(), sent.msg_id);
    assert_eq!(back[0].tags(), Some("TagA"));
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn sends_batches_and_keyed_sends_come_back_from_raw_pulls() {
    let cluster = cluster().await;
    cluster.create_topic("Orders", 4).await.unwrap();
    let client = client(&cluster);
    let producer = producer_on(&client);
    let mut expected: BTreeMap<String, (Vec<u8>, Option<String>, SendResult)> = BTreeMap::new();
    for i in 0..4 {
        let body = format!("single-{i}");
        let sent = producer
            .send(Message::new("Orders", body.clone()).with_tags("Single"))
            .await
            .unwrap();
        expected.insert(
            sent.msg_id.clone(),
            (body.into_bytes(), Some("Single".into()), sent),
        );
    }
    let batch: Vec<Message> = (0..3)
        .map(|i| Message::new("Orders", format!("batch-{i}")).with_keys(format!("bk{i}")))
        .collect();
    let batch_sent = producer.send_batch(batch).await.unwrap();
    let batch_ids: Vec<&str> = batch_sent.msg_id.split(',').collect();
    assert_eq!(batch_ids.len(), 3);
    let mut keyed = Vec::new();
    for i in 0..3 {
        let sent = producer
            .send_with_key(Message::new("Orders", format!("keyed-{i}")), "order-42")
            .await
            .unwrap();
        keyed.push(sent);
    }
    // One key, one queue, consecutive offsets.
    assert!(keyed.iter().all(|s| s.queue == keyed[0].queue));
    assert_eq!(
        keyed.iter().map(|s| s.queue_offset).collect::<Vec<_>>(),
        (0..3)
            .map(|i| keyed[0].queue_offset + i)
            .collect::<Vec<_>>()
    );

    let conn = broker_conn(&client, &cluster).await;
    let mut stored: BTreeMap<String, MessageExt> = BTreeMap::new();
    for queue_id in 0..4 {
        for m in pull_all(&conn, "Orders", queue_id).await {
            stored.insert(m.msg_id().into_owned(), m);
        }
    }
    assert_eq!(stored.len(), 4 + 3 + 3);
    for (id, (body, tag, sent)) in &expected {
        let m = &stored[id];
        assert_eq!(&m.body()[..], &body[..]);
        assert_eq!(m.tags(), tag.as_deref());
        assert_eq!(
            (m.queue_id, m.queue_offset),
            (sent.queue.queue_id, sent.queue_offset)
        );
        assert_eq!(m.offset_msg_id(), sent.offset_msg_id);
    }
    for (i, id) in batch_ids.iter().enumerate() {
        let m = &stored[*id];
        assert_eq!(&m.body()[..], format!("batch-{i}").as_bytes());
        assert_eq!(m.keys(), vec![format!("bk{i}").as_str()]);
        assert_eq!(m.queue_id, batch_sent.queue.queue_id);
        assert_eq!(m.queue_offset, batch_sent.queue_offset + i as i64);
    }
    for (i, sent) in keyed.iter().enumerate() {
        let m = &stored[&sent.msg_id];
        assert_eq!(&m.body()[..], format!("keyed-{i}").as_bytes());
        assert_eq!(m.keys(), vec!["order-42"]);
    }
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn every_pull_status_a_consumer_can_meet() {
    let cluster = cluster().await;
    cluster.create_topic("Statuses", 2).await.unwrap();
    let client = client(&cluster);
    let conn = broker_conn(&client, &cluster).await;
    let status = |offset: i64, expr: &'static str| {
        let conn = conn.clone();
        async move {
            let r = pull(&conn, &pull_header("g", "Statuses", 0, offset, expr)).await;
            let next = if r.code == response_code::SUCCESS
                || r.code == response_code::PULL_NOT_FOUND
                || r.code == response_code::PULL_OFFSET_MOVED
                || r.code == response_code::PULL_RETRY_IMMEDIATELY
            {
                Some(next_offset(&r))
            } else {
                None
            };
            (r.code, r.remark.clone().unwrap_or_default(), next)
        }
    };
    // An empty queue: offset 0 is "nothing yet", any other offset has to move to 0.
    assert_eq!(
        status(0, "*").await,
        (19, "NO_MESSAGE_IN_QUEUE".into(), Some(0))
    );
    assert_eq!(
        status(5, "*").await,
        (21, "NO_MESSAGE_IN_QUEUE".into(), Some(0))
    );
    let producer = producer_on(&client);
    for _ in 0..2 {
        producer
            .send_to_queue(
                Message::new("Statuses", "b").with_tags("TagB"),
                &mq("Statuses", 0),
            )
            .await
            .unwrap();
    }
    assert_eq!(
        status(2, "*").await,
        (19, "OFFSET_OVERFLOW_ONE".into(), Some(2))
    );
    assert_eq!(
        status(7, "*").await,
        (21, "OFFSET_OVERFLOW_BADLY".into(), Some(2))
    );
    assert_eq!(
        status(0, "TagA").await,
        (20, "NO_MATCHED_MESSAGE".into(), Some(2))
    );
    assert_eq!(status(0, "TagB").await, (0, "FOUND".into(), Some(2)));
    // Retention dropped offset 0: the consumer is told to move up to the new min offset.
    cluster
        .with_core(BROKER, |core, _| {
            core.store_mut().truncate_before("Statuses", 0, 1);
            ((), Vec::new())
        })
        .await
        .unwrap();
    assert_eq!(
        status(0, "*").await,
        (21, "OFFSET_TOO_SMALL".into(), Some(1))
    );

    let code = |header: PullMessageRequestHeader| {
        let conn = conn.clone();
        async move { pull(&conn, &header).await.code }
    };
    assert_eq!(
        code(pull_header("g", "Nowhere", 0, 0, "*")).await,
        response_code::TOPIC_NOT_EXIST
    );
    assert_eq!(
        code(pull_header("g", "Statuses", 9, 0, "*")).await,
        response_code::INVALID_PARAMETER
    );
    let no_subscription = PullMessageRequestHeader {
        sys_flag: 0,
        ..pull_header("unknown-group", "Statuses", 0, 0, "*")
    };
    assert_eq!(
        code(no_subscription).await,
        response_code::SUBSCRIPTION_NOT_EXIST
    );
    cluster
        .with_core(BROKER, |core, _| {
            let mut write_only = rocketmq_actor::broker::store::TopicConfig::new("WriteOnly", 1);
            write_only.perm = 2;
            ((), core.create_topic(write_only))
        })
        .await
        .unwrap();
    assert_eq!(
        code(pull_header("g", "WriteOnly", 0, 0, "*")).await,
        response_code::NO_PERMISSION
    );
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_held_pull_wakes_on_a_send_to_its_queue_and_not_to_another() {
    let cluster = cluster().await;
    cluster.create_topic("Waking", 2).await.unwrap();
    let consumer = client(&cluster);
    let conn = broker_conn(&consumer, &cluster).await;
    let held = actix_rt::spawn(async move {
        let response = pull(&conn, &long_poll_header("g", "Waking", 0, 0)).await;
        (response, Instant::now())
    });
    until_held(&cluster, 1).await;

    let sender = client(&cluster);
    let producer = producer_on(&sender);
    producer
        .send_to_queue(Message::new("Waking", "elsewhere"), &mq("Waking", 1))
        .await
        .unwrap();
    // The broker has handled that send (it answered); the pull on queue 0 is still parked.
    assert_eq!(held_pulls(&cluster).await, 1);
    assert!(!held.is_finished());

    let sent_at = Instant::now();
    let sent = producer
        .send_to_queue(Message::new("Waking", "here"), &mq("Waking", 0))
        .await
        .unwrap();
    let (response, answered_at) = within("the held pull", held).await.unwrap();
    let messages = pulled(&response);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].msg_id(), sent.msg_id);
    assert_eq!(&messages[0].body()[..], b"here");
    println!(
        "long-poll wake-up: pull answered {:?} after the send was issued",
        answered_at.saturating_duration_since(sent_at)
    );
    assert_eq!(held_pulls(&cluster).await, 0);
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn committed_offsets_round_trip_through_update_query_and_pull() {
    let cluster = cluster().await;
    cluster.create_topic("Ledger", 2).await.unwrap();
    let client = client(&cluster);
    let conn = broker_conn(&client, &cluster).await;
    let update = |queue_id: i32, offset: i64| {
        RemotingCommand::request_with_header(
            request_code::UPDATE_CONSUMER_OFFSET,
            &UpdateConsumerOffsetRequestHeader {
                consumer_group: "ledger-group".into(),
                topic: "Ledger".into(),
                queue_id,
                commit_offset: offset,
                bname: None,
            },
        )
    };
    let query = |queue_id: i32| {
        RemotingCommand::request_with_header(
            request_code::QUERY_CONSUMER_OFFSET,
            &QueryConsumerOffsetRequestHeader {
                consumer_group: "ledger-group".into(),
                topic: "Ledger".into(),
                queue_id,
                set_zero_if_not_found: None,
                bname: None,
            },
        )
    };
    // The broker only takes offsets of a group it knows.
    assert_eq!(
        rpc(&conn, update(1, 5)).await.code,
        response_code::SUBSCRIPTION_GROUP_NOT_EXIST
    );
    heartbeat(&conn, &client, "ledger-group", "Ledger").await;
    assert_eq!(rpc(&conn, update(1, 5)).await.code, response_code::SUCCESS);
    let offset_of = |r: RemotingCommand| {
        assert_eq!(r.code, response_code::SUCCESS, "{r:?}");
        r.decode_header::<QueryConsumerOffsetResponseHeader>()
            .unwrap()
            .offset
    };
    assert_eq!(offset_of(rpc(&conn, query(1)).await), 5);
    // One-way commits (what consumers send) land before a later request on the connection.
    client
        .invoke_oneway(&broker_addr(&cluster), update(1, 6))
        .await
        .unwrap();
    assert_eq!(offset_of(rpc(&conn, query(1)).await), 6);
    // Nothing committed and nothing stored yet.
    assert_eq!(
        rpc(&conn, query(0)).await.code,
        response_code::QUERY_NOT_FOUND
    );
    // A pull carrying FLAG_COMMIT_OFFSET commits its commitOffset.
    let committing = PullMessageRequestHeader {
        sys_flag: pull_sys_flag::SUBSCRIPTION | pull_sys_flag::COMMIT_OFFSET,
        commit_offset: 3,
        ..pull_header("ledger-group", "Ledger", 0, 0, "*")
    };
    pull(&conn, &committing).await;
    assert_eq!(offset_of(rpc(&conn, query(0)).await), 3);
    assert_eq!(
        cluster
            .committed_offset(BROKER, "ledger-group", "Ledger", 0)
            .await
            .unwrap(),
        Some(3)
    );
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn joining_and_leaving_a_group_notifies_the_other_member() {
    let cluster = cluster().await;
    let first = client(&cluster);
    let second = client(&cluster);
    let first_conn = broker_conn(&first, &cluster).await;
    let second_conn = broker_conn(&second, &cluster).await;
    let no_reply: fn() -> Reply = || Box::new(|_| None);
    let mut first_notes = on_request(
        &first_conn,
        request_code::NOTIFY_CONSUMER_IDS_CHANGED,
        no_reply(),
    )
    .await;
    let mut second_notes = on_request(
        &second_conn,
        request_code::NOTIFY_CONSUMER_IDS_CHANGED,
        no_reply(),
    )
    .await;

    heartbeat(&first_conn, &first, "members", "Membership").await;
    let note = next_request(&mut first_notes, "the first member's own join").await;
    assert!(note.is_oneway());
    assert_eq!(note.ext("consumerGroup"), Some("members"));

    heartbeat(&second_conn, &second, "members", "Membership").await;
    next_request(&mut first_notes, "news of the second member").await;
    next_request(&mut second_notes, "the second member's own join").await;
    let list = |conn: Addr<Connection>| async move {
        let r = rpc(
            &conn,
            RemotingCommand::request_with_header(
                request_code::GET_CONSUMER_LIST_BY_GROUP,
                &GetConsumerListByGroupRequestHeader {
                    consumer_group: "members".into(),
                },
            ),
        )
        .await;
        let body: ConsumerListBody = decode_json(r.body.as_deref().unwrap()).unwrap();
        body.consumer_id_list
    };
    let mut both = vec![first.client_id().to_owned(), second.client_id().to_owned()];
    both.sort();
    assert_eq!(list(first_conn.clone()).await, both);

    // The second client goes away: its connection closes and the first one hears of it.
    second.shutdown().await;
    next_request(&mut first_notes, "news of the second member leaving").await;
    assert_eq!(
        list(first_conn.clone()).await,
        vec![first.client_id().to_owned()]
    );
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn queue_locks_are_exclusive_between_two_clients() {
    let cluster = cluster().await;
    let first = client(&cluster);
    let second = client(&cluster);
    let lock = |client: Client, queues: Vec<i32>| {
        let addr = cluster.broker_addr(BROKER).unwrap();
        async move {
            let body = LockBatchRequestBody {
                consumer_group: "orderly".into(),
                client_id: client.client_id().to_owned(),
                only_this_broker: true,
                mq_set: queues.iter().map(|q| mq("Sequenced", *q)).collect(),
            };
            let command = RemotingCommand::request_with_header(
                request_code::LOCK_BATCH_MQ,
                &LockBatchMqRequestHeader::default(),
            )
            .with_body(encode_json(&body));
            let r = client.invoke(&addr, command).await.unwrap();
            let body: LockBatchResponseBody = decode_json(r.body.as_deref().unwrap()).unwrap();
            body.lock_ok_mq_set
                .into_iter()
                .map(|m| m.queue_id)
                .collect::<BTreeSet<i32>>()
        }
    };
    let unlock = |client: Client, queues: Vec<i32>| {
        let addr = cluster.broker_addr(BROKER).unwrap();
        async move {
            let body = UnlockBatchRequestBody {
                consumer_group: "orderly".into(),
                client_id: client.client_id().to_owned(),
                only_this_broker: true,
                mq_set: queues.iter().map(|q| mq("Sequenced", *q)).collect(),
            };
            let command = RemotingCommand::request_with_header(
                request_code::UNLOCK_BATCH_MQ,
                &UnlockBatchMqRequestHeader::default(),
            )
            .with_body(encode_json(&body));
            client.invoke(&addr, command).await.unwrap();
        }
    };
    assert_eq!(
        lock(first.clone(), vec![0, 1]).await,
        BTreeSet::from([0, 1])
    );
    assert_eq!(
        lock(second.clone(), vec![0, 1, 2]).await,
        BTreeSet::from([2])
    );
    // Renewing keeps what one holds; another client's unlock releases nothing.
    assert_eq!(
        lock(first.clone(), vec![0, 1, 2]).await,
        BTreeSet::from([0, 1])
    );
    unlock(second.clone(), vec![0]).await;
    assert!(lock(second.clone(), vec![0]).await.is_empty());
    unlock(first.clone(), vec![0]).await;
    assert_eq!(lock(second.clone(), vec![0]).await, BTreeSet::from([0]));
    assert!(lock(first.clone(), vec![0]).await.is_empty());
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn failed_messages_are_retried_then_dead_lettered_on_a_scaled_delay_table() {
    // A thousand times faster than the real table: level 3 (the first retry) is 10 ms.
    let cluster = start_cluster(EmbeddedConfig {
        max_reconsume_times: 2,
        ..fast_retry_config(1)
    })
    .await;
    cluster.create_topic("Work", 1).await.unwrap();
    let client = client(&cluster);
    let conn = broker_conn(&client, &cluster).await;
    // Above 4 KiB the producer zlib-compresses the body; the copies must keep it intact.
    let body = incompressible(2_000, 7).repeat(3);
    let original = producer_on(&client)
        .send(Message::new("Work", body.clone()).with_tags("TagA"))
        .await
        .unwrap();
    let first = pulled(&pull(&conn, &pull_header("workers", "Work", 0, 0, "*")).await).remove(0);
    let send_back = |m: &MessageExt| {
        RemotingCommand::request_with_header(
            request_code::CONSUMER_SEND_MSG_BACK,
            &ConsumerSendMsgBackRequestHeader {
                offset: m.commit_log_offset,
                group: "workers".into(),
                delay_level: 0,
                origin_msg_id: Some(m.msg_id().into_owned()),
                origin_topic: Some(m.topic().to_owned()),
                unit_mode: false,
                max_reconsume_times: None,
                bname: None,
            },
        )
    };
    let retry_topic = "%RETRY%workers";
    let backed_at = now_ms();
    assert_eq!(
        rpc(&conn, send_back(&first)).await.code,
        response_code::SUCCESS
    );
    // The retry shows up when the scheduler delivers it; a parked pull sees it arrive.
    let retried =
        pulled(&pull(&conn, &long_poll_header("workers", retry_topic, 0, 0)).await).remove(0);
    assert!(
        retried.store_timestamp >= backed_at + 10,
        "delivered {} ms after the send-back, before level 3's 10 ms",
        retried.store_timestamp - backed_at
    );
    assert_eq!(retried.reconsume_times, 1);
    assert_eq!(&retried.body()[..], &body[..]);
    assert_eq!(retried.tags(), Some("TagA"));
    assert_eq!(retried.property(property::RETRY_TOPIC), Some("Work"));
    assert_eq!(
        retried.property(property::ORIGIN_MESSAGE_ID),
        Some(original.offset_msg_id.as_str())
    );
    assert_eq!(retried.msg_id(), original.msg_id);

    assert_eq!(
        rpc(&conn, send_back(&retried)).await.code,
        response_code::SUCCESS
    );
    let again =
        pulled(&pull(&conn, &long_poll_header("workers", retry_topic, 0, 1)).await).remove(0);
    assert_eq!(again.reconsume_times, 2);

    // Two reconsumes is the limit: the third failure goes straight to the dead-letter queue.
    assert_eq!(
        rpc(&conn, send_back(&again)).await.code,
        response_code::SUCCESS
    );
    let dead =
        pulled(&pull(&conn, &pull_header("workers", "%DLQ%workers", 0, 0, "*")).await).remove(0);
    assert_eq!(dead.reconsume_times, 3);
    assert_eq!(&dead.body()[..], &body[..]);
    assert_eq!(dead.property(property::DLQ_ORIGIN_TOPIC), Some("Work"));
    assert_eq!(
        dead.property(property::DLQ_ORIGIN_MESSAGE_ID),
        Some(original.offset_msg_id.as_str())
    );
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn resetting_offsets_pushes_the_new_offsets_to_the_client() {
    let cluster = cluster().await;
    cluster.create_topic("Replay", 1).await.unwrap();
    let client = client(&cluster);
    let conn = broker_conn(&client, &cluster).await;
    let mut pushes = on_request(
        &conn,
        request_code::RESET_CONSUMER_CLIENT_OFFSET,
        Box::new(|_| None),
    )
    .await;
    heartbeat(&conn, &client, "replayers", "Replay").await;
    send_numbered(&producer_on(&client), "Replay", 0..3).await;
    let commit = RemotingCommand::request_with_header(
        request_code::UPDATE_CONSUMER_OFFSET,
        &UpdateConsumerOffsetRequestHeader {
            consumer_group: "replayers".into(),
            topic: "Replay".into(),
            queue_id: 0,
            commit_offset: 3,
            bname: None,
        },
    );
    assert_eq!(rpc(&conn, commit).await.code, response_code::SUCCESS);
    // Back to the beginning of time: the first message stored at or after 0 is offset 0.
    let table = cluster
        .reset_offsets("replayers", "Replay", 0, false)
        .await
        .unwrap();
    assert_eq!(table, BTreeMap::from([(mq("Replay", 0), 0)]));
    let push = next_request(&mut pushes, "the reset push").await;
    assert!(push.is_oneway());
    let header: ResetOffsetRequestHeader = push.decode_header().unwrap();
    assert_eq!(
        (
            header.topic.as_str(),
            header.group.as_str(),
            header.timestamp
        ),
        ("Replay", "replayers", 0)
    );
    let body = ResetOffsetBody::decode(push.body.as_deref().unwrap()).unwrap();
    assert_eq!(body.offset_table, vec![(mq("Replay", 0), 0)]);
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn broker_calls_reach_a_client_handler_and_its_answer_comes_back() {
    let cluster = cluster().await;
    cluster.create_topic("Direct", 1).await.unwrap();
    let consumer = client(&cluster);
    let conn = broker_conn(&consumer, &cluster).await;
    let mut running_calls = on_request(
        &conn,
        request_code::GET_CONSUMER_RUNNING_INFO,
        Box::new(|_| {
            let info = ConsumerRunningInfo {
                properties: BTreeMap::from([("PROP_CLIENT_VERSION".into(), "V5_1_4".into())]),
                ..ConsumerRunningInfo::default()
            };
            Some(
                RemotingCommand::response(response_code::SUCCESS, None)
                    .with_body(encode_json(&info)),
            )
        }),
    )
    .await;
    let mut direct_calls = on_request(
        &conn,
        request_code::CONSUME_MESSAGE_DIRECTLY,
        Box::new(|request| {
            // Consume the message the broker attached and report its body back.
            let consumed = decode_messages(request.body.clone().unwrap_or_default()).ok()?;
            let result = ConsumeMessageDirectlyResult {
                consume_result: Some(CMResult::CrSuccess),
                remark: Some(String::from_utf8_lossy(consumed.first()?.body()).into_owned()),
                ..ConsumeMessageDirectlyResult::default()
            };
            Some(
                RemotingCommand::response(response_code::SUCCESS, None)
                    .with_body(encode_json(&result)),
            )
        }),
    )
    .await;
    heartbeat(&conn, &consumer, "callees", "Direct").await;
    let client_id = consumer.client_id().to_owned();

    let answer = cluster
        .consumer_running_info(BROKER, "callees", &client_id, false)
        .await
        .unwrap();
    let info: ConsumerRunningInfo = decode_json(answer.body.as_deref().unwrap()).unwrap();
    assert_eq!(info.properties["PROP_CLIENT_VERSION"], "V5_1_4");
    let asked = next_request(&mut running_calls, "the running-info call").await;
    assert_eq!(asked.ext("clientId"), Some(client_id.as_str()));

    // An admin tool asking the broker over the wire gets the client's answer.
    let admin = client(&cluster);
    let admin_conn = broker_conn(&admin, &cluster).await;
    let request = RemotingCommand::request_with_header(
        request_code::GET_CONSUMER_RUNNING_INFO,
        &GetConsumerRunningInfoRequestHeader {
            consumer_group: "callees".into(),
            client_id: client_id.clone(),
            jstack_enable: false,
        },
    );
    let forwarded = rpc(&admin_conn, request).await;
    assert_eq!(forwarded.code, response_code::SUCCESS);
    let info: ConsumerRunningInfo = decode_json(forwarded.body.as_deref().unwrap()).unwrap();
    assert_eq!(info.properties["PROP_CLIENT_VERSION"], "V5_1_4");
    next_request(&mut running_calls, "the forwarded running-info call").await;

    let producer = producer_on(&admin);
    let sent = producer
        .send(Message::new("Direct", "consume me now"))
        .await
        .unwrap();
    // By offset message id, and by the UNIQ_KEY a user sees.
    for id in [sent.offset_msg_id.clone(), sent.msg_id.clone()] {
        let answer = cluster
            .consume_message_directly(BROKER, "callees", &client_id, &id)
            .await
            .unwrap();
        let result: ConsumeMessageDirectlyResult =
            decode_json(answer.body.as_deref().unwrap()).unwrap();
        assert_eq!(result.consume_result, Some(CMResult::CrSuccess));
        assert_eq!(result.remark.as_deref(), Some("consume me now"));
        let asked = next_request(&mut direct_calls, "the consume-directly call").await;
        assert_eq!(asked.ext("msgId"), Some(id.as_str()));
        assert_eq!(asked.ext("brokerName"), Some(BROKER));
    }
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_send_the_broker_never_answers_waits_out_its_send_timeout_and_fails_as_a_timeout() {
    let cluster = cluster().await;
    cluster.create_topic("Unanswered", 1).await.unwrap();
    let client = client(&cluster);
    let send_timeout = Duration::from_millis(300);
    let producer = Producer::new(
        client.clone(),
        ProducerConfig {
            send_timeout,
            ..ProducerConfig::default()
        },
    );
    let queue = mq("Unanswered", 0);
    cluster
        .set_fault(BROKER, request_code::SEND_MESSAGE_V2, Some(Fault::Drop))
        .await
        .unwrap();
    // To one queue: one attempt, which has the whole send timeout.
    let started = Instant::now();
    match producer
        .send_to_queue(Message::new("Unanswered", "lost"), &queue)
        .await
    {
        Err(Error::Timeout {
            peer,
            code,
            timeout,
        }) => {
            assert_eq!(peer, broker_addr(&cluster));
            assert_eq!(code.0, request_code::SEND_MESSAGE_V2);
            assert_eq!(timeout, send_timeout);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        started.elapsed() >= send_timeout,
        "gave up after {:?}",
        started.elapsed()
    );
    // Round robin: the retries come after the first attempt's full wait, not within it.
    let started = Instant::now();
    let error = producer
        .send(Message::new("Unanswered", "lost too"))
        .await
        .expect_err("nothing answers");
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
    assert!(
        started.elapsed() >= send_timeout,
        "gave up after {:?}",
        started.elapsed()
    );
    // Once the broker answers again, so does the send, with the born time it was sent at.
    cluster
        .set_fault(BROKER, request_code::SEND_MESSAGE_V2, None)
        .await
        .unwrap();
    let before = rocketmq_actor::util::now_ms();
    let sent = producer
        .send_to_queue(Message::new("Unanswered", "answered"), &queue)
        .await
        .unwrap();
    let after = rocketmq_actor::util::now_ms();
    let conn = broker_conn(&client, &cluster).await;
    let stored = pull_all(&conn, "Unanswered", 0).await;
    let answered = stored
        .iter()
        .find(|m| m.msg_id() == sent.msg_id)
        .expect("the answered send is stored");
    assert!(
        (before..=after).contains(&answered.born_timestamp),
        "born {} outside {before}..={after}",
        answered.born_timestamp
    );
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn injected_faults_fail_drop_and_disconnect_and_a_restarted_broker_keeps_its_data() {
    let cluster = cluster().await;
    cluster.create_topic("Faulty", 1).await.unwrap();
    let client = client(&cluster);
    let producer = producer_on(&client);
    let queue = mq("Faulty", 0);
    producer
        .send_to_queue(Message::new("Faulty", "before"), &queue)
        .await
        .unwrap();

    cluster
        .set_fault(
            BROKER,
            request_code::SEND_MESSAGE_V2,
            Some(Fault::Fail {
                code: response_code::SYSTEM_BUSY,
                remark: "[TIMEOUT_CLEAN_QUEUE]broker busy".into(),
            }),
        )
        .await
        .unwrap();
    match producer
        .send_to_queue(Message::new("Faulty", "refused"), &queue)
        .await
    {
        Err(Error::Broker { code, remark, .. }) => {
            assert_eq!(code.0, response_code::SYSTEM_BUSY);
            assert!(remark.contains("broker busy"));
        }
        other => panic!("expected SYSTEM_BUSY, got {other:?}"),
    }
    // A swallowed request: the client's own timeout is all it gets.
    cluster
        .set_fault(BROKER, request_code::GET_MAX_OFFSET, Some(Fault::Drop))
        .await
        .unwrap();
    let impatient = Client::start(ClientConfig {
        request_timeout: Duration::from_millis(300),
        ..ClientConfig::new(cluster.namesrv_addr())
    })
    .unwrap();
    assert!(matches!(
        impatient.max_offset(&queue).await,
        Err(Error::Timeout { .. })
    ));
    cluster
        .set_fault(BROKER, request_code::SEND_MESSAGE_V2, None)
        .await
        .unwrap();
    cluster
        .set_fault(BROKER, request_code::GET_MAX_OFFSET, None)
        .await
        .unwrap();

    // Dropped connections: the client sees the disconnect and its next send reconnects.
    let conn = broker_conn(&client, &cluster).await;
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let forwarder = EventForwarder(events_tx).start();
    conn.send(Subscribe(forwarder.downgrade().recipient()))
        .await
        .unwrap();
    cluster.drop_connections().await.unwrap();
    let event = within("the disconnect", events.recv()).await.unwrap();
    assert!(
        matches!(event, ConnectionEvent::Disconnected { .. }),
        "{event:?}"
    );
    let after_drop = producer
        .send_to_queue(Message::new("Faulty", "after drop"), &queue)
        .await
        .unwrap();
    assert_eq!(after_drop.queue_offset, 1);

    // A stopped broker refuses; restarted on the same address it still has every message.
    cluster.stop_broker(BROKER, false).await.unwrap();
    assert!(producer
        .send_to_queue(Message::new("Faulty", "while down"), &queue)
        .await
        .is_err());
    cluster.restart_broker(BROKER).await.unwrap();
    let deadline = Instant::now() + PATIENCE;
    let after_restart = loop {
        // The client reconnects with backoff; a send before that fails fast.
        match producer
            .send_to_queue(Message::new("Faulty", "after restart"), &queue)
            .await
        {
            Ok(sent) => break sent,
            Err(e) => assert!(Instant::now() < deadline, "never reconnected: {e}"),
        }
    };
    assert_eq!(after_restart.queue_offset, 2);
    let bodies: Vec<Bytes> = pull_all(&broker_conn(&client, &cluster).await, "Faulty", 0)
        .await
        .into_iter()
        .map(|m| m.body().clone())
        .collect();
    assert_eq!(bodies, vec!["before", "after drop", "after restart"]);
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_cluster_with_a_data_directory_keeps_messages_and_offsets_across_a_restart() {
    let dir = std::env::temp_dir().join(format!(
        "rocketmq-actor-e2e-{}-{}",
        std::process::id(),
        now_ms()
    ));
    let config = EmbeddedConfig {
        data_dir: Some(dir.clone()),
        ..EmbeddedConfig::ephemeral()
    };
    let first_run = start_cluster(config.clone()).await;
    let client = client(&first_run);
    let producer = producer_on(&client);
    for i in 0..3 {
        producer
            .send_to_queue(
                Message::new("Durable", format!("d{i}")).with_tags("Kept"),
                &mq("Durable", 0),
            )
            .await
            .unwrap();
    }
    let conn = broker_conn(&client, &first_run).await;
    heartbeat(&conn, &client, "durable-group", "Durable").await;
    let commit = RemotingCommand::request_with_header(
        request_code::UPDATE_CONSUMER_OFFSET,
        &UpdateConsumerOffsetRequestHeader {
            consumer_group: "durable-group".into(),
            topic: "Durable".into(),
            queue_id: 0,
            commit_offset: 2,
            bname: None,
        },
    );
    assert_eq!(rpc(&conn, commit).await.code, response_code::SUCCESS);
    client.shutdown().await;
    first_run.shutdown().await;

    let second_run = start_cluster(config).await;
    assert_eq!(
        second_run
            .committed_offset(BROKER, "durable-group", "Durable", 0)
            .await
            .unwrap(),
        Some(2)
    );
    let client = self::client(&second_run);
    let conn = broker_conn(&client, &second_run).await;
    let kept = pull_all(&conn, "Durable", 0).await;
    assert_eq!(
        kept.iter().map(|m| m.body().clone()).collect::<Vec<_>>(),
        vec!["d0", "d1", "d2"]
    );
    assert!(kept.iter().all(|m| m.tags() == Some("Kept")));
    let next = producer_on(&client)
        .send_to_queue(Message::new("Durable", "d3"), &mq("Durable", 0))
        .await
        .unwrap();
    assert_eq!(next.queue_offset, 3);
    second_run.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[actix_rt::test]
async fn malformed_frames_close_only_their_own_connection() {
    let cluster = cluster().await;
    let client = client(&cluster);
    let producer = producer_on(&client);
    producer
        .send(Message::new("Sturdy", "before"))
        .await
        .unwrap();
    let garbage: [&[u8]; 3] = [
        // A header length larger than the frame.
        &[0, 0, 0, 8, 0, 0, 0, 200, 1, 2, 3, 4],
        // A frame far over the 16 MiB limit.
        &[0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0],
        // A well-framed JSON header that is not JSON.
        &[0, 0, 0, 9, 0, 0, 0, 5, b'{', b'n', b'o', b'p', b'e'],
    ];
    for bytes in garbage {
        let mut raw = TcpStream::connect(broker_addr(&cluster)).await.unwrap();
        raw.write_all(bytes).await.unwrap();
        assert!(is_closed_by_peer(&mut raw).await);
        // Everyone else carries on.
        producer
            .send(Message::new("Sturdy", "still here"))
            .await
            .unwrap();
    }
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn malformed_requests_get_the_codes_a_real_broker_sends() {
    let cluster = cluster().await;
    let client = client(&cluster);
    let conn = broker_conn(&client, &cluster).await;
    let r = rpc(&conn, RemotingCommand::request(request_code::PULL_MESSAGE)).await;
    assert_eq!(r.code, response_code::SYSTEM_ERROR);
    assert!(r
        .remark
        .unwrap()
        .contains("the custom field <consumerGroup> is null"));
    let r = rpc(&conn, RemotingCommand::request(99_999)).await;
    assert_eq!(r.code, response_code::REQUEST_CODE_NOT_SUPPORTED);
    assert_eq!(
        r.remark.as_deref(),
        Some(" request type 99999 not supported")
    );
    let send = |topic: &str| {
        let header = SendMessageRequestHeader {
            producer_group: "pg".into(),
            topic: topic.into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: 4,
            queue_id: 0,
            ..SendMessageRequestHeader::default()
        };
        let mut ext = rocketmq_actor::protocol::ExtFields::new();
        header.write_v2(&mut ext);
        let mut command = RemotingCommand::request(request_code::SEND_MESSAGE_V2);
        command.ext_fields = Some(ext);
        command.with_body(Bytes::from_static(b"x"))
    };
    let bad_number = send("Fine").with_ext("e", "zero");
    assert_eq!(
        rpc(&conn, bad_number).await.code,
        response_code::SYSTEM_ERROR
    );
    assert_eq!(
        rpc(&conn, send("bad topic!")).await.code,
        response_code::SYSTEM_ERROR
    );
    assert_eq!(
        rpc(&conn, send("SCHEDULE_TOPIC_XXXX")).await.code,
        response_code::NO_PERMISSION
    );
    let too_big = send("Fine").with_body(Bytes::from(vec![b'x'; 4 * 1024 * 1024 + 1]));
    assert_eq!(
        rpc(&conn, too_big).await.code,
        response_code::MESSAGE_ILLEGAL
    );
    let bad_json =
        RemotingCommand::request(request_code::HEART_BEAT).with_body(Bytes::from_static(b"{"));
    assert_eq!(rpc(&conn, bad_json).await.code, response_code::SYSTEM_ERROR);
    let no_body = RemotingCommand::request(request_code::LOCK_BATCH_MQ);
    assert_eq!(rpc(&conn, no_body).await.code, response_code::SYSTEM_ERROR);
    let no_topic = RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC);
    assert_eq!(rpc(&conn, no_topic).await.code, response_code::SYSTEM_ERROR);
    let unknown = RemotingCommand::request_with_header(
        request_code::GET_ROUTEINFO_BY_TOPIC,
        &GetRouteInfoRequestHeader {
            topic: "NoSuchTopic".into(),
            accept_standard_json_only: None,
        },
    );
    assert_eq!(
        rpc(&conn, unknown).await.code,
        response_code::TOPIC_NOT_EXIST
    );
    // None of that hurt the broker.
    assert_eq!(rpc(&conn, send("Fine")).await.code, response_code::SUCCESS);
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_client_that_stops_reading_is_dropped_instead_of_growing_the_broker() {
    a_stuck_reader_is_dropped(EmbeddedConfig {
        max_outbound_bytes: 512 * 1024,
        ..EmbeddedConfig::ephemeral()
    })
    .await;
}

#[actix_rt::test]
async fn stuck_readers_are_dropped_once_the_clusters_total_output_budget_is_spent() {
    // Per connection the cap is out of reach; the cluster-wide budget is what stops them.
    let config = EmbeddedConfig {
        max_outbound_bytes: usize::MAX,
        max_total_outbound_bytes: 6 * 1024 * 1024,
        ..EmbeddedConfig::ephemeral()
    };
    a_stuck_reader_is_dropped(config).await;
}

async fn a_stuck_reader_is_dropped(config: EmbeddedConfig) {
    let cluster = start_cluster(config).await;
    cluster.create_topic("Heavy", 1).await.unwrap();
    let client = client(&cluster);
    let producer = producer_on(&client);
    for i in 0..4 {
        producer
            .send_to_queue(
                Message::new("Heavy", incompressible(200_000, i)),
                &mq("Heavy", 0),
            )
            .await
            .unwrap();
    }
    // 400 pulls of ~250 KiB each, never read: ~100 MB the broker would otherwise buffer.
    let mut frames = bytes::BytesMut::new();
    for _ in 0..400 {
        RemotingCommand::request_with_header(
            request_code::PULL_MESSAGE,
            &pull_header("greedy", "Heavy", 0, 0, "*"),
        )
        .encode(&mut frames)
        .unwrap();
    }
    let mut stuck = TcpStream::connect(broker_addr(&cluster)).await.unwrap();
    stuck.write_all(&frames).await.unwrap();
    let mut received = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match within("the broker to drop the stuck client", stuck.read(&mut buf)).await {
            Ok(0) | Err(_) => break,
            Ok(n) => received += n,
        }
    }
    assert!(
        received < 400 * 200_000,
        "read {received} bytes: the broker never gave up"
    );
    // Well-behaved clients are unaffected.
    let sent = producer
        .send_to_queue(Message::new("Heavy", "small"), &mq("Heavy", 0))
        .await
        .unwrap();
    assert_eq!(sent.queue_offset, 4);
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_hundred_concurrent_connections_each_send_and_pull() {
    const CLIENTS: i32 = 100;
    const PER_CLIENT: usize = 10;
    let cluster = cluster().await;
    cluster.create_topic("Crowd", CLIENTS).await.unwrap();
    let clients: Vec<Client> = (0..CLIENTS).map(|_| client(&cluster)).collect();
    let work = clients.iter().enumerate().map(|(i, client)| {
        let addr = broker_addr(&cluster);
        let client = client.clone();
        async move {
            let queue = mq("Crowd", i as i32);
            let producer = producer_on(&client);
            let sends = (0..PER_CLIENT).map(|n| {
                producer.send_to_queue(Message::new("Crowd", format!("c{i}-m{n}")), &queue)
            });
            for sent in futures::future::join_all(sends).await {
                sent.unwrap();
            }
            let conn = client.connection(&addr).await.unwrap();
            pull_all(&conn, "Crowd", i as i32).await
        }
    });
    let results = within("100 clients", futures::future::join_all(work)).await;
    let mut born_hosts = BTreeSet::new();
    for (i, messages) in results.iter().enumerate() {
        let mut bodies: Vec<String> = messages
            .iter()
            .map(|m| String::from_utf8_lossy(m.body()).into_owned())
            .collect();
        bodies.sort();
        let mut expected: Vec<String> = (0..PER_CLIENT).map(|n| format!("c{i}-m{n}")).collect();
        expected.sort();
        assert_eq!(bodies, expected, "client {i}");
        // Each client's messages carry its own connection's address.
        let hosts: BTreeSet<_> = messages.iter().map(|m| m.born_host).collect();
        assert_eq!(hosts.len(), 1);
        born_hosts.extend(hosts);
    }
    assert_eq!(
        born_hosts.len(),
        CLIENTS as usize,
        "100 distinct connections"
    );
    for client in &clients {
        client.shutdown().await;
    }
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_torn_end_of_the_commit_log_is_cut_off_so_later_messages_survive_the_next_restart() {
    let dir = std::env::temp_dir().join(format!(
        "rocketmq-actor-torn-{}-{}",
        std::process::id(),
        now_ms()
    ));
    let config = EmbeddedConfig {
        data_dir: Some(dir.clone()),
        ..EmbeddedConfig::ephemeral()
    };
    let send = |cluster: &EmbeddedCluster, body: &'static str| {
        let client = client(cluster);
        async move {
            producer_on(&client)
                .send_to_queue(Message::new("Torn", body), &mq("Torn", 0))
                .await
                .unwrap();
            client.shutdown().await;
        }
    };
    let first_run = start_cluster(config.clone()).await;
    send(&first_run, "kept").await;
    first_run.shutdown().await;
    // A crash in the middle of a write: the start of a record whose rest never made it.
    let log = dir.join(BROKER).join("commitlog");
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut file, &[0, 0, 1, 0, 0xda, 0xa3]).unwrap();
    drop(file);

    let second_run = start_cluster(config.clone()).await;
    send(&second_run, "after the crash").await;
    second_run.shutdown().await;

    let third_run = start_cluster(config).await;
    let client = self::client(&third_run);
    let conn = broker_conn(&client, &third_run).await;
    let bodies: Vec<_> = pull_all(&conn, "Torn", 0)
        .await
        .iter()
        .map(|m| m.body().clone())
        .collect();
    assert_eq!(bodies, vec!["kept", "after the crash"]);
    third_run.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
