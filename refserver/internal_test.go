package refserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/store"
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

// TestDirectWhoami: the requests for /whoami that Handler serves without
// the router get the answer the router gives them, and every other
// request goes to the router.
func TestDirectWhoami(t *testing.T) {
	t.Parallel()
	db, err := store.OpenGorm("sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context(), db, io.Discard); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{DB: store.New(db), Hostname: "http://agentid.test"})
	if err != nil {
		t.Fatal(err)
	}
	router := s.routes() // a second router, on its own
	const agent = "http://agent-0123456789abcdef01234567.agentid.test"
	for _, tc := range []struct{ method, target string }{
		{http.MethodGet, "http://agentid.test/whoami"},
		{http.MethodHead, "http://agentid.test/whoami"},
		{http.MethodPost, "http://agentid.test/whoami"},
		{http.MethodPut, "http://agentid.test/whoami"},
		{http.MethodGet, "http://AGENTID.test:80/whoami"},
		{http.MethodGet, "http://agentid.test/who%61mi"},
		{http.MethodGet, "http://agentid.test/whoami/"},
		{http.MethodGet, "http://agentid.test//whoami"},
		{http.MethodGet, "http://agentid.test/whoami?x=1"},
		{http.MethodGet, agent + "/whoami"},
		{http.MethodGet, "http://other.test/whoami"},
		{http.MethodGet, "http://agentid.test/"},
	} {
		answer := func(h http.Handler) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(tc.method, tc.target, strings.NewReader("{}"))
			r.Header.Set("Signature-Input", `sig1=("@authority");created=1;keyid="k"`)
			h.ServeHTTP(rec, r)
			return rec
		}
		got, want := answer(s.Handler()), answer(router)
		if got.Code != want.Code || !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) || !reflect.DeepEqual(got.Header(), want.Header()) {
			t.Errorf("%s %s: direct %d %v %s, router %d %v %s", tc.method, tc.target,
				got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
		}
	}
}
