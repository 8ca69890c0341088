package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/redact"
)

// ServerError is an error answer of the service, carrying the fields of its
// JSON error body {"error":{"status","code","message"}}.
type ServerError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the stable error code such as "invalid_signature" ("" when the
	// body was not the JSON error shape).
	Code string
	// Message is the server's explanation, or a short excerpt of the body.
	Message string
	// Hint says what to check when the answer suggests the request reached
	// something other than an agentid service ("" otherwise).
	Hint string
}

func (e *ServerError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent: server answered %d", e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Hint != "" {
		b.WriteString(" (" + e.Hint + ")")
	}
	return b.String()
}

// maxResponse bounds what the client reads from the service.
const maxResponse = 1 << 20

// serverError decodes an error answer. The code may be a string (agentid)
// or a number (vestauth). An HTML page (a proxy's or another server's error
// page) is named as such, with a hint to check the service address.
func serverError(req *http.Request, resp *http.Response, body []byte) *ServerError {
	e := &ServerError{Status: resp.StatusCode}
	if IsHTML(resp.Header.Get("Content-Type"), body) {
		e.Message = "an HTML page, not agentid's JSON"
		if t := htmlTitle(body); t != "" {
			e.Message += " (" + t + ")"
		}
		e.Hint = fmt.Sprintf("is %s://%s an agentid service? check --hostname or %s", req.URL.Scheme, req.URL.Host, EnvHostname)
		return e
	}
	if code, message, ok := ParseErrorBody(body); ok {
		e.Code, e.Message = code, message
		return e
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	e.Message = msg
	return e
}

// ParseErrorBody reads the JSON error body of an answer,
// {"error":{"status","code","message"}}. The code may be a string
// (agentid) or a number (vestauth), returned as its JSON text. ok is false
// when body is not JSON of that shape (no code and no message).
func ParseErrorBody(body []byte) (code, message string, ok bool) {
	var eb struct {
		Error struct {
			Code    json.RawMessage `json:"code"`
			Message string          `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) != nil || eb.Error.Message == "" && len(eb.Error.Code) == 0 {
		return "", "", false
	}
	if json.Unmarshal(eb.Error.Code, &code) != nil {
		code = string(eb.Error.Code)
	}
	return code, eb.Error.Message, true
}

// IsHTML reports whether a response body is an HTML page rather than JSON:
// its Content-Type is text/html, or its first non-space byte is '<'.
func IsHTML(contentType string, body []byte) bool {
	if mt, _, _ := strings.Cut(contentType, ";"); strings.EqualFold(strings.TrimSpace(mt), "text/html") {
		return true
	}
	b := bytes.TrimSpace(body)
	return len(b) > 0 && b[0] == '<'
}

// htmlTitle returns the text of an HTML page's <title> (or first <h1>),
// shortened, or "".
func htmlTitle(body []byte) string {
	lower := strings.ToLower(string(body))
	for _, tag := range []string{"title", "h1"} {
		i := strings.Index(lower, "<"+tag)
		if i < 0 {
			continue
		}
		j := strings.IndexByte(lower[i:], '>')
		if j < 0 {
			continue
		}
		start := i + j + 1
		end := strings.Index(lower[start:], "</"+tag)
		if end < 0 {
			continue
		}
		t := strings.Join(strings.Fields(string(body[start:start+end])), " ")
		if t != "" {
			return signer.Truncate(t)
		}
	}
	return ""
}

// agentResponse is the body of POST /agents and PUT /agents/{uid}/keys.
type agentResponse struct {
	UID          string          `json:"uid"`
	Kid          string          `json:"kid"`
	PublicJWK    json.RawMessage `json:"public_jwk"`
	WellKnownURL string          `json:"well_known_url"`
	IsNew        *bool           `json:"is_new"`
	State        string          `json:"state"`
	// DirectorySignatures (PUT /agents/{uid}/directory-signatures) are
	// the directory signatures the service stored.
	DirectorySignatures []struct {
		KeyID string `json:"keyid"`
	} `json:"directory_signatures"`
}

// keyBody is the request body {"public_jwk": {kty, crv, x, kid}}; it never
// carries d.
func keyBody(k signer.PrivateKey) []byte {
	return jsonBody(map[string]any{"public_jwk": json.RawMessage(k.Public.JWK.MarshalPublic())})
}

// jsonBody is v as a request body (v holds no value that fails to encode).
func jsonBody(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// newJSONRequest builds a request with a JSON body (GetBody set, so it can be
// signed with content-digest and replayed on redirects).
func newJSONRequest(ctx context.Context, method, url string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("agent: %s %s: %w", method, url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// send runs req and decodes a success answer (one of ok) into agentResponse.
func send(client *http.Client, req *http.Request, ok ...int) (agentResponse, int, error) {
	if client == nil {
		client = defaultHTTPClient
	}
	resp, err := client.Do(req)
	if err != nil {
		hint := ""
		if errors.Is(err, syscall.ECONNREFUSED) {
			hint = fmt.Sprintf(" (is the service running at %s://%s? pass --hostname or set %s)", req.URL.Scheme, req.URL.Host, EnvHostname)
		}
		return agentResponse{}, 0, fmt.Errorf("agent: %s %s: %w%s", req.Method, redact.URL(req.URL.String()), err, hint)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return agentResponse{}, resp.StatusCode, fmt.Errorf("agent: %s %s: read answer: %w", req.Method, redact.URL(req.URL.String()), err)
	}
	good := false
	for _, s := range ok {
		good = good || resp.StatusCode == s
	}
	if !good {
		return agentResponse{}, resp.StatusCode, serverError(req, resp, body)
	}
	var ar agentResponse
	if IsHTML(resp.Header.Get("Content-Type"), body) {
		return agentResponse{}, resp.StatusCode, serverError(req, resp, body)
	}
	if err := json.Unmarshal(body, &ar); err != nil {
		return agentResponse{}, resp.StatusCode, fmt.Errorf("agent: %s %s: answer is not the expected JSON: %w", req.Method, redact.URL(req.URL.String()), err)
	}
	if !signer.ValidUID(ar.UID) {
		return agentResponse{}, resp.StatusCode, fmt.Errorf("agent: %s %s: answer has invalid uid %q", req.Method, redact.URL(req.URL.String()), signer.Truncate(ar.UID))
	}
	return ar, resp.StatusCode, nil
}

// checkKey verifies that the server registered exactly key.
func (ar agentResponse) checkKey(key signer.PrivateKey) error {
	if len(ar.PublicJWK) == 0 {
		return errors.New("agent: answer has no public_jwk")
	}
	pk, err := signer.ParsePublicJWK(ar.PublicJWK)
	if err != nil {
		return fmt.Errorf("agent: answer has an invalid public_jwk: %w", err)
	}
	if pk.JWK.Kid != key.KeyID() || (ar.Kid != "" && ar.Kid != key.KeyID()) {
		return fmt.Errorf("agent: the service answered with key %s, want %s", pk.JWK.Kid, key.KeyID())
	}
	return nil
}
