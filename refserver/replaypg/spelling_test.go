package replaypg_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/replaypg"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// TestOneSignatureAcrossInstances: two verifier instances, each with its
// own Store on one database, receive one captured request with its
// Signature-Agent respelled each time; it is accepted once, since every
// instance records the same replay key (the key's thumbprint and nonce).
// The capture is of the legacy shape, whose signature does not cover
// Signature-Agent: the protocol-01 default covers it, so no respelling of
// it verifies at all (checked last).
func TestOneSignatureAcrossInstances(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		migrated(t, db)
		const origin = "https://agent-0123456789abcdef01234567.agentid.example"
		key := signertest.Key(0x51)
		now := func() time.Time { return t0 }
		// Stands for an agent host serving the same key set at every URL.
		keys := middleware.KeySourceFunc(func(_ context.Context, set signer.KeySet, _ string) (signer.PublicKey, error) {
			if set.Origin() != origin {
				return signer.PublicKey{}, signer.ErrUntrustedAgent
			}
			return key.Public, nil
		})
		var vs []*middleware.Verifier
		for range 2 {
			v, err := middleware.New(middleware.Config{Keys: keys, Now: now, Authorities: []string{"api.example.com"},
				Replay: newStore(t, db, replaypg.Config{Now: now})})
			if err != nil {
				t.Fatal(err)
			}
			vs = append(vs, v)
		}
		captured := httptest.NewRequest(http.MethodGet, "https://api.example.com/things", nil)
		if err := signer.Sign(captured, key, signer.Options{SignatureAgent: origin, Now: now, Legacy: true}); err != nil {
			t.Fatal(err)
		}
		spellings := []string{
			`sig1="` + origin + `"`,
			`sig1="` + origin + `/?r=1"`,
			`sig1="` + origin + `";type=jwks_uri`,
			`sig1="` + origin + `/%2Ewell-known/http-message-signatures-directory"`,
		}
		accepted := 0
		for i, sa := range spellings {
			r := captured.Clone(context.Background())
			r.Header.Set("Signature-Agent", sa)
			_, err := vs[i%2].Verify(r)
			if err == nil {
				accepted++
			} else if e := middleware.AsError(err); e.Code != middleware.CodeReplayedNonce {
				t.Errorf("%s: %v, want replayed_nonce", sa, err)
			}
		}
		if accepted != 1 {
			t.Errorf("accepted %d times across two instances, want 1", accepted)
		}
		if n := count(t, db); n != 1 {
			t.Errorf("replay_nonces holds %d rows, want 1", n)
		}

		covered := httptest.NewRequest(http.MethodGet, "https://api.example.com/things", nil)
		if err := signer.Sign(covered, key, signer.Options{SignatureAgent: origin, Now: now}); err != nil {
			t.Fatal(err)
		}
		for i, sa := range spellings[1:] {
			r := covered.Clone(context.Background())
			r.Header.Set("Signature-Agent", sa)
			if _, err := vs[i%2].Verify(r); middleware.AsError(err) == nil || middleware.AsError(err).Code != middleware.CodeInvalidSignature {
				t.Errorf("covered member respelled as %s: %v, want invalid_signature", sa, err)
			}
		}
		if n := count(t, db); n != 1 {
			t.Errorf("after the respelled covered requests replay_nonces holds %d rows, want 1 (a refused signature records no nonce)", n)
		}
	})
}
