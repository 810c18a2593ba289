//! Every admin subcommand of the CLI, and the [`Admin`] calls under them, against a real
//! RocketMQ cluster (rocketmq-rust 1.0, two brokers, scripts/real-cluster.sh):
//!
//! ```text
//! scripts/real-cluster.sh start
//! ROCKETMQ_NAMESRV=127.0.0.1:9876 cargo test --test interop_admin -- --ignored
//! ```

mod interop_common;
use interop_common::*;

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use rocketmq_actor::admin::{Admin, Brokers};
use serde_json::Value;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rocketmq-actor");

async fn cli(args: &[&str]) -> Output {
    let child = Command::new(BIN)
        .args(args)
        .env("NAMESRV_ADDR", namesrv())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the command runs");
    tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the command ends by itself")
        .expect("the command runs")
}

/// Runs an admin subcommand that must succeed and returns its JSON lines.
async fn rows(args: &[&str]) -> Vec<Value> {
    let output = cli(args).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}: stdout {} stderr {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

fn strings<'a>(rows: &'a [Value], key: &str) -> Vec<&'a str> {
    rows.iter().filter_map(|r| r[key].as_str()).collect()
}

/// Polls (bounded) until `probe` holds: the brokers register topic changes with the name
/// server asynchronously.
async fn until<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + ROUTE_DEADLINE;
    while !probe().await {
        assert!(
            Instant::now() < deadline,
            "{what} within {ROUTE_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[actix_rt::test]
#[ignore = "needs a real cluster: scripts/real-cluster.sh start; ROCKETMQ_NAMESRV"]
async fn every_admin_subcommand_against_a_real_cluster() {
    let topic = unique("AdminCli");
    let group = unique("admin_cli");
    let cluster = rows(&["cluster", "list"]).await;
    assert_eq!(strings(&cluster, "broker"), BROKERS, "{cluster:?}");
    assert!(cluster
        .iter()
        .all(|r| r["version"].is_string() && r["active"] == true));

    let created = rows(&["topic", "create", "-t", &topic, "--queues", "2"]).await;
    assert_eq!(strings(&created, "broker"), BROKERS);
    until("the new topic listed", || async {
        strings(&rows(&["topic", "list"]).await, "topic").contains(&topic.as_str())
    })
    .await;
    let all = rows(&["topic", "list", "--all"]).await;
    assert!(strings(&all, "topic").contains(&"TBW102"));
    let listed = rows(&["topic", "list"]).await;
    assert!(!strings(&listed, "topic")
        .iter()
        .any(|t| t.starts_with("rmq_sys_")));

    let updated = rows(&[
        "topic", "update", "-t", &topic, "--queues", "3", "-b", "broker-b",
    ])
    .await;
    assert_eq!(strings(&updated, "broker"), ["broker-b"]);
    assert_eq!(updated[0]["read_queues"], 3);
    until("the update routed", || async {
        let route = rows(&["topic", "route", "-t", &topic]).await;
        route
            .iter()
            .map(|r| r["read_queues"].as_i64())
            .collect::<Vec<_>>()
            == [Some(2), Some(3)]
    })
    .await;

    let output = cli(&["produce", "-t", &topic, "-c", "25"]).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status = rows(&["topic", "status", "-t", &topic]).await;
    let stored: i64 = status.iter().filter_map(|r| r["messages"].as_i64()).sum();
    assert_eq!(stored, 25, "{status:?}");
    assert_eq!(status.len(), 2 + 3);

    let output = cli(&[
        "consume", "-t", &topic, "-g", &group, "-c", "10", "--from", "first", "--print",
    ])
    .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    until("the group listed", || async {
        strings(&rows(&["group", "list"]).await, "group").contains(&group.as_str())
    })
    .await;
    // A member running in another process: the broker lists its connection.
    let mut member = Command::new(BIN)
        .args(["consume", "-t", &topic, "-g", &group, "-q"])
        .env("NAMESRV_ADDR", namesrv())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("consume runs");
    until("the member listed by group connections", || async {
        let output = cli(&["group", "connections", "-g", &group]).await;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        output.status.success()
            && text.lines().any(|line| {
                serde_json::from_str::<Value>(line).is_ok_and(|row| {
                    row["client_id"].as_str().is_some_and(|id| !id.is_empty())
                        && row["subscriptions"][topic.as_str()] == "*"
                })
            })
    })
    .await;
    member.kill().await.expect("the member stops");
    let progress = rows(&["group", "progress", "-g", &group, "-t", &topic]).await;
    assert_eq!(progress.len(), 5, "a row per queue: {progress:?}");
    let reset = rows(&[
        "offset", "reset", "-g", &group, "-t", &topic, "--to", "first",
    ])
    .await;
    assert!(reset.iter().all(|r| r["offset"] == 0), "{reset:?}");
    let status = rows(&["broker", "status", "-b", "broker-a"]).await;
    assert!(strings(&status, "key").contains(&"brokerVersionDesc"));

    rows(&["group", "delete", "-g", &group, "--clean-offset"]).await;
    let groups = rows(&["group", "list"]).await;
    assert!(!strings(&groups, "group").contains(&group.as_str()));

    rows(&["topic", "delete", "-t", &topic]).await;
    until("the deleted topic unlisted", || async {
        !strings(&rows(&["topic", "list"]).await, "topic").contains(&topic.as_str())
    })
    .await;
    let admin = Admin::new(start_client(&namesrv()));
    for master in admin.masters(&Brokers::All).await.expect("masters") {
        assert_eq!(
            admin.topic_config(&master.addr, &topic).await.expect("ask"),
            None,
            "{} still has the topic",
            master.broker_name
        );
    }
}
