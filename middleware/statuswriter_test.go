package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentid/agentid/middleware"
)

func TestStatusWriter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		write     func(w http.ResponseWriter)
		status    int
		bytes     int64
		recStatus int
		wantFlush bool
	}{
		{"nothing written", func(http.ResponseWriter) {}, 0, 0, 200, false},
		{"body only is 200", func(w http.ResponseWriter) { w.Write([]byte("hello")) }, 200, 5, 200, false},
		{"first status wins", func(w http.ResponseWriter) { w.WriteHeader(404); w.WriteHeader(500); w.Write([]byte("x")) }, 404, 1, 404, false},
		{"flush before a status is 200", func(w http.ResponseWriter) { http.NewResponseController(w).Flush() }, 200, 0, 200, true},
	} {
		rec := httptest.NewRecorder()
		sw := &middleware.StatusWriter{ResponseWriter: rec}
		tt.write(sw)
		if sw.Status != tt.status || sw.Bytes != tt.bytes || rec.Code != tt.recStatus || rec.Flushed != tt.wantFlush {
			t.Errorf("%s: Status %d Bytes %d (recorder %d, flushed %v); want %d %d (%d, %v)", tt.name, sw.Status, sw.Bytes, rec.Code, rec.Flushed, tt.status, tt.bytes, tt.recStatus, tt.wantFlush)
		}
	}
}
