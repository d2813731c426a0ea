#!/usr/bin/env bash
# scripts/kafka.sh: fetch and run a real single-node Apache Kafka broker
# (KRaft mode, one process that is both broker and controller) for tests.
#
# The broker comes from Maven Central as jars (org.apache.kafka:kafka_2.13
# and its runtime dependencies, listed in scripts/kafka-broker/pom.xml),
# fetched with `mvn` into a cache outside the repo, then run with plain java.
#
# Usage: scripts/kafka.sh fetch|start|stop|restart|resume|kill|status
#   fetch   download the jars (no-op when the cache is already complete) and
#           print the directory holding them
#   start   fetch if needed, start a fresh broker (data wiped, storage
#           formatted) on free 127.0.0.1 ports, wait until it answers, print
#           its bootstrap address ("127.0.0.1:PORT") as the last line of
#           stdout (everything else goes to stderr) and write it to
#           $KORD_KAFKA_DIR/bootstrap. If a broker started by this script is
#           already running, just print its address.
#   stop    stop that broker (SIGTERM, SIGKILL after a grace period); exit 0
#           when nothing is running. Config and data stay until the next start.
#   restart stop the broker as `stop` does (if it runs), start it again with
#           the same config, ports and data (no wipe, no format), wait until it
#           answers and print its bootstrap address like start. For tests that
#           stop and start the broker mid-run.
#   resume  start a stopped broker from its existing config and data (same
#           ports), like the second half of restart; print its address as
#           start does; if it already runs, just print its address.
#   kill    SIGKILL the broker (a crash): data stays, `resume` brings it back
#   status  print the bootstrap address if running, exit 1 otherwise
#
# Listeners (all on 127.0.0.1; the ports are chosen free at start and kept
# by restart/resume; write_props lists them in one place):
#   PLAINTEXT   the normal bootstrap address, printed by start
#   PROXIED     for a fault-injecting proxy (internal/faultproxy): the broker
#               binds BACKEND but advertises FRONT, where nothing listens until
#               a test runs a proxy there forwarding to BACKEND. A client that
#               bootstraps at FRONT learns FRONT as the broker's address from
#               every metadata response, so all its traffic goes through the
#               proxy. $KORD_KAFKA_DIR/proxy holds "127.0.0.1:FRONT
#               127.0.0.1:BACKEND" (one line) while the broker runs.
#   CONTROLLER  the KRaft controller, not advertised to clients
#
# Environment (all optional):
#   KORD_KAFKA_VERSION        Kafka version to fetch (default 4.4.0)
#   KORD_CACHE                cache root (default $HOME/.cache/kord); jars go
#                             to $KORD_CACHE/kafka-<version>/libs
#   KORD_KAFKA_DIR            state dir: config, data, log, pid, ports,
#                             bootstrap, proxy (default /tmp/kord-kafka); its
#                             data is wiped on every start (not on restart or
#                             resume)
#   KORD_KAFKA_START_TIMEOUT  seconds to wait for the broker to answer (90)
#   KORD_KAFKA_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL (20)
#   KORD_KAFKA_HEAP_OPTS      broker heap flags (default "-Xmx1g -Xms512m")
#   KORD_KAFKA_LOG_LEVEL      broker log level (default INFO)
#   JAVA_HOME                 java to use (default: java on PATH)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CONF_DIR=$HERE/kafka-broker
VERSION=${KORD_KAFKA_VERSION:-4.4.0}
CACHE_ROOT=${KORD_CACHE:-${HOME:-/tmp}/.cache/kord}
VER_DIR=$CACHE_ROOT/kafka-$VERSION
LIBS=$VER_DIR/libs
STATE=$(realpath -m "${KORD_KAFKA_DIR:-/tmp/kord-kafka}")
START_TIMEOUT=${KORD_KAFKA_START_TIMEOUT:-90}
STOP_TIMEOUT=${KORD_KAFKA_STOP_TIMEOUT:-20}
HEAP_OPTS=${KORD_KAFKA_HEAP_OPTS:--Xmx1g -Xms512m}
LOG_LEVEL=${KORD_KAFKA_LOG_LEVEL:-INFO}
JAVA=java
[[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]] && JAVA=$JAVA_HOME/bin/java

# Files in the state dir. Only these are ever deleted, never the dir itself,
# so a KORD_KAFKA_DIR pointing somewhere precious loses nothing else.
PROPS=$STATE/server.properties
DATA=$STATE/data
LOG=$STATE/broker.log
PIDFILE=$STATE/broker.pid
PORTS=$STATE/ports         # the ports of this config, kept by stop/kill
BOOTSTRAP=$STATE/bootstrap # written when ready, removed by stop/kill
PROXYFILE=$STATE/proxy     # likewise: "127.0.0.1:FRONT 127.0.0.1:BACKEND"

log() { echo "kafka.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# JVM for short-lived tool runs (format, readiness probe): start fast, quiet logs.
TOOL=("$JAVA" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m
    -Dlog4j2.configurationFile="$CONF_DIR/log4j2.properties" -Dkord.log.level=WARN
    -cp "$LIBS/*")

# ---------------------------------------------------------------- fetch

# The cache is complete when its stamp matches this version and pom.xml,
# so editing the pom refetches.
stamp() { echo "kafka $VERSION pom $(sha256sum "$CONF_DIR/pom.xml" | cut -d' ' -f1)"; }
fetched() { [[ -f $LIBS/.complete && "$(cat "$LIBS/.complete")" == "$(stamp)" ]]; }

fetch() {
    fetched && return 0
    command -v mvn >/dev/null || die "mvn (Maven) is needed to fetch Kafka"
    mkdir -p "$VER_DIR"
    # One fetch at a time per version; a concurrent caller waits, then
    # finds the cache complete.
    exec 8>"$VER_DIR/.fetch.lock"
    flock 8
    if ! fetched; then
        log "fetching Kafka $VERSION jars into $LIBS"
        local tmp t0=$SECONDS
        tmp=$(mktemp -d "$VER_DIR/libs.tmp.XXXXXX")
        if ! mvn -B -q --no-transfer-progress -f "$CONF_DIR/pom.xml" \
            dependency:copy-dependencies -DincludeScope=runtime \
            -Dkafka.version="$VERSION" -DoutputDirectory="$tmp" \
            >"$VER_DIR/mvn.log" 2>&1; then
            tail -n 40 "$VER_DIR/mvn.log" >&2
            rm -rf "$tmp"
            die "fetching Kafka $VERSION failed (full output: $VER_DIR/mvn.log)"
        fi
        [[ -f $tmp/kafka_2.13-$VERSION.jar ]] || { rm -rf "$tmp"; die "kafka_2.13-$VERSION.jar missing after fetch"; }
        stamp >"$tmp/.complete"
        rm -rf "$LIBS"
        mv "$tmp" "$LIBS"
        log "fetched $(find "$LIBS" -name '*.jar' | wc -l) jars in $((SECONDS - t0))s"
    fi
    exec 8>&-
}

# ---------------------------------------------------------------- process

# Pid of the broker this script started from this state dir, if it runs.
# The command line is checked so a recycled pid is never mistaken for it.
broker_pid() {
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "kafka.Kafka $PROPS" || return 1
    echo "$pid"
}

# Serialise start/stop on the same state dir.
lock_state() {
    mkdir -p "$STATE"
    exec 9>"$STATE/.lock"
    flock 9
}

# A TCP port on 127.0.0.1 that nothing uses now. Taken below the kernel's
# ephemeral range (32768+) so an outgoing connection can't grab it before the
# broker binds it; a lost race still shows up as a bind error and is retried.
free_port() {
    local used port i
    used=" $(ss -Htan 2>/dev/null | awk '{n=split($4,a,":"); printf "%s ", a[n]}') "
    for ((i = 0; i < 200; i++)); do
        port=$((20000 + RANDOM % 12000))
        [[ $used == *" $port "* || " $* " == *" $port "* ]] && continue
        # Also refuse a port something answers on (covers a missing `ss`).
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
        echo "$port"
        return 0
    done
    die "no free TCP port found"
}

# Kafka cluster ids are 16 random bytes in unpadded base64url; Kafka itself
# avoids ids starting with '-' because they look like a CLI flag.
cluster_id() {
    local id
    while id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'); [[ $id == -* ]]; do :; done
    echo "$id"
}

# Ports of the broker's listeners, set by new_ports or load_ports.
PORT='' CPORT='' FRONT='' BACKEND=''

new_ports() {
    PORT=$(free_port)
    CPORT=$(free_port "$PORT")
    FRONT=$(free_port "$PORT" "$CPORT")
    BACKEND=$(free_port "$PORT" "$CPORT" "$FRONT")
    printf 'port=%s\ncport=%s\nfront=%s\nbackend=%s\n' "$PORT" "$CPORT" "$FRONT" "$BACKEND" >"$PORTS"
}

load_ports() {
    local k v
    PORT='' CPORT='' FRONT='' BACKEND=''
    [[ -f $PORTS ]] || return 1
    while IFS='=' read -r k v; do
        [[ $v =~ ^[0-9]+$ ]] || continue
        case $k in
        port) PORT=$v ;; cport) CPORT=$v ;; front) FRONT=$v ;; backend) BACKEND=$v ;;
        esac
    done <"$PORTS"
    [[ -n $PORT && -n $CPORT && -n $FRONT && -n $BACKEND ]]
}

write_props() {
    # The one place that lists the listeners: name, security protocol, the
    # port it binds, the port it is advertised with ("-": not advertised).
    local rows=(
        "PLAINTEXT  PLAINTEXT $PORT    $PORT"
        "PROXIED    PLAINTEXT $BACKEND $FRONT"
        "CONTROLLER PLAINTEXT $CPORT   -"
    )
    local row name proto bind adv listeners=() advertised=() protomap=()
    for row in "${rows[@]}"; do
        read -r name proto bind adv <<<"$row"
        listeners+=("$name://127.0.0.1:$bind")
        [[ $adv == - ]] || advertised+=("$name://127.0.0.1:$adv")
        protomap+=("$name:$proto")
    done
    local IFS=,
    cat >"$PROPS" <<EOF
# Written by scripts/kafka.sh: single-node KRaft broker for tests.
process.roles=broker,controller
node.id=1
# Static one-voter quorum: no --standalone / dynamic quorum formatting needed.
controller.quorum.voters=1@127.0.0.1:$CPORT
controller.listener.names=CONTROLLER
listeners=${listeners[*]}
advertised.listeners=${advertised[*]}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=${protomap[*]}
log.dirs=$DATA

# One node: every internal topic must make do with one replica.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
# Share groups (KIP-932) are on by default in 4.x; their state topic wants
# 3 replicas by default, which one broker can't provide.
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
min.insync.replicas=1
default.replication.factor=1

# Fewer internal partitions (default 50) = faster first group/transaction use.
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4
num.partitions=1
# Tests create their topics explicitly.
auto.create.topics.enable=false
# Don't wait 3 s for more members before the first classic-group rebalance.
group.initial.rebalance.delay.ms=0
# Allow (not impose) short group session timeouts / heartbeat intervals, so
# tests of member expiry need not wait the usual 6 s / 45 s minimums.
group.min.session.timeout.ms=1000
group.consumer.min.session.timeout.ms=1000
group.consumer.min.heartbeat.interval.ms=500
# transaction.max.timeout.ms stays at its default (900000).
EOF
}

# Wait until the broker really serves requests: its log, from byte $3 on
# (this launch's part), says it started, and a client round trip (metadata +
# ApiVersions) sees node 1 unfenced.
wait_ready() {
    local pid=$1 port=$2 from=$3 deadline=$((SECONDS + START_TIMEOUT)) out
    while ((SECONDS < deadline)); do
        kill -0 "$pid" 2>/dev/null || { log "broker exited during startup"; return 1; }
        if tail -c +$((from + 1)) "$LOG" 2>/dev/null | grep -q "Kafka Server started"; then
            out=$(timeout 30 "${TOOL[@]}" org.apache.kafka.tools.BrokerApiVersionsCommand \
                --bootstrap-server "127.0.0.1:$port" 2>&1) || true
            if [[ $out == *"(id: 1 "* && $out != *"isFenced: true"* ]]; then
                return 0
            fi
        fi
        sleep 0.5
    done
    log "broker did not answer within ${START_TIMEOUT}s"
    return 1
}

log_size() { stat -c %s "$LOG" 2>/dev/null || echo 0; }

# Run the broker on $PROPS in the background, its output appended to $LOG,
# and record its pid.
launch() {
    # setsid + nohup + no inherited fds: the broker outlives this script
    # and never holds a caller's pipe (or our lock) open, so whoever runs
    # `start` sees EOF as soon as it returns.
    # GC flags are the ones kafka-server-start.sh uses.
    (
        for fd in "/proc/$BASHPID/fd/"*; do
            fd=${fd##*/}
            ((fd > 2)) && eval "exec $fd>&-"
        done
        # shellcheck disable=SC2086
        exec setsid nohup "$JAVA" $HEAP_OPTS \
            -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
            -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
            -Dlog4j2.configurationFile="$CONF_DIR/log4j2.properties" -Dkord.log.level="$LOG_LEVEL" \
            -cp "$LIBS/*" kafka.Kafka "$PROPS" \
            >>"$LOG" 2>&1 </dev/null
    ) &
    echo $! >"$PIDFILE" # the subshell execs setsid, which execs nohup, which execs java
}

# The broker answered: publish its addresses and print the bootstrap one.
ready() {
    local pid=$1 t0=$2
    echo "127.0.0.1:$PORT" >"$BOOTSTRAP"
    echo "127.0.0.1:$FRONT 127.0.0.1:$BACKEND" >"$PROXYFILE"
    log "broker ready in $((SECONDS - t0))s (pid $pid); proxied listener: front 127.0.0.1:$FRONT, backend 127.0.0.1:$BACKEND"
    echo "127.0.0.1:$PORT"
}

# Launch the broker and wait until it is ready (its log read from byte $1
# on; $2 is when the start began): print its address and succeed, or stop
# it and fail.
launch_and_wait() {
    local pid
    launch
    pid=$(cat "$PIDFILE")
    if wait_ready "$pid" "$PORT" "$1"; then
        ready "$pid" "$2"
        return 0
    fi
    stop_pid "$pid"
    return 1
}

start() {
    lock_state
    local pid
    if pid=$(broker_pid) && [[ -s $BOOTSTRAP ]]; then
        log "broker already running (pid $pid)"
        [[ -s $PROXYFILE ]] || log "warning: it has no PROXIED listener (started by an older kafka.sh); stop and start it to get one"
        cat "$BOOTSTRAP"
        return 0
    fi
    [[ -z ${pid:-} ]] || stop_pid "$pid" # running but half set up: start over
    fetch

    local attempt t0=$SECONDS from
    for attempt in 1 2 3; do
        rm -rf "$DATA" "$LOG" "$PIDFILE" "$BOOTSTRAP" "$PROXYFILE" "$PORTS" "$PROPS"
        new_ports
        write_props
        log "formatting storage in $DATA"
        "${TOOL[@]}" kafka.tools.StorageTool format --cluster-id "$(cluster_id)" --config "$PROPS" >"$LOG" 2>&1 \
            || { tail -n 40 "$LOG" >&2; die "formatting storage failed"; }

        log "starting Kafka $VERSION on 127.0.0.1:$PORT (controller :$CPORT, proxied :$BACKEND as :$FRONT), log: $LOG"
        from=$(log_size)
        launch_and_wait "$from" "$t0" && return 0
        # Someone took a port between picking and binding: pick again.
        if ((attempt < 3)) && grep -q "Address already in use" "$LOG"; then
            log "port clash, retrying with other ports"
            continue
        fi
        break
    done
    log "---- last lines of $LOG ----"
    tail -n 60 "$LOG" >&2
    rm -f "$PIDFILE"
    die "failed to start Kafka"
}

# Start the broker again from the config and data a start left: same ports,
# no format. The caller holds the lock and made sure it is not running.
resume_locked() {
    if ! [[ -f $PROPS && -d $DATA ]] || ! load_ports; then
        die "no broker config in $STATE to resume: run \`$0 start\` first"
    fi
    grep -q "^listeners=.*PROXIED://" "$PROPS" \
        || die "$PROPS was written by an older kafka.sh (no PROXIED listener): run \`$0 start\` for a fresh broker"
    fetch
    rm -f "$PIDFILE" "$BOOTSTRAP" "$PROXYFILE"
    local attempt from t0=$SECONDS
    for attempt in 1 2 3; do
        log "resuming Kafka $VERSION on 127.0.0.1:$PORT with its data in $DATA"
        from=$(log_size)
        launch_and_wait "$from" "$t0" && return 0
        # The ports are fixed now: a clash can only be waited out.
        if ((attempt < 3)) && tail -c +$((from + 1)) "$LOG" | grep -q "Address already in use"; then
            log "a port is still in use, retrying in 2s"
            sleep 2
            continue
        fi
        break
    done
    log "---- last lines of $LOG ----"
    tail -n 60 "$LOG" >&2
    rm -f "$PIDFILE"
    die "failed to resume Kafka"
}

resume() {
    lock_state
    local pid
    if pid=$(broker_pid) && [[ -s $BOOTSTRAP ]]; then
        log "broker already running (pid $pid)"
        cat "$BOOTSTRAP"
        return 0
    fi
    [[ -z ${pid:-} ]] || stop_pid "$pid" # running but half set up
    resume_locked
}

restart() {
    lock_state
    local pid
    if pid=$(broker_pid); then
        log "stopping broker (pid $pid) for a restart"
        stop_pid "$pid"
    fi
    resume_locked
}

stop_pid() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "broker (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s, killing it"
    kill_pid "$pid"
}

kill_pid() {
    local pid=$1 i
    kill -KILL "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "could not kill broker (pid $pid)"
}

stop() {
    lock_state
    local pid
    if pid=$(broker_pid); then
        log "stopping broker (pid $pid)"
        stop_pid "$pid"
    else
        log "no broker running"
    fi
    rm -f "$PIDFILE" "$BOOTSTRAP" "$PROXYFILE"
}

kill_broker() {
    lock_state
    local pid
    if pid=$(broker_pid); then
        log "killing broker (pid $pid) with SIGKILL; data kept"
        kill_pid "$pid"
    else
        log "no broker running"
    fi
    rm -f "$PIDFILE" "$BOOTSTRAP" "$PROXYFILE"
}

status() {
    local pid addr
    if ! pid=$(broker_pid) || ! addr=$(cat "$BOOTSTRAP" 2>/dev/null) || [[ -z $addr ]]; then
        log "not running"
        return 1
    fi
    # The process alone is not enough: its listener must accept connections.
    (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null \
        || { log "broker (pid $pid) is not accepting connections on $addr"; return 1; }
    echo "$addr"
}

case ${1:-} in
fetch) fetch && echo "$LIBS" ;;
start) start ;;
stop) stop ;;
restart) restart ;;
resume) resume ;;
kill) kill_broker ;;
status) status ;;
*)
    echo "usage: $0 fetch|start|stop|restart|resume|kill|status  (see the top of this file)" >&2
    exit 2
    ;;
esac
