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
#           formatted, new certificates and secrets) on free 127.0.0.1 ports,
#           wait until it answers, print its PLAINTEXT bootstrap address
#           ("127.0.0.1:PORT") as the last line of stdout (everything else
#           goes to stderr) and write it to $KORD_KAFKA_DIR/bootstrap. If a
#           broker started by this script is already running, just print its
#           address.
#   stop    stop that broker (SIGTERM, SIGKILL after a grace period); exit 0
#           when nothing is running. Config and data stay until the next start.
#   restart stop the broker as `stop` does (if it runs), start it again with
#           the same config, ports and data (no wipe, no format), wait until it
#           answers and print its bootstrap address like start. For tests that
#           stop and start the broker mid-run. Certificates, secrets and the
#           client files below stay as start wrote them.
#   resume  start a stopped broker from its existing config and data (same
#           ports, certificates and secrets), like the second half of
#           restart; print its address as start does; if it already runs,
#           just print its address.
#   kill    SIGKILL the broker (a crash): data stays, `resume` brings it back
#   status  print the bootstrap address if running, exit 1 otherwise
#
# Listeners (all on 127.0.0.1; the ports are chosen free at start and kept
# by restart/resume; write_props lists them in one place):
#   PLAINTEXT       the normal bootstrap address, printed by start
#   PROXIED         for a fault-injecting proxy (internal/rig/faultproxy): the
#                   broker binds BACKEND but advertises FRONT, where nothing
#                   listens until a test runs a proxy there forwarding to
#                   BACKEND. A client that bootstraps at FRONT learns FRONT as
#                   the broker's address from every metadata response, so all
#                   its traffic goes through the proxy. $KORD_KAFKA_DIR/proxy
#                   holds "127.0.0.1:FRONT 127.0.0.1:BACKEND" (one line) while
#                   the broker runs.
#   SASL_SSL        SASL_SSL: TLS (server certificate for 127.0.0.1 and
#                   localhost, signed by the test CA) + SCRAM-SHA-512 or
#                   SCRAM-SHA-256 as user "kord". PLAIN is not enabled on any
#                   listener (tests use it as a mechanism the broker refuses).
#   SSL             SSL with client certificates required (mTLS): the client
#                   must present a certificate signed by the test CA
#   SASL_PLAINTEXT  SASL_PLAINTEXT: SCRAM-SHA-512 or SCRAM-SHA-256, no TLS
#   SSL_EXPIRED     SSL (no client certificate) whose server certificate is
#                   signed by the test CA but expired in 2020
#   SSL_BADHOST     SSL (no client certificate) whose server certificate is
#                   valid and signed by the test CA, but for DNS:wrong.invalid
#                   only: verifying the host 127.0.0.1 fails
#   CONTROLLER      the KRaft controller, not advertised to clients
# Inter-broker traffic uses PLAINTEXT. There is no authorizer: an
# authenticated client may do anything.
#
# Secured listeners' files, written by start (new certificates and fresh
# random secrets, "kordpw-" + 20 letters/digits, each time) and kept by
# restart/resume/stop/kill; the ones holding secrets or keys are mode 0600:
#   $KORD_KAFKA_DIR/security   key=value lines for tests: sasl_ssl, ssl,
#       sasl_plaintext, ssl_expired, ssl_badhost (each "127.0.0.1:PORT"),
#       user (kord), password (its SCRAM password), store_password (of every
#       .p12/.jks store), key_password (of client-enc*.pem and of the key
#       entry in keystore.jks), tls_dir (absolute path of the dir below)
#   $KORD_KAFKA_DIR/client-sasl_ssl.properties, client-ssl.properties,
#   client-sasl_plaintext.properties   Java client configs (bootstrap.servers,
#       security.protocol, sasl.*, ssl.* with the PKCS12 stores) for those
#       listeners, as a Java/Flink user would write them
#   $KORD_KAFKA_DIR/tls/   made with openssl and keytool, ECDSA P-256 keys,
#       all files 0600 (ca-db/ holds the CA's working files and make.log):
#       ca.pem, ca-key.pem          the test CA that signs every cert below
#       other-ca.pem, other-ca-key.pem   an unrelated CA nothing trusts
#       server-cert.pem, server-key.pem  SAN IP:127.0.0.1, DNS:localhost
#       expired-cert.pem, expired-key.pem   same SAN, valid only in Jan 2020
#       badhost-cert.pem, badhost-key.pem   SAN DNS:wrong.invalid
#       {server,expired,badhost}-keystore.pem   the broker's PEM key stores:
#                                   NAME-key.pem then NAME-cert.pem
#       client-cert.pem, client-key.pem  CN=kord-client (clientAuth), the key
#                                   as unencrypted PKCS#8
#       client.pem                  client-key.pem then client-cert.pem (a
#                                   Java PEM key store: no ssl.key.password)
#       client-enc.pem              the key as PKCS#8 encrypted with
#                                   key_password, then the cert: a Java PEM
#                                   key store with ssl.key.password. Scheme
#                                   pbeWithSHA1And3-KeyTripleDES-CBC, as
#                                   Java 17 can't decrypt PBES2 (see
#                                   tls_files)
#       client-enc-pbes2.pem        likewise, PBES2 (PBKDF2-HMAC-SHA256,
#                                   AES-256-CBC): OpenSSL 3's default; Kafka
#                                   on Java 17 can't read it
#       keystore.p12                client key + cert (+ CA), alias
#                                   kord-client, store_password (also the
#                                   key's); made by openssl, readable by
#                                   Java and OpenSSL 3
#       keystore.jks                the same entry as JKS: store_password,
#                                   key entry password key_password
#       truststore.p12, truststore.jks   the CA as a trusted certificate
#                                   (alias kord-ca), store_password
#
# Environment (all optional):
#   KORD_KAFKA_VERSION        Kafka version to fetch (default 4.4.0)
#   KORD_CACHE                cache root (default $HOME/.cache/kord); jars go
#                             to $KORD_CACHE/kafka-<version>/libs
#   KORD_KAFKA_DIR            state dir: config, data, log, pid, ports,
#                             bootstrap, proxy, security, client-*.properties,
#                             tls/ (default /tmp/kord-kafka); its data,
#                             certificates and secrets are replaced on every
#                             start (not on restart or resume)
#   KORD_KAFKA_START_TIMEOUT  seconds to wait for the broker to answer (90)
#   KORD_KAFKA_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL (20)
#   KORD_KAFKA_HEAP_OPTS      broker heap flags (default "-Xmx1g -Xms512m")
#   KORD_KAFKA_LOG_LEVEL      broker log level (default INFO)
#   JAVA_HOME                 java (and keytool) to use (default: java on
#                             PATH, and the keytool beside it)
# Also needed: openssl (1.1.1 or 3.x) for the certificates.
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
DAEMON=broker
# shellcheck source=lib/proc.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/proc.sh"
HEAP_OPTS=${KORD_KAFKA_HEAP_OPTS:--Xmx1g -Xms512m}
LOG_LEVEL=${KORD_KAFKA_LOG_LEVEL:-INFO}
JAVA=java
[[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]] && JAVA=$JAVA_HOME/bin/java
# keytool from the same JDK as java.
KEYTOOL=$(dirname "$(readlink -f "$(command -v "$JAVA")" 2>/dev/null || echo /)")/keytool
[[ -x $KEYTOOL ]] || KEYTOOL=keytool

# Files in the state dir. Only these are ever deleted, never the dir itself,
# so a KORD_KAFKA_DIR pointing somewhere precious loses nothing else.
PROPS=$STATE/server.properties
DATA=$STATE/data
LOG=$STATE/broker.log
PIDFILE=$STATE/broker.pid
PORTS=$STATE/ports         # the ports of this config, kept by stop/kill
BOOTSTRAP=$STATE/bootstrap # written when ready, removed by stop/kill
PROXYFILE=$STATE/proxy     # likewise: "127.0.0.1:FRONT 127.0.0.1:BACKEND"
# Written by start, kept by stop/kill/restart/resume:
TLS=$STATE/tls             # certificates, keys and stores
SECURITY=$STATE/security   # key=value: secured listeners, secrets, tls_dir
CLIENT_PROPS=$STATE/client # + "-<listener>.properties": Java client configs

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

# ---------------------------------------------------------------- security

# The secured listeners' user and secrets, new at each start: kord's SCRAM
# password, the password of every .p12/.jks store, the password of the
# encrypted keys (and of the key entry in keystore.jks).
SCRAM_USER=kord
SCRAM_PW='' STORE_PW='' KEY_PW=''

# A random secret that tests can grep logs for: "kordpw-" + 20 letters/digits.
secret() {
    local s=''
    while ((${#s} < 20)); do s+=$(openssl rand -base64 32 | tr -dc 'A-Za-z0-9'); done
    echo "kordpw-${s:0:20}"
}

new_secrets() {
    SCRAM_PW=$(secret)
    STORE_PW=$(secret)
    KEY_PW=$(secret)
}

# Write stdin to file $1, readable and writable by its owner only.
private() { (umask 077 && cat >"$1") && chmod 600 "$1"; }

# Make the test CA and every certificate, key and store listed at the top of
# this file in $TLS, replacing what was there. ECDSA P-256 keys are made in
# milliseconds; keytool's three JVM starts, run at once, are most of the time.
make_tls() {
    local t0=${EPOCHREALTIME/[.,]/} pid
    command -v openssl >/dev/null || die "openssl is needed to make the test certificates"
    rm -rf "$TLS"
    (umask 077 && mkdir -p "$TLS/ca-db")
    # In the background, so that errexit applies inside (it would not in
    # the subshell of an `if` or `||`).
    (umask 077; cd "$TLS"; tls_files) >"$TLS/ca-db/make.log" 2>&1 &
    pid=$!
    if ! wait "$pid"; then
        tail -n 40 "$TLS/ca-db/make.log" >&2
        die "making the test certificates in $TLS failed (full output: $TLS/ca-db/make.log)"
    fi
    log "made test CA, certificates and stores in $TLS in $(((${EPOCHREALTIME/[.,]/} - t0) / 1000))ms"
}

# The body of make_tls, run in $TLS with umask 077 and errexit.
tls_files() {
    cat >ca-db/openssl.cnf <<'EOF'
# Written by scripts/kafka.sh: the test CA (openssl ca) and its extensions.
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
default_ca = test_ca
[test_ca]
database = ca-db/index.txt
serial = ca-db/serial
new_certs_dir = ca-db
default_md = sha256
policy = any_name
unique_subject = no
copy_extensions = none
[any_name]
commonName = supplied
[v3_ca]
basicConstraints = critical, CA:true
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[badhost]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:wrong.invalid
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
    : >ca-db/index.txt
    local cnf=ca-db/openssl.cnf name pids=() pid
    local kt=("$KEYTOOL" -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC)

    openssl req -config $cnf -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout ca-key.pem -out ca.pem -days 3650 -extensions v3_ca -subj "/CN=kord test CA"
    openssl req -config $cnf -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout other-ca-key.pem -out other-ca.pem -days 3650 -extensions v3_ca \
        -subj "/CN=kord other CA (trusted by nothing)"
    # NAME CN EXTENSIONS VALIDITY...: NAME-key.pem (unencrypted PKCS#8) and
    # NAME-cert.pem, signed by the CA.
    tls_leaf server "kord test broker" server -days 3650
    tls_leaf expired "kord test broker (expired)" server -startdate 20200101000000Z -enddate 20200201000000Z
    tls_leaf badhost wrong.invalid badhost -days 3650
    tls_leaf client kord-client client -days 3650

    # PEM key stores: the key, then the certificate.
    for name in server expired badhost client; do
        cat "$name-key.pem" "$name-cert.pem" >"$name-keystore.pem"
    done
    mv client-keystore.pem client.pem
    # Java (17) decrypts PKCS#8 keys only with a PBES1 or PKCS#12 scheme:
    # with PBES2, OpenSSL's default, Kafka fails with "PBES2 SecretKeyFactory
    # not available" (JDK-8231581). So client-enc.pem, what a Java user has,
    # uses the PKCS#12 one, pbeWithSHA1And3-KeyTripleDES-CBC;
    # client-enc-pbes2.pem has OpenSSL 3's default, for non-Java clients.
    { openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES -in client-key.pem -passout "pass:$KEY_PW" &&
        cat client-cert.pem; } >client-enc.pem
    { openssl pkcs8 -topk8 -v2 aes-256-cbc -v2prf hmacWithSHA256 -in client-key.pem -passout "pass:$KEY_PW" &&
        cat client-cert.pem; } >client-enc-pbes2.pem
    openssl pkcs12 -export -name kord-client -inkey client-key.pem -in client-cert.pem \
        -certfile ca.pem -passout "pass:$STORE_PW" -out keystore.p12

    # keytool makes the stores with a trusted-certificate entry (Java marks
    # it with its own PKCS12 attribute) and the JKS ones.
    "${kt[@]}" -importcert -noprompt -alias kord-ca -file ca.pem \
        -keystore truststore.p12 -storetype PKCS12 -storepass "$STORE_PW" &
    pids+=($!)
    "${kt[@]}" -importcert -noprompt -alias kord-ca -file ca.pem \
        -keystore truststore.jks -storetype JKS -storepass "$STORE_PW" &
    pids+=($!)
    "${kt[@]}" -importkeystore -noprompt -srckeystore keystore.p12 -srcstoretype PKCS12 \
        -srcstorepass "$STORE_PW" -srcalias kord-client -destkeystore keystore.jks \
        -deststoretype JKS -deststorepass "$STORE_PW" -destkeypass "$KEY_PW" -destalias kord-client &
    pids+=($!)
    for pid in "${pids[@]}"; do wait "$pid"; done
}

# NAME CN EXTENSIONS VALIDITY...: see tls_files.
tls_leaf() {
    local name=$1 cn=$2 ext=$3 cnf=ca-db/openssl.cnf
    shift 3
    openssl req -config $cnf -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$name-key.pem" -out "ca-db/$name.csr" -subj "/CN=$cn"
    openssl ca -config $cnf -batch -notext -rand_serial -cert ca.pem -keyfile ca-key.pem \
        -extensions "$ext" -in "ca-db/$name.csr" -out "$name-cert.pem" "$@"
}

# The files clients read: $SECURITY and the Java client configs. Called by
# start once the ports are chosen.
write_client_files() {
    local jaas="org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$SCRAM_USER\" password=\"$SCRAM_PW\";"
    private "$SECURITY" <<EOF
sasl_ssl=127.0.0.1:$SASL_SSL_PORT
ssl=127.0.0.1:$SSL_PORT
sasl_plaintext=127.0.0.1:$SASL_PLAINTEXT_PORT
ssl_expired=127.0.0.1:$SSL_EXPIRED_PORT
ssl_badhost=127.0.0.1:$SSL_BADHOST_PORT
user=$SCRAM_USER
password=$SCRAM_PW
store_password=$STORE_PW
key_password=$KEY_PW
tls_dir=$TLS
EOF
    private "$CLIENT_PROPS-sasl_ssl.properties" <<EOF
# Written by scripts/kafka.sh: Java client config for the SASL_SSL listener.
bootstrap.servers=127.0.0.1:$SASL_SSL_PORT
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=$jaas
ssl.truststore.location=$TLS/truststore.p12
ssl.truststore.password=$STORE_PW
ssl.truststore.type=PKCS12
EOF
    private "$CLIENT_PROPS-ssl.properties" <<EOF
# Written by scripts/kafka.sh: Java client config for the SSL (mTLS) listener.
bootstrap.servers=127.0.0.1:$SSL_PORT
security.protocol=SSL
ssl.truststore.location=$TLS/truststore.p12
ssl.truststore.password=$STORE_PW
ssl.truststore.type=PKCS12
ssl.keystore.location=$TLS/keystore.p12
ssl.keystore.password=$STORE_PW
ssl.keystore.type=PKCS12
ssl.key.password=$STORE_PW
EOF
    private "$CLIENT_PROPS-sasl_plaintext.properties" <<EOF
# Written by scripts/kafka.sh: Java client config for the SASL_PLAINTEXT listener.
bootstrap.servers=127.0.0.1:$SASL_PLAINTEXT_PORT
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=$jaas
EOF
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

# Kafka cluster ids are 16 random bytes in unpadded base64url; Kafka itself
# avoids ids starting with '-' because they look like a CLI flag.
cluster_id() {
    local id
    while id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'); [[ $id == -* ]]; do :; done
    echo "$id"
}

# Ports of the broker's listeners, set by new_ports or load_ports, kept in
# $PORTS as "key=port" lines (key: the variable's name, lowercase, minus
# "_PORT").
PORT_VARS=(PORT CPORT FRONT BACKEND SASL_SSL_PORT SSL_PORT SASL_PLAINTEXT_PORT SSL_EXPIRED_PORT SSL_BADHOST_PORT)
PORT='' CPORT='' FRONT='' BACKEND=''
SASL_SSL_PORT='' SSL_PORT='' SASL_PLAINTEXT_PORT='' SSL_EXPIRED_PORT='' SSL_BADHOST_PORT=''

port_key() {
    local k=${1,,}
    [[ $k == port ]] && echo port || echo "${k%_port}"
}

new_ports() {
    local v p taken=()
    for v in "${PORT_VARS[@]}"; do
        p=$(free_port "${taken[@]}")
        taken+=("$p")
        printf -v "$v" %s "$p"
    done
    for v in "${PORT_VARS[@]}"; do
        echo "$(port_key "$v")=${!v}"
    done >"$PORTS"
}

load_ports() {
    local k v var
    for var in "${PORT_VARS[@]}"; do printf -v "$var" %s ''; done
    [[ -f $PORTS ]] || return 1
    while IFS='=' read -r k v; do
        [[ $v =~ ^[0-9]+$ ]] || continue
        for var in "${PORT_VARS[@]}"; do
            [[ $k == "$(port_key "$var")" ]] && printf -v "$var" %s "$v"
        done
    done <"$PORTS"
    for var in "${PORT_VARS[@]}"; do
        [[ -n ${!var} ]] || return 1
    done
}

write_props() {
    # The one place that lists the listeners: name, security protocol, the
    # port it binds, the port it is advertised with ("-": not advertised),
    # the server certificate of a TLS listener ($TLS/<cert>-keystore.pem)
    # and its ssl.client.auth ("-": none).
    local rows=(
        "PLAINTEXT      PLAINTEXT      $PORT                $PORT                -       -"
        "PROXIED        PLAINTEXT      $BACKEND             $FRONT               -       -"
        "SASL_SSL       SASL_SSL       $SASL_SSL_PORT       $SASL_SSL_PORT       server  -"
        "SSL            SSL            $SSL_PORT            $SSL_PORT            server  required"
        "SASL_PLAINTEXT SASL_PLAINTEXT $SASL_PLAINTEXT_PORT $SASL_PLAINTEXT_PORT -       -"
        "SSL_EXPIRED    SSL            $SSL_EXPIRED_PORT    $SSL_EXPIRED_PORT    expired -"
        "SSL_BADHOST    SSL            $SSL_BADHOST_PORT    $SSL_BADHOST_PORT    badhost -"
        "CONTROLLER     PLAINTEXT      $CPORT               -                    -       -"
    )
    local row name proto bind adv cert auth l listeners=() advertised=() protomap=() extra=()
    for row in "${rows[@]}"; do
        read -r name proto bind adv cert auth <<<"$row"
        listeners+=("$name://127.0.0.1:$bind")
        [[ $adv == - ]] || advertised+=("$name://127.0.0.1:$adv")
        protomap+=("$name:$proto")
        l=listener.name.${name,,}
        if [[ $cert != - ]]; then
            # PEM stores take no store password; the key is not encrypted,
            # so no ssl.key.password either.
            extra+=("$l.ssl.keystore.type=PEM" "$l.ssl.keystore.location=$TLS/$cert-keystore.pem")
        fi
        if [[ $auth != - ]]; then
            extra+=("$l.ssl.client.auth=$auth" "$l.ssl.truststore.type=PEM"
                "$l.ssl.truststore.location=$TLS/ca.pem")
        fi
        if [[ $proto == SASL_* ]]; then
            # SCRAM only: the credentials are in the metadata log (added
            # by the format in start).
            extra+=("$l.sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256"
                "$l.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
                "$l.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;")
        fi
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

# The secured listeners' TLS and SASL settings.
$(printf '%s\n' "${extra[@]}")
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
        close_fds
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
    log "secured listeners: SASL_SSL 127.0.0.1:$SASL_SSL_PORT, SSL (mTLS) 127.0.0.1:$SSL_PORT," \
        "SASL_PLAINTEXT 127.0.0.1:$SASL_PLAINTEXT_PORT, SSL_EXPIRED 127.0.0.1:$SSL_EXPIRED_PORT," \
        "SSL_BADHOST 127.0.0.1:$SSL_BADHOST_PORT; addresses and secrets in $SECURITY," \
        "Java client configs in $CLIENT_PROPS-{sasl_ssl,ssl,sasl_plaintext}.properties, certificates in $TLS"
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
        [[ -s $SECURITY ]] || log "warning: it has no secured listeners (started by an older kafka.sh); stop and start it to get them"
        cat "$BOOTSTRAP"
        return 0
    fi
    [[ -z ${pid:-} ]] || stop_pid "$pid" # running but half set up: start over
    fetch

    local attempt t0=$SECONDS from
    rm -f "$SECURITY" "$CLIENT_PROPS"-{sasl_ssl,ssl,sasl_plaintext}.properties
    new_secrets
    make_tls
    for attempt in 1 2 3; do
        rm -rf "$DATA" "$LOG" "$PIDFILE" "$BOOTSTRAP" "$PROXYFILE" "$PORTS" "$PROPS"
        new_ports
        write_props
        write_client_files
        log "formatting storage in $DATA (with SCRAM user $SCRAM_USER)"
        "${TOOL[@]}" kafka.tools.StorageTool format --cluster-id "$(cluster_id)" --config "$PROPS" \
            --add-scram "SCRAM-SHA-512=[name=$SCRAM_USER,password=$SCRAM_PW]" \
            --add-scram "SCRAM-SHA-256=[name=$SCRAM_USER,password=$SCRAM_PW]" >"$LOG" 2>&1 \
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
    [[ -f $PROPS && -d $DATA && -f $PORTS ]] || die "no broker config in $STATE to resume: run \`$0 start\` first"
    grep -q "^listeners=.*PROXIED://" "$PROPS" \
        || die "$PROPS was written by an older kafka.sh (no PROXIED listener): run \`$0 start\` for a fresh broker"
    grep -q "^listeners=.*SSL_BADHOST://" "$PROPS" \
        || die "$PROPS was written by an older kafka.sh (no secured listeners): run \`$0 start\` for a fresh broker"
    load_ports || die "$PORTS is incomplete: run \`$0 start\` for a fresh broker"
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
