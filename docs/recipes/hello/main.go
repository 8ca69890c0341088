// Command hello is the README walkthrough's service: a net/http server
// behind the verification middleware, trusting the agents of a local
// agentid server. Unsigned requests pass (Optional mode) and are greeted
// as such; a bad signature is refused.
//
//	go run ./docs/recipes/hello -listen 127.0.0.1:8000
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8000", "address to listen on")
	flag.Parse()
	keys := keyfetch.New(keyfetch.Config{
		TrustedHosts:         []string{"*.localhost:*"}, // the agents of http://localhost:3000
		AllowHTTP:            true,                      // local development only
		AllowPrivateNetworks: true,                      // local development only
	})
	v, err := middleware.New(middleware.Config{
		Keys: keys,
		Mode: middleware.Optional,
		// This service's own address, and the proxy's in front of it
		// (which forwards the Host the agent signed for).
		Authorities: []string{"127.0.0.1:8000", "127.0.0.1:8080"},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if agent, ok := middleware.AgentFrom(r.Context()); ok {
			fmt.Fprintf(w, "hello %s (verified by the Go middleware; key %s)\n", agent.UID, agent.KeyID)
			return
		}
		fmt.Fprintln(w, "hello, unverified visitor")
	})
	log.Printf("hello service listening on http://%s", *listen)
	log.Fatal(http.ListenAndServe(*listen, v.Middleware(mux)))
}
