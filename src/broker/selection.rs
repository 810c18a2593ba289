//! What each SQL92 expression selected, per queue and offset: evaluated once per message and
//! expression, not once per pull.
//!
//! A tag filter decides from the consume queue's tags code; a SQL92 filter needs the message's
//! properties, so every message a pull scans is read from the log and evaluated. A consumer
//! of a 10 % selection makes the broker read ten messages per one it delivers, and every group,
//! member, re-read or retried pull with the same expression would read them again. Java's
//! broker keeps a bloom-filter bit per message and registered expression for the same reason
//! (`CommitLogDispatcherCalcBitMap`); here the answer itself is kept, exactly:
//!
//! - a pull evaluates what it scans and records the answers;
//! - a message stored on a queue some expression was pulled with is evaluated for that
//!   expression as it is stored, so a consumer that keeps up never makes a pull read the log
//!   for what it does not select.
//!
//! Two bits per message and expression; a queue keeps at most [`MAX_EXPRESSIONS_PER_QUEUE`]
//! expressions (the oldest goes first).

use std::collections::HashMap;
use std::sync::Arc;

use crate::filter::SqlFilter;

/// Expressions remembered per queue.
pub(crate) const MAX_EXPRESSIONS_PER_QUEUE: usize = 8;

/// Per offset: whether it was evaluated, and whether it was selected.
#[derive(Debug, Default)]
pub(crate) struct OffsetBits {
    known: Vec<u64>,
    selected: Vec<u64>,
}

impl OffsetBits {
    /// The answer for `offset`, if it was evaluated.
    pub(crate) fn get(&self, offset: i64) -> Option<bool> {
        let (word, bit) = Self::at(offset)?;
        let known = self.known.get(word)? & bit != 0;
        known.then(|| self.selected.get(word).is_some_and(|w| w & bit != 0))
    }

    /// Records the answer for `offset`.
    pub(crate) fn set(&mut self, offset: i64, selected: bool) {
        let Some((word, bit)) = Self::at(offset) else {
            return;
        };
        if self.known.len() <= word {
            self.known.resize(word + 1, 0);
            self.selected.resize(word + 1, 0);
        }
        self.known[word] |= bit;
        if selected {
            self.selected[word] |= bit;
        } else {
            self.selected[word] &= !bit;
        }
    }

    fn at(offset: i64) -> Option<(usize, u64)> {
        let offset = usize::try_from(offset).ok()?;
        Some((offset / 64, 1 << (offset % 64)))
    }
}

/// The expressions pulled with on one queue, each with its answers, oldest first.
type QueueAnswers = Vec<(Arc<SqlFilter>, OffsetBits)>;

/// The answers of the expressions pulled with, per topic and queue (keyed by topic first, so a
/// look-up by name allocates nothing).
#[derive(Debug, Default)]
pub(crate) struct Selections {
    topics: HashMap<String, HashMap<i32, QueueAnswers>>,
}

impl Selections {
    /// The answers of `filter` on the queue, to read and add to; the queue remembers
    /// `filter` from now on.
    pub(crate) fn of(
        &mut self,
        topic: &str,
        queue_id: i32,
        filter: &Arc<SqlFilter>,
    ) -> &mut OffsetBits {
        if !self.topics.contains_key(topic) {
            self.topics.insert(topic.to_owned(), HashMap::new());
        }
        let queues = self.topics.get_mut(topic).expect("inserted above");
        let expressions = queues.entry(queue_id).or_default();
        let at = match expressions.iter().position(|(f, _)| **f == **filter) {
            Some(at) => at,
            None => {
                if expressions.len() >= MAX_EXPRESSIONS_PER_QUEUE {
                    expressions.remove(0);
                }
                expressions.push((Arc::clone(filter), OffsetBits::default()));
                expressions.len() - 1
            }
        };
        &mut expressions[at].1
    }

    /// Records, for every expression pulled with on the queue, what `selects` answers for the
    /// message at `offset` (one just stored).
    pub(crate) fn answer(
        &mut self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        mut selects: impl FnMut(&SqlFilter) -> bool,
    ) {
        let Some(expressions) = self
            .topics
            .get_mut(topic)
            .and_then(|queues| queues.get_mut(&queue_id))
        else {
            return;
        };
        for (filter, answers) in expressions {
            answers.set(offset, selects(filter));
        }
    }

    /// Whether an expression was pulled with on some queue of `topic` (checked on every
    /// stored message).
    pub(crate) fn knows_topic(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_kept_per_expression_queue_and_offset() {
        let eu = Arc::new(SqlFilter::compile("region = 'eu'").unwrap());
        let us = Arc::new(SqlFilter::compile("region = 'us'").unwrap());
        let mut s = Selections::default();
        assert_eq!(s.of("T", 0, &eu).get(5), None);
        s.of("T", 0, &eu).set(5, true);
        s.of("T", 0, &eu).set(130, false);
        s.of("T", 0, &us).set(5, false);
        assert_eq!(s.of("T", 0, &eu).get(5), Some(true));
        assert_eq!(s.of("T", 0, &eu).get(130), Some(false));
        assert_eq!(s.of("T", 0, &eu).get(6), None);
        assert_eq!(s.of("T", 0, &us).get(5), Some(false));
        assert_eq!(s.of("T", 1, &eu).get(5), None);
        assert!(s.knows_topic("T") && !s.knows_topic("U"));
        s.answer("T", 0, 6, |f| *f == *eu);
        assert_eq!(s.of("T", 0, &eu).get(6), Some(true));
        assert_eq!(s.of("T", 0, &us).get(6), Some(false));
    }

    #[test]
    fn a_queue_keeps_its_newest_expressions() {
        let mut s = Selections::default();
        let filters: Vec<Arc<SqlFilter>> = (0..=MAX_EXPRESSIONS_PER_QUEUE)
            .map(|i| Arc::new(SqlFilter::compile(&format!("a = {i}")).unwrap()))
            .collect();
        for f in &filters {
            s.of("T", 0, f).set(0, true);
        }
        let mut answered = 0;
        s.answer("T", 0, 1, |_| {
            answered += 1;
            true
        });
        assert_eq!(answered, MAX_EXPRESSIONS_PER_QUEUE);
        assert_eq!(s.of("T", 0, &filters[1]).get(0), Some(true));
        assert_eq!(s.of("T", 0, &filters[0]).get(0), None, "the oldest went");
    }
}
