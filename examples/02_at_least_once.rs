//! # 02 — at least once: retries, reconsume times and the dead-letter queue
//!
//! What it teaches: what happens to a message whose listener says
//! `ConsumeStatus::ReconsumeLater`. The consumer hands it back to the broker, which delivers it
//! again after a delay (through the group's retry topic `%RETRY%<group>`) with
//! `reconsume_times` one higher. A message that keeps failing is moved to the group's
//! dead-letter queue `%DLQ%<group>` once it was delivered `max_reconsume_times` times again
//! (set to 2 here; 16 by default), and can be read back from there like any topic.
//!
//! The guarantee: at least once. Nothing the listener did not report as consumed is dropped —
//! it is delivered again, or parked in the DLQ for a person or a program to look at. The other
//! side of the coin: a listener can see the same message more than once, so what it does must
//! be idempotent (here the "flaky" message is seen twice).
//!
//! Retry delays: the listener sets `ctx.delay_level = 1` (1 s, the shortest of the 18 standard
//! levels) so the run takes about 3 s; with the default (0) the broker picks level 3 +
//! reconsume times: 10 s, 30 s, 1 min, … An embedded cluster can also make every level shorter
//! (`EmbeddedConfig { delay_scale: 0.001, .. }`, what the crate's tests do).
//!
//! Run it:
//!
//! ```text
//! cargo run --example 02_at_least_once
//! cargo run --example 02_at_least_once -- --namesrv 127.0.0.1:9876
//! ```
//!
//! Expected output (the first deliveries may come in another order):
//!
//! ```text
//! delivery of "ok"     reconsume_times 0 -> Success
//! delivery of "flaky"  reconsume_times 0 -> ReconsumeLater
//! delivery of "poison" reconsume_times 0 -> ReconsumeLater
//! delivery of "flaky"  reconsume_times 1 -> Success
//! delivery of "poison" reconsume_times 1 -> ReconsumeLater
//! delivery of "poison" reconsume_times 2 -> ReconsumeLater
//! read back from %DLQ%at_least_once_…: "poison" (original topic AtLeastOnce…, reconsume_times 3)
//! ok: consumed on delivery 1; flaky: consumed on delivery 2; poison: 3 deliveries, then the DLQ
//! ```
//!
//! It exits 1 if any of that did not happen within 15 s.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rocketmq_actor::consumer::{dlq_topic, ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::message::property;
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer};

type Error = Box<dyn std::error::Error>;

/// How long the whole demonstration may take.
const PATIENCE: Duration = Duration::from_secs(15);
/// Redeliveries before the DLQ.
const MAX_RECONSUME_TIMES: u32 = 2;

/// One call of the listener for one message.
#[derive(Debug)]
struct Delivery {
    body: String,
    reconsume_times: i32,
    succeeded: bool,
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
    let topic = format!("AtLeastOnce{run}");
    let group = format!("at_least_once_{run}");

    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for body in ["ok", "flaky", "poison"] {
        producer.send(Message::new(&topic, body)).await?;
    }

    // The listener: "ok" always succeeds, "flaky" fails its first delivery only, "poison"
    // always fails. `consume_message_batch_max_size` is 1 (the default), so each call has one
    // message and its status is that message's.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Delivery>();
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .group(&group)
        .subscribe(&topic, "*")
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::FirstOffset;
            c.max_reconsume_times = Some(MAX_RECONSUME_TIMES);
        })
        .listener_fn(move |messages, mut ctx| {
            let tx = tx.clone();
            async move {
                let mut status = ConsumeStatus::Success;
                for m in &messages {
                    let body = String::from_utf8_lossy(m.body()).into_owned();
                    // The listener sees the original topic, whichever topic redelivered it.
                    let fails = match body.as_str() {
                        "flaky" => m.reconsume_times == 0,
                        "poison" => true,
                        _ => false,
                    };
                    let _ = tx.send(Delivery {
                        body,
                        reconsume_times: m.reconsume_times,
                        succeeded: !fails,
                    });
                    if fails {
                        status = ConsumeStatus::ReconsumeLater;
                    }
                }
                // Retry after delay level 1 (1 s) instead of the broker's choice.
                ctx.delay_level = 1;
                (status, ctx)
            }
        })
        .start()
        .await?;

    // Wait until "ok" and "flaky" were consumed and "poison" failed its last delivery.
    let deadline = Instant::now() + PATIENCE;
    let mut deliveries = Vec::new();
    while !finished(&deliveries) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(d)) => {
                println!(
                    "delivery of {:<8} reconsume_times {} -> {}",
                    format!("{:?}", d.body),
                    d.reconsume_times,
                    if d.succeeded {
                        "Success"
                    } else {
                        "ReconsumeLater"
                    }
                );
                deliveries.push(d);
            }
            _ => break,
        }
    }

    // Read the dead-letter queue back with a second group, as any other topic.
    let dlq = dlq_topic(&group);
    let (dead_tx, mut dead_rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = PushConsumer::builder()
        .client(client.clone())
        .group(format!("dlq_reader_{run}"))
        .subscribe(&dlq, "*")
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::FirstOffset;
            // The DLQ topic appears with the first dead letter: look for it often.
            c.rebalance_retry_interval = Duration::from_millis(200);
        })
        .listener_fn(move |messages, ctx| {
            let dead_tx = dead_tx.clone();
            async move {
                for m in &messages {
                    let _ = dead_tx.send((
                        String::from_utf8_lossy(m.body()).into_owned(),
                        m.property(property::RETRY_TOPIC).unwrap_or("?").to_owned(),
                        m.reconsume_times,
                    ));
                }
                (ConsumeStatus::Success, ctx)
            }
        })
        .start()
        .await?;
    let left = deadline.saturating_duration_since(Instant::now());
    let dead_letter = tokio::time::timeout(left, dead_rx.recv())
        .await
        .ok()
        .flatten();
    if let Some((body, original_topic, reconsume_times)) = &dead_letter {
        println!(
            "read back from {dlq}: {body:?} (original topic {original_topic}, reconsume_times {reconsume_times})"
        );
    }

    reader.shutdown().await;
    consumer.shutdown().await;
    client.shutdown().await;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }

    let count = |body: &str| deliveries.iter().filter(|d| d.body == body).count();
    if !finished(&deliveries) {
        return Err(
            format!("the retries did not play out within {PATIENCE:?}: {deliveries:?}").into(),
        );
    }
    match dead_letter {
        Some((body, _, _)) if body == "poison" => {}
        other => return Err(format!("expected \"poison\" in {dlq}, found {other:?}").into()),
    }
    println!(
        "ok: consumed on delivery 1; flaky: consumed on delivery {}; poison: {} deliveries, then the DLQ",
        count("flaky"),
        count("poison")
    );
    Ok(())
}

/// Whether "ok" and "flaky" succeeded and "poison" failed its last allowed delivery.
fn finished(deliveries: &[Delivery]) -> bool {
    let succeeded = |body: &str| deliveries.iter().any(|d| d.body == body && d.succeeded);
    let last_poison = deliveries
        .iter()
        .any(|d| d.body == "poison" && d.reconsume_times == MAX_RECONSUME_TIMES as i32);
    succeeded("ok") && succeeded("flaky") && last_poison
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
