//! # rocketmq-actor
//!
//! An actor-based Apache RocketMQ client runtime built on [actix]. It speaks the classic RocketMQ
//! remoting protocol (the one of the Java 4.x/5.x client) and ships an embedded
//! RocketMQ-compatible broker so everything runs on a fresh machine.
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
//! Handles are `Send + Sync` and work from any async runtime: inside an actix system the actors
//! run on the caller's arbiter; elsewhere (a plain `#[tokio::main]`, or a synchronous `main`
//! driving futures with `futures::executor::block_on`) on a runtime thread of the crate's own.
//!
//! # What is here
//!
//! | layer | items |
//! |---|---|
//! | push consumer | [`PushConsumer`] ([`consumer`]: builder, listeners, [`PushConsumerConfig`], allocation strategies) |
//! | pull consumers | [`pull`]: [`PullConsumer`](pull::PullConsumer), [`PullScheduleService`](pull::PullScheduleService), [`LitePullConsumer`](pull::LitePullConsumer) with its [`MessageStream`](pull::MessageStream); offset resets by time with [`Client::reset_offset_by_timestamp`] |
//! | producer | [`Producer`], [`ProducerConfig`], [`SendResult`] |
//! | base layer | [`Client`] / [`ClientConfig`]: one per process, shared by every producer and consumer, with a typed method per RPC ([`rpc`]: [`PullRequest`](rpc::PullRequest), [`PullResult`](rpc::PullResult)) |
//! | messages | [`Message`], [`MessageExt`], [`MessageQueue`] ([`message`]: properties, ids, the stored-record format) |
//! | errors | [`Error`] ([`error`]) |
//! | TLS | [`tls`] (feature `tls`): [`TlsConfig`](tls::TlsConfig) as [`ClientConfig::tls`]; the embedded broker's `EmbeddedConfig::tls` |
//! | test double | `EmbeddedCluster` ([`embedded`], feature `embedded`) |
//! | wire | [`protocol`]: frames, headers, bodies, codes — for admin calls the base layer does not type ([`Client::invoke`]) |
//! | observability | [`metrics`] (names, labels, the Prometheus exporter); tracing spans `consumer{group, client}` and `queue{topic, broker, id}` around every log line of a push consumer; [`PushConsumer::lag`] |
//! | hooks and ACL | [`hooks`]: [`RpcHook`](hooks::RpcHook) (every request), [`ConsumeHook`](hooks::ConsumeHook) (every listener call), [`SendHook`](hooks::SendHook) (every send); [`acl`]: [`Credentials`](acl::Credentials) on [`ClientConfig::credentials`] sign every request; the embedded broker's ACL mode ([`embedded::AclConfig`]) |
//! | namespaces | [`namespace`]: Java 5's `namespace` — wrap and unwrap rules; every config takes a `namespace` |
//! | helpers | [`filter`] (tag expressions, Java hash codes), [`route`] (a topic's route and queue sets), [`identity`] (client ip and instance name), [`util`] |
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `tls` | yes | TLS connections ([`tls`]: rustls with `ring`, webpki roots, a generated test CA); with `embedded`, a broker serving TLS |
//! | `toml` | yes | [`PushConsumerConfig::from_toml_str`] |
//! | `embedded` | no | the embedded name server + brokers ([`embedded`]): add it in `[dev-dependencies]` for tests |
//! | `prometheus` | no | [`metrics::PrometheusExporter`]: the [`metrics`] figures as Prometheus text at `/metrics` |
//! | `cli` | no | the `rocketmq-actor` binary (clap, tracing-subscriber, …); implies `embedded`, `prometheus` and `tls` |
//!
//! The command line: `cargo install rocketmq-actor --features cli`.
//!
//! The crate is a sans-I/O core (pure functions and state machines, tested without sockets or
//! actix) under thin actix actors; `ARCHITECTURE.md` draws the layers.
#![warn(missing_docs)]

pub mod error;
pub mod filter;
pub mod identity;
pub mod message;
pub mod metrics;
pub mod namespace;
pub mod protocol;
pub mod route;
pub mod rpc;
#[cfg(feature = "tls")]
pub mod tls;

pub mod acl;
pub mod hooks;
pub(crate) mod producer;

/// One connection's request table and reconnect backoff, without the socket.
pub(crate) mod remoting;

/// The embedded broker's sans-I/O core: storage, offsets, groups, locks, long polling, retry/DLQ.
// Its inspection helpers serve the unit tests and the embedded-cluster API.
#[cfg(feature = "embedded")]
#[allow(dead_code, unused_imports)]
pub(crate) mod broker;
pub mod consumer;

/// The actix actors: one actor per file, each a thin shell around the core.
#[path = "../actors/mod.rs"]
pub(crate) mod actors;

// The tests of crate-internal actors name the crate as integration tests do.
#[cfg(test)]
extern crate self as rocketmq_actor;
#[cfg(all(test, feature = "embedded"))]
#[path = "../tests/internal/mod.rs"]
mod internal_tests;

/// The deterministic simulator: consumer cores and broker cores on a simulated network and clock.
#[cfg(all(test, feature = "embedded"))]
mod sim;

/// The embedded RocketMQ-compatible cluster (name server + brokers on loopback): the test double
/// for `cargo test` on a fresh machine, with fault injection.
///
/// ```no_run
/// # async fn demo() -> rocketmq_actor::Result<()> {
/// use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};
/// let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral()).await?;
/// println!("name server at {}", cluster.namesrv_addr());
/// cluster.shutdown().await;
/// # Ok(()) }
/// ```
#[cfg(feature = "embedded")]
pub mod embedded {
    pub use crate::actors::broker::{broker_name, EmbeddedCluster, EmbeddedConfig};
    pub use crate::broker::acl::{AclAccount, AclConfig, AclConfigError, AddressPattern};
    pub use crate::broker::store::TopicConfig;
    pub use crate::broker::{BrokerConfig, Fault};
}

/// Administration, as Java's mqadmin: topics, subscription groups, brokers and clusters.
///
/// [`Admin`](admin::Admin) sends the calls over a [`Client`]'s connections; the body types are
/// the wire's.
pub mod admin {
    pub use crate::actors::admin::{Admin, BrokerMaster, Brokers};
    pub use crate::protocol::body::{
        ClusterInfo, SubscriptionGroupConfig, TopicConfig, TopicOffset, TopicStatsTable,
    };
}

/// The pull consumer kinds: [`PullConsumer`](pull::PullConsumer) (Java
/// `DefaultMQPullConsumer`), [`PullScheduleService`](pull::PullScheduleService) (Java
/// `MQPullConsumerScheduleService`) and [`LitePullConsumer`](pull::LitePullConsumer) (Java
/// `DefaultLitePullConsumer`, with a `Stream`).
pub mod pull {
    pub use crate::actors::lite_pull::{
        LitePullConsumer, LitePullConsumerBuilder, MessageStream, TopicQueueChangeListener,
    };
    pub use crate::actors::member::{MessageQueueListener, QueueChange};
    pub use crate::actors::pull_consumer::{PullConsumer, PullConsumerBuilder};
    pub use crate::actors::schedule::{
        PullScheduleService, PullScheduleServiceBuilder, PullTaskCallback, PullTaskContext,
        DEFAULT_PULL_NEXT_DELAY,
    };
    pub use crate::consumer::pull_config::{LitePullConsumerConfig, PullConsumerConfig};
    pub use crate::rpc::{PullResult, PullStatus};
}

/// Helpers the command-line tool and examples share.
pub mod util {
    /// Wall-clock milliseconds since the Unix epoch.
    ///
    /// ```
    /// assert!(rocketmq_actor::util::now_ms() > 1_600_000_000_000);
    /// ```
    pub fn now_ms() -> i64 {
        crate::actors::now_ms()
    }
}

// The README's Rust snippets are compiled with the doctests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeSnippets;

pub use actors::client::{Client, ClientConfig};
pub use actors::connection::ConnectionConfig;
pub use actors::producer::{Producer, ProducerConfig};
pub use consumer::{
    ConsumeContext, ConsumeStatus, OrderlyContext, OrderlyStatus, PushConsumer,
    PushConsumerBuilder, PushConsumerConfig,
};
#[cfg(feature = "embedded")]
pub use embedded::{EmbeddedCluster, EmbeddedConfig};
pub use error::{Error, ProtocolError, Result};
pub use message::{Message, MessageExt, MessageQueue};
pub use producer::{SendResult, SendStatus};
