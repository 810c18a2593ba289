//! # 11 — testing your own service against `EmbeddedCluster`
//!
//! What it teaches: how to test code that consumes RocketMQ without a RocketMQ installation.
//! `EmbeddedCluster::start(EmbeddedConfig::ephemeral())` starts a name server and broker on an
//! ephemeral loopback port inside the test process, speaking the real protocol to the real
//! client; every test gets its own cluster, so tests run in parallel and leave nothing behind.
//! The cluster also lets a test look inside (`committed_offset`, `max_offset`,
//! `consumer_ids`, …) and inject faults (`stop_broker` / `restart_broker`, `drop_connections`,
//! `set_fault`, `pause_queue`; see 06).
//!
//! The "service" below is a small billing consumer: orders `"<order id> <customer> <cents>"` add
//! up per customer, a message seen twice is counted once (delivery is at least once), and a
//! malformed order goes straight to the dead-letter queue (`delay_level = -1`). The same two
//! checks run from `main` and from `#[actix_rt::test]`s in `mod tests`:
//!
//! ```text
//! cargo run --example 11_testing_with_embedded                         # both checks
//! cargo run --example 11_testing_with_embedded -- --namesrv 127.0.0.1:9876  # totals only
//! cargo test --example 11_testing_with_embedded                        # the same, as tests
//! ```
//!
//! How to wait in a test: never a fixed sleep. Await the thing itself with a timeout — here a
//! `tokio::sync::watch` the service updates, and for the DLQ the cluster's `max_offset` polled
//! until it moves — so a test is as fast as the system and fails (instead of hanging) when the
//! thing does not happen.
//!
//! Expected output:
//!
//! ```text
//! totals: alice 50, bob 12 (3 orders, one sent twice as a redelivery would come, counted once)
//! malformed order: in %DLQ%billing_… (1 message), valid orders still counted (alice 5)
//! ```
//!
//! and from `cargo test --example 11_testing_with_embedded`:
//!
//! ```text
//! test tests::a_malformed_order_goes_to_the_dead_letter_queue ... ok
//! test tests::totals_add_up_per_customer ... ok
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocketmq_actor::consumer::{dlq_topic, ConsumeFromWhere, ConsumeStatus};
use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
use rocketmq_actor::{Client, ClientConfig, Message, Producer, ProducerConfig, PushConsumer};
use tokio::sync::watch;

type Error = Box<dyn std::error::Error>;

const PATIENCE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// The service under test.

/// What the billing service knows.
#[derive(Debug, Default, Clone)]
struct Ledger {
    /// Cents per customer.
    totals: BTreeMap<String, u64>,
    /// Order ids already counted (redeliveries are ignored).
    counted: BTreeSet<String>,
}

/// A consumer that totals orders per customer.
struct Billing {
    consumer: PushConsumer,
    ledger: watch::Receiver<Ledger>,
}

impl Billing {
    /// Starts consuming `topic` as `group` (from the first message: a new group sees the orders
    /// already sent).
    async fn start(namesrv: &str, topic: &str, group: &str) -> rocketmq_actor::Result<Billing> {
        let (updates, ledger) = watch::channel(Ledger::default());
        let updates = Arc::new(updates);
        let consumer = PushConsumer::builder()
            .namesrv_addr(namesrv)
            .group(group)
            .subscribe(topic, "*")
            .configure(|c| c.consume_from_where = ConsumeFromWhere::FirstOffset)
            .listener_fn(move |messages, mut ctx| {
                let updates = updates.clone();
                async move {
                    for m in &messages {
                        let body = String::from_utf8_lossy(m.body()).into_owned();
                        let Some((order, customer, cents)) = parse_order(&body) else {
                            // Retrying cannot fix it: to the dead-letter queue at once.
                            ctx.delay_level = -1;
                            return (ConsumeStatus::ReconsumeLater, ctx);
                        };
                        updates.send_modify(|ledger| {
                            if ledger.counted.insert(order.to_owned()) {
                                *ledger.totals.entry(customer.to_owned()).or_default() += cents;
                            }
                        });
                    }
                    (ConsumeStatus::Success, ctx)
                }
            })
            .start()
            .await?;
        Ok(Billing { consumer, ledger })
    }

    /// Waits until `customer`'s total is `cents`; false after `timeout`.
    async fn wait_for_total(&mut self, customer: &str, cents: u64, timeout: Duration) -> bool {
        let reached = self
            .ledger
            .wait_for(|ledger| ledger.totals.get(customer) == Some(&cents));
        matches!(tokio::time::timeout(timeout, reached).await, Ok(Ok(_)))
    }

    fn totals(&self) -> BTreeMap<String, u64> {
        self.ledger.borrow().totals.clone()
    }

    async fn shutdown(self) {
        self.consumer.shutdown().await;
    }
}

/// `"<order id> <customer> <cents>"`.
fn parse_order(body: &str) -> Option<(&str, &str, u64)> {
    let mut parts = body.split_whitespace();
    let (order, customer, cents) = (parts.next()?, parts.next()?, parts.next()?.parse().ok()?);
    parts.next().is_none().then_some((order, customer, cents))
}

// ---------------------------------------------------------------------------------------------
// The checks: the same code for `main` and for the tests.

/// Names no other run uses (tests run in parallel; a real cluster keeps what earlier runs did).
fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}_{n}", rocketmq_actor::util::now_ms())
}

/// Three orders (one of them sent twice, as a redelivery would) add up per customer.
async fn check_totals(namesrv: &str) -> Result<String, Error> {
    let (topic, group) = (unique("Orders"), unique("billing_"));
    let client = Client::start(ClientConfig::new(namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    for order in ["o1 alice 30", "o2 bob 12", "o3 alice 20", "o3 alice 20"] {
        producer.send(Message::new(&topic, order)).await?;
    }
    let mut billing = Billing::start(namesrv, &topic, &group).await?;
    let done = billing.wait_for_total("alice", 50, PATIENCE).await
        && billing.wait_for_total("bob", 12, PATIENCE).await;
    let totals = billing.totals();
    billing.shutdown().await;
    client.shutdown().await;
    if !done {
        return Err(format!("expected alice 50 and bob 12, got {totals:?}").into());
    }
    Ok(format!(
        "totals: alice {}, bob {} (3 orders, one sent twice as a redelivery would come, counted once)",
        totals["alice"], totals["bob"]
    ))
}

/// A malformed order lands in the group's DLQ, seen through the cluster's own inspection API,
/// and does not hold up the valid orders.
async fn check_malformed_goes_to_dlq(cluster: &EmbeddedCluster) -> Result<String, Error> {
    let namesrv = cluster.namesrv_addr();
    let (topic, group) = (unique("Orders"), unique("billing_"));
    let client = Client::start(ClientConfig::new(&namesrv))?;
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let garbage = producer
        .send(Message::new(&topic, "this is not an order"))
        .await?;
    producer.send(Message::new(&topic, "o1 alice 5")).await?;
    let mut billing = Billing::start(&namesrv, &topic, &group).await?;
    let counted = billing.wait_for_total("alice", 5, PATIENCE).await;

    // The DLQ has one queue, on the broker that stored the failed message.
    let (broker, dlq) = (garbage.queue.broker_name, dlq_topic(&group));
    let deadline = Instant::now() + PATIENCE;
    let mut dead = 0;
    while dead == 0 && Instant::now() < deadline {
        dead = cluster.max_offset(&broker, &dlq, 0).await?;
        if dead == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    billing.shutdown().await;
    client.shutdown().await;
    if !counted {
        return Err("the valid order was not counted".into());
    }
    if dead != 1 {
        return Err(format!("expected 1 message in {dlq}, found {dead}").into());
    }
    Ok(format!(
        "malformed order: in {dlq} ({dead} message), valid orders still counted (alice 5)"
    ))
}

// ---------------------------------------------------------------------------------------------
// `cargo run --example 11_testing_with_embedded`

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
    match namesrv_arg()? {
        Some(namesrv) => println!("{}", check_totals(&namesrv).await?),
        None => {
            let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral()).await?;
            println!("{}", check_totals(&cluster.namesrv_addr()).await?);
            println!("{}", check_malformed_goes_to_dlq(&cluster).await?);
            cluster.shutdown().await;
        }
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

// ---------------------------------------------------------------------------------------------
// `cargo test --example 11_testing_with_embedded`: each test on a cluster of its own.

#[cfg(test)]
mod tests {
    use super::*;

    async fn cluster() -> EmbeddedCluster {
        EmbeddedCluster::start(EmbeddedConfig::ephemeral())
            .await
            .expect("an embedded cluster starts")
    }

    #[actix_rt::test]
    async fn totals_add_up_per_customer() {
        let cluster = cluster().await;
        let outcome = check_totals(&cluster.namesrv_addr()).await;
        cluster.shutdown().await;
        if let Err(e) = outcome {
            panic!("{e}");
        }
    }

    #[actix_rt::test]
    async fn a_malformed_order_goes_to_the_dead_letter_queue() {
        let cluster = cluster().await;
        let outcome = check_malformed_goes_to_dlq(&cluster).await;
        cluster.shutdown().await;
        if let Err(e) = outcome {
            panic!("{e}");
        }
    }

    #[test]
    fn orders_are_parsed_strictly() {
        assert_eq!(parse_order("o1 alice 30"), Some(("o1", "alice", 30)));
        assert_eq!(parse_order("o1 alice thirty"), None);
        assert_eq!(parse_order("o1 alice 30 extra"), None);
    }
}
