package refserver

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/agentid/agentid/signer"
)

// Header values of every JSON answer. They are shared by all answers and
// never modified: net/http copies the header map when the status line is
// written, and appending to a one-element slice copies it.
var (
	headerJSON    = []string{"application/json"}
	headerNoStore = []string{"no-store"}
	headerNosniff = []string{"nosniff"}
)

// writeJSON writes v as a JSON answer with status, or returns the error
// that kept it from encoding v (nothing written).
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	writeBody(w, status, append(b, '\n'))
	return nil
}

// maxUnsizedBody is the longest answer writeBody leaves without a
// Content-Length: net/http holds a body that short until the handler
// returns and then sends its length itself, with no allocation; a longer
// one is sent with Content-Length rather than chunked.
const maxUnsizedBody = 1024

// writeBody writes b, a JSON document ending in a newline, as the answer.
func writeBody(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = headerJSON
	if len(b) > maxUnsizedBody {
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
	}
	h["Cache-Control"] = headerNoStore
	h["X-Content-Type-Options"] = headerNosniff
	w.WriteHeader(status)
	w.Write(b)
}

// keyResponse is the body of whoami, rotation and (with IsNew) registration.
type keyResponse struct {
	UID          string     `json:"uid"`
	Kid          string     `json:"kid"`
	PublicJWK    signer.JWK `json:"public_jwk"`
	WellKnownURL string     `json:"well_known_url"`
	// SignatureAgent (whoami only) is the agent's identity: the key-set
	// URL its agents send in Signature-Agent, the agent origin, which
	// serves the same key set as WellKnownURL.
	SignatureAgent string `json:"signature_agent,omitempty"`
	IsNew          *bool  `json:"is_new,omitempty"`
	// State (registration only) is statePending while the agent waits for
	// an operator's review (registration mode approval); "" otherwise.
	State string `json:"state,omitempty"`
}

func (s *Server) keyResponse(uid string, jwk signer.JWK) keyResponse {
	jwk = jwk.Public()
	return keyResponse{UID: uid, Kid: jwk.Kid, PublicJWK: jwk, WellKnownURL: s.WellKnownURL(uid)}
}

// bodyBuffers hold answers being encoded (answers are small; a buffer
// that grew past 4 KiB is dropped, not kept).
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeKeyResponse writes resp with status. It is writeJSON without
// reflection.
func writeKeyResponse(w http.ResponseWriter, status int, resp keyResponse) {
	writeAppended(w, status, resp.appendJSON)
}

// writeAppended writes the JSON document add appends, and a newline, as
// the answer with status, from a pooled buffer.
func writeAppended(w http.ResponseWriter, status int, add func([]byte) []byte) {
	bp := bodyBuffers.Get().(*[]byte)
	b := append(add((*bp)[:0]), '\n')
	writeBody(w, status, b)
	if cap(b) <= 4<<10 {
		*bp = b[:0]
		bodyBuffers.Put(bp)
	}
}

// appendJSON appends what json.Marshal(k) returns.
func (k keyResponse) appendJSON(b []byte) []byte {
	b = append(b, `{"uid":`...)
	b = appendJSONString(b, k.UID)
	b = append(b, `,"kid":`...)
	b = appendJSONString(b, k.Kid)
	b = append(b, `,"public_jwk":`...)
	b = appendJWK(b, k.PublicJWK)
	b = append(b, `,"well_known_url":`...)
	b = appendJSONString(b, k.WellKnownURL)
	if k.SignatureAgent != "" {
		b = append(b, `,"signature_agent":`...)
		b = appendJSONString(b, k.SignatureAgent)
	}
	if k.IsNew != nil {
		b = append(b, `,"is_new":`...)
		b = strconv.AppendBool(b, *k.IsNew)
	}
	if k.State != "" {
		b = append(b, `,"state":`...)
		b = appendJSONString(b, k.State)
	}
	return append(b, '}')
}

// appendWhoami appends what json.Marshal writes for /whoami's answer, the
// keyResponse of uid and jwk with SignatureAgent set, without building
// its URLs as strings first.
func appendWhoami(b []byte, svc signer.ServiceURL, uid string, jwk signer.JWK) []byte {
	jwk = jwk.Public()
	b = append(b, `{"uid":`...)
	b = appendJSONString(b, uid)
	b = append(b, `,"kid":`...)
	b = appendJSONString(b, jwk.Kid)
	b = append(b, `,"public_jwk":`...)
	b = appendJWK(b, jwk)
	b = append(b, `,"well_known_url":`...)
	b = appendJSONString(b, svc.Scheme, "://", uid, ".", svc.Host, signer.DirectoryPath)
	b = append(b, `,"signature_agent":`...)
	b = appendJSONString(b, svc.Scheme, "://", uid, ".", svc.Host)
	return append(b, '}')
}

// appendJWK appends what json.Marshal(j) returns: the members in
// signer.JWK's field order, kty always, the others when not empty.
func appendJWK(b []byte, j signer.JWK) []byte {
	b = append(b, `{"kty":`...)
	b = appendJSONString(b, j.Kty)
	for _, m := range [...]struct{ name, value string }{
		{`,"crv":`, j.Crv}, {`,"x":`, j.X}, {`,"y":`, j.Y}, {`,"n":`, j.N}, {`,"e":`, j.E},
		{`,"kid":`, j.Kid}, {`,"alg":`, j.Alg}, {`,"d":`, j.D},
	} {
		if m.value != "" {
			b = append(b, m.name...)
			b = appendJSONString(b, m.value)
		}
	}
	return append(b, '}')
}

// appendJSONString appends the concatenation of parts as json.Marshal
// quotes it. Printable ASCII other than the characters json.Marshal
// escapes (" \ < > &) is copied as is; any other string is left to
// json.Marshal.
func appendJSONString(b []byte, parts ...string) []byte {
	for _, s := range parts {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				q, _ := json.Marshal(strings.Join(parts, ""))
				return append(b, q...)
			}
		}
	}
	b = append(b, '"')
	for _, s := range parts {
		b = append(b, s...)
	}
	return append(b, '"')
}
