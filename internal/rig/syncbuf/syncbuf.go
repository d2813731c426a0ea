// Package syncbuf is a bytes.Buffer safe for one goroutine to read while
// others write: logs and child-process output captured by tests.
//
// A Buffer holds at most about 2×Limit bytes: the first Limit bytes
// written and the newest ones. A test whose code under test logs in a
// tight loop would otherwise keep every line until the machine runs out of
// memory (a CI run's test binary once grew to 23 GB that way) instead of
// failing with a readable log.
package syncbuf

import (
	"bytes"
	"fmt"
	"sync"
)

// Limit is how many bytes a Buffer keeps of the start of what was written,
// and at least how many of the end.
const Limit = 16 << 20

// Buffer is a goroutine-safe bytes.Buffer (Write, String, Bytes) that
// keeps the head and the tail of what was written (see Limit).
type Buffer struct {
	mu      sync.Mutex
	head    bytes.Buffer
	tail    []byte
	dropped int64
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	if room := Limit - l.head.Len(); room > 0 && l.tail == nil {
		if len(p) <= room {
			return l.head.Write(p)
		}
		l.head.Write(p[:room])
		p = p[room:]
	}
	l.tail = append(l.tail, p...)
	if over := len(l.tail) - 2*Limit; over > 0 {
		// Keep the newest Limit bytes.
		cut := len(l.tail) - Limit
		l.dropped += int64(cut)
		l.tail = append(l.tail[:0], l.tail[cut:]...)
	}
	return n, nil
}

// String returns what was written so far (with the middle left out past
// Limit).
func (l *Buffer) String() string { return string(l.Bytes()) }

// Bytes returns a copy of what was written so far (with the middle left
// out past Limit).
func (l *Buffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]byte(nil), l.head.Bytes()...)
	if l.dropped > 0 {
		out = fmt.Appendf(out, "\n[syncbuf: %d bytes left out]\n", l.dropped)
	}
	return append(out, l.tail...)
}
