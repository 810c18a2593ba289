//! The queue actor: one per owned MessageQueue, holding its ProcessQueue.
//!
//! It is the executor of the queue's state machine (`consumer::queue_core`): it feeds the core
//! the answers of pulls, listener calls, send-backs and timers, and carries out what the core
//! decides — pull, call the listener, send back, commit, finish a drop. Everything about one
//! queue happens in this actor's mailbox, so no state is shared between queues and no lock is
//! needed. The orderly half (locks, one batch at a time, key-ordered dispatch) is in
//! `queue_orderly.rs`.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::actors::connection::{settle_reply, ConnectionEvent, Subscribe};
use crate::actors::consumer::{now_ms, ConsumerEvent, ConsumerShared};
use crate::actors::listener::{
    ConsumeContext, ConsumeOutcome, Messages, OrderlyOutcome, PooledConcurrent, PooledListener,
};
use crate::actors::offset_store::{
    AttachCommitted, DetachCommitted, LoadOffset, PersistAndRemove, SetOffset,
};
use crate::actors::puller::Pull;
use crate::actors::queue_orderly::orderly_failures;
use crate::actors::WallClock;
use crate::consumer::config::{ConsumeFromWhere, PushConsumerConfig};
use crate::consumer::lock::needs_broker_lock;
use crate::consumer::offset::{start_offset, CommittedOffset, StartOffset};
use crate::consumer::process_queue::ProcessQueueSnapshot;
use crate::consumer::queue_core::{
    CallOutcome, CallRanges, EndedCalls, Mode, PullOrder, QueueAction, QueueCore, QueueEnv,
    QueueNote,
};
use crate::consumer::retry;
use crate::consumer::supervision::{RestartDecision, RestartTracker};
use crate::consumer::ConsumeStatus;
use crate::error::{Error, Result};
use crate::message::{MessageExt, MessageQueue};
use crate::metrics::QueueMetrics;
use crate::protocol::codes::request_code;
use crate::remoting::Expiry;
use crate::rpc::{PullRequest, Subscription};

/// The `tracing` target of the warning that a shutdown gave up on listener calls still running
/// after `shutdown_await` (their messages are redelivered). A program that holds calls back on
/// purpose, as the CLI's `consume --count`, filters this target out.
pub(crate) const ABANDONED_CALLS_TARGET: &str = "rocketmq_actor::shutdown";

/// How many spare copies of its queue a queue actor keeps (about the listener calls it has
/// running at once).
const MAX_SPARE_QUEUES: usize = 64;

/// Stop consuming the queue: stop pulling, let the batches in flight finish (bounded by the
/// consumer's `shutdown_await`), persist the offset, stop the actor. Resolves when done.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DropQueue;

/// The queue's state for diagnostics and ConsumerRunningInfo.
#[derive(Message)]
#[rtype(result = "QueueStatus")]
pub struct GetQueueStatus;

/// See [`GetQueueStatus`].
#[derive(Debug, Clone)]
pub struct QueueStatus {
    /// Java's ProcessQueueInfo fields.
    pub snapshot: ProcessQueueSnapshot,
    /// The pull loop has shown no activity for `pull_max_idle_time`.
    pub stalled: bool,
    /// The actor failed more often than the restart policy allows and stays idle: the
    /// rebalancer starts the queue afresh.
    pub gave_up: bool,
}

/// Makes the actor fail (stop unexpectedly) as a bug would: its supervisor restarts it from the
/// queue's committed offset. For fault-injection tests.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Fail;

/// The queue's committed offset and cached message count ([`PushConsumer::lag`]).
///
/// [`PushConsumer::lag`]: crate::PushConsumer::lag
#[derive(Message)]
#[rtype(result = "(Option<i64>, u64)")]
pub struct GetQueueLag;

impl Handler<GetQueueLag> for QueueActor {
    type Result = MessageResult<GetQueueLag>;

    fn handle(&mut self, _msg: GetQueueLag, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult((self.core.committed, self.core.cache_stats().count))
    }
}

/// Moves the queue to `offset`, dropping cached messages (RESET_CONSUMER_CLIENT_OFFSET).
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub struct ResetQueueOffset(pub i64);

/// Concurrent listener calls that finished at once: one call, or several over consecutive
/// messages of one pull that all succeeded (a run's calls, kept as one entry).
pub(crate) struct FinishedCalls {
    batch: Messages,
    calls: usize,
    epoch: u64,
    outcome: CallOutcome,
}

impl FinishedCalls {
    /// Whether every message of the entry was consumed.
    #[inline]
    fn all_succeeded(&self) -> bool {
        failed_count(self.batch.len(), &self.outcome) == 0
    }
}

/// The listener calls of one round of actions that finished at once, and when the first began.
#[derive(Default)]
pub(crate) struct Finished {
    started: Option<std::time::Instant>,
    /// Concurrent calls, as the core needs them (the listener's context is recycled as soon
    /// as the call returns, so what is carried per call stays small).
    calls: Vec<FinishedCalls>,
    /// Orderly calls that finished at once (each timed by itself).
    pub(crate) orderly: Vec<(Messages, u64, OrderlyOutcome)>,
    /// Orderly calls that succeeded at once and were settled by the core then (see
    /// `QueueActor::settle_at_once`); only counted here, with their messages.
    pub(crate) chained: usize,
    pub(crate) chained_messages: usize,
    /// The actions the core decided when it settled those calls, for the next round.
    pub(crate) followups: Vec<QueueAction>,
    /// The wall-clock time the round's chained calls are decided at (read again every
    /// [`ORDERLY_ROUNDS_PER_CLOCK_READ`] of them).
    pub(crate) now_ms: Option<i64>,
}

impl Finished {
    pub(crate) fn started(&mut self) -> std::time::Instant {
        *self.started.get_or_insert_with(std::time::Instant::now)
    }

    fn is_empty(&self) -> bool {
        self.calls.is_empty()
            && self.orderly.is_empty()
            && self.chained == 0
            && self.followups.is_empty()
    }

    #[allow(clippy::type_complexity)]
    fn into_parts(
        self,
    ) -> (
        std::time::Instant,
        Vec<FinishedCalls>,
        Vec<(Messages, u64, OrderlyOutcome)>,
        ChainedCalls,
    ) {
        let started = self.started.unwrap_or_else(std::time::Instant::now);
        let chained = ChainedCalls {
            calls: self.chained,
            messages: self.chained_messages,
            followups: self.followups,
        };
        (started, self.calls, self.orderly, chained)
    }
}

/// The orderly calls a round settled as they finished ([`Finished::chained`]).
struct ChainedCalls {
    calls: usize,
    messages: usize,
    followups: Vec<QueueAction>,
}

/// One owned queue. Created and stopped by the rebalancer.
pub struct QueueActor {
    pub(crate) queue: MessageQueue,
    pub(crate) shared: Rc<ConsumerShared>,
    /// The queue's state and decisions.
    pub(crate) core: QueueCore,
    /// The queue is one of the group's retry queues (messages get their topic back).
    retry_queue: bool,
    /// The consumer subscribes to the queue's topic, as of the last pull (looked up once per
    /// pull, not once per message).
    subscribed: bool,
    drain_waiters: Vec<oneshot::Sender<()>>,
    /// A commit since the offset store's cell was last written: written once the current
    /// step's actions are carried out.
    offset_flush_pending: bool,
    /// The latest monotonic clock reading of the current turn (a pull's answer, the end of a
    /// round of calls), which the turn's next pull and calls begin at rather than reading
    /// the clock again; cleared when the turn's actions are carried out.
    turn_reading: Option<std::time::Instant>,
    /// The core's `now_ms`, derived from those readings.
    wall_clock: WallClock,
    /// Where the committed offset is published for the offset store (attached to it before
    /// the start offset is read; kept across restarts, as the fields are).
    committed: CommittedOffset,
    /// Copies of `queue` that listener calls gave back, reused by the next calls (every call
    /// owns one in its context; this saves allocating its strings each time).
    spare_queues: Vec<MessageQueue>,
    /// The queue was dropped (or the actor gave up): a restart by the supervisor, while some
    /// address of it is still held, leaves it idle.
    retired: bool,
    /// Gave up after too many failures (see [`QueueStatus::gave_up`]).
    gave_up: bool,
    /// Failures and the restart decision (the consumer's `restart_policy`).
    restarts: RestartTracker,
    /// How long the next start waits: a hand-over from a live member, or a restart's backoff.
    start_delay: Duration,
    /// Started (any start delay is over): the rebalancer's [`QueueTick`]s count from here.
    begun: bool,
    /// `queue{topic, broker, id}` under the consumer's span: every log line of this actor carries both.
    /// Shared, so entering it is a borrow of a local handle rather than a clone of the span
    /// (which the subscriber counts in and out on every step).
    pub(crate) span: Rc<tracing::Span>,
    /// The queue's cache and lag gauges.
    metrics: QueueMetrics,
    /// The broker's max offset as the last pull answer gave it (for the lag gauge).
    last_max_offset: Option<i64>,
    /// The last pull's request, filled in again for the next pull once nothing else holds it
    /// (see [`QueueActor::next_pull_request`]).
    last_pull_request: Option<Arc<PullRequest>>,
    /// `queue` as the application names it (outside the consumer's namespace): what listener
    /// contexts carry.
    pub(crate) user_queue: MessageQueue,
    /// An empty action list with room, reused by the next core call (a pull's worth of
    /// listener calls would otherwise grow a fresh list several times per pull).
    action_buffer: Vec<QueueAction>,
    /// The same for the listener calls of a round that finished at once.
    finished_buffer: Vec<FinishedCalls>,
    /// The same for orderly calls.
    finished_orderly_buffer: Vec<(Messages, u64, OrderlyOutcome)>,
    /// The spare buffer of [`Finished::followups`].
    followup_buffer: Vec<QueueAction>,
    /// Orderly calls this turn may still run at once (see [`QueueActor::run_orderly`]).
    pub(crate) orderly_calls_left: u32,
}

/// Orderly calls one turn of a queue actor runs at once before it lets the thread go.
pub(crate) const ORDERLY_CALLS_PER_TURN: u32 = 64;

/// Orderly rounds (one listener call each) that share one clock read when their calls finish
/// at once: the core's `now` is at most this many calls old.
pub(crate) const ORDERLY_ROUNDS_PER_CLOCK_READ: u32 = 8;

/// Orderly calls that finished at once since the last clock read.
#[derive(Default)]
struct UntimedCalls {
    /// When the first of them began.
    since: Option<std::time::Instant>,
    rounds: u32,
    calls: usize,
    ok: usize,
    failed: usize,
}

impl QueueActor {
    /// An actor for `queue`.
    pub(crate) fn new(queue: MessageQueue, shared: Rc<ConsumerShared>) -> Self {
        let restarts = RestartTracker::new(shared.config.restart_policy);
        let now = now_ms();
        let core = QueueCore::new(Mode::for_config(&shared.config, now), now);
        let span = tracing::error_span!(
            parent: &shared.span,
            "queue",
            topic = %queue.topic,
            broker = %queue.broker_name,
            id = queue.queue_id
        );
        let metrics = shared.stats.metrics.queue(&queue);
        let user_queue = shared.namespace.unwrap_queue(&queue).into_owned();
        QueueActor {
            user_queue,
            span: Rc::new(span),
            metrics,
            last_max_offset: None,
            last_pull_request: None,
            retry_queue: retry::is_retry_topic(&queue.topic),
            subscribed: shared.subscription(&queue.topic).is_some(),
            queue,
            shared,
            core,
            drain_waiters: Vec::new(),
            offset_flush_pending: false,
            turn_reading: None,
            wall_clock: WallClock::default(),
            committed: CommittedOffset::new(),
            spare_queues: Vec::new(),
            retired: false,
            gave_up: false,
            restarts,
            start_delay: Duration::ZERO,
            begun: false,
            action_buffer: Vec::new(),
            finished_buffer: Vec::new(),
            finished_orderly_buffer: Vec::new(),
            followup_buffer: Vec::new(),
            orderly_calls_left: ORDERLY_CALLS_PER_TURN,
        }
    }

    /// An empty action list for a core call (with room, when an earlier one left some).
    pub(crate) fn take_actions(&mut self) -> Vec<QueueAction> {
        std::mem::take(&mut self.action_buffer)
    }

    /// Keeps an emptied action list for the next core call (a bounded one: a burst of
    /// actions does not pin its memory).
    fn keep_actions(&mut self, mut actions: Vec<QueueAction>) {
        actions.clear();
        if actions.capacity() > self.action_buffer.capacity() && actions.capacity() <= 4096 {
            self.action_buffer = actions;
        }
    }

    /// The first start waits `delay` before it reads the offset.
    pub(crate) fn start_after(mut self, delay: Duration) -> Self {
        self.start_delay = delay;
        self
    }

    /// What `started` does, once any start delay is over.
    fn begin(&mut self, ctx: &mut Context<Self>) {
        // A queue that needs the broker lock is locked before its first pull, then kept locked.
        // The lock renewal and the clean-up of overdue calls run on the rebalancer's timers
        // ([`QueueTick`]), not on timers of this actor: actix polls every timer of an actor
        // each time it wakes, which for a queue actor is every pull.
        self.begun = true;
        let mut out = self.take_actions();
        self.core.start(&self.shared.config, &mut out);
        self.execute(out, ctx);
        if self.needs_lock() {
            self.watch_broker_connection(ctx);
        }
    }

    /// What the core needs to know of the consumer now.
    pub(crate) fn env(&self) -> QueueEnv {
        QueueEnv {
            running: self.shared.running.get(),
            paused: self.shared.paused.get(),
            thresholds: self.shared.thresholds.get(),
            has_subscription: self.subscribed
                || self.shared.subscription(&self.queue.topic).is_some(),
        }
    }

    /// Runs one core call with the consumer's configuration, its view of the consumer and the
    /// time, then carries out what the core decided.
    pub(crate) fn step(
        &mut self,
        ctx: &mut Context<Self>,
        call: impl FnOnce(&mut QueueCore, &PushConsumerConfig, &QueueEnv, i64, &mut Vec<QueueAction>),
    ) {
        let mut out = self.take_actions();
        let env = self.env();
        call(
            &mut self.core,
            &self.shared.config,
            &env,
            now_ms(),
            &mut out,
        );
        self.execute(out, ctx);
    }

    /// Carries out the core's decisions.
    pub(crate) fn execute(&mut self, actions: Vec<QueueAction>, ctx: &mut Context<Self>) {
        let span = Rc::clone(&self.span);
        let _entered = span.enter();
        self.orderly_calls_left = ORDERLY_CALLS_PER_TURN;
        self.execute_rounds(actions, ctx);
        // Every commit of the step goes to the offset store as one update.
        if std::mem::take(&mut self.offset_flush_pending) {
            self.flush_offset();
        }
        self.report_gauges();
        self.turn_reading = None;
    }

    /// Sets the queue's cache and lag gauges.
    fn report_gauges(&self) {
        let (count, body_bytes) = self.core.cached_amount();
        self.metrics.cache(count, body_bytes);
        if let (Some(max), Some(committed)) = (self.last_max_offset, self.core.committed) {
            self.metrics.lag(max - committed);
        }
    }

    fn execute_rounds(&mut self, actions: Vec<QueueAction>, ctx: &mut Context<Self>) {
        let mut actions = actions;
        // The end of the last timed round: the next round's calls begin there. The first
        // round's begin at the turn's reading when there is one (a pull's answer). The core's
        // wall-clock time comes from the same readings (at most one clock read per round).
        let mut last_end = self.turn_reading;
        let mut wall_now = None;
        // Orderly calls settled since the last clock read, timed together at the next one.
        let mut untimed = UntimedCalls::default();
        // Listener calls that finish at once (the usual case) are timed together (one clock
        // read per round, not two per call); their outcomes go to the core together, and what
        // it decides is carried out in the next round, so a pull's calls cost one buffer.
        loop {
            let finished = self.execute_round(&mut actions, last_end, ctx);
            if finished.is_empty() {
                self.finished_buffer = finished.calls;
                self.finished_orderly_buffer = finished.orderly;
                self.followup_buffer = finished.followups;
                self.keep_actions(actions);
                if untimed.calls > 0 {
                    let ended = std::time::Instant::now();
                    self.record_untimed(&mut untimed, ended, 0);
                }
                return;
            }
            let (started, mut calls, mut orderly, chained) = finished.into_parts();
            for (batch, _, outcome) in &orderly {
                let failed = orderly_failures(batch, outcome.status);
                untimed.calls += 1;
                untimed.ok += batch.len() - failed;
                untimed.failed += failed;
            }
            // Chained calls all succeeded; what the core decided then comes first.
            untimed.calls += chained.calls;
            untimed.ok += chained.messages;
            let mut followups = chained.followups;
            actions.append(&mut followups);
            self.followup_buffer = followups;
            untimed.since.get_or_insert(started);
            untimed.rounds += 1;
            // An orderly round is one call whose outcome decides the next, so a run of them is
            // a round each: they share a clock read every few rounds instead (the core's `now`
            // is then at most that many calls old).
            let read_clock = wall_now.is_none()
                || !calls.is_empty()
                || untimed.rounds >= ORDERLY_ROUNDS_PER_CLOCK_READ;
            let mut share = Duration::ZERO;
            if read_clock {
                let ended = std::time::Instant::now();
                self.turn_reading = Some(ended);
                wall_now = Some(self.wall_clock.ms_at(ended));
                last_end = Some(ended);
                let concurrent_calls = calls.iter().map(|c| c.calls).sum();
                share = self.record_untimed(&mut untimed, ended, concurrent_calls);
            }
            let now = wall_now.unwrap_or_else(now_ms);
            let env = self.env();
            for (batch, epoch, outcome) in orderly.drain(..) {
                self.settle_orderly(&batch, epoch, outcome, &env, now, &mut actions);
            }
            self.finished_orderly_buffer = orderly;
            if calls.is_empty() {
                self.finished_buffer = calls;
                continue;
            }
            let (mut ok, mut failed, mut count) = (0, 0, 0);
            for ended in &calls {
                let failures = failed_count(ended.batch.len(), &ended.outcome);
                ok += ended.batch.len() - failures;
                failed += failures;
                count += ended.calls;
            }
            self.shared
                .stats
                .record_consumed_calls(ok, failed, count, share);
            self.core.on_consumed_all(
                calls.iter().map(|ended| EndedCalls {
                    batch: &ended.batch,
                    part: ended.batch.pull_part(),
                    calls: ended.calls,
                    epoch: ended.epoch,
                    outcome: ended.outcome,
                }),
                &self.shared.config,
                &env,
                now,
                &mut actions,
            );
            calls.clear();
            self.finished_buffer = calls;
        }
    }

    /// Records the orderly calls finished since the last clock read, sharing the time from
    /// their start to `ended` with `more` (concurrent) calls that ended with them; returns
    /// each call's share.
    fn record_untimed(
        &self,
        untimed: &mut UntimedCalls,
        ended: std::time::Instant,
        more: usize,
    ) -> Duration {
        let calls = untimed.calls + more;
        let share = match untimed.since {
            Some(since) if calls > 0 => {
                ended.saturating_duration_since(since) / u32::try_from(calls).unwrap_or(u32::MAX)
            }
            _ => Duration::ZERO,
        };
        if untimed.calls > 0 {
            self.shared.stats.record_consumed_calls(
                untimed.ok,
                untimed.failed,
                untimed.calls,
                share,
            );
        }
        *untimed = UntimedCalls::default();
        share
    }

    /// Carries out one round of actions (leaving `actions` empty); returns the listener calls
    /// that finished at once. Calls begin at `begun` when the caller knows it (the end of the
    /// previous round), otherwise at the first call.
    fn execute_round(
        &mut self,
        actions: &mut Vec<QueueAction>,
        begun: Option<std::time::Instant>,
        ctx: &mut Context<Self>,
    ) -> Finished {
        let mut finished = Finished {
            started: begun,
            calls: std::mem::take(&mut self.finished_buffer),
            orderly: std::mem::take(&mut self.finished_orderly_buffer),
            chained: 0,
            chained_messages: 0,
            followups: std::mem::take(&mut self.followup_buffer),
            now_ms: None,
        };
        for action in actions.drain(..) {
            match action {
                QueueAction::LoadStartOffset(delay) if delay.is_zero() => {
                    self.load_start_offset(ctx)
                }
                QueueAction::LoadStartOffset(delay) => {
                    ctx.run_later(delay, |act, ctx| act.load_start_offset(ctx));
                }
                QueueAction::Pull(order) => self.send_pull(order, ctx),
                QueueAction::PullAfter(delay) => {
                    ctx.run_later(delay, |act, ctx| {
                        act.step(ctx, |core, cfg, env, now, out| {
                            core.on_pull_timer(cfg, env, now, out)
                        });
                    });
                }
                QueueAction::Lock => self.request_lock(ctx),
                QueueAction::LockAfter(delay) => {
                    ctx.run_later(delay, |act, ctx| {
                        let mut out = act.take_actions();
                        act.core.on_lock_timer(&mut out);
                        act.execute(out, ctx);
                    });
                }
                QueueAction::RecomputeOffset => self.recompute_offset(ctx),
                QueueAction::ConsumeOrderly { batch, epoch } => {
                    self.run_orderly(batch, epoch, ctx, &mut finished)
                }
                QueueAction::WakeKeysAfter { delay, due_ms } => {
                    ctx.run_later(delay, move |act, ctx| {
                        let mut out = act.take_actions();
                        act.core
                            .on_key_wake_timer(due_ms, &act.shared.config, now_ms(), &mut out);
                        act.execute(out, ctx);
                    });
                }
                QueueAction::ConsumeAfter(delay) => {
                    ctx.run_later(delay, |act, ctx| {
                        let mut out = act.take_actions();
                        act.core
                            .on_consume_timer(&act.shared.config, now_ms(), &mut out);
                        act.execute(out, ctx);
                    });
                }
                QueueAction::DeadLetter {
                    letters,
                    epoch,
                    suspend,
                } => self.dead_letter(letters, epoch, suspend, ctx),
                QueueAction::Consume {
                    messages,
                    batch_size,
                    epoch,
                } => {
                    let started = finished.started();
                    let mut calls = CallRanges::new(messages.len(), batch_size);
                    let shared = Rc::clone(&self.shared);
                    loop {
                        if let Some(listener) = shared
                            .dispatcher
                            .poolable_listener()
                            .filter(|listener| listener.pooled())
                        {
                            self.hand_to_pool(listener, &messages, &mut calls, epoch, ctx);
                            break;
                        }
                        let mut sink = RunSink {
                            spare_queues: &mut self.spare_queues,
                            user_queue: &self.user_queue,
                            calls: &mut finished.calls,
                            epoch,
                        };
                        let Some((batch, pending)) = self
                            .shared
                            .dispatcher
                            .consume_run(&messages, &mut calls, &mut sink, started)
                        else {
                            // Calls left: the listener went slow, they go to the pool.
                            if calls.len() == 0 {
                                break;
                            }
                            continue;
                        };
                        // The listener's own log lines carry the consumer and queue.
                        let pending = pending.instrument(tracing::Span::clone(&self.span));
                        ctx.spawn(actix::fut::wrap_future::<_, Self>(pending).map(
                            move |outcome, act, ctx| act.on_consumed(batch, epoch, outcome, ctx),
                        ));
                    }
                }
                QueueAction::SendBack {
                    messages,
                    delay_level,
                    epoch,
                } => self.send_back(messages, delay_level, epoch, ctx),
                QueueAction::ReconsumeAfter {
                    messages,
                    delay,
                    epoch,
                } => {
                    ctx.run_later(delay, move |act, ctx| {
                        let mut out = act.take_actions();
                        act.core
                            .on_reconsume_timer(messages, epoch, now_ms(), &mut out);
                        act.execute(out, ctx);
                    });
                }
                // The step's flush sends the latest committed offset, whichever commit asked.
                QueueAction::Commit(offset) => {
                    debug_assert!(self.core.committed >= Some(offset));
                    self.offset_flush_pending = true;
                }
                QueueAction::AdoptOffset(offset) => {
                    // The cell first: the store folds it in before it sets the offset, and
                    // must not raise the offset back with a commit from before.
                    self.committed.publish(offset);
                    let set = self.shared.offsets.send(SetOffset {
                        queue: self.queue.clone(),
                        offset,
                        freeze: false,
                    });
                    ctx.spawn(set.into_actor(self).map(|result, act, _ctx| {
                        if let Ok(Err(e)) | Err(e) = result.map_err(Error::from) {
                            tracing::warn!(queue = %act.queue, error = %e, "cannot persist the adopted offset");
                        }
                    }));
                }
                QueueAction::Finish { committed, unlock } => {
                    self.finish_drop(committed, unlock, ctx)
                }
                QueueAction::Heartbeat => self.shared.request_heartbeat(),
                QueueAction::RefreshRoute => self.shared.request_route_refresh(&self.queue.topic),
                QueueAction::Note(note) => self.log(*note),
            }
        }
        finished
    }

    fn log(&self, note: QueueNote) {
        let queue = &self.queue;
        match note {
            QueueNote::Suspicious { requested, next } => {
                tracing::warn!(%queue, requested, next, "broker answered offsets below the request")
            }
            QueueNote::OffsetMoved { requested, offset } => {
                tracing::info!(%queue, requested, offset, "offset moved by the broker; adopting it")
            }
            QueueNote::BroadcastFailuresDropped(offsets) => {
                tracing::warn!(%queue, ?offsets, "broadcast consumption failed; messages dropped")
            }
            QueueNote::SendBackFailed(count) => {
                tracing::warn!(%queue, count, "send-back failed; consuming again locally in 5 s")
            }
            QueueNote::ConsumeTimedOut(count) => {
                tracing::warn!(%queue, count, "consumption timed out; sending back")
            }
            QueueNote::AccessDenied(error) => {
                self.shared.note_access_denied(&queue.topic, error);
            }
            QueueNote::AccessGranted => self.shared.clear_access_denied(Some(&queue.topic)),
            QueueNote::PullFailed { error, reason } => {
                tracing::debug!(%queue, %error, ?reason, "pull failed")
            }
            QueueNote::StartOffsetFailed(error) => {
                tracing::warn!(%queue, %error, "cannot compute the start offset; retrying")
            }
            QueueNote::LockFailed(error) => {
                tracing::debug!(%queue, %error, "lock request failed")
            }
            QueueNote::LockLost => tracing::warn!(%queue, "lock lost; consumption paused"),
        }
    }

    pub(crate) fn load_start_offset(&mut self, ctx: &mut Context<Self>) {
        let shared = self.shared.clone();
        let queue = self.queue.clone();
        let committed = self.committed.clone();
        let lookup = async move {
            // Before any commit of this start (none comes before its start offset): one
            // mailbox, so the store has the cell before anything this actor sends later.
            shared
                .offsets
                .send(AttachCommitted {
                    queue: queue.clone(),
                    committed,
                })
                .await?;
            let stored = shared
                .offsets
                .send(LoadOffset {
                    queue: queue.clone(),
                    // Brokers answer 0 instead of "not found" for a new group on a young queue;
                    // that would defeat a timestamp start, so ask them not to.
                    exact: shared.config.consume_from_where == ConsumeFromWhere::Timestamp,
                })
                .await?;
            let timestamp = shared.consume_timestamp_ms;
            match start_offset(
                shared.config.consume_from_where,
                stored,
                &queue.topic,
                timestamp,
            ) {
                StartOffset::Use(offset) => Ok(offset),
                StartOffset::AskMaxOffset => shared.client.max_offset(&queue).await,
                StartOffset::SearchByTimestamp(ts) => shared.client.search_offset(&queue, ts).await,
                StartOffset::RetryLater => Err(Error::OffsetUnavailable(queue.to_string())),
            }
        };
        ctx.spawn(lookup.into_actor(self).map(|result, act, ctx| {
            if let Ok(offset) = result {
                tracing::debug!(queue = %act.queue, offset, "queue starts");
            }
            act.step(ctx, |core, cfg, env, now, out| {
                core.on_start_offset(result.map_err(|e| e.to_string()), cfg, env, now, out)
            });
        }));
    }

    // The order stays boxed and the rare wait for mailbox room is boxed apart: the future this
    // spawns is moved into the actor's context on every pull, so its size is copied each time.
    fn send_pull(&mut self, order: Box<PullOrder>, ctx: &mut Context<Self>) {
        let shared = &self.shared;
        let subscription = shared.subscription(&self.queue.topic);
        self.subscribed = subscription.is_some();
        let Some(subscription) = subscription else {
            // The core saw a subscription a moment ago; answer as a failed pull.
            let mut out = self.take_actions();
            let env = self.env();
            self.core.on_pull_answer(
                &order,
                Err(Error::Config {
                    option: "subscription",
                    value: self.queue.topic.clone(),
                    allowed: "a subscribed topic".into(),
                }),
                None,
                &self.shared.config,
                &env,
                now_ms(),
                &mut out,
            );
            self.execute(out, ctx);
            return;
        };
        let request = self.next_pull_request(&order, subscription);
        // A pull sent right after its queue's last answer (the usual case) begins at that
        // answer's reading.
        let started = self.turn_reading.unwrap_or_else(std::time::Instant::now);
        // The connection answers here directly; the puller only puts the request on the wire.
        // The connection also fails the pull once its timeout has passed (from the reading
        // the pull began at), so no timer of the runtime is set and cleared per pull.
        let (reply, answer) = oneshot::channel();
        let timeout = request.timeout;
        let pull = Pull {
            request: Arc::clone(&request),
            reply,
            expiry: Expiry::after(started, timeout, request_code::PULL_MESSAGE),
        };
        let puller = &self.shared.puller;
        let queued = match puller.try_send(pull) {
            Ok(()) => Ok(None),
            // A full mailbox: wait for room (the data path does not bypass its capacity).
            Err(actix::dev::SendError::Full(pull)) => Ok(Some(Box::pin(puller.send(pull)))),
            Err(actix::dev::SendError::Closed(_)) => Err(MailboxError::Closed),
        };
        let waited = async move {
            if let Some(queued) = queued? {
                queued.await?;
            }
            Ok::<_, Error>(Ok(answer.await))
        };
        ctx.spawn(waited.into_actor(self).map(move |waited, act, ctx| {
            let client = &act.shared.client;
            let mut answer = waited.and_then(|waited| {
                let peer = || client.pull_peer(&request);
                let response = settle_reply(waited, peer, request_code::PULL_MESSAGE, timeout)?;
                request.read_raw_answer(peer, response)?.decode(&request)
            });
            // One reading serves the pull's round trip (its decoding included, as Java counts
            // it), the core's time and the begin of the calls the answer starts.
            let arrived = std::time::Instant::now();
            act.turn_reading = Some(arrived);
            act.shared
                .stats
                .record_pull(arrived.saturating_duration_since(started));
            // Let go of the request before the core asks for the next pull, which can then
            // reuse it.
            drop(request);
            let retry_group = act.retry_queue.then(|| act.shared.group.clone());
            if let Ok(response) = &mut answer {
                // The listener sees each message's topic as the application names it.
                for message in &mut response.messages {
                    act.shared
                        .namespace
                        .unwrap_received(message, retry_group.as_deref());
                }
                if order.epoch == act.core.epoch && !act.core.dropping {
                    act.shared.stats.record_pulled(response.messages.len());
                }
                act.last_max_offset = Some(response.max_offset);
            }
            let mut out = act.take_actions();
            let env = act.env();
            let now = act.wall_clock.ms_at(arrived);
            act.core.on_pull_answer(
                &order,
                answer,
                retry_group.as_deref(),
                &act.shared.config,
                &env,
                now,
                &mut out,
            );
            act.execute(out, ctx);
        }));
    }

    /// The request of the pull `order` asks for. The last pull's request is filled in again
    /// when nothing else holds it any more, the usual case once its answer has been read: a
    /// pull then allocates no request and copies no queue names. Otherwise (a pull still on
    /// its way) it is copied first.
    fn next_pull_request(
        &mut self,
        order: &PullOrder,
        subscription: Arc<Subscription>,
    ) -> Arc<PullRequest> {
        let config = &self.shared.config;
        let mut request = match self.last_pull_request.take() {
            Some(last) => last,
            None => Arc::new(PullRequest::new(
                Arc::clone(&self.shared.group),
                self.queue.clone(),
                order.offset,
            )),
        };
        let fill = Arc::make_mut(&mut request);
        fill.offset = order.offset;
        fill.max_messages = config.pull_batch_size as i32;
        fill.max_bytes = Some(config.pull_batch_size_in_bytes as i32);
        fill.subscription = subscription;
        fill.send_subscription = order.send_subscription;
        fill.commit_offset = order.commit_offset;
        fill.suspend = Some(order.suspend);
        fill.timeout = order.timeout;
        fill.broker_id = order.broker_id;
        self.last_pull_request = Some(Arc::clone(&request));
        request
    }

    /// Whether this queue must hold the broker lock to consume (orderly clustering).
    pub(crate) fn needs_lock(&self) -> bool {
        needs_broker_lock(&self.shared.config)
    }

    /// Hands the calls left in `calls` to the consume threads, each over its part of
    /// `messages`; their outcomes come back as [`PooledConsumed`] messages.
    fn hand_to_pool(
        &mut self,
        listener: &PooledConcurrent,
        messages: &Arc<Vec<MessageExt>>,
        calls: &mut CallRanges,
        epoch: u64,
        ctx: &mut Context<Self>,
    ) {
        for range in calls.by_ref() {
            let batch = Messages::slice(Arc::clone(messages), range);
            let context = ConsumeContext::new(self.context_queue());
            self.submit_pooled(listener, batch, context, epoch, ctx);
        }
    }

    /// Hands the call over `batch` to `listener`'s consume threads; its outcome comes back as
    /// a [`PooledConsumed`] message.
    pub(crate) fn submit_pooled<C, O>(
        &self,
        listener: &dyn PooledListener<C, O>,
        batch: Messages,
        context: C,
        epoch: u64,
        ctx: &mut Context<Self>,
    ) where
        O: Send + 'static,
        QueueActor: Handler<PooledConsumed<O>>,
    {
        let queue = ctx.address();
        let reply_batch = batch.clone();
        listener.submit(
            batch,
            context,
            tracing::Span::clone(&self.span),
            Box::new(move |outcome| {
                queue.do_send(PooledConsumed {
                    batch: reply_batch,
                    epoch,
                    outcome,
                })
            }),
        );
    }

    /// A listener call that ran as a task of this actor, or on a consume thread, ended.
    fn on_consumed(
        &mut self,
        batch: Messages,
        epoch: u64,
        outcome: ConsumeOutcome,
        ctx: &mut Context<Self>,
    ) {
        let mut out = self.take_actions();
        let env = self.env();
        self.settle_call(batch, epoch, outcome, &env, now_ms(), &mut out);
        self.execute(out, ctx);
    }

    /// Records a listener call's outcome and hands it to the core.
    fn settle_call(
        &mut self,
        batch: Messages,
        epoch: u64,
        outcome: ConsumeOutcome,
        env: &QueueEnv,
        now: i64,
        out: &mut Vec<QueueAction>,
    ) {
        let call = call_outcome(outcome.status, &outcome.context);
        self.record_call(batch.len(), &call, outcome.elapsed);
        self.recycle_queue(outcome.context.queue);
        self.core
            .on_consumed(&batch, epoch, call, &self.shared.config, env, now, out);
    }

    /// Counts a listener call's messages as consumed or failed.
    fn record_call(&self, batch_len: usize, outcome: &CallOutcome, elapsed: Duration) {
        let failed = failed_count(batch_len, outcome);
        self.shared
            .stats
            .record_consumed(batch_len - failed, failed, elapsed);
    }

    /// Keeps a queue a listener context gave back for the next call's context.
    pub(crate) fn recycle_queue(&mut self, queue: MessageQueue) {
        recycle_into(&mut self.spare_queues, &self.user_queue, queue);
    }

    /// The queue for the next listener context: a recycled one, or a copy of the user's.
    pub(crate) fn context_queue(&mut self) -> MessageQueue {
        take_spare(&mut self.spare_queues, &self.user_queue)
    }

    /// Makes `queue`, a lent listener context's, the queue the user sees again should the
    /// listener have changed it.
    #[inline]
    pub(crate) fn restore_context_queue(&mut self, queue: &mut MessageQueue) {
        restore_queue(&mut self.spare_queues, &self.user_queue, queue);
    }

    /// Sends failed messages back for redelivery (or to the retry topic if the broker refuses).
    fn send_back(
        &mut self,
        messages: Vec<MessageExt>,
        delay_level: i32,
        epoch: u64,
        ctx: &mut Context<Self>,
    ) {
        let shared = self.shared.clone();
        let queue = self.queue.clone();
        let work = async move {
            let mut results = Vec::with_capacity(messages.len());
            for message in messages {
                let ok = shared.send_back(&queue, &message, delay_level).await;
                results.push((message, ok));
            }
            results
        }
        .instrument(tracing::Span::clone(&self.span));
        ctx.spawn(work.into_actor(self).map(move |results, act, ctx| {
            if epoch == act.core.epoch {
                let sent = results.iter().filter(|(_, ok)| *ok).count();
                act.shared.stats.record_sent_back(sent);
            }
            act.step(ctx, |core, cfg, env, now, out| {
                core.on_sent_back(results, epoch, cfg, env, now, out)
            });
        }));
    }

    /// Publishes the committed offset to the offset store's cell (once per step that raised
    /// it: see [`QueueActor::execute`]); the store reads it when it reads or persists.
    fn flush_offset(&mut self) {
        if let Some(offset) = self.core.committed {
            self.committed.publish(offset);
        }
    }

    fn finish_drop(&mut self, committed: Option<i64>, unlock: bool, ctx: &mut Context<Self>) {
        let queue = self.queue.clone();
        let offsets = self.shared.offsets.clone();
        let unlock = unlock && self.needs_lock();
        let shared = self.shared.clone();
        if let Some(offset) = committed {
            self.committed.publish(offset);
        }
        let cell = self.committed.clone();
        let persist = async move {
            // Folded in and let go before the persist, which then writes the last commit.
            let _ = offsets
                .send(DetachCommitted {
                    queue: queue.clone(),
                    committed: cell,
                })
                .await;
            let persisted = offsets.send(PersistAndRemove(queue.clone())).await;
            // Only after the offset is persisted may the next owner take the lock.
            if unlock {
                if let Err(e) = crate::actors::queue_orderly::unlock_queue(&shared, &queue).await {
                    tracing::warn!(queue = %queue, error = %e, "unlock failed; the broker lock will expire");
                }
            }
            persisted
        };
        let span = tracing::Span::clone(&self.span);
        ctx.wait(persist.instrument(span).into_actor(self).map(move |result, act, ctx| {
            let span = Rc::clone(&act.span);
            let _entered = span.enter();
            act.metrics.clear();
            match result {
                Ok(Ok(())) => tracing::debug!(queue = %act.queue, offset = ?committed, "queue dropped, offset persisted"),
                Ok(Err(e)) => tracing::warn!(queue = %act.queue, error = %e, "queue dropped; offset not persisted"),
                Err(e) => tracing::warn!(queue = %act.queue, error = %e, "queue dropped; offset store gone"),
            }
            for waiter in act.drain_waiters.drain(..) {
                let _ = waiter.send(());
            }
            act.retired = true;
            ctx.stop();
        }));
    }

    /// Orderly: hears when the connection to the queue's broker closes (the lock may be gone).
    fn watch_broker_connection(&mut self, ctx: &mut Context<Self>) {
        let client = self.shared.client.clone();
        let queue = self.queue.clone();
        let me = ctx.address().downgrade().recipient();
        let subscribe = async move {
            let addr = client.master_addr(&queue).await?;
            let connection = client.connection(&addr).await?;
            connection.send(Subscribe(me)).await?;
            Ok::<_, Error>(())
        };
        ctx.spawn(subscribe.into_actor(self).map(|result, act, _ctx| {
            if let Err(e) = result {
                tracing::debug!(queue = %act.queue, error = %e, "cannot watch the broker connection");
            }
        }));
    }

    fn clean_expired(&mut self, ctx: &mut Context<Self>) {
        let mut out = self.take_actions();
        self.core
            .clean_expired(&self.shared.config, now_ms(), &mut out);
        self.execute(out, ctx);
    }
}

impl Actor for QueueActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.retired {
            return;
        }
        let delay = std::mem::take(&mut self.start_delay);
        if delay.is_zero() {
            self.begin(ctx);
        } else {
            ctx.run_later(delay, |act, ctx| act.begin(ctx));
        }
    }
}

/// A failed queue actor starts again from the queue's committed offset: its cache and the
/// calls it had running are gone (they run again: at least once), nothing below the committed
/// offset is read twice by it, nothing above it is skipped.
impl Supervised for QueueActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        self.begun = false;
        if self.retired {
            return;
        }
        // The cell holds the last commit already (nothing waits in a mailbox); one of the
        // failed step's not yet published goes there now.
        if std::mem::take(&mut self.offset_flush_pending) {
            self.flush_offset();
        }
        for waiter in self.drain_waiters.drain(..) {
            let _ = waiter.send(());
        }
        let span = Rc::clone(&self.span);
        let _entered = span.enter();
        match self.restarts.on_failure(now_ms()) {
            RestartDecision::Restart { after } => {
                self.shared.stats.metrics.queue_restarted();
                let restarts = self.restarts.restarts();
                tracing::warn!(queue = %self.queue, restarts, backoff = ?after, "queue actor failed; restarting from the committed offset");
                let now = now_ms();
                self.core = QueueCore::new(Mode::for_config(&self.shared.config, now), now);
                self.start_delay = after;
                self.shared
                    .queue_restarts
                    .set(self.shared.queue_restarts.get() + 1);
                self.shared.events.emit(ConsumerEvent::QueueRestarted {
                    queue: self.queue.clone(),
                    restarts,
                    after,
                });
            }
            RestartDecision::GiveUp { failures } => {
                tracing::error!(queue = %self.queue, failures, "queue actor failed too often; giving up until the next rebalance");
                self.retired = true;
                self.gave_up = true;
                self.shared.events.emit(ConsumerEvent::QueueGaveUp {
                    queue: self.queue.clone(),
                    failures,
                });
            }
        }
    }
}

/// A consumer-wide timer's tick, which the rebalancer sends every queue actor it owns: one
/// timer per consumer for each, as Java's consumer has, instead of one per queue actor.
#[derive(Message, Clone, Copy, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
pub(crate) enum QueueTick {
    /// Look for listener calls running past `consume_timeout` (every
    /// [`clean_expired_every`]).
    CleanExpired,
    /// Renew the broker lock of an orderly queue (every `lock_interval`).
    RenewLock,
}

/// How often [`QueueTick::CleanExpired`] comes: a quarter of `consume_timeout`, within
/// 10 ms and 60 s.
pub(crate) fn clean_expired_every(config: &PushConsumerConfig) -> Duration {
    (config.consume_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(60))
}

/// The outcome of a call a consume thread ran (a [`ConsumeOutcome`] or an
/// [`OrderlyOutcome`]), for its queue actor.
pub(crate) struct PooledConsumed<O> {
    pub(crate) batch: Messages,
    pub(crate) epoch: u64,
    pub(crate) outcome: O,
}

impl<O: Send + 'static> Message for PooledConsumed<O> {
    type Result = ();
}

impl Handler<PooledConsumed<ConsumeOutcome>> for QueueActor {
    type Result = ();

    fn handle(&mut self, done: PooledConsumed<ConsumeOutcome>, ctx: &mut Context<Self>) {
        self.on_consumed(done.batch, done.epoch, done.outcome, ctx);
    }
}

impl Handler<PooledConsumed<OrderlyOutcome>> for QueueActor {
    type Result = ();

    fn handle(&mut self, done: PooledConsumed<OrderlyOutcome>, ctx: &mut Context<Self>) {
        self.on_orderly_consumed(done.batch, done.epoch, done.outcome, ctx);
    }
}

impl Handler<QueueTick> for QueueActor {
    type Result = ();

    fn handle(&mut self, tick: QueueTick, ctx: &mut Self::Context) {
        // A queue waiting out a hand-over or a restart's backoff has nothing to renew or
        // clean yet.
        if self.retired || !self.begun {
            return;
        }
        match tick {
            QueueTick::CleanExpired => self.clean_expired(ctx),
            QueueTick::RenewLock if self.needs_lock() => {
                let mut out = self.take_actions();
                self.core.on_renew_timer(&mut out);
                self.execute(out, ctx);
            }
            QueueTick::RenewLock => {}
        }
    }
}

impl Handler<Fail> for QueueActor {
    type Result = ();

    fn handle(&mut self, _msg: Fail, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<DropQueue> for QueueActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: DropQueue, ctx: &mut Self::Context) -> Self::Result {
        if self.retired {
            // Gave up: nothing runs, and the offset store keeps the committed offset.
            return Box::pin(fut::ready(()));
        }
        let (done, wait) = oneshot::channel();
        self.drain_waiters.push(done);
        let mut out = self.take_actions();
        let in_flight = self.core.drop_queue(&mut out);
        self.execute(out, ctx);
        if in_flight {
            if let Some(limit) = self.shared.config.shutdown_await {
                ctx.run_later(limit, |act, ctx| {
                    if !act.drain_waiters.is_empty() {
                        tracing::warn!(target: ABANDONED_CALLS_TARGET, queue = %act.queue, unsettled = act.core.unsettled, "listener calls still running after shutdown_await; dropping anyway");
                        let mut out = act.take_actions();
                        act.core.force_finish(&mut out);
                        act.execute(out, ctx);
                    }
                });
            }
        }
        Box::pin(
            async move {
                let _ = wait.await;
            }
            .into_actor(self),
        )
    }
}

impl Handler<ConnectionEvent> for QueueActor {
    type Result = ();

    fn handle(&mut self, event: ConnectionEvent, ctx: &mut Self::Context) {
        if let ConnectionEvent::Disconnected { peer, reason } = event {
            let span = Rc::clone(&self.span);
            let _entered = span.enter();
            tracing::debug!(queue = %self.queue, %peer, %reason, "broker connection closed; re-locking");
            let mut out = self.take_actions();
            self.core.on_broker_disconnected(now_ms(), &mut out);
            self.execute(out, ctx);
        }
    }
}

impl Handler<GetQueueStatus> for QueueActor {
    type Result = MessageResult<GetQueueStatus>;

    fn handle(&mut self, _msg: GetQueueStatus, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(QueueStatus {
            snapshot: self.snapshot(),
            stalled: !self.retired && self.core.is_stalled(&self.shared.config, now_ms()),
            gave_up: self.gave_up,
        })
    }
}

impl Handler<ResetQueueOffset> for QueueActor {
    type Result = ResponseActFuture<Self, Result<()>>;

    fn handle(&mut self, msg: ResetQueueOffset, ctx: &mut Self::Context) -> Self::Result {
        let offset = msg.0;
        // The cell first: the store folds it in before it resets the offset, and must not
        // raise the offset back with a commit from before the reset.
        self.committed.publish(offset);
        let set = self.shared.offsets.send(SetOffset {
            queue: self.queue.clone(),
            offset,
            freeze: false,
        });
        self.step(ctx, |core, cfg, env, now, out| {
            core.reset_offset(offset, cfg, env, now, out)
        });
        Box::pin(async move { set.await? }.into_actor(self))
    }
}

/// How many of a call's `batch_len` messages failed (the rest succeeded).
#[inline]
fn failed_count(batch_len: usize, outcome: &CallOutcome) -> usize {
    retry::failed_range(outcome.success, outcome.ack_index, batch_len).len()
}

/// What the core needs of a listener call's outcome: its status and the context it left.
#[inline]
fn call_outcome(status: ConsumeStatus, context: &ConsumeContext) -> CallOutcome {
    CallOutcome {
        success: status == ConsumeStatus::Success,
        ack_index: context.ack_index,
        delay_level: context.delay_level,
    }
}

/// Keeps `queue`, given back by a listener context, in `spares` for the next call's context
/// when it is still the queue the user sees (a listener may have changed it).
#[inline]
fn recycle_into(spares: &mut Vec<MessageQueue>, user_queue: &MessageQueue, queue: MessageQueue) {
    if same_queue(&queue, user_queue) {
        keep_spare(spares, queue);
    }
}

/// Keeps `queue`, the user's, in `spares` for a later context, while they have room.
#[inline]
fn keep_spare(spares: &mut Vec<MessageQueue>, queue: MessageQueue) {
    if spares.len() < MAX_SPARE_QUEUES {
        spares.push(queue);
    }
}

/// `a == b` for the queue of a listener context and the one the user sees.
#[inline]
fn same_queue(a: &MessageQueue, b: &MessageQueue) -> bool {
    a.queue_id == b.queue_id
        && same_text(&a.topic, &b.topic)
        && same_text(&a.broker_name, &b.broker_name)
}

/// `a == b`, inline for the short names of topics and brokers: this runs twice per listener
/// call, where a call into `memcmp` costs more than the comparison itself.
#[inline]
fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let Some(last) = a.len().checked_sub(8) else {
        return a == b;
    };
    // Whole words, the last one overlapping the one before when the length is not a multiple
    // of eight: no byte-wise tail.
    let mut at = 0;
    while at < last {
        if word_at(a, at) != word_at(b, at) {
            return false;
        }
        at += 8;
    }
    word_at(a, last) == word_at(b, last)
}

/// The eight bytes of `bytes` from `at` as one word (zero past the end: callers stay within).
#[inline]
fn word_at(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at.saturating_add(8))
        .and_then(|eight| <[u8; 8]>::try_from(eight).ok())
        .map_or(0, u64::from_ne_bytes)
}

/// Makes `queue`, a lent listener context's, `user_queue` again should the listener have
/// changed it (from `spares`, or a copy).
#[inline(always)]
fn restore_queue(
    spares: &mut Vec<MessageQueue>,
    user_queue: &MessageQueue,
    queue: &mut MessageQueue,
) {
    if !same_queue(queue, user_queue) {
        *queue = take_spare(spares, user_queue);
    }
}

/// A queue kept in `spares` for a listener context, or a copy of `user_queue` if none is.
#[inline]
fn take_spare(spares: &mut Vec<MessageQueue>, user_queue: &MessageQueue) -> MessageQueue {
    spares.pop().unwrap_or_else(|| user_queue.clone())
}

/// A run of one pull's concurrent calls: contexts from the queue's spares, finished calls
/// kept compact for the core (their contexts recycled at once).
pub(crate) struct RunSink<'a> {
    spare_queues: &'a mut Vec<MessageQueue>,
    user_queue: &'a MessageQueue,
    calls: &'a mut Vec<FinishedCalls>,
    epoch: u64,
}

// The methods are `#[inline]`: a closure listener's run loop, compiled in the user's crate,
// calls them once per listener call.
impl RunSink<'_> {
    /// A fresh context for the next call.
    #[inline]
    pub(crate) fn context(&mut self) -> ConsumeContext {
        ConsumeContext::new(take_spare(self.spare_queues, self.user_queue))
    }

    /// A call finished at once (untimed: its `elapsed` is zero).
    pub(crate) fn finished(&mut self, batch: Messages, outcome: ConsumeOutcome) {
        self.calls.push(FinishedCalls {
            batch,
            calls: 1,
            epoch: self.epoch,
            outcome: call_outcome(outcome.status, &outcome.context),
        });
        recycle_into(self.spare_queues, self.user_queue, outcome.context.queue);
    }

    /// The call over the messages `range` of `pull` finished at once with `status`, leaving
    /// `context`, which serves the run's next call too (a synchronous listener's lent one, or
    /// the one a closure's future gave back). A successful call right after a successful one
    /// of the same pull joins its entry: no batch of its own, one entry for the core.
    /// Inlined into both run loops: called out of line, it costs each call about 70
    /// instructions more.
    #[inline(always)]
    pub(crate) fn finished_lending_call(
        &mut self,
        pull: &Arc<Vec<MessageExt>>,
        range: std::ops::Range<usize>,
        status: ConsumeStatus,
        context: &ConsumeContext,
    ) {
        let call = call_outcome(status, context);
        if !self.joined(pull, &range, &call) {
            self.calls.push(FinishedCalls {
                batch: Messages::slice(pull.clone(), range),
                calls: 1,
                epoch: self.epoch,
                outcome: call,
            });
        }
    }

    /// Joins a call over `range` that acknowledged all its messages onto the last entry when
    /// that one is of the same pull, right before it, and all succeeded; whether it did.
    #[inline(always)]
    fn joined(
        &mut self,
        pull: &Arc<Vec<MessageExt>>,
        range: &std::ops::Range<usize>,
        call: &CallOutcome,
    ) -> bool {
        failed_count(range.len(), call) == 0
            && self.calls.last_mut().is_some_and(|last| {
                last.epoch == self.epoch
                    && last.all_succeeded()
                    && last.batch.extend_with(pull, range)
                    && {
                        last.calls += 1;
                        // Each call acknowledged all of its own messages; an `ack_index` the
                        // first one gave counts within its batch only, not the joined one.
                        last.outcome.ack_index = None;
                        true
                    }
            })
    }

    /// Readies `context`, which the call before had (lent, or moved into its future and
    /// given back), for the next call of the run: the defaults again, and the queue the user
    /// sees should the listener have changed it.
    #[inline(always)]
    pub(crate) fn reset_lent(&mut self, context: &mut ConsumeContext) {
        context.ack_index = None;
        context.delay_level = 0;
        restore_queue(self.spare_queues, self.user_queue, &mut context.queue);
    }

    /// Takes back a context at the end of a run (its queue serves a later context). The
    /// context is one [`RunSink::context`] gave or [`RunSink::reset_lent`] readied, so its
    /// queue is the user's: no need to compare them again.
    #[inline]
    pub(crate) fn recycle(&mut self, context: ConsumeContext) {
        debug_assert!(same_queue(&context.queue, self.user_queue));
        keep_spare(self.spare_queues, context.queue);
    }
}

#[cfg(test)]
mod tests {
    use super::same_text;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn same_text_is_string_equality(a in "[ab]{0,20}", b in "[ab]{0,20}") {
            prop_assert_eq!(same_text(&a, &b), a == b);
        }

        #[test]
        fn same_text_sees_any_one_byte_changed(text in "[a-z]{1,40}", at in any::<prop::sample::Index>()) {
            let mut changed = text.clone().into_bytes();
            let i = at.index(changed.len());
            changed[i] = b'_';
            let changed = String::from_utf8(changed).unwrap_or_default();
            prop_assert!(same_text(&text, &text.clone()));
            prop_assert!(!same_text(&text, &changed));
        }
    }
}
