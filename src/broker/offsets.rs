//! Committed consumer offsets per (group, topic, queue).

use std::collections::BTreeMap;

/// The broker's consumer offset table (`ConsumerOffsetManager`).
///
/// The stored value is "next offset to consume", exactly what clients commit.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OffsetTable {
    /// `group@topic` → queue id → offset, the key shape the real broker persists.
    table: BTreeMap<String, BTreeMap<i32, i64>>,
}

fn key(group: &str, topic: &str) -> String {
    format!("{topic}@{group}")
}

impl OffsetTable {
    /// Stores a committed offset.
    pub fn commit(&mut self, group: &str, topic: &str, queue_id: i32, offset: i64) {
        self.table
            .entry(key(group, topic))
            .or_default()
            .insert(queue_id, offset);
    }

    /// The committed offset, if any.
    pub fn query(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        self.table.get(&key(group, topic))?.get(&queue_id).copied()
    }

    /// Every committed queue offset of a group on a topic.
    pub fn queues(&self, group: &str, topic: &str) -> BTreeMap<i32, i64> {
        self.table
            .get(&key(group, topic))
            .cloned()
            .unwrap_or_default()
    }

    /// Topics a group has committed offsets for.
    pub fn topics_of_group(&self, group: &str) -> Vec<String> {
        let suffix = format!("@{group}");
        self.table
            .keys()
            .filter_map(|k| k.strip_suffix(&suffix).map(str::to_owned))
            .collect()
    }

    /// The groups with stored offsets.
    pub fn groups(&self) -> std::collections::BTreeSet<String> {
        self.table
            .keys()
            .filter_map(|k| k.split_once('@').map(|(_, group)| group.to_owned()))
            .collect()
    }

    /// Forgets a group's offsets on every topic.
    pub fn remove_group(&mut self, group: &str) {
        self.table
            .retain(|k, _| k.split_once('@').is_none_or(|(_, g)| g != group));
    }

    /// Forgets every group's offsets on a topic.
    pub fn remove_topic(&mut self, topic: &str) {
        self.table
            .retain(|k, _| k.split_once('@').is_none_or(|(t, _)| t != topic));
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_are_per_group_topic_and_queue() {
        let mut t = OffsetTable::default();
        assert_eq!(t.query("g", "T", 0), None);
        t.commit("g", "T", 0, 5);
        t.commit("g", "T", 1, 7);
        t.commit("h", "T", 0, 9);
        t.commit("g", "T", 0, 6);
        assert_eq!(t.query("g", "T", 0), Some(6));
        assert_eq!(t.query("h", "T", 0), Some(9));
        assert_eq!(t.query("g", "U", 0), None);
        assert_eq!(t.queues("g", "T").len(), 2);
        assert_eq!(t.topics_of_group("g"), vec!["T".to_owned()]);
        assert_eq!(t.groups(), ["g".to_owned(), "h".to_owned()].into());
    }

    #[test]
    fn groups_and_topics_are_forgotten_whole() {
        let mut t = OffsetTable::default();
        t.commit("g", "T", 0, 5);
        t.commit("g", "U", 0, 6);
        t.commit("h", "T", 0, 7);
        t.remove_group("g");
        assert_eq!((t.query("g", "T", 0), t.query("g", "U", 0)), (None, None));
        assert_eq!(t.query("h", "T", 0), Some(7));
        t.commit("g", "U", 0, 8);
        t.remove_topic("T");
        assert_eq!(t.query("h", "T", 0), None);
        assert_eq!(t.query("g", "U", 0), Some(8));
    }
}
