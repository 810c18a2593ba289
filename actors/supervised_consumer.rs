//! A push consumer as one actor an application places under its own `Supervisor`.
//!
//! Inside, a consumer already restarts its own actors ([`RestartPolicy`]); this is the level
//! above: the whole consumer, started afresh from a factory when it cannot start or stops
//! without being asked to. Restarts of the whole are paced and bounded by the consumer
//! config's `restart_policy` as well, so a cluster that is down is retried with backoff rather
//! than in a loop.

use std::rc::Rc;

use actix::prelude::*;
use futures::StreamExt;

use crate::actors::consumer::{ConsumerEvent, ConsumerStatus, PushConsumer, PushConsumerBuilder};
use crate::consumer::supervision::{RestartDecision, RestartTracker};

/// A [`PushConsumer`] as an actix actor, for an application's supervision tree.
///
/// Each (re)start calls the factory for a fresh [`PushConsumerBuilder`] and starts it. When the
/// start fails, or the consumer stops without [`StopConsumer`], the actor stops and its
/// `Supervisor` restarts it, after the backoff of `restart_policy` (the factory's config); past
/// the policy's limit it stays stopped and says so in the log. A restart drops the previous
/// consumer, which shuts it down gracefully in the background.
///
/// ```no_run
/// use actix::prelude::*;
/// use rocketmq_actor::consumer::{ConsumeStatus, SupervisedConsumer, StopConsumer};
/// use rocketmq_actor::PushConsumer;
///
/// #[actix_rt::main]
/// async fn main() {
///     let consumer = Supervisor::start(|_| {
///         SupervisedConsumer::new(|| {
///             PushConsumer::builder()
///                 .namesrv_addr("127.0.0.1:9876")
///                 .group("billing")
///                 .subscribe("Orders", "*")
///                 .listener_fn(|_messages, ctx| async move { (ConsumeStatus::Success, ctx) })
///         })
///     });
///     tokio::signal::ctrl_c().await.ok();
///     consumer.send(StopConsumer).await.ok();
/// }
/// ```
pub struct SupervisedConsumer {
    make: Rc<dyn Fn() -> PushConsumerBuilder>,
    consumer: Option<PushConsumer>,
    restarts: RestartTracker,
    /// Stopped on purpose ([`StopConsumer`]) or given up: a supervisor's restart does nothing.
    retired: bool,
    /// A restart waits for its backoff: `started` must not start the consumer at once.
    backing_off: bool,
    /// Bumped at every start, so the events of a previous consumer are ignored.
    generation: u64,
}

impl SupervisedConsumer {
    /// An actor that starts the consumer `make` builds, and builds a fresh one at each restart.
    pub fn new(make: impl Fn() -> PushConsumerBuilder + 'static) -> Self {
        let policy = make().current_config().restart_policy;
        SupervisedConsumer {
            make: Rc::new(make),
            consumer: None,
            restarts: RestartTracker::new(policy),
            retired: false,
            backing_off: false,
            generation: 0,
        }
    }

    fn start_consumer(&mut self, ctx: &mut Context<Self>) {
        self.generation += 1;
        let generation = self.generation;
        let start = (self.make)().start();
        ctx.wait(
            start
                .into_actor(self)
                .map(move |started, act, ctx| match started {
                    Ok(consumer) => {
                        let events = consumer
                            .events()
                            .map(move |event| Watched(generation, event));
                        ctx.add_stream(events);
                        act.consumer = Some(consumer);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "consumer did not start; restarting it");
                        ctx.stop();
                    }
                }),
        );
    }
}

/// An event of the consumer started at some generation.
struct Watched(u64, ConsumerEvent);

impl Actor for SupervisedConsumer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if !self.retired && !self.backing_off {
            self.start_consumer(ctx);
        }
    }
}

impl Supervised for SupervisedConsumer {
    fn restarting(&mut self, ctx: &mut Self::Context) {
        // Dropping the handle shuts the old consumer down in the background.
        self.consumer = None;
        if self.retired {
            return;
        }
        match self.restarts.on_failure(crate::actors::now_ms()) {
            RestartDecision::Restart { after } => {
                tracing::warn!(restarts = self.restarts.restarts(), backoff = ?after, "consumer restarting");
                // `started` runs after this; the backoff comes first.
                self.backing_off = true;
                ctx.run_later(after, |act, ctx| {
                    act.backing_off = false;
                    if !act.retired {
                        act.start_consumer(ctx);
                    }
                });
            }
            RestartDecision::GiveUp { failures } => {
                tracing::error!(
                    failures,
                    "consumer failed too often; giving up (see restart_policy)"
                );
                self.retired = true;
            }
        }
    }
}

impl StreamHandler<Watched> for SupervisedConsumer {
    fn handle(&mut self, Watched(generation, event): Watched, ctx: &mut Self::Context) {
        if generation == self.generation && event == ConsumerEvent::Stopped && !self.retired {
            tracing::warn!("consumer stopped without being asked to; restarting it");
            ctx.stop();
        }
    }

    fn finished(&mut self, _ctx: &mut Self::Context) {
        // The event stream of a consumer ends when it stops; `Stopped` said so already.
    }
}

/// Shuts the consumer down gracefully and keeps it down (a supervisor's restart starts nothing).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopConsumer;

impl Handler<StopConsumer> for SupervisedConsumer {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: StopConsumer, _ctx: &mut Self::Context) -> Self::Result {
        self.retired = true;
        let consumer = self.consumer.take();
        Box::pin(
            async move {
                if let Some(consumer) = consumer {
                    consumer.shutdown().await;
                }
            }
            .into_actor(self),
        )
    }
}

/// The running consumer's [`ConsumerStatus`] (`None` while it is not running).
#[derive(Message)]
#[rtype(result = "Option<ConsumerStatus>")]
pub struct GetConsumerStatus;

impl Handler<GetConsumerStatus> for SupervisedConsumer {
    type Result = ResponseFuture<Option<ConsumerStatus>>;

    fn handle(&mut self, _msg: GetConsumerStatus, _ctx: &mut Self::Context) -> Self::Result {
        let root = self.consumer.as_ref().map(PushConsumer::status_soon);
        Box::pin(async move {
            match root {
                Some(request) => Some(request.await),
                None => None,
            }
        })
    }
}

/// Stops the actor as a failure would (tests: the supervisor must restart the consumer).
#[cfg(test)]
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Fail;

#[cfg(test)]
impl Handler<Fail> for SupervisedConsumer {
    type Result = ();

    fn handle(&mut self, _msg: Fail, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
