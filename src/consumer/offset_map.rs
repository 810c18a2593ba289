//! [`OffsetMap`]: values by queue offset, for the per-queue caches (`process_queue`,
//! `key_order`).

use std::collections::VecDeque;

/// Values by queue offset, in offset order: a map with the operations the process queue
/// needs, kept as a sorted deque. Pulled messages arrive in increasing offsets and finish
/// roughly in that order, so inserts append at the back and removals take from the front —
/// no allocation and no rebalancing per message, unlike a tree.
#[derive(Debug, Clone)]
pub(crate) struct OffsetMap<V> {
    entries: VecDeque<(i64, V)>,
}

impl<V> Default for OffsetMap<V> {
    fn default() -> Self {
        OffsetMap {
            entries: VecDeque::new(),
        }
    }
}

impl<V> OffsetMap<V> {
    /// Where `offset` is (`Ok`) or would go (`Err`).
    #[inline]
    fn position(&self, offset: i64) -> Result<usize, usize> {
        let Some(&(first, _)) = self.entries.front() else {
            return Err(0);
        };
        if offset < first {
            return Err(0);
        }
        // Offsets are usually contiguous: then the entry sits at `offset - first`.
        let guess = offset
            .checked_sub(first)
            .and_then(|gap| usize::try_from(gap).ok());
        if let Some(guess) = guess {
            match self.entries.get(guess) {
                Some((found, _)) if *found == offset => return Ok(guess),
                // Past the end: an append when the last offset is below (the usual insert).
                None if self.entries.back().is_some_and(|(last, _)| *last < offset) => {
                    return Err(self.entries.len())
                }
                _ => {}
            }
        }
        self.entries.binary_search_by_key(&offset, |(o, _)| *o)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn contains_key(&self, offset: &i64) -> bool {
        self.position(*offset).is_ok()
    }

    #[inline]
    pub(crate) fn get(&self, offset: &i64) -> Option<&V> {
        let at = self.position(*offset).ok()?;
        self.entries.get(at).map(|(_, v)| v)
    }

    /// Where the value at `offset` is, for [`OffsetMap::at`] and [`OffsetMap::at_mut`]: valid
    /// until the next insert or removal.
    #[inline]
    pub(crate) fn index_of(&self, offset: i64) -> Option<usize> {
        self.position(offset).ok()
    }

    /// The value at `index` (from [`OffsetMap::index_of`]).
    #[inline]
    pub(crate) fn at(&self, index: usize) -> Option<&V> {
        self.entries.get(index).map(|(_, v)| v)
    }

    /// The value at `index` (from [`OffsetMap::index_of`]).
    #[inline]
    pub(crate) fn at_mut(&mut self, index: usize) -> Option<&mut V> {
        self.entries.get_mut(index).map(|(_, v)| v)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, offset: &i64) -> Option<&mut V> {
        let at = self.position(*offset).ok()?;
        self.entries.get_mut(at).map(|(_, v)| v)
    }

    /// Inserts or replaces; returns the replaced value.
    pub(crate) fn insert(&mut self, offset: i64, value: V) -> Option<V> {
        match self.position(offset) {
            Ok(at) => self
                .entries
                .get_mut(at)
                .map(|slot| std::mem::replace(&mut slot.1, value)),
            Err(at) if at == self.entries.len() => {
                self.entries.push_back((offset, value));
                None
            }
            Err(at) => {
                self.entries.insert(at, (offset, value));
                None
            }
        }
    }

    pub(crate) fn remove(&mut self, offset: &i64) -> Option<V> {
        let at = self.position(*offset).ok()?;
        // Messages mostly finish in offset order: the front goes without a general shift.
        let removed = if at == 0 {
            self.entries.pop_front()
        } else {
            self.entries.remove(at)
        };
        removed.map(|(_, v)| v)
    }

    /// Appends `value` at `offset` when `offset` is above every offset held (the usual case
    /// for pulled messages); otherwise gives `value` back untouched.
    pub(crate) fn try_append(&mut self, offset: i64, value: V) -> Result<(), V> {
        match self.entries.back() {
            Some((last, _)) if *last >= offset => Err(value),
            _ => {
                self.entries.push_back((offset, value));
                Ok(())
            }
        }
    }

    pub(crate) fn pop_first(&mut self) -> Option<(i64, V)> {
        self.entries.pop_front()
    }

    pub(crate) fn pop_last(&mut self) -> Option<(i64, V)> {
        self.entries.pop_back()
    }

    /// The value at the lowest offset.
    pub(crate) fn first_value(&self) -> Option<&V> {
        self.entries.front().map(|(_, v)| v)
    }

    /// The value at the highest offset.
    pub(crate) fn last_value(&self) -> Option<&V> {
        self.entries.back().map(|(_, v)| v)
    }

    pub(crate) fn first_key(&self) -> Option<i64> {
        self.entries.front().map(|(o, _)| *o)
    }

    pub(crate) fn last_key(&self) -> Option<i64> {
        self.entries.back().map(|(o, _)| *o)
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = i64> + '_ {
        self.entries.iter().map(|(o, _)| *o)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.entries.iter().map(|(_, v)| v)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (i64, &V)> + '_ {
        self.entries.iter().map(|(o, v)| (*o, v))
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The deque-backed offset map behaves like an ordered map for any operation order.
        #[test]
        fn offset_map_matches_an_ordered_map(
            ops in proptest::collection::vec((0u8..6, 0i64..40), 1..120)
        ) {
            let mut map = OffsetMap::default();
            let mut model = BTreeMap::new();
            for (i, (kind, offset)) in ops.into_iter().enumerate() {
                match kind {
                    0 => prop_assert_eq!(map.insert(offset, i), model.insert(offset, i)),
                    1 => prop_assert_eq!(map.remove(&offset), model.remove(&offset)),
                    2 => prop_assert_eq!(map.pop_first(), model.pop_first()),
                    3 => prop_assert_eq!(map.pop_last(), model.pop_last()),
                    4 => {
                        let above = model.keys().next_back().is_none_or(|last| *last < offset);
                        let appended = map.try_append(offset, i);
                        prop_assert_eq!(appended.is_ok(), above);
                        if above {
                            model.insert(offset, i);
                        }
                    }
                    _ => {
                        if let Some(value) = map.get_mut(&offset) {
                            *value += 1000;
                        }
                        if let Some(value) = model.get_mut(&offset) {
                            *value += 1000;
                        }
                    }
                }
                prop_assert_eq!(map.get(&offset), model.get(&offset));
                prop_assert_eq!(map.index_of(offset).and_then(|at| map.at(at)), model.get(&offset));
                prop_assert_eq!(map.contains_key(&offset), model.contains_key(&offset));
                prop_assert_eq!(map.first_key(), model.keys().next().copied());
                prop_assert_eq!(map.last_key(), model.keys().next_back().copied());
                prop_assert_eq!(map.first_value(), model.values().next());
                prop_assert_eq!(map.last_value(), model.values().next_back());
                prop_assert_eq!(map.len(), model.len());
                let pairs: Vec<(i64, usize)> = map.iter().map(|(o, v)| (o, *v)).collect();
                let expected: Vec<(i64, usize)> = model.iter().map(|(o, v)| (*o, *v)).collect();
                prop_assert_eq!(pairs, expected);
            }
        }
    }
}
