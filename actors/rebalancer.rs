//! The rebalancer actor: decides which queues this consumer owns and starts or stops their
//! queue actors.
//!
//! It runs at start, every `rebalance_interval`, when a broker says the group changed
//! (NOTIFY_CONSUMER_IDS_CHANGED) and after a pass that could not see every topic (retried after
//! `rebalance_retry_interval`). Each pass is incremental: only queues whose owner changed are
//! started or dropped; a queue whose pull loop stalled is dropped and started again. Passes never
//! overlap: a trigger during a pass schedules one more pass.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use actix::prelude::*;
use tracing::Instrument;

use crate::actors::connection::ConnectedFor;
use crate::actors::consumer::{ConsumerEvent, ConsumerShared};
use crate::actors::heartbeat::{Heartbeat, SendHeartbeat};
use crate::actors::queue::{
    clean_expired_every, DropQueue, GetQueueStatus, QueueActor, QueueStatus, QueueTick,
};
use crate::consumer::allocate::{strategy_for, AllocateStrategy};
use crate::consumer::flow::QueueThresholds;
use crate::consumer::lock::needs_broker_lock;
use crate::consumer::rebalance::{
    departures_unconfirmed, handed_over_by_live_members, plan_changes, topic_share,
    unconfirmed_share, RouteMemory, ShareError, ABSENT_BROKER_GRACE, MEMBERSHIP_SETTLE,
};
use crate::error::{Error, ResponseCode, Result};
use crate::message::MessageQueue;
use crate::protocol::codes::response_code;

/// Run a rebalance pass (now, or right after the one under way).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Rebalance;

/// Drop every queue (shutdown) and stop rebalancing. Resolves when every queue actor has
/// persisted its offset and stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DropAll;

/// The owned queues and their actors.
#[derive(Message)]
#[rtype(result = "Vec<(MessageQueue, Addr<QueueActor>)>")]
pub struct OwnedQueues;

/// What one pass computed.
struct Plan {
    /// The queues to own, for the topics in `seen`.
    target: BTreeSet<MessageQueue>,
    /// Topics whose route and members were known; others keep their queues as they are.
    seen: BTreeSet<String>,
    /// Some topic could not be computed: try again soon.
    incomplete: bool,
    /// Queues whose pull loop stalled.
    stalled: Vec<MessageQueue>,
    /// A broker of some topic does not list us yet (its route appeared after our last
    /// heartbeat): heartbeat now instead of at the next 30 s tick.
    needs_heartbeat: bool,
    /// Each seen topic's queues and members, for the hand-over decision.
    views: BTreeMap<String, TopicView>,
    /// Why topics could not be seen.
    problems: Vec<(String, String)>,
}

/// A topic as one pass saw it.
struct TopicView {
    /// The queues divided: the route's and those of brokers briefly missing from it.
    route: RouteMemory,
    members: Vec<String>,
}

/// The rebalancer of one consumer.
pub struct Rebalancer {
    shared: Rc<ConsumerShared>,
    heartbeat: Addr<Heartbeat>,
    strategy: Rc<dyn AllocateStrategy>,
    queues: BTreeMap<MessageQueue, Addr<QueueActor>>,
    in_pass: bool,
    again: bool,
    /// A retry of an incomplete pass is scheduled: one chain of retries, however many
    /// incomplete passes ran.
    retry_scheduled: bool,
    stopped: bool,
    /// The members of each topic at the last pass that saw it (who held a queue before).
    members_seen: BTreeMap<String, Vec<String>>,
    /// The queues of each topic at the last pass that saw it, with the brokers missing from
    /// its route (see [`ABSENT_BROKER_GRACE`]).
    routes_seen: BTreeMap<String, RouteMemory>,
    /// Stopped on purpose (see `StopActor`).
    pub(crate) retired: bool,
}

impl Rebalancer {
    pub(crate) fn new(shared: Rc<ConsumerShared>, heartbeat: Addr<Heartbeat>) -> Self {
        let strategy: Rc<dyn AllocateStrategy> =
            Rc::from(strategy_for(&shared.config.allocate_strategy));
        Rebalancer {
            shared,
            heartbeat,
            strategy,
            queues: BTreeMap::new(),
            in_pass: false,
            again: false,
            retry_scheduled: false,
            stopped: false,
            members_seen: BTreeMap::new(),
            routes_seen: BTreeMap::new(),
            retired: false,
        }
    }

    /// Sends `tick` to every queue actor owned. One whose mailbox is full misses it and
    /// gets the next.
    fn tick_queues(&self, tick: QueueTick) {
        for queue in self.queues.values() {
            let _ = queue.try_send(tick);
        }
    }

    /// Starts the supervised actor of `mq`, after `delay` (a hand-over from a live member).
    fn start_queue(&mut self, mq: MessageQueue, delay: std::time::Duration) {
        let shared = self.shared.clone();
        let queue = mq.clone();
        let actor = Supervisor::start(move |_| QueueActor::new(queue, shared).start_after(delay));
        self.queues.insert(mq, actor);
    }

    /// Which of `started` wait for their previous owner to let go, and for how long.
    fn handoff_delays(&self, plan: &Plan, started: &[MessageQueue]) -> BTreeSet<MessageQueue> {
        let wait = self.shared.config.handoff_wait;
        if wait.is_zero() || !self.shared.config.is_clustering() {
            return BTreeSet::new();
        }
        let mut waiting = BTreeSet::new();
        for (topic, view) in &plan.views {
            let gained: Vec<MessageQueue> = started
                .iter()
                .filter(|mq| &mq.topic == topic)
                .cloned()
                .collect();
            if gained.is_empty() {
                continue;
            }
            waiting.extend(handed_over_by_live_members(
                self.strategy.as_ref(),
                &self.shared.group,
                self.shared.client.client_id(),
                &view.route.queues,
                self.members_seen.get(topic).map(Vec::as_slice),
                &view.members,
                &gained,
            ));
        }
        waiting
    }

    fn trigger(&mut self, ctx: &mut Context<Self>) {
        if self.stopped {
            return;
        }
        if self.in_pass {
            self.again = true;
            return;
        }
        self.in_pass = true;
        let shared = self.shared.clone();
        let strategy = self.strategy.clone();
        let owned: Vec<(MessageQueue, Addr<QueueActor>)> = self
            .queues
            .iter()
            .map(|(mq, addr)| (mq.clone(), addr.clone()))
            .collect();
        let members_seen = self.members_seen.clone();
        let routes_seen = self.routes_seen.clone();
        let span = shared.span.clone();
        let pass = async move {
            plan(
                &shared,
                strategy.as_ref(),
                owned,
                &members_seen,
                &routes_seen,
            )
            .await
        }
        .instrument(span);
        ctx.spawn(pass.into_actor(self).map(|plan, act, ctx| {
            act.apply(plan, ctx);
            act.in_pass = false;
            if act.again {
                act.again = false;
                act.trigger(ctx);
            }
        }));
    }

    fn apply(&mut self, plan: Plan, ctx: &mut Context<Self>) {
        if self.stopped {
            return;
        }
        let _span = self.shared.span.clone().entered();
        for (topic, cause) in &plan.problems {
            self.shared.note_problem(topic, cause.clone());
        }
        for topic in &plan.seen {
            self.shared.clear_problem(topic);
        }
        let changes = plan_changes(self.queues.keys(), &plan.target, &plan.seen, &plan.stalled);
        let waiting = self.handoff_delays(&plan, &changes.start);
        for (topic, view) in plan.views {
            self.members_seen.insert(topic.clone(), view.members);
            self.routes_seen.insert(topic, view.route);
        }
        if !changes.start.is_empty() {
            self.shared
                .events
                .emit(ConsumerEvent::QueuesAssigned(changes.start.clone()));
        }
        let revoked: Vec<MessageQueue> = changes
            .drop
            .iter()
            .filter(|mq| !changes.restart_after_drop.contains(*mq))
            .cloned()
            .collect();
        if !revoked.is_empty() {
            self.shared
                .events
                .emit(ConsumerEvent::QueuesRevoked(revoked));
        }
        let mut dropped = Vec::new();
        for mq in changes.drop {
            if let Some(addr) = self.queues.remove(&mq) {
                if changes.restart_after_drop.contains(&mq) {
                    tracing::warn!(queue = %mq, "pull loop stalled; restarting the queue");
                } else {
                    tracing::info!(queue = %mq, "queue no longer owned");
                }
                dropped.push((mq, addr));
            }
        }
        // A restarted (stalled) queue must not start before its old actor persisted the
        // offset, so new actors for dropped queues wait for the drops.
        let restart = changes.restart_after_drop;
        for mq in changes.start {
            let delay = if waiting.contains(&mq) {
                self.shared.config.handoff_wait
            } else {
                std::time::Duration::ZERO
            };
            tracing::info!(queue = %mq, handoff_wait = ?delay, "queue assigned");
            self.start_queue(mq, delay);
        }
        if !dropped.is_empty() {
            let drops = futures::future::join_all(
                dropped
                    .into_iter()
                    .map(|(_, addr)| async move { addr.send(DropQueue).await }),
            );
            ctx.spawn(drops.into_actor(self).map(move |_, act, _ctx| {
                for mq in restart {
                    if !act.stopped && !act.queues.contains_key(&mq) {
                        act.start_queue(mq, std::time::Duration::ZERO);
                    }
                }
                act.update_thresholds();
            }));
        }
        self.update_thresholds();
        self.shared.stats.metrics.rebalanced(self.queues.len());
        // While a broker refuses this consumer's credentials or permissions, asking again
        // soon cannot help: the periodic heartbeat and pass go on, and the retry waits.
        let denied = self.shared.access_denied();
        if plan.needs_heartbeat && !denied {
            let heartbeat = self.heartbeat.send(SendHeartbeat);
            ctx.spawn(heartbeat.into_actor(self).map(|_, _, _| ()));
        }
        if plan.incomplete && !self.retry_scheduled {
            self.retry_scheduled = true;
            let retry = if denied {
                crate::consumer::flow::ACCESS_DENIED_DELAY
            } else {
                self.shared.config.rebalance_retry_interval
            };
            ctx.run_later(retry, |act, ctx| {
                act.retry_scheduled = false;
                act.trigger(ctx)
            });
        }
    }

    fn update_thresholds(&self) {
        self.shared
            .thresholds
            .set(QueueThresholds::for_owned_queues(
                &self.shared.config,
                self.queues.len(),
            ));
    }
}

async fn plan(
    shared: &ConsumerShared,
    strategy: &dyn AllocateStrategy,
    owned: Vec<(MessageQueue, Addr<QueueActor>)>,
    members_seen: &BTreeMap<String, Vec<String>>,
    routes_seen: &BTreeMap<String, RouteMemory>,
) -> Plan {
    let mut plan = Plan {
        target: BTreeSet::new(),
        seen: BTreeSet::new(),
        incomplete: false,
        stalled: Vec::new(),
        needs_heartbeat: false,
        views: BTreeMap::new(),
        problems: Vec::new(),
    };
    // Topics are looked at side by side: one whose broker is slow to answer must not hold up
    // the others.
    let topics = shared.subscribed_topics();
    let targets = futures::future::join_all(topics.iter().map(|topic| {
        let previous = members_seen.get(topic).map(Vec::as_slice);
        let remembered = routes_seen.get(topic);
        topic_target(shared, strategy, topic, previous, remembered)
    }))
    .await;
    for (topic, target) in topics.into_iter().zip(targets) {
        match target {
            Ok((share, view, provisional)) => {
                plan.target.extend(share);
                plan.views.insert(topic.clone(), view);
                plan.seen.insert(topic);
                // A provisional share is looked at again soon.
                plan.incomplete |= provisional;
            }
            Err(e) if e.is_access_denied() => {
                tracing::debug!(%topic, error = %e, "rebalance refused for the topic");
                plan.incomplete = true;
                shared.note_access_denied(&topic, e.to_string());
            }
            Err(e) => {
                tracing::debug!(%topic, error = %e, "rebalance skipped a topic");
                plan.incomplete = true;
                plan.needs_heartbeat |= matches!(e, Error::NotAMember(_));
                // A group's retry topic exists only once a message was sent back: its missing
                // route is normal for a new group, not a problem to warn of.
                let retry_topic_not_made_yet = matches!(e, Error::TopicRouteNotFound(_))
                    && crate::consumer::retry::is_retry_topic(&topic);
                if !retry_topic_not_made_yet {
                    plan.problems.push((topic, e.to_string()));
                }
            }
        }
    }
    let statuses = futures::future::join_all(
        owned
            .into_iter()
            .map(|(mq, addr)| async move { (mq, addr.send(GetQueueStatus).await) }),
    )
    .await;
    for (mq, status) in statuses {
        match status {
            Ok(QueueStatus { stalled: true, .. }) | Ok(QueueStatus { gave_up: true, .. }) => {
                plan.stalled.push(mq)
            }
            _ => {}
        }
    }
    plan
}

/// This member's share of `topic`, the topic as seen, and whether the share is provisional:
/// while the members the broker lists lack some of `previous` and that broker has only just
/// come back ([`departures_unconfirmed`]), only the queues owned under both lists
/// ([`unconfirmed_share`]), with the previous members kept as the view. The queues divided
/// include those of brokers briefly missing from the route ([`ABSENT_BROKER_GRACE`]).
async fn topic_target(
    shared: &ConsumerShared,
    strategy: &dyn AllocateStrategy,
    topic: &str,
    previous: Option<&[String]>,
    remembered: Option<&RouteMemory>,
) -> Result<(Vec<MessageQueue>, TopicView, bool)> {
    let route = shared.client.route(topic).await?;
    if route.consume_queues.is_empty() {
        return Err(Error::TopicRouteNotFound(format!(
            "{topic} (the route has no readable queue)"
        )));
    }
    let memory = route_with_absent_brokers(topic, &route.consume_queues, remembered);
    let queues = memory.queues.clone();
    if !shared.config.is_clustering() {
        let view = TopicView {
            route: memory,
            members: Vec::new(),
        };
        return Ok((queues, view, false));
    }
    // Any broker of the topic knows the group's members (each gets every heartbeat).
    let (addr, members) = match shared.client.consumer_ids(&shared.group, topic).await {
        // Brokers answer SYSTEM_ERROR ("no consumer for this group") while they know no member.
        Err(Error::Broker {
            code: ResponseCode(response_code::SYSTEM_ERROR),
            peer,
            ..
        }) => return Err(Error::NotAMember(peer)),
        other => other?,
    };
    if let Some(previous) =
        previous.filter(|previous| previous.iter().any(|m| !members.contains(m)))
    {
        let connected_for = match shared.client.connection(&addr).await {
            Ok(connection) => connection.send(ConnectedFor).await.ok().flatten(),
            Err(_) => None,
        };
        if departures_unconfirmed(Some(previous), &members, connected_for, MEMBERSHIP_SETTLE) {
            tracing::debug!(%topic, broker = %addr, ?members, "members missing from a broker that just came back; keeping only queues owned either way until they heartbeat it");
            let share = unconfirmed_share(
                strategy,
                &shared.group,
                shared.client.client_id(),
                &queues,
                previous,
                &members,
            )
            .map_err(|ShareError::NotAMember| Error::NotAMember(addr))?;
            let view = TopicView {
                route: memory,
                members: previous.to_vec(),
            };
            return Ok((share, view, true));
        }
    }
    let share = topic_share(
        strategy,
        &shared.group,
        shared.client.client_id(),
        &queues,
        &members,
        true,
    )
    .map_err(|ShareError::NotAMember| Error::NotAMember(addr))?;
    let view = TopicView {
        route: memory,
        members,
    };
    Ok((share, view, false))
}

/// The topic's readable queues for a rebalance pass: the route's, plus those of brokers it
/// lost less than [`ABSENT_BROKER_GRACE`] ago (push rebalancer and pull kinds' `Member` alike).
pub(crate) fn route_with_absent_brokers(
    topic: &str,
    route_queues: &[MessageQueue],
    remembered: Option<&RouteMemory>,
) -> RouteMemory {
    let memory = remembered.cloned().unwrap_or_default().next(
        route_queues,
        crate::actors::now_ms(),
        ABSENT_BROKER_GRACE,
    );
    for broker in memory.absent_brokers() {
        tracing::debug!(%topic, %broker, "broker missing from the route; keeping its queues for now");
    }
    memory
}

impl Actor for Rebalancer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.retired {
            return;
        }
        self.trigger(ctx);
        let config = &self.shared.config;
        ctx.run_interval(config.rebalance_interval, |act, ctx| act.trigger(ctx));
        // The queue actors' timers, run here once for all of them (see `QueueTick`).
        ctx.run_interval(clean_expired_every(config), |act, _ctx| {
            act.tick_queues(QueueTick::CleanExpired)
        });
        if needs_broker_lock(config) {
            ctx.run_interval(config.lock_interval, |act, _ctx| {
                act.tick_queues(QueueTick::RenewLock)
            });
        }
    }
}

/// The owned queues survive a restart (an actor's fields do); a pass that was under way is
/// forgotten and a new one starts at once.
impl Supervised for Rebalancer {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        self.in_pass = false;
        self.again = false;
        self.retry_scheduled = false;
        if !self.retired {
            let _span = self.shared.span.clone().entered();
            tracing::warn!("rebalancer failed; restarted");
        }
    }
}

impl Handler<Rebalance> for Rebalancer {
    type Result = ();

    fn handle(&mut self, _msg: Rebalance, ctx: &mut Self::Context) {
        self.trigger(ctx);
    }
}

impl Handler<DropAll> for Rebalancer {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: DropAll, _ctx: &mut Self::Context) -> Self::Result {
        self.stopped = true;
        let queues = std::mem::take(&mut self.queues);
        let drops = futures::future::join_all(
            queues
                .into_values()
                .map(|addr| async move { addr.send(DropQueue).await }),
        );
        Box::pin(
            async move {
                drops.await;
            }
            .into_actor(self),
        )
    }
}

impl Handler<OwnedQueues> for Rebalancer {
    type Result = MessageResult<OwnedQueues>;

    fn handle(&mut self, _msg: OwnedQueues, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(
            self.queues
                .iter()
                .map(|(mq, addr)| (mq.clone(), addr.clone()))
                .collect(),
        )
    }
}
