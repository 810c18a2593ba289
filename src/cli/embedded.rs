//! `broker` (the embedded name server and brokers as a process) and `demo` (an embedded
//! cluster, a produce and a consume in one go).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use rocketmq_actor::embedded::{AclConfig, EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::tls::{PemIdentity, ServerTlsConfig, TlsMode};

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
    /// Serve TLS on every port (name server and brokers); plaintext clients too unless
    /// `--tls-mode enforcing`. Without `--tls-cert` a CA and a certificate for the loopback
    /// names are generated; the CA's PEM goes to `--tls-cert-out` for clients to trust.
    #[arg(long)]
    pub tls: bool,
    /// `permissive` (TLS and plaintext on the same port, as a Java broker by default) or
    /// `enforcing` (TLS only). Implies `--tls`.
    #[arg(long, value_name = "MODE")]
    pub tls_mode: Option<TlsMode>,
    /// The certificate chain (PEM) to serve instead of a generated one (implies `--tls`).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `--tls-cert`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Where to write the generated CA certificate (PEM) that clients trust (`--tls-ca`);
    /// default: `tls-ca.pem` in `--data-dir`, else a file in the temporary directory, removed
    /// at exit. The path is printed on stderr.
    #[arg(long, value_name = "FILE", conflicts_with = "tls_cert")]
    pub tls_cert_out: Option<PathBuf>,
    /// Require clients to present a certificate signed by a CA of this PEM file (mutual TLS;
    /// implies `--tls`).
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
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
    let tls = broker_tls(&args)?;
    let cluster = EmbeddedCluster::start(EmbeddedConfig {
        listen: args.listen,
        brokers: usize::from(args.brokers),
        queues: args.queues,
        data_dir: args.data_dir.clone(),
        lock_expiry: args.lock_expiry,
        acl,
        tls,
        ..EmbeddedConfig::default()
    })
    .await?;
    for (topic, queues) in &args.topics {
        cluster
            .create_topic(topic, queues.unwrap_or(args.queues))
            .await?;
    }
    // Written before the address is printed: whoever waits for the address can trust the CA.
    let written_ca = match cluster.tls_ca_pem() {
        Some(pem) => Some(write_ca(&args, &cluster.namesrv_addr(), pem)?),
        None => None,
    };
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
    if let Some(WrittenCa {
        path,
        temporary: true,
    }) = written_ca
    {
        let _ = std::fs::remove_file(path);
    }
    Ok(Outcome::Done)
}

/// The TLS setup of `broker`'s `--tls*` flags; `None` without any of them.
fn broker_tls(args: &BrokerArgs) -> CliResult<Option<ServerTlsConfig>> {
    let wanted = args.tls
        || args.tls_mode.is_some()
        || args.tls_cert.is_some()
        || args.tls_cert_out.is_some()
        || args.tls_client_ca.is_some();
    if !wanted {
        return Ok(None);
    }
    let mode = args.tls_mode.unwrap_or_default();
    let mut tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            ServerTlsConfig::with_identity(mode, PemIdentity::from_files(cert, key)?)
        }
        _ => ServerTlsConfig::generated(mode),
    };
    if let Some(path) = &args.tls_client_ca {
        let pem = std::fs::read(path)
            .map_err(|e| format!("cannot read --tls-client-ca {}: {e}", path.display()))?;
        tls.client_ca_pem = Some(pem);
    }
    Ok(Some(tls))
}

/// Where the generated CA certificate was written, and whether it is ours to remove.
struct WrittenCa {
    path: PathBuf,
    temporary: bool,
}

/// Writes the generated CA certificate where `--tls-cert-out` (or the default) says, and tells
/// the operator on stderr.
fn write_ca(args: &BrokerArgs, namesrv: &str, pem: &str) -> CliResult<WrittenCa> {
    let (path, temporary) = match (&args.tls_cert_out, &args.data_dir) {
        (Some(path), _) => (path.clone(), false),
        (None, Some(dir)) => (dir.join("tls-ca.pem"), false),
        (None, None) => {
            let port = namesrv.rsplit(':').next().unwrap_or("0");
            let name = format!("rocketmq-actor-broker-{port}-{}-ca.pem", std::process::id());
            (std::env::temp_dir().join(name), true)
        }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(&path, pem).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!(
        "TLS: generated a certificate for 127.0.0.1, ::1 and localhost; clients trust it with --tls-ca {}",
        path.display()
    );
    Ok(WrittenCa { path, temporary })
}

/// Starts an embedded cluster, produces `--count` messages and consumes them with a push
/// consumer, printing both summaries.
pub async fn demo(args: DemoArgs) -> CliResult {
    let cluster = EmbeddedCluster::start(EmbeddedConfig {
        brokers: usize::from(args.brokers),
        ..EmbeddedConfig::ephemeral()
    })
    .await?;
    let connect = Connect::plain(cluster.namesrv_addr(), Duration::from_secs(3));
    eprintln!(
        "embedded cluster: name server {}, brokers {:?}",
        connect.namesrv,
        cluster.broker_names()
    );
    let topic = "DemoTopic";
    // Each label on the stream of the summary it names: produce's is its output (stdout),
    // consume's follows its messages (stderr).
    print!("produce: ");
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
        batch: 1,
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
                sql: None,
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
                quiet: false,
            })
            .await
        }
        other => other,
    };
    cluster.shutdown().await;
    outcome
}
