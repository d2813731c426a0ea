package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/kordproject/kord/internal/layout"
)

// FormatVersion is the metadata format version this build writes and the
// newest it reads. Any change to the payload (a new field included) bumps
// it; decoding rejects newer versions rather than guess. Version 2 added
// the watermark; version 1 metadata reads as having none. Version 3 added
// the sources' provenance (Sources); older metadata reads as having none.
// Version 4 added the writer schemas of keyed state (OperatorRef's
// KeySchema and ValueSchema); older metadata reads as having none, which
// a restore takes as "the fingerprint must match". Version 5 added the
// partitions' newest record times (Times); older metadata reads as having
// none, which a restore takes as "no record seen yet". The fields are optional
// and left out when empty, but the version changes all the same: a build
// of format 3 decodes strictly (it refuses unknown fields), and the new
// version has it say "upgrade kord" rather than call the metadata
// corrupt.
const FormatVersion = 5

// Envelope of every small checksummed object (metadata, the committed
// marker). The envelope itself never changes across versions:
//
//	magic    [8]byte  "KORDMETA" or "KORDCMTD"
//	version  uint32   big endian
//	length   uint32   big endian, payload length
//	payload  [length]byte, JSON
//	crc32c   uint32   big endian, Castagnoli CRC over all bytes before it
const (
	headerLen      = 16
	trailerLen     = 4
	maxPayloadLen  = 64 << 20
	metaMagic      = "KORDMETA"
	committedMagic = "KORDCMTD"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksum returns the Castagnoli CRC-32 of b, the checksum kord uses for every
// checkpoint object.
func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// CorruptError reports a checkpoint object that exists but is not what was
// written: wrong size or checksum, truncated, or not decodable. Path names the
// object; Reason says what is wrong, with expected and actual values.
type CorruptError struct {
	Path   string
	Reason string
	Err    error // underlying error, if any
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("checkpoint: corrupt %s: %s", e.Path, e.Reason)
}

func (e *CorruptError) Unwrap() error { return e.Err }

func corruptf(path, format string, args ...any) *CorruptError {
	return &CorruptError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

func encodeEnvelope(magic string, version uint32, payload []byte) []byte {
	b := make([]byte, 0, headerLen+len(payload)+trailerLen)
	b = append(b, magic...)
	b = binary.BigEndian.AppendUint32(b, version)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	return binary.BigEndian.AppendUint32(b, checksum(b))
}

// decodeEnvelope checks framing and checksum and returns the version and
// payload. It never panics.
func decodeEnvelope(path, magic, what string, b []byte) (uint32, []byte, error) {
	if len(b) < headerLen+trailerLen {
		return 0, nil, corruptf(path, "truncated: %d bytes, a %s object has at least %d", len(b), what, headerLen+trailerLen)
	}
	if string(b[:8]) != magic {
		return 0, nil, corruptf(path, "bad magic %q, want %q (not a kord %s object)", b[:8], magic, what)
	}
	version := binary.BigEndian.Uint32(b[8:12])
	n := uint64(binary.BigEndian.Uint32(b[12:16]))
	if want := uint64(headerLen) + n + trailerLen; want != uint64(len(b)) {
		if want > uint64(len(b)) {
			return 0, nil, corruptf(path, "truncated: size %d bytes, header says %d", len(b), want)
		}
		return 0, nil, corruptf(path, "size %d bytes, header says %d (trailing bytes)", len(b), want)
	}
	body := b[:len(b)-trailerLen]
	stored := binary.BigEndian.Uint32(b[len(b)-trailerLen:])
	if actual := checksum(body); actual != stored {
		return 0, nil, corruptf(path, "checksum mismatch: stored crc32c %08x, computed %08x over %d bytes", stored, actual, len(body))
	}
	if version == 0 {
		return 0, nil, corruptf(path, "format version 0")
	}
	if version > FormatVersion {
		return 0, nil, fmt.Errorf("%w: %s: %s format version %d is newer than this build reads (%d); upgrade kord",
			ErrUnsupportedVersion, path, what, version, FormatVersion)
	}
	return version, body[headerLen:], nil
}

func decodeJSONStrict(payload []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after JSON payload")
	}
	return nil
}

// Metadata describes one durable checkpoint. It is written last: a checkpoint
// is durable exactly when its metadata object is.
type Metadata struct {
	Version        int               `json:"-"`              // format version; encodeMetadata writes FormatVersion
	Run            string            `json:"run"`            // run id of the process that wrote it
	ID             uint64            `json:"id"`             // checkpoint id; continues across runs
	Created        time.Time         `json:"created"`        // wall-clock time the checkpoint was written
	MaxParallelism int               `json:"maxParallelism"` // number of key groups
	Offsets        []PartitionOffset `json:"offsets"`        // next offset to read, every assigned partition
	Files          []FileRef         `json:"files"`          // every state file of this checkpoint
	Operators      []OperatorRef     `json:"operators"`      // for restore checks; may be empty
	// Watermark is the job's event-time watermark at the checkpoint (Unix
	// milliseconds): the oldest of its operator tasks'. Nil when some task
	// had none. A restore starts every operator task from it, so the
	// job's watermark never goes backwards.
	Watermark *int64 `json:"watermark,omitempty"`
	// Times is, for each partition of a source with watermarks that had
	// a record before its offset, the newest record time read there (Unix
	// milliseconds; on a hop's partition the least of its writers'
	// marks): what the partition's watermark stood on. A restore starts
	// each partition's watermark there, so a partition that gets no more
	// records holds the watermark back no more than it did before the
	// restore. Empty in metadata older than format 5 (and for a failover,
	// whose offsets are not restored either).
	Times []PartitionTime `json:"times,omitempty"`
	// Sources records where the offsets came from: for each source topic
	// whose connector knows it, the cluster and the topic's own identity
	// (Kafka's cluster id and topic id, KIP-516). A restore refuses the
	// checkpoint when the job now reads a topic of that name elsewhere
	// (internal/recovery's CheckProvenance). Empty in metadata older
	// than format 3.
	Sources []SourceRef `json:"sources,omitempty"`
}

// SourceRef is where one source topic's offsets belong: the cluster that
// serves the topic and the topic's identity there. Offsets mean something
// only on the same cluster and the same incarnation of the topic: a topic
// deleted and created again under its name starts its offsets over.
type SourceRef struct {
	Topic   string `json:"topic"`
	Cluster string `json:"cluster,omitempty"` // Kafka's cluster id
	TopicID string `json:"topicId,omitempty"` // Kafka's topic id (KIP-516)
}

// PartitionOffset is the next offset to read from one source partition.
type PartitionOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// PartitionTime is the newest record time read from one source partition
// before the checkpoint's offset (Unix milliseconds).
type PartitionTime struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Time      int64  `json:"time"`
}

// FileRef names one state file of a checkpoint with its size and checksum.
type FileRef struct {
	Name     string `json:"name"`
	Size     int64  `json:"size"`
	CRC32C   uint32 `json:"crc32c"`
	Operator string `json:"operator"`
	KeyGroup int    `json:"keyGroup"`
}

// OperatorRef records an operator's identity, checked on restore so that a
// code change cannot silently map state to the wrong operator.
type OperatorRef struct {
	Name              string `json:"name"`
	Type              string `json:"type"`
	SchemaFingerprint string `json:"schemaFingerprint"`
	// KeySchema and ValueSchema are a keyed state's writer schemas, for a
	// codec that can read values written under another schema of its
	// format (serde.Resolver; the Avro serdes): ValueSchema that of the
	// values (a list's elements, a map's values), KeySchema that of a map's
	// user keys. Empty for other codecs, and in metadata older than format
	// 4: a restore then requires the fingerprint to match.
	KeySchema   string `json:"keySchema,omitempty"`
	ValueSchema string `json:"valueSchema,omitempty"`
}

// Ref returns the checkpoint's (run, id).
func (m *Metadata) Ref() Ref { return Ref{Run: m.Run, ID: m.ID} }

func (m *Metadata) validate() error {
	if err := layout.ValidateRun(m.Run); err != nil {
		return err
	}
	if m.MaxParallelism < 1 || m.MaxParallelism > layout.MaxKeyGroups {
		return fmt.Errorf("max parallelism %d out of range [1, %d]", m.MaxParallelism, layout.MaxKeyGroups)
	}
	type tp struct {
		topic string
		p     int32
	}
	seenTP := make(map[tp]bool, len(m.Offsets))
	for _, o := range m.Offsets {
		if o.Topic == "" || o.Partition < 0 || o.Offset < 0 {
			return fmt.Errorf("invalid offset %+v", o)
		}
		if seenTP[tp{o.Topic, o.Partition}] {
			return fmt.Errorf("duplicate offset for %s[%d]", o.Topic, o.Partition)
		}
		seenTP[tp{o.Topic, o.Partition}] = true
	}
	seenTime := make(map[tp]bool, len(m.Times))
	for _, pt := range m.Times {
		if !seenTP[tp{pt.Topic, pt.Partition}] {
			return fmt.Errorf("record time for %s[%d], which has no offset", pt.Topic, pt.Partition)
		}
		if seenTime[tp{pt.Topic, pt.Partition}] {
			return fmt.Errorf("duplicate record time for %s[%d]", pt.Topic, pt.Partition)
		}
		seenTime[tp{pt.Topic, pt.Partition}] = true
	}
	seenSrc := make(map[string]bool, len(m.Sources))
	for _, src := range m.Sources {
		if src.Topic == "" || (src.Cluster == "" && src.TopicID == "") {
			return fmt.Errorf("invalid source %+v: a topic, and a cluster or topic id", src)
		}
		if seenSrc[src.Topic] {
			return fmt.Errorf("duplicate source %q", src.Topic)
		}
		seenSrc[src.Topic] = true
	}
	seenFile := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		n, ok := layout.ParseName(f.Name)
		if !ok || n.Kind != layout.KindState || n.Run != m.Run || n.ID != m.ID || n.Operator != f.Operator || n.KeyGroup != f.KeyGroup {
			return fmt.Errorf("file %q is not a state file of checkpoint %s with operator %q and key group %d", f.Name, m.Ref(), f.Operator, f.KeyGroup)
		}
		if f.KeyGroup >= m.MaxParallelism {
			return fmt.Errorf("file %q: key group %d not below max parallelism %d", f.Name, f.KeyGroup, m.MaxParallelism)
		}
		if f.Size < 0 {
			return fmt.Errorf("file %q: negative size %d", f.Name, f.Size)
		}
		if seenFile[f.Name] {
			return fmt.Errorf("duplicate file %q", f.Name)
		}
		seenFile[f.Name] = true
	}
	seenOp := make(map[string]bool, len(m.Operators))
	for _, o := range m.Operators {
		if err := layout.ValidateOperator(o.Name); err != nil {
			return err
		}
		if seenOp[o.Name] {
			return fmt.Errorf("duplicate operator %q", o.Name)
		}
		seenOp[o.Name] = true
	}
	return nil
}

// encodeMetadata encodes m in the current format version. m.Version must be
// at most FormatVersion (an older one is written as FormatVersion). It validates m: a run id, max parallelism, unique
// offsets, and state files that belong to this checkpoint.
func encodeMetadata(m *Metadata) ([]byte, error) {
	if m.Version > FormatVersion {
		return nil, fmt.Errorf("checkpoint: encode metadata: version %d, this build writes %d", m.Version, FormatVersion)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("checkpoint: encode metadata: %w", err)
	}
	payload, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode metadata: %w", err)
	}
	if len(payload) > maxPayloadLen {
		return nil, fmt.Errorf("checkpoint: encode metadata: %d bytes, more than %d", len(payload), maxPayloadLen)
	}
	return encodeEnvelope(metaMagic, FormatVersion, payload), nil
}

// DecodeMetadata decodes a metadata object read from name (used in errors).
// Truncation, corruption and invalid contents are *CorruptError; a newer
// format version is ErrUnsupportedVersion. It never panics.
func DecodeMetadata(name string, b []byte) (*Metadata, error) {
	version, payload, err := decodeEnvelope(name, metaMagic, "metadata", b)
	if err != nil {
		return nil, err
	}
	m := new(Metadata)
	if err := decodeJSONStrict(payload, m); err != nil {
		return nil, &CorruptError{Path: name, Reason: "undecodable payload: " + err.Error(), Err: err}
	}
	m.Version = int(version)
	if err := m.validate(); err != nil {
		return nil, &CorruptError{Path: name, Reason: "invalid metadata: " + err.Error(), Err: err}
	}
	return m, nil
}

// Ref identifies a checkpoint.
type Ref struct {
	Run string
	ID  uint64
}

func (r Ref) String() string { return fmt.Sprintf("%s/%d", r.Run, r.ID) }

// compare orders refs by ID, then run.
func (r Ref) compare(o Ref) int {
	switch {
	case r.ID < o.ID:
		return -1
	case r.ID > o.ID:
		return 1
	}
	switch {
	case r.Run < o.Run:
		return -1
	case r.Run > o.Run:
		return 1
	}
	return 0
}

type committedPayload struct {
	Run string `json:"run"`
	ID  uint64 `json:"id"`
}

func encodeCommitted(ref Ref) ([]byte, error) {
	if err := layout.ValidateRun(ref.Run); err != nil {
		return nil, err
	}
	payload, err := json.Marshal(committedPayload(ref))
	if err != nil {
		return nil, err
	}
	return encodeEnvelope(committedMagic, FormatVersion, payload), nil
}

func decodeCommitted(path string, b []byte) (Ref, error) {
	_, payload, err := decodeEnvelope(path, committedMagic, "committed-marker", b)
	if err != nil {
		return Ref{}, err
	}
	var p committedPayload
	if err := decodeJSONStrict(payload, &p); err != nil {
		return Ref{}, &CorruptError{Path: path, Reason: "undecodable payload: " + err.Error(), Err: err}
	}
	if err := layout.ValidateRun(p.Run); err != nil {
		return Ref{}, &CorruptError{Path: path, Reason: err.Error(), Err: err}
	}
	return Ref(p), nil
}
