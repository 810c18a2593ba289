//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, and an optional Prometheus
//! exporter (feature `prometheus`).
//!
//! Every consumer and connection reports what Java's `ConsumerStatsManager` reports — pull TPS
//! and round trip, consume OK/failed TPS and round trip — and what an operator watches beside
//! it: messages and bytes cached per queue, lag per queue, rebalances, retries, dead-letter
//! sends, reconnects. The figures go to whatever `metrics` recorder the application installs
//! (Prometheus, StatsD, OpenTelemetry, …); with none installed they cost a branch each.
//!
//! Install the recorder **before** starting clients and consumers: they take their metric
//! handles when they start, and handles taken with no recorder stay silent.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `rocketmq_consumer_pulls_total` | counter | `group` | pull requests answered |
//! | `rocketmq_consumer_pulled_messages_total` | counter | `group` | messages received (after the tag re-filter) |
//! | `rocketmq_consumer_pull_rt_seconds` | histogram | `group` | pull round trip, long polls included |
//! | `rocketmq_consumer_consumed_messages_total` | counter | `group`, `status` (`ok`/`failed`) | listener outcomes |
//! | `rocketmq_consumer_consume_rt_seconds` | histogram | `group` | listener call time |
//! | `rocketmq_consumer_sent_back_messages_total` | counter | `group` | failed messages handed back for a retry |
//! | `rocketmq_consumer_dead_lettered_messages_total` | counter | `group` | messages sent to the dead-letter queue (retries used up) |
//! | `rocketmq_consumer_rebalances_total` | counter | `group` | rebalance rounds |
//! | `rocketmq_consumer_owned_queues` | gauge | `group` | queues owned now |
//! | `rocketmq_consumer_queue_restarts_total` | counter | `group` | queue actors restarted by their supervisor |
//! | `rocketmq_consumer_cached_messages` | gauge | `group`, `topic`, `broker`, `queue` | messages pulled and not yet consumed |
//! | `rocketmq_consumer_cached_bytes` | gauge | `group`, `topic`, `broker`, `queue` | their body bytes |
//! | `rocketmq_consumer_lag_messages` | gauge | `group`, `topic`, `broker`, `queue` | broker max offset (as of the last pull) − committed offset |
//! | `rocketmq_client_reconnects_total` | counter | `peer` | connections re-established after a drop |
//! | `rocketmq_client_disconnects_total` | counter | `peer` | connections lost |
//! | `rocketmq_producer_sent_messages_total` | counter | `broker`, `status` (`ok`/`failed`) | messages of each send attempt, by outcome (a failed attempt retried elsewhere counts once as failed) |
//! | `rocketmq_producer_send_rt_seconds` | histogram | `broker` | time of each send attempt, from the request to the broker's answer |
//!
//! A queue this consumer no longer owns has its gauges set to 0. [`PrometheusExporter`]
//! serves the `_seconds` metrics as Prometheus histograms (buckets [`RT_BUCKETS`]) and every
//! metric with its `# HELP` line ([`describe`]).
//!
//! ```no_run
//! # #[cfg(feature = "prometheus")]
//! # async fn demo() -> rocketmq_actor::Result<()> {
//! use rocketmq_actor::metrics::PrometheusExporter;
//! // Serves Prometheus text at http://127.0.0.1:9464/metrics until dropped.
//! let exporter = PrometheusExporter::serve("127.0.0.1:9464".parse().unwrap()).await?;
//! println!("metrics at http://{}/metrics", exporter.local_addr());
//! // ... start consumers after this ...
//! # Ok(()) }
//! ```

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};

use crate::message::MessageQueue;

/// The buckets (seconds) of the round-trip histograms: 0.5 ms to 60 s, long polls included.
pub const RT_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Tells the installed `metrics` recorder what each metric is (its unit and the text of its
/// Prometheus `# HELP` line). [`PrometheusExporter::serve`] calls it; with another recorder,
/// call it once after installing the recorder.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        names::PULLS,
        Unit::Count,
        "Pull requests answered by a broker."
    );
    describe_counter!(
        names::PULLED_MESSAGES,
        Unit::Count,
        "Messages received by pulls (after the tag re-filter)."
    );
    describe_histogram!(
        names::PULL_RT,
        Unit::Seconds,
        "Pull round trip, long polls included."
    );
    describe_counter!(
        names::CONSUMED_MESSAGES,
        Unit::Count,
        "Messages through the listener, by status (ok or failed)."
    );
    describe_histogram!(names::CONSUME_RT, Unit::Seconds, "Listener call time.");
    describe_counter!(
        names::SENT_BACK_MESSAGES,
        Unit::Count,
        "Failed messages handed back to the broker for a retry."
    );
    describe_counter!(
        names::DEAD_LETTERED_MESSAGES,
        Unit::Count,
        "Messages sent to the dead-letter queue (retries used up)."
    );
    describe_counter!(names::REBALANCES, Unit::Count, "Rebalance rounds.");
    describe_gauge!(
        names::OWNED_QUEUES,
        Unit::Count,
        "Queues the consumer owns now."
    );
    describe_counter!(
        names::QUEUE_RESTARTS,
        Unit::Count,
        "Queue actors restarted by their supervisor."
    );
    describe_gauge!(
        names::CACHED_MESSAGES,
        Unit::Count,
        "Messages pulled and not yet consumed, per queue."
    );
    describe_gauge!(
        names::CACHED_BYTES,
        Unit::Bytes,
        "Body bytes of the messages pulled and not yet consumed, per queue."
    );
    describe_gauge!(
        names::LAG_MESSAGES,
        Unit::Count,
        "Broker max offset (as of the last pull) minus the committed offset, per queue."
    );
    describe_counter!(
        names::RECONNECTS,
        Unit::Count,
        "Connections re-established after a drop."
    );
    describe_counter!(names::DISCONNECTS, Unit::Count, "Connections lost.");
    describe_counter!(
        names::SENT_MESSAGES,
        Unit::Count,
        "Messages of each send attempt, by broker and status (ok or failed)."
    );
    describe_histogram!(
        names::SEND_RT,
        Unit::Seconds,
        "Time of each send attempt, from the request to the broker's answer."
    );
}

/// The metric names (see the [module](self) table).
pub mod names {
    /// Pull requests answered.
    pub const PULLS: &str = "rocketmq_consumer_pulls_total";
    /// Messages received.
    pub const PULLED_MESSAGES: &str = "rocketmq_consumer_pulled_messages_total";
    /// Pull round trip.
    pub const PULL_RT: &str = "rocketmq_consumer_pull_rt_seconds";
    /// Listener outcomes, by `status`.
    pub const CONSUMED_MESSAGES: &str = "rocketmq_consumer_consumed_messages_total";
    /// Listener call time.
    pub const CONSUME_RT: &str = "rocketmq_consumer_consume_rt_seconds";
    /// Failed messages handed back for a retry.
    pub const SENT_BACK_MESSAGES: &str = "rocketmq_consumer_sent_back_messages_total";
    /// Messages sent to the dead-letter queue.
    pub const DEAD_LETTERED_MESSAGES: &str = "rocketmq_consumer_dead_lettered_messages_total";
    /// Rebalance rounds.
    pub const REBALANCES: &str = "rocketmq_consumer_rebalances_total";
    /// Queues owned now.
    pub const OWNED_QUEUES: &str = "rocketmq_consumer_owned_queues";
    /// Queue actors restarted.
    pub const QUEUE_RESTARTS: &str = "rocketmq_consumer_queue_restarts_total";
    /// Messages cached per queue.
    pub const CACHED_MESSAGES: &str = "rocketmq_consumer_cached_messages";
    /// Bytes cached per queue.
    pub const CACHED_BYTES: &str = "rocketmq_consumer_cached_bytes";
    /// Lag per queue.
    pub const LAG_MESSAGES: &str = "rocketmq_consumer_lag_messages";
    /// Connections re-established.
    pub const RECONNECTS: &str = "rocketmq_client_reconnects_total";
    /// Connections lost.
    pub const DISCONNECTS: &str = "rocketmq_client_disconnects_total";
    /// Messages of each send attempt, by `broker` and `status`.
    pub const SENT_MESSAGES: &str = "rocketmq_producer_sent_messages_total";
    /// Time of each send attempt, by `broker`.
    pub const SEND_RT: &str = "rocketmq_producer_send_rt_seconds";
}

/// One consumer's handles, taken once at start (a lookup per event would cost a hash of the
/// labels each time).
#[derive(Clone)]
pub(crate) struct ConsumerMetrics {
    group: String,
    pulls: Counter,
    pulled: Counter,
    pull_rt: Histogram,
    consumed_ok: Counter,
    consumed_failed: Counter,
    consume_rt: Histogram,
    sent_back: Counter,
    dead_lettered: Counter,
    rebalances: Counter,
    owned_queues: Gauge,
    queue_restarts: Counter,
}

impl ConsumerMetrics {
    pub(crate) fn new(group: &str) -> Self {
        let g = group.to_owned();
        ConsumerMetrics {
            pulls: metrics::counter!(names::PULLS, "group" => g.clone()),
            pulled: metrics::counter!(names::PULLED_MESSAGES, "group" => g.clone()),
            pull_rt: metrics::histogram!(names::PULL_RT, "group" => g.clone()),
            consumed_ok: metrics::counter!(names::CONSUMED_MESSAGES, "group" => g.clone(), "status" => "ok"),
            consumed_failed: metrics::counter!(names::CONSUMED_MESSAGES, "group" => g.clone(), "status" => "failed"),
            consume_rt: metrics::histogram!(names::CONSUME_RT, "group" => g.clone()),
            sent_back: metrics::counter!(names::SENT_BACK_MESSAGES, "group" => g.clone()),
            dead_lettered: metrics::counter!(names::DEAD_LETTERED_MESSAGES, "group" => g.clone()),
            rebalances: metrics::counter!(names::REBALANCES, "group" => g.clone()),
            owned_queues: metrics::gauge!(names::OWNED_QUEUES, "group" => g.clone()),
            queue_restarts: metrics::counter!(names::QUEUE_RESTARTS, "group" => g.clone()),
            group: g,
        }
    }

    pub(crate) fn pull(&self, rt: Duration) {
        self.pulls.increment(1);
        self.pull_rt.record(rt.as_secs_f64());
    }

    pub(crate) fn pulled(&self, count: usize) {
        self.pulled.increment(count as u64);
    }

    /// `calls` listener calls that took `rt` each, with `ok` and `failed` messages in all.
    pub(crate) fn consumed_calls(&self, ok: usize, failed: usize, calls: usize, rt: Duration) {
        if ok > 0 {
            self.consumed_ok.increment(ok as u64);
        }
        if failed > 0 {
            self.consumed_failed.increment(failed as u64);
        }
        let seconds = rt.as_secs_f64();
        for _ in 0..calls {
            self.consume_rt.record(seconds);
        }
    }

    pub(crate) fn sent_back(&self, count: usize) {
        self.sent_back.increment(count as u64);
    }

    pub(crate) fn dead_lettered(&self, count: usize) {
        self.dead_lettered.increment(count as u64);
    }

    pub(crate) fn rebalanced(&self, owned_queues: usize) {
        self.rebalances.increment(1);
        self.owned_queues.set(owned_queues as f64);
    }

    pub(crate) fn queue_restarted(&self) {
        self.queue_restarts.increment(1);
    }

    /// The gauges of one owned queue.
    pub(crate) fn queue(&self, queue: &MessageQueue) -> QueueMetrics {
        let labels = [
            ("group", self.group.clone()),
            ("topic", queue.topic.clone()),
            ("broker", queue.broker_name.clone()),
            ("queue", queue.queue_id.to_string()),
        ];
        QueueMetrics {
            cached_messages: metrics::gauge!(names::CACHED_MESSAGES, &labels),
            cached_bytes: metrics::gauge!(names::CACHED_BYTES, &labels),
            lag: metrics::gauge!(names::LAG_MESSAGES, &labels),
        }
    }
}

/// One queue's gauges.
pub(crate) struct QueueMetrics {
    cached_messages: Gauge,
    cached_bytes: Gauge,
    lag: Gauge,
}

impl QueueMetrics {
    pub(crate) fn cache(&self, messages: u64, bytes: u64) {
        self.cached_messages.set(messages as f64);
        self.cached_bytes.set(bytes as f64);
    }

    pub(crate) fn lag(&self, lag: i64) {
        self.lag.set(lag.max(0) as f64);
    }

    /// The queue is no longer owned here.
    pub(crate) fn clear(&self) {
        self.cache(0, 0);
        self.lag(0);
    }
}

/// One connection's handles.
pub(crate) struct ConnectionMetrics {
    reconnects: Counter,
    disconnects: Counter,
}

impl ConnectionMetrics {
    pub(crate) fn new(peer: &str) -> Self {
        ConnectionMetrics {
            reconnects: metrics::counter!(names::RECONNECTS, "peer" => peer.to_owned()),
            disconnects: metrics::counter!(names::DISCONNECTS, "peer" => peer.to_owned()),
        }
    }

    pub(crate) fn reconnected(&self) {
        self.reconnects.increment(1);
    }

    pub(crate) fn disconnected(&self) {
        self.disconnects.increment(1);
    }
}

/// A producer's handles per broker, taken at the first send to that broker (a lookup per send
/// with labels would hash them each time).
#[derive(Default)]
pub(crate) struct ProducerMetrics {
    brokers: std::sync::RwLock<foldhash::HashMap<String, BrokerSendMetrics>>,
}

/// One broker's send handles.
struct BrokerSendMetrics {
    ok: Counter,
    failed: Counter,
    rt: Histogram,
}

impl BrokerSendMetrics {
    fn new(broker: &str) -> Self {
        let b = broker.to_owned();
        BrokerSendMetrics {
            ok: metrics::counter!(names::SENT_MESSAGES, "broker" => b.clone(), "status" => "ok"),
            failed: metrics::counter!(names::SENT_MESSAGES, "broker" => b.clone(), "status" => "failed"),
            rt: metrics::histogram!(names::SEND_RT, "broker" => b),
        }
    }
}

impl ProducerMetrics {
    /// A send attempt of `messages` to `broker` ended after `rt`.
    pub(crate) fn attempt(&self, broker: &str, messages: usize, ok: bool, rt: Duration) {
        let record = |handles: &BrokerSendMetrics| {
            let outcome = if ok { &handles.ok } else { &handles.failed };
            outcome.increment(messages as u64);
            handles.rt.record(rt.as_secs_f64());
        };
        if let Some(handles) = self
            .brokers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(broker)
        {
            return record(handles);
        }
        let mut brokers = self.brokers.write().unwrap_or_else(|e| e.into_inner());
        record(
            brokers
                .entry(broker.to_owned())
                .or_insert_with(|| BrokerSendMetrics::new(broker)),
        );
    }
}

#[cfg(feature = "prometheus")]
pub use prometheus::PrometheusExporter;

#[cfg(feature = "prometheus")]
mod prometheus {
    use std::net::SocketAddr;
    use std::time::Duration;

    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use crate::error::{Error, Result};

    /// How long a scraper may take to send its request.
    const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(5);
    /// Requests longer than this are refused (a scrape request is a few hundred bytes).
    const MAX_REQUEST_BYTES: usize = 16 * 1024;
    /// How often the recorder drains its histograms' buffers.
    const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

    /// The process's Prometheus exporter: installs itself as the global `metrics` recorder and
    /// serves the text format at `GET /metrics` on a TCP address until dropped.
    ///
    /// ```no_run
    /// # async fn demo() -> rocketmq_actor::Result<()> {
    /// use rocketmq_actor::metrics::PrometheusExporter;
    /// let exporter = PrometheusExporter::serve("0.0.0.0:9464".parse().unwrap()).await?;
    /// assert!(exporter.render().is_empty() || exporter.render().contains("# TYPE"));
    /// # Ok(()) }
    /// ```
    pub struct PrometheusExporter {
        handle: PrometheusHandle,
        local_addr: SocketAddr,
        server: tokio::task::JoinHandle<()>,
    }

    impl PrometheusExporter {
        /// Installs the recorder and listens on `addr` (port 0 picks a free port; see
        /// [`Self::local_addr`]). Fails if another `metrics` recorder is installed already, or
        /// the address cannot be bound. Call it from within a Tokio runtime (an actix system
        /// is one) and before starting consumers.
        pub async fn serve(addr: SocketAddr) -> Result<PrometheusExporter> {
            let listener = TcpListener::bind(addr).await.map_err(|e| Error::Listen {
                addr: addr.to_string(),
                source: e,
            })?;
            let local_addr = listener.local_addr()?;
            let recorder_error = |e: metrics_exporter_prometheus::BuildError| Error::Config {
                option: "metrics recorder",
                value: "Prometheus exporter".into(),
                allowed: format!("one recorder per process ({e})"),
            };
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), super::RT_BUCKETS)
                .map_err(recorder_error)?
                .install_recorder()
                .map_err(recorder_error)?;
            super::describe();
            let server = tokio::spawn(serve_scrapes(listener, handle.clone()));
            Ok(PrometheusExporter {
                handle,
                local_addr,
                server,
            })
        }

        /// The address scrapers connect to.
        pub fn local_addr(&self) -> SocketAddr {
            self.local_addr
        }

        /// The text a scrape gets now.
        pub fn render(&self) -> String {
            self.handle.render()
        }
    }

    impl Drop for PrometheusExporter {
        fn drop(&mut self) {
            self.server.abort();
        }
    }

    async fn serve_scrapes(listener: TcpListener, handle: PrometheusHandle) {
        let mut upkeep = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        tokio::spawn(answer(stream, handle.clone()));
                    }
                    Err(e) => {
                        // Out of descriptors, say: wait rather than spin.
                        tracing::warn!(error = %e, "metrics exporter cannot accept; retrying in 1 s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                },
                _ = upkeep.tick() => handle.run_upkeep(),
            }
        }
    }

    /// Answers one HTTP/1.x request and closes the connection.
    async fn answer(mut stream: TcpStream, handle: PrometheusHandle) {
        let mut request = Vec::with_capacity(512);
        let read = tokio::time::timeout(REQUEST_READ_TIMEOUT, async {
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
                if request.len() > MAX_REQUEST_BYTES {
                    break;
                }
            }
            Ok::<(), std::io::Error>(())
        })
        .await;
        if !matches!(read, Ok(Ok(()))) {
            return;
        }
        let (status, content_type, body) = match request_target(&request) {
            Some(("GET", "/metrics")) => (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                handle.render(),
            ),
            Some(("GET", _)) => (
                "404 Not Found",
                "text/plain; charset=utf-8",
                "metrics are at /metrics\n".to_owned(),
            ),
            Some(_) => (
                "405 Method Not Allowed",
                "text/plain; charset=utf-8",
                "only GET\n".to_owned(),
            ),
            None => (
                "400 Bad Request",
                "text/plain; charset=utf-8",
                "not an HTTP request\n".to_owned(),
            ),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let written = async {
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
            stream.shutdown().await
        };
        if let Err(e) = written.await {
            tracing::debug!(error = %e, "metrics scrape not answered");
        }
    }

    /// The method and path of an HTTP request line.
    fn request_target(request: &[u8]) -> Option<(&str, &str)> {
        let line_end = request.windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&request[..line_end]).ok()?;
        let mut parts = line.split(' ');
        let method = parts.next()?;
        let target = parts.next()?;
        let version = parts.next()?;
        if !version.starts_with("HTTP/1.") {
            return None;
        }
        // `/metrics?x=y` is `/metrics`.
        let path = target.split('?').next().unwrap_or(target);
        Some((method, path))
    }

    #[cfg(test)]
    mod tests {
        use super::request_target;

        #[test]
        fn request_lines_are_split_into_method_and_path() {
            assert_eq!(
                request_target(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
                Some(("GET", "/metrics"))
            );
            assert_eq!(
                request_target(b"GET /metrics?name=a HTTP/1.0\r\n\r\n"),
                Some(("GET", "/metrics"))
            );
            assert_eq!(request_target(b"GET /metrics\r\n\r\n"), None);
            assert_eq!(request_target(b"\x16\x03\x01 tls hello"), None);
        }
    }
}
