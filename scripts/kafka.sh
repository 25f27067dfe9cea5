#!/usr/bin/env bash
# scripts/kafka.sh — real Apache Kafka 4.x brokers (KRaft, each node broker and controller in one
# JVM) for tests and demos, without Docker: one node by default, a cluster of KAFKA_BROKERS nodes
# on request.
#
#   scripts/kafka.sh up              start the node(s) (idempotent) and wait until they answer
#   scripts/kafka.sh down [--purge]  stop them (SIGTERM, SIGKILL after 30 s); --purge kills them
#                                    and deletes their data
#   scripts/kafka.sh env             print the bootstrap addresses as exports (for eval)
#   scripts/kafka.sh status          exit 0 if every node runs and answers
#   scripts/kafka.sh kill ID         SIGKILL node ID (1…N): a crash
#   scripts/kafka.sh stop ID         stop node ID (SIGTERM: controlled shutdown)
#   scripts/kafka.sh start ID        start node ID again on its ports and wait until it answers
#
# KAFKA_BROKERS=1 (the default, `make services`): one node, every topic with replication factor 1;
# env prints TEST_KAFKA_BROKERS. KAFKA_BROKERS=N (2…8; 3 for the cluster tests): a separate
# cluster of N nodes, all of them controllers (a static quorum: N=3 survives one node's loss);
# default and internal topics get replication factor min(3, N) and min.insync.replicas
# min(2, N); env prints TEST_KAFKA_CLUSTER_BROKERS (every node) and TEST_KAFKA_CLUSTER_CTL (this
# script with KAFKA_BROKERS set, for kill/stop/start). Both can run at once; give every command
# the same KAFKA_BROKERS. Heap: 768 MiB for the single node, 512 MiB per cluster node, so three
# fit beside PostgreSQL on a 2-core, 24 GiB machine.
#
# Environment:
#   KAFKA_VERSION          org.apache.kafka:kafka_2.13 version, ≥ 4.1 (default 4.4.0)
#   KAFKA_BROKERS          number of nodes (default 1)
#   KAFKA_PORT             single node: PLAINTEXT listener on 127.0.0.1 (default: see Ports)
#   KAFKA_CONTROLLER_PORT  single node: KRaft controller listener on 127.0.0.1 (default: see Ports)
#   KAFKA_PORT_<ID>, KAFKA_CONTROLLER_PORT_<ID>   the same for cluster node ID
#   KAFKA_START_TIMEOUT    seconds up and start wait for a node to answer (default 120; a node
#                          restarted on a loaded 2-core machine can take longer)
#   LOCKFREE_CACHE         where the jars are kept (default ~/.cache/lockfree)
#   JAVA_HOME              optional; otherwise `java` from PATH (Java 17+)
#
# Ports: 29092 (broker) and 29093 (controller) for the single node, 29094 + 2(ID-1) and
# 29095 + 2(ID-1) for cluster node ID, when all of them are free; when another process holds one
# (another checkout's broker), `up` says so and uses this checkout's own ports (see
# scripts/lib/service.sh). They are remembered in .services/kafka.ports (kafka-cluster.ports);
# `env` prints the ones in use. A remembered port that another process took since moves like a
# default one; a node whose bind fails because another process took its port meanwhile (two
# checkouts starting at once) is started again on the next free one. Data formatted for other
# controller ports is formatted anew: its topics are test data.
#
# Layout: jars in $LOCKFREE_CACHE/kafka-<version>/libs (resolved once with Maven from a generated
# pom); config, data, logs and the pid file in <repo>/.services/kafka/ (cluster:
# .services/kafka-cluster/node-<ID>/; git-ignored). Only `env` writes to stdout; everything for
# humans goes to stderr.
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
KAFKA_BROKERS="${KAFKA_BROKERS:-1}"
LOG4J_VERSION="2.26.1"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-120}" # seconds to wait for a node to answer
STOP_TIMEOUT=30   # seconds between SIGTERM and SIGKILL

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root=$ROOT
me=kafka.sh
# shellcheck source-path=SCRIPTDIR source=lib/service.sh
. "$ROOT/scripts/lib/service.sh"
CACHE="${LOCKFREE_CACHE:-$HOME/.cache/lockfree}/kafka-$KAFKA_VERSION"
LIBS="$CACHE/libs"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"

[[ $KAFKA_BROKERS =~ ^[1-8]$ ]] || die "KAFKA_BROKERS=$KAFKA_BROKERS: 1 to 8"
[[ $START_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "KAFKA_START_TIMEOUT=$START_TIMEOUT: a number of seconds"
N=$KAFKA_BROKERS
if ((N == 1)); then
  SERVICE=kafka
  BASE="$ROOT/.services/kafka"
  RF=1 ISR=1 HEAP=768m
else
  SERVICE=kafka-cluster
  BASE="$ROOT/.services/kafka-cluster"
  RF=$((N < 3 ? N : 3)) ISR=$((N < 2 ? N : 2)) HEAP=512m
  me="kafka.sh (cluster of $N)"
fi

log() { say "$@"; }

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# node ID: sets the variables of node ID. Its ports are the remembered ones, else those of its
# config (empty before the first up).
node() {
  ID=$1
  if ! [[ $ID =~ ^[0-9]+$ ]] || ((ID < 1 || ID > N)); then die "no node $ID: nodes are 1 to $N"; fi
  if ((N == 1)); then
    SVC=$BASE
    PORT_NAME=broker CONTROLLER_NAME=controller
    PORT_VAR=KAFKA_PORT CONTROLLER_VAR=KAFKA_CONTROLLER_PORT
    DEFAULT_PORT=29092 OFFSET=10
  else
    SVC="$BASE/node-$ID"
    PORT_NAME=broker$ID CONTROLLER_NAME=controller$ID
    PORT_VAR=KAFKA_PORT_$ID CONTROLLER_VAR=KAFKA_CONTROLLER_PORT_$ID
    DEFAULT_PORT=$((29094 + 2 * (ID - 1))) OFFSET=$((12 + 2 * (ID - 1)))
  fi
  DATA="$SVC/data"
  LOGS="$SVC/logs"
  PIDFILE="$SVC/kafka.pid"
  READYFILE="$SVC/kafka.ready" # holds the pid once that process was seen answering
  FORMATTED="$SVC/formatted"   # "<version> <quorum> <cluster id>" of the formatted data
  BROKER_PORT="$(ports_get "$SERVICE" "$PORT_NAME")"
  CTRL_PORT="$(ports_get "$SERVICE" "$CONTROLLER_NAME")"
  # A broker started before ports were remembered: the ports of its config.
  if [[ -z $BROKER_PORT && -f $SVC/server.properties ]]; then
    BROKER_PORT="$(sed -n 's|^listeners=PLAINTEXT://127.0.0.1:\([0-9]*\),.*|\1|p' "$SVC/server.properties")"
    CTRL_PORT="$(sed -n 's|^listeners=.*CONTROLLER://127.0.0.1:\([0-9]*\).*|\1|p' \
      "$SVC/server.properties")"
  fi
}

nodes() { seq 1 "$N"; }

# defaults: every node's default ports.
defaults() {
  if ((N == 1)); then echo 29092 29093; else seq 29094 $((29094 + 2 * N - 1)); fi
}

# choose_ports: no node runs; picks and remembers every node's ports.
choose_ports() {
  local id chosen="" p c
  for id in $(nodes); do
    node "$id"
    # shellcheck disable=SC2046,SC2086 # lists
    p="$(choose_port "$SERVICE" "$PORT_NAME" "$DEFAULT_PORT" "$OFFSET" "$PORT_VAR" "$(defaults)" $chosen)"
    # shellcheck disable=SC2086
    c="$(choose_port "$SERVICE" "$CONTROLLER_NAME" $((DEFAULT_PORT + 1)) $((OFFSET + 1)) \
      "$CONTROLLER_VAR" "$(defaults)" $chosen "$p")"
    chosen="$chosen $p $c"
  done
}

# quorum: what the data is formatted for: the single node's controller port, or the cluster's
# voters.
quorum() {
  local id voters=""
  if ((N == 1)); then
    node 1
    echo "$CTRL_PORT"
    return
  fi
  for id in $(nodes); do
    node "$id"
    voters="$voters${voters:+,}$id@127.0.0.1:$CTRL_PORT"
  done
  echo "$voters"
}


# kafka_pid: prints the pid from the current node's pid file if that process is alive and is it.
kafka_pid() {
  local pid
  [[ -f $PIDFILE ]] || return 1
  pid="$(<"$PIDFILE")"
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  grep -qa 'kafka\.Kafka' "/proc/$pid/cmdline" 2>/dev/null || return 1
  grep -qaF "$SVC/server.properties" "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

# answering: the node's process runs, was seen ready, and its port accepts.
answering() {
  local pid
  pid="$(kafka_pid)" || return 1
  [[ -f $READYFILE && "$(<"$READYFILE")" == "$pid" ]] || return 1
  port_open "$BROKER_PORT"
}

# running_any: some node of this mode runs.
running_any() {
  local id
  for id in $(nodes); do
    node "$id"
    kafka_pid >/dev/null && return 0
  done
  return 1
}

# check_java: Java 17 or newer, or one line saying how to install it.
check_java() {
  local major
  if [[ -n ${JAVA_HOME:-} ]]; then
    [[ -x $JAVA ]] || die "no java in JAVA_HOME=$JAVA_HOME: apt-get install openjdk-17-jre-headless" \
      "(or unset JAVA_HOME)"
  else
    need java openjdk-17-jre-headless
  fi
  major="$("$JAVA" -version 2>&1 | sed -n 's/.*version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -n 1)"
  [[ -n $major ]] && ((major >= 17)) && return 0
  die "$JAVA is Java ${major:-?}, the broker needs 17+: apt-get install openjdk-17-jre-headless"
}

check_version() {
  local major minor
  IFS=. read -r major minor _ <<<"$KAFKA_VERSION"
  [[ $major =~ ^[0-9]+$ && $minor =~ ^[0-9]+$ ]] || die "KAFKA_VERSION=$KAFKA_VERSION is not a version"
  # 4.0.0 dropped old protocol versions (KIP-896), some of them restored in 4.0.1/4.1.0; 3.x
  # needs another config. kafka-go's consumer groups are verified against 4.1.1 and 4.4.0.
  if ((major < 4 || (major == 4 && minor < 1))); then
    die "KAFKA_VERSION=$KAFKA_VERSION: need 4.1 or newer"
  fi
}

# ensure_libs: resolve kafka_2.13 plus a log4j2 backend into $LIBS once (marker = pom checksum).
ensure_libs() {
  local pom="$CACHE/pom.xml" marker="$CACHE/libs.complete" sum
  need mvn maven
  mkdir -p "$CACHE"
  # kafka_2.13 4.x depends on slf4j-api 1.7.36 (check: mvn dependency:tree), so the binding is
  # log4j-slf4j-impl (slf4j 1.7), not log4j-slf4j2-impl. log4j-api/core are pinned to the same
  # version as the binding (kafka-server itself brings an older log4j-core).
  cat >"$pom.tmp" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- generated by scripts/kafka.sh: runtime jars of an Apache Kafka broker -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.lockfree</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-api</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
  mv "$pom.tmp" "$pom"
  sum="$(sha256sum "$pom" | cut -d' ' -f1)"
  if [[ -f $marker && "$(<"$marker")" == "$sum" && -d $LIBS ]]; then
    return 0
  fi
  log "fetching Kafka $KAFKA_VERSION jars with Maven into $LIBS (first run only)"
  rm -rf "$LIBS.tmp" "$marker"
  # (Maven 3.8 prints colour resets even with -B -q; sed drops them.)
  (cd "$CACHE" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$LIBS.tmp" 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^$/d' >&2) \
    || die "mvn dependency:copy-dependencies failed"
  [[ -f "$LIBS.tmp/kafka_2.13-$KAFKA_VERSION.jar" ]] \
    || die "Maven finished but $LIBS.tmp has no kafka_2.13-$KAFKA_VERSION.jar"
  rm -rf "$LIBS"
  mv "$LIBS.tmp" "$LIBS"
  echo "$sum" >"$marker"
}

# write_config: the current node's server.properties and log configs.
write_config() {
  local quorum_line
  mkdir -p "$DATA" "$LOGS"
  if ((N == 1)); then
    quorum_line="controller.quorum.bootstrap.servers=127.0.0.1:$CTRL_PORT"
  else
    quorum_line="controller.quorum.voters=$(quorum)"
    node "$ID"
  fi
  cat >"$SVC/server.properties.tmp" <<EOF
# generated by scripts/kafka.sh — node $ID of $N (KRaft; broker and controller in one process)
process.roles=broker,controller
node.id=$ID
$quorum_line
listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT,CONTROLLER://127.0.0.1:$CTRL_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT,CONTROLLER://127.0.0.1:$CTRL_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA

# replication factor $RF (min(3, nodes)), min.insync.replicas $ISR; internal topics have few
# partitions
offsets.topic.replication.factor=$RF
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=$RF
transaction.state.log.min.isr=$ISR
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=$RF
share.coordinator.state.topic.min.isr=$ISR
share.coordinator.state.topic.num.partitions=1
default.replication.factor=$RF
min.insync.replicas=$ISR
num.partitions=1
auto.create.topics.enable=true
delete.topic.enable=true

# consumer groups: no join delay for the first member; allow short session timeouts in tests
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000

# small machine (2 cores)
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=4

# test data is short-lived: small segments, one day of retention, deleted topics' files removed
# after 5 s (log.flush.* left at defaults)
log.segment.bytes=16777216
log.retention.hours=24
log.retention.check.interval.ms=60000
file.delete.delay.ms=5000
EOF
  mv "$SVC/server.properties.tmp" "$SVC/server.properties"

  # The broker logs to $LOGS/server.log only (nothing on the console): INFO for the broker, WARN
  # for the noisiest loggers. kafka.sh waits for the "Kafka Server started" INFO line.
  cat >"$SVC/log4j2.properties" <<'EOF'
# generated by scripts/kafka.sh
status = warn
name = lockfree-kafka
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.filePattern = ${sys:kafka.logs.dir}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 10MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = info
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.statechange.name = state.change.logger
logger.statechange.level = warn
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = warn
logger.storage.name = org.apache.kafka.storage.internals.log
logger.storage.level = warn
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = warn
EOF

  # The storage tool logs WARN and above to stderr.
  cat >"$SVC/tools-log4j2.properties" <<'EOF'
# generated by scripts/kafka.sh
status = warn
name = lockfree-kafka-tools
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = STDERR
EOF
}

storage_tool() {
  "$JAVA" -Dlog4j2.configurationFile="$SVC/tools-log4j2.properties" -cp "$LIBS/*" \
    kafka.tools.StorageTool "$@"
}

# random_uuid: a new cluster id as `kafka.tools.StorageTool random-uuid` prints it (16 random bytes
# in unpadded URL-safe base64, not starting with "-"), without starting a JVM: on a loaded 2-core
# machine each JVM start costs seconds.
random_uuid() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ ${#id} == 22 && $id != -* ]] && break
  done
  echo "$id"
}

# cluster_id: one id for every node of this mode, made once.
cluster_id() {
  local f="$BASE/cluster.id" id
  if ((N > 1)) && [[ -s $f ]]; then
    cat "$f"
    return
  fi
  id="$(random_uuid)"
  ((N == 1)) || echo "$id" >"$f"
  echo "$id"
}

# format_storage: format the current node's KRaft data once: the single node as a standalone
# dynamic quorum, a cluster's nodes with the static quorum of all of them.
format_storage() {
  local fver fquorum fid id want
  want="$(quorum)"
  node "$ID"
  if [[ -f $FORMATTED && -f $DATA/meta.properties ]]; then
    read -r fver fquorum fid <"$FORMATTED"
    if [[ $fquorum != "$want" ]]; then
      # The controllers' addresses are part of the KRaft quorum in the data.
      log "data in $DATA was formatted for controller(s) $fquorum; formatting it anew for $want" \
        "(its topics are dropped)"
      rm -rf "$DATA" "$FORMATTED"
      mkdir -p "$DATA"
      format_storage
      return 0
    fi
    if [[ "$(printf '%s\n%s\n' "$fver" "$KAFKA_VERSION" | sort -V | head -1)" != "$fver" ]]; then
      die "data in $DATA was written by Kafka $fver; $KAFKA_VERSION cannot downgrade it;" \
        "run: scripts/kafka.sh down --purge"
    fi
    return 0
  fi
  if [[ -f $DATA/meta.properties ]]; then
    fid="$(sed -n 's/^cluster\.id=//p' "$DATA/meta.properties")"
    echo "$KAFKA_VERSION $want $fid" >"$FORMATTED"
    return 0
  fi
  id="$(cluster_id)"
  log "formatting $DATA (cluster id $id)"
  local standalone=()
  ((N == 1)) && standalone=(--standalone)
  storage_tool format "${standalone[@]}" -t "$id" -c "$SVC/server.properties" --ignore-formatted \
    >"$SVC/format.log" 2>&1 || {
    cat "$SVC/format.log" >&2
    die "kafka.tools.StorageTool format failed"
  }
  echo "$KAFKA_VERSION $want $id" >"$FORMATTED"
}

# ready PID: the current node's process PID answers: its port accepts and server.log says the
# server started (this run's log only: it was moved aside before the start).
ready() {
  port_open "$BROKER_PORT" && grep -qs 'Kafka Server started' "$LOGS/server.log" || return 1
  echo "$1" >"$READYFILE"
}

# bind_failed_node: the current node's logs of this run say a port it binds was taken.
bind_failed_node() { bind_failed "$LOGS/server.log" || bind_failed "$LOGS/kafka.out"; }

# wait_nodes [--retry] ID:PID…: waits until every node answers (a cluster's nodes answer once a
# quorum of controllers is up). A node that exits during startup ends the script, or, with
# --retry and when its logs say a port it binds was taken, is listed in BIND_FAILED for the caller
# to start again on other ports. A node that does not answer within START_TIMEOUT ends it too.
wait_nodes() {
  local retry=false deadline=$((SECONDS + START_TIMEOUT)) left=() next n pid
  if [[ ${1:-} == --retry ]]; then retry=true; shift; fi
  left=("$@")
  BIND_FAILED=""
  while ((${#left[@]} > 0)); do
    next=()
    for n in "${left[@]}"; do
      node "${n%%:*}"
      pid=${n#*:}
      if ready "$pid"; then continue; fi
      if ! kill -0 "$pid" 2>/dev/null; then
        rm -f "$PIDFILE"
        if $retry && bind_failed_node; then
          BIND_FAILED="$BIND_FAILED $ID"
          continue
        fi
        log "error: node $ID (pid $pid) exited during startup"
        tail_logs
        exit 1
      fi
      next+=("$n")
    done
    # The others are stopped and started again anyway.
    [[ -z $BIND_FAILED ]] || return 0
    left=("${next[@]}")
    ((${#left[@]} > 0)) || break
    if ((SECONDS >= deadline)); then
      node "${left[0]%%:*}"
      log "error: node $ID (pid ${left[0]#*:}) did not answer on 127.0.0.1:$BROKER_PORT within" \
        "${START_TIMEOUT}s; it is left running (stop it with: scripts/kafka.sh down)"
      tail_logs
      exit 1
    fi
    sleep 0.5
  done
}

# all_ports: every node's remembered ports.
all_ports() {
  local id
  for id in $(nodes); do
    node "$id"
    echo "$BROKER_PORT $CTRL_PORT"
  done
}

# move_taken_ports ID: node ID's ports that its log says were taken when it bound (both, when it
# does not say which) move to free ones.
move_taken_ports() {
  local id=$1 taken
  node "$id"
  taken=" $(cat "$LOGS/server.log" "$LOGS/kafka.out" 2>/dev/null |
    sed -n 's/.*failed to bind to [^ ]*:\([0-9][0-9]*\).*/\1/p' | tr '\n' ' ')"
  [[ $taken == " " ]] && taken=" $BROKER_PORT $CTRL_PORT "
  if [[ $taken == *" $BROKER_PORT "* ]]; then
    # shellcheck disable=SC2046 # a list
    move_port "$SERVICE" "$PORT_NAME" "$OFFSET" "$PORT_VAR" "$BROKER_PORT" $(all_ports) >/dev/null
    node "$id"
  fi
  if [[ $taken == *" $CTRL_PORT "* ]]; then
    # shellcheck disable=SC2046 # a list
    move_port "$SERVICE" "$CONTROLLER_NAME" $((OFFSET + 1)) "$CONTROLLER_VAR" "$CTRL_PORT" $(all_ports) >/dev/null
    node "$id"
  fi
}

tail_logs() {
  local f
  for f in "$LOGS/kafka.out" "$LOGS/server.log"; do
    [[ -s $f ]] || continue
    log "--- last lines of $f"
    tail -n 40 "$f" >&2
  done
}

# launch: starts the current node's JVM (configured and formatted) and prints its pid.
launch() {
  local pid f
  # Keep the previous run's logs for one more run; wait_nodes reads only this run's server.log.
  for f in server.log kafka.out gc.log; do
    if [[ -f $LOGS/$f ]]; then mv -f "$LOGS/$f" "$LOGS/$f.previous"; fi
  done
  rm -f "$LOGS"/server.log.[0-9]* "$PIDFILE" "$READYFILE"
  log "starting node $ID (Kafka $KAFKA_VERSION) on 127.0.0.1:$BROKER_PORT (logs in $LOGS)"
  # setsid+nohup: the node outlives this shell and its terminal; both exec, so $! is java.
  # 9>&-: the node must not inherit (and so hold forever) the lock taken by lock().
  setsid nohup "$JAVA" -Xms256m -Xmx$HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Xlog:gc*:file="$LOGS/gc.log":time,tags:filecount=2,filesize=10M \
    -Dlog4j2.configurationFile="$SVC/log4j2.properties" -Dkafka.logs.dir="$LOGS" \
    -cp "$LIBS/*" kafka.Kafka "$SVC/server.properties" \
    >"$LOGS/kafka.out" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$PIDFILE"
  echo "$KAFKA_VERSION" >"$SVC/kafka.version"
}

# check_ports: the remembered ports of the current node are free (another process may have taken
# them while it was stopped).
check_ports() {
  local p
  for p in "$BROKER_PORT" "$CTRL_PORT"; do
    [[ -n $p ]] || die "node $ID has no ports yet: run scripts/kafka.sh up"
    if port_taken "$p"; then
      die "port $p of node $ID is taken$(port_holder "$p"); stop the other" \
        "nodes (scripts/kafka.sh down) and run up to choose other ports"
    fi
  done
}

cmd_up() {
  local id pid started=$SECONDS pids=() retry="" attempt
  check_version
  check_java
  lock
  if ! running_any; then
    choose_ports
    # No node ran: each may move to other ports if its bind fails.
    retry=--retry
  fi
  ensure_libs
  for attempt in 1 2 3 4 5; do
    pids=()
    for id in $(nodes); do
      node "$id"
      if answering; then
        continue
      fi
      if pid="$(kafka_pid)"; then
        # Started earlier but not (yet) seen answering: wait for it instead of starting a second one.
        log "node $id (pid $pid) is starting; waiting"
        pids+=("$id:$pid")
        continue
      fi
      check_ports
      write_config
      format_storage
      launch
      pids+=("$id:$(<"$PIDFILE")")
    done
    if ((${#pids[@]} == 0)); then
      node 1
      log "already running (127.0.0.1:$BROKER_PORT$( ((N > 1)) && echo " and $((N - 1)) more"))"
      return 0
    fi
    ((attempt < 5)) || retry=""
    # A cluster's nodes answer once a quorum of controllers is up: start them all, then wait.
    wait_nodes $retry "${pids[@]}"
    [[ -z $BIND_FAILED ]] && break
    # Another process took a port meanwhile: stop this attempt's nodes (a cluster's quorum names
    # every controller), move the taken ports, start again.
    # shellcheck disable=SC2046 # a list of ids
    stop_nodes KILL $(nodes)
    for id in $BIND_FAILED; do
      move_taken_ports "$id"
    done
  done
  log "ready: $(bootstrap) ($((SECONDS - started)) s)"
}

# stop_nodes SIGNAL ID…: sends SIGNAL to the nodes at once (SIGTERM: a controlled shutdown, which
# a cluster's last nodes cannot finish without a quorum), SIGKILL to those still running after
# STOP_TIMEOUT, and waits until they are gone.
stop_nodes() {
  local signal=$1 id pid pids=() deadline
  shift
  for id in "$@"; do
    node "$id"
    if pid="$(kafka_pid)"; then
      log "stopping node $id (pid $pid, SIG$signal)"
      kill "-$signal" "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$READYFILE"
  done
  deadline=$((SECONDS + STOP_TIMEOUT))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "pid $pid still running after ${STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  done
  for id in "$@"; do
    node "$id"
    rm -f "$PIDFILE"
  done
}

cmd_down() {
  local purge=false
  case "${1:-}" in
  "") ;;
  --purge) purge=true ;;
  *) die "usage: kafka.sh down [--purge]" ;;
  esac
  lock
  if running_any; then
    # Data about to be deleted needs no controlled shutdown.
    # shellcheck disable=SC2046 # a list of ids
    if $purge; then stop_nodes KILL $(nodes); else stop_nodes TERM $(nodes); fi
    log "stopped"
  else
    log "not running"
  fi
  if $purge; then
    log "deleting $BASE"
    rm -rf "$BASE" "$(ports_file "$SERVICE")"
  fi
}

cmd_kill() {
  local pid
  node "${1:?kill ID}"
  lock
  pid="$(kafka_pid)" || die "node $ID is not running"
  log "SIGKILL to node $ID (pid $pid)"
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$PIDFILE" "$READYFILE"
}

cmd_stop() {
  node "${1:?stop ID}"
  lock
  stop_nodes TERM "$ID"
}

cmd_start() {
  local pid
  node "${1:?start ID}"
  check_java
  lock
  if answering; then
    return 0
  fi
  if ! pid="$(kafka_pid)"; then
    [[ -f $FORMATTED ]] || die "node $ID was never started: run scripts/kafka.sh up"
    check_ports
    launch
    pid="$(<"$PIDFILE")"
  fi
  wait_nodes "$ID:$pid"
  node "${1:?start ID}"
  log "node $ID ready on 127.0.0.1:$BROKER_PORT"
}

# bootstrap: every node's PLAINTEXT address, comma-separated.
bootstrap() {
  local id list=""
  for id in $(nodes); do
    node "$id"
    [[ -n $BROKER_PORT ]] || die "not set up in $ROOT: run$( ((N > 1)) && echo " KAFKA_BROKERS=$N") scripts/kafka.sh up"
    list="$list${list:+,}127.0.0.1:$BROKER_PORT"
  done
  echo "$list"
}

cmd_env() {
  local list
  list="$(bootstrap)"
  if ((N == 1)); then
    echo "export TEST_KAFKA_BROKERS=$list"
    return
  fi
  echo "export TEST_KAFKA_CLUSTER_BROKERS=$list"
  printf 'export TEST_KAFKA_CLUSTER_CTL=%q\n' "KAFKA_BROKERS=$N $(printf %q "$ROOT/scripts/kafka.sh")"
}

cmd_status() {
  local id pid ok=0
  for id in $(nodes); do
    node "$id"
    if answering; then
      log "node $id running (pid $(<"$PIDFILE"), Kafka $(cat "$SVC/kafka.version" 2>/dev/null || echo '?')," \
        "127.0.0.1:$BROKER_PORT)"
    elif pid="$(kafka_pid)"; then
      log "node $id starting or not answering (pid $pid)"
      ok=1
    else
      log "node $id not running"
      ok=1
    fi
  done
  return $ok
}

# lock: serialise the commands of concurrent callers (e.g. parallel `make test`).
lock() { service_lock "$SERVICE"; }

case "${1:-}" in
up) cmd_up ;;
down)
  shift
  cmd_down "$@"
  ;;
env) cmd_env ;;
status) cmd_status ;;
kill) cmd_kill "${2:-}" ;;
stop) cmd_stop "${2:-}" ;;
start) cmd_start "${2:-}" ;;
*)
  log "usage: [KAFKA_BROKERS=N] scripts/kafka.sh up | down [--purge] | env | status | kill ID | stop ID | start ID"
  exit 2
  ;;
esac
