//! # 01 — quick start: produce, consume with a push consumer, shut down cleanly
//!
//! What it teaches: the three handles every program has — one `Client` per process (routes and
//! connections, shared), a `Producer` on it, and a `PushConsumer` whose listener the runtime
//! calls with each batch — and how a consumer ends: `shutdown().await` lets listener calls in
//! flight finish and persists the consumed offsets on the broker before it returns.
//!
//! The guarantee: a message the broker acknowledged (`send` returned `Ok`) is delivered to the
//! group at least once. A consumer that is shut down cleanly has committed exactly what its
//! listener finished, so the next member of the group starts right after it (no duplicates).
//!
//! Run it:
//!
//! ```text
//! cargo run --example 01_quick_start                            # on an embedded cluster
//! cargo run --example 01_quick_start -- --namesrv 127.0.0.1:9876  # on a real cluster
//! RUST_LOG=rocketmq_actor=debug cargo run --example 01_quick_start  # with the runtime's logs
//! ```
//!
//! Expected output (ids, queues and order vary):
//!
//! ```text
//! sent "hello 0" to broker-a/0 at offset 0 (id C0000202…)
//! …
//! received "hello 0" (tags TagA, queue broker-a/0, offset 0)
//! …
//! received 6 of 6 messages
//! after shutdown the group's committed offsets add up to 6
//! ```
//!
//! It exits 1 if a message does not arrive within 10 s or the offsets were not committed.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer};

type Error = Box<dyn std::error::Error>;

/// How long to wait for each message before calling it lost.
const PATIENCE: Duration = Duration::from_secs(10);

#[actix_rt::main]
async fn main() -> ExitCode {
    // `RUST_LOG` shows the runtime's own logs (nothing is printed by default).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Error> {
    // An embedded cluster (name server + broker on an ephemeral loopback port) unless
    // `--namesrv ADDR` names a real one.
    let (namesrv, cluster) = match namesrv_arg()? {
        Some(addr) => (addr, None),
        None => {
            let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral()).await?;
            (cluster.namesrv_addr(), Some(cluster))
        }
    };
    // Fresh names per run, so a real cluster's earlier runs do not interfere.
    let run = rocketmq_actor::util::now_ms();
    let topic = format!("QuickStart{run}");
    let group = format!("quick_start_{run}");

    // One client per process: the producer and the consumer share its routes and connections.
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());

    // Three messages before the consumer exists (the first send creates the topic)...
    let mut expected = BTreeSet::new();
    for i in 0..3 {
        send(&producer, &topic, format!("hello {i}"), &mut expected).await?;
    }

    // ...a consumer that reads the topic from its first message (a new group's default is the
    // end of each queue: only what is sent from now on)...
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .group(&group)
        .subscribe(&topic, "*")
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .listener_fn(move |messages, ctx| {
            let tx = tx.clone();
            async move {
                for m in &messages {
                    let body = String::from_utf8_lossy(m.body()).into_owned();
                    println!(
                        "received {body:?} (tags {}, queue {}/{}, offset {})",
                        m.tags().unwrap_or("-"),
                        m.broker_name,
                        m.queue_id,
                        m.queue_offset
                    );
                    let _ = tx.send(body);
                }
                // Success commits the batch; ReconsumeLater would retry it (02_at_least_once).
                (ConsumeStatus::Success, ctx)
            }
        })
        .start()
        .await?;

    // ...and three more while it runs: the broker's long poll hands them over at once.
    for i in 3..6 {
        send(&producer, &topic, format!("hello {i}"), &mut expected).await?;
    }

    // Wait for every body, each within PATIENCE of the previous one.
    let mut received = BTreeSet::new();
    while received.len() < expected.len() {
        match tokio::time::timeout(PATIENCE, rx.recv()).await {
            Ok(Some(body)) => {
                received.insert(body);
            }
            _ => break,
        }
    }
    println!("received {} of {} messages", received.len(), expected.len());

    // A clean shutdown: listener calls in flight finish, offsets are persisted, the consumer
    // leaves the group. The broker now holds what the group consumed.
    consumer.shutdown().await;
    let mut committed = 0;
    for queue in client.fetch_subscribe_message_queues(&topic).await? {
        committed += client
            .query_consumer_offset(&group, &queue)
            .await?
            .unwrap_or(0);
    }
    println!("after shutdown the group's committed offsets add up to {committed}");

    client.shutdown().await;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    let missing: Vec<_> = expected.difference(&received).collect();
    if !missing.is_empty() {
        return Err(format!("never received {missing:?}").into());
    }
    if committed != expected.len() as i64 {
        return Err(format!("committed {committed}, expected {}", expected.len()).into());
    }
    Ok(())
}

/// Sends one tagged message and prints where the broker stored it.
async fn send(
    producer: &Producer,
    topic: &str,
    body: String,
    sent: &mut BTreeSet<String>,
) -> Result<(), Error> {
    let result = producer
        .send(Message::new(topic, body.clone()).with_tags("TagA"))
        .await?;
    println!(
        "sent {body:?} to {}/{} at offset {} (id {})",
        result.queue.broker_name, result.queue.queue_id, result.queue_offset, result.msg_id
    );
    sent.insert(body);
    Ok(())
}

/// `--namesrv ADDR` (a real cluster's name server), or nothing (an embedded cluster).
fn namesrv_arg() -> Result<Option<String>, Error> {
    let mut args = std::env::args().skip(1);
    let mut namesrv = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--namesrv" => namesrv = Some(args.next().ok_or("--namesrv needs an address")?),
            other => {
                return Err(format!("unknown argument {other:?}; usage: [--namesrv ADDR]").into())
            }
        }
    }
    Ok(namesrv)
}
