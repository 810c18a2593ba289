//! PULL_MESSAGE with long polling, and the offset queries.

use super::clients::Subscription;
use super::selection::OffsetBits;
use super::send::FAQ_SUFFIX;
use super::store::{perm, EntryFilter, GetStatus};
use super::{read_header, Action, BrokerCore, ConnId, Failure, Handled};
use crate::filter::{SqlFilter, TagExpression, EXPRESSION_TYPE_SQL92};
use crate::message::decode::stored_properties;
use crate::protocol::codes::{pull_sys_flag, response_code};
use crate::protocol::header::{
    GetEarliestMsgStoretimeRequestHeader, GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader, OffsetResponseHeader,
    PullMessageRequestHeader, PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader, SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader, ViewMessageRequestHeader,
};
use crate::protocol::RemotingCommand;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

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
    /// When each hold's time runs out, earliest first, and its queue: expiry looks at the due
    /// queues only, not at every parked pull on every tick (thousands of queues park a pull
    /// each). A pull answered earlier leaves its entry behind; at its time it finds nothing.
    deadlines: BinaryHeap<Reverse<(i64, String, i32)>>,
}

impl HeldPulls {
    fn hold(&mut self, topic: &str, queue_id: i32, pull: HeldPull) {
        self.deadlines
            .push(Reverse((pull.deadline_ms, topic.to_owned(), queue_id)));
        self.by_queue
            .entry((topic.to_owned(), queue_id))
            .or_default()
            .push(pull);
    }

    fn take_queue(&mut self, topic: &str, queue_id: i32) -> Vec<HeldPull> {
        if self.by_queue.is_empty() {
            return Vec::new();
        }
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
        if self.by_queue.is_empty() {
            self.deadlines.clear();
        }
    }

    /// The earliest time a parked pull may be due (possibly that of one answered already,
    /// which then finds nothing to do).
    pub(crate) fn earliest_deadline(&self) -> Option<i64> {
        if self.by_queue.is_empty() {
            return None;
        }
        self.deadlines
            .peek()
            .map(|Reverse((deadline, ..))| *deadline)
    }

    fn take_expired(&mut self, now_ms: i64) -> Vec<HeldPull> {
        let mut expired = Vec::new();
        while let Some(Reverse((deadline, ..))) = self.deadlines.peek() {
            if *deadline > now_ms {
                break;
            }
            let Some(Reverse((_, topic, queue_id))) = self.deadlines.pop() else {
                break;
            };
            let key = (topic, queue_id);
            let Some(pulls) = self.by_queue.get_mut(&key) else {
                continue;
            };
            let mut at = 0;
            while at < pulls.len() {
                if pulls[at].deadline_ms <= now_ms {
                    expired.push(pulls.remove(at));
                } else {
                    at += 1;
                }
            }
            if pulls.is_empty() {
                self.by_queue.remove(&key);
            }
        }
        expired
    }

    /// Whether no pull is parked (checked on every stored message).
    pub(crate) fn is_empty(&self) -> bool {
        self.by_queue.is_empty()
    }

    /// Number of parked pulls (for tests and diagnostics).
    pub(crate) fn len(&self) -> usize {
        self.by_queue.values().map(Vec::len).sum()
    }
}

/// What a pull keeps: the tags by their code, SQL92 by the answers known already (see
/// [`Selections`]), else by evaluating the record, whose answer is then kept.
struct PullFilter<'a> {
    subscription: &'a Subscription,
    /// The SQL92 filter and its answers on the pulled queue.
    sql: Option<(&'a SqlFilter, &'a mut OffsetBits)>,
}

impl EntryFilter for PullFilter<'_> {
    fn by_entry(&mut self, offset: i64, tags_code: i64) -> Option<bool> {
        if !self.subscription.matches_tags_code(tags_code) {
            return Some(false);
        }
        match &self.sql {
            Some((_, answers)) => answers.get(offset),
            None => Some(true),
        }
    }

    fn by_record(&mut self, offset: i64, record: &[u8]) -> bool {
        let Some((sql, answers)) = &mut self.sql else {
            return true;
        };
        let selected = sql_selects(sql, record);
        answers.set(offset, selected);
        selected
    }
}

/// Whether a stored record passes `filter` (a record whose properties cannot be found does
/// not).
fn sql_selects(filter: &SqlFilter, raw: &[u8]) -> bool {
    stored_properties(raw).is_some_and(|p| filter.matches_wire(p))
}

/// Builds a TAG subscription from an expression the way `FilterAPI.buildSubscriptionData` does.
pub(crate) fn subscription_from_expression(
    topic: &str,
    expression: Option<&str>,
    expression_type: Option<&str>,
    sub_version: i64,
) -> Subscription {
    let parsed = TagExpression::parse(expression.unwrap_or("").trim());
    Subscription {
        topic: topic.to_owned(),
        sub_string: parsed.sub_string().to_owned(),
        expression_type: expression_type.unwrap_or("TAG").to_owned(),
        code_set: parsed.codes().iter().copied().collect::<BTreeSet<i32>>(),
        sub_version,
        class_filter_mode: false,
        sql: None,
    }
}

/// How many compiled SQL92 expressions a broker keeps (the cache is emptied when full).
const MAX_CACHED_FILTERS: usize = 1024;

impl BrokerCore {
    /// `subscription` with its SQL92 expression compiled, once per text: heartbeats repeat
    /// a subscription every 30 s and a pull with `FLAG_SUBSCRIPTION` carries it every time.
    pub(super) fn with_filter(&mut self, mut subscription: Subscription) -> Subscription {
        if subscription
            .expression_type
            .eq_ignore_ascii_case(EXPRESSION_TYPE_SQL92)
        {
            let text = subscription.sub_string.as_str();
            let compiled = match self.sql_filters.get(text) {
                Some(compiled) => compiled.clone(),
                None => {
                    if self.sql_filters.len() >= MAX_CACHED_FILTERS {
                        self.sql_filters.clear();
                    }
                    let compiled = SqlFilter::compile(text).map(Arc::new);
                    self.sql_filters.insert(text.to_owned(), compiled.clone());
                    compiled
                }
            };
            subscription.sql = Some(compiled);
        }
        subscription
    }

    /// Evaluates the message just stored at `offset` for every expression pulled with on its
    /// queue, so pulls find the answer without reading the record.
    pub(super) fn select_stored(&mut self, topic: &str, queue_id: i32, offset: i64) {
        let Some(record) = self.store.record_at(topic, queue_id, offset) else {
            return;
        };
        self.selections.answer(topic, queue_id, offset, |filter| {
            sql_selects(filter, record)
        });
    }

    /// The refusal of a SQL92 subscription by a broker without property filtering (Java's
    /// remark), or `None` when it filters.
    pub(super) fn property_filter_refusal(&self, expression_type: &str) -> Option<Failure> {
        (!self.config.enable_property_filter).then(|| {
            Failure::system(format!(
                "The broker does not support consumer to filter message by {expression_type}"
            ))
        })
    }

    /// The SQL92 filter a pull by `subscription` evaluates (`None` for tags), or why the pull
    /// is refused, in the order of Java's `PullMessageProcessor`.
    fn sql_filter_of(
        &self,
        subscription: &Subscription,
        from_header: bool,
    ) -> Result<Option<Arc<SqlFilter>>, Failure> {
        if subscription.is_tag_type() {
            return Ok(None);
        }
        let filter =
            match &subscription.sql {
                Some(Ok(filter)) => filter.clone(),
                Some(Err(error)) if from_header => {
                    return Err(Failure::new(
                        response_code::SUBSCRIPTION_PARSE_FAILED,
                        format!("parse the consumer's subscription failed: {error}"),
                    ))
                }
                None => {
                    return Err(Failure::new(
                        response_code::SUBSCRIPTION_PARSE_FAILED,
                        format!("unsupported filter type {}", subscription.expression_type),
                    ))
                }
                Some(Err(_)) => return Err(Failure::new(
                    response_code::FILTER_DATA_NOT_EXIST,
                    "The broker's consumer filter data is not exist!Your expression may be wrong!",
                )),
            };
        match self.property_filter_refusal(&subscription.expression_type) {
            Some(refusal) => Err(refusal),
            None => Ok(Some(filter)),
        }
    }

    /// PULL_MESSAGE. `allow_suspend` is false when a held pull is re-run (no second hold, no
    /// second offset commit), as in Java's `executeRequestWhenWakeup`.
    pub(super) fn on_pull(
        &mut self,
        conn: ConnId,
        req: &RemotingCommand,
        now_ms: i64,
        allow_suspend: bool,
    ) -> Handled {
        let PullMessageRequestHeader {
            consumer_group: group,
            topic,
            queue_id,
            queue_offset,
            max_msg_nums,
            sys_flag,
            commit_offset,
            suspend_timeout_millis: suspend_timeout,
            subscription: expression,
            sub_version,
            expression_type,
            ..
        } = read_header(req)?;
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
        let from_header = sys_flag & pull_sys_flag::SUBSCRIPTION != 0;
        let subscription = if from_header {
            let subscription = subscription_from_expression(
                &topic,
                expression.as_deref(),
                expression_type.as_deref(),
                sub_version,
            );
            self.with_filter(subscription)
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
        let sql = self.sql_filter_of(&subscription, from_header)?;
        let filter = PullFilter {
            subscription: &subscription,
            sql: sql
                .as_ref()
                .map(|sql| (&**sql, self.selections.of(&topic, queue_id, sql))),
        };
        let result = self
            .store
            .get(&topic, queue_id, queue_offset, max_msg_nums, filter);
        self.stats.gets += result.message_count as u64;
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
        if allow_suspend && sys_flag & pull_sys_flag::COMMIT_OFFSET != 0 {
            self.offsets.commit(&group, &topic, queue_id, commit_offset);
            self.data_changed = true;
        }
        if code == response_code::PULL_NOT_FOUND
            && allow_suspend
            && sys_flag & pull_sys_flag::SUSPEND != 0
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
        let header = PullMessageResponseHeader {
            suggest_which_broker_id: 0,
            next_begin_offset: result.next_begin_offset,
            min_offset: result.min_offset,
            max_offset: result.max_offset,
            offset_delta: None,
            topic_sys_flag: Some(config.topic_sys_flag),
            group_sys_flag: Some(0),
            forbidden_type: None,
        };
        let mut response =
            RemotingCommand::response_to(req, code, Some(result.status.name().to_owned()))
                .with_header(&header);
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
        // The message that arrived is the newest; a SQL92 pull wakes only for one it selects,
        // as Java evaluates the arriving message's properties.
        let arrived_record = self.store.record_at(topic, queue_id, newest - 1);
        let woken: Vec<(HeldPull, bool)> = pulls
            .into_iter()
            .map(|pull| {
                let matches = match tags_code {
                    Some(code) => {
                        pull.subscription.matches_tags_code(code)
                            && match (&pull.subscription.sql, arrived_record) {
                                (Some(Ok(filter)), Some(raw)) => sql_selects(filter, raw),
                                _ => true,
                            }
                    }
                    None => true,
                };
                let arrived = newest > pull.offset && matches;
                (pull, arrived)
            })
            .collect();
        let mut keep = Vec::new();
        for (pull, arrived) in woken {
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
                .with_header(&OffsetResponseHeader { offset }),
        ))
    }

    pub(super) fn on_query_consumer_offset(&mut self, req: &RemotingCommand) -> Handled {
        let header: QueryConsumerOffsetRequestHeader = read_header(req)?;
        let (group, topic, queue_id) = (&header.consumer_group, &header.topic, header.queue_id);
        if let Some(offset) = self.offsets.query(group, topic, queue_id) {
            return Ok(Some(
                RemotingCommand::response_to(req, response_code::SUCCESS, None)
                    .with_header(&QueryConsumerOffsetResponseHeader { offset }),
            ));
        }
        if header.set_zero_if_not_found == Some(false) {
            return Err(Failure::new(
                response_code::QUERY_NOT_FOUND,
                "Not found, do not set to zero, maybe this group boot first",
            ));
        }
        // The real broker answers 0 for a new group while offset 0 is still in memory.
        if self.store.min_offset(topic, queue_id) <= 0
            && self.store.record_at(topic, queue_id, 0).is_some()
        {
            return Ok(Some(
                RemotingCommand::response_to(req, response_code::SUCCESS, None)
                    .with_header(&QueryConsumerOffsetResponseHeader { offset: 0 }),
            ));
        }
        Err(Failure::new(
            response_code::QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        ))
    }

    /// UPDATE_CONSUMER_OFFSET. A missing queueId or commitOffset fails in the header check
    /// (both are `@CFNotNull` in Java) before the group and topic checks.
    pub(super) fn on_update_consumer_offset(&mut self, req: &RemotingCommand) -> Handled {
        let UpdateConsumerOffsetRequestHeader {
            consumer_group: group,
            topic,
            queue_id,
            commit_offset,
            ..
        } = read_header(req)?;
        if !self.groups.contains_key(&group) {
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
        self.offsets.commit(&group, &topic, queue_id, commit_offset);
        self.data_changed = true;
        Ok(Some(RemotingCommand::response_to(
            req,
            response_code::SUCCESS,
            None,
        )))
    }

    pub(super) fn on_get_max_offset(&mut self, req: &RemotingCommand) -> Handled {
        let header: GetMaxOffsetRequestHeader = read_header(req)?;
        Self::offset_reply(req, self.store.max_offset(&header.topic, header.queue_id))
    }

    pub(super) fn on_get_min_offset(&mut self, req: &RemotingCommand) -> Handled {
        let header: GetMinOffsetRequestHeader = read_header(req)?;
        Self::offset_reply(req, self.store.min_offset(&header.topic, header.queue_id))
    }

    pub(super) fn on_search_offset(&mut self, req: &RemotingCommand) -> Handled {
        let header: SearchOffsetRequestHeader = read_header(req)?;
        let upper = header
            .boundary_type
            .as_deref()
            .is_some_and(|b| b.eq_ignore_ascii_case("UPPER"));
        Self::offset_reply(
            req,
            self.store.search_offset_by_time(
                &header.topic,
                header.queue_id,
                header.timestamp,
                upper,
            ),
        )
    }

    pub(super) fn on_earliest_store_time(&mut self, req: &RemotingCommand) -> Handled {
        let header: GetEarliestMsgStoretimeRequestHeader = read_header(req)?;
        let timestamp = self
            .store
            .earliest_store_time(&header.topic, header.queue_id);
        Ok(Some(
            RemotingCommand::response_to(req, response_code::SUCCESS, None)
                .with_header(&GetEarliestMsgStoretimeResponseHeader { timestamp }),
        ))
    }

    pub(super) fn on_view_message(&mut self, req: &RemotingCommand) -> Handled {
        let ViewMessageRequestHeader { offset } = read_header(req)?;
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
