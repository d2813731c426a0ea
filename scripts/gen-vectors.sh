#!/usr/bin/env bash
# Regenerates the partitioner conformance vectors
#   partitioner/testdata/murmur2.tsv
#   partitioner/testdata/roundrobin.tsv
# by building and running partitioner/testdata/javagen, a small Java program
# linked against the real org.apache.kafka:kafka-clients jar from Maven Central.
#
# Usage:
#   scripts/gen-vectors.sh                          # kafka-clients version from the pom
#   scripts/gen-vectors.sh -Dkafka.version=4.3.1    # any extra args go to mvn
#   KORD_KAFKA_VERSION=4.3.1 scripts/gen-vectors.sh
#
# Needs Java 11+ and Maven. The output is deterministic: rerunning against the
# same kafka-clients version gives byte-identical files.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
gen="$root/partitioner/testdata/javagen"
testdata="$root/partitioner/testdata"

mvn_args=(-q -B -Dstyle.color=never -f "$gen/pom.xml")
if [[ -n "${KORD_KAFKA_VERSION:-}" ]]; then
  mvn_args+=("-Dkafka.version=$KORD_KAFKA_VERSION")
fi
mvn_args+=("$@")

# The version asked for (last -Dkafka.version wins, as in mvn); the generator
# checks it against the version the resolved jar reports about itself.
expected="${KORD_KAFKA_VERSION:-}"
for arg in "$@"; do
  if [[ "$arg" == -Dkafka.version=* ]]; then
    expected="${arg#-Dkafka.version=}"
  fi
done

classpath_file="$gen/target/runtime-classpath.txt"
mvn "${mvn_args[@]}" compile dependency:build-classpath \
  -Dmdep.includeScope=runtime -Dmdep.outputFile="$classpath_file"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

java -Dkord.expectedKafkaVersion="$expected" \
  -cp "$gen/target/classes:$(cat "$classpath_file")" kord.vectorgen.GenVectors \
  "$tmp/murmur2.tsv" "$tmp/roundrobin.tsv"

mv "$tmp/murmur2.tsv" "$testdata/murmur2.tsv"
mv "$tmp/roundrobin.tsv" "$testdata/roundrobin.tsv"
echo "wrote $testdata/murmur2.tsv and $testdata/roundrobin.tsv" >&2
