//! The push consumer: its handle and builder, listeners, configuration and allocation
//! strategies (public), over a sans-I/O core (crate-internal).
//!
//! The core is deterministic: no sockets, no actix, no clock reads. Time comes in as
//! `now_ms: i64` (milliseconds since the Unix epoch) arguments, I/O results come in as values and
//! decisions go out as values. The consumer actors own the state these types describe and do the
//! I/O the decisions ask for.
//!
//! | module | what it decides |
//! |---|---|
//! | [`config`] | every push-consumer option, its Java default and its allowed range |
//! | [`allocate`] | which queues of a topic this consumer owns (rebalancing strategies) |
//! | `process_queue` | the per-queue cache of pulled, not yet consumed messages |
//! | `offset_map` | values by queue offset in a sorted deque (the caches' storage) |
//! | `flow` | whether to pull a queue now or later, and what a pull result means |
//! | `offset` | consume offsets: increase-only updates, persistence, start offsets, local files |
//! | `retry` | retry/DLQ topic names, delay levels, the fallback retry message |
//! | `orderly` | orderly consumption of one queue: batches, commit/suspend/DLQ, yielding |
//! | `key_order` | key-ordered mode: same key in order, different keys concurrently |
//! | `lock` | broker queue locks of orderly clustering consumers, the drop sequence |
//! | [`supervision`] | restart policies of the supervised actors: restart after a backoff, or give up |

pub mod allocate;
pub mod config;
// The core modules below keep inspection helpers their unit tests use: dead-code warnings are off
// for them.
#[allow(dead_code)]
pub(crate) mod flow;
#[allow(dead_code)]
pub(crate) mod key_order;
pub(crate) mod lock;
#[allow(dead_code)]
pub(crate) mod offset;
pub(crate) mod offset_map;
#[allow(dead_code)]
pub(crate) mod orderly;
#[allow(dead_code)]
pub(crate) mod process_queue;
// The concurrent service's cache, kept per pull.
pub(crate) mod pull_cache;
// The lite pull consumer's buffer and positions as a state machine.
pub(crate) mod lite_core;
// The queue's pull loop and concurrent consumption as a state machine.
pub(crate) mod queue_core;
// Which queues a member owns, and what a rebalance pass changes.
pub mod pull_config;
pub(crate) mod rebalance;
#[allow(dead_code)]
pub(crate) mod retry;
pub(crate) mod serde_duration;
mod status;
pub mod supervision;

pub use allocate::{AllocateStrategy, MachineRoomResolver};
pub use config::{
    AllocateStrategyKind, ConsumeFromWhere, ConsumeMode, MessageModel, PushConsumerConfig,
};
pub use offset::{decode_local_offsets, encode_local_offsets};
pub use orderly::{OrderlyContext, OrderlyStatus};
pub use pull_config::{LitePullConsumerConfig, PullConsumerConfig};
pub use retry::{dlq_topic, retry_topic, DELAY_LEVELS};
pub use status::ConsumeStatus;
pub use supervision::{RestartDecision, RestartPolicy, RestartTracker};

pub use crate::actors::consumer::{
    ConsumerEvent, ConsumerStats, ConsumerStatus, PushConsumer, PushConsumerBuilder, QueueLag,
};
pub use crate::actors::listener::{
    ConsumeContext, ConsumeMessages, ConsumeOrderly, ConsumeReply, MessageListener, Messages,
    OrderlyListener, OrderlyReply,
};
pub use crate::actors::supervised_consumer::{GetConsumerStatus, StopConsumer, SupervisedConsumer};
