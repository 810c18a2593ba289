//! PULL_MESSAGE with long polling, and the offset queries.

use super::clients::Subscription;
use super::send::FAQ_SUFFIX;
use super::store::{perm, GetStatus};
use super::{
    field, optional_bool, optional_num, required, required_num, Action, BrokerCore, ConnId,
    Failure, Handled,
};
use crate::protocol::codes::response_code;
use crate::protocol::RemotingCommand;
use std::collections::{BTreeMap, BTreeSet};

/// `PullSysFlag` bits.
pub mod pull_flag {
    /// Commit the request's `commitOffset`.
    pub const COMMIT_OFFSET: i32 = 0x1;
    /// Long-poll when nothing is there.
    pub const SUSPEND: i32 = 0x2;
    /// Use the subscription in the request instead of the heartbeat's.
    pub const SUBSCRIPTION: i32 = 0x4;
    /// Legacy class filter.
    pub const CLASS_FILTER: i32 = 0x8;
}

/// A pull parked until a message arrives on its queue or its timeout passes
/// (`PullRequestHoldService`).
#[derive(Clone, Debug)]
struct HeldPull {
    conn: ConnId,
    request: RemotingCommand,
    deadline_ms: i64,
    offset: i64,
    subscription: Subscription,
}

/// Parked pulls by (topic, queue).
#[derive(Clone, Debug, Default)]
pub(crate) struct HeldPulls {
    by_queue: BTreeMap<(String, i32), Vec<HeldPull>>,
}

impl HeldPulls {
    fn hold(&mut self, topic: &str, queue_id: i32, pull: HeldPull) {
        self.by_queue
            .entry((topic.to_owned(), queue_id))
            .or_default()
            .push(pull);
    }

    fn take_queue(&mut self, topic: &str, queue_id: i32) -> Vec<HeldPull> {
        self.by_queue
            .remove(&(topic.to_owned(), queue_id))
            .unwrap_or_default()
    }

    fn put_back(&mut self, topic: &str, queue_id: i32, pulls: Vec<HeldPull>) {
        if !pulls.is_empty() {
            self.by_queue
                .entry((topic.to_owned(), queue_id))
                .or_default()
                .extend(pulls);
        }
    }

    pub(crate) fn remove_conn(&mut self, conn: ConnId) {
        for pulls in self.by_queue.values_mut() {
            pulls.retain(|p| p.conn != conn);
        }
        self.by_queue.retain(|_, v| !v.is_empty());
    }

    pub(crate) fn earliest_deadline(&self) -> Option<i64> {
        self.by_queue
            .values()
            .flat_map(|v| v.iter().map(|p| p.deadline_ms))
            .min()
    }

    fn take_expired(&mut self, now_ms: i64) -> Vec<HeldPull> {
        let mut expired = Vec::new();
        for pulls in self.by_queue.values_mut() {
            let (due, keep): (Vec<_>, Vec<_>) =
                pulls.drain(..).partition(|p| p.deadline_ms <= now_ms);
            *pulls = keep;
            expired.extend(due);
        }
        self.by_queue.retain(|_, v| !v.is_empty());
        expired
    }

    /// Number of parked pulls (for tests and diagnostics).
    pub(crate) fn len(&self) -> usize {
        self.by_queue.values().map(Vec::len).sum()
    }
}

/// Builds a TAG subscription from an expression the way `FilterAPI.buildSubscriptionData` does.
pub(crate) fn subscription_from_expression(
    topic: &str,
    expression: Option<&str>,
    expression_type: Option<&str>,
    sub_version: i64,
) -> Subscription {
    let text = expression.unwrap_or("").trim();
    let mut code_set = BTreeSet::new();
    let sub_string = if text.is_empty() || text == "*" {
        "*".to_owned()
    } else {
        for tag in text.split("||").map(str::trim).filter(|t| !t.is_empty()) {
            code_set.insert(crate::filter::java_hash_code(tag));
        }
        text.to_owned()
    };
    Subscription {
        topic: topic.to_owned(),
        sub_string,
        expression_type: expression_type.unwrap_or("TAG").to_owned(),
        code_set,
        sub_version,
        class_filter_mode: false,
    }
}

impl BrokerCore {
    /// PULL_MESSAGE. `allow_suspend` is false when a held pull is re-run (no second hold, no
    /// second offset commit), as in Java's `executeRequestWhenWakeup`.
    pub(super) fn on_pull(
        &mut self,
        conn: ConnId,
        req: &RemotingCommand,
        now_ms: i64,
        allow_suspend: bool,
    ) -> Handled {
        let group = required(req, &["consumerGroup"])?.to_owned();
        let topic = required(req, &["topic"])?.to_owned();
        let queue_id: i32 = required_num(req, &["queueId"])?;
        let queue_offset: i64 = required_num(req, &["queueOffset"])?;
        let max_msg_nums: i32 = required_num(req, &["maxMsgNums"])?;
        let sys_flag: i32 = required_num(req, &["sysFlag"])?;
        let commit_offset: i64 = required_num(req, &["commitOffset"])?;
        let suspend_timeout: i64 = required_num(req, &["suspendTimeoutMillis"])?;
        let sub_version: i64 = optional_num(req, &["subVersion"])?.unwrap_or(0);
        self.ensure_group(&group);
        let Some(config) = self.store.topic(&topic).cloned() else {
            return Err(Failure::new(
                response_code::TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist, apply first please!{FAQ_SUFFIX}"),
            ));
        };
        if config.perm & perm::READ == 0 {
            return Err(Failure::new(
                response_code::NO_PERMISSION,
                format!("the topic[{topic}] pulling message is forbidden"),
            ));
        }
        if queue_id < 0 || queue_id >= config.read_queue_nums {
            return Err(Failure::new(
                response_code::INVALID_PARAMETER,
                format!(
                    "queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{}] consumer:[{}]",
                    config.read_queue_nums,
                    self.peer(conn)
                ),
            ));
        }
        let subscription = if sys_flag & pull_flag::SUBSCRIPTION != 0 {
            subscription_from_expression(
                &topic,
                field(req, &["subscription"]),
                field(req, &["expressionType"]),
                sub_version,
            )
        } else {
            let Some(info) = self.clients.consumer_group(&group) else {
                return Err(Failure::new(
                    response_code::SUBSCRIPTION_NOT_EXIST,
                    format!("the consumer's group info not exist{FAQ_SUFFIX}"),
                ));
            };
            let Some(sub) = info.subscriptions.get(&topic) else {
                return Err(Failure::new(
                    response_code::SUBSCRIPTION_NOT_EXIST,
                    format!("the consumer's subscription not exist{FAQ_SUFFIX}"),
                ));
            };
            if sub.sub_version < sub_version {
                return Err(Failure::new(
                    response_code::SUBSCRIPTION_NOT_LATEST,
                    "the consumer's subscription not latest",
                ));
            }
            sub.clone()
        };
        if !subscription.is_tag_type() {
            return Err(Failure::system(format!(
                "The broker does not support consumer to filter message by {}",
                subscription.expression_type
            )));
        }
        let result = self.store.get(&topic, queue_id, queue_offset, max_msg_nums, |code| {
            subscription.matches_tags_code(code)
        });
        let code = match result.status {
            GetStatus::Found => response_code::SUCCESS,
            GetStatus::NoMatchedMessage => response_code::PULL_RETRY_IMMEDIATELY,
            GetStatus::NoMatchedLogicQueue | GetStatus::NoMessageInQueue => {
                if queue_offset != 0 {
                    response_code::PULL_OFFSET_MOVED
                } else {
                    response_code::PULL_NOT_FOUND
                }
            }
            GetStatus::OffsetOverflowOne => response_code::PULL_NOT_FOUND,
            GetStatus::OffsetOverflowBadly | GetStatus::OffsetTooSmall => {
                response_code::PULL_OFFSET_MOVED
            }
        };
        if allow_suspend && sys_flag & pull_flag::COMMIT_OFFSET != 0 {
            self.offsets.commit(&group, &topic, queue_id, commit_offset);
            self.data_changed = true;
        }
        if code == response_code::PULL_NOT_FOUND && allow_suspend && sys_flag & pull_flag::SUSPEND != 0
        {
            self.held.hold(
                &topic,
                queue_id,
                HeldPull {
                    conn,
                    request: req.clone(),
                    deadline_ms: now_ms.saturating_add(suspend_timeout.max(0)),
                    offset: queue_offset,
                    subscription,
                },
            );
            return Ok(None);
        }
        let mut response =
            RemotingCommand::response_to(req, code, Some(result.status.name().to_owned()))
                .with_ext("suggestWhichBrokerId", "0")
                .with_ext("nextBeginOffset", result.next_begin_offset.to_string())
                .with_ext("minOffset", result.min_offset.to_string())
                .with_ext("maxOffset", result.max_offset.to_string())
                .with_ext("topicSysFlag", config.topic_sys_flag.to_string())
                .with_ext("groupSysFlag", "0");
        if code == response_code::SUCCESS {
            response = response.with_body(bytes::Bytes::from(result.body));
        }
        Ok(Some(response))
    }

    fn rerun_held(&mut self, pull: HeldPull, now_ms: i64, out: &mut Vec<Action>) {
        let result = self.on_pull(pull.conn, &pull.request, now_ms, false);
        let command = match result {
            Ok(Some(response)) => response,
            Ok(None) => return,
            Err(f) => RemotingCommand::response_to(&pull.request, f.code, Some(f.remark)),
        };
        out.push(Action::Send {
            conn: pull.conn,
            command,
        });
    }

    /// A message arrived on (topic, queue) — or the queue was unpaused when `tags_code` is None:
    /// answers the held pulls it satisfies (`notifyMessageArriving`).
    pub(super) fn wake_held(
        &mut self,
        topic: &str,
        queue_id: i32,
        tags_code: Option<i64>,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) {
        let pulls = self.held.take_queue(topic, queue_id);
        if pulls.is_empty() {
            return;
        }
        let newest = self.store.visible_max_offset(topic, queue_id);
        let mut keep = Vec::new();
        for pull in pulls {
            let arrived = newest > pull.offset
                && tags_code.is_none_or(|code| pull.subscription.matches_tags_code(code));
            if arrived || now_ms >= pull.deadline_ms {
                self.rerun_held(pull, now_ms, out);
            } else {
                keep.push(pull);
            }
        }
        self.held.put_back(topic, queue_id, keep);
    }

    /// Answers held pulls whose suspend time is over.
    pub(super) fn expire_held(&mut self, now_ms: i64, out: &mut Vec<Action>) {
        for pull in self.held.take_expired(now_ms) {
            self.rerun_held(pull, now_ms, out);
        }
    }

    /// Number of pulls currently parked by long polling.
    pub fn held_pull_count(&self) -> usize {
        self.held.len()
    }

    fn offset_reply(req: &RemotingCommand, offset: i64) -> Handled {
        Ok(Some(
            RemotingCommand::response_to(req, response_code::SUCCESS, None)
                .with_ext("offset", offset.to_string()),
        ))
    }

    pub(super) fn on_query_consumer_offset(&mut self, req: &RemotingCommand) -> Handled {
        let group = required(req, &["consumerGroup"])?;
        let topic = required(req, &["topic"])?;
        let queue_id: i32 = required_num(req, &["queueId"])?;
        if let Some(offset) = self.offsets.query(group, topic, queue_id) {
            return Self::offset_reply(req, offset);
        }
        if optional_bool(req, &["setZeroIfNotFound"]) == Some(false) {
            return Err(Failure::new(
                response_code::QUERY_NOT_FOUND,
                "Not found, do not set to zero, maybe this group boot first",
            ));
        }
        // The real broker answers 0 for a new group while offset 0 is still in memory.
        if self.store.min_offset(topic, queue_id) <= 0
            && self.store.record_at(topic, queue_id, 0).is_some()
        {
            return Self::offset_reply(req, 0);
        }
        Err(Failure::new(
            response_code::QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        ))
    }

    pub(super) fn on_update_consumer_offset(&mut self, req: &RemotingCommand) -> Handled {
        let group = required(req, &["consumerGroup"])?.to_owned();
        let topic = required(req, &["topic"])?.to_owned();
        if !self.groups.contains(&group) {
            return Err(Failure::new(
                response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
                format!("Group {group} not exist!"),
            ));
        }
        if self.store.topic(&topic).is_none() {
            return Err(Failure::new(
                response_code::TOPIC_NOT_EXIST,
                format!("Topic {topic} not exist!"),
            ));
        }
        let Some(queue_id) = optional_num::<i32>(req, &["queueId"])? else {
            return Err(Failure::new(
                response_code::INVALID_PARAMETER,
                format!("QueueId is null, topic is {topic}"),
            ));
        };
        let Some(offset) = optional_num::<i64>(req, &["commitOffset"])? else {
            return Err(Failure::new(
                response_code::INVALID_PARAMETER,
                format!("Offset is null, topic is {topic}"),
            ));
        };
        self.offsets.commit(&group, &topic, queue_id, offset);
        self.data_changed = true;
        Ok(Some(RemotingCommand::response_to(
            req,
            response_code::SUCCESS,
            None,
        )))
    }

    pub(super) fn on_get_max_offset(&mut self, req: &RemotingCommand) -> Handled {
        let topic = required(req, &["topic"])?;
        let queue_id: i32 = required_num(req, &["queueId"])?;
        Self::offset_reply(req, self.store.max_offset(topic, queue_id))
    }

    pub(super) fn on_get_min_offset(&mut self, req: &RemotingCommand) -> Handled {
        let topic = required(req, &["topic"])?;
        let queue_id: i32 = required_num(req, &["queueId"])?;
        Self::offset_reply(req, self.store.min_offset(topic, queue_id))
    }

    pub(super) fn on_search_offset(&mut self, req: &RemotingCommand) -> Handled {
        let topic = required(req, &["topic"])?;
        let queue_id: i32 = required_num(req, &["queueId"])?;
        let timestamp: i64 = required_num(req, &["timestamp"])?;
        let upper = field(req, &["boundaryType"]).is_some_and(|b| b.eq_ignore_ascii_case("UPPER"));
        Self::offset_reply(
            req,
            self.store
                .search_offset_by_time(topic, queue_id, timestamp, upper),
        )
    }

    pub(super) fn on_earliest_store_time(&mut self, req: &RemotingCommand) -> Handled {
        let topic = required(req, &["topic"])?;
        let queue_id: i32 = required_num(req, &["queueId"])?;
        Ok(Some(
            RemotingCommand::response_to(req, response_code::SUCCESS, None).with_ext(
                "timestamp",
                self.store.earliest_store_time(topic, queue_id).to_string(),
            ),
        ))
    }

    pub(super) fn on_view_message(&mut self, req: &RemotingCommand) -> Handled {
        let offset: i64 = required_num(req, &["offset"])?;
        match self.store.record_at_physical(offset) {
            Some(raw) => Ok(Some(
                RemotingCommand::response_to(req, response_code::SUCCESS, None)
                    .with_body(bytes::Bytes::copy_from_slice(raw)),
            )),
            None => Err(Failure::system(format!(
                "can not find message by the offset, {offset}"
            ))),
        }
    }
}
