//! # 06 — supervision: a consumer that rides out a broker restart
//!
//! What it teaches: how a consumer lives through failures, and how to watch it do so.
//!
//! - Inside, every actor of a consumer (connections, queue actors, rebalancer, heartbeat, offset
//!   store) runs under an actix `Supervisor`. When a broker goes away the connection fails its
//!   requests, the heartbeat re-reads routes and retries every 500 ms, and as soon as the broker
//!   serves again the consumer heartbeats it (a restarted broker forgot the group) and its
//!   queues go on from their committed offsets.
//! - Outside, `SupervisedConsumer` makes the whole consumer one actor for your own supervision
//!   tree: `Supervisor::start(|_| SupervisedConsumer::new(factory))` builds a fresh consumer from
//!   the factory whenever the running one could not start or stopped without being asked to
//!   (with the backoff of `restart_policy`); `StopConsumer` stops it for good and
//!   `GetConsumerStatus` asks for its status.
//! - `ConsumerEvent`s say what happens: `Started`, `QueuesAssigned`, `Disconnected`,
//!   `Reconnected`, `Problem`, `Stopped`, … — to an actor (`event_recipient`, used here) or as
//!   a `Stream` (`consumer.events()` on a plain `PushConsumer`).
//!
//! The run: a two-broker embedded cluster; 10 messages are consumed; then broker-a crashes
//! (`EmbeddedCluster::stop_broker`), 10 messages are sent while it is down (the producer retries
//! them on broker-b), broker-a comes back on the same data (`restart_broker`), 10 more are sent.
//!
//! The guarantee: no acknowledged message is lost — the 30 all arrive, those stored on broker-a
//! before the crash included. (At least once: a message whose commit had not reached the broker
//! could come twice; the count of duplicates is printed.) The consumer started once: the restart
//! was absorbed inside it, and the outer Supervisor had nothing to do.
//!
//! Run it:
//!
//! ```text
//! cargo run --example 06_supervised_consumer
//! RUST_LOG=rocketmq_actor=info cargo run --example 06_supervised_consumer   # with the runtime's logs
//! cargo run --example 06_supervised_consumer -- --namesrv 127.0.0.1:9876    # no broker restart
//! ```
//!
//! Expected output (addresses vary):
//!
//! ```text
//! event: Started
//! event: QueuesAssigned (6 queues)
//! consumed 10 of 10 messages sent before the crash
//! broker-a (127.0.0.1:40121) stopped
//! event: Disconnected from 127.0.0.1:40121 (closed by peer)
//! sent 10 messages while broker-a was down
//! broker-a restarted
//! event: Reconnected to 127.0.0.1:40121
//! consumed 30 of 30 messages (0 duplicates); the consumer started 1 time(s)
//! status: 6 queues owned, 0 queue restarts, no problems
//! event: Stopped
//! event: Disconnected from 127.0.0.1:40121 (closed by owner)
//! event: Disconnected from 127.0.0.1:35717 (closed by owner)
//! ```
//!
//! (The six queues are two of the topic and one of the group's retry topic `%RETRY%<group>` on
//! each broker.)
//!
//! It exits 1 if a message is missing or an expected event did not come within 10 s.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use rocketmq_actor::consumer::{
    ConsumeFromWhere, ConsumeStatus, ConsumerEvent, GetConsumerStatus, StopConsumer,
    SupervisedConsumer,
};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

type Error = Box<dyn std::error::Error>;

const PATIENCE: Duration = Duration::from_secs(10);
const BATCH: usize = 10;

/// Prints the consumer's events, counts its starts and hands the events on to `main`.
struct EventLog {
    forward: UnboundedSender<ConsumerEvent>,
    starts: Arc<AtomicUsize>,
}

impl Actor for EventLog {
    type Context = Context<Self>;
}

impl Handler<ConsumerEvent> for EventLog {
    type Result = ();

    fn handle(&mut self, event: ConsumerEvent, _ctx: &mut Self::Context) {
        match &event {
            ConsumerEvent::Started { .. } => {
                self.starts.fetch_add(1, Ordering::SeqCst);
                println!("event: Started");
            }
            ConsumerEvent::QueuesAssigned(queues) => {
                println!("event: QueuesAssigned ({} queues)", queues.len())
            }
            ConsumerEvent::Disconnected { broker, reason } => {
                println!("event: Disconnected from {broker} ({reason})")
            }
            ConsumerEvent::Reconnected { broker } => println!("event: Reconnected to {broker}"),
            ConsumerEvent::Stopped => println!("event: Stopped"),
            other => println!("event: {other:?}"),
        }
        let _ = self.forward.send(event);
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
    let run = rocketmq_actor::util::now_ms();
    let topic = format!("Supervised{run}");
    // Two brokers: the name server has a port of its own and stays up while broker-a restarts.
    let (namesrv, cluster) = match namesrv_arg()? {
        Some(addr) => (addr, None),
        None => {
            let config = EmbeddedConfig {
                brokers: 2,
                ..EmbeddedConfig::ephemeral()
            };
            let cluster = EmbeddedCluster::start(config).await?;
            cluster.create_topic(&topic, 2).await?;
            (cluster.namesrv_addr(), Some(cluster))
        }
    };
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());

    let (event_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let starts = Arc::new(AtomicUsize::new(0));
    let event_log = EventLog {
        forward: event_tx,
        starts: starts.clone(),
    }
    .start();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();

    // The factory builds the consumer at the first start and at every restart of the whole
    // (and once more up front, to read its `restart_policy`): keep it free of side effects.
    let supervised = {
        let (namesrv, topic) = (namesrv.clone(), topic.clone());
        let group = format!("supervised_{run}");
        Supervisor::start(move |_| {
            SupervisedConsumer::new(move || {
                let tx = tx.clone();
                PushConsumer::builder()
                    .namesrv_addr(&namesrv)
                    .group(&group)
                    .subscribe(&topic, "*")
                    .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
                    .event_recipient(event_log.clone().recipient())
                    .listener_fn(move |messages, ctx| {
                        let tx = tx.clone();
                        async move {
                            for m in &messages {
                                let _ = tx.send(String::from_utf8_lossy(m.body()).into_owned());
                            }
                            (ConsumeStatus::Success, ctx)
                        }
                    })
            })
        })
    };

    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    send(&producer, &topic, "before").await?;
    receive(&mut rx, &mut seen, BATCH).await?;
    println!("consumed {BATCH} of {BATCH} messages sent before the crash");

    if let Some(cluster) = &cluster {
        let broker = cluster.broker_addr("broker-a").ok_or("no broker-a")?;
        // A crash: the broker stops serving and does not unregister (routes still list it).
        cluster.stop_broker("broker-a", false).await?;
        println!("broker-a ({broker}) stopped");
        wait_for(
            &mut events,
            "Disconnected from broker-a",
            |e| matches!(e, ConsumerEvent::Disconnected { broker: b, .. } if *b == broker),
        )
        .await?;
        send(&producer, &topic, "during").await?;
        println!("sent {BATCH} messages while broker-a was down");
        cluster.restart_broker("broker-a").await?;
        println!("broker-a restarted");
        wait_for(
            &mut events,
            "Reconnected to broker-a",
            |e| matches!(e, ConsumerEvent::Reconnected { broker: b } if *b == broker),
        )
        .await?;
    } else {
        println!("(broker restart skipped: it needs the embedded cluster's fault injection)");
        send(&producer, &topic, "during").await?;
    }
    send(&producer, &topic, "after").await?;
    receive(&mut rx, &mut seen, 3 * BATCH).await?;
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    println!(
        "consumed {} of {} messages ({duplicates} duplicates); the consumer started {} time(s)",
        seen.len(),
        3 * BATCH,
        starts.load(Ordering::SeqCst)
    );

    let status = supervised
        .send(GetConsumerStatus)
        .await?
        .ok_or("the consumer is not running")?;
    println!(
        "status: {} queues owned, {} queue restarts, {}",
        status.owned_queues.len(),
        status.queue_restarts,
        if status.problems.is_empty() {
            "no problems".to_owned()
        } else {
            format!("problems {:?}", status.problems)
        }
    );
    supervised.send(StopConsumer).await?;
    wait_for(&mut events, "Stopped", |e| *e == ConsumerEvent::Stopped).await?;

    client.shutdown().await;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    Ok(())
}

/// Sends `BATCH` messages `<label> 0`, `<label> 1`, ….
async fn send(producer: &Producer, topic: &str, label: &str) -> Result<(), Error> {
    for i in 0..BATCH {
        producer
            .send(Message::new(topic, format!("{label} {i}")))
            .await?;
    }
    Ok(())
}

/// Receives until `total` different bodies were seen, counting each delivery.
async fn receive(
    rx: &mut UnboundedReceiver<String>,
    seen: &mut BTreeMap<String, usize>,
    total: usize,
) -> Result<(), Error> {
    let deadline = Instant::now() + PATIENCE;
    while seen.len() < total {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(body)) => *seen.entry(body).or_default() += 1,
            _ => return Err(format!("only {} of {total} messages arrived", seen.len()).into()),
        }
    }
    Ok(())
}

/// Waits for the first event that `wanted` accepts.
async fn wait_for(
    events: &mut UnboundedReceiver<ConsumerEvent>,
    what: &str,
    wanted: impl Fn(&ConsumerEvent) -> bool,
) -> Result<(), Error> {
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = events.recv().await {
            if wanted(&event) {
                return true;
            }
        }
        false
    })
    .await;
    match found {
        Ok(true) => Ok(()),
        _ => Err(format!("no event {what} within {PATIENCE:?}").into()),
    }
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
