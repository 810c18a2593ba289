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

use std::collections::BTreeSet;
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
