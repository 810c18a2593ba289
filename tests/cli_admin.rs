//! The mqadmin-style subcommands as an operator and a script run them, against an embedded
//! cluster in this process: `topic create|update|delete|list|status|route`, `group
//! list|delete|progress`, `cluster list`, `broker status`, `offset reset`, `--output table`,
//! `NAMESRV_ADDR`, human times, completions, and pipes into `head` and `wc`.

mod common;

use std::process::{Output, Stdio};

use common::{producer, send_numbered};
use serde_json::Value;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rocketmq-actor");

async fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("NAMESRV_ADDR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let child = command.spawn().expect("the command runs");
    tokio::time::timeout(common::PATIENCE * 2, child.wait_with_output())
        .await
        .expect("the command ends by itself")
        .expect("the command runs")
}

async fn run(args: &[&str]) -> Output {
    run_env(args, &[]).await
}

/// Runs `script` in bash with `pipefail`, so its status is the binary's unless a later stage
/// fails.
async fn pipeline(script: &str) -> Output {
    let child = Command::new("bash")
        .args(["-c", &format!("set -o pipefail; {script}")])
        .env("BIN", BIN)
        .env_remove("NAMESRV_ADDR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("bash runs");
    tokio::time::timeout(common::PATIENCE * 2, child.wait_with_output())
        .await
        .expect("the pipeline ends")
        .expect("bash runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_exit(output: &Output, code: i32, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{what}: {}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        stderr(output)
    );
}

/// The stdout lines, each parsed as JSON, as `jq` would.
fn rows(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}")))
        .collect()
}

fn column<'a>(rows: &'a [Value], key: &str) -> Vec<&'a str> {
    rows.iter().filter_map(|r| r[key].as_str()).collect()
}

#[actix_rt::test]
async fn topics_are_created_listed_updated_inspected_and_deleted() {
    let cluster = common::fast_retry_cluster(2).await;
    let namesrv = cluster.namesrv_addr();
    let ns = namesrv.as_str();

    let output = run(&["topic", "create", "-n", ns, "-t", "Orders", "--queues", "4"]).await;
    assert_exit(&output, 0, "topic create");
    let created = rows(&output);
    assert_eq!(column(&created, "broker"), ["broker-a", "broker-b"]);
    assert!(created
        .iter()
        .all(|r| r["read_queues"] == 4 && r["perm_text"] == "RW-"));

    // The interface scripts use: NAMESRV_ADDR instead of --namesrv, one JSON object per line.
    let output = run_env(&["topic", "list"], &[("NAMESRV_ADDR", ns)]).await;
    assert_exit(&output, 0, "topic list with NAMESRV_ADDR");
    let topics = rows(&output);
    assert_eq!(
        column(&topics, "topic"),
        ["Orders"],
        "system topics are hidden"
    );
    let output = run(&["topic", "list", "-n", ns, "--all"]).await;
    assert!(column(&rows(&output), "topic").contains(&"TBW102"));
    let output = run(&["topic", "list", "-n", ns, "-o", "table"]).await;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert_eq!(lines, ["TOPIC", "Orders"], "{text}");

    let output = run(&[
        "topic", "update", "-n", ns, "-t", "Orders", "--queues", "6", "-p", "R", "-b", "broker-b",
    ])
    .await;
    assert_exit(&output, 0, "topic update of one broker");
    let route = rows(&run(&["topic", "route", "-n", ns, "-t", "Orders"]).await);
    let by_broker: Vec<(&str, i64, &str)> = route
        .iter()
        .map(|r| {
            (
                r["broker"].as_str().unwrap_or_default(),
                r["read_queues"].as_i64().unwrap_or_default(),
                r["perm_text"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        by_broker,
        [("broker-a", 4, "RW-"), ("broker-b", 6, "R--")],
        "only broker-b changed"
    );
    let output = run(&["topic", "update", "-n", ns, "-t", "Nowhere", "-p", "R"]).await;
    assert_exit(&output, 1, "updating a topic that does not exist");
    assert!(stderr(&output).contains("topic Nowhere does not exist on broker-a"));

    let producer = producer(&cluster);
    send_numbered(&producer, "Orders", 0..10).await;
    let output = run(&["topic", "status", "-n", ns, "-t", "Orders"]).await;
    assert_exit(&output, 0, "topic status");
    let status = rows(&output);
    let stored: i64 = status.iter().filter_map(|r| r["messages"].as_i64()).sum();
    assert_eq!(stored, 10, "{status:?}");
    assert_eq!(status.len(), 4 + 6, "a row per queue of each broker");
    for row in status.iter().filter(|r| r["messages"].as_i64() > Some(0)) {
        let shown = row["last_updated"].as_str().expect("a store time");
        assert!(shown.ends_with('Z') && shown.contains('T'), "{shown}");
    }

    let output = run(&["topic", "delete", "-n", ns, "-t", "Orders"]).await;
    assert_exit(&output, 0, "topic delete");
    assert_eq!(column(&rows(&output), "broker"), ["broker-a", "broker-b"]);
    let output = run(&["topic", "list", "-n", ns]).await;
    assert!(
        rows(&output).is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let output = run(&["topic", "route", "-n", ns, "-t", "Orders"]).await;
    assert_exit(&output, 1, "the deleted topic has no route");

    let output = run(&[
        "topic",
        "create",
        "-n",
        ns,
        "-t",
        "X",
        "--cluster",
        "Elsewhere",
    ])
    .await;
    assert_exit(&output, 1, "a cluster that does not exist");
    assert!(stderr(&output).contains("Elsewhere"), "{}", stderr(&output));
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn groups_brokers_and_offsets_are_listed_reset_and_deleted() {
    let cluster = common::fast_retry_cluster(2).await;
    cluster.create_topic("Payments", 2).await.expect("topic");
    let namesrv = cluster.namesrv_addr();
    let ns = namesrv.as_str();
    send_numbered(&producer(&cluster), "Payments", 0..40).await;

    // Over a backlog, `--count` prints its messages and its summary, and nothing else.
    let output = run(&[
        "consume", "-n", ns, "-t", "Payments", "-g", "billing", "-c", "15", "--from", "first",
        "--print",
    ])
    .await;
    assert_exit(&output, 0, "consume --count");
    assert_eq!(rows(&output).len(), 15);
    let err = stderr(&output);
    let err_lines: Vec<&str> = err.lines().collect();
    assert_eq!(err_lines.len(), 1, "only the summary on stderr: {err}");
    assert!(err_lines[0].starts_with("{\"count\":15"), "{err}");

    let output = run(&["group", "list", "-n", ns]).await;
    assert_exit(&output, 0, "group list");
    let groups = rows(&output);
    assert_eq!(column(&groups, "group"), ["billing"]);
    assert_eq!(groups[0]["brokers"], "broker-a,broker-b");

    let progress = rows(
        &run(&[
            "group", "progress", "-n", ns, "-g", "billing", "-t", "Payments",
        ])
        .await,
    );
    let committed: i64 = progress
        .iter()
        .filter_map(|r| r["consumer_offset"].as_i64())
        .sum();
    assert_eq!(committed, 15, "{progress:?}");

    // Back to the start, by an RFC 3339 time before every message.
    let output = run(&[
        "offset",
        "reset",
        "-n",
        ns,
        "-g",
        "billing",
        "-t",
        "Payments",
        "--to",
        "2020-01-01T00:00:00Z",
    ])
    .await;
    assert_exit(&output, 0, "offset reset to an RFC 3339 time");
    assert!(
        rows(&output).iter().all(|r| r["offset"] == 0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );

    let output = run(&["cluster", "list", "-n", ns]).await;
    assert_exit(&output, 0, "cluster list");
    let servers = rows(&output);
    assert_eq!(column(&servers, "broker"), ["broker-a", "broker-b"]);
    let stored: i64 = servers.iter().filter_map(|r| r["put_today"].as_i64()).sum();
    assert_eq!(stored, 40, "{servers:?}");

    let output = run(&["broker", "status", "-n", ns, "-b", "broker-a"]).await;
    assert_exit(&output, 0, "broker status");
    let status = rows(&output);
    assert!(status.iter().all(|r| r["broker"] == "broker-a"));
    assert!(
        column(&status, "key").contains(&"brokerVersionDesc"),
        "{status:?}"
    );

    let output = run(&[
        "group",
        "delete",
        "-n",
        ns,
        "-g",
        "billing",
        "--clean-offset",
    ])
    .await;
    assert_exit(&output, 0, "group delete");
    assert!(rows(&run(&["group", "list", "-n", ns]).await).is_empty());
    let progress = rows(
        &run(&[
            "group", "progress", "-n", ns, "-g", "billing", "-t", "Payments",
        ])
        .await,
    );
    assert!(
        progress.iter().all(|r| r["consumer_offset"].is_null()),
        "the offsets went with the group: {progress:?}"
    );
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn output_pipes_into_head_and_wc_and_times_read_as_people_write_them() {
    let cluster = common::fast_retry_cluster(1).await;
    cluster.create_topic("Lines", 4).await.expect("topic");
    let namesrv = cluster.namesrv_addr();
    send_numbered(&producer(&cluster), "Lines", 0..300).await;

    let output = pipeline(&format!(
        "$BIN consume -n {namesrv} -t Lines -g counted -c 120 --print | wc -l"
    ))
    .await;
    assert_exit(&output, 0, "consume | wc -l");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "120");

    let output = pipeline(&format!(
        "$BIN consume -n {namesrv} -t Lines -g relative --from -1h -c 7 -q --format '%s\\n' | wc -l"
    ))
    .await;
    assert_exit(&output, 0, "consume --from -1h");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "7");

    for script in [
        format!("$BIN topic status -n {namesrv} -t Lines | head -1"),
        format!("$BIN broker status -n {namesrv} -o table | head -2"),
        "$BIN completions bash | head -1".to_owned(),
    ] {
        let output = pipeline(&script).await;
        assert_exit(&output, 0, &script);
        assert!(!output.stdout.is_empty(), "{script}");
        assert!(output.stderr.is_empty(), "{script}: {}", stderr(&output));
    }

    for shell in ["bash", "zsh", "fish"] {
        let output = run(&["completions", shell]).await;
        assert_exit(&output, 0, shell);
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("topic"),
            "{shell}"
        );
    }

    let output = run(&[
        "consume",
        "-n",
        &namesrv,
        "-t",
        "Lines",
        "-g",
        "g",
        "--from",
        "yesterday",
    ])
    .await;
    assert_exit(&output, 2, "an unreadable time");
    assert!(stderr(&output).contains("RFC 3339"), "{}", stderr(&output));
    cluster.shutdown().await;
}
