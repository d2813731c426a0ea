#!/usr/bin/env bash
# The Apache Flink peer of kord's benchmark suite (../CONTRACT.md).
#
#   run.sh --brokers HOST:PORT --input TOPIC --output TOPIC --id NAME \
#          --parallelism N --commit-ms 1000 [--checkpoint-dir DIR] \
#          [--stop-timeout-ms MS] [--lake DIR [--lake-compact-ms MS]] [--verbose]
#
# Builds the shaded jar with Maven when it is missing or older than the
# sources, then execs the JVM, so that the process the suite started is the
# peer itself. FLINK_PEER_JAVA_OPTS replaces the JVM flags below.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
jar="$here/target/kord-bench-flink.jar"

if ! command -v java >/dev/null 2>&1; then
	echo "flink peer: java not found on PATH (Java 17 or later is needed)" >&2
	exit 1
fi

# target/.built is touched after a build succeeds: a build cut short (the
# suite's SIGTERM, a timeout) can leave a jar that is new but incomplete.
stamp="$here/target/.built"
stale=0
if [[ ! -f "$jar" || ! -f "$stamp" || "$jar" -nt "$stamp" ]]; then
	stale=1
elif [[ -n "$(find "$here/pom.xml" "$here/src" -newer "$stamp" -print -quit)" ]]; then
	stale=1
fi
if ((stale)); then
	if ! command -v mvn >/dev/null 2>&1; then
		echo "flink peer: mvn not found on PATH, and $jar needs building" >&2
		exit 1
	fi
	rm -f "$stamp"
	# Maven's output goes to stderr: stdout carries only "ready". A signal
	# during the build stops Maven too.
	(cd "$here" && exec mvn -q -B -Dstyle.color=never package -DskipTests) >&2 &
	mvn_pid=$!
	trap 'kill "$mvn_pid" 2>/dev/null; exit 143' TERM INT
	if ! wait "$mvn_pid"; then
		echo "flink peer: the Maven build failed" >&2
		exit 1
	fi
	trap - TERM INT
	touch "$stamp"
fi

# -Xmx1g: the job, the MiniCluster and the keyed state (Flink's hashmap
# state backend keeps it on the heap) share this JVM. The --add-opens are
# among those Flink's own scripts give Java 17, for Kryo and Flink's
# closure cleaner.
java_opts=${FLINK_PEER_JAVA_OPTS:-"-Xms256m -Xmx1g -XX:+UseG1GC \
	--add-opens=java.base/java.lang=ALL-UNNAMED \
	--add-opens=java.base/java.util=ALL-UNNAMED \
	--add-opens=java.base/java.lang.reflect=ALL-UNNAMED \
	--add-opens=java.base/java.nio=ALL-UNNAMED \
	--add-opens=java.base/sun.nio.ch=ALL-UNNAMED"}

# shellcheck disable=SC2086 # java_opts is a list of flags
exec java $java_opts -jar "$jar" "$@"
