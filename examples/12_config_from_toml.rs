//! # 12 — configuration from a TOML file, and what a bad one looks like
//!
//! What it teaches: every option of Java's `DefaultMQPushConsumer` (and the few this crate
//! adds) is a field of `PushConsumerConfig`, loadable from TOML (`from_toml_str`, feature
//! `toml`, a default) or JSON (`from_json_str`) with snake_case keys; durations are
//! humantime strings (`"5m"`, `"1s"`, `"50ms"`). A key you leave out keeps its Java default.
//! The document is validated when it is read (and again at `start`): an out-of-range value, an
//! unknown key (a typo must not silently fall back to a default) or a bad duration is an
//! `Error::Config` naming the option, the value and what is allowed.
//!
//! The run writes a consumer config to a temporary file, loads it, starts a consumer with it
//! (`PushConsumer::builder().config(config)`) and shows its tag subscription at work, then
//! feeds four broken documents to the loader.
//!
//! Run it:
//!
//! ```text
//! cargo run --example 12_config_from_toml
//! cargo run --example 12_config_from_toml -- --namesrv 127.0.0.1:9876
//! ```
//!
//! Expected output:
//!
//! ```text
//! loaded /tmp/rocketmq-actor-12-….toml: group config_…, from FirstOffset, batches of up to 4, consume_timeout 5m, max_reconsume_times 3
//!   left out, so Java's default: pull_threshold_for_queue 1000, rebalance_interval 20s
//! consumed with tag filter "TagA || TagB": a (TagA), b (TagB), d (TagA) — c (TagC) filtered out
//! rejected pull_batch_size = 5000:
//!     invalid config `pull_batch_size` = 5000: an integer in [1, 1024]
//! rejected a typo:
//!     invalid config `toml` = TOML parse error at line 2, column 1
//!       |
//!     2 | pull_batch_sise = 16
//!       | ^^^^^^^^^^^^^^^
//!     unknown field `pull_batch_sise`, expected one of `consumer_group`, `message_model`, `consume_mo…
//!     : a valid consumer TOML document
//! rejected a bad duration:
//!     … invalid duration "5 parsecs": unknown time unit "parsecs", …
//! rejected no group:
//!     invalid config `consumer_group` = "": a non-blank name
//! ```
//!
//! It exits 1 if the consumer does not get exactly the three tagged messages or a broken
//! document is accepted.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rocketmq_actor::consumer::ConsumeStatus;
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::{
    Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer, PushConsumerConfig,
};

type Error = Box<dyn std::error::Error>;

const PATIENCE: Duration = Duration::from_secs(10);

/// The consumer's configuration as an operator would write it (`GROUP` and `TOPIC` are filled
/// in per run).
const CONSUMER_TOML: &str = r#"
consumer_group = "GROUP"
consume_from_where = "first_offset"   # a new group starts at the first message
consume_message_batch_max_size = 4    # up to 4 messages per listener call
consume_timeout = "5m"
max_reconsume_times = 3
persist_consumer_offset_interval = "1s"

[restart_policy]                      # supervision of the consumer's actors (not in Java)
max_restarts = 5
window = "1m"
backoff_initial = "200ms"
backoff_max = "5s"

[subscriptions]                       # topic = tag expression
TOPIC = "TagA || TagB"
"#;

/// Broken documents and what is wrong with them.
const BROKEN: [(&str, &str); 4] = [
    (
        "pull_batch_size = 5000",
        "consumer_group = \"g\"\npull_batch_size = 5000",
    ),
    ("a typo", "consumer_group = \"g\"\npull_batch_sise = 16"),
    (
        "a bad duration",
        "consumer_group = \"g\"\nconsume_timeout = \"5 parsecs\"",
    ),
    ("no group", "pull_batch_size = 16"),
];

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
    let topic = format!("Config{run}");
    let group = format!("config_{run}");

    // The file an operator would ship next to the binary.
    let path = std::env::temp_dir().join(format!("rocketmq-actor-12-{run}.toml"));
    let text = CONSUMER_TOML
        .replace("GROUP", &group)
        .replace("TOPIC", &topic);
    std::fs::write(&path, text)?;
    let loaded = std::fs::read_to_string(&path)
        .map_err(Error::from)
        .and_then(|text| PushConsumerConfig::from_toml_str(&text).map_err(Error::from));
    let _ = std::fs::remove_file(&path);
    let config = loaded?;
    println!(
        "loaded {}: group {}, from {:?}, batches of up to {}, consume_timeout {}, max_reconsume_times {:?}",
        path.display(),
        config.consumer_group,
        config.consume_from_where,
        config.consume_message_batch_max_size,
        humantime::format_duration(config.consume_timeout),
        config.max_reconsume_times.unwrap_or_default(),
    );
    println!(
        "  left out, so Java's default: pull_threshold_for_queue {}, rebalance_interval {}",
        config.pull_threshold_for_queue,
        humantime::format_duration(config.rebalance_interval)
    );
    let expression = config
        .subscriptions
        .get(&topic)
        .cloned()
        .unwrap_or_default();

    // Four tagged messages; the subscription takes TagA and TagB only.
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for (body, tag) in [("a", "TagA"), ("b", "TagB"), ("c", "TagC"), ("d", "TagA")] {
        producer
            .send(Message::new(&topic, body).with_tags(tag))
            .await?;
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .config(config) // group, subscriptions and every option from the file
        .listener_fn(move |messages, ctx| {
            let tx = tx.clone();
            async move {
                for m in &messages {
                    let body = String::from_utf8_lossy(m.body());
                    let _ = tx.send(format!("{body} ({})", m.tags().unwrap_or("-")));
                }
                (ConsumeStatus::Success, ctx)
            }
        })
        .start()
        .await?;
    let mut got = BTreeSet::new();
    let deadline = Instant::now() + PATIENCE;
    while got.len() < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(m)) => got.insert(m),
            _ => break,
        };
    }
    consumer.shutdown().await;
    let got: Vec<String> = got.into_iter().collect();
    println!(
        "consumed with tag filter {expression:?}: {} — c (TagC) filtered out",
        got.join(", ")
    );

    // What a broken document gives.
    let mut accepted = Vec::new();
    for (what, text) in BROKEN {
        match PushConsumerConfig::from_toml_str(text) {
            Err(e) => {
                // TOML errors quote the document (several lines); long lines are cut here.
                println!("rejected {what}:");
                for line in e.to_string().lines() {
                    let cut: String = line.chars().take(100).collect();
                    let more = if cut.len() < line.len() { "…" } else { "" };
                    println!("    {cut}{more}");
                }
            }
            Ok(_) => accepted.push(what),
        }
    }

    client.shutdown().await;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    if got != ["a (TagA)", "b (TagB)", "d (TagA)"] {
        return Err(format!("expected a, b and d, got {got:?}").into());
    }
    if !accepted.is_empty() {
        return Err(format!("accepted broken documents: {accepted:?}").into());
    }
    Ok(())
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
