package producer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kordproject/kord/internal/rig/kafkatest"
	"github.com/kordproject/kord/internal/rig/syncbuf"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

func uuidString(r *rand.Rand) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], r.Uint64())
	binary.BigEndian.PutUint64(b[8:], r.Uint64())
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func newBytesProducer(t *testing.T, c *kafkatest.Cluster, opts ...producer.Opt) *producer.Producer[string, []byte] {
	t.Helper()
	p, err := producer.New(serde.String(), serde.Bytes(), append([]producer.Opt{producer.Brokers(c.Brokers)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestPlacementAndPerKeyOrder produces 100,000 records keyed by 10,000 UUIDs
// to a 12-partition topic and reads them back with an independent client:
// every record sits on the partition Kafka's Java rule gives (KeyPartition,
// itself checked against the real jar's vectors), and each key's records are
// in send order with none missing or repeated.
func TestPlacementAndPerKeyOrder(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const keys, perKey, parts = 10_000, 10, 12
		n := 100_000
		if testing.Short() {
			n = 10_000
		}
		topic := c.CreateTopic(t, parts, nil)
		p := newBytesProducer(t, c, producer.Set("linger.ms", "10"))
		r := rand.New(rand.NewPCG(1, 2))
		uuids := make([]string, keys)
		for i := range uuids {
			uuids[i] = uuidString(r)
		}
		var mu sync.Mutex
		var failures []error
		next := make([]uint64, keys)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for i := 0; i < n; i++ {
			k := r.IntN(keys)
			val := binary.BigEndian.AppendUint64(nil, next[k])
			next[k]++
			key := uuids[k]
			err := p.Produce(ctx, producer.Record[string, []byte]{Topic: topic, Key: key, Value: val}, func(d producer.Delivery, err error) {
				if err == nil && d.Partition != partitioner.KeyPartition([]byte(key), parts) {
					err = fmt.Errorf("delivered %s to partition %d", key, d.Partition)
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			})
			require.NoError(t, err)
		}
		require.NoError(t, p.Flush(ctx))
		require.Empty(t, failures)

		recs := c.ReadAll(t, topic, n, true, 2*time.Minute)
		require.Len(t, recs, n)
		seen := map[string]uint64{}
		for _, rec := range recs {
			require.Equal(t, partitioner.KeyPartition(rec.Key, parts), rec.Partition, "key %s", rec.Key)
			seq := binary.BigEndian.Uint64(rec.Value)
			require.Equal(t, seen[string(rec.Key)], seq, "key %s out of order at %s[%d]@%d", rec.Key, rec.Topic, rec.Partition, rec.Offset)
			seen[string(rec.Key)] = seq + 1
		}
		total := uint64(0)
		for k, s := range seen {
			total += s
			_ = k
		}
		require.Equal(t, uint64(n), total)
	})
}

// TestPlacementMatchesJavaVectors writes every key of the Java-generated
// vectors to a 12-partition topic and checks the broker holds each one on the
// partition kafka-clients computed (column p12).
func TestPlacementMatchesJavaVectors(t *testing.T) {
	type vec struct {
		key []byte
		p12 int32
	}
	f, err := os.Open("../partitioner/testdata/murmur2.tsv")
	require.NoError(t, err)
	defer f.Close()
	var vs []vec
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		fs := strings.Split(sc.Text(), "\t")
		key, err := hex.DecodeString(fs[1])
		require.NoError(t, err)
		p, err := strconv.Atoi(fs[7])
		require.NoError(t, err)
		vs = append(vs, vec{key, int32(p)})
	}
	require.GreaterOrEqual(t, len(vs), 5000)
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 12, nil)
		p, err := producer.New(serde.Bytes(), serde.Bytes(), producer.Brokers(c.Brokers))
		require.NoError(t, err)
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i, v := range vs {
			// Value = index, so the reader can find the vector.
			require.NoError(t, p.Produce(ctx, producer.Record[[]byte, []byte]{Topic: topic, Key: v.key, Value: []byte(strconv.Itoa(i))}, nil))
		}
		require.NoError(t, p.Flush(ctx))
		recs := c.ReadAll(t, topic, len(vs), false, time.Minute)
		require.Len(t, recs, len(vs))
		for _, r := range recs {
			i, err := strconv.Atoi(string(r.Value))
			require.NoError(t, err)
			require.Equal(t, vs[i].p12, r.Partition, "vector key %x", vs[i].key)
			require.True(t, bytes.Equal(vs[i].key, r.Key))
			require.NotNil(t, r.Key, "empty key must stay a key, not become null")
		}
	})
}

func TestUnknownTopic(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		p := newBytesProducer(t, c)
		topic := kafkatest.TopicName(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := p.Produce(ctx, producer.Record[string, []byte]{Topic: topic, Key: "k", Value: []byte("v")}, nil)
		require.ErrorIs(t, err, producer.ErrUnknownTopic)
		require.Contains(t, err.Error(), topic)
		var perr *producer.Error
		require.ErrorAs(t, err, &perr)
		require.Equal(t, topic, perr.Topic)
		// Nothing was created behind our back.
		err = p.Produce(ctx, producer.Record[string, []byte]{Topic: topic, Key: "k", Value: []byte("v")}, nil)
		require.ErrorIs(t, err, producer.ErrUnknownTopic)
	})
}

// TestLeaderlessPartition: with partition 3 reported without a leader,
// keyed records still hash over all 6 partitions (some go to 3, and are held
// until it has a leader again) while round-robin skips it.
func TestLeaderlessPartition(t *testing.T) {
	c := kafkatest.Fake(t)
	topic := c.CreateTopic(t, 6, nil)
	h := c.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Partitions: []int32{3}, Err: kerr.LeaderNotAvailable, Count: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	rr := newBytesProducer(t, c, producer.Partitioner(partitioner.NewRoundRobin()))
	for i := 0; i < 50; i++ {
		d, err := rr.ProduceSync(ctx, producer.Record[string, []byte]{Topic: topic, Key: "ignored", Value: []byte("x")})
		require.NoError(t, err)
		require.NotEqual(t, int32(3), d.Partition)
		require.Equal(t, []int32{0, 1, 2, 4, 5}[i%5], d.Partition, "record %d", i)
	}

	p := newBytesProducer(t, c)
	var to3 []string
	for i := 0; len(to3) < 5; i++ {
		k := "user-" + strconv.Itoa(i)
		part, err := p.Partition(ctx, producer.Record[string, []byte]{Topic: topic, Key: k})
		require.NoError(t, err)
		require.Equal(t, partitioner.KeyPartition([]byte(k), 6), part)
		if part == 3 {
			to3 = append(to3, k)
		}
	}
	done := make(chan producer.Delivery, len(to3))
	for _, k := range to3 {
		require.NoError(t, p.Produce(ctx, producer.Record[string, []byte]{Topic: topic, Key: k, Value: []byte(k)}, func(d producer.Delivery, err error) {
			require.NoError(t, err)
			done <- d
		}))
	}
	// kfake answers a faulted partition with the error but leader 0, which
	// librdkafka still uses, so unlike on a real broker the records are not
	// held back here; what this test proves is where they are placed.
	h.Remove()
	require.NoError(t, p.Flush(ctx))
	for range to3 {
		require.Equal(t, int32(3), (<-done).Partition)
	}
}

// TestDeliveryFailureStopsOrderedProducer: a record the broker rejects
// stops the producer; later records are refused instead of written after the
// gap, and the failure names the topic and partition.
func TestDeliveryFailureStopsOrderedProducer(t *testing.T) {
	c := kafkatest.Fake(t)
	topic := c.CreateTopic(t, 1, nil)
	c.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.InvalidRecord, Count: 1})
	p := newBytesProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := p.ProduceSync(ctx, producer.Record[string, []byte]{Topic: topic, Key: "k", Value: []byte("1")})
	require.Error(t, err)
	var perr *producer.Error
	require.ErrorAs(t, err, &perr)
	require.Equal(t, topic, perr.Topic)
	require.Equal(t, int32(0), perr.Partition)
	require.Contains(t, err.Error(), topic)

	err = p.Produce(ctx, producer.Record[string, []byte]{Topic: topic, Key: "k", Value: []byte("2")}, nil)
	require.ErrorIs(t, err, producer.ErrFailed)
	require.ErrorIs(t, p.Flush(ctx), producer.ErrFailed)
	require.Empty(t, c.ReadAll(t, topic, 1, false, 2*time.Second))
}

// TestUnreportedFailureReturnedByFlush: a record produced without a callback
// that fails is returned by Flush, never dropped.
func TestUnreportedFailureReturnedByFlush(t *testing.T) {
	c := kafkatest.Fake(t)
	topic := c.CreateTopic(t, 1, nil)
	c.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.InvalidRecord, Count: -1})
	p := newBytesProducer(t, c, producer.AllowReordering(), producer.Set("enable.idempotence", "false"), producer.Set("enable.gapless.guarantee", "false"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < 3; i++ {
		require.NoError(t, p.Produce(ctx, producer.Record[string, []byte]{Topic: topic, Key: "k", Value: []byte("v")}, nil))
	}
	err := p.Flush(ctx)
	require.Error(t, err)
	require.Equal(t, 3, strings.Count(err.Error(), "deliver: topic"), err.Error())
	require.NoError(t, p.Flush(ctx), "failures are returned once")
}

func TestConfigRefusesReorderingAndForcedSettings(t *testing.T) {
	for _, tc := range []struct {
		opt  producer.Opt
		want error
	}{
		{producer.Set("enable.idempotence", "false"), producer.ErrReordering},
		{producer.Set("acks", "1"), producer.ErrReordering},
		{producer.Set("enable.gapless.guarantee", "false"), producer.ErrReordering},
		{producer.Set("partitioner", "consistent_random"), producer.ErrConfig},
		{producer.Set("allow.auto.create.topics", "true"), producer.ErrConfig},
		{producer.Set("transactional.id", "x"), producer.ErrConfig},
	} {
		_, err := producer.New(serde.Bytes(), serde.Bytes(), producer.Brokers("127.0.0.1:1"), tc.opt)
		require.ErrorIs(t, err, tc.want)
	}
	_, err := producer.New(serde.Bytes(), serde.Bytes())
	require.ErrorIs(t, err, producer.ErrConfig, "no brokers")
	// The explicit opt-out is honoured.
	p, err := producer.New(serde.Bytes(), serde.Bytes(), producer.Brokers("127.0.0.1:1"),
		producer.AllowReordering(), producer.Set("enable.idempotence", "false"), producer.Set("acks", "1"))
	require.NoError(t, err)
	require.NoError(t, p.Close())
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer = syncbuf.Buffer

func TestLogsGoToSlogWithSecretsRedacted(t *testing.T) {
	c := kafkatest.Fake(t)
	topic := c.CreateTopic(t, 1, nil)
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := producer.New(serde.String(), serde.String(), producer.Brokers(c.Brokers), producer.Logger(log),
		producer.Set("sasl.password", "hunter2"), producer.Set("debug", "metadata"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = p.ProduceSync(ctx, producer.Record[string, string]{Topic: topic, Key: "k", Value: "v"})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	out := buf.String()
	require.Contains(t, out, "kord producer started")
	require.Contains(t, out, "sasl.password=[redacted]")
	require.NotContains(t, out, "hunter2")
	require.Contains(t, out, "librdkafka: ", "librdkafka's own log reaches slog")
}

func TestCloseEndsGoroutines(t *testing.T) {
	c := kafkatest.Fake(t)
	topic := c.CreateTopic(t, 3, nil)
	for i := 0; i < 3; i++ {
		p, err := producer.New(serde.String(), serde.String(), producer.Brokers(c.Brokers))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = p.ProduceSync(ctx, producer.Record[string, string]{Topic: topic, Key: "k", Value: "v"})
		cancel()
		require.NoError(t, err)
		require.NoError(t, p.Close())
		require.NoError(t, p.Close(), "second Close is a no-op")
		require.ErrorIs(t, p.Produce(context.Background(), producer.Record[string, string]{Topic: topic}, nil), producer.ErrClosed)
	}
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		require.NotContains(t, g, "kord/producer.", "goroutine left after Close:\n%s", g)
		require.NotContains(t, g, "confluent-kafka-go", "goroutine left after Close:\n%s", g)
	}
}

func TestCloseBoundedWhenBrokerUnreachable(t *testing.T) {
	p, err := producer.New(serde.String(), serde.String(), producer.Brokers("127.0.0.1:1"), producer.CloseTimeout(200*time.Millisecond), producer.MetadataTimeout(300*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err = p.Produce(ctx, producer.Record[string, string]{Topic: "t", Key: "k", Value: "v"}, nil)
	require.Error(t, err)
	var perr *producer.Error
	require.True(t, errors.As(err, &perr) && perr.Op == "metadata", "%v", err)
	require.NoError(t, p.Close())
	require.Less(t, time.Since(start), 5*time.Second)
}

// TestMetadataRefreshSeesNewPartitions: partitions added to a topic are used
// after the periodic refresh, and keys then follow the new count, as in Java.
func TestMetadataRefreshSeesNewPartitions(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		topic := c.CreateTopic(t, 2, nil)
		p := newBytesProducer(t, c, producer.MetadataMaxAge(100*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		key := ""
		for i := 0; ; i++ {
			key = "k" + strconv.Itoa(i)
			if partitioner.KeyPartition([]byte(key), 5) >= 2 {
				break
			}
		}
		d, err := p.ProduceSync(ctx, producer.Record[string, []byte]{Topic: topic, Key: key, Value: []byte("before")})
		require.NoError(t, err)
		require.Equal(t, partitioner.KeyPartition([]byte(key), 2), d.Partition)

		c.AddPartitions(t, topic, 5)

		want := partitioner.KeyPartition([]byte(key), 5)
		require.Eventually(t, func() bool {
			got, err := p.Partition(ctx, producer.Record[string, []byte]{Topic: topic, Key: key})
			return err == nil && got == want
		}, 30*time.Second, 50*time.Millisecond)
		d, err = p.ProduceSync(ctx, producer.Record[string, []byte]{Topic: topic, Key: key, Value: []byte("after")})
		require.NoError(t, err)
		require.Equal(t, want, d.Partition)
	})
}

// TestStaleDeliveryErrorRefreshesMetadata: a delivery error that suggests
// stale metadata makes the producer re-read the topic's metadata at once,
// not after MetadataMaxAge. The topic is deleted under the producer: the
// broker refuses the next produce, librdkafka refreshes its own metadata,
// finds the topic gone and fails the record with "Local: Unknown partition";
// kord's refresh then forgets the topic. (Broker errors such as
// NOT_LEADER_OR_FOLLOWER cannot drive this test: librdkafka retries them
// without counting retries until message.timeout.ms and then reports a
// time-out, which is not a sign of stale metadata.)
func TestStaleDeliveryErrorRefreshesMetadata(t *testing.T) {
	c := kafkatest.Fake(t)
	topic := c.CreateTopic(t, 2, nil)
	// librdkafka waits topic.metadata.propagation.max.ms (30s) before it
	// believes a topic is gone.
	p := newBytesProducer(t, c, producer.MetadataMaxAge(time.Hour), producer.Set("topic.metadata.propagation.max.ms", "10"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := producer.Record[string, []byte]{Topic: topic, Key: "k", Value: []byte("v")}
	_, err := p.ProduceSync(ctx, rec)
	require.NoError(t, err)

	req := kmsg.NewPtrDeleteTopicsRequest()
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.TopicNames = append(req.TopicNames, topic)
	resp, err := req.RequestWith(ctx, c.Client(t))
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
	time.Sleep(200 * time.Millisecond)
	_, err = p.Partition(ctx, rec)
	require.NoError(t, err, "without an error kord keeps its metadata until MetadataMaxAge")

	_, err = p.ProduceSync(ctx, rec)
	var perr *producer.Error
	require.ErrorAs(t, err, &perr)
	require.Equal(t, "deliver", perr.Op, "%v", err)
	require.Eventually(t, func() bool {
		_, err := p.Partition(ctx, rec)
		return errors.Is(err, producer.ErrUnknownTopic)
	}, 10*time.Second, 20*time.Millisecond)
}

// TestNewAllocatesLittle: a producer's Go memory is small. confluent-kafka-go
// sizes its events and produce channels for 1,000,000 entries by default,
// 24 MB of pointer-holding buffers per producer, which the garbage
// collector scans on every cycle and which raised the benchmark job's peak
// RSS by about 45 MB (bench/RESULTS.md); kord sizes them down.
func TestNewAllocatesLittle(t *testing.T) {
	c := kafkatest.Fake(t)
	for _, opts := range [][]producer.Opt{nil, {producer.TransactionalID("t"), producer.CommitReports()}} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		p, err := producer.New(serde.String(), serde.String(), append(opts, producer.Brokers(c.Brokers))...)
		require.NoError(t, err)
		runtime.ReadMemStats(&after)
		require.NoError(t, p.Close())
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(4<<20), "bytes allocated by New")
	}
}
