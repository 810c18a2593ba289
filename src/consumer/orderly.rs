//! Orderly consumption of one queue (Java `ConsumeMessageOrderlyService`), as a state machine.
//!
//! The queue's actor owns a [`ProcessQueue`] and an [`OrderlyQueueState`] and runs this loop:
//!
//! 1. [`OrderlyQueueState::next_batch`] → [`BatchStep::Consume`] with the batch (or: idle,
//!    dropped, needs the broker lock, already busy). At most one batch of a queue is ever in
//!    flight; other queues proceed independently.
//! 2. The listener runs and returns an [`OrderlyStatus`] (a panic or error counts as
//!    [`OrderlyStatus::SuspendCurrentQueueAMoment`], see [`OrderlyStatus::from_listener`]).
//! 3. [`OrderlyQueueState::on_orderly_result`] → [`OrderlyStep`]: an offset to commit, and what
//!    next — continue at once, yield to other queues, consume again after the suspend time,
//!    send messages that reached `max_reconsume_times` to the dead-letter queue (then report
//!    with [`OrderlyQueueState::on_dead_letter_result`]), or stop (queue dropped).
//!
//! ```ignore
//! use rocketmq_actor::consumer::orderly::*;
//! use rocketmq_actor::consumer::lock::LockState;
//! use rocketmq_actor::consumer::{ConsumeMode, MessageModel, ProcessQueue, PushConsumerConfig};
//! use rocketmq_actor::{Message, MessageExt, MessageQueue};
//!
//! let cfg = PushConsumerConfig {
//!     consume_mode: ConsumeMode::Orderly,
//!     message_model: MessageModel::Broadcasting, // no broker lock needed for the example
//!     ..PushConsumerConfig::new("g")
//! };
//! let ctx = OrderlyContext::new(MessageQueue::new("T", "b", 0), &cfg);
//! let mut pq = ProcessQueue::new(0);
//! let mut state = OrderlyQueueState::new();
//! pq.put_messages((0..2).map(|offset| {
//!     let mut m = MessageExt::from(Message::new("T", "body"));
//!     m.queue_offset = offset;
//!     m
//! }));
//! let BatchStep::Consume(batch) = state.next_batch(&mut pq, &LockState::default(), &cfg, 10) else { panic!() };
//! assert_eq!(batch[0].queue_offset, 0);
//! // The listener failed: the message goes back, the queue pauses for 1 s.
//! let step = state.on_orderly_result(&mut pq, &batch, OrderlyStatus::SuspendCurrentQueueAMoment, &ctx, &cfg, 20);
//! assert_eq!(step.next, OrderlyNext::SuspendFor(std::time::Duration::from_secs(1)));
//! assert_eq!(state.reconsume_times(&batch[0]), 1);
//! // Taken again, it succeeds: offset 1 is committed.
//! let BatchStep::Consume(batch) = state.next_batch(&mut pq, &LockState::default(), &cfg, 1_020) else { panic!() };
//! let step = state.on_orderly_result(&mut pq, &batch, OrderlyStatus::Success, &ctx, &cfg, 1_030);
//! assert_eq!(step.commit_offset, Some(1));
//! ```

use crate::consumer::config::PushConsumerConfig;
use crate::consumer::lock::{lock_allows_consume, LockState};
use crate::consumer::process_queue::{CachedMessage, ProcessQueue};
use crate::consumer::retry::{
    build_retry_message, clamp_suspend_time, orderly_retry, OrderlyRetry,
};
use crate::message::{Message, MessageExt, MessageQueue};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// What an orderly listener returns for a batch (Java `ConsumeOrderlyStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderlyStatus {
    /// Consumed. With auto-commit the offset moves past the batch; without, nothing is
    /// committed until [`OrderlyStatus::Commit`].
    Success,
    /// Failed: the batch is consumed again after the context's suspend time (each message's
    /// reconsume count goes up; at `max_reconsume_times` it goes to the dead-letter queue).
    SuspendCurrentQueueAMoment,
    /// Auto-commit off: commit everything consumed since the last commit. With auto-commit on,
    /// same as [`OrderlyStatus::Success`].
    Commit,
    /// Auto-commit off: everything consumed since the last commit is consumed again after the
    /// suspend time (reconsume counts unchanged). With auto-commit on it acts as
    /// [`OrderlyStatus::SuspendCurrentQueueAMoment`] — Java instead commits, silently losing
    /// messages its listener asked to roll back.
    Rollback,
}

impl OrderlyStatus {
    /// The status to act on for a listener call that may have failed: an error (a panic, a
    /// timeout…) counts as [`OrderlyStatus::SuspendCurrentQueueAMoment`], as Java treats
    /// exceptions and `null`.
    ///
    /// ```ignore
    /// use rocketmq_actor::consumer::orderly::OrderlyStatus;
    /// let panicked: Result<OrderlyStatus, &str> = Err("listener panicked");
    /// assert_eq!(OrderlyStatus::from_listener(panicked), OrderlyStatus::SuspendCurrentQueueAMoment);
    /// ```
    pub fn from_listener<E>(outcome: Result<OrderlyStatus, E>) -> OrderlyStatus {
        outcome.unwrap_or(OrderlyStatus::SuspendCurrentQueueAMoment)
    }

    /// Whether a call with this status consumed its batch (`Success` or `Commit`): nothing of
    /// it is consumed again.
    pub(crate) fn succeeded(self) -> bool {
        matches!(self, OrderlyStatus::Success | OrderlyStatus::Commit)
    }
}

/// What an orderly listener is told about, and may change for, the batch it consumes (Java
/// `ConsumeOrderlyContext`). Plain data: the listener gets it by `&mut` and the state machine
/// reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderlyContext {
    /// The queue the batch comes from.
    pub queue: MessageQueue,
    /// Commit after every successful batch (default true). When false, the listener commits
    /// and rolls back itself with [`OrderlyStatus::Commit`] / [`OrderlyStatus::Rollback`].
    pub auto_commit: bool,
    /// How long the queue pauses after a failed or rolled-back batch (default
    /// `suspend_current_queue_time`, 1 s); clamped to [10 ms, 30 s] when used.
    pub suspend_time: Duration,
}

impl OrderlyContext {
    /// The defaults for a batch of `queue`.
    pub fn new(queue: MessageQueue, cfg: &PushConsumerConfig) -> Self {
        OrderlyContext {
            queue,
            auto_commit: true,
            suspend_time: cfg.suspend_current_queue_time,
        }
    }

    /// The suspend time actually used: [`OrderlyContext::suspend_time`] clamped to
    /// [10 ms, 30 s].
    pub fn effective_suspend_time(&self) -> Duration {
        clamp_suspend_time(self.suspend_time)
    }
}

/// What [`OrderlyQueueState::next_batch`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchStep<M> {
    /// Hand these (at most `consume_message_batch_max_size`, in offset order) to the listener,
    /// then call [`OrderlyQueueState::on_orderly_result`]. Each carries its reconsume count
    /// ([`OrderlyQueueState::reconsume_times`]). The process queue keeps this batch (shared,
    /// not copied) until it is committed or handed back.
    Consume(Arc<[M]>),
    /// Nothing waiting: the consume loop ends; the next `ProcessQueue::put_messages` returning
    /// true starts a new one.
    Idle,
    /// A batch of this queue is already in flight (its result has not been reported): do not
    /// start another one.
    Busy,
    /// The queue was dropped: end the loop.
    Dropped,
    /// Clustering and the broker lock is missing or expired: consume again once it is
    /// granted.
    NeedsLock,
}

/// A message that reached its maximum reconsume times and must go to the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter<M> {
    /// The message.
    pub message: M,
    /// Its reconsume count (≥ the maximum); [`dead_letter_message`] builds the message to
    /// send from it.
    pub reconsume_times: i32,
}

/// What to do after a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderlyNext<M> {
    /// Take the next batch now.
    Continue,
    /// This queue consumed for longer than `max_time_consume_continuously`: queue up behind
    /// the other queues waiting for a consume slot, then continue.
    Yield,
    /// Consume this queue again after this (clamped) suspend time.
    SuspendFor(Duration),
    /// Send each message to `%RETRY%<group>` ([`dead_letter_message`]: `RECONSUME_TIME` above
    /// the maximum, so the broker stores it in `%DLQ%<group>`), then report which sends
    /// succeeded with [`OrderlyQueueState::on_dead_letter_result`]. The batch stays in flight
    /// until then.
    SendToDeadLetter(Vec<DeadLetter<M>>),
    /// The queue was dropped: end the loop (apply `commit_offset` first — the lock is still
    /// held until the drop sequence unlocks it).
    Stop,
}

/// The outcome of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderlyStep<M> {
    /// The queue's new consume offset, to store with an increase-only update.
    pub commit_offset: Option<i64>,
    /// What next.
    pub next: OrderlyNext<M>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PendingDeadLetter {
    /// Messages of the batch below the maximum: they go back in any case.
    retry: Vec<i64>,
    /// Messages at the maximum being sent to the DLQ.
    dead_letter: Vec<i64>,
    suspend: Duration,
    auto_commit: bool,
}

/// The orderly consume state of one queue, next to its [`ProcessQueue`].
///
/// It tracks what the process queue does not: reconsume counts (Java bumps the message
/// object's `reconsumeTimes` on each suspend; here messages may be shared, so counts are kept
/// by offset), messages already sent to the dead-letter queue, the batch in flight and how
/// long the queue has been consuming without a break.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrderlyQueueState {
    reconsume_times: BTreeMap<i64, i32>,
    /// Sent to the DLQ but still in the process queue's consuming set, so that the next
    /// commit moves past them; they are never handed to the listener again.
    dead_lettered: BTreeSet<i64>,
    pending: Option<PendingDeadLetter>,
    in_flight: bool,
    run_started_ms: Option<i64>,
}

impl OrderlyQueueState {
    /// A queue with no history.
    pub fn new() -> Self {
        OrderlyQueueState::default()
    }

    /// Whether a batch is in flight (handed out and its result not yet reported), including
    /// while its dead-letter sends are pending. A dropped queue waits for this to clear before
    /// persisting and unlocking.
    pub fn is_in_flight(&self) -> bool {
        self.in_flight
    }

    /// How many times `msg` was delivered before: the broker's count plus this consumer's
    /// suspends. Set it on the message handed to the listener (`MessageExt::reconsume_times`),
    /// as Java does.
    pub fn reconsume_times<M: CachedMessage>(&self, msg: &M) -> i32 {
        self.reconsume_times
            .get(&msg.queue_offset())
            .copied()
            .unwrap_or_else(|| msg.reconsume_times())
    }

    /// The late result of a batch handed out before [`Self::clear`] arrived: nothing of it
    /// counts any more, but the queue may start its next batch.
    pub fn on_stale_result(&mut self) {
        self.in_flight = false;
        self.pending = None;
    }

    /// Forgets all per-message bookkeeping (the process queue was cleared by an offset reset
    /// or a drop). A listener call still running stays "in flight", so no second batch of the
    /// queue starts before its (late) result is reported; that result finds nothing to commit.
    pub fn clear(&mut self) {
        *self = OrderlyQueueState {
            in_flight: self.in_flight,
            ..OrderlyQueueState::default()
        };
    }

    /// The next batch to consume, if the queue may consume now. Checks, in order: a batch
    /// already in flight, dropped, the broker lock (clustering: locked and not older than
    /// `lock_max_live_time`), then takes up to `consume_message_batch_max_size` messages.
    pub fn next_batch<M: CachedMessage + Clone>(
        &mut self,
        pq: &mut ProcessQueue<M>,
        lock: &LockState,
        cfg: &PushConsumerConfig,
        now_ms: i64,
    ) -> BatchStep<M> {
        let batch_size = match self.batch_size_now(pq, lock, cfg, now_ms) {
            Ok(size) => size,
            Err(step) => return step,
        };
        let counts = &self.reconsume_times;
        let batch = pq.take_messages_with(batch_size, now_ms, |msg| set_count(counts, msg));
        if !self.begin_batch(!batch.is_empty(), now_ms) {
            return BatchStep::Idle;
        }
        BatchStep::Consume(batch)
    }

    /// [`Self::next_batch`] for cheap-to-copy cache entries, which the process queue keeps
    /// itself ([`ProcessQueue::take_messages_kept`]): the batch, or the step that is not
    /// [`BatchStep::Consume`].
    pub(crate) fn next_batch_kept<'q, M: CachedMessage>(
        &mut self,
        pq: &'q mut ProcessQueue<M>,
        lock: &LockState,
        cfg: &PushConsumerConfig,
        now_ms: i64,
    ) -> Result<&'q [M], BatchStep<M>> {
        let batch_size = self.batch_size_now(pq, lock, cfg, now_ms)?;
        let counts = &self.reconsume_times;
        let batch = pq.take_messages_kept(batch_size, now_ms, |msg| set_count(counts, msg));
        if !self.begin_batch(!batch.is_empty(), now_ms) {
            return Err(BatchStep::Idle);
        }
        Ok(batch)
    }

    /// A batch was `taken` (it is in flight and the run goes on) or nothing was waiting (the
    /// run ends); returns `taken`.
    fn begin_batch(&mut self, taken: bool, now_ms: i64) -> bool {
        if taken {
            self.in_flight = true;
            self.run_started_ms.get_or_insert(now_ms);
        } else {
            self.run_started_ms = None;
        }
        taken
    }

    /// How many messages the next batch may take, if one may start now.
    fn batch_size_now<M: CachedMessage>(
        &mut self,
        pq: &ProcessQueue<M>,
        lock: &LockState,
        cfg: &PushConsumerConfig,
        now_ms: i64,
    ) -> Result<usize, BatchStep<M>> {
        if self.in_flight {
            return Err(BatchStep::Busy);
        }
        if pq.is_dropped() {
            self.run_started_ms = None;
            return Err(BatchStep::Dropped);
        }
        if !lock_allows_consume(cfg, lock, now_ms) {
            self.run_started_ms = None;
            return Err(BatchStep::NeedsLock);
        }
        Ok(usize::try_from(cfg.consume_message_batch_max_size.max(1)).unwrap_or(1))
    }

    /// Applies the listener's `status` for `batch` (the messages [`Self::next_batch`] handed
    /// out). See [`OrderlyStatus`] for what each status does with and without auto-commit.
    ///
    /// A failed batch (suspend, or rollback with auto-commit) is split per message: below
    /// `max_reconsume_times` (unlimited by default, as Java) it goes back with its count + 1
    /// and the queue pauses for the context's suspend time; at the maximum it is sent to the
    /// DLQ ([`OrderlyNext::SendToDeadLetter`]) and skipped once that send succeeds — unlike
    /// Java 5.0, where it never left the queue (apache/rocketmq #6163), and unlike Java 4.x,
    /// which put successfully dead-lettered messages back when another message of the batch
    /// still had retries left.
    ///
    /// On a dropped queue the batch's commit still counts (the broker lock is held until the
    /// drop sequence releases it, so the next owner starts after it); nothing else happens
    /// and the loop stops.
    ///
    /// `batch` holds the messages as the listener saw them (`B`), which may be another type
    /// than the cache's entries (`M`): a cache of light entries hands out the messages they
    /// point to.
    pub fn on_orderly_result<M: CachedMessage + Clone, B: CachedMessage + Clone>(
        &mut self,
        pq: &mut ProcessQueue<M>,
        batch: &[B],
        status: OrderlyStatus,
        ctx: &OrderlyContext,
        cfg: &PushConsumerConfig,
        now_ms: i64,
    ) -> OrderlyStep<B> {
        self.in_flight = false;
        let status = match (ctx.auto_commit, status) {
            (true, OrderlyStatus::Commit) => OrderlyStatus::Success,
            (true, OrderlyStatus::Rollback) => OrderlyStatus::SuspendCurrentQueueAMoment,
            (_, other) => other,
        };
        let commits = matches!(
            (ctx.auto_commit, status),
            (true, OrderlyStatus::Success) | (false, OrderlyStatus::Commit)
        );
        if pq.is_dropped() {
            let commit_offset = if commits { self.commit(pq) } else { None };
            self.run_started_ms = None;
            return OrderlyStep {
                commit_offset,
                next: OrderlyNext::Stop,
            };
        }
        let suspend = ctx.effective_suspend_time();
        match status {
            OrderlyStatus::Success | OrderlyStatus::Commit => {
                let commit_offset = if commits { self.commit(pq) } else { None };
                OrderlyStep {
                    commit_offset,
                    next: self.continue_or_yield(cfg, now_ms),
                }
            }
            OrderlyStatus::Rollback => {
                let back: Vec<i64> = pq
                    .consuming_offsets()
                    .into_iter()
                    .filter(|offset| !self.dead_lettered.contains(offset))
                    .collect();
                pq.make_messages_consume_again(&back);
                self.suspend_step(suspend)
            }
            OrderlyStatus::SuspendCurrentQueueAMoment => {
                let max = cfg.effective_max_reconsume_times();
                let mut retry = Vec::new();
                let mut dead = Vec::new();
                for msg in batch {
                    let times = self.reconsume_times(msg);
                    match orderly_retry(times, max) {
                        OrderlyRetry::Suspend => retry.push(msg.queue_offset()),
                        OrderlyRetry::SendToDeadLetter => dead.push(DeadLetter {
                            message: msg.clone(),
                            reconsume_times: times,
                        }),
                    }
                }
                if dead.is_empty() {
                    self.put_back(pq, &retry);
                    return self.suspend_step(suspend);
                }
                self.in_flight = true;
                self.pending = Some(PendingDeadLetter {
                    retry,
                    dead_letter: dead.iter().map(|d| d.message.queue_offset()).collect(),
                    suspend,
                    auto_commit: ctx.auto_commit,
                });
                OrderlyStep {
                    commit_offset: None,
                    next: OrderlyNext::SendToDeadLetter(dead),
                }
            }
        }
    }

    /// Reports the dead-letter sends asked for by [`OrderlyNext::SendToDeadLetter`]: `sent`
    /// lists the offsets whose send succeeded. Those are done (never consumed again); a
    /// message whose send failed goes back with the rest and the queue keeps suspending, as
    /// in Java. When everything of the batch went to the DLQ, the batch is committed
    /// (auto-commit) and consumption continues.
    pub fn on_dead_letter_result<M: CachedMessage + Clone, B>(
        &mut self,
        pq: &mut ProcessQueue<M>,
        sent: &[i64],
        cfg: &PushConsumerConfig,
        now_ms: i64,
    ) -> OrderlyStep<B> {
        let Some(pending) = self.pending.take() else {
            self.in_flight = false;
            return OrderlyStep {
                commit_offset: None,
                next: if pq.is_dropped() {
                    OrderlyNext::Stop
                } else {
                    OrderlyNext::Continue
                },
            };
        };
        self.in_flight = false;
        let mut back = pending.retry;
        for offset in pending.dead_letter {
            if sent.contains(&offset) {
                self.dead_lettered.insert(offset);
                self.reconsume_times.remove(&offset);
            } else {
                back.push(offset);
            }
        }
        back.sort_unstable();
        let dropped = pq.is_dropped();
        let step = if back.is_empty() {
            let commit_offset = if pending.auto_commit {
                self.commit(pq)
            } else {
                None
            };
            OrderlyStep {
                commit_offset,
                next: self.continue_or_yield(cfg, now_ms),
            }
        } else if dropped {
            OrderlyStep {
                commit_offset: None,
                next: OrderlyNext::Stop,
            }
        } else {
            self.put_back(pq, &back);
            self.suspend_step(pending.suspend)
        };
        if dropped {
            self.run_started_ms = None;
            return OrderlyStep {
                commit_offset: step.commit_offset,
                next: OrderlyNext::Stop,
            };
        }
        step
    }

    fn commit<M: CachedMessage>(&mut self, pq: &mut ProcessQueue<M>) -> Option<i64> {
        let offset = pq.commit()?;
        // Usually both are empty: then there is nothing to split off (and no map to drop per
        // committed batch).
        if !self.reconsume_times.is_empty() {
            self.reconsume_times = self.reconsume_times.split_off(&offset);
        }
        if !self.dead_lettered.is_empty() {
            self.dead_lettered = self.dead_lettered.split_off(&offset);
        }
        Some(offset)
    }

    fn put_back<M: CachedMessage + Clone>(&mut self, pq: &mut ProcessQueue<M>, offsets: &[i64]) {
        for offset in offsets {
            let times = match pq_consuming_times(pq, *offset) {
                Some(base) => self.reconsume_times.get(offset).copied().unwrap_or(base),
                None => continue,
            };
            self.reconsume_times
                .insert(*offset, times.saturating_add(1));
        }
        pq.make_messages_consume_again(offsets);
    }

    fn suspend_step<M>(&mut self, suspend: Duration) -> OrderlyStep<M> {
        self.run_started_ms = None;
        OrderlyStep {
            commit_offset: None,
            next: OrderlyNext::SuspendFor(suspend),
        }
    }

    fn continue_or_yield<M>(&mut self, cfg: &PushConsumerConfig, now_ms: i64) -> OrderlyNext<M> {
        match self.run_started_ms {
            Some(started)
                if now_ms.saturating_sub(started) > millis(cfg.max_time_consume_continuously) =>
            {
                self.run_started_ms = None;
                OrderlyNext::Yield
            }
            _ => OrderlyNext::Continue,
        }
    }
}

/// Sets a message's count to what the listener is to see: the local one, if it failed here.
fn set_count<M: CachedMessage>(counts: &BTreeMap<i64, i32>, msg: &mut M) {
    let times = counts
        .get(&msg.queue_offset())
        .copied()
        .unwrap_or_else(|| msg.reconsume_times());
    msg.set_reconsume_times(times);
}

/// The broker-side reconsume count of a message in the consuming set, if it is there.
fn pq_consuming_times<M: CachedMessage>(pq: &ProcessQueue<M>, offset: i64) -> Option<i32> {
    pq.consuming_message(offset)
        .map(CachedMessage::reconsume_times)
}

/// The message to send for a [`DeadLetter`]: `msg` re-sent to `%RETRY%<group>` with its
/// reconsume count set to `reconsume_times`, so `RECONSUME_TIME` = count + 1 (> the maximum)
/// and the broker routes it to `%DLQ%<group>`; original topic, first message id, body, flag
/// and properties are kept (see [`build_retry_message`]).
pub fn dead_letter_message(
    msg: &MessageExt,
    reconsume_times: i32,
    cfg: &PushConsumerConfig,
) -> Message {
    let mut counted = msg.clone();
    counted.reconsume_times = reconsume_times;
    build_retry_message(
        &counted,
        &cfg.consumer_group,
        cfg.max_reconsume_times_for_wire(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::config::{ConsumeMode, MessageModel};
    use crate::message::property;
    use proptest::prelude::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Msg {
        offset: i64,
        times: i32,
    }

    impl CachedMessage for Msg {
        fn queue_offset(&self) -> i64 {
            self.offset
        }
        fn body_len(&self) -> usize {
            10
        }
        fn reconsume_times(&self) -> i32 {
            self.times
        }
    }

    fn msgs(offsets: impl IntoIterator<Item = i64>) -> Vec<Msg> {
        offsets
            .into_iter()
            .map(|offset| Msg { offset, times: 0 })
            .collect()
    }

    fn cfg() -> PushConsumerConfig {
        PushConsumerConfig {
            consume_mode: ConsumeMode::Orderly,
            ..PushConsumerConfig::new("g")
        }
    }

    /// No broker lock held (these tests broadcast, or expect `NeedsLock`).
    const NO_LOCK: LockState = LockState {
        locked: false,
        last_lock_ms: None,
    };

    fn broadcasting() -> PushConsumerConfig {
        PushConsumerConfig {
            message_model: MessageModel::Broadcasting,
            ..cfg()
        }
    }

    fn ctx(cfg: &PushConsumerConfig) -> OrderlyContext {
        OrderlyContext::new(MessageQueue::new("T", "b", 0), cfg)
    }

    fn offsets(batch: &[Msg]) -> Vec<i64> {
        batch.iter().map(|m| m.offset).collect()
    }

    fn take(
        state: &mut OrderlyQueueState,
        pq: &mut ProcessQueue<Msg>,
        c: &PushConsumerConfig,
        now: i64,
    ) -> Vec<Msg> {
        match state.next_batch(pq, &NO_LOCK, c, now) {
            BatchStep::Consume(batch) => batch.to_vec(),
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    const SUSPEND: OrderlyStatus = OrderlyStatus::SuspendCurrentQueueAMoment;

    #[test]
    fn success_commits_one_past_the_batch_and_continues() {
        let c = PushConsumerConfig {
            consume_message_batch_max_size: 3,
            ..broadcasting()
        };
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(10..15));
        let batch = take(&mut st, &mut pq, &c, 0);
        assert_eq!(offsets(&batch), vec![10, 11, 12]);
        let step = st.on_orderly_result(&mut pq, &batch, OrderlyStatus::Success, &ctx(&c), &c, 1);
        assert_eq!(
            step,
            OrderlyStep {
                commit_offset: Some(13),
                next: OrderlyNext::Continue
            }
        );
        let batch = take(&mut st, &mut pq, &c, 2);
        assert_eq!(offsets(&batch), vec![13, 14]);
        let step = st.on_orderly_result(&mut pq, &batch, OrderlyStatus::Success, &ctx(&c), &c, 3);
        assert_eq!(step.commit_offset, Some(15));
        assert_eq!(st.next_batch(&mut pq, &NO_LOCK, &c, 4), BatchStep::Idle);
    }

    #[test]
    fn only_one_batch_per_queue_is_in_flight() {
        let c = broadcasting();
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..5));
        let batch = take(&mut st, &mut pq, &c, 0);
        assert!(st.is_in_flight());
        assert_eq!(st.next_batch(&mut pq, &NO_LOCK, &c, 0), BatchStep::Busy);
        st.on_orderly_result(&mut pq, &batch, OrderlyStatus::Success, &ctx(&c), &c, 0);
        assert!(!st.is_in_flight());
        assert!(matches!(
            st.next_batch(&mut pq, &NO_LOCK, &c, 0),
            BatchStep::Consume(_)
        ));
    }

    #[test]
    fn suspend_puts_back_counts_and_pauses_for_the_clamped_time() {
        let c = broadcasting();
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages([
            Msg {
                offset: 0,
                times: 2,
            },
            Msg {
                offset: 1,
                times: 0,
            },
        ]);
        let mut context = ctx(&c);
        for (asked, used) in [(0, 10), (5, 10), (500, 500), (60_000, 30_000)] {
            context.suspend_time = Duration::from_millis(asked);
            let batch = take(&mut st, &mut pq, &c, 0);
            assert_eq!(
                offsets(&batch),
                vec![0],
                "the same message comes back first"
            );
            let step = st.on_orderly_result(&mut pq, &batch, SUSPEND, &context, &c, 0);
            assert_eq!(step.commit_offset, None);
            assert_eq!(
                step.next,
                OrderlyNext::SuspendFor(Duration::from_millis(used))
            );
        }
        // The broker's count (2) plus four local suspends.
        assert_eq!(
            st.reconsume_times(&Msg {
                offset: 0,
                times: 2
            }),
            6
        );
        assert_eq!(
            st.reconsume_times(&Msg {
                offset: 1,
                times: 0
            }),
            0
        );
        // Whatever count the caller wrote on its copy, counting continues from the state's.
        let batch = take(&mut st, &mut pq, &c, 0);
        let relabelled = vec![Msg {
            offset: 0,
            times: 6,
        }];
        st.on_orderly_result(&mut pq, &relabelled, SUSPEND, &context, &c, 0);
        assert_eq!(st.reconsume_times(&batch[0]), 7);
        // Success forgets the count.
        let batch = take(&mut st, &mut pq, &c, 0);
        st.on_orderly_result(&mut pq, &batch, OrderlyStatus::Success, &context, &c, 0);
        assert_eq!(
            st.reconsume_times(&Msg {
                offset: 0,
                times: 0
            }),
            0
        );
    }

    #[test]
    fn default_context_uses_the_configured_suspend_time() {
        let c = PushConsumerConfig {
            suspend_current_queue_time: Duration::from_millis(1),
            ..cfg()
        };
        let context = ctx(&c);
        assert!(context.auto_commit);
        assert_eq!(context.effective_suspend_time(), Duration::from_millis(10));
        assert_eq!(ctx(&cfg()).effective_suspend_time(), Duration::from_secs(1));
    }

    #[test]
    fn a_listener_panic_is_a_suspend() {
        let status = OrderlyStatus::from_listener::<String>(Err("boom".into()));
        assert_eq!(status, SUSPEND);
        assert_eq!(
            OrderlyStatus::from_listener::<()>(Ok(OrderlyStatus::Commit)),
            OrderlyStatus::Commit
        );
    }

    #[test]
    fn unlimited_by_default_the_message_never_leaves() {
        let c = broadcasting();
        assert_eq!(c.effective_max_reconsume_times(), None);
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages([Msg {
            offset: 0,
            times: i32::MAX - 1,
        }]);
        for _ in 0..5 {
            let batch = take(&mut st, &mut pq, &c, 0);
            let step = st.on_orderly_result(&mut pq, &batch, SUSPEND, &ctx(&c), &c, 0);
            assert!(matches!(step.next, OrderlyNext::SuspendFor(_)));
        }
        // The count saturates instead of overflowing.
        assert_eq!(
            st.reconsume_times(&Msg {
                offset: 0,
                times: 0
            }),
            i32::MAX
        );
    }

    #[test]
    fn at_max_reconsume_times_the_message_goes_to_the_dlq_and_the_queue_moves_on() {
        let c = PushConsumerConfig {
            max_reconsume_times: Some(2),
            ..broadcasting()
        };
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..2));
        // Two deliveries fail and suspend (counts 0 → 1 → 2).
        for _ in 0..2 {
            let batch = take(&mut st, &mut pq, &c, 0);
            let step = st.on_orderly_result(&mut pq, &batch, SUSPEND, &ctx(&c), &c, 0);
            assert!(matches!(step.next, OrderlyNext::SuspendFor(_)));
        }
        // The third failure: count 2 = max → dead letter, batch still in flight.
        let batch = take(&mut st, &mut pq, &c, 0);
        let step = st.on_orderly_result(&mut pq, &batch, SUSPEND, &ctx(&c), &c, 0);
        let OrderlyNext::SendToDeadLetter(dead) = step.next else {
            panic!("expected a dead letter, got {:?}", step.next)
        };
        assert_eq!(
            dead,
            vec![DeadLetter {
                message: Msg {
                    offset: 0,
                    times: 0
                },
                reconsume_times: 2
            }]
        );
        assert_eq!(step.commit_offset, None);
        assert!(st.is_in_flight());
        assert_eq!(st.next_batch(&mut pq, &NO_LOCK, &c, 0), BatchStep::Busy);
        // The send succeeded: committed, and the next message is consumed.
        let step = st.on_dead_letter_result::<_, Msg>(&mut pq, &[0], &c, 0);
        assert_eq!(
            step,
            OrderlyStep {
                commit_offset: Some(1),
                next: OrderlyNext::Continue
            }
        );
        assert_eq!(offsets(&take(&mut st, &mut pq, &c, 0)), vec![1]);
    }

    #[test]
    fn a_failed_dlq_send_keeps_suspending_and_retries_the_send() {
        let c = PushConsumerConfig {
            max_reconsume_times: Some(0),
            ..broadcasting()
        };
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..1));
        let batch = take(&mut st, &mut pq, &c, 0);
        let step = st.on_orderly_result(&mut pq, &batch, SUSPEND, &ctx(&c), &c, 0);
        assert!(matches!(step.next, OrderlyNext::SendToDeadLetter(_)));
        let step = st.on_dead_letter_result::<_, Msg>(&mut pq, &[], &c, 0);
        assert_eq!(
            step,
            OrderlyStep {
                commit_offset: None,
                next: OrderlyNext::SuspendFor(Duration::from_secs(1))
            }
        );
        // Back in the queue, consumed again, and on failure sent again.
        let batch = take(&mut st, &mut pq, &c, 0);
        assert_eq!(offsets(&batch), vec![0]);
        let step = st.on_orderly_result(&mut pq, &batch, SUSPEND, &ctx(&c), &c, 0);
        let OrderlyNext::SendToDeadLetter(dead) = step.next else {
            panic!()
        };
        assert_eq!(dead[0].reconsume_times, 1);
        let step = st.on_dead_letter_result::<_, Msg>(&mut pq, &[0], &c, 0);
        assert_eq!(step.commit_offset, Some(1));
    }

    #[test]
    fn a_dead_lettered_message_is_not_consumed_again_when_its_batch_mate_retries() {
        let c = PushConsumerConfig {
            max_reconsume_times: Some(1),
            consume_message_batch_max_size: 2,
            ..broadcasting()
        };
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        // Offset 0 already failed once at the broker; offset 1 is fresh.
        pq.put_messages([
            Msg {
                offset: 0,
                times: 1,
            },
            Msg {
                offset: 1,
                times: 0,
            },
        ]);
        let batch = take(&mut st, &mut pq, &c, 0);
        let step = st.on_orderly_result(&mut pq, &batch, SUSPEND, &ctx(&c), &c, 0);
        let OrderlyNext::SendToDeadLetter(dead) = step.next else {
            panic!()
        };
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].message.offset, 0);
        let step = st.on_dead_letter_result::<_, Msg>(&mut pq, &[0], &c, 0);
        assert!(matches!(step.next, OrderlyNext::SuspendFor(_)));
        // Only offset 1 comes back; once it succeeds the commit covers both.
        let batch = take(&mut st, &mut pq, &c, 0);
        assert_eq!(offsets(&batch), vec![1]);
        let step = st.on_orderly_result(&mut pq, &batch, OrderlyStatus::Success, &ctx(&c), &c, 0);
        assert_eq!(step.commit_offset, Some(2));
    }

    #[test]
    fn manual_commit_success_commits_nothing_until_commit() {
        let c = broadcasting();
        let mut context = ctx(&c);
        context.auto_commit = false;
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..3));
        let batch = take(&mut st, &mut pq, &c, 0);
        let step = st.on_orderly_result(&mut pq, &batch, OrderlyStatus::Success, &context, &c, 0);
        assert_eq!(
            step,
            OrderlyStep {
                commit_offset: None,
                next: OrderlyNext::Continue
            }
        );
        let batch = take(&mut st, &mut pq, &c, 0);
        let step = st.on_orderly_result(&mut pq, &batch, OrderlyStatus::Commit, &context, &c, 0);
        assert_eq!(
            step.commit_offset,
            Some(2),
            "the commit covers both batches"
        );
        assert_eq!(pq.cached_count(), 1);
    }

    #[test]
    fn manual_rollback_replays_everything_since_the_last_commit() {
        let c = broadcasting();
        let mut context = ctx(&c);
        context.auto_commit = false;
        context.suspend_time = Duration::from_millis(200);
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..3));
        let first = take(&mut st, &mut pq, &c, 0);
        st.on_orderly_result(&mut pq, &first, OrderlyStatus::Success, &context, &c, 0);
        let second = take(&mut st, &mut pq, &c, 0);
        let step = st.on_orderly_result(&mut pq, &second, OrderlyStatus::Rollback, &context, &c, 0);
        assert_eq!(
            step,
            OrderlyStep {
                commit_offset: None,
                next: OrderlyNext::SuspendFor(Duration::from_millis(200))
            }
        );
        assert_eq!(offsets(&take(&mut st, &mut pq, &c, 0)), vec![0]);
        // A rollback is the listener's choice, not a failure: counts are unchanged.
        assert_eq!(st.reconsume_times(&first[0]), 0);
    }

    #[test]
    fn manual_suspend_puts_back_only_the_batch() {
        let c = broadcasting();
        let mut context = ctx(&c);
        context.auto_commit = false;
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..3));
        let first = take(&mut st, &mut pq, &c, 0);
        st.on_orderly_result(&mut pq, &first, OrderlyStatus::Success, &context, &c, 0);
        let second = take(&mut st, &mut pq, &c, 0);
        st.on_orderly_result(&mut pq, &second, SUSPEND, &context, &c, 0);
        assert_eq!(offsets(&take(&mut st, &mut pq, &c, 0)), vec![1]);
        assert_eq!(st.reconsume_times(&second[0]), 1);
    }

    #[test]
    fn auto_commit_treats_commit_as_success_and_rollback_as_suspend() {
        let c = broadcasting();
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..2));
        let batch = take(&mut st, &mut pq, &c, 0);
        let step = st.on_orderly_result(&mut pq, &batch, OrderlyStatus::Commit, &ctx(&c), &c, 0);
        assert_eq!(step.commit_offset, Some(1));
        let batch = take(&mut st, &mut pq, &c, 0);
        let step = st.on_orderly_result(&mut pq, &batch, OrderlyStatus::Rollback, &ctx(&c), &c, 0);
        assert_eq!(
            step.commit_offset, None,
            "rolled back messages are not lost"
        );
        assert!(matches!(step.next, OrderlyNext::SuspendFor(_)));
        assert_eq!(st.reconsume_times(&batch[0]), 1);
    }

    #[test]
    fn yields_after_consuming_continuously_for_too_long() {
        let c = PushConsumerConfig {
            max_time_consume_continuously: Duration::from_secs(60),
            ..broadcasting()
        };
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..10));
        let next_at =
            |st: &mut OrderlyQueueState, pq: &mut ProcessQueue<Msg>, start: i64, end: i64| {
                let batch = take(st, pq, &c, start);
                st.on_orderly_result(pq, &batch, OrderlyStatus::Success, &ctx(&c), &c, end)
                    .next
            };
        assert_eq!(
            next_at(&mut st, &mut pq, 1_000, 30_000),
            OrderlyNext::Continue
        );
        // Exactly 60 s into the run is still within budget.
        assert_eq!(
            next_at(&mut st, &mut pq, 30_000, 61_000),
            OrderlyNext::Continue
        );
        assert_eq!(
            next_at(&mut st, &mut pq, 61_000, 61_001),
            OrderlyNext::Yield
        );
        // After yielding, a new run starts with a fresh budget.
        assert_eq!(
            next_at(&mut st, &mut pq, 70_000, 129_000),
            OrderlyNext::Continue
        );
        // A pause (suspend) also ends the run.
        let batch = take(&mut st, &mut pq, &c, 129_500);
        st.on_orderly_result(&mut pq, &batch, SUSPEND, &ctx(&c), &c, 129_600);
        assert_eq!(
            next_at(&mut st, &mut pq, 200_000, 250_000),
            OrderlyNext::Continue
        );
    }

    #[test]
    fn clustering_consumes_only_under_a_live_lock() {
        let c = cfg();
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..3));
        let mut lock = LockState::default();
        assert_eq!(st.next_batch(&mut pq, &lock, &c, 0), BatchStep::NeedsLock);
        lock.locked = true;
        lock.last_lock_ms = Some(1_000);
        assert!(matches!(
            st.next_batch(&mut pq, &lock, &c, 31_000),
            BatchStep::Consume(_)
        ));
        st.on_orderly_result(
            &mut pq,
            &msgs([0]),
            OrderlyStatus::Success,
            &ctx(&c),
            &c,
            31_000,
        );
        // Lock older than 30 s: stop until re-locked; nothing was taken.
        assert_eq!(
            st.next_batch(&mut pq, &lock, &c, 31_001),
            BatchStep::NeedsLock
        );
        assert_eq!(pq.consuming_count(), 0);
        lock.last_lock_ms = Some(31_001);
        assert!(matches!(
            st.next_batch(&mut pq, &lock, &c, 31_002),
            BatchStep::Consume(_)
        ));
    }

    #[test]
    fn a_dropped_queue_finishes_its_batch_commits_it_and_stops() {
        let c = broadcasting();
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..3));
        let batch = take(&mut st, &mut pq, &c, 0);
        pq.set_dropped(true);
        let step = st.on_orderly_result(&mut pq, &batch, OrderlyStatus::Success, &ctx(&c), &c, 0);
        assert_eq!(
            step,
            OrderlyStep {
                commit_offset: Some(1),
                next: OrderlyNext::Stop
            }
        );
        assert!(!st.is_in_flight());
        assert_eq!(st.next_batch(&mut pq, &NO_LOCK, &c, 0), BatchStep::Dropped);
        // A failed batch on a dropped queue: no commit, no DLQ, stop.
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        let c = PushConsumerConfig {
            max_reconsume_times: Some(0),
            ..broadcasting()
        };
        pq.put_messages(msgs(0..1));
        let batch = take(&mut st, &mut pq, &c, 0);
        pq.set_dropped(true);
        let step = st.on_orderly_result(&mut pq, &batch, SUSPEND, &ctx(&c), &c, 0);
        assert_eq!(
            step,
            OrderlyStep {
                commit_offset: None,
                next: OrderlyNext::Stop
            }
        );
    }

    #[test]
    fn dropped_while_dead_letters_were_sent() {
        let c = PushConsumerConfig {
            max_reconsume_times: Some(0),
            ..broadcasting()
        };
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..1));
        let batch = take(&mut st, &mut pq, &c, 0);
        st.on_orderly_result(&mut pq, &batch, SUSPEND, &ctx(&c), &c, 0);
        pq.set_dropped(true);
        let step = st.on_dead_letter_result::<_, Msg>(&mut pq, &[0], &c, 0);
        assert_eq!(
            step,
            OrderlyStep {
                commit_offset: Some(1),
                next: OrderlyNext::Stop
            }
        );
        assert!(!st.is_in_flight());
    }

    #[test]
    fn an_offset_reset_mid_batch_does_not_start_a_second_batch() {
        let c = broadcasting();
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..3));
        let batch = take(&mut st, &mut pq, &c, 0);
        // Reset to offset 100 while the listener runs.
        pq.clear();
        st.clear();
        pq.put_messages(msgs(100..102));
        assert_eq!(st.next_batch(&mut pq, &NO_LOCK, &c, 0), BatchStep::Busy);
        // The late result commits nothing (the old batch is gone) and frees the queue.
        let step = st.on_orderly_result(&mut pq, &batch, OrderlyStatus::Success, &ctx(&c), &c, 0);
        assert_eq!(step.commit_offset, None);
        assert_eq!(offsets(&take(&mut st, &mut pq, &c, 0)), vec![100]);
        // Same while dead-letter sends were pending.
        let c = PushConsumerConfig {
            max_reconsume_times: Some(0),
            ..broadcasting()
        };
        let mut pq = ProcessQueue::new(0);
        let mut st = OrderlyQueueState::new();
        pq.put_messages(msgs(0..1));
        let batch = take(&mut st, &mut pq, &c, 0);
        st.on_orderly_result(&mut pq, &batch, SUSPEND, &ctx(&c), &c, 0);
        pq.clear();
        st.clear();
        pq.put_messages(msgs(5..6));
        assert_eq!(st.next_batch(&mut pq, &NO_LOCK, &c, 0), BatchStep::Busy);
        let step = st.on_dead_letter_result::<_, Msg>(&mut pq, &[0], &c, 0);
        assert_eq!(step.commit_offset, None);
        assert_eq!(offsets(&take(&mut st, &mut pq, &c, 0)), vec![5]);
    }

    #[test]
    fn dead_letter_message_makes_the_broker_pick_the_dlq() {
        let c = PushConsumerConfig {
            max_reconsume_times: Some(3),
            ..cfg()
        };
        let mut m =
            MessageExt::from(Message::new("Orders", "b").with_property(property::UNIQ_KEY, "U1"));
        m.reconsume_times = 0;
        let out = dead_letter_message(&m, 3, &c);
        assert_eq!(out.topic, "%RETRY%g");
        assert_eq!(out.property(property::RECONSUME_TIME), Some("4"));
        assert_eq!(out.property(property::MAX_RECONSUME_TIMES), Some("3"));
        assert_eq!(out.property(property::RETRY_TOPIC), Some("Orders"));
        assert_eq!(out.property(property::ORIGIN_MESSAGE_ID), Some("U1"));
    }

    #[derive(Debug, Clone)]
    enum Action {
        Listener(u8),
        DeadLetterSends(Vec<bool>),
        Arrive(usize),
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever listeners answer, with auto-commit: batches are handed out in order without
        /// gaps or repeats of committed messages, commits never go back, never pass a message
        /// that was neither consumed successfully nor dead-lettered, and a message is
        /// dead-lettered exactly when it failed max + 1 times.
        #[test]
        fn auto_commit_never_loses_or_reorders(
            max in proptest::option::of(0u32..3),
            batch_size in 1u32..4,
            actions in proptest::collection::vec(
                prop_oneof![
                    (0u8..4).prop_map(Action::Listener),
                    proptest::collection::vec(any::<bool>(), 0..4).prop_map(Action::DeadLetterSends),
                    (1usize..4).prop_map(Action::Arrive),
                ],
                1..80,
            ),
        ) {
            let c = PushConsumerConfig {
                max_reconsume_times: max,
                consume_message_batch_max_size: batch_size,
                ..broadcasting()
            };
            let context = ctx(&c);
            let mut pq = ProcessQueue::new(0);
            let mut st = OrderlyQueueState::new();
            let mut next_offset = 0i64;
            let mut failures: BTreeMap<i64, u32> = BTreeMap::new();
            let mut done: BTreeSet<i64> = BTreeSet::new();
            let mut committed = 0i64;
            let mut in_flight: Option<Vec<Msg>> = None;
            let mut pending_dead: Option<Vec<i64>> = None;
            for action in actions {
                match action {
                    Action::Arrive(n) => {
                        pq.put_messages(msgs(next_offset..next_offset + n as i64));
                        next_offset += n as i64;
                    }
                    Action::Listener(code) => {
                        if pending_dead.is_some() {
                            prop_assert_eq!(st.next_batch(&mut pq, &NO_LOCK, &c, 0), BatchStep::Busy);
                            continue;
                        }
                        let batch = match in_flight.take() {
                            Some(b) => b,
                            None => match st.next_batch(&mut pq, &NO_LOCK, &c, 0) {
                                BatchStep::Consume(b) => b.to_vec(),
                                BatchStep::Idle => continue,
                                other => { prop_assert!(false, "unexpected {:?}", other); unreachable!() }
                            },
                        };
                        // Order: a batch is contiguous and starts at the first unfinished offset.
                        let first_unfinished = (committed..).find(|o| !done.contains(o)).unwrap();
                        prop_assert_eq!(batch[0].offset, first_unfinished);
                        for w in batch.windows(2) { prop_assert!(w[0].offset < w[1].offset); }
                        for m in &batch { prop_assert!(!done.contains(&m.offset)); }
                        let status = [OrderlyStatus::Success, SUSPEND, OrderlyStatus::Commit, OrderlyStatus::Rollback][code as usize];
                        let step = st.on_orderly_result(&mut pq, &batch, status, &context, &c, 0);
                        match step.next {
                            OrderlyNext::Continue | OrderlyNext::Yield => {
                                for m in &batch { done.insert(m.offset); }
                            }
                            OrderlyNext::SuspendFor(_) => {
                                for m in &batch { *failures.entry(m.offset).or_default() += 1; }
                            }
                            OrderlyNext::SendToDeadLetter(dead) => {
                                for d in &dead {
                                    let f = failures.get(&d.message.offset).copied().unwrap_or(0);
                                    prop_assert!(max.is_some_and(|mx| f >= mx), "dead-lettered only at the maximum");
                                    prop_assert_eq!(d.reconsume_times as u32, f);
                                }
                                for m in &batch {
                                    if !dead.iter().any(|d| d.message.offset == m.offset) {
                                        prop_assert!(max.is_none_or(|mx| failures.get(&m.offset).copied().unwrap_or(0) < mx));
                                    }
                                }
                                pending_dead = Some(batch.iter().map(|m| m.offset).collect());
                                in_flight = Some(batch.clone());
                                st_pending_check(&st)?;
                            }
                            OrderlyNext::Stop => prop_assert!(false, "not dropped"),
                        }
                        if let Some(offset) = step.commit_offset {
                            prop_assert!(offset >= committed);
                            prop_assert!((committed..offset).all(|o| done.contains(&o)));
                            committed = offset;
                        }
                        if pending_dead.is_none() { in_flight = None; }
                    }
                    Action::DeadLetterSends(results) => {
                        let (Some(batch), Some(_)) = (in_flight.take(), pending_dead.take()) else { continue };
                        let mut sent = Vec::new();
                        for (i, m) in batch.iter().enumerate() {
                            let is_dead = max.is_some_and(|mx| failures.get(&m.offset).copied().unwrap_or(0) >= mx);
                            if is_dead && results.get(i).copied().unwrap_or(true) {
                                sent.push(m.offset);
                            }
                        }
                        let step = st.on_dead_letter_result::<_, Msg>(&mut pq, &sent, &c, 0);
                        for o in &sent { done.insert(*o); }
                        match step.next {
                            OrderlyNext::Continue | OrderlyNext::Yield => {
                                for m in &batch { prop_assert!(done.contains(&m.offset)); }
                            }
                            OrderlyNext::SuspendFor(_) => {
                                for m in &batch {
                                    if !sent.contains(&m.offset) { *failures.entry(m.offset).or_default() += 1; }
                                }
                            }
                            other => { prop_assert!(false, "unexpected {:?}", other); }
                        }
                        if let Some(offset) = step.commit_offset {
                            prop_assert!(offset >= committed);
                            prop_assert!((committed..offset).all(|o| done.contains(&o)));
                            committed = offset;
                        }
                    }
                }
                for (offset, f) in &failures {
                    if !done.contains(offset) {
                        prop_assert_eq!(st.reconsume_times(&Msg { offset: *offset, times: 0 }), i32::try_from(*f).unwrap());
                    }
                }
            }
        }
    }

    fn st_pending_check(st: &OrderlyQueueState) -> Result<(), TestCaseError> {
        prop_assert!(st.is_in_flight());
        Ok(())
    }
}
