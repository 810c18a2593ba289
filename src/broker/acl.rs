//! The embedded broker's ACL mode: accounts read from a Java broker's `plain_acl.yml`, and the
//! check of every broker request against them — ACL 1.0 semantics (Java's
//! `PlainAccessValidator`), answered the way ACL 2.0 and rocketmq-rust answer a refusal
//! (NO_PERMISSION, code 16), with a remark naming the access key, the resource and the missing
//! permission.
//!
//! Order of the checks, as Java's: a global white address lets everything through; then the
//! request must carry a known `AccessKey`; an account's own white address lets its requests
//! through; then the signature must verify with the account's secret; an admin account may do
//! everything; the admin-only codes need one; and each resource the request touches needs the
//! permission its code asks for (a group's permission is a permission on its retry topic
//! `%RETRY%<group>`; an explicit entry replaces the default).
//!
//! ```
//! use rocketmq_actor::embedded::AclConfig;
//! let acl = AclConfig::from_yaml_str(r#"
//! globalWhiteRemoteAddresses: []
//! accounts:
//!   - accessKey: RocketMQ
//!     secretKey: "12345678"
//!     defaultTopicPerm: DENY
//!     defaultGroupPerm: SUB
//!     topicPerms: ["Orders=PUB|SUB"]
//! "#).unwrap();
//! assert_eq!(acl.accounts[0].access_key, "RocketMQ");
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;

use crate::acl::{self, ACCESS_KEY};
use crate::protocol::body::HeartbeatData;
use crate::protocol::codes::request_code;
use crate::protocol::RemotingCommand;

use super::RETRY_PREFIX;

/// The trace topic: a request that publishes to it is let through (Java's exemption for
/// message traces).
pub const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";

/// Permission bits, as Java's `Permission`.
pub mod perm {
    /// Explicitly denied: overrides every other bit.
    pub const DENY: u8 = 1;
    /// Either PUB or SUB suffices.
    pub const ANY: u8 = 2;
    /// Publish.
    pub const PUB: u8 = 4;
    /// Subscribe.
    pub const SUB: u8 = 8;
}

/// Request codes only an admin account may send (Java 5.3's `Permission.ADMIN_CODE`).
pub const ADMIN_CODES: [i32; 9] = [17, 25, 215, 200, 207, 513, 50, 51, 52];

/// Why an ACL file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AclConfigError {
    /// The file could not be read.
    #[error("cannot read ACL file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not YAML of the plain_acl.yml shape.
    #[error("invalid ACL file: {0}")]
    Yaml(String),
    /// A value is not allowed (which account, which field, what is wrong).
    #[error("invalid ACL file: {0}")]
    Invalid(String),
}

/// A `whiteRemoteAddress` pattern (Java's `RemoteAddressStrategyFactory`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressPattern {
    /// Blank: matches nothing.
    Nothing,
    /// `*` or `*.*.*.*`: matches every address.
    Everything,
    /// Alternatives: `a.b.c.{1,2}` or `1.1.1.1,2.2.2.2`.
    AnyOf(Vec<AddressPattern>),
    /// Four IPv4 segments, each an inclusive range (`10.*.0-10.5`).
    Ipv4([(u8, u8); 4]),
    /// Any other address, compared as text (IPv6).
    Exact(String),
}

impl AddressPattern {
    /// Parses a pattern; an IPv4-looking pattern with a bad segment is an error.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(AddressPattern::Nothing);
        }
        if text == "*" || text == "*.*.*.*" {
            return Ok(AddressPattern::Everything);
        }
        if let (Some(open), true) = (text.find('{'), text.ends_with('}')) {
            let prefix = &text[..open];
            let inner = &text[open + 1..text.len() - 1];
            let alternatives = inner
                .split(',')
                .map(|last| AddressPattern::parse(&format!("{prefix}{}", last.trim())))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(AddressPattern::AnyOf(alternatives));
        }
        if text.contains(',') {
            let alternatives = text
                .split(',')
                .map(AddressPattern::parse)
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(AddressPattern::AnyOf(alternatives));
        }
        let segments: Vec<&str> = text.split('.').collect();
        if segments.len() == 4 && !text.contains(':') {
            let mut ranges = [(0u8, 255u8); 4];
            for (slot, segment) in ranges.iter_mut().zip(&segments) {
                *slot = parse_segment(segment)
                    .ok_or_else(|| format!("bad address pattern {text:?} (segment {segment:?})"))?;
            }
            return Ok(AddressPattern::Ipv4(ranges));
        }
        Ok(AddressPattern::Exact(text.to_owned()))
    }

    /// Whether `addr` matches.
    pub fn matches(&self, addr: IpAddr) -> bool {
        match self {
            AddressPattern::Nothing => false,
            AddressPattern::Everything => true,
            AddressPattern::AnyOf(alternatives) => alternatives.iter().any(|p| p.matches(addr)),
            AddressPattern::Ipv4(ranges) => match addr {
                IpAddr::V4(v4) => v4
                    .octets()
                    .iter()
                    .zip(ranges)
                    .all(|(octet, (low, high))| (low..=high).contains(&octet)),
                IpAddr::V6(v6) => v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| self.matches(IpAddr::V4(v4))),
            },
            AddressPattern::Exact(text) => text.parse::<IpAddr>().is_ok_and(|ip| ip == addr),
        }
    }
}

fn parse_segment(segment: &str) -> Option<(u8, u8)> {
    if segment == "*" {
        return Some((0, 255));
    }
    if let Some((low, high)) = segment.split_once('-') {
        let (low, high) = (low.parse::<u8>().ok()?, high.parse::<u8>().ok()?);
        return (low <= high).then_some((low, high));
    }
    segment.parse::<u8>().ok().map(|v| (v, v))
}

/// Parses a permission text: `PUB`, `SUB`, `PUB|SUB` (either order), `DENY`.
pub fn parse_perm(text: &str) -> Option<u8> {
    match text.trim() {
        "PUB" => Some(perm::PUB),
        "SUB" => Some(perm::SUB),
        "PUB|SUB" | "SUB|PUB" => Some(perm::PUB | perm::SUB),
        "DENY" => Some(perm::DENY),
        _ => None,
    }
}

/// Java's `Permission.checkPermission`: whether `owned` grants `needed`.
pub fn check_permission(needed: u8, owned: u8) -> bool {
    if owned & perm::DENY != 0 {
        return false;
    }
    if needed & perm::ANY != 0 {
        return owned & (perm::PUB | perm::SUB) != 0;
    }
    needed & owned != 0
}

/// One account of the ACL file.
#[derive(Clone, PartialEq, Eq)]
pub struct AclAccount {
    /// `accessKey`.
    pub access_key: String,
    /// `secretKey` (never shown by `Debug`).
    pub secret_key: String,
    /// `whiteRemoteAddress`: requests from a matching address skip the signature and
    /// permission checks.
    pub white_remote_address: AddressPattern,
    /// `admin`: every permission, and the admin-only request codes.
    pub admin: bool,
    /// `defaultTopicPerm` (DENY when absent).
    pub default_topic_perm: u8,
    /// `defaultGroupPerm` (DENY when absent).
    pub default_group_perm: u8,
    /// `topicPerms`, by topic.
    pub topic_perms: BTreeMap<String, u8>,
    /// `groupPerms`, by group (a permission on the group's retry topic).
    pub group_perms: BTreeMap<String, u8>,
}

impl fmt::Debug for AclAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AclAccount")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field("white_remote_address", &self.white_remote_address)
            .field("admin", &self.admin)
            .field("default_topic_perm", &self.default_topic_perm)
            .field("default_group_perm", &self.default_group_perm)
            .field("topic_perms", &self.topic_perms)
            .field("group_perms", &self.group_perms)
            .finish()
    }
}

/// The accounts and white addresses of a Java broker's `plain_acl.yml`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AclConfig {
    /// `globalWhiteRemoteAddresses`: requests from these addresses are not checked at all.
    pub global_white_remote_addresses: Vec<AddressPattern>,
    /// `accounts`.
    pub accounts: Vec<AclAccount>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFile {
    #[serde(default)]
    global_white_remote_addresses: Option<Vec<String>>,
    #[serde(default)]
    accounts: Option<Vec<RawAccount>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawAccount {
    access_key: Option<String>,
    secret_key: Option<String>,
    white_remote_address: Option<String>,
    #[serde(default)]
    admin: Option<bool>,
    default_topic_perm: Option<String>,
    default_group_perm: Option<String>,
    topic_perms: Option<Vec<String>>,
    group_perms: Option<Vec<String>>,
}

impl AclConfig {
    /// Reads a `plain_acl.yml`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, AclConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| AclConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_yaml_str(&text)
    }

    /// Parses the text of a `plain_acl.yml`. As the Java broker: access and secret keys of at
    /// least 7 characters, access keys unique. Stricter than Java, a permission text other
    /// than `PUB`, `SUB`, `PUB|SUB`, `DENY`, an entry without `=`, or an unknown account field
    /// is an error (Java reads them as DENY or ignores them).
    pub fn from_yaml_str(text: &str) -> Result<Self, AclConfigError> {
        let raw: Option<RawFile> =
            serde_norway::from_str(text).map_err(|e| AclConfigError::Yaml(e.to_string()))?;
        let raw = raw.unwrap_or(RawFile {
            global_white_remote_addresses: None,
            accounts: None,
        });
        let global_white_remote_addresses = raw
            .global_white_remote_addresses
            .unwrap_or_default()
            .iter()
            .map(|p| AddressPattern::parse(p).map_err(AclConfigError::Invalid))
            .collect::<Result<Vec<_>, _>>()?;
        let mut accounts: Vec<AclAccount> = Vec::new();
        for (index, account) in raw.accounts.unwrap_or_default().into_iter().enumerate() {
            let account = account_of(index, account)?;
            if accounts.iter().any(|a| a.access_key == account.access_key) {
                return Err(AclConfigError::Invalid(format!(
                    "accessKey={} is listed twice",
                    account.access_key
                )));
            }
            accounts.push(account);
        }
        Ok(AclConfig {
            global_white_remote_addresses,
            accounts,
        })
    }

    /// The account of `access_key`.
    pub fn account(&self, access_key: &str) -> Option<&AclAccount> {
        self.accounts.iter().find(|a| a.access_key == access_key)
    }

    /// Checks a request received from `remote` (the connection's IP): `Err` with the remark of
    /// the NO_PERMISSION answer when it is refused.
    pub fn check(&self, remote: IpAddr, request: &RemotingCommand) -> Result<(), String> {
        if self
            .global_white_remote_addresses
            .iter()
            .any(|p| p.matches(remote))
        {
            return Ok(());
        }
        let Some(access_key) = request.ext(ACCESS_KEY).filter(|k| !k.is_empty()) else {
            return Err(format!(
                "no AccessKey in the request (code {}): this broker requires signed requests",
                request.code
            ));
        };
        let Some(account) = self.account(access_key) else {
            return Err(format!("unknown accessKey={access_key}"));
        };
        if account.white_remote_address.matches(remote) {
            return Ok(());
        }
        if !acl::verify(request, &account.secret_key) {
            return Err(format!("signature check failed for accessKey={access_key}"));
        }
        let needed = required_permissions(request);
        if needed
            .iter()
            .any(|(r, p)| *p == perm::PUB && *r == Resource::Topic(TRACE_TOPIC.to_owned()))
        {
            return Ok(());
        }
        if account.admin {
            return Ok(());
        }
        if ADMIN_CODES.contains(&request.code) {
            return Err(format!(
                "accessKey={access_key} needs admin permission for request code={}",
                request.code
            ));
        }
        for (resource, wanted) in needed {
            let owned = match &resource {
                Resource::Topic(topic) => account
                    .topic_perms
                    .get(topic)
                    .copied()
                    .unwrap_or(account.default_topic_perm),
                Resource::Group(group) => account
                    .group_perms
                    .get(group)
                    .copied()
                    .unwrap_or(account.default_group_perm),
            };
            if !check_permission(wanted, owned) {
                return Err(format!(
                    "accessKey={access_key} has no {} permission on {resource}",
                    perm_name(wanted)
                ));
            }
        }
        Ok(())
    }
}

fn account_of(index: usize, raw: RawAccount) -> Result<AclAccount, AclConfigError> {
    let access_key = raw.access_key.unwrap_or_default();
    let who = if access_key.is_empty() {
        format!("account {}", index + 1)
    } else {
        format!("accessKey={access_key}")
    };
    let invalid = |what: String| AclConfigError::Invalid(format!("{who}: {what}"));
    if access_key.chars().count() <= 6 {
        return Err(invalid(
            "accessKey must be longer than 6 characters".to_owned(),
        ));
    }
    let secret_key = raw.secret_key.unwrap_or_default();
    if secret_key.chars().count() <= 6 {
        return Err(invalid(
            "secretKey must be longer than 6 characters".to_owned(),
        ));
    }
    let default_perm = |field: &str, value: Option<String>| match value {
        None => Ok(perm::DENY),
        Some(text) => parse_perm(&text)
            .ok_or_else(|| invalid(format!("{field} {text:?} is not PUB, SUB, PUB|SUB or DENY"))),
    };
    let entries = |field: &str, values: Option<Vec<String>>| {
        let mut perms = BTreeMap::new();
        for entry in values.unwrap_or_default() {
            let Some((name, text)) = entry.split_once('=') else {
                return Err(invalid(format!("{field} entry {entry:?} is not NAME=PERM")));
            };
            let perm = parse_perm(text).ok_or_else(|| {
                invalid(format!(
                    "{field} entry {entry:?}: {text:?} is not PUB, SUB, PUB|SUB or DENY"
                ))
            })?;
            perms.insert(name.trim().to_owned(), perm);
        }
        Ok(perms)
    };
    let white_remote_address =
        AddressPattern::parse(raw.white_remote_address.as_deref().unwrap_or_default())
            .map_err(&invalid)?;
    Ok(AclAccount {
        default_topic_perm: default_perm("defaultTopicPerm", raw.default_topic_perm)?,
        default_group_perm: default_perm("defaultGroupPerm", raw.default_group_perm)?,
        topic_perms: entries("topicPerms", raw.topic_perms)?,
        group_perms: entries("groupPerms", raw.group_perms)?,
        white_remote_address,
        admin: raw.admin.unwrap_or(false),
        access_key,
        secret_key,
    })
}

fn perm_name(perm: u8) -> &'static str {
    match perm {
        perm::PUB => "PUB",
        perm::SUB => "SUB",
        _ => "PUB or SUB",
    }
}

/// What a request touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// A topic.
    Topic(String),
    /// A consumer group (checked as its retry topic `%RETRY%<group>`).
    Group(String),
}

impl Resource {
    /// A topic, or the group of a retry topic.
    fn of_topic(topic: &str) -> Self {
        match topic.strip_prefix(RETRY_PREFIX) {
            Some(group) => Resource::Group(group.to_owned()),
            None => Resource::Topic(topic.to_owned()),
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resource::Topic(topic) => write!(f, "topic:{topic}"),
            Resource::Group(group) => write!(f, "group:{group}"),
        }
    }
}

/// The resources a request touches and the permission each needs (Java 5.3's
/// `PlainAccessResource.parse`): sends PUB on the topic (a send to a retry topic SUB on the
/// group), pulls SUB on topic and group, heartbeats SUB on each consumer group and subscribed
/// topic, send-backs, unregistering, member lists and offset commits SUB on the group (commits
/// also on the topic). Codes not listed need only a valid signature.
pub fn required_permissions(request: &RemotingCommand) -> Vec<(Resource, u8)> {
    use request_code as rc;
    let ext = |key: &str| request.ext(key).filter(|v| !v.is_empty());
    let group = |key: &str| ext(key).map(|g| (Resource::Group(g.to_owned()), perm::SUB));
    let send = |key: &str| {
        ext(key).map(|topic| {
            let resource = Resource::of_topic(topic);
            let wanted = match resource {
                Resource::Group(_) => perm::SUB,
                Resource::Topic(_) => perm::PUB,
            };
            (resource, wanted)
        })
    };
    let topic_sub = |key: &str| ext(key).map(|t| (Resource::of_topic(t), perm::SUB));
    match request.code {
        rc::SEND_MESSAGE => send("topic").into_iter().collect(),
        rc::SEND_MESSAGE_V2 | rc::SEND_BATCH_MESSAGE => send("b").into_iter().collect(),
        rc::CONSUMER_SEND_MSG_BACK => group("group").into_iter().collect(),
        rc::PULL_MESSAGE | rc::LITE_PULL_MESSAGE => topic_sub("topic")
            .into_iter()
            .chain(group("consumerGroup"))
            .collect(),
        rc::QUERY_MESSAGE => topic_sub("topic").into_iter().collect(),
        rc::HEART_BEAT => {
            let Some(data) = request
                .body
                .as_deref()
                .and_then(|body| crate::protocol::body::decode_json::<HeartbeatData>(body).ok())
            else {
                return Vec::new();
            };
            let mut needed = Vec::new();
            for consumer in &data.consumer_data_set {
                needed.push((Resource::Group(consumer.group_name.clone()), perm::SUB));
                for subscription in &consumer.subscription_data_set {
                    needed.push((Resource::of_topic(&subscription.topic), perm::SUB));
                }
            }
            needed
        }
        rc::UNREGISTER_CLIENT | rc::GET_CONSUMER_LIST_BY_GROUP => {
            group("consumerGroup").into_iter().collect()
        }
        rc::UPDATE_CONSUMER_OFFSET => group("consumerGroup")
            .into_iter()
            .chain(topic_sub("topic"))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{sign, Credentials};
    use crate::protocol::body::{encode_json, ConsumerData, SubscriptionData};
    use std::net::Ipv4Addr;

    const FILE: &str = r#"
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.{1,2}
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
"#;

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn acl() -> AclConfig {
        AclConfig::from_yaml_str(FILE).expect("the Java sample parses")
    }

    fn signed(mut request: RemotingCommand, ak: &str, sk: &str) -> RemotingCommand {
        sign(&mut request, &Credentials::new(ak, sk));
        request
    }

    fn send(topic: &str) -> RemotingCommand {
        RemotingCommand::request(request_code::SEND_MESSAGE_V2)
            .with_ext("a", "P")
            .with_ext("b", topic)
            .with_body(bytes::Bytes::from_static(b"body"))
    }

    fn pull(topic: &str, group: &str) -> RemotingCommand {
        RemotingCommand::request(request_code::PULL_MESSAGE)
            .with_ext("topic", topic)
            .with_ext("consumerGroup", group)
            .with_ext("queueId", "0")
    }

    #[test]
    fn the_java_sample_file_parses_with_numbers_as_keys_and_blank_addresses() {
        let acl = acl();
        assert_eq!(acl.accounts.len(), 2);
        let first = &acl.accounts[0];
        assert_eq!(first.secret_key, "12345678");
        assert_eq!(first.white_remote_address, AddressPattern::Nothing);
        assert_eq!(first.default_topic_perm, perm::DENY);
        assert_eq!(first.default_group_perm, perm::SUB);
        assert_eq!(
            first.topic_perms.get("topicB"),
            Some(&(perm::PUB | perm::SUB))
        );
        assert_eq!(first.group_perms.get("groupA"), Some(&perm::DENY));
        assert!(acl.accounts[1].admin);
        assert!(!format!("{acl:?}").contains("12345678"));
        assert_eq!(AclConfig::from_yaml_str("").unwrap(), AclConfig::default());
    }

    #[test]
    fn bad_files_are_refused_with_what_is_wrong() {
        let cases = [
            ("accounts: [", "invalid ACL file"),
            ("accounts:\n  - accessKey: short\n    secretKey: 12345678\n", "accessKey=short: accessKey must be longer than 6 characters"),
            ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 123\n", "accessKey=RocketMQ: secretKey must be longer"),
            ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    topicPerms: [\"T=PUBB\"]\n", "\"PUBB\" is not PUB, SUB"),
            ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    topicPerms: [\"T\"]\n", "is not NAME=PERM"),
            ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    defaultTopicPerm: ALL\n", "defaultTopicPerm \"ALL\""),
            ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    topicPerm: [\"T=PUB\"]\n", "unknown field `topicPerm`"),
            ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n  - accessKey: RocketMQ\n    secretKey: 87654321\n", "accessKey=RocketMQ is listed twice"),
            ("globalWhiteRemoteAddresses: [\"10.300.*.*\"]\n", "bad address pattern"),
        ];
        for (text, expected) in cases {
            match AclConfig::from_yaml_str(text) {
                Err(e) => assert!(e.to_string().contains(expected), "{text:?}: {e}"),
                Ok(acl) => panic!("{text:?} parsed: {acl:?}"),
            }
        }
        let missing = AclConfig::from_file("/nonexistent/plain_acl.yml").unwrap_err();
        assert!(
            missing.to_string().contains("/nonexistent/plain_acl.yml"),
            "{missing}"
        );
    }

    #[test]
    fn address_patterns_match_as_java_does() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let p = |s: &str| AddressPattern::parse(s).unwrap();
        assert!(p("*").matches(ip("1.2.3.4")));
        assert!(p("*.*.*.*").matches(ip("::1")));
        assert!(!p("").matches(ip("127.0.0.1")));
        assert!(p("10.10.103.*").matches(ip("10.10.103.7")));
        assert!(!p("10.10.103.*").matches(ip("10.10.104.7")));
        assert!(p("192.168.0.{1,2}").matches(ip("192.168.0.2")));
        assert!(!p("192.168.0.{1,2}").matches(ip("192.168.0.3")));
        assert!(p("1.1.1.1,2.2.2.2").matches(ip("2.2.2.2")));
        assert!(p("10.1-3.0.0").matches(ip("10.2.0.0")));
        assert!(!p("10.1-3.0.0").matches(ip("10.4.0.0")));
        assert!(p("::1").matches(ip("::1")));
        assert!(p("127.0.0.1").matches(ip("::ffff:127.0.0.1")));
    }

    #[test]
    fn java_permission_rules() {
        assert!(check_permission(perm::PUB, perm::PUB | perm::SUB));
        assert!(!check_permission(perm::PUB, perm::SUB));
        assert!(!check_permission(perm::SUB, perm::DENY | perm::SUB));
        assert!(check_permission(perm::ANY, perm::SUB));
        assert!(!check_permission(perm::ANY, perm::DENY));
        assert_eq!(parse_perm("SUB|PUB"), Some(perm::PUB | perm::SUB));
        assert_eq!(parse_perm("ALL"), None);
    }

    #[test]
    fn authentication_names_what_is_wrong() {
        let acl = acl();
        assert_eq!(
            acl.check(LOCAL, &send("topicB")),
            Err(
                "no AccessKey in the request (code 310): this broker requires signed requests"
                    .into()
            )
        );
        assert_eq!(
            acl.check(LOCAL, &signed(send("topicB"), "Nobody12", "12345678")),
            Err("unknown accessKey=Nobody12".into())
        );
        assert_eq!(
            acl.check(LOCAL, &signed(send("topicB"), "RocketMQ", "wrong-secret")),
            Err("signature check failed for accessKey=RocketMQ".into())
        );
        let mut tampered = signed(send("topicB"), "RocketMQ", "12345678");
        tampered.body = Some(bytes::Bytes::from_static(b"other"));
        assert!(acl.check(LOCAL, &tampered).is_err());
        assert_eq!(
            acl.check(LOCAL, &signed(send("topicB"), "RocketMQ", "12345678")),
            Ok(())
        );
    }

    #[test]
    fn white_addresses_skip_the_checks() {
        let acl = acl();
        let unsigned = send("topicA");
        assert_eq!(acl.check("10.10.103.9".parse().unwrap(), &unsigned), Ok(()));
        // An account's own white address: no signature needed, but the access key is.
        let claimed = unsigned.clone().with_ext(ACCESS_KEY, "rocketmq2");
        assert_eq!(acl.check("192.168.1.20".parse().unwrap(), &claimed), Ok(()));
        assert!(acl
            .check("192.168.2.20".parse().unwrap(), &claimed)
            .is_err());
    }

    #[test]
    fn permissions_follow_explicit_entries_then_defaults() {
        let acl = acl();
        let check = |r: RemotingCommand| acl.check(LOCAL, &signed(r, "RocketMQ", "12345678"));
        assert_eq!(check(send("topicB")), Ok(()));
        assert_eq!(
            check(send("topicC")),
            Err("accessKey=RocketMQ has no PUB permission on topic:topicC".into())
        );
        assert_eq!(
            check(send("topicA")),
            Err("accessKey=RocketMQ has no PUB permission on topic:topicA".into())
        );
        assert_eq!(
            check(send("other")),
            Err("accessKey=RocketMQ has no PUB permission on topic:other".into())
        );
        // A send to a retry topic is a subscription of the group.
        assert_eq!(check(send("%RETRY%groupC")), Ok(()));
        assert_eq!(
            check(send("%RETRY%groupA")),
            Err("accessKey=RocketMQ has no SUB permission on group:groupA".into())
        );
        assert_eq!(check(pull("topicC", "groupC")), Ok(()));
        assert_eq!(
            check(pull("topicC", "anyGroup")),
            Ok(()),
            "defaultGroupPerm SUB"
        );
        assert_eq!(
            check(pull("topicC", "groupA")),
            Err("accessKey=RocketMQ has no SUB permission on group:groupA".into())
        );
        assert_eq!(
            check(pull("other", "groupC")),
            Err("accessKey=RocketMQ has no SUB permission on topic:other".into())
        );
        let back = RemotingCommand::request(request_code::CONSUMER_SEND_MSG_BACK)
            .with_ext("group", "groupA")
            .with_ext("originTopic", "topicC");
        assert_eq!(
            check(back),
            Err("accessKey=RocketMQ has no SUB permission on group:groupA".into())
        );
        let commit = RemotingCommand::request(request_code::UPDATE_CONSUMER_OFFSET)
            .with_ext("consumerGroup", "groupC")
            .with_ext("topic", "topicA");
        assert_eq!(
            check(commit),
            Err("accessKey=RocketMQ has no SUB permission on topic:topicA".into())
        );
        // Codes without resources need only the signature.
        let max =
            RemotingCommand::request(request_code::GET_MAX_OFFSET).with_ext("topic", "topicA");
        assert_eq!(check(max), Ok(()));
        let lock = RemotingCommand::request(request_code::LOCK_BATCH_MQ);
        assert_eq!(check(lock), Ok(()));
    }

    #[test]
    fn heartbeats_need_sub_on_every_group_and_subscribed_topic() {
        let acl = acl();
        let heartbeat = |group: &str, topics: &[&str]| {
            let data = HeartbeatData {
                client_id: "c".into(),
                consumer_data_set: vec![ConsumerData {
                    group_name: group.into(),
                    subscription_data_set: topics
                        .iter()
                        .map(|t| SubscriptionData {
                            topic: (*t).into(),
                            sub_string: "*".into(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            };
            let body = encode_json(&data);
            signed(
                RemotingCommand::request(request_code::HEART_BEAT).with_body(body),
                "RocketMQ",
                "12345678",
            )
        };
        assert_eq!(
            acl.check(LOCAL, &heartbeat("groupC", &["topicC", "%RETRY%groupC"])),
            Ok(())
        );
        assert_eq!(
            acl.check(LOCAL, &heartbeat("groupC", &["topicC", "topicA"])),
            Err("accessKey=RocketMQ has no SUB permission on topic:topicA".into())
        );
        assert_eq!(
            acl.check(LOCAL, &heartbeat("groupA", &["topicC"])),
            Err("accessKey=RocketMQ has no SUB permission on group:groupA".into())
        );
    }

    #[test]
    fn admin_codes_need_an_admin_account_and_admins_may_do_everything() {
        let acl = acl();
        let create =
            RemotingCommand::request(request_code::UPDATE_AND_CREATE_TOPIC).with_ext("topic", "T");
        assert_eq!(
            acl.check(LOCAL, &signed(create.clone(), "RocketMQ", "12345678")),
            Err("accessKey=RocketMQ needs admin permission for request code=17".into())
        );
        assert_eq!(
            acl.check(LOCAL, &signed(create, "rocketmq2", "12345678")),
            Ok(())
        );
        assert_eq!(
            acl.check(LOCAL, &signed(send("topicA"), "rocketmq2", "12345678")),
            Ok(())
        );
        // The trace topic is exempt.
        assert_eq!(
            acl.check(LOCAL, &signed(send(TRACE_TOPIC), "RocketMQ", "12345678")),
            Ok(())
        );
    }
}
