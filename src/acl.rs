//! ACL request signing: the access key, secret key and signature of RocketMQ's ACL 1.0 — the
//! signature every broker with authentication checks (Java `AclClientRPCHook`, the Java 5 and
//! rocketmq-rust authentication, the embedded broker's ACL mode).
//!
//! A signed request carries the ext fields `AccessKey`, `SecurityToken` (when there is one)
//! and `Signature`: the standard base64 of HmacSHA1, keyed with the secret key, of the values of
//! every other ext field in key order, concatenated, followed by the body bytes.
//!
//! ```
//! use rocketmq_actor::acl::{sign, Credentials};
//! use rocketmq_actor::protocol::RemotingCommand;
//!
//! let mut request = RemotingCommand::request(10)
//!     .with_ext("a", "1")
//!     .with_ext("topic", "T")
//!     .with_body(bytes::Bytes::from_static(b"xyz"));
//! sign(&mut request, &Credentials::new("ak", "sk"));
//! assert_eq!(request.ext("AccessKey"), Some("ak"));
//! assert_eq!(request.ext("Signature"), Some("LYVz3MYh0Hczk8/haDL6fnLn0Gs="));
//! ```

use base64::Engine as _;
use std::fmt;

use hmac::{Hmac, Mac};

use crate::protocol::command::{ExtFields, SerializeType};
use crate::protocol::RemotingCommand;

/// The ext field naming the access key.
pub const ACCESS_KEY: &str = "AccessKey";
/// The ext field holding the signature.
pub const SIGNATURE: &str = "Signature";
/// The ext field holding the security token (STS credentials).
pub const SECURITY_TOKEN: &str = "SecurityToken";

type HmacSha1 = Hmac<sha1::Sha1>;

/// An account of a cluster with ACL: access key, secret key and, for temporary credentials, a
/// security token.
///
/// The secret never leaves this value except as a signature: `Debug` and `Display` show the
/// access key only, so a configuration printed or logged does not leak it.
///
/// ```
/// use rocketmq_actor::acl::Credentials;
/// let credentials = Credentials::new("RocketMQ", "12345678");
/// assert_eq!(credentials.to_string(), "accessKey=RocketMQ");
/// assert!(!format!("{credentials:?}").contains("12345678"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key (`AccessKey` on the wire).
    pub access_key: String,
    /// The secret key: signs requests, never sent.
    pub secret_key: String,
    /// A security token sent with every request (`SecurityToken`), if the account has one.
    pub security_token: Option<String>,
}

impl Credentials {
    /// Credentials without a security token.
    pub fn new(access_key: impl Into<String>, secret_key: impl Into<String>) -> Self {
        Credentials {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            security_token: None,
        }
    }

    /// The same credentials with a security token.
    pub fn with_security_token(mut self, token: impl Into<String>) -> Self {
        self.security_token = Some(token.into());
        self
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field(
                "security_token",
                &self.security_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl fmt::Display for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "accessKey={}", self.access_key)
    }
}

/// Whether an ext field reaches the peer: a binary (ROCKETMQ) header does not carry empty keys
/// (see [`RemotingCommand::encode`]), so they must not be signed either. (Empty values add
/// nothing to the signed text whatever the header.)
fn on_the_wire(serialize_type: SerializeType, key: &str) -> bool {
    !(serialize_type == SerializeType::RocketMq && key.is_empty())
}

/// The signature of `ext` (every field but `Signature`, values in key order) and `body` with
/// `secret`: standard base64 of HmacSHA1.
///
/// ```
/// use rocketmq_actor::acl::signature;
/// use rocketmq_actor::protocol::command::{ExtFields, SerializeType};
/// let ext: ExtFields = [("AccessKey", "ak"), ("a", "1"), ("topic", "T")]
///     .into_iter()
///     .map(|(k, v)| (k.to_owned(), v.to_owned()))
///     .collect();
/// assert_eq!(signature("sk", &ext, b"xyz", SerializeType::Json), "LYVz3MYh0Hczk8/haDL6fnLn0Gs=");
/// ```
pub fn signature(
    secret: &str,
    ext: &ExtFields,
    body: &[u8],
    serialize_type: SerializeType,
) -> String {
    // Standard base64 (`+/`, `=` padding), as commons-codec's `encodeBase64` writes it.
    base64::engine::general_purpose::STANDARD.encode(raw_signature(
        secret,
        ext,
        body,
        serialize_type,
    ))
}

fn raw_signature(
    secret: &str,
    ext: &ExtFields,
    body: &[u8],
    serialize_type: SerializeType,
) -> Vec<u8> {
    // HMAC takes a key of any length: this cannot fail.
    let Ok(mut mac) = HmacSha1::new_from_slice(secret.as_bytes()) else {
        return Vec::new();
    };
    // `ExtFields` iterates in byte order of the keys, which is Java's `TreeMap` order for
    // the ASCII keys of the protocol.
    for (key, value) in ext {
        if key != SIGNATURE && on_the_wire(serialize_type, key) {
            mac.update(value.as_bytes());
        }
    }
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

/// Signs `request` with `credentials`: adds `AccessKey` (and `SecurityToken`), then
/// `Signature` over every ext field and the body. Call it last, once every other field is set:
/// a field added afterwards breaks the signature. Signing again replaces the signature.
pub fn sign(request: &mut RemotingCommand, credentials: &Credentials) {
    let serialize_type = request.serialize_type;
    let body = request.body.clone();
    let ext = request.ext_fields.get_or_insert_with(ExtFields::new);
    ext.insert_str(ACCESS_KEY, &credentials.access_key);
    if let Some(token) = &credentials.security_token {
        ext.insert_str(SECURITY_TOKEN, token);
    }
    let signed = signature(
        &credentials.secret_key,
        ext,
        body.as_deref().unwrap_or_default(),
        serialize_type,
    );
    ext.insert_str(SIGNATURE, &signed);
}

/// Whether `request` carries a valid signature for `secret` (what a broker checks), compared
/// in constant time.
pub fn verify(request: &RemotingCommand, secret: &str) -> bool {
    let Some(given) = request.ext(SIGNATURE) else {
        return false;
    };
    let expected = signature(
        secret,
        request.ext_fields_or_empty(),
        request.body.as_deref().unwrap_or_default(),
        request.serialize_type,
    );
    let (given, expected) = (given.as_bytes(), expected.as_bytes());
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use proptest::prelude::*;

    fn spec_request() -> RemotingCommand {
        RemotingCommand::request(10)
            .with_ext("a", "1")
            .with_ext("topic", "T")
            .with_body(Bytes::from_static(b"xyz"))
    }

    #[test]
    fn the_worked_example_of_the_java_client_signs_alike() {
        let mut request = spec_request();
        sign(&mut request, &Credentials::new("ak", "sk"));
        assert_eq!(request.ext(ACCESS_KEY), Some("ak"));
        assert_eq!(request.ext(SIGNATURE), Some("LYVz3MYh0Hczk8/haDL6fnLn0Gs="));
        assert_eq!(request.ext(SECURITY_TOKEN), None);
        assert_eq!(request.ext_fields_or_empty().len(), 4);
    }

    #[test]
    fn a_security_token_is_sent_and_signed() {
        let mut request = spec_request();
        sign(
            &mut request,
            &Credentials::new("ak", "sk").with_security_token("tok"),
        );
        assert_eq!(request.ext(SECURITY_TOKEN), Some("tok"));
        assert_eq!(request.ext(SIGNATURE), Some("BpjoIOi4DMiQ+Gf4HH2dSMvQgXE="));
    }

    #[test]
    fn an_empty_body_adds_nothing_and_signing_twice_is_idempotent() {
        let mut with_empty_body = spec_request();
        with_empty_body.body = Some(Bytes::new());
        let mut without_body = spec_request();
        without_body.body = None;
        let credentials = Credentials::new("ak", "sk");
        sign(&mut with_empty_body, &credentials);
        sign(&mut without_body, &credentials);
        assert_eq!(with_empty_body.ext(SIGNATURE), without_body.ext(SIGNATURE));
        let first = without_body.ext(SIGNATURE).map(str::to_owned);
        sign(&mut without_body, &credentials);
        assert_eq!(without_body.ext(SIGNATURE).map(str::to_owned), first);
        assert!(verify(&without_body, "sk"));
    }

    #[test]
    fn verification_fails_for_another_secret_or_a_changed_field_or_body() {
        let mut request = spec_request();
        sign(&mut request, &Credentials::new("ak", "sk"));
        assert!(verify(&request, "sk"));
        assert!(!verify(&request, "sk2"));
        let mut changed = request.clone().with_ext("topic", "U");
        assert!(!verify(&changed, "sk"));
        changed = request.clone().with_body(Bytes::from_static(b"xyZ"));
        assert!(!verify(&changed, "sk"));
        let mut unsigned = spec_request();
        assert!(!verify(&unsigned, "sk"));
        unsigned = unsigned.with_ext(SIGNATURE, "not base64!");
        assert!(!verify(&unsigned, "sk"));
    }

    #[test]
    fn the_secret_is_neither_debugged_nor_displayed() {
        let credentials = Credentials::new("ak", "s3cr3t-key").with_security_token("t0k3n");
        let shown = format!("{credentials:?} {credentials} {credentials:#?}");
        assert!(!shown.contains("s3cr3t-key"), "{shown}");
        assert!(!shown.contains("t0k3n"), "{shown}");
        assert!(shown.contains("ak"));
    }

    fn wire_round_trip(command: &RemotingCommand) -> RemotingCommand {
        let mut frame = BytesMut::new();
        command.encode(&mut frame).expect("encodes");
        RemotingCommand::decode(frame.freeze().slice(4..)).expect("decodes")
    }

    proptest! {
        /// What the broker decodes verifies, in both header encodings, whatever the fields
        /// (empty keys and values included: a binary header drops them).
        #[test]
        fn a_signed_request_verifies_after_the_wire(
            fields in proptest::collection::btree_map("[a-zA-Z%]{0,6}", "[ -~]{0,8}", 0..8),
            body in proptest::collection::vec(any::<u8>(), 0..32),
            binary in any::<bool>(),
        ) {
            let mut request = RemotingCommand::request(11)
                .with_body(Bytes::from(body))
                .with_serialize_type(if binary { SerializeType::RocketMq } else { SerializeType::Json });
            for (key, value) in fields {
                request = request.with_ext(key, value);
            }
            sign(&mut request, &Credentials::new("ak", "sk"));
            let received = wire_round_trip(&request);
            prop_assert!(verify(&received, "sk"));
            prop_assert!(!verify(&received, "other"));
        }
    }
}
