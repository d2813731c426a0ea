// Package runlog keeps a program's log: kord's and librdkafka's lines
// (through log/slog) are kept in memory, written as they come only when
// asked (the examples' -v), and summarized in one line when a run fails. librdkafka
// repeats a failing connection's lines for as long as it retries; the
// failure's own error already names the cause, so the lines are a
// summary's worth, not a screenful.
package runlog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
)

// keep is how many of the last lines at warning or above a Book keeps.
const keep = 50

// Book keeps a run's log lines. Safe for concurrent use.
type Book struct {
	mu     sync.Mutex
	live   io.Writer // nil: nothing written as it comes
	warns  int
	errs   int
	last   []string // the last lines at warning or above, oldest first
	prefix string
}

// New returns a book; live, if not nil, gets every line at info or above
// as it comes (a program's -v). prefix starts the summary line.
func New(prefix string, live io.Writer) *Book { return &Book{prefix: prefix, live: live} }

// Logger returns a logger that writes to the book.
func (b *Book) Logger() *slog.Logger { return slog.New(&handler{b: b}) }

// Summary is one line that sums up the lines at warning or above, or ""
// when there were none: how many, and the last one.
func (b *Book) Summary() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.warns+b.errs == 0 {
		return ""
	}
	return fmt.Sprintf("%s: the Kafka clients logged %d errors and %d warnings; the last: %s", b.prefix, b.errs, b.warns, b.last[len(b.last)-1])
}

// Lines returns the kept lines at warning or above, oldest first.
func (b *Book) Lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.last...)
}

// thread is the thread name librdkafka starts its lines with.
var thread = regexp.MustCompile(`\[thrd:[^\]]*\]: `)

type handler struct {
	b     *Book
	attrs []slog.Attr
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(thread.ReplaceAllString(r.Message, ""))
	add := func(a slog.Attr) bool {
		if a.Key == "client" || a.Key == "config" {
			return true // librdkafka's handle name; the settings: noise here
		}
		fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	line := sb.String()
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.live != nil {
		fmt.Fprintf(b.live, "%s %s\n", r.Level, line)
	}
	if r.Level < slog.LevelWarn {
		return nil
	}
	if r.Level >= slog.LevelError {
		b.errs++
	} else {
		b.warns++
	}
	if len(b.last) == keep {
		b.last = b.last[1:]
	}
	b.last = append(b.last, line)
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{b: h.b, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *handler) WithGroup(string) slog.Handler { return h }

// SyslogLevel is the slog level of a syslog severity (0 emergency ... 7
// debug), the levels librdkafka logs at: 0-3 error, 4 warning, 5-6 info,
// 7 debug.
func SyslogLevel(syslog int) slog.Level {
	switch {
	case syslog <= 3:
		return slog.LevelError
	case syslog == 4:
		return slog.LevelWarn
	case syslog <= 6:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}
