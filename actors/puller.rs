//! The puller actor: turns pull requests of queue actors into PULL_MESSAGE calls.
//!
//! Every queue actor of a consumer sends its pulls here. The puller resolves the broker address
//! (cached per broker, refreshed after a failure), sends the request on that broker's connection
//! — all queues of one broker are pipelined on one socket, long polls included — then decodes the
//! body and re-filters by exact tag (the broker filters by tag hash only) before answering the
//! queue actor. The queue actor owns the decision of what to do with the result.

use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;

use crate::actors::client::{call, Client};
use crate::actors::connection::Connection;
use crate::consumer::flow::{PullRequestFlags, PullStatus};
use crate::error::{Error, Result};
use crate::filter::TagExpression;
use crate::message::{decode_messages, MessageExt, MessageQueue};
use crate::protocol::codes::request_code;
use crate::protocol::header::{PullMessageRequestHeader, PullMessageResponseHeader};
use crate::protocol::RemotingCommand;

/// A subscription as the pull path needs it.
#[derive(Debug, Clone)]
pub struct PullSubscription {
    /// The parsed expression (for the exact client-side re-filter).
    pub expression: TagExpression,
    /// `subVersion` sent in heartbeats; pulls must carry the same.
    pub sub_version: i64,
}

impl PullSubscription {
    /// The subscription as heartbeats and running-info replies describe it.
    pub fn to_wire(&self, topic: &str) -> crate::protocol::body::SubscriptionData {
        crate::protocol::body::SubscriptionData {
            class_filter_mode: false,
            topic: topic.to_owned(),
            sub_string: self.expression.sub_string().to_owned(),
            tags_set: self.expression.tags().to_vec(),
            code_set: self.expression.codes().to_vec(),
            sub_version: self.sub_version,
            expression_type: "TAG".into(),
        }
    }
}

/// Pull one batch of a queue.
#[derive(Message)]
#[rtype(result = "Result<PullResponse>")]
pub struct Pull {
    /// The consumer group.
    pub group: Arc<str>,
    /// The queue.
    pub queue: MessageQueue,
    /// The offset to read from.
    pub offset: i64,
    /// Flags and timeouts (see [`crate::consumer::flow::pull_request_flags`]).
    pub flags: PullRequestFlags,
    /// The queue's topic subscription.
    pub subscription: Arc<PullSubscription>,
    /// `maxMsgNums`.
    pub max_messages: i32,
    /// `maxMsgBytes`.
    pub max_bytes: i32,
}

/// A pull the broker answered with a pull status.
#[derive(Debug)]
pub struct PullResponse {
    /// The status.
    pub status: PullStatus,
    /// Where to pull next.
    pub next_begin_offset: i64,
    /// The queue's smallest offset.
    pub min_offset: i64,
    /// The queue's end offset.
    pub max_offset: i64,
    /// The broker id to pull from next.
    pub suggest_broker_id: i64,
    /// The messages kept after the exact tag re-filter, with broker name set.
    pub messages: Vec<MessageExt>,
    /// How many messages the broker sent (before the re-filter).
    pub received: usize,
}

/// The puller of one consumer.
pub struct Puller {
    client: Client,
    /// (topic, broker) → (address, connection) of the broker to pull from.
    targets: HashMap<(String, String), (String, Addr<Connection>)>,
}

impl Puller {
    /// A puller using `client` for routes and connections.
    pub fn new(client: Client) -> Self {
        Puller {
            client,
            targets: HashMap::new(),
        }
    }
}

impl Actor for Puller {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // One pull in flight per queue at most: room for every queue of a large consumer.
        ctx.set_mailbox_capacity(65_536);
    }
}

impl Handler<Pull> for Puller {
    type Result = ResponseActFuture<Self, Result<PullResponse>>;

    fn handle(&mut self, msg: Pull, _ctx: &mut Self::Context) -> Self::Result {
        let key = (msg.queue.topic.clone(), msg.queue.broker_name.clone());
        let cached = self.targets.get(&key).cloned();
        let client = self.client.clone();
        let queue = msg.queue.clone();
        let resolve = async move {
            if let Some((addr, conn)) = cached.filter(|(_, conn)| conn.connected()) {
                return Ok((addr, conn, false));
            }
            let route = client.route(&queue.topic).await?;
            let addr = route
                .pull_addr(&queue.broker_name, 0)
                .ok_or_else(|| {
                    Error::TopicRouteNotFound(format!("{} on {}", queue.topic, queue.broker_name))
                })?
                .to_owned();
            let conn = client.connection(&addr).await?;
            Ok::<_, Error>((addr, conn, true))
        };
        let forget_key = key.clone();
        Box::pin(
            resolve
                .into_actor(self)
                .then(move |resolved, act, _ctx| {
                    let resolved = resolved.map(|(addr, conn, fresh)| {
                        if fresh {
                            act.targets.insert(key, (addr.clone(), conn.clone()));
                        }
                        (addr, conn)
                    });
                    async move {
                        let (addr, conn) = resolved?;
                        pull_once(&addr, &conn, msg).await
                    }
                    .into_actor(act)
                })
                .map(move |result, act, _ctx| {
                    if matches!(
                        result,
                        Err(Error::ConnectionClosed(_)
                            | Error::Connect { .. }
                            | Error::Timeout { .. })
                    ) {
                        act.targets.remove(&forget_key);
                    }
                    result
                }),
        )
    }
}

async fn pull_once(addr: &str, conn: &Addr<Connection>, msg: Pull) -> Result<PullResponse> {
    let header = PullMessageRequestHeader {
        consumer_group: msg.group.to_string(),
        topic: msg.queue.topic.clone(),
        queue_id: msg.queue.queue_id,
        queue_offset: msg.offset,
        max_msg_nums: msg.max_messages,
        sys_flag: msg.flags.sys_flag,
        commit_offset: msg.flags.commit_offset,
        suspend_timeout_millis: msg.flags.suspend_timeout.as_millis() as i64,
        subscription: msg
            .flags
            .send_subscription
            .then(|| msg.subscription.expression.sub_string().to_owned()),
        sub_version: msg.subscription.sub_version,
        expression_type: Some("TAG".into()),
        max_msg_bytes: Some(msg.max_bytes),
        bname: Some(msg.queue.broker_name.clone()),
    };
    let command = RemotingCommand::request_with_header(request_code::PULL_MESSAGE, &header);
    let response = call(conn, command, msg.flags.request_timeout).await?;
    let Some(status) = PullStatus::from_response_code(response.code) else {
        return Err(Error::Broker {
            peer: addr.to_owned(),
            code: response.code,
            remark: response.remark.unwrap_or_default(),
        });
    };
    let reply: PullMessageResponseHeader = response.decode_header()?;
    let mut messages = Vec::new();
    let mut received = 0;
    if status == PullStatus::Found {
        let body = response.body.unwrap_or_default();
        // Filtered and completed in place: the decoded records are never moved again.
        messages = decode_messages(body)?;
        received = messages.len();
        let expression = &msg.subscription.expression;
        if !expression.is_all() {
            messages.retain(|message| expression.matches_tags(message.tags()));
        }
        for message in &mut messages {
            if let Some(delta) = reply.offset_delta {
                message.queue_offset += delta;
            }
            message.broker_name.clone_from(&msg.queue.broker_name);
        }
    }
    Ok(PullResponse {
        status,
        next_begin_offset: reply.next_begin_offset,
        min_offset: reply.min_offset,
        max_offset: reply.max_offset,
        suggest_broker_id: reply.suggest_which_broker_id,
        messages,
        received,
    })
}
