#!/usr/bin/env bash
# Regenerates BENCHMARKS.md: every figure with its command, this machine, and the raw-loop
# ceiling of the same run beside it.
#
#   scripts/bench.sh                      # embedded broker in another process (+ real cluster if installed)
#   BENCH_BASELINE=<git rev> scripts/bench.sh   # also measure <rev> ("before") with the same benches
#   BENCH_REAL=0 scripts/bench.sh         # skip the real rocketmq-rust cluster
#   BENCH_RUNS=5 scripts/bench.sh         # runs per throughput figure (median reported; default 3)
#   BENCH_REAL_ONLY=1 scripts/bench.sh    # re-measure the real cluster only, keep the other results
#   BENCH_PIN=0 scripts/bench.sh          # do not pin the broker and the client to CPUs of their own
#   BENCH_CALLGRIND=0 scripts/bench.sh    # skip the instruction counts (taken when valgrind is installed)
#
# The broker under test runs as its own process (`rocketmq-actor broker --brokers 2`), so the
# CPU figures are the client's alone. The baseline is built in a temporary git worktree with
# this tree's bench programs copied in (they use the public API only), so both sides run the
# same measurement code against the same broker process. Results (JSON lines) are kept in
# target/bench/; BENCHMARKS.md is written from them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUNS=${BENCH_RUNS:-3}
OUT=$ROOT/target/bench
PORT=${BENCH_PORT:-19976}
# Below Linux's ephemeral range (32768 and up) with every port derived from it, like CI's
# clusters: a port there can be held by an outgoing connection, and the name server then exits.
REAL_PORT=${BENCH_REAL_PORT:-15976}
mkdir -p "$OUT"

# Throughput and CPU figures (consume_bench, produce_bench) are taken with the embedded broker
# on the last CPU and the bench client on the first, so the two never take turns on one core
# and the ratios of one run do not depend on where the scheduler put them. Latency and scale
# run unpinned: a multi-threaded process squeezed onto one CPU waits for its own threads'
# time slices, which would show up as milliseconds of tail latency that are not ours.
# BENCH_PIN=0 turns pinning off. The real cluster is pinned the same way for the consumer
# runs only (its processes to the last CPU, the client to the first); its latency and
# producer runs are not pinned.
LAST_CPU=
if [ "${BENCH_PIN:-1}" = 1 ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  LAST_CPU=$(($(nproc) - 1))
  printf '{"broker_cpus":"%s","client_cpus":"0"}\n' "$LAST_CPU" >"$OUT/pinning.json"
else
  rm -f "$OUT/pinning.json"
fi
PIN=0
# pin_broker on|off: moves every thread of the embedded broker onto the last CPU, or back.
pin_broker() {
  [ -n "$LAST_CPU" ] && [ -n "$BROKER_PID" ] || return 0
  if [ "$1" = on ]; then
    taskset -a -p -c "$LAST_CPU" "$BROKER_PID" >/dev/null
    PIN=1
  else
    taskset -a -p -c "0-$LAST_CPU" "$BROKER_PID" >/dev/null
    PIN=0
  fi
}
# pin_real on|off: moves every thread of the real cluster's processes onto the last CPU, or
# back, and the bench client with them onto the first CPU or back.
pin_real() {
  [ -n "$LAST_CPU" ] || return 0
  local cpus="0-$LAST_CPU" pidfile
  [ "$1" = on ] && cpus=$LAST_CPU
  for pidfile in "$OUT/real-cluster"/*.pid; do
    [ -e "$pidfile" ] && taskset -a -p -c "$cpus" "$(cat "$pidfile")" >/dev/null 2>&1 || true
  done
  if [ "$1" = on ]; then PIN=1; else PIN=0; fi
}
if [ "${BENCH_REAL_ONLY:-0}" = 1 ]; then
  # Re-measure the real cluster only, keeping the embedded results of the last full run.
  for f in "$OUT"/*.jsonl; do [ -e "$f" ] && grep -v '"label":"real"' "$f" >"$f.keep" || true; [ -e "$f.keep" ] && mv "$f.keep" "$f"; done
else
  rm -f "$OUT"/*.jsonl
fi

BENCHES=(consume_bench produce_bench latency_bench scale_bench)
echo "== building (release)" >&2
cargo build --release --quiet --features cli --bin rocketmq-actor $(printf -- '--example %s ' "${BENCHES[@]}") --example filter_bench

BROKER_PID=
cleanup() {
  [ -n "$BROKER_PID" ] && kill "$BROKER_PID" 2>/dev/null || true
  if [ "${REAL_STARTED:-0}" = 1 ]; then
    RMQ_CLUSTER_DIR="$OUT/real-cluster" RMQ_BASE_PORT=$REAL_PORT scripts/real-cluster.sh stop >/dev/null 2>&1 || true
  fi
  if [ -n "${BASE_DIR:-}" ]; then
    git worktree remove --force "$BASE_DIR" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_broker() {
  "$ROOT/target/release/rocketmq-actor" broker --listen "127.0.0.1:$PORT" --brokers 2 >"$OUT/broker.log" 2>&1 &
  BROKER_PID=$!
  for _ in $(seq 100); do port_open "$PORT" && return 0; sleep 0.1; done
  echo "the embedded broker did not start; see $OUT/broker.log" >&2
  return 1
}

# run LABEL FILE BIN ARGS...: runs a bench, appends its closing JSON line (tagged) to FILE.
run() {
  local label=$1 file=$2 bin=$3; shift 3
  echo "== $label: $(basename "$bin") $*" >&2
  local line
  if [ "$PIN" = 1 ]; then
    line=$(taskset -c 0 "$bin" "$@" | tail -n 1)
  else
    line=$("$bin" "$@" | tail -n 1)
  fi
  case "$line" in
    "{"*) printf '{"label":"%s","args":"%s","result":%s}\n' "$label" "$*" "$line" >>"$file" ;;
    *) echo "$label: no JSON line from $(basename "$bin") $*" >&2; return 1 ;;
  esac
}

# The consumer phases measured: the baseline may predate the synchronous and the borrowing
# async listeners (pushsync, pushasync, orderlysync, keyordsync), so it runs the others.
PHASES=push,push32,pushsync,pushasync,orderly,orderlysync,keyord,keyordsync
BASELINE_PHASES=push,push32,orderly,keyord

# instructions SIDE BINDIR NAMESRV PHASES: client instructions per message of each consumer
# phase, counted by callgrind (the same on a busy machine as on an idle one, unlike the
# timings). Each client start begins a new profile part: setup, producing, raw, then PHASES.
instructions() {
  local side=$1 bin=$2 ns=$3 phases=$4 count=100000
  [ "${BENCH_CALLGRIND:-1}" = 1 ] && command -v valgrind >/dev/null || return 0
  echo "== $side: callgrind consume_bench --count $count" >&2
  local dir
  dir=$(mktemp -d)
  (cd "$dir" && valgrind --tool=callgrind --callgrind-out-file=phase \
    --dump-before=rocketmq_actor::actors::client::Client::start \
    "$bin/consume_bench" --namesrv "$ns" --count "$count" --phases "$phases" >/dev/null 2>&1) || {
    echo "$side: callgrind run failed; instruction counts left out" >&2
    rm -rf "$dir"
    return 0
  }
  python3 - "$dir" "$side" "$count" "$phases" >>"$OUT/instructions.jsonl" <<'PY'
import json, os, re, sys
directory, side, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
phases = sys.argv[4].split(",")
def summary(path):
    with open(path) as handle:
        for line in handle:
            if line.startswith("summary:"):
                return int(line.split()[1])
    return None
parts = sorted((int(m.group(1)), f) for f in os.listdir(directory) if (m := re.fullmatch(r"phase\.(\d+)", f)))
files = [f for _, f in parts] + ["phase"]  # the final part has no number
names = ["setup", "produce", "raw"] + phases
if len(files) == len(names):
    counts = {n: summary(os.path.join(directory, f)) / count for n, f in zip(names, files)}
    print(json.dumps({"label": side, "count": count, "per_message": counts}))
else:
    print(f"{side}: {len(files)} profile parts, expected {len(names)}", file=sys.stderr)
PY
  # Where the instructions of each phase go, by part of the runtime, beside the raw loop's.
  local parts=() i=3 phase
  for phase in raw ${phases//,/ }; do
    if [ -f "$dir/phase.$i" ]; then parts+=("$phase=$dir/phase.$i"); else parts+=("$phase=$dir/phase"); fi
    i=$((i + 1))
  done
  python3 "$ROOT/scripts/callgrind_parts.py" --messages "$count" --label "$side" "${parts[@]}" \
    >>"$OUT/instruction_parts.jsonl" || echo "$side: instruction parts left out" >&2
  rm -rf "$dir"
}

# suite SIDE BINDIR NAMESRV PHASES: the embedded-broker benchmarks for one side (after/before).
suite() {
  local side=$1 bin=$2 ns=$3 phases=$4
  pin_broker on
  for _ in $(seq "$RUNS"); do
    run "$side" "$OUT/consume.jsonl" "$bin/consume_bench" --namesrv "$ns" --count 1000000 --phases "$phases"
  done
  for _ in $(seq "$RUNS"); do
    run "$side" "$OUT/produce.jsonl" "$bin/produce_bench" --namesrv "$ns" --count 200000
  done
  pin_broker off
  run "$side" "$OUT/latency.jsonl" "$bin/latency_bench" --namesrv "$ns" --rates 1000,10000 --seconds 5
  run "$side" "$OUT/scale.jsonl" "$bin/scale_bench" --namesrv "$ns" --queues 1000,10000 --members 50 --member-queues 1000 --idle-seconds 5
  instructions "$side" "$bin" "$ns" "$phases"
}

# cores BINDIR NAMESRV: listeners that block or burn CPU, on every core against the same
# program held to one (`taskset -c 0`), the broker unpinned; each run beside its ceiling (the
# same work on plain threads, no consumer).
CORE_PHASES=cpusync,orderlycpu,blocksync,cpuceil,blockceil
cores() {
  local bin=$1 ns=$2 saved=$PIN
  for _ in $(seq "$RUNS"); do
    PIN=0 run all "$OUT/cores.jsonl" "$bin/consume_bench" --namesrv "$ns" --count 20000 --phases "$CORE_PHASES"
    PIN=1 run one "$OUT/cores.jsonl" "$bin/consume_bench" --namesrv "$ns" --count 20000 --phases "$CORE_PHASES"
  done
  PIN=$saved
}

# sql: selecting a tenth of a topic by SQL92 against the same tenth by tag (filter_bench, five
# runs of each, the broker and the client pinned), and the broker's evaluation of one
# expression per message (criterion).
sql() {
  local ns=$1
  run after "$OUT/filter.jsonl" "$ROOT/target/release/examples/filter_bench" --namesrv "$ns" --count 2000000 --runs 5
  echo "== criterion: sql_filter" >&2
  cargo bench --quiet --bench sql_filter -- --warm-up-time 1 --measurement-time 3 2>/dev/null |
    awk '/^sql92\//{name=$1; got=0} /time:/ && !got {got=1; sub(/.*\[/,""); printf "{\"bench\":\"%s\",\"median\":%s,\"unit\":\"%s\"}\n", name, $3, $4}' \
    >"$OUT/sql_eval.jsonl"
}

if [ "${BENCH_REAL_ONLY:-0}" != 1 ]; then
start_broker
suite after "$ROOT/target/release/examples" "127.0.0.1:$PORT" "$PHASES"
cores "$ROOT/target/release/examples" "127.0.0.1:$PORT"
sql "127.0.0.1:$PORT"

if [ -n "${BENCH_BASELINE:-}" ]; then
  BASE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/rocketmq-actor-baseline.XXXXXX")
  rmdir "$BASE_DIR"
  git worktree add --detach "$BASE_DIR" "$BENCH_BASELINE" >/dev/null
  for b in "${BENCHES[@]}"; do cp "examples/$b.rs" "$BASE_DIR/examples/"; done
  for b in "${BENCHES[@]}"; do
    grep -q "name = \"$b\"" "$BASE_DIR/Cargo.toml" ||
      printf '\n[[example]]\nname = "%s"\nrequired-features = ["embedded"]\n' "$b" >>"$BASE_DIR/Cargo.toml"
  done
  echo "== building the baseline $BENCH_BASELINE (release)" >&2
  (cd "$BASE_DIR" && CARGO_TARGET_DIR="$OUT/baseline-target" RUSTFLAGS="--cfg bench_baseline" \
    cargo build --release --quiet $(printf -- '--example %s ' "${BENCHES[@]}"))
  suite before "$OUT/baseline-target/release/examples" "127.0.0.1:$PORT" "$BASELINE_PHASES"
fi

kill "$BROKER_PID" 2>/dev/null || true
BROKER_PID=
fi

if [ "${BENCH_REAL:-1}" = 1 ] && { command -v rocketmq-broker-rust >/dev/null || [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/rocketmq-broker-rust" ]; }; then
  echo "== real rocketmq-rust cluster" >&2
  started=$(RMQ_CLUSTER_DIR="$OUT/real-cluster" RMQ_BASE_PORT=$REAL_PORT scripts/real-cluster.sh start)
  REAL_STARTED=1
  real_ns=$(printf '%s\n' "$started" | tail -n 1 | sed 's/^ROCKETMQ_NAMESRV=//')
  bin=$ROOT/target/release/examples
  # The real broker shares the two cores and may refuse work under load: a failed run is
  # reported and left out, the embedded figures are written regardless.
  # The consumer runs as on the embedded broker: RUNS runs, each ratio within its run, the
  # cluster on the last CPU and the client on the first.
  pin_real on
  for _ in $(seq "$RUNS"); do
    run real "$OUT/consume.jsonl" "$bin/consume_bench" --namesrv "$real_ns" --count 200000 --send-batch 50 --inflight 4 --phases push,push32,pushsync,pushasync ||
      echo "real cluster: consume_bench failed; left out" >&2
  done
  pin_real off
  run real "$OUT/produce.jsonl" "$bin/produce_bench" --namesrv "$real_ns" --count 20000 --inflight 16 ||
    echo "real cluster: produce_bench failed; left out" >&2
  run real "$OUT/latency.jsonl" "$bin/latency_bench" --namesrv "$real_ns" --rates 1000 --seconds 5 ||
    echo "real cluster: latency_bench failed; left out" >&2
else
  echo "== real cluster: skipped (BENCH_REAL=0 or rocketmq-broker-rust not installed)" >&2
fi

echo "== writing BENCHMARKS.md" >&2
python3 scripts/bench_report.py "$OUT" >BENCHMARKS.md
echo "BENCHMARKS.md written" >&2
