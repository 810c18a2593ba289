//! Encoding batch bodies (producer side of `SEND_BATCH_MESSAGE`) and stored records (what a
//! broker writes to its commit log and returns in pull bodies).

use bytes::{BufMut, Bytes, BytesMut};
use std::net::{IpAddr, SocketAddr};

use super::decode::{MAGIC_CODE_V1, MAGIC_CODE_V2};
use super::model::{Message, MessageExt};
use super::sys_flag;
use crate::error::ProtocolError;

/// Largest properties section a record can carry (its length is an i16).
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;
/// Longest topic a V1 record can carry (its length is an i8); longer topics switch to V2.
pub const MAX_V1_TOPIC_LEN: usize = i8::MAX as usize;
/// Longest topic a V2 record can carry (its length is an i16).
pub const MAX_TOPIC_LEN: usize = i16::MAX as usize;

fn too_long(what: &str, len: usize, limit: usize) -> ProtocolError {
    ProtocolError::InvalidMessage(format!(
        "{what} of {len} bytes exceeds the limit of {limit}"
    ))
}

fn body_len_i32(body: &[u8]) -> Result<i32, ProtocolError> {
    i32::try_from(body.len()).map_err(|_| too_long("body", body.len(), i32::MAX as usize))
}

fn properties_len_i16(len: usize) -> Result<i16, ProtocolError> {
    i16::try_from(len).map_err(|_| too_long("properties", len, MAX_PROPERTIES_LEN))
}

/// The compact record of one message in a batch body.
fn write_compact(message: &Message, dst: &mut BytesMut) -> Result<(), ProtocolError> {
    let body_len = body_len_i32(&message.body)?;
    let properties_len = message.properties.wire_len();
    let properties_len_field = properties_len_i16(properties_len)?;
    let total = 4 + 4 + 4 + 4 + 4 + message.body.len() + 2 + properties_len;
    let total = i32::try_from(total).map_err(|_| too_long("message", total, i32::MAX as usize))?;
    dst.reserve(total as usize);
    dst.put_i32(total);
    dst.put_i32(0); // MAGICCODE: unused in batch bodies
    dst.put_i32(0); // BODYCRC: the broker computes it
    dst.put_i32(message.flag);
    dst.put_i32(body_len);
    dst.put_slice(&message.body);
    dst.put_i16(properties_len_field);
    message.properties.write_wire(dst);
    Ok(())
}

/// Encodes the body of a `SEND_BATCH_MESSAGE` request like Java's
/// `MessageDecoder.encodeMessages`: per message `TOTALSIZE, MAGICCODE(0), BODYCRC(0), FLAG,
/// BODYLEN+BODY, PROPERTIESLEN(i16)+PROPERTIES`. Topics are not encoded (the header has it).
///
/// Fails when a message's properties exceed 32 767 bytes.
pub fn try_encode_batch_body(messages: &[Message]) -> Result<Bytes, ProtocolError> {
    let estimate: usize = messages
        .iter()
        .map(|m| 22 + m.body.len() + m.properties.raw_wire().len())
        .sum();
    let mut dst = BytesMut::with_capacity(estimate);
    for message in messages {
        write_compact(message, &mut dst)?;
    }
    Ok(dst.freeze())
}

/// [`try_encode_batch_body`] for callers that validated the messages: a message that cannot
/// be encoded (properties over 32 767 bytes) is left out and logged.
///
/// ```
/// use rocketmq_actor::message::{decode_batch_body, encode_batch_body};
/// use rocketmq_actor::Message;
/// let batch = [Message::new("T", "a").with_tags("x"), Message::new("T", "bb")];
/// let decoded = decode_batch_body(encode_batch_body(&batch)).unwrap();
/// assert_eq!(decoded[0].tags(), Some("x"));
/// assert_eq!(&decoded[1].body[..], b"bb");
/// ```
pub fn encode_batch_body(messages: &[Message]) -> Bytes {
    let mut dst = BytesMut::new();
    for message in messages {
        let mark = dst.len();
        if let Err(err) = write_compact(message, &mut dst) {
            dst.truncate(mark);
            tracing::error!(topic = %message.topic, %err, "message left out of the batch body");
        }
    }
    dst.freeze()
}

/// Layout facts of a stored record, computed once and checked against the field widths.
struct StoredLayout {
    total: usize,
    v2: bool,
    sys_flag: i32,
    properties_len: usize,
}

fn host_len(host: &SocketAddr) -> usize {
    match host.ip() {
        IpAddr::V4(_) => 8,
        IpAddr::V6(_) => 20,
    }
}

fn stored_layout(msg: &MessageExt) -> Result<StoredLayout, ProtocolError> {
    let topic_len = msg.message.topic.len();
    if topic_len > MAX_TOPIC_LEN {
        return Err(too_long("topic", topic_len, MAX_TOPIC_LEN));
    }
    let v2 = topic_len > MAX_V1_TOPIC_LEN;
    let properties_len = msg.message.properties.wire_len();
    properties_len_i16(properties_len)?;
    body_len_i32(&msg.message.body)?;
    let total = 4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + host_len(&msg.born_host)
        + 8
        + host_len(&msg.store_host)
        + 4
        + 8
        + 4
        + msg.message.body.len()
        + if v2 { 2 } else { 1 }
        + topic_len
        + 2
        + properties_len;
    if i32::try_from(total).is_err() {
        return Err(too_long("record", total, i32::MAX as usize));
    }
    let mut flag = msg.sys_flag & !(sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6);
    if msg.born_host.is_ipv6() {
        flag |= sys_flag::BORNHOST_V6;
    }
    if msg.store_host.is_ipv6() {
        flag |= sys_flag::STOREHOST_V6;
    }
    Ok(StoredLayout {
        total,
        v2,
        sys_flag: flag,
        properties_len,
    })
}

/// Size in bytes of the record [`encode_stored_message`] writes for `msg`.
pub fn stored_record_len(msg: &MessageExt) -> Result<usize, ProtocolError> {
    stored_layout(msg).map(|layout| layout.total)
}

/// Checks that `msg` fits the stored-record format (topic ≤ 32 767 bytes, properties
/// ≤ 32 767 bytes, record < 2 GiB). A broker calls this before accepting a message.
pub fn check_storable(msg: &MessageExt) -> Result<(), ProtocolError> {
    stored_layout(msg).map(|_| ())
}

/// Writes `msg` as a broker stores it (protocol.md §3.1) and returns the record size.
///
/// The record is V1, or V2 when the topic is longer than 127 bytes; hosts are written as
/// IPv4 or IPv6 according to their addresses (setting sysFlag bits 0x10/0x20 to match);
/// `TOTALSIZE` and `BODYCRC` (`crc32 & 0x7FFFFFFF` of the body as given) are computed, so
/// `msg.store_size` and `msg.body_crc` are ignored. The body is written as is: set
/// [`sys_flag::COMPRESSED`] and pass the compressed bytes to store a compressed message.
pub fn try_encode_stored_message(
    msg: &MessageExt,
    dst: &mut BytesMut,
) -> Result<usize, ProtocolError> {
    let layout = stored_layout(msg)?;
    let message = &msg.message;
    dst.reserve(layout.total);
    // Every narrowing below was range-checked by `stored_layout`.
    dst.put_i32(layout.total as i32);
    dst.put_i32(if layout.v2 {
        MAGIC_CODE_V2
    } else {
        MAGIC_CODE_V1
    });
    dst.put_i32((crc32fast::hash(&message.body) & 0x7FFF_FFFF) as i32);
    dst.put_i32(msg.queue_id);
    dst.put_i32(message.flag);
    dst.put_i64(msg.queue_offset);
    dst.put_i64(msg.commit_log_offset);
    dst.put_i32(layout.sys_flag);
    dst.put_i64(msg.born_timestamp);
    put_host(dst, &msg.born_host);
    dst.put_i64(msg.store_timestamp);
    put_host(dst, &msg.store_host);
    dst.put_i32(msg.reconsume_times);
    dst.put_i64(msg.prepared_transaction_offset);
    dst.put_i32(message.body.len() as i32);
    dst.put_slice(&message.body);
    if layout.v2 {
        dst.put_i16(message.topic.len() as i16);
    } else {
        dst.put_i8(message.topic.len() as i8);
    }
    dst.put_slice(message.topic.as_bytes());
    dst.put_i16(layout.properties_len as i16);
    message.properties.write_wire(dst);
    Ok(layout.total)
}

/// [`try_encode_stored_message`] for callers that ran [`check_storable`]: a message that does
/// not fit the format writes nothing and is logged.
pub fn encode_stored_message(msg: &MessageExt, dst: &mut BytesMut) {
    if let Err(err) = try_encode_stored_message(msg, dst) {
        tracing::error!(topic = %msg.message.topic, %err, "message not encoded");
    }
}

fn put_host(dst: &mut BytesMut, host: &SocketAddr) {
    match host.ip() {
        IpAddr::V4(ip) => dst.put_slice(&ip.octets()),
        IpAddr::V6(ip) => dst.put_slice(&ip.octets()),
    }
    dst.put_i32(i32::from(host.port()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::decode::tests::{self as golden, golden_compact, Golden};
    use crate::message::{decode_batch_body, decode_messages, Properties};
    use proptest::prelude::*;

    fn crc(body: &[u8]) -> i32 {
        (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
    }

    /// The MessageExt the golden record describes.
    fn golden_ext(body: &[u8], props: &str, born: &str, store: &str, topic: &str) -> MessageExt {
        MessageExt {
            message: Message {
                topic: topic.into(),
                flag: golden::FLAG,
                properties: Properties::parse(props),
                body: Bytes::copy_from_slice(body),
            },
            broker_name: crate::message::model::no_broker(),
            queue_id: golden::QUEUE_ID,
            store_size: 0,
            queue_offset: golden::QUEUE_OFFSET,
            sys_flag: 0,
            born_timestamp: golden::BORN_TS,
            born_host: born.parse().unwrap(),
            store_timestamp: golden::STORE_TS,
            store_host: store.parse().unwrap(),
            commit_log_offset: golden::PHYSICAL_OFFSET,
            body_crc: 0,
            reconsume_times: golden::RECONSUME,
            prepared_transaction_offset: golden::PREPARED,
        }
    }

    #[test]
    fn body_crc_is_java_crc32_masked() {
        // CRC-32/IEEE check value of "123456789" is 0xCBF43926.
        assert_eq!(crc(b"123456789"), 0x4BF4_3926);
    }

    #[test]
    fn ipv4_record_matches_the_golden_layout() {
        let props = "TAGS\u{1}TagA\u{2}KEYS\u{1}k1\u{2}";
        let ext = golden_ext(
            b"payload",
            props,
            "10.0.0.1:51000",
            "127.0.0.1:10911",
            "TopicTest",
        );
        let mut dst = BytesMut::new();
        let written = try_encode_stored_message(&ext, &mut dst).unwrap();
        let expected = Golden {
            body_crc: crc(b"payload"),
            ..Golden::simple(b"payload", b"TAGS\x01TagA\x02KEYS\x01k1\x02")
        }
        .bytes();
        assert_eq!(&dst[..], &expected[..]);
        assert_eq!(written, expected.len());
        assert_eq!(stored_record_len(&ext).unwrap(), expected.len());
    }

    #[test]
    fn ipv6_record_matches_the_golden_layout_and_sets_the_flags() {
        let ext = golden_ext(
            b"v6",
            "",
            "[2001:db8::42]:40000",
            "[::1]:10911",
            "TopicTest",
        );
        let mut dst = BytesMut::new();
        encode_stored_message(&ext, &mut dst);
        let born_ip: [u8; 16] = [
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42,
        ];
        let store_ip: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let expected = Golden {
            sys_flag: sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6,
            body_crc: crc(b"v6"),
            born: (&born_ip, 40_000),
            store: (&store_ip, 10_911),
            ..Golden::simple(b"v6", b"")
        }
        .bytes();
        assert_eq!(&dst[..], &expected[..]);
    }

    #[test]
    fn topics_over_127_bytes_switch_to_v2() {
        let magic_of = |topic_len: usize| {
            let ext = golden_ext(b"", "", "10.0.0.1:1", "10.0.0.2:2", &"t".repeat(topic_len));
            let mut dst = BytesMut::new();
            encode_stored_message(&ext, &mut dst);
            i32::from_be_bytes(dst[4..8].try_into().unwrap())
        };
        assert_eq!(magic_of(127), MAGIC_CODE_V1);
        assert_eq!(magic_of(128), MAGIC_CODE_V2);

        let topic = "t".repeat(200);
        let ext = golden_ext(
            b"x",
            "A\u{1}1\u{2}",
            "10.0.0.1:51000",
            "127.0.0.1:10911",
            &topic,
        );
        let mut dst = BytesMut::new();
        encode_stored_message(&ext, &mut dst);
        let expected = Golden {
            magic: MAGIC_CODE_V2,
            body_crc: crc(b"x"),
            topic: topic.as_bytes(),
            ..Golden::simple(b"x", b"A\x011\x02")
        }
        .bytes();
        assert_eq!(&dst[..], &expected[..]);
    }

    #[test]
    fn records_that_do_not_fit_are_refused_without_writing() {
        let huge = "v".repeat(40_000);
        let mut ext = golden_ext(b"", "", "10.0.0.1:1", "10.0.0.2:2", "T");
        ext.message.properties.insert("big", &huge);
        assert!(check_storable(&ext).is_err());
        let mut dst = BytesMut::new();
        assert!(try_encode_stored_message(&ext, &mut dst).is_err());
        encode_stored_message(&ext, &mut dst);
        assert!(dst.is_empty());
        assert!(try_encode_batch_body(&[ext.message.clone()]).is_err());
        let ok = Message::new("T", "fine");
        let body = encode_batch_body(&[ext.message, ok.clone()]);
        let decoded = decode_batch_body(body).unwrap();
        assert_eq!(decoded.len(), 1);
        assert_eq!(decoded[0].body, ok.body);
    }

    #[test]
    fn batch_body_matches_the_java_layout() {
        let messages = [
            Message::new("T", "alpha").with_flag(5).with_tags("x"),
            Message::new("T", "").with_property("UNIQ_KEY", "ID"),
        ];
        let mut expected = golden_compact(5, b"alpha", b"TAGS\x01x\x02");
        expected.extend(golden_compact(0, b"", b"UNIQ_KEY\x01ID\x02"));
        assert_eq!(&encode_batch_body(&messages)[..], &expected[..]);
        assert_eq!(
            &try_encode_batch_body(&messages).unwrap()[..],
            &expected[..]
        );
    }

    #[test]
    fn non_canonical_properties_are_written_as_java_would() {
        let mut ext = golden_ext(b"", "", "10.0.0.1:51000", "127.0.0.1:10911", "TopicTest");
        ext.message.properties = Properties::parse("A\u{1}1\u{2}junk\u{2}A\u{1}2");
        let mut dst = BytesMut::new();
        encode_stored_message(&ext, &mut dst);
        let expected = Golden {
            body_crc: crc(b""),
            ..Golden::simple(b"", b"A\x012\x02")
        }
        .bytes();
        assert_eq!(&dst[..], &expected[..]);
    }

    fn arb_host() -> impl Strategy<Value = SocketAddr> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
            (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
        ]
    }

    fn arb_properties() -> impl Strategy<Value = Properties> {
        proptest::collection::vec(("[A-Za-z_]{1,12}", "[ -~é标]{1,20}"), 0..8)
            .prop_map(|pairs| pairs.into_iter().collect())
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        (
            "[A-Za-z0-9%_-]{1,300}",
            any::<i32>(),
            arb_properties(),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(|(topic, flag, properties, body)| Message {
                topic: topic.into(),
                flag,
                properties,
                body: Bytes::from(body),
            })
    }

    prop_compose! {
        fn arb_ext()(
            message in arb_message(),
            queue_id in any::<i32>(),
            queue_offset in any::<i64>(),
            // Compression and unwrap bits change what decoding returns; they get their own tests.
            sys_flag in any::<i32>().prop_map(|f| f & !(sys_flag::COMPRESSED | sys_flag::NEED_UNWRAP)),
            born_timestamp in any::<i64>(),
            born_host in arb_host(),
            store_timestamp in any::<i64>(),
            store_host in arb_host(),
            commit_log_offset in any::<i64>(),
            reconsume_times in any::<i32>(),
            prepared_transaction_offset in any::<i64>(),
        ) -> MessageExt {
            MessageExt {
                message, broker_name: crate::message::model::no_broker(), queue_id, store_size: 0, queue_offset,
                sys_flag, born_timestamp, born_host, store_timestamp, store_host,
                commit_log_offset, body_crc: 0, reconsume_times, prepared_transaction_offset,
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn stored_records_round_trip(exts in proptest::collection::vec(arb_ext(), 1..4)) {
            let mut wire = BytesMut::new();
            let mut expected = Vec::new();
            for ext in &exts {
                let start = wire.len();
                encode_stored_message(ext, &mut wire);
                let mut want = ext.clone();
                want.store_size = (wire.len() - start) as i32;
                want.body_crc = crc(&ext.message.body);
                want.sys_flag &= !(sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6);
                if ext.born_host.is_ipv6() { want.sys_flag |= sys_flag::BORNHOST_V6; }
                if ext.store_host.is_ipv6() { want.sys_flag |= sys_flag::STOREHOST_V6; }
                expected.push(want);
            }
            prop_assert_eq!(decode_messages(wire.freeze()).unwrap(), expected);
        }

        #[test]
        fn compressed_records_round_trip(ext in arb_ext(), kind in prop_oneof![
            Just(crate::message::CompressionType::Zlib),
            Just(crate::message::CompressionType::Lz4),
            Just(crate::message::CompressionType::Zstd),
        ]) {
            let mut stored = ext.clone();
            stored.message.body =
                Bytes::from(crate::message::compress(kind, &ext.message.body, 5).unwrap());
            stored.sys_flag = (ext.sys_flag & !sys_flag::COMPRESSION_TYPE_MASK) | kind.sys_flag_bits();
            let mut wire = BytesMut::new();
            encode_stored_message(&stored, &mut wire);
            let decoded = decode_messages(wire.freeze()).unwrap();
            prop_assert_eq!(&decoded[0].message.body, &ext.message.body);
            prop_assert_eq!(decoded[0].sys_flag & sys_flag::COMPRESSED, 0);
        }

        #[test]
        fn batch_bodies_round_trip(messages in proptest::collection::vec(arb_message(), 0..6)) {
            let decoded = decode_batch_body(encode_batch_body(&messages)).unwrap();
            let expected: Vec<Message> = messages
                .into_iter()
                .map(|m| Message { topic: crate::message::Topic::default(), ..m })
                .collect();
            prop_assert_eq!(decoded, expected);
        }

        #[test]
        fn inner_batches_built_by_the_encoders_unwrap(
            outer in arb_ext(),
            messages in proptest::collection::vec(arb_message(), 1..5),
        ) {
            let mut outer = outer;
            outer.message.body = encode_batch_body(&messages);
            outer.sys_flag |= sys_flag::INNER_BATCH | sys_flag::NEED_UNWRAP;
            let mut wire = BytesMut::new();
            encode_stored_message(&outer, &mut wire);
            let decoded = decode_messages(wire.freeze()).unwrap();
            prop_assert_eq!(decoded.len(), messages.len());
            for (i, (got, sent)) in decoded.iter().zip(&messages).enumerate() {
                prop_assert_eq!(got.queue_offset, outer.queue_offset.wrapping_add(i as i64));
                prop_assert_eq!(&got.message.body, &sent.body);
                prop_assert_eq!(got.topic(), outer.topic());
                prop_assert_eq!(got.tags(), sent.tags());
            }
        }
    }
}
