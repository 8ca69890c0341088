package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/internal/webhook"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// service starts a reference server on db at http://localhost:PORT and
// returns its origin and store.
func service(t *testing.T, db *gorm.DB) (string, *store.DB) {
	t.Helper()
	if err := store.Migrate(context.Background(), db, nil); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	origin := "http://localhost:" + port
	sdb := store.New(db)
	srv, err := refserver.New(refserver.Config{DB: sdb, Hostname: origin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(ts.Close)
	return origin, sdb
}

// receiver is a webhook receiver verifying as docs/recipes/webhook-receiver
// does: the middleware, trusting the service host alone, requiring a
// bound Signature-Agent, @method, @path and content-digest.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	events   []webhook.Event
	agents   []middleware.Agent
	refusals int
}

func newReceiver(t *testing.T, origin string) *receiver {
	t.Helper()
	rc := &receiver{Server: httptest.NewUnstartedServer(nil)}
	keys := keyfetch.New(keyfetch.Config{TrustedHosts: []string{strings.TrimPrefix(origin, "http://")}, AllowHTTP: true, AllowPrivateNetworks: true})
	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{rc.Listener.Addr().String()},
		RequireBound: true, RequiredComponents: []string{"@method", "@path", "content-digest"},
		OnResult: func(r middleware.Result) {
			if r.Err != nil {
				rc.mu.Lock()
				rc.refusals++
				rc.mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	rc.Config.Handler = v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agent, _ := middleware.AgentFrom(r.Context())
		var ev webhook.Event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.events = append(rc.events, ev)
		rc.agents = append(rc.agents, agent)
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	rc.Start()
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) got() ([]webhook.Event, []middleware.Agent, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]webhook.Event(nil), rc.events...), append([]middleware.Agent(nil), rc.agents...), rc.refusals
}

// TestDeliveredEventsVerify: events posted by a Deliverer with the
// service key verify at a receiver using the middleware that trusts the
// service host alone (which fetches the service's key directory), arrive
// as sent, and name the service as their signature agent; the same post
// signed by another key is refused 401, and the Deliverer reports it.
func TestDeliveredEventsVerify(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		origin, sdb := service(t, db)
		key, err := sdb.EnsureServiceKey(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		rc := newReceiver(t, origin)
		d := &webhook.Deliverer{Client: keyfetch.NewClient(true, 5*time.Second), Key: key, Origin: origin}
		at := time.Date(2026, 12, 10, 14, 0, 0, 0, time.UTC)
		sent := []webhook.Event{
			{ID: "0123456789abcdef0123456789abcdef", Type: "agent.disabled", Agent: "agent-0123456789abcdef01234567", Reason: "abuse report #12", Time: at},
			{ID: "fedcba9876543210fedcba9876543210", Type: "key.revoked", Agent: "agent-0123456789abcdef01234567", Kid: key.Public.Thumbprint, Reason: "leaked \"key\" <ops>", Time: at.Add(time.Second)},
		}
		for _, ev := range sent {
			if err := d.Post(context.Background(), rc.URL+"/hooks/agentid?token=s3cret", ev); err != nil {
				t.Fatalf("Post %s: %v", ev.ID, err)
			}
		}
		events, agents, refusals := rc.got()
		if len(events) != len(sent) || refusals != 0 {
			t.Fatalf("receiver got %d events, %d refusals; want %d, 0", len(events), refusals, len(sent))
		}
		for i := range sent {
			if events[i] != sent[i] {
				t.Errorf("event %d = %+v, want %+v", i, events[i], sent[i])
			}
			if a := agents[i]; a.ID != origin || a.Thumbprint != key.Public.Thumbprint || !a.Bound {
				t.Errorf("event %d verified as %s by %s (bound %v), want %s by the service key", i, a.ID, a.Thumbprint, a.Bound, origin)
			}
		}

		forger := &webhook.Deliverer{Client: keyfetch.NewClient(true, 5*time.Second), Key: signertest.Key(0x66), Origin: origin}
		err = forger.Post(context.Background(), rc.URL+"/hooks/agentid?token=s3cret", sent[0])
		var we *webhook.Error
		if !errors.As(err, &we) || we.Status != http.StatusUnauthorized {
			t.Errorf("Post signed by another key: %v, want a *webhook.Error with status 401", err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error shows the URL's query: %v", err)
		}
		if events, _, refusals := rc.got(); len(events) != len(sent) || refusals != 1 {
			t.Errorf("after the forgery: %d events, %d refusals; want %d, 1", len(events), refusals, len(sent))
		}
	})
}

// TestPostRefusals: a receiver on a private address is not reached
// unless allowed; a redirect is not followed; a receiver that never
// answers is given up after Timeout; an endless answer is read to a bound.
// No error shows the secret in the URL's query.
func TestPostRefusals(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x51)
	hits := map[string]*atomic.Int64{}
	for _, name := range []string{"ok", "redirect", "slow", "endless", "fail"} {
		hits[name] = new(atomic.Int64)
	}
	count := func(name string) int64 { return hits[name].Load() }
	hit := func(name string) { hits[name].Add(1) }
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { hit("ok"); w.WriteHeader(http.StatusAccepted) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		hit("redirect")
		http.Redirect(w, r, "/ok", http.StatusTemporaryRedirect)
	})
	release := make(chan struct{})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		hit("slow")
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	mux.HandleFunc("/endless", func(w http.ResponseWriter, r *http.Request) {
		hit("endless")
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, 32<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) { hit("fail"); http.Error(w, "secret stack trace", 500) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before Close, which waits for the handlers
	ev := webhook.Event{ID: "0123456789abcdef0123456789abcdef", Type: "agent.enabled", Agent: "agent-0123456789abcdef01234567", Time: time.Now().UTC()}
	post := func(allowPrivate bool, timeout time.Duration, path string) error {
		d := &webhook.Deliverer{Client: keyfetch.NewClient(allowPrivate, timeout), Key: key, Origin: "https://agentid.example", Timeout: timeout}
		err := d.Post(context.Background(), srv.URL+path+"?token=s3cret", ev)
		if err != nil && (strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "stack trace")) {
			t.Errorf("%s: the error shows the URL's query or the answer: %v", path, err)
		}
		return err
	}

	if err := post(false, 2*time.Second, "/ok"); !errors.Is(err, keyfetch.ErrPrivateAddress) || count("ok") != 0 {
		t.Errorf("to 127.0.0.1 without allowPrivate: %v, %d hits; want ErrPrivateAddress, 0", err, count("ok"))
	}
	if err := post(true, 2*time.Second, "/ok"); err != nil || count("ok") != 1 {
		t.Errorf("with allowPrivate: %v, %d hits; want nil, 1", err, count("ok"))
	}
	var we *webhook.Error
	if err := post(true, 2*time.Second, "/redirect"); !errors.As(err, &we) || we.Status != http.StatusTemporaryRedirect || count("ok") != 1 {
		t.Errorf("redirect: %v, /ok hit %d times; want a 307 error and 1", err, count("ok"))
	}
	if err := post(true, 2*time.Second, "/fail"); !errors.As(err, &we) || we.Status != 500 {
		t.Errorf("500: %v, want a 500 error", err)
	}
	start := time.Now()
	if err := post(true, 300*time.Millisecond, "/slow"); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("slow receiver: %v after %v, want a deadline within the timeout", err, time.Since(start))
	}
	start = time.Now()
	if err := post(true, 5*time.Second, "/endless"); err != nil || time.Since(start) > 3*time.Second {
		t.Errorf("endless answer: %v after %v, want nil at once (the body read to a bound)", err, time.Since(start))
	}
}

// TestEventJSON: the body has exactly the documented members, kid and
// reason present even when empty.
func TestEventJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(webhook.Event{ID: "a", Type: "agent.enabled", Agent: "agent-x", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"a","type":"agent.enabled","agent":"agent-x","kid":"","reason":"","time":"2026-01-02T03:04:05Z"}`; string(b) != want {
		t.Errorf("JSON = %s, want %s", b, want)
	}
}
