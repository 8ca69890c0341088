package keyfetch

import (
	"context"
	"fmt"
	"mime"
	"time"

	"github.com/agentid/agentid/signer"
)

// Report describes one uncached fetch of a key directory, for operators
// checking that their directory will be accepted (idcli directory check).
type Report struct {
	// URL is the directory URL.
	URL string
	// StatusCode is the HTTP status, 0 if no response arrived.
	StatusCode int
	// ContentType, CacheControl and ETag are the response headers.
	ContentType, CacheControl, ETag string
	// TTL is how long a Fetcher would cache this answer, and TTLNote why.
	TTL     time.Duration
	TTLNote string
	// Keys are the keys that passed validation, in directory order.
	Keys []signer.PublicKey
	// Problems make the directory (or some of its keys) unusable: the fetch
	// error, and each skipped key with the reason.
	Problems []string
	// Warnings are accepted but worth fixing: a generic media type, no
	// max-age, no ETag, a max-age outside the cache bounds, no keys.
	Warnings []string
}

// OK reports whether the directory is fully usable: no problems.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Check fetches agent's directory without the cache and reports what a
// Fetcher would accept and why. The error wraps signer.ErrUntrustedAgent
// (nothing was fetched; the report is nil) or is the *FetchError also listed
// in the report's Problems.
func (f *Fetcher) Check(ctx context.Context, agent string) (*Report, error) {
	u, err := f.DirectoryURL(agent)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	res, ferr := f.fetch(ctx, u, "")
	r := &Report{URL: u}
	if res != nil {
		r.StatusCode, r.ContentType, r.CacheControl, r.ETag = res.status, res.contentType, res.cacheControl, res.etag
		r.TTL, r.TTLNote = res.ttl, res.ttlNote
		r.Keys = res.keys
		r.Problems = append(r.Problems, res.problems...)
		if res.notFound {
			ferr = &FetchError{URL: u, StatusCode: res.status, Err: fmt.Errorf("status %d: no directory (lookups get unknown_key)", res.status)}
		}
	}
	if ferr != nil {
		r.Problems = append([]string{ferr.Error()}, r.Problems...)
		return r, ferr
	}
	if mt, _, _ := mime.ParseMediaType(r.ContentType); mt != signer.DirectoryMediaType {
		r.Warnings = append(r.Warnings, fmt.Sprintf("media type %q accepted, but %q is the registered one", mt, signer.DirectoryMediaType))
	}
	if r.ETag == "" {
		r.Warnings = append(r.Warnings, "no ETag: every refresh downloads the whole directory")
	}
	if !res.ttlExact {
		r.Warnings = append(r.Warnings, "cache lifetime: "+res.ttlNote)
	}
	if len(r.Keys) == 0 {
		r.Warnings = append(r.Warnings, "no usable keys")
	}
	return r, nil
}
