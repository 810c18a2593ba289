//! The `rocketmq-actor` command line: produce, consume, run the embedded broker, or all three
//! at once (`demo`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use clap::{Parser, Subcommand};
use futures::stream::{FuturesUnordered, StreamExt};
use rocketmq_actor::consumer::config::format_consume_timestamp_utc;
use rocketmq_actor::consumer::ConsumeStatus;
use rocketmq_actor::consumer::{ConsumeFromWhere, MessageModel, OrderlyStatus};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::pull::{LitePullConsumer, PullConsumer, PullScheduleService, PullStatus};
use rocketmq_actor::util::now_ms;
use rocketmq_actor::MessageQueue;
use rocketmq_actor::PushConsumer;
use rocketmq_actor::{Client, ClientConfig};
use rocketmq_actor::{Message, MessageExt};
use rocketmq_actor::{Producer, ProducerConfig};
use serde_json::json;

type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(
    name = "rocketmq-actor",
    version,
    about = "Actor-based Apache RocketMQ client"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send messages and print a JSON summary line.
    Produce(ProduceArgs),
    /// Consume with a push consumer and print a JSON summary line.
    Consume(ConsumeArgs),
    /// Run the embedded RocketMQ-compatible broker (name server + brokers on loopback).
    Broker(BrokerArgs),
    /// Start the embedded broker, produce, consume with a push consumer, print both summaries.
    Demo(DemoArgs),
    /// Reset a group's offsets of a topic by time (as mqadmin resetOffsetByTime) and print the
    /// new offset of each queue as a JSON line.
    ResetOffset(ResetOffsetArgs),
}

#[derive(clap::Args)]
struct ResetOffsetArgs {
    /// Name-server addresses, `;`-separated.
    #[arg(long)]
    namesrv: String,
    /// Consumer group.
    #[arg(long)]
    group: String,
    /// Topic.
    #[arg(long)]
    topic: String,
    /// first, last, or a Unix time in ms.
    #[arg(long)]
    to: String,
    /// Only move offsets back (do not skip unconsumed messages forward).
    #[arg(long)]
    no_force: bool,
}

#[derive(clap::Args)]
struct ProduceArgs {
    /// Name-server addresses, `;`-separated.
    #[arg(long)]
    namesrv: String,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(clap::Args, Clone)]
struct LoadArgs {
    /// Topic to send to (auto-created by brokers that allow it).
    #[arg(long)]
    topic: String,
    /// Number of messages.
    #[arg(long)]
    count: u64,
    /// Body size in bytes.
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Tag of every message.
    #[arg(long)]
    tag: Option<String>,
    /// With K, message i gets key `k{i % K}` and goes to the queue of that key.
    #[arg(long)]
    key_space: Option<u64>,
    /// Sends in flight at once (with --key-space: keys sent concurrently).
    #[arg(long, default_value_t = 128)]
    inflight: usize,
}

#[derive(clap::Args)]
struct ConsumeArgs {
    /// Name-server addresses, `;`-separated.
    #[arg(long)]
    namesrv: String,
    #[command(flatten)]
    consume: ConsumeOptions,
}

#[derive(clap::Args, Clone)]
struct ConsumeOptions {
    /// Topic to subscribe to.
    #[arg(long)]
    topic: String,
    /// Consumer group.
    #[arg(long)]
    group: String,
    /// Tag expression, e.g. "TagA || TagB".
    #[arg(long, default_value = "*")]
    expr: String,
    /// Exit after this many messages.
    #[arg(long)]
    count: Option<u64>,
    /// Where a queue without a stored offset starts: first, last or a Unix time in ms.
    #[arg(long, default_value = "last")]
    from: String,
    /// Broadcasting instead of clustering.
    #[arg(long)]
    broadcast: bool,
    /// Print one JSON line per message.
    #[arg(long)]
    print: bool,
    /// Orderly consumption: one batch at a time per queue, under the queue's broker lock.
    #[arg(long)]
    orderly: bool,
    /// Orderly per key (KEYS / __SHARDINGKEY): keys of one queue run concurrently.
    #[arg(long, conflicts_with = "orderly")]
    orderly_by_key: bool,
    /// Consumer kind: push (listener), lite (poll loop of a lite pull consumer) or schedule
    /// (pull schedule service, a task per queue).
    #[arg(long, value_enum, default_value_t = ConsumeMode::Push)]
    mode: ConsumeMode,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
enum ConsumeMode {
    Push,
    Lite,
    Schedule,
}

#[derive(clap::Args)]
struct BrokerArgs {
    /// Name-server address to listen on (one broker shares it).
    #[arg(long, default_value = "127.0.0.1:9876")]
    listen: SocketAddr,
    /// Number of brokers (broker-a, broker-b, …).
    #[arg(long, default_value_t = 1)]
    brokers: usize,
    /// Queues of auto-created topics.
    #[arg(long, default_value_t = 8)]
    queues: i32,
    /// Keep messages and offsets in this directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Create a topic on every broker at start, as NAME or NAME:QUEUES (repeatable). Without
    /// it a topic is created on the first broker a producer happens to send it to.
    #[arg(long = "topic", value_name = "NAME[:QUEUES]")]
    topics: Vec<String>,
    /// How long a queue lock of an orderly consumer lasts unless renewed (as a real broker's
    /// 60 s): how long the queues of a crashed orderly consumer stay blocked.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION", default_value = "60s")]
    lock_expiry: Duration,
    /// Fault injection for tests: close every client connection at this interval
    /// (e.g. `5s`); clients must reconnect.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    drop_connections_every: Option<Duration>,
}

#[derive(clap::Args)]
struct DemoArgs {
    /// Messages to produce and consume.
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Body size in bytes.
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Brokers of the embedded cluster.
    #[arg(long, default_value_t = 2)]
    brokers: usize,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let system = actix::System::new();
    let result = match cli.command {
        Command::Produce(args) => system.block_on(produce(&args.namesrv, &args.load)),
        Command::Consume(args) => system.block_on(consume(&args.namesrv, &args.consume)),
        Command::Broker(args) => system.block_on(broker(args)),
        Command::Demo(args) => system.block_on(demo(args)),
        Command::ResetOffset(args) => system.block_on(reset_offset(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn body_of(index: u64, size: usize) -> Vec<u8> {
    let mut body = format!("message-{index}-").into_bytes();
    body.resize(size.max(1), b'x');
    body
}

fn rounded(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

async fn produce(namesrv: &str, args: &LoadArgs) -> CliResult {
    if args.size == 0 {
        return Err("--size must be at least 1".into());
    }
    if args.key_space == Some(0) {
        return Err("--key-space must be at least 1".into());
    }
    let client = Client::start(ClientConfig::new(namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let started = Instant::now();
    let message_of = |index: u64| {
        let mut message = Message::new(args.topic.clone(), body_of(index, args.size));
        if let Some(tag) = &args.tag {
            message = message.with_tags(tag.clone());
        }
        message
    };
    let mut sent = 0u64;
    let mut failed = 0u64;
    let mut tally = |result: rocketmq_actor::Result<_>| match result {
        Ok(_) => sent += 1,
        Err(e) => {
            failed += 1;
            if failed <= 10 {
                eprintln!("send failed: {e}");
            }
        }
    };
    match args.key_space {
        // Keyed: the messages of one key are sent one after the other so they are stored in
        // order (concurrent sends carry no order guarantee); keys go concurrently.
        Some(keys) => {
            let chains = futures::stream::iter(0..keys.min(args.count))
                .map(|key| {
                    let producer = producer.clone();
                    let message_of = &message_of;
                    async move {
                        let mut results = Vec::new();
                        let mut index = key;
                        while index < args.count {
                            let name = format!("k{key}");
                            results.push(producer.send_with_key(message_of(index), &name).await);
                            index += keys;
                        }
                        results
                    }
                })
                .buffer_unordered(args.inflight.max(1));
            let results: Vec<Vec<_>> = chains.collect().await;
            for result in results.into_iter().flatten() {
                tally(result);
            }
        }
        None => {
            let mut in_flight = FuturesUnordered::new();
            let mut next = 0u64;
            while next < args.count || !in_flight.is_empty() {
                while next < args.count && in_flight.len() < args.inflight.max(1) {
                    let producer = producer.clone();
                    let message = message_of(next);
                    in_flight.push(async move { producer.send(message).await });
                    next += 1;
                }
                if let Some(result) = in_flight.next().await {
                    tally(result);
                }
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64().max(f64::EPSILON);
    println!(
        "{}",
        json!({
            "count": sent,
            "seconds": rounded(seconds),
            "msgs_per_sec": (sent as f64 / seconds).round(),
        })
    );
    client.shutdown().await;
    if failed > 0 {
        return Err(format!("{failed} of {} sends failed", args.count).into());
    }
    Ok(())
}

/// What the `consume` listener accumulates.
struct Tally {
    count: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    latencies_ms: Vec<i64>,
    target: Option<u64>,
    done: Option<tokio::sync::oneshot::Sender<()>>,
    print: Option<std::io::BufWriter<std::io::Stdout>>,
    /// Why `--print` output failed (stdout closed): the command ends with this error.
    print_failed: Option<String>,
}

fn message_json(message: &MessageExt) -> serde_json::Value {
    let body = match std::str::from_utf8(message.body()) {
        Ok(text) => json!(text),
        Err(_) => json!(base64::engine::general_purpose::STANDARD.encode(message.body())),
    };
    json!({
        "topic": message.topic(),
        "broker": message.broker_name,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "msg_id": message.msg_id(),
        "keys": message.keys(),
        "tags": message.tags(),
        "reconsume_times": message.reconsume_times,
        "born_ts": message.born_timestamp,
        "body": body,
    })
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// SIGINT (Ctrl-C) and SIGTERM — what systemd, Docker and Kubernetes send to stop a service —
/// watched from the moment this is made: a signal that comes while a consumer is still
/// starting is kept, and the command ends cleanly right after the start (offsets committed, the
/// group left) instead of the process dying half-started. Neither signal is a crash.
struct ShutdownSignal {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignal {
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let watch = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(watched) => Some(watched),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch {name}; it will not end the command cleanly");
                    None
                }
            };
            ShutdownSignal {
                interrupt: watch(SignalKind::interrupt(), "SIGINT"),
                terminate: watch(SignalKind::terminate(), "SIGTERM"),
            }
        }
        #[cfg(not(unix))]
        ShutdownSignal {}
    }

    /// Resolves at the first signal (at once if one came already).
    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            async fn next(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = next(&mut self.interrupt) => {}
                _ = next(&mut self.terminate) => {}
            }
        }
        #[cfg(not(unix))]
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot watch Ctrl-C");
            std::future::pending::<()>().await;
        }
    }
}

/// Counts a consumed batch and, with `--print`, writes it out before the listener returns: a
/// message is acknowledged only once its line is on stdout, so a kill loses no printed line of
/// a committed message (the output is at-least-once, as the consumption). Returns `false` when
/// the lines could not be written (the listener then asks for the batch again, and the
/// command ends).
fn record(tally: &Mutex<Tally>, messages: &[MessageExt]) -> bool {
    let now = Instant::now();
    let now_ms = now_ms();
    let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
    if t.print_failed.is_some() {
        return false;
    }
    if let Some(out) = t.print.as_mut() {
        let written = messages
            .iter()
            .try_for_each(|message| writeln!(out, "{}", message_json(message)))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            t.print_failed = Some(format!("cannot write to stdout: {e}"));
            if let Some(done) = t.done.take() {
                let _ = done.send(());
            }
            return false;
        }
    }
    t.first.get_or_insert(now);
    t.last = Some(now);
    for message in messages {
        t.count += 1;
        t.latencies_ms.push(now_ms - message.born_timestamp);
    }
    if t.target.is_some_and(|n| t.count >= n) {
        if let Some(done) = t.done.take() {
            let _ = done.send(());
        }
    }
    true
}

async fn consume(namesrv: &str, options: &ConsumeOptions) -> CliResult {
    let mut stop = ShutdownSignal::install();
    let (from, timestamp) = match options.from.as_str() {
        "first" => (ConsumeFromWhere::FirstOffset, None),
        "last" => (ConsumeFromWhere::LastOffset, None),
        ms => {
            let ms: i64 = ms.parse().map_err(|_| {
                format!("--from must be first, last or a Unix time in ms, not {ms:?}")
            })?;
            (
                ConsumeFromWhere::Timestamp,
                Some(format_consume_timestamp_utc(ms)),
            )
        }
    };
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let tally = Arc::new(Mutex::new(Tally {
        count: 0,
        first: None,
        last: None,
        latencies_ms: Vec::new(),
        target: options.count,
        done: Some(done_tx),
        print: options
            .print
            .then(|| std::io::BufWriter::new(std::io::stdout())),
        print_failed: None,
    }));
    let broadcast = options.broadcast;
    if options.mode != ConsumeMode::Push && (options.orderly || options.orderly_by_key) {
        return Err("--orderly and --orderly-by-key need --mode push".into());
    }
    match options.mode {
        ConsumeMode::Push => {
            let consumer = start_push(namesrv, options, from, timestamp, tally.clone()).await?;
            tokio::select! {
                _ = done_rx => {}
                _ = stop.recv() => {}
            }
            consumer.shutdown().await;
        }
        ConsumeMode::Lite => {
            let consumer = LitePullConsumer::builder()
                .namesrv_addr(namesrv)
                .group(&options.group)
                .subscribe(&options.topic, &options.expr)
                .configure(|c| {
                    c.consume_from_where = from;
                    c.consume_timestamp_ms = options.from.parse().ok();
                    c.pull_batch_size = 32;
                    if broadcast {
                        c.base.message_model = MessageModel::Broadcasting;
                    }
                })
                .start()
                .await?;
            let poll_loop = async {
                loop {
                    let batch = consumer.poll_timeout(Duration::from_millis(500)).await;
                    if !batch.is_empty() && !record(&tally, &batch) {
                        break;
                    }
                }
            };
            tokio::select! {
                _ = done_rx => {}
                _ = stop.recv() => {}
                _ = poll_loop => {}
            }
            consumer.shutdown().await;
        }
        ConsumeMode::Schedule => {
            let task_tally = tally.clone();
            let start_at = options.from.clone();
            let expr = options.expr.clone();
            let service = PullScheduleService::builder()
                .namesrv_addr(namesrv)
                .group(&options.group)
                .configure(|c| {
                    if broadcast {
                        c.message_model = MessageModel::Broadcasting;
                    }
                })
                .register_pull_task_fn(&options.topic, move |queue, mut ctx| {
                    let (tally, start_at, expr) =
                        (task_tally.clone(), start_at.clone(), expr.clone());
                    async move {
                        let consumer = ctx.pull_consumer().clone();
                        if let Err(e) =
                            schedule_step(&consumer, &queue, &expr, &start_at, &tally).await
                        {
                            tracing::warn!(%queue, error = %e, "pull task failed");
                            ctx.set_pull_next_delay(Duration::from_secs(1));
                        } else {
                            ctx.set_pull_next_delay(Duration::ZERO);
                        }
                        ctx
                    }
                })
                .start()
                .await?;
            tokio::select! {
                _ = done_rx => {}
                _ = stop.recv() => {}
            }
            service.shutdown().await;
        }
    }
    let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(error) = t.print_failed.take() {
        return Err(error.into());
    }
    let seconds = match (t.first, t.last) {
        (Some(first), Some(last)) => (last - first).as_secs_f64(),
        _ => 0.0,
    };
    t.latencies_ms.sort_unstable();
    let rate = if seconds > 0.0 {
        (t.count as f64 / seconds).round()
    } else {
        0.0
    };
    println!(
        "{}",
        json!({
            "count": t.count,
            "seconds": rounded(seconds),
            "msgs_per_sec": rate,
            "latency_ms": {
                "p50": percentile(&t.latencies_ms, 50.0),
                "p99": percentile(&t.latencies_ms, 99.0),
                "max": t.latencies_ms.last().copied().unwrap_or(0),
            },
        })
    );
    Ok(())
}

/// Starts the push consumer of `consume`.
async fn start_push(
    namesrv: &str,
    options: &ConsumeOptions,
    from: ConsumeFromWhere,
    timestamp: Option<String>,
    tally: Arc<Mutex<Tally>>,
) -> CliResult<PushConsumer> {
    let broadcast = options.broadcast;
    let builder = PushConsumer::builder()
        .namesrv_addr(namesrv)
        .group(&options.group)
        .subscribe(&options.topic, &options.expr)
        .configure(|c| {
            c.consume_from_where = from;
            c.consume_timestamp = timestamp;
            if broadcast {
                c.message_model = MessageModel::Broadcasting;
            }
        });
    let builder = if options.orderly || options.orderly_by_key {
        builder
            .key_ordered(options.orderly_by_key)
            .orderly_listener_fn(move |messages, ctx| {
                let status = if record(&tally, &messages) {
                    OrderlyStatus::Success
                } else {
                    OrderlyStatus::SuspendCurrentQueueAMoment
                };
                async move { (status, ctx) }
            })
    } else {
        builder.listener_fn(move |messages, ctx| {
            let status = if record(&tally, &messages) {
                ConsumeStatus::Success
            } else {
                ConsumeStatus::ReconsumeLater
            };
            async move { (status, ctx) }
        })
    };
    Ok(builder.start().await?)
}

/// One run of the schedule-service task of `consume --mode schedule`: from the stored offset
/// (or `--from`), one long-polling pull of 32, counted, offset moved on.
async fn schedule_step(
    consumer: &PullConsumer,
    queue: &MessageQueue,
    expr: &str,
    start_at: &str,
    tally: &Mutex<Tally>,
) -> rocketmq_actor::Result<()> {
    let offset = match consumer.fetch_consume_offset(queue, false).await? {
        Some(offset) => offset,
        None => match start_at {
            "first" => consumer.min_offset(queue).await?,
            "last" => consumer.max_offset(queue).await?,
            ms => {
                let ms: i64 = ms.parse().unwrap_or(0);
                consumer.search_offset(queue, ms).await?
            }
        },
    };
    let result = consumer
        .pull_block_if_not_found(queue, expr, offset, 32)
        .await?;
    if result.status == PullStatus::Found
        && !result.messages.is_empty()
        && !record(tally, &result.messages)
    {
        // Not written out: the offset stays, the command is ending.
        return Ok(());
    }
    consumer
        .update_consume_offset(queue, result.next_begin_offset)
        .await;
    Ok(())
}

async fn reset_offset(args: ResetOffsetArgs) -> CliResult {
    let timestamp = match args.to.as_str() {
        "first" => 0,
        "last" => -1,
        ms => ms
            .parse::<i64>()
            .map_err(|_| format!("--to must be first, last or a Unix time in ms, not {ms:?}"))?,
    };
    let client = Client::start(ClientConfig::new(&args.namesrv))?;
    let result = client
        .reset_offset_by_timestamp(&args.group, &args.topic, timestamp, !args.no_force)
        .await;
    client.shutdown().await;
    for (queue, offset) in result? {
        println!(
            "{}",
            json!({"broker": queue.broker_name, "queue_id": queue.queue_id, "offset": offset})
        );
    }
    Ok(())
}

/// `NAME` or `NAME:QUEUES` of `broker --topic`.
fn topic_and_queues(spec: &str, default_queues: i32) -> Result<(String, i32), String> {
    let (name, queues) = match spec.rsplit_once(':') {
        Some((name, queues)) => {
            let queues: i32 = queues
                .parse()
                .map_err(|_| format!("--topic {spec}: queue count `{queues}` is not a number"))?;
            (name, queues)
        }
        None => (spec, default_queues),
    };
    if name.is_empty() || !(1..=1024).contains(&queues) {
        return Err(format!("--topic {spec}: needs a name and 1 to 1024 queues"));
    }
    Ok((name.to_owned(), queues))
}

async fn broker(args: BrokerArgs) -> CliResult {
    if args.brokers == 0 {
        return Err("--brokers must be at least 1".into());
    }
    let topics = args
        .topics
        .iter()
        .map(|spec| topic_and_queues(spec, args.queues))
        .collect::<Result<Vec<_>, _>>()?;
    if args.lock_expiry.is_zero() {
        return Err("--lock-expiry must be longer than zero".into());
    }
    if args
        .drop_connections_every
        .is_some_and(|every| every.is_zero())
    {
        return Err("--drop-connections-every must be longer than zero".into());
    }
    let mut stop = ShutdownSignal::install();
    let cluster = EmbeddedCluster::start(EmbeddedConfig {
        listen: args.listen,
        brokers: args.brokers,
        queues: args.queues,
        data_dir: args.data_dir,
        lock_expiry: args.lock_expiry,
        ..EmbeddedConfig::default()
    })
    .await?;
    for (topic, queues) in &topics {
        cluster.create_topic(topic, *queues).await?;
    }
    println!("{}", cluster.namesrv_addr());
    std::io::stdout().flush()?;
    match args.drop_connections_every {
        Some(every) => {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tokio::select! {
                    _ = stop.recv() => break,
                    _ = ticks.tick() => {
                        tracing::info!("fault injection: closing every client connection");
                        cluster.drop_connections().await?;
                    }
                }
            }
        }
        None => stop.recv().await,
    }
    cluster.shutdown().await;
    Ok(())
}

async fn demo(args: DemoArgs) -> CliResult {
    let cluster = EmbeddedCluster::start(EmbeddedConfig {
        brokers: args.brokers,
        ..EmbeddedConfig::ephemeral()
    })
    .await?;
    let namesrv = cluster.namesrv_addr();
    eprintln!(
        "embedded cluster: name server {namesrv}, brokers {:?}",
        cluster.broker_names()
    );
    let topic = "DemoTopic";
    eprint!("produce: ");
    produce(
        &namesrv,
        &LoadArgs {
            topic: topic.into(),
            count: args.count,
            size: args.size,
            tag: Some("TagA".into()),
            key_space: None,
            inflight: 128,
        },
    )
    .await?;
    eprint!("consume: ");
    consume(
        &namesrv,
        &ConsumeOptions {
            topic: topic.into(),
            group: "demo_group".into(),
            expr: "TagA".into(),
            count: Some(args.count),
            from: "first".into(),
            broadcast: false,
            print: false,
            orderly: false,
            orderly_by_key: false,
            mode: ConsumeMode::Push,
        },
    )
    .await?;
    cluster.shutdown().await;
    Ok(())
}
