package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kordproject/kord/kafkaio"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/serde"
)

// event and result are the benchmark job's input and output
// (bench/peers/CONTRACT.md). ts stays the string it came as.
type event struct {
	UUID string          `json:"uuid"`
	Seq  int64           `json:"seq"`
	TS   json.RawMessage `json:"ts"`
}

type result struct {
	UUID  string          `json:"uuid"`
	Seq   int64           `json:"seq"`
	Count int64           `json:"count"`
	TS    json.RawMessage `json:"ts"`
}

// kordPeer is kord's side of the suite, behind the peers' contract:
// `suite kord-peer --brokers --input --output --id --parallelism
// --commit-ms [--keyby]`. Exactly-once; --keyby keys by the uuid parsed
// from the event (xxhash key groups), else by partition (the input is
// keyed by uuid with Java placement, so a partition's users are its own).
func kordPeer(args []string) int {
	fs := flag.NewFlagSet("kord-peer", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "bootstrap servers")
	input := fs.String("input", "", "input topic")
	output := fs.String("output", "", "output topic")
	id := fs.String("id", "", "the job's name: transactional.id, commit group, checkpoint directory")
	par := fs.Int("parallelism", 2, "tasks per stage")
	commit := fs.Int("commit-ms", 1000, "checkpoint interval in ms")
	keyBy := fs.Bool("keyby", false, "key by the event's uuid instead of by partition")
	dir := fs.String("checkpoint-dir", "", "checkpoint directory (default /tmp/kord-bench-kord/<id>)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (runtime/pprof)")
	memprofile := fs.String("memprofile", "", "write an allocation profile of the run to this file at the end (runtime/pprof)")
	var sets []string
	fs.Func("set", "a librdkafka property name=value for every client of the job (kafkaio.Set; repeat it), for experiments: the suite passes none", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("want name=value, got %q", v)
		}
		sets = append(sets, v)
		return nil
	})
	traceOut := fs.String("trace", "", "write an execution trace (runtime/trace) of 4 s of the run, from --trace-at, to this file: go tool trace -pprof=sync FILE shows where goroutines wait")
	traceAt := fs.Duration("trace-at", 10*time.Second, "when the --trace window begins, from the start")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *brokers == "" || *input == "" || *output == "" || *id == "" {
		fmt.Fprintln(os.Stderr, "kord-peer: --brokers, --input, --output and --id are required")
		return 2
	}
	if *dir == "" {
		*dir = filepath.Join(os.TempDir(), "kord-bench-kord", *id)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kord-peer:", err)
			return 2
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "kord-peer:", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if *memprofile != "" {
		defer func() {
			if f, err := os.Create(*memprofile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if *traceOut != "" {
		f, err := os.Create(*traceOut)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kord-peer:", err)
			return 2
		}
		defer f.Close()
		window := time.AfterFunc(*traceAt, func() {
			if err := trace.Start(f); err != nil {
				fmt.Fprintln(os.Stderr, "kord-peer: trace:", err)
				return
			}
			time.AfterFunc(4*time.Second, trace.Stop)
		})
		defer window.Stop()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	copts := []kafkaio.Opt{kafkaio.Brokers(strings.Split(*brokers, ",")...)}
	for _, kv := range sets {
		k, v, _ := strings.Cut(kv, "=")
		copts = append(copts, kafkaio.Set(k, v))
	}
	client, err := kafkaio.NewClient(copts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kord-peer:", err)
		return 2
	}
	// "ready" once the first checkpoint after the start committed (the
	// fresh start's is checkpoint 0): the job is then reading.
	var once sync.Once
	ready := keyed.OnCommit(func(id uint64) error {
		if id > 0 {
			once.Do(func() { fmt.Println("ready") })
		}
		return nil
	})
	j := keyed.NewJob(*id, keyed.Dir(*dir), keyed.CheckpointInterval(time.Duration(*commit)*time.Millisecond), ready)
	src := kafkaio.NewSource(client, *input, serde.JSON[event]())
	sink := kafkaio.NewSink(client, *output, serde.JSON[result](), kafkaio.Key(func(r result) string { return r.UUID }, serde.String()))
	s := keyed.FromSource(j, "events", *par, src)
	k := keyed.ByPartition(s)
	if *keyBy {
		k = keyed.KeyBy("uuid", func(e event) []byte { return []byte(e.UUID) }, s)
	}
	out := keyed.ProcessValue(k, "count", *par, serde.Int64(), func(_ []byte, e event, n *keyed.ValueState[int64], out *keyed.Collector[result]) error {
		c, _ := n.Get()
		c++
		n.Set(c)
		out.Emit(result{UUID: e.UUID, Seq: e.Seq, Count: c, TS: e.TS})
		return nil
	})
	keyed.ToSink(out, "results", sink)
	if err := j.Run(ctx); err != nil { // Run closes the sink
		fmt.Fprintln(os.Stderr, "kord-peer:", err)
		return 1
	}
	return 0
}
