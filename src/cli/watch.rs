//! Where a consuming group stands on its topic: the end offset of every queue against the
//! group's position there. Ends `consume --exit-at-end` once every queue caught up, and draws
//! the live progress line (count, rate, lag) on a terminal.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::time::{Duration, Instant};

use rocketmq_actor::pull::{LitePullConsumer, PullConsumer};
use rocketmq_actor::{Client, MessageQueue};

use super::consume::StartAt;

/// Where the consumer's own position of a queue comes from.
pub enum Progress<'a> {
    /// The offsets the broker holds for the group (a push consumer persists them every
    /// `persist_consumer_offset_interval`).
    Broker,
    /// A lite pull consumer's committed offsets.
    Lite(&'a LitePullConsumer),
    /// A pull consumer's offsets in memory (set after every pull of a schedule task).
    Schedule(&'a PullConsumer),
}

/// Where each queue starts, as the consumer will see it: the group's committed offset, else
/// the `--from` position — 0 while the queue still begins at offset 0, since a broker then
/// answers a new group's offset query with 0 (Java's broker does while that message is in
/// memory) and the consumer reads from there. Never past where the consumer really starts, so
/// a queue is never taken for caught up too early. Queues whose offsets cannot be read are left
/// out.
pub async fn baseline(
    client: &Client,
    group: &str,
    queues: &[MessageQueue],
    from: StartAt,
) -> HashMap<MessageQueue, i64> {
    let starts = futures::future::join_all(queues.iter().map(|queue| async move {
        if let Some(committed) = client.query_consumer_offset(group, queue).await.ok()? {
            return Some((queue.clone(), committed));
        }
        let min = client.min_offset(queue).await.ok()?;
        let start = match from {
            _ if min <= 0 => 0,
            StartAt::First => min,
            StartAt::Last => client.max_offset(queue).await.ok()?,
            StartAt::Timestamp(ms) => client.search_offset(queue, ms).await.ok()?,
        };
        Some((queue.clone(), start))
    }))
    .await;
    starts.into_iter().flatten().collect()
}

/// The live progress line on stderr (a terminal): count, rate and lag, redrawn about once a
/// second in place.
pub struct ProgressLine {
    drawn_at: Option<Instant>,
    count_then: u64,
}

impl ProgressLine {
    /// A line not drawn yet.
    pub fn new() -> Self {
        ProgressLine {
            drawn_at: None,
            count_then: 0,
        }
    }

    /// Redraws the line when a second has passed since the last time (or it was never drawn).
    pub fn update(&mut self, count: u64, lag: Option<i64>) {
        let now = Instant::now();
        let rate = match self.drawn_at {
            Some(then) if now - then < Duration::from_millis(950) => return,
            Some(then) => count.saturating_sub(self.count_then) as f64 / (now - then).as_secs_f64(),
            None => 0.0,
        };
        let lag = lag.map_or_else(|| "?".to_owned(), |lag| lag.to_string());
        let mut err = std::io::stderr().lock();
        // "\x1b[K" erases what a longer earlier line left to the right.
        let _ = write!(err, "\r{count} messages  {rate:.0} msg/s  lag {lag}\x1b[K");
        let _ = err.flush();
        self.drawn_at = Some(now);
        self.count_then = count;
    }

    /// Erases the line.
    pub fn clear(&mut self) {
        if self.drawn_at.take().is_some() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

/// Measures the group's position on its topic every round: for `--exit-at-end` (every queue
/// latched once its position reached the end offset of that moment) and for the progress line.
pub struct Watcher<'a, C, P>
where
    C: Fn() -> u64,
    P: Fn(&MessageQueue) -> Option<i64>,
{
    /// The client asking the brokers.
    pub client: &'a Client,
    /// The consumer group.
    pub group: &'a str,
    /// The topic.
    pub topic: &'a str,
    /// Each queue's start ([`baseline`]).
    pub baseline: HashMap<MessageQueue, i64>,
    /// Messages counted so far.
    pub counted: C,
    /// The offset after the last message of a queue this process consumed, if any.
    pub consumed: P,
    /// Return once every queue caught up.
    pub exit_at_end: bool,
    /// Whether the positions mean anything for the lag (not for a broadcasting consumer, whose
    /// offsets stay on its host).
    pub lag: bool,
    /// The progress line, on a terminal.
    pub line: Option<ProgressLine>,
}

impl<C, P> Watcher<'_, C, P>
where
    C: Fn() -> u64,
    P: Fn(&MessageQueue) -> Option<i64>,
{
    /// Runs until every queue of the topic caught up (with `exit_at_end`; otherwise forever).
    pub async fn run(&mut self, progress: Progress<'_>) {
        let interval = if self.exit_at_end {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(1)
        };
        let mut reached: BTreeSet<MessageQueue> = BTreeSet::new();
        let mut lag = None;
        loop {
            if let Some((queues, positions)) = self.measure(&progress).await {
                let mut total = Some(0i64);
                for (queue, measured) in &positions {
                    match measured {
                        Some((end, position)) => {
                            if position >= end {
                                reached.insert(queue.clone());
                            }
                            total = total.map(|t| t + (end - position).max(0));
                        }
                        None => total = None,
                    }
                }
                if total.is_some() {
                    lag = total;
                }
                if self.exit_at_end && queues.iter().all(|q| reached.contains(q)) {
                    return;
                }
            }
            if let Some(line) = self.line.as_mut() {
                line.update((self.counted)(), if self.lag { lag } else { None });
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// Every queue of the topic with its end offset and the group's position there (`None`
    /// when a broker did not answer); `None` when the route is not known.
    #[allow(clippy::type_complexity)]
    async fn measure(
        &self,
        progress: &Progress<'_>,
    ) -> Option<(Vec<MessageQueue>, Vec<(MessageQueue, Option<(i64, i64)>)>)> {
        let route = self.client.route(self.topic).await.ok()?;
        let queues = route.consume_queues.clone();
        let positions = futures::future::join_all(queues.iter().map(|queue| async move {
            let measured = async {
                let end = self.client.max_offset(queue).await.ok()?;
                let committed = match progress {
                    Progress::Broker => self.client.query_consumer_offset(self.group, queue).await,
                    Progress::Lite(consumer) => consumer.committed(queue).await,
                    Progress::Schedule(consumer) => {
                        consumer.fetch_consume_offset(queue, false).await
                    }
                }
                .ok()?;
                let position = [
                    self.baseline.get(queue).copied(),
                    committed,
                    (self.consumed)(queue),
                ]
                .into_iter()
                .flatten()
                .max()
                .unwrap_or(0);
                Some((end, position))
            };
            (queue.clone(), measured.await)
        }))
        .await;
        Some((queues, positions))
    }

    /// Erases the progress line, if drawn.
    pub fn finish(&mut self) {
        if let Some(line) = self.line.as_mut() {
            line.clear();
        }
    }
}
