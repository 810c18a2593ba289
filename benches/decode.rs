//! Decoding throughput of a typical pull body: 32 stored messages of 128-byte bodies with the
//! properties a Java producer and broker put on them.
//!
//! Run: `cargo bench --bench decode -- --warm-up-time 1 --measurement-time 3`
//! Criterion reports `thrpt` in elements (messages) per second.

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rocketmq_actor::filter::TagExpression;
use rocketmq_actor::message::{
    decode_messages, encode_stored_message, property, Message, MessageExt, UniqueIdGenerator,
};
use rocketmq_actor::protocol::command::RemotingCommand;
use rocketmq_actor::protocol::header::SendMessageResponseHeader;

const MESSAGES: usize = 32;
const BODY_LEN: usize = 128;

/// A pull body as a broker returns it.
fn pull_body() -> Bytes {
    let ids = UniqueIdGenerator::new("172.17.0.1".parse().unwrap(), 4242, 0x1b2c_3d4e);
    let mut wire = BytesMut::new();
    for i in 0..MESSAGES {
        let body: Vec<u8> = (0..BODY_LEN).map(|b| (b + i) as u8).collect();
        let message = Message::new("BenchmarkTopic", body)
            .with_property(
                property::UNIQ_KEY,
                ids.next_id(1_700_000_000_000 + i as i64),
            )
            .with_keys(format!("order-{i} user-{}", i * 7))
            .with_tags(if i % 2 == 0 { "TagA" } else { "TagB" })
            .with_property(property::WAIT, "true")
            .with_property(property::CLUSTER, "DefaultCluster")
            .with_property(property::MIN_OFFSET, "0")
            .with_property(property::MAX_OFFSET, "123456")
            .with_property(property::TRACE_ON, "true");
        let ext = MessageExt {
            queue_id: 1,
            queue_offset: 1_000 + i as i64,
            born_timestamp: 1_700_000_000_000,
            born_host: "172.17.0.1:53422".parse().unwrap(),
            store_timestamp: 1_700_000_000_003,
            store_host: "172.17.0.2:10911".parse().unwrap(),
            commit_log_offset: 4_096 * i as i64,
            ..MessageExt::from(message)
        };
        encode_stored_message(&ext, &mut wire);
    }
    wire.freeze()
}

fn bench_decode(c: &mut Criterion) {
    let body = pull_body();
    assert_eq!(decode_messages(body.clone()).unwrap().len(), MESSAGES);
    let mut group = c.benchmark_group("pull_body");
    group.throughput(Throughput::Elements(MESSAGES as u64));
    group.bench_function("decode_32x128B", |b| {
        b.iter(|| decode_messages(black_box(body.clone())).unwrap())
    });
    let expression = TagExpression::parse("TagA || TagC");
    group.bench_function("decode_filter_msgid_32x128B", |b| {
        b.iter(|| {
            let messages = decode_messages(black_box(body.clone())).unwrap();
            messages
                .iter()
                .filter(|m| expression.matches_tags(m.tags()))
                .map(|m| m.msg_id().len())
                .sum::<usize>()
        })
    });
    group.finish();
}

/// A send's answer as the embedded broker writes it (the client decodes one per message sent),
/// without its length prefix.
fn send_reply_frame() -> Bytes {
    let request = RemotingCommand::request(310);
    let header = SendMessageResponseHeader {
        msg_id: "AC11000200002A9F00000000000F4240".to_owned(),
        queue_id: 3,
        queue_offset: 123_456,
        transaction_id: None,
        batch_uniq_id: None,
    };
    let reply = RemotingCommand::response_to(&request, 0, None)
        .with_header(&header)
        .with_ext(property::MSG_REGION, "DefaultRegion")
        .with_ext(property::TRACE_ON, "true");
    let mut frame = BytesMut::new();
    reply.encode(&mut frame).unwrap();
    frame.freeze().slice(4..)
}

fn bench_send_reply(c: &mut Criterion) {
    let frame = send_reply_frame();
    let mut group = c.benchmark_group("send_reply");
    group.throughput(Throughput::Elements(1));
    group.bench_function("decode", |b| {
        b.iter(|| RemotingCommand::decode(black_box(frame.clone())).unwrap())
    });
    group.bench_function("decode_and_read_header", |b| {
        b.iter(|| {
            let reply = RemotingCommand::decode(black_box(frame.clone())).unwrap();
            reply
                .decode_header::<SendMessageResponseHeader>()
                .unwrap()
                .queue_offset
        })
    });
    group.finish();
}

criterion_group!(benches, bench_decode, bench_send_reply);
criterion_main!(benches);
