#!/usr/bin/env bash
# Fault scenarios against a real RocketMQ cluster (scripts/real-cluster.sh: the rocketmq-rust name
# server and brokers a and b), one JSON line per scenario and consumer kind:
#   {"scenario":"broker_kill9_restart","mode":"push","produced":N,"consumed":C,"unique":U,
#    "duplicates":C-U,"duplicate_pct":P,"lost":N-U}
#
#   scripts/real-chaos.sh [MODE...]      MODE: push, orderly, lite (default: all three)
#
# Scenario broker_kill9_restart: members A and B of a group consume (`consume --print`) a first
# wave of WAVE messages over both brokers; broker-a is killed with -9 and started again on its
# store (so it loses the consumer offsets it had not flushed); a second wave is sent and
# consumed, then a last wave that marks the end; the members stop with SIGTERM. Every message
# is identified by its broker, queue and offset. Exits non-zero when a message is lost.
#
# Environment: BIN (default target/release/rocketmq-actor, built when missing), WAVE (default
# 2000), RMQ_BASE_PORT (default 19076), MAX_DUPLICATE_PCT (fail above it; default: report only).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/rocketmq-actor}
WAVE=${WAVE:-2000}
export RMQ_BASE_PORT=${RMQ_BASE_PORT:-19076}
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(push orderly lite)
for mode in "${modes[@]}"; do
  case "$mode" in push|orderly|lite) ;; *) echo "unknown mode $mode (push, orderly, lite)" >&2; exit 2 ;; esac
done
[ -x "$BIN" ] || cargo build --release --quiet --bin rocketmq-actor
work=$(mktemp -d)
export RMQ_CLUSTER_DIR="$work/cluster"
members=()
cleanup() {
  for pid in "${members[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  scripts/real-cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
scripts/real-cluster.sh start >"$work/start.log" 2>&1 || { cat "$work/start.log" >&2; exit 1; }
NS=127.0.0.1:$RMQ_BASE_PORT

# Distinct messages printed so far by the members (broker, queue, offset).
unique() {
  cat "$@" 2>/dev/null | python3 -c '
import json, sys
seen = set()
for line in sys.stdin:
    try:
        m = json.loads(line)
        seen.add((m["broker"], m["queue_id"], m["queue_offset"]))
    except (ValueError, KeyError):
        pass
print(len(seen))'
}

# Waits until the members printed $1 distinct messages (at most $2 seconds).
wait_for() {
  local want=$1 deadline=$((SECONDS + $2))
  until [ "$(unique "$work"/member-*.out)" -ge "$want" ]; do
    if [ $SECONDS -ge $deadline ]; then
      echo "timed out at $(unique "$work"/member-*.out) of $want messages" >&2
      return 1
    fi
    sleep 0.5
  done
}

produce() {
  local topic=$1 count=$2
  until "$BIN" produce --namesrv "$NS" --topic "$topic" --count "$count" >/dev/null 2>"$work/produce.err"; do
    sleep 0.5
  done
}

status=0
for mode in "${modes[@]}"; do
  topic="Chaos_${mode}_$RANDOM"
  group="chaos_${mode}_$RANDOM"
  case "$mode" in
    push) flags=() ;;
    orderly) flags=(--orderly) ;;
    lite) flags=(--mode lite) ;;
  esac
  rm -f "$work"/member-*
  produce "$topic" "$WAVE"
  members=()
  for member in a b; do
    "$BIN" consume --namesrv "$NS" --topic "$topic" --group "$group" --from first --print \
      "${flags[@]}" >"$work/member-$member.out" 2>"$work/member-$member.err" &
    members+=($!)
  done
  wait_for "$WAVE" 180
  scripts/real-cluster.sh kill-broker broker-a
  scripts/real-cluster.sh start-broker broker-a >/dev/null 2>&1
  produce "$topic" "$WAVE"
  wait_for $((2 * WAVE)) 240
  produce "$topic" "$WAVE"
  wait_for $((3 * WAVE)) 240 || true
  for pid in "${members[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${members[@]}"; do wait "$pid" 2>/dev/null || true; done
  members=()
  produced=$((3 * WAVE))
  consumed=$(cat "$work"/member-*.out | grep -c '"queue_offset"' || true)
  distinct=$(unique "$work"/member-*.out)
  line=$(python3 -c "
import json
p, c, u = $produced, $consumed, $distinct
print(json.dumps({'scenario': 'broker_kill9_restart', 'mode': '$mode', 'produced': p, 'consumed': c,
    'unique': u, 'duplicates': c - u, 'duplicate_pct': round(100 * (c - u) / p, 2), 'lost': p - u}))")
  echo "$line"
  [ "$distinct" -ge "$produced" ] || status=1
  if [ -n "${MAX_DUPLICATE_PCT:-}" ]; then
    python3 -c "import sys; sys.exit(0 if 100 * ($consumed - $distinct) / $produced <= $MAX_DUPLICATE_PCT else 1)" || status=1
  fi
done
exit "$status"
