//! What a concurrent listener reports for a batch: a value of the core, which the listener
//! stage (`actors/listener.rs`) hands back to the queue's state machine.

/// What a concurrent listener reports for a batch.
///
/// ```
/// use rocketmq_actor::consumer::ConsumeStatus;
///
/// let status = ConsumeStatus::ReconsumeLater;
/// assert_ne!(status, ConsumeStatus::Success);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeStatus {
    /// The messages up to the context's `ack_index` are consumed.
    Success,
    /// Consume the batch (or the part after `ack_index`) again later.
    ReconsumeLater,
}
