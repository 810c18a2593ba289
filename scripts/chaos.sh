#!/usr/bin/env bash
# Usage: scripts/chaos.sh [SECONDS]
# Runs the chaos suite (tests/chaos.rs) against the release CLI: an embedded broker process with
# a data directory, `consume --print` processes, and faults (kill -9, SIGTERM, SIGINT churn,
# orderly churn, broker kill -9 and restart, dropped connections) for SECONDS per scenario
# (default 20). Prints one JSON line per scenario:
#   {"scenario","missing","duplicates","order_violations","recovery_ms",...}
# and exits non-zero if a scenario lost an acknowledged message, broke key order, or went over
# its duplicate target. CHAOS_ONLY=name runs one scenario.
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_SCENARIO=${1:-20}
cargo build --release --features cli --bin rocketmq-actor >&2 || exit 1
export CHAOS_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/rocketmq-actor"
export CHAOS_SECONDS=$SECONDS_PER_SCENARIO
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# One scenario at a time: each starts its own processes and they share 2 cores.
cargo test --test chaos -- --ignored --nocapture --test-threads=1 --skip soak ${CHAOS_ONLY:-} >"$log" 2>&1
status=$?
grep -o '{"scenario".*}' "$log"
if [ $status -ne 0 ]; then
  grep -E 'panicked|FAILED|failures:|^---- ' "$log" >&2
  echo "chaos suite failed (exit $status)" >&2
fi
exit $status
