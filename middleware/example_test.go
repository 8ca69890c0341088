package middleware_test

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// Example wraps a plain http.ServeMux with the middleware and calls it with
// a client whose signer.Transport signs every request. The agent's key is
// known out of band, so a StaticKeys source stands in for keyfetch.
func Example() {
	const agent = "https://agent-0123456789abcdef01234567.agentid.example"
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)))

	keys := middleware.NewStaticKeys()
	keys.Add(agent, key.Public)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /whoami", func(w http.ResponseWriter, r *http.Request) {
		a, _ := middleware.AgentFrom(r.Context())
		fmt.Fprintf(w, "hello %s (bound=%v)", a.UID, a.Bound)
	})
	srv := httptest.NewServer(nil)
	defer srv.Close()
	// Authorities: the host this server answers for (here its loopback
	// address); a signature made for any other host is refused (421).
	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{srv.Listener.Addr().String()}})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv.Config.Handler = v.Middleware(mux)

	client := &http.Client{Transport: &signer.Transport{
		Key:     key,
		Options: signer.Options{SignatureAgent: agent, Standards: true},
	}}
	for _, c := range []*http.Client{client, http.DefaultClient} {
		resp, err := c.Get(srv.URL + "/whoami")
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s\n", resp.StatusCode, bytes.TrimSpace(body))
	}
	// Output:
	// 200 hello agent-0123456789abcdef01234567 (bound=true)
	// 401 {"error":{"status":401,"code":"missing_signature","message":"the request is not signed: Signature and Signature-Input are required"}}
}
