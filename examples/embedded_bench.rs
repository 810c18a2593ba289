//! Figures for the embedded broker, measured through the crate's own client over loopback TCP.
//!
//! ```text
//! cargo run --release --example embedded_bench [-- --rounds 200 --messages 200000 --million 1000000]
//! ```
//!
//! The broker runs on its own thread (its own actix system), the clients on the main thread, as
//! a broker and its users would run in separate processes. Three measurements:
//!
//! 1. long-poll wake-up: a pull parked on an empty queue, then a send to that queue; the time
//!    from issuing the send to the pull's answer (and from the send's acknowledgement to it),
//!    p50/p99/max over `--rounds` rounds;
//! 2. producer throughput: `--messages` sends of 128-byte bodies with `--inflight` in flight at
//!    once, like the `produce` CLI;
//! 3. a topic of `--million` 128-byte messages: how long storing it takes and what it costs in
//!    resident memory (VmRSS of this process before and after) and in commit-log bytes.

use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::stream::{FuturesUnordered, StreamExt};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::protocol::codes::{pull_sys_flag, request_code, response_code};
use rocketmq_actor::protocol::header::PullMessageRequestHeader;
use rocketmq_actor::protocol::RemotingCommand;
use rocketmq_actor::{Client, ClientConfig};
use rocketmq_actor::{Message, MessageQueue};
use rocketmq_actor::{Producer, ProducerConfig};

#[derive(Parser)]
struct Args {
    /// Long-poll rounds.
    #[arg(long, default_value_t = 200)]
    rounds: usize,
    /// Messages of the throughput run.
    #[arg(long, default_value_t = 200_000)]
    messages: usize,
    /// Messages of the big topic.
    #[arg(long, default_value_t = 1_000_000)]
    million: usize,
    /// Sends in flight at once (the `produce` CLI's default).
    #[arg(long, default_value_t = 512)]
    inflight: usize,
    /// Body size in bytes.
    #[arg(long, default_value_t = 128)]
    size: usize,
}

const BROKER: &str = "broker-a";

/// The broker thread: the cluster handle, its actix system and its thread id.
struct BrokerThread {
    cluster: EmbeddedCluster,
    system: actix::System,
    tid: Option<u64>,
}

/// This thread's id as /proc knows it (Linux).
fn current_tid() -> Option<u64> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// CPU time a thread of this process has used, from /proc/self/task/<tid>/schedstat (Linux).
fn thread_cpu(tid: Option<u64>) -> Duration {
    let text = tid
        .and_then(|tid| std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok())
        .unwrap_or_default();
    let nanos = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(nanos)
}

/// CPU time of the broker and of the client thread over a measured run.
struct CpuMeter {
    broker: Option<u64>,
    client: Option<u64>,
    start: (Duration, Duration),
}

impl CpuMeter {
    fn start(broker: Option<u64>) -> Self {
        let client = current_tid();
        CpuMeter {
            broker,
            client,
            start: (thread_cpu(broker), thread_cpu(client)),
        }
    }

    /// "broker X µs/msg (Y msgs/s per core), client Z µs/msg" for `messages` messages.
    fn report(&self, messages: usize) -> String {
        let broker = thread_cpu(self.broker).saturating_sub(self.start.0);
        let client = thread_cpu(self.client).saturating_sub(self.start.1);
        let per = |d: Duration| d.as_secs_f64() * 1e6 / messages.max(1) as f64;
        format!(
            "CPU per message: broker thread {:.2} µs ({:.0} msgs/s per core), client thread {:.2} µs",
            per(broker),
            1e6 / per(broker).max(f64::EPSILON),
            per(client)
        )
    }
}

/// Starts the cluster on a thread of its own; returns its handle once it listens.
fn start_broker_thread() -> BrokerThread {
    let (tx, rx) = std_mpsc::channel();
    std::thread::spawn(move || {
        let system = actix::System::new();
        let cluster =
            system.block_on(async { EmbeddedCluster::start(EmbeddedConfig::ephemeral()).await });
        match cluster {
            Ok(cluster) => {
                let _ = tx.send(Ok(BrokerThread {
                    cluster,
                    system: actix::System::current(),
                    tid: current_tid(),
                }));
                let _ = system.run();
            }
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
            }
        }
    });
    match rx.recv() {
        Ok(Ok(broker)) => broker,
        Ok(Err(e)) => panic!("cannot start the embedded cluster: {e}"),
        Err(_) => panic!("the broker thread died"),
    }
}

/// A field of /proc/self/status in KiB (Linux), 0 when unavailable.
fn proc_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The 1-minute load average (other processes compete for the same cores).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn summary(samples: &mut [Duration]) -> String {
    samples.sort();
    format!(
        "p50 {:?}  p99 {:?}  max {:?}",
        percentile(samples, 0.50),
        percentile(samples, 0.99),
        samples.last().copied().unwrap_or_default()
    )
}

fn body(index: usize, size: usize) -> Vec<u8> {
    let mut body = format!("message-{index}-").into_bytes();
    body.resize(size.max(1), b'x');
    body
}

async fn held_pulls(cluster: &EmbeddedCluster) -> usize {
    cluster.held_pulls(BROKER).await.unwrap_or(0)
}

async fn long_poll_wakeup(cluster: &EmbeddedCluster, rounds: usize) {
    cluster.create_topic("LongPoll", 1).await.expect("topic");
    let consumer = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client");
    let sender = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client");
    let producer = Producer::new(sender.clone(), ProducerConfig::default());
    let queue = MessageQueue::new("LongPoll", BROKER, 0);
    let addr = cluster.broker_addr(BROKER).expect("broker address");
    // Warm both connections and the route cache.
    producer
        .send_to_queue(Message::new("LongPoll", "warm-up"), &queue)
        .await
        .expect("warm-up send");
    let mut from_send = Vec::with_capacity(rounds);
    let mut from_ack = Vec::with_capacity(rounds);
    let mut send_rtt = Vec::with_capacity(rounds);
    let mut pull_first = 0;
    for round in 0..rounds {
        let header = PullMessageRequestHeader {
            consumer_group: "bench".into(),
            topic: "LongPoll".into(),
            queue_id: 0,
            queue_offset: round as i64 + 1,
            max_msg_nums: 32,
            sys_flag: pull_sys_flag::SUBSCRIPTION | pull_sys_flag::SUSPEND,
            commit_offset: 0,
            suspend_timeout_millis: 30_000,
            subscription: Some("*".into()),
            sub_version: 0,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            bname: None,
        };
        let command = RemotingCommand::request_with_header(request_code::PULL_MESSAGE, &header);
        let (pull_client, pull_addr) = (consumer.clone(), addr.clone());
        let held = actix::spawn(async move {
            let response = pull_client
                .request(&pull_addr, command, Duration::from_secs(35))
                .await;
            (response, Instant::now())
        });
        while held_pulls(cluster).await == 0 {
            tokio::task::yield_now().await;
        }
        let issued = Instant::now();
        producer
            .send_to_queue(Message::new("LongPoll", format!("round-{round}")), &queue)
            .await
            .expect("send");
        let acked = Instant::now();
        let (response, answered) = held.await.expect("pull task");
        let response = response.expect("pull");
        assert_eq!(response.code, response_code::SUCCESS, "round {round}");
        from_send.push(answered.saturating_duration_since(issued));
        from_ack.push(answered.saturating_duration_since(acked));
        send_rtt.push(acked - issued);
        if answered < acked {
            pull_first += 1;
        }
    }
    println!(
        "(a) long-poll wake-up over {rounds} rounds (pull parked on an empty queue, then a send):"
    );
    println!(
        "    send issued -> pull answered: {}",
        summary(&mut from_send)
    );
    println!(
        "    send acked  -> pull answered: {}  (pull answered first in {pull_first}/{rounds} rounds)",
        summary(&mut from_ack)
    );
    println!(
        "    send round trip alone:        {}",
        summary(&mut send_rtt)
    );
    consumer.shutdown().await;
    sender.shutdown().await;
}

/// Sends `count` messages to `topic` with `inflight` in flight; returns (sent, seconds).
async fn pipelined_sends(
    producer: &Producer,
    topic: &str,
    count: usize,
    inflight: usize,
    size: usize,
) -> (usize, f64) {
    let started = Instant::now();
    let mut in_flight = FuturesUnordered::new();
    let (mut next, mut sent, mut failed) = (0, 0, 0);
    while next < count || !in_flight.is_empty() {
        while next < count && in_flight.len() < inflight.max(1) {
            let producer = producer.clone();
            let message = Message::new(topic, body(next, size));
            in_flight.push(async move { producer.send(message).await });
            next += 1;
        }
        match in_flight.next().await {
            Some(Ok(_)) => sent += 1,
            Some(Err(e)) => {
                failed += 1;
                if failed <= 5 {
                    eprintln!("send failed: {e}");
                }
            }
            None => {}
        }
    }
    (sent, started.elapsed().as_secs_f64())
}

async fn throughput(cluster: &EmbeddedCluster, args: &Args, broker_tid: Option<u64>) {
    let client = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client");
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    // Create the topic and warm the route cache first.
    producer
        .send(Message::new("Throughput", body(0, args.size)))
        .await
        .expect("warm-up send");
    let meter = CpuMeter::start(broker_tid);
    let (sent, seconds) = pipelined_sends(
        &producer,
        "Throughput",
        args.messages,
        args.inflight,
        args.size,
    )
    .await;
    println!(
        "(b) producer throughput: {sent} x {} B, {} in flight: {:.2} s, {:.0} msgs/s",
        args.size,
        args.inflight,
        seconds,
        sent as f64 / seconds
    );
    println!("    {}", meter.report(sent));
    client.shutdown().await;
}

/// Queues of the big topic.
const MILLION_QUEUES: i32 = 8;

async fn big_topic(cluster: &EmbeddedCluster, args: &Args, broker_tid: Option<u64>) {
    cluster
        .create_topic("Million", MILLION_QUEUES)
        .await
        .expect("topic");
    let client = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client");
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    producer
        .send(Message::new("Million", body(0, args.size)))
        .await
        .expect("warm-up send");
    let rss_before = proc_status_kib("VmRSS:");
    let log_before = cluster.commit_log_bytes(BROKER).await.unwrap_or(0);
    let meter = CpuMeter::start(broker_tid);
    let (sent, seconds) =
        pipelined_sends(&producer, "Million", args.million, args.inflight, args.size).await;
    let cpu = meter.report(sent);
    let rss_after = proc_status_kib("VmRSS:");
    let mut stored = 0;
    for queue_id in 0..MILLION_QUEUES {
        stored += cluster
            .max_offset(BROKER, "Million", queue_id)
            .await
            .unwrap_or(0);
    }
    let log_after = cluster.commit_log_bytes(BROKER).await.unwrap_or(0);
    let log_bytes = (log_after - log_before) as f64;
    println!(
        "(c) a topic of {} messages ({stored} stored incl. warm-up, {sent} acknowledged) x {} B:",
        args.million, args.size
    );
    println!(
        "    stored in {seconds:.2} s ({:.0} msgs/s); commit log +{:.1} MiB ({:.0} B/message)",
        sent as f64 / seconds,
        log_bytes / 1024.0 / 1024.0,
        log_bytes / sent.max(1) as f64
    );
    println!("    {cpu}");
    println!(
        "    process RSS {:.1} MiB -> {:.1} MiB (+{:.1} MiB), peak {:.1} MiB; 24 GiB holds ~{:.0}x this topic",
        mib(rss_before),
        mib(rss_after),
        mib(rss_after.saturating_sub(rss_before)),
        mib(proc_status_kib("VmHWM:")),
        (24.0 * 1024.0) / mib(rss_after.saturating_sub(rss_before).max(1))
    );
    client.shutdown().await;
}

fn main() {
    let args = Args::parse();
    let BrokerThread {
        cluster,
        system: broker_system,
        tid: broker_tid,
    } = start_broker_thread();
    println!(
        "embedded broker at {} (its own thread); clients on the main thread; {} CPUs, load average {}",
        cluster.namesrv_addr(),
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );
    let system = actix::System::new();
    system.block_on(async {
        long_poll_wakeup(&cluster, args.rounds).await;
        throughput(&cluster, &args, broker_tid).await;
        big_topic(&cluster, &args, broker_tid).await;
        cluster.shutdown().await;
    });
    println!("load average at the end: {}", load_average());
    broker_system.stop();
}
