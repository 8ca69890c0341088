package signer_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// countingBody is a request body that counts Close calls.
type countingBody struct {
	io.Reader
	closes atomic.Int32
}

func (b *countingBody) Close() error { b.closes.Add(1); return nil }

// roundTripFunc is a hand-written RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// okBase reads and closes the body like a real transport and answers 200.
// It records the request it was given.
func okBase(got **http.Request, gotBody *string) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			*gotBody = string(b)
		}
		*got = r
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
}

// requestSnapshot is a deep copy of what RoundTrip must leave unchanged.
type requestSnapshot struct {
	Method, URL, Host string
	URLStruct         url.URL
	Header, Trailer   http.Header
	ContentLength     int64
	Body              io.ReadCloser
	HasGetBody        bool
	TransferEncoding  []string
	Close             bool
}

func snapshot(r *http.Request) requestSnapshot {
	s := requestSnapshot{Method: r.Method, URL: r.URL.String(), Host: r.Host, URLStruct: *r.URL,
		Header: r.Header.Clone(), Trailer: r.Trailer.Clone(), ContentLength: r.ContentLength, Body: r.Body,
		HasGetBody: r.GetBody != nil, TransferEncoding: append([]string(nil), r.TransferEncoding...), Close: r.Close}
	if r.URL.User != nil {
		u := *r.URL.User
		s.URLStruct.User = &u
	}
	return s
}

func TestTransportDoesNotMutateRequest(t *testing.T) {
	t.Parallel()
	key := signertest.Key(20)
	tests := []struct {
		name string
		body string
		opts signer.Options
	}{
		{"default GET", "", signer.Options{}},
		{"standards with agent", "", signer.Options{SignatureAgent: "https://agent-x.example", Standards: true}},
		{"write components with body", `{"public_jwk":{"kty":"OKP"}}`, signer.Options{Components: signer.WriteComponents, SignatureAgent: "https://agent-x.example"}},
		{"every component", `{"a":1}`, signer.Options{Components: roundTripComponents[len(roundTripComponents)-1], SignatureAgent: "https://agent-x.example"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := newRoundTripRequest(t, tt.body)
			var body *countingBody
			if tt.body != "" {
				body = &countingBody{Reader: strings.NewReader(tt.body)}
				req.Body = body
			}
			// An existing signature of another label must not change.
			req.Header.Set("Signature-Input", `other=("@method");created=1`)
			req.Header.Set("Signature", "other=:AAAA:")
			before := snapshot(req)

			var sent *http.Request
			var sentBody string
			tr := &signer.Transport{Key: key, Options: tt.opts, Base: okBase(&sent, &sentBody)}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()

			if after := snapshot(req); !reflect.DeepEqual(after, before) {
				t.Errorf("RoundTrip changed the caller's request:\n got %+v\nwant %+v", after, before)
			}
			if sent == req {
				t.Fatal("Base received the caller's request, want a clone")
			}
			if sentBody != tt.body {
				t.Errorf("Base got body %q, want %q", sentBody, tt.body)
			}
			if body != nil && body.closes.Load() != 1 {
				t.Errorf("caller's body closed %d times, want 1", body.closes.Load())
			}
			// The clone carries the signature; it verifies with the body Base saw.
			sent.Body = io.NopCloser(strings.NewReader(sentBody))
			verifySignature(t, sent, "sig1", key.Public.Key)
			if _, _, err := checkSignature(req, "sig1", key.Public.Key); err == nil {
				t.Error("the caller's request carries sig1")
			}
		})
	}
}

func TestTransportClosesBodyOnError(t *testing.T) {
	t.Parallel()
	key := signertest.Key(21)
	baseErr := errors.New("base failed")
	failingBase := roundTripFunc(func(r *http.Request) (*http.Response, error) { return nil, baseErr })
	tests := []struct {
		name    string
		key     signer.PrivateKey
		opts    signer.Options
		base    http.RoundTripper
		readErr bool
		is      error
	}{
		{"empty key", signer.PrivateKey{}, signer.Options{}, failingBase, false, nil},
		{"unknown component", key, signer.Options{Components: []string{"@foo"}}, failingBase, false, signer.ErrUnknownComponent},
		{"absent component", key, signer.Options{Components: []string{"x-absent"}}, failingBase, false, signer.ErrMissingComponent},
		{"bad signature agent", key, signer.Options{SignatureAgent: "ftp://x"}, failingBase, false, signer.ErrInvalidSignatureAgent},
		{"base fails", key, signer.Options{}, failingBase, false, baseErr},
		{"base fails with digest", key, signer.Options{Components: signer.WriteComponents}, failingBase, false, baseErr},
		{"body read fails", key, signer.Options{}, failingBase, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := &countingBody{Reader: strings.NewReader(`{"x":1}`)}
			if tt.readErr {
				body.Reader = iotest.ErrReader(errors.New("read failed"))
			}
			req, err := http.NewRequest("POST", "https://example.com/agents", body)
			if err != nil {
				t.Fatal(err)
			}
			tr := &signer.Transport{Key: tt.key, Options: tt.opts, Base: tt.base}
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
				t.Fatal("RoundTrip succeeded, want an error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("RoundTrip error = %v, want %v", err, tt.is)
			}
			if got := body.closes.Load(); got != 1 {
				t.Errorf("body closed %d times, want 1", got)
			}
			if resp != nil {
				t.Errorf("response = %v with an error, want nil", resp)
			}
		})
	}
}

// TestTransportClientClosesBody: through http.Client, which reports a
// transport that does not close the body only by leaking it.
func TestTransportClientClosesBody(t *testing.T) {
	t.Parallel()
	body := &countingBody{Reader: strings.NewReader("x")}
	client := &http.Client{Transport: &signer.Transport{}} // no key
	req, err := http.NewRequest("POST", "http://127.0.0.1:1/", body)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("Do succeeded without a key")
	}
	if got := body.closes.Load(); got != 1 {
		t.Errorf("body closed %d times, want 1", got)
	}
}

// recorder is a test server that verifies sig1 and records each request's
// path and Signature-Input.
type recorder struct {
	mu     sync.Mutex
	inputs []string
	paths  []string
	errs   []error
}

func (rec *recorder) handler(pub []byte, redirect map[string]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _, err := checkSignature(r, "sig1", pub)
		rec.mu.Lock()
		rec.inputs = append(rec.inputs, strings.Join(r.Header.Values("Signature-Input"), ", "))
		rec.paths = append(rec.paths, r.URL.Path)
		rec.errs = append(rec.errs, err)
		rec.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if to, ok := redirect[r.URL.Path]; ok {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		fmt.Fprint(w, "ok")
	})
}

func TestTransportSignsEachRoundTrip(t *testing.T) {
	t.Parallel()
	key := signertest.Key(22)
	rec := &recorder{}
	srv := httptest.NewServer(rec.handler(key.Public.Key, map[string]string{"/start": "/final"}))
	defer srv.Close()
	client := &http.Client{Transport: &signer.Transport{Key: key, Options: signer.Options{Components: []string{"@authority", "@path"}}}}

	for _, path := range []string{"/one", "/one", "/start"} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s, want 200", path, resp.StatusCode, b)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got, want := rec.paths, []string{"/one", "/one", "/start", "/final"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("server saw %v, want %v", got, want)
	}
	for i, err := range rec.errs {
		if err != nil {
			t.Errorf("request %d (%s) did not verify: %v", i, rec.paths[i], err)
		}
	}
	nonces := map[string]bool{}
	for i, in := range rec.inputs {
		if strings.Count(in, "sig1=") != 1 {
			t.Errorf("request %d Signature-Input = %s, want exactly one sig1", i, in)
		}
		sigs, err := signer.ParseSignatures([]string{in}, []string{"sig1=:AAAA:"})
		if err != nil {
			t.Fatal(err)
		}
		if n := sigs[0].Params.Nonce; nonces[n] {
			t.Errorf("request %d reuses nonce %s", i, n)
		} else {
			nonces[n] = true
		}
	}
}

func TestTransportNilBaseUsesDefault(t *testing.T) {
	t.Parallel()
	key := signertest.Key(23)
	rec := &recorder{}
	srv := httptest.NewServer(rec.handler(key.Public.Key, nil))
	defer srv.Close()
	tr := &signer.Transport{Key: key, Options: signer.Options{Components: signer.WriteComponents}}
	req, err := http.NewRequest("POST", srv.URL+"/agents", strings.NewReader(`{"public_jwk":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok" {
		t.Errorf("response = %d %q, want 200 ok", resp.StatusCode, b)
	}
}

func TestTransportConcurrent(t *testing.T) {
	t.Parallel()
	key := signertest.Key(24)
	rec := &recorder{}
	srv := httptest.NewServer(rec.handler(key.Public.Key, nil))
	defer srv.Close()
	client := &http.Client{Transport: &signer.Transport{Key: key, Options: signer.Options{Components: signer.WriteComponents}}}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(srv.URL+"/w", "application/json", strings.NewReader(fmt.Sprintf(`{"n":%d}`, i)))
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Errorf("status %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
