//go:build cgo && !kordnobatch

package rdkbatch

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// librdkafka's public API, declared here from rdkafka.h's documentation
// (librdkafka 2.x) rather than by including it: this package then builds
// the same against the static bundle confluent-kafka-go links and against
// a system librdkafka (-tags dynamic), and links nothing of its own; the
// symbols resolve in the one librdkafka of the program.

typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef struct rd_kafka_op_s rd_kafka_event_t;
typedef int rd_kafka_resp_err_t;       // an enum: int-sized
typedef int rd_kafka_event_type_t;
typedef int rd_kafka_timestamp_type_t; // an enum: int-sized

// rd_kafka_message_t: a public struct, unchanged since librdkafka 0.9.
typedef struct rd_kafka_message_s {
	rd_kafka_resp_err_t err;
	rd_kafka_topic_t *rkt;
	int32_t partition;
	void *payload;
	size_t len;
	void *key;
	size_t key_len;
	int64_t offset;
	void *_private;
} rd_kafka_message_t;

// rd_kafka_topic_partition_t: a public struct.
typedef struct rd_kafka_topic_partition_s {
	char *topic;
	int32_t partition;
	int64_t offset;
	void *metadata;
	size_t metadata_size;
	void *opaque;
	rd_kafka_resp_err_t err;
	void *_private;
} rd_kafka_topic_partition_t;

#define KORD_RDK_EVENT_FETCH 0x2
#define KORD_RDK_EVENT_ERROR 0x8
#define KORD_RDK_ERR_PARTITION_EOF (-191)

rd_kafka_event_t *rd_kafka_queue_poll(rd_kafka_queue_t *rkqu, int timeout_ms);
rd_kafka_event_type_t rd_kafka_event_type(const rd_kafka_event_t *rkev);
const rd_kafka_message_t *rd_kafka_event_message_next(rd_kafka_event_t *rkev);
rd_kafka_resp_err_t rd_kafka_event_error(rd_kafka_event_t *rkev);
const char *rd_kafka_event_error_string(rd_kafka_event_t *rkev);
int rd_kafka_event_error_is_fatal(rd_kafka_event_t *rkev);
rd_kafka_topic_partition_t *rd_kafka_event_topic_partition(rd_kafka_event_t *rkev);
void rd_kafka_topic_partition_destroy(rd_kafka_topic_partition_t *rktpar);
void rd_kafka_event_destroy(rd_kafka_event_t *rkev);
int64_t rd_kafka_message_timestamp(const rd_kafka_message_t *rkmessage, rd_kafka_timestamp_type_t *tstype);
rd_kafka_resp_err_t rd_kafka_message_headers(const rd_kafka_message_t *rkmessage, rd_kafka_headers_t **hdrsp);
rd_kafka_resp_err_t rd_kafka_header_get_all(const rd_kafka_headers_t *hdrs, size_t idx, const char **namep, const void **valuep, size_t *sizep);
int32_t rd_kafka_message_leader_epoch(const rd_kafka_message_t *rkmessage);
const char *rd_kafka_topic_name(const rd_kafka_topic_t *rkt);

#define KORD_RDK_ERR_CRIT_SYS_RESOURCE (-194)

// kord's side: one entry per event taken, pointing into librdkafka's
// memory, which stays valid until kord_rdk_release destroys the events.
// Go copies what it needs and releases them in the same Read: an event
// still held when the consumer is destroyed would keep rd_kafka_destroy
// waiting.
#define KORD_MSG 0
#define KORD_EOF 1
#define KORD_ERR 2
#define KORD_MSG_ERR 3 // a message carrying an error: Poll's *kafka.Message with TopicPartition.Error

typedef struct {
	int32_t kind, err, partition, tstype, leader_epoch, fatal;
	int64_t offset, ts;
	const char *topic;
	size_t topic_len;
	const void *key; // NULL: a null key
	size_t key_len;
	const void *val; // NULL: a null value
	size_t val_len;
	const char *errstr;
	size_t errstr_len;
	size_t hdr_first, hdr_cnt;
} kord_rdk_rec;

typedef struct {
	const char *name;
	size_t name_len;
	const void *val; // NULL: a null value
	size_t val_len;
} kord_rdk_hdr;

typedef struct {
	kord_rdk_rec *recs;
	size_t cap;     // entries per poll, at most
	size_t n;       // entries taken
	size_t bytes;   // keys, values and header values of the entries
	size_t ignored; // events dropped: neither fetch nor error
	kord_rdk_hdr *hdrs;
	size_t hdrs_len, hdrs_cap;
	rd_kafka_event_t **evs; // to destroy: one per entry
	rd_kafka_topic_partition_t **tps;
	size_t evs_len, tps_len;
} kord_rdk_batch;

static kord_rdk_batch *kord_rdk_new(size_t cap) {
	kord_rdk_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->cap = cap;
	b->recs = calloc(cap, sizeof(*b->recs));
	b->evs = calloc(cap, sizeof(*b->evs));
	b->tps = calloc(cap, sizeof(*b->tps));
	b->hdrs_cap = cap;
	b->hdrs = calloc(b->hdrs_cap, sizeof(*b->hdrs));
	if (!b->recs || !b->evs || !b->tps || !b->hdrs) {
		free(b->recs); free(b->evs); free(b->tps); free(b->hdrs); free(b);
		return NULL;
	}
	return b;
}

// kord_rdk_release destroys the events of the last poll: their messages'
// memory goes back to librdkafka.
static void kord_rdk_release(kord_rdk_batch *b) {
	size_t i;
	for (i = 0; i < b->evs_len; i++)
		rd_kafka_event_destroy(b->evs[i]);
	for (i = 0; i < b->tps_len; i++)
		rd_kafka_topic_partition_destroy(b->tps[i]);
	b->evs_len = b->tps_len = 0;
	b->n = b->bytes = b->ignored = b->hdrs_len = 0;
}

static void kord_rdk_free(kord_rdk_batch *b) {
	kord_rdk_release(b);
	free(b->recs); free(b->evs); free(b->tps); free(b->hdrs); free(b);
}

// kord_rdk_headers appends m's headers to b->hdrs; -1 when out of memory.
static int kord_rdk_headers(kord_rdk_batch *b, const rd_kafka_message_t *m, kord_rdk_rec *r) {
	rd_kafka_headers_t *hs;
	const char *name;
	const void *val;
	size_t size, idx;
	r->hdr_first = b->hdrs_len;
	r->hdr_cnt = 0;
	if (rd_kafka_message_headers(m, &hs) != 0) // RD_KAFKA_RESP_ERR__NOENT: none
		return 0;
	for (idx = 0; rd_kafka_header_get_all(hs, idx, &name, &val, &size) == 0; idx++) {
		if (b->hdrs_len == b->hdrs_cap) {
			size_t cap = b->hdrs_cap * 2;
			kord_rdk_hdr *n = realloc(b->hdrs, cap * sizeof(*n));
			if (!n)
				return -1;
			b->hdrs = n;
			b->hdrs_cap = cap;
		}
		kord_rdk_hdr *h = &b->hdrs[b->hdrs_len++];
		h->name = name;
		h->name_len = strlen(name);
		h->val = val;
		h->val_len = val ? size : 0;
		b->bytes += h->val_len;
		r->hdr_cnt++;
	}
	return 0;
}

// kord_rdk_poll takes up to max (at most b->cap) events off q, waiting
// up to timeout_ms for the first only, and returns how many entries it
// made. It stops after an error other than a partition's end, so that
// nothing is taken past it. Out of memory for a message's headers, it
// ends with a fatal error entry in the message's place.
static size_t kord_rdk_poll(kord_rdk_batch *b, rd_kafka_queue_t *q, int timeout_ms, size_t max) {
	kord_rdk_release(b);
	if (max > b->cap)
		max = b->cap;
	while (b->n < max) {
		rd_kafka_event_t *ev = rd_kafka_queue_poll(q, timeout_ms);
		timeout_ms = 0;
		if (!ev)
			break;
		kord_rdk_rec *r = &b->recs[b->n];
		memset(r, 0, sizeof(*r));
		switch (rd_kafka_event_type(ev)) {
		case KORD_RDK_EVENT_FETCH: {
			// One message per fetch event; taking it advances the
			// partition's application position (rdkafka_event.c,
			// rd_kafka_event_message_next).
			const rd_kafka_message_t *m = rd_kafka_event_message_next(ev);
			if (!m) {
				rd_kafka_event_destroy(ev);
				continue;
			}
			b->evs[b->evs_len++] = ev;
			b->n++;
			r->partition = m->partition;
			r->offset = m->offset;
			if (m->rkt) {
				r->topic = rd_kafka_topic_name(m->rkt);
				r->topic_len = strlen(r->topic);
			}
			if (m->err) { // not seen on this queue: consumer errors come as error events
				r->kind = KORD_MSG_ERR;
				r->err = m->err;
				r->errstr = m->payload;
				r->errstr_len = m->payload ? m->len : 0;
				return b->n;
			}
			size_t bytes0 = b->bytes;
			r->kind = KORD_MSG;
			r->key = m->key;
			r->key_len = m->key ? m->key_len : 0;
			r->val = m->payload;
			r->val_len = m->payload ? m->len : 0;
			b->bytes += r->key_len + r->val_len;
			r->ts = rd_kafka_message_timestamp(m, &r->tstype);
			r->leader_epoch = rd_kafka_message_leader_epoch(m);
			if (kord_rdk_headers(b, m, r) != 0) {
				b->bytes = bytes0;
				b->hdrs_len = r->hdr_first;
				r->kind = KORD_ERR;
				r->err = KORD_RDK_ERR_CRIT_SYS_RESOURCE;
				r->fatal = 1;
				r->errstr = "rdkbatch: out of memory for a message's headers";
				r->errstr_len = strlen(r->errstr);
				return b->n;
			}
			break;
		}
		case KORD_RDK_EVENT_ERROR: {
			rd_kafka_topic_partition_t *tp = rd_kafka_event_topic_partition(ev);
			r->err = rd_kafka_event_error(ev);
			if (r->err == KORD_RDK_ERR_PARTITION_EOF && !tp) {
				// confluent-kafka-go's Poll drops such an end too.
				rd_kafka_event_destroy(ev);
				continue;
			}
			b->evs[b->evs_len++] = ev;
			b->n++;
			if (tp) {
				b->tps[b->tps_len++] = tp;
				r->topic = tp->topic;
				r->topic_len = tp->topic ? strlen(tp->topic) : 0;
				r->partition = tp->partition;
				r->offset = tp->offset;
			}
			if (r->err == KORD_RDK_ERR_PARTITION_EOF) {
				r->kind = KORD_EOF;
				break;
			}
			r->kind = KORD_ERR;
			r->fatal = rd_kafka_event_error_is_fatal(ev);
			r->errstr = rd_kafka_event_error_string(ev);
			r->errstr_len = r->errstr ? strlen(r->errstr) : 0;
			return b->n;
		}
		default:
			// Statistics, offset commit results, token refresh
			// requests: consumer.Source's Poll loop drops them too.
			rd_kafka_event_destroy(ev);
			b->ignored++;
		}
	}
	return b->n;
}
*/
import "C"

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Enabled reports whether the batch path is built in (no kordnobatch tag).
const Enabled = true

// queueOffset is where, inside a kafka.Consumer, confluent-kafka-go keeps
// its queue handle (handle.rkq, the queue Poll reads); -1 when the layout
// is not the one this package knows, and then New refuses.
var queueOffset = func() uintptr {
	t := reflect.TypeFor[kafka.Consumer]()
	h, ok := t.FieldByName("handle")
	if !ok || h.Type.Kind() != reflect.Struct {
		return ^uintptr(0)
	}
	q, ok := h.Type.FieldByName("rkq")
	if !ok || q.Type.Kind() != reflect.Pointer || !strings.HasSuffix(q.Type.Elem().Name(), "struct_rd_kafka_queue_s") {
		return ^uintptr(0)
	}
	return h.Offset + q.Offset
}()

// Reader reads one kafka.Consumer's queue in batches. It is used from one
// goroutine, the one that would call the consumer's Poll (the two may be
// mixed: both take the queue's events in order), and not after the
// consumer's Close. The consumer must assign its partitions by hand
// (Assign, IncrementalAssign), never Subscribe: the reader drops events it
// does not return, and a rebalance event must be served.
type Reader struct {
	c       *kafka.Consumer
	b       *C.kord_rdk_batch
	cleanup runtime.Cleanup
	topics  map[string]string
	keys    map[string]string // header keys, interned
}

// maxKeys bounds the interned header keys.
const maxKeys = 1024

// New returns a reader of c's queue taking up to max events per Read.
// It fails with ErrUnsupported when c is not a confluent-kafka-go
// consumer of the layout it knows or the linked librdkafka is not 2.x.
func New(c *kafka.Consumer, max int) (*Reader, error) {
	if max <= 0 {
		return nil, fmt.Errorf("rdkbatch: max %d: must be positive", max)
	}
	if queueOffset == ^uintptr(0) {
		return nil, fmt.Errorf("%w: confluent-kafka-go's Consumer has no handle.rkq of the known type", ErrUnsupported)
	}
	if v, s := kafka.LibraryVersion(); v>>24 != 2 {
		return nil, fmt.Errorf("%w: librdkafka %s: the declared structs are librdkafka 2.x's", ErrUnsupported, s)
	}
	// A subscribing consumer's queue carries rebalance events, which the
	// application must serve (confluent-kafka-go assigns in Poll): this
	// reader would drop them. consumer.Source assigns by hand.
	if subs, err := c.Subscription(); err != nil || len(subs) > 0 {
		return nil, fmt.Errorf("rdkbatch: the consumer subscribes (%v, %v): only a consumer that assigns by hand can be read in batches", subs, err)
	}
	b := C.kord_rdk_new(C.size_t(max))
	if b == nil {
		return nil, fmt.Errorf("rdkbatch: out of memory")
	}
	r := &Reader{c: c, b: b, topics: map[string]string{}, keys: map[string]string{}}
	r.cleanup = runtime.AddCleanup(r, func(b *C.kord_rdk_batch) { C.kord_rdk_free(b) }, b)
	return r, nil
}

// queue is c's queue handle, nil once c is closed.
func (r *Reader) queue() *C.rd_kafka_queue_t {
	return *(**C.rd_kafka_queue_t)(unsafe.Add(unsafe.Pointer(r.c), queueOffset))
}

// Close frees the reader's memory. It does not close the consumer.
func (r *Reader) Close() {
	if r.b != nil {
		r.cleanup.Stop()
		C.kord_rdk_free(r.b)
		r.b = nil
	}
}

// Read empties b and fills it with up to the reader's max events from the
// queue, waiting up to timeout for the first (0: not at all; negative:
// without end): one cgo call takes the events, Go copies their bytes, and
// a second releases them to librdkafka. It returns ErrClosed after the
// consumer's Close.
func (r *Reader) Read(b *Batch, timeout time.Duration) error {
	if r.b == nil {
		b.reset()
		return fmt.Errorf("rdkbatch: reader closed")
	}
	return r.ReadN(b, int(r.b.cap), timeout)
}

// ReadN is Read taking up to max events (at most the reader's max).
func (r *Reader) ReadN(b *Batch, max int, timeout time.Duration) error {
	b.reset()
	if r.b == nil {
		return fmt.Errorf("rdkbatch: reader closed")
	}
	q := r.queue()
	if q == nil {
		return ErrClosed
	}
	if max <= 0 {
		return nil
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	cb := r.b
	got := int(C.kord_rdk_poll(cb, q, C.int(ms), C.size_t(max)))
	defer C.kord_rdk_release(cb)
	b.Ignored = int(cb.ignored)
	if got == 0 {
		return nil
	}
	recs := unsafe.Slice(cb.recs, got)
	var hdrs []C.kord_rdk_hdr
	if cb.hdrs_len > 0 {
		hdrs = unsafe.Slice(cb.hdrs, int(cb.hdrs_len))
	}
	buf := b.payload(int(cb.bytes))
	hs := b.headers(len(hdrs))
	for i := range recs {
		rec := &recs[i]
		switch rec.kind {
		case C.KORD_MSG:
			m := Message{
				Topic:       r.topic(rec.topic, rec.topic_len),
				Partition:   int32(rec.partition),
				Offset:      int64(rec.offset),
				LeaderEpoch: int32(rec.leader_epoch),
			}
			m.Key, buf = take(buf, rec.key, rec.key_len)
			m.Value, buf = take(buf, rec.val, rec.val_len)
			if ts := int64(rec.ts); ts != -1 {
				// As confluent-kafka-go builds it (message.go,
				// newMessageFromGlueMsg).
				m.TimestampType = kafka.TimestampType(rec.tstype)
				m.Timestamp = time.Unix(ts/1000, (ts%1000)*1000000)
			}
			if rec.hdr_cnt > 0 {
				first, cnt := int(rec.hdr_first), int(rec.hdr_cnt)
				m.Headers = hs[:cnt:cnt]
				hs = hs[cnt:]
				for j, h := range hdrs[first : first+cnt] {
					m.Headers[j].Key = r.key(h.name, h.name_len)
					m.Headers[j].Value, buf = take(buf, h.val, h.val_len)
				}
			}
			b.Messages = append(b.Messages, m)
		case C.KORD_EOF:
			b.EOFs = append(b.EOFs, EOF{Topic: r.topic(rec.topic, rec.topic_len), Partition: int32(rec.partition), Offset: int64(rec.offset), At: len(b.Messages)})
		case C.KORD_MSG_ERR:
			// As confluent-kafka-go builds a message's error
			// (message.go, setupMessageFromC: the code alone).
			b.Err = kafka.NewError(kafka.ErrorCode(rec.err), "", false)
			b.ErrOnMessage = true
			b.ErrTopic = r.topic(rec.topic, rec.topic_len)
			b.ErrPartition = int32(rec.partition)
			b.ErrOffset = int64(rec.offset)
		default:
			// As confluent-kafka-go builds it (event.go, eventPoll: the
			// code, the event's string, and whether it is fatal).
			b.Err = kafka.NewError(kafka.ErrorCode(rec.err), C.GoStringN(rec.errstr, C.int(rec.errstr_len)), rec.fatal != 0)
			if rec.topic != nil {
				b.ErrTopic = r.topic(rec.topic, rec.topic_len)
				b.ErrPartition = int32(rec.partition)
				b.ErrOffset = int64(rec.offset)
			}
		}
	}
	return nil
}

// payload returns a buffer for n bytes: the last batch's when b.Reuse and
// it is large enough, else a new one.
func (b *Batch) payload(n int) []byte {
	if n == 0 {
		return nil
	}
	if b.Reuse && cap(b.buf) >= n {
		return b.buf[:n]
	}
	buf := make([]byte, n)
	if b.Reuse {
		b.buf = buf
	}
	return buf
}

// headers returns room for n headers, likewise.
func (b *Batch) headers(n int) []kafka.Header {
	if n == 0 {
		return nil
	}
	if b.Reuse && cap(b.hdrs) >= n {
		return b.hdrs[:n]
	}
	hs := make([]kafka.Header, n)
	if b.Reuse {
		b.hdrs = hs
	}
	return hs
}

// take copies the n bytes at p (C memory) to the front of buf and returns
// them, capacity n (an append cannot run into the next field), and the
// rest of buf. A NULL p is a null field: nil.
func take(buf []byte, p unsafe.Pointer, n C.size_t) ([]byte, []byte) {
	if p == nil {
		return nil, buf
	}
	if n == 0 {
		return empty, buf
	}
	l := int(n)
	copy(buf, unsafe.Slice((*byte)(p), l))
	return buf[:l:l], buf[l:]
}

// topic returns the Go string of a topic name in C memory, interned.
func (r *Reader) topic(p *C.char, n C.size_t) string {
	if p == nil {
		return ""
	}
	v := unsafe.String((*byte)(unsafe.Pointer(p)), int(n))
	if s, ok := r.topics[v]; ok {
		return s
	}
	s := strings.Clone(v)
	r.topics[s] = s
	return s
}

// key returns the Go string of a header key in C memory, interned while
// there are fewer than maxKeys.
func (r *Reader) key(p *C.char, n C.size_t) string {
	v := unsafe.String((*byte)(unsafe.Pointer(p)), int(n))
	if s, ok := r.keys[v]; ok {
		return s
	}
	s := strings.Clone(v)
	if len(r.keys) < maxKeys {
		r.keys[s] = s
	}
	return s
}
