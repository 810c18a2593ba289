//! The message store: topics, a commit log and one consume queue per (topic, queue).
//!
//! The commit log is one logical byte stream split into chunks; a record's physical offset is
//! its position in that stream, so offsets grow by record size exactly as on a real broker. A
//! consume-queue entry is (physical offset, size, tags code) — the same 20 bytes of information
//! the real consume queue keeps — so a million messages cost their encoded size plus 24 bytes.

use super::record;
use crate::error::ProtocolError;
use crate::message::{try_encode_stored_message, Message, MessageExt, Properties};
use bytes::BytesMut;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// `PermName` bits: the shared constants plus the read-write combination topics default to.
pub mod perm {
    pub use crate::protocol::codes::perm::{INHERIT, PRIORITY, READ, WRITE};
    /// Read and write.
    pub const READ_WRITE: i32 = READ | WRITE;
}

/// Record bytes besides body, topic and properties, at their widest (protocol.md §3.1): eight
/// 4-byte and five 8-byte fields, two IPv6 hosts of 20 bytes, 2-byte topic and properties
/// lengths.
const MAX_RECORD_OVERHEAD: usize = 8 * 4 + 5 * 8 + 2 * 20 + 2 + 2;

/// Chunks are closed at this size so a long-running broker never reallocates one huge buffer.
const CHUNK_CAPACITY: usize = 4 * 1024 * 1024;

/// Pull limits of the real store (`MessageStoreConfig` defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PullLimits {
    /// At most this many messages per pull (`maxTransferCountOnMessageInMemory`).
    pub max_count: usize,
    /// At most this many bytes per pull, except that one message always fits
    /// (`maxTransferBytesOnMessageInMemory`).
    pub max_bytes: usize,
    /// How many consume-queue entries one pull may scan while filtering (`maxFilterMessageSize`
    /// 16000 bytes / 20-byte units).
    pub max_scan: usize,
}

impl Default for PullLimits {
    fn default() -> Self {
        PullLimits {
            max_count: 32,
            max_bytes: 256 * 1024,
            max_scan: 800,
        }
    }
}

pub use crate::protocol::body::TopicConfig;

/// The queues a topic's configuration needs in the store: the larger of its read and write
/// counts.
fn physical_queues(config: &TopicConfig) -> usize {
    usize::try_from(config.read_queue_nums.max(config.write_queue_nums)).unwrap_or(0)
}

/// One consume-queue entry.
#[derive(Clone, Copy, Debug)]
struct CqEntry {
    commit_log_offset: i64,
    size: i32,
    tags_code: i64,
}

#[derive(Debug, Default)]
struct ConsumeQueue {
    /// Logical offset of `entries[0]`; the queue's min offset.
    base: i64,
    entries: Vec<CqEntry>,
    /// Max offset visible to pulls while the queue is paused by fault injection.
    paused_at: Option<i64>,
}

impl ConsumeQueue {
    fn max_offset(&self) -> i64 {
        self.base + self.entries.len() as i64
    }
    fn visible_max_offset(&self) -> i64 {
        self.paused_at.unwrap_or_else(|| self.max_offset())
    }
    fn entry(&self, offset: i64) -> Option<&CqEntry> {
        let index = usize::try_from(offset.checked_sub(self.base)?).ok()?;
        self.entries.get(index)
    }
}

#[derive(Debug)]
struct TopicState {
    config: TopicConfig,
    queues: Vec<ConsumeQueue>,
}

#[derive(Debug)]
struct Chunk {
    base: i64,
    data: BytesMut,
}

/// A message to append; the store assigns offsets and the store timestamp.
#[derive(Clone, Debug)]
pub struct NewMessage {
    /// Target topic (must exist).
    pub topic: String,
    /// Target queue (must exist).
    pub queue_id: i32,
    /// User flag.
    pub flag: i32,
    /// Body as received.
    pub body: bytes::Bytes,
    /// Properties as they will be stored.
    pub properties: Properties,
    /// `MessageSysFlag` bits.
    pub sys_flag: i32,
    /// Producer timestamp.
    pub born_timestamp: i64,
    /// Producer address.
    pub born_host: SocketAddr,
    /// Redelivery count.
    pub reconsume_times: i32,
    /// Transaction offset.
    pub prepared_transaction_offset: i64,
    /// Value kept in the consume queue for server-side filtering (tags hash, or deliver time for
    /// the schedule topic).
    pub tags_code: i64,
}

/// Where an appended message landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutResult {
    /// Logical offset in its queue.
    pub queue_offset: i64,
    /// Physical offset in the commit log.
    pub commit_log_offset: i64,
    /// Encoded size.
    pub size: i32,
    /// Store timestamp.
    pub store_timestamp: i64,
}

/// Why a message was not stored.
#[derive(Debug, thiserror::Error)]
pub enum PutError {
    /// No such topic.
    #[error("topic {0} not exist")]
    TopicNotExist(String),
    /// Queue id outside the topic's queues.
    #[error("queueId {queue_id} is illegal for topic {topic}")]
    IllegalQueue {
        /// Topic.
        topic: String,
        /// Requested queue.
        queue_id: i32,
    },
    /// The record cannot be encoded (properties or topic too long, record over 2 GiB).
    #[error(transparent)]
    Record(#[from] ProtocolError),
}

/// `GetMessageStatus` of the real store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetStatus {
    /// Messages returned.
    Found,
    /// Everything scanned was filtered out.
    NoMatchedMessage,
    /// The queue exists but never held a message.
    NoMessageInQueue,
    /// The topic or queue does not exist.
    NoMatchedLogicQueue,
    /// Offset below the queue's min offset.
    OffsetTooSmall,
    /// Offset equals the max offset (caught up).
    OffsetOverflowOne,
    /// Offset beyond the max offset.
    OffsetOverflowBadly,
}

impl GetStatus {
    /// The Java enum name, used as the pull response remark.
    pub fn name(self) -> &'static str {
        match self {
            GetStatus::Found => "FOUND",
            GetStatus::NoMatchedMessage => "NO_MATCHED_MESSAGE",
            GetStatus::NoMessageInQueue => "NO_MESSAGE_IN_QUEUE",
            GetStatus::NoMatchedLogicQueue => "NO_MATCHED_LOGIC_QUEUE",
            GetStatus::OffsetTooSmall => "OFFSET_TOO_SMALL",
            GetStatus::OffsetOverflowOne => "OFFSET_OVERFLOW_ONE",
            GetStatus::OffsetOverflowBadly => "OFFSET_OVERFLOW_BADLY",
        }
    }
}

/// What a pull read from the store.
#[derive(Clone, Debug)]
pub struct GetResult {
    /// Outcome.
    pub status: GetStatus,
    /// Where the consumer should continue.
    pub next_begin_offset: i64,
    /// Queue min offset.
    pub min_offset: i64,
    /// Queue max offset (as visible to pulls).
    pub max_offset: i64,
    /// Concatenated records when found.
    pub body: Vec<u8>,
    /// Number of records in `body`.
    pub message_count: usize,
}

/// The store of one broker.
#[derive(Debug)]
pub struct MessageStore {
    store_host: SocketAddr,
    chunks: Vec<Chunk>,
    topics: BTreeMap<String, TopicState>,
    limits: PullLimits,
}

impl MessageStore {
    /// An empty store whose records name `store_host` as their store address.
    pub fn new(store_host: SocketAddr) -> Self {
        MessageStore {
            store_host,
            chunks: Vec::new(),
            topics: BTreeMap::new(),
            limits: PullLimits::default(),
        }
    }

    /// Overrides the per-pull limits.
    pub fn set_pull_limits(&mut self, limits: PullLimits) {
        self.limits = limits;
    }

    /// The address written into records as store host.
    pub fn store_host(&self) -> SocketAddr {
        self.store_host
    }

    /// Changes the store host (used when a broker learns its bound port).
    pub fn set_store_host(&mut self, host: SocketAddr) {
        self.store_host = host;
    }

    /// Creates or updates a topic; queues are only ever added, never dropped, so offsets of
    /// existing queues survive a shrink-then-grow.
    pub fn upsert_topic(&mut self, config: TopicConfig) {
        let wanted = physical_queues(&config);
        let state = self
            .topics
            .entry(config.topic_name.clone())
            .or_insert_with(|| TopicState {
                config: config.clone(),
                queues: Vec::new(),
            });
        state.config = config;
        while state.queues.len() < wanted {
            state.queues.push(ConsumeQueue::default());
        }
    }

    /// A topic's configuration.
    pub fn topic(&self, name: &str) -> Option<&TopicConfig> {
        self.topics.get(name).map(|t| &t.config)
    }

    /// All topic configurations, by name.
    pub fn topics(&self) -> impl Iterator<Item = &TopicConfig> {
        self.topics.values().map(|t| &t.config)
    }

    /// Removes a topic and its queues (the records stay in the commit log, as on a real broker).
    pub fn delete_topic(&mut self, name: &str) -> bool {
        self.topics.remove(name).is_some()
    }

    fn queue(&self, topic: &str, queue_id: i32) -> Option<&ConsumeQueue> {
        let index = usize::try_from(queue_id).ok()?;
        self.topics.get(topic)?.queues.get(index)
    }

    fn queue_mut(&mut self, topic: &str, queue_id: i32) -> Option<&mut ConsumeQueue> {
        let index = usize::try_from(queue_id).ok()?;
        self.topics.get_mut(topic)?.queues.get_mut(index)
    }

    /// The next physical offset to be written (total bytes ever appended).
    pub fn commit_log_max_offset(&self) -> i64 {
        self.chunks
            .last()
            .map_or(0, |c| c.base + c.data.len() as i64)
    }

    /// Appends a message: assigns queue offset, physical offset and store time `now_ms`.
    pub fn put(&mut self, msg: NewMessage, now_ms: i64) -> Result<PutResult, PutError> {
        let queue_offset = match self.queue(&msg.topic, msg.queue_id) {
            Some(q) => q.max_offset(),
            None if self.topics.contains_key(&msg.topic) => {
                return Err(PutError::IllegalQueue {
                    topic: msg.topic,
                    queue_id: msg.queue_id,
                })
            }
            None => return Err(PutError::TopicNotExist(msg.topic)),
        };
        let commit_log_offset = self.commit_log_max_offset();
        let queue_id = msg.queue_id;
        let ext = MessageExt {
            message: Message {
                topic: msg.topic.into(),
                flag: msg.flag,
                properties: msg.properties,
                body: msg.body,
            },
            queue_id,
            queue_offset,
            commit_log_offset,
            sys_flag: msg.sys_flag,
            born_timestamp: msg.born_timestamp,
            born_host: msg.born_host,
            store_timestamp: now_ms,
            store_host: self.store_host,
            reconsume_times: msg.reconsume_times,
            prepared_transaction_offset: msg.prepared_transaction_offset,
            ..MessageExt::default()
        };
        // An upper bound is enough to pick the chunk, and it spares a second scan of the
        // properties (the encoder makes one).
        let bound = MAX_RECORD_OVERHEAD
            + ext.message.body.len()
            + ext.message.topic.len()
            + ext.message.properties.raw_wire().len();
        let chunk = self.writable_chunk(bound, commit_log_offset);
        let size = try_encode_stored_message(&ext, &mut chunk.data)?;
        let size_i32 = i32::try_from(size).map_err(|_| too_large(size))?;
        if let Some(q) = self.queue_mut(&ext.message.topic, queue_id) {
            q.entries.push(CqEntry {
                commit_log_offset,
                size: size_i32,
                tags_code: msg.tags_code,
            });
        }
        Ok(PutResult {
            queue_offset,
            commit_log_offset,
            size: size_i32,
            store_timestamp: now_ms,
        })
    }

    /// Appends an already encoded record read back from disk, rebuilding its queue entry.
    /// Returns false (and stores nothing) when the record does not continue the commit log.
    pub fn replay(&mut self, raw: &[u8], tags_code: i64) -> Result<bool, ProtocolError> {
        let rec = record::decode_stored(raw)?;
        let expected = self.commit_log_max_offset();
        if rec.commit_log_offset != expected {
            return Ok(false);
        }
        let size = raw.len();
        let Some(q) = self.queue_mut(&rec.message.topic, rec.queue_id) else {
            // A record of a deleted topic still occupies commit-log space.
            let chunk = self.writable_chunk(size, expected);
            chunk.data.extend_from_slice(raw);
            return Ok(true);
        };
        if q.max_offset() != rec.queue_offset {
            if q.entries.is_empty() && q.base <= rec.queue_offset {
                q.base = rec.queue_offset;
            } else {
                return Ok(false);
            }
        }
        q.entries.push(CqEntry {
            commit_log_offset: expected,
            size: i32::try_from(size).map_err(|_| too_large(size))?,
            tags_code,
        });
        let chunk = self.writable_chunk(size, expected);
        chunk.data.extend_from_slice(raw);
        Ok(true)
    }

    fn writable_chunk(&mut self, size: usize, next_offset: i64) -> &mut Chunk {
        let need_new = match self.chunks.last() {
            None => true,
            Some(c) => !c.data.is_empty() && c.data.len() + size > CHUNK_CAPACITY,
        };
        if need_new {
            // Reserving the whole chunk up front means appends never move stored records.
            self.chunks.push(Chunk {
                base: next_offset,
                data: BytesMut::with_capacity(CHUNK_CAPACITY.max(size)),
            });
        }
        let last = self.chunks.len() - 1;
        &mut self.chunks[last]
    }

    /// The encoded record at a physical offset.
    pub fn record_at_physical(&self, commit_log_offset: i64) -> Option<&[u8]> {
        let index = match self
            .chunks
            .binary_search_by(|c| c.base.cmp(&commit_log_offset))
        {
            Ok(i) => i,
            Err(0) => return None,
            Err(i) => i - 1,
        };
        let chunk = self.chunks.get(index)?;
        let start = usize::try_from(commit_log_offset - chunk.base).ok()?;
        let size_bytes = chunk.data.get(start..start + 4)?;
        let size = i32::from_be_bytes(size_bytes.try_into().ok()?);
        let size = usize::try_from(size).ok()?;
        chunk.data.get(start..start + size)
    }

    /// The encoded record at a queue offset.
    pub fn record_at(&self, topic: &str, queue_id: i32, offset: i64) -> Option<&[u8]> {
        let entry = self.queue(topic, queue_id)?.entry(offset)?;
        self.record_at_physical(entry.commit_log_offset)
    }

    /// Tags code of the entry at a queue offset.
    pub fn tags_code_at(&self, topic: &str, queue_id: i32, offset: i64) -> Option<i64> {
        Some(self.queue(topic, queue_id)?.entry(offset)?.tags_code)
    }

    /// Every record in commit-log order.
    pub fn records(&self) -> impl Iterator<Item = &[u8]> {
        self.records_from(0)
    }

    /// Records from physical offset `from` on (persistence appends only what is new).
    pub fn records_from(&self, from: i64) -> impl Iterator<Item = &[u8]> {
        let first = match self.chunks.binary_search_by(|c| c.base.cmp(&from)) {
            Ok(i) => i,
            Err(0) => 0,
            Err(i) => i - 1,
        };
        self.chunks.iter().skip(first).flat_map(move |chunk| {
            let mut pos = usize::try_from(from - chunk.base).unwrap_or(0);
            std::iter::from_fn(move || {
                let size_bytes = chunk.data.get(pos..pos + 4)?;
                let size = usize::try_from(i32::from_be_bytes(size_bytes.try_into().ok()?)).ok()?;
                if size < 4 {
                    return None;
                }
                let rec = chunk.data.get(pos..pos + size)?;
                pos += size;
                Some(rec)
            })
        })
    }

    /// Min logical offset of a queue (0 when it does not exist).
    pub fn min_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.queue(topic, queue_id).map_or(0, |q| q.base)
    }

    /// Max logical offset of a queue: one past the last message (0 when it does not exist).
    pub fn max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.queue(topic, queue_id)
            .map_or(0, ConsumeQueue::max_offset)
    }

    /// Max offset as pulls see it (frozen while the queue is paused).
    pub fn visible_max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.queue(topic, queue_id)
            .map_or(0, ConsumeQueue::visible_max_offset)
    }

    /// Freezes (or unfreezes) what pulls see of a queue. Returns false if it does not exist.
    pub fn set_paused(&mut self, topic: &str, queue_id: i32, paused: bool) -> bool {
        match self.queue_mut(topic, queue_id) {
            Some(q) => {
                q.paused_at = if paused {
                    Some(q.paused_at.unwrap_or_else(|| q.max_offset()))
                } else {
                    None
                };
                true
            }
            None => false,
        }
    }

    /// Whether pulls currently see a frozen view of the queue.
    pub fn is_paused(&self, topic: &str, queue_id: i32) -> bool {
        self.queue(topic, queue_id)
            .is_some_and(|q| q.paused_at.is_some())
    }

    /// Drops a queue's entries below `offset`, as retention would; pulls below the new min
    /// offset then answer OFFSET_TOO_SMALL.
    pub fn truncate_before(&mut self, topic: &str, queue_id: i32, offset: i64) {
        if let Some(q) = self.queue_mut(topic, queue_id) {
            let drop = offset.clamp(q.base, q.max_offset()) - q.base;
            let drop = usize::try_from(drop).unwrap_or(0);
            q.entries.drain(..drop);
            q.base += drop as i64;
        }
    }

    /// Store timestamp of the message at a queue offset.
    pub fn store_time_at(&self, topic: &str, queue_id: i32, offset: i64) -> Option<i64> {
        record::store_timestamp_of(self.record_at(topic, queue_id, offset)?)
    }

    /// `GET_EARLIEST_MSG_STORETIME`: store time of the oldest message, −1 when none.
    pub fn earliest_store_time(&self, topic: &str, queue_id: i32) -> i64 {
        self.store_time_at(topic, queue_id, self.min_offset(topic, queue_id))
            .unwrap_or(-1)
    }

    /// `SEARCH_OFFSET_BY_TIMESTAMP` with the real consume queue's boundary rules: LOWER gives the
    /// first offset stored at or after `timestamp` (max offset if none), UPPER the last offset
    /// stored at or before it (0 if none); an empty or unknown queue gives 0.
    pub fn search_offset_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp: i64,
        upper: bool,
    ) -> i64 {
        let Some(q) = self.queue(topic, queue_id) else {
            return 0;
        };
        if q.entries.is_empty() {
            return 0;
        }
        let time_at = |i: usize| {
            q.entries
                .get(i)
                .and_then(|e| self.record_at_physical(e.commit_log_offset))
                .and_then(record::store_timestamp_of)
                .unwrap_or(i64::MIN)
        };
        let n = q.entries.len();
        // Store times never decrease along a queue, so a partition point is well defined.
        let first_at_or_after = partition_point(n, |i| time_at(i) < timestamp);
        let first_after = partition_point(n, |i| time_at(i) <= timestamp);
        if upper {
            if first_after == 0 {
                0
            } else {
                q.base + first_after as i64 - 1
            }
        } else {
            q.base + first_at_or_after as i64
        }
    }

    /// Reads up to `max_msg_nums` messages from `offset`, keeping those `filter` passes, with
    /// the status and next offset rules of the real `DefaultMessageStore`.
    pub fn get(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msg_nums: i32,
        mut filter: impl EntryFilter,
    ) -> GetResult {
        let Some(q) = self.queue(topic, queue_id) else {
            return GetResult {
                status: GetStatus::NoMatchedLogicQueue,
                next_begin_offset: 0,
                min_offset: 0,
                max_offset: 0,
                body: Vec::new(),
                message_count: 0,
            };
        };
        let min_offset = q.base;
        let max_offset = q.visible_max_offset();
        let mut result = GetResult {
            status: GetStatus::NoMessageInQueue,
            next_begin_offset: offset,
            min_offset,
            max_offset,
            body: Vec::new(),
            message_count: 0,
        };
        if max_offset == 0 {
            result.next_begin_offset = 0;
        } else if offset < min_offset {
            result.status = GetStatus::OffsetTooSmall;
            result.next_begin_offset = min_offset;
        } else if offset == max_offset {
            result.status = GetStatus::OffsetOverflowOne;
        } else if offset > max_offset {
            result.status = GetStatus::OffsetOverflowBadly;
            result.next_begin_offset = max_offset;
        } else {
            result.status = GetStatus::NoMatchedMessage;
            let max_msgs = usize::try_from(max_msg_nums.max(1)).unwrap_or(1);
            let max_count = max_msgs.min(self.limits.max_count);
            let max_scan = self.limits.max_scan.max(max_msgs);
            let mut next = offset;
            while next < max_offset {
                if usize::try_from(next - offset).unwrap_or(usize::MAX) >= max_scan {
                    break;
                }
                let Some(entry) = q.entry(next) else { break };
                let size = usize::try_from(entry.size).unwrap_or(0);
                if result.message_count > 0
                    && (result.message_count >= max_count
                        || result.body.len() + size > self.limits.max_bytes)
                {
                    break;
                }
                let offset = next;
                next += 1;
                // The entry decides first, so a record filtered out by its tags code is never
                // read.
                let decided = filter.by_entry(offset, entry.tags_code);
                if decided == Some(false) {
                    continue;
                }
                let Some(raw) = self.record_at_physical(entry.commit_log_offset) else {
                    continue;
                };
                if decided.is_some() || filter.by_record(offset, raw) {
                    result.body.extend_from_slice(raw);
                    result.message_count += 1;
                    result.status = GetStatus::Found;
                }
            }
            result.next_begin_offset = next;
        }
        result
    }
}

fn too_large(size: usize) -> ProtocolError {
    ProtocolError::InvalidMessage(format!("record of {size} bytes is too large to store"))
}

/// What a read keeps: decided from the consume-queue entry when it can (a tags code, an answer
/// known already), else from the stored record (Java's `MessageFilter`:
/// `isMatchedByConsumeQueue`, then `isMatchedByCommitLog`).
pub trait EntryFilter {
    /// The decision from the entry at `offset`, or `None` to read the record.
    fn by_entry(&mut self, offset: i64, tags_code: i64) -> Option<bool>;
    /// The decision from the record at `offset`.
    fn by_record(&mut self, offset: i64, record: &[u8]) -> bool;
}

/// A filter of tags codes alone.
impl<F: FnMut(i64) -> bool> EntryFilter for F {
    fn by_entry(&mut self, _offset: i64, tags_code: i64) -> Option<bool> {
        Some(self(tags_code))
    }

    fn by_record(&mut self, _offset: i64, _record: &[u8]) -> bool {
        true
    }
}

/// First index in `0..n` for which `pred` is false, assuming `pred` is true then false.
fn partition_point(n: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> SocketAddr {
        "127.0.0.1:10911".parse().unwrap()
    }

    fn msg(topic: &str, queue_id: i32, tags_code: i64) -> NewMessage {
        NewMessage {
            topic: topic.into(),
            queue_id,
            flag: 0,
            body: bytes::Bytes::from_static(b"body"),
            properties: Properties::new(),
            sys_flag: 0,
            born_timestamp: 1,
            born_host: "127.0.0.1:40000".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            tags_code,
        }
    }

    fn store_with(topic: &str, queues: i32) -> MessageStore {
        let mut s = MessageStore::new(host());
        s.upsert_topic(TopicConfig::new(topic, queues));
        s
    }

    #[test]
    fn physical_offsets_grow_by_record_size_and_queue_offsets_by_one() {
        let mut s = store_with("T", 2);
        let a = s.put(msg("T", 0, 0), 10).unwrap();
        let b = s.put(msg("T", 1, 0), 11).unwrap();
        let c = s.put(msg("T", 0, 0), 12).unwrap();
        assert_eq!((a.queue_offset, b.queue_offset, c.queue_offset), (0, 0, 1));
        assert_eq!(a.commit_log_offset, 0);
        assert_eq!(b.commit_log_offset, i64::from(a.size));
        assert_eq!(c.commit_log_offset, i64::from(a.size + b.size));
        let raw = s.record_at_physical(b.commit_log_offset).unwrap();
        let rec = crate::message::decode_message(&mut bytes::Bytes::copy_from_slice(raw)).unwrap();
        assert_eq!(
            (rec.queue_id, rec.queue_offset, rec.store_timestamp),
            (1, 0, 11)
        );
        assert_eq!(s.records().count(), 3);
    }

    #[test]
    fn put_rejects_unknown_topics_and_queues() {
        let mut s = store_with("T", 2);
        assert!(matches!(
            s.put(msg("X", 0, 0), 0),
            Err(PutError::TopicNotExist(_))
        ));
        assert!(matches!(
            s.put(msg("T", 2, 0), 0),
            Err(PutError::IllegalQueue { .. })
        ));
    }

    #[test]
    fn get_statuses_follow_the_real_store() {
        let mut s = store_with("T", 2);
        let r = s.get("nope", 0, 5, 32, |_| true);
        assert_eq!(r.status, GetStatus::NoMatchedLogicQueue);
        let r = s.get("T", 0, 5, 32, |_| true);
        assert_eq!(
            (r.status, r.next_begin_offset),
            (GetStatus::NoMessageInQueue, 0)
        );
        for _ in 0..3 {
            s.put(msg("T", 0, 7), 0).unwrap();
        }
        let r = s.get("T", 0, 3, 32, |_| true);
        assert_eq!(
            (r.status, r.next_begin_offset),
            (GetStatus::OffsetOverflowOne, 3)
        );
        let r = s.get("T", 0, 9, 32, |_| true);
        assert_eq!(
            (r.status, r.next_begin_offset),
            (GetStatus::OffsetOverflowBadly, 3)
        );
        let r = s.get("T", 0, 1, 32, |_| true);
        assert_eq!(
            (r.status, r.next_begin_offset, r.message_count),
            (GetStatus::Found, 3, 2)
        );
        let r = s.get("T", 0, 0, 32, |code| code != 7);
        assert_eq!(
            (r.status, r.next_begin_offset),
            (GetStatus::NoMatchedMessage, 3)
        );
        s.truncate_before("T", 0, 2);
        let r = s.get("T", 0, 0, 32, |_| true);
        assert_eq!(
            (r.status, r.next_begin_offset, r.min_offset),
            (GetStatus::OffsetTooSmall, 2, 2)
        );
    }

    #[test]
    fn get_respects_max_msg_nums_and_the_32_message_cap() {
        let mut s = store_with("T", 1);
        for _ in 0..40 {
            s.put(msg("T", 0, 0), 0).unwrap();
        }
        let r = s.get("T", 0, 0, 5, |_| true);
        assert_eq!((r.message_count, r.next_begin_offset), (5, 5));
        let r = s.get("T", 0, 0, 64, |_| true);
        assert_eq!((r.message_count, r.next_begin_offset), (32, 32));
    }

    #[test]
    fn paused_queue_hides_new_messages_from_pulls() {
        let mut s = store_with("T", 1);
        s.put(msg("T", 0, 0), 0).unwrap();
        assert!(s.set_paused("T", 0, true));
        s.put(msg("T", 0, 0), 0).unwrap();
        assert_eq!(
            s.get("T", 0, 1, 32, |_| true).status,
            GetStatus::OffsetOverflowOne
        );
        assert_eq!(s.max_offset("T", 0), 2);
        s.set_paused("T", 0, false);
        assert_eq!(s.get("T", 0, 1, 32, |_| true).status, GetStatus::Found);
    }

    #[test]
    fn search_by_time_has_lower_and_upper_boundaries() {
        let mut s = store_with("T", 1);
        for t in [100, 200, 200, 300] {
            s.put(msg("T", 0, 0), t).unwrap();
        }
        let lower = |t| s.search_offset_by_time("T", 0, t, false);
        let upper = |t| s.search_offset_by_time("T", 0, t, true);
        assert_eq!((lower(50), upper(50)), (0, 0));
        assert_eq!((lower(200), upper(200)), (1, 2));
        assert_eq!((lower(250), upper(250)), (3, 2));
        assert_eq!((lower(400), upper(400)), (4, 3));
        assert_eq!(s.search_offset_by_time("T", 0, 1, false), 0);
        assert_eq!(s.earliest_store_time("T", 0), 100);
        assert_eq!(s.earliest_store_time("nope", 0), -1);
    }

    #[test]
    fn replay_rebuilds_queues_from_raw_records() {
        let mut s = store_with("T", 2);
        for q in [0, 1, 0] {
            s.put(msg("T", q, 5), 0).unwrap();
        }
        let mut copy = store_with("T", 2);
        for raw in s.records() {
            assert!(copy.replay(raw, 5).unwrap());
        }
        assert_eq!(copy.max_offset("T", 0), 2);
        assert_eq!(copy.commit_log_max_offset(), s.commit_log_max_offset());
        assert_eq!(copy.tags_code_at("T", 1, 0), Some(5));
    }
}
