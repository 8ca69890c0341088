package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
)

func TestRegisterAndRotateKey(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	ctx := context.Background()
	key, next := fixedKey(20), fixedKey(21)

	reg, err := agent.Register(ctx, nil, svc.URL(), key)
	if err != nil {
		t.Fatal(err)
	}
	if !reg.IsNew || !signer.ValidUID(reg.UID) || reg.PublicJWK.Kid != key.KeyID() || reg.PublicJWK.D != "" {
		t.Fatalf("Register = %+v; want a new agent with kid %s and no d", reg, key.KeyID())
	}
	if want := svc.origin(reg.UID) + signer.DirectoryPath; reg.WellKnownURL != want {
		t.Errorf("WellKnownURL = %q, want %q", reg.WellKnownURL, want)
	}
	again, err := agent.Register(ctx, nil, svc.URL(), key)
	if err != nil || again.IsNew || again.UID != reg.UID {
		t.Fatalf("second Register = %+v, %v; want the same uid, IsNew false", again, err)
	}

	rot, err := agent.RotateKey(ctx, nil, svc.URL(), reg.UID, key, next)
	if err != nil {
		t.Fatal(err)
	}
	if rot.UID != reg.UID || rot.PublicJWK.Kid != next.KeyID() || rot.IsNew {
		t.Fatalf("RotateKey = %+v; want uid %s with kid %s", rot, reg.UID, next.KeyID())
	}
	whoami(t, agent.Credentials{UID: reg.UID, Key: next, Hostname: svc.URL()}, svc.URL(), http.StatusOK)
	whoami(t, agent.Credentials{UID: reg.UID, Key: key, Hostname: svc.URL()}, svc.URL(), http.StatusUnauthorized)

	// The old key can no longer rotate.
	_, err = agent.RotateKey(ctx, nil, svc.URL(), reg.UID, key, fixedKey(22))
	var se *agent.ServerError
	if !errors.As(err, &se) || se.Status != http.StatusUnauthorized {
		t.Errorf("RotateKey with the revoked key: %v; want a 401 ServerError", err)
	}
	// A uid that is not agent-<24 hex> is refused before any request.
	if _, err := agent.RotateKey(ctx, nil, svc.URL(), "agent-x", next, fixedKey(22)); !errors.Is(err, agent.ErrInvalid) {
		t.Errorf("RotateKey(uid agent-x) = %v; want ErrInvalid", err)
	}
}

func TestClientFixedTagAndNonce(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	ctx := context.Background()
	key := fixedKey(23)
	reg, err := agent.Register(ctx, nil, svc.URL(), key)
	if err != nil {
		t.Fatal(err)
	}
	c := &agent.Client{Nonce: "fixed-nonce"}
	if _, err := c.RotateKey(ctx, svc.URL(), reg.UID, key, fixedKey(24)); err != nil {
		t.Fatal(err)
	}
	svc.mu.Lock()
	last := svc.requests[len(svc.requests)-1]
	svc.mu.Unlock()
	sigs, err := signer.ParseSignatures(last.Header.Values("Signature-Input"), last.Header.Values("Signature"))
	if err != nil {
		t.Fatal(err)
	}
	if len(sigs) != 2 || sigs[0].Params.Nonce != "fixed-nonce" || sigs[1].Params.Nonce == "fixed-nonce" {
		t.Errorf("signatures = %+v; want sig1 with the fixed nonce and sig2 with its own", sigs)
	}
}

func TestRegisterAnswerIsHTML(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		ct, body string
	}{
		{"error page", http.StatusNotFound, "text/html; charset=utf-8", "<!DOCTYPE html>\n<html><head><title>Error</title></head><body><pre>Cannot POST /agents</pre></body></html>"},
		{"proxy page without a type", http.StatusBadGateway, "", "<html><body><h1>502 Bad Gateway</h1></body></html>"},
		{"welcome page with 200", http.StatusOK, "text/html", "<html><title>Welcome to nginx!</title></html>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.ct != "" {
					w.Header().Set("Content-Type", tt.ct)
				}
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			}))
			t.Cleanup(srv.Close)
			_, err := agent.Register(context.Background(), nil, srv.URL, fixedKey(25))
			var se *agent.ServerError
			if !errors.As(err, &se) || se.Status != tt.status {
				t.Fatalf("Register = %v; want a ServerError with status %d", err, tt.status)
			}
			for _, want := range []string{"HTML page", "is " + srv.URL + " an agentid service?", "AGENT_HOSTNAME"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "<html") {
				t.Errorf("error %q quotes the HTML", err)
			}
		})
	}
}
