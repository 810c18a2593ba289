//! Reads every message of a topic back with raw PULL_MESSAGE calls (no consumer runtime) and
//! checks what `rocketmq-actor produce` wrote: the count, each body, the tag and the key.
//!
//! ```text
//! cargo run --release --example raw_pull -- --namesrv 127.0.0.1:9876 --topic T \
//!     --expect 100000 [--size 128] [--tag TagA] [--key-space 100] [--timeout 60]
//! ```
//!
//! It uses only the public base layer: `Client::fetch_subscribe_message_queues` and
//! `Client::pull`. Every queue is pulled concurrently from offset 0 with FLAG_SUBSCRIPTION (so no
//! heartbeat is needed), `--batch` messages per call (32, the push consumer's default), on one connection
//! per broker. It prints one JSON line and exits non-zero if anything is missing, duplicated or
//! different. Its rate is also the "raw pull loop" baseline the push consumer is compared with:
//! `msgs_per_sec` counts from the first message received to the last, as `rocketmq-actor
//! consume` does.
//!
//! A queue's first PULL_NOT_FOUND does not end it: a broker acknowledges a send once the message
//! is in its commit log and dispatches it to the consume queue afterwards, so right after a
//! `produce` a queue may not show all its messages yet. Queues long-poll (the broker answers as
//! soon as a message is dispatched) until `--expect` messages were read in total, or until
//! `--timeout`.

use std::cell::Cell;
use std::collections::HashSet;
use std::rc::Rc;
use std::time::{Duration, Instant};

use clap::Parser;
use rocketmq_actor::rpc::{PullRequest, PullStatus};
use rocketmq_actor::MessageQueue;
use rocketmq_actor::{Client, ClientConfig};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    namesrv: String,
    #[arg(long)]
    topic: String,
    /// How many messages `produce` sent.
    #[arg(long)]
    expect: u64,
    #[arg(long, default_value_t = 128)]
    size: usize,
    #[arg(long)]
    tag: Option<String>,
    #[arg(long)]
    key_space: Option<u64>,
    #[arg(long, default_value = "raw_pull_check")]
    group: String,
    /// Messages per PULL_MESSAGE.
    #[arg(long, default_value_t = 32)]
    batch: i32,
    /// Give up (and report what is missing) after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

/// How long a pull waits on the broker for a message while messages are still expected.
const LONG_POLL: Duration = Duration::from_millis(1000);

#[derive(Default)]
struct Tally {
    count: u64,
    bad_body: u64,
    bad_tag: u64,
    bad_key: u64,
    /// PULL_OFFSET_MOVED answers: the broker skipped messages that were expected.
    offset_moved: u64,
    indexes: Vec<u64>,
}

/// What every queue loop shares (all of them run on one thread).
struct Progress {
    /// Messages read so far, all queues together.
    total: Cell<u64>,
    /// When the first and the latest message arrived.
    first: Cell<Option<Instant>>,
    last: Cell<Option<Instant>>,
    deadline: Instant,
}

impl Progress {
    fn record(&self, count: usize) {
        let now = Instant::now();
        if self.first.get().is_none() {
            self.first.set(Some(now));
        }
        self.last.set(Some(now));
        self.total.set(self.total.get() + count as u64);
    }
}

async fn pull_queue(
    client: Client,
    args: &Args,
    queue: MessageQueue,
    progress: Rc<Progress>,
) -> Result<Tally, String> {
    let group: std::sync::Arc<str> = args.group.as_str().into();
    let mut tally = Tally::default();
    let mut offset = 0i64;
    loop {
        let waiting = progress.total.get() < args.expect;
        let mut request =
            PullRequest::new(group.clone(), queue.clone(), offset).max_messages(args.batch);
        if waiting {
            request = request.long_poll(LONG_POLL);
        }
        let pulled = client
            .pull(&request)
            .await
            .map_err(|e| format!("{queue}: pull at {offset}: {e}"))?;
        match pulled.status {
            PullStatus::Found => {
                progress.record(pulled.messages.len());
                for message in &pulled.messages {
                    tally.count += 1;
                    check(args, message, &mut tally);
                }
            }
            PullStatus::NoNewMsg => {
                if !waiting || Instant::now() >= progress.deadline {
                    return Ok(tally);
                }
                // Long-polled and still nothing: more may yet be dispatched; ask again.
            }
            PullStatus::NoMatchedMsg => {}
            PullStatus::OffsetIllegal => tally.offset_moved += 1,
        }
        if pulled.next_begin_offset < offset {
            return Err(format!(
                "{queue}: the broker moved the offset back from {offset} to {}",
                pulled.next_begin_offset
            ));
        }
        offset = pulled.next_begin_offset;
    }
}

fn check(args: &Args, message: &rocketmq_actor::MessageExt, tally: &mut Tally) {
    let body = message.body();
    let index = std::str::from_utf8(body)
        .ok()
        .and_then(|text| text.strip_prefix("message-"))
        .and_then(|rest| rest.split('-').next())
        .and_then(|n| n.parse::<u64>().ok());
    let Some(index) = index else {
        tally.bad_body += 1;
        return;
    };
    let mut expected = format!("message-{index}-").into_bytes();
    expected.resize(args.size.max(1), b'x');
    if body.as_ref() != expected.as_slice() {
        tally.bad_body += 1;
    }
    if message.tags() != args.tag.as_deref() {
        tally.bad_tag += 1;
    }
    if let Some(k) = args.key_space {
        let key = format!("k{}", index % k);
        if !message.keys().contains(&key.as_str()) {
            tally.bad_key += 1;
        }
    }
    tally.indexes.push(index);
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    actix::System::new().block_on(async move {
        let client = Client::start(ClientConfig::new(&args.namesrv))?;
        let queues = client.fetch_subscribe_message_queues(&args.topic).await?;
        let started = Instant::now();
        let progress = Rc::new(Progress {
            total: Cell::new(0),
            first: Cell::new(None),
            last: Cell::new(None),
            deadline: started + Duration::from_secs(args.timeout),
        });
        let pulls = queues
            .iter()
            .map(|q| pull_queue(client.clone(), &args, q.clone(), progress.clone()));
        let mut total = Tally::default();
        for result in futures::future::join_all(pulls).await {
            let tally = result?;
            total.count += tally.count;
            total.bad_body += tally.bad_body;
            total.bad_tag += tally.bad_tag;
            total.bad_key += tally.bad_key;
            total.offset_moved += tally.offset_moved;
            total.indexes.extend(tally.indexes);
        }
        let wall = started.elapsed().as_secs_f64();
        let seconds = match (progress.first.get(), progress.last.get()) {
            (Some(first), Some(last)) => (last - first).as_secs_f64(),
            _ => 0.0,
        };
        let distinct: HashSet<u64> = total.indexes.iter().copied().collect();
        let missing = (0..args.expect).filter(|i| !distinct.contains(i)).count();
        let duplicates = total.indexes.len() - distinct.len();
        let rate = if seconds > 0.0 {
            (total.count as f64 / seconds).round()
        } else {
            0.0
        };
        println!(
            "{}",
            serde_json::json!({
                "count": total.count,
                "queues": queues.len(),
                "seconds": (seconds * 1000.0).round() / 1000.0,
                "wall_seconds": (wall * 1000.0).round() / 1000.0,
                "msgs_per_sec": rate,
                "missing": missing,
                "duplicates": duplicates,
                "bad_body": total.bad_body,
                "bad_tag": total.bad_tag,
                "bad_key": total.bad_key,
                "offset_moved": total.offset_moved,
            })
        );
        client.shutdown().await;
        let clean = missing == 0
            && duplicates == 0
            && total.bad_body == 0
            && total.bad_tag == 0
            && total.bad_key == 0
            && total.offset_moved == 0
            && total.count == args.expect;
        if clean {
            Ok(())
        } else {
            Err("the topic does not hold exactly what was produced".into())
        }
    })
}
