//! The pull schedule service (Java `MQPullConsumerScheduleService`): a pull task per owned
//! queue, each an actor, running the callback registered for the queue's topic again and again
//! with the delay the callback asks for.
//!
//! The service is a [`PullConsumer`] whose queue listener is the [`ScheduleService`] actor: on
//! every division change it starts a [`PullTask`] actor for each queue this member gained (all
//! queues when broadcasting) and stops the ones it lost. A task runs its callback inside
//! `ctx.wait`, so a stop waits for the running call; the member then persists the offset of
//! the lost queue. A panicking callback is logged and retried after 1 s (as Java retries a
//! throwing one), never fatal. A semaphore bounds the callbacks running at once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::FutureExt;
use tokio::sync::Semaphore;

use crate::actors::client::Client;
use crate::actors::member::{
    Member, MemberSpec, OffsetsReset, QueueChange, RecipientQueueListener,
};
use crate::actors::pull_consumer::{resolve_client, resolve_namespace, PullConsumer};
use crate::actors::runtime;
use crate::consumer::config::ConsumeFromWhere;
use crate::consumer::pull_config::PullConsumerConfig;
use crate::consumer::rebalance::plan_changes;
use crate::error::{Error, Result};
use crate::filter::Selector;
use crate::message::MessageQueue;
use crate::namespace::Namespace;

/// Java's default delay between two runs of a task.
pub const DEFAULT_PULL_NEXT_DELAY: Duration = Duration::from_millis(200);
/// The delay after a panicking callback (Java: after an exception).
pub const PANIC_RETRY_DELAY: Duration = Duration::from_secs(1);

/// What a pull task callback gets: the pull consumer to pull and keep offsets with, and the
/// delay before its next run.
#[derive(Debug, Clone)]
pub struct PullTaskContext {
    consumer: PullConsumer,
    next_delay: Duration,
}

impl PullTaskContext {
    /// The consumer to pull with (`pull`, `pull_block_if_not_found`, `fetch_consume_offset`,
    /// `update_consume_offset`…).
    pub fn pull_consumer(&self) -> &PullConsumer {
        &self.consumer
    }

    /// Runs the task again after `delay` (default 200 ms).
    pub fn set_pull_next_delay(&mut self, delay: Duration) {
        self.next_delay = delay;
    }

    /// The delay before the next run.
    pub fn pull_next_delay(&self) -> Duration {
        self.next_delay
    }
}

/// The callback of a topic's pull tasks (Java `PullTaskCallback`).
///
/// ```
/// use std::time::Duration;
/// use rocketmq_actor::pull::{PullTaskCallback, PullTaskContext, PullStatus};
/// use rocketmq_actor::MessageQueue;
///
/// struct Printer;
///
/// #[async_trait::async_trait(?Send)]
/// impl PullTaskCallback for Printer {
///     async fn do_pull_task(&self, queue: &MessageQueue, ctx: &mut PullTaskContext) {
///         let consumer = ctx.pull_consumer().clone();
///         let offset = consumer.fetch_consume_offset(queue, false).await.ok().flatten().unwrap_or(0);
///         if let Ok(result) = consumer.pull(queue, "*", offset, 32).await {
///             if result.status == PullStatus::Found {
///                 println!("{} messages", result.messages.len());
///             }
///             consumer.update_consume_offset(queue, result.next_begin_offset).await;
///         }
///         ctx.set_pull_next_delay(Duration::from_millis(100));
///     }
/// }
/// ```
#[async_trait::async_trait(?Send)]
pub trait PullTaskCallback: Send + 'static {
    /// One run of the task of `queue`.
    async fn do_pull_task(&self, queue: &MessageQueue, ctx: &mut PullTaskContext);
}

struct FnPullTask<F>(F);

#[async_trait::async_trait(?Send)]
impl<F, Fut> PullTaskCallback for FnPullTask<F>
where
    F: Fn(MessageQueue, PullTaskContext) -> Fut + Send + 'static,
    Fut: Future<Output = PullTaskContext> + 'static,
{
    async fn do_pull_task(&self, queue: &MessageQueue, ctx: &mut PullTaskContext) {
        *ctx = (self.0)(queue.clone(), ctx.clone()).await;
    }
}

/// Builds a [`PullScheduleService`].
pub struct PullScheduleServiceBuilder {
    config: PullConsumerConfig,
    namesrv_addr: Option<String>,
    client: Option<Client>,
    callbacks: BTreeMap<String, Box<dyn PullTaskCallback>>,
    max_concurrent_tasks: usize,
    client_config: Option<crate::ClientConfig>,
}

client_and_group_methods!(PullScheduleServiceBuilder, config.consumer_group);
namespace_method!(PullScheduleServiceBuilder, config.namespace);

impl PullScheduleServiceBuilder {
    /// Changes configuration values in place (message model, allocation, timeouts…).
    pub fn configure(mut self, change: impl FnOnce(&mut PullConsumerConfig)) -> Self {
        change(&mut self.config);
        self
    }

    /// At most this many callbacks run at once across all tasks (Java `pullThreadNums`, 20).
    pub fn max_concurrent_tasks(mut self, limit: usize) -> Self {
        self.max_concurrent_tasks = limit;
        self
    }

    /// Runs `callback` for every queue of `topic` this member owns (Java
    /// `registerPullTaskCallback`).
    pub fn register_pull_task(
        mut self,
        topic: impl Into<String>,
        callback: impl PullTaskCallback,
    ) -> Self {
        self.callbacks.insert(topic.into(), Box::new(callback));
        self
    }

    /// [`PullScheduleServiceBuilder::register_pull_task`] with an async closure that gets the
    /// queue and the context by value and gives the context back.
    pub fn register_pull_task_fn<F, Fut>(self, topic: impl Into<String>, callback: F) -> Self
    where
        F: Fn(MessageQueue, PullTaskContext) -> Fut + Send + 'static,
        Fut: Future<Output = PullTaskContext> + 'static,
    {
        self.register_pull_task(topic, FnPullTask(callback))
    }

    /// Validates, joins the group and starts a task for every queue this member owns.
    pub async fn start(self) -> Result<PullScheduleService> {
        runtime::run_on_actix(move || self.start_here()).await?
    }

    async fn start_here(self) -> Result<PullScheduleService> {
        self.config.validate()?;
        if self.callbacks.is_empty() {
            return Err(Error::Config {
                option: "register_pull_task",
                value: "none".into(),
                allowed: "at least one topic with a callback".into(),
            });
        }
        if self.max_concurrent_tasks == 0 {
            return Err(Error::Config {
                option: "max_concurrent_tasks",
                value: "0".into(),
                allowed: "at least 1".into(),
            });
        }
        let (client, own_client) =
            resolve_client(self.client, self.namesrv_addr, self.client_config)?;
        let namespace =
            resolve_namespace(self.config.namespace.as_deref(), &client, own_client).await?;
        // Topics and queues are wire names from here on; callbacks get them unwrapped.
        let callbacks: HashMap<String, Rc<dyn PullTaskCallback>> = self
            .callbacks
            .into_iter()
            .map(|(topic, callback)| (namespace.wrap(&topic).into_owned(), Rc::from(callback)))
            .collect();
        let topics = callbacks
            .keys()
            .map(|t| (t.clone(), Selector::all()))
            .collect();
        let permits = Arc::new(Semaphore::new(self.max_concurrent_tasks));
        // The service needs the consumer and the member needs the service: the service starts
        // first and receives the consumer once the member is up.
        let service = ScheduleService {
            callbacks,
            permits,
            consumer: None,
            tasks: BTreeMap::new(),
            pending: Vec::new(),
            namespace: namespace.clone(),
        }
        .start();
        let (member, offsets) = Member::start(MemberSpec {
            client: client.clone(),
            own_client,
            config: self.config.on_the_wire(&namespace),
            topics,
            consume_from_where: ConsumeFromWhere::LastOffset,
            listener: Some(Box::new(RecipientQueueListener(
                service.clone().recipient(),
            ))),
            reset_target: Some(service.clone().recipient()),
            reset_listener: None,
            rebalance: true,
        })
        .await?;
        let consumer = PullConsumer::from_parts(client, self.config, member, offsets, namespace);
        service.send(SetConsumer(consumer.clone())).await?;
        Ok(PullScheduleService { consumer, service })
    }
}

/// A running pull schedule service. Cheap to clone, `Send + Sync`.
///
/// ```no_run
/// # async fn demo() -> rocketmq_actor::Result<()> {
/// use std::time::Duration;
/// use rocketmq_actor::pull::PullScheduleService;
/// let service = PullScheduleService::builder()
///     .namesrv_addr("127.0.0.1:9876")
///     .group("my-group")
///     .register_pull_task_fn("TopicTest", |queue, mut ctx| async move {
///         let consumer = ctx.pull_consumer().clone();
///         let offset = consumer.fetch_consume_offset(&queue, false).await.ok().flatten().unwrap_or(0);
///         if let Ok(result) = consumer.pull(&queue, "*", offset, 32).await {
///             println!("{queue}: {:?} {}", result.status, result.messages.len());
///             consumer.update_consume_offset(&queue, result.next_begin_offset).await;
///         }
///         ctx.set_pull_next_delay(Duration::from_millis(100));
///         ctx
///     })
///     .start()
///     .await?;
/// service.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PullScheduleService {
    consumer: PullConsumer,
    service: Addr<ScheduleService>,
}

impl PullScheduleService {
    /// Starts building a service.
    pub fn builder() -> PullScheduleServiceBuilder {
        PullScheduleServiceBuilder {
            config: PullConsumerConfig::new(""),
            namesrv_addr: None,
            client: None,
            callbacks: BTreeMap::new(),
            max_concurrent_tasks: 20,
            client_config: None,
        }
    }

    /// The pull consumer under the service.
    pub fn pull_consumer(&self) -> &PullConsumer {
        &self.consumer
    }

    /// The queues whose tasks run now.
    pub async fn running_tasks(&self) -> Vec<MessageQueue> {
        self.service.send(RunningTasks).await.unwrap_or_default()
    }

    /// Stops every task (each running call finishes first), persists the offsets, leaves the
    /// group.
    pub async fn shutdown(&self) {
        let _ = self.service.send(StopAll).await;
        let _ = self.consumer.shutdown().await;
    }
}

/// The actor that owns the tasks.
pub(crate) struct ScheduleService {
    callbacks: HashMap<String, Rc<dyn PullTaskCallback>>,
    permits: Arc<Semaphore>,
    consumer: Option<PullConsumer>,
    tasks: BTreeMap<MessageQueue, Addr<PullTask>>,
    /// Changes that arrived before the consumer: applied once it is set.
    pending: Vec<QueueChange>,
    /// The tasks' queues are wire names; callbacks and `running_tasks` get them unwrapped.
    namespace: Namespace,
}

impl Actor for ScheduleService {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "()")]
struct SetConsumer(PullConsumer);

#[derive(Message)]
#[rtype(result = "Vec<MessageQueue>")]
struct RunningTasks;

#[derive(Message)]
#[rtype(result = "()")]
struct StopAll;

impl ScheduleService {
    /// Starts tasks for gained queues; returns the tasks of lost queues to stop.
    fn apply(&mut self, change: QueueChange) -> Vec<(MessageQueue, Addr<PullTask>)> {
        let Some(consumer) = self.consumer.clone() else {
            self.pending.push(change);
            return Vec::new();
        };
        let divided: BTreeSet<MessageQueue> = change.divided.iter().cloned().collect();
        let seen = BTreeSet::from([change.topic.clone()]);
        let changes = plan_changes(self.tasks.keys(), &divided, &seen, &[]);
        let stopping: Vec<_> = changes
            .drop
            .into_iter()
            .filter_map(|q| self.tasks.remove(&q).map(|task| (q, task)))
            .collect();
        for (queue, _) in &stopping {
            // A revoked queue's call in a long poll returns now, not after the suspend time.
            consumer.end_long_polls(queue);
        }
        if let Some(callback) = self.callbacks.get(&change.topic) {
            for queue in changes.start {
                let task = PullTask {
                    user_queue: self.namespace.unwrap_queue(&queue).into_owned(),
                    queue: queue.clone(),
                    callback: callback.clone(),
                    permits: self.permits.clone(),
                    context: PullTaskContext {
                        consumer: consumer.clone(),
                        next_delay: DEFAULT_PULL_NEXT_DELAY,
                    },
                }
                .start();
                tracing::info!(%queue, "pull task started");
                self.tasks.insert(queue, task);
            }
        }
        stopping
    }
}

/// Stops the tasks all at once (each after its running call, which may be a long poll).
async fn stop_tasks(tasks: Vec<(MessageQueue, Addr<PullTask>)>) {
    futures::future::join_all(tasks.into_iter().map(|(queue, task)| async move {
        let _ = task.send(StopTask).await;
        tracing::info!(%queue, "pull task stopped");
    }))
    .await;
}

impl Handler<OffsetsReset> for ScheduleService {
    type Result = ();

    fn handle(&mut self, msg: OffsetsReset, _ctx: &mut Self::Context) {
        for (queue, offset) in msg.0 {
            if let Some(task) = self.tasks.get(&queue) {
                task.do_send(ReapplyReset(offset));
            }
        }
    }
}

impl Handler<SetConsumer> for ScheduleService {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: SetConsumer, _ctx: &mut Self::Context) -> Self::Result {
        self.consumer = Some(msg.0);
        let mut stopping = Vec::new();
        for change in std::mem::take(&mut self.pending) {
            stopping.extend(self.apply(change));
        }
        Box::pin(stop_tasks(stopping))
    }
}

impl Handler<QueueChange> for ScheduleService {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: QueueChange, _ctx: &mut Self::Context) -> Self::Result {
        // The member waits for this answer before persisting the lost queues' offsets: answer
        // once their tasks have stopped (each after its running call).
        Box::pin(stop_tasks(self.apply(msg)))
    }
}

impl Handler<RunningTasks> for ScheduleService {
    type Result = MessageResult<RunningTasks>;

    fn handle(&mut self, _msg: RunningTasks, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(
            self.namespace
                .unwrap_queues(self.tasks.keys().cloned().collect()),
        )
    }
}

impl Handler<StopAll> for ScheduleService {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: StopAll, _ctx: &mut Self::Context) -> Self::Result {
        self.callbacks.clear();
        if let Some(consumer) = &self.consumer {
            consumer.end_all_long_polls();
        }
        let tasks: Vec<_> = std::mem::take(&mut self.tasks).into_iter().collect();
        Box::pin(
            stop_tasks(tasks)
                .into_actor(self)
                .map(|_, _, ctx| ctx.stop()),
        )
    }
}

/// The task of one queue.
pub(crate) struct PullTask {
    queue: MessageQueue,
    callback: Rc<dyn PullTaskCallback>,
    permits: Arc<Semaphore>,
    context: PullTaskContext,
    /// `queue` as the application names it: what the callback gets.
    user_queue: MessageQueue,
}

#[derive(Message)]
#[rtype(result = "()")]
struct RunTask;

#[derive(Message)]
#[rtype(result = "()")]
struct StopTask;

/// A broker reset the queue's offset. Handled only between two runs (the runs are in
/// `ctx.wait`), so a call that was running — and may store the offset it pulled up to — cannot
/// undo the reset: the reset is stored again after it.
#[derive(Message)]
#[rtype(result = "()")]
struct ReapplyReset(i64);

impl Handler<ReapplyReset> for PullTask {
    type Result = ();

    fn handle(&mut self, msg: ReapplyReset, _ctx: &mut Self::Context) {
        self.context.consumer.store_offset(&self.queue, msg.0);
    }
}

impl Actor for PullTask {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.notify(RunTask);
    }
}

impl Handler<RunTask> for PullTask {
    type Result = ();

    fn handle(&mut self, _msg: RunTask, ctx: &mut Self::Context) {
        let callback = self.callback.clone();
        let permits = self.permits.clone();
        let queue = self.user_queue.clone();
        let mut context = self.context.clone();
        // `wait`: nothing else (a stop) is handled while the callback runs.
        ctx.wait(
            async move {
                let _permit = permits.acquire_owned().await;
                let run = AssertUnwindSafe(callback.do_pull_task(&queue, &mut context))
                    .catch_unwind()
                    .await;
                match run {
                    Ok(()) => context,
                    Err(_) => {
                        tracing::error!(%queue, "pull task callback panicked; retrying in 1 s");
                        context.set_pull_next_delay(PANIC_RETRY_DELAY);
                        context
                    }
                }
            }
            .into_actor(self)
            .map(|context, act, ctx| {
                let delay = context.next_delay;
                act.context = context;
                // The delay the callback asked for applies to the next run only.
                act.context.next_delay = DEFAULT_PULL_NEXT_DELAY;
                if delay.is_zero() {
                    // A timer, even of zero, waits for the next millisecond tick.
                    ctx.notify(RunTask);
                } else {
                    ctx.notify_later(RunTask, delay);
                }
            }),
        );
    }
}

impl Handler<StopTask> for PullTask {
    type Result = ();

    fn handle(&mut self, _msg: StopTask, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PullScheduleService>();
        fn assert_send<T: Send>() {}
        assert_send::<PullScheduleServiceBuilder>();
    }
}
