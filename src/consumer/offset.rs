//! Consume offsets: the in-memory table, what to persist, where a new queue starts, and the
//! local offset file of broadcasting consumers.
//!
//! An offset here is always "the next offset to consume" (what the broker stores). Updates from
//! consumption are increase-only, so a late, stale completion can never move a queue back and
//! cause re-consumption; only explicit resets move backwards. Negative offsets are never
//! stored or persisted (Java issue #2708: committing -1/0 during network flapping made whole
//! groups re-consume their backlog).
//!
//! ```ignore
//! use rocketmq_actor::consumer::OffsetTable;
//! use rocketmq_actor::MessageQueue;
//!
//! let mq = MessageQueue::new("T", "broker-a", 0);
//! let mut table = OffsetTable::new();
//! assert!(table.update(&mq, 10, true));
//! assert!(!table.update(&mq, 7, true)); // a stale completion does not move it back
//! assert_eq!(table.read(&mq), Some(10));
//! table.reset(&mq, 3);                   // an admin reset does
//! assert_eq!(table.read(&mq), Some(3));
//! ```

use crate::consumer::config::ConsumeFromWhere;
use crate::consumer::retry::is_retry_topic;
use crate::error::ProtocolError;
use crate::message::MessageQueue;
use crate::protocol::codes::response_code;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OffsetEntry {
    offset: i64,
    /// Set by `OFFSET_ILLEGAL`: the broker's corrected offset must survive until the queue is
    /// removed, whatever in-flight consumption reports.
    frozen: bool,
    /// The value last reported as persisted.
    persisted: Option<i64>,
}

/// The in-memory consume offsets of the queues a consumer owns (Java `OffsetStore` memory
/// side, both remote and local flavours).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetTable {
    /// Hashed: every pull's commit looks its queue up here, and a tree of queues compares
    /// their topic names at every level; what needs queue order sorts.
    entries: HashMap<MessageQueue, OffsetEntry, foldhash::fast::RandomState>,
}

impl OffsetTable {
    /// An empty table.
    pub fn new() -> Self {
        OffsetTable::default()
    }

    /// A table holding `offsets` (e.g. loaded from a local file); negative ones are skipped.
    pub fn from_offsets(offsets: impl IntoIterator<Item = (MessageQueue, i64)>) -> Self {
        let mut table = OffsetTable::new();
        for (mq, offset) in offsets {
            table.update(&mq, offset, false);
        }
        table
    }

    /// The offset held for `mq`.
    pub fn read(&self, mq: &MessageQueue) -> Option<i64> {
        self.entries.get(mq).map(|e| e.offset)
    }

    /// Sets `mq`'s offset; with `increase_only`, only if higher than the current one. Ignored
    /// for negative offsets and for a frozen queue. Returns whether the offset changed.
    pub fn update(&mut self, mq: &MessageQueue, offset: i64, increase_only: bool) -> bool {
        if offset < 0 {
            return false;
        }
        match self.entries.get_mut(mq) {
            Some(entry) if entry.frozen => false,
            Some(entry) if increase_only && offset <= entry.offset => false,
            Some(entry) => {
                let changed = entry.offset != offset;
                entry.offset = offset;
                changed
            }
            None => {
                self.entries.insert(
                    mq.clone(),
                    OffsetEntry {
                        offset,
                        frozen: false,
                        persisted: None,
                    },
                );
                true
            }
        }
    }

    /// Sets `mq`'s offset and ignores every later [`OffsetTable::update`] until the queue is
    /// removed or reset (Java `updateAndFreezeOffset`, used on `OFFSET_ILLEGAL`).
    pub fn update_and_freeze(&mut self, mq: &MessageQueue, offset: i64) {
        if offset < 0 {
            return;
        }
        let persisted = self.entries.get(mq).and_then(|e| e.persisted);
        self.entries.insert(
            mq.clone(),
            OffsetEntry {
                offset,
                frozen: true,
                persisted,
            },
        );
    }

    /// Forces `mq`'s offset, backwards if need be, and lifts a freeze (offset resets by an
    /// admin or `RESET_CONSUMER_CLIENT_OFFSET`). Negative offsets are ignored.
    pub fn reset(&mut self, mq: &MessageQueue, offset: i64) {
        if offset < 0 {
            return;
        }
        let persisted = self.entries.get(mq).and_then(|e| e.persisted);
        self.entries.insert(
            mq.clone(),
            OffsetEntry {
                offset,
                frozen: false,
                persisted,
            },
        );
    }

    /// Whether `mq`'s offset is frozen.
    pub fn is_frozen(&self, mq: &MessageQueue) -> bool {
        self.entries.get(mq).is_some_and(|e| e.frozen)
    }

    /// Forgets `mq` (queue removed from this consumer; persist it first), returning its offset.
    pub fn remove(&mut self, mq: &MessageQueue) -> Option<i64> {
        self.entries.remove(mq).map(|e| e.offset)
    }

    /// Forgets every queue not in `owned`, returning them (Java drops them in `persistAll`).
    pub fn retain_owned(&mut self, owned: &BTreeSet<MessageQueue>) -> Vec<MessageQueue> {
        let mut gone: Vec<MessageQueue> = self
            .entries
            .keys()
            .filter(|mq| !owned.contains(*mq))
            .cloned()
            .collect();
        gone.sort_unstable();
        for mq in &gone {
            self.entries.remove(mq);
        }
        gone
    }

    /// The offsets to send with `UPDATE_CONSUMER_OFFSET`, grouped by broker name: every owned
    /// queue's offset, or, with `only_changed`, those that differ from what
    /// [`OffsetTable::mark_persisted`] last recorded. Java sends all of them every 5 s, which
    /// also repairs a broker that lost its offsets; `only_changed` saves traffic in between.
    pub fn persist_plan(
        &self,
        owned: &BTreeSet<MessageQueue>,
        only_changed: bool,
    ) -> BTreeMap<String, Vec<(MessageQueue, i64)>> {
        let mut plan: BTreeMap<String, Vec<(MessageQueue, i64)>> = BTreeMap::new();
        for (mq, entry) in &self.entries {
            if !owned.contains(mq) || (only_changed && entry.persisted == Some(entry.offset)) {
                continue;
            }
            plan.entry(mq.broker_name.clone())
                .or_default()
                .push((mq.clone(), entry.offset));
        }
        for queues in plan.values_mut() {
            queues.sort_unstable();
        }
        plan
    }

    /// Records that `offset` of `mq` reached the broker (or the local file).
    pub fn mark_persisted(&mut self, mq: &MessageQueue, offset: i64) {
        if let Some(entry) = self.entries.get_mut(mq) {
            entry.persisted = Some(offset);
        }
    }

    /// Every queue and its offset, in queue order.
    pub fn iter(&self) -> impl Iterator<Item = (&MessageQueue, i64)> {
        let mut all: Vec<(&MessageQueue, i64)> =
            self.entries.iter().map(|(mq, e)| (mq, e.offset)).collect();
        all.sort_unstable();
        all.into_iter()
    }

    /// The offsets of the `owned` queues, e.g. for the local file.
    pub fn owned_offsets(&self, owned: &BTreeSet<MessageQueue>) -> BTreeMap<MessageQueue, i64> {
        self.entries
            .iter()
            .filter(|(mq, _)| owned.contains(*mq))
            .map(|(mq, entry)| (mq.clone(), entry.offset))
            .collect()
    }

    /// Number of queues held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no queue is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records `offset` as read from the store for a queue not held yet: held, and already
    /// persisted (a later persist does not write back a value the store may have moved on from).
    pub fn load(&mut self, mq: &MessageQueue, offset: i64) {
        if offset < 0 || self.entries.contains_key(mq) {
            return;
        }
        self.entries.insert(
            mq.clone(),
            OffsetEntry {
                offset,
                frozen: false,
                persisted: Some(offset),
            },
        );
    }

    /// What a periodic persist of a group member writes: for a topic whose queues the group
    /// divides (`divided_topics`), the queues this member owns; for any other topic (queues the
    /// application pulls by hand), those whose offset changed since it was last persisted or
    /// read — so a member never writes back an offset of a queue it does not own.
    pub fn member_persist_entries(
        &self,
        divided_topics: &BTreeSet<String>,
        owned: &BTreeSet<MessageQueue>,
    ) -> Vec<(MessageQueue, i64)> {
        let mut entries: Vec<(MessageQueue, i64)> = self
            .entries
            .iter()
            .filter(|(mq, entry)| {
                if divided_topics.contains(&mq.topic) {
                    owned.contains(*mq)
                } else {
                    entry.persisted != Some(entry.offset)
                }
            })
            .map(|(mq, entry)| (mq.clone(), entry.offset))
            .collect();
        // In queue order, as the persist requests go out.
        entries.sort_unstable();
        entries
    }
}

/// The latest offset a queue actor committed, shared with its group's offset store: a commit
/// is one store of a word rather than a message to the store per pull, and the store reads it
/// whenever it reads, resets or persists the queue's offset (see [`LiveOffsets`]). Being the
/// latest value rather than a queue of updates, nothing of it can be left behind in a mailbox.
#[derive(Debug, Clone)]
pub(crate) struct CommittedOffset(std::sync::Arc<std::sync::atomic::AtomicI64>);

impl CommittedOffset {
    /// What the cell holds before the first commit.
    const NONE: i64 = -1;

    /// A cell with nothing committed yet.
    pub(crate) fn new() -> Self {
        CommittedOffset(std::sync::Arc::new(std::sync::atomic::AtomicI64::new(
            Self::NONE,
        )))
    }

    /// Makes `offset` the latest commit. Moving it backwards is for a reset, which the store
    /// must then be told of ([`OffsetTable::reset`]): its table only takes increases from here.
    #[inline]
    pub(crate) fn publish(&self, offset: i64) {
        self.0.store(offset, std::sync::atomic::Ordering::Release);
    }

    /// The latest commit, if any.
    pub(crate) fn latest(&self) -> Option<i64> {
        let offset = self.0.load(std::sync::atomic::Ordering::Acquire);
        (offset >= 0).then_some(offset)
    }

    /// Whether `self` and `other` are the same cell (not merely equal values).
    pub(crate) fn is(&self, other: &CommittedOffset) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The [`CommittedOffset`]s of the queues whose actors commit into an offset store, folded
/// into its [`OffsetTable`] as increase-only updates (as the messages they replace were)
/// before the table is read.
#[derive(Debug, Default)]
pub(crate) struct LiveOffsets {
    cells: HashMap<MessageQueue, CommittedOffset, foldhash::fast::RandomState>,
}

impl LiveOffsets {
    /// `cell` now holds `mq`'s commits. A cell it replaces (the queue's earlier actor) is
    /// folded in first: its last commits still count.
    pub(crate) fn attach(
        &mut self,
        table: &mut OffsetTable,
        mq: &MessageQueue,
        cell: CommittedOffset,
    ) {
        fold(table, mq, &cell);
        if let Some(replaced) = self.cells.insert(mq.clone(), cell) {
            fold(table, mq, &replaced);
        }
    }

    /// Folds `mq`'s latest commit into `table`.
    pub(crate) fn fold(&self, table: &mut OffsetTable, mq: &MessageQueue) {
        if let Some(cell) = self.cells.get(mq) {
            fold(table, mq, cell);
        }
    }

    /// Folds every queue's latest commit into `table`.
    pub(crate) fn fold_all(&self, table: &mut OffsetTable) {
        for (mq, cell) in &self.cells {
            fold(table, mq, cell);
        }
    }

    /// Folds `cell` in a last time and lets it go, unless another cell (a newer actor of the
    /// queue) has replaced it.
    pub(crate) fn detach(
        &mut self,
        table: &mut OffsetTable,
        mq: &MessageQueue,
        cell: &CommittedOffset,
    ) {
        fold(table, mq, cell);
        if self.cells.get(mq).is_some_and(|held| held.is(cell)) {
            self.cells.remove(mq);
        }
    }

    /// How many queues have a cell attached.
    pub(crate) fn len(&self) -> usize {
        self.cells.len()
    }
}

/// `cell`'s latest commit into `table` as an increase-only update of `mq`.
fn fold(table: &mut OffsetTable, mq: &MessageQueue, cell: &CommittedOffset) {
    if let Some(offset) = cell.latest() {
        table.update(mq, offset, true);
    }
}

/// What the offset store (broker or local file) said about a queue's consume offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredOffset {
    /// An offset is stored.
    Found(i64),
    /// No offset is stored for the group (`QUERY_NOT_FOUND`, or no entry in the local file).
    NotFound,
    /// The store could not be asked (timeout, broker error).
    Unavailable,
}

impl StoredOffset {
    /// Interprets a `QUERY_CONSUMER_OFFSET` answer: `SUCCESS` with its `offset`,
    /// `QUERY_NOT_FOUND`, or anything else (including no answer: `code = None`).
    pub fn from_query_response(code: Option<i32>, offset: Option<i64>) -> Self {
        match (code, offset) {
            (Some(response_code::SUCCESS), Some(offset)) => StoredOffset::Found(offset),
            (Some(response_code::QUERY_NOT_FOUND), _) => StoredOffset::NotFound,
            _ => StoredOffset::Unavailable,
        }
    }
}

/// Where a newly owned queue starts, or what to ask the broker to find out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartOffset {
    /// Start at this offset.
    Use(i64),
    /// Ask `GET_MAX_OFFSET` and start there.
    AskMaxOffset,
    /// Ask `SEARCH_OFFSET_BY_TIMESTAMP` for this time (epoch ms) and start there.
    SearchByTimestamp(i64),
    /// The stored offset could not be read: do not guess, retry at the next rebalance (the
    /// queue is not taken meanwhile).
    RetryLater,
}

/// Java's `computePullFromWhere` (protocol.md §6 step 4, consumer-behaviour.md §7): a stored
/// offset wins; otherwise `LastOffset` → max offset (0 for a retry topic, so no retry is
/// skipped), `FirstOffset` → 0 (the broker corrects it with `OFFSET_ILLEGAL`), `Timestamp` →
/// search by `consume_timestamp_ms` (max offset for a retry topic). A failed lookup is never
/// papered over with a guess.
///
/// The broker's answer to [`StartOffset::AskMaxOffset`] / [`StartOffset::SearchByTimestamp`]
/// is used if non-negative; an error or a negative answer means [`StartOffset::RetryLater`].
///
/// ```ignore
/// use rocketmq_actor::consumer::offset::{start_offset, StartOffset, StoredOffset};
/// use rocketmq_actor::consumer::ConsumeFromWhere;
/// let from = ConsumeFromWhere::LastOffset;
/// assert_eq!(start_offset(from, StoredOffset::Found(42), "T", 0), StartOffset::Use(42));
/// assert_eq!(start_offset(from, StoredOffset::NotFound, "T", 0), StartOffset::AskMaxOffset);
/// assert_eq!(start_offset(from, StoredOffset::NotFound, "%RETRY%g", 0), StartOffset::Use(0));
/// ```
pub fn start_offset(
    from: ConsumeFromWhere,
    stored: StoredOffset,
    topic: &str,
    consume_timestamp_ms: i64,
) -> StartOffset {
    match stored {
        StoredOffset::Found(offset) if offset >= 0 => return StartOffset::Use(offset),
        // Java's offset stores report "not found" as -1 and failures as other negatives.
        StoredOffset::Found(-1) | StoredOffset::NotFound => {}
        StoredOffset::Found(_) | StoredOffset::Unavailable => return StartOffset::RetryLater,
    }
    let retry = is_retry_topic(topic);
    match from {
        ConsumeFromWhere::LastOffset if retry => StartOffset::Use(0),
        ConsumeFromWhere::LastOffset => StartOffset::AskMaxOffset,
        ConsumeFromWhere::FirstOffset => StartOffset::Use(0),
        ConsumeFromWhere::Timestamp if retry => StartOffset::AskMaxOffset,
        ConsumeFromWhere::Timestamp => StartOffset::SearchByTimestamp(consume_timestamp_ms),
    }
}

/// Java's default root of local offset files: `<home>/.rocketmq_offsets`.
pub fn default_offset_store_dir(home: &Path) -> PathBuf {
    home.join(".rocketmq_offsets")
}

/// The local offset file of a broadcasting consumer: `<dir>/<instance>/<group>/offsets.json`
/// (the consumers pass `DEFAULT` as the instance, so a restarted member finds its file)
/// (its backup is the same path with `.bak` appended, see [`fs::backup_path`]).
pub fn local_offsets_path(dir: &Path, client_id: &str, group: &str) -> PathBuf {
    dir.join(client_id).join(group).join("offsets.json")
}

/// Serializes offsets as the local file's JSON: `{"offsetTable":{"<queue JSON>":offset,…}}`.
/// Keys are the queue's JSON (`{"brokerName":…,"queueId":…,"topic":…}`) as a string, which
/// is valid JSON and which Java's fastjson reads back as a `MessageQueue` key.
pub fn encode_local_offsets(offsets: &BTreeMap<MessageQueue, i64>) -> String {
    let mut out = String::from("{\n  \"offsetTable\": {");
    for (i, (mq, offset)) in offsets.iter().enumerate() {
        // Field order as Java writes it (alphabetical).
        let key = serde_json::json!({
            "brokerName": mq.broker_name,
            "queueId": mq.queue_id,
            "topic": mq.topic,
        })
        .to_string();
        let quoted = serde_json::Value::String(key).to_string();
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("\n    {quoted}: {offset}"));
    }
    if !offsets.is_empty() {
        out.push_str("\n  ");
    }
    out.push_str("}\n}\n");
    out
}

/// Parses a local offset file: this crate's form (string keys) and Java's fastjson form,
/// where each key is a bare JSON object (`{{"brokerName":"b","queueId":0,"topic":"T"}:12}`).
/// Unknown top-level fields are ignored; negative offsets are dropped.
pub fn decode_local_offsets(text: &str) -> Result<BTreeMap<MessageQueue, i64>, ProtocolError> {
    let mut cursor = Cursor { text, pos: 0 };
    let mut table = BTreeMap::new();
    cursor.expect(b'{')?;
    if cursor.eat(b'}') {
        cursor.expect_end()?;
        return Ok(table);
    }
    loop {
        let field = cursor.value()?;
        cursor.expect(b':')?;
        if field.as_str() == Some("offsetTable") {
            cursor.expect(b'{')?;
            if !cursor.eat(b'}') {
                loop {
                    let key = cursor.value()?;
                    cursor.expect(b':')?;
                    let offset = cursor.value()?;
                    let mq = queue_from_key(key)?;
                    let offset = offset.as_i64().ok_or_else(|| {
                        bad(format!("offset of {mq} is not an integer: {offset}"))
                    })?;
                    if offset >= 0 {
                        table.insert(mq, offset);
                    }
                    if !cursor.eat(b',') {
                        cursor.expect(b'}')?;
                        break;
                    }
                }
            }
        } else {
            cursor.value()?;
        }
        if !cursor.eat(b',') {
            cursor.expect(b'}')?;
            break;
        }
    }
    cursor.expect_end()?;
    Ok(table)
}

fn bad(message: impl Into<String>) -> ProtocolError {
    ProtocolError::Json(message.into())
}

fn queue_from_key(key: serde_json::Value) -> Result<MessageQueue, ProtocolError> {
    let key = match key {
        serde_json::Value::String(text) => serde_json::from_str(&text)
            .map_err(|e| bad(format!("offset table key {text:?} is not a queue: {e}")))?,
        other => other,
    };
    serde_json::from_value(key).map_err(|e| bad(format!("offset table key is not a queue: {e}")))
}

/// A tiny scanner over a JSON document that lets serde_json parse each value, so that the
/// non-standard object keys of fastjson can be read.
struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl Cursor<'_> {
    fn skip_whitespace(&mut self) {
        let rest = self.text.get(self.pos..).unwrap_or("");
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_whitespace();
        if self.text.as_bytes().get(self.pos) == Some(&byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), ProtocolError> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(bad(format!(
                "expected '{}' at byte {} of the offset file",
                char::from(byte),
                self.pos
            )))
        }
    }

    fn expect_end(&mut self) -> Result<(), ProtocolError> {
        self.skip_whitespace();
        if self.pos == self.text.len() {
            Ok(())
        } else {
            Err(bad(format!("trailing characters at byte {}", self.pos)))
        }
    }

    fn value(&mut self) -> Result<serde_json::Value, ProtocolError> {
        self.skip_whitespace();
        let rest = self.text.get(self.pos..).unwrap_or("");
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<serde_json::Value>();
        match stream.next() {
            Some(Ok(value)) => {
                self.pos += stream.byte_offset();
                Ok(value)
            }
            Some(Err(e)) => Err(bad(format!("at byte {}: {e}", self.pos))),
            None => Err(bad("unexpected end of the offset file")),
        }
    }
}

/// Which copy of the local offset file was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetFileSource {
    /// `offsets.json`.
    Main,
    /// `offsets.json.bak`, because the main file was missing, empty or unreadable.
    Backup,
    /// Neither exists: every queue starts by `consume_from_where`.
    Nothing,
}

/// Chooses between the contents of the main offset file and its backup, as Java's
/// `LocalFileOffsetStore.readLocalOffset` does: the main file (always the newer) if present,
/// non-blank and valid, else the backup. An invalid backup is an error (refusing to start from
/// a guess); two missing/blank files give an empty table.
pub fn pick_local_offsets(
    main: Option<&[u8]>,
    backup: Option<&[u8]>,
) -> Result<(OffsetFileSource, BTreeMap<MessageQueue, i64>), ProtocolError> {
    let blank = |bytes: &[u8]| bytes.iter().all(u8::is_ascii_whitespace);
    let parse = |bytes: &[u8]| {
        std::str::from_utf8(bytes)
            .map_err(|e| bad(format!("offset file is not UTF-8: {e}")))
            .and_then(decode_local_offsets)
    };
    if let Some(main) = main.filter(|m| !blank(m)) {
        if let Ok(table) = parse(main) {
            return Ok((OffsetFileSource::Main, table));
        }
    }
    match backup.filter(|b| !blank(b)) {
        Some(backup) => Ok((OffsetFileSource::Backup, parse(backup)?)),
        None if main.is_some_and(|m| !blank(m)) => Err(bad(
            "the offset file is corrupt and there is no backup to fall back to",
        )),
        None => Ok((OffsetFileSource::Nothing, BTreeMap::new())),
    }
}

/// File helpers for the local offset store (the only I/O in this module; the offset actor
/// calls them).
pub mod fs {
    use std::ffi::OsString;
    use std::fs::{self, File};
    use std::io::{self, Write};
    use std::path::{Path, PathBuf};

    fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
        let mut name: OsString = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    }

    /// `<path>.bak`, where the previous content is kept.
    pub fn backup_path(path: &Path) -> PathBuf {
        with_suffix(path, ".bak")
    }

    fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut file = File::create(path)?;
        file.write_all(bytes)?;
        file.sync_all()
    }

    fn sync_dir(dir: &Path) -> io::Result<()> {
        #[cfg(unix)]
        {
            File::open(dir)?.sync_all()
        }
        #[cfg(not(unix))]
        {
            let _ = dir;
            Ok(())
        }
    }

    /// Replaces `path` with `bytes` so that a crash at any point leaves a complete file: write
    /// `<path>.tmp` and fsync it, copy the current content (if any) to `<path>.bak` the same
    /// way, rename the temp file over `path`, fsync the directory. Parent directories are
    /// created.
    pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fs::create_dir_all(&dir)?;
        let tmp = with_suffix(path, ".tmp");
        write_synced(&tmp, bytes)?;
        match fs::read(path) {
            Ok(previous) => {
                let backup = backup_path(path);
                let backup_tmp = with_suffix(&backup, ".tmp");
                write_synced(&backup_tmp, &previous)?;
                fs::rename(&backup_tmp, &backup)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        fs::rename(&tmp, path)?;
        sync_dir(&dir)
    }

    /// The raw contents of an offset file and its backup; a missing file is `None`.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct FileAndBackup {
        /// Content of the file itself.
        pub main: Option<Vec<u8>>,
        /// Content of `<path>.bak`.
        pub backup: Option<Vec<u8>>,
    }

    /// Reads `path` and its backup (feed them to [`super::pick_local_offsets`]).
    pub fn read_with_backup(path: &Path) -> io::Result<FileAndBackup> {
        let read = |p: &Path| match fs::read(p) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        };
        Ok(FileAndBackup {
            main: read(path)?,
            backup: read(&backup_path(path))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_commit_reaches_the_table_when_it_is_read_without_a_message() {
        let (mut table, mut live) = (OffsetTable::new(), LiveOffsets::default());
        let q = mq("a", 0);
        let cell = CommittedOffset::new();
        live.attach(&mut table, &q, cell.clone());
        live.fold_all(&mut table);
        assert_eq!(table.read(&q), None, "nothing committed yet");
        cell.publish(12);
        live.fold(&mut table, &q);
        assert_eq!(table.read(&q), Some(12));
        cell.publish(30);
        live.fold_all(&mut table);
        assert_eq!(table.read(&q), Some(30));
    }

    #[test]
    fn a_reset_published_to_the_cell_is_not_undone_by_the_next_fold() {
        let (mut table, mut live) = (OffsetTable::new(), LiveOffsets::default());
        let q = mq("a", 0);
        let cell = CommittedOffset::new();
        live.attach(&mut table, &q, cell.clone());
        cell.publish(50);
        // The queue actor's reset: the cell first, then the store's reset.
        cell.publish(10);
        live.fold(&mut table, &q);
        table.reset(&q, 10);
        live.fold_all(&mut table);
        assert_eq!(table.read(&q), Some(10));
        cell.publish(11);
        live.fold_all(&mut table);
        assert_eq!(table.read(&q), Some(11));
    }

    #[test]
    fn a_frozen_offset_ignores_folded_commits_as_it_ignores_updates() {
        let (mut table, mut live) = (OffsetTable::new(), LiveOffsets::default());
        let q = mq("a", 0);
        let cell = CommittedOffset::new();
        live.attach(&mut table, &q, cell.clone());
        table.update_and_freeze(&q, 5);
        cell.publish(90);
        live.fold_all(&mut table);
        assert_eq!(table.read(&q), Some(5));
    }

    #[test]
    fn a_detached_cell_counts_once_more_and_a_newer_one_stays() {
        let (mut table, mut live) = (OffsetTable::new(), LiveOffsets::default());
        let q = mq("a", 0);
        let old = CommittedOffset::new();
        live.attach(&mut table, &q, old.clone());
        old.publish(7);
        let newer = CommittedOffset::new();
        live.attach(&mut table, &q, newer.clone());
        assert_eq!(table.read(&q), Some(7), "the replaced cell's commit counts");
        old.publish(8);
        // The old actor's last commit, then its goodbye: the newer cell stays attached.
        live.detach(&mut table, &q, &old);
        assert_eq!((table.read(&q), live.len()), (Some(8), 1));
        newer.publish(20);
        live.fold_all(&mut table);
        assert_eq!(table.read(&q), Some(20));
        live.detach(&mut table, &q, &newer);
        assert_eq!(live.len(), 0);
        newer.publish(25);
        live.fold_all(&mut table);
        assert_eq!(table.read(&q), Some(20), "a detached cell is read no more");
    }

    fn mq(broker: &str, id: i32) -> MessageQueue {
        MessageQueue::new("T", broker, id)
    }

    #[test]
    fn a_member_persists_owned_queues_and_changed_hand_pulled_ones() {
        let mut t = OffsetTable::new();
        let owned_q = MessageQueue::new("Sub", "a", 0);
        let lost_q = MessageQueue::new("Sub", "a", 1);
        let manual_read = MessageQueue::new("Manual", "a", 0);
        let manual_moved = MessageQueue::new("Manual", "a", 1);
        t.update(&owned_q, 5, false);
        t.mark_persisted(&owned_q, 5);
        t.update(&lost_q, 7, false);
        t.load(&manual_read, 9);
        t.load(&manual_moved, 3);
        t.update(&manual_moved, 4, false);
        let divided: BTreeSet<String> = ["Sub".to_owned()].into();
        let owned: BTreeSet<MessageQueue> = [owned_q.clone()].into();
        assert_eq!(
            t.member_persist_entries(&divided, &owned),
            vec![(manual_moved.clone(), 4), (owned_q.clone(), 5)],
            "owned (even unchanged) and changed hand-pulled queues; not a lost one, not a read one"
        );
        t.mark_persisted(&manual_moved, 4);
        assert_eq!(
            t.member_persist_entries(&divided, &owned),
            vec![(owned_q, 5)]
        );
    }

    #[test]
    fn a_loaded_offset_does_not_replace_a_held_one() {
        let mut t = OffsetTable::new();
        let q = mq("a", 0);
        t.update(&q, 10, false);
        t.load(&q, 3);
        assert_eq!(t.read(&q), Some(10));
        t.load(&mq("a", 1), -1);
        assert_eq!(t.read(&mq("a", 1)), None);
    }

    #[test]
    fn updates_are_increase_only_unless_forced() {
        let mut t = OffsetTable::new();
        let q = mq("a", 0);
        assert_eq!(t.read(&q), None);
        assert!(
            !t.update(&q, -1, false),
            "negative offsets are never stored"
        );
        assert_eq!(t.read(&q), None);
        assert!(t.update(&q, 5, true));
        assert!(!t.update(&q, 5, true));
        assert!(!t.update(&q, 4, true));
        assert!(t.update(&q, 4, false));
        assert_eq!(t.read(&q), Some(4));
        t.reset(&q, 1);
        assert_eq!(t.read(&q), Some(1));
        t.reset(&q, -5);
        assert_eq!(t.read(&q), Some(1));
    }

    #[test]
    fn a_frozen_offset_survives_until_removed_or_reset() {
        let mut t = OffsetTable::new();
        let q = mq("a", 0);
        t.update(&q, 100, true);
        t.update_and_freeze(&q, 20);
        assert!(t.is_frozen(&q));
        assert!(!t.update(&q, 150, true));
        assert!(!t.update(&q, 10, false));
        assert_eq!(t.read(&q), Some(20));
        assert_eq!(t.remove(&q), Some(20));
        assert!(t.update(&q, 150, true));
        t.update_and_freeze(&q, 30);
        t.reset(&q, 40);
        assert!(!t.is_frozen(&q));
        assert!(t.update(&q, 41, true));
    }

    #[test]
    fn persist_plan_groups_owned_queues_by_broker() {
        let mut t = OffsetTable::new();
        for (q, o) in [
            (mq("a", 0), 1),
            (mq("a", 1), 2),
            (mq("b", 0), 3),
            (mq("c", 0), 4),
        ] {
            t.update(&q, o, true);
        }
        let owned: BTreeSet<_> = [mq("a", 0), mq("a", 1), mq("b", 0)].into();
        let plan = t.persist_plan(&owned, false);
        assert_eq!(plan.len(), 2);
        assert_eq!(plan["a"], vec![(mq("a", 0), 1), (mq("a", 1), 2)]);
        assert_eq!(plan["b"], vec![(mq("b", 0), 3)]);
        t.mark_persisted(&mq("a", 0), 1);
        t.mark_persisted(&mq("b", 0), 3);
        let changed = t.persist_plan(&owned, true);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed["a"], vec![(mq("a", 1), 2)]);
        t.update(&mq("b", 0), 9, true);
        assert_eq!(t.persist_plan(&owned, true)["b"], vec![(mq("b", 0), 9)]);
        assert_eq!(t.retain_owned(&owned), vec![mq("c", 0)]);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn start_offset_rules() {
        use ConsumeFromWhere::*;
        use StartOffset::*;
        let ts = 1_700_000_000_000;
        for from in [LastOffset, FirstOffset, Timestamp] {
            assert_eq!(start_offset(from, StoredOffset::Found(7), "T", ts), Use(7));
            assert_eq!(start_offset(from, StoredOffset::Found(0), "T", ts), Use(0));
            assert_eq!(
                start_offset(from, StoredOffset::Unavailable, "T", ts),
                RetryLater
            );
            assert_eq!(
                start_offset(from, StoredOffset::Found(-2), "T", ts),
                RetryLater
            );
        }
        assert_eq!(
            start_offset(LastOffset, StoredOffset::NotFound, "T", ts),
            AskMaxOffset
        );
        assert_eq!(
            start_offset(LastOffset, StoredOffset::Found(-1), "T", ts),
            AskMaxOffset
        );
        assert_eq!(
            start_offset(LastOffset, StoredOffset::NotFound, "%RETRY%g", ts),
            Use(0)
        );
        assert_eq!(
            start_offset(FirstOffset, StoredOffset::NotFound, "T", ts),
            Use(0)
        );
        assert_eq!(
            start_offset(Timestamp, StoredOffset::NotFound, "T", ts),
            SearchByTimestamp(ts)
        );
        assert_eq!(
            start_offset(Timestamp, StoredOffset::NotFound, "%RETRY%g", ts),
            AskMaxOffset
        );
    }

    #[test]
    fn query_responses_map_to_stored_offsets() {
        assert_eq!(
            StoredOffset::from_query_response(Some(0), Some(12)),
            StoredOffset::Found(12)
        );
        assert_eq!(
            StoredOffset::from_query_response(Some(22), None),
            StoredOffset::NotFound
        );
        assert_eq!(
            StoredOffset::from_query_response(Some(0), None),
            StoredOffset::Unavailable
        );
        assert_eq!(
            StoredOffset::from_query_response(Some(1), Some(3)),
            StoredOffset::Unavailable
        );
        assert_eq!(
            StoredOffset::from_query_response(None, None),
            StoredOffset::Unavailable
        );
    }

    #[test]
    fn local_paths_follow_java() {
        let dir = default_offset_store_dir(Path::new("/home/u"));
        assert_eq!(dir, PathBuf::from("/home/u/.rocketmq_offsets"));
        let path = local_offsets_path(&dir, "10.0.0.1@42#7", "g");
        assert_eq!(
            path,
            PathBuf::from("/home/u/.rocketmq_offsets/10.0.0.1@42#7/g/offsets.json")
        );
        assert_eq!(
            fs::backup_path(&path),
            PathBuf::from("/home/u/.rocketmq_offsets/10.0.0.1@42#7/g/offsets.json.bak")
        );
    }

    #[test]
    fn reads_the_fastjson_form_java_writes() {
        // What Java's OffsetSerializeWrapper.toJson(true) produces: object keys, tabs.
        let java = "{\n\t\"offsetTable\":{{\n\t\t\t\"brokerName\":\"broker-a\",\n\t\t\t\"queueId\":0,\n\t\t\t\"topic\":\"T\"\n\t\t}:12,{\n\t\t\t\"brokerName\":\"broker-b\",\n\t\t\t\"queueId\":3,\n\t\t\t\"topic\":\"%RETRY%g\"\n\t\t}:0\n\t}\n}";
        let table = decode_local_offsets(java).unwrap();
        assert_eq!(table.len(), 2);
        assert_eq!(table[&MessageQueue::new("T", "broker-a", 0)], 12);
        assert_eq!(table[&MessageQueue::new("%RETRY%g", "broker-b", 3)], 0);
    }

    #[test]
    fn writes_valid_json_with_string_keys() {
        let table: BTreeMap<_, _> =
            [(mq("a", 0), 5), (MessageQueue::new("Tö\"", "b", 1), 6)].into();
        let text = encode_local_offsets(&table);
        let generic: serde_json::Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&String> = generic["offsetTable"].as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 2);
        assert!(keys
            .iter()
            .any(|k| k.as_str() == r#"{"brokerName":"a","queueId":0,"topic":"T"}"#));
        assert_eq!(decode_local_offsets(&text).unwrap(), table);
        assert_eq!(
            decode_local_offsets(&encode_local_offsets(&BTreeMap::new())).unwrap(),
            BTreeMap::new()
        );
    }

    #[test]
    fn tolerates_extra_fields_and_rejects_garbage() {
        let ok = r#"{"version":2,"offsetTable":{},"other":[1,{"a":2}]}"#;
        assert!(decode_local_offsets(ok).unwrap().is_empty());
        assert!(decode_local_offsets("{}").unwrap().is_empty());
        for bad in [
            "",
            "{",
            "[]",
            r#"{"offsetTable":{"nope":1}}"#,
            r#"{"offsetTable":{{"topic":"T"}:1}}"#,
            r#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:"x"}}"#,
            r#"{"offsetTable":{}} trailing"#,
            r#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:1"#,
        ] {
            assert!(decode_local_offsets(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn picks_main_then_backup() {
        let a = encode_local_offsets(&[(mq("a", 0), 1)].into());
        let b = encode_local_offsets(&[(mq("a", 0), 0)].into());
        let (src, t) = pick_local_offsets(Some(a.as_bytes()), Some(b.as_bytes())).unwrap();
        assert_eq!((src, t[&mq("a", 0)]), (OffsetFileSource::Main, 1));
        for main in [None, Some(&b"  \n"[..]), Some(&b"{\"offsetTa"[..])] {
            let (src, t) = pick_local_offsets(main, Some(b.as_bytes())).unwrap();
            assert_eq!((src, t[&mq("a", 0)]), (OffsetFileSource::Backup, 0));
        }
        let (src, t) = pick_local_offsets(None, None).unwrap();
        assert_eq!(src, OffsetFileSource::Nothing);
        assert!(t.is_empty());
        assert!(pick_local_offsets(Some(b"garbage"), None).is_err());
        assert!(pick_local_offsets(None, Some(b"garbage")).is_err());
    }

    #[test]
    fn atomic_write_keeps_the_previous_content_as_backup() {
        let dir = std::env::temp_dir().join(format!(
            "rocketmq-actor-offset-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let path = local_offsets_path(&dir, "cid", "g");
        fs::write_atomically(&path, b"first").unwrap();
        let read = fs::read_with_backup(&path).unwrap();
        assert_eq!((read.main, read.backup), (Some(b"first".to_vec()), None));
        fs::write_atomically(&path, b"second").unwrap();
        let read = fs::read_with_backup(&path).unwrap();
        assert_eq!(
            (read.main, read.backup),
            (Some(b"second".to_vec()), Some(b"first".to_vec()))
        );
        let (source, _) = pick_local_offsets(None, None).unwrap();
        assert_eq!(source, OffsetFileSource::Nothing);
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_previous_file_that_cannot_be_read_fails_the_write_instead_of_losing_it() {
        let dir = std::env::temp_dir().join(format!(
            "rocketmq-actor-offset-unreadable-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        // A link to itself: reading it fails (not "not found"), replacing it would not.
        let path = dir.join("offsets.json");
        std::os::unix::fs::symlink(&path, &path).unwrap();
        let error = fs::write_atomically(&path, b"new").expect_err("the old file is unreadable");
        assert_ne!(error.kind(), std::io::ErrorKind::NotFound);
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn increase_only_updates_keep_the_maximum(updates in proptest::collection::vec((0i32..3, -5i64..1000), 1..60)) {
            let mut t = OffsetTable::new();
            let mut max: BTreeMap<i32, i64> = BTreeMap::new();
            for (q, o) in updates {
                t.update(&mq("a", q), o, true);
                if o >= 0 {
                    let e = max.entry(q).or_insert(o);
                    *e = (*e).max(o);
                }
            }
            for (q, o) in max {
                prop_assert_eq!(t.read(&mq("a", q)), Some(o));
            }
        }

        #[test]
        fn local_file_round_trips(
            entries in proptest::collection::btree_map(
                ("[A-Za-z0-9%_|-]{1,20}", "[a-z@-]{1,10}", 0i32..64), 0i64..i64::MAX, 0..20)
        ) {
            let table: BTreeMap<MessageQueue, i64> = entries
                .into_iter()
                .map(|((t, b, q), o)| (MessageQueue::new(t, b, q), o))
                .collect();
            prop_assert_eq!(decode_local_offsets(&encode_local_offsets(&table)).unwrap(), table);
        }
    }
}
