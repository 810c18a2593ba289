//! The client side of one remoting connection, without the socket: which requests wait for an
//! answer (matched by `opaque`, whatever the order answers come in), and when to reconnect.
//!
//! The connection actor (`actors/connection.rs`) keeps one [`RequestTable`] and one [`Backoff`]
//! per remote address and owns the socket and the timers; the simulator (`crate::sim`) keeps the
//! same per simulated connection. What waits is the executor's business (`T`: a reply channel
//! in the actor, a continuation in the simulator).
//!
//! ```ignore
//! let mut table = RequestTable::new();
//! let a = table.register("a");
//! let b = table.register("b");
//! assert_eq!(table.take(b).map(|p| p.reply), Some("b")); // answers match by opaque
//! assert_eq!(table.drain().len(), 1); // the socket closed: `a` fails
//! ```

use std::collections::HashMap;
use std::time::Duration;

/// Below this many entries the table is not swept for abandoned requests.
const ABANDONED_SWEEP_MIN: usize = 1024;

/// A request waiting for its answer.
#[derive(Debug)]
pub(crate) struct Pending<T> {
    /// Who waits.
    pub reply: T,
}

/// The requests of one connection that wait for an answer.
#[derive(Debug)]
pub(crate) struct RequestTable<T> {
    next_opaque: i32,
    pending: HashMap<i32, Pending<T>, foldhash::fast::RandomState>,
    /// Table size at which the next sweep of abandoned requests runs.
    sweep_at: usize,
}

impl<T> Default for RequestTable<T> {
    fn default() -> Self {
        RequestTable {
            next_opaque: 0,
            pending: HashMap::default(),
            sweep_at: ABANDONED_SWEEP_MIN,
        }
    }
}

impl<T> RequestTable<T> {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The opaque of the next frame: the counter wraps (as Java's does) and skips values still
    /// waiting after a wrap.
    pub(crate) fn allocate_opaque(&mut self) -> i32 {
        loop {
            self.next_opaque = self.next_opaque.wrapping_add(1);
            if !self.pending.contains_key(&self.next_opaque) {
                return self.next_opaque;
            }
        }
    }

    /// Registers a request that waits for its answer; returns its opaque.
    pub(crate) fn register(&mut self, reply: T) -> i32 {
        let opaque = self.allocate_opaque();
        self.pending.insert(opaque, Pending { reply });
        opaque
    }

    /// The request an answer (or a timeout) is for, if it still waits.
    pub(crate) fn take(&mut self, opaque: i32) -> Option<Pending<T>> {
        self.pending.remove(&opaque)
    }

    /// Whether the request of `opaque` still waits for its answer: registered, and its waiter
    /// still there by `alive`.
    pub(crate) fn is_waiting(&self, opaque: i32, alive: impl Fn(&T) -> bool) -> bool {
        self.pending
            .get(&opaque)
            .is_some_and(|pending| alive(&pending.reply))
    }

    /// Every waiting request, in opaque order (the connection closed: all of them fail).
    pub(crate) fn drain(&mut self) -> Vec<(i32, Pending<T>)> {
        let mut all: Vec<(i32, Pending<T>)> = self.pending.drain().collect();
        all.sort_unstable_by_key(|(opaque, _)| *opaque);
        all
    }

    /// Drops requests whose waiter gave up, once the table has grown to twice its size after
    /// the last sweep (amortised O(1) per request). Callers that wait outside the connection
    /// (and time out there) leave their entries behind otherwise.
    pub(crate) fn sweep_abandoned(&mut self, abandoned: impl Fn(&T) -> bool) {
        if self.pending.len() < self.sweep_at {
            return;
        }
        self.pending.retain(|_, pending| !abandoned(&pending.reply));
        self.sweep_at = (self.pending.len() * 2).max(ABANDONED_SWEEP_MIN);
    }

    /// How many requests wait.
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }
}

/// The reconnect delay: `initial` after the first failure, doubling on each further one up to
/// `max`, back to `initial` once a connect succeeds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    /// A backoff that starts at `initial` and stops growing at `max`.
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            current: initial,
        }
    }

    /// A connect failed or the connection dropped: how long to wait before the next connect.
    pub(crate) fn on_failure(&mut self) -> Duration {
        let wait = self.current;
        self.current = (self.current * 2).min(self.max);
        wait
    }

    /// A connect succeeded.
    pub(crate) fn on_connected(&mut self) {
        self.current = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_match_their_request_in_any_order_and_late_ones_find_nothing() {
        let mut table = RequestTable::new();
        let a = table.register('a');
        let b = table.register('b');
        assert_ne!(a, b);
        assert_eq!(table.take(b).map(|p| p.reply), Some('b'));
        assert_eq!(table.take(a).map(|p| p.reply), Some('a'));
        assert!(table.take(a).is_none(), "a second answer finds nothing");
    }

    #[test]
    fn the_opaque_counter_wraps_around_requests_still_waiting() {
        let mut table = RequestTable::new();
        table.next_opaque = i32::MAX - 1;
        let last = table.register(());
        assert_eq!(last, i32::MAX);
        let first = table.register(());
        assert_eq!(first, i32::MIN);
        table.next_opaque = i32::MAX - 1;
        assert_eq!(
            table.allocate_opaque(),
            i32::MIN.wrapping_add(1),
            "skips both"
        );
    }

    #[test]
    fn a_closed_connection_fails_everything_in_order() {
        let mut table = RequestTable::new();
        for code in [3, 1, 2] {
            table.register(code);
        }
        let failed: Vec<i32> = table.drain().into_iter().map(|(_, p)| p.reply).collect();
        assert_eq!(failed, vec![3, 1, 2]);
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn abandoned_requests_are_swept_when_the_table_doubles() {
        let mut table = RequestTable::new();
        for i in 0..ABANDONED_SWEEP_MIN {
            table.register(i % 2 == 0);
        }
        table.sweep_abandoned(|gave_up| *gave_up);
        assert_eq!(table.len(), ABANDONED_SWEEP_MIN / 2);
        table.sweep_abandoned(|_| true);
        assert_eq!(
            table.len(),
            ABANDONED_SWEEP_MIN / 2,
            "not before it doubles again"
        );
    }

    #[test]
    fn the_backoff_doubles_to_its_cap_and_resets_on_connect() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let waits: Vec<u128> = (0..4).map(|_| backoff.on_failure().as_millis()).collect();
        assert_eq!(waits, vec![100, 200, 350, 350]);
        backoff.on_connected();
        assert_eq!(backoff.on_failure(), Duration::from_millis(100));
    }
}
