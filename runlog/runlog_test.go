package runlog

import (
	"strings"
	"testing"
)

func TestBook(t *testing.T) {
	var live strings.Builder
	b := New("prog", &live)
	require := func(ok bool, msg string) {
		t.Helper()
		if !ok {
			t.Fatal(msg)
		}
	}
	log := b.Logger()
	log.Debug("debug")
	log.Info("info")
	require(b.Summary() == "", "no warning, no summary: "+b.Summary())
	log.Warn("librdkafka: [thrd:127.0.0.1:1/bootstrap]: connect failed", "tag", "FAIL", "client", "rdkafka#producer-1")
	log.Error("refused", "err", "bad")
	require(b.Summary() == "prog: the Kafka clients logged 1 errors and 1 warnings; the last: refused err=bad", b.Summary())
	require(strings.Join(b.Lines(), "|") == "librdkafka: connect failed tag=FAIL|refused err=bad", strings.Join(b.Lines(), "|"))
	require(!strings.Contains(live.String(), "debug") && strings.Contains(live.String(), "INFO info"), live.String())
	for i := 0; i < 2*keep; i++ {
		log.Warn("w")
	}
	require(len(b.Lines()) == keep, "keeps the last lines only")
}
