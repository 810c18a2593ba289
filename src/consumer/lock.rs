//! Broker queue locks of orderly clustering consumers (`LOCK_BATCH_MQ` / `UNLOCK_BATCH_MQ`).
//!
//! In clustering mode an orderly queue may only be consumed by the consumer holding its lock on
//! the broker, otherwise two consumers could interleave a queue during a rebalance. The rules
//! (Java `RebalanceImpl.lockAll`, `ProcessQueue.isLockExpired`) kept here:
//!
//! - a newly assigned queue is locked before its first pull ([`QueueLocks::add`] starts it
//!   unlocked, and [`super::flow::decide_pull`] waits for the lock);
//! - every [`PushConsumerConfig::lock_interval`] (20 s) all owned queues are locked again, one
//!   `LOCK_BATCH_MQ` per broker ([`QueueLocks::lock_requests`]);
//! - a lock not renewed for [`PushConsumerConfig::lock_max_live_time`] (30 s) is treated as
//!   lost, and the queue stops consuming until it is locked again (the broker itself expires
//!   locks after 60 s, so the client gives up well before another consumer can get it);
//! - a dropped queue is unlocked only after its in-flight batch finished and its offset was
//!   persisted ([`QueueDrop`]); shutdown unlocks everything ([`QueueLocks::unlock_requests`]).
//!
//! Broadcasting consumers own every queue alone and take no locks ([`needs_broker_lock`]).
//!
//! ```ignore
//! use std::time::Duration;
//! use rocketmq_actor::consumer::lock::QueueLocks;
//! use rocketmq_actor::MessageQueue;
//!
//! let live = Duration::from_secs(30);
//! let (q0, q1) = (MessageQueue::new("T", "broker-a", 0), MessageQueue::new("T", "broker-a", 1));
//! let mut locks = QueueLocks::new();
//! locks.add(q0.clone());
//! locks.add(q1.clone());
//! // One LOCK_BATCH_MQ to broker-a asking for both; the broker grants only q0.
//! let requests = locks.lock_requests();
//! assert_eq!(requests["broker-a"], vec![q0.clone(), q1.clone()]);
//! let changes = locks.apply_lock_response(&requests["broker-a"], &[q0.clone()], 1_000);
//! assert_eq!(changes.acquired, vec![q0.clone()]);
//! assert!(locks.is_held(&q0, 1_000, live) && !locks.is_held(&q1, 1_000, live));
//! // Not renewed for more than 30 s: no longer trusted.
//! assert!(!locks.is_held(&q0, 31_001, live));
//! ```

use crate::consumer::config::PushConsumerConfig;
use crate::message::MessageQueue;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Delay of the first `lock_all` after start (Java: 1 s), so heartbeats reach the brokers first.
pub const INITIAL_LOCK_DELAY: Duration = Duration::from_secs(1);
/// Timeout of `LOCK_BATCH_MQ` and `UNLOCK_BATCH_MQ` (Java: 1 s).
pub const LOCK_RPC_TIMEOUT: Duration = Duration::from_millis(1000);
/// A queue found unlocked (or lock-expired) when it was about to consume is locked on its own
/// after this delay (Java `tryLockLaterAndReconsume(.., 100)`).
pub const LOCK_RETRY_DELAY: Duration = Duration::from_millis(100);
/// After such a single-queue lock succeeded, consumption resumes after this delay.
pub const CONSUME_AFTER_LOCK_DELAY: Duration = Duration::from_millis(10);
/// After such a single-queue lock failed, it is tried again after this delay.
pub const LOCK_FAILED_RETRY_DELAY: Duration = Duration::from_millis(3000);

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Whether this consumer must hold broker locks: orderly consumption in clustering mode.
pub fn needs_broker_lock(cfg: &PushConsumerConfig) -> bool {
    cfg.is_orderly() && cfg.is_clustering()
}

/// Whether an orderly queue may hand messages to the listener now: always when broadcasting,
/// otherwise only while its lock is held and not older than `lock_max_live_time`.
pub fn lock_allows_consume(cfg: &PushConsumerConfig, lock: &LockState, now_ms: i64) -> bool {
    !cfg.is_clustering() || lock.is_held(now_ms, cfg.lock_max_live_time)
}

/// After the single-queue lock asked for by [`LOCK_RETRY_DELAY`]: how long until the queue
/// tries to consume again (10 ms when granted, 3 s when not).
pub fn delay_after_single_lock(granted: bool) -> Duration {
    if granted {
        CONSUME_AFTER_LOCK_DELAY
    } else {
        LOCK_FAILED_RETRY_DELAY
    }
}

/// Queues grouped by broker name, each group sorted: one `LOCK_BATCH_MQ`/`UNLOCK_BATCH_MQ`
/// per broker.
pub fn group_by_broker<'a>(
    queues: impl IntoIterator<Item = &'a MessageQueue>,
) -> BTreeMap<String, Vec<MessageQueue>> {
    let mut grouped: BTreeMap<String, BTreeSet<MessageQueue>> = BTreeMap::new();
    for mq in queues {
        grouped
            .entry(mq.broker_name.clone())
            .or_default()
            .insert(mq.clone());
    }
    grouped
        .into_iter()
        .map(|(broker, set)| (broker, set.into_iter().collect()))
        .collect()
}

/// The client's view of one queue's broker lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LockState {
    /// The last `LOCK_BATCH_MQ` covering the queue granted it.
    pub locked: bool,
    /// When the lock was last granted (epoch ms), if ever.
    pub last_lock_ms: Option<i64>,
}

impl LockState {
    /// Whether the last grant is older than `lock_max_live_time` (never granted counts as
    /// expired). The comparison is strict, as Java's: exactly 30 s old is still valid.
    pub fn is_expired(&self, now_ms: i64, lock_max_live_time: Duration) -> bool {
        match self.last_lock_ms {
            Some(at) => now_ms.saturating_sub(at) > millis(lock_max_live_time),
            None => true,
        }
    }

    /// Whether the queue may be consumed: locked and not expired.
    pub fn is_held(&self, now_ms: i64, lock_max_live_time: Duration) -> bool {
        self.locked && !self.is_expired(now_ms, lock_max_live_time)
    }
}

/// What a `LOCK_BATCH_MQ` response changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockChanges {
    /// Granted and not locked before: tell the queue (its `QueueCore` records the grant);
    /// its first pull re-reads the offset from the broker, since the previous owner may have
    /// moved it ([`super::flow::PullDecision::RecomputeOffset`]).
    pub acquired: Vec<MessageQueue>,
    /// Granted again while already locked: the lock clock restarts.
    pub renewed: Vec<MessageQueue>,
    /// Asked for, locked before, not granted now (another consumer holds it): the queue stops
    /// consuming (its `QueueCore` records the loss).
    pub lost: Vec<MessageQueue>,
}

/// The lock state of every queue an orderly clustering consumer owns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueLocks {
    queues: BTreeMap<MessageQueue, LockState>,
}

impl QueueLocks {
    /// No queues.
    pub fn new() -> Self {
        QueueLocks::default()
    }

    /// Starts tracking a newly assigned queue, unlocked. Returns false if already tracked
    /// (its state is kept).
    pub fn add(&mut self, mq: MessageQueue) -> bool {
        match self.queues.entry(mq) {
            std::collections::btree_map::Entry::Occupied(_) => false,
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(LockState::default());
                true
            }
        }
    }

    /// Stops tracking a queue (after it was unlocked, see [`QueueDrop`]).
    pub fn remove(&mut self, mq: &MessageQueue) -> Option<LockState> {
        self.queues.remove(mq)
    }

    /// Whether `mq` is tracked.
    pub fn contains(&self, mq: &MessageQueue) -> bool {
        self.queues.contains_key(mq)
    }

    /// Tracked queues.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Whether no queue is tracked.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// The lock state of `mq`.
    pub fn state(&self, mq: &MessageQueue) -> Option<LockState> {
        self.queues.get(mq).copied()
    }

    /// Whether `mq` is locked and the lock is not older than `lock_max_live_time`.
    pub fn is_held(&self, mq: &MessageQueue, now_ms: i64, lock_max_live_time: Duration) -> bool {
        self.queues
            .get(mq)
            .is_some_and(|s| s.is_held(now_ms, lock_max_live_time))
    }

    /// Every tracked queue with its state, in queue order.
    pub fn iter(&self) -> impl Iterator<Item = (&MessageQueue, LockState)> {
        self.queues.iter().map(|(mq, state)| (mq, *state))
    }

    /// The periodic re-lock: every tracked queue (locked or not), grouped by broker name.
    pub fn lock_requests(&self) -> BTreeMap<String, Vec<MessageQueue>> {
        group_by_broker(self.queues.keys())
    }

    /// Tracked queues whose lock is not held at `now_ms` (never granted, lost or expired),
    /// grouped by broker: the ones a rebalance should lock before pulling.
    pub fn missing_locks(
        &self,
        now_ms: i64,
        lock_max_live_time: Duration,
    ) -> BTreeMap<String, Vec<MessageQueue>> {
        group_by_broker(
            self.queues
                .iter()
                .filter(|(_, s)| !s.is_held(now_ms, lock_max_live_time))
                .map(|(mq, _)| mq),
        )
    }

    /// Applies a `LOCK_BATCH_MQ` answer: `requested` is what was sent to the broker, `granted`
    /// its `lockOKMQSet`. Granted queues are locked as of `now_ms`; requested ones not granted
    /// are unlocked. Queues not tracked (dropped meanwhile) or not requested are ignored.
    ///
    /// When the request itself failed (timeout, broker down) do not call this: nothing is
    /// known, and an unrenewed lock expires by itself after `lock_max_live_time`.
    pub fn apply_lock_response(
        &mut self,
        requested: &[MessageQueue],
        granted: &[MessageQueue],
        now_ms: i64,
    ) -> LockChanges {
        let granted: BTreeSet<&MessageQueue> = granted.iter().collect();
        let requested: BTreeSet<&MessageQueue> = requested.iter().collect();
        let mut changes = LockChanges::default();
        for mq in requested {
            let Some(state) = self.queues.get_mut(mq) else {
                continue;
            };
            if granted.contains(mq) {
                if state.locked {
                    changes.renewed.push(mq.clone());
                } else {
                    changes.acquired.push(mq.clone());
                }
                state.locked = true;
                state.last_lock_ms = Some(now_ms);
            } else {
                if state.locked {
                    changes.lost.push(mq.clone());
                }
                state.locked = false;
            }
        }
        changes
    }

    /// Shutdown: every queue believed locked, grouped by broker (expired ones included: the
    /// broker may still hold them for us).
    pub fn unlock_requests(&self) -> BTreeMap<String, Vec<MessageQueue>> {
        group_by_broker(
            self.queues
                .iter()
                .filter(|(_, s)| s.locked)
                .map(|(mq, _)| mq),
        )
    }

    /// Records that `UNLOCK_BATCH_MQ` was sent for these queues.
    pub fn mark_unlocked<'a>(&mut self, queues: impl IntoIterator<Item = &'a MessageQueue>) {
        for mq in queues {
            if let Some(state) = self.queues.get_mut(mq) {
                state.locked = false;
            }
        }
    }
}

/// Where a dropped orderly queue is in its release sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropPhase {
    /// A listener call is in flight: let it finish (its commit still counts, the lock is
    /// still ours), start nothing new.
    Draining,
    /// Persist the queue's offset (`UPDATE_CONSUMER_OFFSET`), then call
    /// [`QueueDrop::persisted`] whatever the result.
    Persisting,
    /// Send `UNLOCK_BATCH_MQ` for the queue (one-way), then call [`QueueDrop::unlocked`].
    Unlocking,
    /// Released: forget the queue.
    Done,
}

/// The release sequence of a queue taken away by a rebalance:
/// Draining → Persisting → Unlocking → Done.
///
/// The order matters: unlocking first would let the next owner start from an offset that
/// does not include the in-flight batch, so it would consume that batch a second time,
/// possibly at the same time as this consumer. Unlike Java (which stops waiting after 1 s and
/// retries the removal at the next rebalance), draining waits for the batch; a listener stuck
/// forever is bounded by the broker's own lock expiry (60 s without renewal).
///
/// ```ignore
/// use rocketmq_actor::consumer::lock::{DropPhase, QueueDrop};
/// let mut drop = QueueDrop::start(true, true);
/// assert_eq!(drop.phase(), DropPhase::Draining);
/// assert_eq!(drop.batch_finished(), DropPhase::Persisting);
/// assert_eq!(drop.persisted(), DropPhase::Unlocking);
/// assert_eq!(drop.unlocked(), DropPhase::Done);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDrop {
    phase: DropPhase,
    needs_unlock: bool,
}

impl QueueDrop {
    /// Starts releasing a queue: draining if a batch is in flight, else persisting at once.
    /// `needs_unlock` is [`needs_broker_lock`] (broadcasting and concurrent consumers hold no
    /// lock and finish after persisting).
    pub fn start(batch_in_flight: bool, needs_unlock: bool) -> Self {
        QueueDrop {
            phase: if batch_in_flight {
                DropPhase::Draining
            } else {
                DropPhase::Persisting
            },
            needs_unlock,
        }
    }

    /// The current phase.
    pub fn phase(&self) -> DropPhase {
        self.phase
    }

    /// The in-flight batch finished (and its commit offset was applied). Ignored in other
    /// phases.
    pub fn batch_finished(&mut self) -> DropPhase {
        if self.phase == DropPhase::Draining {
            self.phase = DropPhase::Persisting;
        }
        self.phase
    }

    /// The offset persistence was attempted. A failed persist still moves on to unlocking: the
    /// next owner then re-consumes from the last persisted offset (duplicates, in order),
    /// which beats leaving the queue unconsumed until the broker expires the lock.
    pub fn persisted(&mut self) -> DropPhase {
        if self.phase == DropPhase::Persisting {
            self.phase = if self.needs_unlock {
                DropPhase::Unlocking
            } else {
                DropPhase::Done
            };
        }
        self.phase
    }

    /// `UNLOCK_BATCH_MQ` was sent.
    pub fn unlocked(&mut self) -> DropPhase {
        if self.phase == DropPhase::Unlocking {
            self.phase = DropPhase::Done;
        }
        self.phase
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::config::{ConsumeMode, MessageModel};
    use proptest::prelude::*;

    fn mq(broker: &str, id: i32) -> MessageQueue {
        MessageQueue::new("T", broker, id)
    }

    const LIVE: Duration = Duration::from_secs(30);

    #[test]
    fn only_orderly_clustering_needs_locks() {
        let mut cfg = PushConsumerConfig::new("g");
        assert!(!needs_broker_lock(&cfg));
        cfg.consume_mode = ConsumeMode::Orderly;
        assert!(needs_broker_lock(&cfg));
        cfg.message_model = MessageModel::Broadcasting;
        assert!(!needs_broker_lock(&cfg));
    }

    #[test]
    fn one_lock_request_per_broker() {
        let mut locks = QueueLocks::new();
        for q in [mq("b", 1), mq("a", 2), mq("a", 0), mq("b", 0)] {
            assert!(locks.add(q));
        }
        assert!(!locks.add(mq("a", 0)));
        let requests = locks.lock_requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests["a"], vec![mq("a", 0), mq("a", 2)]);
        assert_eq!(requests["b"], vec![mq("b", 0), mq("b", 1)]);
    }

    #[test]
    fn new_queues_are_not_consumable_until_granted() {
        let mut locks = QueueLocks::new();
        locks.add(mq("a", 0));
        assert!(!locks.is_held(&mq("a", 0), 0, LIVE));
        assert_eq!(locks.missing_locks(0, LIVE)["a"], vec![mq("a", 0)]);
        let changes = locks.apply_lock_response(&[mq("a", 0)], &[mq("a", 0)], 5_000);
        assert_eq!(changes.acquired, vec![mq("a", 0)]);
        assert!(locks.is_held(&mq("a", 0), 5_000, LIVE));
        assert!(locks.missing_locks(5_000, LIVE).is_empty());
    }

    #[test]
    fn renewal_every_20s_keeps_the_lock_alive_and_a_missed_one_expires_it() {
        let mut locks = QueueLocks::new();
        let q = mq("a", 0);
        locks.add(q.clone());
        locks.apply_lock_response(std::slice::from_ref(&q), std::slice::from_ref(&q), 0);
        // Renewed at 20 s and 40 s: held throughout.
        for at in [20_000, 40_000] {
            assert!(locks.is_held(&q, at, LIVE));
            let c =
                locks.apply_lock_response(std::slice::from_ref(&q), std::slice::from_ref(&q), at);
            assert_eq!(c.renewed, vec![q.clone()]);
        }
        assert!(locks.is_held(&q, 70_000, LIVE));
        // The 60 s renewal failed (RPC error: nothing applied); 30 s after 40 s it expires.
        assert!(!locks.is_held(&q, 70_001, LIVE));
        assert_eq!(locks.missing_locks(70_001, LIVE)["a"], vec![q.clone()]);
        // Expired but still believed locked: shutdown still unlocks it.
        assert_eq!(locks.unlock_requests()["a"], vec![q]);
    }

    #[test]
    fn a_queue_locked_by_someone_else_is_lost() {
        let mut locks = QueueLocks::new();
        let (q0, q1) = (mq("a", 0), mq("a", 1));
        locks.add(q0.clone());
        locks.add(q1.clone());
        let both = [q0.clone(), q1.clone()];
        locks.apply_lock_response(&both, &both, 0);
        // The broker answers with a queue never asked for and without q1.
        let c = locks.apply_lock_response(&both, &[q0.clone(), mq("z", 9)], 1_000);
        assert_eq!(c.lost, vec![q1.clone()]);
        assert_eq!(c.renewed, vec![q0.clone()]);
        assert!(!locks.is_held(&q1, 1_000, LIVE));
        assert!(!locks.contains(&mq("z", 9)));
        assert_eq!(locks.unlock_requests()["a"], vec![q0]);
    }

    #[test]
    fn responses_for_dropped_queues_are_ignored() {
        let mut locks = QueueLocks::new();
        locks.add(mq("a", 0));
        assert!(locks.remove(&mq("a", 0)).is_some());
        let c = locks.apply_lock_response(&[mq("a", 0)], &[mq("a", 0)], 1);
        assert_eq!(c, LockChanges::default());
        assert!(locks.is_empty());
    }

    #[test]
    fn shutdown_unlocks_every_locked_queue_once() {
        let mut locks = QueueLocks::new();
        let qs = [mq("a", 0), mq("b", 0), mq("b", 1)];
        for q in &qs {
            locks.add(q.clone());
        }
        locks.apply_lock_response(&qs, &qs[..2], 0);
        let unlock = locks.unlock_requests();
        assert_eq!(unlock["a"], vec![mq("a", 0)]);
        assert_eq!(unlock["b"], vec![mq("b", 0)]);
        locks.mark_unlocked(unlock.values().flatten());
        assert!(locks.unlock_requests().is_empty());
    }

    #[test]
    fn broadcasting_consumes_without_a_lock() {
        let mut cfg = PushConsumerConfig {
            consume_mode: ConsumeMode::Orderly,
            ..PushConsumerConfig::new("g")
        };
        let mut lock = LockState::default();
        assert!(!lock_allows_consume(&cfg, &lock, 0));
        lock.locked = true;
        lock.last_lock_ms = Some(0);
        assert!(lock_allows_consume(&cfg, &lock, 30_000));
        assert!(!lock_allows_consume(&cfg, &lock, 30_001));
        cfg.message_model = MessageModel::Broadcasting;
        lock.locked = false;
        assert!(lock_allows_consume(&cfg, &lock, 30_001));
    }

    #[test]
    fn single_queue_relock_delays() {
        assert_eq!(delay_after_single_lock(true), Duration::from_millis(10));
        assert_eq!(delay_after_single_lock(false), Duration::from_secs(3));
    }

    #[test]
    fn drop_sequence_orders_drain_persist_unlock() {
        let mut d = QueueDrop::start(true, true);
        // Out-of-order signals do not skip a step.
        assert_eq!(d.persisted(), DropPhase::Draining);
        assert_eq!(d.unlocked(), DropPhase::Draining);
        assert_eq!(d.batch_finished(), DropPhase::Persisting);
        assert_eq!(d.unlocked(), DropPhase::Persisting);
        assert_eq!(d.persisted(), DropPhase::Unlocking);
        assert_eq!(d.unlocked(), DropPhase::Done);
        // Nothing in flight: persist straight away; no lock: done after persisting.
        let mut idle = QueueDrop::start(false, false);
        assert_eq!(idle.phase(), DropPhase::Persisting);
        assert_eq!(idle.persisted(), DropPhase::Done);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn lock_state_follows_the_last_answer(
            answers in proptest::collection::vec((proptest::collection::vec(any::<bool>(), 4), 0i64..40_000), 1..20)
        ) {
            let qs: Vec<MessageQueue> = (0..4).map(|i| mq(if i % 2 == 0 { "a" } else { "b" }, i)).collect();
            let mut locks = QueueLocks::new();
            for q in &qs { locks.add(q.clone()); }
            let mut now = 0i64;
            let mut last_grant: Vec<Option<i64>> = vec![None; 4];
            for (grants, step) in answers {
                now += step;
                let granted: Vec<MessageQueue> = qs.iter().zip(&grants).filter(|(_, g)| **g).map(|(q, _)| q.clone()).collect();
                let was: Vec<bool> = qs.iter().map(|q| locks.state(q).unwrap().locked).collect();
                let c = locks.apply_lock_response(&qs, &granted, now);
                for (i, q) in qs.iter().enumerate() {
                    if grants[i] { last_grant[i] = Some(now); }
                    prop_assert_eq!(c.acquired.contains(q), grants[i] && !was[i]);
                    prop_assert_eq!(c.renewed.contains(q), grants[i] && was[i]);
                    prop_assert_eq!(c.lost.contains(q), !grants[i] && was[i]);
                    let held = grants[i];
                    prop_assert_eq!(locks.is_held(q, now, LIVE), held);
                    // Held now means held for exactly 30 s more unless renewed.
                    prop_assert_eq!(locks.is_held(q, now + 30_000, LIVE), held);
                    prop_assert!(!locks.is_held(q, now + 30_001, LIVE));
                    prop_assert_eq!(locks.state(q).unwrap().last_lock_ms, last_grant[i]);
                }
            }
        }
    }
}
