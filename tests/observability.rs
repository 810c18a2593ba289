//! What an operator sees of a running consumer: the Prometheus exporter scraped over HTTP, the
//! `lag()` figure, and the tracing spans that say whose every log line is.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::{cluster_with_topic, eventually, from_first_offset, producer, receive, send_numbered};
use rocketmq_actor::consumer::QueueLag;
use rocketmq_actor::metrics::PrometheusExporter;
use rocketmq_actor::ConsumeStatus;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` over a fresh connection; returns the status line and the body.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the exporter accepts");
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request written");
    let mut response = String::new();
    tokio::time::timeout(common::PATIENCE, stream.read_to_string(&mut response))
        .await
        .expect("the exporter answers and closes")
        .expect("the answer is text");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("an HTTP head and body");
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, body.to_owned())
}

/// The value of the sample whose line starts with `series` (name and labels as rendered).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(series))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

#[actix_rt::test]
async fn the_exporter_serves_consume_pull_lag_and_retry_figures_and_lag_reaches_zero() {
    // Installed before the consumer starts, as the module documents.
    let exporter = PrometheusExporter::serve("127.0.0.1:0".parse().unwrap())
        .await
        .expect("the exporter starts");
    let topic = "ObservedTopic";
    let group = "observed_group";
    let (cluster, namesrv) = cluster_with_topic(topic, 2).await;
    send_numbered(&producer(&cluster), topic, 0..40).await;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // Message 7 fails once: one failed outcome and one send-back, then it succeeds.
    let failed_once = Arc::new(Mutex::new(false));
    let consumer = from_first_offset(&namesrv, group, topic, "*")
        .configure(|c| c.max_reconsume_times = Some(3))
        .listener_fn(move |messages, ctx| {
            let mut status = ConsumeStatus::Success;
            for m in &messages {
                let body = common::text(m);
                let mut failed = failed_once.lock().unwrap();
                if body == common::body_of(7) && !*failed {
                    *failed = true;
                    status = ConsumeStatus::ReconsumeLater;
                } else {
                    let _ = tx.send(body);
                }
            }
            std::future::ready((status, ctx))
        })
        .start()
        .await
        .expect("consumer starts");
    receive(&mut rx, 40).await;

    // Everything consumed: the committed offsets reach the broker's max offsets.
    let lags = eventually("lag 0 on both queues", || {
        let consumer = &consumer;
        async move {
            let lags = consumer.lag().await;
            let original: Vec<&QueueLag> = lags.iter().filter(|l| l.queue.topic == topic).collect();
            (original.len() == 2 && original.iter().all(|l| l.lag == Some(0))).then_some(lags)
        }
    })
    .await;
    let sent: i64 = lags
        .iter()
        .filter(|l| l.queue.topic == topic)
        .map(|l| l.broker_offset.expect("broker answered"))
        .sum();
    assert_eq!(
        sent, 40,
        "the broker offsets of the topic add up to what was sent"
    );
    assert_eq!(QueueLag::total(&lags), 0);

    let (status, text) = http_get(exporter.local_addr(), "/metrics").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let ok = sample(
        &text,
        &format!("rocketmq_consumer_consumed_messages_total{{group=\"{group}\",status=\"ok\"}}"),
    );
    assert_eq!(ok, Some(40.0), "40 consumed OK in:\n{text}");
    let failed = sample(
        &text,
        &format!(
            "rocketmq_consumer_consumed_messages_total{{group=\"{group}\",status=\"failed\"}}"
        ),
    );
    assert_eq!(failed, Some(1.0), "one failed outcome in:\n{text}");
    let sent_back = sample(
        &text,
        &format!("rocketmq_consumer_sent_back_messages_total{{group=\"{group}\"}}"),
    );
    assert_eq!(sent_back, Some(1.0), "one send-back in:\n{text}");
    let pulls = sample(
        &text,
        &format!("rocketmq_consumer_pulls_total{{group=\"{group}\"}}"),
    )
    .expect("pulls counted");
    assert!(pulls >= 2.0, "at least one pull per queue: {pulls}");
    assert!(
        text.contains("# TYPE rocketmq_consumer_pull_rt_seconds histogram"),
        "pull round trips as a histogram:\n{text}"
    );
    let pull_count = sample(
        &text,
        &format!("rocketmq_consumer_pull_rt_seconds_count{{group=\"{group}\"}}"),
    );
    assert_eq!(pull_count, Some(pulls), "a round trip per pull:\n{text}");
    let longest_bucket = sample(
        &text,
        &format!("rocketmq_consumer_pull_rt_seconds_bucket{{group=\"{group}\",le=\"+Inf\"}}"),
    );
    assert_eq!(
        longest_bucket,
        Some(pulls),
        "every pull in the +Inf bucket:\n{text}"
    );
    for name in [
        "rocketmq_consumer_pulls_total",
        "rocketmq_consumer_lag_messages",
        "rocketmq_consumer_consume_rt_seconds",
        "rocketmq_producer_sent_messages_total",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("# HELP {name} ")) && l.len() > name.len() + 12),
            "a HELP line for {name}:\n{text}"
        );
    }
    // The producer that sent the 40 messages, all to broker-a (the recorder is the process's:
    // the other test of this binary sends a few too).
    let sent_ok = sample(
        &text,
        "rocketmq_producer_sent_messages_total{broker=\"broker-a\",status=\"ok\"}",
    )
    .expect("sends counted");
    assert!(sent_ok >= 40.0, "the 40 sends counted:\n{text}");
    let send_rts = sample(
        &text,
        "rocketmq_producer_send_rt_seconds_count{broker=\"broker-a\"}",
    );
    assert_eq!(
        send_rts,
        Some(sent_ok),
        "a send time per single-message attempt:\n{text}"
    );
    let lag_lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("rocketmq_consumer_lag_messages{")
                && l.contains(&format!("topic=\"{topic}\""))
        })
        .collect();
    assert_eq!(lag_lines.len(), 2, "a lag gauge per queue:\n{text}");
    let owned = sample(
        &text,
        &format!("rocketmq_consumer_owned_queues{{group=\"{group}\"}}"),
    );
    // Two queues of the topic and the group's retry queue.
    assert_eq!(owned, Some(3.0), "owned queues in:\n{text}");

    let (status, _) = http_get(exporter.local_addr(), "/other").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");

    // One recorder per process: a second exporter is refused with a clear error.
    let second = PrometheusExporter::serve("127.0.0.1:0".parse().unwrap()).await;
    let error = second
        .err()
        .expect("a second recorder is refused")
        .to_string();
    assert!(error.contains("one recorder per process"), "{error}");

    consumer.shutdown().await;
    cluster.shutdown().await;
}

/// The captured log output of this test binary.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[actix_rt::test]
async fn every_log_line_of_a_consumer_names_its_group_client_and_queue() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let topic = "SpannedTopic";
    let group = "spanned_group";
    let (cluster, namesrv) = cluster_with_topic(topic, 1).await;
    send_numbered(&producer(&cluster), topic, 0..3).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = from_first_offset(&namesrv, group, topic, "*")
        .listener_fn(move |messages, ctx| {
            for m in &messages {
                // The application's own line, inside the listener.
                tracing::info!(offset = m.queue_offset, "listener handled a message");
                let _ = tx.send(());
            }
            std::future::ready((ConsumeStatus::Success, ctx))
        })
        .start()
        .await
        .expect("consumer starts");
    receive(&mut rx, 3).await;
    let client_id = consumer.client_id().to_owned();
    consumer.shutdown().await;
    cluster.shutdown().await;

    let text = String::from_utf8(captured.0.lock().unwrap().clone()).expect("UTF-8 logs");
    let consumer_span = format!("consumer{{group={group} client={client_id}}}");
    let queue_span = format!("queue{{topic={topic} broker=broker-a id=0}}");
    let handled: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("listener handled a message"))
        .collect();
    assert_eq!(handled.len(), 3, "three listener lines in:\n{text}");
    for line in &handled {
        assert!(
            line.contains(&format!("{consumer_span}:{queue_span}")),
            "the listener's line names the consumer and the queue: {line}"
        );
    }
    // The subscriber is global: the other test of this file logs its own assignments into it
    // when the two run at once, so only this consumer's queues count here.
    let retry_topic = format!("%RETRY%{group}");
    let assigned: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("queue assigned"))
        .filter(|l| {
            l.contains(&format!("topic={topic},")) || l.contains(&format!("topic={retry_topic},"))
        })
        .collect();
    assert!(
        !assigned.is_empty(),
        "the rebalancer logs assignments:\n{text}"
    );
    for line in assigned {
        assert!(
            line.contains(&consumer_span),
            "the rebalancer's line names the consumer: {line}"
        );
    }
}
