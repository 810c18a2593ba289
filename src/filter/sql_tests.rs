use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn props(pairs: &[(&str, &str)]) -> Properties {
    let mut properties = Properties::new();
    for (name, value) in pairs {
        assert!(properties.insert(name, value));
    }
    properties
}

fn eval(expression: &str, pairs: &[(&str, &str)]) -> Option<bool> {
    SqlFilter::compile(expression)
        .unwrap_or_else(|e| panic!("{expression:?}: {e}"))
        .evaluate(&props(pairs))
}

fn error_of(expression: &str) -> SqlError {
    match SqlFilter::compile(expression) {
        Ok(_) => panic!("{expression:?} compiled"),
        Err(e) => e,
    }
}

#[test]
fn numbers_in_properties_compare_as_numbers() {
    assert_eq!(eval("amount > 100", &[("amount", "250")]), Some(true));
    assert_eq!(eval("amount > 100", &[("amount", "99")]), Some(false));
    // Text order would put "99" after "100"; numbers do not.
    assert_eq!(eval("amount < 100", &[("amount", "99")]), Some(true));
    assert_eq!(eval("amount > 5", &[("amount", "10.5")]), Some(true));
    assert_eq!(eval("amount = 10", &[("amount", "10.0")]), Some(true));
    assert_eq!(eval("amount >= 2.5", &[("amount", "2")]), Some(false));
    assert_eq!(eval("amount > -1", &[("amount", "0")]), Some(true));
    assert_eq!(
        eval(
            "amount = 9223372036854775807",
            &[("amount", "9223372036854775807")]
        ),
        Some(true)
    );
    assert_eq!(
        eval(
            "amount > 9223372036854775806",
            &[("amount", "9223372036854775807")]
        ),
        Some(true),
        "large integers are compared exactly, not as decimals"
    );
}

#[test]
fn a_missing_or_unreadable_value_is_unknown() {
    assert_eq!(eval("amount > 100", &[]), None);
    assert_eq!(eval("amount > 100", &[("amount", "lots")]), None);
    assert_eq!(eval("amount > 100", &[("amount", "inf")]), None);
    assert_eq!(eval("amount <> 100", &[]), None);
    assert_eq!(eval("NOT (amount = 100)", &[]), None);
    assert_eq!(eval("flag = TRUE", &[("flag", "yes")]), None);
}

#[test]
fn and_or_not_follow_three_valued_logic() {
    let missing: &[(&str, &str)] = &[("b", "2")];
    assert_eq!(eval("a = 1 OR b = 2", missing), Some(true));
    assert_eq!(eval("a = 1 OR b = 3", missing), None);
    assert_eq!(eval("a = 1 AND b = 3", missing), Some(false));
    assert_eq!(eval("a = 1 AND b = 2", missing), None);
    assert_eq!(eval("NOT a = 1", missing), None);
    assert_eq!(eval("NOT b = 3", missing), Some(true));
    assert_eq!(eval("TRUE", &[]), Some(true));
    assert_eq!(eval("NOT FALSE AND TRUE", &[]), Some(true));
}

#[test]
fn not_binds_looser_than_a_comparison() {
    assert_eq!(parse("NOT a = 1").unwrap(), parse("NOT (a = 1)").unwrap());
    assert_eq!(eval("NOT a = 1", &[("a", "2")]), Some(true));
    // AND before OR.
    assert_eq!(
        parse("a = 1 OR b = 1 AND c = 1").unwrap(),
        parse("a = 1 OR (b = 1 AND c = 1)").unwrap()
    );
}

#[test]
fn text_equality_lists_and_presence() {
    let eu: &[(&str, &str)] = &[("region", "eu")];
    assert_eq!(eval("region = 'eu'", eu), Some(true));
    assert_eq!(eval("region = 'EU'", eu), Some(false));
    assert_eq!(eval("region <> 'us'", eu), Some(true));
    assert_eq!(eval("region IN ('us', 'eu')", eu), Some(true));
    assert_eq!(eval("region NOT IN ('us', 'eu')", eu), Some(false));
    assert_eq!(eval("region NOT IN ('us')", &[]), None);
    assert_eq!(eval("region IS NOT NULL", eu), Some(true));
    assert_eq!(eval("region IS NULL", &[]), Some(true));
    assert_eq!(eval("coupon IS NULL", eu), Some(true));
    assert_eq!(eval("name = 'it''s'", &[("name", "it's")]), Some(true));
    // A text literal compared with a number reads the number's way.
    assert_eq!(eval("code = '7'", &[("code", "7")]), Some(true));
    assert_eq!(eval("code = 7", &[("code", "07")]), Some(true));
}

#[test]
fn ranges_are_inclusive() {
    for (amount, inside) in [
        ("9", false),
        ("10", true),
        ("15.5", true),
        ("20", true),
        ("21", false),
    ] {
        let pairs = [("amount", amount)];
        assert_eq!(
            eval("amount BETWEEN 10 AND 20", &pairs),
            Some(inside),
            "{amount}"
        );
        assert_eq!(
            eval("amount NOT BETWEEN 10 AND 20", &pairs),
            Some(!inside),
            "{amount}"
        );
    }
    assert_eq!(eval("amount BETWEEN 10 AND 20", &[]), None);
    assert_eq!(
        eval(
            "amount BETWEEN low AND high",
            &[("amount", "5"), ("low", "1"), ("high", "9")]
        ),
        Some(true)
    );
}

#[test]
fn text_operators_and_their_not_forms() {
    let name: &[(&str, &str)] = &[("name", "order-42-eu")];
    assert_eq!(eval("name CONTAINS '42'", name), Some(true));
    assert_eq!(eval("name STARTSWITH 'order'", name), Some(true));
    assert_eq!(eval("name ENDSWITH 'eu'", name), Some(true));
    assert_eq!(eval("name NOT CONTAINS '42'", name), Some(false));
    assert_eq!(eval("name NOT STARTSWITH 'x'", name), Some(true));
    assert_eq!(eval("name NOT ENDSWITH 'us'", name), Some(true));
    assert_eq!(eval("name CONTAINS 'x'", &[]), None);
    assert_eq!(eval("name NOT CONTAINS 'x'", &[]), None);
}

#[test]
fn tags_keys_and_booleans_are_properties() {
    let message = crate::Message::new("T", "b")
        .with_tags("paid")
        .with_keys(["order-1"])
        .with_property("vip", "True");
    let filter = SqlFilter::compile("TAGS = 'paid' AND KEYS = 'order-1' AND vip = TRUE").unwrap();
    assert!(filter.matches(&message.properties));
    assert_eq!(eval("vip", &[("vip", "false")]), Some(false));
    assert_eq!(eval("vip = FALSE", &[("vip", "FALSE")]), Some(true));
}

#[test]
fn keywords_ignore_case_and_names_do_not() {
    assert_eq!(
        eval("a = 1 and b = 2 Or c = 3", &[("a", "1"), ("b", "2")]),
        Some(true)
    );
    assert_eq!(eval("Region = 'eu'", &[("region", "eu")]), None);
    assert_eq!(eval("a.b_c$ = 1", &[("a.b_c$", "1")]), Some(true));
}

#[test]
fn the_last_pair_of_a_name_wins_as_with_get() {
    let properties = Properties::parse("a\u{1}1\u{2}a\u{1}2\u{2}");
    assert_eq!(properties.get("a"), Some("2"));
    let filter = SqlFilter::compile("a = 2").unwrap();
    assert!(filter.matches(&properties));
}

#[test]
fn literals_read_as_written() {
    for (text, literal) in [
        ("100", Literal::Long(100)),
        ("100L", Literal::Long(100)),
        ("-7", Literal::Long(-7)),
        ("+7", Literal::Long(7)),
        ("-9223372036854775808", Literal::Long(i64::MIN)),
        ("2.5", Literal::Double(2.5)),
        (".5", Literal::Double(0.5)),
        ("5.", Literal::Double(5.0)),
        ("1e3", Literal::Double(1000.0)),
        ("1.5E-2", Literal::Double(0.015)),
        ("0.0", Literal::Double(0.0)),
    ] {
        assert_eq!(
            parse(&format!("a = {text}")).unwrap(),
            Expr::Compare(
                Operand::Property("a".into()),
                CompareOp::Eq,
                Operand::Literal(literal)
            ),
            "{text}"
        );
    }
}

#[test]
fn errors_name_the_position_and_the_fault() {
    for (expression, position, words) in [
        ("", 1, "empty"),
        ("amount >", 9, "expected a property or a value"),
        ("amount > 'x'", 10, "only numbers are ordered"),
        ("a = NULL", 5, "IS NULL"),
        ("a IN (1)", 7, "string literal"),
        ("5", 1, "not a condition"),
        ("a = 1 b = 2", 7, "AND or OR"),
        ("(a = 1", 7, "closing the ( at position 1"),
        ("a = 'abc", 5, "not closed"),
        ("a != 1", 3, "<>"),
        ("a = \"x\"", 5, "quoted with '"),
        ("a = 99999999999999999999", 5, "64-bit"),
        ("a BETWEEN 5 AND 1", 11, "low bound"),
        ("a BETWEEN 'x' AND 1", 11, "numbers or properties"),
        ("-a > 1", 1, "arithmetic"),
        ("a LIKE 'x'", 3, "AND or OR"),
        ("a NOT = 1", 7, "after NOT"),
        ("TRUE = 1", 1, "cannot be compared"),
        ("'x' CONTAINS 'y'", 1, "applies to a property"),
        ("a CONTAINS b", 12, "string literal after CONTAINS"),
        ("a = 1 AND", 10, "expected a property or a value"),
        ("a = 5x", 6, "runs into a name"),
        ("a = 1e", 6, "exponent"),
        ("a = #", 5, "unexpected character"),
        ("é = 1", 1, "unexpected character"),
    ] {
        let error = error_of(expression);
        assert_eq!(error.position(), position, "{expression:?}: {error}");
        assert!(
            error.message().contains(words),
            "{expression:?}: {error} lacks {words:?}"
        );
    }
}

#[test]
fn positions_count_characters_not_bytes() {
    let error = error_of("name = 'é' AND >");
    assert_eq!(error.position(), 16);
}

#[test]
fn a_deep_expression_is_refused_not_overflowed() {
    let wide = vec!["a = 1"; 400].join(" OR ");
    assert!(error_of(&wide).message().contains("operators"));
    let deep = format!("{}a = 1{}", "(".repeat(5000), ")".repeat(5000));
    assert!(error_of(&deep).message().contains("nested"));
    let nots = format!("{}a = 1", "NOT ".repeat(5000));
    assert!(error_of(&nots).message().contains("nested"));
    let nested = format!("{}a = 1{}", "(NOT ".repeat(32), ")".repeat(32));
    assert!(SqlFilter::compile(&nested).is_ok());
    let fine = vec!["a = 1"; 200].join(" OR ");
    assert!(SqlFilter::compile(&fine).is_ok());
}

#[test]
fn more_properties_than_the_inline_slots() {
    let names: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
    let expression = names
        .iter()
        .map(|n| format!("{n} = 1"))
        .collect::<Vec<_>>()
        .join(" AND ");
    let all: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    assert_eq!(eval(&expression, &all), Some(true));
    assert_eq!(eval(&expression, &all[..11]), None);
}

// ---------------------------------------------------------------------------------------------
// A reference evaluator: the rules of the module doc written out over the tree and a map,
// without the compiled form's slots, short-circuits or shared comparison code.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Truth {
    True,
    False,
    Unknown,
}

impl Truth {
    fn of(value: bool) -> Truth {
        if value {
            Truth::True
        } else {
            Truth::False
        }
    }

    fn to_option(self) -> Option<bool> {
        match self {
            Truth::True => Some(true),
            Truth::False => Some(false),
            Truth::Unknown => None,
        }
    }
}

#[derive(Clone, Debug)]
enum Seen {
    Null,
    Text(String),
    Integer(i64),
    Decimal(f64),
    Boolean(bool),
}

fn seen(operand: &Operand, map: &HashMap<String, String>) -> Seen {
    match operand {
        Operand::Property(name) => match map.get(name) {
            Some(text) => Seen::Text(text.clone()),
            None => Seen::Null,
        },
        Operand::Literal(Literal::Null) => Seen::Null,
        Operand::Literal(Literal::Bool(b)) => Seen::Boolean(*b),
        Operand::Literal(Literal::Long(n)) => Seen::Integer(*n),
        Operand::Literal(Literal::Double(x)) => Seen::Decimal(*x),
        Operand::Literal(Literal::Str(s)) => Seen::Text(s.clone()),
    }
}

fn as_number(value: &Seen) -> Option<Seen> {
    match value {
        Seen::Integer(_) | Seen::Decimal(_) => Some(value.clone()),
        Seen::Text(text) => {
            if let Ok(n) = text.parse::<i64>() {
                return Some(Seen::Integer(n));
            }
            let numeric_chars = text.chars().all(|c| "0123456789.eE+-".contains(c));
            match text.parse::<f64>() {
                Ok(x) if numeric_chars && x.is_finite() => Some(Seen::Decimal(x)),
                _ => None,
            }
        }
        _ => None,
    }
}

fn as_boolean(value: &Seen) -> Option<bool> {
    match value {
        Seen::Boolean(b) => Some(*b),
        Seen::Text(text) if text.to_lowercase() == "true" => Some(true),
        Seen::Text(text) if text.to_lowercase() == "false" => Some(false),
        _ => None,
    }
}

fn numeric_order(a: &Seen, b: &Seen) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Seen::Integer(x), Seen::Integer(y)) => Some(x.cmp(y)),
        _ => {
            let decimal = |v: &Seen| match v {
                Seen::Integer(n) => Some(*n as f64),
                Seen::Decimal(x) => Some(*x),
                _ => None,
            };
            decimal(a)?.partial_cmp(&decimal(b)?)
        }
    }
}

fn reference_compare(a: &Seen, op: CompareOp, b: &Seen) -> Truth {
    use std::cmp::Ordering::*;
    if matches!(a, Seen::Null) || matches!(b, Seen::Null) {
        return Truth::Unknown;
    }
    let order = if op.is_ordering() {
        match (as_number(a), as_number(b)) {
            (Some(x), Some(y)) => numeric_order(&x, &y),
            _ => None,
        }
    } else if let (Seen::Text(x), Seen::Text(y)) = (a, b) {
        Some(x.cmp(y))
    } else if matches!(a, Seen::Boolean(_)) || matches!(b, Seen::Boolean(_)) {
        match (as_boolean(a), as_boolean(b)) {
            (Some(x), Some(y)) => Some(x.cmp(&y)),
            _ => None,
        }
    } else {
        match (as_number(a), as_number(b)) {
            (Some(x), Some(y)) => numeric_order(&x, &y),
            _ => None,
        }
    };
    let Some(order) = order else {
        return Truth::Unknown;
    };
    Truth::of(match op {
        CompareOp::Eq => order == Equal,
        CompareOp::Ne => order != Equal,
        CompareOp::Lt => order == Less,
        CompareOp::Le => order == Less || order == Equal,
        CompareOp::Gt => order == Greater,
        CompareOp::Ge => order == Greater || order == Equal,
    })
}

fn both(a: Truth, b: Truth) -> Truth {
    if a == Truth::False || b == Truth::False {
        Truth::False
    } else if a == Truth::True && b == Truth::True {
        Truth::True
    } else {
        Truth::Unknown
    }
}

fn either(a: Truth, b: Truth) -> Truth {
    if a == Truth::True || b == Truth::True {
        Truth::True
    } else if a == Truth::False && b == Truth::False {
        Truth::False
    } else {
        Truth::Unknown
    }
}

fn reference(expr: &Expr, map: &HashMap<String, String>) -> Truth {
    let flip = |t: Truth, negated: bool| match (t, negated) {
        (Truth::True, true) => Truth::False,
        (Truth::False, true) => Truth::True,
        _ => t,
    };
    match expr {
        Expr::Or(a, b) => either(reference(a, map), reference(b, map)),
        Expr::And(a, b) => both(reference(a, map), reference(b, map)),
        Expr::Not(inner) => flip(reference(inner, map), true),
        Expr::Constant(b) => Truth::of(*b),
        Expr::Truth(name) => match map
            .get(name)
            .and_then(|t| as_boolean(&Seen::Text(t.clone())))
        {
            Some(b) => Truth::of(b),
            None => Truth::Unknown,
        },
        Expr::Compare(a, op, b) => reference_compare(&seen(a, map), *op, &seen(b, map)),
        Expr::Between {
            value,
            low,
            high,
            negated,
        } => {
            let (v, l, h) = (seen(value, map), seen(low, map), seen(high, map));
            if *negated {
                either(
                    reference_compare(&v, CompareOp::Lt, &l),
                    reference_compare(&v, CompareOp::Gt, &h),
                )
            } else {
                both(
                    reference_compare(&v, CompareOp::Ge, &l),
                    reference_compare(&v, CompareOp::Le, &h),
                )
            }
        }
        Expr::In {
            property,
            values,
            negated,
        } => match map.get(property) {
            None => Truth::Unknown,
            Some(v) => flip(Truth::of(values.contains(v)), *negated),
        },
        Expr::IsNull { value, negated } => {
            flip(Truth::of(matches!(seen(value, map), Seen::Null)), *negated)
        }
        Expr::Text {
            property,
            op,
            pattern,
            negated,
        } => match map.get(property) {
            None => Truth::Unknown,
            Some(v) => {
                let found = match op {
                    TextOp::Contains => v.find(pattern.as_str()).is_some(),
                    TextOp::StartsWith => v.get(..pattern.len()) == Some(pattern.as_str()),
                    TextOp::EndsWith => {
                        v.len() >= pattern.len()
                            && v.get(v.len() - pattern.len()..) == Some(pattern.as_str())
                    }
                };
                flip(Truth::of(found), *negated)
            }
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Generators

const NAMES: [&str; 5] = ["a", "b", "amount", "region", "TAGS"];
const VALUES: [&str; 13] = [
    "1", "10", "-3", "2.5", "1e2", "abc", "eu", "true", "FALSE", " 5", "0", "it's", "10.0",
];

fn name() -> impl Strategy<Value = String> {
    proptest::sample::select(NAMES.to_vec()).prop_map(String::from)
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(VALUES.to_vec()).prop_map(String::from),
        "[ -~]{0,6}",
    ]
}

fn number() -> impl Strategy<Value = Literal> {
    prop_oneof![
        (-20i64..20).prop_map(Literal::Long),
        any::<i64>().prop_map(Literal::Long),
        (-20.0f64..20.0).prop_map(Literal::Double),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(Literal::Double),
    ]
}

fn equality_literal() -> impl Strategy<Value = Literal> {
    prop_oneof![
        number(),
        text().prop_map(Literal::Str),
        any::<bool>().prop_map(Literal::Bool),
    ]
}

fn compare_op() -> impl Strategy<Value = CompareOp> {
    proptest::sample::select(vec![
        CompareOp::Eq,
        CompareOp::Ne,
        CompareOp::Lt,
        CompareOp::Le,
        CompareOp::Gt,
        CompareOp::Ge,
    ])
}

fn comparison() -> impl Strategy<Value = Expr> {
    (
        name(),
        compare_op(),
        equality_literal(),
        number(),
        name(),
        any::<u8>(),
    )
        .prop_map(|(property, op, any_literal, number, other, shape)| {
            let literal = if op.is_ordering() {
                number
            } else {
                any_literal
            };
            let property = Operand::Property(property);
            match shape % 3 {
                0 => Expr::Compare(property, op, Operand::Literal(literal)),
                1 => Expr::Compare(Operand::Literal(literal), op, property),
                _ => Expr::Compare(property, op, Operand::Property(other)),
            }
        })
}

fn leaf() -> impl Strategy<Value = Expr> {
    let text_op =
        proptest::sample::select(vec![TextOp::Contains, TextOp::StartsWith, TextOp::EndsWith]);
    prop_oneof![
        any::<bool>().prop_map(Expr::Constant),
        name().prop_map(Expr::Truth),
        comparison(),
        comparison(),
        (name(), number(), number(), any::<bool>()).prop_map(|(property, a, b, negated)| {
            let (low, high) = if compare_numbers(&a, &b) == Some(Ordering::Greater) {
                (b, a)
            } else {
                (a, b)
            };
            Expr::Between {
                value: Operand::Property(property),
                low: Operand::Literal(low),
                high: Operand::Literal(high),
                negated,
            }
        }),
        (
            name(),
            proptest::collection::vec(text(), 1..4),
            any::<bool>()
        )
            .prop_map(|(property, values, negated)| Expr::In {
                property,
                values,
                negated
            }),
        (name(), any::<bool>()).prop_map(|(property, negated)| Expr::IsNull {
            value: Operand::Property(property),
            negated
        }),
        (name(), text_op, text(), any::<bool>()).prop_map(|(property, op, pattern, negated)| {
            Expr::Text {
                property,
                op,
                pattern,
                negated,
            }
        }),
    ]
}

fn expression() -> impl Strategy<Value = Expr> {
    leaf().prop_recursive(5, 40, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::Or(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::And(Box::new(a), Box::new(b))),
            inner.prop_map(|e| Expr::Not(Box::new(e))),
        ]
    })
}

fn message_properties() -> impl Strategy<Value = HashMap<String, String>> {
    proptest::collection::hash_map(
        name(),
        proptest::sample::select(VALUES.to_vec()).prop_map(String::from),
        0..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_printed_form_parses_back_to_the_same_tree(expr in expression()) {
        let printed = expr.to_string();
        let parsed = parse(&printed).map_err(|e| TestCaseError::fail(format!("{printed}: {e}")))?;
        prop_assert_eq!(parsed, expr, "{}", printed);
    }

    #[test]
    fn the_compiled_filter_agrees_with_the_reference(expr in expression(), map in message_properties()) {
        let printed = expr.to_string();
        let filter = SqlFilter::compile(&printed).map_err(|e| TestCaseError::fail(format!("{printed}: {e}")))?;
        let mut properties = Properties::new();
        for (k, v) in &map {
            prop_assert!(properties.insert(k, v));
        }
        prop_assert_eq!(filter.evaluate(&properties), reference(&expr, &map).to_option(), "{} over {:?}", printed, map);
    }

    #[test]
    fn arbitrary_text_is_compiled_or_refused_without_panicking(text in "[ -~]{0,40}") {
        if let Err(error) = SqlFilter::compile(&text) {
            prop_assert!(error.position() >= 1 && error.position() <= text.chars().count() + 1);
        }
    }

    #[test]
    fn what_parses_prints_back_to_the_same_tree(text in "(a|b|NOT|AND|OR|IN|IS|NULL|TRUE|[(),=<>']|'x'|1|-2.5| ){0,16}") {
        if let Ok(tree) = parse(&text) {
            let printed = tree.to_string();
            prop_assert_eq!(parse(&printed).ok(), Some(tree), "{}", printed);
        }
    }
}
