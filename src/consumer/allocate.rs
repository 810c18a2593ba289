//! Queue allocation: which queues of a topic this consumer owns in clustering mode.
//!
//! Every consumer of a group runs the same strategy on the same inputs and keeps its own share,
//! so the inputs must be in the same order everywhere. **The caller sorts**, as Java's
//! `RebalanceImpl` does: queues by (topic, broker name, queue id) and client ids
//! lexicographically, both de-duplicated. [`allocate_sorted`] does that for you and also guards
//! against custom strategies returning queues they were not given. The built-in strategies
//! assume sorted, de-duplicated input and are otherwise bit-for-bit Java's (a Java and a Rust
//! consumer in one group agree on the split).
//!
//! Every strategy returns nothing when `current_cid` is not in `cids` (a consumer the broker
//! does not know yet must not take queues from the others), or when either list is empty.
//!
//! ```
//! use rocketmq_actor::consumer::allocate::{allocate_sorted, Averagely};
//! use rocketmq_actor::MessageQueue;
//!
//! let mqs: Vec<_> = (0..4).map(|q| MessageQueue::new("T", "broker-a", q)).collect();
//! let cids = vec!["cid-b".to_string(), "cid-a".to_string()];
//! let mine = allocate_sorted(&Averagely, "g", "cid-b", &mqs, &cids);
//! // Sorted ids: cid-a, cid-b → cid-b is index 1 and gets the second half.
//! assert_eq!(mine.into_iter().map(|q| q.queue_id).collect::<Vec<_>>(), vec![2, 3]);
//! ```

use crate::consumer::config::AllocateStrategyKind;
use crate::message::MessageQueue;
use md5::{Digest, Md5};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A queue allocation strategy. Implement it for custom strategies; it must be deterministic
/// (same inputs → same output on every consumer).
pub trait AllocateStrategy: Send + Sync {
    /// A short name, shown in running info (Java names: `AVG`, `AVG_BY_CIRCLE`, …).
    fn name(&self) -> &str;

    /// The queues among `mqs` that `current_cid` should own, given all consumer ids `cids` of
    /// `group`. Inputs are sorted and de-duplicated by the caller.
    fn allocate(
        &self,
        group: &str,
        current_cid: &str,
        mqs: &[MessageQueue],
        cids: &[String],
    ) -> Vec<MessageQueue>;
}

impl fmt::Debug for dyn AllocateStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AllocateStrategy({})", self.name())
    }
}

/// The index of `current_cid` in `cids`, or `None` when there is nothing to allocate
/// (Java's `AbstractAllocateMessageQueueStrategy.check`, minus the exceptions).
fn position_of(current_cid: &str, mqs: &[MessageQueue], cids: &[String]) -> Option<usize> {
    if current_cid.is_empty() || mqs.is_empty() {
        return None;
    }
    cids.iter().position(|c| c == current_cid)
}

/// Sorts and de-duplicates the inputs, runs `strategy`, and keeps only queues that were in
/// `mqs` (once each). Use this rather than calling [`AllocateStrategy::allocate`] directly.
pub fn allocate_sorted(
    strategy: &dyn AllocateStrategy,
    group: &str,
    current_cid: &str,
    mqs: &[MessageQueue],
    cids: &[String],
) -> BTreeSet<MessageQueue> {
    let sorted_mqs: Vec<MessageQueue> = mqs
        .iter()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let sorted_cids: Vec<String> = cids
        .iter()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let given: BTreeSet<&MessageQueue> = sorted_mqs.iter().collect();
    strategy
        .allocate(group, current_cid, &sorted_mqs, &sorted_cids)
        .into_iter()
        .filter(|mq| given.contains(mq))
        .collect()
}

/// Contiguous, evenly sized ranges: with `n` queues and `c` consumers, the first `n % c`
/// consumers get `n / c + 1` queues, the others `n / c` (Java `AllocateMessageQueueAveragely`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Averagely;

impl AllocateStrategy for Averagely {
    fn name(&self) -> &str {
        "AVG"
    }

    fn allocate(
        &self,
        _group: &str,
        current_cid: &str,
        mqs: &[MessageQueue],
        cids: &[String],
    ) -> Vec<MessageQueue> {
        let Some(index) = position_of(current_cid, mqs, cids) else {
            return Vec::new();
        };
        let (n, c) = (mqs.len(), cids.len());
        let remainder = n % c;
        let gets_extra = remainder > 0 && index < remainder;
        let share = if n <= c {
            1
        } else if gets_extra {
            n / c + 1
        } else {
            n / c
        };
        let start = if gets_extra {
            index * share
        } else {
            index * share + remainder
        };
        let take = share.min(n.saturating_sub(start));
        mqs.iter().skip(start).take(take).cloned().collect()
    }
}

/// Round robin: queue `k` goes to consumer `k % c` (Java `AllocateMessageQueueAveragelyByCircle`).
#[derive(Debug, Clone, Copy, Default)]
pub struct AveragelyByCircle;

impl AllocateStrategy for AveragelyByCircle {
    fn name(&self) -> &str {
        "AVG_BY_CIRCLE"
    }

    fn allocate(
        &self,
        _group: &str,
        current_cid: &str,
        mqs: &[MessageQueue],
        cids: &[String],
    ) -> Vec<MessageQueue> {
        let Some(index) = position_of(current_cid, mqs, cids) else {
            return Vec::new();
        };
        mqs.iter()
            .skip(index)
            .step_by(cids.len())
            .cloned()
            .collect()
    }
}

/// The consistent-hash ring's hash: the first 4 bytes of MD5(`key`) as an unsigned big-endian
/// number (Java `ConsistentHashRouter.MD5Hash`).
///
/// ```
/// use rocketmq_actor::consumer::allocate::ring_hash;
/// // MD5("abc") = 900150983cd24fb0d6963f7d28e17f72
/// assert_eq!(ring_hash("abc"), 0x9001_5098);
/// ```
pub fn ring_hash(key: &str) -> u32 {
    let digest = Md5::digest(key.as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// A consistent-hash ring: `virtual_nodes` points per consumer keyed `"<cid>-<i>"`; a queue
/// (keyed by its `Display`, Java's `MessageQueue.toString()`) belongs to the first point at or
/// after its hash, wrapping around (Java `AllocateMessageQueueConsistentHash`).
#[derive(Debug, Clone, Copy)]
pub struct ConsistentHash {
    virtual_nodes: usize,
}

impl ConsistentHash {
    /// A ring with `virtual_nodes` points per consumer (at least 1).
    pub fn new(virtual_nodes: usize) -> Self {
        ConsistentHash {
            virtual_nodes: virtual_nodes.max(1),
        }
    }
}

impl Default for ConsistentHash {
    /// Java's default of 10 virtual nodes.
    fn default() -> Self {
        ConsistentHash::new(10)
    }
}

impl AllocateStrategy for ConsistentHash {
    fn name(&self) -> &str {
        "CONSISTENT_HASH"
    }

    fn allocate(
        &self,
        _group: &str,
        current_cid: &str,
        mqs: &[MessageQueue],
        cids: &[String],
    ) -> Vec<MessageQueue> {
        if position_of(current_cid, mqs, cids).is_none() {
            return Vec::new();
        }
        // Inserted in cid order so that a hash collision resolves like Java's TreeMap.put
        // (the later point wins).
        let mut ring: BTreeMap<u32, &str> = BTreeMap::new();
        for cid in cids {
            for replica in 0..self.virtual_nodes {
                ring.insert(ring_hash(&format!("{cid}-{replica}")), cid.as_str());
            }
        }
        let owner_of = |mq: &MessageQueue| {
            let hash = ring_hash(&mq.to_string());
            ring.range(hash..)
                .next()
                .or_else(|| ring.iter().next())
                .map(|(_, cid)| *cid)
        };
        mqs.iter()
            .filter(|mq| owner_of(mq) == Some(current_cid))
            .cloned()
            .collect()
    }
}

/// A fixed list of queues, whatever the others do (Java `AllocateMessageQueueByConfig`).
/// Unlike Java it still returns nothing when this consumer is not in the consumer list, like
/// every other strategy; queues not currently in the route are dropped by [`allocate_sorted`].
#[derive(Debug, Clone, Default)]
pub struct ByConfig {
    queues: Vec<MessageQueue>,
}

impl ByConfig {
    /// Always takes `queues`.
    pub fn new(queues: Vec<MessageQueue>) -> Self {
        ByConfig { queues }
    }
}

impl AllocateStrategy for ByConfig {
    fn name(&self) -> &str {
        "CONFIG"
    }

    fn allocate(
        &self,
        _group: &str,
        current_cid: &str,
        mqs: &[MessageQueue],
        cids: &[String],
    ) -> Vec<MessageQueue> {
        if position_of(current_cid, mqs, cids).is_none() {
            return Vec::new();
        }
        self.queues.clone()
    }
}

/// The machine room of a broker named `<room>@<name>`: Java's `brokerName.split("@")` must give
/// exactly two parts (trailing empty parts dropped, as Java's `split` does).
fn room_of_broker_name(broker_name: &str) -> Option<&str> {
    let mut parts: Vec<&str> = broker_name.split('@').collect();
    while parts.last() == Some(&"") {
        parts.pop();
    }
    match parts.as_slice() {
        [room, _] => Some(room),
        _ => None,
    }
}

/// Only queues of brokers named `<room>@<name>` whose room is one of `rooms`, shared by all
/// consumers: each gets `k / c` contiguous queues, and the first `k % c` consumers one more from
/// the tail (Java `AllocateMessageQueueByMachineRoom`).
#[derive(Debug, Clone, Default)]
pub struct ByMachineRoom {
    rooms: BTreeSet<String>,
}

impl ByMachineRoom {
    /// Consumes the queues of brokers in `rooms`.
    pub fn new(rooms: impl IntoIterator<Item = String>) -> Self {
        ByMachineRoom {
            rooms: rooms.into_iter().collect(),
        }
    }
}

impl AllocateStrategy for ByMachineRoom {
    fn name(&self) -> &str {
        "MACHINE_ROOM"
    }

    fn allocate(
        &self,
        _group: &str,
        current_cid: &str,
        mqs: &[MessageQueue],
        cids: &[String],
    ) -> Vec<MessageQueue> {
        let Some(index) = position_of(current_cid, mqs, cids) else {
            return Vec::new();
        };
        let eligible: Vec<&MessageQueue> = mqs
            .iter()
            .filter(|mq| {
                room_of_broker_name(&mq.broker_name).is_some_and(|r| self.rooms.contains(r))
            })
            .collect();
        let c = cids.len();
        let (per_consumer, remainder) = (eligible.len() / c, eligible.len() % c);
        let start = per_consumer * index;
        let mut mine: Vec<MessageQueue> = eligible
            .iter()
            .skip(start)
            .take(per_consumer)
            .map(|mq| (*mq).clone())
            .collect();
        if index < remainder {
            if let Some(extra) = eligible.get(index + per_consumer * c) {
                mine.push((*extra).clone());
            }
        }
        mine
    }
}

/// Tells which machine room a broker queue and a consumer live in, for [`MachineRoomNearby`].
/// An empty string is a room like any other (it simply groups the unresolvable ones).
pub trait MachineRoomResolver: Send + Sync {
    /// The room of the broker holding `mq`.
    fn broker_room(&self, mq: &MessageQueue) -> String;
    /// The room of the consumer with client id `cid`.
    fn consumer_room(&self, cid: &str) -> String;
}

/// Reads rooms from names: a broker's room is its name up to the first `separator`
/// (`"room1@broker-a"` → `room1`); a consumer's room is its client id after the last
/// `separator` (Java client ids are `ip@instance[@unit]`, so set the instance or unit name to
/// the room). A name without the separator is its own room.
#[derive(Debug, Clone)]
pub struct SeparatorRoomResolver {
    separator: String,
}

impl SeparatorRoomResolver {
    /// Splits names at `separator`.
    pub fn new(separator: impl Into<String>) -> Self {
        SeparatorRoomResolver {
            separator: separator.into(),
        }
    }
}

impl Default for SeparatorRoomResolver {
    /// Splits at `"@"`.
    fn default() -> Self {
        SeparatorRoomResolver::new("@")
    }
}

impl MachineRoomResolver for SeparatorRoomResolver {
    fn broker_room(&self, mq: &MessageQueue) -> String {
        if self.separator.is_empty() {
            return mq.broker_name.clone();
        }
        mq.broker_name
            .split(self.separator.as_str())
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    fn consumer_room(&self, cid: &str) -> String {
        if self.separator.is_empty() {
            return cid.to_owned();
        }
        cid.rsplit(self.separator.as_str())
            .next()
            .unwrap_or_default()
            .to_owned()
    }
}

/// Same-room first: the queues of a room are shared (by `inner`) among the consumers of that
/// room; the queues of a room with no consumer at all are shared (by `inner`) among every
/// consumer (Java `AllocateMachineRoomNearby`).
pub struct MachineRoomNearby<R: MachineRoomResolver> {
    inner: Box<dyn AllocateStrategy>,
    resolver: R,
    name: String,
}

impl<R: MachineRoomResolver> MachineRoomNearby<R> {
    /// Allocates inside each room with `inner`, rooms told by `resolver`.
    pub fn new(inner: Box<dyn AllocateStrategy>, resolver: R) -> Self {
        let name = format!("MACHINE_ROOM_NEARBY-{}", inner.name());
        MachineRoomNearby {
            inner,
            resolver,
            name,
        }
    }
}

impl<R: MachineRoomResolver> fmt::Debug for MachineRoomNearby<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl<R: MachineRoomResolver> AllocateStrategy for MachineRoomNearby<R> {
    fn name(&self) -> &str {
        &self.name
    }

    fn allocate(
        &self,
        group: &str,
        current_cid: &str,
        mqs: &[MessageQueue],
        cids: &[String],
    ) -> Vec<MessageQueue> {
        if position_of(current_cid, mqs, cids).is_none() {
            return Vec::new();
        }
        let mut queues_by_room: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
        for mq in mqs {
            queues_by_room
                .entry(self.resolver.broker_room(mq))
                .or_default()
                .push(mq.clone());
        }
        let mut consumers_by_room: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for cid in cids {
            consumers_by_room
                .entry(self.resolver.consumer_room(cid))
                .or_default()
                .push(cid.clone());
        }
        let my_room = self.resolver.consumer_room(current_cid);
        let mut mine = Vec::new();
        if let (Some(queues), Some(consumers)) = (
            queues_by_room.remove(&my_room),
            consumers_by_room.get(&my_room),
        ) {
            mine.extend(self.inner.allocate(group, current_cid, &queues, consumers));
        }
        for (room, queues) in &queues_by_room {
            if !consumers_by_room.contains_key(room) {
                mine.extend(self.inner.allocate(group, current_cid, queues, cids));
            }
        }
        mine
    }
}

/// Builds the strategy a configuration names.
///
/// ```
/// use rocketmq_actor::consumer::{allocate::strategy_for, AllocateStrategyKind};
/// assert_eq!(strategy_for(&AllocateStrategyKind::AveragelyByCircle).name(), "AVG_BY_CIRCLE");
/// ```
pub fn strategy_for(kind: &AllocateStrategyKind) -> Box<dyn AllocateStrategy> {
    match kind {
        AllocateStrategyKind::Averagely => Box::new(Averagely),
        AllocateStrategyKind::AveragelyByCircle => Box::new(AveragelyByCircle),
        AllocateStrategyKind::ConsistentHash { virtual_nodes } => Box::new(ConsistentHash::new(
            usize::try_from(*virtual_nodes).unwrap_or(usize::MAX),
        )),
        AllocateStrategyKind::ByConfig { queues } => Box::new(ByConfig::new(queues.clone())),
        AllocateStrategyKind::ByMachineRoom { rooms } => {
            Box::new(ByMachineRoom::new(rooms.iter().cloned()))
        }
        AllocateStrategyKind::MachineRoomNearby { inner, separator } => {
            Box::new(MachineRoomNearby::new(
                strategy_for(inner),
                SeparatorRoomResolver::new(separator.clone()),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn queues(topic: &str, broker: &str, n: i32) -> Vec<MessageQueue> {
        (0..n)
            .map(|q| MessageQueue::new(topic, broker, q))
            .collect()
    }

    fn cids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("cid-{i:02}")).collect()
    }

    fn ids(mqs: &[MessageQueue]) -> Vec<i32> {
        mqs.iter().map(|q| q.queue_id).collect()
    }

    /// Every consumer's share, in consumer order.
    fn shares(
        strategy: &dyn AllocateStrategy,
        mqs: &[MessageQueue],
        cids: &[String],
    ) -> Vec<Vec<MessageQueue>> {
        cids.iter()
            .map(|cid| strategy.allocate("g", cid, mqs, cids))
            .collect()
    }

    fn assert_partition(mqs: &[MessageQueue], shares: &[Vec<MessageQueue>]) {
        let mut seen = BTreeMap::new();
        for share in shares {
            for mq in share {
                *seen.entry(mq.clone()).or_insert(0) += 1;
            }
        }
        for mq in mqs {
            assert_eq!(seen.get(mq), Some(&1), "{mq} must have exactly one owner");
        }
        assert_eq!(seen.len(), mqs.len(), "no foreign queue may appear");
    }

    #[test]
    fn averagely_matches_the_reference_formula_example() {
        // n = 8, c = 3: mod = 2, consumers 0 and 1 get 3, consumer 2 gets 2 starting at 2*2+2.
        let mqs = queues("T", "b", 8);
        let all = shares(&Averagely, &mqs, &cids(3));
        assert_eq!(ids(&all[0]), vec![0, 1, 2]);
        assert_eq!(ids(&all[1]), vec![3, 4, 5]);
        assert_eq!(ids(&all[2]), vec![6, 7]);
        // More consumers than queues: one each, the rest idle.
        let all = shares(&Averagely, &queues("T", "b", 2), &cids(4));
        assert_eq!(
            all.iter().map(|s| ids(s)).collect::<Vec<_>>(),
            vec![vec![0], vec![1], vec![], vec![]]
        );
    }

    #[test]
    fn circle_deals_round_robin() {
        let all = shares(&AveragelyByCircle, &queues("T", "b", 7), &cids(3));
        assert_eq!(ids(&all[0]), vec![0, 3, 6]);
        assert_eq!(ids(&all[1]), vec![1, 4]);
        assert_eq!(ids(&all[2]), vec![2, 5]);
    }

    #[test]
    fn unknown_consumer_or_empty_inputs_get_nothing() {
        let mqs = queues("T", "b", 4);
        let strategies: Vec<Box<dyn AllocateStrategy>> = vec![
            Box::new(Averagely),
            Box::new(AveragelyByCircle),
            Box::new(ConsistentHash::default()),
            Box::new(ByConfig::new(mqs.clone())),
            Box::new(ByMachineRoom::new(["r".to_owned()])),
            Box::new(MachineRoomNearby::new(
                Box::new(Averagely),
                SeparatorRoomResolver::default(),
            )),
        ];
        for s in &strategies {
            assert!(
                s.allocate("g", "stranger", &mqs, &cids(2)).is_empty(),
                "{s:?}"
            );
            assert!(s.allocate("g", "cid-00", &[], &cids(2)).is_empty(), "{s:?}");
            assert!(s.allocate("g", "cid-00", &mqs, &[]).is_empty(), "{s:?}");
            assert!(s.allocate("g", "", &mqs, &cids(2)).is_empty(), "{s:?}");
        }
    }

    #[test]
    fn ring_hash_uses_the_first_four_md5_bytes() {
        // RFC 1321 test vectors: MD5("") = d41d8cd9…, MD5("message digest") = f96b697d….
        assert_eq!(ring_hash(""), 0xd41d_8cd9);
        assert_eq!(ring_hash("message digest"), 0xf96b_697d);
    }

    /// An independent reading of the ring: a queue goes to the virtual node with the smallest
    /// hash ≥ its own, or the smallest overall; later consumers win hash collisions.
    fn brute_force_owner(mq: &MessageQueue, cids: &[String], nodes: usize) -> String {
        let mut points: Vec<(u32, usize, String)> = Vec::new();
        for (order, cid) in cids.iter().enumerate() {
            for i in 0..nodes {
                points.push((ring_hash(&format!("{cid}-{i}")), order, cid.clone()));
            }
        }
        let key = ring_hash(&format!(
            "MessageQueue [topic={}, brokerName={}, queueId={}]",
            mq.topic, mq.broker_name, mq.queue_id
        ));
        let at_or_after: Vec<_> = points.iter().filter(|p| p.0 >= key).collect();
        let candidates = if at_or_after.is_empty() {
            points.iter().collect()
        } else {
            at_or_after
        };
        let best_hash = candidates.iter().map(|p| p.0).min().unwrap();
        candidates
            .iter()
            .filter(|p| p.0 == best_hash)
            .max_by_key(|p| p.1)
            .unwrap()
            .2
            .clone()
    }

    #[test]
    fn consistent_hash_matches_a_brute_force_ring() {
        let mqs: Vec<_> = queues("TopicTest", "broker-a", 8)
            .into_iter()
            .chain(queues("TopicTest", "broker-b", 8))
            .collect();
        let cids = vec![
            "10.0.0.1@1234#1".to_owned(),
            "10.0.0.2@99#7".to_owned(),
            "10.0.0.3@5#5".to_owned(),
        ];
        for cid in &cids {
            let got = ConsistentHash::default().allocate("g", cid, &mqs, &cids);
            let want: Vec<_> = mqs
                .iter()
                .filter(|mq| &brute_force_owner(mq, &cids, 10) == cid)
                .cloned()
                .collect();
            assert_eq!(got, want, "{cid}");
        }
    }

    #[test]
    fn consistent_hash_moves_few_queues_when_a_consumer_joins() {
        let mqs = queues("T", "b", 64);
        let before = cids(4);
        let after = cids(5);
        let hash = ConsistentHash::default();
        let owner = |cids: &[String], mq: &MessageQueue| {
            cids.iter()
                .find(|c| hash.allocate("g", c, &mqs, cids).contains(mq))
                .cloned()
        };
        for mq in &mqs {
            let (b, a) = (owner(&before, mq), owner(&after, mq));
            // A queue either stays put or moves to the newcomer, never between old consumers.
            assert!(
                a == b || a.as_deref() == Some("cid-04"),
                "{mq}: {b:?} -> {a:?}"
            );
        }
    }

    #[test]
    fn by_config_returns_its_list() {
        let mqs = queues("T", "b", 4);
        let fixed = vec![
            MessageQueue::new("T", "b", 2),
            MessageQueue::new("T", "b", 9),
        ];
        let s = ByConfig::new(fixed.clone());
        assert_eq!(s.allocate("g", "cid-01", &mqs, &cids(2)), fixed);
        // allocate_sorted drops the queue the route does not have.
        let kept = allocate_sorted(&s, "g", "cid-01", &mqs, &cids(2));
        assert_eq!(
            kept.into_iter().collect::<Vec<_>>(),
            vec![MessageQueue::new("T", "b", 2)]
        );
    }

    #[test]
    fn by_machine_room_only_takes_listed_rooms() {
        let mut mqs = queues("T", "r1@broker-a", 3);
        mqs.extend(queues("T", "r2@broker-b", 2));
        mqs.extend(queues("T", "plain-broker", 2));
        mqs.extend(queues("T", "r1@x@y", 2));
        mqs.sort();
        let s = ByMachineRoom::new(["r1".to_owned()]);
        let all = shares(&s, &mqs, &cids(2));
        // Eligible: the 3 queues of r1@broker-a; 3 / 2 = 1 each, the first also takes the tail.
        assert_eq!(all[0].len() + all[1].len(), 3);
        assert!(all.iter().flatten().all(|q| q.broker_name == "r1@broker-a"));
        assert_eq!(ids(&all[0]), vec![0, 2]);
        assert_eq!(ids(&all[1]), vec![1]);
        assert_eq!(room_of_broker_name("r1@"), None);
        assert_eq!(room_of_broker_name("@b"), Some(""));
    }

    #[test]
    fn machine_room_nearby_prefers_the_own_room() {
        let mut mqs = queues("T", "east@broker-a", 4);
        mqs.extend(queues("T", "west@broker-b", 4));
        mqs.extend(queues("T", "north@broker-c", 2));
        mqs.sort();
        let cids: Vec<String> = vec!["10.0.0.1@east".into(), "10.0.0.2@west".into()];
        let s = MachineRoomNearby::new(Box::new(Averagely), SeparatorRoomResolver::default());
        assert_eq!(s.name(), "MACHINE_ROOM_NEARBY-AVG");
        let east = s.allocate("g", "10.0.0.1@east", &mqs, &cids);
        let west = s.allocate("g", "10.0.0.2@west", &mqs, &cids);
        let rooms = |v: &[MessageQueue]| {
            v.iter()
                .map(|q| q.broker_name.split('@').next().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        // Own room's 4 queues, plus half of the consumer-less north room.
        assert_eq!(rooms(&east), vec!["east", "east", "east", "east", "north"]);
        assert_eq!(rooms(&west), vec!["west", "west", "west", "west", "north"]);
        assert_partition(&mqs, &[east, west]);
    }

    #[test]
    fn allocate_sorted_is_independent_of_input_order_and_duplicates() {
        let mut mqs = queues("T", "b", 5);
        mqs.extend(queues("S", "a", 3));
        let mut shuffled = mqs.clone();
        shuffled.reverse();
        shuffled.push(mqs[0].clone());
        let ids = cids(3);
        let mut shuffled_ids = ids.clone();
        shuffled_ids.reverse();
        shuffled_ids.push(ids[1].clone());
        for kind in [
            AllocateStrategyKind::Averagely,
            AllocateStrategyKind::AveragelyByCircle,
            AllocateStrategyKind::ConsistentHash { virtual_nodes: 10 },
        ] {
            let s = strategy_for(&kind);
            for cid in &ids {
                assert_eq!(
                    allocate_sorted(s.as_ref(), "g", cid, &mqs, &ids),
                    allocate_sorted(s.as_ref(), "g", cid, &shuffled, &shuffled_ids),
                );
            }
        }
    }

    #[test]
    fn strategy_names_follow_java() {
        let names: Vec<String> = [
            AllocateStrategyKind::Averagely,
            AllocateStrategyKind::AveragelyByCircle,
            AllocateStrategyKind::ConsistentHash { virtual_nodes: 3 },
            AllocateStrategyKind::ByConfig { queues: vec![] },
            AllocateStrategyKind::ByMachineRoom {
                rooms: BTreeSet::new(),
            },
            AllocateStrategyKind::MachineRoomNearby {
                inner: Box::new(AllocateStrategyKind::AveragelyByCircle),
                separator: "@".into(),
            },
        ]
        .iter()
        .map(|k| strategy_for(k).name().to_owned())
        .collect();
        assert_eq!(
            names,
            [
                "AVG",
                "AVG_BY_CIRCLE",
                "CONSISTENT_HASH",
                "CONFIG",
                "MACHINE_ROOM",
                "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE"
            ]
        );
    }

    fn queue_set() -> impl Strategy<Value = Vec<MessageQueue>> {
        proptest::collection::btree_set(
            (
                prop::sample::select(vec!["TopicA", "TopicB", "%RETRY%g"]),
                prop::sample::select(vec!["broker-a", "broker-b", "r1@broker-c", "r2@broker-d"]),
                0i32..16,
            ),
            1..40,
        )
        .prop_map(|set| {
            set.into_iter()
                .map(|(t, b, q)| MessageQueue::new(t, b, q))
                .collect()
        })
    }

    fn consumer_set() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::btree_set("[0-9]{1,3}\\.[0-9]\\@[a-z]{1,4}", 1..12)
            .prop_map(|s| s.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn averagely_partitions_evenly(mqs in queue_set(), cids in consumer_set()) {
            let all = shares(&Averagely, &mqs, &cids);
            assert_partition(&mqs, &all);
            let sizes: Vec<usize> = all.iter().map(Vec::len).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(hi - lo <= 1, "{:?}", sizes);
            // Contiguous ranges in consumer order.
            let concatenated: Vec<MessageQueue> = all.concat();
            prop_assert_eq!(concatenated, mqs);
        }

        #[test]
        fn circle_partitions_evenly(mqs in queue_set(), cids in consumer_set()) {
            let all = shares(&AveragelyByCircle, &mqs, &cids);
            assert_partition(&mqs, &all);
            let sizes: Vec<usize> = all.iter().map(Vec::len).collect();
            prop_assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
        }

        #[test]
        fn consistent_hash_partitions(mqs in queue_set(), cids in consumer_set(), nodes in 1usize..16) {
            assert_partition(&mqs, &shares(&ConsistentHash::new(nodes), &mqs, &cids));
        }

        #[test]
        fn machine_room_nearby_partitions(
            mqs in queue_set(),
            cids in proptest::collection::btree_set("[0-9]{1,3}@(r1|r2|r9)", 1..12),
        ) {
            let cids: Vec<String> = cids.into_iter().collect();
            let s = MachineRoomNearby::new(Box::new(AveragelyByCircle), SeparatorRoomResolver::default());
            assert_partition(&mqs, &shares(&s, &mqs, &cids));
        }

        #[test]
        fn by_machine_room_partitions_the_listed_rooms(mqs in queue_set(), cids in consumer_set()) {
            let s = ByMachineRoom::new(["r1".to_owned(), "r2".to_owned()]);
            let eligible: Vec<MessageQueue> =
                mqs.iter().filter(|q| q.broker_name.contains('@')).cloned().collect();
            assert_partition(&eligible, &shares(&s, &mqs, &cids));
        }
    }
}
