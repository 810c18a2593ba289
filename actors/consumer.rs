//! The push consumer: its public handle and builder, and the consumer root actor.
//!
//! Actor tree of one consumer (see ARCHITECTURE.md):
//!
//! ```text
//! ConsumerRoot ── answers broker requests for the group (rebalance notices, offset resets,
//!  │               running info, consume-directly) and runs shutdown
//!  ├── Heartbeat       HEART_BEAT every 30 s, UNREGISTER_CLIENT at shutdown
//!  ├── Rebalancer ──▶ QueueActor × owned queues (each holds its ProcessQueue)
//!  ├── Puller          PULL_MESSAGE for every queue, pipelined per broker connection
//!  ├── ConsumeDispatcher  runs the listener, at most `consume_concurrency` calls at once
//!  └── OffsetStore     committed offsets, persisted every 5 s (broker or local file)
//! ```

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ops::AsyncFn;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tracing::Instrument;

use crate::actors::client::{Client, ClientConfig, RegisterConsumer, UnregisterConsumer};
use crate::actors::connection::ServerRequest;
use crate::actors::consume_pool::ConsumePool;
use crate::actors::heartbeat::{Heartbeat, HeartbeatSoon, SendHeartbeat, Unregister};
use crate::actors::listener::{
    AnyListener, AsyncFnListener, AsyncFnOrderlyListener, ConsumeContext, ConsumeDispatcher,
    ConsumeHooks, ConsumeMessages, ConsumeOrderly, FnListener, FnOrderlyListener, MessageListener,
    Messages, OrderlyListener, OwnedListener, OwnedOrderlyListener, RecipientListener,
    RecipientOrderlyListener, SyncFnListener, SyncFnOrderlyListener,
};
use crate::actors::offset_store::{OffsetBackend, OffsetStore, PersistAll};
use crate::actors::producer::{Producer, ProducerConfig};
use crate::actors::puller::Puller;
use crate::actors::queue::{GetQueueLag, GetQueueStatus, ResetQueueOffset};
use crate::actors::rebalancer::{DropAll, OwnedQueues, Rebalance, Rebalancer};
use crate::actors::runtime;
use crate::consumer::config::ConsumeMode;
use crate::consumer::config::{validate_topic_name, MessageModel, PushConsumerConfig};
use crate::consumer::flow::QueueThresholds;
use crate::consumer::offset::{default_offset_store_dir, local_offsets_path};
use crate::consumer::retry::{self, build_retry_message, SEND_BACK_TIMEOUT};
use crate::consumer::ConsumeStatus;
use crate::consumer::{OrderlyContext, OrderlyStatus};
use crate::error::{Error, Result};
use crate::filter::Selector;
use crate::hooks::{ConsumeHook, Hooks};
use crate::message::{decode_messages, MessageExt, MessageQueue};
use crate::metrics::ConsumerMetrics;
use crate::namespace::Namespace;
use crate::protocol::body::{
    encode_json, CMResult, ConsumeMessageDirectlyResult, ConsumeStatus as WireConsumeStatus,
    ConsumerRunningInfo, ProcessQueueInfo, ResetOffsetBody,
};
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::RemotingCommand;
use crate::rpc::Subscription;

pub(crate) use crate::actors::now_ms;

/// What happens to a consumer over its life, for an application that watches it
/// ([`PushConsumer::events`], [`PushConsumerBuilder::event_recipient`]).
///
/// ```no_run
/// # async fn demo(consumer: rocketmq_actor::PushConsumer) {
/// use futures::StreamExt;
/// use rocketmq_actor::consumer::ConsumerEvent;
/// let mut events = consumer.events();
/// while let Some(event) = events.next().await {
///     if let ConsumerEvent::Problem { topic, cause } = &event {
///         eprintln!("cannot consume {topic}: {cause}");
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsumerEvent {
    /// The consumer started (its first heartbeat and rebalance were sent).
    Started {
        /// The client id brokers know it by.
        client_id: String,
    },
    /// A rebalance gave this consumer these queues.
    QueuesAssigned(Vec<MessageQueue>),
    /// A rebalance took these queues away (each persisted its offset as it let go).
    QueuesRevoked(Vec<MessageQueue>),
    /// The connection to a broker the consumer heartbeats closed.
    Disconnected {
        /// The broker's address.
        broker: String,
        /// Why it closed.
        reason: String,
    },
    /// The connection to that broker is back; the consumer heartbeated it at once (a restarted
    /// broker forgets the group).
    Reconnected {
        /// The broker's address.
        broker: String,
    },
    /// A queue actor failed and was restarted from the queue's committed offset.
    QueueRestarted {
        /// The queue.
        queue: MessageQueue,
        /// Its restarts so far.
        restarts: u64,
        /// The backoff before it ran again.
        after: Duration,
    },
    /// A queue actor failed more often than the restart policy allows; the next rebalance pass
    /// starts the queue afresh.
    QueueGaveUp {
        /// The queue.
        queue: MessageQueue,
        /// Failures within the policy's window.
        failures: u32,
    },
    /// A subscribed topic cannot be consumed now (no route, the topic does not exist, a
    /// malformed answer, the name servers do not answer, the broker does not list this member
    /// yet). Retried; also in [`ConsumerStatus::problems`].
    Problem {
        /// The topic.
        topic: String,
        /// What went wrong, as the error says it.
        cause: String,
    },
    /// The problem of this topic is gone.
    ProblemCleared {
        /// The topic.
        topic: String,
    },
    /// The consumer stopped (after its offsets were persisted).
    Stopped,
}

impl Message for ConsumerEvent {
    type Result = ();
}

/// Where a consumer's events go: the application's recipients and the streams of
/// [`PushConsumer::events`].
pub(crate) struct EventSink {
    recipients: Vec<Recipient<ConsumerEvent>>,
    streams: tokio::sync::broadcast::Sender<ConsumerEvent>,
    /// The actors name queues and topics as on the wire; events name them as the application
    /// does.
    namespace: Namespace,
}

impl EventSink {
    fn new(recipients: Vec<Recipient<ConsumerEvent>>, namespace: Namespace) -> Self {
        EventSink {
            recipients,
            streams: tokio::sync::broadcast::channel(256).0,
            namespace,
        }
    }

    /// `event` with its queues and topics as the application names them.
    fn for_application(&self, event: ConsumerEvent) -> ConsumerEvent {
        let ns = &self.namespace;
        if ns.is_none() {
            return event;
        }
        let topic = |topic: String| ns.unwrap(&topic).into_owned();
        let queue = |queue: MessageQueue| ns.unwrap_queue(&queue).into_owned();
        match event {
            ConsumerEvent::QueuesAssigned(queues) => {
                ConsumerEvent::QueuesAssigned(ns.unwrap_queues(queues))
            }
            ConsumerEvent::QueuesRevoked(queues) => {
                ConsumerEvent::QueuesRevoked(ns.unwrap_queues(queues))
            }
            ConsumerEvent::QueueRestarted {
                queue: q,
                restarts,
                after,
            } => ConsumerEvent::QueueRestarted {
                queue: queue(q),
                restarts,
                after,
            },
            ConsumerEvent::QueueGaveUp { queue: q, failures } => ConsumerEvent::QueueGaveUp {
                queue: queue(q),
                failures,
            },
            ConsumerEvent::Problem { topic: t, cause } => ConsumerEvent::Problem {
                topic: topic(t),
                cause,
            },
            ConsumerEvent::ProblemCleared { topic: t } => {
                ConsumerEvent::ProblemCleared { topic: topic(t) }
            }
            other => other,
        }
    }

    pub(crate) fn emit(&self, event: ConsumerEvent) {
        let event = self.for_application(event);
        for recipient in &self.recipients {
            // Events are rare: a full mailbox of the application's actor drops one rather than
            // holding up the consumer.
            if recipient.try_send(event.clone()).is_err() {
                tracing::debug!(?event, "event recipient full or gone; event dropped");
            }
        }
        let _ = self.streams.send(event);
    }
}

/// A consumer's state as the application sees it ([`PushConsumer::status`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerStatus {
    /// Queues owned now.
    pub owned_queues: Vec<MessageQueue>,
    /// Topics that cannot be consumed now, with the cause (see [`ConsumerEvent::Problem`]).
    pub problems: BTreeMap<String, String>,
    /// Queue-actor restarts since start.
    pub queue_restarts: u64,
}

/// How far behind one owned queue is ([`PushConsumer::lag`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueLag {
    /// The queue.
    pub queue: MessageQueue,
    /// The broker's max offset now (the offset the next message will get); `None` when the
    /// broker did not answer.
    pub broker_offset: Option<i64>,
    /// The offset this consumer committed (everything below it is consumed); `None` before
    /// the queue's start offset is known.
    pub committed_offset: Option<i64>,
    /// `broker_offset − committed_offset` (never negative); `None` when either is unknown.
    pub lag: Option<i64>,
    /// Messages pulled and waiting for (or in) the listener.
    pub cached: u64,
}

impl QueueLag {
    /// The lag of every queue that has one, summed.
    ///
    /// ```
    /// use rocketmq_actor::consumer::QueueLag;
    /// assert_eq!(QueueLag::total(&[]), 0);
    /// ```
    pub fn total(lags: &[QueueLag]) -> i64 {
        lags.iter().filter_map(|l| l.lag).sum()
    }
}

/// Counters of one consumer (see [`PushConsumer::stats`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConsumerStats {
    /// Messages received from pulls (after the tag re-filter).
    pub pulled: u64,
    /// Pull requests answered.
    pub pulls: u64,
    /// Mean pull round trip, long polls included.
    pub pull_rt_mean: Duration,
    /// Messages the listener consumed successfully.
    pub consumed_ok: u64,
    /// Messages the listener failed (to be retried).
    pub consumed_failed: u64,
    /// Mean listener call time.
    pub consume_rt_mean: Duration,
    /// Failed messages handed back to the broker for redelivery.
    pub sent_back: u64,
    /// Queues owned now.
    pub owned_queues: usize,
}

/// The counters behind [`ConsumerStats`], mirrored to the `metrics` facade.
pub(crate) struct Stats {
    pub(crate) metrics: ConsumerMetrics,
    pulled: Cell<u64>,
    pulls: Cell<u64>,
    pull_rt_total: Cell<Duration>,
    consumed_ok: Cell<u64>,
    consumed_failed: Cell<u64>,
    consume_calls: Cell<u64>,
    consume_rt_total: Cell<Duration>,
    sent_back: Cell<u64>,
}

impl Stats {
    pub(crate) fn new(group: &str) -> Self {
        Stats {
            metrics: ConsumerMetrics::new(group),
            pulled: Cell::default(),
            pulls: Cell::default(),
            pull_rt_total: Cell::default(),
            consumed_ok: Cell::default(),
            consumed_failed: Cell::default(),
            consume_calls: Cell::default(),
            consume_rt_total: Cell::default(),
            sent_back: Cell::default(),
        }
    }

    pub(crate) fn record_pull(&self, rt: Duration) {
        self.metrics.pull(rt);
        self.pulls.set(self.pulls.get() + 1);
        self.pull_rt_total.set(self.pull_rt_total.get() + rt);
    }

    pub(crate) fn record_pulled(&self, count: usize) {
        self.metrics.pulled(count);
        self.pulled.set(self.pulled.get() + count as u64);
    }

    pub(crate) fn record_consumed(&self, ok: usize, failed: usize, rt: Duration) {
        self.record_consumed_calls(ok, failed, 1, rt);
    }

    /// [`Stats::record_consumed`] for `calls` calls that took `rt` each, with `ok` and
    /// `failed` messages in all.
    pub(crate) fn record_consumed_calls(
        &self,
        ok: usize,
        failed: usize,
        calls: usize,
        rt: Duration,
    ) {
        self.metrics.consumed_calls(ok, failed, calls, rt);
        self.consumed_ok.set(self.consumed_ok.get() + ok as u64);
        self.consumed_failed
            .set(self.consumed_failed.get() + failed as u64);
        self.consume_calls
            .set(self.consume_calls.get() + calls as u64);
        self.consume_rt_total.set(
            self.consume_rt_total.get()
                + rt.saturating_mul(u32::try_from(calls).unwrap_or(u32::MAX)),
        );
    }

    pub(crate) fn record_sent_back(&self, count: usize) {
        self.metrics.sent_back(count);
        self.sent_back.set(self.sent_back.get() + count as u64);
    }

    fn snapshot(&self, owned_queues: usize) -> ConsumerStats {
        let mean = |total: Duration, n: u64| {
            if n == 0 {
                Duration::ZERO
            } else {
                total / n.min(u64::from(u32::MAX)) as u32
            }
        };
        ConsumerStats {
            pulled: self.pulled.get(),
            pulls: self.pulls.get(),
            pull_rt_mean: mean(self.pull_rt_total.get(), self.pulls.get()),
            consumed_ok: self.consumed_ok.get(),
            consumed_failed: self.consumed_failed.get(),
            consume_rt_mean: mean(self.consume_rt_total.get(), self.consume_calls.get()),
            sent_back: self.sent_back.get(),
            owned_queues,
        }
    }
}

/// State every actor of one consumer reads. All of them live on the arbiter the consumer was
/// started on, so plain `Rc`/`Cell` suffice.
pub(crate) struct ConsumerShared {
    pub(crate) group: Arc<str>,
    pub(crate) config: PushConsumerConfig,
    pub(crate) client: Client,
    pub(crate) subscriptions: RefCell<BTreeMap<String, Arc<Subscription>>>,
    pub(crate) puller: Addr<Puller>,
    pub(crate) dispatcher: ConsumeDispatcher,
    pub(crate) offsets: Addr<OffsetStore>,
    pub(crate) retry_producer: Producer,
    pub(crate) paused: Cell<bool>,
    pub(crate) running: Cell<bool>,
    pub(crate) thresholds: Cell<QueueThresholds>,
    pub(crate) stats: Stats,
    /// `consumer{group, client}`: the parent span of every log line of this consumer's actors.
    pub(crate) span: tracing::Span,
    pub(crate) consume_timestamp_ms: i64,
    /// The heartbeat actor, for queues whose broker does not know the consumer (weak: the
    /// actor holds this struct).
    pub(crate) heartbeat: std::cell::OnceCell<actix::WeakAddr<Heartbeat>>,
    /// When each topic's route was last refreshed because a queue could not reach its broker.
    pub(crate) route_refreshes: RefCell<BTreeMap<String, std::time::Instant>>,
    /// Lifecycle events out.
    pub(crate) events: EventSink,
    /// Why each topic cannot be consumed now.
    pub(crate) problems: RefCell<BTreeMap<String, String>>,
    /// Queue-actor restarts since start.
    pub(crate) queue_restarts: Cell<u64>,
    /// Topics a broker refused this consumer for authentication or permission, with the
    /// first refusal: kept (and logged once) until a heartbeat or a pull goes through, so
    /// other passes that succeed do not clear them, and retries back off.
    pub(crate) access_problems: RefCell<BTreeMap<String, String>>,
    /// The namespace: `group`, `config` and `subscriptions` are its wire names; queues,
    /// topics and messages handed to the application are unwrapped with it.
    pub(crate) namespace: Namespace,
}

impl ConsumerShared {
    /// Records why `topic` cannot be consumed: logged at warn and sent as an event when the
    /// cause is new, so a consumer that sits idle says why once (not at every retry).
    pub(crate) fn note_problem(&self, topic: &str, cause: String) {
        let mut problems = self.problems.borrow_mut();
        if problems.get(topic) == Some(&cause) {
            return;
        }
        let _span = self.span.clone().entered();
        tracing::warn!(%topic, %cause, "cannot consume the topic now; retrying");
        problems.insert(topic.to_owned(), cause.clone());
        drop(problems);
        self.events.emit(ConsumerEvent::Problem {
            topic: topic.to_owned(),
            cause,
        });
    }

    /// A broker refused this consumer for authentication or permission on `topic`: noted
    /// (one warn line, a `Problem` event, `status().problems`) unless already noted, and kept
    /// until [`Self::clear_access_denied`].
    pub(crate) fn note_access_denied(&self, topic: &str, cause: String) {
        let mut problems = self.access_problems.borrow_mut();
        if problems.contains_key(topic) {
            return;
        }
        let _span = self.span.clone().entered();
        tracing::warn!(%topic, %cause, "access denied: the account may not consume the topic; retrying every 30 s");
        problems.insert(topic.to_owned(), cause.clone());
        drop(problems);
        self.events.emit(ConsumerEvent::Problem {
            topic: topic.to_owned(),
            cause,
        });
    }

    /// Whether a broker refused this consumer for authentication or permission (and nothing
    /// went through since).
    pub(crate) fn access_denied(&self) -> bool {
        !self.access_problems.borrow().is_empty()
    }

    /// A request that needs the access refused before went through: `topic`'s access problem
    /// (all, with `None`) is gone.
    pub(crate) fn clear_access_denied(&self, topic: Option<&str>) {
        let cleared: Vec<String> = {
            let mut problems = self.access_problems.borrow_mut();
            match topic {
                Some(topic) => problems
                    .remove_entry(topic)
                    .map(|(t, _)| t)
                    .into_iter()
                    .collect(),
                None => std::mem::take(&mut *problems).into_keys().collect(),
            }
        };
        for topic in cleared {
            let _span = self.span.clone().entered();
            tracing::info!(%topic, "access granted again");
            if !self.problems.borrow().contains_key(&topic) {
                self.events.emit(ConsumerEvent::ProblemCleared { topic });
            }
        }
    }

    /// `topic` can be consumed again.
    pub(crate) fn clear_problem(&self, topic: &str) {
        if self.problems.borrow_mut().remove(topic).is_some() {
            let _span = self.span.clone().entered();
            tracing::info!(%topic, "the topic can be consumed again");
            self.events.emit(ConsumerEvent::ProblemCleared {
                topic: topic.to_owned(),
            });
        }
    }

    /// Asks for a heartbeat now: a broker answered a pull with SUBSCRIPTION_NOT_EXIST (it
    /// restarted and forgot the group). Requests within a second make one heartbeat.
    /// Reads `topic`'s route again now, unless that was done within the last second: a queue
    /// could not reach its broker, which may have come back at another address.
    pub(crate) fn request_route_refresh(&self, topic: &str) {
        let now = std::time::Instant::now();
        {
            let mut refreshes = self.route_refreshes.borrow_mut();
            if refreshes
                .get(topic)
                .is_some_and(|at| now.duration_since(*at) < std::time::Duration::from_secs(1))
            {
                return;
            }
            refreshes.insert(topic.to_owned(), now);
        }
        let client = self.client.clone();
        let topic = topic.to_owned();
        actix::spawn(async move {
            if let Err(e) = client.refresh_route(&topic).await {
                tracing::debug!(%topic, error = %e, "route refresh after a broker failure failed");
            }
        });
    }

    pub(crate) fn request_heartbeat(&self) {
        if let Some(heartbeat) = self.heartbeat.get().and_then(actix::WeakAddr::upgrade) {
            heartbeat.do_send(HeartbeatSoon);
        }
    }

    pub(crate) fn subscription(&self, topic: &str) -> Option<Arc<Subscription>> {
        self.subscriptions.borrow().get(topic).cloned()
    }

    pub(crate) fn subscribed_topics(&self) -> Vec<String> {
        self.subscriptions.borrow().keys().cloned().collect()
    }

    /// Hands a failed message back for redelivery: CONSUMER_SEND_MSG_BACK to the broker it came
    /// from, or, if that fails, a plain send to `%RETRY%<group>`. Returns whether either worked.
    pub(crate) async fn send_back(
        &self,
        queue: &MessageQueue,
        message: &MessageExt,
        delay_level: i32,
    ) -> bool {
        let max_reconsume = self.config.max_reconsume_times_for_wire();
        // The listener saw the topic unwrapped; the broker needs the wire one back.
        let message = &*self.namespace.wire_message(message);
        let attempt = self.client.send_message_back(
            &self.group,
            queue,
            message,
            delay_level,
            max_reconsume,
            SEND_BACK_TIMEOUT,
        );
        // The broker moves a message whose retries are used up to the dead-letter queue (the
        // rule of Java's broker).
        let to_dlq = message.reconsume_times >= max_reconsume || delay_level < 0;
        let sent = match attempt.await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(queue = %queue, offset = message.queue_offset, error = %e, "send-back failed; sending to the retry topic");
                let retry = build_retry_message(message, &self.group, max_reconsume);
                match self.retry_producer.send(retry).await {
                    Ok(_) => true,
                    Err(e) => {
                        tracing::warn!(queue = %queue, offset = message.queue_offset, error = %e, "sending to the retry topic failed");
                        false
                    }
                }
            }
        };
        if sent && to_dlq {
            self.stats.metrics.dead_lettered(1);
        }
        sent
    }
}

/// Builds a [`PushConsumer`].
///
/// ```no_run
/// # async fn demo() -> rocketmq_actor::Result<()> {
/// use rocketmq_actor::PushConsumer;
/// use rocketmq_actor::consumer::ConsumeStatus;
///
/// let consumer = PushConsumer::builder()
///     .namesrv_addr("127.0.0.1:9876")
///     .group("billing")
///     .subscribe("Orders", "TagA || TagB")
///     .listener_fn(|messages, ctx| async move {
///         for m in &messages {
///             println!("{} {}", m.topic(), m.msg_id());
///         }
///         (ConsumeStatus::Success, ctx)
///     })
///     .start()
///     .await?;
/// // ...
/// consumer.shutdown().await;
/// # Ok(()) }
/// ```
pub struct PushConsumerBuilder {
    config: PushConsumerConfig,
    namesrv_addr: Option<String>,
    client: Option<Client>,
    listener: Option<SendListener>,
    event_recipients: Vec<Recipient<ConsumerEvent>>,
    client_config: Option<ClientConfig>,
    consume_hooks: Hooks<dyn ConsumeHook>,
    /// The consume threads of a synchronous listener, sized at start.
    consume_pool: ConsumePool,
    /// What [`key_ordered`](PushConsumerBuilder::key_ordered) said, which a later
    /// [`config`](PushConsumerBuilder::config) does not undo.
    key_ordered: Option<bool>,
}

/// A listener as the builder holds it: `Send`, so `start` can move it to the runtime thread,
/// where it becomes an [`AnyListener`].
enum SendListener {
    Concurrent(Box<dyn MessageListener>),
    /// A concurrent listener the dispatcher can call by value (a closure).
    ConcurrentOwned(Box<dyn OwnedListener>),
    Orderly(Box<dyn OrderlyListener>),
    /// An orderly listener the dispatcher can call by value (a closure).
    OrderlyOwned(Box<dyn OwnedOrderlyListener>),
}

/// A listener on the runtime thread, and the same listener again when it can be called by value.
struct RuntimeListener {
    any: AnyListener,
    owned: Option<Rc<dyn OwnedListener>>,
    owned_orderly: Option<Rc<dyn OwnedOrderlyListener>>,
}

impl SendListener {
    /// The consume mode the listener is for.
    fn mode(&self) -> ConsumeMode {
        match self {
            SendListener::Concurrent(_) | SendListener::ConcurrentOwned(_) => {
                ConsumeMode::Concurrently
            }
            SendListener::Orderly(_) | SendListener::OrderlyOwned(_) => ConsumeMode::Orderly,
        }
    }

    fn into_runtime(self) -> RuntimeListener {
        let (any, owned, owned_orderly) = match self {
            SendListener::Concurrent(l) => (AnyListener::Concurrent(Rc::from(l)), None, None),
            SendListener::ConcurrentOwned(l) => {
                let owned: Rc<dyn OwnedListener> = Rc::from(l);
                (AnyListener::Concurrent(owned.clone()), Some(owned), None)
            }
            SendListener::Orderly(l) => (AnyListener::Orderly(Rc::from(l)), None, None),
            SendListener::OrderlyOwned(l) => {
                let owned: Rc<dyn OwnedOrderlyListener> = Rc::from(l);
                (AnyListener::Orderly(owned.clone()), None, Some(owned))
            }
        };
        RuntimeListener {
            any,
            owned,
            owned_orderly,
        }
    }
}

client_and_group_methods!(PushConsumerBuilder, config.consumer_group);
namespace_method!(PushConsumerBuilder, config.namespace);

impl PushConsumerBuilder {
    /// Replaces the whole configuration (subscriptions and [`key_ordered`](Self::key_ordered)
    /// given to the builder before are kept).
    ///
    /// The listener decides the consume mode, whatever the order of the calls: an orderly
    /// listener makes the consumer orderly. A configuration whose `consume_mode` is
    /// `orderly` needs an orderly listener: [`start`](Self::start) refuses it with a
    /// concurrent one.
    pub fn config(mut self, config: PushConsumerConfig) -> Self {
        let earlier = std::mem::take(&mut self.config.subscriptions);
        self.config = config;
        for (topic, expression) in earlier {
            self.config.subscriptions.entry(topic).or_insert(expression);
        }
        self
    }

    /// Changes configuration values in place.
    pub fn configure(mut self, change: impl FnOnce(&mut PushConsumerConfig)) -> Self {
        change(&mut self.config);
        self
    }

    /// Subscribes to `topic` with a tag expression (`"*"`, `"TagA || TagB"`) or a
    /// [`Selector`](crate::filter::Selector) (`Selector::sql("amount > 100")`). A SQL92
    /// selector is checked at [`start`](Self::start): a syntax error fails it with the
    /// position, and so does a broker without property filtering.
    ///
    /// ```no_run
    /// # async fn run() -> rocketmq_actor::Result<()> {
    /// use rocketmq_actor::filter::Selector;
    /// use rocketmq_actor::{ConsumeStatus, PushConsumer};
    ///
    /// let consumer = PushConsumer::builder()
    ///     .namesrv_addr("127.0.0.1:9876")
    ///     .group("eu-billing")
    ///     .subscribe("Orders", Selector::sql("region = 'eu' AND amount > 100"))
    ///     .listener_sync_fn(|_messages, _ctx| ConsumeStatus::Success)
    ///     .start()
    ///     .await?;
    /// # consumer.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscribe(mut self, topic: impl Into<String>, selector: impl Into<Selector>) -> Self {
        self.config
            .subscriptions
            .insert(topic.into(), selector.into());
        self
    }

    /// The listener (concurrent consumption).
    pub fn listener(mut self, listener: impl MessageListener) -> Self {
        self.listener = Some(SendListener::Concurrent(Box::new(listener)));
        self
    }

    /// An orderly listener: one batch at a time per queue, in queue order (and, in clustering,
    /// only while this client holds the queue's broker lock).
    pub fn orderly_listener(mut self, listener: impl OrderlyListener) -> Self {
        self.listener = Some(SendListener::Orderly(Box::new(listener)));
        self
    }

    /// An orderly closure listener: gets the batch and the context by value, returns the
    /// status and the context.
    pub fn orderly_listener_fn<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Messages, OrderlyContext) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = (OrderlyStatus, OrderlyContext)> + 'static,
    {
        self.listener = Some(SendListener::OrderlyOwned(Box::new(FnOrderlyListener(f))));
        self
    }

    /// A synchronous orderly closure listener, like Java's `MessageListenerOrderly`: gets the
    /// batch and the context by reference and returns the status at once.
    ///
    /// As with [`listener_sync_fn`](Self::listener_sync_fn), calls that block or burn CPU
    /// run on the consume threads (up to `consume_thread_max` at once) and quick ones on the
    /// consumer's own thread; either way a queue's calls run one at a time, in queue order
    /// (with [`key_ordered`](Self::key_ordered), one at a time per key), while different
    /// queues (keys) run side by side. A panic in it is caught and counts as a suspend of the
    /// queue, as [`OrderlyStatus::SuspendCurrentQueueAMoment`] does.
    ///
    /// ```no_run
    /// # async fn demo() -> rocketmq_actor::Result<()> {
    /// use rocketmq_actor::consumer::OrderlyStatus;
    /// use rocketmq_actor::PushConsumer;
    ///
    /// let consumer = PushConsumer::builder()
    ///     .namesrv_addr("127.0.0.1:9876")
    ///     .group("ledger")
    ///     .subscribe("Transfers", "*")
    ///     .orderly_listener_sync_fn(|messages, ctx| {
    ///         for m in messages {
    ///             println!("queue {} offset {}", ctx.queue.queue_id, m.queue_offset);
    ///         }
    ///         OrderlyStatus::Success
    ///     })
    ///     .start()
    ///     .await?;
    /// consumer.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn orderly_listener_sync_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&[MessageExt], &mut OrderlyContext) -> OrderlyStatus + Send + Sync + 'static,
    {
        self.listener = Some(SendListener::OrderlyOwned(Box::new(
            SyncFnOrderlyListener::new(f, self.consume_pool.clone()),
        )));
        self
    }

    /// Delivers orderly batches to an actor as [`ConsumeOrderly`].
    pub fn orderly_listener_actor(self, recipient: Recipient<ConsumeOrderly>) -> Self {
        self.orderly_listener(RecipientOrderlyListener(recipient))
    }

    /// An async closure orderly listener that borrows the batch and the context:
    /// `async |messages, ctx| { ... }` returns the status, as [`OrderlyListener::consume`]
    /// does (see [`listener_async`](Self::listener_async) for what borrowing saves). One call
    /// per queue at a time (or per key with [`key_ordered`](Self::key_ordered)); a panic in it
    /// suspends the queue and the batch comes back, as
    /// [`OrderlyStatus::SuspendCurrentQueueAMoment`] does.
    ///
    /// ```no_run
    /// use rocketmq_actor::consumer::OrderlyStatus;
    /// use rocketmq_actor::PushConsumer;
    ///
    /// # async fn apply(_body: &[u8]) -> std::io::Result<()> { Ok(()) }
    /// # async fn run() -> rocketmq_actor::Result<()> {
    /// let consumer = PushConsumer::builder()
    ///     .namesrv_addr("127.0.0.1:9876")
    ///     .group("ledger")
    ///     .subscribe("account_events", "*")
    ///     .orderly_listener_async(async |messages, _ctx| {
    ///         for m in messages {
    ///             if apply(&m.message.body).await.is_err() {
    ///                 return OrderlyStatus::SuspendCurrentQueueAMoment; // the batch again
    ///             }
    ///         }
    ///         OrderlyStatus::Success
    ///     })
    ///     .start()
    ///     .await?;
    /// consumer.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn orderly_listener_async<F>(mut self, f: F) -> Self
    where
        F: AsyncFn(&[MessageExt], &mut OrderlyContext) -> OrderlyStatus + Send + 'static,
    {
        self.listener = Some(SendListener::OrderlyOwned(Box::new(
            AsyncFnOrderlyListener(f),
        )));
        self
    }

    /// With an orderly listener: order per key (`__SHARDINGKEY`, else the first of KEYS)
    /// instead of per queue, so different keys of one queue are consumed concurrently.
    ///
    /// Whatever the order of the calls: a later [`config`](Self::config) keeps it.
    pub fn key_ordered(mut self, enabled: bool) -> Self {
        self.key_ordered = Some(enabled);
        self
    }

    /// A closure listener: gets the batch and the context by value, returns the status and the
    /// context. The batch is the closure's to keep (move it into a task, send it on); one that
    /// only reads it during the call is cheaper as [`listener_async`](Self::listener_async),
    /// which lends it.
    pub fn listener_fn<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Messages, ConsumeContext) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = (ConsumeStatus, ConsumeContext)> + 'static,
    {
        self.listener = Some(SendListener::ConcurrentOwned(Box::new(FnListener(f))));
        self
    }

    /// An async closure listener that borrows the batch and the context:
    /// `async |messages, ctx| { ... }` returns the status, as [`MessageListener::consume`]
    /// does. The recommended async listener: nothing to hand back, and the cheapest one for
    /// calls that may wait (a call that finishes without waiting costs about what a
    /// [`listener_sync_fn`](Self::listener_sync_fn) call costs). Its calls run concurrently on
    /// the consumer's arbiter, up to `consume_concurrency` at once, so their futures need not
    /// be `Send`. What the closure keeps beyond the call it copies out of the batch (a
    /// [`listener_fn`](Self::listener_fn) closure gets a batch it may keep instead). A panic
    /// in it is caught, and the batch is retried like a [`ConsumeStatus::ReconsumeLater`].
    ///
    /// ```no_run
    /// use rocketmq_actor::consumer::ConsumeStatus;
    /// use rocketmq_actor::PushConsumer;
    ///
    /// # async fn store(_body: &[u8]) -> std::io::Result<()> { Ok(()) }
    /// # async fn run() -> rocketmq_actor::Result<()> {
    /// let consumer = PushConsumer::builder()
    ///     .namesrv_addr("127.0.0.1:9876")
    ///     .group("order_archiver")
    ///     .subscribe("orders", "*")
    ///     .listener_async(async |messages, ctx| {
    ///         for m in messages {
    ///             if store(&m.message.body).await.is_err() {
    ///                 ctx.delay_level = 2; // retry in 5 s
    ///                 return ConsumeStatus::ReconsumeLater;
    ///             }
    ///         }
    ///         ConsumeStatus::Success
    ///     })
    ///     .start()
    ///     .await?;
    /// consumer.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn listener_async<F>(mut self, f: F) -> Self
    where
        F: AsyncFn(&[MessageExt], &mut ConsumeContext) -> ConsumeStatus + Send + 'static,
    {
        self.listener = Some(SendListener::ConcurrentOwned(Box::new(AsyncFnListener(f))));
        self
    }

    /// A synchronous closure listener, like Java's `MessageListenerConcurrently`: gets the
    /// batch and the context by reference and returns the status at once.
    ///
    /// It may block (a synchronous database call) and may burn CPU: such calls run on the
    /// consumer's consume threads, up to `consume_thread_max` (20) at once, as Java's
    /// `consumeThreadMax` threads run them, several batches of one queue side by side; they
    /// never hold up pulls, heartbeats or other queues. While its calls are quick (under
    /// about 50 µs on average), they run on the consumer's own thread instead, in a plain
    /// loop over each pull, which is the cheapest way to consume; the consumer moves them
    /// between the two as their duration changes. So the closure must be `Send + Sync`, and
    /// should not rely on which thread runs it. A panic in it is caught, and the batch is
    /// retried like a [`ConsumeStatus::ReconsumeLater`].
    ///
    /// ```no_run
    /// use rocketmq_actor::consumer::ConsumeStatus;
    /// use rocketmq_actor::PushConsumer;
    ///
    /// # async fn run() -> rocketmq_actor::Result<()> {
    /// let consumer = PushConsumer::builder()
    ///     .namesrv_addr("127.0.0.1:9876")
    ///     .group("order_counter")
    ///     .subscribe("orders", "*")
    ///     .listener_sync_fn(|messages, ctx| {
    ///         for m in messages {
    ///             println!("{} from queue {}", m.msg_id(), ctx.queue.queue_id);
    ///         }
    ///         ConsumeStatus::Success
    ///     })
    ///     .start()
    ///     .await?;
    /// consumer.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn listener_sync_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&[MessageExt], &mut ConsumeContext) -> ConsumeStatus + Send + Sync + 'static,
    {
        self.listener = Some(SendListener::ConcurrentOwned(Box::new(
            SyncFnListener::new(f, self.consume_pool.clone()),
        )));
        self
    }

    /// Delivers batches to an actor as [`ConsumeMessages`].
    pub fn listener_actor(self, recipient: Recipient<ConsumeMessages>) -> Self {
        self.listener(RecipientListener(recipient))
    }

    /// The configuration as built so far.
    pub(crate) fn current_config(&self) -> &PushConsumerConfig {
        &self.config
    }

    /// Adds a hook run before and after every listener call, concurrent or orderly (after
    /// those added before; see [`ConsumeHook`]).
    pub fn consume_hook(mut self, hook: Arc<dyn ConsumeHook>) -> Self {
        self.consume_hooks.push(hook);
        self
    }

    /// Sends the consumer's [`ConsumerEvent`]s to an actor as well (from the start on, so
    /// `Started` and the first `QueuesAssigned` are seen). An event that finds the mailbox full
    /// is dropped.
    pub fn event_recipient(mut self, recipient: Recipient<ConsumerEvent>) -> Self {
        self.event_recipients.push(recipient);
        self
    }

    /// Validates the configuration, starts the consumer's actors (on the current arbiter inside
    /// an actix system, else on the crate's runtime thread), sends the first heartbeat and the
    /// first rebalance, and returns the handle.
    ///
    /// Fails with [`Error::AccessDenied`] when a broker refuses the first heartbeat for
    /// authentication or permission (wrong or missing [`credentials`](Self::credentials), no
    /// SUB permission on the group or a subscribed topic): nothing of the consumer is left
    /// running. A refusal later on is a problem (`status().problems`, one warn line, a
    /// [`ConsumerEvent::Problem`]) retried every 30 s.
    pub async fn start(self) -> Result<PushConsumer> {
        runtime::run_on_actix(move || self.start_here()).await?
    }

    async fn start_here(self) -> Result<PushConsumer> {
        let mut config = self.config;
        if let Some(key_ordered) = self.key_ordered {
            config.key_ordered = key_ordered;
        }
        // The listener decides the mode; a configuration that asks for orderly consumption
        // (TOML `consume_mode = "orderly"`) with a concurrent listener is a mistake to report,
        // not to run concurrently.
        if let Some(mode) = self.listener.as_ref().map(SendListener::mode) {
            if config.consume_mode == ConsumeMode::Orderly && mode == ConsumeMode::Concurrently {
                return Err(Error::Config {
                    option: "consume_mode",
                    value: "orderly".into(),
                    allowed: "\"orderly\" only with an orderly listener (orderly_listener, \
                              orderly_listener_fn, orderly_listener_sync_fn, \
                              orderly_listener_async or orderly_listener_actor)"
                        .into(),
                });
            }
            config.consume_mode = mode;
        }
        config.validate()?;
        self.consume_pool
            .configure(config.consume_thread_max as usize, &config.consumer_group);
        let configured_namespace = config.namespace.clone();
        if config.subscriptions.is_empty() {
            return Err(Error::Config {
                option: "subscriptions",
                value: "{}".into(),
                allowed: "at least one topic".into(),
            });
        }
        for topic in config.subscriptions.keys() {
            validate_topic_name(topic)?;
        }
        let Some(RuntimeListener {
            any: listener,
            owned: owned_listener,
            owned_orderly: owned_orderly_listener,
        }) = self.listener.map(SendListener::into_runtime)
        else {
            return Err(Error::Config {
                option: "listener",
                value: "none".into(),
                allowed: "a listener (listener, listener_fn or listener_actor)".into(),
            });
        };
        let (client, own_client) = crate::actors::pull_consumer::resolve_client(
            self.client,
            self.namesrv_addr,
            self.client_config,
        )?;
        // From here on the configuration is the wire one: group and topics in the namespace.
        let namespace = Namespace::resolve(configured_namespace.as_deref(), client.namesrv_addr());
        let wire = namespace.and_then(|ns| {
            let wire = config.on_the_wire(&ns);
            wire.validate().map(|()| (ns, wire))
        });
        let (namespace, config) = match wire {
            Ok(wire) => wire,
            Err(e) => {
                if own_client {
                    client.shutdown().await;
                }
                return Err(e);
            }
        };
        let group: Arc<str> = config.consumer_group.as_str().into();
        let now = now_ms();
        let consume_timestamp_ms = config.consume_timestamp_ms(now)?;

        let checked = client
            .checked_subscriptions(&group, &config.subscriptions, now, namespace.as_str())
            .await;
        let mut subscriptions = match checked {
            Ok(subscriptions) => subscriptions,
            Err(e) => {
                if own_client {
                    client.shutdown().await;
                }
                return Err(e);
            }
        };
        if config.is_clustering() {
            subscriptions.insert(retry::retry_topic(&group), Arc::new(Subscription::all(now)));
        }

        let backend = match config.message_model {
            MessageModel::Clustering => OffsetBackend::Remote,
            MessageModel::Broadcasting => {
                let dir = config.offset_store_dir.clone().unwrap_or_else(|| {
                    default_offset_store_dir(
                        &std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from),
                    )
                });
                OffsetBackend::LocalFile(local_offsets_path(&dir, "DEFAULT", &group))
            }
        };
        let offsets = OffsetStore::new(
            client.clone(),
            group.to_string(),
            backend,
            config.persist_consumer_offset_interval,
        )?;
        let offsets = Supervisor::start(move |_| offsets);
        let dispatcher = ConsumeDispatcher::new(
            listener.clone(),
            config.effective_consume_concurrency() as usize,
        )
        .with_owned_listener(owned_listener)
        .with_owned_orderly_listener(owned_orderly_listener)
        .with_hooks(ConsumeHooks::new(group.clone(), self.consume_hooks));
        let puller = {
            let client = client.clone();
            Supervisor::start(move |_| Puller::new(client))
        };
        let retry_producer = Producer::new(
            client.clone(),
            ProducerConfig {
                group: "CLIENT_INNER_PRODUCER".into(),
                ..ProducerConfig::default()
            },
        );
        let shared = Rc::new(ConsumerShared {
            group: group.clone(),
            thresholds: Cell::new(QueueThresholds::for_owned_queues(&config, 0)),
            config,
            client: client.clone(),
            subscriptions: RefCell::new(subscriptions),
            puller,
            dispatcher,
            offsets,
            retry_producer,
            paused: Cell::new(false),
            running: Cell::new(true),
            stats: Stats::new(&group),
            // At error level so it is enabled whatever the filter lets through: a warning
            // printed under the default `warn` filter still says whose it is.
            span: tracing::error_span!("consumer", group = %group, client = %client.client_id()),
            consume_timestamp_ms,
            heartbeat: std::cell::OnceCell::new(),
            route_refreshes: RefCell::new(BTreeMap::new()),
            events: EventSink::new(self.event_recipients, namespace.clone()),
            problems: RefCell::new(BTreeMap::new()),
            queue_restarts: Cell::new(0),
            access_problems: RefCell::new(BTreeMap::new()),
            namespace: namespace.clone(),
        });

        for topic in shared.subscribed_topics() {
            match client.refresh_route(&topic).await {
                // The group's retry topic appears with the first heartbeat or send-back.
                Err(Error::TopicRouteNotFound(_)) if retry::is_retry_topic(&topic) => {}
                Err(e) => shared.note_problem(&topic, e.to_string()),
                Ok(_) => {}
            }
        }
        let heartbeat = Supervisor::start({
            let shared = shared.clone();
            move |_| Heartbeat::new(shared)
        });
        let _ = shared.heartbeat.set(heartbeat.downgrade());
        let root = ConsumerRoot {
            shared: shared.clone(),
            listener,
            heartbeat: heartbeat.clone(),
            rebalancer: None,
            own_client,
            retired: false,
        }
        .start();
        let registered = client
            .actor()
            .send(RegisterConsumer {
                group: group.to_string(),
                handler: root.clone().recipient(),
            })
            .await
            .map_err(Error::from)
            .and_then(|r| r);
        if let Err(e) = registered {
            // Another consumer of this group runs on the client: nothing of this one may stay
            // behind (its heartbeat would announce a second member that never pulls).
            heartbeat.do_send(StopActor);
            shared.puller.do_send(StopActor);
            shared.offsets.do_send(StopActor);
            root.do_send(StopActor);
            if own_client {
                client.shutdown().await;
            }
            return Err(e);
        }
        match heartbeat.send(SendHeartbeat).await? {
            Ok(()) => {}
            Err(e) if e.is_access_denied() => {
                // Wrong or missing credentials, or no permission on the group or a topic:
                // nothing will work until the account changes. Say so now, not in a log.
                heartbeat.do_send(StopActor);
                shared.puller.do_send(StopActor);
                shared.offsets.do_send(StopActor);
                client
                    .actor()
                    .do_send(UnregisterConsumer(group.to_string()));
                root.do_send(StopActor);
                if own_client {
                    client.shutdown().await;
                }
                return Err(e);
            }
            Err(e) => {
                let _span = shared.span.clone().entered();
                tracing::warn!(error = %e, "first heartbeat failed; rebalancing will retry");
            }
        }
        root.send(StartRebalancing).await?;
        shared.events.emit(ConsumerEvent::Started {
            client_id: client.client_id().to_owned(),
        });
        Ok(PushConsumer {
            root,
            client_id: client.client_id().to_owned(),
            events: shared.events.streams.clone(),
            shut_down: false,
            namespace,
        })
    }
}

/// A running push consumer.
///
/// **Dropping the handle shuts the consumer down** in the background, as
/// [`PushConsumer::shutdown`] does (in-flight listener calls finish, offsets are persisted,
/// the group is left), without waiting for it. Call `shutdown().await` to know when it is done;
/// keep the handle for as long as the consumer should run.
#[must_use = "dropping the handle shuts the consumer down"]
pub struct PushConsumer {
    root: Addr<ConsumerRoot>,
    client_id: String,
    events: tokio::sync::broadcast::Sender<ConsumerEvent>,
    /// `shutdown` was called: dropping the handle has nothing left to do.
    shut_down: bool,
    /// Unwraps the queues of [`PushConsumer::lag`].
    namespace: Namespace,
}

impl Drop for PushConsumer {
    fn drop(&mut self) {
        if !self.shut_down {
            // A control message of a handle that is going away: it cannot wait for room.
            self.root.do_send(Shutdown);
        }
    }
}

impl PushConsumer {
    /// Starts building a consumer.
    pub fn builder() -> PushConsumerBuilder {
        PushConsumerBuilder {
            config: PushConsumerConfig::default(),
            namesrv_addr: None,
            client: None,
            listener: None,
            event_recipients: Vec::new(),
            client_config: None,
            consume_hooks: Hooks::new(),
            consume_pool: ConsumePool::new(),
            key_ordered: None,
        }
    }

    /// The client id brokers know this consumer by.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// Stops pulling (queues keep their assignment); in-flight listener calls finish.
    pub async fn suspend(&self) {
        let _ = self.root.send(SetPaused(true)).await;
    }

    /// Resumes pulling after [`PushConsumer::suspend`].
    pub async fn resume(&self) {
        let _ = self.root.send(SetPaused(false)).await;
    }

    /// Counters since start.
    pub async fn stats(&self) -> ConsumerStats {
        self.root.send(GetStats).await.unwrap_or_default()
    }

    /// The queues this consumer owns now.
    pub async fn owned_queues(&self) -> Vec<MessageQueue> {
        self.root.send(GetOwned).await.unwrap_or_default()
    }

    /// The queue actors, for fault-injection tests.
    #[cfg(all(test, feature = "embedded"))]
    pub(crate) async fn queue_actors(
        &self,
    ) -> Vec<(MessageQueue, Addr<crate::actors::queue::QueueActor>)> {
        let rebalancer = self.root.send(GetRebalancerAddr).await.ok().flatten();
        match rebalancer {
            Some(r) => r.send(OwnedQueues).await.unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// The consumer's client, for fault-injection tests.
    #[cfg(all(test, feature = "embedded"))]
    pub(crate) async fn client_for_tests(&self) -> Client {
        self.root.send(GetClient).await.expect("the consumer runs")
    }

    /// How far behind each owned queue is: the broker's max offset (asked now, every broker
    /// side by side) minus the committed offset, with the messages cached for the listener.
    /// Lag is what is left to consume, so it counts messages the listener will skip by tag
    /// only on brokers that filter after storing (all of them, for tag hashes that collide).
    ///
    /// ```no_run
    /// # async fn demo(consumer: rocketmq_actor::PushConsumer) {
    /// use rocketmq_actor::consumer::QueueLag;
    /// let lags = consumer.lag().await;
    /// for l in &lags {
    ///     println!("{}: lag {:?}, cached {}", l.queue, l.lag, l.cached);
    /// }
    /// println!("total lag {}", QueueLag::total(&lags));
    /// # }
    /// ```
    pub async fn lag(&self) -> Vec<QueueLag> {
        let Some(rebalancer) = self.root.send(GetRebalancerAddr).await.ok().flatten() else {
            return Vec::new();
        };
        let client = self.root.send(GetClient).await.ok();
        let owned = rebalancer.send(OwnedQueues).await.unwrap_or_default();
        let namespace = &self.namespace;
        let lags = owned.into_iter().map(|(queue, actor)| {
            let client = client.clone();
            async move {
                let local = actor.send(GetQueueLag).await.ok();
                let broker_offset = match &client {
                    Some(client) => client.max_offset(&queue).await.ok(),
                    None => None,
                };
                let (committed_offset, cached) = local.unwrap_or((None, 0));
                let lag = match (broker_offset, committed_offset) {
                    (Some(max), Some(committed)) => Some((max - committed).max(0)),
                    _ => None,
                };
                QueueLag {
                    queue: namespace.unwrap_queue(&queue).into_owned(),
                    broker_offset,
                    committed_offset,
                    lag,
                    cached,
                }
            }
        });
        futures::future::join_all(lags).await
    }

    /// Its state now: owned queues, the topics it cannot consume and why, restarts.
    pub async fn status(&self) -> ConsumerStatus {
        self.status_soon().await
    }

    /// [`Self::status`] as a future that does not borrow the handle.
    pub(crate) fn status_soon(
        &self,
    ) -> impl std::future::Future<Output = ConsumerStatus> + 'static {
        let request = self.root.send(GetStatus);
        async move { request.await.unwrap_or_default() }
    }

    /// A stream of the consumer's [`ConsumerEvent`]s from now on. A reader that falls more
    /// than 256 events behind skips the oldest (a warning is logged); the stream ends when the
    /// consumer stops.
    pub fn events(&self) -> impl futures::Stream<Item = ConsumerEvent> + Send + Unpin + 'static {
        let receiver = self.events.subscribe();
        Box::pin(futures::stream::unfold(
            receiver,
            |mut receiver| async move {
                loop {
                    match receiver.recv().await {
                        Ok(event) => return Some((event, receiver)),
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(skipped)) => {
                            tracing::warn!(
                                skipped,
                                "consumer event stream fell behind; events skipped"
                            );
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                    }
                }
            },
        ))
    }

    /// Triggers a rebalance now (one runs every `rebalance_interval` anyway).
    pub async fn rebalance(&self) {
        let _ = self.root.send(TriggerRebalance).await;
    }

    /// Graceful shutdown: stop pulling, wait for listener calls in flight (bounded by
    /// `shutdown_await`; unbounded by default), persist every offset, unregister from the
    /// brokers, stop the actors.
    pub async fn shutdown(mut self) {
        self.shut_down = true;
        let _ = self.root.send(Shutdown).await;
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct StartRebalancing;

#[derive(Message)]
#[rtype(result = "()")]
struct SetPaused(bool);

#[derive(Message)]
#[rtype(result = "ConsumerStats")]
struct GetStats;

#[derive(Message)]
#[rtype(result = "Vec<MessageQueue>")]
struct GetOwned;

#[derive(Message)]
#[rtype(result = "ConsumerStatus")]
struct GetStatus;

#[derive(Message)]
#[rtype(result = "Option<Addr<Rebalancer>>")]
struct GetRebalancerAddr;

impl Handler<GetRebalancerAddr> for ConsumerRoot {
    type Result = Option<Addr<Rebalancer>>;

    fn handle(&mut self, _msg: GetRebalancerAddr, _ctx: &mut Self::Context) -> Self::Result {
        self.rebalancer.clone()
    }
}

#[derive(Message)]
#[rtype(result = "Client")]
struct GetClient;

impl Handler<GetClient> for ConsumerRoot {
    type Result = MessageResult<GetClient>;

    fn handle(&mut self, _msg: GetClient, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.shared.client.clone())
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct TriggerRebalance;

#[derive(Message)]
#[rtype(result = "()")]
struct Shutdown;

/// The root actor of one consumer.
pub struct ConsumerRoot {
    shared: Rc<ConsumerShared>,
    listener: AnyListener,
    heartbeat: Addr<Heartbeat>,
    rebalancer: Option<Addr<Rebalancer>>,
    own_client: bool,
    /// Shut down (see `StopActor`).
    retired: bool,
}

impl Actor for ConsumerRoot {
    type Context = Context<Self>;
}

impl Handler<StartRebalancing> for ConsumerRoot {
    type Result = ();

    fn handle(&mut self, _msg: StartRebalancing, _ctx: &mut Self::Context) {
        if self.rebalancer.is_none() {
            let (shared, heartbeat) = (self.shared.clone(), self.heartbeat.clone());
            self.rebalancer = Some(Supervisor::start(move |_| {
                Rebalancer::new(shared, heartbeat)
            }));
        }
    }
}

impl Handler<SetPaused> for ConsumerRoot {
    type Result = ();

    fn handle(&mut self, msg: SetPaused, _ctx: &mut Self::Context) {
        self.shared.paused.set(msg.0);
    }
}

impl Handler<TriggerRebalance> for ConsumerRoot {
    type Result = ();

    fn handle(&mut self, _msg: TriggerRebalance, _ctx: &mut Self::Context) {
        if let Some(rebalancer) = &self.rebalancer {
            rebalancer.do_send(Rebalance);
        }
    }
}

impl Handler<GetOwned> for ConsumerRoot {
    type Result = ResponseFuture<Vec<MessageQueue>>;

    fn handle(&mut self, _msg: GetOwned, _ctx: &mut Self::Context) -> Self::Result {
        let rebalancer = self.rebalancer.clone();
        let namespace = self.shared.namespace.clone();
        Box::pin(async move {
            match rebalancer {
                Some(r) => r
                    .send(OwnedQueues)
                    .await
                    .map(|owned| {
                        namespace.unwrap_queues(owned.into_iter().map(|(mq, _)| mq).collect())
                    })
                    .unwrap_or_default(),
                None => Vec::new(),
            }
        })
    }
}

impl Handler<GetStatus> for ConsumerRoot {
    type Result = ResponseActFuture<Self, ConsumerStatus>;

    fn handle(&mut self, _msg: GetStatus, _ctx: &mut Self::Context) -> Self::Result {
        let rebalancer = self.rebalancer.clone();
        Box::pin(
            async move {
                match rebalancer {
                    Some(r) => r.send(OwnedQueues).await.unwrap_or_default(),
                    None => Vec::new(),
                }
            }
            .into_actor(self)
            .map(|owned, act, _ctx| {
                let ns = &act.shared.namespace;
                let mut problems = act.shared.problems.borrow().clone();
                problems.extend(act.shared.access_problems.borrow().clone());
                ConsumerStatus {
                    owned_queues: ns.unwrap_queues(owned.into_iter().map(|(mq, _)| mq).collect()),
                    problems: problems
                        .into_iter()
                        .map(|(topic, cause)| (ns.unwrap(&topic).into_owned(), cause))
                        .collect(),
                    queue_restarts: act.shared.queue_restarts.get(),
                }
            }),
        )
    }
}

impl Handler<GetStats> for ConsumerRoot {
    type Result = ResponseActFuture<Self, ConsumerStats>;

    fn handle(&mut self, _msg: GetStats, _ctx: &mut Self::Context) -> Self::Result {
        let rebalancer = self.rebalancer.clone();
        Box::pin(
            async move {
                match rebalancer {
                    Some(r) => r.send(OwnedQueues).await.map(|o| o.len()).unwrap_or(0),
                    None => 0,
                }
            }
            .into_actor(self)
            .map(|owned, act, _ctx| act.shared.stats.snapshot(owned)),
        )
    }
}

impl Handler<Shutdown> for ConsumerRoot {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: Shutdown, _ctx: &mut Self::Context) -> Self::Result {
        if self.retired {
            return Box::pin(fut::ready(()));
        }
        self.retired = true;
        let shared = self.shared.clone();
        let rebalancer = self.rebalancer.take();
        let heartbeat = self.heartbeat.clone();
        let own_client = self.own_client;
        Box::pin(
            async move {
                if let Some(rebalancer) = &rebalancer {
                    let _ = rebalancer.send(DropAll).await;
                }
                shared.running.set(false);
                match shared.offsets.send(PersistAll).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "final offset persist failed"),
                    Err(e) => tracing::warn!(error = %e, "offset store gone at shutdown"),
                }
                let _ = heartbeat.send(Unregister).await;
                let _ = shared
                    .client
                    .actor()
                    .send(UnregisterConsumer(shared.group.to_string()))
                    .await;
                if own_client {
                    shared.client.shutdown().await;
                }
                if let Some(rebalancer) = rebalancer {
                    // Its timers hold no work of value any more.
                    drop(rebalancer);
                }
            }
            .instrument(self.shared.span.clone())
            .into_actor(self)
            .map(|_, act, ctx| {
                act.shared.puller.do_send(StopActor);
                act.shared.offsets.do_send(StopActor);
                act.heartbeat.do_send(StopActor);
                act.shared.events.emit(ConsumerEvent::Stopped);
                ctx.stop();
            }),
        )
    }
}

/// Stops an actor of the consumer at shutdown.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StopActor;

/// The actors of a consumer run under supervisors, which restart an actor that stops while
/// its address is held; one stopped on purpose is `retired` first, so a restart leaves it idle
/// until its last address is gone.
macro_rules! stoppable {
    ($($actor:ty),*) => {$(
        impl Handler<StopActor> for $actor {
            type Result = ();
            fn handle(&mut self, _msg: StopActor, ctx: &mut Self::Context) {
                self.retired = true;
                ctx.stop();
            }
        }
    )*};
}

stoppable!(Puller, OffsetStore, Rebalancer, Heartbeat, ConsumerRoot);

impl Handler<ServerRequest> for ConsumerRoot {
    type Result = ResponseActFuture<Self, Option<RemotingCommand>>;

    fn handle(&mut self, msg: ServerRequest, _ctx: &mut Self::Context) -> Self::Result {
        let command = msg.command;
        match command.code {
            request_code::NOTIFY_CONSUMER_IDS_CHANGED => {
                let _span = self.shared.span.clone().entered();
                tracing::debug!("group membership changed; rebalancing");
                if let Some(rebalancer) = &self.rebalancer {
                    rebalancer.do_send(Rebalance);
                }
                Box::pin(fut::ready(None))
            }
            request_code::RESET_CONSUMER_CLIENT_OFFSET => Box::pin(self.reset_offsets(command)),
            request_code::GET_CONSUMER_RUNNING_INFO => Box::pin(self.running_info()),
            request_code::CONSUME_MESSAGE_DIRECTLY => Box::pin(self.consume_directly(command)),
            code => Box::pin(fut::ready(Some(RemotingCommand::response(
                response_code::REQUEST_CODE_NOT_SUPPORTED,
                Some(format!(" request type {code} not supported")),
            )))),
        }
    }
}

impl ConsumerRoot {
    fn reset_offsets(
        &mut self,
        command: RemotingCommand,
    ) -> impl ActorFuture<Self, Output = Option<RemotingCommand>> {
        let rebalancer = self.rebalancer.clone();
        async move {
            let body = match ResetOffsetBody::decode(command.body.as_deref().unwrap_or_default()) {
                Ok(body) => body,
                Err(e) => {
                    tracing::warn!(error = %e, "malformed RESET_CONSUMER_CLIENT_OFFSET body");
                    return None;
                }
            };
            let rebalancer = rebalancer?;
            let owned: BTreeMap<MessageQueue, _> = rebalancer
                .send(OwnedQueues)
                .await
                .unwrap_or_default()
                .into_iter()
                .collect();
            for (mq, offset) in body.offset_table.iter() {
                if let Some(queue) = owned.get(mq) {
                    tracing::info!(queue = %mq, offset, "offset reset by the broker");
                    if let Ok(Err(e)) = queue.send(ResetQueueOffset(*offset)).await {
                        tracing::warn!(queue = %mq, error = %e, "offset reset not persisted");
                    }
                }
            }
            None
        }
        .instrument(self.shared.span.clone())
        .into_actor(self)
    }

    fn running_info(&mut self) -> impl ActorFuture<Self, Output = Option<RemotingCommand>> {
        let rebalancer = self.rebalancer.clone();
        let shared = self.shared.clone();
        async move {
            let owned = match &rebalancer {
                Some(r) => r.send(OwnedQueues).await.unwrap_or_default(),
                None => Vec::new(),
            };
            let mut info = ConsumerRunningInfo::default();
            for (mq, addr) in &owned {
                if let Ok(status) = addr.send(GetQueueStatus).await {
                    let s = status.snapshot;
                    info.mq_table.insert(
                        mq.clone(),
                        ProcessQueueInfo {
                            commit_offset: s.commit_offset,
                            cached_msg_min_offset: s.cached_msg_min_offset,
                            cached_msg_max_offset: s.cached_msg_max_offset,
                            cached_msg_count: s.cached_msg_count as i32,
                            cached_msg_size_in_mib: s.cached_msg_size_in_mib as i32,
                            locked: s.locked,
                            try_unlock_times: s.try_unlock_times,
                            last_lock_timestamp: s.last_lock_timestamp,
                            droped: s.dropped,
                            last_pull_timestamp: s.last_pull_timestamp,
                            last_consume_timestamp: s.last_consume_timestamp,
                            ..Default::default()
                        },
                    );
                }
            }
            let stats = shared.stats.snapshot(owned.len());
            let properties = &mut info.properties;
            properties.insert("PROP_CONSUME_TYPE".into(), "CONSUME_PASSIVELY".into());
            properties.insert(
                "PROP_CONSUMEORDERLY".into(),
                shared.config.is_orderly().to_string(),
            );
            properties.insert(
                "PROP_THREADPOOL_CORE_SIZE".into(),
                shared.config.effective_consume_concurrency().to_string(),
            );
            properties.insert("PROP_CLIENT_VERSION".into(), "V5_3_3".into());
            for (topic, sub) in shared.subscriptions.borrow().iter() {
                info.subscription_set.push(sub.to_wire(topic));
                info.status_table.insert(
                    topic.clone(),
                    WireConsumeStatus {
                        pull_rt: stats.pull_rt_mean.as_secs_f64() * 1000.0,
                        consume_rt: stats.consume_rt_mean.as_secs_f64() * 1000.0,
                        consume_failed_msgs: stats.consumed_failed as i64,
                        ..Default::default()
                    },
                );
            }
            Some(
                RemotingCommand::response(response_code::SUCCESS, None)
                    .with_body(encode_json(&info)),
            )
        }
        .into_actor(self)
    }

    fn consume_directly(
        &mut self,
        command: RemotingCommand,
    ) -> impl ActorFuture<Self, Output = Option<RemotingCommand>> {
        let listener = self.listener.clone();
        let config = self.shared.config.clone();
        let namespace = self.shared.namespace.clone();
        let broker = command.ext("brokerName").unwrap_or_default().to_owned();
        async move {
            let messages = match decode_messages(command.body.clone().unwrap_or_default()) {
                Ok(mut messages) if !messages.is_empty() => {
                    let group = config.consumer_group.as_str();
                    for message in &mut messages {
                        namespace.unwrap_received(message, Some(group));
                    }
                    messages
                }
                Ok(_) => {
                    return Some(RemotingCommand::response(
                        response_code::SYSTEM_ERROR,
                        Some("no message in the body".into()),
                    ))
                }
                Err(e) => {
                    return Some(RemotingCommand::response(
                        response_code::SYSTEM_ERROR,
                        Some(format!("cannot decode the message: {e}")),
                    ))
                }
            };
            let queue = MessageQueue::new(messages[0].topic(), broker, messages[0].queue_id);
            let started = std::time::Instant::now();
            let (order, auto_commit, consume_result) = match listener {
                AnyListener::Concurrent(listener) => {
                    let mut ctx = ConsumeContext::new(queue);
                    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
                        listener.consume(&messages, &mut ctx),
                    ))
                    .await;
                    let result = match outcome {
                        Ok(ConsumeStatus::Success) => CMResult::CrSuccess,
                        Ok(ConsumeStatus::ReconsumeLater) => CMResult::CrLater,
                        Err(_) => CMResult::CrThrowException,
                    };
                    (false, true, result)
                }
                AnyListener::Orderly(listener) => {
                    let mut ctx = OrderlyContext::new(queue, &config);
                    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
                        listener.consume(&messages, &mut ctx),
                    ))
                    .await;
                    let result = match outcome {
                        Ok(OrderlyStatus::Success) => CMResult::CrSuccess,
                        Ok(OrderlyStatus::Commit) => CMResult::CrCommit,
                        Ok(OrderlyStatus::Rollback) => CMResult::CrRollback,
                        Ok(OrderlyStatus::SuspendCurrentQueueAMoment) => CMResult::CrLater,
                        Err(_) => CMResult::CrThrowException,
                    };
                    (true, ctx.auto_commit, result)
                }
            };
            let result = ConsumeMessageDirectlyResult {
                order,
                auto_commit,
                consume_result: Some(consume_result),
                remark: None,
                spent_time_mills: started.elapsed().as_millis() as i64,
            };
            Some(
                RemotingCommand::response(response_code::SUCCESS, None)
                    .with_body(encode_json(&result)),
            )
        }
        .into_actor(self)
    }
}
