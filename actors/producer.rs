//! The producer: a cloneable handle that sends messages through the shared client instance.
//!
//! It is not an actor of its own: sends are independent requests, so each `send` goes straight to
//! the connection actor of the chosen broker, and any number of sends may be in flight at once
//! (pipelined on one connection per broker). Failed sends are retried on another broker.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::Either;

use crate::actors::client::Client;
use crate::actors::connection;
use crate::actors::now_ms;
use crate::consumer::retry::is_retry_topic;
use crate::error::{Error, Result};
use crate::filter::java_hash_code;
use crate::hooks::{guarded, Hooks, SendHook, SendHookContext};
use crate::message::{
    self, property, sys_flag, CompressionType, Message, MessageQueue, Topic, UniqueIdGenerator,
};
use crate::namespace::Namespace;
pub use crate::producer::{SendResult, SendStatus};
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::command::RequestFrame;
use crate::protocol::header::{
    SendMessageRequestHeader, SendMessageRequestHeaderFields, SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
};
use crate::protocol::RemotingCommand;
use crate::route::TopicRoute;
use crate::rpc::broker_error;

/// The topic whose route a producer borrows to reach a broker that will auto-create a new topic.
pub const AUTO_CREATE_TOPIC_KEY: &str = "TBW102";

/// First pause before a send is retried on a broker that could not be reached.
const RECONNECT_PAUSE_INITIAL: Duration = Duration::from_millis(50);
/// Longest pause between such retries.
const RECONNECT_PAUSE_MAX: Duration = Duration::from_millis(500);
/// The least time one attempt gets, however little of the send's time is left.
const MIN_ATTEMPT_TIME: Duration = Duration::from_millis(100);

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Producer group (informational for brokers; needed for transactions).
    pub group: String,
    /// Time a send may take, retries included (as Java's `sendMsgTimeout`). A send whose
    /// broker cannot be reached (restarting, connection lost) is retried, after a short pause,
    /// until this much time has passed since it began.
    pub send_timeout: Duration,
    /// How many times a failed send is retried at once on another broker (Java: 2) before
    /// retries wait for a broker to come back.
    pub retry_times: u32,
    /// Bodies larger than this are zlib-compressed (Java: 4 KiB).
    pub compress_over: usize,
    /// Largest accepted body (Java: 4 MiB).
    pub max_message_size: usize,
    /// Queue count a broker gives a topic it auto-creates.
    pub default_topic_queue_nums: i32,
    /// Hooks run before and after each send attempt, in order (see [`SendHook`]).
    pub send_hooks: Hooks<dyn SendHook>,
    /// The namespace (Java `ClientConfig.namespace`): message topics, queue topics and the
    /// producer group are prefixed with `namespace%` on the wire, and the queue of a
    /// [`SendResult`] comes back without it (see [`crate::namespace`]). `None` or blank: the
    /// one of an `MQ_INST_…` name-server address, else none. Checked by
    /// [`ProducerConfig::validate`]; a producer with an invalid one fails every send.
    pub namespace: Option<String>,
}

impl ProducerConfig {
    /// Adds a hook run before and after each send attempt (after those added before).
    pub fn with_send_hook(mut self, hook: Arc<dyn SendHook>) -> Self {
        self.send_hooks.push(hook);
        self
    }

    /// Checks the options a producer cannot work without (the namespace's characters).
    pub fn validate(&self) -> Result<()> {
        if let Some(namespace) = &self.namespace {
            crate::namespace::validate(namespace)?;
        }
        Ok(())
    }
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            group: "DEFAULT_PRODUCER".into(),
            send_timeout: Duration::from_secs(3),
            retry_times: 2,
            compress_over: 4 * 1024,
            max_message_size: 4 * 1024 * 1024,
            default_topic_queue_nums: 8,
            send_hooks: Hooks::new(),
            namespace: None,
        }
    }
}

/// A send request as it goes to the connection: pre-encoded (the fast path), or typed, for the
/// client's request hooks (and ACL signing) to see and change.
enum SendRequest {
    Frame(RequestFrame),
    Command(RemotingCommand),
}

/// A send's body and the header fields that come with it rather than from the message.
#[derive(Clone, Copy)]
struct Encoding<'a> {
    body: &'a [u8],
    sys_flag: i32,
    batch: bool,
    born_ms: i64,
}

/// A send on its way: queued on the connection, its answer to come on `response`, or a call
/// still to be awaited.
enum PendingSend<'a> {
    Queued {
        response: tokio::sync::oneshot::Receiver<Result<RemotingCommand>>,
        code: i32,
    },
    Waiting(std::pin::Pin<Box<dyn Future<Output = Result<RemotingCommand>> + Send + 'a>>),
}

/// What the send hooks are shown of an attempt.
fn send_hook_context<'a>(
    config: &'a ProducerConfig,
    messages: &'a [Message],
    queue: &'a MessageQueue,
    broker_addr: &'a str,
    batch: bool,
) -> SendHookContext<'a> {
    SendHookContext {
        group: &config.group,
        messages,
        queue,
        broker_addr,
        batch,
    }
}

enum QueueChoice<'a> {
    RoundRobin,
    Exact(std::borrow::Cow<'a, MessageQueue>),
    Hash(u32),
}

struct ProducerShared {
    /// Routes and connections come from the client's shared cache: no copy of them here.
    client: Client,
    config: ProducerConfig,
    next_queue: AtomicUsize,
    ids: UniqueIdGenerator,
    /// Topics are wrapped with it on the way out, the queue of a result unwrapped.
    namespace: Namespace,
    /// The configured namespace when it is invalid: every send fails with its error.
    invalid_namespace: Option<String>,
    metrics: crate::metrics::ProducerMetrics,
}

/// Sends messages. Cheap to clone; clones share routes and the id generator.
///
/// ```no_run
/// # async fn demo() -> rocketmq_actor::Result<()> {
/// use rocketmq_actor::{Client, ClientConfig};
/// use rocketmq_actor::{Producer, ProducerConfig};
/// use rocketmq_actor::Message;
/// let client = Client::start(ClientConfig::new("127.0.0.1:9876"))?;
/// let producer = Producer::new(client, ProducerConfig::default());
/// let sent = producer.send(Message::new("TopicTest", "hello").with_tags("TagA")).await?;
/// println!("{} at {:?} offset {}", sent.msg_id, sent.queue, sent.queue_offset);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Producer {
    shared: Arc<ProducerShared>,
}

impl Producer {
    /// A producer sending through `client`. With a namespace that does not validate
    /// ([`ProducerConfig::validate`]), every send fails with the configuration error.
    pub fn new(client: Client, config: ProducerConfig) -> Self {
        let ids = UniqueIdGenerator::from_system(client.client_ip());
        let mut config = config;
        let (namespace, invalid_namespace) =
            match Namespace::resolve(config.namespace.as_deref(), client.namesrv_addr()) {
                Ok(namespace) => (namespace, None),
                Err(_) => (Namespace::none(), config.namespace.clone()),
            };
        // The group on the wire, as Java's `start()` wraps it.
        if let std::borrow::Cow::Owned(group) = namespace.wrap(&config.group) {
            config.group = group;
        }
        Producer {
            shared: Arc::new(ProducerShared {
                client,
                config,
                next_queue: AtomicUsize::new(0),
                ids,
                namespace,
                invalid_namespace,
                metrics: Default::default(),
            }),
        }
    }

    /// The error of an invalid configured namespace, if it is one.
    fn check_namespace(&self) -> Result<()> {
        match &self.shared.invalid_namespace {
            Some(namespace) => crate::namespace::validate(namespace),
            None => Ok(()),
        }
    }

    /// `topic` as it goes on the wire.
    fn wire_topic(&self, topic: &mut Topic) {
        if let std::borrow::Cow::Owned(wrapped) = self.shared.namespace.wrap(topic) {
            *topic = wrapped.into();
        }
    }

    /// Sends to a queue chosen round-robin; on failure retries on another broker.
    ///
    /// (A plain function returning the future, rather than an `async fn`, so the message is
    /// not stored twice in it: callers keep many sends in flight, each future on the heap.)
    pub fn send(&self, message: Message) -> impl Future<Output = Result<SendResult>> + '_ {
        self.send_with_choice(message, QueueChoice::RoundRobin)
    }

    /// Sends to exactly `queue` (no retry on another queue: the caller chose it).
    pub fn send_to_queue<'a>(
        &'a self,
        message: Message,
        queue: &'a MessageQueue,
    ) -> impl Future<Output = Result<SendResult>> + 'a {
        let queue = self.shared.namespace.wrap_queue(queue);
        self.send_with_choice(message, QueueChoice::Exact(queue))
    }

    /// Sends to the queue selected by a hash of `key`, so every message with the same key lands
    /// in the same queue (in order) while the topic's queue set is unchanged. The key is also
    /// added to the message's KEYS when not already there.
    pub async fn send_with_key(&self, mut message: Message, key: &str) -> Result<SendResult> {
        if !message.keys().contains(&key) {
            let mut keys: Vec<String> = message.keys().into_iter().map(str::to_owned).collect();
            keys.push(key.to_owned());
            message = message.with_keys(keys);
        }
        let hash = java_hash_code(key).unsigned_abs();
        self.send_with_choice(message, QueueChoice::Hash(hash))
            .await
    }

    /// Sends several messages of one topic as one batch to one queue.
    pub async fn send_batch(&self, messages: Vec<Message>) -> Result<SendResult> {
        self.check_namespace()?;
        let Some(first) = messages.first() else {
            return Err(invalid_message("a batch needs at least one message"));
        };
        let mut topic = first.topic.clone();
        if messages.iter().any(|m| m.topic != topic) {
            return Err(invalid_message(
                "every message of a batch must have the same topic",
            ));
        }
        let mut messages = messages;
        let mut ids = Vec::with_capacity(messages.len());
        let born_ms = now_ms();
        for message in &mut messages {
            self.validate(message)?;
            ids.push(self.ensure_unique_id(message, born_ms));
        }
        let body = message::encode_batch_body(&messages);
        if body.len() > self.shared.config.max_message_size {
            return Err(invalid_message(&format!(
                "batch of {} bytes exceeds max_message_size {}",
                body.len(),
                self.shared.config.max_message_size
            )));
        }
        self.wire_topic(&mut topic);
        let template = Message::new(topic, Bytes::new());
        let encoding = Encoding {
            body: &body,
            sys_flag: 0,
            batch: true,
            born_ms,
        };
        self.send_prepared(
            &messages,
            &template,
            encoding,
            QueueChoice::RoundRobin,
            ids.join(","),
        )
        .await
    }

    fn validate(&self, message: &Message) -> Result<()> {
        if message.topic.is_empty() {
            return Err(invalid_message("the topic is empty"));
        }
        if message.body.is_empty() {
            return Err(invalid_message("the body is empty"));
        }
        if message.body.len() > self.shared.config.max_message_size {
            return Err(invalid_message(&format!(
                "body of {} bytes exceeds max_message_size {}",
                message.body.len(),
                self.shared.config.max_message_size
            )));
        }
        Ok(())
    }

    /// The message's unique id, generated (for a message born at `born_ms`) unless it has one.
    fn ensure_unique_id(&self, message: &mut Message, born_ms: i64) -> String {
        if let Some(id) = message.properties.get(property::UNIQ_KEY) {
            return id.to_owned();
        }
        let id = self.shared.ids.next_id(born_ms);
        message.properties.insert_absent(property::UNIQ_KEY, &id);
        id
    }

    fn send_with_choice<'a>(
        &'a self,
        mut message: Message,
        choice: QueueChoice<'a>,
    ) -> impl Future<Output = Result<SendResult>> + 'a {
        if let Err(e) = self
            .check_namespace()
            .and_then(|()| self.validate(&message))
        {
            return Either::Left(std::future::ready(Err(e)));
        }
        self.wire_topic(&mut message.topic);
        // One wall-clock read per send: the id and the born timestamp share it.
        let born_ms = now_ms();
        let unique_id = self.ensure_unique_id(&mut message, born_ms);
        let compressed = if message.body.len() > self.shared.config.compress_over {
            // Java's producer compresses with zlib at level 5.
            message::compress(CompressionType::Zlib, &message.body, 5).ok()
        } else {
            None
        };
        // The block only borrows what it captured, so each value is stored in it once.
        Either::Right(async move {
            let (body, sys_flag): (&[u8], i32) = match &compressed {
                Some(compressed) => (
                    compressed,
                    sys_flag::COMPRESSED | sys_flag::COMPRESSION_ZLIB,
                ),
                None => (&message.body, 0),
            };
            let encoding = Encoding {
                body,
                sys_flag,
                batch: false,
                born_ms,
            };
            self.send_prepared(
                std::slice::from_ref(&message),
                &message,
                encoding,
                choice,
                unique_id,
            )
            .await
        })
    }

    /// Sends `encoding`'s body (the message's, or a batch's) with `message`'s header, retrying
    /// as the choice allows; `messages` are what the send hooks are shown, `msg_id` the id the
    /// caller gets.
    // A function returning an async block rather than an `async fn`: the block keeps each
    // argument once, where an `async fn`'s future keeps a second copy of every one. A send's
    // future is stored whole by whatever holds the sends in flight.
    #[allow(clippy::manual_async_fn)]
    fn send_prepared<'a>(
        &'a self,
        messages: &'a [Message],
        message: &'a Message,
        encoding: Encoding<'a>,
        choice: QueueChoice<'a>,
        mut msg_id: String,
    ) -> impl Future<Output = Result<SendResult>> + 'a {
        async move {
            let batch = encoding.batch;
            let config = &self.shared.config;
            let hooks = &config.send_hooks;
            let attempts = match choice {
                QueueChoice::RoundRobin => config.retry_times + 1,
                _ => 1,
            };
            let started = tokio::time::Instant::now();
            let deadline = started + config.send_timeout;
            let mut pause = RECONNECT_PAUSE_INITIAL;
            let mut failed_broker: Option<String> = None;
            let mut attempt = 0;
            loop {
                let route = self.publish_route(&message.topic, attempt > 0).await?;
                // Borrowed from the route (or the caller): a send copies no queue or address.
                let queue: &MessageQueue = match &choice {
                    QueueChoice::Exact(queue) => queue.as_ref(),
                    QueueChoice::Hash(hash) => {
                        let queues = &route.produce_queues;
                        if queues.is_empty() {
                            return Err(Error::TopicRouteNotFound(message.topic.to_string()));
                        }
                        &queues[*hash as usize % queues.len()]
                    }
                    QueueChoice::RoundRobin => self.pick_queue(&route, failed_broker.as_deref())?,
                };
                let Some(addr) = route.master_addr(&queue.broker_name) else {
                    return Err(Error::TopicRouteNotFound(format!(
                        "{} (no master for {})",
                        message.topic, queue.broker_name
                    )));
                };
                // The first attempt has the whole send timeout, timed from the clock read
                // above; a later one what is left of it, but at least MIN_ATTEMPT_TIME.
                let (attempt_started, attempt_deadline, attempt_timeout) = if attempt == 0 {
                    let first = config.send_timeout.max(MIN_ATTEMPT_TIME);
                    (started, started + first, first)
                } else {
                    let now = tokio::time::Instant::now();
                    let left = deadline
                        .saturating_duration_since(now)
                        .max(MIN_ATTEMPT_TIME);
                    (now, now + left, left)
                };
                if !hooks.is_empty() {
                    let context = send_hook_context(config, messages, queue, addr, batch);
                    for hook in hooks.iter() {
                        guarded("send", || hook.before_send(&context));
                    }
                }
                let pending = self.start_send(addr, queue, message, encoding, attempt_timeout)?;
                let answer = match pending {
                    PendingSend::Queued { response, code } => connection::settle_reply(
                        tokio::time::timeout_at(attempt_deadline, response).await,
                        || addr.to_owned(),
                        code,
                        attempt_timeout,
                    ),
                    PendingSend::Waiting(call) => call.await,
                };
                let mut outcome =
                    answer.and_then(|response| self.send_result(addr, queue, batch, response));
                self.shared.metrics.attempt(
                    &queue.broker_name,
                    messages.len().max(1),
                    outcome.is_ok(),
                    attempt_started.elapsed(),
                );
                if let Ok(result) = &mut outcome {
                    // A success ends the loop: the id moves into the result, no copy per send.
                    result.msg_id = std::mem::take(&mut msg_id);
                }
                if !hooks.is_empty() {
                    let context = send_hook_context(config, messages, queue, addr, batch);
                    for hook in hooks.iter() {
                        guarded("send", || hook.after_send(&context, outcome.as_ref()));
                    }
                }
                let error = match outcome {
                    Ok(result) => return Ok(result),
                    Err(e) if is_retriable(&e) => e,
                    Err(e) => return Err(e),
                };
                attempt += 1;
                if attempt < attempts {
                    tracing::debug!(broker = %queue.broker_name, error = %error, "send failed, retrying on another broker");
                    failed_broker = Some(queue.broker_name.clone());
                    continue;
                }
                // Every broker tried: a broker that cannot be reached may be restarting, so
                // the send waits for it (reconnecting, re-reading the route) while its time
                // lasts.
                let now = tokio::time::Instant::now();
                if !error.is_transport() || now + pause >= deadline {
                    return Err(error);
                }
                tracing::debug!(broker = %queue.broker_name, error = %error, ?pause, "send failed; retrying once the broker is back");
                Box::pin(tokio::time::sleep(pause)).await;
                pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
                failed_broker = None;
            }
        }
    }

    /// Encodes the send of `message` to `queue` and puts it on its way to `addr`: straight
    /// onto the broker's connection when that can take it now, the usual case, whose answer
    /// the caller then awaits itself; otherwise as a boxed call that waits for the connection
    /// (or for room in its mailbox), or that request hooks must see as a command.
    fn start_send<'a>(
        &'a self,
        addr: &'a str,
        queue: &MessageQueue,
        message: &Message,
        encoding: Encoding<'_>,
        timeout: Duration,
    ) -> Result<PendingSend<'a>> {
        let client = &self.shared.client;
        // With request hooks (or ACL) the request must be a typed command they can see.
        let typed = !client.request_hooks().is_empty();
        Ok(match self.encode_send(queue, message, encoding, typed)? {
            SendRequest::Frame(frame) => {
                let code = frame.code();
                match client.try_enqueue_encoded(addr, frame) {
                    Ok(response) => PendingSend::Queued { response, code },
                    Err(frame) => {
                        PendingSend::Waiting(Box::pin(client.call_encoded(addr, frame, timeout)))
                    }
                }
            }
            SendRequest::Command(command) => {
                PendingSend::Waiting(Box::pin(client.request(addr, command, timeout)))
            }
        })
    }

    fn pick_queue<'r>(
        &self,
        route: &'r TopicRoute,
        avoid_broker: Option<&str>,
    ) -> Result<&'r MessageQueue> {
        let queues = &route.produce_queues;
        if queues.is_empty() {
            return Err(Error::TopicRouteNotFound(route.topic.clone()));
        }
        let start = self.shared.next_queue.fetch_add(1, Ordering::Relaxed);
        let pick = (0..queues.len())
            .map(|i| &queues[(start + i) % queues.len()])
            .find(|q| Some(q.broker_name.as_str()) != avoid_broker)
            .unwrap_or(&queues[start % queues.len()]);
        Ok(pick)
    }

    /// The SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE) request of `message` for `queue`: a frame
    /// written straight from the message's fields, or (`typed`) the same request as a command.
    fn encode_send(
        &self,
        queue: &MessageQueue,
        message: &Message,
        encoding: Encoding<'_>,
        typed: bool,
    ) -> Result<SendRequest> {
        let Encoding {
            body,
            sys_flag,
            batch,
            born_ms,
        } = encoding;
        let config = &self.shared.config;
        // Like Java's producer: for a retry topic the reconsume bookkeeping travels in the
        // header, where the broker reads it to route the message to the dead-letter queue.
        // Only then are the properties copied; otherwise their text goes out as it is.
        let mut retry_properties;
        let (properties, reconsume_times, max_reconsume_times) = if is_retry_topic(&message.topic) {
            retry_properties = message.properties.clone();
            let times = retry_properties
                .remove(property::RECONSUME_TIME)
                .and_then(|v| v.parse::<i32>().ok());
            let max = retry_properties
                .remove(property::MAX_RECONSUME_TIMES)
                .and_then(|v| v.parse::<i32>().ok());
            (retry_properties.wire_text(), times, max)
        } else {
            (message.properties.wire_text(), None, None)
        };
        let header = SendMessageRequestHeaderFields {
            producer_group: &config.group,
            topic: &message.topic,
            default_topic: AUTO_CREATE_TOPIC_KEY,
            default_topic_queue_nums: config.default_topic_queue_nums,
            queue_id: queue.queue_id,
            sys_flag,
            born_timestamp: born_ms,
            flag: message.flag,
            properties: &properties,
            reconsume_times: reconsume_times.unwrap_or(0),
            unit_mode: false,
            max_reconsume_times,
            batch,
            bname: &queue.broker_name,
        };
        let code = if batch {
            request_code::SEND_BATCH_MESSAGE
        } else {
            request_code::SEND_MESSAGE_V2
        };
        if typed {
            let header = SendMessageRequestHeaderV2(SendMessageRequestHeader::from(&header));
            return Ok(SendRequest::Command(
                RemotingCommand::request_with_header(code, &header)
                    .with_body(Bytes::copy_from_slice(body)),
            ));
        }
        Ok(SendRequest::Frame(RequestFrame::json(code, body, |ext| {
            header.write_v2(ext)
        })?))
    }

    /// What the broker's `response` to a send of a message to `queue` at `addr` means for the
    /// caller.
    fn send_result(
        &self,
        addr: &str,
        queue: &MessageQueue,
        batch: bool,
        response: RemotingCommand,
    ) -> Result<SendResult> {
        let status = match response.code {
            response_code::SUCCESS => SendStatus::SendOk,
            response_code::FLUSH_DISK_TIMEOUT => SendStatus::FlushDiskTimeout,
            response_code::FLUSH_SLAVE_TIMEOUT => SendStatus::FlushSlaveTimeout,
            response_code::SLAVE_NOT_AVAILABLE => SendStatus::SlaveNotAvailable,
            _ => {
                let request = if batch {
                    request_code::SEND_BATCH_MESSAGE
                } else {
                    request_code::SEND_MESSAGE_V2
                };
                return Err(broker_error(addr, request, response));
            }
        };
        let header: SendMessageResponseHeader = response.decode_header()?;
        Ok(SendResult {
            status,
            msg_id: String::new(),
            offset_msg_id: header.msg_id,
            queue: MessageQueue::new(
                self.shared.namespace.unwrap(&queue.topic),
                &queue.broker_name,
                header.queue_id,
            ),
            queue_offset: header.queue_offset,
        })
    }

    /// The route used to publish to `topic`; when the topic does not exist yet, the route of
    /// [`AUTO_CREATE_TOPIC_KEY`] so a broker auto-creates it on the first send.
    /// The client refreshes cached routes every `poll_name_server_interval`.
    async fn publish_route(&self, topic: &str, refresh: bool) -> Result<Arc<TopicRoute>> {
        let cached = self.shared.client.cached_route(topic);
        if let Some(route) = &cached {
            if !refresh && !route.produce_queues.is_empty() {
                return Ok(route.clone());
            }
        }
        // Boxed: the name-server round trips would otherwise inflate every send's future.
        Box::pin(self.fetch_publish_route(topic, cached)).await
    }

    async fn fetch_publish_route(
        &self,
        topic: &str,
        cached: Option<Arc<TopicRoute>>,
    ) -> Result<Arc<TopicRoute>> {
        let client = &self.shared.client;
        let fetched = match client.refresh_route(topic).await {
            Ok(route) if !route.produce_queues.is_empty() => Ok(route),
            Ok(_) | Err(Error::TopicRouteNotFound(_)) => {
                match client.route(AUTO_CREATE_TOPIC_KEY).await {
                    Ok(template) => {
                        let route = Arc::new(auto_create_route(
                            topic,
                            &template,
                            self.shared.config.default_topic_queue_nums,
                        ));
                        // Until the name servers know the topic, sends use this route.
                        client.cache_route(route.clone());
                        Ok(route)
                    }
                    Err(Error::TopicRouteNotFound(_)) => {
                        Err(Error::TopicRouteNotFound(topic.to_owned()))
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        match (fetched, cached) {
            (Ok(route), _) => Ok(route),
            // A name server hiccup must not fail sends while a known route still works.
            (Err(e), Some(stale)) if !stale.produce_queues.is_empty() => {
                tracing::debug!(%topic, error = %e, "route refresh failed; using the cached route");
                Ok(stale)
            }
            (Err(e), _) => Err(e),
        }
    }
}

/// The route of a not-yet-existing `topic` derived from the auto-create template route: the
/// template's writable brokers, each with at most `queue_nums` queues.
fn auto_create_route(topic: &str, template: &TopicRoute, queue_nums: i32) -> TopicRoute {
    let mut data = template.data.clone();
    for queue_data in &mut data.queue_datas {
        queue_data.write_queue_nums = queue_data.write_queue_nums.min(queue_nums);
        queue_data.read_queue_nums = queue_data.read_queue_nums.min(queue_nums);
    }
    TopicRoute::new(topic, data)
}

fn is_retriable(error: &Error) -> bool {
    match error {
        e if e.is_transport() => true,
        Error::Broker { code, .. } => matches!(
            code.0,
            response_code::TOPIC_NOT_EXIST
                | response_code::SERVICE_NOT_AVAILABLE
                | response_code::SYSTEM_ERROR
                | response_code::SYSTEM_BUSY
                | response_code::NO_PERMISSION
        ),
        _ => false,
    }
}

fn invalid_message(why: &str) -> Error {
    Error::InvalidMessage(why.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles only while every kind of send is a future that may move between threads, as
    /// a task of a multi-threaded runtime must.
    #[allow(dead_code)]
    fn sends_are_send(producer: &Producer, queue: &MessageQueue, batch: Vec<Message>) {
        fn assert_send<T: Send>(_: &T) {}
        assert_send(&producer.send(Message::new("T", "m")));
        assert_send(&producer.send_to_queue(Message::new("T", "m"), queue));
        assert_send(&producer.send_with_key(Message::new("T", "m"), "k"));
        assert_send(&producer.send_batch(batch));
    }
}
