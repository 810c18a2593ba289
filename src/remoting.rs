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
use std::time::{Duration, Instant};

/// Below this many entries the table is not swept for abandoned requests.
const ABANDONED_SWEEP_MIN: usize = 1024;

/// A request waiting for its answer.
#[derive(Debug)]
pub(crate) struct Pending<T> {
    /// Who waits.
    pub reply: T,
    /// When it stops waiting, for a request whose caller leaves its timeout to the table's
    /// owner (see [`RequestTable::take_expired`]).
    pub expiry: Option<Expiry>,
}

/// The deadline of a request whose timeout the connection enforces instead of its caller: a
/// queue actor's pull, one per queue at all times, which would otherwise register a timer of
/// its own with the runtime per pull. The connection sweeps its table on a coarse tick, as
/// Java's `scanResponseTable` does once a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expiry {
    /// When the request fails with a timeout if no answer came.
    pub at: Instant,
    /// The timeout `at` was computed from (for the error).
    pub timeout: Duration,
    /// The request's code (for the error).
    pub code: i32,
}

impl Expiry {
    /// The expiry of a request with `code` sent at `start` that waits up to `timeout`; `None`
    /// when that is past what the clock can represent (it then waits for its answer).
    pub(crate) fn after(start: Instant, timeout: Duration, code: i32) -> Option<Expiry> {
        Some(Expiry {
            at: start.checked_add(timeout)?,
            timeout,
            code,
        })
    }
}

/// The requests of one connection that wait for an answer.
#[derive(Debug)]
pub(crate) struct RequestTable<T> {
    next_opaque: i32,
    pending: HashMap<i32, Pending<T>, foldhash::fast::RandomState>,
    /// Table size at which the next sweep of abandoned requests runs.
    sweep_at: usize,
    /// How many pending requests have an [`Expiry`]: a sweep of a table with none is free.
    expiring: usize,
}

impl<T> Default for RequestTable<T> {
    fn default() -> Self {
        RequestTable {
            next_opaque: 0,
            pending: HashMap::default(),
            sweep_at: ABANDONED_SWEEP_MIN,
            expiring: 0,
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
    #[cfg(test)]
    pub(crate) fn register(&mut self, reply: T) -> i32 {
        self.register_expiring(reply, None)
    }

    /// Registers a request that waits for its answer until `expiry`, if any (see
    /// [`RequestTable::take_expired`]); returns its opaque.
    pub(crate) fn register_expiring(&mut self, reply: T, expiry: Option<Expiry>) -> i32 {
        let opaque = self.allocate_opaque();
        self.expiring += usize::from(expiry.is_some());
        self.pending.insert(opaque, Pending { reply, expiry });
        opaque
    }

    /// The request an answer (or a timeout) is for, if it still waits.
    pub(crate) fn take(&mut self, opaque: i32) -> Option<Pending<T>> {
        let taken = self.pending.remove(&opaque);
        if taken.as_ref().is_some_and(|p| p.expiry.is_some()) {
            self.expiring -= 1;
        }
        taken
    }

    /// Takes out the requests whose [`Expiry`] is due at `now`, in opaque order, for their
    /// owner to fail with a timeout; an answer that comes later finds nothing.
    pub(crate) fn take_expired(&mut self, now: Instant) -> Vec<(i32, Pending<T>)> {
        if self.expiring == 0 {
            return Vec::new();
        }
        let mut due: Vec<i32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.expiry.is_some_and(|e| e.at <= now))
            .map(|(opaque, _)| *opaque)
            .collect();
        due.sort_unstable();
        due.into_iter()
            .filter_map(|opaque| self.take(opaque).map(|p| (opaque, p)))
            .collect()
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
        self.expiring = 0;
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
        self.expiring = self.pending.values().filter(|p| p.expiry.is_some()).count();
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
    fn only_requests_past_their_expiry_are_taken_out_and_their_answers_then_find_nothing() {
        let mut table = RequestTable::new();
        let now = Instant::now();
        let expiry = |after_ms| {
            Some(Expiry {
                at: now + Duration::from_millis(after_ms),
                timeout: Duration::from_millis(after_ms),
                code: 11,
            })
        };
        let forever = table.register('f');
        let soon = table.register_expiring('s', expiry(10));
        let later = table.register_expiring('l', expiry(50));
        let answered = table.register_expiring('a', expiry(10));
        assert!(table.take(answered).is_some(), "answered in time");
        assert!(table.take_expired(now).is_empty(), "nothing due yet");
        let due = table.take_expired(now + Duration::from_millis(10));
        let due: Vec<(i32, char)> = due.into_iter().map(|(o, p)| (o, p.reply)).collect();
        assert_eq!(due, vec![(soon, 's')]);
        assert!(table.take(soon).is_none(), "a late answer finds nothing");
        let due = table.take_expired(now + Duration::from_secs(3600));
        assert_eq!(due.iter().map(|(o, _)| *o).collect::<Vec<_>>(), vec![later]);
        assert_eq!(table.len(), 1, "one without an expiry waits on");
        assert!(table.take(forever).is_some());
        assert_eq!(table.expiring, 0);
    }

    #[test]
    fn the_count_of_expiring_requests_follows_sweeps_and_drains() {
        let mut table = RequestTable::new();
        let expiry = Some(Expiry {
            at: Instant::now(),
            timeout: Duration::ZERO,
            code: 11,
        });
        for i in 0..ABANDONED_SWEEP_MIN {
            table.register_expiring(i % 2 == 0, expiry);
        }
        table.sweep_abandoned(|gave_up| *gave_up);
        assert_eq!(table.expiring, ABANDONED_SWEEP_MIN / 2);
        table.drain();
        assert_eq!(table.expiring, 0);
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
