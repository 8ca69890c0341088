package signer

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/dunglas/httpsfv"
)

// Content-Digest errors (RFC 9530).
var (
	ErrDigestMismatch    = errors.New("signer: content digest mismatch")
	ErrDigestUnsupported = errors.New("signer: no supported content digest algorithm")
)

func digest(alg string, body []byte) ([]byte, error) {
	switch alg {
	case "sha-256":
		s := sha256.Sum256(body)
		return s[:], nil
	case "sha-512":
		s := sha512.Sum512(body)
		return s[:], nil
	}
	return nil, fmt.Errorf("%w: %q", ErrDigestUnsupported, alg)
}

// ContentDigest returns the Content-Digest field value for body with alg
// "sha-256" or "sha-512", e.g. `sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:`.
func ContentDigest(body []byte, alg string) (string, error) {
	d, err := digest(alg, body)
	if err != nil {
		return "", err
	}
	dict := httpsfv.NewDictionary()
	dict.Add(alg, httpsfv.Item{Value: d, Params: httpsfv.NewParams()})
	return httpsfv.Marshal(dict)
}

// VerifyContentDigest checks body against a Content-Digest field. Every
// sha-256 and sha-512 member must match and at least one must be present;
// other algorithms are ignored.
func VerifyContentDigest(values []string, body []byte) error {
	d, err := httpsfv.UnmarshalDictionary(values)
	if err != nil {
		return fmt.Errorf("%w: Content-Digest does not parse: %v", ErrDigestMismatch, err)
	}
	checked := 0
	for _, alg := range d.Names() {
		if alg != "sha-256" && alg != "sha-512" {
			continue
		}
		m, _ := d.Get(alg)
		it, ok := m.(httpsfv.Item)
		if !ok {
			return fmt.Errorf("%w: %s is not a byte sequence", ErrDigestMismatch, alg)
		}
		want, ok := it.Value.([]byte)
		if !ok {
			return fmt.Errorf("%w: %s is not a byte sequence", ErrDigestMismatch, alg)
		}
		got, _ := digest(alg, body)
		if subtle.ConstantTimeCompare(got, want) != 1 {
			return fmt.Errorf("%w: %s", ErrDigestMismatch, alg)
		}
		checked++
	}
	if checked == 0 {
		return ErrDigestUnsupported
	}
	return nil
}

// ErrBodyTooLarge is returned by ReadBody when the body exceeds the limit.
var ErrBodyTooLarge = errors.New("signer: body too large")

// ReadBody reads r's body up to limit bytes (no limit if limit <= 0) and
// restores it so it can be read again. The original body is closed.
func ReadBody(r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	var src io.Reader = r.Body
	if limit > 0 {
		src = io.LimitReader(r.Body, limit+1)
	}
	b, err := io.ReadAll(src)
	r.Body.Close()
	if err != nil {
		r.Body = http.NoBody
		return nil, fmt.Errorf("signer: read body: %w", err)
	}
	if limit > 0 && int64(len(b)) > limit {
		r.Body = http.NoBody
		return nil, ErrBodyTooLarge
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r.ContentLength = int64(len(b))
	return b, nil
}
