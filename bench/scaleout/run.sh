#!/usr/bin/env bash
# Events/s of the main job (examples/userbehavior, partition mode,
# exactly-once, checkpoint every 1 s) as 1, 2 and 3 processes of one job on
# this machine, against a broker, rounds alternated: for each round and each
# process count, a fresh input topic of EVENTS events is produced, then the
# processes run until every result is committed (processing_ms: first start
# to last exit), then the output is verified. Prints one line per run and a
# table of medians. Usage: bench/scaleout/run.sh BROKERS [ROUNDS] [EVENTS]
set -euo pipefail
brokers=${1:?usage: bench/scaleout/run.sh BROKERS [ROUNDS] [EVENTS]}
rounds=${2:-3}
events=${3:-300000}
cd "$(dirname "$0")/../.."
bin=$(mktemp -d)/userbehavior
go build -o "$bin" ./examples/userbehavior
declare -A ms
for r in $(seq 1 "$rounds"); do
  for n in 1 2 3; do
    out=$("$bin" -brokers "$brokers" -events "$events" -users 10000 -partitions 12 -processes "$n" -crash=false -quiet 2>/dev/null)
    echo "round $r processes $n: $out"
    echo "$out" | grep -q "duplicates=0 order_violations=0 wrong_counts=0 missing=0" || { echo "verification failed" >&2; exit 1; }
    p=$(echo "$out" | sed -n 's/.*processing_ms=\([0-9]*\).*/\1/p')
    ms[$n]="${ms[$n]:-} $p"
  done
done
echo
echo "| processes | processing ms (each round) | median events/s |"
echo "|---|---|---|"
for n in 1 2 3; do
  med=$(echo ${ms[$n]} | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2))}')
  echo "| $n |${ms[$n]} | $(( events * 1000 / med )) |"
done
