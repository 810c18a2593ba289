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

/// What systemd, Docker and Kubernetes do to stop a service: SIGTERM. `consume` ends as on
/// Ctrl-C — exit 0, its summary printed, every consumed offset committed — and with `--print`
/// each message's line is on stdout by the time it is acknowledged, not when the process exits.
#[cfg(unix)]
#[actix_rt::test]
async fn sigterm_ends_consume_cleanly_with_every_printed_message_committed() {
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, BufReader};

    let topic = "CliSigterm";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    send_numbered(&producer(&cluster), topic, 0..100).await;
    let mut child = Command::new(BIN)
        .args([
            "consume",
            "--namesrv",
            &namesrv,
            "--topic",
            topic,
            "--group",
            "cli_sigterm",
            "--from",
            "first",
            "--print",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("consume starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut printed = Vec::new();
    while printed.len() < 100 {
        // Far fewer than fill a stdout buffer: they come only if each batch is flushed.
        let line = tokio::time::timeout(common::PATIENCE, lines.next_line())
            .await
            .expect("each message is printed while the consumer runs")
            .expect("stdout readable")
            .expect("a line");
        let line: Value = serde_json::from_str(&line).expect("a JSON line");
        printed.push(line);
    }
    let pid = child.id().expect("running").to_string();
    let kill = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .expect("kill runs");
    assert!(kill.success());
    let status = tokio::time::timeout(common::PATIENCE, child.wait())
        .await
        .expect("consume ends after SIGTERM")
        .expect("status");
    assert!(
        status.success(),
        "SIGTERM is a clean stop, not a crash: {status}"
    );
    let summary = lines
        .next_line()
        .await
        .expect("stdout readable")
        .expect("a summary line");
    let summary: Value = serde_json::from_str(&summary).expect("JSON");
    assert_eq!(summary["count"], 100, "{summary}");
    let client = Client::start(ClientConfig::new(&namesrv)).expect("client");
    let mut committed = 0;
    for q in 0..2 {
        let offset = client
            .query_consumer_offset("cli_sigterm", &common::mq(topic, q))
            .await
            .expect("offset");
        committed += offset.unwrap_or(0);
    }
    assert_eq!(
        committed, 100,
        "the clean stop committed every printed message"
    );
}

/// `broker` out of file descriptors (accept fails with "too many open files"): it waits and
/// says so a few times rather than spinning and logging on every failed accept, and it accepts
/// again once connections close.
#[cfg(unix)]
#[actix_rt::test]
async fn a_broker_out_of_file_descriptors_backs_off_and_recovers() {
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    // A descriptor limit a few dozen connections exhaust.
    let script = format!("ulimit -n 48 && exec {BIN} broker --listen 127.0.0.1:{port}");
    let mut broker = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("broker starts");
    let mut stdout = BufReader::new(broker.stdout.take().expect("stdout")).lines();
    let ready = tokio::time::timeout(common::PATIENCE, stdout.next_line())
        .await
        .expect("the broker prints its address");
    assert!(
        ready.expect("stdout").is_some(),
        "the broker printed nothing"
    );
    let addr = format!("127.0.0.1:{port}");
    let mut held = Vec::new();
    for _ in 0..80 {
        if let Ok(conn) = tokio::net::TcpStream::connect(&addr).await {
            held.push(conn);
        }
    }
    // Let the broker run out for a while: with a busy loop it would log millions of lines.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    drop(held);
    // Accepting again: a fresh connection gets an answer from the name server.
    let client = Client::start(ClientConfig::new(&addr)).expect("client");
    let route = tokio::time::timeout(common::PATIENCE, async {
        loop {
            match client.fetch_subscribe_message_queues("TBW102").await {
                Ok(queues) => break queues,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
            }
        }
    })
    .await
    .expect("the broker accepts again once connections close");
    assert!(!route.is_empty());
    broker.start_kill().expect("kill");
    let mut stderr = String::new();
    broker
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .await
        .expect("stderr readable");
    let warnings = stderr.matches("cannot accept").count();
    assert!(
        (1..=3).contains(&warnings),
        "one warning per 10 s of failures, not one per accept: {warnings} in {} bytes of log",
        stderr.len()
    );
}

/// SIGINT while `consume` is still starting (its name server accepts connections and never
/// answers) ends it cleanly, with its summary line, instead of killing it.
#[cfg(unix)]
#[actix_rt::test]
async fn sigint_during_start_up_ends_consume_cleanly() {
    let (namesrv, _holder) = common::silent_name_server().await;
    let child = Command::new(BIN)
        .args([
            "consume",
            "--namesrv",
            &namesrv,
            "--topic",
            "T",
            "--group",
            "g",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("consume starts");
    // The signal handlers are installed before anything else; start-up takes at least the
    // name server's request timeout (3 s) here, so 300 ms is well inside it.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let pid = child.id().expect("running").to_string();
    let kill = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .await
        .expect("kill runs");
    assert!(kill.success());
    let output = tokio::time::timeout(common::PATIENCE, child.wait_with_output())
        .await
        .expect("consume ends after SIGINT")
        .expect("output");
    assert!(
        output.status.success(),
        "SIGINT during start-up is a clean stop: {}",
        output.status
    );
    let summary = stdout_lines(&output);
    assert_eq!(summary.len(), 1, "one summary line");
    assert_eq!(summary[0]["count"], 0);
}
