//! The puller actor: where every queue actor of one consumer sends its pulls.
//!
//! It puts each [`PullRequest`] on the wire through the shared base layer: the broker address
//! and connection come from the client's shared cache, and all queues of one broker are
//! pipelined on one socket (long polls included). It does not wait for the answers: the
//! connection hands each one straight to the queue actor that asked, which decodes it,
//! re-filters it by exact tag and decides what to do with it. Its mailbox is the consumer's one
//! queue of pull requests not yet sent.
//!
//! Only a pull that cannot be sent at once (no cached route or connection, a full connection
//! mailbox, or request hooks to run) becomes a task of its own, which sends it when it can.

use std::sync::Arc;

use actix::prelude::*;

use crate::actors::client::{Client, PullReply};
use crate::rpc::PullRequest;

/// Send one pull; the broker's answer (or the error that kept it from the broker) goes to
/// `reply`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Pull {
    /// What to pull. Shared with the queue actor, which decodes the answer with it.
    pub request: Arc<PullRequest>,
    /// Where the answer goes.
    pub reply: PullReply,
}

/// The puller of one consumer.
pub(crate) struct Puller {
    /// Shared by the pulls that wait to be sent: cloning a `Client` clones its actor address,
    /// which allocates.
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

/// Stateless: a restarted puller just goes on. Pulls in its mailbox wait for it, and those
/// sending in tasks of their own are not its futures, so a restart drops none of them.
impl Supervised for Puller {}

impl Actor for Puller {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // One pull in flight per queue at most: room for every queue of a large consumer.
        ctx.set_mailbox_capacity(65_536);
    }
}

impl Handler<Pull> for Puller {
    type Result = ();

    fn handle(&mut self, msg: Pull, _ctx: &mut Self::Context) {
        let Pull { request, reply } = msg;
        if reply.is_closed() {
            // The queue actor stopped waiting (dropped, or stopped) while this sat here.
            return;
        }
        if let Err(reply) = self.client.try_send_pull(&request, reply) {
            // A task of its own rather than of this actor: a restart of the puller must not
            // drop a pull half sent.
            let client = std::rc::Rc::clone(&self.client);
            actix_rt::spawn(async move { client.send_pull(&request, reply).await });
        }
    }
}

#[cfg(all(test, feature = "embedded"))]
mod tests {
    use super::*;
    use crate::actors::broker::{EmbeddedCluster, EmbeddedConfig};
    use crate::message::{Message, MessageQueue};
    use crate::{ClientConfig, Error, Producer, ProducerConfig};
    use tokio::sync::oneshot;

    /// Sends one pull of `queue` from `offset` through `puller` and waits for its answer.
    async fn pull_through(
        puller: &Addr<Puller>,
        queue: &MessageQueue,
        offset: i64,
    ) -> crate::Result<Vec<String>> {
        let request = Arc::new(PullRequest::new("puller-test", queue.clone(), offset));
        let (reply, answer) = oneshot::channel();
        puller
            .send(Pull {
                request: Arc::clone(&request),
                reply,
            })
            .await
            .expect("the puller takes the pull");
        let response = answer.await.expect("the pull is answered")?;
        let pulled = request
            .read_raw_answer(|| "broker".to_owned(), response)?
            .decode(&request)?;
        Ok(pulled
            .messages
            .iter()
            .map(|m| String::from_utf8_lossy(m.body()).into_owned())
            .collect())
    }

    #[actix_rt::test]
    async fn each_pull_is_answered_to_its_own_reply_with_or_without_a_cached_route() {
        let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral())
            .await
            .expect("embedded cluster starts");
        cluster
            .create_topic("PullerTopic", 1)
            .await
            .expect("topic created");
        let sender = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client");
        let producer = Producer::new(sender, ProducerConfig::default());
        for body in ["first", "second"] {
            producer
                .send(Message::new("PullerTopic", body))
                .await
                .expect("sent");
        }
        let client = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client");
        let puller = Puller::new(client.clone()).start();
        let queue = MessageQueue::new("PullerTopic", "broker-a", 0);

        // Nothing cached yet: the pull goes the way that fetches the route and connects.
        assert!(client.cached_route("PullerTopic").is_none());
        assert_eq!(
            pull_through(&puller, &queue, 0).await.expect("pulled"),
            ["first", "second"]
        );
        // Now both are cached and the pull is put on the wire at once.
        assert!(client.cached_route("PullerTopic").is_some());
        assert_eq!(
            pull_through(&puller, &queue, 1).await.expect("pulled"),
            ["second"]
        );

        // A pull that cannot reach any broker gets the reason, not silence.
        let unknown = MessageQueue::new("NoSuchTopic", "broker-a", 0);
        let failed = pull_through(&puller, &unknown, 0).await;
        assert!(
            matches!(failed, Err(Error::TopicRouteNotFound(_))),
            "{failed:?}"
        );
    }
}
