//! The admin subcommands, named after Java's mqadmin: `topic-route`, `consumer-progress`,
//! `consumer-connections`, `query-msg` and `reset-offset`. Each prints one JSON object per row.
//!
//! With `--namespace`, topics and groups are given and printed without the namespace and
//! asked for with it (the base client's requests carry wire names).

use std::collections::HashMap;

use rocketmq_actor::message::decode_offset_msg_id;
use rocketmq_actor::protocol::body::{decode_json, ConsumerConnection, ConsumerRunningInfo};
use rocketmq_actor::protocol::codes::{perm, request_code, response_code};
use rocketmq_actor::protocol::header::GetConsumerRunningInfoRequestHeader;
use rocketmq_actor::protocol::RemotingCommand;
use rocketmq_actor::{Client, Error, MessageQueue};
use serde_json::json;

use super::consume::{parse_start, StartAt};
use super::format::message_json;
use super::output::{OutputArgs, Rows};
use super::{emit, CliResult, Connect, Failure, Outcome};

/// The arguments of `topic route` and `topic status`: one topic.
#[derive(clap::Args, Clone, Debug)]
pub struct TopicArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Topic.
    #[arg(short, long)]
    pub topic: String,
}

/// `consumer-progress`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct ConsumerProgressArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Consumer group.
    #[arg(short, long)]
    pub group: String,
    /// Only this topic (default: every topic the group's online clients subscribe to; needed
    /// for a group without online clients).
    #[arg(short, long)]
    pub topic: Option<String>,
}

/// `consumer-connections`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct ConsumerConnectionsArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Consumer group.
    #[arg(short, long)]
    pub group: String,
}

/// `query-msg`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct QueryMsgArgs {
    #[command(flatten)]
    pub connect: Connect,
    /// Offset message id: 32 hex digits (56 for an IPv6 store host), as `offset_msg_id` of
    /// `consume --format json` or `%I` of a template.
    #[arg(long, value_parser = offset_msg_id, value_name = "OFFSET_MSG_ID")]
    pub id: String,
}

/// `reset-offset`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct ResetOffsetArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Consumer group.
    #[arg(short, long)]
    pub group: String,
    /// Topic.
    #[arg(short, long)]
    pub topic: String,
    /// first, last, or a time: Unix ms, RFC 3339 (`2026-12-07T10:00:00Z`) or relative (`-1h`).
    #[arg(
        long,
        value_parser = reset_target,
        value_name = "first|last|TIME",
        allow_hyphen_values = true
    )]
    pub to: i64,
    /// Only move offsets back (do not skip unconsumed messages forward).
    #[arg(long)]
    pub no_force: bool,
}

fn offset_msg_id(text: &str) -> Result<String, String> {
    decode_offset_msg_id(text)
        .map(|_| text.to_owned())
        .map_err(|_| {
            "expected an offset message id: 32 hex digits (56 for an IPv6 store host)".to_owned()
        })
}

/// `--to`: the timestamp `reset_offset_by_timestamp` takes (0 first, -1 last).
fn reset_target(text: &str) -> Result<i64, String> {
    match parse_start(text)? {
        StartAt::First => Ok(0),
        StartAt::Last => Ok(-1),
        StartAt::Timestamp(ms) if ms >= 0 => Ok(ms),
        StartAt::Timestamp(_) => Err("the time is before 1970".to_owned()),
    }
}

/// Java's `PermName.perm2String`: `R`, `W`, `X` (inherit) or `-` in that order.
pub(super) fn perm_text(bits: i32) -> String {
    [(perm::READ, 'R'), (perm::WRITE, 'W'), (perm::INHERIT, 'X')]
        .iter()
        .map(|&(bit, c)| if bits & bit != 0 { c } else { '-' })
        .collect()
}

/// Runs `body` with a client of `connect`, shutting the client down afterwards.
pub(super) async fn with_client<T>(
    connect: &Connect,
    body: impl AsyncFnOnce(&Client) -> CliResult<T>,
) -> CliResult<T> {
    let client = connect.client()?;
    let result = body(&client).await;
    client.shutdown().await;
    result
}

/// The columns of `topic route`.
const ROUTE_COLUMNS: &[&str] = &[
    "topic",
    "broker",
    "cluster",
    "addrs",
    "read_queues",
    "write_queues",
    "perm_text",
];

/// `topic-route`: one line per broker of the topic — its addresses by broker id (0: the
/// master) and its queues (read, write, permission).
pub async fn topic_route(args: &TopicArgs) -> CliResult {
    let wire_topic = args.connect.namespace().wrap(&args.topic).into_owned();
    let rows = with_client(&args.connect, async |client| {
        let route = args
            .connect
            .probe(client, &wire_topic)
            .await?
            .ok_or_else(|| no_topic(&args.topic))?;
        let mut brokers = route.data.broker_datas.clone();
        brokers.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
        let mut rows = Rows::new(ROUTE_COLUMNS);
        for broker in &brokers {
            let queues = route
                .data
                .queue_datas
                .iter()
                .find(|q| q.broker_name == broker.broker_name);
            rows.push(json!({
                    "topic": args.topic,
                    "broker": broker.broker_name,
                    "cluster": broker.cluster,
                    "addrs": broker.broker_addrs,
                    "read_queues": queues.map(|q| q.read_queue_nums),
                    "write_queues": queues.map(|q| q.write_queue_nums),
                    "perm": queues.map(|q| q.perm),
                    "perm_text": queues.map(|q| perm_text(q.perm)),
                    "topic_sys_flag": queues.map(|q| q.topic_sys_flag),
            }));
        }
        Ok(rows)
    })
    .await?;
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

pub(super) fn no_topic(topic: &str) -> Failure {
    Failure(format!(
        "topic {topic} does not exist (the name servers have no route for it)"
    ))
}

/// The group's connections, or `None` when no broker lists a member.
async fn connections_of(
    connect: &Connect,
    client: &Client,
    group: &str,
) -> CliResult<Option<ConsumerConnection>> {
    match client.consumer_connections(group).await {
        Ok(connections) => Ok(Some(connections)),
        Err(Error::TopicRouteNotFound(_)) => Ok(None),
        Err(e) if e.response_code() == Some(response_code::CONSUMER_NOT_ONLINE) => Ok(None),
        Err(e) => Err(connect.unreachable(e)),
    }
}

fn not_online(group: &str) -> Failure {
    Failure(format!("consumer group {group} is not online"))
}

/// `consumer-connections`: one line per connected client of the group, with what the group
/// declared (subscriptions, consume type, message model, where it starts).
pub async fn consumer_connections(args: &ConsumerConnectionsArgs) -> CliResult {
    let namespace = args.connect.namespace();
    let wire_group = namespace.wrap(&args.group).into_owned();
    let connections = with_client(&args.connect, async |client| {
        connections_of(&args.connect, client, &wire_group).await
    })
    .await?
    .ok_or_else(|| not_online(&args.group))?;
    let subscriptions: serde_json::Map<String, serde_json::Value> = connections
        .subscription_table
        .iter()
        .map(|(topic, sub)| (namespace.unwrap(topic).into_owned(), json!(sub.sub_string)))
        .collect();
    let mut clients = connections.connection_set.clone();
    clients.sort_by(|a, b| a.client_id.cmp(&b.client_id));
    let mut rows = Rows::new(&[
        "group",
        "client_id",
        "client_addr",
        "language",
        "version",
        "consume_type",
        "message_model",
    ]);
    for client in &clients {
        rows.push(json!({
            "group": args.group,
            "client_id": client.client_id,
            "client_addr": client.client_addr,
            "language": client.language,
            "version": client.version,
            "consume_type": connections.consume_type,
            "message_model": connections.message_model,
            "consume_from_where": connections.consume_from_where,
            "subscriptions": subscriptions,
        }));
    }
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

/// The client of the group owning each queue, as each online client says in its running info
/// (GET_CONSUMER_RUNNING_INFO, forwarded by a broker of the group as mqadmin does). A client
/// that does not answer is reported on stderr and owns nothing here.
async fn owners(
    client: &Client,
    group: &str,
    connections: &ConsumerConnection,
) -> HashMap<MessageQueue, String> {
    let mut owners = HashMap::new();
    let masters: Vec<String> = match client.route(&format!("%RETRY%{group}")).await {
        Ok(route) => route
            .data
            .broker_datas
            .iter()
            .filter_map(|b| b.master_addr())
            .map(str::to_owned)
            .collect(),
        Err(_) => Vec::new(),
    };
    for connection in &connections.connection_set {
        let mut last_error = None;
        for addr in &masters {
            let header = GetConsumerRunningInfoRequestHeader {
                consumer_group: group.to_owned(),
                client_id: connection.client_id.clone(),
                jstack_enable: false,
            };
            let command = RemotingCommand::request_with_header(
                request_code::GET_CONSUMER_RUNNING_INFO,
                &header,
            );
            let info = client.invoke(addr, command).await.and_then(|response| {
                Ok(decode_json::<ConsumerRunningInfo>(
                    response.body.as_deref().unwrap_or_default(),
                )?)
            });
            match info {
                Ok(info) => {
                    for (queue, state) in info.mq_table {
                        if !state.droped {
                            owners.insert(queue, connection.client_id.clone());
                        }
                    }
                    last_error = None;
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        if let Some(e) = last_error {
            tracing::warn!(
                client = %connection.client_id,
                error = %e,
                "cannot ask the client for its queues"
            );
        }
    }
    owners
}

/// `consumer-progress`: one line per queue of the group's topics — the broker's end offset,
/// the group's committed offset, the lag between them, and the client that owns the queue now.
pub async fn consumer_progress(args: &ConsumerProgressArgs) -> CliResult {
    let namespace = args.connect.namespace();
    let group = namespace.wrap(&args.group).into_owned();
    let rows = with_client(&args.connect, async |client| {
        let connections = connections_of(&args.connect, client, &group).await?;
        let topics: Vec<String> = match (&args.topic, &connections) {
            (Some(topic), _) => vec![namespace.wrap(topic).into_owned()],
            (None, Some(connections)) => connections.subscription_table.keys().cloned().collect(),
            (None, None) => {
                return Err(Failure(format!(
                    "consumer group {} is not online: give --topic to read its stored offsets",
                    args.group
                )))
            }
        };
        let owners = match &connections {
            Some(connections) => owners(client, &group, connections).await,
            None => HashMap::new(),
        };
        let mut rows = Rows::new(&[
            "topic",
            "broker",
            "queue_id",
            "broker_offset",
            "consumer_offset",
            "lag",
            "client",
        ]);
        for topic in &topics {
            let route = args
                .connect
                .probe(client, topic)
                .await?
                .ok_or_else(|| no_topic(topic))?;
            for queue in &route.consume_queues {
                let end = client.max_offset(queue).await?;
                let committed = client.query_consumer_offset(&group, queue).await?;
                rows.push(json!({
                    "topic": namespace.unwrap(&queue.topic),
                    "broker": queue.broker_name,
                    "queue_id": queue.queue_id,
                    "broker_offset": end,
                    "consumer_offset": committed,
                    "lag": committed.map(|c| (end - c).max(0)),
                    "client": owners.get(queue),
                }));
            }
        }
        Ok(rows)
    })
    .await?;
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

/// `query-msg`: the stored message an offset message id points to, as `consume --format json`
/// prints it.
pub async fn query_msg(args: &QueryMsgArgs) -> CliResult {
    let mut message = with_client(&args.connect, async |client| {
        Ok(client.view_message(&args.id).await?)
    })
    .await?;
    args.connect.namespace().unwrap_received(&mut message, None);
    emit(&message_json(&message))?;
    Ok(Outcome::Done)
}

/// `reset-offset`: moves the group's offsets of the topic by time (mqadmin resetOffsetByTime)
/// and prints each queue's new offset.
pub async fn reset_offset(args: &ResetOffsetArgs) -> CliResult {
    let namespace = args.connect.namespace();
    let (group, topic) = (namespace.wrap(&args.group), namespace.wrap(&args.topic));
    let table = with_client(&args.connect, async |client| {
        args.connect
            .probe(client, &topic)
            .await?
            .ok_or_else(|| no_topic(&args.topic))?;
        Ok(client
            .reset_offset_by_timestamp(&group, &topic, args.to, !args.no_force)
            .await?)
    })
    .await?;
    let mut rows = Rows::new(&["broker", "queue_id", "offset"]);
    for (queue, offset) in table {
        rows.push(
            json!({"broker": queue.broker_name, "queue_id": queue.queue_id, "offset": offset}),
        );
    }
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_read_as_java_prints_them() {
        assert_eq!(perm_text(6), "RW-");
        assert_eq!(perm_text(4), "R--");
        assert_eq!(perm_text(7), "RWX");
        assert_eq!(perm_text(0), "---");
    }

    #[test]
    fn reset_targets() {
        assert_eq!(reset_target("first"), Ok(0));
        assert_eq!(reset_target("last"), Ok(-1));
        assert_eq!(reset_target("1700000000000"), Ok(1_700_000_000_000));
        assert_eq!(reset_target("2024-01-01T00:00:00Z"), Ok(1_704_067_200_000));
        assert!(reset_target("yesterday").is_err());
        assert!(reset_target("-5").is_err());
        assert!(reset_target("1960-01-01T00:00:00Z").is_err());
    }
}
