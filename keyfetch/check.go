package keyfetch

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"

	"github.com/agentid/agentid/signer"
)

// Report describes one uncached fetch of a key set, for operators checking
// that their keys will be accepted (idcli directory check).
type Report struct {
	// URL is the key-set URL fetched.
	URL string
	// Kind is the format URL was read as; WellKnown reports that URL is an
	// origin's well-known directory, where keys are found by thumbprint only.
	Kind      signer.KeySetKind
	WellKnown bool
	// JWKSURI is the jwks_uri a Signature Agent Card named for its keys
	// (fetched too), "" otherwise.
	JWKSURI string
	// StatusCode is the HTTP status of URL, 0 if no response arrived.
	StatusCode int
	// ContentType, CacheControl and ETag are the response headers of URL.
	ContentType, CacheControl, ETag string
	// TTL is how long a Fetcher would cache this answer, and TTLNote why.
	TTL     time.Duration
	TTLNote string
	// Keys are the keys that passed validation, in document order. Each
	// has its algorithm (PublicKey.Algorithm), its published kid (JWK.Kid;
	// the thumbprint when none was published) and its RFC 7638 Thumbprint.
	Keys []signer.PublicKey
	// Signed reports that the response holding the keys carried a
	// signature tagged DirectorySignatureTag; Verified, that every such
	// signature (the card's own too, for a card naming a jwks_uri)
	// verified. SignedBy lists the thumbprints of the keys whose directory
	// signatures verified. A signature that fails is a problem: the
	// response would not be used.
	Signed, Verified bool
	// Authenticated reports that a verified directory signature on the
	// response holding the keys covers content-digest, and that the
	// Content-Digest matches the body: the keys themselves are vouched
	// for, which RequireSignedDirectories requires.
	Authenticated bool
	SignedBy      []string
	// Problems make the key set (or some of its keys) unusable: the fetch
	// error, and each skipped key with the reason.
	Problems []string
	// Header and Body are the response holding the keys as it arrived (a
	// card's jwks_uri response for a card naming one), for tools that apply
	// other validators' rules to it; nil when none arrived.
	Header http.Header
	Body   []byte
	// Warnings are accepted but worth fixing: a generic media type, no
	// max-age, no ETag, a max-age outside the cache bounds, no keys, a kid
	// that verifiers ignore.
	Warnings []string
}

// OK reports whether the key set is fully usable: no problems.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// CheckKeySet fetches set without the cache (a card's jwks_uri too) and
// reports what a Fetcher would accept and why. The error wraps
// signer.ErrUntrustedAgent when set.URL is refused (nothing was fetched;
// the report is nil), or is the *FetchError also listed first in the
// report's Problems.
func (f *Fetcher) CheckKeySet(ctx context.Context, set signer.KeySet) (*Report, error) {
	if err := f.trustSet(set); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	o, ferr := f.resolve(ctx, set, nil)
	if o == nil && !errors.As(ferr, new(*FetchError)) {
		return nil, ferr
	}
	r := &Report{URL: set.URL, Kind: set.Kind, WellKnown: set.WellKnown}
	if o != nil && o.doc != nil {
		d := o.doc
		r.StatusCode, r.ContentType, r.CacheControl, r.ETag = d.status, d.contentType, d.cacheControl, d.etag
		r.TTL, r.TTLNote = o.ttl, d.ttlNote
		r.JWKSURI = o.jwksURL
		if o.jwks != nil && o.jwks.ttl < d.ttl {
			r.TTLNote = "jwks_uri " + o.jwks.ttlNote
		}
		r.Keys = o.keys
		if kr := o.jwks; kr != nil && kr.resp != nil {
			r.Header, r.Body = kr.resp.Header, kr.body
		} else if d.resp != nil {
			r.Header, r.Body = d.resp.Header, d.body
		}
		r.Signed, r.Verified, r.Authenticated, r.SignedBy = o.signed, o.verified, o.authenticated, o.signedBy
		r.Problems = append(r.Problems, o.problems...)
		r.Warnings = append(r.Warnings, o.notes...)
		if o.notFound != 0 {
			noun := map[signer.KeySetKind]string{signer.KindDirectory: "directory", signer.KindJWKS: "JWKS", signer.KindCard: "card"}[set.Kind]
			if o.notFoundURL != set.URL {
				noun = "JWKS"
			}
			ferr = &FetchError{URL: o.notFoundURL, StatusCode: o.notFound, Err: fmt.Errorf("status %d: no %s (lookups get unknown_key)", o.notFound, noun)}
		}
	}
	if ferr != nil {
		r.Problems = append([]string{ferr.Error()}, r.Problems...)
		return r, ferr
	}
	if mt, _, _ := mime.ParseMediaType(r.ContentType); set.Kind == signer.KindDirectory && mt != signer.DirectoryMediaType {
		r.Warnings = append(r.Warnings, fmt.Sprintf("media type %q accepted, but %q is the registered one", mt, signer.DirectoryMediaType))
	}
	for _, d := range []*response{o.doc, o.jwks} {
		if d == nil {
			continue
		}
		where := ""
		if d != o.doc {
			where = "jwks_uri " + d.url + ": "
		}
		if d.etag == "" {
			r.Warnings = append(r.Warnings, where+"no ETag: every refresh downloads the whole document")
		}
		if !d.ttlExact {
			r.Warnings = append(r.Warnings, where+"cache lifetime: "+d.ttlNote)
		}
	}
	if set.WellKnown {
		for _, k := range r.Keys {
			if k.JWK.Kid != k.Thumbprint {
				r.Warnings = append(r.Warnings, fmt.Sprintf("kid %q is not the RFC 7638 thumbprint of its key (%s): at a well-known directory a signature's keyid must be the thumbprint", signer.Truncate(k.JWK.Kid), k.Thumbprint))
			}
		}
	}
	if len(r.Keys) == 0 {
		r.Warnings = append(r.Warnings, "no usable keys")
	}
	return r, nil
}
