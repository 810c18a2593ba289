#!/usr/bin/env bash
# Starts or stops a real RocketMQ cluster on loopback: one name server and two brokers of the Rust
# implementation (mxsm/rocketmq-rust, published on crates.io), for the interop suite.
#
#   scripts/real-cluster.sh start   # installs the binaries when missing, starts, waits until ready
#   scripts/real-cluster.sh stop    # stops the processes by pid and removes the data
#   scripts/real-cluster.sh kill-broker broker-a    # kill -9, the store kept
#   scripts/real-cluster.sh start-broker broker-a   # starts it again on its store
#
# On success `start` prints `ROCKETMQ_NAMESRV=127.0.0.1:<port>` as its last line. Several clusters
# can run side by side, each with its own RMQ_CLUSTER_DIR (data, logs, pid files) and
# RMQ_BASE_PORT (the name server's port, default 9876; broker-a listens on +1035, broker-b on
# +1045, each also on its port -2 and +1; health endpoints on +8204..+8206). `stop` only stops
# the cluster of its RMQ_CLUSTER_DIR.
#
# broker-a filters by SQL92 (`enablePropertyFilter = true`), broker-b does not (the real
# broker's default): tests/interop_sql.rs checks both.
#
# RMQ_ACL_FILE=path/to/plain_acl.yml turns authentication and authorization on in both brokers
# (rocketmq-rust's `authenticationEnabled`/`authorizationEnabled` with that file as `aclFile`;
# the name server stays open): for tests/interop_acl.rs, with scripts/interop_plain_acl.yml.
set -euo pipefail

VERSION=1.0.0
DIR=${RMQ_CLUSTER_DIR:-${TMPDIR:-/tmp}/rocketmq-actor-real-cluster}
NS_PORT=${RMQ_BASE_PORT:-9876}
BROKERS=(broker-a broker-b)
CARGO_BIN=${CARGO_HOME:-$HOME/.cargo}/bin

install_if_missing() {
  local crate=$1 binary=$2
  if ! command -v "$binary" >/dev/null 2>&1 && [ ! -x "$CARGO_BIN/$binary" ]; then
    echo "installing $crate $VERSION (takes about 12 minutes once)..." >&2
    cargo install --locked "$crate" --version "$VERSION" >&2
  fi
}

# Waits until a check passes while the process of pid file $2 lives: 0 when it passed, 1 when
# it timed out, 2 when the process exited first (a start that failed, e.g. a port that could not
# be bound, which a new try can get past).
wait_until() {
  local what=$1 pidfile=$2 tries=$3; shift 3
  for _ in $(seq "$tries"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "$what: the process exited before it was ready; logs in $DIR" >&2
      return 2
    fi
    sleep 0.5
  done
  echo "timed out waiting for $what; logs in $DIR" >&2
  tail -n 20 "$DIR"/*.log >&2 || true
  return 1
}

# Starts one server (its name, its readiness checks as shell commands one per line, then its
# command line) and waits until each check passes; a server that exits before it is ready is
# started again, at most four times, its earlier logs kept beside the new one.
start_server() {
  local name=$1 checks=$2; shift 2
  local try status=0
  for try in 1 2 3 4; do
    [ -e "$DIR/$name.log" ] && mv "$DIR/$name.log" "$DIR/$name.try$((try - 1)).log"
    nohup "$@" >"$DIR/$name.log" 2>&1 &
    echo $! >"$DIR/$name.pid"
    status=0
    local check
    while IFS= read -r check; do
      [ -n "$check" ] || continue
      wait_until "$name ($check)" "$DIR/$name.pid" 240 bash -c "$check" </dev/null || { status=$?; break; }
    done <<<"$checks"
    [ "$status" = 0 ] && return 0
    [ "$status" = 2 ] || return 1
    tail -n 5 "$DIR/$name.log" >&2 || true
    sleep 2
  done
  echo "$name did not start in four tries; logs in $DIR" >&2
  return 1
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# For the readiness checks, which run in a shell of their own.
export -f port_open

# The [broker] keys of ACL mode when RMQ_ACL_FILE is set (else nothing).
acl_settings() {
  [ -n "${RMQ_ACL_FILE:-}" ] || return 0
  local file
  file=$(cd "$(dirname "$RMQ_ACL_FILE")" && pwd)/$(basename "$RMQ_ACL_FILE")
  mkdir -p "$DIR/$1/auth"
  printf 'authenticationEnabled = true\nauthorizationEnabled = true\nauthConfigPath = "%s"\naclFile = "%s"\n' \
    "$DIR/$1/auth" "$file"
}

# Starts broker number $2 (0 for broker-a) of name $1 on its store, as `start` does.
start_broker() {
  local name=$1 i=$2
  local port=$((NS_PORT + 1035 + i * 10)) health=$((NS_PORT + 8204 + i * 2))
  mkdir -p "$DIR/$name/broker" "$DIR/$name/store"
  cat >"$DIR/$name.toml" <<TOML
[broker]
namesrvAddr = "127.0.0.1:$NS_PORT"
brokerIp1 = "127.0.0.1"
listenPort = $port
storePathRootDir = "$DIR/$name/broker"
autoCreateTopicEnable = true
enablePropertyFilter = $([ "$i" = 0 ] && echo true || echo false)
$(acl_settings "$name")
[broker.topicQueueConfig]
defaultTopicQueueNums = 8
[broker.brokerServerConfig]
bindAddress = "127.0.0.1"
[broker.brokerIdentity]
brokerName = "$name"
brokerClusterName = "DefaultCluster"
brokerId = 0
[store]
storeType = "LocalFile"
brokerRole = "ASYNC_MASTER"
flushDiskType = "ASYNC_FLUSH"
storePathRootDir = "$DIR/$name/store"
haListenAddress = "127.0.0.1"
haListenPort = $((port + 1))
mappedFileSizeCommitLog = 134217728
# A test cluster on a disk shared with builds: the defaults (stop writing at 90 % used, refuse to
# start near it) made sends fail with SYSTEM_BUSY store_not_writeable when build output filled it.
diskMaxUsedSpaceRatio = 95
diskSpaceCleanForciblyRatio = 97
diskSpaceWarningLevelRatio = 98
TOML
  start_server "$name" "curl -sf 127.0.0.1:$health/readyz
port_open $port" \
    env -u NAMESRV_ADDR ROCKETMQ_HOME="$DIR/$name/broker" ROCKETMQ_HEALTH_BIND_ADDR="127.0.0.1:$health" \
    rocketmq-broker-rust -c "$DIR/$name.toml"
}

start() {
  export PATH="$CARGO_BIN:$PATH"
  install_if_missing rocketmq-namesrv rocketmq-namesrv-rust
  install_if_missing rocketmq-broker rocketmq-broker-rust
  stop >/dev/null 2>&1 || true
  # Another cluster on these ports would answer in place of this one.
  local used
  for used in "$NS_PORT" $((NS_PORT + 1035)) $((NS_PORT + 1045)) $((NS_PORT + 8204)) $((NS_PORT + 8205)) $((NS_PORT + 8206)); do
    if port_open "$used"; then
      echo "port $used is already in use; pick other ports with RMQ_BASE_PORT" >&2
      return 1
    fi
  done
  mkdir -p "$DIR/ns"
  cat >"$DIR/ns.toml" <<TOML
rocketmqHome = "$DIR/ns"
kvConfigPath = "$DIR/ns/kvConfig.json"
configStorePath = "$DIR/ns/namesrv.properties"
listenPort = $NS_PORT
bindAddress = "127.0.0.1"
TOML
  start_server namesrv "port_open $NS_PORT" \
    env ROCKETMQ_HOME="$DIR/ns" ROCKETMQ_HEALTH_BIND_ADDR="127.0.0.1:$((NS_PORT + 8205))" \
    rocketmq-namesrv-rust -c "$DIR/ns.toml"

  local i=0
  for name in "${BROKERS[@]}"; do
    start_broker "$name" "$i"
    i=$((i + 1))
  done
  echo "ROCKETMQ_NAMESRV=127.0.0.1:$NS_PORT"
}

stop() {
  [ -d "$DIR" ] || return 0
  for pidfile in "$DIR"/*.pid; do
    [ -e "$pidfile" ] || continue
    local pid; pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
  rm -rf "$DIR"
}

# The index of broker $1 in BROKERS.
broker_index() {
  local i
  for i in "${!BROKERS[@]}"; do
    [ "${BROKERS[$i]}" = "$1" ] && { echo "$i"; return 0; }
  done
  echo "no broker $1 (one of: ${BROKERS[*]})" >&2
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  # kill -9 of one broker (a crash: nothing flushed), keeping its store.
  kill-broker)
    pid=$(cat "$DIR/${2:?broker name}.pid")
    kill -9 "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done ;;
  # Starts a broker again on its store (after kill-broker).
  start-broker)
    export PATH="$CARGO_BIN:$PATH"
    start_broker "${2:?broker name}" "$(broker_index "$2")" ;;
  *) echo "usage: $0 start|stop|kill-broker NAME|start-broker NAME" >&2; exit 2 ;;
esac
