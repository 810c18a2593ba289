//! The identity of one queue of a topic on one broker.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One queue of a topic on one broker: the unit of rebalancing, pulling and offsets.
///
/// Ordering is by (topic, broker name, queue id), the order Java sorts queues in before
/// allocating them.
///
/// ```
/// use rocketmq_actor::MessageQueue;
/// let mq = MessageQueue::new("TopicTest", "broker-a", 3);
/// assert_eq!(mq.to_string(), "MessageQueue [topic=TopicTest, brokerName=broker-a, queueId=3]");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueue {
    /// Topic name.
    pub topic: String,
    /// Name of the broker (master/slave set) holding the queue.
    pub broker_name: String,
    /// Queue index on that broker.
    pub queue_id: i32,
}

impl MessageQueue {
    /// Builds a queue identity.
    pub fn new(topic: impl Into<String>, broker_name: impl Into<String>, queue_id: i32) -> Self {
        MessageQueue {
            topic: topic.into(),
            broker_name: broker_name.into(),
            queue_id,
        }
    }
}

impl fmt::Display for MessageQueue {
    /// Java's `MessageQueue.toString()`, also the key the consistent-hash allocation hashes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MessageQueue [topic={}, brokerName={}, queueId={}]",
            self.topic, self.broker_name, self.queue_id
        )
    }
}
