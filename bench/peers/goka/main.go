// Command goka runs the benchmark job (../CONTRACT.md) as a goka processor:
// the group --id reads the input, keeps each user's count in goka's group
// table (a LevelDB store per partition, backed by the compacted topic
// <id>-table) and emits one result per event to the output.
//
// goka has no transactions: its delivery is at least once. Offsets are
// marked once a message's emits and table write are acknowledged and
// committed by sarama every --commit-ms; after a crash the messages since
// the last commit are processed again, so their results are written twice
// and their users counted twice from then on (count > seq+1).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
)

// storageRoot holds the processors' local stores, one directory per --id.
const storageRoot = "/tmp/kord-bench-goka"

type config struct {
	brokers     []string
	input       string
	output      string
	id          string
	parallelism int
	commit      time.Duration
	replication int
	verbose     bool
}

func main() { os.Exit(cli(os.Args[1:])) }

// cli parses args, runs the processor until SIGTERM or SIGINT (a graceful
// stop: goka stops the partitions and sarama commits the marked offsets)
// and returns the exit code.
func cli(args []string) int {
	c, err := parseFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "goka:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "goka:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string) (*config, error) {
	var (
		c       config
		brokers string
		commit  int
	)
	fs := flag.NewFlagSet("goka", flag.ContinueOnError)
	fs.StringVar(&brokers, "brokers", "", "Kafka bootstrap servers, host:port[,host:port...]")
	fs.StringVar(&c.input, "input", "", "input topic")
	fs.StringVar(&c.output, "output", "", "output topic")
	fs.StringVar(&c.id, "id", "", "the job's durable identity: goka group (consumer group, table topic <id>-table), local store "+storageRoot+"/<id>")
	fs.IntVar(&c.parallelism, "parallelism", 1, "accepted for the contract; goka runs one processor per process, a goroutine per assigned partition")
	fs.IntVar(&commit, "commit-ms", 1000, "offset commit interval in milliseconds (sarama Consumer.Offsets.AutoCommit.Interval)")
	fs.IntVar(&c.replication, "replication", 1, "replication factor of the table topic if goka creates it")
	fs.BoolVar(&c.verbose, "v", false, "log goka's informational messages (default: warnings and errors)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if brokers == "" || c.input == "" || c.output == "" || c.id == "" {
		return nil, errors.New("--brokers, --input, --output and --id are required")
	}
	if c.parallelism < 1 || commit < 1 || c.replication < 1 {
		return nil, errors.New("--parallelism, --commit-ms and --replication must be positive")
	}
	c.brokers = strings.Split(brokers, ",")
	c.commit = time.Duration(commit) * time.Millisecond
	return &c, nil
}

func run(ctx context.Context, c *config) error {
	if c.parallelism > 1 {
		fmt.Fprintf(os.Stderr, "goka: warning: --parallelism %d ignored: goka runs one processor per process, one goroutine per assigned partition\n", c.parallelism)
	}
	// goka's defaults, with three changes: streams start at the earliest
	// offset (goka's default is the newest), the contract's commit
	// interval, and the table topic's replication.
	sc := goka.DefaultConfig()
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.Offsets.AutoCommit.Enable = true
	sc.Consumer.Offsets.AutoCommit.Interval = c.commit
	goka.ReplaceGlobalConfig(sc)
	tm := goka.NewTopicManagerConfig()
	tm.Table.Replication = c.replication
	tm.Stream.Replication = c.replication

	if err := ensureTable(ctx, c, tm); err != nil {
		return err
	}

	output := goka.Stream(c.output)
	count := func(ctx goka.Context, msg any) {
		ev := msg.(*event)
		var n int64
		if v := ctx.Value(); v != nil {
			n = v.(int64)
		}
		n++
		ctx.SetValue(n)
		ctx.Emit(output, ev.UUID, encodeResult(ev, n))
	}
	g := goka.DefineGroup(goka.Group(c.id),
		goka.Input(goka.Stream(c.input), new(eventCodec), count),
		goka.Persist(new(codec.Int64)),
		goka.Output(output, new(codec.Bytes)),
	)
	p, err := goka.NewProcessor(c.brokers, g,
		goka.WithStorageBuilder(storage.DefaultBuilder(filepath.Join(storageRoot, c.id))),
		goka.WithTopicManagerBuilder(goka.TopicManagerBuilderWithTopicManagerConfig(tm)),
		// The table and the input must be partitioned alike (goka reads
		// table partition p for input partition p): the input is placed
		// by Kafka's Java producer, so goka hashes as it does.
		goka.WithHasher(newMurmur2),
		goka.WithLogger(quietLogger{verbose: c.verbose, l: log.New(os.Stderr, "goka: ", log.LstdFlags)}),
	)
	if err != nil {
		return err
	}

	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	if err := p.WaitForReadyContext(ctx); err == nil {
		select {
		case err := <-done: // stopped before it was ready
			return err
		default:
			fmt.Println("ready")
		}
	}
	err = <-done
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// ensureTable creates the group table topic as goka would, and waits until
// every partition has a leader: on a fresh topic goka's first offset
// lookup can otherwise fail (NOT_LEADER_OR_FOLLOWER) and stop the processor.
func ensureTable(ctx context.Context, c *config, tm *goka.TopicManagerConfig) error {
	m, err := goka.TopicManagerBuilderWithTopicManagerConfig(tm)(c.brokers)
	if err != nil {
		return err
	}
	defer m.Close()
	parts, err := m.Partitions(c.input)
	if err != nil {
		return fmt.Errorf("input %s: %w", c.input, err)
	}
	table := string(goka.GroupTable(goka.Group(c.id)))
	if err := m.EnsureTableExists(table, len(parts)); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range parts {
		for {
			_, err := m.GetOffset(table, p, sarama.OffsetOldest)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("table %s partition %d: %w", table, p, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// event is the part of an input event the job reads; ts stays raw so that
// the result carries it unchanged.
type event struct {
	UUID string          `json:"uuid"`
	Seq  int64           `json:"seq"`
	TS   json.RawMessage `json:"ts"`
}

// result is one output value.
type result struct {
	UUID  string          `json:"uuid"`
	Seq   int64           `json:"seq"`
	Count int64           `json:"count"`
	TS    json.RawMessage `json:"ts"`
}

// eventCodec decodes input events; the job never encodes one.
type eventCodec struct{}

func (eventCodec) Encode(v any) ([]byte, error) { return json.Marshal(v) }

func (eventCodec) Decode(b []byte) (any, error) {
	ev := new(event)
	if err := json.Unmarshal(b, ev); err != nil {
		return nil, err
	}
	if ev.UUID == "" {
		return nil, errors.New("event without uuid")
	}
	return ev, nil
}

func encodeResult(ev *event, count int64) []byte {
	b, _ := json.Marshal(result{UUID: ev.UUID, Seq: ev.Seq, Count: count, TS: ev.TS})
	return b
}

// quietLogger passes goka's messages on when verbose, and otherwise only
// those that read as warnings or errors: goka logs everything at one
// (informational) level.
type quietLogger struct {
	verbose bool
	l       *log.Logger
}

func (q quietLogger) Print(v ...any)   { q.out(fmt.Sprint(v...)) }
func (q quietLogger) Println(v ...any) { q.out(fmt.Sprintln(v...)) }
func (q quietLogger) Printf(format string, v ...any) {
	q.out(fmt.Sprintf(format, v...))
}

func (q quietLogger) out(s string) {
	if !q.verbose {
		l := strings.ToLower(s)
		if !strings.Contains(l, "error") && !strings.Contains(l, "warn") && !strings.Contains(l, "fail") {
			return
		}
	}
	q.l.Output(3, s)
}
