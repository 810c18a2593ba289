#!/usr/bin/env bash
# Runs the numbered tutorials (examples/NN_*.rs, see TUTORIAL.md) in order, each with a 120 s
# limit, and prints a PASS/FAIL line per example with its time. Exits non-zero if any failed.
#
#   scripts/examples.sh                           # each example on its own embedded cluster
#   scripts/examples.sh --namesrv 127.0.0.1:9876  # extra arguments go to every example
#
# The examples are built once (`cargo build --examples`), then the binaries are run directly,
# so a timeout stops the example itself. Each example prints what it showed; its output is
# shown indented under its line.
set -uo pipefail
cd "$(dirname "$0")/.."

cargo build --examples || exit 1

target_dir=$(cargo metadata --format-version 1 --no-deps 2>/dev/null |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin_dir="${target_dir:-target}/debug/examples"

failed=()
count=0
for source in examples/[0-9][0-9]_*.rs; do
  name=$(basename "$source" .rs)
  count=$((count + 1))
  start=$(date +%s%N)
  output=$(timeout 120 "$bin_dir/$name" "$@" 2>&1)
  status=$?
  millis=$((($(date +%s%N) - start) / 1000000))
  seconds=$(printf '%d.%02d' $((millis / 1000)) $((millis % 1000 / 10)))
  if [ "$status" -eq 0 ]; then
    echo "PASS $name ${seconds}s"
  elif [ "$status" -eq 124 ]; then
    echo "FAIL $name ${seconds}s (timed out after 120 s)"
    failed+=("$name")
  else
    echo "FAIL $name ${seconds}s (exit status $status)"
    failed+=("$name")
  fi
  printf '%s\n' "$output" | sed 's/^/    | /'
done

if [ "$count" -eq 0 ]; then
  echo "no examples/NN_*.rs found" >&2
  exit 1
fi
if [ "${#failed[@]}" -gt 0 ]; then
  echo "${#failed[@]} of $count examples failed: ${failed[*]}" >&2
  exit 1
fi
echo "all $count examples passed"
