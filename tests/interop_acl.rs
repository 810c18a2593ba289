//! Signed requests against a real rocketmq-rust 1.0.0 cluster with authentication and
//! authorization on (`RMQ_ACL_FILE=scripts/interop_plain_acl.yml scripts/real-cluster.sh start`):
//! our signature is accepted, and unsigned, wrongly signed and unpermitted requests come back as
//! `Error::AccessDenied` — at once, without retries — for the producer and the push consumer.
//!
//! ```text
//! RMQ_BASE_PORT=13876 RMQ_CLUSTER_DIR=/tmp/rmq-acl RMQ_ACL_FILE=scripts/interop_plain_acl.yml \
//!     scripts/real-cluster.sh start
//! ROCKETMQ_NAMESRV=127.0.0.1:13876 cargo test --test interop_acl -- --ignored
//! ```
//!
//! rocketmq-rust reads the plain_acl.yml with ACL 2.0 semantics: a PUB/SUB account has no `Get`
//! action, which GET_MAX_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP need, so consumers here run as
//! the file's admin account; the non-admin account checks a permission refusal.

mod interop_common;

use std::time::Duration;

use interop_common::{create_topic, namesrv, unique};
use rocketmq_actor::acl::Credentials;
use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::{
    Client, ClientConfig, Error, Message, Producer, ProducerConfig, PushConsumer,
};
use tokio::sync::mpsc::unbounded_channel;

fn admin() -> Credentials {
    Credentials::new("interop_admin", "interop-admin-secret")
}

fn client(namesrv: &str, credentials: Option<Credentials>) -> Client {
    let mut config = ClientConfig::new(namesrv);
    config.credentials = credentials;
    Client::start(config).expect("client")
}

fn refused<T>(result: rocketmq_actor::Result<T>, what: &str) -> String {
    match result {
        Err(Error::AccessDenied { code, remark, .. }) => format!("{code}: {remark}"),
        Err(other) => panic!("{what}: expected an access refusal, got {other}"),
        Ok(_) => panic!("{what}: expected an access refusal, got a success"),
    }
}

#[actix_rt::test]
#[ignore = "needs a real cluster in ACL mode (see the module docs)"]
async fn signed_requests_are_accepted_and_the_others_refused() {
    let namesrv = namesrv();
    let topic = unique("InteropAcl");
    let admin_client = client(&namesrv, Some(admin()));
    create_topic(&admin_client, &namesrv, &topic).await;

    // Signed: sent, and consumed by a signed push consumer.
    let producer = Producer::new(admin_client.clone(), ProducerConfig::default());
    for i in 0..10 {
        producer
            .send(Message::new(&topic, format!("acl-{i}")))
            .await
            .expect("a signed send is accepted");
    }
    let (tx, mut rx) = unbounded_channel();
    let consumer = PushConsumer::builder()
        .namesrv_addr(&namesrv)
        .credentials(admin())
        .group(unique("interop_acl_consumer"))
        .subscribe(&topic, "*")
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .listener_fn(move |messages, ctx| {
            for m in &messages {
                let _ = tx.send(String::from_utf8_lossy(m.body()).into_owned());
            }
            std::future::ready((ConsumeStatus::Success, ctx))
        })
        .start()
        .await
        .expect("a signed consumer starts");
    let mut bodies = Vec::new();
    while bodies.len() < 10 {
        let body = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("messages arrive")
            .expect("listener alive");
        bodies.push(body);
    }
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), 10);
    consumer.shutdown().await;

    // Unsigned, wrongly signed, unpermitted: refused, at once.
    let cases = [
        ("unsigned", None),
        (
            "wrong secret",
            Some(Credentials::new("interop_admin", "not-the-secret")),
        ),
        ("unknown key", Some(Credentials::new("nobody", "whatever"))),
        (
            "no permission on the topic",
            Some(Credentials::new("interop_user", "interop-user-secret")),
        ),
    ];
    for (what, credentials) in cases {
        let producer = Producer::new(
            client(&namesrv, credentials.clone()),
            ProducerConfig::default(),
        );
        let started = std::time::Instant::now();
        let remark = refused(producer.send(Message::new(&topic, "refused")).await, what);
        eprintln!("{what}: send refused with {remark}");
        assert!(remark.contains("NO_PERMISSION"), "{what}: {remark}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{what}: retried"
        );

        let consumer = PushConsumer::builder()
            .client(client(&namesrv, credentials))
            .group("interop_acl_group")
            .subscribe(&topic, "*")
            .listener_fn(|_messages, ctx| std::future::ready((ConsumeStatus::Success, ctx)))
            .start()
            .await;
        let remark = refused(consumer, what);
        eprintln!("{what}: consumer refused with {remark}");
    }
    admin_client.shutdown().await;
}
