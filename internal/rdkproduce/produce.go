//go:build cgo && !kordnobatch

package rdkproduce

/*
#include <stdint.h>
#include <stdlib.h>
#include <stddef.h>
#include <sys/types.h>

// From librdkafka's public API (rdkafka.h, v2.11.1), declared here rather
// than included: the symbols are those of the librdkafka confluent-kafka-go
// links. Enums are passed as int, as the C ABI passes them.
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;

int rd_kafka_version(void);
rd_kafka_topic_t *rd_kafka_topic_new(rd_kafka_t *rk, const char *topic, void *conf);
void rd_kafka_topic_destroy(rd_kafka_topic_t *rkt);
int rd_kafka_last_error(void);
rd_kafka_headers_t *rd_kafka_headers_new(size_t initial_count);
void rd_kafka_headers_destroy(rd_kafka_headers_t *hdrs);
int rd_kafka_header_add(rd_kafka_headers_t *hdrs, const char *name, ssize_t name_size, const void *value, ssize_t value_size);
int rd_kafka_producev(rd_kafka_t *rk, ...);

// rd_kafka_vtype_t (rdkafka.h): the tags of rd_kafka_producev's arguments.
enum {
	KORD_VTYPE_END = 0,
	KORD_VTYPE_RKT = 2,       // rd_kafka_topic_t *
	KORD_VTYPE_PARTITION = 3, // int32_t
	KORD_VTYPE_VALUE = 4,     // void *, size_t
	KORD_VTYPE_KEY = 5,       // const void *, size_t
	KORD_VTYPE_MSGFLAGS = 7,  // int
	KORD_VTYPE_TIMESTAMP = 8, // int64_t
	KORD_VTYPE_HEADERS = 10,  // rd_kafka_headers_t *
};
#define KORD_MSG_F_COPY 0x2 // RD_KAFKA_MSG_F_COPY

// One record of a batch: its bytes are at offsets into the batch's one
// buffer; a length of -1 is null.
typedef struct {
	rd_kafka_topic_t *rkt;
	int64_t ts;
	int64_t key_off, key_len;
	int64_t val_off, val_len;
	int32_t partition;
	int32_t hdr_first, hdr_cnt;
} kord_prec;

typedef struct {
	int64_t name_off, name_len;
	int64_t val_off, val_len;
} kord_phdr;

// kord_produce enqueues recs[0..n) in order with rd_kafka_producev, the
// call confluent-kafka-go's Produce makes (kafka/producer.go, do_produce),
// and stops at the first refused record: it returns how many were
// enqueued, and the refusal's code in *errp (0 when all were).
static int kord_produce(rd_kafka_t *rk, const char *buf, const kord_prec *recs,
                        const kord_phdr *hdrs, int n, int *errp) {
	int i, j;
	*errp = 0;
	for (i = 0; i < n; i++) {
		const kord_prec *r = &recs[i];
		rd_kafka_headers_t *h = NULL;
		int err;
		if (r->hdr_cnt > 0) {
			h = rd_kafka_headers_new((size_t)r->hdr_cnt);
			for (j = 0; j < r->hdr_cnt; j++) {
				const kord_phdr *x = &hdrs[r->hdr_first + j];
				// A NULL value is a null header value; name and value are
				// copied (rdkafka_header.c, rd_kafka_header_add).
				rd_kafka_header_add(h, buf + x->name_off, (ssize_t)x->name_len,
				                    x->val_len < 0 ? NULL : buf + x->val_off,
				                    x->val_len < 0 ? 0 : (ssize_t)x->val_len);
			}
		}
		err = rd_kafka_producev(rk,
			KORD_VTYPE_RKT, r->rkt,
			KORD_VTYPE_PARTITION, (int32_t)r->partition,
			KORD_VTYPE_MSGFLAGS, (int)KORD_MSG_F_COPY,
			KORD_VTYPE_VALUE, r->val_len < 0 ? (void *)NULL : (void *)(buf + r->val_off),
			(size_t)(r->val_len < 0 ? 0 : r->val_len),
			KORD_VTYPE_KEY, r->key_len < 0 ? (const void *)NULL : (const void *)(buf + r->key_off),
			(size_t)(r->key_len < 0 ? 0 : r->key_len),
			KORD_VTYPE_TIMESTAMP, (int64_t)r->ts,
			KORD_VTYPE_HEADERS, h,
			KORD_VTYPE_END);
		if (err) {
			// A refused record's headers stay the caller's
			// (rdkafka_msg.c, rd_kafka_producev).
			if (h)
				rd_kafka_headers_destroy(h);
			*errp = err;
			return i;
		}
	}
	return n;
}
*/
import "C"

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unsafe"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Enabled reports whether the batch produce path is built in: not with
// the kordnobatch tag.
const Enabled = true

// Writer enqueues batches of records on one kafka.Producer. Its methods
// are safe for concurrent use; Writes are serialized.
type Writer struct {
	p  *kafka.Producer
	rk *C.rd_kafka_t

	mu     sync.Mutex
	closed bool
	topics map[string]*C.rd_kafka_topic_t
	// Reused between Writes: the bytes, and the index into them.
	buf  []byte
	recs []C.kord_prec
	hdrs []C.kord_phdr
}

// rdkHandle returns p's rd_kafka_t, read by reflection from the unexported
// field handle.rk (confluent-kafka-go kafka/producer.go, type Producer;
// kafka/handle.go, type handle), or nil when the layout is not that one.
func rdkHandle(p *kafka.Producer) *C.rd_kafka_t {
	h, ok := reflect.TypeFor[kafka.Producer]().FieldByName("handle")
	if !ok || h.Type.Kind() != reflect.Struct {
		return nil
	}
	rk, ok := h.Type.FieldByName("rk")
	if !ok || rk.Type.Kind() != reflect.Pointer || !strings.HasSuffix(rk.Type.Elem().Name(), "struct_rd_kafka_s") {
		return nil
	}
	return *(**C.rd_kafka_t)(unsafe.Add(unsafe.Pointer(p), h.Offset+rk.Offset))
}

// New returns a Writer on p. It fails with ErrUnsupported when p's layout
// or the linked librdkafka is not one this package knows, and with
// ErrClosed when p is closed.
func New(p *kafka.Producer) (*Writer, error) {
	// The rd_kafka_producev argument tags and RD_KAFKA_V_HEADERS are
	// librdkafka's ABI since 0.11.4 (rdkafka.h); v2.11.1 is the one
	// confluent-kafka-go v2.11.1 bundles.
	if v := int(C.rd_kafka_version()); v < 0x000b04ff || v >= 0x03000000 {
		return nil, fmt.Errorf("%w: librdkafka %#x", ErrUnsupported, v)
	}
	if p == nil {
		return nil, ErrUnsupported
	}
	if p.IsClosed() {
		return nil, ErrClosed
	}
	rk := rdkHandle(p)
	if rk == nil {
		return nil, fmt.Errorf("%w: confluent-kafka-go's Producer has no handle.rk", ErrUnsupported)
	}
	return &Writer{p: p, rk: rk, topics: map[string]*C.rd_kafka_topic_t{}}, nil
}

// Close releases the Writer's topic handles. Close it before its producer.
func (w *Writer) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	if !w.p.IsClosed() {
		for _, rkt := range w.topics {
			C.rd_kafka_topic_destroy(rkt)
		}
	}
	w.topics = nil
}

// topic returns the Writer's handle of topic, made on first use.
func (w *Writer) topic(name string) (*C.rd_kafka_topic_t, error) {
	if rkt, ok := w.topics[name]; ok {
		return rkt, nil
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	rkt := C.rd_kafka_topic_new(w.rk, cname, nil)
	if rkt == nil {
		code := kafka.ErrorCode(C.rd_kafka_last_error())
		return nil, kafka.NewError(code, fmt.Sprintf("rdkproduce: topic %q: %s", name, code), false)
	}
	w.topics[name] = rkt
	return rkt, nil
}

// Write enqueues recs in order in one cgo call and returns how many were
// enqueued. It stops at the first record librdkafka refuses, recs[n],
// returning the refusal as the kafka.Error Produce would return
// (kafka.ErrQueueFull when the queue is full: wait for deliveries and
// write recs[n:]). Records before recs[n] are enqueued; none after it.
// Write copies everything it is given: recs may be reused when it returns.
func (w *Writer) Write(recs []Record) (n int, err error) {
	if len(recs) == 0 {
		return 0, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.p.IsClosed() {
		return 0, ErrClosed
	}
	size, nh := 1, 0 // one byte more: the buffer's address is never nil
	for i := range recs {
		r := &recs[i]
		size += len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			size += len(h.Key) + len(h.Value)
		}
		nh += len(r.Headers)
	}
	buf := w.buf[:0]
	if cap(buf) < size {
		buf = make([]byte, 0, size)
	}
	cr := w.recs[:0]
	ch := w.hdrs[:0]
	var last string
	var lastRkt *C.rd_kafka_topic_t
	for i := range recs {
		r := &recs[i]
		if lastRkt == nil || r.Topic != last {
			rkt, terr := w.topic(r.Topic)
			if terr != nil {
				// The records before this one go; this one fails.
				if n, err := w.send(buf, cr, ch); err != nil || n < len(cr) {
					return n, err
				}
				return len(cr), terr
			}
			last, lastRkt = r.Topic, rkt
		}
		var ts int64
		if !r.Timestamp.IsZero() {
			// As Produce: kafka/producer.go, produce.
			ts = r.Timestamp.UnixNano() / 1_000_000
		}
		var x C.kord_prec
		x.rkt = lastRkt
		x.ts = C.int64_t(ts)
		x.partition = C.int32_t(r.Partition)
		x.key_off, x.key_len, buf = put(buf, r.Key)
		x.val_off, x.val_len, buf = put(buf, r.Value)
		x.hdr_first, x.hdr_cnt = C.int32_t(len(ch)), C.int32_t(len(r.Headers))
		for _, h := range r.Headers {
			var y C.kord_phdr
			y.name_off, y.name_len = C.int64_t(len(buf)), C.int64_t(len(h.Key))
			buf = append(buf, h.Key...)
			y.val_off, y.val_len, buf = put(buf, h.Value)
			ch = append(ch, y)
		}
		cr = append(cr, x)
	}
	buf = append(buf, 0)
	w.buf, w.recs, w.hdrs = buf, cr, ch
	return w.send(buf, cr, ch)
}

// put appends b to buf and returns its offset and length, -1 when b is nil.
func put(buf, b []byte) (C.int64_t, C.int64_t, []byte) {
	if b == nil {
		return 0, -1, buf
	}
	return C.int64_t(len(buf)), C.int64_t(len(b)), append(buf, b...)
}

// send is the one cgo call: the buffer and the two index arrays hold no Go
// pointers (the topic handles are C pointers).
func (w *Writer) send(buf []byte, recs []C.kord_prec, hdrs []C.kord_phdr) (int, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	if len(buf) == 0 {
		buf = append(buf, 0)
	}
	var hp *C.kord_phdr
	if len(hdrs) > 0 {
		hp = &hdrs[0]
	}
	var cerr C.int
	n := int(C.kord_produce(w.rk, (*C.char)(unsafe.Pointer(&buf[0])), &recs[0], hp, C.int(len(recs)), &cerr))
	if cerr != 0 {
		// The error Produce returns (kafka/producer.go, produce: newError,
		// whose string is the code's, kafka/error.go).
		return n, kafka.NewError(kafka.ErrorCode(cerr), "", false)
	}
	return n, nil
}
