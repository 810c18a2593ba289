#!/usr/bin/env bash
# Mutation testing of the consumer cores with cargo-mutants (installed from crates.io if absent).
#
#   scripts/mutants.sh [FILE...]     default: the consumer cores listed below
#
# Each mutant is one small change to the code (an operator flipped, a body replaced by a default
# value). The test command (.cargo/mutants.toml) is the unit tests of src/consumer plus the
# simulator's tests: its 300-seed fault budget (stopping at the first failing seed), the seeds that
# found bugs and the lock-expiry detector. A mutant the tests fail on is caught; one they pass on
# is missed: a gap in the tests, or a change that means the same (src/sim/README.md lists those).
#
# Environment: MUTANTS_JOBS (default 1; each job builds in its own copy of the tree),
# MUTANTS_SHARD=k/n (run the k-th of n slices, e.g. one per evening), MUTANTS_RE (only mutants
# whose name matches this regex, e.g. a function's name), MUTANTS_OUT (default
# target/mutants-out). A full run of the default files is about 1,350 mutants at ~20 s each on
# one core of this 2-core machine: shard it. Not part of .ci/run.
#
# Ends with a table: caught / missed / timeout / unviable per file, and the score
# caught / (caught + missed) over viable mutants (a timeout counts as caught: the tests noticed).
set -euo pipefail
cd "$(dirname "$0")/.."

cores=(queue_core orderly lock key_order rebalance offset pull_cache process_queue flow retry lite_core)
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  for core in "${cores[@]}"; do files+=("src/consumer/$core.rs"); done
fi
for file in "${files[@]}"; do
  [ -f "$file" ] || { echo "no such file: $file" >&2; exit 2; }
done

if ! command -v cargo-mutants >/dev/null; then
  echo "installing cargo-mutants from crates.io" >&2
  cargo install --locked cargo-mutants >&2
fi

out="${MUTANTS_OUT:-target/mutants-out}"
args=(--jobs "${MUTANTS_JOBS:-1}" --output "$out" --shuffle)
for file in "${files[@]}"; do args+=(--file "$file"); done
if [ -n "${MUTANTS_SHARD:-}" ]; then args+=(--shard "$MUTANTS_SHARD" --sharding round-robin); fi
if [ -n "${MUTANTS_RE:-}" ]; then args+=(--re "$MUTANTS_RE"); fi

status=0
SIM_FAIL_FAST=1 cargo mutants "${args[@]}" || status=$?
# cargo-mutants exits 2 when mutants were missed, 3 on timeouts: the table says which.
python3 scripts/mutants_report.py "$out/mutants.out" "${files[@]}"
case "$status" in 0|2|3) exit 0 ;; *) exit "$status" ;; esac
