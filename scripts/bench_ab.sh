#!/usr/bin/env bash
# Interleaved A/B of the consumer throughput ratios: this tree against a git revision, run
# by run, each run on a broker process of its own.
#
#   scripts/bench_ab.sh <git rev> [pairs] [phases]
#   scripts/bench_ab.sh HEAD~3 5 push,pushsync,push32
#
# Why: the ratios of one consume_bench run against its raw loop move with the machine's state
# (a VM whose speed swings), by more than most changes move them. scripts/bench.sh measures a
# baseline after the current tree, in one block, against a broker that has taken in every
# earlier run's messages; here each pair runs this tree, then the revision, each against a
# fresh broker, so both sides see the same conditions. The revision's own consume_bench is
# built (in a git worktree, target/bench-ab/), so it must know the phases asked for.
# Prints each run's ratios and, per side, their medians.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
REV=${1:?usage: scripts/bench_ab.sh <git rev> [pairs] [phases]}
PAIRS=${2:-5}
PHASES=${3:-push,pushsync,push32}
PORT=${BENCH_PORT:-19986}
OUT=$ROOT/target/bench-ab
mkdir -p "$OUT"

echo "== building this tree (release)" >&2
cargo build --release --quiet --features cli --example consume_bench --bin rocketmq-actor
WORKTREE=$(mktemp -d "${TMPDIR:-/tmp}/rocketmq-actor-ab.XXXXXX")
rmdir "$WORKTREE"
BROKER_PID=
cleanup() {
  [ -n "$BROKER_PID" ] && kill "$BROKER_PID" 2>/dev/null || true
  git -C "$ROOT" worktree remove --force "$WORKTREE" >/dev/null 2>&1 || true
}
trap cleanup EXIT
git worktree add --detach "$WORKTREE" "$REV" >/dev/null
echo "== building $REV (release)" >&2
(cd "$WORKTREE" && CARGO_TARGET_DIR="$OUT/target" cargo build --release --quiet --example consume_bench)

LAST_CPU=$(($(nproc) - 1))
run() {
  local side=$1 bin=$2
  "$ROOT/target/release/rocketmq-actor" broker --listen "127.0.0.1:$PORT" --brokers 2 >/dev/null 2>&1 &
  BROKER_PID=$!
  # Ready once the name server answers.
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
  if [ "$LAST_CPU" -ge 1 ]; then taskset -a -p -c "$LAST_CPU" "$BROKER_PID" >/dev/null; fi
  local line
  line=$(taskset -c 0 "$bin" --namesrv "127.0.0.1:$PORT" --count 1000000 --phases "$PHASES" 2>/dev/null | tail -n 1)
  kill "$BROKER_PID" 2>/dev/null || true
  wait "$BROKER_PID" 2>/dev/null || true
  BROKER_PID=
  printf '{"side":"%s","result":%s}\n' "$side" "$line" >>"$OUT/runs.jsonl"
}
rm -f "$OUT/runs.jsonl"
for i in $(seq "$PAIRS"); do
  echo "== pair $i of $PAIRS" >&2
  run now "$ROOT/target/release/examples/consume_bench"
  run "$REV" "$OUT/target/release/examples/consume_bench"
done

python3 - "$OUT/runs.jsonl" "$PHASES" "$REV" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
phases, rev = sys.argv[2].split(","), sys.argv[3]
print(f"consume_bench --count 1000000 --phases {sys.argv[2]}: throughput ÷ raw loop, each run")
for side in ["now", rev]:
    mine = [r["result"] for r in rows if r["side"] == side]
    cells = []
    for phase in phases:
        runs = [r.get(f"{phase}_over_raw") for r in mine if r.get(f"{phase}_over_raw") is not None]
        if runs:
            each = ", ".join(f"{v:.2f}" for v in runs)
            cells.append(f"{phase} {statistics.median(runs):.2f} ({each})")
    raw = [r["raw"]["msgs_per_sec"] / 1e6 for r in mine if "raw" in r]
    raw_text = f"raw {statistics.median(raw):.2f} M msgs/s" if raw else "raw –"
    print(f"{side}: {raw_text}; " + "; ".join(cells))
PY
