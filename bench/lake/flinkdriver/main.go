// Command flinkdriver runs a job that runs until SIGTERM (the Flink peer,
// bench/peers/flink) as one bounded run, for bench/lake/flink.sh: it
// creates the output topic with the input's partition count (as
// examples/userbehavior does for its own output), starts the peer, counts
// the output's records with a read_committed reader until there are
// -events of them, then sends the peer SIGTERM and waits for it to exit.
// Its exit status is the peer's; 1 if the peer ended before that.
//
//	flinkdriver -brokers HOST:PORT -input TOPIC -output TOPIC -events N -- PEER [ARG ...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers")
	input := flag.String("input", "", "the input topic (its partition count is the output's)")
	output := flag.String("output", "", "the output topic, created here")
	events := flag.Int("events", 0, "stop the peer once the output holds this many committed records")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up (SIGTERM the peer, exit 1) after this long")
	flag.Parse()
	if *brokers == "" || *input == "" || *output == "" || *events <= 0 || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: flinkdriver -brokers HOST:PORT -input TOPIC -output TOPIC -events N -- PEER [ARG ...]")
		os.Exit(2)
	}
	os.Exit(run(*brokers, *input, *output, *events, *timeout, flag.Args()))
}

func run(brokers, input, output string, events int, timeout time.Duration, peer []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := createOutput(ctx, brokers, input, output); err != nil {
		fmt.Fprintln(os.Stderr, "flinkdriver:", err)
		return 1
	}
	cmd := exec.Command(peer[0], peer[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "flinkdriver:", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	counted := make(chan error, 1)
	go func() { counted <- count(ctx, brokers, output, events) }()

	code := 0
	select {
	case err := <-exited:
		fmt.Fprintf(os.Stderr, "flinkdriver: the peer ended before its output was complete: %v\n", err)
		return 1
	case err := <-counted:
		if err != nil {
			fmt.Fprintln(os.Stderr, "flinkdriver:", err)
			code = 1
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err := <-exited
	if code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, "flinkdriver: the peer:", err)
		code = 1
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			code = ee.ExitCode()
		}
	}
	return code
}

// createOutput creates output with input's partition count and waits until
// the broker's metadata shows it.
func createOutput(ctx context.Context, brokers, input, output string) error {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		return err
	}
	defer a.Close()
	md, err := a.GetMetadata(&input, false, 10_000)
	if err != nil {
		return fmt.Errorf("input %s: %w", input, err)
	}
	parts := len(md.Topics[input].Partitions)
	if parts == 0 {
		return fmt.Errorf("input %s: no partitions", input)
	}
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: output, NumPartitions: parts, ReplicationFactor: 1}})
	if err != nil {
		return fmt.Errorf("create %s: %w", output, err)
	}
	for _, r := range res {
		if c := r.Error.Code(); c != kafka.ErrNoError && c != kafka.ErrTopicAlreadyExists {
			return fmt.Errorf("create %s: %w", output, r.Error)
		}
	}
	for {
		md, err := a.GetMetadata(&output, false, 10_000)
		if err == nil && len(md.Topics[output].Partitions) == parts && md.Topics[output].Error.Code() == kafka.ErrNoError {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("output %s: not in the metadata after it was created: %v", output, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// count reads output from the beginning with read_committed and returns
// once it has read events records.
func count(ctx context.Context, brokers, output string, events int) error {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":  brokers,
		"group.id":           "flinkdriver",
		"enable.auto.commit": false,
		"isolation.level":    "read_committed",
		"log_level":          3,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	md, err := c.GetMetadata(&output, false, 10_000)
	if err != nil {
		return err
	}
	var tps []kafka.TopicPartition
	for _, p := range md.Topics[output].Partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &output, Partition: p.ID, Offset: kafka.OffsetBeginning})
	}
	if err := c.Assign(tps); err != nil {
		return err
	}
	n := 0
	for n < events {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d of %d records in %s: %w", n, events, output, err)
		}
		switch ev := c.Poll(100).(type) {
		case *kafka.Message:
			if ev.TopicPartition.Error == nil {
				n++
			}
		case kafka.Error:
			if ev.IsFatal() {
				return ev
			}
		}
	}
	return nil
}
