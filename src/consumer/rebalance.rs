//! The rebalance decision as pure functions: which queues of a topic this member owns, and
//! what a pass changes (queues to drop, to start, to restart after their drop).
//!
//! The rebalancer actor (`actors/rebalancer.rs`) and the simulator (`crate::sim`) both
//! use it.
//!
//! ```ignore
//! let diff = plan_changes(&owned, &target, &seen, &stalled);
//! for mq in diff.drop { /* stop the queue, persist its offset */ }
//! for mq in diff.start { /* start a queue */ }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::consumer::allocate::{allocate_sorted, AllocateStrategy};
use crate::message::MessageQueue;

/// Why a topic's share could not be computed in this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShareError {
    /// The broker does not list this client among the group's members yet (its heartbeat has
    /// not arrived): taking queues now would double-assign them.
    NotAMember,
}

/// The queues of `queues` this client owns, given the group's `members` as a broker reports
/// them. Broadcasting members own every queue.
pub(crate) fn topic_share(
    strategy: &dyn AllocateStrategy,
    group: &str,
    client_id: &str,
    queues: &[MessageQueue],
    members: &[String],
    clustering: bool,
) -> Result<Vec<MessageQueue>, ShareError> {
    if !clustering {
        return Ok(queues.to_vec());
    }
    if !members.iter().any(|id| id == client_id) {
        return Err(ShareError::NotAMember);
    }
    Ok(allocate_sorted(strategy, group, client_id, queues, members)
        .into_iter()
        .collect())
}

/// How long the queues of a broker that left a topic's route still count among the topic's
/// queues. A name server drops a broker the moment its connection closes, so a broker that
/// restarts (a crash, a deploy) is missing from the route for the seconds it takes to come
/// back. Dropping its queues then forgets their in-memory offsets, and taking them back reads
/// the offsets the restarted broker has, which lack the commits it had not flushed: what was
/// consumed since would be consumed again. Kept, the queues retry their pulls and their next
/// pull commits the offset the member has. (Java notices a route change only at its 30 s poll,
/// so it rides out a quick restart by chance.) A broker gone for longer is gone: its queues
/// leave and the others are divided again.
///
/// The cost: a member that starts while a broker is away divides without that broker's
/// queues while the others still count them, so for at most this long a few queues of the
/// other brokers may have no owner (or two). Hence 30 s, the window Java's poll leaves open
/// too, rather than longer.
pub(crate) const ABSENT_BROKER_GRACE: Duration = Duration::from_secs(30);

/// A topic's queues as the last rebalance pass divided them: the route's, plus those of
/// brokers that left the route less than [`ABSENT_BROKER_GRACE`] ago.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RouteMemory {
    /// The queues divided, sorted.
    pub queues: Vec<MessageQueue>,
    /// Since when (the member's clock, ms) each broker of `queues` has been missing from the
    /// route.
    absent_since: BTreeMap<String, i64>,
}

impl RouteMemory {
    /// The memory after a pass read `route_queues` at `now_ms`: the route's queues, and the
    /// queues of the last pass whose broker is missing from the route, for `grace` after the
    /// first pass that missed it.
    pub(crate) fn next(&self, route_queues: &[MessageQueue], now_ms: i64, grace: Duration) -> Self {
        let present: BTreeSet<&str> = route_queues
            .iter()
            .map(|mq| mq.broker_name.as_str())
            .collect();
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let mut absent_since = BTreeMap::new();
        let mut queues: BTreeSet<MessageQueue> = route_queues.iter().cloned().collect();
        for mq in &self.queues {
            if present.contains(mq.broker_name.as_str()) {
                continue;
            }
            let since = *absent_since
                .entry(mq.broker_name.clone())
                .or_insert_with(|| {
                    self.absent_since
                        .get(&mq.broker_name)
                        .copied()
                        .unwrap_or(now_ms)
                });
            if now_ms.saturating_sub(since) < grace_ms {
                queues.insert(mq.clone());
            }
        }
        absent_since.retain(|broker, _| queues.iter().any(|mq| &mq.broker_name == broker));
        RouteMemory {
            queues: queues.into_iter().collect(),
            absent_since,
        }
    }

    /// The brokers missing from the route whose queues are still kept.
    pub(crate) fn absent_brokers(&self) -> impl Iterator<Item = &str> {
        self.absent_since.keys().map(String::as_str)
    }
}

/// What one pass changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Owned queues to stop: no longer assigned, or stalled.
    pub drop: Vec<MessageQueue>,
    /// Assigned queues to start now.
    pub start: Vec<MessageQueue>,
    /// Stalled queues still assigned: start them again once their drop has finished (so the
    /// new loop resumes from the offset the old one persisted).
    pub restart_after_drop: BTreeSet<MessageQueue>,
}

/// The changes from `owned` to `target`. Queues of topics not in `seen` (their route or members
/// could not be read this pass) are left as they are.
pub(crate) fn plan_changes<'a>(
    owned: impl IntoIterator<Item = &'a MessageQueue>,
    target: &BTreeSet<MessageQueue>,
    seen: &BTreeSet<String>,
    stalled: &[MessageQueue],
) -> Changes {
    let owned: BTreeSet<&MessageQueue> = owned.into_iter().collect();
    let mut changes = Changes::default();
    for mq in stalled {
        if owned.contains(mq) {
            changes.drop.push(mq.clone());
            if target.contains(mq) {
                changes.restart_after_drop.insert(mq.clone());
            }
        }
    }
    for mq in &owned {
        if seen.contains(&mq.topic) && !target.contains(*mq) && !stalled.contains(mq) {
            changes.drop.push((*mq).clone());
        }
    }
    for mq in target {
        if !owned.contains(mq) {
            changes.start.push(mq.clone());
        }
    }
    changes
}

/// The queues among `gained` that another member still in the group (`current`) owned at the
/// previous pass: by the same strategy over the membership seen then (`previous`; on a
/// member's first pass, the current one without this client, as when it joins a running
/// group). That member lets go of them on the same membership notice and commits as it does,
/// so their first offset read waits a moment (`handoff_wait`) instead of re-reading what it is
/// still consuming. Queues of members that left (they committed at shutdown, or crashed) and
/// queues nobody owned do not wait.
pub(crate) fn handed_over_by_live_members(
    strategy: &dyn AllocateStrategy,
    group: &str,
    client_id: &str,
    queues: &[MessageQueue],
    previous: Option<&[String]>,
    current: &[String],
    gained: &[MessageQueue],
) -> BTreeSet<MessageQueue> {
    let without_me: Vec<String>;
    let previous = match previous {
        Some(previous) => previous,
        None => {
            without_me = current
                .iter()
                .filter(|m| *m != client_id)
                .cloned()
                .collect();
            &without_me
        }
    };
    let mut handed_over = BTreeSet::new();
    for member in previous {
        if member == client_id || !current.contains(member) {
            continue;
        }
        for mq in allocate_sorted(strategy, group, member, queues, previous) {
            if gained.contains(&mq) {
                handed_over.insert(mq);
            }
        }
    }
    handed_over
}

/// How long after this client (re)connects to a broker the departures that broker reports are
/// not believed. A restarted broker knows only the members that have heartbeated it since, and
/// they come back one by one over a second or two; acting on its partial list would move
/// queues between members that never left (and each move re-reads what was consumed since
/// the last commit).
pub(crate) const MEMBERSHIP_SETTLE: Duration = Duration::from_secs(3);

/// Whether a member list must wait before it is acted on: it lacks members of the previous
/// view, and the broker that answered has been connected for less than `settle` (or is not
/// connected now). Members that crash leave a broker this client has been connected to for a
/// while, so their queues move at once.
pub(crate) fn departures_unconfirmed(
    previous: Option<&[String]>,
    current: &[String],
    connected_for: Option<Duration>,
    settle: Duration,
) -> bool {
    let Some(previous) = previous else {
        return false;
    };
    let someone_left = previous.iter().any(|member| !current.contains(member));
    someone_left && connected_for.is_none_or(|connected| connected < settle)
}

/// This member's queues while a list's departures are unconfirmed: those it owns under both
/// the membership it saw before and the one listed now. Letting go of what the new list gives to
/// others is always safe (another member may already act on it); taking over the departed
/// members' queues waits until the list is believed.
pub(crate) fn unconfirmed_share(
    strategy: &dyn AllocateStrategy,
    group: &str,
    client_id: &str,
    queues: &[MessageQueue],
    previous: &[String],
    current: &[String],
) -> Result<Vec<MessageQueue>, ShareError> {
    let now = topic_share(strategy, group, client_id, queues, current, true)?;
    let before =
        topic_share(strategy, group, client_id, queues, previous, true).unwrap_or_default();
    Ok(now.into_iter().filter(|mq| before.contains(mq)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(brokers: &[(&str, i32)]) -> Vec<MessageQueue> {
        brokers
            .iter()
            .flat_map(|(broker, n)| {
                (0..*n).map(move |queue_id| MessageQueue {
                    topic: "T".into(),
                    broker_name: (*broker).into(),
                    queue_id,
                })
            })
            .collect()
    }

    #[test]
    fn a_broker_restarting_keeps_its_queues_through_the_grace() {
        let grace = Duration::from_secs(60);
        let both = route(&[("a", 2), ("b", 2)]);
        let only_b = route(&[("b", 2)]);
        let first = RouteMemory::default().next(&both, 1_000, grace);
        assert_eq!(first.queues, both);
        assert_eq!(first.absent_brokers().count(), 0);
        // broker a leaves the route: its queues stay for the grace, counted from the first miss
        let missing = first.next(&only_b, 2_000, grace);
        assert_eq!(missing.queues, both);
        assert_eq!(missing.absent_brokers().collect::<Vec<_>>(), ["a"]);
        let still = missing.next(&only_b, 61_999, grace);
        assert_eq!(still.queues, both);
        let gone = still.next(&only_b, 62_000, grace);
        assert_eq!(gone.queues, only_b);
        assert_eq!(gone.absent_brokers().count(), 0);
        // once gone, a later miss does not bring them back
        assert_eq!(gone.next(&only_b, 63_000, grace).queues, only_b);
    }

    #[test]
    fn a_broker_back_in_the_route_starts_a_new_grace_next_time() {
        let grace = Duration::from_secs(60);
        let both = route(&[("a", 2), ("b", 2)]);
        let only_b = route(&[("b", 2)]);
        let back = RouteMemory::default()
            .next(&both, 0, grace)
            .next(&only_b, 10_000, grace)
            .next(&both, 50_000, grace);
        assert_eq!(back.absent_brokers().count(), 0);
        // missing again at 100 s: a new grace from 100 s, not from 10 s
        let again = back.next(&only_b, 100_000, grace);
        assert_eq!(again.next(&only_b, 159_999, grace).queues, both);
        assert_eq!(again.next(&only_b, 160_000, grace).queues, only_b);
    }

    #[test]
    fn the_route_decides_the_queues_of_brokers_in_it() {
        let grace = Duration::from_secs(60);
        let memory = RouteMemory::default().next(&route(&[("a", 4), ("b", 2)]), 0, grace);
        // a shrank to 2 queues and c joined: a's missing queues are not kept (a is present)
        let now = memory.next(&route(&[("a", 2), ("b", 2), ("c", 1)]), 1_000, grace);
        assert_eq!(now.queues, route(&[("a", 2), ("b", 2), ("c", 1)]));
        assert_eq!(now.absent_brokers().count(), 0);
    }

    #[test]
    fn unconfirmed_departures_let_queues_go_but_take_none_over() {
        use crate::consumer::allocate::Averagely;
        let queues: Vec<MessageQueue> = (0..6).map(|i| MessageQueue::new("T", "b", i)).collect();
        let ids = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let before = ids(&["c1", "c2", "c3"]);
        let share = |members: &[String]| {
            topic_share(&Averagely, "G", "c2", &queues, members, true).unwrap()
        };
        // c1 seems gone: c2 would take queues over, and give some to c3; it only keeps its own.
        let held = unconfirmed_share(&Averagely, "G", "c2", &queues, &before, &ids(&["c2", "c3"]))
            .unwrap();
        let now = share(&ids(&["c2", "c3"]));
        assert!(held
            .iter()
            .all(|mq| share(&before).contains(mq) && now.contains(mq)));
        assert!(held.len() < now.len(), "{held:?} vs {now:?}");
        // Not listed at all: not a member yet.
        assert_eq!(
            unconfirmed_share(&Averagely, "G", "c9", &queues, &before, &before),
            Err(ShareError::NotAMember)
        );
    }

    #[test]
    fn departures_reported_by_a_freshly_connected_broker_wait_and_others_do_not() {
        let members = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let before = members(&["a", "b", "c"]);
        let settle = Duration::from_secs(3);
        let fresh = Some(Duration::from_millis(200));
        let old = Some(Duration::from_secs(60));
        // A restarted broker that has heard from one member so far.
        assert!(departures_unconfirmed(
            Some(&before),
            &members(&["a"]),
            fresh,
            settle
        ));
        assert!(departures_unconfirmed(
            Some(&before),
            &members(&["a"]),
            None,
            settle
        ));
        // A member that crashed, reported by a broker connected for long.
        assert!(!departures_unconfirmed(
            Some(&before),
            &members(&["a", "b"]),
            old,
            settle
        ));
        // Joins are never held back, nor a first view.
        assert!(!departures_unconfirmed(
            Some(&before),
            &members(&["a", "b", "c", "d"]),
            fresh,
            settle
        ));
        assert!(!departures_unconfirmed(
            None,
            &members(&["a"]),
            fresh,
            settle
        ));
    }
    use crate::consumer::allocate::Averagely;

    fn mq(topic: &str, id: i32) -> MessageQueue {
        MessageQueue::new(topic, "b", id)
    }

    #[test]
    fn a_member_the_broker_does_not_list_takes_nothing() {
        let queues = vec![mq("T", 0), mq("T", 1)];
        let share = topic_share(&Averagely, "G", "c1", &queues, &["c2".into()], true);
        assert_eq!(share, Err(ShareError::NotAMember));
        let all = topic_share(&Averagely, "G", "c1", &queues, &[], false);
        assert_eq!(all, Ok(queues));
    }

    #[test]
    fn two_members_split_the_queues() {
        let queues: Vec<_> = (0..4).map(|i| mq("T", i)).collect();
        let members = vec!["c1".to_string(), "c2".to_string()];
        let a = topic_share(&Averagely, "G", "c1", &queues, &members, true).unwrap();
        let b = topic_share(&Averagely, "G", "c2", &queues, &members, true).unwrap();
        assert_eq!(a.len() + b.len(), 4);
        assert!(a.iter().all(|q| !b.contains(q)));
    }

    #[test]
    fn queues_taken_from_a_live_member_wait_and_others_do_not() {
        let queues: Vec<_> = (0..4).map(|i| mq("T", i)).collect();
        let members = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // c2 joins a group of c1: on its first pass every queue it gains was c1's.
        let now = members(&["c1", "c2"]);
        let gained = topic_share(&Averagely, "G", "c2", &queues, &now, true).unwrap();
        let waits =
            handed_over_by_live_members(&Averagely, "G", "c2", &queues, None, &now, &gained);
        assert_eq!(waits, gained.iter().cloned().collect());
        // c3 left: what c1 gains from it does not wait (c3 committed as it left).
        let before = members(&["c1", "c3"]);
        let after = members(&["c1"]);
        let gained = vec![mq("T", 2), mq("T", 3)];
        let waits = handed_over_by_live_members(
            &Averagely,
            "G",
            "c1",
            &queues,
            Some(&before),
            &after,
            &gained,
        );
        assert!(waits.is_empty(), "{waits:?}");
        // The first member of a group waits for nobody.
        let alone = members(&["c1"]);
        let waits =
            handed_over_by_live_members(&Averagely, "G", "c1", &queues, None, &alone, &queues);
        assert!(waits.is_empty());
    }

    #[test]
    fn unseen_topics_keep_their_queues_and_stalled_ones_restart() {
        let owned = [mq("A", 0), mq("A", 1), mq("B", 0)];
        let target: BTreeSet<_> = [mq("A", 1), mq("A", 2)].into();
        let seen: BTreeSet<String> = ["A".to_string()].into();
        let changes = plan_changes(&owned, &target, &seen, &[mq("A", 1)]);
        assert_eq!(changes.drop, vec![mq("A", 1), mq("A", 0)]);
        assert_eq!(changes.start, vec![mq("A", 2)]);
        assert_eq!(changes.restart_after_drop, [mq("A", 1)].into());
    }
}
