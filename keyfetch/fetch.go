package keyfetch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/redact"
)

// Media types accepted beside signer.DirectoryMediaType.
const (
	// JWKSetMediaType is the media type of a JSON Web Key Set (RFC 7517).
	JWKSetMediaType = "application/jwk-set+json"
	// JSONMediaType is accepted for every kind of key set.
	JSONMediaType = "application/json"
)

// FetchError reports that a key set could not be fetched or was unusable:
// network failure, timeout, a non-public address, an unexpected status
// (including any redirect), a wrong media type, an oversized or malformed
// body, a card whose jwks_uri is refused. The middleware answers 503
// key_fetch_failed for it (401 untrusted_signature_agent when it wraps
// signer.ErrUntrustedAgent: a card naming a jwks_uri outside the trust
// policy).
type FetchError struct {
	// URL is the URL whose fetch failed: the key-set URL, or the jwks_uri
	// a card named. Error shows it as redact.URL writes it.
	URL string
	// StatusCode is the HTTP status received, or 0 if no response arrived.
	StatusCode int
	// Err is the cause.
	Err error
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("keyfetch: fetch %s: %v", redact.URL(e.URL), e.Err)
}

// Unwrap returns the cause, so errors.Is(err, context.DeadlineExceeded) and
// errors.Is(err, ErrPrivateAddress) work.
func (e *FetchError) Unwrap() error { return e.Err }

// response is what one GET learned.
type response struct {
	url          string
	status       int
	contentType  string
	cacheControl string
	etag         string
	lastModified string
	ttl          time.Duration
	ttlNote      string // why ttl is what it is, for Check
	ttlExact     bool   // ttl is the response's own max-age
	notModified  bool   // 304 answering our If-None-Match
	notFound     bool   // 404 or 410: the document does not exist
	body         []byte
	resp         *http.Response // headers and our request (body consumed)
}

// accepts reports whether media type mt is accepted for a document of the
// given kind.
func accepts(kind signer.KeySetKind, mt string) bool {
	switch kind {
	case signer.KindCard:
		return mt == JSONMediaType || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
	default:
		return mt == signer.DirectoryMediaType || mt == JWKSetMediaType || mt == JSONMediaType
	}
}

// acceptHeader is the Accept header sent for a document of the given kind.
func acceptHeader(kind signer.KeySetKind) string {
	switch kind {
	case signer.KindCard:
		return JSONMediaType
	case signer.KindJWKS:
		return JWKSetMediaType + ", " + JSONMediaType + ";q=0.9"
	}
	return signer.DirectoryMediaType + ", " + JWKSetMediaType + ";q=0.9, " + JSONMediaType + ";q=0.8"
}

// mediaTypes lists the accepted media types of a kind, for messages.
func mediaTypes(kind signer.KeySetKind) string {
	if kind == signer.KindCard {
		return JSONMediaType + " or application/*+json"
	}
	return signer.DirectoryMediaType + ", " + JWKSetMediaType + " or " + JSONMediaType
}

// fetch GETs rawURL, a document of the given kind, exactly as given (no
// redirect followed). With etag non-empty it revalidates. The trust policy
// is checked first: an error wrapping signer.ErrUntrustedAgent means
// nothing was sent. Other failures are a *FetchError; the response is
// non-nil whenever one arrived.
func (f *Fetcher) fetch(ctx context.Context, rawURL, etag string, kind signer.KeySetKind) (*response, error) {
	return f.fetchDoc(ctx, docRequest{
		url: rawURL, etag: etag, accept: acceptHeader(kind), maxBytes: f.cfg.MaxBodyBytes,
		accepts: func(mt string) bool { return accepts(kind, mt) }, mediaTypes: mediaTypes(kind),
	})
}

// docRequest is one GET of a document: a key set, a card, a registry list.
type docRequest struct {
	url                string
	etag, lastModified string // validators of a conditional request
	accept             string // the Accept header
	accepts            func(mediaType string) bool
	mediaTypes         string // the accepted media types, for messages
	maxBytes           int64
	// listed: a registry lists the URL, which vouches for its host; the
	// URL must still be well formed and its scheme allowed.
	listed bool
}

// fetchDoc GETs d.url exactly as given (no redirect followed), under the
// trust policy (see fetch).
func (f *Fetcher) fetchDoc(ctx context.Context, d docRequest) (*response, error) {
	rawURL := d.url
	check := f.TrustURL
	if d.listed {
		check = func(u string) error { _, err := f.checkURL(u); return err }
	}
	if err := check(rawURL); err != nil {
		return nil, err
	}
	fail := func(status int, err error) error {
		// net/http's errors repeat the URL without its password only:
		// the cause shows it as the error does.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			ue.URL = redact.URL(ue.URL)
		}
		return &FetchError{URL: rawURL, StatusCode: status, Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fail(0, err)
	}
	host := strings.ToLower(req.URL.Host)
	if !f.acquireHost(host) {
		return nil, fail(0, fmt.Errorf("%w: %s already has %d (MaxFetchesPerHost)", ErrHostBusy, signer.Truncate(host), f.cfg.MaxFetchesPerHost))
	}
	defer f.releaseHost(host)
	req.Header.Set("Accept", d.accept)
	req.Header.Set("User-Agent", f.cfg.UserAgent)
	if d.etag != "" {
		req.Header.Set("If-None-Match", d.etag)
	}
	if d.lastModified != "" {
		req.Header.Set("If-Modified-Since", d.lastModified)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		// Prefer the context's error (deadline) over the transport's wording.
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %v", cerr, err)
		}
		return nil, fail(0, err)
	}
	defer resp.Body.Close()
	r := &response{
		url:          rawURL,
		status:       resp.StatusCode,
		contentType:  resp.Header.Get("Content-Type"),
		cacheControl: strings.Join(resp.Header.Values("Cache-Control"), ", "),
		etag:         resp.Header.Get("ETag"),
		lastModified: resp.Header.Get("Last-Modified"),
		resp:         resp,
	}
	r.ttl, r.ttlNote, r.ttlExact = f.ttl(r.cacheControl)
	discard := func() { _, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) }
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotModified && (d.etag != "" || d.lastModified != ""):
		r.notModified = true
		discard()
		return r, nil
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		r.notFound = true
		discard()
		return r, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		discard()
		return r, fail(resp.StatusCode, fmt.Errorf("status %d: redirect to %q not followed", resp.StatusCode, signer.Truncate(resp.Header.Get("Location"))))
	default:
		discard()
		return r, fail(resp.StatusCode, fmt.Errorf("unexpected status %d", resp.StatusCode))
	}
	mt, _, err := mime.ParseMediaType(r.contentType)
	if err != nil || !d.accepts(mt) {
		discard()
		return r, fail(resp.StatusCode, fmt.Errorf("media type %q is not %s", signer.Truncate(r.contentType), d.mediaTypes))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, d.maxBytes+1))
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %v", cerr, err)
		}
		return r, fail(resp.StatusCode, fmt.Errorf("reading body: %w", err))
	}
	if int64(len(body)) > d.maxBytes {
		return r, fail(resp.StatusCode, fmt.Errorf("body exceeds %d bytes", d.maxBytes))
	}
	r.body = body
	return r, nil
}

// outcome is what resolving a key set learned, for the cache and for Check.
type outcome struct {
	doc           *response // the key-set URL's response (nil if none arrived)
	jwks          *response // the response of a card's jwks_uri (nil otherwise)
	jwksURL       string    // a card's jwks_uri
	kept          bool      // 304: the cached keys stay
	notFound      int       // 404 or 410: an authoritative empty set
	notFoundURL   string
	keys          []signer.PublicKey
	problems      []string // keys skipped, and why
	notes         []string // accepted but worth fixing, for Check
	ttl           time.Duration
	signed        bool     // the response holding the keys carries a directory signature
	verified      bool     // every directory signature of the responses verified
	authenticated bool     // a verified directory signature covers the keys' body (content-digest)
	signedBy      []string // thumbprints of the keys whose directory signatures verified
	card          *Card    // what a Signature Agent Card says of its agent (a 200 card)

	// signedUntil is, with RequireSignedDirectories, when the directory
	// signatures that vouch for the keys expire (the earliest, plus
	// Skew): the set is not used past it. Zero otherwise.
	signedUntil time.Time
}

// resolve fetches the key set set: its URL, and for a card that names its
// keys by jwks_uri, that URL too (one hop: a JWKS names no further URL).
// prev, when it holds a set, supplies the validators of conditional
// requests. The outcome is non-nil whenever a response arrived; the error
// is a *FetchError, or wraps signer.ErrUntrustedAgent when set.URL itself
// is refused.
func (f *Fetcher) resolve(ctx context.Context, set signer.KeySet, prev *entry) (*outcome, error) {
	o := &outcome{}
	var etag, prevJWKS, jwksETag string
	if prev != nil && prev.has && prev.notFound == 0 {
		etag, prevJWKS, jwksETag = prev.etag, prev.jwksURL, prev.jwksETag
	}
	r, err := f.fetch(ctx, set.URL, etag, set.Kind)
	if r == nil {
		return nil, err
	}
	o.doc, o.ttl = r, r.ttl
	if err != nil {
		return o, err
	}
	fail := func(r *response, err error) (*outcome, error) {
		return o, &FetchError{URL: r.url, StatusCode: r.status, Err: err}
	}
	if r.notFound {
		o.notFound, o.notFoundURL = r.status, r.url
		return o, nil
	}
	what := "directory"
	if set.Kind == signer.KindJWKS {
		what = "JWKS"
	}
	var doc []byte
	switch {
	case r.notModified && (set.Kind != signer.KindCard || prevJWKS == ""):
		o.kept = true
		o.jwksURL = prevJWKS
		return o, nil
	case r.notModified:
		o.jwksURL = prevJWKS
	case set.Kind == signer.KindCard:
		inline, c, err := parseCard(r.body, set.URL)
		if err != nil {
			return fail(r, err)
		}
		doc, o.jwksURL, what = inline, c.JWKSURI, `card "jwks"`
		c.URL, c.Fetched = set.URL, f.cfg.Now()
		o.card = &c
	default:
		doc = r.body
	}
	keysResp := r
	if o.jwksURL != "" {
		je := ""
		if o.jwksURL == prevJWKS {
			je = jwksETag
		}
		jr, err := f.fetch(ctx, o.jwksURL, je, signer.KindJWKS)
		if jr == nil {
			if fe := (*FetchError)(nil); errors.As(err, &fe) {
				return o, err
			}
			if ue := (*UntrustedError)(nil); errors.As(err, &ue) {
				ue.CardJWKS = true
			}
			return fail(r, fmt.Errorf("card jwks_uri: %w", err)) // refused by the trust policy
		}
		o.jwks = jr
		o.ttl = min(o.ttl, jr.ttl)
		if err != nil {
			return o, err
		}
		switch {
		case jr.notFound:
			o.notFound, o.notFoundURL = jr.status, jr.url
			return o, nil
		case jr.notModified:
			o.kept = true
			return o, nil
		}
		doc, keysResp, what = jr.body, jr, "JWKS"
	}
	o.keys, o.problems, err = parseKeySet(doc, f.cfg.MaxKeys, what)
	if err != nil {
		return fail(keysResp, err)
	}
	return o, f.signatures(o, keysResp)
}

// decodeOne decodes exactly one JSON value from body into v.
func decodeOne(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// parseKeySet decodes a key set {"keys":[JWK…]} (or, leniently, a document
// that is itself one JWK: a one-key set) and keeps the valid public keys
// signer.ParseKeySetJWK accepts, each kid once. The others are skipped and
// described in problems. It fails when the document is no such object or
// has more than maxKeys entries (the set is never truncated, so what is
// accepted does not depend on key order). what names the document in
// messages.
func parseKeySet(body []byte, maxKeys int, what string) (keys []signer.PublicKey, problems []string, err error) {
	var doc map[string]json.RawMessage
	if err := decodeOne(body, &doc); err != nil || doc == nil {
		if err == nil {
			err = errors.New("null")
		}
		return nil, nil, fmt.Errorf("%s is not a JSON object: %v", what, err)
	}
	var raws []json.RawMessage
	if k, ok := doc["keys"]; ok && string(k) != "null" {
		if err := json.Unmarshal(k, &raws); err != nil {
			return nil, nil, fmt.Errorf(`%s "keys" is not an array`, what)
		}
	} else if _, isJWK := doc["kty"]; isJWK {
		raws = []json.RawMessage{body}
	} else {
		return nil, nil, fmt.Errorf(`%s has no "keys" array`, what)
	}
	if len(raws) > maxKeys {
		return nil, nil, fmt.Errorf("%s has %d keys, more than the limit of %d", what, len(raws), maxKeys)
	}
	seen := make(map[string]int, len(raws))
	for i, raw := range raws {
		pk, err := signer.ParseKeySetJWK(raw)
		if err != nil {
			problems = append(problems, fmt.Sprintf("keys[%d] skipped: %v", i, err))
			continue
		}
		if j, dup := seen[pk.JWK.Kid]; dup {
			problems = append(problems, fmt.Sprintf("keys[%d] skipped: kid %q already names keys[%d]", i, signer.Truncate(pk.JWK.Kid), j))
			continue
		}
		seen[pk.JWK.Kid] = i
		keys = append(keys, pk)
	}
	return keys, problems, nil
}

// ttl derives a cache lifetime from Cache-Control: max-age clamped to
// [MinTTL, MaxTTL]; no-store or no-cache → MinTTL; absent or unusable →
// DefaultTTL. note says which, and exact whether d is the response's own
// max-age.
func (f *Fetcher) ttl(cc string) (d time.Duration, note string, exact bool) {
	c := &f.cfg
	maxAge, found := time.Duration(-1), false
	for dir := range strings.SplitSeq(cc, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(dir), "=")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "no-store", "no-cache":
			return c.MinTTL, fmt.Sprintf("Cache-Control %s: minimum %v", strings.ToLower(name), c.MinTTL), false
		case "max-age":
			found = true
			n, err := strconv.ParseInt(strings.Trim(strings.TrimSpace(val), `"`), 10, 64)
			if err == nil && n >= 0 && maxAge < 0 {
				maxAge = time.Duration(min(n, int64(100*365*24*3600))) * time.Second
			}
		}
	}
	switch {
	case maxAge < 0 && found:
		return c.DefaultTTL, fmt.Sprintf("unusable max-age: default %v", c.DefaultTTL), false
	case maxAge < 0:
		return c.DefaultTTL, fmt.Sprintf("no max-age: default %v", c.DefaultTTL), false
	case maxAge < c.MinTTL:
		return c.MinTTL, fmt.Sprintf("max-age %v raised to the minimum %v", maxAge, c.MinTTL), false
	case maxAge > c.MaxTTL:
		return c.MaxTTL, fmt.Sprintf("max-age %v lowered to the maximum %v", maxAge, c.MaxTTL), false
	}
	return maxAge, fmt.Sprintf("max-age %v", maxAge), true
}
