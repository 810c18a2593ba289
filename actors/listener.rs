//! The listener stage: the user's code and the dispatcher actor that bounds how many listener
//! calls run at once across every queue of a consumer.
//!
//! Where calls run: async listeners (closures, traits, actors) on the consumer's arbiter
//! thread, up to `consume_concurrency` at once; synchronous closure listeners there too while
//! their calls are quick, and on the consumer's consume threads ([`ConsumePool`], up to
//! `consume_thread_max`) once they are slow, each outcome coming back to its queue actor as a
//! message.
//!
//! Queue actors ask the [`ConsumeDispatcher`] to run a batch; the dispatcher waits for one of
//! `consume_concurrency` permits (FIFO, so no queue starves), calls the listener with a panic
//! guard, and answers with the outcome. A panic counts as [`ConsumeStatus::ReconsumeLater`] and
//! never stops the runtime.

use std::future::Future;
use std::ops::AsyncFn;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::FutureExt;
use tokio::sync::Semaphore;

use crate::actors::consume_pool::{ConsumePool, RunTimer};
use crate::actors::queue::RunSink;
use crate::actors::queue_orderly::OrderlyChain;
use crate::consumer::queue_core::{share_of, BatchSpan, CallRanges, PullPart};
use crate::consumer::{ConsumeStatus, OrderlyContext, OrderlyStatus};
use crate::hooks::{guarded, ConsumeHook, ConsumeHookContext, Hooks, ListenerStatus};
use crate::message::{MessageExt, MessageQueue};

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
    /// The batch itself, so a closure or actor listener receives it without a copy.
    batch: Option<Messages>,
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
/// Listener futures run on the consumer's actix arbiter, so they need not be `Send`; the
/// listener itself is `Send`, since a consumer started outside an actix system moves it to the
/// crate's runtime thread. Calls that block or burn CPU belong in a synchronous closure
/// listener ([`listener_sync_fn`](crate::PushConsumerBuilder::listener_sync_fn)), whose slow
/// calls run on the consumer's consume threads.
///
/// ```
/// use rocketmq_actor::consumer::{ConsumeContext, ConsumeStatus, MessageListener};
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
pub trait MessageListener: Send + 'static {
    /// Consumes a batch of at most `consume_message_batch_max_size` messages of one queue.
    async fn consume(&self, messages: &[MessageExt], ctx: &mut ConsumeContext) -> ConsumeStatus;
}

/// A batch handed to a closure listener: shared, so handing it over copies nothing. Use it as
/// a slice (`messages.len()`, `messages[0]`, `for m in &messages`).
#[derive(Clone)]
pub struct Messages {
    /// Every message of one pull (concurrent) or one orderly batch; the batch is
    /// `messages[start..end]`, so the messages of a pull are stored once however many listener
    /// calls they are split into.
    shared: SharedMessages,
    start: usize,
    end: usize,
}

/// Where a [`Messages`] batch lives: a decoded pull as it is (a `Vec`, shared without copying
/// it into a slice allocation), or an orderly batch already in a shared slice.
#[derive(Clone)]
enum SharedMessages {
    Pull(PullShare),
    Slice(Arc<[MessageExt]>),
}

impl SharedMessages {
    #[inline]
    fn all(&self) -> &[MessageExt] {
        match self {
            SharedMessages::Pull(share) => share.messages(),
            SharedMessages::Slice(messages) => messages,
        }
    }
}

/// One count on a decoded pull, held by a [`Messages`] batch. Handing a by-value closure its
/// batch would otherwise cost two atomic operations per call on the pull's count (up when
/// the batch is made, down when the closure drops it), the largest cost of such a call.
/// Within a run of calls ([`ParkedPull`]), a batch dropped on the consumer's thread parks
/// its count instead, and the next call's batch takes it over: the count stays where it is.
#[derive(Clone)]
pub(crate) struct PullShare(Option<Arc<Vec<MessageExt>>>);

impl PullShare {
    /// The pull's messages (none only while the share is being dropped).
    #[inline]
    fn messages(&self) -> &[MessageExt] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }

    /// The pull.
    #[inline]
    fn pull(&self) -> Option<&Arc<Vec<MessageExt>>> {
        self.0.as_ref()
    }
}

impl Drop for PullShare {
    #[inline]
    fn drop(&mut self) {
        if let Some(pull) = self.0.take() {
            park_or_release(pull);
        }
    }
}

thread_local! {
    /// Whether a run of listener calls ([`ParkedPull`]) is under way on this thread.
    static PARKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The count the last batch dropped during the run left (see [`PullShare`]).
    static PARKED: std::cell::Cell<Option<Arc<Vec<MessageExt>>>> =
        const { std::cell::Cell::new(None) };
}

/// Parks `pull`'s count when a run is under way on this thread, otherwise gives it up.
#[inline]
fn park_or_release(pull: Arc<Vec<MessageExt>>) {
    if PARKING.get() {
        // What was parked before goes after the cell is set, so that its drop cannot see
        // the cell half-way.
        let before = PARKED.replace(Some(pull));
        drop(before);
    } else {
        drop(pull);
    }
}

/// The count the last batch dropped during this thread's run left, if any, for the queue's
/// core to hand to the next orderly batch ([`QueueCore::spare_pull`]); give back what it
/// leaves with [`park_pull`].
///
/// [`QueueCore::spare_pull`]: crate::consumer::queue_core::QueueCore::spare_pull
#[inline]
pub(crate) fn take_parked_pull() -> Option<Arc<Vec<MessageExt>>> {
    PARKED.take()
}

/// Parks `pull` again (see [`take_parked_pull`]), or gives it up when no run is under way.
#[inline]
pub(crate) fn park_pull(pull: Option<Arc<Vec<MessageExt>>>) {
    if let Some(pull) = pull {
        park_or_release(pull);
    }
}

/// A run of listener calls over one pull on this thread, during which the batches the calls
/// drop park their count on the pull for the next call's batch ([`PullShare`]). Ending the
/// run (dropping this, also when a call panics) gives up whatever is still parked, so a pull
/// is never kept past its run. Batches a call keeps past its run, or drops on another
/// thread, release their count as any `Arc` does.
pub(crate) struct ParkedPull {
    /// Whether an outer run was already parking (runs do not nest, but should one, the outer
    /// keeps parking when the inner ends).
    outer: bool,
}

impl ParkedPull {
    /// Starts parking on this thread.
    #[inline]
    pub(crate) fn begin() -> Self {
        ParkedPull {
            outer: PARKING.replace(true),
        }
    }

    /// A count on `pull` for a new batch: the parked one when it is `pull`'s, otherwise a
    /// new one (giving up a parked count on another pull).
    #[inline]
    pub(crate) fn share(&self, pull: &Arc<Vec<MessageExt>>) -> PullShare {
        let mut parked = PARKED.take();
        let share = share_of(pull, &mut parked);
        drop(parked);
        PullShare(Some(share))
    }
}

impl Drop for ParkedPull {
    fn drop(&mut self) {
        if !self.outer {
            PARKING.set(false);
            drop(PARKED.take());
        }
    }
}

impl Messages {
    /// The messages `range` of `shared` (clamped to its length).
    #[inline]
    pub(crate) fn slice(shared: Arc<Vec<MessageExt>>, range: std::ops::Range<usize>) -> Self {
        Self::of_share(PullShare(Some(shared)), range)
    }

    /// The messages `range` (clamped to its length) of the pull `share` counts on.
    #[inline]
    pub(crate) fn of_share(share: PullShare, range: std::ops::Range<usize>) -> Self {
        let end = range.end.min(share.messages().len());
        let start = range.start.min(end);
        Messages {
            shared: SharedMessages::Pull(share),
            start,
            end,
        }
    }

    /// Takes in the messages `range` of `pull` when they follow this batch's in the same
    /// pull; returns whether it did.
    #[inline]
    pub(crate) fn extend_with(
        &mut self,
        pull: &Arc<Vec<MessageExt>>,
        range: &std::ops::Range<usize>,
    ) -> bool {
        let follows = match &self.shared {
            SharedMessages::Pull(mine) => {
                mine.pull().is_some_and(|mine| Arc::ptr_eq(mine, pull)) && self.end == range.start
            }
            SharedMessages::Slice(_) => false,
        };
        if follows {
            self.end = range.end.clamp(self.end, pull.len());
        }
        follows
    }

    /// The pull this batch was cut from and where in it (`None` for an orderly batch).
    pub(crate) fn pull_part(&self) -> Option<PullPart<'_>> {
        match &self.shared {
            SharedMessages::Pull(share) => share.pull().map(|pull| PullPart {
                pull,
                range: self.start..self.end,
            }),
            SharedMessages::Slice(_) => None,
        }
    }

    /// The batch as a shared slice of its own.
    fn to_shared(&self) -> Arc<[MessageExt]> {
        match &self.shared {
            SharedMessages::Slice(all) if self.start == 0 && self.end == all.len() => all.clone(),
            _ => Arc::from(&**self),
        }
    }
}

impl std::ops::Deref for Messages {
    type Target = [MessageExt];

    #[inline]
    fn deref(&self) -> &[MessageExt] {
        self.shared
            .all()
            .get(self.start..self.end)
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for Messages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Messages").field(&&**self).finish()
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a MessageExt;
    type IntoIter = std::slice::Iter<'a, MessageExt>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl From<crate::consumer::queue_core::OrderlyBatch> for Messages {
    /// Shares the batch as it is (nothing is copied).
    #[inline]
    fn from(batch: crate::consumer::queue_core::OrderlyBatch) -> Self {
        use crate::consumer::queue_core::OrderlyBatch;
        match batch {
            OrderlyBatch::Pull { messages, range } => Messages::slice(messages, range),
            OrderlyBatch::Owned(messages) => Messages::from(messages),
        }
    }
}

impl From<Arc<[MessageExt]>> for Messages {
    /// Shares the batch as it is (nothing is copied).
    #[inline]
    fn from(batch: Arc<[MessageExt]>) -> Self {
        let end = batch.len();
        Messages {
            shared: SharedMessages::Slice(batch),
            start: 0,
            end,
        }
    }
}

/// A listener made of an async closure taking the batch and the context by value and giving
/// the context back with the status (closures cannot borrow across an await).
pub struct FnListener<F>(pub F);

#[async_trait::async_trait(?Send)]
impl<F, Fut> MessageListener for FnListener<F>
where
    F: Fn(Messages, ConsumeContext) -> Fut + Send + 'static,
    Fut: Future<Output = (ConsumeStatus, ConsumeContext)> + 'static,
{
    async fn consume(&self, messages: &[MessageExt], ctx: &mut ConsumeContext) -> ConsumeStatus {
        let batch = ctx
            .batch
            .clone()
            .unwrap_or_else(|| Messages::slice(Arc::new(messages.to_vec()), 0..messages.len()));
        // The closure owns the context until it gives it back: lend it instead of cloning it
        // (a clone copies the queue's strings on every call). Should the closure panic, the
        // stand-in left here still carries the settings the listener started with.
        let stand_in = ConsumeContext {
            queue: MessageQueue {
                topic: String::new(),
                broker_name: String::new(),
                queue_id: ctx.queue.queue_id,
            },
            ack_index: ctx.ack_index,
            delay_level: ctx.delay_level,
            batch: None,
        };
        let lent = std::mem::replace(ctx, stand_in);
        let (status, returned) = (self.0)(batch, lent).await;
        *ctx = returned;
        status
    }
}

/// A listener that takes the batch and the context by value, as a closure listener does: the
/// dispatcher hands them over instead of lending them. A call that finishes on its first poll
/// (the usual case) runs in memory kept from the previous such call, so it allocates nothing;
/// one that has to wait costs one future allocation (instead of the three a lending wrapper,
/// the trait and a task would take).
pub(crate) trait OwnedListener: MessageListener {
    /// Runs the calls of `run` one after another, each polled once, for as long as each finds
    /// a permit and finishes on that poll (see [`ConsumeDispatcher::consume_run`]). The loop
    /// lives in the listener's own type so that the user's closure is inlined into it and the
    /// kept call memory is looked up once per run, not once per call.
    /// The listener comes as an `Rc` (counted up once per run, not atomically) so that a
    /// call's future may hold it, as a borrowing async closure's does.
    fn run_owned(self: Rc<Self>, run: &mut OwnedRun<'_, '_>) -> RunStop;

    /// The listener as one whose calls the consume threads may run.
    fn as_pooled(&self) -> Option<&PooledConcurrent> {
        None
    }
}

/// The state of a run of by-value concurrent calls over one pull, as
/// [`OwnedListener::run_owned`] works through it.
pub(crate) struct OwnedRun<'r, 's> {
    /// The decoded pull the calls are cut from.
    pull: &'r Arc<Vec<MessageExt>>,
    /// The calls left.
    calls: &'r mut CallRanges,
    /// Where finished calls go and contexts come from.
    sink: &'r mut RunSink<'s>,
    /// The consumer's listener permits (see [`may_start_call`]).
    permits: &'r Arc<Semaphore>,
    /// The memory of an earlier call that finished at once.
    spare: &'r mut Option<SpareCall>,
    /// The call under way and its queue id, to report should it panic.
    current: Option<(std::ops::Range<usize>, i32)>,
}

/// Why [`OwnedListener::run_owned`] returned.
pub(crate) enum RunStop {
    /// Every call of the run finished at once.
    Done,
    /// The calls went slow: those left in the run go to the consume threads
    /// ([`PooledConcurrent`]).
    ToPool,
    /// No permit was free for the call over this range, which has not started.
    NoPermit(std::ops::Range<usize>),
    /// The call over this range (queue id beside it) did not finish on its first poll; it
    /// takes the free permit ([`permit_for_waiting_call`]).
    Pending(
        std::ops::Range<usize>,
        i32,
        RunningCall<(ConsumeStatus, ConsumeContext)>,
    ),
}

/// Whether the next call of a run may start: a permit is free. A free permit means nobody
/// waits for one (released permits go to waiters first), so starting now keeps the
/// first-come-first-served order. The call takes no permit yet: most calls finish on their
/// first poll, before anything else runs on this thread, and never overlap another; only one
/// that waits takes the permit ([`permit_for_waiting_call`]), which is still free then. This
/// saves each run a count down and up of the semaphore, whose release takes its lock.
#[inline]
fn may_start_call(permits: &Semaphore) -> bool {
    permits.available_permits() > 0
}

/// The permit for a call that did not finish on its first poll: the free one
/// [`may_start_call`] saw. `None` only if something took it during the poll (nothing else
/// runs on the consumer's thread then); the call runs on without one.
fn permit_for_waiting_call(permits: &Arc<Semaphore>) -> Option<tokio::sync::OwnedSemaphorePermit> {
    permits.clone().try_acquire_owned().ok()
}

/// The loop of [`OwnedListener::run_owned`] for a listener whose calls are futures of type
/// `Fut`, started by `start`.
#[inline]
fn run_in_spare<Fut>(
    run: &mut OwnedRun<'_, '_>,
    start: impl Fn(Messages, ConsumeContext) -> Fut,
) -> RunStop
where
    Fut: Future<Output = (ConsumeStatus, ConsumeContext)> + 'static,
{
    let mut slot = slot_from::<Fut>(run.spare);
    let mut poll_context = std::task::Context::from_waker(std::task::Waker::noop());
    // The context a call gives back serves the next call (reset, as a synchronous
    // listener's lent one is), rather than going back to the queue's spares and a fresh one
    // coming out of them for every call.
    let mut context = run.sink.context();
    // Each call's batch takes over the count on the pull that the call before dropped.
    let parked = ParkedPull::begin();
    for range in run.calls.by_ref() {
        if !may_start_call(run.permits) {
            run.sink.recycle(context);
            *run.spare = Some(slot);
            return RunStop::NoPermit(range);
        }
        let queue_id = context.queue.queue_id;
        run.current = Some((range.clone(), queue_id));
        let call = start(
            Messages::of_share(parked.share(run.pull), range.clone()),
            context,
        );
        let polled = poll_first(&mut slot, call, &mut poll_context);
        run.current = None;
        match polled {
            Some((status, returned)) => {
                run.sink
                    .finished_lending_call(run.pull, range, status, &returned);
                context = returned;
                run.sink.reset_lent(&mut context);
            }
            None => return RunStop::Pending(range, queue_id, running_in(*slot)),
        }
    }
    run.sink.recycle(context);
    *run.spare = Some(slot);
    RunStop::Done
}

/// The memory of a finished listener call, kept for the next (whatever the closure's future
/// type is).
pub(crate) type SpareCall = Box<dyn std::any::Any>;

/// Where a closure's future runs: empty between calls.
type CallSlot<Fut> = std::pin::Pin<Box<Option<Fut>>>;

/// A listener call that did not finish on its first poll.
pub(crate) type RunningCall<T> = std::pin::Pin<Box<dyn Future<Output = T>>>;

/// Starts `call` in `slot` and polls it once: its output when it finished (the slot is empty
/// again), `None` when it waits (the slot holds it).
#[inline]
fn poll_first<Fut: Future>(
    slot: &mut CallSlot<Fut>,
    call: Fut,
    cx: &mut std::task::Context<'_>,
) -> Option<Fut::Output> {
    slot.set(Some(call));
    match slot.as_mut().as_pin_mut().map(|call| call.poll(cx)) {
        Some(std::task::Poll::Ready(output)) => {
            slot.set(None);
            Some(output)
        }
        _ => None,
    }
}

/// The memory `spare` keeps when it is a slot for calls of type `Fut` (taking it), otherwise
/// a new empty slot.
fn slot_from<Fut: 'static>(spare: &mut Option<SpareCall>) -> Box<CallSlot<Fut>> {
    spare
        .take()
        .and_then(|spare| spare.downcast().ok())
        .unwrap_or_else(|| Box::new(Box::pin(None)))
}

/// The call in `slot`, which did not finish on its first poll, to poll to the end.
fn running_in<Fut: Future + 'static>(slot: CallSlot<Fut>) -> RunningCall<Fut::Output> {
    running_then(slot, |output| output)
}

/// The call in `slot`, which did not finish on its first poll, to poll to the end, its
/// output passed through `then`.
fn running_then<Fut, T>(
    mut slot: CallSlot<Fut>,
    then: impl FnOnce(Fut::Output) -> T + 'static,
) -> RunningCall<T>
where
    Fut: Future + 'static,
{
    Box::pin(async move {
        let output = std::future::poll_fn(|cx| match slot.as_mut().as_pin_mut() {
            Some(call) => call.poll(cx),
            // Not reached: the slot holds the call until it is dropped.
            None => std::task::Poll::Pending,
        })
        .await;
        then(output)
    })
}

impl<F, Fut> OwnedListener for FnListener<F>
where
    F: Fn(Messages, ConsumeContext) -> Fut + Send + 'static,
    Fut: Future<Output = (ConsumeStatus, ConsumeContext)> + 'static,
{
    fn run_owned(self: Rc<Self>, run: &mut OwnedRun<'_, '_>) -> RunStop {
        run_in_spare(run, |messages, context| (self.0)(messages, context))
    }
}

/// A listener made of a synchronous closure over the batch and the context, as Java's
/// `MessageListenerConcurrently` is (see
/// [`PushConsumerBuilder::listener_sync_fn`](crate::PushConsumerBuilder::listener_sync_fn)).
/// Its calls run on the consumer's thread while they are quick, and on its consume threads
/// once they are slow ([`ConsumePool`]).
pub(crate) struct SyncFnListener<F> {
    call: Arc<F>,
    pool: ConsumePool,
}

impl<F> SyncFnListener<F> {
    /// The listener `call`, whose slow calls go to `pool`.
    pub(crate) fn new(call: F, pool: ConsumePool) -> Self {
        SyncFnListener {
            call: Arc::new(call),
            pool,
        }
    }
}

#[async_trait::async_trait(?Send)]
impl<F> MessageListener for SyncFnListener<F>
where
    F: Fn(&[MessageExt], &mut ConsumeContext) -> ConsumeStatus + Send + Sync + 'static,
{
    /// The call as hooks see it: on the consumer's thread while calls are quick, otherwise on
    /// a consume thread with a copy of the context (copied back after the call).
    async fn consume(&self, messages: &[MessageExt], ctx: &mut ConsumeContext) -> ConsumeStatus {
        if !self.pool.pooled() {
            return self.pool.run_timed(|| (self.call)(messages, ctx));
        }
        let batch = ctx
            .batch
            .clone()
            .unwrap_or_else(|| Messages::from(Arc::<[MessageExt]>::from(messages)));
        let mut lent = ctx.clone();
        lent.batch = None;
        let call = Arc::clone(&self.call);
        let (status, returned) = pooled_result(
            self.pool
                .run(move || {
                    let status = call(&batch, &mut lent);
                    (status, lent)
                })
                .await,
        );
        ctx.ack_index = returned.ack_index;
        ctx.delay_level = returned.delay_level;
        status
    }
}

/// What a pooled call returned, or its panic raised again on the consumer's thread, where the
/// caller's panic guard turns it into a retry (or a suspend) as for a call run there.
fn pooled_result<T>(result: std::thread::Result<T>) -> T {
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

impl<F> OwnedListener for SyncFnListener<F>
where
    F: Fn(&[MessageExt], &mut ConsumeContext) -> ConsumeStatus + Send + Sync + 'static,
{
    /// While calls are quick, they run here in a loop that lends one context to each call in
    /// turn, with no future, no call memory and no context moved per call; the run is timed
    /// (its first call and the whole) for the pool to judge. A first call slow enough to send
    /// calls to the pool ends the run there: the queue hands the rest to the pool
    /// ([`PooledConcurrent`]).
    fn run_owned(self: Rc<Self>, run: &mut OwnedRun<'_, '_>) -> RunStop {
        let mut timer = RunTimer::start();
        let mut context = run.sink.context();
        let queue_id = context.queue.queue_id;
        let total = run.calls.len();
        let mut to_pool = false;
        for (i, range) in run.calls.by_ref().enumerate() {
            if !may_start_call(run.permits) {
                run.sink.recycle(context);
                return RunStop::NoPermit(range);
            }
            run.current = Some((range.clone(), queue_id));
            let messages = run.pull.get(range.clone()).unwrap_or_default();
            let status = (self.call)(messages, &mut context);
            run.current = None;
            run.sink
                .finished_lending_call(run.pull, range, status, &context);
            run.sink.reset_lent(&mut context);
            if timer.call_done(&self.pool, i + 1 < total) {
                to_pool = true;
                break;
            }
        }
        run.sink.recycle(context);
        if to_pool {
            return RunStop::ToPool;
        }
        timer.finish(&self.pool);
        RunStop::Done
    }

    fn as_pooled(&self) -> Option<&PooledConcurrent> {
        Some(self)
    }
}

/// A listener whose calls the consume threads run once they are slow ([`ConsumePool`]),
/// with contexts `C` and outcomes `O` (concurrent or orderly): the queue actor hands each
/// call over while [`pooled`](Self::pooled) says so, and gets its outcome back as a message,
/// with no task of its own per call.
pub(crate) trait PooledListener<C, O> {
    /// Whether calls go to the consume threads now.
    fn pooled(&self) -> bool;

    /// Runs the call over `batch` on a consume thread; `done` gets its outcome there (a
    /// panic becomes a retry, or an orderly suspend, as on the consumer's thread).
    fn submit(
        &self,
        batch: Messages,
        context: C,
        span: tracing::Span,
        done: Box<dyn FnOnce(O) + Send>,
    );
}

/// A concurrent listener whose calls the consume threads may run.
pub(crate) type PooledConcurrent = dyn PooledListener<ConsumeContext, ConsumeOutcome>;

/// An orderly listener whose calls the consume threads may run: one call per queue (per key)
/// at a time still, since the queue hands out its next batch only once the last one is
/// settled.
pub(crate) type PooledOrderly = dyn PooledListener<OrderlyContext, OrderlyOutcome>;

impl<F> PooledListener<ConsumeContext, ConsumeOutcome> for SyncFnListener<F>
where
    F: Fn(&[MessageExt], &mut ConsumeContext) -> ConsumeStatus + Send + Sync + 'static,
{
    fn pooled(&self) -> bool {
        self.pool.pooled()
    }

    fn submit(
        &self,
        batch: Messages,
        mut context: ConsumeContext,
        span: tracing::Span,
        done: Box<dyn FnOnce(ConsumeOutcome) + Send>,
    ) {
        let call = Arc::clone(&self.call);
        let queue_id = context.queue.queue_id;
        let failed_batch = batch.clone();
        self.pool.submit_call(
            span,
            move || {
                let status = call(&batch, &mut context);
                (status, context)
            },
            move |result, elapsed| match result {
                Ok((status, context)) => ConsumeOutcome {
                    status,
                    context,
                    elapsed,
                },
                Err(panic) => ConsumeOutcome {
                    elapsed,
                    ..panicked_call(&failed_batch, queue_id, panic.as_ref())
                },
            },
            done,
        );
    }
}

/// A listener made of an async closure that borrows the batch and the context, as
/// [`MessageListener::consume`] does (see
/// [`PushConsumerBuilder::listener_async`](crate::PushConsumerBuilder::listener_async)).
pub(crate) struct AsyncFnListener<F>(pub F);

#[async_trait::async_trait(?Send)]
impl<F> MessageListener for AsyncFnListener<F>
where
    F: AsyncFn(&[MessageExt], &mut ConsumeContext) -> ConsumeStatus + Send + 'static,
{
    async fn consume(&self, messages: &[MessageExt], ctx: &mut ConsumeContext) -> ConsumeStatus {
        (self.0)(messages, ctx).await
    }
}

/// What the calls of one run of an [`AsyncFnListener`] share: the listener, the pull and the
/// context lent to each call in turn. Each call's future holds it (an `Rc`: a count up that
/// is not atomic, where handing a by-value closure its batch costs an atomic count up and
/// down on the pull), so the call borrows the batch and the context for as long as it runs.
struct BorrowedRun<F> {
    listener: Rc<AsyncFnListener<F>>,
    pull: Arc<Vec<MessageExt>>,
    /// Lent to one call at a time: a call that waits ends the run and keeps this run state to
    /// itself, and the next run gets a state of its own.
    context: std::cell::RefCell<ConsumeContext>,
}

impl<F> BorrowedRun<F> {
    /// Takes the context out, leaving one that allocates nothing.
    fn take_context(&self) -> ConsumeContext {
        let empty = ConsumeContext::new(MessageQueue {
            topic: String::new(),
            broker_name: String::new(),
            queue_id: 0,
        });
        std::mem::replace(&mut *self.context.borrow_mut(), empty)
    }
}

/// One call of an [`AsyncFnListener`] over the messages `range` of its run's pull.
// The context stays borrowed while the call waits, and nothing else borrows it then: the run
// loop reads it only after the call's future is gone, and a call that waits ends the run,
// which leaves the state to that call alone.
#[allow(clippy::await_holding_refcell_ref)]
async fn borrowed_call<F>(run: Rc<BorrowedRun<F>>, range: std::ops::Range<usize>) -> ConsumeStatus
where
    F: AsyncFn(&[MessageExt], &mut ConsumeContext) -> ConsumeStatus,
{
    let messages = run.pull.get(range).unwrap_or_default();
    let mut context = run.context.borrow_mut();
    (run.listener.0)(messages, &mut context).await
}

impl<F> OwnedListener for AsyncFnListener<F>
where
    F: AsyncFn(&[MessageExt], &mut ConsumeContext) -> ConsumeStatus + Send + 'static,
{
    /// The loop of [`run_in_spare`], with calls that borrow: the context stays in the run
    /// state (nothing moved in and out of a future per call) and the batch is a slice of the
    /// run's pull.
    fn run_owned(self: Rc<Self>, run: &mut OwnedRun<'_, '_>) -> RunStop {
        run_borrowing(self, run, borrowed_call::<F>)
    }
}

/// The loop of [`AsyncFnListener::run_owned`], its calls' futures of type `Fut` started by
/// `start`.
#[inline]
fn run_borrowing<F, Fut>(
    listener: Rc<AsyncFnListener<F>>,
    run: &mut OwnedRun<'_, '_>,
    start: impl Fn(Rc<BorrowedRun<F>>, std::ops::Range<usize>) -> Fut,
) -> RunStop
where
    F: 'static,
    Fut: Future<Output = ConsumeStatus> + 'static,
{
    let mut slot = slot_from::<Fut>(run.spare);
    let mut poll_context = std::task::Context::from_waker(std::task::Waker::noop());
    let shared = Rc::new(BorrowedRun {
        listener,
        pull: run.pull.clone(),
        context: std::cell::RefCell::new(run.sink.context()),
    });
    let queue_id = shared.context.borrow().queue.queue_id;
    for range in run.calls.by_ref() {
        if !may_start_call(run.permits) {
            run.sink.recycle(shared.take_context());
            *run.spare = Some(slot);
            return RunStop::NoPermit(range);
        }
        run.current = Some((range.clone(), queue_id));
        let polled = poll_first(
            &mut slot,
            start(shared.clone(), range.clone()),
            &mut poll_context,
        );
        run.current = None;
        match polled {
            Some(status) => {
                let mut context = shared.context.borrow_mut();
                run.sink
                    .finished_lending_call(run.pull, range, status, &context);
                run.sink.reset_lent(&mut context);
            }
            None => {
                // The call keeps the run state (and its context) until it finishes.
                let call = running_then(*slot, move |status| (status, shared.take_context()));
                return RunStop::Pending(range, queue_id, call);
            }
        }
    }
    run.sink.recycle(shared.take_context());
    *run.spare = Some(slot);
    RunStop::Done
}

/// The message an actor receives when it is the listener
/// ([`PushConsumerBuilder::listener_actor`](crate::PushConsumerBuilder::listener_actor)).
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
                .as_ref()
                .map_or_else(|| messages.to_vec().into(), Messages::to_shared),
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
/// use rocketmq_actor::consumer::OrderlyListener;
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
pub trait OrderlyListener: Send + 'static {
    /// Consumes a batch of one queue, in order.
    async fn consume(&self, messages: &[MessageExt], ctx: &mut OrderlyContext) -> OrderlyStatus;
}

/// An orderly listener made of an async closure (batch and context by value, both given back).
pub struct FnOrderlyListener<F>(pub F);

#[async_trait::async_trait(?Send)]
impl<F, Fut> OrderlyListener for FnOrderlyListener<F>
where
    F: Fn(Messages, OrderlyContext) -> Fut + Send + 'static,
    Fut: Future<Output = (OrderlyStatus, OrderlyContext)> + 'static,
{
    async fn consume(&self, messages: &[MessageExt], ctx: &mut OrderlyContext) -> OrderlyStatus {
        let batch = Messages::slice(Arc::new(messages.to_vec()), 0..messages.len());
        let (status, returned) = (self.0)(batch, ctx.clone()).await;
        *ctx = returned;
        status
    }
}

/// An orderly listener that takes the batch and the context by value, as a closure listener
/// does (see [`OwnedListener`]).
pub(crate) trait OwnedOrderlyListener: OrderlyListener {
    /// Runs `run`'s chain of calls, one after another while each finishes on its first poll,
    /// in a loop compiled for this listener's type (see [`ConsumeDispatcher::run_orderly_chain`]).
    /// The listener comes as an `Rc`, as in [`OwnedListener::run_owned`].
    fn run_chain(self: Rc<Self>, run: &mut OrderlyRun<'_, '_>) -> OrderlyRunStop;

    /// The listener as one whose calls the consume threads may run.
    fn as_pooled(&self) -> Option<&PooledOrderly> {
        None
    }
}

/// The settings a by-value orderly call started with (`auto_commit`, `suspend_time`, queue
/// id), for the outcome of a call that panicked.
type OrderlyDefaults = (bool, Duration, i32);

/// A chain of one queue's orderly calls run at once by [`OwnedOrderlyListener::run_chain`]:
/// its caller's [`OrderlyChain`] gives each call its context and decides, from each outcome,
/// the call that follows.
pub(crate) struct OrderlyRun<'c, 'r> {
    chain: &'r mut OrderlyChain<'c>,
    /// The batch to call next; `None` once the chain has ended.
    next: Option<Messages>,
    /// The consumer's listener permits (see [`may_start_call`]).
    permits: &'r Arc<Semaphore>,
    /// The memory of an earlier call that finished at once.
    spare: &'r mut Option<SpareCall>,
    /// The call under way (its batch's span: the core still holds the batch, see
    /// [`OrderlyChain::batch_of`]) and its settings, to report should it panic.
    current: Option<(BatchSpan, OrderlyDefaults)>,
}

/// Why [`OwnedOrderlyListener::run_chain`] returned.
pub(crate) enum OrderlyRunStop {
    /// The chain ended: every call finished at once.
    Done,
    /// The calls went slow: this batch's call, not started, goes to the consume threads
    /// ([`PooledOrderly`]).
    ToPool(Messages),
    /// No permit was free for this batch's call, which has not started.
    NoPermit(Messages),
    /// This batch's call did not finish on its first poll; it takes the free permit
    /// ([`permit_for_waiting_call`]).
    Pending(
        Messages,
        OrderlyDefaults,
        RunningCall<(OrderlyStatus, OrderlyContext)>,
    ),
}

/// The loop of [`OwnedOrderlyListener::run_chain`] for a listener whose calls are futures of
/// type `Fut`, started by `start`.
#[inline]
fn run_chain_in_spare<Fut>(
    run: &mut OrderlyRun<'_, '_>,
    start: impl Fn(Messages, OrderlyContext) -> Fut,
) -> OrderlyRunStop
where
    Fut: Future<Output = (OrderlyStatus, OrderlyContext)> + 'static,
{
    let mut slot = slot_from::<Fut>(run.spare);
    let mut poll_context = std::task::Context::from_waker(std::task::Waker::noop());
    // The context a call gives back serves the next call (readied again), as in the
    // synchronous loop, rather than going back to the queue's spares.
    let mut returned: Option<OrderlyContext> = None;
    while let Some(batch) = run.next.take() {
        if !may_start_call(run.permits) {
            if let Some(context) = returned {
                run.chain.recycle(context);
            }
            *run.spare = Some(slot);
            return OrderlyRunStop::NoPermit(batch);
        }
        let context = match returned.take() {
            Some(mut context) => {
                run.chain.reset_lent(&mut context);
                context
            }
            None => run.chain.context(),
        };
        let defaults = (
            context.auto_commit,
            context.suspend_time,
            context.queue.queue_id,
        );
        // Set before the call: the closure itself may panic, not only its future. The batch
        // itself goes to the closure: the core keeps it, and rebuilds it should it be needed.
        run.current = Some((BatchSpan::of(&batch), defaults));
        let call = start(batch, context);
        let polled = poll_first(&mut slot, call, &mut poll_context);
        let Some((span, defaults)) = run.current.take() else {
            break;
        };
        match polled {
            Some((status, context)) => {
                run.next = run.chain.finished_lending_call(span, status, &context);
                returned = Some(context);
            }
            None => {
                let batch = run.chain.batch_of(span);
                return OrderlyRunStop::Pending(batch, defaults, running_in(*slot));
            }
        }
    }
    if let Some(context) = returned {
        run.chain.recycle(context);
    }
    *run.spare = Some(slot);
    OrderlyRunStop::Done
}

impl<F, Fut> OwnedOrderlyListener for FnOrderlyListener<F>
where
    F: Fn(Messages, OrderlyContext) -> Fut + Send + 'static,
    Fut: Future<Output = (OrderlyStatus, OrderlyContext)> + 'static,
{
    fn run_chain(self: Rc<Self>, run: &mut OrderlyRun<'_, '_>) -> OrderlyRunStop {
        run_chain_in_spare(run, |messages, context| (self.0)(messages, context))
    }
}

/// An orderly listener made of a synchronous closure over the batch and the context, as
/// Java's `MessageListenerOrderly` is (see
/// [`PushConsumerBuilder::orderly_listener_sync_fn`](crate::PushConsumerBuilder::orderly_listener_sync_fn)).
/// Like [`SyncFnListener`], its calls move to the consume threads once they are slow; a
/// queue's calls still run one at a time, in order.
pub(crate) struct SyncFnOrderlyListener<F> {
    call: Arc<F>,
    pool: ConsumePool,
}

impl<F> SyncFnOrderlyListener<F> {
    /// The listener `call`, whose slow calls go to `pool`.
    pub(crate) fn new(call: F, pool: ConsumePool) -> Self {
        SyncFnOrderlyListener {
            call: Arc::new(call),
            pool,
        }
    }
}

#[async_trait::async_trait(?Send)]
impl<F> OrderlyListener for SyncFnOrderlyListener<F>
where
    F: Fn(&[MessageExt], &mut OrderlyContext) -> OrderlyStatus + Send + Sync + 'static,
{
    async fn consume(&self, messages: &[MessageExt], ctx: &mut OrderlyContext) -> OrderlyStatus {
        if !self.pool.pooled() {
            return self.pool.run_timed(|| (self.call)(messages, ctx));
        }
        let batch: Arc<[MessageExt]> = Arc::from(messages);
        let mut lent = ctx.clone();
        let call = Arc::clone(&self.call);
        let (status, returned) = pooled_result(
            self.pool
                .run(move || {
                    let status = call(&batch, &mut lent);
                    (status, lent)
                })
                .await,
        );
        *ctx = returned;
        status
    }
}

impl<F> OwnedOrderlyListener for SyncFnOrderlyListener<F>
where
    F: Fn(&[MessageExt], &mut OrderlyContext) -> OrderlyStatus + Send + Sync + 'static,
{
    /// While calls are quick, the chain runs here in a plain loop, no future and no call
    /// memory per call, and lends one context to each call in turn (readied again between
    /// calls), as the concurrent synchronous loop does; the chain is timed for the pool to
    /// judge. A first call slow enough to send calls to the pool ends the chain there: the
    /// queue hands its next batch to the pool ([`PooledOrderly`]).
    fn run_chain(self: Rc<Self>, run: &mut OrderlyRun<'_, '_>) -> OrderlyRunStop {
        let mut timer = RunTimer::start();
        let mut lent: Option<OrderlyContext> = None;
        let mut to_pool = false;
        while let Some(batch) = run.next.take() {
            if !may_start_call(run.permits) {
                if let Some(context) = lent {
                    run.chain.recycle(context);
                }
                return OrderlyRunStop::NoPermit(batch);
            }
            let context = match &mut lent {
                Some(context) => {
                    run.chain.reset_lent(context);
                    context
                }
                None => lent.insert(run.chain.context()),
            };
            let defaults = (
                context.auto_commit,
                context.suspend_time,
                context.queue.queue_id,
            );
            run.current = Some((BatchSpan::of(&batch), defaults));
            let status = (self.call)(&batch, context);
            drop(batch);
            let Some((span, _)) = run.current.take() else {
                break;
            };
            run.next = run.chain.finished_lending_call(span, status, context);
            if timer.call_done(&self.pool, run.next.is_some()) {
                to_pool = true;
                break;
            }
        }
        if let Some(context) = lent {
            run.chain.recycle(context);
        }
        if to_pool {
            if let Some(batch) = run.next.take() {
                return OrderlyRunStop::ToPool(batch);
            }
        }
        timer.finish(&self.pool);
        OrderlyRunStop::Done
    }

    fn as_pooled(&self) -> Option<&PooledOrderly> {
        Some(self)
    }
}

impl<F> PooledListener<OrderlyContext, OrderlyOutcome> for SyncFnOrderlyListener<F>
where
    F: Fn(&[MessageExt], &mut OrderlyContext) -> OrderlyStatus + Send + Sync + 'static,
{
    fn pooled(&self) -> bool {
        self.pool.pooled()
    }

    fn submit(
        &self,
        batch: Messages,
        mut context: OrderlyContext,
        span: tracing::Span,
        done: Box<dyn FnOnce(OrderlyOutcome) + Send>,
    ) {
        let call = Arc::clone(&self.call);
        let defaults = (
            context.auto_commit,
            context.suspend_time,
            context.queue.queue_id,
        );
        let failed_batch = batch.clone();
        self.pool.submit_call(
            span,
            move || {
                let status = call(&batch, &mut context);
                (status, context)
            },
            move |result, elapsed| match result {
                Ok((status, context)) => OrderlyOutcome {
                    status,
                    context,
                    elapsed,
                },
                Err(panic) => OrderlyOutcome {
                    elapsed,
                    ..panicked_orderly_call(&failed_batch, defaults, panic.as_ref(), Instant::now())
                },
            },
            done,
        );
    }
}

/// An orderly listener made of an async closure that borrows the batch and the context, as
/// [`OrderlyListener::consume`] does (see
/// [`PushConsumerBuilder::orderly_listener_async`](crate::PushConsumerBuilder::orderly_listener_async)).
pub(crate) struct AsyncFnOrderlyListener<F>(pub F);

#[async_trait::async_trait(?Send)]
impl<F> OrderlyListener for AsyncFnOrderlyListener<F>
where
    F: AsyncFn(&[MessageExt], &mut OrderlyContext) -> OrderlyStatus + Send + 'static,
{
    async fn consume(&self, messages: &[MessageExt], ctx: &mut OrderlyContext) -> OrderlyStatus {
        (self.0)(messages, ctx).await
    }
}

/// What the calls of one chain of an [`AsyncFnOrderlyListener`] share: the listener and the
/// context lent to each call in turn (see [`BorrowedRun`]). Each call's future owns its batch.
struct BorrowedChain<F> {
    listener: Rc<AsyncFnOrderlyListener<F>>,
    /// Lent to one call at a time: a call that waits ends the chain and keeps this state.
    context: std::cell::RefCell<OrderlyContext>,
}

impl<F> BorrowedChain<F> {
    /// Takes the context out, leaving one that allocates nothing.
    fn take_context(&self) -> OrderlyContext {
        let empty = OrderlyContext {
            queue: MessageQueue {
                topic: String::new(),
                broker_name: String::new(),
                queue_id: 0,
            },
            auto_commit: true,
            suspend_time: Duration::ZERO,
        };
        std::mem::replace(&mut *self.context.borrow_mut(), empty)
    }
}

/// One call of an [`AsyncFnOrderlyListener`] over `batch`.
// As in `borrowed_call`: nothing else borrows the context while the call waits.
#[allow(clippy::await_holding_refcell_ref)]
async fn borrowed_orderly_call<F>(chain: Rc<BorrowedChain<F>>, batch: Messages) -> OrderlyStatus
where
    F: AsyncFn(&[MessageExt], &mut OrderlyContext) -> OrderlyStatus,
{
    let mut context = chain.context.borrow_mut();
    (chain.listener.0)(&batch, &mut context).await
}

impl<F> OwnedOrderlyListener for AsyncFnOrderlyListener<F>
where
    F: AsyncFn(&[MessageExt], &mut OrderlyContext) -> OrderlyStatus + Send + 'static,
{
    /// The loop of [`run_chain_in_spare`], with calls that borrow their context from the
    /// chain's shared state instead of taking it by value.
    fn run_chain(self: Rc<Self>, run: &mut OrderlyRun<'_, '_>) -> OrderlyRunStop {
        run_borrowing_chain(self, run, borrowed_orderly_call::<F>)
    }
}

/// The loop of [`AsyncFnOrderlyListener::run_chain`], its calls' futures of type `Fut`
/// started by `start`.
#[inline]
fn run_borrowing_chain<F, Fut>(
    listener: Rc<AsyncFnOrderlyListener<F>>,
    run: &mut OrderlyRun<'_, '_>,
    start: impl Fn(Rc<BorrowedChain<F>>, Messages) -> Fut,
) -> OrderlyRunStop
where
    F: 'static,
    Fut: Future<Output = OrderlyStatus> + 'static,
{
    let mut slot = slot_from::<Fut>(run.spare);
    let mut poll_context = std::task::Context::from_waker(std::task::Waker::noop());
    let mut shared: Option<Rc<BorrowedChain<F>>> = None;
    while let Some(batch) = run.next.take() {
        if !may_start_call(run.permits) {
            if let Some(shared) = shared {
                run.chain.recycle(shared.take_context());
            }
            *run.spare = Some(slot);
            return OrderlyRunStop::NoPermit(batch);
        }
        let chain = match &shared {
            Some(chain) => {
                run.chain.reset_lent(&mut chain.context.borrow_mut());
                chain
            }
            None => shared.insert(Rc::new(BorrowedChain {
                listener: Rc::clone(&listener),
                context: std::cell::RefCell::new(run.chain.context()),
            })),
        };
        let defaults = {
            let context = chain.context.borrow();
            (
                context.auto_commit,
                context.suspend_time,
                context.queue.queue_id,
            )
        };
        // Set before the call: the closure itself may panic, not only its future.
        run.current = Some((BatchSpan::of(&batch), defaults));
        let polled = poll_first(&mut slot, start(Rc::clone(chain), batch), &mut poll_context);
        let Some((span, defaults)) = run.current.take() else {
            break;
        };
        match polled {
            Some(status) => {
                let context = chain.context.borrow();
                run.next = run.chain.finished_lending_call(span, status, &context);
            }
            None => {
                // The call keeps the chain's state (and its context) until it finishes.
                let batch = run.chain.batch_of(span);
                let chain = Rc::clone(chain);
                let call = running_then(*slot, move |status| (status, chain.take_context()));
                return OrderlyRunStop::Pending(batch, defaults, call);
            }
        }
    }
    if let Some(shared) = shared {
        run.chain.recycle(shared.take_context());
    }
    *run.spare = Some(slot);
    OrderlyRunStop::Done
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

/// How an orderly batch went.
#[derive(Debug, Clone)]
pub struct OrderlyOutcome {
    /// The status; a panic counts as a suspend.
    pub status: OrderlyStatus,
    /// The context as the listener left it.
    pub context: OrderlyContext,
    /// How long the listener ran.
    pub elapsed: Duration,
}

use crate::hooks::panic_text;

/// The consume hooks of one consumer and its group (only built when there are hooks).
pub(crate) struct ConsumeHooks {
    group: Arc<str>,
    hooks: Hooks<dyn ConsumeHook>,
}

impl ConsumeHooks {
    /// `None` when there is no hook: listener calls then run no hook code at all.
    pub(crate) fn new(group: Arc<str>, hooks: Hooks<dyn ConsumeHook>) -> Option<Rc<Self>> {
        (!hooks.is_empty()).then(|| Rc::new(ConsumeHooks { group, hooks }))
    }

    fn context<'a>(
        &'a self,
        queue: &'a MessageQueue,
        messages: &'a [MessageExt],
        orderly: bool,
    ) -> ConsumeHookContext<'a> {
        ConsumeHookContext {
            group: &self.group,
            queue,
            messages,
            orderly,
            status: None,
            success: false,
            panicked: false,
            elapsed: Duration::ZERO,
        }
    }

    fn before(&self, ctx: &ConsumeHookContext<'_>) {
        for hook in self.hooks.iter() {
            guarded("consume", || hook.before_consume(ctx));
        }
    }

    fn after(&self, ctx: &ConsumeHookContext<'_>) {
        for hook in self.hooks.iter() {
            guarded("consume", || hook.after_consume(ctx));
        }
    }
}

/// How a batch went.
#[derive(Debug, Clone)]
pub struct ConsumeOutcome {
    /// The listener's status; `ReconsumeLater` when it panicked.
    pub status: ConsumeStatus,
    /// The context as the listener left it.
    pub context: ConsumeContext,
    /// How long the listener ran.
    pub elapsed: Duration,
}

impl ConsumeOutcome {
    /// The outcome of a batch that never reached the listener: retried like a failure.
    pub fn failed(queue: MessageQueue) -> Self {
        ConsumeOutcome {
            status: ConsumeStatus::ReconsumeLater,
            context: ConsumeContext::new(queue),
            elapsed: Duration::ZERO,
        }
    }
}

/// A listener call that did not finish at once (see [`ConsumeDispatcher::consume_run`]).
pub(crate) type PendingConsume = std::pin::Pin<Box<dyn Future<Output = ConsumeOutcome>>>;

/// Counts how often a future was polled.
struct CountPolls<F> {
    inner: F,
    polls: u32,
}

impl<F: Future + Unpin> Future for CountPolls<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        self.polls = self.polls.saturating_add(1);
        std::pin::Pin::new(&mut self.inner).poll(cx)
    }
}

/// One concurrent listener call holding `permit`, from `started` on. With `untimed_if_at_once`
/// a listener that finishes on its first poll is not timed (see
/// [`ConsumeDispatcher::consume_run`]).
async fn run_concurrent(
    listener: Rc<dyn MessageListener>,
    messages: Messages,
    mut context: ConsumeContext,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    started: Instant,
    untimed_if_at_once: bool,
    hooks: Option<Rc<ConsumeHooks>>,
) -> ConsumeOutcome {
    // With hooks: before the call, and the call's own clock.
    let hooked = hooks.map(|hooks| {
        hooks.before(&hooks.context(&context.queue, &messages, false));
        (hooks, Instant::now())
    });
    context.batch = Some(messages.clone());
    let mut call = CountPolls {
        inner: listener.consume(&messages, &mut context),
        polls: 0,
    };
    let result = AssertUnwindSafe(&mut call).catch_unwind().await;
    let at_once = call.polls <= 1;
    drop(call);
    drop(permit);
    context.batch = None;
    let elapsed = if untimed_if_at_once && at_once {
        Duration::ZERO
    } else {
        started.elapsed()
    };
    if let Some((hooks, call_started)) = &hooked {
        // A closure listener that panicked kept the context it was lent (an empty topic):
        // name the queue from the messages then.
        let named;
        let queue = if context.queue.topic.is_empty() {
            named = queue_of(&messages).unwrap_or_else(|| context.queue.clone());
            &named
        } else {
            &context.queue
        };
        let mut ctx = hooks.context(queue, &messages, false);
        ctx.status = result
            .as_ref()
            .ok()
            .map(|status| ListenerStatus::Concurrent(*status));
        ctx.success = matches!(result, Ok(ConsumeStatus::Success));
        ctx.panicked = result.is_err();
        ctx.elapsed = call_started.elapsed();
        hooks.after(&ctx);
    }
    match result {
        Ok(status) => ConsumeOutcome {
            status,
            context,
            elapsed,
        },
        Err(panic) => {
            // A closure listener that panicked kept the context it was lent: name the queue
            // from the messages then.
            let queue = if context.queue.topic.is_empty() {
                queue_of(&messages).unwrap_or_else(|| context.queue.clone())
            } else {
                context.queue.clone()
            };
            tracing::error!(queue = %queue, panic = %panic_text(panic.as_ref()), "listener panicked; the batch will be retried");
            ConsumeOutcome {
                status: ConsumeStatus::ReconsumeLater,
                context,
                elapsed,
            }
        }
    }
}

/// The queue a batch came from, named from its first message: for reports about a call whose
/// context went down with a panic.
fn queue_of(messages: &[MessageExt]) -> Option<MessageQueue> {
    messages
        .first()
        .map(|m| MessageQueue::new(m.topic(), &*m.broker_name, m.queue_id))
}

/// A by-value call that did not finish on its first poll, boxed with its permit and a panic
/// guard for the caller to spawn; it is timed from `run_started`, the start of its run.
fn owned_pending(
    call: RunningCall<(ConsumeStatus, ConsumeContext)>,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    messages: Messages,
    queue_id: i32,
    run_started: Instant,
) -> PendingConsume {
    Box::pin(async move {
        // The caller's actor context polls this again before it sleeps, which registers the
        // real waker (the no-op one of the first poll is never woken).
        let result = AssertUnwindSafe(call).catch_unwind().await;
        drop(permit);
        let elapsed = run_started.elapsed();
        match result {
            Ok((status, context)) => ConsumeOutcome {
                status,
                context,
                elapsed,
            },
            Err(panic) => ConsumeOutcome {
                elapsed,
                ..panicked_call(&messages, queue_id, panic.as_ref())
            },
        }
    })
}

/// The outcome of a by-value call that panicked (its context went down with it): retried,
/// with a fresh context naming the queue from the messages.
fn panicked_call(
    messages: &Messages,
    queue_id: i32,
    panic: &(dyn std::any::Any + Send),
) -> ConsumeOutcome {
    let queue = queue_of(messages).unwrap_or_else(|| MessageQueue::new("", "", queue_id));
    tracing::error!(queue = %queue, panic = %panic_text(panic), "listener panicked; the batch will be retried");
    ConsumeOutcome {
        status: ConsumeStatus::ReconsumeLater,
        context: ConsumeContext::new(queue),
        elapsed: Duration::ZERO,
    }
}

/// How a chain of orderly calls ([`ConsumeDispatcher::run_orderly_chain`]) ended.
pub(crate) enum ChainEnd {
    /// Every call finished at once (or the round settles the last).
    Done,
    /// This batch's call waits (for a permit, or its own future): a task to spawn.
    Waiting(Messages, PendingOrderly),
    /// The calls went slow: this batch's call, not started, goes to the consume threads.
    ToPool(Messages),
}

/// An orderly call not finished at once, for the caller to spawn.
pub(crate) type PendingOrderly = std::pin::Pin<Box<dyn Future<Output = OrderlyOutcome>>>;

/// The outcome of a by-value orderly call that panicked: a suspend, with a context rebuilt from
/// the settings it started with (`auto_commit`, `suspend_time`, queue id).
fn panicked_orderly_call(
    messages: &Messages,
    (auto_commit, suspend_time, queue_id): OrderlyDefaults,
    panic: &(dyn std::any::Any + Send),
    started: Instant,
) -> OrderlyOutcome {
    let queue = queue_of(messages).unwrap_or_else(|| MessageQueue::new("", "", queue_id));
    tracing::error!(queue = %queue, panic = %panic_text(panic), "orderly listener panicked; suspending the queue");
    OrderlyOutcome {
        status: OrderlyStatus::SuspendCurrentQueueAMoment,
        context: OrderlyContext {
            queue,
            auto_commit,
            suspend_time,
        },
        elapsed: started.elapsed(),
    }
}

/// A by-value orderly call that did not finish on its first poll, boxed with its permit and a
/// panic guard for the caller to spawn; it is timed from its next poll.
fn owned_orderly_pending(
    call: RunningCall<(OrderlyStatus, OrderlyContext)>,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    batch: Messages,
    defaults: OrderlyDefaults,
) -> PendingOrderly {
    Box::pin(async move {
        let started = Instant::now();
        // Polled again by the caller's actor context, which registers the real waker.
        let result = AssertUnwindSafe(call).catch_unwind().await;
        drop(permit);
        match result {
            Ok((status, context)) => OrderlyOutcome {
                status,
                context,
                elapsed: started.elapsed(),
            },
            Err(panic) => panicked_orderly_call(&batch, defaults, panic.as_ref(), started),
        }
    })
}

/// The listener stage of one consumer: bounds concurrent listener calls across all its queues.
///
/// Queue actors spawn the futures it returns in their own context, so a batch costs no extra
/// actor hop; the semaphore (first come, first served) is the shared bound.
pub struct ConsumeDispatcher {
    listener: AnyListener,
    /// The same listener when it takes its arguments by value (a closure listener).
    owned: Option<Rc<dyn OwnedListener>>,
    /// The memory of its last call that finished at once, for the next.
    spare_call: std::cell::Cell<Option<SpareCall>>,
    /// The same for an orderly closure listener.
    owned_orderly: Option<Rc<dyn OwnedOrderlyListener>>,
    /// The memory of its last call that finished at once, for the next.
    spare_orderly_call: std::cell::Cell<Option<SpareCall>>,
    permits: Arc<Semaphore>,
    /// The consume hooks, `None` when there are none.
    hooks: Option<Rc<ConsumeHooks>>,
}

impl ConsumeDispatcher {
    /// A dispatcher running at most `limit` listener calls at once.
    pub fn new(listener: AnyListener, limit: usize) -> Self {
        let limit = limit.max(1);
        ConsumeDispatcher {
            listener,
            owned: None,
            spare_call: std::cell::Cell::new(None),
            owned_orderly: None,
            spare_orderly_call: std::cell::Cell::new(None),
            permits: Arc::new(Semaphore::new(limit)),
            hooks: None,
        }
    }

    /// Calls `owned` (the dispatcher's concurrent listener itself) by value where it can.
    pub(crate) fn with_owned_listener(mut self, owned: Option<Rc<dyn OwnedListener>>) -> Self {
        self.owned = owned;
        self
    }

    /// Calls `owned` (the dispatcher's orderly listener itself) by value where it can.
    pub(crate) fn with_owned_orderly_listener(
        mut self,
        owned: Option<Rc<dyn OwnedOrderlyListener>>,
    ) -> Self {
        self.owned_orderly = owned;
        self
    }

    /// Runs `hooks` around every listener call.
    pub(crate) fn with_hooks(mut self, hooks: Option<Rc<ConsumeHooks>>) -> Self {
        self.hooks = hooks;
        self
    }
}

impl ConsumeDispatcher {
    /// Runs a concurrent batch (`context` fresh from [`ConsumeContext::new`]) once a permit is
    /// free; a panic becomes `ReconsumeLater`.
    pub(crate) fn consume_batch(
        &self,
        messages: Messages,
        context: ConsumeContext,
    ) -> impl Future<Output = ConsumeOutcome> + 'static {
        let listener = self.listener.clone();
        let permits = self.permits.clone();
        let hooks = self.hooks.clone();
        async move {
            let AnyListener::Concurrent(listener) = listener else {
                tracing::error!("a concurrent batch reached an orderly listener");
                return ConsumeOutcome::failed(context.queue);
            };
            let permit = permits.acquire_owned().await;
            run_concurrent(
                listener,
                messages,
                context,
                permit.ok(),
                Instant::now(),
                false,
                hooks,
            )
            .await
        }
    }

    /// Runs the listener calls of one pull — `messages` cut by `calls` — at once, one after
    /// another, for as long as each finds a free permit and finishes without waiting (the
    /// common case, which then costs no task of its own). Each such call goes to `sink`; the
    /// first that has to wait, or finds no permit, is returned (already started, if it got a
    /// permit) for the caller to spawn and poll to the end; the calls after it stay in
    /// `calls` for the caller's next run.
    ///
    /// A listener called by value runs the whole run under one panic guard, taking the memory
    /// kept from earlier calls once; a call that panics becomes `ReconsumeLater` and the run
    /// goes on with the next.
    ///
    /// Calls finished at once are not timed: the caller times the run that began at
    /// `run_started` with two clock reads instead of two per call. Calls returned pending time
    /// themselves from `run_started`.
    pub(crate) fn consume_run(
        &self,
        messages: &Arc<Vec<MessageExt>>,
        calls: &mut CallRanges,
        sink: &mut RunSink<'_>,
        run_started: Instant,
    ) -> Option<(Messages, PendingConsume)> {
        let owned = match (&self.listener, &self.owned, &self.hooks) {
            (AnyListener::Concurrent(_), Some(owned), None) => owned,
            _ => {
                for range in calls.by_ref() {
                    let batch = Messages::slice(messages.clone(), range);
                    match self.consume_one(&batch, sink.context(), run_started) {
                        Ok(outcome) => sink.finished(batch, outcome),
                        Err(pending) => return Some((batch, pending)),
                    }
                }
                return None;
            }
        };
        let mut spare_call = self.spare_call.take();
        loop {
            let mut run = OwnedRun {
                pull: messages,
                calls: &mut *calls,
                sink: &mut *sink,
                permits: &self.permits,
                spare: &mut spare_call,
                current: None,
            };
            let stop =
                std::panic::catch_unwind(AssertUnwindSafe(|| Rc::clone(owned).run_owned(&mut run)));
            let panicked_in = run.current.take();
            match stop {
                Ok(stop) => {
                    self.spare_call.set(spare_call);
                    return match stop {
                        // The queue hands the calls left to the pool (see `pooled_listener`).
                        RunStop::Done | RunStop::ToPool => None,
                        RunStop::NoPermit(range) => {
                            let batch = Messages::slice(messages.clone(), range);
                            let waiting = self.consume_batch(batch.clone(), sink.context());
                            Some((batch, Box::pin(waiting) as PendingConsume))
                        }
                        RunStop::Pending(range, queue_id, call) => {
                            let batch = Messages::slice(messages.clone(), range);
                            let pending = owned_pending(
                                call,
                                permit_for_waiting_call(&self.permits),
                                batch.clone(),
                                queue_id,
                                run_started,
                            );
                            Some((batch, pending))
                        }
                    };
                }
                // The run goes on with the next call; the panicked one is retried.
                Err(panic) => {
                    if let Some((range, queue_id)) = panicked_in {
                        let batch = Messages::slice(messages.clone(), range);
                        let outcome = panicked_call(&batch, queue_id, panic.as_ref());
                        sink.finished(batch, outcome);
                    }
                }
            }
        }
    }

    /// One call of [`ConsumeDispatcher::consume_run`] for a listener not called by value (or
    /// with hooks): run at once when a permit is free and it finishes without waiting,
    /// otherwise returned for the caller to spawn.
    fn consume_one(
        &self,
        messages: &Messages,
        context: ConsumeContext,
        run_started: Instant,
    ) -> std::result::Result<ConsumeOutcome, PendingConsume> {
        let AnyListener::Concurrent(listener) = &self.listener else {
            return Err(Box::pin(self.consume_batch(messages.clone(), context)));
        };
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            return Err(Box::pin(self.consume_batch(messages.clone(), context)));
        };
        let mut call: PendingConsume = Box::pin(run_concurrent(
            listener.clone(),
            messages.clone(),
            context,
            Some(permit),
            run_started,
            true,
            self.hooks.clone(),
        ));
        // A pending call goes to the caller's actor context, which polls newly spawned futures
        // before it sleeps: that poll registers the real waker, so the no-op one is harmless.
        let mut poll_context = std::task::Context::from_waker(std::task::Waker::noop());
        match call.as_mut().poll(&mut poll_context) {
            std::task::Poll::Ready(outcome) => Ok(outcome),
            std::task::Poll::Pending => Err(call),
        }
    }

    /// Runs `first`, then each orderly call its [`OrderlyChain`] lets follow at once, in a
    /// loop compiled for a closure listener's type under one panic guard (a call that panics
    /// is a suspend, and ends the chain). `Err`: the batch whose call must wait (for a permit,
    /// or for its own future), to spawn; its permit goes with it. A listener that is not a
    /// closure, or hooks that must see each call, make every call one that waits.
    pub(crate) fn run_orderly_chain(
        &self,
        first: Messages,
        chain: &mut OrderlyChain<'_>,
        run_started: Instant,
    ) -> ChainEnd {
        let (Some(listener), None) = (&self.owned_orderly, &self.hooks) else {
            let (batch, pending) = self.waiting_orderly_call(first, chain);
            return ChainEnd::Waiting(batch, pending);
        };
        let mut spare = self.spare_orderly_call.take();
        // A call's batch, once dropped, hands its count on the pull to the next batch.
        let parked = ParkedPull::begin();
        let mut run = OrderlyRun {
            chain,
            next: Some(first),
            permits: &self.permits,
            spare: &mut spare,
            current: None,
        };
        let ran =
            std::panic::catch_unwind(AssertUnwindSafe(|| Rc::clone(listener).run_chain(&mut run)));
        let current = run.current.take();
        let OrderlyRun { chain, .. } = run;
        let ended = match ran {
            Ok(OrderlyRunStop::Done) => ChainEnd::Done,
            Ok(OrderlyRunStop::ToPool(batch)) => ChainEnd::ToPool(batch),
            Ok(OrderlyRunStop::NoPermit(batch)) => {
                let (batch, pending) = self.waiting_orderly_call(batch, chain);
                ChainEnd::Waiting(batch, pending)
            }
            Ok(OrderlyRunStop::Pending(batch, defaults, call)) => {
                let permit = permit_for_waiting_call(&self.permits);
                let pending = owned_orderly_pending(call, permit, batch.clone(), defaults);
                ChainEnd::Waiting(batch, pending)
            }
            Err(panic) => match current {
                Some((span, defaults)) => {
                    let batch = chain.batch_of(span);
                    let outcome =
                        panicked_orderly_call(&batch, defaults, panic.as_ref(), run_started);
                    // A suspend: the chain ends, the round settles it.
                    chain.leave_to_round(span, outcome);
                    ChainEnd::Done
                }
                // Not a listener call: the runtime's own code panicked.
                None => std::panic::resume_unwind(panic),
            },
        };
        self.spare_orderly_call.set(spare);
        drop(parked);
        ended
    }

    /// The concurrent listener when the consume threads may run its calls: a synchronous
    /// closure, and no hooks (which see each call on the consumer's thread, as a call that
    /// waits). Whether its calls go there now is [`PooledListener::pooled`].
    pub(crate) fn poolable_listener(&self) -> Option<&PooledConcurrent> {
        if self.hooks.is_some() {
            return None;
        }
        self.owned.as_deref()?.as_pooled()
    }

    /// The orderly listener when the consume threads may run its calls (see
    /// [`ConsumeDispatcher::poolable_listener`]).
    pub(crate) fn poolable_orderly_listener(&self) -> Option<&PooledOrderly> {
        if self.hooks.is_some() {
            return None;
        }
        self.owned_orderly.as_deref()?.as_pooled()
    }

    /// The call over `batch` as a task that takes a permit when one is free, with the
    /// context of the chain's next call.
    fn waiting_orderly_call(
        &self,
        batch: Messages,
        chain: &mut OrderlyChain<'_>,
    ) -> (Messages, PendingOrderly) {
        let context = chain.context();
        (
            batch.clone(),
            Box::pin(self.consume_orderly(batch, context)),
        )
    }

    /// Runs an orderly batch once a permit is free; a panic becomes a suspend.
    pub fn consume_orderly(
        &self,
        messages: Messages,
        mut context: OrderlyContext,
    ) -> impl Future<Output = OrderlyOutcome> + 'static {
        let listener = self.listener.clone();
        let permits = self.permits.clone();
        let hooks = self.hooks.clone();
        async move {
            let AnyListener::Orderly(listener) = listener else {
                tracing::error!("an orderly batch reached a concurrent listener");
                return OrderlyOutcome {
                    status: OrderlyStatus::SuspendCurrentQueueAMoment,
                    context,
                    elapsed: Duration::ZERO,
                };
            };
            let permit = permits.acquire_owned().await;
            if let Some(hooks) = &hooks {
                hooks.before(&hooks.context(&context.queue, &messages, true));
            }
            let started = Instant::now();
            let result = AssertUnwindSafe(listener.consume(&messages, &mut context))
                .catch_unwind()
                .await;
            drop(permit);
            if let Some(hooks) = &hooks {
                let mut ctx = hooks.context(&context.queue, &messages, true);
                ctx.status = result
                    .as_ref()
                    .ok()
                    .map(|status| ListenerStatus::Orderly(*status));
                ctx.success = result.as_ref().is_ok_and(|status| status.succeeded());
                ctx.panicked = result.is_err();
                ctx.elapsed = started.elapsed();
                hooks.after(&ctx);
            }
            if let Err(panic) = &result {
                tracing::error!(queue = %context.queue, panic = %panic_text(panic.as_ref()), "orderly listener panicked; suspending the queue");
            }
            OrderlyOutcome {
                status: OrderlyStatus::from_listener(result),
                context,
                elapsed: started.elapsed(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Messages, ParkedPull};
    use crate::MessageExt;
    use std::sync::Arc;

    fn pull(offsets: std::ops::Range<i64>) -> Arc<Vec<MessageExt>> {
        Arc::new(
            offsets
                .map(|offset| {
                    let mut m = MessageExt::from(crate::message::Message::new("T", &b"x"[..]));
                    m.queue_offset = offset;
                    m
                })
                .collect(),
        )
    }

    fn offsets(batch: &Messages) -> Vec<i64> {
        batch.iter().map(|m| m.queue_offset).collect()
    }

    #[test]
    fn a_run_hands_each_batch_its_own_messages_and_keeps_no_pull_past_its_end() {
        let first = pull(0..4);
        let second = pull(10..12);
        let run = ParkedPull::begin();
        let mut seen = Vec::new();
        for range in [0..1, 1..3, 3..4] {
            let batch = Messages::of_share(run.share(&first), range);
            seen.push(offsets(&batch));
            // Dropped within the run: its count waits for the next batch.
        }
        // A batch of another pull gives up the count parked on the first.
        let other = Messages::of_share(run.share(&second), 0..2);
        assert_eq!(Arc::strong_count(&first), 1);
        seen.push(offsets(&other));
        drop(other);
        assert_eq!(Arc::strong_count(&second), 2, "parked until the run ends");
        drop(run);
        assert_eq!(Arc::strong_count(&second), 1, "the run's end releases it");
        assert_eq!(seen, [vec![0], vec![1, 2], vec![3], vec![10, 11]]);
    }

    #[test]
    fn batches_kept_past_their_run_or_sent_to_another_thread_stay_whole() {
        let shared = pull(0..3);
        let run = ParkedPull::begin();
        let kept: Vec<Messages> = (0..3)
            .map(|at| Messages::of_share(run.share(&shared), at..at + 1))
            .collect();
        drop(run);
        assert_eq!(Arc::strong_count(&shared), 4);
        let mut kept = kept.into_iter();
        let sent = kept.next().expect("three batches");
        let offsets_elsewhere = std::thread::spawn(move || {
            let seen = offsets(&sent);
            drop(sent);
            seen
        })
        .join()
        .expect("the thread ends");
        assert_eq!(offsets_elsewhere, [0]);
        assert_eq!(
            kept.map(|batch| offsets(&batch)).collect::<Vec<_>>(),
            [vec![1], vec![2]]
        );
        assert_eq!(Arc::strong_count(&shared), 1, "no count is left anywhere");
    }

    #[test]
    fn a_panic_in_a_run_leaves_no_pull_parked_and_the_thread_parking_no_more() {
        let shared = pull(0..2);
        let panicked = std::panic::catch_unwind(|| {
            let run = ParkedPull::begin();
            let batch = Messages::of_share(run.share(&shared), 0..1);
            assert_eq!(batch.len(), 1);
            panic!("a listener panics");
        });
        assert!(panicked.is_err());
        assert_eq!(Arc::strong_count(&shared), 1);
        // Outside a run a dropped batch gives its count up at once.
        let batch = Messages::slice(shared.clone(), 0..2);
        drop(batch);
        assert_eq!(Arc::strong_count(&shared), 1);
    }
}
