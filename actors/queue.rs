//! The queue actor: one per owned MessageQueue, holding its ProcessQueue.
//!
//! It runs the queue's pull loop (flow control decided by `consumer::flow`), caches what the
//! puller returns, hands batches to the listener stage and turns the outcomes into retries and
//! the queue's committed offset (the smallest unfinished message), which it reports to the
//! offset store. Everything about one queue happens in this actor's mailbox, so no state is
//! shared between queues and no lock is needed.

use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::actors::consumer::{now_ms, ConsumerShared};
use crate::actors::listener::{ConsumeContext, ConsumeOutcome, ConsumeStatus, Messages};
use crate::actors::offset_store::{LoadOffset, PersistAndRemove, SetOffset, UpdateOffset};
use crate::actors::puller::Pull;
use crate::consumer::config::ConsumeFromWhere;
use crate::consumer::flow::{
    decide_pull, on_pull_result, pull_error_delay, pull_request_flags, NextPull, OffsetUpdate,
    PullDecision, PullGate, PullResult,
};
use crate::consumer::key_order::KeyOrderedQueue;
use crate::consumer::lock::{needs_broker_lock, LockState};
use crate::consumer::offset::{start_offset, StartOffset};
use crate::consumer::orderly::OrderlyQueueState;
use crate::consumer::process_queue::{
    CacheStats, CachedMessage, ProcessQueue, ProcessQueueSnapshot,
};
use crate::consumer::retry::{
    self, failed_range, CONSUME_TIMEOUT_DELAY_LEVEL, LOCAL_RECONSUME_DELAY,
};
use crate::error::{Error, Result};
use crate::message::{MessageExt, MessageQueue};
use crate::rpc::{PullRequest, PullResult as PullResponse};

/// What the process queue keeps per cached message: what flow control and offsets need, and
/// where the message itself is — in the pull it came with (shared with its listener calls),
/// for consume-timeout send-backs.
#[derive(Debug, Clone)]
pub struct CachedEntry {
    offset: i64,
    body_len: usize,
    batch: Arc<Vec<MessageExt>>,
    index: usize,
}

impl CachedEntry {
    fn message(&self) -> Option<&MessageExt> {
        self.batch.get(self.index)
    }
}

impl CachedMessage for CachedEntry {
    fn queue_offset(&self) -> i64 {
        self.offset
    }

    fn body_len(&self) -> usize {
        self.body_len
    }
}

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
}

/// Moves the queue to `offset`, dropping cached messages (RESET_CONSUMER_CLIENT_OFFSET).
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub struct ResetQueueOffset(pub i64);

/// How the queue's messages are consumed; each mode keeps the cache it needs.
pub(crate) enum Mode {
    /// Every batch goes to the listener at once; the cache keeps offsets and sizes only.
    Concurrent {
        /// Unfinished messages: offsets, body sizes and where each message is.
        pq: ProcessQueue<CachedEntry>,
        /// Offsets already sent back because their consumption timed out.
        timed_out: HashSet<i64>,
    },
    /// One batch at a time, in offset order.
    Orderly {
        /// The cached messages.
        pq: ProcessQueue<MessageExt>,
        /// Batch in flight, reconsume counts, dead-lettering, run time.
        state: OrderlyQueueState,
    },
    /// Strictly ordered per key, concurrent across keys.
    KeyOrdered {
        /// The cached messages, chained per key.
        queue: KeyOrderedQueue<MessageExt>,
    },
}

/// One owned queue. Created and stopped by the rebalancer.
pub struct QueueActor {
    pub(crate) queue: MessageQueue,
    pub(crate) shared: Rc<ConsumerShared>,
    pub(crate) mode: Mode,
    /// The broker lock (orderly clustering only).
    pub(crate) lock: LockState,
    /// Orderly: the offset was re-read from the broker since the lock was (re)gained.
    pub(crate) offset_fixed: bool,
    /// A consume pass is scheduled (orderly suspend, lock retry), so new messages wait for it.
    pub(crate) consume_scheduled: bool,
    /// Pull statistics and timestamps (mode-independent part of Java's ProcessQueue).
    pub(crate) last_pull_ms: i64,
    /// The broker id the last pull answer suggested (0 = master).
    pub(crate) pull_from_broker_id: i64,
    /// Offset of the next pull; `None` until the start offset is known.
    pub(crate) next_offset: Option<i64>,
    /// The committed offset last reported to the offset store.
    pub(crate) committed: Option<i64>,
    /// Bumped whenever the cache is thrown away, so answers to older pulls and consume
    /// outcomes of older messages are ignored.
    pub(crate) epoch: u64,
    pull_in_flight: bool,
    pull_scheduled: bool,
    /// Batches handed to the listener and not yet settled (including send-backs).
    pub(crate) unsettled: usize,
    last_activity_ms: i64,
    pub(crate) dropping: bool,
    drain_waiters: Vec<oneshot::Sender<()>>,
    offset_flush_scheduled: bool,
    /// Copies of `queue` that listener calls gave back, reused by the next calls (every call
    /// owns one in its context; this saves allocating its strings each time).
    spare_queues: Vec<MessageQueue>,
}

impl QueueActor {
    /// An actor for `queue`.
    pub(crate) fn new(queue: MessageQueue, shared: Rc<ConsumerShared>) -> Self {
        let now = now_ms();
        let mode = if shared.config.is_key_ordered() {
            Mode::KeyOrdered {
                queue: KeyOrderedQueue::new(),
            }
        } else if shared.config.is_orderly() {
            Mode::Orderly {
                pq: ProcessQueue::new(now),
                state: OrderlyQueueState::new(),
            }
        } else {
            Mode::Concurrent {
                pq: ProcessQueue::new(now),
                timed_out: HashSet::new(),
            }
        };
        QueueActor {
            queue,
            shared,
            mode,
            lock: LockState::default(),
            offset_fixed: true,
            consume_scheduled: false,
            last_pull_ms: now,
            pull_from_broker_id: 0,
            next_offset: None,
            committed: None,
            epoch: 0,
            pull_in_flight: false,
            pull_scheduled: false,
            unsettled: 0,
            last_activity_ms: now,
            dropping: false,
            drain_waiters: Vec::new(),
            offset_flush_scheduled: false,
            spare_queues: Vec::new(),
        }
    }

    pub(crate) fn load_start_offset(&mut self, ctx: &mut Context<Self>) {
        let shared = self.shared.clone();
        let queue = self.queue.clone();
        let lookup = async move {
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
        ctx.spawn(lookup.into_actor(self).map(|result, act, ctx| match result {
            Ok(offset) if offset >= 0 => {
                tracing::debug!(queue = %act.queue, offset, "queue starts");
                act.next_offset = Some(offset);
                act.offset_fixed = true;
                // Record the start so a restart resumes here even if nothing is consumed.
                act.commit(offset, ctx);
                act.pull(ctx);
            }
            Ok(offset) => {
                tracing::warn!(queue = %act.queue, offset, "broker gave a negative start offset; retrying");
                ctx.run_later(act.shared.config.pull_delay_on_error, |act, ctx| {
                    act.load_start_offset(ctx)
                });
            }
            Err(e) => {
                tracing::warn!(queue = %act.queue, error = %e, "cannot compute the start offset; retrying");
                ctx.run_later(act.shared.config.pull_delay_on_error, |act, ctx| {
                    act.load_start_offset(ctx)
                });
            }
        }));
    }

    pub(crate) fn schedule_pull(&mut self, delay: Duration, ctx: &mut Context<Self>) {
        if self.pull_scheduled || self.pull_in_flight {
            return;
        }
        self.pull_scheduled = true;
        ctx.run_later(delay, |act, ctx| {
            act.pull_scheduled = false;
            act.pull(ctx);
        });
    }

    pub(crate) fn pull(&mut self, ctx: &mut Context<Self>) {
        let Some(offset) = self.next_offset else {
            return;
        };
        if self.pull_in_flight {
            return;
        }
        let now = now_ms();
        self.last_activity_ms = now;
        let shared = &self.shared;
        let subscription = shared.subscription(&self.queue.topic);
        let gate = PullGate {
            dropped: self.dropping,
            running: shared.running.get(),
            paused: shared.paused.get(),
            cache: self.cache_stats(),
            locked: !self.needs_lock() || self.lock_held(now),
            offset_fixed_since_lock: self.offset_fixed,
            has_subscription: subscription.is_some(),
        };
        let decision = decide_pull(&shared.config, &shared.thresholds.get(), &gate);
        let subscription = match (decision, subscription) {
            (PullDecision::Stop, _) => return,
            (PullDecision::Delay(delay, reason), _) => {
                tracing::trace!(queue = %self.queue, ?reason, ?delay, "pull delayed");
                self.schedule_pull(delay, ctx);
                return;
            }
            (PullDecision::RecomputeOffset, _) => {
                self.recompute_offset(ctx);
                return;
            }
            (PullDecision::PullNow, Some(subscription)) => subscription,
            (_, None) => {
                self.schedule_pull(shared.config.pull_delay_on_error, ctx);
                return;
            }
        };
        self.last_pull_ms = now;
        match &mut self.mode {
            Mode::Concurrent { pq, .. } => pq.record_pull(now),
            Mode::Orderly { pq, .. } => pq.record_pull(now),
            Mode::KeyOrdered { .. } => {}
        }
        let flags = pull_request_flags(&shared.config, self.committed);
        let request = Pull(PullRequest {
            group: shared.group.clone(),
            queue: self.queue.clone(),
            offset,
            max_messages: shared.config.pull_batch_size as i32,
            max_bytes: Some(shared.config.pull_batch_size_in_bytes as i32),
            subscription,
            send_subscription: flags.send_subscription,
            // The flags piggyback only an offset above 0 (0 means "none").
            commit_offset: (flags.commit_offset > 0).then_some(flags.commit_offset),
            suspend: Some(flags.suspend_timeout),
            timeout: flags.request_timeout,
            broker_id: self.pull_from_broker_id,
        });
        self.pull_in_flight = true;
        let epoch = self.epoch;
        let started = std::time::Instant::now();
        let sent = shared.puller.send(request);
        ctx.spawn(sent.into_actor(self).map(move |answer, act, ctx| {
            act.pull_in_flight = false;
            act.shared.stats.record_pull(started.elapsed());
            let answer = answer.map_err(Error::from).and_then(|r| r);
            if epoch != act.epoch {
                // The cache was reset while this pull was out: its answer is stale.
                act.pull(ctx);
                return;
            }
            act.on_pull(offset, answer, ctx);
        }));
    }

    fn on_pull(&mut self, requested: i64, answer: Result<PullResponse>, ctx: &mut Context<Self>) {
        self.last_activity_ms = now_ms();
        if self.dropping {
            return;
        }
        let response = match answer {
            Ok(response) => response,
            Err(e) => {
                let code = e.response_code();
                let (delay, reason) = pull_error_delay(&self.shared.config, code);
                tracing::debug!(queue = %self.queue, error = %e, ?reason, "pull failed");
                self.schedule_pull(delay, ctx);
                return;
            }
        };
        self.pull_from_broker_id = response.suggest_broker_id;
        if self.shared.paused.get() && !response.messages.is_empty() {
            // Suspended while this pull was held by the broker: fetch them again after resume.
            self.schedule_pull(crate::consumer::flow::PAUSED_DELAY, ctx);
            return;
        }
        let result = PullResult {
            status: response.status,
            requested_offset: requested,
            next_begin_offset: response.next_begin_offset,
            delivered: response.messages.len(),
            first_delivered_offset: response.messages.first().map(|m| m.queue_offset),
            cache_empty: self.cache_stats().count == 0,
        };
        let outcome = on_pull_result(&self.shared.config, &result);
        if outcome.suspicious {
            tracing::warn!(queue = %self.queue, requested, next = response.next_begin_offset, "broker answered offsets below the request");
        }
        self.next_offset = Some(outcome.next_offset);
        match outcome.offset_update {
            Some(OffsetUpdate::IncreaseOnly(offset)) => self.commit(offset, ctx),
            Some(OffsetUpdate::FreezeAndPersist(offset)) => {
                // The broker moved the offset (out of range, or reset server-side): adopt it,
                // drop the cache, commit at once. Outcomes of the dropped messages are ignored.
                tracing::info!(queue = %self.queue, requested, offset, "offset moved by the broker; adopting it");
                self.discard_cache();
                self.committed = Some(offset);
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
            None => {}
        }
        if outcome.deliver {
            self.deliver(response.messages, ctx);
        }
        match outcome.next_pull {
            NextPull::Immediately => self.pull(ctx),
            NextPull::After(delay) => self.schedule_pull(delay, ctx),
            NextPull::Stop => {
                // OFFSET_ILLEGAL: this runtime keeps the queue and continues from the adopted
                // offset rather than dropping and re-adding it.
                self.pull(ctx);
            }
        }
    }

    pub(crate) fn discard_cache(&mut self) {
        self.epoch += 1;
        match &mut self.mode {
            Mode::Concurrent { pq, timed_out } => {
                pq.clear();
                timed_out.clear();
            }
            Mode::Orderly { pq, state } => {
                pq.clear();
                state.clear();
            }
            Mode::KeyOrdered { queue } => queue.clear(),
        }
    }

    fn cache_stats(&self) -> CacheStats {
        match &self.mode {
            Mode::Concurrent { pq, .. } => pq.cache_stats(),
            Mode::Orderly { pq, .. } => pq.cache_stats(),
            Mode::KeyOrdered { queue } => queue.cache_stats(),
        }
    }

    /// Whether this queue must hold the broker lock to consume (orderly clustering).
    pub(crate) fn needs_lock(&self) -> bool {
        needs_broker_lock(&self.shared.config)
    }

    pub(crate) fn lock_held(&self, now: i64) -> bool {
        self.lock
            .is_held(now, self.shared.config.lock_max_live_time)
    }

    fn deliver(&mut self, mut messages: Vec<MessageExt>, ctx: &mut Context<Self>) {
        let group = &self.shared.group;
        let from_retry_topic = retry::is_retry_topic(&self.queue.topic);
        for message in &mut messages {
            if from_retry_topic {
                retry::restore_original_topic(message, group);
            }
        }
        self.shared.stats.record_pulled(messages.len());
        let pq = match &mut self.mode {
            Mode::Concurrent { pq, .. } => pq,
            Mode::Orderly { .. } | Mode::KeyOrdered { .. } => {
                self.deliver_ordered(messages, ctx);
                return;
            }
        };
        let now = now_ms();
        let batch = Arc::new(messages);
        pq.put_messages(batch.iter().enumerate().map(|(index, m)| CachedEntry {
            offset: m.queue_offset,
            body_len: m.body().len(),
            batch: batch.clone(),
            index,
        }));
        let batch_size = self.shared.config.consume_message_batch_max_size.max(1) as usize;
        self.dispatch(batch, batch_size, now, ctx);
    }

    /// Hands `messages` to the listener in calls of at most `batch_size`. Calls that finish at
    /// once (the usual case) are settled right here, after the last one ran; the others run
    /// as tasks of this actor and settle when they end.
    fn dispatch(
        &mut self,
        messages: Arc<Vec<MessageExt>>,
        batch_size: usize,
        now: i64,
        ctx: &mut Context<Self>,
    ) {
        let Mode::Concurrent { pq, .. } = &mut self.mode else {
            return;
        };
        pq.mark_offsets_consume_started(messages.iter().map(|m| m.queue_offset), now);
        let epoch = self.epoch;
        let mut finished = Vec::new();
        // Calls that finish at once are timed together (two clock reads, not two per call).
        let run_started = std::time::Instant::now();
        let mut start = 0;
        while start < messages.len() {
            let end = start.saturating_add(batch_size.max(1)).min(messages.len());
            let batch = Messages::slice(messages.clone(), start..end);
            start = end;
            self.unsettled += 1;
            let queue = self
                .spare_queues
                .pop()
                .unwrap_or_else(|| self.queue.clone());
            let call = self.shared.dispatcher.consume_now(
                batch.clone(),
                ConsumeContext::new(queue),
                run_started,
            );
            match call {
                Ok(outcome) => finished.push((batch, outcome)),
                Err(pending) => {
                    ctx.spawn(actix::fut::wrap_future::<_, Self>(pending).map(
                        move |outcome, act, ctx| {
                            act.on_consumed(batch, epoch, outcome, now_ms(), ctx);
                        },
                    ));
                }
            }
        }
        if finished.is_empty() {
            return;
        }
        // Each call is credited an equal share of the run (the stats keep a mean anyway).
        let share = run_started.elapsed() / u32::try_from(finished.len()).unwrap_or(u32::MAX);
        for (batch, mut outcome) in finished {
            outcome.elapsed = share;
            self.on_consumed(batch, epoch, outcome, now, ctx);
        }
    }

    fn on_consumed(
        &mut self,
        batch: Messages,
        epoch: u64,
        outcome: ConsumeOutcome,
        now: i64,
        ctx: &mut Context<Self>,
    ) {
        let ConsumeOutcome {
            status,
            context,
            elapsed,
            ..
        } = outcome;
        let success = status == ConsumeStatus::Success;
        let failed = failed_range(success, context.ack_index, batch.len());
        self.shared
            .stats
            .record_consumed(batch.len() - failed.len(), failed.len(), elapsed);
        if context.queue == self.queue && self.spare_queues.len() < MAX_SPARE_QUEUES {
            self.spare_queues.push(context.queue);
        }
        if epoch != self.epoch {
            self.settle(ctx);
            return;
        }
        // Messages whose consumption timed out were already sent back: their (late) outcome
        // neither retries nor commits them again.
        let mut timed_out_here = Vec::new();
        if let Mode::Concurrent { timed_out, .. } = &mut self.mode {
            if !timed_out.is_empty() {
                for m in batch.iter() {
                    if timed_out.remove(&m.queue_offset) {
                        timed_out_here.push(m.queue_offset);
                    }
                }
            }
        }
        let retries: Vec<MessageExt> = batch
            .get(failed.clone())
            .unwrap_or_default()
            .iter()
            .filter(|m| !timed_out_here.contains(&m.queue_offset))
            .cloned()
            .collect();
        let broadcast_failures = !retries.is_empty() && !self.shared.config.is_clustering();
        if broadcast_failures {
            // Broadcasting has no retry topic: the failure is only logged (as Java does).
            for message in &retries {
                tracing::warn!(queue = %self.queue, offset = message.queue_offset, msg_id = %message.msg_id(), "broadcast consumption failed; message dropped");
            }
        }
        if !retries.is_empty() && !broadcast_failures {
            self.unsettled += 1;
            self.send_back(retries, context.delay_level, epoch, ctx);
        }
        let done = batch
            .iter()
            .enumerate()
            .filter(|(i, _)| broadcast_failures || !failed.contains(i))
            .map(|(_, m)| m.queue_offset)
            .filter(|offset| !timed_out_here.contains(offset));
        self.remove_done(done, now, ctx);
        self.settle(ctx);
    }

    /// Sends failed messages back for redelivery; those that cannot be sent back stay cached and
    /// are consumed again here after 5 s.
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
        };
        ctx.spawn(work.into_actor(self).map(move |results, act, ctx| {
            if epoch == act.epoch {
                let (sent, kept): (Vec<_>, Vec<_>) = results.into_iter().partition(|(_, ok)| *ok);
                act.shared.stats.record_sent_back(sent.len());
                act.remove_done(sent.iter().map(|(m, _)| m.queue_offset), now_ms(), ctx);
                if !kept.is_empty() && !act.dropping {
                    let again: Vec<MessageExt> = kept
                        .into_iter()
                        .map(|(mut m, _)| {
                            m.reconsume_times += 1;
                            m
                        })
                        .collect();
                    tracing::warn!(queue = %act.queue, count = again.len(), "send-back failed; consuming again locally in 5 s");
                    act.unsettled += 1;
                    ctx.run_later(LOCAL_RECONSUME_DELAY, move |act, ctx| {
                        if epoch == act.epoch && !act.dropping {
                            let again = Arc::new(again);
                            // The cache now points at the copies with the new counts.
                            if let Mode::Concurrent { pq, .. } = &mut act.mode {
                                for (index, message) in again.iter().enumerate() {
                                    if let Some(entry) = pq.get_mut(message.queue_offset) {
                                        entry.batch = again.clone();
                                        entry.index = index;
                                    }
                                }
                            }
                            let whole = again.len();
                            act.dispatch(again, whole, now_ms(), ctx);
                        }
                        act.settle(ctx);
                    });
                }
            }
            act.settle(ctx);
        }));
    }

    fn remove_done(
        &mut self,
        offsets: impl IntoIterator<Item = i64>,
        now: i64,
        ctx: &mut Context<Self>,
    ) {
        let mut offsets = offsets.into_iter().peekable();
        if offsets.peek().is_none() {
            return;
        }
        // A timed-out offset stays in `timed_out` until its original call reports (see
        // `on_consumed`), so that call's outcome cannot send the message back a second time.
        let Mode::Concurrent { pq, .. } = &mut self.mode else {
            return;
        };
        if let Some(offset) = pq.remove_offsets(offsets, now) {
            self.commit(offset, ctx);
        }
        // Space in the cache may unblock a flow-controlled pull loop right away.
        if !self.pull_in_flight && !self.pull_scheduled && !self.dropping {
            self.pull(ctx);
        }
    }

    /// Raises the committed offset; the offset store hears of it at most once per timer tick.
    pub(crate) fn commit(&mut self, offset: i64, ctx: &mut Context<Self>) {
        if self.committed.is_some_and(|c| c >= offset) {
            return;
        }
        self.committed = Some(offset);
        if !self.offset_flush_scheduled {
            self.offset_flush_scheduled = true;
            ctx.run_later(Duration::ZERO, |act, ctx| {
                act.offset_flush_scheduled = false;
                act.flush_offset(ctx);
            });
        }
    }

    fn flush_offset(&mut self, ctx: &mut Context<Self>) {
        if let Some(offset) = self.committed {
            let update = self.shared.offsets.send(UpdateOffset {
                queue: self.queue.clone(),
                offset,
            });
            ctx.spawn(update.into_actor(self).map(|_, _, _| ()));
        }
    }

    pub(crate) fn settle(&mut self, ctx: &mut Context<Self>) {
        self.unsettled = self.unsettled.saturating_sub(1);
        if self.dropping && self.unsettled == 0 {
            self.finish_drop(ctx);
        }
    }

    fn finish_drop(&mut self, ctx: &mut Context<Self>) {
        if self.drain_waiters.is_empty() {
            return;
        }
        let queue = self.queue.clone();
        let committed = self.committed;
        let offsets = self.shared.offsets.clone();
        let unlock = self.needs_lock() && self.lock.locked;
        let shared = self.shared.clone();
        let persist = async move {
            if let Some(offset) = committed {
                let _ = offsets
                    .send(UpdateOffset {
                        queue: queue.clone(),
                        offset,
                    })
                    .await;
            }
            let persisted = offsets.send(PersistAndRemove(queue.clone())).await;
            // Only after the offset is persisted may the next owner take the lock.
            if unlock {
                if let Err(e) = crate::actors::queue_orderly::unlock_queue(&shared, &queue).await {
                    tracing::warn!(queue = %queue, error = %e, "unlock failed; the broker lock will expire");
                }
            }
            persisted
        };
        ctx.wait(persist.into_actor(self).map(|result, act, ctx| {
            match result {
                Ok(Ok(())) => tracing::debug!(queue = %act.queue, offset = ?act.committed, "queue dropped, offset persisted"),
                Ok(Err(e)) => tracing::warn!(queue = %act.queue, error = %e, "queue dropped; offset not persisted"),
                Err(e) => tracing::warn!(queue = %act.queue, error = %e, "queue dropped; offset store gone"),
            }
            for waiter in act.drain_waiters.drain(..) {
                let _ = waiter.send(());
            }
            ctx.stop();
        }));
    }

    /// Concurrent mode's consume timeout: messages whose listener call started longer than
    /// `consume_timeout` ago are sent back (delay level 3) and stop pinning the offset. The
    /// call itself keeps running; its outcome for them is ignored.
    fn clean_expired(&mut self, ctx: &mut Context<Self>) {
        if !self.shared.config.is_clustering() || self.dropping {
            return;
        }
        let Mode::Concurrent { pq, timed_out } = &mut self.mode else {
            return;
        };
        let expired = pq.expired_messages(now_ms(), self.shared.config.consume_timeout, 16);
        let expired: Vec<MessageExt> = expired
            .into_iter()
            .filter(|offset| !timed_out.contains(offset))
            .filter_map(|offset| pq.get(offset)?.message().cloned())
            .collect();
        if expired.is_empty() {
            return;
        }
        tracing::warn!(queue = %self.queue, count = expired.len(), "consumption timed out; sending back");
        for message in &expired {
            timed_out.insert(message.queue_offset);
        }
        self.unsettled += 1;
        self.send_back(expired, CONSUME_TIMEOUT_DELAY_LEVEL, self.epoch, ctx);
    }
}

impl Actor for QueueActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.needs_lock() {
            // A new queue is locked on its broker before its first pull; then kept locked.
            self.lock_then_start(ctx);
            let every = self.shared.config.lock_interval;
            ctx.run_interval(every, |act, ctx| act.renew_lock(ctx));
        } else {
            self.load_start_offset(ctx);
        }
        let timeout = self.shared.config.consume_timeout;
        let every = (timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(60));
        ctx.run_interval(every, |act, ctx| act.clean_expired(ctx));
    }
}

impl Handler<DropQueue> for QueueActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: DropQueue, ctx: &mut Self::Context) -> Self::Result {
        self.dropping = true;
        match &mut self.mode {
            Mode::Concurrent { pq, .. } => pq.set_dropped(true),
            Mode::Orderly { pq, .. } => pq.set_dropped(true),
            Mode::KeyOrdered { .. } => {}
        }
        let (done, wait) = oneshot::channel();
        self.drain_waiters.push(done);
        if self.unsettled == 0 {
            self.finish_drop(ctx);
        } else if let Some(limit) = self.shared.config.shutdown_await {
            ctx.run_later(limit, |act, ctx| {
                if !act.drain_waiters.is_empty() {
                    tracing::warn!(queue = %act.queue, unsettled = act.unsettled, "listener calls still running after shutdown_await; dropping anyway");
                    act.finish_drop(ctx);
                }
            });
        }
        Box::pin(
            async move {
                let _ = wait.await;
            }
            .into_actor(self),
        )
    }
}

impl Handler<GetQueueStatus> for QueueActor {
    type Result = MessageResult<GetQueueStatus>;

    fn handle(&mut self, _msg: GetQueueStatus, _ctx: &mut Self::Context) -> Self::Result {
        let now = now_ms();
        let idle = Duration::from_millis(now.saturating_sub(self.last_activity_ms).max(0) as u64);
        MessageResult(QueueStatus {
            snapshot: self.snapshot(),
            stalled: self.next_offset.is_some()
                && !self.pull_in_flight
                && idle > self.shared.config.pull_max_idle_time,
        })
    }
}

impl Handler<ResetQueueOffset> for QueueActor {
    type Result = ResponseActFuture<Self, Result<()>>;

    fn handle(&mut self, msg: ResetQueueOffset, ctx: &mut Self::Context) -> Self::Result {
        let offset = msg.0;
        self.discard_cache();
        self.next_offset = Some(offset);
        self.committed = Some(offset);
        let set = self.shared.offsets.send(SetOffset {
            queue: self.queue.clone(),
            offset,
            freeze: false,
        });
        // A pull held by the broker belongs to the old epoch; start over at once.
        self.pull_in_flight = false;
        self.pull(ctx);
        Box::pin(async move { set.await? }.into_actor(self))
    }
}
