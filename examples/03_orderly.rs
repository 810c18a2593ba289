//! # 03 — orderly consumption: per queue, and per key
//!
//! What it teaches: how to keep the messages of one entity (an order, an account) in the order
//! they were sent.
//!
//! 1. The producer sends every message of one key with `send_with_key(message, key)`: the key's
//!    hash picks the queue, so all of a key's messages land in one queue, in send order (send
//!    them one after the other — concurrent sends have no order).
//! 2. An orderly listener (`orderly_listener_fn`) gets each queue's messages in queue order, one
//!    call at a time per queue (in clustering mode only while this member holds the queue's
//!    broker lock, so two members never consume one queue at once).
//! 3. `key_ordered(true)` narrows the promise to what is usually needed — messages of the same
//!    key in order — so different keys that share a queue are consumed concurrently.
//!
//! The guarantee: within a key, a message reaches the listener only after every earlier message
//! of that key was consumed (and, with `key_ordered(false)`, every earlier message of its
//! queue). Delivery is still at least once: a failed batch (`SuspendCurrentQueueAMoment`) is
//! retried in place, holding back the messages behind it.
//!
//! Run it:
//!
//! ```text
//! cargo run --example 03_orderly
//! cargo run --example 03_orderly -- --namesrv 127.0.0.1:9876
//! ```
//!
//! Expected output (queue numbers, times and the second mode's concurrency vary):
//!
//! ```text
//! sent 16 orders x 4 steps with send_with_key
//! queue-ordered: 64 messages in 0.3 s, every order in sequence; most calls at once on one queue: 1
//!   order-00 (queue broker-a/7): created -> paid -> shipped -> delivered
//!   order-01 (queue broker-a/0): created -> paid -> shipped -> delivered
//! key-ordered:   64 messages in 0.1 s, every order in sequence; most calls at once on one queue: 3
//!   order-00 (queue broker-a/7): created -> paid -> shipped -> delivered
//!   order-01 (queue broker-a/0): created -> paid -> shipped -> delivered
//! ```
//!
//! It exits 1 if a message is missing or a step of an order came before an earlier one.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocketmq_actor::consumer::{ConsumeFromWhere, OrderlyStatus};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer};

type Error = Box<dyn std::error::Error>;

const ORDERS: usize = 16;
const STEPS: [&str; 4] = ["created", "paid", "shipped", "delivered"];
/// Simulated work per message, so that concurrency shows.
const WORK: Duration = Duration::from_millis(20);
const PATIENCE: Duration = Duration::from_secs(15);

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
    let topic = format!("Orderly{run}");
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());

    // Step by step across all orders, so the orders' messages interleave in their queues.
    for step in STEPS {
        for order in 0..ORDERS {
            let key = order_key(order);
            let message = Message::new(&topic, format!("{key}:{step}"));
            // Awaited one by one: each key's messages are stored in the order sent.
            producer.send_with_key(message, &key).await?;
        }
    }
    println!(
        "sent {ORDERS} orders x {} steps with send_with_key",
        STEPS.len()
    );

    let mut failures = Vec::new();
    for key_ordered in [false, true] {
        let group = format!(
            "orderly_{}_{run}",
            if key_ordered { "key" } else { "queue" }
        );
        let report = consume(&client, &topic, &group, key_ordered).await?;
        println!(
            "{:<14} {} messages in {:.1} s, {}; most calls at once on one queue: {}",
            if key_ordered {
                "key-ordered:"
            } else {
                "queue-ordered:"
            },
            report.received,
            report.elapsed.as_secs_f64(),
            if report.violations.is_empty() {
                "every order in sequence".to_owned()
            } else {
                format!("{} steps OUT OF ORDER", report.violations.len())
            },
            report.most_at_once
        );
        for order in 0..2 {
            let key = order_key(order);
            if let Some((queue, steps)) = report.sequences.get(&key) {
                println!("  {key} (queue {queue}): {}", steps.join(" -> "));
            }
        }
        if report.received < ORDERS * STEPS.len() {
            failures.push(format!("{group}: only {} messages", report.received));
        }
        failures.extend(report.violations);
    }

    client.shutdown().await;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; ").into())
    }
}

fn order_key(order: usize) -> String {
    format!("order-{order:02}")
}

/// What one consumer saw.
#[derive(Default)]
struct Report {
    received: usize,
    elapsed: Duration,
    /// Per key: its queue (`broker/id`) and its steps in the order the listener got them.
    sequences: BTreeMap<String, (String, Vec<String>)>,
    /// Listener calls running at once, per queue, now.
    running: BTreeMap<String, usize>,
    /// The most calls that ran at once on any one queue.
    most_at_once: usize,
    /// "order-03: paid after shipped", …
    violations: Vec<String>,
}

/// Consumes the topic from its first message with an orderly listener until every message came.
async fn consume(
    client: &Client,
    topic: &str,
    group: &str,
    key_ordered: bool,
) -> Result<Report, Error> {
    let report = Arc::new(Mutex::new(Report::default()));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let seen = report.clone();
    let started = Instant::now();
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .group(group)
        .subscribe(topic, "*")
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .orderly_listener_fn(move |messages, ctx| {
            let (seen, tx) = (seen.clone(), tx.clone());
            async move {
                let queue = format!("{}/{}", ctx.queue.broker_name, ctx.queue.queue_id);
                {
                    let mut r = seen.lock().unwrap_or_else(|e| e.into_inner());
                    let running = r.running.entry(queue.clone()).or_default();
                    *running += 1;
                    let now = *running;
                    r.most_at_once = r.most_at_once.max(now);
                }
                tokio::time::sleep(WORK * messages.len() as u32).await;
                let mut r = seen.lock().unwrap_or_else(|e| e.into_inner());
                *r.running.entry(queue.clone()).or_default() -= 1;
                for m in &messages {
                    let body = String::from_utf8_lossy(m.body()).into_owned();
                    let (key, step) = body.split_once(':').unwrap_or((&body, ""));
                    let rank = |s: &str| STEPS.iter().position(|x| *x == s);
                    let entry = r
                        .sequences
                        .entry(key.to_owned())
                        .or_insert_with(|| (queue.clone(), Vec::new()));
                    let last = entry.1.last().cloned();
                    entry.1.push(step.to_owned());
                    if let Some(last) = last {
                        if rank(step) <= rank(&last) {
                            r.violations.push(format!("{key}: {step} after {last}"));
                        }
                    }
                    r.received += 1;
                    let _ = tx.send(());
                }
                (OrderlyStatus::Success, ctx)
            }
        })
        .key_ordered(key_ordered)
        .start()
        .await?;

    let deadline = Instant::now() + PATIENCE;
    for _ in 0..ORDERS * STEPS.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if !matches!(tokio::time::timeout(left, rx.recv()).await, Ok(Some(()))) {
            break;
        }
    }
    let elapsed = started.elapsed();
    consumer.shutdown().await;
    let mut r = report.lock().unwrap_or_else(|e| e.into_inner());
    r.elapsed = elapsed;
    Ok(std::mem::take(&mut *r))
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
