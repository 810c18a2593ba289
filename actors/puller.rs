//! The puller actor: where every queue actor of one consumer sends its pulls.
//!
//! It batches them: the pulls its mailbox holds when it runs (the queue actors that a burst of
//! answers woke each send their next one) are put on the wire together once the mailbox is
//! drained, those to one broker connection as one message ([`Client::try_send_pulls`]), with
//! one route lookup per topic. The broker address and connection come from the client's
//! shared cache, and all queues of one broker are pipelined on one socket (long polls
//! included). It does not wait for the answers: the connection hands each one straight to the
//! queue actor that asked, which decodes it, re-filters it by exact tag and decides what to do
//! with it. Its mailbox is the consumer's one queue of pull requests not yet sent.
//!
//! Only a pull that cannot be sent at once (no cached route or connection, a full connection
//! mailbox, or request hooks to run) becomes a task of its own, which sends it when it can.

use std::sync::Arc;

use actix::prelude::*;

use crate::actors::client::{Client, PullBatches, PullReply};
use crate::remoting::Expiry;
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
    /// When the connection fails the pull with a timeout if the broker has not answered.
    pub expiry: Option<Expiry>,
}

/// The puller of one consumer.
pub(crate) struct Puller {
    /// Shared by the pulls that wait to be sent: cloning a `Client` clones its actor address,
    /// which allocates.
    client: std::rc::Rc<Client>,
    /// Stopped on purpose (see `StopActor`).
    pub(crate) retired: bool,
    /// The pulls taken from the mailbox since the last flush.
    turn: Vec<Pull>,
    /// A [`FlushPulls`] is on its way (it runs once the mailbox is drained).
    flush_due: bool,
    /// The flush's grouping by connection, kept for its memory.
    batches: PullBatches,
    /// The flush's pulls that must wait, kept for its memory.
    waiting: Vec<Pull>,
}

/// Puts the pulls of the turn on the wire: sent by the puller to itself when the first pull
/// of a turn arrives, and handled after the messages its mailbox holds then (actix runs the
/// context's own items once the mailbox is drained).
struct FlushPulls;

impl Message for FlushPulls {
    type Result = ();
}

impl Puller {
    /// A puller using `client` for routes and connections.
    pub(crate) fn new(client: Client) -> Self {
        Puller {
            client: std::rc::Rc::new(client),
            retired: false,
            turn: Vec::new(),
            flush_due: false,
            batches: PullBatches::default(),
            waiting: Vec::new(),
        }
    }
}

/// A restarted puller goes on: pulls in its mailbox wait for it, those of the turn it had
/// taken are its fields (the flush it had asked for went down with the old context and is
/// asked for again), and those sending in tasks of their own are not its futures, so a
/// restart drops none of them.
impl Supervised for Puller {}

impl Actor for Puller {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // One pull in flight per queue at most: room for every queue of a large consumer.
        ctx.set_mailbox_capacity(65_536);
        self.flush_due = !self.turn.is_empty();
        if self.flush_due {
            ctx.notify(FlushPulls);
        }
    }
}

impl Handler<Pull> for Puller {
    type Result = ();

    fn handle(&mut self, pull: Pull, ctx: &mut Self::Context) {
        if pull.reply.is_closed() {
            // The queue actor stopped waiting (dropped, or stopped) while this sat here.
            return;
        }
        self.turn.push(pull);
        if !self.flush_due {
            self.flush_due = true;
            ctx.notify(FlushPulls);
        }
    }
}

impl Handler<FlushPulls> for Puller {
    type Result = ();

    fn handle(&mut self, _flush: FlushPulls, _ctx: &mut Self::Context) {
        self.flush_due = false;
        self.client
            .try_send_pulls(&mut self.turn, &mut self.batches, &mut self.waiting);
        for Pull {
            request,
            reply,
            expiry,
        } in self.waiting.drain(..)
        {
            // A task of its own rather than of this actor: a restart of the puller must not
            // drop a pull half sent.
            let client = std::rc::Rc::clone(&self.client);
            actix_rt::spawn(async move { client.send_pull(&request, reply, expiry).await });
        }
    }
}

#[cfg(all(test, feature = "embedded"))]
mod tests {
    use super::*;
    use crate::actors::broker::{EmbeddedCluster, EmbeddedConfig};
    use crate::broker::Fault;
    use crate::message::{Message, MessageQueue};
    use crate::protocol::codes::request_code::PULL_MESSAGE;
    use crate::{ClientConfig, Error, Producer, ProducerConfig};
    use std::time::Duration;
    use tokio::sync::oneshot;

    /// Sends one pull of `queue` from `offset` through `puller` and waits for its answer.
    async fn pull_through(
        puller: &Addr<Puller>,
        queue: &MessageQueue,
        offset: i64,
    ) -> crate::Result<Vec<String>> {
        pull_within(puller, queue, offset, Duration::from_secs(10)).await
    }

    /// [`pull_through`] with the connection failing the pull after `timeout`.
    async fn pull_within(
        puller: &Addr<Puller>,
        queue: &MessageQueue,
        offset: i64,
        timeout: Duration,
    ) -> crate::Result<Vec<String>> {
        let request = Arc::new(PullRequest::new("puller-test", queue.clone(), offset));
        let (reply, answer) = oneshot::channel();
        puller
            .send(Pull {
                request: Arc::clone(&request),
                reply,
                expiry: Expiry::after(std::time::Instant::now(), timeout, PULL_MESSAGE),
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

    /// A one-broker embedded cluster holding `bodies` in the one queue of `topic`.
    async fn cluster_holding(topic: &str, bodies: &[&'static str]) -> EmbeddedCluster {
        let cluster = EmbeddedCluster::start(EmbeddedConfig::ephemeral())
            .await
            .expect("embedded cluster starts");
        cluster.create_topic(topic, 1).await.expect("topic created");
        let sender = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client");
        let producer = Producer::new(sender, ProducerConfig::default());
        for body in bodies {
            producer
                .send(Message::new(topic, *body))
                .await
                .expect("sent");
        }
        cluster
    }

    #[actix_rt::test]
    async fn each_pull_is_answered_to_its_own_reply_with_or_without_a_cached_route() {
        let cluster = cluster_holding("PullerTopic", &["first", "second"]).await;
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

    #[actix_rt::test]
    async fn a_pull_the_broker_never_answers_fails_with_a_timeout_once_its_expiry_passes() {
        let cluster = cluster_holding("SilentTopic", &["only"]).await;
        let client = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client");
        let puller = Puller::new(client).start();
        let queue = MessageQueue::new("SilentTopic", "broker-a", 0);
        let broker = crate::actors::broker::broker_name(0);
        let silent = |fault| cluster.set_fault(&broker, PULL_MESSAGE, fault);
        // Far longer than the pull's timeout: a pull nobody fails would wait this long.
        let unanswered = |pull| async move {
            tokio::time::timeout(Duration::from_secs(10), pull)
                .await
                .expect("the connection fails a pull the broker never answers")
        };
        let expect_timeout = |outcome: crate::Result<Vec<String>>, path: &str| {
            assert!(
                matches!(
                    &outcome,
                    Err(Error::Timeout { code, timeout, .. })
                        if code.0 == PULL_MESSAGE && *timeout == Duration::from_millis(300)
                ),
                "{path}: {outcome:?}"
            );
        };

        // First nothing is cached, so the pull goes the way that fetches the route and
        // connects; then both are, and it is put on the wire at once. The connection times it
        // out either way, and serves the next pull.
        for path in ["the way that connects", "the cached connection"] {
            silent(Some(Fault::Drop)).await.expect("fault set");
            let pull = pull_within(&puller, &queue, 0, Duration::from_millis(300));
            expect_timeout(unanswered(pull).await, path);
            silent(None).await.expect("fault cleared");
            assert_eq!(
                pull_through(&puller, &queue, 0).await.expect("pulled"),
                ["only"],
                "{path}: the connection serves the next pull"
            );
        }
    }

    #[actix_rt::test]
    async fn the_pulls_of_one_turn_to_two_brokers_each_get_their_own_answer() {
        let mut config = EmbeddedConfig::ephemeral();
        config.brokers = 2;
        let cluster = EmbeddedCluster::start(config)
            .await
            .expect("embedded cluster starts");
        cluster
            .create_topic("TurnTopic", 2)
            .await
            .expect("topic created");
        let sender = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client");
        let producer = Producer::new(sender, ProducerConfig::default());
        let queues: Vec<MessageQueue> = ["broker-a", "broker-b"]
            .into_iter()
            .flat_map(|broker| (0..2).map(move |id| MessageQueue::new("TurnTopic", broker, id)))
            .collect();
        for queue in &queues {
            let body = format!("{}/{}", queue.broker_name, queue.queue_id);
            producer
                .send_to_queue(Message::new("TurnTopic", body), queue)
                .await
                .expect("sent");
        }
        let client = Client::start(ClientConfig::new(cluster.namesrv_addr())).expect("client");
        let puller = Puller::new(client).start();
        // Route and both connections cached first, so the turn below takes the batched path.
        for queue in &queues[1..3] {
            pull_through(&puller, queue, 0).await.expect("pulled");
        }

        // Queued one after another without yielding: the puller takes them in one turn.
        let mut answers = Vec::new();
        for queue in &queues {
            let request = Arc::new(PullRequest::new("puller-test", queue.clone(), 0));
            let (reply, answer) = oneshot::channel();
            puller
                .try_send(Pull {
                    request: Arc::clone(&request),
                    reply,
                    expiry: Expiry::after(std::time::Instant::now(), request.timeout, PULL_MESSAGE),
                })
                .expect("room in the mailbox");
            answers.push((request, answer));
        }
        for (request, answer) in answers {
            let response = answer.await.expect("answered").expect("pulled");
            let pulled = request
                .read_raw_answer(|| "broker".to_owned(), response)
                .and_then(|raw| raw.decode(&request))
                .expect("decoded");
            let bodies: Vec<String> = pulled
                .messages
                .iter()
                .map(|m| String::from_utf8_lossy(m.body()).into_owned())
                .collect();
            let queue = &request.queue;
            assert_eq!(
                bodies,
                [format!("{}/{}", queue.broker_name, queue.queue_id)]
            );
        }
    }
}
