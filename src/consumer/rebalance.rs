//! The rebalance decision as pure functions: which queues of a topic this member owns, and
//! what a pass changes (queues to drop, to start, to restart after their drop).
//!
//! The rebalancer actor (`actors/rebalancer.rs`) and the simulator (`crate::sim`) both use it.
//!
//! ```ignore
//! let diff = plan_changes(&owned, &target, &seen, &stalled);
//! for mq in diff.drop { /* stop the queue, persist its offset */ }
//! for mq in diff.start { /* start a queue */ }
//! ```

use std::collections::BTreeSet;

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

#[cfg(test)]
mod tests {
    use super::*;
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
