package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// child runs the job's process phase as a child process of the crash
// torture (torture_test.go), on the topic, lake and checkpoints the
// environment names, following the input with TH_FOLLOW=1 (until
// killed); 0 when it finished.
func child() int {
	o := options{brokers: os.Getenv("TH_BROKERS"), topic: os.Getenv("TH_INPUT"), phase: "process", events: 1, hours: 1, partitions: 1,
		interval: 150 * time.Millisecond, dir: os.Getenv("TH_DIR"), lake: os.Getenv("TH_LAKE"), table: os.Getenv("TH_TABLE"),
		db: "kord_test", metastore: os.Getenv("TH_METASTORE"), late: "into", quiet: true,
		follow: os.Getenv("TH_FOLLOW") == "1"}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	return 0
}
