//! The name server's sans-I/O core: route data from the registered brokers.

use super::store::{perm, TopicConfig};
use super::{header_failure, Failure};
use crate::protocol::body::{encode_json, BrokerData, ClusterInfo, QueueData, TopicRouteData};
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::header::{DeleteTopicFromNamesrvRequestHeader, GetRouteInfoRequestHeader};
use crate::protocol::RemotingCommand;
use std::collections::BTreeMap;

/// `MQVersion.V4_9_4`: from this client version on, route data uses standard JSON.
const VERSION_STANDARD_JSON: i32 = 401;

/// What a broker registers with the name server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerRegistration {
    /// `brokerClusterName`.
    pub cluster_name: String,
    /// `brokerName`.
    pub broker_name: String,
    /// 0 = master.
    pub broker_id: i64,
    /// `host:port` clients connect to.
    pub addr: String,
    /// Its topics.
    pub topics: Vec<TopicConfig>,
}

/// Request codes a name server answers (everything else belongs to a broker).
pub fn is_name_server_code(code: i32) -> bool {
    matches!(
        code,
        request_code::GET_ROUTEINFO_BY_TOPIC
            | request_code::GET_BROKER_CLUSTER_INFO
            | request_code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER
            | request_code::DELETE_TOPIC_IN_NAMESRV
    )
}

/// The name server's view of the brokers.
#[derive(Clone, Debug, Default)]
pub struct NameServerCore {
    brokers: BTreeMap<String, BrokerRegistration>,
}

/// Rewrites `"brokerAddrs":{"0":` style keys into fastjson's legacy unquoted form.
fn legacy_broker_addrs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let marker = "\"brokerAddrs\":{";
    while let Some(pos) = rest.find(marker) {
        let (head, tail) = rest.split_at(pos + marker.len());
        out.push_str(head);
        // Inside the map, unquote keys that are all digits: `"0":` → `0:`.
        let end = tail.find('}').unwrap_or(tail.len());
        let (map, after) = tail.split_at(end);
        let mut chars = String::new();
        for entry in map.split(',') {
            if !chars.is_empty() {
                chars.push(',');
            }
            match entry.split_once(':') {
                Some((key, value))
                    if key.len() > 2
                        && key.starts_with('"')
                        && key.ends_with('"')
                        && key[1..key.len() - 1].chars().all(|c| c.is_ascii_digit()) =>
                {
                    chars.push_str(&key[1..key.len() - 1]);
                    chars.push(':');
                    chars.push_str(value);
                }
                _ => chars.push_str(entry),
            }
        }
        out.push_str(&chars);
        rest = after;
    }
    out.push_str(rest);
    out
}

impl NameServerCore {
    /// Registers (or replaces) a broker and its topics.
    pub fn register(&mut self, registration: BrokerRegistration) {
        self.brokers
            .insert(registration.broker_name.clone(), registration);
    }

    /// Drops a topic from the routes of every broker, or of one cluster's brokers
    /// (DELETE_TOPIC_IN_NAMESRV); a broker that still has it lists it again when it next
    /// registers.
    pub fn delete_topic(&mut self, topic: &str, cluster: Option<&str>) {
        for broker in self.brokers.values_mut() {
            if cluster.is_none_or(|c| c == broker.cluster_name) {
                broker.topics.retain(|t| t.topic_name != topic);
            }
        }
    }

    /// Removes a broker (graceful shutdown).
    pub fn unregister(&mut self, broker_name: &str) {
        self.brokers.remove(broker_name);
    }

    /// Registered brokers by name.
    pub fn brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values()
    }

    fn broker_data(b: &BrokerRegistration) -> BrokerData {
        BrokerData {
            cluster: b.cluster_name.clone(),
            broker_name: b.broker_name.clone(),
            broker_addrs: BTreeMap::from([(b.broker_id, b.addr.clone())]),
            zone_name: None,
            enable_acting_master: false,
        }
    }

    /// The route of a topic, `None` when no broker has it.
    pub fn route(&self, topic: &str) -> Option<TopicRouteData> {
        let mut route = TopicRouteData::default();
        let mut order_conf = Vec::new();
        for b in self.brokers.values() {
            let Some(t) = b.topics.iter().find(|t| t.topic_name == topic) else {
                continue;
            };
            route.queue_datas.push(QueueData {
                broker_name: b.broker_name.clone(),
                read_queue_nums: t.read_queue_nums,
                write_queue_nums: t.write_queue_nums,
                perm: t.perm & (perm::READ | perm::WRITE | perm::INHERIT | perm::PRIORITY),
                topic_sys_flag: t.topic_sys_flag,
            });
            if t.order {
                order_conf.push(format!("{}:{}", b.broker_name, t.write_queue_nums));
            }
            route.broker_datas.push(Self::broker_data(b));
        }
        if route.queue_datas.is_empty() {
            return None;
        }
        if !order_conf.is_empty() {
            route.order_topic_conf = Some(order_conf.join(";"));
        }
        Some(route)
    }

    fn route_response(
        &self,
        request: &RemotingCommand,
        encode: impl Fn(bytes::Bytes) -> bytes::Bytes,
    ) -> Result<RemotingCommand, Failure> {
        let header: GetRouteInfoRequestHeader = request.decode_header().map_err(header_failure)?;
        let topic = header.topic;
        match self.route(&topic) {
            Some(route) => Ok(
                RemotingCommand::response_to(request, response_code::SUCCESS, None)
                    .with_body(encode(encode_json(&route))),
            ),
            None => Err(Failure::new(
                response_code::TOPIC_NOT_EXIST,
                format!(
                    "No topic route info in name server for the topic: {topic}{}",
                    super::send::FAQ_SUFFIX
                ),
            )),
        }
    }

    /// Answers a name-server request; `None` for oneway requests.
    pub fn handle(&mut self, request: &RemotingCommand) -> Option<RemotingCommand> {
        let standard_json = request.version >= VERSION_STANDARD_JSON
            || request
                .ext("acceptStandardJsonOnly")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        // Old clients parse route data with fastjson, which wrote broker ids as bare numbers.
        let encode = |json: bytes::Bytes| {
            if standard_json {
                return json;
            }
            let text = String::from_utf8_lossy(&json);
            bytes::Bytes::from(legacy_broker_addrs(&text))
        };
        let response = match request.code {
            request_code::GET_ROUTEINFO_BY_TOPIC => self
                .route_response(request, encode)
                .unwrap_or_else(|f| RemotingCommand::response_to(request, f.code, Some(f.remark))),
            request_code::GET_BROKER_CLUSTER_INFO => {
                let mut info = ClusterInfo::default();
                for b in self.brokers.values() {
                    info.broker_addr_table
                        .insert(b.broker_name.clone(), Self::broker_data(b));
                    info.cluster_addr_table
                        .entry(b.cluster_name.clone())
                        .or_default()
                        .push(b.broker_name.clone());
                }
                RemotingCommand::response_to(request, response_code::SUCCESS, None)
                    .with_body(encode(encode_json(&info)))
            }
            request_code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => {
                let mut topics: Vec<&str> = self
                    .brokers
                    .values()
                    .flat_map(|b| b.topics.iter().map(|t| t.topic_name.as_str()))
                    .collect();
                topics.sort_unstable();
                topics.dedup();
                let body = serde_json::json!({ "topicList": topics });
                RemotingCommand::response_to(request, response_code::SUCCESS, None)
                    .with_body(encode_json(&body))
            }
            request_code::DELETE_TOPIC_IN_NAMESRV => {
                match request.decode_header::<DeleteTopicFromNamesrvRequestHeader>() {
                    Ok(header) => {
                        self.delete_topic(&header.topic, header.cluster_name.as_deref());
                        RemotingCommand::response_to(request, response_code::SUCCESS, None)
                    }
                    Err(e) => {
                        let failure = header_failure(e);
                        RemotingCommand::response_to(request, failure.code, Some(failure.remark))
                    }
                }
            }
            code => RemotingCommand::response_to(
                request,
                response_code::REQUEST_CODE_NOT_SUPPORTED,
                Some(format!(" request type {code} not supported")),
            ),
        };
        (!request.is_oneway()).then_some(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::{json, Value};

    fn two_brokers() -> NameServerCore {
        let mut ns = NameServerCore::default();
        for (name, port) in [("broker-a", 10911), ("broker-b", 10921)] {
            ns.register(BrokerRegistration {
                cluster_name: "DefaultCluster".into(),
                broker_name: name.into(),
                broker_id: 0,
                addr: format!("127.0.0.1:{port}"),
                topics: vec![TopicConfig::new("T", 4)],
            });
        }
        ns
    }

    fn route_request(version: i32) -> RemotingCommand {
        let mut r = RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC)
            .with_ext("topic", "T")
            .with_opaque(3);
        r.version = version;
        r
    }

    #[test]
    fn route_lists_every_broker_with_quoted_ids_for_new_clients() {
        let mut ns = two_brokers();
        let resp = ns.handle(&route_request(479)).unwrap();
        assert_eq!((resp.code, resp.opaque), (0, 3));
        let route: Value = serde_json::from_slice(resp.body.as_deref().unwrap()).unwrap();
        assert_eq!(route["queueDatas"].as_array().unwrap().len(), 2);
        assert_eq!(route["queueDatas"][0]["perm"], 6);
        assert_eq!(
            route["brokerDatas"][1]["brokerAddrs"]["0"],
            "127.0.0.1:10921"
        );
        assert_eq!(route["filterServerTable"], json!({}));
    }

    #[test]
    fn old_clients_get_fastjson_unquoted_keys() {
        let mut ns = two_brokers();
        let resp = ns.handle(&route_request(400)).unwrap();
        let text = std::str::from_utf8(resp.body.as_deref().unwrap()).unwrap();
        assert!(
            text.contains("\"brokerAddrs\":{0:\"127.0.0.1:10911\"}"),
            "{text}"
        );
        let forced = route_request(400).with_ext("acceptStandardJsonOnly", "true");
        let resp = ns.handle(&forced).unwrap();
        let text = std::str::from_utf8(resp.body.as_deref().unwrap()).unwrap();
        assert!(text.contains("{\"0\":"));
    }

    #[test]
    fn unknown_topic_and_unknown_code() {
        let mut ns = two_brokers();
        let req =
            RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC).with_ext("topic", "X");
        assert_eq!(
            ns.handle(&req).unwrap().code,
            response_code::TOPIC_NOT_EXIST
        );
        let req = RemotingCommand::request(999);
        let resp = ns.handle(&req).unwrap();
        assert_eq!(resp.code, response_code::REQUEST_CODE_NOT_SUPPORTED);
        assert_eq!(
            resp.remark.as_deref(),
            Some(" request type 999 not supported")
        );
        let mut oneway = RemotingCommand::request(999);
        oneway.mark_oneway();
        assert!(ns.handle(&oneway).is_none());
    }

    #[test]
    fn cluster_info_groups_brokers_by_cluster() {
        let mut ns = two_brokers();
        let mut req = RemotingCommand::request(request_code::GET_BROKER_CLUSTER_INFO);
        req.version = 479;
        let resp = ns.handle(&req).unwrap();
        let info: Value = serde_json::from_slice(resp.body.as_deref().unwrap()).unwrap();
        assert_eq!(
            info["clusterAddrTable"]["DefaultCluster"],
            json!(["broker-a", "broker-b"])
        );
    }
}
