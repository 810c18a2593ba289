//! The listener stage: the user's code and the dispatcher actor that bounds how many listener
//! calls run at once across every queue of a consumer.
//!
//! Queue actors ask the [`ConsumeDispatcher`] to run a batch; the dispatcher waits for one of
//! `consume_concurrency` permits (FIFO, so no queue starves), calls the listener with a panic
//! guard, and answers with the outcome. A panic counts as [`ConsumeStatus::ReconsumeLater`] and
//! never stops the runtime.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::FutureExt;
use tokio::sync::Semaphore;

use crate::consumer::{OrderlyContext, OrderlyStatus};
use crate::message::{MessageExt, MessageQueue};

/// What a concurrent listener reports for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeStatus {
    /// The messages up to the context's `ack_index` are consumed.
    Success,
    /// Consume the batch (or the part after `ack_index`) again later.
    ReconsumeLater,
}

/// Per-call context of a concurrent listener: which queue the batch came from, and how the
/// listener wants failures treated.
#[derive(Debug, Clone)]
pub struct ConsumeContext {
    /// The queue the messages were pulled from.
    pub queue: MessageQueue,
    /// With [`ConsumeStatus::Success`], messages `0..=ack_index` succeeded and the rest are
    /// retried. `None` (the default) means the whole batch.
    pub ack_index: Option<usize>,
    /// Delay level of the retry: `0` lets the broker choose (3 + reconsume times), `-1` sends
    /// the messages to the dead-letter queue at once, `1..=18` picks a level.
    pub delay_level: i32,
    /// The batch itself, so an actor listener receives it without a copy.
    batch: Option<Arc<[MessageExt]>>,
}

impl ConsumeContext {
    /// A context for a batch from `queue` with the defaults.
    pub fn new(queue: MessageQueue) -> Self {
        ConsumeContext {
            queue,
            ack_index: None,
            delay_level: 0,
            batch: None,
        }
    }
}

/// A concurrent message listener.
///
/// Listener futures run on the consumer's actix arbiter, so they need not be `Send`. Long CPU
/// work belongs on another thread (`actix_rt::task::spawn_blocking`).
///
/// ```
/// use rocketmq_actor::actors::listener::{ConsumeContext, ConsumeStatus, MessageListener};
/// use rocketmq_actor::MessageExt;
///
/// struct Printer;
///
/// #[async_trait::async_trait(?Send)]
/// impl MessageListener for Printer {
///     async fn consume(&self, messages: &[MessageExt], _ctx: &mut ConsumeContext) -> ConsumeStatus {
///         for m in messages {
///             println!("{} {:?}", m.msg_id(), m.body());
///         }
///         ConsumeStatus::Success
///     }
/// }
/// ```
#[async_trait::async_trait(?Send)]
pub trait MessageListener: 'static {
    /// Consumes a batch of at most `consume_message_batch_max_size` messages of one queue.
    async fn consume(&self, messages: &[MessageExt], ctx: &mut ConsumeContext) -> ConsumeStatus;
}

/// A listener made of an async closure taking the batch and the context by value and giving
/// them back with the status (closures cannot borrow across an await).
pub struct FnListener<F>(pub F);

#[async_trait::async_trait(?Send)]
impl<F, Fut> MessageListener for FnListener<F>
where
    F: Fn(Vec<MessageExt>, ConsumeContext) -> Fut + 'static,
    Fut: Future<Output = (ConsumeStatus, ConsumeContext)> + 'static,
{
    async fn consume(&self, messages: &[MessageExt], ctx: &mut ConsumeContext) -> ConsumeStatus {
        let (status, returned) = (self.0)(messages.to_vec(), ctx.clone()).await;
        *ctx = returned;
        status
    }
}

/// The message an actor receives when it is the listener (see [`RecipientListener`]).
#[derive(Message, Clone)]
#[rtype(result = "ConsumeReply")]
pub struct ConsumeMessages {
    /// The batch.
    pub messages: Arc<[MessageExt]>,
    /// Where it came from.
    pub queue: MessageQueue,
}

/// What an actor listener answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumeReply {
    /// The outcome.
    pub status: ConsumeStatus,
    /// See [`ConsumeContext::ack_index`].
    pub ack_index: Option<usize>,
    /// See [`ConsumeContext::delay_level`].
    pub delay_level: i32,
}

impl ConsumeReply {
    /// Everything consumed.
    pub fn success() -> Self {
        ConsumeReply {
            status: ConsumeStatus::Success,
            ack_index: None,
            delay_level: 0,
        }
    }

    /// Retry the whole batch later.
    pub fn reconsume_later() -> Self {
        ConsumeReply {
            status: ConsumeStatus::ReconsumeLater,
            ..Self::success()
        }
    }
}

impl<A, M> actix::dev::MessageResponse<A, M> for ConsumeReply
where
    A: Actor,
    M: Message<Result = ConsumeReply>,
{
    fn handle(self, _ctx: &mut A::Context, tx: Option<actix::dev::OneshotSender<ConsumeReply>>) {
        if let Some(tx) = tx {
            let _ = tx.send(self);
        }
    }
}

/// Delivers batches to the user's own actor. A mailbox error (the actor stopped) counts as
/// [`ConsumeStatus::ReconsumeLater`].
pub struct RecipientListener(pub Recipient<ConsumeMessages>);

#[async_trait::async_trait(?Send)]
impl MessageListener for RecipientListener {
    async fn consume(&self, messages: &[MessageExt], ctx: &mut ConsumeContext) -> ConsumeStatus {
        let request = ConsumeMessages {
            messages: ctx
                .batch
                .clone()
                .unwrap_or_else(|| messages.to_vec().into()),
            queue: ctx.queue.clone(),
        };
        match self.0.send(request).await {
            Ok(reply) => {
                ctx.ack_index = reply.ack_index;
                ctx.delay_level = reply.delay_level;
                reply.status
            }
            Err(e) => {
                tracing::warn!(error = %e, "listener actor unavailable; messages will be retried");
                ConsumeStatus::ReconsumeLater
            }
        }
    }
}

/// An orderly message listener: gets one queue's messages in offset order, never two calls of
/// one queue at once.
///
/// ```
/// use rocketmq_actor::actors::listener::OrderlyListener;
/// use rocketmq_actor::consumer::{OrderlyContext, OrderlyStatus};
/// use rocketmq_actor::MessageExt;
///
/// struct Ledger;
///
/// #[async_trait::async_trait(?Send)]
/// impl OrderlyListener for Ledger {
///     async fn consume(&self, messages: &[MessageExt], ctx: &mut OrderlyContext) -> OrderlyStatus {
///         if messages.iter().any(|m| m.body().is_empty()) {
///             ctx.suspend_time = std::time::Duration::from_millis(200);
///             return OrderlyStatus::SuspendCurrentQueueAMoment;
///         }
///         OrderlyStatus::Success
///     }
/// }
/// ```
#[async_trait::async_trait(?Send)]
pub trait OrderlyListener: 'static {
    /// Consumes a batch of one queue, in order.
    async fn consume(&self, messages: &[MessageExt], ctx: &mut OrderlyContext) -> OrderlyStatus;
}

/// An orderly listener made of an async closure (batch and context by value, both given back).
pub struct FnOrderlyListener<F>(pub F);

#[async_trait::async_trait(?Send)]
impl<F, Fut> OrderlyListener for FnOrderlyListener<F>
where
    F: Fn(Vec<MessageExt>, OrderlyContext) -> Fut + 'static,
    Fut: Future<Output = (OrderlyStatus, OrderlyContext)> + 'static,
{
    async fn consume(&self, messages: &[MessageExt], ctx: &mut OrderlyContext) -> OrderlyStatus {
        let (status, returned) = (self.0)(messages.to_vec(), ctx.clone()).await;
        *ctx = returned;
        status
    }
}

/// The message an actor receives when it is the orderly listener.
#[derive(Message, Clone)]
#[rtype(result = "OrderlyReply")]
pub struct ConsumeOrderly {
    /// The batch, in queue order.
    pub messages: Arc<[MessageExt]>,
    /// The context with its defaults.
    pub context: OrderlyContext,
}

/// What an actor orderly listener answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderlyReply {
    /// The outcome.
    pub status: OrderlyStatus,
    /// The context, possibly changed (suspend time, auto-commit).
    pub context: OrderlyContext,
}

impl<A, M> actix::dev::MessageResponse<A, M> for OrderlyReply
where
    A: Actor,
    M: Message<Result = OrderlyReply>,
{
    fn handle(self, _ctx: &mut A::Context, tx: Option<actix::dev::OneshotSender<OrderlyReply>>) {
        if let Some(tx) = tx {
            let _ = tx.send(self);
        }
    }
}

/// Delivers orderly batches to the user's own actor; a stopped actor counts as a suspend.
pub struct RecipientOrderlyListener(pub Recipient<ConsumeOrderly>);

#[async_trait::async_trait(?Send)]
impl OrderlyListener for RecipientOrderlyListener {
    async fn consume(&self, messages: &[MessageExt], ctx: &mut OrderlyContext) -> OrderlyStatus {
        let request = ConsumeOrderly {
            messages: messages.to_vec().into(),
            context: ctx.clone(),
        };
        match self.0.send(request).await {
            Ok(reply) => {
                *ctx = reply.context;
                reply.status
            }
            Err(e) => {
                tracing::warn!(error = %e, "orderly listener actor unavailable; suspending the queue");
                OrderlyStatus::SuspendCurrentQueueAMoment
            }
        }
    }
}

/// The listener of a consumer: concurrent or orderly.
#[derive(Clone)]
pub enum AnyListener {
    /// See [`MessageListener`].
    Concurrent(Rc<dyn MessageListener>),
    /// See [`OrderlyListener`].
    Orderly(Rc<dyn OrderlyListener>),
}

/// Runs one orderly batch through the listener.
#[derive(Message)]
#[rtype(result = "OrderlyOutcome")]
pub struct ConsumeOrderlyBatch {
    /// The batch, in order.
    pub messages: Arc<[MessageExt]>,
    /// Its context.
    pub context: OrderlyContext,
}

/// How an orderly batch went.
#[derive(Debug, Clone)]
pub struct OrderlyOutcome {
    /// The status; a panic counts as a suspend.
    pub status: OrderlyStatus,
    /// The context as the listener left it.
    pub context: OrderlyContext,
    /// The listener panicked.
    pub panicked: bool,
    /// How long the listener ran.
    pub elapsed: Duration,
}

impl<A, M> actix::dev::MessageResponse<A, M> for OrderlyOutcome
where
    A: Actor,
    M: Message<Result = OrderlyOutcome>,
{
    fn handle(self, _ctx: &mut A::Context, tx: Option<actix::dev::OneshotSender<OrderlyOutcome>>) {
        if let Some(tx) = tx {
            let _ = tx.send(self);
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

/// Runs one batch through the listener.
#[derive(Message)]
#[rtype(result = "ConsumeOutcome")]
pub struct Consume {
    /// The batch (already with the user-visible topic).
    pub messages: Arc<[MessageExt]>,
    /// Its queue.
    pub queue: MessageQueue,
}

/// How a batch went.
#[derive(Debug, Clone)]
pub struct ConsumeOutcome {
    /// The listener's status; `ReconsumeLater` when it panicked.
    pub status: ConsumeStatus,
    /// The context as the listener left it.
    pub context: ConsumeContext,
    /// The listener panicked.
    pub panicked: bool,
    /// When the call started (after waiting for a permit) and how long it ran.
    pub started: Instant,
    /// How long the listener ran.
    pub elapsed: Duration,
}

impl ConsumeOutcome {
    /// The outcome of a batch that never reached the listener: retried like a failure.
    pub fn failed(queue: MessageQueue) -> Self {
        ConsumeOutcome {
            status: ConsumeStatus::ReconsumeLater,
            context: ConsumeContext::new(queue),
            panicked: false,
            started: Instant::now(),
            elapsed: Duration::ZERO,
        }
    }
}

impl<A, M> actix::dev::MessageResponse<A, M> for ConsumeOutcome
where
    A: Actor,
    M: Message<Result = ConsumeOutcome>,
{
    fn handle(self, _ctx: &mut A::Context, tx: Option<actix::dev::OneshotSender<ConsumeOutcome>>) {
        if let Some(tx) = tx {
            let _ = tx.send(self);
        }
    }
}

/// How many listener calls are running and waiting (for stats and shutdown).
#[derive(Message)]
#[rtype(result = "(usize, usize)")]
pub struct InFlight;

/// The dispatcher actor: bounds concurrent listener calls of one consumer.
pub struct ConsumeDispatcher {
    listener: AnyListener,
    permits: Arc<Semaphore>,
    limit: usize,
    waiting: Rc<std::cell::Cell<usize>>,
}

impl ConsumeDispatcher {
    /// A dispatcher running at most `limit` listener calls at once.
    pub fn new(listener: AnyListener, limit: usize) -> Self {
        let limit = limit.max(1);
        ConsumeDispatcher {
            listener,
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            waiting: Rc::new(std::cell::Cell::new(0)),
        }
    }
}

impl Actor for ConsumeDispatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Every queue actor talks to the dispatcher; a roomy mailbox keeps `send` from parking
        // them needlessly (the semaphore is the real bound).
        ctx.set_mailbox_capacity(4096);
    }
}

impl Handler<Consume> for ConsumeDispatcher {
    type Result = Pin<Box<dyn Future<Output = ConsumeOutcome>>>;

    fn handle(&mut self, msg: Consume, _ctx: &mut Self::Context) -> Self::Result {
        let AnyListener::Concurrent(listener) = self.listener.clone() else {
            tracing::error!("a concurrent batch reached an orderly listener");
            return Box::pin(async move { ConsumeOutcome::failed(msg.queue) });
        };
        let permits = self.permits.clone();
        let waiting = self.waiting.clone();
        Box::pin(async move {
            waiting.set(waiting.get() + 1);
            let permit = permits.acquire_owned().await;
            waiting.set(waiting.get().saturating_sub(1));
            let mut context = ConsumeContext::new(msg.queue);
            context.batch = Some(msg.messages.clone());
            let started = Instant::now();
            let call =
                AssertUnwindSafe(listener.consume(&msg.messages, &mut context)).catch_unwind();
            let result = call.await;
            drop(permit);
            context.batch = None;
            let elapsed = started.elapsed();
            match result {
                Ok(status) => ConsumeOutcome {
                    status,
                    context,
                    panicked: false,
                    started,
                    elapsed,
                },
                Err(panic) => {
                    let what = panic_text(panic.as_ref());
                    tracing::error!(queue = %context.queue, panic = %what, "listener panicked; the batch will be retried");
                    ConsumeOutcome {
                        status: ConsumeStatus::ReconsumeLater,
                        context,
                        panicked: true,
                        started,
                        elapsed,
                    }
                }
            }
        })
    }
}

impl Handler<ConsumeOrderlyBatch> for ConsumeDispatcher {
    type Result = Pin<Box<dyn Future<Output = OrderlyOutcome>>>;

    fn handle(&mut self, msg: ConsumeOrderlyBatch, _ctx: &mut Self::Context) -> Self::Result {
        let permits = self.permits.clone();
        let waiting = self.waiting.clone();
        let listener = self.listener.clone();
        Box::pin(async move {
            let mut context = msg.context;
            let AnyListener::Orderly(listener) = listener else {
                tracing::error!("an orderly batch reached a concurrent listener");
                return OrderlyOutcome {
                    status: OrderlyStatus::SuspendCurrentQueueAMoment,
                    context,
                    panicked: false,
                    elapsed: Duration::ZERO,
                };
            };
            waiting.set(waiting.get() + 1);
            let permit = permits.acquire_owned().await;
            waiting.set(waiting.get().saturating_sub(1));
            let started = Instant::now();
            let result = AssertUnwindSafe(listener.consume(&msg.messages, &mut context))
                .catch_unwind()
                .await;
            drop(permit);
            let elapsed = started.elapsed();
            let panicked = result.is_err();
            if let Err(panic) = &result {
                tracing::error!(queue = %context.queue, panic = %panic_text(panic.as_ref()), "orderly listener panicked; suspending the queue");
            }
            OrderlyOutcome {
                status: OrderlyStatus::from_listener(result),
                context,
                panicked,
                elapsed,
            }
        })
    }
}

impl Handler<InFlight> for ConsumeDispatcher {
    type Result = MessageResult<InFlight>;

    fn handle(&mut self, _msg: InFlight, _ctx: &mut Self::Context) -> Self::Result {
        let running = self.limit - self.permits.available_permits();
        MessageResult((running, self.waiting.get()))
    }
}
