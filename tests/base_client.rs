//! The public base layer on its own, and the runtime outside actix: what a user who wants full
//! control, or who lives in a plain tokio program, relies on.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{body_of, cluster_with_topic, mq, producer_on, receive, send_numbered, text, BROKER};
use rocketmq_actor::consumer::ConsumeFromWhere;
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::rpc::{PullRequest, PullStatus, Subscription};
use rocketmq_actor::{
    Client, ClientConfig, ConsumeStatus, Error, Message, Producer, ProducerConfig, PushConsumer,
};
use tokio::sync::mpsc::unbounded_channel;

#[actix_rt::test]
async fn the_base_client_pulls_a_queue_and_commits_an_offset() {
    let topic = "BaseClient";
    let group = "base_client_group";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    let client = Client::start(ClientConfig::new(&namesrv)).expect("client starts");
    let producer = producer_on(&client);
    let queue = mq(topic, 0);
    let mut sent = Vec::new();
    for i in 0..10 {
        let tag = if i % 2 == 0 { "even" } else { "odd" };
        let message = Message::new(topic, body_of(i)).with_tags(tag);
        sent.push(producer.send_to_queue(message, &queue).await.expect("sent"));
    }

    let queues = client
        .fetch_subscribe_message_queues(topic)
        .await
        .expect("queues");
    assert_eq!(queues, vec![mq(topic, 0), mq(topic, 1)]);
    assert_eq!(client.max_offset(&queue).await.expect("max"), 10);
    assert_eq!(client.min_offset(&queue).await.expect("min"), 0);
    assert!(client.earliest_msg_store_time(&queue).await.expect("time") > 0);
    assert_eq!(
        client
            .query_consumer_offset(group, &queue)
            .await
            .expect("query"),
        None,
        "a new group has no committed offset"
    );

    // Only the even tags, re-filtered exactly on the client.
    let request = PullRequest::new(group, queue.clone(), 0)
        .subscription(Subscription::new("even", 0))
        .max_messages(32);
    let pulled = client.pull(&request).await.expect("pull");
    assert_eq!(pulled.status, PullStatus::Found);
    assert_eq!(pulled.next_begin_offset, 10);
    let bodies: Vec<String> = pulled.messages.iter().map(text).collect();
    assert_eq!(bodies, ["m0", "m2", "m4", "m6", "m8"]);
    assert!(pulled.messages.iter().all(|m| &*m.broker_name == BROKER));

    client
        .update_consumer_offset(group, &queue, pulled.next_begin_offset)
        .await
        .expect("commit");
    assert_eq!(
        client
            .query_consumer_offset(group, &queue)
            .await
            .expect("query"),
        Some(10)
    );
    assert_eq!(
        cluster
            .committed_offset(BROKER, group, topic, 0)
            .await
            .expect("broker answers"),
        Some(10),
        "the broker holds the committed offset"
    );

    // Nothing new: a pull at the end answers at once without long polling.
    let at_end = client
        .pull(&PullRequest::new(group, queue.clone(), 10))
        .await
        .expect("pull at the end");
    assert_eq!(at_end.status, PullStatus::NoNewMsg);
    // An offset beyond the end is reported, not silently clamped.
    let beyond = client
        .pull(&PullRequest::new(group, queue.clone(), 50))
        .await
        .expect("pull beyond the end");
    assert_eq!(beyond.status, PullStatus::OffsetIllegal);

    let viewed = client
        .view_message(&sent[3].offset_msg_id)
        .await
        .expect("view message by id");
    assert_eq!(text(&viewed), "m3");
    let searched = client
        .search_offset(&queue, viewed.store_timestamp)
        .await
        .expect("search");
    assert!(searched <= 3, "search by store time finds at or before m3");

    let locked = client
        .lock_batch(group, &queues, Duration::from_secs(3))
        .await
        .expect("lock");
    assert_eq!(locked.len(), 2, "both queues locked: {locked:?}");
    client
        .unlock_batch(group, &queues, Duration::from_secs(3))
        .await
        .expect("unlock");

    client.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn membership_commits_and_long_polls_through_the_base_client() {
    use rocketmq_actor::protocol::body::{
        ConsumeFromWhere as WireFrom, ConsumeType, ConsumerData, HeartbeatData, MessageModel,
    };
    let topic = "BaseMembership";
    let group = "base_membership";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    let client = Client::start(ClientConfig::new(&namesrv)).expect("client starts");
    let queue = mq(topic, 0);
    let addr = cluster.broker_addr(BROKER).expect("broker address");
    let heartbeat = HeartbeatData {
        client_id: client.client_id().to_owned(),
        producer_data_set: Vec::new(),
        consumer_data_set: vec![ConsumerData {
            group_name: group.into(),
            consume_type: ConsumeType::ConsumeActively,
            message_model: MessageModel::Clustering,
            consume_from_where: WireFrom::ConsumeFromFirstOffset,
            subscription_data_set: vec![Subscription::new("*", 0).to_wire(topic)],
            unit_mode: false,
        }],
        heartbeat_fingerprint: 0,
        without_sub: false,
    };
    client
        .heartbeat(&addr, &heartbeat)
        .await
        .expect("heartbeat");
    let (asked, members) = client.consumer_ids(group, topic).await.expect("members");
    assert_eq!(asked, addr);
    assert_eq!(members, vec![client.client_id().to_owned()]);

    // A pull piggybacks the group's offset with the commit flag.
    send_numbered(&producer_on(&client), topic, 0..3).await;
    let pulled = client
        .pull(&PullRequest::new(group, queue.clone(), 0).commit_offset(2))
        .await
        .expect("pull");
    assert_eq!(pulled.messages.len(), 3);
    assert_eq!(
        cluster
            .committed_offset(BROKER, group, topic, 0)
            .await
            .expect("broker"),
        Some(2),
        "the piggybacked offset was committed"
    );
    // One-way commits reach the broker too.
    client
        .update_consumer_offset_oneway(group, &queue, 3)
        .await
        .expect("sent");
    common::await_committed(&cluster, group, topic, 3).await;

    // A long poll at the end is held until a message arrives.
    let held = {
        let client = client.clone();
        let queue = queue.clone();
        actix_rt::spawn(async move {
            client
                .pull(&PullRequest::new(group, queue, 3).long_poll(Duration::from_secs(15)))
                .await
        })
    };
    common::eventually("the broker holds the pull", || async {
        (cluster.held_pulls(BROKER).await.ok()? > 0).then_some(())
    })
    .await;
    send_numbered(&producer_on(&client), topic, 3..4).await;
    let woken = held.await.expect("task").expect("long poll answered");
    assert_eq!(woken.status, PullStatus::Found);
    assert_eq!(woken.messages.iter().map(text).collect::<Vec<_>>(), ["m3"]);

    client
        .unregister_client(&addr, None, Some(group))
        .await
        .expect("unregister");
    assert!(
        cluster
            .consumer_ids(BROKER, group)
            .await
            .expect("members")
            .is_empty(),
        "the broker forgot the member"
    );
    client.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_broker_refusal_names_the_request_and_the_code() {
    let (cluster, namesrv) = cluster_with_topic("Refused", 1).await;
    let client = Client::start(ClientConfig::new(&namesrv)).expect("client starts");
    let missing = rocketmq_actor::MessageQueue::new("NoSuchTopic", BROKER, 0);
    match client.max_offset(&missing).await {
        Err(Error::TopicRouteNotFound(topic)) => assert!(topic.contains("NoSuchTopic")),
        other => panic!("expected a missing route, got {other:?}"),
    }
    let broker: std::net::SocketAddr = cluster
        .broker_addr(BROKER)
        .expect("broker address")
        .parse()
        .expect("socket address");
    let nowhere = rocketmq_actor::message::offset_msg_id(broker, 1 << 40);
    match client.view_message(&nowhere).await {
        Err(e) => assert!(
            !e.to_string().is_empty(),
            "an unknown message id is an error"
        ),
        Ok(message) => panic!("no message is stored there, got {message:?}"),
    }
    match client.view_message("not-an-id").await {
        Err(Error::Protocol(_)) => {}
        other => panic!("a malformed id is a protocol error, got {other:?}"),
    }
    client.shutdown().await;
    cluster.shutdown().await;
}

/// Two clients configured with the same IP in one process share the pid too: their default
/// ids must still differ, so the group splits the queues instead of both taking all of them.
#[actix_rt::test]
async fn clients_with_the_same_ip_and_pid_split_the_queues() {
    let topic = "SameIp";
    let group = "same_ip_group";
    let (cluster, namesrv) = cluster_with_topic(topic, 8).await;
    let same_ip = || {
        let mut config = ClientConfig::new(&namesrv);
        config.client_ip = "10.9.8.7".into();
        Client::start(config).expect("client starts")
    };
    let (first_client, second_client) = (same_ip(), same_ip());
    assert_ne!(first_client.client_id(), second_client.client_id());
    assert!(first_client.client_id().starts_with("10.9.8.7@"));
    let start = |client: Client| {
        PushConsumer::builder()
            .client(client)
            .group(group)
            .subscribe(topic, "*")
            .listener_fn(|_messages, ctx| async move { (ConsumeStatus::Success, ctx) })
            .start()
    };
    let first = start(first_client).await.expect("first consumer starts");
    let second = start(second_client).await.expect("second consumer starts");
    let deadline = tokio::time::Instant::now() + common::PATIENCE;
    loop {
        first.rebalance().await;
        second.rebalance().await;
        let a: BTreeSet<_> = first
            .owned_queues()
            .await
            .into_iter()
            .filter(|q| q.topic == topic)
            .collect();
        let b: BTreeSet<_> = second
            .owned_queues()
            .await
            .into_iter()
            .filter(|q| q.topic == topic)
            .collect();
        if a.len() == 4 && b.len() == 4 {
            assert!(a.is_disjoint(&b), "each queue has one owner: {a:?} / {b:?}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the queues were not split: {a:?} / {b:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.shutdown().await;
    second.shutdown().await;
    cluster.shutdown().await;
}

/// Prints the default client id of this process (run by the test below in a pid namespace).
#[test]
#[ignore = "a helper of two_processes_that_are_both_pid_1_get_different_client_ids"]
fn print_default_client_id() {
    let mut config = ClientConfig::new("127.0.0.1:1");
    config.client_ip = "10.9.8.7".into();
    let client = Client::start(config).expect("client starts");
    println!("CLIENT_ID={}", client.client_id());
}

/// Two containers both running the consumer as pid 1 with the same IP: their default client
/// ids must differ. Each run of this test binary is its own process under `unshare --pid`, so
/// both see themselves as pid 1.
#[test]
#[ignore = "needs root for `unshare --pid`: run with --ignored (.ci/run does)"]
fn two_processes_that_are_both_pid_1_get_different_client_ids() {
    let exe = std::env::current_exe().expect("test binary");
    let run = || {
        let output = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--"])
            .arg(&exe)
            .args([
                "--exact",
                "print_default_client_id",
                "--ignored",
                "--nocapture",
            ])
            .output()
            .expect("unshare runs (util-linux, as root)");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("CLIENT_ID=").map(str::to_owned))
            .expect("the child printed its client id")
    };
    let (first, second) = (run(), run());
    assert!(
        first.starts_with("10.9.8.7@1#"),
        "pid 1 in its namespace: {first}"
    );
    assert!(
        second.starts_with("10.9.8.7@1#"),
        "pid 1 in its namespace: {second}"
    );
    assert_ne!(first, second, "same ip, same pid, still different ids");
}

/// A plain multi-threaded tokio program, no actix system anywhere: the cluster, the producer and
/// the consumer start and work, their actors running on the crate's own runtime thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_runs_from_a_multi_threaded_tokio_runtime() {
    let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral())
        .await
        .expect("cluster starts outside actix");
    cluster.create_topic("Tokio", 2).await.expect("topic");
    let client = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client");
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    // Handles move between tokio's worker threads.
    let sent = tokio::spawn({
        let producer = producer.clone();
        async move { send_numbered(&producer, "Tokio", 0..20).await.len() }
    })
    .await
    .expect("send task");
    assert_eq!(sent, 20);
    let (tx, mut rx) = unbounded_channel();
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .group("tokio_group")
        .subscribe("Tokio", "*")
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .listener_fn(move |messages, ctx| {
            for m in &messages {
                let _ = tx.send(text(m));
            }
            async move { (ConsumeStatus::Success, ctx) }
        })
        .start()
        .await
        .expect("consumer starts outside actix");
    let got: BTreeSet<String> = receive(&mut rx, 20).await.into_iter().collect();
    let expected: BTreeSet<String> = (0..20).map(body_of).collect();
    assert_eq!(got, expected);
    let consumer = tokio::spawn(async move {
        consumer.shutdown().await;
    });
    consumer.await.expect("shutdown from another task");
    client.shutdown().await;
    cluster.shutdown().await;
}

/// A synchronous `main` (no async runtime at all) can start and stop a cluster and a consumer by
/// blocking on the futures.
#[test]
fn starting_works_from_a_synchronous_main() {
    let cluster = futures::executor::block_on(EmbeddedCluster::start(EmbeddedConfig::ephemeral()))
        .expect("cluster starts from a synchronous main");
    futures::executor::block_on(cluster.create_topic("Sync", 1)).expect("topic");
    let consumer = futures::executor::block_on(
        PushConsumer::builder()
            .namesrv_addr(cluster.namesrv_addr())
            .group("sync_group")
            .subscribe("Sync", "*")
            .listener_fn(|_messages, ctx| async move { (ConsumeStatus::Success, ctx) })
            .start(),
    )
    .expect("consumer starts from a synchronous main");
    // Polled in a bounded loop: there is no event to await from outside a runtime.
    let mut owned = Vec::new();
    for _ in 0..1500 {
        owned = futures::executor::block_on(consumer.owned_queues());
        owned.retain(|q| q.topic == "Sync");
        if !owned.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(owned, vec![mq("Sync", 0)], "the consumer took the queue");
    futures::executor::block_on(consumer.shutdown());
    futures::executor::block_on(cluster.shutdown());
}

#[test]
fn handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Client>();
    assert_send_sync::<Producer>();
    assert_send_sync::<PushConsumer>();
    assert_send_sync::<EmbeddedCluster>();
    assert_send_sync::<Error>();
}

/// A second consumer of a group on the same client is refused, and leaves nothing running: the
/// broker still lists one member, which keeps consuming.
#[actix_rt::test]
async fn a_second_consumer_of_a_group_on_one_client_is_refused_cleanly() {
    let topic = "DuplicateGroup";
    let group = "duplicate_group";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    let client = Client::start(ClientConfig::new(&namesrv)).expect("client starts");
    let (tx, mut rx) = unbounded_channel();
    let consumer = |tx: tokio::sync::mpsc::UnboundedSender<String>| {
        PushConsumer::builder()
            .client(client.clone())
            .group(group)
            .subscribe(topic, "*")
            .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
            .listener_fn(move |messages, ctx| {
                for m in &messages {
                    let _ = tx.send(text(m));
                }
                async move { (ConsumeStatus::Success, ctx) }
            })
            .start()
    };
    let first = consumer(tx.clone()).await.expect("the first starts");
    match consumer(tx).await {
        Err(Error::Config { option, .. }) => assert_eq!(option, "consumer_group"),
        Err(other) => panic!("refused with the wrong error: {other}"),
        Ok(_) => panic!("a second consumer of one group on one client was accepted"),
    }
    assert_eq!(
        cluster.consumer_ids(BROKER, group).await.expect("members"),
        vec![client.client_id().to_owned()]
    );
    send_numbered(&producer_on(&client), topic, 0..20).await;
    let got: BTreeSet<String> = receive(&mut rx, 20).await.into_iter().collect();
    assert_eq!(got, (0..20).map(body_of).collect());
    first.shutdown().await;
    client.shutdown().await;
    cluster.shutdown().await;
}

/// Runs `run` and tells whether anything panicked on this thread meanwhile, caught or not.
/// The runtime's teardown catches a panic of an actor it drops, so a panic hook is what sees
/// it (only this thread's panics count: other tests run beside this one).
fn panics_on_this_thread<T>(run: impl FnOnce() -> T) -> (T, bool) {
    thread_local! {
        static PANICKED_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    PANICKED_HERE.with(|flag| flag.set(false));
    let previous = std::sync::Arc::new(std::panic::take_hook());
    let chained = previous.clone();
    std::panic::set_hook(Box::new(move |info| {
        PANICKED_HERE.with(|flag| flag.set(true));
        chained(info);
    }));
    let value = run();
    drop(std::panic::take_hook());
    std::panic::set_hook(Box::new(move |info| previous(info)));
    (value, PANICKED_HERE.with(|flag| flag.get()))
}

/// A client started inside `System::block_on` whose actor never got to run before the system
/// went away shuts down quietly: nothing arms a timer once the runtime is gone.
#[test]
fn a_client_left_before_it_ran_shuts_down_without_a_panic() {
    let (started, panicked) = panics_on_this_thread(|| {
        let system = actix::System::new();
        let started = system.block_on(async {
            Client::start(ClientConfig::new("127.0.0.1:9"))
                .map(|client| client.client_id().to_owned())
        });
        drop(system);
        started
    });
    assert!(started.is_ok(), "the client starts: {started:?}");
    assert!(!panicked, "dropping the system panicked");
}

/// Consumers of every kind, started inside `System::block_on` and left running when the
/// system goes away, go with it quietly: none of their actors (members, heartbeats, offset
/// stores, rebalancers, queues, lite-pull queues) panics in the runtime's teardown.
#[test]
fn consumers_left_running_when_their_system_goes_away_end_without_a_panic() {
    for wait_for_a_message in [true, false] {
        consumers_left_running_end_quietly(wait_for_a_message);
    }
}

/// The system goes away with consumers of every kind running, after the push consumer's
/// first message or at once (its queue actors perhaps not started yet).
fn consumers_left_running_end_quietly(wait_for_a_message: bool) {
    let (started, panicked) = panics_on_this_thread(|| {
        let system = actix::System::new();
        let started = system.block_on(async {
            let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral())
                .await
                .map_err(|e| e.to_string())?;
            let namesrv = cluster.namesrv_addr();
            let client = Client::start(ClientConfig::new(&namesrv)).map_err(|e| e.to_string())?;
            let producer = producer_on(&client);
            send_numbered(&producer, "LeftTopic", 0..4).await;
            let (seen, mut received) = unbounded_channel();
            let push = PushConsumer::builder()
                .namesrv_addr(&namesrv)
                .group("left_push")
                .subscribe("LeftTopic", "*")
                .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
                .listener_fn(move |_messages, ctx| {
                    let _ = seen.send(());
                    async move { (ConsumeStatus::Success, ctx) }
                })
                .start()
                .await
                .map_err(|e| e.to_string())?;
            let pull = rocketmq_actor::pull::PullConsumer::builder()
                .namesrv_addr(&namesrv)
                .group("left_pull")
                .start()
                .await
                .map_err(|e| e.to_string())?;
            let lite = rocketmq_actor::pull::LitePullConsumer::builder()
                .namesrv_addr(&namesrv)
                .group("left_lite")
                .subscribe("LeftTopic", "*")
                .start()
                .await
                .map_err(|e| e.to_string())?;
            if wait_for_a_message {
                // The push consumer's queue actors are running: its first message arrived.
                received.recv().await.ok_or("the listener went away")?;
            }
            // Left running: the system's end is their end.
            std::mem::forget((push, pull, lite, producer, client, cluster));
            Ok::<_, String>(())
        });
        drop(system);
        started
    });
    assert!(started.is_ok(), "the consumers start: {started:?}");
    assert!(
        !panicked,
        "dropping the system panicked (waited for a message: {wait_for_a_message})"
    );
}

/// A name server that refuses connections: the error says so in its text, and keeps the
/// refusal itself as its source chain (`NameServerUnavailable` → `Connect` → `io::Error`), so
/// a program can match the `io::ErrorKind` rather than parse a message.
#[actix_rt::test]
async fn transport_errors_keep_their_causes_as_sources() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let closed = listener.local_addr().expect("its address").to_string();
    drop(listener);
    let client = Client::start(ClientConfig::new(&closed)).expect("client");
    let error = client
        .route("AnyTopic")
        .await
        .expect_err("nobody listens there");
    assert!(error.to_string().contains(&closed), "{error}");
    let mut chain = Vec::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(e) = cause {
        chain.push(e);
        cause = e.source();
    }
    let refused = chain
        .iter()
        .find_map(|e| e.downcast_ref::<std::io::Error>())
        .unwrap_or_else(|| panic!("no io::Error in the chain of {error:?}"));
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    client.shutdown().await;
}
