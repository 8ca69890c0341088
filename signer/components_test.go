package signer_test

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// clientRequest is a request as a client builds it (absolute URL, no TLS state).
func clientRequest(t testing.TB, method, rawURL string, headers ...string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

// serverRequest is a request as a server sees it: origin-form URL, Host from
// the Host header, TLS set only for https.
func serverRequest(t testing.TB, method, target, host string, https bool, headers ...string) *http.Request {
	t.Helper()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &http.Request{Method: method, URL: u, Host: host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	if https {
		r.TLS = &tls.ConnectionState{}
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

func TestComponentValues(t *testing.T) {
	t.Parallel()
	// RFC 9421 §2.2: POST /path?param=value HTTP/1.1, Host: www.example.com, over https.
	rfc := func(t testing.TB) *http.Request {
		return serverRequest(t, "POST", "/path?param=value", "www.example.com", true)
	}
	tests := []struct {
		name      string
		req       func(t testing.TB) *http.Request
		component string
		wantID    string
		want      string
	}{
		// Derived components, RFC 9421 §2.2.1–§2.2.7 examples.
		{"@method RFC", rfc, "@method", `"@method"`, "POST"},
		{"@target-uri RFC", rfc, "@target-uri", `"@target-uri"`, "https://www.example.com/path?param=value"},
		{"@authority RFC", rfc, "@authority", `"@authority"`, "www.example.com"},
		{"@scheme RFC https", rfc, "@scheme", `"@scheme"`, "https"},
		{"@request-target RFC", rfc, "@request-target", `"@request-target"`, "/path?param=value"},
		{"@path RFC", rfc, "@path", `"@path"`, "/path"},
		{"@query RFC", rfc, "@query", `"@query"`, "?param=value"},
		{"@query RFC encoded", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/path?param=value&foo=bar&baz=bat%2Dman", "www.example.com", true)
		}, "@query", `"@query"`, "?param=value&foo=bar&baz=bat%2Dman"},
		{"@query RFC no equals", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/path?queryString", "www.example.com", true)
		}, "@query", `"@query"`, "?queryString"},
		{"@query RFC none", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/path", "www.example.com", true)
		}, "@query", `"@query"`, "?"},
		{"@query empty", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://h.example/p?") }, "@query", `"@query"`, "?"},
		{"@scheme server http", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/", "www.example.com", false)
		}, "@scheme", `"@scheme"`, "http"},
		{"@scheme client https", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "HTTPS://h.example/") }, "@scheme", `"@scheme"`, "https"},
		{"@method case kept", func(t testing.TB) *http.Request { return clientRequest(t, "PATCH", "http://h.example/") }, "@method", `"@method"`, "PATCH"},
		{"@method bare name uppercase", func(t testing.TB) *http.Request { return clientRequest(t, "DELETE", "http://h.example/") }, "@METHOD", `"@method"`, "DELETE"},

		// @authority: lowercase, default port of the scheme dropped, others kept.
		{"@authority lowercase", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://Agent-X.Example.COM/") }, "@authority", `"@authority"`, "agent-x.example.com"},
		{"@authority http:80", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://example.com:80/") }, "@authority", `"@authority"`, "example.com"},
		{"@authority https:443", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "https://example.com:443/") }, "@authority", `"@authority"`, "example.com"},
		{"@authority http:443 kept", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://example.com:443/") }, "@authority", `"@authority"`, "example.com:443"},
		{"@authority https:80 kept", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "https://example.com:80/") }, "@authority", `"@authority"`, "example.com:80"},
		{"@authority :3000 kept", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://localhost:3000/") }, "@authority", `"@authority"`, "localhost:3000"},
		{"@authority ipv6 default", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://[::1]:80/") }, "@authority", `"@authority"`, "[::1]"},
		{"@authority ipv6 port", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://[::1]:8080/") }, "@authority", `"@authority"`, "[::1]:8080"},
		{"@authority server Host header", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/", "WWW.Example.com:80", false)
		}, "@authority", `"@authority"`, "www.example.com"},
		{"@authority server tls 443", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/", "www.example.com:443", true)
		}, "@authority", `"@authority"`, "www.example.com"},
		{"@authority server tls 80 kept", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/", "www.example.com:80", true)
		}, "@authority", `"@authority"`, "www.example.com:80"},
		{"@authority httptest https", func(t testing.TB) *http.Request {
			return httptest.NewRequest("GET", "https://Example.com:443/x", nil)
		}, "@authority", `"@authority"`, "example.com"},

		// @target-uri, @request-target, @path.
		{"@target-uri normalized authority", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://Example.com:80/p/q?a=1&b") }, "@target-uri", `"@target-uri"`, "http://example.com/p/q?a=1&b"},
		{"@target-uri empty path", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "https://example.com:8443") }, "@target-uri", `"@target-uri"`, "https://example.com:8443/"},
		{"@target-uri server", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/a?b=c", "127.0.0.1:3000", false)
		}, "@target-uri", `"@target-uri"`, "http://127.0.0.1:3000/a?b=c"},
		{"@request-target no query", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://h.example/a/b") }, "@request-target", `"@request-target"`, "/a/b"},
		{"@request-target empty path", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://h.example?x=1") }, "@request-target", `"@request-target"`, "/?x=1"},
		{"@path empty", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://h.example") }, "@path", `"@path"`, "/"},
		{"@path escaped kept", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://h.example/a%20b/c%2Fd") }, "@path", `"@path"`, "/a%20b/c%2Fd"},
		{"@path non-ASCII escaped", func(t testing.TB) *http.Request { return clientRequest(t, "GET", "http://h.example/ünï") }, "@path", `"@path"`, "/%C3%BCn%C3%AF"},

		// @query-param, RFC 9421 §2.2.8.
		{"@query-param baz", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/path?param=value&foo=bar&baz=batman&qux=", "www.example.com", true)
		}, `"@query-param";name="baz"`, `"@query-param";name="baz"`, "batman"},
		{"@query-param qux empty", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/path?param=value&foo=bar&baz=batman&qux=", "www.example.com", true)
		}, `"@query-param";name="qux"`, `"@query-param";name="qux"`, ""},
		{"@query-param param", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/path?param=value&foo=bar&baz=batman&qux=", "www.example.com", true)
		}, `"@query-param";name="param"`, `"@query-param";name="param"`, "value"},
		{"@query-param var multiline", rfcQueryParams, `"@query-param";name="var"`, `"@query-param";name="var"`, "this%20is%20a%20big%0Amultiline%20value"},
		{"@query-param bar plus", rfcQueryParams, `"@query-param";name="bar"`, `"@query-param";name="bar"`, "with%20plus%20whitespace"},
		{"@query-param B.2.2 Pet", func(t testing.TB) *http.Request {
			return clientRequest(t, "POST", "http://example.com/foo?param=Value&Pet=dog")
		}, `"@query-param";name="Pet"`, `"@query-param";name="Pet"`, "dog"},

		// HTTP fields, RFC 9421 §2.1.
		{"field host", rfc, "host", `"host"`, "www.example.com"},
		{"field lowercased", func(t testing.TB) *http.Request {
			return clientRequest(t, "GET", "http://h.example/", "Date", "Tue, 20 Apr 2021 02:07:56 GMT")
		}, "Date", `"date"`, "Tue, 20 Apr 2021 02:07:56 GMT"},
		{"field trimmed", func(t testing.TB) *http.Request {
			return clientRequest(t, "GET", "http://h.example/", "X-OWS-Header", "   Leading and trailing whitespace.  \t")
		}, "x-ows-header", `"x-ows-header"`, "Leading and trailing whitespace."},
		{"field lines joined", func(t testing.TB) *http.Request {
			return clientRequest(t, "GET", "http://h.example/", "Cache-Control", "max-age=60", "Cache-Control", "   must-revalidate")
		}, "cache-control", `"cache-control"`, "max-age=60, must-revalidate"},
		{"field commas kept", func(t testing.TB) *http.Request {
			return clientRequest(t, "GET", "http://h.example/", "Example-Header", "value, with, lots", "Example-Header", "of, commas")
		}, "example-header", `"example-header"`, "value, with, lots, of, commas"},
		{"field empty", func(t testing.TB) *http.Request {
			return clientRequest(t, "GET", "http://h.example/", "X-Empty-Header", "")
		}, "x-empty-header", `"x-empty-header"`, ""},
		{"field raw dictionary", exampleDict, "example-dict", `"example-dict"`, "a=1,    b=2;x=1;y=2,   c=(a   b   c)"},
		{"field ;sf dictionary", exampleDict, `"example-dict";sf`, `"example-dict";sf`, "a=1, b=2;x=1;y=2, c=(a b c)"},
		{"field ;sf list", func(t testing.TB) *http.Request {
			return clientRequest(t, "GET", "http://h.example/", "X-List", "a,   b;q=1 ,c", "X-List", "(d  e)")
		}, `"x-list";sf`, `"x-list";sf`, "a, b;q=1, c, (d e)"},
		{"field ;sf item", func(t testing.TB) *http.Request {
			return clientRequest(t, "GET", "http://h.example/", "X-Item", `  "hello";  a=?1 `)
		}, `"x-item";sf`, `"x-item";sf`, `"hello";a`},
		{"field ;key inner list", rfcDict, `"example-dict";key="a"`, `"example-dict";key="a"`, "(1 2)"},
		{"field ;key integer", rfcDict, `"example-dict";key="b"`, `"example-dict";key="b"`, "3"},
		{"field ;key params", rfcDict, `"example-dict";key="c"`, `"example-dict";key="c"`, "4;aa=bb"},
		{"field ;key list params", rfcDict, `"example-dict";key="d"`, `"example-dict";key="d"`, "(5 6);valid"},
		{"field ;key boolean", exampleDict2, `"example-dict";key="e"`, `"example-dict";key="e"`, "?1"},
		{"signature-agent ;key", func(t testing.TB) *http.Request {
			return clientRequest(t, "GET", "http://h.example/", "Signature-Agent", `sig1="https://agent-x.example"`, "Signature-Agent", `sig2="https://other.example"`)
		}, `"signature-agent";key="sig2"`, `"signature-agent";key="sig2"`, `"https://other.example"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := signer.ParseComponent(tt.component)
			if err != nil {
				t.Fatalf("ParseComponent(%s) = %v", tt.component, err)
			}
			if got := c.ID(); got != tt.wantID {
				t.Errorf("ID = %s, want %s", got, tt.wantID)
			}
			got, err := c.Value(tt.req(t))
			if err != nil {
				t.Fatalf("Value(%s) = %v, want %q", tt.component, err, tt.want)
			}
			if got != tt.want {
				t.Errorf("Value(%s) = %q, want %q", tt.component, got, tt.want)
			}
		})
	}
}

// rfcQueryParams is the second request of RFC 9421 §2.2.8.
func rfcQueryParams(t testing.TB) *http.Request {
	return serverRequest(t, "GET", "/parameters?var=this%20is%20a%20big%0Amultiline%20value&bar=with+plus+whitespace&fa%C3%A7ade%22%3A%20=something", "www.example.com", true)
}

// exampleDict is RFC 9421 §2.1.1's Example-Dict.
func exampleDict(t testing.TB) *http.Request {
	return clientRequest(t, "GET", "http://h.example/", "Example-Dict", " a=1,    b=2;x=1;y=2,   c=(a   b   c)")
}

func exampleDict2(t testing.TB) *http.Request {
	return clientRequest(t, "GET", "http://h.example/", "Example-Dict", "a=1, e")
}

// rfcDict is RFC 9421 §2.1.2's Example-Dict.
func rfcDict(t testing.TB) *http.Request {
	return clientRequest(t, "GET", "http://h.example/", "Example-Dict", "  a=(1 2), b=3, c=4;aa=bb, d=(5 6);valid")
}

func TestComponentErrors(t *testing.T) {
	t.Parallel()
	plain := func(t testing.TB) *http.Request {
		return clientRequest(t, "GET", "http://h.example/p?a=1&a=2&b=3",
			"X-Dict", "a=1, b=2", "X-Text", "not a dict(", "X-Cafe", "café", "X-Ctl", "a\x01b", "X-Del", "a\x7fb")
	}
	tests := []struct {
		name      string
		req       func(t testing.TB) *http.Request
		component string
		parseErr  error // wanted from ParseComponent; nil means parse succeeds
		valueErr  error // wanted from Value
	}{
		{"unknown derived", plain, "@foo", signer.ErrUnknownComponent, nil},
		{"unknown derived quoted", plain, `"@signature-params"`, signer.ErrUnknownComponent, nil},
		{"@status on a request", plain, "@status", nil, signer.ErrInvalidComponent},
		{"bs with sf", plain, `"x-dict";bs;sf`, signer.ErrInvalidComponent, nil},
		{"bs with key", plain, `"x-dict";bs;key="a"`, signer.ErrInvalidComponent, nil},
		{"bs on a derived component", plain, `"@method";bs`, signer.ErrInvalidComponent, nil},
		{"req on a request", plain, `"x-dict";req`, nil, signer.ErrInvalidComponent},
		{"req on a derived component of a request", plain, `"@authority";req`, nil, signer.ErrInvalidComponent},
		{"tr parameter", plain, `"x-dict";tr`, signer.ErrUnknownComponent, nil},
		{"unknown parameter", plain, `"x-dict";foo=1`, signer.ErrUnknownComponent, nil},
		{"@query-param without name", plain, `"@query-param"`, signer.ErrInvalidComponent, nil},
		{"@query-param bare", plain, "@query-param", signer.ErrInvalidComponent, nil},
		{"name on a field", plain, `"x-dict";name="a"`, signer.ErrInvalidComponent, nil},
		{"key on derived", plain, `"@method";key="a"`, signer.ErrInvalidComponent, nil},
		{"sf on derived", plain, `"@authority";sf`, signer.ErrInvalidComponent, nil},
		{"key not a string", plain, `"x-dict";key=1`, signer.ErrInvalidComponent, nil},
		{"sf not boolean", plain, `"x-dict";sf=1`, signer.ErrInvalidComponent, nil},
		{"key and sf", plain, `"x-dict";key="a";sf`, signer.ErrInvalidComponent, nil},
		{"quoted uppercase", plain, `"X-Dict"`, signer.ErrInvalidComponent, nil},
		{"quoted empty", plain, `""`, signer.ErrInvalidComponent, nil},
		{"space in name", plain, `"x dict"`, signer.ErrInvalidComponent, nil},
		{"colon in name", plain, "x:dict", signer.ErrInvalidComponent, nil},
		{"unterminated", plain, `"x-dict`, signer.ErrInvalidComponent, nil},
		{"absent field", plain, "x-missing", nil, signer.ErrMissingComponent},
		{"absent content-digest", plain, "content-digest", nil, signer.ErrMissingComponent},
		{"absent dictionary member", plain, `"x-dict";key="z"`, nil, signer.ErrMissingComponent},
		{"absent query param", plain, `"@query-param";name="zz"`, nil, signer.ErrMissingComponent},
		{"repeated query param", plain, `"@query-param";name="a"`, nil, signer.ErrInvalidComponent},
		{"key on a non-dictionary", plain, `"x-text";key="a"`, nil, signer.ErrInvalidComponent},
		{"sf on a non-structured field", plain, `"x-text";sf`, nil, signer.ErrInvalidComponent},
		{"non-ASCII field", plain, "x-cafe", nil, signer.ErrInvalidComponent},
		{"control character field", plain, "x-ctl", nil, signer.ErrInvalidComponent},
		{"DEL field", plain, "x-del", nil, signer.ErrInvalidComponent},
		{"non-ASCII authority", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/", "exämple.com", false)
		}, "@authority", nil, signer.ErrInvalidComponent},
		{"non-ASCII target-uri", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/", "exämple.com", false)
		}, "@target-uri", nil, signer.ErrInvalidComponent},
		{"non-ASCII host field", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/", "exämple.com", false)
		}, "host", nil, signer.ErrInvalidComponent},
		{"absent host", func(t testing.TB) *http.Request {
			return serverRequest(t, "GET", "/", "", false)
		}, "host", nil, signer.ErrMissingComponent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := signer.ParseComponent(tt.component)
			if tt.parseErr != nil {
				if !errors.Is(err, tt.parseErr) {
					t.Fatalf("ParseComponent(%s) = %v, want %v", tt.component, err, tt.parseErr)
				}
				// The same identifier inside a Signature-Input is rejected too.
				if strings.HasPrefix(tt.component, `"`) {
					_, err := signer.SignatureBase(tt.req(t), "("+tt.component+");created=1")
					if !errors.Is(err, signer.ErrInvalidSignatureInput) {
						t.Errorf("SignatureBase with %s = %v, want ErrInvalidSignatureInput", tt.component, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseComponent(%s) = %v, want success", tt.component, err)
			}
			v, err := c.Value(tt.req(t))
			if !errors.Is(err, tt.valueErr) {
				t.Fatalf("Value(%s) = %q, %v; want %v", tt.component, v, err, tt.valueErr)
			}
			if !strings.HasPrefix(err.Error(), "signer: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			// Base construction fails the same way.
			if _, err := signer.SignatureBase(tt.req(t), "("+c.ID()+");created=1"); !errors.Is(err, tt.valueErr) {
				t.Errorf("SignatureBase(%s) = %v, want %v", c.ID(), err, tt.valueErr)
			}
		})
	}
}

func TestSignatureBaseDuplicates(t *testing.T) {
	t.Parallel()
	r := clientRequest(t, "GET", "http://h.example/", "X-Dict", "a=1, b=2", "Signature-Agent", `sig1="https://a.example"`)
	tests := []struct {
		params string
		dup    bool
	}{
		{`("@method" "@method")`, true},
		{`("@authority" "@path" "@authority")`, true},
		{`("x-dict";key="a" "x-dict";key="a")`, true},
		{`("x-dict" "x-dict")`, true},
		{`("x-dict";sf "x-dict";sf)`, true},
		{`("@query-param";name="q" "@query-param";name="q")`, true},
		{`("x-dict";key="a" "x-dict";key="b")`, false},
		{`("x-dict" "x-dict";sf)`, false},
		{`("x-dict" "x-dict";key="a")`, false},
		{`("signature-agent" "signature-agent";key="sig1")`, false},
	}
	for _, tt := range tests {
		t.Run(tt.params, func(t *testing.T) {
			t.Parallel()
			_, err := signer.SignatureBase(r, tt.params+`;created=1`)
			if got := errors.Is(err, signer.ErrDuplicateComponent); got != tt.dup {
				t.Errorf("SignatureBase(%s) = %v; duplicate error %v, want %v", tt.params, err, got, tt.dup)
			}
			if !tt.dup && err != nil {
				t.Errorf("SignatureBase(%s) = %v, want success", tt.params, err)
			}
		})
	}
	// Sign refuses duplicates in Options.Components as well.
	err := signer.Sign(clientRequest(t, "GET", "http://h.example/"), signertest.Key(1), signer.Options{Components: []string{"@authority", "@AUTHORITY"}})
	if !errors.Is(err, signer.ErrDuplicateComponent) {
		t.Errorf("Sign with a duplicate component = %v, want ErrDuplicateComponent", err)
	}
}

// TestSignatureBaseRFC rebuilds the bases of RFC 9421 §2.5 and B.2.2 over the
// B.2 request byte for byte (their signatures use RSA keys, so only the base
// is checked here).
func TestSignatureBaseRFC(t *testing.T) {
	t.Parallel()
	v := loadVectors(t)
	const digest = "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:"
	tests := []struct {
		name, params, want string
	}{
		{"§2.5", `("@method" "@authority" "@path" "content-digest" "content-length" "content-type");created=1618884473;keyid="test-key-rsa-pss"`,
			"\"@method\": POST\n\"@authority\": example.com\n\"@path\": /foo\n\"content-digest\": " + digest + "\n\"content-length\": 18\n\"content-type\": application/json\n" +
				"\"@signature-params\": (\"@method\" \"@authority\" \"@path\" \"content-digest\" \"content-length\" \"content-type\");created=1618884473;keyid=\"test-key-rsa-pss\""},
		{"B.2.2", `("@authority" "content-digest" "@query-param";name="Pet");created=1618884473;keyid="test-key-rsa-pss";tag="header-example"`,
			"\"@authority\": example.com\n\"content-digest\": " + digest + "\n\"@query-param\";name=\"Pet\": dog\n" +
				"\"@signature-params\": (\"@authority\" \"content-digest\" \"@query-param\";name=\"Pet\");created=1618884473;keyid=\"test-key-rsa-pss\";tag=\"header-example\""},
		{"B.2.3 components", `("date" "@method" "@path" "@query" "@authority" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-ed25519"`,
			"\"date\": Tue, 20 Apr 2021 02:07:55 GMT\n\"@method\": POST\n\"@path\": /foo\n\"@query\": ?param=Value&Pet=dog\n\"@authority\": example.com\n\"content-type\": application/json\n\"content-digest\": " + digest + "\n\"content-length\": 18\n" +
				"\"@signature-params\": (\"date\" \"@method\" \"@path\" \"@query\" \"@authority\" \"content-type\" \"content-digest\" \"content-length\");created=1618884473;keyid=\"test-key-ed25519\""},
		{"parameters re-serialized", `(  "@authority"   "@method" );keyid="k";created=5;  tag="t"`,
			"\"@authority\": example.com\n\"@method\": POST\n\"@signature-params\": (\"@authority\" \"@method\");keyid=\"k\";created=5;tag=\"t\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := signer.SignatureBase(v.B26.Request.Build(), tt.params)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("base =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestQueryParamEncoding covers the parts of RFC 9421 §2.2.8 where the
// name parameter and the value are the re-encoded forms: the name of the
// third parameter of the §2.2.8 example is "fa%C3%A7ade%22%3A%20", and values
// use the application/x-www-form-urlencoded percent-encode set of the URL
// standard ("*" stays, "~" becomes %7E, space becomes %20).
func TestQueryParamEncoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, target, component, want string // want "" means an error
	}{
		{"encoded name RFC 9421 §2.2.8", "/parameters?var=this%20is%20a%20big%0Amultiline%20value&bar=with+plus+whitespace&fa%C3%A7ade%22%3A%20=something",
			`"@query-param";name="fa%C3%A7ade%22%3A%20"`, "something"},
		{"decoded name is not the name", "/p?a%20b=1", `"@query-param";name="a b"`, ""},
		{"plain name and value", "/p?x=a-b_c.d", `"@query-param";name="x"`, "a-b_c.d"},
		{"reserved characters", "/p?x=a%2Fb%3Fc%26d%3De", `"@query-param";name="x"`, "a%2Fb%3Fc%26d%3De"},
		{"plus is a space", "/p?x=a+b%2Bc", `"@query-param";name="x"`, "a%20b%2Bc"},
		{"non-ASCII value", "/p?x=%C3%A7", `"@query-param";name="x"`, "%C3%A7"},
		{"star and tilde", "/p?x=a*b~c", `"@query-param";name="x"`, "a*b%7Ec"},
		{"encoded name with plus", "/p?a+b=1&c=2", `"@query-param";name="a%20b"`, "1"},
		{"same name spelled twice", "/p?a%20b=1&a+b=2", `"@query-param";name="a%20b"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := signer.ParseComponent(tt.component)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Value(serverRequest(t, "GET", tt.target, "www.example.com", true))
			if tt.want == "" {
				if err == nil {
					t.Errorf("Value(%s) = %q, want an error", tt.component, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Value(%s) = %q, %v; want %q", tt.component, got, err, tt.want)
			}
		})
	}
}

func TestIsToken(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{"GET", true},
		{"X-Tenant", true},
		{"!#$%&'*+-.^_`|~09azAZ", true},
		{"", false},
		{"X Tenant", false},
		{"X-Tenant:", false}, // ":" and "/" are sf-token characters, not tchar
		{"a/b", false},
		{"caf\u00e9", false},
		{"a\x00", false},
		{"\"quoted\"", false},
	} {
		if got := signer.IsToken(tt.in); got != tt.want {
			t.Errorf("IsToken(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
