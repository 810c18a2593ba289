//! Tag expressions, SQL92 selectors and filtering (protocol.md §4).
//!
//! A [`Selector`] is what a subscription selects: a [`TagExpression`] or a SQL92 expression
//! ([`SqlFilter`], evaluated by the broker over the message's properties).
//!
//! A subscription like `"TagA || TagB"` becomes a set of tags and their Java hash codes. The
//! broker filters by hash code (what its consume queue stores); the client re-filters by exact
//! string because different tags can share a hash code.

use std::fmt;

pub(crate) mod sql;
pub use sql::{SqlError, SqlFilter};

/// Java's `String.hashCode()`: `h = 31 * h + c` over UTF-16 code units, wrapping.
///
/// ```
/// use rocketmq_actor::filter::java_hash_code;
/// assert_eq!(java_hash_code("TagA"), 2598919);
/// assert_eq!(java_hash_code(""), 0);
/// ```
pub fn java_hash_code(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The tags code a broker stores for a message: the hash of its `TAGS`, 0 when it has none
/// (Java `MessageExtBrokerInner.tagsString2tagsCode`).
pub fn tags_code(tags: Option<&str>) -> i32 {
    match tags {
        Some(tags) if !tags.is_empty() => java_hash_code(tags),
        _ => 0,
    }
}

/// The subscription expression meaning "every message".
pub const SUB_ALL: &str = "*";

/// A parsed TAG-type subscription expression (Java `FilterAPI.buildSubscriptionData`).
///
/// ```
/// use rocketmq_actor::filter::{java_hash_code, TagExpression};
/// let expr = TagExpression::parse("TagA || TagB");
/// assert!(!expr.is_all());
/// assert_eq!(expr.tags(), ["TagA", "TagB"]);
/// assert!(expr.matches_code(java_hash_code("TagB")));
/// assert!(expr.matches_tags(Some("TagA")));
/// assert!(!expr.matches_tags(None));
/// assert!(TagExpression::parse("*").matches_tags(None));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagExpression {
    sub_string: String,
    tags: Vec<String>,
    codes: Vec<i32>,
}

impl Default for TagExpression {
    fn default() -> Self {
        TagExpression::all()
    }
}

/// Java's `String.trim()`: strips code points ≤ U+0020 (not Unicode whitespace).
fn java_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c <= ' ')
}

impl TagExpression {
    /// The expression that matches everything (`"*"`).
    pub fn all() -> Self {
        TagExpression {
            sub_string: SUB_ALL.to_owned(),
            tags: Vec::new(),
            codes: Vec::new(),
        }
    }

    /// Parses an expression: empty or `"*"` subscribes to all; otherwise it is split on the
    /// literal `||`, each piece trimmed, empty pieces skipped, duplicates collapsed.
    pub fn parse(expression: &str) -> Self {
        if expression.is_empty() || expression == SUB_ALL {
            return TagExpression::all();
        }
        let mut tags: Vec<String> = Vec::new();
        let mut codes: Vec<i32> = Vec::new();
        for piece in expression.split("||") {
            let tag = java_trim(piece);
            if tag.is_empty() || tags.iter().any(|t| t == tag) {
                continue;
            }
            let code = java_hash_code(tag);
            if !codes.contains(&code) {
                codes.push(code);
            }
            tags.push(tag.to_owned());
        }
        TagExpression {
            sub_string: expression.to_owned(),
            tags,
            codes,
        }
    }

    /// The expression as written (`"*"` for all), sent as `subString`.
    pub fn sub_string(&self) -> &str {
        &self.sub_string
    }

    /// Whether this subscribes to every message.
    pub fn is_all(&self) -> bool {
        self.sub_string == SUB_ALL
    }

    /// The tags (`tagsSet`), in expression order.
    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    /// The Java hash codes of the tags (`codeSet`).
    pub fn codes(&self) -> &[i32] {
        &self.codes
    }

    /// Broker-side check against a consume-queue tags code: everything matches `"*"`,
    /// otherwise the code must be one of [`codes`](Self::codes) — so a message without tags
    /// (code 0) never matches a tag list.
    pub fn matches_code(&self, tags_code: i32) -> bool {
        self.is_all() || self.codes.contains(&tags_code)
    }

    /// Client-side exact re-filter after a pull: with no tag list everything passes;
    /// otherwise the message's `TAGS` must equal one of the tags (no tags → dropped).
    pub fn matches_tags(&self, message_tags: Option<&str>) -> bool {
        if self.tags.is_empty() {
            return true;
        }
        message_tags.is_some_and(|tags| self.tags.iter().any(|t| t == tags))
    }
}

impl fmt::Display for TagExpression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sub_string)
    }
}

/// The `expressionType` of tag subscriptions.
pub const EXPRESSION_TYPE_TAG: &str = "TAG";
/// The `expressionType` of SQL92 subscriptions.
pub const EXPRESSION_TYPE_SQL92: &str = "SQL92";

/// What a subscription selects: a tag expression, or a SQL92 expression over the message's
/// properties (Java's `MessageSelector.byTag` / `bySql`).
///
/// Text converts to a tag expression, so `subscribe("Orders", "TagA || TagB")` reads as
/// before; [`Selector::sql`] asks for property filtering, which the broker must have switched
/// on (`enablePropertyFilter = true`; the embedded broker has it on). A SQL92 expression is
/// checked when the consumer starts: a syntax error fails `start()` with its position.
///
/// In TOML or JSON a selector is either a string (a tag expression) or a table with `sql`:
///
/// ```
/// use rocketmq_actor::filter::Selector;
///
/// let by_tag: Selector = "TagA || TagB".into();
/// assert_eq!(by_tag.expression_type(), "TAG");
///
/// let by_sql = Selector::sql("region = 'eu' AND amount > 100");
/// assert_eq!(by_sql.expression_type(), "SQL92");
/// assert_eq!(by_sql.expression(), "region = 'eu' AND amount > 100");
/// assert!(by_sql.check().is_ok());
/// assert_eq!(Selector::sql("amount >").check().unwrap_err().position(), 9);
///
/// let from_json: Selector = serde_json::from_str(r#"{"sql": "amount > 100"}"#).unwrap();
/// assert_eq!(from_json, Selector::sql("amount > 100"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    /// A tag expression (`"*"`, `"TagA || TagB"`).
    Tag(TagExpression),
    /// A SQL92 expression, as written.
    Sql92(String),
}

impl Selector {
    /// Selects by tag expression (`"*"` for every message).
    pub fn tag(expression: &str) -> Selector {
        Selector::Tag(TagExpression::parse(expression))
    }

    /// Selects by a SQL92 expression over the message's properties (see [`SqlFilter`] for
    /// the language). Checked by [`Selector::check`], which consumers run at start.
    pub fn sql(expression: impl Into<String>) -> Selector {
        Selector::Sql92(expression.into())
    }

    /// Every message (`"*"`).
    pub fn all() -> Selector {
        Selector::Tag(TagExpression::all())
    }

    /// `TAG` or `SQL92`, as the wire names them.
    pub fn expression_type(&self) -> &'static str {
        match self {
            Selector::Tag(_) => EXPRESSION_TYPE_TAG,
            Selector::Sql92(_) => EXPRESSION_TYPE_SQL92,
        }
    }

    /// The expression as sent (`subString`).
    pub fn expression(&self) -> &str {
        match self {
            Selector::Tag(tags) => tags.sub_string(),
            Selector::Sql92(sql) => sql,
        }
    }

    /// Whether this is a SQL92 selector.
    pub fn is_sql(&self) -> bool {
        matches!(self, Selector::Sql92(_))
    }

    /// The tag expression, for a tag selector.
    pub fn tags(&self) -> Option<&TagExpression> {
        match self {
            Selector::Tag(tags) => Some(tags),
            Selector::Sql92(_) => None,
        }
    }

    /// Checks a SQL92 expression's syntax and types (a tag expression is always valid).
    pub fn check(&self) -> Result<(), SqlError> {
        match self {
            Selector::Tag(_) => Ok(()),
            Selector::Sql92(sql) => SqlFilter::compile(sql).map(drop),
        }
    }
}

impl Default for Selector {
    fn default() -> Self {
        Selector::all()
    }
}

impl From<&str> for Selector {
    fn from(expression: &str) -> Self {
        Selector::tag(expression)
    }
}

impl From<String> for Selector {
    fn from(expression: String) -> Self {
        Selector::tag(&expression)
    }
}

impl From<&String> for Selector {
    fn from(expression: &String) -> Self {
        Selector::tag(expression)
    }
}

impl From<TagExpression> for Selector {
    fn from(tags: TagExpression) -> Self {
        Selector::Tag(tags)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Tag(tags) => f.write_str(tags.sub_string()),
            Selector::Sql92(sql) => write!(f, "SQL92 `{sql}`"),
        }
    }
}

/// The TOML/JSON form: a string is a tag expression; `{ sql = "..." }` or `{ tag = "..." }`
/// names the kind.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum SelectorForm {
    Text(String),
    Sql { sql: String },
    Tag { tag: String },
}

impl serde::Serialize for Selector {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Selector::Tag(tags) => SelectorForm::Text(tags.sub_string().to_owned()),
            Selector::Sql92(sql) => SelectorForm::Sql { sql: sql.clone() },
        }
        .serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Selector {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let form = SelectorForm::deserialize(deserializer).map_err(|_| {
            serde::de::Error::custom(
                "expected a tag expression (\"TagA || TagB\") or a table { sql = \"...\" }",
            )
        })?;
        Ok(match form {
            SelectorForm::Text(tag) | SelectorForm::Tag { tag } => Selector::tag(&tag),
            SelectorForm::Sql { sql } => Selector::Sql92(sql),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hash_codes_match_the_reference_examples() {
        // protocol.md §4.
        assert_eq!(java_hash_code("TagA"), 2_598_919);
        assert_eq!(java_hash_code("TagB"), 2_598_920);
        assert_eq!(java_hash_code("*"), 42);
        assert_eq!(java_hash_code(""), 0);
        assert_eq!(java_hash_code("标签"), 857_175);
    }

    #[test]
    fn hash_counts_surrogate_pairs_as_two_units() {
        // U+1F600 is D83D DE00 in UTF-16: 31 * 0xD83D + 0xDE00.
        assert_eq!(java_hash_code("😀"), 31 * 0xD83D + 0xDE00);
    }

    #[test]
    fn hash_wraps_like_java_int() {
        // Computed with i64 and truncated, independently of the wrapping ops.
        let text = "a fairly long tag string that overflows";
        let mut h: i64 = 0;
        for unit in text.encode_utf16() {
            h = (h * 31 + i64::from(unit)) & 0xFFFF_FFFF;
        }
        assert_eq!(java_hash_code(text), h as u32 as i32);
    }

    #[test]
    fn empty_and_star_subscribe_to_all() {
        for expr in ["", "*"] {
            let parsed = TagExpression::parse(expr);
            assert!(parsed.is_all());
            assert_eq!(parsed.sub_string(), "*");
            assert!(parsed.tags().is_empty() && parsed.codes().is_empty());
            assert!(parsed.matches_code(0));
            assert!(parsed.matches_code(12345));
            assert!(parsed.matches_tags(None));
        }
    }

    #[test]
    fn lists_are_split_trimmed_and_deduplicated() {
        let parsed = TagExpression::parse(" TagA ||TagB||  || TagA||\tTagC");
        assert_eq!(parsed.tags(), ["TagA", "TagB", "TagC"]);
        assert_eq!(
            parsed.codes(),
            [
                java_hash_code("TagA"),
                java_hash_code("TagB"),
                java_hash_code("TagC")
            ]
        );
        assert_eq!(parsed.sub_string(), " TagA ||TagB||  || TagA||\tTagC");
        assert!(!parsed.is_all());
    }

    #[test]
    fn single_pipe_is_part_of_the_tag() {
        let parsed = TagExpression::parse("A|B");
        assert_eq!(parsed.tags(), ["A|B"]);
    }

    #[test]
    fn untagged_messages_never_match_a_tag_list() {
        let parsed = TagExpression::parse("TagA");
        assert!(!parsed.matches_code(tags_code(None)));
        assert!(!parsed.matches_code(tags_code(Some(""))));
        assert!(!parsed.matches_tags(None));
        assert!(parsed.matches_code(tags_code(Some("TagA"))));
    }

    #[test]
    fn hash_collision_passes_the_broker_but_not_the_client() {
        // "Aa" and "BB" are the classic Java collision: 65*31+97 == 66*31+66 == 2112.
        assert_eq!(java_hash_code("Aa"), 2112);
        assert_eq!(java_hash_code("BB"), 2112);
        let parsed = TagExpression::parse("Aa");
        assert!(parsed.matches_code(tags_code(Some("BB"))));
        assert!(!parsed.matches_tags(Some("BB")));
        assert!(parsed.matches_tags(Some("Aa")));
    }

    #[test]
    fn a_list_of_only_separators_matches_nothing_on_the_broker() {
        let parsed = TagExpression::parse("||");
        assert!(!parsed.is_all());
        assert!(parsed.tags().is_empty());
        assert!(!parsed.matches_code(0));
        // Java skips the client re-filter when the tag set is empty.
        assert!(parsed.matches_tags(None));
    }

    proptest! {
        #[test]
        fn every_listed_tag_matches(tags in proptest::collection::vec("[A-Za-z0-9_]{1,8}", 1..5)) {
            let parsed = TagExpression::parse(&tags.join(" || "));
            for tag in &tags {
                prop_assert!(parsed.matches_tags(Some(tag)));
                prop_assert!(parsed.matches_code(tags_code(Some(tag))));
            }
        }

        #[test]
        fn parsing_arbitrary_text_never_panics(text in ".{0,40}") {
            let parsed = TagExpression::parse(&text);
            let _ = parsed.matches_tags(Some(&text));
        }
    }
}
