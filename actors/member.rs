//! The group member of the pull consumer kinds: what makes a pull consumer, a schedule service or
//! a subscribing lite pull consumer one member of its group.
//!
//! It heartbeats the brokers of its topics (consume type CONSUME_ACTIVELY), divides each topic's
//! queues among the group's members (every `rebalance_interval`, on NOTIFY_CONSUMER_IDS_CHANGED,
//! at start) and tells its [`MessageQueueListener`] `(topic, all, divided)` whenever a division
//! changes; queues it lost have their offsets persisted after the listener returned (so a
//! schedule-service task stops first). It owns the group's offset store and applies offset
//! resets pushed by brokers (RESET_CONSUMER_CLIENT_OFFSET), forwarding them to whoever pulls.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use actix::prelude::*;

use crate::actors::client::{Client, RegisterConsumer, UnregisterConsumer};
use crate::actors::connection::ServerRequest;
use crate::actors::offset_store::{
    OffsetBackend, OffsetStore, PersistAll, PersistAndRemove, SetOffset, SetOwnership,
};
use crate::consumer::allocate::{strategy_for, AllocateStrategy};
use crate::consumer::config::{ConsumeFromWhere, MessageModel};
use crate::consumer::offset::{default_offset_store_dir, local_offsets_path};
use crate::consumer::pull_config::PullConsumerConfig;
use crate::consumer::rebalance::{
    handed_over_by_live_members, topic_share, RouteMemory, ShareError,
};
use crate::error::{Error, ResponseCode, Result};
use crate::filter::Selector;
use crate::message::MessageQueue;
use crate::namespace::Namespace;
use crate::protocol::body::{
    self, ConsumeType, ConsumerData, HeartbeatData, ProducerData, ResetOffsetBody,
};
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::RemotingCommand;
use crate::rpc::Subscription;

/// Told the queues of a topic whenever this member's share of them changes (Java
/// `MessageQueueListener`): `all` the topic's readable queues, `divided` those this member now
/// owns (all of them when broadcasting).
///
/// ```
/// use rocketmq_actor::pull::MessageQueueListener;
/// use rocketmq_actor::MessageQueue;
///
/// struct Log;
///
/// #[async_trait::async_trait(?Send)]
/// impl MessageQueueListener for Log {
///     async fn message_queue_changed(&self, topic: &str, all: &[MessageQueue], divided: &[MessageQueue]) {
///         println!("{topic}: {} of {} queues are mine", divided.len(), all.len());
///     }
/// }
/// ```
#[async_trait::async_trait(?Send)]
pub trait MessageQueueListener: Send + 'static {
    /// The division of `topic` changed; the member waits for this call before it persists and
    /// forgets the offsets of queues it lost.
    async fn message_queue_changed(
        &self,
        topic: &str,
        all: &[MessageQueue],
        divided: &[MessageQueue],
    );
}

/// A division change, as an actor listener receives it.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct QueueChange {
    /// The topic.
    pub topic: String,
    /// Its readable queues.
    pub all: Vec<MessageQueue>,
    /// The queues this member owns now.
    pub divided: Vec<MessageQueue>,
}

/// A closure listener.
pub(crate) struct FnQueueListener<F>(pub F);

#[async_trait::async_trait(?Send)]
impl<F> MessageQueueListener for FnQueueListener<F>
where
    F: Fn(&str, &[MessageQueue], &[MessageQueue]) + Send + 'static,
{
    async fn message_queue_changed(
        &self,
        topic: &str,
        all: &[MessageQueue],
        divided: &[MessageQueue],
    ) {
        (self.0)(topic, all, divided)
    }
}

/// An actor listener: the member waits until the actor handled the change.
pub(crate) struct RecipientQueueListener(pub Recipient<QueueChange>);

#[async_trait::async_trait(?Send)]
impl MessageQueueListener for RecipientQueueListener {
    async fn message_queue_changed(
        &self,
        topic: &str,
        all: &[MessageQueue],
        divided: &[MessageQueue],
    ) {
        let change = QueueChange {
            topic: topic.to_owned(),
            all: all.to_vec(),
            divided: divided.to_vec(),
        };
        if let Err(e) = self.0.send(change).await {
            tracing::warn!(%topic, error = %e, "queue listener actor unavailable");
        }
    }
}

/// The application's listener under a namespace: the member names topics and queues as on
/// the wire, the application as it knows them.
pub(crate) struct UnwrappingQueueListener {
    pub namespace: Namespace,
    pub inner: Box<dyn MessageQueueListener>,
}

#[async_trait::async_trait(?Send)]
impl MessageQueueListener for UnwrappingQueueListener {
    async fn message_queue_changed(
        &self,
        topic: &str,
        all: &[MessageQueue],
        divided: &[MessageQueue],
    ) {
        let ns = &self.namespace;
        let all = ns.unwrap_queues(all.to_vec());
        let divided = ns.unwrap_queues(divided.to_vec());
        self.inner
            .message_queue_changed(&ns.unwrap(topic), &all, &divided)
            .await;
    }
}

/// A closure told each queue's new offset when a broker resets the group's offsets.
pub(crate) type ResetFn = dyn Fn(&MessageQueue, i64) + Send + 'static;
/// A [`ResetFn`] as a builder holds it.
pub(crate) type ResetListener = Box<ResetFn>;

/// Offsets a broker reset (RESET_CONSUMER_CLIENT_OFFSET), after the offset store has them.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub(crate) struct OffsetsReset(pub Vec<(MessageQueue, i64)>);

/// What a member is started with.
pub(crate) struct MemberSpec {
    pub client: Client,
    pub own_client: bool,
    pub config: PullConsumerConfig,
    /// Topic → selector, as heartbeats describe the subscriptions.
    pub topics: BTreeMap<String, Selector>,
    pub consume_from_where: ConsumeFromWhere,
    pub listener: Option<Box<dyn MessageQueueListener>>,
    pub reset_target: Option<Recipient<OffsetsReset>>,
    /// The application's reset listener (a pull consumer's `offset_reset_listener_fn`).
    pub reset_listener: Option<ResetListener>,
    /// Divide queues (subscribe mode); off for a lite consumer with assigned queues.
    pub rebalance: bool,
}

/// Triggers a rebalance now.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Rebalance;

/// Heartbeats every known broker now (a hand-pulling consumer just learned new ones).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct HeartbeatNow;

/// The queues of `topic` this member owns now.
#[derive(Message)]
#[rtype(result = "Vec<MessageQueue>")]
pub(crate) struct Divided(pub String);

/// Persists every offset, says goodbye to the brokers and stops.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Leave;

/// The member actor. Use it through the pull consumer kinds.
pub(crate) struct Member {
    client: Client,
    own_client: bool,
    group: Arc<str>,
    config: PullConsumerConfig,
    topics: BTreeMap<String, Selector>,
    sub_version: i64,
    consume_from_where: ConsumeFromWhere,
    listener: Option<Rc<dyn MessageQueueListener>>,
    reset_target: Option<Recipient<OffsetsReset>>,
    reset_listener: Option<Rc<ResetFn>>,
    rebalance_enabled: bool,
    strategy: Rc<dyn AllocateStrategy>,
    divided: BTreeMap<String, BTreeSet<MessageQueue>>,
    /// The queues of each topic at the last pass, with the brokers missing from its route (see
    /// [`ABSENT_BROKER_GRACE`](crate::consumer::rebalance::ABSENT_BROKER_GRACE)).
    routes_seen: BTreeMap<String, RouteMemory>,
    /// The group's members at each topic's last pass (clustering).
    members_seen: BTreeMap<String, Vec<String>>,
    offsets: Addr<OffsetStore>,
    rebalancing: bool,
    again: bool,
    /// The brokers heartbeated so far: a newly known one is heartbeated at once.
    heartbeated: BTreeSet<String>,
    /// A broker refused the last heartbeat for authentication or permission (warned of once;
    /// rebalancing then waits 30 s between attempts).
    access_denied: Rc<std::cell::Cell<bool>>,
}

impl Member {
    /// Starts the member on the current arbiter: offset store, registration with the client
    /// instance, first heartbeat, first rebalance.
    pub(crate) async fn start(spec: MemberSpec) -> Result<(Addr<Member>, Addr<OffsetStore>)> {
        spec.config.validate()?;
        let group: Arc<str> = spec.config.consumer_group.as_str().into();
        let backend = match spec.config.message_model {
            MessageModel::Clustering => OffsetBackend::Remote,
            MessageModel::Broadcasting => {
                let dir = spec.config.offset_store_dir.clone().unwrap_or_else(|| {
                    default_offset_store_dir(
                        &std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from),
                    )
                });
                OffsetBackend::LocalFile(local_offsets_path(&dir, "DEFAULT", &group))
            }
        };
        let offsets = OffsetStore::new(
            spec.client.clone(),
            group.to_string(),
            backend,
            spec.config.persist_consumer_offset_interval,
        )?
        .start();
        for topic in spec.topics.keys() {
            if let Err(e) = spec.client.refresh_route(topic).await {
                tracing::info!(%topic, error = %e, "no route yet; the topic is picked up when it appears");
            }
        }
        let member = Member {
            strategy: Rc::from(strategy_for(&spec.config.allocate_strategy)),
            client: spec.client.clone(),
            own_client: spec.own_client,
            group: group.clone(),
            config: spec.config,
            topics: spec.topics,
            sub_version: crate::actors::now_ms(),
            consume_from_where: spec.consume_from_where,
            listener: spec.listener.map(Rc::from),
            reset_target: spec.reset_target,
            reset_listener: spec.reset_listener.map(Rc::from),
            rebalance_enabled: spec.rebalance,
            divided: BTreeMap::new(),
            routes_seen: BTreeMap::new(),
            members_seen: BTreeMap::new(),
            offsets: offsets.clone(),
            rebalancing: false,
            again: false,
            heartbeated: spec.client.known_broker_addrs(),
            access_denied: Rc::new(std::cell::Cell::new(false)),
        };
        let heartbeat = member.heartbeat_future();
        let addr = member.start();
        spec.client
            .actor()
            .send(RegisterConsumer {
                group: group.to_string(),
                handler: addr.clone().recipient(),
            })
            .await??;
        if let Err(e) = heartbeat.await {
            if e.is_access_denied() {
                // Nothing will work until the account changes: say so now.
                addr.send(Leave).await?;
                return Err(e);
            }
            tracing::warn!(%group, error = %e, "first heartbeat failed; rebalancing will retry");
        }
        addr.send(Rebalance).await?;
        Ok((addr, offsets))
    }

    fn heartbeat_data(&self) -> HeartbeatData {
        HeartbeatData {
            client_id: self.client.client_id().to_owned(),
            producer_data_set: vec![ProducerData {
                group_name: "CLIENT_INNER_PRODUCER".into(),
            }],
            consumer_data_set: vec![ConsumerData {
                group_name: self.group.to_string(),
                consume_type: ConsumeType::ConsumeActively,
                message_model: match self.config.message_model {
                    MessageModel::Clustering => body::MessageModel::Clustering,
                    MessageModel::Broadcasting => body::MessageModel::Broadcasting,
                },
                consume_from_where: match self.consume_from_where {
                    ConsumeFromWhere::LastOffset => body::ConsumeFromWhere::ConsumeFromLastOffset,
                    ConsumeFromWhere::FirstOffset => body::ConsumeFromWhere::ConsumeFromFirstOffset,
                    ConsumeFromWhere::Timestamp => body::ConsumeFromWhere::ConsumeFromTimestamp,
                },
                subscription_data_set: self
                    .topics
                    .iter()
                    .map(|(topic, selector)| {
                        Subscription::new(selector.clone(), self.sub_version).to_wire(topic)
                    })
                    .collect(),
                unit_mode: false,
            }],
            heartbeat_fingerprint: 0,
            without_sub: false,
        }
    }

    /// HEART_BEAT to every broker of the topics; resolves with the first failure, if any.
    fn heartbeat_future(&self) -> impl std::future::Future<Output = Result<()>> + 'static {
        let client = self.client.clone();
        let topics: Vec<String> = self.topics.keys().cloned().collect();
        let data = self.heartbeat_data();
        let denied = self.access_denied.clone();
        let group = self.group.clone();
        async move {
            let mut first_error = None;
            let mut refused = None;
            for addr in broker_addrs(&client, &topics).await {
                match client.heartbeat(&addr, &data).await {
                    Ok(()) => {}
                    Err(e) if e.is_access_denied() => {
                        if !denied.replace(true) {
                            tracing::warn!(%group, broker = %addr, error = %e, "heartbeat refused: access denied; retrying every 30 s");
                        }
                        refused.get_or_insert(e);
                    }
                    Err(e) => {
                        tracing::warn!(broker = %addr, error = %e, "heartbeat failed");
                        first_error.get_or_insert(e);
                    }
                }
            }
            if refused.is_none() && first_error.is_none() && denied.replace(false) {
                tracing::info!(%group, "heartbeat accepted again");
            }
            refused.or(first_error).map_or(Ok(()), Err)
        }
    }

    fn trigger(&mut self, ctx: &mut Context<Self>) {
        if !self.rebalance_enabled {
            return;
        }
        if self.rebalancing {
            self.again = true;
            return;
        }
        self.rebalancing = true;
        let client = self.client.clone();
        let group = self.group.clone();
        let clustering = self.config.message_model == MessageModel::Clustering;
        let strategy = self.strategy.clone();
        let topics: Vec<String> = self.topics.keys().cloned().collect();
        let routes_seen = self.routes_seen.clone();
        let heartbeat = self.heartbeat_future();
        let plan = async move {
            let mut plan = Vec::new();
            let mut not_member = false;
            for topic in topics {
                let remembered = routes_seen.get(&topic);
                match divide(
                    &client,
                    &group,
                    &topic,
                    clustering,
                    strategy.as_ref(),
                    remembered,
                )
                .await
                {
                    Ok(division) => plan.push((topic, division)),
                    Err(Error::NotAMember(broker)) => {
                        tracing::debug!(%topic, %broker, "not listed by the broker yet; heartbeating");
                        not_member = true;
                    }
                    // The heartbeat's refusal was warned of once already.
                    Err(e) if e.is_access_denied() => {
                        tracing::debug!(%topic, error = %e, "rebalance refused for the topic")
                    }
                    Err(e) => tracing::warn!(%topic, error = %e, "rebalance failed for the topic"),
                }
            }
            let mut denied = false;
            if not_member {
                denied = matches!(heartbeat.await, Err(e) if e.is_access_denied());
            }
            (plan, not_member, denied)
        };
        ctx.spawn(
            plan.into_actor(self)
                .then(|(plan, not_member, denied), act, ctx| {
                    if denied {
                        // Refused: asking again soon cannot help.
                        ctx.notify_later(Rebalance, crate::consumer::flow::ACCESS_DENIED_DELAY);
                    } else if not_member {
                        // The broker will list us after the heartbeat just sent: try again soon.
                        ctx.notify_later(Rebalance, std::time::Duration::from_secs(1));
                    }
                    act.apply(plan, ctx)
                })
                .map(|_, act, ctx| {
                    act.rebalancing = false;
                    if std::mem::take(&mut act.again) {
                        act.trigger(ctx);
                    }
                }),
        );
    }

    /// Records the new divisions, tells the listener about each change, then persists and
    /// forgets the offsets of the queues that went away.
    ///
    /// Queues handed over by members still in the group are announced [`HANDOFF_WAIT`] later
    /// (with the division as it is then): their previous owner lets go on the same membership
    /// notice and persists the offset it reached, which is what the first offset read here
    /// should find — read at once, it would find the last periodic persist and hand back
    /// everything consumed since.
    fn apply(
        &mut self,
        plan: Vec<(String, Division)>,
        ctx: &mut Context<Self>,
    ) -> impl ActorFuture<Self, Output = ()> {
        let mut changes = Vec::new();
        for (topic, division) in plan {
            let Division {
                route,
                members,
                divided,
            } = division;
            let all = route.queues.clone();
            let previous = self.divided.get(&topic).cloned().unwrap_or_default();
            let gained: Vec<MessageQueue> = divided.difference(&previous).cloned().collect();
            let waiting = if gained.is_empty() || members.is_empty() {
                BTreeSet::new()
            } else {
                handed_over_by_live_members(
                    self.strategy.as_ref(),
                    &self.group,
                    self.client.client_id(),
                    &all,
                    self.members_seen.get(&topic).map(Vec::as_slice),
                    &members,
                    &gained,
                )
            };
            self.routes_seen.insert(topic.clone(), route);
            self.members_seen.insert(topic.clone(), members);
            if previous == divided {
                continue;
            }
            let removed: Vec<MessageQueue> = previous.difference(&divided).cloned().collect();
            tracing::info!(group = %self.group, %topic, owned = divided.len(), of = all.len(), handed_over = waiting.len(), "queues divided");
            self.divided.insert(topic.clone(), divided.clone());
            if !waiting.is_empty() {
                let topic = topic.clone();
                ctx.run_later(HANDOFF_WAIT, move |act, ctx| act.announce(topic, ctx));
            }
            let announced: Vec<MessageQueue> = divided.difference(&waiting).cloned().collect();
            changes.push((topic, all, announced, removed));
        }
        if !changes.is_empty() {
            self.offsets.do_send(SetOwnership {
                topics: self.topics.keys().cloned().collect(),
                owned: self.divided.values().flatten().cloned().collect(),
            });
        }
        let listener = self.listener.clone();
        let offsets = self.offsets.clone();
        async move {
            for (topic, all, divided, removed) in changes {
                if let Some(listener) = &listener {
                    listener.message_queue_changed(&topic, &all, &divided).await;
                }
                for queue in removed {
                    match offsets.send(PersistAndRemove(queue.clone())).await {
                        Ok(Err(e)) => tracing::warn!(%queue, error = %e, "offset of a released queue not persisted"),
                        Err(e) => tracing::warn!(%queue, error = %e, "offset store unavailable"),
                        Ok(Ok(())) => {}
                    }
                }
            }
        }
        .into_actor(self)
    }

    /// Tells the listener the topic's division as it stands (after a hand-over wait).
    fn announce(&mut self, topic: String, ctx: &mut Context<Self>) {
        let (Some(listener), Some(route), Some(divided)) = (
            self.listener.clone(),
            self.routes_seen.get(&topic),
            self.divided.get(&topic),
        ) else {
            return;
        };
        let all = route.queues.clone();
        let divided: Vec<MessageQueue> = divided.iter().cloned().collect();
        ctx.spawn(
            async move { listener.message_queue_changed(&topic, &all, &divided).await }
                .into_actor(self),
        );
    }

    fn reset_offsets(&mut self, command: RemotingCommand) -> impl ActorFuture<Self, Output = ()> {
        let offsets = self.offsets.clone();
        let target = self.reset_target.clone();
        let listener = self.reset_listener.clone();
        let body = ResetOffsetBody::decode(command.body.as_deref().unwrap_or_default());
        // A queue of a divided topic that another member owns is that member's to reset.
        let table: Vec<(MessageQueue, i64)> = match &body {
            Ok(body) => body
                .offset_table
                .iter()
                .filter(|(queue, _)| {
                    !self.rebalance_enabled
                        || !self.topics.contains_key(&queue.topic)
                        || self
                            .divided
                            .get(&queue.topic)
                            .is_some_and(|owned| owned.contains(queue))
                })
                .map(|(queue, offset)| (queue.clone(), *offset))
                .collect(),
            Err(_) => Vec::new(),
        };
        async move {
            if let Err(e) = body {
                tracing::warn!(error = %e, "malformed RESET_CONSUMER_CLIENT_OFFSET body");
                return;
            }
            for (queue, offset) in &table {
                tracing::info!(%queue, offset, "offset reset by the broker");
                let set = SetOffset {
                    queue: queue.clone(),
                    offset: *offset,
                    freeze: false,
                };
                if let Ok(Err(e)) = offsets.send(set).await {
                    tracing::warn!(%queue, error = %e, "reset offset not persisted");
                }
            }
            if let Some(listener) = listener {
                for (queue, offset) in &table {
                    listener(queue, *offset);
                }
            }
            if let Some(target) = target {
                let _ = target.send(OffsetsReset(table)).await;
            }
        }
        .into_actor(self)
    }
}

/// Every broker address of the topics' routes and every other broker the client knows (those
/// of topics pulled by hand, so that their brokers count this member as online and push it
/// offset resets): the heartbeat targets.
async fn broker_addrs(client: &Client, topics: &[String]) -> BTreeSet<String> {
    let mut addrs = client.known_broker_addrs();
    for topic in topics {
        if let Ok(route) = client.route(topic).await {
            addrs.extend(route.all_addrs().map(str::to_owned));
        }
    }
    addrs
}

/// How long a queue handed over by a member still in the group waits before it is announced
/// (the push consumer's `handoff_wait` default).
const HANDOFF_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// One topic's rebalance pass.
struct Division {
    /// The topic's readable queues (with those of brokers briefly missing from its route,
    /// see [`ABSENT_BROKER_GRACE`](crate::consumer::rebalance::ABSENT_BROKER_GRACE)).
    route: RouteMemory,
    /// The group's members (empty when broadcasting).
    members: Vec<String>,
    /// This member's share.
    divided: BTreeSet<MessageQueue>,
}

/// The topic's readable queues, the group's members and this member's share.
async fn divide(
    client: &Client,
    group: &str,
    topic: &str,
    clustering: bool,
    strategy: &dyn AllocateStrategy,
    remembered: Option<&RouteMemory>,
) -> Result<Division> {
    let route = client.route(topic).await?;
    let memory = crate::actors::rebalancer::route_with_absent_brokers(
        topic,
        &route.consume_queues,
        remembered,
    );
    if !clustering {
        let divided = memory.queues.iter().cloned().collect();
        return Ok(Division {
            route: memory,
            members: Vec::new(),
            divided,
        });
    }
    let (addr, members) = match client.consumer_ids(group, topic).await {
        Err(Error::Broker {
            code: ResponseCode(response_code::SYSTEM_ERROR),
            peer,
            ..
        }) => return Err(Error::NotAMember(peer)),
        other => other?,
    };
    // The same decision as the push rebalancer's (and the simulator's).
    match topic_share(
        strategy,
        group,
        client.client_id(),
        &memory.queues,
        &members,
        true,
    ) {
        Ok(divided) => Ok(Division {
            route: memory,
            members,
            divided: divided.into_iter().collect(),
        }),
        Err(ShareError::NotAMember) => Err(Error::NotAMember(addr)),
    }
}

impl Actor for Member {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Timers are armed here so that a restarted member re-arms them.
        ctx.run_interval(self.config.rebalance_interval, |act, ctx| act.trigger(ctx));
        ctx.run_interval(self.config.heartbeat_broker_interval, |act, ctx| {
            act.heartbeated.extend(act.client.known_broker_addrs());
            ctx.spawn(act.heartbeat_future().into_actor(act).map(|_, _, _| ()));
        });
    }
}

impl Handler<Rebalance> for Member {
    type Result = ();

    fn handle(&mut self, _msg: Rebalance, ctx: &mut Self::Context) {
        self.trigger(ctx);
    }
}

impl Handler<HeartbeatNow> for Member {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _msg: HeartbeatNow, _ctx: &mut Self::Context) -> Self::Result {
        let known = self.client.known_broker_addrs();
        if known.is_subset(&self.heartbeated) {
            return Box::pin(async {});
        }
        self.heartbeated.extend(known);
        let heartbeat = self.heartbeat_future();
        Box::pin(async move {
            let _ = heartbeat.await;
        })
    }
}

impl Handler<Divided> for Member {
    type Result = MessageResult<Divided>;

    fn handle(&mut self, msg: Divided, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(
            self.divided
                .get(&msg.0)
                .map(|d| d.iter().cloned().collect())
                .unwrap_or_default(),
        )
    }
}

impl Handler<Leave> for Member {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: Leave, _ctx: &mut Self::Context) -> Self::Result {
        self.rebalance_enabled = false;
        let client = self.client.clone();
        let offsets = self.offsets.clone();
        let group = self.group.clone();
        let topics: Vec<String> = self.topics.keys().cloned().collect();
        let own_client = self.own_client;
        Box::pin(
            async move {
                match offsets.send(PersistAll).await {
                    Ok(Err(e)) => {
                        tracing::warn!(%group, error = %e, "offsets not persisted at shutdown")
                    }
                    Err(e) => {
                        tracing::warn!(%group, error = %e, "offset store unavailable at shutdown")
                    }
                    Ok(Ok(())) => {}
                }
                for addr in broker_addrs(&client, &topics).await {
                    if let Err(e) = client.unregister_client(&addr, None, Some(&group)).await {
                        tracing::debug!(broker = %addr, error = %e, "unregister failed");
                    }
                }
                let _ = client
                    .actor()
                    .send(UnregisterConsumer(group.to_string()))
                    .await;
                if own_client {
                    client.shutdown().await;
                }
            }
            .into_actor(self)
            .map(|_, act, ctx| {
                act.offsets.do_send(crate::actors::consumer::StopActor);
                ctx.stop();
            }),
        )
    }
}

impl Handler<ServerRequest> for Member {
    type Result = ResponseActFuture<Self, Option<RemotingCommand>>;

    fn handle(&mut self, msg: ServerRequest, ctx: &mut Self::Context) -> Self::Result {
        let command = msg.command;
        match command.code {
            request_code::NOTIFY_CONSUMER_IDS_CHANGED => {
                self.trigger(ctx);
                Box::pin(fut::ready(None))
            }
            request_code::RESET_CONSUMER_CLIENT_OFFSET => {
                Box::pin(self.reset_offsets(command).map(|_, _, _| None))
            }
            code => {
                let answer = RemotingCommand::response(
                    response_code::REQUEST_CODE_NOT_SUPPORTED,
                    Some(format!(
                        "request code {code} is not supported by a pull consumer"
                    )),
                );
                Box::pin(fut::ready(Some(answer)))
            }
        }
    }
}
