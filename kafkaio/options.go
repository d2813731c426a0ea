package kafkaio

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
	"unsafe"

	"github.com/kordproject/kord/cluster"
	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/internal/kafkaconf"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/partitioner"
	"github.com/kordproject/kord/serde"
)

// Opt configures a Client, a source, a sink or an Output: one
// option type for all of them. Each option's doc says what it configures;
// one given to something it does not configure is an error naming both
// (at once from NewClient, from the job's check of its sources and sinks
// otherwise).
type Opt func(*options)

// part is what an option configures.
type part uint8

const (
	toClient part = 1 << iota
	toSource
	toSink
	toOutput
)

func (p part) String() string {
	switch p {
	case toClient:
		return "a Client"
	case toSource:
		return "a source"
	case toSink:
		return "a sink"
	default:
		return "an Output"
	}
}

// options holds what the options set; a Client, a source and a sink each
// keep their own.
type options struct {
	of       part     // what is being configured
	misplace []string // options that configure something else
	err      error    // Properties

	// Client, and the part's own settings for a source or a sink.
	cluster  *cluster.Config
	brokers  []string
	settings map[string]string
	log      *slog.Logger

	// Source.
	start   consumer.Start
	bounded bool
	check   *placementCheck // CheckPlacement

	// Sink.
	key         any // func(T) ([]byte, error), checked by NewSink
	topicOf     any // func(T) string, checked by NewSink
	sideTopics  []string
	epochBuffer int
	epochBytes  int // EpochBufferBytes
	deadLetters string
	initTimeout time.Duration
	session     time.Duration // SessionTimeout
	placement   *partitioner.Rule

	// Source and sink.
	partitionMetrics bool
}

// apply applies opts to a fresh options for part p.
func apply(p part, opts []Opt) options {
	o := options{of: p}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

// is records name as misplaced unless it configures what is being
// configured (one of parts), and reports whether it does.
func (o *options) is(name string, parts part) bool {
	if o.of&parts != 0 {
		return true
	}
	o.misplace = append(o.misplace, name)
	return false
}

// misplaced is the error of options given to what they do not configure.
func (o *options) misplaced(what string) error {
	var errs []error
	for _, name := range o.misplace {
		errs = append(errs, fmt.Errorf("%w: kafkaio: %s: option %s does not configure %s", keyed.ErrPermanent, what, name, o.of))
	}
	return errors.Join(errs...)
}

func (o *options) set(key, value string) {
	if o.settings == nil {
		o.settings = map[string]string{}
	}
	o.settings[key] = value
}

// Cluster makes a Client of the cluster c describes (cluster.New): the
// same configuration a program's producer, consumers and admin client
// take. Configures a Client; instead of Brokers, Properties and Set.
func Cluster(c *cluster.Config) Opt {
	return func(o *options) {
		if o.is("Cluster", toClient) {
			o.cluster = c
		}
	}
}

// Brokers are the bootstrap servers, host:port (Kafka's
// bootstrap.servers). Configures a Client; required, unless Cluster or a
// Properties file gives them.
func Brokers(addrs ...string) Opt {
	return func(o *options) {
		if o.is("Brokers", toClient) {
			o.brokers = append(o.brokers, addrs...)
		}
	}
}

// Properties applies a Java client.properties file, the one a Java or
// Flink client of the same cluster uses, to every client: each Java
// property is mapped to its librdkafka equivalent (security.protocol,
// sasl.mechanism, sasl.jaas.config, ssl.truststore.*, ssl.keystore.*,
// ...; docs/security.md's table). A property with no equivalent makes NewClient
// fail, naming it and what to use instead. Its bootstrap.servers serves
// when Brokers is not given; options after it override what it sets.
// Configures a Client.
func Properties(path string) Opt {
	return func(o *options) {
		if !o.is("Properties", toClient) {
			return
		}
		if o.settings == nil {
			o.settings = map[string]string{}
		}
		if err := kafkaconf.LoadJavaInto(path, o.settings); err != nil {
			o.err = errors.Join(o.err, fmt.Errorf("kafkaio: %w", err))
		}
	}
}

// Set passes a librdkafka property by librdkafka's name. On a Client it
// reaches every client (security settings, client.id, ...); on a source,
// its consumers only; on a sink, its producer only. The settings kord
// derives or owns are refused where they are used, naming them: see the
// producer and consumer packages, and the package doc's "The commit
// protocol" (the sink's transactional settings). A sink bounds its
// producer's queue at 4 MiB (queue.buffering.max.kbytes; librdkafka's
// default is 1 GiB), or at one record of message.max.bytes if that is
// more, unless it is set, like [EpochBufferBytes].
func Set(key, value string) Opt {
	return func(o *options) {
		if o.is("Set", toClient|toSource|toSink) {
			o.set(key, value)
		}
	}
}

// Logger receives the log of what it configures: every client of a
// Client, or one source or sink (and its clients). Default: the Client's
// logger, else the job's.
func Logger(l *slog.Logger) Opt {
	return func(o *options) {
		if o.is("Logger", toClient|toSource|toSink) {
			o.log = l
		}
	}
}

// StartFrom is where a fresh start (no checkpoint) reads each partition
// from (Flink KafkaSource.setStartingOffsets; Kafka's auto.offset.reset):
// consumer.Earliest (default), consumer.Latest, consumer.AtTime,
// consumer.AtOffsets or consumer.FromGroup. It is resolved once, to the
// concrete offsets of checkpoint 0; a restore always reads on from the
// checkpoint's offsets (or, with keyed.Failover, from StartFrom again when
// the checkpoint was taken on another cluster or topic). Configures a
// source.
func StartFrom(s consumer.Start) Opt {
	return func(o *options) {
		if o.is("StartFrom", toSource) {
			o.start = s
		}
	}
}

// Bounded makes the source end where the topic ends when the source first
// looks (Flink KafkaSource.setBounded(OffsetsInitializer.latest())): each
// partition's last stable offset, resolved once. When every partition is
// read up to it the job commits a final checkpoint and Run returns nil.
// A job of several processes with a stage keyed by a field does not end
// so: the hop topic between its processes has no end (stop it instead).
// Default: unbounded, the source waits for more. Configures a source.
func Bounded() Opt {
	return func(o *options) {
		if o.is("Bounded", toSource) {
			o.bounded = true
		}
	}
}

// Placement makes the sink place each keyed record by rule, as the client
// that defines it does (partitioner.SaramaHash for goka's and sarama's
// consumers, say); records without a key keep the producer's default.
// Default: partitioner.Java. Configures a sink (and the Outputs through
// it).
func Placement(rule partitioner.Rule) Opt {
	return func(o *options) {
		if o.is("Placement", toSink) {
			o.placement = &rule
		}
	}
}

// CheckPlacement makes the source check each keyed record it reads
// against rule: a record whose partition is not the one rule gives its
// key (for the topic's partition count when the source's reader was
// assigned) was written by another partitioner, and a stage keyed by
// partition would split the key's state. With fail, the job fails at the
// first one, naming its topic, partition, offset and key, the partition
// the rule gives and the rule; otherwise each is logged (the first ten,
// then one in a thousand) and counted (kord_source_misplaced_records_total),
// and processed. Records without a key, and keys rule does not place by
// their bytes (partitioner.Rule.Keyed), are not checked. Configures a
// source.
func CheckPlacement(rule partitioner.Rule, fail bool) Opt {
	return func(o *options) {
		if o.is("CheckPlacement", toSource) {
			o.check = &placementCheck{rule: rule, fail: fail}
		}
	}
}

// PartitionMetrics adds a series per partition to the lag the source or
// the sink reports (kord_source_partition_lag_records,
// kord_commit_partition_lag_records), beside the one per topic. Default: per topic only,
// so that the series a job exports stay bounded however many partitions
// its topics have. Configures a source or a sink.
func PartitionMetrics() Opt {
	return func(o *options) {
		if o.is("PartitionMetrics", toSource|toSink) {
			o.partitionMetrics = true
		}
	}
}

// Key makes each record's key key(v), encoded by keys: Key(func(r Result)
// string { return r.User }, serde.String()). Without it every record's key
// is null, and the records go round robin over the partitions (the
// producer's null-key rule, [partitioner.NewLegacy]'s): one key's results
// are then in no one partition, nor in order. Configures a sink.
func Key[T, K any](key func(v T) K, keys serde.Serde[K]) Opt {
	return func(o *options) {
		if !o.is("Key", toSink|toOutput) {
			return
		}
		switch s, _ := any(keys).(serde.Serde[string]); {
		case key == nil || keys == nil:
			o.key = func(T) ([]byte, error) { return nil, nil }
		case s == serde.String():
			// A string key's bytes are the string's: shared instead of
			// copied, an allocation saved per record. The sink only reads
			// them (to place the record, and to hand them to librdkafka,
			// which copies them).
			str := any(key).(func(T) string)
			o.key = func(v T) ([]byte, error) { return stringBytes(str(v)), nil }
		default:
			o.key = func(v T) ([]byte, error) { return keys.Encode(nil, key(v)) }
		}
	}
}

// SideOutput routes some results to other topics (alerts beside counts,
// say): route returns a result's topic, "" for the sink's own. Every topic
// is written by the same transactional producer, so side outputs commit
// with the main output and the dead letters, exactly once. Name every
// topic route can return in topics, so that the sink checks they exist
// before the job starts. Configures a sink.
func SideOutput[T any](route func(v T) string, topics ...string) Opt {
	return func(o *options) {
		if o.is("SideOutput", toSink) {
			o.topicOf, o.sideTopics = route, append(o.sideTopics, topics...)
		}
	}
}

// DeadLetterTopic sends what can never be processed to topic, in the same
// transactions as the output, with headers naming where it came from and
// why (kord.dlq.*), and counts it: every input record a source cannot
// decode, and a stand-in (its key, its size, the error) for every output
// record too large to write. Default none: such a record fails the job,
// naming its topic, partition and offset (Kafka Streams'
// deserialization.exception.handler, LogAndFail by default). Configures a
// sink.
func DeadLetterTopic(topic string) Opt {
	return func(o *options) {
		if o.is("DeadLetterTopic", toSink) {
			o.deadLetters = topic
		}
	}
}

// EpochBuffer bounds the records held after a checkpoint's barrier until
// its commit; Write blocks while it is full (backpressure to the sources).
// Default 100,000. [EpochBufferBytes] bounds the same records by size; the
// buffer is full at whichever bound it reaches first. Configures a sink.
func EpochBuffer(n int) Opt {
	return func(o *options) {
		if o.is("EpochBuffer", toSink) {
			o.epochBuffer = n
		}
	}
}

// EpochBufferBytes bounds the bytes of the records (keys, values and
// headers) held after a checkpoint's barrier until its commit, as
// [EpochBuffer] bounds their number. Default 4 MiB: the records a sink
// takes during a commit's round trips at half a million records a second,
// without the Go heap's growth doubling a much larger buffer (the records
// then take about twice their bytes in memory). A record larger than the
// bound is held alone. Configures a sink.
func EpochBufferBytes(n int) Opt {
	return func(o *options) {
		if o.is("EpochBufferBytes", toSink) {
			o.epochBytes = n
		}
	}
}

// InitTimeout bounds the sink's wait for the brokers at the start of every
// run (metadata and InitTransactions). Default 30 s. Configures a sink.
func InitTimeout(d time.Duration) Opt {
	return func(o *options) {
		if o.is("InitTimeout", toSink) {
			o.initTimeout = d
		}
	}
}

// SessionTimeout is how long Kafka waits for a silent process of a job on
// several processes (keyed.Instance) before it moves the process's
// partitions to the others: the group member's session.timeout.ms. Default
// 10 s, Kafka's default before 3.0 (KIP-735 made it 45 s). It bounds how
// long a dead process holds back the others' output too: when its
// partitions move, a survivor fences its transactional id, which aborts
// what it left open, and read_committed readers see the output behind it
// again. A longer one rides out longer pauses (the heartbeats come from
// librdkafka's own thread, which Go's garbage collector does not stop);
// a process restarted under its id within it gets its partitions back
// without a rebalance. Configures a sink.
func SessionTimeout(d time.Duration) Opt {
	return func(o *options) {
		if o.is("SessionTimeout", toSink) {
			o.session = d
		}
	}
}

// defaultSession is SessionTimeout's default.
const defaultSession = 10 * time.Second

// memberSettings are the group member's settings beside the Client's.
func (o *options) memberSettings() map[string]string {
	session := o.session
	if session <= 0 {
		session = defaultSession
	}
	return map[string]string{"session.timeout.ms": strconv.FormatInt(session.Milliseconds(), 10)}
}

// stringBytes is s's bytes without a copy: read-only. The empty string
// gives an empty, non-nil slice (an empty key, never a null key).
func stringBytes(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
