//! The heartbeat actor: tells every broker of the subscribed topics who this consumer is and
//! what it subscribes to (HEART_BEAT), every `heartbeat_broker_interval` and on demand, and
//! says goodbye (UNREGISTER_CLIENT) at shutdown. Brokers register consumers per connection, so
//! this is also what makes a broker send NOTIFY_CONSUMER_IDS_CHANGED on our connection.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use actix::prelude::*;
use tracing::Instrument;

use crate::actors::connection::{ConnectionEvent, Subscribe};
use crate::actors::consumer::{ConsumerEvent, ConsumerShared};
use crate::consumer::config::{ConsumeFromWhere, MessageModel};
use crate::error::Result;
use crate::protocol::body;
use crate::protocol::body::{ConsumeType, ConsumerData, HeartbeatData, ProducerData};

/// Send a heartbeat to every broker now. Resolves with the first failure, if any (the others
/// were still sent).
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub struct SendHeartbeat;

/// Send a heartbeat to every broker soon: at once, unless one was sent on demand within the
/// last second (many queues of a restarted broker ask at the same time).
#[derive(Message)]
#[rtype(result = "()")]
pub struct HeartbeatSoon;

/// Requests of [`HeartbeatSoon`] within this of the last one are covered by it.
const ON_DEMAND_COALESCE: std::time::Duration = std::time::Duration::from_secs(1);

/// After a broker connection drops: how often routes are re-read and every broker heartbeated
/// until all answer, and for how many rounds (the brokers may come back on other addresses,
/// which only the name server can tell).
const REDISCOVER_EVERY: std::time::Duration = std::time::Duration::from_millis(500);
const REDISCOVER_ROUNDS: u32 = 60;

/// Send UNREGISTER_CLIENT to every broker and stop.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Unregister;

/// The heartbeat sender of one consumer.
pub struct Heartbeat {
    shared: Rc<ConsumerShared>,
    last_on_demand: Option<std::time::Instant>,
    /// Broker connections this actor watches, and whether each is down now: a broker that
    /// comes back is heartbeated at once (a restarted broker forgets the group, and its
    /// answers to pulls would say so until the next 30 s tick).
    watched: BTreeMap<String, bool>,
    /// A chain of route re-reads and heartbeats after a dropped connection is running.
    rediscovering: bool,
    /// Stopped on purpose (see `StopActor`, `Unregister`).
    pub(crate) retired: bool,
}

impl Heartbeat {
    pub(crate) fn new(shared: Rc<ConsumerShared>) -> Self {
        Heartbeat {
            shared,
            last_on_demand: None,
            watched: BTreeMap::new(),
            rediscovering: false,
            retired: false,
        }
    }

    /// Heartbeats every broker, and starts watching the connections of brokers not watched
    /// yet.
    /// With `refresh_routes`, the subscribed topics' routes are read from the name server
    /// first (a broker that forgot this consumer, or dropped its connection, may have come back
    /// elsewhere).
    fn heartbeat_all(
        &mut self,
        ctx: &mut Context<Self>,
        refresh_routes: bool,
    ) -> impl ActorFuture<Self, Output = Result<()>> {
        let me = ctx.address().downgrade();
        let shared = self.shared.clone();
        async move {
            if refresh_routes {
                for topic in shared.subscribed_topics() {
                    if let Err(e) = shared.client.refresh_route(&topic).await {
                        tracing::debug!(%topic, error = %e, "route not re-read");
                    }
                }
            }
            let addrs = broker_addrs(&shared).await;
            // The periodic heartbeat warns of a broker that does not answer; the on-demand
            // rounds after a drop expect some not to, and stay quiet.
            let result = send_heartbeats(&shared, &addrs, !refresh_routes).await;
            (addrs, result, me)
        }
        .instrument(self.shared.span.clone())
        .into_actor(self)
        .map(|(addrs, result, me), act, ctx| {
            for addr in addrs {
                if act.watched.contains_key(&addr) {
                    continue;
                }
                act.watched.insert(addr.clone(), false);
                let client = act.shared.client.clone();
                let me = me.clone();
                ctx.spawn(
                    async move {
                        let connection = client.connection(&addr).await?;
                        connection.send(Subscribe(me.recipient())).await?;
                        Ok::<_, crate::error::Error>(())
                    }
                    .into_actor(act)
                    .map(|result, _, _| {
                        if let Err(e) = result {
                            tracing::debug!(error = %e, "cannot watch a broker connection");
                        }
                    }),
                );
            }
            result
        })
    }

    /// Re-reads routes and heartbeats every broker, again every [`REDISCOVER_EVERY`] until
    /// all answer and every dropped connection is back: after a connection drop, so restarted
    /// brokers hear from this member as soon as they serve, wherever they come back. (A name
    /// server drops a broker whose connection closed, so while it restarts the route does not
    /// list it and every broker listed answers: that alone is no sign it is back.)
    fn rediscover(&mut self, round: u32, ctx: &mut Context<Self>) {
        if self.retired {
            self.rediscovering = false;
            return;
        }
        let heartbeat = self.heartbeat_all(ctx, true);
        ctx.spawn(heartbeat.map(move |result, act, ctx| match result {
            Ok(()) if !act.watched.values().any(|down| *down) => act.rediscovering = false,
            // Refused: asking again every 500 ms cannot help (the periodic heartbeat goes on).
            Err(e) if e.is_access_denied() => act.rediscovering = false,
            _ if round + 1 >= REDISCOVER_ROUNDS => act.rediscovering = false,
            _ => {
                ctx.run_later(REDISCOVER_EVERY, move |act, ctx| {
                    act.rediscover(round + 1, ctx)
                });
            }
        }));
    }
}

/// The broker addresses of every subscribed topic whose route is cached: what a leaving member
/// tells it is gone, without asking a name server that may not answer (a shutdown must not wait
/// on it).
fn cached_broker_addrs(shared: &ConsumerShared) -> BTreeSet<String> {
    shared
        .subscribed_topics()
        .iter()
        .filter_map(|topic| shared.client.cached_route(topic))
        .flat_map(|route| route.all_addrs().map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

/// The broker addresses (masters and slaves) of every subscribed topic with a known route.
async fn broker_addrs(shared: &ConsumerShared) -> BTreeSet<String> {
    let mut addrs = BTreeSet::new();
    for topic in shared.subscribed_topics() {
        if let Ok(route) = shared.client.route(&topic).await {
            addrs.extend(route.all_addrs().map(str::to_owned));
        }
    }
    addrs
}

fn heartbeat_data(shared: &ConsumerShared) -> HeartbeatData {
    let subscriptions = shared
        .subscriptions
        .borrow()
        .iter()
        .map(|(topic, sub)| sub.to_wire(topic))
        .collect();
    HeartbeatData {
        client_id: shared.client.client_id().to_owned(),
        producer_data_set: vec![ProducerData {
            group_name: "CLIENT_INNER_PRODUCER".into(),
        }],
        consumer_data_set: vec![ConsumerData {
            group_name: shared.group.to_string(),
            consume_type: ConsumeType::ConsumePassively,
            message_model: match shared.config.message_model {
                MessageModel::Clustering => body::MessageModel::Clustering,
                MessageModel::Broadcasting => body::MessageModel::Broadcasting,
            },
            consume_from_where: match shared.config.consume_from_where {
                ConsumeFromWhere::LastOffset => body::ConsumeFromWhere::ConsumeFromLastOffset,
                ConsumeFromWhere::FirstOffset => body::ConsumeFromWhere::ConsumeFromFirstOffset,
                ConsumeFromWhere::Timestamp => body::ConsumeFromWhere::ConsumeFromTimestamp,
            },
            subscription_data_set: subscriptions,
            unit_mode: false,
        }],
        heartbeat_fingerprint: 0,
        without_sub: false,
    }
}

async fn send_heartbeats(
    shared: &ConsumerShared,
    addrs: &BTreeSet<String>,
    warn: bool,
) -> Result<()> {
    let data = &heartbeat_data(shared);
    // Side by side: a broker that does not answer must not delay the others' heartbeats.
    let results = futures::future::join_all(
        addrs
            .iter()
            .map(|addr| async move { (addr, shared.client.heartbeat(addr, data).await) }),
    )
    .await;
    let mut first_error = None;
    let mut denied: Option<crate::error::Error> = None;
    for (addr, result) in results {
        match result {
            Ok(()) => {}
            // Noted once as a problem below, not warned of at every round.
            Err(e) if e.is_access_denied() => {
                tracing::debug!(broker = %addr, error = %e, "heartbeat refused");
                denied.get_or_insert(e);
            }
            Err(e) => {
                if warn {
                    tracing::warn!(broker = %addr, error = %e, "heartbeat failed");
                } else {
                    tracing::debug!(broker = %addr, error = %e, "heartbeat failed");
                }
                first_error.get_or_insert(e);
            }
        }
    }
    match &denied {
        Some(cause) => {
            for topic in shared.subscribed_topics() {
                if !crate::consumer::retry::is_retry_topic(&topic) {
                    shared.note_access_denied(&topic, format!("heartbeat refused: {cause}"));
                }
            }
        }
        None if first_error.is_none() => shared.clear_access_denied(None),
        None => {}
    }
    // A refusal first: it says what to fix.
    denied.or(first_error).map_or(Ok(()), Err)
}

impl Actor for Heartbeat {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.retired {
            return;
        }
        ctx.run_interval(self.shared.config.heartbeat_broker_interval, |act, ctx| {
            let heartbeat = act.heartbeat_all(ctx, false).map(|_, _, _| ());
            ctx.spawn(heartbeat);
        });
    }
}

impl Supervised for Heartbeat {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        if !self.retired {
            let _span = self.shared.span.clone().entered();
            tracing::warn!("heartbeat actor failed; restarted");
            // Subscriptions are weak and were to the old context's address: watch anew.
            self.watched.clear();
            self.rediscovering = false;
        }
    }
}

impl Handler<SendHeartbeat> for Heartbeat {
    type Result = ResponseActFuture<Self, Result<()>>;

    fn handle(&mut self, _msg: SendHeartbeat, ctx: &mut Self::Context) -> Self::Result {
        Box::pin(self.heartbeat_all(ctx, false))
    }
}

impl Handler<ConnectionEvent> for Heartbeat {
    type Result = ();

    fn handle(&mut self, event: ConnectionEvent, ctx: &mut Self::Context) {
        let _span = self.shared.span.clone().entered();
        match event {
            ConnectionEvent::Disconnected { peer, reason } => {
                if let Some(down) = self.watched.get_mut(&peer) {
                    if !*down {
                        *down = true;
                        self.shared.events.emit(ConsumerEvent::Disconnected {
                            broker: peer,
                            reason,
                        });
                        if !self.rediscovering {
                            self.rediscovering = true;
                            ctx.run_later(REDISCOVER_EVERY, |act, ctx| act.rediscover(0, ctx));
                        }
                    }
                }
            }
            ConnectionEvent::Connected { peer } => {
                if let Some(down) = self.watched.get_mut(&peer) {
                    if *down {
                        *down = false;
                        tracing::info!(broker = %peer, "broker connection back; re-reading routes and heartbeating now");
                        self.shared.events.emit(ConsumerEvent::Reconnected {
                            broker: peer.clone(),
                        });
                        // A broker that restarted may not be alone: brokers of the same cluster
                        // can come back on other addresses, and a member that heartbeats only
                        // the old ones looks gone to the restarted brokers.
                        let heartbeat = self.heartbeat_all(ctx, true);
                        ctx.spawn(heartbeat.map(|result, _, _| {
                            if let Err(e) = result {
                                tracing::debug!(error = %e, "heartbeat after a reconnect failed");
                            }
                        }));
                    }
                }
            }
        }
    }
}

impl Handler<HeartbeatSoon> for Heartbeat {
    type Result = ();

    fn handle(&mut self, _msg: HeartbeatSoon, ctx: &mut Self::Context) {
        if self
            .last_on_demand
            .is_some_and(|at| at.elapsed() < ON_DEMAND_COALESCE)
        {
            return;
        }
        self.last_on_demand = Some(std::time::Instant::now());
        let _span = self.shared.span.clone().entered();
        tracing::info!("a broker does not know this consumer; heartbeating now");
        let heartbeat = self.heartbeat_all(ctx, true);
        ctx.spawn(heartbeat.map(|result, _, _| {
            if let Err(e) = result {
                tracing::debug!(error = %e, "on-demand heartbeat failed");
            }
        }));
    }
}

impl Handler<Unregister> for Heartbeat {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: Unregister, _ctx: &mut Self::Context) -> Self::Result {
        self.retired = true;
        let shared = self.shared.clone();
        Box::pin(
            async move {
                let addrs = cached_broker_addrs(&shared);
                // Side by side: a broker that is down must not hold the others' goodbyes.
                futures::future::join_all(addrs.iter().map(|addr| {
                    let shared = &shared;
                    async move {
                        let result = shared
                            .client
                            .unregister_client(addr, None, Some(&shared.group))
                            .await;
                        if let Err(e) = result {
                            tracing::debug!(broker = %addr, error = %e, "unregister failed");
                        }
                    }
                }))
                .await;
            }
            .instrument(self.shared.span.clone())
            .into_actor(self)
            .map(|_, _, ctx| ctx.stop()),
        )
    }
}
