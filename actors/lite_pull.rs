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
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
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
use crate::actors::pull_consumer::resolve_client;
use crate::actors::runtime;
use crate::consumer::config::ConsumeFromWhere;
use crate::consumer::offset::StoredOffset;
use crate::consumer::pull_config::{may_pull_lite, LitePullConsumerConfig};
use crate::error::{Error, Result};
use crate::message::decode::count_records;
use crate::message::{MessageExt, MessageQueue};
use crate::rpc::{decode_pulled, PullRequest, PullStatus, Subscription};

/// Wait before re-asking for admission when the cache is full (Java 50 ms).
const FLOW_CONTROL_DELAY: Duration = Duration::from_millis(50);
/// Wait before re-asking for admission while paused (Java 1 s; a resume wakes the queue).
const PAUSED_DELAY: Duration = Duration::from_secs(1);
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
    subscriptions: BTreeMap<String, String>,
    assigned: Option<Vec<MessageQueue>>,
    topic_listeners: Vec<(String, TopicQueueChangeListener)>,
}

client_and_group_methods!(LitePullConsumerBuilder, config.base.consumer_group);

impl LitePullConsumerBuilder {
    /// Changes configuration values in place.
    pub fn configure(mut self, change: impl FnOnce(&mut LitePullConsumerConfig)) -> Self {
        change(&mut self.config);
        self
    }

    /// Subscribes to `topic` with a tag expression; the group divides its queues.
    pub fn subscribe(mut self, topic: impl Into<String>, expression: impl Into<String>) -> Self {
        self.subscriptions.insert(topic.into(), expression.into());
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
        let assign_mode = self.assigned.is_some();
        if assign_mode != self.subscriptions.is_empty() {
            return Err(Error::Config {
                option: "subscribe/assign",
                value: if assign_mode { "both" } else { "neither" }.into(),
                allowed: "either subscriptions or assigned queues".into(),
            });
        }
        let (client, own_client) = resolve_client(self.client, self.namesrv_addr)?;
        let mut expressions = self.subscriptions.clone();
        if let Some(queues) = &self.assigned {
            for queue in queues {
                expressions
                    .entry(queue.topic.clone())
                    .or_insert_with(|| "*".into());
            }
        }
        let now = crate::actors::now_ms();
        let subscriptions: BTreeMap<String, Arc<Subscription>> = expressions
            .iter()
            .map(|(topic, expr)| (topic.clone(), Arc::new(Subscription::new(expr, now))))
            .collect();
        let root = LiteRoot {
            client: client.clone(),
            group: self.config.base.consumer_group.as_str().into(),
            config: self.config.clone(),
            subscriptions,
            offsets: None,
            queues: Slots::default(),
            buffer: VecDeque::new(),
            buffered: 0,
            waiters: VecDeque::new(),
            last_commit: Instant::now(),
            topic_listeners: self.topic_listeners,
            topic_queues: BTreeMap::new(),
            pending: Vec::new(),
            throttled: BTreeSet::new(),
            marks: Vec::new(),
            pending_advances: Vec::new(),
            stopping: false,
        }
        .start();
        let (member, offsets) = Member::start(MemberSpec {
            client: client.clone(),
            own_client,
            config: self.config.base.clone(),
            topics: expressions,
            consume_from_where: self.config.consume_from_where,
            listener: (!assign_mode)
                .then(|| Box::new(RecipientQueueListener(root.clone().recipient())) as _),
            reset_target: Some(root.clone().recipient()),
            reset_listener: None,
            rebalance: !assign_mode,
        })
        .await?;
        root.send(SetOffsets(offsets.clone())).await?;
        if let Some(queues) = self.assigned {
            root.send(Assign(queues)).await?;
        }
        Ok(LitePullConsumer {
            inner: Arc::new(LiteInner {
                client,
                config: self.config,
                root,
                member,
                offsets,
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
        self.inner.root.send(Assignment).await.unwrap_or_default()
    }

    /// Pulls exactly `queues` from now on (assign mode).
    pub async fn assign(&self, queues: Vec<MessageQueue>) -> Result<()> {
        self.inner.root.send(Assign(queues)).await?;
        Ok(())
    }

    /// The next poll returns `queue`'s messages from `offset` (which must lie within the
    /// queue's stored range); what was buffered for it is dropped.
    pub async fn seek(&self, queue: &MessageQueue, offset: i64) -> Result<()> {
        let min = self.inner.client.min_offset(queue).await?;
        let max = self.inner.client.max_offset(queue).await?;
        if offset < min || offset > max {
            return Err(Error::Config {
                option: "seek offset",
                value: offset.to_string(),
                allowed: format!("{min}..={max} for {queue}"),
            });
        }
        self.inner.root.send(Seek(queue.clone(), offset)).await?
    }

    /// Seeks to the queue's first stored message.
    pub async fn seek_to_begin(&self, queue: &MessageQueue) -> Result<()> {
        let min = self.inner.client.min_offset(queue).await?;
        self.seek(queue, min).await
    }

    /// Seeks past the queue's last message (only new ones come).
    pub async fn seek_to_end(&self, queue: &MessageQueue) -> Result<()> {
        let max = self.inner.client.max_offset(queue).await?;
        self.seek(queue, max).await
    }

    /// The offset of the first message stored at or after `timestamp_ms`.
    pub async fn offset_for_timestamp(
        &self,
        queue: &MessageQueue,
        timestamp_ms: i64,
    ) -> Result<i64> {
        self.inner.client.search_offset(queue, timestamp_ms).await
    }

    /// Stops pulling `queues`; nothing of theirs is returned until resumed (buffered messages
    /// are dropped and pulled again after the resume).
    pub async fn pause(&self, queues: &[MessageQueue]) {
        let _ = self.inner.root.send(SetPaused(queues.to_vec(), true)).await;
    }

    /// Resumes `queues` after [`LitePullConsumer::pause`].
    pub async fn resume(&self, queues: &[MessageQueue]) {
        let _ = self
            .inner
            .root
            .send(SetPaused(queues.to_vec(), false))
            .await;
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
                    queue: queue.clone(),
                    offset: *offset,
                })
                .await?;
        }
        self.inner.offsets.send(PersistAll).await?
    }

    /// The committed offset of `queue` (this client's, else the store's); `None` when none.
    pub async fn committed(&self, queue: &MessageQueue) -> Result<Option<i64>> {
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

/// What one poll took from the buffer: the messages, and for a tracked take (the stream) the
/// mark the taker moves as it hands them out.
#[derive(Default)]
struct Taken {
    messages: Vec<MessageExt>,
    /// The queue's slot (meaningless in an empty `Taken`).
    slot: Option<SlotId>,
    epoch: u64,
    /// The batch's end (see [`Batch::next_offset`]).
    next_offset: i64,
    mark: Option<Arc<TakenMark>>,
}

/// How far the stream has handed out a tracked batch: the offset after the last message it
/// yielded, or -1 before the first. The root folds it into the consumed position at commits.
struct TakenMark {
    slot: SlotId,
    epoch: u64,
    next: AtomicI64,
    /// What `next` becomes once the last message is yielded (filtered-out offsets included).
    end: i64,
    /// Set when the queue is sought, reset, paused or dropped: the stream hands out no more
    /// of this batch.
    stale: AtomicBool,
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

/// A batch from a queue actor, for the buffer.
struct Batch {
    slot: SlotId,
    epoch: u64,
    content: Content,
    /// Messages counted for flow control (the body's records, or the decoded messages).
    count: u64,
    bytes: u64,
    /// Where the pull began: a body that cannot be decoded is pulled again from here.
    from_offset: i64,
    /// The offset after the batch, filtered-out messages included: the consumed position once
    /// all of it is taken.
    next_offset: i64,
}

/// A batch's messages: as they came off the wire (decoded when the application takes them, so
/// a buffer of thousands stays compact and a taken batch is decoded hot in the cache), or
/// decoded already (a batch given back); none at all marks a run of filtered-out offsets.
enum Content {
    Wire {
        body: bytes::Bytes,
        offset_delta: Option<i64>,
    },
    Decoded(Vec<MessageExt>),
}

/// Names a [`Slot`] on the data path, where looking a queue up by name (two strings) for every
/// batch cost more than the rest of the root's work. The generation tells a reused index's new
/// queue from the old one, whose actor may still be sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct SlotId {
    index: u32,
    generation: u32,
}

/// The root's queues: by id on the data path, by name for the application's calls.
#[derive(Default)]
struct Slots {
    entries: Vec<(u32, Option<Slot>)>,
    free: Vec<u32>,
    by_name: BTreeMap<MessageQueue, SlotId>,
}

impl Slots {
    /// Adds `queue`, its slot made by `make` from the id it gets.
    fn insert_with(&mut self, queue: MessageQueue, make: impl FnOnce(SlotId) -> Slot) -> SlotId {
        let id = match self.free.pop() {
            Some(index) => {
                let entry = &mut self.entries[index as usize];
                entry.0 = entry.0.wrapping_add(1);
                SlotId {
                    index,
                    generation: entry.0,
                }
            }
            None => {
                self.entries.push((0, None));
                SlotId {
                    index: (self.entries.len() - 1) as u32,
                    generation: 0,
                }
            }
        };
        self.entries[id.index as usize].1 = Some(make(id));
        self.by_name.insert(queue, id);
        id
    }

    fn remove(&mut self, queue: &MessageQueue) -> Option<Slot> {
        let id = self.by_name.remove(queue)?;
        self.free.push(id.index);
        self.entries.get_mut(id.index as usize)?.1.take()
    }

    fn id(&self, queue: &MessageQueue) -> Option<SlotId> {
        self.by_name.get(queue).copied()
    }

    fn at(&self, id: SlotId) -> Option<&Slot> {
        match self.entries.get(id.index as usize) {
            Some((generation, Some(slot))) if *generation == id.generation => Some(slot),
            _ => None,
        }
    }

    fn at_mut(&mut self, id: SlotId) -> Option<&mut Slot> {
        match self.entries.get_mut(id.index as usize) {
            Some((generation, Some(slot))) if *generation == id.generation => Some(slot),
            _ => None,
        }
    }

    fn contains_key(&self, queue: &MessageQueue) -> bool {
        self.by_name.contains_key(queue)
    }

    fn get_mut(&mut self, queue: &MessageQueue) -> Option<&mut Slot> {
        self.at_mut(self.id(queue)?)
    }

    fn keys(&self) -> impl Iterator<Item = &MessageQueue> {
        self.by_name.keys()
    }

    fn iter(&self) -> impl Iterator<Item = (&MessageQueue, &Slot)> {
        self.by_name
            .iter()
            .filter_map(|(queue, id)| Some((queue, self.at(*id)?)))
    }
}

/// The root's view of one assigned queue.
struct Slot {
    queue: MessageQueue,
    /// What the queue is pulled for (the re-filter when a batch is decoded).
    subscription: Arc<Subscription>,
    /// Batches of this queue in the buffer.
    queued: usize,
    /// A consumed position to adopt once no stream holds a batch of this queue any more.
    pending_consumed: Option<i64>,
    actor: Addr<LiteQueue>,
    epoch: u64,
    /// The offset after the last message `poll` returned (what a commit stores).
    consumed: Option<i64>,
    /// The offset the next pull reads from (for the span).
    pulled_to: Option<i64>,
    cached_count: u64,
    cached_bytes: u64,
    paused: bool,
}

pub(crate) struct LiteRoot {
    client: Client,
    group: Arc<str>,
    config: LitePullConsumerConfig,
    subscriptions: BTreeMap<String, Arc<Subscription>>,
    offsets: Option<Addr<OffsetStore>>,
    queues: Slots,
    buffer: VecDeque<Batch>,
    buffered: u64,
    waiters: VecDeque<(oneshot::Sender<Taken>, bool)>,
    last_commit: Instant,
    topic_listeners: Vec<(String, TopicQueueChangeListener)>,
    topic_queues: BTreeMap<String, Vec<MessageQueue>>,
    /// Divisions that came before the offset store: applied once it is there.
    pending: Vec<QueueChange>,
    /// Queues told to wait for room in the cache: woken as soon as a poll makes some.
    throttled: BTreeSet<SlotId>,
    /// Tracked batches still being handed out by streams.
    marks: Vec<Arc<TakenMark>>,
    /// Queues with a `pending_consumed` waiting for their streams' batches.
    pending_advances: Vec<SlotId>,
    stopping: bool,
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
                        for (t, listener) in &act.topic_listeners {
                            if *t == topic {
                                listener(&topic, &queues);
                            }
                        }
                        act.topic_queues.insert(topic, queues);
                    }
                }
            }),
        );
    }

    /// Starts a queue actor for each new queue; stops and forgets the others. Returns the
    /// queues that went away.
    fn set_assignment(
        &mut self,
        queues: &[MessageQueue],
        topic: Option<&str>,
        ctx: &mut Context<Self>,
    ) -> Vec<MessageQueue> {
        let wanted: BTreeSet<&MessageQueue> = queues.iter().collect();
        let gone: Vec<MessageQueue> = self
            .queues
            .keys()
            .filter(|q| topic.is_none_or(|t| q.topic == t) && !wanted.contains(q))
            .cloned()
            .collect();
        for queue in &gone {
            self.drop_queue(queue);
        }
        let (Some(offsets), false) = (self.offsets.clone(), self.stopping) else {
            return gone;
        };
        for queue in queues {
            if self.queues.contains_key(queue) {
                continue;
            }
            let subscription = self
                .subscriptions
                .get(&queue.topic)
                .cloned()
                .unwrap_or_else(|| Arc::new(Subscription::all(0)));
            let pulled_for = subscription.clone();
            let mut request = PullRequest::new(self.group.clone(), queue.clone(), 0)
                .subscription(subscription)
                .max_messages(self.config.pull_batch_size as i32);
            request.suspend = Some(self.config.base.broker_suspend_max_time);
            request.timeout = self.config.base.consumer_timeout_when_suspend;
            let root = ctx.address().recipient();
            let make = |slot| LiteQueue {
                slot,
                client: self.client.clone(),
                root: Some(root),
                offsets: offsets.clone(),
                request,
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
            };
            self.queues.insert_with(queue.clone(), |id| Slot {
                queue: queue.clone(),
                subscription: pulled_for,
                queued: 0,
                pending_consumed: None,
                actor: make(id).start(),
                epoch: 0,
                consumed: None,
                pulled_to: None,
                cached_count: 0,
                cached_bytes: 0,
                paused: false,
            });
            tracing::info!(queue = %queue, "lite pull queue started");
        }
        gone
    }

    fn drop_queue(&mut self, queue: &MessageQueue) {
        self.discard_buffered(queue);
        if let Some(slot) = self.queues.remove(queue) {
            slot.actor.do_send(StopActor);
            tracing::info!(%queue, "lite pull queue stopped");
        }
    }

    fn discard_buffered(&mut self, queue: &MessageQueue) {
        let Some(id) = self.queues.id(queue) else {
            return;
        };
        self.discard_slot(id);
    }

    fn discard_slot(&mut self, id: SlotId) {
        for mark in self.marks.iter().filter(|m| m.slot == id) {
            mark.stale.store(true, Ordering::SeqCst);
        }
        let before = self.buffer.len();
        let mut dropped = 0u64;
        self.buffer.retain(|b| {
            let keep = b.slot != id;
            if !keep {
                dropped += b.count;
            }
            keep
        });
        if self.buffer.len() != before {
            self.buffered = self.buffered.saturating_sub(dropped);
        }
        if let Some(slot) = self.queues.at_mut(id) {
            slot.cached_count = 0;
            slot.cached_bytes = 0;
            slot.queued = 0;
            slot.pending_consumed = None;
        }
    }

    /// Repositions `queue` at `offset`: a new epoch, the buffer emptied of it, the queue actor
    /// restarted there, and `offset` as its consumed position.
    fn reposition(&mut self, queue: &MessageQueue, offset: i64) {
        if let Some(id) = self.queues.id(queue) {
            self.reposition_slot(id, offset);
        }
    }

    /// [`LiteRoot::reposition`] by slot.
    fn reposition_slot(&mut self, id: SlotId, offset: i64) {
        self.reposition_slot_after(id, offset, Duration::ZERO);
    }

    /// [`LiteRoot::reposition_slot`], the queue pulling again only after `delay`.
    fn reposition_slot_after(&mut self, id: SlotId, offset: i64, delay: Duration) {
        self.discard_slot(id);
        if let Some(slot) = self.queues.at_mut(id) {
            slot.epoch += 1;
            slot.consumed = Some(offset);
            slot.pulled_to = Some(offset);
            slot.actor.do_send(Restart {
                epoch: slot.epoch,
                offset,
                delay,
            });
        }
    }

    /// Moves each queue's consumed position past what the streams have yielded; forgets the
    /// marks of batches the streams are done with.
    fn fold_marks(&mut self) {
        let queues = &mut self.queues;
        self.marks.retain(|mark| {
            let next = mark.next.load(Ordering::Relaxed);
            if let Some(slot) = queues.at_mut(mark.slot) {
                if slot.epoch == mark.epoch && next >= 0 {
                    slot.consumed = Some(slot.consumed.map_or(next, |c| c.max(next)));
                }
            }
            Arc::strong_count(mark) > 1
        });
        if !self.pending_advances.is_empty() {
            let pending = std::mem::take(&mut self.pending_advances);
            for id in pending {
                if let Some(offset) = self
                    .queues
                    .at_mut(id)
                    .and_then(|s| s.pending_consumed.take())
                {
                    self.advance_consumed(id, offset);
                }
            }
        }
    }

    /// Moves the queue's consumed position to `offset` (after a run of filtered-out messages):
    /// now, or once no stream holds an earlier batch of it.
    fn advance_consumed(&mut self, id: SlotId, offset: i64) {
        let held = self
            .marks
            .iter()
            .any(|m| m.slot == id && Arc::strong_count(m) > 1);
        let Some(slot) = self.queues.at_mut(id) else {
            return;
        };
        if held {
            slot.pending_consumed = Some(slot.pending_consumed.map_or(offset, |p| p.max(offset)));
            if !self.pending_advances.contains(&id) {
                self.pending_advances.push(id);
            }
        } else {
            slot.consumed = Some(slot.consumed.map_or(offset, |c| c.max(offset)));
        }
    }

    /// Stores every consumed position in the offset store (persisted periodically).
    fn commit_consumed(&mut self) {
        self.fold_marks();
        let Some(offsets) = &self.offsets else { return };
        for (queue, slot) in self.queues.iter() {
            if let Some(offset) = slot.consumed {
                offsets.do_send(StoreOffset {
                    queue: queue.clone(),
                    offset,
                });
            }
        }
        self.last_commit = Instant::now();
    }

    /// The next deliverable batch, its positions recorded as consumed — at once, or for a
    /// tracked take as the stream moves its mark.
    fn take_batch(&mut self, tracked: bool) -> Option<Taken> {
        while let Some(batch) = self.buffer.pop_front() {
            self.buffered = self.buffered.saturating_sub(batch.count);
            let id = batch.slot;
            let Some(slot) = self.queues.at_mut(id) else {
                continue;
            };
            slot.queued = slot.queued.saturating_sub(1);
            if slot.epoch != batch.epoch {
                continue;
            }
            slot.cached_count = slot.cached_count.saturating_sub(batch.count);
            slot.cached_bytes = slot.cached_bytes.saturating_sub(batch.bytes);
            let decoded = match batch.content {
                Content::Decoded(messages) => Ok(messages),
                Content::Wire { body, offset_delta } => {
                    decode_pulled(&body, &slot.subscription, &slot.queue, offset_delta)
                        .map(|(messages, _)| messages)
                }
            };
            // Room was made: throttled queues that would now be admitted ask again at once
            // rather than at their timer. Only this queue's own limits moved, unless the whole
            // buffer just fell under its limit — then every throttled queue may go.
            let limit = u64::from(self.config.pull_threshold_for_all);
            if self.buffered < limit && self.buffered + batch.count >= limit {
                self.wake_admissible();
            } else if self.throttled.contains(&id) {
                self.wake_one(id);
            }
            let messages = match decoded {
                Ok(messages) => messages,
                Err(e) => {
                    // Nothing of it was handed out: the queue reads it again after a pause.
                    let queue = self.queues.at(id).map(|s| s.queue.to_string());
                    tracing::warn!(queue = ?queue, offset = batch.from_offset, error = %e, "a pulled batch cannot be decoded; pulling it again");
                    self.reposition_slot_after(
                        id,
                        batch.from_offset,
                        self.config.pull_delay_on_exception,
                    );
                    continue;
                }
            };
            if messages.is_empty() {
                // All filtered out (or a marker of such a run): consumed past it, in order.
                self.advance_consumed(id, batch.next_offset);
                continue;
            }
            let mark = if tracked {
                let mark = Arc::new(TakenMark {
                    slot: id,
                    epoch: batch.epoch,
                    next: AtomicI64::new(-1),
                    end: batch.next_offset,
                    stale: AtomicBool::new(false),
                });
                self.marks.push(mark.clone());
                Some(mark)
            } else {
                if let Some(slot) = self.queues.at_mut(id) {
                    slot.consumed = Some(batch.next_offset);
                }
                None
            };
            return Some(Taken {
                messages,
                slot: Some(id),
                epoch: batch.epoch,
                next_offset: batch.next_offset,
                mark,
            });
        }
        None
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

/// A queue actor asks whether it may pull now, at `epoch`.
#[derive(Message)]
#[rtype(result = "Admission")]
struct Admit {
    slot: SlotId,
    epoch: u64,
    offset: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    Go,
    Wait(Duration),
    Stale,
}

/// A queue actor hands over a pull's answer.
#[derive(Message)]
#[rtype(result = "()")]
struct Deliver {
    slot: SlotId,
    epoch: u64,
    status: PullStatus,
    /// The offset the pull asked for.
    from_offset: i64,
    next_offset: i64,
    /// The stored records, not decoded yet.
    body: bytes::Bytes,
    offset_delta: Option<i64>,
}

/// A queue actor found its start offset.
#[derive(Message)]
#[rtype(result = "()")]
struct Started {
    slot: SlotId,
    offset: i64,
}

impl Handler<SetOffsets> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: SetOffsets, ctx: &mut Self::Context) {
        self.offsets = Some(msg.0);
        for change in std::mem::take(&mut self.pending) {
            self.set_assignment(&change.divided, Some(&change.topic), ctx);
        }
    }
}

impl Handler<Assign> for LiteRoot {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: Assign, ctx: &mut Self::Context) -> Self::Result {
        let gone = self.set_assignment(&msg.0, None, ctx);
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
            self.commit_consumed();
        }
        self.set_assignment(&msg.divided, Some(&msg.topic), ctx);
    }
}

impl Handler<Assignment> for LiteRoot {
    type Result = MessageResult<Assignment>;

    fn handle(&mut self, _msg: Assignment, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.queues.keys().cloned().collect())
    }
}

impl Handler<Poll> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: Poll, _ctx: &mut Self::Context) {
        if self.config.auto_commit && self.last_commit.elapsed() >= self.config.auto_commit_interval
        {
            // Earlier polls' messages count as handled once the application polls again.
            self.commit_consumed();
        }
        if msg.reply.is_closed() {
            return;
        }
        if self.waiters.is_empty() {
            if let Some(taken) = self.take_batch(msg.tracked) {
                if let Err(taken) = msg.reply.send(taken) {
                    self.push_front_again(taken);
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

    fn handle(&mut self, msg: Seek, _ctx: &mut Self::Context) -> Result<()> {
        if !self.queues.contains_key(&msg.0) {
            return Err(Error::Config {
                option: "seek queue",
                value: msg.0.to_string(),
                allowed: "a queue assigned to this consumer".into(),
            });
        }
        tracing::info!(queue = %msg.0, offset = msg.1, "seek");
        self.reposition(&msg.0, msg.1);
        Ok(())
    }
}

impl Handler<SetPaused> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: SetPaused, _ctx: &mut Self::Context) {
        if msg.1 {
            // Pausing rewinds to what the application has taken, streams included.
            self.fold_marks();
        }
        for queue in msg.0 {
            let Some(slot) = self.queues.get_mut(&queue) else {
                continue;
            };
            if slot.paused == msg.1 {
                continue;
            }
            slot.paused = msg.1;
            if msg.1 {
                // What was buffered is pulled again after the resume, from the consumed point.
                if let Some(offset) = slot.consumed {
                    self.reposition(&queue, offset);
                } else {
                    self.discard_buffered(&queue);
                }
            } else {
                slot.actor.do_send(Wake { admitted: None });
            }
        }
    }
}

impl Handler<CommitConsumed> for LiteRoot {
    type Result = ();

    fn handle(&mut self, _msg: CommitConsumed, _ctx: &mut Self::Context) {
        self.commit_consumed();
    }
}

impl Handler<Shutdown> for LiteRoot {
    type Result = ();

    fn handle(&mut self, _msg: Shutdown, ctx: &mut Self::Context) {
        if self.config.auto_commit {
            self.commit_consumed();
        }
        self.stopping = true;
        let queues: Vec<MessageQueue> = self.queues.keys().cloned().collect();
        for queue in queues {
            self.drop_queue(&queue);
        }
        self.waiters.clear();
        ctx.stop();
    }
}

impl Handler<Admit> for LiteRoot {
    type Result = MessageResult<Admit>;

    fn handle(&mut self, msg: Admit, _ctx: &mut Self::Context) -> Self::Result {
        // The span is measured from what the application has taken, streams included.
        self.fold_marks();
        let stopping = self.stopping;
        let Some(slot) = self.queues.at_mut(msg.slot) else {
            return MessageResult(Admission::Stale);
        };
        if slot.epoch != msg.epoch || stopping {
            return MessageResult(Admission::Stale);
        }
        if slot.paused {
            return MessageResult(Admission::Wait(PAUSED_DELAY));
        }
        slot.pulled_to = Some(msg.offset);
        let Some(slot) = self.queues.at(msg.slot) else {
            return MessageResult(Admission::Stale);
        };
        if self.admissible(slot, msg.offset) {
            MessageResult(Admission::Go)
        } else {
            self.throttled.insert(msg.slot);
            MessageResult(Admission::Wait(FLOW_CONTROL_DELAY))
        }
    }
}

impl Handler<Started> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: Started, _ctx: &mut Self::Context) {
        if let Some(slot) = self.queues.at_mut(msg.slot) {
            slot.consumed.get_or_insert(msg.offset);
            slot.pulled_to.get_or_insert(msg.offset);
        }
    }
}

impl Handler<Deliver> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: Deliver, _ctx: &mut Self::Context) {
        let Some(slot) = self.queues.at(msg.slot) else {
            return;
        };
        if slot.epoch != msg.epoch || slot.paused {
            return;
        }
        if msg.status == PullStatus::OffsetIllegal {
            // Out of range, or reset on the broker (server-side reset): continue from where
            // the broker says, as the consumed position too.
            tracing::info!(queue = %slot.queue, offset = msg.next_offset, "offset moved by the broker; adopting it");
            self.reposition_slot(msg.slot, msg.next_offset);
            return;
        }
        let count = count_records(&msg.body) as u64;
        let queued = slot.queued;
        if count == 0 {
            // Nothing (matching) there. Past a run of filtered-out messages the consumed
            // position moves on — behind the batches still buffered, so in order.
            if msg.next_offset > msg.from_offset {
                if queued == 0 {
                    self.advance_consumed(msg.slot, msg.next_offset);
                } else {
                    self.buffer.push_back(Batch {
                        slot: msg.slot,
                        epoch: msg.epoch,
                        content: Content::Decoded(Vec::new()),
                        count: 0,
                        bytes: 0,
                        from_offset: msg.from_offset,
                        next_offset: msg.next_offset,
                    });
                    if let Some(slot) = self.queues.at_mut(msg.slot) {
                        slot.queued += 1;
                    }
                }
            }
            return;
        }
        let bytes = msg.body.len() as u64;
        if let Some(slot) = self.queues.at_mut(msg.slot) {
            slot.cached_count += count;
            slot.cached_bytes += bytes;
            slot.queued += 1;
        }
        self.buffered += count;
        self.buffer.push_back(Batch {
            slot: msg.slot,
            epoch: msg.epoch,
            content: Content::Wire {
                body: msg.body,
                offset_delta: msg.offset_delta,
            },
            count,
            bytes,
            from_offset: msg.from_offset,
            next_offset: msg.next_offset,
        });
        while let Some((waiter, tracked)) = self.waiters.pop_front() {
            if waiter.is_closed() {
                continue;
            }
            match self.take_batch(tracked) {
                Some(taken) => match waiter.send(taken) {
                    Ok(()) => break,
                    // The poller gave up just now: the batch goes back to the front.
                    Err(taken) => self.push_front_again(taken),
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

impl Handler<GiveBack> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: GiveBack, _ctx: &mut Self::Context) {
        self.push_front_again(msg.0);
    }
}

impl Handler<Untaken> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: Untaken, _ctx: &mut Self::Context) {
        self.fold_marks();
        let Some(slot) = self.queues.at(msg.slot) else {
            return;
        };
        if slot.epoch == msg.epoch && !self.stopping {
            tracing::debug!(queue = %slot.queue, offset = msg.offset, "stream dropped mid-batch; reading again from there");
            self.reposition_slot(msg.slot, msg.offset);
        }
    }
}

impl Handler<OffsetsReset> for LiteRoot {
    type Result = ();

    fn handle(&mut self, msg: OffsetsReset, _ctx: &mut Self::Context) {
        for (queue, offset) in msg.0 {
            if self.queues.contains_key(&queue) {
                tracing::info!(%queue, offset, "offset reset by the broker");
                self.reposition(&queue, offset);
            }
        }
    }
}

impl LiteRoot {
    /// Whether `slot`'s queue may pull now (flow control: its cache, its span, the whole
    /// buffer).
    fn admissible(&self, slot: &Slot, offset: i64) -> bool {
        let buffered = self.buffered;
        let span = slot
            .consumed
            .map_or(0, |consumed| (offset - consumed).max(0) as u64);
        may_pull_lite(
            &self.config,
            slot.cached_count,
            slot.cached_bytes,
            span,
            buffered,
        )
    }

    /// Whether the pull after a delivery may go at once; `Go` only, anything else is decided by
    /// the queue's next [`Admit`].
    fn admit_next(&mut self, id: SlotId, epoch: u64, offset: i64) -> Admission {
        if self.stopping {
            return Admission::Stale;
        }
        let Some(slot) = self.queues.at(id) else {
            return Admission::Stale;
        };
        if slot.epoch != epoch || slot.paused || !self.admissible(slot, offset) {
            return Admission::Wait(Duration::ZERO);
        }
        if let Some(slot) = self.queues.at_mut(id) {
            slot.pulled_to = Some(offset);
        }
        Admission::Go
    }

    /// Wakes `id` if it is throttled and flow control would admit it now.
    fn wake_one(&mut self, id: SlotId) {
        self.fold_marks();
        if self.wake_if_admissible(id) {
            self.throttled.remove(&id);
        }
    }

    /// Wakes the throttled queues that flow control would admit now.
    fn wake_admissible(&mut self) {
        self.fold_marks();
        let mut throttled = std::mem::take(&mut self.throttled);
        throttled.retain(|&id| !self.wake_if_admissible(id));
        self.throttled = throttled;
    }

    /// Tells a throttled queue to pull, already admitted, if flow control lets it now. Returns
    /// whether it no longer waits (woken, or gone).
    fn wake_if_admissible(&self, id: SlotId) -> bool {
        let Some(slot) = self.queues.at(id) else {
            return true;
        };
        if !self.admissible(slot, slot.pulled_to.unwrap_or(0)) {
            return false;
        }
        slot.actor.do_send(Wake {
            admitted: Some(slot.epoch),
        });
        true
    }

    /// Undoes a [`LiteRoot::take_batch`] whose poller vanished.
    fn push_front_again(&mut self, taken: Taken) {
        let Taken {
            messages,
            slot: id,
            epoch,
            next_offset,
            mark,
        } = taken;
        if let Some(mark) = &mark {
            self.marks.retain(|m| !Arc::ptr_eq(m, mark));
        }
        let (Some(first), Some(id)) = (messages.first(), id) else {
            return;
        };
        let Some(slot) = self.queues.at_mut(id) else {
            return;
        };
        if epoch != slot.epoch {
            return; // sought or reset meanwhile: the batch is stale
        }
        let bytes: u64 = messages.iter().map(|m| m.body().len() as u64).sum();
        let count = messages.len() as u64;
        let from_offset = first.queue_offset;
        slot.cached_count += count;
        slot.cached_bytes += bytes;
        slot.consumed = Some(from_offset);
        slot.queued += 1;
        self.buffered += count;
        self.buffer.push_front(Batch {
            slot: id,
            epoch: slot.epoch,
            content: Content::Decoded(messages),
            count,
            bytes,
            from_offset,
            next_offset,
        });
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
    Admit(Admit),
    Deliver(Deliver),
    Started(Started),
}

enum LiteReply {
    Admission(Admission),
    Done,
}

impl Handler<LiteEvent> for LiteRoot {
    type Result = MessageResult<LiteEvent>;

    fn handle(&mut self, msg: LiteEvent, ctx: &mut Self::Context) -> Self::Result {
        MessageResult(match msg {
            LiteEvent::Admit(admit) => {
                LiteReply::Admission(<Self as Handler<Admit>>::handle(self, admit, ctx).0)
            }
            LiteEvent::Deliver(deliver) => {
                let (slot, epoch, next) = (deliver.slot, deliver.epoch, deliver.next_offset);
                <Self as Handler<Deliver>>::handle(self, deliver, ctx);
                // The answer admits the next pull too, saving the queue a round trip.
                LiteReply::Admission(self.admit_next(slot, epoch, next))
            }
            LiteEvent::Started(started) => {
                <Self as Handler<Started>>::handle(self, started, ctx);
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
    /// Pulled: continue from this offset at once, from the broker id the answer suggested;
    /// `true` when the root already admitted that next pull.
    Advance(i64, i64, bool),
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
                            let _ = root.send(LiteEvent::Started(Started { slot, offset })).await;
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
        let admit = Admit {
            slot: self.slot,
            epoch: self.epoch,
            offset: self.request.offset,
        };
        let client = self.client.clone();
        let request = self.request.clone();
        let (slot, epoch) = (self.slot, self.epoch);
        let error_delay = self.error_delay;
        // Spawned, not awaited in the mailbox: a seek must not wait for a held long poll.
        self.pulling = Some(chain);
        self.woken = false;
        let admitted = std::mem::take(&mut self.pre_admitted);
        ctx.spawn(
            async move {
                if !admitted {
                    match root.send(LiteEvent::Admit(admit)).await {
                        Ok(LiteReply::Admission(Admission::Go)) => {}
                        Ok(LiteReply::Admission(Admission::Wait(delay))) => {
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
                        let deliver = Deliver {
                            slot,
                            epoch,
                            status: result.status,
                            from_offset: request.offset,
                            next_offset: next,
                            body: result.body,
                            offset_delta: result.offset_delta,
                        };
                        let admitted = matches!(
                            root.send(LiteEvent::Deliver(deliver)).await,
                            Ok(LiteReply::Admission(Admission::Go))
                        );
                        StepEnd::Advance(next, broker_id, admitted)
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
                if let StepEnd::Advance(next, broker_id, admitted) = end {
                    if act.epoch == epoch {
                        act.request.offset = next;
                        act.request.broker_id = broker_id;
                        act.pre_admitted = admitted && chain == act.chain;
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
                    StepEnd::Advance(..) => ctx.notify(Step(chain)),
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
