//! # 15 — SQL92 selectors: let the broker pick the messages
//!
//! What it teaches: Java's `MessageSelector.bySql`. Producers put properties on messages
//! (`with_property("region", "eu")`); a consumer subscribes with
//! `Selector::sql("region = 'eu' AND amount > 100")` and the broker hands it only the
//! messages whose properties make the expression true. The rest never cross the network.
//!
//! A SQL92 selector is checked at `start()`: a syntax error fails it with the position of the
//! fault, before anything is sent. Then the consumer asks each broker whether it filters by
//! SQL92 (CHECK_CLIENT_CONFIG, as Java does): a broker without `enablePropertyFilter = true`
//! (the default of a real broker) fails `start()` too, saying which broker and how to switch
//! filtering on. The embedded broker filters by default; here a second one is started with
//! filtering off to show the refusal.
//!
//! The guarantee: delivery is as with tags (at least once); a message the expression does not
//! select is skipped by the broker and its offset committed past.
//!
//! Run it:
//!
//! ```text
//! cargo run --example 15_sql_filter                       # on embedded clusters
//! cargo run --example 15_sql_filter -- --namesrv 127.0.0.1:9876 [--count 200]
//! ```
//!
//! Expected output (the refusal is shown on the embedded clusters only):
//!
//! ```text
//! syntax error caught at start: invalid SQL92 selector of topic SqlExample… `amount >`: at position 9: expected a property or a value, found the end of the expression
//! selected 28 of 200 orders: region = 'eu' AND amount > 100
//! refused: broker broker-a refuses the SQL92 selector `…` of group … on topic …: The broker does not support consumer to filter message by SQL92; switch property filtering on with enablePropertyFilter = true …
//! {"orders":200,"refused":true,"selected":28,"unexpected":0}
//! ```
//!
//! It exits 1 if a message the expression does not select arrives, or one it selects does not.

use std::collections::BTreeSet;
use std::time::Duration;

use clap::Parser;
use rocketmq_actor::consumer::{ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::filter::Selector;
use rocketmq_actor::{Client, ClientConfig, Error, Message, Producer, ProducerConfig};
use rocketmq_actor::{MessageExt, PushConsumer};

#[derive(Parser)]
struct Args {
    /// A real cluster's name server (its brokers need enablePropertyFilter = true); without
    /// it an embedded cluster is started.
    #[arg(long)]
    namesrv: Option<String>,
    /// How many orders to send.
    #[arg(long, default_value_t = 200)]
    count: usize,
}

const EXPRESSION: &str = "region = 'eu' AND amount > 100";

/// Order `i`: every fifth one is from the EU, amounts run 0, 10, 20, …
fn order(topic: &str, i: usize) -> Message {
    let region = if i.is_multiple_of(5) { "eu" } else { "us" };
    Message::new(topic, format!("order {i}"))
        .with_property("region", region)
        .with_property("amount", (i * 10 % 500).to_string())
}

/// What the expression selects, computed here to check the broker.
fn is_selected(i: usize) -> bool {
    i.is_multiple_of(5) && i * 10 % 500 > 100
}

fn order_number(message: &MessageExt) -> Option<usize> {
    std::str::from_utf8(message.body())
        .ok()?
        .strip_prefix("order ")?
        .parse()
        .ok()
}

#[actix_rt::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let (namesrv, embedded) = match &args.namesrv {
        Some(addr) => (addr.clone(), None),
        None => {
            let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral()).await?;
            (cluster.namesrv_addr(), Some(cluster))
        }
    };
    let topic = format!("SqlExample{}", rocketmq_actor::util::now_ms());
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for i in 0..args.count {
        producer.send(order(&topic, i)).await?;
    }

    // A broken expression never reaches the wire.
    match PushConsumer::builder()
        .client(client.clone())
        .group("sql_example_broken")
        .subscribe(&topic, Selector::sql("amount >"))
        .listener_sync_fn(|_, _| ConsumeStatus::Success)
        .start()
        .await
    {
        Err(e @ Error::InvalidSelector { .. }) => println!("syntax error caught at start: {e}"),
        Err(other) => return Err(other.into()),
        Ok(_) => return Err("a broken expression started".into()),
    }

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = PushConsumer::builder()
        .client(client.clone())
        .group(format!("sql_example_{}", rocketmq_actor::util::now_ms()))
        .subscribe(&topic, Selector::sql(EXPRESSION))
        .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
        .listener_sync_fn(move |messages, _ctx| {
            for m in messages {
                let _ = tx.send(order_number(m));
            }
            ConsumeStatus::Success
        })
        .start()
        .await?;
    let expected: BTreeSet<usize> = (0..args.count).filter(|i| is_selected(*i)).collect();
    let mut got = BTreeSet::new();
    let mut unexpected = 0;
    while got.len() < expected.len() {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
            Ok(Some(Some(i))) if expected.contains(&i) => {
                got.insert(i);
            }
            Ok(Some(other)) => {
                eprintln!("not selected, yet delivered: {other:?}");
                unexpected += 1;
            }
            _ => break,
        }
    }
    consumer.shutdown().await;
    println!(
        "selected {} of {} orders: {EXPRESSION}",
        got.len(),
        args.count
    );

    // A broker without property filtering refuses at start.
    let mut refused = false;
    if embedded.is_some() {
        let plain = EmbeddedCluster::start(EmbeddedConfig {
            enable_property_filter: false,
            ..EmbeddedConfig::ephemeral()
        })
        .await?;
        let plain_client = Client::start(ClientConfig::new(plain.namesrv_addr()))?;
        Producer::new(plain_client.clone(), ProducerConfig::default())
            .send(order(&topic, 0))
            .await?;
        match PushConsumer::builder()
            .client(plain_client.clone())
            .group("sql_example_refused")
            .subscribe(&topic, Selector::sql(EXPRESSION))
            .listener_sync_fn(|_, _| ConsumeStatus::Success)
            .start()
            .await
        {
            Err(e @ Error::SelectorRefused { .. }) => {
                println!("refused: {e}");
                refused = true;
            }
            Err(other) => return Err(other.into()),
            Ok(_) => return Err("a broker without property filtering was not refused".into()),
        }
        plain_client.shutdown().await;
        plain.shutdown().await;
    }
    println!(
        "{}",
        serde_json::json!({
            "orders": args.count,
            "selected": got.len(),
            "unexpected": unexpected,
            "refused": refused,
        })
    );
    client.shutdown().await;
    if let Some(cluster) = embedded {
        cluster.shutdown().await;
    }
    if got != expected || unexpected > 0 {
        std::process::exit(1);
    }
    Ok(())
}
