#!/usr/bin/env bash
# Runs simulator seeds for SECONDS (default 60) and ends with one JSON line:
#   {"seeds":N,"seeds_per_sec":R,"failures":F,"faults":{"partition_both_ways":N,...}}
# (the faults the seeds ran, by kind).
# Each failing seed is printed above it with the command that replays it (with a trace of every
# event). Exits non-zero when a seed fails. SIM_START=N starts at seed N (default: from the clock,
# so every run explores new seeds; the first seed is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
case "$seconds" in
  ''|*[!0-9]*) echo "usage: scripts/simulate.sh SECONDS" >&2; exit 2 ;;
esac
start="${SIM_START:-$(( $(date +%s) * 1000 ))}"
echo "simulating for ${seconds}s from seed ${start}" >&2
cargo build --release --lib --tests --quiet 2>&1 | grep -v '^$' >&2 || true
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
SIM_SECONDS="$seconds" SIM_START="$start" cargo test --release --quiet --lib sim::tests::soak \
  -- --ignored --exact --nocapture >"$log" 2>&1 || status=$?
grep -E '^(seed [0-9]+ failed|  replay: )' "$log" || true
summary="$(grep -E '^\{"seeds":' "$log" | tail -n 1 || true)"
if [ -z "$summary" ]; then
  cat "$log" >&2
  echo "the simulator did not report (exit $status)" >&2
  exit 1
fi
echo "$summary"
exit "$status"
