//! actix actors, one per file. Each is a thin shell over the sans-I/O core in `src/`.

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
