//! The consume threads of a consumer: where its synchronous listener calls run once they are
//! slow, as Java's `consumeThreadMax` threads run every call.
//!
//! A synchronous listener starts on the queue actors' own thread, where a call that returns
//! in a few microseconds costs nothing but the call. A call that blocks (a database round
//! trip) or burns CPU there would hold up every queue, pull and heartbeat of the consumer and
//! use one core, so the pool watches how long calls take:
//!
//! - on the consumer's thread, each run of calls is timed (its first call, and the whole run):
//!   calls of more than [`SLOW_CALL`] on average, over at least [`SLOW_RUN`], send the
//!   consumer's calls to the pool;
//! - on the pool, each call is timed: once the average falls under [`QUICK_CALL`] the calls go
//!   back to the consumer's thread.
//!
//! The pool has up to `consume_thread_max` threads, started as calls need them; the
//! consumer's permits (`consume_concurrency`) bound the calls in flight, so each pooled call
//! finds a thread. Order is kept by the callers: an orderly queue hands out its next batch
//! only once the last one is settled, whichever thread ran it.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::channel::oneshot;

/// A call slower than this on average (on the consumer's thread) sends calls to the pool.
pub(crate) const SLOW_CALL: Duration = Duration::from_micros(50);

/// Calls on the consumer's thread are judged slow only over a run this long at least: a
/// short run that was slow because the thread was preempted says nothing of the listener.
pub(crate) const SLOW_RUN: Duration = Duration::from_micros(500);

/// Pooled calls faster than this on average go back to the consumer's thread. Well under
/// [`SLOW_CALL`], so that a listener near either bound does not go back and forth.
pub(crate) const QUICK_CALL: Duration = Duration::from_micros(10);

/// A call handed to a consume thread.
type Job = Box<dyn FnOnce() + Send>;

/// The consume threads of one consumer, shared by its listener (cheap to clone). Threads end
/// once every handle is dropped and the calls handed to them are done.
#[derive(Clone)]
pub(crate) struct ConsumePool {
    jobs: crossbeam_channel::Sender<Job>,
    shared: Arc<PoolShared>,
}

/// What the consume threads and the handles share.
struct PoolShared {
    jobs: crossbeam_channel::Receiver<Job>,
    /// At most this many threads (`consume_thread_max`, set at start).
    threads_max: AtomicUsize,
    /// Threads started so far.
    threads: AtomicUsize,
    /// Calls handed over and not yet finished.
    in_flight: AtomicUsize,
    /// Whether calls go to the pool rather than run on the consumer's thread.
    pooled: AtomicBool,
    /// The pooled calls' average duration, in nanoseconds (an exponential moving average).
    pooled_call_nanos: AtomicU64,
    /// Names the threads (`rmq-consume-GROUP-N`, as Java's `ConsumeMessageThread_GROUP_N`).
    name: Mutex<String>,
}

impl Default for ConsumePool {
    fn default() -> Self {
        Self::new()
    }
}

impl ConsumePool {
    /// A pool with no thread yet, sized by [`ConsumePool::configure`] (20 threads until then).
    pub(crate) fn new() -> Self {
        let (jobs, receiver) = crossbeam_channel::unbounded();
        ConsumePool {
            jobs,
            shared: Arc::new(PoolShared {
                jobs: receiver,
                threads_max: AtomicUsize::new(20),
                threads: AtomicUsize::new(0),
                in_flight: AtomicUsize::new(0),
                pooled: AtomicBool::new(false),
                pooled_call_nanos: AtomicU64::new(0),
                name: Mutex::new(String::from("rmq-consume")),
            }),
        }
    }

    /// Sizes the pool (`consume_thread_max`) and names its threads after the consumer's
    /// group, when the consumer starts.
    pub(crate) fn configure(&self, threads_max: usize, group: &str) {
        self.shared
            .threads_max
            .store(threads_max.max(1), Ordering::Relaxed);
        if let Ok(mut name) = self.shared.name.lock() {
            *name = format!("rmq-consume-{group}");
        }
    }

    /// Whether calls go to the pool now (the last calls were slow).
    #[inline]
    pub(crate) fn pooled(&self) -> bool {
        self.shared.pooled.load(Ordering::Relaxed)
    }

    /// Takes in how long `calls` calls run on the consumer's thread took in all: slow ones
    /// send the next calls to the pool. Returns whether they go there now.
    #[inline]
    pub(crate) fn judge_inline(&self, elapsed: Duration, calls: u32) -> bool {
        if calls == 0 || elapsed < SLOW_RUN || elapsed <= SLOW_CALL.saturating_mul(calls) {
            return false;
        }
        let average = elapsed / calls;
        self.shared.pooled_call_nanos.store(
            u64::try_from(average.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if !self.shared.pooled.swap(true, Ordering::Relaxed) {
            tracing::debug!(
                call_us = average.as_micros() as u64,
                "listener calls are slow: running them on the consume threads"
            );
        }
        true
    }

    /// Runs `call` on the consumer's thread, timed for the pool to judge (a single call, as
    /// the hooks' path makes them).
    pub(crate) fn run_timed<T>(&self, call: impl FnOnce() -> T) -> T {
        let mut timer = RunTimer::start();
        let output = call();
        timer.call_done(self, false);
        timer.finish(self);
        output
    }

    /// Runs `call` on a consume thread (one more is started while there are fewer threads
    /// than calls in flight, up to the most); `call` returns how long the listener took,
    /// which the pool judges. Calls wait in one queue, first come first served.
    pub(crate) fn submit(&self, call: impl FnOnce() -> Duration + Send + 'static) {
        let shared = Arc::clone(&self.shared);
        let job: Job = Box::new(move || {
            let took = call();
            shared.took(took);
            shared.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
        let in_flight = self.shared.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        if in_flight > self.shared.threads.load(Ordering::Relaxed) {
            self.start_thread();
        }
        // Cannot fail: the receiving end lives as long as this handle.
        let _ = self.jobs.send(job);
    }

    /// Runs a listener call on a consume thread, as [`ConsumePool::submit`], inside `span`
    /// (the user's log lines carry the consumer and queue) and under a panic guard: `done`
    /// gets there what `outcome` makes of the call's result (or panic) and its duration.
    pub(crate) fn submit_call<T: 'static, O: 'static>(
        &self,
        span: tracing::Span,
        call: impl FnOnce() -> T + Send + 'static,
        outcome: impl FnOnce(std::thread::Result<T>, Duration) -> O + Send + 'static,
        done: Box<dyn FnOnce(O) + Send>,
    ) {
        self.submit(move || {
            let _entered = span.enter();
            let started = Instant::now();
            let result = std::panic::catch_unwind(AssertUnwindSafe(call));
            let elapsed = started.elapsed();
            done(outcome(result, elapsed));
            elapsed
        });
    }

    /// Runs `call` on a consume thread, as [`ConsumePool::submit`]: its result, or the panic
    /// it ended in.
    pub(crate) fn run<T, F>(
        &self,
        call: F,
    ) -> impl std::future::Future<Output = std::thread::Result<T>>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        self.submit(move || {
            let started = Instant::now();
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(call));
            let took = started.elapsed();
            // The caller may be gone (its consumer stopped): nobody to tell then.
            let _ = reply.send(outcome);
            took
        });
        async move {
            result.await.unwrap_or_else(|oneshot::Canceled| {
                Err(Box::new("a consume thread ended before the call") as Box<_>)
            })
        }
    }

    /// Starts one more consume thread unless there are as many as allowed.
    fn start_thread(&self) {
        let shared = &self.shared;
        let max = shared.threads_max.load(Ordering::Relaxed);
        let number = shared.threads.fetch_add(1, Ordering::Relaxed);
        if number >= max {
            shared.threads.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let name = shared
            .name
            .lock()
            .map(|name| format!("{name}-{}", number + 1))
            .unwrap_or_else(|_| format!("rmq-consume-{}", number + 1));
        let worker = Arc::clone(shared);
        let started = std::thread::Builder::new()
            .name(name)
            .spawn(move || worker.work());
        if let Err(error) = started {
            shared.threads.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(%error, "could not start a consume thread");
        }
    }
}

/// Times a run of listener calls on the consumer's thread for the pool to judge: its first
/// call when more follow (a first call that blocks sends the rest to the pool at once), and
/// the whole run unless its first call alone ran and was judged already.
pub(crate) struct RunTimer {
    started: Instant,
    calls: u32,
    first_judged: bool,
}

impl RunTimer {
    /// The run begins now (its own reading: the caller's may be a whole round of other runs
    /// old).
    #[inline]
    pub(crate) fn start() -> Self {
        RunTimer {
            started: Instant::now(),
            calls: 0,
            first_judged: false,
        }
    }

    /// A call of the run ended, and `more` follow: whether the calls go to the pool now.
    #[inline]
    pub(crate) fn call_done(&mut self, pool: &ConsumePool, more: bool) -> bool {
        self.calls += 1;
        if self.calls == 1 && more {
            self.first_judged = true;
            return pool.judge_inline(self.started.elapsed(), 1);
        }
        false
    }

    /// The run ended on this thread.
    #[inline]
    pub(crate) fn finish(self, pool: &ConsumePool) {
        if self.calls > 1 || (self.calls == 1 && !self.first_judged) {
            pool.judge_inline(self.started.elapsed(), self.calls);
        }
    }
}

impl PoolShared {
    /// A consume thread: runs calls until every handle of the pool is gone.
    fn work(&self) {
        while let Ok(job) = self.jobs.recv() {
            job();
        }
        self.threads.fetch_sub(1, Ordering::Relaxed);
    }

    /// Takes in a pooled call's duration: once the average is quick, calls go back to the
    /// consumer's thread.
    fn took(&self, elapsed: Duration) {
        let sample = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let average = self.pooled_call_nanos.load(Ordering::Relaxed);
        // An average over about the last eight calls.
        let average = average - average / 8 + sample / 8;
        self.pooled_call_nanos.store(average, Ordering::Relaxed);
        if u128::from(average) < QUICK_CALL.as_nanos() && self.pooled.swap(false, Ordering::Relaxed)
        {
            tracing::debug!(
                "listener calls are quick again: running them on the consumer's thread"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_inline_calls_send_the_next_to_the_pool_and_quick_pooled_ones_bring_them_back() {
        let pool = ConsumePool::new();
        assert!(!pool.pooled());
        assert!(!pool.judge_inline(Duration::from_micros(32 * 5), 32));
        // Slow on average, but too short a run to tell from a preemption.
        assert!(!pool.judge_inline(Duration::from_micros(200), 2));
        assert!(!pool.pooled());
        assert!(pool.judge_inline(Duration::from_millis(2), 1));
        assert!(pool.pooled());
        // Pooled calls of a microsecond pull the average under QUICK_CALL within a few dozen.
        for _ in 0..64 {
            pool.shared.took(Duration::from_micros(1));
        }
        assert!(!pool.pooled());
    }

    #[test]
    fn calls_run_on_named_threads_up_to_the_most_and_panics_come_back() {
        let pool = ConsumePool::new();
        pool.configure(3, "billing");
        let names: Vec<String> = (0..12)
            .map(|_| {
                futures::executor::block_on(pool.run(|| {
                    std::thread::current()
                        .name()
                        .unwrap_or_default()
                        .to_string()
                }))
                .expect("the call ran")
            })
            .collect();
        assert!(names.iter().all(|n| n.starts_with("rmq-consume-billing-")));
        assert!(pool.shared.threads.load(Ordering::Relaxed) <= 3);
        let panicked = futures::executor::block_on(pool.run(|| -> u32 { panic!("boom") }));
        assert!(panicked.is_err());
        // The thread that caught the panic goes on serving calls.
        assert_eq!(futures::executor::block_on(pool.run(|| 7)).ok(), Some(7));
    }

    #[test]
    fn blocking_calls_run_side_by_side_on_as_many_threads() {
        let pool = ConsumePool::new();
        pool.configure(4, "g");
        let barrier = Arc::new(std::sync::Barrier::new(4));
        // Four calls that each wait for the other three: they finish only if all four run at
        // once.
        let calls: Vec<_> = (0..4)
            .map(|_| {
                let barrier = barrier.clone();
                pool.run(move || {
                    barrier.wait();
                })
            })
            .collect();
        for call in calls {
            assert!(futures::executor::block_on(call).is_ok());
        }
    }
}
