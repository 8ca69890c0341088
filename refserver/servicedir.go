package refserver

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// The service's own key directory, at signer.DirectoryPath on the service
// host: the public part of the key the service signs its change events
// with (store.EnsureServiceKey), so that a receiver verifying them with
// the middleware fetches it as it fetches an agent's, by the
// Signature-Agent the events carry (the service's origin). The response is
// signed by that key over the service host and the body, as agents sign
// theirs, within a window of serviceDirWindow that starts at a multiple
// of it: Ed25519 signatures are deterministic, so every instance serves
// the same bytes and the same ETag within a window. Before the key exists
// (no event was ever signed) the directory is an empty key set, unsigned:
// a GET, which anyone may send, never creates it.

// serviceDirWindow is the step of the service directory signature's
// created; it is valid for two steps, so a response fetched at the end
// of a window can be cached for a full step.
const serviceDirWindow = time.Hour

// serviceDirKey is the cache key of the service's directory among the
// agents' (s.dirs): no uid is empty.
const serviceDirKey = ""

// serviceDirectory is GET/HEAD /.well-known/http-message-signatures-directory
// on the service host.
func (s *Server) serviceDirectory(w http.ResponseWriter, r *http.Request) error {
	if err := ownFormCheck(r); err != nil {
		return err
	}
	d, err := s.renderServiceDirectory(r.Context())
	if err != nil {
		return err
	}
	s.writeDirectory(w, r, &d)
	return nil
}

// renderServiceDirectory returns the service's directory, from the cache
// (for KeyCacheTTL) or rendered and signed anew.
func (s *Server) renderServiceDirectory(ctx context.Context) (dirEntry, error) {
	var gen uint64
	if s.dirs != nil {
		if d, ok := s.dirs.Get(serviceDirKey); ok {
			return d, nil
		}
		gen = s.dirs.Generation()
	}
	ch := s.dirGroup.DoChan(serviceDirKey, func() (any, error) {
		qctx, cancel := s.dbContext(context.WithoutCancel(ctx))
		defer cancel()
		key, err := s.db.ServiceKey(qctx)
		if errors.Is(err, store.ErrNoServiceKey) {
			return newDirEntry(nil), nil // not cached: the key may come at any time
		}
		if err != nil {
			return dirEntry{}, dbUnavailable(err)
		}
		d := newDirEntry([]signer.PublicKey{key.Public})
		created := s.cfg.Now().Truncate(serviceDirWindow)
		expires := created.Add(2 * serviceDirWindow)
		sig, err := signer.SignDirectory(key, s.service.Scheme, s.service.Host, d.body, created, expires)
		if err != nil {
			return dirEntry{}, err
		}
		d.sigs = []store.DirectorySignature{{Kid: key.Public.Thumbprint, BodyDigest: d.sum[:], Input: sig.Input,
			Value: sig.Value, CreatedAt: created.UTC(), ExpiresAt: expires.UTC()}}
		d.signed = d.headers(d.sigs)
		if s.dirs != nil {
			s.dirs.AddIfGeneration(serviceDirKey, d, gen)
		}
		return d, nil
	})
	select {
	case res := <-ch:
		d, _ := res.Val.(dirEntry)
		return d, res.Err
	case <-ctx.Done():
		return dirEntry{}, dbUnavailable(ctx.Err())
	}
}
