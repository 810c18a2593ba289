//! ACL on the embedded broker: what a signed client may do, and how each refusal reaches the
//! application — once, naming the access key, the resource and the missing permission — for
//! the producer, the push consumer (concurrent, orderly, retries, offsets), the pull consumers
//! and the base client.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use rocketmq_actor::acl::Credentials;
use rocketmq_actor::consumer::{ConsumeStatus, ConsumerEvent, OrderlyStatus};
use rocketmq_actor::embedded::{AclConfig, EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::hooks::RpcHook;
use rocketmq_actor::protocol::body::{ConsumerData, HeartbeatData, SubscriptionData};
use rocketmq_actor::protocol::{request_code, RemotingCommand};
use rocketmq_actor::pull::{LitePullConsumer, PullConsumer, PullStatus};
use rocketmq_actor::{Client, ClientConfig, Error, Message, Producer, ProducerConfig};
use tokio::sync::mpsc::unbounded_channel;

const TOPIC: &str = "Orders";
const GROUP: &str = "billing";

/// A producer account, a consumer account (SUB on the topic and on its group only) and an
/// admin. No white address: every request from loopback is checked.
const ACL: &str = r#"
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: ["Orders=PUB"]
  - accessKey: consumer1
    secretKey: consumer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: ["Orders=SUB", "Secret=DENY"]
    groupPerms: ["billing=SUB"]
  - accessKey: admin001
    secretKey: admin-secret
    admin: true
"#;

fn acl() -> AclConfig {
    AclConfig::from_yaml_str(ACL).expect("the test ACL parses")
}

/// The same accounts, but consumer1 may no longer subscribe to the topic.
fn acl_without_topic_sub() -> AclConfig {
    AclConfig::from_yaml_str(&ACL.replace(r#"["Orders=SUB", "Secret=DENY"]"#, "[]"))
        .expect("the changed ACL parses")
}

fn producer_account() -> Credentials {
    Credentials::new("producer1", "producer-secret")
}

fn consumer_account() -> Credentials {
    Credentials::new("consumer1", "consumer-secret")
}

/// A cluster of `brokers` brokers in ACL mode with the topic on each (created by the
/// operator, not over the wire).
async fn acl_cluster(brokers: usize) -> EmbeddedCluster {
    let cluster = start_cluster(EmbeddedConfig {
        acl: Some(acl()),
        ..fast_retry_config(brokers)
    })
    .await;
    cluster.create_topic(TOPIC, 1).await.expect("topic created");
    cluster
        .create_topic("Secret", 2)
        .await
        .expect("topic created");
    cluster
}

fn client_with(cluster: &EmbeddedCluster, credentials: Option<Credentials>) -> Client {
    let mut config = ClientConfig::new(cluster.namesrv_addr());
    config.credentials = credentials;
    Client::start(config).expect("client starts")
}

fn signed_producer(cluster: &EmbeddedCluster) -> Producer {
    producer_on(&client_with(cluster, Some(producer_account())))
}

/// The remark of an access refusal; panics on anything else.
fn refusal<T>(result: rocketmq_actor::Result<T>) -> String {
    match result {
        Err(Error::AccessDenied { remark, .. }) => remark,
        Err(other) => panic!("expected an access refusal, got {other:?}"),
        Ok(_) => panic!("expected an access refusal, got a success"),
    }
}

/// Counts the requests of one code a client sends.
struct CountRequests {
    code: i32,
    seen: AtomicUsize,
}

impl RpcHook for CountRequests {
    fn before_request(&self, _peer: &str, request: &mut RemotingCommand) {
        if request.code == self.code {
            self.seen.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn counting(code: i32) -> Arc<CountRequests> {
    Arc::new(CountRequests {
        code,
        seen: AtomicUsize::new(0),
    })
}

#[actix_rt::test]
async fn a_signed_producer_sends_and_every_refusal_is_returned_at_once_naming_what_is_missing() {
    let cluster = acl_cluster(2).await;
    let sent = signed_producer(&cluster)
        .send(Message::new(TOPIC, "hello"))
        .await
        .expect("producer1 may publish to Orders");
    assert_eq!(sent.queue.topic, TOPIC);

    // The name server is not checked (as Java's): an unsigned client reads routes.
    let unsigned = client_with(&cluster, None);
    unsigned.refresh_route(TOPIC).await.expect("route");

    let cases = [
        (None, "no AccessKey in the request"),
        (
            Some(Credentials::new("producer1", "wrong-secret")),
            "signature check failed for accessKey=producer1",
        ),
        (
            Some(Credentials::new("stranger1", "whatever")),
            "unknown accessKey=stranger1",
        ),
        (
            Some(consumer_account()),
            "accessKey=consumer1 has no PUB permission on topic:Orders",
        ),
    ];
    for (credentials, expected) in cases {
        let sends = counting(request_code::SEND_MESSAGE_V2);
        let mut config = ClientConfig::new(cluster.namesrv_addr()).with_rpc_hook(sends.clone());
        config.credentials = credentials.clone();
        let producer = Producer::new(
            Client::start(config).expect("client"),
            ProducerConfig::default(),
        );
        let remark = refusal(producer.send(Message::new(TOPIC, "refused")).await);
        assert!(remark.contains(expected), "{credentials:?}: {remark}");
        // One attempt: an access refusal is not retried on the other broker.
        assert_eq!(sends.seen.load(Ordering::SeqCst), 1, "{credentials:?}");
    }
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_signed_push_consumer_consumes_commits_and_retries_through_its_group() {
    let cluster = acl_cluster(1).await;
    let producer = signed_producer(&cluster);
    send_numbered(&producer, TOPIC, 0..10).await;
    let (tx, mut rx) = unbounded_channel();
    let failed_once = Arc::new(AtomicUsize::new(0));
    let consumer = from_first_offset(&cluster.namesrv_addr(), GROUP, TOPIC, "*")
        .credentials(consumer_account())
        .listener_fn(move |messages, ctx| {
            let mut status = ConsumeStatus::Success;
            for m in &messages {
                // m3 fails once: it comes back through %RETRY%billing (send-back needs the
                // group's SUB permission).
                if text(m) == "m3" && failed_once.fetch_add(1, Ordering::SeqCst) == 0 {
                    status = ConsumeStatus::ReconsumeLater;
                }
                let _ = tx.send((text(m), m.reconsume_times));
            }
            std::future::ready((status, ctx))
        })
        .configure(|c| c.consume_message_batch_max_size = 1)
        .start()
        .await
        .expect("consumer1 may consume Orders in billing");
    let mut seen = receive(&mut rx, 11).await;
    seen.sort();
    assert!(seen.contains(&("m3".to_owned(), 1)), "{seen:?}");
    assert_eq!(seen.iter().filter(|(_, times)| *times == 0).count(), 10);
    assert!(consumer.status().await.problems.is_empty());
    let max = cluster.max_offset(BROKER, TOPIC, 0).await.expect("offset");
    await_committed(&cluster, GROUP, TOPIC, max).await;
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_push_consumer_that_may_not_consume_fails_to_start_saying_why() {
    let cluster = acl_cluster(1).await;
    let namesrv = cluster.namesrv_addr();
    let cases = [
        (None, GROUP, TOPIC, "no AccessKey in the request"),
        (
            Some(Credentials::new("consumer1", "wrong-secret")),
            GROUP,
            TOPIC,
            "signature check failed for accessKey=consumer1",
        ),
        (
            Some(consumer_account()),
            "others",
            TOPIC,
            "accessKey=consumer1 has no SUB permission on group:others",
        ),
        (
            Some(consumer_account()),
            GROUP,
            "Secret",
            "accessKey=consumer1 has no SUB permission on topic:Secret",
        ),
        (
            Some(producer_account()),
            GROUP,
            TOPIC,
            "accessKey=producer1 has no SUB permission on group:billing",
        ),
    ];
    for (credentials, group, topic, expected) in cases {
        let mut builder = from_first_offset(&namesrv, group, topic, "*")
            .listener_fn(|_messages, ctx| std::future::ready((ConsumeStatus::Success, ctx)));
        if let Some(credentials) = credentials.clone() {
            builder = builder.credentials(credentials);
        }
        let remark = refusal(builder.start().await);
        assert!(remark.contains(expected), "{credentials:?}: {remark}");
        // The same account and group start fine once the refusal is gone: nothing of the
        // refused consumer stayed registered.
    }
    let orderly = from_first_offset(&namesrv, GROUP, TOPIC, "*")
        .orderly_listener_fn(|_messages, ctx| std::future::ready((OrderlyStatus::Success, ctx)))
        .start()
        .await;
    assert!(refusal(orderly).contains("no AccessKey"));
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn an_orderly_consumer_locks_its_queues_and_consumes_in_order_when_signed() {
    let cluster = acl_cluster(1).await;
    let producer = signed_producer(&cluster);
    let queue = mq(TOPIC, 0);
    for i in 0..20 {
        producer
            .send_to_queue(Message::new(TOPIC, body_of(i)), &queue)
            .await
            .expect("sent");
    }
    let (tx, mut rx) = unbounded_channel();
    let consumer = from_first_offset(&cluster.namesrv_addr(), GROUP, TOPIC, "*")
        .credentials(consumer_account())
        .orderly_listener_fn(move |messages, ctx| {
            for m in &messages {
                if m.queue_id == 0 {
                    let _ = tx.send(text(m));
                }
            }
            std::future::ready((OrderlyStatus::Success, ctx))
        })
        .start()
        .await
        .expect("orderly consumer starts");
    let seen = receive(&mut rx, 20).await;
    assert_eq!(seen, (0..20).map(body_of).collect::<Vec<_>>());
    await_committed(&cluster, GROUP, TOPIC, 20).await;
    consumer.shutdown().await;

    // Locks need only a valid signature; an unsigned client is refused.
    let unsigned = client_with(&cluster, None);
    let remark = refusal(
        unsigned
            .lock_batch(GROUP, std::slice::from_ref(&queue), Duration::from_secs(3))
            .await,
    );
    assert!(remark.contains("no AccessKey"), "{remark}");
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn offsets_and_send_backs_need_the_groups_permission() {
    let cluster = acl_cluster(1).await;
    let producer = signed_producer(&cluster);
    send_numbered(&producer, TOPIC, 0..1).await;
    let client = client_with(&cluster, Some(consumer_account()));
    let queue = mq(TOPIC, 0);
    // The broker learns of the group from a heartbeat (SUB on the group and the topic).
    let addr = cluster.broker_addr(BROKER).expect("broker");
    let heartbeat = HeartbeatData {
        client_id: client.client_id().to_owned(),
        consumer_data_set: vec![ConsumerData {
            group_name: GROUP.into(),
            subscription_data_set: vec![SubscriptionData {
                topic: TOPIC.into(),
                sub_string: "*".into(),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    client
        .heartbeat(&addr, &heartbeat)
        .await
        .expect("heartbeat");
    client
        .update_consumer_offset(GROUP, &queue, 1)
        .await
        .expect("commit in billing");
    assert_eq!(
        client
            .query_consumer_offset(GROUP, &queue)
            .await
            .expect("read"),
        Some(1)
    );
    let remark = refusal(client.update_consumer_offset("others", &queue, 1).await);
    assert_eq!(
        remark,
        "accessKey=consumer1 has no SUB permission on group:others"
    );
    let pulled = client
        .pull(&rocketmq_actor::rpc::PullRequest::new(
            GROUP,
            queue.clone(),
            0,
        ))
        .await
        .expect("pull");
    let message = pulled.messages.first().expect("one message").clone();
    client
        .send_message_back(GROUP, &queue, &message, 0, 16, Duration::from_secs(3))
        .await
        .expect("send-back in billing");
    let remark = refusal(
        client
            .send_message_back("others", &queue, &message, 0, 16, Duration::from_secs(3))
            .await,
    );
    assert_eq!(
        remark,
        "accessKey=consumer1 has no SUB permission on group:others"
    );
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn pull_consumers_pull_when_signed_and_are_refused_otherwise() {
    let cluster = acl_cluster(1).await;
    send_numbered(&signed_producer(&cluster), TOPIC, 0..3).await;
    let namesrv = cluster.namesrv_addr();
    let queue = mq(TOPIC, 0);

    let signed = PullConsumer::builder()
        .namesrv_addr(&namesrv)
        .group(GROUP)
        .credentials(consumer_account())
        .start()
        .await
        .expect("pull consumer starts");
    let pulled = signed.pull(&queue, "*", 0, 32).await.expect("pull");
    assert_eq!(pulled.status, PullStatus::Found);
    assert_eq!(pulled.messages.len(), 3);
    signed.shutdown().await;

    let unsigned = PullConsumer::builder()
        .namesrv_addr(&namesrv)
        .group(GROUP)
        .start()
        .await
        .expect("a pull consumer without topics sends nothing at start");
    let remark = refusal(unsigned.pull(&queue, "*", 0, 32).await);
    assert!(remark.contains("no AccessKey"), "{remark}");
    unsigned.shutdown().await;

    // A subscribing lite consumer heartbeats at start: refused there.
    let lite = LitePullConsumer::builder()
        .namesrv_addr(&namesrv)
        .group("others")
        .subscribe(TOPIC, "*")
        .credentials(consumer_account())
        .start()
        .await;
    let remark = refusal(lite);
    assert!(
        remark.contains("accessKey=consumer1 has no SUB permission on group:others"),
        "{remark}"
    );
    let lite = LitePullConsumer::builder()
        .namesrv_addr(&namesrv)
        .group(GROUP)
        .subscribe(TOPIC, "*")
        .credentials(consumer_account())
        .configure(|c| {
            c.consume_from_where = rocketmq_actor::consumer::ConsumeFromWhere::FirstOffset
        })
        .start()
        .await
        .expect("lite consumer starts");
    let mut stream = lite.stream();
    let mut bodies = Vec::new();
    while bodies.len() < 3 {
        let message = tokio::time::timeout(PATIENCE, stream.next())
            .await
            .expect("a message in time")
            .expect("stream open");
        bodies.push(text(&message));
    }
    bodies.sort();
    assert_eq!(bodies, vec!["m0", "m1", "m2"]);
    drop(stream);
    lite.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_permission_revoked_while_consuming_is_one_problem_and_pulls_back_off() {
    let cluster = acl_cluster(1).await;
    let producer = signed_producer(&cluster);
    let pulls = counting(request_code::PULL_MESSAGE);
    let (tx, mut rx) = unbounded_channel();
    let consumer = from_first_offset(&cluster.namesrv_addr(), GROUP, TOPIC, "*")
        .client_config(
            ClientConfig::new("")
                .with_credentials(consumer_account())
                .with_rpc_hook(pulls.clone()),
        )
        .listener_fn(recording(tx))
        .start()
        .await
        .expect("consumer starts");
    let mut events = consumer.events();
    send_numbered(&producer, TOPIC, 0..1).await;
    receive(&mut rx, 1).await;

    cluster
        .set_acl(Some(acl_without_topic_sub()))
        .await
        .expect("ACL replaced");
    // A new message answers the held long polls; the pulls after them are refused.
    send_numbered(&producer, TOPIC, 1..2).await;
    let cause = tokio::time::timeout(PATIENCE, async {
        loop {
            match events.next().await {
                Some(ConsumerEvent::Problem { topic, cause }) if topic == TOPIC => return cause,
                Some(_) => {}
                None => panic!("event stream ended"),
            }
        }
    })
    .await
    .expect("the refusal is reported");
    assert!(
        cause.contains("accessKey=consumer1 has no SUB permission on topic:Orders"),
        "{cause}"
    );
    let problems = consumer.status().await.problems;
    assert!(
        problems.get(TOPIC).is_some_and(|c| c == &cause),
        "{problems:?}"
    );
    // Refused queues wait 30 s before they ask again: no pull storm.
    let before = pulls.seen.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = pulls.seen.load(Ordering::SeqCst) - before;
    assert!(during <= 2, "{during} pulls in 2 s while refused");
    consumer.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn admin_requests_need_an_admin_account() {
    let cluster = acl_cluster(1).await;
    let addr = cluster.broker_addr(BROKER).expect("broker");
    let create = || {
        RemotingCommand::request(request_code::UPDATE_AND_CREATE_TOPIC)
            .with_ext("topic", "Created")
            .with_ext("defaultTopic", "TBW102")
            .with_ext("readQueueNums", "1")
            .with_ext("writeQueueNums", "1")
            .with_ext("perm", "6")
            .with_ext("topicFilterType", "SINGLE_TAG")
    };
    let remark = refusal(
        client_with(&cluster, Some(consumer_account()))
            .invoke(&addr, create())
            .await,
    );
    assert_eq!(
        remark,
        "accessKey=consumer1 needs admin permission for request code=17"
    );
    client_with(&cluster, Some(Credentials::new("admin001", "admin-secret")))
        .invoke(&addr, create())
        .await
        .expect("the admin creates topics");
    cluster.shutdown().await;
}
