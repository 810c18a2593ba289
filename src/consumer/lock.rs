//! Broker queue locks of orderly clustering consumers (`LOCK_BATCH_MQ` / `UNLOCK_BATCH_MQ`):
//! the rules a queue's [`super::queue_core::QueueCore`] applies to its own lock.
//!
//! In clustering mode an orderly queue may only be consumed by the consumer holding its lock on
//! the broker, otherwise two consumers could interleave a queue during a rebalance. The rules
//! (Java `RebalanceImpl.lockAll`, `ProcessQueue.isLockExpired`):
//!
//! - a newly assigned queue is locked before its first pull;
//! - every `lock_interval` (20 s) the lock is renewed;
//! - a lock not renewed for `lock_max_live_time` (30 s) is treated as lost, and the queue stops
//!   consuming until it is locked again (the broker itself expires locks after 60 s, so the
//!   client gives up well before another consumer can get it) — [`lock_allows_consume`];
//! - a queue whose lock was refused or lost asks again after `pull_delay_on_error`, and
//!   consumes once it is granted.
//!
//! Broadcasting consumers own every queue alone and take no locks ([`needs_broker_lock`]).

use crate::consumer::config::PushConsumerConfig;
use std::time::Duration;

/// Timeout of `LOCK_BATCH_MQ` and `UNLOCK_BATCH_MQ` (Java: 1 s).
pub const LOCK_RPC_TIMEOUT: Duration = Duration::from_millis(1000);
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Whether this consumer must hold broker locks: orderly consumption in clustering mode.
pub fn needs_broker_lock(cfg: &PushConsumerConfig) -> bool {
    cfg.is_orderly() && cfg.is_clustering()
}

/// Whether an orderly queue may hand messages to the listener now: always when broadcasting,
/// otherwise only while its lock is held and not older than `lock_max_live_time`.
pub fn lock_allows_consume(cfg: &PushConsumerConfig, lock: &LockState, now_ms: i64) -> bool {
    !cfg.is_clustering() || lock.is_held(now_ms, cfg.lock_max_live_time)
}

/// The client's view of one queue's broker lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LockState {
    /// The last `LOCK_BATCH_MQ` covering the queue granted it.
    pub locked: bool,
    /// When the lock was last granted (epoch ms), if ever.
    pub last_lock_ms: Option<i64>,
}

impl LockState {
    /// Whether the last grant is older than `lock_max_live_time` (never granted counts as
    /// expired). The comparison is strict, as Java's: exactly 30 s old is still valid.
    pub fn is_expired(&self, now_ms: i64, lock_max_live_time: Duration) -> bool {
        match self.last_lock_ms {
            Some(at) => now_ms.saturating_sub(at) > millis(lock_max_live_time),
            None => true,
        }
    }

    /// Whether the queue may be consumed: locked and not expired.
    pub fn is_held(&self, now_ms: i64, lock_max_live_time: Duration) -> bool {
        self.locked && !self.is_expired(now_ms, lock_max_live_time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::config::{ConsumeMode, MessageModel};

    #[test]
    fn only_orderly_clustering_needs_locks() {
        let mut cfg = PushConsumerConfig::new("g");
        assert!(!needs_broker_lock(&cfg));
        cfg.consume_mode = ConsumeMode::Orderly;
        assert!(needs_broker_lock(&cfg));
        cfg.message_model = MessageModel::Broadcasting;
        assert!(!needs_broker_lock(&cfg));
    }

    #[test]
    fn broadcasting_consumes_without_a_lock() {
        let mut cfg = PushConsumerConfig {
            consume_mode: ConsumeMode::Orderly,
            ..PushConsumerConfig::new("g")
        };
        let mut lock = LockState::default();
        assert!(!lock_allows_consume(&cfg, &lock, 0));
        lock.locked = true;
        lock.last_lock_ms = Some(0);
        assert!(lock_allows_consume(&cfg, &lock, 30_000));
        assert!(!lock_allows_consume(&cfg, &lock, 30_001));
        cfg.message_model = MessageModel::Broadcasting;
        lock.locked = false;
        assert!(lock_allows_consume(&cfg, &lock, 30_001));
    }
}
