//! Deterministic simulation of a consumer group.
//!
//! N push consumers (their queue state machines, `consumer::queue_core`, and their rebalance
//! decisions, `consumer::rebalance`, exactly as the actors run them) and M embedded broker cores
//! (`broker::BrokerCore`) plus the name-server core talk over a simulated network on a simulated
//! clock. Every request is a real `RemotingCommand` built and read by the same code the actors
//! use. A seeded RNG chooses every fault: message delays, lost responses, dropped connections,
//! broker restarts, consumer crashes, clean shutdowns, members joining, slow and failing
//! listeners. The same seed gives the same run, event for event: [`run`] returns a digest of
//! the trace, and a test checks two runs of one seed agree.
//!
//! After the faults stop the group runs quietly until it should have settled, and the
//! invariants are checked (see [`Violation`]): nothing acknowledged by a broker is lost (each
//! message consumed or in the DLQ), duplicates only where a fault or an overlapping hand-off
//! explains them, committed offsets never move backwards in a member, every queue has exactly
//! one owner once the group is stable, and caches stay within the flow-control bounds.
//!
//! Replay one seed with its trace:
//! `SIM_SEED=42 cargo test --lib sim::tests::replay -- --ignored --nocapture`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::broker::schedule::DelayLevels;
use crate::broker::{Action, BrokerConfig, BrokerCore, ConnId, NameServerCore};
use crate::consumer::allocate::Averagely;
use crate::consumer::config::{ConsumeFromWhere, ConsumeMode, PushConsumerConfig};
use crate::consumer::flow::QueueThresholds;
use crate::consumer::lite_core::SlotId;
use crate::consumer::offset::{start_offset, StartOffset, StoredOffset};
use crate::consumer::orderly::{dead_letter_message, OrderlyContext, OrderlyStatus};
use crate::consumer::queue_core::{
    BatchSpan, CallOutcome, CallRanges, Mode, OrderlyBatch, PullOrder, QueueAction, QueueCore,
    QueueEnv,
};
use crate::consumer::rebalance::{plan_changes, topic_share, RouteMemory, ABSENT_BROKER_GRACE};
use crate::consumer::retry;
use crate::error::{Error, RequestCode};
use crate::message::{decode_message, MessageExt, MessageQueue};
use crate::protocol::body::LockBatchResponseBody;
use crate::protocol::body::{
    self, decode_json, ConsumeType, ConsumerData, ConsumerListBody, HeartbeatData, TopicRouteData,
};
use crate::protocol::codes::{request_code, response_code};
use crate::protocol::header::{
    GetRouteInfoRequestHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2,
};
use crate::protocol::RemotingCommand;
use crate::remoting::{Pending as RemotingPending, RequestTable};
use crate::route::TopicRoute;
use crate::rpc::Subscription;
use crate::rpc::{
    consumer_ids_command, heartbeat_command, lock_batch_command, query_offset_command,
    send_back_command, unregister_client_command, update_offset_command, PullRequest,
};

/// Simulated time starts here (ms since the epoch), so times look like real ones.
const T0: i64 = 1_700_000_000_000;
const TOPIC: &str = "SimTopic";
const GROUP: &str = "SimGroup";
const PRODUCER_CONN: ConnId = 1;
/// Messages whose number is a multiple of this always fail: they must reach the DLQ.
const POISON_EVERY: u64 = 29;

use lite::{LiteMember, LiteTick};
use schedule::ScheduleMember;

/// A small, fast, seedable RNG (splitmix64): the only source of choice in a run.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`0` when `n == 0`).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// True with probability `per_mille / 1000`.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    fn range(&mut self, r: Range<i64>) -> i64 {
        r.start + self.below((r.end - r.start).max(1) as u64) as i64
    }
}

/// How hostile a run is; chosen from the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Profile {
    /// Delays, slow and failing listeners, joins and clean shutdowns only: no duplicate may
    /// appear that an overlapping hand-off does not explain.
    Clean,
    /// Everything: lost responses, dropped connections, broker restarts, consumer crashes.
    Chaos,
}

/// How the group consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SimMode {
    Concurrent,
    Orderly,
    KeyOrdered,
    /// Lite pull consumers subscribed to the topic (auto-commit).
    LitePull,
    /// Pull schedule services with a pull task per owned queue.
    Schedule,
}

/// The shape of one run.
#[derive(Debug, Clone)]
pub(crate) struct SimConfig {
    pub seed: u64,
    pub profile: Profile,
    pub mode: SimMode,
    pub brokers: usize,
    pub queues_per_broker: i32,
    pub consumers: usize,
    pub messages: u64,
    /// Faults happen in `0..fault_ms`; then the group runs undisturbed for `settle_ms`.
    pub fault_ms: i64,
    pub settle_ms: i64,
    /// Long faults too (`World::long_fault`): silent partitions longer than a lock's life,
    /// slow listener calls (past `consume_timeout`), clock jumps past the lock's life and slow
    /// brokers; members then time their calls out after [`LONG_FAULT_CONSUME_TIMEOUT`].
    pub long_faults: bool,
    /// Broker restarts behave as a real broker's (rocketmq-rust, Java): the name server drops
    /// the broker from routes while it is down, and it comes back with the consumer offsets
    /// it last flushed (every 5 s, the first 10 s after it starts), losing the commits since.
    pub lossy_restarts: bool,
    /// A bug put in on purpose (tests of the oracles): members judge their locks with an
    /// effectively endless `lock_max_live_time`, so they go on consuming on a lock their
    /// broker has let expire.
    pub ignore_lock_expiry: bool,
    /// Record a readable line per event (for replays).
    pub trace: bool,
}

impl SimConfig {
    /// The run a seed stands for: sizes and the fault profile are drawn from it too.
    pub(crate) fn from_seed(seed: u64) -> Self {
        let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(7));
        let mut cfg = SimConfig {
            seed,
            profile: if rng.chance(300) {
                Profile::Clean
            } else {
                Profile::Chaos
            },
            mode: match rng.below(4) {
                0 => SimMode::Orderly,
                1 => SimMode::KeyOrdered,
                _ => SimMode::Concurrent,
            },
            brokers: 1 + rng.below(2) as usize,
            queues_per_broker: 2 + rng.below(3) as i32,
            consumers: 1 + rng.below(3) as usize,
            messages: 40 + rng.below(80),
            fault_ms: 90_000,
            settle_ms: 150_000,
            long_faults: false,
            lossy_restarts: false,
            ignore_lock_expiry: false,
            trace: false,
        };
        // Drawn last and taken from concurrent runs only, so that most seeds of the push modes
        // (every orderly and key-ordered one) kept their runs when it came.
        if rng.chance(400) && cfg.mode == SimMode::Concurrent {
            cfg.mode = SimMode::LitePull;
        } else if rng.chance(300) && cfg.mode == SimMode::KeyOrdered {
            cfg.mode = SimMode::Schedule;
        }
        // Drawn after everything else, and the long faults draw from a stream of their own, so
        // that the seeds without them kept their runs event for event.
        cfg.long_faults = rng.chance(500);
        // Drawn after that, for the same reason: it changes only runs with broker restarts.
        cfg.lossy_restarts = rng.chance(500);
        cfg
    }
}

/// An invariant a run broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Violation {
    /// A message the broker acknowledged was neither consumed nor dead-lettered.
    Lost(String),
    /// A message was consumed successfully twice and nothing explains it.
    UnexplainedDuplicate(String),
    /// A member's committed offset of a queue went down.
    OffsetBackwards(String),
    /// After the group settled a queue had no owner or several.
    Ownership(String),
    /// A queue cached more than flow control allows.
    FlowControl(String),
    /// A member did not come back (or never finished shutting down) by the end.
    Stuck(String),
    /// Orderly: a message reached the listener before an earlier one of its queue (key, in
    /// key-ordered mode) was done.
    OutOfOrder(String),
    /// Orderly: a member started a call on a queue whose lock its broker did not hold for it,
    /// or two members ran calls on one queue at overlapping times.
    LockBroken(String),
    /// A member committed an offset past a message it had not finished (consumed, sent back
    /// or dead-lettered).
    CommitPastUnfinished(String),
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub(crate) struct Report {
    pub digest: u64,
    pub events: u64,
    pub acked: u64,
    pub consumed: u64,
    pub duplicates: u64,
    pub dead_lettered: u64,
    pub faults: u64,
    /// Faults by kind.
    pub fault_kinds: BTreeMap<&'static str, u64>,
    pub violations: Vec<Violation>,
    pub trace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Heartbeat,
    Rebalance,
    Persist,
    RouteRefresh,
    CleanExpired,
}

#[derive(Debug)]
enum Event {
    /// A command arrives at a broker on `conn`.
    ToBroker {
        broker: usize,
        conn: ConnId,
        command: RemotingCommand,
    },
    /// A command arrives at a consumer on `conn` (a response, or a broker's request).
    ToConsumer {
        consumer: usize,
        conn: ConnId,
        command: RemotingCommand,
    },
    /// The name server answers a consumer.
    NameServerReply {
        consumer: usize,
        incarnation: u32,
        command: RemotingCommand,
    },
    RequestTimeout {
        consumer: usize,
        incarnation: u32,
        conn: ConnId,
        opaque: i32,
    },
    Timer {
        consumer: usize,
        incarnation: u32,
        timer: Timer,
    },
    QueueTimer {
        consumer: usize,
        incarnation: u32,
        queue: MessageQueue,
        instance: u64,
        kind: QueueTimer,
    },
    BrokerTick(usize),
    BrokerUp(usize),
    Produce,
    StartConsumer(usize),
    Fault,
    /// The next long fault (`SimConfig::long_faults`).
    LongFault,
    /// A silent partition between a member and a broker begins; it lasts `partition.until`
    /// ms.
    Cut {
        consumer: usize,
        broker: usize,
        partition: Partition,
    },
    /// A silent partition between a member and a broker ends.
    Heal {
        consumer: usize,
        broker: usize,
    },
    /// A slow broker takes requests in on time again.
    BrokerFast(usize),
    /// A lite pull member's own schedule: its pull loops and its application's polls.
    Lite {
        consumer: usize,
        incarnation: u32,
        tick: LiteTick,
    },
    /// A schedule member's pull task runs.
    ScheduleRun {
        consumer: usize,
        incarnation: u32,
        queue: MessageQueue,
        instance: u64,
    },
}

#[derive(Debug)]
enum QueueTimer {
    StartOffset,
    Pull,
    Lock,
    RenewLock,
    Consume,
    /// A paused key is due (its due time by the member's clock).
    WakeKeys(i64),
    /// An orderly listener call ends.
    OrderlyConsumed {
        batch: OrderlyBatch,
        epoch: u64,
        success: bool,
    },
    Reconsume(Vec<MessageExt>, u64),
    /// A listener call ends.
    Consumed {
        messages: Arc<Vec<MessageExt>>,
        range: Range<usize>,
        epoch: u64,
        outcome: CallOutcome,
    },
}

/// What a consumer waits for under an opaque.
#[derive(Debug)]
enum Pending {
    Route(String),
    Heartbeat,
    ConsumerIds(String),
    QueryOffset(MessageQueue, u64),
    Pull(MessageQueue, u64, PullOrder, Box<PullRequest>),
    SendBack {
        queue: MessageQueue,
        instance: u64,
        batch: u64,
        index: usize,
    },
    Persist,
    FinishPersist(MessageQueue, bool),
    Unlock(MessageQueue),
    Lock(MessageQueue, u64),
    Recompute(MessageQueue, u64),
    DeadLetter {
        queue: MessageQueue,
        instance: u64,
        batch: u64,
        index: usize,
    },
    Unregister,
    /// A lite pull loop's start offset.
    LiteStart(SlotId, u64),
    /// A lite pull loop's pull: slot, chain, epoch.
    LitePull(SlotId, u64, u64, Box<PullRequest>),
    /// A queue let go by a lite or schedule member: its offset persisted.
    Release(MessageQueue),
    /// A schedule task's offset read from the broker: queue, task instance.
    ScheduleOffset(MessageQueue, u64),
    /// A schedule task's pull.
    SchedulePull(MessageQueue, u64, Box<PullRequest>),
}

struct DeadLetters {
    epoch: u64,
    suspend: Duration,
    attempted: Vec<i64>,
    /// Per letter: its key and queue offset, and whether the broker took it (once answered).
    results: Vec<(Option<u64>, i64, Option<bool>)>,
}

struct SentBack {
    queue: MessageQueue,
    epoch: u64,
    results: Vec<(MessageExt, Option<bool>)>,
}

struct SimQueue {
    /// Every offset below this was checked finished when it was committed past.
    checked_from: Option<i64>,
    /// Which start of the queue on this member: answers and timers of an earlier one (dropped
    /// and taken again since) are not for this core, as an actor's futures die with it.
    instance: u64,
    core: QueueCore,
    finishing: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Running,
    ShuttingDown,
    Down,
}

struct Consumer {
    incarnation: u32,
    client_id: String,
    life: Life,
    cfg: PushConsumerConfig,
    /// Live connection per broker.
    conns: BTreeMap<usize, ConnId>,
    /// Requests waiting for answers, per connection (0: the name server), in the request
    /// table the connection actor uses.
    tables: BTreeMap<ConnId, RequestTable<Pending>>,
    routes: BTreeMap<String, Option<TopicRoute>>,
    /// Each topic's queues at the last pass, with the brokers missing from its route.
    routes_seen: BTreeMap<String, RouteMemory>,
    queues: BTreeMap<MessageQueue, SimQueue>,
    offsets: crate::consumer::offset::OffsetTable,
    /// Topics still to answer in the rebalance pass under way, and what they gave so far.
    pass: Option<Pass>,
    pass_again: bool,
    send_backs: BTreeMap<u64, SentBack>,
    dead_letters: BTreeMap<u64, DeadLetters>,
    next_batch: u64,
    next_instance: u64,
    heartbeat_ok: bool,
    unregister_left: usize,
    /// How far this member's clock is from the simulated time (clock steps).
    clock_skew: i64,
    /// When the last heartbeat asked for by a queue went out.
    last_heartbeat_on_demand: Option<i64>,
    /// When the routes were last read again because a queue could not reach its broker.
    last_route_refresh_on_demand: Option<i64>,
    /// A lite pull member's consumer (`SimMode::LitePull`).
    lite: Option<LiteMember>,
    /// A schedule member's service (`SimMode::Schedule`).
    schedule: Option<ScheduleMember>,
}

struct Pass {
    waiting: BTreeSet<String>,
    target: BTreeSet<MessageQueue>,
    seen: BTreeSet<String>,
}

/// One successful listener call of a message.
#[derive(Debug, Clone)]
struct Consumption {
    at: i64,
    queue: MessageQueue,
    offset: i64,
}

/// An orderly listener call as the simulator ran it.
#[derive(Debug, Clone, Copy)]
struct CallSpan {
    member: usize,
    start: i64,
    end: i64,
}

/// Which directions a silent partition cuts, and until when.
#[derive(Debug, Clone, Copy)]
struct Partition {
    to_broker: bool,
    to_member: bool,
    until: i64,
}

/// `consume_timeout` of the members of a run with long faults: some of their slow calls
/// outlast it (the default, 15 minutes, none would).
const LONG_FAULT_CONSUME_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a lock check is not made for a member after its clock stepped back: its locks
/// look younger to it than they are for that long, and consuming on such a lock is the
/// clock's doing, which no client can tell (Java's neither).
const BACKWARD_STEP_GRACE_MS: i64 = 150_000;

/// The whole simulated world.
pub(crate) struct World {
    cfg: SimConfig,
    rng: Rng,
    now: i64,
    seq: u64,
    events: BinaryHeap<Reverse<(i64, u64, usize)>>,
    slab: BTreeMap<usize, Event>,
    next_slot: usize,
    brokers: Vec<BrokerCore>,
    broker_up: Vec<bool>,
    /// Per broker: the consumer offsets as last flushed, and when the next flush is due
    /// (`SimConfig::lossy_restarts`).
    flushed_offsets: Vec<(crate::broker::offsets::OffsetTable, i64)>,
    nameserver: NameServerCore,
    consumers: Vec<Consumer>,
    /// Live connections: conn id → (consumer, broker).
    conn_owner: BTreeMap<ConnId, (usize, usize)>,
    next_conn: ConnId,
    /// When the last frame sent on a connection (one direction) arrives.
    wire_clock: BTreeMap<(ConnId, bool), i64>,
    produced: u64,
    acked: BTreeSet<u64>,
    consumed: BTreeMap<u64, Vec<Consumption>>,
    /// When each message first reached a listener, whatever the outcome, and the queues it
    /// reached listeners from (its own and the retry queue).
    first_attempt: BTreeMap<u64, i64>,
    attempt_queues: BTreeMap<u64, BTreeSet<MessageQueue>>,
    /// When unclean faults happened (they explain duplicates).
    unclean: Vec<i64>,
    /// Per queue, the times when two members owned it at once (start of B before A finished).
    overlaps: BTreeMap<MessageQueue, Vec<i64>>,
    /// Per queue, when a member let it go and the committed offset it persisted then.
    releases: BTreeMap<MessageQueue, Vec<(i64, i64)>>,
    /// Per queue, since when a member owns it.
    owners: BTreeMap<MessageQueue, BTreeMap<usize, i64>>,
    /// Messages lost with a broker that restarted without its data.
    wiped: BTreeSet<u64>,
    /// Where each acknowledged message was stored.
    placed: BTreeMap<u64, (MessageQueue, i64)>,
    /// Per queue of a broker that lost its data: how far the group had read it. Messages
    /// stored afterwards below this offset are skipped by design (a consumer cannot tell a
    /// refilled queue's new offsets from the ones it already read).
    wipe_marks: BTreeMap<MessageQueue, i64>,
    /// Per queue, offsets the member working on them was told are finished: consumed, sent
    /// back, dead-lettered.
    settled: BTreeMap<MessageQueue, BTreeSet<i64>>,
    /// Orderly: per queue, offsets consumed or dead-lettered (what later offsets wait for).
    done: BTreeMap<MessageQueue, BTreeSet<i64>>,
    /// Orderly: per queue and member, listener calls in flight.
    calls: BTreeMap<MessageQueue, BTreeMap<usize, usize>>,
    /// Orderly: per queue, every listener call started, with its member and simulated span.
    call_spans: BTreeMap<MessageQueue, Vec<CallSpan>>,
    /// When each broker forgot its locks (a restart or a wipe).
    lock_resets: Vec<(usize, i64)>,
    /// When each member's clock stepped back (its locks then look younger to it than they
    /// are).
    backward_steps: Vec<(usize, i64)>,
    /// The draws of the long faults, a stream apart from `rng`.
    long_rng: Rng,
    /// Silent partitions by (member, broker): frames of the cut directions are lost, and
    /// neither side hears of it.
    partitions: BTreeMap<(usize, usize), Partition>,
    /// Per member, until when its listener calls are slow.
    slow_until: Vec<i64>,
    /// Per broker, until when it takes in requests late, and by how much (a broker that is
    /// slow rather than down: every connection's requests wait, still in order).
    broker_late: Vec<(i64, i64)>,
    /// Faults by kind.
    fault_kinds: BTreeMap<&'static str, u64>,
    violations: Vec<Violation>,
    faults: u64,
    digest: u64,
    trace: String,
    event_count: u64,
}

fn mix(digest: u64, value: u64) -> u64 {
    (digest ^ value).wrapping_mul(0x0000_0100_0000_01B3)
}

fn hash_str(digest: u64, s: &str) -> u64 {
    s.bytes().fold(digest, |d, b| mix(d, u64::from(b)))
}

fn key_of(message: &MessageExt) -> Option<u64> {
    std::str::from_utf8(message.body())
        .ok()?
        .strip_prefix('k')?
        .parse()
        .ok()
}

/// What a QUERY_CONSUMER_OFFSET answer (or its failure) says of the stored offset.
fn stored_offset(answer: &Result<RemotingCommand, Error>) -> StoredOffset {
    match answer {
        Ok(r) => StoredOffset::from_query_response(
            Some(r.code),
            r.ext("offset").and_then(|o| o.parse().ok()),
        ),
        Err(_) => StoredOffset::Unavailable,
    }
}

/// The keys of the messages `broker` stores in `topic`'s queue `queue_id` below `end` (all of
/// them with `i64::MAX`).
fn stored_keys(broker: &BrokerCore, topic: &str, queue_id: i32, end: i64) -> Vec<u64> {
    let store = broker.store();
    let end = store.max_offset(topic, queue_id).min(end);
    (store.min_offset(topic, queue_id)..end)
        .filter_map(|offset| store.record_at(topic, queue_id, offset))
        .filter_map(|raw| {
            let mut raw = Bytes::copy_from_slice(raw);
            decode_message(&mut raw).ok().as_ref().and_then(key_of)
        })
        .collect()
}

/// `k<key>@<offset>` of each message, for traces.
fn keys_text(messages: &[MessageExt]) -> Vec<String> {
    messages
        .iter()
        .map(|m| format!("k{}@{}", key_of(m).unwrap_or(u64::MAX), m.queue_offset))
        .collect()
}

fn broker_name(index: usize) -> String {
    format!("broker-{index}")
}

fn broker_addr(index: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1 + index as u8], 10911))
}

fn broker_of(queue: &MessageQueue) -> Option<usize> {
    queue.broker_name.strip_prefix("broker-")?.parse().ok()
}

impl World {
    /// A world for `cfg`, with its first events scheduled.
    pub(crate) fn new(cfg: SimConfig) -> Self {
        let rng = Rng::new(cfg.seed);
        let mut brokers = Vec::new();
        let mut nameserver = NameServerCore::default();
        for i in 0..cfg.brokers {
            let mut core = BrokerCore::new(BrokerConfig {
                broker_name: broker_name(i),
                store_host: broker_addr(i),
                default_queues: cfg.queues_per_broker,
                delay_levels: DelayLevels::parse(
                    "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms 900ms 1s 1s 1s 1s 1s 1s 1s 1s 1s",
                )
                .unwrap_or_default(),
                ..BrokerConfig::default()
            });
            core.create_topic(crate::broker::store::TopicConfig::new(
                TOPIC,
                cfg.queues_per_broker,
            ));
            core.on_connect(PRODUCER_CONN, "10.9.9.9:4000".parse().expect("address"));
            nameserver.register(core.registration());
            brokers.push(core);
        }
        let consumers = (0..cfg.consumers).map(|_| Consumer::down(&cfg)).collect();
        let broker_up = vec![true; cfg.brokers];
        let mut world = World {
            rng,
            now: T0,
            seq: 0,
            events: BinaryHeap::new(),
            slab: BTreeMap::new(),
            next_slot: 0,
            flushed_offsets: vec![Default::default(); cfg.brokers],
            brokers,
            broker_up,
            nameserver,
            consumers,
            conn_owner: BTreeMap::new(),
            next_conn: 100,
            wire_clock: BTreeMap::new(),
            produced: 0,
            acked: BTreeSet::new(),
            consumed: BTreeMap::new(),
            first_attempt: BTreeMap::new(),
            attempt_queues: BTreeMap::new(),
            unclean: Vec::new(),
            overlaps: BTreeMap::new(),
            releases: BTreeMap::new(),
            owners: BTreeMap::new(),
            wiped: BTreeSet::new(),
            placed: BTreeMap::new(),
            wipe_marks: BTreeMap::new(),
            settled: BTreeMap::new(),
            done: BTreeMap::new(),
            calls: BTreeMap::new(),
            call_spans: BTreeMap::new(),
            lock_resets: Vec::new(),
            backward_steps: Vec::new(),
            long_rng: Rng::new(cfg.seed ^ 0x5EED_10C4_FA17_0000),
            partitions: BTreeMap::new(),
            slow_until: vec![0; cfg.consumers],
            broker_late: vec![(0, 0); cfg.brokers],
            fault_kinds: BTreeMap::new(),
            violations: Vec::new(),
            faults: 0,
            digest: 0xCBF2_9CE4_8422_2325,
            trace: String::new(),
            event_count: 0,
            cfg,
        };
        for c in 0..world.cfg.consumers {
            let at = world.rng.range(0..3_000);
            world.schedule(at, Event::StartConsumer(c));
        }
        world.schedule(500, Event::Produce);
        for b in 0..world.cfg.brokers {
            world.schedule(10, Event::BrokerTick(b));
        }
        let first_fault = world.rng.range(2_000..8_000);
        world.schedule(first_fault, Event::Fault);
        if world.cfg.long_faults {
            let first = world.long_rng.range(3_000..20_000);
            world.schedule(first, Event::LongFault);
        }
        world
    }

    fn schedule(&mut self, after_ms: i64, event: Event) {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.seq += 1;
        self.slab.insert(slot, event);
        self.events
            .push(Reverse((self.now + after_ms.max(0), self.seq, slot)));
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if self.cfg.trace {
            let text = line();
            let _ = writeln!(self.trace, "{:>9} {}", self.now - T0, text);
        }
    }

    /// The delay of the next frame on `conn` in one direction: random, but never overtaking
    /// an earlier frame (a connection is a TCP stream: frames arrive in the order sent).
    fn frame_delay(&mut self, conn: ConnId, to_broker: bool) -> i64 {
        let late = match self.conn_owner.get(&conn) {
            Some(&(_, broker)) if to_broker && self.broker_late[broker].0 > self.now => {
                self.broker_late[broker].1
            }
            _ => 0,
        };
        let at = self.now + self.network_delay() + late;
        let last = self.wire_clock.entry((conn, to_broker)).or_insert(at);
        *last = (*last).max(at);
        *last - self.now
    }

    fn network_delay(&mut self) -> i64 {
        // At most 1 s each way, so a round trip stays under the 3 s request timeout: delays
        // alone never make a request fail.
        if self.rng.chance(30) {
            self.rng.range(50..1_000)
        } else {
            self.rng.range(0..4)
        }
    }

    /// What member `c`'s clock reads now (its cores are fed this time).
    fn clock(&self, c: usize) -> i64 {
        self.now + self.consumers[c].clock_skew
    }

    fn in_fault_phase(&self) -> bool {
        self.now - T0 < self.cfg.fault_ms
    }

    /// Runs to the end and checks the invariants.
    pub(crate) fn run(mut self) -> Report {
        let end = T0 + self.cfg.fault_ms + self.cfg.settle_ms;
        while let Some(Reverse((at, _, slot))) = self.events.pop() {
            if at > end {
                break;
            }
            self.now = at;
            let Some(event) = self.slab.remove(&slot) else {
                continue;
            };
            self.event_count += 1;
            self.digest = mix(self.digest, at as u64);
            self.handle(event);
        }
        self.check_end();
        let duplicates = self
            .consumed
            .values()
            .map(|v| v.len().saturating_sub(1) as u64)
            .sum();
        let dead = self.dead_lettered().len() as u64;
        Report {
            digest: self.digest,
            events: self.event_count,
            acked: self.acked.len() as u64,
            consumed: self.consumed.len() as u64,
            duplicates,
            dead_lettered: dead,
            faults: self.faults,
            fault_kinds: self.fault_kinds,
            violations: self.violations,
            trace: self.trace,
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::ToBroker {
                broker,
                conn,
                command,
            } => {
                if !self.broker_up[broker] || !self.conn_owner.contains_key(&conn) {
                    return;
                }
                self.digest = mix(self.digest, command.code as u64);
                let now = self.now;
                let actions = self.brokers[broker].handle(conn, command, now);
                self.broker_actions(broker, actions);
            }
            Event::ToConsumer {
                consumer,
                conn,
                command,
            } => {
                if self.conn_owner.get(&conn).map(|o| o.0) != Some(consumer) {
                    return;
                }
                if command.is_response() {
                    self.on_response(consumer, conn, command);
                } else if command.code == request_code::NOTIFY_CONSUMER_IDS_CHANGED {
                    self.note(|| format!("c{consumer} notified: group changed"));
                    self.rebalance(consumer);
                }
            }
            Event::NameServerReply {
                consumer,
                incarnation,
                command,
            } => {
                if self.consumers[consumer].incarnation == incarnation {
                    self.on_response(consumer, 0, command);
                }
            }
            Event::RequestTimeout {
                consumer,
                incarnation,
                conn,
                opaque,
            } => {
                if self.consumers[consumer].incarnation != incarnation {
                    return;
                }
                let waiting = self.consumers[consumer]
                    .tables
                    .get_mut(&conn)
                    .and_then(|table| table.take(opaque));
                if let Some(RemotingPending { reply: pending, .. }) = waiting {
                    let error = Error::Timeout {
                        peer: "sim".into(),
                        code: RequestCode(0),
                        timeout: Duration::ZERO,
                    };
                    self.on_answer(consumer, pending, Err(error));
                }
            }
            Event::Timer {
                consumer,
                incarnation,
                timer,
            } => {
                if self.consumers[consumer].incarnation == incarnation
                    && self.consumers[consumer].life == Life::Running
                {
                    self.on_timer(consumer, timer);
                }
            }
            Event::QueueTimer {
                consumer,
                incarnation,
                queue,
                instance,
                kind,
            } => {
                if self.consumers[consumer].incarnation == incarnation
                    && self.consumers[consumer].life != Life::Down
                {
                    self.on_queue_timer(consumer, queue, instance, kind);
                }
            }
            Event::BrokerTick(b) => {
                if self.broker_up[b] {
                    let now = self.now;
                    let actions = self.brokers[b].on_tick(now);
                    self.broker_actions(b, actions);
                    if self.cfg.lossy_restarts && now >= self.flushed_offsets[b].1 {
                        self.flushed_offsets[b] = (self.brokers[b].offsets().clone(), now + 5_000);
                    }
                }
                self.schedule(50, Event::BrokerTick(b));
            }
            Event::BrokerUp(b) => {
                self.note(|| format!("broker-{b} up"));
                self.broker_up[b] = true;
                if self.cfg.lossy_restarts {
                    self.nameserver.register(self.brokers[b].registration());
                    // A real broker's first flush of offsets comes 10 s after it starts.
                    self.flushed_offsets[b].1 = self.now + 10_000;
                }
            }
            Event::Produce => self.produce(),
            Event::StartConsumer(c) => self.start_consumer(c),
            Event::Fault => self.fault(),
            Event::LongFault => self.long_fault(),
            Event::Cut {
                consumer,
                broker,
                partition,
            } => {
                let lasts = partition.until;
                self.unclean.push(self.now);
                self.note(|| format!("c{consumer} and broker-{broker} cut apart for {lasts} ms"));
                self.partitions.insert(
                    (consumer, broker),
                    Partition {
                        until: self.now + lasts,
                        ..partition
                    },
                );
                self.schedule(lasts, Event::Heal { consumer, broker });
            }
            Event::Heal { consumer, broker } => {
                if self
                    .partitions
                    .get(&(consumer, broker))
                    .is_some_and(|p| p.until <= self.now)
                {
                    self.partitions.remove(&(consumer, broker));
                    self.unclean.push(self.now);
                    self.note(|| format!("c{consumer} and broker-{broker} reach each other again"));
                }
            }
            Event::BrokerFast(b) => {
                if self.broker_late[b].0 <= self.now {
                    self.broker_late[b] = (0, 0);
                    self.note(|| format!("broker-{b} answers in time again"));
                }
            }
            Event::Lite {
                consumer,
                incarnation,
                tick,
            } => {
                if self.consumers[consumer].incarnation == incarnation {
                    self.on_lite_tick(consumer, tick);
                }
            }
            Event::ScheduleRun {
                consumer,
                incarnation,
                queue,
                instance,
            } => {
                if self.consumers[consumer].incarnation == incarnation {
                    self.schedule_run(consumer, queue, instance);
                }
            }
        }
    }

    // ----- brokers and the producer -----

    fn broker_actions(&mut self, broker: usize, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Send { conn, command } => {
                    if conn == PRODUCER_CONN {
                        continue;
                    }
                    let Some(&(consumer, _)) = self.conn_owner.get(&conn) else {
                        continue;
                    };
                    if command.is_response()
                        && self.cfg.profile == Profile::Chaos
                        && self.in_fault_phase()
                        && self.rng.chance(8)
                    {
                        // A lost response: the request times out on the client.
                        self.count_fault("lost_response");
                        self.unclean.push(self.now);
                        self.note(|| format!("lost response {} to c{consumer}", command.opaque));
                        continue;
                    }
                    let delay = self.frame_delay(conn, false);
                    if self.partitioned(consumer, broker, false) {
                        continue;
                    }
                    self.schedule(
                        delay,
                        Event::ToConsumer {
                            consumer,
                            conn,
                            command,
                        },
                    );
                }
                Action::Close { conn } => self.drop_connection(conn, "idle"),
                Action::TopicsChanged => {
                    // A broker that is down registers again when it is up.
                    if self.broker_up[broker] || !self.cfg.lossy_restarts {
                        let registration = self.brokers[broker].registration();
                        self.nameserver.register(registration);
                    }
                }
                Action::CallDone { .. } => {}
            }
        }
    }

    fn produce(&mut self) {
        if self.produced >= self.cfg.messages {
            return;
        }
        let key = self.produced;
        let broker = self.rng.below(self.cfg.brokers as u64) as usize;
        let queue_id = self.rng.below(self.cfg.queues_per_broker as u64) as i32;
        if self.broker_up[broker] {
            let request = RemotingCommand::request(request_code::SEND_MESSAGE_V2)
                .with_ext("a", "SimProducer")
                .with_ext("b", TOPIC)
                .with_ext("c", "TBW102")
                .with_ext("d", "4")
                .with_ext("e", queue_id.to_string())
                .with_ext("f", "0")
                .with_ext("g", self.now.to_string())
                .with_ext("h", "0")
                .with_ext("i", format!("KEYS\u{1}key{}\u{2}", key % 5))
                .with_opaque(key as i32)
                .with_body(Bytes::from(format!("k{key}")));
            let now = self.now;
            let actions = self.brokers[broker].handle(PRODUCER_CONN, request, now);
            let stored_at = actions.iter().find_map(|a| match a {
                Action::Send {
                    conn: PRODUCER_CONN,
                    command,
                } if command.is_response() && command.code == response_code::SUCCESS => command
                    .ext("queueOffset")
                    .and_then(|o| o.parse::<i64>().ok()),
                _ => None,
            });
            self.broker_actions(broker, actions);
            if let Some(offset) = stored_at {
                self.acked.insert(key);
                let mq = MessageQueue::new(TOPIC, broker_name(broker), queue_id);
                self.placed.insert(key, (mq, offset));
                self.produced += 1;
            }
        }
        let gap = self
            .rng
            .range(0..(self.cfg.fault_ms / self.cfg.messages as i64).max(1));
        self.schedule(gap, Event::Produce);
    }

    // ----- faults -----

    fn fault(&mut self) {
        if !self.in_fault_phase() {
            // Bring everyone back for the quiet phase.
            for c in 0..self.cfg.consumers {
                if self.consumers[c].life == Life::Down {
                    self.start_consumer(c);
                }
            }
            return;
        }
        let chaos = self.cfg.profile == Profile::Chaos;
        let roll = self.rng.below(100);
        let consumers = self.cfg.consumers as u64;
        let c = self.rng.below(consumers) as usize;
        match roll {
            0..=29 if chaos => {
                // Drop one connection of a consumer.
                if let Some(&conn) = self.consumers[c]
                    .conns
                    .values()
                    .nth(self.rng.below(self.cfg.brokers as u64) as usize)
                {
                    self.count_fault("connection_drop");
                    self.unclean.push(self.now);
                    self.drop_connection(conn, "fault");
                }
            }
            30..=44 if chaos => {
                let b = self.rng.below(self.cfg.brokers as u64) as usize;
                if self.broker_up[b] {
                    self.count_fault(if self.cfg.lossy_restarts {
                        "broker_restart_losing_offsets"
                    } else {
                        "broker_restart"
                    });
                    self.lock_resets.push((b, self.now));
                    self.unclean.push(self.now);
                    self.note(|| format!("broker-{b} restarts"));
                    self.drop_broker_connections(b, "broker restart");
                    self.brokers[b].on_restart();
                    if self.cfg.lossy_restarts {
                        let flushed = self.flushed_offsets[b].0.clone();
                        self.brokers[b].set_offsets(flushed);
                        self.nameserver.unregister(&broker_name(b));
                    }
                    self.brokers[b]
                        .on_connect(PRODUCER_CONN, "10.9.9.9:4000".parse().expect("address"));
                    self.broker_up[b] = false;
                    // A real broker takes seconds to start again (its store to recover).
                    let down = if self.cfg.lossy_restarts {
                        self.rng.range(2_000..15_000)
                    } else {
                        self.rng.range(100..4_000)
                    };
                    self.schedule(down, Event::BrokerUp(b));
                }
            }
            45..=59 if chaos && self.consumers[c].life == Life::Running => {
                self.count_fault("crash");
                self.unclean.push(self.now);
                self.crash(c);
                let back = self.rng.range(500..10_000);
                self.schedule(back, Event::StartConsumer(c));
            }
            60..=79 if self.consumers[c].life == Life::Running => {
                self.count_fault("shutdown");
                self.shutdown(c);
                let back = self.rng.range(2_000..20_000);
                self.schedule(back, Event::StartConsumer(c));
            }
            80..=87 => {
                // The member's wall clock steps (NTP, a VM resumed): -30 s to +60 s.
                let step = self.rng.range(-30_000..60_000);
                self.count_fault("clock_step");
                if step < 0 {
                    self.backward_steps.push((c, self.now));
                } else if self.cfg.long_faults {
                    // As a clock jump: with the short consume_timeout of these runs, calls in
                    // flight may now look timed out.
                    self.unclean.push(self.now);
                }
                self.consumers[c].clock_skew += step;
                self.note(|| format!("c{c} clock steps {step} ms"));
            }
            88..=90 if chaos => {
                let b = self.rng.below(self.cfg.brokers as u64) as usize;
                self.wipe_broker(b);
            }
            _ => {}
        }
        let next = self.rng.range(3_000..15_000);
        self.schedule(next, Event::Fault);
    }

    /// A long fault (runs with `SimConfig::long_faults`), drawn from their own stream: what it
    /// takes for the slow paths to matter — a member cut off from a broker for longer than
    /// its lock's life (30 s) and the broker's lock expiry (60 s) while its listener is slow,
    /// listener calls past `consume_timeout`, clock jumps past the lock's life, a broker that
    /// answers late rather than not at all. Each ends by `fault_ms` + 60 s, so the group has
    /// time to settle.
    fn long_fault(&mut self) {
        let latest_end = T0 + self.cfg.fault_ms + 60_000;
        if !self.in_fault_phase() {
            return;
        }
        let c = self.long_rng.below(self.cfg.consumers as u64) as usize;
        // Mostly a broker of one of the member's queues: a partition from a broker it has
        // nothing on tests little.
        let owned: Vec<usize> = self.consumers[c]
            .queues
            .keys()
            .filter_map(broker_of)
            .collect();
        let b = if !owned.is_empty() && self.long_rng.chance(800) {
            owned[self.long_rng.below(owned.len() as u64) as usize]
        } else {
            self.long_rng.below(self.cfg.brokers as u64) as usize
        };
        let roll = self.long_rng.below(100);
        let running = self.consumers[c].life == Life::Running;
        match roll {
            0..=44 if running => {
                // Silent: neither side hears of it; requests time out, answers and the
                // broker's notices are lost. Both ways, or one.
                let (to_broker, to_member, kind) = match self.long_rng.below(4) {
                    0 => (true, false, "partition_to_broker"),
                    1 => (false, true, "partition_to_member"),
                    _ => (true, true, "partition_both_ways"),
                };
                // Mostly after the listener went slow, so the member's cache is full when the
                // cut comes and outlives its lock.
                let lead = if self.long_rng.chance(700) {
                    self.long_rng.range(10_000..25_000)
                } else {
                    0
                };
                // Mostly past the broker's lock expiry (60 s), else past the lock's life (30 s).
                let lasts = if self.long_rng.chance(750) {
                    self.long_rng.range(62_000..110_000)
                } else {
                    self.long_rng.range(32_000..62_000)
                };
                let lasts = lasts.min(latest_end - self.now - lead).max(1_000);
                if lead > 0 {
                    self.slow_until[c] = self.slow_until[c].max(self.now + lead + lasts);
                }
                self.count_fault(kind);
                self.schedule(
                    lead,
                    Event::Cut {
                        consumer: c,
                        broker: b,
                        partition: Partition {
                            to_broker,
                            to_member,
                            until: lasts,
                        },
                    },
                );
            }
            45..=64 => {
                let lasts = self.long_rng.range(20_000..60_000);
                self.count_fault("slow_listener");
                self.unclean.push(self.now);
                self.note(|| format!("c{c}'s listener is slow for {lasts} ms"));
                self.slow_until[c] = self.slow_until[c].max(self.now + lasts);
            }
            65..=79 => {
                // Past the lock's life (30 s) either way.
                let size = self.long_rng.range(31_000..90_000);
                let step = if self.long_rng.chance(500) {
                    size
                } else {
                    -size
                };
                self.count_fault("clock_jump");
                if step < 0 {
                    self.backward_steps.push((c, self.now));
                } else {
                    // Calls in flight look older than they are: past consume_timeout, they
                    // are sent back while they run (Java's cleanExpiredMsg does the same).
                    self.unclean.push(self.now);
                }
                self.consumers[c].clock_skew += step;
                self.note(|| format!("c{c} clock jumps {step} ms"));
            }
            80..=99 if self.broker_up[b] => {
                let late = self.long_rng.range(500..2_500);
                let lasts = self.long_rng.range(5_000..40_000);
                self.count_fault("slow_broker");
                self.unclean.push(self.now);
                self.note(|| format!("broker-{b} answers {late} ms late for {lasts} ms"));
                self.broker_late[b] = (self.now + lasts, late);
                self.schedule(lasts, Event::BrokerFast(b));
            }
            _ => {}
        }
        let next = self.long_rng.range(10_000..40_000);
        self.schedule(next, Event::LongFault);
    }

    /// Broker `b` restarts without its data (no persistence): messages, offsets and retry
    /// topics are gone. What it held is no longer expected to be consumed; the group must carry
    /// on with what is produced afterwards.
    fn wipe_broker(&mut self, b: usize) {
        if !self.broker_up[b] {
            return;
        }
        self.count_fault("broker_wipe");
        self.lock_resets.push((b, self.now));
        self.unclean.push(self.now);
        self.note(|| format!("broker-{b} restarts without its data"));
        self.drop_broker_connections(b, "broker wiped");
        // Every message the broker stored (its own and its retry copies) is gone.
        let name = broker_name(b);
        let mut gone = Vec::new();
        for config in self.brokers[b].topic_configs() {
            for queue_id in 0..config.read_queue_nums {
                gone.extend(stored_keys(
                    &self.brokers[b],
                    &config.topic_name,
                    queue_id,
                    i64::MAX,
                ));
            }
        }
        self.wiped.extend(gone);
        // How far any member had read each queue of it (next pull, committed, stored offset).
        let mut marks: BTreeMap<MessageQueue, i64> = BTreeMap::new();
        for consumer in &self.consumers {
            for (mq, q) in &consumer.queues {
                if mq.broker_name == name {
                    let reached = q.core.next_offset.max(q.core.committed).unwrap_or(0);
                    let mark = marks.entry(mq.clone()).or_default();
                    *mark = (*mark).max(reached);
                }
            }
        }
        for c in 0..self.consumers.len() {
            let positions = self
                .lite_positions(c)
                .into_iter()
                .chain(self.schedule_positions(c));
            for (mq, reached) in positions {
                if mq.broker_name == name {
                    let mark = marks.entry(mq).or_default();
                    *mark = (*mark).max(reached);
                }
            }
        }
        for queue_id in 0..self.cfg.queues_per_broker {
            let mq = MessageQueue::new(TOPIC, name.clone(), queue_id);
            let stored = self.brokers[b]
                .offsets()
                .query(GROUP, TOPIC, queue_id)
                .unwrap_or(0);
            let mark = marks.entry(mq).or_default();
            *mark = (*mark).max(stored);
        }
        for (mq, mark) in marks {
            let entry = self.wipe_marks.entry(mq).or_default();
            *entry = (*entry).max(mark);
        }
        self.done.retain(|mq, _| mq.broker_name != name);
        self.settled.retain(|mq, _| mq.broker_name != name);
        for consumer in &mut self.consumers {
            for (mq, q) in consumer.queues.iter_mut() {
                if mq.broker_name == name {
                    q.checked_from = None;
                }
            }
        }
        let config = self.brokers[b].config().clone();
        let mut fresh = BrokerCore::new(config);
        fresh.create_topic(crate::broker::store::TopicConfig::new(
            TOPIC,
            self.cfg.queues_per_broker,
        ));
        fresh.on_connect(PRODUCER_CONN, "10.9.9.9:4000".parse().expect("address"));
        self.nameserver.register(fresh.registration());
        self.brokers[b] = fresh;
        self.broker_up[b] = false;
        let down = self.rng.range(100..4_000);
        self.schedule(down, Event::BrokerUp(b));
    }

    /// Closes `conn` on both sides: the broker forgets it, the consumer fails what waits on it
    /// and reconnects on its next request.
    /// Closes every connection to broker `b`.
    fn drop_broker_connections(&mut self, b: usize, why: &str) {
        let conns: Vec<ConnId> = self
            .conn_owner
            .iter()
            .filter(|(_, (_, broker))| *broker == b)
            .map(|(conn, _)| *conn)
            .collect();
        for conn in conns {
            self.drop_connection(conn, why);
        }
    }

    fn drop_connection(&mut self, conn: ConnId, why: &str) {
        let Some((consumer, broker)) = self.conn_owner.remove(&conn) else {
            return;
        };
        self.wire_clock.remove(&(conn, true));
        self.wire_clock.remove(&(conn, false));
        self.note(|| format!("c{consumer} conn {conn} to broker-{broker} closed ({why})"));
        let actions = self.brokers[broker].on_disconnect(conn);
        self.broker_actions(broker, actions);
        let c = &mut self.consumers[consumer];
        if c.conns.get(&broker) == Some(&conn) {
            c.conns.remove(&broker);
        }
        let failed = self.consumers[consumer]
            .tables
            .remove(&conn)
            .map(|mut table| table.drain())
            .unwrap_or_default();
        for (_, waiting) in failed {
            self.on_answer(
                consumer,
                waiting.reply,
                Err(Error::ConnectionClosed(broker_name(broker))),
            );
        }
        // Orderly queues of that broker hear of it (as the queue actor does from its
        // connection) and stop counting on their lock.
        let c = &self.consumers[consumer];
        let queues: Vec<(MessageQueue, u64)> = c
            .queues
            .iter()
            .filter(|(mq, _)| broker_of(mq) == Some(broker))
            .map(|(mq, q)| (mq.clone(), q.instance))
            .collect();
        let alive = c.life != Life::Down;
        if alive {
            for (mq, instance) in queues {
                self.with_queue(consumer, &mq, instance, |core, _cfg, _env, now, out| {
                    core.on_broker_disconnected(now, out)
                });
            }
        }
    }

    // ----- consumer life -----

    fn start_consumer(&mut self, c: usize) {
        match self.consumers[c].life {
            Life::Down => {}
            Life::ShuttingDown => {
                // Still shutting down: come back when it is done.
                self.schedule(1_000, Event::StartConsumer(c));
                return;
            }
            Life::Running => return,
        }
        let incarnation = self.consumers[c].incarnation + 1;
        let mut consumer = Consumer::down(&self.cfg);
        consumer.incarnation = incarnation;
        consumer.client_id = format!("10.1.0.{c}@sim{c}-{incarnation}");
        consumer.life = Life::Running;
        self.consumers[c] = consumer;
        self.note(|| format!("c{c} starts (incarnation {incarnation})"));
        self.fetch_routes(c);
        if self.consumers[c].lite.is_some() {
            self.schedule(
                0,
                Event::Lite {
                    consumer: c,
                    incarnation,
                    tick: LiteTick::Poll,
                },
            );
        }
        for (timer, every) in [
            (Timer::Heartbeat, 30_000),
            (Timer::Rebalance, 20_000),
            (Timer::Persist, 5_000),
            (Timer::RouteRefresh, 30_000),
            (Timer::CleanExpired, 1_000),
        ] {
            let first = self.rng.range(0..every);
            self.schedule(
                first,
                Event::Timer {
                    consumer: c,
                    incarnation,
                    timer,
                },
            );
        }
    }

    fn crash(&mut self, c: usize) {
        self.note(|| format!("c{c} crashes"));
        // Down first: what fails as its connections close is not acted on.
        self.consumers[c].life = Life::Down;
        for owners in self.owners.values_mut() {
            owners.remove(&c);
        }
        let conns: Vec<ConnId> = self.consumers[c].conns.values().copied().collect();
        for conn in conns {
            self.drop_connection(conn, "crash");
        }
        let incarnation = self.consumers[c].incarnation;
        self.consumers[c] = Consumer::down(&self.cfg);
        self.consumers[c].incarnation = incarnation;
        for calls in self.calls.values_mut() {
            calls.remove(&c);
        }
        // Its listener calls die with it.
        let now = self.now;
        for spans in self.call_spans.values_mut() {
            for span in spans.iter_mut().filter(|s| s.member == c && s.end > now) {
                span.end = now;
            }
        }
    }

    fn shutdown(&mut self, c: usize) {
        self.note(|| format!("c{c} shuts down"));
        self.consumers[c].life = Life::ShuttingDown;
        if self.consumers[c].lite.is_some() {
            self.lite_shutdown(c);
        }
        if self.consumers[c].schedule.is_some() {
            self.schedule_shutdown(c);
        }
        let queues: Vec<MessageQueue> = self.consumers[c].queues.keys().cloned().collect();
        for mq in queues {
            self.drop_queue(c, &mq);
        }
        self.maybe_unregister(c);
    }

    fn maybe_unregister(&mut self, c: usize) {
        let releasing = self.consumers[c]
            .lite
            .as_ref()
            .is_some_and(|l| !l.releasing.is_empty())
            || self.consumers[c]
                .schedule
                .as_ref()
                .is_some_and(|m| !m.tasks.is_empty() || !m.releasing.is_empty());
        if self.consumers[c].life != Life::ShuttingDown
            || !self.consumers[c].queues.is_empty()
            || releasing
        {
            return;
        }
        if self.consumers[c].unregister_left > 0 {
            return;
        }
        let client_id = self.consumers[c].client_id.clone();
        let mut sent = 0;
        for b in 0..self.cfg.brokers {
            let command = unregister_client_command(&client_id, None, Some(GROUP));
            if self.request(c, b, command, Pending::Unregister, 3_000) {
                sent += 1;
            }
        }
        self.consumers[c].unregister_left = sent;
        if sent == 0 {
            self.finish_shutdown(c);
        }
    }

    fn finish_shutdown(&mut self, c: usize) {
        self.note(|| format!("c{c} stopped"));
        let conns: Vec<ConnId> = self.consumers[c].conns.values().copied().collect();
        for conn in conns {
            self.drop_connection(conn, "shutdown");
        }
        self.consumers[c].life = Life::Down;
        self.consumers[c].tables.clear();
    }

    // ----- requests -----

    fn connection(&mut self, c: usize, broker: usize) -> Option<ConnId> {
        if !self.broker_up[broker] {
            return None;
        }
        if let Some(&conn) = self.consumers[c].conns.get(&broker) {
            return Some(conn);
        }
        let conn = self.next_conn;
        self.next_conn += 1;
        self.conn_owner.insert(conn, (c, broker));
        self.consumers[c].conns.insert(broker, conn);
        let peer = SocketAddr::from(([10, 1, 0, c as u8], 40_000 + (conn % 20_000) as u16));
        self.brokers[broker].on_connect(conn, peer);
        Some(conn)
    }

    /// Sends a request to a broker; `false` (and the pending answer failed) if it cannot be
    /// reached.
    fn request(
        &mut self,
        c: usize,
        broker: usize,
        command: RemotingCommand,
        pending: Pending,
        timeout_ms: i64,
    ) -> bool {
        let Some(conn) = self.connection(c, broker) else {
            let error = Error::ConnectionClosed(format!("{} is down", broker_name(broker)));
            self.on_answer(c, pending, Err(error));
            return false;
        };
        let consumer = &mut self.consumers[c];
        let opaque = consumer.tables.entry(conn).or_default().register(pending);
        let incarnation = consumer.incarnation;
        let delay = self.frame_delay(conn, true);
        if !self.partitioned(c, broker, true) {
            self.schedule(
                delay,
                Event::ToBroker {
                    broker,
                    conn,
                    command: command.with_opaque(opaque),
                },
            );
        }
        self.schedule(
            timeout_ms,
            Event::RequestTimeout {
                consumer: c,
                incarnation,
                conn,
                opaque,
            },
        );
        true
    }

    /// The topics a member subscribes: the topic, and for push members its retry topic.
    fn topics(&self) -> Vec<String> {
        if matches!(self.cfg.mode, SimMode::LitePull | SimMode::Schedule) {
            vec![TOPIC.to_string()]
        } else {
            vec![TOPIC.to_string(), retry::retry_topic(GROUP)]
        }
    }

    fn fetch_routes(&mut self, c: usize) {
        for topic in self.topics() {
            let header = GetRouteInfoRequestHeader {
                topic: topic.clone(),
                ..Default::default()
            };
            let consumer = &mut self.consumers[c];
            let opaque = consumer
                .tables
                .entry(0)
                .or_default()
                .register(Pending::Route(topic));
            let request =
                RemotingCommand::request_with_header(request_code::GET_ROUTEINFO_BY_TOPIC, &header)
                    .with_opaque(opaque);
            let incarnation = consumer.incarnation;
            let answer = self.nameserver.handle(&request);
            let delay = self.network_delay();
            if let Some(command) = answer {
                self.schedule(
                    delay,
                    Event::NameServerReply {
                        consumer: c,
                        incarnation,
                        command,
                    },
                );
            }
        }
    }

    fn on_response(&mut self, c: usize, conn: ConnId, command: RemotingCommand) {
        let waiting = self.consumers[c]
            .tables
            .get_mut(&conn)
            .and_then(|table| table.take(command.opaque));
        if let Some(waiting) = waiting {
            self.on_answer(c, waiting.reply, Ok(command));
        }
    }

    fn on_answer(&mut self, c: usize, pending: Pending, answer: Result<RemotingCommand, Error>) {
        if self.consumers[c].life == Life::Down {
            return;
        }
        match pending {
            lite @ (Pending::LiteStart(..) | Pending::LitePull(..) | Pending::Release(_)) => {
                self.on_lite_answer(c, lite, answer)
            }
            task @ (Pending::ScheduleOffset(..) | Pending::SchedulePull(..)) => {
                self.on_schedule_answer(c, task, answer)
            }
            Pending::Route(topic) => {
                let route = match &answer {
                    Ok(r) if r.code == response_code::SUCCESS => {
                        decode_json::<TopicRouteData>(r.body.as_deref().unwrap_or_default())
                            .ok()
                            .map(|data| TopicRoute::new(topic.clone(), data))
                    }
                    _ => None,
                };
                let first = !self.consumers[c].routes.contains_key(&topic);
                self.consumers[c].routes.insert(topic, route);
                if first && self.consumers[c].routes.len() == self.topics().len() {
                    self.heartbeat(c);
                }
            }
            Pending::Heartbeat => {
                if answer.is_ok_and(|r| r.code == response_code::SUCCESS)
                    && !self.consumers[c].heartbeat_ok
                {
                    self.consumers[c].heartbeat_ok = true;
                    self.rebalance(c);
                }
            }
            Pending::ConsumerIds(topic) => {
                let members = match &answer {
                    Ok(r) if r.code == response_code::SUCCESS => {
                        decode_json::<ConsumerListBody>(r.body.as_deref().unwrap_or_default())
                            .ok()
                            .map(|b| b.consumer_id_list)
                    }
                    _ => None,
                };
                self.on_members(c, &topic, members);
            }
            Pending::QueryOffset(mq, instance) => {
                let stored = stored_offset(&answer);
                let result = match start_offset(
                    self.consumers[c].cfg.consume_from_where,
                    stored,
                    &mq.topic,
                    0,
                ) {
                    StartOffset::Use(offset) => Ok(offset),
                    other => Err(format!("{other:?}")),
                };
                self.with_queue(c, &mq, instance, |core, cfg, env, now, out| {
                    core.on_start_offset(result, cfg, env, now, out)
                });
            }
            Pending::Pull(mq, instance, order, request) => {
                let peer = mq.broker_name.clone();
                let result = answer.and_then(|r| request.read_response(&peer, r));
                let retry_group = retry::is_retry_topic(&mq.topic).then_some(GROUP);
                self.with_queue(c, &mq, instance, |core, cfg, env, now, out| {
                    core.on_pull_answer(&order, result, retry_group, cfg, env, now, out)
                });
            }
            Pending::SendBack {
                queue,
                instance,
                batch,
                index,
            } => {
                let ok = answer.is_ok_and(|r| r.code == response_code::SUCCESS);
                let consumer = &mut self.consumers[c];
                let Some(sent) = consumer.send_backs.get_mut(&batch) else {
                    return;
                };
                if let Some(slot) = sent.results.get_mut(index) {
                    slot.1 = Some(ok);
                }
                if sent.results.iter().all(|(_, r)| r.is_some()) {
                    if let Some(sent) = consumer.send_backs.remove(&batch) {
                        let results: Vec<(MessageExt, bool)> = sent
                            .results
                            .into_iter()
                            .map(|(m, r)| (m, r.unwrap_or(false)))
                            .collect();
                        for (message, ok) in &results {
                            if *ok {
                                self.settled
                                    .entry(queue.clone())
                                    .or_default()
                                    .insert(message.queue_offset);
                            }
                        }
                        let epoch = sent.epoch;
                        debug_assert_eq!(sent.queue, queue);
                        self.with_queue(c, &queue, instance, |core, cfg, env, now, out| {
                            core.on_sent_back(results, epoch, cfg, env, now, out)
                        });
                    }
                }
            }
            Pending::Persist => {}
            Pending::Lock(mq, instance) => {
                let result = match answer {
                    Ok(r) if r.code == response_code::SUCCESS => {
                        decode_json::<LockBatchResponseBody>(r.body.as_deref().unwrap_or_default())
                            .map(|b| b.lock_ok_mq_set.contains(&mq))
                            .map_err(|e| e.to_string())
                    }
                    Ok(r) => Err(format!("code {}", r.code)),
                    Err(e) => Err(e.to_string()),
                };
                self.note(|| format!("c{c} lock {mq}: {result:?}"));
                self.with_queue(c, &mq, instance, |core, cfg, env, now, out| {
                    core.on_lock_result(result, cfg, env, now, out)
                });
            }
            Pending::Recompute(mq, instance) => {
                let stored = stored_offset(&answer);
                self.with_queue(c, &mq, instance, |core, cfg, env, now, out| {
                    core.on_recomputed_offset(stored, cfg, env, now, out)
                });
            }
            Pending::DeadLetter {
                queue,
                instance,
                batch,
                index,
            } => {
                let ok = answer.is_ok_and(|r| r.code == response_code::SUCCESS);
                let consumer = &mut self.consumers[c];
                let Some(letters) = consumer.dead_letters.get_mut(&batch) else {
                    return;
                };
                if let Some(slot) = letters.results.get_mut(index) {
                    slot.2 = Some(ok);
                }
                if letters.results.iter().all(|(_, _, r)| r.is_some()) {
                    if let Some(letters) = consumer.dead_letters.remove(&batch) {
                        let sent: Vec<i64> = letters
                            .results
                            .iter()
                            .filter(|(_, _, r)| *r == Some(true))
                            .map(|(_, offset, _)| *offset)
                            .collect();
                        for offset in &sent {
                            self.done.entry(queue.clone()).or_default().insert(*offset);
                            self.settled
                                .entry(queue.clone())
                                .or_default()
                                .insert(*offset);
                        }
                        self.with_queue(c, &queue, instance, |core, cfg, env, now, out| {
                            core.on_dead_lettered(
                                &letters.attempted,
                                &sent,
                                letters.epoch,
                                letters.suspend,
                                cfg,
                                env,
                                now,
                                out,
                            )
                        });
                    }
                }
            }
            Pending::FinishPersist(mq, unlock) => {
                // Persisted (or given up); only then may the next owner take the lock.
                if unlock {
                    if let Some(b) = broker_of(&mq) {
                        let client_id = self.consumers[c].client_id.clone();
                        let command =
                            lock_batch_command(false, GROUP, &client_id, std::slice::from_ref(&mq));
                        if self.request(c, b, command, Pending::Unlock(mq.clone()), 3_000) {
                            return;
                        }
                    }
                }
                self.on_answer(
                    c,
                    Pending::Unlock(mq),
                    Err(Error::Shutdown("no unlock".into())),
                );
            }
            Pending::Unlock(mq) => {
                // The queue is gone.
                self.consumers[c].queues.remove(&mq);
                self.consumers[c].offsets.remove(&mq);
                if let Some(owners) = self.owners.get_mut(&mq) {
                    owners.remove(&c);
                }
                self.note(|| format!("c{c} released {mq}"));
                if self.consumers[c].life == Life::ShuttingDown {
                    self.maybe_unregister(c);
                }
            }
            Pending::Unregister => {
                let consumer = &mut self.consumers[c];
                consumer.unregister_left = consumer.unregister_left.saturating_sub(1);
                if consumer.unregister_left == 0 {
                    self.finish_shutdown(c);
                }
            }
        }
    }

    // ----- timers, heartbeat, rebalance -----

    fn on_timer(&mut self, c: usize, timer: Timer) {
        let every = match timer {
            Timer::Heartbeat => {
                self.heartbeat(c);
                30_000
            }
            Timer::Rebalance => {
                self.rebalance(c);
                20_000
            }
            Timer::Persist => {
                self.persist(c);
                5_000
            }
            Timer::RouteRefresh => {
                self.fetch_routes(c);
                30_000
            }
            Timer::CleanExpired => {
                let queues: Vec<MessageQueue> = self.consumers[c].queues.keys().cloned().collect();
                for mq in queues {
                    let Some(instance) = self.consumers[c].queues.get(&mq).map(|q| q.instance)
                    else {
                        continue;
                    };
                    self.with_queue(c, &mq, instance, |core, cfg, _env, now, out| {
                        core.clean_expired(cfg, now, out)
                    });
                }
                1_000
            }
        };
        let incarnation = self.consumers[c].incarnation;
        self.schedule(
            every,
            Event::Timer {
                consumer: c,
                incarnation,
                timer,
            },
        );
    }

    fn heartbeat(&mut self, c: usize) {
        let subscriptions = self
            .topics()
            .iter()
            .map(|t| Subscription::new("*", 1).to_wire(t))
            .collect();
        let consume_type = if matches!(self.cfg.mode, SimMode::LitePull | SimMode::Schedule) {
            ConsumeType::ConsumeActively
        } else {
            ConsumeType::ConsumePassively
        };
        let consumer = &self.consumers[c];
        let data = HeartbeatData {
            client_id: consumer.client_id.clone(),
            producer_data_set: Vec::new(),
            consumer_data_set: vec![ConsumerData {
                group_name: GROUP.into(),
                consume_type,
                message_model: body::MessageModel::Clustering,
                consume_from_where: body::ConsumeFromWhere::ConsumeFromFirstOffset,
                subscription_data_set: subscriptions,
                unit_mode: false,
            }],
            heartbeat_fingerprint: 0,
            without_sub: false,
        };
        let command = heartbeat_command(&data);
        for b in 0..self.cfg.brokers {
            self.request(c, b, command.clone(), Pending::Heartbeat, 3_000);
        }
    }

    fn rebalance(&mut self, c: usize) {
        let consumer = &mut self.consumers[c];
        if consumer.life != Life::Running || !consumer.heartbeat_ok {
            return;
        }
        if consumer.pass.is_some() {
            consumer.pass_again = true;
            return;
        }
        let mut pass = Pass {
            waiting: BTreeSet::new(),
            target: BTreeSet::new(),
            seen: BTreeSet::new(),
        };
        let mut asks = Vec::new();
        for (topic, route) in &consumer.routes {
            match route {
                None => {
                    // No route: the retry topic before the first send-back, or a topic whose
                    // every broker is down (lossy restarts). As the rebalancer does with a
                    // route it cannot read, the topic's queues stay as they are.
                }
                Some(route) => {
                    let lowest = route
                        .data
                        .broker_datas
                        .iter()
                        .filter_map(|b| b.master_addr())
                        .min()
                        .and_then(|addr| {
                            (0..self.cfg.brokers).find(|b| broker_addr(*b).to_string() == addr)
                        });
                    if let Some(b) = lowest {
                        pass.waiting.insert(topic.clone());
                        asks.push((topic.clone(), b));
                    }
                }
            }
        }
        consumer.pass = Some(pass);
        if asks.is_empty() {
            self.finish_pass(c);
            return;
        }
        for (topic, b) in asks {
            self.request(
                c,
                b,
                consumer_ids_command(GROUP),
                Pending::ConsumerIds(topic),
                3_000,
            );
        }
    }

    fn on_members(&mut self, c: usize, topic: &str, members: Option<Vec<String>>) {
        let now = self.clock(c);
        let consumer = &mut self.consumers[c];
        let Some(pass) = consumer.pass.as_mut() else {
            return;
        };
        pass.waiting.remove(topic);
        if let (Some(members), Some(Some(route))) = (members, consumer.routes.get(topic)) {
            let memory = consumer
                .routes_seen
                .get(topic)
                .cloned()
                .unwrap_or_default()
                .next(&route.consume_queues, now, ABSENT_BROKER_GRACE);
            let share = topic_share(
                &Averagely,
                GROUP,
                &consumer.client_id,
                &memory.queues,
                &members,
                true,
            );
            if let Ok(queues) = share {
                pass.target.extend(queues);
                pass.seen.insert(topic.to_owned());
                consumer.routes_seen.insert(topic.to_owned(), memory);
            }
        }
        if pass.waiting.is_empty() {
            self.finish_pass(c);
        }
    }

    fn finish_pass(&mut self, c: usize) {
        let Some(pass) = self.consumers[c].pass.take() else {
            return;
        };
        if self.consumers[c].life != Life::Running {
            // A pass that ends after shutdown began changes nothing (the rebalancer is stopped).
            return;
        }
        if self.consumers[c].lite.is_some() || self.consumers[c].schedule.is_some() {
            if pass.seen.contains(TOPIC) {
                self.lite_apply(c, &pass.target);
                self.schedule_apply(c, &pass.target);
            }
            if std::mem::take(&mut self.consumers[c].pass_again) {
                self.rebalance(c);
            }
            return;
        }
        let now = self.clock(c);
        let cfg = self.consumers[c].cfg.clone();
        let owned: Vec<MessageQueue> = self.consumers[c]
            .queues
            .iter()
            .filter(|(_, q)| !q.finishing)
            .map(|(mq, _)| mq.clone())
            .collect();
        let stalled: Vec<MessageQueue> = self.consumers[c]
            .queues
            .iter()
            .filter(|(_, q)| !q.finishing && q.core.is_stalled(&cfg, now))
            .map(|(mq, _)| mq.clone())
            .collect();
        let changes = plan_changes(&owned, &pass.target, &pass.seen, &stalled);
        for mq in changes.drop {
            self.note(|| format!("c{c} drops {mq}"));
            self.drop_queue(c, &mq);
        }
        for mq in changes.start {
            if self.consumers[c].queues.contains_key(&mq) {
                // Still finishing its previous drop: the next pass starts it.
                continue;
            }
            self.start_queue(c, mq);
        }
        if std::mem::take(&mut self.consumers[c].pass_again) {
            self.rebalance(c);
        }
    }

    fn start_queue(&mut self, c: usize, mq: MessageQueue) {
        self.note(|| format!("c{c} takes {mq}"));
        self.take_ownership(c, &mq);
        let clock = self.clock(c);
        let consumer = &mut self.consumers[c];
        let core = QueueCore::new(Mode::for_config(&consumer.cfg, clock), clock);
        consumer.next_instance += 1;
        let instance = consumer.next_instance;
        consumer.queues.insert(
            mq.clone(),
            SimQueue {
                checked_from: None,
                instance,
                core,
                finishing: false,
            },
        );
        let mut out = Vec::new();
        let consumer = &mut self.consumers[c];
        if let Some(queue) = consumer.queues.get_mut(&mq) {
            queue.core.start(&consumer.cfg, &mut out);
        }
        if crate::consumer::lock::needs_broker_lock(&self.consumers[c].cfg) {
            let every = self.consumers[c].cfg.lock_interval;
            let incarnation = self.consumers[c].incarnation;
            self.queue_timer(c, incarnation, &mq, instance, every, QueueTimer::RenewLock);
        }
        self.execute(c, &mq, instance, out);
    }

    /// Member `c` starts owning `mq`.
    fn take_ownership(&mut self, c: usize, mq: &MessageQueue) {
        let now = self.now;
        let others: Vec<usize> = self
            .owners
            .get(mq)
            .map(|o| o.keys().copied().filter(|o| *o != c).collect())
            .unwrap_or_default();
        if !others.is_empty() {
            // Another member still holds the queue: a hand-off overlap (RocketMQ's
            // at-least-once on rebalance). Duplicates of this queue until it ends are explained.
            self.overlaps.entry(mq.clone()).or_default().push(now);
        }
        self.owners.entry(mq.clone()).or_default().insert(c, now);
    }

    fn drop_queue(&mut self, c: usize, mq: &MessageQueue) {
        let Some(queue) = self.consumers[c].queues.get_mut(mq) else {
            return;
        };
        if queue.finishing {
            return;
        }
        queue.finishing = true;
        let instance = queue.instance;
        let mut out = Vec::new();
        queue.core.drop_queue(&mut out);
        self.execute(c, mq, instance, out);
    }

    fn persist(&mut self, c: usize) {
        let consumer = &self.consumers[c];
        let owned: Vec<MessageQueue> = match (&consumer.lite, &consumer.schedule) {
            (Some(lite), _) => lite.core.assignment(),
            (_, Some(member)) => member
                .tasks
                .iter()
                .filter(|(_, t)| !t.stopping)
                .map(|(q, _)| q.clone())
                .collect(),
            _ => consumer
                .queues
                .iter()
                .filter(|(_, q)| !q.finishing)
                .map(|(mq, _)| mq.clone())
                .collect(),
        };
        let entries: Vec<(MessageQueue, i64)> = owned
            .into_iter()
            .filter_map(|mq| Some((mq.clone(), consumer.offsets.read(&mq)?)))
            .collect();
        for (mq, offset) in entries {
            if let Some(b) = broker_of(&mq) {
                let command = update_offset_command(GROUP, &mq, offset);
                self.request(c, b, command, Pending::Persist, 3_000);
            }
        }
    }

    // ----- queues -----

    fn env(&self, c: usize) -> QueueEnv {
        let consumer = &self.consumers[c];
        let owned = consumer.queues.values().filter(|q| !q.finishing).count();
        QueueEnv {
            running: consumer.life == Life::Running,
            paused: false,
            thresholds: QueueThresholds::for_owned_queues(&consumer.cfg, owned.max(1)),
            has_subscription: true,
        }
    }

    /// Runs one core call on a queue of consumer `c` and carries out its actions.
    fn with_queue(
        &mut self,
        c: usize,
        mq: &MessageQueue,
        instance: u64,
        call: impl FnOnce(&mut QueueCore, &PushConsumerConfig, &QueueEnv, i64, &mut Vec<QueueAction>),
    ) {
        let env = self.env(c);
        let now = self.clock(c);
        let consumer = &mut self.consumers[c];
        let Some(queue) = consumer.queues.get_mut(mq) else {
            return;
        };
        if queue.instance != instance {
            return;
        }
        let mut out = Vec::new();
        call(&mut queue.core, &consumer.cfg, &env, now, &mut out);
        self.execute(c, mq, instance, out);
    }

    fn execute(&mut self, c: usize, mq: &MessageQueue, instance: u64, actions: Vec<QueueAction>) {
        let incarnation = self.consumers[c].incarnation;
        for action in actions {
            self.digest = hash_str(self.digest, action_name(&action));
            if self.cfg.trace && !matches!(action, QueueAction::Commit(_) | QueueAction::Note(_)) {
                let name = action_name(&action);
                let detail = match &action {
                    QueueAction::Pull(o) => format!(" from {} (epoch {})", o.offset, o.epoch),
                    QueueAction::PullAfter(d)
                    | QueueAction::ConsumeAfter(d)
                    | QueueAction::WakeKeysAfter { delay: d, .. }
                    | QueueAction::LockAfter(d) => format!(" {d:?}"),
                    _ => String::new(),
                };
                self.note(|| format!("c{c} {mq} -> {name}{detail}"));
            }
            match action {
                QueueAction::LoadStartOffset(delay) => {
                    if delay.is_zero() {
                        if let Some(b) = broker_of(mq) {
                            let command = query_offset_command(GROUP, mq, false);
                            self.request(
                                c,
                                b,
                                command,
                                Pending::QueryOffset(mq.clone(), instance),
                                3_000,
                            );
                        }
                    } else {
                        self.queue_timer(
                            c,
                            incarnation,
                            mq,
                            instance,
                            delay,
                            QueueTimer::StartOffset,
                        );
                    }
                }
                QueueAction::Pull(order) => {
                    let order = *order;
                    let Some(b) = broker_of(mq) else { continue };
                    let cfg = &self.consumers[c].cfg;
                    let request = PullRequest {
                        group: GROUP.into(),
                        queue: mq.clone(),
                        offset: order.offset,
                        max_messages: cfg.pull_batch_size as i32,
                        max_bytes: Some(cfg.pull_batch_size_in_bytes as i32),
                        subscription: Arc::new(Subscription::new("*", 1)),
                        send_subscription: order.send_subscription,
                        commit_offset: order.commit_offset,
                        suspend: Some(order.suspend),
                        timeout: order.timeout,
                        broker_id: order.broker_id,
                    };
                    let command = request.to_command();
                    let timeout = order.timeout.as_millis() as i64;
                    self.request(
                        c,
                        b,
                        command,
                        Pending::Pull(mq.clone(), instance, order, Box::new(request)),
                        timeout,
                    );
                }
                QueueAction::PullAfter(delay) => {
                    self.queue_timer(c, incarnation, mq, instance, delay, QueueTimer::Pull)
                }
                QueueAction::Lock => {
                    let Some(b) = broker_of(mq) else { continue };
                    let client_id = self.consumers[c].client_id.clone();
                    let command =
                        lock_batch_command(true, GROUP, &client_id, std::slice::from_ref(mq));
                    self.request(c, b, command, Pending::Lock(mq.clone(), instance), 1_000);
                }
                QueueAction::LockAfter(delay) => {
                    self.queue_timer(c, incarnation, mq, instance, delay, QueueTimer::Lock)
                }
                QueueAction::RecomputeOffset => {
                    let Some(b) = broker_of(mq) else { continue };
                    let command = query_offset_command(GROUP, mq, false);
                    self.request(
                        c,
                        b,
                        command,
                        Pending::Recompute(mq.clone(), instance),
                        3_000,
                    );
                }
                QueueAction::ConsumeOrderly { batch, epoch } => {
                    self.orderly_listener(c, mq, instance, batch, epoch)
                }
                QueueAction::WakeKeysAfter { delay, due_ms } => self.queue_timer(
                    c,
                    incarnation,
                    mq,
                    instance,
                    delay,
                    QueueTimer::WakeKeys(due_ms),
                ),
                QueueAction::ConsumeAfter(delay) => {
                    self.queue_timer(c, incarnation, mq, instance, delay, QueueTimer::Consume)
                }
                QueueAction::DeadLetter {
                    letters,
                    epoch,
                    suspend,
                } => {
                    let Some(b) = broker_of(mq) else { continue };
                    let consumer = &mut self.consumers[c];
                    let batch = consumer.next_batch;
                    consumer.next_batch += 1;
                    let commands: Vec<RemotingCommand> = letters
                        .iter()
                        .map(|l| {
                            dead_letter_command(
                                &dead_letter_message(&l.message, l.reconsume_times, &consumer.cfg),
                                mq,
                            )
                        })
                        .collect();
                    consumer.dead_letters.insert(
                        batch,
                        DeadLetters {
                            epoch,
                            suspend,
                            attempted: letters.iter().map(|l| l.message.queue_offset).collect(),
                            results: letters
                                .iter()
                                .map(|l| (key_of(&l.message), l.message.queue_offset, None))
                                .collect(),
                        },
                    );
                    for (index, command) in commands.into_iter().enumerate() {
                        let pending = Pending::DeadLetter {
                            queue: mq.clone(),
                            instance,
                            batch,
                            index,
                        };
                        self.request(c, b, command, pending, 3_000);
                    }
                }
                QueueAction::Consume {
                    messages,
                    batch_size,
                    epoch,
                } => {
                    for range in CallRanges::new(messages.len(), batch_size) {
                        self.listener(c, mq, instance, messages.clone(), range, epoch);
                    }
                }
                QueueAction::SendBack {
                    messages,
                    delay_level,
                    epoch,
                } => {
                    let Some(b) = broker_of(mq) else { continue };
                    self.note(|| {
                        let keys: Vec<String> = messages
                            .iter()
                            .map(|m| {
                                format!("k{}@{}", key_of(m).unwrap_or(u64::MAX), m.queue_offset)
                            })
                            .collect();
                        format!("c{c} {mq} sends back {keys:?}")
                    });
                    let consumer = &mut self.consumers[c];
                    let batch = consumer.next_batch;
                    consumer.next_batch += 1;
                    let max = consumer.cfg.max_reconsume_times_for_wire();
                    let commands: Vec<RemotingCommand> = messages
                        .iter()
                        .map(|m| send_back_command(GROUP, mq, m, delay_level, max))
                        .collect();
                    consumer.send_backs.insert(
                        batch,
                        SentBack {
                            queue: mq.clone(),
                            epoch,
                            results: messages.into_iter().map(|m| (m, None)).collect(),
                        },
                    );
                    for (index, command) in commands.into_iter().enumerate() {
                        let pending = Pending::SendBack {
                            queue: mq.clone(),
                            instance,
                            batch,
                            index,
                        };
                        self.request(c, b, command, pending, 3_000);
                    }
                }
                QueueAction::ReconsumeAfter {
                    messages,
                    delay,
                    epoch,
                } => self.queue_timer(
                    c,
                    incarnation,
                    mq,
                    instance,
                    delay,
                    QueueTimer::Reconsume(messages, epoch),
                ),
                QueueAction::Commit(offset) => {
                    self.note(|| format!("c{c} {mq} commits {offset}"));
                    self.check_commit(c, mq, instance, offset);
                    let table = &mut self.consumers[c].offsets;
                    let before = table.read(mq);
                    table.update(mq, offset, true);
                    if before.is_some_and(|b| b > offset) {
                        self.violations.push(Violation::OffsetBackwards(format!(
                            "c{c} {mq}: {before:?} -> {offset}"
                        )));
                    }
                }
                QueueAction::Heartbeat => {
                    // As the heartbeat actor: one on-demand heartbeat per second at most.
                    let now = self.now;
                    let due = self.consumers[c]
                        .last_heartbeat_on_demand
                        .is_none_or(|at| now - at >= 1_000);
                    if due {
                        self.consumers[c].last_heartbeat_on_demand = Some(now);
                        self.heartbeat(c);
                    }
                }
                QueueAction::RefreshRoute => {
                    let now = self.now;
                    let due = self.consumers[c]
                        .last_route_refresh_on_demand
                        .is_none_or(|at| now - at >= 1_000);
                    if due {
                        self.consumers[c].last_route_refresh_on_demand = Some(now);
                        self.fetch_routes(c);
                    }
                }
                QueueAction::AdoptOffset(offset) => {
                    self.consumers[c].offsets.update(mq, offset, false);
                    if let Some(q) = self.consumers[c].queues.get_mut(mq) {
                        if q.instance == instance {
                            q.checked_from = Some(offset);
                        }
                    }
                }
                QueueAction::Finish { committed, unlock } => {
                    self.note(|| format!("c{c} finishes {mq} at {committed:?}"));
                    self.releases
                        .entry(mq.clone())
                        .or_default()
                        .push((self.now, committed.unwrap_or(i64::MAX)));
                    let unlock =
                        unlock && crate::consumer::lock::needs_broker_lock(&self.consumers[c].cfg);
                    match (committed, broker_of(mq)) {
                        (Some(offset), Some(b)) => {
                            let command = update_offset_command(GROUP, mq, offset);
                            let pending = Pending::FinishPersist(mq.clone(), unlock);
                            self.request(c, b, command, pending, 3_000);
                        }
                        _ => self.on_answer(
                            c,
                            Pending::FinishPersist(mq.clone(), unlock),
                            Err(Error::Shutdown("nothing to persist".into())),
                        ),
                    }
                }
                QueueAction::Note(note) => self.note(|| format!("c{c} {mq} note {note:?}")),
            }
        }
        self.check_flow_control(c, mq);
    }

    fn queue_timer(
        &mut self,
        c: usize,
        incarnation: u32,
        mq: &MessageQueue,
        instance: u64,
        delay: Duration,
        kind: QueueTimer,
    ) {
        self.schedule(
            delay.as_millis() as i64,
            Event::QueueTimer {
                consumer: c,
                incarnation,
                queue: mq.clone(),
                instance,
                kind,
            },
        );
    }

    fn on_queue_timer(&mut self, c: usize, mq: MessageQueue, instance: u64, kind: QueueTimer) {
        // The listener ran whatever became of the queue since: record what it consumed.
        match &kind {
            QueueTimer::Consumed {
                messages,
                range,
                outcome,
                ..
            } => {
                let batch = messages.get(range.clone()).unwrap_or_default();
                let status = if outcome.success { "ok" } else { "FAILED" };
                self.end_call(c, &mq, batch, outcome.success, status);
            }
            QueueTimer::OrderlyConsumed { batch, success, .. } => {
                if let Some(calls) = self.calls.get_mut(&mq).and_then(|m| m.get_mut(&c)) {
                    *calls = calls.saturating_sub(1);
                }
                let status = if *success {
                    "orderly ok"
                } else {
                    "orderly SUSPEND"
                };
                self.end_call(c, &mq, batch, *success, status);
                if *success {
                    let done = self.done.entry(mq.clone()).or_default();
                    done.extend(batch.iter().map(|m| m.queue_offset));
                }
            }
            _ => {}
        }
        if self.consumers[c].queues.get(&mq).map(|q| q.instance) != Some(instance) {
            return;
        }
        match kind {
            QueueTimer::StartOffset => self.execute(
                c,
                &mq,
                instance,
                vec![QueueAction::LoadStartOffset(Duration::ZERO)],
            ),
            QueueTimer::Pull => self.with_queue(c, &mq, instance, |core, cfg, env, now, out| {
                core.on_pull_timer(cfg, env, now, out)
            }),
            QueueTimer::Lock => self.with_queue(c, &mq, instance, |core, _cfg, _env, _now, out| {
                core.on_lock_timer(out)
            }),
            QueueTimer::RenewLock => {
                let every = self.consumers[c].cfg.lock_interval;
                let incarnation = self.consumers[c].incarnation;
                self.queue_timer(c, incarnation, &mq, instance, every, QueueTimer::RenewLock);
                self.with_queue(c, &mq, instance, |core, _cfg, _env, _now, out| {
                    core.on_renew_timer(out)
                })
            }
            QueueTimer::Consume => {
                self.with_queue(c, &mq, instance, |core, cfg, _env, now, out| {
                    core.on_consume_timer(cfg, now, out)
                })
            }
            QueueTimer::WakeKeys(due_ms) => {
                self.with_queue(c, &mq, instance, |core, cfg, _env, now, out| {
                    core.on_key_wake_timer(due_ms, cfg, now, out)
                })
            }
            QueueTimer::OrderlyConsumed {
                batch,
                epoch,
                success,
            } => {
                let status = if success {
                    OrderlyStatus::Success
                } else {
                    OrderlyStatus::SuspendCurrentQueueAMoment
                };
                let context = OrderlyContext::new(mq.clone(), &self.consumers[c].cfg);
                // Half the successes settle as the queue actor settles a call that finished at
                // once: the next call of the queue (of the key) may start in the same step.
                if !(success && self.rng.chance(500)) {
                    return self.with_queue(c, &mq, instance, |core, cfg, env, now, out| {
                        core.on_orderly_consumed(
                            &batch, epoch, status, &context, cfg, env, now, out,
                        )
                    });
                }
                let mut next = None;
                self.with_queue(c, &mq, instance, |core, cfg, env, now, out| {
                    next = core.on_orderly_consumed_at_once(
                        BatchSpan::of(&batch),
                        epoch,
                        status,
                        &context,
                        cfg,
                        env,
                        now,
                        out,
                    );
                });
                if let Some(next) = next {
                    self.orderly_listener(c, &mq, instance, next, epoch);
                }
            }
            QueueTimer::Reconsume(messages, epoch) => {
                self.with_queue(c, &mq, instance, |core, _cfg, _env, now, out| {
                    core.on_reconsume_timer(messages, epoch, now, out)
                })
            }
            QueueTimer::Consumed {
                messages,
                range,
                epoch,
                outcome,
            } => {
                let batch = messages.get(range).unwrap_or_default();
                self.with_queue(c, &mq, instance, |core, cfg, env, now, out| {
                    core.on_consumed(batch, epoch, outcome, cfg, env, now, out)
                })
            }
        }
    }

    /// A listener call of `batch` ended: a success counts each message as consumed (the ledger)
    /// and finished (what commits may pass).
    fn end_call(
        &mut self,
        c: usize,
        mq: &MessageQueue,
        batch: &[MessageExt],
        success: bool,
        status: &str,
    ) {
        self.note(|| format!("c{c} {mq} listener {status} {:?}", keys_text(batch)));
        if success {
            self.record_consumed(mq, batch);
        }
    }

    /// `messages` of `mq` were consumed (a listener call succeeded, a poll returned them, a
    /// pull task handled them): the ledger the invariants are checked against.
    fn record_consumed(&mut self, mq: &MessageQueue, messages: &[MessageExt]) {
        let now = self.now;
        for message in messages {
            self.settled
                .entry(mq.clone())
                .or_default()
                .insert(message.queue_offset);
            if let Some(key) = key_of(message) {
                // A push listener call recorded its attempt when it began.
                self.first_attempt.entry(key).or_insert(now);
                self.attempt_queues
                    .entry(key)
                    .or_default()
                    .insert(mq.clone());
                self.consumed.entry(key).or_default().push(Consumption {
                    at: now,
                    queue: mq.clone(),
                    offset: message.queue_offset,
                });
            }
        }
    }

    /// A listener call of `batch` starts: records the attempts and draws how it goes — whether
    /// it succeeds (poison messages never do) and how long it takes.
    fn begin_call(&mut self, c: usize, mq: &MessageQueue, batch: &[MessageExt]) -> (bool, i64) {
        for message in batch {
            if let Some(key) = key_of(message) {
                self.first_attempt.entry(key).or_insert(self.now);
                self.attempt_queues
                    .entry(key)
                    .or_default()
                    .insert(mq.clone());
            }
        }
        let poisoned = batch
            .iter()
            .any(|m| key_of(m).is_some_and(|k| k % POISON_EVERY == 0));
        let success = !poisoned && !self.rng.chance(40);
        let took = if self.rng.chance(50) {
            self.rng.range(100..3_000)
        } else {
            self.rng.range(0..3)
        };
        if self.now < self.slow_until[c] {
            // A slow episode (a database that stalls): calls of 10 to 25 s, some past the
            // members' consume_timeout, which sends their messages back while they run (a
            // duplicate, as in Java).
            self.unclean.push(self.now);
            return (success, self.long_rng.range(10_000..25_000));
        }
        (success, took)
    }

    /// The simulated listener: poison messages always fail, others now and then; most calls
    /// are quick, some slow.
    fn listener(
        &mut self,
        c: usize,
        mq: &MessageQueue,
        instance: u64,
        messages: Arc<Vec<MessageExt>>,
        range: Range<usize>,
        epoch: u64,
    ) {
        let (success, took) =
            self.begin_call(c, mq, messages.get(range.clone()).unwrap_or_default());
        let incarnation = self.consumers[c].incarnation;
        self.schedule(
            took,
            Event::QueueTimer {
                consumer: c,
                incarnation,
                queue: mq.clone(),
                instance,
                kind: QueueTimer::Consumed {
                    messages,
                    range,
                    epoch,
                    outcome: CallOutcome {
                        success,
                        ack_index: None,
                        delay_level: 0,
                    },
                },
            },
        );
    }

    /// The orderly listener: as [`World::listener`], and checks order and locks at the start
    /// of every call.
    fn orderly_listener(
        &mut self,
        c: usize,
        mq: &MessageQueue,
        instance: u64,
        batch: OrderlyBatch,
        epoch: u64,
    ) {
        self.check_order(mq, &batch);
        self.check_lock(c, mq);
        *self
            .calls
            .entry(mq.clone())
            .or_default()
            .entry(c)
            .or_default() += 1;
        let (success, took) = self.begin_call(c, mq, &batch);
        self.call_spans
            .entry(mq.clone())
            .or_default()
            .push(CallSpan {
                member: c,
                start: self.now,
                end: self.now + took,
            });
        let incarnation = self.consumers[c].incarnation;
        self.schedule(
            took,
            Event::QueueTimer {
                consumer: c,
                incarnation,
                queue: mq.clone(),
                instance,
                kind: QueueTimer::OrderlyConsumed {
                    batch,
                    epoch,
                    success,
                },
            },
        );
    }

    /// A commit may only pass messages the member was told are finished.
    fn check_commit(&mut self, c: usize, mq: &MessageQueue, instance: u64, offset: i64) {
        let Some(q) = self.consumers[c].queues.get_mut(mq) else {
            return;
        };
        if q.instance != instance {
            return;
        }
        let Some(from) = q.checked_from.replace(offset) else {
            // The first commit is the start offset.
            return;
        };
        if offset <= from {
            return;
        }
        let settled = self.settled.get(mq);
        // Below a wipe mark, what the member finished went with the broker's data.
        let mark = self.wipe_marks.get(mq).copied().unwrap_or(0);
        let unfinished = |o: &i64| *o >= mark && !settled.is_some_and(|s| s.contains(o));
        if let Some(missing) = (from..offset).find(unfinished) {
            self.violations
                .push(Violation::CommitPastUnfinished(format!(
                    "c{c} {mq}: committed {offset} while offset {missing} was unfinished"
                )));
        }
    }

    /// Every earlier message of the batch's queue (of its key, key-ordered) must be done.
    fn check_order(&mut self, mq: &MessageQueue, batch: &[MessageExt]) {
        if retry::is_retry_topic(&mq.topic) {
            return;
        }
        let done = self.done.get(mq);
        let store = broker_of(mq).map(|b| &self.brokers[b]);
        for message in batch {
            let key = crate::consumer::key_order::ordering_key(message).map(str::to_owned);
            let mark = self.wipe_marks.get(mq).copied().unwrap_or(0);
            let missing = (0..message.queue_offset).find(|o| {
                if done.is_some_and(|d| d.contains(o)) || *o < mark {
                    return false;
                }
                if self.cfg.mode == SimMode::KeyOrdered {
                    // Only earlier messages of the same key must be done.
                    let Some(raw) =
                        store.and_then(|b| b.store().record_at(&mq.topic, mq.queue_id, *o))
                    else {
                        return false;
                    };
                    let mut raw = Bytes::copy_from_slice(raw);
                    let earlier = decode_message(&mut raw).ok();
                    let same_key = earlier.as_ref().and_then(|m| {
                        crate::consumer::key_order::ordering_key(m).map(str::to_owned)
                    });
                    return same_key == key;
                }
                true
            });
            if let Some(missing) = missing {
                self.violations.push(Violation::OutOfOrder(format!(
                    "{mq}: offset {} reached the listener before offset {missing} was done",
                    message.queue_offset
                )));
                return;
            }
        }
    }

    /// An orderly call of member `c` on `mq` starts now. Judged from what the simulator saw,
    /// never from what the member believes of its lock:
    /// - its broker must hold the queue's lock for `c` now (by the broker's own table and
    ///   clock);
    /// - no other member may have a call on the queue running now, unless the broker forgot
    ///   its locks since that call began (a restart: the call in flight then is the one a
    ///   client cannot stop).
    ///
    /// A member whose clock stepped back lately is not judged: its locks look younger to it
    /// than they are, and no client can tell.
    fn check_lock(&mut self, c: usize, mq: &MessageQueue) {
        if self.stepped_back_lately(c) {
            return;
        }
        let Some(b) = broker_of(mq) else {
            return;
        };
        let holder = self.broker_up[b]
            .then(|| self.brokers[b].lock_holder(GROUP, mq, self.now))
            .flatten();
        if holder != Some(self.consumers[c].client_id.as_str()) {
            let holder = holder.map(str::to_owned);
            self.note(|| format!("LOCK BROKEN: c{c} consumes {mq}, its broker's lock: {holder:?}"));
            self.violations.push(Violation::LockBroken(format!(
                "c{c} starts a call on {mq} while its broker holds the lock for {holder:?}"
            )));
        }
        let now = self.now;
        let running: Vec<CallSpan> = self
            .call_spans
            .get(mq)
            .map(|spans| {
                spans
                    .iter()
                    .filter(|span| span.member != c && span.start <= now && now < span.end)
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        for span in running {
            let reset_since = self
                .lock_resets
                .iter()
                .any(|&(broker, at)| broker == b && span.start <= at && at <= now);
            if reset_since || self.stepped_back_lately(span.member) {
                continue;
            }
            let other = span.member;
            self.note(|| format!("LOCK BROKEN: c{c} and c{other} on {mq}"));
            self.violations.push(Violation::LockBroken(format!(
                "c{c} starts a call on {mq} while c{other}'s call of {}..{} runs",
                span.start - T0,
                span.end - T0
            )));
        }
    }

    /// Whether member `c`'s clock stepped back within [`BACKWARD_STEP_GRACE_MS`].
    fn stepped_back_lately(&self, c: usize) -> bool {
        self.backward_steps
            .iter()
            .any(|&(member, at)| member == c && self.now - at <= BACKWARD_STEP_GRACE_MS)
    }

    /// Whether frames from member `c` to broker `b` (`to_broker`), or back, are lost now.
    fn partitioned(&self, c: usize, b: usize, to_broker: bool) -> bool {
        self.partitions.get(&(c, b)).is_some_and(|p| {
            p.until > self.now && if to_broker { p.to_broker } else { p.to_member }
        })
    }

    /// Counts a fault, in all and by kind.
    fn count_fault(&mut self, kind: &'static str) {
        self.faults += 1;
        *self.fault_kinds.entry(kind).or_default() += 1;
    }

    // ----- invariants -----

    fn check_flow_control(&mut self, c: usize, mq: &MessageQueue) {
        let env = self.env(c);
        let consumer = &self.consumers[c];
        let Some(queue) = consumer.queues.get(mq) else {
            return;
        };
        // A pull is sent while the cache is at the limit, and may bring a whole batch.
        let limit = env.thresholds.max_cached_count + u64::from(consumer.cfg.pull_batch_size);
        let cached = queue.core.cache_stats().count;
        if cached > limit {
            self.violations.push(Violation::FlowControl(format!(
                "c{c} {mq}: {cached} cached, limit {limit}"
            )));
        }
    }

    /// Messages whose retry copy a broker that had lost its data stored below the group's
    /// mark of that retry queue: a member that knew the queue's old life may have stored its old
    /// offset there (finishing the queue before it could see the loss), so they are skipped by
    /// design, as messages of the topic stored below a mark are.
    fn retry_copies_below_wipe_marks(&self) -> BTreeSet<u64> {
        let topic = retry::retry_topic(GROUP);
        let mut keys = BTreeSet::new();
        for (b, broker) in self.brokers.iter().enumerate() {
            let Some(config) = broker.store().topic(&topic) else {
                continue;
            };
            for queue_id in 0..config.read_queue_nums {
                let mq = MessageQueue::new(topic.clone(), broker_name(b), queue_id);
                let Some(&mark) = self.wipe_marks.get(&mq) else {
                    continue;
                };
                keys.extend(stored_keys(broker, &topic, queue_id, mark));
            }
        }
        keys
    }

    fn dead_lettered(&self) -> BTreeSet<u64> {
        let topic = retry::dlq_topic(GROUP);
        let mut keys = BTreeSet::new();
        for broker in &self.brokers {
            let Some(config) = broker.store().topic(&topic) else {
                continue;
            };
            for queue_id in 0..config.read_queue_nums {
                keys.extend(stored_keys(broker, &topic, queue_id, i64::MAX));
            }
        }
        keys
    }

    /// Whether an unclean fault, or an overlapping hand-off of either queue, happened around the
    /// two consumptions (a retry of a message shows up on the retry queue).
    fn explained(&self, key: u64, first: &Consumption, second: &Consumption) -> bool {
        let (from, to) = (first.at, second.at);
        // A fault after the message first reached a listener (a failed attempt whose retry
        // copy was sent, then a crash before the commit) explains a second success.
        let attempted = self
            .first_attempt
            .get(&key)
            .copied()
            .unwrap_or(from)
            .min(from);
        let overlap = |queue: &MessageQueue| {
            self.overlaps.get(queue).is_some_and(|o| {
                o.iter()
                    .any(|start| *start <= to && *start >= attempted - 60_000)
            })
        };
        // Two owners at once of a queue the message came from (each may fail it and send
        // back a copy).
        let overlap_anywhere = self
            .attempt_queues
            .get(&key)
            .is_some_and(|queues| queues.iter().any(overlap));
        // Key-ordered: the queue changed hands while the message was above the committed
        // offset (a message of another key was still suspended): the next owner starts below
        // it, by design. (Concurrent and orderly queues hand over past everything consumed.)
        let released_above = self.cfg.mode == SimMode::KeyOrdered
            && self.releases.get(&first.queue).is_some_and(|r| {
                r.iter()
                    .any(|(at, committed)| *at >= from && *at <= to && *committed <= first.offset)
            });
        self.unclean
            .iter()
            .any(|t| *t >= attempted - 30_000 && *t <= to)
            || overlap(&first.queue)
            || overlap(&second.queue)
            || overlap_anywhere
            || released_above
    }

    fn check_end(&mut self) {
        if self.cfg.trace {
            for (c, consumer) in self.consumers.iter().enumerate() {
                for (mq, q) in &consumer.queues {
                    let line = format!("end: c{c} {mq}: {}", q.core.summary());
                    let _ = writeln!(self.trace, "{line}");
                }
            }
        }
        let dead = self.dead_lettered();
        let copies_below_marks = self.retry_copies_below_wipe_marks();
        for key in &self.acked {
            let skippable = self.placed.get(key).is_some_and(|(mq, offset)| {
                self.wipe_marks.get(mq).is_some_and(|mark| offset < mark)
            });
            if !self.consumed.contains_key(key)
                && !dead.contains(key)
                && !self.wiped.contains(key)
                && !skippable
                && !copies_below_marks.contains(key)
            {
                self.violations.push(Violation::Lost(format!(
                    "message k{key} never consumed nor in the DLQ"
                )));
            }
        }
        let mut duplicates = Vec::new();
        for (key, runs) in &self.consumed {
            for pair in runs.windows(2) {
                if !self.explained(*key, &pair[0], &pair[1]) {
                    duplicates.push(format!(
                        "k{key} consumed at {} ({}) and {} ({})",
                        pair[0].at - T0,
                        pair[0].queue,
                        pair[1].at - T0,
                        pair[1].queue
                    ));
                }
            }
        }
        self.violations
            .extend(duplicates.into_iter().map(Violation::UnexplainedDuplicate));
        // With the group stable for the whole quiet phase, every queue has exactly one owner.
        let mut owners: BTreeMap<MessageQueue, Vec<usize>> = BTreeMap::new();
        for (c, consumer) in self.consumers.iter().enumerate() {
            if consumer.life != Life::Running {
                continue;
            }
            for (mq, q) in &consumer.queues {
                if !q.finishing {
                    owners.entry(mq.clone()).or_default().push(c);
                }
            }
            if let Some(lite) = &consumer.lite {
                for mq in lite.core.assignment() {
                    owners.entry(mq).or_default().push(c);
                }
            }
            if let Some(member) = &consumer.schedule {
                for (mq, task) in &member.tasks {
                    if !task.stopping {
                        owners.entry(mq.clone()).or_default().push(c);
                    }
                }
            }
        }
        for (c, consumer) in self.consumers.iter().enumerate() {
            if consumer.life != Life::Running {
                self.violations.push(Violation::Stuck(format!(
                    "c{c} is {:?} at the end",
                    consumer.life
                )));
            }
        }
        let running = self
            .consumers
            .iter()
            .any(|consumer| consumer.life == Life::Running);
        for b in 0..self.cfg.brokers {
            for queue_id in 0..self.cfg.queues_per_broker {
                let mq = MessageQueue::new(TOPIC, broker_name(b), queue_id);
                let got = owners.get(&mq).cloned().unwrap_or_default();
                if running && got.len() != 1 {
                    self.violations.push(Violation::Ownership(format!(
                        "{mq} owned by {got:?} after the group settled"
                    )));
                }
            }
        }
    }
}

impl Consumer {
    fn down(sim: &SimConfig) -> Self {
        let mode = sim.mode;
        let mut cfg = PushConsumerConfig::new(GROUP);
        match mode {
            SimMode::Concurrent => {}
            SimMode::Orderly => cfg.consume_mode = ConsumeMode::Orderly,
            SimMode::KeyOrdered => {
                cfg.consume_mode = ConsumeMode::Orderly;
                cfg.key_ordered = true;
            }
            SimMode::LitePull | SimMode::Schedule => {}
        }
        cfg.consume_from_where = ConsumeFromWhere::FirstOffset;
        cfg.max_reconsume_times = Some(3);
        cfg.pull_threshold_for_queue = 12;
        cfg.pull_batch_size = 4;
        if sim.long_faults {
            cfg.consume_timeout = LONG_FAULT_CONSUME_TIMEOUT;
        }
        if sim.ignore_lock_expiry {
            cfg.lock_max_live_time = Duration::from_secs(1_000_000);
        }
        Consumer {
            incarnation: 0,
            client_id: String::new(),
            life: Life::Down,
            cfg,
            conns: BTreeMap::new(),
            tables: BTreeMap::new(),
            routes: BTreeMap::new(),
            routes_seen: BTreeMap::new(),
            queues: BTreeMap::new(),
            offsets: crate::consumer::offset::OffsetTable::new(),
            pass: None,
            pass_again: false,
            send_backs: BTreeMap::new(),
            dead_letters: BTreeMap::new(),
            next_batch: 0,
            next_instance: 0,
            heartbeat_ok: false,
            unregister_left: 0,
            clock_skew: 0,
            last_heartbeat_on_demand: None,
            last_route_refresh_on_demand: None,
            lite: (mode == SimMode::LitePull).then(LiteMember::new),
            schedule: (mode == SimMode::Schedule).then(ScheduleMember::default),
        }
    }
}

/// The SEND_MESSAGE_V2 of a dead-letter message (the consumer's retry producer sends it to the
/// retry topic with a reconsume count above the maximum; the broker stores it in the DLQ).
fn dead_letter_command(message: &crate::message::Message, queue: &MessageQueue) -> RemotingCommand {
    let mut properties = message.properties.clone();
    let reconsume_times = properties
        .remove(crate::message::property::RECONSUME_TIME)
        .and_then(|v| v.parse().ok());
    let max_reconsume_times = properties
        .remove(crate::message::property::MAX_RECONSUME_TIMES)
        .and_then(|v| v.parse().ok());
    let header = SendMessageRequestHeader {
        producer_group: "CLIENT_INNER_PRODUCER".into(),
        topic: message.topic.to_string(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 0,
        sys_flag: 0,
        born_timestamp: 0,
        flag: message.flag,
        properties: Some(properties.wire_text().into_owned()),
        reconsume_times,
        unit_mode: None,
        max_reconsume_times,
        batch: None,
        bname: Some(queue.broker_name.clone()),
    };
    RemotingCommand::request_with_header(
        request_code::SEND_MESSAGE_V2,
        &SendMessageRequestHeaderV2(header),
    )
    .with_body(message.body.clone())
}

fn action_name(action: &QueueAction) -> &'static str {
    match action {
        QueueAction::LoadStartOffset(_) => "start",
        QueueAction::Pull(_) => "pull",
        QueueAction::PullAfter(_) => "pull-after",
        QueueAction::Lock => "lock",
        QueueAction::LockAfter(_) => "lock-after",
        QueueAction::ConsumeOrderly { .. } => "consume-orderly",
        QueueAction::ConsumeAfter(_) => "consume-after",
        QueueAction::WakeKeysAfter { .. } => "wake-keys-after",
        QueueAction::DeadLetter { .. } => "dead-letter",
        QueueAction::RecomputeOffset => "recompute",
        QueueAction::Consume { .. } => "consume",
        QueueAction::SendBack { .. } => "send-back",
        QueueAction::ReconsumeAfter { .. } => "reconsume",
        QueueAction::Commit(_) => "commit",
        QueueAction::AdoptOffset(_) => "adopt",
        QueueAction::Heartbeat => "heartbeat",
        QueueAction::RefreshRoute => "refresh-route",
        QueueAction::Finish { .. } => "finish",
        QueueAction::Note(_) => "note",
    }
}

/// Runs the seed's scenario.
pub(crate) fn run(seed: u64, trace: bool) -> Report {
    let mut cfg = SimConfig::from_seed(seed);
    cfg.trace = trace;
    World::new(cfg).run()
}

mod lite;
mod schedule;
#[cfg(test)]
mod tests;
