//! Tests of crate-internal parts over real sockets: the connection actor against a scripted
//! server, and the embedded broker driven through the client's own connections. They reach
//! items that are not public, so the library mounts them as its own test modules (`src/lib.rs`)
//! instead of Cargo building them as integration tests.

#[path = "../common/mod.rs"]
mod common;
mod connection;
mod embedded_broker;
mod fuzz;
mod supervision;
