//! Reads every message of a topic back with raw PULL_MESSAGE calls (no consumer runtime) and
//! checks what `rocketmq-actor produce` wrote: the count, each body, the tag and the key.
//!
//! ```text
//! cargo run --release --example raw_pull -- --namesrv 127.0.0.1:9876 --topic T \
//!     --expect 100000 [--size 128] [--tag TagA] [--key-space 100]
//! ```
//!
//! Every queue is pulled concurrently from offset 0 with FLAG_SUBSCRIPTION (so no heartbeat is
//! needed), 32 messages per call, until the broker answers PULL_NOT_FOUND. It prints one JSON line
//! and exits non-zero if anything is missing, duplicated or different. Its rate is also the
//! "raw pull loop" baseline the push consumer is compared with.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use clap::Parser;
use rocketmq_actor::actors::client::{call, Client, ClientConfig};
use rocketmq_actor::message::decode_messages;
use rocketmq_actor::protocol::codes::{pull_sys_flag, request_code, response_code};
use rocketmq_actor::protocol::header::{PullMessageRequestHeader, PullMessageResponseHeader};
use rocketmq_actor::protocol::RemotingCommand;
use rocketmq_actor::MessageQueue;

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
}

#[derive(Default)]
struct Tally {
    count: u64,
    bad_body: u64,
    bad_tag: u64,
    bad_key: u64,
    indexes: Vec<u64>,
}

async fn pull_queue(client: Client, args: &Args, queue: MessageQueue) -> Result<Tally, String> {
    let route = client
        .route(&queue.topic)
        .await
        .map_err(|e| e.to_string())?;
    let addr = route
        .pull_addr(&queue.broker_name, 0)
        .ok_or("no broker address")?
        .to_owned();
    let conn = client.connection(&addr).await.map_err(|e| e.to_string())?;
    let mut tally = Tally::default();
    let mut offset = 0i64;
    loop {
        let header = PullMessageRequestHeader {
            consumer_group: args.group.clone(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            queue_offset: offset,
            max_msg_nums: 32,
            sys_flag: pull_sys_flag::SUBSCRIPTION,
            commit_offset: 0,
            suspend_timeout_millis: 0,
            subscription: Some("*".into()),
            sub_version: 0,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            bname: Some(queue.broker_name.clone()),
        };
        let command = RemotingCommand::request_with_header(request_code::PULL_MESSAGE, &header);
        let response = call(&conn, command, Duration::from_secs(10))
            .await
            .map_err(|e| e.to_string())?;
        let reply: PullMessageResponseHeader =
            response.decode_header().map_err(|e| e.to_string())?;
        match response.code {
            response_code::SUCCESS => {
                let messages = decode_messages(response.body.clone().unwrap_or_default())
                    .map_err(|e| e.to_string())?;
                for message in &messages {
                    tally.count += 1;
                    check(args, message, &mut tally);
                }
            }
            response_code::PULL_NOT_FOUND => return Ok(tally),
            response_code::PULL_RETRY_IMMEDIATELY | response_code::PULL_OFFSET_MOVED => {}
            code => {
                return Err(format!(
                    "{queue}: pull answered {code} {}",
                    response.remark.unwrap_or_default()
                ))
            }
        }
        if reply.next_begin_offset <= offset && response.code != response_code::SUCCESS {
            return Ok(tally);
        }
        offset = reply.next_begin_offset;
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
        let route = client.route(&args.topic).await?;
        let started = Instant::now();
        let pulls = route
            .consume_queues
            .iter()
            .map(|q| pull_queue(client.clone(), &args, q.clone()));
        let mut total = Tally::default();
        for result in futures::future::join_all(pulls).await {
            let tally = result?;
            total.count += tally.count;
            total.bad_body += tally.bad_body;
            total.bad_tag += tally.bad_tag;
            total.bad_key += tally.bad_key;
            total.indexes.extend(tally.indexes);
        }
        let seconds = started.elapsed().as_secs_f64().max(f64::EPSILON);
        let distinct: HashSet<u64> = total.indexes.iter().copied().collect();
        let missing = (0..args.expect).filter(|i| !distinct.contains(i)).count();
        let duplicates = total.indexes.len() - distinct.len();
        println!(
            "{}",
            serde_json::json!({
                "count": total.count,
                "queues": route.consume_queues.len(),
                "seconds": (seconds * 1000.0).round() / 1000.0,
                "msgs_per_sec": (total.count as f64 / seconds).round(),
                "missing": missing,
                "duplicates": duplicates,
                "bad_body": total.bad_body,
                "bad_tag": total.bad_tag,
                "bad_key": total.bad_key,
            })
        );
        client.shutdown().await;
        let clean = missing == 0
            && duplicates == 0
            && total.bad_body == 0
            && total.bad_tag == 0
            && total.bad_key == 0
            && total.count == args.expect;
        if clean {
            Ok(())
        } else {
            Err("the topic does not hold exactly what was produced".into())
        }
    })
}
