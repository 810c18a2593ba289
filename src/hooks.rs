//! Hooks: code of the application run around every request, every listener call and every send
//! (Java's `RPCHook`, `ConsumeMessageHook` and `SendMessageHook`).
//!
//! - [`RpcHook`] on [`ClientConfig::rpc_hooks`](crate::ClientConfig::rpc_hooks): sees (and may
//!   change) every request the client sends — name server and brokers, requests and one-way
//!   commands, the producer's sends included — and every response. ACL signing
//!   ([`ClientConfig::credentials`](crate::ClientConfig::credentials)) runs after the hooks,
//!   so what they add is signed.
//! - [`ConsumeHook`] on [`PushConsumerBuilder::consume_hook`](crate::PushConsumerBuilder::consume_hook):
//!   before and after each listener call, concurrent and orderly.
//! - [`SendHook`] on [`ProducerConfig::send_hooks`](crate::ProducerConfig::send_hooks): before
//!   and after each send attempt.
//!
//! A hook that panics is caught and logged; the request, the listener call or the send goes
//! on. Hooks run on the caller's task, so they should be quick. With no hook installed nothing
//! extra runs (one emptiness check per request, call or send).
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//! use rocketmq_actor::hooks::RpcHook;
//! use rocketmq_actor::protocol::RemotingCommand;
//! use rocketmq_actor::ClientConfig;
//!
//! #[derive(Default)]
//! struct CountRequests(AtomicU64);
//!
//! impl RpcHook for CountRequests {
//!     fn before_request(&self, _peer: &str, request: &mut RemotingCommand) {
//!         self.0.fetch_add(1, Ordering::Relaxed);
//!         request.ext_fields.get_or_insert_with(Default::default).insert("tenant".into(), "blue".into());
//!     }
//! }
//!
//! let counter = Arc::new(CountRequests::default());
//! let config = ClientConfig::new("127.0.0.1:9876").with_rpc_hook(counter.clone());
//! assert_eq!(config.rpc_hooks.len(), 1);
//! ```

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use crate::acl::{self, Credentials};
use crate::consumer::ConsumeStatus;
use crate::consumer::OrderlyStatus;
use crate::error::Error;
use crate::message::{Message, MessageExt, MessageQueue};
use crate::producer::SendResult;
use crate::protocol::RemotingCommand;

/// Runs around every request a client sends (Java `RPCHook`).
///
/// `before_request` runs before the request is encoded, in the order the hooks were added,
/// and may change it (add ext fields, change the body); `after_response` runs when a response
/// arrived (not for one-way commands, timeouts or closed connections). `peer` is the address
/// the request goes to.
pub trait RpcHook: Send + Sync {
    /// Before `request` is sent to `peer`.
    fn before_request(&self, peer: &str, request: &mut RemotingCommand) {
        let _ = (peer, request);
    }

    /// After `peer` answered a request with code `request_code`.
    fn after_response(&self, peer: &str, request_code: i32, response: &RemotingCommand) {
        let _ = (peer, request_code, response);
    }
}

/// What a listener call returned, as a [`ConsumeHook`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerStatus {
    /// A concurrent listener's status.
    Concurrent(ConsumeStatus),
    /// An orderly listener's status.
    Orderly(OrderlyStatus),
}

impl ListenerStatus {
    /// The Java name of the status (`CONSUME_SUCCESS`, `RECONSUME_LATER`, `SUCCESS`, `COMMIT`,
    /// `ROLLBACK`, `SUSPEND_CURRENT_QUEUE_A_MOMENT`), as trace and metrics tools expect it.
    pub fn java_name(self) -> &'static str {
        match self {
            ListenerStatus::Concurrent(ConsumeStatus::Success) => "CONSUME_SUCCESS",
            ListenerStatus::Concurrent(ConsumeStatus::ReconsumeLater) => "RECONSUME_LATER",
            ListenerStatus::Orderly(OrderlyStatus::Success) => "SUCCESS",
            ListenerStatus::Orderly(OrderlyStatus::Commit) => "COMMIT",
            ListenerStatus::Orderly(OrderlyStatus::Rollback) => "ROLLBACK",
            ListenerStatus::Orderly(OrderlyStatus::SuspendCurrentQueueAMoment) => {
                "SUSPEND_CURRENT_QUEUE_A_MOMENT"
            }
        }
    }
}

/// One listener call, as a [`ConsumeHook`] sees it (Java `ConsumeMessageContext`).
#[derive(Debug, Clone, Copy)]
pub struct ConsumeHookContext<'a> {
    /// The consumer group.
    pub group: &'a str,
    /// The queue the messages came from.
    pub queue: &'a MessageQueue,
    /// The batch handed to the listener.
    pub messages: &'a [MessageExt],
    /// Whether the listener is an orderly one.
    pub orderly: bool,
    /// The listener's status: `None` before the call, and after a call that panicked (it
    /// counts as `RECONSUME_LATER` / a suspend).
    pub status: Option<ListenerStatus>,
    /// After the call: whether the batch was consumed (CONSUME_SUCCESS, or orderly SUCCESS or
    /// COMMIT). `false` before.
    pub success: bool,
    /// After the call: whether the listener panicked.
    pub panicked: bool,
    /// After the call: how long it ran. Zero before.
    pub elapsed: Duration,
}

/// Runs before and after each listener call of a push consumer (Java `ConsumeMessageHook`).
pub trait ConsumeHook: Send + Sync {
    /// Before the listener gets `ctx.messages`.
    fn before_consume(&self, ctx: &ConsumeHookContext<'_>) {
        let _ = ctx;
    }

    /// After the listener returned (or panicked).
    fn after_consume(&self, ctx: &ConsumeHookContext<'_>) {
        let _ = ctx;
    }
}

/// One send attempt, as a [`SendHook`] sees it (Java `SendMessageContext`).
#[derive(Debug, Clone, Copy)]
pub struct SendHookContext<'a> {
    /// The producer group.
    pub group: &'a str,
    /// The message sent, or the messages of a batch.
    pub messages: &'a [Message],
    /// The queue chosen for this attempt.
    pub queue: &'a MessageQueue,
    /// The address of the broker the attempt goes to.
    pub broker_addr: &'a str,
    /// Whether it is a batch (SEND_BATCH_MESSAGE).
    pub batch: bool,
}

/// Runs before and after each send attempt of a producer (Java `SendMessageHook`). A send
/// retried on another broker is two attempts.
pub trait SendHook: Send + Sync {
    /// Before the attempt.
    fn before_send(&self, ctx: &SendHookContext<'_>) {
        let _ = ctx;
    }

    /// After the attempt: the broker's answer or why there is none. The result's `msg_id` is
    /// the one the caller gets.
    fn after_send(&self, ctx: &SendHookContext<'_>, result: Result<&SendResult, &Error>) {
        let _ = (ctx, result);
    }
}

/// A list of hooks of one kind, shared cheaply (`Debug` shows how many there are).
pub struct Hooks<H: ?Sized>(Vec<Arc<H>>);

impl<H: ?Sized> Hooks<H> {
    /// No hooks.
    pub fn new() -> Self {
        Hooks(Vec::new())
    }

    /// Adds a hook after the others.
    pub fn push(&mut self, hook: Arc<H>) {
        self.0.push(hook);
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The hooks, in the order they run.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<H>> {
        self.0.iter()
    }
}

impl<H: ?Sized> Default for Hooks<H> {
    fn default() -> Self {
        Hooks::new()
    }
}

impl<H: ?Sized> Clone for Hooks<H> {
    fn clone(&self) -> Self {
        Hooks(self.0.clone())
    }
}

impl<H: ?Sized> fmt::Debug for Hooks<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hooks({})", self.0.len())
    }
}

impl<H: ?Sized> From<Vec<Arc<H>>> for Hooks<H> {
    fn from(hooks: Vec<Arc<H>>) -> Self {
        Hooks(hooks)
    }
}

/// The text of a panic payload.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

/// Runs one hook, catching and logging a panic.
pub(crate) fn guarded(kind: &'static str, run: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(run)) {
        tracing::error!(hook = kind, panic = %panic_text(panic.as_ref()), "a hook panicked; ignored");
    }
}

/// What a client runs around each request: the application's [`RpcHook`]s, then the ACL
/// signature.
#[derive(Clone, Default)]
pub(crate) struct RequestHooks {
    rpc: Hooks<dyn RpcHook>,
    credentials: Option<Credentials>,
}

impl RequestHooks {
    pub(crate) fn new(rpc: Hooks<dyn RpcHook>, credentials: Option<Credentials>) -> Self {
        RequestHooks { rpc, credentials }
    }

    /// Whether nothing runs (the producer then keeps its pre-encoded path).
    pub(crate) fn is_empty(&self) -> bool {
        self.rpc.is_empty() && self.credentials.is_none()
    }

    /// Before `request` goes to `peer`: the hooks in order, then the signature.
    pub(crate) fn before(&self, peer: &str, request: &mut RemotingCommand) {
        for hook in self.rpc.iter() {
            guarded("rpc", || hook.before_request(peer, request));
        }
        if let Some(credentials) = &self.credentials {
            acl::sign(request, credentials);
        }
    }

    /// After `peer` answered a request with code `request_code`.
    pub(crate) fn after(&self, peer: &str, request_code: i32, response: &RemotingCommand) {
        for hook in self.rpc.iter() {
            guarded("rpc", || hook.after_response(peer, request_code, response));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl RpcHook for Recorder {
        fn before_request(&self, peer: &str, request: &mut RemotingCommand) {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("before {peer} {}", request.code));
            request
                .ext_fields
                .get_or_insert_with(Default::default)
                .insert("added".into(), "by-hook".into());
        }

        fn after_response(&self, peer: &str, request_code: i32, response: &RemotingCommand) {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("after {peer} {request_code} {}", response.code));
        }
    }

    struct Panics;

    impl RpcHook for Panics {
        fn before_request(&self, _peer: &str, _request: &mut RemotingCommand) {
            panic!("hook bug");
        }
    }

    #[test]
    fn hooks_run_in_order_a_panic_is_contained_and_the_signature_covers_what_they_added() {
        let recorder = Arc::new(Recorder::default());
        let hooks = RequestHooks::new(
            vec![Arc::new(Panics) as Arc<dyn RpcHook>, recorder.clone()].into(),
            Some(Credentials::new("ak", "sk")),
        );
        assert!(!hooks.is_empty());
        let mut request = RemotingCommand::request(11).with_ext("topic", "T");
        hooks.before("10.0.0.1:10911", &mut request);
        hooks.after("10.0.0.1:10911", 11, &RemotingCommand::response(0, None));
        assert_eq!(request.ext("added"), Some("by-hook"));
        assert!(acl::verify(&request, "sk"));
        let seen = recorder.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(
            seen,
            vec!["before 10.0.0.1:10911 11", "after 10.0.0.1:10911 11 0"]
        );
    }

    #[test]
    fn no_hooks_no_credentials_is_empty_and_leaves_requests_alone() {
        let hooks = RequestHooks::default();
        assert!(hooks.is_empty());
        let mut request = RemotingCommand::request(11);
        hooks.before("peer", &mut request);
        assert_eq!(request, RemotingCommand::request(11));
        assert_eq!(format!("{:?}", Hooks::<dyn RpcHook>::new()), "Hooks(0)");
    }

    #[test]
    fn java_names_of_listener_statuses() {
        assert_eq!(
            ListenerStatus::Concurrent(ConsumeStatus::Success).java_name(),
            "CONSUME_SUCCESS"
        );
        assert_eq!(
            ListenerStatus::Orderly(OrderlyStatus::SuspendCurrentQueueAMoment).java_name(),
            "SUSPEND_CURRENT_QUEUE_A_MOMENT"
        );
    }
}
