//! Reading the broker's own stored records back *as stored*.
//!
//! Records are written with the shared encoder ([`crate::message::try_encode_stored_message`])
//! and pull bodies are decoded by clients with [`crate::message::decode_messages`]. The broker
//! needs one thing the client decoder deliberately does not do: keep a compressed body
//! compressed. When the real broker copies a message to a retry, dead-letter or schedule topic
//! it copies the stored bytes and sys flag verbatim, so a consumer later decompresses exactly
//! what the producer sent. [`decode_stored`] gives that view on top of the shared decoder.

use crate::error::ProtocolError;
use crate::message::{decode_message, sys_flag, MessageExt};
use bytes::{Bytes, BytesMut};

/// Byte offset of `SYSFLAG` in a stored record (protocol.md §3.1): after TOTALSIZE, MAGICCODE,
/// BODYCRC, QUEUEID, FLAG (4 bytes each), QUEUEOFFSET and PHYSICALOFFSET (8 bytes each).
const SYS_FLAG_AT: usize = 36;
/// Byte offset of BORNHOST, right after SYSFLAG and BORNTIMESTAMP.
const BORN_HOST_AT: usize = 48;

fn sys_flag_of(raw: &[u8]) -> Option<i32> {
    let bytes = raw.get(SYS_FLAG_AT..SYS_FLAG_AT + 4)?;
    Some(i32::from_be_bytes(bytes.try_into().ok()?))
}

/// Decodes one stored record without decompressing its body: the returned message carries the
/// stored body bytes and the stored sys flag (COMPRESSED bit and compression type included),
/// ready to be stored again unchanged. Inner batches are not expanded either.
///
/// ```ignore
/// use bytes::BytesMut;
/// use rocketmq_actor::broker::record::decode_stored;
/// use rocketmq_actor::message::{encode_stored_message, sys_flag};
/// use rocketmq_actor::{Message, MessageExt};
///
/// let mut ext = MessageExt::from(Message::new("T", &b"not really zlib"[..]));
/// ext.sys_flag = sys_flag::COMPRESSED | sys_flag::COMPRESSION_ZLIB;
/// let mut raw = BytesMut::new();
/// encode_stored_message(&ext, &mut raw);
/// let back = decode_stored(&raw).unwrap();
/// assert_eq!(&back.message.body[..], b"not really zlib");
/// assert_eq!(back.sys_flag, ext.sys_flag);
/// ```
pub fn decode_stored(raw: &[u8]) -> Result<MessageExt, ProtocolError> {
    let stored_flag = sys_flag_of(raw)
        .ok_or_else(|| ProtocolError::InvalidMessage("record truncated in SYSFLAG".into()))?;
    let mut copy = BytesMut::from(raw);
    if sys_flag::is_compressed(stored_flag) {
        // Hiding the COMPRESSED bit from the shared decoder makes it hand the stored bytes
        // through instead of inflating them; the real flag is put back below.
        let plain = stored_flag & !sys_flag::COMPRESSED;
        if let Some(field) = copy.get_mut(SYS_FLAG_AT..SYS_FLAG_AT + 4) {
            field.copy_from_slice(&plain.to_be_bytes());
        }
    }
    let mut bytes: Bytes = copy.freeze();
    let mut message = decode_message(&mut bytes)?;
    message.sys_flag = stored_flag;
    Ok(message)
}

/// The store timestamp of a record, read in place.
///
/// The time searches of SEARCH_OFFSET_BY_TIMESTAMP binary-search a queue by store time, touching
/// one field of many records; decoding each whole record there would copy every body.
pub fn store_timestamp_of(raw: &[u8]) -> Option<i64> {
    let flag = sys_flag_of(raw)?;
    let born_host_len = if flag & sys_flag::BORNHOST_V6 != 0 {
        20
    } else {
        8
    };
    let start = BORN_HOST_AT + born_host_len;
    Some(i64::from_be_bytes(
        raw.get(start..start + 8)?.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{
        compress, decode_messages, encode_stored_message, CompressionType, Message, Properties,
    };

    fn sample(topic: &str, body: &[u8], flag: i32) -> MessageExt {
        MessageExt {
            message: Message {
                topic: topic.into(),
                flag: 7,
                properties: Properties::parse("TAGS\u{1}TagA\u{2}KEYS\u{1}k1\u{2}"),
                body: Bytes::copy_from_slice(body),
            },
            queue_id: 3,
            queue_offset: 42,
            commit_log_offset: 4096,
            sys_flag: flag,
            born_timestamp: 1_700_000_000_000,
            born_host: "10.0.0.9:5555".parse().unwrap(),
            store_timestamp: 1_700_000_000_123,
            store_host: "[::1]:10911".parse().unwrap(),
            reconsume_times: 2,
            ..MessageExt::default()
        }
    }

    fn encode(ext: &MessageExt) -> BytesMut {
        let mut raw = BytesMut::new();
        encode_stored_message(ext, &mut raw);
        raw
    }

    #[test]
    fn a_compressed_body_stays_compressed_while_clients_see_it_inflated() {
        let plain = b"hello hello hello hello hello";
        let zipped = compress(CompressionType::Zlib, plain, 5).unwrap();
        let flag = sys_flag::COMPRESSED | sys_flag::COMPRESSION_ZLIB;
        let raw = encode(&sample("T", &zipped, flag));
        let stored = decode_stored(&raw).unwrap();
        assert_eq!(&stored.message.body[..], &zipped[..]);
        assert_eq!(stored.sys_flag & !sys_flag::STOREHOST_V6, flag);
        // Storing it again and decoding as a client gives the original text.
        let again = encode(&stored);
        let seen = decode_messages(again.freeze()).unwrap();
        assert_eq!(&seen[0].message.body[..], plain);
    }

    #[test]
    fn fields_round_trip_and_the_store_time_is_read_in_place() {
        let ext = sample("TopicTest", b"hello", 0);
        let raw = encode(&ext);
        let back = decode_stored(&raw).unwrap();
        assert_eq!(
            (back.queue_id, back.queue_offset, back.commit_log_offset),
            (3, 42, 4096)
        );
        assert_eq!(back.born_host, ext.born_host);
        assert_eq!(back.message.tags(), Some("TagA"));
        assert_eq!(store_timestamp_of(&raw), Some(ext.store_timestamp));
    }

    #[test]
    fn truncated_or_garbage_records_are_errors() {
        let mut raw = encode(&sample("T", b"x", 0));
        for cut in 0..raw.len() {
            assert!(decode_stored(&raw[..cut]).is_err(), "cut at {cut}");
        }
        raw[5] ^= 0xFF;
        assert!(decode_stored(&raw).is_err());
    }
}
