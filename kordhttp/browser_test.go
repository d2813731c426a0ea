package kordhttp_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/rig/kafkatest"
)

// The browser the status page test drives: Debian's chromium, installed by
// scripts/chromium.sh (which prints its path).
const (
	envChromium       = "KORD_CHROMIUM"
	envRequireBrowser = "KORD_REQUIRE_BROWSER"
)

var screenshot = flag.String("screenshot", "", "TestStatusPage also writes its screenshot here (the README's: ../docs/status.png)")

// browser returns a context of a fresh headless Chromium, ended with t.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := os.Getenv(envChromium)
	if bin == "" {
		if os.Getenv(envRequireBrowser) == "1" {
			t.Fatalf("%s=1 but %s is not set: the browser test could not run", envRequireBrowser, envChromium)
		}
		t.Skipf("needs Chromium: %s=$(scripts/chromium.sh install)", envChromium)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // Chromium refuses to start as root without it
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		// The machine's network reaches no outside host: none is looked up.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"),
		chromedp.WindowSize(1200, 900),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel) // ends the browser and removes its profile
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	return bctx
}

// TestStatusPage: a running Kafka job's status page, loaded in headless
// Chromium. It shows the job's three stages with their tasks and counts,
// the checkpoints it committed (the last one's id the job's own), and the
// input's lag, 0 once the job caught up. A screenshot goes to
// $KORD_TEST_LOGS (where CI keeps what tests leave), and with -screenshot
// to the README's.
func TestStatusPage(t *testing.T) {
	ctx := browser(t)
	const n = 400
	cj := startCountJob(t, kafkatest.Fake(t), n)
	j, srv, in, name := cj.job, cj.srv, cj.in, cj.name
	require.Eventually(t, func() bool { return j.Status().LastCheckpoint >= 3 }, time.Minute, 20*time.Millisecond)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#stages"))))
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, sel)
		return v
	}
	title, stages, checkpoints, lag, tasks := text("h1"), text("#stages"), text("#checkpoints"), text("#lag"), text("#tasks")
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)

	require.Contains(t, title, name)
	require.Contains(t, title, "ready")
	// Stages: name, kind, tasks, records in.
	require.Regexp(t, `events\s+source\s+1\s+`+fmt.Sprint(n), stages)
	require.Regexp(t, `count\s+operator\s+2\s+`+fmt.Sprint(n)+`\s+`+fmt.Sprint(n)+`\s+\d+/s\s+[1-9][\d.]* (B|KiB)`, stages, "the counts' state is in the checkpoints")
	require.Regexp(t, `results\s+sink\s+1\s+`+fmt.Sprint(n), stages)
	// Checkpoints: newest first, at most the last ten, each with its id.
	rows := regexp.MustCompile(`(?m)^\s*(\d+)\s+\d\d:\d\d:\d\d\.\d{3}`).FindAllStringSubmatch(checkpoints, -1)
	require.NotEmpty(t, rows, checkpoints)
	require.LessOrEqual(t, len(rows), 10)
	newest, err := strconv.Atoi(rows[0][1])
	require.NoError(t, err)
	require.GreaterOrEqual(t, newest, 3, "the newest checkpoint's id (a number, not a string: 10 sorts before 3)")
	// Lag: the input, read by the source on all its partitions, nothing
	// behind.
	require.Regexp(t, regexp.QuoteMeta(in)+`\s+events\s+3\s+0\s`, lag)
	require.Contains(t, tasks, "count[1]")

	dir := os.Getenv("KORD_TEST_LOGS")
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "status-page.png"), png, 0o644))
	t.Logf("screenshot: %s", filepath.Join(dir, "status-page.png"))
	if *screenshot != "" {
		require.NoError(t, os.WriteFile(*screenshot, png, 0o644))
	}
}
