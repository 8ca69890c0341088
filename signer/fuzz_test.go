package signer_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/dunglas/httpsfv"
)

// The fuzz targets run over their seeds with every `go test`; CI also runs
// each for a bounded time (.ci/run). Seeds: the published vectors plus
// malformed cases (unterminated strings, huge integers, duplicate labels,
// bad base64, empty input, nested lists, non-ASCII).

// fuzzRequest is the request the parsed signatures are applied to.
func fuzzRequest() *http.Request {
	r, _ := http.NewRequest("POST", "https://example.com/foo?param=Value&Pet=dog&a=1&a=2", strings.NewReader(`{"hello": "world"}`))
	r.Header.Set("Date", "Tue, 20 Apr 2021 02:07:55 GMT")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Content-Digest", "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:")
	r.Header.Set("Content-Length", "18")
	r.Header.Set("Signature-Agent", `sig1="https://agent-x.example", agent2="https://signature-agent.test"`)
	r.Header.Set("Example-Dict", "a=(1 2), b=3, c=4;aa=bb, d=(5 6);valid")
	return r
}

func FuzzParseSignatures(f *testing.F) {
	v := loadVectors(f)
	f.Add(v.B26.SignatureInput, v.B26.Signature)
	for _, vr := range []signertest.VectorRequest{v.E21.Request, v.E22.Request} {
		f.Add(vr.Headers["Signature-Input"], vr.Headers["Signature"])
	}
	key := signertest.Key(30)
	for _, opts := range []signer.Options{
		{Created: fixedCreated, Nonce: fixedNonce},
		{Created: fixedCreated, Components: signer.WriteComponents, SignatureAgent: "https://agent-x.example", Standards: true},
		{Created: fixedCreated, Components: []string{"@method", "@target-uri", "@request-target", "@scheme", "@query", `"@query-param";name="Pet"`, `"example-dict";key="c"`, `"example-dict";sf`}},
	} {
		r := fuzzRequest()
		if err := signer.Sign(r, key, opts); err != nil {
			f.Fatal(err)
		}
		f.Add(r.Header.Get("Signature-Input"), r.Header.Get("Signature"))
	}
	const sig = "sig1=:" + "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:"
	for _, in := range []string{
		``,
		`sig1=("@authority";created=1`,   // unterminated inner list
		`sig1=("@authority);created=1`,   // unterminated string
		`sig1=("@authority");keyid="abc`, // unterminated parameter string
		`sig1=("@authority");created=99999999999999999999`,      // huge integer
		`sig1=("@authority");created=999999999999999`,           // largest sf integer
		`sig1=("@authority");created=-1;expires=-99`,            // negative
		`sig1=("@authority");created=1.5`,                       // decimal
		`sig1=("@authority"), sig1=("@method")`,                 // duplicate labels
		`sig1=("@method" "@method");created=1`,                  // duplicate components
		`sig1=(("@authority"));created=1`,                       // nested list
		`sig1=("@authörity");created=1`,                         // non-ASCII
		`sig1=("@authority");keyid="k\u00e9y"`,                  // non-ASCII escape
		`sig1=("@authority");keyid=1;alg=?1;nonce=:AAAA:;tag=t`, // wrong parameter types
		`sig1=("@query-param";name="Pet" "example-dict";key="a" "example-dict";sf);created=1`,
		`sig1=("@query-param";name="a");created=1`, // repeated query parameter
		`sig1=("signature-agent";key="agent2" "signature-agent");created=1;keyid="k";alg="ed25519";expires=2;nonce="n";tag="web-bot-auth"`,
		`sig1=("x";bs "y";req "z";tr "@foo")`,
		`sig1=("@authority");created=1, sig2=("@method");created=2`,
		`sig1=();created=1`,
		`sig1=("@authority" ` + strings.Repeat(`"x-a" `, 40) + `)`,
		`sig1="@authority"`,
		`sig1`,
		`SIG1=("@authority")`,
		`sig1=("@authority");created=1;created=2`,
		"sig1=(\"@authority\")\t;created=1",
	} {
		f.Add(in, sig)
	}
	for _, s := range []string{
		``,
		`sig1=:not base64!:`,
		`sig1=:AAAA`,
		`sig1=:AAA=:`,
		`sig1=:` + strings.Repeat("A", 200) + `:`,
		`sig1=AAAA`,
		`sig1=("a")`,
		`sig1=:AAAA:, sig1=:BBBB:`,
		`sig1=:AAAA:, sig2=:BBBB:`,
		`sig1=:AAAA:;p=1`,
	} {
		f.Add(`sig1=("@authority");created=1;keyid="k"`, s)
	}

	f.Fuzz(func(t *testing.T, input, signature string) {
		sigs, err := signer.ParseSignatures([]string{input}, []string{signature})
		if err != nil {
			return
		}
		dict, err := httpsfv.UnmarshalDictionary([]string{input})
		if err != nil {
			t.Fatalf("ParseSignatures accepted %q, which httpsfv rejects: %v", input, err)
		}
		for _, s := range sigs {
			sp, spErr := s.SignatureParams()
			// @signature-params is the parsed inner list, serialized as httpsfv would.
			m, ok := dict.Get(s.Label)
			if !ok {
				t.Fatalf("label %q not in Signature-Input %q", s.Label, input)
			}
			want, wantErr := httpsfv.Marshal(m)
			if (spErr != nil) != (wantErr != nil) || sp != want {
				t.Fatalf("SignatureParams = %q, %v; httpsfv.Marshal = %q, %v", sp, spErr, want, wantErr)
			}
			base, err := s.Base(fuzzRequest())
			if err == nil && !bytes.HasSuffix(base, []byte("\"@signature-params\": "+sp)) {
				t.Fatalf("base does not end with the signature params:\n%s", base)
			}
			if spErr != nil {
				continue
			}
			// The serialized form parses back to the same signature.
			again, err := signer.ParseSignatures([]string{s.Label + "=" + sp}, []string{s.Label + "=:" + base64.StdEncoding.EncodeToString(s.Value) + ":"})
			if err != nil {
				t.Fatalf("re-parsing %s=%s: %v", s.Label, sp, err)
			}
			a := again[0]
			if a.Params != s.Params || !bytes.Equal(a.Value, s.Value) || len(a.Components) != len(s.Components) {
				t.Fatalf("re-parsed %+v, want %+v", a, s)
			}
			for i := range a.Components {
				if a.Components[i].ID() != s.Components[i].ID() {
					t.Fatalf("component %d = %s after re-parsing, want %s", i, a.Components[i].ID(), s.Components[i].ID())
				}
			}
			if again2, _ := a.SignatureParams(); again2 != sp {
				t.Fatalf("params not stable: %q then %q", sp, again2)
			}
		}
	})
}

func FuzzParseSignatureAgent(f *testing.F) {
	v := loadVectors(f)
	f.Add(v.E21.Request.Headers["Signature-Agent"], "")
	f.Add(v.E22.Request.Headers["Signature-Agent"], "")
	for _, s := range []string{
		`sig1="https://agent-x.example"`,
		`sig1="http://agent-0123.localhost:3000"`,
		`sig1=agent-x.api.vestauth.com`,
		`"https://signature-agent.test"`,
		`sig1="https://a.example", sig2="https://b.example"`,
		`sig1="https://a.example", sig1="https://b.example"`, // duplicate labels
		`sig1="HTTPS://A.Example:443/"`,
		`sig1="https://[::1]:443"`,
		`sig1="https://[::1"`,
		`sig1="https://a.example:99999999"`,
		`sig1="https://a.example:"`,
		`sig1="https://a.example/path"`,
		`sig1="https://u@a.example"`,
		`sig1="ftp://a.example"`,
		`sig1="https://"`,
		`sig1="https://`,     // unterminated string
		`"https://a.example`, // unterminated legacy string
		``,
		` `,
		`sig1=("https://a" "https://b")`, // inner list
		`sig1=1`,
		`sig1=99999999999999999999`, // huge integer
		`sig1=:aHR0cHM6Ly9hLmV4YW1wbGU=:`,
		`sig1=:bad base64!:`,
		`sig1="https://exämple.com"`,
		`sig1="https://xn--exmple-cua.com"`,
		`"https://a.example";p=1`,
		`"https://a.example", "https://b.example"`,
		`sig1="https://a..b"`,
		`sig1="https://a%2eb"`,
		`sig1="https://a\\b"`,
		`sig1=?1`,
	} {
		f.Add(s, "")
	}
	f.Add(`sig1="https://a.example"`, `sig2="https://b.example"`)
	f.Add(`"https://a.example"`, `"https://b.example"`)

	f.Fuzz(func(t *testing.T, a, b string) {
		values := []string{a}
		if b != "" {
			values = append(values, b)
		}
		sa, err := signer.ParseSignatureAgent(values)
		if err != nil {
			return
		}
		var ms []signer.AgentMember
		if m := sa.Members(); len(m) == 1 {
			ms = append(ms, m[0])
		} else if sa.Item() {
			t.Fatalf("item field %q has no single member", values)
		}
		if d, err := httpsfv.UnmarshalDictionary(values); err == nil && !sa.Item() {
			for _, name := range d.Names() {
				m, ok := sa.Member(name)
				if !ok {
					t.Fatalf("member %q of %q missing", name, values)
				}
				ms = append(ms, m)
			}
		}
		for _, m := range ms {
			ks, err := m.KeySet()
			if err != nil {
				continue
			}
			if !strings.HasPrefix(ks.URL, "https://") && !strings.HasPrefix(ks.URL, "http://") {
				t.Fatalf("key set %q of %q has no http(s) scheme", ks.URL, values)
			}
			if !strings.HasPrefix(ks.URL, ks.Origin()) || !strings.HasPrefix(ks.Identity(), ks.Origin()) {
				t.Fatalf("key set %q: origin %q, identity %q", ks.URL, ks.Origin(), ks.Identity())
			}
			// What Sign writes (the identity) resolves to the same key set.
			again, err := signer.ParseKeySetURL(ks.Identity())
			if err != nil || (m.Type == "" && again != ks) {
				t.Fatalf("ParseKeySetURL(%q) = %+v, %v; want %+v", ks.Identity(), again, err, ks)
			}
			sa2, err := signer.ParseSignatureAgent([]string{`sig1="` + ks.Identity() + `"`})
			if err != nil {
				t.Fatalf("re-parsing %q: %v", ks.Identity(), err)
			}
			if got, _ := sa2.Member("sig1"); got.Value != ks.Identity() {
				t.Fatalf("re-parsed %q, want %q", got.Value, ks.Identity())
			}
		}
	})
}

func FuzzSignatureBase(f *testing.F) {
	v := loadVectors(f)
	b26 := v.B26.SignatureInput[strings.Index(v.B26.SignatureInput, "=")+1:]
	e21 := v.E21.Request.Headers["Signature-Input"]
	e21 = e21[strings.Index(e21, "=")+1:]
	f.Add("POST", "/foo?param=Value&Pet=dog", "example.com", "Date", "Tue, 20 Apr 2021 02:07:55 GMT", b26)
	f.Add("GET", "https://example.com/path/to/resource", "example.com", "Signature-Agent", `agent2="https://signature-agent.test"`, e21)
	f.Add("GET", "/", "Example.COM:443", "X", "y", `("@authority" "@target-uri" "@scheme" "@request-target" "@path" "@query");created=1`)
	f.Add("GET", "/p?a=1&a=2&b=%C3%A7&c=+", "h", "X", "y", `("@query-param";name="a" "@query-param";name="b");created=1`)
	f.Add("GET", "/p?b=%C3%A7", "h", "X-Dict", "a=1, b=(x y);p", `("x-dict";key="b" "x-dict";sf "x-dict")`)
	f.Add("GET", "/", "h", "X-Dict", "a=(", `("x-dict";key="a")`)
	f.Add("GET", "/", "h", "X-Dict", "café", `("x-dict")`)
	f.Add("GET", "/", "exämple.com", "X", "y", `("@authority" "host")`)
	f.Add("GET", "/", "h", "X", "a\x00b\r\nc", `("x")`)
	for _, p := range []string{
		``,
		`(`,
		`("@authority"`,           // unterminated list
		`("@authority);created=1`, // unterminated string
		`("@authority");created=99999999999999999999`, // huge integer
		`("@method" "@method");created=1`,             // duplicate
		`(("@authority"))`,                            // nested
		`("@authority"), ("@method")`,                 // two lists
		`"@authority"`,                                // not a list
		`("@query-param")`,                            // missing name
		`("@foo" "x";bs)`,                             // unknown
		`("@authority");nonce=:bad base64!:`,          // bad base64
		`("@authority");keyid="` + strings.Repeat("k", 300) + `"`,
		`("@authority");tag="a\"b\\c";alg=ed25519;x=?0`, // escapes, token, boolean
		`("@authority");created=1.5;expires=-1`,
		`("ünï")`,
	} {
		f.Add("GET", "/", "h", "X", "y", p)
	}

	f.Fuzz(func(t *testing.T, method, target, host, name, value, params string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		r := &http.Request{Method: method, URL: u, Host: host, Header: http.Header{}}
		r.Header.Add(name, value)
		r.Header.Set("Content-Digest", "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:")
		base, err := signer.SignatureBase(r, params)
		if err != nil {
			return
		}
		lines := strings.Split(string(base), "\n")
		last := lines[len(lines)-1]
		if !strings.HasPrefix(last, `"@signature-params": (`) {
			t.Fatalf("last line %q is not @signature-params", last)
		}
		for _, l := range lines[:len(lines)-1] {
			if !strings.HasPrefix(l, `"`) || !strings.Contains(l, ": ") {
				t.Fatalf("line %q is not a component line", l)
			}
		}
		for i := 0; i < len(base); i++ {
			if c := base[i]; (c < 0x20 || c > 0x7e) && c != '\n' && c != '\t' {
				t.Fatalf("base has byte %#x at %d:\n%q", c, i, base)
			}
		}
		// Rebuilding is deterministic.
		again, err := signer.SignatureBase(r, params)
		if err != nil || !bytes.Equal(again, base) {
			t.Fatalf("second build = %q, %v; want %q", again, err, base)
		}
	})
}

func FuzzParsePrivateJWK(f *testing.F) {
	v := loadVectors(f)
	f.Add([]byte(v.Key.JWK))
	k := signertest.Key(31)
	f.Add(k.MarshalPrivateJWK())
	f.Add(k.Public.JWK.MarshalPublic())
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `"d"`, `{"kty":"OKP"}`, strings.Repeat("[", 10000),
		`{"kty":"OKP","crv":"Ed25519","x":"` + vecX + `","d":"` + vecD + `"} trailing`,
		`{"kty":"OKP","crv":"Ed25519","x":"` + vecX + `","d":"` + vecD + `=="}`,
		`{"kty":"OKP","crv":"Ed25519","x":"` + vecX + `","d":"` + vecD[:40] + `"}`,
		`{"kty":"OKP","crv":"Ed25519","x":"` + vecX + `","d":"` + vecD + `","d":"` + vecD[:40] + `"}`,
		`{"kty":"OKP","crv":"Ed25519","x":"` + vecX + `","d":1e999}`,
		`{"kty":"OKP","crv":"Ed25519","x":"` + vecX + `","d":"\u00e9` + vecD[1:] + `"}`,
		`{"kty":"OKP","crv":"Ed25519","x":"` + b64(31) + `","d":"` + vecD + `"}`,
		`{"kty":"` + vecD + `","crv":"Ed25519","x":"` + vecX + `","d":"` + vecD + `"}`,
		"{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"\xff\xfe\",\"d\":\"x\"}",
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		pub, pubErr := signer.ParsePublicJWK(data)
		priv, err := signer.ParsePrivateJWK(data)
		var members map[string]any
		_ = json.Unmarshal(data, &members)
		if pubErr == nil {
			if _, hasD := members["d"]; hasD {
				t.Fatalf("ParsePublicJWK accepted a JWK with d: %s", data)
			}
			again, err := signer.ParsePublicJWK(pub.JWK.MarshalPublic())
			if err != nil || again.JWK != pub.JWK {
				t.Fatalf("public JWK does not round-trip: %+v, %v", again.JWK, err)
			}
		}
		if err != nil {
			// Error text never reveals d, unless the same text is also in a
			// public member (which the error may name).
			d, _ := members["d"].(string)
			if len(d) >= 8 && strings.Contains(err.Error(), d[:8]) {
				leaked := true
				for _, m := range []string{"kty", "crv", "x", "kid"} {
					if s, _ := members[m].(string); strings.Contains(s, d[:8]) {
						leaked = false
					}
				}
				if leaked {
					t.Fatalf("error %q reveals d", err)
				}
			}
			return
		}
		if priv.KeyID() != signer.Thumbprint(priv.Public.Key) {
			t.Fatalf("kid %s is not the thumbprint", priv.KeyID())
		}
		again, err := signer.ParsePrivateJWK(priv.MarshalPrivateJWK())
		if err != nil || !again.Key.Equal(priv.Key) {
			t.Fatalf("private JWK does not round-trip: %v", err)
		}
		if s := priv.String() + fmt.Sprintf("%#v", priv) + priv.JWK().String(); strings.Contains(s, priv.JWK().D) {
			t.Fatalf("printing reveals d: %s", s)
		}
	})
}
