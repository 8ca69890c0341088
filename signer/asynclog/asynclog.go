// Package asynclog takes log output off the request path; the reference
// server (idcli server), the proxy and idcli share it. A Handler puts each
// record in a bounded queue and returns at once. One goroutine wakes
// every FlushInterval, formats what is queued with a wrapped slog.Handler
// into a buffer and writes it out, so under load many lines go out in one
// write, and queueing a record wakes nothing (no goroutine switch per
// line). When the queue is full the record is dropped and counted
// (Dropped), never waited for: a slow log sink (a full pipe, a stalled
// disk) does not slow requests down. Lines appear at most about
// FlushInterval after they are logged.
//
//	h := asynclog.New(os.Stderr, asynclog.DefaultQueue, func(w io.Writer) slog.Handler {
//		return slog.NewTextHandler(w, nil)
//	})
//	defer h.Close() // writes out what is queued
//	logger := slog.New(h)
package asynclog

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultQueue is New's default queue length: a burst of that many records
// waits for the writer goroutine before any is dropped.
const DefaultQueue = 8192

// FlushInterval is how often the goroutine writes out what is queued.
const FlushInterval = 20 * time.Millisecond

// bufferSize is the writer's buffer: it is written out when full and after
// each round.
const bufferSize = 64 << 10

// Handler is an slog.Handler that formats and writes records in its own
// goroutine. It is safe for concurrent use. Handlers made by WithAttrs and
// WithGroup share the queue, the goroutine and the counter.
type Handler struct {
	inner slog.Handler // formats into the shared buffer; used by the writer goroutine only (until Close)
	q     *queue
}

type item struct {
	h slog.Handler
	r slog.Record
}

type queue struct {
	ch      chan item
	dropped atomic.Uint64
	state   sync.RWMutex // held shared while queueing, exclusively to close
	closed  bool
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once

	mu sync.Mutex // serializes writes after Close
	bw *bufio.Writer
}

// New returns a Handler writing to out through the handler mk makes on a
// buffered writer over out (for example slog.NewTextHandler), with a queue
// of size records (DefaultQueue if size ≤ 0).
func New(out io.Writer, size int, mk func(io.Writer) slog.Handler) *Handler {
	if size <= 0 {
		size = DefaultQueue
	}
	q := &queue{ch: make(chan item, size), stop: make(chan struct{}), done: make(chan struct{}),
		bw: bufio.NewWriterSize(out, bufferSize)}
	h := &Handler{inner: mk(q.bw), q: q}
	go q.run()
	return h
}

// run writes out the queued records every FlushInterval, and once more at
// Close.
func (q *queue) run() {
	defer close(q.done)
	t := time.NewTicker(FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			q.drain()
		case <-q.stop:
			q.drain()
			return
		}
	}
}

// drain formats and writes every record queued now.
func (q *queue) drain() {
	for {
		select {
		case it := <-q.ch:
			it.h.Handle(context.Background(), it.r)
		default:
			q.bw.Flush()
			return
		}
	}
}

// Enabled reports whether the wrapped handler handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

// Handle queues a copy of r, or drops and counts it if the queue is full.
// After Close it writes r at once.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	h.q.state.RLock()
	if h.q.closed {
		h.q.state.RUnlock()
		<-h.q.done // the goroutine has written out the queue
		h.q.mu.Lock()
		defer h.q.mu.Unlock()
		err := h.inner.Handle(ctx, r)
		if ferr := h.q.bw.Flush(); err == nil {
			err = ferr
		}
		return err
	}
	select {
	case h.q.ch <- item{h: h.inner, r: r.Clone()}:
	default:
		h.q.dropped.Add(1)
	}
	h.q.state.RUnlock()
	return nil
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{inner: h.inner.WithAttrs(attrs), q: h.q}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), q: h.q}
}

// Dropped returns the number of records dropped because the queue was
// full.
func (h *Handler) Dropped() uint64 { return h.q.dropped.Load() }

// Close writes out every queued record and stops the goroutine; records
// handled afterwards are written at once, on the caller's goroutine. It
// is safe to call more than once.
func (h *Handler) Close() error {
	h.q.once.Do(func() {
		h.q.state.Lock() // no Handle is queueing; later ones write at once
		h.q.closed = true
		h.q.state.Unlock()
		close(h.q.stop)
		<-h.q.done
	})
	return nil
}
