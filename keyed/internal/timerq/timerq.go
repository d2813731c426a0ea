// Package timerq is the queue an operator task finds its next due timer
// in: a min-heap of timers by time. The timers themselves are keyed state
// (keyed's timer service); the queue is rebuilt from that state after a
// restore, and an entry whose timer is no longer in the state is dropped
// by the caller when it comes up.
package timerq

import "container/heap"

// Entry is one timer in a queue: its time (Unix milliseconds), its key and
// the key's key group.
type Entry struct {
	At  int64
	Key string
	KG  int
}

// Queue is a min-heap of timers by time. The zero Queue is empty.
type Queue struct{ h entries }

// Len is the number of entries.
func (q *Queue) Len() int { return len(q.h) }

// Push adds e.
func (q *Queue) Push(e Entry) { heap.Push(&q.h, e) }

// Due reports whether the earliest entry is due at now: its time is at or
// before now.
func (q *Queue) Due(now int64) bool { return len(q.h) > 0 && q.h[0].At <= now }

// Pop removes and returns the earliest entry; the queue must not be empty.
func (q *Queue) Pop() Entry { return heap.Pop(&q.h).(Entry) }

// Rebuild replaces the entries with those each gives, then orders them
// once (heap.Init), for filling a queue from the timer state.
func (q *Queue) Rebuild(each func(add func(Entry))) {
	q.h = q.h[:0]
	each(func(e Entry) { q.h = append(q.h, e) })
	heap.Init(&q.h)
}

// entries implements container/heap's interface.
type entries []Entry

func (q entries) Len() int           { return len(q) }
func (q entries) Less(i, j int) bool { return q[i].At < q[j].At }
func (q entries) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *entries) Push(x any)        { *q = append(*q, x.(Entry)) }
func (q *entries) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
