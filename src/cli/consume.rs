//! `consume`: a push consumer (its listener), a lite pull consumer (its message stream) or a
//! pull schedule service (a task per queue), printing each message (`--format`) on stdout and a
//! summary line on stderr. It stops after exactly `--count` messages, once caught up (`--exit-at-end`), or at
//! SIGINT/SIGTERM.
//!
//! What is printed is what is acknowledged: a message is written out (and flushed) before its
//! listener call returns or its offset moves on, and a message that is not printed — past
//! `--count`, or with stdout gone — is never acknowledged: the push listener call for it never
//! completes (the consumer's shutdown gives up on it after `shutdown_await` without committing
//! past it), the lite stream is not asked for it, the schedule task leaves its offset before it.

use std::collections::HashMap;
use std::io::{BufWriter, IsTerminal, Stdout, Write};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hdrhistogram::Histogram;
use rocketmq_actor::consumer::config::format_consume_timestamp_utc;
use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus, MessageModel, OrderlyStatus};
use rocketmq_actor::metrics::PrometheusExporter;
use rocketmq_actor::pull::{LitePullConsumer, PullConsumer, PullScheduleService, PullStatus};
use rocketmq_actor::util::now_ms;
use rocketmq_actor::{Client, MessageExt, MessageQueue, PushConsumer};
use serde_json::json;
use tokio::sync::oneshot;

use super::format::{parse_format, write_message, Format};
use super::signal::ShutdownSignal;
use super::watch::{baseline, Progress, ProgressLine, Watcher};
use super::{
    emit_summary, parse_time, positive_u64, rounded, CliResult, Connect, Failure, Outcome,
};
use rocketmq_actor::filter::Selector;

/// How long a push consumer's shutdown waits for listener calls in flight: only the calls held
/// back (past `--count`, stdout gone) are still running then, and they must not be committed.
const HELD_CALLS_GRACE: Duration = Duration::from_millis(500);

impl ConsumeArgs {
    /// What to subscribe with: `--sql`, else the tag expression of `--expr`.
    fn selector(&self) -> Selector {
        match &self.sql {
            Some(sql) => Selector::sql(sql),
            None => Selector::tag(&self.expr),
        }
    }
}

/// `consume`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub connect: Connect,
    /// Topic to subscribe to.
    #[arg(short, long)]
    pub topic: String,
    /// Consumer group.
    #[arg(short, long)]
    pub group: String,
    /// Tag expression, e.g. "TagA || TagB".
    #[arg(long, default_value = "*")]
    pub expr: String,
    /// Select by a SQL92 expression over message properties instead of tags, e.g.
    /// "region = 'eu' AND amount > 100" (the broker needs enablePropertyFilter = true).
    #[arg(long, value_name = "EXPR", conflicts_with = "expr")]
    pub sql: Option<String>,
    /// Stop after exactly N messages: messages past N are neither printed nor acknowledged, so
    /// the group's next consumer gets them.
    #[arg(short, long, value_parser = positive_u64)]
    pub count: Option<u64>,
    /// Stop (exit 0) once caught up: every queue of the topic consumed up to its end offset as
    /// it stood when that queue caught up (at once for a topic without messages). Needs a
    /// clustering consumer: a broadcasting one keeps its offsets on its host.
    #[arg(long, conflicts_with = "broadcast")]
    pub exit_at_end: bool,
    /// Where a queue without a stored offset starts: first, last, or the first message stored
    /// at or after a time (Unix ms, RFC 3339, or relative as `-1h`).
    #[arg(
        long,
        default_value = "last",
        value_parser = parse_start,
        value_name = "first|last|TIME",
        allow_hyphen_values = true
    )]
    pub from: StartAt,
    /// Broadcasting instead of clustering.
    #[arg(long)]
    pub broadcast: bool,
    /// Print each message: `json` (one object per line: topic, broker, queue_id, queue_offset,
    /// msg_id, offset_msg_id, keys, tags, properties, reconsume_times, born_timestamp,
    /// born_host, store_timestamp, store_host, body, body_encoding) or a template of
    /// placeholders %t topic, %B broker, %q queue id, %o offset, %k keys, %T tag, %s body,
    /// %l body length, %i msg id, %I offset msg id, %b born ms, %S store ms, %r reconsume
    /// times, %h properties, %% a %; escapes \n \t \r \\ (no newline is added).
    #[arg(long, value_parser = parse_format, value_name = "json|TEMPLATE")]
    pub format: Option<Format>,
    /// The same as `--format json`.
    #[arg(long, conflicts_with = "format")]
    pub print: bool,
    /// Orderly consumption: one batch at a time per queue, under the queue's broker lock.
    #[arg(long)]
    pub orderly: bool,
    /// Orderly per key (KEYS / __SHARDINGKEY): keys of one queue run concurrently.
    #[arg(long, conflicts_with = "orderly")]
    pub orderly_by_key: bool,
    /// Consumer kind: push (listener), lite (message stream of a lite pull consumer) or
    /// schedule (pull schedule service, a task per queue).
    #[arg(long, value_enum, default_value_t = ConsumeMode::Push)]
    pub mode: ConsumeMode,
    /// Serve the consumer's metrics (pulls, consumes, lag and cache per queue, rebalances,
    /// retries, reconnects) in the Prometheus text format at http://HOST:PORT/metrics while it
    /// runs.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The global `--quiet`: no progress line.
    #[arg(skip)]
    pub quiet: bool,
}

/// `consume --mode`.
#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum ConsumeMode {
    /// A push consumer's listener.
    Push,
    /// A lite pull consumer's message stream.
    Lite,
    /// A pull schedule service.
    Schedule,
}

/// `consume --from`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StartAt {
    /// The first stored message.
    First,
    /// After the last stored message.
    Last,
    /// The first message stored at or after this Unix time (ms).
    Timestamp(i64),
}

/// Parses `first`, `last` or a time ([`parse_time`]).
pub fn parse_start(text: &str) -> Result<StartAt, String> {
    match text {
        "first" => Ok(StartAt::First),
        "last" => Ok(StartAt::Last),
        time => parse_time(time).map(StartAt::Timestamp).map_err(|e| {
            format!(
                "expected first, last, or {}",
                e.trim_start_matches("expected ")
            )
        }),
    }
}

impl ConsumeArgs {
    /// What clap cannot check on its own.
    pub fn validate(&self) -> Result<(), String> {
        if self.mode != ConsumeMode::Push && (self.orderly || self.orderly_by_key) {
            return Err("--orderly and --orderly-by-key need --mode push".into());
        }
        Ok(())
    }

    fn output(&self) -> Option<Format> {
        self.format
            .clone()
            .or_else(|| self.print.then_some(Format::Json))
    }

    fn consume_from_where(&self) -> ConsumeFromWhere {
        match self.from {
            StartAt::First => ConsumeFromWhere::FirstOffset,
            StartAt::Last => ConsumeFromWhere::LastOffset,
            StartAt::Timestamp(_) => ConsumeFromWhere::Timestamp,
        }
    }

    fn timestamp_ms(&self) -> Option<i64> {
        match self.from {
            StartAt::Timestamp(ms) => Some(ms),
            _ => None,
        }
    }

    /// Whether the command ends by itself (a signal before that is an interruption).
    fn ends_by_itself(&self) -> bool {
        self.count.is_some() || self.exit_at_end
    }
}

/// Why consumption ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// `--count` messages were printed.
    Count,
    /// `--exit-at-end`: every queue caught up.
    CaughtUp,
    /// SIGINT or SIGTERM.
    Signal,
    /// stdout could not be written.
    StdoutClosed,
    /// The consumer stopped by itself.
    Stopped,
}

/// What the consumer's callbacks accumulate.
struct Tally {
    count: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    /// Birth-to-consumption latencies: bounded memory, 3 significant digits.
    latencies_ms: Histogram<u64>,
    target: Option<u64>,
    /// No message is taken any more (`--count` reached or stdout gone).
    closed: bool,
    done: Option<oneshot::Sender<End>>,
    out: Option<(Format, BufWriter<Stdout>)>,
    /// Why the output failed: the command ends with this error.
    print_failed: Option<String>,
    /// The reader of stdout went away (`| head`): the command ends quietly, with what was
    /// printed committed and no summary.
    reader_gone: bool,
    /// Per queue, the offset after the last message taken (`--mode lite`'s position).
    consumed: HashMap<MessageQueue, i64>,
}

fn lock(tally: &Mutex<Tally>) -> MutexGuard<'_, Tally> {
    tally.lock().unwrap_or_else(|e| e.into_inner())
}

impl Tally {
    fn end(&mut self, end: End) {
        self.closed = true;
        if let Some(done) = self.done.take() {
            let _ = done.send(end);
        }
    }

    fn summary(&self) -> serde_json::Value {
        let seconds = match (self.first, self.last) {
            (Some(first), Some(last)) => (last - first).as_secs_f64(),
            _ => 0.0,
        };
        let rate = if seconds > 0.0 {
            (self.count as f64 / seconds).round()
        } else {
            0.0
        };
        json!({
            "count": self.count,
            "seconds": rounded(seconds),
            "msgs_per_sec": rate,
            "latency_ms": {
                "p50": self.latencies_ms.value_at_quantile(0.5),
                "p99": self.latencies_ms.value_at_quantile(0.99),
                "max": self.latencies_ms.max(),
            },
        })
    }
}

/// An empty latency histogram (auto-resizing, 3 significant digits).
fn latency_histogram() -> Histogram<u64> {
    // 3 significant figures is within hdrhistogram's 0..=5.
    Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant figures are valid"))
}

/// Takes what it may of a consumed batch — all of it, or up to `--count` — prints it (flushed)
/// and counts it. Returns how many messages were taken, a prefix of the batch: the caller must
/// not acknowledge the rest.
fn record(tally: &Mutex<Tally>, messages: &[MessageExt]) -> usize {
    let now = Instant::now();
    let now_ms = now_ms();
    let mut t = lock(tally);
    if t.closed {
        return 0;
    }
    let room = t
        .target
        .map_or(messages.len() as u64, |n| n.saturating_sub(t.count));
    let taken = &messages[..messages.len().min(room as usize)];
    if let Some((format, out)) = t.out.as_mut() {
        let written = taken
            .iter()
            .try_for_each(|message| write_message(format, message, out))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                t.reader_gone = true;
            } else {
                t.print_failed = Some(format!("cannot write to stdout: {e}"));
            }
            t.end(End::StdoutClosed);
            return 0;
        }
    }
    t.first.get_or_insert(now);
    t.last = Some(now);
    for message in taken {
        t.count += 1;
        // A negative latency (clocks of two hosts apart) counts as 0; the histogram grows
        // to fit any value, so recording cannot fail.
        let latency = u64::try_from(now_ms - message.born_timestamp).unwrap_or(0);
        let _ = t.latencies_ms.record(latency);
        let queue = MessageQueue::new(message.topic(), &*message.broker_name, message.queue_id);
        let next = message.queue_offset + 1;
        let consumed = t.consumed.entry(queue).or_insert(next);
        *consumed = (*consumed).max(next);
    }
    if t.target.is_some_and(|n| t.count >= n) {
        t.end(End::Count);
    }
    taken.len()
}

/// Runs `consume`: prints the messages (with `--format`) and a summary line.
pub async fn consume(args: &ConsumeArgs) -> CliResult {
    let mut stop = ShutdownSignal::install();
    // Before the client and the consumer: they take their metric handles when they start.
    let _exporter = match args.metrics_addr {
        Some(addr) => Some(PrometheusExporter::serve(addr).await?),
        None => None,
    };
    let client = args.connect.client()?;
    let (done_tx, done_rx) = oneshot::channel();
    let tally = Arc::new(Mutex::new(Tally {
        count: 0,
        first: None,
        last: None,
        latencies_ms: latency_histogram(),
        target: args.count,
        closed: false,
        done: Some(done_tx),
        out: args
            .output()
            .map(|format| (format, BufWriter::new(std::io::stdout()))),
        print_failed: None,
        reader_gone: false,
        consumed: HashMap::new(),
    }));
    let result = run(args, &client, &tally, done_rx, &mut stop).await;
    client.shutdown().await;
    let end = result?;
    let summary = {
        let mut t = lock(&tally);
        if let Some(error) = t.print_failed.take() {
            return Err(Failure(error));
        }
        if t.reader_gone {
            return Ok(Outcome::Done);
        }
        t.summary()
    };
    emit_summary(&summary);
    Ok(match end {
        End::Signal if args.ends_by_itself() => Outcome::Interrupted,
        _ => Outcome::Done,
    })
}

async fn run(
    args: &ConsumeArgs,
    client: &Client,
    tally: &Arc<Mutex<Tally>>,
    done: oneshot::Receiver<End>,
    stop: &mut ShutdownSignal,
) -> CliResult<End> {
    // The base client's requests name the topic and group as on the wire.
    let namespace = args.connect.namespace();
    let wire_topic = namespace.wrap(&args.topic).into_owned();
    let wire_group = namespace.wrap(&args.group).into_owned();
    let probed = tokio::select! {
        probed = args.connect.probe(client, &wire_topic) => probed?,
        _ = stop.recv() => return Ok(End::Signal),
    };
    if args.exit_at_end && probed.is_none() {
        return Err(Failure(format!(
            "topic {} does not exist: there is no end to consume to",
            args.topic
        )));
    }
    let line = (!args.quiet && std::io::stderr().is_terminal()).then(ProgressLine::new);
    let watching = args.exit_at_end || line.is_some();
    let start = match (&probed, watching) {
        (Some(route), true) => {
            tokio::select! {
                start = baseline(client, &wire_group, &route.consume_queues, args.from) => start,
                _ = stop.recv() => return Ok(End::Signal),
            }
        }
        _ => HashMap::new(),
    };
    let watcher = watching.then(|| Watcher {
        client,
        group: &wire_group,
        topic: &wire_topic,
        baseline: start,
        counted: || lock(tally).count,
        // Messages come with their topic unwrapped; the watcher's queues are wire names.
        consumed: |queue: &MessageQueue| {
            lock(tally)
                .consumed
                .get(&namespace.unwrap_queue(queue))
                .copied()
        },
        exit_at_end: args.exit_at_end,
        lag: !args.broadcast,
        line,
    });
    match args.mode {
        ConsumeMode::Push => push(args, client, tally, done, stop, watcher).await,
        ConsumeMode::Lite => lite(args, client, tally, stop, watcher).await,
        ConsumeMode::Schedule => schedule(args, client, tally, done, stop, watcher).await,
    }
}

/// Runs the watcher: returns once caught up (`--exit-at-end`), never without one.
async fn caught_up<C, P>(watcher: &mut Option<Watcher<'_, C, P>>, progress: Progress<'_>)
where
    C: Fn() -> u64,
    P: Fn(&MessageQueue) -> Option<i64>,
{
    match watcher {
        Some(watcher) if watcher.exit_at_end || watcher.line.is_some() => {
            watcher.run(progress).await;
            if !watcher.exit_at_end {
                std::future::pending::<()>().await;
            }
        }
        _ => std::future::pending().await,
    }
}

async fn push<C, P>(
    args: &ConsumeArgs,
    client: &Client,
    tally: &Arc<Mutex<Tally>>,
    mut done: oneshot::Receiver<End>,
    stop: &mut ShutdownSignal,
    mut watcher: Option<Watcher<'_, C, P>>,
) -> CliResult<End>
where
    C: Fn() -> u64,
    P: Fn(&MessageQueue) -> Option<i64>,
{
    let consumer = start_push(args, client, tally.clone(), watcher.is_some()).await?;
    let end = tokio::select! {
        end = &mut done => end.unwrap_or(End::Count),
        _ = stop.recv() => End::Signal,
        _ = caught_up(&mut watcher, Progress::Broker) => End::CaughtUp,
    };
    consumer.shutdown().await;
    if let Some(watcher) = watcher.as_mut() {
        watcher.finish();
    }
    Ok(end)
}

/// Starts the push consumer of `consume`.
async fn start_push(
    args: &ConsumeArgs,
    client: &Client,
    tally: Arc<Mutex<Tally>>,
    watching: bool,
) -> CliResult<PushConsumer> {
    let from = args.consume_from_where();
    let timestamp = args.timestamp_ms().map(format_consume_timestamp_utc);
    let broadcast = args.broadcast;
    let namespace = args.connect.namespace.clone();
    let builder = PushConsumer::builder()
        .client(client.clone())
        .group(&args.group)
        .subscribe(&args.topic, args.selector())
        .configure(|c| {
            c.namespace = namespace;
            c.consume_from_where = from;
            c.consume_timestamp = timestamp;
            if broadcast {
                c.message_model = MessageModel::Broadcasting;
            }
            c.shutdown_await = Some(HELD_CALLS_GRACE);
            if watching {
                // The watcher reads the group's position from the broker.
                c.persist_consumer_offset_interval = Duration::from_millis(250);
            }
        });
    let builder = if args.orderly || args.orderly_by_key {
        builder
            .key_ordered(args.orderly_by_key)
            .orderly_listener_fn(move |messages, ctx| {
                let all = record(&tally, &messages) == messages.len();
                async move {
                    if !all {
                        // Not taken: never acknowledged (see the module documentation).
                        std::future::pending::<()>().await;
                    }
                    (OrderlyStatus::Success, ctx)
                }
            })
    } else {
        builder.listener_fn(move |messages, ctx| {
            let all = record(&tally, &messages) == messages.len();
            async move {
                if !all {
                    // Not taken: never acknowledged (see the module documentation).
                    std::future::pending::<()>().await;
                }
                (ConsumeStatus::Success, ctx)
            }
        })
    };
    Ok(builder.start().await?)
}

async fn lite<C, P>(
    args: &ConsumeArgs,
    client: &Client,
    tally: &Arc<Mutex<Tally>>,
    stop: &mut ShutdownSignal,
    mut watcher: Option<Watcher<'_, C, P>>,
) -> CliResult<End>
where
    C: Fn() -> u64,
    P: Fn(&MessageQueue) -> Option<i64>,
{
    let from = args.consume_from_where();
    let timestamp = args.timestamp_ms();
    let broadcast = args.broadcast;
    let watching = watcher.is_some();
    let namespace = args.connect.namespace.clone();
    let consumer = LitePullConsumer::builder()
        .client(client.clone())
        .group(&args.group)
        .subscribe(&args.topic, args.selector())
        .configure(|c| {
            c.base.namespace = namespace;
            c.consume_from_where = from;
            c.consume_timestamp_ms = timestamp;
            c.pull_batch_size = 32;
            if broadcast {
                c.base.message_model = MessageModel::Broadcasting;
            }
            if watching {
                c.auto_commit_interval = Duration::from_secs(1);
            }
        })
        .start()
        .await?;
    // One message at a time: the stream commits only what it yielded, and a message is asked
    // for only while there is room for it, so nothing past --count is ever committed.
    let mut messages = consumer.stream();
    let poll_loop = async {
        loop {
            if lock(tally).closed {
                return End::Count;
            }
            let Some(message) = messages.next().await else {
                return End::Stopped;
            };
            if record(tally, std::slice::from_ref(&message)) == 0 {
                // stdout is gone: the message goes back rather than being committed unprinted.
                let queue =
                    MessageQueue::new(message.topic(), &*message.broker_name, message.queue_id);
                if let Err(e) = consumer.seek(&queue, message.queue_offset).await {
                    tracing::warn!(%queue, error = %e, "cannot put an unprinted message back");
                }
                return End::StdoutClosed;
            }
        }
    };
    let end = tokio::select! {
        end = poll_loop => end,
        _ = stop.recv() => End::Signal,
        _ = caught_up(&mut watcher, Progress::Lite(&consumer)) => End::CaughtUp,
    };
    // A batch half handed out goes back to its first message not yielded.
    drop(messages);
    consumer.shutdown().await;
    if let Some(watcher) = watcher.as_mut() {
        watcher.finish();
    }
    Ok(end)
}

async fn schedule<C, P>(
    args: &ConsumeArgs,
    client: &Client,
    tally: &Arc<Mutex<Tally>>,
    mut done: oneshot::Receiver<End>,
    stop: &mut ShutdownSignal,
    mut watcher: Option<Watcher<'_, C, P>>,
) -> CliResult<End>
where
    C: Fn() -> u64,
    P: Fn(&MessageQueue) -> Option<i64>,
{
    let task_tally = tally.clone();
    let from = args.from;
    let expr = args.expr.clone();
    let broadcast = args.broadcast;
    // Long polls would hold a caught-up queue's first answer (and so its position) for the
    // broker's suspend time: an `--exit-at-end` run pulls without them.
    let long_poll = !args.exit_at_end;
    let namespace = args.connect.namespace.clone();
    let service = PullScheduleService::builder()
        .client(client.clone())
        .group(&args.group)
        .configure(|c| {
            c.namespace = namespace;
            if broadcast {
                c.message_model = MessageModel::Broadcasting;
            }
        })
        .register_pull_task_fn(&args.topic, move |queue, mut ctx| {
            let (tally, expr) = (task_tally.clone(), expr.clone());
            async move {
                let consumer = ctx.pull_consumer().clone();
                match schedule_step(&consumer, &queue, &expr, from, &tally, long_poll).await {
                    Ok(delay) => ctx.set_pull_next_delay(delay),
                    Err(e) => {
                        tracing::warn!(%queue, error = %e, "pull task failed");
                        ctx.set_pull_next_delay(Duration::from_secs(1));
                    }
                }
                ctx
            }
        })
        .start()
        .await?;
    let end = tokio::select! {
        end = &mut done => end.unwrap_or(End::Count),
        _ = stop.recv() => End::Signal,
        _ = caught_up(&mut watcher, Progress::Schedule(service.pull_consumer())) => End::CaughtUp,
    };
    service.shutdown().await;
    if let Some(watcher) = watcher.as_mut() {
        watcher.finish();
    }
    Ok(end)
}

/// One run of a `consume --mode schedule` task: from the stored offset (or `--from`), one pull
/// of 32, what was taken counted, the offset moved to the first message not taken. Returns the
/// delay before the next run.
async fn schedule_step(
    consumer: &PullConsumer,
    queue: &MessageQueue,
    expr: &str,
    from: StartAt,
    tally: &Mutex<Tally>,
    long_poll: bool,
) -> rocketmq_actor::Result<Duration> {
    let offset = match consumer.fetch_consume_offset(queue, false).await? {
        Some(offset) => offset,
        None => match from {
            StartAt::First => consumer.min_offset(queue).await?,
            StartAt::Last => consumer.max_offset(queue).await?,
            StartAt::Timestamp(ms) => consumer.search_offset(queue, ms).await?,
        },
    };
    let result = if long_poll {
        consumer
            .pull_block_if_not_found(queue, expr, offset, 32)
            .await?
    } else {
        consumer.pull(queue, expr, offset, 32).await?
    };
    let mut next = result.next_begin_offset;
    let mut delay = Duration::ZERO;
    if result.status == PullStatus::Found && !result.messages.is_empty() {
        let taken = record(tally, &result.messages);
        if let Some(first_left) = result.messages.get(taken) {
            // The command is ending: the rest stays for the group's next consumer.
            next = first_left.queue_offset;
            delay = Duration::from_secs(1);
        }
    } else if !long_poll {
        delay = Duration::from_millis(100);
    }
    consumer.update_consume_offset(queue, next).await;
    Ok(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocketmq_actor::Message;

    fn batch(queue_id: i32, offsets: std::ops::Range<i64>) -> Vec<MessageExt> {
        offsets
            .map(|offset| {
                let mut m = MessageExt::from(Message::new("T", format!("m{offset}")));
                m.broker_name = "b".into();
                m.queue_id = queue_id;
                m.queue_offset = offset;
                m
            })
            .collect()
    }

    #[test]
    fn record_takes_exactly_up_to_the_count_and_then_nothing() {
        let (done_tx, mut done_rx) = oneshot::channel();
        let tally = Mutex::new(Tally {
            count: 0,
            first: None,
            last: None,
            latencies_ms: latency_histogram(),
            target: Some(5),
            closed: false,
            done: Some(done_tx),
            out: None,
            print_failed: None,
            reader_gone: false,
            consumed: HashMap::new(),
        });
        assert_eq!(record(&tally, &batch(0, 0..3)), 3);
        assert!(done_rx.try_recv().is_err());
        assert_eq!(
            record(&tally, &batch(1, 10..14)),
            2,
            "a prefix of the batch"
        );
        assert_eq!(done_rx.try_recv(), Ok(End::Count));
        assert_eq!(record(&tally, &batch(0, 3..4)), 0, "closed");
        let t = lock(&tally);
        assert_eq!(t.count, 5);
        assert_eq!(t.consumed[&MessageQueue::new("T", "b", 0)], 3);
        assert_eq!(t.consumed[&MessageQueue::new("T", "b", 1)], 12);
    }
}
