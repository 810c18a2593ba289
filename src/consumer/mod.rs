//! The push consumer's sans-I/O core.
//!
//! Everything here is deterministic: no sockets, no actix, no clock reads. Time comes in as
//! `now_ms: i64` (milliseconds since the Unix epoch) arguments, I/O results come in as values and
//! decisions go out as values. The consumer actors own the state these types describe and do the
//! I/O the decisions ask for.
//!
//! | module | what it decides |
//! |---|---|
//! | [`config`](crate::consumer::config) | every push-consumer option, its Java default and its allowed range |
//! | [`allocate`](crate::consumer::allocate) | which queues of a topic this consumer owns (rebalancing strategies) |
//! | [`process_queue`](crate::consumer::process_queue) | the per-queue cache of pulled, not yet consumed messages |
//! | [`flow`](crate::consumer::flow) | whether to pull a queue now or later, and what a pull result means |
//! | [`offset`](crate::consumer::offset) | consume offsets: increase-only updates, persistence, start offsets, local files |
//! | [`retry`](crate::consumer::retry) | retry/DLQ topic names, delay levels, the fallback retry message |
//! | [`orderly`](crate::consumer::orderly) | orderly consumption of one queue: batches, commit/suspend/DLQ, yielding |
//! | [`key_order`](crate::consumer::key_order) | key-ordered mode: same key in order, different keys concurrently |
//! | [`lock`](crate::consumer::lock) | broker queue locks of orderly clustering consumers, the drop sequence |

pub mod allocate;
pub mod config;
pub mod flow;
pub mod key_order;
pub mod lock;
pub mod offset;
pub mod orderly;
pub mod process_queue;
pub mod retry;
pub mod serde_duration;

pub use allocate::{AllocateStrategy, MachineRoomResolver};
pub use config::{
    AllocateStrategyKind, ConsumeFromWhere, ConsumeMode, MessageModel, PushConsumerConfig,
};
pub use flow::{PullDecision, PullOutcome, PullStatus};
pub use key_order::KeyOrderedQueue;
pub use lock::QueueLocks;
pub use offset::{OffsetTable, StartOffset};
pub use orderly::{OrderlyContext, OrderlyQueueState, OrderlyStatus};
pub use process_queue::{CachedMessage, ProcessQueue, ProcessQueueSnapshot};
