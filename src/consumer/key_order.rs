//! Key-ordered consumption of one queue (opt-in, `key_ordered = true`; not in Java).
//!
//! Plain orderly consumption runs a queue as a single stream: one slow message holds up every
//! message behind it, even those about unrelated orders. Most users only need per-key order
//! ("all events of order 42 in sequence"), so in key-ordered mode messages with different keys
//! run concurrently while messages with the same key still run strictly one at a time, in
//! queue order. Broker locks and everything else of orderly clustering stay the same.
//!
//! **The key** of a message ([`ordering_key`]) is its `__SHARDINGKEY` property when present
//! and non-empty (what RocketMQ's own ordered producers set), else the first token of `KEYS`
//! (`KEYS` may list several business keys for indexing, e.g. `"order-42 user-7"`; the first is
//! the primary one, and using the whole string would make `"order-42 user-7"` and `"order-42"`
//! unrelated).
//!
//! **Messages without a key** all share one implicit "no key" key: they stay ordered among
//! themselves (exactly as plain orderly mode would run them) while keyed messages proceed
//! concurrently beside them. That way forgetting to set keys degrades to ordinary orderly
//! consumption instead of silently dropping every ordering guarantee, and a keyless message
//! never blocks keyed ones.
//!
//! **The committed offset** is the smallest offset not yet finished (or one past the highest
//! seen when nothing is left): a message is never skipped, and a slow key holds the offset back
//! (after a restart, finished messages above it are consumed again — at least once).
//!
//! ```ignore
//! use rocketmq_actor::consumer::key_order::KeyOrderedQueue;
//! # use rocketmq_actor::consumer::CachedMessage;
//! # #[derive(Clone, Debug, PartialEq)] struct M(i64);
//! # impl CachedMessage for M { fn queue_offset(&self) -> i64 { self.0 } fn body_len(&self) -> usize { 1 } }
//!
//! let mut q = KeyOrderedQueue::new();
//! q.push(M(0), Some("order-1"));
//! q.push(M(1), Some("order-1"));
//! q.push(M(2), Some("order-2"));
//! // 0 and 2 run together; 1 waits for 0 (same key).
//! assert_eq!(q.next_ready(10, 0), vec![M(0), M(2)]);
//! assert!(q.complete(2, true));
//! assert_eq!(q.committed_offset(), Some(0)); // 0 still running
//! assert!(q.complete(0, true));
//! assert_eq!(q.next_ready(10, 0), vec![M(1)]);
//! assert!(q.complete(1, true));
//! assert_eq!(q.committed_offset(), Some(3));
//! ```

use crate::consumer::offset_map::OffsetMap;
use crate::consumer::process_queue::{CacheStats, CachedMessage};
use crate::message::{property, MessageExt};
use std::collections::HashMap;
use std::sync::Arc;

/// The key that orders `msg` in key-ordered mode: `__SHARDINGKEY` if present and non-empty,
/// else the first `KEYS` token; `None` (the shared "no key" key) otherwise.
///
/// ```ignore
/// use rocketmq_actor::consumer::key_order::ordering_key;
/// use rocketmq_actor::message::{property, Message, MessageExt};
/// let m = MessageExt::from(Message::new("T", "b").with_property(property::KEYS, "order-42 user-7"));
/// assert_eq!(ordering_key(&m), Some("order-42"));
/// ```
pub fn ordering_key(msg: &MessageExt) -> Option<&str> {
    let (sharding, keys) = msg
        .message
        .properties
        .get_two(property::SHARDING_KEY, property::KEYS);
    if let Some(sharding) = sharding.filter(|k| !k.is_empty()) {
        return Some(sharding);
    }
    keys?.split(property::KEY_SEPARATOR).find(|k| !k.is_empty())
}

/// A copy of `message` carrying `reconsume_times`: what the copying hand-outs give.
#[cfg(test)]
fn copy_with_reconsume_times<M: CachedMessage + Clone>(message: &M, reconsume_times: i32) -> M {
    let mut copy = message.clone();
    copy.set_reconsume_times(reconsume_times);
    copy
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// An earlier message of the same key is unfinished.
    Blocked,
    /// First unfinished message of its key, not running.
    Ready,
    /// Handed out, result not reported.
    InFlight,
}

/// The last unfinished offset of a key, with the key shared with its entries.
#[derive(Debug, Clone)]
struct KeyTail {
    key: Arc<str>,
    offset: i64,
}

#[derive(Debug, Clone)]
struct Entry<M> {
    /// `None` while the message is lent to the listener ([`KeyOrderedQueue::next_ready`]
    /// hands out the message itself, not a copy; a failed one is given back).
    message: Option<M>,
    /// Shared with [`KeyOrderedQueue::keyed_tails`]: a key is stored once per chain, however
    /// many of its messages are cached.
    key: Option<Arc<str>>,
    /// The next unfinished message of the same key, which becomes ready when this finishes.
    next_of_key: Option<i64>,
    body_len: u64,
    slot: Slot,
    failures: u32,
    /// The broker's reconsume count when the message was pulled.
    base_reconsume_times: i32,
    not_before_ms: i64,
}

impl<M> Entry<M> {
    /// The reconsume count a lent message carries: the broker's plus its failures here.
    fn reconsume_times(&self) -> i32 {
        self.base_reconsume_times
            .saturating_add(i32::try_from(self.failures).unwrap_or(i32::MAX))
    }
}

/// The messages of one queue in key-ordered mode: which may run now, and the offset to commit.
///
/// Invariants (checked by the property tests): at most one message per key is in flight; a
/// key's messages are handed out in offset order, each only after the previous one finished;
/// [`KeyOrderedQueue::committed_offset`] never passes an unfinished message.
///
/// Messages arrive in increasing offset order and mostly finish in that order, so they are
/// kept in an [`OffsetMap`] (a finished message leaves a hole until the ones before it
/// finish); the ready heads are a sorted vector. Each key's unfinished messages are a chain
/// linked through the entries (each names the next of its key), and only a chain's last
/// offset is kept by key: finishing a message readies the next of its key without a lookup
/// by key, and the keyless chain needs no lookup at all. Nothing is allocated per message
/// (a key is allocated once per chain).
#[derive(Debug, Clone)]
pub struct KeyOrderedQueue<M> {
    /// Messages by offset; `None` is a finished message with unfinished ones before it.
    /// The first and last entries are always unfinished.
    entries: OffsetMap<Option<Entry<M>>>,
    /// Unfinished messages (the `Some` entries).
    unfinished: usize,
    /// The last unfinished offset of each key with unfinished messages (the chain's tail; its
    /// head, the first unfinished one, is ready or in flight).
    keyed_tails: HashMap<Arc<str>, KeyTail>,
    /// The tail of the keyless messages' chain.
    keyless_tail: Option<i64>,
    /// Heads not in flight, in increasing order.
    ready: Vec<i64>,
    in_flight: usize,
    body_bytes: u64,
    highest: Option<i64>,
}

impl<M> Default for KeyOrderedQueue<M> {
    fn default() -> Self {
        KeyOrderedQueue {
            entries: OffsetMap::default(),
            unfinished: 0,
            keyed_tails: HashMap::new(),
            keyless_tail: None,
            ready: Vec::new(),
            in_flight: 0,
            body_bytes: 0,
            highest: None,
        }
    }
}

impl<M: CachedMessage> KeyOrderedQueue<M> {
    /// An empty queue.
    pub fn new() -> Self {
        KeyOrderedQueue::default()
    }

    fn entry(&self, offset: i64) -> Option<&Entry<M>> {
        self.entries.get(&offset)?.as_ref()
    }

    fn entry_mut(&mut self, offset: i64) -> Option<&mut Entry<M>> {
        self.entries.get_mut(&offset)?.as_mut()
    }

    fn mark_ready(&mut self, offset: i64) {
        match self.ready.last() {
            None => self.ready.push(offset),
            Some(last) if *last < offset => self.ready.push(offset),
            _ => {
                if let Err(at) = self.ready.binary_search(&offset) {
                    self.ready.insert(at, offset);
                }
            }
        }
    }

    /// Adds a pulled message with its key ([`ordering_key`] for `MessageExt`). Messages must
    /// arrive in increasing offset order, as pulls deliver them; one at or below the highest
    /// offset seen (a duplicate delivery) is ignored and `false` returned.
    pub fn push(&mut self, message: M, key: Option<&str>) -> bool {
        let offset = message.queue_offset();
        if self.highest.is_some_and(|h| offset <= h) {
            return false;
        }
        self.highest = Some(offset);
        // The chain's previous tail (the message this one waits for) and the shared key.
        let (previous, key) = match key {
            None => (self.keyless_tail.replace(offset), None),
            Some(key) => match self.keyed_tails.get_mut(key) {
                Some(tail) => (
                    Some(std::mem::replace(&mut tail.offset, offset)),
                    Some(tail.key.clone()),
                ),
                None => {
                    let shared: Arc<str> = Arc::from(key);
                    let tail = KeyTail {
                        key: shared.clone(),
                        offset,
                    };
                    self.keyed_tails.insert(shared.clone(), tail);
                    (None, Some(shared))
                }
            },
        };
        // A tail is always unfinished; were it missing, waiting for it would stall the key.
        let linked = previous
            .and_then(|tail| self.entry_mut(tail))
            .map(|tail| tail.next_of_key = Some(offset))
            .is_some();
        let slot = if linked {
            Slot::Blocked
        } else {
            self.mark_ready(offset);
            Slot::Ready
        };
        let body_len = message.body_len() as u64;
        self.body_bytes += body_len;
        self.unfinished += 1;
        self.entries.insert(
            offset,
            Some(Entry {
                base_reconsume_times: message.reconsume_times(),
                message: Some(message),
                key,
                next_of_key: None,
                body_len,
                slot,
                failures: 0,
                not_before_ms: i64::MIN,
            }),
        );
        true
    }

    /// Hands out up to `max` messages that may run now, lowest offsets first, and marks them
    /// in flight: each is the first unfinished message of its key, nothing of its key is in
    /// flight, and it is not paused by [`KeyOrderedQueue::retry_at`] beyond `now_ms`.
    ///
    /// The messages are lent, not copied: each carries its reconsume count (the broker's plus
    /// its failures here), and one that fails must be given back
    /// ([`KeyOrderedQueue::give_back`]) before it is retried.
    pub fn next_ready(&mut self, max: usize, now_ms: i64) -> Vec<M> {
        let mut out = Vec::new();
        self.hand_out_ready(max, now_ms, &mut out, |message, times| {
            let mut message = message.take()?;
            message.set_reconsume_times(times);
            Some(message)
        });
        out
    }

    /// [`KeyOrderedQueue::next_ready_built`] appending copies (that carry their reconsume
    /// counts) to `out`.
    #[cfg(test)]
    pub(crate) fn next_ready_copies(&mut self, max: usize, now_ms: i64, out: &mut Vec<M>)
    where
        M: Clone,
    {
        self.next_ready_built(max, now_ms, out, copy_with_reconsume_times);
    }

    /// Hands out up to `max` messages that may run now, as [`KeyOrderedQueue::next_ready`]
    /// does, but keeps them: what goes to `out` is what `build` makes of each message and its
    /// reconsume count (the broker's plus its failures here). A failed message then needs no
    /// [`KeyOrderedQueue::give_back`], and a caller that needs only a handle on the message
    /// (its shared pull) copies nothing.
    pub(crate) fn next_ready_built<B>(
        &mut self,
        max: usize,
        now_ms: i64,
        out: &mut Vec<B>,
        mut build: impl FnMut(&M, i32) -> B,
    ) {
        self.hand_out_ready(max, now_ms, out, |message, times| {
            message.as_ref().map(|message| build(message, times))
        });
    }

    fn hand_out_ready<B>(
        &mut self,
        max: usize,
        now_ms: i64,
        out: &mut Vec<B>,
        mut hand_out: impl FnMut(&mut Option<M>, i32) -> Option<B>,
    ) {
        let mut at = 0;
        let mut handed = 0;
        while at < self.ready.len() && handed < max {
            let offset = self.ready[at];
            let Some(Some(entry)) = self.entries.get_mut(&offset) else {
                self.ready.remove(at);
                continue;
            };
            if entry.not_before_ms > now_ms {
                at += 1;
                continue;
            }
            let times = entry.reconsume_times();
            let Some(message) = hand_out(&mut entry.message, times) else {
                at += 1;
                continue;
            };
            entry.slot = Slot::InFlight;
            out.push(message);
            handed += 1;
            self.ready.remove(at);
            self.in_flight += 1;
        }
    }

    /// Returns a message [`KeyOrderedQueue::next_ready`] lent out (one that failed, to be
    /// retried). False if it is not in flight or was given back already.
    pub fn give_back(&mut self, message: M) -> bool {
        match self.entry_mut(message.queue_offset()) {
            Some(entry) if entry.slot == Slot::InFlight && entry.message.is_none() => {
                entry.message = Some(message);
                true
            }
            _ => false,
        }
    }

    /// Reports a message handed out by [`KeyOrderedQueue::next_ready`]. `ok`: it is finished
    /// (consumed, or sent to the dead-letter queue) and the next message of its key becomes
    /// ready. Not ok: it stays first of its key, its failure count goes up, and it is ready
    /// again at once (use [`KeyOrderedQueue::retry_at`] to pause it); give it back first.
    /// Returns false, changing nothing, if the message was not in flight.
    pub fn complete(&mut self, offset: i64, ok: bool) -> bool {
        if ok {
            self.finish(offset)
        } else {
            self.retry_at(offset, i64::MIN)
        }
    }

    /// A failed message: it stays first of its key (blocking the key's later messages), its
    /// failure count goes up, and it is handed out again at or after `not_before_ms` — once
    /// it has been given back ([`KeyOrderedQueue::give_back`]). Returns false if the message
    /// was not in flight.
    pub fn retry_at(&mut self, offset: i64, not_before_ms: i64) -> bool {
        let Some(entry) = self.entry_mut(offset) else {
            return false;
        };
        if entry.slot != Slot::InFlight {
            return false;
        }
        entry.slot = Slot::Ready;
        entry.failures = entry.failures.saturating_add(1);
        entry.not_before_ms = not_before_ms;
        self.mark_ready(offset);
        self.in_flight -= 1;
        true
    }

    fn finish(&mut self, offset: i64) -> bool {
        let Some(slot) = self.entries.get_mut(&offset) else {
            return false;
        };
        // Only a chain's head is ever in flight, so `entry` is its key's first message.
        if slot.as_ref().map(|e| e.slot) != Some(Slot::InFlight) {
            return false;
        }
        let Some(entry) = slot.take() else {
            return false;
        };
        self.forget_finished(&entry);
        self.in_flight -= 1;
        match entry.next_of_key {
            Some(next) => {
                let became_ready = match self.entry_mut(next) {
                    Some(next) if next.slot == Slot::Blocked => {
                        next.slot = Slot::Ready;
                        true
                    }
                    _ => false,
                };
                if became_ready {
                    self.mark_ready(next);
                }
            }
            // The last of its key: the key's next message will be a head.
            None => match &entry.key {
                None => {
                    if self.keyless_tail == Some(offset) {
                        self.keyless_tail = None;
                    }
                }
                Some(key) => {
                    if self.keyed_tails.get(key).map(|tail| tail.offset) == Some(offset) {
                        self.keyed_tails.remove(key);
                    }
                }
            },
        }
        true
    }

    /// The bookkeeping of a finished message whose entry was just taken out.
    fn forget_finished(&mut self, entry: &Entry<M>) {
        self.unfinished -= 1;
        while self.entries.first_value().is_some_and(Option::is_none) {
            self.entries.pop_first();
        }
        while self.entries.last_value().is_some_and(Option::is_none) {
            self.entries.pop_last();
        }
        self.body_bytes = self.body_bytes.saturating_sub(entry.body_len);
    }

    /// [`KeyOrderedQueue::finish_and_build_next`] making a copy (that carries its reconsume
    /// count).
    #[cfg(test)]
    pub(crate) fn finish_and_take_next(&mut self, offset: i64, now_ms: i64) -> Option<M>
    where
        M: Clone,
    {
        self.finish_and_build_next(offset, now_ms, copy_with_reconsume_times)
    }

    /// [`KeyOrderedQueue::complete`] of a message that succeeded, handing out the next message
    /// of its key in the same step when that one may run at `now_ms` and no other message may
    /// run now (so nothing is passed over; a paused key does not count): what `build` makes of
    /// it and its reconsume count, as [`KeyOrderedQueue::next_ready_built`] hands out. `None`
    /// when that is not so, and then nothing has changed (complete the message as usual).
    pub(crate) fn finish_and_build_next<B>(
        &mut self,
        offset: i64,
        now_ms: i64,
        build: impl FnOnce(&M, i32) -> B,
    ) -> Option<B> {
        let others_due = self
            .ready
            .iter()
            .any(|o| self.entry(*o).is_some_and(|e| e.not_before_ms <= now_ms));
        if others_due {
            return None;
        }
        // Looked up once: nothing is inserted or removed until the entry is taken below.
        let at = self.entries.index_of(offset)?;
        let next = self
            .entries
            .at(at)?
            .as_ref()
            .filter(|entry| entry.slot == Slot::InFlight)?
            .next_of_key?;
        let next_entry = self.entry_mut(next)?;
        if next_entry.slot != Slot::Blocked || next_entry.not_before_ms > now_ms {
            return None;
        }
        let built = build(next_entry.message.as_ref()?, next_entry.reconsume_times());
        next_entry.slot = Slot::InFlight;
        // One message out of flight, the next in: `in_flight` stays.
        if let Some(entry) = self.entries.at_mut(at).and_then(Option::take) {
            self.forget_finished(&entry);
        }
        Some(built)
    }

    /// What `build` makes of the in-flight message at `offset` and its reconsume count, as
    /// [`KeyOrderedQueue::next_ready_built`] handed it out; `None` when no message there is in
    /// flight or it was lent out.
    pub(crate) fn in_flight_built<B>(
        &self,
        offset: i64,
        build: impl FnOnce(&M, i32) -> B,
    ) -> Option<B> {
        let entry = self.entry(offset).filter(|e| e.slot == Slot::InFlight)?;
        Some(build(entry.message.as_ref()?, entry.reconsume_times()))
    }

    /// How many times the unfinished message at `offset` failed here (add the broker's
    /// `reconsume_times` for the total; compare with `max_reconsume_times` to decide on the
    /// dead-letter queue).
    pub fn failures(&self, offset: i64) -> Option<u32> {
        self.entry(offset).map(|e| e.failures)
    }

    /// The queue's consume offset: the smallest unfinished offset, or one past the highest
    /// offset seen when all are finished; `None` before the first message.
    pub fn committed_offset(&self) -> Option<i64> {
        match self.entries.first_key() {
            Some(first) => Some(first),
            None => self.highest.map(|h| h.saturating_add(1)),
        }
    }

    /// Unfinished messages (waiting or in flight).
    pub fn len(&self) -> usize {
        self.unfinished
    }

    /// Whether every message is finished.
    pub fn is_empty(&self) -> bool {
        self.unfinished == 0
    }

    /// Messages in flight.
    pub fn in_flight_count(&self) -> usize {
        self.in_flight
    }

    /// Offsets in flight, in order.
    pub fn in_flight_offsets(&self) -> Vec<i64> {
        self.entries
            .iter()
            .filter(|(_, e)| e.as_ref().is_some_and(|e| e.slot == Slot::InFlight))
            .map(|(o, _)| o)
            .collect()
    }

    /// Keys with unfinished messages (the keyless ones count as one).
    pub fn key_count(&self) -> usize {
        self.keyed_tails.len() + usize::from(self.keyless_tail.is_some())
    }

    /// The unfinished message at `offset`, unless it is lent out (in flight).
    pub fn get(&self, offset: i64) -> Option<&M> {
        self.entry(offset).and_then(|e| e.message.as_ref())
    }

    /// Body bytes of the unfinished messages.
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    /// The unfinished messages and their body bytes.
    pub(crate) fn cached_amount(&self) -> (u64, u64) {
        (self.unfinished as u64, self.body_bytes)
    }

    /// The numbers pull flow control looks at (count, bytes, span of unfinished offsets).
    pub fn cache_stats(&self) -> CacheStats {
        let span = match (self.entries.first_key(), self.entries.last_key()) {
            (Some(lo), Some(hi)) => hi - lo,
            _ => 0,
        };
        CacheStats {
            count: self.unfinished as u64,
            body_bytes: self.body_bytes,
            span,
        }
    }

    /// Forgets everything (offset reset, queue dropped); results of messages in flight are
    /// then ignored ([`KeyOrderedQueue::complete`] returns false). Calls still running are
    /// forgotten too, so wait for [`KeyOrderedQueue::in_flight_count`] to reach 0 first if a
    /// key must never run twice at once across the reset.
    pub fn clear(&mut self) {
        *self = KeyOrderedQueue::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{property, Message};
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[derive(Debug, Clone, PartialEq)]
    struct M(i64);

    impl CachedMessage for M {
        fn queue_offset(&self) -> i64 {
            self.0
        }
        fn body_len(&self) -> usize {
            100
        }
    }

    fn offsets(ms: &[M]) -> Vec<i64> {
        ms.iter().map(|m| m.0).collect()
    }

    fn queue(keys: &[Option<&str>]) -> KeyOrderedQueue<M> {
        let mut q = KeyOrderedQueue::new();
        for (i, k) in keys.iter().enumerate() {
            assert!(q.push(M(i as i64), *k));
        }
        q
    }

    #[test]
    fn the_sharding_key_wins_over_keys() {
        let both = MessageExt::from(
            Message::new("T", "b")
                .with_property(property::KEYS, "k1 k2")
                .with_property(property::SHARDING_KEY, "shard"),
        );
        assert_eq!(ordering_key(&both), Some("shard"));
        let empty_shard = MessageExt::from(
            Message::new("T", "b")
                .with_property(property::KEYS, "  k1 k2")
                .with_property(property::SHARDING_KEY, ""),
        );
        assert_eq!(ordering_key(&empty_shard), Some("k1"));
        assert_eq!(
            ordering_key(&MessageExt::from(Message::new("T", "b"))),
            None
        );
    }

    #[test]
    fn the_cache_counts_unfinished_messages_and_their_bytes_until_done() {
        let mut q = queue(&[Some("a"), Some("a"), Some("b")]);
        assert_eq!(q.cached_amount(), (3, 300));
        assert_eq!(offsets(&q.next_ready(10, 0)), vec![0, 2]);
        assert_eq!(
            q.cached_amount(),
            (3, 300),
            "messages in flight still count"
        );
        assert!(q.complete(0, true));
        assert_eq!(q.cached_amount(), (2, 200));
        assert!(q.complete(2, true));
        assert_eq!(offsets(&q.next_ready(10, 0)), vec![1]);
        assert!(q.complete(1, true));
        assert_eq!(q.cached_amount(), (0, 0));
    }

    #[test]
    fn different_keys_run_together_same_key_waits() {
        let mut q = queue(&[Some("a"), Some("b"), Some("a"), Some("c"), Some("b")]);
        assert_eq!(q.key_count(), 3);
        assert_eq!(offsets(&q.next_ready(10, 0)), vec![0, 1, 3]);
        assert!(q.next_ready(10, 0).is_empty());
        assert!(q.complete(1, true));
        assert_eq!(offsets(&q.next_ready(10, 0)), vec![4]);
        assert_eq!(q.in_flight_offsets(), vec![0, 3, 4]);
        assert_eq!(q.committed_offset(), Some(0));
    }

    #[test]
    fn next_ready_respects_the_limit_and_prefers_older_messages() {
        let mut q = queue(&[Some("a"), Some("b"), Some("c"), Some("d")]);
        assert_eq!(offsets(&q.next_ready(2, 0)), vec![0, 1]);
        assert_eq!(offsets(&q.next_ready(1, 0)), vec![2]);
        assert_eq!(q.in_flight_count(), 3);
        assert!(q.next_ready(0, 0).is_empty());
    }

    #[test]
    fn a_message_its_key_releases_goes_before_later_ready_ones() {
        // a: 0, 1; b: 2; c: 3. Once 0 is done, 1 is the oldest message that may run: it goes
        // first, so the committed offset moves as soon as it can.
        let mut q = queue(&[Some("a"), Some("a"), Some("b"), Some("c")]);
        assert_eq!(offsets(&q.next_ready(1, 0)), vec![0]);
        assert!(q.complete(0, true));
        assert_eq!(offsets(&q.next_ready(1, 0)), vec![1]);
        assert_eq!(offsets(&q.next_ready(10, 0)), vec![2, 3]);
    }

    #[test]
    fn keyless_messages_stay_ordered_among_themselves_but_not_behind_keys() {
        let mut q = queue(&[None, Some("a"), None, Some("a"), Some("b")]);
        assert_eq!(offsets(&q.next_ready(10, 0)), vec![0, 1, 4]);
        assert!(q.complete(0, true));
        assert_eq!(offsets(&q.next_ready(10, 0)), vec![2]);
    }

    #[test]
    fn copies_need_no_give_back_and_carry_the_failure_count() {
        #[derive(Debug, Clone, PartialEq)]
        struct Counted {
            offset: i64,
            times: i32,
        }
        impl CachedMessage for Counted {
            fn queue_offset(&self) -> i64 {
                self.offset
            }
            fn body_len(&self) -> usize {
                100
            }
            fn reconsume_times(&self) -> i32 {
                self.times
            }
            fn set_reconsume_times(&mut self, times: i32) {
                self.times = times;
            }
        }
        let mut q = KeyOrderedQueue::new();
        for (offset, key) in [(0, "a"), (1, "a"), (2, "b")] {
            assert!(q.push(Counted { offset, times: 2 }, Some(key)));
        }
        let mut out = Vec::new();
        q.next_ready_copies(10, 0, &mut out);
        let offsets = |out: &[Counted]| out.iter().map(|m| m.offset).collect::<Vec<_>>();
        assert_eq!(offsets(&out), vec![0, 2]);
        assert_eq!(out[0].times, 2, "the broker's count");
        // The failed copy is not given back: it runs again, counted, once its pause ends, and
        // the next message of its key still waits.
        assert!(q.retry_at(0, 1_000));
        out.clear();
        q.next_ready_copies(10, 999, &mut out);
        assert!(out.is_empty());
        q.next_ready_copies(10, 1_000, &mut out);
        assert_eq!(
            out,
            vec![Counted {
                offset: 0,
                times: 3
            }]
        );
        assert!(q.complete(0, true));
        out.clear();
        q.next_ready_copies(10, 1_000, &mut out);
        assert_eq!(
            out,
            vec![Counted {
                offset: 1,
                times: 2
            }]
        );
        assert_eq!(q.in_flight_offsets(), vec![1, 2]);
    }

    #[test]
    fn a_failed_message_stays_first_of_its_key() {
        let mut q = queue(&[Some("a"), Some("a"), Some("b")]);
        let lent = q.next_ready(10, 0);
        assert!(q.give_back(lent[0].clone()));
        assert!(!q.give_back(lent[0].clone()), "given back already");
        assert!(q.complete(0, false));
        assert_eq!(q.failures(0), Some(1));
        // Offset 1 (same key) is still blocked; 0 is offered again.
        let again = q.next_ready(10, 0);
        assert_eq!(offsets(&again), vec![0]);
        assert!(q.give_back(again[0].clone()));
        assert!(q.retry_at(0, 1_000));
        assert_eq!(q.failures(0), Some(2));
        assert!(q.next_ready(10, 999).is_empty());
        assert_eq!(offsets(&q.next_ready(10, 1_000)), vec![0]);
        assert!(q.complete(0, true));
        assert_eq!(offsets(&q.next_ready(10, 1_000)), vec![1]);
    }

    #[test]
    fn a_lent_message_carries_the_brokers_count_plus_its_failures_here() {
        let mut q = KeyOrderedQueue::new();
        let mut pulled = MessageExt::from(Message::new("T", "b"));
        pulled.queue_offset = 5;
        pulled.reconsume_times = 2;
        assert!(q.push(pulled, None));
        let first = q.next_ready(1, 0);
        assert_eq!(first[0].reconsume_times, 2);
        assert!(q.get(5).is_none(), "lent, not copied");
        assert!(q.give_back(first[0].clone()));
        assert!(q.complete(5, false));
        let second = q.next_ready(1, 0);
        assert_eq!(second[0].reconsume_times, 3);
        assert!(q.give_back(second[0].clone()));
        assert!(q.complete(5, false));
        assert_eq!(q.next_ready(1, 0)[0].reconsume_times, 4);
        assert!(q.complete(5, true));
        assert!(q.is_empty());
    }

    #[test]
    fn completing_something_not_in_flight_changes_nothing() {
        let mut q = queue(&[Some("a"), Some("a")]);
        assert!(!q.complete(0, true), "not handed out yet");
        assert!(!q.complete(1, false));
        assert!(!q.complete(7, true));
        q.next_ready(10, 0);
        assert!(q.complete(0, true));
        assert!(!q.complete(0, true), "already finished");
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn committed_offset_is_the_smallest_unfinished() {
        let mut q: KeyOrderedQueue<M> = KeyOrderedQueue::new();
        assert_eq!(q.committed_offset(), None);
        for o in [10, 11, 12] {
            q.push(M(o), Some(&o.to_string()));
        }
        q.next_ready(10, 0);
        q.complete(11, true);
        q.complete(12, true);
        assert_eq!(q.committed_offset(), Some(10));
        assert_eq!(
            q.cache_stats(),
            CacheStats {
                count: 1,
                body_bytes: 100,
                span: 0
            }
        );
        q.complete(10, true);
        assert_eq!(q.committed_offset(), Some(13));
        assert!(q.is_empty());
    }

    #[test]
    fn duplicates_and_old_offsets_are_ignored() {
        let mut q = queue(&[Some("a"), Some("a")]);
        assert!(!q.push(M(1), Some("a")));
        assert!(!q.push(M(0), Some("z")));
        assert_eq!(q.len(), 2);
        q.clear();
        assert_eq!(q.committed_offset(), None);
        assert!(q.push(M(0), None));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u8),
        Take(usize),
        Complete(prop::sample::Index, bool),
        /// A running message succeeds and the next of its key is taken in the same step.
        Chain(prop::sample::Index),
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn per_key_order_and_a_safe_commit_offset(
            ops in proptest::collection::vec(
                prop_oneof![
                    (0u8..5).prop_map(Op::Push),
                    (0usize..4).prop_map(Op::Take),
                    (any::<prop::sample::Index>(), any::<bool>()).prop_map(|(i, ok)| Op::Complete(i, ok)),
                    any::<prop::sample::Index>().prop_map(Op::Chain),
                ],
                1..120,
            ),
        ) {
            // Key 4 stands for "no key".
            let key_of = |k: u8| if k == 4 { None } else { Some(format!("k{k}")) };
            let mut q = KeyOrderedQueue::new();
            let mut keys: BTreeMap<i64, Option<String>> = BTreeMap::new();
            let mut finished: BTreeSet<i64> = BTreeSet::new();
            let mut running: BTreeSet<i64> = BTreeSet::new();
            // Handed out by `finish_and_take_next`: copies, so a failure gives nothing back.
            let mut copied: BTreeSet<i64> = BTreeSet::new();
            let mut next = 0i64;
            let mut last_commit = i64::MIN;
            for op in ops {
                match op {
                    Op::Push(k) => {
                        prop_assert!(q.push(M(next), key_of(k).as_deref()));
                        keys.insert(next, key_of(k));
                        next += 1;
                    }
                    Op::Take(max) => {
                        let out = q.next_ready(max, 0);
                        prop_assert!(out.len() <= max);
                        for m in out {
                            let key = &keys[&m.0];
                            // Every earlier message of the key is finished...
                            for (o, k) in keys.range(..m.0) {
                                if k == key { prop_assert!(finished.contains(o), "{} released before {}", m.0, o); }
                            }
                            // ...and nothing of the key is running.
                            prop_assert!(running.iter().all(|r| &keys[r] != key));
                            prop_assert!(!finished.contains(&m.0));
                            running.insert(m.0);
                        }
                    }
                    Op::Complete(ix, ok) => {
                        if running.is_empty() {
                            continue;
                        }
                        let o = *running.iter().nth(ix.index(running.len())).unwrap();
                        if !ok && !copied.remove(&o) {
                            prop_assert!(q.give_back(M(o)));
                        }
                        prop_assert!(q.complete(o, ok));
                        running.remove(&o);
                        if ok { finished.insert(o); }
                    }
                    Op::Chain(ix) => {
                        if running.is_empty() {
                            continue;
                        }
                        let o = *running.iter().nth(ix.index(running.len())).unwrap();
                        let key = keys[&o].clone();
                        // The next of the key, if it may run now: nothing of the key between.
                        let successor = keys
                            .range(o + 1..)
                            .find(|(other, k)| **k == key && !finished.contains(other))
                            .map(|(other, _)| *other);
                        let others_wait = !q.clone().next_ready(usize::MAX, 0).is_empty();
                        match q.finish_and_take_next(o, 0) {
                            Some(m) => {
                                prop_assert!(!others_wait, "{} passed over a waiting message", m.0);
                                prop_assert_eq!(Some(m.0), successor);
                                prop_assert!(!running.contains(&m.0) && !finished.contains(&m.0));
                                running.remove(&o);
                                copied.remove(&o);
                                finished.insert(o);
                                running.insert(m.0);
                                copied.insert(m.0);
                            }
                            // Nothing changed: it is still running, and completes as usual.
                            None => prop_assert!(others_wait || successor.is_none()),
                        }
                    }
                }
                prop_assert_eq!(q.in_flight_count(), running.len());
                prop_assert_eq!(q.len() as i64, next - finished.len() as i64);
                if let Some(commit) = q.committed_offset() {
                    // Never past an unfinished message, never backwards, and as far as it may go.
                    prop_assert!((0..commit).all(|o| finished.contains(&o)));
                    prop_assert!(commit == next || !finished.contains(&commit));
                    prop_assert!(commit >= last_commit);
                    last_commit = commit;
                }
            }
            // Draining everything (with no more failures) finishes every message.
            loop {
                let out = q.next_ready(usize::MAX, 0);
                for m in &out { running.insert(m.0); }
                if running.is_empty() { break; }
                let running_now: Vec<i64> = running.iter().copied().collect();
                for o in running_now {
                    copied.remove(&o);
                    prop_assert!(q.complete(o, true));
                    running.remove(&o);
                    finished.insert(o);
                }
            }
            prop_assert!(q.is_empty());
            prop_assert_eq!(q.committed_offset(), if next == 0 { None } else { Some(next) });
        }
    }
}
