package kordhttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/kordproject/kord/keyed"
)

// Server serves Handler on an address of its own, for a program with no
// HTTP server to mount it on (the examples' -http).
type Server struct {
	srv  *http.Server
	l    net.Listener
	done chan struct{}
}

// Serve starts serving jobs (Handler, with opts) on addr (":8080", or
// ":0" for a free port), and returns once it listens.
func Serve(addr string, jobs []*keyed.Job, opts ...Opt) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("kordhttp: listen on %s: %w", addr, err)
	}
	s := &Server{srv: &http.Server{Handler: Handler(jobs, opts...), ReadHeaderTimeout: 10 * time.Second}, l: l, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(l)
	}()
	return s, nil
}

// Addr is the address it listens on.
func (s *Server) Addr() net.Addr { return s.l.Addr() }

// Close stops the server, letting requests in progress finish for up to
// five seconds, and returns once its goroutine has ended.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.srv.Close()
	}
	<-s.done
	return err
}
