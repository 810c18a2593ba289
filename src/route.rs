//! Topic routes turned into the queue sets consumers and producers use, and name-server failover.
//!
//! Pure functions over [`TopicRouteData`]: which queues a consumer may read, which queues a producer
//! may write, which broker address serves a queue. The client actor keeps the cache; this module
//! only computes.

use crate::message::MessageQueue;
use crate::protocol::body::{BrokerData, TopicRouteData};

/// A route with its derived queue sets, computed once per route refresh.
#[derive(Debug, Clone)]
pub struct TopicRoute {
    /// The topic the route describes.
    pub topic: String,
    /// The route as the name server sent it.
    pub data: TopicRouteData,
    /// Read queues of readable brokers, sorted: what consumers rebalance over.
    pub consume_queues: Vec<MessageQueue>,
    /// Write queues of writable brokers that have a master: what producers send to.
    pub produce_queues: Vec<MessageQueue>,
}

impl TopicRoute {
    /// Derives the queue sets of `data` for `topic`.
    ///
    /// ```
    /// use rocketmq_actor::route::TopicRoute;
    /// use rocketmq_actor::protocol::body::TopicRouteData;
    /// let json = br#"{"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":2,
    ///   "writeQueueNums":2,"topicSysFlag":0}],"brokerDatas":[{"cluster":"c","brokerName":"broker-a",
    ///   "brokerAddrs":{"0":"127.0.0.1:10911"}}]}"#;
    /// let data: TopicRouteData = rocketmq_actor::protocol::body::decode_json(json).unwrap();
    /// let route = TopicRoute::new("T", data);
    /// assert_eq!(route.consume_queues.len(), 2);
    /// assert_eq!(route.master_addr("broker-a"), Some("127.0.0.1:10911"));
    /// ```
    pub fn new(topic: impl Into<String>, data: TopicRouteData) -> Self {
        let topic = topic.into();
        let consume_queues = consume_queues(&topic, &data);
        let produce_queues = produce_queues(&topic, &data);
        TopicRoute {
            topic,
            data,
            consume_queues,
            produce_queues,
        }
    }

    /// The master address of `broker_name`, where offsets, sends and locks go.
    pub fn master_addr(&self, broker_name: &str) -> Option<&str> {
        broker_data(&self.data, broker_name)?.master_addr()
    }

    /// The address to pull from: the suggested broker id if known, else the next slave id, else
    /// the master, else any.
    pub fn pull_addr(&self, broker_name: &str, suggested_id: i64) -> Option<&str> {
        broker_data(&self.data, broker_name)?.select_addr(suggested_id)
    }

    /// Every broker address (masters and slaves) of the route: the heartbeat targets.
    pub fn all_addrs(&self) -> impl Iterator<Item = &str> {
        self.data
            .broker_datas
            .iter()
            .flat_map(|b| b.broker_addrs.values().map(String::as_str))
    }
}

/// The most queues a route may give one broker, for reading or for writing. RocketMQ topics
/// have a handful to a few hundred queues per broker; a route past this is malformed (or
/// hostile), and expanding it would take memory without bound (a million queues took 590 MB).
pub const MAX_QUEUES_PER_BROKER: i32 = 65_536;

/// The most queues a whole route may hold, summed over its brokers and over read and write
/// queues: many brokers each just under [`MAX_QUEUES_PER_BROKER`] are refused as well.
pub const MAX_QUEUES_PER_ROUTE: i64 = 262_144;

/// Checks a route before it is used: every broker's queue counts within
/// [`MAX_QUEUES_PER_BROKER`], the route's total within [`MAX_QUEUES_PER_ROUTE`].
///
/// ```
/// use rocketmq_actor::route::check_route;
/// use rocketmq_actor::protocol::body::TopicRouteData;
/// let json = br#"{"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":1000000,
///   "writeQueueNums":8,"topicSysFlag":0}],"brokerDatas":[]}"#;
/// let data: TopicRouteData = rocketmq_actor::protocol::body::decode_json(json).unwrap();
/// assert!(check_route(&data).unwrap_err().contains("1000000 read queues"));
/// ```
pub fn check_route(data: &TopicRouteData) -> Result<(), String> {
    let mut total: i64 = 0;
    for queue in &data.queue_datas {
        total += i64::from(queue.read_queue_nums.max(0)) + i64::from(queue.write_queue_nums.max(0));
        for (count, kind) in [
            (queue.read_queue_nums, "read"),
            (queue.write_queue_nums, "write"),
        ] {
            if count > MAX_QUEUES_PER_BROKER {
                return Err(format!(
                    "broker {} has {count} {kind} queues (at most {MAX_QUEUES_PER_BROKER} accepted)",
                    queue.broker_name
                ));
            }
        }
    }
    if total > MAX_QUEUES_PER_ROUTE {
        return Err(format!(
            "{} brokers hold {total} queues in all (at most {MAX_QUEUES_PER_ROUTE} accepted)",
            data.queue_datas.len()
        ));
    }
    Ok(())
}

fn broker_data<'a>(data: &'a TopicRouteData, broker_name: &str) -> Option<&'a BrokerData> {
    data.broker_datas
        .iter()
        .find(|b| b.broker_name == broker_name)
}

/// The consume queue set: queue ids `0..readQueueNums` of each readable broker, sorted by
/// (topic, broker name, queue id) as Java sorts them before allocation.
pub(crate) fn consume_queues(topic: &str, data: &TopicRouteData) -> Vec<MessageQueue> {
    let mut queues: Vec<MessageQueue> = data
        .queue_datas
        .iter()
        .filter(|q| q.is_readable())
        .flat_map(|q| {
            (0..q.read_queue_nums.max(0))
                .map(move |id| MessageQueue::new(topic, &q.broker_name, id))
        })
        .collect();
    queues.sort();
    queues.dedup();
    queues
}

/// The produce queue set: queue ids `0..writeQueueNums` of each writable broker that has a master.
pub(crate) fn produce_queues(topic: &str, data: &TopicRouteData) -> Vec<MessageQueue> {
    let mut queues: Vec<MessageQueue> = data
        .queue_datas
        .iter()
        .filter(|q| q.is_writable())
        .filter(|q| broker_data(data, &q.broker_name).is_some_and(|b| b.master_addr().is_some()))
        .flat_map(|q| {
            (0..q.write_queue_nums.max(0))
                .map(move |id| MessageQueue::new(topic, &q.broker_name, id))
        })
        .collect();
    queues.sort();
    queues.dedup();
    queues
}

/// Name-server addresses with failover: requests go to the last one that answered, and on
/// failure to the next ones in turn.
///
/// ```
/// use rocketmq_actor::route::NameServerList;
/// let mut list = NameServerList::parse("127.0.0.1:9876;127.0.0.1:9877").unwrap();
/// assert_eq!(list.try_order(), vec!["127.0.0.1:9876", "127.0.0.1:9877"]);
/// list.mark_good("127.0.0.1:9877");
/// assert_eq!(list.try_order()[0], "127.0.0.1:9877");
/// ```
#[derive(Debug, Clone)]
pub struct NameServerList {
    addrs: Vec<String>,
    preferred: usize,
}

impl NameServerList {
    /// Parses a `;`- or `,`-separated list of `host:port` addresses.
    pub fn parse(list: &str) -> crate::Result<Self> {
        let addrs: Vec<String> = list
            .split([';', ','])
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        if addrs.is_empty() {
            return Err(crate::Error::Config {
                option: "namesrv_addr",
                value: format!("{list:?}"),
                allowed: "one or more host:port addresses separated by ';'".into(),
            });
        }
        for addr in &addrs {
            let valid = addr
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !valid {
                return Err(crate::Error::Config {
                    option: "namesrv_addr",
                    value: addr.clone(),
                    allowed: "host:port".into(),
                });
            }
        }
        Ok(NameServerList {
            addrs,
            preferred: 0,
        })
    }

    /// The addresses in the order to try them: the preferred one first, then the others in turn.
    pub fn try_order(&self) -> Vec<&str> {
        let n = self.addrs.len();
        (0..n)
            .map(|i| self.addrs[(self.preferred + i) % n].as_str())
            .collect()
    }

    /// Remembers that `addr` answered, so it is tried first next time.
    pub fn mark_good(&mut self, addr: &str) {
        if let Some(i) = self.addrs.iter().position(|a| a == addr) {
            self.preferred = i;
        }
    }

    /// All configured addresses.
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::body::decode_json;

    fn route(json: &str) -> TopicRouteData {
        decode_json(json.as_bytes()).unwrap()
    }

    const TWO_BROKERS: &str = r#"{"queueDatas":[
        {"brokerName":"broker-b","perm":6,"readQueueNums":2,"writeQueueNums":3,"topicSysFlag":0},
        {"brokerName":"broker-a","perm":4,"readQueueNums":3,"writeQueueNums":3,"topicSysFlag":0}],
      "brokerDatas":[
        {"cluster":"c","brokerName":"broker-a","brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"}},
        {"cluster":"c","brokerName":"broker-b","brokerAddrs":{"1":"10.0.0.4:10911"}}]}"#;

    #[test]
    fn routes_past_the_queue_bounds_are_refused_and_ordinary_ones_pass() {
        assert_eq!(check_route(&route(TWO_BROKERS)), Ok(()));
        let entry = r#"{"brokerName":"b","perm":6,"readQueueNums":60000,"writeQueueNums":60000,"topicSysFlag":0}"#;
        let entries = [entry; 3].join(",");
        let many = route(&format!(r#"{{"queueDatas":[{entries}],"brokerDatas":[]}}"#));
        let refused = check_route(&many).unwrap_err();
        assert!(refused.contains("360000 queues in all"), "{refused}");
        let one = route(&format!(r#"{{"queueDatas":[{entry}],"brokerDatas":[]}}"#));
        assert_eq!(check_route(&one), Ok(()));
    }

    #[test]
    fn consume_queues_cover_read_queues_of_readable_brokers_sorted() {
        let queues = consume_queues("T", &route(TWO_BROKERS));
        let names: Vec<(String, i32)> = queues
            .iter()
            .map(|q| (q.broker_name.clone(), q.queue_id))
            .collect();
        assert_eq!(
            names,
            vec![
                ("broker-a".into(), 0),
                ("broker-a".into(), 1),
                ("broker-a".into(), 2),
                ("broker-b".into(), 0),
                ("broker-b".into(), 1)
            ]
        );
    }

    #[test]
    fn produce_queues_skip_read_only_brokers_and_brokers_without_master() {
        // broker-a is read-only (perm 4), broker-b has only a slave: nothing is writable.
        assert!(produce_queues("T", &route(TWO_BROKERS)).is_empty());
        let writable = TWO_BROKERS
            .replace(r#""perm":4"#, r#""perm":6"#)
            .replace(r#"{"1":"10.0.0.4:10911"}"#, r#"{"0":"10.0.0.3:10911"}"#);
        let queues = produce_queues("T", &route(&writable));
        assert_eq!(queues.len(), 6, "3 write queues on each of two brokers");
    }

    #[test]
    fn pull_addr_falls_back_from_suggested_to_master_to_any() {
        let r = TopicRoute::new("T", route(TWO_BROKERS));
        assert_eq!(r.pull_addr("broker-a", 1), Some("10.0.0.2:10911"));
        assert_eq!(r.pull_addr("broker-a", 7), Some("10.0.0.1:10911"));
        assert_eq!(r.pull_addr("broker-b", 0), Some("10.0.0.4:10911"));
        assert_eq!(r.master_addr("broker-b"), None);
        assert_eq!(r.pull_addr("broker-z", 0), None);
        assert_eq!(r.all_addrs().count(), 3);
    }

    #[test]
    fn legacy_unquoted_broker_ids_are_understood() {
        let legacy = TWO_BROKERS
            .replace(r#""0":"#, "0:")
            .replace(r#""1":"#, "1:");
        let r = TopicRoute::new("T", route(&legacy));
        assert_eq!(r.master_addr("broker-a"), Some("10.0.0.1:10911"));
    }

    #[test]
    fn name_server_list_rejects_bad_addresses_and_fails_over() {
        assert!(NameServerList::parse("").is_err());
        assert!(NameServerList::parse("localhost").is_err());
        assert!(NameServerList::parse("a:99999").is_err());
        let mut list = NameServerList::parse("a:1; b:2 ,c:3").unwrap();
        list.mark_good("c:3");
        assert_eq!(list.try_order(), vec!["c:3", "a:1", "b:2"]);
        list.mark_good("unknown:1");
        assert_eq!(list.try_order()[0], "c:3");
    }
}
