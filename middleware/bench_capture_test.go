package middleware_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

// The benchmarks in this file measure what an attacker's requests cost
// the verifier, each against one valid verification (a request with a
// fresh nonce through a Verifier on a cached key) in the same run
// (benchtest.PairedPrepared): the x-valid metric is the ratio.

// validSide returns a verifier on a cached key (StaticKeys), its key, and
// the prepare and baseline functions of a paired benchmark: each block's
// requests are signed (fresh nonces) before it, outside the timed section.
func validSide(b *testing.B) (prepare func(start, end int), valid func(i int)) {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
	keys := middleware.NewStaticKeys()
	keys.Add(benchOrigin, key.Public)
	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: testAuthorities, Now: func() time.Time { return benchNow }})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*http.Request, ratioBlock)
	prepare = func(start, end int) {
		for i := start; i < end; i++ {
			reqs[i-start] = benchRequest(b, i, b.N, key, nil)
		}
	}
	valid = func(i int) {
		if _, err := v.Verify(reqs[i%ratioBlock]); err != nil {
			b.Fatal(err)
		}
	}
	return prepare, valid
}

// benchMulti returns a request carrying n signatures by key over
// @authority, each naming agent(j) in Signature-Agent; forged replaces the
// signature bytes.
func benchMulti(b *testing.B, key signer.PrivateKey, n int, nonce string, forged bool, agent func(j int) string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "https://api.example.com/v1/things", nil)
	var in, sv, sa []string
	for j := range n {
		label := fmt.Sprintf("s%d", j)
		one := httptest.NewRequest(http.MethodGet, "https://api.example.com/v1/things", nil)
		err := signer.Sign(one, key, signer.Options{Label: label, Nonce: fmt.Sprintf("%s-%d", nonce, j), Now: func() time.Time { return benchNow }})
		if err != nil {
			b.Fatal(err)
		}
		in = append(in, one.Header.Get("Signature-Input"))
		s := one.Header.Get("Signature")
		if forged {
			s = label + "=:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{byte(j + 1)}, 64)) + ":"
		}
		sv = append(sv, s)
		sa = append(sa, label+`="`+agent(j)+`"`)
	}
	r.Header["Signature-Input"] = []string{joinComma(in)}
	r.Header["Signature"] = []string{joinComma(sv)}
	r.Header["Signature-Agent"] = []string{joinComma(sa)}
	return r
}

func joinComma(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(x)
	}
	return b.String()
}

// BenchmarkForgedSignatures: eight Ed25519 signatures with random bytes
// against a cached key. At most two are checked, so the request costs
// about two verifications (the target is at most 2.5× one valid one).
func BenchmarkForgedSignatures(b *testing.B) {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
	keys := middleware.NewStaticKeys()
	keys.Add(benchOrigin, key.Public)
	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: testAuthorities, Now: func() time.Time { return benchNow }})
	if err != nil {
		b.Fatal(err)
	}
	forged := benchMulti(b, key, 8, "forged", true, func(int) string { return benchOrigin })
	prepare, valid := validSide(b)
	b.ReportAllocs()
	benchtest.PairedPrepared(b, ratioBlock, "valid", "8-forged", prepare, valid, func(int) {
		if _, err := v.Verify(forged); err == nil {
			b.Fatal("a forged request verified")
		}
	})
}

// BenchmarkUncachedKeySets: eight signatures naming eight key sets no
// request named before, on a trusted host (a real Fetcher over loopback).
// fetches/op counts the key-set fetches the host served: at most one per
// request.
func BenchmarkUncachedKeySets(b *testing.B) {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
	other := signertest.Key(99) // the key sets hold another key
	body := fmt.Sprintf(`{"keys":[%s]}`, other.Public.JWK.MarshalPublic())
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", signer.DirectoryMediaType)
		w.Write([]byte(body))
	}))
	defer srv.Close()
	v, err := middleware.New(middleware.Config{Keys: ksFetcher(srv, func() time.Time { return benchNow }), Authorities: testAuthorities, Now: func() time.Time { return benchNow }})
	if err != nil {
		b.Fatal(err)
	}
	prepareValid, valid := validSide(b)
	reqs := make([]*http.Request, ratioBlock)
	prepare := func(start, end int) {
		prepareValid(start, end)
		for i := start; i < end; i++ {
			reqs[i-start] = benchMulti(b, key, 8, fmt.Sprintf("u%d", i), false, func(j int) string {
				return fmt.Sprintf("%s/keys/%d-%d.json", srv.URL, i, j)
			})
		}
	}
	benchtest.PairedPrepared(b, ratioBlock, "valid", "8-uncached", prepare, valid, func(i int) {
		if _, err := v.Verify(reqs[i%ratioBlock]); err == nil {
			b.Fatal("verified with a key the key sets do not hold")
		}
	})
	b.ReportMetric(float64(hits.Load())/float64(b.N), "fetches/op")
}

// BenchmarkHugeRSAKeyRefused: the JWK a trusted host could publish to
// make each verification slow — a 48,000-bit modulus with exponent
// 2^31−1 — is refused from
// the encoded members, before any arithmetic on them: "parse" is that
// refusal (once per key-set fetch); "request" is a request signed in its
// name to a verifier whose Fetcher has fetched that key set (the set is
// cached, so no further fetch).
func BenchmarkHugeRSAKeyRefused(b *testing.B) {
	n := bytes.Repeat([]byte{0xa5}, 6000)
	n[0] |= 0x80
	n[len(n)-1] |= 1
	jwk := `{"kty":"RSA","e":"f____w","n":"` + base64.RawURLEncoding.EncodeToString(n) + `","kid":"huge"}`
	b.Run("parse", func(b *testing.B) {
		prepare, valid := validSide(b)
		benchtest.PairedPrepared(b, ratioBlock, "valid", "refuse-48000-bit", prepare, valid, func(int) {
			if _, err := signer.ParseKeySetJWK([]byte(jwk)); err == nil {
				b.Fatal("the 48,000-bit key was accepted")
			}
		})
	})
	b.Run("request", func(b *testing.B) {
		var hits atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "max-age=3600")
			w.Write([]byte(`{"keys":[` + jwk + `]}`))
		}))
		defer srv.Close()
		v, err := middleware.New(middleware.Config{Keys: ksFetcher(srv, func() time.Time { return benchNow }), Authorities: testAuthorities, Now: func() time.Time { return benchNow }})
		if err != nil {
			b.Fatal(err)
		}
		key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
		r := httptest.NewRequest(http.MethodGet, "https://api.example.com/v1/things", nil)
		err = signer.Sign(r, key, signer.Options{SignatureAgent: srv.URL + "/jwks.json", Now: func() time.Time { return benchNow }})
		if err != nil {
			b.Fatal(err)
		}
		r.Header.Set("Signature-Input", strings.Replace(r.Header.Get("Signature-Input"), `keyid="`+key.KeyID()+`";alg="ed25519"`, `keyid="huge";alg="rsa-pss-sha512"`, 1))
		if _, err := v.Verify(r); err == nil {
			b.Fatal("verified with the huge key")
		}
		prepare, valid := validSide(b)
		benchtest.PairedPrepared(b, ratioBlock, "valid", "refuse-request", prepare, valid, func(int) {
			if _, err := v.Verify(r); err == nil {
				b.Fatal("verified with the huge key")
			}
		})
		b.ReportMetric(float64(hits.Load()), "fetches-total")
	})
}
