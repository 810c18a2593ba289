//! # 13 — metrics: Prometheus figures, lag, and logs that say whose they are
//!
//! What it teaches: how to watch a consumer in production.
//!
//! - Every consumer reports through the [`metrics`](https://docs.rs/metrics) facade: pull and
//!   consume counts and round trips (what Java's `ConsumerStatsManager` reports), messages and
//!   bytes cached per queue, lag per queue, rebalances, retries, dead-letter sends, reconnects
//!   (`rocketmq_actor::metrics` lists every name). Install a recorder first — here the crate's
//!   own `PrometheusExporter`, which serves the Prometheus text format at `/metrics` — then
//!   start consumers (they take their metric handles when they start).
//! - `PushConsumer::lag()` answers "how far behind am I?" per queue: the broker's max offset,
//!   asked now, minus the offset this consumer committed.
//! - Every log line of a consumer's actors, and of your listener, is inside the spans
//!   `consumer{group, client}` and `queue{topic, broker, id}`: with several consumers in one
//!   process you still know whose line it is (`RUST_LOG=info` shows them).
//!
//! Run it:
//!
//! ```text
//! cargo run --example 13_metrics                              # on an embedded cluster
//! cargo run --example 13_metrics -- --namesrv 127.0.0.1:9876  # on a real cluster
//! ```
//!
//! Expected output (addresses and counts of pulls vary):
//!
//! ```text
//! metrics at http://127.0.0.1:41235/metrics
//! sent 300 messages; the consumer is 300 behind before it starts
//! lag while consuming: 220 (cached for the listener: 220)
//! lag after consuming: 0
//! scraped /metrics (selected lines):
//!   rocketmq_consumer_pulls_total{group="metrics_1796208181189"} 16
//!   rocketmq_consumer_pulled_messages_total{group="metrics_1796208181189"} 300
//!   rocketmq_consumer_rebalances_total{group="metrics_1796208181189"} 1
//!   rocketmq_consumer_consumed_messages_total{group="metrics_1796208181189",status="ok"} 300
//!   rocketmq_consumer_consumed_messages_total{group="metrics_1796208181189",status="failed"} 0
//!   rocketmq_consumer_owned_queues{group="metrics_1796208181189"} 9
//! ```
//!
//! It exits 1 if the figures do not add up (a message missing, a lag that does not reach 0, a
//! counter the scrape does not show).

use std::process::ExitCode;
use std::time::Duration;

use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus, QueueLag};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::metrics::PrometheusExporter;
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Error = Box<dyn std::error::Error>;

const MESSAGES: usize = 300;
/// How long the whole consumption may take before the example calls it stuck.
const PATIENCE: Duration = Duration::from_secs(20);

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
    // 1. The recorder first: consumers started later report to it. Port 0 picks a free port;
    //    a service would use a fixed one (9464 is Prometheus's convention for exporters).
    let exporter = PrometheusExporter::serve("127.0.0.1:0".parse()?).await?;
    println!("metrics at http://{}/metrics", exporter.local_addr());

    let (namesrv, cluster) = match namesrv_arg()? {
        Some(addr) => (addr, None),
        None => {
            let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral()).await?;
            (cluster.namesrv_addr(), Some(cluster))
        }
    };
    let run = rocketmq_actor::util::now_ms();
    let topic = format!("Metrics{run}");
    let group = format!("metrics_{run}");
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for i in 0..MESSAGES {
        producer
            .send(Message::new(&topic, format!("order {i}")))
            .await?;
    }
    let mut backlog = 0;
    for queue in client.fetch_subscribe_message_queues(&topic).await? {
        backlog += client.max_offset(&queue).await?;
    }
    println!("sent {MESSAGES} messages; the consumer is {backlog} behind before it starts");

    // 2. A deliberately slow listener (2 ms a message) so the lag can be seen going down.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .group(&group)
        .subscribe(&topic, "*")
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .listener_fn(move |messages, ctx| {
            let tx = tx.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                for m in &messages {
                    // Inside `consumer{…}:queue{…}` spans: RUST_LOG=debug shows whose it is.
                    tracing::debug!(offset = m.queue_offset, "handled");
                    let _ = tx.send(());
                }
                (ConsumeStatus::Success, ctx)
            }
        })
        .start()
        .await?;

    // 3. lag() while consuming, then after.
    let mut received = 0;
    let mut shown_midway = false;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while received < MESSAGES {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(())) => received += 1,
            _ => break,
        }
        if !shown_midway && received == MESSAGES / 4 {
            shown_midway = true;
            let lags = consumer.lag().await;
            let cached: u64 = lags.iter().map(|l| l.cached).sum();
            println!(
                "lag while consuming: {} (cached for the listener: {cached})",
                QueueLag::total(&lags)
            );
        }
    }
    if received < MESSAGES {
        return Err(format!("only {received} of {MESSAGES} messages consumed").into());
    }
    // The committed offsets reach the broker a moment after the last listener call returns.
    let mut lag = i64::MAX;
    while lag != 0 && tokio::time::Instant::now() < deadline {
        lag = QueueLag::total(&consumer.lag().await);
        if lag != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    println!("lag after consuming: {lag}");

    // 4. What Prometheus would scrape.
    let text = scrape(exporter.local_addr()).await?;
    println!("scraped /metrics (selected lines):");
    let wanted = [
        "rocketmq_consumer_consumed_messages_total",
        "rocketmq_consumer_pulls_total",
        "rocketmq_consumer_pulled_messages_total",
        "rocketmq_consumer_owned_queues",
        "rocketmq_consumer_rebalances_total",
    ];
    for line in text.lines() {
        if wanted.iter().any(|name| line.starts_with(name)) && line.contains(&group) {
            println!("  {line}");
        }
    }
    let consumed_ok = format!(
        "rocketmq_consumer_consumed_messages_total{{group=\"{group}\",status=\"ok\"}} {MESSAGES}"
    );

    consumer.shutdown().await;
    client.shutdown().await;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    if lag != 0 {
        return Err(format!("the lag stayed at {lag}").into());
    }
    if !text.lines().any(|line| line == consumed_ok) {
        return Err(format!("the scrape lacks `{consumed_ok}`").into());
    }
    Ok(())
}

/// `GET /metrics` as Prometheus sends it; returns the body.
async fn scrape(addr: std::net::SocketAddr) -> Result<String, Error> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (_, body) = response
        .split_once("\r\n\r\n")
        .ok_or("the exporter's answer has no HTTP head")?;
    Ok(body.to_owned())
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
