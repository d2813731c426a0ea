package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/producer"
)

// The hop (DESIGN.md, "Keying by a field: the hop"): on a job of several processes, a stream
// keyed by a field crosses between processes through a topic of the
// job's, kord.<job>.<stage>.repartition, where stage is the stage it
// feeds. The job's sink writes it in its transactions (as an Output), and
// the job reads it back by partition, read_committed: a record written
// under checkpoint n is read once n committed, and its reader's offset
// goes into a later checkpoint, committed by the process that owns the
// partition. Records below every committed offset are deleted, as Kafka
// Streams purges its repartition topics.

// RepartitionTopic is the hop topic into stage of job:
// kord.<job>.<stage>.repartition (Kafka Streams names its own
// <application.id>-<name>-repartition).
func RepartitionTopic(job, stage string) string { return "kord." + job + "." + stage + ".repartition" }

var _ connector.Hops = (*sink[int])(nil)

// markHeader marks a hop record that is a watermark mark; its value is
// "<watermark>;<writers>;<writer>".
const markHeader = "kord.watermark"

// hopTopicConfig is a hop topic's configuration, Kafka Streams' for its
// repartition topics (RepartitionTopicConfig): records are kept until
// purged, in 50 MB segments.
var hopTopicConfig = map[string]string{"cleanup.policy": "delete", "retention.ms": "-1", "segment.bytes": "52428800"}

// purgeInterval is how often a sink deletes what its hop partitions'
// committed offsets left behind (Kafka Streams'
// repartition.purge.interval.ms, 30 s by default).
var purgeInterval = 30 * time.Second

// Hop implements connector.Hops.
func (s *sink[T]) Hop(job, stage string) (connector.Sink[connector.HopRecord], connector.Source[connector.HopRecord]) {
	topic := RepartitionTopic(job, stage)
	s.hopMu.Lock()
	if !slices.Contains(s.hopTopics, topic) {
		s.hopTopics = append(s.hopTopics, topic)
	}
	s.hopMu.Unlock()
	src := &source[connector.HopRecord]{c: s.c, topic: topic, cfg: apply(toSource, nil), hop: true}
	return &hopOutput{first: s, topic: topic}, src
}

// CreateHop implements connector.Hops.
func (s *sink[T]) CreateHop(ctx context.Context, topic string, partitions int) error {
	c, err := s.c.admin(s.log)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.CreateTopic(ctx, topic, int32(partitions), hopTopicConfig); err != nil {
		return fmt.Errorf("kafkaio: hop topic %s: %w", topic, err)
	}
	have, err := c.Partitions(ctx, topic)
	if err != nil {
		return fmt.Errorf("kafkaio: hop topic %s: %w", topic, err)
	}
	if len(have) != partitions {
		return keyed.Permanent(fmt.Errorf("kafkaio: hop topic %s has %d partitions, the job's inputs %d: its partitions are the next stage's key groups, which cannot change under its state (start the job afresh under another name)",
			topic, len(have), partitions))
	}
	s.hopMu.Lock()
	if s.hops == nil {
		s.hops = map[string]int32{}
	}
	s.hops[topic] = int32(partitions)
	s.hopMu.Unlock()
	return nil
}

// hopPartitions returns the partition count CreateHop found for topic.
func (s *sink[T]) hopPartitions(topic string) (int32, bool) {
	s.hopMu.Lock()
	defer s.hopMu.Unlock()
	n, ok := s.hops[topic]
	return n, ok
}

// purge deletes, in the background and at most once per purgeInterval,
// the records of hop partitions below the offsets just committed: every
// restore reads them from there or later. Called after a commit; Close
// waits for it.
func (s *sink[T]) purge(offsets []checkpoint.PartitionOffset) {
	var below []admin.Committed
	for _, o := range offsets {
		if _, ok := s.hopPartitions(o.Topic); ok && o.Offset > 0 {
			below = append(below, admin.Committed{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset})
		}
	}
	s.hopMu.Lock()
	if s.purged.IsZero() {
		s.purged = time.Now() // the first purge an interval after the first commit
	}
	if len(below) == 0 || time.Since(s.purged) < purgeInterval || s.purging {
		s.hopMu.Unlock()
		return
	}
	s.purged, s.purging = time.Now(), true
	s.hopMu.Unlock()
	log := s.log
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer func() {
			s.hopMu.Lock()
			s.purging = false
			s.hopMu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := s.c.admin(log)
		if err == nil {
			err = c.DeleteRecords(ctx, below)
			c.Close()
		}
		if err != nil {
			log.Warn("kafkaio: sink: deleting hop records below the committed offsets (tried again after the next commit)", "err", err)
			return
		}
		log.Debug("kafkaio: sink: deleted hop records below the committed offsets", "below", below)
	}()
}

// hopOutput writes a hop: records into its first sink's transactions,
// each to its key's partition (kord's Java-exact murmur2, so the topic is
// co-partitioned with topics Kafka's clients key the same way), and marks
// to the partition they name.
type hopOutput struct {
	first sinkHop
	topic string
}

// sinkHop is what a hopOutput needs of its first sink.
type sinkHop = interface {
	writer
	hopPartitions(topic string) (int32, bool)
}

func (o *hopOutput) CommitsWith() any                                { return o.first }
func (o *hopOutput) Reset(context.Context, connector.SinkInfo) error { return nil }

func (o *hopOutput) Write(ctx context.Context, epoch uint64, r connector.HopRecord) error {
	n, ok := o.first.hopPartitions(o.topic)
	if !ok {
		return sinkErrorf(o.topic, "hop topic written before CreateHop")
	}
	rec := producer.Record[[]byte, []byte]{Topic: o.topic, Key: r.Key, Value: r.Value}
	if r.Time != connector.NoTime {
		rec.Timestamp = time.UnixMilli(r.Time)
	}
	p := r.Partition
	if r.Mark != nil {
		rec.Headers = []producer.Header{{Key: markHeader, Value: []byte(fmt.Sprintf("%d;%d;%s", r.Mark.Watermark, r.Mark.Writers, r.Mark.Writer))}}
	} else {
		p = partitioner.KeyPartition(r.Key, int(n))
	}
	rec.Partition = &p
	return o.first.writeRecord(ctx, epoch, rec)
}

func (o *hopOutput) Commit(context.Context, checkpoint.Ref, []checkpoint.PartitionOffset) error {
	return fmt.Errorf("kafkaio: hop topic %q commits with its first sink, not by itself", o.topic)
}

func (o *hopOutput) Recorded(context.Context) (*connector.Recorded, error) { return nil, nil }

// hopRecord is the hop record rec carries: a mark when it has the mark
// header, a stream's record otherwise.
func hopRecord(rec consumer.Record) (connector.SourceRecord[connector.HopRecord], error) {
	out := connector.SourceRecord[connector.HopRecord]{Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Timestamp: rec.Timestamp}
	for _, h := range rec.Headers {
		if h.Key != markHeader {
			continue
		}
		m, err := parseMark(string(h.Value))
		if err != nil {
			return out, fmt.Errorf("hop mark %q: %w", h.Value, err)
		}
		out.Mark = m
		return out, nil
	}
	ms := connector.NoTime
	if !rec.Timestamp.IsZero() {
		ms = rec.Timestamp.UnixMilli()
	}
	out.Value = connector.HopRecord{Key: rec.Key, Value: rec.Value, Time: ms, Partition: rec.Partition}
	return out, nil
}

func parseMark(s string) (*connector.HopMark, error) {
	parts := strings.SplitN(s, ";", 3)
	if len(parts) != 3 {
		return nil, errors.New("not <watermark>;<writers>;<writer>")
	}
	wm, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		return nil, err
	}
	return &connector.HopMark{Watermark: wm, Writers: n, Writer: parts[2]}, nil
}

// hopState is a sink's record of its hops and of their purging.
type hopState struct {
	hopMu     sync.Mutex
	hopTopics []string         // every hop the job declared (Hop)
	hops      map[string]int32 // hop topic: partitions (CreateHop)
	purged    time.Time        // the last purge's start
	purging   bool
	bg        sync.WaitGroup // a purge in flight (not under hopMu)
}

// forgetHops deletes every record of the job's hop topics (Job.Forget):
// a job that starts over must not read what its earlier life wrote. The
// topics stay (a topic being deleted cannot be created again at once).
func (s *sink[T]) forgetHops(ctx context.Context, c *admin.Client) error {
	s.hopMu.Lock()
	topics := slices.Clone(s.hopTopics)
	s.hopMu.Unlock()
	return deleteAllRecords(ctx, c, topics)
}

// deleteAllRecords deletes every record of topics; one that does not
// exist is skipped.
func deleteAllRecords(ctx context.Context, c *admin.Client, topics []string) error {
	for _, topic := range topics {
		offs, err := c.ListOffsets(ctx, topic)
		if errors.Is(err, admin.ErrUnknownTopic) {
			continue
		}
		if err != nil {
			return fmt.Errorf("kafkaio: hop topic %s: %w", topic, err)
		}
		var below []admin.Committed
		for _, o := range offs {
			if o.End > o.Start {
				below = append(below, admin.Committed{Topic: topic, Partition: o.Partition, Offset: o.End})
			}
		}
		if err := c.DeleteRecords(ctx, below); err != nil {
			return fmt.Errorf("kafkaio: hop topic %s: %w", topic, err)
		}
	}
	return nil
}
