// Package clitest holds what the tests of cmd/idcli share: fixed RSA and
// P-256 keys (Ed25519 ones come from signertest.Key), a reference server on loopback built with refserver.Open, signed requests
// and their answers, the interop peers (npm vestauth and web-bot-auth,
// driven through node) and a TCP proxy that can cut connections.
//
//	srv := clitest.StartServer(t, clitest.ServerOptions{DatabaseURL: url})
//	key := signertest.Key(1)
//	reg, err := agent.Register(ctx, srv.Client, srv.URL, key)
//	a := clitest.MustSend(t, srv.Client, clitest.WhoamiRequest(t, srv.URL, reg.UID, key))
//
// It is imported by tests only.
package clitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/agentid/agentid/signer"
)

// Answer is what a test reads from a response.
type Answer struct {
	Status int
	// Code is the error code of a JSON error body (a number, as vestauth
	// sends, in decimal), or "".
	Code string
	// UID is the "uid" of a JSON body, or "".
	UID string
	// Body is the whole body.
	Body string
}

// Send sends req with c and reads its Answer.
func Send(c *http.Client, req *http.Request) (Answer, error) {
	resp, err := c.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("%s %s: %w", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Answer{}, fmt.Errorf("%s %s: read body: %w", req.Method, req.URL, err)
	}
	var v struct {
		UID   string `json:"uid"`
		Error struct {
			Code any `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &v) // a body that is not JSON leaves the fields empty
	a := Answer{Status: resp.StatusCode, UID: v.UID, Body: string(b)}
	if v.Error.Code != nil {
		a.Code = fmt.Sprint(v.Error.Code)
	}
	return a, nil
}

// MustSend is Send that fails the test on a transport error.
func MustSend(t testing.TB, c *http.Client, req *http.Request) Answer {
	t.Helper()
	a, err := Send(c, req)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Do sends method url with http.DefaultClient: host, if not "", replaces
// the Host header; headers are set as given; a non-nil body is sent as
// application/json.
func Do(method, url, host string, headers map[string]string, body []byte) (Answer, error) {
	req, err := jsonRequest(method, url, body)
	if err != nil {
		return Answer{}, err
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return Send(http.DefaultClient, req)
}

// MustDo is Do that fails the test on a transport error.
func MustDo(t testing.TB, method, url, host string, headers map[string]string, body []byte) Answer {
	t.Helper()
	a, err := Do(method, url, host, headers, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Sign signs req with key and opts, failing the test on error.
func Sign(t testing.TB, req *http.Request, key signer.PrivateKey, opts signer.Options) *http.Request {
	t.Helper()
	if err := signer.Sign(req, key, opts); err != nil {
		t.Fatalf("sign %s %s: %v", req.Method, req.URL, err)
	}
	return req
}

// JWKBody is the body of a registration or rotation: {"public_jwk": k's
// public JWK}.
func JWKBody(k signer.PrivateKey) []byte {
	return []byte(`{"public_jwk":` + string(k.Public.JWK.MarshalPublic()) + `}`)
}

// service parses hostname, failing the test when it is not a service URL.
func service(t testing.TB, hostname string) signer.ServiceURL {
	t.Helper()
	svc, err := signer.ParseServiceURL(hostname)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// jsonRequest is method url carrying body, when not nil, as
// application/json.
func jsonRequest(method, url string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err == nil && body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, err
}

func newRequest(t testing.TB, method, url string, body []byte) *http.Request {
	t.Helper()
	req, err := jsonRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// RegisterRequest is POST hostname/agents registering key, signed by it as
// the service requires. (Tests that only need a registered agent call
// agent.Register; this is for tests that send the request themselves.)
func RegisterRequest(t testing.TB, hostname string, key signer.PrivateKey) *http.Request {
	t.Helper()
	req := newRequest(t, http.MethodPost, service(t, hostname).String()+"/agents", JWKBody(key))
	return Sign(t, req, key, signer.Options{Components: signer.WriteComponents})
}

// WhoamiRequest is GET hostname/whoami signed by uid's key, with the default
// profile.
func WhoamiRequest(t testing.TB, hostname, uid string, key signer.PrivateKey) *http.Request {
	t.Helper()
	svc := service(t, hostname)
	req := newRequest(t, http.MethodGet, svc.String()+"/whoami", nil)
	return Sign(t, req, key, signer.Options{SignatureAgent: svc.AgentOrigin(uid)})
}

// RotateRequest is PUT hostname/agents/uid/keys replacing cur with next,
// signed by both as the service requires.
func RotateRequest(t testing.TB, hostname, uid string, cur, next signer.PrivateKey) *http.Request {
	t.Helper()
	svc := service(t, hostname)
	req := newRequest(t, http.MethodPut, svc.String()+"/agents/"+uid+"/keys", JWKBody(next))
	Sign(t, req, cur, signer.Options{Components: signer.WriteComponents, SignatureAgent: svc.AgentOrigin(uid)})
	return Sign(t, req, next, signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: signer.WriteComponents})
}

// CopyRequest returns a new request with req's method, URL and headers, and
// body.
func CopyRequest(req *http.Request, body []byte) *http.Request {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	c, _ := http.NewRequest(req.Method, req.URL.String(), rd)
	c.Header = req.Header.Clone()
	return c
}
