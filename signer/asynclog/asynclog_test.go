package asynclog_test

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/signer/asynclog"
	"github.com/agentid/agentid/signer/signertest"
)

// syncBuffer is signertest.SyncBuffer.
type syncBuffer = signertest.SyncBuffer

func text(w io.Writer) slog.Handler {
	return slog.NewTextHandler(w, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
}

func TestWritesEveryRecordInOrder(t *testing.T) {
	var out syncBuffer
	h := asynclog.New(&out, 0, text)
	log := slog.New(h).With("app", "x").WithGroup("g")
	for i := range 1000 {
		log.Info("req", "i", i)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 1000 {
		t.Fatalf("%d lines, want 1000", len(lines))
	}
	if lines[0] != "level=INFO msg=req app=x g.i=0" || !strings.HasSuffix(lines[999], " g.i=999") {
		t.Errorf("first %q, last %q", lines[0], lines[999])
	}
	if h.Dropped() != 0 {
		t.Errorf("dropped %d with a fast sink", h.Dropped())
	}
	// After Close, records are written at once.
	log.Warn("late")
	if !strings.HasSuffix(out.String(), "level=WARN msg=late app=x\n") {
		t.Errorf("record after Close not written: %q", out.String())
	}
}

// blockingWriter blocks every Write until release is closed.
type blockingWriter struct {
	release chan struct{}
	syncBuffer
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	<-b.release
	return b.syncBuffer.Write(p)
}

func TestFullQueueDropsWithoutBlocking(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	h := asynclog.New(w, 4, text)
	log := slog.New(h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			log.Info("req", "i", i, "pad", strings.Repeat("x", 1000))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("logging blocked on a stalled sink")
	}
	if d := h.Dropped(); d == 0 || d >= 200 {
		t.Errorf("dropped %d of 200 with a stalled sink and a queue of 4, want some but not all", d)
	}
	close(w.release)
	h.Close()
	written := strings.Count(w.String(), "msg=req")
	if uint64(written)+h.Dropped() != 200 {
		t.Errorf("written %d + dropped %d, want 200", written, h.Dropped())
	}
}

func TestLevelIsTheInnerHandlers(t *testing.T) {
	var out syncBuffer
	h := asynclog.New(&out, 0, func(w io.Writer) slog.Handler {
		return slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})
	})
	log := slog.New(h)
	log.Info("hidden")
	log.Error("shown")
	h.Close()
	if s := out.String(); strings.Contains(s, "hidden") || !strings.Contains(s, "shown") {
		t.Errorf("output %q: want only the error", s)
	}
}

func TestConcurrentHandleAndClose(t *testing.T) {
	var out syncBuffer
	h := asynclog.New(&out, 16, text)
	log := slog.New(h)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 500 {
				log.Info("r")
			}
		})
	}
	time.Sleep(time.Millisecond)
	h.Close()
	wg.Wait()
	if n := uint64(strings.Count(out.String(), "msg=r")); n+h.Dropped() != 2000 {
		t.Errorf("written %d + dropped %d, want 2000", n, h.Dropped())
	}
}
