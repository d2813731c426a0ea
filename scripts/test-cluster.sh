#!/usr/bin/env bash
# The three-broker tier: kord's tests that need a cluster like production's
# (scripts/kafka-cluster.sh: three KRaft nodes, replication factor 3,
# min.insync.replicas=2) and take its brokers down under a running job:
#   TestClusterScript (internal/rig/kafkatest): the script's own commands;
#   TestCluster* (kafkaio): broker faults during an exactly-once run, and a
#   job on three processes under process and broker faults; by default
#   only the scaled job's and one broker fault, every one with
#   KORD_CLUSTER_LONG=1 (below).
# They run with KORD_REQUIRE_KAFKA_CLUSTER=1, so they fail, not skip, when
# the cluster is missing; a cluster that does not start fails the run.
#
# The cluster is the one named by KORD_KAFKA_CLUSTER (its state directory in
# KORD_KAFKA_CLUSTER_DIR) when set; otherwise this script starts one in a
# new directory under /tmp and stops it afterwards. Three brokers take about
# 1 GB of memory and much of 2 cores: scripts/test.sh and .ci/run run this
# only after their single broker has stopped.
#
# go test's events and reports go to $KORD_TEST_LOGS (cluster-*.json and
# .txt), as scripts/test.sh keeps its own. Arguments are passed to go test.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS

stop=''
trap '[ -z "$stop" ] || scripts/kafka-cluster.sh stop >&2 || true' EXIT
if [ -z "${KORD_KAFKA_CLUSTER:-}" ]; then
	KORD_KAFKA_CLUSTER_DIR="${KORD_KAFKA_CLUSTER_DIR:-$(mktemp -d /tmp/kord-kafka-cluster-test.XXXXXX)}"
	export KORD_KAFKA_CLUSTER_DIR
	stop=1
	KORD_KAFKA_CLUSTER="$(scripts/kafka-cluster.sh start)"
fi
export KORD_KAFKA_CLUSTER KORD_REQUIRE_KAFKA_CLUSTER=1
echo "test-cluster.sh: three brokers at $KORD_KAFKA_CLUSTER (started in $((SECONDS - t0))s)" >&2

KORD_TEST_LOGS="${KORD_TEST_LOGS:-$(mktemp -d /tmp/kord-test-logs.XXXXXX)}"
mkdir -p "$KORD_TEST_LOGS"
go build -o "$KORD_TEST_LOGS/testlog" ./internal/rig/testlog
gotest() {
	local name=$1
	shift
	go test -json "$@" </dev/null | "$KORD_TEST_LOGS/testlog" -json "$KORD_TEST_LOGS/$name.json" -report "$KORD_TEST_LOGS/$name.txt"
}
status=0
gotest cluster-script -race -count=1 -timeout 10m -run '^TestClusterScript$' "$@" ./internal/rig/kafkatest/ || status=$?
# CI's time is short: by default the tier runs the scaled job's faults and,
# of the broker faults, an input partition's leader killed (the scaled job's
# run stops the commit group's coordinator too); KORD_CLUSTER_LONG=1 runs
# every broker fault
# (about 5 minutes more: bench/RESULTS.md, "A cluster of three brokers").
run='^TestCluster'
if [ "${KORD_CLUSTER_LONG:-0}" != 1 ]; then
	run='^(TestClusterScaledFaults|TestClusterBrokerFaults)$/^input-leader-killed$'
fi
gotest cluster-kafkaio -race -count=1 -timeout 25m -tags kordfailpoints -run "$run" "$@" ./kafkaio/ || status=$?
echo "test-cluster.sh: the three-broker tier took $((SECONDS - t0))s (reports in $KORD_TEST_LOGS)" >&2
exit $status
