//! Hooks on the embedded broker: an RPC hook sees every request a client sends (the producer's
//! sends included), a consume hook every listener call with its status, a send hook every send
//! with its result; a panicking hook changes nothing.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use rocketmq_actor::consumer::{ConsumeStatus, OrderlyStatus};
use rocketmq_actor::embedded::Fault;
use rocketmq_actor::hooks::{
    ConsumeHook, ConsumeHookContext, ListenerStatus, RpcHook, SendHook, SendHookContext,
};
use rocketmq_actor::protocol::{request_code, response_code, RemotingCommand};
use rocketmq_actor::{Client, ClientConfig, Error, Message, Producer, ProducerConfig, SendResult};
use tokio::sync::mpsc::unbounded_channel;

const TOPIC: &str = "Hooked";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records (before|after, code) of every request, and tags each request.
#[derive(Default)]
struct Requests(Mutex<Vec<(&'static str, i32)>>);

impl RpcHook for Requests {
    fn before_request(&self, _peer: &str, request: &mut RemotingCommand) {
        lock(&self.0).push(("before", request.code));
    }

    fn after_response(&self, _peer: &str, request_code: i32, _response: &RemotingCommand) {
        lock(&self.0).push(("after", request_code));
    }
}

impl Requests {
    fn count(&self, when: &str, code: i32) -> usize {
        lock(&self.0)
            .iter()
            .filter(|(w, c)| *w == when && *c == code)
            .count()
    }
}

struct Panics;

impl RpcHook for Panics {
    fn before_request(&self, _peer: &str, _request: &mut RemotingCommand) {
        panic!("a buggy RPC hook");
    }
}

impl ConsumeHook for Panics {
    fn before_consume(&self, _ctx: &ConsumeHookContext<'_>) {
        panic!("a buggy consume hook");
    }
}

impl SendHook for Panics {
    fn after_send(&self, _ctx: &SendHookContext<'_>, _result: Result<&SendResult, &Error>) {
        panic!("a buggy send hook");
    }
}

#[actix_rt::test]
async fn an_rpc_hook_sees_every_request_of_producers_and_consumers() {
    let (cluster, namesrv) = cluster_with_topic(TOPIC, 1).await;
    let requests = Arc::new(Requests::default());
    let config = ClientConfig::new(&namesrv)
        .with_rpc_hook(Arc::new(Panics))
        .with_rpc_hook(requests.clone());
    let client = Client::start(config).expect("client");
    let producer = producer_on(&client);
    send_numbered(&producer, TOPIC, 0..5).await;
    // Sends take the typed path when hooks are installed: the hook saw each, and its answer.
    assert_eq!(requests.count("before", request_code::SEND_MESSAGE_V2), 5);
    assert_eq!(requests.count("after", request_code::SEND_MESSAGE_V2), 5);
    assert!(requests.count("before", request_code::GET_ROUTEINFO_BY_TOPIC) >= 1);
    let batch = producer
        .send_batch(vec![Message::new(TOPIC, "b1"), Message::new(TOPIC, "b2")])
        .await
        .expect("batch sent");
    assert!(batch.msg_id.contains(','));
    assert_eq!(
        requests.count("before", request_code::SEND_BATCH_MESSAGE),
        1
    );

    let (tx, mut rx) = unbounded_channel();
    let consumer = from_first_offset(&namesrv, "hooked_group", TOPIC, "*")
        .client(client.clone())
        .listener_fn(recording(tx))
        .start()
        .await
        .expect("consumer starts");
    receive(&mut rx, 7).await;
    consumer.shutdown().await;
    for code in [
        request_code::HEART_BEAT,
        request_code::PULL_MESSAGE,
        request_code::GET_CONSUMER_LIST_BY_GROUP,
        request_code::UNREGISTER_CLIENT,
    ] {
        assert!(requests.count("before", code) >= 1, "no request {code}");
        assert!(requests.count("after", code) >= 1, "no answer to {code}");
    }
    // Offsets: persisted one-way periodically (no answer to see) or with an answer at shutdown.
    assert!(requests.count("before", request_code::UPDATE_CONSUMER_OFFSET) >= 1);
    client.shutdown().await;
    cluster.shutdown().await;
}

/// Records every consume hook call.
#[derive(Default)]
struct Calls(Mutex<Vec<Call>>);

#[derive(Debug, Clone)]
struct Call {
    after: bool,
    group: String,
    bodies: Vec<String>,
    orderly: bool,
    status: Option<ListenerStatus>,
    success: bool,
    panicked: bool,
}

impl Calls {
    fn record(&self, after: bool, ctx: &ConsumeHookContext<'_>) {
        lock(&self.0).push(Call {
            after,
            group: ctx.group.to_owned(),
            bodies: ctx.messages.iter().map(text).collect(),
            orderly: ctx.orderly,
            status: ctx.status,
            success: ctx.success,
            panicked: ctx.panicked,
        });
    }
}

impl ConsumeHook for Calls {
    fn before_consume(&self, ctx: &ConsumeHookContext<'_>) {
        self.record(false, ctx);
    }

    fn after_consume(&self, ctx: &ConsumeHookContext<'_>) {
        self.record(true, ctx);
    }
}

#[actix_rt::test]
async fn a_consume_hook_sees_every_listener_call_and_its_status() {
    let (cluster, namesrv) = cluster_with_topic(TOPIC, 1).await;
    send_numbered(&producer(&cluster), TOPIC, 0..4).await;
    let calls = Arc::new(Calls::default());
    let (tx, mut rx) = unbounded_channel();
    let consumer = from_first_offset(&namesrv, "consume_hooked", TOPIC, "*")
        .consume_hook(Arc::new(Panics))
        .consume_hook(calls.clone())
        .configure(|c| c.consume_message_batch_max_size = 1)
        .listener_fn(move |messages, ctx| {
            let mut status = ConsumeStatus::Success;
            for m in &messages {
                // m1 fails the first time, m2 panics the first time.
                if text(m) == "m1" && m.reconsume_times == 0 {
                    status = ConsumeStatus::ReconsumeLater;
                }
                let _ = tx.send((text(m), m.reconsume_times));
                if text(m) == "m2" && m.reconsume_times == 0 {
                    panic!("listener bug");
                }
            }
            std::future::ready((status, ctx))
        })
        .start()
        .await
        .expect("consumer starts");
    // 4 first deliveries + m1 and m2 again.
    let mut seen = receive(&mut rx, 6).await;
    seen.sort();
    assert!(
        seen.contains(&("m1".into(), 1)) && seen.contains(&("m2".into(), 1)),
        "{seen:?}"
    );
    let calls = eventually("six finished calls", || {
        let calls = lock(&calls.0).clone();
        std::future::ready((calls.iter().filter(|c| c.after).count() >= 6).then_some(calls))
    })
    .await;
    consumer.shutdown().await;
    let befores = calls.iter().filter(|c| !c.after).count();
    let afters: Vec<&Call> = calls.iter().filter(|c| c.after).collect();
    assert_eq!(befores, afters.len(), "{calls:?}");
    assert!(calls
        .iter()
        .all(|c| c.group == "consume_hooked" && !c.orderly));
    let of = |body: &str| -> Vec<&&Call> { afters.iter().filter(|c| c.bodies == [body]).collect() };
    assert_eq!(
        of("m0").first().map(|c| (c.status, c.success)),
        Some((
            Some(ListenerStatus::Concurrent(ConsumeStatus::Success)),
            true
        ))
    );
    let m1: Vec<_> = of("m1").iter().map(|c| (c.status, c.success)).collect();
    assert_eq!(
        m1,
        vec![
            (
                Some(ListenerStatus::Concurrent(ConsumeStatus::ReconsumeLater)),
                false
            ),
            (
                Some(ListenerStatus::Concurrent(ConsumeStatus::Success)),
                true
            ),
        ]
    );
    let m2: Vec<_> = of("m2").iter().map(|c| (c.status, c.panicked)).collect();
    assert_eq!(
        m2,
        vec![
            (None, true),
            (
                Some(ListenerStatus::Concurrent(ConsumeStatus::Success)),
                false
            )
        ]
    );
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn a_consume_hook_sees_orderly_calls() {
    let (cluster, namesrv) = cluster_with_topic(TOPIC, 1).await;
    send_numbered(&producer(&cluster), TOPIC, 0..3).await;
    let calls = Arc::new(Calls::default());
    let (tx, mut rx) = unbounded_channel();
    let consumer = from_first_offset(&namesrv, "orderly_hooked", TOPIC, "*")
        .consume_hook(calls.clone())
        .orderly_listener_fn(move |messages, ctx| {
            for m in &messages {
                let _ = tx.send(text(m));
            }
            std::future::ready((OrderlyStatus::Success, ctx))
        })
        .start()
        .await
        .expect("consumer starts");
    receive(&mut rx, 3).await;
    let calls = eventually("the calls finished", || {
        let calls = lock(&calls.0).clone();
        let bodies: usize = calls
            .iter()
            .filter(|c| c.after)
            .map(|c| c.bodies.len())
            .sum();
        std::future::ready((bodies >= 3).then_some(calls))
    })
    .await;
    consumer.shutdown().await;
    assert!(calls.iter().all(|c| c.orderly));
    assert!(calls
        .iter()
        .filter(|c| c.after)
        .all(|c| c.success && c.status == Some(ListenerStatus::Orderly(OrderlyStatus::Success))));
    cluster.shutdown().await;
}

/// One send attempt as a send hook saw it: (after?, topic, broker address, msg id or error).
type Attempt = (bool, String, String, Result<String, String>);

/// Records each send attempt.
#[derive(Default)]
struct Sends(Mutex<Vec<Attempt>>);

impl SendHook for Sends {
    fn before_send(&self, ctx: &SendHookContext<'_>) {
        lock(&self.0).push((
            false,
            ctx.queue.topic.clone(),
            ctx.broker_addr.to_owned(),
            Ok(String::new()),
        ));
    }

    fn after_send(&self, ctx: &SendHookContext<'_>, result: Result<&SendResult, &Error>) {
        lock(&self.0).push((
            true,
            ctx.messages[0].topic.to_string(),
            ctx.broker_addr.to_owned(),
            result.map(|r| r.msg_id.clone()).map_err(|e| e.to_string()),
        ));
    }
}

#[actix_rt::test]
async fn a_send_hook_sees_each_send_attempt_and_its_result() {
    let (cluster, _namesrv) = cluster_with_topic(TOPIC, 1).await;
    let sends = Arc::new(Sends::default());
    let config = ProducerConfig::default()
        .with_send_hook(Arc::new(Panics))
        .with_send_hook(sends.clone());
    let producer = Producer::new(client(&cluster), config);
    let mut ids = Vec::new();
    for i in 0..3 {
        let sent = producer
            .send(Message::new(TOPIC, body_of(i)))
            .await
            .expect("a panicking send hook changes nothing");
        ids.push(sent.msg_id);
    }
    let broker = cluster.broker_addr(BROKER).expect("broker");
    let seen = lock(&sends.0).clone();
    assert_eq!(seen.len(), 6, "{seen:?}");
    for (i, id) in ids.iter().enumerate() {
        assert!(!seen[2 * i].0);
        assert_eq!(
            seen[2 * i + 1],
            (true, TOPIC.to_owned(), broker.clone(), Ok(id.clone()))
        );
    }

    // A failing broker: every attempt (the first and its retries) is seen with its error.
    cluster
        .set_fault(
            BROKER,
            request_code::SEND_MESSAGE_V2,
            Some(Fault::Fail {
                code: response_code::SYSTEM_BUSY,
                remark: "busy".into(),
            }),
        )
        .await
        .expect("fault set");
    lock(&sends.0).clear();
    let failed = producer.send(Message::new(TOPIC, "refused")).await;
    assert!(failed.is_err());
    let seen = lock(&sends.0).clone();
    let afters: Vec<_> = seen.iter().filter(|s| s.0).collect();
    assert_eq!(afters.len(), 3, "retry_times 2: three attempts {seen:?}");
    assert!(afters
        .iter()
        .all(|s| matches!(&s.3, Err(e) if e.contains("busy"))));
    cluster.shutdown().await;
}
