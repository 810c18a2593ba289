//! SQL92 selectors: RocketMQ's property filter language, parsed, printed and evaluated.
//!
//! A consumer that subscribes with `MessageSelector.bySql("region = 'eu' AND amount > 100")`
//! asks the broker to hand it only the messages whose properties satisfy the expression. The
//! client checks the syntax before anything goes on the wire ([`SqlFilter::compile`]); the
//! embedded broker compiles each subscription version once and evaluates it per message
//! ([`SqlFilter::matches`]).
//!
//! # The language
//!
//! | form | example |
//! |---|---|
//! | literals | `'eu'` (a quote inside is `''`), `100`, `100L`, `2.5`, `1e3`, `-7`, `TRUE`, `FALSE`, `NULL` |
//! | properties | any message property by name: user properties, and `TAGS`, `KEYS` of the system ones |
//! | comparisons | `=`, `<>`, `<`, `<=`, `>`, `>=` |
//! | ranges | `amount BETWEEN 10 AND 20`, `amount NOT BETWEEN 10 AND 20` |
//! | lists | `region IN ('eu', 'us')`, `region NOT IN ('eu')` (string literals) |
//! | presence | `coupon IS NULL`, `coupon IS NOT NULL` |
//! | text | `name CONTAINS 'x'`, `STARTSWITH`, `ENDSWITH`, and their `NOT` forms (5.x) |
//! | logic | `AND`, `OR`, `NOT`, parentheses |
//!
//! Keywords are case-insensitive; property names are case-sensitive and are made of ASCII
//! letters, digits, `_`, `$` and `.` (not starting with a digit or `.`). There is no
//! arithmetic and no `LIKE`, as in RocketMQ.
//!
//! # Evaluation
//!
//! A property's value is text. Compared with a number it is read as a number (an integer
//! when it is one, else a decimal); with `TRUE`/`FALSE` it must read `true` or `false` (any
//! case); with text it is compared as text. A missing property, or a value that cannot be
//! read as the other side's type, is `NULL`, and `NULL` follows SQL's three-valued logic:
//! `NULL AND FALSE` is false, `NULL OR TRUE` is true, `NOT NULL` is `NULL`, and a message is
//! delivered only when the whole expression is true. `<`/`>` and friends order numbers only.
//!
//! `NOT` binds looser than a comparison: `NOT a = 1` is `NOT (a = 1)`, as in SQL and the
//! rocketmq-rust broker. (A Java broker binds it tighter; parentheses read the same on both.)
//!
//! ```
//! use rocketmq_actor::filter::SqlFilter;
//! use rocketmq_actor::Message;
//!
//! let filter = SqlFilter::compile("region = 'eu' AND amount > 100").unwrap();
//! let big = Message::new("Orders", "...").with_property("region", "eu").with_property("amount", "250");
//! let small = Message::new("Orders", "...").with_property("region", "eu").with_property("amount", "7");
//! assert!(filter.matches(&big.properties));
//! assert!(!filter.matches(&small.properties));
//!
//! let error = SqlFilter::compile("amount >").unwrap_err();
//! assert_eq!(error.position(), 9);
//! ```

use std::cmp::Ordering;
use std::fmt;

use crate::message::properties::{lookup_many, Properties};

/// The most `AND`s and `OR`s an expression may hold: with [`MAX_NESTING`] it bounds the
/// depth of the tree that evaluation, printing and dropping recurse over.
const MAX_OPERATORS: usize = 256;

/// How deep parentheses and `NOT`s may nest: parsing recurses through several frames per
/// level, on whatever thread compiles the expression.
const MAX_NESTING: usize = 64;

/// A syntax or type error in a SQL92 expression, with where it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlError {
    position: usize,
    message: String,
}

impl SqlError {
    fn new(position: usize, message: impl Into<String>) -> Self {
        SqlError {
            position,
            message: message.into(),
        }
    }

    /// The 1-based character position of the error in the expression (one past its end for
    /// an expression that ends too early).
    pub fn position(&self) -> usize {
        self.position
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at position {}: {}", self.position, self.message)
    }
}

impl std::error::Error for SqlError {}

/// A constant of the language.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Literal {
    Null,
    Bool(bool),
    Long(i64),
    Double(f64),
    Str(String),
}

/// One side of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Operand {
    Property(String),
    Literal(Literal),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    fn text(self) -> &'static str {
        match self {
            CompareOp::Eq => "=",
            CompareOp::Ne => "<>",
            CompareOp::Lt => "<",
            CompareOp::Le => "<=",
            CompareOp::Gt => ">",
            CompareOp::Ge => ">=",
        }
    }

    fn is_ordering(self) -> bool {
        !matches!(self, CompareOp::Eq | CompareOp::Ne)
    }

    /// Whether `ordering` (left against right) satisfies the operator.
    fn holds(self, ordering: Ordering) -> bool {
        match self {
            CompareOp::Eq => ordering == Ordering::Equal,
            CompareOp::Ne => ordering != Ordering::Equal,
            CompareOp::Lt => ordering == Ordering::Less,
            CompareOp::Le => ordering != Ordering::Greater,
            CompareOp::Gt => ordering == Ordering::Greater,
            CompareOp::Ge => ordering != Ordering::Less,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TextOp {
    Contains,
    StartsWith,
    EndsWith,
}

impl TextOp {
    fn text(self) -> &'static str {
        match self {
            TextOp::Contains => "CONTAINS",
            TextOp::StartsWith => "STARTSWITH",
            TextOp::EndsWith => "ENDSWITH",
        }
    }

    fn holds(self, value: &str, pattern: &str) -> bool {
        match self {
            TextOp::Contains => value.contains(pattern),
            TextOp::StartsWith => value.starts_with(pattern),
            TextOp::EndsWith => value.ends_with(pattern),
        }
    }
}

/// A parsed expression. Its `Display` is the canonical form, which parses back to the same
/// tree.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    /// `TRUE` or `FALSE` on its own.
    Constant(bool),
    /// A property on its own, read as a boolean.
    Truth(String),
    Compare(Operand, CompareOp, Operand),
    Between {
        value: Operand,
        low: Operand,
        high: Operand,
        negated: bool,
    },
    In {
        property: String,
        values: Vec<String>,
        negated: bool,
    },
    IsNull {
        value: Operand,
        negated: bool,
    },
    Text {
        property: String,
        op: TextOp,
        pattern: String,
        negated: bool,
    },
}

fn write_quoted(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    f.write_str("'")?;
    f.write_str(&text.replace('\'', "''"))?;
    f.write_str("'")
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(true) => f.write_str("TRUE"),
            Literal::Bool(false) => f.write_str("FALSE"),
            Literal::Long(n) => write!(f, "{n}"),
            // `{:?}` always writes a `.` or an exponent, so the text reads back as a decimal.
            Literal::Double(x) => write!(f, "{x:?}"),
            Literal::Str(text) => write_quoted(f, text),
        }
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Property(name) => f.write_str(name),
            Operand::Literal(literal) => literal.fmt(f),
        }
    }
}

fn not_word(negated: bool) -> &'static str {
    if negated {
        "NOT "
    } else {
        ""
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Or(left, right) => write!(f, "({left} OR {right})"),
            Expr::And(left, right) => write!(f, "({left} AND {right})"),
            Expr::Not(inner) => write!(f, "(NOT {inner})"),
            Expr::Constant(true) => f.write_str("TRUE"),
            Expr::Constant(false) => f.write_str("FALSE"),
            Expr::Truth(name) => f.write_str(name),
            Expr::Compare(left, op, right) => write!(f, "{left} {} {right}", op.text()),
            Expr::Between {
                value,
                low,
                high,
                negated,
            } => write!(f, "{value} {}BETWEEN {low} AND {high}", not_word(*negated)),
            Expr::In {
                property,
                values,
                negated,
            } => {
                write!(f, "{property} {}IN (", not_word(*negated))?;
                for (at, value) in values.iter().enumerate() {
                    if at > 0 {
                        f.write_str(", ")?;
                    }
                    write_quoted(f, value)?;
                }
                f.write_str(")")
            }
            Expr::IsNull { value, negated } => {
                write!(f, "{value} IS {}NULL", not_word(*negated))
            }
            Expr::Text {
                property,
                op,
                pattern,
                negated,
            } => {
                write!(f, "{property} {}{} ", not_word(*negated), op.text())?;
                write_quoted(f, pattern)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lexing

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keyword {
    And,
    Or,
    Not,
    Between,
    In,
    Is,
    Null,
    True,
    False,
    Contains,
    StartsWith,
    EndsWith,
}

impl Keyword {
    fn of(word: &str) -> Option<Keyword> {
        const ALL: [(&str, Keyword); 12] = [
            ("AND", Keyword::And),
            ("OR", Keyword::Or),
            ("NOT", Keyword::Not),
            ("BETWEEN", Keyword::Between),
            ("IN", Keyword::In),
            ("IS", Keyword::Is),
            ("NULL", Keyword::Null),
            ("TRUE", Keyword::True),
            ("FALSE", Keyword::False),
            ("CONTAINS", Keyword::Contains),
            ("STARTSWITH", Keyword::StartsWith),
            ("ENDSWITH", Keyword::EndsWith),
        ];
        ALL.iter()
            .find(|(text, _)| text.eq_ignore_ascii_case(word))
            .map(|(_, keyword)| *keyword)
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(String),
    Keyword(Keyword),
    Str(String),
    /// A number's digits as written (sign and `L` suffix apart), and whether it is decimal.
    Number {
        text: String,
        decimal: bool,
    },
    LParen,
    RParen,
    Comma,
    Op(CompareOp),
    Minus,
    Plus,
    End,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Word(word) => format!("property {word}"),
            Tok::Keyword(keyword) => format!("{keyword:?}").to_uppercase(),
            Tok::Str(text) => format!("'{text}'"),
            Tok::Number { text, .. } => text.clone(),
            Tok::LParen => "(".into(),
            Tok::RParen => ")".into(),
            Tok::Comma => ",".into(),
            Tok::Op(op) => op.text().into(),
            Tok::Minus => "-".into(),
            Tok::Plus => "+".into(),
            Tok::End => "the end of the expression".into(),
        }
    }
}

struct Token {
    tok: Tok,
    /// 1-based character position.
    at: usize,
}

fn lex(text: &str) -> Result<Vec<Token>, SqlError> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let tok = match c {
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            ',' => Tok::Comma,
            '=' => Tok::Op(CompareOp::Eq),
            '-' => Tok::Minus,
            '+' => Tok::Plus,
            '<' => match chars.get(i + 1) {
                Some('>') => {
                    i += 1;
                    Tok::Op(CompareOp::Ne)
                }
                Some('=') => {
                    i += 1;
                    Tok::Op(CompareOp::Le)
                }
                _ => Tok::Op(CompareOp::Lt),
            },
            '>' => {
                if chars.get(i + 1) == Some(&'=') {
                    i += 1;
                    Tok::Op(CompareOp::Ge)
                } else {
                    Tok::Op(CompareOp::Gt)
                }
            }
            '\'' => {
                let mut value = String::new();
                let mut j = i + 1;
                loop {
                    match chars.get(j) {
                        None => return Err(SqlError::new(at, "the string is not closed with '")),
                        Some('\'') if chars.get(j + 1) == Some(&'\'') => {
                            value.push('\'');
                            j += 2;
                        }
                        Some('\'') => break,
                        Some(&other) => {
                            value.push(other);
                            j += 1;
                        }
                    }
                }
                i = j;
                Tok::Str(value)
            }
            '0'..='9' | '.' => {
                let (tok, end) = lex_number(&chars, i)?;
                i = end - 1;
                tok
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == '$' => {
                let mut j = i;
                while chars
                    .get(j)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.'))
                {
                    j += 1;
                }
                let word: String = chars[i..j].iter().collect();
                i = j - 1;
                match Keyword::of(&word) {
                    Some(keyword) => Tok::Keyword(keyword),
                    None => Tok::Word(word),
                }
            }
            '"' => {
                return Err(SqlError::new(
                    at,
                    "strings are quoted with ' (a \" is not allowed)",
                ))
            }
            '!' if chars.get(i + 1) == Some(&'=') => {
                return Err(SqlError::new(at, "write <> for \"not equal\""))
            }
            other => return Err(SqlError::new(at, format!("unexpected character {other:?}"))),
        };
        tokens.push(Token { tok, at });
        i += 1;
    }
    tokens.push(Token {
        tok: Tok::End,
        at: chars.len() + 1,
    });
    Ok(tokens)
}

/// Lexes the number starting at `start`; returns it and the index after it.
fn lex_number(chars: &[char], start: usize) -> Result<(Tok, usize), SqlError> {
    let digits = |mut j: usize| {
        while chars.get(j).is_some_and(char::is_ascii_digit) {
            j += 1;
        }
        j
    };
    let mut end = digits(start);
    let mut decimal = false;
    let mut text: String = chars[start..end].iter().collect();
    if chars.get(end) == Some(&'.') {
        decimal = true;
        let after = digits(end + 1);
        if text.is_empty() && after == end + 1 {
            return Err(SqlError::new(start + 1, "unexpected character '.'"));
        }
        if text.is_empty() {
            text.push('0');
        }
        text.push('.');
        text.extend(&chars[end + 1..after]);
        if after == end + 1 {
            text.push('0');
        }
        end = after;
    }
    if matches!(chars.get(end), Some('e' | 'E')) {
        let mut j = end + 1;
        let mut exponent = String::from("e");
        if let Some(&sign @ ('+' | '-')) = chars.get(j) {
            exponent.push(sign);
            j += 1;
        }
        let after = digits(j);
        if after == j {
            return Err(SqlError::new(end + 1, "the exponent has no digits"));
        }
        exponent.extend(&chars[j..after]);
        text.push_str(&exponent);
        decimal = true;
        end = after;
    } else if !decimal && matches!(chars.get(end), Some('l' | 'L')) {
        end += 1;
    }
    if chars
        .get(end)
        .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.'))
    {
        return Err(SqlError::new(
            end + 1,
            "a number runs into a name (separate them with a space)",
        ));
    }
    Ok((Tok::Number { text, decimal }, end))
}

// ---------------------------------------------------------------------------------------------
// Parsing

struct Parser {
    tokens: Vec<Token>,
    next: usize,
    operators: usize,
    nesting: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        // `lex` always ends the list with `End`, and `advance` never moves past it.
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn advance(&mut self) -> &Token {
        let at = self.next.min(self.tokens.len() - 1);
        if self.next < self.tokens.len() - 1 {
            self.next += 1;
        }
        &self.tokens[at]
    }

    fn eat_keyword(&mut self, keyword: Keyword) -> bool {
        if self.peek().tok == Tok::Keyword(keyword) {
            self.advance();
            true
        } else {
            false
        }
    }

    fn expected(&self, what: &str) -> SqlError {
        let token = self.peek();
        SqlError::new(
            token.at,
            format!("expected {what}, found {}", token.tok.describe()),
        )
    }

    fn count_operator(&mut self, at: usize) -> Result<(), SqlError> {
        self.operators += 1;
        if self.operators > MAX_OPERATORS {
            return Err(SqlError::new(
                at,
                format!("the expression has more than {MAX_OPERATORS} operators"),
            ));
        }
        Ok(())
    }

    /// Parses `inner` one level deeper (under a parenthesis or a `NOT`).
    fn nested<T>(
        &mut self,
        at: usize,
        inner: impl FnOnce(&mut Self) -> Result<T, SqlError>,
    ) -> Result<T, SqlError> {
        if self.nesting >= MAX_NESTING {
            return Err(SqlError::new(
                at,
                format!("parentheses and NOTs are nested more than {MAX_NESTING} deep"),
            ));
        }
        self.nesting += 1;
        let result = inner(self);
        self.nesting -= 1;
        result
    }

    fn or(&mut self) -> Result<Expr, SqlError> {
        let mut left = self.and()?;
        while self.peek().tok == Tok::Keyword(Keyword::Or) {
            let at = self.advance().at;
            self.count_operator(at)?;
            let right = self.and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, SqlError> {
        let mut left = self.not()?;
        while self.peek().tok == Tok::Keyword(Keyword::And) {
            let at = self.advance().at;
            self.count_operator(at)?;
            let right = self.not()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Expr, SqlError> {
        if self.peek().tok == Tok::Keyword(Keyword::Not) {
            let at = self.advance().at;
            let inner = self.nested(at, Self::not)?;
            return Ok(Expr::Not(Box::new(inner)));
        }
        self.predicate()
    }

    fn predicate(&mut self) -> Result<Expr, SqlError> {
        if self.peek().tok == Tok::LParen {
            let at = self.advance().at;
            let inner = self.nested(at, Self::or)?;
            if self.peek().tok != Tok::RParen {
                return Err(self.expected(&format!(") closing the ( at position {at}")));
            }
            self.advance();
            return Ok(inner);
        }
        let start = self.peek().at;
        let value = self.operand()?;
        let negated = self.eat_keyword(Keyword::Not);
        let token_at = self.peek().at;
        match self.peek().tok.clone() {
            Tok::Op(op) if !negated => {
                self.advance();
                let right_at = self.peek().at;
                let right = self.operand()?;
                check_comparison(&value, op, &right, start, right_at)?;
                Ok(Expr::Compare(value, op, right))
            }
            Tok::Keyword(Keyword::Between) => {
                self.advance();
                let low_at = self.peek().at;
                let low = self.operand()?;
                if !self.eat_keyword(Keyword::And) {
                    return Err(self.expected("AND between the bounds of BETWEEN"));
                }
                let high_at = self.peek().at;
                let high = self.operand()?;
                check_between(&value, &low, &high, start, low_at, high_at)?;
                Ok(Expr::Between {
                    value,
                    low,
                    high,
                    negated,
                })
            }
            Tok::Keyword(Keyword::In) => {
                self.advance();
                let property = property_of(value, start, "IN")?;
                if self.peek().tok != Tok::LParen {
                    return Err(self.expected("( opening the IN list"));
                }
                self.advance();
                let mut values = Vec::new();
                loop {
                    match self.peek().tok.clone() {
                        Tok::Str(text) => {
                            self.advance();
                            values.push(text);
                        }
                        _ => return Err(self.expected("a string literal in the IN list")),
                    }
                    match self.peek().tok {
                        Tok::Comma => {
                            self.advance();
                        }
                        Tok::RParen => {
                            self.advance();
                            break;
                        }
                        _ => return Err(self.expected(", or ) in the IN list")),
                    }
                }
                Ok(Expr::In {
                    property,
                    values,
                    negated,
                })
            }
            Tok::Keyword(
                keyword @ (Keyword::Contains | Keyword::StartsWith | Keyword::EndsWith),
            ) => {
                self.advance();
                let op = match keyword {
                    Keyword::Contains => TextOp::Contains,
                    Keyword::StartsWith => TextOp::StartsWith,
                    _ => TextOp::EndsWith,
                };
                let property = property_of(value, start, op.text())?;
                let Tok::Str(pattern) = self.peek().tok.clone() else {
                    return Err(self.expected(&format!("a string literal after {}", op.text())));
                };
                self.advance();
                Ok(Expr::Text {
                    property,
                    op,
                    pattern,
                    negated,
                })
            }
            Tok::Keyword(Keyword::Is) if !negated => {
                self.advance();
                let negated = self.eat_keyword(Keyword::Not);
                if !self.eat_keyword(Keyword::Null) {
                    return Err(self.expected(if negated { "NULL" } else { "NULL or NOT NULL" }));
                }
                Ok(Expr::IsNull { value, negated })
            }
            _ if negated => Err(SqlError::new(
                token_at,
                "expected BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH after NOT",
            )),
            _ => match value {
                Operand::Literal(Literal::Bool(truth)) => Ok(Expr::Constant(truth)),
                Operand::Property(name) => Ok(Expr::Truth(name)),
                Operand::Literal(other) => Err(SqlError::new(
                    start,
                    format!("{other} on its own is not a condition"),
                )),
            },
        }
    }

    fn operand(&mut self) -> Result<Operand, SqlError> {
        let token = self.advance();
        let at = token.at;
        let tok = token.tok.clone();
        match tok {
            Tok::Word(name) => Ok(Operand::Property(name)),
            Tok::Str(text) => Ok(Operand::Literal(Literal::Str(text))),
            Tok::Number { text, decimal } => {
                number(&text, decimal, false, at).map(Operand::Literal)
            }
            Tok::Keyword(Keyword::True) => Ok(Operand::Literal(Literal::Bool(true))),
            Tok::Keyword(Keyword::False) => Ok(Operand::Literal(Literal::Bool(false))),
            Tok::Keyword(Keyword::Null) => Ok(Operand::Literal(Literal::Null)),
            Tok::Minus | Tok::Plus => {
                let negative = tok == Tok::Minus;
                let next = self.advance();
                match next.tok.clone() {
                    Tok::Number { text, decimal } => {
                        number(&text, decimal, negative, at).map(Operand::Literal)
                    }
                    _ => Err(SqlError::new(
                        at,
                        "arithmetic is not supported: a sign must be followed by a number",
                    )),
                }
            }
            other => {
                let message = format!("expected a property or a value, found {}", other.describe());
                Err(SqlError::new(at, message))
            }
        }
    }
}

fn number(text: &str, decimal: bool, negative: bool, at: usize) -> Result<Literal, SqlError> {
    let signed = if negative {
        format!("-{text}")
    } else {
        text.to_owned()
    };
    if decimal {
        match signed.parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(Literal::Double(x)),
            _ => Err(SqlError::new(at, format!("{signed} is out of range"))),
        }
    } else {
        signed.parse::<i64>().map(Literal::Long).map_err(|_| {
            SqlError::new(
                at,
                format!("{signed} does not fit a 64-bit integer (write it as a decimal)"),
            )
        })
    }
}

fn property_of(value: Operand, at: usize, operator: &str) -> Result<String, SqlError> {
    match value {
        Operand::Property(name) => Ok(name),
        Operand::Literal(literal) => Err(SqlError::new(
            at,
            format!("{operator} applies to a property, not to {literal}"),
        )),
    }
}

fn is_number(operand: &Operand) -> bool {
    matches!(
        operand,
        Operand::Literal(Literal::Long(_) | Literal::Double(_))
    )
}

fn check_comparison(
    left: &Operand,
    op: CompareOp,
    right: &Operand,
    left_at: usize,
    right_at: usize,
) -> Result<(), SqlError> {
    for (side, at) in [(left, left_at), (right, right_at)] {
        let Operand::Literal(literal) = side else {
            continue;
        };
        if *literal == Literal::Null {
            return Err(SqlError::new(
                at,
                format!(
                    "NULL cannot be compared with {}: write IS NULL or IS NOT NULL",
                    op.text()
                ),
            ));
        }
        if op.is_ordering() && !is_number(side) {
            return Err(SqlError::new(
                at,
                format!(
                    "{literal} cannot be compared with {}: only numbers are ordered",
                    op.text()
                ),
            ));
        }
    }
    if let (Operand::Literal(a), Operand::Literal(b)) = (left, right) {
        let boolean = |l: &Literal| matches!(l, Literal::Bool(_));
        if boolean(a) != boolean(b) {
            return Err(SqlError::new(
                left_at,
                format!("{a} cannot be compared with {b}"),
            ));
        }
    }
    Ok(())
}

fn check_between(
    value: &Operand,
    low: &Operand,
    high: &Operand,
    value_at: usize,
    low_at: usize,
    high_at: usize,
) -> Result<(), SqlError> {
    for (side, at) in [(value, value_at), (low, low_at), (high, high_at)] {
        if let Operand::Literal(literal) = side {
            if !is_number(side) {
                return Err(SqlError::new(
                    at,
                    format!("BETWEEN takes numbers or properties, not {literal}"),
                ));
            }
        }
    }
    if let (Operand::Literal(a), Operand::Literal(b)) = (low, high) {
        if compare_numbers(a, b) == Some(Ordering::Greater) {
            return Err(SqlError::new(
                low_at,
                format!("BETWEEN {a} AND {b} is empty: the low bound comes first"),
            ));
        }
    }
    Ok(())
}

/// Parses `text` into its tree.
pub(crate) fn parse(text: &str) -> Result<Expr, SqlError> {
    let tokens = lex(text)?;
    if tokens.len() == 1 {
        return Err(SqlError::new(1, "the expression is empty"));
    }
    let mut parser = Parser {
        tokens,
        next: 0,
        operators: 0,
        nesting: 0,
    };
    let expr = parser.or()?;
    if parser.peek().tok != Tok::End {
        let token = parser.peek();
        return Err(SqlError::new(
            token.at,
            format!(
                "unexpected {} after a complete condition (join conditions with AND or OR)",
                token.tok.describe()
            ),
        ));
    }
    Ok(expr)
}

// ---------------------------------------------------------------------------------------------
// Evaluation

/// A value while evaluating: a message's property is text until compared.
#[derive(Clone, Copy, Debug)]
enum Value<'a> {
    Null,
    Bool(bool),
    Long(i64),
    Double(f64),
    Text(&'a str),
}

impl<'a> Value<'a> {
    fn of_literal(literal: &'a Literal) -> Value<'a> {
        match literal {
            Literal::Null => Value::Null,
            Literal::Bool(b) => Value::Bool(*b),
            Literal::Long(n) => Value::Long(*n),
            Literal::Double(x) => Value::Double(*x),
            Literal::Str(text) => Value::Text(text),
        }
    }
}

/// Reads property text as a number: an integer when it is one, else a finite decimal.
fn read_number(text: &str) -> Option<Value<'static>> {
    if let Ok(n) = text.parse::<i64>() {
        return Some(Value::Long(n));
    }
    // Rust also reads "inf" and "NaN", which are not numbers a producer writes.
    let looks_numeric = text
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    match text.parse::<f64>() {
        Ok(x) if looks_numeric && x.is_finite() => Some(Value::Double(x)),
        _ => None,
    }
}

fn read_bool(text: &str) -> Option<bool> {
    if text.eq_ignore_ascii_case("true") {
        Some(true)
    } else if text.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

fn order_numbers(a: Value<'_>, b: Value<'_>) -> Option<Ordering> {
    match (a, b) {
        (Value::Long(x), Value::Long(y)) => Some(x.cmp(&y)),
        (Value::Long(x), Value::Double(y)) => (x as f64).partial_cmp(&y),
        (Value::Double(x), Value::Long(y)) => x.partial_cmp(&(y as f64)),
        (Value::Double(x), Value::Double(y)) => x.partial_cmp(&y),
        _ => None,
    }
}

fn compare_numbers(a: &Literal, b: &Literal) -> Option<Ordering> {
    order_numbers(Value::of_literal(a), Value::of_literal(b))
}

/// `left op right` in three-valued logic: `None` is SQL's unknown.
fn compare(left: Value<'_>, op: CompareOp, right: Value<'_>) -> Option<bool> {
    let ordering = match (left, right) {
        (Value::Null, _) | (_, Value::Null) => return None,
        (Value::Text(a), Value::Text(b)) => {
            if op.is_ordering() {
                order_numbers(read_number(a)?, read_number(b)?)?
            } else {
                a.cmp(b)
            }
        }
        (Value::Bool(a), Value::Bool(b)) if !op.is_ordering() => a.cmp(&b),
        (Value::Text(text), Value::Bool(b)) if !op.is_ordering() => read_bool(text)?.cmp(&b),
        (Value::Bool(b), Value::Text(text)) if !op.is_ordering() => b.cmp(&read_bool(text)?),
        (Value::Text(text), number) => order_numbers(read_number(text)?, number)?,
        (number, Value::Text(text)) => order_numbers(number, read_number(text)?)?,
        (a, b) => order_numbers(a, b)?,
    };
    Some(op.holds(ordering))
}

fn and(left: Option<bool>, right: impl FnOnce() -> Option<bool>) -> Option<bool> {
    match left {
        Some(false) => Some(false),
        _ => match (left, right()) {
            (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
    }
}

fn or(left: Option<bool>, right: impl FnOnce() -> Option<bool>) -> Option<bool> {
    match left {
        Some(true) => Some(true),
        _ => match (left, right()) {
            (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
    }
}

/// An operand with its property replaced by a slot of the message's looked-up values.
#[derive(Clone, Debug)]
enum Slot {
    Property(usize),
    Literal(Literal),
}

/// The compiled form: property names resolved to slots, filled by one scan of a message's
/// properties.
#[derive(Clone, Debug)]
enum Node {
    Or(Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Constant(bool),
    Truth(usize),
    Compare(Slot, CompareOp, Slot),
    Between(Slot, Slot, Slot, bool),
    In(usize, Box<[String]>, bool),
    IsNull(Slot, bool),
    Text(usize, TextOp, String, bool),
}

struct Compiler {
    names: Vec<String>,
}

impl Compiler {
    fn slot_of_name(&mut self, name: &str) -> usize {
        match self.names.iter().position(|n| n == name) {
            Some(at) => at,
            None => {
                self.names.push(name.to_owned());
                self.names.len() - 1
            }
        }
    }

    fn slot(&mut self, operand: &Operand) -> Slot {
        match operand {
            Operand::Property(name) => Slot::Property(self.slot_of_name(name)),
            Operand::Literal(literal) => Slot::Literal(literal.clone()),
        }
    }

    fn node(&mut self, expr: &Expr) -> Node {
        match expr {
            Expr::Or(a, b) => Node::Or(Box::new(self.node(a)), Box::new(self.node(b))),
            Expr::And(a, b) => Node::And(Box::new(self.node(a)), Box::new(self.node(b))),
            Expr::Not(inner) => Node::Not(Box::new(self.node(inner))),
            Expr::Constant(truth) => Node::Constant(*truth),
            Expr::Truth(name) => Node::Truth(self.slot_of_name(name)),
            Expr::Compare(left, op, right) => Node::Compare(self.slot(left), *op, self.slot(right)),
            Expr::Between {
                value,
                low,
                high,
                negated,
            } => Node::Between(self.slot(value), self.slot(low), self.slot(high), *negated),
            Expr::In {
                property,
                values,
                negated,
            } => Node::In(
                self.slot_of_name(property),
                values.clone().into_boxed_slice(),
                *negated,
            ),
            Expr::IsNull { value, negated } => Node::IsNull(self.slot(value), *negated),
            Expr::Text {
                property,
                op,
                pattern,
                negated,
            } => Node::Text(self.slot_of_name(property), *op, pattern.clone(), *negated),
        }
    }
}

impl Node {
    fn value<'a>(slot: &'a Slot, found: &[Option<&'a str>]) -> Value<'a> {
        match slot {
            Slot::Property(at) => match found.get(*at).copied().flatten() {
                Some(text) => Value::Text(text),
                None => Value::Null,
            },
            Slot::Literal(literal) => Value::of_literal(literal),
        }
    }

    fn evaluate(&self, found: &[Option<&str>]) -> Option<bool> {
        let text = |at: &usize| found.get(*at).copied().flatten();
        match self {
            Node::Or(a, b) => or(a.evaluate(found), || b.evaluate(found)),
            Node::And(a, b) => and(a.evaluate(found), || b.evaluate(found)),
            Node::Not(inner) => inner.evaluate(found).map(|truth| !truth),
            Node::Constant(truth) => Some(*truth),
            Node::Truth(at) => read_bool(text(at)?),
            Node::Compare(left, op, right) => {
                compare(Self::value(left, found), *op, Self::value(right, found))
            }
            Node::Between(value, low, high, negated) => {
                let (value, low, high) = (
                    Self::value(value, found),
                    Self::value(low, found),
                    Self::value(high, found),
                );
                if *negated {
                    or(compare(value, CompareOp::Lt, low), || {
                        compare(value, CompareOp::Gt, high)
                    })
                } else {
                    and(compare(value, CompareOp::Ge, low), || {
                        compare(value, CompareOp::Le, high)
                    })
                }
            }
            Node::In(at, values, negated) => {
                let value = text(at)?;
                Some(values.iter().any(|v| v == value) != *negated)
            }
            Node::IsNull(slot, negated) => {
                let null = matches!(Self::value(slot, found), Value::Null);
                Some(null != *negated)
            }
            Node::Text(at, op, pattern, negated) => Some(op.holds(text(at)?, pattern) != *negated),
        }
    }
}

/// How many property values are looked up without a heap allocation.
const INLINE_SLOTS: usize = 8;

/// A compiled SQL92 expression: parsed and type-checked once, evaluated per message.
///
/// ```
/// use rocketmq_actor::filter::SqlFilter;
/// use rocketmq_actor::Message;
///
/// let filter = SqlFilter::compile("TAGS IN ('paid', 'refunded') AND coupon IS NULL").unwrap();
/// let paid = Message::new("Orders", "...").with_tags("paid");
/// assert!(filter.matches(&paid.properties));
/// assert!(!filter.matches(&paid.clone().with_property("coupon", "X1").properties));
/// assert_eq!(filter.evaluate(&Message::new("Orders", "...").properties), None);
/// ```
#[derive(Clone, Debug)]
pub struct SqlFilter {
    source: String,
    names: Vec<String>,
    root: Node,
}

/// Two filters are equal when they were compiled from the same text.
impl PartialEq for SqlFilter {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for SqlFilter {}

impl SqlFilter {
    /// Parses and type-checks `expression`; the error names the position of the fault.
    pub fn compile(expression: &str) -> Result<SqlFilter, SqlError> {
        let tree = parse(expression)?;
        let mut compiler = Compiler { names: Vec::new() };
        let root = compiler.node(&tree);
        Ok(SqlFilter {
            source: expression.to_owned(),
            names: compiler.names,
            root,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether a message with these properties is selected: the expression is true (not
    /// false, not unknown).
    pub fn matches(&self, properties: &Properties) -> bool {
        self.matches_wire(properties.raw_wire())
    }

    /// The expression's value for a message with these properties: `None` when it is SQL's
    /// unknown (a missing property decided it).
    pub fn evaluate(&self, properties: &Properties) -> Option<bool> {
        self.evaluate_wire(properties.raw_wire())
    }

    /// [`SqlFilter::matches`] over properties in their wire form (a stored record's).
    pub(crate) fn matches_wire(&self, properties: &[u8]) -> bool {
        self.evaluate_wire(properties) == Some(true)
    }

    fn evaluate_wire(&self, properties: &[u8]) -> Option<bool> {
        let count = self.names.len();
        if count <= INLINE_SLOTS {
            let (mut raw, mut found) = ([None; INLINE_SLOTS], [None; INLINE_SLOTS]);
            self.evaluate_in(properties, &mut raw[..count], &mut found[..count])
        } else {
            self.evaluate_in(properties, &mut vec![None; count], &mut vec![None; count])
        }
    }

    /// Looks the expression's properties up in one scan (the last pair of a name wins, as
    /// with [`Properties::get`]) into `raw`, reads them as text into `found`, and evaluates.
    fn evaluate_in<'m>(
        &self,
        properties: &'m [u8],
        raw: &mut [Option<&'m [u8]>],
        found: &mut [Option<&'m str>],
    ) -> Option<bool> {
        lookup_many(properties, &self.names, raw);
        for (text, value) in found.iter_mut().zip(raw.iter()) {
            *text = value.and_then(|v| std::str::from_utf8(v).ok());
        }
        self.root.evaluate(found)
    }
}

impl fmt::Display for SqlFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
#[path = "sql_tests.rs"]
mod tests;
