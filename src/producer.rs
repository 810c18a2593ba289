//! What a send returns: the producer's value types, part of the core (the producer handle in
//! `actors/producer.rs` makes them from the broker's answer).

use crate::message::MessageQueue;

/// How the broker stored a message that was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    /// Stored and, as configured on the broker, flushed and replicated.
    SendOk,
    /// Stored, but the disk flush timed out.
    FlushDiskTimeout,
    /// Stored, but replication to the slave timed out.
    FlushSlaveTimeout,
    /// Stored, but no slave is available.
    SlaveNotAvailable,
}

/// The outcome of a successful send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendResult {
    /// How the broker stored it.
    pub status: SendStatus,
    /// The message id consumers see (UNIQ_KEY); comma-separated for a batch.
    pub msg_id: String,
    /// The broker's id of the stored record (store host + commit-log offset).
    pub offset_msg_id: String,
    /// Where it went.
    pub queue: MessageQueue,
    /// Its offset in that queue (of the first message, for a batch).
    pub queue_offset: i64,
}
