// Command httpfloor is the floor BenchmarkWhoamiServerCPU measures the
// reference server against: a net/http server, configured as `idcli server
// start` configures its own, that answers every request with a fixed 200
// JSON body the size of a /whoami answer and does nothing else: no
// verification, no database, no log. Under the same load, its CPU per
// request is what net/http and the kernel's loopback TCP cost before any
// work of ours.
//
//	httpfloor 127.0.0.1:PORT
package main

import (
	"fmt"
	"net/http"
	"os"
	"time"
)

// body is a /whoami answer's shape and size.
var body = []byte(`{"uid":"agent-0123456789abcdef01234567","kid":"poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U",` +
	`"public_jwk":{"kty":"OKP","crv":"Ed25519","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs","kid":"poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U"},` +
	`"well_known_url":"http://agent-0123456789abcdef01234567.localhost:3000/.well-known/http-message-signatures-directory"}` + "\n")

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: httpfloor HOST:PORT")
		os.Exit(2)
	}
	srv := &http.Server{
		Addr:              os.Args[1],
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h["Content-Type"] = []string{"application/json"}
			h["Cache-Control"] = []string{"no-store"}
			w.Write(body)
		}),
	}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "httpfloor:", err)
		os.Exit(1)
	}
}
