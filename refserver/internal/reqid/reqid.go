// Package reqid names the requests that change something, so that the
// audit trail, the response (X-Request-Id) and the operator's logs can
// be matched: an id is this process's random prefix and a counter,
// unique across instances without a round trip to anyone. A client's own
// X-Request-Id is never taken: the audit trail records ours.
package reqid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/agentid/agentid/refserver/store"
)

// Header is the response header carrying the id.
const Header = "X-Request-Id"

var (
	prefix = func() string {
		var b [6]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand panics first)
		return hex.EncodeToString(b[:])
	}()
	counter atomic.Uint64
)

// New returns a fresh request id.
func New() string {
	return prefix + "-" + strconv.FormatUint(counter.Add(1), 10)
}

// Name names the request r, which may change something: it sets a fresh
// id on the response and returns r with a context carrying it for the
// store's audit trail.
func Name(w http.ResponseWriter, r *http.Request) *http.Request {
	id := New()
	w.Header().Set(Header, id)
	return r.WithContext(store.WithRequestID(r.Context(), id))
}

// Change is Name for a request changing something on behalf of actor,
// known before the change: it returns the context carrying both.
func Change(w http.ResponseWriter, r *http.Request, actor string) context.Context {
	return store.WithActor(Name(w, r).Context(), actor)
}
