#!/usr/bin/env bash
# Fault scenarios against a real RocketMQ cluster (scripts/real-cluster.sh: the rocketmq-rust name
# server and brokers a and b), one JSON line per scenario and consumer kind:
#   {"scenario":"broker_kill9_restart","mode":"push","produced":N,"consumed":C,"unique":U,
#    "duplicates":C-U,"duplicate_pct":P,"lost":N-U}
#
#   scripts/real-chaos.sh [MODE...]      MODE: push, orderly, lite (default: all three)
#
# Scenarios (SCENARIOS, default both):
# - broker_kill9_restart: members A and B of a group consume (`consume --print`) a first wave of
#   WAVE messages over both brokers; SETTLE seconds later (default 6) broker-a is killed with -9
#   and started again on its store (so it loses the consumer offsets it had not flushed); a
#   second wave is sent and consumed, then a last wave that marks the end; the members stop with
#   SIGTERM. The pause puts the kill in the group's steady state: the members start together,
#   so queues change hands in their first second, and a broker killed less than its offset
#   flush interval (5 s) after a hand-over forgets the previous owner's last commit — the new
#   owner then reads that queue again from the broker's last flushed offset (SETTLE=0 shows
#   it: up to a whole wave of broker-a consumed twice). Java's consumer does the same.
# - member_faults: A consumes a first wave, B joins halfway; a second wave is sent at 200
#   msgs/s, during which A is killed with -9 (its consumption since its last commit comes
#   again), C joins and B stops with SIGTERM; then a last wave.
# Every message is identified by its broker, queue and offset. Exits non-zero when a message is
# lost.
#
# Environment: BIN (default target/release/rocketmq-actor, built when missing), WAVE (default
# 2000), RMQ_BASE_PORT (default 19076), MAX_DUPLICATE_PCT (fail a broker_kill9_restart run above
# it; default: report only), SCENARIOS, SETTLE, KEEP_DIR (copy the members' output and logs
# there).
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
[ -x "$BIN" ] || cargo build --release --quiet --features cli --bin rocketmq-actor
work=$(mktemp -d)
export RMQ_CLUSTER_DIR="$work/cluster"
members=()
cleanup() {
  for pid in "${members[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  scripts/real-cluster.sh stop >/dev/null 2>&1 || true
  if [ -n "${KEEP_DIR:-}" ]; then cp -r "$work" "$KEEP_DIR"; fi
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

# Starts member $1 of group $2 on topic $3 with the mode's flags; its pid goes to member_pid.
start_member() {
  "$BIN" consume --namesrv "$NS" --topic "$3" --group "$2" --from first --print \
    "${flags[@]}" >"$work/member-$1.out" 2>"$work/member-$1.err" &
  member_pid=$!
  members+=("$member_pid")
}

stop_members() {
  for pid in "${members[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${members[@]}"; do wait "$pid" 2>/dev/null || true; done
  members=()
}

broker_kill9_restart() {
  local topic=$1 group=$2
  produce "$topic" "$WAVE"
  start_member a "$group" "$topic"
  start_member b "$group" "$topic"
  wait_for "$WAVE" 180
  sleep "${SETTLE:-6}"
  scripts/real-cluster.sh kill-broker broker-a
  scripts/real-cluster.sh start-broker broker-a >/dev/null 2>&1
  produce "$topic" "$WAVE"
  wait_for $((2 * WAVE)) 240
}

member_faults() {
  local topic=$1 group=$2 a b
  produce "$topic" "$WAVE"
  start_member a "$group" "$topic"; a=$member_pid
  wait_for $((WAVE / 2)) 180
  start_member b "$group" "$topic"; b=$member_pid
  wait_for "$WAVE" 180
  # The second wave at a steady rate, the faults on a schedule while it runs.
  "$BIN" produce --namesrv "$NS" --topic "$topic" --count "$WAVE" --rate 200 >/dev/null 2>"$work/produce.err" &
  local producer=$!
  sleep 2; kill -9 "$a"; wait "$a" 2>/dev/null || true
  sleep 2; start_member c "$group" "$topic"
  sleep 2; kill -TERM "$b"; wait "$b" 2>/dev/null || true
  wait "$producer"
  wait_for $((2 * WAVE)) 240
}

status=0
for scenario in ${SCENARIOS:-broker_kill9_restart member_faults}; do
  case "$scenario" in broker_kill9_restart|member_faults) ;; *) echo "unknown scenario $scenario" >&2; exit 2 ;; esac
  for mode in "${modes[@]}"; do
    topic="Chaos_${mode}_$RANDOM"
    group="chaos_${mode}_$RANDOM"
    case "$mode" in
      push) flags=() ;;
      orderly) flags=(--orderly) ;;
      lite) flags=(--mode lite) ;;
    esac
    rm -f "$work"/member-*
    members=()
    "$scenario" "$topic" "$group"
    produce "$topic" "$WAVE"
    wait_for $((3 * WAVE)) 240 || true
    stop_members
    produced=$((3 * WAVE))
    consumed=$(cat "$work"/member-*.out | grep -c '"queue_offset"' || true)
    distinct=$(unique "$work"/member-*.out)
    python3 -c "
import json
p, c, u = $produced, $consumed, $distinct
print(json.dumps({'scenario': '$scenario', 'mode': '$mode', 'produced': p, 'consumed': c,
    'unique': u, 'duplicates': c - u, 'duplicate_pct': round(100 * (c - u) / p, 2), 'lost': p - u}))"
    [ "$distinct" -ge "$produced" ] || status=1
    if [ -n "${MAX_DUPLICATE_PCT:-}" ] && [ "$scenario" = broker_kill9_restart ]; then
      python3 -c "import sys; sys.exit(0 if 100 * ($consumed - $distinct) / $produced <= $MAX_DUPLICATE_PCT else 1)" || status=1
    fi
  done
done
exit "$status"
