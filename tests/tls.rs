//! TLS on the embedded broker, as a user meets it: producing, push consumption (concurrent and
//! orderly under broker locks), retries through send-back, committed offsets and the pull
//! consumer, all through an *enforcing* cluster (so nothing can have gone in plaintext); a
//! permissive cluster serving plaintext and TLS clients at once; the errors of a plaintext
//! client at a TLS-only port, of an untrusted certificate, of a wrong name and of a missing
//! client certificate; TLS for name servers or brokers only; and the CLI's `broker --tls` with
//! `produce`/`consume --tls-ca`.

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{
    await_committed, body_of, from_first_offset, receive, send_numbered, text, Shared, BROKER,
    PATIENCE,
};
use rocketmq_actor::consumer::{ConsumeStatus, Messages, OrderlyContext, OrderlyStatus};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::pull::{PullConsumer, PullStatus};
use rocketmq_actor::tls::{PemIdentity, ServerTlsConfig, TestCa, TlsConfig, TlsMode, TlsPeers};
use rocketmq_actor::{
    Client, ClientConfig, Error, Message, MessageQueue, Producer, ProducerConfig,
};
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;
use tokio::sync::mpsc::unbounded_channel;

const BIN: &str = env!("CARGO_BIN_EXE_rocketmq-actor");

/// A cluster serving TLS in `mode` with a generated certificate, retries a thousand times
/// faster than real.
async fn tls_cluster(mode: TlsMode, brokers: usize) -> EmbeddedCluster {
    common::start_cluster(EmbeddedConfig {
        tls: Some(ServerTlsConfig::generated(mode)),
        ..common::fast_retry_config(brokers)
    })
    .await
}

/// A client configuration trusting the cluster's generated CA.
fn trusting(cluster: &EmbeddedCluster) -> ClientConfig {
    let ca = cluster
        .tls_ca_pem()
        .expect("a generated certificate has a CA");
    with_tls(cluster, TlsConfig::ca_pem(ca))
}

fn with_tls(cluster: &EmbeddedCluster, tls: TlsConfig) -> ClientConfig {
    let mut config = ClientConfig::new(cluster.namesrv_addr());
    config.tls = Some(tls);
    config
}

fn start(config: ClientConfig) -> Client {
    Client::start(config).expect("client starts")
}

/// A producer on a client of its own that trusts the cluster's CA, and that client.
fn tls_producer(cluster: &EmbeddedCluster) -> (Client, Producer) {
    let client = start(trusting(cluster));
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    (client, producer)
}

#[actix_rt::test]
async fn produce_push_consume_retry_and_commit_over_tls_only() {
    let cluster = tls_cluster(TlsMode::Enforcing, 1).await;
    let topic = "TlsPush";
    cluster.create_topic(topic, 1).await.expect("topic");
    let (producer_client, producer) = tls_producer(&cluster);
    send_numbered(&producer, topic, 0..20).await;

    // m3 fails once: it comes back through CONSUMER_SEND_MSG_BACK and the retry topic.
    let failed_once = Shared::new(false);
    let (tx, mut rx) = unbounded_channel();
    let consumer = from_first_offset(&cluster.namesrv_addr(), "tls_push", topic, "*")
        .client_config(trusting(&cluster))
        .configure(|c| c.persist_consumer_offset_interval = Duration::from_millis(100))
        .listener_fn(move |messages: Messages, ctx| {
            let mut status = ConsumeStatus::Success;
            for m in &messages {
                if text(m) == "m3" && !failed_once.get() {
                    failed_once.set(true);
                    status = ConsumeStatus::ReconsumeLater;
                } else {
                    let _ = tx.send((text(m), m.reconsume_times));
                }
            }
            std::future::ready((status, ctx))
        })
        .start()
        .await
        .expect("consumer starts over TLS");
    let got = receive(&mut rx, 20).await;
    let bodies: BTreeSet<String> = got.iter().map(|(body, _)| body.clone()).collect();
    let expected: BTreeSet<String> = (0..20).map(body_of).collect();
    assert_eq!(bodies, expected, "every message once, m3 after its retry");
    assert!(
        got.contains(&("m3".to_owned(), 1)),
        "m3 was redelivered as its first retry: {got:?}"
    );
    await_committed(&cluster, "tls_push", topic, 20).await;
    consumer.shutdown().await;
    producer_client.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn orderly_consumption_locks_its_queues_over_tls() {
    let cluster = tls_cluster(TlsMode::Enforcing, 1).await;
    let topic = "TlsOrderly";
    cluster.create_topic(topic, 2).await.expect("topic");
    let (producer_client, producer) = tls_producer(&cluster);
    for i in 0..30 {
        let queue = MessageQueue::new(topic, BROKER, (i % 2) as i32);
        producer
            .send_to_queue(Message::new(topic, body_of(i)), &queue)
            .await
            .expect("sent");
    }
    let (tx, mut rx) = unbounded_channel();
    let consumer = from_first_offset(&cluster.namesrv_addr(), "tls_orderly", topic, "*")
        .client_config(trusting(&cluster))
        .orderly_listener_fn(move |messages: Messages, ctx: OrderlyContext| {
            for m in &messages {
                let _ = tx.send((m.queue_id, text(m)));
            }
            std::future::ready((OrderlyStatus::Success, ctx))
        })
        .start()
        .await
        .expect("orderly consumer starts over TLS");
    let got = receive(&mut rx, 30).await;
    for queue in 0..2 {
        let order: Vec<String> = got
            .iter()
            .filter(|(q, _)| *q == queue)
            .map(|(_, body)| body.clone())
            .collect();
        let sent: Vec<String> = (0..30)
            .filter(|i| i % 2 == queue as usize)
            .map(body_of)
            .collect();
        assert_eq!(order, sent, "queue {queue} in the order sent");
    }
    // The consumer holds the broker locks: another TLS client of the group gets none.
    let intruder = start(trusting(&cluster));
    let queues = [
        MessageQueue::new(topic, BROKER, 0),
        MessageQueue::new(topic, BROKER, 1),
    ];
    let granted = intruder
        .lock_batch("tls_orderly", &queues, PATIENCE)
        .await
        .expect("the broker answers the lock request over TLS");
    assert!(granted.is_empty(), "the consumer's locks are exclusive");
    consumer.shutdown().await;
    let granted = intruder
        .lock_batch("tls_orderly", &queues, PATIENCE)
        .await
        .expect("lock");
    assert_eq!(granted.len(), 2, "released at shutdown");
    intruder.shutdown().await;
    producer_client.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn the_pull_consumer_pulls_and_commits_over_tls() {
    let cluster = tls_cluster(TlsMode::Enforcing, 1).await;
    let topic = "TlsPull";
    cluster.create_topic(topic, 1).await.expect("topic");
    let (producer_client, producer) = tls_producer(&cluster);
    send_numbered(&producer, topic, 0..5).await;
    let consumer = PullConsumer::builder()
        .namesrv_addr(cluster.namesrv_addr())
        .client_config(trusting(&cluster))
        .group("tls_pull")
        .start()
        .await
        .expect("pull consumer starts over TLS");
    let queue = MessageQueue::new(topic, BROKER, 0);
    let pulled = consumer.pull(&queue, "*", 0, 32).await.expect("pull");
    assert_eq!(pulled.status, PullStatus::Found);
    let bodies: Vec<String> = pulled.messages.iter().map(text).collect();
    assert_eq!(bodies, (0..5).map(body_of).collect::<Vec<_>>());
    consumer
        .update_consume_offset(&queue, pulled.next_begin_offset)
        .await;
    consumer.persist_consume_offsets().await.expect("persisted");
    assert_eq!(
        cluster
            .committed_offset(BROKER, "tls_pull", topic, 0)
            .await
            .expect("broker answers"),
        Some(5)
    );
    consumer.shutdown().await;
    producer_client.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_permissive_cluster_serves_plaintext_and_tls_clients_at_once() {
    let cluster = tls_cluster(TlsMode::Permissive, 2).await;
    let topic = "TlsMixed";
    cluster.create_topic(topic, 2).await.expect("topic");
    let plain = Producer::new(
        start(ClientConfig::new(cluster.namesrv_addr())),
        ProducerConfig::default(),
    );
    let (_, secure) = tls_producer(&cluster);
    let (plain_sent, secure_sent) = futures::join!(
        send_numbered(&plain, topic, 0..10),
        send_numbered(&secure, topic, 10..20)
    );
    assert_eq!(plain_sent.len() + secure_sent.len(), 20);
    let expected: BTreeSet<String> = (0..20).map(body_of).collect();
    let mut consumers = Vec::new();
    let mut receivers = Vec::new();
    for (group, config) in [
        ("mixed_plain", ClientConfig::new(cluster.namesrv_addr())),
        ("mixed_tls", trusting(&cluster)),
    ] {
        let (tx, rx) = unbounded_channel();
        let consumer = from_first_offset(&cluster.namesrv_addr(), group, topic, "*")
            .client_config(config)
            .listener_fn(common::recording(tx))
            .start()
            .await
            .expect("consumer starts");
        consumers.push(consumer);
        receivers.push((group, rx));
    }
    for (group, rx) in &mut receivers {
        let got: BTreeSet<String> = receive(rx, 20).await.into_iter().map(|(b, _)| b).collect();
        assert_eq!(got, expected, "{group} got every message");
    }
    for consumer in consumers {
        consumer.shutdown().await;
    }
    cluster.shutdown().await;
}

/// The name-server failure of a route look-up, and how long it took.
async fn route_error(config: ClientConfig) -> (String, Duration) {
    let client = start(config);
    let started = Instant::now();
    let result = client.refresh_route("AnyTopic").await;
    let took = started.elapsed();
    client.shutdown().await;
    match result {
        Err(Error::NameServerUnavailable { detail, .. }) => (detail, took),
        other => panic!("expected the name server to be unusable, got {other:?}"),
    }
}

#[actix_rt::test]
async fn an_enforcing_cluster_refuses_a_plaintext_client_saying_so() {
    let cluster = tls_cluster(TlsMode::Enforcing, 1).await;
    let mut config = ClientConfig::new(cluster.namesrv_addr());
    config.request_timeout = Duration::from_secs(2);
    let (detail, took) = route_error(config).await;
    assert!(
        detail.contains("closed the connection before answering anything")
            && detail.contains("requires TLS"),
        "{detail}"
    );
    assert!(
        took < Duration::from_secs(2),
        "refused at once, took {took:?}"
    );
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn an_untrusted_certificate_or_a_wrong_name_is_refused_saying_why() {
    let cluster = tls_cluster(TlsMode::Enforcing, 1).await;
    let other_ca = TestCa::generate().expect("a CA");
    let (detail, _) = route_error(with_tls(&cluster, TlsConfig::ca_pem(other_ca.cert_pem()))).await;
    assert!(
        detail.contains("TLS handshake with") && detail.contains("not signed by a trusted CA"),
        "{detail}"
    );
    let (detail, _) = route_error(with_tls(&cluster, TlsConfig::webpki_roots())).await;
    assert!(detail.contains("not signed by a trusted CA"), "{detail}");
    let ca = cluster.tls_ca_pem().expect("CA").to_owned();
    let wrong_name = TlsConfig::ca_pem(ca.clone()).server_name("broker.example");
    let (detail, _) = route_error(with_tls(&cluster, wrong_name)).await;
    assert!(detail.contains("not valid for the name"), "{detail}");
    // The name the certificate does carry, and Java's accept-anything, both work.
    for tls in [
        TlsConfig::ca_pem(ca).server_name("localhost"),
        TlsConfig::accept_any_certificate(),
    ] {
        let client = start(with_tls(&cluster, tls));
        match client.refresh_route("AnyTopic").await {
            Ok(_) | Err(Error::TopicRouteNotFound(_)) => {}
            Err(e) => panic!("the name server should answer: {e}"),
        }
        client.shutdown().await;
    }
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn tls_can_be_limited_to_the_name_servers_or_the_brokers() {
    // Two brokers: the name server has a port of its own.
    let cluster = tls_cluster(TlsMode::Enforcing, 2).await;
    cluster.create_topic("TlsPeers", 1).await.expect("topic");
    let ca = cluster.tls_ca_pem().expect("CA").to_owned();
    let queue = MessageQueue::new("TlsPeers", BROKER, 0);

    let only_ns = start(with_tls(
        &cluster,
        TlsConfig::ca_pem(ca.clone()).peers(TlsPeers::NameServers),
    ));
    only_ns
        .refresh_route("TlsPeers")
        .await
        .expect("the name server is reached over TLS");
    match only_ns.max_offset(&queue).await {
        Err(Error::HungUp { addr, reason }) => {
            assert_eq!(Some(addr), cluster.broker_addr(BROKER));
            assert!(reason.contains("requires TLS"), "{reason}");
        }
        other => panic!("the broker must refuse the plaintext connection: {other:?}"),
    }
    only_ns.shutdown().await;

    let only_brokers = start(with_tls(
        &cluster,
        TlsConfig::ca_pem(ca).peers(TlsPeers::Brokers),
    ));
    let (detail, _) = {
        let started = Instant::now();
        match only_brokers.refresh_route("TlsPeers").await {
            Err(Error::NameServerUnavailable { detail, .. }) => (detail, started.elapsed()),
            other => panic!("the name server must refuse plaintext: {other:?}"),
        }
    };
    assert!(detail.contains("requires TLS"), "{detail}");
    only_brokers.shutdown().await;
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn mutual_tls_serves_only_clients_with_a_trusted_certificate() {
    let ca = TestCa::generate().expect("a CA");
    let server = ca
        .issue(&["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("server certificate");
    let mut tls = ServerTlsConfig::with_identity(TlsMode::Enforcing, server);
    tls.client_ca_pem = Some(ca.cert_pem().as_bytes().to_vec());
    let cluster = common::start_cluster(EmbeddedConfig {
        tls: Some(tls),
        ..EmbeddedConfig::ephemeral()
    })
    .await;
    assert!(
        cluster.tls_ca_pem().is_none(),
        "a given certificate has no generated CA"
    );
    cluster.create_topic("TlsMutual", 1).await.expect("topic");

    let anonymous = TlsConfig::ca_pem(ca.cert_pem());
    let (detail, _) = route_error(with_tls(&cluster, anonymous.clone())).await;
    assert!(
        detail.contains("CertificateRequired") && detail.contains("client certificate"),
        "the refusal names the missing certificate: {detail}"
    );
    let stranger = TestCa::generate().expect("another CA");
    let untrusted: PemIdentity = stranger.issue(&["client".to_owned()]).expect("cert");
    let (detail, _) = route_error(with_tls(
        &cluster,
        anonymous.clone().client_identity(untrusted),
    ))
    .await;
    assert!(detail.contains("UnknownCA"), "{detail}");

    let identity = ca
        .issue(&["client-1".to_owned()])
        .expect("client certificate");
    let client = start(with_tls(&cluster, anonymous.client_identity(identity)));
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let sent = producer
        .send(Message::new("TlsMutual", "hello"))
        .await
        .expect("a client with a trusted certificate is served");
    assert_eq!(sent.queue_offset, 0);
    client.shutdown().await;
    cluster.shutdown().await;
}

/// Runs the binary to its end (bounded), returning (status, stdout, stderr).
async fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let output = tokio::time::timeout(
        PATIENCE * 2,
        Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the command ends by itself")
    .expect("the command runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[actix_rt::test]
async fn the_cli_broker_serves_tls_to_produce_and_consume_with_its_ca() {
    let dir = std::env::temp_dir().join(format!(
        "rocketmq-actor-tls-cli-{}-{}",
        std::process::id(),
        common::now_ms()
    ));
    let ca_path = dir.join("ca.pem");
    let ca = ca_path.to_str().expect("a UTF-8 path").to_owned();
    let mut broker = Command::new(BIN)
        .args(["broker", "--listen", "127.0.0.1:0", "--tls", "--tls-mode"])
        .args(["enforcing", "--tls-cert-out", &ca])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the broker runs");
    let stdout = broker.stdout.take().expect("piped stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let namesrv = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("the broker prints its address")
        .expect("stdout readable")
        .expect("an address line");
    assert!(
        ca_path.exists(),
        "the CA is written before the address is printed"
    );

    let (status, stdout, stderr) = run(&[
        "produce",
        "--namesrv",
        &namesrv,
        "--topic",
        "CliTls",
        "--count",
        "20",
        "--tls-ca",
        &ca,
    ])
    .await;
    assert_eq!(status, Some(0), "produce over TLS: {stderr}");
    assert!(stdout.contains("\"count\":20"), "{stdout}");
    let (status, stdout, stderr) = run(&[
        "consume",
        "--namesrv",
        &namesrv,
        "--topic",
        "CliTls",
        "--group",
        "cli_tls",
        "--from",
        "first",
        "--count",
        "20",
        "--format",
        "json",
        "--tls-ca",
        &ca,
    ])
    .await;
    assert_eq!(status, Some(0), "consume over TLS: {stderr}");
    let messages = stdout.lines().filter(|l| l.contains("\"body\"")).count();
    assert_eq!(messages, 20, "{stdout}");

    // A plaintext client and a client that trusts the wrong CA end at once, saying why.
    for (extra, why) in [
        (vec![], "requires TLS"),
        (vec!["--tls"], "not signed by a trusted CA"),
    ] {
        let mut args = vec![
            "produce",
            "--namesrv",
            &namesrv,
            "--topic",
            "CliTls",
            "--count",
            "1",
            "--request-timeout",
            "2s",
        ];
        args.extend(extra.iter().copied());
        let started = Instant::now();
        let (status, _, stderr) = run(&args).await;
        assert_eq!(status, Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("cannot use name server {namesrv}")) && stderr.contains(why),
            "{args:?}: {stderr}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{args:?} took {:?}",
            started.elapsed()
        );
    }
    let _ = broker.start_kill();
    let _ = broker.wait().await;
    let _ = std::fs::remove_dir_all(dir);
}
