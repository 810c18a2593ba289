//! # 05 — broadcasting: every member of the group gets every message
//!
//! What it teaches: the two message models. In the default, clustering, the queues of a topic
//! are divided among the group's members, so each message goes to one member of the group. In
//! broadcasting (`message_model = Broadcasting`) every member takes every queue and consumes
//! every message — for caches to invalidate, configuration to reload, one copy per instance.
//!
//! Here two consumers of one group run in one process (each on its own client, as two
//! processes would be) and both receive all five messages.
//!
//! The guarantee: each member gets each message at least once. Broadcasting offsets are the
//! member's own: they live in a local file (`<offset_store_dir>/DEFAULT/<group>/offsets.json`,
//! `offset_store_dir` being `~/.rocketmq_offsets` by default), not on the broker — so two
//! members on one machine need directories of their own, as here — and a broadcast message
//! that fails is not retried through the broker (there is no group-wide retry topic).
//!
//! Run it:
//!
//! ```text
//! cargo run --example 05_broadcasting
//! cargo run --example 05_broadcasting -- --namesrv 127.0.0.1:9876
//! ```
//!
//! Expected output:
//!
//! ```text
//! member A got 5 of 5 messages: news 0, news 1, news 2, news 3, news 4
//! member B got 5 of 5 messages: news 0, news 1, news 2, news 3, news 4
//! member A's offsets: /tmp/rocketmq-actor-05-…/A/DEFAULT/broadcast_…/offsets.json
//! member B's offsets: /tmp/rocketmq-actor-05-…/B/DEFAULT/broadcast_…/offsets.json
//! ```
//!
//! It exits 1 if either member misses a message.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus, MessageModel};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer};

type Error = Box<dyn std::error::Error>;

const COUNT: usize = 5;
const PATIENCE: Duration = Duration::from_secs(10);

#[actix_rt::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Error> {
    let (namesrv, cluster) = match namesrv_arg()? {
        Some(addr) => (addr, None),
        None => {
            let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral()).await?;
            (cluster.namesrv_addr(), Some(cluster))
        }
    };
    let run = rocketmq_actor::util::now_ms();
    let topic = format!("Broadcast{run}");
    let group = format!("broadcast_{run}");
    // A scratch directory for the members' offset files (removed at the end).
    let offsets_dir = std::env::temp_dir().join(format!("rocketmq-actor-05-{run}"));

    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for i in 0..COUNT {
        producer
            .send(Message::new(&topic, format!("news {i}")))
            .await?;
    }

    // Two members of one group; `.namesrv_addr` gives each a client of its own.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(char, String)>();
    let mut members = Vec::new();
    for name in ['A', 'B'] {
        let tx = tx.clone();
        let member = PushConsumer::builder()
            .namesrv_addr(&namesrv)
            .group(&group)
            .subscribe(&topic, "*")
            .configure(|c| {
                c.message_model = MessageModel::Broadcasting;
                // Each member's own directory for its offsets file.
                c.offset_store_dir = Some(offsets_dir.join(name.to_string()));
                c.consume_from_where = ConsumeFromWhere::FirstOffset;
            })
            .listener_fn(move |messages, ctx| {
                let tx = tx.clone();
                async move {
                    for m in &messages {
                        let _ = tx.send((name, String::from_utf8_lossy(m.body()).into_owned()));
                    }
                    (ConsumeStatus::Success, ctx)
                }
            })
            .start()
            .await?;
        members.push(member);
    }

    let (mut got_a, mut got_b) = (BTreeSet::new(), BTreeSet::new());
    let deadline = Instant::now() + PATIENCE;
    while got_a.len() < COUNT || got_b.len() < COUNT {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(('A', body))) => got_a.insert(body),
            Ok(Some((_, body))) => got_b.insert(body),
            _ => break,
        };
    }
    for (name, got) in [('A', &got_a), ('B', &got_b)] {
        let list: Vec<&str> = got.iter().map(String::as_str).collect();
        println!(
            "member {name} got {} of {COUNT} messages: {}",
            got.len(),
            list.join(", ")
        );
    }

    // Shutdown writes each member's offsets to its file.
    for member in members {
        member.shutdown().await;
    }
    let mut files = 0;
    for name in ['A', 'B'] {
        for file in offset_files(&offsets_dir.join(name.to_string())) {
            println!("member {name}'s offsets: {}", file.display());
            files += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&offsets_dir);

    client.shutdown().await;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    if got_a.len() < COUNT || got_b.len() < COUNT {
        return Err("a member missed a message".into());
    }
    if files != 2 {
        return Err(format!("expected an offsets file per member, found {files}").into());
    }
    Ok(())
}

/// Every `offsets.json` under `dir`.
fn offset_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == "offsets.json") {
                found.push(path);
            }
        }
    }
    found
}

/// `--namesrv ADDR` (a real cluster's name server), or nothing (an embedded cluster).
fn namesrv_arg() -> Result<Option<String>, Error> {
    let mut args = std::env::args().skip(1);
    let mut namesrv = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--namesrv" => namesrv = Some(args.next().ok_or("--namesrv needs an address")?),
            other => {
                return Err(format!("unknown argument {other:?}; usage: [--namesrv ADDR]").into())
            }
        }
    }
    Ok(namesrv)
}
