package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// input is the benchmark's input event as produced (CONTRACT.md).
type input struct {
	UUID   string    `json:"uuid"`
	Seq    int64     `json:"seq"`
	Action string    `json:"action"`
	Page   string    `json:"page"`
	TS     time.Time `json:"ts"`
}

// createTopics creates topics with parts partitions each.
func createTopics(ctx context.Context, brokers string, parts int32, topics ...string) error {
	s, err := admin.New(admin.Brokers(strings.Split(brokers, ",")...))
	if err != nil {
		return err
	}
	defer s.Close()
	for _, t := range topics {
		if _, err := s.CreateTopic(ctx, t, parts, nil); err != nil {
			return err
		}
	}
	// A topic just created is known to its controller before the broker
	// answers metadata for it: wait until it does.
	for _, t := range topics {
		for {
			ps, err := s.Partitions(ctx, t)
			if err == nil && len(ps) == int(parts) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("topic %s: not in the metadata after it was created: %v", t, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// dropTopics deletes every topic whose name starts with prefix: a run's
// output, and the internal topics (changelogs, repartition topics) its
// system named after its id. The broker then holds the same data before
// every run: 24 runs' outputs left on it (23 GB at 5,000,000 events) no
// longer fit the page cache, and the runs late in the suite read and wrote
// slower for it, whichever system they were.
func dropTopics(ctx context.Context, brokers, prefix string) error {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		return err
	}
	defer a.Close()
	md, err := a.GetMetadata(nil, true, 10_000)
	if err != nil {
		return fmt.Errorf("listing topics to delete %s*: %w", prefix, err)
	}
	var names []string
	for t := range md.Topics {
		if strings.HasPrefix(t, prefix) {
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		return nil
	}
	res, err := a.DeleteTopics(ctx, names)
	if err != nil {
		return fmt.Errorf("deleting topics %v: %w", names, err)
	}
	var errs []error
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			errs = append(errs, fmt.Errorf("deleting topic %s: %w", r.Topic, r.Error))
		}
	}
	return errors.Join(errs...)
}

// produceInput writes n events over users users to topic, keyed by uuid
// with Java placement, seeded: every system gets the same input. rate > 0
// paces it (events/s); each event's ts is when it was produced.
func produceInput(ctx context.Context, brokers, topic string, n, users int, seed uint64, rate int) error {
	p, err := producer.New(serde.String(), serde.JSON[input](), producer.Brokers(strings.Split(brokers, ",")...), producer.Set("linger.ms", "5"))
	if err != nil {
		return err
	}
	defer p.Close()
	r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	ids := make([]string, users)
	for i := range ids {
		ids[i] = fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xfff, r.Uint32()&0xfff, r.Uint64()&0xffffffffffff)
	}
	seq := make([]int64, users)
	actions := []string{"view", "click", "add_to_cart", "purchase"}
	start := time.Now()
	for i := 0; i < n; i++ {
		u := r.IntN(users)
		ev := input{UUID: ids[u], Seq: seq[u], Action: actions[r.IntN(len(actions))], Page: "/item/" + strconv.Itoa(r.IntN(1000)), TS: time.Now()}
		seq[u]++
		if err := p.Produce(ctx, producer.Record[string, input]{Topic: topic, Key: ev.UUID, Value: ev}, nil); err != nil {
			return err
		}
		if rate > 0 && i%50 == 49 {
			if ahead := time.Duration(i+1)*time.Second/time.Duration(rate) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	}
	return p.Flush(ctx)
}

// seen is what the independent read_committed reader found in a run's
// output.
type seen struct {
	mu         sync.Mutex
	distinct   int             // results counted once (per user, seq 0, 1, ...)
	total      int             // every result read
	dups       int             // a (uuid, seq) read again
	disorder   int             // a user's seq ahead of the next expected
	wrong      int             // count != seq + 1
	first      time.Time       // when the first result became visible
	at         []time.Time     // at[i]: when the i+1-th distinct result became visible
	latency    []time.Duration // visible minus the event's ts, per distinct result
	badRecords int             // results that did not parse
	// reads are every result read: its partition, offset and when.
	reads []read
	// countOnly: keep the counts, not first, at, latency and reads (the
	// throughput runs' checker, timed by offsets, reads none of them).
	countOnly bool
}

type read struct {
	partition int32
	offset    int64
	at        time.Time
}

// verify reads topic from its start with read_committed until want
// distinct results were seen, ctx ends, or stop closes: the suite's one
// reader of every output, which checks it and times each result.
func verify(ctx context.Context, brokers, topic string, parts int32, want int, stop <-chan struct{}, s *seen) error {
	next := map[string]int64{}
	done := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.distinct >= want
	}
	if done() {
		return nil
	}
	return readCommitted(ctx, brokers, topic, parts, stop, func(m *kafka.Message, now time.Time) bool {
		var res struct {
			UUID  string    `json:"uuid"`
			Seq   int64     `json:"seq"`
			Count int64     `json:"count"`
			TS    time.Time `json:"ts"`
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.total++
		if !s.countOnly {
			s.reads = append(s.reads, read{m.TopicPartition.Partition, int64(m.TopicPartition.Offset), now})
			if s.first.IsZero() {
				s.first = now
			}
		}
		if err := json.Unmarshal(m.Value, &res); err != nil {
			s.badRecords++
			return false
		}
		switch want := next[res.UUID]; {
		case res.Seq < want:
			s.dups++
		case res.Seq > want:
			s.disorder++
		}
		if res.Count != res.Seq+1 {
			s.wrong++
		}
		if res.Seq >= next[res.UUID] {
			next[res.UUID] = res.Seq + 1
			s.distinct++
			if !s.countOnly {
				s.at = append(s.at, now)
				s.latency = append(s.latency, now.Sub(res.TS))
			}
		}
		return s.distinct >= want
	})
}

// readCommitted reads every partition of topic from its start with
// read_committed (confluent-kafka-go, none of kord's code), calling each
// for every record with the time it arrived, until each returns true, ctx
// ends, or stop closes.
func readCommitted(ctx context.Context, brokers, topic string, parts int32, stop <-chan struct{}, each func(m *kafka.Message, at time.Time) bool) error {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "kord-suite-verify", "enable.auto.commit": false,
		"isolation.level": "read_committed", "log_level": 3, "fetch.wait.max.ms": 10})
	if err != nil {
		return err
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for p := int32(0); p < parts; p++ {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.OffsetBeginning})
	}
	if err := c.Assign(tps); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return nil
		default:
		}
		m, ok := c.Poll(50).(*kafka.Message)
		if !ok || m.TopicPartition.Error != nil {
			continue
		}
		if each(m, time.Now()) {
			return nil
		}
	}
}

// consumeRate reads the n events of topic with the suite's reader and
// returns its events/s, from the first event to the last: the ceiling of
// any rate measured through that reader on this machine.
func consumeRate(ctx context.Context, brokers, topic string, parts int32, n int) (float64, error) {
	if n < 2 {
		return 0, nil
	}
	var first, last time.Time
	read := 0
	err := readCommitted(ctx, brokers, topic, parts, nil, func(_ *kafka.Message, at time.Time) bool {
		if read == 0 {
			first = at
		}
		read++
		last = at
		return read >= n
	})
	if err != nil {
		return 0, err
	}
	return float64(read-1) / last.Sub(first).Seconds(), nil
}

// proc samples a process's CPU time and resident memory from /proc.
type proc struct {
	pid     int
	cpu     time.Duration // user + system, at the last sample
	peakRSS int64         // bytes
}

// clockTick is the kernel's USER_HZ: /proc's CPU times are in its ticks.
const clockTick = 100

func (p *proc) sample() {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid)); err == nil {
		// Fields after the command name, which is in parentheses and may
		// hold spaces: utime and stime are the 14th and 15th fields.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			f := strings.Fields(string(b)[i+1:])
			if len(f) > 13 {
				ut, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				p.cpu = time.Duration(ut+st) * time.Second / clockTick
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				p.peakRSS = max(p.peakRSS, kb*1024)
			}
		}
	}
}

// brokerPid is the pid of the broker scripts/kafka.sh started in dir, or 0.
func brokerPid(dir string) int {
	if dir == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, "broker.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// peerCmd starts a peer process in its own process group, its stdout
// watched for "ready".
func peerCmd(argv []string, stderr *os.File) (*exec.Cmd, <-chan struct{}, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	ready := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		var line []byte
		closed := false
		for {
			n, err := out.Read(buf)
			line = append(line, buf[:n]...)
			if !closed && strings.Contains(string(line), "ready") {
				close(ready)
				closed = true
				line = nil
			}
			if len(line) > 1<<16 {
				line = line[len(line)-1024:]
			}
			if err != nil {
				return
			}
		}
	}()
	return cmd, ready, nil
}

// stableEnds returns the last stable offset of each partition of topic
// (what read_committed readers can read up to now).
func stableEnds(ctx context.Context, brokers, topic string, parts int32) ([]int64, error) {
	w, err := newStableWatch(brokers, topic, parts)
	if err != nil {
		return nil, err
	}
	defer w.close()
	return w.ends(ctx)
}

// stableWatch polls the last stable offsets of every partition of a topic
// in one ListOffsets request (read_committed): how far read_committed
// readers can read now, without reading. The throughput runs time their
// output by it, so that no reader competes for the machine with the
// system it measures (see verifyChild).
type stableWatch struct {
	admin *kafka.AdminClient
	req   map[kafka.TopicPartition]kafka.OffsetSpec
}

func newStableWatch(brokers, topic string, parts int32) (*stableWatch, error) {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		return nil, err
	}
	w := &stableWatch{admin: a, req: map[kafka.TopicPartition]kafka.OffsetSpec{}}
	for p := range parts {
		w.req[kafka.TopicPartition{Topic: &topic, Partition: p}] = kafka.LatestOffsetSpec
	}
	return w, nil
}

// ends is the last stable offset of each partition, by partition.
func (w *stableWatch) ends(ctx context.Context) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := w.admin.ListOffsets(ctx, w.req, kafka.SetAdminIsolationLevel(kafka.IsolationLevelReadCommitted))
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(w.req))
	for tp, info := range res.ResultInfos {
		if info.Error.Code() != kafka.ErrNoError {
			return nil, fmt.Errorf("last stable offset of %s [%d]: %w", *tp.Topic, tp.Partition, info.Error)
		}
		out[tp.Partition] = int64(info.Offset)
	}
	return out, nil
}

// sum is the sum over the topic's partitions of their last stable
// offsets: the results committed so far, plus one transaction marker per
// partition per transaction that wrote to it.
func (w *stableWatch) sum(ctx context.Context) (int64, error) {
	ends, err := w.ends(ctx)
	var n int64
	for _, e := range ends {
		n += e
	}
	return n, err
}

func (w *stableWatch) close() { w.admin.Close() }

// verdict is what verifyChild reports of a topic it has read.
type verdict struct {
	Distinct, Total, Duplicates, Disorder, WrongCounts, BadRecords int
	Err                                                            string
}

// verifyChild starts this binary's verify command (verifyMain) under
// nice 19: the suite's read_committed reader of one throughput run's
// output, in a process of its own at the lowest CPU priority, so that it
// reads in the time the system under test and the broker leave idle and
// catches up once the system is done. Read in the suite's own process at
// normal priority, it took CPU from the system it measured in proportion
// to the system's rate, and capped every system below its own ceiling
// (130 k results/s on 2026-12-02's machine, where kord's warm-up run
// measured 126 k events/s at steady state through it, 387 k by the last
// stable offsets). The verdict arrives on the channel once the child has
// read want distinct results, or has been stopped.
func verifyChild(ctx context.Context, brokers, topic string, parts int32, want int, stderr *os.File) (stop func(), done <-chan verdict, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, "nice", "-n", "19", self, "verify", "--brokers", brokers, "--topic", topic,
		"--parts", fmt.Sprint(parts), "--want", fmt.Sprint(want))
	cmd.Stderr = stderr
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	ch := make(chan verdict, 1)
	go func() {
		werr := cmd.Wait()
		var v verdict
		if err := json.Unmarshal([]byte(out.String()), &v); err != nil {
			v.Err = fmt.Sprintf("verifier: %v (its output %q, exit %v)", err, out.String(), werr)
		}
		ch <- v
	}()
	return func() { _ = cmd.Process.Signal(syscall.SIGTERM) }, ch, nil
}

// verifyMain is the verify command: verify's reader on one topic until
// --want distinct results or SIGTERM, then its verdict as JSON on stdout.
func verifyMain(args []string) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "bootstrap servers")
	topic := fs.String("topic", "", "topic to read")
	parts := fs.Int("parts", partitions, "its partitions")
	want := fs.Int("want", 0, "distinct results to wait for")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	sn := seen{countOnly: true}
	stop := make(chan struct{})
	go func() { <-ctx.Done(); close(stop) }()
	err := verify(context.Background(), *brokers, *topic, int32(*parts), *want, stop, &sn)
	sn.mu.Lock()
	v := verdict{Distinct: sn.distinct, Total: sn.total, Duplicates: sn.dups, Disorder: sn.disorder, WrongCounts: sn.wrong, BadRecords: sn.badRecords}
	sn.mu.Unlock()
	if err != nil {
		v.Err = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(v); err != nil {
		return 1
	}
	return 0
}
