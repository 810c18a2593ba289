//! # 09 — the lite pull consumer as a `Stream`, and seeking
//!
//! What it teaches: Java's `DefaultLitePullConsumer`, the simplest way to read a topic when
//! *you* want to decide when to take the next message. Its queues (here the group's share of a
//! subscribed topic; `assign(queues)` picks them by hand) are pulled in the background into a
//! bounded buffer; `consumer.stream()` hands the messages out one at a time as a
//! `futures::Stream` (`poll()` returns a batch instead). `seek(queue, offset)` moves a queue:
//! what was buffered for it is dropped and the stream goes on from `offset`.
//!
//! The guarantee: at least once to the message. A commit (automatic every
//! `auto_commit_interval`, 5 s, or `commit_sync()` as here) covers only the messages the stream
//! has yielded, and a stream dropped in the middle of a batch reads its queue again from the
//! first message it did not yield. After a seek backwards the stream yields those messages
//! again — replay is deliberate here.
//!
//! The ten messages all carry one key (`send_with_key`), so they sit in one queue at offsets
//! 0..10 and the output is the same at every run.
//!
//! Run it:
//!
//! ```text
//! cargo run --example 09_lite_pull_stream
//! cargo run --example 09_lite_pull_stream -- --namesrv 127.0.0.1:9876
//! ```
//!
//! Expected output:
//!
//! ```text
//! sent 10 messages to queue broker-a/5
//! streamed: event 0 @0, event 1 @1, event 2 @2, event 3 @3, event 4 @4, event 5 @5, event 6 @6, event 7 @7, event 8 @8, event 9 @9
//! seek(broker-a/5, 6)
//! streamed again: event 6 @6, event 7 @7, event 8 @8, event 9 @9
//! committed offset of broker-a/5: 10
//! ```
//!
//! It exits 1 if the stream did not yield exactly those messages within 10 s.

use std::process::ExitCode;
use std::time::Duration;

use futures::StreamExt;
use rocketmq_actor::consumer::ConsumeFromWhere;
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::pull::{LitePullConsumer, MessageStream};
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig};

type Error = Box<dyn std::error::Error>;

const COUNT: i64 = 10;
const SEEK_TO: i64 = 6;
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
    let topic = format!("LiteStream{run}");
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let mut queue = None;
    for i in 0..COUNT {
        let sent = producer
            .send_with_key(Message::new(&topic, format!("event {i}")), "one-key")
            .await?;
        queue = Some(sent.queue);
    }
    let queue = queue.ok_or("nothing sent")?;
    let name = format!("{}/{}", queue.broker_name, queue.queue_id);
    println!("sent {COUNT} messages to queue {name}");

    let consumer = LitePullConsumer::builder()
        .client(client.clone())
        .group(format!("lite_stream_{run}"))
        .subscribe(&topic, "*")
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .start()
        .await?;
    let mut stream = consumer.stream();

    let first = take(&mut stream, COUNT as usize).await;
    println!("streamed: {}", describe(&first));

    // Back to offset SEEK_TO of that queue: the stream replays from there.
    consumer.seek(&queue, SEEK_TO).await?;
    println!("seek({name}, {SEEK_TO})");
    let again = take(&mut stream, (COUNT - SEEK_TO) as usize).await;
    println!("streamed again: {}", describe(&again));

    // Commit what the stream yielded and read it back from the broker.
    consumer.commit_sync().await?;
    let committed = consumer.committed(&queue).await?;
    println!(
        "committed offset of {name}: {}",
        committed.map_or("none".to_owned(), |o| o.to_string())
    );

    drop(stream);
    consumer.shutdown().await;
    client.shutdown().await;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }

    let offsets = |got: &[(String, i64)]| got.iter().map(|(_, o)| *o).collect::<Vec<_>>();
    if offsets(&first) != (0..COUNT).collect::<Vec<_>>() {
        return Err(format!("expected offsets 0..{COUNT} first, got {first:?}").into());
    }
    if offsets(&again) != (SEEK_TO..COUNT).collect::<Vec<_>>() {
        return Err(
            format!("expected offsets {SEEK_TO}..{COUNT} after the seek, got {again:?}").into(),
        );
    }
    if committed != Some(COUNT) {
        return Err(format!("expected the committed offset {COUNT}, got {committed:?}").into());
    }
    Ok(())
}

/// The next `count` messages of the stream as (body, queue offset), each awaited up to
/// PATIENCE.
async fn take(stream: &mut MessageStream, count: usize) -> Vec<(String, i64)> {
    let mut got = Vec::new();
    while got.len() < count {
        match tokio::time::timeout(PATIENCE, stream.next()).await {
            Ok(Some(m)) => got.push((
                String::from_utf8_lossy(m.body()).into_owned(),
                m.queue_offset,
            )),
            _ => break,
        }
    }
    got
}

fn describe(got: &[(String, i64)]) -> String {
    let parts: Vec<String> = got.iter().map(|(b, o)| format!("{b} @{o}")).collect();
    parts.join(", ")
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
