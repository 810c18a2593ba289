//! The pull consumer (Java `DefaultMQPullConsumer`): the application decides what to pull and
//! when; the runtime keeps it a member of its group (heartbeats, queue division told to a
//! [`MessageQueueListener`]) and keeps its offsets (in memory, persisted every
//! `persist_consumer_offset_interval` and at shutdown, to the brokers or a local file).
//!
//! The handle is cheap to clone and `Send + Sync`: pulls go straight through the base
//! [`Client`]; offsets go to the group's offset store actor; division to the member actor.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use actix::prelude::*;

use crate::actors::client::{Client, ClientConfig};
use crate::actors::member::{
    Divided, FnQueueListener, HeartbeatNow, Leave, Member, MemberSpec, MessageQueueListener,
    QueueChange, Rebalance, RecipientQueueListener, ResetListener, UnwrappingQueueListener,
};
use crate::actors::offset_store::{
    CacheOffset, LoadOffset, OffsetStore, PersistAll, ReadOffset, StoreOffset,
};
use crate::actors::producer::{Producer, ProducerConfig};
use crate::actors::runtime;
use crate::consumer::config::validate_selector;
use crate::consumer::config::ConsumeFromWhere;
use crate::consumer::offset::StoredOffset;
use crate::consumer::pull_config::PullConsumerConfig;
use crate::consumer::retry::build_retry_message;
use crate::consumer::retry::SEND_BACK_TIMEOUT;
use crate::error::{Error, Result};
use crate::filter::Selector;
use crate::message::{MessageExt, MessageQueue};
use crate::namespace::Namespace;
use crate::rpc::{PullRequest, PullResult, Subscription};

/// Builds a [`PullConsumer`].
pub struct PullConsumerBuilder {
    config: PullConsumerConfig,
    namesrv_addr: Option<String>,
    client: Option<Client>,
    topics: Vec<String>,
    listener: Option<Box<dyn MessageQueueListener>>,
    reset_listener: Option<ResetListener>,
    client_config: Option<ClientConfig>,
}

client_and_group_methods!(PullConsumerBuilder, config.consumer_group);
namespace_method!(PullConsumerBuilder, config.namespace);

impl PullConsumerBuilder {
    /// Replaces the configuration (the group given before is kept if the new one has none).
    pub fn config(mut self, config: PullConsumerConfig) -> Self {
        let group = std::mem::take(&mut self.config.consumer_group);
        self.config = config;
        if self.config.consumer_group.is_empty() {
            self.config.consumer_group = group;
        }
        self
    }

    /// Changes configuration values in place.
    pub fn configure(mut self, change: impl FnOnce(&mut PullConsumerConfig)) -> Self {
        change(&mut self.config);
        self
    }

    /// Takes part in the division of `topic`'s queues among the group (Java
    /// `setRegisterTopics`); the listener hears of every change.
    pub fn subscribe(mut self, topic: impl Into<String>) -> Self {
        let topic = topic.into();
        if !self.topics.contains(&topic) {
            self.topics.push(topic);
        }
        self
    }

    /// Told `(topic, all, divided)` on every division change of the subscribed topics.
    pub fn message_queue_listener(mut self, listener: impl MessageQueueListener) -> Self {
        self.listener = Some(Box::new(listener));
        self
    }

    /// A closure told `(topic, all, divided)` on every change.
    pub fn message_queue_listener_fn<F>(self, f: F) -> Self
    where
        F: Fn(&str, &[MessageQueue], &[MessageQueue]) + Send + 'static,
    {
        self.message_queue_listener(FnQueueListener(f))
    }

    /// An actor told every change as a [`QueueChange`].
    pub fn message_queue_listener_actor(self, recipient: Recipient<QueueChange>) -> Self {
        self.message_queue_listener(RecipientQueueListener(recipient))
    }

    /// Told `(queue, new offset)` when a broker resets the group's offsets (an admin's
    /// `reset_offset_by_timestamp`), after the offset store holds the new offset. A loop that
    /// reads [`PullConsumer::fetch_consume_offset`] before each pull follows a reset by itself;
    /// one that keeps the next offset in a variable moves it here.
    pub fn offset_reset_listener_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&MessageQueue, i64) + Send + 'static,
    {
        self.reset_listener = Some(Box::new(f));
        self
    }

    /// Validates the configuration, joins the group (heartbeat, first division) and returns
    /// the handle.
    pub async fn start(self) -> Result<PullConsumer> {
        runtime::run_on_actix(move || self.start_here()).await?
    }

    async fn start_here(self) -> Result<PullConsumer> {
        self.config.validate()?;
        let (client, own_client) =
            resolve_client(self.client, self.namesrv_addr, self.client_config)?;
        let namespace =
            resolve_namespace(self.config.namespace.as_deref(), &client, own_client).await?;
        let topics: BTreeMap<String, Selector> = self
            .topics
            .iter()
            .map(|t| (namespace.wrap(t).into_owned(), Selector::all()))
            .collect();
        // The member works with wire names; the application's listeners get them unwrapped.
        let listener = match (self.listener, namespace.is_none()) {
            (Some(inner), false) => Some(Box::new(UnwrappingQueueListener {
                namespace: namespace.clone(),
                inner,
            }) as Box<dyn MessageQueueListener>),
            (listener, _) => listener,
        };
        let reset_listener = match (self.reset_listener, namespace.is_none()) {
            (Some(inner), false) => {
                let namespace = namespace.clone();
                Some(Box::new(move |queue: &MessageQueue, offset: i64| {
                    inner(&namespace.unwrap_queue(queue), offset)
                }) as ResetListener)
            }
            (listener, _) => listener,
        };
        let (member, offsets) = Member::start(MemberSpec {
            client: client.clone(),
            own_client,
            config: self.config.on_the_wire(&namespace),
            topics,
            consume_from_where: ConsumeFromWhere::LastOffset,
            listener,
            reset_target: None,
            reset_listener,
            rebalance: true,
        })
        .await?;
        Ok(PullConsumer::from_parts(
            client,
            self.config,
            member,
            offsets,
            namespace,
        ))
    }
}

/// The client of a consumer: the given one, or a new one from the given client configuration
/// (its name servers replaced by `namesrv_addr` when that is given too) or on the given name
/// servers.
pub(crate) fn resolve_client(
    client: Option<Client>,
    namesrv_addr: Option<String>,
    config: Option<ClientConfig>,
) -> Result<(Client, bool)> {
    let config = match (namesrv_addr, config) {
        (Some(addr), Some(mut config)) => {
            config.namesrv_addr = addr;
            Some(config)
        }
        (Some(addr), None) => Some(ClientConfig::new(addr)),
        (None, config) => config.filter(|c| !c.namesrv_addr.is_empty()),
    };
    match (client, config) {
        (Some(client), _) => Ok((client, false)),
        (None, Some(config)) => Ok((Client::start(config)?, true)),
        (None, None) => Err(Error::Config {
            option: "namesrv_addr",
            value: "none".into(),
            allowed: "a name-server address or a client".into(),
        }),
    }
}

/// The namespace of a consumer on `client` configured with `configured` (see
/// [`Namespace::resolve`]); a client of the consumer's own is shut down when it is invalid.
pub(crate) async fn resolve_namespace(
    configured: Option<&str>,
    client: &Client,
    own_client: bool,
) -> Result<Namespace> {
    match Namespace::resolve(configured, client.namesrv_addr()) {
        Ok(namespace) => Ok(namespace),
        Err(e) => {
            if own_client {
                client.shutdown().await;
            }
            Err(e)
        }
    }
}

/// A running pull consumer. Cheap to clone, `Send + Sync`.
///
/// ```no_run
/// # async fn demo() -> rocketmq_actor::Result<()> {
/// use rocketmq_actor::pull::PullConsumer;
/// use rocketmq_actor::rpc::PullStatus;
/// let consumer = PullConsumer::builder()
///     .namesrv_addr("127.0.0.1:9876")
///     .group("my-group")
///     .start()
///     .await?;
/// for queue in consumer.fetch_subscribe_message_queues("TopicTest").await? {
///     let offset = consumer.fetch_consume_offset(&queue, false).await?.unwrap_or(0);
///     let result = consumer.pull_block_if_not_found(&queue, "*", offset, 32).await?;
///     if result.status == PullStatus::Found {
///         println!("{queue}: {} messages", result.messages.len());
///     }
///     consumer.update_consume_offset(&queue, result.next_begin_offset).await;
/// }
/// consumer.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PullConsumer {
    inner: Arc<PullConsumerInner>,
}

struct PullConsumerInner {
    client: Client,
    /// The group on the wire (in the namespace).
    group: Arc<str>,
    /// The configuration as the application gave it.
    config: PullConsumerConfig,
    member: Addr<Member>,
    offsets: Addr<OffsetStore>,
    retry_producer: Producer,
    /// Cancelled at shutdown: held long polls answer "nothing new" at once, later pulls fail.
    stopped: CancellationToken,
    /// Per queue, children of `stopped`: a queue's held long polls end when it is revoked.
    queue_stops: Mutex<HashMap<MessageQueue, CancellationToken>>,
    /// Queues from the application are wrapped with it; queues and messages to it unwrapped.
    namespace: Namespace,
}

impl PullConsumerInner {
    fn queue_stop(&self, queue: &MessageQueue) -> CancellationToken {
        let mut stops = self.queue_stops.lock().unwrap_or_else(|e| e.into_inner());
        stops
            .entry(queue.clone())
            .or_insert_with(|| self.stopped.child_token())
            .clone()
    }

    fn check_running(&self) -> Result<()> {
        if self.stopped.is_cancelled() {
            return Err(Error::Shutdown(format!(
                "the pull consumer of group {} was shut down",
                self.config.consumer_group
            )));
        }
        Ok(())
    }

    /// An application's queue as it is named on the wire.
    fn wire<'a>(&self, queue: &'a MessageQueue) -> std::borrow::Cow<'a, MessageQueue> {
        self.namespace.wrap_queue(queue)
    }

    /// A pull result with its messages' topics as the application names them.
    fn for_application(&self, mut result: PullResult) -> PullResult {
        for message in &mut result.messages {
            self.namespace.unwrap_received(message, None);
        }
        result
    }
}

impl std::fmt::Debug for PullConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullConsumer")
            .field("group", &self.inner.group)
            .field("client_id", &self.inner.client.client_id())
            .finish_non_exhaustive()
    }
}

/// A pull by SQL92 that a broker without property filtering refused ("The broker does not
/// support consumer to filter message by SQL92"), said as such (with the way to switch it
/// on); any other error as it came.
fn refused_selector(error: Error, request: &PullRequest, queue: &MessageQueue) -> Error {
    let selector = &request.subscription.selector;
    match &error {
        // Only the filtering refusal: SYSTEM_ERROR also answers a busy or failing broker.
        Error::Broker { code, remark, .. }
            if selector.is_sql()
                && code.0 == crate::protocol::codes::response_code::SYSTEM_ERROR
                && remark.contains("does not support consumer to filter") =>
        {
            Error::SelectorRefused {
                broker: queue.broker_name.clone(),
                group: request.group.to_string(),
                topic: queue.topic.clone(),
                expression: selector.expression().to_owned(),
                reason: crate::actors::client::selector_refusal_reason(code.0, remark),
            }
        }
        _ => error,
    }
}

impl PullConsumer {
    /// Starts building a pull consumer.
    pub fn builder() -> PullConsumerBuilder {
        PullConsumerBuilder {
            config: PullConsumerConfig::new(""),
            namesrv_addr: None,
            client: None,
            topics: Vec::new(),
            listener: None,
            reset_listener: None,
            client_config: None,
        }
    }

    pub(crate) fn from_parts(
        client: Client,
        config: PullConsumerConfig,
        member: Addr<Member>,
        offsets: Addr<OffsetStore>,
        namespace: Namespace,
    ) -> Self {
        let retry_producer = Producer::new(
            client.clone(),
            ProducerConfig {
                group: "CLIENT_INNER_PRODUCER".into(),
                ..ProducerConfig::default()
            },
        );
        PullConsumer {
            inner: Arc::new(PullConsumerInner {
                group: namespace.wrap(&config.consumer_group).as_ref().into(),
                client,
                config,
                member,
                offsets,
                retry_producer,
                stopped: CancellationToken::new(),
                queue_stops: Mutex::new(HashMap::new()),
                namespace,
            }),
        }
    }

    /// Ends the long polls held for `queue` now (they answer "nothing new"): its task is being
    /// stopped and must not wait out a 20 s suspend.
    pub(crate) fn end_long_polls(&self, queue: &MessageQueue) {
        let stop = self
            .inner
            .queue_stops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(queue);
        if let Some(stop) = stop {
            stop.cancel();
        }
    }

    /// Ends every held long poll; pulls after this fail with [`Error::Shutdown`].
    pub(crate) fn end_all_long_polls(&self) {
        self.inner.stopped.cancel();
    }

    /// The consumer group (as configured: without the namespace).
    pub fn group(&self) -> &str {
        &self.inner.config.consumer_group
    }

    /// The client id brokers know this consumer by.
    pub fn client_id(&self) -> &str {
        self.inner.client.client_id()
    }

    /// The base client this consumer runs on.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The configuration.
    pub fn config(&self) -> &PullConsumerConfig {
        &self.inner.config
    }

    /// The readable queues of `topic`, asked of the name servers now. Their brokers are
    /// heartbeated at once, so they count this consumer as a live member of its group (and push
    /// it offset resets) even for a topic it does not subscribe to.
    pub async fn fetch_subscribe_message_queues(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        let namespace = &self.inner.namespace;
        let queues = self
            .inner
            .client
            .fetch_subscribe_message_queues(&namespace.wrap(topic))
            .await?;
        // Awaited: a commit right after must find the group known to the broker.
        let _ = self.inner.member.send(HeartbeatNow).await;
        Ok(namespace.unwrap_queues(queues))
    }

    /// The queues of `topic` this member owns now (all of them when broadcasting).
    pub async fn message_queues_divided(&self, topic: &str) -> Vec<MessageQueue> {
        let namespace = &self.inner.namespace;
        let divided = self
            .inner
            .member
            .send(Divided(namespace.wrap(topic).into_owned()))
            .await
            .unwrap_or_default();
        namespace.unwrap_queues(divided)
    }

    /// Re-divides the subscribed topics now (it also happens every `rebalance_interval`).
    pub async fn rebalance(&self) {
        let _ = self.inner.member.send(Rebalance).await;
    }

    /// The pull of `queue` by `selector`, whose SQL92 syntax is checked before anything goes
    /// on the wire.
    fn request(
        &self,
        queue: &MessageQueue,
        selector: Selector,
        offset: i64,
        max: i32,
    ) -> Result<PullRequest> {
        validate_selector(&queue.topic, &selector)?;
        let queue = self.inner.wire(queue).into_owned();
        let mut request = PullRequest::new(self.inner.group.clone(), queue, offset)
            .subscription(Subscription::new(selector, 0))
            .max_messages(max);
        request.timeout = self.inner.config.consumer_pull_timeout;
        Ok(request)
    }

    /// Pulls up to `max` messages of `queue` from `offset` that `selector` selects: a tag
    /// expression (`"*"`, `"TagA || TagB"`, tags re-filtered exactly) or
    /// [`Selector::sql`]; answers at once when nothing is there.
    ///
    /// A SQL92 selector with a syntax error fails with [`Error::InvalidSelector`] before
    /// anything is sent; a broker without property filtering answers every such pull with
    /// an error naming `enablePropertyFilter`.
    pub async fn pull(
        &self,
        queue: &MessageQueue,
        selector: impl Into<Selector>,
        offset: i64,
        max: i32,
    ) -> Result<PullResult> {
        self.inner.check_running()?;
        let request = self.request(queue, selector.into(), offset, max)?;
        let result = self.inner.client.pull(&request).await;
        let result = result.map_err(|e| refused_selector(e, &request, queue))?;
        Ok(self.inner.for_application(result))
    }

    /// Like [`PullConsumer::pull`], but the broker holds the request up to
    /// `broker_suspend_max_time` until a message arrives (long polling). At shutdown (or when a
    /// schedule service's task of the queue is stopped) a held poll answers
    /// [`PullStatus::NoNewMsg`](crate::rpc::PullStatus) at once with `next_begin_offset =
    /// offset`, so the caller moves nothing on.
    pub async fn pull_block_if_not_found(
        &self,
        queue: &MessageQueue,
        selector: impl Into<Selector>,
        offset: i64,
        max: i32,
    ) -> Result<PullResult> {
        self.inner.check_running()?;
        let mut request = self.request(queue, selector.into(), offset, max)?;
        request.suspend = Some(self.inner.config.broker_suspend_max_time);
        request.timeout = self.inner.config.consumer_timeout_when_suspend;
        let stop = self.inner.queue_stop(&request.queue);
        tokio::select! {
            biased;
            result = self.inner.client.pull(&request) => {
                result
                    .map(|result| self.inner.for_application(result))
                    .map_err(|e| refused_selector(e, &request, queue))
            }
            // Shutdown or revocation: nothing is consumed, the offset stays where it was (the
            // broker's late answer is dropped with the request).
            () = stop.cancelled() => Ok(PullResult::nothing_new(offset)),
        }
    }

    /// The group's consume offset of `queue`: from memory first, then from the store (broker or
    /// local file) — or from the store only with `from_store`. `None` when none is stored.
    pub async fn fetch_consume_offset(
        &self,
        queue: &MessageQueue,
        from_store: bool,
    ) -> Result<Option<i64>> {
        let queue = &*self.inner.wire(queue);
        if !from_store {
            if let Some(offset) = self.inner.offsets.send(ReadOffset(queue.clone())).await? {
                return Ok(Some(offset));
            }
        }
        let stored = self
            .inner
            .offsets
            .send(LoadOffset {
                queue: queue.clone(),
                exact: true,
            })
            .await?;
        match stored {
            StoredOffset::Found(offset) => {
                self.inner.offsets.do_send(CacheOffset {
                    queue: queue.clone(),
                    offset,
                });
                Ok(Some(offset))
            }
            StoredOffset::NotFound => Ok(None),
            StoredOffset::Unavailable => Err(Error::OffsetUnavailable(queue.to_string())),
        }
    }

    /// Sets the group's consume offset of `queue` (up or down) in memory; it is persisted with
    /// the next periodic persist, at shutdown, or by [`PullConsumer::persist_consume_offsets`].
    pub async fn update_consume_offset(&self, queue: &MessageQueue, offset: i64) {
        let _ = self
            .inner
            .offsets
            .send(StoreOffset {
                queue: self.inner.wire(queue).into_owned(),
                offset,
            })
            .await;
    }

    /// Sets an offset in memory without waiting (a reset re-applied by a pull task).
    pub(crate) fn store_offset(&self, queue: &MessageQueue, offset: i64) {
        self.inner.offsets.do_send(StoreOffset {
            queue: queue.clone(),
            offset,
        });
    }

    /// Persists every offset now and waits until the store has each: an error names the first
    /// that could not be written.
    pub async fn persist_consume_offsets(&self) -> Result<()> {
        self.inner.offsets.send(PersistAll).await?
    }

    /// The offset of the first message stored at or after `timestamp_ms`.
    pub async fn search_offset(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<i64> {
        let queue = self.inner.wire(queue);
        self.inner.client.search_offset(&queue, timestamp_ms).await
    }

    /// The queue's smallest stored offset.
    pub async fn min_offset(&self, queue: &MessageQueue) -> Result<i64> {
        self.inner.client.min_offset(&self.inner.wire(queue)).await
    }

    /// The queue's end offset (one past its last message).
    pub async fn max_offset(&self, queue: &MessageQueue) -> Result<i64> {
        self.inner.client.max_offset(&self.inner.wire(queue)).await
    }

    /// The store time of the queue's oldest message.
    pub async fn earliest_msg_store_time(&self, queue: &MessageQueue) -> Result<i64> {
        let queue = self.inner.wire(queue);
        self.inner.client.earliest_msg_store_time(&queue).await
    }

    /// Hands `message` back for redelivery through the group's retry topic after
    /// `delay_level` (0 = by its reconsume count): CONSUMER_SEND_MSG_BACK, or, if the broker
    /// refuses, a send to `%RETRY%<group>` (as Java does).
    pub async fn send_message_back(&self, message: &MessageExt, delay_level: i32) -> Result<()> {
        // The application has the message with its topic unwrapped: back on the wire it goes.
        let message = &*self.inner.namespace.wire_message(message);
        let queue = MessageQueue::new(message.topic(), &*message.broker_name, message.queue_id);
        let max = self.inner.config.max_reconsume_times;
        let back = self
            .inner
            .client
            .send_message_back(
                &self.inner.group,
                &queue,
                message,
                delay_level,
                max,
                SEND_BACK_TIMEOUT,
            )
            .await;
        match back {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::warn!(%queue, offset = message.queue_offset, error = %e, "send-back failed; sending to the retry topic");
                let retry = build_retry_message(message, &self.inner.group, max);
                self.inner.retry_producer.send(retry).await.map(|_| ())
            }
        }
    }

    /// Ends held long polls (they answer "nothing new"), persists every offset, leaves the
    /// group and stops. Other clones of the handle stop working: their pulls fail with
    /// [`Error::Shutdown`].
    pub async fn shutdown(&self) {
        self.end_all_long_polls();
        let _ = self.inner.member.send(Leave).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn handles_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PullConsumer>();
        fn assert_send<T: Send>() {}
        assert_send::<PullConsumerBuilder>();
    }

    #[test]
    fn the_consumer_timeout_must_exceed_the_suspend_time() {
        let mut config = PullConsumerConfig::new("g");
        config.broker_suspend_max_time = Duration::from_secs(40);
        assert!(config.validate().is_err());
    }
}
