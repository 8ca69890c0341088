// Command webhook-receiver receives the change events an agentid server
// posts to its webhooks (idcli server start --webhook URL), verified by
// the middleware: only a POST signed by the service's own key, which the
// service host publishes at its well-known directory, gets through; any
// other is refused with 401. Events are deduplicated by id (delivery is at
// least once) and printed to stdout, one JSON object per line.
//
//	go run ./docs/recipes/webhook-receiver -service https://agentid.example -listen :8443 -authority hooks.example
//
// With an http:// service URL (local development) it allows plain http
// and private addresses for the key fetch.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"sync"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
)

func main() {
	service := flag.String("service", "http://localhost:3000", "the agentid server's URL (its HOSTNAME)")
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	authority := flag.String("authority", "", "the host[:port] of the webhook URL the server posts to (default: -listen)")
	flag.Parse()
	if *authority == "" {
		*authority = *listen
	}
	h, err := newReceiver(*service, *authority, os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("webhook receiver listening on %s, trusting %s", *listen, *service)
	log.Fatal(http.ListenAndServe(*listen, h))
}

// event is the body of a change event.
type event struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Agent  string `json:"agent"`
	Kid    string `json:"kid"`
	Reason string `json:"reason"`
	Time   string `json:"time"`
}

// newReceiver verifies that each POST is signed by the key of the agentid
// server at service, as sent to authority, and writes each new event to
// out. A real receiver keeps the ids it has seen in its database.
func newReceiver(service, authority string, out io.Writer) (http.Handler, error) {
	u, err := url.Parse(service)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("-service %q is not a URL", service)
	}
	local := u.Scheme == "http" // local development only
	keys := keyfetch.New(keyfetch.Config{
		TrustedHosts:         []string{u.Host}, // the service host alone, not its agents
		AllowHTTP:            local,
		AllowPrivateNetworks: local,
	})
	v, err := middleware.New(middleware.Config{
		Keys:               keys,
		Authorities:        []string{authority},
		RequireBound:       true,                                           // Signature-Agent is signed
		RequiredComponents: []string{"@method", "@path", "content-digest"}, // and the body
	})
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		var ev event
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&ev); err != nil || ev.ID == "" {
			http.Error(w, "not an event", http.StatusBadRequest)
			return
		}
		mu.Lock()
		dup := seen[ev.ID]
		seen[ev.ID] = true
		if !dup {
			b, _ := json.Marshal(ev)
			fmt.Fprintf(out, "%s\n", b)
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent) // a repeat is answered 2xx too, or it is sent again
	})
	return v.Middleware(h), nil
}
