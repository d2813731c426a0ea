#!/usr/bin/env bash
# Runs every test of the project:
#   gofmt and go vet, of the plain build and of the build with failure
#   points (the kordfailpoints tag);
#   go test -race ./... in kord's module, where each Kafka test runs on the
#   in-process kfake cluster and on a real Apache Kafka broker, and the
#   crash and fault tests (files built only with the tag) on tagged
#   binaries;
#   the per-record read and write paths (the kordnobatch tag), which every
#   other run leaves out: the consumer's and producer's tests and a few
#   crash tests on them;
#   the engine's 1,000 seeded failure runs and the window model tests' 300
#   seeds each, and the pooled decoder's allocation count, without the race
#   detector;
#   the tests of the separate Go modules under bench/ (the peers, the suite);
#   the soak's short version (bench/soak's TestSoak, KORD_SOAK=1): the main
#   job SIGKILLed about twice in two and a half minutes, its memory,
#   goroutines, files and handles fitted for flat slopes.
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
# Likewise the schema registry and the Java serdes that serde/registry's
# round trips run against (scripts/schema-registry.sh: Apicurio Registry and
# its Kafka serdes, from Maven): the registry named by KORD_SCHEMA_REGISTRY
# and the classpath named by KORD_REGISTRY_JAVA when set, otherwise a
# registry started here and stopped afterwards; KORD_REQUIRE_REGISTRY=1.
# Likewise the browser the status page's test drives (kordhttp): the
# Chromium named by KORD_CHROMIUM when set, otherwise Debian's, which
# scripts/chromium.sh installs (once); KORD_REQUIRE_BROWSER=1 is always set.
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
if [ -z "${KORD_CHROMIUM:-}" ]; then
	KORD_CHROMIUM="$(scripts/chromium.sh install)"
fi
export KORD_CHROMIUM KORD_REQUIRE_BROWSER=1
echo "test.sh: headless Chromium $KORD_CHROMIUM" >&2
if [ -z "${KORD_SCHEMA_REGISTRY:-}" ]; then
	KORD_REGISTRY_DIR="${KORD_REGISTRY_DIR:-$(mktemp -d /tmp/kord-registry-test.XXXXXX)}"
	export KORD_REGISTRY_DIR
	stops+=('scripts/schema-registry.sh stop >&2 || true')
	KORD_SCHEMA_REGISTRY="$(scripts/schema-registry.sh start)"
fi
if [ -z "${KORD_REGISTRY_JAVA:-}" ]; then
	KORD_REGISTRY_JAVA="$(scripts/schema-registry.sh java)"
fi
export KORD_SCHEMA_REGISTRY KORD_REGISTRY_JAVA KORD_REQUIRE_REGISTRY=1
echo "test.sh: schema registry at $KORD_SCHEMA_REGISTRY, Java serdes on $KORD_REGISTRY_JAVA" >&2
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
export KORD_TEST_LOGS # tests leave what CI keeps there (the status page's screenshot)
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
# them per package) on tagged ones. The runs are jobs, the longest first,
# taken from one queue by two workers (two test processes at once, as one
# go test ./... runs on 2 cores; each go test runs one package at a time):
# kafkaio's proofs alone take about 20 minutes under -race, so they are cut
# into several jobs by name, which the workers share with every other
# package's. A third worker runs what waits more than it computes beside
# them: the soak's short version (TestSoak: about three minutes of paced
# input), then kafkaio's network and broker faults; then, as it would be
# idle from there to the end (about 10 of 19 minutes), the per-record
# paths' short job. Each job's output is printed when it ends,
# whole; the status says whether any failed.
mapfile -t tagged < <(scripts/failpoint-tests.sh)
# tagged_tests PKG [ERE]: the tagged tests of PKG as "A|B|...", those whose
# name matches ERE (every one when it is not given), or none left for
# another: with ERE "!X", those that do not match X.
tagged_tests() {
	local line want=${2:-.}
	for line in "${tagged[@]}"; do
		if [ "${line%% *}" = "$1" ]; then
			if [ "${want:0:1}" = '!' ]; then
				tr '|' '\n' <<<"${line#* }" | grep -Ev "${want:1}" | paste -sd'|' -
			else
				tr '|' '\n' <<<"${line#* }" | grep -E "$want" | paste -sd'|' -
			fi
		fi
	done
}
# The per-record paths: kafkaio's crash tests that read most through
# the consumer (restores from every failure point, bounded reads to the
# ends, partitions discovered and assigned while reading, a start from
# the end), on the real broker only (their kfake halves run on the batch
# paths in the jobs below).
nobatch_kafkaio='TestCrashAtEveryFailpoint|TestKafkaBounded|TestKafkaPartitionDiscovery|TestKafkaStartFromLatest'
# kafkaio's tagged tests, in four jobs of about four to five minutes each.
kio_scaled='^Test(Scaled|Cluster)'
kio_faults='^Test(Net|BrokerRestart$|UnknownOutcomeRecovers$|CrashAtEveryFailpoint$)'
kio_kafka='^TestKafka'
# run_tagged NAME PKG TESTS [go test flags]: TESTS of PKG on a tagged binary.
run_tagged() {
	local name=$1 pkg=$2 tests=$3
	shift 3
	if [ -n "$tests" ]; then
		gotest "$name" -race -count=1 -timeout 25m -tags kordfailpoints -run "^(${tests})\$" "$@" "$pkg"
	fi
}
# run_job NAME [go test flags]: one job of the queue.
run_job() {
	local job=$1 m status=0
	shift
	case $job in
	others) # every package but kafkaio and the main example, untagged
		# shellcheck disable=SC2046
		gotest others -race -count=1 -timeout 25m -p 1 "$@" $(go list ./... | grep -vx -e 'github.com/kordproject/kord/kafkaio' -e 'github.com/kordproject/kord/examples/userbehavior') ;;
	kafkaio) gotest kafkaio -race -count=1 -timeout 25m "$@" ./kafkaio/ ;;
	userbehavior) gotest userbehavior -race -count=1 -timeout 25m "$@" ./examples/userbehavior/ ;;
	tagged-kafkaio-scaled) run_tagged "$job" ./kafkaio "$(tagged_tests ./kafkaio "$kio_scaled")" "$@" ;;
	tagged-kafkaio-faults) run_tagged "$job" ./kafkaio "$(tagged_tests ./kafkaio "$kio_faults")" "$@" ;;
	tagged-kafkaio-kafka) run_tagged "$job" ./kafkaio "$(tagged_tests ./kafkaio "$kio_kafka")" "$@" ;;
	tagged-kafkaio-rest) run_tagged "$job" ./kafkaio "$(tagged_tests ./kafkaio "!$kio_scaled|$kio_faults|$kio_kafka")" "$@" ;;
	tagged-others) # the tagged tests of every other package, one after another
		for m in "${tagged[@]}"; do
			if [ "${m%% *}" != ./kafkaio ]; then
				m=${m%% *}
				run_tagged "tagged-${m//[.\/]/_}" "$m" "$(tagged_tests "$m")" "$@" || status=$?
			fi
		done
		return $status ;;
	seeded)
		# The race detector slows the engine tenfold, so under -race the
		# seeded failure test runs 150 seeds and the window model tests 45
		# and 30; here they run 1,000 and 300 each without it. Allocation
		# counts that a sync.Pool makes: the race detector drops pooled
		# values on purpose, so these run without it too.
		gotest seeded -count=1 -tags kordfailpoints -run 'TestSeededFailures|TestWindowsModel|TestWindowsLateModel|TestIntervalJoinModel' ./keyed/ || status=$?
		gotest allocs -count=1 -run 'TestDecoderAllocs' ./internal/jsonx/ || status=$?
		return $status ;;
	modules)
		# Modules of their own: the benchmark peers and suite, and the toy
		# sink written outside kord against its public connector
		# interface only.
		for m in bench/peers bench/peers/franz bench/peers/goka bench/peers/librdkafka bench/suite examples/toysink; do
			if [ -f $m/go.mod ]; then
				(cd $m && go vet ./... && go test -count=1 ./...) || status=$?
			fi
		done
		return $status ;;
	nobatch)
		# Every other job reads and writes in batches (internal/rdkbatch,
		# internal/rdkproduce); this one builds the per-record paths, the
		# fallbacks, with the kordnobatch tag: the consumer's tests but
		# the group Member's (it reads through no Source), the
		# producer's, and nobatch_kafkaio's.
		go vet -tags kordnobatch ./internal/rdkbatch/ ./internal/rdkproduce/ ./consumer/ ./producer/ || status=$?
		gotest nobatch-consumer -race -count=1 -timeout 10m -tags kordnobatch -skip '^TestMember' "$@" ./consumer/ ./producer/ ./internal/rdkbatch/ ./internal/rdkproduce/ || status=$?
		gotest nobatch-kafkaio -race -count=1 -timeout 10m -tags 'kordfailpoints kordnobatch' -run "^(${nobatch_kafkaio})\$/^kafka\$" "$@" ./kafkaio/ || status=$?
		return $status ;;
	soak) KORD_SOAK=1 gotest soak -race -count=1 -timeout 10m -run '^TestSoak$' "$@" ./bench/soak/ ;;
	*)
		echo "test.sh: no job $job" >&2
		return 2 ;;
	esac
}
# The queue, longest first (their times under -race on this 2-core
# machine, from the reports of earlier runs).
printf '%s\n' others kafkaio tagged-kafkaio-scaled tagged-kafkaio-kafka userbehavior \
	tagged-others tagged-kafkaio-rest modules seeded >"$KORD_TEST_LOGS/queue"
# worker [go test flags]: runs jobs from the queue until it is empty; the
# status says whether any failed, and $KORD_TEST_LOGS/failed lists them.
worker() {
	local job rc=0
	while job=$(flock "$KORD_TEST_LOGS/queue.lock" sh -c 'head -1 "$1"; sed -i 1d "$1"' _ "$KORD_TEST_LOGS/queue") && [ -n "$job" ]; do
		finish_job "$job" "$@" || rc=1
	done
	return $rc
}
# finish_job NAME [go test flags]: runs job NAME, then prints its output
# whole, not interleaved with another's.
finish_job() {
	local job=$1 rc=0
	shift
	run_job "$job" "$@" >"$KORD_TEST_LOGS/job-$job.out" 2>&1 || rc=$?
	{
		flock 9
		cat "$KORD_TEST_LOGS/job-$job.out"
		echo "test.sh: job $job ended at $((SECONDS / 60))m$((SECONDS % 60))s, status $rc" >&2
		if [ "$rc" != 0 ]; then
			echo "$job" >>"$KORD_TEST_LOGS/failed"
		fi
	} 9>>"$KORD_TEST_LOGS/print.lock"
	return $rc
}
# The third worker: the soak, then kafkaio's network and broker faults,
# both waiting more than computing (paced input; delays held by a proxy,
# a broker restarting), beside the two; then the per-record paths' job,
# which ends long before the two do.
(
	rc=0
	finish_job soak "$@" || rc=1
	finish_job tagged-kafkaio-faults "$@" || rc=1
	finish_job nobatch "$@" || rc=1
	exit $rc
) &
soak=$!
worker "$@" &
w1=$!
worker "$@" &
w2=$!
status=0
wait "$w1" || status=$?
wait "$w2" || status=$?
wait "$soak" || status=$?
echo "test.sh: every job ended at $((SECONDS / 60))m$((SECONDS % 60))s" >&2
if [ "$status" != 0 ]; then
	echo "test.sh: tests failed in $(paste -sd' ' "$KORD_TEST_LOGS/failed") (reports in $KORD_TEST_LOGS)" >&2
	exit 1
fi
if [ "${KORD_CLUSTER_TIER:-1}" != 0 ]; then
	stop_started
	if [ -n "$cluster" ]; then
		export KORD_KAFKA_CLUSTER="$cluster"
	fi
	KORD_TEST_LOGS="$KORD_TEST_LOGS" scripts/test-cluster.sh "$@"
fi
