//! The lite pull consumer (Java `DefaultLitePullConsumer`): queues are pulled in the
//! background into a bounded buffer; the application takes messages with `poll` or as a
//! `Stream`, seeks, pauses, and commits what it has taken.
//!
//! Shape: a [`LiteRoot`] actor owns the buffer, the per-queue positions (the offset after the
//! last message `poll` returned, the "consumed" offset) and the flow-control counts; a
//! [`LiteQueue`] actor per assigned queue loops: ask the root for admission (flow control,
//! pause) → `Client::pull` → deliver to the root. Every seek, pause or reset bumps the queue's
//! epoch, so a pull already under way when it happened is discarded on delivery. Queues come
//! from `assign`, or from the group's division (`subscribe`, through the [`Member`] actor).
//!
//! At-least-once: only the offsets of messages `poll` has returned are ever committed —
//! automatically (at the next poll after `auto_commit_interval`, and at shutdown) or by
//! `commit_sync` / `commit`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::oneshot;

use crate::actors::client::Client;
use crate::actors::consumer::StopActor;
use crate::actors::member::{
    Leave, Member, MemberSpec, OffsetsReset, QueueChange, RecipientQueueListener,
};
use crate::actors::offset_store::{
    LoadOffset, OffsetStore, PersistAll, PersistAndRemove, ReadOffset, StoreOffset,
};
use crate::actors::pull_consumer::{resolve_client, resolve_namespace};
use crate::actors::runtime;
use crate::consumer::config::validate_selector;
use crate::consumer::config::{ConsumeFromWhere, MessageModel};
use crate::consumer::lite_core::{
    Admission, Delivery, LiteAction, LiteCore, LiteNote, SlotId, Taken, TakenMark,
};
use crate::consumer::offset::StoredOffset;
use crate::consumer::pull_config::LitePullConsumerConfig;
use crate::error::{Error, Result};
use crate::filter::Selector;
use crate::message::{MessageExt, MessageQueue};
use crate::namespace::Namespace;
use crate::rpc::PullRequest;

/// Wait before retrying a queue whose start offset could not be read.
const START_RETRY_DELAY: Duration = Duration::from_secs(1);

/// Told a subscribed topic's queue set whenever it changes (Java
/// `TopicMessageQueueChangeListener`), checked every `topic_metadata_check_interval`.
pub type TopicQueueChangeListener = Box<dyn Fn(&str, &[MessageQueue]) + Send + 'static>;

/// Builds a [`LitePullConsumer`].
pub struct LitePullConsumerBuilder {
    config: LitePullConsumerConfig,
    namesrv_addr: Option<String>,
    client: Option<Client>,
    subscriptions: BTreeMap<String, Selector>,
    assigned: Option<Vec<MessageQueue>>,
    topic_listeners: Vec<(String, TopicQueueChangeListener)>,
    client_config: Option<crate::ClientConfig>,
}

client_and_group_methods!(LitePullConsumerBuilder, config.base.consumer_group);
namespace_method!(LitePullConsumerBuilder, config.base.namespace);

impl LitePullConsumerBuilder {
    /// Changes configuration values in place.
    pub fn configure(mut self, change: impl FnOnce(&mut LitePullConsumerConfig)) -> Self {
        change(&mut self.config);
        self
    }

    /// Subscribes to `topic` with a tag expression (`"*"`, `"TagA || TagB"`) or a
    /// [`Selector`] (`Selector::sql("amount > 100")`); the group divides its queues. A
    /// SQL92 selector is checked at [`start`](Self::start): a syntax error fails it with the
    /// position, and so does a broker without property filtering.
    pub fn subscribe(mut self, topic: impl Into<String>, selector: impl Into<Selector>) -> Self {
        self.subscriptions.insert(topic.into(), selector.into());
        self
    }

    /// Pulls exactly these queues (no division among the group; Java `assign`).
    pub fn assign(mut self, queues: Vec<MessageQueue>) -> Self {
        self.assigned = Some(queues);
        self
    }

    /// Told `topic`'s queue set on every change.
    pub fn topic_queue_change_listener(
        mut self,
        topic: impl Into<String>,
        listener: impl Fn(&str, &[MessageQueue]) + Send + 'static,
    ) -> Self {
        self.topic_listeners
            .push((topic.into(), Box::new(listener)));
        self
    }

    /// Validates, joins the group and starts pulling.
    pub async fn start(self) -> Result<LitePullConsumer> {
        runtime::run_on_actix(move || self.start_here()).await?
    }

    async fn start_here(self) -> Result<LitePullConsumer> {
        self.config.validate()?;
        for (topic, selector) in &self.subscriptions {
            validate_selector(topic, selector)?;
        }
        let assign_mode = self.assigned.is_some();
        if assign_mode != self.subscriptions.is_empty() {
            return Err(Error::Config {
                option: "subscribe/assign",
                value: if assign_mode { "both" } else { "neither" }.into(),
                allowed: "either subscriptions or assigned queues".into(),
            });
        }
        let (client, own_client) =
            resolve_client(self.client, self.namesrv_addr, self.client_config)?;
        let namespace =
            resolve_namespace(self.config.base.namespace.as_deref(), &client, own_client).await?;
        // Below the handle everything is named as on the wire.
        let wire_config = LitePullConsumerConfig {
            base: self.config.base.on_the_wire(&namespace),
            ..self.config.clone()
        };
        let assigned = self.assigned.map(|queues| namespace.wrap_queues(&queues));
        let topic_listeners = self
            .topic_listeners
            .into_iter()
            .map(|(topic, listener)| (namespace.wrap(&topic).into_owned(), listener))
            .collect();
        let mut selectors: BTreeMap<String, Selector> = self
            .subscriptions
            .iter()
            .map(|(topic, selector)| (namespace.wrap(topic).into_owned(), selector.clone()))
            .collect();
        if let Some(queues) = &assigned {
            for queue in queues {
                selectors
                    .entry(queue.topic.clone())
                    .or_insert_with(Selector::all);
            }
        }
        let now = crate::actors::now_ms();
        let group = &wire_config.base.consumer_group;
        let checked = client
            .checked_subscriptions(group, &selectors, now, namespace.as_str())
            .await;
        let subscriptions = match checked {
            Ok(subscriptions) => subscriptions,
            Err(e) => {
                if own_client {
                    client.shutdown().await;
                }
                return Err(e);
            }
        };
        let root = LiteRoot {
            client: client.clone(),
            config: wire_config.clone(),
            core: LiteCore::new(wire_config.clone(), subscriptions),
            offsets: None,
            loops: BTreeMap::new(),
            waiters: VecDeque::new(),
            last_commit: Instant::now(),
            topic_listeners,
            topic_queues: BTreeMap::new(),
            pending: Vec::new(),
            actions: Vec::new(),
            namespace: namespace.clone(),
        }
        .start();
        let (member, offsets) = Member::start(MemberSpec {
            client: client.clone(),
            own_client,
            config: wire_config.base.clone(),
            topics: selectors,
            consume_from_where: self.config.consume_from_where,
            listener: (!assign_mode)
                .then(|| Box::new(RecipientQueueListener(root.clone().recipient())) as _),
            reset_target: Some(root.clone().recipient()),
            reset_listener: None,
            rebalance: !assign_mode,
        })
        .await?;
        root.send(SetOffsets(offsets.clone())).await?;
        if let Some(queues) = assigned {
            root.send(Assign(queues)).await?;
        }
        Ok(LitePullConsumer {
            inner: Arc::new(LiteInner {
                client,
                config: self.config,
                root,
                member,
                offsets,
                namespace,
            }),
        })
    }
}

/// A running lite pull consumer. Cheap to clone, `Send + Sync`.
///
/// ```no_run
/// # async fn demo() -> rocketmq_actor::Result<()> {
/// use futures::StreamExt;
/// use rocketmq_actor::pull::LitePullConsumer;
/// let consumer = LitePullConsumer::builder()
///     .namesrv_addr("127.0.0.1:9876")
///     .group("my-group")
///     .subscribe("TopicTest", "*")
///     .start()
///     .await?;
/// let mut messages = consumer.stream();
/// while let Some(message) = messages.next().await {
///     println!("{} {:?}", message.msg_id(), message.body());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LitePullConsumer {
    inner: Arc<LiteInner>,
}

struct LiteInner {
    client: Client,
    config: LitePullConsumerConfig,
    root: Addr<LiteRoot>,
    member: Addr<Member>,
    offsets: Addr<OffsetStore>,
    /// Queues from the application are wrapped with it; queues and messages to it unwrapped.
    namespace: Namespace,
}

impl LiteInner {
    /// An application's queue as it is named on the wire.
    fn wire<'a>(&self, queue: &'a MessageQueue) -> std::borrow::Cow<'a, MessageQueue> {
        self.namespace.wrap_queue(queue)
    }
}

impl LitePullConsumer {
    /// Starts building a lite pull consumer.
    pub fn builder() -> LitePullConsumerBuilder {
        LitePullConsumerBuilder {
            config: LitePullConsumerConfig::new(""),
            namesrv_addr: None,
            client: None,
            subscriptions: BTreeMap::new(),
            assigned: None,
            topic_listeners: Vec::new(),
            client_config: None,
        }
    }

    /// The client id brokers know this consumer by.
    pub fn client_id(&self) -> &str {
        self.inner.client.client_id()
    }

    /// The next batch (at most `pull_batch_size` messages of one queue), waiting up to
    /// `poll_timeout`; empty when nothing came. With auto-commit, first commits what earlier
    /// polls returned once `auto_commit_interval` has passed.
    pub async fn poll(&self) -> Vec<MessageExt> {
        self.poll_timeout(self.inner.config.poll_timeout).await
    }

    /// [`LitePullConsumer::poll`] with its own timeout. A batch that arrives while the
    /// returned future is being dropped (a `select!` that took another branch) goes back to the
    /// front of the buffer rather than being lost.
    pub async fn poll_timeout(&self, timeout: Duration) -> Vec<MessageExt> {
        self.take(timeout, false).await.messages
    }

    async fn take(&self, timeout: Duration, tracked: bool) -> Taken {
        let mut taken = self.take_wire(timeout, tracked).await;
        // The application gets the topics as it names them.
        for message in &mut taken.messages {
            self.inner.namespace.unwrap_received(message, None);
        }
        taken
    }

    /// A batch as the root holds it (topics as on the wire).
    async fn take_wire(&self, timeout: Duration, tracked: bool) -> Taken {
        // The answer always comes through this channel, guarded from here on: a batch that
        // reaches it after the caller gave up goes back to the buffer (see `PendingPoll`).
        let (reply, rx) = oneshot::channel();
        let mut pending = PendingPoll {
            rx: Some(rx),
            root: self.inner.root.clone(),
        };
        if self.inner.root.send(Poll { tracked, reply }).await.is_err() {
            return Taken::default();
        }
        let Some(rx) = pending.rx.as_mut() else {
            return Taken::default();
        };
        // Usually a batch is buffered and the answer is already there: no timer for it.
        match rx.try_recv() {
            Ok(taken) => {
                pending.rx = None;
                return taken;
            }
            Err(oneshot::error::TryRecvError::Closed) => return Taken::default(),
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(taken)) => {
                pending.rx = None;
                taken
            }
            // Timed out: the guard's drop recovers a batch sent at the last moment.
            _ => Taken::default(),
        }
    }

    /// Every message as a `Stream` that ends when the consumer shuts down. The stream is
    /// `Unpin` and `Send`, so `stream.next().await` works without pinning it first.
    ///
    /// At-least-once to the message: a commit (automatic or [`LitePullConsumer::commit_sync`])
    /// covers only the messages the stream has yielded, and dropping the stream in the middle
    /// of a batch puts its queue back at the first message not yielded, so nothing is skipped.
    pub fn stream(&self) -> MessageStream {
        MessageStream {
            consumer: self.clone(),
            current: None,
            pending: None,
        }
    }

    /// The batches [`LitePullConsumer::poll`] returns (never empty), as a `Stream` that ends
    /// when the consumer shuts down. A batch counts as taken once the stream yields it.
    pub fn batches(&self) -> BoxStream<'static, Vec<MessageExt>> {
        let consumer = self.clone();
        futures::stream::unfold(consumer, |consumer| async move {
            while consumer.inner.root.connected() {
                let batch = consumer.poll().await;
                if !batch.is_empty() {
                    return Some((batch, consumer));
                }
            }
            None
        })
        .boxed()
    }

    /// The queues pulled now.
    pub async fn assignment(&self) -> Vec<MessageQueue> {
        let assigned = self.inner.root.send(Assignment).await.unwrap_or_default();
        self.inner.namespace.unwrap_queues(assigned)
    }

    /// Pulls exactly `queues` from now on (assign mode).
    pub async fn assign(&self, queues: Vec<MessageQueue>) -> Result<()> {
        let queues = self.inner.namespace.wrap_queues(&queues);
        self.inner.root.send(Assign(queues)).await?;
        Ok(())
    }

    /// The next poll returns `queue`'s messages from `offset` (which must lie within the
    /// queue's stored range); what was buffered for it is dropped.
    pub async fn seek(&self, queue: &MessageQueue, offset: i64) -> Result<()> {
        let wire = self.inner.wire(queue);
        let min = self.inner.client.min_offset(&wire).await?;
        let max = self.inner.client.max_offset(&wire).await?;
        if offset < min || offset > max {
            return Err(Error::Config {
                option: "seek offset",
                value: offset.to_string(),
                allowed: format!("{min}..={max} for {queue}"),
            });
        }
        self.inner
            .root
            .send(Seek(wire.into_owned(), offset))
            .await?
            .map_err(|e| match e {
                // Named as the application named it.
                Error::Config { option, .. } if option == "seek queue" => Error::Config {
                    option,
                    value: queue.to_string(),
                    allowed: "a queue assigned to this consumer".into(),
                },
                other => other,
            })
    }

    /// Seeks to the queue's first stored message.
    pub async fn seek_to_begin(&self, queue: &MessageQueue) -> Result<()> {
        let min = self
            .inner
            .client
            .min_offset(&self.inner.wire(queue))
            .await?;
        self.seek(queue, min).await
    }

    /// Seeks past the queue's last message (only new ones come).
    pub async fn seek_to_end(&self, queue: &MessageQueue) -> Result<()> {
        let max = self
            .inner
            .client
            .max_offset(&self.inner.wire(queue))
            .await?;
        self.seek(queue, max).await
    }

    /// The offset of the first message stored at or after `timestamp_ms`.
    pub async fn offset_for_timestamp(
        &self,
        queue: &MessageQueue,
        timestamp_ms: i64,
    ) -> Result<i64> {
        let queue = self.inner.wire(queue);
        self.inner.client.search_offset(&queue, timestamp_ms).await
    }

    /// Stops pulling `queues`; nothing of theirs is returned until resumed (buffered messages
    /// are dropped and pulled again after the resume).
    pub async fn pause(&self, queues: &[MessageQueue]) {
        let queues = self.inner.namespace.wrap_queues(queues);
        let _ = self.inner.root.send(SetPaused(queues, true)).await;
    }

    /// Resumes `queues` after [`LitePullConsumer::pause`].
    pub async fn resume(&self, queues: &[MessageQueue]) {
        let queues = self.inner.namespace.wrap_queues(queues);
        let _ = self.inner.root.send(SetPaused(queues, false)).await;
    }

    /// Commits the offsets of everything polled so far and persists them now.
    pub async fn commit_sync(&self) -> Result<()> {
        self.inner.root.send(CommitConsumed).await?;
        self.inner.offsets.send(PersistAll).await?
    }

    /// Commits the given offsets (next offset to consume per queue) and persists them now.
    pub async fn commit(&self, offsets: &BTreeMap<MessageQueue, i64>) -> Result<()> {
        for (queue, offset) in offsets {
            self.inner
                .offsets
                .send(StoreOffset {
                    queue: self.inner.wire(queue).into_owned(),
                    offset: *offset,
                })
                .await?;
        }
        self.inner.offsets.send(PersistAll).await?
    }

    /// The committed offset of `queue` (this client's, else the store's); `None` when none.
    pub async fn committed(&self, queue: &MessageQueue) -> Result<Option<i64>> {
        let queue = &*self.inner.wire(queue);
        if let Some(offset) = self.inner.offsets.send(ReadOffset(queue.clone())).await? {
            return Ok(Some(offset));
        }
        match self
            .inner
            .offsets
            .send(LoadOffset {
                queue: queue.clone(),
                exact: true,
            })
            .await?
        {
            StoredOffset::Found(offset) => Ok(Some(offset)),
            StoredOffset::NotFound => Ok(None),
            StoredOffset::Unavailable => Err(Error::OffsetUnavailable(queue.to_string())),
        }
    }

    /// Stops pulling; with auto-commit commits what was polled; persists offsets; leaves the
    /// group.
    pub async fn shutdown(&self) {
        let _ = self.inner.root.send(Shutdown).await;
        let _ = self.inner.member.send(Leave).await;
    }
}

/// A poll waiting for a batch; dropped unfinished, it gives back a batch that already arrived.
struct PendingPoll {
    rx: Option<oneshot::Receiver<Taken>>,
    root: Addr<LiteRoot>,
}

impl Drop for PendingPoll {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if let Ok(taken) = rx.try_recv() {
                self.root.do_send(GiveBack(taken));
            }
        }
    }
}

/// The messages of a [`LitePullConsumer`], one at a time: what
/// [`LitePullConsumer::stream`] returns.
///
/// ```no_run
/// # async fn demo(consumer: rocketmq_actor::pull::LitePullConsumer) {
/// use futures::StreamExt;
/// let mut messages = consumer.stream();
/// while let Some(message) = messages.next().await {
///     println!("{} at {}", message.msg_id(), message.queue_offset);
/// }
/// # }
/// ```
pub struct MessageStream {
    consumer: LitePullConsumer,
    /// The batch being handed out.
    current: Option<TrackedBatch>,
    /// The poll for the next batch, while one is awaited.
    pending: Option<std::pin::Pin<Box<dyn std::future::Future<Output = Taken> + Send>>>,
}

impl std::fmt::Debug for MessageStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStream")
            .field(
                "in_hand",
                &self.current.as_ref().map_or(0, |b| b.messages.len()),
            )
            .finish_non_exhaustive()
    }
}

impl futures::Stream for MessageStream {
    type Item = MessageExt;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<MessageExt>> {
        // `Poll` is this module's actor message; the task poll goes by its full name.
        use std::task::Poll as TaskPoll;
        let this = self.get_mut();
        loop {
            // The common case: a message of the batch in hand, with no future polled.
            if let Some(batch) = this.current.as_mut() {
                if let Some(message) = batch.next() {
                    return TaskPoll::Ready(Some(message));
                }
                this.current = None;
            }
            let pending = match this.pending.as_mut() {
                Some(pending) => pending,
                None => {
                    if !this.consumer.inner.root.connected() {
                        return TaskPoll::Ready(None);
                    }
                    let consumer = this.consumer.clone();
                    let timeout = consumer.inner.config.poll_timeout;
                    this.pending
                        .insert(Box::pin(async move { consumer.take(timeout, true).await }))
                }
            };
            let taken = match pending.as_mut().poll(cx) {
                TaskPoll::Ready(taken) => taken,
                TaskPoll::Pending => return TaskPoll::Pending,
            };
            this.pending = None;
            if let Some(mark) = taken.mark {
                this.current = Some(TrackedBatch {
                    messages: taken.messages.into_iter(),
                    mark,
                    root: this.consumer.inner.root.clone(),
                });
            }
        }
    }
}

/// A tracked batch being handed out one message at a time.
struct TrackedBatch {
    messages: std::vec::IntoIter<MessageExt>,
    mark: Arc<TakenMark>,
    root: Addr<LiteRoot>,
}

impl TrackedBatch {
    fn next(&mut self) -> Option<MessageExt> {
        if self.mark.stale.load(Ordering::SeqCst) {
            self.messages = Vec::new().into_iter();
            return None;
        }
        let message = self.messages.next()?;
        let next = if self.messages.len() == 0 {
            self.mark.end
        } else {
            message.queue_offset + 1
        };
        self.mark.next.store(next, Ordering::Relaxed);
        Some(message)
    }
}

impl Drop for TrackedBatch {
    fn drop(&mut self) {
        if let Some(first) = self.messages.as_slice().first() {
            // Dropped half-way: the rest is read again rather than skipped.
            self.root.do_send(Untaken {
                slot: self.mark.slot,
                epoch: self.mark.epoch,
                offset: first.queue_offset,
            });
        }
    }
}

/// The lite pull consumer's actor: executes its [`LiteCore`] (buffer, positions, flow control)
/// and holds what is not state but I/O — the queue actors, the waiting polls, the offset store.
pub(crate) struct LiteRoot {
    client: Client,
    config: LitePullConsumerConfig,
    core: LiteCore,
    offsets: Option<Addr<OffsetStore>>,
    loops: BTreeMap<SlotId, Addr<LiteQueue>>,
    waiters: VecDeque<(oneshot::Sender<Taken>, bool)>,
    last_commit: Instant,
    topic_listeners: Vec<(String, TopicQueueChangeListener)>,
    topic_queues: BTreeMap<String, Vec<MessageQueue>>,
    /// Divisions that came before the offset store: applied once it is there.
    pending: Vec<QueueChange>,
    /// Reused for every core call.
    actions: Vec<LiteAction>,
    /// Topic listeners get topics and queues unwrapped with it.
    namespace: Namespace,
}

impl Actor for LiteRoot {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(65_536);
        if !self.topic_listeners.is_empty() {
            ctx.run_interval(self.config.topic_metadata_check_interval, |act, ctx| {
                act.check_topics(ctx)
            });
            self.check_topics(ctx);
        }
    }
}

impl LiteRoot {
    fn check_topics(&mut self, ctx: &mut Context<Self>) {
        let client = self.client.clone();
        let topics: BTreeSet<String> = self
            .topic_listeners
            .iter()
            .map(|(t, _)| t.clone())
            .collect();
        ctx.spawn(
            async move {
                let mut found = Vec::new();
                for topic in topics {
                    if let Ok(queues) = client.fetch_subscribe_message_queues(&topic).await {
                        found.push((topic, queues));
                    }
                }
                found
            }
            .into_actor(self)
            .map(|found, act, _ctx| {
                for (topic, queues) in found {
                    if act.topic_queues.get(&topic) != Some(&queues) {
                        let user_topic = act.namespace.unwrap(&topic);
                        let user_queues = act.namespace.unwrap_queues(queues.clone());
                        for (t, listener) in &act.topic_listeners {
                            if *t == topic {
                                listener(&user_topic, &user_queues);
                            }
                        }
                        act.topic_queues.insert(topic, queues);
                    }
                }
            }),
        );
    }

    /// Runs a core call and carries out the actions it returned.
    fn step<R>(
        &mut self,
        ctx: &mut Context<Self>,
        call: impl FnOnce(&mut LiteCore, &mut Vec<LiteAction>) -> R,
    ) -> R {
        let mut out = std::mem::take(&mut self.actions);
        let result = call(&mut self.core, &mut out);
        for action in out.drain(..) {
            self.execute(action, ctx);
        }
        self.actions = out;
        result
    }

    fn execute(&mut self, action: LiteAction, ctx: &mut Context<Self>) {
        match action {
            LiteAction::Start { slot, request } => {
                let Some(offsets) = self.offsets.clone() else {
                    return;
                };
                let actor = LiteQueue {
                    slot,
                    client: self.client.clone(),
                    root: Some(ctx.address().recipient()),
                    offsets,
                    request: *request,
                    epoch: 0,
                    chain: 0,
                    pulling: None,
                    woken: false,
                    delayed: None,
                    pre_admitted: false,
                    started: false,
                    consume_from_where: self.config.consume_from_where,
                    consume_timestamp_ms: self.config.consume_timestamp_ms,
                    error_delay: self.config.pull_delay_on_exception,
                }
                .start();
                self.loops.insert(slot, actor);
            }
            LiteAction::Stop(slot) => {
                if let Some(actor) = self.loops.remove(&slot) {
                    actor.do_send(StopActor);
                }
            }
            LiteAction::Restart {
                slot,
                epoch,
                offset,
                delay,
            } => {
                if let Some(actor) = self.loops.get(&slot) {
                    actor.do_send(Restart {
                        epoch,
                        offset,
                        delay,
                    });
                }
            }
            LiteAction::Wake { slot, admitted } => {
                if let Some(actor) = self.loops.get(&slot) {
                    actor.do_send(Wake { admitted });
                }
            }
            LiteAction::Store { queue, offset } => {
                if let Some(offsets) = &self.offsets {
                    offsets.do_send(StoreOffset { queue, offset });
                }
            }
            LiteAction::Note(note) => log_note(note),
        }
    }

    /// Stores every consumed position in the offset store (persisted periodically).
    fn commit_consumed(&mut self, ctx: &mut Context<Self>) {
        self.step(ctx, |core, out| core.commit_consumed(out));
        self.last_commit = Instant::now();
    }

    /// Hands buffered batches to waiting polls.
    fn serve_waiters(&mut self, ctx: &mut Context<Self>) {
        while let Some((waiter, tracked)) = self.waiters.pop_front() {
            if waiter.is_closed() {
                continue;
            }
            match self.step(ctx, |core, out| core.take_batch(tracked, out)) {
                Some(taken) => match waiter.send(taken) {
                    Ok(()) => break,
                    // The poller gave up just now: the batch goes back to the front.
                    Err(taken) => self.core.push_front_again(taken),
                },
                None => {
                    // Nothing deliverable after all (filtered out, stale): it waits on.
                    self.waiters.push_front((waiter, tracked));
                    break;
                }
            }
        }
    }
}

fn log_note(note: LiteNote) {
    match note {
        LiteNote::QueueStarted(queue) => tracing::info!(%queue, "lite pull queue started"),
        LiteNote::QueueStopped(queue) => tracing::info!(%queue, "lite pull queue stopped"),
        LiteNote::OffsetMoved { queue, offset } => {
            tracing::info!(%queue, offset, "offset moved by the broker; adopting it")
        }
        LiteNote::OffsetReset { queue, offset } => {
            tracing::info!(%queue, offset, "offset reset by the broker")
        }
        LiteNote::Undecodable {
            queue,
            offset,
            error,
        } => {
            tracing::warn!(%queue, offset, %error, "a pulled batch cannot be decoded; pulling it again")
        }
        LiteNote::StreamDropped { queue, offset } => {
            tracing::debug!(%queue, offset, "stream dropped mid-batch; reading again from there")
        }
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct SetOffsets(Addr<OffsetStore>);

#[derive(Message)]
#[rtype(result = "()")]
struct Assign(Vec<MessageQueue>);

#[derive(Message)]
#[rtype(result = "Vec<MessageQueue>")]
struct Assignment;

/// A poll: the next batch goes to `reply`, now or when one comes.
#[derive(Message)]
#[rtype(result = "()")]
struct Poll {
    tracked: bool,
    reply: oneshot::Sender<Taken>,
}

/// A batch taken by a poll that was abandoned before it could return it.
#[derive(Message)]
#[rtype(result = "()")]
struct GiveBack(Taken);

/// A stream dropped a tracked batch before yielding `offset` and what follows.
#[derive(Message)]
#[rtype(result = "()")]
struct Untaken {
    slot: SlotId,
    epoch: u64,
    offset: i64,
}

#[derive(Message)]
#[rtype(result = "Result<()>")]
struct Seek(MessageQueue, i64);

#[derive(Message)]
#[rtype(result = "()")]
struct SetPaused(Vec<MessageQueue>, bool);

#[derive(Message)]
#[rtype(result = "()")]
struct CommitConsumed;

#[derive(Message)]
#[rtype(result = "()")]
struct Shutdown;

impl Handler<SetOffsets> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: SetOffsets, ctx: &mut Self::Context) {
        self.offsets = Some(msg.0);
        for change in std::mem::take(&mut self.pending) {
            self.step(ctx, |core, out| {
                core.set_assignment(&change.divided, Some(&change.topic), out)
            });
        }
    }
}

impl Handler<Assign> for LiteRoot {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: Assign, ctx: &mut Self::Context) -> Self::Result {
        let gone = self.step(ctx, |core, out| core.set_assignment(&msg.0, None, out));
        let offsets = self.offsets.clone();
        Box::pin(async move {
            if let Some(offsets) = offsets {
                for queue in gone {
                    let _ = offsets.send(PersistAndRemove(queue)).await;
                }
            }
        })
    }
}

impl Handler<QueueChange> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: QueueChange, ctx: &mut Self::Context) {
        if self.offsets.is_none() {
            self.pending.push(msg);
            return;
        }
        if self.config.auto_commit {
            // What was polled from a queue about to go is committed before the member persists.
            self.commit_consumed(ctx);
        }
        self.step(ctx, |core, out| {
            core.set_assignment(&msg.divided, Some(&msg.topic), out)
        });
    }
}

impl Handler<Assignment> for LiteRoot {
    type Result = MessageResult<Assignment>;

    fn handle(&mut self, _msg: Assignment, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.core.assignment())
    }
}

impl Handler<Poll> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: Poll, ctx: &mut Self::Context) {
        if self.config.auto_commit && self.last_commit.elapsed() >= self.config.auto_commit_interval
        {
            // Earlier polls' messages count as handled once the application polls again.
            self.commit_consumed(ctx);
        }
        if msg.reply.is_closed() {
            return;
        }
        if self.waiters.is_empty() {
            if let Some(taken) = self.step(ctx, |core, out| core.take_batch(msg.tracked, out)) {
                if let Err(taken) = msg.reply.send(taken) {
                    self.core.push_front_again(taken);
                }
                return;
            }
        }
        self.waiters.retain(|(w, _)| !w.is_closed());
        self.waiters.push_back((msg.reply, msg.tracked));
    }
}

impl Handler<Seek> for LiteRoot {
    type Result = Result<()>;

    fn handle(&mut self, msg: Seek, ctx: &mut Self::Context) -> Result<()> {
        tracing::info!(queue = %msg.0, offset = msg.1, "seek");
        if !self.step(ctx, |core, out| core.seek(&msg.0, msg.1, out)) {
            return Err(Error::Config {
                option: "seek queue",
                value: msg.0.to_string(),
                allowed: "a queue assigned to this consumer".into(),
            });
        }
        Ok(())
    }
}

impl Handler<SetPaused> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: SetPaused, ctx: &mut Self::Context) {
        self.step(ctx, |core, out| core.set_paused(&msg.0, msg.1, out));
    }
}

impl Handler<CommitConsumed> for LiteRoot {
    type Result = ();

    fn handle(&mut self, _msg: CommitConsumed, ctx: &mut Self::Context) {
        self.commit_consumed(ctx);
    }
}

impl Handler<Shutdown> for LiteRoot {
    type Result = ();

    fn handle(&mut self, _msg: Shutdown, ctx: &mut Self::Context) {
        if self.config.auto_commit {
            self.commit_consumed(ctx);
        }
        self.step(ctx, |core, out| core.shutdown(out));
        self.waiters.clear();
        ctx.stop();
    }
}

impl Handler<GiveBack> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: GiveBack, _ctx: &mut Self::Context) {
        self.core.push_front_again(msg.0);
    }
}

impl Handler<Untaken> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: Untaken, ctx: &mut Self::Context) {
        self.step(ctx, |core, out| {
            core.on_untaken(msg.slot, msg.epoch, msg.offset, out)
        });
    }
}

impl Handler<OffsetsReset> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: OffsetsReset, ctx: &mut Self::Context) {
        self.step(ctx, |core, out| core.on_offsets_reset(&msg.0, out));
    }
}

/// The pull loop of one queue.
pub(crate) struct LiteQueue {
    /// Its slot in the root, named in every message it sends there.
    slot: SlotId,
    client: Client,
    root: Option<Recipient<LiteEvent>>,
    offsets: Addr<OffsetStore>,
    request: PullRequest,
    epoch: u64,
    /// Bumped by every restart or wake: only the newest chain of steps goes on, so a wake
    /// never doubles the loop.
    chain: u64,
    /// The chain whose pull is under way, if any: a wake leaves a pull alone.
    pulling: Option<u64>,
    /// A wake came during the pull: do not wait before the next step.
    woken: bool,
    /// The root admitted the next pull with its answer to the delivery.
    pre_admitted: bool,
    /// The delayed next step, cancelled by a wake or restart (an actix context polls every
    /// pending item on each wake-up, so superseded timers must not pile up).
    delayed: Option<SpawnHandle>,
    started: bool,
    consume_from_where: ConsumeFromWhere,
    consume_timestamp_ms: Option<i64>,
    error_delay: Duration,
}

/// What a queue actor sends its root (one recipient type for the three messages).
#[derive(Message)]
#[rtype(result = "LiteReply")]
enum LiteEvent {
    /// May the loop pull from `offset` now, in `epoch`?
    Admit {
        slot: SlotId,
        epoch: u64,
        offset: i64,
    },
    /// A pull's answer.
    Deliver(Delivery),
    /// The loop found where to start.
    Started { slot: SlotId, offset: i64 },
}

enum LiteReply {
    /// Whether the pull may go, and the committed offset it carries to the broker.
    Admission(Admission, Option<i64>),
    Done,
}

impl LiteRoot {
    /// The committed offset a pull of `slot` carries: clustering offsets live on the broker,
    /// and auto-commit stores them in the core (an explicit commit persists at once anyway).
    fn commit_to_carry(&self, slot: SlotId) -> Option<i64> {
        if self.config.auto_commit && self.config.base.message_model == MessageModel::Clustering {
            self.core.stored_offset(slot)
        } else {
            None
        }
    }
}

impl Handler<LiteEvent> for LiteRoot {
    type Result = MessageResult<LiteEvent>;

    fn handle(&mut self, msg: LiteEvent, ctx: &mut Self::Context) -> Self::Result {
        MessageResult(match msg {
            LiteEvent::Admit {
                slot,
                epoch,
                offset,
            } => LiteReply::Admission(
                self.core.admit(slot, epoch, offset),
                self.commit_to_carry(slot),
            ),
            LiteEvent::Deliver(delivery) => {
                let slot = delivery.slot;
                // The answer admits the next pull too, saving the queue a round trip.
                let admission = self.step(ctx, |core, out| core.on_delivery(delivery, out));
                if self.core.has_buffered() && !self.waiters.is_empty() {
                    self.serve_waiters(ctx);
                }
                LiteReply::Admission(admission, self.commit_to_carry(slot))
            }
            LiteEvent::Started { slot, offset } => {
                self.core.on_started(slot, offset);
                LiteReply::Done
            }
        })
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Restart {
    epoch: u64,
    offset: i64,
    /// Pull only after this (a batch that could not be decoded).
    delay: Duration,
}

/// Pull again now: after a resume, or when room was made in the cache (`admitted`: the root
/// already admitted the next pull of this epoch).
#[derive(Message)]
#[rtype(result = "()")]
struct Wake {
    admitted: Option<u64>,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Step(u64);

/// How a step of the loop ended.
enum StepEnd {
    /// The root no longer wants this queue: wait for a restart or a stop.
    Idle,
    /// Step again after the delay.
    Again(Duration),
    /// Pulled: continue from `next` at once, from the broker id the answer suggested;
    /// `admitted` when the root already admitted that next pull (with the commit it carries).
    Advance {
        next: i64,
        broker_id: i64,
        admitted: Option<Option<i64>>,
    },
}

impl Actor for LiteQueue {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.notify(Step(self.chain));
    }
}

/// Where a queue without a committed offset starts.
async fn start_offset(
    client: &Client,
    offsets: &Addr<OffsetStore>,
    queue: &MessageQueue,
    from: ConsumeFromWhere,
    timestamp_ms: Option<i64>,
) -> Result<i64> {
    match offsets
        .send(LoadOffset {
            queue: queue.clone(),
            exact: true,
        })
        .await?
    {
        StoredOffset::Found(offset) if offset >= 0 => return Ok(offset),
        StoredOffset::Unavailable => return Err(Error::OffsetUnavailable(queue.to_string())),
        _ => {}
    }
    match from {
        ConsumeFromWhere::FirstOffset => client.min_offset(queue).await,
        ConsumeFromWhere::LastOffset => client.max_offset(queue).await,
        ConsumeFromWhere::Timestamp => {
            let ts = timestamp_ms.unwrap_or_else(|| crate::actors::now_ms() - 30 * 60 * 1000);
            client.search_offset(queue, ts).await
        }
    }
}

impl LiteQueue {
    fn start(&mut self, chain: u64, root: Recipient<LiteEvent>, ctx: &mut Context<Self>) {
        let client = self.client.clone();
        let offsets = self.offsets.clone();
        let queue = self.request.queue.clone();
        let (from, ts) = (self.consume_from_where, self.consume_timestamp_ms);
        let slot = self.slot;
        ctx.spawn(
            async move { start_offset(&client, &offsets, &queue, from, ts).await }
                .into_actor(self)
                .then(move |found, act, _ctx| {
                    let queue = act.request.queue.clone();
                    let started = match found {
                        // A restart (seek, reset) that came meanwhile wins.
                        Ok(offset) if chain == act.chain && !act.started => {
                            act.request.offset = offset;
                            act.started = true;
                            Some(offset)
                        }
                        Ok(_) => None,
                        Err(e) => {
                            tracing::warn!(%queue, error = %e, "cannot find where to start; retrying");
                            None
                        }
                    };
                    async move {
                        if let Some(offset) = started {
                            let _ = root.send(LiteEvent::Started { slot, offset }).await;
                        }
                    }
                    .into_actor(act)
                })
                .map(move |_, act, ctx| {
                    if chain != act.chain {
                        return;
                    }
                    if act.started {
                        ctx.notify(Step(chain));
                    } else {
                        act.delayed = Some(ctx.notify_later(Step(chain), START_RETRY_DELAY));
                    }
                }),
        );
    }
}

impl Handler<Step> for LiteQueue {
    type Result = ();

    fn handle(&mut self, msg: Step, ctx: &mut Self::Context) {
        let chain = msg.0;
        if chain != self.chain {
            return;
        }
        let Some(root) = self.root.clone() else {
            return;
        };
        if !self.started {
            self.start(chain, root, ctx);
            return;
        }
        let admit = LiteEvent::Admit {
            slot: self.slot,
            epoch: self.epoch,
            offset: self.request.offset,
        };
        let client = self.client.clone();
        let mut request = self.request.clone();
        let (slot, epoch) = (self.slot, self.epoch);
        let error_delay = self.error_delay;
        // Spawned, not awaited in the mailbox: a seek must not wait for a held long poll.
        self.pulling = Some(chain);
        self.woken = false;
        let admitted = std::mem::take(&mut self.pre_admitted);
        ctx.spawn(
            async move {
                if !admitted {
                    match root.send(admit).await {
                        Ok(LiteReply::Admission(Admission::Go, commit)) => {
                            request.commit_offset = commit;
                        }
                        Ok(LiteReply::Admission(Admission::Wait(delay), _)) => {
                            return StepEnd::Again(delay)
                        }
                        _ => return StepEnd::Idle,
                    }
                }
                // Decoded by the root when the application takes the batch.
                match client.pull_raw(&request).await {
                    Ok(result) => {
                        let next = result.next_begin_offset;
                        let broker_id = result.suggest_broker_id;
                        let deliver = Delivery {
                            slot,
                            epoch,
                            status: result.status,
                            from_offset: request.offset,
                            next_offset: next,
                            body: result.body,
                            offset_delta: result.offset_delta,
                        };
                        let admitted = match root.send(LiteEvent::Deliver(deliver)).await {
                            Ok(LiteReply::Admission(Admission::Go, commit)) => Some(commit),
                            _ => None,
                        };
                        StepEnd::Advance {
                            next,
                            broker_id,
                            admitted,
                        }
                    }
                    // Refused: the member's heartbeat warned of it; asking soon cannot help.
                    Err(e) if e.is_access_denied() => {
                        tracing::debug!(queue = %request.queue, error = %e, "lite pull refused");
                        StepEnd::Again(crate::consumer::flow::ACCESS_DENIED_DELAY)
                    }
                    Err(e) => {
                        tracing::debug!(queue = %request.queue, error = %e, "lite pull failed");
                        StepEnd::Again(error_delay)
                    }
                }
            }
            .into_actor(self)
            .map(move |end, act, ctx| {
                if act.pulling == Some(chain) {
                    act.pulling = None;
                }
                if let StepEnd::Advance {
                    next,
                    broker_id,
                    admitted,
                } = end
                {
                    if act.epoch == epoch {
                        act.request.offset = next;
                        act.request.broker_id = broker_id;
                        act.pre_admitted = admitted.is_some() && chain == act.chain;
                        if let Some(commit) = admitted {
                            act.request.commit_offset = commit;
                        }
                    }
                }
                if chain != act.chain {
                    return; // restarted meanwhile: the new chain carries on
                }
                match end {
                    StepEnd::Idle => {}
                    StepEnd::Again(_) if std::mem::take(&mut act.woken) => {
                        ctx.notify(Step(chain));
                    }
                    StepEnd::Again(delay) => {
                        act.delayed = Some(ctx.notify_later(Step(chain), delay));
                    }
                    StepEnd::Advance { .. } => ctx.notify(Step(chain)),
                }
            }),
        );
    }
}

impl Handler<Restart> for LiteQueue {
    type Result = ();

    fn handle(&mut self, msg: Restart, ctx: &mut Self::Context) {
        self.epoch = msg.epoch;
        self.request.offset = msg.offset;
        self.started = true;
        self.pre_admitted = false;
        self.chain += 1;
        if let Some(delayed) = self.delayed.take() {
            ctx.cancel_future(delayed);
        }
        if msg.delay.is_zero() {
            ctx.notify(Step(self.chain));
        } else {
            self.delayed = Some(ctx.notify_later(Step(self.chain), msg.delay));
        }
    }
}

impl Handler<Wake> for LiteQueue {
    type Result = ();

    fn handle(&mut self, msg: Wake, ctx: &mut Self::Context) {
        if msg.admitted == Some(self.epoch) {
            self.pre_admitted = true;
        }
        if self.pulling == Some(self.chain) {
            // A pull (or its admission) is under way: its chain asks again at once when done.
            self.woken = true;
            return;
        }
        self.chain += 1;
        if let Some(delayed) = self.delayed.take() {
            ctx.cancel_future(delayed);
        }
        ctx.notify(Step(self.chain));
    }
}

impl Handler<StopActor> for LiteQueue {
    type Result = ();

    fn handle(&mut self, _msg: StopActor, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
