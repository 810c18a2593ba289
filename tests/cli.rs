//! The command-line tool as an operator runs it, against an embedded cluster in this process:
//! `consume` in each mode (exactly `--count` messages, `--exit-at-end`, `--format`), `produce`
//! from standard input, the admin subcommands (`topic-route`, `consumer-progress`,
//! `consumer-connections`, `query-msg`, `reset-offset`), signals, a name server that does not
//! answer, and the exit statuses (0 done, 1 error, 2 usage, 130 interrupted).

mod common;

use std::collections::BTreeSet;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{cluster_with_topic, producer, send_numbered};
use rocketmq_actor::consumer::ConsumeStatus;
use rocketmq_actor::{Client, ClientConfig, Message, MessageQueue};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rocketmq-actor");

async fn run(args: &[&str]) -> Output {
    run_with_input(args, None).await
}

/// Runs the binary with `input` on its standard input (closed at its end).
async fn run_with_input(args: &[&str], input: Option<&[u8]>) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the command runs");
    if let Some(input) = input {
        let mut stdin = child.stdin.take().expect("piped stdin");
        match stdin.write_all(input).await {
            Ok(()) => {}
            // The command may end before reading its input (it failed first, as against an
            // unanswering name server): its output and exit code, checked by the caller, say so.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(e) => panic!("stdin not written: {e}"),
        }
        drop(stdin);
    }
    tokio::time::timeout(common::PATIENCE * 2, child.wait_with_output())
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

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `consume`'s closing summary: the last JSON line of its stderr (stdout carries only messages).
fn summary_in(stderr: &[u8]) -> Value {
    String::from_utf8_lossy(stderr)
        .lines()
        .rev()
        // `demo` labels it (`consume: {…}`).
        .filter_map(|line| line.find('{').map(|at| &line[at..]))
        .find_map(|line| {
            serde_json::from_str::<Value>(line)
                .ok()
                .filter(|v| v.get("count").is_some())
        })
        .unwrap_or_else(|| {
            panic!(
                "no summary line on stderr: {}",
                String::from_utf8_lossy(stderr)
            )
        })
}

fn stderr_summary(output: &Output) -> Value {
    summary_in(&output.stderr)
}

/// The summary a spawned `consume` wrote to stderr, once it has ended.
async fn child_summary(child: &mut tokio::process::Child) -> Value {
    use tokio::io::AsyncReadExt;
    let mut err = Vec::new();
    child
        .stderr
        .take()
        .expect("stderr piped")
        .read_to_end(&mut err)
        .await
        .expect("stderr readable");
    summary_in(&err)
}

/// Asserts the exit status `code`, showing stderr otherwise.
fn assert_exit(output: &Output, code: i32, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{what}: {}\nstderr: {}",
        output.status,
        stderr(output)
    );
}

/// The message lines of a `consume --format json` run (stdout) and its closing summary line
/// (stderr).
fn messages_and_summary(output: &Output) -> (Vec<Value>, Value) {
    let lines = stdout_lines(output);
    assert!(
        lines.iter().all(|line| line.get("body").is_some()),
        "every stdout line is a message: {lines:?}"
    );
    (lines, stderr_summary(output))
}

fn bodies(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["body"].as_str().expect("a text body").to_owned())
        .collect()
}

/// `consume` of `group` on `topic` from the first offset, with more arguments.
fn consume_args<'a>(
    namesrv: &'a str,
    topic: &'a str,
    group: &'a str,
    more: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "consume",
        "--namesrv",
        namesrv,
        "--topic",
        topic,
        "--group",
        group,
        "--from",
        "first",
    ];
    args.extend_from_slice(more);
    args
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
        assert!(stdout_lines(&output).is_empty(), "{mode}: nothing printed");
        let summary = &stderr_summary(&output);
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
    assert_exit(&output, 2, "a bad --to is a usage error");
    assert!(stderr(&output).contains("first, last, or a Unix time in ms"));
    client.shutdown().await;
    cluster.shutdown().await;
}

/// What systemd, Docker and Kubernetes do to stop a service: SIGTERM. `consume` ends as on
/// Ctrl-C — exit 0, its summary printed, every consumed offset committed — and with `--print`
/// each message's line is on stdout by the time it is acknowledged, not when the process exits.
#[cfg(unix)]
#[actix_rt::test]
async fn sigterm_ends_consume_cleanly_with_every_printed_message_committed() {
    let topic = "CliSigterm";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    send_numbered(&producer(&cluster), topic, 0..100).await;
    let (mut child, mut lines) = spawn_printing(&[
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
    ]);
    // Far fewer than fill a stdout buffer: they come only if each batch is flushed.
    next_json_lines(&mut lines, 100).await;
    signal(&child, "TERM").await;
    let status = tokio::time::timeout(common::PATIENCE, child.wait())
        .await
        .expect("consume ends after SIGTERM")
        .expect("status");
    assert!(
        status.success(),
        "SIGTERM is a clean stop, not a crash: {status}"
    );
    assert!(
        lines.next_line().await.expect("stdout readable").is_none(),
        "only messages on stdout"
    );
    let summary = child_summary(&mut child).await;
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

/// A name server that accepts connections and never answers; its address, and a channel that
/// gets a `()` at every accepted connection.
async fn silent_name_server() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<()>,
    tokio::task::JoinHandle<()>,
) {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = silent.local_addr().expect("address").to_string();
    let (accepted, rx) = tokio::sync::mpsc::unbounded_channel();
    let holder = actix_rt::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
            let _ = accepted.send(());
        }
    });
    (addr, rx, holder)
}

/// SIGINT while `consume` is still starting (its name server accepts the connection and never
/// answers) ends it cleanly, with its summary line, well before the name server's timeout
/// would have.
#[cfg(unix)]
#[actix_rt::test]
async fn sigint_during_start_up_ends_consume_cleanly() {
    let (namesrv, mut accepted, _holder) = silent_name_server().await;
    let child = Command::new(BIN)
        .args([
            "consume",
            "--namesrv",
            &namesrv,
            "--topic",
            "T",
            "--group",
            "g",
            // Longer than this test waits: only the signal can end the start-up.
            "--request-timeout",
            "120s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("consume starts");
    // The signal handlers are installed before the name server is asked anything.
    tokio::time::timeout(common::PATIENCE, accepted.recv())
        .await
        .expect("consume connects to its name server")
        .expect("the name server runs");
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
    // Without --count or --exit-at-end a signal is consume's normal end.
    assert_exit(&output, 0, "SIGINT during start-up is a clean stop");
    assert!(stdout_lines(&output).is_empty(), "nothing on stdout");
    assert_eq!(stderr_summary(&output)["count"], 0);
}

/// A name server that accepts connections and never answers, or refuses them: every command
/// that needs one fails (exit 1) within its --request-timeout, naming the name server, instead
/// of retrying forever.
#[actix_rt::test]
async fn an_unanswering_name_server_fails_every_network_command_within_the_timeout() {
    let (silent, _accepted, _holder) = silent_name_server().await;
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.local_addr().expect("address").to_string()
    };
    for namesrv in [silent.as_str(), refused.as_str()] {
        let commands: Vec<Vec<&str>> = vec![
            vec!["consume", "--topic", "T", "--group", "g"],
            vec![
                "consume",
                "--topic",
                "T",
                "--group",
                "g",
                "--mode",
                "lite",
                "--exit-at-end",
            ],
            vec!["produce", "--topic", "T", "--count", "5"],
            vec!["produce", "--topic", "T", "--file", "-"],
            vec!["topic-route", "--topic", "T"],
            vec!["consumer-progress", "--group", "g"],
            vec!["consumer-connections", "--group", "g"],
            vec![
                "reset-offset",
                "--group",
                "g",
                "--topic",
                "T",
                "--to",
                "first",
            ],
        ];
        for mut args in commands {
            args.extend(["--namesrv", namesrv, "--request-timeout", "1s"]);
            let started = Instant::now();
            let output = run_with_input(&args, Some(b"a line\n")).await;
            let took = started.elapsed();
            assert_exit(&output, 1, &format!("{args:?}"));
            let error = stderr(&output);
            assert!(
                error.contains(&format!("name server {namesrv} did not answer within 1s")),
                "{args:?}: {error}"
            );
            assert!(
                took < Duration::from_secs(10),
                "{args:?} took {took:?} with a 1 s request timeout"
            );
        }
    }
}

/// Lines of standard input become messages with the same key, tag and properties; `consume
/// --format json` shows them (a body that is not UTF-8 in base64), a template prints the
/// placeholders, and logs on a stderr that is not a terminal carry no colours.
#[actix_rt::test]
async fn produce_from_stdin_then_consume_prints_keys_tags_and_properties() {
    let topic = "CliStdin";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    let input: &[u8] = b"alpha\r\nbeta\n\n\xff\xfe\ngamma";
    let output = run_with_input(
        &[
            "produce",
            "--namesrv",
            &namesrv,
            "--topic",
            topic,
            "--file",
            "-",
            "--key",
            "order-1",
            "--tag",
            "TagX",
            "--property",
            "color=blue",
            "--property",
            "size=L",
        ],
        Some(input),
    )
    .await;
    assert_exit(&output, 0, "produce --file -");
    let summary = stdout_lines(&output);
    assert_eq!(summary.len(), 1, "one summary line: {summary:?}");
    assert_eq!(summary[0]["count"], 4, "the empty line is skipped");

    let output = Command::new(BIN)
        .args(consume_args(
            &namesrv,
            topic,
            "cli_stdin",
            &["--format", "json", "--exit-at-end"],
        ))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(common::PATIENCE * 2, output)
        .await
        .expect("consume ends by itself")
        .expect("consume runs");
    assert_exit(&output, 0, "consume --exit-at-end");
    let log = stderr(&output);
    assert!(log.contains("INFO"), "logs at RUST_LOG=info: {log}");
    assert!(
        !log.contains('\u{1b}') && !log.contains('\r'),
        "no colour codes nor progress line off a terminal: {log:?}"
    );
    let (messages, summary) = messages_and_summary(&output);
    assert_eq!(summary["count"], 4);
    let mut texts = Vec::new();
    for m in &messages {
        assert_eq!(m["topic"], topic);
        assert_eq!(m["keys"], serde_json::json!(["order-1"]));
        assert_eq!(m["tags"], "TagX");
        assert_eq!(m["properties"]["color"], "blue");
        assert_eq!(m["properties"]["size"], "L");
        let born = m["born_timestamp"].as_i64().expect("born time");
        let stored = m["store_timestamp"].as_i64().expect("store time");
        assert!(born > 0 && stored >= born, "{m}");
        assert!(m["offset_msg_id"].as_str().is_some_and(|id| id.len() == 32));
        match m["body_encoding"].as_str() {
            Some("utf-8") => texts.push(m["body"].as_str().expect("text").to_owned()),
            Some("base64") => {
                assert_eq!(m["body"], "//4=", "the bytes 0xff 0xfe");
                texts.push("<binary>".into());
            }
            other => panic!("body_encoding {other:?}"),
        }
    }
    texts.sort();
    assert_eq!(texts, ["<binary>", "alpha", "beta", "gamma"]);

    let output = run(&consume_args(
        &namesrv,
        topic,
        "cli_template",
        &["--format", r"%t|%q|%o|%k|%T|%l|%s\n", "--exit-at-end"],
    ))
    .await;
    assert_exit(&output, 0, "consume --format TEMPLATE");
    let text = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(stderr_summary(&output)["count"], 4);
    let mut rendered: Vec<String> = lines
        .iter()
        .filter(|line| !line.ends_with('\u{fffd}'))
        .map(|line| {
            let fields: Vec<&str> = line.split('|').collect();
            assert_eq!(fields[0], topic);
            assert!(fields[1] == "0" || fields[1] == "1", "{line}");
            assert_eq!((fields[3], fields[4]), ("order-1", "TagX"), "{line}");
            format!("{}:{}", fields[6], fields[5])
        })
        .collect();
    rendered.sort();
    assert_eq!(rendered, ["alpha:5", "beta:4", "gamma:5"]);
    cluster.shutdown().await;
}

/// `--exit-at-end` in every mode: at once on a topic without messages, and after exactly
/// every stored message otherwise.
#[actix_rt::test]
async fn exit_at_end_stops_once_every_queue_is_consumed_in_every_mode() {
    let topic = "CliEnd";
    let (cluster, namesrv) = cluster_with_topic(topic, 4).await;
    for mode in ["push", "lite", "schedule"] {
        let group = format!("cli_end_empty_{mode}");
        let output = run(&consume_args(
            &namesrv,
            topic,
            &group,
            &["--exit-at-end", "--mode", mode],
        ))
        .await;
        assert_exit(&output, 0, mode);
        let (messages, summary) = messages_and_summary(&output);
        assert!(messages.is_empty());
        assert_eq!(summary["count"], 0, "{mode}");
    }
    send_numbered(&producer(&cluster), topic, 0..50).await;
    for mode in ["push", "lite", "schedule"] {
        let group = format!("cli_end_{mode}");
        let output = run(&consume_args(
            &namesrv,
            topic,
            &group,
            &["--exit-at-end", "--mode", mode, "--print"],
        ))
        .await;
        assert_exit(&output, 0, mode);
        let (messages, summary) = messages_and_summary(&output);
        assert_eq!(summary["count"], 50, "{mode}");
        let distinct: BTreeSet<String> = bodies(&messages).into_iter().collect();
        assert_eq!(distinct.len(), 50, "{mode}: every message once");
    }
    // A topic that does not exist has no end to reach.
    let output = run(&consume_args(
        &namesrv,
        "CliNoSuchTopic",
        "g",
        &["--exit-at-end"],
    ))
    .await;
    assert_exit(&output, 1, "--exit-at-end on a missing topic");
    assert!(stderr(&output).contains("does not exist"));
    cluster.shutdown().await;
}

/// `--count N` prints and acknowledges exactly N messages, in every mode: the group's next
/// consumer gets exactly the others — none lost, none twice.
#[actix_rt::test]
async fn count_stops_at_exactly_n_and_the_next_consumer_gets_the_rest() {
    let topic = "CliCount";
    let (cluster, namesrv) = cluster_with_topic(topic, 4).await;
    send_numbered(&producer(&cluster), topic, 0..100).await;
    let all: BTreeSet<String> = (0..100).map(common::body_of).collect();
    for mode in ["push", "lite", "schedule"] {
        let group = format!("cli_count_{mode}");
        let first = run(&consume_args(
            &namesrv,
            topic,
            &group,
            &["--count", "30", "--mode", mode, "--format", "json"],
        ))
        .await;
        assert_exit(&first, 0, mode);
        let (first, summary) = messages_and_summary(&first);
        assert_eq!(summary["count"], 30, "{mode}");
        assert_eq!(first.len(), 30, "{mode}: exactly 30 printed");
        let rest = run(&consume_args(
            &namesrv,
            topic,
            &group,
            &["--exit-at-end", "--mode", mode, "--format", "json"],
        ))
        .await;
        assert_exit(&rest, 0, mode);
        let (rest, _) = messages_and_summary(&rest);
        let mut seen = bodies(&first);
        seen.extend(bodies(&rest));
        assert_eq!(seen.len(), 100, "{mode}: 30 + {} printed", rest.len());
        let distinct: BTreeSet<String> = seen.into_iter().collect();
        assert_eq!(distinct, all, "{mode}: every message exactly once");
    }
    cluster.shutdown().await;
}

/// A signal before `--count` is reached, or before `produce` reached the end of its input, is
/// an interruption: exit 130, with the summary of what was done.
#[cfg(unix)]
#[actix_rt::test]
async fn a_signal_before_the_command_is_done_exits_130() {
    let topic = "CliInterrupt";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    send_numbered(&producer(&cluster), topic, 0..5).await;
    let (mut child, mut lines) = spawn_printing(&consume_args(
        &namesrv,
        topic,
        "cli_interrupt",
        &["--count", "10", "--print"],
    ));
    next_json_lines(&mut lines, 5).await;
    signal(&child, "INT").await;
    let status = tokio::time::timeout(common::PATIENCE, child.wait())
        .await
        .expect("consume ends after SIGINT")
        .expect("status");
    assert_eq!(status.code(), Some(130), "5 of --count 10: interrupted");
    assert!(lines.next_line().await.expect("stdout").is_none());
    assert_eq!(child_summary(&mut child).await["count"], 5);

    // produce --file - whose input has not ended.
    let client = common::client(&cluster);
    let queues = client
        .fetch_subscribe_message_queues(topic)
        .await
        .expect("queues");
    let mut child = Command::new(BIN)
        .args([
            "produce",
            "--namesrv",
            &namesrv,
            "--topic",
            topic,
            "--file",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("produce starts");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"one more\n").await.expect("written");
    stdin.flush().await.expect("flushed");
    // Sent once the topic holds a sixth message.
    common::eventually("the line is sent", || async {
        let mut stored = 0;
        for queue in &queues {
            stored += client.max_offset(queue).await.ok()?;
        }
        (stored == 6).then_some(())
    })
    .await;
    signal(&child, "INT").await;
    let output = tokio::time::timeout(common::PATIENCE, child.wait_with_output())
        .await
        .expect("produce ends after SIGINT")
        .expect("output");
    assert_exit(
        &output,
        130,
        "produce interrupted before the end of its input",
    );
    assert_eq!(stdout_lines(&output)[0]["count"], 1);
    drop(stdin);
    client.shutdown().await;
    cluster.shutdown().await;
}

/// Lines of a child's stdout as they come.
#[cfg(unix)]
type ChildLines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// Starts the CLI with `args`, its stdout piped for reading as it runs (stderr discarded).
#[cfg(unix)]
fn spawn_printing(args: &[&str]) -> (tokio::process::Child, ChildLines) {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the command starts");
    let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    (child, lines)
}

/// The next `n` lines the child prints while it runs, each a JSON object.
#[cfg(unix)]
async fn next_json_lines(lines: &mut ChildLines, n: usize) -> Vec<Value> {
    let mut read = Vec::with_capacity(n);
    while read.len() < n {
        let line = tokio::time::timeout(common::PATIENCE, lines.next_line())
            .await
            .expect("each message is printed while the command runs")
            .expect("stdout readable")
            .expect("a line");
        read.push(serde_json::from_str(&line).expect("a JSON line"));
    }
    read
}

#[cfg(unix)]
async fn signal(child: &tokio::process::Child, name: &str) {
    let pid = child.id().expect("running").to_string();
    let kill = Command::new("kill")
        .args([&format!("-{name}"), &pid])
        .status()
        .await
        .expect("kill runs");
    assert!(kill.success());
}

/// `topic-route`: a line per broker with its addresses and queues; a topic that does not exist
/// is an error, a missing argument a usage error.
#[actix_rt::test]
async fn topic_route_prints_every_broker_with_its_queues() {
    let cluster = common::fast_retry_cluster(2).await;
    cluster.create_topic("CliRoute", 3).await.expect("topic");
    let namesrv = cluster.namesrv_addr();
    let output = run(&["topic-route", "--namesrv", &namesrv, "--topic", "CliRoute"]).await;
    assert_exit(&output, 0, "topic-route");
    let rows = stdout_lines(&output);
    let brokers: Vec<&str> = rows
        .iter()
        .map(|r| r["broker"].as_str().expect("name"))
        .collect();
    assert_eq!(brokers, ["broker-a", "broker-b"]);
    for row in &rows {
        assert_eq!(row["topic"], "CliRoute");
        assert!(
            row["addrs"]["0"].as_str().is_some_and(|a| a.contains(':')),
            "{row}"
        );
        assert_eq!(
            (row["read_queues"].as_i64(), row["write_queues"].as_i64()),
            (Some(3), Some(3))
        );
        assert_eq!(
            (row["perm"].as_i64(), row["perm_text"].as_str()),
            (Some(6), Some("RW-"))
        );
    }
    let output = run(&[
        "topic-route",
        "--namesrv",
        &namesrv,
        "--topic",
        "CliNoRoute",
    ])
    .await;
    assert_exit(&output, 1, "a topic without a route");
    assert!(stderr(&output).contains("topic CliNoRoute does not exist"));
    let output = run(&["topic-route", "--namesrv", &namesrv]).await;
    assert_exit(&output, 2, "no --topic");
    cluster.shutdown().await;
}

/// `consumer-progress` and `consumer-connections` while a push consumer of the group runs in
/// this process, holding every message it gets: the lag of each queue, the client owning it,
/// and the client's connection with the group's subscriptions.
#[actix_rt::test]
async fn consumer_progress_and_connections_show_a_running_consumer() {
    let topic = "CliProgress";
    let group = "cli_progress";
    let (cluster, namesrv) = cluster_with_topic(topic, 4).await;
    send_numbered(&producer(&cluster), topic, 0..40).await;
    let client = common::client(&cluster);
    let queues = client
        .fetch_subscribe_message_queues(topic)
        .await
        .expect("queues");
    let (release, released) = tokio::sync::watch::channel(false);
    let (called, mut calls) = tokio::sync::mpsc::unbounded_channel::<MessageQueue>();
    let consumer = common::from_first_offset(&namesrv, group, topic, "*")
        .configure(|c| {
            c.persist_consumer_offset_interval = Duration::from_millis(100);
            // Room for every message at once: each queue gets its calls, all held.
            c.consume_thread_max = 64;
        })
        .listener_fn(move |messages, ctx| {
            let _ = called.send(ctx.queue.clone());
            let mut released = released.clone();
            drop(messages);
            async move {
                let _ = released.wait_for(|go| *go).await;
                (ConsumeStatus::Success, ctx)
            }
        })
        .start()
        .await
        .expect("consumer starts");
    // Every queue is owned and consuming (its first message held) once each has called.
    let mut consuming = BTreeSet::new();
    while consuming.len() < 4 {
        let queue = tokio::time::timeout(common::PATIENCE, calls.recv())
            .await
            .expect("every queue gets a message")
            .expect("the listener runs");
        if queue.topic == topic {
            consuming.insert(queue);
        }
    }

    // The consumer stored where it started (0) and acknowledged nothing since.
    common::eventually("the start offsets are stored", || async {
        for queue in &queues {
            if client.query_consumer_offset(group, queue).await.ok()? != Some(0) {
                return None;
            }
        }
        Some(())
    })
    .await;

    let output = run(&["consumer-progress", "--namesrv", &namesrv, "--group", group]).await;
    assert_exit(&output, 0, "consumer-progress");
    let rows = stdout_lines(&output);
    let topics: BTreeSet<&str> = rows
        .iter()
        .map(|r| r["topic"].as_str().expect("topic"))
        .collect();
    assert!(
        topics.contains(topic) && topics.contains(format!("%RETRY%{group}").as_str()),
        "the group's subscriptions, its retry topic included: {topics:?}"
    );
    let mut lag = 0;
    for row in rows.iter().filter(|r| r["topic"] == topic) {
        assert_eq!(row["broker_offset"], 10, "{row}");
        assert_eq!(row["consumer_offset"], 0, "nothing acknowledged: {row}");
        lag += row["lag"].as_i64().expect("a lag");
        assert_eq!(row["client"], consumer.client_id(), "{row}");
    }
    assert_eq!(lag, 40);
    let output = run(&[
        "consumer-progress",
        "--namesrv",
        &namesrv,
        "--group",
        group,
        "--topic",
        topic,
    ])
    .await;
    assert_exit(&output, 0, "consumer-progress --topic");
    assert_eq!(
        stdout_lines(&output).len(),
        4,
        "one line per queue of the topic"
    );

    let output = run(&[
        "consumer-connections",
        "--namesrv",
        &namesrv,
        "--group",
        group,
    ])
    .await;
    assert_exit(&output, 0, "consumer-connections");
    let rows = stdout_lines(&output);
    assert_eq!(rows.len(), 1, "one client: {rows:?}");
    let row = &rows[0];
    assert_eq!(row["client_id"], consumer.client_id());
    assert!(
        row["client_addr"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:")),
        "{row}"
    );
    assert_eq!(row["subscriptions"][topic], "*");
    assert_eq!(row["message_model"], "CLUSTERING");
    assert_eq!(row["consume_type"], "CONSUME_PASSIVELY");
    assert_eq!(row["consume_from_where"], "CONSUME_FROM_FIRST_OFFSET");

    // A group nobody runs.
    let output = run(&[
        "consumer-connections",
        "--namesrv",
        &namesrv,
        "--group",
        "nobody",
    ])
    .await;
    assert_exit(&output, 1, "an offline group");
    assert!(stderr(&output).contains("consumer group nobody is not online"));
    let output = run(&[
        "consumer-progress",
        "--namesrv",
        &namesrv,
        "--group",
        "nobody",
    ])
    .await;
    assert_exit(&output, 1, "an offline group without --topic");
    assert!(stderr(&output).contains("give --topic"));

    release.send_replace(true);
    consumer.shutdown().await;
    client.shutdown().await;
    cluster.shutdown().await;
}

/// `query-msg`: the message an offset message id points to, as `consume --format json` prints
/// it; a malformed id is a usage error, one pointing nowhere an error.
#[actix_rt::test]
async fn query_msg_prints_the_stored_message() {
    let topic = "CliQuery";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    let sent = producer(&cluster)
        .send(
            Message::new(topic, "hello")
                .with_tags("TagQ")
                .with_keys("k-9")
                .with_property("origin", "test"),
        )
        .await
        .expect("sent");
    let output = run(&[
        "query-msg",
        "--namesrv",
        &namesrv,
        "--id",
        &sent.offset_msg_id,
    ])
    .await;
    assert_exit(&output, 0, "query-msg");
    let lines = stdout_lines(&output);
    assert_eq!(lines.len(), 1);
    let m = &lines[0];
    assert_eq!(m["body"], "hello");
    assert_eq!(m["tags"], "TagQ");
    assert_eq!(m["keys"], serde_json::json!(["k-9"]));
    assert_eq!(m["properties"]["origin"], "test");
    assert_eq!(m["msg_id"], sent.msg_id.as_str());
    assert_eq!(m["offset_msg_id"], sent.offset_msg_id.as_str());
    assert_eq!(m["queue_offset"], sent.queue_offset);
    assert!(m["store_timestamp"].as_i64().is_some_and(|t| t > 0));

    let output = run(&["query-msg", "--namesrv", &namesrv, "--id", "not-an-id"]).await;
    assert_exit(&output, 2, "a malformed id");
    // The same store host, an offset past everything stored.
    let nowhere = format!("{}7FFFFFFFFFFFFFFF", &sent.offset_msg_id[..16]);
    let output = run(&["query-msg", "--namesrv", &namesrv, "--id", &nowhere]).await;
    assert_exit(&output, 1, "an id of no message");
    cluster.shutdown().await;
}

/// Arguments that make no sense are refused before anything runs: exit 2 with clap's message;
/// `--help` documents the exit statuses.
#[actix_rt::test]
async fn bad_arguments_are_usage_errors_with_exit_status_2() {
    let ns = "127.0.0.1:1";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["demo", "--count", "0"], "must be at least 1"),
        (vec!["broker", "--brokers", "0"], "--brokers"),
        (vec!["broker", "--topic", "T:0"], "1 to 1024 queues"),
        (vec!["broker", "--lock-expiry", "0s"], "longer than zero"),
        (
            vec![
                "produce",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--count",
                "5",
                "--size",
                "0",
            ],
            "must be at least 1",
        ),
        (
            vec!["produce", "--namesrv", ns, "--topic", "T", "--count", "0"],
            "must be at least 1",
        ),
        (
            vec!["produce", "--namesrv", ns, "--topic", "T"],
            "--count <COUNT>|--file",
        ),
        (
            vec![
                "produce",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--count",
                "5",
                "--file",
                "-",
            ],
            "cannot be used with",
        ),
        (
            vec![
                "produce",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--file",
                "-",
                "--property",
                "novalue",
            ],
            "NAME=VALUE",
        ),
        (
            vec![
                "produce",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--file",
                "-",
                "--property",
                "TAGS=x",
            ],
            "--tag",
        ),
        (
            vec![
                "consume",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--group",
                "g",
                "--count",
                "0",
            ],
            "must be at least 1",
        ),
        (
            vec![
                "consume",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--group",
                "g",
                "--format",
                "jsno",
            ],
            "neither `json` nor a template",
        ),
        (
            vec![
                "consume",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--group",
                "g",
                "--format",
                "%x",
            ],
            "unknown placeholder %x",
        ),
        (
            vec![
                "consume",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--group",
                "g",
                "--format",
                "json",
                "--print",
            ],
            "cannot be used with",
        ),
        (
            vec![
                "consume",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--group",
                "g",
                "--from",
                "yesterday",
            ],
            "first, last, or a Unix time",
        ),
        (
            vec![
                "consume",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--group",
                "g",
                "--orderly",
                "--mode",
                "lite",
            ],
            "need --mode push",
        ),
        (
            vec![
                "consume",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--group",
                "g",
                "--exit-at-end",
                "--broadcast",
            ],
            "cannot be used with",
        ),
        (
            vec![
                "consume",
                "--namesrv",
                ns,
                "--topic",
                "T",
                "--group",
                "g",
                "--request-timeout",
                "0s",
            ],
            "longer than zero",
        ),
        (
            vec!["consume", "--namesrv", ";", "--topic", "T", "--group", "g"],
            "--namesrv",
        ),
        (
            vec!["query-msg", "--namesrv", ns, "--id", "xyz"],
            "offset message id",
        ),
        (
            vec![
                "reset-offset",
                "--namesrv",
                ns,
                "--group",
                "g",
                "--topic",
                "T",
                "--to",
                "soon",
            ],
            "first, last, or a Unix time",
        ),
    ];
    for (args, needle) in cases {
        let output = run(&args).await;
        assert_exit(&output, 2, &format!("{args:?}"));
        let error = stderr(&output);
        assert!(
            error.contains(needle),
            "{args:?}: {error:?} lacks {needle:?}"
        );
        assert!(output.stdout.is_empty(), "{args:?} printed something");
    }
    for args in [vec!["--help"], vec!["consume", "--help"]] {
        let output = run(&args).await;
        assert_exit(&output, 0, "--help");
        let help = String::from_utf8_lossy(&output.stdout);
        for status in ["Exit status", "130", "usage"] {
            assert!(
                help.contains(status),
                "{args:?} help lacks {status}: {help}"
            );
        }
    }
}

/// `demo`: an embedded cluster, `--count` messages produced and consumed, two summary lines.
#[actix_rt::test]
async fn demo_produces_and_consumes_its_count() {
    let output = run(&["demo", "--count", "300", "--brokers", "1"]).await;
    assert_exit(&output, 0, "demo");
    // produce's summary is its output (stdout); consume's follows its messages (stderr).
    let produced = summary_in(&output.stdout);
    assert_eq!(produced["count"], 300, "{produced}");
    let consumed = stderr_summary(&output);
    assert_eq!(consumed["count"], 300, "{consumed}");
    assert!(consumed["latency_ms"]["p99"].as_u64().is_some());
}

/// `GET /metrics` from `addr`: `None` until the exporter listens.
async fn scrape_metrics(addr: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    assert!(
        response.starts_with("HTTP/1.1 200 OK\r\n"),
        "a scrape is answered 200: {response}"
    );
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
}

#[actix_rt::test]
async fn consume_serves_prometheus_metrics_while_it_runs() {
    let topic = "CliMetrics";
    let group = "cli_metrics";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    send_numbered(&producer(&cluster), topic, 0..30).await;
    // A free port: bound, read, released for the command.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let child = Command::new(BIN)
        .args([
            "consume",
            "--namesrv",
            &namesrv,
            "--topic",
            topic,
            "--group",
            group,
            "--from",
            "first",
            "--metrics-addr",
            &addr,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("consume starts");
    let consumed_ok =
        format!("rocketmq_consumer_consumed_messages_total{{group=\"{group}\",status=\"ok\"}} 30");
    let text = common::eventually("30 messages counted at /metrics", || {
        let (addr, consumed_ok) = (addr.clone(), consumed_ok.clone());
        async move {
            scrape_metrics(&addr)
                .await
                .filter(|text| text.lines().any(|line| line == consumed_ok))
        }
    })
    .await;
    for series in [
        format!("rocketmq_consumer_pulled_messages_total{{group=\"{group}\"}} 30"),
        format!("rocketmq_consumer_owned_queues{{group=\"{group}\"}} 3"),
    ] {
        assert!(
            text.lines().any(|line| line == series),
            "{series} in:\n{text}"
        );
    }
    let lag_gauges = text
        .lines()
        .filter(|line| {
            line.starts_with("rocketmq_consumer_lag_messages{")
                && line.contains(&format!("topic=\"{topic}\""))
        })
        .count();
    assert_eq!(lag_gauges, 2, "a lag gauge per queue of the topic:\n{text}");
    signal(&child, "INT").await;
    let output = tokio::time::timeout(common::PATIENCE, child.wait_with_output())
        .await
        .expect("consume ends after SIGINT")
        .expect("output");
    assert_exit(&output, 0, "consume without --count stopped by SIGINT");
    cluster.shutdown().await;
}

/// `produce --rate R` spaces its messages: the last of N leaves no earlier than (N−1)/R s after
/// the first, which the broker's store times show.
#[actix_rt::test]
async fn produce_at_a_steady_rate_spreads_the_messages_over_time() {
    let topic = "CliRate";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    let output = run(&[
        "produce",
        "--namesrv",
        &namesrv,
        "--topic",
        topic,
        "--count",
        "101",
        "--rate",
        "200",
    ])
    .await;
    assert_exit(&output, 0, "produce --rate");
    let summary = &stdout_lines(&output)[0];
    assert_eq!(summary["count"], 101, "{summary}");
    let client = Client::start(ClientConfig::new(&namesrv)).expect("client");
    let queue = rocketmq_actor::MessageQueue::new(topic, common::BROKER, 0);
    let mut store_times = Vec::new();
    while store_times.len() < 101 {
        let offset = store_times.len() as i64;
        let pulled = client
            .pull(&rocketmq_actor::rpc::PullRequest::new(
                "cli_rate_reader",
                queue.clone(),
                offset,
            ))
            .await
            .expect("pull");
        assert!(!pulled.messages.is_empty(), "stored: {}", store_times.len());
        store_times.extend(pulled.messages.iter().map(|m| m.store_timestamp));
    }
    client.shutdown().await;
    let (first, last) = (store_times[0], store_times[100]);
    assert!(
        last - first >= 450,
        "100 intervals of 5 ms: the store times span {} ms",
        last - first
    );
    let bad = run(&[
        "produce",
        "--namesrv",
        &namesrv,
        "--topic",
        topic,
        "--count",
        "1",
        "--rate",
        "0",
    ])
    .await;
    assert_exit(&bad, 2, "--rate 0");
    cluster.shutdown().await;
}

/// `--namespace`: `produce` and `consume` (every mode) name the topic and group without it,
/// the broker holds them with it, and the admin subcommands take and print unwrapped names.
#[actix_rt::test]
async fn namespace_on_produce_consume_and_the_admin_subcommands() {
    let (cluster, namesrv) = cluster_with_topic("cli_ns%CliNs", 2).await;
    let ns = ["--namespace", "cli_ns"];
    let mut produce = vec![
        "produce",
        "--namesrv",
        &namesrv,
        "--topic",
        "CliNs",
        "--count",
        "20",
    ];
    produce.extend_from_slice(&ns);
    let output = run(&produce).await;
    assert_exit(&output, 0, "produce --namespace");
    let mut stored = 0;
    for queue_id in 0..2 {
        stored += cluster
            .max_offset(common::BROKER, "cli_ns%CliNs", queue_id)
            .await
            .expect("broker answers");
    }
    assert_eq!(stored, 20, "the broker holds the wrapped topic");

    for mode in ["push", "lite", "schedule"] {
        let group = format!("cli_ns_{mode}");
        let mut args = consume_args(
            &namesrv,
            "CliNs",
            &group,
            &["--exit-at-end", "--mode", mode, "--format", "json"],
        );
        args.extend_from_slice(&ns);
        let output = run(&args).await;
        assert_exit(&output, 0, mode);
        let (messages, summary) = messages_and_summary(&output);
        assert_eq!(summary["count"], 20, "{mode}");
        assert!(
            messages.iter().all(|m| m["topic"] == "CliNs"),
            "{mode}: topics printed unwrapped"
        );
        let offset = cluster
            .committed_offset(
                common::BROKER,
                &format!("cli_ns%{group}"),
                "cli_ns%CliNs",
                0,
            )
            .await
            .expect("broker answers");
        assert_eq!(
            offset,
            Some(10),
            "{mode}: committed under the wrapped group"
        );
    }
    // Without the namespace the topic is not there.
    let output = run(&consume_args(
        &namesrv,
        "CliNs",
        "cli_ns_push",
        &["--exit-at-end"],
    ))
    .await;
    assert_exit(&output, 1, "the bare topic");
    assert!(stderr(&output).contains("does not exist"));

    let mut route = vec!["topic-route", "--namesrv", &namesrv, "--topic", "CliNs"];
    route.extend_from_slice(&ns);
    let output = run(&route).await;
    assert_exit(&output, 0, "topic-route --namespace");
    assert_eq!(stdout_lines(&output)[0]["topic"], "CliNs");

    let mut progress = vec![
        "consumer-progress",
        "--namesrv",
        &namesrv,
        "--group",
        "cli_ns_push",
        "--topic",
        "CliNs",
    ];
    progress.extend_from_slice(&ns);
    let output = run(&progress).await;
    assert_exit(&output, 0, "consumer-progress --namespace");
    let rows = stdout_lines(&output);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(row["topic"], "CliNs", "{row}");
        assert_eq!(row["consumer_offset"], 10, "{row}");
        assert_eq!(row["lag"], 0, "{row}");
    }

    let mut reset = vec![
        "reset-offset",
        "--namesrv",
        &namesrv,
        "--group",
        "cli_ns_push",
        "--topic",
        "CliNs",
        "--to",
        "first",
    ];
    reset.extend_from_slice(&ns);
    let output = run(&reset).await;
    assert_exit(&output, 0, "reset-offset --namespace");
    let offsets: Vec<Value> = stdout_lines(&output)
        .iter()
        .map(|row| row["offset"].clone())
        .collect();
    assert_eq!(offsets, [0, 0]);
    let output = run(&progress).await;
    assert!(stdout_lines(&output)
        .iter()
        .all(|row| row["consumer_offset"] == 0 && row["lag"] == 10));

    let output = run(&[
        "topic-route",
        "--namesrv",
        &namesrv,
        "--topic",
        "T",
        "--namespace",
        "a%b",
    ])
    .await;
    assert_exit(&output, 2, "an invalid namespace");
    assert!(stderr(&output).contains("namespace"));
    cluster.shutdown().await;
}

/// `produce --batch N` sends N messages per request: every message arrives, the messages of one
/// request in one queue; a batch of 0, or with `--rate`, is a usage error.
#[actix_rt::test]
async fn produce_in_batches_stores_every_message_a_batch_to_a_queue() {
    let topic = "CliBatch";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    let output = run(&[
        "produce",
        "--namesrv",
        &namesrv,
        "--topic",
        topic,
        "--count",
        "70",
        "--batch",
        "32",
    ])
    .await;
    assert_exit(&output, 0, "produce --batch 32");
    assert_eq!(stdout_lines(&output)[0]["count"], 70);
    let mut per_queue = Vec::new();
    for queue_id in 0..2 {
        per_queue.push(
            cluster
                .max_offset(common::BROKER, topic, queue_id)
                .await
                .expect("broker answers"),
        );
    }
    per_queue.sort_unstable();
    assert!(
        [vec![0, 70], vec![6, 64], vec![32, 38]].contains(&per_queue),
        "requests of 32, 32 and 6 messages, each whole in one queue: {per_queue:?}"
    );
    for bad in [vec!["--batch", "0"], vec!["--batch", "2", "--rate", "10"]] {
        let mut args = vec![
            "produce",
            "--namesrv",
            &namesrv,
            "--topic",
            topic,
            "--count",
            "1",
        ];
        args.extend(bad.iter().copied());
        let output = run(&args).await;
        assert_exit(&output, 2, &format!("{bad:?}"));
    }
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn consume_sql_prints_only_the_selected_messages_and_names_the_broker_setting() {
    let topic = "CliSql";
    let (_cluster, namesrv) = cluster_with_topic(topic, 2).await;
    for (body, region) in [
        ("eu-1", "eu"),
        ("us-1", "us"),
        ("eu-2", "eu"),
        ("us-2", "us"),
    ] {
        let region = format!("region={region}");
        let output = run_with_input(
            &[
                "produce",
                "--namesrv",
                &namesrv,
                "--topic",
                topic,
                "--file",
                "-",
                "--property",
                &region,
            ],
            Some(body.as_bytes()),
        )
        .await;
        assert_exit(&output, 0, "produce --property");
    }
    let output = run(&consume_args(
        &namesrv,
        topic,
        "cli_sql",
        &[
            "--sql",
            "region = 'eu'",
            "--format",
            "json",
            "--exit-at-end",
        ],
    ))
    .await;
    assert_exit(&output, 0, "consume --sql");
    let (messages, summary) = messages_and_summary(&output);
    let got: BTreeSet<String> = bodies(&messages).into_iter().collect();
    assert_eq!(got, BTreeSet::from(["eu-1".to_owned(), "eu-2".to_owned()]));
    assert_eq!(summary["count"], 2);

    let broken = run(&consume_args(
        &namesrv,
        topic,
        "cli_sql_bad",
        &["--sql", "region ="],
    ))
    .await;
    assert_exit(&broken, 1, "consume --sql with a syntax error");
    assert!(
        stderr(&broken).contains("position 9"),
        "{}",
        stderr(&broken)
    );
    let both = run(&consume_args(
        &namesrv,
        topic,
        "g",
        &["--sql", "a = 1", "--expr", "TagA"],
    ))
    .await;
    assert_exit(&both, 2, "--sql with --expr");

    let plain = common::start_cluster(rocketmq_actor::embedded::EmbeddedConfig {
        enable_property_filter: false,
        ..rocketmq_actor::embedded::EmbeddedConfig::ephemeral()
    })
    .await;
    plain.create_topic(topic, 1).await.expect("topic created");
    let refused = run(&consume_args(
        &plain.namesrv_addr(),
        topic,
        "cli_sql_refused",
        &["--sql", "region = 'eu'", "--count", "1"],
    ))
    .await;
    assert_exit(
        &refused,
        1,
        "consume --sql on a broker without property filtering",
    );
    assert!(
        stderr(&refused).contains("enablePropertyFilter"),
        "{}",
        stderr(&refused)
    );
}

/// `consume | head`: once the reader is gone the command ends quietly with status 0, what it
/// printed committed; and `--namesrv` falls back to `NAMESRV_ADDR`.
#[cfg(unix)]
#[actix_rt::test]
async fn a_reader_that_goes_away_ends_consume_quietly_with_what_it_read_committed() {
    let topic = "CliHead";
    let (_cluster, namesrv) = cluster_with_topic(topic, 1).await;
    let output = Command::new(BIN)
        .args([
            "produce", "--topic", topic, "--count", "3000", "--size", "300",
        ])
        .env("NAMESRV_ADDR", &namesrv)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("produce runs");
    assert_exit(&output, 0, "produce with NAMESRV_ADDR and no --namesrv");

    let mut child = Command::new(BIN)
        .args(consume_args(&namesrv, topic, "cli_head", &["--print"]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("consume starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let mut first = Vec::new();
    while first.len() < 3 {
        let line = tokio::time::timeout(common::PATIENCE, lines.next_line())
            .await
            .expect("a line while consume runs")
            .expect("stdout readable")
            .expect("a line");
        let message: Value = serde_json::from_str(&line).expect("a JSON line");
        first.push(message["body"].as_str().expect("a body").to_owned());
    }
    // As `head -n 3` does: stop reading and close the pipe.
    drop(lines);
    let output = tokio::time::timeout(common::PATIENCE * 2, child.wait_with_output())
        .await
        .expect("consume ends by itself once its reader is gone")
        .expect("consume runs");
    assert_exit(&output, 0, "consume | head");
    assert!(!stderr(&output).contains("error"), "{}", stderr(&output));

    // The group's next consumer does not get what was read.
    let rest = run(&consume_args(
        &namesrv,
        topic,
        "cli_head",
        &["--format", "json", "--exit-at-end"],
    ))
    .await;
    assert_exit(&rest, 0, "the next consumer of the group");
    let (messages, _) = messages_and_summary(&rest);
    let again: Vec<String> = bodies(&messages)
        .into_iter()
        .filter(|body| first.contains(body))
        .collect();
    assert!(again.is_empty(), "read twice: {again:?}");
}
