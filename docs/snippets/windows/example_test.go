// Package windows_test holds the snippets of docs/time-and-windows.md:
// record time, watermarks, timers, windows, late records and state TTL.
// go test ./docs/snippets/windows/ runs them.
package windows_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/serde"
	"github.com/kordproject/kord/vfs"
)

// Hit is one request to a page, at a time the client wrote into it.
type Hit struct {
	Page string    `json:"page"`
	User string    `json:"user"`
	At   time.Time `json:"at"`
}

// t0 is noon on a day; the examples' times are minutes after it.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at is t0 plus minutes and seconds.
func at(min, sec int) time.Time {
	return t0.Add(time.Duration(min)*time.Minute + time.Duration(sec)*time.Second)
}

// hits is a bounded in-memory source of one partition holding hs, in order.
func hits(hs ...Hit) *keyed.MemorySource[Hit] {
	src := keyed.NewMemorySource[Hit]("hits", 1, true)
	for _, h := range hs {
		src.Append(0, []byte(h.User), h)
	}
	return src
}

// count is an Aggregator that counts a window's records.
var count = keyed.Aggregator[Hit, int64]{
	Init: func() int64 { return 0 },
	Add:  func(n int64, _ Hit) int64 { return n + 1 },
}

// Hits per page and minute, in event time: the time each hit carries.
func Example_tumbling() {
	// snippet:tumbling
	src := hits( // a bounded in-memory source of one partition, in this order
		Hit{Page: "/a", At: at(0, 10)},
		Hit{Page: "/a", At: at(0, 50)},
		Hit{Page: "/b", At: at(1, 5)},
		Hit{Page: "/a", At: at(0, 40)}, // out of order, within the watermarks' minute
		Hit{Page: "/a", At: at(1, 30)})

	job := keyed.NewJob("hits-per-minute", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	hits := keyed.FromSource[Hit](job, "hits", 0, src).
		Timestamps(func(h Hit, recordTime time.Time) time.Time { return h.At }). // default: the Kafka timestamp
		Watermarks(time.Minute)                                                  // out-of-orderness allowed
	byPage := keyed.KeyByString("page", func(h Hit) string { return h.Page }, hits)
	perMinute := keyed.WindowAggregate(byPage, "per-minute", 0, keyed.Tumbling(time.Minute), serde.Int64(),
		keyed.Aggregator[Hit, int64]{
			Init: func() int64 { return 0 },
			Add:  func(n int64, _ Hit) int64 { return n + 1 },
		},
		func(page string, w keyed.Window, n int64) string {
			return fmt.Sprintf("%s %s-%s: %d", page, w.Start.Format("15:04"), w.End.Format("15:04"), n)
		},
		nil) // no output for late records (they are counted)
	// snippet:end
	sink := keyed.NewMemorySink[string]()
	keyed.ToSink(perMinute, "counts", sink)
	if err := job.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	for _, r := range slices.Sorted(slices.Values(sink.Committed())) {
		fmt.Println(r)
	}
	// Output:
	// /a 12:00-12:01: 3
	// /a 12:01-12:02: 1
	// /b 12:01-12:02: 1
}

// Sessions: a user's hits less than ten minutes apart share a window.
func Example_session() {
	// snippet:session
	src := hits(
		Hit{User: "ann", At: at(0, 0)},
		Hit{User: "ann", At: at(6, 0)},
		Hit{User: "ann", At: at(3, 0)},
		Hit{User: "ann", At: at(30, 0)},
		Hit{User: "bob", At: at(1, 0)})

	job := keyed.NewJob("sessions", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	hits := keyed.FromSource[Hit](job, "hits", 0, src).
		Timestamps(func(h Hit, _ time.Time) time.Time { return h.At }).
		Watermarks(5 * time.Minute)
	byUser := keyed.KeyByString("user", func(h Hit) string { return h.User }, hits)
	sessions := keyed.WindowAggregate(byUser, "sessions", 0, keyed.Session(10*time.Minute), serde.Int64(),
		keyed.Aggregator[Hit, int64]{
			Init:  func() int64 { return 0 },
			Add:   func(n int64, _ Hit) int64 { return n + 1 },
			Merge: func(a, b int64) int64 { return a + b }, // two sessions a hit bridges
		},
		func(user string, w keyed.Window, n int64) string {
			return fmt.Sprintf("%s %s-%s: %d hits", user, w.Start.Format("15:04"), w.End.Format("15:04"), n)
		}, nil)
	// snippet:end
	sink := keyed.NewMemorySink[string]()
	keyed.ToSink(sessions, "out", sink)
	if err := job.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	for _, r := range slices.Sorted(slices.Values(sink.Committed())) {
		fmt.Println(r)
	}
	// Output:
	// ann 12:00-12:16: 3 hits
	// ann 12:30-12:40: 1 hits
	// bob 12:01-12:11: 1 hits
}

// The slowest of each page's requests over four minutes, every two
// minutes: sliding windows, and a function that needs all their records.
func Example_windowApply() {
	type Timed struct {
		Page string
		MS   int64
		At   time.Time
	}
	src := keyed.NewMemorySource[Timed]("timings", 1, true)
	for i, ms := range []int64{120, 80, 300, 95} {
		src.Append(0, nil, Timed{Page: "/a", MS: ms, At: at(i*2, 0)})
	}
	job := keyed.NewJob("slowest", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	timings := keyed.FromSource[Timed](job, "timings", 0, src).
		Timestamps(func(t Timed, _ time.Time) time.Time { return t.At }).
		Watermarks(0)
	byPage := keyed.KeyByString("page", func(t Timed) string { return t.Page }, timings)
	// snippet:apply
	slowest := keyed.WindowApply(byPage, "slowest", 0, keyed.Sliding(4*time.Minute, 2*time.Minute), serde.JSON[Timed](),
		func(page string, w keyed.Window, records []Timed) string {
			m := slices.MaxFunc(records, func(a, b Timed) int { return int(a.MS - b.MS) })
			return fmt.Sprintf("%s %s-%s: %d ms", page, w.Start.Format("15:04"), w.End.Format("15:04"), m.MS)
		}, nil)
	// snippet:end
	sink := keyed.NewMemorySink[string]()
	keyed.ToSink(slowest, "out", sink)
	if err := job.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	for _, r := range slices.Sorted(slices.Values(sink.Committed())) {
		fmt.Println(r)
	}
	// Output:
	// /a 11:58-12:02: 120 ms
	// /a 12:00-12:04: 120 ms
	// /a 12:02-12:06: 300 ms
	// /a 12:04-12:08: 300 ms
	// /a 12:06-12:10: 95 ms
}

// snippet:timer
// idle reports a user who has had no hit for 30 minutes of event time.
type idle struct {
	last *keyed.ValueState[time.Time] // the user's last hit
}

func (o *idle) Open(b *keyed.Backend) (err error) {
	o.last, err = keyed.Value(b, "last", serde.JSON[time.Time]())
	return err
}

func (o *idle) Process(user []byte, h Hit, out *keyed.Collector[string]) error {
	if last, ok := o.last.Get(); ok {
		out.DeleteTimer(keyed.EventTime, last.Add(30*time.Minute)) // the hit before this one's
	}
	o.last.Set(out.Timestamp())
	out.RegisterTimer(keyed.EventTime, out.Timestamp().Add(30*time.Minute))
	return nil
}

// OnTimer fires when the watermark reaches the timer's time, with its key
// current.
func (o *idle) OnTimer(user []byte, t keyed.Timer, out *keyed.Collector[string]) error {
	last, _ := o.last.Get()
	out.Emit(fmt.Sprintf("%s idle at %s (last hit %s)", user, t.Time.Format("15:04"), last.Format("15:04")))
	return nil
}

// snippet:end

// An event-time timer per user, moved on at each of the user's hits.
func Example_timer() {
	src := hits(
		Hit{User: "ann", At: at(0, 0)},
		Hit{User: "ann", At: at(10, 0)},
		Hit{User: "bob", At: at(15, 0)},
		Hit{User: "ann", At: at(60, 0)}) // comes before the watermark it moves past 12:40
	// snippet:timerjob
	job := keyed.NewJob("idle-users", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	hits := keyed.FromSource[Hit](job, "hits", 0, src).
		Timestamps(func(h Hit, _ time.Time) time.Time { return h.At }).
		Watermarks(time.Minute)
	idled := keyed.Process(keyed.ByPartition(hits), "idle", 0, func() keyed.Operator[Hit, string] { return &idle{} })
	// snippet:end
	sink := keyed.NewMemorySink[string]()
	keyed.ToSink(idled, "out", sink)
	if err := job.Run(context.Background()); err != nil { // the input's end fires every event-time timer
		log.Fatal(err)
	}
	for _, r := range slices.Sorted(slices.Values(sink.Committed())) {
		fmt.Println(r)
	}
	// Output:
	// ann idle at 13:30 (last hit 13:00)
	// bob idle at 12:45 (last hit 12:15)
}

// PageCount is a window's count, or (Late true) a hit that came after
// its window was gone.
type PageCount struct {
	Page  string
	Start time.Time
	N     int64
	Late  bool
}

func (c PageCount) String() string {
	if c.Late {
		return fmt.Sprintf("late hit on %s at %s", c.Page, c.Start.Format("15:04:05"))
	}
	return fmt.Sprintf("%s %s: %d", c.Page, c.Start.Format("15:04"), c.N)
}

// A window updated by a hit within its allowed lateness, and a hit that
// comes after that, sent to a sink of its own.
func Example_late() {
	// snippet:late
	src := hits(
		Hit{Page: "/a", At: at(0, 10)},
		Hit{Page: "/a", At: at(1, 10)}, // the watermark passes 12:01: [12:00, 12:01) fires with 1
		Hit{Page: "/a", At: at(1, 15)},
		Hit{Page: "/a", At: at(0, 50)}, // within the 30 s allowed lateness: fires again with 2
		Hit{Page: "/a", At: at(2, 0)},  // the watermark passes 12:01:30: [12:00, 12:01) is gone
		Hit{Page: "/a", At: at(2, 5)},
		Hit{Page: "/a", At: at(0, 20)}) // late: its window is gone

	// BatchSize(1): a message between tasks per record, so that the
	// watermark moves between these few records as it would on a live input.
	job := keyed.NewJob("late-hits", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"), keyed.BatchSize(1))
	hits := keyed.FromSource[Hit](job, "hits", 0, src).
		Timestamps(func(h Hit, _ time.Time) time.Time { return h.At }).
		Watermarks(0)
	byPage := keyed.KeyByString("page", func(h Hit) string { return h.Page }, hits)
	counts := keyed.WindowAggregate(byPage, "per-minute", 0,
		keyed.Tumbling(time.Minute).AllowedLateness(30*time.Second), serde.Int64(), count, // Init and Add as in the examples above
		func(page string, w keyed.Window, n int64) PageCount {
			return PageCount{Page: page, Start: w.Start, N: n}
		},
		func(page string, h Hit) (PageCount, bool) {
			return PageCount{Page: page, Start: h.At, Late: true}, true
		})

	// The late records to a sink of their own, committed with the first.
	windows := keyed.NewMemorySink[PageCount]()
	late := keyed.MemoryOutput[PageCount](windows)
	keyed.ToSink(counts.Filter(func(c PageCount) bool { return !c.Late }), "windows", windows)
	keyed.ToSink(counts.Filter(func(c PageCount) bool { return c.Late }), "late", late)
	// snippet:end
	if err := job.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println(windows.Committed())
	fmt.Println(late.Committed())
	fmt.Println("late records:", job.LateRecords())
	// Output:
	// [/a 12:00: 1 /a 12:00: 2 /a 12:01: 2 /a 12:02: 2]
	// [late hit on /a at 12:00:20]
	// late records: 1
}

// State that expires: a user's first hit in 24 hours.
func Example_ttl() {
	src := hits(
		Hit{User: "ann", Page: "/a"},
		Hit{User: "ann", Page: "/b"},
		Hit{User: "bob", Page: "/a"})
	job := keyed.NewJob("first-hits", keyed.FS(vfs.NewMem()), keyed.Dir("/ckpt"))
	byUser := keyed.KeyByString("user", func(h Hit) string { return h.User }, keyed.FromSource[Hit](job, "hits", 0, src))
	first := keyed.Process(byUser, "first", 0, func() keyed.Operator[Hit, string] { return &firstHit{} })
	sink := keyed.NewMemorySink[string]()
	keyed.ToSink(first, "out", sink)
	if err := job.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	for _, r := range slices.Sorted(slices.Values(sink.Committed())) {
		fmt.Println(r)
	}
	// Output:
	// ann /a
	// bob /a
}

// snippet:ttl
// firstHit passes on a user's first hit, and the next one only once 24
// hours passed without a hit.
type firstHit struct{ seen *keyed.ValueState[bool] }

func (o *firstHit) Open(b *keyed.Backend) (err error) {
	o.seen, err = keyed.Value(b, "seen", serde.JSON[bool](), keyed.TTL(24*time.Hour))
	return err
}

func (o *firstHit) Process(user []byte, h Hit, out *keyed.Collector[string]) error {
	if _, ok := o.seen.Get(); !ok { // none, or expired
		out.Emit(string(user) + " " + h.Page)
	}
	o.seen.Set(true) // each write starts the 24 hours again
	return nil
}

// snippet:end
