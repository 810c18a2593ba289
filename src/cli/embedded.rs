//! `broker` (the embedded name server and brokers as a process) and `demo` (an embedded
//! cluster, a produce and a consume in one go).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use rocketmq_actor::embedded::{AclConfig, EmbeddedCluster, EmbeddedConfig};

use super::consume::{consume, ConsumeArgs, ConsumeMode, StartAt};
use super::produce::{produce, ProduceArgs};
use super::signal::ShutdownSignal;
use super::{positive_duration, positive_u64, CliResult, Connect, Failure, Outcome};

/// `broker`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct BrokerArgs {
    /// Name-server address to listen on (one broker shares it).
    #[arg(long, default_value = "127.0.0.1:9876")]
    pub listen: SocketAddr,
    /// Number of brokers (broker-a, broker-b, …).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub brokers: u16,
    /// Queues of auto-created topics.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(i32).range(1..=1024))]
    pub queues: i32,
    /// Keep messages and offsets in this directory.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Create a topic on every broker at start, as NAME or NAME:QUEUES (repeatable). Without
    /// it a topic is created on the first broker a producer happens to send it to.
    #[arg(long = "topic", value_name = "NAME[:QUEUES]", value_parser = topic_and_queues)]
    pub topics: Vec<(String, Option<i32>)>,
    /// How long a queue lock of an orderly consumer lasts unless renewed (as a real broker's
    /// 60 s): how long the queues of a crashed orderly consumer stay blocked.
    #[arg(long, value_parser = positive_duration, value_name = "DURATION", default_value = "60s")]
    pub lock_expiry: Duration,
    /// Fault injection for tests: close every client connection at this interval
    /// (e.g. `5s`); clients must reconnect.
    #[arg(long, value_parser = positive_duration, value_name = "DURATION")]
    pub drop_connections_every: Option<Duration>,
    /// Serve in ACL mode with the accounts of this file (a Java broker's plain_acl.yml):
    /// every broker request must be signed by a listed account with the permissions it
    /// needs, or it is refused with NO_PERMISSION. The name server stays open.
    #[arg(long, value_name = "FILE")]
    pub acl: Option<PathBuf>,
}

/// `demo`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct DemoArgs {
    /// Messages to produce and consume.
    #[arg(long, default_value_t = 100_000, value_parser = positive_u64)]
    pub count: u64,
    /// Body size in bytes.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    pub size: u32,
    /// Brokers of the embedded cluster.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub brokers: u16,
}

/// `NAME` or `NAME:QUEUES` of `broker --topic` (the queue count defaults to `--queues`).
fn topic_and_queues(spec: &str) -> Result<(String, Option<i32>), String> {
    let (name, queues) = match spec.rsplit_once(':') {
        Some((name, queues)) => {
            let queues: i32 = queues
                .parse()
                .map_err(|_| format!("queue count `{queues}` is not a number"))?;
            (name, Some(queues))
        }
        None => (spec, None),
    };
    if name.is_empty() || queues.is_some_and(|q| !(1..=1024).contains(&q)) {
        return Err("needs a name and 1 to 1024 queues".into());
    }
    Ok((name.to_owned(), queues))
}

/// Runs the embedded cluster until SIGINT or SIGTERM — its normal way to stop, so it exits 0
/// then. Prints the name server's address once it serves.
pub async fn broker(args: BrokerArgs) -> CliResult {
    let mut stop = ShutdownSignal::install();
    let acl = match &args.acl {
        Some(path) => {
            let acl = AclConfig::from_file(path).map_err(|e| Failure(e.to_string()))?;
            eprintln!(
                "ACL mode: {} account(s) from {}",
                acl.accounts.len(),
                path.display()
            );
            Some(acl)
        }
        None => None,
    };
    let cluster = EmbeddedCluster::start(EmbeddedConfig {
        listen: args.listen,
        brokers: usize::from(args.brokers),
        queues: args.queues,
        data_dir: args.data_dir,
        lock_expiry: args.lock_expiry,
        acl,
        ..EmbeddedConfig::default()
    })
    .await?;
    for (topic, queues) in &args.topics {
        cluster
            .create_topic(topic, queues.unwrap_or(args.queues))
            .await?;
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
    Ok(Outcome::Done)
}

/// Starts an embedded cluster, produces `--count` messages and consumes them with a push
/// consumer, printing both summaries.
pub async fn demo(args: DemoArgs) -> CliResult {
    let cluster = EmbeddedCluster::start(EmbeddedConfig {
        brokers: usize::from(args.brokers),
        ..EmbeddedConfig::ephemeral()
    })
    .await?;
    let connect = Connect {
        namesrv: cluster.namesrv_addr(),
        request_timeout: Duration::from_secs(3),
        access_key: None,
        secret_key: None,
    };
    eprintln!(
        "embedded cluster: name server {}, brokers {:?}",
        connect.namesrv,
        cluster.broker_names()
    );
    let topic = "DemoTopic";
    eprint!("produce: ");
    let produced = produce(&ProduceArgs {
        connect: connect.clone(),
        topic: topic.into(),
        count: Some(args.count),
        size: args.size as usize,
        file: None,
        key: None,
        tag: Some("TagA".into()),
        properties: Vec::new(),
        key_space: None,
        inflight: 128,
        rate: None,
    })
    .await;
    let outcome = match produced {
        Ok(Outcome::Done) => {
            eprint!("consume: ");
            consume(&ConsumeArgs {
                connect,
                topic: topic.into(),
                group: "demo_group".into(),
                expr: "TagA".into(),
                count: Some(args.count),
                exit_at_end: false,
                from: StartAt::First,
                broadcast: false,
                format: None,
                print: false,
                orderly: false,
                orderly_by_key: false,
                mode: ConsumeMode::Push,
                metrics_addr: None,
            })
            .await
        }
        other => other,
    };
    cluster.shutdown().await;
    outcome
}
