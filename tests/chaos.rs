//! The chaos suite: the command-line tool as separate processes — an embedded broker with a data
//! directory and consumers running `consume --print` — driven through kill -9, SIGTERM, SIGINT
//! churn, orderly churn, broker kill -9 and restart, and dropped connections, while this process
//! produces. Each scenario checks what a user would: no message the broker acknowledged is
//! missing from the consumers' printed output, duplicates stay within the scenario's target,
//! keyed messages keep their order, and the group recovers after each fault.
//!
//! Every scenario prints one JSON line,
//! `{"scenario","missing","duplicates","order_violations","recovery_ms",…}`; `order_violations`
//! is `null` where order is not promised (concurrent consumption). The tests are `#[ignore]`d
//! because they drive release binaries for a while: `scripts/chaos.sh [SECONDS]` runs them
//! (SECONDS of faults per scenario; `CHAOS_BIN` names the binary, `CHAOS_SECONDS` the duration,
//! `CHAOS_CONSUMER_BIN` another binary for the consumers only).
//!
//! `soak` is the long run of `scripts/soak.sh MINUTES` (`CHAOS_SOAK_MINUTES`, default 60):
//! 1,000 msgs/s, a fault every 30 s in turn (consumer kill -9, SIGTERM, churn, broker kill -9 and
//! restart), and every 10 s the resident memory and open descriptors of the broker and of every
//! consumer written to `resources.csv` (`CHAOS_SOAK_CSV` names a copy). One consumer, the
//! survivor, lives through the whole run: its memory after warm-up must stay within 10 %.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocketmq_actor::{Client, ClientConfig, Message, MessageQueue, Producer, ProducerConfig};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

const TOPIC: &str = "ChaosTopic";
const QUEUES: i32 = 8;
/// Messages produced per second while faults happen.
const RATE: u64 = 400;
/// The soak's rate, and the time between its faults and between its resource samples.
const SOAK_RATE: u64 = 1_000;
const SOAK_FAULT_EVERY: Duration = Duration::from_secs(30);
const SOAK_SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// How much the survivor's memory may grow between the second fifth of a soak and its last.
const SOAK_RSS_GROWTH: f64 = 1.10;
/// Producer chains (keys, for keyed scenarios) sending one after another each.
const CHAINS: u64 = 16;
/// Live consumers a scenario keeps.
const MEMBERS: usize = 3;
/// How long the end of a scenario waits for every acknowledged message.
const DRAIN_PATIENCE: Duration = Duration::from_secs(90);
/// How long one recovery may take before the scenario fails.
const RECOVERY_PATIENCE: Duration = Duration::from_secs(60);
/// The broker's lock expiry in the orderly kill -9 scenario.
const ORDERLY_LOCK_EXPIRY: &str = "10s";
/// Duplicates allowed where members leave and join gracefully: 0.01 % of the messages.
const GRACEFUL_DUPLICATE_RATIO: f64 = 0.0001;

fn bin() -> PathBuf {
    std::env::var_os("CHAOS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rocketmq-actor")))
}

/// The binary the consumers run: `CHAOS_CONSUMER_BIN` when set (to measure another version's
/// consumer against this broker), else [`bin`].
fn consumer_bin() -> PathBuf {
    std::env::var_os("CHAOS_CONSUMER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(bin)
}

fn fault_seconds() -> u64 {
    std::env::var("CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(20)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn signal(child: &Child, name: &str) {
    let Some(pid) = child.id() else { return };
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// The embedded broker as its own process.
struct BrokerProcess {
    child: Child,
    port: u16,
    brokers: usize,
    data: PathBuf,
    extra: Vec<String>,
    logs: PathBuf,
    starts: usize,
}

impl BrokerProcess {
    async fn start(dir: &Path, brokers: usize, extra: &[&str]) -> BrokerProcess {
        let data = dir.join("data");
        let mut broker = BrokerProcess {
            child: Command::new("true").spawn().expect("true runs"),
            port: free_port(),
            brokers,
            data,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            logs: dir.to_path_buf(),
            starts: 0,
        };
        broker.spawn().await;
        broker
    }

    fn namesrv(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the process and waits for the line that says it serves.
    async fn spawn(&mut self) {
        self.starts += 1;
        let log = std::fs::File::create(self.logs.join(format!("broker-{}.log", self.starts)))
            .expect("log file");
        let mut child = Command::new(bin())
            .args(["broker", "--listen", &self.namesrv()])
            .args(["--brokers", &self.brokers.to_string()])
            .args(["--topic", &format!("{TOPIC}:{QUEUES}")])
            .arg("--data-dir")
            .arg(&self.data)
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("the broker starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
        match ready {
            Ok(Ok(Some(addr))) => assert_eq!(addr, self.namesrv()),
            other => panic!("the broker did not come up: {other:?}"),
        }
        self.child = child;
    }

    async fn kill9(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    async fn stop(&mut self) {
        signal(&self.child, "INT");
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        self.kill9().await;
    }
}

/// One delivery as a consumer printed it.
struct Delivery {
    body: String,
    key: Option<String>,
    /// The printed line, kept for the post-mortem file (`CHAOS_KEEP`).
    line: String,
}

/// Everything every consumer printed, in the order this process read it.
#[derive(Default)]
struct Deliveries {
    list: Mutex<Vec<Delivery>>,
    seen: Mutex<HashSet<String>>,
    arrived: Notify,
}

impl Deliveries {
    fn record(&self, consumer: usize, line: &str) {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            panic!("a consumer printed a line that is not JSON: {line}");
        };
        let body = value["body"].as_str().unwrap_or_default().to_owned();
        // `keys` is an array (a message may have several); the scenarios give each one key.
        let key = value["keys"][0]
            .as_str()
            .filter(|k| !k.is_empty())
            .map(str::to_owned);
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(body.clone());
        // Only for the post-mortem file: an hour of soak would hold gigabytes of lines.
        let line = if std::env::var_os("CHAOS_KEEP").is_some() {
            format!("{consumer} {line}")
        } else {
            String::new()
        };
        self.list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Delivery { body, key, line });
        self.arrived.notify_waiters();
    }

    fn has_all(&self, wanted: &[String]) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        wanted.iter().all(|body| seen.contains(body))
    }

    /// Waits until every body of `wanted` was printed; false after `patience`.
    async fn wait_for(&self, wanted: &[String], patience: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let arrived = self.arrived.notified();
            if self.has_all(wanted) {
                return true;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return self.has_all(wanted);
            }
        }
    }
}

/// A `consume --print` process.
struct ConsumerProcess {
    child: Child,
    reader: tokio::task::JoinHandle<()>,
}

struct Group {
    dir: PathBuf,
    namesrv: String,
    orderly: bool,
    deliveries: Arc<Deliveries>,
    members: Vec<ConsumerProcess>,
    started: usize,
    /// The first member is never taken out by a fault (the soak watches its memory).
    keep_first: bool,
}

impl Group {
    fn spawn_member(&mut self) {
        self.started += 1;
        let log = std::fs::File::create(self.dir.join(format!("consumer-{}.log", self.started)))
            .expect("log file");
        let mut command = Command::new(consumer_bin());
        command
            .args(["consume", "--namesrv", &self.namesrv])
            .args(["--topic", TOPIC, "--group", "chaos_group"])
            .args(["--from", "first", "--print"])
            .env(
                "RUST_LOG",
                std::env::var("CHAOS_CONSUMER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true);
        if self.orderly {
            command.arg("--orderly");
        }
        let mut child = command.spawn().expect("a consumer starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let deliveries = self.deliveries.clone();
        let consumer = self.started;
        let reader = actix_rt::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                // Only message lines (with a body) are deliveries.
                if line.contains("\"body\"") {
                    deliveries.record(consumer, &line);
                }
            }
        });
        self.members.push(ConsumerProcess { child, reader });
    }

    /// Takes the oldest member out (the oldest but the first with `keep_first`): `KILL`
    /// (crash), `TERM` or `INT` (graceful).
    async fn remove_member(&mut self, how: &str) {
        let oldest = usize::from(self.keep_first && self.members.len() > 1);
        let mut member = self.members.remove(oldest);
        if how == "KILL" {
            let _ = member.child.start_kill();
        } else {
            signal(&member.child, how);
        }
        let exited = tokio::time::timeout(Duration::from_secs(60), member.child.wait()).await;
        assert!(
            exited.is_ok(),
            "a consumer did not exit within 60 s of SIG{how}"
        );
        let _ = member.reader.await;
    }

    async fn stop_all(&mut self) {
        self.keep_first = false;
        while !self.members.is_empty() {
            self.remove_member("INT").await;
        }
    }
}

/// An acknowledged message: its body, and for keyed production its key and place in the key's
/// sequence.
type Acked = (String, Option<(String, u64)>);

/// Sends `rate` messages per second until stopped, in [`CHAINS`] chains that each wait for
/// their previous send; remembers which were acknowledged.
struct Production {
    stop: Arc<AtomicBool>,
    acked: Rc<Mutex<Vec<Acked>>>,
    failed: Rc<Mutex<u64>>,
    chains: Vec<tokio::task::JoinHandle<()>>,
}

impl Production {
    fn start(producer: &Producer, keyed: bool, rate: u64) -> Production {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Rc::new(Mutex::new(Vec::new()));
        let failed = Rc::new(Mutex::new(0));
        let pause = Duration::from_micros(1_000_000 * CHAINS / rate);
        let chains = (0..CHAINS)
            .map(|chain| {
                let producer = producer.clone();
                let (stop, acked, failed) = (stop.clone(), acked.clone(), failed.clone());
                actix_rt::spawn(async move {
                    let mut seq = 0u64;
                    // Paced by the clock, not by the sends: a slow send is caught up on.
                    let mut next = tokio::time::Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("k{chain}");
                        let body = format!("{key}:{seq}");
                        let sent = if keyed {
                            producer
                                .send_with_key(Message::new(TOPIC, body.clone()), &key)
                                .await
                        } else {
                            producer.send(Message::new(TOPIC, body.clone())).await
                        };
                        match sent {
                            Ok(_) => {
                                let order = keyed.then_some((key, seq));
                                acked.lock().unwrap().push((body, order));
                            }
                            Err(_) => *failed.lock().unwrap() += 1,
                        }
                        seq += 1;
                        next += pause;
                        tokio::time::sleep_until(next).await;
                    }
                })
            })
            .collect();
        Production {
            stop,
            acked,
            failed,
            chains,
        }
    }

    async fn finish(self) -> (Vec<Acked>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for chain in self.chains {
            let _ = chain.await;
        }
        let acked = std::mem::take(&mut *self.acked.lock().unwrap());
        let failed = *self.failed.lock().unwrap();
        (acked, failed)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    /// kill -9 of the oldest consumer, a new one started.
    ConsumerKill,
    /// SIGTERM of the oldest consumer (what systemd, Docker and Kubernetes send), a new one
    /// started.
    ConsumerTerm,
    /// A fourth member joins; then the oldest leaves with SIGINT.
    Churn,
    /// kill -9 of the broker process, restarted at once on the same data directory.
    BrokerRestart,
    /// The broker closes every client connection (its `--drop-connections-every`).
    ConnectionDrops,
    /// The soak: a fault every 30 s, taking the four above in turn.
    Rotation,
}

/// The faults a soak takes in turn.
const ROTATION: [Fault; 4] = [
    Fault::ConsumerKill,
    Fault::ConsumerTerm,
    Fault::Churn,
    Fault::BrokerRestart,
];

/// Resident memory (KiB) and open descriptors of a live process, from `/proc`.
fn resources(pid: u32) -> Option<(u64, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some((rss, fds))
}

/// One resource sample: seconds since the start, the process's role, KiB resident, open fds.
struct Sample {
    at_s: u64,
    role: String,
    rss_kib: u64,
    fds: usize,
}

fn median(mut values: Vec<u64>) -> Option<u64> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

/// The survivor's median memory and descriptors in the second fifth of the run (after
/// warm-up) and in the last fifth.
fn survivor_trend(samples: &[Sample], total_s: u64) -> Option<((u64, u64), (u64, u64))> {
    let window = |from: u64, to: u64| {
        let picked: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.role == "survivor" && s.at_s >= from && s.at_s < to)
            .collect();
        Some((
            median(picked.iter().map(|s| s.rss_kib).collect())?,
            median(picked.iter().map(|s| s.fds as u64).collect())?,
        ))
    };
    let fifth = total_s / 5;
    Some((window(fifth, 2 * fifth)?, window(4 * fifth, total_s + 1)?))
}

struct Scenario {
    name: &'static str,
    fault: Fault,
    orderly: bool,
    brokers: usize,
    /// Whether duplicates must stay within [`GRACEFUL_DUPLICATE_RATIO`].
    graceful: bool,
}

fn soak_minutes() -> u64 {
    std::env::var("CHAOS_SOAK_MINUTES")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&m| m > 0)
        .unwrap_or(60)
}

/// Sends one probe to every queue of the topic and returns their bodies; a probe that cannot
/// be sent yet (the broker is coming back) is retried.
async fn send_probes(client: &Client, producer: &Producer, fault: usize) -> Vec<String> {
    let deadline = Instant::now() + RECOVERY_PATIENCE;
    let queues: Vec<MessageQueue> = loop {
        match client.refresh_route(TOPIC).await {
            Ok(route) if !route.produce_queues.is_empty() => break route.produce_queues.clone(),
            other => {
                assert!(
                    Instant::now() < deadline,
                    "no route after fault {fault}: {:?}",
                    other.err()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let mut bodies = Vec::new();
    for queue in queues {
        let body = format!("probe-{fault}-{}-{}", queue.broker_name, queue.queue_id);
        loop {
            match producer
                .send_to_queue(Message::new(TOPIC, body.clone()), &queue)
                .await
            {
                Ok(_) => break,
                Err(e) => {
                    assert!(Instant::now() < deadline, "probe {body} not sent: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        bodies.push(body);
    }
    bodies
}

/// Order violations among keyed deliveries: a message printed while an earlier acknowledged
/// message of its key had not been printed yet by any consumer.
fn order_violations(deliveries: &[Delivery], acked: &[Acked]) -> u64 {
    let mut acked_seqs: HashMap<&str, Vec<u64>> = HashMap::new();
    for (_, order) in acked {
        if let Some((key, seq)) = order {
            acked_seqs.entry(key).or_default().push(*seq);
        }
    }
    for seqs in acked_seqs.values_mut() {
        seqs.sort_unstable();
    }
    let mut printed: HashMap<&str, HashSet<u64>> = HashMap::new();
    let mut violations = 0;
    for delivery in deliveries {
        let Some(key) = delivery.key.as_deref() else {
            continue;
        };
        let Some(seq) = delivery
            .body
            .rsplit_once(':')
            .and_then(|(_, s)| s.parse::<u64>().ok())
        else {
            continue;
        };
        let done = printed.entry(key).or_default();
        let earlier_missing = acked_seqs
            .get(key)
            .map(|seqs| {
                seqs.iter()
                    .take_while(|&&s| s < seq)
                    .any(|s| !done.contains(s))
            })
            .unwrap_or(false);
        if earlier_missing && !done.contains(&seq) {
            violations += 1;
        }
        done.insert(seq);
    }
    violations
}

async fn run(scenario: Scenario) {
    let soak = scenario.fault == Fault::Rotation;
    let seconds = if soak {
        soak_minutes() * 60
    } else {
        fault_seconds()
    };
    let dir = std::env::temp_dir().join(format!(
        "rocketmq-actor-chaos-{}-{}",
        scenario.name,
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scenario directory");
    let drop_every = format!("{}s", (seconds / 4).clamp(2, 10));
    let mut extra: Vec<&str> = Vec::new();
    if scenario.fault == Fault::ConnectionDrops {
        extra.extend(["--drop-connections-every", &drop_every]);
    }
    // The queues of a crashed orderly consumer stay locked until its locks expire (60 s on a
    // real broker); a shorter expiry keeps the scenario short, and recovery_ms shows it.
    if scenario.orderly && scenario.fault == Fault::ConsumerKill {
        extra.extend(["--lock-expiry", ORDERLY_LOCK_EXPIRY]);
    }
    let mut broker = BrokerProcess::start(&dir, scenario.brokers, &extra).await;
    let client = Client::start(ClientConfig::new(broker.namesrv())).expect("client");
    let producer = Producer::new(
        client.clone(),
        ProducerConfig {
            send_timeout: Duration::from_secs(5),
            ..Default::default()
        },
    );
    let mut group = Group {
        dir: dir.clone(),
        namesrv: broker.namesrv(),
        orderly: scenario.orderly,
        deliveries: Arc::new(Deliveries::default()),
        members: Vec::new(),
        started: 0,
        keep_first: soak,
    };
    for _ in 0..MEMBERS {
        group.spawn_member();
    }
    let rate = if soak { SOAK_RATE } else { RATE };
    let production = Production::start(&producer, scenario.orderly, rate);
    let began = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut csv = String::from("seconds,role,rss_kib,fds\n");

    // Faults at a steady pace; after each, probes to every queue measure how long the group
    // takes to consume from all of them again.
    let faults = if soak {
        seconds / SOAK_FAULT_EVERY.as_secs()
    } else {
        4u64
    };
    let period = Duration::from_secs(seconds) / faults as u32;
    let mut recoveries = Vec::new();
    let mut probes = Vec::new();
    for fault in 0..faults as usize {
        if soak {
            // The fault period in sampling steps; a fault's recovery eats into the next one.
            let until = began + SOAK_FAULT_EVERY * (fault as u32 + 1);
            while Instant::now() + SOAK_SAMPLE_EVERY <= until + Duration::from_millis(100) {
                tokio::time::sleep(SOAK_SAMPLE_EVERY).await;
                let at_s = began.elapsed().as_secs();
                let mut live: Vec<(String, Option<u32>)> =
                    vec![("broker".to_owned(), broker.child.id())];
                for (i, member) in group.members.iter().enumerate() {
                    let role = if i == 0 {
                        "survivor".to_owned()
                    } else {
                        format!("consumer{i}")
                    };
                    live.push((role, member.child.id()));
                }
                for (role, pid) in live {
                    if let Some((rss_kib, fds)) = pid.and_then(resources) {
                        csv.push_str(&format!("{at_s},{role},{rss_kib},{fds}\n"));
                        samples.push(Sample {
                            at_s,
                            role,
                            rss_kib,
                            fds,
                        });
                    }
                }
            }
            tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
        } else {
            tokio::time::sleep(period).await;
        }
        let kind = if soak {
            ROTATION[fault % ROTATION.len()]
        } else {
            scenario.fault
        };
        match kind {
            Fault::ConsumerKill => {
                group.remove_member("KILL").await;
                group.spawn_member();
            }
            Fault::ConsumerTerm => {
                group.remove_member("TERM").await;
                group.spawn_member();
            }
            Fault::Churn => {
                group.spawn_member();
                tokio::time::sleep(period / 2).await;
                group.remove_member("INT").await;
            }
            Fault::BrokerRestart => {
                broker.kill9().await;
                broker.spawn().await;
            }
            // The broker drops connections by itself; this only measures.
            Fault::ConnectionDrops => {}
            Fault::Rotation => unreachable!("a rotation is made of the other faults"),
        }
        // Recovery counts from the end of the fault: the crashed consumer gone, the broker
        // serving again, the last member out.
        let since = Instant::now();
        let sent = send_probes(&client, &producer, fault).await;
        let recovered = group.deliveries.wait_for(&sent, RECOVERY_PATIENCE).await;
        assert!(
            recovered,
            "{}: the probes of fault {fault} were not consumed within {RECOVERY_PATIENCE:?}",
            scenario.name
        );
        recoveries.push(since.elapsed().as_millis() as u64);
        probes.extend(sent);
    }

    let (acked, failed_sends) = production.finish().await;
    let mut wanted: Vec<String> = acked.iter().map(|(body, _)| body.clone()).collect();
    wanted.extend(probes);
    let drained = group.deliveries.wait_for(&wanted, DRAIN_PATIENCE).await;
    group.stop_all().await;
    broker.stop().await;
    client.shutdown().await;

    let deliveries = std::mem::take(&mut *group.deliveries.list.lock().unwrap());
    keep_deliveries(&dir, &deliveries);
    let printed: HashSet<&str> = deliveries.iter().map(|d| d.body.as_str()).collect();
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|b| !printed.contains(b.as_str()))
        .collect();
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for delivery in &deliveries {
        *counts.entry(delivery.body.as_str()).or_default() += 1;
    }
    let duplicates: u64 = counts.values().map(|&n| n - 1).sum();
    let violations = scenario
        .orderly
        .then(|| order_violations(&deliveries, &acked));
    // Written by hand so the keys come in the documented order.
    let fields = [
        ("scenario", json!(scenario.name)),
        ("missing", json!(missing.len())),
        ("duplicates", json!(duplicates)),
        ("order_violations", json!(violations)),
        ("recovery_ms", json!(recoveries.iter().max())),
        ("recovery_ms_each", json!(recoveries)),
        ("acknowledged", json!(wanted.len())),
        ("deliveries", json!(deliveries.len())),
        ("failed_sends", json!(failed_sends)),
        ("fault_seconds", json!(seconds)),
        ("consumers_started", json!(group.started)),
    ];
    let trend = soak.then(|| survivor_trend(&samples, seconds)).flatten();
    let mut fields = fields.to_vec();
    if soak {
        let broker_rss = samples
            .iter()
            .filter(|s| s.role == "broker")
            .map(|s| s.rss_kib)
            .max();
        fields.extend([
            ("rate", json!(rate)),
            ("survivor_rss_kib", json!(trend.map(|(w, l)| [w.0, l.0]))),
            ("survivor_fds", json!(trend.map(|(w, l)| [w.1, l.1]))),
            ("broker_rss_kib_max", json!(broker_rss)),
        ]);
        let _ = std::fs::write(dir.join("resources.csv"), &csv);
        if let Some(copy) = std::env::var_os("CHAOS_SOAK_CSV") {
            let _ = std::fs::write(copy, &csv);
        }
    }
    let line = fields
        .iter()
        .map(|(key, value)| format!("{}:{value}", json!(key)))
        .collect::<Vec<_>>()
        .join(",");
    let line = format!("{{{line}}}");
    println!("{line}");
    assert!(
        drained && missing.is_empty(),
        "{}: {} acknowledged messages never printed, e.g. {:?} (logs in {})",
        scenario.name,
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>(),
        dir.display()
    );
    assert_eq!(
        violations.unwrap_or(0),
        0,
        "{}: keyed messages out of order (logs in {})",
        scenario.name,
        dir.display()
    );
    if soak {
        let ((rss_warm, fds_warm), (rss_last, fds_last)) =
            trend.expect("the survivor was sampled in the second and the last fifth");
        assert!(
            rss_last as f64 <= rss_warm as f64 * SOAK_RSS_GROWTH,
            "the survivor's memory grew from {rss_warm} KiB to {rss_last} KiB (logs in {})",
            dir.display()
        );
        assert!(
            fds_last <= fds_warm + 8,
            "the survivor's open descriptors grew from {fds_warm} to {fds_last}"
        );
    }
    if scenario.graceful {
        let allowed = (wanted.len() as f64 * GRACEFUL_DUPLICATE_RATIO).floor() as u64;
        assert!(
            duplicates <= allowed,
            "{}: {duplicates} duplicates, more than {allowed} (0.01 %) (logs in {})",
            scenario.name,
            dir.display()
        );
    }
    if std::env::var_os("CHAOS_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Writes every printed line, in arrival order and after the number of the consumer that
/// printed it, to `deliveries.txt` in the scenario's directory when `CHAOS_KEEP` is set.
fn keep_deliveries(dir: &Path, deliveries: &[Delivery]) {
    if std::env::var_os("CHAOS_KEEP").is_some() {
        let text: String = deliveries.iter().map(|d| format!("{}\n", d.line)).collect();
        let _ = std::fs::write(dir.join("deliveries.txt"), text);
    }
}

#[actix_rt::test]
#[ignore = "drives release processes for a while: scripts/chaos.sh"]
async fn consumer_kill9() {
    run(Scenario {
        name: "consumer_kill9",
        fault: Fault::ConsumerKill,
        orderly: false,
        brokers: 2,
        graceful: false,
    })
    .await;
}

#[actix_rt::test]
#[ignore = "drives release processes for a while: scripts/chaos.sh"]
async fn consumer_sigterm() {
    run(Scenario {
        name: "consumer_sigterm",
        fault: Fault::ConsumerTerm,
        orderly: false,
        brokers: 2,
        graceful: true,
    })
    .await;
}

#[actix_rt::test]
#[ignore = "drives release processes for a while: scripts/chaos.sh"]
async fn membership_churn() {
    run(Scenario {
        name: "membership_churn",
        fault: Fault::Churn,
        orderly: false,
        brokers: 2,
        graceful: true,
    })
    .await;
}

#[actix_rt::test]
#[ignore = "drives release processes for a while: scripts/chaos.sh"]
async fn orderly_churn() {
    run(Scenario {
        name: "orderly_churn",
        fault: Fault::Churn,
        orderly: true,
        brokers: 2,
        graceful: true,
    })
    .await;
}

#[actix_rt::test]
#[ignore = "drives release processes for a while: scripts/chaos.sh"]
async fn orderly_kill9() {
    run(Scenario {
        name: "orderly_kill9",
        fault: Fault::ConsumerKill,
        orderly: true,
        brokers: 2,
        graceful: false,
    })
    .await;
}

#[actix_rt::test]
#[ignore = "drives release processes for a while: scripts/chaos.sh"]
async fn broker_restart_1_broker() {
    run(Scenario {
        name: "broker_restart_1_broker",
        fault: Fault::BrokerRestart,
        orderly: false,
        brokers: 1,
        graceful: false,
    })
    .await;
}

#[actix_rt::test]
#[ignore = "drives release processes for a while: scripts/chaos.sh"]
async fn broker_restart_2_brokers() {
    run(Scenario {
        name: "broker_restart_2_brokers",
        fault: Fault::BrokerRestart,
        orderly: false,
        brokers: 2,
        graceful: false,
    })
    .await;
}

#[actix_rt::test]
#[ignore = "drives release processes for a while: scripts/chaos.sh"]
async fn connection_drops() {
    run(Scenario {
        name: "connection_drops",
        fault: Fault::ConnectionDrops,
        orderly: true,
        brokers: 2,
        graceful: false,
    })
    .await;
}

#[test]
fn a_message_printed_before_an_earlier_one_of_its_key_is_a_violation_and_a_redelivery_is_not() {
    let acked: Vec<Acked> = (0..3)
        .map(|seq| (format!("k0:{seq}"), Some(("k0".to_owned(), seq))))
        .collect();
    let delivered = |seqs: &[u64]| -> Vec<Delivery> {
        seqs.iter()
            .map(|seq| Delivery {
                body: format!("k0:{seq}"),
                key: Some("k0".into()),
                line: String::new(),
            })
            .collect()
    };
    assert_eq!(order_violations(&delivered(&[0, 1, 2]), &acked), 0);
    assert_eq!(order_violations(&delivered(&[0, 1, 0, 1, 2]), &acked), 0);
    assert_eq!(order_violations(&delivered(&[0, 2, 1]), &acked), 1);
    // An unacknowledged message between two acknowledged ones is not waited for.
    let gap = vec![acked[0].clone(), acked[2].clone()];
    assert_eq!(order_violations(&delivered(&[0, 2]), &gap), 0);
}

#[actix_rt::test]
#[ignore = "an hour of load and faults: scripts/soak.sh MINUTES"]
async fn soak() {
    run(Scenario {
        name: "soak",
        fault: Fault::Rotation,
        orderly: false,
        brokers: 2,
        graceful: false,
    })
    .await;
}
