//! A small lenient JSON reader/writer for the hot paths serde does not fit: the remoting
//! command header (hand-written for speed and fastjson fidelity) and the fastjson-isms of
//! bodies (unquoted numeric map keys, objects used as map keys).

use std::borrow::Cow;

use bytes::BufMut;

/// Nesting limit for every recursive walk, so hostile input cannot overflow the stack.
pub(crate) const MAX_DEPTH: usize = 128;

/// Writes `s` as a JSON string literal (with quotes), escaping like fastjson: `"` and `\`,
/// the short forms `\b \f \n \r \t`, other control characters as `\u00XX`; everything else
/// (including non-ASCII) raw.
#[inline]
pub(crate) fn write_json_string<B: BufMut>(out: &mut B, s: &str) {
    let bytes = s.as_bytes();
    out.put_u8(b'"');
    if needs_escape(bytes) {
        write_escaped(out, bytes);
    } else {
        // Header keys and values almost never need escaping: one copy, no byte-wise pass.
        out.put_slice(bytes);
    }
    out.put_u8(b'"');
}

/// Whether any byte of `bytes` is one JSON escapes, looked at a word at a time.
#[inline]
fn needs_escape(bytes: &[u8]) -> bool {
    if bytes.len() < 8 {
        // Header keys and most values are short: one word test instead of a byte-wise pass.
        return word_needs_escape(short_word(bytes));
    }
    let mut words = bytes.chunks_exact(8);
    for chunk in words.by_ref() {
        if word_needs_escape(word_at(chunk)) {
            return true;
        }
    }
    if words.remainder().is_empty() {
        return false;
    }
    // The last 8 bytes as one word: the bytes it shares with words already looked at are
    // clean, so this only tells about the tail.
    word_needs_escape(word_at(bytes.get(bytes.len() - 8..).unwrap_or_default()))
}

/// The bytes of `bytes` (fewer than eight) in one word, each of them in some lane and every
/// other lane a space (which needs no escape): overlapping reads, no byte-wise loop.
#[inline]
fn short_word(bytes: &[u8]) -> u64 {
    const SPACES: u64 = ONES * b' ' as u64;
    let len = bytes.len();
    let at = |i: usize| u64::from(bytes.get(i).copied().unwrap_or(b' '));
    match len {
        0 => SPACES,
        1..=3 => at(0) | at(len / 2) << 8 | at(len - 1) << 16 | (SPACES << 24),
        _ => {
            let four = |from: usize| {
                bytes
                    .get(from..from + 4)
                    .and_then(|b| <[u8; 4]>::try_from(b).ok())
                    .map_or(0x2020_2020, u32::from_le_bytes)
            };
            u64::from(four(0)) | u64::from(four(len - 4)) << 32
        }
    }
}

/// Eight bytes as a little-endian word (the first eight of `chunk`; zeros if it is shorter).
#[inline]
fn word_at(chunk: &[u8]) -> u64 {
    chunk
        .get(..8)
        .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
        .map_or(0, u64::from_le_bytes)
}

/// The escaping pass of [`write_json_string`], for text that needs it (quotes excluded).
#[cold]
fn write_escaped<B: BufMut>(out: &mut B, bytes: &[u8]) {
    let mut run_start = 0;
    let mut at = 0;
    while at < bytes.len() {
        // The next byte to escape, found a word at a time: the lowest flagged byte of a word
        // is exact, so a properties string (two separators per property, plain text between)
        // costs a word test per eight bytes and one step per separator.
        let hit = match bytes.get(at..at + 8) {
            Some(chunk) => {
                let flagged = escape_flags(word_at(chunk));
                if flagged == 0 {
                    at += 8;
                    continue;
                }
                at + (flagged.trailing_zeros() / 8) as usize
            }
            None => match bytes
                .get(at..)
                .unwrap_or_default()
                .iter()
                .position(|&b| byte_needs_escape(b))
            {
                Some(offset) => at + offset,
                None => break,
            },
        };
        let Some(&b) = bytes.get(hit) else {
            break;
        };
        out.put_slice(bytes.get(run_start..hit).unwrap_or_default());
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            _ => 0,
        };
        if short == 0 {
            // Property separators (\x01, \x02) land here several times per send header.
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.put_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        } else {
            out.put_slice(&[b'\\', short]);
        }
        run_start = hit + 1;
        at = hit + 1;
    }
    out.put_slice(bytes.get(run_start..).unwrap_or_default());
}

/// A word of 0x01 bytes: `ONES * b` repeats byte `b` in every lane.
const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
/// The high bit of every byte.
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// The bytes of `word` below `n` (n ≤ 0x80), as the high bit of each such byte.
///
/// The classic "has a byte below n" test: subtracting n from every byte borrows into the high
/// bit exactly where a byte is below n, masked by bytes that had the high bit clear. A borrow
/// can also flag bytes above a real hit, never below one: the lowest flagged byte is exact.
#[inline]
const fn bytes_below(word: u64, n: u8) -> u64 {
    word.wrapping_sub(ONES * n as u64) & !word & HIGHS
}

/// The bytes of `word` that are `"` or `\\` (a zero byte after XOR with a repeated character
/// marks that character), exact for the lowest one — all a scan for the end of a string needs.
#[inline]
const fn quote_or_backslash(word: u64) -> u64 {
    bytes_below(word ^ (ONES * b'"' as u64), 1) | bytes_below(word ^ (ONES * b'\\' as u64), 1)
}

/// The bytes of `word` JSON escapes (control characters, `"` and `\\`) as the high bit of
/// each; the lowest flag is exact (each part's lowest is), higher ones may be extra.
const fn escape_flags(word: u64) -> u64 {
    bytes_below(word, 0x20) | quote_or_backslash(word)
}

/// Whether JSON escapes `b`.
#[inline]
fn byte_needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Whether any byte of `word` is one JSON escapes.
const fn word_needs_escape(word: u64) -> bool {
    escape_flags(word) != 0
}

/// Writes a decimal integer without going through `fmt` (the header writer's hot path).
#[inline]
pub(crate) fn write_i64<B: BufMut>(out: &mut B, value: i64) {
    let mut buf = [0u8; DECIMAL_WIDTH];
    out.put_slice(decimal(value, &mut buf));
}

/// Room for the longest `i64` in decimal, sign included.
pub(crate) const DECIMAL_WIDTH: usize = 20;

/// `value` in decimal, written at the end of `buf`: two digits per division, since a send
/// header carries a 13-digit timestamp and several small numbers.
#[inline]
pub(crate) fn decimal(value: i64, buf: &mut [u8; DECIMAL_WIDTH]) -> &[u8] {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut pos = buf.len();
    let mut magnitude = value.unsigned_abs();
    while magnitude >= 100 {
        // `magnitude % 100` is below 100, so the index is within the table.
        let pair = (magnitude % 100) as usize * 2;
        magnitude /= 100;
        pos -= 2;
        buf[pos..pos + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if magnitude >= 10 {
        let pair = magnitude as usize * 2;
        pos -= 2;
        buf[pos..pos + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        pos -= 1;
        // Below 10 here, so the cast cannot truncate.
        buf[pos] = b'0' + magnitude as u8;
    }
    if value < 0 {
        pos -= 1;
        buf[pos] = b'-';
    }
    &buf[pos..]
}

/// How many bytes `bytes` starts with that are neither `"` nor `\\`: the plain run of a
/// string literal's text.
#[inline(always)]
pub(crate) fn plain_prefix_len(bytes: &[u8]) -> usize {
    // Header keys and values are short: a look at the first words one at a time finds their
    // end sooner than memchr's set-up; long strings go on to memchr.
    const WORDS_BEFORE_MEMCHR: usize = 4;
    let mut at = 0;
    while at < WORDS_BEFORE_MEMCHR * 8 {
        let Some(word) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) else {
            break;
        };
        let hits = quote_or_backslash(u64::from_le_bytes(*word));
        if hits != 0 {
            // Little-endian: the lowest set bit is in the first such byte.
            return at + (hits.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    let unscanned = bytes.get(at..).unwrap_or_default();
    at + memchr::memchr2(b'"', b'\\', unscanned).unwrap_or(unscanned.len())
}

/// The string literal whose opening quote is at byte `at` of `text`, decoded, and the byte
/// after its closing quote; `None` when there is no well-formed literal there.
pub(crate) fn string_at(text: &str, at: usize) -> Option<(Cow<'_, str>, usize)> {
    if text.as_bytes().get(at) != Some(&b'"') {
        return None;
    }
    let mut cursor = JsonCursor { text, pos: at };
    let value = cursor.string().ok()?;
    Some((value, cursor.pos))
}

/// A forward-only cursor over JSON text that tolerates fastjson's non-standard keys.
pub(crate) struct JsonCursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> JsonCursor<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        JsonCursor { text, pos: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn byte_at(&self, pos: usize) -> Option<u8> {
        self.bytes().get(pos).copied()
    }

    fn slice(&self, start: usize, end: usize) -> Result<&'a str, String> {
        self.text
            .get(start..end)
            .ok_or_else(|| format!("bad text boundary at byte {start}"))
    }

    /// Skips whitespace and returns the next byte without consuming it.
    pub(crate) fn peek(&mut self) -> Option<u8> {
        while let Some(b) = self.byte_at(self.pos) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.pos += 1;
            } else {
                return Some(b);
            }
        }
        None
    }

    /// Consumes `expected` (after whitespace) or fails.
    pub(crate) fn expect(&mut self, expected: u8) -> Result<(), String> {
        match self.peek() {
            Some(b) if b == expected => {
                self.pos += 1;
                Ok(())
            }
            Some(b) => Err(format!(
                "expected `{}` at byte {}, found `{}`",
                char::from(expected),
                self.pos,
                char::from(b)
            )),
            None => Err(format!(
                "expected `{}`, found end of input",
                char::from(expected)
            )),
        }
    }

    /// True when only whitespace remains.
    pub(crate) fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    /// Raw text of the string literal at the cursor, quotes included, without decoding.
    fn string_span(&mut self) -> Result<&'a str, String> {
        let start = self.pos;
        let mut i = start + 1;
        loop {
            // Runs of plain characters are skipped by a scan the compiler can vectorise.
            i += self.plain_run(i);
            match self.byte_at(i) {
                None => return Err("unterminated string".to_owned()),
                Some(b'"') => break,
                Some(_) => i += 2,
            }
        }
        self.pos = i + 1;
        self.slice(start, i + 1)
    }

    /// How many bytes from `at` on are neither `"` nor `\\` (up to the end of the text).
    #[inline]
    fn plain_run(&self, at: usize) -> usize {
        plain_prefix_len(self.bytes().get(at..).unwrap_or_default())
    }

    /// Decodes the string literal at the cursor (which must be at `"`).
    pub(crate) fn string(&mut self) -> Result<Cow<'a, str>, String> {
        self.expect(b'"')?;
        let start = self.pos;
        let end = start + self.plain_run(start);
        if self.byte_at(end) == Some(b'"') {
            self.pos = end + 1;
            return self.slice(start, end).map(Cow::Borrowed);
        }
        self.escaped_string(start, end)
    }

    /// The rest of [`Self::string`] for a literal with escapes (or no end): `start` is where
    /// its text begins, `i` the first `\\` (or the end of the input). Kept apart so the
    /// common case stays small.
    #[cold]
    #[inline(never)]
    fn escaped_string(&mut self, start: usize, mut i: usize) -> Result<Cow<'a, str>, String> {
        if self.byte_at(i).is_none() {
            return Err("unterminated string".to_owned());
        }
        let mut out = String::with_capacity(i - start + 16);
        out.push_str(self.slice(start, i)?);
        loop {
            match self.byte_at(i) {
                None => return Err("unterminated string".to_owned()),
                Some(b'"') => {
                    self.pos = i + 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    let escape = self.byte_at(i + 1).ok_or("unterminated escape")?;
                    i += 2;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let high = self.hex4(i)?;
                            i += 4;
                            let ch = if (0xD800..0xDC00).contains(&high)
                                && self.byte_at(i) == Some(b'\\')
                                && self.byte_at(i + 1) == Some(b'u')
                            {
                                let low = self.hex4(i + 2)?;
                                if (0xDC00..0xE000).contains(&low) {
                                    i += 6;
                                    let combined =
                                        0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                                    char::from_u32(combined).unwrap_or('\u{FFFD}')
                                } else {
                                    '\u{FFFD}'
                                }
                            } else {
                                char::from_u32(high).unwrap_or('\u{FFFD}')
                            };
                            out.push(ch);
                        }
                        other => {
                            return Err(format!("invalid escape `\\{}`", char::from(other)));
                        }
                    }
                }
                Some(_) => {
                    let run_start = i;
                    i += self.plain_run(i);
                    out.push_str(self.slice(run_start, i)?);
                }
            }
        }
    }

    fn hex4(&self, at: usize) -> Result<u32, String> {
        let digits = self.text.get(at..at + 4).ok_or("truncated \\u escape")?;
        u32::from_str_radix(digits, 16).map_err(|_| format!("invalid \\u escape `{digits}`"))
    }

    /// A bare token: number, `true`, `false`, `null`, or an unquoted identifier key.
    pub(crate) fn bare_token(&mut self) -> Result<&'a str, String> {
        self.peek();
        let start = self.pos;
        let mut i = start;
        while let Some(b) = self.byte_at(i) {
            if matches!(
                b,
                b',' | b':' | b'}' | b']' | b'{' | b'[' | b'"' | b' ' | b'\t' | b'\n' | b'\r'
            ) {
                break;
            }
            i += 1;
        }
        if i == start {
            return Err(format!("expected a value at byte {start}"));
        }
        self.pos = i;
        self.slice(start, i)
    }

    /// Skips one value of any kind.
    pub(crate) fn skip_value(&mut self, depth: usize) -> Result<(), String> {
        self.value_span(depth).map(|_| ())
    }

    /// The raw text of the next value of any kind.
    pub(crate) fn value_span(&mut self, depth: usize) -> Result<&'a str, String> {
        if depth > MAX_DEPTH {
            return Err("JSON nested too deeply".to_owned());
        }
        let start = match self.peek() {
            Some(_) => self.pos,
            None => return Err("expected a value, found end of input".to_owned()),
        };
        match self.byte_at(start) {
            Some(b'"') => {
                self.string_span()?;
            }
            Some(b'{') => {
                self.pos += 1;
                if self.peek() == Some(b'}') {
                    self.pos += 1;
                } else {
                    loop {
                        self.skip_key(depth + 1)?;
                        self.expect(b':')?;
                        self.skip_value(depth + 1)?;
                        match self.peek() {
                            Some(b',') => self.pos += 1,
                            Some(b'}') => {
                                self.pos += 1;
                                break;
                            }
                            _ => return Err("expected `,` or `}` in object".to_owned()),
                        }
                    }
                }
            }
            Some(b'[') => {
                self.pos += 1;
                if self.peek() == Some(b']') {
                    self.pos += 1;
                } else {
                    loop {
                        self.skip_value(depth + 1)?;
                        match self.peek() {
                            Some(b',') => self.pos += 1,
                            Some(b']') => {
                                self.pos += 1;
                                break;
                            }
                            _ => return Err("expected `,` or `]` in array".to_owned()),
                        }
                    }
                }
            }
            _ => {
                self.bare_token()?;
            }
        }
        self.slice(start, self.pos)
    }

    fn skip_key(&mut self, depth: usize) -> Result<(), String> {
        match self.peek() {
            Some(b'"') => self.string_span().map(|_| ()),
            Some(b'{') | Some(b'[') => self.skip_value(depth),
            _ => self.bare_token().map(|_| ()),
        }
    }

    /// An object key: a string, or (fastjson) a bare number/identifier or a raw object text.
    pub(crate) fn key(&mut self, depth: usize) -> Result<Cow<'a, str>, String> {
        match self.peek() {
            Some(b'"') => self.string(),
            Some(b'{') | Some(b'[') => self.value_span(depth).map(Cow::Borrowed),
            _ => self.bare_token().map(Cow::Borrowed),
        }
    }

    /// Iterates the members of the object at the cursor; `member` must consume the value.
    pub(crate) fn object<F>(&mut self, depth: usize, mut member: F) -> Result<(), String>
    where
        F: FnMut(&mut Self, Cow<'a, str>) -> Result<(), String>,
    {
        if depth > MAX_DEPTH {
            return Err("JSON nested too deeply".to_owned());
        }
        self.expect(b'{')?;
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            let key = self.key(depth + 1)?;
            self.expect(b':')?;
            member(self, key)?;
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    // fastjson tolerates a trailing comma; so do we.
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        return Ok(());
                    }
                }
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(format!("expected `,` or `}}` at byte {}", self.pos)),
            }
        }
    }

    /// A scalar read as text: strings decoded, numbers/booleans as written, `null` as `None`,
    /// nested objects/arrays as their raw text.
    pub(crate) fn scalar_as_string(
        &mut self,
        depth: usize,
    ) -> Result<Option<Cow<'a, str>>, String> {
        match self.peek() {
            Some(b'"') => self.string().map(Some),
            Some(b'{') | Some(b'[') => self.value_span(depth).map(|s| Some(Cow::Borrowed(s))),
            _ => {
                let token = self.bare_token()?;
                if token == "null" {
                    Ok(None)
                } else {
                    Ok(Some(Cow::Borrowed(token)))
                }
            }
        }
    }

    /// An integer given as a JSON number or a numeric string; `null` as `None`.
    pub(crate) fn integer(&mut self, depth: usize) -> Result<Option<i64>, String> {
        if let Some(value) = self.plain_integer() {
            return Ok(Some(value));
        }
        match self.scalar_as_string(depth)? {
            None => Ok(None),
            Some(text) => parse_lenient_i64(&text)
                .map(Some)
                .ok_or_else(|| format!("`{text}` is not an integer")),
        }
    }

    /// A bare decimal integer (`-?[0-9]+`, ending where a JSON value ends) read in place, the
    /// form of every number in a command header; `None` leaves the cursor for the general path
    /// (strings, floats, exponents, out-of-range values).
    fn plain_integer(&mut self) -> Option<i64> {
        self.peek()?;
        let bytes = self.bytes();
        let (value, end) = plain_integer_at(bytes, self.pos)?;
        match bytes.get(end) {
            None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') => {}
            Some(_) => return None,
        }
        self.pos = end;
        Some(value)
    }
}

/// The bare decimal integer (`-?[0-9]+`) starting at `at` in `bytes`, and where it ends;
/// `None` when there is none there or it does not fit an `i64`. What follows it is the
/// caller's to check.
pub(crate) fn plain_integer_at(bytes: &[u8], at: usize) -> Option<(i64, usize)> {
    let negative = bytes.get(at) == Some(&b'-');
    let digits_start = at + usize::from(negative);
    let mut end = digits_start;
    // Accumulated negated: i64::MIN has no positive counterpart.
    let mut negated: i64 = 0;
    while let Some(&b) = bytes.get(end) {
        if !b.is_ascii_digit() {
            break;
        }
        negated = negated.checked_mul(10)?.checked_sub(i64::from(b - b'0'))?;
        end += 1;
    }
    if end == digits_start {
        return None;
    }
    let value = if negative {
        negated
    } else {
        negated.checked_neg()?
    };
    Some((value, end))
}

/// Parses an integer written as `123`, `"123"` content, `1.0` or `1e3` (integral values only).
pub(crate) fn parse_lenient_i64(text: &str) -> Option<i64> {
    let text = text.trim();
    if let Ok(v) = text.parse::<i64>() {
        return Some(v);
    }
    let float = text.parse::<f64>().ok()?;
    // Only integral, in-range floats are accepted; the casts below are then exact.
    if float.fract() == 0.0 && float >= i64::MIN as f64 && float < i64::MAX as f64 {
        Some(float as i64)
    } else {
        None
    }
}

/// Rewrites fastjson's non-standard object keys into JSON strings: bare keys (`{0:"a"}`)
/// become `{"0":"a"}`, object keys (`{{"topic":"T"}:1}`) become the object's text as a string
/// (`{"{\"topic\":\"T\"}":1}`). Returns `None` when the input needs no rewriting.
pub(crate) fn normalize_keys(input: &str) -> Result<Option<String>, String> {
    let mut normalizer = Normalizer {
        cursor: JsonCursor::new(input),
        out: Vec::with_capacity(input.len() + 16),
        changed: false,
    };
    normalizer.value(0)?;
    if !normalizer.cursor.at_end() {
        return Err("trailing characters after JSON value".to_owned());
    }
    if !normalizer.changed {
        return Ok(None);
    }
    String::from_utf8(normalizer.out)
        .map(Some)
        .map_err(|e| e.to_string())
}

struct Normalizer<'a> {
    cursor: JsonCursor<'a>,
    out: Vec<u8>,
    changed: bool,
}

impl Normalizer<'_> {
    fn value(&mut self, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("JSON nested too deeply".to_owned());
        }
        match self.cursor.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => {
                let span = self.cursor.string_span()?;
                self.out.extend_from_slice(span.as_bytes());
                Ok(())
            }
            Some(_) => {
                let token = self.cursor.bare_token()?;
                self.out.extend_from_slice(token.as_bytes());
                Ok(())
            }
            None => Err("expected a value, found end of input".to_owned()),
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), String> {
        self.cursor.expect(b'{')?;
        self.out.push(b'{');
        if self.cursor.peek() == Some(b'}') {
            self.cursor.pos += 1;
            self.out.push(b'}');
            return Ok(());
        }
        loop {
            match self.cursor.peek() {
                Some(b'"') => {
                    let span = self.cursor.string_span()?;
                    self.out.extend_from_slice(span.as_bytes());
                }
                Some(b'{') | Some(b'[') => {
                    let mark = self.out.len();
                    self.value(depth + 1)?;
                    let raw = self.out.split_off(mark);
                    let raw = String::from_utf8(raw).map_err(|e| e.to_string())?;
                    write_json_string(&mut self.out, &raw);
                    self.changed = true;
                }
                _ => {
                    let token = self.cursor.bare_token()?;
                    write_json_string(&mut self.out, token);
                    self.changed = true;
                }
            }
            self.cursor.expect(b':')?;
            self.out.push(b':');
            self.value(depth + 1)?;
            match self.cursor.peek() {
                Some(b',') => {
                    self.cursor.pos += 1;
                    self.out.push(b',');
                }
                Some(b'}') => {
                    self.cursor.pos += 1;
                    self.out.push(b'}');
                    return Ok(());
                }
                _ => return Err("expected `,` or `}` in object".to_owned()),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), String> {
        self.cursor.expect(b'[')?;
        self.out.push(b'[');
        if self.cursor.peek() == Some(b']') {
            self.cursor.pos += 1;
            self.out.push(b']');
            return Ok(());
        }
        loop {
            self.value(depth + 1)?;
            match self.cursor.peek() {
                Some(b',') => {
                    self.cursor.pos += 1;
                    self.out.push(b',');
                }
                Some(b']') => {
                    self.cursor.pos += 1;
                    self.out.push(b']');
                    return Ok(());
                }
                _ => return Err("expected `,` or `]` in array".to_owned()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn escaped(s: &str) -> String {
        let mut out = Vec::new();
        write_json_string(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escaping_is_standard_json_that_serde_reads_back() {
        let tricky = "a\"b\\c\nd\te\u{1}f/g\u{7f}中";
        let text = escaped(tricky);
        assert_eq!(text, "\"a\\\"b\\\\c\\nd\\te\\u0001f/g\u{7f}中\"");
        let back: String = serde_json::from_str(&text).unwrap();
        assert_eq!(back, tricky);
    }

    #[test]
    fn integers_are_written_like_display() {
        for v in [0i64, 7, -7, 479, i64::MAX, i64::MIN, 1_000_000] {
            let mut out = Vec::new();
            write_i64(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
        }
    }

    #[test]
    fn cursor_decodes_escapes_and_surrogate_pairs() {
        let mut cursor = JsonCursor::new(r#""x\u00e9\ud83d\ude00\n\/""#);
        assert_eq!(cursor.string().unwrap(), "xé😀\n/");
        assert!(cursor.at_end());
    }

    #[test]
    fn normalize_quotes_bare_numeric_keys() {
        let out = normalize_keys(r#"{"brokerAddrs":{0:"a:1", 1:"b:2"}}"#)
            .unwrap()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["brokerAddrs"]["0"], "a:1");
        assert_eq!(v["brokerAddrs"]["1"], "b:2");
    }

    #[test]
    fn normalize_turns_object_keys_into_strings() {
        let out = normalize_keys(r#"{"t":{{"brokerName":"b","queueId":0,"topic":"T"}:100}}"#)
            .unwrap()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let table = v["t"].as_object().unwrap();
        let (key, value) = table.iter().next().unwrap();
        let key: serde_json::Value = serde_json::from_str(key).unwrap();
        assert_eq!(key["topic"], "T");
        assert_eq!(value, 100);
    }

    #[test]
    fn normalize_leaves_standard_json_alone() {
        assert_eq!(normalize_keys(r#"{"a":[1,{"b":"}"}]}"#).unwrap(), None);
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = "[".repeat(100_000);
        assert!(normalize_keys(&deep).is_err());
        let mut cursor = JsonCursor::new(&deep);
        assert!(cursor.skip_value(0).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,64}") {
            let _ = normalize_keys(&text);
            let mut cursor = JsonCursor::new(&text);
            let _ = cursor.skip_value(0);
            let mut cursor = JsonCursor::new(&text);
            let _ = cursor.object(0, |c, _| c.skip_value(1));
        }

        #[test]
        fn decimal_matches_display(value in any::<i64>(), small in -1000i64..1000) {
            for value in [value, small, i64::MIN, i64::MAX, 0] {
                let mut buf = [0u8; DECIMAL_WIDTH];
                let expected = value.to_string();
                prop_assert_eq!(decimal(value, &mut buf), expected.as_bytes());
            }
        }

        #[test]
        fn escaping_matches_serde_json(s in "[ -~\\x00-\\x1f\\x7f-\\u{ff}中]{0,40}") {
            prop_assert_eq!(escaped(&s), serde_json::to_string(&s).unwrap());
        }

        #[test]
        fn escaped_strings_decode_to_the_original(s in "\\PC{0,32}|[\\x00-\\x1f\"\\\\]{0,8}") {
            let text = escaped(&s);
            let mut cursor = JsonCursor::new(&text);
            prop_assert_eq!(cursor.string().unwrap(), s);
        }

        #[test]
        fn strings_end_at_their_closing_quote_whatever_follows(
            s in "[a-z\"\\\\\u{1}中]{0,80}",
            rest in "(,\"k\\\\\"\":\"v\"\\}|\\}|)",
        ) {
            let text = format!("{}{rest}", escaped(&s));
            let mut cursor = JsonCursor::new(&text);
            prop_assert_eq!(cursor.string().unwrap(), s.as_str());
            prop_assert_eq!(&text[cursor.pos..], rest.as_str());
            let mut cursor = JsonCursor::new(&text);
            prop_assert_eq!(cursor.value_span(0).unwrap(), escaped(&s));
        }

        #[test]
        fn integers_read_as_the_lenient_parser_reads_them(
            number in "-?[0-9]{1,21}(\\.0|e2|x)?",
            end in "[,} \\]]?",
        ) {
            let text = format!("{number}{end}");
            let mut cursor = JsonCursor::new(&text);
            match cursor.integer(0) {
                Ok(value) => {
                    prop_assert_eq!(value, parse_lenient_i64(&number));
                    prop_assert_eq!(&text[cursor.pos..], end.as_str());
                }
                Err(_) => prop_assert_eq!(parse_lenient_i64(&number), None),
            }
        }

        #[test]
        fn written_integers_read_back(value in any::<i64>()) {
            let mut text = Vec::new();
            write_i64(&mut text, value);
            text.push(b'}');
            let text = String::from_utf8(text).unwrap();
            prop_assert_eq!(JsonCursor::new(&text).integer(0), Ok(Some(value)));
        }
    }
}
