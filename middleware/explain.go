package middleware

import (
	"log/slog"
	"net/http"

	"github.com/agentid/agentid/signer"
)

// logBaseMismatch logs, at debug level, the signature base the verifier
// built for a signature that does not verify, so that an operator can
// compare it line by line with the base the agent signed. The base holds
// only request components and signature parameters, never key material.
// It costs nothing unless debug logging is enabled.
func (v *Verifier) logBaseMismatch(r *http.Request, sig *signer.Signature, base []byte) {
	if !v.cfg.Logger.Enabled(r.Context(), slog.LevelDebug) {
		return
	}
	v.cfg.Logger.LogAttrs(r.Context(), slog.LevelDebug, "signature base mismatch",
		slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("label", sig.Label), slog.String("kid", sig.Params.KeyID),
		slog.String("base", string(base)))
}
