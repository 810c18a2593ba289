//! # 04 — an actix actor as the listener, and backpressure
//!
//! What it teaches: a listener can be an actor of your own: `listener_actor(addr.recipient())`
//! sends it each batch as a `ConsumeMessages` message and waits for its `ConsumeReply`. The
//! actor here handles one batch at a time (`AtomicResponse`) and is slow on purpose (5 ms per
//! message) while a backlog of 200 messages waits on the broker.
//!
//! What keeps a slow listener from being flooded is the consumer's flow control: a queue is
//! not pulled while it caches more than `pull_threshold_for_queue` messages (1,000 by default;
//! `pull_threshold_for_topic` divides a budget among the owned queues instead, as here) — so the
//! messages pulled but not yet consumed stay bounded, whatever the backlog. The actor's mailbox
//! adds its own backpressure: a full mailbox makes the consumer wait before sending more.
//!
//! The guarantee: memory stays bounded by about `owned queues × (per-queue threshold +
//! pull_batch_size)` messages; nothing is dropped to achieve it — the rest waits on the broker.
//! `ConsumerStats` (`consumer.stats().await`) shows it: pulled − consumed = cached.
//!
//! Run it:
//!
//! ```text
//! cargo run --example 04_actor_listener
//! cargo run --example 04_actor_listener -- --namesrv 127.0.0.1:9876
//! ```
//!
//! Expected output (numbers vary):
//!
//! ```text
//! backlog of 200 messages; flow control: 8 queues x (4 + 4) = at most 64 cached
//! t=0.3s pulled  96 consumed  40 cached 56
//! t=0.6s pulled 136 consumed  84 cached 52
//! …
//! the actor consumed 200 of 200 messages, one batch at a time; at most 60 were cached at once
//! ```
//!
//! It exits 1 if a message is missing or the cache went over the bound.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use actix::prelude::*;
use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeMessages, ConsumeReply};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer};

type Error = Box<dyn std::error::Error>;

const BACKLOG: u64 = 200;
/// The whole consumer's cache budget, divided among its queues.
const TOPIC_THRESHOLD: u32 = 32;
const PULL_BATCH_SIZE: u32 = 4;
/// The actor's work per message.
const WORK: Duration = Duration::from_millis(5);
const PATIENCE: Duration = Duration::from_secs(15);

/// The listener: an actor that "books" each message into a warehouse, slowly.
struct Warehouse {
    booked: u64,
}

impl Actor for Warehouse {
    type Context = Context<Self>;
}

impl Handler<ConsumeMessages> for Warehouse {
    // An AtomicResponse keeps the mailbox closed until the future is done: one batch at a time.
    type Result = AtomicResponse<Self, ConsumeReply>;

    fn handle(&mut self, batch: ConsumeMessages, _ctx: &mut Self::Context) -> Self::Result {
        let work = WORK * batch.messages.len() as u32;
        AtomicResponse::new(Box::pin(actix::clock::sleep(work).into_actor(self).map(
            move |_, warehouse, _| {
                warehouse.booked += batch.messages.len() as u64;
                // `ConsumeReply::reconsume_later()` would send the batch back for a retry.
                ConsumeReply::success()
            },
        )))
    }
}

/// How many messages the warehouse booked.
#[derive(Message)]
#[rtype(result = "u64")]
struct Booked;

impl Handler<Booked> for Warehouse {
    type Result = u64;

    fn handle(&mut self, _msg: Booked, _ctx: &mut Self::Context) -> u64 {
        self.booked
    }
}

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
    let topic = format!("ActorListener{run}");
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for i in 0..BACKLOG {
        producer
            .send(Message::new(&topic, format!("parcel {i}")))
            .await?;
    }

    let warehouse = Warehouse { booked: 0 }.start();
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .group(format!("actor_listener_{run}"))
        .subscribe(&topic, "*")
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::FirstOffset;
            c.pull_threshold_for_topic = Some(TOPIC_THRESHOLD);
            c.pull_batch_size = PULL_BATCH_SIZE;
        })
        .listener_actor(warehouse.clone().recipient())
        .start()
        .await?;

    // Watch the counters while the actor works through the backlog.
    let started = Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let (mut most_cached, mut bound, mut printed) = (0, u64::MAX, Duration::ZERO);
    loop {
        ticks.tick().await;
        let stats = consumer.stats().await;
        let consumed = stats.consumed_ok + stats.consumed_failed;
        let cached = stats.pulled.saturating_sub(consumed);
        most_cached = most_cached.max(cached);
        if stats.owned_queues > 0 && bound == u64::MAX {
            let queues = stats.owned_queues as u64;
            let per_queue = (u64::from(TOPIC_THRESHOLD) / queues).max(1);
            bound = queues * (per_queue + u64::from(PULL_BATCH_SIZE));
            println!(
                "backlog of {BACKLOG} messages; flow control: {queues} queues x ({per_queue} + {PULL_BATCH_SIZE}) = at most {bound} cached"
            );
        }
        let elapsed = started.elapsed();
        if elapsed >= printed + Duration::from_millis(300) {
            printed = elapsed;
            println!(
                "t={:.1}s pulled {:>3} consumed {:>3} cached {cached}",
                elapsed.as_secs_f64(),
                stats.pulled,
                consumed
            );
        }
        if stats.consumed_ok >= BACKLOG || elapsed > PATIENCE {
            break;
        }
    }
    consumer.shutdown().await;
    let booked = warehouse.send(Booked).await?;
    println!(
        "the actor consumed {booked} of {BACKLOG} messages, one batch at a time; at most {most_cached} were cached at once"
    );

    client.shutdown().await;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    if booked < BACKLOG {
        return Err(format!("only {booked} of {BACKLOG} messages consumed").into());
    }
    if most_cached > bound {
        return Err(format!("{most_cached} messages cached, over the bound of {bound}").into());
    }
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
