//! [`ExtFields`]: a command's custom header, string → string, sorted by key.

use std::cmp::Ordering;
use std::fmt;

/// The "custom header" of a command: every typed header field flattened to string → string.
///
/// Sorted by key (byte order, Java's `TreeMap` order for ASCII keys), so JSON headers come
/// out with the same key order every time. Keys and values live in one text buffer with a
/// sorted index beside it: decoding a header of n fields costs two allocations, not 2n plus
/// tree nodes, which matters on the per-send and per-pull paths.
///
/// ```
/// use rocketmq_actor::protocol::ExtFields;
/// let mut ext = ExtFields::new();
/// ext.insert_str("topic", "TopicTest");
/// ext.insert("queueId".to_owned(), "3".to_owned());
/// assert_eq!(ext.get("topic"), Some("TopicTest"));
/// assert_eq!(ext.insert_str("queueId", "4").as_deref(), Some("3"));
/// assert_eq!(ext.iter().collect::<Vec<_>>(), vec![("queueId", "4"), ("topic", "TopicTest")]);
/// ```
#[derive(Clone, Default)]
pub struct ExtFields {
    /// Keys and values, back to back; a replaced or removed entry leaves its bytes behind
    /// (a command's header is short-lived).
    text: String,
    /// One entry per key, sorted by key.
    index: Vec<Span>,
}

/// What a first insert makes room for: a send header's keys and values (about 15 fields).
const TYPICAL_TEXT_BYTES: usize = 256;
const TYPICAL_FIELDS: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Span {
    key_start: u32,
    key_end: u32,
    value_end: u32,
}

impl ExtFields {
    /// No fields.
    pub const fn new() -> Self {
        ExtFields {
            text: String::new(),
            index: Vec::new(),
        }
    }

    /// No fields, with room for `text_bytes` of keys and values in `fields` entries.
    pub fn with_capacity(text_bytes: usize, fields: usize) -> Self {
        ExtFields {
            text: String::with_capacity(text_bytes),
            index: Vec::with_capacity(fields),
        }
    }

    fn key_of(&self, span: &Span) -> &str {
        self.text
            .get(span.key_start as usize..span.key_end as usize)
            .unwrap_or_default()
    }

    fn value_of(&self, span: &Span) -> &str {
        self.text
            .get(span.key_end as usize..span.value_end as usize)
            .unwrap_or_default()
    }

    /// A key's bytes: comparing bytes orders like comparing the strings, without the char
    /// boundary checks of slicing a `str` (this runs several times per header field).
    fn key_bytes(&self, span: &Span) -> &[u8] {
        self.text
            .as_bytes()
            .get(span.key_start as usize..span.key_end as usize)
            .unwrap_or_default()
    }

    /// How the key of `span` orders against `key`: by first byte, then (rarely needed) in
    /// full, which orders as comparing the whole keys does without a `memcmp` call for most
    /// pairs (a V2 send header's keys are all one letter long).
    fn compare_key(&self, span: &Span, key: &[u8]) -> Ordering {
        self.first_key_byte(span)
            .cmp(&key.first())
            .then_with(|| self.key_bytes(span).cmp(key))
    }

    /// The first byte of the key of `span` (`None` for the empty key), without slicing.
    fn first_key_byte(&self, span: &Span) -> Option<&u8> {
        if span.key_end > span.key_start {
            self.text.as_bytes().get(span.key_start as usize)
        } else {
            None
        }
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        let key = key.as_bytes();
        // Decoded headers arrive sorted, so a new key usually goes last.
        match self.index.last() {
            None => return Err(0),
            Some(last) => match self.compare_key(last, key) {
                Ordering::Less => return Err(self.index.len()),
                Ordering::Equal => return Ok(self.index.len() - 1),
                Ordering::Greater => {}
            },
        }
        self.index
            .binary_search_by(|span| self.compare_key(span, key))
    }

    /// Appends `key` then `value` to the text; the span covering both.
    #[inline]
    fn append(&mut self, key: &str, value: &str) -> Span {
        if self.text.capacity() == 0 {
            // Room for a typical header at once, rather than growing through small sizes.
            self.text
                .reserve(TYPICAL_TEXT_BYTES.max(key.len() + value.len()));
            self.index.reserve(TYPICAL_FIELDS);
        }
        let key_start = self.text.len();
        self.text.push_str(key);
        let key_end = self.text.len();
        self.text.push_str(value);
        let value_end = self.text.len();
        // Headers are far below 4 GiB (frames are limited to 16 MiB); saturate rather than wrap.
        let narrow = |at: usize| u32::try_from(at).unwrap_or(u32::MAX);
        Span {
            key_start: narrow(key_start),
            key_end: narrow(key_end),
            value_end: narrow(value_end),
        }
    }

    /// Sets `key` to `value`; returns the value it replaces (`BTreeMap::insert`'s shape;
    /// [`ExtFields::insert_str`] takes borrowed text).
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        self.insert_str(&key, &value)
    }

    /// Sets `key` to `value` (both copied into the fields' buffer); returns the value it
    /// replaces.
    pub fn insert_str(&mut self, key: &str, value: &str) -> Option<String> {
        match self.find(key) {
            Ok(at) => {
                let old = self
                    .index
                    .get(at)
                    .map(|span| self.value_of(span).to_owned());
                let span = self.append(key, value);
                if let Some(slot) = self.index.get_mut(at) {
                    *slot = span;
                }
                old
            }
            Err(at) => {
                let span = self.append(key, value);
                self.index.insert(at, span);
                None
            }
        }
    }

    /// Sets `key` to `value` as [`ExtFields::insert_str`] does, in one comparison and no
    /// index move when `key` sorts after every key present: a decoded header's keys arrive
    /// in order, so each of its fields is added this way.
    #[inline]
    pub(crate) fn insert_decoded(&mut self, key: &str, value: &str) {
        let follows_last = self
            .index
            .last()
            .is_none_or(|last| self.compare_key(last, key.as_bytes()) == Ordering::Less);
        if follows_last {
            let span = self.append(key, value);
            self.index.push(span);
        } else {
            self.insert_str(key, value);
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let at = self.position(key)?;
        self.index.get(at).map(|span| self.value_of(span))
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// Where `key` is in the index. A header's handful of fields is looked at in turn, by
    /// length and first byte, which rules most out without comparing text (a typed header
    /// reads each of its fields this way, and a V2 send header's keys are all one letter
    /// long); bigger tables are searched.
    fn position(&self, key: &str) -> Option<usize> {
        const LINEAR_UP_TO: usize = 16;
        if self.index.len() > LINEAR_UP_TO {
            return self.find(key).ok();
        }
        let key = key.as_bytes();
        let first = key.first();
        self.index.iter().position(|span| {
            span.key_end.saturating_sub(span.key_start) as usize == key.len()
                && self.first_key_byte(span) == first
                && self.key_bytes(span) == key
        })
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let at = self.find(key).ok()?;
        let span = self.index.remove(at);
        let value = self.value_of(&span).to_owned();
        if self.index.is_empty() {
            self.text.clear();
        }
        Some(value)
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The fields in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            ext: self,
            spans: self.index.iter(),
        }
    }

    /// The keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator + '_ {
        self.index.iter().map(|span| self.key_of(span))
    }

    /// The values in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator + '_ {
        self.index.iter().map(|span| self.value_of(span))
    }
}

impl PartialEq for ExtFields {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for ExtFields {}

impl fmt::Debug for ExtFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut ext = ExtFields::new();
        ext.extend(pairs);
        ext
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Extend<(K, V)> for ExtFields {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, pairs: I) {
        for (key, value) in pairs {
            self.insert_str(key.as_ref(), value.as_ref());
        }
    }
}

impl<'a> IntoIterator for &'a ExtFields {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The fields of an [`ExtFields`] in key order, as `(key, value)`.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    ext: &'a ExtFields,
    spans: std::slice::Iter<'a, Span>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let span = self.spans.next()?;
        Some((self.ext.key_of(span), self.ext.value_of(span)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.spans.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let span = self.spans.next_back()?;
        Some((self.ext.key_of(span), self.ext.value_of(span)))
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn replaced_and_removed_keys_read_back_as_a_map_would() {
        let mut ext = ExtFields::new();
        assert_eq!(ext.insert_str("b", "1"), None);
        assert_eq!(ext.insert("a".into(), "2".into()), None);
        assert_eq!(ext.insert_str("b", "3").as_deref(), Some("1"));
        assert_eq!(ext.get("b"), Some("3"));
        assert_eq!(ext.remove("a").as_deref(), Some("2"));
        assert_eq!(ext.remove("a"), None);
        assert!(!ext.contains_key("a"));
        assert_eq!(ext.len(), 1);
        assert_eq!(format!("{ext:?}"), r#"{"b": "3"}"#);
        assert_eq!(ext.remove("b").as_deref(), Some("3"));
        assert!(ext.is_empty());
        assert_eq!(ext, ExtFields::new());
    }

    #[test]
    fn empty_keys_and_values_are_kept() {
        let ext: ExtFields = [("", ""), ("k", "")].into_iter().collect();
        assert_eq!(ext.get(""), Some(""));
        assert_eq!(ext.get("k"), Some(""));
        assert_eq!(ext.len(), 2);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(String, String),
        /// The decoder's insert, which skips the search when the key sorts last.
        InsertDecoded(String, String),
        Remove(String),
    }

    proptest! {
        #[test]
        fn behaves_like_a_btreemap(
            ops in proptest::collection::vec(
                prop_oneof![
                    ("[a-d]{0,3}", "[x-zé]{0,3}").prop_map(|(k, v)| Op::Insert(k, v)),
                    ("[a-d]{0,3}", "[x-zé]{0,3}").prop_map(|(k, v)| Op::InsertDecoded(k, v)),
                    "[a-d]{0,3}".prop_map(Op::Remove),
                ],
                0..40,
            )
        ) {
            let mut ext = ExtFields::new();
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        prop_assert_eq!(ext.insert_str(&k, &v), model.insert(k, v));
                    }
                    Op::InsertDecoded(k, v) => {
                        ext.insert_decoded(&k, &v);
                        model.insert(k, v);
                    }
                    Op::Remove(k) => prop_assert_eq!(ext.remove(&k), model.remove(&k)),
                }
                prop_assert_eq!(ext.len(), model.len());
                let pairs: Vec<(&str, &str)> = ext.iter().collect();
                let expected: Vec<(&str, &str)> =
                    model.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                prop_assert_eq!(pairs, expected);
                for (k, v) in &model {
                    prop_assert_eq!(ext.get(k), Some(v.as_str()));
                }
                for probe in ["", "a", "ab", "abc", "b", "dd", "e"] {
                    prop_assert_eq!(ext.get(probe), model.get(probe).map(String::as_str));
                    prop_assert_eq!(ext.contains_key(probe), model.contains_key(probe));
                }
            }
        }
    }
}
