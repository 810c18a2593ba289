//! `produce`: synthetic load (`--count`) or the lines of a file or of standard input
//! (`--file PATH`, `--file -`), every message with the same `--key`, `--tag` and `--property`s.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::future::{Either, FutureExt};
use futures::stream::{FuturesUnordered, Stream, StreamExt};
use rocketmq_actor::{Client, Message, Producer, ProducerConfig};
use serde_json::json;

use super::signal::ShutdownSignal;
use super::{emit, positive_u64, rounded, CliResult, Connect, Failure, Outcome};

/// `produce`'s arguments: `--count` or `--file`.
#[derive(clap::Args, Clone, Debug)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["count", "file"])))]
pub struct ProduceArgs {
    #[command(flatten)]
    pub connect: Connect,
    /// Topic to send to (auto-created by brokers that allow it).
    #[arg(short, long)]
    pub topic: String,
    /// Synthetic load: send this many generated bodies (`message-<i>-xxx…`, --size bytes each).
    #[arg(short, long, value_parser = positive_u64)]
    pub count: Option<u64>,
    /// Body size of the synthetic messages, in bytes.
    #[arg(long, default_value_t = 128, value_parser = at_least_one, conflicts_with = "file")]
    pub size: usize,
    /// Send each line of this file as a message (`-`: standard input), until its end. Line
    /// ends (`\n`, `\r\n`) are stripped, empty lines skipped (brokers refuse empty bodies), the
    /// bytes sent as they are.
    #[arg(long, value_name = "PATH|-")]
    pub file: Option<String>,
    /// KEYS of every message (space-separated keys).
    #[arg(long, conflicts_with = "key_space")]
    pub key: Option<String>,
    /// Tag of every message.
    #[arg(long)]
    pub tag: Option<String>,
    /// A user property of every message, as NAME=VALUE (repeatable).
    #[arg(long = "property", value_name = "NAME=VALUE", value_parser = parse_property)]
    pub properties: Vec<(String, String)>,
    /// Synthetic load with K keys: message i gets key `k{i % K}` and goes to the queue of that
    /// key, the messages of a key one after the other.
    #[arg(long, value_parser = positive_u64, conflicts_with = "file")]
    pub key_space: Option<u64>,
    /// Sends in flight at once (with --key-space: keys sent concurrently).
    #[arg(long, default_value_t = 128, value_parser = at_least_one)]
    pub inflight: usize,
    /// Hold a steady rate of R messages per second (message i leaves at i/R s after the start;
    /// a send that falls behind is followed by the next ones at once until the schedule is
    /// met). Without it, messages go as fast as --inflight allows.
    #[arg(long, value_name = "R", value_parser = positive_rate, conflicts_with = "key_space")]
    pub rate: Option<f64>,
    /// Send N messages per request (`send_batch`: the messages of one request go to one
    /// queue, in order), for brokers that take few requests per second. The last request may
    /// hold fewer.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = at_least_one, conflicts_with_all = ["key_space", "rate"])]
    pub batch: usize,
}

/// A rate in messages per second: finite and above 0.
fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        Ok(_) => Err("must be a number of messages per second above 0".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// When message `index` is due under a steady `rate` (messages per second), from the start.
fn due(index: u64, rate: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(index as f64 / rate)
}

/// `messages` released on the schedule of [`due`] (at once without a rate).
fn paced<S: Stream>(messages: S, rate: Option<f64>) -> impl Stream<Item = S::Item> {
    let start = tokio::time::Instant::now();
    messages
        .enumerate()
        .then(move |(index, message)| async move {
            if let Some(rate) = rate {
                tokio::time::sleep_until(start + due(index as u64, rate)).await;
            }
            message
        })
}

/// A count of at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// `--property NAME=VALUE`.
fn parse_property(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=VALUE, got {text:?}"))?;
    if name.is_empty() {
        return Err("the property name is empty".into());
    }
    if text.contains(['\u{1}', '\u{2}']) {
        return Err("names and values cannot hold the characters \\u0001 and \\u0002".into());
    }
    match name {
        "TAGS" => Err("set the tag with --tag".into()),
        "KEYS" => Err("set the keys with --key".into()),
        "UNIQ_KEY" => Err("UNIQ_KEY is set by the producer".into()),
        _ => Ok((name.to_owned(), value.to_owned())),
    }
}

impl ProduceArgs {
    /// A message with the body and every common attribute.
    fn message(&self, body: impl Into<bytes::Bytes>) -> Message {
        let mut message = Message::new(self.topic.clone(), body);
        if let Some(tag) = &self.tag {
            message = message.with_tags(tag);
        }
        if let Some(key) = &self.key {
            message = message.with_keys(key);
        }
        for (name, value) in &self.properties {
            message = message.with_property(name, value);
        }
        message
    }
}

/// The synthetic body of message `index`.
fn body_of(index: u64, size: usize) -> Vec<u8> {
    let mut body = format!("message-{index}-").into_bytes();
    body.resize(size.max(1), b'x');
    body
}

#[derive(Default)]
struct Sent {
    ok: u64,
    failed: u64,
    /// The first refusal for authentication or permission: reported once, at the end, and
    /// no more messages are sent after it (each would be refused alike).
    denied: Option<rocketmq_actor::Error>,
}

impl Sent {
    /// Counts the outcome of one request of `messages` messages.
    fn tally<T>(&mut self, messages: u64, result: rocketmq_actor::Result<T>) {
        match result {
            Ok(_) => self.ok += messages,
            Err(e) if e.is_access_denied() => {
                self.failed += messages;
                self.denied.get_or_insert(e);
            }
            Err(e) => {
                self.failed += messages;
                if self.failed <= 10 {
                    eprintln!("send failed: {e}");
                }
            }
        }
    }
}

/// Runs `produce`: prints a summary line; exit 1 if a send failed, 130 if a signal stopped it
/// before everything was sent.
pub async fn produce(args: &ProduceArgs) -> CliResult {
    let mut stop = ShutdownSignal::install();
    let client = args.connect.client()?;
    let result = produce_with(args, &client, &mut stop).await;
    client.shutdown().await;
    result
}

async fn produce_with(args: &ProduceArgs, client: &Client, stop: &mut ShutdownSignal) -> CliResult {
    let started = Instant::now();
    let mut sent = Sent::default();
    let wire_topic = args.connect.namespace().wrap(&args.topic).into_owned();
    let probed = tokio::select! {
        probed = args.connect.probe(client, &wire_topic) => Some(probed),
        _ = stop.recv() => None,
    };
    let outcome = match probed {
        None => Outcome::Interrupted,
        Some(probed) => {
            probed?;
            let config = ProducerConfig {
                namespace: args.connect.namespace.clone(),
                ..ProducerConfig::default()
            };
            let producer = Producer::new(client.clone(), config);
            if let (None, Some(keys)) = (&args.file, args.key_space) {
                send_keyed(args, &producer, keys, stop, &mut sent).await
            } else {
                // A file's lines or `--count` generated bodies, paced and sent alike.
                let messages = match &args.file {
                    Some(path) => read_lines(path)?
                        .map(|line| line.map(|body| args.message(body)))
                        .boxed_local(),
                    None => futures::stream::iter(0..args.count.unwrap_or(0))
                        .map(|index| Ok(args.message(body_of(index, args.size))))
                        .boxed_local(),
                };
                send_all(
                    &producer,
                    paced(messages, args.rate),
                    args.inflight,
                    args.batch,
                    stop,
                    &mut sent,
                )
                .await?
            }
        }
    };
    let seconds = started.elapsed().as_secs_f64().max(f64::EPSILON);
    emit(&json!({
        "count": sent.ok,
        "seconds": rounded(seconds),
        "msgs_per_sec": (sent.ok as f64 / seconds).round(),
    }))?;
    if let Some(denied) = sent.denied {
        return Err(denied.into());
    }
    if sent.failed > 0 {
        return Err(Failure(format!(
            "{} of {} sends failed",
            sent.failed,
            sent.ok + sent.failed
        )));
    }
    Ok(outcome)
}

/// Sends what `messages` yields, `inflight` requests at a time, `batch` messages per request.
/// A signal stops taking new messages; what was taken is still sent and the requests in flight
/// are waited for (and counted).
async fn send_all(
    producer: &Producer,
    messages: impl Stream<Item = CliResult<Message>>,
    inflight: usize,
    batch: usize,
    stop: &mut ShutdownSignal,
    sent: &mut Sent,
) -> CliResult {
    let send = |mut taken: Vec<Message>| {
        let count = taken.len() as u64;
        let request = match (taken.len(), taken.pop()) {
            (1, Some(message)) => Either::Left(producer.send(message)),
            (_, last) => {
                taken.extend(last);
                Either::Right(producer.send_batch(taken))
            }
        };
        request.map(move |result| (count, result))
    };
    let mut messages = std::pin::pin!(messages);
    let mut in_flight = FuturesUnordered::new();
    let mut taken = Vec::with_capacity(batch);
    let mut exhausted = false;
    let mut outcome = Outcome::Done;
    let mut read_error = None;
    while !(exhausted && in_flight.is_empty() && taken.is_empty()) {
        if sent.denied.is_some() {
            taken.clear(); // each would be refused alike
        }
        if taken.len() >= batch || (exhausted && !taken.is_empty()) {
            in_flight.push(send(std::mem::replace(
                &mut taken,
                Vec::with_capacity(batch),
            )));
        }
        tokio::select! {
            biased;
            _ = stop.recv(), if !exhausted => {
                outcome = Outcome::Interrupted;
                exhausted = true;
            }
            Some((count, result)) = in_flight.next(), if !in_flight.is_empty() => {
                sent.tally(count, result);
                exhausted |= sent.denied.is_some();
            }
            next = messages.next(), if !exhausted && in_flight.len() < inflight => match next {
                Some(Ok(message)) => taken.push(message),
                Some(Err(e)) => {
                    read_error = Some(e);
                    exhausted = true;
                }
                None => exhausted = true,
            },
            else => {}
        }
    }
    match read_error {
        Some(e) => Err(e),
        None => Ok(outcome),
    }
}

/// Keyed synthetic load: the messages of one key are sent one after the other so they are
/// stored in order (concurrent sends carry no order guarantee); keys go concurrently. A signal
/// ends each key's chain after its current send.
async fn send_keyed(
    args: &ProduceArgs,
    producer: &Producer,
    keys: u64,
    stop: &mut ShutdownSignal,
    sent: &mut Sent,
) -> Outcome {
    let count = args.count.unwrap_or(0);
    let stopped = AtomicBool::new(false);
    let chains = futures::stream::iter(0..keys.min(count))
        .map(|key| {
            let stopped = &stopped;
            async move {
                let mut results = Vec::new();
                let mut index = key;
                let name = format!("k{key}");
                while index < count && !stopped.load(Ordering::Relaxed) {
                    let message = args.message(body_of(index, args.size));
                    let result = producer.send_with_key(message, &name).await;
                    if matches!(&result, Err(e) if e.is_access_denied()) {
                        stopped.store(true, Ordering::Relaxed);
                    }
                    results.push(result);
                    index += keys;
                }
                results
            }
        })
        .buffer_unordered(args.inflight)
        .collect::<Vec<Vec<_>>>();
    let mut chains = std::pin::pin!(chains);
    let (results, outcome) = tokio::select! {
        results = &mut chains => (results, Outcome::Done),
        _ = stop.recv() => {
            stopped.store(true, Ordering::Relaxed);
            (chains.await, Outcome::Interrupted)
        }
    };
    for result in results.into_iter().flatten() {
        sent.tally(1, result);
    }
    outcome
}

/// The non-empty lines of `path` (`-`: standard input) without their line ends, read on a
/// thread of their own so that a slow source (a terminal, a pipe) never blocks the runtime.
fn read_lines(path: &str) -> CliResult<impl Stream<Item = CliResult<Vec<u8>>>> {
    let reader: Box<dyn BufRead + Send> = if path == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        let file =
            std::fs::File::open(path).map_err(|e| Failure(format!("cannot open {path}: {e}")))?;
        Box::new(std::io::BufReader::new(file))
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<CliResult<Vec<u8>>>(1024);
    let name = if path == "-" {
        "standard input".to_owned()
    } else {
        path.to_owned()
    };
    std::thread::Builder::new()
        .name("produce-input".into())
        .spawn(move || {
            let mut reader = reader;
            loop {
                let mut line = Vec::new();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) => return,
                    Ok(_) => {
                        if line.last() == Some(&b'\n') {
                            line.pop();
                            if line.last() == Some(&b'\r') {
                                line.pop();
                            }
                        }
                        if !line.is_empty() && tx.blocking_send(Ok(line)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.blocking_send(Err(Failure(format!("cannot read {name}: {e}"))));
                        return;
                    }
                }
            }
        })
        .map_err(|e| Failure(format!("cannot start the input thread: {e}")))?;
    Ok(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|line| (line, rx))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_rate_spaces_messages_evenly_from_the_start() {
        assert_eq!(due(0, 1000.0), std::time::Duration::ZERO);
        assert_eq!(due(1, 1000.0), std::time::Duration::from_millis(1));
        assert_eq!(due(2500, 1000.0), std::time::Duration::from_millis(2500));
        assert_eq!(due(3, 0.5), std::time::Duration::from_secs(6));
        for bad in ["0", "-1", "NaN", "inf", "fast"] {
            assert!(positive_rate(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(positive_rate("2.5"), Ok(2.5));
    }

    #[test]
    fn properties_are_name_value_pairs_the_producer_does_not_own() {
        assert_eq!(
            parse_property("color=blue=ish"),
            Ok(("color".into(), "blue=ish".into()))
        );
        assert_eq!(
            parse_property("empty="),
            Ok(("empty".into(), String::new()))
        );
        for bad in [
            "novalue",
            "=x",
            "TAGS=a",
            "KEYS=a",
            "UNIQ_KEY=a",
            "a\u{1}b=c",
        ] {
            assert!(parse_property(bad).is_err(), "{bad:?} accepted");
        }
    }
}
