package middleware

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
	"github.com/dunglas/httpsfv"
)

// sigErrors is the one table from our codes to the Signature-Error codes
// (draft-hardt-httpbis-signature-key-09 §5.4) their refusals carry. A code
// not in it gets no Signature-Error: a refusal by policy (forbidden,
// rate_limited: §5.3 forbids the header once the signature verified), a
// limit of this service, or a failure of the service itself. The one
// refinement is in sigErrorOf: missing_components caused by a covered
// component absent from the request is invalid_signature, since the
// signature asks for too much, not too little. docs/signature-agent.md
// holds the same table, and a test compares the two.
var sigErrors = map[Code]string{
	CodeInvalidRequest:         "invalid_request",
	CodeInvalidAuthority:       "invalid_request",
	CodeMissingSignature:       "invalid_signature",
	CodeInvalidSignatureInput:  "invalid_signature",
	CodeInvalidSignature:       "invalid_signature",
	CodeExpiredSignature:       "invalid_signature",
	CodeNotYetValid:            "clock_skew",
	CodeWindowTooLong:          "invalid_signature",
	CodeMissingNonce:           "invalid_signature",
	CodeReplayedNonce:          "invalid_signature",
	CodeUnsupportedAlgorithm:   "unsupported_algorithm",
	CodeMissingComponents:      "invalid_input",
	CodeDuplicateComponent:     "invalid_signature",
	CodeTooManySignatures:      "invalid_signature",
	CodeTooManyComponents:      "invalid_signature",
	CodeSignatureTooLarge:      "invalid_signature",
	CodeNonceTooLong:           "invalid_signature",
	CodeKeyIDTooLong:           "invalid_signature",
	CodeInvalidSignatureAgent:  "invalid_key",
	CodeSignatureAgentTooLarge: "invalid_key",
	CodeUntrustedAgent:         "invalid_key",
	CodeUnknownKey:             "unknown_key",
	CodeRevokedKey:             "invalid_key",
	CodeDigestMismatch:         "invalid_signature",
}

// sigTitles are the Problem Details titles of the Signature-Error codes
// the table uses: a short summary of the problem type, the same for every
// occurrence (RFC 9457 §3.1.3).
var sigTitles = map[string]string{
	"invalid_request":       "Invalid request",
	"invalid_signature":     "Invalid signature",
	"clock_skew":            "Signature created in the future",
	"unsupported_algorithm": "Unsupported algorithm",
	"invalid_input":         "Required components not covered",
	"invalid_key":           "Invalid key",
	"unknown_key":           "Unknown key",
}

// sigFields are the Signature-Error field values without members other
// than error, one per code in sigTitles.
var sigFields = func() map[string]string {
	m := make(map[string]string, len(sigTitles))
	for c := range sigTitles {
		m[c] = signatureErrorField(c, nil)
	}
	return m
}()

// sigErrorOf returns the Signature-Error code of e, "" for none.
func sigErrorOf(e *Error) string {
	c := sigErrors[e.Code]
	if c == "invalid_input" && errors.Is(e.Err, signer.ErrMissingComponent) {
		return "invalid_signature"
	}
	return c
}

// signatureErrorField serializes the Signature-Error Dictionary (RFC 8941
// §3.2) error=code, with required_input, an Inner List of the component
// identifiers (serialized, as in Signature-Input), when there are any.
func signatureErrorField(code string, required []string) string {
	d := httpsfv.NewDictionary()
	d.Add("error", httpsfv.NewItem(httpsfv.Token(code)))
	if len(required) > 0 {
		var l httpsfv.InnerList
		for _, id := range required {
			it, err := httpsfv.UnmarshalItem([]string{id})
			if err != nil {
				continue // the verifier's own identifiers all parse
			}
			l.Items = append(l.Items, it)
		}
		l.Params = httpsfv.NewParams()
		d.Add("required_input", l)
	}
	s, err := httpsfv.Marshal(d)
	if err != nil {
		return "error=" + code
	}
	return s
}

// writeRefusal writes e with status: Signature-Error when e has a draft
// code (input is the field for invalid_input, "" for none beyond error),
// Vary: Accept, and the body r's Accept prefers: Problem Details (RFC
// 9457) or, by default, the JSON error body.
func writeRefusal(w http.ResponseWriter, r *http.Request, e *Error, status int, input string) {
	h := w.Header()
	sig := sigErrorOf(e)
	if sig != "" {
		field := sigFields[sig]
		if sig == "invalid_input" && input != "" {
			field = input
		}
		h.Set("Signature-Error", field)
	}
	addVary(h, "Accept")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	var reason keyfetch.Reason
	if e.Code == CodeUntrustedAgent || e.Code == CodeKeyFetchFailed {
		reason = keyfetch.ReasonOf(e.Err)
	}
	var b []byte
	if wantsProblem(r) {
		p := problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: e.Message, Code: e.Code, Reason: reason}
		if sig != "" {
			p.Type, p.Title = "urn:ietf:params:sig-error:"+sig, sigTitles[sig]
		}
		b, _ = json.Marshal(p)
		h.Set("Content-Type", problemType)
	} else {
		b, _ = json.Marshal(errorBody{Error: errorFields{Status: status, Code: e.Code, Message: e.Message, Reason: reason}})
		h.Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// problem is a Problem Details object (RFC 9457 §3) with our code (and,
// when the key fetcher refused, its reason) as extension members.
type problem struct {
	Type   string          `json:"type"`
	Title  string          `json:"title"`
	Status int             `json:"status"`
	Detail string          `json:"detail,omitempty"`
	Code   Code            `json:"code"`
	Reason keyfetch.Reason `json:"reason,omitempty"`
}

// addVary adds name to h's Vary unless a Vary line already names it (or
// "*"). Vary is the server's field, never the client's.
func addVary(h http.Header, name string) {
	for _, v := range h["Vary"] {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n == "*" || strings.EqualFold(n, name) {
				return
			}
		}
	}
	h.Add("Vary", name)
}
