package consumer_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/producer"
)

// The benchmark suite's input event (bench/peers/CONTRACT.md): as the
// suite's job decodes it (uuid, seq and ts kept raw), and whole.
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
)

const benchEventSchema = `{"type":"record","name":"Event","fields":[
	{"name":"uuid","type":"string"},{"name":"seq","type":"long"},
	{"name":"action","type":"string"},{"name":"page","type":"string"},
	{"name":"ts","type":"string"}]}`

// BenchmarkDecode: one event decoded by each of kord's value
// deserializers, from the bytes the matching producer serializer writes.
//
//	go test -run XXX -bench Decode -count 6 ./consumer/
func BenchmarkDecode(b *testing.B) {
	ts := time.Date(2026, 12, 1, 20, 15, 0, 123456789, time.UTC)
	full := benchEventFull{UUID: "1b4e28ba-2fa1-41d2-883f-0016d3cca427", Seq: 41, Action: "click", Page: "/item/7", TS: ts}
	text, err := producer.JSON[benchEventFull]().Serialize("t", full)
	if err != nil {
		b.Fatal(err)
	}
	avroEnc, err := producer.Avro[map[string]any](benchEventSchema)
	if err != nil {
		b.Fatal(err)
	}
	avroBin, err := avroEnc.Serialize("t", map[string]any{"uuid": full.UUID, "seq": full.Seq, "action": full.Action, "page": full.Page, "ts": ts.Format(time.RFC3339Nano)})
	if err != nil {
		b.Fatal(err)
	}
	type avroEvent struct {
		UUID   string `json:"uuid"`
		Seq    int64  `json:"seq"`
		Action string `json:"action"`
		Page   string `json:"page"`
		TS     string `json:"ts"`
	}
	avroT, err := consumer.AvroValue[avroEvent](benchEventSchema)
	if err != nil {
		b.Fatal(err)
	}
	avroN, err := consumer.AvroNativeValue(benchEventSchema)
	if err != nil {
		b.Fatal(err)
	}
	run := func(name string, value []byte, decode func(consumer.Record) error) {
		b.Run(name, func(b *testing.B) {
			rec := consumer.Record{Topic: "t", Value: value}
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			for b.Loop() {
				if err := decode(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	jsonPart, jsonFull := consumer.JSONValue[benchEvent](), consumer.JSONValue[benchEventFull]()
	run("json/uuid-seq-ts", text, func(r consumer.Record) error { _, err := jsonPart(r); return err })
	run("json/event", text, func(r consumer.Record) error { _, err := jsonFull(r); return err })
	run("avro/event", avroBin, func(r consumer.Record) error { _, err := avroT(r); return err })
	run("avro-native/event", avroBin, func(r consumer.Record) error { _, err := avroN(r); return err })
}
