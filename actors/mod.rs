//! actix actors, one per file. Each is a thin shell over the sans-I/O core in `src/`.

/// Wall-clock milliseconds since the Unix epoch: the one clock read the actors make and pass
/// into the core as `now_ms`.
///
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Actors of the embedded broker.
#[cfg(feature = "embedded")]
pub(crate) mod broker;

pub(crate) mod client;
pub(crate) mod connection;
pub(crate) mod consumer;
pub(crate) mod heartbeat;
pub(crate) mod listener;
pub(crate) mod lite_pull;
pub(crate) mod member;
pub(crate) mod offset_store;
pub(crate) mod producer;
pub(crate) mod pull_consumer;
pub(crate) mod puller;
pub(crate) mod queue;
pub(crate) mod queue_orderly;
pub(crate) mod rebalancer;
pub(crate) mod runtime;
pub(crate) mod schedule;
