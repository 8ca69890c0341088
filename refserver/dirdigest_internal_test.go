package refserver

import (
	"crypto/sha256"
	"encoding/base64"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestDirEntryOneHash: newDirEntry hashes the body once, and what it
// derives from that hash is what hashing the body again for each use
// gave: the ETag, the Content-Digest (signer.ContentDigest), the
// body_digest of stored signatures, and the ETag of the signed directory
// (the SHA-256 of the body, then each input and value), also when the
// kept state is missing.
func TestDirEntryOneHash(t *testing.T) {
	t.Parallel()
	var keys []signer.PublicKey
	for i := range 3 {
		keys = append(keys, signertest.Key(byte(0x70+i)).Public)
	}
	exp := time.Unix(1_900_000_000, 0).UTC()
	rows := []store.DirectorySignature{
		{Input: `("@authority";req "content-digest");created=1;tag="x"`, Value: []byte{1, 2, 3}, ExpiresAt: exp},
		{Input: `("@authority";req "content-digest");created=2;tag="y"`, Value: []byte{4, 5}, ExpiresAt: exp.Add(-time.Hour)},
	}
	for _, n := range []int{0, 1, 3} {
		d := newDirEntry(keys[:n])
		sum := sha256.Sum256(d.body)
		if d.sum != sum {
			t.Errorf("%d keys: sum %x, want %x", n, d.sum, sum)
		}
		if want := `"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`; d.etag != want {
			t.Errorf("%d keys: etag %s, want %s", n, d.etag, want)
		}
		if want, _ := signer.ContentDigest(d.body, signer.DirectoryDigestAlg); d.digest != want {
			t.Errorf("%d keys: Content-Digest %s, want %s", n, d.digest, want)
		}
		h := sha256.New()
		h.Write(d.body)
		for _, r := range rows {
			h.Write([]byte(r.Input))
			h.Write(r.Value)
		}
		want := `"` + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16]) + `"`
		got := d.headers(rows)
		if got.etag != want {
			t.Errorf("%d keys: signed etag %s, want %s", n, got.etag, want)
		}
		if !got.expires.Equal(exp.Add(-time.Hour)) {
			t.Errorf("%d keys: expires %v, want the earliest, %v", n, got.expires, exp.Add(-time.Hour))
		}
		// A second use resumes from the same kept state.
		if again := d.headers(rows); again.etag != want {
			t.Errorf("%d keys: second signed etag %s, want %s", n, again.etag, want)
		}
		bare := dirEntry{body: d.body}
		if got := bare.headers(rows).etag; got != want {
			t.Errorf("%d keys: signed etag without a kept state %s, want %s", n, got, want)
		}
	}
}
