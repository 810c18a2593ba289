//! The per-queue cache of pulled messages not yet consumed (Java `ProcessQueue`).
//!
//! Messages are kept ordered by queue offset. The smallest offset still cached is the queue's
//! consume offset: everything below it has been consumed, so that is what gets committed
//! ("at least once": a message is never skipped, a slow one holds the offset back). The cache
//! also drives flow control (count, body bytes, offset span) and, in orderly mode, holds the
//! batch being consumed apart from the waiting messages.
//!
//! ```ignore
//! use rocketmq_actor::consumer::process_queue::{CachedMessage, ProcessQueue};
//!
//! #[derive(Clone)]
//! struct Msg(i64);
//! impl CachedMessage for Msg {
//!     fn queue_offset(&self) -> i64 { self.0 }
//!     fn body_len(&self) -> usize { 10 }
//! }
//!
//! let mut pq = ProcessQueue::new(0);
//! pq.put_messages([Msg(100), Msg(101), Msg(102)]);
//! assert_eq!(pq.remove_messages(&[101], 5), Some(100)); // 100 still in flight: offset stays
//! assert_eq!(pq.remove_messages(&[100], 6), Some(102));
//! assert_eq!(pq.remove_messages(&[102], 7), Some(103)); // empty: one past the highest seen
//! ```

use serde::{Deserialize, Serialize};

use super::offset_map::OffsetMap;
use std::sync::Arc;
use std::time::Duration;

/// What the process queue needs to know about a message. Implemented for
/// `crate::message::MessageExt` and the consumer core's cache entries.
pub trait CachedMessage {
    /// The message's logical offset in its queue.
    fn queue_offset(&self) -> i64;
    /// The size of its body in bytes (what the size thresholds count).
    fn body_len(&self) -> usize;
    /// How many times the broker says it was delivered before (`reconsumeTimes`); 0 for a
    /// first delivery. Orderly consumption counts local redeliveries on top of it.
    fn reconsume_times(&self) -> i32 {
        0
    }
    /// Sets the count [`CachedMessage::reconsume_times`] reads, where the type keeps one (the
    /// orderly service sets it on each message it hands out, as Java does).
    fn set_reconsume_times(&mut self, _times: i32) {}
}

impl CachedMessage for crate::message::MessageExt {
    fn queue_offset(&self) -> i64 {
        self.queue_offset
    }
    fn body_len(&self) -> usize {
        self.message.body.len()
    }
    fn reconsume_times(&self) -> i32 {
        self.reconsume_times
    }
    fn set_reconsume_times(&mut self, times: i32) {
        self.reconsume_times = times;
    }
}

const MIB: u64 = 1024 * 1024;

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

struct Entry<M> {
    message: M,
    body_len: u64,
    consume_started_ms: Option<i64>,
}

/// The numbers flow control looks at (see [`super::flow`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Cached messages, including an orderly batch being consumed.
    pub count: u64,
    /// Sum of their body sizes in bytes.
    pub body_bytes: u64,
    /// Highest minus lowest waiting offset (0 when empty).
    pub span: i64,
}

/// A process queue's state as reported in `ConsumerRunningInfo` (Java `ProcessQueueInfo`;
/// serialized with Java's property names, including the misspelt `droped`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessQueueSnapshot {
    /// The consume offset the offset store holds for the queue.
    pub commit_offset: i64,
    /// Lowest waiting offset (0 when none).
    pub cached_msg_min_offset: i64,
    /// Highest waiting offset (0 when none).
    pub cached_msg_max_offset: i64,
    /// Waiting messages (an orderly batch being consumed is counted apart).
    pub cached_msg_count: i64,
    /// Cached body bytes in whole MiB.
    #[serde(rename = "cachedMsgSizeInMiB")]
    pub cached_msg_size_in_mib: i64,
    /// Orderly: lowest offset of the batch being consumed (0 when none).
    pub transaction_msg_min_offset: i64,
    /// Orderly: highest offset of the batch being consumed (0 when none).
    pub transaction_msg_max_offset: i64,
    /// Orderly: messages in the batch being consumed.
    pub transaction_msg_count: i64,
    /// Whether the broker lock is held (orderly clustering).
    pub locked: bool,
    /// How many unlock attempts were made for the queue.
    pub try_unlock_times: i64,
    /// When the lock was last granted (epoch ms).
    pub last_lock_timestamp: i64,
    /// Whether the queue was dropped (rebalanced away, offset reset…).
    #[serde(rename = "droped")]
    pub dropped: bool,
    /// When the queue was last pulled (epoch ms).
    pub last_pull_timestamp: i64,
    /// When messages of the queue were last consumed (epoch ms).
    pub last_consume_timestamp: i64,
}

/// The cache of one queue. `M` is the cached message type (see [`CachedMessage`]).
pub struct ProcessQueue<M> {
    /// Messages not yet consumed, by queue offset (Java `msgTreeMap`). In concurrent mode this
    /// includes messages being consumed.
    waiting: OffsetMap<Entry<M>>,
    /// Orderly: body sizes of the messages taken for consumption and not yet committed.
    consuming: OffsetMap<u64>,
    /// Orderly: the batches handed out since the last commit. The cache lends them rather than
    /// keeping copies: a commit (the usual outcome) only drops them; a message goes back to
    /// waiting as a copy of its lent self (rollback, suspend).
    lent: Vec<Arc<[M]>>,
    /// Orderly: the messages handed out by [`ProcessQueue::take_messages_kept`] since the last
    /// commit, in the order taken — kept here rather than lent, for entries that are cheap to
    /// copy (no allocation per batch).
    kept: Vec<M>,
    body_bytes: u64,
    highest_offset_put: Option<i64>,
    dispatching: bool,
    dropped: bool,
    try_unlock_times: u64,
    last_consume_ms: i64,
}

impl<M: CachedMessage> std::fmt::Debug for ProcessQueue<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessQueue")
            .field("waiting", &self.waiting.len())
            .field("consuming", &self.consuming.len())
            .field("body_bytes", &self.body_bytes)
            .field("min_offset", &self.min_cached_offset())
            .field("max_offset", &self.max_cached_offset())
            .field("dropped", &self.dropped)
            .finish()
    }
}

impl<M: CachedMessage> ProcessQueue<M> {
    /// An empty queue created at `now_ms` (pull, consume and lock clocks start there, as in
    /// Java, so a fresh queue is neither idle nor lock-expired).
    pub fn new(now_ms: i64) -> Self {
        ProcessQueue {
            waiting: OffsetMap::default(),
            consuming: OffsetMap::default(),
            lent: Vec::new(),
            kept: Vec::new(),
            body_bytes: 0,
            highest_offset_put: None,
            dispatching: false,
            dropped: false,
            try_unlock_times: 0,
            last_consume_ms: now_ms,
        }
    }

    /// Caches pulled messages. A message whose offset is already cached (waiting or being
    /// consumed) is ignored, so a duplicate delivery cannot be consumed twice from the cache.
    ///
    /// Returns whether the caller should start a consume loop: true when messages are waiting
    /// and no loop was running (the orderly service relies on it; the concurrent service
    /// submits every pulled batch regardless, as Java does).
    pub fn put_messages(&mut self, messages: impl IntoIterator<Item = M>) -> bool {
        self.put(messages, None)
    }

    /// [`ProcessQueue::put_messages`] for messages handed to the listener right away (the
    /// concurrent service): their consumption counts as started at `now_ms`, as if
    /// [`ProcessQueue::mark_consume_started`] had been called for each.
    pub fn put_messages_consuming(
        &mut self,
        messages: impl IntoIterator<Item = M>,
        now_ms: i64,
    ) -> bool {
        self.put(messages, Some(now_ms))
    }

    fn put(
        &mut self,
        messages: impl IntoIterator<Item = M>,
        consume_started_ms: Option<i64>,
    ) -> bool {
        for message in messages {
            let offset = message.queue_offset();
            let body_len = message.body_len() as u64;
            let entry = Entry {
                message,
                body_len,
                consume_started_ms,
            };
            // Pulled offsets grow: a message above everything cached cannot be a duplicate.
            let above_consuming = self.consuming.last_key().is_none_or(|last| last < offset);
            let entry = if above_consuming {
                self.waiting.try_append(offset, entry)
            } else {
                Err(entry)
            };
            if let Err(entry) = entry {
                if self.waiting.contains_key(&offset) || self.consuming.contains_key(&offset) {
                    continue;
                }
                self.waiting.insert(offset, entry);
            }
            self.body_bytes += body_len;
            self.highest_offset_put =
                Some(self.highest_offset_put.map_or(offset, |h| h.max(offset)));
        }
        if !self.waiting.is_empty() && !self.dispatching {
            self.dispatching = true;
            return true;
        }
        false
    }

    /// Removes consumed messages (concurrent mode) and returns the queue's new consume offset:
    /// the smallest offset still cached, or one past the highest offset ever cached when
    /// nothing is left. `None` when the cache was already empty (e.g. cleared by a drop), in
    /// which case the offset must not be touched.
    ///
    /// The result can be lower than an offset committed earlier (after an offset reset); the
    /// offset table's increase-only update takes care of that.
    pub fn remove_messages(&mut self, offsets: &[i64], now_ms: i64) -> Option<i64> {
        self.remove_offsets(offsets.iter().copied(), now_ms)
    }

    /// [`ProcessQueue::remove_messages`] for offsets from an iterator.
    pub fn remove_offsets(
        &mut self,
        offsets: impl IntoIterator<Item = i64>,
        now_ms: i64,
    ) -> Option<i64> {
        self.last_consume_ms = now_ms;
        if self.waiting.is_empty() {
            return None;
        }
        for offset in offsets {
            // Usually the lowest cached offset: taken from the front without a search.
            let removed = if self.waiting.first_key() == Some(offset) {
                self.waiting.pop_first().map(|(_, entry)| entry)
            } else {
                self.waiting.remove(&offset)
            };
            if let Some(entry) = removed {
                self.body_bytes = self.body_bytes.saturating_sub(entry.body_len);
            }
        }
        match self.waiting.first_key() {
            Some(first) => Some(first),
            None => self.highest_offset_put.map(|h| h + 1),
        }
    }

    /// Cached messages, including an orderly batch being consumed.
    pub fn cached_count(&self) -> usize {
        self.waiting.len() + self.consuming.len()
    }

    /// Body bytes of the cached messages.
    pub fn cached_body_bytes(&self) -> u64 {
        self.body_bytes
    }

    /// Body bytes in whole MiB, rounded down (what Java compares to the MiB thresholds).
    pub fn cached_size_mib(&self) -> u64 {
        self.body_bytes / MIB
    }

    /// Lowest waiting offset.
    pub fn min_cached_offset(&self) -> Option<i64> {
        self.waiting.first_key()
    }

    /// Highest waiting offset.
    pub fn max_cached_offset(&self) -> Option<i64> {
        self.waiting.last_key()
    }

    /// Highest minus lowest waiting offset, 0 when empty (Java `getMaxSpan`).
    pub fn span(&self) -> i64 {
        match (self.min_cached_offset(), self.max_cached_offset()) {
            (Some(lo), Some(hi)) => hi - lo,
            _ => 0,
        }
    }

    /// The numbers flow control needs.
    pub fn cache_stats(&self) -> CacheStats {
        CacheStats {
            count: self.cached_count() as u64,
            body_bytes: self.body_bytes,
            span: self.span(),
        }
    }

    /// Whether messages are waiting (Java `hasTempMessage`).
    pub fn has_waiting_messages(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Whether a message with this offset is waiting.
    pub fn contains(&self, offset: i64) -> bool {
        self.waiting.contains_key(&offset)
    }

    /// The waiting message at `offset`.
    pub fn get(&self, offset: i64) -> Option<&M> {
        self.waiting.get(&offset).map(|e| &e.message)
    }

    /// The waiting message at `offset`, to update it in place.
    pub fn get_mut(&mut self, offset: i64) -> Option<&mut M> {
        self.waiting.get_mut(&offset).map(|e| &mut e.message)
    }

    /// The waiting messages in offset order.
    pub fn waiting_messages(&self) -> impl Iterator<Item = &M> {
        self.waiting.values().map(|e| &e.message)
    }

    /// Records that consumption of these waiting messages started at `now_ms` (Java's
    /// `CONSUME_START_TIME` property), for [`ProcessQueue::expired_messages`].
    pub fn mark_consume_started(&mut self, offsets: &[i64], now_ms: i64) {
        for offset in offsets {
            if let Some(entry) = self.waiting.get_mut(offset) {
                entry.consume_started_ms = Some(now_ms);
            }
        }
    }

    /// [`ProcessQueue::mark_consume_started`] for offsets from an iterator.
    pub fn mark_offsets_consume_started(
        &mut self,
        offsets: impl IntoIterator<Item = i64>,
        now_ms: i64,
    ) {
        for offset in offsets {
            if let Some(entry) = self.waiting.get_mut(&offset) {
                entry.consume_started_ms = Some(now_ms);
            }
        }
    }

    /// When consumption of the waiting message at `offset` started, if it did.
    pub fn consume_started_ms(&self, offset: i64) -> Option<i64> {
        self.waiting.get(&offset).and_then(|e| e.consume_started_ms)
    }

    /// Concurrent mode's consume-timeout scan (Java `cleanExpiredMsg`): the offsets of the
    /// leading waiting messages, at most `limit` (Java: 16), whose consumption started more
    /// than `timeout` before `now_ms`. Only the head matters because only the head pins the
    /// offset; the scan stops at the first message that has not expired or not started.
    /// The caller sends each back for retry (delay level 3) and then removes it.
    pub fn expired_messages(&self, now_ms: i64, timeout: Duration, limit: usize) -> Vec<i64> {
        let timeout_ms = millis(timeout);
        self.waiting
            .iter()
            .take(limit)
            .take_while(|(_, e)| {
                e.consume_started_ms
                    .is_some_and(|started| now_ms.saturating_sub(started) > timeout_ms)
            })
            .map(|(offset, _)| offset)
            .collect()
    }

    /// Orderly: moves up to `batch` of the lowest waiting messages into the consuming batch and
    /// returns them. An empty result ends the consume loop (the next
    /// [`ProcessQueue::put_messages`] will ask for a new one).
    pub fn take_messages(&mut self, batch: usize, now_ms: i64) -> Arc<[M]> {
        self.take_messages_with(batch, now_ms, |_| {})
    }

    /// [`ProcessQueue::take_messages`], with `prepare` applied to each message before it is
    /// handed out (and lent: the cache keeps the returned batch, not a copy of it, until the
    /// commit).
    pub fn take_messages_with(
        &mut self,
        batch: usize,
        now_ms: i64,
        mut prepare: impl FnMut(&mut M),
    ) -> Arc<[M]> {
        self.last_consume_ms = now_ms;
        let count = batch.min(self.waiting.len());
        let mut take_one = || self.take_first(&mut prepare);
        let taken: Arc<[M]> = match count {
            0 => {
                self.dispatching = false;
                return Arc::new([]);
            }
            // The default batch size: no intermediate vector.
            1 => match take_one() {
                Some(message) => Arc::new([message]),
                None => return Arc::new([]),
            },
            _ => std::iter::from_fn(take_one).take(count).collect(),
        };
        self.lent.push(taken.clone());
        taken
    }

    /// [`ProcessQueue::take_messages_with`] for cheap-to-copy messages: the cache keeps the
    /// batch itself (reusing one buffer, so taking a batch allocates nothing) and the caller
    /// reads it from the returned slice.
    pub(crate) fn take_messages_kept(
        &mut self,
        batch: usize,
        now_ms: i64,
        mut prepare: impl FnMut(&mut M),
    ) -> &[M] {
        self.last_consume_ms = now_ms;
        let count = batch.min(self.waiting.len());
        if count == 0 {
            self.dispatching = false;
            return &[];
        }
        let start = self.kept.len();
        for _ in 0..count {
            let Some(message) = self.take_first(&mut prepare) else {
                break;
            };
            self.kept.push(message);
        }
        self.kept.get(start..).unwrap_or_default()
    }

    /// Moves the lowest waiting message to the consuming set, `prepare`d.
    fn take_first(&mut self, prepare: &mut impl FnMut(&mut M)) -> Option<M> {
        let (offset, entry) = self.waiting.pop_first()?;
        self.consuming.insert(offset, entry.body_len);
        let mut message = entry.message;
        prepare(&mut message);
        Some(message)
    }

    /// Orderly: the last `len` messages [`ProcessQueue::take_messages_kept`] handed out, as
    /// they are kept (the batch of the call under way).
    pub(crate) fn last_kept(&self, len: usize) -> &[M] {
        self.kept
            .get(self.kept.len().saturating_sub(len)..)
            .unwrap_or_default()
    }

    /// Orderly: the batch was consumed; forgets it and returns the new consume offset (one past
    /// the batch's highest offset), `None` if no batch was taken.
    pub fn commit(&mut self) -> Option<i64> {
        let last = self.consuming.last_key()?;
        let released: u64 = self.consuming.values().sum();
        self.body_bytes = self.body_bytes.saturating_sub(released);
        self.consuming.clear();
        self.lent.clear();
        self.kept.clear();
        Some(last + 1)
    }

    /// Orderly: the whole batch goes back to waiting, to be taken again.
    pub fn rollback(&mut self)
    where
        M: Clone,
    {
        let offsets: Vec<i64> = self.consuming.keys().collect();
        self.make_messages_consume_again(&offsets);
    }

    /// Orderly: these messages of the batch go back to waiting (the failed ones of a suspended
    /// batch, whose reconsume count was bumped).
    pub fn make_messages_consume_again(&mut self, offsets: &[i64])
    where
        M: Clone,
    {
        for offset in offsets {
            let Some(message) = self.consuming_message(*offset).cloned() else {
                continue;
            };
            if let Some(body_len) = self.consuming.remove(offset) {
                self.waiting.insert(
                    *offset,
                    Entry {
                        message,
                        body_len,
                        consume_started_ms: None,
                    },
                );
            }
        }
        let consuming = &self.consuming;
        self.kept
            .retain(|m| consuming.contains_key(&m.queue_offset()));
        self.lent.retain(|batch| {
            batch
                .iter()
                .any(|m| consuming.contains_key(&m.queue_offset()))
        });
    }

    /// Orderly: messages of the batch being consumed.
    pub fn consuming_count(&self) -> usize {
        self.consuming.len()
    }

    /// Orderly: offsets of the messages taken for consumption and not yet committed, in
    /// order (with auto-commit off they can span several listener calls).
    pub fn consuming_offsets(&self) -> Vec<i64> {
        self.consuming.keys().collect()
    }

    /// Orderly: the message at `offset` in the batch being consumed.
    pub fn consuming_message(&self, offset: i64) -> Option<&M> {
        if !self.consuming.contains_key(&offset) {
            return None;
        }
        // Kept messages are in offset order unless one went back to waiting from the middle
        // of what is consuming (then it is taken again after higher ones).
        let kept = match self
            .kept
            .binary_search_by_key(&offset, CachedMessage::queue_offset)
        {
            Ok(at) => self.kept.get(at),
            Err(_) => self.kept.iter().rev().find(|m| m.queue_offset() == offset),
        };
        if kept.is_some() {
            return kept;
        }
        // Batches are lent in offset order, each sorted.
        self.lent.iter().rev().find_map(|batch| {
            batch
                .binary_search_by_key(&offset, |m| m.queue_offset())
                .ok()
                .and_then(|at| batch.get(at))
        })
    }

    /// Drops every cached message (offset reset, queue dropped).
    pub fn clear(&mut self) {
        self.waiting.clear();
        self.consuming.clear();
        self.lent.clear();
        self.kept.clear();
        self.body_bytes = 0;
        self.highest_offset_put = None;
    }

    /// Whether the queue was dropped; a dropped queue must not be pulled, and results of its
    /// consumption must not move the offset.
    pub fn is_dropped(&self) -> bool {
        self.dropped
    }

    /// Marks the queue dropped (or not).
    pub fn set_dropped(&mut self, dropped: bool) {
        self.dropped = dropped;
    }

    /// When messages were last removed or taken for consumption.
    pub fn last_consume_ms(&self) -> i64 {
        self.last_consume_ms
    }

    /// Counts an unlock attempt.
    pub fn inc_try_unlock_times(&mut self) {
        self.try_unlock_times += 1;
    }

    /// Unlock attempts so far.
    pub fn try_unlock_times(&self) -> u64 {
        self.try_unlock_times
    }

    /// The queue's state for `ConsumerRunningInfo`, with the offset store's `commit_offset`.
    pub fn snapshot(&self, commit_offset: i64) -> ProcessQueueSnapshot {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        ProcessQueueSnapshot {
            commit_offset,
            cached_msg_min_offset: self.min_cached_offset().unwrap_or(0),
            cached_msg_max_offset: self.max_cached_offset().unwrap_or(0),
            cached_msg_count: count(self.waiting.len()),
            cached_msg_size_in_mib: i64::try_from(self.cached_size_mib()).unwrap_or(i64::MAX),
            transaction_msg_min_offset: self.consuming.first_key().unwrap_or(0),
            transaction_msg_max_offset: self.consuming.last_key().unwrap_or(0),
            transaction_msg_count: count(self.consuming.len()),
            // The lock and the pull clock are the queue core's: its executor fills them in.
            locked: false,
            try_unlock_times: i64::try_from(self.try_unlock_times).unwrap_or(i64::MAX),
            last_lock_timestamp: 0,
            dropped: self.dropped,
            last_pull_timestamp: 0,
            last_consume_timestamp: self.last_consume_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[derive(Debug, Clone, PartialEq)]
    struct Msg {
        offset: i64,
        body: usize,
    }

    impl CachedMessage for Msg {
        fn queue_offset(&self) -> i64 {
            self.offset
        }
        fn body_len(&self) -> usize {
            self.body
        }
    }

    fn msgs(offsets: impl IntoIterator<Item = i64>) -> Vec<Msg> {
        offsets
            .into_iter()
            .map(|offset| Msg { offset, body: 100 })
            .collect()
    }

    #[test]
    fn slow_message_pins_the_offset_until_it_is_done() {
        let mut pq = ProcessQueue::new(0);
        assert!(pq.put_messages(msgs(10..15)));
        assert_eq!(pq.cached_count(), 5);
        assert_eq!(pq.cached_body_bytes(), 500);
        assert_eq!(pq.span(), 4);
        // 11..15 finish first; 10 is still running.
        assert_eq!(pq.remove_messages(&[11, 12, 13, 14], 1), Some(10));
        assert_eq!(pq.remove_messages(&[10], 2), Some(15));
        assert_eq!(pq.cached_count(), 0);
        assert_eq!(pq.cached_body_bytes(), 0);
        assert_eq!(pq.last_consume_ms(), 2);
        // Already empty: nothing to say about the offset.
        assert_eq!(pq.remove_messages(&[10], 3), None);
    }

    #[test]
    fn duplicates_are_cached_once() {
        let mut pq = ProcessQueue::new(0);
        pq.put_messages(msgs([1, 2]));
        pq.put_messages(msgs([2, 3]));
        assert_eq!(pq.cached_count(), 3);
        assert_eq!(pq.cached_body_bytes(), 300);
        // Also while the message is in an orderly batch.
        let taken = pq.take_messages(1, 0);
        assert_eq!(taken.to_vec(), msgs([1]));
        pq.put_messages(msgs([1]));
        assert_eq!(pq.cached_count(), 3);
        // And while everything cached is in the batch (nothing waits to compare with).
        let rest = pq.take_messages(10, 0);
        assert_eq!(rest.to_vec(), msgs([2, 3]));
        pq.put_messages(msgs([2]));
        assert_eq!(pq.cached_count(), 3);
    }

    #[test]
    fn dispatch_is_requested_once_per_consume_loop() {
        let mut pq = ProcessQueue::new(0);
        assert!(!pq.put_messages(Vec::<Msg>::new()));
        assert!(pq.put_messages(msgs([1])));
        assert!(!pq.put_messages(msgs([2])));
        assert_eq!(pq.take_messages(10, 1).len(), 2);
        assert_eq!(pq.commit(), Some(3));
        assert!(pq.take_messages(10, 2).is_empty());
        // Loop ended: the next put asks for a new one.
        assert!(pq.put_messages(msgs([3])));
    }

    #[test]
    fn orderly_take_commit_rollback() {
        let mut pq = ProcessQueue::new(0);
        pq.put_messages(msgs(0..5));
        let batch = pq.take_messages(2, 7);
        assert_eq!(batch.to_vec(), msgs([0, 1]));
        assert_eq!(pq.last_consume_ms(), 7);
        assert_eq!(pq.consuming_count(), 2);
        assert_eq!(pq.cached_count(), 5);
        pq.rollback();
        assert_eq!(pq.consuming_count(), 0);
        assert_eq!(pq.take_messages(3, 8).to_vec(), msgs([0, 1, 2]));
        pq.make_messages_consume_again(&[2]);
        assert_eq!(pq.commit(), Some(2));
        assert_eq!(pq.cached_count(), 3);
        assert_eq!(pq.cached_body_bytes(), 300);
        assert_eq!(pq.take_messages(1, 9).to_vec(), msgs([2]));
        assert_eq!(pq.commit(), Some(3));
        assert_eq!(pq.commit(), None);
    }

    #[test]
    fn expired_scan_looks_at_started_head_messages_only() {
        let mut pq = ProcessQueue::new(0);
        pq.put_messages(msgs(0..40));
        let timeout = Duration::from_secs(60);
        pq.mark_consume_started(&(0..20).collect::<Vec<_>>(), 1_000);
        pq.mark_consume_started(&[20], 50_000);
        pq.mark_consume_started(&[21], 1_000);
        assert_eq!(pq.consume_started_ms(20), Some(50_000));
        // At exactly the timeout nothing has expired yet.
        assert!(pq.expired_messages(61_000, timeout, 16).is_empty());
        assert_eq!(
            pq.expired_messages(61_001, timeout, 16),
            (0..16).collect::<Vec<_>>()
        );
        assert_eq!(
            pq.expired_messages(61_001, timeout, 100),
            (0..20).collect::<Vec<_>>()
        );
        // A message that never started stops the scan.
        let mut fresh = ProcessQueue::new(0);
        fresh.put_messages(msgs(0..3));
        fresh.mark_consume_started(&[1, 2], 0);
        assert!(fresh.expired_messages(i64::MAX, timeout, 16).is_empty());
    }

    #[test]
    fn snapshot_reports_java_fields() {
        let mut pq = ProcessQueue::new(5);
        pq.put_messages((0..4).map(|offset| Msg {
            offset,
            body: 1024 * 1024,
        }));
        pq.take_messages(1, 6);
        pq.inc_try_unlock_times();
        let s = pq.snapshot(42);
        assert_eq!(s.commit_offset, 42);
        assert_eq!((s.cached_msg_min_offset, s.cached_msg_max_offset), (1, 3));
        assert_eq!(s.cached_msg_count, 3);
        assert_eq!(s.cached_msg_size_in_mib, 4);
        assert_eq!(
            (
                s.transaction_msg_min_offset,
                s.transaction_msg_max_offset,
                s.transaction_msg_count
            ),
            (0, 0, 1)
        );
        assert!(!s.dropped);
        assert_eq!(s.try_unlock_times, 1);
        assert_eq!(
            (
                s.last_lock_timestamp,
                s.last_pull_timestamp,
                s.last_consume_timestamp
            ),
            (0, 0, 6)
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["cachedMsgSizeInMiB"], 4);
        assert_eq!(json["droped"], false);
        assert_eq!(json["commitOffset"], 42);
        assert_eq!(json["lastConsumeTimestamp"], 6);
    }

    #[test]
    fn clear_forgets_everything() {
        let mut pq = ProcessQueue::new(0);
        pq.put_messages(msgs(0..3));
        pq.take_messages(1, 0);
        pq.clear();
        assert_eq!(pq.cache_stats(), CacheStats::default());
        assert_eq!(pq.remove_messages(&[1], 1), None);
        pq.put_messages(msgs([7]));
        assert_eq!(pq.remove_messages(&[7], 2), Some(8));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(Vec<(i64, usize)>),
        Remove(Vec<i64>),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            proptest::collection::vec((0i64..200, 0usize..5000), 0..20).prop_map(Op::Put),
            proptest::collection::vec(0i64..200, 0..20).prop_map(Op::Remove),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn concurrent_cache_matches_a_model(ops in proptest::collection::vec(op(), 1..40)) {
            let mut pq = ProcessQueue::new(0);
            let mut model: BTreeMap<i64, usize> = BTreeMap::new();
            let mut highest: Option<i64> = None;
            for op in ops {
                match op {
                    Op::Put(items) => {
                        for (offset, body) in items {
                            if let std::collections::btree_map::Entry::Vacant(slot) = model.entry(offset) {
                                slot.insert(body);
                                highest = Some(highest.map_or(offset, |h: i64| h.max(offset)));
                            }
                            pq.put_messages([Msg { offset, body }]);
                        }
                    }
                    Op::Remove(offsets) => {
                        let was_empty = model.is_empty();
                        for o in &offsets {
                            model.remove(o);
                        }
                        let expected = if was_empty {
                            None
                        } else {
                            model.keys().next().copied().or(highest.map(|h| h + 1))
                        };
                        prop_assert_eq!(pq.remove_messages(&offsets, 0), expected);
                    }
                }
                prop_assert_eq!(pq.cached_count(), model.len());
                prop_assert_eq!(pq.cached_body_bytes(), model.values().map(|b| *b as u64).sum::<u64>());
                let span = match (model.keys().next(), model.keys().next_back()) {
                    (Some(lo), Some(hi)) => hi - lo,
                    _ => 0,
                };
                prop_assert_eq!(pq.span(), span);
            }
        }

        #[test]
        fn with_increasing_pulls_the_committed_offset_never_goes_back(
            batches in proptest::collection::vec((1usize..10, proptest::collection::vec(any::<prop::sample::Index>(), 0..10)), 1..20)
        ) {
            let mut pq = ProcessQueue::new(0);
            let mut next = 0i64;
            let mut last_commit = i64::MIN;
            let mut cached: BTreeSet<i64> = BTreeSet::new();
            for (size, picks) in batches {
                pq.put_messages(msgs(next..next + size as i64));
                cached.extend(next..next + size as i64);
                next += size as i64;
                let done: Vec<i64> = picks
                    .iter()
                    .map(|ix| *cached.iter().nth(ix.index(cached.len())).unwrap())
                    .collect();
                for d in &done {
                    cached.remove(d);
                }
                if let Some(commit) = pq.remove_messages(&done, 0) {
                    prop_assert!(commit >= last_commit);
                    // Everything below the commit offset has been consumed.
                    prop_assert!(cached.iter().all(|o| *o >= commit));
                    last_commit = commit;
                }
            }
        }

        #[test]
        fn kept_batches_behave_like_lent_ones(
            total in 1i64..40,
            steps in proptest::collection::vec((1usize..6, 0u8..4, any::<prop::sample::Index>()), 1..40),
        ) {
            let mut lent = ProcessQueue::new(0);
            let mut kept = ProcessQueue::new(0);
            lent.put_messages(msgs(0..total));
            kept.put_messages(msgs(0..total));
            for (batch, action, pick) in steps {
                let from_lent: Vec<i64> = lent.take_messages(batch, 0).iter().map(|m| m.offset).collect();
                let from_kept: Vec<i64> = kept.take_messages_kept(batch, 0, |_| {}).iter().map(|m| m.offset).collect();
                prop_assert_eq!(&from_lent, &from_kept);
                match action {
                    0 => {
                        lent.rollback();
                        kept.rollback();
                    }
                    1 => {
                        // One message of what is being consumed goes back.
                        let consuming = lent.consuming_offsets();
                        if !consuming.is_empty() {
                            let back = [consuming[pick.index(consuming.len())]];
                            lent.make_messages_consume_again(&back);
                            kept.make_messages_consume_again(&back);
                        }
                    }
                    2 => prop_assert_eq!(lent.commit(), kept.commit()),
                    // Auto-commit off: the batch stays consuming while the next is taken.
                    _ => {}
                }
                prop_assert_eq!(lent.consuming_offsets(), kept.consuming_offsets());
                for offset in lent.consuming_offsets() {
                    prop_assert_eq!(lent.consuming_message(offset), kept.consuming_message(offset));
                    prop_assert!(kept.consuming_message(offset).is_some());
                }
                prop_assert_eq!(lent.cached_count(), kept.cached_count());
                prop_assert_eq!(lent.cached_body_bytes(), kept.cached_body_bytes());
            }
        }

        #[test]
        fn orderly_commits_are_contiguous(
            total in 1i64..60,
            steps in proptest::collection::vec((1usize..8, 0u8..3), 1..40),
        ) {
            let mut pq = ProcessQueue::new(0);
            pq.put_messages(msgs(0..total));
            let mut committed = 0i64;
            for (batch, action) in steps {
                let taken = pq.take_messages(batch, 0);
                if taken.is_empty() {
                    prop_assert_eq!(committed, total);
                    break;
                }
                // A batch always starts at the committed offset: order is never broken.
                prop_assert_eq!(taken[0].offset, committed);
                match action {
                    0 => pq.rollback(),
                    1 => {
                        let offsets: Vec<i64> = taken.iter().map(|m| m.offset).collect();
                        pq.make_messages_consume_again(&offsets);
                    }
                    _ => {
                        let new = pq.commit().unwrap();
                        prop_assert_eq!(new, taken.last().unwrap().offset + 1);
                        committed = new;
                    }
                }
                prop_assert_eq!(pq.cached_count() as i64, total - committed);
            }
        }
    }
}
