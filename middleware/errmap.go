package middleware

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentid/agentid/signer"
)

// signerError maps a failure to parse the signature fields or to build the
// signature base to its code.
func signerError(err error) *Error {
	msg := ClientMessage(err)
	switch {
	case errors.Is(err, signer.ErrFieldTooLarge):
		return &Error{Code: CodeSignatureTooLarge, Message: msg, Err: err}
	case errors.Is(err, signer.ErrTooManySignatures):
		return &Error{Code: CodeTooManySignatures, Message: msg, Err: err}
	case errors.Is(err, signer.ErrTooManyComponents):
		return &Error{Code: CodeTooManyComponents, Message: msg, Err: err}
	case errors.Is(err, signer.ErrDuplicateComponent):
		return &Error{Code: CodeDuplicateComponent, Message: msg, Err: err}
	case errors.Is(err, signer.ErrInvalidAuthority):
		return &Error{Code: CodeInvalidAuthority, Message: msg, Err: err}
	case errors.Is(err, signer.ErrMissingComponent):
		return &Error{Code: CodeMissingComponents, Message: msg, Err: err}
	}
	return &Error{Code: CodeInvalidSignatureInput, Message: msg, Err: err}
}

func keyError(err error, set signer.KeySet, keyID string) *Error {
	where := "the key source"
	if !set.IsZero() {
		where = set.Identity()
	}
	switch {
	case errors.Is(err, signer.ErrUnknownKey):
		return &Error{Code: CodeUnknownKey, Message: fmt.Sprintf("key %q is not published by %s", signer.Truncate(keyID), where), Err: err}
	case errors.Is(err, signer.ErrRevokedKey):
		return &Error{Code: CodeRevokedKey, Message: fmt.Sprintf("key %q has been revoked", signer.Truncate(keyID)), Err: err}
	case errors.Is(err, signer.ErrUntrustedAgent):
		return &Error{Code: CodeUntrustedAgent, Message: fmt.Sprintf("signature agent %s is not trusted", where), Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeKeyFetchFailed, Message: "the request was cancelled while fetching the key", Err: err}
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeKeyFetchFailed, Message: fmt.Sprintf("the key set of %s could not be fetched", where), Err: err}
}
