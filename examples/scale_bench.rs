//! Scale: one push consumer owning many queues, and a group of many consumers rebalancing.
//!
//! ```text
//! cargo run --release --example scale_bench -- --namesrv 127.0.0.1:19876 [--queues 1000,10000]
//!     [--members 50 --member-queues 1000]
//! ```
//!
//! Use a broker in another process (`rocketmq-actor broker --listen 127.0.0.1:19876 --brokers 2`)
//! so the figures are the client's own; without `--namesrv` an embedded cluster runs in this
//! process and its memory and CPU are counted too.
//!
//! For each count N of `--queues` (spread over the cluster's brokers, a fresh topic each):
//!
//! 1. **idle**: one push consumer (default configuration) starts on the empty topic; the time
//!    until it owns all N queues; its resident memory once they are owned, per queue (VmRSS
//!    after minus VmRSS before the consumer started); the CPU it uses over `--idle-seconds`
//!    with every long poll held and nothing to consume;
//! 2. **load**: `--per-queue` messages sent to every queue while the consumer consumes them;
//!    the peak resident memory while it does (sampled every 20 ms), per queue, and the
//!    resident memory once everything is consumed and `--idle-seconds` have passed (what
//!    stays after a burst: nothing should grow without a bound).
//!
//! Then **rebalance**: `--members` push consumers of one group, each with a client of its own
//! (as separate processes would be), over a topic of `--member-queues` queues; the time from
//! starting the last member until every queue is owned by exactly one member, and again after
//! a fifth of the members shut down.
//!
//! One closing JSON line holds every figure.

#[path = "bench_common/mod.rs"]
mod bench_common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::stream::{FuturesUnordered, StreamExt};
use rocketmq_actor::admin::{Admin, Brokers, TopicConfig};
use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::embedded::EmbeddedCluster;
use rocketmq_actor::PushConsumer;
use rocketmq_actor::{Client, ClientConfig, Message, MessageQueue, Producer, ProducerConfig};

#[derive(Parser)]
struct Args {
    /// Name server of an external cluster; without it an embedded one runs in this process.
    #[arg(long)]
    namesrv: Option<String>,
    /// Queue counts of the one-consumer measurements (comma-separated).
    #[arg(long, default_value = "1000,10000", value_delimiter = ',')]
    queues: Vec<usize>,
    /// Brokers the topics are spread over (of the embedded cluster, or of the external one:
    /// the topic is created on each broker of `--broker-names`).
    #[arg(long, default_value_t = 2)]
    brokers: usize,
    /// Seconds of idling measured.
    #[arg(long, default_value_t = 5)]
    idle_seconds: u64,
    /// Messages sent to every queue in the load phase.
    #[arg(long, default_value_t = 20)]
    per_queue: usize,
    /// Members of the rebalance measurement (0 skips it).
    #[arg(long, default_value_t = 50)]
    members: usize,
    /// Queues of the rebalance measurement's topic.
    #[arg(long, default_value_t = 1000)]
    member_queues: usize,
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmRSS:")
                    .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

fn cpu_seconds() -> f64 {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let after = stat.get(stat.rfind(')')? + 1..)?.to_owned();
            let mut fields = after.split_whitespace();
            let utime: u64 = fields.nth(11)?.parse().ok()?;
            let stime: u64 = fields.next()?.parse().ok()?;
            Some(utime + stime)
        })
        .unwrap_or(0);
    ticks as f64 / 100.0
}

/// Creates `topic` with `total` queues spread over the brokers (through the embedded cluster,
/// or the admin request of a real one).
async fn create_topic(
    client: &Client,
    cluster: Option<&EmbeddedCluster>,
    topic: &str,
    total: usize,
    brokers: usize,
) -> Result<(), String> {
    let per_broker = i32::try_from(total.div_ceil(brokers.max(1))).map_err(|e| e.to_string())?;
    match cluster {
        Some(cluster) => cluster
            .create_topic(topic, per_broker)
            .await
            .map_err(|e| e.to_string()),
        // Every master of the cluster (as mqadmin updateTopic -c does).
        None => Admin::new(client.clone())
            .create_topic(&Brokers::All, &TopicConfig::new(topic, per_broker))
            .await
            .map(drop)
            .map_err(|e| format!("create {topic}: {e}")),
    }
}

async fn owned_count(consumer: &PushConsumer) -> usize {
    consumer.owned_queues().await.len()
}

/// Waits until `done` holds, polling every 20 ms, for at most `patience`; returns the time.
async fn time_until<F, Fut>(patience: Duration, mut done: F) -> Result<Duration, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if done().await {
            return Ok(started.elapsed());
        }
        if started.elapsed() > patience {
            return Err(format!("not done within {patience:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn one_consumer(
    client: &Client,
    cluster: Option<&EmbeddedCluster>,
    queues: usize,
    args: &Args,
    stamp: u128,
) -> Result<serde_json::Value, String> {
    let topic = format!("ScaleBench_{stamp}_{queues}");
    create_topic(client, cluster, &topic, queues, args.brokers).await?;
    let route = client
        .refresh_route(&topic)
        .await
        .map_err(|e| e.to_string())?;
    let total_queues = route.consume_queues.len();
    let consumed = Arc::new(AtomicUsize::new(0));
    let counter = consumed.clone();
    let rss_before = rss_kib();
    let started = Instant::now();
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .group(format!("scale_bench_{}_{queues}", std::process::id()))
        .subscribe(&topic, "*")
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .listener_fn(move |messages, ctx| {
            counter.fetch_add(messages.len(), Ordering::Relaxed);
            async move { (ConsumeStatus::Success, ctx) }
        })
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let owning = time_until(Duration::from_secs(120), || async {
        owned_count(&consumer).await >= total_queues
    })
    .await?;
    let to_own_all = started.elapsed();
    let _ = owning;
    // Every queue's first pull parked.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_idle = rss_kib();
    let cpu_before = cpu_seconds();
    let idle_started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let idle_cpu = cpu_seconds() - cpu_before;
    let idle_wall = idle_started.elapsed().as_secs_f64();

    // Load: every queue gets `per_queue` messages while the consumer consumes.
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let peak = Arc::new(AtomicUsize::new(rss_idle as usize));
    let sampling = {
        let peak = peak.clone();
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        actix_rt::spawn(async move {
            loop {
                peak.fetch_max(rss_kib() as usize, Ordering::Relaxed);
                tokio::select! {
                    _ = &mut stop_rx => return,
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
        });
        stop_tx
    };
    let expected = total_queues * args.per_queue;
    let load_started = Instant::now();
    let queues_list: Vec<MessageQueue> = route.produce_queues.clone();
    let mut in_flight = FuturesUnordered::new();
    for round in 0..args.per_queue {
        for queue in &queues_list {
            if in_flight.len() >= 256 {
                if let Some(Err(e)) = in_flight.next().await {
                    return Err(format!("send failed: {e}"));
                }
            }
            let producer = &producer;
            let message = Message::new(&topic, format!("scale-{round}"));
            in_flight.push(async move { producer.send_to_queue(message, queue).await });
        }
    }
    while let Some(result) = in_flight.next().await {
        result.map_err(|e| format!("send failed: {e}"))?;
    }
    time_until(Duration::from_secs(120), || async {
        consumed.load(Ordering::Relaxed) >= expected
    })
    .await?;
    let load_seconds = load_started.elapsed().as_secs_f64();
    let _ = sampling.send(());
    let rss_peak = peak.load(Ordering::Relaxed) as u64;
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let rss_after = rss_kib();
    consumer.shutdown().await;

    let per_queue = |rss: u64| rss.saturating_sub(rss_before) as f64 * 1024.0 / total_queues as f64;
    let result = serde_json::json!({
        "queues": total_queues,
        "seconds_to_own_all": (to_own_all.as_secs_f64() * 1000.0).round() / 1000.0,
        "rss_before_kib": rss_before,
        "idle_bytes_per_queue": per_queue(rss_idle).round(),
        "idle_cpu_percent": (idle_cpu / idle_wall * 1000.0).round() / 10.0,
        "load_messages": expected,
        "load_seconds": (load_seconds * 1000.0).round() / 1000.0,
        "peak_bytes_per_queue": per_queue(rss_peak).round(),
        "after_load_bytes_per_queue": per_queue(rss_after).round(),
    });
    println!(
        "  {total_queues:>6} queues: owned in {:.2} s; idle {:.0} B/queue, {:.1} % CPU; load of {expected} msgs in {load_seconds:.2} s, peak {:.0} B/queue, after {:.0} B/queue",
        to_own_all.as_secs_f64(),
        per_queue(rss_idle),
        idle_cpu / idle_wall * 100.0,
        per_queue(rss_peak),
        per_queue(rss_after),
    );
    Ok(result)
}

/// Every queue of the topic owned by exactly one of `members`.
async fn balanced(members: &[PushConsumer], total_queues: usize) -> bool {
    let mut owners: HashMap<MessageQueue, usize> = HashMap::new();
    for member in members {
        // The group's retry queues are owned too; the topic's are what is measured.
        for queue in member.owned_queues().await {
            if !queue.topic.starts_with("%RETRY%") {
                *owners.entry(queue).or_default() += 1;
            }
        }
    }
    let done = owners.len() == total_queues && owners.values().all(|n| *n == 1);
    if !done && std::env::var_os("SCALE_BENCH_DEBUG").is_some() {
        let shared = owners.values().filter(|n| **n > 1).count();
        eprintln!(
            "owned {} of {total_queues}, {shared} by more than one member",
            owners.len()
        );
    }
    done
}

async fn rebalance(
    namesrv: &str,
    client: &Client,
    cluster: Option<&EmbeddedCluster>,
    args: &Args,
    stamp: u128,
) -> Result<serde_json::Value, String> {
    let topic = format!("ScaleBenchGroup_{stamp}");
    create_topic(client, cluster, &topic, args.member_queues, args.brokers).await?;
    let route = client
        .refresh_route(&topic)
        .await
        .map_err(|e| e.to_string())?;
    let total_queues = route.consume_queues.len();
    let group = format!("scale_bench_group_{}", std::process::id());
    let mut members = Vec::new();
    for i in 0..args.members {
        let mut config = ClientConfig::new(namesrv);
        config.instance_name = Some(format!("scale-{i}"));
        let member = PushConsumer::builder()
            .client_config(config)
            .group(group.clone())
            .subscribe(&topic, "*")
            .listener_fn(|_, ctx| async move { (ConsumeStatus::Success, ctx) })
            .start()
            .await
            .map_err(|e| e.to_string())?;
        members.push(member);
    }
    let join = time_until(Duration::from_secs(180), || {
        balanced(&members, total_queues)
    })
    .await?;
    let leaving = args.members / 5;
    let left_started = Instant::now();
    for member in members.drain(..leaving) {
        member.shutdown().await;
    }
    let shutdown = left_started.elapsed();
    let leave = time_until(Duration::from_secs(180), || {
        balanced(&members, total_queues)
    })
    .await?;
    for member in members {
        member.shutdown().await;
    }
    println!(
        "  rebalance: {} members over {total_queues} queues balanced {:.2} s after the last started; {leaving} left (shutdown {:.2} s), balanced again {:.2} s later",
        args.members,
        join.as_secs_f64(),
        shutdown.as_secs_f64(),
        leave.as_secs_f64()
    );
    Ok(serde_json::json!({
        "members": args.members,
        "queues": total_queues,
        "join_balanced_seconds": (join.as_secs_f64() * 1000.0).round() / 1000.0,
        "left": leaving,
        "leave_balanced_seconds": (leave.as_secs_f64() * 1000.0).round() / 1000.0,
    }))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    bench_common::init_tracing();
    let args = Args::parse();
    let stamp = bench_common::unix_millis();
    let mut target = bench_common::Target::new(args.namesrv.clone(), args.brokers)?;
    let namesrv = target.namesrv.clone();
    println!("scale_bench: {}", target.describe(args.brokers));
    let system = actix::System::new();
    let outcome: Result<(), String> = system.block_on(async {
        let client = Client::start(ClientConfig::new(&namesrv)).map_err(|e| e.to_string())?;
        let mut singles = Vec::new();
        for &queues in &args.queues {
            singles.push(
                one_consumer(&client, target.cluster.as_ref(), queues, &args, stamp).await?,
            );
        }
        let group = if args.members > 0 {
            Some(rebalance(&namesrv, &client, target.cluster.as_ref(), &args, stamp).await?)
        } else {
            None
        };
        println!(
            "{}",
            serde_json::json!({
                "broker": if target.cluster.is_some() { "embedded, in process" } else { "external" },
                "one_consumer": singles,
                "rebalance": group,
            })
        );
        client.shutdown().await;
        target.shutdown_cluster().await;
        Ok(())
    });
    target.stop();
    outcome.map_err(Into::into)
}
