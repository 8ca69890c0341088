package middleware

import "net/http"

// Outcome is what verification said of a request, in the four words
// envoy-web-bot-auth's x-web-bot-auth-status uses. X-Agent-Outcome, the
// access log, the metrics, the status page and the Caddy placeholders
// carry these strings; docs/outcomes.md maps them to other tools' terms.
type Outcome string

// Outcomes.
const (
	// OutcomeVerified: every check passed.
	OutcomeVerified Outcome = "verified"
	// OutcomeInvalid: a signature was checked and is wrong (malformed,
	// outside its window, not covering what is required, not verifying,
	// replayed, revoked key, body digest mismatch).
	OutcomeInvalid Outcome = "invalid"
	// OutcomeUnverified: a signature was sent but no verdict on it could
	// be reached: its key could not be found (unknown key, untrusted or
	// unreachable key set) or a store was unavailable.
	OutcomeUnverified Outcome = "unverified"
	// OutcomeNotPresent: the request carries neither Signature nor
	// Signature-Input (code missing_signature, reason "unsigned").
	OutcomeNotPresent Outcome = "not-present"
)

// Outcome is the outcome of a request refused with e: OutcomeNotPresent
// when it is unsigned, OutcomeUnverified when no verdict on its signature
// was reached (e is nil, or says its key could not be found), else
// OutcomeInvalid.
func (e *Error) Outcome() Outcome {
	if e == nil {
		return OutcomeUnverified
	}
	switch e.Code {
	case CodeMissingSignature:
		return OutcomeNotPresent
	case CodeUnknownKey, CodeUntrustedAgent, CodeKeyFetchFailed, CodeDatabaseUnavailable, CodeInternal:
		return OutcomeUnverified
	}
	return OutcomeInvalid
}

// reasonVerified is the reason of a verified request.
const reasonVerified = "verified"

// reasons is the one table from code to reason: a fixed, bounded set of
// words (never client text) that says why a request got its outcome, or
// why it was refused. A reason of one code is that code's name; codes of
// one kind share a reason named for the kind; a code DefineCode adds gets
// the reason of its status (statusReason). docs/outcomes.md lists them,
// and a test checks that list against this table.
var reasons = map[Code]string{
	CodeMissingSignature: "unsigned",

	CodeInvalidSignatureInput: "malformed_signature",
	CodeDuplicateComponent:    "malformed_signature",
	CodeInvalidSignatureAgent: "malformed_signature",
	CodeMissingNonce:          "malformed_signature",

	CodeTooManySignatures:      "field_too_large",
	CodeTooManyComponents:      "field_too_large",
	CodeSignatureTooLarge:      "field_too_large",
	CodeNonceTooLong:           "field_too_large",
	CodeKeyIDTooLong:           "field_too_large",
	CodeSignatureAgentTooLarge: "field_too_large",

	CodeMissingComponents:    "missing_components",
	CodeExpiredSignature:     "invalid_freshness",
	CodeWindowTooLong:        "invalid_freshness",
	CodeNotYetValid:          "signature_not_yet_valid",
	CodeReplayedNonce:        "replayed_nonce",
	CodeUnsupportedAlgorithm: "unsupported_algorithm",
	CodeInvalidSignature:     "invalid_signature",
	CodeRevokedKey:           "revoked_key",
	CodeDigestMismatch:       "content_digest_mismatch",
	CodeMisdirectedRequest:   "misdirected_request",
	CodeInvalidRequest:       "invalid_request",
	CodeInvalidAuthority:     "invalid_request",

	CodeUnknownKey:          "unknown_key",
	CodeUntrustedAgent:      "untrusted_signature_agent",
	CodeKeyFetchFailed:      "key_fetch_failed",
	CodeDatabaseUnavailable: "unavailable",
	CodeUpstreamUnavailable: "unavailable",
	CodeInternal:            "internal",

	CodeForbidden:        "forbidden",
	CodeRateLimited:      "rate_limited",
	CodeMethodNotAllowed: "bad_request",
	CodePayloadTooLarge:  "bad_request",
}

// statusReason is the reason of a code outside the reasons table, by its
// status.
func statusReason(status int) string {
	switch {
	case status == http.StatusForbidden:
		return "forbidden"
	case status == http.StatusTooManyRequests:
		return "rate_limited"
	case status >= 500:
		return "unavailable"
	}
	return "bad_request"
}

// Reason returns the reason of c: one of a fixed, bounded set of words
// (docs/outcomes.md), the same in X-Agent-Reason, the access log, the
// metrics' reason label and the status page.
func (c Code) Reason() string {
	if r, ok := reasons[c]; ok {
		return r
	}
	return statusReason(c.Status())
}
