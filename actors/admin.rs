//! [`Admin`]: the typed administration calls of mqadmin — topics, subscription groups, brokers
//! and clusters — over a [`Client`]'s connections.

use std::collections::BTreeMap;

use crate::actors::client::Client;
use crate::error::{Error, NameServerFailures, Result};
use crate::protocol::body::{
    decode_json, encode_json, ClusterInfo, KvTable, SubscriptionGroupConfig,
    SubscriptionGroupTable, TopicConfig, TopicConfigTable, TopicList, TopicStatsTable,
};
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::header::{
    DeleteSubscriptionGroupRequestHeader, DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader, GetTopicConfigRequestHeader, UpdateTopicRequestHeader,
};
use crate::protocol::RemotingCommand;
use crate::route::NameServerList;

/// Which brokers a cluster-wide admin call goes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Brokers {
    /// Every broker the name servers know.
    All,
    /// The brokers of one cluster.
    Cluster(String),
    /// One broker, by name (`broker-a`) or by the address of one of its servers.
    Broker(String),
}

impl Brokers {
    /// The masters of the selected brokers in `info`, sorted by broker name. A selection that
    /// matches nothing is an [`Error::Config`] naming what was asked for.
    pub fn masters(&self, info: &ClusterInfo) -> Result<Vec<BrokerMaster>> {
        let cluster_of = |broker: &str| {
            info.cluster_addr_table
                .iter()
                .find(|(_, names)| names.iter().any(|n| n == broker))
                .map(|(cluster, _)| cluster.clone())
        };
        let mut masters: Vec<BrokerMaster> = info
            .broker_addr_table
            .values()
            .filter(|data| match self {
                Brokers::All => true,
                Brokers::Cluster(cluster) => {
                    data.cluster == *cluster
                        || cluster_of(&data.broker_name).as_ref() == Some(cluster)
                }
                Brokers::Broker(name) => {
                    data.broker_name == *name || data.broker_addrs.values().any(|a| a == name)
                }
            })
            .filter_map(|data| {
                Some(BrokerMaster {
                    cluster: cluster_of(&data.broker_name).unwrap_or_else(|| data.cluster.clone()),
                    broker_name: data.broker_name.clone(),
                    addr: data.master_addr()?.to_owned(),
                })
            })
            .collect();
        masters.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
        if masters.is_empty() {
            let (option, value, allowed) = match self {
                Brokers::All => (
                    "brokers",
                    "all".to_owned(),
                    "a cluster with a broker master registered (the name servers list none)",
                ),
                Brokers::Cluster(c) => (
                    "cluster",
                    c.clone(),
                    "a cluster the name servers list with a broker master",
                ),
                Brokers::Broker(b) => (
                    "broker",
                    b.clone(),
                    "a broker name or address the name servers list with a master",
                ),
            };
            return Err(Error::Config {
                option,
                value,
                allowed: allowed.into(),
            });
        }
        Ok(masters)
    }
}

/// A broker's master server, as the name servers list it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerMaster {
    /// The cluster the broker belongs to.
    pub cluster: String,
    /// The broker's name.
    pub broker_name: String,
    /// The master's address (`host:port`).
    pub addr: String,
}

/// mqadmin's calls, typed: create, update, list and delete topics; list and delete
/// subscription groups; read a broker's runtime figures and the cluster table.
///
/// Calls that change a topic or group everywhere take a [`Brokers`] selection and go to
/// each selected broker's master, as mqadmin's `-c`/`-b` do; the calls taking an `addr` ask
/// one server.
///
/// ```no_run
/// # async fn demo() -> rocketmq_actor::Result<()> {
/// use rocketmq_actor::admin::{Admin, Brokers, TopicConfig};
/// use rocketmq_actor::{Client, ClientConfig};
///
/// let admin = Admin::new(Client::start(ClientConfig::new("127.0.0.1:9876"))?);
/// let created = admin.create_topic(&Brokers::All, &TopicConfig::new("Orders", 8)).await?;
/// println!("Orders is on {} brokers", created.len());
/// assert!(admin.topic_list().await?.iter().any(|t| t == "Orders"));
/// admin.delete_topic(&Brokers::All, "Orders").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Admin {
    client: Client,
}

impl Admin {
    /// Admin calls over `client`'s connections (and its credentials, TLS and timeouts).
    pub fn new(client: Client) -> Self {
        Admin { client }
    }

    /// The client the calls go through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Sends `command` to the name servers in order until one answers; its failure code is
    /// an [`Error::Broker`], silence from all of them [`Error::NameServerUnavailable`].
    async fn ask_name_server(&self, command: RemotingCommand) -> Result<RemotingCommand> {
        let list = NameServerList::parse(self.client.namesrv_addr())?;
        let mut failures = NameServerFailures::default();
        for addr in list.addrs() {
            match self.client.invoke(addr, command.clone()).await {
                Ok(response) => return Ok(response),
                Err(e @ (Error::Broker { .. } | Error::AccessDenied { .. })) => return Err(e),
                Err(e) => failures.push(addr, e),
            }
        }
        Err(failures.into_error())
    }

    /// GET_BROKER_CLUSTER_INFO: every cluster, its brokers and their servers.
    pub async fn cluster_info(&self) -> Result<ClusterInfo> {
        let command = RemotingCommand::request(request_code::GET_BROKER_CLUSTER_INFO);
        let response = self.ask_name_server(command).await?;
        Ok(decode_json(response.body.as_deref().unwrap_or(b"{}"))?)
    }

    /// GET_ALL_TOPIC_LIST_FROM_NAMESERVER: every topic some broker registered, sorted —
    /// system topics (`%RETRY%…`, `TBW102`, the cluster's and brokers' own names, …) included.
    pub async fn topic_list(&self) -> Result<Vec<String>> {
        let command = RemotingCommand::request(request_code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER);
        let response = self.ask_name_server(command).await?;
        let mut topics =
            decode_json::<TopicList>(response.body.as_deref().unwrap_or(b"{}"))?.topic_list;
        topics.sort_unstable();
        topics.dedup();
        Ok(topics)
    }

    /// The masters of the selected brokers, sorted by broker name (GET_BROKER_CLUSTER_INFO,
    /// then [`Brokers::masters`]).
    pub async fn masters(&self, brokers: &Brokers) -> Result<Vec<BrokerMaster>> {
        brokers.masters(&self.cluster_info().await?)
    }

    /// UPDATE_AND_CREATE_TOPIC on one broker: creates the topic there, or replaces its
    /// queue counts, permission and order flag.
    pub async fn put_topic_config(&self, addr: &str, config: &TopicConfig) -> Result<()> {
        let header = UpdateTopicRequestHeader {
            topic: config.topic_name.clone(),
            default_topic: "TBW102".into(),
            read_queue_nums: config.read_queue_nums,
            write_queue_nums: config.write_queue_nums,
            perm: config.perm,
            topic_sys_flag: Some(config.topic_sys_flag),
            order: config.order,
            ..Default::default()
        };
        let command =
            RemotingCommand::request_with_header(request_code::UPDATE_AND_CREATE_TOPIC, &header);
        self.client.invoke(addr, command).await.map(drop)
    }

    /// Creates (or updates) the topic on the master of every selected broker, as mqadmin
    /// `updateTopic -c` does; returns those masters. The name servers list the topic once
    /// the brokers have re-registered (at once on the embedded broker and rocketmq-rust).
    pub async fn create_topic(
        &self,
        brokers: &Brokers,
        config: &TopicConfig,
    ) -> Result<Vec<BrokerMaster>> {
        let masters = self.masters(brokers).await?;
        for master in &masters {
            self.put_topic_config(&master.addr, config).await?;
        }
        Ok(masters)
    }

    /// GET_TOPIC_CONFIG: the topic's configuration on one broker, `None` when the broker does
    /// not have it. A broker without the call (4.x) is asked for all its topics instead.
    pub async fn topic_config(&self, addr: &str, topic: &str) -> Result<Option<TopicConfig>> {
        let header = GetTopicConfigRequestHeader {
            topic: topic.to_owned(),
        };
        let command = RemotingCommand::request_with_header(request_code::GET_TOPIC_CONFIG, &header);
        match self.client.invoke(addr, command).await {
            Ok(response) => Ok(Some(decode_json(
                response.body.as_deref().unwrap_or_default(),
            )?)),
            Err(e) if e.response_code() == Some(response_code::TOPIC_NOT_EXIST) => Ok(None),
            Err(e) if e.response_code() == Some(response_code::REQUEST_CODE_NOT_SUPPORTED) => {
                Ok(self.topic_configs(addr).await?.remove(topic))
            }
            Err(e) => Err(e),
        }
    }

    /// GET_ALL_TOPIC_CONFIG: every topic of one broker (system topics included), by name.
    pub async fn topic_configs(&self, addr: &str) -> Result<BTreeMap<String, TopicConfig>> {
        let command = RemotingCommand::request(request_code::GET_ALL_TOPIC_CONFIG);
        let response = self.client.invoke(addr, command).await?;
        Ok(
            decode_json::<TopicConfigTable>(response.body.as_deref().unwrap_or(b"{}"))?
                .topic_config_table,
        )
    }

    /// GET_TOPIC_STATS_INFO: each queue's stored range on one broker.
    pub async fn topic_stats(&self, addr: &str, topic: &str) -> Result<TopicStatsTable> {
        let header = GetTopicConfigRequestHeader {
            topic: topic.to_owned(),
        };
        let command =
            RemotingCommand::request_with_header(request_code::GET_TOPIC_STATS_INFO, &header);
        let response = self.client.invoke(addr, command).await?;
        Ok(decode_json(response.body.as_deref().unwrap_or(b"{}"))?)
    }

    /// Deletes the topic from the masters of the selected brokers (DELETE_TOPIC_IN_BROKER:
    /// its queues and configuration), then from the routes of every name server
    /// (DELETE_TOPIC_IN_NAMESRV), as mqadmin `deleteTopic` does; returns those masters.
    /// Deleting a topic a broker does not have is not an error.
    pub async fn delete_topic(&self, brokers: &Brokers, topic: &str) -> Result<Vec<BrokerMaster>> {
        let masters = self.masters(brokers).await?;
        for master in &masters {
            let header = DeleteTopicRequestHeader {
                topic: topic.to_owned(),
            };
            let command =
                RemotingCommand::request_with_header(request_code::DELETE_TOPIC_IN_BROKER, &header);
            self.client.invoke(&master.addr, command).await?;
        }
        let cluster_name = match brokers {
            Brokers::Cluster(cluster) => Some(cluster.clone()),
            // One broker: the name servers drop the route of the brokers that re-register
            // without the topic; the other brokers keep theirs.
            Brokers::Broker(_) => return Ok(masters),
            Brokers::All => None,
        };
        let header = DeleteTopicFromNamesrvRequestHeader {
            topic: topic.to_owned(),
            cluster_name,
        };
        let command =
            RemotingCommand::request_with_header(request_code::DELETE_TOPIC_IN_NAMESRV, &header);
        let list = NameServerList::parse(self.client.namesrv_addr())?;
        for addr in list.addrs() {
            self.client.invoke(addr, command.clone()).await?;
        }
        Ok(masters)
    }

    /// GET_ALL_SUBSCRIPTIONGROUP_CONFIG: every consumer group one broker knows (created by a
    /// member's heartbeat, or by an admin), system groups included, by name.
    pub async fn subscription_groups(
        &self,
        addr: &str,
    ) -> Result<BTreeMap<String, SubscriptionGroupConfig>> {
        let command = RemotingCommand::request(request_code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG);
        let response = self.client.invoke(addr, command).await?;
        Ok(
            decode_json::<SubscriptionGroupTable>(response.body.as_deref().unwrap_or(b"{}"))?
                .subscription_group_table,
        )
    }

    /// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP on one broker.
    pub async fn put_subscription_group(
        &self,
        addr: &str,
        config: &SubscriptionGroupConfig,
    ) -> Result<()> {
        let command = RemotingCommand::request(request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
            .with_body(encode_json(config));
        self.client.invoke(addr, command).await.map(drop)
    }

    /// Deletes the consumer group from the masters of the selected brokers
    /// (DELETE_SUBSCRIPTIONGROUP), with its committed offsets when `clean_offset`; returns
    /// those masters. A member still running creates the group again with its next
    /// heartbeat, as on a Java broker. The group's retry and dead-letter topics are kept.
    pub async fn delete_group(
        &self,
        brokers: &Brokers,
        group: &str,
        clean_offset: bool,
    ) -> Result<Vec<BrokerMaster>> {
        let masters = self.masters(brokers).await?;
        for master in &masters {
            let header = DeleteSubscriptionGroupRequestHeader {
                group_name: group.to_owned(),
                clean_offset,
            };
            let command = RemotingCommand::request_with_header(
                request_code::DELETE_SUBSCRIPTIONGROUP,
                &header,
            );
            self.client.invoke(&master.addr, command).await?;
        }
        Ok(masters)
    }

    /// GET_BROKER_RUNTIME_INFO: one server's runtime figures. Java and rocketmq-rust brokers
    /// fill different keys (`brokerVersionDesc`, `msgPutTotalTodayNow`, `putTps`, … on both;
    /// the embedded broker a subset), all as text.
    pub async fn broker_runtime_info(&self, addr: &str) -> Result<BTreeMap<String, String>> {
        let command = RemotingCommand::request(request_code::GET_BROKER_RUNTIME_INFO);
        let response = self.client.invoke(addr, command).await?;
        Ok(decode_json::<KvTable>(response.body.as_deref().unwrap_or(b"{}"))?.table)
    }
}
