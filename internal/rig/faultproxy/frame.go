package faultproxy

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka API keys of the requests fault tests usually target (Kafka's
// protocol guide lists them all). Any int16 key works in a Rule.
const (
	Produce                int16 = 0
	Fetch                  int16 = 1
	ListOffsets            int16 = 2
	Metadata               int16 = 3
	OffsetCommit           int16 = 8
	OffsetFetch            int16 = 9
	FindCoordinator        int16 = 10
	JoinGroup              int16 = 11
	Heartbeat              int16 = 12
	LeaveGroup             int16 = 13
	SyncGroup              int16 = 14
	ApiVersions            int16 = 18
	InitProducerId         int16 = 22
	AddPartitionsToTxn     int16 = 24
	AddOffsetsToTxn        int16 = 25
	EndTxn                 int16 = 26
	TxnOffsetCommit        int16 = 28
	ConsumerGroupHeartbeat int16 = 68

	// AnyAPI in Rule.API matches a request of any API key.
	AnyAPI int16 = -1
)

// APIName is the protocol name of an API key ("EndTxn"), or "api(N)" for a
// key this build does not know.
func APIName(api int16) string {
	if n := kmsg.NameForKey(api); n != "" && n != "Unknown" {
		return n
	}
	return fmt.Sprintf("api(%d)", api)
}

// A frame, in this package, is one request or response as it travels on the
// wire WITHOUT its 4-byte size prefix: a request frame starts with api_key
// int16, api_version int16, correlation_id int32; a response frame starts
// with correlation_id int32.

// Header is the parsed request header of a request frame.
type Header struct {
	API         int16
	Version     int16
	Correlation int32
	// ClientID is the client.id the client sent; nil when it sent null.
	ClientID *string
	// Body is the rest of the frame after the header (tagged fields of a
	// flexible header skipped); nil when the header's length is unknown
	// because the API key is unknown to this build.
	Body []byte
}

var errShort = errors.New("faultproxy: truncated request frame")

// ParseHeader parses the request header at the start of frame. Header v0
// (api_key, api_version, correlation_id) is only used by ControlledShutdown
// v0; v1 adds client_id as an int16-length nullable string; v2 (for flexible
// request versions) adds tagged fields after it. Whether a version is flexible
// comes from franz-go's kmsg tables, so an API key kmsg does not know gets a
// Header without Body.
func ParseHeader(frame []byte) (Header, error) {
	if len(frame) < 8 {
		return Header{}, errShort
	}
	h := Header{
		API:         int16(binary.BigEndian.Uint16(frame[0:])),
		Version:     int16(binary.BigEndian.Uint16(frame[2:])),
		Correlation: int32(binary.BigEndian.Uint32(frame[4:])),
	}
	const controlledShutdown = 7
	if h.API == controlledShutdown && h.Version == 0 {
		h.Body = frame[8:]
		return h, nil
	}
	r := wire{b: frame[8:]}
	h.ClientID = r.nullableString()
	if r.err != nil {
		return h, r.err
	}
	req := kmsg.RequestForKey(h.API)
	if req == nil {
		return h, nil
	}
	req.SetVersion(h.Version)
	if req.IsFlexible() {
		r.skipTags()
	}
	if r.err != nil {
		return h, r.err
	}
	h.Body = r.b
	return h, nil
}

// ClientID is the client.id in a request frame ("" when absent or
// unparsable). Handy in a Rule's Match to target one client of several.
func ClientID(frame []byte) string {
	h, err := ParseHeader(frame)
	if err != nil || h.ClientID == nil {
		return ""
	}
	return *h.ClientID
}

// Decode parses a request frame into franz-go's kmsg type for its API key
// and version, for Match predicates that look at fields (a topic, a group).
func Decode(frame []byte) (kmsg.Request, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return nil, err
	}
	req := kmsg.RequestForKey(h.API)
	if req == nil || h.Body == nil {
		return nil, fmt.Errorf("faultproxy: unknown API key %d", h.API)
	}
	req.SetVersion(h.Version)
	if err := req.ReadFrom(h.Body); err != nil {
		return nil, fmt.Errorf("faultproxy: decode %s v%d: %w", APIName(h.API), h.Version, err)
	}
	return req, nil
}

// EndTxnCommit reads the committed flag of an EndTxn request frame: true
// when the client commits, false when it aborts. ok is false when frame is
// not an EndTxn request of a known version (0 to 5) or is malformed.
//
// Parsed by hand from Kafka's message definitions (EndTxnRequest.json,
// RequestHeader.json): versions 0-2 use request header v1 (api_key,
// api_version, correlation_id, client_id as an int16-length nullable string)
// and a body of transactional_id (int16-length string), producer_id int64,
// producer_epoch int16, committed bool. Versions 3+ are flexible: header v2
// adds tagged fields (an unsigned varint count, then per field an unsigned
// varint tag, an unsigned varint size and that many bytes) and the body's
// transactional_id is a compact string (unsigned varint length+1). Versions
// 4 and 5 (KIP-890) only change error codes and epoch handling, not fields.
func EndTxnCommit(frame []byte) (committed, ok bool) {
	if len(frame) < 8 {
		return false, false
	}
	api := int16(binary.BigEndian.Uint16(frame[0:]))
	version := int16(binary.BigEndian.Uint16(frame[2:]))
	if api != EndTxn || version < 0 || version > 5 {
		return false, false
	}
	flexible := version >= 3
	r := wire{b: frame[8:]}
	r.nullableString() // client_id: int16 length even in header v2
	if flexible {
		r.skipTags()
		r.compactString() // transactional_id
	} else {
		r.nullableString() // transactional_id (never null in practice)
	}
	r.skip(8 + 2) // producer_id, producer_epoch
	c := r.bytes(1)
	if r.err != nil {
		return false, false
	}
	return c[0] != 0, true
}

// IsCommit is a Match predicate: an EndTxn request that commits.
func IsCommit(frame []byte) bool {
	c, ok := EndTxnCommit(frame)
	return ok && c
}

// IsAbort is a Match predicate: an EndTxn request that aborts.
func IsAbort(frame []byte) bool {
	c, ok := EndTxnCommit(frame)
	return ok && !c
}

// expectsResponse reports whether the broker answers this request: every
// request but a Produce with acks=0.
func expectsResponse(h Header) bool {
	if h.API != Produce || h.Body == nil {
		return true
	}
	r := wire{b: h.Body}
	if h.Version >= 3 { // transactional_id before acks
		if h.Version >= 9 {
			r.compactString()
		} else {
			r.nullableString()
		}
	}
	acks := r.bytes(2)
	return r.err != nil || acks[0] != 0 || acks[1] != 0
}

// wire reads Kafka protocol primitives; the first error sticks.
type wire struct {
	b   []byte
	err error
}

func (w *wire) bytes(n int) []byte {
	if w.err != nil {
		return nil
	}
	if n < 0 || n > len(w.b) {
		w.err = errShort
		return nil
	}
	out := w.b[:n]
	w.b = w.b[n:]
	return out
}

func (w *wire) skip(n int) { w.bytes(n) }

func (w *wire) uvarint() uint64 {
	if w.err != nil {
		return 0
	}
	v, n := binary.Uvarint(w.b)
	if n <= 0 {
		w.err = errShort
		return 0
	}
	w.b = w.b[n:]
	return v
}

// nullableString: int16 length, -1 for null.
func (w *wire) nullableString() *string {
	l := w.bytes(2)
	if w.err != nil {
		return nil
	}
	n := int16(binary.BigEndian.Uint16(l))
	if n < 0 {
		return nil
	}
	s := string(w.bytes(int(n)))
	if w.err != nil {
		return nil
	}
	return &s
}

// compactString: unsigned varint length+1, 0 for null.
func (w *wire) compactString() *string {
	n := w.uvarint()
	if w.err != nil || n == 0 {
		return nil
	}
	if n-1 > uint64(len(w.b)) { // also keeps int() below from wrapping
		w.err = errShort
		return nil
	}
	s := string(w.bytes(int(n - 1)))
	return &s
}

// skipTags skips a tagged-field section.
func (w *wire) skipTags() {
	count := w.uvarint()
	for i := uint64(0); i < count && w.err == nil; i++ {
		w.uvarint() // tag
		size := w.uvarint()
		if size > uint64(len(w.b)) {
			w.err = errShort
			return
		}
		w.skip(int(size))
	}
}
