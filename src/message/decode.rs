//! Decoding stored message records (pull bodies, `CONSUME_MESSAGE_DIRECTLY` bodies) and the
//! compact records of batch bodies.
//!
//! Bodies and properties of the decoded messages are zero-copy slices of the input buffer
//! (a decompressed body is the only copy made).

use bytes::Bytes;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use super::compression::{decompress, CompressionType};
use super::model::{Message, MessageExt};
use super::properties::{property, Properties};
use super::sys_flag;
use super::topic::Topic;
use crate::error::ProtocolError;

/// `MAGICCODE` of a V1 record (topic length is an i8).
pub const MAGIC_CODE_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// `MAGICCODE` of a V2 record (topic length is an i16).
pub const MAGIC_CODE_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// `MAGICCODE` of the blank filler at the end of a commit-log file (never a message).
pub const BLANK_MAGIC_CODE: i32 = 0xCBD4_3194_u32 as i32;

fn invalid(what: impl Into<String>) -> ProtocolError {
    ProtocolError::InvalidMessage(what.into())
}

/// A bounds-checked big-endian cursor over one record: `rest` is what is left of it and
/// `end` the absolute offset (in the whole buffer) where the record ends.
struct Cursor<'a> {
    rest: &'a [u8],
    end: usize,
}

#[cold]
#[inline(never)]
fn truncated(field: &'static str) -> ProtocolError {
    invalid(format!("record truncated in {field}"))
}

#[cold]
#[inline(never)]
fn negative(field: &'static str, value: i64) -> ProtocolError {
    invalid(format!("negative {field}: {value}"))
}

impl<'a> Cursor<'a> {
    /// A cursor over `whole[start..end]`.
    fn new(whole: &'a [u8], start: usize, end: usize) -> Result<Self, ProtocolError> {
        let rest = whole
            .get(start..end)
            .ok_or_else(|| truncated("TOTALSIZE"))?;
        Ok(Cursor { rest, end })
    }

    /// Absolute offset of the next unread byte.
    #[inline(always)]
    fn pos(&self) -> usize {
        self.end - self.rest.len()
    }

    #[inline(always)]
    fn take(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], ProtocolError> {
        let (head, tail) = self
            .rest
            .split_at_checked(len)
            .ok_or_else(|| truncated(field))?;
        self.rest = tail;
        Ok(head)
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ProtocolError> {
        let (head, tail) = self
            .rest
            .split_first_chunk::<N>()
            .ok_or_else(|| truncated(field))?;
        self.rest = tail;
        Ok(*head)
    }

    #[inline(always)]
    fn i8(&mut self, field: &'static str) -> Result<i8, ProtocolError> {
        Ok(i8::from_be_bytes(self.array(field)?))
    }

    #[inline(always)]
    fn i16(&mut self, field: &'static str) -> Result<i16, ProtocolError> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    #[inline(always)]
    fn i32(&mut self, field: &'static str) -> Result<i32, ProtocolError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    #[inline(always)]
    fn i64(&mut self, field: &'static str) -> Result<i64, ProtocolError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// A non-negative length field turned into `usize`.
    #[inline(always)]
    fn len_from(value: i64, field: &'static str) -> Result<usize, ProtocolError> {
        usize::try_from(value).map_err(|_| negative(field, value))
    }

    #[inline(always)]
    fn host(&mut self, v6: bool, field: &'static str) -> Result<SocketAddr, ProtocolError> {
        let ip = if v6 {
            IpAddr::V6(Ipv6Addr::from(self.array::<16>(field)?))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.array::<4>(field)?))
        };
        let port = self.i32(field)?;
        let port = u16::try_from(port).map_err(|_| bad_port(field, port))?;
        Ok(SocketAddr::new(ip, port))
    }
}

#[cold]
#[inline(never)]
fn bad_port(field: &'static str, port: i32) -> ProtocolError {
    invalid(format!("{field} port out of range: {port}"))
}

/// Reads the 4-byte TOTALSIZE at `start` and returns where the record ends.
#[inline(always)]
fn record_end(whole: &[u8], start: usize) -> Result<(i32, usize), ProtocolError> {
    let size_bytes = whole
        .get(start..)
        .and_then(|rest| rest.first_chunk::<4>())
        .ok_or_else(|| truncated("TOTALSIZE"))?;
    let size = i32::from_be_bytes(*size_bytes);
    let len = Cursor::len_from(i64::from(size), "TOTALSIZE")?;
    let end = start
        .checked_add(len)
        .filter(|&end| end <= whole.len())
        .ok_or_else(|| oversized(size, whole.len().saturating_sub(start)))?;
    Ok((size, end))
}

#[cold]
#[inline(never)]
fn oversized(size: i32, remaining: usize) -> ProtocolError {
    invalid(format!(
        "TOTALSIZE {size} exceeds the {remaining} remaining bytes"
    ))
}

/// Slices `[start, start + len)` out of `whole` after checking it lies inside.
fn slice_of(whole: &Bytes, start: usize, len: usize) -> Bytes {
    // The cursor already checked the range; `get` keeps this total anyway.
    match start.checked_add(len) {
        Some(stop) if stop <= whole.len() => whole.slice(start..stop),
        _ => Bytes::new(),
    }
}

/// Decodes the stored record at the front of `buf` and advances `buf` past it.
///
/// The body is decompressed (and the `COMPRESSED` bit cleared) when flagged; an inner batch is
/// returned as one message (use [`decode_messages`] to expand it). Fails on any malformed
/// record: truncation, negative lengths, an unknown magic code, a port out of range, invalid
/// UTF-8 in the topic or properties, or a body that does not decompress.
pub fn decode_message(buf: &mut Bytes) -> Result<MessageExt, ProtocolError> {
    let mut out = Vec::with_capacity(1);
    let next = decode_into(buf, 0, &crate::message::model::no_broker(), &mut out)?;
    *buf = buf.slice(next.min(buf.len())..);
    out.pop().ok_or_else(|| truncated("record"))
}

/// Decodes the record starting at `start`, appends it to `out` and returns where the next one
/// starts. (Pushing in place avoids moving the large struct through a return value.)
fn decode_into(
    whole: &Bytes,
    start: usize,
    broker_name: &Arc<str>,
    out: &mut Vec<MessageExt>,
) -> Result<usize, ProtocolError> {
    let (store_size, record_end) = record_end(whole, start)?;
    let mut cursor = Cursor::new(whole, start, record_end)?;
    cursor.i32("TOTALSIZE")?;

    let magic = cursor.i32("MAGICCODE")?;
    let v2 = match magic {
        MAGIC_CODE_V1 => false,
        MAGIC_CODE_V2 => true,
        other => return Err(invalid(format!("unknown magic code {other:#010x}"))),
    };
    let body_crc = cursor.i32("BODYCRC")?;
    let queue_id = cursor.i32("QUEUEID")?;
    let flag = cursor.i32("FLAG")?;
    let queue_offset = cursor.i64("QUEUEOFFSET")?;
    let commit_log_offset = cursor.i64("PHYSICALOFFSET")?;
    let mut sys_flag = cursor.i32("SYSFLAG")?;
    let born_timestamp = cursor.i64("BORNTIMESTAMP")?;
    let born_host = cursor.host(sys_flag & sys_flag::BORNHOST_V6 != 0, "BORNHOST")?;
    let store_timestamp = cursor.i64("STORETIMESTAMP")?;
    let store_host = cursor.host(sys_flag & sys_flag::STOREHOST_V6 != 0, "STOREHOST")?;
    let reconsume_times = cursor.i32("RECONSUMETIMES")?;
    let prepared_transaction_offset = cursor.i64("PREPAREDTRANSACTIONOFFSET")?;

    let body_len = Cursor::len_from(i64::from(cursor.i32("BODYLEN")?), "BODYLEN")?;
    let body_start = cursor.pos();
    cursor.take(body_len, "BODY")?;
    let mut body = slice_of(whole, body_start, body_len);
    if sys_flag::is_compressed(sys_flag) {
        if !body.is_empty() {
            let kind = CompressionType::from_sys_flag(sys_flag).ok_or_else(|| {
                invalid(format!("unknown compression type in sysFlag {sys_flag:#x}"))
            })?;
            body = Bytes::from(decompress(kind, &body)?);
        }
        sys_flag &= !sys_flag::COMPRESSED;
    }

    let topic_len = if v2 {
        i64::from(cursor.i16("TOPICLEN")?)
    } else {
        i64::from(cursor.i8("TOPICLEN")?)
    };
    let topic_len = Cursor::len_from(topic_len, "TOPICLEN")?;
    let topic_bytes = cursor.take(topic_len, "TOPIC")?;
    // The records of one pull name one topic: they share the first one's name.
    let topic = match out.last() {
        Some(previous) if previous.message.topic.as_bytes() == topic_bytes => {
            previous.message.topic.clone()
        }
        _ => Topic::from(
            std::str::from_utf8(topic_bytes).map_err(|_| invalid("topic is not valid UTF-8"))?,
        ),
    };

    let properties_len =
        Cursor::len_from(i64::from(cursor.i16("PROPERTIESLEN")?), "PROPERTIESLEN")?;
    let properties_start = cursor.pos();
    cursor.take(properties_len, "PROPERTIES")?;
    let properties = Properties::from_wire(slice_of(whole, properties_start, properties_len))?;

    out.push(MessageExt {
        message: Message {
            topic,
            flag,
            properties,
            body,
        },
        broker_name: Arc::clone(broker_name),
        queue_id,
        store_size,
        queue_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        commit_log_offset,
        body_crc,
        reconsume_times,
        prepared_transaction_offset,
    });
    Ok(record_end)
}

/// The properties of one stored record, as wire text, found from the length fields alone
/// (nothing decoded or copied): what a broker evaluates a SQL92 selector over. `None` for a
/// record too short or of an unknown magic code.
#[cfg(any(feature = "embedded", test))]
pub(crate) fn stored_properties(raw: &[u8]) -> Option<&[u8]> {
    fn i32_at(raw: &[u8], at: usize) -> Option<i32> {
        Some(i32::from_be_bytes(raw.get(at..at + 4)?.try_into().ok()?))
    }
    let v2 = match i32_at(raw, 4)? {
        MAGIC_CODE_V1 => false,
        MAGIC_CODE_V2 => true,
        _ => return None,
    };
    let sys_flag = i32_at(raw, 36)?;
    let host_len = |v6: bool| if v6 { 20 } else { 8 };
    // SYSFLAG, BORNTIMESTAMP, BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES,
    // PREPAREDTRANSACTIONOFFSET, then BODYLEN.
    let body_len_at = 40
        + 8
        + host_len(sys_flag & sys_flag::BORNHOST_V6 != 0)
        + 8
        + host_len(sys_flag & sys_flag::STOREHOST_V6 != 0)
        + 4
        + 8;
    let body_len = usize::try_from(i32_at(raw, body_len_at)?).ok()?;
    let topic_len_at = body_len_at + 4 + body_len;
    let (topic_len, after_len) = if v2 {
        let bytes = raw.get(topic_len_at..topic_len_at + 2)?;
        (
            usize::try_from(i16::from_be_bytes(bytes.try_into().ok()?)).ok()?,
            topic_len_at + 2,
        )
    } else {
        let byte = *raw.get(topic_len_at)?;
        (
            usize::try_from(i8::from_be_bytes([byte])).ok()?,
            topic_len_at + 1,
        )
    };
    let properties_len_at = after_len + topic_len;
    let bytes = raw.get(properties_len_at..properties_len_at + 2)?;
    let properties_len = usize::try_from(i16::from_be_bytes(bytes.try_into().ok()?)).ok()?;
    let start = properties_len_at + 2;
    raw.get(start..start + properties_len)
}

/// How many stored records `body` holds, read from their size fields only (an inner batch
/// counts as one; a malformed tail ends the count). Cheap enough to size a buffered pull answer
/// without decoding it.
pub(crate) fn count_records(body: &[u8]) -> usize {
    let mut count = 0;
    let mut pos = 0usize;
    while let Some(size) = body.get(pos..pos + 4) {
        let size = i32::from_be_bytes([size[0], size[1], size[2], size[3]]);
        let Ok(size) = usize::try_from(size) else {
            break;
        };
        if size < 4 || pos + size > body.len() {
            break;
        }
        count += 1;
        pos += size;
    }
    count
}

/// Decodes a whole pull body: every stored record in it, decompressing bodies and expanding
/// inner batches (the i-th inner message gets `queue_offset = outer + i`).
///
/// Unlike Java, which silently stops at the first bad record, any malformed record fails the
/// whole body.
///
/// ```
/// use bytes::BytesMut;
/// use rocketmq_actor::message::{decode_messages, encode_stored_message};
/// use rocketmq_actor::{Message, MessageExt};
/// let mut ext = MessageExt::from(Message::new("TopicTest", "hello").with_tags("TagA"));
/// ext.queue_offset = 7;
/// let mut wire = BytesMut::new();
/// encode_stored_message(&ext, &mut wire);
/// let decoded = decode_messages(wire.freeze()).unwrap();
/// assert_eq!(decoded.len(), 1);
/// assert_eq!(decoded[0].queue_offset, 7);
/// assert_eq!(decoded[0].tags(), Some("TagA"));
/// assert_eq!(&decoded[0].body()[..], b"hello");
/// ```
pub fn decode_messages(body: Bytes) -> Result<Vec<MessageExt>, ProtocolError> {
    decode_messages_of(body, &crate::message::model::no_broker())
}

/// [`decode_messages`] for messages of the broker `broker_name`, set as they are decoded
/// (one count up each, instead of an empty name's and then the broker's).
pub(crate) fn decode_messages_of(
    body: Bytes,
    broker_name: &Arc<str>,
) -> Result<Vec<MessageExt>, ProtocolError> {
    // A typical 128-byte message makes a ~300-byte record; over-reserving is cheap.
    let mut messages = Vec::with_capacity(body.len() / 200 + 1);
    let mut pos = 0;
    while pos < body.len() {
        pos = decode_into(&body, pos, broker_name, &mut messages)?;
        let unwrap = messages
            .last()
            .is_some_and(|m| sys_flag::needs_unwrap(m.sys_flag));
        if unwrap {
            if let Some(outer) = messages.pop() {
                unwrap_inner_batch(outer, &mut messages)?;
            }
        }
    }
    Ok(messages)
}

/// Expands an inner-batch record the way Java's `MessageDecoder.decodeMessage(MessageExt, List)`
/// does: per-message flag, body and properties; everything else from the outer record.
fn unwrap_inner_batch(outer: MessageExt, out: &mut Vec<MessageExt>) -> Result<(), ProtocolError> {
    let wait = if outer.message.wait_store_msg_ok() {
        "true"
    } else {
        "false"
    };
    let batch = &outer.message.body;
    let mut pos = 0;
    let mut index: i64 = 0;
    while pos < batch.len() {
        let (inner, next) = decode_compact_at(batch, pos)?;
        pos = next;
        let mut properties = inner.properties;
        properties.insert(property::WAIT, wait);
        out.push(MessageExt {
            message: Message {
                topic: outer.message.topic.clone(),
                flag: inner.flag,
                properties,
                body: inner.body,
            },
            broker_name: outer.broker_name.clone(),
            queue_id: outer.queue_id,
            store_size: inner.size,
            queue_offset: outer.queue_offset.wrapping_add(index),
            sys_flag: outer.sys_flag,
            born_timestamp: outer.born_timestamp,
            born_host: outer.born_host,
            store_timestamp: outer.store_timestamp,
            store_host: outer.store_host,
            commit_log_offset: outer.commit_log_offset,
            body_crc: 0,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        });
        index += 1;
    }
    Ok(())
}

/// One compact record of a batch body.
struct CompactRecord {
    size: i32,
    flag: i32,
    body: Bytes,
    properties: Properties,
}

/// Decodes the compact record (`TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLEN+BODY,
/// PROPERTIESLEN(i16)+PROPERTIES`) at `start`; returns it and where the next one starts.
fn decode_compact_at(whole: &Bytes, start: usize) -> Result<(CompactRecord, usize), ProtocolError> {
    let (size, record_end) = record_end(whole, start)?;
    let mut cursor = Cursor::new(whole, start, record_end)?;
    cursor.i32("TOTALSIZE")?;
    let _magic = cursor.i32("MAGICCODE")?;
    let _body_crc = cursor.i32("BODYCRC")?;
    let flag = cursor.i32("FLAG")?;
    let body_len = Cursor::len_from(i64::from(cursor.i32("BODYLEN")?), "BODYLEN")?;
    let body_start = cursor.pos();
    cursor.take(body_len, "BODY")?;
    let properties_len =
        Cursor::len_from(i64::from(cursor.i16("PROPERTIESLEN")?), "PROPERTIESLEN")?;
    let properties_start = cursor.pos();
    cursor.take(properties_len, "PROPERTIES")?;
    let record = CompactRecord {
        size,
        flag,
        body: slice_of(whole, body_start, body_len),
        properties: Properties::from_wire(slice_of(whole, properties_start, properties_len))?,
    };
    Ok((record, record_end))
}

/// Decodes the body of a `SEND_BATCH_MESSAGE` request (broker side): the compact records
/// written by [`encode_batch_body`](super::encode_batch_body). Topics are left empty; the batch
/// topic comes from the request header.
pub fn decode_batch_body(body: Bytes) -> Result<Vec<Message>, ProtocolError> {
    let mut messages = Vec::new();
    let mut pos = 0;
    while pos < body.len() {
        let (record, next) = decode_compact_at(&body, pos)?;
        pos = next;
        messages.push(Message {
            topic: Topic::default(),
            flag: record.flag,
            properties: record.properties,
            body: record.body,
        });
    }
    Ok(messages)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::message::compression::compress;
    use proptest::prelude::*;

    /// Fixed values of the fields the golden records don't vary.
    pub(crate) const BODY_CRC: i32 = 0x1234_5678;
    pub(crate) const QUEUE_ID: i32 = 3;
    pub(crate) const FLAG: i32 = 7;
    pub(crate) const QUEUE_OFFSET: i64 = 100;
    pub(crate) const PHYSICAL_OFFSET: i64 = 2_000;
    pub(crate) const BORN_TS: i64 = 1_700_000_000_000;
    pub(crate) const STORE_TS: i64 = 1_700_000_000_005;
    pub(crate) const RECONSUME: i32 = 2;
    pub(crate) const PREPARED: i64 = 0;

    /// Builds a stored record field by field from protocol.md §3.1, independently of the
    /// encoder; TOTALSIZE is the length of the bytes actually produced.
    pub(crate) struct Golden<'a> {
        pub magic: i32,
        pub sys_flag: i32,
        pub body_crc: i32,
        pub born: (&'a [u8], i32),
        pub store: (&'a [u8], i32),
        pub body: &'a [u8],
        pub topic: &'a [u8],
        pub props: &'a [u8],
    }

    impl Golden<'_> {
        pub(crate) fn simple(body: &'static [u8], props: &'static [u8]) -> Golden<'static> {
            Golden {
                magic: MAGIC_CODE_V1,
                sys_flag: 0,
                body_crc: BODY_CRC,
                born: (&[10, 0, 0, 1], 51_000),
                store: (&[127, 0, 0, 1], 10_911),
                body,
                topic: b"TopicTest",
                props,
            }
        }

        pub(crate) fn bytes(&self) -> Vec<u8> {
            let mut out = vec![0u8; 4]; // TOTALSIZE, patched below
            out.extend_from_slice(&self.magic.to_be_bytes());
            out.extend_from_slice(&self.body_crc.to_be_bytes());
            out.extend_from_slice(&QUEUE_ID.to_be_bytes());
            out.extend_from_slice(&FLAG.to_be_bytes());
            out.extend_from_slice(&QUEUE_OFFSET.to_be_bytes());
            out.extend_from_slice(&PHYSICAL_OFFSET.to_be_bytes());
            out.extend_from_slice(&self.sys_flag.to_be_bytes());
            out.extend_from_slice(&BORN_TS.to_be_bytes());
            out.extend_from_slice(self.born.0);
            out.extend_from_slice(&self.born.1.to_be_bytes());
            out.extend_from_slice(&STORE_TS.to_be_bytes());
            out.extend_from_slice(self.store.0);
            out.extend_from_slice(&self.store.1.to_be_bytes());
            out.extend_from_slice(&RECONSUME.to_be_bytes());
            out.extend_from_slice(&PREPARED.to_be_bytes());
            out.extend_from_slice(&(self.body.len() as i32).to_be_bytes());
            out.extend_from_slice(self.body);
            if self.magic == MAGIC_CODE_V2 {
                out.extend_from_slice(&(self.topic.len() as i16).to_be_bytes());
            } else {
                out.push(self.topic.len() as u8);
            }
            out.extend_from_slice(self.topic);
            out.extend_from_slice(&(self.props.len() as i16).to_be_bytes());
            out.extend_from_slice(self.props);
            let total = out.len() as i32;
            out[..4].copy_from_slice(&total.to_be_bytes());
            out
        }
    }

    /// A compact batch record built field by field.
    pub(crate) fn golden_compact(flag: i32, body: &[u8], props: &[u8]) -> Vec<u8> {
        let total = (4 + 4 + 4 + 4 + 4 + body.len() + 2 + props.len()) as i32;
        let mut out = Vec::new();
        out.extend_from_slice(&total.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&flag.to_be_bytes());
        out.extend_from_slice(&(body.len() as i32).to_be_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(&(props.len() as i16).to_be_bytes());
        out.extend_from_slice(props);
        out
    }

    const PROPS: &[u8] = b"UNIQ_KEY\x01AC110001000078308DB1742F1B0000\x02TAGS\x01TagA\x02KEYS\x01k1 k2\x02WAIT\x01true\x02";

    fn decode_one(bytes: Vec<u8>) -> MessageExt {
        let mut messages = decode_messages(Bytes::from(bytes)).unwrap();
        assert_eq!(messages.len(), 1);
        messages.remove(0)
    }

    #[test]
    fn records_are_counted_from_their_sizes() {
        let one = Golden::simple(b"one", PROPS).bytes();
        let mut body = Vec::new();
        for _ in 0..3 {
            body.extend_from_slice(&one);
        }
        assert_eq!(count_records(&body), 3);
        assert_eq!(
            decode_messages(Bytes::from(body.clone()))
                .map(|m| m.len())
                .ok(),
            Some(3)
        );
        body.extend_from_slice(&[0, 0, 0]);
        assert_eq!(count_records(&body), 3, "a truncated tail is not counted");
        assert_eq!(
            count_records(&[0xff, 0xff, 0xff, 0xff]),
            0,
            "a negative size ends it"
        );
        assert_eq!(count_records(&[]), 0);
    }

    #[test]
    fn golden_ipv4_v1_record_decodes_every_field() {
        let bytes = Golden::simple(b"hello world", PROPS).bytes();
        // 84-byte fixed prefix + body len + body + topic len + topic + props len + props.
        assert_eq!(bytes.len(), 84 + 4 + 11 + 1 + 9 + 2 + PROPS.len());
        let msg = decode_one(bytes.clone());
        assert_eq!(msg.store_size as usize, bytes.len());
        assert_eq!(msg.body_crc, BODY_CRC);
        assert_eq!(msg.queue_id, QUEUE_ID);
        assert_eq!(msg.flag(), FLAG);
        assert_eq!(msg.queue_offset, QUEUE_OFFSET);
        assert_eq!(msg.commit_log_offset, PHYSICAL_OFFSET);
        assert_eq!(msg.sys_flag, 0);
        assert_eq!(msg.born_timestamp, BORN_TS);
        assert_eq!(msg.born_host, "10.0.0.1:51000".parse().unwrap());
        assert_eq!(msg.store_timestamp, STORE_TS);
        assert_eq!(msg.store_host, "127.0.0.1:10911".parse().unwrap());
        assert_eq!(msg.reconsume_times, RECONSUME);
        assert_eq!(msg.prepared_transaction_offset, PREPARED);
        assert_eq!(&msg.body()[..], b"hello world");
        assert_eq!(msg.topic(), "TopicTest");
        assert_eq!(msg.tags(), Some("TagA"));
        assert_eq!(msg.keys(), vec!["k1", "k2"]);
        assert_eq!(msg.property("WAIT"), Some("true"));
        assert_eq!(msg.msg_id(), "AC110001000078308DB1742F1B0000");
        // 127.0.0.1 = 7F000001, port 10911 = 00002A9F, offset 2000 = 00000000000007D0.
        assert_eq!(msg.offset_msg_id(), "7F00000100002A9F00000000000007D0");
        assert!(msg.broker_name.is_empty());
    }

    #[test]
    fn body_and_properties_are_zero_copy_slices_of_the_input() {
        let input = Bytes::from(Golden::simple(b"hello world", PROPS).bytes());
        let range = input.as_ptr() as usize..input.as_ptr() as usize + input.len();
        let msg = decode_messages(input.clone()).unwrap().remove(0);
        assert!(range.contains(&(msg.body().as_ptr() as usize)));
        assert!(range.contains(&(msg.properties().raw_wire().as_ptr() as usize)));
    }

    #[test]
    fn golden_ipv6_hosts_use_20_bytes_each() {
        let born_ip: [u8; 16] = [
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42,
        ];
        let store_ip: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let golden = Golden {
            sys_flag: sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6,
            born: (&born_ip, 40_000),
            store: (&store_ip, 10_911),
            ..Golden::simple(b"v6", PROPS)
        };
        let bytes = golden.bytes();
        assert_eq!(bytes.len(), 84 + 24 + 4 + 2 + 1 + 9 + 2 + PROPS.len());
        let msg = decode_one(bytes);
        assert_eq!(msg.born_host, "[2001:db8::42]:40000".parse().unwrap());
        assert_eq!(msg.store_host, "[::1]:10911".parse().unwrap());
        assert_eq!(msg.offset_msg_id().len(), 56);
        assert_eq!(&msg.body()[..], b"v6");

        // Only the store host is v6.
        let mixed = Golden {
            sys_flag: sys_flag::STOREHOST_V6,
            store: (&store_ip, 10_911),
            ..Golden::simple(b"mixed", b"")
        };
        let msg = decode_one(mixed.bytes());
        assert_eq!(msg.born_host, "10.0.0.1:51000".parse().unwrap());
        assert_eq!(msg.store_host, "[::1]:10911".parse().unwrap());
    }

    #[test]
    fn golden_v2_record_has_a_two_byte_topic_length() {
        let topic = vec![b't'; 200];
        let golden = Golden {
            magic: MAGIC_CODE_V2,
            topic: &topic,
            ..Golden::simple(b"long topic", PROPS)
        };
        let msg = decode_one(golden.bytes());
        assert_eq!(msg.topic(), "t".repeat(200));
        assert_eq!(msg.tags(), Some("TagA"));
    }

    #[test]
    fn compressed_bodies_are_inflated_and_the_flag_cleared() {
        let original: Vec<u8> = b"compress me please "
            .iter()
            .cycle()
            .take(5_000)
            .copied()
            .collect();
        let cases = [
            (0x000, CompressionType::Zlib), // pre-5.x producers: type 0 means zlib
            (sys_flag::COMPRESSION_ZLIB, CompressionType::Zlib),
            (sys_flag::COMPRESSION_LZ4, CompressionType::Lz4),
            (sys_flag::COMPRESSION_ZSTD, CompressionType::Zstd),
        ];
        for (type_bits, kind) in cases {
            let packed = compress(kind, &original, 5).unwrap();
            let golden = Golden {
                sys_flag: sys_flag::COMPRESSED | type_bits,
                body: &packed,
                ..Golden::simple(b"", PROPS)
            };
            let msg = decode_one(golden.bytes());
            assert_eq!(&msg.body()[..], &original[..], "{kind:?}");
            assert_eq!(msg.sys_flag, type_bits, "{kind:?}: only bit 0 is cleared");
        }
    }

    #[test]
    fn zlib_body_made_by_flate2_directly_decodes() {
        use std::io::Write;
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(5));
        encoder.write_all(b"java deflater output").unwrap();
        let packed = encoder.finish().unwrap();
        let golden = Golden {
            sys_flag: sys_flag::COMPRESSED,
            body: &packed,
            ..Golden::simple(b"", b"")
        };
        assert_eq!(
            &decode_one(golden.bytes()).body()[..],
            b"java deflater output"
        );
    }

    #[test]
    fn unknown_compression_type_or_corrupt_body_is_an_error() {
        let golden = Golden {
            sys_flag: sys_flag::COMPRESSED | 0x400,
            ..Golden::simple(b"whatever", b"")
        };
        assert!(decode_messages(Bytes::from(golden.bytes())).is_err());
        let golden = Golden {
            sys_flag: sys_flag::COMPRESSED | sys_flag::COMPRESSION_ZSTD,
            ..Golden::simple(b"not zstd at all", b"")
        };
        assert!(matches!(
            decode_messages(Bytes::from(golden.bytes())),
            Err(ProtocolError::Decompress(_))
        ));
    }

    #[test]
    fn inner_batch_expands_with_consecutive_offsets() {
        let mut batch = Vec::new();
        batch.extend(golden_compact(
            1,
            b"first",
            b"UNIQ_KEY\x01ID1\x02TAGS\x01A\x02",
        ));
        batch.extend(golden_compact(2, b"second", b"UNIQ_KEY\x01ID2\x02"));
        batch.extend(golden_compact(3, b"", b""));
        let flags = sys_flag::INNER_BATCH | sys_flag::NEED_UNWRAP;
        let golden = Golden {
            sys_flag: flags,
            body: &batch,
            ..Golden::simple(b"", b"WAIT\x01false\x02INNER_NUM\x013\x02")
        };
        let messages = decode_messages(Bytes::from(golden.bytes())).unwrap();
        assert_eq!(messages.len(), 3);
        for (i, msg) in messages.iter().enumerate() {
            assert_eq!(msg.queue_offset, QUEUE_OFFSET + i as i64);
            assert_eq!(msg.topic(), "TopicTest");
            assert_eq!(msg.queue_id, QUEUE_ID);
            assert_eq!(msg.flag(), i as i32 + 1);
            assert_eq!(msg.sys_flag, flags);
            assert_eq!(msg.commit_log_offset, PHYSICAL_OFFSET);
            assert_eq!(msg.born_timestamp, BORN_TS);
            assert_eq!(msg.store_timestamp, STORE_TS);
            assert_eq!(msg.store_host, "127.0.0.1:10911".parse().unwrap());
            // Java copies the outer record's wait-store flag into each inner message.
            assert_eq!(msg.property("WAIT"), Some("false"));
            assert_eq!(msg.property("INNER_NUM"), None);
        }
        assert_eq!(&messages[0].body()[..], b"first");
        assert_eq!(messages[0].msg_id(), "ID1");
        assert_eq!(messages[0].tags(), Some("A"));
        assert_eq!(messages[1].msg_id(), "ID2");
        assert!(messages[2].body().is_empty());
    }

    #[test]
    fn inner_batch_flag_alone_is_not_unwrapped() {
        let golden = Golden {
            sys_flag: sys_flag::INNER_BATCH,
            ..Golden::simple(b"opaque", b"")
        };
        let msg = decode_one(golden.bytes());
        assert_eq!(&msg.body()[..], b"opaque");
    }

    #[test]
    fn records_naming_one_topic_share_its_name_and_others_get_their_own() {
        let mut body = Golden::simple(b"one", PROPS).bytes();
        body.extend(Golden::simple(b"two", b"").bytes());
        body.extend(
            Golden {
                topic: b"Other",
                ..Golden::simple(b"three", b"")
            }
            .bytes(),
        );
        let not_utf8 = Golden {
            topic: b"\xff\xfe",
            ..Golden::simple(b"four", b"")
        }
        .bytes();
        let valid_len = body.len();
        body.extend(&not_utf8);
        assert!(
            decode_messages(Bytes::from(body.clone())).is_err(),
            "a topic that is not UTF-8 is still refused after a shared one"
        );
        body.truncate(valid_len);
        let all = decode_messages(Bytes::from(body)).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].message.topic, all[1].message.topic);
        assert!(all[1].message.topic.shares_text_with(&all[0].message.topic));
        assert_eq!(all[2].message.topic, "Other");
        assert!(!all[2].message.topic.shares_text_with(&all[0].message.topic));
    }

    #[test]
    fn concatenated_records_decode_in_order_and_singly() {
        let mut body = Golden::simple(b"one", PROPS).bytes();
        body.extend(Golden::simple(b"two", b"").bytes());
        let mut buf = Bytes::from(body.clone());
        let all = decode_messages(buf.clone()).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(&all[1].body()[..], b"two");
        let first = decode_message(&mut buf).unwrap();
        assert_eq!(&first.body()[..], b"one");
        let second = decode_message(&mut buf).unwrap();
        assert_eq!(second, all[1]);
        assert!(buf.is_empty());
        assert!(decode_messages(Bytes::new()).unwrap().is_empty());
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = Golden::simple(b"truncate me", PROPS).bytes();
        for len in 1..bytes.len() {
            assert!(
                decode_messages(Bytes::copy_from_slice(&bytes[..len])).is_err(),
                "prefix of {len} bytes"
            );
        }
        // A valid record followed by a truncated one fails the body too.
        let mut two = bytes.clone();
        two.extend_from_slice(&bytes[..50]);
        assert!(decode_messages(Bytes::from(two)).is_err());
    }

    fn patched(offset: usize, value: &[u8]) -> Bytes {
        let mut bytes = Golden::simple(b"body", PROPS).bytes();
        bytes[offset..offset + value.len()].copy_from_slice(value);
        Bytes::from(bytes)
    }

    #[test]
    fn malformed_fields_are_errors() {
        let body_len_at = 84;
        let topic_len_at = 84 + 4 + 4;
        let props_len_at = topic_len_at + 1 + 9;
        let cases: Vec<(&str, Bytes)> = vec![
            ("blank magic", patched(4, &BLANK_MAGIC_CODE.to_be_bytes())),
            ("zero magic", patched(4, &0i32.to_be_bytes())),
            ("negative total", patched(0, &(-1i32).to_be_bytes())),
            ("total too big", patched(0, &i32::MAX.to_be_bytes())),
            ("total too small", patched(0, &20i32.to_be_bytes())),
            (
                "negative body length",
                patched(body_len_at, &(-5i32).to_be_bytes()),
            ),
            (
                "body longer than record",
                patched(body_len_at, &1000i32.to_be_bytes()),
            ),
            ("negative topic length", patched(topic_len_at, &[0xFF])),
            (
                "negative properties length",
                patched(props_len_at, &(-2i16).to_be_bytes()),
            ),
            (
                "born port out of range",
                patched(52, &70_000i32.to_be_bytes()),
            ),
            ("store port negative", patched(68, &(-1i32).to_be_bytes())),
            ("topic not UTF-8", patched(topic_len_at + 1, &[0xC3, 0x28])),
            ("properties not UTF-8", patched(props_len_at + 2, &[0xFF])),
        ];
        for (what, bytes) in cases {
            assert!(decode_messages(bytes).is_err(), "{what}");
        }
    }

    #[test]
    fn malformed_inner_batch_is_an_error() {
        let mut batch = golden_compact(1, b"ok", b"");
        batch.extend_from_slice(&[0, 0, 0, 40, 0, 0]); // TOTALSIZE beyond the end
        let golden = Golden {
            sys_flag: sys_flag::INNER_BATCH | sys_flag::NEED_UNWRAP,
            body: &batch,
            ..Golden::simple(b"", b"")
        };
        assert!(decode_messages(Bytes::from(golden.bytes())).is_err());
    }

    #[test]
    fn batch_body_decodes_golden_compact_records() {
        let mut body = golden_compact(5, b"alpha", b"TAGS\x01x\x02");
        body.extend(golden_compact(0, b"beta", b""));
        let messages = decode_batch_body(Bytes::from(body)).unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].flag, 5);
        assert_eq!(messages[0].tags(), Some("x"));
        assert_eq!(&messages[1].body[..], b"beta");
        assert!(messages[1].properties.is_empty());
        assert!(messages.iter().all(|m| m.topic.is_empty()));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let bytes = Bytes::from(bytes);
            let _ = decode_messages(bytes.clone());
            let _ = decode_batch_body(bytes.clone());
            let mut buf = bytes;
            let _ = decode_message(&mut buf);
        }

        #[test]
        fn corrupted_records_never_panic(
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            v6 in any::<bool>(),
            batch in any::<bool>(),
        ) {
            let inner = golden_compact(1, b"inner body", b"TAGS\x01A\x02");
            let store_ip = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            let mut golden = Golden::simple(b"body", PROPS);
            if v6 {
                golden.sys_flag |= sys_flag::STOREHOST_V6;
                golden.store = (&store_ip, 10_911);
            }
            if batch {
                golden.sys_flag |= sys_flag::INNER_BATCH | sys_flag::NEED_UNWRAP;
                golden.body = &inner;
            }
            let mut bytes = golden.bytes();
            for (at, xor) in flips {
                let len = bytes.len();
                bytes[at % len] ^= xor;
            }
            let _ = decode_messages(Bytes::from(bytes));
        }
    }

    #[test]
    fn stored_properties_are_found_from_the_length_fields() {
        use crate::message::encode::encode_stored_message;
        for v6 in [false, true] {
            let mut ext = MessageExt::from(
                Message::new("a-topic", "body")
                    .with_tags("t")
                    .with_property("amount", "7"),
            );
            if v6 {
                ext.sys_flag |= sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6;
                ext.born_host = "[::1]:5000".parse().unwrap();
                ext.store_host = "[::1]:10911".parse().unwrap();
            }
            let mut raw = bytes::BytesMut::new();
            encode_stored_message(&ext, &mut raw);
            let decoded = decode_message(&mut raw.clone().freeze()).unwrap();
            assert_eq!(
                stored_properties(&raw),
                Some(decoded.message.properties.raw_wire()),
                "v6 {v6}"
            );
            assert_eq!(stored_properties(&raw[..raw.len() - 1]), None);
        }
    }
}
