//! Flow control under a large backlog: the consumer's cache stays at its thresholds.
//!
//! ```text
//! cargo run --release --example backlog_bench -- [--count 1000000] [--queues 8] [--seconds 5]
//! ```
//!
//! Fills a topic with `count` 128-byte messages on an in-process embedded broker, then starts a
//! push consumer (default thresholds: 1,000 messages / 100 MiB per queue) whose listener takes
//! 1 ms per message, samples `pulled − consumed` (what sits in the consumer's caches) every 50 ms
//! for `seconds`, and prints the largest value next to the bound `queues × (1000 + 32)` — the
//! Java rule stops pulling a queue while it caches more than its threshold, and one pull of up to
//! 32 may already be on its way. Also prints the process's resident memory.

use std::time::Duration;

use clap::Parser;
use rocketmq_actor::{
    Client, ClientConfig, ConsumeStatus, EmbeddedCluster, EmbeddedConfig, Message, Producer,
    ProducerConfig, PushConsumer,
};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 1_000_000)]
    count: usize,
    #[arg(long, default_value_t = 8)]
    queues: i32,
    #[arg(long, default_value_t = 5)]
    seconds: u64,
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() {
    let args = Args::parse();
    actix::System::new().block_on(async move {
        let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral())
            .await
            .expect("embedded broker starts");
        let namesrv = cluster.namesrv_addr();
        let topic = "Backlog";
        cluster
            .create_topic(topic, args.queues)
            .await
            .expect("topic");
        let producer = Producer::new(
            Client::start(ClientConfig::new(&namesrv)).expect("client"),
            ProducerConfig::default(),
        );
        let mut batches = futures::stream::FuturesUnordered::new();
        let mut sent = 0;
        while sent < args.count {
            let n = 100.min(args.count - sent);
            let batch: Vec<Message> = (sent..sent + n)
                .map(|i| {
                    let mut body = format!("m{i}-").into_bytes();
                    body.resize(128, b'x');
                    Message::new(topic, body)
                })
                .collect();
            let producer = producer.clone();
            batches.push(async move { producer.send_batch(batch).await });
            sent += n;
            if batches.len() >= 16 {
                futures::StreamExt::next(&mut batches)
                    .await
                    .unwrap()
                    .expect("batch sent");
            }
        }
        while let Some(result) = futures::StreamExt::next(&mut batches).await {
            result.expect("batch sent");
        }
        let rss_before = rss_mib();
        let consumer = PushConsumer::builder()
            .namesrv_addr(&namesrv)
            .group("backlog_group")
            .subscribe(topic, "*")
            .configure(|c| {
                c.consume_from_where = rocketmq_actor::consumer::ConsumeFromWhere::FirstOffset
            })
            .listener_fn(|_messages, ctx| async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                (ConsumeStatus::Success, ctx)
            })
            .start()
            .await
            .expect("consumer starts");
        let mut max_cached = 0u64;
        let mut last = Default::default();
        for _ in 0..(args.seconds * 20) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let stats = consumer.stats().await;
            let consumed = stats.consumed_ok + stats.consumed_failed;
            max_cached = max_cached.max(stats.pulled.saturating_sub(consumed));
            last = stats;
        }
        let rss_after = rss_mib();
        consumer.shutdown().await;
        println!(
            "{}",
            serde_json::json!({
                "backlog": args.count,
                "queues": args.queues,
                "max_cached_messages": max_cached,
                "bound": args.queues as u64 * (1000 + 32),
                "pulled": last.pulled,
                "consumed": last.consumed_ok,
                "rss_mib_before_consumer": (rss_before * 10.0).round() / 10.0,
                "rss_mib_while_consuming": (rss_after * 10.0).round() / 10.0,
            })
        );
        cluster.shutdown().await;
    });
}
