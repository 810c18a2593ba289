//! The simulator's runs: a seed budget in `cargo test`, a replay, and a soak for scripts.

use super::*;

/// The command that replays `seed` with its trace.
fn replay_command(seed: u64) -> String {
    format!(
        "SIM_SEED={seed} cargo test --release --lib sim::tests::replay -- --ignored --nocapture"
    )
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

/// Whether `seed`'s run held every invariant; prints what broke and the replay command if not.
fn held(seed: u64, report: &Report) -> bool {
    if report.violations.is_empty() {
        return true;
    }
    eprintln!("seed {seed} failed: {:?}", report.violations);
    eprintln!("  replay: {}", replay_command(seed));
    false
}

/// Runs `seeds`, printing each failing seed with what broke and its replay command.
/// `SIM_FAIL_FAST=1` stops at the first failing seed (`scripts/mutants.sh`: a mutant is caught
/// once, and most are caught early).
fn run_seeds(seeds: impl IntoIterator<Item = u64>) -> (u64, Vec<u64>) {
    let fail_fast = env_u64("SIM_FAIL_FAST").is_some_and(|on| on != 0);
    let mut ran = 0;
    let mut failing = Vec::new();
    for seed in seeds {
        let report = run(seed, false);
        ran += 1;
        if !held(seed, &report) {
            failing.push(seed);
            if fail_fast {
                break;
            }
        }
    }
    (ran, failing)
}

#[test]
fn a_seed_replays_event_for_event() {
    // 11 is a lite pull group.
    for seed in [1, 7, 11, 1234] {
        let a = run(seed, true);
        let b = run(seed, true);
        assert_eq!(a.digest, b.digest, "seed {seed}");
        assert_eq!(a.trace, b.trace, "seed {seed}");
        assert!(a.events > 1_000, "seed {seed} ran only {} events", a.events);
    }
}

#[test]
fn runs_consume_fail_and_dead_letter() {
    // The scenarios are not idle: every run consumes, faults happen, poison reaches the DLQ.
    let mut consumed = 0;
    let mut dead = 0;
    let mut faults = 0;
    for seed in 0..20 {
        let report = run(seed, false);
        assert!(report.acked > 0, "seed {seed} produced nothing");
        consumed += report.consumed;
        dead += report.dead_lettered;
        faults += report.faults;
    }
    assert!(consumed > 500, "{consumed}");
    assert!(dead > 20, "{dead}");
    assert!(faults > 50, "{faults}");
}

#[test]
fn lite_pull_groups_poll_everything_through_faults() {
    // A fifth of the seeds are lite pull groups; their polls are what counts as consumed.
    pull_kind_groups_consume_everything(SimMode::LitePull, 20);
}

#[test]
fn schedule_service_groups_handle_everything_through_faults() {
    // About one seed in thirteen runs schedule services; what their tasks handle is consumed.
    pull_kind_groups_consume_everything(SimMode::Schedule, 8);
}

fn pull_kind_groups_consume_everything(mode: SimMode, at_least: usize) {
    let lite: Vec<u64> = (0..200)
        .filter(|seed| SimConfig::from_seed(*seed).mode == mode)
        .collect();
    assert!(lite.len() >= at_least, "only {} {mode:?} seeds", lite.len());
    let mut clean = 0;
    for seed in lite {
        let report = run(seed, false);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:?}",
            report.violations
        );
        assert!(report.consumed > 0, "seed {seed} polled nothing");
        if SimConfig::from_seed(seed).profile == Profile::Clean {
            // Joins, slow polls and clean shutdowns only: everything once.
            assert_eq!(report.consumed, report.acked, "seed {seed}");
            clean += 1;
        }
    }
    assert!(clean >= 1, "{clean}");
}

/// Seeds that exposed bugs, kept green (each fails again when its fix is reverted).
#[test]
fn seeds_that_found_bugs_stay_green() {
    // An orderly queue whose cache was thrown away (re-lock after a lost connection) while a
    // batch ran stayed "in flight" forever and never consumed again: messages lost.
    let stuck_orderly = [2_000_588, 2_000_929, 2_001_070];
    // After a broker restart forgot its locks, a member kept consuming on its last grant while
    // another was granted the lock: two members consumed one queue at once.
    let lock_after_restart = [2_003_067, 2_003_074, 2_003_088];
    // A broker restarted without its data answered TOPIC_NOT_EXIST for the retry topic; the
    // first send-back recreated it from offset 0 and the member, still at its old offset,
    // skipped every copy below that: failed messages never retried nor dead-lettered.
    let retry_topic_reborn = [7_021_932, 7_023_805, 7_033_673, 7_070_497];
    // An orderly queue that got its lock back re-read its offset and, finding the stored one
    // equal to its own, still dropped its cache because the cache ran ahead of it: the batch
    // running then was consumed twice by the same member.
    let relock_dropped_cache = [7_024_908];

    let seeds: Vec<u64> = stuck_orderly
        .into_iter()
        .chain(lock_after_restart)
        .chain(retry_topic_reborn)
        .chain(relock_dropped_cache)
        .collect();
    for seed in &seeds {
        // The lite pull mode came later, drawn last: these seeds kept their push scenarios.
        assert_ne!(
            SimConfig::from_seed(*seed).mode,
            SimMode::LitePull,
            "seed {seed}"
        );
    }
    // They replay the runs that found the bugs: without the long faults and the lossy broker
    // restarts, which came later (drawn last, so a run without them is the run it was).
    let failing: Vec<u64> = seeds
        .into_iter()
        .filter(|&seed| {
            let mut cfg = SimConfig::from_seed(seed);
            cfg.long_faults = false;
            cfg.lossy_restarts = false;
            !held(seed, &World::new(cfg).run())
        })
        .collect();
    assert!(failing.is_empty(), "{failing:?}");
}

#[test]
fn seeded_fault_schedules_hold_every_invariant() {
    // SIM_SEEDS widens the budget; SIM_START moves the window.
    let count = env_u64("SIM_SEEDS").unwrap_or(300);
    let start = env_u64("SIM_START").unwrap_or(0);
    let (ran, failing) = run_seeds(start..start + count);
    assert!(
        failing.is_empty(),
        "{} of {ran} seeds failed: {failing:?}",
        failing.len()
    );
}

/// `SIM_SEED=N`: runs one seed with a trace of every event.
#[test]
#[ignore = "replays the seed in SIM_SEED"]
fn replay() {
    let seed = env_u64("SIM_SEED").expect("set SIM_SEED to the seed to replay");
    let report = run(seed, true);
    println!("{}", report.trace);
    println!(
        "seed {seed}: {:?} {:?}, {} events, {} acked, {} consumed, {} duplicates, {} dead-lettered, {} faults, digest {:016x}",
        SimConfig::from_seed(seed).profile,
        SimConfig::from_seed(seed).mode,
        report.events,
        report.acked,
        report.consumed,
        report.duplicates,
        report.dead_lettered,
        report.faults,
        report.digest
    );
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// `SIM_SECONDS=S [SIM_START=N]`: runs seeds for S seconds and ends with one JSON line.
#[test]
#[ignore = "runs seeds for SIM_SECONDS (scripts/simulate.sh)"]
fn soak() {
    let seconds = env_u64("SIM_SECONDS").unwrap_or(60);
    let start = env_u64("SIM_START").unwrap_or(1_000_000);
    let began = std::time::Instant::now();
    let deadline = Duration::from_secs(seconds);
    let mut seed = start;
    let mut ran = 0u64;
    let mut failures = 0u64;
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    while began.elapsed() < deadline {
        let report = run(seed, false);
        ran += 1;
        if !held(seed, &report) {
            failures += 1;
        }
        for (kind, n) in &report.fault_kinds {
            *faults.entry(kind).or_default() += n;
        }
        seed += 1;
    }
    let rate = ran as f64 / began.elapsed().as_secs_f64();
    let faults = serde_json::to_string(&faults).unwrap_or_default();
    println!(
        "{{\"seeds\":{ran},\"seeds_per_sec\":{rate:.1},\"failures\":{failures},\"faults\":{faults}}}"
    );
    assert_eq!(failures, 0);
}

/// The orderly and key-ordered seeds with long faults among the first `count`, with members
/// that ignore their locks' expiry: how many ran, and those a lock check caught.
fn seeds_ignoring_lock_expiry(count: u64) -> (u64, Vec<u64>) {
    let mut ran = 0;
    let mut caught = Vec::new();
    for seed in 0..count {
        let mut cfg = SimConfig::from_seed(seed);
        if !cfg.long_faults || !matches!(cfg.mode, SimMode::Orderly | SimMode::KeyOrdered) {
            continue;
        }
        cfg.ignore_lock_expiry = true;
        ran += 1;
        let report = World::new(cfg).run();
        if report
            .violations
            .iter()
            .any(|v| matches!(v, Violation::LockBroken(_)))
        {
            caught.push(seed);
        }
    }
    (ran, caught)
}

/// A member that goes on consuming on a lock its own clock says has expired (issue 51: it
/// went unseen in 16,846 seeds while the lock check asked the member's core) is caught from
/// the broker's lock table: by a partition longer than the broker's lock expiry while its
/// listener is slow. Each seed below catches it, and holds every invariant without it.
#[test]
fn a_member_ignoring_its_lock_expiry_is_caught() {
    let replays = [2, 7, 191, 275, 281];
    for seed in replays {
        let mut cfg = SimConfig::from_seed(seed);
        assert!(cfg.long_faults, "seed {seed}");
        // Found before the lossy broker restarts came: replayed without them.
        cfg.lossy_restarts = false;
        cfg.ignore_lock_expiry = true;
        let report = World::new(cfg).run();
        assert!(
            report
                .violations
                .iter()
                .any(|v| matches!(v, Violation::LockBroken(_))),
            "seed {seed}: {:?}",
            report.violations
        );
        assert!(held(seed, &run(seed, false)), "seed {seed}");
    }
    // Across seeds: a 120 s run (about 9,000 seeds) meets it dozens of times.
    let (ran, caught) = seeds_ignoring_lock_expiry(1_000);
    assert!(
        caught.len() >= 5,
        "caught in {} of {ran} seeds",
        caught.len()
    );
}

#[test]
#[ignore = "measures the detection rate (SIM_SEEDS, default 2,000)"]
fn detection_rate_of_a_member_ignoring_its_lock_expiry() {
    let (ran, caught) = seeds_ignoring_lock_expiry(env_u64("SIM_SEEDS").unwrap_or(2_000));
    println!(
        "caught {} of {ran}: {:?}",
        caught.len(),
        &caught[..caught.len().min(20)]
    );
}
