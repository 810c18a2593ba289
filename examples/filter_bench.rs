//! What selecting by SQL92 costs next to selecting by tag: a topic of `--count` messages of
//! which every tenth is from the EU (tag `eu` and property `region = eu`), consumed by a push
//! consumer subscribed with the tag expression `eu`, then by one subscribed with
//! `Selector::sql("region = 'eu'")`: both get the same 10 %. Runs alternate, `--runs` of each;
//! each run is a fresh group reading the topic from its start.
//!
//! The broker should run in a process of its own, so the client's figures are the client's:
//!
//! ```text
//! cargo build --release --example filter_bench --bin rocketmq-actor
//! target/release/rocketmq-actor broker --listen 127.0.0.1:19976 --queues 8 &
//! target/release/examples/filter_bench --namesrv 127.0.0.1:19976 --count 200000
//! ```
//!
//! Without `--namesrv` an embedded broker runs in this process (on a thread of its own).
//! Prints one line per run, then one JSON line: the time per selected message of each selector
//! (wall, first message to last, and this process's CPU) and their ratio (target: SQL92 ≤
//! 1.1 × tags), for the first run (the broker evaluates the backlog for a new expression) and
//! as the median of the later ones (it answers from what it kept).

#[path = "bench_common/mod.rs"]
mod bench_common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_common::{CpuSample, Phase};
use clap::Parser;
use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::filter::Selector;
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer};

#[derive(Parser)]
struct Args {
    /// Name server of a broker in another process; without it an embedded one runs here.
    #[arg(long)]
    namesrv: Option<String>,
    /// Messages in the topic (a tenth of them selected).
    #[arg(long, default_value_t = 200_000)]
    count: usize,
    /// Runs of each selector.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..))]
    runs: u16,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// One consumer of `selector` from the topic's start until `expected` messages came.
async fn consume(
    client: &Client,
    topic: &str,
    group: String,
    selector: Selector,
    name: &'static str,
    expected: usize,
) -> Result<Phase, String> {
    let count = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Instant>();
    let done = std::sync::Mutex::new(Some(done_tx));
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<(Instant, CpuSample)>();
    let first = std::sync::Mutex::new(Some(first_tx));
    let seen = count.clone();
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .group(group)
        .subscribe(topic, selector)
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .listener_sync_fn(move |messages, _ctx| {
            let total = seen.fetch_add(messages.len(), Ordering::Relaxed) + messages.len();
            if total == messages.len() {
                if let Some(tx) = first.lock().ok().and_then(|mut f| f.take()) {
                    let _ = tx.send((Instant::now(), CpuSample::now()));
                }
            }
            if total >= expected {
                if let Some(tx) = done.lock().ok().and_then(|mut d| d.take()) {
                    let _ = tx.send(Instant::now());
                }
            }
            ConsumeStatus::Success
        })
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let ended = tokio::time::timeout(Duration::from_secs(300), done_rx)
        .await
        .map_err(|_| {
            format!(
                "{name}: {} of {expected} came",
                count.load(Ordering::Relaxed)
            )
        })?
        .map_err(|_| "the listener went away".to_owned())?;
    let (started, before) = first_rx
        .await
        .map_err(|_| "the listener went away".to_owned())?;
    // From the first message to the last: the consumer's start-up (routes, heartbeat,
    // rebalance) is the same for both selectors and not what is compared.
    let phase = Phase::measure(name, expected, ended - started, before);
    consumer.shutdown().await;
    let got = count.load(Ordering::Relaxed);
    if got != expected {
        return Err(format!("{name}: {got} messages, {expected} selected"));
    }
    Ok(phase)
}

#[actix_rt::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    bench_common::init_tracing();
    let args = Args::parse();
    let mut embedded = None;
    let namesrv = match &args.namesrv {
        Some(addr) => addr.clone(),
        None => {
            let (cluster, system) =
                bench_common::start_broker_thread(bench_common::embedded_config(1))?;
            let addr = cluster.namesrv_addr();
            embedded = Some((cluster, system));
            addr
        }
    };
    let topic = format!("FilterBench{}", bench_common::unix_millis());
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let mut batch = Vec::with_capacity(100);
    for i in 0..args.count {
        let region = if i % 10 == 0 { "eu" } else { "us" };
        batch.push(
            Message::new(&topic, vec![b'x'; 128])
                .with_tags(region)
                .with_property("region", region)
                .with_property("amount", (i % 1000).to_string()),
        );
        if batch.len() == 100 || i + 1 == args.count {
            producer.send_batch(std::mem::take(&mut batch)).await?;
        }
    }
    let expected = args.count.div_ceil(10);
    println!(
        "{} messages, {expected} selected, CPU {}",
        args.count,
        bench_common::cpu_model()
    );
    let (mut tag_wall, mut tag_cpu, mut sql_wall, mut sql_cpu) = (vec![], vec![], vec![], vec![]);
    for run in 0..args.runs {
        let tag = consume(
            &client,
            &topic,
            format!("filter_bench_tag_{run}_{}", bench_common::unix_millis()),
            Selector::tag("eu"),
            "tag",
            expected,
        )
        .await?;
        tag.print();
        let sql = consume(
            &client,
            &topic,
            format!("filter_bench_sql_{run}_{}", bench_common::unix_millis()),
            Selector::sql("region = 'eu'"),
            "sql92",
            expected,
        )
        .await?;
        sql.print();
        let per = |d: Duration| d.as_secs_f64() * 1e6 / expected as f64;
        tag_wall.push(per(tag.wall));
        tag_cpu.push(per(tag.process_cpu));
        sql_wall.push(per(sql.wall));
        sql_cpu.push(per(sql.process_cpu));
    }
    // The first run reads the backlog with a new expression: the broker evaluates every
    // message it scans. Later runs find the answers it kept (broker::selection).
    let round = |v: f64| (v * 100.0).round() / 100.0;
    let ratio = |sql: f64, tag: f64| round(sql / tag.max(f64::EPSILON));
    let later = |v: &[f64]| median(v.get(1..).unwrap_or_default().to_vec());
    println!(
        "{}",
        serde_json::json!({
            "messages": args.count,
            "selected": expected,
            "runs": args.runs,
            "first_run": {
                "tag_us_per_selected": round(tag_wall[0]),
                "sql92_us_per_selected": round(sql_wall[0]),
                "wall_ratio": ratio(sql_wall[0], tag_wall[0]),
            },
            "later_runs_median": {
                "tag_us_per_selected": round(later(&tag_wall)),
                "sql92_us_per_selected": round(later(&sql_wall)),
                "wall_ratio": ratio(later(&sql_wall), later(&tag_wall)),
                "tag_client_cpu_us_per_selected": round(later(&tag_cpu)),
                "sql92_client_cpu_us_per_selected": round(later(&sql_cpu)),
            },
        })
    );
    client.shutdown().await;
    if let Some((cluster, system)) = embedded {
        cluster.shutdown().await;
        system.stop();
    }
    Ok(())
}
