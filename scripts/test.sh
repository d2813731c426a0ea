#!/usr/bin/env bash
# Runs every test of the project:
#   gofmt and go vet, of the plain build and of the build with failure
#   points (the kordfailpoints tag);
#   go test -race ./... in kord's module, where each Kafka test runs on the
#   in-process kfake cluster and on a real Apache Kafka broker, and the
#   crash and fault tests (files built only with the tag) on tagged
#   binaries;
#   the engine's 1,000 seeded failure runs and the window model tests' 300
#   seeds each, and the pooled decoder's allocation count, without the race
#   detector;
#   the tests of the separate Go modules under bench/ (the peers, the suite).
# The real broker is the one named by KORD_KAFKA_BROKERS when set; otherwise
# this script starts one with scripts/kafka.sh (fetched with Maven) and stops
# it afterwards. KORD_REQUIRE_KAFKA=1 is always set, so the run fails, not
# skips, when the broker-backed tests cannot run.
# Likewise the Hive Metastore (scripts/hive-metastore.sh, from Maven) that
# filesink/hive and examples/tohive register partitions in, and stop and
# resume for outages: the one named by KORD_HIVE_METASTORE (with its run
# directory in KORD_HIVE_DIR) when set, otherwise one started here and
# stopped afterwards; KORD_REQUIRE_HIVE=1 is always set.
# Likewise the independent readers that the file formats' tests read files
# back with (DuckDB and fastavro, internal/rig/duckdb): the python named by
# KORD_DUCKDB_PYTHON when set, otherwise the one scripts/duckdb.sh installs
# from PyPI into a cache (once; a failed install fails the run), and
# KORD_REQUIRE_DUCKDB=1 is always set.
# Last, once the single broker and the Metastore this script started are
# stopped (the machine is small), the three-broker tier
# (scripts/test-cluster.sh): the tests that take brokers of a cluster of
# three down under a running job, on the cluster named by KORD_KAFKA_CLUSTER
# or one it starts and stops; KORD_REQUIRE_KAFKA_CLUSTER=1 there too.
# KORD_CLUSTER_TIER=0 leaves it out (.ci/run runs it itself, after stopping
# the broker it gave this script).
set -euo pipefail
cd "$(dirname "$0")/.."
# The cluster named by KORD_KAFKA_CLUSTER is the tier's alone: kept aside
# until it runs, so that the lanes' TestCluster* tests skip rather than run
# beside the single broker.
cluster="${KORD_KAFKA_CLUSTER:-}"
unset KORD_KAFKA_CLUSTER

# What this script started, stopped at exit or before the three-broker
# tier, whichever comes first.
stops=()
stop_started() {
	local s
	for s in "${stops[@]}"; do eval "$s"; done
	stops=()
}
trap stop_started EXIT
if [ -z "${KORD_KAFKA_BROKERS:-}" ]; then
	KORD_KAFKA_DIR="${KORD_KAFKA_DIR:-$(mktemp -d /tmp/kord-kafka-test.XXXXXX)}"
	export KORD_KAFKA_DIR
	stops+=('scripts/kafka.sh stop >&2 || true')
	KORD_KAFKA_BROKERS="$(scripts/kafka.sh start)"
fi
export KORD_KAFKA_BROKERS KORD_REQUIRE_KAFKA=1
echo "test.sh: real Kafka broker at $KORD_KAFKA_BROKERS" >&2
if [ -z "${KORD_DUCKDB_PYTHON:-}" ]; then
	KORD_DUCKDB_PYTHON="$(scripts/duckdb.sh)"
fi
export KORD_DUCKDB_PYTHON KORD_REQUIRE_DUCKDB=1
echo "test.sh: DuckDB and fastavro through $KORD_DUCKDB_PYTHON" >&2
if [ -z "${KORD_HIVE_METASTORE:-}" ]; then
	KORD_HIVE_DIR="${KORD_HIVE_DIR:-$(mktemp -d /tmp/kord-hive-test.XXXXXX)}"
	export KORD_HIVE_DIR
	stops+=('scripts/hive-metastore.sh stop >&2 || true')
	KORD_HIVE_METASTORE="$(scripts/hive-metastore.sh start)"
fi
export KORD_HIVE_METASTORE KORD_REQUIRE_HIVE=1
echo "test.sh: Hive Metastore at $KORD_HIVE_METASTORE (run dir ${KORD_HIVE_DIR:-not given: outage tests fail})" >&2

unformatted="$(gofmt -l $(find . -name '*.go' -not -path './partitioner/testdata/*'))"
if [ -n "$unformatted" ]; then
	echo "test.sh: not gofmt-formatted:" >&2
	echo "$unformatted" >&2
	exit 1
fi
# Two builds: the plain one users get, and the one with kord's failure
# points (the kordfailpoints tag), which only the crash and fault tests use.
go vet ./...
go vet -tags kordfailpoints ./...
# Every go test goes through internal/rig/testlog: it prints what go test
# prints, and keeps each run's events (go test -json) and a report (package
# times, the slowest tests, each failure's whole output) in $KORD_TEST_LOGS,
# a new directory under /tmp unless set: what a run that failed once left.
KORD_TEST_LOGS="${KORD_TEST_LOGS:-$(mktemp -d /tmp/kord-test-logs.XXXXXX)}"
mkdir -p "$KORD_TEST_LOGS"
echo "test.sh: test events and reports in $KORD_TEST_LOGS" >&2
go build -o "$KORD_TEST_LOGS/testlog" ./internal/rig/testlog
# gotest NAME ARGS...: go test -json ARGS, its events and report kept as
# NAME.json and NAME.txt.
gotest() {
	local name=$1
	shift
	go test -json "$@" </dev/null | "$KORD_TEST_LOGS/testlog" -json "$KORD_TEST_LOGS/$name.json" -report "$KORD_TEST_LOGS/$name.txt"
}
# Every test runs once: the tests of untagged files on plain binaries, the
# tests of files built only with the tag (scripts/failpoint-tests.sh lists
# them per package) on tagged ones. kafkaio's proofs take about 15 minutes
# under -race on 2 cores (more than go test's default 10-minute timeout per
# package), so they run in a lane of their own beside every other
# package's, one package at a time in each lane: two test processes at once,
# as one go test ./... runs on 2 cores. The kafkaio lane's output follows
# the other's.
mapfile -t tagged < <(scripts/failpoint-tests.sh)
# run_tagged LANE [go test flags]: the tagged tests of kafkaio (LANE
# kafkaio) or of every other package (LANE others); every package is run
# whatever the one before it did, and the status says whether any failed.
run_tagged() {
	local lane=$1 line pkg rc=0
	shift
	for line in "${tagged[@]}"; do
		pkg=${line%% *}
		if { [ "$lane" = kafkaio ] && [ "$pkg" = ./kafkaio ]; } || { [ "$lane" = others ] && [ "$pkg" != ./kafkaio ]; }; then
			gotest "tagged-${pkg//[.\/]/_}" -race -count=1 -timeout 25m -tags kordfailpoints -run "^(${line#* })\$" "$@" "$pkg" || rc=$?
		fi
	done
	return $rc
}
(
	rc=0
	gotest kafkaio -race -count=1 -timeout 25m "$@" ./kafkaio/ || rc=$?
	run_tagged kafkaio "$@" || rc=$?
	echo "test.sh: the kafkaio lane ended at $((SECONDS / 60))m$((SECONDS % 60))s" >&2
	exit $rc
) >"$KORD_TEST_LOGS/kafkaio-lane.out" 2>&1 &
lane=$!
status=0
# shellcheck disable=SC2046
gotest others -race -count=1 -timeout 25m -p 1 "$@" $(go list ./... | grep -vx 'github.com/kordproject/kord/kafkaio') || status=$?
run_tagged others "$@" || status=$?
# The tests below need no broker; they follow in this lane, beside the
# kafkaio lane's last minutes, rather than after both lanes.
# The race detector slows the engine tenfold, so under -race the seeded
# failure test runs 150 seeds and the window model tests 45 and 30; here
# they run 1,000 and 300 each without it.
gotest seeded -count=1 -tags kordfailpoints -run 'TestSeededFailures|TestWindowsModel|TestWindowsLateModel' ./keyed/ || status=$?
# Allocation counts that a sync.Pool makes: the race detector drops pooled
# values on purpose, so these run without it.
gotest allocs -count=1 -run 'TestDecoderAllocs' ./internal/jsonx/ || status=$?
# Modules of their own: the benchmark peers and suite, and the toy sink
# written outside kord against its public connector interface only.
for m in bench/peers bench/peers/franz bench/peers/goka bench/peers/librdkafka bench/suite examples/toysink; do
	if [ -f $m/go.mod ]; then
		(cd $m && go vet ./... && go test -count=1 ./...) || status=$?
	fi
done
echo "test.sh: the other lane ended at $((SECONDS / 60))m$((SECONDS % 60))s" >&2
wait "$lane" || status=$?
echo "test.sh: both lanes ended at $((SECONDS / 60))m$((SECONDS % 60))s" >&2
cat "$KORD_TEST_LOGS/kafkaio-lane.out"
if [ "$status" != 0 ]; then
	echo "test.sh: tests failed (reports in $KORD_TEST_LOGS)" >&2
	exit "$status"
fi
if [ "${KORD_CLUSTER_TIER:-1}" != 0 ]; then
	stop_started
	if [ -n "$cluster" ]; then
		export KORD_KAFKA_CLUSTER="$cluster"
	fi
	KORD_TEST_LOGS="$KORD_TEST_LOGS" scripts/test-cluster.sh "$@"
fi
