//! Restart policies of supervised actors: how often one may fail within a window, and how long
//! it waits before it runs again.
//!
//! The consumer's actors run under actix `Supervisor`s: an actor that stops while its address
//! is still held is restarted in place (its mailbox and its fields survive, its timers and
//! spawned futures do not). A [`RestartTracker`] decides, from the policy and the recent
//! failures, whether the restart goes ahead and after what delay, or whether the actor gives up
//! and its parent takes over (a queue actor that gives up is started again, fresh, by the next
//! rebalance pass). Sans-I/O: time comes in as `now_ms`.
//!
//! ```
//! use std::time::Duration;
//! use rocketmq_actor::consumer::{RestartDecision, RestartPolicy, RestartTracker};
//!
//! let policy = RestartPolicy {
//!     max_restarts: 2,
//!     window: Duration::from_secs(60),
//!     backoff_initial: Duration::from_millis(100),
//!     backoff_max: Duration::from_secs(1),
//! };
//! let mut tracker = RestartTracker::new(policy);
//! assert_eq!(tracker.on_failure(0), RestartDecision::Restart { after: Duration::from_millis(100) });
//! assert_eq!(tracker.on_failure(10), RestartDecision::Restart { after: Duration::from_millis(200) });
//! assert_eq!(tracker.on_failure(20), RestartDecision::GiveUp { failures: 3 });
//! // A minute later the old failures no longer count.
//! assert_eq!(tracker.on_failure(80_000), RestartDecision::Restart { after: Duration::from_millis(100) });
//! ```

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::serde_duration;

/// How a supervised actor of a consumer is restarted (config `restart_policy`).
///
/// At most `max_restarts` restarts within any `window`; each restart waits
/// `backoff_initial`, doubling with every further failure in the window up to `backoff_max`.
/// One failure more within the window and the actor gives up (see the module documentation for
/// what its parent does then).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RestartPolicy {
    /// Restarts allowed within `window` (0: never restart).
    pub max_restarts: u32,
    /// The window failures are counted in.
    #[serde(with = "serde_duration")]
    pub window: Duration,
    /// Delay before the first restart.
    #[serde(with = "serde_duration")]
    pub backoff_initial: Duration,
    /// Upper bound of the delay.
    #[serde(with = "serde_duration")]
    pub backoff_max: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 10,
            window: Duration::from_secs(60),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
        }
    }
}

/// What to do with an actor that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartDecision {
    /// Run it again after this delay.
    Restart {
        /// The backoff.
        after: Duration,
    },
    /// Too many failures within the window: stop restarting.
    GiveUp {
        /// Failures counted within the window, this one included.
        failures: u32,
    },
}

/// The failures of one supervised actor and the decision for the next one.
#[derive(Debug, Clone)]
pub struct RestartTracker {
    policy: RestartPolicy,
    /// Times of the failures within the window, oldest first.
    failures: VecDeque<i64>,
    restarts: u64,
}

impl RestartTracker {
    /// A tracker with no failure yet.
    pub fn new(policy: RestartPolicy) -> Self {
        RestartTracker {
            policy,
            failures: VecDeque::new(),
            restarts: 0,
        }
    }

    /// The actor failed at `now_ms`: restart it (after the backoff) or give up.
    pub fn on_failure(&mut self, now_ms: i64) -> RestartDecision {
        let window_ms = i64::try_from(self.policy.window.as_millis()).unwrap_or(i64::MAX);
        while self
            .failures
            .front()
            .is_some_and(|&at| now_ms.saturating_sub(at) >= window_ms)
        {
            self.failures.pop_front();
        }
        self.failures.push_back(now_ms);
        let failures = u32::try_from(self.failures.len()).unwrap_or(u32::MAX);
        if failures > self.policy.max_restarts {
            return RestartDecision::GiveUp { failures };
        }
        self.restarts += 1;
        let doublings = failures.saturating_sub(1).min(31);
        let after = self
            .policy
            .backoff_initial
            .saturating_mul(1u32 << doublings)
            .min(self.policy.backoff_max);
        RestartDecision::Restart { after }
    }

    /// Restarts decided since the tracker was made.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_restarts: u32) -> RestartPolicy {
        RestartPolicy {
            max_restarts,
            window: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_millis(500),
        }
    }

    #[test]
    fn the_backoff_doubles_within_the_window_up_to_its_bound() {
        let mut tracker = RestartTracker::new(policy(10));
        let delays: Vec<_> = (0..5)
            .map(|i| match tracker.on_failure(i) {
                RestartDecision::Restart { after } => after.as_millis(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(delays, [100, 200, 400, 500, 500]);
        assert_eq!(tracker.restarts(), 5);
    }

    #[test]
    fn one_failure_past_the_limit_gives_up_and_old_failures_age_out() {
        let mut tracker = RestartTracker::new(policy(2));
        assert!(matches!(
            tracker.on_failure(0),
            RestartDecision::Restart { .. }
        ));
        assert!(matches!(
            tracker.on_failure(5_000),
            RestartDecision::Restart { .. }
        ));
        assert_eq!(
            tracker.on_failure(9_999),
            RestartDecision::GiveUp { failures: 3 }
        );
        // At 10 s the first failure leaves the window; the one that gave up still counts.
        assert_eq!(
            tracker.on_failure(10_000),
            RestartDecision::GiveUp { failures: 3 }
        );
        assert!(matches!(
            tracker.on_failure(30_000),
            RestartDecision::Restart { .. }
        ));
    }

    #[test]
    fn a_policy_of_no_restarts_gives_up_at_once() {
        let mut tracker = RestartTracker::new(policy(0));
        assert_eq!(
            tracker.on_failure(0),
            RestartDecision::GiveUp { failures: 1 }
        );
    }

    #[test]
    fn a_policy_reads_from_humantime_strings() {
        let read: RestartPolicy =
            serde_json::from_str(r#"{"max_restarts":3,"window":"1m","backoff_max":"2s"}"#)
                .expect("valid policy");
        assert_eq!(read.max_restarts, 3);
        assert_eq!(read.window, Duration::from_secs(60));
        assert_eq!(read.backoff_initial, Duration::from_millis(100));
        assert_eq!(read.backoff_max, Duration::from_secs(2));
    }
}
