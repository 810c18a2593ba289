//! # 08 — the pull schedule service: a callback per queue
//!
//! What it teaches: Java's `MQPullConsumerScheduleService` quick-start. You register an async
//! callback for a topic; the service runs it again and again for every queue this member owns,
//! each queue in its own actor, with the delay the callback asks for. Each run here reads the
//! queue's offset from the consumer's offset store, pulls 32, stores the next offset, and asks
//! to run again after 100 ms (`set_pull_next_delay`; 200 ms when it says nothing).
//!
//! A queue's runs never overlap — they are its actor's mailbox — while different queues run
//! concurrently (at most `max_concurrent_tasks` at once). When the group rebalances, a lost
//! queue's task stops after its current run and its offset is persisted; with more members
//! (start this program several times against one cluster with `--topic`) each queue's task
//! runs in exactly one of them.
//!
//! The guarantee: as with 07, the callback decides — the offset moves only when it stores one,
//! so storing it after handling the messages gives at least once. A callback that panics is
//! logged and run again after 1 s.
//!
//! Run it:
//!
//! ```text
//! cargo run --example 08_pull_schedule                       # on an embedded cluster
//! cargo run --example 08_pull_schedule -- --namesrv 127.0.0.1:9876 [--count 100] [--group G] [--topic T]
//! ```
//!
//! Expected output: it sends `--count` messages to a new topic, starts the service, waits until
//! every message went through a callback and prints one JSON line (`runs` varies):
//!
//! ```text
//! {"count":100,"duplicates":0,"missing":0,"runs":8,"tasks":8}
//! ```
//!
//! It exits 1 if a message is missing or came twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::pull::{PullScheduleService, PullStatus};
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig};

#[derive(Parser)]
struct Args {
    /// A real cluster's name server; without it an embedded cluster is started.
    #[arg(long)]
    namesrv: Option<String>,
    /// How many messages to send and read back.
    #[arg(long, default_value_t = 100)]
    count: usize,
    #[arg(long, default_value = "pull_schedule_example")]
    group: String,
    /// The topic (a new one by default).
    #[arg(long)]
    topic: Option<String>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 20)]
    timeout: u64,
}

/// What the callbacks saw, shared by every task.
#[derive(Default)]
struct Seen {
    bodies: BTreeMap<String, usize>,
    runs: usize,
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
        .unwrap_or_else(|| format!("ScheduleExample{}", rocketmq_actor::util::now_ms()));
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for i in 0..args.count {
        producer
            .send(Message::new(&topic, format!("message {i}")))
            .await?;
    }

    let seen = Arc::new(Mutex::new(Seen::default()));
    let tasks_seen = seen.clone();
    let service = PullScheduleService::builder()
        .client(client.clone())
        .group(&args.group)
        .register_pull_task_fn(&topic, move |queue, mut ctx| {
            let seen = tasks_seen.clone();
            async move {
                let consumer = ctx.pull_consumer().clone();
                // The stored offset (memory first, then the broker); a new group starts at 0.
                let offset = match consumer.fetch_consume_offset(&queue, false).await {
                    Ok(offset) => offset.unwrap_or(0),
                    Err(e) => {
                        eprintln!("{queue}: no offset yet ({e}); trying again");
                        return ctx;
                    }
                };
                match consumer.pull(&queue, "*", offset, 32).await {
                    Ok(result) => {
                        {
                            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                            seen.runs += 1;
                            if result.status == PullStatus::Found {
                                for message in &result.messages {
                                    let body = String::from_utf8_lossy(message.body()).into_owned();
                                    *seen.bodies.entry(body).or_default() += 1;
                                }
                            }
                        }
                        consumer
                            .update_consume_offset(&queue, result.next_begin_offset)
                            .await;
                    }
                    Err(e) => eprintln!("{queue}: pull failed: {e}"),
                }
                ctx.set_pull_next_delay(Duration::from_millis(100));
                ctx
            }
        })
        .start()
        .await?;

    let expected: BTreeSet<String> = (0..args.count).map(|i| format!("message {i}")).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout);
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    loop {
        ticks.tick().await;
        let done = {
            let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            expected.iter().all(|b| seen.bodies.contains_key(b))
        };
        if done || tokio::time::Instant::now() >= deadline {
            break;
        }
    }
    let tasks = service.running_tasks().await.len();
    service.shutdown().await; // stops the tasks after their runs, persists the offsets

    let (missing, duplicates) = {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        let missing = expected
            .iter()
            .filter(|b| !seen.bodies.contains_key(*b))
            .count();
        let duplicates: usize = seen.bodies.values().map(|n| n - 1).sum();
        println!(
            "{}",
            serde_json::json!({
                "count": seen.bodies.values().sum::<usize>(),
                "tasks": tasks,
                "missing": missing,
                "duplicates": duplicates,
                "runs": seen.runs,
            })
        );
        (missing, duplicates)
    };
    client.shutdown().await;
    if let Some(cluster) = embedded {
        cluster.shutdown().await;
    }
    if missing > 0 || duplicates > 0 {
        std::process::exit(1);
    }
    Ok(())
}
