#!/usr/bin/env bash
# Parquet landing beside Kafka-to-Kafka, kord against Apache Flink: one
# input topic of EVENTS events, then bench/abtime runs, in turn, A B A B ...,
# ROUNDS times each:
#   A: kord's main job (examples/userbehavior -phase process, exactly-once,
#      checkpoint every 1 s, no crash) with its results also landed as
#      Parquet (zstd) by filesink, one file per action a minute
#      (-lake DIR -lake-compact 1m);
#   B: the Flink peer (bench/peers/flink, parallelism 2, checkpoint every
#      1 s, exactly-once Kafka sink) with its results also landed as Parquet
#      (zstd) by Flink's FileSink, bucketed by action, compacted every 60
#      checkpoints (--lake DIR, --lake-compact-ms 60000).
# Every run reads the whole input into a fresh output topic, checkpoint
# directory and lake. kord's -phase process ends by itself once its output
# is complete; the Flink peer runs until SIGTERM, so flinkdriver (beside
# this script) creates its output topic, starts it, counts its output with
# a read_committed reader and sends SIGTERM once all EVENTS results are
# committed (a drained stop: Flink's compaction publishes what it holds).
# bench/abtime prints wall and CPU seconds and peak memory of each and the
# A/B ratio pair by pair; the files each lake holds are listed after.
# Usage: bench/lake/flink.sh BROKERS [ROUNDS] [EVENTS]
set -euo pipefail
brokers=${1:?usage: bench/lake/flink.sh BROKERS [ROUNDS] [EVENTS]}
rounds=${2:-5}
events=${3:-500000}
cd "$(dirname "$0")/../.."
root=$PWD
work=$(mktemp -d /tmp/kord-bench-lake-flink.XXXXXX)
bin=$work/userbehavior
driver=$work/flinkdriver
go build -o "$bin" ./examples/userbehavior
go build -o "$driver" ./bench/lake/flinkdriver
go build -o "$work/abtime" ./bench/abtime
# Build the peer now, not in a timed run: run.sh builds it when it is stale,
# then the peer, given no flags, exits 2.
set +e
out=$(bench/peers/flink/run.sh 2>&1)
rc=$?
set -e
if ((rc != 2)); then
  echo "$out" >&2
  echo "bench/lake/flink.sh: the Flink peer does not build or start (exit $rc)" >&2
  exit 1
fi
topic=bench-lake-flink-$(date +%s)
"$bin" -brokers "$brokers" -input "$topic" -phase produce -events "$events" -users 10000 -partitions 12 -quiet >/dev/null
# Each run: a fresh output topic, checkpoint directory and lake ($$: the
# shell's pid, then the exec'd program's).
kord="exec $bin -brokers $brokers -input $topic -phase process -events $events -users 10000 -crash=false -interval 1s -reset -quiet"
flink="exec $driver -brokers $brokers -input $topic -output $topic.flink-\$\$ -events $events -- $root/bench/peers/flink/run.sh --brokers $brokers --input $topic --output $topic.flink-\$\$ --id bench-lake-flink-\$\$ --parallelism 2 --commit-ms 1000 --checkpoint-dir $work/flink-ck-\$\$ --lake $work/flink-lake-\$\$"
"$work/abtime" -n "$rounds" \
  -a "$kord -output $topic.kord-\$\$ -checkpoints $work/kord-ck-\$\$ -lake $work/kord-lake-\$\$ -lake-compact 1m >>$work/a.log 2>&1" \
  -b "$flink >>$work/b.log 2>&1"
echo
echo "events: $events; the lakes, one per run (the warm-ups' included): published files (hidden ones: staged or in progress, left over)"
for l in "$work"/kord-lake-* "$work"/flink-lake-*; do
  sizes=$(find "$l" -type f -name '*.parquet' ! -name '.*' -printf '%s\n' | sort -n)
  echo "$(basename "$l"): $(grep -c . <<<"$sizes") files, $(awk '{s += $1} END {print s + 0}' <<<"$sizes") bytes (hidden: $(find "$l" -type f -name '.*' | wc -l)): $(tr '\n' ' ' <<<"$sizes")"
done
echo "logs: $work/a.log (kord) $work/b.log (Flink)"
