//! The orderly half of the queue actor (`actors/queue.rs`): it carries out the lock, orderly
//! listener and dead-letter actions of the queue core (`consumer::queue_core`). It is the same
//! actor — these are more of its methods — so ordering comes from the queue actor's mailbox:
//! nothing else ever touches the queue's cache, and no user-visible lock exists.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tracing::Instrument;

use crate::actors::consumer::now_ms;
use crate::actors::consumer::ConsumerShared;
use crate::actors::listener::{
    park_pull, take_parked_pull, ChainEnd, Messages, OrderlyOutcome, PendingOrderly, PooledOrderly,
};
use crate::actors::offset_store::LoadOffset;
use crate::actors::queue::{Finished, QueueActor, ORDERLY_ROUNDS_PER_CLOCK_READ};
use crate::consumer::lock::LOCK_RPC_TIMEOUT;
use crate::consumer::offset::StoredOffset;
use crate::consumer::orderly::{dead_letter_message, DeadLetter};
use crate::consumer::process_queue::ProcessQueueSnapshot;
use crate::consumer::queue_core::{BatchSpan, Mode, OrderlyBatch, QueueAction, QueueEnv};
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

/// One queue's chain of orderly calls in one turn, as a closure listener's run loop sees it
/// (see [`ConsumeDispatcher::run_orderly_chain`](crate::actors::listener::ConsumeDispatcher::run_orderly_chain)):
/// each call's context, and what follows each call that finished at once.
pub(crate) struct OrderlyChain<'a> {
    actor: &'a mut QueueActor,
    epoch: u64,
    finished: &'a mut Finished,
}

// `#[inline]`: the run loop, compiled in the user's crate, calls these once per call.
impl OrderlyChain<'_> {
    /// The context of the next call, which counts against the turn's calls.
    #[inline]
    pub(crate) fn context(&mut self) -> OrderlyContext {
        let actor = &mut *self.actor;
        actor.orderly_calls_left = actor.orderly_calls_left.saturating_sub(1);
        OrderlyContext::new(actor.context_queue(), &actor.shared.config)
    }

    /// Readies `context`, which the chain's last call was lent, for the next call, which
    /// counts against the turn's calls: the defaults again, and the queue the user sees
    /// should the listener have changed it.
    #[inline]
    pub(crate) fn reset_lent(&mut self, context: &mut OrderlyContext) {
        let actor = &mut *self.actor;
        actor.orderly_calls_left = actor.orderly_calls_left.saturating_sub(1);
        context.auto_commit = true;
        context.suspend_time = actor.shared.config.suspend_current_queue_time;
        actor.restore_context_queue(&mut context.queue);
    }

    /// Takes back the context the chain's calls were lent, once the chain has ended (its
    /// queue serves a later context).
    #[inline]
    pub(crate) fn recycle(&mut self, context: OrderlyContext) {
        self.actor.recycle_queue(context.queue);
    }

    /// A call over the batch of `span` finished at once with `status`, leaving `context`,
    /// which the chain lends to its next call too: settled now when it succeeded (then the
    /// batch to call next, if the core has one ready), otherwise left for the round to settle
    /// with a copy of the context.
    #[inline]
    pub(crate) fn finished_lending_call(
        &mut self,
        span: BatchSpan,
        status: OrderlyStatus,
        context: &OrderlyContext,
    ) -> Option<Messages> {
        if !status.succeeded() || self.actor.orderly_calls_left == 0 {
            let outcome = OrderlyOutcome {
                status,
                context: context.clone(),
                elapsed: Duration::ZERO,
            };
            self.leave_to_round(span, outcome);
            return None;
        }
        self.actor
            .settle_at_once(span, self.epoch, status, context, self.finished)
            .map(Messages::from)
    }

    /// The call over the batch of `span` ended with `outcome` (a failure, a panic, or past
    /// the turn's calls) and ends the chain: the round settles it.
    pub(crate) fn leave_to_round(&mut self, span: BatchSpan, outcome: OrderlyOutcome) {
        let batch = self.batch_of(span);
        self.finished.orderly.push((batch, self.epoch, outcome));
    }

    /// The batch of the call over `span` that just ended or is under way, as the core handed
    /// it out: the run loop gives the batch itself to the call, and asks for it again only
    /// when a call fails, waits or panics (nothing has changed in the core since).
    pub(crate) fn batch_of(&self, span: BatchSpan) -> Messages {
        match self.actor.core.batch_in_flight(span, self.epoch) {
            Some(batch) => Messages::from(batch),
            None => {
                // Not reached: the core holds a batch until its call is settled.
                debug_assert!(false, "no batch in flight for {span:?}");
                Messages::from(OrderlyBatch::Owned(Arc::from([])))
            }
        }
    }
}

/// How many messages of an orderly call's batch failed: all of them unless it succeeded.
pub(crate) fn orderly_failures(batch: &[MessageExt], status: OrderlyStatus) -> usize {
    if status.succeeded() {
        0
    } else {
        batch.len()
    }
}

impl QueueActor {
    /// Sends a lock request and reports the answer to the core.
    pub(crate) fn request_lock(&mut self, ctx: &mut Context<Self>) {
        let shared = self.shared.clone();
        let queue = self.queue.clone();
        ctx.spawn(
            async move { lock_queue(&shared, &queue).await }
                .into_actor(self)
                .map(|result, act, ctx| {
                    act.step(ctx, |core, cfg, env, now, out| {
                        core.on_lock_result(result.map_err(|e| e.to_string()), cfg, env, now, out)
                    });
                }),
        );
    }

    /// Re-reads the stored offset for the core (the lock was regained).
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
            .map(|stored, act, ctx| {
                let stored = match stored {
                    Ok(found @ (StoredOffset::Found(_) | StoredOffset::NotFound)) => found,
                    _ => StoredOffset::Unavailable,
                };
                act.step(ctx, |core, cfg, env, now, out| {
                    core.on_recomputed_offset(stored, cfg, env, now, out)
                });
            }),
        );
    }

    pub(crate) fn snapshot(&self) -> ProcessQueueSnapshot {
        let core = &self.core;
        let commit = core.committed.unwrap_or(-1);
        let mut snapshot = match &core.mode {
            Mode::Concurrent { pq, .. } => pq.snapshot(commit),
            Mode::Orderly { pq, .. } => pq.snapshot(commit),
            Mode::KeyOrdered { queue } => {
                let stats = queue.cache_stats();
                ProcessQueueSnapshot {
                    commit_offset: commit,
                    cached_msg_count: stats.count as i64,
                    cached_msg_size_in_mib: (stats.body_bytes / (1024 * 1024)) as i64,
                    last_pull_timestamp: core.last_pull_ms,
                    ..Default::default()
                }
            }
        };
        snapshot.locked = core.lock.locked;
        snapshot.last_lock_timestamp = core.lock.last_lock_ms.unwrap_or(0);
        snapshot.last_pull_timestamp = core.last_pull_ms;
        snapshot.dropped = core.dropping;
        snapshot
    }

    /// Runs an orderly batch: at once when the listener finishes on its first poll (the
    /// outcome goes to `finished`, settled with the round), otherwise as a task of this actor.
    /// After [`ORDERLY_CALLS_PER_TURN`](crate::actors::queue::ORDERLY_CALLS_PER_TURN) calls at
    /// once in one turn (one [`QueueActor::execute`]) the next waits until the thread has run
    /// the others' tasks, so a queue with a deep cache does not keep the thread from them.
    pub(crate) fn run_orderly(
        &mut self,
        batch: OrderlyBatch,
        epoch: u64,
        ctx: &mut Context<Self>,
        finished: &mut Finished,
    ) {
        if self.orderly_calls_left == 0 {
            // A yield, not a zero-length timer: tokio's timer would hold the queue until its
            // next millisecond tick.
            ctx.spawn(
                tokio::task::yield_now()
                    .into_actor(self)
                    .map(move |(), act, ctx| {
                        let mut out = act.take_actions();
                        out.push(QueueAction::ConsumeOrderly { batch, epoch });
                        act.execute(out, ctx);
                    }),
            );
            return;
        }
        let shared = Rc::clone(&self.shared);
        let poolable = shared.dispatcher.poolable_orderly_listener();
        if let Some(listener) = poolable.filter(|listener| listener.pooled()) {
            self.hand_orderly_to_pool(listener, Messages::from(batch), epoch, ctx);
            return;
        }
        let run_started = finished.started();
        let mut chain = OrderlyChain {
            actor: self,
            epoch,
            finished,
        };
        let chained =
            shared
                .dispatcher
                .run_orderly_chain(Messages::from(batch), &mut chain, run_started);
        match chained {
            ChainEnd::Done => {}
            ChainEnd::Waiting(batch, pending) => self.spawn_orderly(batch, epoch, pending, ctx),
            ChainEnd::ToPool(batch) => match poolable {
                Some(listener) => self.hand_orderly_to_pool(listener, batch, epoch, ctx),
                // Only a poolable listener's chain ends so; should another, its call waits as
                // any other does.
                None => {
                    let context = OrderlyContext::new(self.context_queue(), &shared.config);
                    let pending = shared.dispatcher.consume_orderly(batch.clone(), context);
                    self.spawn_orderly(batch, epoch, Box::pin(pending), ctx);
                }
            },
        }
    }

    /// Hands an orderly call to `listener`'s consume threads; its outcome comes back as a
    /// [`PooledConsumed`](crate::actors::queue::PooledConsumed) message.
    fn hand_orderly_to_pool(
        &mut self,
        listener: &PooledOrderly,
        batch: Messages,
        epoch: u64,
        ctx: &mut Context<Self>,
    ) {
        let context = OrderlyContext::new(self.context_queue(), &self.shared.config);
        self.submit_pooled(listener, batch, context, epoch, ctx);
    }

    /// An orderly call that ran as a task of this actor, or on a consume thread, ended.
    pub(crate) fn on_orderly_consumed(
        &mut self,
        batch: Messages,
        epoch: u64,
        outcome: OrderlyOutcome,
        ctx: &mut Context<Self>,
    ) {
        let mut out = self.take_actions();
        let env = self.env();
        let failed = orderly_failures(&batch, outcome.status);
        self.shared
            .stats
            .record_consumed(batch.len() - failed, failed, outcome.elapsed);
        self.settle_orderly(&batch, epoch, outcome, &env, now_ms(), &mut out);
        self.execute(out, ctx);
    }

    /// Spawns an orderly call that did not finish at once; its outcome is settled when it ends.
    fn spawn_orderly(
        &mut self,
        batch: Messages,
        epoch: u64,
        pending: PendingOrderly,
        ctx: &mut Context<Self>,
    ) {
        let consumed = pending.instrument(tracing::Span::clone(&self.span));
        ctx.spawn(
            consumed
                .into_actor(self)
                .map(move |outcome, act, ctx| act.on_orderly_consumed(batch, epoch, outcome, ctx)),
        );
    }

    /// Settles an orderly call over the batch of `span` that succeeded at once leaving
    /// `context`, with calls left in the turn, and returns the queue's next call when the
    /// core lets it follow at once (the next batch, or the next message of the key:
    /// [`QueueCore::on_orderly_consumed_at_once`]). Failed calls, and calls past the turn's
    /// [`ORDERLY_CALLS_PER_TURN`](crate::actors::queue::ORDERLY_CALLS_PER_TURN), are left to
    /// the round instead ([`OrderlyChain::leave_to_round`]).
    ///
    /// [`QueueCore::on_orderly_consumed_at_once`]: crate::consumer::queue_core::QueueCore::on_orderly_consumed_at_once
    #[inline]
    fn settle_at_once(
        &mut self,
        span: BatchSpan,
        epoch: u64,
        status: OrderlyStatus,
        context: &OrderlyContext,
        finished: &mut Finished,
    ) -> Option<OrderlyBatch> {
        // A chain of calls reads the clock as a run of rounds does: the core's time is at most
        // that many calls old (it judges the broker's lock by it).
        if finished
            .chained
            .is_multiple_of(ORDERLY_ROUNDS_PER_CLOCK_READ as usize)
        {
            finished.now_ms = None;
        }
        let now = *finished.now_ms.get_or_insert_with(now_ms);
        let env = self.env();
        self.core.spare_pull = take_parked_pull();
        let next = self.core.on_orderly_consumed_at_once(
            span,
            epoch,
            status,
            context,
            &self.shared.config,
            &env,
            now,
            &mut finished.followups,
        );
        park_pull(self.core.spare_pull.take());
        finished.chained += 1;
        finished.chained_messages += span.len;
        next
    }

    /// Hands an orderly call's outcome to the core (the caller records it in the stats).
    pub(crate) fn settle_orderly(
        &mut self,
        batch: &[MessageExt],
        epoch: u64,
        outcome: OrderlyOutcome,
        env: &QueueEnv,
        now: i64,
        out: &mut Vec<QueueAction>,
    ) {
        self.core.on_orderly_consumed(
            batch,
            epoch,
            outcome.status,
            &outcome.context,
            &self.shared.config,
            env,
            now,
            out,
        );
        self.recycle_queue(outcome.context.queue);
    }

    /// Sends messages to the dead-letter queue and reports which sends succeeded.
    pub(crate) fn dead_letter(
        &mut self,
        letters: Vec<DeadLetter<MessageExt>>,
        epoch: u64,
        suspend: Duration,
        ctx: &mut Context<Self>,
    ) {
        let shared = self.shared.clone();
        let attempted: Vec<i64> = letters.iter().map(|l| l.message.queue_offset).collect();
        let send = async move {
            let mut sent = Vec::new();
            for letter in letters {
                // The listener saw the topic unwrapped; `RETRY_TOPIC` must carry the wire one.
                let wire = shared.namespace.wire_message(&letter.message);
                let message = dead_letter_message(&wire, letter.reconsume_times, &shared.config);
                match shared.retry_producer.send(message).await {
                    Ok(_) => sent.push(letter.message.queue_offset),
                    Err(e) => {
                        tracing::warn!(offset = letter.message.queue_offset, error = %e, "dead-letter send failed; suspending")
                    }
                }
            }
            sent
        }
        .instrument(tracing::Span::clone(&self.span));
        ctx.spawn(send.into_actor(self).map(move |sent, act, ctx| {
            if epoch == act.core.epoch {
                act.shared.stats.record_sent_back(sent.len());
                act.shared.stats.metrics.dead_lettered(sent.len());
            }
            act.step(ctx, |core, cfg, env, now, out| {
                core.on_dead_lettered(&attempted, &sent, epoch, suspend, cfg, env, now, out)
            });
        }));
    }
}
