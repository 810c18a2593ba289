//! # 14 — throughput: which listener, which batch, which send
//!
//! What it teaches: what a message costs a consumer and a producer, and the settings that change
//! it. The same 100,000 messages are consumed four times, by four groups, each with another
//! listener:
//!
//! - an async closure (`listener_fn`), one message per call: the default, free to await;
//! - a synchronous closure (`listener_sync_fn`), one message per call: no future per call;
//! - the synchronous closure with `consume_message_batch_max_size = 32`: one call per pull;
//! - a synchronous orderly closure (`orderly_listener_sync_fn`): one call at a time per queue,
//!   in queue order, under the queue's broker lock.
//!
//! The producer sends the messages with `send_batch` (32 per request), then 10,000 more with
//! single `send`s, 64 requests in flight either way.
//!
//! The guarantee does not depend on these settings: every mode consumes every message, at least
//! once. What changes is the cost per message. The figures this prints come from a cluster in the
//! same process, sharing its cores with the client; BENCHMARKS.md has them measured apart
//! (`scripts/bench.sh`), against a raw pull loop and a raw send loop.
//!
//! Run it in release (a debug build is many times slower and says nothing about speed):
//!
//! ```text
//! cargo run --release --example 14_throughput                             # embedded cluster
//! cargo run --release --example 14_throughput -- --namesrv 127.0.0.1:9876 # a real cluster
//! ```
//!
//! Expected output (release build, a 2-core VM; the figures vary from run to run):
//!
//! ```text
//! sent 100000 messages with send_batch of 32: 791672 msgs/s
//! sent 10000 messages with single sends: 184909 msgs/s
//! consumed all 100000 messages with each listener:
//!   async closure, 1 message per call           2207166 msgs/s  1.00 x
//!   sync closure, 1 message per call            2391615 msgs/s  1.08 x
//!   sync closure, up to 32 messages per call    2447140 msgs/s  1.11 x
//!   sync orderly closure, 1 message per call    1795780 msgs/s  0.81 x
//! ```
//!
//! It exits 1 if a send fails or a mode has not consumed every message within 60 s.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus, OrderlyStatus};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::{
    Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer, PushConsumerBuilder,
};
use tokio::sync::Notify;

type Error = Box<dyn std::error::Error>;

/// Messages each listener consumes.
const MESSAGES: usize = 100_000;
/// Messages sent one per request, for the producer's comparison.
const SINGLE_SENDS: usize = 10_000;
/// Requests the producer keeps under way.
const IN_FLIGHT: usize = 64;
/// How long a mode may take to consume everything before the example calls a message lost.
const PATIENCE: Duration = Duration::from_secs(60);

/// The listeners compared, in the order they run.
#[derive(Clone, Copy)]
enum Listener {
    Async,
    Sync,
    SyncBatch32,
    OrderlySync,
}

impl Listener {
    const ALL: [Listener; 4] = [
        Listener::Async,
        Listener::Sync,
        Listener::SyncBatch32,
        Listener::OrderlySync,
    ];

    fn describe(self) -> &'static str {
        match self {
            Listener::Async => "async closure, 1 message per call",
            Listener::Sync => "sync closure, 1 message per call",
            Listener::SyncBatch32 => "sync closure, up to 32 messages per call",
            Listener::OrderlySync => "sync orderly closure, 1 message per call",
        }
    }

    /// `builder` with this listener, counting into `tally`.
    fn install(self, builder: PushConsumerBuilder, tally: Arc<Tally>) -> PushConsumerBuilder {
        match self {
            Listener::Async => builder.listener_fn(move |messages, ctx| {
                tally.add(messages.len());
                async move { (ConsumeStatus::Success, ctx) }
            }),
            Listener::Sync => builder.listener_sync_fn(move |messages, _ctx| {
                tally.add(messages.len());
                ConsumeStatus::Success
            }),
            Listener::SyncBatch32 => builder
                .configure(|c| c.consume_message_batch_max_size = 32)
                .listener_sync_fn(move |messages, _ctx| {
                    tally.add(messages.len());
                    ConsumeStatus::Success
                }),
            Listener::OrderlySync => builder.orderly_listener_sync_fn(move |messages, _ctx| {
                tally.add(messages.len());
                OrderlyStatus::Success
            }),
        }
    }
}

/// Messages a listener got, and a signal once they reach the target.
struct Tally {
    seen: AtomicUsize,
    target: usize,
    reached: Notify,
}

impl Tally {
    fn add(&self, messages: usize) {
        let before = self.seen.fetch_add(messages, Ordering::Relaxed);
        if before < self.target && before + messages >= self.target {
            // `notify_one` keeps the signal should the waiter not be waiting yet.
            self.reached.notify_one();
        }
    }
}

#[actix_rt::main]
async fn main() -> ExitCode {
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
    let (namesrv, cluster) = match namesrv_arg()? {
        Some(addr) => (addr, None),
        None => {
            let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral()).await?;
            (cluster.namesrv_addr(), Some(cluster))
        }
    };
    let run = rocketmq_actor::util::now_ms();
    let topic = format!("Throughput{run}");

    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let rate = send_all(&producer, &topic, MESSAGES, 32).await?;
    println!("sent {MESSAGES} messages with send_batch of 32: {rate:.0} msgs/s");
    let rate = send_all(&producer, &format!("{topic}Singles"), SINGLE_SENDS, 1).await?;
    println!("sent {SINGLE_SENDS} messages with single sends: {rate:.0} msgs/s");

    println!("consumed all {MESSAGES} messages with each listener:");
    let mut first_rate = None;
    for (n, listener) in Listener::ALL.into_iter().enumerate() {
        let group = format!("throughput_{run}_{n}");
        let rate = consume_all(&client, &topic, &group, listener).await?;
        let relative = rate / *first_rate.get_or_insert(rate);
        println!(
            "  {:<42} {rate:>8.0} msgs/s  {relative:.2} x",
            listener.describe()
        );
    }

    client.shutdown().await;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    Ok(())
}

/// Sends `count` messages to `topic`, `per_request` in each request (1: `send`, more:
/// `send_batch`), `IN_FLIGHT` requests under way; returns the messages per second.
async fn send_all(
    producer: &Producer,
    topic: &str,
    count: usize,
    per_request: usize,
) -> Result<f64, Error> {
    let started = Instant::now();
    let mut in_flight = FuturesUnordered::new();
    let mut next = 0;
    while next < count || !in_flight.is_empty() {
        while next < count && in_flight.len() < IN_FLIGHT {
            let end = (next + per_request).min(count);
            let producer = producer.clone();
            let topic = topic.to_owned();
            in_flight.push(async move {
                let body = |i: usize| Message::new(&topic, format!("message {i}"));
                if end - next == 1 {
                    producer.send(body(next)).await.map(drop)
                } else {
                    producer
                        .send_batch((next..end).map(body).collect())
                        .await
                        .map(drop)
                }
            });
            next = end;
        }
        if let Some(sent) = in_flight.next().await {
            sent?;
        }
    }
    Ok(count as f64 / started.elapsed().as_secs_f64())
}

/// Consumes every message of `topic` from its first offset as `group` with `listener`; returns
/// the messages per second from the consumer's start to its last message.
async fn consume_all(
    client: &Client,
    topic: &str,
    group: &str,
    listener: Listener,
) -> Result<f64, Error> {
    let tally = Arc::new(Tally {
        seen: AtomicUsize::new(0),
        target: MESSAGES,
        reached: Notify::new(),
    });
    let builder = PushConsumer::builder()
        .client(client.clone())
        .group(group)
        .subscribe(topic, "*")
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset);
    let started = Instant::now();
    let consumer = listener.install(builder, tally.clone()).start().await?;
    let finished = tokio::time::timeout(PATIENCE, tally.reached.notified()).await;
    let elapsed = started.elapsed();
    consumer.shutdown().await;
    if finished.is_err() {
        let seen = tally.seen.load(Ordering::Relaxed);
        return Err(format!(
            "{}: {seen} of {MESSAGES} messages in {PATIENCE:?}",
            listener.describe()
        )
        .into());
    }
    Ok(MESSAGES as f64 / elapsed.as_secs_f64())
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
