#!/usr/bin/env bash
# Parquet landing beside Kafka-to-Kafka: the main job (examples/userbehavior,
# partition mode, exactly-once, checkpoint every 1 s, no crash) processing
# one input topic of EVENTS events, A with its results also landed as
# Parquet (zstd) by filesink (-lake, one file per action a minute), B
# Kafka to Kafka only. bench/abtime runs them in turn, A B A B ..., ROUNDS
# times each, every run from the input's start (-reset) into a fresh output
# topic and lake, and prints wall and CPU seconds with the A/B ratio pair by
# pair. events/s = EVENTS / wall; CPU per event = cpu / EVENTS. The files a
# run left are listed after.
# Usage: bench/lake/run.sh BROKERS [ROUNDS] [EVENTS]
set -euo pipefail
brokers=${1:?usage: bench/lake/run.sh BROKERS [ROUNDS] [EVENTS]}
rounds=${2:-5}
events=${3:-500000}
cd "$(dirname "$0")/../.."
work=$(mktemp -d /tmp/kord-bench-lake.XXXXXX)
bin=$work/userbehavior
go build -o "$bin" ./examples/userbehavior
go build -o "$work/abtime" ./bench/abtime
topic=bench-lake-$(date +%s)
"$bin" -brokers "$brokers" -input "$topic" -phase produce -events "$events" -users 10000 -partitions 12 -quiet >/dev/null
# Each run: a fresh output topic, checkpoint directory and lake ($$: the
# shell's pid), and the job forgotten first, so that it reads the whole
# input again.
run="exec $bin -brokers $brokers -input $topic -phase process -events $events -users 10000 -crash=false -interval 1s -reset -quiet"
"$work/abtime" -n "$rounds" \
  -a "$run -output $topic.out-\$\$ -checkpoints $work/ck-\$\$ -lake $work/lake-\$\$ -lake-compact 1m >>$work/a.log 2>&1" \
  -b "$run -output $topic.out-\$\$ -checkpoints $work/ck-\$\$ >>$work/b.log 2>&1"
echo
echo "events: $events; the lakes (one per run of A):"
for l in "$work"/lake-*; do
  echo "$(find "$l" -name '*.parquet' | wc -l) files, $(du -sb "$l" | cut -f1) bytes: $(find "$l" -name '*.parquet' -printf '%s ' | tr ' ' '\n' | sort -n | tr '\n' ' ')"
done
echo "logs: $work/a.log $work/b.log"
