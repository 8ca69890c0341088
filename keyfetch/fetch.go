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
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/signer"
)

// JSONMediaType is accepted for a key directory beside
// signer.DirectoryMediaType.
const JSONMediaType = "application/json"

// FetchError reports that a key directory could not be fetched or was
// unusable: network failure, timeout, a non-public address, an unexpected
// status (including any redirect), a wrong media type, an oversized or
// malformed body. The middleware answers 503 key_fetch_failed for it.
type FetchError struct {
	// URL is the directory URL.
	URL string
	// StatusCode is the HTTP status received, or 0 if no response arrived.
	StatusCode int
	// Err is the cause.
	Err error
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("keyfetch: fetch %s: %v", e.URL, e.Err)
}

// Unwrap returns the cause, so errors.Is(err, context.DeadlineExceeded) and
// errors.Is(err, ErrPrivateAddress) work.
func (e *FetchError) Unwrap() error { return e.Err }

// result is everything one fetch learned, for the cache and for Check.
type result struct {
	status       int
	contentType  string
	cacheControl string
	etag         string
	ttl          time.Duration
	ttlNote      string // why ttl is what it is, for Check
	ttlExact     bool   // ttl is the directory's own max-age
	notModified  bool   // 304 answering our If-None-Match
	notFound     bool   // 404 or 410: the directory does not exist
	keys         []signer.PublicKey
	problems     []string // keys skipped, and why
}

// fetch GETs the directory at url. With etag non-empty it revalidates. It
// returns a *FetchError on failure; res is non-nil whenever a response arrived.
func (f *Fetcher) fetch(ctx context.Context, url, etag string) (*result, error) {
	fail := func(status int, err error) error { return &FetchError{URL: url, StatusCode: status, Err: err} }
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fail(0, err)
	}
	req.Header.Set("Accept", signer.DirectoryMediaType+", "+JSONMediaType+";q=0.9")
	req.Header.Set("User-Agent", f.cfg.UserAgent)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
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
	res := &result{
		status:       resp.StatusCode,
		contentType:  resp.Header.Get("Content-Type"),
		cacheControl: strings.Join(resp.Header.Values("Cache-Control"), ", "),
		etag:         resp.Header.Get("ETag"),
	}
	res.ttl, res.ttlNote = f.ttl(res.cacheControl)
	res.ttlExact = res.ttlNote == fmt.Sprintf("max-age %v", res.ttl)
	discard := func() { _, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) }
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotModified && etag != "":
		res.notModified = true
		discard()
		return res, nil
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		res.notFound = true
		discard()
		return res, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		discard()
		return res, fail(resp.StatusCode, fmt.Errorf("status %d: redirect to %q not followed", resp.StatusCode, truncate(resp.Header.Get("Location"))))
	default:
		discard()
		return res, fail(resp.StatusCode, fmt.Errorf("unexpected status %d", resp.StatusCode))
	}
	mt, _, err := mime.ParseMediaType(res.contentType)
	if err != nil || (mt != signer.DirectoryMediaType && mt != JSONMediaType) {
		discard()
		return res, fail(resp.StatusCode, fmt.Errorf("media type %q is not %s or %s", truncate(res.contentType), signer.DirectoryMediaType, JSONMediaType))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxBodyBytes+1))
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %v", cerr, err)
		}
		return res, fail(resp.StatusCode, fmt.Errorf("reading body: %w", err))
	}
	if int64(len(body)) > f.cfg.MaxBodyBytes {
		return res, fail(resp.StatusCode, fmt.Errorf("body exceeds %d bytes", f.cfg.MaxBodyBytes))
	}
	res.keys, res.problems, err = parseDirectory(body, f.cfg.MaxKeys)
	if err != nil {
		return res, fail(resp.StatusCode, err)
	}
	return res, nil
}

// parseDirectory decodes {"keys":[...]} and keeps the valid, public,
// Ed25519 keys whose kid (if any) is their RFC 7638 thumbprint. The others
// are skipped and described in problems. It fails when the document is not
// such an object or has more than maxKeys entries.
func parseDirectory(body []byte, maxKeys int) (keys []signer.PublicKey, problems []string, err error) {
	var doc struct {
		Keys json.RawMessage `json:"keys"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf("directory is not a JSON object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("trailing data after the directory object")
	}
	if len(doc.Keys) == 0 || string(doc.Keys) == "null" {
		return nil, nil, errors.New(`directory has no "keys" array`)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(doc.Keys, &raws); err != nil {
		return nil, nil, errors.New(`directory "keys" is not an array`)
	}
	if len(raws) > maxKeys {
		return nil, nil, fmt.Errorf("directory has %d keys, more than the limit of %d", len(raws), maxKeys)
	}
	seen := make(map[string]int, len(raws))
	for i, raw := range raws {
		pk, err := signer.ParsePublicJWK(raw)
		if err != nil {
			problems = append(problems, fmt.Sprintf("keys[%d] skipped: %v", i, err))
			continue
		}
		if j, dup := seen[pk.JWK.Kid]; dup {
			problems = append(problems, fmt.Sprintf("keys[%d] skipped: duplicate of keys[%d]", i, j))
			continue
		}
		seen[pk.JWK.Kid] = i
		keys = append(keys, pk)
	}
	return keys, problems, nil
}

// ttl derives a cache lifetime from Cache-Control: max-age clamped to
// [MinTTL, MaxTTL]; no-store or no-cache → MinTTL; absent or unusable →
// DefaultTTL.
func (f *Fetcher) ttl(cc string) (time.Duration, string) {
	c := &f.cfg
	maxAge, found := time.Duration(-1), false
	for d := range strings.SplitSeq(cc, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "no-store", "no-cache":
			return c.MinTTL, fmt.Sprintf("Cache-Control %s: minimum %v", strings.ToLower(name), c.MinTTL)
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
		return c.DefaultTTL, fmt.Sprintf("unusable max-age: default %v", c.DefaultTTL)
	case maxAge < 0:
		return c.DefaultTTL, fmt.Sprintf("no max-age: default %v", c.DefaultTTL)
	case maxAge < c.MinTTL:
		return c.MinTTL, fmt.Sprintf("max-age %v raised to the minimum %v", maxAge, c.MinTTL)
	case maxAge > c.MaxTTL:
		return c.MaxTTL, fmt.Sprintf("max-age %v lowered to the maximum %v", maxAge, c.MaxTTL)
	}
	return maxAge, fmt.Sprintf("max-age %v", maxAge)
}

func truncate(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}
