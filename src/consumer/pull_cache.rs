//! [`PullCache`]: the concurrent consume service's cache, kept per pull.
//!
//! Java's `ProcessQueue` holds one tree entry per cached message, and so does
//! [`ProcessQueue`](super::process_queue::ProcessQueue). The concurrent service hands every
//! pull to the listener whole, and its messages mostly finish in offset order; so this cache
//! keeps a pull as it arrived — the pull's shared message vector and one bit per message still
//! cached. Caching a pull is one entry whatever its size; a consumed message is a cleared bit.
//! Offsets that arrive out of order or twice (a redelivery after an offset moved back) are
//! still handled, by a slower search, until the cache next empties.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::consumer::process_queue::{CacheStats, ProcessQueueSnapshot};
use crate::message::MessageExt;

/// One bit per message of a pull; pulls of up to 64 messages (the default is 32) need no
/// allocation.
#[derive(Debug, Default)]
struct Bits {
    low: u64,
    high: Vec<u64>,
}

impl Bits {
    /// The first `len` bits set.
    fn all(len: usize) -> Self {
        let word = |bits: usize| match bits {
            0 => 0,
            64.. => u64::MAX,
            n => (1u64 << n) - 1,
        };
        let high_words = len.saturating_sub(1) / 64;
        Bits {
            low: word(len.min(64)),
            high: (0..high_words)
                .map(|w| word(len.saturating_sub(64 * (w + 1)).min(64)))
                .collect(),
        }
    }

    fn word(&self, index: usize) -> (Option<&u64>, u64) {
        let mask = 1u64 << (index % 64);
        match index / 64 {
            0 => (Some(&self.low), mask),
            n => (self.high.get(n - 1), mask),
        }
    }

    fn get(&self, index: usize) -> bool {
        match self.word(index) {
            (Some(word), mask) => word & mask != 0,
            (None, _) => false,
        }
    }

    fn set(&mut self, index: usize) {
        let mask = 1u64 << (index % 64);
        match index / 64 {
            0 => self.low |= mask,
            n => {
                if self.high.len() < n {
                    self.high.resize(n, 0);
                }
                if let Some(word) = self.high.get_mut(n - 1) {
                    *word |= mask;
                }
            }
        }
    }

    /// The lowest set bit.
    fn first_set(&self) -> Option<usize> {
        std::iter::once(&self.low)
            .chain(&self.high)
            .enumerate()
            .find(|(_, word)| **word != 0)
            .map(|(w, word)| w * 64 + word.trailing_zeros() as usize)
    }

    /// The highest set bit.
    fn last_set(&self) -> Option<usize> {
        let high = self
            .high
            .iter()
            .enumerate()
            .rev()
            .find(|(_, word)| **word != 0);
        let (w, word) = match high {
            Some((w, word)) => (w + 1, *word),
            None if self.low != 0 => (0, self.low),
            None => return None,
        };
        Some(w * 64 + 63 - word.leading_zeros() as usize)
    }

    /// Clears the bits `range`, calling `was_set` with each of them that was set: a word at a
    /// time, since a listener call clears a run of its pull's bits.
    fn clear_range(&mut self, range: Range<usize>, mut was_set: impl FnMut(usize)) {
        // Bits past the stored words are all clear.
        let end = range.end.min((self.high.len() + 1) * 64);
        let mut index = range.start;
        while index < end {
            let w = index / 64;
            let word_end = w.saturating_add(1).saturating_mul(64).min(end);
            let width = word_end - index;
            let ones = if width >= 64 {
                u64::MAX
            } else {
                (1u64 << width) - 1
            };
            let mask = ones << (index % 64);
            let word = match w {
                0 => Some(&mut self.low),
                n => self.high.get_mut(n - 1),
            };
            if let Some(word) = word {
                let mut set = *word & mask;
                *word &= !mask;
                while set != 0 {
                    was_set(w * 64 + set.trailing_zeros() as usize);
                    set &= set - 1;
                }
            }
            index = word_end;
        }
    }

    /// Clears the bit; returns whether it was set.
    fn clear(&mut self, index: usize) -> bool {
        let mask = 1u64 << (index % 64);
        let word = match index / 64 {
            0 => Some(&mut self.low),
            n => self.high.get_mut(n - 1),
        };
        match word {
            Some(word) if *word & mask != 0 => {
                *word &= !mask;
                true
            }
            _ => false,
        }
    }
}

/// A message of a pull consumed again after its send-back failed: the copy with the raised
/// reconsume count, and when that consumption started.
#[derive(Debug)]
struct Redelivery {
    index: usize,
    copies: Arc<Vec<MessageExt>>,
    at: usize,
    started_ms: i64,
}

/// One pull's messages, those still cached marked in `cached`.
#[derive(Debug)]
struct CachedPull {
    messages: Arc<Vec<MessageExt>>,
    cached: Bits,
    left: usize,
    /// The body bytes of the messages still cached: a call that consumed all of them
    /// removes them without reading each message.
    body_left: u64,
    /// When the listener got the pull.
    started_ms: i64,
    /// Rare: messages of this pull consumed again.
    redelivered: Vec<Redelivery>,
    /// The pull's offsets grow from message to message (true of every pull a broker sends).
    increasing: bool,
}

impl CachedPull {
    fn offset(&self, index: usize) -> Option<i64> {
        self.messages.get(index).map(|m| m.queue_offset)
    }

    /// The index of `offset` among the messages if it is still cached. `increasing`: the
    /// pull's offsets grow, so the index can be computed or bisected.
    fn find(&self, offset: i64, increasing: bool) -> Option<usize> {
        let index = if increasing {
            let base = self.offset(0)?;
            // Offsets of a pull are usually contiguous: then the message sits at `offset - base`.
            let guess = usize::try_from(offset.wrapping_sub(base)).ok();
            match guess.filter(|&at| self.offset(at) == Some(offset)) {
                Some(at) => at,
                None => self
                    .messages
                    .binary_search_by_key(&offset, |m| m.queue_offset)
                    .ok()?,
            }
        } else {
            (0..self.messages.len())
                .find(|&at| self.offset(at) == Some(offset) && self.cached.get(at))?
        };
        self.cached.get(index).then_some(index)
    }

    /// The message as the listener sees it now (a redelivered copy if there is one).
    fn current(&self, index: usize) -> Option<&MessageExt> {
        match self.redelivered.iter().find(|r| r.index == index) {
            Some(again) => again.copies.get(again.at),
            None => self.messages.get(index),
        }
    }

    fn started_ms(&self, index: usize) -> i64 {
        self.redelivered
            .iter()
            .find(|r| r.index == index)
            .map_or(self.started_ms, |r| r.started_ms)
    }

    fn cached_indices(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.messages.len()).filter(|&at| self.cached.get(at))
    }

    /// Indices below `end` cached so far while the pull is being put.
    fn cached_indices_so_far(&self, end: usize) -> impl Iterator<Item = usize> + '_ {
        (0..end).filter(|&at| self.cached.get(at))
    }
}

/// The cache of one queue in concurrent mode: what [`ProcessQueue`] is to the orderly
/// service, kept per pull (see the module's documentation).
///
/// [`ProcessQueue`]: super::process_queue::ProcessQueue
#[derive(Debug)]
pub(crate) struct PullCache {
    pulls: VecDeque<CachedPull>,
    count: usize,
    body_bytes: u64,
    highest_offset_put: Option<i64>,
    /// Every pull's offsets increase and lie above the previous pull's, so a lookup can
    /// bisect and the cache's ends are the ends of its first and last pull. False from the
    /// first pull that broke it (an offset cached twice or out of order) until the cache
    /// empties.
    in_order: bool,
    /// The pull the last removal found its offset in: removals mostly walk one pull after
    /// another.
    hint: usize,
    last_consume_ms: i64,
}

impl PullCache {
    /// An empty cache; the consume clock starts at `now_ms`.
    pub(crate) fn new(now_ms: i64) -> Self {
        PullCache {
            pulls: VecDeque::new(),
            count: 0,
            body_bytes: 0,
            highest_offset_put: None,
            in_order: true,
            hint: 0,
            last_consume_ms: now_ms,
        }
    }

    /// Caches a pull handed to the listener at `now_ms`. A message whose offset is already
    /// cached is not cached again (its consumption cannot pin the offset twice).
    pub(crate) fn put_pull(&mut self, messages: &Arc<Vec<MessageExt>>, now_ms: i64) {
        // The usual pull: offsets growing, all above everything cached before.
        let mut highest = self.highest_offset_put;
        let mut body_bytes = 0u64;
        let mut fresh = true;
        for message in messages.iter() {
            if highest.is_some_and(|h| message.queue_offset <= h) {
                fresh = false;
                break;
            }
            highest = Some(message.queue_offset);
            body_bytes += message.body().len() as u64;
        }
        if fresh {
            if messages.is_empty() {
                return;
            }
            self.count += messages.len();
            self.body_bytes += body_bytes;
            self.highest_offset_put = highest;
            self.pulls.push_back(CachedPull {
                messages: messages.clone(),
                cached: Bits::all(messages.len()),
                left: messages.len(),
                body_left: body_bytes,
                started_ms: now_ms,
                redelivered: Vec::new(),
                increasing: true,
            });
            return;
        }
        self.put_pull_checked(messages, now_ms);
    }

    /// [`PullCache::put_pull`] for a pull with offsets at or below those cached before.
    fn put_pull_checked(&mut self, messages: &Arc<Vec<MessageExt>>, now_ms: i64) {
        let mut pull = CachedPull {
            messages: messages.clone(),
            cached: Bits::default(),
            left: 0,
            body_left: 0,
            started_ms: now_ms,
            redelivered: Vec::new(),
            increasing: messages
                .windows(2)
                .all(|pair| matches!(pair, [a, b] if a.queue_offset < b.queue_offset)),
        };
        let mut highest = self.highest_offset_put;
        let mut body_bytes = 0u64;
        for (index, message) in messages.iter().enumerate() {
            let offset = message.queue_offset;
            if highest.is_some_and(|h| offset <= h) {
                self.in_order = false;
                let cached_before = self.position(offset).is_some()
                    || pull
                        .cached_indices_so_far(index)
                        .any(|at| pull.offset(at) == Some(offset));
                if cached_before {
                    continue;
                }
            }
            pull.left += 1;
            pull.cached.set(index);
            body_bytes += message.body().len() as u64;
            highest = Some(highest.map_or(offset, |h| h.max(offset)));
        }
        if pull.left == 0 {
            return;
        }
        pull.body_left = body_bytes;
        self.count += pull.left;
        self.body_bytes += body_bytes;
        self.highest_offset_put = highest;
        self.pulls.push_back(pull);
    }

    /// Where the cached message at `offset` is: (pull, index).
    fn position(&self, offset: i64) -> Option<(usize, usize)> {
        if !self.in_order {
            return self
                .pulls
                .iter()
                .enumerate()
                .find_map(|(p, pull)| Some((p, pull.find(offset, false)?)));
        }
        let holds = |pull: &CachedPull| {
            let first = pull.offset(0);
            let last = pull.messages.last().map(|m| m.queue_offset);
            first.is_some_and(|f| f <= offset) && last.is_some_and(|l| offset <= l)
        };
        let p = match self.pulls.get(self.hint) {
            Some(pull) if holds(pull) => self.hint,
            _ => {
                let p = self.pulls.partition_point(|pull| {
                    pull.messages
                        .last()
                        .is_some_and(|m| m.queue_offset < offset)
                });
                if !self.pulls.get(p).is_some_and(holds) {
                    return None;
                }
                p
            }
        };
        let index = self.pulls.get(p)?.find(offset, true)?;
        Some((p, index))
    }

    /// Removes consumed messages and returns the queue's new consume offset: the lowest
    /// offset still cached, or one past the highest ever cached when nothing is left. `None`
    /// when the cache was already empty (e.g. cleared by a drop): the offset must not move.
    pub(crate) fn remove_offsets(
        &mut self,
        offsets: impl IntoIterator<Item = i64>,
        now_ms: i64,
    ) -> Option<i64> {
        self.last_consume_ms = now_ms;
        if self.count == 0 {
            return None;
        }
        for offset in offsets {
            let Some((p, index)) = self.position(offset) else {
                continue;
            };
            self.hint = p;
            let Some(pull) = self.pulls.get_mut(p) else {
                continue;
            };
            if !pull.cached.clear(index) {
                continue;
            }
            let body_len = pull.messages.get(index).map_or(0, |m| m.body().len()) as u64;
            self.body_bytes = self.body_bytes.saturating_sub(body_len);
            pull.body_left = pull.body_left.saturating_sub(body_len);
            self.count -= 1;
            pull.left -= 1;
            if pull.left == 0 {
                self.pull_gone(p);
            }
        }
        self.consume_offset()
    }

    /// Removes the messages `range` of `pull`, when `pull` is cached (the concurrent service
    /// hands pulls to the listener in parts, so finished calls name what they consumed this
    /// way): no search by offset. Returns `false` when `pull` is not cached (dropped, or all
    /// of it consumed); then only the time of the last consumption changes, as it does for
    /// [`PullCache::remove_offsets`] (and Java's `removeMessage`) whatever is removed.
    pub(crate) fn remove_part(
        &mut self,
        pull: &Arc<Vec<MessageExt>>,
        range: Range<usize>,
        now_ms: i64,
    ) -> bool {
        self.last_consume_ms = now_ms;
        let is_it = |cached: &CachedPull| Arc::ptr_eq(&cached.messages, pull);
        let p = match self.pulls.get(self.hint) {
            Some(cached) if is_it(cached) => self.hint,
            _ => match self.pulls.iter().position(is_it) {
                Some(p) => p,
                None => return false,
            },
        };
        let Some(cached) = self.pulls.get_mut(p) else {
            return false;
        };
        self.hint = p;
        let (removed, body_bytes) = if range.start == 0 && range.end >= cached.messages.len() {
            // The whole pull in one call (a batch as large as the pull): all that is left of
            // it goes.
            cached.cached = Bits::default();
            (cached.left, cached.body_left)
        } else {
            let (mut removed, mut body_bytes) = (0usize, 0u64);
            let messages = &cached.messages;
            cached.cached.clear_range(range, |index| {
                if let Some(message) = messages.get(index) {
                    removed += 1;
                    body_bytes += message.body().len() as u64;
                }
            });
            (removed, body_bytes)
        };
        self.count -= removed;
        self.body_bytes = self.body_bytes.saturating_sub(body_bytes);
        cached.body_left = cached.body_left.saturating_sub(body_bytes);
        cached.left -= removed;
        if cached.left == 0 {
            self.pull_gone(p);
        }
        true
    }

    /// Pull `p` has nothing cached any more: it leaves, and with it perhaps the offsets that
    /// put the cache out of order.
    fn pull_gone(&mut self, p: usize) {
        self.pulls.remove(p);
        if self.count == 0 {
            self.emptied();
        } else if !self.in_order {
            self.in_order = self.pulls_in_order();
        }
    }

    /// Whether every pull's offsets grow and lie above the previous pull's.
    fn pulls_in_order(&self) -> bool {
        let mut previous_last: Option<i64> = None;
        for pull in &self.pulls {
            let (Some(first), Some(last)) = (pull.offset(0), pull.messages.last()) else {
                continue;
            };
            if !pull.increasing || previous_last.is_some_and(|p| first <= p) {
                return false;
            }
            previous_last = Some(last.queue_offset);
        }
        true
    }

    /// The queue's consume offset as the cache sees it: the lowest offset still cached, or
    /// one past the highest ever cached when nothing is left (`None` before any pull).
    pub(crate) fn consume_offset(&self) -> Option<i64> {
        match self.min_offset() {
            Some(lowest) => Some(lowest),
            None => self.highest_offset_put.map(|h| h + 1),
        }
    }

    /// Nothing is cached any more: later pulls start a fresh order.
    fn emptied(&mut self) {
        self.pulls.clear();
        self.in_order = true;
        self.hint = 0;
    }

    /// Every cached message as (offset, pull, index), in offset order.
    fn cached_in_order(&self) -> Vec<(i64, usize, usize)> {
        let mut all: Vec<(i64, usize, usize)> = self
            .pulls
            .iter()
            .enumerate()
            .flat_map(|(p, pull)| {
                pull.cached_indices()
                    .filter_map(move |at| Some((pull.offset(at)?, p, at)))
            })
            .collect();
        if !self.in_order {
            all.sort_unstable_by_key(|(offset, _, _)| *offset);
        }
        all
    }

    /// Every cached offset, pull by pull (in offset order only while `in_order`).
    fn cached_offsets(&self) -> impl Iterator<Item = i64> + '_ {
        self.pulls
            .iter()
            .flat_map(|pull| pull.cached_indices().filter_map(|at| pull.offset(at)))
    }

    /// Lowest cached offset.
    pub(crate) fn min_offset(&self) -> Option<i64> {
        if self.in_order {
            let pull = self.pulls.front()?;
            return pull.offset(pull.cached.first_set()?);
        }
        self.cached_offsets().min()
    }

    /// Highest cached offset.
    pub(crate) fn max_offset(&self) -> Option<i64> {
        if self.in_order {
            let pull = self.pulls.back()?;
            return pull.offset(pull.cached.last_set()?);
        }
        self.cached_offsets().max()
    }

    /// The cached messages and their body bytes.
    pub(crate) fn cached_amount(&self) -> (u64, u64) {
        (self.count as u64, self.body_bytes)
    }

    /// The numbers flow control needs.
    pub(crate) fn cache_stats(&self) -> CacheStats {
        let span = match (self.min_offset(), self.max_offset()) {
            (Some(lo), Some(hi)) => hi - lo,
            _ => 0,
        };
        CacheStats {
            count: self.count as u64,
            body_bytes: self.body_bytes,
            span,
        }
    }

    /// The consume-timeout scan (Java `cleanExpiredMsg`): of the lowest cached messages, at
    /// most `limit` (Java: 16), those whose consumption started more than `timeout` before
    /// `now_ms`, as the listener last saw them. The scan stops at the first message that has
    /// not expired: only the head pins the offset.
    pub(crate) fn expired_messages(
        &self,
        now_ms: i64,
        timeout: Duration,
        limit: usize,
    ) -> Vec<MessageExt> {
        let timeout_ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        let expired =
            |pull: &CachedPull, at: usize| now_ms.saturating_sub(pull.started_ms(at)) > timeout_ms;
        // The head's check decides most scans: skip the sort when it has not expired.
        match self.pulls.front() {
            Some(front)
                if self.in_order
                    && front
                        .cached
                        .first_set()
                        .is_some_and(|first| !expired(front, first)) =>
            {
                return Vec::new()
            }
            None => return Vec::new(),
            _ => {}
        }
        self.cached_in_order()
            .into_iter()
            .take(limit)
            .map_while(|(_, p, at)| {
                let pull = self.pulls.get(p)?;
                expired(pull, at).then(|| pull.current(at).cloned())?
            })
            .collect()
    }

    /// Messages consumed again (after their send-back failed), from `again`: the cache now
    /// answers with these copies and restarts their consume clock at `now_ms`.
    pub(crate) fn redeliver(&mut self, again: &Arc<Vec<MessageExt>>, now_ms: i64) {
        for (at, message) in again.iter().enumerate() {
            let Some((p, index)) = self.position(message.queue_offset) else {
                continue;
            };
            let Some(pull) = self.pulls.get_mut(p) else {
                continue;
            };
            let redelivery = Redelivery {
                index,
                copies: again.clone(),
                at,
                started_ms: now_ms,
            };
            match pull.redelivered.iter_mut().find(|r| r.index == index) {
                Some(slot) => *slot = redelivery,
                None => pull.redelivered.push(redelivery),
            }
        }
    }

    /// Drops every cached message (offset reset, queue dropped).
    pub(crate) fn clear(&mut self) {
        self.pulls.clear();
        self.count = 0;
        self.body_bytes = 0;
        self.highest_offset_put = None;
        self.in_order = true;
        self.hint = 0;
    }

    /// The cache's part of `ConsumerRunningInfo`, with the offset store's `commit_offset`.
    pub(crate) fn snapshot(&self, commit_offset: i64) -> ProcessQueueSnapshot {
        ProcessQueueSnapshot {
            commit_offset,
            cached_msg_min_offset: self.min_offset().unwrap_or(0),
            cached_msg_max_offset: self.max_offset().unwrap_or(0),
            cached_msg_count: i64::try_from(self.count).unwrap_or(i64::MAX),
            cached_msg_size_in_mib: i64::try_from(self.body_bytes / (1024 * 1024))
                .unwrap_or(i64::MAX),
            last_consume_timestamp: self.last_consume_ms,
            ..ProcessQueueSnapshot::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::process_queue::ProcessQueue;
    use crate::message::Message;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn clearing_a_range_clears_each_of_its_bits(
            len in 0usize..300,
            cleared_before in proptest::collection::vec(0usize..300, 0..40),
            start in 0usize..320,
            width in 0usize..200,
        ) {
            let mut by_range = Bits::all(len);
            for &index in &cleared_before {
                by_range.clear(index);
            }
            let mut by_bit = Bits { low: by_range.low, high: by_range.high.clone() };
            let range = start..start + width;
            let mut reported = Vec::new();
            by_range.clear_range(range.clone(), |index| reported.push(index));
            let expected: Vec<usize> = range.filter(|&index| by_bit.clear(index)).collect();
            prop_assert_eq!(reported, expected);
            prop_assert_eq!(by_range.low, by_bit.low);
            prop_assert_eq!(by_range.high, by_bit.high);
        }
    }

    fn message(offset: i64, body_len: usize) -> MessageExt {
        MessageExt {
            message: Message::new("T", vec![b'x'; body_len]),
            queue_offset: offset,
            ..MessageExt::default()
        }
    }

    fn pull(offsets: impl IntoIterator<Item = i64>) -> Arc<Vec<MessageExt>> {
        Arc::new(offsets.into_iter().map(|o| message(o, 10)).collect())
    }

    #[test]
    fn a_slow_message_pins_the_offset_until_it_is_done() {
        let mut cache = PullCache::new(0);
        cache.put_pull(&pull(10..15), 0);
        cache.put_pull(&pull(15..20), 0);
        assert_eq!(cache.remove_offsets([11, 12, 13, 14, 15], 1), Some(10));
        assert_eq!(
            cache.cache_stats(),
            CacheStats {
                count: 5,
                body_bytes: 50,
                span: 9
            }
        );
        assert_eq!(cache.remove_offsets([10], 2), Some(16));
        assert_eq!(cache.remove_offsets(16..20, 3), Some(20));
        assert_eq!(cache.cache_stats(), CacheStats::default());
        // Nothing cached: the offset must not move.
        assert_eq!(cache.remove_offsets([20], 4), None);
    }

    #[test]
    fn an_offset_cached_twice_pins_the_queue_once_and_gaps_are_skipped() {
        let mut cache = PullCache::new(0);
        // A tag filter leaves gaps in a pull.
        cache.put_pull(&pull([3, 7, 8, 20]), 0);
        // Redelivered 7 and 8 with one new offset below the highest.
        cache.put_pull(&pull([5, 7, 8]), 0);
        assert_eq!(cache.cache_stats().count, 5);
        assert_eq!(cache.remove_offsets([3], 1), Some(5));
        assert_eq!(cache.remove_offsets([5, 7, 8], 1), Some(20));
        // The second delivery of 7 finishing removes nothing more.
        assert_eq!(cache.remove_offsets([7], 1), Some(20));
        assert_eq!(cache.remove_offsets([20], 1), Some(21));
    }

    #[test]
    fn the_cache_is_back_in_order_once_the_pull_out_of_order_is_gone() {
        let mut cache = PullCache::new(0);
        let first = pull(0..5);
        cache.put_pull(&first, 0);
        // Redelivered from 3 after an offset moved back: 3 and 4 are cached already.
        let again = pull(3..8);
        cache.put_pull(&again, 0);
        assert!(!cache.in_order);
        assert_eq!(cache.cache_stats().count, 8);
        assert!(cache.remove_part(&first, 0..5, 1));
        assert!(
            cache.in_order,
            "only the redelivered pull is left, and it is in order"
        );
        assert_eq!(cache.consume_offset(), Some(5));
        cache.put_pull(&pull(8..10), 1);
        assert!(cache.in_order);
        assert_eq!(cache.remove_offsets(5..10, 2), Some(10));
    }

    #[test]
    fn expiry_sees_the_head_only_and_a_redelivered_copy_restarts_its_clock() {
        let mut cache = PullCache::new(0);
        cache.put_pull(&pull(0..3), 0);
        cache.put_pull(&pull(3..6), 100);
        let timeout = Duration::from_millis(50);
        let offsets = |messages: Vec<MessageExt>| -> Vec<i64> {
            messages.iter().map(|m| m.queue_offset).collect()
        };
        assert_eq!(
            offsets(cache.expired_messages(40, timeout, 16)),
            Vec::<i64>::new()
        );
        assert_eq!(
            offsets(cache.expired_messages(120, timeout, 16)),
            vec![0, 1, 2]
        );
        assert_eq!(offsets(cache.expired_messages(120, timeout, 2)), vec![0, 1]);
        let mut copy = message(1, 10);
        copy.reconsume_times = 4;
        cache.redeliver(&Arc::new(vec![copy]), 110);
        let expired = cache.expired_messages(120, timeout, 16);
        assert_eq!(offsets(expired), vec![0]);
        let expired = cache.expired_messages(200, timeout, 16);
        assert_eq!(offsets(expired.clone()), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(expired.get(1).map(|m| m.reconsume_times), Some(4));
    }

    #[test]
    fn a_pull_of_more_than_64_messages_keeps_every_bit() {
        let mut cache = PullCache::new(0);
        cache.put_pull(&pull(0..200), 0);
        assert_eq!(
            cache.remove_offsets((0..200).filter(|o| o % 3 != 0), 1),
            Some(0)
        );
        assert_eq!(cache.cache_stats().count, 67);
        assert_eq!(cache.cache_stats().span, 198);
        assert_eq!(cache.remove_offsets((0..198).step_by(3), 1), Some(198));
        assert_eq!(cache.remove_offsets([198], 1), Some(200));
    }

    #[test]
    fn a_part_of_a_cached_pull_leaves_without_a_search() {
        let mut cache = PullCache::new(0);
        let first = pull(0..8);
        let second = pull(8..16);
        cache.put_pull(&first, 0);
        cache.put_pull(&second, 0);
        assert!(cache.remove_part(&second, 2..5, 1));
        assert!(cache.remove_part(&first, 0..3, 1));
        assert_eq!(cache.consume_offset(), Some(3));
        assert_eq!(cache.cache_stats().count, 10);
        // Copies of cached messages are not the cached pull: removed by offset instead.
        let copies = pull(3..8);
        assert!(!cache.remove_part(&copies, 0..5, 1));
        assert_eq!(cache.cache_stats().count, 10);
        assert_eq!(
            cache.remove_offsets(copies.iter().map(|m| m.queue_offset), 1),
            Some(8)
        );
        assert!(cache.remove_part(&second, 0..2, 1));
        assert_eq!(cache.consume_offset(), Some(13));
        assert!(cache.remove_part(&second, 5..8, 1));
        assert_eq!(cache.cache_stats(), CacheStats::default());
        assert_eq!(cache.consume_offset(), Some(16));
        // The pull is gone: nothing of it is found any more.
        assert!(!cache.remove_part(&second, 5..8, 1));
    }

    #[derive(Debug, Clone)]
    enum Step {
        /// A listener call over `pulls[.0]`'s messages `.1..(.1 + .2)` ended.
        RemoveCall(usize, usize, usize),
        Put(Vec<(i64, usize)>),
        Remove(Vec<i64>),
        Redeliver(Vec<i64>),
        Expire(Duration),
        Clear,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            // Mostly increasing, sometimes from anywhere (redeliveries, offsets moved back).
            4 => (0i64..60, 1usize..150, prop::bool::weighted(0.8), 1usize..20).prop_map(
                |(start, len, contiguous, body)| {
                    let mut offset = start;
                    let mut offsets = Vec::new();
                    for i in 0..len {
                        offsets.push((offset, body + i));
                        offset += if contiguous { 1 } else { 1 + (i as i64 % 3) };
                    }
                    Step::Put(offsets)
                }
            ),
            1 => prop::collection::vec((0i64..60, 1usize..9), 1..8).prop_map(Step::Put),
            5 => prop::collection::vec(0i64..300, 0..40).prop_map(Step::Remove),
            // Parts of a pull, and whole pulls (a call over all of one).
            5 => (0usize..8, 0usize..150, 1usize..10).prop_map(|(p, at, n)| Step::RemoveCall(p, at, n)),
            2 => (0usize..8).prop_map(|p| Step::RemoveCall(p, 0, 1000)),
            1 => prop::collection::vec(0i64..130, 0..6).prop_map(Step::Redeliver),
            1 => (0u64..40).prop_map(|ms| Step::Expire(Duration::from_millis(ms))),
            1 => Just(Step::Clear),
        ]
    }

    #[test]
    fn a_call_finishing_after_its_pull_left_still_counts_as_consuming() {
        let mut cache = PullCache::new(0);
        let pull = Arc::new(vec![message(0, 1), message(1, 2)]);
        cache.put_pull(&pull, 1);
        assert!(cache.remove_part(&pull, 0..2, 2));
        // The pull is gone; a late call over it changes nothing but the consume time.
        assert!(!cache.remove_part(&pull, 0..1, 3));
        assert_eq!(cache.snapshot(7).last_consume_timestamp, 3);
        assert_eq!(cache.cache_stats().count, 0);
    }

    fn cache_holds_pull(cache: &PullCache, batch: &Arc<Vec<MessageExt>>) -> bool {
        cache.pulls.iter().any(|p| Arc::ptr_eq(&p.messages, batch))
    }

    proptest! {
        /// The per-pull cache answers as the per-message process queue does, whatever the
        /// order offsets arrive and finish in.
        #[test]
        fn behaves_as_the_per_message_process_queue(steps in prop::collection::vec(step(), 1..40)) {
            let mut cache = PullCache::new(0);
            let mut model: ProcessQueue<MessageExt> = ProcessQueue::new(0);
            // The pulls put since the last clear, and whether each came in order (offsets
            // growing, above all put before): a call's removal is compared with the model's
            // removal by offset only while every pull did.
            let mut pulls: Vec<Arc<Vec<MessageExt>>> = Vec::new();
            let mut all_in_order = true;
            let mut highest: Option<i64> = None;
            for (now, step) in (1i64..).zip(steps) {
                match step {
                    Step::Put(offsets) => {
                        let batch =
                            Arc::new(offsets.iter().map(|&(o, len)| message(o, len)).collect::<Vec<_>>());
                        for m in batch.iter() {
                            all_in_order &= highest.is_none_or(|h| h < m.queue_offset);
                            highest = Some(highest.map_or(m.queue_offset, |h| h.max(m.queue_offset)));
                        }
                        cache.put_pull(&batch, now);
                        model.put_messages_consuming(batch.iter().cloned(), now);
                        pulls.push(batch);
                    }
                    Step::RemoveCall(p, at, n) => {
                        let Some(batch) = pulls.get(p % pulls.len().max(1)) else {
                            continue;
                        };
                        let start = at.min(batch.len());
                        let range = start..(start + n).min(batch.len());
                        let call = &batch[range.clone()];
                        if !all_in_order || call.is_empty() {
                            continue;
                        }
                        let cached_before = cache_holds_pull(&cache, batch);
                        let found = cache.remove_part(batch, range, now);
                        prop_assert_eq!(found, cached_before);
                        let offsets: Vec<i64> = call.iter().map(|m| m.queue_offset).collect();
                        let want = model.remove_messages(&offsets, now);
                        if found {
                            prop_assert_eq!(cache.consume_offset(), want);
                        }
                    }
                    Step::Remove(offsets) => {
                        prop_assert_eq!(
                            cache.remove_offsets(offsets.iter().copied(), now),
                            model.remove_messages(&offsets, now)
                        );
                    }
                    Step::Redeliver(offsets) => {
                        let copies: Vec<MessageExt> = offsets
                            .iter()
                            .filter_map(|&o| model.get(o).cloned())
                            .map(|mut m| {
                                m.reconsume_times += 1;
                                m
                            })
                            .collect();
                        let copies = Arc::new(copies);
                        cache.redeliver(&copies, now);
                        for copy in copies.iter() {
                            if let Some(cached) = model.get_mut(copy.queue_offset) {
                                *cached = copy.clone();
                            }
                        }
                        model.mark_offsets_consume_started(copies.iter().map(|m| m.queue_offset), now);
                    }
                    Step::Expire(timeout) => {
                        let expired = cache.expired_messages(now, timeout, 16);
                        let want = model.expired_messages(now, timeout, 16);
                        let got: Vec<i64> = expired.iter().map(|m| m.queue_offset).collect();
                        prop_assert_eq!(&got, &want);
                        for m in &expired {
                            prop_assert_eq!(
                                Some(m.reconsume_times),
                                model.get(m.queue_offset).map(|c| c.reconsume_times)
                            );
                        }
                    }
                    Step::Clear => {
                        cache.clear();
                        model.clear();
                        pulls.clear();
                        all_in_order = true;
                        highest = None;
                    }
                }
                prop_assert_eq!(cache.cache_stats(), model.cache_stats());
                prop_assert_eq!(cache.min_offset(), model.min_cached_offset());
                prop_assert_eq!(cache.max_offset(), model.max_cached_offset());
                let snapshot = cache.snapshot(7);
                let want = model.snapshot(7);
                prop_assert_eq!(snapshot.cached_msg_count, want.cached_msg_count);
                prop_assert_eq!(snapshot.cached_msg_min_offset, want.cached_msg_min_offset);
                prop_assert_eq!(snapshot.cached_msg_max_offset, want.cached_msg_max_offset);
                prop_assert_eq!(snapshot.last_consume_timestamp, want.last_consume_timestamp);
            }
        }
    }
}
