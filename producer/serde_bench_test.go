package producer_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/kordproject/kord/producer"
)

// The benchmark suite's result (bench/peers/CONTRACT.md) and the main
// example's event.
type (
	benchResult struct {
		UUID  string          `json:"uuid"`
		Seq   int64           `json:"seq"`
		Count int64           `json:"count"`
		TS    json.RawMessage `json:"ts"`
	}
	benchEvent struct {
		UUID   string    `json:"uuid"`
		Seq    int64     `json:"seq"`
		Action string    `json:"action"`
		Page   string    `json:"page"`
		TS     time.Time `json:"ts"`
	}
)

// BenchmarkEncode: one value encoded by each of kord's value serializers.
//
//	go test -run XXX -bench Encode -count 6 ./producer/
func BenchmarkEncode(b *testing.B) {
	ts := time.Date(2026, 12, 1, 20, 15, 0, 123456789, time.UTC)
	res := benchResult{UUID: "1b4e28ba-2fa1-41d2-883f-0016d3cca427", Seq: 41, Count: 42, TS: json.RawMessage(`"2026-12-01T20:15:00.123456789Z"`)}
	ev := benchEvent{UUID: res.UUID, Seq: 41, Action: "click", Page: "/item/7", TS: ts}
	const schema = `{"type":"record","name":"Event","fields":[
		{"name":"uuid","type":"string"},{"name":"seq","type":"long"},
		{"name":"action","type":"string"},{"name":"page","type":"string"},
		{"name":"ts","type":"string"}]}`
	type avroEvent struct {
		UUID   string `json:"uuid"`
		Seq    int64  `json:"seq"`
		Action string `json:"action"`
		Page   string `json:"page"`
		TS     string `json:"ts"`
	}
	avroT, err := producer.Avro[avroEvent](schema)
	if err != nil {
		b.Fatal(err)
	}
	avroN, err := producer.AvroNative(schema)
	if err != nil {
		b.Fatal(err)
	}
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
	jr, je := producer.JSON[benchResult](), producer.JSON[benchEvent]()
	run("json/result", func() ([]byte, error) { return jr.Serialize("t", res) })
	run("json/event", func() ([]byte, error) { return je.Serialize("t", ev) })
	av := avroEvent{UUID: ev.UUID, Seq: ev.Seq, Action: ev.Action, Page: ev.Page, TS: ts.Format(time.RFC3339Nano)}
	run("avro/event", func() ([]byte, error) { return avroT.Serialize("t", av) })
	native := map[string]any{"uuid": ev.UUID, "seq": ev.Seq, "action": ev.Action, "page": ev.Page, "ts": av.TS}
	run("avro-native/event", func() ([]byte, error) { return avroN.Serialize("t", native) })
}
