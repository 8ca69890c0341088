package middleware

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/agentid/agentid/keyfetch"
)

// Code is a stable error code, sent to clients in the JSON error body. Each
// code has one HTTP status (Code.Status), in one table: the codes below are
// the verifier's and those of any HTTP service; a package above middleware
// adds its own with DefineCode (the reference server's agent_not_found,
// key_conflict, rate_limited…), so that each code is defined once, where
// it is used.
type Code string

// The error codes of the verifier and of any HTTP service.
const (
	CodeInvalidRequest         Code = "invalid_request"
	CodeInvalidAuthority       Code = "invalid_authority"
	CodeMissingSignature       Code = "missing_signature"
	CodeInvalidSignatureInput  Code = "invalid_signature_input"
	CodeInvalidSignature       Code = "invalid_signature"
	CodeExpiredSignature       Code = "expired_signature"
	CodeNotYetValid            Code = "signature_not_yet_valid"
	CodeWindowTooLong          Code = "signature_window_too_long"
	CodeMissingNonce           Code = "missing_nonce"
	CodeReplayedNonce          Code = "replayed_nonce"
	CodeUnsupportedAlgorithm   Code = "unsupported_algorithm"
	CodeMissingComponents      Code = "missing_components"
	CodeDuplicateComponent     Code = "duplicate_component"
	CodeTooManySignatures      Code = "too_many_signatures"
	CodeTooManyComponents      Code = "too_many_components"
	CodeSignatureTooLarge      Code = "signature_too_large"
	CodeNonceTooLong           Code = "nonce_too_long"
	CodeKeyIDTooLong           Code = "keyid_too_long"
	CodeInvalidSignatureAgent  Code = "invalid_signature_agent"
	CodeSignatureAgentTooLarge Code = "signature_agent_too_large"
	CodeUntrustedAgent         Code = "untrusted_signature_agent"
	CodeUnknownKey             Code = "unknown_key"
	CodeRevokedKey             Code = "revoked_key"
	CodeDigestMismatch         Code = "content_digest_mismatch"
	CodeForbidden              Code = "forbidden"
	CodeMethodNotAllowed       Code = "method_not_allowed"
	CodeMisdirectedRequest     Code = "misdirected_request"
	CodeRateLimited            Code = "rate_limited"
	CodePayloadTooLarge        Code = "payload_too_large"
	CodeInternal               Code = "internal"
	CodeKeyFetchFailed         Code = "key_fetch_failed"
	CodeUpstreamUnavailable    Code = "upstream_unavailable"
	CodeDatabaseUnavailable    Code = "database_unavailable"
)

// statuses is the one table from code to HTTP status.
var statuses = map[Code]int{
	CodeInvalidRequest:         http.StatusBadRequest,
	CodeInvalidAuthority:       http.StatusBadRequest,
	CodeMissingSignature:       http.StatusUnauthorized,
	CodeInvalidSignatureInput:  http.StatusUnauthorized,
	CodeInvalidSignature:       http.StatusUnauthorized,
	CodeExpiredSignature:       http.StatusUnauthorized,
	CodeNotYetValid:            http.StatusUnauthorized,
	CodeWindowTooLong:          http.StatusUnauthorized,
	CodeMissingNonce:           http.StatusUnauthorized,
	CodeReplayedNonce:          http.StatusUnauthorized,
	CodeUnsupportedAlgorithm:   http.StatusUnauthorized,
	CodeMissingComponents:      http.StatusUnauthorized,
	CodeDuplicateComponent:     http.StatusUnauthorized,
	CodeTooManySignatures:      http.StatusUnauthorized,
	CodeTooManyComponents:      http.StatusUnauthorized,
	CodeSignatureTooLarge:      http.StatusUnauthorized,
	CodeNonceTooLong:           http.StatusUnauthorized,
	CodeKeyIDTooLong:           http.StatusUnauthorized,
	CodeInvalidSignatureAgent:  http.StatusUnauthorized,
	CodeSignatureAgentTooLarge: http.StatusUnauthorized,
	CodeUntrustedAgent:         http.StatusUnauthorized,
	CodeUnknownKey:             http.StatusUnauthorized,
	CodeRevokedKey:             http.StatusUnauthorized,
	CodeDigestMismatch:         http.StatusUnauthorized,
	CodeForbidden:              http.StatusForbidden,
	CodeMethodNotAllowed:       http.StatusMethodNotAllowed,
	CodeMisdirectedRequest:     http.StatusMisdirectedRequest,
	CodeRateLimited:            http.StatusTooManyRequests,
	CodePayloadTooLarge:        http.StatusRequestEntityTooLarge,
	CodeInternal:               http.StatusInternalServerError,
	CodeKeyFetchFailed:         http.StatusServiceUnavailable,
	CodeUpstreamUnavailable:    http.StatusBadGateway,
	CodeDatabaseUnavailable:    http.StatusServiceUnavailable,
}

// DefineCode adds c, answered with status (4xx or 5xx), to the code table
// and returns it. Packages above middleware define their codes with it,
// each once, during package initialization:
//
//	var CodeAgentNotFound = middleware.DefineCode("agent_not_found", http.StatusNotFound)
//
// It panics if c is already defined or status is not an error status: both
// are programming errors.
func DefineCode(c Code, status int) Code {
	if _, dup := statuses[c]; dup {
		panic("middleware: error code " + string(c) + " is defined twice")
	}
	if status < 400 || status > 599 {
		panic(fmt.Sprintf("middleware: error code %s: status %d is not a 4xx or 5xx", c, status))
	}
	statuses[c] = status
	return c
}

// Status returns the HTTP status of c (500 for a code not in the table).
func (c Code) Status() int {
	if s, ok := statuses[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is a failure with a stable Code. Message is shown to the client;
// Err (if any) is for logs only.
type Error struct {
	Code    Code
	Message string
	Err     error
}

// Fail returns an *Error with a formatted client message.
func Fail(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Status returns the HTTP status of e's code.
func (e *Error) Status() int { return e.Code.Status() }

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("middleware: %s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("middleware: %s: %s", e.Code, e.Message)
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is lets errors.Is(err, &Error{Code: c}) match by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// AsError returns err as an *Error; anything else becomes 500 internal with
// no detail for the client.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: "internal error", Err: err}
}

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Status  int    `json:"status"`
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Reason is keyfetch's one-word cause (keyfetch.ReasonOf) of an
	// untrusted_signature_agent or key_fetch_failed answer, when the key
	// source is a keyfetch.Fetcher: "untrusted_host", "http_refused",
	// "private_address", "timeout", … It lets a client tell which setting
	// refused it. Absent otherwise.
	Reason keyfetch.Reason `json:"reason,omitempty"`
}

// WriteError writes err as a refusal with err's status: the JSON error
// body {"error":{"status":401,"code":"…","message":"…"}} or, when r's
// Accept prefers application/problem+json, Problem Details (RFC 9457); a
// code with a Signature-Error code (draft-hardt-httpbis-signature-key-09)
// also gets that header; docs/signature-agent.md has the table. An
// untrusted_signature_agent or key_fetch_failed error caused by keyfetch
// also carries "reason" (keyfetch.ReasonOf). r may be nil (the JSON body).
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	e := AsError(err)
	writeRefusal(w, r, e, e.Status(), "")
}
