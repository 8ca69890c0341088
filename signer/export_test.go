package signer

import "net/http"

// SignDirectoryAs is signDirectory for the vector test: it signs the base
// of an already parsed signature, so a published vector's parameter order
// can be reproduced.
var SignDirectoryAs = signDirectory

// DirectoryResponse is the response a directory signature over body covers.
func DirectoryResponse(scheme, authority string, body []byte) (*http.Response, error) {
	cd, _ := ContentDigest(body, DirectoryDigestAlg)
	return directoryResponse(scheme, authority, cd)
}

// VerifyDirectory is VerifyDirectoryDigest over body.
func VerifyDirectory(sig *Signature, pk PublicKey, scheme, authority string, body []byte) error {
	cd, _ := ContentDigest(body, DirectoryDigestAlg)
	return VerifyDirectoryDigest(sig, pk, scheme, authority, cd)
}

// The errors the tests check a failure's kind by.
var (
	ErrInvalidSignatureInput = errInvalidSignatureInput
	ErrUnknownComponent      = errUnknownComponent
	ErrInvalidComponent      = errInvalidComponent
	ErrDigestMismatch        = errDigestMismatch
	ErrDigestUnsupported     = errDigestUnsupported
	ErrInvalidJWK            = errInvalidJWK
)
