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

use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use futures::stream::{FuturesUnordered, StreamExt};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
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

/// CPU time (utime + stime) of a `/proc/.../stat` file, in clock ticks.
fn cpu_ticks(stat_path: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(stat_path).ok()?;
    let after_name = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = after_name.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100)
}

/// The process's and the calling thread's CPU time so far.
#[derive(Clone, Copy)]
struct CpuSample {
    process: u64,
    thread: u64,
}

impl CpuSample {
    fn now() -> Self {
        let tid = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        CpuSample {
            process: cpu_ticks("/proc/self/stat").unwrap_or(0),
            thread: cpu_ticks(&format!("/proc/self/task/{tid}/stat")).unwrap_or(0),
        }
    }
}

struct Phase {
    name: &'static str,
    messages: usize,
    wall: Duration,
    process_cpu: Duration,
    thread_cpu: Duration,
}

impl Phase {
    fn measure(name: &'static str, messages: usize, started: Instant, before: CpuSample) -> Self {
        let wall = started.elapsed();
        let after = CpuSample::now();
        let tick = Duration::from_secs(1) / ticks_per_second() as u32;
        Phase {
            name,
            messages,
            wall,
            process_cpu: tick * (after.process.saturating_sub(before.process)) as u32,
            thread_cpu: tick * (after.thread.saturating_sub(before.thread)) as u32,
        }
    }

    fn rate(&self) -> f64 {
        self.messages as f64 / self.wall.as_secs_f64().max(f64::EPSILON)
    }

    fn us_per_msg(cpu: Duration, messages: usize) -> f64 {
        cpu.as_secs_f64() * 1e6 / messages.max(1) as f64
    }

    fn print(&self) {
        println!(
            "  {:<6} {:>8} msgs in {:>7.3} s = {:>9.0} msgs/s | CPU process {:>5.2} s ({:>5.2} µs/msg), main thread {:>5.2} s ({:>5.2} µs/msg)",
            self.name,
            self.messages,
            self.wall.as_secs_f64(),
            self.rate(),
            self.process_cpu.as_secs_f64(),
            Phase::us_per_msg(self.process_cpu, self.messages),
            self.thread_cpu.as_secs_f64(),
            Phase::us_per_msg(self.thread_cpu, self.messages),
        );
    }

    fn json(&self) -> serde_json::Value {
        let round2 = |v: f64| (v * 100.0).round() / 100.0;
        serde_json::json!({
            "messages": self.messages,
            "seconds": (self.wall.as_secs_f64() * 1000.0).round() / 1000.0,
            "msgs_per_sec": self.rate().round(),
            "process_cpu_us_per_msg": round2(Phase::us_per_msg(self.process_cpu, self.messages)),
            "main_thread_cpu_us_per_msg": round2(Phase::us_per_msg(self.thread_cpu, self.messages)),
        })
    }
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
    Ok(Phase::measure("raw", done, started, before))
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
            in_flight.push(async move {
                let result = if n > 1 {
                    let messages = (0..n)
                        .map(|_| Message::new(topic, payload.clone()))
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
    Ok(Phase::measure(name, sent, started, before))
}

fn start_broker_thread(brokers: usize) -> Result<(EmbeddedCluster, actix::System), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let system = actix::System::new();
        let cluster = system.block_on(EmbeddedCluster::start(EmbeddedConfig {
            brokers,
            ..EmbeddedConfig::ephemeral()
        }));
        match cluster {
            Ok(cluster) => {
                let _ = tx.send(Ok((cluster, actix::System::current())));
                let _ = system.run();
            }
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
            }
        }
    });
    rx.recv()
        .map_err(|_| "the broker thread died".to_owned())?
        .map_err(|e| format!("cannot start the embedded cluster: {e}"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let (namesrv, embedded) = match args.namesrv.clone() {
        Some(addr) => (addr, None),
        None => {
            let (cluster, system) = start_broker_thread(args.brokers)?;
            (cluster.namesrv_addr(), Some((cluster, system)))
        }
    };
    println!(
        "produce_bench: {} ({} CPUs), {} x {} B per phase, {} in flight",
        if embedded.is_some() {
            format!(
                "embedded cluster of {} brokers at {namesrv}, on its own thread",
                args.brokers
            )
        } else {
            format!("external name server {namesrv}")
        },
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        args.count,
        args.size,
        args.inflight
    );
    let (cluster, broker_system) = match embedded {
        Some((cluster, system)) => (Some(cluster), Some(system)),
        None => (None, None),
    };
    let system = actix::System::new();
    let outcome: Result<(), String> = system.block_on(async {
        let client = Client::start(ClientConfig::new(&namesrv)).map_err(|e| e.to_string())?;
        let mut phases = Vec::new();
        for name in &args.phases {
            // A fresh topic per phase, created on every broker up front.
            let topic = format!("ProduceBench_{stamp}_{name}");
            if let Some(cluster) = &cluster {
                cluster
                    .create_topic(&topic, args.queues)
                    .await
                    .map_err(|e| e.to_string())?;
            } else {
                // Auto-created by the first sends; warm the route first.
                let producer = Producer::new(client.clone(), ProducerConfig::default());
                producer
                    .send(Message::new(&topic, "warm-up"))
                    .await
                    .map_err(|e| e.to_string())?;
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
            "broker": if cluster.is_some() { "embedded, in process" } else { "external" },
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
        if let Some(cluster) = cluster {
            cluster.shutdown().await;
        }
        Ok(())
    });
    if let Some(broker_system) = broker_system {
        broker_system.stop();
    }
    outcome.map_err(Into::into)
}
