//! Serde helpers that read and write [`Duration`]s as human-friendly strings.
//!
//! Written as [`humantime`] strings (`"20s"`, `"15m"`, `"1h 30m"`, `"50ms"`); read from such a
//! string or from a bare non-negative integer taken as **milliseconds** (the unit of the Java
//! options, so `pull_interval = 500` means what a Java user expects).
//!
//! ```ignore
//! use std::time::Duration;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Timers {
//!     #[serde(with = "rocketmq_actor::consumer::serde_duration")]
//!     persist: Duration,
//!     #[serde(default, with = "rocketmq_actor::consumer::serde_duration::option")]
//!     shutdown: Option<Duration>,
//! }
//!
//! let t: Timers = serde_json::from_str(r#"{"persist":"5s","shutdown":1500}"#).unwrap();
//! assert_eq!(t.persist, Duration::from_secs(5));
//! assert_eq!(t.shutdown, Some(Duration::from_millis(1500)));
//! assert_eq!(serde_json::to_string(&t).unwrap(), r#"{"persist":"5s","shutdown":"1s 500ms"}"#);
//! ```

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};
use std::fmt;
use std::time::Duration;

/// Writes a duration as a humantime string (`"20s"`).
pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&humantime::format_duration(*duration))
}

/// Reads a duration from a humantime string (`"20s"`) or an integer number of milliseconds.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    deserializer.deserialize_any(DurationVisitor)
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as \"20s\", \"15m\", \"50ms\", or an integer of milliseconds")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        humantime::parse_duration(v.trim())
            .map_err(|e| E::custom(format_args!("invalid duration {v:?}: {e}")))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
        Ok(Duration::from_millis(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
        u64::try_from(v)
            .map(Duration::from_millis)
            .map_err(|_| E::custom(format_args!("a duration cannot be negative: {v}")))
    }
}

/// The same encoding for `Option<Duration>`: `None` is written as nothing (skip it with
/// `skip_serializing_if = "Option::is_none"`) and read from an absent field (with
/// `#[serde(default)]`) or a JSON `null`.
pub mod option {
    use super::DurationVisitor;
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;
    use std::time::Duration;

    /// Writes `Some(d)` as a humantime string and `None` as a unit/none value.
    pub fn serialize<S: Serializer>(
        duration: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match duration {
            Some(d) => serializer.collect_str(&humantime::format_duration(*d)),
            None => serializer.serialize_none(),
        }
    }

    /// Reads `null` as `None`, anything else as [`super::deserialize`] does.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        deserializer.deserialize_option(OptionVisitor)
    }

    struct OptionVisitor;

    impl<'de> Visitor<'de> for OptionVisitor {
        type Value = Option<Duration>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("null or a duration such as \"20s\" or an integer of milliseconds")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(DurationVisitor).map(Some)
        }
    }
}

// Every test here reads or writes TOML.
#[cfg(all(test, feature = "toml"))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Holder {
        #[serde(with = "super")]
        d: Duration,
        #[serde(
            default,
            with = "super::option",
            skip_serializing_if = "Option::is_none"
        )]
        o: Option<Duration>,
    }

    #[test]
    fn reads_humantime_strings_and_milliseconds() {
        let h: Holder = serde_json::from_str(r#"{"d":"15m","o":"20s"}"#).unwrap();
        assert_eq!(h.d, Duration::from_secs(15 * 60));
        assert_eq!(h.o, Some(Duration::from_secs(20)));
        let h: Holder = serde_json::from_str(r#"{"d":50}"#).unwrap();
        assert_eq!(h.d, Duration::from_millis(50));
        assert_eq!(h.o, None);
        let h: Holder = serde_json::from_str(r#"{"d":"1h 30m","o":null}"#).unwrap();
        assert_eq!(h.d, Duration::from_secs(90 * 60));
        assert_eq!(h.o, None);
        let h: Holder = toml::from_str("d = \"50ms\"\no = 0\n").unwrap();
        assert_eq!(h.d, Duration::from_millis(50));
        assert_eq!(h.o, Some(Duration::ZERO));
    }

    #[test]
    fn rejects_garbage_and_negative_values() {
        assert!(serde_json::from_str::<Holder>(r#"{"d":"soon"}"#).is_err());
        assert!(serde_json::from_str::<Holder>(r#"{"d":-5}"#).is_err());
        assert!(serde_json::from_str::<Holder>(r#"{"d":true}"#).is_err());
        assert!(toml::from_str::<Holder>("d = -1").is_err());
    }

    #[test]
    fn writes_humantime_strings() {
        let h = Holder {
            d: Duration::from_secs(20),
            o: Some(Duration::from_millis(1500)),
        };
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            r#"{"d":"20s","o":"1s 500ms"}"#
        );
        let h = Holder {
            d: Duration::ZERO,
            o: None,
        };
        assert_eq!(toml::to_string(&h).unwrap(), "d = \"0s\"\n");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn round_trips_through_json_and_toml(ms in 0u64..10_000_000_000, nanos in 0u32..1_000_000) {
            let d = Duration::from_millis(ms) + Duration::from_nanos(u64::from(nanos));
            let h = Holder { d, o: Some(d) };
            let json = serde_json::to_string(&h).unwrap();
            prop_assert_eq!(serde_json::from_str::<Holder>(&json).unwrap(), h);
            let h = Holder { d, o: None };
            let text = toml::to_string(&h).unwrap();
            prop_assert_eq!(toml::from_str::<Holder>(&text).unwrap(), h);
        }
    }
}
