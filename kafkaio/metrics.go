package kafkaio

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/kordproject/kord/admin"
	"github.com/kordproject/kord/metrics"
)

// The Kafka edge's figures (metrics.Collector), read at scrape time. The
// engine's Job.Collect calls them and labels their samples with the job
// and the stage (DESIGN.md, "Metrics").
//
// Lag is kord's own: its consumers never commit (librdkafka's
// consumer_lag is meaningless for them), so a source reports how far its
// readers' positions stand behind the partitions' last stable offsets, and
// a sink how far the offsets its commit group holds do.

// scrapeTimeout bounds the requests one Collect makes.
const scrapeTimeout = 10 * time.Second

var (
	_ metrics.Collector = (*source[int])(nil)
	_ metrics.Collector = (*sink[int])(nil)
)

// lagSamples emits a topic's lag in records: kord_<of>_lag_records, the sum
// over its partitions, and with per each partition's,
// kord_<of>_partition_lag_records.
func lagSamples(emit func(metrics.Sample), of, help, topic string, parts map[int32]int64, per bool) {
	var sum int64
	for _, n := range parts {
		sum += n
	}
	t := metrics.Label{Name: "topic", Value: topic}
	emit(metrics.Sample{Name: "kord_" + of + "_lag_records", Help: help, Kind: metrics.Gauge, Labels: []metrics.Label{t}, Value: float64(sum)})
	if !per {
		return
	}
	ids := make([]int32, 0, len(parts))
	for p := range parts {
		ids = append(ids, p)
	}
	slices.Sort(ids)
	for _, p := range ids {
		emit(metrics.Sample{Name: "kord_" + of + "_partition_lag_records", Help: help + " One partition's (PartitionMetrics).", Kind: metrics.Gauge,
			Labels: []metrics.Label{t, {Name: "partition", Value: strconv.Itoa(int(p))}}, Value: float64(parts[p])})
	}
}

// Collect implements metrics.Collector: how far the readers this process
// runs now stand behind the ends of the partitions they read, in offsets
// (kord_source_lag_records) and in time (kord_source_lag_seconds: the age
// of the last record read from a partition with more waiting, the most
// over the partitions; 0 when every partition is caught up). A source with
// no reader open (its job is not running here) reports no lag, and one
// whose ends cannot be read now reports none rather than a stale figure
// (the failure is logged).
func (k *source[T]) Collect(emit func(metrics.Sample)) {
	if k.cfg.check != nil {
		emit(metrics.Sample{Name: "kord_source_misplaced_records_total", Help: "Keyed records read from another partition than the one CheckPlacement's rule gives their key.",
			Kind: metrics.Counter, Labels: []metrics.Label{{Name: "topic", Value: k.topic}, {Name: "rule", Value: k.cfg.check.rule.Name()}}, Value: float64(k.cfg.check.misplaced.Load())})
	}
	k.mu.Lock()
	rs := make([]*reader[T], 0, len(k.live))
	for r := range k.live {
		rs = append(rs, r)
	}
	k.mu.Unlock()
	if len(rs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	parts := map[int32]int64{}
	var age time.Duration
	now := time.Now()
	for _, r := range rs {
		lags, err := r.c.Lag(ctx)
		if err != nil {
			k.c.logger(k.cfg.log).Warn("kafkaio: source: its lag cannot be read now", "topic", k.topic, "err", err)
			return
		}
		for _, l := range lags {
			parts[l.Partition] += l.Behind
			if l.Behind > 0 && !l.LastRecord.IsZero() {
				age = max(age, now.Sub(l.LastRecord))
			}
		}
	}
	lagSamples(emit, "source", "Offsets in the source's partitions past what this process's readers have read (up to the last stable offset).", k.topic, parts, k.cfg.partitionMetrics)
	emit(metrics.Sample{Name: "kord_source_lag_seconds", Help: "The age of the last record read from a partition with more records waiting, the most over the source's partitions this process reads; 0 when all are caught up.",
		Kind: metrics.Gauge, Labels: []metrics.Label{{Name: "topic", Value: k.topic}}, Value: age.Seconds()})
	emit(metrics.Sample{Name: "kord_source_partitions", Help: "The source's partitions this process reads now.",
		Kind: metrics.Gauge, Labels: []metrics.Label{{Name: "topic", Value: k.topic}}, Value: float64(len(parts))})
}

// Collect implements metrics.Collector: the sink's counts, and the job's
// commit lag, how far the offsets its commit group holds stand behind the
// inputs' last stable offsets (kord_commit_lag_records, per input topic;
// from a partition's log start where the group holds no offset): what a
// restore would read again. The same on every process of a job; it is
// reported once the sink has run in this process (it knows the job's
// inputs then), and not when the cluster cannot be read now (the failure
// is logged).
func (s *sink[T]) Collect(emit func(metrics.Sample)) {
	s.mu.Lock()
	info, buffered, bufBytes := s.info, len(s.buffer), s.bufBytes
	s.mu.Unlock()
	one := func(name, help string, kind metrics.Kind, v float64) {
		emit(metrics.Sample{Name: name, Help: help, Kind: kind, Value: v})
	}
	one("kord_sink_epoch_buffer_records", "Records waiting in the sink's epoch buffer for the commit of the checkpoint before theirs.", metrics.Gauge, float64(buffered))
	one("kord_sink_epoch_buffer_capacity", "The epoch buffer's bound (EpochBuffer): Write blocks when it is full.", metrics.Gauge, float64(s.epochBuffer()))
	one("kord_sink_epoch_buffer_bytes", "Bytes (keys, values, headers) of the records waiting in the sink's epoch buffer.", metrics.Gauge, float64(bufBytes))
	one("kord_sink_epoch_buffer_capacity_bytes", "The epoch buffer's bound in bytes (EpochBufferBytes): Write blocks when it is full.", metrics.Gauge, float64(s.epochBufferBytes()))
	one("kord_sink_too_large_total", "Output records too large for the broker, whose stand-ins went to the dead-letter topic.", metrics.Counter, float64(s.tooLarge.Load()))
	one("kord_producer_fenced_total", "Times the sink's producer was found fenced by a newer producer of its transactional id.", metrics.Counter, float64(s.fenced.Load()))
	one("kord_instances_fenced_total", "Departed processes of the job whose transactional ids this process fenced.", metrics.Counter, float64(s.fencedOthers.Load()))
	one("kord_partitions_assigned_total", "Input partitions the commit group assigned to this process (several processes).", metrics.Counter, float64(s.assignedParts.Load()))
	one("kord_partitions_revoked_total", "Input partitions the commit group took from this process (several processes).", metrics.Counter, float64(s.revokedParts.Load()))
	if info.Job == "" || len(info.Inputs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	lag, err := commitLag(ctx, s.c, info.Job, info.Inputs)
	if err != nil {
		s.c.logger(info.Logger).Warn("kafkaio: sink: the commit lag cannot be read now", "group", CommitGroup(info.Job), "err", err)
		return
	}
	for _, topic := range info.Inputs {
		lagSamples(emit, "commit", "Offsets in the job's input partitions past those its commit group holds (up to the last stable offset): what a restore reads again.", topic, lag[topic], s.cfg.partitionMetrics)
	}
}

// commitLag returns, for each partition of topics, the offsets between
// what job's commit group holds (a partition's log start where it holds
// none) and the partition's last stable offset.
func commitLag(ctx context.Context, c *Client, job string, topics []string) (map[string]map[int32]int64, error) {
	a, err := c.admin(nil)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	out := map[string]map[int32]int64{}
	var tps []admin.TopicPartition
	starts := map[admin.TopicPartition]admin.Offsets{}
	for _, topic := range topics {
		offs, err := a.ListOffsets(ctx, topic)
		if err != nil {
			return nil, err
		}
		out[topic] = map[int32]int64{}
		for _, o := range offs {
			tp := admin.TopicPartition{Topic: topic, Partition: o.Partition}
			tps = append(tps, tp)
			starts[tp] = o
		}
	}
	committed, err := a.GroupOffsets(ctx, CommitGroup(job), tps)
	if err != nil {
		return nil, err
	}
	for _, o := range committed {
		tp := admin.TopicPartition{Topic: o.Topic, Partition: o.Partition}
		log := starts[tp]
		from := o.Offset
		if from < 0 {
			from = log.Start
		}
		out[o.Topic][o.Partition] = max(0, log.Stable-from)
	}
	return out, nil
}
