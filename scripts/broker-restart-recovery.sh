#!/usr/bin/env bash
# Usage: scripts/broker-restart-recovery.sh BIN [BROKERS]   (BIN: target/release/rocketmq-actor)
# Starts an embedded broker process with a data directory, consumes 100 messages with
# `consume --print` in another process, kills the broker with -9, restarts it on the same data,
# sends one message, and prints how long that message took to reach the consumer's output.
set -u
BIN=$1; BROKERS=${2:-1}; PORT=$((20000 + RANDOM % 10000))
DATA=$(mktemp -d); OUT=$(mktemp)
$BIN broker --listen 127.0.0.1:$PORT --brokers $BROKERS --data-dir $DATA > /dev/null 2>&1 &
BPID=$!; sleep 1
$BIN produce --namesrv 127.0.0.1:$PORT --topic Rec --count 100 > /dev/null 2>&1
$BIN consume --namesrv 127.0.0.1:$PORT --topic Rec --group rec --from first --print > $OUT 2>/dev/null &
CPID=$!
while [ "$(grep -c queue_offset $OUT)" -lt 100 ]; do sleep 0.1; done
kill -9 $BPID; wait $BPID 2>/dev/null
$BIN broker --listen 127.0.0.1:$PORT --brokers $BROKERS --data-dir $DATA > /dev/null 2>&1 &
BPID=$!
T0=$(date +%s.%N)
until $BIN produce --namesrv 127.0.0.1:$PORT --topic Rec --count 1 > /dev/null 2>&1; do sleep 0.05; done
T1=$(date +%s.%N)
while [ "$(grep -c queue_offset $OUT)" -lt 101 ]; do sleep 0.05; now=$(date +%s); if [ $((now - ${T0%.*})) -gt 90 ]; then echo timeout; break; fi; done
T2=$(date +%s.%N)
echo "restart->produced $(echo "$T1 - $T0" | bc) s; produced->consumed $(echo "$T2 - $T1" | bc) s"
kill $CPID $BPID 2>/dev/null; wait 2>/dev/null; rm -rf $DATA $OUT
