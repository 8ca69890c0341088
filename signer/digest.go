package signer

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
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
	return nil, fmt.Errorf("%w: %q", errDigestUnsupported, alg)
}

// ContentDigest returns the Content-Digest field value for body with alg
// "sha-256" or "sha-512", e.g. `sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:`.
func ContentDigest(body []byte, alg string) (string, error) {
	d, err := digest(alg, body)
	if err != nil {
		return "", err
	}
	b := append([]byte(alg), '=')
	b, _ = appendBare(b, bytesItem(d))
	return string(b), nil
}

// VerifyContentDigest checks body against a Content-Digest field. Every
// sha-256 and sha-512 member must match and at least one must be present;
// other algorithms are ignored.
func VerifyContentDigest(values []string, body []byte) error {
	ms, err := parseDict(joinLines(values), 0)
	if err != nil {
		return fmt.Errorf("%w: Content-Digest does not parse: %v", errDigestMismatch, err)
	}
	checked := 0
	for i := range ms {
		alg := ms[i].key
		if alg != "sha-256" && alg != "sha-512" {
			continue
		}
		if ms[i].inner || ms[i].item.val.kind != kindBytes {
			return fmt.Errorf("%w: %s is not a byte sequence", errDigestMismatch, alg)
		}
		got, _ := digest(alg, body)
		if subtle.ConstantTimeCompare(got, ms[i].item.val.bytes()) != 1 {
			return fmt.Errorf("%w: %s", errDigestMismatch, alg)
		}
		checked++
	}
	if checked == 0 {
		return errDigestUnsupported
	}
	return nil
}

// ReadBody reads r's body, at most limit bytes (no limit if limit <= 0),
// and puts back a reader over the bytes read so the body can be read again
// (GetBody too). The original body is closed. A body longer than limit gives
// ErrBodyTooLarge and leaves an empty body. The buffer is sized from
// Content-Length, so a well-described body is read with one allocation.
func ReadBody(r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	defer r.Body.Close()
	size := int64(512)
	if n := r.ContentLength; n >= 0 && (limit <= 0 || n < limit) && n < 64<<20 {
		size = n + 1 // room to see EOF without growing
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if limit > 0 && int64(len(buf)) > limit {
			r.Body = http.NoBody
			return nil, ErrBodyTooLarge
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			r.Body = http.NoBody
			return nil, fmt.Errorf("signer: read body: %w", err)
		}
	}
	rb := &restoredBody{}
	rb.Reset(buf)
	r.Body = rb
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	r.ContentLength = int64(len(buf))
	return buf, nil
}

// restoredBody is a body put back after reading.
type restoredBody struct{ bytes.Reader }

func (*restoredBody) Close() error { return nil }
