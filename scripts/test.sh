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
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${KORD_KAFKA_BROKERS:-}" ]; then
	KORD_KAFKA_DIR="${KORD_KAFKA_DIR:-$(mktemp -d /tmp/kord-kafka-test.XXXXXX)}"
	export KORD_KAFKA_DIR
	trap 'scripts/kafka.sh stop >&2' EXIT
	KORD_KAFKA_BROKERS="$(scripts/kafka.sh start)"
fi
export KORD_KAFKA_BROKERS KORD_REQUIRE_KAFKA=1
echo "test.sh: real Kafka broker at $KORD_KAFKA_BROKERS" >&2

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
n=0
gotest() {
	n=$((n + 1))
	go test -json "$@" </dev/null | "$KORD_TEST_LOGS/testlog" -json "$KORD_TEST_LOGS/$n.json" -report "$KORD_TEST_LOGS/$n.txt"
}
# Every test runs once: the tests of untagged files on plain binaries, the
# tests of files built only with the tag (scripts/failpoint-tests.sh lists
# them per package) on tagged ones. kafkaio's proofs take about 10 minutes
# under -race on 2 cores: more than go test's default 10-minute timeout per
# package.
gotest -race -count=1 -timeout 25m "$@" ./...
mapfile -t tagged < <(scripts/failpoint-tests.sh)
for line in "${tagged[@]}"; do
	gotest -race -count=1 -timeout 25m -tags kordfailpoints -run "^(${line#* })\$" "$@" "${line%% *}"
done
# The race detector slows the engine tenfold, so under -race the seeded
# failure test runs 150 seeds and the window model tests 45 and 30; here
# they run 1,000 and 300 each without it.
gotest -count=1 -tags kordfailpoints -run 'TestSeededFailures|TestWindowsModel|TestWindowsLateModel' ./keyed/
# Allocation counts that a sync.Pool makes: the race detector drops pooled
# values on purpose, so these run without it.
gotest -count=1 -run 'TestDecoderAllocs' ./internal/jsonx/
# Modules of their own: the benchmark peers and suite, and the toy sink
# written outside kord against its public connector interface only.
for m in bench/peers bench/peers/franz bench/peers/goka bench/peers/librdkafka bench/suite examples/toysink; do
	if [ -f $m/go.mod ]; then
		(cd $m && go vet ./... && go test -count=1 ./...)
	fi
done
