package partitioner

import (
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRoundRobinRule(t *testing.T) {
	r := NewRoundRobin()
	// Counter starts at 0 per topic and steps once per record; keys ignored.
	got := []int32{}
	for i := 0; i < 7; i++ {
		got = append(got, r.Partition("t", []byte("same key"), 5, []int32{0, 1, 2, 3, 4}))
	}
	require.Equal(t, []int32{0, 1, 2, 3, 4, 0, 1}, got)
	// Another topic has its own counter; case matters.
	require.Equal(t, int32(0), r.Partition("T", nil, 5, []int32{0, 1, 2, 3, 4}))
	// Available partitions are indexed by position in the list as given:
	// counter of "t" is now 7, 7 % 2 = 1 -> second entry.
	require.Equal(t, int32(3), r.Partition("t", nil, 5, []int32{1, 3}))
	// None available: counter 8 over all partitions.
	require.Equal(t, int32(3), r.Partition("t", nil, 5, nil))
}

func TestRoundRobinCounterWrapsLikeJava(t *testing.T) {
	r := NewRoundRobin()
	r.c.start = func(string) int32 { return math.MaxInt32 } // getAndIncrement wraps next
	require.Equal(t, int32(2147483647%3), r.Partition("warm", nil, 3, []int32{0, 1, 2}))
	// -2^31 -> toPositive = 0
	require.Equal(t, int32(0), r.Partition("warm", nil, 3, []int32{0, 1, 2}))
	// -2^31+1 -> toPositive = 1
	require.Equal(t, int32(1), r.Partition("warm", nil, 3, []int32{0, 1, 2}))
}

func TestRoundRobinConcurrentIsEven(t *testing.T) {
	// One counter step per record, however many goroutines call: with 7
	// partitions and 8*7*1000 records each partition gets exactly 8000.
	r := NewRoundRobin()
	avail := []int32{0, 1, 2, 3, 4, 5, 6}
	var mu sync.Mutex
	counts := make([]int, 7)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]int, 7)
			for i := 0; i < 7000; i++ {
				local[r.Partition("topic", nil, 7, avail)]++
			}
			mu.Lock()
			for i, n := range local {
				counts[i] += n
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for p, n := range counts {
		require.Equal(t, 8000, n, "partition %d", p)
	}
}

func TestLegacy(t *testing.T) {
	l := NewLegacy(LegacyStart(func(topic string) int32 {
		if topic == "neg" {
			return -2 // ThreadLocalRandom.nextInt may be negative
		}
		return 10
	}))
	avail := []int32{0, 2, 5}
	// Keyed: hash over all partitions, even a leaderless one.
	for _, k := range [][]byte{{}, []byte("user-1"), []byte("用户")} {
		require.Equal(t, KeyPartition(k, 6), l.Partition("t", k, 6, avail))
	}
	// Null key: round robin over available from the injected start.
	require.Equal(t, int32(2), l.Partition("t", nil, 6, avail)) // 10 % 3 = 1
	require.Equal(t, int32(5), l.Partition("t", nil, 6, avail)) // 11 % 3 = 2
	require.Equal(t, int32(0), l.Partition("t", nil, 6, avail)) // 12 % 3 = 0
	// Keyed records do not advance the null-key counter.
	l.Partition("t", []byte("k"), 6, avail)
	require.Equal(t, int32(2), l.Partition("t", nil, 6, avail)) // 13 % 3 = 1
	// Negative start: toPositive, not abs. 2147483646 % 3 = 0, 2147483647 % 3 = 1.
	require.Equal(t, int32(0), l.Partition("neg", nil, 6, avail))
	require.Equal(t, int32(2), l.Partition("neg", nil, 6, avail))
	require.Equal(t, int32(0), l.Partition("neg", nil, 6, avail))
	// None available: over all partitions. counter 14 % 6 = 2.
	require.Equal(t, int32(2), l.Partition("t", nil, 6, nil))
}

func TestLegacyDefaultStartIsRandomPerTopic(t *testing.T) {
	// Two fresh partitioners almost never start 100 topics at the same place.
	a, b := NewLegacy(), NewLegacy()
	same := 0
	for i := 0; i < 100; i++ {
		topic := string(rune('a'+i%26)) + string(rune('0'+i/26))
		if a.Partition(topic, nil, 1000, nil) == b.Partition(topic, nil, 1000, nil) {
			same++
		}
	}
	require.Less(t, same, 10)
}

func TestLegacyNullKeyConcurrentIsEven(t *testing.T) {
	// The null-key path advances each topic's counter once per record
	// however many goroutines call, including the first calls racing to
	// create the counter (a slow start function widens that race): with 3
	// available partitions of 6 and 8*300 records per topic, each available
	// partition gets exactly 800 and the leaderless ones none. The start is
	// fixed away from the int32 wrap, where toPositive (as in Java) breaks
	// the even spread.
	l := NewLegacy(LegacyStart(func(string) int32 {
		time.Sleep(time.Millisecond)
		return 1_000_003
	}))
	avail := []int32{0, 2, 5}
	const topics, goroutines, perTopic = 20, 8, 300
	var mu sync.Mutex
	counts := make([][6]int, topics)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([][6]int, topics)
			<-start
			for i := 0; i < perTopic; i++ {
				for tp := range topics {
					local[tp][l.Partition("t"+strconv.Itoa(tp), nil, 6, avail)]++
				}
			}
			mu.Lock()
			for tp := range local {
				for p, n := range local[tp] {
					counts[tp][p] += n
				}
			}
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	for tp := range counts {
		require.Equal(t, [6]int{800, 0, 800, 0, 0, 800}, counts[tp], "topic t%d", tp)
	}
}

func TestKeyedDelegatesNoKey(t *testing.T) {
	k := Keyed{NoKey: NewRoundRobin()}
	require.Equal(t, KeyPartition([]byte("x"), 12), k.Partition("t", []byte("x"), 12, nil))
	require.Equal(t, int32(0), k.Partition("t", nil, 12, nil))
	require.Equal(t, int32(1), k.Partition("t", nil, 12, nil))
	require.Equal(t, KeyPartition([]byte{}, 12), k.Partition("t", []byte{}, 12, nil))
}
