//! `RemotingCommand`: the unit of the RocketMQ remoting protocol, with its two header encodings
//! (JSON and the ROCKETMQ binary layout) and the frame layout of protocol.md §1.

use std::borrow::Cow;
use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use super::header::CommandHeader;
use super::json::{
    decimal, plain_integer_at, plain_prefix_len, string_at, write_i64, write_json_string,
    JsonCursor, DECIMAL_WIDTH,
};
use crate::error::ProtocolError;

pub use super::ext_fields::ExtFields;

static EMPTY_EXT_FIELDS: ExtFields = ExtFields::new();

/// The sender's implementation language, as carried in every command header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LanguageCode {
    /// `JAVA` (0): understood by every broker version; our default.
    #[default]
    Java,
    /// `CPP` (1).
    Cpp,
    /// `DOTNET` (2).
    Dotnet,
    /// `PYTHON` (3).
    Python,
    /// `DELPHI` (4).
    Delphi,
    /// `ERLANG` (5).
    Erlang,
    /// `RUBY` (6).
    Ruby,
    /// `OTHER` (7); also what unknown names and code bytes decode to.
    Other,
    /// `HTTP` (8).
    Http,
    /// `GO` (9).
    Go,
    /// `PHP` (10).
    Php,
    /// `OMS` (11).
    Oms,
    /// `RUST` (12): needs a 4.9.4+ Java peer.
    Rust,
    /// `NODE_JS` (13).
    NodeJs,
}

impl LanguageCode {
    const ALL: [LanguageCode; 14] = [
        LanguageCode::Java,
        LanguageCode::Cpp,
        LanguageCode::Dotnet,
        LanguageCode::Python,
        LanguageCode::Delphi,
        LanguageCode::Erlang,
        LanguageCode::Ruby,
        LanguageCode::Other,
        LanguageCode::Http,
        LanguageCode::Go,
        LanguageCode::Php,
        LanguageCode::Oms,
        LanguageCode::Rust,
        LanguageCode::NodeJs,
    ];

    /// The byte used by the binary header.
    pub fn code(self) -> u8 {
        match self {
            LanguageCode::Java => 0,
            LanguageCode::Cpp => 1,
            LanguageCode::Dotnet => 2,
            LanguageCode::Python => 3,
            LanguageCode::Delphi => 4,
            LanguageCode::Erlang => 5,
            LanguageCode::Ruby => 6,
            LanguageCode::Other => 7,
            LanguageCode::Http => 8,
            LanguageCode::Go => 9,
            LanguageCode::Php => 10,
            LanguageCode::Oms => 11,
            LanguageCode::Rust => 12,
            LanguageCode::NodeJs => 13,
        }
    }

    /// The language of a binary-header code byte; unknown bytes map to [`LanguageCode::Other`].
    pub fn from_code(code: u8) -> Self {
        Self::ALL
            .get(usize::from(code))
            .copied()
            .unwrap_or(LanguageCode::Other)
    }

    /// The Java enum name used by the JSON header (`"JAVA"`, `"NODE_JS"`, …).
    pub fn name(self) -> &'static str {
        match self {
            LanguageCode::Java => "JAVA",
            LanguageCode::Cpp => "CPP",
            LanguageCode::Dotnet => "DOTNET",
            LanguageCode::Python => "PYTHON",
            LanguageCode::Delphi => "DELPHI",
            LanguageCode::Erlang => "ERLANG",
            LanguageCode::Ruby => "RUBY",
            LanguageCode::Other => "OTHER",
            LanguageCode::Http => "HTTP",
            LanguageCode::Go => "GO",
            LanguageCode::Php => "PHP",
            LanguageCode::Oms => "OMS",
            LanguageCode::Rust => "RUST",
            LanguageCode::NodeJs => "NODE_JS",
        }
    }

    /// The language of a JSON-header name; unknown names map to [`LanguageCode::Other`] so a
    /// newer peer never breaks decoding.
    pub fn from_name(name: &str) -> Self {
        Self::ALL
            .iter()
            .copied()
            .find(|lang| lang.name() == name)
            .unwrap_or(LanguageCode::Other)
    }
}

impl fmt::Display for LanguageCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a command's header is encoded on the wire (the `serType` byte of the frame).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SerializeType {
    /// JSON header (`serType` 0): the safe default every peer accepts.
    #[default]
    Json,
    /// ROCKETMQ binary header (`serType` 1); codes and versions must fit an `i16`, and empty
    /// strings (remark, ext keys/values) are not sent because the peer reads them as absent.
    RocketMq,
}

impl SerializeType {
    /// The `serType` byte.
    pub fn code(self) -> u8 {
        match self {
            SerializeType::Json => 0,
            SerializeType::RocketMq => 1,
        }
    }

    /// The type of a `serType` byte, `None` for unknown bytes.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(SerializeType::Json),
            1 => Some(SerializeType::RocketMq),
            _ => None,
        }
    }

    /// The Java enum name (`"JSON"` / `"ROCKETMQ"`).
    pub fn name(self) -> &'static str {
        match self {
            SerializeType::Json => "JSON",
            SerializeType::RocketMq => "ROCKETMQ",
        }
    }
}

/// One request or response of the remoting protocol.
///
/// ```
/// use rocketmq_actor::protocol::command::RemotingCommand;
/// use rocketmq_actor::protocol::codes::request_code;
///
/// let request = RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC)
///     .with_opaque(1)
///     .with_ext("topic", "TopicTest");
/// let mut frame = bytes::BytesMut::new();
/// request.encode(&mut frame).unwrap();
/// // The 4-byte length prefix is followed by what `decode` reads back.
/// let decoded = RemotingCommand::decode(frame.freeze().slice(4..)).unwrap();
/// assert_eq!(decoded, request);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemotingCommand {
    /// Request code (requests) or response code (responses).
    pub code: i32,
    /// The sender's language.
    pub language: LanguageCode,
    /// The sender's `MQVersion` ordinal (479 = 5.3.3).
    pub version: i32,
    /// Request id, echoed unchanged in the response.
    pub opaque: i32,
    /// Bit 0: response; bit 1: oneway.
    pub flag: i32,
    /// Free text; the error message of failed responses.
    pub remark: Option<String>,
    /// The custom header as strings; `None` is omitted from JSON, `Some(empty)` is `{}`.
    pub ext_fields: Option<ExtFields>,
    /// The payload; an empty body on the wire decodes as `None`.
    pub body: Option<Bytes>,
    /// Header encoding used by [`RemotingCommand::encode`]; set from the frame on decode.
    pub serialize_type: SerializeType,
}

impl RemotingCommand {
    /// Flag bit marking a response.
    pub const FLAG_RESPONSE: i32 = 1;
    /// Flag bit marking a oneway request (the receiver must not answer).
    pub const FLAG_ONEWAY: i32 = 2;
    /// The version we announce: `MQVersion.V5_3_3` (≥ 401 gets standard route JSON).
    pub const CURRENT_VERSION: i32 = 479;

    /// A request with language JAVA, version 479, opaque 0, JSON header, no ext fields.
    pub fn request(code: i32) -> Self {
        RemotingCommand {
            code,
            language: LanguageCode::Java,
            version: Self::CURRENT_VERSION,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields: None,
            body: None,
            serialize_type: SerializeType::Json,
        }
    }

    /// A request carrying a typed header (ext fields are `{}` even if the header is empty,
    /// as Java sends them).
    pub fn request_with_header<H: CommandHeader>(code: i32, header: &H) -> Self {
        Self::request(code).with_header(header)
    }

    /// A response (RESPONSE flag set, opaque 0); see [`RemotingCommand::response_to`].
    pub fn response(code: i32, remark: Option<String>) -> Self {
        RemotingCommand {
            flag: Self::FLAG_RESPONSE,
            remark,
            ..Self::request(code)
        }
    }

    /// The response to `request`: same opaque, RESPONSE flag set.
    pub fn response_to(request: &RemotingCommand, code: i32, remark: Option<String>) -> Self {
        RemotingCommand {
            opaque: request.opaque,
            ..Self::response(code, remark)
        }
    }

    /// Sets the body.
    pub fn with_body(mut self, body: Bytes) -> Self {
        self.body = Some(body);
        self
    }

    /// Adds one ext field.
    pub fn with_ext(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.ext_fields
            .get_or_insert_with(ExtFields::new)
            .insert(key.into(), value.into());
        self
    }

    /// Merges a typed header into the ext fields.
    pub fn with_header<H: CommandHeader>(mut self, header: &H) -> Self {
        header.write_ext(self.ext_fields.get_or_insert_with(ExtFields::new));
        self
    }

    /// Sets the opaque (request id).
    pub fn with_opaque(mut self, opaque: i32) -> Self {
        self.opaque = opaque;
        self
    }

    /// Sets the remark.
    pub fn with_remark(mut self, remark: impl Into<String>) -> Self {
        self.remark = Some(remark.into());
        self
    }

    /// Sets the language announced in the header.
    pub fn with_language(mut self, language: LanguageCode) -> Self {
        self.language = language;
        self
    }

    /// Selects the header encoding used by [`RemotingCommand::encode`].
    pub fn with_serialize_type(mut self, serialize_type: SerializeType) -> Self {
        self.serialize_type = serialize_type;
        self
    }

    /// True when the RESPONSE flag bit is set.
    pub fn is_response(&self) -> bool {
        self.flag & Self::FLAG_RESPONSE != 0
    }

    /// True when the ONEWAY flag bit is set.
    pub fn is_oneway(&self) -> bool {
        self.flag & Self::FLAG_ONEWAY != 0
    }

    /// Sets the ONEWAY flag bit.
    pub fn mark_oneway(&mut self) {
        self.flag |= Self::FLAG_ONEWAY;
    }

    /// One ext field.
    pub fn ext(&self, key: &str) -> Option<&str> {
        self.ext_fields.as_ref()?.get(key)
    }

    /// The ext fields, empty when there are none.
    pub fn ext_fields_or_empty(&self) -> &ExtFields {
        self.ext_fields.as_ref().unwrap_or(&EMPTY_EXT_FIELDS)
    }

    /// The remark, `""` when absent.
    pub fn remark_or_empty(&self) -> &str {
        self.remark.as_deref().unwrap_or("")
    }

    /// Reads a typed header from the ext fields.
    pub fn decode_header<H: CommandHeader>(&self) -> Result<H, ProtocolError> {
        H::read_ext(self.ext_fields_or_empty())
    }

    /// Appends the whole frame (4-byte length prefix included) to `dst`.
    ///
    /// On error `dst` is left as it was.
    pub fn encode(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        let start = dst.len();
        let result = self.encode_unchecked(dst, start);
        if result.is_err() {
            dst.truncate(start);
        }
        result
    }

    fn encode_unchecked(&self, dst: &mut BytesMut, start: usize) -> Result<(), ProtocolError> {
        let body = self.body.as_deref().unwrap_or_default();
        dst.reserve(8 + 256 + body.len());
        dst.put_u64(0); // length and serType/headerLen, patched below
        let header_start = dst.len();
        match self.serialize_type {
            SerializeType::Json => self.write_json_header(dst),
            SerializeType::RocketMq => self.write_binary_header(dst)?,
        }
        let header_len = dst.len() - header_start;
        if header_len > 0x00FF_FFFF {
            return Err(ProtocolError::InvalidHeader(format!(
                "header of {header_len} bytes exceeds the 24-bit length field"
            )));
        }
        dst.put_slice(body);
        let length = dst.len() - start - 4;
        let length = i32::try_from(length).map_err(|_| ProtocolError::FrameTooLarge {
            len: length + 4,
            limit: i32::MAX as usize,
        })?;
        // header_len < 2^24, so the cast is exact.
        let ser_and_len = (u32::from(self.serialize_type.code()) << 24) | header_len as u32;
        if let Some(prefix) = dst.get_mut(start..start + 8) {
            prefix[..4].copy_from_slice(&length.to_be_bytes());
            prefix[4..].copy_from_slice(&ser_and_len.to_be_bytes());
        }
        Ok(())
    }

    /// fastjson's output: alphabetical keys, nulls omitted, ext values as strings.
    fn write_json_header(&self, dst: &mut BytesMut) {
        dst.put_slice(b"{\"code\":");
        write_i64(dst, i64::from(self.code));
        if let Some(ext) = &self.ext_fields {
            dst.put_slice(b",\"extFields\":{");
            for (i, (key, value)) in ext.iter().enumerate() {
                if i > 0 {
                    dst.put_u8(b',');
                }
                write_json_string(dst, key);
                dst.put_u8(b':');
                write_json_string(dst, value);
            }
            dst.put_u8(b'}');
        }
        dst.put_slice(b",\"flag\":");
        write_i64(dst, i64::from(self.flag));
        dst.put_slice(b",\"language\":\"");
        dst.put_slice(self.language.name().as_bytes());
        dst.put_slice(b"\",\"opaque\":");
        write_i64(dst, i64::from(self.opaque));
        if let Some(remark) = &self.remark {
            dst.put_slice(b",\"remark\":");
            write_json_string(dst, remark);
        }
        dst.put_slice(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
        write_i64(dst, i64::from(self.version));
        dst.put_u8(b'}');
    }

    /// The ROCKETMQ layout of protocol.md §1.4.
    fn write_binary_header(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        let code = i16::try_from(self.code).map_err(|_| ProtocolError::InvalidField {
            field: "code",
            value: format!("{} does not fit the binary header's i16", self.code),
        })?;
        let version = i16::try_from(self.version).map_err(|_| ProtocolError::InvalidField {
            field: "version",
            value: format!("{} does not fit the binary header's i16", self.version),
        })?;
        dst.put_i16(code);
        dst.put_u8(self.language.code());
        dst.put_i16(version);
        dst.put_i32(self.opaque);
        dst.put_i32(self.flag);
        match self.remark.as_deref() {
            Some(remark) if !remark.is_empty() => {
                dst.put_i32(len_i32(remark.len(), "remark")?);
                dst.put_slice(remark.as_bytes());
            }
            _ => dst.put_i32(0),
        }
        let ext_len_pos = dst.len();
        dst.put_i32(0);
        if let Some(ext) = &self.ext_fields {
            for (key, value) in ext {
                // A zero-length key or value decodes as absent on the other side; skip it
                // rather than send something the peer reads differently.
                if key.is_empty() || value.is_empty() {
                    continue;
                }
                let key_len =
                    i16::try_from(key.len()).map_err(|_| ProtocolError::InvalidField {
                        field: "extFields",
                        value: format!("key of {} bytes exceeds i16", key.len()),
                    })?;
                dst.put_i16(key_len);
                dst.put_slice(key.as_bytes());
                dst.put_i32(len_i32(value.len(), "extFields")?);
                dst.put_slice(value.as_bytes());
            }
        }
        let ext_len = len_i32(dst.len() - ext_len_pos - 4, "extFields")?;
        if let Some(slot) = dst.get_mut(ext_len_pos..ext_len_pos + 4) {
            slot.copy_from_slice(&ext_len.to_be_bytes());
        }
        Ok(())
    }

    /// Decodes a frame given WITHOUT its 4-byte length prefix. The body shares `frame`'s
    /// memory (no copy).
    pub fn decode(frame: Bytes) -> Result<Self, ProtocolError> {
        let prefix: [u8; 4] = frame
            .get(..4)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| {
                ProtocolError::InvalidFrame(format!(
                    "frame of {} bytes is shorter than the 4-byte header length field",
                    frame.len()
                ))
            })?;
        let ser_and_len = u32::from_be_bytes(prefix);
        let ser_type = (ser_and_len >> 24) as u8;
        let header_len = (ser_and_len & 0x00FF_FFFF) as usize;
        let header_end = 4 + header_len;
        let header = frame.get(4..header_end).ok_or_else(|| {
            ProtocolError::InvalidFrame(format!(
                "header length {header_len} exceeds the frame's {} remaining bytes",
                frame.len() - 4
            ))
        })?;
        let mut command = match SerializeType::from_code(ser_type) {
            Some(SerializeType::Json) => decode_json_header(header)?,
            Some(SerializeType::RocketMq) => decode_binary_header(header)?,
            None => {
                return Err(ProtocolError::InvalidHeader(format!(
                    "unknown serialize type {ser_type}"
                )))
            }
        };
        if frame.len() > header_end {
            command.body = Some(frame.slice(header_end..));
        }
        Ok(command)
    }
}

/// Characters reserved for the opaque in a [`RequestFrame`]: `-2147483648` is the longest `i32`.
const OPAQUE_SLOT_WIDTH: usize = 11;

/// A request already encoded as a whole frame (JSON header, length prefix included) whose
/// opaque is filled in later, by the connection that sends it.
///
/// Building the frame straight from borrowed fields skips the `ExtFields` map and its owned
/// strings, which dominate the cost of a send. The opaque sits in a fixed-width slot padded
/// with JSON whitespace, so patching it never moves the rest of the frame.
///
/// ```
/// use rocketmq_actor::protocol::command::{RemotingCommand, RequestFrame};
/// let mut frame = RequestFrame::json(105, b"", |ext| ext.str("topic", "TopicTest")).unwrap();
/// frame.set_opaque(7);
/// assert_eq!(frame.code(), 105);
/// let decoded = RemotingCommand::decode(frame.into_bytes().slice(4..)).unwrap();
/// assert_eq!((decoded.code, decoded.opaque), (105, 7));
/// assert_eq!(decoded.ext("topic"), Some("TopicTest"));
/// ```
#[derive(Debug)]
pub struct RequestFrame {
    frame: Vec<u8>,
    code: i32,
    opaque_at: usize,
}

/// Writes the ext fields of a [`RequestFrame`] as JSON members; keys must come in ascending
/// order to match what [`RemotingCommand::encode`] (and fastjson) emit.
pub struct ExtWriter<'a> {
    dst: &'a mut Vec<u8>,
    first: bool,
}

impl ExtWriter<'_> {
    fn key(&mut self, key: &str) {
        if !self.first {
            self.dst.put_u8(b',');
        }
        self.first = false;
        write_json_string(self.dst, key);
        self.dst.put_u8(b':');
    }

    /// A string field.
    pub fn str(&mut self, key: &str, value: &str) {
        self.key(key);
        write_json_string(self.dst, value);
    }

    /// An integer field, written as a JSON string like every ext value.
    pub fn int(&mut self, key: &str, value: i64) {
        self.key(key);
        self.dst.put_u8(b'"');
        write_i64(self.dst, value);
        self.dst.put_u8(b'"');
    }

    /// A boolean field (`"true"`/`"false"`).
    pub fn bool(&mut self, key: &str, value: bool) {
        self.key(key);
        self.bool_value(value);
    }

    /// The start of a field whose key is given as its JSON text, `"key":` (a key needing no
    /// escapes): one copy of a constant instead of a key written and checked per request.
    #[inline]
    fn member(&mut self, member: &'static [u8]) {
        debug_assert!(
            member.len() >= 3
                && member.starts_with(b"\"")
                && member.ends_with(b"\":")
                && !member[1..member.len() - 2]
                    .iter()
                    .any(|&b| b < 0x20 || b == b'"' || b == b'\\'),
            "not a plain JSON member key: {member:?}"
        );
        if !self.first {
            self.dst.push(b',');
        }
        self.first = false;
        self.dst.extend_from_slice(member);
    }

    /// [`ExtWriter::str`] with the key as its JSON text (see `member`).
    #[inline]
    pub(crate) fn str_member(&mut self, member: &'static [u8], value: &str) {
        self.member(member);
        write_json_string(self.dst, value);
    }

    /// [`ExtWriter::int`] with the key as its JSON text (see `member`).
    #[inline]
    pub(crate) fn int_member(&mut self, member: &'static [u8], value: i64) {
        self.member(member);
        let mut digits = [0u8; DECIMAL_WIDTH];
        let digits = decimal(value, &mut digits);
        self.dst.push(b'"');
        self.dst.extend_from_slice(digits);
        self.dst.push(b'"');
    }

    /// [`ExtWriter::bool`] with the key as its JSON text (see `member`).
    #[inline]
    pub(crate) fn bool_member(&mut self, member: &'static [u8], value: bool) {
        self.member(member);
        self.bool_value(value);
    }

    fn bool_value(&mut self, value: bool) {
        let text: &[u8] = if value { b"\"true\"" } else { b"\"false\"" };
        self.dst.extend_from_slice(text);
    }
}

impl RequestFrame {
    /// Encodes a JSON-header request with `code`, language JAVA, the current version, no
    /// remark, the ext fields `write_ext` writes, and `body`; the opaque is 0 until
    /// [`set_opaque`](Self::set_opaque).
    pub fn json(
        code: i32,
        body: &[u8],
        write_ext: impl FnOnce(&mut ExtWriter<'_>),
    ) -> Result<Self, ProtocolError> {
        // A plain `Vec` is the cheapest sink for the many short writes of a header.
        let mut dst = Vec::with_capacity(8 + 512 + body.len());
        dst.put_u64(0); // length and serType/headerLen, patched below
        dst.put_slice(b"{\"code\":");
        write_i64(&mut dst, i64::from(code));
        dst.put_slice(b",\"extFields\":{");
        write_ext(&mut ExtWriter {
            dst: &mut dst,
            first: true,
        });
        dst.put_slice(b"},\"flag\":0,\"language\":\"");
        dst.put_slice(LanguageCode::Java.name().as_bytes());
        dst.put_slice(b"\",\"opaque\":");
        let opaque_at = dst.len();
        dst.put_slice(b"0          ");
        dst.put_slice(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
        write_i64(&mut dst, i64::from(RemotingCommand::CURRENT_VERSION));
        dst.put_u8(b'}');
        let header_len = dst.len() - 8;
        if header_len > 0x00FF_FFFF {
            return Err(ProtocolError::InvalidHeader(format!(
                "header of {header_len} bytes exceeds the 24-bit length field"
            )));
        }
        dst.put_slice(body);
        let length = dst.len() - 4;
        let length = i32::try_from(length).map_err(|_| ProtocolError::FrameTooLarge {
            len: length + 4,
            limit: i32::MAX as usize,
        })?;
        // header_len < 2^24 and serType JSON is 0, so the word is just the length.
        let ser_and_len = header_len as u32;
        if let Some(prefix) = dst.get_mut(..8) {
            prefix[..4].copy_from_slice(&length.to_be_bytes());
            prefix[4..].copy_from_slice(&ser_and_len.to_be_bytes());
        }
        Ok(RequestFrame {
            frame: dst,
            code,
            opaque_at,
        })
    }

    /// The request code.
    pub fn code(&self) -> i32 {
        self.code
    }

    /// Writes `opaque` into its slot (left-aligned, padded with spaces).
    pub fn set_opaque(&mut self, opaque: i32) {
        let mut slot = [b' '; OPAQUE_SLOT_WIDTH];
        let mut digits = [0u8; DECIMAL_WIDTH];
        let text = decimal(i64::from(opaque), &mut digits);
        if let Some(prefix) = slot.get_mut(..text.len()) {
            prefix.copy_from_slice(text);
        }
        if let Some(target) = self
            .frame
            .get_mut(self.opaque_at..self.opaque_at + OPAQUE_SLOT_WIDTH)
        {
            target.copy_from_slice(&slot);
        }
    }

    /// The finished frame, ready for the socket.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from(self.frame)
    }
}

fn len_i32(len: usize, field: &'static str) -> Result<i32, ProtocolError> {
    i32::try_from(len).map_err(|_| ProtocolError::InvalidField {
        field,
        value: format!("{len} bytes exceed i32"),
    })
}

fn invalid_header(message: impl Into<String>) -> ProtocolError {
    ProtocolError::InvalidHeader(message.into())
}

fn header_int(
    cursor: &mut JsonCursor<'_>,
    field: &'static str,
) -> Result<Option<i32>, ProtocolError> {
    let Some(value) = cursor.integer(1).map_err(invalid_header)? else {
        return Ok(None);
    };
    i32::try_from(value)
        .map(Some)
        .map_err(|_| ProtocolError::InvalidField {
            field,
            value: value.to_string(),
        })
}

/// Decodes a JSON header: the plain form brokers write in one pass, anything else with the
/// lenient parser.
fn decode_json_header(header: &[u8]) -> Result<RemotingCommand, ProtocolError> {
    let text = std::str::from_utf8(header).map_err(|e| invalid_header(e.to_string()))?;
    if let Some(command) = decode_plain_json_header(text) {
        return Ok(command);
    }
    decode_any_json_header(text)
}

/// The header as brokers and clients write it — quoted keys, plain integers, no whitespace
/// but spaces after a value, only the keys a command has, escapes only in ext values — read
/// in one pass over the bytes. `None` for anything else (including every malformed header),
/// which [`decode_any_json_header`] then reads or rejects with its error: this path only ever
/// agrees with it, faster (a send's answer is decoded per message by the client, its request
/// by the broker).
fn decode_plain_json_header(text: &str) -> Option<RemotingCommand> {
    let mut reader = PlainJson { text, pos: 0 };
    let mut command = RemotingCommand::request(0);
    command.version = 0;
    let mut saw_code = false;
    reader.byte(b'{')?;
    loop {
        let key = reader.string()?;
        reader.byte(b':')?;
        match key {
            "code" => {
                command.code = reader.int()?;
                saw_code = true;
            }
            "opaque" => command.opaque = reader.int()?,
            "flag" => command.flag = reader.int()?,
            "version" => command.version = reader.int()?,
            "language" => {
                let name = reader.string()?;
                // A numeric language code is the general path's business.
                if name
                    .bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_digit() || b == b'+')
                {
                    return None;
                }
                command.language = LanguageCode::from_name(name);
            }
            "remark" => {
                command.remark = if reader.null() {
                    None
                } else {
                    Some(reader.string()?.to_owned())
                };
            }
            "serializeTypeCurrentRPC" => {
                reader.string()?;
            }
            "extFields" => {
                if !reader.null() {
                    command.ext_fields = Some(reader.ext_fields()?);
                }
            }
            _ => reader.skip_scalar()?,
        }
        // Our own requests pad the opaque with spaces, to be patched in place once it is known.
        match reader.next_after_spaces()? {
            b',' => {}
            b'}' => break,
            _ => return None,
        }
    }
    (saw_code && reader.pos == text.len()).then_some(command)
}

/// The reader of [`decode_plain_json_header`]: every method is `None` where the text leaves
/// the plain form.
struct PlainJson<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> PlainJson<'a> {
    fn next(&mut self) -> Option<u8> {
        let b = *self.text.as_bytes().get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn next_after_spaces(&mut self) -> Option<u8> {
        loop {
            match self.next()? {
                b' ' => {}
                b => return Some(b),
            }
        }
    }

    fn byte(&mut self, expected: u8) -> Option<()> {
        (self.next()? == expected).then_some(())
    }

    /// A string literal without escapes.
    #[inline(always)]
    fn string(&mut self) -> Option<&'a str> {
        self.byte(b'"')?;
        let start = self.pos;
        let rest = self.text.as_bytes().get(start..)?;
        let len = plain_prefix_len(rest);
        let end = start + len;
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        self.pos = end + 1;
        self.text.get(start..end)
    }

    /// A string literal that may hold escapes: a send's properties carry their `\x01`/`\x02`
    /// separators as `\u0001`/`\u0002`, so every producer request has them. Escapes are
    /// decoded by the lenient parser's own string reader, so both paths read them alike.
    fn value_string(&mut self) -> Option<Cow<'a, str>> {
        let start = self.pos;
        if let Some(plain) = self.string() {
            return Some(Cow::Borrowed(plain));
        }
        let (value, end) = string_at(self.text, start)?;
        self.pos = end;
        Some(value)
    }

    /// `null`, consumed; false (and nothing consumed) for anything else.
    fn null(&mut self) -> bool {
        let is_null = self.text.as_bytes().get(self.pos..self.pos + 4) == Some(b"null");
        if is_null {
            self.pos += 4;
        }
        is_null
    }

    /// The value of a key this reader does not know, if it is a string, an integer or `null`.
    fn skip_scalar(&mut self) -> Option<()> {
        match self.text.as_bytes().get(self.pos)? {
            b'"' => self.string().map(|_| ()),
            b'n' => self.null().then_some(()),
            _ => self.int().map(|_| ()),
        }
    }

    /// A plain integer within `i32`.
    fn int(&mut self) -> Option<i32> {
        let (value, end) = plain_integer_at(self.text.as_bytes(), self.pos)?;
        self.pos = end;
        i32::try_from(value).ok()
    }

    /// `{"key":"value",…}` with string values only.
    fn ext_fields(&mut self) -> Option<ExtFields> {
        self.byte(b'{')?;
        // Keys and values are shorter than the header text they come from.
        let mut ext = ExtFields::with_capacity(self.text.len(), 16);
        if self.text.as_bytes().get(self.pos) == Some(&b'}') {
            self.pos += 1;
            return Some(ext);
        }
        loop {
            let key = self.string()?;
            self.byte(b':')?;
            let value = self.value_string()?;
            ext.insert_decoded(key, &value);
            match self.next()? {
                b',' => {}
                b'}' => return Some(ext),
                _ => return None,
            }
        }
    }
}

/// Parses a JSON header as fastjson or the Rust broker writes it: any key order, `null` or
/// absent optional fields, unknown keys ignored, ext values of any scalar type as strings.
fn decode_any_json_header(text: &str) -> Result<RemotingCommand, ProtocolError> {
    let mut cursor = JsonCursor::new(text);
    let mut command = RemotingCommand::request(0);
    command.version = 0;
    let mut saw_code = false;
    // Typed errors cannot cross the cursor's String-error callback; park them here.
    let mut field_error: Option<ProtocolError> = None;
    let mut int_field = |cursor: &mut JsonCursor<'_>, field: &'static str| {
        header_int(cursor, field).map_err(|e| {
            let message = e.to_string();
            field_error = Some(e);
            message
        })
    };
    let parsed = cursor.object(0, |cursor, key| {
        match key.as_ref() {
            "code" => {
                if let Some(code) = int_field(cursor, "code")? {
                    command.code = code;
                    saw_code = true;
                }
            }
            "language" => {
                command.language = match cursor.scalar_as_string(1)? {
                    None => LanguageCode::Java,
                    Some(name) => match name.parse::<u8>() {
                        Ok(code) => LanguageCode::from_code(code),
                        Err(_) => LanguageCode::from_name(&name),
                    },
                }
            }
            "version" => command.version = int_field(cursor, "version")?.unwrap_or(0),
            "opaque" => command.opaque = int_field(cursor, "opaque")?.unwrap_or(0),
            "flag" => command.flag = int_field(cursor, "flag")?.unwrap_or(0),
            "remark" => command.remark = cursor.scalar_as_string(1)?.map(Cow::into_owned),
            "extFields" => {
                if cursor.peek() == Some(b'{') {
                    // Keys and values are shorter than the header text they come from.
                    let mut ext = ExtFields::with_capacity(text.len(), 16);
                    cursor.object(1, |cursor, key| {
                        if let Some(value) = cursor.scalar_as_string(2)? {
                            ext.insert_str(&key, &value);
                        }
                        Ok(())
                    })?;
                    command.ext_fields = Some(ext);
                } else if cursor.scalar_as_string(1)?.is_some() {
                    return Err("extFields is neither an object nor null".to_owned());
                }
            }
            _ => cursor.skip_value(1)?,
        }
        Ok(())
    });
    if let Err(message) = parsed {
        return Err(field_error.unwrap_or(ProtocolError::InvalidHeader(message)));
    }
    if !cursor.at_end() {
        return Err(invalid_header("trailing characters after the JSON header"));
    }
    if !saw_code {
        return Err(ProtocolError::MissingField("code"));
    }
    Ok(command)
}

/// A bounds-checked big-endian reader over a header slice.
struct HeaderReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> HeaderReader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ProtocolError> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.buf.len());
        match end.and_then(|end| self.buf.get(self.pos..end)) {
            Some(slice) => {
                self.pos += n;
                Ok(slice)
            }
            None => Err(invalid_header(format!(
                "binary header truncated reading {what} ({n} bytes at offset {})",
                self.pos
            ))),
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], ProtocolError> {
        let slice = self.take(N, what)?;
        slice
            .try_into()
            .map_err(|_| invalid_header(format!("binary header truncated reading {what}")))
    }

    fn u8(&mut self, what: &str) -> Result<u8, ProtocolError> {
        self.array::<1>(what).map(|[b]| b)
    }

    fn i16(&mut self, what: &str) -> Result<i16, ProtocolError> {
        self.array(what).map(i16::from_be_bytes)
    }

    fn i32(&mut self, what: &str) -> Result<i32, ProtocolError> {
        self.array(what).map(i32::from_be_bytes)
    }

    fn string(&mut self, len: usize, what: &str) -> Result<String, ProtocolError> {
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| invalid_header(format!("{what} is not valid UTF-8")))
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
}

fn non_negative(len: i64, what: &str) -> Result<usize, ProtocolError> {
    usize::try_from(len).map_err(|_| invalid_header(format!("negative {what} length {len}")))
}

/// Parses the ROCKETMQ binary header of protocol.md §1.4; zero-length strings are absent.
fn decode_binary_header(header: &[u8]) -> Result<RemotingCommand, ProtocolError> {
    let mut reader = HeaderReader {
        buf: header,
        pos: 0,
    };
    let code = i32::from(reader.i16("code")?);
    let language = LanguageCode::from_code(reader.u8("language")?);
    let version = i32::from(reader.i16("version")?);
    let opaque = reader.i32("opaque")?;
    let flag = reader.i32("flag")?;
    let remark_len = non_negative(i64::from(reader.i32("remark length")?), "remark")?;
    let remark = if remark_len > 0 {
        Some(reader.string(remark_len, "remark")?)
    } else {
        None
    };
    let ext_len = non_negative(i64::from(reader.i32("extFields length")?), "extFields")?;
    let ext_fields = if ext_len > 0 {
        let block = reader.take(ext_len, "extFields")?;
        let mut entries = HeaderReader { buf: block, pos: 0 };
        let mut ext = ExtFields::with_capacity(ext_len, 16);
        while entries.remaining() > 0 {
            let key_len = non_negative(i64::from(entries.i16("ext key length")?), "ext key")?;
            let key = entries.string(key_len, "ext key")?;
            let value_len = non_negative(i64::from(entries.i32("ext value length")?), "ext value")?;
            let value = entries.string(value_len, "ext value")?;
            if !key.is_empty() && !value.is_empty() {
                ext.insert(key, value);
            }
        }
        Some(ext)
    } else {
        None
    };
    if reader.remaining() > 0 {
        return Err(invalid_header(format!(
            "{} trailing bytes after the binary header",
            reader.remaining()
        )));
    }
    Ok(RemotingCommand {
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        ext_fields,
        body: None,
        serialize_type: SerializeType::RocketMq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codes::request_code;
    use proptest::prelude::*;

    /// protocol.md §1.1 worked example header text.
    const ROUTE_JSON: &str = r#"{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":479}"#;

    /// protocol.md §1.4 worked example frame, as hex.
    const ROUTE_BINARY_HEX: &str = "0000002d 01000029 0069 00 01df 00000001 00000000 00000000 00000014 0005 746f706963 00000009 546f70696354657374";

    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        digits
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect()
    }

    fn route_request() -> RemotingCommand {
        RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC)
            .with_opaque(1)
            .with_ext("topic", "TopicTest")
    }

    fn encoded(command: &RemotingCommand) -> Vec<u8> {
        let mut buf = BytesMut::new();
        command.encode(&mut buf).unwrap();
        buf.to_vec()
    }

    fn decode_frame(frame: &[u8]) -> Result<RemotingCommand, ProtocolError> {
        RemotingCommand::decode(Bytes::copy_from_slice(&frame[4..]))
    }

    #[test]
    fn json_worked_example_encodes_byte_for_byte() {
        let frame = encoded(&route_request());
        assert_eq!(ROUTE_JSON.len(), 131);
        let mut expected = vec![0, 0, 0, 0x87, 0, 0, 0, 0x83];
        expected.extend_from_slice(ROUTE_JSON.as_bytes());
        assert_eq!(frame, expected);
    }

    #[test]
    fn json_worked_example_decodes() {
        let mut frame = vec![0, 0, 0, 0x87, 0, 0, 0, 0x83];
        frame.extend_from_slice(ROUTE_JSON.as_bytes());
        let command = decode_frame(&frame).unwrap();
        assert_eq!(command, route_request());
        assert_eq!(command.ext("topic"), Some("TopicTest"));
        assert!(!command.is_response());
    }

    #[test]
    fn binary_worked_example_encodes_byte_for_byte() {
        let command = route_request().with_serialize_type(SerializeType::RocketMq);
        assert_eq!(encoded(&command), hex(ROUTE_BINARY_HEX));
    }

    #[test]
    fn binary_worked_example_decodes() {
        let command = decode_frame(&hex(ROUTE_BINARY_HEX)).unwrap();
        assert_eq!(
            command,
            route_request().with_serialize_type(SerializeType::RocketMq)
        );
    }

    #[test]
    fn rust_broker_style_json_header_decodes() {
        let header = r#"{"code":0,"language":"RUST","version":474,"opaque":42,"flag":1,"remark":null,"extFields":null,"serializeTypeCurrentRPC":"JSON"}"#;
        let command = decode_json_header(header.as_bytes()).unwrap();
        assert_eq!(command.code, 0);
        assert_eq!(command.language, LanguageCode::Rust);
        assert_eq!(command.version, 474);
        assert_eq!(command.opaque, 42);
        assert!(command.is_response());
        assert_eq!(command.remark, None);
        assert_eq!(command.ext_fields, None);
    }

    #[test]
    fn fastjson_style_json_header_with_quirks_decodes() {
        let header = r#" { "version" : "401", "unknownKey": {"nested":[1,2,{"x":null}]},
            "extFields": {"queueId": 3, "isForce": false, "topic": "T\u00e9", 7: "seven", "gone": null},
            "remark": "OFFSET_FOUND_NULL", "language": "KOTLIN", "opaque": -5, "code": 19, "flag": 3 } "#;
        let command = decode_json_header(header.as_bytes()).unwrap();
        assert_eq!(command.code, 19);
        assert_eq!(command.version, 401);
        assert_eq!(command.opaque, -5);
        assert!(command.is_response() && command.is_oneway());
        assert_eq!(command.language, LanguageCode::Other);
        assert_eq!(command.remark.as_deref(), Some("OFFSET_FOUND_NULL"));
        assert_eq!(command.ext("queueId"), Some("3"));
        assert_eq!(command.ext("isForce"), Some("false"));
        assert_eq!(command.ext("topic"), Some("Té"));
        assert_eq!(command.ext("7"), Some("seven"));
        assert_eq!(command.ext("gone"), None);
    }

    #[test]
    fn json_header_without_code_or_with_huge_numbers_is_rejected() {
        assert!(matches!(
            decode_json_header(br#"{"flag":0}"#),
            Err(ProtocolError::MissingField("code"))
        ));
        assert!(matches!(
            decode_json_header(br#"{"code":4294967296}"#),
            Err(ProtocolError::InvalidField { field: "code", .. })
        ));
        assert!(decode_json_header(br#"{"code":1"#).is_err());
        assert!(decode_json_header(b"\xff").is_err());
    }

    #[test]
    fn json_header_escapes_remark_and_ext_values() {
        let command =
            RemotingCommand::response(1, Some("bad \"topic\"\n\\".into())).with_ext("k", "v\u{1}");
        let frame = encoded(&command);
        let text = std::str::from_utf8(&frame[8..]).unwrap();
        assert!(text.contains(r#""remark":"bad \"topic\"\n\\""#), "{text}");
        // Anything we emit is standard JSON.
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(value["extFields"]["k"], "v\u{1}");
        assert_eq!(decode_frame(&frame).unwrap(), command);
    }

    #[test]
    fn body_is_a_view_of_the_frame_not_a_copy() {
        let command = route_request().with_body(Bytes::from_static(b"hello body"));
        let frame = Bytes::from(encoded(&command)).slice(4..);
        let decoded = RemotingCommand::decode(frame.clone()).unwrap();
        let body = decoded.body.unwrap();
        assert_eq!(&body[..], b"hello body");
        let frame_range = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        assert!(frame_range.contains(&(body.as_ptr() as usize)));
    }

    #[test]
    fn binary_rejects_codes_beyond_i16_and_leaves_buffer_untouched() {
        let command = RemotingCommand::request(request_code::POP_MESSAGE)
            .with_serialize_type(SerializeType::RocketMq);
        let mut buf = BytesMut::from(&b"keep"[..]);
        assert!(matches!(
            command.encode(&mut buf),
            Err(ProtocolError::InvalidField { field: "code", .. })
        ));
        assert_eq!(&buf[..], b"keep");
    }

    #[test]
    fn binary_zero_length_strings_decode_as_absent() {
        // code 0, JAVA, version 1, opaque 2, flag 1, remark len 0, ext: "a" -> "" (len 0).
        let mut header = vec![0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0];
        header.extend_from_slice(&[0, 0, 0, 7, 0, 1, b'a', 0, 0, 0, 0]);
        let command = decode_binary_header(&header).unwrap();
        assert_eq!(command.remark, None);
        assert_eq!(command.ext_fields, Some(ExtFields::new()));
        assert!(command.is_response());
    }

    #[test]
    fn binary_rejects_negative_lengths_and_trailing_bytes() {
        let mut negative = vec![0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1];
        negative.extend_from_slice(&(-1i32).to_be_bytes());
        assert!(decode_binary_header(&negative).is_err());
        let mut trailing = vec![0; 21];
        trailing.push(9);
        assert!(decode_binary_header(&trailing).is_err());
        assert!(decode_binary_header(&[0; 21]).is_ok());
    }

    #[test]
    fn unknown_serialize_type_and_short_frames_are_errors() {
        assert!(RemotingCommand::decode(Bytes::from_static(&[2, 0, 0, 0])).is_err());
        assert!(RemotingCommand::decode(Bytes::from_static(&[0, 0])).is_err());
        assert!(RemotingCommand::decode(Bytes::from_static(&[0, 0, 0, 9, b'{'])).is_err());
    }

    #[test]
    fn language_codes_round_trip_and_unknowns_map_to_other() {
        for code in 0..=13u8 {
            let lang = LanguageCode::from_code(code);
            assert_eq!(lang.code(), code);
            assert_eq!(LanguageCode::from_name(lang.name()), lang);
        }
        assert_eq!(LanguageCode::from_code(200), LanguageCode::Other);
        assert_eq!(LanguageCode::from_name("COBOL"), LanguageCode::Other);
    }

    #[test]
    fn response_to_echoes_opaque_and_sets_flag() {
        let request = route_request().with_opaque(77);
        let response = RemotingCommand::response_to(&request, 17, Some("no route".into()));
        assert_eq!(response.opaque, 77);
        assert!(response.is_response());
        assert!(!response.is_oneway());
        let mut oneway = route_request();
        oneway.mark_oneway();
        assert!(oneway.is_oneway() && !oneway.is_response());
    }

    #[test]
    fn broker_answers_take_the_plain_header_path() {
        let answer = RemotingCommand::response_to(&RemotingCommand::request(10), 0, None)
            .with_ext("msgId", "7F00000100002A9F0000000000000001")
            .with_ext("queueId", "3")
            .with_ext("queueOffset", "42")
            .with_ext("MSG_REGION", "DefaultRegion");
        let mut header = BytesMut::new();
        answer.write_json_header(&mut header);
        let text = std::str::from_utf8(&header).unwrap();
        let plain = decode_plain_json_header(text).expect("a broker's answer is plain JSON");
        assert_eq!(plain.ext("queueOffset"), Some("42"));
        assert_eq!(Some(plain), decode_any_json_header(text).ok());
        // fastjson's key for the Java broker's region, unknown to us, is passed over.
        let with_unknown =
            text.replacen('{', "{\"serializeTypeCurrentRPC\":\"JSON\",\"zone\":7,", 1);
        assert!(decode_plain_json_header(&with_unknown).is_some());
        // Whitespace is the lenient parser's business.
        assert!(decode_plain_json_header(&text.replacen(':', ": ", 1)).is_none());
    }

    #[test]
    fn producer_requests_take_the_plain_header_path() {
        let properties =
            "UNIQ_KEY\u{1}7F0000010001\u{2}WAIT\u{1}true\u{2}KEYS\u{1}a\"b\\c\u{e9}\u{1F600}\u{2}";
        // As the producer frames a send: the opaque is patched into a slot padded with spaces.
        let mut frame = RequestFrame::json(310, b"body", |ext| {
            ext.str("a", "group");
            ext.str("b", "TopicTest");
            ext.int("e", 3);
            ext.str("i", properties);
        })
        .unwrap();
        frame.set_opaque(42);
        let bytes = frame.into_bytes();
        let header_len = usize::from(u16::from_be_bytes([bytes[6], bytes[7]]));
        let text = std::str::from_utf8(&bytes[8..8 + header_len]).unwrap();
        assert!(
            text.contains("\\u0001"),
            "the separators are escaped: {text}"
        );
        assert!(text.contains("42 "), "the opaque is padded: {text}");
        let plain = decode_plain_json_header(text).expect("a producer's request is plain JSON");
        assert_eq!(plain.ext("i"), Some(properties));
        assert_eq!(plain.opaque, 42);
        assert_eq!(Some(plain), decode_any_json_header(text).ok());
        // A broken escape is the lenient parser's to reject.
        let broken = text.replacen("\\u0001", "\\u00x1", 1);
        assert!(decode_plain_json_header(&broken).is_none());
        assert!(decode_any_json_header(&broken).is_err());
    }

    fn arb_language() -> impl Strategy<Value = LanguageCode> {
        (0u8..14).prop_map(LanguageCode::from_code)
    }

    prop_compose! {
        fn arb_command(binary: bool)(
            code in if binary { (i16::MIN as i32..=i16::MAX as i32).boxed() } else { any::<i32>().boxed() },
            version in if binary { (i16::MIN as i32..=i16::MAX as i32).boxed() } else { any::<i32>().boxed() },
            language in arb_language(),
            opaque in any::<i32>(),
            flag in any::<i32>(),
            remark in proptest::option::of(if binary { "\\PC{1,16}" } else { "\\PC{0,16}" }),
            ext in proptest::option::of(proptest::collection::btree_map(
                if binary { "\\PC{1,8}" } else { "\\PC{0,8}" },
                if binary { "\\PC{1,8}" } else { "\\PC{0,8}" }, 0..5)),
            body in proptest::option::of(proptest::collection::vec(any::<u8>(), 1..64)),
        ) -> RemotingCommand {
            // The binary layout cannot tell an empty ext block from none (extLen 0 = none).
            let ext = if binary { ext.filter(|map| !map.is_empty()) } else { ext };
            RemotingCommand {
                code, language, version, opaque, flag, remark, ext_fields: ext.map(|map| map.into_iter().collect()),
                body: body.map(Bytes::from),
                serialize_type: if binary { SerializeType::RocketMq } else { SerializeType::Json },
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn json_commands_round_trip(command in arb_command(false)) {
            prop_assert_eq!(decode_frame(&encoded(&command)).unwrap(), command);
        }

        #[test]
        fn binary_commands_round_trip(command in arb_command(true)) {
            prop_assert_eq!(decode_frame(&encoded(&command)).unwrap(), command);
        }

        #[test]
        fn arbitrary_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = RemotingCommand::decode(Bytes::from(bytes));
        }

        #[test]
        fn arbitrary_binary_headers_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut header = vec![0u8; 13];
            header.extend(tail);
            let _ = decode_binary_header(&header);
        }

        #[test]
        fn the_plain_header_path_agrees_with_the_lenient_parser(command in arb_command(false)) {
            let mut header = BytesMut::new();
            command.write_json_header(&mut header);
            let text = std::str::from_utf8(&header).unwrap();
            if let Some(plain) = decode_plain_json_header(text) {
                prop_assert_eq!(Some(plain), decode_any_json_header(text).ok());
            }
        }

        #[test]
        fn plain_reads_of_arbitrary_headers_agree_with_the_lenient_parser(
            // Ext values with every kind of escape, broken ones included.
            text in r#"\{("(code|opaque|flag|version|language|remark|extFields|serializeTypeCurrentRPC|x)":(null|-?[0-9]{1,11}|"[a-zA-Z0-9+\\]{0,6}"|\{("[a-z]{1,3}":("([a-z]|\\(u000[12]|u00e9|ud83d\\ude00|ud83d|udc00|n|t|"|\\|/|x|u12)){0,3}"|1),?){0,3}\}| 1),?){0,7}\}?"#
        ) {
            if let Some(plain) = decode_plain_json_header(&text) {
                prop_assert_eq!(Some(plain), decode_any_json_header(&text).ok());
            }
        }

        #[test]
        fn escaped_ext_values_read_as_the_lenient_parser_reads_them(
            values in proptest::collection::vec(
                r#"([a-z]|\\(u000[12]|u00e9|ud83d\\ude00|ud83d|udc00|n|t|"|\\|/|x|u12)){0,4}"#,
                1..4,
            )
        ) {
            let fields: Vec<String> = values
                .iter()
                .enumerate()
                .map(|(i, value)| format!("\"k{i}\":\"{value}\""))
                .collect();
            let text = format!("{{\"code\":0,\"extFields\":{{{}}}}}", fields.join(","));
            // Broken escapes: neither reads them. Good ones: both, alike.
            prop_assert_eq!(decode_plain_json_header(&text), decode_any_json_header(&text).ok());
        }

        #[test]
        fn arbitrary_json_headers_never_panic(text in "\\{(\"[a-zA-Z]{1,8}\":(null|-?[0-9]{1,12}|\"\\PC{0,6}\"|\\{\\}|\\[\\]),?){0,6}\\}?") {
            let _ = decode_json_header(text.as_bytes());
        }
    }
}
