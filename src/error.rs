//! Error types shared by the whole crate.

use std::time::Duration;

/// A problem with bytes received from (or about to be sent to) a peer.
///
/// Every decoder in the crate returns this instead of panicking; a connection that meets one
/// closes itself and logs it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A frame announced a length above the limit (16 MiB by default).
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    FrameTooLarge {
        /// The announced length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The frame layout itself is broken (negative length, header longer than the frame…).
    #[error("invalid frame: {0}")]
    InvalidFrame(String),
    /// The RemotingCommand header (JSON or binary) could not be decoded.
    #[error("invalid command header: {0}")]
    InvalidHeader(String),
    /// A typed header lacks a field the protocol requires.
    #[error("missing header field `{0}`")]
    MissingField(&'static str),
    /// A typed header field is present but does not parse.
    #[error("invalid header field `{field}`: {value:?}")]
    InvalidField {
        /// The field's wire name.
        field: &'static str,
        /// The value received.
        value: String,
    },
    /// A JSON body did not parse into the expected type.
    #[error("invalid JSON body: {0}")]
    Json(String),
    /// A stored message record is malformed.
    #[error("invalid message record: {0}")]
    InvalidMessage(String),
    /// A compressed message body could not be decompressed.
    #[error("cannot decompress message body: {0}")]
    Decompress(String),
    /// An I/O error from the transport under the codec.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A RocketMQ response code, shown with its name (`SYSTEM_ERROR (1)`).
///
/// ```
/// use rocketmq_actor::error::ResponseCode;
/// use rocketmq_actor::protocol::response_code;
/// let code = ResponseCode(response_code::PULL_NOT_FOUND);
/// assert_eq!(code.to_string(), "PULL_NOT_FOUND (19)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResponseCode(pub i32);

impl ResponseCode {
    /// The protocol name of the code (`"UNKNOWN"` when not listed).
    pub fn name(self) -> &'static str {
        crate::protocol::codes::response_code_name(self.0)
    }
}

impl std::fmt::Display for ResponseCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// A RocketMQ request code, shown with its name (`PULL_MESSAGE (11)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestCode(pub i32);

impl RequestCode {
    /// The protocol name of the code (`"UNKNOWN"` when not listed).
    pub fn name(self) -> &'static str {
        crate::protocol::codes::request_code_name(self.0)
    }
}

impl std::fmt::Display for RequestCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// The crate's general error. Each variant says what failed and keeps its cause.
///
/// ```
/// use rocketmq_actor::error::{Error, RequestCode, ResponseCode};
/// use rocketmq_actor::protocol::{request_code, response_code};
/// let e = Error::Broker {
///     peer: "127.0.0.1:10911".into(),
///     request: RequestCode(request_code::PULL_MESSAGE),
///     code: ResponseCode(response_code::SUBSCRIPTION_NOT_EXIST),
///     remark: "no subscription".into(),
/// };
/// assert!(e.to_string().contains("PULL_MESSAGE"));
/// assert_eq!(e.response_code(), Some(response_code::SUBSCRIPTION_NOT_EXIST));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Malformed data from a peer.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The peer answered a request with a response code that is not a success for it.
    #[error("{peer} answered {request} with {code}: {remark}")]
    Broker {
        /// The address that answered.
        peer: String,
        /// The request that failed.
        request: RequestCode,
        /// The response code.
        code: ResponseCode,
        /// The remark of the response (empty when none).
        remark: String,
    },
    /// No response arrived within the request's timeout.
    #[error("{code} to {peer} timed out after {timeout:?}")]
    Timeout {
        /// The address the request went to.
        peer: String,
        /// The request.
        code: RequestCode,
        /// The timeout that passed.
        timeout: Duration,
    },
    /// The connection closed before the response arrived.
    #[error("connection to {0} closed")]
    ConnectionClosed(String),
    /// The TCP connection could not be established.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address.
        addr: String,
        /// Why (refused, unreachable, timed out…).
        #[source]
        source: std::io::Error,
    },
    /// A listening socket (the embedded broker's) could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why (in use, no permission…).
        #[source]
        source: std::io::Error,
    },
    /// The name servers know no route for the topic.
    #[error("no route for topic {0}")]
    TopicRouteNotFound(String),
    /// Every configured name server failed.
    #[error("no name server answered: {detail}")]
    NameServerUnavailable {
        /// What each name server did, `addr: error; …`.
        detail: String,
        /// The error of the last name server tried.
        #[source]
        last: Option<Box<Error>>,
    },
    /// The broker at this address does not list this client among its group's members yet
    /// (it has not received a heartbeat from it).
    #[error("{0} does not list this client in its group yet")]
    NotAMember(String),
    /// A SQL92 selector does not parse or type-check; nothing was sent.
    #[error("invalid SQL92 selector of topic {topic} `{expression}`: {error}")]
    InvalidSelector {
        /// The subscribed topic.
        topic: String,
        /// The expression as written.
        expression: String,
        /// What is wrong, and where.
        #[source]
        error: crate::filter::SqlError,
    },
    /// A broker refused a SQL92 subscription when asked before the consumer started (Java's
    /// `checkClientInBroker`, CHECK_CLIENT_CONFIG).
    #[error("broker {broker} refuses the SQL92 selector `{expression}` of group {group} on topic {topic}: {reason}")]
    SelectorRefused {
        /// The broker's name (or address when its name is unknown).
        broker: String,
        /// The consumer group.
        group: String,
        /// The subscribed topic.
        topic: String,
        /// The expression.
        expression: String,
        /// The broker's answer and what to do about it.
        reason: String,
    },
    /// A configuration value is outside its allowed range.
    #[error("invalid config `{option}` = {value}: {allowed}")]
    Config {
        /// The option.
        option: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// A message that cannot be sent as it is (empty topic or body, too large, mixed batch).
    #[error("message cannot be sent: {0}")]
    InvalidMessage(String),
    /// The local offset file (broadcasting) could not be read or written.
    #[error("offset file {path}: {source}")]
    OffsetFile {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The stored consume offset of a queue could not be read (broker unreachable or refusing):
    /// the queue waits rather than guess where to start.
    #[error("the stored offset of {0} could not be read")]
    OffsetUnavailable(String),
    /// A local I/O error (offset files, sockets).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The actor that should handle the call is gone (the runtime is shutting down).
    #[error("the runtime is shutting down: {0}")]
    Shutdown(String),
    /// The TLS handshake with a peer failed (untrusted certificate, wrong name, a peer that
    /// does not speak TLS…). Like a refused connect, it is retried after the reconnect backoff.
    #[error("TLS handshake with {addr} failed: {reason}")]
    Tls {
        /// The address.
        addr: String,
        /// What went wrong and what to do about it.
        reason: String,
        /// The handshake's own error (rustls' inside an `io::Error`); none for a handshake
        /// that timed out.
        #[source]
        source: Option<std::sync::Arc<std::io::Error>>,
    },
    /// The peer closed a fresh connection before answering anything: what a server that
    /// requires TLS does to a plaintext client (and one that refuses a client certificate
    /// does after the handshake).
    #[error("{addr} closed the connection before answering anything: {reason}")]
    HungUp {
        /// The address.
        addr: String,
        /// The likely cause.
        reason: String,
    },
    /// The broker refused the request for authentication (no, unknown or wrong credentials)
    /// or permission (the account may not publish to or subscribe to a topic or group): see
    /// [`is_access_denial`]. Retrying does not help, so nothing retries it on its own.
    #[error("{peer} refused {request}: access denied ({code}): {remark}")]
    AccessDenied {
        /// The address that answered.
        peer: String,
        /// The request that was refused.
        request: RequestCode,
        /// The response code (NO_PERMISSION, or SYSTEM_ERROR from a Java ACL 1.0 broker).
        code: ResponseCode,
        /// The broker's reason: which access key, resource and permission, as far as the
        /// broker tells.
        remark: String,
    },
}

/// Each name server's failure of one request, asked in turn: one
/// [`Error::NameServerUnavailable`] when none answered.
#[derive(Default)]
pub(crate) struct NameServerFailures {
    detail: Vec<String>,
    last: Option<Box<Error>>,
}

impl NameServerFailures {
    /// The name server at `addr` could not be asked: `error`.
    pub(crate) fn push(&mut self, addr: &str, error: Error) {
        self.detail.push(format!("{addr}: {error}"));
        self.last = Some(Box::new(error));
    }

    /// A name server answered with a failure (an [`Error::Broker`] names its peer).
    pub(crate) fn push_answer(&mut self, error: Error) {
        self.detail.push(error.to_string());
        self.last = Some(Box::new(error));
    }

    /// The error of them all.
    pub(crate) fn into_error(self) -> Error {
        Error::NameServerUnavailable {
            detail: self.detail.join("; "),
            last: self.last,
        }
    }
}

/// Whether a broker's answer (`code`, `remark`) refuses a request for authentication or
/// permission, as brokers with ACL answer:
///
/// - NO_PERMISSION (16), as ACL 2.0 (Java 5), rocketmq-rust (`Authentication credentials are
///   invalid`, `Permission was denied`) and the embedded broker (`accessKey=ak has no SUB
///   permission on topic:T`) answer — except the broker's own topic and broker permissions
///   (`the topic[T] sending message is forbidden`, a broker or topic made read-only), which
///   a producer rightly retries on another broker;
/// - SYSTEM_ERROR (1) with an `AclException` remark, as Java's ACL 1.0 answers.
///
/// ```
/// use rocketmq_actor::error::is_access_denial;
/// assert!(is_access_denial(16, "accessKey=ak has no PUB permission on topic:T"));
/// assert!(is_access_denial(16, "Authentication credentials are invalid"));
/// assert!(!is_access_denial(16, "the topic[T] sending message is forbidden"));
/// assert!(is_access_denial(1, "org.apache.rocketmq.acl.common.AclException: No acl config for ak, ..."));
/// assert!(!is_access_denial(1, "store error"));
/// ```
pub fn is_access_denial(code: i32, remark: &str) -> bool {
    use crate::protocol::codes::response_code;
    match code {
        response_code::NO_PERMISSION => !remark.contains("is forbidden"),
        response_code::SYSTEM_ERROR => remark.contains("AclException"),
        _ => false,
    }
}

impl Error {
    /// The broker's response code, for [`Error::Broker`] and [`Error::AccessDenied`].
    pub fn response_code(&self) -> Option<i32> {
        match self {
            Error::Broker { code, .. } | Error::AccessDenied { code, .. } => Some(code.0),
            _ => None,
        }
    }

    /// Whether a broker refused the request for authentication or permission
    /// ([`Error::AccessDenied`]).
    pub fn is_access_denied(&self) -> bool {
        matches!(self, Error::AccessDenied { .. })
    }

    /// Whether the failure is of the transport (timeout, closed or refused connection), so the
    /// same request may succeed on another broker or after a reconnect.
    pub fn is_transport(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. }
                | Error::ConnectionClosed(_)
                | Error::Connect { .. }
                | Error::Tls { .. }
                | Error::HungUp { .. }
        )
    }
}

/// A message to an actor that has stopped: the runtime is shutting down.
impl From<actix::MailboxError> for Error {
    fn from(error: actix::MailboxError) -> Self {
        Error::Shutdown(
            match error {
                actix::MailboxError::Closed => "the actor handling the call has stopped",
                actix::MailboxError::Timeout => {
                    "the actor handling the call did not answer in time"
                }
            }
            .to_owned(),
        )
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
