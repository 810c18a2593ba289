//! The puller actor: where every queue actor of one consumer sends its pulls.
//!
//! It carries each [`PullRequest`] through the shared base layer ([`Client::pull`]): the broker
//! address and connection come from the client's shared cache, all queues of one broker are
//! pipelined on one socket (long polls included), and the answer is decoded and re-filtered by
//! exact tag before it goes back to the queue actor, which owns the decision of what to do
//! with it. Its mailbox is the consumer's one queue of outstanding pull requests.

use actix::prelude::*;

use crate::actors::client::Client;
use crate::error::Result;
use crate::rpc::{PullRequest, PullResult};

/// Pull one batch of a queue.
#[derive(Message)]
#[rtype(result = "Result<PullResult>")]
pub(crate) struct Pull(pub PullRequest);

/// The puller of one consumer.
pub(crate) struct Puller {
    /// Shared by the pulls under way: cloning a `Client` clones its actor address, which
    /// allocates.
    client: std::rc::Rc<Client>,
    /// Stopped on purpose (see `StopActor`).
    pub(crate) retired: bool,
}

impl Puller {
    /// A puller using `client` for routes and connections.
    pub(crate) fn new(client: Client) -> Self {
        Puller {
            client: std::rc::Rc::new(client),
            retired: false,
        }
    }
}

/// Stateless: a restarted puller just goes on (the pulls it was carrying fail, and their
/// queues pull again).
impl Supervised for Puller {}

impl Actor for Puller {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // One pull in flight per queue at most: room for every queue of a large consumer.
        ctx.set_mailbox_capacity(65_536);
    }
}

impl Handler<Pull> for Puller {
    type Result = ResponseFuture<Result<PullResult>>;

    fn handle(&mut self, msg: Pull, _ctx: &mut Self::Context) -> Self::Result {
        let client = self.client.clone();
        Box::pin(async move { client.pull(&msg.0).await })
    }
}
