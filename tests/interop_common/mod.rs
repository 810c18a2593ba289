//! Helpers shared by the interop suites (`interop_produce`, `interop_consumer`), which run
//! against a real RocketMQ cluster named by `ROCKETMQ_NAMESRV`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocketmq_actor::admin::{Admin, Brokers, TopicConfig};
use rocketmq_actor::message::MessageQueue;
use rocketmq_actor::protocol::body::{decode_json, ClusterInfo};
use rocketmq_actor::protocol::codes::request_code;
use rocketmq_actor::protocol::RemotingCommand;
use rocketmq_actor::route::TopicRoute;
use rocketmq_actor::SendResult;
use rocketmq_actor::{Client, ClientConfig};

/// The two broker names the cluster script starts.
pub const BROKERS: [&str; 2] = ["broker-a", "broker-b"];

/// Queues per broker of the topics these tests create.
pub const QUEUES_PER_BROKER: i32 = 4;

/// How long a new topic may take to appear in the name server's route.
pub const ROUTE_DEADLINE: Duration = Duration::from_secs(60);

pub fn now_ms() -> i64 {
    rocketmq_actor::util::now_ms()
}

pub fn start_client(namesrv: &str) -> Client {
    Client::start(ClientConfig::new(namesrv)).expect("valid name-server address")
}

/// Master address of every broker of the cluster, by broker name.
pub async fn broker_masters(client: &Client, namesrv: &str) -> BTreeMap<String, String> {
    let response = client
        .invoke(
            namesrv,
            RemotingCommand::request(request_code::GET_BROKER_CLUSTER_INFO),
        )
        .await
        .expect("GET_BROKER_CLUSTER_INFO");
    let info: ClusterInfo =
        decode_json(&response.body.unwrap_or_default()).expect("cluster info JSON");
    let masters: BTreeMap<String, String> = info
        .broker_addr_table
        .values()
        .filter_map(|b| Some((b.broker_name.clone(), b.master_addr()?.to_owned())))
        .collect();
    for name in BROKERS {
        assert!(
            masters.contains_key(name),
            "the cluster must have a master named {name}; it has {masters:?}"
        );
    }
    masters
}

/// The offset after the last message of each queue the sends went to.
pub fn queue_ends<'a>(
    sent: impl IntoIterator<Item = &'a SendResult>,
) -> BTreeMap<MessageQueue, i64> {
    let mut ends = BTreeMap::new();
    for result in sent {
        let end = ends.entry(result.queue.clone()).or_insert(0);
        *end = (*end).max(result.queue_offset + 1);
    }
    ends
}

/// Polls the name server (bounded) until the route of `topic` lists every broker of `brokers`.
pub async fn wait_for_route(client: &Client, topic: &str, brokers: &[&str]) -> Arc<TopicRoute> {
    let deadline = Instant::now() + ROUTE_DEADLINE;
    loop {
        let last = match client.refresh_route(topic).await {
            Ok(route) => {
                let routed: BTreeSet<&str> = route
                    .data
                    .queue_datas
                    .iter()
                    .map(|q| q.broker_name.as_str())
                    .collect();
                if brokers.iter().all(|b| routed.contains(b)) {
                    return route;
                }
                format!("routed to {routed:?}")
            }
            Err(e) => e.to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "{topic} not routed to {brokers:?} within {ROUTE_DEADLINE:?}: {last}"
        );
        // Brokers register topics with the name server asynchronously; poll again shortly.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Creates `topic` with [`QUEUES_PER_BROKER`] queues on both brokers and waits until the name
/// server routes it to both.
pub async fn create_topic(client: &Client, namesrv: &str, topic: &str) -> Arc<TopicRoute> {
    create_topic_on(client, namesrv, topic, &BROKERS).await
}

/// Creates `topic` with [`QUEUES_PER_BROKER`] queues on `brokers` only and waits until the name
/// server routes it to them.
pub async fn create_topic_on(
    client: &Client,
    _namesrv: &str,
    topic: &str,
    brokers: &[&str],
) -> Arc<TopicRoute> {
    let admin = Admin::new(client.clone());
    for name in brokers {
        admin
            .create_topic(
                &Brokers::Broker((*name).to_owned()),
                &TopicConfig::new(topic, QUEUES_PER_BROKER),
            )
            .await
            .unwrap_or_else(|e| panic!("create {topic} on {name}: {e}"));
    }
    wait_for_route(client, topic, brokers).await
}

/// The name-server address of the real cluster (`ROCKETMQ_NAMESRV`). The interop tests are
/// `#[ignore]`d, so a plain `cargo test` reports them as ignored; run with `--ignored`, this
/// fails loudly when the address is missing rather than passing without a cluster.
/// With `RUST_LOG` set, the runtime's tracing goes to stderr (`--nocapture` shows it).
pub fn namesrv() -> String {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    match std::env::var("ROCKETMQ_NAMESRV") {
        Ok(addr) if !addr.trim().is_empty() => addr,
        _ => panic!(
            "ROCKETMQ_NAMESRV is not set: start a cluster with scripts/real-cluster.sh start \
             and export the address it prints"
        ),
    }
}

/// A name no earlier run used: `prefix_<ms since epoch>_<pid>_<n>`.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}_{}_{}_{n}", now_ms(), std::process::id())
}

#[path = "../common/shared.rs"]
mod shared;
#[allow(unused_imports)]
pub use shared::Shared;
