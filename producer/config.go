package producer

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kordproject/kord/cluster"
	"github.com/kordproject/kord/internal/kafkaconf"
	"github.com/kordproject/kord/partitioner"
)

// Opt configures a Producer.
type Opt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

type cfg struct {
	brokers         []string
	settings        map[string]string // librdkafka settings by their own names
	part            partitioner.Partitioner
	log             *slog.Logger
	metadataMaxAge  time.Duration
	metadataTimeout time.Duration
	closeTimeout    time.Duration
	allowReordering bool
	transactionalID string
	noReports       bool
	err             error             // from an option that could not be applied (Properties)
	checked         map[string]string // Cluster's: checked when it was made
}

func defaultCfg() cfg {
	return cfg{
		settings:        map[string]string{},
		log:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		metadataMaxAge:  5 * time.Minute,
		metadataTimeout: kafkaconf.DefaultTimeout,
		closeTimeout:    30 * time.Second,
	}
}

// Brokers sets the bootstrap servers (librdkafka bootstrap.servers; Java
// bootstrap.servers). Required, here or through Set.
func Brokers(addrs ...string) Opt {
	return opt(func(c *cfg) { c.brokers = append(c.brokers, addrs...) })
}

// Set passes a librdkafka setting through by its own name (see librdkafka's
// CONFIGURATION.md), for example Set("linger.ms", "20") or security settings.
// Settings that would let librdkafka pick partitions, create topics or
// reorder a key's records are refused by New; see AllowReordering. An alias
// librdkafka accepts (request.required.acks for acks, metadata.broker.list
// for bootstrap.servers) is checked as the setting it names, and setting
// both names to different values is refused.
func Set(key, value string) Opt {
	return opt(func(c *cfg) { c.settings[key] = value })
}

// Cluster connects to the cluster c describes: its bootstrap servers and
// settings, checked once when c was made (cluster.New). Settings and
// brokers given by this client's own options win over c's.
func Cluster(cl *cluster.Config) Opt {
	return opt(func(c *cfg) {
		c.checked = kafkaconf.Adopt(c.settings, cl.Settings())
	})
}

// Properties applies a Java client.properties file, the one a Java or
// Flink client of the same cluster uses: each Java property is mapped to
// its librdkafka equivalent (security.protocol, sasl.mechanism,
// sasl.jaas.config, ssl.truststore.*, ssl.keystore.*, ...; docs/security.md's
// table), and a property with no equivalent makes New fail, naming it and
// what to use instead. Options after it override what it sets; Brokers
// overrides its bootstrap.servers.
func Properties(path string) Opt {
	return opt(func(c *cfg) {
		if err := kafkaconf.LoadJavaInto(path, c.settings); err != nil {
			c.err = errors.Join(c.err, fmt.Errorf("%w: %w", ErrConfig, err))
		}
	})
}

// Partitioner sets the partitioner that places every record. Default:
// partitioner.NewLegacy(), which places keyed records as every Java producer
// since 0.10.2 does and round-robins null-key records over available
// partitions.
func Partitioner(p partitioner.Partitioner) Opt {
	return opt(func(c *cfg) { c.part = p })
}

// Logger sets where the producer logs, including librdkafka's own log.
// Default: nothing is logged.
func Logger(l *slog.Logger) Opt {
	return opt(func(c *cfg) { c.log = l })
}

// MetadataMaxAge sets how often topic metadata (partition count and which
// partitions have a leader) is refreshed when nothing else triggers it.
// Default 5m, as Java's metadata.max.age.ms. A delivery error that says the
// partition or topic is unknown triggers a refresh at once. Leader changes
// do not reach kord as delivery errors (librdkafka retries NOT_LEADER and
// LEADER_NOT_AVAILABLE itself until message.timeout.ms and refreshes its
// own metadata meanwhile), so kord's view of which partitions have a leader,
// which only round-robin of records without a key uses, lags by up to
// MetadataMaxAge.
func MetadataMaxAge(d time.Duration) Opt {
	return opt(func(c *cfg) { c.metadataMaxAge = d })
}

// MetadataTimeout bounds one metadata request: within it the request
// succeeds or fails classified (ErrAuth, ErrUnreachable, ErrDenied,
// ErrUnknownTopic). Default 10s (kafkaconf.DefaultTimeout).
func MetadataTimeout(d time.Duration) Opt {
	return opt(func(c *cfg) { c.metadataTimeout = d })
}

// CloseTimeout bounds how long Close waits for outstanding deliveries before
// it purges them (they then fail, through their callbacks and Close's error).
// Default 30s.
func CloseTimeout(d time.Duration) Opt {
	return opt(func(c *cfg) { c.closeTimeout = d })
}

// AllowReordering accepts settings that can write one key's records out of
// order or with gaps (enable.idempotence=false, acks or its alias
// request.required.acks other than all, enable.gapless.guarantee=false).
// Without it New refuses them.
func AllowReordering() Opt {
	return opt(func(c *cfg) { c.allowReordering = true })
}

// TransactionalID makes the producer transactional (librdkafka and Java
// transactional.id). Call InitTransactions before the first transaction.
func TransactionalID(id string) Opt {
	return opt(func(c *cfg) { c.transactionalID = id })
}

// CommitReports makes a transactional producer skip per-record delivery
// reports: CommitTransaction is where a failed record shows (the commit
// fails and the transaction must be aborted), as librdkafka's
// transactional API reports it. Produce then takes no done callback, and
// Flush waits for librdkafka's queue to drain. It saves a report crossing
// from C to Go per record (the raw loop in bench/peers/librdkafka runs this way).
// Refused without TransactionalID.
func CommitReports() Opt {
	return opt(func(c *cfg) { c.noReports = true })
}

// forced are settings kord owns. Each maps to the reason a user value is
// refused.
var forced = map[string]string{
	"partitioner":               "kord chooses every partition with its partitioner package; use producer.Partitioner",
	"partitioner.cb":            "kord chooses every partition with its partitioner package; use producer.Partitioner",
	"allow.auto.create.topics":  "kord never creates topics; create them before producing",
	"go.logs.channel.enable":    "kord forwards librdkafka's log to log/slog; use producer.Logger",
	"go.logs.channel":           "kord forwards librdkafka's log to log/slog; use producer.Logger",
	"go.delivery.reports":       "kord needs delivery reports to return every failure",
	"go.delivery.report.fields": "kord sets the delivery report fields it reads",
	"transactional.id":          "use producer.TransactionalID",
}

// aliases maps librdkafka's other names (rdkafka_conf.c, _RK_C_ALIAS;
// CONFIGURATION.md "Alias for") for settings kord sets or checks to the name
// kord uses. A value under an alias goes through the same checks, and is
// passed on under kord's name: librdkafka applies whichever of two names it
// is handed last, and a Go map has no order. The other settings kord checks
// or owns (enable.idempotence, enable.gapless.guarantee and those in forced)
// have no alias.
var aliases = map[string]string{
	"request.required.acks": "acks",
	"metadata.broker.list":  "bootstrap.servers",
	"sasl.mechanism":        "sasl.mechanisms",
}

// sameValue reports whether a and b mean the same value of setting name.
func sameValue(name, a, b string) bool {
	if a == b {
		return true
	}
	all := func(v string) bool { return v == "all" || v == "-1" }
	return name == "acks" && all(a) && all(b)
}

// build validates c and returns the librdkafka settings.
func (c *cfg) build() (map[string]string, error) {
	if c.err != nil {
		return nil, c.err
	}
	if c.part == nil {
		c.part = partitioner.NewLegacy()
	}
	if c.log == nil {
		return nil, fmt.Errorf("%w: nil logger", ErrConfig)
	}
	if c.metadataMaxAge <= 0 || c.metadataTimeout <= 0 || c.closeTimeout < 0 {
		return nil, fmt.Errorf("%w: metadata max age and timeout must be positive, close timeout not negative", ErrConfig)
	}
	for k := range c.settings {
		if why, ok := forced[k]; ok {
			return nil, fmt.Errorf("%w: %s cannot be set: %s", ErrConfig, k, why)
		}
	}
	// user holds the user's settings by kord's name; wrote, the key the
	// user wrote for each, which errors name.
	user := make(map[string]string, len(c.settings))
	wrote := make(map[string]string, len(c.settings))
	keys := make([]string, 0, len(c.settings))
	for k := range c.settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, name := c.settings[k], k
		if a, ok := aliases[k]; ok {
			name = a
		}
		if prev, ok := wrote[name]; ok {
			if !sameValue(name, user[name], v) {
				return nil, fmt.Errorf("%w: %s=%s and %s=%s set one librdkafka setting to different values", ErrConfig, prev, user[name], k, v)
			}
			continue
		}
		user[name], wrote[name] = v, k
	}
	key := func(name string) string {
		if k, ok := wrote[name]; ok {
			return k
		}
		return name
	}
	s := map[string]string{
		"client.id":          "kord",
		"enable.idempotence": "true",
		"acks":               "all",
	}
	for k, v := range user {
		s[k] = v
	}
	// librdkafka accepts the gapless guarantee only on an idempotent
	// producer; a user who turned idempotence off (AllowReordering) gets
	// neither.
	// A transactional producer needs no gap guard: a failed record fails
	// the transaction's commit.
	if _, set := user["enable.gapless.guarantee"]; !set && s["enable.idempotence"] == "true" && c.transactionalID == "" {
		s["enable.gapless.guarantee"] = "true"
	}
	if len(c.brokers) > 0 {
		s["bootstrap.servers"] = strings.Join(c.brokers, ",")
	}
	if s["bootstrap.servers"] == "" {
		return nil, fmt.Errorf("%w: no brokers (producer.Brokers, bootstrap.servers or metadata.broker.list)", ErrConfig)
	}
	if !c.allowReordering {
		if v := s["enable.idempotence"]; v != "true" {
			return nil, fmt.Errorf("%w: enable.idempotence=%s lets retries reorder or duplicate a key's records (producer.AllowReordering accepts it)", ErrReordering, v)
		}
		if v := s["acks"]; v != "all" && v != "-1" {
			return nil, fmt.Errorf("%w: %s=%s can lose acknowledged records, leaving gaps (producer.AllowReordering accepts it)", ErrReordering, key("acks"), v)
		}
		if v := s["enable.gapless.guarantee"]; v != "true" && c.transactionalID == "" {
			return nil, fmt.Errorf("%w: enable.gapless.guarantee=%s lets later records of a key be written after a failed one (producer.AllowReordering accepts it)", ErrReordering, v)
		}
	}
	if c.transactionalID != "" {
		s["transactional.id"] = c.transactionalID
	}
	if c.noReports && c.transactionalID == "" {
		return nil, fmt.Errorf("%w: producer.CommitReports needs producer.TransactionalID: outside a transaction a failed record would go unreported", ErrConfig)
	}
	s["allow.auto.create.topics"] = "false"
	if err := queueHoldsRecord(s); err != nil {
		return nil, err
	}
	return s, nil
}

// queueHoldsRecord refuses a queue bound in bytes below the largest record
// the producer may send: librdkafka refuses a record larger than
// queue.buffering.max.kbytes as "queue full" however empty its queue is
// (rd_kafka_curr_msgs_add counts the record against the bound before it
// queues it; measured with librdkafka 2.11.1: a 5 MiB record under a
// 4096 KiB bound), so Produce would wait for room forever. A value that is
// not a number is left to librdkafka, which names it.
func queueHoldsRecord(s map[string]string) error {
	// setting is s[name] as a number, def when unset; ok is false for a
	// value that is not a number.
	setting := func(name string, def int64) (int64, bool) {
		v, set := s[name]
		if !set {
			return def, true
		}
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	queue, ok := setting("queue.buffering.max.kbytes", 1<<20) // librdkafka's defaults, in KiB and bytes
	if !ok {
		return nil
	}
	record, ok := setting("message.max.bytes", 1_000_000)
	if !ok {
		return nil
	}
	if queue*1024 < record {
		return fmt.Errorf("%w: queue.buffering.max.kbytes=%d (%d bytes) is below message.max.bytes=%d: librdkafka refuses a record larger than its queue's bound as queue full, and Produce would wait for room forever; raise queue.buffering.max.kbytes to at least %d or lower message.max.bytes",
			ErrConfig, queue, queue*1024, record, (record+1023)/1024)
	}
	return nil
}

// redacted returns settings as "k=v" lines, sorted, with secrets hidden.
