//! The RocketMQ remoting protocol: codes, commands, the frame codec, typed headers and JSON
//! bodies (protocol.md §1, §2, §5). Sans-I/O: nothing here touches a socket.

pub mod body;
pub mod codec;
pub mod codes;
pub mod command;
pub mod ext_fields;
pub mod header;
mod json;

pub use codec::{RemotingCodec, DEFAULT_MAX_FRAME_LEN};
pub use codes::{request_code, response_code};
pub use command::{ExtFields, LanguageCode, RemotingCommand, SerializeType};
pub use header::CommandHeader;
