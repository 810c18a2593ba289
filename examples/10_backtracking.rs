//! # 10 — backtracking: consume again from a point in time
//!
//! What it teaches: the two ways to go back in a topic by time.
//!
//! 1. An existing group: `Client::reset_offset_by_timestamp(group, topic, ms, force)` moves the
//!    group's offsets on every broker to the first message stored at or after `ms` (Java's
//!    `mqadmin resetOffsetByTime`; the CLI's `rocketmq-actor reset-offset`). Here the group is
//!    offline while it happens (its consumer was shut down), so its stored offsets are
//!    rewritten at once and the next consumer of the group starts from there. A live group is
//!    told too: the embedded broker (and Java 4.x brokers) push the reset to the running
//!    consumers, which apply it at once; rocketmq-rust resets on the broker and consumers
//!    notice at their next pull (see README, "Backtracking").
//! 2. A new group: `consume_from_where = Timestamp` with `consume_timestamp`
//!    (`yyyyMMddHHmmss`, UTC unless an offset follows) says where a group with no stored
//!    offsets begins.
//!
//! The guarantee: a reset goes back to the first message *stored* at or after the time (the
//! broker's store timestamp, at second resolution for `consume_timestamp`), per queue; the
//! messages from there on are delivered again, at least once as always.
//!
//! The run: five "old" messages, a wait for the next whole second T (the point in time to go
//! back to), five "new" messages. Group A consumes all ten and stops; A is reset to T and
//! consumes the five new ones again; group B, new, starts at T and gets the same five.
//!
//! Run it:
//!
//! ```text
//! cargo run --example 10_backtracking
//! cargo run --example 10_backtracking -- --namesrv 127.0.0.1:9876
//! ```
//!
//! Expected output (times and queues vary):
//!
//! ```text
//! sent old 0..4, then at T = 20261201120000 (UTC) new 0..4
//! group A consumed 10 messages, then stopped
//! reset group A to T: broker-a/0 -> 1, broker-a/1 -> 1, broker-a/2 -> 1, …
//! group A again: new 0, new 1, new 2, new 3, new 4
//! group B from consume_timestamp T: new 0, new 1, new 2, new 3, new 4
//! ```
//!
//! It exits 1 if a group gets anything but the five new messages after the reset / from T.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rocketmq_actor::consumer::config::format_consume_timestamp_utc;
use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::{
    Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer, PushConsumerBuilder,
};
use tokio::sync::mpsc::UnboundedReceiver;

type Error = Box<dyn std::error::Error>;

const COUNT: usize = 5;
const PATIENCE: Duration = Duration::from_secs(10);

#[actix_rt::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Error> {
    let (namesrv, cluster) = match namesrv_arg()? {
        Some(addr) => (addr, None),
        None => {
            let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral()).await?;
            (cluster.namesrv_addr(), Some(cluster))
        }
    };
    let run = rocketmq_actor::util::now_ms();
    let topic = format!("Backtrack{run}");
    let group_a = format!("backtrack_a_{run}");
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());

    for i in 0..COUNT {
        producer
            .send(Message::new(&topic, format!("old {i}")))
            .await?;
    }
    // T: the next whole second (`consume_timestamp` has second resolution). Every old message
    // was stored before it, every new one after.
    let t = (rocketmq_actor::util::now_ms() / 1000 + 1) * 1000;
    let wait = t - rocketmq_actor::util::now_ms();
    tokio::time::sleep(Duration::from_millis(wait.max(0) as u64 + 1)).await;
    for i in 0..COUNT {
        producer
            .send(Message::new(&topic, format!("new {i}")))
            .await?;
    }
    let t_text = format_consume_timestamp_utc(t);
    println!(
        "sent old 0..{}, then at T = {t_text} (UTC) new 0..{}",
        COUNT - 1,
        COUNT - 1
    );
    let new: BTreeSet<String> = (0..COUNT).map(|i| format!("new {i}")).collect();

    // Group A reads everything, then stops (its offsets are committed at shutdown).
    let (a, mut rx) = start(&client, &group_a, &topic, |b| {
        b.configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
    })
    .await?;
    let all = receive(&mut rx, 2 * COUNT).await;
    a.shutdown().await;
    println!("group A consumed {} messages, then stopped", all.len());

    // 1. Reset the (offline) group to T, then start it again.
    let table = client
        .reset_offset_by_timestamp(&group_a, &topic, t, true)
        .await?;
    let moved: Vec<String> = table
        .iter()
        .map(|(q, offset)| format!("{}/{} -> {offset}", q.broker_name, q.queue_id))
        .collect();
    println!("reset group A to T: {}", moved.join(", "));
    let (a, mut rx) = start(&client, &group_a, &topic, |b| b).await?;
    let again = receive(&mut rx, COUNT).await;
    a.shutdown().await;
    println!("group A again: {}", list(&again));

    // 2. A new group that begins at T.
    let (b, mut rx) = start(&client, &format!("backtrack_b_{run}"), &topic, |b| {
        b.configure(|c| {
            c.consume_from_where = ConsumeFromWhere::Timestamp;
            c.consume_timestamp = Some(t_text.clone());
        })
    })
    .await?;
    let from_t = receive(&mut rx, COUNT).await;
    b.shutdown().await;
    println!("group B from consume_timestamp T: {}", list(&from_t));

    client.shutdown().await;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    if all.len() != 2 * COUNT {
        return Err(format!("group A got {} of {} messages", all.len(), 2 * COUNT).into());
    }
    for (who, got) in [("group A after the reset", &again), ("group B", &from_t)] {
        if *got != new {
            return Err(format!("{who} got {got:?}, expected {new:?}").into());
        }
    }
    Ok(())
}

/// Starts a consumer of `group` (set up further by `setup`) that forwards every body.
async fn start(
    client: &Client,
    group: &str,
    topic: &str,
    setup: impl FnOnce(PushConsumerBuilder) -> PushConsumerBuilder,
) -> Result<(PushConsumer, UnboundedReceiver<String>), Error> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let builder = PushConsumer::builder()
        .client(client.clone())
        .group(group)
        .subscribe(topic, "*")
        .listener_fn(move |messages, ctx| {
            let tx = tx.clone();
            async move {
                for m in &messages {
                    let _ = tx.send(String::from_utf8_lossy(m.body()).into_owned());
                }
                (ConsumeStatus::Success, ctx)
            }
        });
    Ok((setup(builder).start().await?, rx))
}

/// Up to `count` bodies (fewer if they stop coming for PATIENCE).
async fn receive(rx: &mut UnboundedReceiver<String>, count: usize) -> BTreeSet<String> {
    let mut got = BTreeSet::new();
    let deadline = Instant::now() + PATIENCE;
    let mut received = 0;
    while received < count {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(body)) => {
                got.insert(body);
                received += 1;
            }
            _ => break,
        }
    }
    got
}

fn list(bodies: &BTreeSet<String>) -> String {
    bodies
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
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
