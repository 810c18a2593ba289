#!/usr/bin/env bash
# Usage: scripts/fuzz.sh [SECONDS]   (default 600)
# Fuzzes every decoder (frames, commands and headers, pulled messages, stored records, batch
# bodies, JSON bodies, properties, ids, filters, local offsets, compression) and the embedded
# broker's request handling (mutated frames and structured requests on a long-lived broker core)
# for SECONDS in all, release build (tests/internal/fuzz.rs). Prints one JSON line per target,
# {"target","cases","seconds"}, and a total; a panic fails the run and prints the input in hex.
# FUZZ_SEED=N changes the mutation sequence.
set -uo pipefail
cd "$(dirname "$0")/.."
export FUZZ_SECONDS=${1:-600}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --release --lib fuzz_every_decoder -- --ignored --nocapture >"$log" 2>&1
status=$?
grep -o '{"target".*}' "$log"
if [ $status -ne 0 ]; then
  grep -E 'panicked|error' "$log" >&2
  echo "fuzzing failed (exit $status)" >&2
fi
exit $status
