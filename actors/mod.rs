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

/// Sends `tick` to the actor at `addr` every `every` (the first after `every`), from a task
/// of its own rather than from a timer in the actor's context: actix polls every timer of an
/// actor each time the actor wakes, which for an actor on the data path is many times per
/// timer period. The task ends when the actor is gone; abort its handle to end it sooner (a
/// restarted actor starts a new one).
pub(crate) fn spawn_ticker<A, M>(
    addr: actix::WeakAddr<A>,
    every: std::time::Duration,
    tick: M,
) -> actix_rt::task::JoinHandle<()>
where
    A: actix::Actor<Context = actix::Context<A>> + actix::Handler<M>,
    M: actix::Message + Clone + Send + 'static,
    M::Result: Send,
{
    actix_rt::spawn(async move {
        let first = actix_rt::time::Instant::now() + every;
        let mut interval = actix_rt::time::interval_at(first, every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let Some(addr) = addr.upgrade() else { break };
            // A full mailbox misses a tick; a closed one ends the ticker.
            if let Err(actix::dev::SendError::Closed(_)) = addr.try_send(tick.clone()) {
                break;
            }
        }
    })
}

/// Wall-clock milliseconds derived from monotonic clock readings the caller already has: the
/// wall clock itself is read again only when the last such read is [`WallClock::REREAD`]
/// old. A queue actor reads the monotonic clock for its pull and call timings anyway; taking
/// the core's `now_ms` from the same reading saves a second clock read per step (each costs
/// tens of nanoseconds in a virtual machine, more than the rest of a pull's bookkeeping per
/// message). A step of the wall clock (NTP) shows within that time.
#[derive(Debug, Default)]
pub(crate) struct WallClock {
    /// A monotonic reading and the wall-clock time read right after it.
    base: Option<(std::time::Instant, i64)>,
}

impl WallClock {
    /// How long one wall-clock read serves.
    pub(crate) const REREAD: std::time::Duration = std::time::Duration::from_secs(1);

    /// The wall-clock time, in ms since the Unix epoch, at the monotonic reading `at`.
    pub(crate) fn ms_at(&mut self, at: std::time::Instant) -> i64 {
        if let Some((base_at, base_ms)) = self.base {
            if let Some(since) = at.checked_duration_since(base_at) {
                if since < Self::REREAD {
                    let since_ms = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
                    return base_ms.saturating_add(since_ms);
                }
            }
        }
        let ms = now_ms();
        self.base = Some((at, ms));
        ms
    }
}

/// The builder methods every consumer kind shares — where its client instance comes from, and
/// its group — written once. `$group` is the path of the group's field in the builder.
macro_rules! client_and_group_methods {
    ($builder:ty, $($group:ident).+) => {
        impl $builder {
            /// The name servers (`;`-separated): a client instance is created for this
            /// consumer and shut down with it.
            pub fn namesrv_addr(mut self, addr: impl Into<String>) -> Self {
                self.namesrv_addr = Some(addr.into());
                self
            }

            /// Shares an existing client instance (its routes and connections) instead.
            pub fn client(mut self, client: Client) -> Self {
                self.client = Some(client);
                self
            }

            /// The consumer group.
            pub fn group(mut self, group: impl Into<String>) -> Self {
                self.$($group).+ = group.into();
                self
            }

            /// The configuration of the client instance created for this consumer (RPC
            /// hooks, credentials, TLS, timeouts); a `namesrv_addr` given to the builder replaces
            /// its name servers. Not used with [`client`](Self::client): that client has its
            /// own.
            pub fn client_config(mut self, config: $crate::ClientConfig) -> Self {
                self.client_config = Some(config);
                self
            }

            /// Signs every request of the client instance created for this consumer with
            /// `credentials` (for a cluster with ACL; see
            /// [`ClientConfig::credentials`]($crate::ClientConfig::credentials)).
            pub fn credentials(mut self, credentials: $crate::acl::Credentials) -> Self {
                self.client_config
                    .get_or_insert_with(|| $crate::ClientConfig::new(""))
                    .credentials = Some(credentials);
                self
            }
        }
    };
}

/// The `namespace` builder method of every consumer kind. `$namespace` is the path of the
/// namespace field in the builder.
macro_rules! namespace_method {
    ($builder:ty, $($namespace:ident).+) => {
        impl $builder {
            /// The namespace (Java `setNamespace`): the group and topics given to this builder
            /// are `namespace%name` on the wire, and the topics and queues handed back come
            /// without it (see [`crate::namespace`]). Blank: none.
            pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
                self.$($namespace).+ = Some(namespace.into());
                self
            }
        }
    };
}

pub(crate) mod admin;
/// Actors of the embedded broker.
#[cfg(feature = "embedded")]
pub(crate) mod broker;

pub(crate) mod client;
pub(crate) mod connection;
pub(crate) mod consume_pool;
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
pub(crate) mod supervised_consumer;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn the_wall_clock_follows_the_monotonic_readings_between_reads() {
        let mut clock = WallClock::default();
        let start = Instant::now();
        let before = now_ms();
        let first = clock.ms_at(start);
        let after = now_ms();
        assert!(
            (before..=after).contains(&first),
            "{before} <= {first} <= {after}"
        );
        // Within the reread window the time is derived: exactly the monotonic distance.
        assert_eq!(clock.ms_at(start + Duration::from_millis(250)), first + 250);
        assert_eq!(clock.ms_at(start + Duration::from_millis(999)), first + 999);
        // A reading before the base is not derived from it.
        if let Some(before_base) = start.checked_sub(Duration::from_secs(5)) {
            let earlier = clock.ms_at(before_base);
            assert!(earlier >= first, "read again: {earlier} against {first}");
        }
    }

    #[test]
    fn the_wall_clock_is_read_again_once_its_last_read_is_a_second_old() {
        let mut clock = WallClock::default();
        let start = Instant::now();
        let first = clock.ms_at(start);
        // Two seconds on the monotonic clock, none on the wall clock: a derived time would
        // be 2,000 ms ahead of the wall clock; a fresh read is not.
        let later = clock.ms_at(start + Duration::from_secs(2));
        assert!(later < first + 1_000, "{later} was derived from {first}");
        // The fresh read is the new base.
        assert_eq!(
            clock.ms_at(start + Duration::from_secs(2) + Duration::from_millis(10)),
            later + 10
        );
    }
}
