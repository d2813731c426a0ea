package jsonx_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/internal/jsonx"
)

// The benchmark job's event, and a type with most of what encoding/json
// handles specially.
type (
	event struct {
		UUID   string    `json:"uuid"`
		Seq    int64     `json:"seq"`
		Action string    `json:"action"`
		Page   string    `json:"page"`
		TS     time.Time `json:"ts"`
	}
	inner struct {
		A int    `json:"a"`
		B string `json:"b,omitempty"`
	}
	Embedded struct {
		E1 string `json:"e1"`
		E2 int
	}
	broad struct {
		Embedded
		Name  string            `json:"name"`
		Ptr   *int              `json:"ptr"`
		PStr  *string           `json:"pstr,omitempty"`
		M     map[string]any    `json:"m"`
		Bytes []byte            `json:"bytes"`
		Nest  inner             `json:"nested"`
		NPtr  *inner            `json:"nptr"`
		N     int64             `json:"n,string"`
		F     float64           `json:"f"`
		B     bool              `json:"b,omitempty"`
		S     []string          `json:"s"`
		Raw   json.RawMessage   `json:"raw"`
		T     time.Time         `json:"t"`
		Any   any               `json:"any"`
		Skip  string            `json:"-"`
		U8    uint8             `json:"u8"`
		MI    map[int]string    `json:"mi"`
		Dur   time.Duration     `json:"dur"`
		MS    map[string]*inner `json:"ms,omitempty"`
	}
)

// seeds: inputs where JSON decoders are known to part ways.
var seeds = []string{
	`{"uuid":"1b4e28ba-2fa1-41d2-883f-0016d3cca427","seq":41,"action":"click","page":"/item/7","ts":"2026-12-01T20:15:00.123456789Z"}`,
	`{"UUID":"a","Seq":2,"TS":"2026-12-01T20:15:00+05:30"}`, `{"ſeq":5}`, `{"\u0075uid":"esc"}`,
	`{"uuid":"a","uuid":"b","seq":1,"seq":2}`, `{"uuid":"a"} x`, `{"uuid":"a"}{}`, `{"uuid":"a"}   `, ` {} `, `null`, `[]`, `""`, ``,
	`{"uuid":"` + "\xff\xfe" + `"}`, `{"uuid":"\ud800"}`, `{"uuid":"\u2028<>&"}`, `{"uuid":"\x"}`, "{\"uuid\":\"a\tb\"}",
	`{"seq":"x"}`, `{"seq":1.0}`, `{"seq":1e2}`, `{"seq":9223372036854775808}`, `{"seq":-0}`, `{"seq":null}`, `{"seq":01}`,
	`{"ts":"2026-12-01T20:15:00.123456789+01:00"}`, `{"ts":"2026-13-01T00:00:00Z"}`, `{"ts":"2026-12-01t20:15:00z"}`, `{"ts":null}`, `{"ts":123}`, `{"ts":"2026-12-01T20:15:00,5Z"}`,
	`{"name":"x","ptr":5,"pstr":"s","m":{"a":1,"b":[1,"x",null,true],"c":{"d":1.5}},"bytes":"aGVsbG8=","nested":{"a":3,"b":"y"},"nptr":{"a":4},"n":"12","f":1.5e3,"b":true,"s":["a","b"],"raw":{"x":[1,2]},"t":"2026-01-02T03:04:05Z","any":[1,{"a":null}],"u8":255,"e1":"emb","E2":7,"mi":{"1":"a","-2":"b"},"dur":5}`,
	`{"n":12}`, `{"n":"\"12\""}`, `{"n":"12x"}`, `{"n":null}`, `{"n":"null"}`, `{"u8":256}`, `{"u8":-1}`, `{"mi":{"x":"a"}}`,
	`{"bytes":"aGVsbG8"}`, `{"bytes":"aGV\r\nsbG8="}`, `{"bytes":"-_-_"}`, `{"bytes":null}`, `{"bytes":[1,2]}`,
	`{"m":null}`, `{"s":null}`, `{"s":[]}`, `{"m":{}}`, `{"ptr":null}`, `{"nested":null}`, `{"any":1e400}`, `{"f":1e400}`,
	`{"-":"x","Skip":"y"}`, `{"e2":1,"E2":2}`, `{"nested":{"A":1,"a":2}}`, `{"ms":{"k":null,"j":{"a":1}}}`,
	strings.Repeat("[", 10001), `{"raw":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
}

// same reports where a and b differ, "" if nowhere. Times compare by
// instant and offset.
func same(a, b any) string {
	if reflect.DeepEqual(a, b) {
		return ""
	}
	return fmt.Sprintf("%#v\n != %#v", a, b)
}

// check decodes data with jsonx and with encoding/json into fresh Ts and
// fails on any difference: success, value, or error text.
// The Decoders check uses, one per type for the whole test binary: each
// decodes every input after the ones before it, so a value left over from
// an earlier input (a field it set, a partial decode that failed) shows up
// as a difference.
var decoders sync.Map // reflect.Type -> *jsonx.Decoder[T]

// check decodes data with jsonx (Unmarshal, and a Decoder that has decoded
// earlier inputs) and with encoding/json into fresh Ts and fails on any
// difference: success, value, or error text.
func check[T any](t *testing.T, data []byte) {
	t.Helper()
	d, _ := decoders.LoadOrStore(reflect.TypeFor[T](), new(jsonx.Decoder[T]))
	dec := d.(*jsonx.Decoder[T])
	var want T
	werr := json.Unmarshal(data, &want)
	for _, decode := range []struct {
		name string
		f    func([]byte) (T, error)
	}{{"Unmarshal", jsonx.Unmarshal[T]}, {"Decoder", dec.Unmarshal}} {
		got, gerr := decode.f(data)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("input %q: jsonx %s error %v, encoding/json error %v", data, decode.name, gerr, werr)
		}
		if gerr != nil {
			require.Equal(t, werr.Error(), gerr.Error(), "input %q, %s", data, decode.name)
			require.IsType(t, werr, gerr, "input %q, %s", data, decode.name)
		}
		if d := same(want, got); d != "" {
			t.Fatalf("input %q decodes otherwise by %s:\n%s", data, decode.name, d)
		}
	}
}

// TestDecoderAllocs: a Decoder saves Unmarshal's allocation of the T.
// Under the race detector sync.Pool drops values on purpose, so the count
// is only checked without it: scripts/test.sh runs this test that way too.
func TestDecoderAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a build without -race; scripts/test.sh runs this test without it")
	}
	data := []byte(seeds[0])
	var dec jsonx.Decoder[event]
	un := testing.AllocsPerRun(200, func() { _, _ = jsonx.Unmarshal[event](data) })
	de := testing.AllocsPerRun(200, func() { _, _ = dec.Unmarshal(data) })
	require.Equal(t, un-1, de, "allocations per value: Unmarshal %v, Decoder %v", un, de)
}

// TestDecoderConcurrent: goroutines sharing a Decoder each get their own
// values back (run it with -race).
func TestDecoderConcurrent(t *testing.T) {
	var dec jsonx.Decoder[event]
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				want := event{UUID: fmt.Sprint(g), Seq: int64(i), Page: strings.Repeat("p", i%7)}
				b, err := json.Marshal(want)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := dec.Unmarshal(b)
				if err != nil || !reflect.DeepEqual(want, got) {
					t.Errorf("goroutine %d, value %d: got %+v, %v", g, i, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestUnmarshalLikeStd(t *testing.T) {
	for _, s := range seeds {
		check[event](t, []byte(s))
		check[broad](t, []byte(s))
		check[map[string]any](t, []byte(s))
	}
}

// TestErrorsNameTheField: a failure is encoding/json's, which names the
// struct field and the type.
func TestErrorsNameTheField(t *testing.T) {
	_, err := jsonx.Unmarshal[event]([]byte(`{"uuid":"a","seq":"x"}`))
	require.EqualError(t, err, "json: cannot unmarshal string into Go struct field event.seq of type int64")
	var te *json.UnmarshalTypeError
	require.ErrorAs(t, err, &te)
	_, err = jsonx.Marshal(math.NaN())
	var ue *json.UnsupportedValueError
	require.ErrorAs(t, err, &ue)
}

func FuzzUnmarshalEvent(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { check[event](t, data) })
}

func FuzzUnmarshalBroad(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check[broad](t, data)
		check[any](t, data)
	})
}

// TestMarshalLikeStd: random values of broad encode to encoding/json's
// bytes, or fail as it fails. KORD_JSON_VALUES sets how many (2,000).
func TestMarshalLikeStd(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	if v := envInt("KORD_JSON_VALUES"); v > 0 {
		n = v
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		v := randomBroad(r)
		got, gerr := jsonx.Marshal(v)
		want, werr := json.Marshal(v)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("value %d %#v: jsonx error %v, encoding/json error %v", i, v, gerr, werr)
		}
		if werr != nil {
			require.Equal(t, werr.Error(), gerr.Error())
			continue
		}
		require.Equal(t, string(want), string(got), "value %d %#v", i, v)
	}
}

// randomString mixes ASCII, characters encoding/json escapes (HTML,
// U+2028, control characters) and invalid UTF-8.
func randomString(r *rand.Rand) string {
	parts := []string{"a", "Z", "0", " ", "<", ">", "&", "\"", "\\", "/", "\u2028", "\u2029", "\b", "\f", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "日本", "\xff", "\xe2\x82", "🎉"}
	var b strings.Builder
	for range r.IntN(12) {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	return b.String()
}

func randomBroad(r *rand.Rand) broad {
	zones := []*time.Location{time.UTC, time.FixedZone("", 5*3600+1800), time.FixedZone("X", -4*3600), time.FixedZone("", 24*3600)}
	floats := []float64{0, 0.1, 1e21, 1e20, 1e-7, 1e-6, -0.0, 123456789, 3.4e38, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1)}
	v := broad{
		Embedded: Embedded{E1: randomString(r), E2: r.IntN(1000) - 500},
		Name:     randomString(r),
		Nest:     inner{A: r.IntN(10), B: randomString(r)},
		N:        r.Int64() - r.Int64(),
		F:        floats[r.IntN(len(floats))],
		B:        r.IntN(2) == 0,
		T:        time.Unix(r.Int64N(1<<36)-1<<35, r.Int64N(1e9)).In(zones[r.IntN(len(zones))]),
		U8:       uint8(r.IntN(256)),
		Dur:      time.Duration(r.Int64()),
	}
	if r.IntN(2) == 0 {
		p := r.IntN(100)
		v.Ptr = &p
		s := randomString(r)
		v.PStr = &s
		v.NPtr = &inner{A: p}
	}
	switch r.IntN(3) {
	case 0:
		v.M = map[string]any{randomString(r): randomString(r), "n": float64(r.IntN(100)), "l": []any{nil, true, "x"}, "o": map[string]any{"k": 1.5}}
		v.MI = map[int]string{r.IntN(100) - 50: randomString(r), 7: "x"}
		v.MS = map[string]*inner{"a": nil, "b": {A: 1}}
	case 1:
		v.M, v.MI = map[string]any{}, map[int]string{}
	}
	switch r.IntN(3) {
	case 0:
		v.Bytes = []byte(randomString(r))
		v.S = []string{randomString(r), ""}
	case 1:
		v.Bytes, v.S = []byte{}, []string{}
	}
	raws := []string{``, `null`, `{"a":[1,2]}`, ` { "a" : 1 } `, `"<&>"`, `1e3`, `[`, `"` + "\xff" + `"`}
	if raw := raws[r.IntN(len(raws))]; raw != "" {
		v.Raw = json.RawMessage(raw)
	}
	anys := []any{nil, 1, "s", []int{1}, map[string]int{"z": 1, "a": 2}, inner{A: 1}, &inner{}, math.Inf(-1)}
	v.Any = anys[r.IntN(len(anys))]
	return v
}

func envInt(name string) int {
	var n int
	fmt.Sscan(os.Getenv(name), &n)
	return n
}
