#!/usr/bin/env bash
# Usage: scripts/soak.sh [MINUTES]
# The soak (tests/chaos.rs `soak`): an embedded broker process with two brokers and three
# `consume --print` processes under 1,000 msgs/s for MINUTES (default 60), with a fault every
# 30 s in turn (consumer kill -9, consumer SIGTERM, a member joining and one leaving with SIGINT,
# broker kill -9 and restart on its data). Every 10 s it records the resident memory and open
# descriptors of the broker and of each consumer; one consumer (the survivor) lives through the
# whole run. Prints one JSON line like the chaos suite's, plus `survivor_rss_kib` and
# `survivor_fds` ([median of the second fifth of the run, median of the last fifth]) and
# `broker_rss_kib_max`; fails if an acknowledged message is missing or the survivor's memory grew
# by more than 10 % (or its descriptors by more than 8). The samples go to
# target/soak/resources.csv.
set -uo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-60}
cargo build --release --features cli --bin rocketmq-actor >&2 || exit 1
mkdir -p target/soak
export CHAOS_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/rocketmq-actor"
export CHAOS_SOAK_MINUTES=$MINUTES
export CHAOS_SOAK_CSV="$PWD/target/soak/resources.csv"
log=target/soak/test.log
cargo test --test chaos -- --ignored --nocapture --exact soak >"$log" 2>&1
status=$?
grep -o '{"scenario".*}' "$log"
if [ $status -ne 0 ]; then
  grep -E 'panicked|FAILED|failures:|^---- ' "$log" >&2
  echo "soak failed (exit $status; log in $log)" >&2
fi
exit $status
