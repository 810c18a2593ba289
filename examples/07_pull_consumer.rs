//! # 07 — the pull consumer: you drive the loop
//!
//! What it teaches: Java's `DefaultMQPullConsumer` quick-start. No listener and no background
//! pulling: the application fetches a topic's queues (`fetch_subscribe_message_queues`), reads
//! each one from where the group left off (`fetch_consume_offset`, else `min_offset`) with
//! `pull_block_if_not_found`, and records how far it got (`update_consume_offset`).
//!
//! `pull_block_if_not_found` answers at once when messages are there and otherwise lets the
//! broker hold the request until one arrives (up to `broker_suspend_max_time`, 20 s), so a loop
//! never spins on an empty queue. The offsets live in the consumer's offset store, persisted
//! every 5 s and at `shutdown` — here also at the end with `persist_consume_offsets`, which
//! waits for the broker.
//!
//! The guarantee: what you get is what you asked for — the consumer never moves an offset by
//! itself. At least once holds if you store an offset only after handling the messages below
//! it (as here); store it before and a crash in between loses them. Run it twice against the
//! same `--group` and `--topic` and the second run starts from the committed offsets.
//!
//! Run it:
//!
//! ```text
//! cargo run --example 07_pull_consumer                       # on an embedded cluster
//! cargo run --example 07_pull_consumer -- --namesrv 127.0.0.1:9876 [--count 100] [--group G] [--topic T]
//! ```
//!
//! Expected output: it sends `--count` messages to a new topic, reads every queue up to the
//! end it had when reading began (a line per queue), and prints one JSON line:
//!
//! ```text
//! broker-a/0: read offsets 0..13 (13 messages)
//! broker-a/1: read offsets 0..13 (13 messages)
//! …
//! {"count":100,"duplicates":0,"missing":0,"queues":8}
//! ```
//!
//! It exits 1 if a message is missing or came twice.

use std::collections::{BTreeMap, BTreeSet};

use clap::Parser;
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::pull::{PullConsumer, PullStatus};
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig};

#[derive(Parser)]
struct Args {
    /// A real cluster's name server; without it an embedded cluster is started.
    #[arg(long)]
    namesrv: Option<String>,
    /// How many messages to send and read back.
    #[arg(long, default_value_t = 100)]
    count: usize,
    #[arg(long, default_value = "pull_consumer_example")]
    group: String,
    /// The topic (a new one by default).
    #[arg(long)]
    topic: Option<String>,
}

#[actix_rt::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let (namesrv, embedded) = match &args.namesrv {
        Some(addr) => (addr.clone(), None),
        None => {
            let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral()).await?;
            (cluster.namesrv_addr(), Some(cluster))
        }
    };
    let topic = args
        .topic
        .clone()
        .unwrap_or_else(|| format!("PullExample{}", rocketmq_actor::util::now_ms()));

    // One client for the producer and the consumer.
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for i in 0..args.count {
        producer
            .send(Message::new(&topic, format!("message {i}")))
            .await?;
    }

    let consumer = PullConsumer::builder()
        .client(client.clone())
        .group(&args.group)
        .start()
        .await?;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let queues = consumer.fetch_subscribe_message_queues(&topic).await?;
    for queue in &queues {
        // Where this group left off (the broker's stored offset), else the queue's start.
        let mut offset = match consumer.fetch_consume_offset(queue, true).await? {
            Some(offset) => offset,
            None => consumer.min_offset(queue).await?,
        };
        let (start, end) = (offset, consumer.max_offset(queue).await?);
        while offset < end {
            let result = consumer
                .pull_block_if_not_found(queue, "*", offset, 32)
                .await?;
            match result.status {
                PullStatus::Found => {
                    for message in &result.messages {
                        let body = String::from_utf8_lossy(message.body()).into_owned();
                        *seen.entry(body).or_default() += 1;
                    }
                }
                // Nothing (matching) there yet: the next pull waits on the broker.
                PullStatus::NoNewMsg | PullStatus::NoMatchedMsg => {}
                PullStatus::OffsetIllegal => {
                    eprintln!(
                        "{queue}: offset {offset} is out of range; moving to {}",
                        result.next_begin_offset
                    );
                }
            }
            offset = result.next_begin_offset;
            consumer.update_consume_offset(queue, offset).await;
        }
        println!(
            "{}/{}: read offsets {start}..{offset} ({} messages)",
            queue.broker_name,
            queue.queue_id,
            offset - start
        );
    }
    consumer.persist_consume_offsets().await?;

    let expected: BTreeSet<String> = (0..args.count).map(|i| format!("message {i}")).collect();
    let missing = expected.iter().filter(|b| !seen.contains_key(*b)).count();
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    println!(
        "{}",
        serde_json::json!({
            "count": seen.values().sum::<usize>(),
            "queues": queues.len(),
            "missing": missing,
            "duplicates": duplicates,
        })
    );
    consumer.shutdown().await;
    client.shutdown().await;
    if let Some(cluster) = embedded {
        cluster.shutdown().await;
    }
    if missing > 0 || duplicates > 0 {
        std::process::exit(1);
    }
    Ok(())
}
