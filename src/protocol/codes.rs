//! Request and response code numbers of the RocketMQ remoting protocol (protocol.md §2.2, §2.3).

/// Request codes: the `code` of a command whose RESPONSE flag bit is clear.
pub mod request_code {
    /// Send one message, V1 header with long key names.
    pub const SEND_MESSAGE: i32 = 10;
    /// Pull messages from a queue (long polling).
    pub const PULL_MESSAGE: i32 = 11;
    /// Query messages by key.
    pub const QUERY_MESSAGE: i32 = 12;
    /// Ask the broker for a group's committed offset of a queue.
    pub const QUERY_CONSUMER_OFFSET: i32 = 14;
    /// Commit a group's consume offset of a queue.
    pub const UPDATE_CONSUMER_OFFSET: i32 = 15;
    /// Create or update a topic on a broker (admin).
    pub const UPDATE_AND_CREATE_TOPIC: i32 = 17;
    /// Every topic configuration of a broker (admin).
    pub const GET_ALL_TOPIC_CONFIG: i32 = 21;
    /// A broker's runtime figures as a key-value table (admin).
    pub const GET_BROKER_RUNTIME_INFO: i32 = 28;
    /// Find the offset of the first message stored at or after a timestamp.
    pub const SEARCH_OFFSET_BY_TIMESTAMP: i32 = 29;
    /// Max logical offset of a queue (one past the last message).
    pub const GET_MAX_OFFSET: i32 = 30;
    /// Min logical offset of a queue.
    pub const GET_MIN_OFFSET: i32 = 31;
    /// Store timestamp of the earliest message of a queue.
    pub const GET_EARLIEST_MSG_STORETIME: i32 = 32;
    /// Look a message up by its offset message id.
    pub const VIEW_MESSAGE_BY_ID: i32 = 33;
    /// Client heartbeat carrying producer/consumer registrations.
    pub const HEART_BEAT: i32 = 34;
    /// Client leaves a producer and/or consumer group.
    pub const UNREGISTER_CLIENT: i32 = 35;
    /// Consumer hands a failed message back for retry.
    pub const CONSUMER_SEND_MSG_BACK: i32 = 36;
    /// Commit or roll back a transactional half message.
    pub const END_TRANSACTION: i32 = 37;
    /// List the client ids of a consumer group.
    pub const GET_CONSUMER_LIST_BY_GROUP: i32 = 38;
    /// Broker asks a producer for a transaction's state (oneway).
    pub const CHECK_TRANSACTION_STATE: i32 = 39;
    /// Broker tells a consumer its group membership changed (oneway).
    pub const NOTIFY_CONSUMER_IDS_CHANGED: i32 = 40;
    /// Lock queues for orderly consumption.
    pub const LOCK_BATCH_MQ: i32 = 41;
    /// Unlock queues held for orderly consumption.
    pub const UNLOCK_BATCH_MQ: i32 = 42;
    /// Ask a broker whether it accepts a subscription (SQL92 needs property filtering).
    pub const CHECK_CLIENT_CONFIG: i32 = 46;
    /// Topic route from the name server.
    pub const GET_ROUTEINFO_BY_TOPIC: i32 = 105;
    /// Cluster and broker table from the name server.
    pub const GET_BROKER_CLUSTER_INFO: i32 = 106;
    /// Create or update a subscription group (admin).
    pub const UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: i32 = 200;
    /// Every subscription group configuration of a broker (admin).
    pub const GET_ALL_SUBSCRIPTIONGROUP_CONFIG: i32 = 201;
    /// The stored offset range of each queue of a topic on a broker (admin).
    pub const GET_TOPIC_STATS_INFO: i32 = 202;
    /// A consumer group's connected clients and subscriptions (admin).
    pub const GET_CONSUMER_CONNECTION_LIST: i32 = 203;
    /// Every topic the name server knows (admin).
    pub const GET_ALL_TOPIC_LIST_FROM_NAMESERVER: i32 = 206;
    /// Delete a subscription group from a broker (admin).
    pub const DELETE_SUBSCRIPTIONGROUP: i32 = 207;
    /// Delete a topic from a broker (admin).
    pub const DELETE_TOPIC_IN_BROKER: i32 = 215;
    /// Delete a topic from the name server's routes (admin).
    pub const DELETE_TOPIC_IN_NAMESRV: i32 = 216;
    /// Broker tells a consumer to reset its offsets (oneway).
    pub const RESET_CONSUMER_CLIENT_OFFSET: i32 = 220;
    /// Broker asks a consumer for its offsets (deprecated).
    pub const GET_CONSUMER_STATUS_FROM_CLIENT: i32 = 221;
    /// Admin asks a broker to reset a group's offsets by time (the broker then sends
    /// RESET_CONSUMER_CLIENT_OFFSET to the group's live clients).
    pub const INVOKE_BROKER_TO_RESET_OFFSET: i32 = 222;
    /// Broker/admin asks a consumer for its running state.
    pub const GET_CONSUMER_RUNNING_INFO: i32 = 307;
    /// Broker/admin asks a consumer to consume one given message now.
    pub const CONSUME_MESSAGE_DIRECTLY: i32 = 309;
    /// Send one message, V2 header with one-letter keys.
    pub const SEND_MESSAGE_V2: i32 = 310;
    /// Send a batch of messages (V2 header, batch body).
    pub const SEND_BATCH_MESSAGE: i32 = 320;
    /// Broker pushes a reply message to a request/reply producer.
    pub const PUSH_REPLY_MESSAGE_TO_CLIENT: i32 = 326;
    /// One topic's configuration on a broker (admin, 5.x).
    pub const GET_TOPIC_CONFIG: i32 = 351;
    /// Lite pull consumer pull (same header as PULL_MESSAGE).
    pub const LITE_PULL_MESSAGE: i32 = 361;
    /// 5.x server-side rebalance assignment query.
    pub const QUERY_ASSIGNMENT: i32 = 400;
    /// POP consumption: pop messages.
    pub const POP_MESSAGE: i32 = 200050;
    /// POP consumption: acknowledge.
    pub const ACK_MESSAGE: i32 = 200051;
    /// POP consumption: peek.
    pub const PEEK_MESSAGE: i32 = 200052;
    /// POP consumption: change invisible time.
    pub const CHANGE_MESSAGE_INVISIBLETIME: i32 = 200053;
}

/// Response codes: the `code` of a command whose RESPONSE flag bit is set.
pub mod response_code {
    /// The request succeeded.
    pub const SUCCESS: i32 = 0;
    /// The processor failed; the remark says why.
    pub const SYSTEM_ERROR: i32 = 1;
    /// The peer is overloaded; retry later.
    pub const SYSTEM_BUSY: i32 = 2;
    /// The peer has no processor for the request code.
    pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
    /// A transaction failed.
    pub const TRANSACTION_FAILED: i32 = 4;
    /// Stored, but the disk flush timed out.
    pub const FLUSH_DISK_TIMEOUT: i32 = 10;
    /// Stored, but the slave is unavailable.
    pub const SLAVE_NOT_AVAILABLE: i32 = 11;
    /// Stored, but the slave did not confirm in time.
    pub const FLUSH_SLAVE_TIMEOUT: i32 = 12;
    /// The message is malformed or too large.
    pub const MESSAGE_ILLEGAL: i32 = 13;
    /// The service is shutting down or not permitted.
    pub const SERVICE_NOT_AVAILABLE: i32 = 14;
    /// The request's version is not supported.
    pub const VERSION_NOT_SUPPORTED: i32 = 15;
    /// No permission for the operation (see `forbiddenType`).
    pub const NO_PERMISSION: i32 = 16;
    /// The topic does not exist.
    pub const TOPIC_NOT_EXIST: i32 = 17;
    /// The topic already exists.
    pub const TOPIC_EXIST_ALREADY: i32 = 18;
    /// Pull: no new message (after long polling).
    pub const PULL_NOT_FOUND: i32 = 19;
    /// Pull: everything in the scanned range was filtered out.
    pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
    /// Pull: offset illegal or reset server-side; adopt `nextBeginOffset`.
    pub const PULL_OFFSET_MOVED: i32 = 21;
    /// Query: nothing found (e.g. no committed offset).
    pub const QUERY_NOT_FOUND: i32 = 22;
    /// The subscription expression does not parse.
    pub const SUBSCRIPTION_PARSE_FAILED: i32 = 23;
    /// No subscription registered for the group/topic.
    pub const SUBSCRIPTION_NOT_EXIST: i32 = 24;
    /// The registered subscription is older than the request's.
    pub const SUBSCRIPTION_NOT_LATEST: i32 = 25;
    /// The subscription group does not exist.
    pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;
    /// SQL92 filter data missing.
    pub const FILTER_DATA_NOT_EXIST: i32 = 27;
    /// SQL92 filter data older than the request.
    pub const FILTER_DATA_NOT_LATEST: i32 = 28;
    /// A request parameter is invalid.
    pub const INVALID_PARAMETER: i32 = 29;
    /// Transaction check answer: commit.
    pub const TRANSACTION_SHOULD_COMMIT: i32 = 200;
    /// Transaction check answer: roll back.
    pub const TRANSACTION_SHOULD_ROLLBACK: i32 = 201;
    /// Transaction check answer: unknown (sic).
    pub const TRANSACTION_STATE_UNKNOW: i32 = 202;
    /// Transaction check: wrong producer group.
    pub const TRANSACTION_STATE_GROUP_WRONG: i32 = 203;
    /// Legacy: no buyer id.
    pub const NO_BUYER_ID: i32 = 204;
    /// Legacy: not in the current unit.
    pub const NOT_IN_CURRENT_UNIT: i32 = 205;
    /// The target consumer is not online.
    pub const CONSUMER_NOT_ONLINE: i32 = 206;
    /// Consuming the message directly timed out.
    pub const CONSUME_MSG_TIMEOUT: i32 = 207;
    /// POP: no message.
    pub const NO_MESSAGE: i32 = 208;
    /// POP: too many waiting polls.
    pub const POLLING_FULL: i32 = 209;
    /// POP: poll timed out.
    pub const POLLING_TIMEOUT: i32 = 210;
    /// The broker does not exist.
    pub const BROKER_NOT_EXIST: i32 = 211;
    /// Dispatch to consume queues not finished.
    pub const BROKER_DISPATCH_NOT_COMPLETE: i32 = 212;
    /// The operation is not allowed for broadcasting consumption.
    pub const BROADCAST_CONSUMPTION: i32 = 213;
    /// Flow control triggered.
    pub const FLOW_CONTROL: i32 = 215;
    /// Not the leader of the queue.
    pub const NOT_LEADER_FOR_QUEUE: i32 = 501;
    /// Illegal operation.
    pub const ILLEGAL_OPERATION: i32 = 604;
    /// Client-side pseudo code: unknown RPC failure (never on the wire).
    pub const RPC_UNKNOWN: i32 = -1000;
    /// Client-side pseudo code: address is null (never on the wire).
    pub const RPC_ADDR_IS_NULL: i32 = -1002;
    /// Client-side pseudo code: write to the channel failed (never on the wire).
    pub const RPC_SEND_TO_CHANNEL_FAILED: i32 = -1004;
    /// Client-side pseudo code: request timed out (never on the wire).
    pub const RPC_TIME_OUT: i32 = -1006;
    /// The server is going away; reconnect elsewhere.
    pub const GO_AWAY: i32 = 1500;
    /// Controller: fenced master epoch.
    pub const CONTROLLER_FENCED_MASTER_EPOCH: i32 = 2000;
    /// Controller: fenced sync-state-set epoch.
    pub const CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH: i32 = 2001;
    /// Controller: invalid master.
    pub const CONTROLLER_INVALID_MASTER: i32 = 2002;
    /// Controller: invalid replicas.
    pub const CONTROLLER_INVALID_REPLICAS: i32 = 2003;
    /// Controller: master not available.
    pub const CONTROLLER_MASTER_NOT_AVAILABLE: i32 = 2004;
    /// Controller: invalid request.
    pub const CONTROLLER_INVALID_REQUEST: i32 = 2005;
    /// Controller: broker not alive.
    pub const CONTROLLER_BROKER_NOT_ALIVE: i32 = 2006;
    /// Controller: not the leader.
    pub const CONTROLLER_NOT_LEADER: i32 = 2007;
    /// Controller: broker metadata does not exist.
    pub const CONTROLLER_BROKER_METADATA_NOT_EXIST: i32 = 2008;
    /// Controller: invalid clean-broker-metadata request.
    pub const CONTROLLER_INVALID_CLEAN_BROKER_METADATA: i32 = 2009;
    /// Controller: broker must register first.
    pub const CONTROLLER_BROKER_NEED_TO_BE_REGISTERED: i32 = 2010;
    /// Controller: a master still exists.
    pub const CONTROLLER_MASTER_STILL_EXIST: i32 = 2011;
    /// Controller: master election failed.
    pub const CONTROLLER_ELECT_MASTER_FAILED: i32 = 2012;
    /// Controller: altering the sync state set failed.
    pub const CONTROLLER_ALTER_SYNC_STATE_SET_FAILED: i32 = 2013;
    /// Controller: invalid broker id.
    pub const CONTROLLER_BROKER_ID_INVALID: i32 = 2014;
    /// Controller: JRaft internal error.
    pub const CONTROLLER_JRAFT_INTERNAL_ERROR: i32 = 2015;
    /// Controller: broker live info does not exist.
    pub const CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS: i32 = 2016;
    /// ACL: user does not exist.
    pub const USER_NOT_EXIST: i32 = 3001;
    /// ACL: policy does not exist.
    pub const POLICY_NOT_EXIST: i32 = 3002;
}

/// `PullMessageRequestHeader.sysFlag` bits (Java `PullSysFlag`).
pub mod pull_sys_flag {
    /// The broker commits `commitOffset` as the group's consume offset.
    pub const COMMIT_OFFSET: i32 = 0x1;
    /// The broker may hold the request (long polling) up to `suspendTimeoutMillis`.
    pub const SUSPEND: i32 = 0x2;
    /// The broker uses `subscription`/`expressionType` from the request.
    pub const SUBSCRIPTION: i32 = 0x4;
    /// Class filter mode (legacy).
    pub const CLASS_FILTER: i32 = 0x8;
    /// Lite pull consumer (Java then uses code 361).
    pub const LITE_PULL_MESSAGE: i32 = 0x10;
}

/// Topic/queue permission bits (Java `PermName`), as in `QueueData.perm`.
pub mod perm {
    /// Priority (unused by clients).
    pub const PRIORITY: i32 = 8;
    /// Consumers may read.
    pub const READ: i32 = 4;
    /// Producers may write.
    pub const WRITE: i32 = 2;
    /// Inherit permissions (template topics).
    pub const INHERIT: i32 = 1;
}

/// Human-readable name of a request code, for logs (`"UNKNOWN"` when not listed here).
///
/// ```
/// use rocketmq_actor::protocol::codes::{request_code, request_code_name};
/// assert_eq!(request_code_name(request_code::PULL_MESSAGE), "PULL_MESSAGE");
/// ```
pub fn request_code_name(code: i32) -> &'static str {
    use request_code::*;
    match code {
        SEND_MESSAGE => "SEND_MESSAGE",
        PULL_MESSAGE => "PULL_MESSAGE",
        QUERY_MESSAGE => "QUERY_MESSAGE",
        QUERY_CONSUMER_OFFSET => "QUERY_CONSUMER_OFFSET",
        UPDATE_CONSUMER_OFFSET => "UPDATE_CONSUMER_OFFSET",
        UPDATE_AND_CREATE_TOPIC => "UPDATE_AND_CREATE_TOPIC",
        GET_ALL_TOPIC_CONFIG => "GET_ALL_TOPIC_CONFIG",
        GET_BROKER_RUNTIME_INFO => "GET_BROKER_RUNTIME_INFO",
        SEARCH_OFFSET_BY_TIMESTAMP => "SEARCH_OFFSET_BY_TIMESTAMP",
        GET_MAX_OFFSET => "GET_MAX_OFFSET",
        GET_MIN_OFFSET => "GET_MIN_OFFSET",
        GET_EARLIEST_MSG_STORETIME => "GET_EARLIEST_MSG_STORETIME",
        VIEW_MESSAGE_BY_ID => "VIEW_MESSAGE_BY_ID",
        HEART_BEAT => "HEART_BEAT",
        UNREGISTER_CLIENT => "UNREGISTER_CLIENT",
        CONSUMER_SEND_MSG_BACK => "CONSUMER_SEND_MSG_BACK",
        END_TRANSACTION => "END_TRANSACTION",
        GET_CONSUMER_LIST_BY_GROUP => "GET_CONSUMER_LIST_BY_GROUP",
        CHECK_TRANSACTION_STATE => "CHECK_TRANSACTION_STATE",
        NOTIFY_CONSUMER_IDS_CHANGED => "NOTIFY_CONSUMER_IDS_CHANGED",
        LOCK_BATCH_MQ => "LOCK_BATCH_MQ",
        UNLOCK_BATCH_MQ => "UNLOCK_BATCH_MQ",
        CHECK_CLIENT_CONFIG => "CHECK_CLIENT_CONFIG",
        GET_ROUTEINFO_BY_TOPIC => "GET_ROUTEINFO_BY_TOPIC",
        GET_BROKER_CLUSTER_INFO => "GET_BROKER_CLUSTER_INFO",
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
        GET_ALL_SUBSCRIPTIONGROUP_CONFIG => "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
        GET_TOPIC_STATS_INFO => "GET_TOPIC_STATS_INFO",
        GET_CONSUMER_CONNECTION_LIST => "GET_CONSUMER_CONNECTION_LIST",
        GET_ALL_TOPIC_LIST_FROM_NAMESERVER => "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
        DELETE_SUBSCRIPTIONGROUP => "DELETE_SUBSCRIPTIONGROUP",
        DELETE_TOPIC_IN_BROKER => "DELETE_TOPIC_IN_BROKER",
        DELETE_TOPIC_IN_NAMESRV => "DELETE_TOPIC_IN_NAMESRV",
        GET_TOPIC_CONFIG => "GET_TOPIC_CONFIG",
        RESET_CONSUMER_CLIENT_OFFSET => "RESET_CONSUMER_CLIENT_OFFSET",
        INVOKE_BROKER_TO_RESET_OFFSET => "INVOKE_BROKER_TO_RESET_OFFSET",
        GET_CONSUMER_STATUS_FROM_CLIENT => "GET_CONSUMER_STATUS_FROM_CLIENT",
        GET_CONSUMER_RUNNING_INFO => "GET_CONSUMER_RUNNING_INFO",
        CONSUME_MESSAGE_DIRECTLY => "CONSUME_MESSAGE_DIRECTLY",
        SEND_MESSAGE_V2 => "SEND_MESSAGE_V2",
        SEND_BATCH_MESSAGE => "SEND_BATCH_MESSAGE",
        PUSH_REPLY_MESSAGE_TO_CLIENT => "PUSH_REPLY_MESSAGE_TO_CLIENT",
        LITE_PULL_MESSAGE => "LITE_PULL_MESSAGE",
        QUERY_ASSIGNMENT => "QUERY_ASSIGNMENT",
        POP_MESSAGE => "POP_MESSAGE",
        ACK_MESSAGE => "ACK_MESSAGE",
        PEEK_MESSAGE => "PEEK_MESSAGE",
        CHANGE_MESSAGE_INVISIBLETIME => "CHANGE_MESSAGE_INVISIBLETIME",
        _ => "UNKNOWN",
    }
}

/// Human-readable name of a response code, for logs and error messages (`"UNKNOWN"` when not
/// listed here).
///
/// ```
/// use rocketmq_actor::protocol::codes::{response_code, response_code_name};
/// assert_eq!(response_code_name(response_code::PULL_OFFSET_MOVED), "PULL_OFFSET_MOVED");
/// ```
pub fn response_code_name(code: i32) -> &'static str {
    use response_code::*;
    match code {
        SUCCESS => "SUCCESS",
        SYSTEM_ERROR => "SYSTEM_ERROR",
        SYSTEM_BUSY => "SYSTEM_BUSY",
        REQUEST_CODE_NOT_SUPPORTED => "REQUEST_CODE_NOT_SUPPORTED",
        TRANSACTION_FAILED => "TRANSACTION_FAILED",
        FLUSH_DISK_TIMEOUT => "FLUSH_DISK_TIMEOUT",
        SLAVE_NOT_AVAILABLE => "SLAVE_NOT_AVAILABLE",
        FLUSH_SLAVE_TIMEOUT => "FLUSH_SLAVE_TIMEOUT",
        MESSAGE_ILLEGAL => "MESSAGE_ILLEGAL",
        SERVICE_NOT_AVAILABLE => "SERVICE_NOT_AVAILABLE",
        VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
        NO_PERMISSION => "NO_PERMISSION",
        TOPIC_NOT_EXIST => "TOPIC_NOT_EXIST",
        TOPIC_EXIST_ALREADY => "TOPIC_EXIST_ALREADY",
        PULL_NOT_FOUND => "PULL_NOT_FOUND",
        PULL_RETRY_IMMEDIATELY => "PULL_RETRY_IMMEDIATELY",
        PULL_OFFSET_MOVED => "PULL_OFFSET_MOVED",
        QUERY_NOT_FOUND => "QUERY_NOT_FOUND",
        SUBSCRIPTION_PARSE_FAILED => "SUBSCRIPTION_PARSE_FAILED",
        SUBSCRIPTION_NOT_EXIST => "SUBSCRIPTION_NOT_EXIST",
        SUBSCRIPTION_NOT_LATEST => "SUBSCRIPTION_NOT_LATEST",
        SUBSCRIPTION_GROUP_NOT_EXIST => "SUBSCRIPTION_GROUP_NOT_EXIST",
        FILTER_DATA_NOT_EXIST => "FILTER_DATA_NOT_EXIST",
        FILTER_DATA_NOT_LATEST => "FILTER_DATA_NOT_LATEST",
        INVALID_PARAMETER => "INVALID_PARAMETER",
        TRANSACTION_SHOULD_COMMIT => "TRANSACTION_SHOULD_COMMIT",
        TRANSACTION_SHOULD_ROLLBACK => "TRANSACTION_SHOULD_ROLLBACK",
        TRANSACTION_STATE_UNKNOW => "TRANSACTION_STATE_UNKNOW",
        TRANSACTION_STATE_GROUP_WRONG => "TRANSACTION_STATE_GROUP_WRONG",
        NO_BUYER_ID => "NO_BUYER_ID",
        NOT_IN_CURRENT_UNIT => "NOT_IN_CURRENT_UNIT",
        CONSUMER_NOT_ONLINE => "CONSUMER_NOT_ONLINE",
        CONSUME_MSG_TIMEOUT => "CONSUME_MSG_TIMEOUT",
        NO_MESSAGE => "NO_MESSAGE",
        POLLING_FULL => "POLLING_FULL",
        POLLING_TIMEOUT => "POLLING_TIMEOUT",
        BROKER_NOT_EXIST => "BROKER_NOT_EXIST",
        BROKER_DISPATCH_NOT_COMPLETE => "BROKER_DISPATCH_NOT_COMPLETE",
        BROADCAST_CONSUMPTION => "BROADCAST_CONSUMPTION",
        FLOW_CONTROL => "FLOW_CONTROL",
        NOT_LEADER_FOR_QUEUE => "NOT_LEADER_FOR_QUEUE",
        ILLEGAL_OPERATION => "ILLEGAL_OPERATION",
        RPC_UNKNOWN => "RPC_UNKNOWN",
        RPC_ADDR_IS_NULL => "RPC_ADDR_IS_NULL",
        RPC_SEND_TO_CHANNEL_FAILED => "RPC_SEND_TO_CHANNEL_FAILED",
        RPC_TIME_OUT => "RPC_TIME_OUT",
        GO_AWAY => "GO_AWAY",
        USER_NOT_EXIST => "USER_NOT_EXIST",
        POLICY_NOT_EXIST => "POLICY_NOT_EXIST",
        2000..=2016 => "CONTROLLER_ERROR",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_reference_table() {
        assert_eq!(request_code::GET_ROUTEINFO_BY_TOPIC, 105);
        assert_eq!(request_code::SEND_MESSAGE_V2, 310);
        assert_eq!(request_code::RESET_CONSUMER_CLIENT_OFFSET, 220);
        assert_eq!(response_code::PULL_OFFSET_MOVED, 21);
        assert_eq!(response_code::FLOW_CONTROL, 215);
        assert_eq!(response_code::CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS, 2016);
    }

    #[test]
    fn names_cover_known_and_unknown_codes() {
        assert_eq!(request_code_name(34), "HEART_BEAT");
        assert_eq!(request_code_name(9999), "UNKNOWN");
        assert_eq!(response_code_name(22), "QUERY_NOT_FOUND");
        assert_eq!(response_code_name(2005), "CONTROLLER_ERROR");
        assert_eq!(response_code_name(-7), "UNKNOWN");
    }
}
