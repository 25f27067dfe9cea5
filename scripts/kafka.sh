#!/usr/bin/env bash
# scripts/kafka.sh — a real single-node Apache Kafka 4.x broker (KRaft, broker+controller in one
# JVM) for tests and demos, without Docker.
#
#   scripts/kafka.sh up            start the broker (idempotent) and wait until it answers
#   scripts/kafka.sh down [--purge] stop it (SIGTERM, SIGKILL after 30 s); --purge deletes its data
#   scripts/kafka.sh env           print `export TEST_KAFKA_BROKERS=…` (for eval)
#   scripts/kafka.sh status        exit 0 if the broker runs and answers
#
# Environment:
#   KAFKA_VERSION          org.apache.kafka:kafka_2.13 version, ≥ 4.1 (default 4.4.0)
#   KAFKA_PORT             PLAINTEXT listener on 127.0.0.1 (default: see Ports)
#   KAFKA_CONTROLLER_PORT  KRaft controller listener on 127.0.0.1 (default: see Ports)
#   LOCKFREE_CACHE         where the jars are kept (default ~/.cache/lockfree)
#   JAVA_HOME              optional; otherwise `java` from PATH (Java 17+)
#
# Ports: 59092 (broker) and 59093 (controller) when both are free; when another process holds
# one (another checkout's broker), `up` says so and uses this checkout's own ports (see
# scripts/lib/service.sh). They are remembered in .services/kafka.ports; `env` prints the ones in
# use. A broker whose remembered controller port was taken meanwhile is formatted anew: its
# topics are test data.
#
# Layout: jars in $LOCKFREE_CACHE/kafka-<version>/libs (resolved once with Maven from a generated
# pom); config, data, logs and the pid file in <repo>/.services/kafka/ (git-ignored).
# Only `env` writes to stdout; everything for humans goes to stderr.
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
# Ports asked for; KAFKA_PORT and KAFKA_CONTROLLER_PORT below are the ports in use.
want_port="${KAFKA_PORT:-}"
want_controller_port="${KAFKA_CONTROLLER_PORT:-}"
LOG4J_VERSION="2.26.1"
START_TIMEOUT=120 # seconds to wait for the broker to answer
STOP_TIMEOUT=30   # seconds between SIGTERM and SIGKILL

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root=$ROOT
me=kafka.sh
# shellcheck source-path=SCRIPTDIR source=lib/service.sh
. "$ROOT/scripts/lib/service.sh"
SVC="$ROOT/.services/kafka"
DATA="$SVC/data"
LOGS="$SVC/logs"
PIDFILE="$SVC/kafka.pid"
READYFILE="$SVC/kafka.ready"  # holds the pid once that process was seen answering
FORMATTED="$SVC/formatted"    # "<version> <controller port> <cluster id>" of the formatted data
CACHE="${LOCKFREE_CACHE:-$HOME/.cache/lockfree}/kafka-$KAFKA_VERSION"
LIBS="$CACHE/libs"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"

log() { say "$@"; }

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# config_ports: sets KAFKA_PORT and KAFKA_CONTROLLER_PORT from the config the broker was started
# with, if any.
config_ports() {
  [[ -f $SVC/server.properties ]] || return 1
  KAFKA_PORT="$(sed -n 's|^listeners=PLAINTEXT://127.0.0.1:\([0-9]*\),.*|\1|p' "$SVC/server.properties")"
  KAFKA_CONTROLLER_PORT="$(sed -n 's|^listeners=.*CONTROLLER://127.0.0.1:\([0-9]*\).*|\1|p' \
    "$SVC/server.properties")"
  [[ -n $KAFKA_PORT && -n $KAFKA_CONTROLLER_PORT ]]
}

# choose_ports: the broker is not running; sets KAFKA_PORT and KAFKA_CONTROLLER_PORT for it.
choose_ports() {
  local broker controller
  KAFKA_PORT=$want_port KAFKA_CONTROLLER_PORT=$want_controller_port
  broker="$(choose_port kafka broker 59092 10 KAFKA_PORT "59092 59093")"
  controller="$(choose_port kafka controller 59093 11 KAFKA_CONTROLLER_PORT "59092 59093" "$broker")"
  KAFKA_PORT=$broker
  KAFKA_CONTROLLER_PORT=$controller
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

# kafka_pid: prints the pid from the pid file if that process is alive and is our broker.
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

# answering: the broker process from the pid file runs, was seen ready, and its port accepts.
answering() {
  local pid
  pid="$(kafka_pid)" || return 1
  [[ -f $READYFILE && "$(<"$READYFILE")" == "$pid" ]] || return 1
  port_open "$KAFKA_PORT"
}

# lock: serialise up/down of concurrent callers (e.g. parallel `make test`), when flock exists.
lock() { service_lock kafka; }

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

write_config() {
  mkdir -p "$DATA" "$LOGS"
  cat >"$SVC/server.properties.tmp" <<EOF
# generated by scripts/kafka.sh — single-node KRaft (broker and controller in one process)
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA

# one node: every internal topic has replication factor 1 and few partitions
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
default.replication.factor=1
min.insync.replicas=1
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

# format_storage: format the KRaft data dir once (a standalone dynamic quorum of this node).
format_storage() {
  local fver fport fid id
  if [[ -f $FORMATTED && -f $DATA/meta.properties ]]; then
    read -r fver fport fid <"$FORMATTED"
    if [[ $fport != "$KAFKA_CONTROLLER_PORT" ]]; then
      # The controller's address is part of the KRaft quorum in the data.
      log "data in $DATA was formatted for controller port $fport; formatting it anew for" \
        "$KAFKA_CONTROLLER_PORT (its topics are dropped)"
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
    echo "$KAFKA_VERSION $KAFKA_CONTROLLER_PORT $fid" >"$FORMATTED"
    return 0
  fi
  id="$(storage_tool random-uuid | tail -1)"
  [[ -n $id ]] || die "kafka.tools.StorageTool random-uuid printed nothing"
  log "formatting $DATA (cluster id $id)"
  storage_tool format --standalone -t "$id" -c "$SVC/server.properties" --ignore-formatted >&2 \
    || die "kafka.tools.StorageTool format failed"
  echo "$KAFKA_VERSION $KAFKA_CONTROLLER_PORT $id" >"$FORMATTED"
}

# wait_ready PID: until the port accepts and server.log says the server started (this run's log
# only: it was moved aside before the start), or the process dies, or the timeout expires.
wait_ready() {
  local pid="$1" deadline=$((SECONDS + START_TIMEOUT))
  while ((SECONDS < deadline)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "error: the broker (pid $pid) exited during startup"
      tail_logs
      rm -f "$PIDFILE"
      exit 1
    fi
    if port_open "$KAFKA_PORT" && grep -qs 'Kafka Server started' "$LOGS/server.log"; then
      echo "$pid" >"$READYFILE"
      return 0
    fi
    sleep 0.5
  done
  log "error: the broker (pid $pid) did not answer on 127.0.0.1:$KAFKA_PORT within ${START_TIMEOUT}s;" \
    "it is left running (stop it with: scripts/kafka.sh down)"
  tail_logs
  exit 1
}

tail_logs() {
  local f
  for f in "$LOGS/kafka.out" "$LOGS/server.log"; do
    [[ -s $f ]] || continue
    log "--- last lines of $f"
    tail -n 40 "$f" >&2
  done
}

cmd_up() {
  local pid started=$SECONDS
  check_version
  check_java
  lock
  config_ports || true
  if answering; then
    log "already running (pid $(<"$PIDFILE"), 127.0.0.1:$KAFKA_PORT)"
    local running
    running="$(cat "$SVC/kafka.version" 2>/dev/null || true)"
    if [[ -n $running && $running != "$KAFKA_VERSION" ]]; then
      log "note: it runs Kafka $running, not $KAFKA_VERSION (down, then up, to switch)"
    fi
    return 0
  fi
  if pid="$(kafka_pid)"; then
    # Started earlier but not (yet) seen answering: wait for it instead of starting a second one.
    log "broker pid $pid is starting; waiting"
    wait_ready "$pid"
    log "ready on 127.0.0.1:$KAFKA_PORT (pid $pid)"
    return 0
  fi
  rm -f "$PIDFILE" "$READYFILE"
  choose_ports

  ensure_libs
  write_config
  format_storage

  # Keep the previous run's logs for one more run; wait_ready reads only this run's server.log.
  local f
  for f in server.log kafka.out gc.log; do
    if [[ -f $LOGS/$f ]]; then mv -f "$LOGS/$f" "$LOGS/$f.previous"; fi
  done
  rm -f "$LOGS"/server.log.[0-9]*

  log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$KAFKA_PORT (logs in $LOGS)"
  # setsid+nohup: the broker outlives this shell and its terminal; both exec, so $! is java.
  # 9>&-: the broker must not inherit (and so hold forever) the lock taken by lock().
  setsid nohup "$JAVA" -Xms256m -Xmx768m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Xlog:gc*:file="$LOGS/gc.log":time,tags:filecount=2,filesize=10M \
    -Dlog4j2.configurationFile="$SVC/log4j2.properties" -Dkafka.logs.dir="$LOGS" \
    -cp "$LIBS/*" kafka.Kafka "$SVC/server.properties" \
    >"$LOGS/kafka.out" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$PIDFILE"
  echo "$KAFKA_VERSION" >"$SVC/kafka.version"
  wait_ready "$pid"
  log "ready on 127.0.0.1:$KAFKA_PORT (pid $pid, $((SECONDS - started)) s)"
}

cmd_down() {
  local purge=false pid deadline
  case "${1:-}" in
  "") ;;
  --purge) purge=true ;;
  *) die "usage: kafka.sh down [--purge]" ;;
  esac
  lock
  if pid="$(kafka_pid)"; then
    log "stopping the broker (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "still running after ${STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    log "stopped"
  else
    log "not running"
  fi
  rm -f "$PIDFILE" "$READYFILE"
  if $purge; then
    log "deleting $SVC"
    rm -rf "$SVC" "$(ports_file kafka)"
  fi
}

# cmd_env: the running broker's port, else the remembered one.
cmd_env() {
  if ! { kafka_pid >/dev/null && config_ports; }; then
    KAFKA_PORT="$(ports_get kafka broker)"
    [[ -n $KAFKA_PORT ]] || die "not set up in $ROOT: run scripts/kafka.sh up"
  fi
  echo "export TEST_KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
}

cmd_status() {
  local pid
  config_ports || true
  if answering; then
    log "running (pid $(<"$PIDFILE"), Kafka $(cat "$SVC/kafka.version" 2>/dev/null || echo '?')," \
      "127.0.0.1:$KAFKA_PORT)"
    return 0
  fi
  if pid="$(kafka_pid)"; then
    log "starting or not answering (pid $pid)"
  else
    log "not running"
  fi
  return 1
}

case "${1:-}" in
up) cmd_up ;;
down) shift; cmd_down "$@" ;;
env) cmd_env ;;
status) cmd_status ;;
*)
  log "usage: scripts/kafka.sh up | down [--purge] | env | status"
  exit 2
  ;;
esac
