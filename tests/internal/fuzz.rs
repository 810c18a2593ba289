//! Long-run fuzzing of every decoder and of the embedded broker's request handling
//! (`scripts/fuzz.sh SECONDS`). Inputs are valid seeds (frames, stored records, pull bodies, JSON
//! bodies a broker or name server sends) and mutations of them: bit flips, interesting integers
//! written over length fields, insertions, deletions, truncations and splices. Every decoder must
//! answer with a value or an error; a panic fails the run and prints the input in hex.
//!
//! Besides decoding, the broker core gets each mutated frame that still decodes as a request,
//! and structured requests built from every request code with mutated ext fields and bodies, on
//! one core that lives for many cases (so requests meet the state earlier ones made). Each target
//! prints `{"target","cases","seconds"}`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio_util::codec::Decoder;

use crate::broker::nameserver::NameServerCore;
// The codes and ext-field keys the broker's property tests draw from.
use crate::broker::tests::arbitrary_input::{CODES, KEYS};
use crate::broker::tests::{pull_with_sub, send_request};
use crate::broker::{Action, BrokerConfig, BrokerCore};
use crate::message::compression::{decompress_with_limit, CompressionType};
use crate::message::{encode_batch_body, Message};
use crate::protocol::body::{
    decode_json, ConsumerListBody, ConsumerRunningInfo, HeartbeatData, LockBatchResponseBody,
    ResetOffsetBody, TopicRouteData,
};
use crate::protocol::codes::request_code as rc;
use crate::protocol::{RemotingCodec, RemotingCommand};

/// A small, fast, seedable generator (xorshift64*): the fuzzer needs speed and replayable
/// runs, not statistical quality.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: [i32; 10] = [0, 1, -1, 4, 8, 127, 255, 0x7fff, i32::MAX, i32::MIN];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].clone();
    for _ in 0..=rng.below(4) {
        let len = data.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                data[i] = [0u8, 0xff, 0x7f, 0x80, b'{', b'"', 1, 2][rng.below(8)];
            }
            2 if len >= 4 => {
                let i = rng.below(len - 3);
                let value = INTERESTING[rng.below(INTERESTING.len())];
                data[i..i + 4].copy_from_slice(&value.to_be_bytes());
            }
            3 => {
                let i = rng.below(len + 1);
                let extra: Vec<u8> = (0..=rng.below(16)).map(|_| rng.next() as u8).collect();
                data.splice(i..i, extra);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let end = (i + 1 + rng.below(16)).min(len);
                data.drain(i..end);
            }
            5 => data.truncate(rng.below(len + 1)),
            6 => {
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
            _ if len > 1 => {
                let i = rng.below(len);
                let end = (i + 1 + rng.below(32)).min(len);
                let copy = data[i..end].to_vec();
                let at = rng.below(data.len() + 1);
                data.splice(at..at, copy);
            }
            _ => data.push(rng.next() as u8),
        }
    }
    data
}

fn frame_of(command: &RemotingCommand) -> Vec<u8> {
    let mut out = BytesMut::new();
    command.encode(&mut out).expect("a seed encodes");
    out.to_vec()
}

fn responses(actions: Vec<Action>) -> Vec<RemotingCommand> {
    actions
        .into_iter()
        .filter_map(|action| match action {
            Action::Send { command, .. } => Some(command),
            _ => None,
        })
        .collect()
}

const NOW: i64 = 1_700_000_000_000;

fn fresh_core() -> BrokerCore {
    let mut core = BrokerCore::new(BrokerConfig::default());
    for conn in 1..=3 {
        core.on_connect(
            conn,
            format!("10.0.0.{conn}:5000").parse().expect("address"),
        );
    }
    core
}

/// Valid inputs of every kind, made by the code under test itself.
struct Seeds {
    frames: Vec<Vec<u8>>,
    pull_bodies: Vec<Vec<u8>>,
    stored: Vec<Vec<u8>>,
    batch_bodies: Vec<Vec<u8>>,
    json: Vec<Vec<u8>>,
    texts: Vec<Vec<u8>>,
    compressed: Vec<Vec<u8>>,
    sql: Vec<Vec<u8>>,
}

fn seeds() -> Seeds {
    let mut core = fresh_core();
    let heartbeat = br#"{"clientID":"c1","producerDataSet":[],"consumerDataSet":[{"groupName":"g","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"*","tagsSet":[],"codeSet":[],"subVersion":0,"expressionType":"TAG"}],"unitMode":false}]}"#;
    let mut frames = vec![
        frame_of(&send_request("T", 0, Some("a"), "KEYS\u{1}k1\u{2}")),
        frame_of(&send_request("T", 1, None, "")),
        frame_of(&pull_with_sub("T", 0, 0, "*")),
        frame_of(
            &RemotingCommand::request(rc::HEART_BEAT)
                .with_body(Bytes::from_static(heartbeat)),
        ),
        frame_of(
            &RemotingCommand::request(rc::LOCK_BATCH_MQ).with_body(Bytes::from_static(
                br#"{"consumerGroup":"g","clientId":"c1","mqSet":[{"topic":"T","brokerName":"broker-a","queueId":0}]}"#,
            )),
        ),
        frame_of(
            &RemotingCommand::request(rc::UPDATE_CONSUMER_OFFSET)
                .with_ext("consumerGroup", "g")
                .with_ext("topic", "T")
                .with_ext("queueId", "0")
                .with_ext("commitOffset", "1"),
        ),
        frame_of(
            &RemotingCommand::request(rc::CONSUMER_SEND_MSG_BACK)
                .with_ext("offset", "0")
                .with_ext("group", "g")
                .with_ext("delayLevel", "0")
                .with_ext("originMsgId", "x")
                .with_ext("originTopic", "T")
                .with_ext("maxReconsumeTimes", "2"),
        ),
        frame_of(&RemotingCommand::request(rc::GET_ROUTEINFO_BY_TOPIC).with_ext("topic", "T")),
        frame_of(
            &pull_with_sub("T", 0, 0, "a > 1 AND TAGS IN ('a')")
                .with_ext("expressionType", "SQL92"),
        ),
        frame_of(
            &RemotingCommand::request(rc::CHECK_CLIENT_CONFIG).with_body(Bytes::from_static(
                br#"{"clientId":"c1","group":"g","subscriptionData":{"topic":"T","subString":"a BETWEEN 1 AND 5","subVersion":1,"expressionType":"SQL92"}}"#,
            )),
        ),
    ];
    for (i, frame) in frames.clone().iter().enumerate() {
        let command =
            RemotingCommand::decode(Bytes::from(frame[4..].to_vec())).expect("a seed decodes");
        core.handle(1 + (i as u64 % 3), command, NOW);
    }
    let batch = encode_batch_body(&[
        Message::new("T", "one").with_tags("a"),
        Message::new("T", vec![0u8; 300]),
    ]);
    let batch_request = RemotingCommand::request(rc::SEND_BATCH_MESSAGE)
        .with_ext("a", "pg")
        .with_ext("b", "T")
        .with_ext("c", "TBW102")
        .with_ext("d", "4")
        .with_ext("e", "2")
        .with_ext("f", "0")
        .with_ext("g", "1700000000000")
        .with_ext("h", "0")
        .with_ext("i", "")
        .with_ext("j", "0")
        .with_ext("m", "true")
        .with_body(batch.clone());
    frames.push(frame_of(&batch_request));
    let _ = core.handle(1, batch_request, NOW);
    let mut pull_bodies = Vec::new();
    let mut stored = Vec::new();
    for queue_id in 0..3 {
        for answer in responses(core.handle(2, pull_with_sub("T", queue_id, 0, "*"), NOW)) {
            if let Some(body) = answer.body.as_ref().filter(|b| !b.is_empty()) {
                pull_bodies.push(body.to_vec());
                let mut rest = &body[..];
                while rest.len() >= 4 {
                    let size = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                    if size < 4 || size > rest.len() {
                        break;
                    }
                    stored.push(rest[..size].to_vec());
                    rest = &rest[size..];
                }
            }
            frames.push(frame_of(&answer));
        }
    }
    assert!(!pull_bodies.is_empty(), "the seed core served no pull body");
    let route = br#"{"orderTopicConf":null,"queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicSysFlag":0}],"brokerDatas":[{"cluster":"c","brokerName":"broker-a","brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10912"}}],"filterServerTable":{}}"#;
    let json = vec![
        route.to_vec(),
        heartbeat.to_vec(),
        br#"{"consumerIdList":["a@1","b@2"]}"#.to_vec(),
        br#"{"lockOKMQSet":[{"topic":"T","brokerName":"b","queueId":1}]}"#.to_vec(),
        br#"{"offsetTable":{{"topic":"T","brokerName":"b","queueId":0}:5}}"#.to_vec(),
        br#"{"properties":{"a":"1"},"subscriptionSet":[],"mqTable":{},"statusTable":{},"jstack":"\u00e9\ud83d\ude00"}"#.to_vec(),
    ];
    let texts = vec![
        b"TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02".to_vec(),
        b"TagA || TagB ||  || *".to_vec(),
        b"0A0000010000271100000000000004D2".to_vec(),
        b"T@broker-a@0=5\nT@broker-b@1=7\n".to_vec(),
        b"20231114221320".to_vec(),
    ];
    let compressed = vec![
        crate::message::compress(CompressionType::Zlib, b"zlib body zlib body", 5).expect("zlib"),
        crate::message::compress(CompressionType::Lz4, b"lz4 body lz4 body", 0).expect("lz4"),
        crate::message::compress(CompressionType::Zstd, b"zstd body zstd body", 0).expect("zstd"),
    ];
    let sql = [
        "region = 'eu' AND amount > 100",
        "(a = 1 OR b <> 'x''y') AND NOT c IS NULL",
        "amount NOT BETWEEN -5 AND 2.5e3 OR TAGS IN ('a', 'b')",
        "name NOT CONTAINS 'x' AND name STARTSWITH 'o' OR name ENDSWITH 'z'",
        "flag = TRUE AND 10L < n AND .5 >= ratio",
    ]
    .iter()
    .map(|text| text.as_bytes().to_vec())
    .collect();
    Seeds {
        frames,
        pull_bodies,
        stored,
        batch_bodies: vec![batch.to_vec()],
        json,
        texts,
        compressed,
        sql,
    }
}

/// Runs `case` on mutated inputs for `budget`; returns how many ran. A panic fails the test
/// with the input.
fn drive(
    name: &str,
    budget: Duration,
    rng: &mut Rng,
    seeds: &[Vec<u8>],
    mut case: impl FnMut(&[u8], &mut Rng),
) -> u64 {
    let started = Instant::now();
    let mut cases = 0u64;
    while started.elapsed() < budget {
        for _ in 0..64 {
            let input = mutate(rng, seeds);
            let outcome = catch_unwind(AssertUnwindSafe(|| case(&input, rng)));
            if outcome.is_err() {
                let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
                panic!("{name}: panicked on input {hex}");
            }
            cases += 1;
        }
    }
    println!(
        "{{\"target\":\"{name}\",\"cases\":{cases},\"seconds\":{:.1}}}",
        started.elapsed().as_secs_f64()
    );
    cases
}

fn text(input: &[u8]) -> &str {
    match std::str::from_utf8(input) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&input[..e.valid_up_to()]).unwrap_or_default(),
    }
}

fn structured_request(rng: &mut Rng, seeds: &Seeds) -> RemotingCommand {
    let mut command = RemotingCommand::request(CODES[rng.below(CODES.len())]);
    for _ in 0..rng.below(12) {
        let key = KEYS[rng.below(KEYS.len())];
        let value = match rng.below(6) {
            0 => INTERESTING[rng.below(INTERESTING.len())].to_string(),
            1 => ["T", "%RETRY%g", "%DLQ%g", "TBW102", "", "g"][rng.below(6)].to_owned(),
            2 => (rng.next() as i64).to_string(),
            3 => text(&mutate(rng, &seeds.texts)).to_owned(),
            4 => ["true", "false", "*", "TagA || TagB"][rng.below(4)].to_owned(),
            _ => rng.below(8).to_string(),
        };
        command = command.with_ext(key, value);
    }
    if rng.below(2) == 0 {
        let body = match rng.below(3) {
            0 => mutate(rng, &seeds.json),
            1 => mutate(rng, &seeds.batch_bodies),
            _ => mutate(rng, &seeds.texts),
        };
        command = command.with_body(Bytes::from(body));
    }
    command
}

#[test]
#[ignore = "long-running: scripts/fuzz.sh SECONDS"]
fn fuzz_every_decoder_and_the_brokers_request_handling() {
    let seconds: u64 = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_abcd_0001);
    let seeds = seeds();
    let targets = 10u32;
    let budget = Duration::from_secs(seconds) / targets;
    let mut rng = Rng(seed | 1);
    let mut total = 0u64;

    total += drive(
        "frame_codec",
        budget,
        &mut rng,
        &seeds.frames,
        |input, _| {
            let mut codec = RemotingCodec::default();
            let mut buffer = BytesMut::from(input);
            while let Ok(Some(command)) = codec.decode(&mut buffer) {
                let _ = command.encode(&mut BytesMut::new());
            }
        },
    );
    total += drive(
        "command_and_headers",
        budget,
        &mut rng,
        &seeds.frames,
        |input, _| {
            if input.len() >= 4 {
                if let Ok(command) = RemotingCommand::decode(Bytes::from(input[4..].to_vec())) {
                    let _ = command
                        .decode_header::<crate::protocol::header::PullMessageRequestHeader>();
                    let _ = command
                        .decode_header::<crate::protocol::header::SendMessageRequestHeaderV2>();
                    let _ = command
                        .decode_header::<crate::protocol::header::SendMessageResponseHeader>();
                    let _ = command
                        .decode_header::<crate::protocol::header::PullMessageResponseHeader>();
                }
            }
        },
    );
    total += drive(
        "pulled_messages",
        budget,
        &mut rng,
        &seeds.pull_bodies,
        |input, _| {
            let _ = crate::message::decode::decode_messages(Bytes::from(input.to_vec()));
        },
    );
    total += drive(
        "stored_record",
        budget,
        &mut rng,
        &seeds.stored,
        |input, _| {
            let _ = crate::broker::record::decode_stored(input);
            let _ = crate::message::decode::stored_properties(input);
            let mut bytes = Bytes::from(input.to_vec());
            let _ = crate::message::decode::decode_message(&mut bytes);
        },
    );
    total += drive(
        "batch_body",
        budget,
        &mut rng,
        &seeds.batch_bodies,
        |input, _| {
            let _ = crate::message::decode::decode_batch_body(Bytes::from(input.to_vec()));
        },
    );
    total += drive("json_bodies", budget, &mut rng, &seeds.json, |input, _| {
        let _ = decode_json::<TopicRouteData>(input);
        let _ = decode_json::<HeartbeatData>(input);
        let _ = decode_json::<ConsumerListBody>(input);
        let _ = decode_json::<LockBatchResponseBody>(input);
        let _ = ResetOffsetBody::decode(input);
        let _ = decode_json::<ConsumerRunningInfo>(input);
    });
    total += drive(
        "texts_ids_filters_compression",
        budget,
        &mut rng,
        &seeds.texts,
        |input, rng| {
            let text = text(input);
            let _ = crate::message::Properties::from_wire(Bytes::from(input.to_vec()));
            let _ = crate::filter::TagExpression::parse(text);
            let _ = crate::message::id::decode_offset_msg_id(text);
            let _ = crate::consumer::offset::decode_local_offsets(text);
            let _ = crate::consumer::config::parse_consume_timestamp(text);
            let compressed = mutate(rng, &seeds.compressed);
            for kind in [
                CompressionType::Zlib,
                CompressionType::Lz4,
                CompressionType::Zstd,
            ] {
                let _ = decompress_with_limit(kind, &compressed, 1 << 20);
            }
        },
    );
    let properties = crate::message::Properties::parse(
        "region\u{1}eu\u{2}amount\u{1}250\u{2}TAGS\u{1}a\u{2}name\u{1}order\u{2}",
    );
    total += drive(
        "sql92_selectors",
        budget,
        &mut rng,
        &seeds.sql,
        |input, _| {
            let text = text(input);
            if let Ok(tree) = crate::filter::sql::parse(text) {
                let printed = tree.to_string();
                assert_eq!(
                    crate::filter::sql::parse(&printed).ok(),
                    Some(tree),
                    "{text:?} printed as {printed:?}"
                );
            }
            if let Ok(filter) = crate::filter::SqlFilter::compile(text) {
                let _ = filter.evaluate(&properties);
            }
        },
    );
    let mut core = fresh_core();
    let mut name_server = NameServerCore::default();
    let mut handled = 0u64;
    total += drive(
        "broker_mutated_frames",
        budget,
        &mut rng,
        &seeds.frames,
        |input, rng| {
            if input.len() < 4 {
                return;
            }
            if let Ok(command) = RemotingCommand::decode(Bytes::from(input[4..].to_vec())) {
                let _ = name_server.handle(&command);
                let _ = core.handle(1 + rng.below(3) as u64, command, NOW);
                handled += 1;
                // A fresh core now and then keeps memory bounded (sends accumulate).
                if handled.is_multiple_of(20_000) {
                    core = fresh_core();
                }
            }
        },
    );
    let mut core = fresh_core();
    let mut requests = 0u64;
    let mut clock = NOW;
    total += drive(
        "broker_structured_requests",
        budget,
        &mut rng,
        &seeds.frames,
        |_, rng| {
            let command = structured_request(rng, &seeds);
            let _ = name_server.handle(&command);
            let conn = 1 + rng.below(3) as u64;
            let _ = core.handle(conn, command, clock);
            requests += 1;
            if requests.is_multiple_of(97) {
                clock += 1_000;
                let _ = core.on_tick(clock);
            }
            if requests.is_multiple_of(20_000) {
                core = fresh_core();
            }
        },
    );
    println!("{{\"target\":\"all\",\"cases\":{total},\"seconds\":{seconds}}}");
}
