//! The command-line tool as an operator runs it, against an embedded cluster in this process:
//! `consume` in each mode ends with the same summary line, and `reset-offset` prints one JSON
//! line per queue.

mod common;

use std::process::Output;

use common::{cluster_with_topic, producer, send_numbered};
use rocketmq_actor::Client;
use rocketmq_actor::ClientConfig;
use serde_json::Value;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rocketmq-actor");

async fn run(args: &[&str]) -> Output {
    let run = Command::new(BIN).args(args).kill_on_drop(true).output();
    tokio::time::timeout(common::PATIENCE * 2, run)
        .await
        .expect("the command ends by itself")
        .expect("the command runs")
}

fn stdout_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("every stdout line is JSON"))
        .collect()
}

#[actix_rt::test]
async fn consume_in_every_mode_ends_with_the_same_summary_and_reset_offset_prints_each_queue() {
    let topic = "CliModes";
    let (cluster, namesrv) = cluster_with_topic(topic, 4).await;
    send_numbered(&producer(&cluster), topic, 0..200).await;

    for mode in ["push", "lite", "schedule"] {
        let group = format!("cli_{mode}");
        let output = run(&[
            "consume",
            "--namesrv",
            &namesrv,
            "--topic",
            topic,
            "--group",
            &group,
            "--count",
            "200",
            "--from",
            "first",
            "--mode",
            mode,
        ])
        .await;
        assert!(
            output.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let lines = stdout_lines(&output);
        let summary = lines.last().expect("a summary line");
        assert_eq!(summary["count"], 200, "{mode}: {summary}");
        for key in ["seconds", "msgs_per_sec", "latency_ms"] {
            assert!(summary.get(key).is_some(), "{mode}: no {key} in {summary}");
        }
    }

    // The lite group committed everything at its shutdown; rewind it.
    let client = Client::start(ClientConfig::new(&namesrv)).expect("client");
    for q in 0..4 {
        let queue = common::mq(topic, q);
        let committed = client
            .query_consumer_offset("cli_lite", &queue)
            .await
            .expect("offset");
        assert!(committed.is_some_and(|o| o > 0), "queue {q}: {committed:?}");
    }
    let output = run(&[
        "reset-offset",
        "--namesrv",
        &namesrv,
        "--group",
        "cli_lite",
        "--topic",
        topic,
        "--to",
        "first",
    ])
    .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines = stdout_lines(&output);
    assert_eq!(lines.len(), 4, "one line per queue: {lines:?}");
    for (q, line) in lines.iter().enumerate() {
        assert_eq!(line["broker"], common::BROKER);
        assert_eq!(line["queue_id"], q);
        assert_eq!(line["offset"], 0);
        let queue = common::mq(topic, q as i32);
        assert_eq!(
            client
                .query_consumer_offset("cli_lite", &queue)
                .await
                .expect("offset"),
            Some(0),
            "the broker holds the new offset"
        );
    }

    // A bad `--to` is refused with a message, and nothing is changed.
    let output = run(&[
        "reset-offset",
        "--namesrv",
        &namesrv,
        "--group",
        "cli_lite",
        "--topic",
        topic,
        "--to",
        "yesterday",
    ])
    .await;
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--to must be"));
    client.shutdown().await;
    cluster.shutdown().await;
}
