//! Behaviour tests of the broker core through `handle()` with real RemotingCommands.
//!
//! Expected values come from protocol.md (codes, worked examples) or are derived independently
//! (e.g. messages are decoded with the client's decoder, not the broker's).

use super::*;
use crate::message::{decode_messages, property, Message, MessageExt};
use crate::protocol::codes::{pull_sys_flag, request_code as rc, response_code as code};

const PRODUCER: ConnId = 1;
const C1: ConnId = 2;
const C2: ConnId = 3;
const T0: i64 = 1_700_000_000_000;

fn core() -> BrokerCore {
    let mut c = BrokerCore::new(BrokerConfig {
        delay_levels: DelayLevels::parse("10ms 20ms 30ms 40ms 50ms").unwrap(),
        retry_max_times: 2,
        ..BrokerConfig::default()
    });
    c.on_connect(PRODUCER, "10.1.1.1:5000".parse().unwrap());
    c.on_connect(C1, "10.1.1.2:5001".parse().unwrap());
    c.on_connect(C2, "10.1.1.3:5002".parse().unwrap());
    c
}

fn reply(actions: &[Action], conn: ConnId) -> RemotingCommand {
    response_for(actions, conn)
        .cloned()
        .unwrap_or_else(|| panic!("no response to {conn} in {actions:?}"))
}

/// A SEND_MESSAGE_V2 request (V2 keys) of a `hello` message.
pub(crate) fn send_request(
    topic: &str,
    queue_id: i32,
    tags: Option<&str>,
    props: &str,
) -> RemotingCommand {
    let mut properties = props.to_owned();
    if let Some(t) = tags {
        properties.push_str(&format!("TAGS\u{1}{t}\u{2}"));
    }
    RemotingCommand::request(rc::SEND_MESSAGE_V2)
        .with_ext("a", "pg")
        .with_ext("b", topic)
        .with_ext("c", "TBW102")
        .with_ext("d", "4")
        .with_ext("e", queue_id.to_string())
        .with_ext("f", "0")
        .with_ext("g", "123")
        .with_ext("h", "0")
        .with_ext("i", properties)
        .with_opaque(11)
        .with_body(bytes::Bytes::from_static(b"hello"))
}

fn send(
    c: &mut BrokerCore,
    topic: &str,
    queue_id: i32,
    tags: Option<&str>,
    now: i64,
) -> RemotingCommand {
    let actions = c.handle(PRODUCER, send_request(topic, queue_id, tags, ""), now);
    let r = reply(&actions, PRODUCER);
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    r
}

fn pull_request(
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
    sys_flag: i32,
) -> RemotingCommand {
    RemotingCommand::request(rc::PULL_MESSAGE)
        .with_ext("consumerGroup", group)
        .with_ext("topic", topic)
        .with_ext("queueId", queue_id.to_string())
        .with_ext("queueOffset", offset.to_string())
        .with_ext("maxMsgNums", "32")
        .with_ext("sysFlag", sys_flag.to_string())
        .with_ext("commitOffset", "0")
        .with_ext("suspendTimeoutMillis", "15000")
        .with_ext("subVersion", "0")
        .with_ext("expressionType", "TAG")
        .with_opaque(21)
}

/// A PULL_MESSAGE request of group `g` with a subscription expression (not held).
pub(crate) fn pull_with_sub(
    topic: &str,
    queue_id: i32,
    offset: i64,
    expr: &str,
) -> RemotingCommand {
    pull_request("g", topic, queue_id, offset, pull_sys_flag::SUBSCRIPTION)
        .with_ext("subscription", expr)
}

fn messages(r: &RemotingCommand) -> Vec<MessageExt> {
    decode_messages(r.body.clone().unwrap_or_default()).unwrap()
}

fn heartbeat(
    c: &mut BrokerCore,
    conn: ConnId,
    client: &str,
    sub_version: i64,
    now: i64,
) -> Vec<Action> {
    let subscription = serde_json::json!({
        "classFilterMode": false, "topic": "T", "subString": "TagA",
        "tagsSet": ["TagA"], "codeSet": [2598919], "subVersion": sub_version,
        "expressionType": "TAG"
    });
    heartbeat_with(c, conn, client, subscription, now)
}

/// A HEART_BEAT of `client` in group `g` (clustering, push) with one subscription.
fn heartbeat_with(
    c: &mut BrokerCore,
    conn: ConnId,
    client: &str,
    subscription: serde_json::Value,
    now: i64,
) -> Vec<Action> {
    let body = serde_json::json!({
        "clientID": client,
        "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": "g",
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [subscription],
            "unitMode": false
        }],
        "heartbeatFingerprint": 0,
        "withoutSub": false
    });
    let req = RemotingCommand::request(rc::HEART_BEAT)
        .with_opaque(5)
        .with_body(bytes::Bytes::from(body.to_string()));
    c.handle(conn, req, now)
}

fn notified(actions: &[Action]) -> Vec<ConnId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send { conn, command } if command.code == rc::NOTIFY_CONSUMER_IDS_CHANGED => {
                assert!(command.is_oneway());
                assert_eq!(command.ext("consumerGroup"), Some("g"));
                Some(*conn)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn send_then_pull_round_trips_with_broker_stamped_properties() {
    let mut c = core();
    let r = send(&mut c, "T", 2, Some("TagA"), T0);
    assert_eq!(
        (r.opaque, r.ext("queueId"), r.ext("queueOffset")),
        (11, Some("2"), Some("0"))
    );
    // The reply's msgId is the offsetMsgId: store host 127.0.0.1:10911 and commit offset 0.
    assert_eq!(r.ext("msgId"), Some("7F00000100002A9F0000000000000000"));
    // Auto-created with min(d=4, TBW102 8) queues.
    assert_eq!(c.store().topic("T").unwrap().write_queue_nums, 4);
    let second = send(&mut c, "T", 2, None, T0 + 1);
    assert_eq!(second.ext("queueOffset"), Some("1"));

    let actions = c.handle(C1, pull_with_sub("T", 2, 0, "*"), T0 + 2);
    let p = reply(&actions, C1);
    assert_eq!(
        (p.code, p.remark.as_deref()),
        (code::SUCCESS, Some("FOUND"))
    );
    assert_eq!(
        (
            p.ext("nextBeginOffset"),
            p.ext("minOffset"),
            p.ext("maxOffset"),
            p.ext("suggestWhichBrokerId")
        ),
        (Some("2"), Some("0"), Some("2"), Some("0"))
    );
    let msgs = messages(&p);
    assert_eq!(msgs.len(), 2);
    let m = &msgs[0];
    assert_eq!((m.queue_id, m.queue_offset, m.commit_log_offset), (2, 0, 0));
    assert_eq!(msgs[1].commit_log_offset, i64::from(m.store_size));
    assert_eq!(m.born_host, "10.1.1.1:5000".parse().unwrap());
    assert_eq!(m.store_timestamp, T0);
    assert_eq!(m.property(property::CLUSTER), Some("DefaultCluster"));
    assert!(m
        .property(property::UNIQ_KEY)
        .is_some_and(|k| !k.is_empty()));
    assert_eq!(m.tags(), Some("TagA"));
    assert_eq!(m.body().as_ref(), b"hello");
}

#[test]
fn negative_queue_id_lets_the_broker_pick_and_v1_headers_work() {
    let mut c = core();
    let r = send(&mut c, "T", -1, None, T0);
    let q: i32 = r.ext("queueId").unwrap().parse().unwrap();
    assert!((0..4).contains(&q));
    let v1 = RemotingCommand::request(rc::SEND_MESSAGE)
        .with_ext("producerGroup", "pg")
        .with_ext("topic", "T")
        .with_ext("defaultTopic", "TBW102")
        .with_ext("defaultTopicQueueNums", "4")
        .with_ext("queueId", "1")
        .with_ext("sysFlag", "0")
        .with_ext("bornTimestamp", "1")
        .with_ext("flag", "0")
        .with_body(bytes::Bytes::from_static(b"x"));
    assert_eq!(
        reply(&c.handle(PRODUCER, v1, T0), PRODUCER).code,
        code::SUCCESS
    );
    let bad = send_request("T", 9, None, "");
    let r = reply(&c.handle(PRODUCER, bad, T0), PRODUCER);
    assert_eq!(r.code, code::SYSTEM_ERROR);
}

#[test]
fn batch_send_stores_each_message_and_joins_ids() {
    let mut c = core();
    let body = crate::message::encode_batch_body(&[
        Message::new("T", "a").with_tags("TagA"),
        Message::new("T", "b"),
    ]);
    let req = send_request("T", 0, None, "")
        .with_ext("m", "true")
        .with_body(body);
    let mut req = req;
    req.code = rc::SEND_BATCH_MESSAGE;
    let r = reply(&c.handle(PRODUCER, req, T0), PRODUCER);
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    let ids: Vec<&str> = r.ext("msgId").unwrap().split(',').collect();
    assert_eq!(ids.len(), 2);
    let p = reply(&c.handle(C1, pull_with_sub("T", 0, 0, "*"), T0), C1);
    let msgs = messages(&p);
    assert_eq!(
        msgs.iter().map(|m| m.offset_msg_id()).collect::<Vec<_>>(),
        ids
    );
    assert_eq!(msgs[1].queue_offset, 1);
}

#[test]
fn every_pull_status_maps_like_the_real_broker() {
    let mut c = core();
    c.create_topic(TopicConfig::new("T", 2));
    let status = |c: &mut BrokerCore, offset: i64| {
        let r = reply(&c.handle(C1, pull_with_sub("T", 0, offset, "*"), T0), C1);
        (r.code, r.ext("nextBeginOffset").map(str::to_owned))
    };
    // Empty queue: offset 0 → 19, any other offset → 21 (moved to 0).
    assert_eq!(status(&mut c, 0), (code::PULL_NOT_FOUND, Some("0".into())));
    assert_eq!(
        status(&mut c, 5),
        (code::PULL_OFFSET_MOVED, Some("0".into()))
    );
    send(&mut c, "T", 0, Some("TagB"), T0);
    send(&mut c, "T", 0, Some("TagB"), T0);
    // Caught up → 19; beyond → 21 to max.
    assert_eq!(status(&mut c, 2), (code::PULL_NOT_FOUND, Some("2".into())));
    assert_eq!(
        status(&mut c, 7),
        (code::PULL_OFFSET_MOVED, Some("2".into()))
    );
    // Everything filtered → 20 with the offset advanced past the scanned range.
    let r = reply(&c.handle(C1, pull_with_sub("T", 0, 0, "TagA"), T0), C1);
    assert_eq!(
        (r.code, r.ext("nextBeginOffset")),
        (code::PULL_RETRY_IMMEDIATELY, Some("2"))
    );
    // Below the min offset (after retention) → 21 to min.
    c.store_mut().truncate_before("T", 0, 1);
    assert_eq!(
        status(&mut c, 0),
        (code::PULL_OFFSET_MOVED, Some("1".into()))
    );
    // Unknown topic → 17; bad queue → 29.
    let r = reply(&c.handle(C1, pull_with_sub("X", 0, 0, "*"), T0), C1);
    assert_eq!(r.code, code::TOPIC_NOT_EXIST);
    let r = reply(&c.handle(C1, pull_with_sub("T", 5, 0, "*"), T0), C1);
    assert_eq!(r.code, code::INVALID_PARAMETER);
}

#[test]
fn pulls_without_subscription_flag_need_a_current_heartbeat() {
    let mut c = core();
    c.create_topic(TopicConfig::new("T", 1));
    let r = reply(&c.handle(C1, pull_request("g", "T", 0, 0, 0), T0), C1);
    assert_eq!(r.code, code::SUBSCRIPTION_NOT_EXIST);
    heartbeat(&mut c, C1, "c1", 100, T0);
    let r = reply(&c.handle(C1, pull_request("g", "T", 0, 0, 0), T0), C1);
    assert_eq!(r.code, code::PULL_NOT_FOUND);
    let newer = pull_request("g", "T", 0, 0, 0).with_ext("subVersion", "101");
    assert_eq!(
        reply(&c.handle(C1, newer, T0), C1).code,
        code::SUBSCRIPTION_NOT_LATEST
    );
    let other_topic = pull_request("g", "%RETRY%g", 0, 0, 0);
    assert_eq!(
        reply(&c.handle(C1, other_topic, T0), C1).code,
        code::SUBSCRIPTION_NOT_EXIST
    );
}

#[test]
fn server_side_tag_filter_uses_the_heartbeat_subscription() {
    let mut c = core();
    heartbeat(&mut c, C1, "c1", 1, T0);
    send(&mut c, "T", 0, Some("TagA"), T0);
    send(&mut c, "T", 0, Some("TagB"), T0);
    send(&mut c, "T", 0, None, T0);
    send(&mut c, "T", 0, Some("TagA"), T0);
    let r = reply(&c.handle(C1, pull_request("g", "T", 0, 0, 0), T0), C1);
    let offsets: Vec<i64> = messages(&r).iter().map(|m| m.queue_offset).collect();
    assert_eq!(offsets, vec![0, 3]);
    assert_eq!(r.ext("nextBeginOffset"), Some("4"));
}

#[test]
fn long_poll_is_woken_by_a_matching_send_on_its_own_queue_only() {
    let mut c = core();
    c.create_topic(TopicConfig::new("T", 2));
    let held = pull_with_sub("T", 0, 0, "TagA").with_ext(
        "sysFlag",
        (pull_sys_flag::SUBSCRIPTION | pull_sys_flag::SUSPEND).to_string(),
    );
    assert!(c.handle(C1, held, T0).is_empty());
    assert_eq!(c.held_pull_count(), 1);
    // Another queue, and a non-matching tag on the same queue, do not wake it.
    let a = c.handle(PRODUCER, send_request("T", 1, Some("TagA"), ""), T0 + 1);
    assert!(response_for(&a, C1).is_none());
    let a = c.handle(PRODUCER, send_request("T", 0, Some("TagB"), ""), T0 + 2);
    assert!(response_for(&a, C1).is_none());
    // The matching send wakes it within the same call.
    let a = c.handle(PRODUCER, send_request("T", 0, Some("TagA"), ""), T0 + 3);
    let r = reply(&a, C1);
    assert_eq!((r.code, r.opaque), (code::SUCCESS, 21));
    assert_eq!(
        messages(&r)
            .iter()
            .map(|m| m.queue_offset)
            .collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!(c.held_pull_count(), 0);
}

#[test]
fn long_poll_times_out_with_no_new_message_at_the_requested_offset() {
    let mut c = core();
    send(&mut c, "T", 0, None, T0);
    let held = pull_with_sub("T", 0, 1, "*")
        .with_ext(
            "sysFlag",
            (pull_sys_flag::SUBSCRIPTION | pull_sys_flag::SUSPEND).to_string(),
        )
        .with_ext("suspendTimeoutMillis", "1000");
    assert!(c.handle(C1, held, T0).is_empty());
    assert_eq!(c.next_deadline(), Some(T0 + 1000));
    assert!(c.on_tick(T0 + 999).is_empty());
    let r = reply(&c.on_tick(T0 + 1000), C1);
    assert_eq!(
        (r.code, r.ext("nextBeginOffset")),
        (code::PULL_NOT_FOUND, Some("1"))
    );
    // A disconnected client's held pull is dropped silently.
    let held = pull_with_sub("T", 0, 1, "*").with_ext("sysFlag", "6");
    c.handle(C1, held, T0);
    c.on_disconnect(C1);
    assert_eq!(c.held_pull_count(), 0);
}

#[test]
fn consumer_offsets_query_update_and_commit_on_pull() {
    let mut c = core();
    c.create_topic(TopicConfig::new("T", 2));
    let query = |q: i32| {
        RemotingCommand::request(rc::QUERY_CONSUMER_OFFSET)
            .with_ext("consumerGroup", "g")
            .with_ext("topic", "T")
            .with_ext("queueId", q.to_string())
    };
    // Nothing stored, queue empty → 22.
    assert_eq!(
        reply(&c.handle(C1, query(0), T0), C1).code,
        code::QUERY_NOT_FOUND
    );
    // Nothing stored but offset 0 still there → the "answers 0" quirk, unless told not to.
    send(&mut c, "T", 0, None, T0);
    let r = reply(&c.handle(C1, query(0), T0), C1);
    assert_eq!((r.code, r.ext("offset")), (code::SUCCESS, Some("0")));
    let strict = query(0).with_ext("setZeroIfNotFound", "false");
    assert_eq!(
        reply(&c.handle(C1, strict, T0), C1).code,
        code::QUERY_NOT_FOUND
    );
    // Updating needs a known group.
    let update = |off: i64| {
        RemotingCommand::request(rc::UPDATE_CONSUMER_OFFSET)
            .with_ext("consumerGroup", "g")
            .with_ext("topic", "T")
            .with_ext("queueId", "1")
            .with_ext("commitOffset", off.to_string())
    };
    assert_eq!(
        reply(&c.handle(C1, update(5), T0), C1).code,
        code::SUBSCRIPTION_GROUP_NOT_EXIST
    );
    heartbeat(&mut c, C1, "c1", 1, T0);
    assert_eq!(reply(&c.handle(C1, update(5), T0), C1).code, code::SUCCESS);
    let mut oneway = update(6);
    oneway.mark_oneway();
    assert!(c.handle(C1, oneway, T0).is_empty());
    assert_eq!(
        reply(&c.handle(C1, query(1), T0), C1).ext("offset"),
        Some("6")
    );
    // FLAG_COMMIT_OFFSET commits the request's commitOffset.
    let p = pull_with_sub("T", 0, 1, "*")
        .with_ext(
            "sysFlag",
            (pull_sys_flag::SUBSCRIPTION | pull_sys_flag::COMMIT_OFFSET).to_string(),
        )
        .with_ext("commitOffset", "1");
    c.handle(C1, p, T0);
    assert_eq!(c.offsets().query("g", "T", 0), Some(1));
}

#[test]
fn min_max_offsets_search_by_time_and_earliest_store_time() {
    let mut c = core();
    for i in 0..3 {
        send(&mut c, "T", 0, None, T0 + i * 100);
    }
    let ask = |c: &mut BrokerCore, req: RemotingCommand| reply(&c.handle(C1, req, T0), C1);
    let base = |code| {
        RemotingCommand::request(code)
            .with_ext("topic", "T")
            .with_ext("queueId", "0")
    };
    assert_eq!(
        ask(&mut c, base(rc::GET_MAX_OFFSET)).ext("offset"),
        Some("3")
    );
    assert_eq!(
        ask(&mut c, base(rc::GET_MIN_OFFSET)).ext("offset"),
        Some("0")
    );
    let search = |ts: i64, b: &str| {
        base(rc::SEARCH_OFFSET_BY_TIMESTAMP)
            .with_ext("timestamp", ts.to_string())
            .with_ext("boundaryType", b)
    };
    assert_eq!(
        ask(&mut c, search(T0 + 150, "LOWER")).ext("offset"),
        Some("2")
    );
    assert_eq!(
        ask(&mut c, search(T0 + 150, "upper")).ext("offset"),
        Some("1")
    );
    assert_eq!(
        ask(&mut c, search(T0 + 999, "LOWER")).ext("offset"),
        Some("3")
    );
    let r = ask(&mut c, base(rc::GET_EARLIEST_MSG_STORETIME));
    assert_eq!(r.ext("timestamp"), Some(T0.to_string().as_str()));
}

#[test]
fn membership_changes_notify_the_group_and_idle_channels_expire() {
    let mut c = core();
    let a = heartbeat(&mut c, C1, "c1", 1, T0);
    assert_eq!(reply(&a, C1).ext("IS_SUPPORT_HEART_BEAT_V2"), Some("true"));
    assert_eq!(notified(&a), vec![C1]);
    assert!(c.store().topic("%RETRY%g").is_some());
    // A repeated heartbeat changes nothing.
    assert!(notified(&heartbeat(&mut c, C1, "c1", 1, T0 + 10)).is_empty());
    let a = heartbeat(&mut c, C2, "c2", 1, T0 + 20);
    assert_eq!(notified(&a), vec![C1, C2]);
    let list =
        RemotingCommand::request(rc::GET_CONSUMER_LIST_BY_GROUP).with_ext("consumerGroup", "g");
    let r = reply(&c.handle(C1, list.clone(), T0), C1);
    let body: serde_json::Value = serde_json::from_slice(r.body.as_deref().unwrap()).unwrap();
    assert_eq!(body["consumerIdList"], serde_json::json!(["c1", "c2"]));
    // Disconnecting C2 notifies C1.
    assert_eq!(notified(&c.on_disconnect(C2)), vec![C1]);
    // Unregistering the last member leaves nobody to notify; the list call then fails.
    let unreg = RemotingCommand::request(rc::UNREGISTER_CLIENT)
        .with_ext("clientID", "c1")
        .with_ext("consumerGroup", "g");
    let a = c.handle(C1, unreg, T0);
    assert!(notified(&a).is_empty());
    assert_eq!(reply(&c.handle(C1, list, T0), C1).code, code::SYSTEM_ERROR);
    // Idle expiry: 120 s after the last heartbeat the channel is closed.
    heartbeat(&mut c, C1, "c1", 1, T0);
    assert!(c.on_tick(T0 + 120_000).is_empty());
    let a = c.on_tick(T0 + 120_001);
    assert!(a.contains(&Action::Close { conn: C1 }));
    assert!(c.clients().consumer_group("g").is_none());
}

#[test]
fn queue_locks_are_exclusive_and_expire() {
    let mut c = core();
    let lock = |client: &str, code_: i32| {
        let body = serde_json::json!({
            "consumerGroup": "g", "clientId": client, "onlyThisBroker": false,
            "mqSet": [{"topic": "T", "brokerName": "broker-a", "queueId": 0},
                      {"topic": "T", "brokerName": "broker-a", "queueId": 1}]
        });
        RemotingCommand::request(code_).with_body(bytes::Bytes::from(body.to_string()))
    };
    let locked = |r: &RemotingCommand| {
        let v: serde_json::Value = serde_json::from_slice(r.body.as_deref().unwrap()).unwrap();
        v["lockOKMQSet"].as_array().unwrap().len()
    };
    assert_eq!(
        locked(&reply(&c.handle(C1, lock("c1", rc::LOCK_BATCH_MQ), T0), C1)),
        2
    );
    assert_eq!(
        locked(&reply(
            &c.handle(C2, lock("c2", rc::LOCK_BATCH_MQ), T0 + 1),
            C2
        )),
        0
    );
    // After 60 s without renewal the other client can take them.
    assert_eq!(
        locked(&reply(
            &c.handle(C2, lock("c2", rc::LOCK_BATCH_MQ), T0 + 60_001),
            C2
        )),
        2
    );
    assert_eq!(
        reply(&c.handle(C2, lock("c2", rc::UNLOCK_BATCH_MQ), T0), C2).code,
        code::SUCCESS
    );
    assert_eq!(
        locked(&reply(
            &c.handle(C1, lock("c1", rc::LOCK_BATCH_MQ), T0 + 60_002),
            C1
        )),
        2
    );
    let bad =
        RemotingCommand::request(rc::LOCK_BATCH_MQ).with_body(bytes::Bytes::from_static(b"{"));
    assert_eq!(reply(&c.handle(C1, bad, T0), C1).code, code::SYSTEM_ERROR);
}

fn send_back(offset: i64, delay_level: i32) -> RemotingCommand {
    RemotingCommand::request(rc::CONSUMER_SEND_MSG_BACK)
        .with_ext("offset", offset.to_string())
        .with_ext("group", "g")
        .with_ext("delayLevel", delay_level.to_string())
        .with_ext("originTopic", "T")
        .with_ext("unitMode", "false")
}

#[test]
fn send_back_schedules_a_retry_then_dead_letters_it() {
    let mut c = core();
    let sent = send(&mut c, "T", 0, Some("TagA"), T0);
    let original_id = sent.ext("msgId").unwrap().to_owned();
    // First failure: delay level 0 → 3 + reconsumeTimes(0) = level 3 = 30 ms in this table.
    assert_eq!(
        reply(&c.handle(C1, send_back(0, 0), T0), C1).code,
        code::SUCCESS
    );
    let retry = "%RETRY%g";
    assert_eq!(c.store().max_offset(retry, 0), 0);
    assert_eq!(c.next_deadline(), Some(T0 + 30));
    c.on_tick(T0 + 29);
    assert_eq!(c.store().max_offset(retry, 0), 0);
    c.on_tick(T0 + 30);
    let r = reply(&c.handle(C1, pull_with_sub(retry, 0, 0, "*"), T0 + 31), C1);
    let m = &messages(&r)[0];
    assert_eq!(m.reconsume_times, 1);
    assert_eq!(m.property(property::RETRY_TOPIC), Some("T"));
    assert_eq!(
        m.property(property::ORIGIN_MESSAGE_ID),
        Some(original_id.as_str())
    );
    assert_eq!(m.property(property::REAL_TOPIC), Some(retry));
    assert_eq!(m.property(property::REAL_QID), Some("0"));
    assert_eq!(m.property(property::DELAY), None);
    assert_eq!(m.tags(), Some("TagA"));
    // Second failure (reconsumeTimes 1 → level 4 = 40 ms).
    c.handle(C1, send_back(m.commit_log_offset, 0), T0 + 40);
    c.on_tick(T0 + 80);
    let r = reply(&c.handle(C1, pull_with_sub(retry, 0, 1, "*"), T0 + 81), C1);
    let m = &messages(&r)[0];
    assert_eq!(m.reconsume_times, 2);
    // Third failure: reconsumeTimes 2 ≥ max 2 → DLQ at once, origin preserved.
    c.handle(C1, send_back(m.commit_log_offset, 0), T0 + 90);
    let r = reply(
        &c.handle(C1, pull_with_sub("%DLQ%g", 0, 0, "*"), T0 + 91),
        C1,
    );
    let d = &messages(&r)[0];
    assert_eq!(d.reconsume_times, 3);
    assert_eq!(
        d.property(property::ORIGIN_MESSAGE_ID),
        Some(original_id.as_str())
    );
    assert_eq!(d.property(property::DLQ_ORIGIN_TOPIC), Some("T"));
    assert_eq!(c.store().topic("%DLQ%g").unwrap().read_queue_nums, 1);
    // Unknown offset → SYSTEM_ERROR; negative delay level → straight to DLQ.
    assert_eq!(
        reply(&c.handle(C1, send_back(999_999, 0), T0), C1).code,
        code::SYSTEM_ERROR
    );
    c.handle(C1, send_back(0, -1), T0 + 100);
    assert_eq!(c.store().max_offset("%DLQ%g", 0), 2);
}

#[test]
fn delay_property_on_a_plain_send_is_honoured() {
    let mut c = core();
    let req = send_request(
        "%RETRY%g",
        0,
        None,
        "DELAY\u{1}2\u{2}RETRY_TOPIC\u{1}T\u{2}",
    )
    .with_ext("j", "1");
    assert_eq!(
        reply(&c.handle(PRODUCER, req, T0), PRODUCER).code,
        code::SUCCESS
    );
    assert_eq!(c.store().max_offset("%RETRY%g", 0), 0);
    c.on_tick(T0 + 20);
    assert_eq!(c.store().max_offset("%RETRY%g", 0), 1);
    // Client fallback past the max reconsume times goes to the DLQ.
    let req = send_request("%RETRY%g", 0, None, "").with_ext("j", "2");
    c.handle(PRODUCER, req, T0);
    assert_eq!(c.store().max_offset("%DLQ%g", 0), 1);
}

#[test]
fn reset_offsets_pushes_object_key_bodies_to_the_group() {
    let mut c = core();
    c.create_topic(TopicConfig::new("T", 1));
    heartbeat(&mut c, C1, "c1", 1, T0);
    for i in 0..3 {
        send(&mut c, "T", 0, None, T0 + i * 100);
    }
    c.offsets.commit("g", "T", 0, 3);
    let (table, actions) = c.reset_offsets("T", "g", T0 + 100, false).unwrap();
    assert_eq!(table.values().copied().collect::<Vec<_>>(), vec![1]);
    let Action::Send { conn, command } = &actions[0] else {
        panic!()
    };
    assert_eq!(*conn, C1);
    assert_eq!(command.code, rc::RESET_CONSUMER_CLIENT_OFFSET);
    assert!(command.is_oneway());
    assert_eq!(
        command.ext("timestamp"),
        Some((T0 + 100).to_string().as_str())
    );
    let body = std::str::from_utf8(command.body.as_deref().unwrap()).unwrap();
    assert_eq!(
        body,
        "{\"offsetTable\":{{\"brokerName\":\"broker-a\",\"queueId\":0,\"topic\":\"T\"}:1}}"
    );
    // Without members the real broker refuses.
    c.on_disconnect(C1);
    assert_eq!(
        c.reset_offsets("T", "g", T0, false).unwrap_err().0,
        code::CONSUMER_NOT_ONLINE
    );
}

#[test]
fn client_calls_are_correlated_and_time_out() {
    let mut c = core();
    heartbeat(&mut c, C1, "c1", 1, T0);
    let actions = c.request_running_info(7, "g", "c1", false, T0).unwrap();
    let Action::Send { conn, command } = &actions[0] else {
        panic!()
    };
    assert_eq!((*conn, command.code), (C1, rc::GET_CONSUMER_RUNNING_INFO));
    let answer = RemotingCommand::response_to(command, code::SUCCESS, None);
    let done = c.handle(C1, answer, T0 + 1);
    assert!(matches!(&done[0], Action::CallDone { token: 7, result: Ok(r) } if r.code == 0));
    // An admin asking through the wire gets the client's answer with its own opaque.
    let admin = RemotingCommand::request(rc::GET_CONSUMER_RUNNING_INFO)
        .with_ext("consumerGroup", "g")
        .with_ext("clientId", "c1")
        .with_opaque(99);
    let a = c.handle(C2, admin, T0);
    let Action::Send { command: fwd, .. } = &a[0] else {
        panic!()
    };
    let back = c.handle(
        C1,
        RemotingCommand::response_to(fwd, code::SUCCESS, None),
        T0,
    );
    assert_eq!(reply(&back, C2).opaque, 99);
    // No answer within 10 s → the admin gets SYSTEM_ERROR.
    let admin = RemotingCommand::request(rc::GET_CONSUMER_RUNNING_INFO)
        .with_ext("consumerGroup", "g")
        .with_ext("clientId", "c1")
        .with_opaque(100);
    c.handle(C2, admin, T0);
    assert_eq!(reply(&c.on_tick(T0 + 10_000), C2).code, code::SYSTEM_ERROR);
    assert!(c.request_running_info(8, "g", "nobody", false, T0).is_err());
}

#[test]
fn faults_fail_drop_or_delay_chosen_codes_and_paused_queues_show_nothing_new() {
    let mut c = core();
    c.set_fault(
        rc::GET_MAX_OFFSET,
        Some(Fault::Fail {
            code: code::SYSTEM_BUSY,
            remark: "busy".into(),
        }),
    );
    let req = RemotingCommand::request(rc::GET_MAX_OFFSET)
        .with_ext("topic", "T")
        .with_ext("queueId", "0");
    assert_eq!(
        reply(&c.handle(C1, req.clone(), T0), C1).code,
        code::SYSTEM_BUSY
    );
    c.set_fault(rc::GET_MAX_OFFSET, Some(Fault::Drop));
    assert!(c.handle(C1, req.clone(), T0).is_empty());
    c.set_fault(rc::GET_MAX_OFFSET, Some(Fault::Delay { millis: 50 }));
    assert!(c.handle(C1, req.clone(), T0).is_empty());
    assert!(c.on_tick(T0 + 49).is_empty());
    assert_eq!(reply(&c.on_tick(T0 + 50), C1).code, code::SUCCESS);
    c.clear_faults();

    send(&mut c, "T", 0, None, T0);
    c.set_queue_paused("T", 0, true, T0);
    send(&mut c, "T", 0, None, T0);
    let held = pull_with_sub("T", 0, 1, "*").with_ext("sysFlag", "6");
    assert!(c.handle(C1, held, T0).is_empty());
    // A send while paused does not wake it; unpausing does.
    assert!(response_for(&c.handle(PRODUCER, send_request("T", 0, None, ""), T0), C1).is_none());
    let r = reply(&c.set_queue_paused("T", 0, false, T0), C1);
    assert_eq!(messages(&r).len(), 2);
}

#[test]
fn malformed_requests_get_the_real_error_codes() {
    let mut c = core();
    let r = reply(
        &c.handle(C1, RemotingCommand::request(rc::PULL_MESSAGE), T0),
        C1,
    );
    assert_eq!(r.code, code::SYSTEM_ERROR);
    assert!(r.remark.unwrap().contains("<consumerGroup>"));
    let r = reply(
        &c.handle(C1, RemotingCommand::request(12345).with_opaque(4), T0),
        C1,
    );
    assert_eq!((r.code, r.opaque), (code::REQUEST_CODE_NOT_SUPPORTED, 4));
    assert_eq!(
        r.remark.as_deref(),
        Some(" request type 12345 not supported")
    );
    let mut oneway = RemotingCommand::request(12345);
    oneway.mark_oneway();
    assert!(c.handle(C1, oneway, T0).is_empty());
    let bad_num = send_request("T", 0, None, "").with_ext("e", "zero");
    assert_eq!(
        reply(&c.handle(PRODUCER, bad_num, T0), PRODUCER).code,
        code::SYSTEM_ERROR
    );
    let bad_topic = send_request("bad topic!", 0, None, "");
    assert_eq!(
        reply(&c.handle(PRODUCER, bad_topic, T0), PRODUCER).code,
        code::SYSTEM_ERROR
    );
    let no_body = RemotingCommand::request(rc::HEART_BEAT);
    assert_eq!(
        reply(&c.handle(C1, no_body, T0), C1).code,
        code::SYSTEM_ERROR
    );
    let garbage =
        RemotingCommand::request(rc::HEART_BEAT).with_body(bytes::Bytes::from_static(b"\xff\x00"));
    assert_eq!(
        reply(&c.handle(C1, garbage, T0), C1).code,
        code::SYSTEM_ERROR
    );
}

#[test]
fn update_topic_creates_queues_and_announces_them() {
    let mut c = core();
    let req = RemotingCommand::request(rc::UPDATE_AND_CREATE_TOPIC)
        .with_ext("topic", "Orders")
        .with_ext("defaultTopic", "TBW102")
        .with_ext("readQueueNums", "3")
        .with_ext("writeQueueNums", "3")
        .with_ext("perm", "6");
    let a = c.handle(C1, req, T0);
    assert_eq!(reply(&a, C1).code, code::SUCCESS);
    assert!(a.contains(&Action::TopicsChanged));
    let reg = c.registration();
    let t = reg
        .topics
        .iter()
        .find(|t| t.topic_name == "Orders")
        .unwrap();
    assert_eq!((t.read_queue_nums, t.perm), (3, 6));
    assert!(reg
        .topics
        .iter()
        .any(|t| t.topic_name == AUTO_CREATE_TOPIC && t.perm == 7));
}

#[test]
fn consumer_connection_list_shows_members_and_subscriptions_or_not_online() {
    let mut c = core();
    let list = RemotingCommand::request(rc::GET_CONSUMER_CONNECTION_LIST)
        .with_ext("consumerGroup", "g")
        .with_opaque(9);
    let r = reply(&c.handle(C1, list.clone(), T0), C1);
    assert_eq!(r.code, code::CONSUMER_NOT_ONLINE);
    assert_eq!(
        r.remark.as_deref(),
        Some("the consumer group[g] not online")
    );
    heartbeat(&mut c, C1, "c1", 1, T0);
    heartbeat(&mut c, C2, "c2", 1, T0);
    let r = reply(&c.handle(C1, list.clone(), T0), C1);
    assert_eq!(r.code, code::SUCCESS);
    let body: crate::protocol::body::ConsumerConnection =
        crate::protocol::body::decode_json(r.body.as_deref().unwrap()).unwrap();
    let members: Vec<(&str, &str)> = body
        .connection_set
        .iter()
        .map(|c| (c.client_id.as_str(), c.client_addr.as_str()))
        .collect();
    assert_eq!(
        members,
        vec![("c1", "10.1.1.2:5001"), ("c2", "10.1.1.3:5002")],
        "each member with the address its connection comes from"
    );
    let request = RemotingCommand::request(rc::HEART_BEAT);
    assert_eq!(body.connection_set[0].language, request.language.name());
    assert_eq!(body.connection_set[0].version, request.version);
    let sub = &body.subscription_table["T"];
    assert_eq!(
        (
            sub.sub_string.as_str(),
            sub.tags_set.clone(),
            sub.code_set.clone()
        ),
        ("TagA", vec!["TagA".to_owned()], vec![2_598_919])
    );
    assert_eq!(
        body.consume_type,
        crate::protocol::body::ConsumeType::ConsumePassively
    );
    assert_eq!(
        body.message_model,
        crate::protocol::body::MessageModel::Clustering
    );
    // Once the last member is gone the group is offline again.
    c.on_disconnect(C1);
    c.on_disconnect(C2);
    let r = reply(&c.handle(PRODUCER, list, T0), PRODUCER);
    assert_eq!(r.code, code::CONSUMER_NOT_ONLINE);
}

pub(crate) mod arbitrary_input {
    //! Whatever a client sends, the core answers it like a broker or stays silent where a
    //! broker would (oneway, parked pull, forwarded call) — and never panics.

    use super::*;
    use proptest::prelude::*;

    /// Request codes the broker dispatches on, and a few it does not know.
    pub(crate) const CODES: &[i32] = &[
        rc::SEND_MESSAGE,
        rc::SEND_MESSAGE_V2,
        rc::SEND_BATCH_MESSAGE,
        rc::PULL_MESSAGE,
        rc::LITE_PULL_MESSAGE,
        rc::QUERY_CONSUMER_OFFSET,
        rc::UPDATE_CONSUMER_OFFSET,
        rc::UPDATE_AND_CREATE_TOPIC,
        rc::SEARCH_OFFSET_BY_TIMESTAMP,
        rc::GET_MAX_OFFSET,
        rc::GET_MIN_OFFSET,
        rc::GET_EARLIEST_MSG_STORETIME,
        rc::VIEW_MESSAGE_BY_ID,
        rc::HEART_BEAT,
        rc::UNREGISTER_CLIENT,
        rc::CONSUMER_SEND_MSG_BACK,
        rc::GET_CONSUMER_LIST_BY_GROUP,
        rc::GET_CONSUMER_CONNECTION_LIST,
        rc::LOCK_BATCH_MQ,
        rc::UNLOCK_BATCH_MQ,
        rc::GET_CONSUMER_RUNNING_INFO,
        rc::CONSUME_MESSAGE_DIRECTLY,
        rc::GET_ROUTEINFO_BY_TOPIC,
        0,
        -7,
        99_999,
    ];

    /// Keys the handlers read, in both send-header spellings.
    pub(crate) const KEYS: &[&str] = &[
        "a",
        "b",
        "c",
        "d",
        "e",
        "f",
        "g",
        "h",
        "i",
        "j",
        "l",
        "m",
        "topic",
        "queueId",
        "consumerGroup",
        "queueOffset",
        "maxMsgNums",
        "sysFlag",
        "commitOffset",
        "suspendTimeoutMillis",
        "subVersion",
        "subscription",
        "expressionType",
        "offset",
        "group",
        "delayLevel",
        "maxReconsumeTimes",
        "clientId",
        "clientID",
        "msgId",
        "readQueueNums",
        "writeQueueNums",
        "perm",
        "defaultTopic",
        "timestamp",
        "boundaryType",
        "setZeroIfNotFound",
        "producerGroup",
    ];

    const VALUES: &[&str] = &[
        "",
        "0",
        "1",
        "-1",
        "7",
        "2147483647",
        "2147483648",
        "-9223372036854775808",
        "zero",
        "true",
        "T",
        "TBW102",
        "%RETRY%g",
        "%DLQ%g",
        "SCHEDULE_TOPIC_XXXX",
        "g",
        "*",
        "TagA || TagB",
        "UPPER",
        "7F00000100002A9F0000000000000000",
        "bad topic!",
        "6",
        "DELAY\u{1}3\u{2}TAGS\u{1}TagA\u{2}",
    ];

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::sample::select(VALUES).prop_map(str::to_owned),
            1 => ".{0,12}",
        ]
    }

    fn body() -> impl Strategy<Value = Option<Vec<u8>>> {
        let heartbeat = br#"{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"T","subString":"*"}]}]}"#;
        let lock = br#"{"consumerGroup":"g","clientId":"c","mqSet":[{"topic":"T","brokerName":"broker-a","queueId":0}]}"#;
        prop_oneof![
            2 => Just(None),
            1 => Just(Some(heartbeat.to_vec())),
            1 => Just(Some(lock.to_vec())),
            1 => Just(Some(crate::message::encode_batch_body(&[Message::new("T", "x")]).to_vec())),
            2 => prop::collection::vec(any::<u8>(), 0..200).prop_map(Some),
        ]
    }

    fn request() -> impl Strategy<Value = RemotingCommand> {
        (
            prop::sample::select(CODES),
            prop::collection::btree_map(prop::sample::select(KEYS), value(), 0..16),
            body(),
            any::<bool>(),
            0..500i32,
        )
            .prop_map(|(code, ext, body, oneway, version)| {
                let mut request = RemotingCommand::request(code).with_opaque(1_000);
                for (key, value) in ext {
                    request = request.with_ext(key, value);
                }
                if let Some(body) = body {
                    request = request.with_body(bytes::Bytes::from(body));
                }
                if oneway {
                    request.mark_oneway();
                }
                request.version = version;
                request
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn requests_get_one_answer_or_a_justified_silence(
            requests in prop::collection::vec(request(), 1..8)
        ) {
            let mut c = core();
            send(&mut c, "T", 0, Some("TagA"), T0);
            heartbeat(&mut c, C2, "c2", 1, T0);
            for (i, request) in requests.into_iter().enumerate() {
                let now = T0 + i as i64 * 1_000;
                let (code, oneway) = (request.code, request.is_oneway());
                let actions = c.handle(C1, request, now);
                let answers = actions
                    .iter()
                    .filter(|a| matches!(a, Action::Send { conn: C1, command } if command.is_response()))
                    .count();
                prop_assert!(answers <= 1, "{answers} answers to one request");
                if oneway {
                    prop_assert_eq!(answers, 0);
                } else if answers == 0 {
                    let may_wait = matches!(
                        code,
                        rc::PULL_MESSAGE
                            | rc::LITE_PULL_MESSAGE
                            | rc::GET_CONSUMER_RUNNING_INFO
                            | rc::CONSUME_MESSAGE_DIRECTLY
                    );
                    prop_assert!(may_wait, "request code {} left unanswered", code);
                }
                c.on_tick(now + 500);
            }
            // Still a working broker afterwards.
            send(&mut c, "T", 0, None, T0 + 10_000);
        }
    }
}

/// A pull of group `g` carrying a SQL92 expression (`FLAG_SUBSCRIPTION`, plus `extra` flags).
fn sql_pull(offset: i64, expression: &str, extra: i32) -> RemotingCommand {
    pull_request("g", "T", 0, offset, pull_sys_flag::SUBSCRIPTION | extra)
        .with_ext("subscription", expression)
        .with_ext("expressionType", "SQL92")
}

fn sql_heartbeat(c: &mut BrokerCore, expression: &str, sub_version: i64) {
    let subscription = serde_json::json!({
        "classFilterMode": false, "topic": "T", "subString": expression,
        "tagsSet": [], "codeSet": [], "subVersion": sub_version,
        "expressionType": "SQL92"
    });
    let r = reply(&heartbeat_with(c, C1, "c1", subscription, T0), C1);
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
}

fn send_with(c: &mut BrokerCore, props: &str, now: i64) -> Vec<Action> {
    c.handle(PRODUCER, send_request("T", 0, None, props), now)
}

fn offsets_of(r: &RemotingCommand) -> Vec<i64> {
    messages(r).iter().map(|m| m.queue_offset).collect()
}

#[test]
fn a_sql92_pull_returns_only_selected_messages_and_skips_a_barren_range() {
    let mut c = core();
    c.create_topic(TopicConfig::new("T", 1));
    for (amount, region) in [(5, "eu"), (50, "eu"), (500, "us"), (70, "eu")] {
        send_with(
            &mut c,
            &format!("amount\u{1}{amount}\u{2}region\u{1}{region}\u{2}"),
            T0,
        );
    }
    let r = reply(
        &c.handle(C1, sql_pull(0, "region = 'eu' AND amount > 10", 0), T0),
        C1,
    );
    assert_eq!(r.code, code::SUCCESS);
    assert_eq!(offsets_of(&r), vec![1, 3]);
    let r = reply(&c.handle(C1, sql_pull(0, "amount > 1000", 0), T0), C1);
    assert_eq!(r.code, code::PULL_RETRY_IMMEDIATELY);
    assert_eq!(r.ext("nextBeginOffset"), Some("4"));
    // An expression the broker cannot compile is refused, not treated as "everything".
    let r = reply(&c.handle(C1, sql_pull(0, "amount >", 0), T0), C1);
    assert_eq!(r.code, code::SUBSCRIPTION_PARSE_FAILED);
}

#[test]
fn a_registered_sql92_subscription_filters_pulls_without_the_flag() {
    let mut c = core();
    c.create_topic(TopicConfig::new("T", 1));
    send_with(&mut c, "amount\u{1}1\u{2}", T0);
    send_with(&mut c, "amount\u{1}2\u{2}", T0);
    sql_heartbeat(&mut c, "amount = 2", 7);
    let pull = pull_request("g", "T", 0, 0, 0)
        .with_ext("expressionType", "SQL92")
        .with_ext("subVersion", "7");
    let r = reply(&c.handle(C1, pull.clone(), T0), C1);
    assert_eq!(offsets_of(&r), vec![1]);
    // A registered expression that does not compile leaves no filter data.
    sql_heartbeat(&mut c, "amount = ", 8);
    let r = reply(&c.handle(C1, pull.with_ext("subVersion", "8"), T0), C1);
    assert_eq!(r.code, code::FILTER_DATA_NOT_EXIST);
}

#[test]
fn a_held_sql92_pull_wakes_only_for_a_message_it_selects() {
    let mut c = core();
    c.create_topic(TopicConfig::new("T", 1));
    let held = sql_pull(0, "amount > 10", pull_sys_flag::SUSPEND);
    assert!(c.handle(C1, held, T0).is_empty());
    let a = send_with(&mut c, "amount\u{1}3\u{2}", T0 + 1);
    assert!(
        response_for(&a, C1).is_none(),
        "woken by a message it does not select"
    );
    assert_eq!(c.held_pull_count(), 1);
    let a = send_with(&mut c, "amount\u{1}30\u{2}", T0 + 2);
    let r = reply(&a, C1);
    assert_eq!((r.code, offsets_of(&r)), (code::SUCCESS, vec![1]));
}

#[test]
fn without_property_filtering_sql92_is_refused_and_tags_still_pass() {
    let mut c = BrokerCore::new(BrokerConfig {
        enable_property_filter: false,
        ..BrokerConfig::default()
    });
    c.on_connect(C1, "10.1.1.2:5001".parse().unwrap());
    c.create_topic(TopicConfig::new("T", 1));
    let r = reply(&c.handle(C1, sql_pull(0, "amount > 10", 0), T0), C1);
    assert_eq!(r.code, code::SYSTEM_ERROR);
    assert_eq!(
        r.remark.as_deref(),
        Some("The broker does not support consumer to filter message by SQL92")
    );
    let r = reply(&c.handle(C1, pull_with_sub("T", 0, 0, "*"), T0), C1);
    assert_eq!(r.code, code::PULL_NOT_FOUND);
}

fn check_client(c: &mut BrokerCore, expression: &str, kind: &str) -> RemotingCommand {
    let body = serde_json::json!({
        "clientId": "c1",
        "group": "g",
        "subscriptionData": {
            "classFilterMode": false, "topic": "T", "subString": expression,
            "tagsSet": [], "codeSet": [], "subVersion": 1, "expressionType": kind
        }
    });
    let req = RemotingCommand::request(rc::CHECK_CLIENT_CONFIG)
        .with_opaque(9)
        .with_body(bytes::Bytes::from(body.to_string()));
    reply(&c.handle(C1, req, T0), C1)
}

#[test]
fn check_client_config_answers_as_a_java_broker() {
    let mut c = core();
    assert_eq!(
        check_client(&mut c, "TagA || TagB", "TAG").code,
        code::SUCCESS
    );
    assert_eq!(check_client(&mut c, "a > 1", "SQL92").code, code::SUCCESS);
    let bad = check_client(&mut c, "a >", "SQL92");
    assert_eq!(bad.code, code::SUBSCRIPTION_PARSE_FAILED);
    assert!(
        bad.remark
            .as_deref()
            .is_some_and(|r| r.contains("position 4")),
        "{bad:?}"
    );
    let empty = RemotingCommand::request(rc::CHECK_CLIENT_CONFIG).with_opaque(9);
    assert_eq!(reply(&c.handle(C1, empty, T0), C1).code, code::SUCCESS);

    let mut off = BrokerCore::new(BrokerConfig {
        enable_property_filter: false,
        ..BrokerConfig::default()
    });
    off.on_connect(C1, "10.1.1.2:5001".parse().unwrap());
    let refused = check_client(&mut off, "a > 1", "SQL92");
    assert_eq!(refused.code, code::SYSTEM_ERROR);
    assert_eq!(check_client(&mut off, "*", "TAG").code, code::SUCCESS);
}

#[test]
fn remembered_sql92_answers_agree_with_fresh_evaluation() {
    let mut c = core();
    c.create_topic(TopicConfig::new("T", 1));
    for amount in [5, 50, 500] {
        send_with(&mut c, &format!("amount\u{1}{amount}\u{2}"), T0);
    }
    let pull = |c: &mut BrokerCore, expression: &str| {
        offsets_of(&reply(&c.handle(C1, sql_pull(0, expression, 0), T0), C1))
    };
    assert_eq!(pull(&mut c, "amount > 10"), vec![1, 2]);
    // Stored after the expression was pulled with: answered as it is stored.
    send_with(&mut c, "amount\u{1}7\u{2}", T0);
    send_with(&mut c, "amount\u{1}70\u{2}", T0);
    assert_eq!(pull(&mut c, "amount > 10"), vec![1, 2, 4]);
    assert_eq!(
        pull(&mut c, "amount > 10"),
        vec![1, 2, 4],
        "from what it remembers"
    );
    // Another expression on the same queue has answers of its own.
    assert_eq!(pull(&mut c, "amount < 10"), vec![0, 3]);
    assert_eq!(pull(&mut c, "amount > 10"), vec![1, 2, 4]);
}
