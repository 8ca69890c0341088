package middleware

import (
	"errors"
	"net/http"
	"strings"

	"github.com/agentid/agentid/signer"
)

// Profile selects how Signature-Agent is read.
type Profile uint8

// Profiles. ProfileDeployed is the zero value.
const (
	// ProfileDeployed accepts every form deployed signers send: a string
	// or token field, dictionary members with or without ;type=
	// parameters, a covered whole field or keyed member or none, and an
	// origin meaning its well-known directory.
	ProfileDeployed Profile = iota
	// ProfileStrict01 does exactly what
	// draft-ietf-webbotauth-httpsig-protocol-01 says: Signature-Agent is a
	// dictionary; each signature covers `"signature-agent";key="<label>"`,
	// the member keyed by its own label; that member is an sf-string
	// holding an absolute URL, fetched as sent (nothing appended: an
	// origin means its root, "/"); members with parameters are ignored.
	// Each older form is refused with its own error (ErrLegacy…).
	ProfileStrict01
)

func (p Profile) String() string {
	if p == ProfileStrict01 {
		return "strict-01"
	}
	return "deployed"
}

// The reasons ProfileStrict01 refuses the forms older drafts and deployed
// signers use. Each refusal is an *Error (code invalid_signature_agent or
// missing_components) wrapping one of these; test with errors.Is.
var (
	// ErrLegacyNoSignatureAgent: the request has no Signature-Agent.
	ErrLegacyNoSignatureAgent = errors.New("middleware: protocol-01 requires Signature-Agent")
	// ErrLegacyStringField: Signature-Agent is one sf-string
	// ("https://chatgpt.com"), not a dictionary.
	ErrLegacyStringField = errors.New("middleware: Signature-Agent is a string, protocol-01 requires a dictionary")
	// ErrLegacyTokenField: Signature-Agent is one sf-token (an unquoted
	// URL such as https://duckduckgo.com), not a dictionary.
	ErrLegacyTokenField = errors.New("middleware: Signature-Agent is an unquoted token, protocol-01 requires a dictionary")
	// ErrLegacyUncovered: the signature does not cover Signature-Agent.
	ErrLegacyUncovered = errors.New("middleware: the signature does not cover its Signature-Agent member")
	// ErrLegacyWholeField: the signature covers the whole Signature-Agent
	// field ("signature-agent" without key=), not its member.
	ErrLegacyWholeField = errors.New("middleware: the signature covers the whole Signature-Agent field, not its member")
	// ErrLegacyOtherMember: the signature covers a member keyed other than
	// by its own label.
	ErrLegacyOtherMember = errors.New("middleware: the signature covers a Signature-Agent member not keyed by its label")
	// ErrLegacyMemberParams: the member keyed by the label carries
	// parameters (;type=jwks_uri, ;type=directory, ;type=cimd), so
	// protocol-01 ignores it.
	ErrLegacyMemberParams = errors.New("middleware: the Signature-Agent member carries parameters and is ignored")
	// ErrLegacyTokenMember: the member's value is an sf-token (such as
	// vestauth's sig1=agent-x.api.vestauth.com), not an sf-string URL.
	ErrLegacyTokenMember = errors.New("middleware: the Signature-Agent member is a token, not a string")
)

// strictKeySet is keySet under ProfileStrict01: it resolves the member
// keyed by sig's label, which sig must cover, to the URL sent.
func (v *Verifier) strictKeySet(r *http.Request, sig *signer.Signature) (signer.KeySet, bool, *Error) {
	cfg := &v.cfg
	vals := r.Header["Signature-Agent"]
	if len(vals) == 0 {
		return signer.KeySet{}, false, strictFail(CodeInvalidSignatureAgent, ErrLegacyNoSignatureAgent, "the Signature-Agent header is required (protocol-01)")
	}
	sa, err := signer.ParseSignatureAgentLimited(vals, cfg.Limits.MaxSignatureAgentMembers, cfg.Limits.MaxFieldBytes)
	switch {
	case errors.Is(err, signer.ErrFieldTooLarge) || errors.Is(err, signer.ErrTooManyAgents):
		return signer.KeySet{}, false, &Error{Code: CodeSignatureAgentTooLarge, Message: ClientMessage(err), Err: err}
	case err != nil:
		return signer.KeySet{}, false, &Error{Code: CodeInvalidSignatureAgent, Message: ClientMessage(err), Err: err}
	case sa.Item() && strings.HasPrefix(strings.TrimLeft(vals[0], " "), `"`):
		return signer.KeySet{}, false, strictFail(CodeInvalidSignatureAgent, ErrLegacyStringField,
			`Signature-Agent is a string; protocol-01 requires a dictionary member keyed by the signature's label (%s="https://…")`, sig.Label)
	case sa.Item():
		return signer.KeySet{}, false, strictFail(CodeInvalidSignatureAgent, ErrLegacyTokenField,
			`Signature-Agent is an unquoted token; protocol-01 requires a dictionary member keyed by the signature's label (%s="https://…")`, sig.Label)
	}
	own := `"signature-agent";key="` + sig.Label + `"`
	if !sig.Covers(own) {
		c, covered := sig.CoversName("signature-agent")
		switch {
		case !covered:
			return signer.KeySet{}, false, strictFail(CodeMissingComponents, ErrLegacyUncovered, "the signature must cover %s (protocol-01)", own)
		case c.Key == "":
			return signer.KeySet{}, false, strictFail(CodeMissingComponents, ErrLegacyWholeField, "the signature covers the whole Signature-Agent field; protocol-01 requires %s", own)
		default:
			return signer.KeySet{}, false, strictFail(CodeMissingComponents, ErrLegacyOtherMember, "the signature covers member %q; protocol-01 requires %s", signer.Truncate(c.Key), own)
		}
	}
	m, ok := sa.Member(sig.Label)
	switch {
	case !ok: // the base, built first, already needs the covered member
		return signer.KeySet{}, false, Fail(CodeInvalidSignatureAgent, "Signature-Agent has no member %q", sig.Label)
	case m.Params:
		return signer.KeySet{}, false, strictFail(CodeInvalidSignatureAgent, ErrLegacyMemberParams,
			"Signature-Agent member %q carries parameters, which protocol-01 ignores", sig.Label)
	case m.Token:
		return signer.KeySet{}, false, strictFail(CodeInvalidSignatureAgent, ErrLegacyTokenMember,
			`Signature-Agent member %q is a token; protocol-01 requires a quoted URL`, sig.Label)
	}
	ks, err := signer.ParseDirectKeySetURL(m.Value)
	if err != nil {
		return signer.KeySet{}, false, &Error{Code: CodeInvalidSignatureAgent, Message: ClientMessage(err), Err: err}
	}
	return ks, true, nil
}

func strictFail(code Code, reason error, format string, args ...any) *Error {
	e := Fail(code, format, args...)
	e.Err = reason
	return e
}
