package refserver

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/base64"
	"errors"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// health is GET / : liveness, no database access.
func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]string{"service": "agentid", "status": "ok", "version": s.cfg.Version})
}

// ready is GET /readyz: 200 when the database answers within 2 s (or
// DBTimeout if shorter), else 503 database_unavailable.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) error {
	timeout := 2 * time.Second
	if s.cfg.DBTimeout < timeout {
		timeout = s.cfg.DBTimeout
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	if err := s.db.Ping(ctx); err != nil {
		return dbUnavailable(err)
	}
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// dirEntry is a rendered key directory: the body, its ETag and
// Content-Digest, and the agent's unexpired signatures over that body
// (when it handed any over). The body is hashed once, by newDirEntry:
// the ETag, the Content-Digest, the body_digest its signatures are stored
// and looked up under, the Content-Digest they are verified over and the
// ETag of the signed directory all come from that one hash.
type dirEntry struct {
	body   []byte
	sum    [sha256.Size]byte // SHA-256 of body
	after  []byte            // the SHA-256 state after body (MarshalBinary), for the signed ETag
	etag   string
	digest string // Content-Digest of body
	sigs   []store.DirectorySignature
	signed servedSignatures // sigs as header values
}

// directoryMaxAge is how long a client may cache a key directory (an
// unsigned one, or one whose signatures outlive it), and
// directoryCacheControl says so.
const (
	directoryMaxAge       = 60 * time.Second
	directoryCacheControl = "max-age=60"
)

// directory is GET/HEAD /.well-known/http-message-signatures-directory on
// <uid>.<service host>: the agent's active keys (none while it is
// disabled), with the signatures the agent made over this very response
// (Signature, Signature-Input, and the Content-Digest they cover), those
// not yet expired only. Clients may cache it for directoryMaxAge, never
// past the earliest expires of the signatures served (max-age counts the
// whole seconds left before it, 0 in the last one), so no cache keeps a
// signed answer after its signature has expired. Rendered directories are
// reused for KeyCacheTTL; a rotation or a refresh of the signatures
// through this instance drops its copy at once.
func (s *Server) directory(w http.ResponseWriter, r *http.Request) error {
	_, uid := s.classify(r)
	d, err := s.renderDirectory(r.Context(), uid)
	if err != nil {
		return err
	}
	s.writeDirectory(w, r, &d)
	return nil
}

// writeDirectory answers r with the key directory d: its body, or 304
// when If-None-Match holds its ETag, with the headers every key directory
// of the server has (see directory).
func (s *Server) writeDirectory(w http.ResponseWriter, r *http.Request, d *dirEntry) {
	h := w.Header()
	cacheControl, etag := directoryCacheControl, d.etag
	now := s.cfg.Now()
	if sig, ok := d.unexpired(now); ok {
		etag = sig.etag
		h.Set("Signature-Input", sig.input)
		h.Set("Signature", sig.signature)
		if left := sig.expires.Sub(now); left < directoryMaxAge {
			cacheControl = "max-age=" + strconv.FormatInt(int64(left/time.Second), 10)
		}
	}
	// A 304 renews a cached copy as a 200 would: it carries the same
	// Cache-Control.
	h.Set("Cache-Control", cacheControl)
	h.Set("ETag", etag)
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Expose-Headers", "ETag, Content-Digest, Signature, Signature-Input")
	h.Set("X-Content-Type-Options", "nosniff")
	if etagMatches(r.Header.Values("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", signer.DirectoryMediaType)
	h.Set("Content-Digest", d.digest)
	h.Set("Content-Length", strconv.Itoa(len(d.body)))
	w.WriteHeader(http.StatusOK)
	w.Write(d.body)
}

// unexpired returns the signatures of d that have not expired at now, as
// header values; ok is false when none is left (the directory is then
// served unsigned: an expired signature is never served).
func (d *dirEntry) unexpired(now time.Time) (servedSignatures, bool) {
	if len(d.sigs) == 0 {
		return servedSignatures{}, false
	}
	if now.Before(d.signed.expires) {
		return d.signed, true
	}
	live := make([]store.DirectorySignature, 0, len(d.sigs))
	for _, r := range d.sigs {
		if now.Before(r.ExpiresAt) {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return servedSignatures{}, false
	}
	return d.headers(live), true
}

// renderDirectory returns uid's directory from the cache or the database;
// concurrent misses for one uid share one query.
func (s *Server) renderDirectory(ctx context.Context, uid string) (dirEntry, error) {
	var gen uint64
	if s.dirs != nil {
		if d, ok := s.dirs.Get(uid); ok {
			return d, nil
		}
		gen = s.dirs.Generation() // a rotation meanwhile keeps the result out
	}
	ch := s.dirGroup.DoChan(uid, func() (any, error) {
		qctx, cancel := s.dbContext(context.WithoutCancel(ctx))
		defer cancel()
		keys, err := s.directoryKeys(qctx, uid)
		if err != nil {
			return dirEntry{}, err
		}
		d := newDirEntry(keys)
		if d.sigs, err = s.db.DirectorySignatures(qctx, uid, d.sum[:], s.cfg.Now(), MaxDirectorySignatures); err != nil {
			return dirEntry{}, dbUnavailable(err)
		}
		if len(d.sigs) > 0 {
			d.signed = d.headers(d.sigs)
		}
		if s.dirs != nil {
			s.dirs.AddIfGeneration(uid, d, gen)
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

// newDirEntry renders the directory of keys (no signatures), hashing the
// body once.
func newDirEntry(keys []signer.PublicKey) dirEntry {
	jwks := make([]signer.JWK, len(keys))
	for i, k := range keys {
		jwks[i] = k.JWK
	}
	d := dirEntry{body: signer.DirectoryBody(jwks)}
	h := sha256.New()
	h.Write(d.body)
	h.Sum(d.sum[:0])
	d.after, _ = h.(encoding.BinaryMarshaler).MarshalBinary()
	d.etag = etagOf(d.sum[:])
	// signer.ContentDigest(body, signer.DirectoryDigestAlg) from the sum.
	d.digest = signer.DirectoryDigestAlg + "=:" + base64.StdEncoding.EncodeToString(d.sum[:]) + ":"
	return d
}

// etagOf is the ETag of a representation whose SHA-256 is sum.
func etagOf(sum []byte) string {
	return `"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`
}

// hashAfterBody returns a SHA-256 hash that has read d.body, resumed from
// the state newDirEntry kept rather than by reading the body again.
func (d *dirEntry) hashAfterBody() hash.Hash {
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(d.after); err != nil {
		// No kept state (a dirEntry not made by newDirEntry).
		h.Reset()
		h.Write(d.body)
	}
	return h
}

// directoryPreflight answers CORS preflight requests for the directory.
func (s *Server) directoryPreflight(w http.ResponseWriter, r *http.Request) error {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "GET, HEAD")
	h.Set("Access-Control-Allow-Headers", "If-None-Match")
	h.Set("Access-Control-Max-Age", "86400")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// etagMatches implements If-None-Match's weak comparison (RFC 9110 §13.1.2).
func etagMatches(headers []string, etag string) bool {
	for _, h := range headers {
		for _, t := range strings.Split(h, ",") {
			t = strings.TrimSpace(t)
			if t == "*" || strings.TrimPrefix(t, "W/") == etag {
				return true
			}
		}
	}
	return false
}

// directoryKeys returns the keys uid's directory lists: its active public
// keys (oldest first), none while an operator has disabled it, or 404
// agent_not_found when the agent does not exist. A disabled agent's
// directory is an empty key set, as when its only key is revoked, and
// not a 404: a verifier keeps a key set it has through a 404, which is
// what an outage looks like, but drops it on an empty one, so disabling an
// agent reaches third parties as promptly as a revocation does.
func (s *Server) directoryKeys(ctx context.Context, uid string) ([]signer.PublicKey, error) {
	rows, err := s.db.DirectoryKeys(ctx, uid)
	if errors.Is(err, store.ErrNoSuchAgent) {
		return nil, middleware.Fail(CodeAgentNotFound, "agent %s is not registered", uid)
	}
	if err != nil {
		return nil, dbUnavailable(err)
	}
	return storedKeys(rows)
}

// storedKeys parses the stored JWKs of rows (see storedKey).
func storedKeys(rows []store.PublicJWK) ([]signer.PublicKey, error) {
	keys := make([]signer.PublicKey, 0, len(rows))
	for _, row := range rows {
		pk, err := storedKey(row)
		if err != nil {
			return nil, err
		}
		keys = append(keys, pk)
	}
	return keys, nil
}
