//! Throughput of queue-ordered against key-ordered consumption with a slow listener.
//!
//! ```text
//! cargo run --release --example orderly_bench -- [--count 20000] [--keys 1000] [--queues 8]
//!     [--listener-ms 1] [--concurrency 64]
//! ```
//!
//! Starts an embedded broker in-process, sends `count` messages over `keys` keys (each key's
//! messages in order, so each key lives in one queue), then consumes them twice from offset 0 —
//! queue-ordered and key-ordered — with a listener that takes `listener-ms` per message, and
//! prints the rate of each. Queue-ordered runs at most one call per queue; key-ordered runs one
//! call per key, up to the concurrency limit.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use rocketmq_actor::{
    Client, ClientConfig, EmbeddedCluster, EmbeddedConfig, Message, OrderlyStatus, Producer,
    ProducerConfig, PushConsumer,
};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 20_000)]
    count: usize,
    #[arg(long, default_value_t = 1000)]
    keys: usize,
    #[arg(long, default_value_t = 8)]
    queues: i32,
    #[arg(long, default_value_t = 1)]
    listener_ms: u64,
    #[arg(long, default_value_t = 64)]
    concurrency: u32,
}

async fn run(args: &Args, namesrv: &str, topic: &str, key_ordered: bool) -> f64 {
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (tx, rx) = tokio::sync::oneshot::channel::<Instant>();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let (target, pause) = (args.count, Duration::from_millis(args.listener_ms));
    let counter = done.clone();
    let started = Instant::now();
    let consumer = PushConsumer::builder()
        .namesrv_addr(namesrv)
        .group(if key_ordered {
            "bench_by_key"
        } else {
            "bench_by_queue"
        })
        .subscribe(topic, "*")
        .configure(|c| {
            c.consume_from_where = rocketmq_actor::consumer::ConsumeFromWhere::FirstOffset;
            c.consume_concurrency_max = Some(args.concurrency);
        })
        .key_ordered(key_ordered)
        .orderly_listener_fn(move |messages, ctx| {
            let (counter, tx) = (counter.clone(), tx.clone());
            async move {
                tokio::time::sleep(pause).await;
                let total = counter.fetch_add(messages.len(), std::sync::atomic::Ordering::Relaxed)
                    + messages.len();
                if total >= target {
                    if let Some(tx) = tx.lock().unwrap_or_else(|e| e.into_inner()).take() {
                        let _ = tx.send(Instant::now());
                    }
                }
                (OrderlyStatus::Success, ctx)
            }
        })
        .start()
        .await
        .expect("consumer starts");
    let finished = rx.await.expect("all messages consumed");
    consumer.shutdown().await;
    args.count as f64 / (finished - started).as_secs_f64()
}

fn main() {
    let args = Args::parse();
    actix::System::new().block_on(async move {
        let cluster = EmbeddedCluster::start(EmbeddedConfig {
            queues: args.queues,
            ..EmbeddedConfig::ephemeral()
        })
        .await
        .expect("embedded broker starts");
        let namesrv = cluster.namesrv_addr();
        let topic = "OrderlyBench";
        cluster
            .create_topic(topic, args.queues)
            .await
            .expect("topic");
        let producer = Producer::new(
            Client::start(ClientConfig::new(&namesrv)).expect("client"),
            ProducerConfig::default(),
        );
        let per_key = (0..args.keys).map(|k| {
            let producer = producer.clone();
            let count = args.count;
            let keys = args.keys;
            async move {
                let key = format!("k{k}");
                let mut i = k;
                while i < count {
                    let message = Message::new(topic, format!("{key}:{}", i / keys));
                    producer.send_with_key(message, &key).await.expect("send");
                    i += keys;
                }
            }
        });
        futures::future::join_all(per_key).await;
        let by_queue = run(&args, &namesrv, topic, false).await;
        let by_key = run(&args, &namesrv, topic, true).await;
        println!(
            "{}",
            serde_json::json!({
                "count": args.count,
                "keys": args.keys,
                "queues": args.queues,
                "listener_ms": args.listener_ms,
                "concurrency": args.concurrency,
                "queue_ordered_msgs_per_sec": by_queue.round(),
                "key_ordered_msgs_per_sec": by_key.round(),
                "speedup": (by_key / by_queue * 100.0).round() / 100.0,
            })
        );
        cluster.shutdown().await;
    });
}
