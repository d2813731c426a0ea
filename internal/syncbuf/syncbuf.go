// Package syncbuf is a bytes.Buffer safe for one goroutine to read while
// others write: logs and child-process output captured by tests.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a goroutine-safe bytes.Buffer (Write, String, Bytes).
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Bytes returns a copy of what was written so far.
func (l *Buffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b.Bytes()...)
}
