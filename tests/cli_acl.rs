//! The command line against a secured cluster: `broker --acl FILE` serves in ACL mode, and
//! `produce`/`consume` with `--access-key`/`--secret-key` (or the environment) work, while
//! without them, or with a wrong secret, they end at once with exit status 1 and an error that
//! names the access key and what was refused — and never print the secret.

mod common;

use std::process::{Output, Stdio};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_rocketmq-actor");

const ACL: &str = r#"
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: ["Orders=PUB"]
  - accessKey: consumer1
    secretKey: consumer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: ["Orders=SUB"]
    groupPerms: ["billing=SUB"]
"#;

/// A file of its own in the temporary directory.
fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rocketmq-actor-cli-acl-{}-{}",
        std::process::id(),
        common::now_ms()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("file written");
    path
}

/// `broker --acl FILE` on an ephemeral port, and the name-server address it printed.
async fn secured_broker() -> (Child, String) {
    let acl = temp_file("plain_acl.yml", ACL);
    let mut child = Command::new(BIN)
        .args([
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--topic",
            "Orders:2",
            "--acl",
        ])
        .arg(&acl)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the broker runs");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let addr = tokio::time::timeout(common::PATIENCE, lines.next_line())
        .await
        .expect("the broker prints its address")
        .expect("stdout readable")
        .expect("an address line");
    (child, addr)
}

async fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("ROCKETMQ_ACCESS_KEY")
        .env_remove("ROCKETMQ_SECRET_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command.spawn().expect("the command runs");
    tokio::time::timeout(common::PATIENCE, child.wait_with_output())
        .await
        .expect("the command ends by itself")
        .expect("the command runs")
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn assert_refused(output: &Output, expected: &str, secret: Option<&str>) {
    let (stdout, stderr) = text(output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "stdout {stdout}\nstderr {stderr}"
    );
    assert!(stderr.contains("access denied"), "{stderr}");
    assert!(stderr.contains(expected), "{stderr}");
    assert!(
        stderr.contains("--access-key"),
        "the error says what to check: {stderr}"
    );
    if let Some(secret) = secret {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{stdout}{stderr}"
        );
    }
}

#[actix_rt::test]
async fn produce_and_consume_against_an_acl_broker_with_and_without_keys() {
    let (mut broker, namesrv) = secured_broker().await;
    let connect = ["--namesrv", namesrv.as_str()];
    let produce = |extra: &[&'static str]| {
        let mut args = vec!["produce", "--topic", "Orders", "--count", "20"];
        args.extend_from_slice(&connect);
        args.extend_from_slice(extra);
        args
    };
    let consume = |extra: &[&'static str]| {
        let mut args = vec![
            "consume", "--topic", "Orders", "--group", "billing", "--from", "first", "--count",
            "20",
        ];
        args.extend_from_slice(&connect);
        args.extend_from_slice(extra);
        args
    };

    let unsigned = run(&produce(&[]), &[]).await;
    assert_refused(&unsigned, "no AccessKey in the request", None);
    let wrong = run(
        &produce(&[]),
        &[
            ("ROCKETMQ_ACCESS_KEY", "producer1"),
            ("ROCKETMQ_SECRET_KEY", "not-the-secret"),
        ],
    )
    .await;
    assert_refused(
        &wrong,
        "signature check failed for accessKey=producer1",
        Some("not-the-secret"),
    );
    let no_pub = run(
        &produce(&[
            "--access-key",
            "consumer1",
            "--secret-key",
            "consumer-secret",
        ]),
        &[],
    )
    .await;
    assert_refused(
        &no_pub,
        "accessKey=consumer1 has no PUB permission on topic:Orders",
        Some("consumer-secret"),
    );
    let sent = run(
        &produce(&[
            "--access-key",
            "producer1",
            "--secret-key",
            "producer-secret",
        ]),
        &[],
    )
    .await;
    let (stdout, stderr) = text(&sent);
    assert_eq!(sent.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("\"count\":20"), "{stdout}");

    let unsigned = run(&consume(&[]), &[]).await;
    assert_refused(&unsigned, "no AccessKey in the request", None);
    let wrong = run(
        &consume(&[
            "--access-key",
            "consumer1",
            "--secret-key",
            "not-the-secret",
        ]),
        &[],
    )
    .await;
    assert_refused(
        &wrong,
        "signature check failed for accessKey=consumer1",
        Some("not-the-secret"),
    );
    let other_group = run(
        &[
            "consume",
            "--topic",
            "Orders",
            "--group",
            "others",
            "--count",
            "1",
            "--namesrv",
            &namesrv,
            "--mode",
            "lite",
        ],
        &[
            ("ROCKETMQ_ACCESS_KEY", "consumer1"),
            ("ROCKETMQ_SECRET_KEY", "consumer-secret"),
        ],
    )
    .await;
    assert_refused(
        &other_group,
        "accessKey=consumer1 has no SUB permission on group:others",
        Some("consumer-secret"),
    );
    let consumed = run(
        &consume(&[]),
        &[
            ("ROCKETMQ_ACCESS_KEY", "consumer1"),
            ("ROCKETMQ_SECRET_KEY", "consumer-secret"),
        ],
    )
    .await;
    let (stdout, stderr) = text(&consumed);
    assert_eq!(consumed.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("\"count\":20"), "the summary: {stderr}");
    assert!(!stdout.contains("consumer-secret") && !stderr.contains("consumer-secret"));

    broker.start_kill().expect("broker stopped");
    let _ = broker.wait().await;
}

#[actix_rt::test]
async fn a_bad_acl_file_or_half_a_key_pair_is_refused_and_help_hides_the_secret() {
    let bad = temp_file(
        "bad.yml",
        "accounts:\n  - accessKey: short\n    secretKey: x\n",
    );
    let output = run(
        &[
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--acl",
            bad.to_str().expect("utf-8 path"),
        ],
        &[],
    )
    .await;
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("invalid ACL file: accessKey=short: accessKey must be longer than 6"),
        "{stderr}"
    );
    let missing = run(&["broker", "--acl", "/nonexistent/plain_acl.yml"], &[]).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing)
        .1
        .contains("cannot read ACL file /nonexistent/plain_acl.yml"));

    let half = run(
        &[
            "produce",
            "--namesrv",
            "127.0.0.1:1",
            "--topic",
            "T",
            "--count",
            "1",
            "--access-key",
            "ak12345",
        ],
        &[],
    )
    .await;
    assert_eq!(half.status.code(), Some(2), "{}", text(&half).1);

    let help = run(
        &["produce", "--help"],
        &[("ROCKETMQ_SECRET_KEY", "hidden-secret-value")],
    )
    .await;
    let (stdout, _) = text(&help);
    assert!(stdout.contains("--secret-key"), "{stdout}");
    assert!(!stdout.contains("hidden-secret-value"), "{stdout}");
}
