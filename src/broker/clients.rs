//! Consumer and producer membership per connection (`ConsumerManager`, `ProducerManager`).
//!
//! A client is registered per *connection*: the channel its HEART_BEAT arrived on is where the
//! broker later sends NOTIFY_CONSUMER_IDS_CHANGED and admin calls, and closing it unregisters the
//! client from every group.

use super::ConnId;
use crate::filter::{SqlError, SqlFilter};
use crate::protocol::body::{ConsumeFromWhere, ConsumeType, MessageModel};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A consumer's subscription to one topic, as sent in HEART_BEAT or built from a pull header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    /// Topic.
    pub topic: String,
    /// Expression text (`*`, `TagA || TagB`, or SQL).
    pub sub_string: String,
    /// `TAG` or `SQL92`.
    pub expression_type: String,
    /// Tag hash codes (empty = everything).
    pub code_set: BTreeSet<i32>,
    /// Version timestamp; the broker keeps the newest.
    pub sub_version: i64,
    /// Legacy class-filter mode (matches everything server-side).
    pub class_filter_mode: bool,
    /// A SQL92 expression compiled (once per text, by the broker's cache), or why it does
    /// not compile; `None` for a tag subscription.
    pub sql: Option<Result<Arc<SqlFilter>, SqlError>>,
}

impl Subscription {
    /// Whether the expression type is tag filtering (null/empty mean TAG too).
    pub fn is_tag_type(&self) -> bool {
        self.expression_type.is_empty() || self.expression_type.eq_ignore_ascii_case("TAG")
    }

    /// Server-side tag filter on a consume-queue tags code (`ExpressionMessageFilter`).
    pub fn matches_tags_code(&self, tags_code: i64) -> bool {
        if self.class_filter_mode || !self.is_tag_type() {
            return true;
        }
        if self.sub_string.is_empty() || self.sub_string == "*" {
            return true;
        }
        i32::try_from(tags_code).is_ok_and(|code| self.code_set.contains(&code))
    }
}

/// One connected client in one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientChannel {
    /// The connection.
    pub conn: ConnId,
    /// `clientID` from the heartbeat.
    pub client_id: String,
    /// Language name from the request header.
    pub language: String,
    /// Client version ordinal from the request header.
    pub version: i32,
    /// Last heartbeat time.
    pub last_update_ms: i64,
}

/// What a consumer group declared in its heartbeat.
#[derive(Clone, Debug, Default)]
pub struct ConsumerGroupInfo {
    /// Members by connection.
    pub channels: BTreeMap<ConnId, ClientChannel>,
    /// Subscriptions by topic.
    pub subscriptions: BTreeMap<String, Subscription>,
    /// Push, pull or pop.
    pub consume_type: ConsumeType,
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Informational start policy.
    pub consume_from_where: ConsumeFromWhere,
}

impl ConsumerGroupInfo {
    /// Whether the group consumes in broadcasting mode (no id-change notifications then).
    pub fn is_broadcast(&self) -> bool {
        self.message_model == MessageModel::Broadcasting
    }

    /// Sorted, de-duplicated client ids.
    pub fn client_ids(&self) -> Vec<String> {
        let ids: BTreeSet<&str> = self
            .channels
            .values()
            .map(|c| c.client_id.as_str())
            .collect();
        ids.into_iter().map(str::to_owned).collect()
    }

    /// Every member connection.
    pub fn conns(&self) -> Vec<ConnId> {
        self.channels.keys().copied().collect()
    }
}

/// A consumer registration from one heartbeat.
#[derive(Clone, Debug)]
pub struct ConsumerRegistration {
    /// Group name.
    pub group: String,
    /// `consumeType`.
    pub consume_type: ConsumeType,
    /// `messageModel`.
    pub message_model: MessageModel,
    /// `consumeFromWhere`.
    pub consume_from_where: ConsumeFromWhere,
    /// Subscriptions.
    pub subscriptions: Vec<Subscription>,
}

/// A group whose members changed and the connections to notify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupChange {
    /// Group name.
    pub group: String,
    /// Connections that must receive NOTIFY_CONSUMER_IDS_CHANGED.
    pub notify: Vec<ConnId>,
}

/// Consumer and producer registrations.
#[derive(Clone, Debug, Default)]
pub struct ClientTable {
    consumers: BTreeMap<String, ConsumerGroupInfo>,
    producers: BTreeMap<String, BTreeMap<ConnId, ClientChannel>>,
}

impl ClientTable {
    /// Registers or refreshes a consumer; returns the change to announce when the member set or
    /// the subscription set changed (Java notifies every member of a clustering group, the new
    /// one included).
    pub fn register_consumer(
        &mut self,
        channel: ClientChannel,
        reg: ConsumerRegistration,
    ) -> Option<GroupChange> {
        let info = self.consumers.entry(reg.group.clone()).or_default();
        info.consume_type = reg.consume_type;
        info.message_model = reg.message_model;
        info.consume_from_where = reg.consume_from_where;
        let now = channel.last_update_ms;
        let new_member = match info.channels.get_mut(&channel.conn) {
            Some(existing) => {
                existing.client_id = channel.client_id;
                existing.language = channel.language;
                existing.version = channel.version;
                existing.last_update_ms = now;
                false
            }
            None => {
                info.channels.insert(channel.conn, channel);
                true
            }
        };
        let mut subs_changed = false;
        let mut seen = BTreeSet::new();
        for sub in reg.subscriptions {
            seen.insert(sub.topic.clone());
            match info.subscriptions.get(&sub.topic) {
                None => {
                    info.subscriptions.insert(sub.topic.clone(), sub);
                    subs_changed = true;
                }
                Some(old) if sub.sub_version > old.sub_version => {
                    info.subscriptions.insert(sub.topic.clone(), sub);
                }
                Some(_) => {}
            }
        }
        let before = info.subscriptions.len();
        info.subscriptions.retain(|topic, _| seen.contains(topic));
        subs_changed |= info.subscriptions.len() != before;
        if (new_member || subs_changed) && !info.is_broadcast() {
            Some(GroupChange {
                group: reg.group,
                notify: info.conns(),
            })
        } else {
            None
        }
    }

    /// Registers or refreshes a producer group member.
    pub fn register_producer(&mut self, group: &str, channel: ClientChannel) {
        self.producers
            .entry(group.to_owned())
            .or_default()
            .insert(channel.conn, channel);
    }

    /// Removes the connection from a consumer group (UNREGISTER_CLIENT); returns the remaining
    /// members to notify.
    pub fn unregister_consumer(&mut self, group: &str, conn: ConnId) -> Option<GroupChange> {
        let info = self.consumers.get_mut(group)?;
        info.channels.remove(&conn)?;
        let broadcast = info.is_broadcast();
        let notify = info.conns();
        if notify.is_empty() {
            self.consumers.remove(group);
            return None;
        }
        (!broadcast).then(|| GroupChange {
            group: group.to_owned(),
            notify,
        })
    }

    /// Removes the connection from a producer group.
    pub fn unregister_producer(&mut self, group: &str, conn: ConnId) {
        if let Some(members) = self.producers.get_mut(group) {
            members.remove(&conn);
            if members.is_empty() {
                self.producers.remove(group);
            }
        }
    }

    /// A connection closed: drops it everywhere; returns the groups whose remaining members
    /// must be notified.
    pub fn remove_connection(&mut self, conn: ConnId) -> Vec<GroupChange> {
        let groups: Vec<String> = self
            .consumers
            .iter()
            .filter(|(_, info)| info.channels.contains_key(&conn))
            .map(|(g, _)| g.clone())
            .collect();
        let changes = groups
            .iter()
            .filter_map(|g| self.unregister_consumer(g, conn))
            .collect();
        let producer_groups: Vec<String> = self.producers.keys().cloned().collect();
        for g in producer_groups {
            self.unregister_producer(&g, conn);
        }
        changes
    }

    /// Connections whose last heartbeat is older than `expiry_ms`.
    pub fn expired_connections(&self, now_ms: i64, expiry_ms: i64) -> BTreeSet<ConnId> {
        let consumers = self.consumers.values().flat_map(|i| i.channels.values());
        let producers = self.producers.values().flat_map(|m| m.values());
        consumers
            .chain(producers)
            .filter(|c| now_ms - c.last_update_ms > expiry_ms)
            .map(|c| c.conn)
            .collect()
    }

    /// A consumer group's registration.
    pub fn consumer_group(&self, group: &str) -> Option<&ConsumerGroupInfo> {
        self.consumers.get(group)
    }

    /// Names of all consumer groups with members.
    pub fn consumer_groups(&self) -> impl Iterator<Item = &str> {
        self.consumers.keys().map(String::as_str)
    }

    /// The connection a client of a group is registered on.
    pub fn conn_of(&self, group: &str, client_id: &str) -> Option<&ClientChannel> {
        self.consumers
            .get(group)?
            .channels
            .values()
            .find(|c| c.client_id == client_id)
    }

    /// Drops every registration (broker restart).
    pub fn clear(&mut self) {
        self.consumers.clear();
        self.producers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel(conn: ConnId, id: &str, now: i64) -> ClientChannel {
        ClientChannel {
            conn,
            client_id: id.into(),
            language: "JAVA".into(),
            version: 479,
            last_update_ms: now,
        }
    }

    fn sub(topic: &str, version: i64) -> Subscription {
        Subscription {
            topic: topic.into(),
            sub_string: "*".into(),
            expression_type: "TAG".into(),
            code_set: BTreeSet::new(),
            sub_version: version,
            class_filter_mode: false,
            sql: None,
        }
    }

    fn reg(group: &str, subs: Vec<Subscription>) -> ConsumerRegistration {
        ConsumerRegistration {
            group: group.into(),
            consume_type: ConsumeType::ConsumePassively,
            message_model: MessageModel::Clustering,
            consume_from_where: ConsumeFromWhere::ConsumeFromLastOffset,
            subscriptions: subs,
        }
    }

    #[test]
    fn joining_notifies_every_member_and_repeat_heartbeats_do_not() {
        let mut t = ClientTable::default();
        let c = t.register_consumer(channel(1, "a", 0), reg("g", vec![sub("T", 1)]));
        assert_eq!(c.unwrap().notify, vec![1]);
        assert!(t
            .register_consumer(channel(1, "a", 5), reg("g", vec![sub("T", 1)]))
            .is_none());
        let c = t.register_consumer(channel(2, "b", 5), reg("g", vec![sub("T", 1)]));
        assert_eq!(c.unwrap().notify, vec![1, 2]);
        assert_eq!(t.consumer_group("g").unwrap().client_ids(), vec!["a", "b"]);
        // A newer subVersion replaces the subscription silently; a new topic is a change.
        assert!(t
            .register_consumer(channel(1, "a", 6), reg("g", vec![sub("T", 2)]))
            .is_none());
        assert_eq!(
            t.consumer_group("g").unwrap().subscriptions["T"].sub_version,
            2
        );
        assert!(t
            .register_consumer(channel(1, "a", 6), reg("g", vec![sub("T", 2), sub("U", 1)]))
            .is_some());
    }

    #[test]
    fn leaving_or_disconnecting_notifies_the_rest() {
        let mut t = ClientTable::default();
        t.register_consumer(channel(1, "a", 0), reg("g", vec![sub("T", 1)]));
        t.register_consumer(channel(2, "b", 0), reg("g", vec![sub("T", 1)]));
        t.register_consumer(channel(2, "b", 0), reg("h", vec![sub("T", 1)]));
        let c = t.unregister_consumer("g", 1).unwrap();
        assert_eq!(c.notify, vec![2]);
        let changes = t.remove_connection(2);
        // Both groups are now empty: nobody is left to notify and the groups are gone.
        assert!(changes.is_empty());
        assert!(t.consumer_group("g").is_none());
        assert!(t.consumer_group("h").is_none());
    }

    #[test]
    fn idle_channels_are_reported_after_the_expiry() {
        let mut t = ClientTable::default();
        t.register_consumer(channel(1, "a", 0), reg("g", vec![]));
        t.register_producer("p", channel(2, "b", 50));
        assert!(t.expired_connections(120_000, 120_000).is_empty());
        assert_eq!(t.expired_connections(120_001, 120_000), BTreeSet::from([1]));
        assert_eq!(
            t.expired_connections(120_051, 120_000),
            BTreeSet::from([1, 2])
        );
    }

    #[test]
    fn tag_filter_matches_codes_or_star() {
        let mut s = sub("T", 1);
        assert!(s.matches_tags_code(0));
        s.sub_string = "TagA".into();
        s.code_set.insert(2_598_919);
        assert!(s.matches_tags_code(2_598_919));
        assert!(!s.matches_tags_code(0));
        assert!(!s.matches_tags_code(2_598_920));
    }
}
