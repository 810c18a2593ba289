//! The embedded name server: owns a [`NameServerCore`] fed by broker registrations.

use crate::broker::{BrokerRegistration, NameServerCore};
use crate::protocol::RemotingCommand;
use actix::prelude::*;

/// The name-server actor.
#[derive(Default)]
pub struct NameServerActor {
    core: NameServerCore,
}

impl Actor for NameServerActor {
    type Context = Context<Self>;
}

/// A name-server request; the reply is `None` for oneway requests.
#[derive(Message)]
#[rtype(result = "Option<RemotingCommand>")]
pub struct NameServerRequest(pub RemotingCommand);

/// A broker (re-)registers its topics.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RegisterBroker(pub BrokerRegistration);

/// A broker leaves (graceful stop).
#[derive(Message)]
#[rtype(result = "()")]
pub struct UnregisterBroker(pub String);

/// Stops the actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopNameServer;

impl Handler<NameServerRequest> for NameServerActor {
    type Result = Option<RemotingCommand>;
    fn handle(&mut self, msg: NameServerRequest, _ctx: &mut Context<Self>) -> Self::Result {
        self.core.handle(&msg.0)
    }
}

impl Handler<RegisterBroker> for NameServerActor {
    type Result = ();
    fn handle(&mut self, msg: RegisterBroker, _ctx: &mut Context<Self>) {
        self.core.register(msg.0);
    }
}

impl Handler<UnregisterBroker> for NameServerActor {
    type Result = ();
    fn handle(&mut self, msg: UnregisterBroker, _ctx: &mut Context<Self>) {
        self.core.unregister(&msg.0);
    }
}

impl Handler<StopNameServer> for NameServerActor {
    type Result = ();
    fn handle(&mut self, _msg: StopNameServer, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
