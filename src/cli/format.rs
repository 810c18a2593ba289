//! How `consume` and `query-msg` print a message: one JSON object per line, or a kcat-like
//! template.
//!
//! Template placeholders (`consume --format TEMPLATE`):
//!
//! | | |
//! |---|---|
//! | `%t` | topic |
//! | `%B` | broker name |
//! | `%q` | queue id |
//! | `%o` | queue offset |
//! | `%k` | keys (the KEYS property: space-separated; empty when none) |
//! | `%T` | tag (empty when none) |
//! | `%s` | body, raw bytes |
//! | `%l` | body length in bytes |
//! | `%i` | message id (UNIQ_KEY, else the offset message id) |
//! | `%I` | offset message id (what `query-msg --id` takes) |
//! | `%b` | born timestamp, ms since the epoch |
//! | `%S` | store timestamp, ms since the epoch |
//! | `%r` | reconsume times |
//! | `%h` | properties as `K=V` pairs joined by `,` |
//! | `%%` | `%` |
//!
//! Escapes: `\n`, `\t`, `\r`, `\\`. Nothing is added at the end: a line per message needs a
//! trailing `\n`, as with kcat's `-f`.

use std::io::Write;

use base64::Engine;
use rocketmq_actor::MessageExt;
use serde_json::json;

/// What `--format` asked for.
#[derive(Debug, Clone)]
pub enum Format {
    /// One JSON object per line ([`message_json`]).
    Json,
    /// A template, rendered as is for every message.
    Template(Template),
}

/// Parses `--format`: `json`, or a template with at least one placeholder (so that a typo of
/// `json` is not printed verbatim for every message).
pub fn parse_format(text: &str) -> Result<Format, String> {
    if text == "json" {
        return Ok(Format::Json);
    }
    Template::parse(text).map(Format::Template)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Topic,
    Broker,
    Queue,
    Offset,
    Keys,
    Tag,
    Body,
    BodyLength,
    MsgId,
    OffsetMsgId,
    Born,
    Stored,
    Reconsumed,
    Properties,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(Vec<u8>),
    Field(Field),
}

/// A parsed `--format` template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

impl Template {
    /// Parses a template; unknown placeholders and escapes are errors.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut literal = Vec::new();
        let mut chars = text.chars();
        let mut fields = 0;
        while let Some(c) = chars.next() {
            match c {
                '%' => {
                    let field = match chars.next() {
                        Some('%') => {
                            literal.push(b'%');
                            continue;
                        }
                        Some('t') => Field::Topic,
                        Some('B') => Field::Broker,
                        Some('q') => Field::Queue,
                        Some('o') => Field::Offset,
                        Some('k') => Field::Keys,
                        Some('T') => Field::Tag,
                        Some('s') => Field::Body,
                        Some('l') => Field::BodyLength,
                        Some('i') => Field::MsgId,
                        Some('I') => Field::OffsetMsgId,
                        Some('b') => Field::Born,
                        Some('S') => Field::Stored,
                        Some('r') => Field::Reconsumed,
                        Some('h') => Field::Properties,
                        Some(other) => {
                            return Err(format!(
                                "unknown placeholder %{other} (placeholders: %t %B %q %o %k %T %s %l %i %I %b %S %r %h %%)"
                            ))
                        }
                        None => return Err("a lone % at the end (write %% for a %)".into()),
                    };
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Field(field));
                    fields += 1;
                }
                '\\' => match chars.next() {
                    Some('n') => literal.push(b'\n'),
                    Some('t') => literal.push(b'\t'),
                    Some('r') => literal.push(b'\r'),
                    Some('\\') => literal.push(b'\\'),
                    Some(other) => {
                        return Err(format!(
                            "unknown escape \\{other} (escapes: \\n \\t \\r \\\\)"
                        ))
                    }
                    None => return Err("a lone \\ at the end (write \\\\ for a \\)".into()),
                },
                c => {
                    let mut utf8 = [0; 4];
                    literal.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                }
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        if fields == 0 {
            return Err(format!(
                "{text:?} is neither `json` nor a template with a placeholder such as %s"
            ));
        }
        Ok(Template(pieces))
    }

    /// Appends the rendering of `message` to `out`.
    pub fn render(&self, message: &MessageExt, out: &mut Vec<u8>) {
        for piece in &self.0 {
            let field = match piece {
                Piece::Text(text) => {
                    out.extend_from_slice(text);
                    continue;
                }
                Piece::Field(field) => field,
            };
            // Writing into a Vec cannot fail.
            let _ = match field {
                Field::Topic => write!(out, "{}", message.topic()),
                Field::Broker => write!(out, "{}", message.broker_name),
                Field::Queue => write!(out, "{}", message.queue_id),
                Field::Offset => write!(out, "{}", message.queue_offset),
                Field::Keys => write!(out, "{}", message.property("KEYS").unwrap_or_default()),
                Field::Tag => write!(out, "{}", message.tags().unwrap_or_default()),
                Field::Body => out.write_all(message.body()),
                Field::BodyLength => write!(out, "{}", message.body().len()),
                Field::MsgId => write!(out, "{}", message.msg_id()),
                Field::OffsetMsgId => write!(out, "{}", message.offset_msg_id()),
                Field::Born => write!(out, "{}", message.born_timestamp),
                Field::Stored => write!(out, "{}", message.store_timestamp),
                Field::Reconsumed => write!(out, "{}", message.reconsume_times),
                Field::Properties => {
                    for (i, (name, value)) in message.properties().iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        let _ = write!(out, "{name}={value}");
                    }
                    Ok(())
                }
            };
        }
    }
}

/// A message as one JSON object: where it is stored, its ids, keys, tag, every property,
/// born and store times, and the body as UTF-8 text (`"body_encoding": "utf-8"`) or, when it
/// is not valid UTF-8, as base64 (`"body_encoding": "base64"`).
pub fn message_json(message: &MessageExt) -> serde_json::Value {
    let (body, encoding) = match std::str::from_utf8(message.body()) {
        Ok(text) => (json!(text), "utf-8"),
        Err(_) => (
            json!(base64::engine::general_purpose::STANDARD.encode(message.body())),
            "base64",
        ),
    };
    let properties: serde_json::Map<String, serde_json::Value> = message
        .properties()
        .iter()
        .map(|(name, value)| (name.to_owned(), json!(value)))
        .collect();
    json!({
        "topic": message.topic(),
        "broker": &*message.broker_name,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "msg_id": message.msg_id(),
        "offset_msg_id": message.offset_msg_id(),
        "keys": message.keys(),
        "tags": message.tags(),
        "properties": properties,
        "reconsume_times": message.reconsume_times,
        "born_timestamp": message.born_timestamp,
        "born_host": message.born_host.to_string(),
        "store_timestamp": message.store_timestamp,
        "store_host": message.store_host.to_string(),
        "body": body,
        "body_encoding": encoding,
    })
}

/// Writes `message` to `out` in `format` (a JSON line, or the template's rendering).
pub fn write_message(
    format: &Format,
    message: &MessageExt,
    out: &mut impl Write,
) -> std::io::Result<()> {
    match format {
        Format::Json => writeln!(out, "{}", message_json(message)),
        Format::Template(template) => {
            let mut rendered = Vec::with_capacity(64 + message.body().len());
            template.render(message, &mut rendered);
            out.write_all(&rendered)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocketmq_actor::Message;

    fn message() -> MessageExt {
        let mut m = MessageExt::from(
            Message::new("T", "hi")
                .with_tags("TagA")
                .with_keys(["k1", "k2"])
                .with_property("color", "blue"),
        );
        m.broker_name = "broker-a".into();
        m.queue_id = 3;
        m.queue_offset = 42;
        m.born_timestamp = 1_000;
        m.store_timestamp = 1_005;
        m
    }

    fn rendered(template: &str) -> String {
        let Ok(Format::Template(t)) = parse_format(template) else {
            panic!("{template} is a template");
        };
        let mut out = Vec::new();
        t.render(&message(), &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn placeholders_and_escapes_render() {
        assert_eq!(
            rendered(r"%t/%B/%q@%o k=%k T=%T %s(%l) %b %S %r 100%%\n"),
            "T/broker-a/3@42 k=k1 k2 T=TagA hi(2) 1000 1005 0 100%\n"
        );
        assert_eq!(rendered(r"%I\t%i"), {
            let m = message();
            format!("{}\t{}", m.offset_msg_id(), m.msg_id())
        });
        assert!(rendered("%h").contains("color=blue"));
    }

    #[test]
    fn mistakes_are_refused() {
        assert!(matches!(parse_format("json"), Ok(Format::Json)));
        for bad in ["jsno", "%x", "100%", r"\q%s", r"%s\"] {
            assert!(parse_format(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn json_has_properties_times_and_the_body_encoding() {
        let value = message_json(&message());
        assert_eq!(value["properties"]["color"], "blue");
        assert_eq!(value["keys"], json!(["k1", "k2"]));
        assert_eq!(value["store_timestamp"], 1_005);
        assert_eq!(value["body"], "hi");
        assert_eq!(value["body_encoding"], "utf-8");
        let mut binary = message();
        binary.message.body = bytes::Bytes::from_static(&[0xff, 0x00]);
        let value = message_json(&binary);
        assert_eq!(value["body"], "/wA=");
        assert_eq!(value["body_encoding"], "base64");
    }
}
