#!/usr/bin/env bash
# The hop's cost: userbehavior -keyby as one process (records keyed by
# uuid shuffled in process) against -keyby -processes 1 (one child process
# of a job of several: the records cross the job's hop topic, in its
# transactions, before the count stage), the process phase timed alone,
# alternated, 5 pairs, on the dev broker.
set -euo pipefail
B=$1; N=${2:-200000}; UB=${UB:-/tmp/ub-hop}  # go build -o /tmp/ub-hop ./examples/userbehavior
for i in 1 2 3 4 5; do
  for v in onepro hop; do
    T=hop.$v.$i.$(date +%s%N)
    $UB -phase produce -brokers $B -input $T -events $N -users 10000 -partitions 12 -quiet -seed $i >/dev/null
    extra=""; [ $v = hop ] && extra="-processes 1"
    rm -rf /tmp/hopck.$v
    /usr/bin/time -f "$v pair=$i wall=%e cpu=%U+%S maxrss_kb=%M" $UB -phase process -brokers $B -input $T -events $N -users 10000 -partitions 12 -keyby $extra -crash=false -checkpoints /tmp/hopck.$v -quiet 2>&1 >/dev/null | tail -1
  done
done
