package signer

import "errors"

// The errors callers branch on, with errors.Is. Functions wrap them with
// what they concern (a label, a component, a member).
var (
	// ErrTooManySignatures, ErrTooManyComponents and ErrFieldTooLarge mean a
	// limit of ParseSignaturesLimited (or of ParseSignatureAgentLimited) was
	// passed.
	ErrTooManySignatures = errors.New("signer: too many signatures")
	ErrTooManyComponents = errors.New("signer: too many covered components")
	ErrFieldTooLarge     = errors.New("signer: field too large")

	// Errors about covered components (RFC 9421 §2).
	ErrMissingComponent   = errors.New("signer: covered component absent from the request")
	ErrDuplicateComponent = errors.New("signer: duplicate covered component")
	// ErrInvalidAuthority means a request's Host is not a valid host[:port]
	// (two ports, an empty port, characters a host cannot hold).
	ErrInvalidAuthority = errors.New("signer: invalid authority")

	// ErrInvalidSignatureAgent means Signature-Agent does not parse or
	// names an unusable key set; ErrTooManyAgents that it has more members
	// than allowed.
	ErrInvalidSignatureAgent = errors.New("signer: invalid signature agent")
	ErrTooManyAgents         = errors.New("signer: too many Signature-Agent members")

	// ErrBodyTooLarge is ReadBody's: the body is longer than its limit.
	ErrBodyTooLarge = errors.New("signer: body too large")

	// Errors of PublicKey.Verify: the signature's alg does not fit the
	// key, or the signature does not verify.
	ErrAlgorithmMismatch = errors.New("signer: algorithm does not match the key")
	ErrBadSignature      = errors.New("signer: signature does not verify")

	// ErrInvalidServiceURL means a service base URL is malformed.
	ErrInvalidServiceURL = errors.New("signer: invalid service URL")

	// Errors shared by key sources (middleware.KeySource implementations
	// such as keyfetch.Fetcher and the reference server's database source):
	// the key set does not hold the keyid; the key has been revoked; the
	// source refused to look at a signature agent outside its trust policy
	// (no network I/O was done).
	ErrUnknownKey     = errors.New("unknown key")
	ErrRevokedKey     = errors.New("revoked key")
	ErrUntrustedAgent = errors.New("untrusted signature agent")
)

// Errors wrapped for what their message says; no caller branches on them.
var (
	// errInvalidSignatureInput means Signature-Input or Signature does not
	// parse or pair up (RFC 9421 §4). The limit errors above wrap it too.
	errInvalidSignatureInput = errors.New("signer: invalid signature input")
	errUnknownComponent      = errors.New("signer: unknown component")
	errInvalidComponent      = errors.New("signer: invalid component")
	// Content-Digest errors (RFC 9530).
	errDigestMismatch    = errors.New("signer: content digest mismatch")
	errDigestUnsupported = errors.New("signer: no supported content digest algorithm")
	// errInvalidJWK is wrapped by every *JWKError.
	errInvalidJWK = errors.New("signer: invalid jwk")
)

// maxQuoted is how many bytes of an untrusted value (a header, a uid, a
// URL from a request or a file) an error message of the module quotes.
const maxQuoted = 64

// Truncate returns s cut to maxQuoted bytes, followed by "…" when cut: how
// the module's error messages quote untrusted values.
func Truncate(s string) string {
	if len(s) > maxQuoted {
		return s[:maxQuoted] + "…"
	}
	return s
}
