//! The orderly half of the queue actor (`actors/queue.rs`): broker locks, one batch at a time
//! per queue, and key-ordered consumption. It is the same actor — these are more of its
//! methods — so ordering comes from the queue actor's mailbox: nothing else ever touches the
//! queue's cache, and no user-visible lock exists.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::actors::consumer::{now_ms, ConsumerShared};
use crate::actors::listener::OrderlyOutcome;
use crate::actors::offset_store::LoadOffset;
use crate::actors::queue::QueueActor;
use crate::consumer::queue_core::Mode;
use crate::consumer::lock::LOCK_RPC_TIMEOUT;
use crate::consumer::offset::StoredOffset;
use crate::consumer::orderly::{dead_letter_message, BatchStep, OrderlyNext, OrderlyStep};
use crate::consumer::process_queue::ProcessQueueSnapshot;
use crate::consumer::{OrderlyContext, OrderlyStatus};
use crate::error::Result;
use crate::message::{MessageExt, MessageQueue};

/// Asks the queue's broker for its lock. `Ok(false)` means another client holds it.
pub(crate) async fn lock_queue(shared: &ConsumerShared, queue: &MessageQueue) -> Result<bool> {
    let locked = shared
        .client
        .lock_batch(&shared.group, std::slice::from_ref(queue), LOCK_RPC_TIMEOUT)
        .await?;
    Ok(locked.contains(queue))
}

/// Releases the queue's broker lock.
pub(crate) async fn unlock_queue(shared: &ConsumerShared, queue: &MessageQueue) -> Result<()> {
    shared
        .client
        .unlock_batch(&shared.group, std::slice::from_ref(queue), LOCK_RPC_TIMEOUT)
        .await
}

impl QueueActor {
    fn set_locked(&mut self, locked: bool, now: i64) {
        let was_held = self.lock_held(now);
        self.core.lock.locked = locked;
        if locked {
            self.core.lock.last_lock_ms = Some(now);
        }
        if let Mode::Orderly { pq, .. } = &mut self.core.mode {
            pq.set_locked(locked, now);
        }
        if locked && !was_held && self.core.next_offset.is_some() {
            // Another client may have consumed while we did not hold the lock.
            self.core.offset_fixed = false;
        }
    }

    /// Locks the new queue, then computes its start offset and starts pulling; retries every
    /// `pull_delay_on_error` while another client holds the lock.
    pub(crate) fn lock_then_start(&mut self, ctx: &mut Context<Self>) {
        if self.core.dropping {
            return;
        }
        let shared = self.shared.clone();
        let queue = self.queue.clone();
        ctx.spawn(
            async move { lock_queue(&shared, &queue).await }
                .into_actor(self)
                .map(|result, act, ctx| match result {
                    Ok(true) => {
                        act.set_locked(true, now_ms());
                        act.load_start_offset(ctx);
                    }
                    other => {
                        if let Err(e) = other {
                            tracing::debug!(queue = %act.queue, error = %e, "lock request failed");
                        }
                        let retry = act.shared.config.pull_delay_on_error;
                        ctx.run_later(retry, |act, ctx| act.lock_then_start(ctx));
                    }
                }),
        );
    }

    /// Renews the lock (every `lock_interval`); a refused renewal stops consumption until a
    /// later renewal succeeds.
    pub(crate) fn renew_lock(&mut self, ctx: &mut Context<Self>) {
        if self.core.dropping || self.core.next_offset.is_none() {
            return;
        }
        let shared = self.shared.clone();
        let queue = self.queue.clone();
        ctx.spawn(
            async move { lock_queue(&shared, &queue).await }
                .into_actor(self)
                .map(|result, act, ctx| {
                    match result {
                        Ok(granted) => {
                            if !granted {
                                tracing::warn!(queue = %act.queue, "lock lost; consumption paused");
                            }
                            act.set_locked(granted, now_ms());
                        }
                        Err(e) => {
                            // Keep the last grant: it expires on its own after lock_max_live_time.
                            tracing::debug!(queue = %act.queue, error = %e, "lock renewal failed");
                        }
                    }
                    if !act.lock_held(now_ms()) {
                        let retry = act.shared.config.pull_delay_on_error;
                        ctx.run_later(retry, |act, ctx| act.renew_lock(ctx));
                    } else {
                        act.consume_ordered(ctx);
                    }
                }),
        );
    }

    /// Orderly, after the lock was regained: continue from the broker's stored offset if it is
    /// ahead of ours (someone else consumed meanwhile), dropping the cache.
    pub(crate) fn recompute_offset(&mut self, ctx: &mut Context<Self>) {
        let offsets = self.shared.offsets.clone();
        let queue = self.queue.clone();
        ctx.spawn(
            async move {
                offsets
                    .send(LoadOffset {
                        queue,
                        exact: false,
                    })
                    .await
            }
            .into_actor(self)
            .map(|stored, act, ctx| match stored {
                Ok(StoredOffset::Found(stored)) => {
                    let ours = act.core.committed.unwrap_or(stored);
                    let offset = stored.max(ours);
                    if act.core.next_offset != Some(offset) {
                        act.core.discard_cache();
                        act.core.next_offset = Some(offset);
                    }
                    act.core.offset_fixed = true;
                    act.pull(ctx);
                }
                Ok(StoredOffset::NotFound) => {
                    act.core.offset_fixed = true;
                    act.pull(ctx);
                }
                _ => {
                    let retry = act.shared.config.pull_delay_on_error;
                    let mut out = Vec::new();
                    act.core.schedule_pull(retry, &mut out);
                    act.execute(out, ctx);
                }
            }),
        );
    }

    pub(crate) fn snapshot(&self) -> ProcessQueueSnapshot {
        let commit = self.core.committed.unwrap_or(-1);
        let mut snapshot = match &self.core.mode {
            Mode::Concurrent { pq, .. } => pq.snapshot(commit),
            Mode::Orderly { pq, .. } => pq.snapshot(commit),
            Mode::KeyOrdered { queue } => {
                let stats = queue.cache_stats();
                ProcessQueueSnapshot {
                    commit_offset: commit,
                    cached_msg_count: stats.count as i64,
                    cached_msg_size_in_mib: (stats.body_bytes / (1024 * 1024)) as i64,
                    last_pull_timestamp: self.core.last_pull_ms,
                    ..Default::default()
                }
            }
        };
        snapshot.locked = self.core.lock.locked;
        snapshot.last_lock_timestamp = self.core.lock.last_lock_ms.unwrap_or(0);
        snapshot.dropped = self.core.dropping;
        snapshot
    }

    fn schedule_consume(&mut self, delay: Duration, ctx: &mut Context<Self>) {
        if self.consume_scheduled {
            return;
        }
        self.consume_scheduled = true;
        ctx.run_later(delay, |act, ctx| {
            act.consume_scheduled = false;
            act.consume_ordered(ctx);
        });
    }

    /// Starts whatever may run now: the next batch of an orderly queue, or every ready key of
    /// a key-ordered one.
    pub(crate) fn consume_ordered(&mut self, ctx: &mut Context<Self>) {
        if self.consume_scheduled {
            return;
        }
        match &self.core.mode {
            Mode::Orderly { .. } => self.consume_orderly_batch(ctx),
            Mode::KeyOrdered { .. } => self.consume_ready_keys(ctx),
            Mode::Concurrent { .. } => {}
        }
    }

    fn consume_orderly_batch(&mut self, ctx: &mut Context<Self>) {
        let now = now_ms();
        let config = &self.shared.config;
        let Mode::Orderly { pq, state } = &mut self.core.mode else {
            return;
        };
        match state.next_batch(pq, config, now) {
            BatchStep::Consume(mut batch) => {
                for message in &mut batch {
                    message.reconsume_times = state.reconsume_times(&*message);
                }
                let batch: Arc<[MessageExt]> = batch.into();
                self.run_orderly(batch, ctx);
            }
            BatchStep::NeedsLock => {
                let retry = self.shared.config.pull_delay_on_error;
                self.schedule_consume(retry, ctx);
            }
            BatchStep::Idle | BatchStep::Busy | BatchStep::Dropped => {}
        }
    }

    fn run_orderly(&mut self, batch: Arc<[MessageExt]>, ctx: &mut Context<Self>) {
        self.core.unsettled += 1;
        let epoch = self.core.epoch;
        let context = OrderlyContext::new(self.queue.clone(), &self.shared.config);
        let consumed = self
            .shared
            .dispatcher
            .consume_orderly(batch.clone(), context);
        ctx.spawn(consumed.into_actor(self).map(move |outcome, act, ctx| {
            if epoch == act.core.epoch {
                match &act.core.mode {
                    Mode::Orderly { .. } => act.on_orderly_batch(&batch, outcome, ctx),
                    Mode::KeyOrdered { .. } => act.on_key_message(&batch, outcome, ctx),
                    Mode::Concurrent { .. } => {}
                }
            }
            act.settle(ctx);
        }));
    }

    fn on_orderly_batch(
        &mut self,
        batch: &[MessageExt],
        outcome: OrderlyOutcome,
        ctx: &mut Context<Self>,
    ) {
        let now = now_ms();
        let config = &self.shared.config;
        let Mode::Orderly { pq, state } = &mut self.core.mode else {
            return;
        };
        let ok = matches!(
            outcome.status,
            OrderlyStatus::Success | OrderlyStatus::Commit
        );
        let step =
            state.on_orderly_result(pq, batch, outcome.status, &outcome.context, config, now);
        let failed = if ok { 0 } else { batch.len() };
        self.shared
            .stats
            .record_consumed(batch.len() - failed, failed, outcome.elapsed);
        self.apply_orderly_step(step, ctx);
    }

    fn apply_orderly_step(&mut self, step: OrderlyStep<MessageExt>, ctx: &mut Context<Self>) {
        if let Some(offset) = step.commit_offset {
            self.commit(offset, ctx);
        }
        match step.next {
            OrderlyNext::Continue => self.consume_ordered(ctx),
            // Re-queue behind the other queues: the dispatcher's permits are first come, first
            // served, so another queue's waiting batch runs before our next one.
            OrderlyNext::Yield => self.schedule_consume(Duration::ZERO, ctx),
            OrderlyNext::SuspendFor(delay) => self.schedule_consume(delay, ctx),
            OrderlyNext::SendToDeadLetter(letters) => {
                self.core.unsettled += 1;
                let shared = self.shared.clone();
                let epoch = self.core.epoch;
                let send = async move {
                    let mut sent = Vec::new();
                    for letter in letters {
                        let message = dead_letter_message(
                            &letter.message,
                            letter.reconsume_times,
                            &shared.config,
                        );
                        match shared.retry_producer.send(message).await {
                            Ok(_) => sent.push(letter.message.queue_offset),
                            Err(e) => {
                                tracing::warn!(offset = letter.message.queue_offset, error = %e, "dead-letter send failed; suspending")
                            }
                        }
                    }
                    sent
                };
                ctx.spawn(send.into_actor(self).map(move |sent, act, ctx| {
                    if epoch == act.core.epoch {
                        let now = now_ms();
                        let config = &act.shared.config;
                        if let Mode::Orderly { pq, state } = &mut act.core.mode {
                            let step = state.on_dead_letter_result(pq, &sent, config, now);
                            act.shared.stats.record_sent_back(sent.len());
                            act.apply_orderly_step(step, ctx);
                        }
                    }
                    act.settle(ctx);
                }));
            }
            OrderlyNext::Stop => {}
        }
        self.resume_pull_if_idle(ctx);
    }

    fn resume_pull_if_idle(&mut self, ctx: &mut Context<Self>) {
        if !self.core.dropping {
            self.pull(ctx);
        }
    }

    fn consume_ready_keys(&mut self, ctx: &mut Context<Self>) {
        if self.core.dropping {
            return;
        }
        let now = now_ms();
        if self.needs_lock() && !self.lock_held(now) {
            let retry = self.shared.config.pull_delay_on_error;
            self.schedule_consume(retry, ctx);
            return;
        }
        let limit = self.shared.config.effective_consume_concurrency() as usize;
        let Mode::KeyOrdered { queue } = &mut self.core.mode else {
            return;
        };
        let room = limit.saturating_sub(queue.in_flight_count());
        let ready: Vec<MessageExt> = queue
            .next_ready(room, now)
            .into_iter()
            .map(|mut message| {
                let failures = queue.failures(message.queue_offset).unwrap_or(0);
                message.reconsume_times = message
                    .reconsume_times
                    .saturating_add(i32::try_from(failures).unwrap_or(i32::MAX));
                message
            })
            .collect();
        let wakeup = queue.next_wakeup_ms(now);
        for message in ready {
            self.run_orderly(Arc::from(vec![message]), ctx);
        }
        if let Some(at) = wakeup {
            let delay = Duration::from_millis(at.saturating_sub(now).max(0) as u64);
            self.schedule_consume(delay, ctx);
        }
    }

    fn on_key_message(
        &mut self,
        batch: &[MessageExt],
        outcome: OrderlyOutcome,
        ctx: &mut Context<Self>,
    ) {
        let Some(message) = batch.first() else {
            return;
        };
        let offset = message.queue_offset;
        let now = now_ms();
        let ok = matches!(
            outcome.status,
            OrderlyStatus::Success | OrderlyStatus::Commit
        );
        self.shared
            .stats
            .record_consumed(usize::from(ok), usize::from(!ok), outcome.elapsed);
        let max = self.shared.config.effective_max_reconsume_times();
        let Mode::KeyOrdered { queue } = &mut self.core.mode else {
            return;
        };
        if ok {
            queue.complete(offset, true);
        } else if max
            .is_some_and(|max| message.reconsume_times >= i32::try_from(max).unwrap_or(i32::MAX))
        {
            // At the maximum: to the dead-letter queue, then the key moves on.
            self.core.unsettled += 1;
            let shared = self.shared.clone();
            let letter = dead_letter_message(message, message.reconsume_times, &shared.config);
            let epoch = self.core.epoch;
            let suspend = outcome.context.effective_suspend_time();
            ctx.spawn(
                async move { shared.retry_producer.send(letter).await.is_ok() }
                    .into_actor(self)
                    .map(move |sent, act, ctx| {
                        if epoch == act.core.epoch {
                            if let Mode::KeyOrdered { queue } = &mut act.core.mode {
                                if sent {
                                    queue.complete(offset, true);
                                    act.shared.stats.record_sent_back(1);
                                } else {
                                    queue.retry_at(offset, now_ms() + suspend.as_millis() as i64);
                                }
                            }
                            act.after_key_change(ctx);
                        }
                        act.settle(ctx);
                    }),
            );
            return;
        } else {
            let suspend = outcome.context.effective_suspend_time();
            queue.retry_at(offset, now + suspend.as_millis() as i64);
        }
        self.after_key_change(ctx);
    }

    fn after_key_change(&mut self, ctx: &mut Context<Self>) {
        if let Mode::KeyOrdered { queue } = &self.core.mode {
            if let Some(offset) = queue.committed_offset() {
                self.commit(offset, ctx);
            }
        }
        self.consume_ordered(ctx);
        self.resume_pull_if_idle(ctx);
    }
}
