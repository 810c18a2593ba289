//! The broker's side of the stored-record format (protocol.md §3.1): how a message is laid out
//! in the commit log and therefore in PULL_MESSAGE bodies.
//!
//! The broker keeps its own codec instead of going through the client's message model because it
//! must round-trip records *as stored*: a compressed body stays compressed and its sys flag is
//! kept, which is what the real broker does when it copies a message to a retry, DLQ or schedule
//! topic.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Magic code of a V1 record (topic length stored in one signed byte).
pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// Magic code of a V2 record (topic length stored in an i16), used for topics over 127 bytes.
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// Sys flag bit: born host is IPv6.
pub const BORNHOST_V6_FLAG: i32 = 0x10;
/// Sys flag bit: store host is IPv6.
pub const STOREHOST_V6_FLAG: i32 = 0x20;
/// Largest properties string a record can carry (its length is a signed 16-bit field).
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;

/// Everything that goes into one stored record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Topic the record is stored under.
    pub topic: String,
    /// Queue id within the topic.
    pub queue_id: i32,
    /// User flag.
    pub flag: i32,
    /// Logical offset in the consume queue.
    pub queue_offset: i64,
    /// Physical (commit log) offset of the record.
    pub commit_log_offset: i64,
    /// `MessageSysFlag` bits; the host IPv6 bits are derived from the addresses when encoding.
    pub sys_flag: i32,
    /// Producer-side creation time, ms.
    pub born_timestamp: i64,
    /// Producer address (the TCP peer of the send).
    pub born_host: SocketAddr,
    /// Time the broker stored the record, ms.
    pub store_timestamp: i64,
    /// The broker's own address.
    pub store_host: SocketAddr,
    /// How many times the message was redelivered.
    pub reconsume_times: i32,
    /// Transaction bookkeeping offset (0 for normal messages).
    pub prepared_transaction_offset: i64,
    /// Body as stored (compressed when the sys flag says so).
    pub body: bytes::Bytes,
    /// Properties in wire form (`name\x01value\x02…`).
    pub properties: String,
}

/// Why a record cannot be encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The properties string does not fit in the signed 16-bit length field.
    #[error("message properties length too long: {0}")]
    PropertiesTooLong(usize),
    /// The topic does not fit in the 16-bit length field.
    #[error("topic too long: {0}")]
    TopicTooLong(usize),
    /// The body is larger than a record can describe.
    #[error("message body too large: {0}")]
    BodyTooLarge(usize),
    /// The bytes are not a valid record.
    #[error("malformed record: {0}")]
    Malformed(&'static str),
}

fn host_len(addr: &SocketAddr) -> usize {
    match addr.ip() {
        IpAddr::V4(_) => 8,
        IpAddr::V6(_) => 20,
    }
}

fn put_host(dst: &mut Vec<u8>, addr: &SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => dst.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => dst.extend_from_slice(&ip.octets()),
    }
    dst.extend_from_slice(&i32::from(addr.port()).to_be_bytes());
}

/// Size in bytes of the encoded record, or why it cannot be encoded.
pub fn encoded_len(record: &Record) -> Result<usize, RecordError> {
    let topic_len = record.topic.len();
    if topic_len > i16::MAX as usize {
        return Err(RecordError::TopicTooLong(topic_len));
    }
    if record.properties.len() > MAX_PROPERTIES_LEN {
        return Err(RecordError::PropertiesTooLong(record.properties.len()));
    }
    let topic_len_width = if topic_len > i8::MAX as usize { 2 } else { 1 };
    let total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
        + host_len(&record.born_host)
        + 8
        + host_len(&record.store_host)
        + 4
        + 8
        + 4
        + record.body.len()
        + topic_len_width
        + topic_len
        + 2
        + record.properties.len();
    if total > i32::MAX as usize {
        return Err(RecordError::BodyTooLarge(record.body.len()));
    }
    Ok(total)
}

/// Appends the record to `dst` in the stored format; returns its size.
///
/// Topics over 127 bytes switch to the V2 layout, as the real broker's
/// `autoMessageVersionOnTopicLen` does.
pub fn encode_record(record: &Record, dst: &mut Vec<u8>) -> Result<usize, RecordError> {
    let total = encoded_len(record)?;
    let long_topic = record.topic.len() > i8::MAX as usize;
    let mut sys_flag = record.sys_flag & !(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG);
    if record.born_host.is_ipv6() {
        sys_flag |= BORNHOST_V6_FLAG;
    }
    if record.store_host.is_ipv6() {
        sys_flag |= STOREHOST_V6_FLAG;
    }
    let body_crc = (crc32fast::hash(&record.body) & 0x7FFF_FFFF) as i32;
    dst.reserve(total);
    // encoded_len bounded every length below, so these conversions cannot truncate.
    dst.extend_from_slice(&(total as i32).to_be_bytes());
    let magic = if long_topic { MAGIC_V2 } else { MAGIC_V1 };
    dst.extend_from_slice(&magic.to_be_bytes());
    dst.extend_from_slice(&body_crc.to_be_bytes());
    dst.extend_from_slice(&record.queue_id.to_be_bytes());
    dst.extend_from_slice(&record.flag.to_be_bytes());
    dst.extend_from_slice(&record.queue_offset.to_be_bytes());
    dst.extend_from_slice(&record.commit_log_offset.to_be_bytes());
    dst.extend_from_slice(&sys_flag.to_be_bytes());
    dst.extend_from_slice(&record.born_timestamp.to_be_bytes());
    put_host(dst, &record.born_host);
    dst.extend_from_slice(&record.store_timestamp.to_be_bytes());
    put_host(dst, &record.store_host);
    dst.extend_from_slice(&record.reconsume_times.to_be_bytes());
    dst.extend_from_slice(&record.prepared_transaction_offset.to_be_bytes());
    dst.extend_from_slice(&(record.body.len() as i32).to_be_bytes());
    dst.extend_from_slice(&record.body);
    if long_topic {
        dst.extend_from_slice(&(record.topic.len() as i16).to_be_bytes());
    } else {
        dst.push(record.topic.len() as u8);
    }
    dst.extend_from_slice(record.topic.as_bytes());
    dst.extend_from_slice(&(record.properties.len() as i16).to_be_bytes());
    dst.extend_from_slice(record.properties.as_bytes());
    Ok(total)
}

/// A bounds-checked big-endian reader over a record.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(RecordError::Malformed("length overflow"))?;
        let slice = self
            .buf
            .get(self.pos..end)
            .ok_or(RecordError::Malformed("record truncated"))?;
        self.pos = end;
        Ok(slice)
    }
    fn i8(&mut self) -> Result<i8, RecordError> {
        Ok(self.take(1)?[0] as i8)
    }
    fn i16(&mut self) -> Result<i16, RecordError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self) -> Result<i32, RecordError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i64(&mut self) -> Result<i64, RecordError> {
        let b = self.take(8)?;
        let mut raw = [0u8; 8];
        raw.copy_from_slice(b);
        Ok(i64::from_be_bytes(raw))
    }
    fn host(&mut self, v6: bool) -> Result<SocketAddr, RecordError> {
        let ip: IpAddr = if v6 {
            let b = self.take(16)?;
            let mut raw = [0u8; 16];
            raw.copy_from_slice(b);
            IpAddr::from(raw)
        } else {
            let b = self.take(4)?;
            IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
        };
        let port = self.i32()?;
        let port = u16::try_from(port).map_err(|_| RecordError::Malformed("port out of range"))?;
        Ok(SocketAddr::new(ip, port))
    }
    fn len(&mut self, raw: i64) -> Result<usize, RecordError> {
        usize::try_from(raw).map_err(|_| RecordError::Malformed("negative length"))
    }
}

/// Decodes one record from the start of `buf` (its first field is its own size).
pub fn decode_record(buf: &[u8]) -> Result<Record, RecordError> {
    let mut r = Reader { buf, pos: 0 };
    let total = r.i32()?;
    let total = r.len(i64::from(total))?;
    if total > buf.len() {
        return Err(RecordError::Malformed("record truncated"));
    }
    let mut r = Reader {
        buf: &buf[..total],
        pos: 4,
    };
    let magic = r.i32()?;
    let v2 = match magic {
        MAGIC_V1 => false,
        MAGIC_V2 => true,
        _ => return Err(RecordError::Malformed("bad magic code")),
    };
    let _body_crc = r.i32()?;
    let queue_id = r.i32()?;
    let flag = r.i32()?;
    let queue_offset = r.i64()?;
    let commit_log_offset = r.i64()?;
    let sys_flag = r.i32()?;
    let born_timestamp = r.i64()?;
    let born_host = r.host(sys_flag & BORNHOST_V6_FLAG != 0)?;
    let store_timestamp = r.i64()?;
    let store_host = r.host(sys_flag & STOREHOST_V6_FLAG != 0)?;
    let reconsume_times = r.i32()?;
    let prepared_transaction_offset = r.i64()?;
    let body_len = r.i32()?;
    let body_len = r.len(i64::from(body_len))?;
    let body = bytes::Bytes::copy_from_slice(r.take(body_len)?);
    let topic_len = if v2 {
        i64::from(r.i16()?)
    } else {
        i64::from(r.i8()?)
    };
    let topic_len = r.len(topic_len)?;
    let topic = String::from_utf8(r.take(topic_len)?.to_vec())
        .map_err(|_| RecordError::Malformed("topic is not UTF-8"))?;
    let props_len = r.i16()?;
    let props_len = r.len(i64::from(props_len))?;
    let properties = String::from_utf8(r.take(props_len)?.to_vec())
        .map_err(|_| RecordError::Malformed("properties are not UTF-8"))?;
    Ok(Record {
        topic,
        queue_id,
        flag,
        queue_offset,
        commit_log_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        body,
        properties,
    })
}

/// Reads the store timestamp of an encoded record without decoding the rest.
pub fn store_timestamp_of(buf: &[u8]) -> Option<i64> {
    let sys_flag = i32::from_be_bytes(buf.get(36..40)?.try_into().ok()?);
    let born_host_len = if sys_flag & BORNHOST_V6_FLAG != 0 {
        20
    } else {
        8
    };
    let start = 48 + born_host_len;
    Some(i64::from_be_bytes(buf.get(start..start + 8)?.try_into().ok()?))
}

/// The broker-side message id (`offsetMsgId`, protocol.md §3.8): upper-case hex of the store
/// host's address, port and the record's commit-log offset.
///
/// ```
/// use rocketmq_actor::broker::record::offset_message_id;
/// let id = offset_message_id("127.0.0.1:10911".parse().unwrap(), 0);
/// assert_eq!(id, "7F00000100002A9F0000000000000000");
/// ```
pub fn offset_message_id(store_host: SocketAddr, commit_log_offset: i64) -> String {
    let mut raw = Vec::with_capacity(28);
    put_host(&mut raw, &store_host);
    raw.extend_from_slice(&commit_log_offset.to_be_bytes());
    let mut text = String::with_capacity(raw.len() * 2);
    for byte in raw {
        text.push_str(&format!("{byte:02X}"));
    }
    text
}

/// Reverses [`offset_message_id`]: the store address and commit-log offset, or `None` when the
/// text is not an offset message id.
pub fn parse_offset_message_id(id: &str) -> Option<(SocketAddr, i64)> {
    let raw: Vec<u8> = (0..id.len())
        .step_by(2)
        .map(|i| id.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect::<Option<Vec<u8>>>()?;
    let v6 = match raw.len() {
        16 => false,
        28 => true,
        _ => return None,
    };
    let mut r = Reader { buf: &raw, pos: 0 };
    let host = r.host(v6).ok()?;
    let offset = r.i64().ok()?;
    Some((host, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(topic: &str) -> Record {
        Record {
            topic: topic.to_owned(),
            queue_id: 3,
            flag: 7,
            queue_offset: 42,
            commit_log_offset: 4096,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: "10.0.0.9:5555".parse().unwrap(),
            store_timestamp: 1_700_000_000_123,
            store_host: "[::1]:10911".parse().unwrap(),
            reconsume_times: 2,
            prepared_transaction_offset: 0,
            body: bytes::Bytes::from_static(b"hello"),
            properties: "TAGS\u{1}TagA\u{2}KEYS\u{1}k1\u{2}".to_owned(),
        }
    }

    #[test]
    fn round_trips_v1_and_derives_host_flags() {
        let rec = sample("TopicTest");
        let mut buf = Vec::new();
        let n = encode_record(&rec, &mut buf).unwrap();
        assert_eq!(n, buf.len());
        // Fixed 84-byte prefix for IPv4/IPv4 minus 12 for the IPv6 store host adds 12 bytes.
        assert_eq!(n, 84 + 12 + 4 + 5 + 1 + 9 + 2 + rec.properties.len());
        let back = decode_record(&buf).unwrap();
        assert_eq!(back.sys_flag, STOREHOST_V6_FLAG);
        assert_eq!(Record { sys_flag: 0, ..back }, rec);
        assert_eq!(store_timestamp_of(&buf), Some(rec.store_timestamp));
    }

    #[test]
    fn long_topics_use_v2_magic() {
        let rec = sample(&"t".repeat(200));
        let mut buf = Vec::new();
        encode_record(&rec, &mut buf).unwrap();
        assert_eq!(i32::from_be_bytes(buf[4..8].try_into().unwrap()), MAGIC_V2);
        assert_eq!(decode_record(&buf).unwrap().topic.len(), 200);
    }

    #[test]
    fn truncated_or_garbage_records_are_errors() {
        let mut buf = Vec::new();
        encode_record(&sample("T"), &mut buf).unwrap();
        for cut in 0..buf.len() {
            assert!(decode_record(&buf[..cut]).is_err());
        }
        buf[5] ^= 0xFF;
        assert!(decode_record(&buf).is_err());
    }

    #[test]
    fn offset_message_id_matches_reference_example_and_round_trips() {
        let host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        assert_eq!(
            offset_message_id(host, 0),
            "7F00000100002A9F0000000000000000"
        );
        assert_eq!(
            parse_offset_message_id(&offset_message_id(host, 987_654)),
            Some((host, 987_654))
        );
        assert_eq!(parse_offset_message_id("XYZ"), None);
    }
}
