//! The message model: messages to send, stored messages received, queues, properties.
//!
//! - [`Message`] / [`MessageExt`]: a message to send and a message as stored by a broker.
//! - [`Topic`]: a topic name that clones without copying.
//! - [`Properties`] and the [`property`] names.
//! - [`decode_messages`] / [`decode_message`]: stored records (pull bodies) → [`MessageExt`].
//! - [`encode_stored_message`], [`encode_batch_body`], [`decode_batch_body`]: the other
//!   directions, for the embedded broker and producers.
//! - [`offset_msg_id`], [`UniqueIdGenerator`]: message ids; [`compress`]/[`decompress`].

mod queue;
mod topic;
pub use queue::MessageQueue;
pub use topic::Topic;

pub mod compression;
pub mod decode;
pub mod encode;
pub mod id;
pub mod model;
pub mod properties;
pub mod sys_flag;

pub use compression::{compress, decompress, decompress_with_limit, CompressionType};
pub use decode::{decode_batch_body, decode_message, decode_messages};
pub use encode::{
    check_storable, encode_batch_body, encode_stored_message, stored_record_len,
    try_encode_batch_body, try_encode_stored_message,
};
pub use id::{decode_offset_msg_id, offset_msg_id, OffsetMsgId, UniqueIdGenerator};
pub use model::{IntoKeys, Message, MessageExt};
pub use properties::{property, Properties};
