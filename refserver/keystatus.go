package refserver

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/gorilla/mux"
)

// keyStatusCacheControl is how long a relying party may keep a key's
// status: half the key directory's max-age, so that one which checks the
// status learns of a revocation no later than one which refetches the
// directory.
const keyStatusCacheControl = "public, max-age=30"

// keyStatus is GET/HEAD /keys/{kid}/status on the service host, with no
// authentication: whether the key kid (its RFC 7638 thumbprint) of one of
// this service's agents is active, rotated away, revoked, or suspended
// (its agent disabled, pending or rejected), and since when it is
// revoked. It names no agent and nothing of other keys. The kid is
// checked, and a query or an escape in the path refused, before the
// database is read; a deleted agent's key is revoked for good
// (store.DB.KeyStatus), a kid never registered 404 not_found.
func (s *Server) keyStatus(w http.ResponseWriter, r *http.Request) error {
	if r.URL.RawQuery != "" || r.URL.ForceQuery || r.URL.RawPath != "" {
		return middleware.Fail(middleware.CodeInvalidRequest, "a key status has no query and no escapes: GET /keys/KID/status")
	}
	kid := mux.Vars(r)["kid"]
	if !store.ValidKid(kid) {
		return middleware.Fail(middleware.CodeInvalidRequest, "%q is not a key id: want its RFC 7638 thumbprint, 43 base64url characters", signer.Truncate(kid))
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	st, err := s.db.KeyStatus(ctx, kid)
	if errors.Is(err, store.ErrNoSuchKey) {
		return middleware.Fail(CodeNotFound, "no agent of this service holds the key %s", kid)
	}
	if err != nil {
		return dbUnavailable(err)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", keyStatusCacheControl)
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	w.Write(append(b, '\n'))
	return nil
}
