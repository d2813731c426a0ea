package serde_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/kordproject/kord/serde"
)

// The benchmark suite's input event and result (bench/peers/CONTRACT.md):
// the event as the suite's job decodes it (uuid, seq and ts kept raw), and
// whole.
type (
	benchEvent struct {
		UUID string          `json:"uuid"`
		Seq  int64           `json:"seq"`
		TS   json.RawMessage `json:"ts"`
	}
	benchEventFull struct {
		UUID   string    `json:"uuid"`
		Seq    int64     `json:"seq"`
		Action string    `json:"action"`
		Page   string    `json:"page"`
		TS     time.Time `json:"ts"`
	}
	benchResult struct {
		UUID  string          `json:"uuid"`
		Seq   int64           `json:"seq"`
		Count int64           `json:"count"`
		TS    json.RawMessage `json:"ts"`
	}
	avroEvent struct {
		UUID   string `json:"uuid"`
		Seq    int64  `json:"seq"`
		Action string `json:"action"`
		Page   string `json:"page"`
		TS     string `json:"ts"`
	}
)

const benchEventSchema = `{"type":"record","name":"Event","fields":[
	{"name":"uuid","type":"string"},{"name":"seq","type":"long"},
	{"name":"action","type":"string"},{"name":"page","type":"string"},
	{"name":"ts","type":"string"}]}`

var (
	benchTS   = time.Date(2026, 12, 1, 20, 15, 0, 123456789, time.UTC)
	benchFull = benchEventFull{UUID: "1b4e28ba-2fa1-41d2-883f-0016d3cca427", Seq: 41, Action: "click", Page: "/item/7", TS: benchTS}
	benchAvro = avroEvent{UUID: benchFull.UUID, Seq: 41, Action: "click", Page: "/item/7", TS: benchTS.Format(time.RFC3339Nano)}
)

func avroSerdes(b *testing.B) (serde.Serde[avroEvent], serde.Serde[any]) {
	typed, err := serde.Avro[avroEvent](benchEventSchema)
	if err != nil {
		b.Fatal(err)
	}
	native, err := serde.AvroNative(benchEventSchema)
	if err != nil {
		b.Fatal(err)
	}
	return typed, native
}

// BenchmarkEncode: one value encoded by each serde, as the producer
// encodes it (a nil dst).
//
//	go test -run XXX -bench Encode -count 6 ./serde/
func BenchmarkEncode(b *testing.B) {
	res := benchResult{UUID: benchFull.UUID, Seq: 41, Count: 42, TS: json.RawMessage(`"2026-12-01T20:15:00.123456789Z"`)}
	avroT, avroN := avroSerdes(b)
	run := func(name string, encode func() ([]byte, error)) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	jr, je := serde.JSON[benchResult](), serde.JSON[benchEventFull]()
	run("json/result", func() ([]byte, error) { return jr.Encode(nil, res) })
	run("json/event", func() ([]byte, error) { return je.Encode(nil, benchFull) })
	run("avro/event", func() ([]byte, error) { return avroT.Encode(nil, benchAvro) })
	native := map[string]any{"uuid": benchAvro.UUID, "seq": benchAvro.Seq, "action": benchAvro.Action, "page": benchAvro.Page, "ts": benchAvro.TS}
	run("avro-native/event", func() ([]byte, error) { return avroN.Encode(nil, native) })
}

// BenchmarkDecode: one event decoded by each serde, from the bytes the
// same format writes.
//
//	go test -run XXX -bench Decode -count 6 ./serde/
func BenchmarkDecode(b *testing.B) {
	text, err := serde.JSON[benchEventFull]().Encode(nil, benchFull)
	if err != nil {
		b.Fatal(err)
	}
	avroT, avroN := avroSerdes(b)
	avroBin, err := avroT.Encode(nil, benchAvro)
	if err != nil {
		b.Fatal(err)
	}
	run := func(name string, value []byte, decode func([]byte) error) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			for b.Loop() {
				if err := decode(value); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	jsonPart, jsonFull := serde.JSON[benchEvent](), serde.JSON[benchEventFull]()
	run("json/uuid-seq-ts", text, func(v []byte) error { _, err := jsonPart.Decode(v); return err })
	run("json/event", text, func(v []byte) error { _, err := jsonFull.Decode(v); return err })
	run("avro/event", avroBin, func(v []byte) error { _, err := avroT.Decode(v); return err })
	run("avro-native/event", avroBin, func(v []byte) error { _, err := avroN.Decode(v); return err })
}
