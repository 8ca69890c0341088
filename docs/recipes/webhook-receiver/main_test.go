package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// syncBuffer is the receiver's stdout.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) events(t *testing.T) []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []event
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var ev event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("receiver printed %q: %v", line, err)
		}
		out = append(out, ev)
	}
	return out
}

// TestReceiverVerifiesEveryEvent runs this recipe's receiver against a
// reference server delivering to it (refserver.Open with a webhook), on
// SQLite and PostgreSQL: every change made on the database (a
// registration, a disable with a reason, a key revocation) reaches it,
// verified against the service's key directory, in order; a post not
// signed by the service key is refused with 401.
func TestReceiverVerifiesEveryEvent(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			databaseURL := b.URL(t)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			origin := "http://localhost:" + strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:")

			var out syncBuffer
			rcv := httptest.NewUnstartedServer(nil)
			h, err := newReceiver(origin, rcv.Listener.Addr().String(), &out)
			if err != nil {
				t.Fatal(err)
			}
			rcv.Config.Handler = h
			rcv.Start()
			t.Cleanup(rcv.Close)

			in, err := refserver.Open(context.Background(), refserver.Options{DatabaseURL: databaseURL, Listener: ln, Hostname: origin,
				Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})), Migrate: true, Webhooks: []string{rcv.URL + "/agentid-events"}, WebhookAllowPrivate: true, WebhookTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- in.Serve(ctx) }()
			t.Cleanup(func() {
				stop()
				<-served
			})

			db, err := store.Open(context.Background(), databaseURL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			uid := "agent-0123456789abcdef01234567"
			key := signertest.Key(7)
			octx := store.WithActor(context.Background(), "operator:test")
			if err := db.CreateAgent(octx, store.NewAgent{UID: uid, Kid: key.KeyID(), JWK: key.Public.JWK.MarshalPublic(), Now: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := db.SetAgentDisabled(octx, uid, true, "abuse report #12"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := db.RevokeKey(octx, uid, key.KeyID(), "key leaked"); err != nil {
				t.Fatal(err)
			}
			want := []event{
				{Type: store.ActionRegister, Agent: uid, Kid: key.KeyID()},
				{Type: store.ActionDisable, Agent: uid, Reason: "abuse report #12"},
				{Type: store.ActionKeyRevoke, Agent: uid, Kid: key.KeyID(), Reason: "key leaked"},
			}
			deadline := time.Now().Add(15 * time.Second)
			for len(out.events(t)) < len(want) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			got := out.events(t)
			if len(got) != len(want) {
				t.Fatalf("the receiver printed %d events, want %d: %+v", len(got), len(want), got)
			}
			for i, w := range want {
				g := got[i]
				if g.Type != w.Type || g.Agent != w.Agent || g.Kid != w.Kid || g.Reason != w.Reason || len(g.ID) != 32 || g.Time == "" {
					t.Errorf("event %d = %+v, want %+v with an id and a time", i, g, w)
				}
			}

			// A post signed by any other key is refused, and not printed.
			body := []byte(`{"id":"0123456789abcdef0123456789abcdef","type":"agent.enabled","agent":"` + uid + `"}`)
			req, _ := http.NewRequest(http.MethodPost, rcv.URL+"/agentid-events", bytes.NewReader(body))
			if err := signer.Sign(req, signertest.Key(9), signer.Options{Components: signer.WriteComponents, SignatureAgent: origin}); err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized || len(out.events(t)) != len(want) {
				t.Errorf("a forged event: %d, %d events printed; want 401 and %d", res.StatusCode, len(out.events(t)), len(want))
			}
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
