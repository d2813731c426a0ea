#!/usr/bin/env bash
# scripts/kafka-cluster.sh: run a real Apache Kafka cluster of three nodes
# for tests, shaped like production: replication factor 3 for every topic
# and internal topic, min.insync.replicas=2, and ways to take brokers down.
#
# Each node is one KRaft process, broker and controller, and the three
# controllers form a static quorum of three voters: any one node may be
# down and the cluster goes on; with two down it has neither a controller
# nor two in-sync replicas, and waits. The jars are scripts/kafka.sh's
# (`scripts/kafka.sh fetch`, from Maven Central, cached outside the repo).
# The lookups (leader, coordinators) and the readiness checks are
# internal/rig/clusterctl, a small Go program built by start into the state
# dir (go build, from the build cache after the first time): a Kafka
# command-line tool would start a JVM per call, about a second of CPU on a
# machine the three brokers already keep busy; clusterctl takes
# milliseconds.
#
# Usage: scripts/kafka-cluster.sh COMMAND [ARGS]
#   start                 fetch if needed, start three fresh nodes (data
#                         wiped, storage formatted) on free 127.0.0.1 ports,
#                         wait until all three answer and __consumer_offsets
#                         and __transaction_state exist with their three
#                         replicas in sync, and print the bootstrap list
#                         ("127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3") as the
#                         last line of stdout (everything else goes to
#                         stderr); also written to $STATE/bootstrap. If the
#                         three nodes this script started all run, just
#                         print the list.
#   stop                  stop every node (SIGTERM to all at once, SIGKILL
#                         after the grace period); exit 0 when none runs.
#                         Config and data stay until the next start.
#   status                one line per node, "N running|frozen|stopped
#                         127.0.0.1:PORT", then the bootstrap list; exit 1
#                         unless all three run and accept connections
#   stop N                stop node N (1..3) with SIGTERM (a controlled
#                         shutdown: it hands its leaderships over first)
#   kill N                SIGKILL node N (a crash); its data stays
#   resume N              start node N again on its config, ports and data,
#                         and wait until it has rejoined: registered,
#                         answering, and back in the ISR of every partition
#                         it replicates (what a rolling restart waits for
#                         before the next broker). A frozen node is thawed
#                         and waited for the same way; a running one only
#                         waited for.
#   freeze N              SIGSTOP node N: its sockets stay open and nothing
#                         answers (a long GC pause, a hung VM)
#   thaw N                SIGCONT node N
#   leader TOPIC P        print the node id of the leader of TOPIC's
#                         partition P
#   txn-coordinator TID   print the node id of the transaction coordinator
#                         of transactional id TID
#   group-coordinator G   print the node id of group G's coordinator
# A lookup asks every node at once and takes the first answer, so it works
# with a node down or frozen; it asks again for up to 20 s while there is no
# answer yet (a partition without a leader, a coordinator loading) and
# fails then.
#
# Settings (server.properties, written by start for each node):
#   default.replication.factor=3, offsets.topic.replication.factor=3,
#   transaction.state.log.replication.factor=3 (and the share coordinator's
#   state topic's, by default); min.insync.replicas=2 and
#   transaction.state.log.min.isr=2: with two nodes down, writes wait.
#   replica.lag.time.max.ms=10000 (default 30000): a follower that fetched
#   nothing for 10 s leaves the ISR, so a frozen node is out of it within
#   about 10 s, and tests need not wait half a minute.
#   leader.imbalance.check.interval.seconds=10 (default 300): a node that
#   comes back gets its preferred leaderships back within about 10 s, not
#   5 minutes, so a test after a fault does not find every leader, and both
#   coordinators of a job, on the nodes that stayed up.
#   broker.session.timeout.ms and broker.heartbeat.interval.ms are Kafka's
#   defaults (9 s, 2 s): a node killed or frozen is fenced, and its
#   leaderships move, about 9 s after its last heartbeat, as in production.
#   group.initial.rebalance.delay.ms=0; short group session timeouts
#   allowed (group.min.session.timeout.ms=1000), as scripts/kafka.sh does;
#   4 partitions for each internal topic (default 50: slow to create and to
#   move); auto.create.topics.enable=false.
#   Small JVMs for 2 cores: -Xmx384m -Xms128m with the serial collector,
#   and fewer request threads (num.network.threads=2, num.io.threads=4,
#   background.threads=4). Three idle nodes take about 1 GB of memory and 15 % of
#   one core.
#
# Files (the state dir, $STATE below; only these are ever deleted):
#   nodeN/server.properties, nodeN/data/, nodeN/broker.log, nodeN/broker.pid
#   ports       "N PORT CONTROLLER_PORT" lines, kept by stop/kill/resume
#   bootstrap   the bootstrap list, written by start, removed by stop
#   clusterctl  the lookup program, built by start
#
# Environment (all optional):
#   KORD_KAFKA_CLUSTER_DIR    state dir (default /tmp/kord-kafka-cluster)
#   KORD_KAFKA_CLUSTER_HEAP_OPTS   heap flags (default "-Xmx384m -Xms128m")
#   KORD_KAFKA_START_TIMEOUT  seconds to wait for the nodes to answer (120)
#   KORD_KAFKA_STOP_TIMEOUT   seconds after SIGTERM before SIGKILL (20)
#   KORD_KAFKA_LOG_LEVEL      broker log level (default INFO)
#   KORD_KAFKA_VERSION, KORD_CACHE, JAVA_HOME   as for scripts/kafka.sh
#   Go on PATH (to build clusterctl).
# Tests drive it through internal/rig/kafkatest (ThreeBrokers), which reads
# KORD_KAFKA_CLUSTER (the bootstrap list) and KORD_KAFKA_CLUSTER_DIR.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CONF_DIR=$HERE/kafka-broker
STATE=$(realpath -m "${KORD_KAFKA_CLUSTER_DIR:-/tmp/kord-kafka-cluster}")
START_TIMEOUT=${KORD_KAFKA_START_TIMEOUT:-120}
STOP_TIMEOUT=${KORD_KAFKA_STOP_TIMEOUT:-20}
HEAP_OPTS=${KORD_KAFKA_CLUSTER_HEAP_OPTS:--Xmx384m -Xms128m}
LOG_LEVEL=${KORD_KAFKA_LOG_LEVEL:-INFO}
DAEMON=node
# shellcheck source=lib/proc.sh
. "$HERE/lib/proc.sh"
JAVA=java
[[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]] && JAVA=$JAVA_HOME/bin/java
NODES=(1 2 3)

PORTS=$STATE/ports
BOOTSTRAP=$STATE/bootstrap
CTL=$STATE/clusterctl

log() { echo "kafka-cluster.sh: $*" >&2; }
die() { log "$*"; exit 1; }

node_dir() { echo "$STATE/node$1"; }
props() { echo "$STATE/node$1/server.properties"; }
node_log() { echo "$STATE/node$1/broker.log"; }
pidfile() { echo "$STATE/node$1/broker.pid"; }

check_id() {
    [[ ${1:-} =~ ^[123]$ ]] || die "node id ${1:-(none)}: want 1, 2 or 3"
}

libs() {
    LIBS=$("$HERE/kafka.sh" fetch | tail -n 1)
    [[ -d $LIBS ]] || die "scripts/kafka.sh fetch printed no libs directory"
}

# Pid of node N if it runs (frozen included). The command line is checked
# so a recycled pid is never mistaken for it.
node_pid() {
    local pid
    pid=$(cat "$(pidfile "$1")" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "kafka.Kafka $(props "$1")" || return 1
    echo "$pid"
}

# frozen PID: the process is stopped (SIGSTOP).
frozen() { [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == T ]]; }

# PORT[N] and CPORT[N], from $PORTS.
declare -A PORT CPORT
load_ports() {
    local n p c
    [[ -f $PORTS ]] || die "no cluster in $STATE: run \`$0 start\` first"
    while read -r n p c; do
        PORT[$n]=$p
        CPORT[$n]=$c
    done <"$PORTS"
    for n in "${NODES[@]}"; do
        [[ -n ${PORT[$n]:-} && -n ${CPORT[$n]:-} ]] || die "$PORTS is incomplete: run \`$0 start\`"
    done
}

new_ports() {
    local n taken=()
    for n in "${NODES[@]}"; do
        PORT[$n]=$(free_port "${taken[@]}")
        taken+=("${PORT[$n]}")
        CPORT[$n]=$(free_port "${taken[@]}")
        taken+=("${CPORT[$n]}")
    done
    for n in "${NODES[@]}"; do echo "$n ${PORT[$n]} ${CPORT[$n]}"; done >"$PORTS"
}

bootstrap_list() {
    local n out=()
    for n in "${NODES[@]}"; do out+=("127.0.0.1:${PORT[$n]}"); done
    local IFS=,
    echo "${out[*]}"
}

write_props() {
    local n=$1 v voters=()
    for v in "${NODES[@]}"; do voters+=("$v@127.0.0.1:${CPORT[$v]}"); done
    local IFS=,
    cat >"$(props "$n")" <<EOF
# Written by scripts/kafka-cluster.sh: node $n of a three-node KRaft cluster
# for tests (the header of that script explains the settings).
process.roles=broker,controller
node.id=$n
controller.quorum.voters=${voters[*]}
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:${PORT[$n]},CONTROLLER://127.0.0.1:${CPORT[$n]}
advertised.listeners=PLAINTEXT://127.0.0.1:${PORT[$n]}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$(node_dir "$n")/data

default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
replica.lag.time.max.ms=10000

offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4
num.partitions=1
auto.create.topics.enable=false
leader.imbalance.check.interval.seconds=10
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
group.consumer.min.session.timeout.ms=1000
group.consumer.min.heartbeat.interval.ms=500

num.network.threads=2
num.io.threads=4
background.threads=4
EOF
}

# launch N: run node N in the background on its props, its output appended
# to its log, and record its pid. As in scripts/kafka.sh: setsid, nohup and
# no inherited descriptors, so the node outlives this script and holds no
# caller's pipe (or the state lock) open.
launch() {
    local n=$1
    (
        close_fds
        # shellcheck disable=SC2086
        exec setsid nohup "$JAVA" $HEAP_OPTS -XX:+UseSerialGC -Djava.awt.headless=true \
            -Dlog4j2.configurationFile="$CONF_DIR/log4j2.properties" -Dkord.log.level="$LOG_LEVEL" \
            -cp "$LIBS/*" kafka.Kafka "$(props "$n")" \
            >>"$(node_log "$n")" 2>&1 </dev/null
    ) &
    echo $! >"$(pidfile "$n")"
}

log_size() { stat -c %s "$(node_log "$1")" 2>/dev/null || echo 0; }

# wait_started N FROM DEADLINE: node N's log, from byte FROM on, says it
# started, before SECONDS reaches DEADLINE.
wait_started() {
    local n=$1 from=$2 deadline=$3 pid
    pid=$(cat "$(pidfile "$n")")
    while ((SECONDS < deadline)); do
        kill -0 "$pid" 2>/dev/null || { log "node $n exited during startup"; return 1; }
        tail -c +$((from + 1)) "$(node_log "$n")" 2>/dev/null | grep -q "Kafka Server started" && return 0
        sleep 0.3
    done
    log "node $n did not start within ${START_TIMEOUT}s"
    return 1
}

build_ctl() {
    command -v go >/dev/null || die "go is needed to build internal/rig/clusterctl"
    (cd "$ROOT" && go build -o "$CTL.tmp" ./internal/rig/clusterctl) || die "building internal/rig/clusterctl failed"
    mv "$CTL.tmp" "$CTL"
}

# ctl ARGS...: clusterctl against the bootstrap list.
ctl() {
    [[ -x $CTL ]] || build_ctl
    load_ports
    "$CTL" -brokers "$(bootstrap_list)" "$@"
}

stop_all_pids() {
    local n pid pids=() i
    for n in "${NODES[@]}"; do
        if pid=$(node_pid "$n"); then
            kill -CONT "$pid" 2>/dev/null || true
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    ((${#pids[@]})) || return 0
    local alive
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        ((alive)) || return 0
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        kill -0 "$pid" 2>/dev/null || continue
        log "node (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s, killing it"
        kill_pid "$pid"
    done
}

start() {
    lock_state
    local n pid all=1
    for n in "${NODES[@]}"; do
        pid=$(node_pid "$n") && ! frozen "$pid" || all=0
    done
    if ((all)) && [[ -s $BOOTSTRAP ]]; then
        log "cluster already running"
        cat "$BOOTSTRAP"
        return 0
    fi
    stop_all_pids # some of it runs, or runs half set up: start over
    libs
    local t0=$SECONDS attempt id deadline ok from=()
    build_ctl &
    local build=$!
    for attempt in 1 2 3; do
        rm -f "$BOOTSTRAP" "$PORTS"
        for n in "${NODES[@]}"; do rm -rf "$(node_dir "$n")"; mkdir -p "$(node_dir "$n")"; done
        new_ports
        # One cluster id for the three; Kafka avoids ids starting with '-'.
        while id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'); [[ $id == -* ]]; do :; done
        local fpids=()
        for n in "${NODES[@]}"; do
            write_props "$n"
            "$JAVA" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m \
                -Dlog4j2.configurationFile="$CONF_DIR/log4j2.properties" -Dkord.log.level=WARN \
                -cp "$LIBS/*" kafka.tools.StorageTool format --cluster-id "$id" --config "$(props "$n")" \
                >"$(node_log "$n")" 2>&1 &
            fpids+=($!)
        done
        for n in "${NODES[@]}"; do
            wait "${fpids[$((n - 1))]}" || { tail -n 40 "$(node_log "$n")" >&2; die "formatting node $n's storage failed"; }
        done
        log "starting three Kafka nodes: $(bootstrap_list) (controllers on ${CPORT[1]},${CPORT[2]},${CPORT[3]}), logs in $STATE/node*/broker.log"
        for n in "${NODES[@]}"; do
            from[$n]=$(log_size "$n")
            launch "$n"
        done
        deadline=$((SECONDS + START_TIMEOUT))
        ok=1
        for n in "${NODES[@]}"; do wait_started "$n" "${from[$n]}" "$deadline" || { ok=0; break; }; done
        if ((ok)); then
            wait "$build" || die "building internal/rig/clusterctl failed"
            if "$CTL" -brokers "$(bootstrap_list)" -wait "$((deadline - SECONDS > 5 ? deadline - SECONDS : 5))s" ready 3 >&2; then
                bootstrap_list >"$BOOTSTRAP"
                log "cluster ready in $((SECONDS - t0))s"
                cat "$BOOTSTRAP"
                return 0
            fi
        fi
        stop_all_pids
        # Someone took a port between picking and binding: pick again.
        if ((attempt < 3)) && grep -q "Address already in use" "$STATE"/node*/broker.log; then
            log "port clash, retrying with other ports"
            continue
        fi
        break
    done
    for n in "${NODES[@]}"; do
        log "---- last lines of $(node_log "$n") ----"
        tail -n 30 "$(node_log "$n")" >&2
        rm -f "$(pidfile "$n")"
    done
    die "failed to start the cluster"
}

stop() {
    lock_state
    stop_all_pids
    rm -f "$BOOTSTRAP" "$STATE"/node*/broker.pid
    log "stopped"
}

stop_node() {
    local n=$1 pid
    lock_state
    if pid=$(node_pid "$n"); then
        log "stopping node $n (pid $pid)"
        stop_pid "$pid"
    else
        log "node $n is not running"
    fi
    rm -f "$(pidfile "$n")"
}

kill_node() {
    local n=$1 pid
    lock_state
    if pid=$(node_pid "$n"); then
        log "killing node $n (pid $pid) with SIGKILL; data kept"
        kill_pid "$pid"
    else
        log "node $n is not running"
    fi
    rm -f "$(pidfile "$n")"
}

resume_node() {
    local n=$1 pid t0=$SECONDS from attempt
    lock_state
    load_ports
    if pid=$(node_pid "$n"); then
        if frozen "$pid"; then
            log "node $n (pid $pid) is frozen: thawing it"
            kill -CONT "$pid"
        fi
    else
        [[ -f $(props "$n") && -d $(node_dir "$n")/data ]] || die "no config or data for node $n in $STATE: run \`$0 start\`"
        libs
        for attempt in 1 2 3; do
            log "resuming node $n on 127.0.0.1:${PORT[$n]} with its data"
            from=$(log_size "$n")
            launch "$n"
            wait_started "$n" "$from" $((SECONDS + START_TIMEOUT)) && break
            stop_pid "$(cat "$(pidfile "$n")")"
            # The ports are fixed: a clash can only be waited out.
            if ((attempt < 3)) && tail -c +$((from + 1)) "$(node_log "$n")" | grep -q "Address already in use"; then
                log "a port of node $n is still in use, retrying in 2s"
                sleep 2
                continue
            fi
            tail -n 40 "$(node_log "$n")" >&2
            rm -f "$(pidfile "$n")"
            die "failed to resume node $n"
        done
    fi
    ctl -wait "${START_TIMEOUT}s" insync "$n" >&2 || die "node $n did not rejoin within ${START_TIMEOUT}s"
    log "node $n back in sync in $((SECONDS - t0))s"
}

signal_node() {
    local n=$1 sig=$2 pid
    lock_state
    pid=$(node_pid "$n") || die "node $n is not running"
    kill "-$sig" "$pid"
    log "sent SIG$sig to node $n (pid $pid)"
}

status() {
    local n pid state rc=0
    load_ports
    for n in "${NODES[@]}"; do
        if ! pid=$(node_pid "$n"); then
            state=stopped rc=1
        elif frozen "$pid"; then
            state=frozen rc=1
        elif ! (exec 3<>"/dev/tcp/127.0.0.1/${PORT[$n]}") 2>/dev/null; then
            state="running (not accepting connections)" rc=1
        else
            state=running
        fi
        echo "$n $state 127.0.0.1:${PORT[$n]}"
    done
    bootstrap_list
    return $rc
}

cmd=${1:-}
shift || true
case $cmd in
start) start ;;
stop)
    if (($#)); then check_id "$1"; stop_node "$1"; else stop; fi
    ;;
status) status ;;
kill) check_id "${1:-}"; kill_node "$1" ;;
resume) check_id "${1:-}"; resume_node "$1" ;;
freeze) check_id "${1:-}"; signal_node "$1" STOP ;;
thaw) check_id "${1:-}"; signal_node "$1" CONT ;;
leader)
    (($# == 2)) || die "usage: $0 leader TOPIC PARTITION"
    ctl leader "$1" "$2"
    ;;
txn-coordinator)
    (($# == 1)) || die "usage: $0 txn-coordinator TRANSACTIONAL_ID"
    ctl coordinator txn "$1"
    ;;
group-coordinator)
    (($# == 1)) || die "usage: $0 group-coordinator GROUP"
    ctl coordinator group "$1"
    ;;
*)
    echo "usage: $0 start|stop [N]|status|kill N|resume N|freeze N|thaw N|leader TOPIC P|txn-coordinator TID|group-coordinator GROUP  (see the top of this file)" >&2
    exit 2
    ;;
esac
