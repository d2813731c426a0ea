#!/usr/bin/env bash
# scripts/hive-metastore.sh: fetch and run a real Apache Hive standalone
# Metastore (Thrift, NOSASL, embedded Derby) for tests, as scripts/kafka.sh
# runs Kafka.
#
# The Metastore comes from Maven Central as jars: the pom that
# write_pom below generates (org.apache.hive:hive-standalone-metastore-server
# with its Hadoop dependencies swapped for the shaded hadoop-client-api and
# -runtime), fetched with `mvn dependency:copy-dependencies` into a cache
# outside the repo, then run with plain java (main class
# org.apache.hadoop.hive.metastore.HiveMetaStore).
#
# To make the Metastore unavailable mid-test and bring it back with the same
# data: `stop` (or `kill`) then `resume` (or just `restart`): same address,
# same databases, tables and partitions. `freeze`/`thaw` hang it instead.
# A fresh start takes ~2.5s here once the jars are cached (~120 jars, 130 MB,
# fetched once in ~40s); the JVM's RSS is ~170 MB.
#
# Usage: scripts/hive-metastore.sh COMMAND
#   fetch    download the jars (a no-op when the cache is complete) and print
#            the directory holding them
#   start    fetch if needed, start a fresh Metastore (a new empty Derby db
#            and warehouse, a free 127.0.0.1 port), wait until it answers a
#            real call (get_all_databases over Thrift), print its address
#            "127.0.0.1:PORT" as the only line of stdout (everything else
#            goes to stderr) and write it to $DIR/address. If a Metastore
#            started by this script from that dir already runs, just print
#            its address.
#   stop     stop the JVM (SIGTERM, SIGKILL after a grace period); exit 0 when
#            nothing runs. The run dir stays: config, port, Derby db and
#            warehouse are kept for restart/resume (stop-keep is an alias).
#   kill     SIGKILL the JVM (a crash); the dir stays too. Derby recovers its
#            db from its log at the next resume.
#   restart  stop the Metastore if it runs, start it again on the SAME port
#            with the SAME Derby db (databases, tables and partitions kept;
#            conf/ is rewritten from this script), wait until it answers and
#            print its address like start
#   resume   like restart, for a Metastore that is not running (after stop
#            or kill); if it runs, just print its address
#   freeze   SIGSTOP the JVM: connections are accepted by the kernel but no
#            call is answered (a hung server rather than a dead one; a
#            client without a socket read timeout hangs for good)
#   thaw     SIGCONT a frozen JVM; print its address
#   status   print the address if it runs and answers a call, exit 1 if not
#   clean    stop it and delete the run dir if this script made it (mktemp),
#            else only the files this script writes there
#
# Run dir ($KORD_HIVE_DIR, else a `mktemp -d /tmp/kord-hive-metastore.XXXXXX`
# made by the first start and recorded in /tmp/kord-hive-metastore.dir, so
# that later commands without KORD_HIVE_DIR find it; start reuses the
# recorded dir, wiping its data):
#   conf/metastore-site.xml, conf/log4j2.properties   the server's config
#   metastore_db/        the Derby database
#   warehouse/, warehouse-external/   managed and external warehouse roots
#                        (file: URLs; tests should give tables locations of
#                        their own anyway)
#   metastore.log        the server's log (appended by restart/resume)
#   derby.log, metastore.pid, port, address (present while it runs)
#
# Environment (all optional):
#   KORD_HIVE_VERSION        Hive version (default 4.0.1; the Hadoop jars
#                            below are the ones known to work with it)
#   KORD_CACHE               cache root (default $HOME/.cache/kord); jars go
#                            to $KORD_CACHE/hive-metastore-<version>/libs
#   KORD_HIVE_DIR            run dir (see above)
#   KORD_HIVE_START_TIMEOUT  seconds to wait for the server to answer (120)
#   KORD_HIVE_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL (20)
#   KORD_HIVE_HEAP_OPTS      JVM heap flags (default "-Xmx384m -Xms64m")
#   KORD_HIVE_LOG_LEVEL      server log level (default INFO)
#   JAVA_HOME                java to use (default: java on PATH)
set -euo pipefail

VERSION=${KORD_HIVE_VERSION:-4.0.1}
HADOOP_VERSION=3.3.6
CACHE_ROOT=${KORD_CACHE:-${HOME:-/tmp}/.cache/kord}
VER_DIR=$CACHE_ROOT/hive-metastore-$VERSION
LIBS=$VER_DIR/libs
START_TIMEOUT=${KORD_HIVE_START_TIMEOUT:-120}
STOP_TIMEOUT=${KORD_HIVE_STOP_TIMEOUT:-20}
DAEMON=Metastore
# shellcheck source=lib/proc.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/proc.sh"
HEAP_OPTS=${KORD_HIVE_HEAP_OPTS:--Xmx384m -Xms64m}
LOG_LEVEL=${KORD_HIVE_LOG_LEVEL:-INFO}
JAVA=java
[[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]] && JAVA=$JAVA_HOME/bin/java
MAIN=org.apache.hadoop.hive.metastore.HiveMetaStore
# Where the default (mktemp) run dir is recorded.
RECORD=${TMPDIR:-/tmp}/kord-hive-metastore.dir
MARKER=.made-by-hive-metastore.sh # in a run dir this script made with mktemp

log() { echo "hive-metastore.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------- fetch

# Not a build, only a list of jars. The Metastore's own Hadoop dependencies
# (hadoop-common, -hdfs-client, ... and their huge trees) are replaced by the
# shaded client jars; what the Metastore then misses is added back by hand.
write_pom() {
    cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by scripts/hive-metastore.sh: the jars of a Hive standalone
     Metastore, fetched with mvn dependency:copy-dependencies. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>com.github.kordproject.kord</groupId>
  <artifactId>hive-metastore-libs</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.hive</groupId>
      <artifactId>hive-standalone-metastore-server</artifactId>
      <version>$VERSION</version>
      <exclusions>
        <exclusion><groupId>jdk.tools</groupId><artifactId>jdk.tools</artifactId></exclusion>
        <exclusion><groupId>org.apache.hadoop</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-client-api</artifactId>
      <version>$HADOOP_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-client-runtime</artifactId>
      <version>$HADOOP_VERSION</version>
    </dependency>
    <!-- The Metastore's FileUtils catches
         org.apache.hadoop.hdfs.protocol.SnapshotException, which is only in
         hadoop-hdfs (not in hadoop-client-api): without it every call that
         makes a directory (create_database, create_table, add_partition)
         dies with NoClassDefFoundError and the client sees EOF. The jar
         alone is enough. -->
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-hdfs</artifactId>
      <version>$HADOOP_VERSION</version>
      <exclusions>
        <exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
    </dependency>
    <!-- Used by the Metastore, formerly brought by hadoop-common. -->
    <dependency>
      <groupId>commons-cli</groupId>
      <artifactId>commons-cli</artifactId>
      <version>1.5.0</version>
    </dependency>
    <dependency>
      <groupId>commons-collections</groupId>
      <artifactId>commons-collections</artifactId>
      <version>3.2.2</version>
    </dependency>
    <dependency>
      <groupId>org.apache.commons</groupId>
      <artifactId>commons-configuration2</artifactId>
      <version>2.8.0</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <!-- Pinned: Maven's built-in default (2.8) is ancient. -->
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.8.1</version>
      </plugin>
    </plugins>
  </build>
</project>
EOF
}

# The cache is complete when its stamp matches this pom, so editing the pom
# (or the version) refetches.
stamp() { echo "hive-metastore $VERSION pom $(write_pom | sha256sum | cut -d' ' -f1)"; }
fetched() { [[ -f $LIBS/.complete && "$(cat "$LIBS/.complete")" == "$(stamp)" ]]; }

fetch() {
    fetched && return 0
    command -v mvn >/dev/null || die "mvn (Maven) is needed to fetch the Hive Metastore"
    mkdir -p "$VER_DIR"
    # One fetch at a time per version; a concurrent caller waits, then
    # finds the cache complete.
    exec 8>"$VER_DIR/.fetch.lock"
    flock 8
    if ! fetched; then
        log "fetching Hive Metastore $VERSION jars into $LIBS"
        local tmp t0=$SECONDS
        write_pom >"$VER_DIR/pom.xml"
        tmp=$(mktemp -d "$VER_DIR/libs.tmp.XXXXXX")
        if ! mvn -B -q --no-transfer-progress -f "$VER_DIR/pom.xml" \
            dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" \
            >"$VER_DIR/mvn.log" 2>&1; then
            tail -n 40 "$VER_DIR/mvn.log" >&2
            rm -rf "$tmp"
            die "fetching Hive Metastore $VERSION failed (full output: $VER_DIR/mvn.log)"
        fi
        [[ -f $tmp/hive-standalone-metastore-server-$VERSION.jar ]] \
            || { rm -rf "$tmp"; die "hive-standalone-metastore-server-$VERSION.jar missing after fetch"; }
        stamp >"$tmp/.complete"
        rm -rf "$LIBS"
        mv "$tmp" "$LIBS"
        log "fetched $(find "$LIBS" -name '*.jar' | wc -l) jars in $((SECONDS - t0))s"
    fi
    exec 8>&-
}

# ---------------------------------------------------------------- run dir

STATE=''
set_state() {
    STATE=$(realpath -m "$1")
    CONF=$STATE/conf
    DB=$STATE/metastore_db
    LOG=$STATE/metastore.log
    PIDFILE=$STATE/metastore.pid
    PORTFILE=$STATE/port       # kept by stop/kill: restart reuses the port
    ADDRESS=$STATE/address     # written when ready, removed by stop/kill
}

# The run dir for COMMAND $1: $KORD_HIVE_DIR, else the recorded one; start
# makes (and records) a new one when none is recorded. Prints nothing;
# returns 1 when there is none (only for commands other than start).
pick_state() {
    if [[ -n ${KORD_HIVE_DIR:-} ]]; then
        set_state "$KORD_HIVE_DIR"
        return 0
    fi
    local d
    d=$(cat "$RECORD" 2>/dev/null) || d=''
    if [[ -n $d && -d $d && -f $d/$MARKER ]]; then
        set_state "$d"
        return 0
    fi
    [[ $1 == start ]] || return 1
    d=$(mktemp -d "${TMPDIR:-/tmp}/kord-hive-metastore.XXXXXX")
    : >"$d/$MARKER"
    echo "$d" >"$RECORD"
    set_state "$d"
}

# The files this script writes in the run dir (the only ones it deletes,
# so a KORD_HIVE_DIR pointing somewhere precious loses nothing else).
wipe_state() {
    rm -rf "$CONF" "$DB" "$STATE/warehouse" "$STATE/warehouse-external" "$LOG" \
        "$STATE/derby.log" "$PIDFILE" "$PORTFILE" "$ADDRESS"
}

write_conf() {
    local port=$1
    mkdir -p "$CONF" "$STATE/warehouse" "$STATE/warehouse-external"
    cat >"$CONF/metastore-site.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by scripts/hive-metastore.sh: a test Metastore on embedded Derby. -->
<configuration>
  <property><name>metastore.thrift.port</name><value>$port</value></property>
  <property><name>metastore.thrift.bind.host</name><value>127.0.0.1</value></property>
  <property><name>javax.jdo.option.ConnectionURL</name><value>jdbc:derby:;databaseName=$DB;create=true</value></property>
  <property><name>javax.jdo.option.ConnectionDriverName</name><value>org.apache.derby.jdbc.EmbeddedDriver</value></property>
  <!-- No schematool: DataNucleus creates the schema in the empty db. -->
  <property><name>metastore.schema.verification</name><value>false</value></property>
  <property><name>datanucleus.schema.autoCreateAll</name><value>true</value></property>
  <property><name>metastore.warehouse.dir</name><value>file://$STATE/warehouse</value></property>
  <property><name>metastore.warehouse.external.dir</name><value>file://$STATE/warehouse-external</value></property>
  <!-- NOSASL binary Thrift (the default, spelled out). -->
  <property><name>metastore.sasl.enabled</name><value>false</value></property>
  <!-- No housekeeping threads: the default list names a class that is not
       in the standalone jars (HiveProtoEventsCleanerTask) and tests need
       none of them. -->
  <property><name>metastore.task.threads.always</name><value></value></property>
  <property><name>metastore.server.min.threads</name><value>4</value></property>
</configuration>
EOF
    # Not named metastore-log4j2.properties: found on the classpath under
    # that name, the Metastore reconfigures log4j with async loggers, whose
    # LMAX disruptor jar is not a dependency (it then dies at startup).
    cat >"$CONF/log4j2.properties" <<EOF
# Written by scripts/hive-metastore.sh.
status = WARN
name = kord-hive-metastore
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %5p [%t] %c{2}: %m%n
rootLogger.level = $LOG_LEVEL
rootLogger.appenderRef.console.ref = console
logger.dn.name = DataNucleus
logger.dn.level = WARN
logger.dno.name = org.datanucleus
logger.dno.level = WARN
EOF
    echo "$port" >"$PORTFILE"
}

# ---------------------------------------------------------------- process

# Pid of the Metastore this script started from this run dir, if it runs.
# The command line is checked so a recycled pid is never mistaken for it.
server_pid() {
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-cp $CONF:" || return 1
    echo "$pid"
}

frozen() { [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == T ]]; }

hex() { od -An -v -tx1 | tr -d ' \n'; }

# One real Thrift call, get_all_databases, in TBinaryProtocol (strict) over
# a plain socket (NOSASL, no framing): succeeds when the reply is a REPLY
# whose field 0 (success) is a non-empty list of strings (Derby answered
# and the "default" database exists).
hms_answers() {
    local port=$1 got want name=get_all_databases
    got=$(
        exec 2>/dev/null
        exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
        # version|CALL, name, seqid 1, empty args struct (field stop)
        printf '\x80\x01\x00\x01\x00\x00\x00\x11%s\x00\x00\x00\x01\x00' "$name" >&3
        # version|REPLY, name, seqid, list field 0, elem type string, size
        timeout 10 head -c $((4 + 4 + ${#name} + 4 + 3 + 1 + 4)) <&3 | hex
    ) || return 1
    want=$(printf '\x80\x01\x00\x02\x00\x00\x00\x11%s\x00\x00\x00\x01\x0f\x00\x00\x0b' "$name" | hex)
    [[ $got == "$want"* && ${#got} -eq $((${#want} + 8)) && ${got: -8} != 00000000 ]]
}

# Wait until the server (pid $1) answers a call on port $2.
wait_ready() {
    local pid=$1 port=$2 deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
        kill -0 "$pid" 2>/dev/null || { log "the Metastore exited during startup"; return 1; }
        hms_answers "$port" && return 0
        sleep 0.3
    done
    log "the Metastore did not answer within ${START_TIMEOUT}s"
    return 1
}

log_size() { stat -c %s "$LOG" 2>/dev/null || echo 0; }

launch() {
    local port=$1
    # setsid + nohup + no inherited fds: the server outlives this script
    # and never holds a caller's pipe (or our lock) open.
    (
        close_fds
        cd "$STATE"
        # shellcheck disable=SC2086
        exec setsid nohup "$JAVA" $HEAP_OPTS -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
            -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
            -Dlog4j2.configurationFile="$CONF/log4j2.properties" \
            -Dderby.system.home="$STATE" -Dderby.stream.error.file="$STATE/derby.log" \
            -cp "$CONF:$LIBS/*" "$MAIN" -p "$port" \
            >>"$LOG" 2>&1 </dev/null
    ) &
    echo $! >"$PIDFILE" # the subshell execs setsid, which execs nohup, which execs java
}

# Launch on port $1 and wait; $2: when the command began. Print the address
# and succeed, or stop the server and fail.
launch_and_wait() {
    local port=$1 t0=$2 pid
    launch "$port"
    pid=$(cat "$PIDFILE")
    if wait_ready "$pid" "$port"; then
        echo "127.0.0.1:$port" >"$ADDRESS"
        log "Metastore $VERSION ready in $((SECONDS - t0))s (pid $pid) on 127.0.0.1:$port; dir $STATE, log $LOG"
        echo "127.0.0.1:$port"
        return 0
    fi
    stop_pid "$pid"
    return 1
}

start() {
    lock_state
    local pid
    if pid=$(server_pid) && [[ -s $ADDRESS ]]; then
        log "Metastore already running (pid $pid)"
        frozen "$pid" && log "warning: it is frozen (SIGSTOP): \`$0 thaw\` wakes it"
        cat "$ADDRESS"
        return 0
    fi
    [[ -z ${pid:-} ]] || stop_pid "$pid" # running but half set up: start over
    fetch
    local attempt port t0=$SECONDS
    for attempt in 1 2 3; do
        wipe_state
        port=$(free_port)
        write_conf "$port"
        log "starting Hive Metastore $VERSION on 127.0.0.1:$port, log: $LOG"
        launch_and_wait "$port" "$t0" && return 0
        if ((attempt < 3)) && grep -q "Address already in use" "$LOG"; then
            log "port clash, retrying with another port"
            continue
        fi
        break
    done
    log "---- last lines of $LOG ----"
    tail -n 60 "$LOG" >&2
    rm -f "$PIDFILE"
    die "failed to start the Hive Metastore"
}

# Start it again from the config and Derby db a start left, on the same
# port. The caller holds the lock and made sure it is not running.
resume_locked() {
    [[ -f $CONF/metastore-site.xml && -d $DB && -s $PORTFILE ]] \
        || die "no Metastore config and db in $STATE to resume: run \`$0 start\` first"
    local port attempt from t0=$SECONDS
    port=$(cat "$PORTFILE")
    [[ $port =~ ^[0-9]+$ ]] || die "$PORTFILE holds no port: run \`$0 start\` for a fresh Metastore"
    fetch
    rm -f "$PIDFILE" "$ADDRESS"
    write_conf "$port" # same port and db; the rest as this script says now
    for attempt in 1 2 3; do
        log "resuming Hive Metastore $VERSION on 127.0.0.1:$port with its db $DB"
        from=$(log_size)
        launch_and_wait "$port" "$t0" && return 0
        # The port is fixed now: a clash can only be waited out.
        if ((attempt < 3)) && tail -c +$((from + 1)) "$LOG" | grep -q "Address already in use"; then
            log "port $port is still in use, retrying in 2s"
            sleep 2
            continue
        fi
        break
    done
    log "---- last lines of $LOG ----"
    tail -n 60 "$LOG" >&2
    rm -f "$PIDFILE"
    die "failed to resume the Hive Metastore"
}

resume() {
    lock_state
    local pid
    if pid=$(server_pid) && [[ -s $ADDRESS ]]; then
        frozen "$pid" && { log "Metastore (pid $pid) was frozen: thawing it"; kill -CONT "$pid"; }
        log "Metastore already running (pid $pid)"
        cat "$ADDRESS"
        return 0
    fi
    [[ -z ${pid:-} ]] || stop_pid "$pid"
    resume_locked
}

restart() {
    lock_state
    local pid
    if pid=$(server_pid); then
        log "stopping Metastore (pid $pid) for a restart"
        stop_pid "$pid"
    fi
    resume_locked
}

stop() {
    lock_state
    local pid
    if pid=$(server_pid); then
        log "stopping Metastore (pid $pid); $STATE kept for restart/resume"
        stop_pid "$pid"
    else
        log "no Metastore running"
    fi
    rm -f "$PIDFILE" "$ADDRESS"
}

kill_server() {
    lock_state
    local pid
    if pid=$(server_pid); then
        log "killing Metastore (pid $pid) with SIGKILL; $STATE kept for restart/resume"
        kill_pid "$pid"
    else
        log "no Metastore running"
    fi
    rm -f "$PIDFILE" "$ADDRESS"
}

freeze() {
    lock_state
    local pid
    pid=$(server_pid) || die "no Metastore running"
    kill -STOP "$pid"
    log "Metastore (pid $pid) frozen (SIGSTOP); \`$0 thaw\` resumes it"
}

thaw() {
    lock_state
    local pid
    pid=$(server_pid) || die "no Metastore running"
    kill -CONT "$pid"
    log "Metastore (pid $pid) thawed (SIGCONT)"
    cat "$ADDRESS"
}

status() {
    local pid addr
    if ! pid=$(server_pid) || ! addr=$(cat "$ADDRESS" 2>/dev/null) || [[ -z $addr ]]; then
        log "not running"
        return 1
    fi
    if frozen "$pid"; then
        log "Metastore (pid $pid) on $addr is frozen"
        return 1
    fi
    hms_answers "${addr##*:}" || { log "Metastore (pid $pid) on $addr does not answer"; return 1; }
    echo "$addr"
}

clean() {
    stop
    if [[ -f $STATE/$MARKER ]]; then
        log "removing $STATE"
        rm -rf "$STATE"
        [[ $(cat "$RECORD" 2>/dev/null) != "$STATE" ]] || rm -f "$RECORD"
    else
        wipe_state
        rm -f "$STATE/.lock"
    fi
}

cmd=${1:-}
case $cmd in
fetch) fetch && echo "$LIBS" ;;
start | stop | stop-keep | kill | restart | resume | freeze | thaw | status | clean)
    if ! pick_state "$cmd"; then
        case $cmd in
        stop | stop-keep | kill | clean) log "no Metastore run dir recorded (set KORD_HIVE_DIR?)"; exit 0 ;;
        *) die "no Metastore run dir recorded in $RECORD (set KORD_HIVE_DIR, or run \`$0 start\` first)" ;;
        esac
    fi
    case $cmd in
    start) start ;;
    stop | stop-keep) stop ;;
    kill) kill_server ;;
    restart) restart ;;
    resume) resume ;;
    freeze) freeze ;;
    thaw) thaw ;;
    status) status ;;
    clean) clean ;;
    esac
    ;;
*)
    echo "usage: $0 fetch|start|stop|kill|restart|resume|freeze|thaw|status|clean  (see the top of this file)" >&2
    exit 2
    ;;
esac
