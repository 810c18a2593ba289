//! The queue's decisions as a sans-I/O state machine: the pull loop, the broker lock, and the
//! consumption of every mode — concurrent (what goes to the listener, what is retried, which
//! offset is committed), orderly (one batch at a time, suspend, dead-letter) and key-ordered —
//! and when a dropped queue is finished.
//!
//! The queue actor (`actors/queue.rs`) and the simulator (`crate::sim`) both drive it: they
//! feed it events with the current time and carry out the [`QueueAction`]s it returns. It
//! owns the queue's state — the cache, the next pull offset, the committed offset, the broker
//! lock, the epoch that makes stale answers harmless — so nothing about one queue is kept twice.
//!
//! ```ignore
//! let mut core = QueueCore::new(Mode::concurrent(0), 0);
//! let mut out = Vec::new();
//! core.on_start_offset(Ok(5), &cfg, &env, 0, &mut out);
//! assert!(matches!(out[..], [QueueAction::Commit(5), QueueAction::Pull(PullOrder { offset: 5, .. })]));
//! ```

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::consumer::config::PushConsumerConfig;
use crate::consumer::flow::{
    decide_pull, on_pull_result, pull_error_delay, pull_request_flags, DelayReason, NextPull,
    OffsetUpdate, PullDecision, PullGate, PullResult, QueueThresholds, ACCESS_DENIED_DELAY,
    PAUSED_DELAY,
};
use crate::consumer::key_order::KeyOrderedQueue;
use crate::consumer::lock::{needs_broker_lock, LockState};
use crate::consumer::offset::StoredOffset;
use crate::consumer::orderly::{
    BatchStep, DeadLetter, OrderlyContext, OrderlyNext, OrderlyQueueState, OrderlyStatus,
    OrderlyStep,
};
use crate::consumer::process_queue::{CacheStats, CachedMessage, ProcessQueue};
use crate::consumer::pull_cache::PullCache;
use crate::consumer::retry::{
    self, failed_range, CONSUME_TIMEOUT_DELAY_LEVEL, LOCAL_RECONSUME_DELAY,
};
use crate::error::Error;
use crate::message::MessageExt;
use crate::protocol::codes::response_code;
use crate::rpc::PullResult as PullResponse;

/// Where to continue after a pull answer. One case differs from what the broker suggests: the
/// requested offset is past the queue's end while the queue still starts at 0 — the broker lost
/// its data (restarted without it) and the queue was refilled from 0. A 5.x broker then points at
/// its end, which would skip every message stored since; this consumer starts again at 0 (what
/// 4.x brokers suggested), so nothing produced after the loss is skipped.
fn corrected_next_offset(response: &PullResponse, requested: i64) -> i64 {
    let lost_data = response.status == crate::rpc::PullStatus::OffsetIllegal
        && requested > response.max_offset
        && response.min_offset == 0;
    if lost_data {
        0
    } else {
        response.next_begin_offset
    }
}

/// What the concurrent and orderly caches keep per message: what flow control and offsets
/// need, and where the message itself is — in the pull it came with (shared with its listener
/// calls, so a message is never moved or copied between the pull and the listener).
#[derive(Debug, Clone)]
pub(crate) struct CachedEntry {
    offset: i64,
    body_len: usize,
    batch: Arc<Vec<MessageExt>>,
    index: usize,
    /// Orderly: the count the listener sees (the broker's plus local suspends).
    reconsume_times: i32,
}

impl CachedEntry {
    /// Entries for every message of a pull.
    fn of_pull(batch: &Arc<Vec<MessageExt>>) -> impl Iterator<Item = CachedEntry> + '_ {
        batch.iter().enumerate().map(|(index, m)| CachedEntry {
            offset: m.queue_offset,
            body_len: m.body().len(),
            batch: batch.clone(),
            index,
            reconsume_times: m.reconsume_times,
        })
    }

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

    fn reconsume_times(&self) -> i32 {
        self.reconsume_times
    }

    fn set_reconsume_times(&mut self, times: i32) {
        self.reconsume_times = times;
    }
}

/// The messages of one orderly listener call.
#[derive(Debug, Clone)]
pub(crate) enum OrderlyBatch {
    /// `messages[range]` of one pull, shared with the cache: the usual batch, whose messages
    /// follow each other in one pull and carry the broker's reconsume counts.
    Pull {
        /// The pull's messages.
        messages: Arc<Vec<MessageExt>>,
        /// The batch's part of them.
        range: Range<usize>,
    },
    /// Messages of their own: a key-ordered message, or a batch that spans pulls or carries
    /// local reconsume counts (copies of the cached messages).
    Owned(Arc<[MessageExt]>),
}

/// A count on `pull` for a batch: `spare`'s when it counts on `pull` (taking it), otherwise a
/// new one (leaving `spare` as it is). Taking over a count another owner gave up costs no
/// atomic operation, where counting the pull up (and that owner's count down) costs two.
#[inline]
pub(crate) fn share_of(
    pull: &Arc<Vec<MessageExt>>,
    spare: &mut Option<Arc<Vec<MessageExt>>>,
) -> Arc<Vec<MessageExt>> {
    match spare.take() {
        Some(share) if Arc::ptr_eq(&share, pull) => share,
        other => {
            *spare = other;
            pull.clone()
        }
    }
}

impl OrderlyBatch {
    /// The batch of the one cached message `entry`, which the listener sees with
    /// `reconsume_times`: a range of its pull when that is the count the pull carries,
    /// otherwise a copy with the count set. (Built from the cache's entry rather than a copy
    /// of it: the pull's count of owners is the costly part of handing out a message, so it is
    /// taken once.)
    #[inline]
    fn of_entry(
        entry: &CachedEntry,
        reconsume_times: i32,
        spare: &mut Option<Arc<Vec<MessageExt>>>,
    ) -> Self {
        match entry.message() {
            Some(message) if message.reconsume_times == reconsume_times => OrderlyBatch::Pull {
                messages: share_of(&entry.batch, spare),
                range: entry.index..entry.index + 1,
            },
            Some(message) => {
                let mut copy = message.clone();
                copy.reconsume_times = reconsume_times;
                OrderlyBatch::Owned(Arc::from([copy]))
            }
            None => OrderlyBatch::Owned(Arc::from([])),
        }
    }

    /// The batch of cache `entries` (in offset order): a range of their pull when they are
    /// one, otherwise copies with their reconsume counts set.
    fn of_entries(entries: &[CachedEntry], spare: &mut Option<Arc<Vec<MessageExt>>>) -> Self {
        // The usual orderly batch: one message.
        if let [entry] = entries {
            return OrderlyBatch::of_entry(entry, entry.reconsume_times, spare);
        }
        if let Some(first) = entries.first() {
            let in_one_pull = entries.iter().enumerate().all(|(i, entry)| {
                Arc::ptr_eq(&entry.batch, &first.batch)
                    && entry.index == first.index + i
                    && entry
                        .message()
                        .is_some_and(|m| m.reconsume_times == entry.reconsume_times)
            });
            if in_one_pull {
                return OrderlyBatch::Pull {
                    messages: share_of(&first.batch, spare),
                    range: first.index..first.index + entries.len(),
                };
            }
        }
        OrderlyBatch::Owned(
            entries
                .iter()
                .filter_map(|entry| {
                    let mut message = entry.message()?.clone();
                    message.reconsume_times = entry.reconsume_times;
                    Some(message)
                })
                .collect(),
        )
    }
}

/// Which messages an orderly call over a batch the core handed out is consuming: the batch's
/// first offset and length. The core keeps a batch it handed out until the call is settled,
/// so this is enough to settle a call that succeeded, and to rebuild the batch
/// ([`QueueCore::batch_in_flight`]) while nothing has changed since: a caller need not keep a
/// handle on the batch (a count of owners of its pull) through every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchSpan {
    /// The batch's first queue offset (`-1` for an empty batch).
    pub(crate) first_offset: i64,
    /// How many messages the batch has.
    pub(crate) len: usize,
}

impl BatchSpan {
    /// The span of `batch`.
    #[inline]
    pub(crate) fn of(batch: &[MessageExt]) -> Self {
        BatchSpan {
            first_offset: batch.first().map_or(-1, |m| m.queue_offset),
            len: batch.len(),
        }
    }
}

impl std::ops::Deref for OrderlyBatch {
    type Target = [MessageExt];

    fn deref(&self) -> &[MessageExt] {
        match self {
            OrderlyBatch::Pull { messages, range } => {
                messages.get(range.clone()).unwrap_or_default()
            }
            OrderlyBatch::Owned(messages) => messages,
        }
    }
}

/// How the queue's messages are consumed; each mode keeps the cache it needs.
pub(crate) enum Mode {
    /// Every batch goes to the listener at once; the cache keeps each pull with a bit per
    /// message still unfinished.
    Concurrent {
        /// Unfinished messages, kept per pull.
        pq: PullCache,
        /// Offsets already sent back because their consumption timed out.
        timed_out: HashSet<i64>,
    },
    /// One batch at a time, in offset order.
    Orderly {
        /// Unfinished messages: offsets, body sizes, reconsume counts and where each
        /// message is.
        pq: ProcessQueue<CachedEntry>,
        /// Batch in flight, reconsume counts, dead-lettering, run time.
        state: OrderlyQueueState,
    },
    /// Strictly ordered per key, concurrent across keys.
    KeyOrdered {
        /// Unfinished messages (entries pointing into their pull), chained per key.
        queue: KeyOrderedQueue<CachedEntry>,
    },
}

impl Mode {
    /// The mode `cfg` asks for, with an empty cache.
    pub(crate) fn for_config(cfg: &PushConsumerConfig, now_ms: i64) -> Self {
        if cfg.is_key_ordered() {
            Mode::KeyOrdered {
                queue: KeyOrderedQueue::new(),
            }
        } else if cfg.is_orderly() {
            Mode::Orderly {
                pq: ProcessQueue::new(now_ms),
                state: OrderlyQueueState::new(),
            }
        } else {
            Mode::Concurrent {
                pq: PullCache::new(now_ms),
                timed_out: HashSet::new(),
            }
        }
    }
}

/// What the queue needs to know of its consumer when it decides to pull.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueEnv {
    /// The consumer is started and not shutting down.
    pub running: bool,
    /// The user suspended the consumer.
    pub paused: bool,
    /// Per-queue cache limits (topic-level limits divided over the owned queues).
    pub thresholds: QueueThresholds,
    /// The consumer subscribes to the queue's topic.
    pub has_subscription: bool,
}

/// A pull the executor must send: the variable parts of the PULL_MESSAGE request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PullOrder {
    /// Offset to pull from.
    pub offset: i64,
    /// Committed offset piggybacked on the pull (Java's commitOffset flag).
    pub commit_offset: Option<i64>,
    /// Send the subscription expression along (Java's subscription flag).
    pub send_subscription: bool,
    /// How long the broker may hold the pull.
    pub suspend: Duration,
    /// Request timeout (longer than `suspend`).
    pub timeout: Duration,
    /// Broker id to pull from (what the last answer suggested).
    pub broker_id: i64,
    /// Answer with this epoch (see [`QueueCore::on_pull_answer`]).
    pub epoch: u64,
    /// Which pull of this queue it is: only the answer to the pull in flight counts.
    pub id: u64,
}

/// Something worth a log line; the core decides, the executor writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum QueueNote {
    /// A broker refused a pull for authentication or permission (retried in 30 s).
    AccessDenied(String),
    /// A pull went through after a refusal.
    AccessGranted,
    /// The broker answered offsets below the request.
    Suspicious {
        /// Requested offset.
        requested: i64,
        /// `nextBeginOffset` of the answer.
        next: i64,
    },
    /// The broker moved the offset (out of range, or reset server-side); the cache was dropped.
    OffsetMoved {
        /// Requested offset.
        requested: i64,
        /// Adopted offset.
        offset: i64,
    },
    /// Broadcasting has no retry topic: these failed messages are only logged.
    BroadcastFailuresDropped(Vec<i64>),
    /// Send-back failed; the messages are consumed again locally after 5 s.
    SendBackFailed(usize),
    /// Consumption of these messages timed out; they are being sent back.
    ConsumeTimedOut(usize),
    /// A pull failed.
    PullFailed {
        /// Why.
        error: String,
        /// Delay before the next pull.
        reason: DelayReason,
    },
    /// The start offset could not be computed (retried after `pull_delay_on_error`).
    StartOffsetFailed(String),
    /// A lock request failed (retried, or the last grant kept until it expires).
    LockFailed(String),
    /// The broker refused to renew the lock: consumption pauses until it is granted again.
    LockLost,
}

/// What the executor must do after a core call.
#[derive(Debug, Clone)]
pub(crate) enum QueueAction {
    /// Compute the start offset (stored offset + `consume_from_where`), after the delay, and
    /// report it with [`QueueCore::on_start_offset`].
    LoadStartOffset(Duration),
    /// Send a pull now; answer with [`QueueCore::on_pull_answer`]. (Boxed, as the rare
    /// variants are, so that the actions of a pull's listener calls stay small.)
    Pull(Box<PullOrder>),
    /// Call [`QueueCore::on_pull_timer`] after the delay.
    PullAfter(Duration),
    /// Ask the queue's broker for its lock; answer with [`QueueCore::on_lock_result`].
    Lock,
    /// Call [`QueueCore::on_lock_timer`] after the delay.
    LockAfter(Duration),
    /// Orderly: re-read the stored offset (the lock was regained); answer with
    /// [`QueueCore::on_recomputed_offset`].
    RecomputeOffset,
    /// Orderly and key-ordered: call the orderly listener with `batch`; answer with
    /// [`QueueCore::on_orderly_consumed`].
    ConsumeOrderly {
        /// The messages, in offset order (one message in key-ordered mode).
        batch: OrderlyBatch,
        /// Epoch to answer with.
        epoch: u64,
    },
    /// Call [`QueueCore::on_consume_timer`] after the delay.
    ConsumeAfter(Duration),
    /// Key-ordered: call [`QueueCore::on_key_wake_timer`] with `due_ms` after `delay` (a paused
    /// key is due then; each pause has a wake-up of its own).
    WakeKeysAfter {
        /// How long to wait.
        delay: Duration,
        /// When the paused key is due (the core's clock).
        due_ms: i64,
    },
    /// Send these messages to the dead-letter queue; answer with
    /// [`QueueCore::on_dead_lettered`].
    DeadLetter {
        /// Messages and their reconsume counts.
        letters: Vec<DeadLetter<MessageExt>>,
        /// Epoch to answer with.
        epoch: u64,
        /// Key-ordered: how long a message whose send failed waits before it is retried.
        suspend: Duration,
    },
    /// Concurrent: call the listener with `messages` in consecutive calls of at most
    /// `batch_size` ([`CallRanges`]), in order; answer each call with
    /// [`QueueCore::on_consumed`] (or [`QueueCore::on_consumed_all`]). One action stands for
    /// every call of a pull, so the calls share `messages` and the runtime can run them
    /// together.
    Consume {
        /// The messages of one pull.
        messages: Arc<Vec<MessageExt>>,
        /// The most messages one call gets (at least 1).
        batch_size: usize,
        /// Epoch to answer with.
        epoch: u64,
    },
    /// Send these messages back for redelivery; answer with [`QueueCore::on_sent_back`].
    SendBack {
        /// Messages to send back.
        messages: Vec<MessageExt>,
        /// Delay level asked for (0 = by reconsume count).
        delay_level: i32,
        /// Epoch to answer with.
        epoch: u64,
    },
    /// Call [`QueueCore::on_reconsume_timer`] with the messages after the delay.
    ReconsumeAfter {
        /// Messages to consume again.
        messages: Vec<MessageExt>,
        /// Delay.
        delay: Duration,
        /// Epoch to answer with.
        epoch: u64,
    },
    /// The broker does not know the consumer (it restarted, or has not had a heartbeat yet):
    /// heartbeat now rather than at the next interval (the executor coalesces requests).
    Heartbeat,
    /// The queue's broker could not be reached: read the topic's route again now (a restarted
    /// broker may listen elsewhere) rather than at the next 30 s refresh (coalesced too).
    RefreshRoute,
    /// The committed offset rose: tell the offset store (increase-only).
    Commit(i64),
    /// The broker moved the offset: set it in the offset store whatever it was.
    AdoptOffset(i64),
    /// The dropped queue has settled: persist `committed`, remove the queue from the offset
    /// store, release the broker lock if `unlock`, then stop.
    Finish {
        /// The committed offset to persist.
        committed: Option<i64>,
        /// The queue holds its broker lock.
        unlock: bool,
    },
    /// Worth a log line.
    Note(Box<QueueNote>),
}

/// Concurrent listener calls that ended: one call, or several over consecutive messages of
/// one pull that ended alike (all succeeded).
#[derive(Debug, Clone)]
pub(crate) struct EndedCalls<'m> {
    /// Their messages.
    pub batch: &'m [MessageExt],
    /// Where the messages lie in their pull, when they were handed out as part of one.
    pub part: Option<PullPart<'m>>,
    /// How many listener calls the entry stands for (each settles).
    pub calls: usize,
    /// The epoch the calls were made in.
    pub epoch: u64,
    /// How they ended.
    pub outcome: CallOutcome,
}

/// Where a concurrent listener call's messages lie in the pull they were cut from.
#[derive(Debug, Clone)]
pub(crate) struct PullPart<'m> {
    /// The pull, as the queue cached it.
    pub pull: &'m Arc<Vec<MessageExt>>,
    /// The call's messages in it.
    pub range: Range<usize>,
}

/// Removes the messages of `part` from the cache; when its pull is no longer cached (every
/// message of it had left, or it is a redelivered copy), their offsets go to `done` to be
/// removed by offset. Returns whether the pull was cached.
fn remove_pull_part(
    pq: &mut PullCache,
    part: &PullPart<'_>,
    done: &mut Vec<i64>,
    now_ms: i64,
) -> bool {
    if pq.remove_part(part.pull, part.range.clone(), now_ms) {
        return true;
    }
    let messages = part.pull.get(part.range.clone()).unwrap_or_default();
    done.extend(messages.iter().map(|m| m.queue_offset));
    false
}

/// The listener calls of a [`QueueAction::Consume`]: `0..len` cut into consecutive ranges of
/// at most `batch_size`.
#[derive(Debug, Clone)]
pub(crate) struct CallRanges {
    next: usize,
    len: usize,
    batch_size: usize,
}

impl CallRanges {
    /// The calls for `len` messages in batches of at most `batch_size` (at least 1).
    pub(crate) fn new(len: usize, batch_size: usize) -> Self {
        CallRanges {
            next: 0,
            len,
            batch_size: batch_size.max(1),
        }
    }
}

impl Iterator for CallRanges {
    type Item = Range<usize>;

    #[inline]
    fn next(&mut self) -> Option<Range<usize>> {
        if self.next >= self.len {
            return None;
        }
        let start = self.next;
        self.next = start.saturating_add(self.batch_size).min(self.len);
        Some(start..self.next)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.len - self.next.min(self.len)).div_ceil(self.batch_size);
        (left, Some(left))
    }
}

impl ExactSizeIterator for CallRanges {}

impl QueueAction {
    fn note(note: QueueNote) -> Self {
        QueueAction::Note(Box::new(note))
    }
}

/// Outcome of one concurrent listener call, as the core needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallOutcome {
    /// The listener returned success.
    pub success: bool,
    /// With success, messages `0..=ack_index` succeeded and the rest failed.
    pub ack_index: Option<usize>,
    /// Delay level the listener asked for its failures (0 = by reconsume count).
    pub delay_level: i32,
}

/// Pulled messages just cached, to be consumed once the next pull is decided.
enum Delivered {
    /// A concurrent queue's pull, for [`QueueCore::dispatch`].
    Concurrent(Arc<Vec<MessageExt>>),
    /// An orderly or key-ordered queue has new messages for [`QueueCore::consume_ordered`].
    Ordered,
}

/// One owned queue's state and decisions.
pub(crate) struct QueueCore {
    /// The cache of the consume mode.
    pub(crate) mode: Mode,
    /// The broker lock (orderly clustering only).
    pub(crate) lock: LockState,
    /// Orderly: the offset was re-read from the broker since the lock was (re)gained.
    pub(crate) offset_fixed: bool,
    /// Offset of the next pull; `None` until the start offset is known.
    pub(crate) next_offset: Option<i64>,
    /// The next offset of the last pull answer: below it every message was delivered or
    /// filtered out, so once the cache empties the consume offset is at least this (a
    /// filtered tail is committed without waiting for the next answer, which a long poll
    /// holds up to 15 s).
    passed_over: Option<i64>,
    /// The committed offset: the smallest unfinished message, or where consumption stands.
    pub(crate) committed: Option<i64>,
    /// Bumped whenever the cache is thrown away, so answers to older pulls and consume
    /// outcomes of older messages are ignored.
    pub(crate) epoch: u64,
    /// Listener calls and send-backs not yet settled.
    pub(crate) unsettled: usize,
    /// The queue is being dropped.
    pub(crate) dropping: bool,
    /// The broker id the last pull answer suggested (0 = master).
    pub(crate) pull_from_broker_id: i64,
    /// When the last pull was sent.
    pub(crate) last_pull_ms: i64,
    /// Orderly: a consume pass is scheduled (suspend, lock retry), so new messages wait for it.
    /// Key-ordered: a pass is scheduled for when the broker's lock may be back.
    consume_scheduled: bool,
    /// The start offset was asked for (after the first lock, when one is needed).
    start_requested: bool,
    /// The id of the pull in flight, if one is.
    pull_in_flight: Option<u64>,
    next_pull_id: u64,
    pull_scheduled: bool,
    last_activity_ms: i64,
    /// The last pull was refused for authentication or permission.
    access_denied: bool,
    finished: bool,
    /// The offsets of succeeded calls, collected before they leave the cache together (kept
    /// between rounds so a round of calls allocates nothing).
    done_offsets: Vec<i64>,
    /// Key-ordered: the messages that may run now (kept between calls, allocating nothing).
    ready_buffer: Vec<OrderlyBatch>,
    /// A count on a pull that the executor hands back between orderly calls (the batch of the
    /// call that just ended, no longer needed): the next batch of that pull takes it over
    /// instead of counting the pull up (an atomic operation, and another when the call's
    /// batch is dropped). The executor takes back what is left, so the core never keeps a
    /// pull by it.
    pub(crate) spare_pull: Option<Arc<Vec<MessageExt>>>,
}

impl QueueCore {
    /// A queue that has not yet looked up its start offset.
    pub(crate) fn new(mode: Mode, now_ms: i64) -> Self {
        QueueCore {
            mode,
            lock: LockState::default(),
            offset_fixed: true,
            next_offset: None,
            passed_over: None,
            committed: None,
            epoch: 0,
            unsettled: 0,
            dropping: false,
            pull_from_broker_id: 0,
            last_pull_ms: now_ms,
            consume_scheduled: false,
            start_requested: false,
            pull_in_flight: None,
            next_pull_id: 0,
            pull_scheduled: false,
            last_activity_ms: now_ms,
            access_denied: false,
            finished: false,
            done_offsets: Vec::new(),
            ready_buffer: Vec::new(),
            spare_pull: None,
        }
    }

    /// A one-line account of the state, for simulator traces.
    #[cfg(all(test, feature = "embedded"))]
    pub(crate) fn summary(&self) -> String {
        let mode = match &self.mode {
            Mode::Concurrent { pq, .. } => {
                format!("concurrent cached={}", pq.cache_stats().count)
            }
            Mode::Orderly { pq, state } => format!(
                "orderly cached={} consuming={} in_flight={}",
                pq.cached_count(),
                pq.consuming_count(),
                state.is_in_flight(),
            ),
            Mode::KeyOrdered { queue } => format!(
                "key-ordered cached={} in_flight={}",
                queue.len(),
                queue.in_flight_count()
            ),
        };
        format!(
            "{mode} next={:?} committed={:?} epoch={} unsettled={} lock={:?} fixed={} scheduled={} pull={:?}/{} dropping={}",
            self.next_offset,
            self.committed,
            self.epoch,
            self.unsettled,
            self.lock,
            self.offset_fixed,
            self.consume_scheduled,
            self.pull_in_flight,
            self.pull_scheduled,
            self.dropping
        )
    }

    /// The cache's size.
    pub(crate) fn cache_stats(&self) -> CacheStats {
        match &self.mode {
            Mode::Concurrent { pq, .. } => pq.cache_stats(),
            Mode::Orderly { pq, .. } => pq.cache_stats(),
            Mode::KeyOrdered { queue } => queue.cache_stats(),
        }
    }

    /// The cached messages and their body bytes: [`QueueCore::cache_stats`] without the
    /// offset span, which takes a look at both ends of the cache (for the gauges, read after
    /// every step, and the pull answer's check for an empty cache).
    pub(crate) fn cached_amount(&self) -> (u64, u64) {
        match &self.mode {
            Mode::Concurrent { pq, .. } => pq.cached_amount(),
            Mode::Orderly { pq, .. } => (pq.cached_count() as u64, pq.cached_body_bytes()),
            Mode::KeyOrdered { queue } => queue.cached_amount(),
        }
    }

    /// Whether the pull loop showed no activity for `pull_max_idle_time` (the rebalancer
    /// restarts such a queue).
    pub(crate) fn is_stalled(&self, cfg: &PushConsumerConfig, now_ms: i64) -> bool {
        let idle =
            Duration::from_millis(now_ms.saturating_sub(self.last_activity_ms).max(0) as u64);
        self.next_offset.is_some() && self.pull_in_flight.is_none() && idle > cfg.pull_max_idle_time
    }

    /// Whether the queue holds a valid broker lock (or needs none).
    pub(crate) fn may_consume(&self, cfg: &PushConsumerConfig, now_ms: i64) -> bool {
        !needs_broker_lock(cfg) || self.lock.is_held(now_ms, cfg.lock_max_live_time)
    }

    /// The start offset was computed (`Ok`), or could not be (`Err`, retried later).
    pub(crate) fn on_start_offset(
        &mut self,
        result: Result<i64, String>,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        match result {
            Ok(offset) if offset >= 0 => {
                self.next_offset = Some(offset);
                self.passed_over = None;
                self.offset_fixed = true;
                // Record the start so a restart resumes here even if nothing is consumed.
                self.commit(offset, out);
                self.pull(cfg, env, now_ms, out);
            }
            Ok(offset) => {
                out.push(QueueAction::note(QueueNote::StartOffsetFailed(format!(
                    "negative start offset {offset}"
                ))));
                out.push(QueueAction::LoadStartOffset(cfg.pull_delay_on_error));
            }
            Err(e) => {
                out.push(QueueAction::note(QueueNote::StartOffsetFailed(e)));
                out.push(QueueAction::LoadStartOffset(cfg.pull_delay_on_error));
            }
        }
    }

    /// Pulls after `delay` (unless a pull is out or already scheduled).
    pub(crate) fn schedule_pull(&mut self, delay: Duration, out: &mut Vec<QueueAction>) {
        if self.pull_scheduled || self.pull_in_flight.is_some() {
            return;
        }
        self.pull_scheduled = true;
        out.push(QueueAction::PullAfter(delay));
    }

    /// The delay of a [`QueueAction::PullAfter`] ended.
    pub(crate) fn on_pull_timer(
        &mut self,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        self.pull_scheduled = false;
        self.pull(cfg, env, now_ms, out);
    }

    /// Pulls if flow control allows, or schedules the next try.
    pub(crate) fn pull(
        &mut self,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        let Some(offset) = self.next_offset else {
            return;
        };
        if self.pull_in_flight.is_some() {
            return;
        }
        self.last_activity_ms = now_ms;
        let gate = PullGate {
            dropped: self.dropping,
            running: env.running,
            paused: env.paused,
            cache: self.cache_stats(),
            locked: self.may_consume(cfg, now_ms),
            offset_fixed_since_lock: self.offset_fixed,
            has_subscription: env.has_subscription,
        };
        match decide_pull(cfg, &env.thresholds, &gate) {
            PullDecision::Stop => return,
            PullDecision::Delay(delay, _) => {
                self.schedule_pull(delay, out);
                return;
            }
            PullDecision::RecomputeOffset => {
                out.push(QueueAction::RecomputeOffset);
                return;
            }
            PullDecision::PullNow => {}
        }
        self.last_pull_ms = now_ms;
        let flags = pull_request_flags(cfg, self.committed);
        self.next_pull_id += 1;
        self.pull_in_flight = Some(self.next_pull_id);
        out.push(QueueAction::Pull(Box::new(PullOrder {
            offset,
            // The flags piggyback only an offset above 0 (0 means "none").
            commit_offset: (flags.commit_offset > 0).then_some(flags.commit_offset),
            send_subscription: flags.send_subscription,
            suspend: flags.suspend_timeout,
            timeout: flags.request_timeout,
            broker_id: self.pull_from_broker_id,
            epoch: self.epoch,
            id: self.next_pull_id,
        })));
    }

    /// The answer to a [`QueueAction::Pull`] (or why there is none). `retry_group` is the
    /// group when the queue is one of its retry topic (messages get their original topic back).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_pull_answer(
        &mut self,
        order: &PullOrder,
        answer: Result<PullResponse, Error>,
        retry_group: Option<&str>,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if self.pull_in_flight != Some(order.id) {
            // Not the pull in flight: one that a reset gave up on. Its answer must not clear
            // the flag of the pull sent since, or two pulls would run from one offset.
            return;
        }
        self.pull_in_flight = None;
        if order.epoch != self.epoch {
            // The cache was reset while this pull was out: its answer is stale.
            self.pull(cfg, env, now_ms, out);
            return;
        }
        self.last_activity_ms = now_ms;
        if self.dropping {
            return;
        }
        let response = match answer {
            Ok(response) => response,
            Err(e) if e.is_access_denied() => {
                self.access_denied = true;
                out.push(QueueAction::note(QueueNote::AccessDenied(e.to_string())));
                self.schedule_pull(ACCESS_DENIED_DELAY, out);
                return;
            }
            Err(e) => {
                let (delay, reason) = pull_error_delay(cfg, e.response_code());
                let topic_gone = e.response_code() == Some(response_code::TOPIC_NOT_EXIST);
                out.push(QueueAction::note(QueueNote::PullFailed {
                    error: e.to_string(),
                    reason,
                }));
                if topic_gone && self.next_offset != Some(0) {
                    self.restart_reborn_queue(order.offset, out);
                }
                if reason == DelayReason::NotRegistered {
                    out.push(QueueAction::Heartbeat);
                }
                if e.is_transport() {
                    out.push(QueueAction::RefreshRoute);
                }
                self.schedule_pull(delay, out);
                return;
            }
        };
        if std::mem::take(&mut self.access_denied) {
            out.push(QueueAction::note(QueueNote::AccessGranted));
        }
        self.pull_from_broker_id = response.suggest_broker_id;
        if env.paused && !response.messages.is_empty() {
            // Suspended while this pull was held by the broker: fetch them again after resume.
            self.schedule_pull(PAUSED_DELAY, out);
            return;
        }
        let requested = order.offset;
        let next_begin_offset = corrected_next_offset(&response, requested);
        let result = PullResult {
            status: response.status,
            requested_offset: requested,
            next_begin_offset,
            delivered: response.messages.len(),
            first_delivered_offset: response.messages.first().map(|m| m.queue_offset),
            cache_empty: self.cached_amount().0 == 0,
        };
        let outcome = on_pull_result(cfg, &result);
        if outcome.suspicious && next_begin_offset == response.next_begin_offset {
            out.push(QueueAction::note(QueueNote::Suspicious {
                requested,
                next: response.next_begin_offset,
            }));
        }
        self.next_offset = Some(outcome.next_offset);
        if !outcome.drop_queue {
            // Below the next offset every message was delivered or filtered out.
            self.passed_over = Some(outcome.next_offset);
        }
        match outcome.offset_update {
            Some(OffsetUpdate::IncreaseOnly(offset)) => self.commit(offset, out),
            Some(OffsetUpdate::FreezeAndPersist(offset)) => {
                // Adopt it, drop the cache, commit at once. Outcomes of the dropped messages
                // are ignored.
                out.push(QueueAction::note(QueueNote::OffsetMoved {
                    requested,
                    offset,
                }));
                self.discard_cache();
                self.committed = Some(offset);
                out.push(QueueAction::AdoptOffset(offset));
            }
            None => {}
        }
        let undispatched = if outcome.deliver {
            self.deliver(response.messages, retry_group, now_ms)
        } else {
            None
        };
        // The next pull is decided with the new messages cached (flow control counts them)
        // but goes out before they are consumed: the broker reads the next batch while the
        // listener works through this one.
        match outcome.next_pull {
            NextPull::Immediately => self.pull(cfg, env, now_ms, out),
            NextPull::After(delay) => self.schedule_pull(delay, out),
            // OFFSET_ILLEGAL: this runtime keeps the queue and continues from the adopted
            // offset rather than dropping and re-adding it.
            NextPull::Stop => self.pull(cfg, env, now_ms, out),
        }
        match undispatched {
            Some(Delivered::Concurrent(batch)) => {
                let batch_size = cfg.consume_message_batch_max_size.max(1) as usize;
                self.dispatch(batch, batch_size, out);
            }
            Some(Delivered::Ordered) => self.consume_ordered(cfg, now_ms, out),
            None => {}
        }
    }

    /// The broker no longer has the queue's topic: it lost its data (a restart without it) or
    /// the topic was deleted. When the topic comes back its queues start again at 0, so
    /// whatever is stored there then is new; resuming at the old position would skip it
    /// (the send-backs of a retry topic reborn by the first failed message, say). Reading from
    /// 0 costs duplicates only if the broker kept messages it denied having.
    fn restart_reborn_queue(&mut self, requested: i64, out: &mut Vec<QueueAction>) {
        out.push(QueueAction::note(QueueNote::OffsetMoved {
            requested,
            offset: 0,
        }));
        self.discard_cache();
        self.next_offset = Some(0);
        self.committed = Some(0);
        out.push(QueueAction::AdoptOffset(0));
    }

    /// Throws the cache away; answers and outcomes of the old epoch are ignored from now on.
    pub(crate) fn discard_cache(&mut self) {
        self.epoch += 1;
        self.passed_over = None;
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

    /// Caches pulled messages; what is to be consumed is started once the next pull is
    /// decided (see [`Delivered`]).
    fn deliver(
        &mut self,
        mut messages: Vec<MessageExt>,
        retry_group: Option<&str>,
        now_ms: i64,
    ) -> Option<Delivered> {
        if let Some(group) = retry_group {
            for message in &mut messages {
                retry::restore_original_topic(message, group);
            }
        }
        match &mut self.mode {
            Mode::Concurrent { pq, .. } => {
                let batch = Arc::new(messages);
                // Dispatched whole right after the next pull is decided: consumption starts now.
                pq.put_pull(&batch, now_ms);
                Some(Delivered::Concurrent(batch))
            }
            Mode::Orderly { pq, .. } => {
                pq.put_messages(CachedEntry::of_pull(&Arc::new(messages)));
                Some(Delivered::Ordered)
            }
            Mode::KeyOrdered { queue } => {
                let pull = Arc::new(messages);
                for (entry, message) in CachedEntry::of_pull(&pull).zip(pull.iter()) {
                    queue.push(entry, crate::consumer::key_order::ordering_key(message));
                }
                Some(Delivered::Ordered)
            }
        }
    }

    /// Hands `messages` (cached with their consumption started) to the listener in calls of
    /// at most `batch_size`.
    fn dispatch(
        &mut self,
        messages: Arc<Vec<MessageExt>>,
        batch_size: usize,
        out: &mut Vec<QueueAction>,
    ) {
        if !matches!(self.mode, Mode::Concurrent { .. }) {
            return;
        }
        let batch_size = batch_size.max(1);
        let calls = CallRanges::new(messages.len(), batch_size).len();
        if calls == 0 {
            return;
        }
        self.unsettled += calls;
        out.push(QueueAction::Consume {
            messages,
            batch_size,
            epoch: self.epoch,
        });
    }

    /// A concurrent listener call for `batch` (of `epoch`) ended.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_consumed(
        &mut self,
        batch: &[MessageExt],
        epoch: u64,
        outcome: CallOutcome,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if epoch == self.epoch {
            self.settle_call(batch, outcome, cfg, env, now_ms, out);
        }
        self.settle(out);
    }

    /// Several concurrent listener calls ended together (those of one round that finished at
    /// once): [`QueueCore::on_consumed`] for each in turn, except that every fully successful
    /// call leaves the cache in one pass (consecutive parts of a pull as one range), with one
    /// commit and one pull check, and that such a call removes its own pull's messages only
    /// (an offset cached by an earlier pull stays until that pull's call ends).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_consumed_all<'m>(
        &mut self,
        calls: impl IntoIterator<Item = EndedCalls<'m>>,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        let mut ended = 0usize;
        let mut done = std::mem::take(&mut self.done_offsets);
        let mut removed_parts = false;
        for EndedCalls {
            batch,
            part,
            calls,
            epoch,
            outcome,
        } in calls
        {
            ended += calls;
            if epoch != self.epoch {
                continue;
            }
            let all_succeeded =
                failed_range(outcome.success, outcome.ack_index, batch.len()).is_empty();
            match &mut self.mode {
                // A part of a cached pull (a run's calls joined) leaves without a search by
                // offset.
                Mode::Concurrent { pq, timed_out } if all_succeeded && timed_out.is_empty() => {
                    match part {
                        Some(part) => {
                            removed_parts |= remove_pull_part(pq, &part, &mut done, now_ms)
                        }
                        None => done.extend(batch.iter().map(|m| m.queue_offset)),
                    }
                }
                _ => self.settle_call(batch, outcome, cfg, env, now_ms, out),
            }
        }
        // Every offset leaves before any settle: a drop that ends with the last call reports
        // the committed offset these calls raised.
        if let Mode::Concurrent { pq, .. } = &mut self.mode {
            if !done.is_empty() || removed_parts {
                let offset = pq.remove_offsets(done.drain(..), now_ms);
                let offset = offset.or_else(|| pq.consume_offset().filter(|_| removed_parts));
                self.after_removal(offset, cfg, env, now_ms, out);
            }
        }
        self.done_offsets = done;
        for _ in 0..ended {
            self.settle(out);
        }
    }

    fn settle_call(
        &mut self,
        batch: &[MessageExt],
        outcome: CallOutcome,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        let failed = failed_range(outcome.success, outcome.ack_index, batch.len());
        // Messages whose consumption timed out were already sent back: their (late) outcome
        // neither retries nor commits them again.
        let mut timed_out_here = Vec::new();
        if let Mode::Concurrent { timed_out, .. } = &mut self.mode {
            if !timed_out.is_empty() {
                for m in batch {
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
        let broadcast_failures = !retries.is_empty() && !cfg.is_clustering();
        if broadcast_failures {
            out.push(QueueAction::note(QueueNote::BroadcastFailuresDropped(
                retries.iter().map(|m| m.queue_offset).collect(),
            )));
        } else if !retries.is_empty() {
            self.unsettled += 1;
            out.push(QueueAction::SendBack {
                messages: retries,
                delay_level: outcome.delay_level,
                epoch: self.epoch,
            });
        }
        let done = batch
            .iter()
            .enumerate()
            .filter(|(i, _)| broadcast_failures || !failed.contains(i))
            .map(|(_, m)| m.queue_offset)
            .filter(|offset| !timed_out_here.contains(offset));
        self.remove_done(done, cfg, env, now_ms, out);
    }

    /// Send-backs of `epoch` ended: `true` for each message the broker (or the retry-topic
    /// fallback) took. Those not taken stay cached and are consumed again after 5 s.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_sent_back(
        &mut self,
        results: Vec<(MessageExt, bool)>,
        epoch: u64,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if epoch == self.epoch {
            let (sent, kept): (Vec<_>, Vec<_>) = results.into_iter().partition(|(_, ok)| *ok);
            self.remove_done(
                sent.iter().map(|(m, _)| m.queue_offset),
                cfg,
                env,
                now_ms,
                out,
            );
            if !kept.is_empty() && !self.dropping {
                let again: Vec<MessageExt> = kept
                    .into_iter()
                    .map(|(mut m, _)| {
                        m.reconsume_times += 1;
                        m
                    })
                    .collect();
                out.push(QueueAction::note(QueueNote::SendBackFailed(again.len())));
                self.unsettled += 1;
                out.push(QueueAction::ReconsumeAfter {
                    messages: again,
                    delay: LOCAL_RECONSUME_DELAY,
                    epoch,
                });
            }
        }
        self.settle(out);
    }

    /// The delay of a [`QueueAction::ReconsumeAfter`] ended.
    pub(crate) fn on_reconsume_timer(
        &mut self,
        again: Vec<MessageExt>,
        epoch: u64,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if epoch == self.epoch && !self.dropping {
            let again = Arc::new(again);
            // The cache now points at the copies with the new counts.
            if let Mode::Concurrent { pq, .. } = &mut self.mode {
                pq.redeliver(&again, now_ms);
            }
            let whole = again.len();
            self.dispatch(again, whole, out);
        }
        self.settle(out);
    }

    fn remove_done(
        &mut self,
        offsets: impl IntoIterator<Item = i64>,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        let mut offsets = offsets.into_iter().peekable();
        if offsets.peek().is_none() {
            return;
        }
        // A timed-out offset stays in `timed_out` until its original call reports (see
        // `settle_call`), so that call's outcome cannot send the message back a second time.
        let Mode::Concurrent { pq, .. } = &mut self.mode else {
            return;
        };
        let offset = pq.remove_offsets(offsets, now_ms);
        self.after_removal(offset, cfg, env, now_ms, out);
    }

    /// Consumed messages left the cache: commits the new consume `offset` (if the cache had
    /// one to give) and pulls again if the cache had held the pull loop back.
    fn after_removal(
        &mut self,
        offset: Option<i64>,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if let Some(offset) = offset {
            self.commit_consumed(offset, out);
        }
        // Space in the cache may unblock a flow-controlled pull loop right away.
        if self.pull_in_flight.is_none() && !self.pull_scheduled && !self.dropping {
            self.pull(cfg, env, now_ms, out);
        }
    }

    /// Commits the consume `offset` consumption reached; with nothing left cached, at least
    /// [`passed_over`](Self::passed_over): the broker filtered what lies between, so nothing
    /// there is unfinished.
    fn commit_consumed(&mut self, offset: i64, out: &mut Vec<QueueAction>) {
        let offset = match self.passed_over {
            Some(passed) if passed > offset && self.cached_amount().0 == 0 => passed,
            _ => offset,
        };
        self.commit(offset, out);
    }

    /// Raises the committed offset (never lowers it).
    pub(crate) fn commit(&mut self, offset: i64, out: &mut Vec<QueueAction>) {
        if self.committed.is_some_and(|c| c >= offset) {
            return;
        }
        self.committed = Some(offset);
        // Only the latest commit counts (the actor flushes the committed offset, whichever
        // commit asked): one that follows another in the same step takes its place, so a
        // chain of calls settled in one turn leaves one commit, not one per call.
        if let Some(QueueAction::Commit(last)) = out.last_mut() {
            *last = offset;
        } else {
            out.push(QueueAction::Commit(offset));
        }
    }

    /// One listener call or send-back ended (in any epoch).
    pub(crate) fn settle(&mut self, out: &mut Vec<QueueAction>) {
        self.unsettled = self.unsettled.saturating_sub(1);
        if self.dropping && self.unsettled == 0 {
            self.finish(out);
        }
    }

    fn finish(&mut self, out: &mut Vec<QueueAction>) {
        if self.finished {
            return;
        }
        self.finished = true;
        out.push(QueueAction::Finish {
            committed: self.committed,
            unlock: self.lock.locked,
        });
    }

    /// The queue was assigned: lock it first if it must be locked, then find the start offset.
    pub(crate) fn start(&mut self, cfg: &PushConsumerConfig, out: &mut Vec<QueueAction>) {
        if needs_broker_lock(cfg) {
            out.push(QueueAction::Lock);
        } else {
            self.start_requested = true;
            out.push(QueueAction::LoadStartOffset(Duration::ZERO));
        }
    }

    /// The delay of a [`QueueAction::LockAfter`] ended.
    pub(crate) fn on_lock_timer(&mut self, out: &mut Vec<QueueAction>) {
        if !self.dropping {
            out.push(QueueAction::Lock);
        }
    }

    /// The periodic renewal (`lock_interval`) is due.
    pub(crate) fn on_renew_timer(&mut self, out: &mut Vec<QueueAction>) {
        if !self.dropping && self.next_offset.is_some() {
            out.push(QueueAction::Lock);
        }
    }

    /// The connection to the queue's broker closed. A restarted broker has forgotten every
    /// lock and may grant this queue's to another member at once, so the lock is not counted
    /// on until the broker grants it again (asked for right away). Java keeps consuming on its
    /// last grant for up to `lock_max_live_time`, two members at once.
    pub(crate) fn on_broker_disconnected(&mut self, now_ms: i64, out: &mut Vec<QueueAction>) {
        if !self.lock.locked {
            return;
        }
        self.set_locked(false, now_ms);
        self.lock.last_lock_ms = None;
        if self.start_requested && !self.dropping {
            out.push(QueueAction::Lock);
        }
    }

    fn set_locked(&mut self, locked: bool, now_ms: i64) {
        let was_held = self.lock.locked;
        self.lock.locked = locked;
        if locked {
            self.lock.last_lock_ms = Some(now_ms);
        }
        if locked && !was_held && self.next_offset.is_some() {
            // Another client may have consumed while we did not hold the lock.
            self.offset_fixed = false;
        }
    }

    /// The broker answered a [`QueueAction::Lock`]: `Ok(true)` granted, `Ok(false)` held by
    /// another client.
    pub(crate) fn on_lock_result(
        &mut self,
        result: Result<bool, String>,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        let retry = cfg.pull_delay_on_error;
        match &result {
            Ok(granted) => {
                if self.start_requested && self.lock.locked && !granted {
                    out.push(QueueAction::note(QueueNote::LockLost));
                }
                if *granted || self.start_requested {
                    self.set_locked(*granted, now_ms);
                }
            }
            // Keep the last grant: it expires on its own after lock_max_live_time.
            Err(e) => out.push(QueueAction::note(QueueNote::LockFailed(e.clone()))),
        }
        if self.dropping {
            return;
        }
        if !self.start_requested {
            if result == Ok(true) {
                self.start_requested = true;
                out.push(QueueAction::LoadStartOffset(Duration::ZERO));
            } else {
                out.push(QueueAction::LockAfter(retry));
            }
            return;
        }
        if self.may_consume(cfg, now_ms) {
            self.consume_ordered(cfg, now_ms, out);
            self.pull(cfg, env, now_ms, out);
        } else {
            out.push(QueueAction::LockAfter(retry));
        }
    }

    /// Orderly, after the lock was regained: continue from the broker's stored offset if it is
    /// ahead of ours (someone else consumed meanwhile), dropping the cache.
    pub(crate) fn on_recomputed_offset(
        &mut self,
        stored: StoredOffset,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        match stored {
            StoredOffset::Found(stored) => {
                // Only a stored offset past ours means someone else consumed meanwhile. The
                // cache runs ahead of the committed offset, so comparing with the next pull
                // would drop (and consume again) messages nobody else has seen.
                let ahead = self.committed.is_none_or(|committed| stored > committed);
                if ahead && self.next_offset != Some(stored) {
                    self.discard_cache();
                    self.next_offset = Some(stored);
                    self.committed = Some(stored);
                    out.push(QueueAction::AdoptOffset(stored));
                }
                self.offset_fixed = true;
                self.pull(cfg, env, now_ms, out);
            }
            StoredOffset::NotFound => {
                self.offset_fixed = true;
                self.pull(cfg, env, now_ms, out);
            }
            StoredOffset::Unavailable => self.schedule_pull(cfg.pull_delay_on_error, out),
        }
    }

    fn schedule_consume(&mut self, delay: Duration, out: &mut Vec<QueueAction>) {
        if self.consume_scheduled {
            return;
        }
        self.consume_scheduled = true;
        out.push(QueueAction::ConsumeAfter(delay));
    }

    /// The delay of a [`QueueAction::ConsumeAfter`] ended.
    pub(crate) fn on_consume_timer(
        &mut self,
        cfg: &PushConsumerConfig,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        self.consume_scheduled = false;
        self.consume_ordered(cfg, now_ms, out);
    }

    /// The delay of a [`QueueAction::WakeKeysAfter`] ended: the key paused until `due_ms` is
    /// due. Its pass runs at `due_ms` at the earliest, so a timer that fires a little early by
    /// this clock still finds the key due (no later wake-up would come for it).
    pub(crate) fn on_key_wake_timer(
        &mut self,
        due_ms: i64,
        cfg: &PushConsumerConfig,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        self.consume_ordered(cfg, now_ms.max(due_ms), out);
    }

    /// Key-ordered: wakes the queue when a key paused until `due_ms` is due.
    fn wake_keys_at(&self, due_ms: i64, now_ms: i64, out: &mut Vec<QueueAction>) {
        let delay = Duration::from_millis(due_ms.saturating_sub(now_ms).max(0) as u64);
        out.push(QueueAction::WakeKeysAfter { delay, due_ms });
    }

    /// Starts whatever may run now: the next batch of an orderly queue, or every ready key of
    /// a key-ordered one.
    fn consume_ordered(
        &mut self,
        cfg: &PushConsumerConfig,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        match &self.mode {
            // A scheduled pass is a suspend of the whole queue.
            Mode::Orderly { .. } if !self.consume_scheduled => {
                self.consume_orderly_batch(cfg, now_ms, out)
            }
            // A scheduled pass only wakes paused keys: the others run now.
            Mode::KeyOrdered { .. } => self.consume_ready_keys(cfg, now_ms, out),
            Mode::Orderly { .. } | Mode::Concurrent { .. } => {}
        }
    }

    fn consume_orderly_batch(
        &mut self,
        cfg: &PushConsumerConfig,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if let Some(batch) = self.take_orderly_batch(cfg, now_ms, out) {
            self.unsettled += 1;
            out.push(QueueAction::ConsumeOrderly {
                batch,
                epoch: self.epoch,
            });
        }
    }

    /// The orderly queue's next batch, if one may run now (one that waits for the broker's
    /// lock schedules a pass for when it may be back).
    fn take_orderly_batch(
        &mut self,
        cfg: &PushConsumerConfig,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) -> Option<OrderlyBatch> {
        let Mode::Orderly { pq, state } = &mut self.mode else {
            return None;
        };
        match state.next_batch_kept(pq, &self.lock, cfg, now_ms) {
            Ok(entries) => Some(OrderlyBatch::of_entries(entries, &mut self.spare_pull)),
            Err(BatchStep::NeedsLock) => {
                self.schedule_consume(cfg.pull_delay_on_error, out);
                None
            }
            Err(_) => None,
        }
    }

    fn consume_ready_keys(
        &mut self,
        cfg: &PushConsumerConfig,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if self.dropping {
            return;
        }
        if !self.may_consume(cfg, now_ms) {
            self.schedule_consume(cfg.pull_delay_on_error, out);
            return;
        }
        let limit = cfg.effective_consume_concurrency() as usize;
        let Mode::KeyOrdered { queue } = &mut self.mode else {
            return;
        };
        let room = limit.saturating_sub(queue.in_flight_count());
        // Each carries its reconsume count: the broker's plus its failures here.
        let mut ready = std::mem::take(&mut self.ready_buffer);
        // Paused keys are woken by the wake-up their pause scheduled.
        let spare = &mut self.spare_pull;
        queue.next_ready_built(room, now_ms, &mut ready, |entry, times| {
            OrderlyBatch::of_entry(entry, times, spare)
        });
        for batch in ready.drain(..) {
            self.unsettled += 1;
            out.push(QueueAction::ConsumeOrderly {
                batch,
                epoch: self.epoch,
            });
        }
        self.ready_buffer = ready;
    }

    /// Key-ordered: the listener call of the message at `offset` (of `epoch`) succeeded at once.
    /// When the next message of its key may run now and no other message may run now, that
    /// one is handed out and returned, to be run in the same turn: a key's messages then
    /// follow each other without a step per message. The call is settled (the returned one
    /// takes its place), with its commit and pull check in `out`. `None`, changing nothing,
    /// otherwise: settle the call with [`QueueCore::on_orderly_consumed`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn next_of_key_at_once(
        &mut self,
        offset: i64,
        epoch: u64,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) -> Option<OrderlyBatch> {
        if epoch != self.epoch || self.dropping || !self.may_consume(cfg, now_ms) {
            return None;
        }
        let Mode::KeyOrdered { queue } = &mut self.mode else {
            return None;
        };
        let spare = &mut self.spare_pull;
        let next = queue.finish_and_build_next(offset, now_ms, |entry, times| {
            OrderlyBatch::of_entry(entry, times, spare)
        })?;
        let committed = queue.committed_offset();
        if let Some(committed) = committed {
            self.commit_consumed(committed, out);
        }
        self.pull(cfg, env, now_ms, out);
        Some(next)
    }

    /// The batch of the orderly call over `span` that the core handed out in `epoch` and has
    /// not settled, rebuilt as it was handed out (the pull shared again, or copies with the
    /// same reconsume counts). Valid until the core next changes: rebuild it right after the
    /// call, before settling anything. `None` when no such batch is in flight.
    pub(crate) fn batch_in_flight(&self, span: BatchSpan, epoch: u64) -> Option<OrderlyBatch> {
        if epoch != self.epoch {
            return None;
        }
        match &self.mode {
            Mode::Orderly { pq, .. } => {
                let kept = pq.last_kept(span.len);
                let matches = kept.len() == span.len
                    && kept.first().map_or(-1, |e| e.offset) == span.first_offset;
                matches.then(|| OrderlyBatch::of_entries(kept, &mut None))
            }
            Mode::KeyOrdered { queue } if span.len == 1 => queue
                .in_flight_built(span.first_offset, |entry, times| {
                    OrderlyBatch::of_entry(entry, times, &mut None)
                }),
            Mode::KeyOrdered { .. } | Mode::Concurrent { .. } => None,
        }
    }

    /// [`QueueCore::on_orderly_consumed`] of a call over `span` that finished at once, except
    /// that when the queue's next step is to hand out its next call right away, that call is
    /// returned instead of a [`QueueAction::ConsumeOrderly`], to be run in the same turn: an
    /// orderly queue's next batch, or a key-ordered queue's next message of the key
    /// ([`QueueCore::next_of_key_at_once`]). A queue's calls then follow each other without a
    /// step per call. The returned call takes this one's place (nothing more to settle).
    ///
    /// Called right after the call, before the core changes: a call that did not succeed
    /// (which needs its messages: reconsume counts, dead letters) is settled over its batch
    /// as [`QueueCore::batch_in_flight`] rebuilds it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_orderly_consumed_at_once(
        &mut self,
        span: BatchSpan,
        epoch: u64,
        status: OrderlyStatus,
        context: &OrderlyContext,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) -> Option<OrderlyBatch> {
        if !status.succeeded() {
            let batch = self.batch_in_flight(span, epoch);
            // A call of an earlier epoch is released without its messages.
            debug_assert!(
                batch.is_some() || epoch != self.epoch,
                "the batch of a failed call is gone: {span:?}"
            );
            let batch = batch.as_deref().unwrap_or_default();
            self.on_orderly_consumed(batch, epoch, status, context, cfg, env, now_ms, out);
            return None;
        }
        // A call that succeeded is settled by its offsets alone: neither mode reads the
        // messages of a successful batch.
        let no_messages: &[MessageExt] = &[];
        if let (1, Mode::KeyOrdered { .. }) = (span.len, &self.mode) {
            let next = self.next_of_key_at_once(span.first_offset, epoch, cfg, env, now_ms, out);
            if next.is_some() {
                return next;
            }
            if epoch == self.epoch {
                self.on_key_succeeded(span.first_offset, cfg, env, now_ms, out);
                self.settle(out);
                return None;
            }
        }
        let current = epoch == self.epoch && !self.dropping;
        let (true, Mode::Orderly { pq, state }) = (current, &mut self.mode) else {
            self.on_orderly_consumed(no_messages, epoch, status, context, cfg, env, now_ms, out);
            return None;
        };
        let step = state.on_orderly_result(pq, no_messages, status, context, cfg, now_ms);
        if !matches!(step.next, OrderlyNext::Continue) || self.consume_scheduled {
            self.apply_orderly_step(step, cfg, env, now_ms, out);
            self.settle(out);
            return None;
        }
        if let Some(offset) = step.commit_offset {
            self.commit_consumed(offset, out);
        }
        // What `consume_orderly_batch` would hand out, returned instead; with nothing to
        // hand out the call settles here.
        let next = self.take_orderly_batch(cfg, now_ms, out);
        self.pull(cfg, env, now_ms, out);
        if next.is_none() {
            self.settle(out);
        }
        next
    }

    /// An orderly listener call for `batch` (of `epoch`) ended.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_orderly_consumed(
        &mut self,
        batch: &[MessageExt],
        epoch: u64,
        status: OrderlyStatus,
        context: &OrderlyContext,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if epoch == self.epoch {
            match &mut self.mode {
                Mode::Orderly { pq, state } => {
                    let step = state.on_orderly_result(pq, batch, status, context, cfg, now_ms);
                    self.apply_orderly_step(step, cfg, env, now_ms, out);
                }
                Mode::KeyOrdered { .. } => {
                    self.on_key_message(batch, status, context, cfg, env, now_ms, out)
                }
                Mode::Concurrent { .. } => {}
            }
        } else {
            self.release_stale_batch(cfg, now_ms, out);
        }
        self.settle(out);
    }

    fn apply_orderly_step(
        &mut self,
        step: OrderlyStep<MessageExt>,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if let Some(offset) = step.commit_offset {
            self.commit_consumed(offset, out);
        }
        match step.next {
            OrderlyNext::Continue => self.consume_ordered(cfg, now_ms, out),
            // Re-queue behind the other queues: the dispatcher's permits are first come, first
            // served, so another queue's waiting batch runs before our next one.
            OrderlyNext::Yield => self.schedule_consume(Duration::ZERO, out),
            OrderlyNext::SuspendFor(delay) => self.schedule_consume(delay, out),
            OrderlyNext::SendToDeadLetter(letters) => {
                self.unsettled += 1;
                out.push(QueueAction::DeadLetter {
                    letters,
                    epoch: self.epoch,
                    suspend: Duration::ZERO,
                });
            }
            OrderlyNext::Stop => {}
        }
        if !self.dropping {
            self.pull(cfg, env, now_ms, out);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_key_message(
        &mut self,
        batch: &[MessageExt],
        status: OrderlyStatus,
        context: &OrderlyContext,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        let Some(message) = batch.first() else {
            return;
        };
        let offset = message.queue_offset;
        if status.succeeded() {
            self.on_key_succeeded(offset, cfg, env, now_ms, out);
            return;
        }
        let max = cfg.effective_max_reconsume_times();
        let Mode::KeyOrdered { queue } = &mut self.mode else {
            return;
        };
        let suspend = context.effective_suspend_time();
        if max.is_some_and(|max| message.reconsume_times >= i32::try_from(max).unwrap_or(i32::MAX))
        {
            // At the maximum: to the dead-letter queue, then the key moves on.
            self.unsettled += 1;
            out.push(QueueAction::DeadLetter {
                letters: vec![DeadLetter {
                    message: message.clone(),
                    reconsume_times: message.reconsume_times,
                }],
                epoch: self.epoch,
                suspend,
            });
            return;
        }
        let due = now_ms + suspend.as_millis() as i64;
        queue.retry_at(offset, due);
        self.wake_keys_at(due, now_ms, out);
        self.after_key_change(cfg, env, now_ms, out);
    }

    /// Key-ordered: the call over the message at `offset` succeeded; the next of its key may run.
    fn on_key_succeeded(
        &mut self,
        offset: i64,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        let Mode::KeyOrdered { queue } = &mut self.mode else {
            return;
        };
        queue.complete(offset, true);
        self.after_key_change(cfg, env, now_ms, out);
    }

    fn after_key_change(
        &mut self,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if let Mode::KeyOrdered { queue } = &self.mode {
            if let Some(offset) = queue.committed_offset() {
                self.commit_consumed(offset, out);
            }
        }
        self.consume_ordered(cfg, now_ms, out);
        if !self.dropping {
            self.pull(cfg, env, now_ms, out);
        }
    }

    /// The dead-letter sends of a [`QueueAction::DeadLetter`] ended: `attempted` offsets were
    /// sent, `sent` of them accepted.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_dead_lettered(
        &mut self,
        attempted: &[i64],
        sent: &[i64],
        epoch: u64,
        suspend: Duration,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if epoch == self.epoch {
            match &mut self.mode {
                Mode::Orderly { pq, state } => {
                    let step = state.on_dead_letter_result(pq, sent, cfg, now_ms);
                    self.apply_orderly_step(step, cfg, env, now_ms, out);
                }
                Mode::KeyOrdered { queue } => {
                    let due = now_ms + suspend.as_millis() as i64;
                    let mut paused = false;
                    for offset in attempted {
                        if sent.contains(offset) {
                            queue.complete(*offset, true);
                        } else {
                            queue.retry_at(*offset, due);
                            paused = true;
                        }
                    }
                    if paused && due > now_ms {
                        self.wake_keys_at(due, now_ms, out);
                    }
                    self.after_key_change(cfg, env, now_ms, out);
                }
                Mode::Concurrent { .. } => {}
            }
        } else {
            self.release_stale_batch(cfg, now_ms, out);
        }
        self.settle(out);
    }

    /// Orderly: the cache was thrown away while a batch (or its dead-letter sends) was out.
    /// Its late result changes nothing, but it ends the wait that kept a second batch from
    /// starting; without this the queue would never consume again.
    fn release_stale_batch(
        &mut self,
        cfg: &PushConsumerConfig,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if let Mode::Orderly { state, .. } = &mut self.mode {
            state.on_stale_result();
            self.consume_ordered(cfg, now_ms, out);
        }
    }

    /// Concurrent mode's consume timeout: messages whose listener call started longer than
    /// `consume_timeout` ago are sent back (delay level 3) and stop pinning the offset. The
    /// call itself keeps running; its outcome for them is ignored.
    pub(crate) fn clean_expired(
        &mut self,
        cfg: &PushConsumerConfig,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        if !cfg.is_clustering() || self.dropping {
            return;
        }
        let Mode::Concurrent { pq, timed_out } = &mut self.mode else {
            return;
        };
        let mut expired = pq.expired_messages(now_ms, cfg.consume_timeout, 16);
        expired.retain(|m| !timed_out.contains(&m.queue_offset));
        if expired.is_empty() {
            return;
        }
        out.push(QueueAction::note(QueueNote::ConsumeTimedOut(expired.len())));
        for message in &expired {
            timed_out.insert(message.queue_offset);
        }
        self.unsettled += 1;
        out.push(QueueAction::SendBack {
            messages: expired,
            delay_level: CONSUME_TIMEOUT_DELAY_LEVEL,
            epoch: self.epoch,
        });
    }

    /// Stop consuming: no more pulls; [`QueueAction::Finish`] once the calls in flight have
    /// settled (at once if none are). Returns whether calls are still in flight.
    pub(crate) fn drop_queue(&mut self, out: &mut Vec<QueueAction>) -> bool {
        self.dropping = true;
        match &mut self.mode {
            Mode::Orderly { pq, .. } => pq.set_dropped(true),
            Mode::Concurrent { .. } | Mode::KeyOrdered { .. } => {}
        }
        if self.unsettled == 0 {
            self.finish(out);
            false
        } else {
            true
        }
    }

    /// The drop's wait for calls in flight ran out (`shutdown_await`): finish anyway.
    pub(crate) fn force_finish(&mut self, out: &mut Vec<QueueAction>) {
        self.finish(out);
    }

    /// Moves the queue to `offset`, dropping the cache (RESET_CONSUMER_CLIENT_OFFSET). The
    /// executor sets the offset in the store itself.
    pub(crate) fn reset_offset(
        &mut self,
        offset: i64,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
        out: &mut Vec<QueueAction>,
    ) {
        self.discard_cache();
        self.next_offset = Some(offset);
        self.committed = Some(offset);
        // A pull held by the broker belongs to the old epoch; start over at once (its answer
        // will be ignored).
        self.pull_in_flight = None;
        self.pull(cfg, env, now_ms, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::config::ConsumeMode;
    use crate::message::MessageQueue;
    use crate::rpc::PullStatus;

    fn cfg() -> PushConsumerConfig {
        PushConsumerConfig::new("G")
    }

    fn env(cfg: &PushConsumerConfig) -> QueueEnv {
        QueueEnv {
            running: true,
            paused: false,
            thresholds: QueueThresholds::for_owned_queues(cfg, 1),
            has_subscription: true,
        }
    }

    fn message(offset: i64) -> MessageExt {
        let mut m = MessageExt::from(crate::message::Message::new("T", &b"x"[..]));
        m.queue_offset = offset;
        m
    }

    fn found(offsets: Range<i64>) -> PullResponse {
        PullResponse {
            status: PullStatus::Found,
            next_begin_offset: offsets.end,
            min_offset: 0,
            max_offset: offsets.end,
            suggest_broker_id: 0,
            messages: offsets.clone().map(message).collect(),
            unfiltered: offsets.count(),
        }
    }

    fn started(cfg: &PushConsumerConfig, at: i64) -> (QueueCore, PullOrder) {
        let mut core = QueueCore::new(Mode::for_config(cfg, 0), 0);
        let mut out = Vec::new();
        core.on_start_offset(Ok(at), cfg, &env(cfg), 0, &mut out);
        let order = first_pull(&out).expect("a first pull");
        (core, order)
    }

    /// The first pull among `out`'s actions.
    fn first_pull(out: &[QueueAction]) -> Option<PullOrder> {
        out.iter().find_map(|a| match a {
            QueueAction::Pull(order) => Some(**order),
            _ => None,
        })
    }

    /// A broker's refusal of a pull with `code`.
    fn pull_refused(code: i32) -> Error {
        Error::Broker {
            peer: "b".into(),
            request: crate::error::RequestCode(crate::protocol::request_code::PULL_MESSAGE),
            code: crate::error::ResponseCode(code),
            remark: crate::protocol::codes::response_code_name(code).into(),
        }
    }

    /// An orderly listener call of `batch` (in `epoch`) succeeded: the actions that follow.
    fn orderly_success(
        core: &mut QueueCore,
        batch: &[MessageExt],
        epoch: u64,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
    ) -> Vec<QueueAction> {
        let context = OrderlyContext::new(MessageQueue::new("T", "b", 0), cfg);
        let mut out = Vec::new();
        core.on_orderly_consumed(
            batch,
            epoch,
            OrderlyStatus::Success,
            &context,
            cfg,
            env,
            now_ms,
            &mut out,
        );
        out
    }

    #[test]
    fn call_ranges_cut_a_pull_into_consecutive_calls_of_at_most_the_batch_size() {
        for len in 0..40 {
            for batch_size in 0..12 {
                let calls = CallRanges::new(len, batch_size);
                let expected = len.div_ceil(batch_size.max(1));
                assert_eq!(calls.len(), expected, "len {len} batch {batch_size}");
                let ranges: Vec<_> = calls.collect();
                assert_eq!(ranges.len(), expected);
                let mut next = 0;
                for range in &ranges {
                    assert_eq!(range.start, next, "consecutive");
                    assert!(!range.is_empty() && range.len() <= batch_size.max(1));
                    next = range.end;
                }
                assert_eq!(next, len, "every message in one call");
            }
        }
    }

    #[test]
    fn one_consume_action_stands_for_every_call_of_a_pull_and_each_call_settles() {
        let mut cfg = cfg();
        cfg.consume_message_batch_max_size = 4;
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..10)), None, &cfg, &env, 1, &mut out);
        let actions = out
            .iter()
            .filter(|a| matches!(a, QueueAction::Consume { .. }))
            .count();
        assert_eq!(actions, 1, "one action for the pull's calls");
        let calls = consumes(&out);
        let ranges: Vec<_> = calls.iter().map(|(_, r, _)| r.clone()).collect();
        assert_eq!(ranges, [0..4, 4..8, 8..10]);
        assert_eq!(core.unsettled, 3, "each call settles by itself");
        // Dropped while the calls run: the queue finishes once the last of them reports.
        let mut out = Vec::new();
        assert!(core.drop_queue(&mut out), "calls still in flight");
        let finishes = |out: &[QueueAction]| {
            out.iter()
                .filter(|a| matches!(a, QueueAction::Finish { .. }))
                .count()
        };
        for (m, r, e) in &calls {
            assert_eq!(finishes(&out), 0, "a call is still running");
            core.on_consumed(&m[r.clone()], *e, OK, &cfg, &env, 2, &mut out);
        }
        assert_eq!(finishes(&out), 1, "finished with the last call");
    }

    #[test]
    fn calls_ending_together_commit_past_their_pull_parts_and_failures_still_go_back() {
        let mut cfg = cfg();
        cfg.consume_message_batch_max_size = 2;
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..10)), None, &cfg, &env, 1, &mut out);
        let calls = consumes(&out);
        let ranges: Vec<_> = calls.iter().map(|(_, r, _)| r.clone()).collect();
        assert_eq!(ranges, [0..2, 2..4, 4..6, 6..8, 8..10]);
        let ended = |picked: &[(usize, CallOutcome)]| -> Vec<_> {
            picked
                .iter()
                .filter_map(|&(call, outcome)| {
                    let (m, r, e) = calls.get(call)?;
                    let part = PullPart {
                        pull: m,
                        range: r.clone(),
                    };
                    Some(EndedCalls {
                        batch: &m[r.clone()],
                        part: Some(part),
                        calls: 1,
                        epoch: *e,
                        outcome,
                    })
                })
                .collect()
        };
        // Calls 0 and 1 (one span of the pull) and 3 end together; call 2 is still running.
        let mut out = Vec::new();
        core.on_consumed_all(ended(&[(0, OK), (1, OK), (3, OK)]), &cfg, &env, 2, &mut out);
        assert_eq!(
            commits(&out),
            [4],
            "offsets 0..4 left, 4 is still being consumed"
        );
        assert_eq!(core.cache_stats().count, 4);
        // Call 4 fails and call 2 succeeds: the failed messages go back to the broker and
        // leave the cache only once they are taken.
        let mut out = Vec::new();
        core.on_consumed_all(ended(&[(4, FAILED), (2, OK)]), &cfg, &env, 3, &mut out);
        let sent_back: Vec<i64> = out
            .iter()
            .filter_map(|a| match a {
                QueueAction::SendBack { messages, .. } => {
                    Some(messages.iter().map(|m| m.queue_offset))
                }
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(sent_back, [8, 9]);
        assert_eq!(commits(&out), [8]);
        assert_eq!(core.cache_stats().count, 2);
    }

    #[test]
    fn one_entry_for_a_runs_calls_settles_each_of_them() {
        let mut cfg = cfg();
        cfg.consume_message_batch_max_size = 2;
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..6)), None, &cfg, &env, 1, &mut out);
        let calls = consumes(&out);
        assert_eq!(core.unsettled, 3);
        let (pull, _, epoch) = calls.first().cloned().expect("a consume action");
        let mut out = Vec::new();
        assert!(core.drop_queue(&mut out), "calls still in flight");
        let entry = EndedCalls {
            batch: &pull[0..6],
            part: Some(PullPart {
                pull: &pull,
                range: 0..6,
            }),
            calls: 3,
            epoch,
            outcome: OK,
        };
        core.on_consumed_all([entry], &cfg, &env, 2, &mut out);
        assert_eq!(core.unsettled, 0);
        assert_eq!(commits(&out), [6]);
        let finished = out.iter().any(|a| {
            matches!(
                a,
                QueueAction::Finish {
                    committed: Some(6),
                    ..
                }
            )
        });
        assert!(
            finished,
            "the drop finished with the offset the calls raised: {out:?}"
        );
    }

    fn consumes(out: &[QueueAction]) -> Vec<(Arc<Vec<MessageExt>>, Range<usize>, u64)> {
        out.iter()
            .filter_map(|a| match a {
                QueueAction::Consume {
                    messages,
                    batch_size,
                    epoch,
                } => Some(
                    CallRanges::new(messages.len(), *batch_size)
                        .map(|range| (messages.clone(), range, *epoch))
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect()
    }

    fn commits(out: &[QueueAction]) -> Vec<i64> {
        out.iter()
            .filter_map(|a| match a {
                QueueAction::Commit(o) => Some(*o),
                _ => None,
            })
            .collect()
    }

    const OK: CallOutcome = CallOutcome {
        success: true,
        ack_index: None,
        delay_level: 0,
    };
    const FAILED: CallOutcome = CallOutcome {
        success: false,
        ack_index: None,
        delay_level: 0,
    };

    #[test]
    fn the_start_offset_is_committed_and_pulled_from() {
        let cfg = cfg();
        let (core, order) = started(&cfg, 7);
        assert_eq!(order.offset, 7);
        assert_eq!(core.committed, Some(7));
    }

    #[test]
    fn the_committed_offset_is_the_smallest_unfinished_message() {
        let cfg = cfg();
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..3)), None, &cfg, &env, 1, &mut out);
        let calls = consumes(&out);
        assert_eq!(calls.len(), 3, "one call per message by default");
        let mut out = Vec::new();
        // The last finishes first: nothing below it is done, so nothing is committed.
        let (m, r, e) = &calls[2];
        core.on_consumed(&m[r.clone()], *e, OK, &cfg, &env, 2, &mut out);
        assert!(commits(&out).is_empty());
        let (m, r, e) = &calls[0];
        core.on_consumed(&m[r.clone()], *e, OK, &cfg, &env, 2, &mut out);
        assert_eq!(commits(&out), vec![1]);
        let (m, r, e) = &calls[1];
        core.on_consumed(&m[r.clone()], *e, OK, &cfg, &env, 2, &mut out);
        assert_eq!(
            commits(&out),
            vec![3],
            "a commit that follows another in the same actions takes its place"
        );
    }

    #[test]
    fn a_failed_message_is_sent_back_and_pins_the_offset_until_taken() {
        let cfg = cfg();
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..1)), None, &cfg, &env, 1, &mut out);
        let (m, r, e) = consumes(&out).remove(0);
        let mut out = Vec::new();
        core.on_consumed(&m[r], e, FAILED, &cfg, &env, 2, &mut out);
        let sent: Vec<_> = out
            .iter()
            .filter_map(|a| match a {
                QueueAction::SendBack { messages, .. } => Some(messages.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(sent.len(), 1);
        assert!(commits(&out).is_empty(), "a failure does not commit");
        let mut out = Vec::new();
        core.on_sent_back(
            vec![(sent[0][0].clone(), false)],
            e,
            &cfg,
            &env,
            3,
            &mut out,
        );
        assert!(
            commits(&out).is_empty(),
            "a failed send-back keeps the message"
        );
        assert!(out
            .iter()
            .any(|a| matches!(a, QueueAction::ReconsumeAfter { .. })));
        let mut out = Vec::new();
        core.on_sent_back(vec![(sent[0][0].clone(), true)], e, &cfg, &env, 3, &mut out);
        assert_eq!(commits(&out), vec![1]);
    }

    #[test]
    fn broadcasting_failures_are_dropped_not_sent_back() {
        let mut cfg = cfg();
        cfg.message_model = crate::consumer::config::MessageModel::Broadcasting;
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..1)), None, &cfg, &env, 1, &mut out);
        let (m, r, e) = consumes(&out).remove(0);
        let mut out = Vec::new();
        core.on_consumed(&m[r], e, FAILED, &cfg, &env, 2, &mut out);
        assert!(!out
            .iter()
            .any(|a| matches!(a, QueueAction::SendBack { .. })));
        assert_eq!(commits(&out), vec![1]);
    }

    #[test]
    fn outcomes_of_a_discarded_cache_change_nothing() {
        let cfg = cfg();
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..2)), None, &cfg, &env, 1, &mut out);
        let calls = consumes(&out);
        let mut out = Vec::new();
        core.reset_offset(10, &cfg, &env, 2, &mut out);
        for (m, r, e) in calls {
            core.on_consumed(&m[r], e, OK, &cfg, &env, 3, &mut out);
        }
        assert!(commits(&out).is_empty());
        assert_eq!(core.committed, Some(10));
    }

    #[test]
    fn the_answer_to_a_pull_given_up_by_a_reset_starts_no_second_pull() {
        let cfg = cfg();
        let env = env(&cfg);
        let (mut core, stale) = started(&cfg, 0);
        let mut out = Vec::new();
        core.reset_offset(10, &cfg, &env, 1, &mut out);
        let pulls = |out: &[QueueAction]| {
            out.iter()
                .filter_map(|a| match a {
                    QueueAction::Pull(order) => Some(**order),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let fresh = pulls(&out);
        assert_eq!(fresh.len(), 1);
        assert_eq!(fresh[0].offset, 10);
        let mut out = Vec::new();
        core.on_pull_answer(&stale, Ok(found(0..3)), None, &cfg, &env, 2, &mut out);
        assert!(
            out.is_empty(),
            "the stale answer changed something: {out:?}"
        );
        core.on_pull_answer(&fresh[0], Ok(found(10..11)), None, &cfg, &env, 3, &mut out);
        assert_eq!(consumes(&out).len(), 1);
    }

    #[test]
    fn a_lost_broker_connection_stops_orderly_consumption_until_relocked() {
        let mut cfg = cfg();
        cfg.consume_mode = ConsumeMode::Orderly;
        let env = env(&cfg);
        let mut core = QueueCore::new(Mode::for_config(&cfg, 0), 0);
        let mut out = Vec::new();
        core.start(&cfg, &mut out);
        assert!(matches!(out[..], [QueueAction::Lock]));
        let mut out = Vec::new();
        core.on_lock_result(Ok(true), &cfg, &env, 0, &mut out);
        core.on_start_offset(Ok(0), &cfg, &env, 0, &mut out);
        assert!(core.may_consume(&cfg, 1));
        let mut out = Vec::new();
        core.on_broker_disconnected(1, &mut out);
        assert!(
            !core.may_consume(&cfg, 1),
            "a restarted broker may grant it to another"
        );
        assert!(matches!(out[..], [QueueAction::Lock]), "{out:?}");
        let mut out = Vec::new();
        core.on_lock_result(Ok(false), &cfg, &env, 2, &mut out);
        assert!(!core.may_consume(&cfg, 2));
        assert!(out.iter().any(|a| matches!(a, QueueAction::LockAfter(_))));
        core.on_lock_result(Ok(true), &cfg, &env, 3, &mut out);
        assert!(core.may_consume(&cfg, 3));
    }

    #[test]
    fn an_orderly_queue_reset_during_a_batch_consumes_again_after_its_late_result() {
        let mut cfg = cfg();
        cfg.consume_mode = ConsumeMode::Orderly;
        cfg.message_model = crate::consumer::config::MessageModel::Broadcasting;
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..1)), None, &cfg, &env, 1, &mut out);
        let (stale, stale_epoch) = out
            .iter()
            .find_map(|a| match a {
                QueueAction::ConsumeOrderly { batch, epoch } => Some((batch.clone(), *epoch)),
                _ => None,
            })
            .expect("a batch");
        let mut out = Vec::new();
        core.reset_offset(5, &cfg, &env, 2, &mut out);
        let fresh = first_pull(&out).expect("a pull from the reset offset");
        let mut out = Vec::new();
        core.on_pull_answer(&fresh, Ok(found(5..6)), None, &cfg, &env, 3, &mut out);
        assert!(
            !out.iter()
                .any(|a| matches!(a, QueueAction::ConsumeOrderly { .. })),
            "no second batch while the first runs"
        );
        let out = orderly_success(&mut core, &stale, stale_epoch, &cfg, &env, 4);
        assert!(commits(&out).is_empty(), "the stale batch commits nothing");
        assert!(
            out.iter().any(|a| matches!(a, QueueAction::ConsumeOrderly { batch, .. } if batch[0].queue_offset == 5)),
            "the queue consumes again: {out:?}"
        );
    }

    /// An orderly core of `cfg` that holds its lock and asked for its first pull.
    fn locked_orderly_core(cfg: &PushConsumerConfig, env: &QueueEnv) -> (QueueCore, PullOrder) {
        let mut core = QueueCore::new(Mode::for_config(cfg, 0), 0);
        let mut out = Vec::new();
        core.start(cfg, &mut out);
        core.on_lock_result(Ok(true), cfg, env, 0, &mut out);
        let mut out = Vec::new();
        core.on_start_offset(Ok(0), cfg, env, 0, &mut out);
        (core, first_pull(&out).expect("a first pull"))
    }

    /// The orderly batch among `out`, with its epoch.
    fn orderly_batch_of(out: &[QueueAction]) -> (OrderlyBatch, u64) {
        out.iter()
            .find_map(|a| match a {
                QueueAction::ConsumeOrderly { batch, epoch } => Some((batch.clone(), *epoch)),
                _ => None,
            })
            .expect("a batch")
    }

    /// A locked orderly queue taking batches of up to 2 after one pull of offsets 0..3: the
    /// configuration, environment, core and the pull's actions.
    fn orderly_in_pairs_after_a_pull() -> (PushConsumerConfig, QueueEnv, QueueCore, Vec<QueueAction>)
    {
        let mut cfg = cfg();
        cfg.consume_mode = ConsumeMode::Orderly;
        cfg.consume_message_batch_max_size = 2;
        let env = env(&cfg);
        let (mut core, order) = locked_orderly_core(&cfg, &env);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..3)), None, &cfg, &env, 1, &mut out);
        (cfg, env, core, out)
    }

    fn offsets(batch: &OrderlyBatch) -> Vec<i64> {
        batch.iter().map(|m| m.queue_offset).collect()
    }

    #[test]
    fn orderly_batches_share_the_pull_unless_they_span_pulls_or_were_suspended() {
        let (cfg, env, mut core, out) = orderly_in_pairs_after_a_pull();
        let second_pull = first_pull(&out).expect("a second pull");
        let (first, epoch) = orderly_batch_of(&out);
        assert!(matches!(first, OrderlyBatch::Pull { .. }), "{first:?}");
        assert_eq!(offsets(&first), vec![0, 1]);
        assert!(first.iter().all(|m| m.reconsume_times == 0));

        // Suspended: the same messages again, each with its count bumped (copies).
        let context = OrderlyContext::new(MessageQueue::new("T", "b", 0), &cfg);
        let mut out = Vec::new();
        core.on_pull_answer(&second_pull, Ok(found(3..5)), None, &cfg, &env, 2, &mut out);
        let mut out = Vec::new();
        let status = OrderlyStatus::SuspendCurrentQueueAMoment;
        core.on_orderly_consumed(&first, epoch, status, &context, &cfg, &env, 3, &mut out);
        let mut out = Vec::new();
        core.on_consume_timer(&cfg, 4_000, &mut out);
        let (again, epoch) = orderly_batch_of(&out);
        assert!(matches!(again, OrderlyBatch::Owned(_)), "{again:?}");
        assert_eq!(offsets(&again), vec![0, 1]);
        assert!(again.iter().all(|m| m.reconsume_times == 1), "{again:?}");

        // Offsets 2 and 3 came with different pulls: copied into one batch, in order.
        let out = orderly_success(&mut core, &again, epoch, &cfg, &env, 5);
        assert_eq!(commits(&out), vec![2]);
        let (spanning, epoch) = orderly_batch_of(&out);
        assert!(matches!(spanning, OrderlyBatch::Owned(_)), "{spanning:?}");
        assert_eq!(offsets(&spanning), vec![2, 3]);
        assert!(spanning.iter().all(|m| m.reconsume_times == 0));
        let out = orderly_success(&mut core, &spanning, epoch, &cfg, &env, 6);
        assert_eq!(commits(&out), vec![4]);
        let (last, _) = orderly_batch_of(&out);
        assert!(matches!(last, OrderlyBatch::Pull { .. }), "{last:?}");
        assert_eq!(offsets(&last), vec![4]);
    }

    /// Settles the call over `span` as one that failed (suspend) and finished at once; checks
    /// that it chained nothing and was settled, and returns the actions.
    fn failed_at_once(
        core: &mut QueueCore,
        span: BatchSpan,
        epoch: u64,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
    ) -> Vec<QueueAction> {
        let context = OrderlyContext::new(MessageQueue::new("T", "b", 0), cfg);
        let status = OrderlyStatus::SuspendCurrentQueueAMoment;
        let mut out = Vec::new();
        let next = core
            .on_orderly_consumed_at_once(span, epoch, status, &context, cfg, env, now_ms, &mut out);
        assert!(next.is_none(), "a failed call chains nothing");
        assert_eq!(core.unsettled, 0, "settled");
        out
    }

    /// A call is settled at once by its span alone, and the core rebuilds its batch as it
    /// handed it out whenever the caller needs the messages again (a call that failed, waits
    /// or panicked). A failed call settled at once goes back like any failed call.
    #[test]
    fn the_batch_of_a_call_in_flight_is_rebuilt_from_its_span() {
        let (cfg, env, mut core, out) = orderly_in_pairs_after_a_pull();
        let (first, epoch) = orderly_batch_of(&out);
        let span = BatchSpan::of(&first);
        let rebuilt = core.batch_in_flight(span, epoch).expect("in flight");
        assert!(matches!(rebuilt, OrderlyBatch::Pull { .. }), "{rebuilt:?}");
        assert_eq!(offsets(&rebuilt), vec![0, 1]);
        assert!(
            core.batch_in_flight(span, epoch + 1).is_none(),
            "another epoch's"
        );
        let other = BatchSpan {
            first_offset: 1,
            len: 2,
        };
        assert!(
            core.batch_in_flight(other, epoch).is_none(),
            "not this batch"
        );

        failed_at_once(&mut core, span, epoch, &cfg, &env, 2);
        assert!(
            core.batch_in_flight(span, epoch).is_none(),
            "no longer in flight"
        );
        let mut out = Vec::new();
        core.on_consume_timer(&cfg, 4_000, &mut out);
        let (again, epoch) = orderly_batch_of(&out);
        assert_eq!(
            offsets(&again),
            vec![0, 1],
            "the failed batch comes back first"
        );
        assert!(again.iter().all(|m| m.reconsume_times == 1), "{again:?}");
        let rebuilt = core
            .batch_in_flight(BatchSpan::of(&again), epoch)
            .expect("in flight");
        assert_eq!(offsets(&rebuilt), vec![0, 1]);
        assert!(
            rebuilt.iter().all(|m| m.reconsume_times == 1),
            "{rebuilt:?}"
        );
    }

    #[test]
    fn the_message_of_a_key_ordered_call_in_flight_is_rebuilt_from_its_span() {
        let (cfg, env, mut core, messages, out) = key_ordered_after_pull(&["a", "a"], |_| {});
        assert_eq!(key_calls(&out), [0]);
        let epoch = core.epoch;
        let span = BatchSpan::of(&messages[0..1]);
        let rebuilt = core.batch_in_flight(span, epoch).expect("in flight");
        assert_eq!(rebuilt.first().map(|m| m.queue_offset), Some(0));
        let waiting = BatchSpan::of(&messages[1..2]);
        assert!(
            core.batch_in_flight(waiting, epoch).is_none(),
            "not in flight"
        );

        let out = failed_at_once(&mut core, span, epoch, &cfg, &env, 10);
        let (_, due) = *wake_ups(&out).first().expect("the key pauses");
        let mut out = Vec::new();
        core.on_key_wake_timer(due, &cfg, due, &mut out);
        assert_eq!(
            key_calls(&out),
            [0],
            "the failed message again, before the next"
        );
        let rebuilt = core.batch_in_flight(span, epoch).expect("in flight again");
        assert_eq!(
            rebuilt.first().map(|m| m.reconsume_times),
            Some(1),
            "with its count bumped"
        );
    }

    /// An orderly queue that consumed offset 0 of 0..4 and runs the batch of offset 1, then
    /// lost its lock and got it back.
    fn orderly_relocked_during_a_batch() -> (PushConsumerConfig, QueueCore, OrderlyBatch, u64) {
        let mut cfg = cfg();
        cfg.consume_mode = ConsumeMode::Orderly;
        let env = env(&cfg);
        let (mut core, order) = locked_orderly_core(&cfg, &env);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..4)), None, &cfg, &env, 1, &mut out);
        let (first, epoch) = orderly_batch_of(&out);
        let out = orderly_success(&mut core, &first, epoch, &cfg, &env, 2);
        assert_eq!(commits(&out), vec![1]);
        let (second, epoch) = orderly_batch_of(&out);
        assert_eq!(second[0].queue_offset, 1);
        let mut out = Vec::new();
        core.on_lock_result(Ok(false), &cfg, &env, 3, &mut out);
        core.on_lock_result(Ok(true), &cfg, &env, 4, &mut out);
        (cfg, core, second, epoch)
    }

    #[test]
    fn a_relocked_orderly_queue_keeps_its_cache_when_nobody_consumed_meanwhile() {
        let (cfg, mut core, running, epoch) = orderly_relocked_during_a_batch();
        let env = env(&cfg);
        let mut out = Vec::new();
        core.on_recomputed_offset(StoredOffset::Found(1), &cfg, &env, 5, &mut out);
        assert!(
            !out.iter()
                .any(|a| matches!(a, QueueAction::Pull(order) if order.offset < 4)),
            "cached messages are not fetched (and consumed) again: {out:?}"
        );
        let out = orderly_success(&mut core, &running, epoch, &cfg, &env, 6);
        assert_eq!(commits(&out), vec![2], "the running batch still counts");
    }

    #[test]
    fn a_relocked_orderly_queue_continues_where_another_member_stopped() {
        let (cfg, mut core, running, epoch) = orderly_relocked_during_a_batch();
        let env = env(&cfg);
        let mut out = Vec::new();
        core.on_recomputed_offset(StoredOffset::Found(3), &cfg, &env, 5, &mut out);
        assert!(
            out.iter().any(|a| matches!(a, QueueAction::AdoptOffset(3))),
            "{out:?}"
        );
        assert_eq!(core.next_offset, Some(3), "the next pull starts there");
        let out = orderly_success(&mut core, &running, epoch, &cfg, &env, 6);
        assert!(commits(&out).is_empty(), "the old batch commits nothing");
    }

    #[test]
    fn a_broker_that_lost_its_data_is_read_again_from_its_start() {
        let cfg = cfg();
        let env = env(&cfg);
        let (mut core, _) = started(&cfg, 0);
        let mut out = Vec::new();
        core.reset_offset(50, &cfg, &env, 1, &mut out);
        let order = first_pull(&out).expect("a pull from 50");
        // The restarted broker holds 3 messages; a 5.x broker suggests its end.
        let moved = PullResponse {
            status: PullStatus::OffsetIllegal,
            next_begin_offset: 3,
            min_offset: 0,
            max_offset: 3,
            suggest_broker_id: 0,
            messages: Vec::new(),
            unfiltered: 0,
        };
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(moved), None, &cfg, &env, 2, &mut out);
        assert!(
            out.iter().any(|a| matches!(a, QueueAction::AdoptOffset(0))),
            "{out:?}"
        );
        assert!(out
            .iter()
            .any(|a| matches!(a, QueueAction::Pull(order) if order.offset == 0)));
    }

    #[test]
    fn a_broker_that_forgot_the_group_gets_a_heartbeat_and_a_quick_retry() {
        let cfg = cfg();
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let unknown = pull_refused(response_code::SUBSCRIPTION_NOT_EXIST);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Err(unknown), None, &cfg, &env, 1, &mut out);
        assert!(
            out.iter().any(|a| matches!(a, QueueAction::Heartbeat)),
            "{out:?}"
        );
        assert!(
            out.iter().any(
                |a| matches!(a, QueueAction::PullAfter(d) if *d == Duration::from_millis(500))
            ),
            "{out:?}"
        );
    }

    #[test]
    fn a_queue_whose_topic_vanished_is_read_from_0_when_it_comes_back() {
        let cfg = cfg();
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..3)), None, &cfg, &env, 1, &mut out);
        let old_calls = consumes(&out);
        let order = first_pull(&out).expect("a pull from 3");
        assert_eq!(order.offset, 3);
        let gone = pull_refused(response_code::TOPIC_NOT_EXIST);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Err(gone), None, &cfg, &env, 2, &mut out);
        assert!(
            out.iter().any(|a| matches!(a, QueueAction::AdoptOffset(0))),
            "the offset store forgets the old position: {out:?}"
        );
        let mut out = Vec::new();
        core.on_pull_timer(&cfg, &env, 3_000, &mut out);
        assert!(
            out.iter()
                .any(|a| matches!(a, QueueAction::Pull(order) if order.offset == 0)),
            "the reborn queue is read from its start: {out:?}"
        );
        // Calls of the old life that end now must not commit its offsets.
        let mut out = Vec::new();
        for (m, r, e) in &old_calls {
            core.on_consumed(&m[r.clone()], *e, OK, &cfg, &env, 3_001, &mut out);
        }
        assert!(!old_calls.is_empty());
        assert!(commits(&out).is_empty(), "{out:?}");
    }

    #[test]
    fn a_dropped_queue_finishes_when_its_calls_settle() {
        let cfg = cfg();
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..1)), None, &cfg, &env, 1, &mut out);
        let (m, r, e) = consumes(&out).remove(0);
        let mut out = Vec::new();
        assert!(core.drop_queue(&mut out), "a call is in flight");
        assert!(out.is_empty());
        core.on_consumed(&m[r], e, OK, &cfg, &env, 2, &mut out);
        let finish: Vec<_> = out
            .iter()
            .filter_map(|a| match a {
                QueueAction::Finish { committed, .. } => Some(*committed),
                _ => None,
            })
            .collect();
        assert_eq!(finish, vec![Some(1)]);
        assert!(!out.iter().any(|a| matches!(a, QueueAction::Pull(_))));
        core.force_finish(&mut out);
        assert_eq!(
            out.iter()
                .filter(|a| matches!(a, QueueAction::Finish { .. }))
                .count(),
            1,
            "finished once"
        );
    }

    #[test]
    fn a_filtered_stretch_moves_the_commit_only_once_the_cache_is_empty() {
        let cfg = cfg();
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..3)), None, &cfg, &env, 1, &mut out);
        // What the gauges read: three one-byte bodies.
        assert_eq!(core.cached_amount(), (3, 3));
        let calls = consumes(&out);
        let nothing_matched = |next: i64| PullResponse {
            status: PullStatus::NoMatchedMsg,
            next_begin_offset: next,
            min_offset: 0,
            max_offset: next,
            suggest_broker_id: 0,
            messages: Vec::new(),
            unfiltered: 0,
        };
        // 3..10 held nothing for this subscription while 0..3 still run: no commit past them.
        let order = first_pull(&out).expect("the next pull");
        let mut out = Vec::new();
        core.on_pull_answer(
            &order,
            Ok(nothing_matched(10)),
            None,
            &cfg,
            &env,
            2,
            &mut out,
        );
        assert!(commits(&out).is_empty(), "{out:?}");
        for (m, r, e) in &calls {
            core.on_consumed(&m[r.clone()], *e, OK, &cfg, &env, 3, &mut out);
        }
        assert_eq!(core.cached_amount(), (0, 0));
        // Once 0..3 are done, nothing is left below 10: the commit goes there at once, not
        // to 3 until a later pull answers (a long poll holds it up to 15 s).
        assert_eq!(commits(&out).last(), Some(&10), "{out:?}");
        // 10..20 held nothing either: with the cache empty the commit follows the broker.
        let order = first_pull(&out).expect("the pull from 10");
        assert_eq!(order.offset, 10);
        let mut out = Vec::new();
        core.on_pull_answer(
            &order,
            Ok(nothing_matched(20)),
            None,
            &cfg,
            &env,
            4,
            &mut out,
        );
        assert_eq!(commits(&out), vec![20]);
    }

    #[test]
    fn a_filtered_tail_of_an_answer_is_committed_with_its_last_message() {
        // The broker scanned 0..8 and selected 0 and 2 (the others are filtered out).
        let answer = || PullResponse {
            next_begin_offset: 8,
            max_offset: 8,
            messages: vec![message(0), message(2)],
            ..found(0..2)
        };
        let cfg = cfg();
        let concurrent = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(answer()), None, &cfg, &concurrent, 1, &mut out);
        let calls = consumes(&out);
        let mut out = Vec::new();
        for (m, r, e) in &calls {
            core.on_consumed(&m[r.clone()], *e, OK, &cfg, &concurrent, 2, &mut out);
        }
        assert_eq!(commits(&out).last(), Some(&8), "concurrent: {out:?}");

        let mut cfg = cfg;
        cfg.consume_mode = ConsumeMode::Orderly;
        let env = env(&cfg);
        let (mut core, order) = locked_orderly_core(&cfg, &env);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(answer()), None, &cfg, &env, 0, &mut out);
        let (first, epoch) = orderly_batch_of(&out);
        let mut batch = first.to_vec();
        let mut committed = Vec::new();
        loop {
            let (next, out) = succeeded_at_once(&mut core, &batch, epoch, &cfg, &env);
            committed.extend(commits(&out));
            match next {
                Some(next) => batch = next.to_vec(),
                None => break,
            }
        }
        assert_eq!(committed.last(), Some(&8), "orderly: {committed:?}");
    }

    #[test]
    fn a_pull_waiting_out_a_broker_error_is_not_hurried_by_finished_calls() {
        let cfg = cfg();
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..2)), None, &cfg, &env, 1, &mut out);
        let calls = consumes(&out);
        let next = first_pull(&out).expect("the next pull");
        let mut out = Vec::new();
        let busy = pull_refused(response_code::SYSTEM_ERROR);
        core.on_pull_answer(&next, Err(busy), None, &cfg, &env, 2, &mut out);
        assert!(
            out.iter().any(|a| matches!(a, QueueAction::PullAfter(_))),
            "{out:?}"
        );
        // A call ending frees cache room, but the failing broker gets its pause.
        let mut out = Vec::new();
        let (m, r, e) = &calls[0];
        core.on_consumed(&m[r.clone()], *e, OK, &cfg, &env, 3, &mut out);
        assert_eq!(commits(&out), vec![1]);
        assert!(first_pull(&out).is_none(), "{out:?}");
    }

    #[test]
    fn a_full_cache_delays_the_pull() {
        let mut cfg = cfg();
        cfg.pull_threshold_for_queue = 1;
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..3)), None, &cfg, &env, 1, &mut out);
        assert!(!out.iter().any(|a| matches!(a, QueueAction::Pull(_))));
        assert!(out.iter().any(|a| matches!(a, QueueAction::PullAfter(_))));
    }

    #[test]
    fn orderly_messages_wait_for_the_orderly_stage() {
        let mut cfg = cfg();
        cfg.consume_mode = ConsumeMode::Orderly;
        cfg.message_model = crate::consumer::config::MessageModel::Broadcasting;
        let env = env(&cfg);
        let (mut core, order) = started(&cfg, 0);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..2)), None, &cfg, &env, 1, &mut out);
        assert!(out
            .iter()
            .any(|a| matches!(a, QueueAction::ConsumeOrderly { batch, .. } if batch.len() == 1)));
        assert_eq!(core.cache_stats().count, 2);
        let _ = MessageQueue::new("T", "b", 0);
    }

    /// A key-ordered pull of `keys.len()` messages from offset 0, each with its `KEYS`.
    fn keyed_pull(keys: &[&str]) -> PullResponse {
        let mut response = found(0..keys.len() as i64);
        for (message, key) in response.messages.iter_mut().zip(keys) {
            message
                .message
                .properties
                .insert(crate::message::property::KEYS, key);
        }
        response
    }

    /// The offsets of the key-ordered calls among `out`.
    fn key_calls(out: &[QueueAction]) -> Vec<i64> {
        out.iter()
            .filter_map(|a| match a {
                QueueAction::ConsumeOrderly { batch, .. } => batch.first().map(|m| m.queue_offset),
                _ => None,
            })
            .collect()
    }

    /// A failed key-ordered call of `message` (suspend as the context says).
    fn key_failure(
        core: &mut QueueCore,
        message: &MessageExt,
        suspend_ms: u64,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
        now_ms: i64,
    ) -> Vec<QueueAction> {
        let mut context = OrderlyContext::new(MessageQueue::new("T", "b", 0), cfg);
        context.suspend_time = Duration::from_millis(suspend_ms);
        let mut out = Vec::new();
        core.on_orderly_consumed(
            std::slice::from_ref(message),
            core.epoch,
            OrderlyStatus::SuspendCurrentQueueAMoment,
            &context,
            cfg,
            env,
            now_ms,
            &mut out,
        );
        out
    }

    /// The wake-ups among `out`: (delay in ms, due time).
    fn wake_ups(out: &[QueueAction]) -> Vec<(u128, i64)> {
        out.iter()
            .filter_map(|a| match a {
                QueueAction::WakeKeysAfter { delay, due_ms } => Some((delay.as_millis(), *due_ms)),
                _ => None,
            })
            .collect()
    }

    /// A locked key-ordered queue (`tune` adjusts the configuration) after one pull of messages
    /// with `keys`: the configuration, environment, core, messages and the pull's actions.
    fn key_ordered_after_pull(
        keys: &[&str],
        tune: impl FnOnce(&mut PushConsumerConfig),
    ) -> (
        PushConsumerConfig,
        QueueEnv,
        QueueCore,
        Vec<MessageExt>,
        Vec<QueueAction>,
    ) {
        let mut cfg = cfg();
        cfg.consume_mode = ConsumeMode::Orderly;
        cfg.key_ordered = true;
        tune(&mut cfg);
        let env = env(&cfg);
        let (mut core, order) = locked_orderly_core(&cfg, &env);
        let mut out = Vec::new();
        let pull = keyed_pull(keys);
        let messages = pull.messages.clone();
        core.on_pull_answer(&order, Ok(pull), None, &cfg, &env, 0, &mut out);
        (cfg, env, core, messages, out)
    }

    #[test]
    fn a_paused_key_does_not_hold_up_the_other_keys() {
        let (cfg, env, mut core, messages, out) =
            key_ordered_after_pull(&["a", "b", "b", "b"], |_| {});
        assert_eq!(key_calls(&out), [0, 1], "one call per key");
        // Key a fails and pauses for a second ...
        let out = key_failure(&mut core, &messages[0], 1_000, &cfg, &env, 10);
        assert!(key_calls(&out).is_empty());
        assert_eq!(wake_ups(&out), [(1_000, 1_010)]);
        // ... while key b goes on at once, message after message.
        let out = orderly_success(&mut core, &messages[1..2], 0, &cfg, &env, 20);
        assert_eq!(
            key_calls(&out),
            [2],
            "b's next message runs without waiting for a"
        );
        let out = orderly_success(&mut core, &messages[2..3], 0, &cfg, &env, 30);
        assert_eq!(key_calls(&out), [3]);
        assert!(
            wake_ups(&out).is_empty(),
            "a's pause has its wake-up already"
        );
        // a's wake-up: a runs again.
        let mut out = Vec::new();
        core.on_key_wake_timer(1_010, &cfg, 1_010, &mut out);
        assert_eq!(key_calls(&out), [0]);
    }

    #[test]
    fn each_pause_wakes_its_key_on_time_and_only_once() {
        let (cfg, env, mut core, messages, out) = key_ordered_after_pull(&["a", "b"], |_| {});
        assert_eq!(key_calls(&out), [0, 1]);
        let out = key_failure(&mut core, &messages[0], 1_000, &cfg, &env, 10);
        assert_eq!(wake_ups(&out), [(1_000, 1_010)]);
        // b pauses for 10 ms: a wake-up at 30 ms, not at a's 1,010 ms.
        let out = key_failure(&mut core, &messages[1], 10, &cfg, &env, 20);
        assert_eq!(wake_ups(&out), [(10, 30)]);
        // The timer fires a millisecond early by the core's clock: b is due all the same.
        let mut out = Vec::new();
        core.on_key_wake_timer(30, &cfg, 29, &mut out);
        assert_eq!(key_calls(&out), [1], "b again after its 10 ms");
        assert!(wake_ups(&out).is_empty(), "no second wake-up for a");
        // b fails again, with a shorter pause each time: one wake-up per pause, no more.
        for (pause, now) in [(15, 40), (12, 60), (11, 80)] {
            let out = key_failure(&mut core, &messages[1], pause, &cfg, &env, now);
            assert_eq!(wake_ups(&out), [(pause as u128, now + pause as i64)]);
            let mut out = Vec::new();
            core.on_key_wake_timer(now + pause as i64, &cfg, now + pause as i64, &mut out);
            assert_eq!(key_calls(&out), [1]);
            assert!(wake_ups(&out).is_empty(), "{out:?}");
        }
        // a's own wake-up still comes, and a runs.
        let mut out = Vec::new();
        core.on_key_wake_timer(1_010, &cfg, 1_010, &mut out);
        assert_eq!(key_calls(&out), [0]);
    }

    #[test]
    fn a_key_runs_its_next_message_in_the_same_turn_and_commits_as_it_goes() {
        let (cfg, env, mut core, _, out) = key_ordered_after_pull(&["a", "a", "a", "b"], |_| {});
        assert_eq!(key_calls(&out), [0, 3]);
        let epoch = core.epoch;
        let mut out = Vec::new();
        let second = core
            .next_of_key_at_once(0, epoch, &cfg, &env, 10, &mut out)
            .expect("a's next message at once");
        assert_eq!(second.first().map(|m| m.queue_offset), Some(1));
        assert_eq!(
            core.unsettled, 2,
            "the next call takes the place of the first"
        );
        assert!(
            out.iter().any(|a| matches!(a, QueueAction::Commit(1))),
            "{out:?}"
        );
        // Not for a result of another epoch, nor without the broker's lock.
        let mut out = Vec::new();
        assert!(core
            .next_of_key_at_once(1, epoch + 1, &cfg, &env, 10, &mut out)
            .is_none());
        let lock_expired = 10 + cfg.lock_max_live_time.as_millis() as i64 + 1;
        assert!(core
            .next_of_key_at_once(1, epoch, &cfg, &env, lock_expired, &mut out)
            .is_none());
        assert!(out.is_empty(), "nothing changed: {out:?}");
        // The chain's last call settles as usual.
        let out = orderly_success(&mut core, &second, epoch, &cfg, &env, 20);
        assert_eq!(key_calls(&out), [2]);
        assert_eq!(core.committed, Some(2));
    }

    #[test]
    fn a_key_does_not_pass_over_another_key_that_may_run() {
        // One call at a time: b waits for room while a's messages follow each other.
        let (cfg, env, mut core, _, out) = key_ordered_after_pull(&["a", "a", "b"], |cfg| {
            cfg.consume_concurrency_max = Some(1)
        });
        assert_eq!(key_calls(&out), [0]);
        let mut out = Vec::new();
        assert!(
            core.next_of_key_at_once(0, core.epoch, &cfg, &env, 10, &mut out)
                .is_none(),
            "b waits to run: a's next message must not go first"
        );
    }

    /// A locked orderly queue (batches of one) after a pull of offsets 0..3: the configuration,
    /// environment, core, the first batch it hands out and its epoch.
    fn orderly_after_a_pull() -> (PushConsumerConfig, QueueEnv, QueueCore, OrderlyBatch, u64) {
        let mut cfg = cfg();
        cfg.consume_mode = ConsumeMode::Orderly;
        let env = env(&cfg);
        let (mut core, order) = locked_orderly_core(&cfg, &env);
        let mut out = Vec::new();
        core.on_pull_answer(&order, Ok(found(0..3)), None, &cfg, &env, 0, &mut out);
        let (first, epoch) = orderly_batch_of(&out);
        (cfg, env, core, first, epoch)
    }

    /// The orderly call over `batch` (of `epoch`) succeeded at once: the next batch the core
    /// hands out in its place, if any, and the actions.
    fn succeeded_at_once(
        core: &mut QueueCore,
        batch: &[MessageExt],
        epoch: u64,
        cfg: &PushConsumerConfig,
        env: &QueueEnv,
    ) -> (Option<OrderlyBatch>, Vec<QueueAction>) {
        let context = OrderlyContext::new(MessageQueue::new("T", "b", 0), cfg);
        let mut out = Vec::new();
        let next = core.on_orderly_consumed_at_once(
            BatchSpan::of(batch),
            epoch,
            OrderlyStatus::Success,
            &context,
            cfg,
            env,
            10,
            &mut out,
        );
        (next, out)
    }

    #[test]
    fn the_next_orderly_batch_takes_over_the_spare_count_on_its_pull_and_no_other() {
        let (cfg, env, mut core, first, epoch) = orderly_after_a_pull();
        let OrderlyBatch::Pull { messages: pull, .. } = &first else {
            panic!("a batch of the pull: {first:?}");
        };
        let pull = Arc::clone(pull);
        let counts_before = Arc::strong_count(&pull);
        // The executor hands back the first batch's count: the second batch takes it over.
        let first_messages: Vec<MessageExt> = first.to_vec();
        let OrderlyBatch::Pull {
            messages: spare, ..
        } = first
        else {
            unreachable!()
        };
        core.spare_pull = Some(spare);
        let (second, _) = succeeded_at_once(&mut core, &first_messages, epoch, &cfg, &env);
        let second = second.expect("the next batch at once");
        assert!(core.spare_pull.is_none(), "taken over");
        // The settled message left the cache, whose entry held a count of its own; the second
        // batch counts nothing new.
        assert_eq!(Arc::strong_count(&pull), counts_before - 1, "no new count");
        assert_eq!(second.first().map(|m| m.queue_offset), Some(1));
        // A spare count on another pull stays the executor's to take back.
        let other = Arc::new(vec![message(7)]);
        core.spare_pull = Some(Arc::clone(&other));
        let (third, _) = succeeded_at_once(&mut core, &second, epoch, &cfg, &env);
        let third = third.expect("the last batch");
        assert!(core
            .spare_pull
            .as_ref()
            .is_some_and(|spare| Arc::ptr_eq(spare, &other)));
        assert_eq!(third.first().map(|m| m.queue_offset), Some(2));
        // Counted anew for the third, while the second's message left the cache.
        assert_eq!(Arc::strong_count(&pull), counts_before - 1);
        drop(second);
        assert_eq!(Arc::strong_count(&pull), counts_before - 2);
    }

    #[test]
    fn an_orderly_queue_runs_its_next_batch_in_the_same_turn_and_commits_as_it_goes() {
        let (cfg, env, mut core, first, epoch) = orderly_after_a_pull();
        let (second, out) = succeeded_at_once(&mut core, &first, epoch, &cfg, &env);
        let second = second.expect("the next batch at once");
        assert_eq!(second.first().map(|m| m.queue_offset), Some(1));
        assert_eq!(
            core.unsettled, 1,
            "the next call takes the place of the first"
        );
        assert!(
            out.iter().any(|a| matches!(a, QueueAction::Commit(1))),
            "{out:?}"
        );
        assert!(
            !out.iter()
                .any(|a| matches!(a, QueueAction::ConsumeOrderly { .. })),
            "returned, not an action"
        );
        let (third, _) = succeeded_at_once(&mut core, &second, epoch, &cfg, &env);
        let third = third.expect("the last batch at once");
        // The last one: nothing more to run, so it settles as usual.
        let (none, out) = succeeded_at_once(&mut core, &third, epoch, &cfg, &env);
        assert!(none.is_none());
        assert_eq!(core.unsettled, 0);
        assert!(
            out.iter().any(|a| matches!(a, QueueAction::Commit(3))),
            "{out:?}"
        );
        // A result of an earlier epoch (the offset was reset meanwhile) settles as usual too,
        // and chains nothing.
        let (cfg, env, mut core, first, epoch) = orderly_after_a_pull();
        let mut out = Vec::new();
        core.reset_offset(0, &cfg, &env, 5, &mut out);
        assert_ne!(core.epoch, epoch);
        assert_eq!(core.unsettled, 1, "the old call is still out");
        let (stale, _) = succeeded_at_once(&mut core, &first, epoch, &cfg, &env);
        assert!(stale.is_none());
        assert_eq!(core.unsettled, 0, "settled");
    }
}
