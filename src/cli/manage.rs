//! The admin subcommands that change or list a cluster's topics and groups, and read its
//! brokers: `topic create|update|delete|list|status`, `cluster list`, `broker status` and
//! `group list|delete`, named after mqadmin's commands.
//!
//! Topics and groups are given (and printed) without `--namespace`, and sent with it.

use std::collections::{BTreeMap, BTreeSet};

use rocketmq_actor::admin::{Admin, BrokerMaster, Brokers, TopicConfig};
use rocketmq_actor::namespace::{is_system_resource, is_wrapped, Namespace, SYSTEM_GROUP_PREFIX};
use rocketmq_actor::protocol::codes::perm;
use rocketmq_actor::Client;
use serde_json::json;

use super::admin::{no_topic, perm_text, with_client, TopicArgs};
use super::output::{OutputArgs, Rows};
use super::{CliResult, Connect, Failure, Outcome};

/// Which brokers a change goes to: `--cluster`, `--broker`, or (neither) every broker.
#[derive(clap::Args, Clone, Debug)]
pub struct BrokerSelection {
    /// Only the brokers of this cluster (mqadmin `-c`).
    #[arg(short, long, conflicts_with = "broker")]
    pub cluster: Option<String>,
    /// Only this broker, by name (`broker-a`) or by its master's address (mqadmin `-b`).
    #[arg(short, long)]
    pub broker: Option<String>,
}

impl BrokerSelection {
    fn brokers(&self) -> Brokers {
        match (&self.cluster, &self.broker) {
            (Some(cluster), _) => Brokers::Cluster(cluster.clone()),
            (None, Some(broker)) => Brokers::Broker(broker.clone()),
            (None, None) => Brokers::All,
        }
    }
}

/// `topic create`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct TopicCreateArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub brokers: BrokerSelection,
    /// Topic to create (or to update, when it exists).
    #[arg(short, long)]
    pub topic: String,
    /// Read and write queues per broker.
    #[arg(long, default_value_t = 8, value_parser = queue_count)]
    pub queues: i32,
    /// Read queues per broker, when they differ from --queues.
    #[arg(short, long, value_parser = queue_count)]
    pub read_queues: Option<i32>,
    /// Write queues per broker, when they differ from --queues.
    #[arg(short, long, value_parser = queue_count)]
    pub write_queues: Option<i32>,
    /// Permission: RW (default), R (consumers only), W (producers only), -, or the bits 0–7.
    #[arg(short, long, value_parser = parse_perm, default_value = "RW")]
    pub perm: i32,
    /// An ordered topic (mqadmin `-o true`).
    #[arg(long)]
    pub order: bool,
}

/// `topic update`'s arguments: what is not given stays as the broker has it.
#[derive(clap::Args, Clone, Debug)]
pub struct TopicUpdateArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub brokers: BrokerSelection,
    /// Topic to update; it must exist on every selected broker.
    #[arg(short, long)]
    pub topic: String,
    /// New read and write queue count.
    #[arg(long, value_parser = queue_count)]
    pub queues: Option<i32>,
    /// New read queue count.
    #[arg(short, long, value_parser = queue_count)]
    pub read_queues: Option<i32>,
    /// New write queue count.
    #[arg(short, long, value_parser = queue_count)]
    pub write_queues: Option<i32>,
    /// New permission: RW, R, W, -, or the bits 0–7.
    #[arg(short, long, value_parser = parse_perm)]
    pub perm: Option<i32>,
    /// Ordered (`true`) or not (`false`).
    #[arg(long, value_name = "true|false")]
    pub order: Option<bool>,
}

/// `topic delete`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct TopicDeleteArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub brokers: BrokerSelection,
    /// Topic to delete, with its messages and every group's offsets of it.
    #[arg(short, long)]
    pub topic: String,
}

/// `topic list`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct TopicListArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(flatten)]
    pub output: OutputArgs,
    /// System topics too: retry and dead-letter topics, TBW102, the clusters' and brokers'
    /// own, `rmq_sys_…`.
    #[arg(short, long)]
    pub all: bool,
}

/// `cluster list` and `broker status` arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub brokers: BrokerSelection,
}

/// `group list`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct GroupListArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub brokers: BrokerSelection,
    /// The brokers' own groups too (TOOLS_CONSUMER, CID_RMQ_SYS_…).
    #[arg(short, long)]
    pub all: bool,
}

/// `group delete`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct GroupDeleteArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub brokers: BrokerSelection,
    /// Consumer group to delete (a member still running creates it again).
    #[arg(short, long)]
    pub group: String,
    /// Delete the group's committed offsets too: a new member starts where
    /// `consume_from_where` says, not where the group was.
    #[arg(long)]
    pub clean_offset: bool,
}

/// 1 to 1024 queues.
fn queue_count(text: &str) -> Result<i32, String> {
    match text.parse::<i32>() {
        Ok(n @ 1..=1024) => Ok(n),
        _ => Err("expected 1 to 1024 queues".into()),
    }
}

/// `RW`, `R`, `W`, `-` (letters in any order, `-` ignored, as mqadmin prints them: `RW-`), or
/// the permission bits 0–7.
fn parse_perm(text: &str) -> Result<i32, String> {
    const EXPECTED: &str = "expected RW, R, W, - or the bits 0-7 (4 read, 2 write, 1 inherit)";
    if let Ok(bits) = text.parse::<i32>() {
        return (0..=7)
            .contains(&bits)
            .then_some(bits)
            .ok_or(EXPECTED.into());
    }
    let mut bits = 0;
    for c in text.chars() {
        bits |= match c.to_ascii_uppercase() {
            'R' => perm::READ,
            'W' => perm::WRITE,
            'X' => perm::INHERIT,
            '-' => 0,
            _ => return Err(EXPECTED.into()),
        };
    }
    if text.is_empty() {
        return Err(EXPECTED.into());
    }
    Ok(bits)
}

/// A Unix time in ms as RFC 3339 (UTC, ms precision); `None` for 0 (never).
fn rfc3339(ms: i64) -> Option<String> {
    let time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    let format = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    (ms > 0).then(|| time.format(&format).ok()).flatten()
}

/// A row of a topic's configuration on one broker.
fn topic_row(master: &BrokerMaster, topic: &str, config: &TopicConfig) -> serde_json::Value {
    json!({
        "topic": topic,
        "cluster": master.cluster,
        "broker": master.broker_name,
        "addr": master.addr,
        "read_queues": config.read_queue_nums,
        "write_queues": config.write_queue_nums,
        "perm": config.perm,
        "perm_text": perm_text(config.perm),
        "order": config.order,
    })
}

const TOPIC_COLUMNS: &[&str] = &[
    "topic",
    "broker",
    "addr",
    "read_queues",
    "write_queues",
    "perm_text",
    "order",
];

/// `topic create`: the topic on the master of every selected broker; a line per broker.
pub async fn topic_create(args: &TopicCreateArgs) -> CliResult {
    let wire_topic = args.connect.namespace().wrap(&args.topic).into_owned();
    let mut config = TopicConfig::new(&wire_topic, args.queues);
    config.read_queue_nums = args.read_queues.unwrap_or(args.queues);
    config.write_queue_nums = args.write_queues.unwrap_or(args.queues);
    config.perm = args.perm;
    config.order = args.order;
    let masters = with_client(&args.connect, async |client| {
        Ok(admin(client)
            .create_topic(&args.brokers.brokers(), &config)
            .await?)
    })
    .await?;
    let mut rows = Rows::new(TOPIC_COLUMNS);
    for master in &masters {
        rows.push(topic_row(master, &args.topic, &config));
    }
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

/// `topic update`: reads the topic's configuration on each selected broker, changes what was
/// given and writes it back; a line per broker with the result.
pub async fn topic_update(args: &TopicUpdateArgs) -> CliResult {
    let wire_topic = args.connect.namespace().wrap(&args.topic).into_owned();
    let updated = with_client(&args.connect, async |client| {
        let admin = admin(client);
        let masters = admin.masters(&args.brokers.brokers()).await?;
        // Every broker is checked before any is changed.
        let mut configs = Vec::new();
        for master in masters {
            let config = admin
                .topic_config(&master.addr, &wire_topic)
                .await?
                .ok_or_else(|| {
                    Failure(format!(
                        "topic {} does not exist on {} ({}): create it with `topic create`",
                        args.topic, master.broker_name, master.addr
                    ))
                })?;
            configs.push((master, config));
        }
        for (master, config) in &mut configs {
            if let Some(queues) = args.queues {
                (config.read_queue_nums, config.write_queue_nums) = (queues, queues);
            }
            config.read_queue_nums = args.read_queues.unwrap_or(config.read_queue_nums);
            config.write_queue_nums = args.write_queues.unwrap_or(config.write_queue_nums);
            config.perm = args.perm.unwrap_or(config.perm);
            config.order = args.order.unwrap_or(config.order);
            admin.put_topic_config(&master.addr, config).await?;
        }
        Ok(configs)
    })
    .await?;
    let mut rows = Rows::new(TOPIC_COLUMNS);
    for (master, config) in &updated {
        rows.push(topic_row(master, &args.topic, config));
    }
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

/// `topic delete`: from the selected brokers, then from the name servers' routes; a line per
/// broker.
pub async fn topic_delete(args: &TopicDeleteArgs) -> CliResult {
    let wire_topic = args.connect.namespace().wrap(&args.topic).into_owned();
    let masters = with_client(&args.connect, async |client| {
        Ok(admin(client)
            .delete_topic(&args.brokers.brokers(), &wire_topic)
            .await?)
    })
    .await?;
    let mut rows = Rows::new(&["topic", "broker", "addr", "deleted"]);
    for master in &masters {
        rows.push(json!({
            "topic": args.topic,
            "cluster": master.cluster,
            "broker": master.broker_name,
            "addr": master.addr,
            "deleted": true,
        }));
    }
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

/// Java's `TopicValidator` system topics, and the other families a broker registers.
fn is_system_topic(topic: &str, own_names: &BTreeSet<String>) -> bool {
    is_system_resource(topic)
        || topic.starts_with("RMQ_SYS_")
        || topic.starts_with("%RETRY%")
        || topic.starts_with("%DLQ%")
        || topic.ends_with("_REPLY_TOPIC")
        || own_names.contains(topic)
}

/// `topic list`: every topic the name servers know, sorted; system topics with `--all`.
pub async fn topic_list(args: &TopicListArgs) -> CliResult {
    let namespace = args.connect.namespace();
    let (topics, own_names) = with_client(&args.connect, async |client| {
        let admin = admin(client);
        let topics = admin
            .topic_list()
            .await
            .map_err(|e| args.connect.unreachable(e))?;
        // Clusters and brokers register their own names as topics.
        let info = admin.cluster_info().await?;
        let own_names: BTreeSet<String> = info
            .cluster_addr_table
            .keys()
            .chain(info.broker_addr_table.keys())
            .cloned()
            .collect();
        Ok((topics, own_names))
    })
    .await?;
    let mut rows = Rows::new(&["topic"]);
    for topic in &topics {
        if !args.all && is_system_topic(topic, &own_names) {
            continue;
        }
        let Some(shown) = in_namespace(&namespace, topic) else {
            continue;
        };
        rows.push(json!({ "topic": shown }));
    }
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

/// `topic status`: each queue's stored range on each broker of the topic's route.
pub async fn topic_status(args: &TopicArgs) -> CliResult {
    let wire_topic = args.connect.namespace().wrap(&args.topic).into_owned();
    let stats = with_client(&args.connect, async |client| {
        let route = args
            .connect
            .probe(client, &wire_topic)
            .await?
            .ok_or_else(|| no_topic(&args.topic))?;
        let admin = admin(client);
        let mut stats = BTreeMap::new();
        for broker in &route.data.broker_datas {
            let Some(addr) = broker.master_addr() else {
                continue;
            };
            stats.extend(admin.topic_stats(addr, &wire_topic).await?.offset_table);
        }
        Ok(stats)
    })
    .await?;
    let mut rows = Rows::new(&[
        "broker",
        "queue_id",
        "min_offset",
        "max_offset",
        "messages",
        "last_updated",
    ]);
    for (queue, offsets) in &stats {
        rows.push(json!({
            "topic": args.topic,
            "broker": queue.broker_name,
            "queue_id": queue.queue_id,
            "min_offset": offsets.min_offset,
            "max_offset": offsets.max_offset,
            "messages": (offsets.max_offset - offsets.min_offset).max(0),
            "last_updated": rfc3339(offsets.last_update_timestamp),
            "last_updated_ms": offsets.last_update_timestamp,
        }));
    }
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

/// Every server of the selected brokers: (cluster, broker, broker id, address), from one
/// cluster table.
async fn servers(
    admin: &Admin,
    brokers: &Brokers,
) -> CliResult<Vec<(String, String, i64, String)>> {
    let info = admin.cluster_info().await?;
    let mut servers = Vec::new();
    for master in brokers.masters(&info)? {
        if let Some(data) = info.broker_addr_table.get(&master.broker_name) {
            for (id, addr) in &data.broker_addrs {
                servers.push((
                    master.cluster.clone(),
                    master.broker_name.clone(),
                    *id,
                    addr.clone(),
                ));
            }
        }
    }
    servers.sort();
    Ok(servers)
}

/// `cluster list`: a line per broker server, with its version and today's traffic as its
/// runtime information gives them (mqadmin clusterList).
pub async fn cluster_list(args: &ClusterArgs) -> CliResult {
    let rows = with_client(&args.connect, async |client| {
        let admin = admin(client);
        let mut rows = Rows::new(&[
            "cluster",
            "broker",
            "broker_id",
            "addr",
            "version",
            "put_today",
            "get_today",
            "active",
        ]);
        for (cluster, broker, id, addr) in servers(&admin, &args.brokers.brokers()).await? {
            let info = match admin.broker_runtime_info(&addr).await {
                Ok(info) => info,
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "cannot read the broker's runtime information");
                    BTreeMap::new()
                }
            };
            let number = |key: &str| info.get(key).and_then(|v| v.trim().parse::<i64>().ok());
            rows.push(json!({
                "cluster": cluster,
                "broker": broker,
                "broker_id": id,
                "addr": addr,
                "version": info.get("brokerVersionDesc"),
                "put_today": number("msgPutTotalTodayNow"),
                "get_today": number("msgGetTotalTodayNow"),
                "active": info.get("brokerActive").map(|v| v == "true"),
            }));
        }
        Ok(rows)
    })
    .await?;
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

/// `broker status`: every key of each selected server's runtime information, a line per key
/// (mqadmin brokerStatus).
pub async fn broker_status(args: &ClusterArgs) -> CliResult {
    let rows = with_client(&args.connect, async |client| {
        let admin = admin(client);
        let mut rows = Rows::new(&["broker", "addr", "key", "value"]);
        for (_, broker, _, addr) in servers(&admin, &args.brokers.brokers()).await? {
            let info = admin.broker_runtime_info(&addr).await?;
            for (key, value) in info {
                rows.push(json!({"broker": broker, "addr": addr, "key": key, "value": value}));
            }
        }
        Ok(rows)
    })
    .await?;
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

/// Java's `MixAll` groups every broker creates for itself, and its `CID_RMQ_SYS_` prefix.
fn is_system_group(group: &str) -> bool {
    const PREDEFINED: &[&str] = &[
        "DEFAULT_CONSUMER",
        "DEFAULT_PRODUCER",
        "TOOLS_CONSUMER",
        "SCHEDULE_CONSUMER",
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "SELF_TEST_P_GROUP",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
    ];
    PREDEFINED.contains(&group) || group.starts_with(SYSTEM_GROUP_PREFIX)
}

/// `group list`: every consumer group the selected brokers know, a line per group with the
/// brokers that have it.
pub async fn group_list(args: &GroupListArgs) -> CliResult {
    let namespace = args.connect.namespace();
    let groups = with_client(&args.connect, async |client| {
        let admin = admin(client);
        let mut groups: BTreeMap<String, (Vec<String>, serde_json::Value)> = BTreeMap::new();
        for master in admin.masters(&args.brokers.brokers()).await? {
            for (name, config) in admin.subscription_groups(&master.addr).await? {
                let entry = groups.entry(name).or_insert_with(|| {
                    (
                        Vec::new(),
                        json!({
                            "consume_enable": config.consume_enable,
                            "broadcast_enable": config.consume_broadcast_enable,
                            "retry_max_times": config.retry_max_times,
                            "retry_queues": config.retry_queue_nums,
                        }),
                    )
                });
                entry.0.push(master.broker_name.clone());
            }
        }
        Ok(groups)
    })
    .await?;
    let mut rows = Rows::new(&["group", "brokers", "consume_enable", "retry_max_times"]);
    for (group, (brokers, mut config)) in groups {
        if !args.all && is_system_group(&group) {
            continue;
        }
        let Some(shown) = in_namespace(&namespace, &group) else {
            continue;
        };
        if let Some(row) = config.as_object_mut() {
            row.insert("group".into(), json!(shown));
            row.insert("brokers".into(), json!(brokers.join(",")));
        }
        rows.push(config);
    }
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

/// `group delete`: from the masters of the selected brokers; a line per broker.
pub async fn group_delete(args: &GroupDeleteArgs) -> CliResult {
    let wire_group = args.connect.namespace().wrap(&args.group).into_owned();
    let masters = with_client(&args.connect, async |client| {
        Ok(admin(client)
            .delete_group(&args.brokers.brokers(), &wire_group, args.clean_offset)
            .await?)
    })
    .await?;
    let mut rows = Rows::new(&["group", "broker", "addr", "offsets_deleted"]);
    for master in &masters {
        rows.push(json!({
            "group": args.group,
            "broker": master.broker_name,
            "addr": master.addr,
            "offsets_deleted": args.clean_offset,
        }));
    }
    rows.print(args.output.output)?;
    Ok(Outcome::Done)
}

/// A topic or group name as shown under `--namespace`: without the namespace, and `None`
/// when it belongs to another.
fn in_namespace(namespace: &Namespace, name: &str) -> Option<String> {
    match namespace.as_str() {
        None => Some(name.to_owned()),
        Some(ns) if is_wrapped(ns, name) => Some(namespace.unwrap(name).into_owned()),
        Some(_) => None,
    }
}

fn admin(client: &Client) -> Admin {
    Admin::new(client.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_in_every_form() {
        assert_eq!(parse_perm("RW"), Ok(6));
        assert_eq!(parse_perm("rw-"), Ok(6));
        assert_eq!(parse_perm("R"), Ok(4));
        assert_eq!(parse_perm("W"), Ok(2));
        assert_eq!(parse_perm("-"), Ok(0));
        assert_eq!(parse_perm("7"), Ok(7));
        for bad in ["8", "", "RZ", "-1"] {
            assert!(parse_perm(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn system_topics_and_groups_are_told_apart() {
        let own: BTreeSet<String> = ["DefaultCluster".to_owned(), "broker-a".to_owned()].into();
        for system in [
            "TBW102",
            "%RETRY%g",
            "%DLQ%g",
            "rmq_sys_wheel_timer",
            "DefaultCluster",
            "broker-a",
            "DefaultCluster_REPLY_TOPIC",
            "SCHEDULE_TOPIC_XXXX",
        ] {
            assert!(is_system_topic(system, &own), "{system}");
        }
        for user in ["Orders", "TBW1020", "broker-b"] {
            assert!(!is_system_topic(user, &own), "{user}");
        }
        assert!(is_system_group("TOOLS_CONSUMER"));
        assert!(is_system_group("CID_RMQ_SYS_TRANS"));
        assert!(!is_system_group("orders_consumer"));
    }

    #[test]
    fn times_print_as_rfc3339_utc() {
        assert_eq!(
            rfc3339(1_704_067_200_250).as_deref(),
            Some("2024-01-01T00:00:00.250Z")
        );
        assert_eq!(rfc3339(0), None);
    }
}
