//! What the bench programs share: the embedded cluster on a thread of its own, CPU accounting
//! from `/proc`, and the tracing set-up. Each bench includes it with
//! `#[path = "bench_common/mod.rs"] mod bench_common;` and uses a part of it.
#![allow(dead_code)]

use std::time::Duration;

use rocketmq_actor::embedded::{EmbeddedCluster, EmbeddedConfig};

/// Logs at `warn` (or `RUST_LOG`) to stderr, so stdout carries only the figures.
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Milliseconds since the Unix epoch (fresh topic names per run).
pub fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default()
}

/// Starts an embedded cluster on a thread of its own (its own actix system), as a broker
/// process would be, and returns its handle once it listens.
pub fn start_broker_thread(
    config: EmbeddedConfig,
) -> Result<(EmbeddedCluster, actix::System), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let system = actix::System::new();
        match system.block_on(EmbeddedCluster::start(config)) {
            Ok(cluster) => {
                let _ = tx.send(Ok((cluster, actix::System::current())));
                let _ = system.run();
            }
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
            }
        }
    });
    rx.recv()
        .map_err(|_| "the broker thread died".to_owned())?
        .map_err(|e| format!("cannot start the embedded cluster: {e}"))
}

/// An embedded cluster of `brokers` brokers on ephemeral loopback ports.
pub fn embedded_config(brokers: usize) -> EmbeddedConfig {
    EmbeddedConfig {
        brokers,
        ..EmbeddedConfig::ephemeral()
    }
}

/// CPU time consumed so far, in clock ticks, from a `/proc/.../stat` file (utime + stime).
pub fn cpu_ticks(stat_path: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(stat_path).ok()?;
    // The command name may hold spaces and parentheses: fields are counted after its last ')'.
    let after_name = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = after_name.split_whitespace();
    // Fields 3.. of proc(5) start here; utime and stime are fields 14 and 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The length of one clock tick of `/proc` CPU times.
pub fn clock_tick() -> Duration {
    let per_second = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|&ticks| ticks > 0)
        .unwrap_or(100);
    Duration::from_secs(1) / per_second
}

/// CPU of the whole process and of the main thread (where every client actor runs).
#[derive(Clone, Copy)]
pub struct CpuSample {
    pub process: u64,
    pub main_thread: u64,
}

impl CpuSample {
    pub fn now() -> Self {
        let pid = std::process::id();
        CpuSample {
            process: cpu_ticks("/proc/self/stat").unwrap_or(0),
            main_thread: cpu_ticks(&format!("/proc/self/task/{pid}/stat")).unwrap_or(0),
        }
    }
}

/// What one phase measured.
pub struct Phase {
    pub name: &'static str,
    pub messages: usize,
    pub wall: Duration,
    pub process_cpu: Duration,
    pub main_thread_cpu: Duration,
}

impl Phase {
    pub fn measure(
        name: &'static str,
        messages: usize,
        wall: Duration,
        before: CpuSample,
    ) -> Phase {
        let after = CpuSample::now();
        let tick = clock_tick();
        Phase {
            name,
            messages,
            wall,
            process_cpu: tick * after.process.saturating_sub(before.process) as u32,
            main_thread_cpu: tick * after.main_thread.saturating_sub(before.main_thread) as u32,
        }
    }

    pub fn rate(&self) -> f64 {
        self.messages as f64 / self.wall.as_secs_f64().max(f64::EPSILON)
    }

    pub fn micros_per_message(cpu: Duration, messages: usize) -> f64 {
        cpu.as_secs_f64() * 1e6 / messages.max(1) as f64
    }

    pub fn print(&self) {
        println!(
            "  {:<5} {:>8} msgs in {:>7.3} s = {:>9.0} msgs/s | CPU process {:>6.2} s ({:>5.2} µs/msg), main thread {:>6.2} s ({:>5.2} µs/msg)",
            self.name,
            self.messages,
            self.wall.as_secs_f64(),
            self.rate(),
            self.process_cpu.as_secs_f64(),
            Self::micros_per_message(self.process_cpu, self.messages),
            self.main_thread_cpu.as_secs_f64(),
            Self::micros_per_message(self.main_thread_cpu, self.messages),
        );
    }

    /// The phase's figures for a closing JSON line.
    pub fn json(&self) -> serde_json::Value {
        let round2 = |v: f64| (v * 100.0).round() / 100.0;
        serde_json::json!({
            "messages": self.messages,
            "seconds": (self.wall.as_secs_f64() * 1000.0).round() / 1000.0,
            "msgs_per_sec": self.rate().round(),
            "process_cpu_s": self.process_cpu.as_secs_f64(),
            "process_cpu_us_per_msg": round2(Self::micros_per_message(self.process_cpu, self.messages)),
            "main_thread_cpu_s": self.main_thread_cpu.as_secs_f64(),
            "main_thread_cpu_us_per_msg": round2(Self::micros_per_message(self.main_thread_cpu, self.messages)),
        })
    }
}

/// The CPU model from `/proc/cpuinfo`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Where a bench runs: an external name server, or an embedded cluster on its own thread.
pub struct Target {
    /// The name-server address to use.
    pub namesrv: String,
    /// The embedded cluster, when there was no external name server.
    pub cluster: Option<EmbeddedCluster>,
    broker_system: Option<actix::System>,
}

impl Target {
    /// `namesrv` when given, else an embedded cluster of `brokers` brokers.
    pub fn new(namesrv: Option<String>, brokers: usize) -> Result<Target, String> {
        Ok(match namesrv {
            Some(namesrv) => Target {
                namesrv,
                cluster: None,
                broker_system: None,
            },
            None => {
                let (cluster, system) = start_broker_thread(embedded_config(brokers))?;
                Target {
                    namesrv: cluster.namesrv_addr(),
                    cluster: Some(cluster),
                    broker_system: Some(system),
                }
            }
        })
    }

    /// A line saying what the bench runs against, and on how many CPUs.
    pub fn describe(&self, brokers: usize) -> String {
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0);
        match &self.cluster {
            Some(_) => format!(
                "embedded cluster of {brokers} brokers at {}, on its own thread ({cpus} CPUs)",
                self.namesrv
            ),
            None => format!("external name server {} ({cpus} CPUs)", self.namesrv),
        }
    }

    /// Shuts the embedded cluster down (inside the bench's actix system) and takes its
    /// handle, leaving [`Target::stop`] to end its thread.
    pub async fn shutdown_cluster(&mut self) {
        if let Some(cluster) = self.cluster.take() {
            cluster.shutdown().await;
        }
    }

    /// Ends the embedded cluster's thread (after [`Target::shutdown_cluster`]).
    pub fn stop(self) {
        if let Some(system) = self.broker_system {
            system.stop();
        }
    }
}
