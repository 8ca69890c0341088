package keyfetch_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

func Example() {
	// An agent's key directory, here on a loopback test server.
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))).Public
	dir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", signer.DirectoryMediaType)
		w.Header().Set("Cache-Control", "max-age=60")
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []signer.JWK{key.JWK}})
	}))
	defer dir.Close()

	keys := keyfetch.New(keyfetch.Config{
		TrustedHosts: []string{"127.0.0.1:*"},
		// Both switches only because the test server is plain http on loopback.
		AllowHTTP:            true,
		AllowPrivateNetworks: true,
	})
	ctx := context.Background()

	// The middleware resolves each request's Signature-Agent to a key set.
	set, _ := signer.ParseKeySetURL(dir.URL)
	pk, err := keys.Key(ctx, set, key.JWK.Kid)
	fmt.Println(pk.JWK.Kid, err)

	_, err = keys.Key(ctx, set, "no-such-kid")
	fmt.Println(errors.Is(err, signer.ErrUnknownKey))

	evil, _ := signer.ParseKeySetURL("https://agent-x.evil.example")
	_, err = keys.Key(ctx, evil, key.JWK.Kid)
	fmt.Println(errors.Is(err, signer.ErrUntrustedAgent))
	// Output:
	// 9ZP03Nu8GrXPAUkbKNxHOKBzxPX83SShgFkRNK-f2lw <nil>
	// true
	// true
}

// A Signature-Agent member with a type names a JWKS or a Signature Agent
// Card instead of a directory: resolve it with AgentMember.KeySet. Away
// from a well-known directory a key is found by its kid.
func ExampleFetcher_Key_card() {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))).Public
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/agent/card.json":
			fmt.Fprintf(w, `{"client_name":"Example Agent","jwks_uri":%q}`, "http://"+r.Host+"/agent/jwks.json")
		case "/agent/jwks.json":
			fmt.Fprintf(w, `{"keys":[{"kty":"OKP","crv":"Ed25519","x":%q,"kid":"2026-01"}]}`, key.JWK.X)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	keys := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"127.0.0.1:*"}, AllowHTTP: true, AllowPrivateNetworks: true})
	sa, _ := signer.ParseSignatureAgent([]string{`sig1="` + srv.URL + `/agent/card.json";type=cimd`})
	m, _ := sa.Member("sig1")
	set, _ := m.KeySet()
	pk, err := keys.Key(context.Background(), set, "2026-01")
	fmt.Println(set.Kind, pk.Thumbprint == key.Thumbprint, err)
	// Output:
	// cimd true <nil>
}
