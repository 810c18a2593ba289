//! The `rocketmq-actor` command line: produce, consume and run an embedded broker.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use futures::stream::{FuturesUnordered, StreamExt};
use rocketmq_actor::actors::client::{Client, ClientConfig};
use rocketmq_actor::actors::producer::{Producer, ProducerConfig};
use rocketmq_actor::Message;

#[derive(Parser)]
#[command(name = "rocketmq-actor", version, about = "Actor-based Apache RocketMQ client")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send messages and print a JSON summary line.
    Produce(ProduceArgs),
    /// Run the embedded RocketMQ-compatible broker (name server + brokers on loopback).
    Broker,
    /// Consume messages with a push consumer (not implemented yet).
    Consume,
}

#[derive(clap::Args)]
struct ProduceArgs {
    /// Name-server addresses, `;`-separated.
    #[arg(long)]
    namesrv: String,
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
    /// Sends in flight at once.
    #[arg(long, default_value_t = 512)]
    inflight: usize,
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
        Command::Produce(args) => system.block_on(produce(args)),
        Command::Broker | Command::Consume => Err("this subcommand is not implemented yet".into()),
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

async fn produce(args: ProduceArgs) -> Result<(), Box<dyn std::error::Error>> {
    if args.size == 0 {
        return Err("--size must be at least 1".into());
    }
    if args.key_space == Some(0) {
        return Err("--key-space must be at least 1".into());
    }
    let client = Client::start(ClientConfig::new(&args.namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let started = Instant::now();
    let mut in_flight = FuturesUnordered::new();
    let mut next = 0u64;
    let mut sent = 0u64;
    let mut failed = 0u64;
    while next < args.count || !in_flight.is_empty() {
        while next < args.count && in_flight.len() < args.inflight.max(1) {
            let mut message = Message::new(args.topic.clone(), body_of(next, args.size));
            if let Some(tag) = &args.tag {
                message = message.with_tags(tag.clone());
            }
            let producer = producer.clone();
            let key = args.key_space.map(|k| format!("k{}", next % k));
            in_flight.push(async move {
                match key {
                    Some(key) => producer.send_with_key(message, &key).await,
                    None => producer.send(message).await,
                }
            });
            next += 1;
        }
        if let Some(result) = in_flight.next().await {
            match result {
                Ok(_) => sent += 1,
                Err(e) => {
                    failed += 1;
                    if failed <= 10 {
                        eprintln!("send failed: {e}");
                    }
                }
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64().max(f64::EPSILON);
    println!(
        "{}",
        serde_json::json!({
            "count": sent,
            "seconds": (seconds * 1000.0).round() / 1000.0,
            "msgs_per_sec": (sent as f64 / seconds).round(),
        })
    );
    client.shutdown().await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    if failed > 0 {
        return Err(format!("{failed} of {} sends failed", args.count).into());
    }
    Ok(())
}
