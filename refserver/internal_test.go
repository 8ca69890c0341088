package refserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
)

func TestRecoverPanics(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
	h := s.serve("/boom", func(http.ResponseWriter, *http.Request) error {
		panic("secret internal state")
	})
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

// TestRequestLogNotesErrors: an error a handler returns reaches the
// request's log line: its code always, its internal cause only for a 5xx.
func TestRequestLogNotesErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		err       error
		want      []string
		wantNever string
	}{
		{"503", dbUnavailable(errors.New("dial tcp: refused")), []string{"status=503", "code=database_unavailable", `cause="dial tcp: refused"`}, ""},
		{"404", &middleware.Error{Code: CodeAgentNotFound, Message: "no agent", Err: errors.New("internal detail")},
			[]string{"status=404", "code=agent_not_found"}, "internal detail"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
			h := s.serve("/x", func(http.ResponseWriter, *http.Request) error {
				return tt.err
			})
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "http://localhost:3000/x", nil))
			for _, want := range tt.want {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log lacks %s:\n%s", want, logs.String())
				}
			}
			if tt.wantNever != "" && strings.Contains(logs.String(), tt.wantNever) {
				t.Errorf("log has the cause of a 4xx:\n%s", logs.String())
			}
		})
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
