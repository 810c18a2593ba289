//! # rocketmq-actor
//!
//! An actor-based Apache RocketMQ client runtime built on [actix]. It speaks the classic RocketMQ
//! remoting protocol (the one of the Java 4.x/5.x client) and ships an embedded RocketMQ-compatible
//! broker so everything runs on a fresh machine.
//!
//! The crate is split in two halves (see `ARCHITECTURE.md`):
//! - a deterministic, sans-I/O core (`protocol`, `message`, `filter`, `route`, `consumer`, `broker`)
//!   made of pure functions and state machines, tested without sockets or actix;
//! - thin actix actors (`actors`) that own state, do the I/O and turn messages into core calls.
//!
//! # Quick start
//!
//! ```no_run
//! use rocketmq_actor::{ConsumeStatus, PushConsumer};
//!
//! #[actix_rt::main]
//! async fn main() -> rocketmq_actor::Result<()> {
//!     let consumer = PushConsumer::builder()
//!         .namesrv_addr("127.0.0.1:9876")
//!         .group("billing")
//!         .subscribe("Orders", "TagA || TagB")
//!         .listener_fn(|messages, ctx| async move {
//!             for m in &messages {
//!                 println!("{} {:?}", m.msg_id(), m.body());
//!             }
//!             (ConsumeStatus::Success, ctx)
//!         })
//!         .start()
//!         .await?;
//!     tokio::signal::ctrl_c().await?;
//!     consumer.shutdown().await;
//!     Ok(())
//! }
//! ```
//!
//! Without a RocketMQ cluster at hand, [`actors::broker::EmbeddedCluster`] starts a name server
//! and brokers on loopback ports in the same process.

pub mod error;
pub mod filter;
pub mod message;
pub mod protocol;
pub mod route;

/// The embedded broker's sans-I/O core: storage, offsets, groups, locks, long polling, retry/DLQ.
pub mod broker;
/// The push consumer's sans-I/O core: config, process queue, allocation, offset math.
pub mod consumer;

/// The actix actors: one actor per file, each a thin shell around the core.
#[path = "../actors/mod.rs"]
pub mod actors;

pub use actors::broker::{EmbeddedCluster, EmbeddedConfig};
pub use actors::client::{Client, ClientConfig};
pub use actors::consumer::PushConsumer;
pub use actors::listener::{ConsumeContext, ConsumeStatus};
pub use actors::producer::{Producer, ProducerConfig, SendResult};
pub use consumer::{OrderlyContext, OrderlyStatus, PushConsumerConfig};
pub use error::{Error, ProtocolError, Result};
pub use message::{Message, MessageExt, MessageQueue};
