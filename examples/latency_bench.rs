//! Latency at a steady rate: from a message's send to the push consumer's listener, and the
//! same for a raw long-polling pull loop (the ceiling), on one broker in one run.
//!
//! ```text
//! cargo run --release --example latency_bench [-- --rates 1000,10000 --seconds 5]
//! cargo run --release --example latency_bench -- --namesrv 127.0.0.1:19876
//! ```
//!
//! Without `--namesrv` an embedded cluster runs on a thread of its own in this process; with
//! it, the bench uses that name server (`rocketmq-actor broker --listen 127.0.0.1:19876` in
//! another process, or a real cluster from `scripts/real-cluster.sh`).
//!
//! For each rate R and each consumer kind (`raw`: one long-polling PULL_MESSAGE loop per queue,
//! no consumer runtime; `push`: a push consumer with the default configuration), it sends to a
//! fresh topic for `--seconds` at R messages per second (message i leaves i/R s after the
//! start, as `rocketmq-actor produce --rate R` does), each stamped with the moment of its send
//! on this process's monotonic clock, and records for every message the time until the
//! consumer had it (microsecond resolution; the broker's `BORNTIMESTAMP` is in milliseconds).
//! The first second of each run is a warm-up and not counted. It prints p50, p99, p99.9 and
//! max in milliseconds and one closing JSON line.

#[path = "bench_common/mod.rs"]
mod bench_common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::stream::{FuturesUnordered, StreamExt};
use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::embedded::EmbeddedCluster;
use rocketmq_actor::rpc::PullRequest;
use rocketmq_actor::PushConsumer;
use rocketmq_actor::{Client, ClientConfig, Message, MessageExt, Producer, ProducerConfig};

#[derive(Parser)]
struct Args {
    /// Name server of an external cluster; without it an embedded one runs in this process.
    #[arg(long)]
    namesrv: Option<String>,
    /// Steady send rates to measure, messages per second.
    #[arg(long, default_value = "1000,10000", value_delimiter = ',')]
    rates: Vec<u32>,
    /// Seconds of sending per rate and kind, after a one-second warm-up.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Body size in bytes.
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Consumer kinds to measure (comma-separated: raw, push).
    #[arg(long, default_value = "raw,push", value_delimiter = ',')]
    kinds: Vec<String>,
    /// Brokers of the embedded cluster.
    #[arg(long, default_value_t = 2)]
    brokers: usize,
    /// Queues per broker of the embedded cluster's topics.
    #[arg(long, default_value_t = 4)]
    queues: i32,
}

/// The property that carries a message's send moment (µs on [`epoch`]'s clock).
const SENT_US: &str = "bench_sent_us";

/// The zero of this process's monotonic clock for the stamps.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_us() -> u64 {
    u64::try_from(epoch().elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Latencies (µs) of the messages sent after the warm-up.
#[derive(Default)]
struct Samples {
    /// Messages stamped at or after this moment are counted.
    counted_from_us: u64,
    latencies_us: Vec<u64>,
}

impl Samples {
    fn record(&mut self, message: &MessageExt, now: u64) {
        let Some(sent) = message
            .property(SENT_US)
            .and_then(|v| v.parse::<u64>().ok())
        else {
            return;
        };
        if sent >= self.counted_from_us {
            self.latencies_us.push(now.saturating_sub(sent));
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

/// Sends at `rate` per second for `warmup + seconds`; stamps each message with its send time.
/// Returns how many were sent after the warm-up began counting, and the counting start.
async fn send_steadily(
    producer: &Producer,
    topic: &str,
    rate: u32,
    seconds: u64,
    size: usize,
    samples: &Mutex<Samples>,
) -> Result<usize, String> {
    let warmup = rate as usize;
    let total = warmup + rate as usize * seconds as usize;
    let body = bytes::Bytes::from(vec![b'l'; size]);
    let started = tokio::time::Instant::now();
    let mut in_flight = FuturesUnordered::new();
    let mut next = 0usize;
    let mut failed = 0usize;
    while next < total || !in_flight.is_empty() {
        let due = started + Duration::from_secs_f64(next as f64 / f64::from(rate));
        tokio::select! {
            biased;
            Some(result) = in_flight.next(), if !in_flight.is_empty() => {
                let result: rocketmq_actor::Result<_> = result;
                if result.is_err() {
                    failed += 1;
                }
            }
            _ = tokio::time::sleep_until(due), if next < total && in_flight.len() < 1024 => {
                if next == warmup {
                    lock(samples).counted_from_us = now_us();
                }
                let message = Message::new(topic, body.clone())
                    .with_property(SENT_US, now_us().to_string());
                in_flight.push(producer.send(message));
                next += 1;
            }
        }
    }
    if failed > 0 {
        return Err(format!("{failed} of {total} sends failed"));
    }
    Ok(total - warmup)
}

fn lock(samples: &Mutex<Samples>) -> std::sync::MutexGuard<'_, Samples> {
    samples.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until `samples` holds `expected` latencies or `patience` runs out.
async fn wait_for(samples: &Mutex<Samples>, expected: usize, patience: Duration) -> usize {
    let deadline = Instant::now() + patience;
    loop {
        let got = lock(samples).latencies_us.len();
        if got >= expected || Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One measurement: a consumer of `kind` on a fresh topic while messages go at `rate`.
async fn measure(
    client: &Client,
    cluster: Option<&EmbeddedCluster>,
    kind: &str,
    rate: u32,
    args: &Args,
    stamp: u128,
) -> Result<serde_json::Value, String> {
    let topic = format!("LatencyBench_{stamp}_{kind}_{rate}");
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    match cluster {
        Some(cluster) => cluster
            .create_topic(&topic, args.queues)
            .await
            .map_err(|e| e.to_string())?,
        None => {
            producer
                .send(Message::new(&topic, "create"))
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    let samples = Arc::new(Mutex::new(Samples {
        counted_from_us: u64::MAX,
        ..Samples::default()
    }));
    let group = format!("latency_bench_{}_{kind}_{rate}", std::process::id());
    // The consumer starts at the queues' current end and is in place before sending begins.
    let mut stop_raw = Vec::new();
    let mut push = None;
    match kind {
        "raw" => {
            let queues = client
                .fetch_subscribe_message_queues(&topic)
                .await
                .map_err(|e| e.to_string())?;
            for queue in queues {
                let start = client.max_offset(&queue).await.map_err(|e| e.to_string())?;
                let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
                stop_raw.push(stop_tx);
                let client = client.clone();
                let samples = samples.clone();
                let group = group.clone();
                actix_rt::spawn(async move {
                    let mut offset = start;
                    loop {
                        let request = PullRequest::new(group.as_str(), queue.clone(), offset)
                            .long_poll(Duration::from_secs(5));
                        let pulled = tokio::select! {
                            _ = &mut stop_rx => return,
                            pulled = client.pull(&request) => pulled,
                        };
                        match pulled {
                            Ok(result) => {
                                let now = now_us();
                                let mut samples = lock(&samples);
                                for message in &result.messages {
                                    samples.record(message, now);
                                }
                                offset = result.next_begin_offset.max(offset);
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                        }
                    }
                });
            }
        }
        "push" => {
            let listener_samples = samples.clone();
            let consumer = PushConsumer::builder()
                .client(client.clone())
                .group(group)
                .subscribe(&topic, "*")
                .configure(|c| c.consume_from_where = ConsumeFromWhere::LastOffset)
                .listener_fn(move |messages, ctx| {
                    let now = now_us();
                    let mut samples = lock(&listener_samples);
                    for message in &messages {
                        samples.record(message, now);
                    }
                    async move { (ConsumeStatus::Success, ctx) }
                })
                .start()
                .await
                .map_err(|e| e.to_string())?;
            // Owning every queue before the first send: the rebalance is done.
            let deadline = Instant::now() + Duration::from_secs(10);
            while consumer.owned_queues().await.len() < (args.queues as usize * args.brokers)
                && cluster.is_some()
                && Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            push = Some(consumer);
        }
        other => return Err(format!("unknown kind {other:?} (raw, push)")),
    }
    // Pulls parked before the first send.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = send_steadily(&producer, &topic, rate, args.seconds, args.size, &samples).await?;
    let got = wait_for(&samples, sent, Duration::from_secs(10)).await;
    for stop in stop_raw {
        let _ = stop.send(());
    }
    if let Some(consumer) = push {
        consumer.shutdown().await;
    }
    let mut latencies = std::mem::take(&mut lock(&samples).latencies_us);
    latencies.sort_unstable();
    if got < sent {
        return Err(format!(
            "{kind} at {rate}/s received {got} of {sent} messages"
        ));
    }
    let result = serde_json::json!({
        "kind": kind,
        "rate": rate,
        "messages": latencies.len(),
        "p50_ms": percentile(&latencies, 50.0),
        "p99_ms": percentile(&latencies, 99.0),
        "p999_ms": percentile(&latencies, 99.9),
        "max_ms": latencies.last().copied().unwrap_or(0) as f64 / 1000.0,
    });
    println!(
        "  {kind:<5} {rate:>6}/s {:>7} msgs  p50 {:>7.3} ms  p99 {:>7.3} ms  p99.9 {:>7.3} ms  max {:>7.3} ms",
        latencies.len(),
        result["p50_ms"].as_f64().unwrap_or(0.0),
        result["p99_ms"].as_f64().unwrap_or(0.0),
        result["p999_ms"].as_f64().unwrap_or(0.0),
        result["max_ms"].as_f64().unwrap_or(0.0),
    );
    Ok(result)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    bench_common::init_tracing();
    let args = Args::parse();
    epoch();
    let stamp = bench_common::unix_millis();
    let mut target = bench_common::Target::new(args.namesrv.clone(), args.brokers)?;
    let namesrv = target.namesrv.clone();
    println!(
        "latency_bench: {}, {} s per rate after a 1 s warm-up, {} B bodies",
        target.describe(args.brokers),
        args.seconds,
        args.size
    );
    let system = actix::System::new();
    let outcome: Result<(), String> = system.block_on(async {
        let client = Client::start(ClientConfig::new(&namesrv)).map_err(|e| e.to_string())?;
        let mut results = Vec::new();
        for &rate in &args.rates {
            for kind in &args.kinds {
                results.push(
                    measure(&client, target.cluster.as_ref(), kind, rate.max(1), &args, stamp).await?,
                );
            }
        }
        println!(
            "{}",
            serde_json::json!({
                "broker": if target.cluster.is_some() { "embedded, in process" } else { "external" },
                "seconds": args.seconds,
                "size": args.size,
                "results": results,
            })
        );
        client.shutdown().await;
        target.shutdown_cluster().await;
        Ok(())
    });
    target.stop();
    outcome.map_err(Into::into)
}
