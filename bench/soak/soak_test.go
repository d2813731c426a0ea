package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// TestSoak is the soak's short version, for CI: two and a half minutes of
// input on the broker of KORD_KAFKA_BROKERS, the job SIGKILLed about
// twice, the same samples, the same fits and the independent check. It
// runs only with KORD_SOAK=1 (it takes about three minutes); then without
// a broker it skips, or fails with KORD_REQUIRE_KAFKA=1.
//
// Its limits are looser than the long mode's: a life is a minute or so,
// and the first minutes of a process still grow its heap and librdkafka's
// buffers. They still catch a leak per checkpoint (one a second: 3,600
// goroutines, handles or files an hour) by far.
func TestSoak(t *testing.T) {
	if os.Getenv("KORD_SOAK") != "1" {
		t.Skip("the soak takes about three minutes: KORD_SOAK=1 runs it")
	}
	c := kafkatest.Broker(t)
	cfg := config{
		brokers:    c.Brokers,
		duration:   150 * time.Second,
		rate:       300,
		users:      2_000,
		partitions: 6,
		interval:   time.Second,
		killMin:    45 * time.Second,
		killMax:    70 * time.Second,
		every:      2 * time.Second,
		warmup:     20 * time.Second,
		seed:       uint64(time.Now().UnixNano()),
		limits:     shortLimits,
		log:        testLog{t},
	}
	t.Logf("seed %d", cfg.seed)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	res, err := soak(ctx, cfg, "ci", "", false, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.kills) == 0 {
		t.Error("no SIGKILL happened")
	}
	for _, f := range res.failures {
		t.Error(f)
	}
}

// shortLimits are TestSoak's limits, per hour.
var shortLimits = limits{rss: 240, goroutines: 120, fds: 120, handles: 1, disk: 60}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
