//! Message properties: the `name\x01value\x02…` string carried by every message.
//!
//! Decoding a pull body must be cheap, so [`Properties`] keeps the wire bytes it was decoded
//! from (a zero-copy slice of the pull body) and answers lookups by scanning them; nothing is
//! parsed into a map unless the properties are modified.

use bytes::{BufMut, Bytes, BytesMut};
use std::borrow::Cow;
use std::fmt;

use crate::error::ProtocolError;

/// Separator between a property name and its value.
pub const NAME_VALUE_SEPARATOR: u8 = 0x01;
/// Separator after each `name\x01value` pair.
pub const PROPERTY_SEPARATOR: u8 = 0x02;

/// Names of the properties RocketMQ itself uses (Java `MessageConst`).
pub mod property {
    /// The (single) tag of the message.
    pub const TAGS: &str = "TAGS";
    /// Business keys, separated by [`KEY_SEPARATOR`].
    pub const KEYS: &str = "KEYS";
    /// Separator between the keys of [`KEYS`].
    pub const KEY_SEPARATOR: &str = " ";
    /// Client-generated unique id: the msgId users see.
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    /// Producer asks the broker to wait for the store to be flushed (`"true"`/`"false"`).
    pub const WAIT: &str = "WAIT";
    /// Delay level of a scheduled message.
    pub const DELAY: &str = "DELAY";
    /// Original topic of a message living in `%RETRY%group`.
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    /// Original topic of a scheduled or transactional message.
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    /// Original queue id of a scheduled or transactional message.
    pub const REAL_QID: &str = "REAL_QID";
    /// `"true"` on transactional (half) messages.
    pub const TRAN_MSG: &str = "TRAN_MSG";
    /// Producer group of a transactional message.
    pub const PGROUP: &str = "PGROUP";
    /// Minimum queue offset, added by the client from the pull response.
    pub const MIN_OFFSET: &str = "MIN_OFFSET";
    /// Maximum queue offset, added by the client from the pull response.
    pub const MAX_OFFSET: &str = "MAX_OFFSET";
    /// Legacy buyer id.
    pub const BUYER_ID: &str = "BUYER_ID";
    /// msgId of the first delivery of a retried message.
    pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
    /// Legacy transfer flag.
    pub const TRANSFER_FLAG: &str = "TRANSFER_FLAG";
    /// Legacy correction flag.
    pub const CORRECTION_FLAG: &str = "CORRECTION_FLAG";
    /// Legacy MQ2 flag.
    pub const MQ2_FLAG: &str = "MQ2_FLAG";
    /// Retry count carried in the message (client fallback path).
    pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
    /// Region of the broker that stored the message.
    pub const MSG_REGION: &str = "MSG_REGION";
    /// Whether message tracing is on.
    pub const TRACE_ON: &str = "TRACE_ON";
    /// Extra unique info.
    pub const EXTEND_UNIQ_INFO: &str = "EXTEND_UNIQ_INFO";
    /// Per-message maximum number of retries.
    pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
    /// When the consumer started consuming the message (ms, client-side).
    pub const CONSUME_START_TIME: &str = "CONSUME_START_TIME";
    /// Number of messages in an inner batch.
    pub const INNER_NUM: &str = "INNER_NUM";
    /// Base queue offset of an inner batch.
    pub const INNER_BASE: &str = "INNER_BASE";
    /// Duplicate info (5.x).
    pub const DUP_INFO: &str = "DUP_INFO";
    /// Transaction check immunity, seconds.
    pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
    /// Queue offset of the half message of a transaction.
    pub const TRAN_PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
    /// Transaction id.
    pub const TRANSACTION_ID: &str = "__transactionId__";
    /// Number of transaction checks done.
    pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    /// Instance id (namespaces).
    pub const INSTANCE_ID: &str = "INSTANCE_ID";
    /// Request/reply correlation id.
    pub const CORRELATION_ID: &str = "CORRELATION_ID";
    /// Client a reply message goes to.
    pub const REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
    /// Time-to-live of a request message.
    pub const TTL: &str = "TTL";
    /// When a reply message arrived.
    pub const ARRIVE_TIME: &str = "ARRIVE_TIME";
    /// When a reply was pushed.
    pub const PUSH_REPLY_TIME: &str = "PUSH_REPLY_TIME";
    /// Broker cluster name (added by the broker on send).
    pub const CLUSTER: &str = "CLUSTER";
    /// Message type (request/reply).
    pub const MSG_TYPE: &str = "MSG_TYPE";
    /// Pop checkpoint.
    pub const POP_CK: &str = "POP_CK";
    /// Pop checkpoint offset.
    pub const POP_CK_OFFSET: &str = "POP_CK_OFFSET";
    /// First pop time.
    pub const FIRST_POP_TIME: &str = "1ST_POP_TIME";
    /// Sharding key of an ordered message.
    pub const SHARDING_KEY: &str = "__SHARDINGKEY";
    /// Forward queue id.
    pub const FORWARD_QUEUE_ID: &str = "PROPERTY_FORWARD_QUEUE_ID";
    /// Redirect marker.
    pub const REDIRECT: &str = "REDIRECT";
    /// Multi-dispatch queues of a light message queue.
    pub const INNER_MULTI_DISPATCH: &str = "INNER_MULTI_DISPATCH";
    /// Multi-dispatch queue offsets of a light message queue.
    pub const INNER_MULTI_QUEUE_OFFSET: &str = "INNER_MULTI_QUEUE_OFFSET";
    /// Trace context.
    pub const TRACE_CONTEXT: &str = "TRACE_CONTEXT";
    /// 5.x timer message: delay in seconds.
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    /// 5.x timer message: absolute delivery time (ms).
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    /// 5.x timer message: delay in ms.
    pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
    /// 5.x timer bookkeeping.
    pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
    /// 5.x timer bookkeeping.
    pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
    /// 5.x timer bookkeeping.
    pub const TIMER_ROLL_TIMES: &str = "TIMER_ROLL_TIMES";
    /// 5.x timer bookkeeping.
    pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
    /// 5.x timer bookkeeping.
    pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
    /// 5.x timer bookkeeping.
    pub const TIMER_DEL_MS: &str = "TIMER_DEL_MS";
    /// 5.x timer bookkeeping.
    pub const TIMER_DELAY_LEVEL: &str = "TIMER_DELAY_LEVEL";
    /// Born host as a property (5.x proxy).
    pub const BORN_HOST: &str = "__BORNHOST";
    /// Born timestamp as a property (5.x proxy).
    pub const BORN_TIMESTAMP: &str = "BORN_TIMESTAMP";
    /// Body CRC appended by brokers with `appendPropCRC`.
    pub const CRC32: &str = "__CRC32#";
    /// Original topic of a dead-lettered message.
    pub const DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
    /// Original msgId of a dead-lettered message.
    pub const DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";
    /// Prefix of properties a broker never stores.
    pub const TRANSIENT_PREFIX: &str = "__RMQ.TRANSIENT.";
}

/// The wire bytes; always valid UTF-8.
#[derive(Clone)]
enum Wire {
    /// A zero-copy slice of a received buffer.
    Shared(Bytes),
    /// Text owned after a modification; appending to it is amortised O(1).
    Owned(String),
}

/// The properties of a message, with Java's parsing rules.
///
/// The text is kept in wire form (`name\x01value\x02…`); lookups scan it. A pair counts only
/// when its name and value are both non-empty, and a later pair overrides an earlier one with
/// the same name — exactly what Java's `string2messageProperties` does.
///
/// ```
/// use rocketmq_actor::message::{property, Properties};
/// let mut props = Properties::parse("TAGS\u{1}TagA\u{2}KEYS\u{1}k1 k2\u{2}TAGS\u{1}TagB\u{2}");
/// assert_eq!(props.get(property::TAGS), Some("TagB"));
/// assert_eq!(props.len(), 2);
/// props.insert("color", "red");
/// assert_eq!(props.get("color"), Some("red"));
/// assert_eq!(props.remove(property::KEYS).as_deref(), Some("k1 k2"));
/// assert_eq!(props.to_wire(), "TAGS\u{1}TagB\u{2}color\u{1}red\u{2}");
/// ```
#[derive(Clone)]
pub struct Properties {
    wire: Wire,
    /// The text is known to be canonical (see [`Properties::is_canonical`]): true for text
    /// this type wrote itself, so a send does not check what it built; false means "not
    /// checked", not "not canonical".
    known_canonical: bool,
}

impl Default for Properties {
    fn default() -> Self {
        Properties::new()
    }
}

impl Properties {
    /// No properties.
    pub fn new() -> Self {
        Properties {
            wire: Wire::Shared(Bytes::new()),
            known_canonical: true,
        }
    }

    /// Properties from their wire text (kept as is; pairs are found by scanning it).
    pub fn parse(text: &str) -> Self {
        Properties {
            wire: Wire::Owned(text.to_owned()),
            known_canonical: false,
        }
    }

    /// Properties from wire bytes, without copying them.
    ///
    /// Fails when the bytes are not UTF-8 (Java would substitute U+FFFD; a stored record
    /// written by a real producer is always valid UTF-8, so garbage is reported instead).
    pub fn from_wire(bytes: Bytes) -> Result<Self, ProtocolError> {
        // Properties are almost always ASCII, which is checked a word at a time; the full
        // UTF-8 validation runs only for the rest.
        if !bytes.is_ascii() && std::str::from_utf8(&bytes).is_err() {
            return Err(ProtocolError::InvalidMessage(
                "properties are not valid UTF-8".into(),
            ));
        }
        Ok(Properties {
            wire: Wire::Shared(bytes),
            known_canonical: false,
        })
    }

    /// The raw wire bytes as received or last modified (may contain pairs Java would ignore).
    pub fn raw_wire(&self) -> &[u8] {
        match &self.wire {
            Wire::Shared(bytes) => bytes,
            Wire::Owned(text) => text.as_bytes(),
        }
    }

    /// The value of `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        lookup(self.raw_wire(), name.as_bytes()).and_then(|value| std::str::from_utf8(value).ok())
    }

    /// [`Properties::get`] of two names in one scan of the properties. Both names must be
    /// ones a pair can have (non-empty, neither separator in them), as the constant names of
    /// [`property`] are: this runs for every message of a key-ordered consumer, so it does
    /// not check them.
    pub(crate) fn get_two(&self, first: &str, second: &str) -> (Option<&str>, Option<&str>) {
        fn text(value: Option<&[u8]>) -> Option<&str> {
            value.and_then(|v| std::str::from_utf8(v).ok())
        }
        let (a, b) = lookup_two(self.raw_wire(), first.as_bytes(), second.as_bytes());
        (text(a), text(b))
    }

    /// Whether `name` is present.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Sets `name` to `value`, replacing any previous value.
    ///
    /// Returns `false` and changes nothing when the pair cannot be represented on the wire:
    /// an empty name or value (Java's parser drops those) or one containing the separator
    /// characters `\x01`/`\x02`.
    pub fn insert(&mut self, name: impl AsRef<str>, value: impl AsRef<str>) -> bool {
        let (name, value) = (name.as_ref(), value.as_ref());
        if !is_representable(name) || !is_representable(value) {
            return false;
        }
        if self.contains(name) {
            self.rebuild_without(name);
        }
        self.append_pair(name, value);
        true
    }

    /// [`Properties::insert`] of a `name` the caller has just found absent: one scan of the
    /// properties instead of two (the producer's message id).
    pub(crate) fn insert_absent(&mut self, name: &str, value: &str) -> bool {
        debug_assert!(!self.contains(name), "{name} is present");
        if !is_representable(name) || !is_representable(value) {
            return false;
        }
        self.append_pair(name, value);
        true
    }

    /// Appends a representable pair whose name is not present.
    fn append_pair(&mut self, name: &str, value: &str) {
        // Canonical text plus a pair whose name it lacks is canonical again.
        let canonical = self.known_canonical;
        let mut text = self.take_owned(name.len() + value.len() + 3);
        if text
            .as_bytes()
            .last()
            .is_some_and(|&b| b != PROPERTY_SEPARATOR)
        {
            text.push(PROPERTY_SEPARATOR as char);
        }
        text.push_str(name);
        text.push(NAME_VALUE_SEPARATOR as char);
        text.push_str(value);
        text.push(PROPERTY_SEPARATOR as char);
        self.wire = Wire::Owned(text);
        self.known_canonical = canonical;
    }

    /// Removes `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        let old = self.get(name)?.to_owned();
        self.rebuild_without(name);
        Some(old)
    }

    /// The pairs Java would see, in wire order (a repeated name appears once, at its last
    /// position, with its last value).
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            remaining: self.raw_wire(),
        }
    }

    /// Number of distinct properties.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether there are no properties.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The wire text Java would write for these properties: `name\x01value\x02` per pair.
    pub fn to_wire(&self) -> String {
        let raw = self.raw_wire();
        if self.is_canonical() {
            // Canonical bytes are valid UTF-8 by construction; the fallback is unreachable.
            return String::from_utf8_lossy(raw).into_owned();
        }
        let mut out = String::with_capacity(raw.len());
        for (name, value) in self.iter() {
            out.push_str(name);
            out.push(NAME_VALUE_SEPARATOR as char);
            out.push_str(value);
            out.push(PROPERTY_SEPARATOR as char);
        }
        out
    }

    /// Length in bytes of [`to_wire`](Self::to_wire).
    pub fn wire_len(&self) -> usize {
        if self.is_canonical() {
            self.raw_wire().len()
        } else {
            self.iter().map(|(k, v)| k.len() + v.len() + 2).sum()
        }
    }

    /// Appends [`to_wire`](Self::to_wire) to `dst` without an intermediate string.
    pub fn write_wire(&self, dst: &mut BytesMut) {
        if self.is_canonical() {
            dst.put_slice(self.raw_wire());
            return;
        }
        for (name, value) in self.iter() {
            dst.put_slice(name.as_bytes());
            dst.put_u8(NAME_VALUE_SEPARATOR);
            dst.put_slice(value.as_bytes());
            dst.put_u8(PROPERTY_SEPARATOR);
        }
    }

    /// Whether the raw text is exactly what Java would write: only valid pairs, each
    /// terminated, no repeated names.
    fn is_canonical(&self) -> bool {
        self.known_canonical || self.scan_is_canonical()
    }

    /// [`Properties::is_canonical`] by looking at the text.
    fn scan_is_canonical(&self) -> bool {
        let raw = self.raw_wire();
        if raw.is_empty() {
            return true;
        }
        let Some(body) = raw.strip_suffix(&[PROPERTY_SEPARATOR]) else {
            return false;
        };
        // Checked on every send: the first names live on the stack, so the usual handful of
        // properties costs no allocation.
        let mut first_names: [&[u8]; 16] = [&[]; 16];
        let mut more_names: Vec<&[u8]> = Vec::new();
        for (index, segment) in body.split(|&b| b == PROPERTY_SEPARATOR).enumerate() {
            let Some((name, _)) = split_pair(segment) else {
                return false;
            };
            let seen = first_names
                .get(..index.min(first_names.len()))
                .unwrap_or_default();
            if seen.contains(&name) || more_names.contains(&name) {
                return false;
            }
            match first_names.get_mut(index) {
                Some(slot) => *slot = name,
                None => more_names.push(name),
            }
        }
        true
    }

    /// [`to_wire`](Self::to_wire) without a copy when the stored text already is exactly that.
    pub fn wire_text(&self) -> Cow<'_, str> {
        if self.is_canonical() {
            if let Ok(text) = std::str::from_utf8(self.raw_wire()) {
                return Cow::Borrowed(text);
            }
        }
        Cow::Owned(self.to_wire())
    }

    /// The text as an owned string with room for `extra` more bytes (the properties are left
    /// empty until it is put back).
    fn take_owned(&mut self, extra: usize) -> String {
        self.known_canonical = true;
        match std::mem::replace(&mut self.wire, Wire::Shared(Bytes::new())) {
            Wire::Owned(mut text) => {
                text.reserve(extra);
                text
            }
            Wire::Shared(bytes) => {
                let mut text = String::with_capacity(bytes.len() + extra);
                text.push_str(&String::from_utf8_lossy(&bytes));
                text
            }
        }
    }

    fn rebuild_without(&mut self, name: &str) {
        let mut out = String::with_capacity(self.raw_wire().len());
        for (key, value) in self.iter().filter(|(key, _)| *key != name) {
            out.push_str(key);
            out.push(NAME_VALUE_SEPARATOR as char);
            out.push_str(value);
            out.push(PROPERTY_SEPARATOR as char);
        }
        self.wire = Wire::Owned(out);
        // Rebuilt from the pairs Java would see: canonical.
        self.known_canonical = true;
    }
}

fn is_representable(text: &str) -> bool {
    !text.is_empty()
        && !text
            .bytes()
            .any(|b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR)
}

/// Index of the first `needle` in `hay`, eight bytes at a time: property lookups scan the
/// wire text on every call, so this loop is the hot path of `get`.
#[inline]
fn find_byte(hay: &[u8], needle: u8) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let pattern = ONES * u64::from(needle);
    let mut chunks = hay.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let Ok(word) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let diff = u64::from_le_bytes(word) ^ pattern;
        // Classic "has a zero byte": the lowest flagged byte is always a real match.
        let zeros = diff.wrapping_sub(ONES) & !diff & HIGHS;
        if zeros != 0 {
            return Some(offset + (zeros.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == needle)
        .map(|at| offset + at)
}

/// Splits off the first `\x02`-terminated segment: (segment, rest after the separator).
#[inline]
fn next_segment(text: &[u8]) -> (&[u8], &[u8]) {
    match find_byte(text, PROPERTY_SEPARATOR) {
        Some(at) => (
            text.get(..at).unwrap_or_default(),
            text.get(at + 1..).unwrap_or_default(),
        ),
        None => (text, &[]),
    }
}

/// [`lookup`] of several names in one pass over `text`: `found[i]` gets the value of the last
/// valid pair named `names[i]` (left as it was when there is none). The names must be ones a
/// pair can have (non-empty, no separator in them), as a SQL92 expression's are.
pub(crate) fn lookup_many<'t>(
    text: &'t [u8],
    names: &[impl AsRef<[u8]>],
    found: &mut [Option<&'t [u8]>],
) {
    let mut rest = text;
    while !rest.is_empty() {
        let (segment, tail) = next_segment(rest);
        rest = tail;
        for (name, slot) in names.iter().zip(found.iter_mut()) {
            if let Some(value) = value_in(segment, name.as_ref()) {
                *slot = Some(value);
            }
        }
    }
}

/// Splits one `name\x01value` segment by Java's rule: at the first `\x01`, keeping it only
/// when both sides are non-empty (the value may itself contain `\x01`).
fn split_pair(segment: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = find_byte(segment, NAME_VALUE_SEPARATOR)?;
    let name = segment.get(..at)?;
    let value = segment.get(at + 1..)?;
    if name.is_empty() || value.is_empty() {
        None
    } else {
        Some((name, value))
    }
}

/// The value of the last valid pair named `name` in `text`.
fn lookup<'t>(text: &'t [u8], name: &[u8]) -> Option<&'t [u8]> {
    // A name holding `\x01` can never be a key (the first `\x01` ends the key), and an
    // empty name is never kept.
    if name.is_empty() || find_byte(name, NAME_VALUE_SEPARATOR).is_some() {
        return None;
    }
    let mut found = None;
    let mut rest = text;
    while !rest.is_empty() {
        let (segment, tail) = next_segment(rest);
        rest = tail;
        if let Some(value) = value_in(segment, name) {
            found = Some(value);
        }
    }
    found
}

/// The value of the `name\x01value` segment when its key is `name` and its value is not
/// empty. The key is `name` exactly when the segment starts with `name` followed by `\x01`;
/// checking length and first byte first skips a memcmp call for most segments.
fn value_in<'t>(segment: &'t [u8], name: &[u8]) -> Option<&'t [u8]> {
    if segment.len() <= name.len() || segment.first() != name.first() {
        return None;
    }
    match segment.strip_prefix(name)?.split_first() {
        Some((&NAME_VALUE_SEPARATOR, value)) if !value.is_empty() => Some(value),
        _ => None,
    }
}

/// [`lookup`] of two names (each one a pair can have) in one pass over `text`.
fn lookup_two<'t>(
    text: &'t [u8],
    first: &[u8],
    second: &[u8],
) -> (Option<&'t [u8]>, Option<&'t [u8]>) {
    debug_assert!(
        [first, second].iter().all(|name| !name.is_empty()
            && find_byte(name, NAME_VALUE_SEPARATOR).is_none()
            && find_byte(name, PROPERTY_SEPARATOR).is_none()),
        "names a pair cannot have"
    );
    if first == second {
        return (lookup(text, first), lookup(text, second));
    }
    let (mut found_first, mut found_second) = (None, None);
    let mut rest = text;
    while !rest.is_empty() {
        let (segment, tail) = next_segment(rest);
        rest = tail;
        if let Some(value) = value_in(segment, first) {
            found_first = Some(value);
        } else if let Some(value) = value_in(segment, second) {
            found_second = Some(value);
        }
    }
    (found_first, found_second)
}

/// Iterator over the effective pairs of [`Properties`].
pub struct Iter<'a> {
    remaining: &'a [u8],
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.remaining.is_empty() {
            let (segment, rest) = next_segment(self.remaining);
            self.remaining = rest;
            let Some((name, value)) = split_pair(segment) else {
                continue;
            };
            if lookup(rest, name).is_some() {
                continue;
            }
            if let (Ok(name), Ok(value)) = (std::str::from_utf8(name), std::str::from_utf8(value)) {
                return Some((name, value));
            }
        }
        None
    }
}

impl<'a> IntoIterator for &'a Properties {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Properties {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut props = Properties::new();
        props.extend(iter);
        props
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Extend<(K, V)> for Properties {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (name, value) in iter {
            self.insert(name, value);
        }
    }
}

/// Equal when both hold the same name → value map (wire order and ignored junk don't matter).
impl PartialEq for Properties {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl Eq for Properties {}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn wire_text_borrows_canonical_text_and_normalises_the_rest() {
        let canonical = Properties::parse("A\u{1}1\u{2}B\u{1}2\u{2}");
        assert!(matches!(
            canonical.wire_text(),
            Cow::Borrowed("A\u{1}1\u{2}B\u{1}2\u{2}")
        ));
        let repeated = Properties::parse("A\u{1}1\u{2}B\u{1}2\u{2}A\u{1}3");
        assert_eq!(repeated.wire_text(), "B\u{1}2\u{2}A\u{1}3\u{2}");
        // A duplicate beyond the first sixteen names is still noticed.
        let mut many: String = (0..20).map(|i| format!("k{i}\u{1}v\u{2}")).collect();
        assert!(matches!(
            Properties::parse(&many).wire_text(),
            Cow::Borrowed(_)
        ));
        many.push_str("k18\u{1}w\u{2}");
        let props = Properties::parse(&many);
        assert_eq!(props.wire_text(), props.to_wire());
        assert_eq!(props.wire_text().matches("k18").count(), 1);
        assert_eq!(props.get("k18"), Some("w"));
    }

    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Java's `string2messageProperties`, transcribed literally on UTF-16-free ASCII input, as
    /// an oracle independent of the scanning implementation above.
    fn java_parse(text: &str) -> HashMap<String, String> {
        let mut map = HashMap::new();
        let chars: Vec<char> = text.chars().collect();
        let len = chars.len();
        let mut index = 0;
        while index < len {
            let new_index = (index..len).find(|&i| chars[i] == '\u{2}').unwrap_or(len);
            if new_index - index >= 3 {
                if let Some(kv) = (index..len).find(|&i| chars[i] == '\u{1}') {
                    if kv > index && kv < new_index - 1 {
                        let k: String = chars[index..kv].iter().collect();
                        let v: String = chars[kv + 1..new_index].iter().collect();
                        map.insert(k, v);
                    }
                }
            }
            index = new_index + 1;
        }
        map
    }

    fn as_map(props: &Properties) -> HashMap<String, String> {
        props
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn java_rules_skip_empty_names_values_and_short_segments() {
        let props =
            Properties::parse("\u{1}v\u{2}k\u{1}\u{2}ab\u{2}a\u{1}b\u{2}x\u{1}y\u{1}z\u{2}");
        assert_eq!(props.len(), 2);
        assert_eq!(props.get("a"), Some("b"));
        assert_eq!(props.get("x"), Some("y\u{1}z"));
        assert_eq!(props.get("k"), None);
        assert_eq!(props.get(""), None);
    }

    #[test]
    fn later_duplicates_win_everywhere() {
        let props = Properties::parse("K\u{1}1\u{2}J\u{1}2\u{2}K\u{1}3\u{2}");
        assert_eq!(props.get("K"), Some("3"));
        assert_eq!(
            props.iter().collect::<Vec<_>>(),
            vec![("J", "2"), ("K", "3")]
        );
        assert_eq!(props.to_wire(), "J\u{1}2\u{2}K\u{1}3\u{2}");
    }

    #[test]
    fn missing_trailing_separator_still_parses_and_insert_appends_safely() {
        let mut props = Properties::parse("A\u{1}1");
        assert_eq!(props.get("A"), Some("1"));
        assert!(props.insert("B", "2"));
        assert_eq!(props.get("A"), Some("1"));
        assert_eq!(props.get("B"), Some("2"));
        assert_eq!(props.to_wire(), "A\u{1}1\u{2}B\u{1}2\u{2}");
    }

    #[test]
    fn insert_rejects_what_the_wire_cannot_carry() {
        let mut props = Properties::new();
        assert!(!props.insert("", "v"));
        assert!(!props.insert("k", ""));
        assert!(!props.insert("k\u{2}", "v"));
        assert!(!props.insert("k", "v\u{1}"));
        assert!(props.is_empty());
    }

    #[test]
    fn insert_replaces_and_remove_deletes() {
        let mut props = Properties::from_wire(Bytes::from_static(b"A\x011\x02B\x012\x02")).unwrap();
        assert!(props.insert("A", "9"));
        assert_eq!(props.get("A"), Some("9"));
        assert_eq!(props.len(), 2);
        assert_eq!(props.remove("B").as_deref(), Some("2"));
        assert_eq!(props.remove("B"), None);
        assert_eq!(props.to_wire(), "A\u{1}9\u{2}");
        assert_eq!(props.wire_len(), props.to_wire().len());
    }

    #[test]
    fn equality_is_map_equality() {
        let a = Properties::parse("A\u{1}1\u{2}B\u{1}2\u{2}");
        let b = Properties::parse("B\u{1}2\u{2}junk\u{2}A\u{1}1\u{2}");
        assert_eq!(a, b);
        assert_ne!(a, Properties::parse("A\u{1}1\u{2}"));
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        assert!(Properties::from_wire(Bytes::from_static(b"A\x01\xff\x02")).is_err());
    }

    #[test]
    fn write_wire_matches_to_wire() {
        for text in [
            "",
            "A\u{1}1\u{2}",
            "A\u{1}1\u{2}A\u{1}2",
            "x\u{2}\u{1}\u{2}B\u{1}b",
        ] {
            let props = Properties::parse(text);
            let mut dst = BytesMut::new();
            props.write_wire(&mut dst);
            assert_eq!(&dst[..], props.to_wire().as_bytes(), "{text:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn parsing_matches_java_on_separator_heavy_text(
            text in "[ab\u{1}\u{2}]{0,24}"
        ) {
            let props = Properties::parse(&text);
            let expected = java_parse(&text);
            prop_assert_eq!(as_map(&props), expected.clone());
            for (k, v) in &expected {
                prop_assert_eq!(props.get(k), Some(v.as_str()));
            }
            // Re-parsing the canonical text yields the same map.
            prop_assert_eq!(as_map(&Properties::parse(&props.to_wire())), expected);
        }

        #[test]
        fn one_scan_for_two_names_finds_what_two_lookups_find(
            text in "[ab\u{1}\u{2}]{0,24}",
            first in prop::sample::select(vec!["a", "ab", "b", "ba"]),
            second in prop::sample::select(vec!["a", "ab", "b", "ba"]),
        ) {
            let props = Properties::parse(&text);
            prop_assert_eq!(props.get_two(first, second), (props.get(first), props.get(second)));
        }

        #[test]
        fn text_known_canonical_is_canonical_and_edits_keep_the_pairs(
            text in "[ab\u{1}\u{2}]{0,24}",
            edits in proptest::collection::vec(
                (any::<bool>(), prop::sample::select(vec!["a", "ab", "b"]), "[xy]{0,2}"),
                0..6,
            ),
        ) {
            let mut props = Properties::parse(&text);
            let mut expected = java_parse(&text);
            for (insert, name, value) in edits {
                if insert {
                    if props.insert(name, &value) {
                        expected.insert(name.to_owned(), value);
                    }
                } else {
                    props.remove(name);
                    expected.remove(name);
                }
                prop_assert!(!props.known_canonical || props.scan_is_canonical());
                prop_assert_eq!(as_map(&props), expected.clone());
                prop_assert_eq!(as_map(&Properties::parse(&props.to_wire())), expected.clone());
            }
        }

        #[test]
        fn find_byte_agrees_with_a_plain_scan(
            hay in proptest::collection::vec(0u8..4, 0..40),
            needle in 0u8..4,
        ) {
            prop_assert_eq!(find_byte(&hay, needle), hay.iter().position(|&b| b == needle));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(mut props) = Properties::from_wire(Bytes::from(bytes)) {
                let _ = props.get("a");
                let _ = props.len();
                let _ = props.to_wire();
                props.insert("a", "b");
                prop_assert_eq!(props.get("a"), Some("b"));
            }
        }
    }
}
