// Command kord looks inside kord jobs from the outside: their checkpoints
// (list, inspect, verify, read one key's state), the commit record Kafka
// holds for them with its lag, a safe reset, and where Java's producer
// places a key.
//
//	kord checkpoints --checkpoints DIR
//	kord inspect     --checkpoints DIR [--checkpoint RUN/ID]
//	kord verify      --checkpoints DIR
//	kord state       --checkpoints DIR --stage S --state N --key K
//	kord commit      --job NAME --brokers HOST:PORT
//	kord reset       --job NAME --checkpoints DIR --brokers HOST:PORT
//	kord partition   --partitions N KEY...
//
// --checkpoints is a directory (keyed.Dir) or a bucket URL
// (file:///dir, mem://; with --prefix, the job's prefix in the bucket).
// The cluster flags are the examples': --brokers, --properties (a Java
// client.properties file) and -X name=value (a librdkafka setting).
// Every subcommand takes --json.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
