//! Consumer throughput and CPU cost: a raw pull loop versus each consumer kind (push, lite
//! pull stream, pull schedule service), over the same data.
//!
//! ```text
//! cargo run --release --example consume_bench [-- --count 200000 --size 128]
//! cargo run --release --example consume_bench -- --namesrv 127.0.0.1:19876
//! cargo run --release --example consume_bench -- --namesrv 127.0.0.1:19876 --tls --tls-ca ca.pem
//! ```
//!
//! With `--tls` every client connects over TLS: to the embedded cluster (which then serves TLS
//! with a generated certificate), or to the external one trusting `--tls-ca` (any certificate
//! without it). Against `rocketmq-actor broker --tls --tls-cert-out ca.pem` (permissive: TLS and
//! plaintext on the same port) runs with and without `--tls` compare the two on one broker.
//!
//! Without `--namesrv` an embedded cluster runs on a thread of its own in this process; with it,
//! the bench uses that name server (an embedded broker in another process — `rocketmq-actor
//! broker --listen 127.0.0.1:19876 --brokers 2` — or a real cluster from
//! `scripts/real-cluster.sh`).
//!
//! It produces `--count` messages of `--size` bytes to a fresh topic, then reads them all back
//! once per consumer kind, each time from offset 0:
//!
//! 1. **raw**: PULL_MESSAGE with FLAG_SUBSCRIPTION, 32 messages per call, every queue
//!    concurrently through `Client::pull` (the base layer: request, connection, decoding),
//!    each message counted — no consumer runtime (as `raw_pull`);
//! 2. **push**: a push consumer with the default configuration (a new group starting at the first
//!    offset) and a listener that only counts;
//! 3. **pull**: a pull consumer's hand loop, every queue concurrently, `pull` of 32 and
//!    `update_consume_offset` after each;
//! 4. **lite**: a lite pull consumer's `stream()` (pull batch 32, auto-commit); **liteb** (not
//!    run by default) its `batches()`;
//! 5. **sched**: a pull schedule service whose task pulls 32 with long polling, counts and moves
//!    its offset on, with no delay between runs;
//! 6. **pushh** (not run by default): the push phase with a no-op `RpcHook` on its client and a
//!    no-op `ConsumeHook` on the consumer — what installed hooks cost (`--phases push,pushh`);
//! 7. **push32** (not run by default): the push phase with `consume_message_batch_max_size = 32`;
//!    **pushsync** (not run by default): the push phase with a synchronous listener
//!    (`listener_sync_fn`) that only counts; **pushasync** (not run by default): the same
//!    with a borrowing async closure listener (`listener_async`);
//! 8. **orderly** / **keyord** (not run by default): an orderly listener, queue-ordered (broker
//!    locks, one call per queue at a time) and key-ordered, that only counts; **orderlysync** /
//!    **keyordsync** the same with a synchronous listener (`orderly_listener_sync_fn`);
//! 9. **cpusync** / **orderlycpu** (not run by default): a synchronous concurrent / orderly
//!    listener that burns ~150 µs of CPU per message; **blocksync** one that blocks 1 ms per
//!    message (`std::thread::sleep`, as a synchronous database call). Run them with a small
//!    `--count` (20,000), on all cores and under `taskset -c 0` to compare; **cpuceil** and
//!    **blockceil** are their ceilings: the same work on as many plain threads as the process
//!    has cores (CPU) or as a consumer has consume threads by default (20, blocking), no
//!    consumer at all.
//!
//! For each it prints msgs/s, the CPU time the phase consumed and CPU µs per message — for the
//! whole process (`/proc/self/stat`) and for the main thread alone (where the clients run; with
//! the embedded broker the process figure includes the broker's work) — and, for push, the time
//! from `start()` to the first message.

#[path = "bench_common/mod.rs"]
mod bench_common;

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bench_common::{CpuSample, Phase};
use clap::Parser;
use futures::stream::{FuturesUnordered, StreamExt};
use rocketmq_actor::consumer::ConsumeFromWhere;
use rocketmq_actor::consumer::ConsumeStatus;
use rocketmq_actor::consumer::OrderlyStatus;
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::pull::{LitePullConsumer, PullConsumer, PullScheduleService, PullStatus};
use rocketmq_actor::rpc::PullRequest;
use rocketmq_actor::tls::{ServerTlsConfig, TlsConfig, TlsMode};
use rocketmq_actor::{Client, ClientConfig};
use rocketmq_actor::{Message, MessageQueue};
use rocketmq_actor::{Producer, ProducerConfig};
use rocketmq_actor::{PushConsumer, PushConsumerBuilder};

#[derive(Parser)]
struct Args {
    /// Name server of an external cluster; without it an embedded one runs in this process.
    #[arg(long)]
    namesrv: Option<String>,
    /// Messages to produce and consume.
    #[arg(long, default_value_t = 200_000)]
    count: usize,
    /// Body size in bytes.
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Topic (default: a fresh name per run, so earlier runs' data is not read).
    #[arg(long)]
    topic: Option<String>,
    /// Brokers of the embedded cluster.
    #[arg(long, default_value_t = 2)]
    brokers: usize,
    /// Queues per broker of the embedded cluster's topic.
    #[arg(long, default_value_t = 8)]
    queues: i32,
    /// Messages per batch send while producing.
    #[arg(long, default_value_t = 100)]
    send_batch: usize,
    /// Batch sends in flight while producing.
    #[arg(long, default_value_t = 16)]
    inflight: usize,
    /// The lite phases' `pull_threshold_for_all` (Java's default 10,000 when not given): how
    /// many messages the lite consumer may hold for the application.
    #[arg(long)]
    lite_cache: Option<u32>,
    /// The consumer phases to run after `raw` (comma-separated; for profiling one kind).
    #[arg(long, default_value = "push,pull,lite,sched", value_delimiter = ',')]
    phases: Vec<String>,
    /// Connect over TLS.
    #[arg(long)]
    tls: bool,
    /// With `--tls` and `--namesrv`: trust this CA (PEM) instead of any certificate.
    #[arg(long, value_name = "FILE", requires = "tls")]
    tls_ca: Option<std::path::PathBuf>,
}

/// The TLS setup of every client of the run (`None`: plaintext), set once in `main`.
static TLS: OnceLock<Option<TlsConfig>> = OnceLock::new();

/// A client configuration for `namesrv`, over TLS when the run uses it.
fn client_config(namesrv: &str) -> ClientConfig {
    let mut config = ClientConfig::new(namesrv);
    config.tls = TLS.get().cloned().flatten();
    config
}

/// A hook that does nothing: installed, it measures what running hooks costs.
struct NoopHook;

impl rocketmq_actor::hooks::RpcHook for NoopHook {}

impl rocketmq_actor::hooks::ConsumeHook for NoopHook {}

/// Messages per raw pull (the push consumer's default `pull_batch_size`).
const RAW_PULL_BATCH: i32 = 32;

fn body(index: usize, size: usize) -> Vec<u8> {
    let mut body = format!("message-{index}-").into_bytes();
    body.resize(size.max(1), b'x');
    body
}

/// The embedded cluster of the run, on a thread of its own; serving TLS with a generated
/// certificate (and plaintext) when the run uses TLS.
fn start_broker_thread(
    brokers: usize,
    tls: bool,
) -> Result<(EmbeddedCluster, actix::System), String> {
    bench_common::start_broker_thread(EmbeddedConfig {
        tls: tls.then(|| ServerTlsConfig::generated(TlsMode::Permissive)),
        ..bench_common::embedded_config(brokers)
    })
}

/// Produces `count` messages in batch sends; returns how many were acknowledged.
async fn produce(namesrv: &str, topic: &str, args: &Args) -> Result<usize, String> {
    let client = Client::start(client_config(namesrv)).map_err(|e| e.to_string())?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let batch = args.send_batch.max(1);
    let mut in_flight = FuturesUnordered::new();
    let (mut next, mut sent, mut failed) = (0, 0, 0);
    while next < args.count || !in_flight.is_empty() {
        while next < args.count && in_flight.len() < args.inflight.max(1) {
            let end = (next + batch).min(args.count);
            let messages: Vec<Message> = (next..end)
                .map(|i| Message::new(topic, body(i, args.size)))
                .collect();
            let producer = producer.clone();
            in_flight.push(async move {
                let n = messages.len();
                (n, producer.send_batch(messages).await)
            });
            next = end;
        }
        match in_flight.next().await {
            Some((n, Ok(_))) => sent += n,
            Some((n, Err(e))) => {
                failed += n;
                if failed <= 5 * batch {
                    eprintln!("batch send failed: {e}");
                }
            }
            None => {}
        }
    }
    client.shutdown().await;
    if failed > 0 {
        return Err(format!("{failed} of {} messages not sent", args.count));
    }
    Ok(sent)
}

/// Pulls one queue from offset 0 to its end; returns the messages read.
///
/// Through `Client::pull`, the base layer's pull (the request encoding, connection and record
/// decoding the consumers use, nothing of their runtime), so the ceiling moves with the client.
async fn raw_pull_queue(client: Client, queue: MessageQueue) -> Result<usize, String> {
    let (mut offset, mut count) = (0i64, 0usize);
    loop {
        let request = PullRequest::new("consume_bench_raw", queue.clone(), offset)
            .max_messages(RAW_PULL_BATCH);
        let answer = client.pull(&request).await.map_err(|e| e.to_string())?;
        match answer.status {
            PullStatus::Found => count += answer.messages.len(),
            PullStatus::NoNewMsg => return Ok(count),
            PullStatus::NoMatchedMsg | PullStatus::OffsetIllegal => {}
        }
        if answer.next_begin_offset <= offset && answer.status != PullStatus::Found {
            return Ok(count);
        }
        offset = answer.next_begin_offset;
    }
}

async fn raw_phase(namesrv: &str, topic: &str) -> Result<Phase, String> {
    let before = CpuSample::now();
    let started = Instant::now();
    let client = Client::start(client_config(namesrv)).map_err(|e| e.to_string())?;
    let route = client
        .refresh_route(topic)
        .await
        .map_err(|e| e.to_string())?;
    let pulls = route
        .consume_queues
        .iter()
        .map(|queue| raw_pull_queue(client.clone(), queue.clone()));
    let mut total = 0;
    for result in futures::future::join_all(pulls).await {
        total += result?;
    }
    let wall = started.elapsed();
    client.shutdown().await;
    Ok(Phase::measure("raw", total, wall, before))
}

/// A pull consumer's hand loop: every queue concurrently, `pull` of 32 from offset 0 to its
/// end, the offset stored after each pull (as a Java `DefaultMQPullConsumer` program does).
async fn pull_phase(namesrv: &str, topic: &str) -> Result<Phase, String> {
    let before = CpuSample::now();
    let started = Instant::now();
    let consumer = PullConsumer::builder()
        .client_config(client_config(namesrv))
        .group(format!("consume_bench_pull_{}", std::process::id()))
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let queues = consumer
        .fetch_subscribe_message_queues(topic)
        .await
        .map_err(|e| e.to_string())?;
    let loops = queues.into_iter().map(|queue| {
        let consumer = consumer.clone();
        async move {
            let (mut offset, mut count) = (0i64, 0usize);
            loop {
                let result = consumer
                    .pull(&queue, "*", offset, RAW_PULL_BATCH)
                    .await
                    .map_err(|e| e.to_string())?;
                count += result.messages.len();
                if result.status != PullStatus::Found && result.next_begin_offset <= offset {
                    return Ok::<usize, String>(count);
                }
                offset = result.next_begin_offset;
                consumer.update_consume_offset(&queue, offset).await;
            }
        }
    });
    let mut total = 0;
    for result in futures::future::join_all(loops).await {
        total += result?;
    }
    let wall = started.elapsed();
    let phase = Phase::measure("pull", total, wall, before);
    consumer.shutdown().await;
    Ok(phase)
}

/// The lite pull consumer's `stream()` (or, with `batches`, its `batches()`) from the first
/// offset: every message counted.
async fn lite_phase(
    namesrv: &str,
    topic: &str,
    expected: usize,
    batches: bool,
    cache: Option<u32>,
) -> Result<Phase, String> {
    let before = CpuSample::now();
    let started = Instant::now();
    let consumer = LitePullConsumer::builder()
        .client_config(client_config(namesrv))
        .group(format!(
            "consume_bench_lite{}_{}",
            if batches { "b" } else { "" },
            std::process::id()
        ))
        .subscribe(topic, "*")
        .configure(|c| {
            c.consume_from_where = ConsumeFromWhere::FirstOffset;
            c.pull_batch_size = RAW_PULL_BATCH as u32;
            if let Some(cache) = cache {
                c.pull_threshold_for_all = cache;
            }
        })
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let mut count = 0;
    // One timer for the whole phase, not one per message.
    let read = async {
        if batches {
            let mut batches = consumer.batches();
            while count < expected {
                match batches.next().await {
                    Some(batch) => count += batch.len(),
                    None => break,
                }
            }
        } else {
            let mut stream = consumer.stream();
            while count < expected {
                match stream.next().await {
                    Some(_message) => count += 1,
                    None => break,
                }
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(600), read).await;
    let wall = started.elapsed();
    let phase = Phase::measure(if batches { "liteb" } else { "lite" }, count, wall, before);
    consumer.shutdown().await;
    Ok(phase)
}

/// A pull schedule service whose task pulls 32 with long polling and moves the offset on.
async fn schedule_phase(namesrv: &str, topic: &str, expected: usize) -> Result<Phase, String> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let tally = Arc::new(Mutex::new((0usize, Some(done_tx))));
    let task_tally = tally.clone();
    let before = CpuSample::now();
    let started = Instant::now();
    let service = PullScheduleService::builder()
        .client_config(client_config(namesrv))
        .group(format!("consume_bench_schedule_{}", std::process::id()))
        .register_pull_task_fn(topic, move |queue, mut ctx| {
            let tally = task_tally.clone();
            async move {
                let consumer = ctx.pull_consumer().clone();
                let offset = consumer
                    .fetch_consume_offset(&queue, false)
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or(0);
                if let Ok(result) = consumer
                    .pull_block_if_not_found(&queue, "*", offset, RAW_PULL_BATCH)
                    .await
                {
                    {
                        let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
                        t.0 += result.messages.len();
                        if t.0 >= expected {
                            if let Some(done) = t.1.take() {
                                let _ = done.send(());
                            }
                        }
                    }
                    consumer
                        .update_consume_offset(&queue, result.next_begin_offset)
                        .await;
                }
                ctx.set_pull_next_delay(Duration::ZERO);
                ctx
            }
        })
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let _ = tokio::time::timeout(Duration::from_secs(600), done_rx).await;
    let wall = started.elapsed();
    let count = tally.lock().unwrap_or_else(|e| e.into_inner()).0;
    let phase = Phase::measure("sched", count, wall, before);
    service.shutdown().await;
    Ok(phase)
}

/// What the push listener records.
/// What a counting listener shares with its phase: a count, and the moments of the first
/// and the last message (the clock is read twice per phase, not once per message).
struct Tally {
    count: AtomicUsize,
    target: usize,
    moments: Mutex<Moments>,
}

#[derive(Default)]
struct Moments {
    first: Option<Instant>,
    last: Option<Instant>,
    done: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Tally {
    /// Does `work` once per message of a call of `n`, then counts them.
    fn work_then_add(&self, n: usize, work: fn()) {
        for _ in 0..n {
            work();
        }
        self.add(n);
    }

    /// Counts `n` messages.
    fn add(&self, n: usize) {
        let before = self.count.fetch_add(n, Ordering::Relaxed);
        if before == 0 || before + n >= self.target {
            let now = Instant::now();
            let mut moments = self.moments.lock().unwrap_or_else(|e| e.into_inner());
            moments.first.get_or_insert(now);
            if before + n >= self.target {
                moments.last.get_or_insert(now);
                if let Some(done) = moments.done.take() {
                    let _ = done.send(());
                }
            }
        }
    }
}

/// Messages a listener counts before it adds them to the shared [`Tally`].
const PUBLISH_EVERY: usize = 4096;

/// A listener's own count, added to the shared [`Tally`] at its first call, every
/// [`PUBLISH_EVERY`] messages and when the target is reached. The raw loop counts each pull
/// in a local variable; an atomic add per call would charge the push phases a cost of the
/// bench's own (a locked add per message with one message per call) that the raw loop does
/// not pay. A listener is called on one thread at a time (it is `Send`, not `Sync`), so a
/// plain cell will do.
struct ListenerCount {
    seen: Cell<usize>,
    published: Cell<usize>,
    tally: Arc<Tally>,
}

impl ListenerCount {
    fn new(tally: Arc<Tally>) -> Self {
        ListenerCount {
            seen: Cell::new(0),
            published: Cell::new(0),
            tally,
        }
    }

    /// Counts `n` messages. Out of line, as the shared tally's `add` is: the listener
    /// closures stay small enough to be inlined into the consumer's call loop.
    #[inline(never)]
    fn add(&self, n: usize) {
        let seen = self.seen.get() + n;
        self.seen.set(seen);
        let published = self.published.get();
        if published == 0 || seen - published >= PUBLISH_EVERY || seen >= self.tally.target {
            self.publish(seen);
        }
    }

    /// Adds what was counted since the last time to the shared tally.
    #[cold]
    fn publish(&self, seen: usize) {
        self.tally.add(seen - self.published.get());
        self.published.set(seen);
    }
}

/// The push consumer variants measured against the raw loop.
#[derive(Clone, Copy, PartialEq)]
enum PushKind {
    /// Default configuration: one message per listener call.
    Default,
    /// Default, with a no-op RPC hook and consume hook installed.
    Hooks,
    /// `consume_message_batch_max_size = 32`.
    Batch32,
    /// Default configuration with a synchronous closure listener.
    Sync,
    /// Default configuration with a borrowing async closure listener (`listener_async`).
    Async,
    /// An orderly listener (queue order, broker locks).
    Orderly,
    /// An orderly listener in key-ordered mode.
    KeyOrdered,
    /// A synchronous orderly closure listener.
    OrderlySync,
    /// A synchronous orderly closure listener in key-ordered mode.
    KeyOrderedSync,
    /// A synchronous closure listener that burns ~150 µs of CPU per message.
    CpuSync,
    /// A synchronous closure listener that blocks 1 ms per message (a synchronous database
    /// call).
    BlockSync,
    /// A synchronous orderly closure listener that burns ~150 µs of CPU per message.
    OrderlyCpu,
}

impl PushKind {
    fn name(self) -> &'static str {
        match self {
            PushKind::Default => "push",
            PushKind::Hooks => "pushh",
            PushKind::Batch32 => "push32",
            PushKind::Sync => "pushsync",
            PushKind::Async => "pushasync",
            PushKind::Orderly => "orderly",
            PushKind::KeyOrdered => "keyord",
            PushKind::OrderlySync => "orderlysync",
            PushKind::KeyOrderedSync => "keyordsync",
            PushKind::CpuSync => "cpusync",
            PushKind::BlockSync => "blocksync",
            PushKind::OrderlyCpu => "orderlycpu",
        }
    }
}

/// `builder` with the synchronous listener of `kind`, counting into `tally`. A synchronous
/// listener is `Sync` (its calls may run on several consume threads), so it counts in the
/// shared tally's atomic rather than in a [`ListenerCount`] of its own.
#[cfg(not(bench_baseline))]
fn with_sync_listener(
    builder: PushConsumerBuilder,
    kind: PushKind,
    tally: Arc<Tally>,
) -> Result<PushConsumerBuilder, String> {
    Ok(match kind {
        PushKind::Sync => builder.listener_sync_fn(move |messages, _ctx| {
            tally.add(messages.len());
            ConsumeStatus::Success
        }),
        PushKind::CpuSync => builder.listener_sync_fn(move |messages, _ctx| {
            tally.work_then_add(messages.len(), burn_cpu);
            ConsumeStatus::Success
        }),
        PushKind::BlockSync => builder.listener_sync_fn(move |messages, _ctx| {
            tally.work_then_add(messages.len(), sleep_1ms);
            ConsumeStatus::Success
        }),
        PushKind::OrderlyCpu => builder.orderly_listener_sync_fn(move |messages, _ctx| {
            tally.work_then_add(messages.len(), burn_cpu);
            OrderlyStatus::Success
        }),
        PushKind::Async => {
            let count = ListenerCount::new(tally);
            builder.listener_async(async move |messages, _ctx| {
                count.add(messages.len());
                ConsumeStatus::Success
            })
        }
        _ => builder
            .key_ordered(kind == PushKind::KeyOrderedSync)
            .orderly_listener_sync_fn(move |messages, _ctx| {
                tally.add(messages.len());
                OrderlyStatus::Success
            }),
    })
}

/// Rounds of [`burn_cpu`]'s loop that take about [`CPU_PER_MESSAGE`] on this machine,
/// measured once per run.
static CPU_ROUNDS: OnceLock<u64> = OnceLock::new();

/// The CPU a CPU-bound listener spends per message.
const CPU_PER_MESSAGE: Duration = Duration::from_micros(150);

/// About [`CPU_PER_MESSAGE`] of pure computation.
fn burn_cpu() {
    let rounds = *CPU_ROUNDS.get_or_init(|| {
        let probe = 1_000_000;
        let started = Instant::now();
        spin(probe);
        let per_round = started.elapsed().as_secs_f64() / probe as f64;
        (CPU_PER_MESSAGE.as_secs_f64() / per_round.max(f64::MIN_POSITIVE)) as u64
    });
    spin(rounds);
}

/// What a blocking listener waits per message (a synchronous database call).
fn sleep_1ms() {
    std::thread::sleep(Duration::from_millis(1));
}

/// The cores this process may run on (its CPU affinity: one under `taskset -c 0`).
fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The ceiling of a CPU-bound or blocking listener phase: `threads` plain threads doing
/// `work` `count` times in all, no consumer at all.
fn ceiling_phase(name: &'static str, count: usize, threads: usize, work: fn()) -> Phase {
    let before = CpuSample::now();
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                while next.fetch_add(1, Ordering::Relaxed) < count {
                    work();
                }
            });
        }
    });
    Phase::measure(name, count, started.elapsed(), before)
}

/// `rounds` rounds of a xorshift the optimiser cannot drop.
fn spin(rounds: u64) {
    let mut x = std::hint::black_box(0x9E37_79B9_7F4A_7C15_u64);
    for _ in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x);
}

/// A baseline build (`scripts/bench.sh` compiles this file against an older version with
/// `--cfg bench_baseline`) may predate the synchronous listeners.
#[cfg(bench_baseline)]
fn with_sync_listener(
    _builder: PushConsumerBuilder,
    kind: PushKind,
    _tally: Arc<Tally>,
) -> Result<PushConsumerBuilder, String> {
    Err(format!(
        "phase {}: the synchronous listeners are not in this baseline build",
        kind.name()
    ))
}

/// Returns the phase and the time from `start()` to the first message.
async fn push_phase(
    namesrv: &str,
    topic: &str,
    expected: usize,
    kind: PushKind,
) -> Result<(Phase, Duration), String> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let tally = Arc::new(Tally {
        count: AtomicUsize::new(0),
        target: expected,
        moments: Mutex::new(Moments {
            done: Some(done_tx),
            ..Moments::default()
        }),
    });
    let group = format!("consume_bench_{}_{}", std::process::id(), kind.name());
    let before = CpuSample::now();
    let started = Instant::now();
    let mut builder = PushConsumer::builder();
    let mut config = client_config(namesrv);
    if kind == PushKind::Hooks {
        builder = builder.consume_hook(Arc::new(NoopHook));
        config = config.with_rpc_hook(Arc::new(NoopHook));
    }
    builder = builder
        .client_config(config)
        .group(group)
        .subscribe(topic, "*")
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset);
    let count = ListenerCount::new(tally.clone());
    builder = match kind {
        PushKind::Default | PushKind::Hooks | PushKind::Batch32 => {
            if kind == PushKind::Batch32 {
                builder = builder.configure(|c| c.consume_message_batch_max_size = 32);
            }
            builder.listener_fn(move |messages, ctx| {
                count.add(messages.len());
                async move { (ConsumeStatus::Success, ctx) }
            })
        }
        PushKind::Sync
        | PushKind::Async
        | PushKind::OrderlySync
        | PushKind::KeyOrderedSync
        | PushKind::CpuSync
        | PushKind::BlockSync
        | PushKind::OrderlyCpu => with_sync_listener(builder, kind, tally.clone())?,
        PushKind::Orderly | PushKind::KeyOrdered => builder
            .key_ordered(kind == PushKind::KeyOrdered)
            .orderly_listener_fn(move |messages, ctx| {
                count.add(messages.len());
                async move { (OrderlyStatus::Success, ctx) }
            }),
    };
    let consumer = builder.start().await.map_err(|e| e.to_string())?;
    let finished = tokio::time::timeout(Duration::from_secs(600), done_rx).await;
    let count = tally.count.load(Ordering::Relaxed);
    let (first, last) = {
        let moments = tally.moments.lock().unwrap_or_else(|e| e.into_inner());
        (moments.first, moments.last)
    };
    let wall = last.map_or_else(|| started.elapsed(), |last| last - started);
    // Measured before shutdown: the final offset persist is not part of consuming.
    let phase = Phase::measure(kind.name(), count, wall, before);
    consumer.shutdown().await;
    if finished.is_err() {
        return Err(format!(
            "the {} consumer got {count} of {expected} messages in 600 s",
            kind.name()
        ));
    }
    let first_latency = first.map_or(Duration::ZERO, |first| first - started);
    Ok((phase, first_latency))
}

async fn run(args: &Args, namesrv: &str, topic: &str, embedded: bool) -> Result<(), String> {
    let produce_started = Instant::now();
    let sent = produce(namesrv, topic, args).await?;
    let produce_wall = produce_started.elapsed();
    println!(
        "produced {sent} x {} B to {topic} in {:.2} s ({:.0} msgs/s, batches of {}, {} in flight)",
        args.size,
        produce_wall.as_secs_f64(),
        sent as f64 / produce_wall.as_secs_f64().max(f64::EPSILON),
        args.send_batch,
        args.inflight
    );

    let raw = raw_phase(namesrv, topic).await?;
    let mut phases = Vec::new();
    let mut first_push_message = None;
    for name in &args.phases {
        let phase = match name.as_str() {
            "push" => {
                let (phase, first) = push_phase(namesrv, topic, sent, PushKind::Default).await?;
                first_push_message = Some(first);
                phase
            }
            "pushh" => push_phase(namesrv, topic, sent, PushKind::Hooks).await?.0,
            "push32" => push_phase(namesrv, topic, sent, PushKind::Batch32).await?.0,
            "pushsync" => push_phase(namesrv, topic, sent, PushKind::Sync).await?.0,
            "pushasync" => push_phase(namesrv, topic, sent, PushKind::Async).await?.0,
            "orderly" => push_phase(namesrv, topic, sent, PushKind::Orderly).await?.0,
            "keyord" => push_phase(namesrv, topic, sent, PushKind::KeyOrdered).await?.0,
            "orderlysync" => push_phase(namesrv, topic, sent, PushKind::OrderlySync).await?.0,
            "keyordsync" => push_phase(namesrv, topic, sent, PushKind::KeyOrderedSync).await?.0,
            "cpusync" => push_phase(namesrv, topic, sent, PushKind::CpuSync).await?.0,
            "blocksync" => push_phase(namesrv, topic, sent, PushKind::BlockSync).await?.0,
            "orderlycpu" => push_phase(namesrv, topic, sent, PushKind::OrderlyCpu).await?.0,
            "cpuceil" => ceiling_phase("cpuceil", sent, available_cores(), burn_cpu),
            "blockceil" => ceiling_phase("blockceil", sent, 20, sleep_1ms),
            "pull" => pull_phase(namesrv, topic).await?,
            "lite" => lite_phase(namesrv, topic, sent, false, args.lite_cache).await?,
            "liteb" => lite_phase(namesrv, topic, sent, true, args.lite_cache).await?,
            "sched" => schedule_phase(namesrv, topic, sent).await?,
            other => {
                return Err(format!(
                    "unknown phase {other:?} (push, pushh, push32, pushsync, pushasync, orderly, keyord, orderlysync, keyordsync, cpusync, blocksync, orderlycpu, cpuceil, blockceil, pull, lite, liteb, sched)"
                ))
            }
        };
        phases.push(phase);
    }
    println!(
        "consumed from offset 0 ({}):",
        if embedded {
            "process CPU includes the embedded broker's thread"
        } else {
            "external broker: process CPU is the client's own"
        }
    );
    raw.print();
    let raw_cpu = Phase::micros_per_message(raw.main_thread_cpu, raw.messages).max(f64::EPSILON);
    for phase in &phases {
        phase.print();
    }
    for phase in &phases {
        println!(
            "  {}/raw throughput {:.2}; CPU per message {:.2} x raw (main thread)",
            phase.name,
            phase.rate() / raw.rate().max(f64::EPSILON),
            Phase::micros_per_message(phase.main_thread_cpu, phase.messages) / raw_cpu,
        );
    }
    if let Some(first) = first_push_message {
        println!(
            "  first push message {:.1} ms after start()",
            first.as_secs_f64() * 1000.0
        );
    }
    let mut summary = serde_json::json!({
        "broker": if embedded { "embedded, in process" } else { "external" },
        "tls": args.tls,
        "count": sent,
        "size": args.size,
        "raw": raw.json(),
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": bench_common::cpu_model(),
    });
    for phase in &phases {
        summary[phase.name] = phase.json();
        summary[format!("{}_over_raw", phase.name)] =
            ((phase.rate() / raw.rate().max(f64::EPSILON) * 1000.0).round() / 1000.0).into();
    }
    if let Some(first) = first_push_message {
        summary["push_first_message_ms"] = ((first.as_secs_f64() * 10_000.0).round() / 10.0).into();
    }
    println!("{summary}");
    if raw.messages != sent {
        return Err(format!(
            "the raw loop read {} of {sent} messages",
            raw.messages
        ));
    }
    for phase in &phases {
        if phase.messages < sent {
            return Err(format!(
                "{} read {} of {sent} messages",
                phase.name, phase.messages
            ));
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    bench_common::init_tracing();
    let args = Args::parse();
    let topic = args
        .topic
        .clone()
        .unwrap_or_else(|| format!("ConsumeBench_{}", bench_common::unix_millis()));
    let (namesrv, embedded) = match args.namesrv.clone() {
        Some(addr) => (addr, None),
        None => {
            let (cluster, broker_system) = start_broker_thread(args.brokers, args.tls)?;
            (cluster.namesrv_addr(), Some((cluster, broker_system)))
        }
    };
    let tls = match (&embedded, args.tls, &args.tls_ca) {
        (_, false, _) => None,
        (Some((cluster, _)), true, _) => cluster.tls_ca_pem().map(TlsConfig::ca_pem),
        (None, true, Some(ca)) => Some(TlsConfig::ca_file(ca)),
        (None, true, None) => Some(TlsConfig::accept_any_certificate()),
    };
    let _ = TLS.set(tls);
    println!(
        "consume_bench{}: {} on {} ({} CPUs)",
        if args.tls { " over TLS" } else { "" },
        if embedded.is_some() {
            format!(
                "embedded cluster of {} brokers at {namesrv}, on its own thread",
                args.brokers
            )
        } else {
            format!("external name server {namesrv}")
        },
        bench_common::cpu_model(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    let (cluster, broker_system) = match embedded {
        Some((cluster, system)) => (Some(cluster), Some(system)),
        None => (None, None),
    };
    let system = actix::System::new();
    let outcome = system.block_on(async {
        let mut outcome = Ok(());
        if let Some(cluster) = &cluster {
            // Every broker gets the topic up front (auto-creation would create it only where
            // the first sends land).
            outcome = cluster
                .create_topic(&topic, args.queues)
                .await
                .map_err(|e| e.to_string());
        }
        if outcome.is_ok() {
            outcome = run(&args, &namesrv, &topic, cluster.is_some()).await;
        }
        if let Some(cluster) = cluster {
            cluster.shutdown().await;
        }
        outcome
    });
    if let Some(broker_system) = broker_system {
        broker_system.stop();
    }
    outcome.map_err(Into::into)
}
