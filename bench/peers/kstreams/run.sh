#!/usr/bin/env bash
# run.sh runs the Kafka Streams peer of kord's benchmark suite, as
# bench/peers/CONTRACT.md describes:
#
#   run.sh --brokers HOST:PORT --input TOPIC --output TOPIC --id NAME \
#       --parallelism N --commit-ms 1000 [--store rocksdb|memory] [--state-dir DIR]
#
# It builds target/kstreams-peer.jar with Maven when the jar is missing or
# older than pom.xml or a source file, then execs java on it, so that the
# process the suite started is the JVM itself. KSTREAMS_JAVA_OPTS replaces
# the JVM flags (default: -Xms256m -Xmx1g -XX:+UseG1GC).
set -euo pipefail

dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
jar=$dir/target/kstreams-peer.jar

if ! command -v java >/dev/null 2>&1; then
	echo "kstreams run.sh: java not found on PATH (Java 17 or newer is needed)" >&2
	exit 1
fi

stale=
if [[ ! -f $jar ]]; then
	stale=1
elif [[ -n $(find "$dir/pom.xml" "$dir/src" -newer "$jar" -print -quit) ]]; then
	stale=1
fi
if [[ -n $stale ]]; then
	if ! command -v mvn >/dev/null 2>&1; then
		echo "kstreams run.sh: $jar needs building and mvn (Maven) is not on PATH" >&2
		exit 1
	fi
	# Maven's output goes to stderr: stdout carries only "ready".
	(cd "$dir" && mvn -q -B package) >&2 || {
		echo "kstreams run.sh: mvn package failed" >&2
		exit 1
	}
fi

# shellcheck disable=SC2086 # KSTREAMS_JAVA_OPTS is a list of flags
exec java ${KSTREAMS_JAVA_OPTS:--Xms256m -Xmx1g -XX:+UseG1GC} -jar "$jar" "$@"
