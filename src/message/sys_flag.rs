//! Bits of the `SYSFLAG` field of a stored message (Java `MessageSysFlag`).
//!
//! ```
//! use rocketmq_actor::message::sys_flag;
//! let flag = sys_flag::COMPRESSED | sys_flag::COMPRESSION_LZ4;
//! assert!(sys_flag::is_compressed(flag));
//! assert_eq!(sys_flag::transaction_type(sys_flag::TRANSACTION_COMMIT), sys_flag::TRANSACTION_COMMIT);
//! ```

/// The stored body is compressed (type in bits 8–10).
pub const COMPRESSED: i32 = 0x1;
/// Legacy marker set by brokers for MULTI_TAG topics.
pub const MULTI_TAGS: i32 = 0x2;
/// Mask of the two transaction-state bits.
pub const TRANSACTION_MASK: i32 = 0xC;
/// Not a transactional message.
pub const TRANSACTION_NOT: i32 = 0x0;
/// Half (prepared) transactional message.
pub const TRANSACTION_PREPARED: i32 = 0x4;
/// Committed transactional message.
pub const TRANSACTION_COMMIT: i32 = 0x8;
/// Rolled-back transactional message.
pub const TRANSACTION_ROLLBACK: i32 = 0xC;
/// The born host is an IPv6 address (20 bytes on the wire instead of 8).
pub const BORNHOST_V6: i32 = 0x10;
/// The store host is an IPv6 address (20 bytes on the wire instead of 8).
pub const STOREHOST_V6: i32 = 0x20;
/// Together with [`INNER_BATCH`]: the body is a list of compact messages to expand.
pub const NEED_UNWRAP: i32 = 0x40;
/// The record holds a whole batch (batch consume queue).
pub const INNER_BATCH: i32 = 0x80;
/// Compression type LZ4 (frame format).
pub const COMPRESSION_LZ4: i32 = 0x100;
/// Compression type zstd.
pub const COMPRESSION_ZSTD: i32 = 0x200;
/// Compression type zlib (also what type 0 means).
pub const COMPRESSION_ZLIB: i32 = 0x300;
/// Mask of the compression-type bits.
pub const COMPRESSION_TYPE_MASK: i32 = 0x700;

/// Whether the `COMPRESSED` bit is set.
pub fn is_compressed(flag: i32) -> bool {
    flag & COMPRESSED != 0
}

/// Whether the record is an inner batch that clients must expand (both 0x80 and 0x40 set).
pub fn needs_unwrap(flag: i32) -> bool {
    flag & (INNER_BATCH | NEED_UNWRAP) == INNER_BATCH | NEED_UNWRAP
}

/// The transaction state bits (`TRANSACTION_*`).
pub fn transaction_type(flag: i32) -> i32 {
    flag & TRANSACTION_MASK
}

/// Replaces the transaction state bits.
pub fn with_transaction_type(flag: i32, transaction: i32) -> i32 {
    (flag & !TRANSACTION_MASK) | (transaction & TRANSACTION_MASK)
}
