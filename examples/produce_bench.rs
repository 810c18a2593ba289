//! Producer throughput and CPU cost: a raw pipelined send loop versus `Producer::send` and
//! `Producer::send_batch`, over the same broker in one run.
//!
//! ```text
//! cargo run --release --example produce_bench [-- --count 200000 --size 128]
//! cargo run --release --example produce_bench -- --namesrv 127.0.0.1:19876
//! ```
//!
//! Without `--namesrv` an embedded cluster runs on a thread of its own in this process (then
//! the process CPU includes the broker's work and only the main thread's figure is the
//! client's); with it, the bench uses that name server (`rocketmq-actor broker --listen
//! 127.0.0.1:19876 --brokers 2` in another process, or a real cluster).
//!
//! Phases, each sending `--count` messages of `--size` bytes to a fresh topic with
//! `--inflight` requests in flight:
//!
//! 1. **raw**: SEND_MESSAGE_V2 commands built from the typed header and sent with
//!    `Client::request`, queues taken round-robin from the route — no producer runtime (no
//!    unique ids, validation, retries or hooks);
//! 2. **send**: `Producer::send` of single messages;
//! 3. **batch**: `Producer::send_batch` of `--batch` messages per request.
//!
//! It prints msgs/s and CPU µs per message for each, the send/raw ratios, and one closing JSON
//! line (`send_over_raw`, per-phase `process_cpu_us_per_msg` and `main_thread_cpu_us_per_msg`).

#[path = "bench_common/mod.rs"]
mod bench_common;

use std::time::{Duration, Instant};

use bench_common::{CpuSample, Phase};
use bytes::Bytes;
use clap::Parser;
use futures::stream::{FuturesUnordered, StreamExt};
use rocketmq_actor::message::Topic;
use rocketmq_actor::protocol::codes::{request_code, response_code};
use rocketmq_actor::protocol::header::{SendMessageRequestHeader, SendMessageRequestHeaderV2};
use rocketmq_actor::protocol::RemotingCommand;
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig};

#[derive(Parser)]
struct Args {
    /// Name server of an external cluster; without it an embedded one runs in this process.
    #[arg(long)]
    namesrv: Option<String>,
    /// Messages per phase.
    #[arg(long, default_value_t = 200_000)]
    count: usize,
    /// Body size in bytes.
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    inflight: usize,
    /// Messages per `send_batch` request in the batch phase.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Brokers of the embedded cluster.
    #[arg(long, default_value_t = 2)]
    brokers: usize,
    /// Queues per broker of the embedded cluster's topics.
    #[arg(long, default_value_t = 8)]
    queues: i32,
    /// The phases to run (comma-separated).
    #[arg(long, default_value = "raw,send,batch", value_delimiter = ',')]
    phases: Vec<String>,
}

fn body(size: usize) -> Bytes {
    Bytes::from(vec![b'x'; size])
}

/// The raw loop: typed SEND_MESSAGE_V2 commands, `inflight` at once, queues round-robin.
async fn raw_phase(client: &Client, topic: &str, args: &Args) -> Result<Phase, String> {
    let route = client
        .refresh_route(topic)
        .await
        .map_err(|e| e.to_string())?;
    let queues: Vec<_> = route
        .produce_queues
        .iter()
        .filter_map(|q| {
            route
                .master_addr(&q.broker_name)
                .map(|addr| (q.clone(), addr.to_owned()))
        })
        .collect();
    if queues.is_empty() {
        return Err(format!("no queue of {topic} has a master"));
    }
    let payload = body(args.size);
    let before = CpuSample::now();
    let started = Instant::now();
    let mut in_flight = FuturesUnordered::new();
    let mut next = 0usize;
    let mut done = 0usize;
    let mut busy = 0usize;
    while done < args.count {
        while next < args.count && in_flight.len() < args.inflight {
            let (queue, addr) = &queues[next % queues.len()];
            let header = SendMessageRequestHeaderV2(SendMessageRequestHeader {
                producer_group: "produce_bench_raw".into(),
                topic: topic.to_owned(),
                default_topic: "TBW102".into(),
                default_topic_queue_nums: 4,
                queue_id: queue.queue_id,
                born_timestamp: 0,
                bname: Some(queue.broker_name.clone()),
                ..SendMessageRequestHeader::default()
            });
            let command =
                RemotingCommand::request_with_header(request_code::SEND_MESSAGE_V2, &header)
                    .with_body(payload.clone());
            in_flight.push(client.request(addr, command, Duration::from_secs(10)));
            next += 1;
        }
        match in_flight.next().await {
            Some(Ok(response)) if response.code == response_code::SUCCESS => done += 1,
            Some(Ok(response)) if response.code == response_code::SYSTEM_BUSY => {
                // A broker in flow control (the real one under load): send that one again
                // after a pause, as any client must.
                busy += 1;
                next -= 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Some(Ok(response)) => {
                return Err(format!(
                    "raw send answered {}: {}",
                    response.code,
                    response.remark.unwrap_or_default()
                ))
            }
            Some(Err(e)) => return Err(format!("raw send failed: {e}")),
            None => break,
        }
    }
    if busy > 0 {
        println!(
            "  (raw: the broker answered SYSTEM_BUSY {busy} times; those sends were repeated)"
        );
    }
    Ok(Phase::measure("raw", done, started.elapsed(), before))
}

/// `Producer::send` (single messages) or `Producer::send_batch` (`batch` > 1), `inflight` at once.
async fn producer_phase(
    client: &Client,
    topic: &str,
    args: &Args,
    batch: usize,
) -> Result<Phase, String> {
    let producer = Producer::new(
        client.clone(),
        ProducerConfig {
            group: "produce_bench".into(),
            ..ProducerConfig::default()
        },
    );
    let payload = body(args.size);
    // One shared topic name for every message, as an application sending to one topic keeps it.
    let topic = Topic::from(topic);
    let name = if batch > 1 { "batch" } else { "send" };
    let requests = args.count.div_ceil(batch);
    let before = CpuSample::now();
    let started = Instant::now();
    let mut in_flight = FuturesUnordered::new();
    let (mut issued, mut sent) = (0usize, 0usize);
    while sent < args.count {
        while issued < requests && in_flight.len() < args.inflight {
            let n = batch.min(args.count - issued * batch);
            let producer = &producer;
            let payload = payload.clone();
            let topic = topic.clone();
            in_flight.push(async move {
                let result = if n > 1 {
                    let messages = (0..n)
                        .map(|_| Message::new(topic.clone(), payload.clone()))
                        .collect();
                    producer.send_batch(messages).await
                } else {
                    producer.send(Message::new(topic, payload)).await
                };
                result.map(|_| n)
            });
            issued += 1;
        }
        match in_flight.next().await {
            Some(Ok(n)) => sent += n,
            Some(Err(e)) => return Err(format!("{name} failed: {e}")),
            None => break,
        }
    }
    Ok(Phase::measure(name, sent, started.elapsed(), before))
}

/// Creates `topic` on every broker of an external cluster, through auto-creation: one send to a
/// queue of each broker the auto-create route lists, then waits until the name server's route
/// lists them all. Every phase then sends over the same brokers and connections: a topic
/// auto-created by one send lives on one broker only, and a raw loop reading the name server's
/// route would then use one connection where the producer, still on the auto-create route,
/// uses all of them (smaller write batches each, more system calls).
async fn create_on_every_broker(client: &Client, topic: &str) -> Result<(), String> {
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    producer
        .send(Message::new(topic, "warm-up"))
        .await
        .map_err(|e| e.to_string())?;
    let template = client
        .cached_route(topic)
        .ok_or_else(|| format!("no route cached for {topic} after a send"))?;
    let mut brokers: Vec<_> = template
        .produce_queues
        .iter()
        .map(|q| q.broker_name.clone())
        .collect();
    brokers.sort();
    brokers.dedup();
    for broker in &brokers {
        if let Some(queue) = template
            .produce_queues
            .iter()
            .find(|q| &q.broker_name == broker)
        {
            producer
                .send_to_queue(Message::new(topic, "warm-up"), queue)
                .await
                .map_err(|e| format!("warm-up send to {broker}: {e}"))?;
        }
    }
    // Brokers register new topics with the name server on their own schedule.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let route = client
            .refresh_route(topic)
            .await
            .map_err(|e| e.to_string())?;
        let listed = brokers
            .iter()
            .all(|b| route.produce_queues.iter().any(|q| &q.broker_name == b));
        if listed {
            return Ok(());
        }
        if Instant::now() >= deadline {
            // Measured anyway, and said: the phases may then use different brokers.
            eprintln!(
                "produce_bench: the name server lists {topic} on {} of {} brokers after 30 s",
                route
                    .produce_queues
                    .iter()
                    .map(|q| q.broker_name.as_str())
                    .collect::<std::collections::BTreeSet<_>>()
                    .len(),
                brokers.len()
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    bench_common::init_tracing();
    let args = Args::parse();
    let stamp = bench_common::unix_millis();
    let mut target = bench_common::Target::new(args.namesrv.clone(), args.brokers)?;
    let namesrv = target.namesrv.clone();
    println!(
        "produce_bench: {}, {} x {} B per phase, {} in flight",
        target.describe(args.brokers),
        args.count,
        args.size,
        args.inflight
    );
    let system = actix::System::new();
    let outcome: Result<(), String> = system.block_on(async {
        let client = Client::start(ClientConfig::new(&namesrv)).map_err(|e| e.to_string())?;
        let mut phases = Vec::new();
        for name in &args.phases {
            // A fresh topic per phase, created on every broker up front.
            let topic = format!("ProduceBench_{stamp}_{name}");
            if let Some(cluster) = &target.cluster {
                cluster
                    .create_topic(&topic, args.queues)
                    .await
                    .map_err(|e| e.to_string())?;
            } else {
                create_on_every_broker(&client, &topic).await?;
            }
            let phase = match name.as_str() {
                "raw" => raw_phase(&client, &topic, &args).await?,
                "send" => producer_phase(&client, &topic, &args, 1).await?,
                "batch" => producer_phase(&client, &topic, &args, args.batch.max(2)).await?,
                other => return Err(format!("unknown phase {other:?} (raw, send, batch)")),
            };
            phase.print();
            phases.push(phase);
        }
        let raw = phases.iter().find(|p| p.name == "raw");
        let mut summary = serde_json::json!({
            "broker": if target.cluster.is_some() { "embedded, in process" } else { "external" },
            "count": args.count,
            "size": args.size,
            "inflight": args.inflight,
            "batch": args.batch,
            "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        });
        for phase in &phases {
            summary[phase.name] = phase.json();
            if let (Some(raw), true) = (raw, phase.name != "raw") {
                let ratio = phase.rate() / raw.rate().max(f64::EPSILON);
                println!("  {}/raw throughput {ratio:.2}", phase.name);
                summary[format!("{}_over_raw", phase.name)] =
                    ((ratio * 1000.0).round() / 1000.0).into();
            }
        }
        println!("{summary}");
        client.shutdown().await;
        target.shutdown_cluster().await;
        Ok(())
    });
    target.stop();
    outcome.map_err(Into::into)
}
