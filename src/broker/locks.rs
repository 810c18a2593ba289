//! Queue locks for orderly consumption (`RebalanceLockManager`).

use crate::message::MessageQueue;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
struct LockEntry {
    client_id: String,
    last_update_ms: i64,
}

/// Which client holds each queue of each group, with expiry.
#[derive(Clone, Debug)]
pub struct LockTable {
    expiry_ms: i64,
    groups: BTreeMap<String, BTreeMap<MessageQueue, LockEntry>>,
}

impl LockTable {
    /// Locks expire `expiry_ms` after their last renewal (60 s on a real broker).
    pub fn new(expiry_ms: i64) -> Self {
        LockTable {
            expiry_ms,
            groups: BTreeMap::new(),
        }
    }

    fn expired(&self, entry: &LockEntry, now_ms: i64) -> bool {
        now_ms - entry.last_update_ms > self.expiry_ms
    }

    /// Locks (or renews) every queue that is free, expired or already held by `client_id`;
    /// returns the queues the client now holds.
    pub fn try_lock_batch(
        &mut self,
        group: &str,
        queues: &[MessageQueue],
        client_id: &str,
        now_ms: i64,
    ) -> BTreeSet<MessageQueue> {
        let expiry = self.expiry_ms;
        let table = self.groups.entry(group.to_owned()).or_default();
        let mut locked = BTreeSet::new();
        for mq in queues {
            match table.get_mut(mq) {
                Some(entry)
                    if entry.client_id == client_id || now_ms - entry.last_update_ms > expiry =>
                {
                    entry.client_id = client_id.to_owned();
                    entry.last_update_ms = now_ms;
                    locked.insert(mq.clone());
                }
                Some(_) => {}
                None => {
                    table.insert(
                        mq.clone(),
                        LockEntry {
                            client_id: client_id.to_owned(),
                            last_update_ms: now_ms,
                        },
                    );
                    locked.insert(mq.clone());
                }
            }
        }
        locked
    }

    /// Releases the queues held by `client_id`; locks of other clients are left alone.
    pub fn unlock_batch(&mut self, group: &str, queues: &[MessageQueue], client_id: &str) {
        if let Some(table) = self.groups.get_mut(group) {
            for mq in queues {
                if table.get(mq).is_some_and(|e| e.client_id == client_id) {
                    table.remove(mq);
                }
            }
        }
    }

    /// The live holder of a queue lock.
    pub fn holder(&self, group: &str, mq: &MessageQueue, now_ms: i64) -> Option<&str> {
        let entry = self.groups.get(group)?.get(mq)?;
        (!self.expired(entry, now_ms)).then_some(entry.client_id.as_str())
    }

    /// Forgets expired locks.
    pub fn purge_expired(&mut self, now_ms: i64) {
        let expiry = self.expiry_ms;
        for table in self.groups.values_mut() {
            table.retain(|_, e| now_ms - e.last_update_ms <= expiry);
        }
        self.groups.retain(|_, t| !t.is_empty());
    }

    /// Drops every lock (a broker restart loses them).
    pub fn clear(&mut self) {
        self.groups.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mq(q: i32) -> MessageQueue {
        MessageQueue::new("T", "broker-a", q)
    }

    #[test]
    fn a_lock_is_exclusive_until_it_expires() {
        let mut locks = LockTable::new(60_000);
        let got = locks.try_lock_batch("g", &[mq(0), mq(1)], "c1", 0);
        assert_eq!(got.len(), 2);
        let got = locks.try_lock_batch("g", &[mq(0), mq(2)], "c2", 1_000);
        assert_eq!(got.into_iter().collect::<Vec<_>>(), vec![mq(2)]);
        // Another group is independent.
        assert_eq!(locks.try_lock_batch("h", &[mq(0)], "c2", 1_000).len(), 1);
        // Exactly at the expiry boundary the lock still holds; one ms later it can be taken.
        assert!(locks.try_lock_batch("g", &[mq(0)], "c2", 60_000).is_empty());
        assert_eq!(locks.try_lock_batch("g", &[mq(0)], "c2", 60_001).len(), 1);
        assert_eq!(locks.holder("g", &mq(0), 60_001), Some("c2"));
    }

    #[test]
    fn renewal_extends_and_unlock_only_releases_own_locks() {
        let mut locks = LockTable::new(100);
        locks.try_lock_batch("g", &[mq(0)], "c1", 0);
        locks.try_lock_batch("g", &[mq(0)], "c1", 90);
        assert!(locks.try_lock_batch("g", &[mq(0)], "c2", 150).is_empty());
        locks.unlock_batch("g", &[mq(0)], "c2");
        assert_eq!(locks.holder("g", &mq(0), 150), Some("c1"));
        locks.unlock_batch("g", &[mq(0)], "c1");
        assert_eq!(locks.try_lock_batch("g", &[mq(0)], "c2", 151).len(), 1);
        locks.purge_expired(1_000);
        assert_eq!(locks.holder("g", &mq(0), 1_000), None);
    }
}
