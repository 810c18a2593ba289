//! Error types shared by the whole crate.

use std::time::Duration;

/// A problem with bytes received from (or about to be sent to) a peer.
///
/// Every decoder in the crate returns this instead of panicking; a connection that meets one
/// closes itself and logs it.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// A frame announced a length above the limit (16 MiB by default).
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    FrameTooLarge { len: usize, limit: usize },
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
    InvalidField { field: &'static str, value: String },
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

/// The crate's general error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Malformed data from a peer.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The peer answered with a non-success response code.
    #[error("{peer} answered code {code}: {remark}")]
    Broker {
        /// The address that answered.
        peer: String,
        /// The RocketMQ response code.
        code: i32,
        /// The remark of the response (empty when none).
        remark: String,
    },
    /// No response arrived within the request's timeout.
    #[error("request code {code} to {peer} timed out after {timeout:?}")]
    Timeout {
        peer: String,
        code: i32,
        timeout: Duration,
    },
    /// The connection closed before the response arrived.
    #[error("connection to {0} closed")]
    ConnectionClosed(String),
    /// The TCP connection could not be established.
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    /// The name servers know no route for the topic.
    #[error("no route for topic {0}")]
    TopicRouteNotFound(String),
    /// Every configured name server failed.
    #[error("no name server answered: {0}")]
    NameServerUnavailable(String),
    /// The broker at this address does not list this client among its group's members yet
    /// (it has not received a heartbeat from it).
    #[error("{0} does not list this client in its group yet")]
    NotAMember(String),
    /// A configuration value is outside its allowed range.
    #[error("invalid config `{option}` = {value}: {allowed}")]
    Config {
        option: &'static str,
        value: String,
        allowed: String,
    },
    /// A local I/O error (offset files, sockets).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The actor that should handle the call is gone (the runtime is shutting down).
    #[error("the runtime is shutting down: {0}")]
    Shutdown(String),
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
