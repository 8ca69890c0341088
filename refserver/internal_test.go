package refserver

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRecoverPanics(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
	h := s.logRequests(s.recoverPanics(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("secret internal state")
	})))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost:3000/boom", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status = %d, want 500", rec.Code)
	}
	var body struct {
		Error struct {
			Code, Message string
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	if body.Error.Code != "internal" {
		t.Errorf("code = %s, want internal", body.Error.Code)
	}
	if strings.Contains(rec.Body.String(), "secret") {
		t.Errorf("body leaks the panic value: %s", rec.Body)
	}
	if !strings.Contains(logs.String(), "secret internal state") || !strings.Contains(logs.String(), "status=500") {
		t.Errorf("log lacks the panic or the request line:\n%s", logs.String())
	}
}

func TestEtagMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		headers []string
		want    bool
	}{
		{nil, false},
		{[]string{`"a"`}, true},
		{[]string{`W/"a"`}, true},
		{[]string{`"b", "a"`}, true},
		{[]string{`"b"`, `"a"`}, true},
		{[]string{`*`}, true},
		{[]string{`"b"`}, false},
		{[]string{`a`}, false},
	}
	for _, tt := range tests {
		if got := etagMatches(tt.headers, `"a"`); got != tt.want {
			t.Errorf("etagMatches(%q) = %v, want %v", tt.headers, got, tt.want)
		}
	}
}
