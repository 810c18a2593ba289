//! actix actors, one per file. Each is a thin shell over the sans-I/O core in `src/`.

/// Wall-clock milliseconds since the Unix epoch: the one clock read the actors make and pass
/// into the core as `now_ms`.
///
/// ```
/// assert!(rocketmq_actor::actors::now_ms() > 1_600_000_000_000);
/// ```
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Actors of the embedded broker.
pub mod broker;

pub mod client;
pub mod connection;
pub mod consumer;
pub mod heartbeat;
pub mod listener;
pub mod offset_store;
pub mod producer;
pub mod puller;
pub mod queue;
pub mod queue_orderly;
pub mod rebalancer;
